//! `spool watch`: probe the link and replay the spool when it comes back.

use super::replay::{setup_error, OutcomeArgs, PushArgs, ReplayFlags, TargetArgs};
use super::signals::Signals;
use super::{Ctx, Verbosity};
use crate::exit::CliError;
use clap::{ArgGroup, Args};
use spool::ops::watch::{Level, LogEntry, Watch, WatchConfig, WatchLog, WatchStop, WatchTarget};
use spool::units::parse_duration;
use spool::OpenMode;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Probe the link; replay the spool as soon as it comes back
///
/// A long-running daemon. Every --interval it probes TARGET:
///   tcp://HOST:PORT   up when a TCP connection opens
///   http(s)://URL     up on a 2xx answer (and, with --probe-expect, a body
///                     containing that text: a captive portal's 200 is not up);
///                     https trusts the system store and --cacert, as --url does
///   exec:CMD          up when CMD exits 0
/// After --failure-threshold failed probes in a row the link is offline;
/// after --online-threshold good ones it is online again.
///
/// When the link comes back: up to --reconnect-attempts probes (waiting
/// --retry-delay between them), then the --on-online hook, then a replay
/// of the spool with the options of `spool replay` (--exec, --url or
/// --push, and the rest), unless the link went away again meanwhile. A
/// --push round that used up its request budget holds the next periodic
/// and change rounds back for --backoff-max (or the receiver's longer
/// Retry-After); the link coming back pushes at once. When it goes
/// away: the replay in flight stops after its current item and the
/// --on-offline hook runs. At startup the link is probed at once: up, it
/// runs the online sequence; down, it runs --on-offline once and delivers
/// nothing until the link is back. While online it also replays every
/// --replay-interval, and as soon as new items are enqueued (woken by
/// file-change notifications, as replay --follow is); 0 turns both off.
///
/// Hooks are split into words like --exec (no shell; write sh -c '...'
/// for one), run with SPOOL_PATH and SPOOL_EVENT (online/offline) set,
/// bounded by --timeout; a failing hook is logged and the sequence goes
/// on. --events, --on-dead and --hook-timeout work as for replay, over
/// every round (docs/events.md). Each replay round holds the spool's replay lock, so a cron
/// `spool replay` never overlaps it: a busy lock skips that round.
///
/// Logs go to stderr, one line per event: an RFC 3339 time, a level
/// (detail, info, warn, error) and the message; -v adds per-item lines,
/// -q keeps warnings and errors. --metrics-file is rewritten atomically
/// (Prometheus text) after every transition and replay round.
///
/// SIGTERM or SIGINT stops it after the item in flight, with exit 0 (a
/// second signal a second or more later exits at once with 143/130). The
/// spool must exist (exit 66 otherwise); bad flags exit 64.
///
/// Examples:
///   spool -s /var/spool/app.db watch --probe tcp://api.example.com:443 \
///       --url https://api.example.com/events --metrics-file /run/spool.prom
///   spool watch --probe https://api.example.com/health --probe-expect '"ok"' \
///       --exec ./deliver.sh --on-online 'systemctl start app-sync' --interval 10s
///   spool watch --probe tcp://central.example.net:8787 \
///       --push https://central.example.net:8787/v1/push -H 'Authorization: Bearer …' \
///       --cacert /etc/spool/central.pem --compress
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("target").args(["exec", "url", "push"]).required(true)))]
pub struct WatchArgs {
    /// What to probe: tcp://HOST:PORT, http(s)://URL or exec:CMD
    #[arg(long, value_name = "TARGET")]
    probe: String,

    /// HTTP probes only: text the answer's body must contain
    #[arg(long, value_name = "TEXT")]
    probe_expect: Option<String>,

    /// Bound on one probe
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    probe_timeout: Duration,

    /// Time between probes
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    interval: Duration,

    /// Failed probes in a row before the link counts as offline
    #[arg(long, value_name = "N", default_value_t = 3, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 3))]
    failure_threshold: u32,

    /// Good probes in a row before the link counts as online
    #[arg(long, value_name = "N", default_value_t = 1, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 2))]
    online_threshold: u32,

    /// Reconnect attempts (probes) per online sequence before giving up
    #[arg(long, value_name = "N", default_value_t = 10, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 10))]
    reconnect_attempts: u32,

    /// Wait between failed reconnect attempts
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    retry_delay: Duration,

    /// Run CMD when the link comes back, before the replay
    #[arg(long, value_name = "CMD")]
    on_online: Option<String>,

    /// Run CMD when the link goes away (and at startup when it is down)
    #[arg(long, value_name = "CMD")]
    on_offline: Option<String>,

