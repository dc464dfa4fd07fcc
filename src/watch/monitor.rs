//! [`NetworkMonitor`]: a background probe thread and an online/offline
//! state machine with hysteresis.
//!
//! It exists so that `spool watch` learns when the link goes away and
//! comes back without reacting to every dropped packet. The contract is
//! the reference `NetworkMonitor`'s:
//!
//! * The monitor starts **online** ([`StartState::Online`]) and the first
//!   probe happens one `probe_interval` after start, so an app that is
//!   offline from the beginning reports online for `probe_interval ×
//!   failure_threshold` (15 s at the defaults). Because `spool watch`
//!   probes at startup, the monitor can also start from a probe made at
//!   once on the caller's thread ([`StartState::Probe`]) or from a state
//!   the host already knows ([`StartState::Offline`]).
//! * It goes offline after `failure_threshold` consecutive failed probes
//!   and back online after `online_threshold` consecutive successes; a
//!   result of the other kind resets the count ([`LinkState`]).
//! * `on_offline` / `on_online` fire only on transitions, never at startup
//!   (whatever [`StartState`] says), on the probe thread.
//! * A probe that returns `Err` or panics counts as a failed probe; the
//!   monitor keeps running. A panicking callback is contained too.
//! * [`NetworkMonitor::is_online`] reads an atomic and is safe from any
//!   thread; [`MonitorHandle`] is a cloneable view for other threads.
//! * `stop()` is idempotent and may be called from inside a callback: on
//!   the probe thread it detaches instead of joining itself. Elsewhere it
//!   returns once the probe thread has ended, and no callback starts after
//!   it returns. Dropping the monitor stops it.
//!
//! **Callbacks must only post work.** They run inline on the probe thread:
//! while one runs, nothing is probed. Post to a [`Worker`](super::Worker)
//! and return; never run the reconnect sequence or a replay inline.
//!
//! Waiting between probes goes through a [`Ticker`]. [`SystemTicker`]
//! waits on a condition variable that `stop()` interrupts; tests use a
//! [`ManualTicker`], which lets exactly one probe happen per
//! [`ManualTicker::tick`] and returns once the probe thread has handled it.

use crate::error::{Error, Result};
use crate::time::ManualClock;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle, ThreadId};
use std::time::{Duration, Instant};

/// The probe a monitor calls: `Ok` when the link is up, `Err(reason)`
/// when not. A panic counts as `Err`.
pub type ProbeFn = Box<dyn Fn() -> std::result::Result<(), String> + Send>;

/// A transition callback. It runs on the probe thread and must only post
/// work (see the module documentation).
pub type Callback = Box<dyn Fn() + Send>;

/// How long [`ManualTicker::tick`] waits for the probe thread at most.
const TICK_BOUND: Duration = Duration::from_secs(10);

/// Lock a mutex, ignoring poisoning: every state guarded here stays
/// consistent between statements, so a panic elsewhere cannot tear it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The text of a panic payload.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-text panic payload".to_string()
    }
}

/// Call `probe`, turning a panic into a failed probe.
pub fn safe_probe<F>(probe: &F) -> std::result::Result<(), String>
where
    F: Fn() -> std::result::Result<(), String> + ?Sized,
{
    match catch_unwind(AssertUnwindSafe(probe)) {
        Ok(r) => r,
        Err(p) => Err(format!("probe panicked: {}", panic_message(p.as_ref()))),
    }
}

/// The state the monitor starts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StartState {
    /// Online, as the reference does; the first probe is one interval
    /// after start.
    #[default]
    Online,
    /// Offline (the host already knows the link is down).
    Offline,
    /// Probe once, at once, on the thread that starts the monitor: online
    /// if that probe succeeds, offline if it fails (one probe decides; no
    /// threshold applies and no callback fires). The next probe is one
    /// interval later, on the probe thread. See
    /// [`NetworkMonitor::initial_probe`].
    Probe,
}

/// Monitor settings; the defaults are the reference's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkMonitorConfig {
    /// Time between probes (default 5 s).
    pub probe_interval: Duration,
    /// Consecutive failures before going offline (default 3).
    pub failure_threshold: u32,
    /// Consecutive successes before going online (default 1).
    pub online_threshold: u32,
    /// Where the state machine starts (default online).
    pub start: StartState,
}

impl Default for NetworkMonitorConfig {
    fn default() -> Self {
        NetworkMonitorConfig {
            probe_interval: Duration::from_secs(5),
            failure_threshold: 3,
            online_threshold: 1,
            start: StartState::Online,
        }
    }
}

