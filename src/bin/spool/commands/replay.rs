//! `spool replay`: deliver pending items to a command or a URL.

use super::{Ctx, Verbosity};
use crate::exit::{self, CliError};
use clap::{ArgGroup, Args};
use indicatif::{ProgressBar, ProgressStyle};
use spool::ops::replay::{check_options, replay, ReplayRequest, TargetSpec};
use spool::ops::replay::{push, push_options, PushReplay, PushTarget};
use spool::push::StopCause;
use spool::replay::events::{
    open_events_file, DeadHook, EventWriter, NoticeFn, OutcomeNotice, Outcomes, WithOutcomes,
    EVENT_QUEUE,
};
use spool::replay::exec::parse_exit_codes;
use spool::replay::follow::Watching;
use spool::replay::http::HttpPushOptions;
use spool::replay::http::{parse_statuses, HttpOptions};
use spool::replay::push::{PushEvent, PushHalt, PushReport, PushStatus, DEFAULT_BATCH};
use spool::replay::{
    Backoff, ItemOutcome, ReplayObserver, ReplayOptions, ReplayReport, ReplayStatus, StopHandle,
    StopReason,
};
use spool::tls::TlsTrust;
use spool::units::{parse_duration, parse_size};
use spool::{Error, Item, OpenMode, Spool};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    pub follow: super::follow::FollowArgs,
    #[command(flatten)]
    pub outcomes: OutcomeArgs,
}

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

/// `--push` and the options only it takes (shared with `spool watch`).
#[derive(Args, Debug, Clone)]
pub struct PushArgs {
    /// Push the items to the push receiver at URL, in numbered batches
    ///
    /// URL is the receiver's push endpoint (`…/v1/push` for `spool
    /// serve`). See docs/push-protocol.md for the protocol.
    #[arg(long, value_name = "URL")]
    pub push: Option<String>,

    /// Entries per push request
    #[arg(long, value_name = "N", default_value_t = DEFAULT_BATCH, conflicts_with_all = ["exec", "url"],
          allow_negative_numbers = true, value_parser = crate::whole::Whole::<usize>::between(1, 1_000_000, 500))]
    pub batch: usize,

    /// Bytes per push request body, before compression (one entry may exceed it)
    #[arg(long, value_name = "SIZE", default_value = "4MiB", value_parser = parse_size, conflicts_with_all = ["exec", "url"])]
    pub batch_bytes: u64,

    /// Compress push request bodies with gzip (Content-Encoding: gzip)
    #[arg(long, conflicts_with_all = ["exec", "url"])]
    pub compress: bool,
}

impl PushArgs {
    /// The push receiver and how to reach it (`-H`, `--timeout`,
    /// `--cacert`, `--compress`). The options of `--url` and `--exec`
    /// are usage errors here: clap's `requires` is satisfied by any
    /// member of the target group, so they are refused by hand.
    pub fn target(&self, t: &TargetArgs, ctx: &Ctx, action: &str) -> Result<PushTarget, CliError> {
        let foreign = [
            (t.method != "POST", "--method"),
            (
                t.content_type != "application/octet-stream",
                "--content-type",
            ),
            (t.retry_status.is_some(), "--retry-status"),
            (t.shell, "--shell"),
            (t.reject_exit.0 != [65], "--reject-exit"),
        ];
        if let Some((_, flag)) = foreign.iter().find(|(given, _)| *given) {
            return Err(CliError::new(
                exit::USAGE,
                format!(
                    "{action} {}: {flag} does not apply to --push (requests are POSTs of JSON; \
                     the receiver's answers decide what is retried)",
                    ctx.shown()
                ),
            ));
        }
        Ok(PushTarget {
            url: self.push.clone().unwrap_or_default(),
            http: HttpPushOptions {
                headers: t.headers.clone(),
                timeout: Some(t.timeout),
                compress: self.compress,
                trust: t.trust(),
            },
        })
    }
}

/// A comma-separated list of codes (one flag value, many numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Codes<T>(pub Vec<T>);

