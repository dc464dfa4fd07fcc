//! `watch`: the long-running daemon behind `spool watch` — probe the
//! link, and replay the spool as soon as it comes back.
//!
//! It wires the pieces of [`crate::watch`] the way the reference's
//! "End-to-end integration" does:
//!
//! ```text
//! Probe ──► NetworkMonitor ──(callbacks only post)──► Worker ──► ReconnectCoordinator
//!                                                                  └─ replay: SyncWorker over the spool
//! ```
//!
//! * **Startup.** The monitor probes once, at once
//!   ([`StartState::Probe`]). Link up: the worker runs the online
//!   sequence (reconnect → `--on-online` → bind → re-check → replay).
//!   Link down: it runs `--on-offline` once and delivers nothing until
//!   the monitor reports the link back. The startup job is posted before
//!   the monitor thread can post anything, so it always runs first.
//! * **Transitions.** The monitor's callbacks run on the probe thread and
//!   do O(1) work: going offline they ask a replay in flight to stop after
//!   its current item (so items do not burn attempts into a dead link),
//!   and both post a job to the worker, which logs the transition and
//!   runs the coordinator.
//! * **The coordinator's steps.** `try_reconnect` probes once more;
//!   `activate_primary` / `activate_local` run the `--on-online` /
//!   `--on-offline` hooks (split like `--exec`, never through a shell; a
//!   failing hook is logged and the sequence goes on); `bind_context`
//!   binds periodic replay to the side just activated; `should_continue`
//!   reads the live monitor state (and says no once stopping); `sleep`
//!   waits `retry_delay` but wakes at once on [`WatchStop::stop`].
//! * **Periodic replay.** While the link is up and bound, a replay runs
//!   every `replay_interval` (zero disables it). When the last online
//!   sequence gave up while the monitor still reports the link up (no
//!   transition will come to retry it), the tick runs the online sequence
//!   again instead, so a daemon never stays unbound on a healthy link.
//!   With periodic replay on, new items do not wait for the next tick: the
//!   main thread is woken as `replay --follow` is (a
//!   [`SpoolWatcher`] on the spool's directory, the hint confirmed by a
//!   [`ChangeCheck`] of the spool's marks) and posts a round at once
//!   ([`Trigger::Change`]) when none is queued.
//! * **Every replay round** holds the spool's [`ReplayLock`] for that
//!   round only (via [`crate::ops::replay::replay`], or
//!   [`crate::ops::replay::push`] for a [`WatchTarget::Push`]), so a cron
//!   `spool replay` and the daemon never overlap; a busy lock is logged
//!   and the round skipped. A push round that used up its request budget
//!   (or was told by the receiver to wait longer than the backoff cap)
//!   holds periodic and change rounds back for the backoff cap (or that
//!   wait), as `replay --push --follow` does; the online sequence still
//!   pushes at once when the link comes back.
//! * **Metrics** (`metrics_file`) are rewritten atomically at startup,
//!   after every transition and every replay round, and once more at the
//!   end. A failure to write them at startup is an error (a misconfigured
//!   path fails fast); later failures are logged.
//! * **Stopping.** [`WatchStop::stop`] (the CLI wires SIGTERM/SIGINT to
//!   it) stops the replay in flight after its current item, aborts a
//!   reconnect sequence at its next check, stops the monitor and the
//!   worker (jobs still queued are dropped), writes the metrics a last
//!   time and makes [`Watch::run`] return `Ok`.
//!
//! Nothing here prints: every event goes to the caller's [`WatchLog`],
//! from the thread that produced it (the caller's, or the worker's).
//! Events are never produced on the probe thread.

use crate::backend::Spool;
use crate::child::{self, Stderr};
use crate::error::{Error, Result};
use crate::item::Item;
use crate::ops::replay::{
    check_options, push, push_options, replay, PushReplay, PushTarget, ReplayRequest, TargetSpec,
};
use crate::replay::events::{Outcomes, WithOutcomes};
use crate::replay::follow::{ChangeCheck, Signal, SpoolWatcher, Woke};
use crate::replay::push::{PushEvent, PushHalt, PushOptions, PushReport, PushTransport as _};
use crate::replay::{ItemOutcome, ReplayObserver, ReplayOptions, ReplayReport, StopHandle};
use crate::time::{SharedClock, Timestamp};
use crate::tls::TlsTrust;
use crate::units::format_duration;
use crate::watch::metrics::{render_watch, write_atomic, SpoolGauges, WatchCounters, WatchMetrics};
use crate::watch::{
    CoordinatorCounters, DepsBuilder, MonitorHandle, NetworkMonitor, NetworkMonitorConfig, Probe,
    ProbeOptions, ReconnectConfig, ReconnectCoordinator, ReconnectOutcome, Shutdown, StartState,
    Worker,
};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The change check of the periodic loop never polls: the interval does.
const NO_POLL: Duration = Duration::from_secs(86_400);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Everything `spool watch` is configured with.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// `--probe`: `tcp://HOST:PORT`, `http(s)://URL` or `exec:CMD`.
    pub probe: String,
    /// `--probe-expect`: text an HTTP probe's body must contain.
    pub probe_expect: Option<String>,
    /// `--probe-timeout`: bound on one probe (default 5 s).
    pub probe_timeout: Duration,
    /// `--cacert`: what an `https://` probe trusts (the `--url` target
    /// has its own, in [`TargetSpec::Url`]'s options).
    pub probe_trust: TlsTrust,
    /// `--interval`: time between probes (default 5 s).
    pub interval: Duration,
    /// `--failure-threshold`: failed probes in a row before going offline
    /// (default 3).
    pub failure_threshold: u32,
    /// `--online-threshold`: good probes in a row before going online
    /// (default 1).
    pub online_threshold: u32,
    /// `--reconnect-attempts`: attempts per online sequence (default 10).
    pub reconnect_attempts: u32,
    /// `--retry-delay`: wait between failed attempts (default 2 s).
    pub retry_delay: Duration,
    /// `--on-online`: the command run when the link comes back.
    pub on_online: Option<String>,
    /// `--on-offline`: the command run when the link goes away.
    pub on_offline: Option<String>,
    /// Bound on one hook run (the CLI uses `--timeout`).
    pub hook_timeout: Duration,
    /// `--replay-interval`: replay this often while online (zero: only
    /// on reconnect).
    pub replay_interval: Duration,
    /// `--metrics-file`: where to write the Prometheus text.
    pub metrics_file: Option<PathBuf>,
    /// Where to deliver.
    pub target: WatchTarget,
    /// How to replay (every round). For a push, the options `replay
    /// --push` takes of them (others are refused by [`Watch::new`]).
    pub options: ReplayOptions,
    /// How long a round waits for another replay's lock before skipping.
    pub wait: Duration,
    /// The clock for log times, backoff and metrics.
    pub clock: SharedClock,
    /// Where every round's recorded outcomes go (`--events`,
    /// `--on-dead`); the caller finishes it after [`Watch::run`].
    pub outcomes: Option<Arc<Outcomes>>,
}

impl WatchConfig {
    /// The defaults of SPEC §5 for `probe` and `target`.
    pub fn new(probe: impl Into<String>, target: impl Into<WatchTarget>) -> WatchConfig {
        WatchConfig {
            probe: probe.into(),
            probe_expect: None,
            probe_timeout: Duration::from_secs(5),
            probe_trust: TlsTrust::default(),
            interval: Duration::from_secs(5),
            failure_threshold: 3,
            online_threshold: 1,
            reconnect_attempts: 10,
            retry_delay: Duration::from_secs(2),
            on_online: None,
            on_offline: None,
            hook_timeout: Duration::from_secs(30),
            replay_interval: Duration::from_secs(60),
            metrics_file: None,
            target: target.into(),
            options: ReplayOptions::default(),
            wait: Duration::ZERO,
            clock: crate::time::system_clock(),
            outcomes: None,
        }
    }
}