impl NetworkMonitorConfig {
    /// Refuse settings the monitor cannot honour.
    pub fn validate(&self) -> Result<()> {
        if self.failure_threshold == 0 {
            return Err(Error::InvalidInput(
                "the failure threshold must be at least 1".into(),
            ));
        }
        if self.online_threshold == 0 {
            return Err(Error::InvalidInput(
                "the online threshold must be at least 1".into(),
            ));
        }
        if self.probe_interval.is_zero() {
            return Err(Error::InvalidInput(
                "the probe interval must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}

/// A change of link state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Online → offline.
    WentOffline,
    /// Offline → online.
    WentOnline,
}

/// The monitor's state machine, without threads: consecutive-result
/// counting with separate thresholds for each direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkState {
    online: bool,
    failures: u32,
    successes: u32,
    failure_threshold: u32,
    online_threshold: u32,
}

impl LinkState {
    /// A state machine starting `online` (thresholds below 1 count as 1).
    pub fn new(online: bool, failure_threshold: u32, online_threshold: u32) -> LinkState {
        LinkState {
            online,
            failures: 0,
            successes: 0,
            failure_threshold: failure_threshold.max(1),
            online_threshold: online_threshold.max(1),
        }
    }

    /// The current state.
    pub fn is_online(&self) -> bool {
        self.online
    }

    /// Record one probe result; the transition it caused, if any.
    pub fn record(&mut self, up: bool) -> Option<Transition> {
        match (self.online, up) {
            (true, true) => {
                self.failures = 0;
                None
            }
            (true, false) => {
                self.failures += 1;
                if self.failures >= self.failure_threshold {
                    self.online = false;
                    self.failures = 0;
                    self.successes = 0;
                    Some(Transition::WentOffline)
                } else {
                    None
                }
            }
            (false, false) => {
                self.successes = 0;
                None
            }
            (false, true) => {
                self.successes += 1;
                if self.successes >= self.online_threshold {
                    self.online = true;
                    self.failures = 0;
                    self.successes = 0;
                    Some(Transition::WentOnline)
                } else {
                    None
                }
            }
        }
    }
}

/// How the probe thread waits between probes. One ticker serves one
/// monitor: once stopped it stays stopped.
pub trait Ticker: Send + Sync {
    /// Block until the next probe is due, `interval` after the previous
    /// one. `false` means the ticker was stopped: the loop ends.
    fn wait(&self, interval: Duration) -> bool;
    /// Wake any `wait` and make every later one return `false`.
    fn stop(&self);
    /// Called once, on the probe thread, as the probe loop ends.
    fn exited(&self) {}
}

/// The real ticker: a condition-variable wait that `stop()` interrupts.
#[derive(Debug, Default)]
pub struct SystemTicker {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl SystemTicker {
    /// A running ticker.
    pub fn new() -> SystemTicker {
        SystemTicker::default()
    }
}

impl Ticker for SystemTicker {
    fn wait(&self, interval: Duration) -> bool {
        let deadline = Instant::now().checked_add(interval);
        let mut stopped = lock(&self.stopped);
        loop {
            if *stopped {
                return false;
            }
            match deadline {
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return true;
                    }
                    stopped = self
                        .cv
                        .wait_timeout(stopped, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => stopped = self.cv.wait(stopped).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    fn stop(&self) {
        *lock(&self.stopped) = true;
        self.cv.notify_all();
    }
}

#[derive(Debug, Default)]
struct TickState {
    granted: u64,
    taken: u64,
    waiting: bool,
    stopped: bool,
    exited: bool,
    waits: Vec<Duration>,
}

/// A ticker for tests: the probe thread probes only when the test calls
/// [`tick`](ManualTicker::tick), once per tick, and `tick` returns once
/// that probe and any callback it caused are done. No real time passes;
/// with [`with_clock`](ManualTicker::with_clock) each tick advances a
/// [`ManualClock`] by the interval the monitor asked to wait.
#[derive(Debug, Default)]
pub struct ManualTicker {
    state: Mutex<TickState>,
    cv: Condvar,
    clock: Option<ManualClock>,
}

impl ManualTicker {
    /// A ticker without a clock.
    pub fn new() -> ManualTicker {
        ManualTicker::default()
    }

    /// A ticker that advances `clock` by the waited interval on each tick.
    pub fn with_clock(clock: ManualClock) -> ManualTicker {
        ManualTicker {
            clock: Some(clock),
            ..ManualTicker::default()
        }
    }

    /// Let exactly one probe happen and wait until the probe thread has
    /// handled it (probe, state update, callback) and waits again. `false`
    /// when the monitor stopped instead (before, or while handling this
    /// tick), or did not come back within 10 s.
    pub fn tick(&self) -> bool {
        let deadline = Instant::now() + TICK_BOUND;
        let mut st = lock(&self.state);
        if st.stopped || st.exited {
            return false;
        }
        st.granted += 1;
        let target = st.granted;
        self.cv.notify_all();
        loop {
            if st.exited {
                return false;
            }
            if st.taken >= target && st.waiting {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .cv
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// [`tick`](ManualTicker::tick) `n` times; `true` if every tick was
    /// handled.
    pub fn ticks(&self, n: usize) -> bool {
        (0..n).all(|_| self.tick())
    }

    /// Every interval the probe thread waited for, in order.
    pub fn waits(&self) -> Vec<Duration> {
        lock(&self.state).waits.clone()
    }

    /// True once the probe loop has ended.
    pub fn has_exited(&self) -> bool {
        lock(&self.state).exited
    }
}

impl Ticker for ManualTicker {
    fn wait(&self, interval: Duration) -> bool {
        let mut st = lock(&self.state);
        st.waits.push(interval);
        st.waiting = true;
        self.cv.notify_all();
        loop {
            if st.stopped {
                st.waiting = false;
                return false;
            }
            if st.granted > st.taken {
                st.taken += 1;
                st.waiting = false;
                drop(st);
                if let Some(c) = &self.clock {
                    c.advance(interval);
                }
                return true;
            }
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn stop(&self) {
        lock(&self.state).stopped = true;
        self.cv.notify_all();
    }

    fn exited(&self) {
        let mut st = lock(&self.state);
        st.exited = true;
        st.waiting = false;
        self.cv.notify_all();
    }
}

/// State shared between the monitor, its handles and the probe thread.
struct Shared {
    online: AtomicBool,
    stop: AtomicBool,
    ticker: Arc<dyn Ticker>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: OnceLock<ThreadId>,
    running: Mutex<bool>,
    ended: Condvar,
}

impl Shared {
    fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.ticker.stop();
        if self.thread_id.get() == Some(&thread::current().id()) {
            // Called from a callback: joining ourselves would deadlock.
            // Detach; the loop ends when the callback returns.
            drop(lock(&self.thread).take());
            return;
        }
        let handle = lock(&self.thread).take();
        match handle {
            Some(h) => {
                let _ = h.join();
            }
            None => {
                let mut running = lock(&self.running);
                while *running {
                    running = self.ended.wait(running).unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }

    fn is_running(&self) -> bool {
        *lock(&self.running)
    }
}

/// A cloneable view of a monitor for other threads: read the state, stop
/// it. Holding a handle does not keep the probe thread alive.
#[derive(Clone)]
pub struct MonitorHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MonitorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MonitorHandle")
            .field("online", &self.is_online())
            .field("running", &self.is_running())
            .finish()
    }
}

impl MonitorHandle {
    /// The current state; safe from any thread.
    pub fn is_online(&self) -> bool {
        self.shared.online.load(Ordering::SeqCst)
    }

    /// Stop the monitor; see [`NetworkMonitor::stop`].
    pub fn stop(&self) {
        self.shared.stop()
    }

    /// True until the probe loop has ended.
    pub fn is_running(&self) -> bool {
        self.shared.is_running()
    }

    /// True once `stop()` was called (the loop may still be finishing a
    /// callback when it was called from one).
    pub fn is_stopped(&self) -> bool {
        self.shared.stop.load(Ordering::SeqCst)
    }
}

/// Builds and starts a [`NetworkMonitor`].
pub struct NetworkMonitorBuilder {
    probe: ProbeFn,
    on_offline: Option<Callback>,
    on_online: Option<Callback>,
    config: NetworkMonitorConfig,
    ticker: Option<Arc<dyn Ticker>>,
}

impl NetworkMonitorBuilder {
    /// Called on every online → offline transition (must only post work).
    pub fn on_offline(mut self, f: impl Fn() + Send + 'static) -> Self {
        self.on_offline = Some(Box::new(f));
        self
    }

    /// Called on every offline → online transition (must only post work).
    pub fn on_online(mut self, f: impl Fn() + Send + 'static) -> Self {
        self.on_online = Some(Box::new(f));
        self
    }

    /// Settings (default: the reference's).
    pub fn config(mut self, config: NetworkMonitorConfig) -> Self {
        self.config = config;
        self
    }

    /// Wait through `ticker` (default: a fresh [`SystemTicker`]).
    pub fn ticker(mut self, ticker: Arc<dyn Ticker>) -> Self {
        self.ticker = Some(ticker);
        self
    }

    /// Validate the settings, make the initial probe if
    /// [`StartState::Probe`] asks for one, and launch the probe thread.
    pub fn start(self) -> Result<NetworkMonitor> {
        self.config.validate()?;
        let cfg = self.config;
        let initial_probe = match cfg.start {
            StartState::Probe => Some(safe_probe(&*self.probe)),
            _ => None,
        };
        let online = match (&initial_probe, cfg.start) {
            (Some(r), _) => r.is_ok(),
            (None, StartState::Offline) => false,
            (None, _) => true,
        };
        let ticker = self
            .ticker
            .unwrap_or_else(|| Arc::new(SystemTicker::new()) as Arc<dyn Ticker>);
        let shared = Arc::new(Shared {
            online: AtomicBool::new(online),
            stop: AtomicBool::new(false),
            ticker,
            thread: Mutex::new(None),
            thread_id: OnceLock::new(),
            running: Mutex::new(true),
            ended: Condvar::new(),
        });
        let probe_loop = ProbeLoop {
            shared: shared.clone(),
            probe: self.probe,
            on_offline: self.on_offline.unwrap_or_else(|| Box::new(|| {})),
            on_online: self.on_online.unwrap_or_else(|| Box::new(|| {})),
            link: LinkState::new(online, cfg.failure_threshold, cfg.online_threshold),
            interval: cfg.probe_interval,
        };
        let spawned = thread::Builder::new()
            .name("spool-monitor".into())
            .spawn(move || probe_loop.run());
        match spawned {
            Ok(h) => *lock(&shared.thread) = Some(h),
            Err(e) => {
                *lock(&shared.running) = false;
                return Err(Error::Internal(format!(
                    "cannot start the network monitor thread: {e}"
                )));
            }
        }
        Ok(NetworkMonitor {
            handle: MonitorHandle { shared },
            started_online: online,
            initial_probe,
        })
    }
}

/// Everything the probe thread owns.
struct ProbeLoop {
    shared: Arc<Shared>,
    probe: ProbeFn,
    on_offline: Callback,
    on_online: Callback,
    link: LinkState,
    interval: Duration,
}

impl ProbeLoop {
    fn run(mut self) {
        let shared = self.shared.clone();
        let _ = shared.thread_id.set(thread::current().id());
        while !shared.stop.load(Ordering::SeqCst) {
            if !shared.ticker.wait(self.interval) || shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let up = safe_probe(&*self.probe).is_ok();
            let Some(t) = self.link.record(up) else {
                continue;
            };
            shared
                .online
                .store(t == Transition::WentOnline, Ordering::SeqCst);
            if shared.stop.load(Ordering::SeqCst) {
                break;
            }
            let cb = match t {
                Transition::WentOffline => &self.on_offline,
                Transition::WentOnline => &self.on_online,
            };
            // A panicking callback must not take the monitor down.
            let _ = catch_unwind(AssertUnwindSafe(cb));
        }
        // Drop the probe and callbacks before reporting the end: whoever
        // waits for it may rely on what they captured being released.
        drop(self);
        *lock(&shared.running) = false;
        shared.ended.notify_all();
        shared.ticker.exited();
    }
}

/// Probes the link on a background thread and reports transitions.
///
/// ```
/// use spool::watch::{ManualTicker, NetworkMonitor, NetworkMonitorConfig};
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
///
/// let up = Arc::new(AtomicBool::new(false));
/// let ticker = Arc::new(ManualTicker::new());
/// let probe_up = up.clone();
/// let monitor = NetworkMonitor::builder(move || {
///     if probe_up.load(Ordering::SeqCst) { Ok(()) } else { Err("down".into()) }
/// })
/// .config(NetworkMonitorConfig { failure_threshold: 2, ..Default::default() })
/// .ticker(ticker.clone())
/// .start()
/// .unwrap();
/// assert!(monitor.is_online());
/// ticker.ticks(2);
/// assert!(!monitor.is_online());
/// up.store(true, Ordering::SeqCst);
/// ticker.tick();
/// assert!(monitor.is_online());
/// ```
pub struct NetworkMonitor {
    handle: MonitorHandle,
    started_online: bool,
    initial_probe: Option<std::result::Result<(), String>>,
}

impl std::fmt::Debug for NetworkMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkMonitor")
            .field("online", &self.is_online())
            .field("started_online", &self.started_online)
            .finish()
    }
}

impl NetworkMonitor {
    /// Start building a monitor around `probe` (`Ok` = link up).
    pub fn builder(
        probe: impl Fn() -> std::result::Result<(), String> + Send + 'static,
    ) -> NetworkMonitorBuilder {
        NetworkMonitorBuilder {
            probe: Box::new(probe),
            on_offline: None,
            on_online: None,
            config: NetworkMonitorConfig::default(),
            ticker: None,
        }
    }

    /// The current state; safe from any thread.
    pub fn is_online(&self) -> bool {
        self.handle.is_online()
    }

    /// The state the monitor started in (from the initial probe with
    /// [`StartState::Probe`]). The host runs its startup sequence from
    /// this: no callback reports it.
    pub fn started_online(&self) -> bool {
        self.started_online
    }

    /// The result of the initial probe, with [`StartState::Probe`].
    pub fn initial_probe(&self) -> Option<&std::result::Result<(), String>> {
        self.initial_probe.as_ref()
    }

    /// A cloneable handle (for `should_continue`, signal handlers, or a
    /// callback that stops the monitor).
    pub fn handle(&self) -> MonitorHandle {
        self.handle.clone()
    }

    /// Stop probing. Idempotent. From any thread but the probe thread it
    /// returns once the probe thread has ended; from a callback it only
    /// signals and detaches, and the loop ends when the callback returns.
    /// No callback starts after `stop()` was called.
    pub fn stop(&self) {
        self.handle.stop()
    }

    /// True until the probe loop has ended.
    pub fn is_running(&self) -> bool {
        self.handle.is_running()
    }
}

impl Drop for NetworkMonitor {
    fn drop(&mut self) {
        self.handle.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hysteresis_counts_consecutive_results() {
        let mut s = LinkState::new(true, 3, 2);
        assert_eq!(s.record(false), None);
        assert_eq!(s.record(false), None);
        assert_eq!(s.record(true), None, "a success resets the failures");
        assert_eq!(s.record(false), None);
        assert_eq!(s.record(false), None);
        assert_eq!(s.record(false), Some(Transition::WentOffline));
        assert_eq!(s.record(false), None, "no second offline");
        assert_eq!(s.record(true), None);
        assert_eq!(s.record(false), None, "a failure resets the successes");
        assert_eq!(s.record(true), None);
        assert_eq!(s.record(true), Some(Transition::WentOnline));
        assert_eq!(s.record(true), None);
        assert!(s.is_online());
    }

    #[test]
    fn zero_thresholds_are_refused() {
        let bad = NetworkMonitorConfig {
            failure_threshold: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = NetworkMonitorConfig {
            online_threshold: 0,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        let bad = NetworkMonitorConfig {
            probe_interval: Duration::ZERO,
            ..Default::default()
        };
        assert!(bad.validate().is_err());
        assert!(NetworkMonitor::builder(|| Ok(()))
            .config(bad)
            .start()
            .is_err());
    }

    #[test]
    fn safe_probe_turns_panics_into_failures() {
        assert_eq!(safe_probe(&|| Ok(())), Ok(()));
        let r = safe_probe(&|| -> std::result::Result<(), String> { panic!("boom") });
        assert_eq!(r, Err("probe panicked: boom".to_string()));
    }

    /// The real ticker: `stop()` interrupts a long wait promptly (a bounded
    /// real-time hand-off, the only one in these tests).
    #[test]
    fn system_ticker_stop_interrupts_wait() {
        let t = Arc::new(SystemTicker::new());
        assert!(t.wait(Duration::from_millis(1)), "a short wait elapses");
        let t2 = t.clone();
        let started = Instant::now();
        let waiter = thread::spawn(move || t2.wait(Duration::from_secs(60)));
        thread::sleep(Duration::from_millis(20));
        t.stop();
        assert!(!waiter.join().unwrap());
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!t.wait(Duration::from_secs(60)), "stopped stays stopped");
    }

    #[test]
    fn real_monitor_stops_promptly_on_drop() {
        let m = NetworkMonitor::builder(|| Ok(())).start().unwrap();
        let h = m.handle();
        let started = Instant::now();
        drop(m);
        assert!(!h.is_running());
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
