//! `spool replay`: deliver pending items to a command or a URL.
//!
//! The flags are in [`args`] and [`outcomes`] (shared with `spool
//! watch`), follow mode in [`follow`], what a run shows while it runs in
//! [`progress`], and its report in [`report`].

mod args;
mod follow;
mod outcomes;
mod progress;
mod report;

pub use self::args::{PushArgs, ReplayFlags, TargetArgs};
pub use self::outcomes::{finish_outcomes, notice_to_stderr, with_outcomes, OutcomeArgs};
use self::progress::Progress;
use self::report::{push_refused, push_report_json, report_json};
use super::signals::Signals;
use super::Ctx;
use crate::exit::{self, CliError};
use clap::{ArgGroup, Args};
use spool::ops::replay::{check_options, replay, ReplayRequest};
use spool::ops::replay::{push, push_options, PushReplay};
use spool::replay::StopHandle;
use spool::{Error, OpenMode};
use std::io::Write;

/// Deliver pending items to a command (--exec) or a URL (--url), or push them (--push)
///
/// Items are attempted in enqueue order; held items and items whose
/// next retry time has not come are skipped. Items of an ordering group
/// (enqueue --group) go strictly in order: one waits while an earlier item
/// of its group is pending, and at most one per group is in flight under
/// --concurrency; other groups go on meanwhile. A delivered item is marked
/// done only after its delivery succeeded. A failed attempt is counted
/// durably and the item waits (exponential backoff with jitter, or the
/// target's Retry-After) before its next attempt; after --max-attempts
/// failed attempts, or at once when the target rejects it for good, the
/// item moves to the dead-letter set (see `spool dlq`). An item whose
/// attempts already reach --max-attempts (set with `spool attempts`, or a
/// lowered budget) is dead-lettered without another attempt, its last
/// error saying so (--dry-run says it would be). One run attempts an
/// item at most once, on every backend (PostgreSQL and --ignore-backoff
/// included).
///
/// When a run fails, stderr says why: the cause of the first failed item
/// (or failed push request) and of the first dead letter, one line each,
/// also with -q (which silences the other notes), e.g.
///   spool: item 3 failed: connection error: connection refused (127.0.0.1:9)
/// -v tells every outcome.
///
/// --exec CMD runs CMD once per item, split into words like a shell
/// would (quotes honoured) but without a shell (unless --shell), with the
/// payload on stdin and SPOOL_ITEM_ID, SPOOL_IDEMPOTENCY_KEY,
/// SPOOL_ATTEMPT, SPOOL_PAYLOAD_BYTES (the payload's length: fewer bytes
/// on stdin means its replayer died while writing them) and SPOOL_PATH in
/// its environment. Exit 0 = delivered;
/// an exit code in --reject-exit (default 65) = rejected for good;
/// anything else, a signal, or --timeout = failed (the last lines of its
/// stderr become the item's last error; its stdout is discarded).
///
/// --url URL sends one request per item: the payload as the body, an
/// Idempotency-Key header (the item's key, or <spool-uuid>:<id> when it
/// has none: the same across retries and processes) and X-Spool-Attempt.
/// 2xx = delivered; 408, 425, 429, 5xx, --retry-status codes, connection
/// errors and timeouts = failed; other 4xx = rejected for good; a 3xx is
/// a failed attempt (redirects are not followed). https:// servers must
/// present a certificate the system store trusts (SSL_CERT_FILE and
/// SSL_CERT_DIR are honoured) or one from --cacert (a CA, or the server's
/// own certificate, pinned); a TLS failure names its cause (unknown
/// issuer, name mismatch, expired, a CA certificate presented as the
/// server's own) in the last error.
///
/// --push URL sends the items to a push receiver (`spool serve`, or any
/// server speaking docs/push-protocol.md) in numbered batches: each item
/// gets the spool's next sequence number, committed before the request
/// that carries it; the receiver applies every number once and answers
/// with a cumulative acknowledgement; acknowledged items leave the spool,
/// entries it rejected become dead letters with its reason. A failed
/// request (no answer, 408/425/429/5xx) counts an attempt on every item
/// of the batch and is resent, with the same numbers, after a backoff
/// (Retry-After honoured); --max-attempts bounds the consecutive failed
/// requests of the run, which then ends with exit 75 and nothing
/// dead-lettered. A Retry-After is kept as the in-flight items' next retry
/// time: a later run (or --follow) sends nothing before it (exit 75,
/// saying until when) unless --ignore-backoff. 413 halves the batch (an
/// item too large on its own is dead-lettered). A receiver that lost
/// state or sees another spool's content under this spool's uuid (409)
/// stops the run with exit 65, a refused token (401/403) with exit 77,
/// another 4xx with exit 65: the refused request's items stay in flight
/// with their sequence numbers and the next run resends them as they are
/// (`spool done --force ID` abandons one). Takes
/// -H, --timeout, --cacert, --limit (items sent), --deadline, --dry-run,
/// --wait, --max-attempts and the backoff options, plus --batch,
/// --batch-bytes and --compress; not --concurrency, --ordered or
/// --commit-every (one stream, in order).
///
/// One replay per spool runs at a time: a second one waits up to --wait,
/// then exits 75 naming the holder. Enqueues keep working meanwhile.
/// SIGINT/SIGTERM stop after the item(s) in flight (exit 130/143).
///
/// --follow keeps running as a service: when nothing is due it waits,
/// woken by new items (file-change notifications on the spool's
/// directory, and a look every --poll) and by the next retry time of a
/// waiting item, and delivers as items arrive; --idle-exit ends it after
/// that long without an attempt. SIGINT/SIGTERM end it after the item(s)
/// in flight with exit 0 and the summary of the whole run. Run it from
/// systemd (Type=simple, Restart=on-failure) instead of cron.
///
/// --events FILE (- for stdout) writes one NDJSON line per outcome, after
/// the commit that recorded it; --on-dead CMD runs CMD for every item the
/// run dead-lettered, its JSON on stdin (docs/events.md has the contract).
///
/// When stderr is a terminal (and without -q), a progress bar shows the
/// items attempted of those due when the run started (at most --limit),
/// the rate in items per second and the time left.
///
/// Exit status: 0 every due item was delivered; 75 an item failed and
/// stays queued, or due items were left by --limit/--deadline; 1 an item
/// was dead-lettered in this run (wins over 75).
///
/// Examples:
///   spool replay --url https://api.example.com/events -H 'Authorization: Bearer …'
///   spool replay --exec 'curl -fsS --data-binary @- https://hooks.example.com/x'
///   spool replay --exec ./deliver.sh --reject-exit 65,66 --max-attempts 10
///   spool replay --url http://127.0.0.1:8080/in --concurrency 16 --deadline 5m
///   spool replay --url https://inbox.internal:8787/v1/items --cacert /etc/spool/ca.pem
///   spool replay --push https://central:8787/v1/push -H 'Authorization: Bearer …' --compress
///   spool replay --url … --events /var/log/spool/events.ndjson --on-dead ./page-oncall.sh
///   */5 * * * *  spool -s /var/spool/app.db replay --url … --deadline 4m -q
///   # or as a systemd service (/etc/systemd/system/spool-replay.service):
///   #   [Service]
///   #   Type=simple
///   #   ExecStart=/usr/local/bin/spool -s /var/spool/app.db replay --follow --url …
///   #   Restart=on-failure
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("target").args(["exec", "url", "push"]).required(true)))]
pub struct ReplayArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub push: PushArgs,
    #[command(flatten)]
    pub replay: ReplayFlags,
    #[command(flatten)]
    pub follow: follow::FollowArgs,
    #[command(flatten)]
    pub outcomes: OutcomeArgs,
}

