//! What a run shows on stderr while it runs: the progress bar and the
//! per-item lines.

use crate::commands::Verbosity;
use indicatif::{ProgressBar, ProgressStyle};
use spool::replay::follow::Watching;
use spool::replay::push::PushEvent;
use spool::replay::{ItemOutcome, ReplayObserver};
use spool::Item;
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The progress bar's line: items attempted of the items the run
/// expects to attempt, the rate in whole items per second, and the time
/// left (`{rate}` and `{left}` are ours, see [`bar_style`]).
const BAR_TEMPLATE: &str = "{spinner} replay [{bar:30}] {pos}/{len} {rate} ETA {left}";

/// The bar's style: [`BAR_TEMPLATE`] with its own keys.
fn bar_style() -> ProgressStyle {
    ProgressStyle::with_template(BAR_TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .with_key(
            "rate",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&rate(s.per_sec()));
            },
        )
        .with_key(
            "left",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = w.write_str(&eta(s.pos(), s.eta()));
            },
        )
        .progress_chars("=> ")
}

/// A rate for the bar, in whole items per second: `283/s`.
fn rate(per_sec: f64) -> String {
    let n = if per_sec.is_finite() && per_sec > 0.0 {
        per_sec.round() as u64
    } else {
        0
    };
    format!("{n}/s")
}

/// The time left for the bar, in whole seconds (`3m20s`), or `-` before
/// the first item is done (there is no rate to go by yet).
fn eta(done: u64, left: Duration) -> String {
    if done == 0 {
        return "-".into();
    }
    crate::render::age(left)
}

/// Progress bar (terminal only) and per-item lines on stderr.
///
/// Whatever the verbosity, even with `-q`, the run's first failure (an
/// item's failed attempt, or a failed push request) and its first dead
/// letter are told on stderr, one line each with the cause: a cron mail
/// then says why the run exited 75 or 1 (SPEC §4). `-q` silences the
/// notes and the bar, not a failure's cause; `-v` tells every outcome.
pub struct Progress {
    bar: Option<ProgressBar>,
    verbosity: Verbosity,
    /// The first failure was told.
    told_failure: AtomicBool,
    /// The first dead letter was told.
    told_dead: AtomicBool,
}

impl Progress {
    /// A progress reporter for a run at `verbosity`.
    pub fn new(verbosity: Verbosity, bar: bool) -> Progress {
        let bar = (bar && verbosity != Verbosity::Quiet && std::io::stderr().is_terminal())
            .then(|| ProgressBar::new(0).with_style(bar_style()));
        Progress {
            bar,
            verbosity,
            told_failure: AtomicBool::new(false),
            told_dead: AtomicBool::new(false),
        }
    }

    fn say(&self, level: Verbosity, msg: String) {
        if self.verbosity >= level {
            self.write(msg);
        }
    }

    /// Say `msg` when the verbosity asks for it, or else when it is the
    /// first of its kind (`told`), whatever the verbosity.
    fn say_or_tell_first(&self, level: Verbosity, told: &AtomicBool, msg: String) {
        let first = !told.swap(true, Ordering::SeqCst);
        if self.verbosity >= level || first {
            self.write(msg);
        }
    }

    fn write(&self, msg: String) {
        match &self.bar {
            Some(b) => b.println(format!("spool: {msg}")),
            None => {
                let _ = writeln!(std::io::stderr().lock(), "spool: {msg}");
            }
        }
    }

    /// Remove the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl ReplayObserver for Progress {
    fn lease_lost(&self, item: &Item) {
        self.say(
            Verbosity::Normal,
            format!(
                "item {}: lease lost (it ran out and another replayer holds the item now); \
                 this attempt's outcome was not recorded",
                item.id
            ),
        );
    }

    fn push_event(&self, event: &PushEvent<'_>) {
        match event {
            PushEvent::Sending { .. } | PushEvent::Acked { .. } | PushEvent::Resend { .. } => {
                self.say(Verbosity::Verbose, event.to_string())
            }
            PushEvent::OverAck { .. } => self.say(Verbosity::Normal, format!("warning: {event}")),
            PushEvent::RequestFailed { .. } => {
                self.say_or_tell_first(Verbosity::Normal, &self.told_failure, event.to_string())
            }
            PushEvent::Halved { .. } => self.say(Verbosity::Normal, event.to_string()),
            PushEvent::WouldSend {
                seq,
                item,
                in_flight,
            } => {
                let verb = if *in_flight {
                    "would resend"
                } else {
                    "would send"
                };
                let what = match item {
                    Some(i) => {
                        if let Some(b) = &self.bar {
                            b.inc(1);
                        }
                        format!(
                            "item {} ({} bytes, key {:?}, attempts {})",
                            i.id,
                            i.payload.len(),
                            i.key,
                            i.attempts
                        )
                    }
                    None => "a skip entry".into(),
                };
                self.say(Verbosity::Normal, format!("seq {seq}: {verb} {what}"));
            }
            _ => {}
        }
    }

