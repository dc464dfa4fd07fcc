//! The long-running daemon behind `spool watch`: probe the link, and
//! replay the spool as soon as it comes back.
//!
//! It wires the pieces of [`crate::watch`] the way the reference's
//! "End-to-end integration" does:
//!
//! ```text
//! Probe ──► NetworkMonitor ──(callbacks only post)──► Worker ──► ReconnectCoordinator
//!                                                                  └─ replay: SyncWorker over the spool
//! ```
//!
//! * **Startup.** The monitor probes once, at once
//!   ([`StartState::Probe`](crate::watch::StartState::Probe)). Link up: the worker runs the online
//!   sequence (reconnect → `--on-online` → bind → re-check → replay).
//!   Link down: it runs `--on-offline` once and delivers nothing until
//!   the monitor reports the link back. The startup job is posted before
//!   the monitor thread can post anything, so it always runs first.
//! * **Transitions.** The monitor's callbacks run on the probe thread and
//!   do O(1) work: going offline they ask a replay in flight to stop after
//!   its current item (so items do not burn attempts into a dead link),
//!   and both post a job to the worker, which logs the transition and
//!   runs the coordinator.
//! * **The coordinator's steps.** `try_reconnect` probes once more;
//!   `activate_primary` / `activate_local` run the `--on-online` /
//!   `--on-offline` hooks (split like `--exec`, never through a shell; a
//!   failing hook is logged and the sequence goes on); `bind_context`
//!   binds periodic replay to the side just activated; `should_continue`
//!   reads the live monitor state (and says no once stopping); `sleep`
//!   waits `retry_delay` but wakes at once on [`WatchStop::stop`].
//! * **Periodic replay.** While the link is up and bound, a replay runs
//!   every `replay_interval` (zero disables it). When the last online
//!   sequence gave up while the monitor still reports the link up (no
//!   transition will come to retry it), the tick runs the online sequence
//!   again instead, so a daemon never stays unbound on a healthy link.
//!   With periodic replay on, new items do not wait for the next tick: the
//!   main thread is woken as `replay --follow` is (a
//!   [`SpoolWatcher`] on the spool's directory, the hint confirmed by a
//!   [`ChangeCheck`] of the spool's marks) and posts a round at once
//!   ([`Trigger::Change`]) when none is queued.
//! * **Every replay round** holds the spool's
//!   [`ReplayLock`](crate::replay::ReplayLock) for that round only (via
//!   [`crate::ops::replay::replay`], or [`crate::ops::replay::push`] for
//!   a [`WatchTarget::Push`](crate::ops::watch::WatchTarget::Push): the
//!   caller's `Deliver` runs the round), so a cron `spool replay` and
//!   the daemon never overlap; a busy lock is logged and the round
//!   skipped. A push round that used up its request budget
//!   (or was told by the receiver to wait longer than the backoff cap)
//!   holds periodic and change rounds back for the backoff cap (or that
//!   wait), as `replay --push --follow` does; the online sequence still
//!   pushes at once when the link comes back.
//! * **Metrics** (`metrics_file`) are rewritten atomically at startup,
//!   after every transition and every replay round, and once more at the
//!   end. A failure to write them at startup is an error (a misconfigured
//!   path fails fast); later failures are logged.
//! * **Stopping.** [`WatchStop::stop`] (the CLI wires SIGTERM/SIGINT to
//!   it) stops the replay in flight after its current item, aborts a
//!   reconnect sequence at its next check, stops the monitor and the
//!   worker (jobs still queued are dropped), writes the metrics a last
//!   time and makes [`Watch::run`](crate::ops::watch::Watch::run) return
//!   `Ok`.
//!
//! Nothing here prints: every event goes to the caller's [`WatchLog`],
//! from the thread that produced it (the caller's, or the worker's).
//! Events are never produced on the probe thread.

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::item::Item;
use crate::replay::events::{Outcomes, WithOutcomes};
use crate::replay::follow::{ChangeCheck, Signal, SpoolWatcher, Woke};
use crate::replay::push::{PushEvent, PushHalt};
use crate::replay::{ItemOutcome, ReplayObserver, StopHandle};
use crate::time::{SharedClock, Timestamp};
use crate::watch::hooks::Hook;
use crate::watch::log::{LogEntry, Round, Trigger, WatchEvent, WatchLog};
use crate::watch::metrics::{render_watch, write_atomic, SpoolGauges, WatchCounters, WatchMetrics};
use crate::watch::push_note::PushNote;
use crate::watch::{
    CoordinatorCounters, DepsBuilder, MonitorHandle, NetworkMonitor, NetworkMonitorConfig, Probe,
    ReconnectConfig, ReconnectCoordinator, ReconnectOutcome, Shutdown, Worker,
};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The change check of the periodic loop never polls: the interval does.
const NO_POLL: Duration = Duration::from_secs(86_400);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the daemon's rounds deliver with: one `replay` (or `replay
/// --push`) run under the spool's replay lock.
/// [`crate::ops::watch`] supplies it from its target and options.
pub(crate) trait Deliver: fmt::Debug + Send + Sync {
    /// Run one round over `spool`, stopping after the item (or request)
    /// in flight once `stop` is stopped, reporting to `observer`.
    /// [`Error::ReplayLocked`] when another replay holds the spool.
    fn round(
        &self,
        spool: &Spool,
        stop: StopHandle,
        observer: &dyn ReplayObserver,
    ) -> Result<Round>;

