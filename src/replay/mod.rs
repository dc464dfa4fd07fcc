//! Replay: the [`SyncWorker`] delivers pending items to a [`Target`] with
//! a durable retry budget, backoff, and a dead-letter set.
//!
//! The worker follows the reference `SyncWorker` and improves on it where
//! the reference admits a weakness:
//!
//! * A target answers with an [`Outcome`], not a bool: delivered, failed
//!   (with a reason and an optional retry-after), or rejected for good.
//!   A rejected item is dead-lettered at once, never retried.
//! * Attempts are durable: the count starts from the item's stored
//!   `attempts` and is written back after every failure together with the
//!   next retry time and the reason, so a new process continues the count.
//! * After `max_attempts` failed attempts (default 5) the item moves to
//!   the spool's dead-letter set (or to a [`DeadLetterSink`]). An item
//!   whose attempts already reach the budget when a run comes to it (an
//!   operator set them, or the budget was lowered) is dead-lettered
//!   without another attempt, the reason saying so
//!   ([`over_budget_reason`]). A failing sink is reported and the item
//!   stays pending: nothing is dropped.
//! * One run attempts an item at most once, on every backend (a local
//!   run walks the spool once in id order; a leased run's claims leave out
//!   what the run attempted already).
//! * Nothing is marked done before its delivery succeeded. A crash after a
//!   delivery and before its `done` commit redelivers the item on the next
//!   run with the same idempotency key (at-least-once).
//! * Default order is the reference's: enqueue order, and a failure does
//!   not block later items. [`ReplayOptions::ordered`] stops at the first
//!   item that fails and stays queued.
//! * Clock, sleep and randomness are injected.

pub mod backoff;
pub mod events;
pub mod exec;
pub mod follow;
mod groups;
pub mod http;
mod leased;
pub mod lock;
mod outcome;
pub mod push;
mod run;

pub use self::backoff::Backoff;
pub use self::exec::ExecTarget;
pub use self::http::HttpTarget;
pub use self::lock::ReplayLock;
pub use crate::push::retry_after::RetryAfter;

use crate::error::{Error, Result};
use crate::item::{Evidence, Item};
use crate::queue::Queue;
use crate::time::{SharedClock, Timestamp};
use events::Event;
use leased::LeasedGroup;
use outcome::DoneGroup;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a target did with one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered: the item is marked done, with what proves it.
    Delivered(Evidence),
    /// Not delivered this time; try again later.
    Failed {
        /// Why, for the item's `last_error`.
        reason: String,
        /// A retry time the target asked for (HTTP `Retry-After`).
        retry_after: Option<RetryAfter>,
    },
    /// Refused for good: the item is dead-lettered at once.
    Rejected {
        /// Why, for the dead letter's `last_error`.
        reason: String,
    },
}

impl Outcome {
    /// A failed attempt without a retry-after.
    pub fn failed(reason: impl Into<String>) -> Outcome {
        Outcome::Failed {
            reason: reason.into(),
            retry_after: None,
        }
    }
}

/// One delivery request.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// The item.
    pub item: &'a Item,
    /// 1-based number of this attempt (stored attempts + 1).
    pub attempt: u32,
    /// The item's key, or the stable `<spool-uuid>:<id>` when it has none.
    pub idempotency_key: &'a str,
    /// The spool's path, when it has one.
    pub spool_path: Option<&'a Path>,
}