    /// Also replay this often while online (0: only when the link comes back)
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_duration)]
    replay_interval: Duration,

    /// Write Prometheus metrics to FILE (replaced atomically)
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,

    #[command(flatten, next_help_heading = "Delivery (as in spool replay)")]
    target: TargetArgs,

    #[command(flatten, next_help_heading = "Delivery (as in spool replay)")]
    push: PushArgs,

    #[command(flatten, next_help_heading = "Each replay round (as in spool replay)")]
    replay: ReplayFlags,

    #[command(flatten, next_help_heading = "Outcomes (as in spool replay)")]
    outcomes: OutcomeArgs,
}

/// Log lines on stderr: `<time> <level>: <message>`, or one JSON object
/// per line with `--json`.
struct StderrLog {
    verbosity: Verbosity,
    json: bool,
}

impl StderrLog {
    fn line(&self, at: spool::Timestamp, level: Level, event: &str, message: &str) {
        let shown = match self.verbosity {
            Verbosity::Quiet => level >= Level::Warn,
            Verbosity::Normal => level >= Level::Info,
            Verbosity::Verbose => true,
        };
        if !shown {
            return;
        }
        let line = if self.json {
            serde_json::json!({
                "time": at.to_rfc3339(),
                "level": level.name(),
                "event": event,
                "message": message,
            })
            .to_string()
        } else {
            format!("{} {}: {message}", at.to_rfc3339(), level.name())
        };
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}

impl WatchLog for StderrLog {
    fn log(&self, e: &LogEntry) {
        self.line(e.at, e.level, e.event.name(), &e.event.to_string());
    }
}

/// SIGINT/SIGTERM: the first stops the daemon cleanly. One that comes
/// more than a second later exits at once (130/143); closer repeats
/// (`timeout` signals both the child and its group) count as the same
/// request.
fn install_signals(stop: WatchStop, log: Arc<StderrLog>) -> Result<(), CliError> {
    let first = log.clone();
    Signals::handle(
        move |name| {
            let now = spool::Timestamp::now();
            first.line(now, Level::Info, "signal", &format!("received {name}"));
            stop.stop();
        },
        Some(Box::new(move |name| {
            log.line(
                spool::Timestamp::now(),
                Level::Warn,
                "signal",
                &format!("received {name} again: exiting now"),
            );
        })),
    )?;
    Ok(())
}

pub fn run(args: WatchArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let target = match &args.push.push {
        Some(_) => WatchTarget::Push {
            target: args.push.target(&args.target, ctx, "watch")?,
            shape: args.push.shape(),
        },
        None => WatchTarget::Replay(args.target.spec()),
    };
    let mut cfg = WatchConfig::new(args.probe, target);
    cfg.probe_expect = args.probe_expect;
    cfg.probe_timeout = args.probe_timeout;
    cfg.probe_trust = args.target.trust();
    cfg.interval = args.interval;
    cfg.failure_threshold = args.failure_threshold;
    cfg.online_threshold = args.online_threshold;
    cfg.reconnect_attempts = args.reconnect_attempts;
    cfg.retry_delay = args.retry_delay;
    cfg.on_online = args.on_online;
    cfg.on_offline = args.on_offline;
    cfg.hook_timeout = args.target.timeout;
    cfg.replay_interval = args.replay_interval;
    cfg.metrics_file = args.metrics_file;
    cfg.options = args.replay.options_for(args.target.timeout);
    cfg.wait = args.replay.wait;
    cfg.clock = ctx.clock.clone();
    let log = Arc::new(StderrLog {
        verbosity: ctx.verbosity,
        json: ctx.json,
    });
    let notice = {
        let log = log.clone();
        Arc::new(move |n: &spool::replay::events::OutcomeNotice| {
            log.line(
                spool::Timestamp::now(),
                Level::Warn,
                "outcomes",
                &n.to_string(),
            );
        })
    };
    // Every flag is checked before the spool is touched.
    cfg.outcomes = args.outcomes.build(ctx, "watch", notice)?;
    let outcomes = cfg.outcomes.clone();
    let watch = Watch::new(cfg).map_err(|e| setup_error(ctx, "watch", e))?;
    // Like replay, watch needs an existing spool: a typo in --spool must
    // not start a daemon watching an empty new file forever.
    let spool = ctx.open(OpenMode::ReadWrite, "watch")?;
    let stop = WatchStop::new();
    install_signals(stop.clone(), log.clone())?;
    let spool = Arc::new(spool);
    let ran = watch.run(spool.clone(), log, &stop);
    super::replay::finish_outcomes(outcomes.as_deref());
    ran.map_err(|e| ctx.fail("watch", e))?;
    ctx.notices(&spool);
    Ok(())
}
