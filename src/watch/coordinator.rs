//! [`ReconnectCoordinator`]: reconnect → activate → bind → replay, in
//! that order, with retries and abort checks.
//!
//! It exists so that nobody has to get the order right by hand when the
//! link returns. All side effects are injected ([`Deps`]); the coordinator
//! owns no thread and does no I/O. It keeps the reference's contract:
//!
//! * [`on_online`](ReconnectCoordinator::on_online) makes up to
//!   `max_attempts` attempts. Before each one it polls `should_continue`
//!   and returns [`ReconnectOutcome::Aborted`] when it says no. A failed
//!   attempt (`try_reconnect` returned `false` **or panicked**) is
//!   followed by `sleep(retry_delay)`, except after the last attempt:
//!   then it returns [`ReconnectOutcome::GaveUp`] at once.
//! * On success: `activate_primary`, `bind_context`, `should_continue`
//!   once more, and only then `replay`. Replay never runs before bind,
//!   and never into a link that went away during activate/bind.
//! * [`on_offline`](ReconnectCoordinator::on_offline) runs
//!   `activate_local` then `bind_context`.
//! * The two are serialised by one mutex: an `on_offline` posted during a
//!   long `on_online` runs after it; a flap is noticed through
//!   `should_continue`, which should read the live monitor state.
//!
//! It improves on the reference where the reference admits weaknesses:
//!
//! * A missing dependency cannot go unnoticed: [`Deps`] has no optional
//!   field, and [`DepsBuilder::build`] names every missing one.
//! * `Reconnected { replayed }` says whether replay actually ran, and
//!   [`OnlineReport::replay`] carries what it returned (a replay report,
//!   say) so the caller can log it.
//! * [`CoordinatorCounters`] counts attempts and outcomes for metrics;
//!   they can be read while an `on_online` is running.
//!
//! A `should_continue` that panics counts as `false` (abort).
//! `activate_primary`, `activate_local`, `bind_context`, `replay` and
//! `sleep` are not guarded: a panic in one of them propagates to the
//! caller (a [`Worker`](super::Worker) contains it) and the coordinator
//! stays usable.

use super::monitor::lock;
use crate::error::{Error, Result};
use crate::time::SharedClock;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The injected steps. Every field is required. `R` is what `replay`
/// returns (for `spool watch`, the SyncWorker run's result).
pub struct Deps<'a, R> {
    /// Try to (re)open the primary target. `false` or a panic is a failed
    /// attempt.
    pub try_reconnect: Box<dyn FnMut() -> bool + Send + 'a>,
    /// Make the reconnected primary active (`--on-online`).
    pub activate_primary: Box<dyn FnMut() + Send + 'a>,
    /// Make the local/offline side active (`--on-offline`).
    pub activate_local: Box<dyn FnMut() + Send + 'a>,
    /// Rebind per-connection context after either activate step.
    pub bind_context: Box<dyn FnMut() + Send + 'a>,
    /// Replay the spool into the primary; runs last.
    pub replay: Box<dyn FnMut() -> R + Send + 'a>,
    /// `false` aborts: polled before each attempt and before replay.
    /// Wire it to the live monitor state.
    pub should_continue: Box<dyn FnMut() -> bool + Send + 'a>,
    /// Wait between failed attempts.
    pub sleep: Box<dyn FnMut(Duration) + Send + 'a>,
}

impl<R> fmt::Debug for Deps<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Deps { .. }")
    }
}

/// One dependency of the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dependency {
    /// `try_reconnect`
    TryReconnect,
    /// `activate_primary`
    ActivatePrimary,
    /// `activate_local`
    ActivateLocal,
    /// `bind_context`
    BindContext,
    /// `replay`
    Replay,
    /// `should_continue`
    ShouldContinue,
    /// `sleep`
    Sleep,
}

impl Dependency {
    /// The dependency's field name.
    pub fn name(self) -> &'static str {
        match self {
            Dependency::TryReconnect => "try_reconnect",
            Dependency::ActivatePrimary => "activate_primary",
            Dependency::ActivateLocal => "activate_local",
            Dependency::BindContext => "bind_context",
            Dependency::Replay => "replay",
            Dependency::ShouldContinue => "should_continue",
            Dependency::Sleep => "sleep",
        }
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// [`DepsBuilder::build`] was missing these dependencies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingDependencies {
    /// Every missing one, in declaration order (never empty).
    pub missing: Vec<Dependency>,
}

