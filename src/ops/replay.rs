//! `replay`: deliver the pending items of a spool to a command or a URL,
//! or push them to a receiving spool, once, holding the spool's replay
//! lock.

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::replay::exec::ExecTarget;
use crate::replay::http::{HttpOptions, HttpPush, HttpPushOptions, HttpTarget};
use crate::replay::push::{PushOptions, PushReport, PushSender};
use crate::replay::{
    ReplayLock, ReplayObserver, ReplayOptions, ReplayReport, StopHandle, SyncWorker, Target,
};
use crate::time::SharedClock;
use std::time::Duration;

/// Where to deliver.
#[derive(Clone, Debug)]
pub enum TargetSpec {
    /// Run a command per item (`--exec`).
    Exec {
        /// The command line.
        command: String,
        /// Run it through `/bin/sh -c`.
        shell: bool,
        /// Exit codes that reject an item for good.
        reject_exit: Vec<i32>,
        /// Bound on one attempt.
        timeout: Option<Duration>,
    },
    /// Send one HTTP request per item (`--url`).
    Url {
        /// The URL (credentials in it are used, never shown).
        url: String,
        /// Method, content type, headers, retry statuses, timeout, TLS
        /// trust (`--cacert`).
        http: HttpOptions,
    },
}

impl TargetSpec {
    /// Build the target for up to `in_flight` deliveries at once,
    /// checking the command line or URL, and for `Url` reading the
    /// certificates TLS trusts. Errors are [`Error::InvalidInput`] (a bad
    /// command line, URL or header), or an [`Error::Io`] for a `--cacert`
    /// file that is missing, unreadable or not PEM certificates.
    pub fn build(&self, in_flight: usize) -> Result<Box<dyn Target>> {
        Ok(match self {
            TargetSpec::Exec {
                command,
                shell,
                reject_exit,
                timeout,
            } => Box::new(ExecTarget::new(
                command,
                *shell,
                reject_exit.clone(),
                *timeout,
            )?),
            TargetSpec::Url { url, http } => Box::new(HttpTarget::new(
                url,
                &HttpOptions {
                    connections: in_flight.max(1),
                    ..http.clone()
                },
            )?),
        })
    }
}

/// Everything one replay run needs.
pub struct ReplayRequest<'a> {
    /// The target.
    pub target: TargetSpec,
    /// Worker options.
    pub options: ReplayOptions,
    /// How long to wait for another replay of the same spool to finish.
    pub wait: Duration,
    /// The clock.
    pub clock: SharedClock,
    /// Stops the run after the item in flight (signals).
    pub stop: StopHandle,
    /// Progress and per-item reports.
    pub observer: Option<&'a dyn ReplayObserver>,
}

/// What a run did, and the target it ran against (for the summary).
#[derive(Clone, Debug)]
pub struct ReplayRun {
    /// The worker's report.
    pub report: ReplayReport,
    /// The target, described without secrets.
    pub target: String,
}

/// Replay `spool` once. Holds the spool's replay lock for the run (a dry
/// run takes no lock: it changes nothing), so two overlapping replays
/// never deliver the same item twice at the same time.
pub fn replay(spool: &Spool, req: &ReplayRequest<'_>) -> Result<ReplayRun> {
    let target = req.target.build(req.options.concurrency)?;
    let path = spool.path().map(|p| p.to_path_buf());
    let _lock = match (&path, req.options.dry_run) {
        (Some(p), false) => Some(ReplayLock::acquire(p, req.wait)?),
        _ => None,
    };
    // Leased replay is shared; only an ordered one is exclusive.
    let _exclusive = match req.options.ordered && !req.options.dry_run {
        true => ExclusiveLease::take(spool, req.wait)?,
        false => None,
    };
    let shown = path.clone().or_else(|| shown_address(spool));
    let mut worker = SyncWorker::new(&**spool, &*target, req.options.clone(), req.clock.clone())?
        .with_spool_path(shown.as_deref())
        .with_stop_handle(req.stop.clone());
    if let Some(o) = req.observer {
        worker = worker.with_observer(o);
    }
    let report = worker.run()?;
    Ok(ReplayRun {
        report,
        target: target.describe(),
    })
}

/// The exclusive replay lock of a spool with leased replay (PostgreSQL's
/// advisory lock), released when dropped.
struct ExclusiveLease<'a>(&'a dyn crate::queue::Leasing);

impl<'a> ExclusiveLease<'a> {
    /// Take it when the spool has leased replay (`None` otherwise: the
    /// local backends' replay lock is exclusive already).
    fn take(spool: &'a Spool, wait: Duration) -> Result<Option<ExclusiveLease<'a>>> {
        match spool.leasing() {
            Some(l) => {
                l.lock_exclusive(wait)?;
                Ok(Some(ExclusiveLease(l)))
            }
            None => Ok(None),
        }
    }
}

impl Drop for ExclusiveLease<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock_exclusive();
    }
}

