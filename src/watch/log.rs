//! What the watch daemon tells its caller: every [`WatchEvent`] with its
//! [`Level`], the words each reads as in a log line, and the [`WatchLog`]
//! they go to as [`LogEntry`]s.

use crate::replay::push::{PushHalt, PushReport};
use crate::replay::{ItemOutcome, ReplayReport};
use crate::time::Timestamp;
use crate::watch::hooks::HookKind;
use crate::watch::metrics::WatchCounters;
use crate::watch::push_note::PushNote;
use crate::watch::ReconnectOutcome;
use std::fmt;
use std::path::PathBuf;

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
            WatchEvent::Push(note) => note.level,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::push::PushEvent;
    use std::time::Duration;

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
        for event in [
            PushEvent::Sending {
                first: 1,
                last: 2,
                items: 2,
                skips: 0,
                bytes: 10,
            },
            PushEvent::Acked {
                last_seq: 2,
                applied: 2,
                duplicates: 0,
            },
            PushEvent::OverAck {
                claimed: 9,
                highest: 2,
            },
            PushEvent::RequestFailed {
                reason: "push request failed: HTTP 503",
                failures: 1,
                max: 5,
                retry_in: Some(Duration::from_secs(2)),
            },
            PushEvent::Halved {
                max_entries: 1,
                max_bytes: 100,
            },
            PushEvent::Resend { from: 1 },
            PushEvent::WouldSend {
                seq: 3,
                item: None,
                in_flight: false,
            },
        ] {
            events.push(WatchEvent::Push(PushNote::of(&event)));
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