impl fmt::Display for MissingDependencies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.missing.iter().map(|d| d.name()).collect();
        write!(
            f,
            "the reconnect coordinator is missing {}: {}",
            if names.len() == 1 {
                "a dependency"
            } else {
                "dependencies"
            },
            names.join(", ")
        )
    }
}

impl std::error::Error for MissingDependencies {}

impl From<MissingDependencies> for Error {
    fn from(e: MissingDependencies) -> Error {
        Error::InvalidInput(e.to_string())
    }
}

/// Builds [`Deps`] step by step; [`build`](DepsBuilder::build) refuses
/// to produce an incomplete set.
pub struct DepsBuilder<'a, R> {
    try_reconnect: Option<Box<dyn FnMut() -> bool + Send + 'a>>,
    activate_primary: Option<Box<dyn FnMut() + Send + 'a>>,
    activate_local: Option<Box<dyn FnMut() + Send + 'a>>,
    bind_context: Option<Box<dyn FnMut() + Send + 'a>>,
    replay: Option<Box<dyn FnMut() -> R + Send + 'a>>,
    should_continue: Option<Box<dyn FnMut() -> bool + Send + 'a>>,
    sleep: Option<Box<dyn FnMut(Duration) + Send + 'a>>,
}

impl<R> Default for DepsBuilder<'_, R> {
    fn default() -> Self {
        DepsBuilder {
            try_reconnect: None,
            activate_primary: None,
            activate_local: None,
            bind_context: None,
            replay: None,
            should_continue: None,
            sleep: None,
        }
    }
}

impl<R> fmt::Debug for DepsBuilder<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DepsBuilder")
            .field("missing", &self.missing())
            .finish()
    }
}

impl<'a, R> DepsBuilder<'a, R> {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set `try_reconnect`.
    pub fn try_reconnect(mut self, f: impl FnMut() -> bool + Send + 'a) -> Self {
        self.try_reconnect = Some(Box::new(f));
        self
    }

    /// Set `activate_primary`.
    pub fn activate_primary(mut self, f: impl FnMut() + Send + 'a) -> Self {
        self.activate_primary = Some(Box::new(f));
        self
    }

    /// Set `activate_local`.
    pub fn activate_local(mut self, f: impl FnMut() + Send + 'a) -> Self {
        self.activate_local = Some(Box::new(f));
        self
    }

    /// Set `bind_context`.
    pub fn bind_context(mut self, f: impl FnMut() + Send + 'a) -> Self {
        self.bind_context = Some(Box::new(f));
        self
    }

    /// Set `replay`.
    pub fn replay(mut self, f: impl FnMut() -> R + Send + 'a) -> Self {
        self.replay = Some(Box::new(f));
        self
    }

    /// Set `should_continue`.
    pub fn should_continue(mut self, f: impl FnMut() -> bool + Send + 'a) -> Self {
        self.should_continue = Some(Box::new(f));
        self
    }

    /// Set `sleep`.
    pub fn sleep(mut self, f: impl FnMut(Duration) + Send + 'a) -> Self {
        self.sleep = Some(Box::new(f));
        self
    }

    /// Set `sleep` to `clock.sleep` (a [`ManualClock`](crate::ManualClock)
    /// records instead of waiting).
    pub fn sleep_on(self, clock: SharedClock) -> Self {
        self.sleep(move |d| clock.sleep(d))
    }

    fn missing(&self) -> Vec<Dependency> {
        let have = [
            (Dependency::TryReconnect, self.try_reconnect.is_some()),
            (Dependency::ActivatePrimary, self.activate_primary.is_some()),
            (Dependency::ActivateLocal, self.activate_local.is_some()),
            (Dependency::BindContext, self.bind_context.is_some()),
            (Dependency::Replay, self.replay.is_some()),
            (Dependency::ShouldContinue, self.should_continue.is_some()),
            (Dependency::Sleep, self.sleep.is_some()),
        ];
        have.iter().filter(|(_, h)| !h).map(|(d, _)| *d).collect()
    }

