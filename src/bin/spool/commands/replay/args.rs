//! The flags of a replay's target and run: `--exec`/`--url`, `--push`
//! and the replay options (shared with `spool watch`).

use crate::commands::Ctx;
use crate::exit::{self, CliError};
use clap::Args;
use spool::ops::replay::{PushTarget, TargetSpec};
use spool::replay::exec::parse_exit_codes;
use spool::replay::http::HttpPushOptions;
use spool::replay::http::{parse_statuses, HttpOptions};
use spool::replay::push::{PushShape, DEFAULT_BATCH, DEFAULT_PIPELINE, MAX_PIPELINE};
use spool::replay::{Backoff, ReplayOptions};
use spool::tls::TlsTrust;
use spool::units::{parse_duration, parse_size};
use std::path::PathBuf;
use std::time::Duration;

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

    /// Push requests in flight at once (1 waits for each acknowledgement)
    ///
    /// Requests go out in sequence order and their answers are applied in
    /// that order; acknowledgements stay cumulative. A request that reaches
    /// the receiver before the one ahead of it is answered 409 and resent.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PIPELINE, conflicts_with_all = ["exec", "url"],
          allow_negative_numbers = true,
          value_parser = crate::whole::Whole::<usize>::between(1, MAX_PIPELINE as u64, 2))]
    pub pipeline: usize,

    /// Compress push request bodies with gzip (Content-Encoding: gzip)
    #[arg(long, conflicts_with_all = ["exec", "url"])]
    pub compress: bool,
}

impl PushArgs {
    /// How the stream is cut into requests.
    pub fn shape(&self) -> PushShape {
        PushShape {
            batch: self.batch,
            batch_bytes: self.batch_bytes,
            pipeline: self.pipeline,
        }
    }

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