/// Where `watch` delivers: item by item (`--exec`, `--url`: every round
/// is a `replay`) or to a push receiver (`--push`: every round is a
/// `replay --push` run).
#[derive(Clone, Debug)]
pub enum WatchTarget {
    /// `--exec CMD` or `--url URL`.
    Replay(TargetSpec),
    /// `--push URL`.
    Push {
        /// The receiver.
        target: PushTarget,
        /// Entries per request (`--batch`).
        batch: usize,
        /// Body bytes per request (`--batch-bytes`).
        batch_bytes: u64,
    },
}

impl From<TargetSpec> for WatchTarget {
    fn from(t: TargetSpec) -> WatchTarget {
        WatchTarget::Replay(t)
    }
}

/// A checked [`WatchTarget`] with the options of its rounds.
#[derive(Clone, Debug)]
enum Delivery {
    Replay {
        target: TargetSpec,
        options: ReplayOptions,
    },
    Push {
        target: PushTarget,
        options: PushOptions,
    },
}

/// Which hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// `--on-online`
    Online,
    /// `--on-offline`
    Offline,
}

impl HookKind {
    /// The flag's name.
    pub fn flag(self) -> &'static str {
        match self {
            HookKind::Online => "--on-online",
            HookKind::Offline => "--on-offline",
        }
    }

    fn event(self) -> &'static str {
        match self {
            HookKind::Online => "online",
            HookKind::Offline => "offline",
        }
    }
}

/// Why a replay round ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The link was up at startup.
    Startup,
    /// The link came back.
    Reconnect,
    /// `--replay-interval` while online.
    Periodic,
    /// New items (a change to the spool's files) while online.
    Change,
}

impl Trigger {
    /// A word for logs.
    pub fn name(self) -> &'static str {
        match self {
            Trigger::Startup => "startup",
            Trigger::Reconnect => "reconnect",
            Trigger::Periodic => "periodic",
            Trigger::Change => "change",
        }
    }
}

/// What one replay round did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// The SyncWorker ran.
    Ran(ReplayReport),
    /// The push sender ran (`--push`).
    Pushed(PushReport),
    /// Another replay held the spool's lock; nothing was attempted.
    Locked {
        /// The lock holder, as it describes itself.
        holder: String,
    },
    /// The round could not run (the target cannot work, an I/O error).
    Failed(String),
    /// Not started: stopping, the link went down just before, or the
    /// last push round asked for a wait.
    Skipped(&'static str),
}

/// How much an event matters (the CLI filters on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Per-item outcomes, failed reconnect attempts, hooks that worked,
    /// idle periodic rounds.
    Detail,
    /// Start and stop, transitions, outcomes, replay summaries.
    Info,
    /// Something an operator may want to look at: a failing hook, a
    /// dead letter, a busy lock, giving up.
    Warn,
    /// Something is broken: a round that could not run, metrics that
    /// cannot be written.
    Error,
}

impl Level {
    /// The level's name in log lines.
    pub fn name(self) -> &'static str {
        match self {
            Level::Detail => "detail",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// Something the daemon did or saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// The daemon started; the first probe said `online`.
    Started {
        /// The spool's path.
        spool: PathBuf,
        /// The probe, without credentials.
        probe: String,
        /// The target, without credentials.
        target: String,
        /// The result of the first probe.
        online: bool,
        /// Why the first probe failed.
        reason: Option<String>,
    },
    /// The monitor reported the link gone.
    WentOffline {
        /// The last probe's failure.
        reason: Option<String>,
    },
    /// The monitor reported the link back.
    WentOnline,
    /// The last online sequence gave up although the monitor still
    /// reports the link up: a periodic tick runs it again.
    Rebinding,
    /// One reconnect attempt failed.
    AttemptFailed {
        /// 1-based attempt number.
        attempt: u32,
        /// `--reconnect-attempts`.
        max: u32,
        /// The probe's failure.
        reason: String,
    },
    /// How an online sequence ended.
    Outcome {
        /// The coordinator's outcome.
        outcome: ReconnectOutcome,
        /// Reconnect attempts made.
        attempts: u32,
    },
    /// A hook ran.
    Hook {
        /// Which one.
        which: HookKind,
        /// The command, as given.
        command: String,
        /// `Err` with the exit status and stderr tail when it failed.
        result: std::result::Result<(), String>,
    },
    /// A replay round ended.
    Replay {
        /// Why it ran.
        trigger: Trigger,
        /// What it did.
        round: Round,
        /// True when the round was asked to stop early (link down or
        /// stopping) and did.
        interrupted: bool,
    },
    /// Something a push round did besides settling items (`--push`).
    Push(PushNote),
    /// One item was attempted in a round.
    Item {
        /// The item's id.
        id: u64,
        /// 1-based attempt number.
        attempt: u32,
        /// What happened.
        outcome: ItemOutcome,
    },
    /// The metrics file could not be written.
    MetricsFailed {
        /// Why.
        error: String,
    },
    /// Stopping was asked for.
    Stopping,
    /// The daemon stopped.
    Stopped {
        /// Totals since start.
        counters: WatchCounters,
    },
}

impl WatchEvent {
    /// A stable name for the event (`--json` logs).
    pub fn name(&self) -> &'static str {
        match self {
            WatchEvent::Started { .. } => "started",
            WatchEvent::WentOffline { .. } => "offline",
            WatchEvent::WentOnline => "online",
            WatchEvent::Rebinding => "rebinding",
            WatchEvent::AttemptFailed { .. } => "attempt_failed",
            WatchEvent::Outcome { .. } => "outcome",
            WatchEvent::Hook { .. } => "hook",
            WatchEvent::Replay { .. } => "replay",
            WatchEvent::Push(_) => "push",
            WatchEvent::Item { .. } => "item",
            WatchEvent::MetricsFailed { .. } => "metrics_failed",
            WatchEvent::Stopping => "stopping",
            WatchEvent::Stopped { .. } => "stopped",
        }
    }