    /// The complete [`Deps`], or every dependency that is missing.
    pub fn build(self) -> std::result::Result<Deps<'a, R>, MissingDependencies> {
        let missing = self.missing();
        match self {
            DepsBuilder {
                try_reconnect: Some(try_reconnect),
                activate_primary: Some(activate_primary),
                activate_local: Some(activate_local),
                bind_context: Some(bind_context),
                replay: Some(replay),
                should_continue: Some(should_continue),
                sleep: Some(sleep),
            } => Ok(Deps {
                try_reconnect,
                activate_primary,
                activate_local,
                bind_context,
                replay,
                should_continue,
                sleep,
            }),
            _ => Err(MissingDependencies { missing }),
        }
    }
}

/// Retry settings; the defaults are the reference's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectConfig {
    /// Reconnect attempts per `on_online` (default 10, at least 1).
    pub max_attempts: u32,
    /// Wait between failed attempts (default 2 s).
    pub retry_delay: Duration,
}

impl Default for ReconnectConfig {
    fn default() -> Self {
        ReconnectConfig {
            max_attempts: 10,
            retry_delay: Duration::from_secs(2),
        }
    }
}

/// How an `on_online` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconnectOutcome {
    /// Reconnected, activated and bound. `replayed` is false when the link
    /// went away during activate/bind and replay was skipped.
    Reconnected {
        /// Whether `replay` ran.
        replayed: bool,
    },
    /// Every attempt failed.
    GaveUp,
    /// `should_continue` said no before an attempt.
    Aborted,
}

impl ReconnectOutcome {
    /// The metrics label: `reconnected`, `gave_up` or `aborted`.
    pub fn label(&self) -> &'static str {
        match self {
            ReconnectOutcome::Reconnected { .. } => "reconnected",
            ReconnectOutcome::GaveUp => "gave_up",
            ReconnectOutcome::Aborted => "aborted",
        }
    }
}

impl fmt::Display for ReconnectOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconnectOutcome::Reconnected { replayed: true } => f.write_str("reconnected"),
            ReconnectOutcome::Reconnected { replayed: false } => {
                f.write_str("reconnected (replay skipped: the link went away again)")
            }
            ReconnectOutcome::GaveUp => f.write_str("gave up"),
            ReconnectOutcome::Aborted => f.write_str("aborted"),
        }
    }
}

/// What one `on_online` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnlineReport<R> {
    /// The outcome.
    pub outcome: ReconnectOutcome,
    /// `try_reconnect` calls made.
    pub attempts: u32,
    /// What `replay` returned, when it ran.
    pub replay: Option<R>,
}

/// Counters since the coordinator was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoordinatorCounters {
    /// `try_reconnect` calls.
    pub attempts: u64,
    /// `Reconnected` outcomes (with or without replay).
    pub reconnected: u64,
    /// Of those, the ones where replay was skipped.
    pub replay_skipped: u64,
    /// `GaveUp` outcomes.
    pub gave_up: u64,
    /// `Aborted` outcomes.
    pub aborted: u64,
    /// `on_offline` calls.
    pub offline: u64,
}

#[derive(Debug, Default)]
struct Counters {
    attempts: AtomicU64,
    reconnected: AtomicU64,
    replay_skipped: AtomicU64,
    gave_up: AtomicU64,
    aborted: AtomicU64,
    offline: AtomicU64,
}

/// Sequences the reconnect steps; see the module documentation.
pub struct ReconnectCoordinator<'a, R> {
    deps: Mutex<Deps<'a, R>>,
    config: ReconnectConfig,
    counters: Counters,
}

impl<R> fmt::Debug for ReconnectCoordinator<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReconnectCoordinator")
            .field("config", &self.config)
            .field("counters", &self.counters())
            .finish()
    }
}