    fn wants_total(&self) -> bool {
        self.bar.is_some()
    }

    fn following(&self, watching: &Watching) {
        match watching {
            Watching::Notify(dir) => self.say(
                Verbosity::Verbose,
                format!("following: woken by changes in {}", dir.display()),
            ),
            Watching::Listen(channel) => self.say(
                Verbosity::Verbose,
                format!("following: woken by NOTIFY on {channel}"),
            ),
            Watching::PollOnly(why) => self.say(
                Verbosity::Normal,
                format!("following by polling only ({why})"),
            ),
        }
    }

    fn started(&self, total: Option<u64>) {
        if let (Some(b), Some(total)) = (&self.bar, total) {
            b.set_length(total);
        }
    }

    fn attempted(&self, item: &Item, attempt: u32, outcome: &ItemOutcome) {
        if let Some(b) = &self.bar {
            b.inc(1);
            // Items enqueued during the run can be attempted too.
            if b.length().is_some_and(|len| b.position() > len) {
                b.set_length(b.position());
            }
        }
        let id = item.id;
        match outcome {
            ItemOutcome::Delivered => {
                self.say(Verbosity::Verbose, format!("item {id}: delivered (attempt {attempt})"))
            }
            ItemOutcome::Failed {
                error,
                next_retry_at,
            } => {
                if self.verbosity >= Verbosity::Verbose {
                    self.told_failure.store(true, Ordering::SeqCst);
                    self.write(format!(
                        "item {id}: attempt {attempt} failed: {error}; next try at {next_retry_at}"
                    ));
                } else if !self.told_failure.swap(true, Ordering::SeqCst) {
                    self.write(format!("item {id} failed: {error}"));
                }
            }
            ItemOutcome::DeadLettered { error, rejected } => self.say_or_tell_first(
                Verbosity::Normal,
                &self.told_dead,
                format!(
                    "item {id}: dead-lettered after attempt {attempt} ({}): {error}",
                    if *rejected {
                        "rejected by the target"
                    } else {
                        "out of attempts"
                    }
                ),
            ),
            ItemOutcome::SinkFailed { error, sink_error } => self.say(
                Verbosity::Normal,
                format!("item {id}: could not be dead-lettered ({sink_error}); it stays pending: {error}"),
            ),
            ItemOutcome::WouldAttempt => self.say(
                Verbosity::Normal,
                format!(
                    "item {id}: would be attempted (attempt {attempt}, {} bytes, key {:?})",
                    item.payload.len(),
                    item.key
                ),
            ),
            ItemOutcome::WouldDeadLetter { cause } => self.say(
                Verbosity::Normal,
                format!("item {id}: would be dead-lettered: {cause}"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::ProgressBar;

    #[test]
    fn the_rate_is_a_whole_number_of_items_per_second() {
        assert_eq!(rate(283.1216), "283/s");
        assert_eq!(rate(283.5), "284/s");
        assert_eq!(rate(0.4), "0/s");
        assert_eq!(rate(0.0), "0/s");
        assert_eq!(rate(f64::NAN), "0/s");
        assert_eq!(rate(f64::INFINITY), "0/s");
    }

    #[test]
    fn the_eta_is_whole_seconds_once_something_is_done() {
        assert_eq!(eta(0, Duration::ZERO), "-");
        assert_eq!(eta(0, Duration::from_secs(90)), "-");
        assert_eq!(eta(5, Duration::from_millis(200_900)), "3m20s");
        assert_eq!(eta(5, Duration::from_millis(400)), "0s");
        assert_eq!(eta(5, Duration::from_secs(7322)), "2h2m");
    }

    #[test]
    fn the_bar_template_has_total_rate_and_eta() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
        for key in ["{pos}/{len}", "{rate}", "ETA {left}"] {
            assert!(BAR_TEMPLATE.contains(key), "{key}");
        }
        assert!(!BAR_TEMPLATE.contains("per_sec"), "fractional rate");
        // The custom keys render without a terminal.
        let bar = ProgressBar::hidden().with_style(bar_style());
        bar.set_length(10);
        bar.inc(3);
        bar.finish_and_clear();
    }
}