/// Where replay delivers items.
pub trait Target: Send + Sync {
    /// Try to deliver one item. `Err` means the target itself cannot work
    /// (its command does not exist, say): the run stops and the item is
    /// left exactly as it was.
    fn deliver(&self, delivery: &Delivery<'_>) -> std::result::Result<Outcome, String>;

    /// A description for logs, with any secret removed.
    fn describe(&self) -> String;
}

/// Receives items that exhausted their budget or were rejected, instead
/// of the spool's own dead-letter set.
pub trait DeadLetterSink: Send + Sync {
    /// Take the item. On `Ok` the worker removes it from the spool; on
    /// `Err` it stays pending and the failure is reported.
    fn accept(&self, item: &Item, last_error: &str) -> std::result::Result<(), String>;
}

/// Why an item with `attempts` is not attempted again under a budget of
/// `max_attempts`: `attempts (2) already reach --max-attempts 2`.
pub fn over_budget_cause(attempts: u32, max_attempts: u32) -> String {
    format!("attempts ({attempts}) already reach --max-attempts {max_attempts}")
}

/// The `last_error` of an item dead-lettered without another attempt
/// because its `attempts` already reach `max_attempts` (SPEC §4), keeping
/// its previous last error visible:
/// `attempts (2) already reach --max-attempts 2; dead-lettered without
/// another attempt (last error: HTTP 503: busy)`.
pub fn over_budget_reason(attempts: u32, max_attempts: u32, last_error: Option<&str>) -> String {
    let mut reason = format!(
        "{}; dead-lettered without another attempt",
        over_budget_cause(attempts, max_attempts)
    );
    if let Some(e) = last_error.filter(|e| !e.is_empty()) {
        reason.push_str(&format!(" (last error: {e})"));
    }
    reason
}

/// Replay options; the defaults are the reference's.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Cumulative attempts before an item is dead-lettered (default 5).
    pub max_attempts: u32,
    /// Backoff between attempts of one item.
    pub backoff: Backoff,
    /// Attempt items whose next retry time is in the future.
    pub ignore_backoff: bool,
    /// Stop at the first item that fails and stays queued.
    pub ordered: bool,
    /// Attempt at most this many items.
    pub limit: Option<u64>,
    /// Stop starting new attempts after this much time.
    pub deadline: Option<Duration>,
    /// Report what would be attempted; deliver and change nothing.
    pub dry_run: bool,
    /// Deliveries in flight at once (1 = sequential). Not with `ordered`.
    pub concurrency: usize,
    /// Record delivered items as done in groups of up to this many, one
    /// commit per group (1 = every delivery is committed before the next
    /// item is sent). A group is also committed after
    /// [`GROUP_COMMIT_MAX_AGE`] and at the end of every run, so a crash
    /// redelivers at most `commit_every - 1` delivered items (with their
    /// idempotency keys), never loses one.
    pub commit_every: usize,
    /// How long a claim leases an item on a spool with leased replay
    /// (PostgreSQL; see [`crate::Leasing`]): another replayer may take the
    /// item over once it runs out. Longer than one delivery can take (the
    /// CLI's default is `--timeout` + 30s).
    pub lease: Duration,
}

/// The lease of [`ReplayOptions::lease`] by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The longest a delivered item waits in a commit group.
pub const GROUP_COMMIT_MAX_AGE: Duration = Duration::from_millis(500);

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            max_attempts: 5,
            backoff: Backoff::default(),
            ignore_backoff: false,
            ordered: false,
            limit: None,
            deadline: None,
            dry_run: false,
            concurrency: 1,
            commit_every: 1,
            lease: DEFAULT_LEASE,
        }
    }
}

/// What happened to one attempted item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Delivered and marked done.
    Delivered,
    /// Failed; stays pending until `next_retry_at`.
    Failed {
        /// The reason stored as `last_error`.
        error: String,
        /// When it may be retried.
        next_retry_at: Timestamp,
    },
    /// Moved to the dead-letter set (budget exhausted or rejected).
    DeadLettered {
        /// The reason stored as `last_error`.
        error: String,
        /// True when the target rejected it (rather than the budget).
        rejected: bool,
    },
    /// Should have been dead-lettered, but the sink failed; stays pending.
    SinkFailed {
        /// The delivery error.
        error: String,
        /// The sink's error.
        sink_error: String,
    },
    /// Dry run: would have been attempted.
    WouldAttempt,
    /// Dry run: would have been dead-lettered without an attempt, its
    /// attempts already reaching the budget.
    WouldDeadLetter {
        /// Why ([`over_budget_cause`]).
        cause: String,
    },
}

impl ItemOutcome {
    /// The item is no longer pending (delivered or dead-lettered).
    pub fn left_pending(&self) -> bool {
        matches!(
            self,
            ItemOutcome::Delivered | ItemOutcome::DeadLettered { .. }
        )
    }
}