impl<'a, R> ReconnectCoordinator<'a, R> {
    /// A coordinator over `deps`. Refuses `max_attempts == 0`.
    pub fn new(deps: Deps<'a, R>, config: ReconnectConfig) -> Result<Self> {
        if config.max_attempts == 0 {
            return Err(Error::InvalidInput(
                "reconnect attempts must be at least 1".into(),
            ));
        }
        Ok(ReconnectCoordinator {
            deps: Mutex::new(deps),
            config,
            counters: Counters::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &ReconnectConfig {
        &self.config
    }

    /// The link is back: reconnect, activate, bind, replay. Synchronous;
    /// runs on the calling thread (a worker, never the probe thread).
    pub fn on_online(&self) -> OnlineReport<R> {
        let mut guard = lock(&self.deps);
        let deps = &mut *guard;
        let max = self.config.max_attempts;
        let mut attempts = 0;
        for attempt in 1..=max {
            if !should_continue(deps) {
                return self.finish(ReconnectOutcome::Aborted, attempts, None);
            }
            attempts = attempt;
            self.counters.attempts.fetch_add(1, Ordering::SeqCst);
            let connected =
                catch_unwind(AssertUnwindSafe(|| (deps.try_reconnect)())).unwrap_or(false);
            if connected {
                (deps.activate_primary)();
                (deps.bind_context)();
                if !should_continue(deps) {
                    return self.finish(
                        ReconnectOutcome::Reconnected { replayed: false },
                        attempts,
                        None,
                    );
                }
                let replayed = (deps.replay)();
                return self.finish(
                    ReconnectOutcome::Reconnected { replayed: true },
                    attempts,
                    Some(replayed),
                );
            }
            if attempt < max {
                (deps.sleep)(self.config.retry_delay);
            }
        }
        self.finish(ReconnectOutcome::GaveUp, attempts, None)
    }

    /// The link is gone: `activate_local`, then `bind_context`.
    /// Idempotent as far as the steps are.
    pub fn on_offline(&self) {
        let mut guard = lock(&self.deps);
        let deps = &mut *guard;
        self.counters.offline.fetch_add(1, Ordering::SeqCst);
        (deps.activate_local)();
        (deps.bind_context)();
    }

    /// A snapshot of the counters; does not wait for a running
    /// `on_online`.
    pub fn counters(&self) -> CoordinatorCounters {
        let c = &self.counters;
        CoordinatorCounters {
            attempts: c.attempts.load(Ordering::SeqCst),
            reconnected: c.reconnected.load(Ordering::SeqCst),
            replay_skipped: c.replay_skipped.load(Ordering::SeqCst),
            gave_up: c.gave_up.load(Ordering::SeqCst),
            aborted: c.aborted.load(Ordering::SeqCst),
            offline: c.offline.load(Ordering::SeqCst),
        }
    }

    fn finish(
        &self,
        outcome: ReconnectOutcome,
        attempts: u32,
        replay: Option<R>,
    ) -> OnlineReport<R> {
        let c = &self.counters;
        match outcome {
            ReconnectOutcome::Reconnected { replayed } => {
                c.reconnected.fetch_add(1, Ordering::SeqCst);
                if !replayed {
                    c.replay_skipped.fetch_add(1, Ordering::SeqCst);
                }
            }
            ReconnectOutcome::GaveUp => {
                c.gave_up.fetch_add(1, Ordering::SeqCst);
            }
            ReconnectOutcome::Aborted => {
                c.aborted.fetch_add(1, Ordering::SeqCst);
            }
        }
        OnlineReport {
            outcome,
            attempts,
            replay,
        }
    }
}

/// `should_continue`, with a panic counting as "no".
fn should_continue<R>(deps: &mut Deps<'_, R>) -> bool {
    catch_unwind(AssertUnwindSafe(|| (deps.should_continue)())).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_dependencies_are_named() {
        let e = DepsBuilder::<()>::new()
            .try_reconnect(|| true)
            .activate_primary(|| {})
            .activate_local(|| {})
            .bind_context(|| {})
            .should_continue(|| true)
            .build()
            .unwrap_err();
        assert_eq!(e.missing, vec![Dependency::Replay, Dependency::Sleep]);
        assert_eq!(
            e.to_string(),
            "the reconnect coordinator is missing dependencies: replay, sleep"
        );
        let err: Error = e.into();
        assert_eq!(err.kind(), crate::ErrorKind::Data);
    }

    #[test]
    fn zero_attempts_are_refused() {
        let deps = DepsBuilder::<()>::new()
            .try_reconnect(|| true)
            .activate_primary(|| {})
            .activate_local(|| {})
            .bind_context(|| {})
            .replay(|| {})
            .should_continue(|| true)
            .sleep(|_| {})
            .build()
            .unwrap();
        let cfg = ReconnectConfig {
            max_attempts: 0,
            ..Default::default()
        };
        assert!(ReconnectCoordinator::new(deps, cfg).is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(
            ReconnectOutcome::Reconnected { replayed: false }.label(),
            "reconnected"
        );
        assert_eq!(ReconnectOutcome::GaveUp.label(), "gave_up");
        assert_eq!(ReconnectOutcome::Aborted.label(), "aborted");
    }
}