    /// How much the event matters.
    pub fn level(&self) -> Level {
        match self {
            WatchEvent::Started { .. }
            | WatchEvent::WentOffline { .. }
            | WatchEvent::WentOnline
            | WatchEvent::Rebinding
            | WatchEvent::Stopping
            | WatchEvent::Stopped { .. } => Level::Info,
            WatchEvent::AttemptFailed { .. } => Level::Detail,
            WatchEvent::Outcome { outcome, .. } => match outcome {
                ReconnectOutcome::GaveUp => Level::Warn,
                _ => Level::Info,
            },
            WatchEvent::Hook { result, .. } => match result {
                Ok(()) => Level::Detail,
                Err(_) => Level::Warn,
            },
            WatchEvent::Replay { round, trigger, .. } => match round {
                Round::Ran(r) if r.dead_lettered > 0 => Level::Warn,
                // An idle periodic round says nothing unless asked.
                Round::Ran(r) if *trigger == Trigger::Periodic && is_idle(r) => Level::Detail,
                // A round woken by a change that found nothing to attempt
                // (the change was its own last round's writes) too.
                Round::Ran(r)
                    if *trigger == Trigger::Change
                        && r.delivered + r.failed + r.dead_lettered == 0
                        && r.stopped.is_none() =>
                {
                    Level::Detail
                }
                Round::Ran(_) => Level::Info,
                Round::Pushed(r) if r.refusal().is_some() => Level::Error,
                Round::Pushed(r) if r.dead_lettered() > 0 => Level::Warn,
                Round::Pushed(r) if *trigger == Trigger::Periodic && is_idle_push(r) => {
                    Level::Detail
                }
                Round::Pushed(r)
                    if *trigger == Trigger::Change && r.requests == 0 && r.halt.is_none() =>
                {
                    Level::Detail
                }
                Round::Pushed(_) => Level::Info,
                Round::Locked { .. } => Level::Warn,
                Round::Failed(_) => Level::Error,
                Round::Skipped(_) => Level::Detail,
            },
            WatchEvent::Push(note) => match note {
                PushNote::OverAck { .. } => Level::Warn,
                PushNote::Halved { .. } => Level::Info,
                _ => Level::Detail,
            },
            WatchEvent::Item { outcome, .. } => match outcome {
                ItemOutcome::DeadLettered { .. } | ItemOutcome::SinkFailed { .. } => Level::Warn,
                _ => Level::Detail,
            },
            WatchEvent::MetricsFailed { .. } => Level::Error,
        }
    }
}

/// A round that looked at nothing: no item pending at all.
fn is_idle(r: &ReplayReport) -> bool {
    r.delivered == 0
        && r.failed == 0
        && r.dead_lettered == 0
        && r.not_due == 0
        && r.held == 0
        && r.would_attempt == 0
        && r.would_dead_letter == 0
        && r.stopped.is_none()
}

/// A push round that found nothing to send, resend or wait for.
fn is_idle_push(r: &PushReport) -> bool {
    r.requests == 0
        && r.in_flight == 0
        && r.not_due == 0
        && r.held == 0
        && r.would_send == 0
        && r.would_resend == 0
        && r.halt.is_none()
}

/// A push round's events besides items, owned (see
/// [`PushEvent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushNote {
    /// A request goes out.
    Sending {
        /// Its first sequence number.
        first: u64,
        /// Its last sequence number.
        last: u64,
        /// Item entries in it.
        items: usize,
        /// Skip entries in it.
        skips: usize,
        /// Body bytes (before compression).
        bytes: usize,
    },
    /// The receiver acknowledged up to `last_seq`.
    Acked {
        /// The new watermark.
        last_seq: u64,
        /// Entries applied now.
        applied: u64,
        /// Entries it had already.
        duplicates: u64,
    },
    /// The receiver claimed more than was ever sent (ignored).
    OverAck {
        /// The receiver's `last_seq`.
        claimed: u64,
        /// The highest number this spool assigned.
        highest: u64,
    },
    /// A request failed.
    RequestFailed {
        /// Why.
        reason: String,
        /// Consecutive failed requests so far.
        failures: u32,
        /// The bound on them.
        max: u32,
        /// The wait before the next try; `None` when the round gives up.
        retry_in: Option<Duration>,
    },
    /// The receiver refused a body as too large: smaller ones follow.
    Halved {
        /// Entries per request from now on.
        max_entries: usize,
        /// Body bytes per request from now on.
        max_bytes: u64,
    },
    /// The receiver asked to resend from `from`.
    Resend {
        /// The first number of the next request.
        from: u64,
    },
    /// Dry run: this entry would be sent.
    WouldSend {
        /// Its number.
        seq: u64,
        /// The item's id; `None` for a skip entry.
        item: Option<u64>,
        /// True for an entry already in flight.
        in_flight: bool,
    },
}

impl PushNote {
    /// The note for `e`.
    pub fn of(e: &PushEvent<'_>) -> PushNote {
        match e {
            PushEvent::Sending {
                first,
                last,
                items,
                skips,
                bytes,
            } => PushNote::Sending {
                first: *first,
                last: *last,
                items: *items,
                skips: *skips,
                bytes: *bytes,
            },
            PushEvent::Acked {
                last_seq,
                applied,
                duplicates,
            } => PushNote::Acked {
                last_seq: *last_seq,
                applied: *applied,
                duplicates: *duplicates,
            },
            PushEvent::OverAck { claimed, highest } => PushNote::OverAck {
                claimed: *claimed,
                highest: *highest,
            },
            PushEvent::RequestFailed {
                reason,
                failures,
                max,
                retry_in,
            } => PushNote::RequestFailed {
                reason: (*reason).to_string(),
                failures: *failures,
                max: *max,
                retry_in: *retry_in,
            },
            PushEvent::Halved {
                max_entries,
                max_bytes,
            } => PushNote::Halved {
                max_entries: *max_entries,
                max_bytes: *max_bytes,
            },
            PushEvent::Resend { from } => PushNote::Resend { from: *from },
            PushEvent::WouldSend {
                seq,
                item,
                in_flight,
            } => PushNote::WouldSend {
                seq: *seq,
                item: item.map(|i| i.id),
                in_flight: *in_flight,
            },
        }
    }
}

