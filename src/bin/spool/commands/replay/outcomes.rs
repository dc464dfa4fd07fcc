//! `--events`, `--on-dead` and `--hook-timeout`: where a run's recorded
//! outcomes go (shared with `spool watch`).

use super::setup_error;
use crate::commands::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::replay::events::{
    open_events_file, DeadHook, EventWriter, NoticeFn, OutcomeNotice, Outcomes, WithOutcomes,
    EVENT_QUEUE,
};
use spool::replay::ReplayObserver;
use spool::units::parse_duration;
use spool::Spool;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `--events`, `--on-dead` and `--hook-timeout` (shared with `spool
/// watch`).
#[derive(Args, Debug, Clone)]
pub struct OutcomeArgs {
    /// Write one NDJSON line per recorded outcome to FILE (appended; - for stdout)
    ///
    /// One line per outcome, written after the commit that recorded it:
    /// {"ts","event","id","key","group","attempt","queue_ms",
    /// "duration_ms","status"/"exit_code","error","next_retry_at",
    /// "push_seq"}, where event is delivered, failed, dead_lettered,
    /// acked, rejected or lease_lost (docs/events.md has the contract).
    /// FILE is appended to (created with mode 0600); with -, the events go
    /// to stdout and the summary to stderr. A slow reader never holds up
    /// delivery: lines wait in a queue of 4096, beyond which they are
    /// dropped and counted ({"event":"dropped","count":N} marks the gap);
    /// a reader that goes away (a closed pipe) ends the events with one
    /// warning, not the replay.
    #[arg(long, value_name = "FILE")]
    pub events: Option<String>,

    /// Run CMD once for every item dead-lettered in the run, its JSON on stdin
    ///
    /// After the commit, with the item's JSON (as `spool show --json`
    /// prints it, dead_at included) on stdin and SPOOL_ITEM_ID,
    /// SPOOL_EVENT=dead_lettered and SPOOL_PATH in the environment; split
    /// into words like --exec (no shell: write sh -c '...' for one). Runs
    /// one at a time beside the delivery, each bounded by --hook-timeout;
    /// a failure (exit not 0, a signal, the timeout, cannot start) is
    /// logged on stderr and changes nothing, not even the exit status.
    #[arg(long, value_name = "CMD")]
    pub on_dead: Option<String>,

    /// Bound on one --on-dead run (its process group is killed after it)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub hook_timeout: Duration,
}

impl OutcomeArgs {
    /// True when the events go to stdout (the summary then goes to
    /// stderr).
    pub fn events_on_stdout(&self) -> bool {
        self.events.as_deref() == Some("-")
    }

    /// The events writer and the hook, checked and started; `None` when
    /// neither was asked for. `notice` tells a warning.
    pub fn build(
        &self,
        ctx: &Ctx,
        action: &str,
        notice: NoticeFn,
    ) -> Result<Option<Arc<Outcomes>>, CliError> {
        if self.events.is_none() && self.on_dead.is_none() {
            return Ok(None);
        }
        let on_dead = match &self.on_dead {
            Some(cmd) => Some(
                DeadHook::start(
                    cmd,
                    self.hook_timeout,
                    Some(PathBuf::from(ctx.shown())),
                    notice.clone(),
                )
                .map_err(|e| setup_error(ctx, action, e))?,
            ),
            None => None,
        };
        let events = match self.events.as_deref() {
            None => None,
            Some(dest) => {
                let out: Box<dyn Write + Send> = if dest == "-" {
                    Box::new(std::io::stdout())
                } else {
                    Box::new(
                        open_events_file(std::path::Path::new(dest))
                            .map_err(|e| ctx.fail(action, e))?,
                    )
                };
                Some(EventWriter::new(
                    out,
                    EVENT_QUEUE,
                    ctx.clock.clone(),
                    notice.clone(),
                ))
            }
        };
        Ok(Some(Arc::new(Outcomes::new(events, on_dead, notice))))
    }
}

/// Warnings of the events and the hook, on stderr.
pub fn notice_to_stderr() -> NoticeFn {
    Arc::new(|n: &OutcomeNotice| {
        let _ = writeln!(std::io::stderr().lock(), "spool: warning: {n}");
    })
}

/// Wait for the hook and the events of a run, and say if events were
/// dropped.
pub fn finish_outcomes(outcomes: Option<&Outcomes>) {
    if let Some(o) = outcomes {
        let r = o.finish();
        if r.events.dropped > 0 {
            let _ = writeln!(
                std::io::stderr().lock(),
                "spool: warning: {} event(s) dropped: the events reader was behind (each gap is \
                 marked by a \"dropped\" line)",
                r.events.dropped
            );
        }
    }
}

/// The observer of a run: `progress`, and the outcomes when asked for.
pub fn with_outcomes<'a>(
    progress: &'a dyn ReplayObserver,
    outcomes: Option<&'a Outcomes>,
    spool: &'a Spool,
) -> Option<WithOutcomes<'a>> {
    outcomes.map(|outcomes| WithOutcomes {
        inner: Some(progress),
        outcomes,
        queue: &**spool,
    })
}