fn codes(s: &str) -> Result<Codes<i32>, String> {
    parse_exit_codes(s).map(Codes)
}

fn statuses(s: &str) -> Result<Codes<u16>, String> {
    parse_statuses(s).map(Codes)
}

/// Where to deliver (shared with `spool watch`).
#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    /// Run CMD once per item, the payload on stdin
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,

    /// Run the --exec command through /bin/sh -c (shell syntax allowed)
    #[arg(long, requires = "exec", conflicts_with = "url")]
    pub shell: bool,

    /// Exit codes of the --exec command that reject an item for good
    #[arg(long, value_name = "CODES", default_value = "65", value_parser = codes, requires = "exec", conflicts_with = "url")]
    pub reject_exit: Codes<i32>,

    /// POST (or --method) each payload to URL
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,

    /// HTTP method for --url
    #[arg(
        long,
        value_name = "METHOD",
        default_value = "POST",
        requires = "url",
        conflicts_with = "exec"
    )]
    pub method: String,

    /// Content-Type of the request body
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "application/octet-stream",
        requires = "url",
        conflicts_with = "exec"
    )]
    pub content_type: String,

    /// Extra request header, 'Name: value' (repeatable; --url, --push)
    #[arg(
        short = 'H',
        long = "header",
        value_name = "HEADER",
        conflicts_with = "exec"
    )]
    pub headers: Vec<String>,

    /// 4xx statuses to retry instead of rejecting (comma-separated)
    #[arg(long, value_name = "CODES", value_parser = statuses, requires = "url", conflicts_with = "exec")]
    pub retry_status: Option<Codes<u16>>,

    /// Bound on one delivery attempt
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Also trust the certificate(s) in FILE (PEM) for https://
    ///
    /// In addition to the system's certificate store (SSL_CERT_FILE and
    /// SSL_CERT_DIR are honoured, as by curl): a private CA, or the very
    /// certificate a server presents (a self-signed `spool serve`, such
    /// as one made with `openssl req -x509`), which is then pinned:
    /// accepted as that server's own while it is valid and names the
    /// server, even when it is marked CA:TRUE. FILE holds one or more
    /// -----BEGIN CERTIFICATE----- blocks; a missing file is exit 66, an
    /// empty or non-PEM one exit 65, before anything is delivered.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
}

impl TargetArgs {
    /// What TLS trusts (`--cacert`).
    pub fn trust(&self) -> TlsTrust {
        TlsTrust {
            cacert: self.cacert.clone(),
        }
    }

    /// The library's description of the target.
    pub fn spec(&self) -> TargetSpec {
        match (&self.exec, &self.url) {
            (Some(command), _) => TargetSpec::Exec {
                command: command.clone(),
                shell: self.shell,
                reject_exit: self.reject_exit.0.clone(),
                timeout: Some(self.timeout),
            },
            (None, url) => TargetSpec::Url {
                url: url.clone().unwrap_or_default(),
                http: HttpOptions {
                    method: self.method.clone(),
                    content_type: self.content_type.clone(),
                    headers: self.headers.clone(),
                    retry_status: self.retry_status.clone().map(|c| c.0).unwrap_or_default(),
                    timeout: Some(self.timeout),
                    trust: self.trust(),
                    ..HttpOptions::default()
                },
            },
        }
    }
}

/// How to replay (shared with `spool watch`).
#[derive(Args, Debug, Clone)]
pub struct ReplayFlags {
    /// Failed attempts (cumulative, across runs) before an item is dead-lettered
    ///
    /// An item whose attempts already reach N is dead-lettered by the next
    /// run without another attempt. With --push: the consecutive failed
    /// requests of one run, after which the run ends with exit 75 (a push
    /// never dead-letters an item for a failed request or for its
    /// attempts; a later run starts a fresh budget).
    #[arg(long, value_name = "N", default_value_t = 5, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 5))]
    pub max_attempts: u32,

    /// Wait after the first failed attempt (doubles per attempt, with jitter)
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub backoff_base: Duration,