impl fmt::Display for PushNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushNote::Sending {
                first,
                last,
                items,
                skips,
                bytes,
            } => write!(
                f,
                "push: sending sequence {first}..{last} ({items} items, {skips} skips, {bytes} bytes)"
            ),
            PushNote::Acked {
                last_seq,
                applied,
                duplicates,
            } => write!(
                f,
                "push: acknowledged up to {last_seq} ({applied} applied, {duplicates} duplicates)"
            ),
            PushNote::OverAck { claimed, highest } => write!(
                f,
                "push: the receiver acknowledged up to sequence {claimed}, but this spool has \
                 assigned only up to {highest}; the excess is ignored (does the receiver hold \
                 another client's history under this spool's uuid?)"
            ),
            PushNote::RequestFailed {
                reason,
                failures,
                max,
                retry_in,
            } => match retry_in {
                Some(d) => write!(
                    f,
                    "{reason} (failed request {failures} of {max}); resending in {}",
                    format_duration(*d)
                ),
                None => write!(
                    f,
                    "{reason} (failed request {failures} of {max}); no more requests in this round"
                ),
            },
            PushNote::Halved {
                max_entries,
                max_bytes,
            } => write!(
                f,
                "push: the receiver refused a request as too large; at most {max_entries} \
                 entries and {max_bytes} bytes per request from now on"
            ),
            PushNote::Resend { from } => {
                write!(f, "push: the receiver asked to resend from sequence {from}")
            }
            PushNote::WouldSend {
                seq,
                item,
                in_flight,
            } => {
                let verb = if *in_flight { "resend" } else { "send" };
                match item {
                    Some(id) => write!(f, "push: would {verb} item {id} as sequence {seq}"),
                    None => write!(f, "push: would {verb} a skip entry as sequence {seq}"),
                }
            }
        }
    }
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for WatchEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchEvent::Started {
                spool,
                probe,
                target,
                online,
                reason,
            } => {
                write!(
                    f,
                    "watching {} (probe {probe}, target {target}): link {}",
                    spool.display(),
                    if *online { "up" } else { "down" }
                )?;
                match reason {
                    Some(r) => write!(f, " ({r})"),
                    None => Ok(()),
                }
            }
            WatchEvent::WentOffline { reason } => match reason {
                Some(r) => write!(f, "link offline: {r}"),
                None => f.write_str("link offline"),
            },
            WatchEvent::WentOnline => f.write_str("link online"),
            WatchEvent::Rebinding => {
                f.write_str("the link is still up after giving up: running the online sequence again")
            }
            WatchEvent::AttemptFailed {
                attempt,
                max,
                reason,
            } => write!(f, "reconnect attempt {attempt}/{max} failed: {reason}"),
            WatchEvent::Outcome { outcome, attempts } => {
                let tries = plural(u64::from(*attempts), "attempt", "attempts");
                match outcome {
                    ReconnectOutcome::Reconnected { replayed: true } => {
                        write!(f, "reconnected after {tries}")
                    }
                    ReconnectOutcome::Reconnected { replayed: false } => write!(
                        f,
                        "reconnected after {tries}; replay skipped: the link went away again"
                    ),
                    ReconnectOutcome::GaveUp => write!(f, "gave up reconnecting after {tries}"),
                    ReconnectOutcome::Aborted => write!(
                        f,
                        "aborted reconnecting after {tries}: the link went away again or the \
                         daemon is stopping"
                    ),
                }
            }
            WatchEvent::Hook {
                which,
                command,
                result,
            } => match result {
                Ok(()) => write!(f, "hook {} ran: {command}", which.flag()),
                Err(e) => write!(f, "hook {} failed: {e}", which.flag()),
            },
            WatchEvent::Replay {
                trigger,
                round,
                interrupted,
            } => {
                let t = trigger.name();
                match round {
                    Round::Ran(r) => {
                        write!(f, "replay ({t}): {}", r.summary(r.would_attempt + r.would_dead_letter > 0))?;
                        if *interrupted && r.stopped.is_some() {
                            f.write_str(" (link down or stopping)")?;
                        }
                        Ok(())
                    }
                    Round::Pushed(r) => {
                        write!(f, "push ({t}): {}", r.summary(r.would_send + r.would_resend > 0))?;
                        if let Some(stop) = r.refusal() {
                            write!(f, ": {}", stop.message)?;
                        } else if let (Some(_), Some(e)) = (&r.halt, &r.last_error) {
                            write!(f, "; last error: {e}")?;
                        }
                        if *interrupted && r.halt == Some(PushHalt::Signal) {
                            f.write_str(" (link down or stopping)")?;
                        }
                        Ok(())
                    }
                    Round::Locked { holder } => write!(
                        f,
                        "replay ({t}) skipped: another replay holds the spool ({holder})"
                    ),
                    Round::Failed(e) => write!(f, "replay ({t}) failed: {e}"),
                    Round::Skipped(why) => write!(f, "replay ({t}) skipped: {why}"),
                }
            }
            WatchEvent::Item {
                id,
                attempt,
                outcome,
            } => match outcome {
                ItemOutcome::Delivered => write!(f, "item {id}: delivered (attempt {attempt})"),
                ItemOutcome::Failed {
                    error,
                    next_retry_at,
                } => write!(
                    f,
                    "item {id}: attempt {attempt} failed: {error}; next try at {next_retry_at}"
                ),
                ItemOutcome::DeadLettered { error, rejected } => write!(
                    f,
                    "item {id}: dead-lettered after attempt {attempt} ({}): {error}",
                    if *rejected {
                        "rejected by the target"
                    } else {
                        "out of attempts"
                    }
                ),
                ItemOutcome::SinkFailed { error, sink_error } => write!(
                    f,
                    "item {id}: could not be dead-lettered ({sink_error}); it stays pending: {error}"
                ),
                ItemOutcome::WouldAttempt => {
                    write!(f, "item {id}: would be attempted (attempt {attempt})")
                }
                ItemOutcome::WouldDeadLetter { cause } => {
                    write!(f, "item {id}: would be dead-lettered: {cause}")
                }
            },
            WatchEvent::Push(note) => note.fmt(f),
            WatchEvent::MetricsFailed { error } => {
                write!(f, "cannot write the metrics file: {error}")
            }
            WatchEvent::Stopping => {
                f.write_str("stopping: finishing the item in flight, then exiting")
            }
            WatchEvent::Stopped { counters: c } => write!(
                f,
                "stopped: delivered {}, failed {}, dead-lettered {} since start; reconnects {} ({} gave up, {} aborted)",
                c.delivered, c.failed, c.dead_lettered, c.reconnected, c.gave_up, c.aborted
            ),
        }
    }
}

/// One event with its time and level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// When it happened (for a transition: when the monitor saw it).
    pub at: Timestamp,
    /// `event.level()`.
    pub level: Level,
    /// What happened.
    pub event: WatchEvent,
}

/// Where the daemon's events go. Called from the caller's thread and the
/// worker's, never from the probe thread; it should not block for long.
pub trait WatchLog: Send + Sync {
    /// Take one event.
    fn log(&self, entry: &LogEntry);
}

impl<F: Fn(&LogEntry) + Send + Sync> WatchLog for F {
    fn log(&self, entry: &LogEntry) {
        self(entry)
    }
}

/// Stops a running [`Watch::run`] from any thread (a signal handler
/// thread, say). Cloneable; all clones are the same switch.
#[derive(Clone, Debug, Default)]
pub struct WatchStop {
    inner: Arc<StopInner>,
}

#[derive(Debug, Default)]
struct StopInner {
    /// Stop requests, and the spool's change notifications that wake
    /// the periodic loop (the same wake-up as `replay --follow`).
    signal: Signal,
    /// The stop handle of the replay round in flight, if any.
    run: Mutex<Option<StopHandle>>,
}

impl WatchStop {
    /// A switch that is not stopped.
    pub fn new() -> WatchStop {
        WatchStop::default()
    }

    /// Stop the daemon: the replay in flight stops after its current
    /// item, then everything shuts down. Idempotent.
    pub fn stop(&self) {
        // Under the run lock: a round registering now either sees the
        // stop or is interrupted below.
        {
            let _run = lock(&self.inner.run);
            self.inner.signal.stop();
        }
        self.interrupt_run();
    }

    /// True once [`stop`](WatchStop::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.signal.is_stopped()
    }

    /// Wait up to `d`; true (at once) when stopped.
    fn wait(&self, d: Duration) -> bool {
        self.inner.signal.wait_stop(d)
    }

    /// Register a new replay round; `None` when stopping.
    fn begin_run(&self) -> Option<StopHandle> {
        let mut run = lock(&self.inner.run);
        if self.is_stopped() {
            return None;
        }
        let h = StopHandle::default();
        *run = Some(h.clone());
        Some(h)
    }

    fn end_run(&self) {
        *lock(&self.inner.run) = None;
    }

    /// Ask the round in flight (if any) to stop after its current item.
    fn interrupt_run(&self) {
        if let Some(h) = lock(&self.inner.run).as_ref() {
            h.stop();
        }
    }
}

/// What [`Watch::run`] returns once stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchSummary {
    /// Totals since start.
    pub counters: WatchCounters,
}

/// A hook command (`--on-online`, `--on-offline`).
#[derive(Clone, Debug)]
struct Hook {
    kind: HookKind,
    command: String,
    argv: Vec<String>,
    timeout: Duration,
}

impl Hook {
    fn parse(kind: HookKind, command: &str, timeout: Duration) -> Result<Hook> {
        Ok(Hook {
            kind,
            command: command.to_string(),
            argv: child::parse_command(kind.flag(), command)?,
            timeout,
        })
    }

    /// Run the hook: no shell, its own process group, stdin and stdout
    /// closed, `SPOOL_PATH` and `SPOOL_EVENT` set. `Err` describes a
    /// failure with the tail of its stderr.
    fn run(&self, spool: &Path) -> std::result::Result<(), String> {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env("SPOOL_PATH", spool)
            .env("SPOOL_EVENT", self.kind.event());
        child::run(cmd, &self.argv[0], None, Some(self.timeout), Stderr::Tail)?
            .succeeded(&self.command, self.timeout)
    }
}