    /// How long periodic and change rounds wait after a push round that
    /// ended with `halt`; `None`: no wait.
    fn hold_after(&self, halt: &PushHalt) -> Option<Duration>;
}

/// A checked daemon configuration, ready to [`run`].
#[derive(Debug)]
pub(crate) struct Setup {
    /// The link's probe.
    pub(crate) probe: Arc<Probe>,
    /// The monitor's interval and thresholds.
    pub(crate) monitor: NetworkMonitorConfig,
    /// Attempts per online sequence and the wait between them.
    pub(crate) reconnect: ReconnectConfig,
    /// `--on-online`.
    pub(crate) on_online: Option<Hook>,
    /// `--on-offline`.
    pub(crate) on_offline: Option<Hook>,
    /// Replay this often while online (zero: only on reconnect).
    pub(crate) replay_interval: Duration,
    /// Where to write the Prometheus text.
    pub(crate) metrics_file: Option<PathBuf>,
    /// What every round delivers with.
    pub(crate) deliver: Box<dyn Deliver>,
    /// The target, without credentials.
    pub(crate) target_shown: String,
    /// The clock for log times, backoff and metrics.
    pub(crate) clock: SharedClock,
    /// Where every round's recorded outcomes go.
    pub(crate) outcomes: Option<Arc<Outcomes>>,
}

/// Stops a running [`Watch::run`](crate::ops::watch::Watch::run) from any thread (a signal handler
/// thread, say). Cloneable; all clones are the same switch.
#[derive(Clone, Debug, Default)]
pub struct WatchStop {
    inner: Arc<StopInner>,
}

#[derive(Debug, Default)]
struct StopInner {
    /// Stop requests, and the spool's change notifications that wake
    /// the periodic loop (the same wake-up as `replay --follow`).
    signal: Signal,
    /// The stop handle of the replay round in flight, if any.
    run: Mutex<Option<StopHandle>>,
}

impl WatchStop {
    /// A switch that is not stopped.
    pub fn new() -> WatchStop {
        WatchStop::default()
    }

    /// Stop the daemon: the replay in flight stops after its current
    /// item, then everything shuts down. Idempotent.
    pub fn stop(&self) {
        // Under the run lock: a round registering now either sees the
        // stop or is interrupted below.
        {
            let _run = lock(&self.inner.run);
            self.inner.signal.stop();
        }
        self.interrupt_run();
    }

    /// True once [`stop`](WatchStop::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.signal.is_stopped()
    }

    /// Wait up to `d`; true (at once) when stopped.
    fn wait(&self, d: Duration) -> bool {
        self.inner.signal.wait_stop(d)
    }

    /// Register a new replay round; `None` when stopping.
    fn begin_run(&self) -> Option<StopHandle> {
        let mut run = lock(&self.inner.run);
        if self.is_stopped() {
            return None;
        }
        let h = StopHandle::default();
        *run = Some(h.clone());
        Some(h)
    }

    fn end_run(&self) {
        *lock(&self.inner.run) = None;
    }

    /// Ask the round in flight (if any) to stop after its current item.
    fn interrupt_run(&self) {
        if let Some(h) = lock(&self.inner.run).as_ref() {
            h.stop();
        }
    }
}

