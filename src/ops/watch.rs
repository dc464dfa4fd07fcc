//! `watch`: the operation behind `spool watch` — check the
//! configuration ([`Watch::new`]), then run the daemon that probes the
//! link and replays the spool as soon as it comes back ([`Watch::run`];
//! the daemon is [`crate::watch::daemon`]).
//!
//! Every round is this crate's `replay` (or `replay --push`) operation
//! over the configured target.

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::ops::replay::{
    check_options, push, push_options, replay, PushReplay, PushTarget, ReplayRequest, TargetSpec,
};
use crate::replay::events::Outcomes;
use crate::replay::push::{PushHalt, PushOptions, PushShape, PushTransport as _};
use crate::replay::{ReplayObserver, ReplayOptions, StopHandle};
use crate::time::SharedClock;
use crate::tls::TlsTrust;
use crate::watch::daemon::{self, Deliver, Setup};
use crate::watch::hooks::Hook;
use crate::watch::{NetworkMonitorConfig, Probe, ProbeOptions, ReconnectConfig, StartState};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use crate::watch::{
    HookKind, Level, LogEntry, PushNote, Round, Trigger, WatchEvent, WatchLog, WatchStop,
    WatchSummary,
};

/// Everything `spool watch` is configured with.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// `--probe`: `tcp://HOST:PORT`, `http(s)://URL` or `exec:CMD`.
    pub probe: String,
    /// `--probe-expect`: text an HTTP probe's body must contain.
    pub probe_expect: Option<String>,
    /// `--probe-timeout`: bound on one probe (default 5 s).
    pub probe_timeout: Duration,
    /// `--cacert`: what an `https://` probe trusts (the `--url` target
    /// has its own, in [`TargetSpec::Url`]'s options).
    pub probe_trust: TlsTrust,
    /// `--interval`: time between probes (default 5 s).
    pub interval: Duration,
    /// `--failure-threshold`: failed probes in a row before going offline
    /// (default 3).
    pub failure_threshold: u32,
    /// `--online-threshold`: good probes in a row before going online
    /// (default 1).
    pub online_threshold: u32,
    /// `--reconnect-attempts`: attempts per online sequence (default 10).
    pub reconnect_attempts: u32,
    /// `--retry-delay`: wait between failed attempts (default 2 s).
    pub retry_delay: Duration,
    /// `--on-online`: the command run when the link comes back.
    pub on_online: Option<String>,
    /// `--on-offline`: the command run when the link goes away.
    pub on_offline: Option<String>,
    /// Bound on one hook run (the CLI uses `--timeout`).
    pub hook_timeout: Duration,
    /// `--replay-interval`: replay this often while online (zero: only
    /// on reconnect).
    pub replay_interval: Duration,
    /// `--metrics-file`: where to write the Prometheus text.
    pub metrics_file: Option<PathBuf>,
    /// Where to deliver.
    pub target: WatchTarget,
    /// How to replay (every round). For a push, the options `replay
    /// --push` takes of them (others are refused by [`Watch::new`]).
    pub options: ReplayOptions,
    /// How long a round waits for another replay's lock before skipping.
    pub wait: Duration,
    /// The clock for log times, backoff and metrics.
    pub clock: SharedClock,
    /// Where every round's recorded outcomes go (`--events`,
    /// `--on-dead`); the caller finishes it after [`Watch::run`].
    pub outcomes: Option<Arc<Outcomes>>,
}

impl WatchConfig {
    /// The defaults of SPEC §5 for `probe` and `target`.
    pub fn new(probe: impl Into<String>, target: impl Into<WatchTarget>) -> WatchConfig {
        WatchConfig {
            probe: probe.into(),
            probe_expect: None,
            probe_timeout: Duration::from_secs(5),
            probe_trust: TlsTrust::default(),
            interval: Duration::from_secs(5),
            failure_threshold: 3,
            online_threshold: 1,
            reconnect_attempts: 10,
            retry_delay: Duration::from_secs(2),
            on_online: None,
            on_offline: None,
            hook_timeout: Duration::from_secs(30),
            replay_interval: Duration::from_secs(60),
            metrics_file: None,
            target: target.into(),
            options: ReplayOptions::default(),
            wait: Duration::ZERO,
            clock: crate::time::system_clock(),
            outcomes: None,
        }
    }
}