/// A checked watch configuration, ready to [`run`](Watch::run).
#[derive(Debug)]
pub struct Watch {
    probe: Arc<Probe>,
    monitor: NetworkMonitorConfig,
    reconnect: ReconnectConfig,
    on_online: Option<Hook>,
    on_offline: Option<Hook>,
    replay_interval: Duration,
    metrics_file: Option<PathBuf>,
    delivery: Delivery,
    target_shown: String,
    wait: Duration,
    clock: SharedClock,
    outcomes: Option<Arc<Outcomes>>,
}

impl Watch {
    /// Check everything that can be checked before touching the spool:
    /// the probe target, the delivery target, the hooks, thresholds and
    /// intervals, the replay options, the `--cacert` files. Errors are
    /// [`Error::InvalidInput`] or [`Error::Unsupported`] (usage errors),
    /// or an [`Error::Io`] for a `--cacert` file that is missing,
    /// unreadable or not PEM certificates.
    pub fn new(cfg: WatchConfig) -> Result<Watch> {
        let probe = Probe::parse(
            &cfg.probe,
            &ProbeOptions {
                timeout: cfg.probe_timeout,
                expect: cfg.probe_expect.clone(),
                trust: cfg.probe_trust.clone(),
            },
        )?;
        let monitor = NetworkMonitorConfig {
            probe_interval: cfg.interval,
            failure_threshold: cfg.failure_threshold,
            online_threshold: cfg.online_threshold,
            start: StartState::Probe,
        };
        monitor.validate()?;
        if cfg.reconnect_attempts == 0 {
            return Err(Error::InvalidInput(
                "reconnect attempts must be at least 1".into(),
            ));
        }
        if cfg.hook_timeout.is_zero() {
            return Err(Error::InvalidInput(
                "the hook timeout must be longer than zero".into(),
            ));
        }
        let (delivery, target_shown) = match cfg.target {
            WatchTarget::Replay(target) => {
                check_options(&cfg.options)?;
                let shown = target.build(cfg.options.concurrency)?.describe();
                let options = cfg.options;
                (Delivery::Replay { target, options }, shown)
            }
            WatchTarget::Push {
                target,
                batch,
                batch_bytes,
            } => {
                let options = push_options(&cfg.options, batch, batch_bytes)?;
                let shown = target.build()?.describe();
                (Delivery::Push { target, options }, shown)
            }
        };
        let on_online = cfg
            .on_online
            .as_deref()
            .map(|c| Hook::parse(HookKind::Online, c, cfg.hook_timeout))
            .transpose()?;
        let on_offline = cfg
            .on_offline
            .as_deref()
            .map(|c| Hook::parse(HookKind::Offline, c, cfg.hook_timeout))
            .transpose()?;
        if let Some(p) = &cfg.metrics_file {
            if p.file_name().is_none() {
                return Err(Error::InvalidInput(format!(
                    "--metrics-file {} is not a file path",
                    p.display()
                )));
            }
        }
        Ok(Watch {
            probe: Arc::new(probe),
            monitor,
            reconnect: ReconnectConfig {
                max_attempts: cfg.reconnect_attempts,
                retry_delay: cfg.retry_delay,
            },
            on_online,
            on_offline,
            replay_interval: cfg.replay_interval,
            metrics_file: cfg.metrics_file,
            delivery,
            target_shown,
            wait: cfg.wait,
            clock: cfg.clock,
            outcomes: cfg.outcomes,
        })
    }

    /// The probe, described without credentials.
    pub fn probe(&self) -> &str {
        self.probe.describe()
    }

    /// Run until `stop` is stopped. The spool must be open read-write;
    /// it is shared with the worker thread. Returns `Err` only for a
    /// failure at startup (threads that cannot start, a metrics file that
    /// cannot be written); after that every failure is logged and the
    /// daemon keeps going.
    pub fn run(
        self,
        spool: Arc<Spool>,
        log: Arc<dyn WatchLog>,
        stop: &WatchStop,
    ) -> Result<WatchSummary> {
        let path = match &*spool {
            Spool::Postgres(_) => spool.location(),
            _ => spool.path().map(Path::to_path_buf).unwrap_or_default(),
        };
        let d = Arc::new(Daemon {
            spool,
            path: path.clone(),
            probe: self.probe.clone(),
            on_online: self.on_online,
            on_offline: self.on_offline,
            metrics_file: self.metrics_file,
            delivery: self.delivery,
            wait: self.wait,
            clock: self.clock,
            outcomes: self.outcomes,
            log,
            stop: stop.clone(),
            monitor: OnceLock::new(),
            activated_online: AtomicBool::new(false),
            bound_online: AtomicBool::new(false),
            gave_up: AtomicBool::new(false),
            last_probe_error: Mutex::new(None),
            push_not_before: Mutex::new(None),
            attempt: AtomicU32::new(0),
            counters: Mutex::new(WatchCounters::default()),
            metrics_lock: Mutex::new(()),
        });
        let coordinator = Arc::new(ReconnectCoordinator::new(
            d.deps(self.reconnect.max_attempts),
            self.reconnect,
        )?);
        let worker = Worker::start("spool-watch")?;

        // The startup job goes first in the worker's queue: it waits for
        // the first probe's verdict, so no transition job can overtake it.
        let (gate_tx, gate_rx) = mpsc::channel::<bool>();
        {
            let (d, c) = (d.clone(), coordinator.clone());
            worker.post(move || match gate_rx.recv() {
                Ok(true) => d.online_sequence(&c, Trigger::Startup),
                Ok(false) => d.offline_sequence(&c),
                Err(_) => {}
            });
        }

        let started = NetworkMonitor::builder({
            let d = d.clone();
            move || {
                let r = d.probe.check();
                if let Err(e) = &r {
                    *lock(&d.last_probe_error) = Some(e.clone());
                }
                r
            }
        })
        .config(self.monitor)
        .on_offline({
            let (d, c, poster) = (d.clone(), coordinator.clone(), worker.poster());
            move || {
                // O(1) on the probe thread: stop a round in flight after
                // its item, note the time, post the rest.
                d.stop.interrupt_run();
                let at = d.clock.now();
                let reason = lock(&d.last_probe_error).clone();
                let (d, c) = (d.clone(), c.clone());
                poster.post(move || {
                    d.emit_at(at, WatchEvent::WentOffline { reason });
                    d.offline_sequence(&c);
                });
            }
        })
        .on_online({
            let (d, c, poster) = (d.clone(), coordinator.clone(), worker.poster());
            move || {
                let at = d.clock.now();
                let (d, c) = (d.clone(), c.clone());
                poster.post(move || {
                    d.emit_at(at, WatchEvent::WentOnline);
                    d.online_sequence(&c, Trigger::Reconnect);
                });
            }
        })
        .start();
        let monitor = match started {
            Ok(m) => m,
            Err(e) => {
                drop(gate_tx);
                worker.shutdown(Shutdown::DiscardPending);
                return Err(e);
            }
        };
        let _ = d.monitor.set(monitor.handle());
        let online = monitor.started_online();
        if let Err(e) = d.write_metrics(&coordinator.counters()) {
            drop(gate_tx);
            monitor.stop();
            worker.shutdown(Shutdown::DiscardPending);
            return Err(match e {
                // An output file in a directory that does not exist is
                // "cannot create", not "no such input".
                Error::Io { path, source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    Error::CannotCreate {
                        detail: format!(
                            "directory {} does not exist",
                            path.parent().unwrap_or(Path::new(".")).display()
                        ),
                        path,
                    }
                }
                e => e,
            });
        }
        d.emit(WatchEvent::Started {
            spool: path,
            probe: self.probe.describe().to_string(),
            target: self.target_shown,
            online,
            reason: monitor
                .initial_probe()
                .and_then(|r| r.as_ref().err().cloned()),
        });
        let _ = gate_tx.send(online);

        // The main thread keeps time for periodic replay, and (with
        // periodic replay on) replays as soon as new items arrive, woken
        // as `replay --follow` is: a change notification is a hint that a
        // comparison of the spool's marks confirms.
        let interval = self.replay_interval;
        let signal = stop.inner.signal.clone();
        let watcher = if interval.is_zero() {
            None
        } else {
            let s = signal.clone();
            SpoolWatcher::start(&d.spool, move || s.notify())
                .ok()
                .flatten()
        };
        let mut check = ChangeCheck::new(&*d.spool, NO_POLL, d.clock.now());
        check.pass_begins(d.clock.now());
        let mut changed = false;
        let mut next = Instant::now() + interval;
        loop {
            let mut wait = if interval.is_zero() {
                Duration::from_secs(3600)
            } else {
                next.saturating_duration_since(Instant::now())
            };
            if watcher.is_some() {
                wait = wait.min(check.next_check().since(d.clock.now()));
            }
            if changed {
                // Waiting for the worker to take the round.
                wait = wait.min(Duration::from_millis(20));
            }
            match signal.wait_for(wait) {
                Woke::Stopped => break,
                Woke::Changed => changed |= check.hinted(d.clock.now()),
                Woke::Deadline => changed |= check.tick(d.clock.now()),
            }
            if changed && !interval.is_zero() {
                if !d.online() || d.gave_up.load(Ordering::SeqCst) {
                    // Offline: the online sequence replays when it is back.
                    changed = false;
                } else if worker.pending() == 0 && d.bound_online.load(Ordering::SeqCst) {
                    changed = false;
                    check.pass_begins(d.clock.now());
                    let (d2, c) = (d.clone(), coordinator.clone());
                    worker.post(move || d2.periodic_round(&c, Trigger::Change));
                }
            }
            if interval.is_zero() || Instant::now() < next {
                continue;
            }
            next = Instant::now() + interval;
            // A job still queued (a transition, the last tick's) goes
            // first; ticks never pile up.
            if !d.online() || worker.pending() > 0 {
                continue;
            }
            let (d2, c) = (d.clone(), coordinator.clone());
            if d.gave_up.load(Ordering::SeqCst) {
                worker.post(move || {
                    if d2.online() && d2.gave_up.load(Ordering::SeqCst) {
                        d2.emit(WatchEvent::Rebinding);
                        d2.online_sequence(&c, Trigger::Reconnect);
                    }
                });
            } else if d.bound_online.load(Ordering::SeqCst) {
                check.pass_begins(d.clock.now());
                worker.post(move || d2.periodic_round(&c, Trigger::Periodic));
            }
        }

        d.emit(WatchEvent::Stopping);
        stop.interrupt_run();
        monitor.stop();
        worker.shutdown(Shutdown::DiscardPending);
        d.write_metrics_logged(&coordinator.counters());
        let counters = d.counters(&coordinator.counters());
        d.emit(WatchEvent::Stopped { counters });
        Ok(WatchSummary { counters })
    }
}