/// What [`Watch::run`](crate::ops::watch::Watch::run) returns once stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchSummary {
    /// Totals since start.
    pub counters: WatchCounters,
}

/// Run the daemon `setup` describes until `stop` is stopped, as
/// [`Watch::run`](crate::ops::watch::Watch::run) says.
pub(crate) fn run(
    setup: Setup,
    spool: Arc<Spool>,
    log: Arc<dyn WatchLog>,
    stop: &WatchStop,
) -> Result<WatchSummary> {
    let path = match &*spool {
        Spool::Postgres(_) => spool.location(),
        _ => spool.path().map(Path::to_path_buf).unwrap_or_default(),
    };
    let d = Arc::new(Daemon {
        spool,
        path: path.clone(),
        probe: setup.probe.clone(),
        on_online: setup.on_online,
        on_offline: setup.on_offline,
        metrics_file: setup.metrics_file,
        deliver: setup.deliver,
        clock: setup.clock,
        outcomes: setup.outcomes,
        log,
        stop: stop.clone(),
        monitor: OnceLock::new(),
        activated_online: AtomicBool::new(false),
        bound_online: AtomicBool::new(false),
        gave_up: AtomicBool::new(false),
        last_probe_error: Mutex::new(None),
        push_not_before: Mutex::new(None),
        attempt: AtomicU32::new(0),
        counters: Mutex::new(WatchCounters::default()),
        metrics_lock: Mutex::new(()),
    });
    let coordinator = Arc::new(ReconnectCoordinator::new(
        d.deps(setup.reconnect.max_attempts),
        setup.reconnect,
    )?);
    let worker = Worker::start("spool-watch")?;

    // The startup job goes first in the worker's queue: it waits for
    // the first probe's verdict, so no transition job can overtake it.
    let (gate_tx, gate_rx) = mpsc::channel::<bool>();
    {
        let (d, c) = (d.clone(), coordinator.clone());
        worker.post(move || match gate_rx.recv() {
            Ok(true) => d.online_sequence(&c, Trigger::Startup),
            Ok(false) => d.offline_sequence(&c),
            Err(_) => {}
        });
    }

    let started = NetworkMonitor::builder({
        let d = d.clone();
        move || {
            let r = d.probe.check();
            if let Err(e) = &r {
                *lock(&d.last_probe_error) = Some(e.clone());
            }
            r
        }
    })
    .config(setup.monitor)
    .on_offline({
        let (d, c, poster) = (d.clone(), coordinator.clone(), worker.poster());
        move || {
            // O(1) on the probe thread: stop a round in flight after
            // its item, note the time, post the rest.
            d.stop.interrupt_run();
            let at = d.clock.now();
            let reason = lock(&d.last_probe_error).clone();
            let (d, c) = (d.clone(), c.clone());
            poster.post(move || {
                d.emit_at(at, WatchEvent::WentOffline { reason });
                d.offline_sequence(&c);
            });
        }
    })
    .on_online({
        let (d, c, poster) = (d.clone(), coordinator.clone(), worker.poster());
        move || {
            let at = d.clock.now();
            let (d, c) = (d.clone(), c.clone());
            poster.post(move || {
                d.emit_at(at, WatchEvent::WentOnline);
                d.online_sequence(&c, Trigger::Reconnect);
            });
        }
    })
    .start();
    let monitor = match started {
        Ok(m) => m,
        Err(e) => {
            drop(gate_tx);
            worker.shutdown(Shutdown::DiscardPending);
            return Err(e);
        }
    };
    let _ = d.monitor.set(monitor.handle());
    let online = monitor.started_online();
    if let Err(e) = d.write_metrics(&coordinator.counters()) {
        drop(gate_tx);
        monitor.stop();
        worker.shutdown(Shutdown::DiscardPending);
        return Err(match e {
            // An output file in a directory that does not exist is
            // "cannot create", not "no such input".
            Error::Io { path, source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::CannotCreate {
                    detail: format!(
                        "directory {} does not exist",
                        path.parent().unwrap_or(Path::new(".")).display()
                    ),
                    path,
                }
            }
            e => e,
        });
    }
    d.emit(WatchEvent::Started {
        spool: path,
        probe: setup.probe.describe().to_string(),
        target: setup.target_shown,
        online,
        reason: monitor
            .initial_probe()
            .and_then(|r| r.as_ref().err().cloned()),
    });
    let _ = gate_tx.send(online);

    // The main thread keeps time for periodic replay, and (with
    // periodic replay on) replays as soon as new items arrive, woken
    // as `replay --follow` is: a change notification is a hint that a
    // comparison of the spool's marks confirms.
    let interval = setup.replay_interval;
    let signal = stop.inner.signal.clone();
    let watcher = if interval.is_zero() {
        None
    } else {
        let s = signal.clone();
        SpoolWatcher::start(&d.spool, move || s.notify())
            .ok()
            .flatten()
    };
    let mut check = ChangeCheck::new(&*d.spool, NO_POLL, d.clock.now());
    check.pass_begins(d.clock.now());
    let mut changed = false;
    let mut next = Instant::now() + interval;
    loop {
        let mut wait = if interval.is_zero() {
            Duration::from_secs(3600)
        } else {
            next.saturating_duration_since(Instant::now())
        };
        if watcher.is_some() {
            wait = wait.min(check.next_check().since(d.clock.now()));
        }
        if changed {
            // Waiting for the worker to take the round.
            wait = wait.min(Duration::from_millis(20));
        }
        match signal.wait_for(wait) {
            Woke::Stopped => break,
            Woke::Changed => changed |= check.hinted(d.clock.now()),
            Woke::Deadline => changed |= check.tick(d.clock.now()),
        }
        if changed && !interval.is_zero() {
            if !d.online() || d.gave_up.load(Ordering::SeqCst) {
                // Offline: the online sequence replays when it is back.
                changed = false;
            } else if worker.pending() == 0 && d.bound_online.load(Ordering::SeqCst) {
                changed = false;
                check.pass_begins(d.clock.now());
                let (d2, c) = (d.clone(), coordinator.clone());
                worker.post(move || d2.periodic_round(&c, Trigger::Change));
            }
        }
        if interval.is_zero() || Instant::now() < next {
            continue;
        }
        next = Instant::now() + interval;
        // A job still queued (a transition, the last tick's) goes
        // first; ticks never pile up.
        if !d.online() || worker.pending() > 0 {
            continue;
        }
        let (d2, c) = (d.clone(), coordinator.clone());
        if d.gave_up.load(Ordering::SeqCst) {
            worker.post(move || {
                if d2.online() && d2.gave_up.load(Ordering::SeqCst) {
                    d2.emit(WatchEvent::Rebinding);
                    d2.online_sequence(&c, Trigger::Reconnect);
                }
            });
        } else if d.bound_online.load(Ordering::SeqCst) {
            check.pass_begins(d.clock.now());
            worker.post(move || d2.periodic_round(&c, Trigger::Periodic));
        }
    }

    d.emit(WatchEvent::Stopping);
    stop.interrupt_run();
    monitor.stop();
    worker.shutdown(Shutdown::DiscardPending);
    d.write_metrics_logged(&coordinator.counters());
    let counters = d.counters(&coordinator.counters());
    d.emit(WatchEvent::Stopped { counters });
    Ok(WatchSummary { counters })
}