/// Observes a run (progress bars, logs). Called from the worker's thread.
pub trait ReplayObserver: Sync {
    /// Whether [`ReplayObserver::started`] wants the number of items the
    /// run expects to attempt. Counting them takes index counts (SQLite)
    /// or a walk over the pending items (NDJSON, memory), so a run counts
    /// only for an observer that asks (a progress bar, not a log).
    fn wants_total(&self) -> bool {
        false
    }
    /// The run starts. `total` is `None` unless
    /// [`ReplayObserver::wants_total`]; then it is the number of items the
    /// run expects to attempt (or, dry, to report): the items due now —
    /// not held and, unless [`ReplayOptions::ignore_backoff`], not waiting
    /// for a retry time — at most [`ReplayOptions::limit`]. It is counted
    /// when the run starts: items enqueued during the run can take the
    /// number of attempts past it, and `--deadline`, a stop or an
    /// `--ordered` failure can end the run before it.
    fn started(&self, _total: Option<u64>) {}
    /// One item was attempted (or would be, in a dry run).
    fn attempted(&self, _item: &Item, _attempt: u32, _outcome: &ItemOutcome) {}
    /// One item was skipped (held or not due).
    fn skipped(&self, _item: &Item) {}
    /// Something happened in a push run besides an item settling
    /// (`replay --push`; see [`push::PushEvent`]).
    fn push_event(&self, _event: &push::PushEvent<'_>) {}
    /// Follow mode (`--follow`) starts, learning of new items this way.
    fn following(&self, _watching: &follow::Watching) {}
    /// Leased replay: the lease on `item` ran out before its outcome was
    /// recorded and another replayer holds it now, so the outcome of this
    /// attempt was not recorded ("lease lost"; the other replayer's wins).
    fn lease_lost(&self, _item: &Item) {}
    /// An outcome was recorded: called after the commit that recorded it
    /// (with [`ReplayOptions::commit_every`], after its group's commit),
    /// never for an outcome that was not recorded (see [`events`]).
    fn recorded(&self, _event: &events::Event) {}
}

/// Why a run ended before it had looked at every item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `stop()` (a signal).
    Stopped,
    /// `--limit` reached.
    Limit,
    /// `--deadline` passed.
    Deadline,
    /// `--ordered` and an item failed.
    OrderedFailure,
}

/// The result of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Delivered and marked done.
    pub delivered: u64,
    /// Failed and left for retry (sink failures included).
    pub failed: u64,
    /// Moved to the dead-letter set in this run.
    pub dead_lettered: u64,
    /// Of those, rejected by the target.
    pub rejected: u64,
    /// Skipped because their next retry time is in the future.
    pub not_due: u64,
    /// Skipped because they are held.
    pub held: u64,
    /// Skipped because an earlier item of their ordering group is still
    /// pending (SPEC §9).
    pub group_waiting: u64,
    /// Dry run: items that would be attempted.
    pub would_attempt: u64,
    /// Dry run: items that would be dead-lettered without an attempt
    /// (their attempts already reach the budget).
    pub would_dead_letter: u64,
    /// Why the run ended early, if it did.
    pub stopped: Option<StopReason>,
    /// True when due items were left unattempted (limit, deadline, stop,
    /// ordered failure).
    pub left_due: bool,
}

/// The exit status a replay report calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayStatus {
    /// Every due item was delivered.
    Clean,
    /// Something stays queued for retry.
    Retry,
    /// At least one item was dead-lettered.
    DeadLettered,
}

impl ReplayReport {
    /// The one-line summary `spool replay` prints (and `spool watch`
    /// logs): `delivered 3, failed 1, dead-lettered 0, not due 2, held 0`,
    /// plus why the run stopped early. A dry run says what would be
    /// attempted instead.
    pub fn summary(&self, dry_run: bool) -> String {
        let mut s = if dry_run {
            let mut s = format!("dry run: {} would be attempted", self.would_attempt);
            if self.would_dead_letter > 0 {
                s.push_str(&format!(
                    ", {} would be dead-lettered without an attempt",
                    self.would_dead_letter
                ));
            }
            s
        } else {
            format!(
                "delivered {}, failed {}, dead-lettered {}",
                self.delivered, self.failed, self.dead_lettered
            )
        };
        s.push_str(&format!(", not due {}, held {}", self.not_due, self.held));
        if self.group_waiting > 0 {
            s.push_str(&format!(
                ", waiting behind their group {}",
                self.group_waiting
            ));
        }
        s.push_str(match self.stopped {
            Some(StopReason::Stopped) => "; stopped after the item in flight",
            Some(StopReason::Limit) => "; --limit reached, due items left",
            Some(StopReason::Deadline) => "; --deadline passed, due items left",
            Some(StopReason::OrderedFailure) => "; --ordered: stopped at the first failure",
            None => "",
        });
        s
    }