type Coordinator = ReconnectCoordinator<'static, Round>;

/// The state shared by the main thread, the worker and the monitor's
/// callbacks.
struct Daemon {
    spool: Arc<Spool>,
    path: PathBuf,
    probe: Arc<Probe>,
    on_online: Option<Hook>,
    on_offline: Option<Hook>,
    metrics_file: Option<PathBuf>,
    delivery: Delivery,
    wait: Duration,
    clock: SharedClock,
    outcomes: Option<Arc<Outcomes>>,
    log: Arc<dyn WatchLog>,
    stop: WatchStop,
    monitor: OnceLock<MonitorHandle>,
    /// The side the last activate step made active.
    activated_online: AtomicBool,
    /// The side periodic replay is bound to (set by bind).
    bound_online: AtomicBool,
    /// The last online sequence gave up on a link the monitor still
    /// reports up: no transition will come to retry it, a tick does.
    gave_up: AtomicBool,
    last_probe_error: Mutex<Option<String>>,
    /// No periodic or change push round before this time: the last push
    /// round used up its request budget (wait `--backoff-max`) or the
    /// receiver asked for a longer wait.
    push_not_before: Mutex<Option<Timestamp>>,
    /// Reconnect attempts in the current online sequence.
    attempt: AtomicU32,
    counters: Mutex<WatchCounters>,
    metrics_lock: Mutex<()>,
}

impl Daemon {
    fn emit(&self, event: WatchEvent) {
        self.emit_at(self.clock.now(), event)
    }

    fn emit_at(&self, at: Timestamp, event: WatchEvent) {
        self.log.log(&LogEntry {
            at,
            level: event.level(),
            event,
        });
    }

    /// The live link state (false once stopping).
    fn online(&self) -> bool {
        !self.stop.is_stopped() && self.monitor.get().is_some_and(MonitorHandle::is_online)
    }

    fn run_hook(&self, hook: Option<&Hook>) {
        if let Some(h) = hook {
            let result = h.run(&self.path);
            self.emit(WatchEvent::Hook {
                which: h.kind,
                command: h.command.clone(),
                result,
            });
        }
    }