    /// Longest wait between attempts (a Retry-After may ask for more)
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub backoff_max: Duration,

    /// Attempt items even when their next retry time has not come
    ///
    /// With --push also before the time a receiver's Retry-After asked
    /// for. An item is still attempted at most once per run.
    #[arg(long)]
    pub ignore_backoff: bool,

    /// Stop at the first item that fails and stays queued (nothing overtakes it)
    #[arg(long, conflicts_with = "concurrency")]
    pub ordered: bool,

    /// Attempt at most N items
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<u64>::any(100))]
    pub limit: Option<u64>,

    /// Start no new attempt after DURATION (for cron)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub deadline: Option<Duration>,

    /// Show what the run would do (attempt, or dead-letter items at their budget); change nothing
    #[arg(long)]
    pub dry_run: bool,

    /// If another replay holds the spool, wait up to DURATION for it
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub wait: Duration,

    /// Keep up to N deliveries in flight at once
    #[arg(long, value_name = "N", default_value_t = 1, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::between(1, 256, 8))]
    pub concurrency: u32,

    /// Commit delivered items as done in groups of N (a crash may redeliver up to N-1)
    ///
    /// By default every delivery is recorded durably before the next item
    /// is sent. With N > 1, up to N deliveries share one commit (also
    /// committed after 500ms and at the end of the run): much faster on
    /// slow disks; a crash redelivers at most N-1 items, with the same
    /// idempotency keys. Nothing is ever marked done before its delivery
    /// succeeded.
    #[arg(long, value_name = "N", default_value_t = 1, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::between(1, 10_000, 100))]
    pub commit_every: u32,

    /// PostgreSQL: how long a claimed item stays leased to this replayer
    ///
    /// Replay on a PostgreSQL spool is shared: each replayer claims due
    /// items and leases them; an item whose lease runs out before its
    /// outcome is recorded (the replayer died, or hung) is due again and
    /// another replayer takes it over (at-least-once). Make it longer than
    /// one delivery can take. Default: --timeout + 30s. Ignored by the
    /// local backends, whose replay is exclusive.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lease: Option<Duration>,
}

impl ReplayFlags {
    /// The worker options.
    pub fn options(&self) -> ReplayOptions {
        ReplayOptions {
            max_attempts: self.max_attempts,
            backoff: Backoff {
                base: self.backoff_base,
                max: self.backoff_max,
            },
            ignore_backoff: self.ignore_backoff,
            ordered: self.ordered,
            limit: self.limit,
            deadline: self.deadline,
            dry_run: self.dry_run,
            concurrency: self.concurrency as usize,
            commit_every: self.commit_every as usize,
            lease: self.lease.unwrap_or(spool::replay::DEFAULT_LEASE),
        }
    }