    /// Add a later run's report to this one (follow mode's summary of
    /// many passes): the counts of what happened add up; what describes
    /// the spool at the end (not due, held, why the run stopped, due
    /// items left) is the later run's.
    pub fn absorb(&mut self, later: &ReplayReport) {
        self.delivered += later.delivered;
        self.failed += later.failed;
        self.dead_lettered += later.dead_lettered;
        self.rejected += later.rejected;
        self.would_attempt += later.would_attempt;
        self.would_dead_letter += later.would_dead_letter;
        self.not_due = later.not_due;
        self.held = later.held;
        self.stopped = later.stopped;
        self.left_due = later.left_due;
    }

    /// Dead letters win over retries, retries over clean.
    pub fn status(&self) -> ReplayStatus {
        if self.dead_lettered > 0 {
            ReplayStatus::DeadLettered
        } else if self.failed > 0 || self.left_due {
            ReplayStatus::Retry
        } else {
            ReplayStatus::Clean
        }
    }
}

/// A handle that stops a run after the item in flight.
#[derive(Clone, Debug, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Ask the current (or next) run to stop after the item in flight.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// True once stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The flag itself (for signal handlers).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

/// Replays a spool against a target.
pub struct SyncWorker<'a> {
    queue: &'a dyn Queue,
    target: &'a dyn Target,
    sink: Option<&'a dyn DeadLetterSink>,
    observer: Option<&'a dyn ReplayObserver>,
    opts: ReplayOptions,
    clock: SharedClock,
    rng: Mutex<Box<dyn FnMut() -> f64 + Send + 'a>>,
    stop: StopHandle,
    spool_path: Option<PathBuf>,
    run_lock: Mutex<()>,
    /// Delivered ids not yet committed as done, and when the oldest was
    /// delivered (group commit).
    done_group: Mutex<DoneGroup>,
    /// Leased replay: delivered claims not yet committed, and when the
    /// oldest was delivered.
    leased_group: Mutex<LeasedGroup>,
}

impl<'a> SyncWorker<'a> {
    /// A worker over `queue` delivering to `target`.
    pub fn new(
        queue: &'a dyn Queue,
        target: &'a dyn Target,
        opts: ReplayOptions,
        clock: SharedClock,
    ) -> Result<SyncWorker<'a>> {
        if opts.max_attempts == 0 {
            return Err(Error::InvalidInput(
                "max attempts must be at least 1".into(),
            ));
        }
        if opts.concurrency == 0 {
            return Err(Error::InvalidInput("concurrency must be at least 1".into()));
        }
        if opts.ordered && opts.concurrency > 1 {
            return Err(Error::Unsupported(
                "ordered replay delivers one item at a time; drop --concurrency or --ordered"
                    .into(),
            ));
        }
        let mut rng = fastrand::Rng::new();
        Ok(SyncWorker {
            queue,
            target,
            sink: None,
            observer: None,
            opts,
            clock,
            rng: Mutex::new(Box::new(move || rng.f64())),
            stop: StopHandle::default(),
            spool_path: None,
            run_lock: Mutex::new(()),
            done_group: Mutex::new((Vec::new(), None)),
            leased_group: Mutex::new((Vec::new(), None)),
        })
    }

    /// Tell the observer of a recorded outcome.
    fn emit(&self, event: impl FnOnce() -> Event) {
        if let Some(o) = self.observer {
            o.recorded(&event());
        }
    }

    /// Send dead letters to `sink` instead of the spool's own set.
    pub fn with_sink(mut self, sink: &'a dyn DeadLetterSink) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Report progress to `observer`.
    pub fn with_observer(mut self, observer: &'a dyn ReplayObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Use `unit` (uniform in `[0, 1)`) for jitter.
    pub fn with_random(mut self, unit: impl FnMut() -> f64 + Send + 'a) -> Self {
        self.rng = Mutex::new(Box::new(unit));
        self
    }

    /// The spool path handed to targets (`SPOOL_PATH`).
    pub fn with_spool_path(mut self, path: Option<&Path>) -> Self {
        self.spool_path = path.map(Path::to_path_buf);
        self
    }

    /// Use this stop handle (so a signal handler can be wired up first).
    pub fn with_stop_handle(mut self, stop: StopHandle) -> Self {
        self.stop = stop;
        self
    }

    /// The handle that stops a run after the item in flight.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Ask the run to stop after the item in flight (one-shot).
    pub fn stop(&self) {
        self.stop.stop()
    }
}
