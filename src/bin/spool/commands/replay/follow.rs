//! `spool replay --follow`: the flags and the run of follow mode (the
//! library's [`spool::ops::replay::follow`] and
//! [`spool::ops::replay::follow_push`]).

use super::outcomes::{finish_outcomes, with_outcomes};
use super::progress::Progress;
use super::report::{push_refused, push_report_json, report_json};
use crate::commands::signals::Signals;
use crate::commands::{Ctx, Verbosity};
use crate::exit::{self, CliError};
use clap::Args;
use spool::ops::replay::{
    follow, follow_push, FollowRequest, FollowRun, PushReplay, PushTarget, ReplayRequest,
    TargetSpec,
};
use spool::replay::follow::{FollowEnd, Signal};
use spool::replay::push::PushOptions;
use spool::replay::{ReplayOptions, StopHandle};
use spool::units::parse_duration;
use spool::Spool;
use std::io::Write;
use std::time::Duration;

/// `--follow` and the options only it takes.
#[derive(Args, Debug, Clone)]
pub struct FollowArgs {
    /// Keep running: deliver new items as they are enqueued, until stopped
    ///
    /// After delivering what is due, wait — woken by new items (file-change
    /// notifications on the spool's directory, and a look every --poll)
    /// and by the next retry time of a waiting item — and deliver again.
    /// SIGTERM/SIGINT stop it after the item(s) in flight, with the summary
    /// of the whole run and exit 0. Holds the spool's replay lock all along.
    #[arg(long, conflicts_with_all = ["dry_run", "ignore_backoff"])]
    pub follow: bool,

    /// With --follow: look for new items at least this often
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration, requires = "follow")]
    pub poll: Duration,

    /// With --follow: exit after DURATION without anything to attempt
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "follow")]
    pub idle_exit: Option<Duration>,
}

impl FollowArgs {
    fn request(&self, signal: Signal) -> FollowRequest {
        FollowRequest {
            poll: self.poll,
            idle_exit: self.idle_exit,
            signal,
            notify: true,
        }
    }
}

/// SIGINT/SIGTERM: the first stops the run after the item(s) in flight
/// (exit 0: a service stopping is not an error). One that comes more than
/// a second later exits at once with 130/143; closer repeats count as the
/// same request.
fn install_signals(signal: Signal, verbosity: Verbosity) -> Result<(), CliError> {
    let say = move |msg: String| {
        if verbosity >= Verbosity::Normal {
            let _ = writeln!(std::io::stderr().lock(), "spool: {msg}");
        }
    };
    Signals::handle(
        move |name| {
            say(format!(
                "received {name}: stopping after the item(s) in flight"
            ));
            signal.stop();
        },
        Some(Box::new(move |name| {
            say(format!("received {name} again: exiting now"))
        })),
    )?;
    Ok(())
}

/// Where a follow run's outcomes and summary go.
pub struct Outputs<'a> {
    /// `--events`, `--on-dead`.
    pub outcomes: Option<&'a spool::replay::events::Outcomes>,
    /// The events have stdout: the summary goes to stderr.
    pub summary_to_stderr: bool,
}

/// Print the summary (or its JSON) where it goes.
fn print_summary(
    ctx: &mut Ctx,
    json: Option<serde_json::Value>,
    summary: String,
    to_stderr: bool,
) -> Result<(), CliError> {
    if to_stderr {
        let line = json.map_or(summary, |v| v.to_string());
        let _ = writeln!(std::io::stderr().lock(), "{line}");
        return Ok(());
    }
    match json {
        Some(v) => ctx.out.json(&v)?,
        None => ctx.out.line(&summary)?,
    }
    ctx.out.flush()
}

fn follow_json<R>(mut obj: serde_json::Value, run: &FollowRun<R>) -> serde_json::Value {
    obj["follow"] = serde_json::json!({
        "end": run.follow.end.name(),
        "passes": run.follow.passes,
        "seconds": run.follow.ran_for.as_secs_f64(),
        "still_failing": run.still_failing,
        "notifications": !matches!(run.watching, spool::replay::follow::Watching::PollOnly(_)),
    });
    obj
}

/// `spool replay --follow` with `--exec` or `--url`.
pub fn replay(
    f: &FollowArgs,
    spool: Spool,
    target: TargetSpec,
    options: ReplayOptions,
    wait: Duration,
    outputs: Outputs<'_>,
    ctx: &mut Ctx,
) -> Result<(), CliError> {
    let stop = StopHandle::default();
    let signal = Signal::new(stop.clone());
    install_signals(signal.clone(), ctx.verbosity)?;
    let progress = Progress::new(ctx.verbosity, false);
    let with = with_outcomes(&progress, outputs.outcomes, &spool);
    let req = ReplayRequest {
        target,
        options,
        wait,
        clock: ctx.clock.clone(),
        stop,
        observer: Some(match &with {
            Some(w) => w,
            None => &progress,
        }),
    };
    let result = follow(&spool, &req, &f.request(signal));
    finish_outcomes(outputs.outcomes);
    ctx.notices(&spool);
    let run = result.map_err(|e| ctx.fail("replay", e))?;
    let json = ctx
        .json
        .then(|| follow_json(report_json(&run.report, &run.target), &run));
    print_summary(ctx, json, run.summary(), outputs.summary_to_stderr)?;
    if run.follow.end == FollowEnd::Stopped {
        return Ok(());
    }
    exit::for_replay(run.status())
}

/// `spool replay --push --follow`.
pub fn push(
    f: &FollowArgs,
    spool: Spool,
    target: PushTarget,
    options: PushOptions,
    wait: Duration,
    outputs: Outputs<'_>,
    ctx: &mut Ctx,
) -> Result<(), CliError> {
    let stop = StopHandle::default();
    let signal = Signal::new(stop.clone());
    install_signals(signal.clone(), ctx.verbosity)?;
    let progress = Progress::new(ctx.verbosity, false);
    let with = with_outcomes(&progress, outputs.outcomes, &spool);
    let req = PushReplay {
        target,
        options,
        wait,
        clock: ctx.clock.clone(),
        stop,
        observer: Some(match &with {
            Some(w) => w,
            None => &progress,
        }),
    };
    let result = follow_push(&spool, &req, &f.request(signal));
    finish_outcomes(outputs.outcomes);
    ctx.notices(&spool);
    let run = result.map_err(|e| ctx.fail("push", e))?;
    let json = ctx
        .json
        .then(|| follow_json(push_report_json(&run.report, &run.target), &run));
    print_summary(ctx, json, run.summary(), outputs.summary_to_stderr)?;
    match run.status().replay_status() {
        Err(kind) => Err(push_refused(&run.report, kind, ctx.shown())),
        Ok(_) if run.follow.end == FollowEnd::Stopped => Ok(()),
        Ok(status) => exit::for_replay(status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spool::replay::follow::DEFAULT_POLL;

    #[test]
    fn the_default_poll_is_the_librarys() {
        assert_eq!(parse_duration("1s"), Ok(DEFAULT_POLL));
    }
}