/// An error found while checking the flags, before the spool is opened:
/// a bad argument is a usage error (64); a file named by a flag that
/// cannot be read (`--cacert`) has the exit code of its kind (66, 65, 77).
pub fn setup_error(ctx: &Ctx, action: &str, e: Error) -> CliError {
    match e {
        Error::Io { .. } => ctx.fail(action, e),
        e => CliError::new(exit::USAGE, format!("{action} {}: {e}", ctx.shown())),
    }
}

/// SIGINT/SIGTERM stop a one-shot run after the item(s) in flight; the
/// run then exits 130/143 ([`Signals::exit_code`]).
fn stopping(stop: &StopHandle) -> Result<Signals, CliError> {
    let stop = stop.clone();
    Signals::handle(move |_| stop.stop(), None)
}

/// `spool replay --push`.
fn run_push(args: ReplayArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "push";
    let target = args.push.target(&args.target, ctx, ACTION)?;
    let flags = args.replay.options_for(args.target.timeout);
    let options =
        push_options(&flags, args.push.shape()).map_err(|e| setup_error(ctx, ACTION, e))?;
    let dry_run = options.dry_run;
    // Refuse a bad URL, header or --cacert before touching the spool.
    target.build().map_err(|e| setup_error(ctx, ACTION, e))?;
    let outcomes = args.outcomes.build(ctx, ACTION, notice_to_stderr())?;
    let to_stderr = args.outcomes.events_on_stdout();
    let mode = if dry_run {
        OpenMode::ReadOnly
    } else {
        OpenMode::ReadWrite
    };
    let spool = ctx.open(mode, ACTION)?;
    if args.follow.follow {
        let wait = args.replay.wait;
        let o = follow::Outputs {
            outcomes: outcomes.as_deref(),
            summary_to_stderr: to_stderr,
        };
        return follow::push(&args.follow, spool, target, options, wait, o, ctx);
    }
    let stop = StopHandle::default();
    let signals = stopping(&stop)?;
    let progress = Progress::new(ctx.verbosity, true);
    let with = with_outcomes(&progress, outcomes.as_deref(), &spool);
    let req = PushReplay {
        target,
        options,
        wait: args.replay.wait,
        clock: ctx.clock.clone(),
        stop,
        observer: Some(match &with {
            Some(w) => w,
            None => &progress,
        }),
    };
    let result = push(&spool, &req);
    progress.finish();
    finish_outcomes(outcomes.as_deref());
    ctx.notices(&spool);
    let run = result.map_err(|e| ctx.fail(ACTION, e))?;
    let r = &run.report;
    let json = ctx.json.then(|| push_report_json(r, &run.target));
    if !print_report(ctx, json, &r.summary(dry_run), &signals, dry_run, to_stderr)? {
        return Ok(());
    }
    match r.status().replay_status() {
        Ok(status) => exit::for_replay(status),
        Err(kind) => Err(push_refused(r, kind, ctx.shown())),
    }
}