type Coordinator = ReconnectCoordinator<'static, Round>;

/// The state shared by the main thread, the worker and the monitor's
/// callbacks.
struct Daemon {
    spool: Arc<Spool>,
    path: PathBuf,
    probe: Arc<Probe>,
    on_online: Option<Hook>,
    on_offline: Option<Hook>,
    metrics_file: Option<PathBuf>,
    deliver: Box<dyn Deliver>,
    clock: SharedClock,
    outcomes: Option<Arc<Outcomes>>,
    log: Arc<dyn WatchLog>,
    stop: WatchStop,
    monitor: OnceLock<MonitorHandle>,
    /// The side the last activate step made active.
    activated_online: AtomicBool,
    /// The side periodic replay is bound to (set by bind).
    bound_online: AtomicBool,
    /// The last online sequence gave up on a link the monitor still
    /// reports up: no transition will come to retry it, a tick does.
    gave_up: AtomicBool,
    last_probe_error: Mutex<Option<String>>,
    /// No periodic or change push round before this time: the last push
    /// round used up its request budget (wait `--backoff-max`) or the
    /// receiver asked for a longer wait.
    push_not_before: Mutex<Option<Timestamp>>,
    /// Reconnect attempts in the current online sequence.
    attempt: AtomicU32,
    counters: Mutex<WatchCounters>,
    metrics_lock: Mutex<()>,
}