/// Where `watch` delivers: item by item (`--exec`, `--url`: every round
/// is a `replay`) or to a push receiver (`--push`: every round is a
/// `replay --push` run).
#[derive(Clone, Debug)]
pub enum WatchTarget {
    /// `--exec CMD` or `--url URL`.
    Replay(TargetSpec),
    /// `--push URL`.
    Push {
        /// The receiver.
        target: PushTarget,
        /// How the stream is cut into requests (`--batch`,
        /// `--batch-bytes`, `--pipeline`).
        shape: PushShape,
    },
}

impl From<TargetSpec> for WatchTarget {
    fn from(t: TargetSpec) -> WatchTarget {
        WatchTarget::Replay(t)
    }
}

/// A checked [`WatchTarget`] with the options of its rounds.
#[derive(Clone, Debug)]
enum Delivery {
    Replay {
        target: TargetSpec,
        options: ReplayOptions,
    },
    Push {
        target: PushTarget,
        options: PushOptions,
    },
}

/// The daemon's rounds: [`replay`] or [`push`] over the checked target,
/// waiting `wait` for another replay's lock.
#[derive(Debug)]
struct Rounds {
    delivery: Delivery,
    wait: Duration,
    clock: SharedClock,
}

impl Deliver for Rounds {
    fn round(
        &self,
        spool: &Spool,
        stop: StopHandle,
        observer: &dyn ReplayObserver,
    ) -> Result<Round> {
        match &self.delivery {
            Delivery::Replay { target, options } => {
                let req = ReplayRequest {
                    target: target.clone(),
                    options: options.clone(),
                    wait: self.wait,
                    clock: self.clock.clone(),
                    stop,
                    observer: Some(observer),
                };
                replay(spool, &req).map(|run| Round::Ran(run.report))
            }
            Delivery::Push { target, options } => {
                let req = PushReplay {
                    target: target.clone(),
                    options: options.clone(),
                    wait: self.wait,
                    clock: self.clock.clone(),
                    stop,
                    observer: Some(observer),
                };
                push(spool, &req).map(|run| Round::Pushed(run.report))
            }
        }
    }

    /// A push round that used up its request budget waits `--backoff-max`;
    /// one the receiver told to wait longer waits that long.
    fn hold_after(&self, halt: &PushHalt) -> Option<Duration> {
        match (&self.delivery, halt) {
            (Delivery::Push { options, .. }, PushHalt::Budget) => Some(options.backoff.max),
            (_, PushHalt::RetryAfter(d)) => Some(*d),
            _ => None,
        }
    }
}

/// A checked watch configuration, ready to [`run`](Watch::run).
#[derive(Debug)]
pub struct Watch {
    setup: Setup,
}

impl Watch {
    /// Check everything that can be checked before touching the spool:
    /// the probe target, the delivery target, the hooks, thresholds and
    /// intervals, the replay options, the `--cacert` files. Errors are
    /// [`Error::InvalidInput`] or [`Error::Unsupported`] (usage errors),
    /// or an [`Error::Io`] for a `--cacert` file that is missing,
    /// unreadable or not PEM certificates.
    pub fn new(cfg: WatchConfig) -> Result<Watch> {
        let probe = Probe::parse(
            &cfg.probe,
            &ProbeOptions {
                timeout: cfg.probe_timeout,
                expect: cfg.probe_expect.clone(),
                trust: cfg.probe_trust.clone(),
            },
        )?;
        let monitor = NetworkMonitorConfig {
            probe_interval: cfg.interval,
            failure_threshold: cfg.failure_threshold,
            online_threshold: cfg.online_threshold,
            start: StartState::Probe,
        };
        monitor.validate()?;
        if cfg.reconnect_attempts == 0 {
            return Err(Error::InvalidInput(
                "reconnect attempts must be at least 1".into(),
            ));
        }
        if cfg.hook_timeout.is_zero() {
            return Err(Error::InvalidInput(
                "the hook timeout must be longer than zero".into(),
            ));
        }
        let (delivery, target_shown) = match cfg.target {
            WatchTarget::Replay(target) => {
                check_options(&cfg.options)?;
                let shown = target.build(cfg.options.concurrency)?.describe();
                let options = cfg.options;
                (Delivery::Replay { target, options }, shown)
            }
            WatchTarget::Push { target, shape } => {
                let options = push_options(&cfg.options, shape)?;
                let shown = target.build()?.describe();
                (Delivery::Push { target, options }, shown)
            }
        };
        let on_online = cfg
            .on_online
            .as_deref()
            .map(|c| Hook::parse(HookKind::Online, c, cfg.hook_timeout))
            .transpose()?;
        let on_offline = cfg
            .on_offline
            .as_deref()
            .map(|c| Hook::parse(HookKind::Offline, c, cfg.hook_timeout))
            .transpose()?;
        if let Some(p) = &cfg.metrics_file {
            if p.file_name().is_none() {
                return Err(Error::InvalidInput(format!(
                    "--metrics-file {} is not a file path",
                    p.display()
                )));
            }
        }
        let deliver = Rounds {
            delivery,
            wait: cfg.wait,
            clock: cfg.clock.clone(),
        };
        Ok(Watch {
            setup: Setup {
                probe: Arc::new(probe),
                monitor,
                reconnect: ReconnectConfig {
                    max_attempts: cfg.reconnect_attempts,
                    retry_delay: cfg.retry_delay,
                },
                on_online,
                on_offline,
                replay_interval: cfg.replay_interval,
                metrics_file: cfg.metrics_file,
                deliver: Box::new(deliver),
                target_shown,
                clock: cfg.clock,
                outcomes: cfg.outcomes,
            },
        })
    }

