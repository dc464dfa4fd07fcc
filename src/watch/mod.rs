//! Watch: drain a spool as soon as the link comes back.
//!
//! This is the library half of `spool watch`, the reference offline
//! pipeline in one process:
//!
//! ```text
//! probe ──► NetworkMonitor ──(post only)──► Worker ──► ReconnectCoordinator ──► SyncWorker
//! ```
//!
//! * [`NetworkMonitor`] calls a probe on a background thread and turns
//!   results into online/offline transitions with hysteresis. Its
//!   callbacks run on the probe thread, so they only *post* work.
//! * [`Worker`] is the executor they post to: one thread, a queue of jobs.
//! * [`ReconnectCoordinator`] runs on the worker and sequences
//!   reconnect → activate → bind → replay, aborting cleanly when the link
//!   flaps again.
//! * [`Probe`] is what `--probe TARGET` checks (`tcp://`, `http(s)://`,
//!   `exec:`), and [`metrics`] renders and atomically writes the
//!   Prometheus text of `--metrics-file`.
//! * [`daemon`] wires them into the daemon of `spool watch`: it runs the
//!   [`hooks`] (`--on-online`, `--on-offline`) and replay rounds, and
//!   tells the caller's [`WatchLog`] every [`WatchEvent`] ([`log`],
//!   [`push_note`]).
//!
//! Time is injected everywhere: the monitor waits through a [`Ticker`]
//! (tests drive a [`ManualTicker`] one probe at a time) and the
//! coordinator sleeps through its `sleep` dependency, so none of this is
//! tested by waiting for real.

pub mod coordinator;
pub mod daemon;
pub mod hooks;
pub mod log;
pub mod metrics;
pub mod monitor;
pub mod probe;
pub mod push_note;
pub mod worker;

pub use self::coordinator::{
    CoordinatorCounters, Dependency, Deps, DepsBuilder, MissingDependencies, OnlineReport,
    ReconnectConfig, ReconnectCoordinator, ReconnectOutcome,
};
pub use self::daemon::{WatchStop, WatchSummary};
pub use self::hooks::HookKind;
pub use self::log::{Level, LogEntry, Round, Trigger, WatchEvent, WatchLog};
pub use self::metrics::{SpoolGauges, WatchCounters, WatchMetrics};
pub use self::monitor::{
    safe_probe, LinkState, ManualTicker, MonitorHandle, NetworkMonitor, NetworkMonitorBuilder,
    NetworkMonitorConfig, StartState, SystemTicker, Ticker, Transition,
};
pub use self::probe::{Probe, ProbeOptions};
pub use self::push_note::PushNote;
pub use self::worker::{Poster, Shutdown, Worker};