    /// The coordinator's steps, wired to this daemon.
    fn deps(self: &Arc<Self>, max: u32) -> crate::watch::Deps<'static, Round> {
        DepsBuilder::new()
            .try_reconnect({
                let d = self.clone();
                move || {
                    let n = d.attempt.fetch_add(1, Ordering::SeqCst) + 1;
                    match d.probe.check() {
                        Ok(()) => true,
                        Err(reason) => {
                            d.emit(WatchEvent::AttemptFailed {
                                attempt: n,
                                max,
                                reason,
                            });
                            false
                        }
                    }
                }
            })
            .activate_primary({
                let d = self.clone();
                move || {
                    d.activated_online.store(true, Ordering::SeqCst);
                    d.run_hook(d.on_online.as_ref());
                }
            })
            .activate_local({
                let d = self.clone();
                move || {
                    d.activated_online.store(false, Ordering::SeqCst);
                    d.run_hook(d.on_offline.as_ref());
                }
            })
            .bind_context({
                let d = self.clone();
                move || {
                    d.bound_online
                        .store(d.activated_online.load(Ordering::SeqCst), Ordering::SeqCst);
                }
            })
            .replay({
                let d = self.clone();
                move || d.replay_round()
            })
            .should_continue({
                let d = self.clone();
                move || d.online()
            })
            .sleep({
                let d = self.clone();
                move |t| {
                    d.stop.wait(t);
                }
            })
            .build()
            .unwrap_or_else(|e| unreachable!("every dependency is set: {e}"))
    }

    /// One replay round under the spool's replay lock.
    fn replay_round(&self) -> Round {
        let Some(handle) = self.stop.begin_run() else {
            return Round::Skipped("stopping");
        };
        // Checked after registering: an offline transition from here on
        // reaches this round through its stop handle.
        if !self.online() {
            self.stop.end_run();
            return Round::Skipped("the link is down");
        }
        let log = ItemLog(self);
        let with = self.outcomes.as_deref().map(|outcomes| WithOutcomes {
            inner: Some(&log),
            outcomes,
            queue: &**self.spool,
        });
        let observer: &dyn ReplayObserver = match &with {
            Some(w) => w,
            None => &log,
        };
        let result = match &self.delivery {
            Delivery::Replay { target, options } => {
                let req = ReplayRequest {
                    target: target.clone(),
                    options: options.clone(),
                    wait: self.wait,
                    clock: self.clock.clone(),
                    stop: handle,
                    observer: Some(observer),
                };
                replay(&self.spool, &req).map(|run| {
                    lock(&self.counters).add_replay(&run.report);
                    Round::Ran(run.report)
                })
            }
            Delivery::Push { target, options } => {
                let req = PushReplay {
                    target: target.clone(),
                    options: options.clone(),
                    wait: self.wait,
                    clock: self.clock.clone(),
                    stop: handle,
                    observer: Some(observer),
                };
                push(&self.spool, &req).map(|run| {
                    lock(&self.counters).add_push(&run.report);
                    let now = self.clock.now();
                    *lock(&self.push_not_before) = match &run.report.halt {
                        Some(PushHalt::Budget) => Some(now.saturating_add(options.backoff.max)),
                        Some(PushHalt::RetryAfter(d)) => Some(now.saturating_add(*d)),
                        _ => None,
                    };
                    Round::Pushed(run.report)
                })
            }
        };
        self.stop.end_run();
        match result {
            Ok(round) => round,
            Err(Error::ReplayLocked { holder, .. }) => Round::Locked { holder },
            Err(e) => Round::Failed(e.to_string()),
        }
    }

    fn log_round(&self, trigger: Trigger, round: Round) {
        let interrupted = match &round {
            Round::Ran(r) => r.stopped == Some(crate::replay::StopReason::Stopped),
            Round::Pushed(r) => r.halt == Some(PushHalt::Signal),
            _ => false,
        };
        self.emit(WatchEvent::Replay {
            trigger,
            round,
            interrupted,
        });
    }

    /// The worker's job when the link is (or was at startup) up.
    fn online_sequence(&self, c: &Coordinator, trigger: Trigger) {
        if self.stop.is_stopped() {
            return;
        }
        self.attempt.store(0, Ordering::SeqCst);
        self.gave_up.store(false, Ordering::SeqCst);
        let report = c.on_online();
        if report.outcome == ReconnectOutcome::GaveUp {
            self.gave_up.store(true, Ordering::SeqCst);
        }
        self.emit(WatchEvent::Outcome {
            outcome: report.outcome,
            attempts: report.attempts,
        });
        if let Some(round) = report.replay {
            self.log_round(trigger, round);
        }
        self.write_metrics_logged(&c.counters());
    }

    /// The worker's job when the link is (or was at startup) down.
    fn offline_sequence(&self, c: &Coordinator) {
        if self.stop.is_stopped() {
            return;
        }
        self.gave_up.store(false, Ordering::SeqCst);
        c.on_offline();
        self.write_metrics_logged(&c.counters());
    }

    /// The worker's job every `--replay-interval`, and when new items
    /// arrive, while bound online.
    fn periodic_round(&self, c: &Coordinator, trigger: Trigger) {
        if !self.online() || !self.bound_online.load(Ordering::SeqCst) {
            return;
        }
        let waiting = lock(&self.push_not_before).is_some_and(|t| self.clock.now() < t);
        let round = if waiting {
            Round::Skipped(
                "the last push round used up its request budget (or the receiver asked for a \
                 longer wait): waiting --backoff-max (or the receiver's Retry-After)",
            )
        } else {
            self.replay_round()
        };
        self.log_round(trigger, round);
        self.write_metrics_logged(&c.counters());
    }

    fn counters(&self, r: &CoordinatorCounters) -> WatchCounters {
        let mut c = *lock(&self.counters);
        c.set_reconnect(r);
        c
    }

    fn write_metrics(&self, r: &CoordinatorCounters) -> Result<()> {
        let Some(file) = &self.metrics_file else {
            return Ok(());
        };
        let now = self.clock.now();
        let stats = self.spool.stats(now)?;
        let bytes = self.spool.files().iter().map(|(_, n)| n).sum();
        let m = WatchMetrics {
            gauges: SpoolGauges::from_stats(&stats, bytes, now),
            counters: self.counters(r),
            online: self.monitor.get().is_some_and(MonitorHandle::is_online),
        };
        let _one_writer = lock(&self.metrics_lock);
        write_atomic(file, render_watch(&self.path, &m).as_bytes())
    }

    fn write_metrics_logged(&self, r: &CoordinatorCounters) {
        if let Err(e) = self.write_metrics(r) {
            self.emit(WatchEvent::MetricsFailed {
                error: e.to_string(),
            });
        }
    }
}

/// Per-item events of a round.
struct ItemLog<'a>(&'a Daemon);