impl Daemon {
    fn emit(&self, event: WatchEvent) {
        self.emit_at(self.clock.now(), event)
    }

    fn emit_at(&self, at: Timestamp, event: WatchEvent) {
        self.log.log(&LogEntry {
            at,
            level: event.level(),
            event,
        });
    }

    /// The live link state (false once stopping).
    fn online(&self) -> bool {
        !self.stop.is_stopped() && self.monitor.get().is_some_and(MonitorHandle::is_online)
    }

    fn run_hook(&self, hook: Option<&Hook>) {
        if let Some(h) = hook {
            let result = h.run(&self.path);
            self.emit(WatchEvent::Hook {
                which: h.kind,
                command: h.command.clone(),
                result,
            });
        }
    }

    /// The coordinator's steps, wired to this daemon.
    fn deps(self: &Arc<Self>, max: u32) -> crate::watch::Deps<'static, Round> {
        DepsBuilder::new()
            .try_reconnect({
                let d = self.clone();
                move || {
                    let n = d.attempt.fetch_add(1, Ordering::SeqCst) + 1;
                    match d.probe.check() {
                        Ok(()) => true,
                        Err(reason) => {
                            d.emit(WatchEvent::AttemptFailed {
                                attempt: n,
                                max,
                                reason,
                            });
                            false
                        }
                    }
                }
            })
            .activate_primary({
                let d = self.clone();
                move || {
                    d.activated_online.store(true, Ordering::SeqCst);
                    d.run_hook(d.on_online.as_ref());
                }
            })
            .activate_local({
                let d = self.clone();
                move || {
                    d.activated_online.store(false, Ordering::SeqCst);
                    d.run_hook(d.on_offline.as_ref());
                }
            })
            .bind_context({
                let d = self.clone();
                move || {
                    d.bound_online
                        .store(d.activated_online.load(Ordering::SeqCst), Ordering::SeqCst);
                }
            })
            .replay({
                let d = self.clone();
                move || d.replay_round()
            })
            .should_continue({
                let d = self.clone();
                move || d.online()
            })
            .sleep({
                let d = self.clone();
                move |t| {
                    d.stop.wait(t);
                }
            })
            .build()
            .unwrap_or_else(|e| unreachable!("every dependency is set: {e}"))
    }

    /// One replay round under the spool's replay lock.
    fn replay_round(&self) -> Round {
        let Some(handle) = self.stop.begin_run() else {
            return Round::Skipped("stopping");
        };
        // Checked after registering: an offline transition from here on
        // reaches this round through its stop handle.
        if !self.online() {
            self.stop.end_run();
            return Round::Skipped("the link is down");
        }
        let log = ItemLog(self);
        let with = self.outcomes.as_deref().map(|outcomes| WithOutcomes {
            inner: Some(&log),
            outcomes,
            queue: &**self.spool,
        });
        let observer: &dyn ReplayObserver = match &with {
            Some(w) => w,
            None => &log,
        };
        let result = self.deliver.round(&self.spool, handle, observer);
        match &result {
            Ok(Round::Ran(r)) => lock(&self.counters).add_replay(r),
            Ok(Round::Pushed(r)) => {
                lock(&self.counters).add_push(r);
                let now = self.clock.now();
                *lock(&self.push_not_before) = r
                    .halt
                    .as_ref()
                    .and_then(|h| self.deliver.hold_after(h))
                    .map(|d| now.saturating_add(d));
            }
            _ => {}
        }
        self.stop.end_run();
        match result {
            Ok(round) => round,
            Err(Error::ReplayLocked { holder, .. }) => Round::Locked { holder },
            Err(e) => Round::Failed(e.to_string()),
        }
    }

    fn log_round(&self, trigger: Trigger, round: Round) {
        let interrupted = match &round {
            Round::Ran(r) => r.stopped == Some(crate::replay::StopReason::Stopped),
            Round::Pushed(r) => r.halt == Some(PushHalt::Signal),
            _ => false,
        };
        self.emit(WatchEvent::Replay {
            trigger,
            round,
            interrupted,
        });
    }

    /// The worker's job when the link is (or was at startup) up.
    fn online_sequence(&self, c: &Coordinator, trigger: Trigger) {
        if self.stop.is_stopped() {
            return;
        }
        self.attempt.store(0, Ordering::SeqCst);
        self.gave_up.store(false, Ordering::SeqCst);
        let report = c.on_online();
        if report.outcome == ReconnectOutcome::GaveUp {
            self.gave_up.store(true, Ordering::SeqCst);
        }
        self.emit(WatchEvent::Outcome {
            outcome: report.outcome,
            attempts: report.attempts,
        });
        if let Some(round) = report.replay {
            self.log_round(trigger, round);
        }
        self.write_metrics_logged(&c.counters());
    }

    /// The worker's job when the link is (or was at startup) down.
    fn offline_sequence(&self, c: &Coordinator) {
        if self.stop.is_stopped() {
            return;
        }
        self.gave_up.store(false, Ordering::SeqCst);
        c.on_offline();
        self.write_metrics_logged(&c.counters());
    }

    /// The worker's job every `--replay-interval`, and when new items
    /// arrive, while bound online.
    fn periodic_round(&self, c: &Coordinator, trigger: Trigger) {
        if !self.online() || !self.bound_online.load(Ordering::SeqCst) {
            return;
        }
        let waiting = lock(&self.push_not_before).is_some_and(|t| self.clock.now() < t);
        let round = if waiting {
            Round::Skipped(
                "the last push round used up its request budget (or the receiver asked for a \
                 longer wait): waiting --backoff-max (or the receiver's Retry-After)",
            )
        } else {
            self.replay_round()
        };
        self.log_round(trigger, round);
        self.write_metrics_logged(&c.counters());
    }

    fn counters(&self, r: &CoordinatorCounters) -> WatchCounters {
        let mut c = *lock(&self.counters);
        c.set_reconnect(r);
        c
    }

    fn write_metrics(&self, r: &CoordinatorCounters) -> Result<()> {
        let Some(file) = &self.metrics_file else {
            return Ok(());
        };
        let now = self.clock.now();
        let stats = self.spool.stats(now)?;
        let bytes = self.spool.files().iter().map(|(_, n)| n).sum();
        let m = WatchMetrics {
            gauges: SpoolGauges::from_stats(&stats, bytes, now),
            counters: self.counters(r),
            online: self.monitor.get().is_some_and(MonitorHandle::is_online),
        };
        let _one_writer = lock(&self.metrics_lock);
        write_atomic(file, render_watch(&self.path, &m).as_bytes())
    }

    fn write_metrics_logged(&self, r: &CoordinatorCounters) {
        if let Err(e) = self.write_metrics(r) {
            self.emit(WatchEvent::MetricsFailed {
                error: e.to_string(),
            });
        }
    }
}

/// Per-item events of a round.
struct ItemLog<'a>(&'a Daemon);

impl ReplayObserver for ItemLog<'_> {
    fn attempted(&self, item: &Item, attempt: u32, outcome: &ItemOutcome) {
        self.0.emit(WatchEvent::Item {
            id: item.id,
            attempt,
            outcome: outcome.clone(),
        });
    }

    fn push_event(&self, event: &PushEvent<'_>) {
        self.0.emit(WatchEvent::Push(PushNote::of(event)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_interrupts_waits_and_refuses_new_rounds() {
        let s = WatchStop::new();
        let h = s.begin_run().unwrap();
        assert!(!s.wait(Duration::from_millis(1)));
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.wait(Duration::from_secs(60)));
        s.stop();
        assert!(t.join().unwrap());
        assert!(h.is_stopped(), "the round in flight was told");
        s.end_run();
        assert!(s.begin_run().is_none());
    }
}