    /// The probe, described without credentials.
    pub fn probe(&self) -> &str {
        self.setup.probe.describe()
    }

    /// Run until `stop` is stopped. The spool must be open read-write;
    /// it is shared with the worker thread. Returns `Err` only for a
    /// failure at startup (threads that cannot start, a metrics file that
    /// cannot be written); after that every failure is logged and the
    /// daemon keeps going.
    pub fn run(
        self,
        spool: Arc<Spool>,
        log: Arc<dyn WatchLog>,
        stop: &WatchStop,
    ) -> Result<WatchSummary> {
        daemon::run(self.setup, spool, log, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> TargetSpec {
        TargetSpec::Exec {
            command: "true".into(),
            shell: false,
            reject_exit: vec![65],
            timeout: None,
        }
    }

    #[test]
    fn bad_settings_are_refused_before_anything_runs() {
        let ok = WatchConfig::new("tcp://127.0.0.1:9", target());
        assert!(Watch::new(ok.clone()).is_ok());
        let mut bad = ok.clone();
        bad.probe = "ftp://h/x".into();
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.failure_threshold = 0;
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.reconnect_attempts = 0;
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.on_online = Some("'unclosed".into());
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.on_offline = Some("  ".into());
        assert!(Watch::new(bad).is_err());
        let mut bad = ok.clone();
        bad.target = TargetSpec::Exec {
            command: String::new(),
            shell: false,
            reject_exit: vec![],
            timeout: None,
        }
        .into();
        assert!(Watch::new(bad).is_err());

        // A push target: the options replay --push refuses are refused.
        let push = |url: &str| WatchTarget::Push {
            target: PushTarget {
                url: url.into(),
                http: Default::default(),
            },
            shape: PushShape {
                batch: 10,
                batch_bytes: 1000,
                pipeline: 2,
            },
        };
        let mut pushing = ok;
        pushing.target = push("http://127.0.0.1:9/v1/push");
        let w = Watch::new(pushing.clone()).unwrap();
        assert_eq!(w.setup.target_shown, "push to http://127.0.0.1:9/v1/push");
        let mut bad = pushing.clone();
        bad.target = push("ftp://h/v1/push");
        assert!(matches!(Watch::new(bad), Err(Error::InvalidInput(_))));
        let mut bad = pushing.clone();
        bad.options.concurrency = 2;
        let e = Watch::new(bad).unwrap_err();
        assert!(
            e.to_string()
                .contains("--concurrency does not apply to --push"),
            "{e}"
        );
        let mut bad = pushing;
        bad.target = WatchTarget::Push {
            target: PushTarget {
                url: "http://h/v1/push".into(),
                http: Default::default(),
            },
            shape: PushShape {
                batch: 0,
                ..PushShape::default()
            },
        };
        assert!(Watch::new(bad).is_err());
    }
}