    /// The worker options for deliveries bounded by `timeout`: the lease
    /// defaults to `timeout` + 30s.
    pub fn options_for(&self, timeout: Duration) -> ReplayOptions {
        ReplayOptions {
            lease: self
                .lease
                .unwrap_or_else(|| timeout.saturating_add(Duration::from_secs(30))),
            ..self.options()
        }
    }
}

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
            PushEvent::Sending {
                first,
                last,
                items,
                skips,
                bytes,
            } => self.say(
                Verbosity::Verbose,
                format!(
                    "push: sending sequence {first}..{last} ({items} items, {skips} skips, {bytes} bytes)"
                ),
            ),
            PushEvent::Acked {
                last_seq,
                applied,
                duplicates,
            } => self.say(
                Verbosity::Verbose,
                format!(
                    "push: acknowledged up to {last_seq} ({applied} applied, {duplicates} duplicates)"
                ),
            ),
            PushEvent::OverAck { claimed, highest } => self.say(
                Verbosity::Normal,
                format!(
                    "warning: the push receiver acknowledged up to sequence {claimed}, but this \
                     spool has assigned only up to {highest}; the excess is ignored (does the \
                     receiver hold another client's history under this spool's uuid?)"
                ),
            ),
            PushEvent::RequestFailed {
                reason,
                failures,
                max,
                retry_in,
            } => self.say_or_tell_first(
                Verbosity::Normal,
                &self.told_failure,
                match retry_in {
                    Some(d) => format!(
                        "{reason} (failed request {failures} of {max}); resending in {}",
                        crate::render::duration(*d)
                    ),
                    None => format!(
                        "{reason} (failed request {failures} of {max}); no more requests in this run"
                    ),
                },
            ),
            PushEvent::Halved {
                max_entries,
                max_bytes,
            } => self.say(
                Verbosity::Normal,
                format!(
                    "push: the receiver refused the request as too large; at most {max_entries} \
                     entries and {max_bytes} bytes per request from now on"
                ),
            ),
            PushEvent::Resend { from } => self.say(
                Verbosity::Verbose,
                format!("push: the receiver asked to resend from sequence {from}"),
            ),
            PushEvent::WouldSend {
                seq,
                item,
                in_flight,
            } => {
                let verb = if *in_flight { "would resend" } else { "would send" };
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

/// Which signal stopped the run.
#[derive(Clone, Default)]
pub struct Signals {
    int: Arc<AtomicBool>,
    term: Arc<AtomicBool>,
}

impl Signals {
    /// Route SIGINT and SIGTERM to `stop` and remember which came.
    pub fn install(stop: &StopHandle) -> Result<Signals, CliError> {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let s = Signals::default();
        let reg = |sig, flag: Arc<AtomicBool>| {
            signal_hook::flag::register(sig, flag)
                .map(|_| ())
                .map_err(|e| CliError::new(exit::SOFTWARE, format!("cannot handle signals: {e}")))
        };
        reg(SIGINT, s.int.clone())?;
        reg(SIGTERM, s.term.clone())?;
        reg(SIGINT, stop.flag())?;
        reg(SIGTERM, stop.flag())?;
        Ok(s)
    }

    /// 130 after SIGINT, 143 after SIGTERM.
    pub fn exit_code(&self) -> Option<u8> {
        if self.int.load(Ordering::SeqCst) {
            Some(exit::INTERRUPTED)
        } else if self.term.load(Ordering::SeqCst) {
            Some(exit::TERMINATED)
        } else {
            None
        }
    }
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

/// The report as JSON.
pub fn report_json(r: &ReplayReport, target: &str) -> serde_json::Value {
    serde_json::json!({
        "target": target,
        "delivered": r.delivered,
        "failed": r.failed,
        "dead_lettered": r.dead_lettered,
        "rejected": r.rejected,
        "not_due": r.not_due,
        "group_waiting": r.group_waiting,
        "held": r.held,
        "would_attempt": r.would_attempt,
        "would_dead_letter": r.would_dead_letter,
        "stopped": r.stopped.map(|s| match s {
            StopReason::Stopped => "signal",
            StopReason::Limit => "limit",
            StopReason::Deadline => "deadline",
            StopReason::OrderedFailure => "ordered_failure",
        }),
        "left_due": r.left_due,
    })
}

/// The push report as JSON.
pub fn push_report_json(r: &PushReport, target: &str) -> serde_json::Value {
    serde_json::json!({
        "target": target,
        "requests": r.requests,
        "failed_requests": r.failed_requests,
        "acknowledged": r.acknowledged,
        "delivered": r.delivered,
        "rejected": r.rejected,
        "too_large": r.too_large,
        "unsendable": r.unsendable,
        "dead_lettered": r.dead_lettered(),
        "skipped": r.skipped,
        "duplicates": r.duplicates,
        "sent": r.sent,
        "in_flight": r.in_flight,
        "watermark": r.watermark,
        "not_due": r.not_due,
        "held": r.held,
        "would_resend": r.would_resend,
        "would_send": r.would_send,
        "stopped": r.halt.as_ref().map(|h| match h {
            PushHalt::Signal => "signal",
            PushHalt::Limit => "limit",
            PushHalt::Deadline => "deadline",
            PushHalt::Budget => "budget",
            PushHalt::RetryAfter(_) => "retry_after",
            PushHalt::NotBefore(_) => "not_before",
            PushHalt::Refused(_) => "refused",
        }),
        "left_due": r.left_due,
        "last_error": r.last_error,
        "not_before": r.not_before.map(|t| t.to_string()),
        "error": r.refusal().map(|s| s.message.clone()),
    })
}

/// The next step after the receiver stopped a push that left `in_flight`
/// sequence numbers unacknowledged. The items of the refused request were
/// numbered (committed before it was sent): they stay in flight, and the
/// next run resends them with the same numbers; `done --force` abandons
/// one. Only a stop with nothing in flight changed no item.
pub(super) fn push_hint(cause: StopCause, in_flight: u64) -> String {
    let stays = match in_flight {
        0 => "no item was changed".to_string(),
        1 => "1 entry stays in flight with its sequence number, and the next run resends it \
              with the same number (`spool list` shows it; `spool done --force ID` abandons it)"
            .to_string(),
        n => format!(
            "{n} entries stay in flight with their sequence numbers, and the next run resends \
             them with the same numbers (`spool list` shows them; `spool done --force ID` \
             abandons one)"
        ),
    };
    match cause {
        StopCause::LostState => format!(
            "the receiver went back to an older state (a restored backup?); nothing was resent or \
             dropped: find out what it lost (GET /v1/clients/<spool uuid> on spool serve) before \
             pushing again; {stays}"
        ),
        StopCause::ContentConflict => "if this spool is a copy of another one (a cloned disk \
             or VM image, a restored backup), give it its own identity with `spool config uuid \
             --regenerate` (which renumbers what is in flight), then push again"
            .to_string(),
        StopCause::Unauthorized => format!(
            "check the credentials sent with -H (e.g. 'Authorization: Bearer …') against the \
             receiver's tokens; {stays}"
        ),
        StopCause::Refused => format!("the receiver's answer is quoted above; {stays}"),
    }
}

/// `spool replay --push`.
fn run_push(args: ReplayArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "push";
    let target = args.push.target(&args.target, ctx, ACTION)?;
    let flags = args.replay.options_for(args.target.timeout);
    let options = push_options(&flags, args.push.batch, args.push.batch_bytes)
        .map_err(|e| setup_error(ctx, ACTION, e))?;
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
        let o = super::follow::Outputs {
            outcomes: outcomes.as_deref(),
            summary_to_stderr: to_stderr,
        };
        return super::follow::push(&args.follow, spool, target, options, wait, o, ctx);
    }
    let stop = StopHandle::default();
    let signals = Signals::install(&stop)?;
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
    match r.status() {
        PushStatus::Clean => Ok(()),
        PushStatus::Retry => Err(CliError::Silent(exit::TEMP_FAIL)),
        PushStatus::DeadLettered => Err(CliError::Silent(exit::DEAD_LETTERED)),
        PushStatus::Refused(kind) => {
            let (message, cause) = r
                .refusal()
                .map(|s| (s.message.clone(), s.cause))
                .unwrap_or_else(|| {
                    (
                        "the push receiver refused the run".into(),
                        StopCause::Refused,
                    )
                });
            Err(CliError::new(
                exit::for_kind(kind),
                format!("{ACTION} {}: {message}", ctx.shown()),
            )
            .hint(push_hint(cause, r.in_flight)))
        }
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
        let o = super::follow::Outputs {
            outcomes: outcomes.as_deref(),
            summary_to_stderr: to_stderr,
        };
        return super::follow::replay(&args.follow, spool, target, options, wait, o, ctx);
    }
    let stop = StopHandle::default();
    let signals = Signals::install(&stop)?;
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
    match r.status() {
        ReplayStatus::Clean => Ok(()),
        ReplayStatus::Retry => Err(CliError::Silent(exit::TEMP_FAIL)),
        ReplayStatus::DeadLettered => Err(CliError::Silent(exit::DEAD_LETTERED)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