impl ReplayObserver for ItemLog<'_> {
    fn attempted(&self, item: &Item, attempt: u32, outcome: &ItemOutcome) {
        self.0.emit(WatchEvent::Item {
            id: item.id,
            attempt,
            outcome: outcome.clone(),
        });
    }

    fn push_event(&self, event: &PushEvent<'_>) {
        self.0.emit(WatchEvent::Push(PushNote::of(event)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> TargetSpec {
        TargetSpec::Exec {
            command: "true".into(),
            shell: false,
            reject_exit: vec![65],
            timeout: None,
        }
    }

    #[test]
    fn bad_settings_are_refused_before_anything_runs() {
        let ok = WatchConfig::new("tcp://127.0.0.1:9", target());
        assert!(Watch::new(ok.clone()).is_ok());
        let mut bad = ok.clone();
        bad.probe = "ftp://h/x".into();
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.failure_threshold = 0;
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.reconnect_attempts = 0;
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.on_online = Some("'unclosed".into());
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.on_offline = Some("  ".into());
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.target = TargetSpec::Exec {
            command: String::new(),
            shell: false,
            reject_exit: vec![],
            timeout: None,
        }
        .into();
        assert!(Watch::new(bad).is_err());

        // A push target: the options replay --push refuses are refused.
        let push = |url: &str| WatchTarget::Push {
            target: PushTarget {
                url: url.into(),
                http: Default::default(),
            },
            batch: 10,
            batch_bytes: 1000,
        };
        let mut pushing = ok;
        pushing.target = push("http://127.0.0.1:9/v1/push");
        let w = Watch::new(pushing.clone()).unwrap();
        assert_eq!(w.target_shown, "push to http://127.0.0.1:9/v1/push");
        let mut bad = pushing.clone();
        bad.target = push("ftp://h/v1/push");
        assert!(matches!(Watch::new(bad), Err(Error::InvalidInput(_))));
        let mut bad = pushing.clone();
        bad.options.concurrency = 2;
        let e = Watch::new(bad).unwrap_err();
        assert!(
            e.to_string()
                .contains("--concurrency does not apply to --push"),
            "{e}"
        );
        let mut bad = pushing;
        bad.target = WatchTarget::Push {
            target: PushTarget {
                url: "http://h/v1/push".into(),
                http: Default::default(),
            },
            batch: 0,
            batch_bytes: 1,
        };
        assert!(Watch::new(bad).is_err());
    }

    #[test]
    fn hooks_report_failures_with_their_stderr() {
        let h = Hook::parse(HookKind::Online, "true", Duration::from_secs(5)).unwrap();
        assert_eq!(h.run(Path::new("/x")), Ok(()));
        let h = Hook::parse(
            HookKind::Offline,
            "sh -c 'echo \"$SPOOL_EVENT $SPOOL_PATH\" >&2; exit 3'",
            Duration::from_secs(5),
        )
        .unwrap();
        let e = h.run(Path::new("/x/q.db")).unwrap_err();
        assert!(e.contains("exited with 3: offline /x/q.db"), "{e}");
        let h = Hook::parse(HookKind::Online, "sleep 5", Duration::from_millis(50)).unwrap();
        let e = h.run(Path::new("/x")).unwrap_err();
        assert!(e.contains("timed out"), "{e}");
        let h = Hook::parse(HookKind::Online, "/no/such/hook", Duration::from_secs(1)).unwrap();
        assert!(h
            .run(Path::new("/x"))
            .unwrap_err()
            .starts_with("cannot run"));
    }

    #[test]
    fn stop_interrupts_waits_and_refuses_new_rounds() {
        let s = WatchStop::new();
        let h = s.begin_run().unwrap();
        assert!(!s.wait(Duration::from_millis(1)));
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.wait(Duration::from_secs(60)));
        s.stop();
        assert!(t.join().unwrap());
        assert!(h.is_stopped(), "the round in flight was told");
        s.end_run();
        assert!(s.begin_run().is_none());
    }

    #[test]
    fn events_read_well() {
        let e = WatchEvent::Outcome {
            outcome: ReconnectOutcome::Reconnected { replayed: true },
            attempts: 1,
        };
        assert_eq!(e.to_string(), "reconnected after 1 attempt");
        let worded = |outcome, attempts| WatchEvent::Outcome { outcome, attempts }.to_string();
        assert_eq!(
            worded(ReconnectOutcome::Reconnected { replayed: false }, 2),
            "reconnected after 2 attempts; replay skipped: the link went away again"
        );
        assert_eq!(
            worded(ReconnectOutcome::GaveUp, 10),
            "gave up reconnecting after 10 attempts"
        );
        assert_eq!(
            worded(ReconnectOutcome::Aborted, 3),
            "aborted reconnecting after 3 attempts: the link went away again or the daemon is \
             stopping"
        );
        let e = WatchEvent::Replay {
            trigger: Trigger::Periodic,
            round: Round::Ran(ReplayReport::default()),
            interrupted: false,
        };
        assert_eq!(e.level(), Level::Detail, "an idle round is a detail");
        assert_eq!(
            e.to_string(),
            "replay (periodic): delivered 0, failed 0, dead-lettered 0, not due 0, held 0"
        );
    }

    /// A word like `GaveUp` or `Reconnected`: an upper-case letter
    /// after a lower-case one, or after the start of a message.
    fn has_debug_name(text: &str) -> bool {
        text.as_bytes()
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
            || text.chars().next().is_some_and(|c| c.is_ascii_uppercase())
    }

    #[test]
    fn every_log_line_is_plain_words() {
        use crate::push::sender::{Stop, StopCause};
        let now = Timestamp::from_millis(1_700_000_000_000);
        let refused = PushReport {
            halt: Some(PushHalt::Refused(Stop {
                kind: crate::error::ErrorKind::PermissionDenied,
                cause: StopCause::Unauthorized,
                message: "the receiver refused the token (HTTP 401)".into(),
            })),
            ..PushReport::default()
        };
        let budget = PushReport {
            requests: 5,
            failed_requests: 5,
            in_flight: 2,
            halt: Some(PushHalt::Budget),
            left_due: true,
            last_error: Some("push request failed: connection failed".into()),
            ..PushReport::default()
        };
        let mut events = vec![
            WatchEvent::Started {
                spool: "/s/q.db".into(),
                probe: "tcp://h:1".into(),
                target: "push to https://h/v1/push".into(),
                online: false,
                reason: Some("cannot connect".into()),
            },
            WatchEvent::WentOffline { reason: None },
            WatchEvent::WentOnline,
            WatchEvent::Rebinding,
            WatchEvent::AttemptFailed {
                attempt: 1,
                max: 3,
                reason: "cannot connect".into(),
            },
            WatchEvent::Hook {
                which: HookKind::Online,
                command: "true".into(),
                result: Ok(()),
            },
            WatchEvent::MetricsFailed {
                error: "disk full".into(),
            },
            WatchEvent::Stopping,
            WatchEvent::Stopped {
                counters: WatchCounters::default(),
            },
        ];
        for outcome in [
            ReconnectOutcome::Reconnected { replayed: true },
            ReconnectOutcome::Reconnected { replayed: false },
            ReconnectOutcome::GaveUp,
            ReconnectOutcome::Aborted,
        ] {
            events.push(WatchEvent::Outcome {
                outcome,
                attempts: 2,
            });
        }
        for round in [
            Round::Ran(ReplayReport::default()),
            Round::Pushed(PushReport::default()),
            Round::Pushed(refused),
            Round::Pushed(budget.clone()),
            Round::Locked {
                holder: "pid 7".into(),
            },
            Round::Failed("no such command".into()),
            Round::Skipped("stopping"),
        ] {
            events.push(WatchEvent::Replay {
                trigger: Trigger::Change,
                round,
                interrupted: false,
            });
        }
        for outcome in [
            ItemOutcome::Delivered,
            ItemOutcome::Failed {
                error: "HTTP 503".into(),
                next_retry_at: now,
            },
            ItemOutcome::DeadLettered {
                error: "HTTP 400".into(),
                rejected: true,
            },
            ItemOutcome::SinkFailed {
                error: "HTTP 400".into(),
                sink_error: "disk full".into(),
            },
            ItemOutcome::WouldAttempt,
            ItemOutcome::WouldDeadLetter {
                cause: crate::replay::over_budget_cause(5, 5),
            },
        ] {
            events.push(WatchEvent::Item {
                id: 1,
                attempt: 1,
                outcome,
            });
        }
        for note in [
            PushNote::Sending {
                first: 1,
                last: 2,
                items: 2,
                skips: 0,
                bytes: 10,
            },
            PushNote::Acked {
                last_seq: 2,
                applied: 2,
                duplicates: 0,
            },
            PushNote::OverAck {
                claimed: 9,
                highest: 2,
            },
            PushNote::RequestFailed {
                reason: "push request failed: HTTP 503".into(),
                failures: 1,
                max: 5,
                retry_in: Some(Duration::from_secs(2)),
            },
            PushNote::Halved {
                max_entries: 1,
                max_bytes: 100,
            },
            PushNote::Resend { from: 1 },
            PushNote::WouldSend {
                seq: 3,
                item: None,
                in_flight: false,
            },
        ] {
            events.push(WatchEvent::Push(note));
        }
        for e in &events {
            let text = e.to_string();
            assert!(!has_debug_name(&text), "{}: {text}", e.name());
        }
        let e = WatchEvent::Replay {
            trigger: Trigger::Periodic,
            round: Round::Pushed(budget),
            interrupted: false,
        };
        assert_eq!(e.level(), Level::Info);
        assert!(
            e.to_string().starts_with("push (periodic): delivered 0,")
                && e.to_string()
                    .ends_with("; last error: push request failed: connection failed"),
            "{e}"
        );
        let idle = WatchEvent::Replay {
            trigger: Trigger::Periodic,
            round: Round::Pushed(PushReport::default()),
            interrupted: false,
        };
        assert_eq!(idle.level(), Level::Detail);
    }
}