/// Print a run's report (its JSON with `--json`, else its summary line),
/// whatever the exit status will be (on stderr with `to_stderr`: the
/// events have stdout). `Err` with the signal's status when
/// a signal stopped the run; `Ok(false)` for a dry run (exit 0 whatever
/// it found); `Ok(true)` when the status of the report decides.
fn print_report(
    ctx: &mut Ctx,
    json: Option<serde_json::Value>,
    summary: &str,
    signals: &Signals,
    dry_run: bool,
    to_stderr: bool,
) -> Result<bool, CliError> {
    if to_stderr {
        let line = json.map_or_else(|| summary.to_string(), |v| v.to_string());
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    } else {
        match json {
            Some(v) => ctx.out.json(&v)?,
            None => ctx.out.line(summary)?,
        }
        ctx.out.flush()?;
    }
    if let Some(code) = signals.exit_code() {
        return Err(CliError::Silent(code));
    }
    Ok(!dry_run)
}

pub fn run(args: ReplayArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    if args.push.push.is_some() {
        return run_push(args, ctx);
    }
    let options = args.replay.options_for(args.target.timeout);
    let dry_run = options.dry_run;
    check_options(&options).map_err(|e| ctx.fail("replay", e))?;
    if args.target.exec.is_some() && args.target.cacert.is_some() {
        // (watch accepts it with --exec: its https probe uses it.)
        return Err(CliError::new(
            exit::USAGE,
            format!("replay {}: --cacert applies to --url only", ctx.shown()),
        ));
    }
    let target = args.target.spec();
    // Refuse a bad --exec/--url/--cacert before touching the spool.
    target
        .build(options.concurrency)
        .map_err(|e| setup_error(ctx, "replay", e))?;
    let outcomes = args.outcomes.build(ctx, "replay", notice_to_stderr())?;
    let to_stderr = args.outcomes.events_on_stdout();
    let mode = if options.dry_run {
        OpenMode::ReadOnly
    } else {
        OpenMode::ReadWrite
    };
    let spool = ctx.open(mode, "replay")?;
    if args.follow.follow {
        let wait = args.replay.wait;
        let o = follow::Outputs {
            outcomes: outcomes.as_deref(),
            summary_to_stderr: to_stderr,
        };
        return follow::replay(&args.follow, spool, target, options, wait, o, ctx);
    }
    let stop = StopHandle::default();
    let signals = stopping(&stop)?;
    let progress = Progress::new(ctx.verbosity, true);
    let with = with_outcomes(&progress, outcomes.as_deref(), &spool);
    let req = ReplayRequest {
        target,
        options,
        wait: args.replay.wait,
        clock: ctx.clock.clone(),
        stop,
        observer: Some(match &with {
            Some(w) => w,
            None => &progress,
        }),
    };
    let result = replay(&spool, &req);
    progress.finish();
    finish_outcomes(outcomes.as_deref());
    ctx.notices(&spool);
    let run = result.map_err(|e| ctx.fail("replay", e))?;
    let r = &run.report;
    let json = ctx.json.then(|| report_json(r, &run.target));
    if !print_report(ctx, json, &r.summary(dry_run), &signals, dry_run, to_stderr)? {
        return Ok(());
    }
    exit::for_replay(r.status())
}