/// What targets see as `SPOOL_PATH` for a spool without a path: its
/// address without the password.
fn shown_address(spool: &Spool) -> Option<std::path::PathBuf> {
    match spool {
        Spool::Postgres(q) => Some(q.display().into()),
        _ => None,
    }
}

/// Check replay options that the worker would refuse, with the flags'
/// names in the message.
pub fn check_options(o: &ReplayOptions) -> Result<()> {
    if o.ordered && o.concurrency > 1 {
        return Err(Error::Unsupported(
            "--ordered delivers one item at a time and cannot be combined with --concurrency"
                .into(),
        ));
    }
    if o.backoff.base > o.backoff.max {
        return Err(Error::Unsupported(
            "--backoff-base must not be larger than --backoff-max".into(),
        ));
    }
    Ok(())
}

/// Where and how to push (`--push URL`).
#[derive(Clone, Debug)]
pub struct PushTarget {
    /// The receiver's push endpoint (credentials in it are used, never
    /// shown).
    pub url: String,
    /// Headers, timeout, compression, TLS trust (`--cacert`).
    pub http: HttpPushOptions,
}

impl PushTarget {
    /// Build the transport, checking the URL and headers and reading the
    /// certificates TLS trusts: [`Error::InvalidInput`] for a bad URL or
    /// header, [`Error::Io`] for a bad `--cacert` file.
    pub fn build(&self) -> Result<HttpPush> {
        HttpPush::new(&self.url, &self.http)
    }
}

/// Everything one push run needs.
pub struct PushReplay<'a> {
    /// The receiver.
    pub target: PushTarget,
    /// Sender options.
    pub options: PushOptions,
    /// How long to wait for another replay of the same spool to finish.
    pub wait: Duration,
    /// The clock (backoff waits and the deadline).
    pub clock: SharedClock,
    /// Stops the run after the request in flight (signals).
    pub stop: StopHandle,
    /// Progress, per-item and per-request reports.
    pub observer: Option<&'a dyn ReplayObserver>,
}

/// What a push run did, and the receiver (for the summary).
#[derive(Clone, Debug)]
pub struct PushRun {
    /// The sender's report.
    pub report: PushReport,
    /// The receiver, described without secrets.
    pub target: String,
}

/// Push `spool` to a receiver once. Holds the spool's replay lock for
/// the run (a dry run takes none and changes nothing), so one stream of
/// sequence numbers goes out at a time.
pub fn push(spool: &Spool, req: &PushReplay<'_>) -> Result<PushRun> {
    use crate::replay::push::PushTransport as _;
    let transport = req.target.build()?;
    let path = spool.path().map(|p| p.to_path_buf());
    let _lock = match (&path, req.options.dry_run) {
        (Some(p), false) => Some(ReplayLock::acquire(p, req.wait)?),
        _ => None,
    };
    // One push stream per spool, across hosts.
    let _exclusive = match req.options.dry_run {
        false => ExclusiveLease::take(spool, req.wait)?,
        true => None,
    };
    let mut sender = PushSender::new(&**spool, &transport, req.options.clone(), req.clock.clone())?
        .with_stop_handle(req.stop.clone());
    if let Some(o) = req.observer {
        sender = sender.with_observer(o);
    }
    let report = sender.run()?;
    Ok(PushRun {
        report,
        target: transport.describe(),
    })
}

/// The push options for replay options `o` (the flags `--url` and
/// `--push` share) and the batch bounds. Refuses, naming the flag, what
/// does not apply to a push: one stream per client goes out in order, one
/// request at a time, and every acknowledgement is committed before the
/// next request.
pub fn push_options(o: &ReplayOptions, batch: usize, batch_bytes: u64) -> Result<PushOptions> {
    let refuse = |flag: &str, why: &str| {
        Err(Error::Unsupported(format!(
            "{flag} does not apply to --push: {why}"
        )))
    };
    if o.concurrency > 1 {
        return refuse(
            "--concurrency",
            "a spool is one push stream, sent in order one request at a time (use --batch to send more per request)",
        );
    }
    if o.ordered {
        return refuse(
            "--ordered",
            "a push is always in sequence order, and a failed request stops nothing but itself",
        );
    }
    if o.commit_every > 1 {
        return refuse(
            "--commit-every",
            "every acknowledgement is one commit for its whole batch already",
        );
    }
    check_options(o)?;
    if batch == 0 {
        return Err(Error::Unsupported("--batch must be at least 1".into()));
    }
    if batch_bytes == 0 {
        return Err(Error::Unsupported(
            "--batch-bytes must be at least 1 byte".into(),
        ));
    }
    Ok(PushOptions {
        max_attempts: o.max_attempts,
        backoff: o.backoff,
        ignore_backoff: o.ignore_backoff,
        limit: o.limit,
        deadline: o.deadline,
        dry_run: o.dry_run,
        batch,
        batch_bytes,
    })
}
