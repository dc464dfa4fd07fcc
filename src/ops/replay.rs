//! `replay`: deliver the pending items of a spool to a command or a URL,
//! once, holding the spool's replay lock.

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::replay::exec::ExecTarget;
use crate::replay::http::{HttpOptions, HttpTarget};
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
    let mut worker = SyncWorker::new(&**spool, &*target, req.options.clone(), req.clock.clone())?
        .with_spool_path(path.as_deref())
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
