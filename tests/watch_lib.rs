//! The watch library: NetworkMonitor driven tick by tick, the
//! ReconnectCoordinator with injected steps and sleep, real probes against
//! local listeners, and the metrics text. Nothing here sleeps for real
//! except the exec probe's own timeout test.

mod http_sink;
mod tls_pki;

use spool::replay::{Delivery, Outcome, ReplayOptions, ReplayReport, SyncWorker, Target};
use spool::watch::metrics::{self, render_gauges, render_watch, write_atomic};
use spool::watch::{
    Dependency, DepsBuilder, ManualTicker, MonitorHandle, NetworkMonitor, NetworkMonitorConfig,
    Probe, ProbeOptions, ReconnectConfig, ReconnectCoordinator, ReconnectOutcome, Shutdown,
    SpoolGauges, StartState, WatchCounters, WatchMetrics, Worker,
};
use spool::{Clock, ManualClock, OpenOptions, SharedClock, Spool, SystemClock, Timestamp};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- monitor

const DOWN: u8 = 0;
const UP: u8 = 1;
const PANIC: u8 = 2;

/// A monitor over a scripted link, driven by a manual ticker.
struct Rig {
    link: Arc<AtomicU8>,
    probes: Arc<AtomicUsize>,
    events: Arc<Mutex<Vec<&'static str>>>,
    ticker: Arc<ManualTicker>,
    monitor: NetworkMonitor,
}

impl Rig {
    fn new(config: NetworkMonitorConfig, link: u8) -> Rig {
        Rig::with_ticker(config, link, Arc::new(ManualTicker::new()))
    }

    fn with_ticker(config: NetworkMonitorConfig, link: u8, ticker: Arc<ManualTicker>) -> Rig {
        let link = Arc::new(AtomicU8::new(link));
        let probes = Arc::new(AtomicUsize::new(0));
        let events: Arc<Mutex<Vec<&'static str>>> = Arc::default();
        let (l, p) = (link.clone(), probes.clone());
        let (e1, e2) = (events.clone(), events.clone());
        let monitor = NetworkMonitor::builder(move || {
            p.fetch_add(1, Ordering::SeqCst);
            match l.load(Ordering::SeqCst) {
                UP => Ok(()),
                PANIC => panic!("scripted probe panic"),
                _ => Err("scripted: down".into()),
            }
        })
        .on_offline(move || e1.lock().unwrap().push("offline"))
        .on_online(move || e2.lock().unwrap().push("online"))
        .config(config)
        .ticker(ticker.clone())
        .start()
        .unwrap();
        Rig {
            link,
            probes,
            events,
            ticker,
            monitor,
        }
    }

    fn set(&self, state: u8) {
        self.link.store(state, Ordering::SeqCst);
    }

    fn tick(&self) {
        assert!(self.ticker.tick(), "the probe thread handled the tick");
    }

    fn events(&self) -> Vec<&'static str> {
        self.events.lock().unwrap().clone()
    }
}

fn cfg(failure_threshold: u32, online_threshold: u32) -> NetworkMonitorConfig {
    NetworkMonitorConfig {
        failure_threshold,
        online_threshold,
        ..Default::default()
    }
}

#[test]
fn n_failures_go_offline_exactly_once() {
    let rig = Rig::new(cfg(3, 1), DOWN);
    let other_thread = {
        let h: MonitorHandle = rig.monitor.handle();
        move || std::thread::spawn(move || h.is_online()).join().unwrap()
    };
    assert!(rig.monitor.is_online(), "starts online");
    rig.tick();
    rig.tick();
    assert!(rig.monitor.is_online());
    assert!(rig.events().is_empty());
    rig.tick();
    assert!(!rig.monitor.is_online());
    assert!(!other_thread(), "is_online from another thread");
    assert_eq!(rig.events(), ["offline"]);
    for _ in 0..5 {
        rig.tick();
    }
    assert_eq!(rig.events(), ["offline"], "no second offline");
    assert_eq!(rig.probes.load(Ordering::SeqCst), 8);
}

#[test]
fn a_single_success_resets_the_failure_count() {
    let rig = Rig::new(cfg(3, 1), DOWN);
    rig.tick();
    rig.tick();
    rig.set(UP);
    rig.tick();
    rig.set(DOWN);
    rig.tick();
    rig.tick();
    assert!(rig.monitor.is_online(), "2 + 2 failures, not 3 in a row");
    assert!(rig.events().is_empty());
    rig.tick();
    assert_eq!(rig.events(), ["offline"]);
}

#[test]
fn online_threshold_above_one_needs_consecutive_successes() {
    let rig = Rig::new(
        NetworkMonitorConfig {
            start: StartState::Offline,
            ..cfg(2, 3)
        },
        UP,
    );
    assert!(!rig.monitor.is_online());
    rig.tick();
    rig.tick();
    rig.set(DOWN);
    rig.tick();
    rig.set(UP);
    rig.tick();
    rig.tick();
    assert!(!rig.monitor.is_online(), "a failure reset the successes");
    assert!(rig.events().is_empty());
    rig.tick();
    assert!(rig.monitor.is_online());
    assert_eq!(rig.events(), ["online"]);
    // And back: the failure threshold still applies.
    rig.set(DOWN);
    rig.tick();
    rig.set(UP);
    rig.tick();
    rig.set(DOWN);
    rig.tick();
    rig.tick();
    assert_eq!(rig.events(), ["online", "offline"]);
}

#[test]
fn first_offline_only_after_interval_times_threshold() {
    let start = Timestamp::from_secs(1_800_000_000);
    let clock = ManualClock::new(start);
    let ticker = Arc::new(ManualTicker::with_clock(clock.clone()));
    let fired_at: Arc<Mutex<Vec<Timestamp>>> = Arc::default();
    let (f, c) = (fired_at.clone(), clock.clone());
    let monitor = NetworkMonitor::builder(|| Err("down from the start".into()))
        .on_offline(move || f.lock().unwrap().push(c.now()))
        .ticker(ticker.clone())
        .start()
        .unwrap();
    assert!(monitor.is_online(), "reference: starts online");
    assert!(ticker.ticks(2));
    assert!(monitor.is_online());
    assert!(fired_at.lock().unwrap().is_empty());
    assert!(ticker.tick());
    let interval = NetworkMonitorConfig::default().probe_interval;
    assert_eq!(interval, Duration::from_secs(5));
    assert_eq!(
        *fired_at.lock().unwrap(),
        [start.saturating_add(interval * 3)],
        "first offline at probe_interval × failure_threshold = 15 s"
    );
    assert!(ticker.waits().iter().all(|w| *w == interval));
    assert!(!monitor.is_online());
}

#[test]
fn no_callback_at_startup_in_any_start_state() {
    for (start, link, online) in [
        (StartState::Online, UP, true),
        (StartState::Offline, DOWN, false),
        (StartState::Probe, UP, true),
        (StartState::Probe, DOWN, false),
    ] {
        let rig = Rig::new(NetworkMonitorConfig { start, ..cfg(1, 1) }, link);
        assert_eq!(rig.monitor.started_online(), online, "{start:?}");
        assert_eq!(rig.monitor.is_online(), online, "{start:?}");
        let initial_probes = usize::from(start == StartState::Probe);
        assert_eq!(rig.probes.load(Ordering::SeqCst), initial_probes);
        match (start, link) {
            (StartState::Probe, UP) => assert_eq!(rig.monitor.initial_probe(), Some(&Ok(()))),
            (StartState::Probe, _) => assert_eq!(
                rig.monitor.initial_probe(),
                Some(&Err("scripted: down".to_string()))
            ),
            _ => assert_eq!(rig.monitor.initial_probe(), None),
        }
        // Probes that confirm the start state fire nothing either.
        rig.tick();
        rig.tick();
        assert!(rig.events().is_empty(), "{start:?}: {:?}", rig.events());
        assert_eq!(rig.probes.load(Ordering::SeqCst), initial_probes + 2);
    }
}

#[test]
fn a_panicking_probe_is_a_failure_and_the_monitor_keeps_running() {
    let rig = Rig::new(cfg(3, 1), PANIC);
    rig.tick();
    rig.tick();
    rig.tick();
    assert!(!rig.monitor.is_online());
    assert_eq!(rig.events(), ["offline"]);
    assert!(rig.monitor.is_running());
    rig.set(UP);
    rig.tick();
    assert!(rig.monitor.is_online());
    assert_eq!(rig.events(), ["offline", "online"]);
}

#[test]
fn a_panicking_callback_does_not_stop_the_monitor() {
    let ticker = Arc::new(ManualTicker::new());
    let link = Arc::new(AtomicU8::new(DOWN));
    let onlines = Arc::new(AtomicUsize::new(0));
    let (l, o) = (link.clone(), onlines.clone());
    let monitor = NetworkMonitor::builder(move || {
        if l.load(Ordering::SeqCst) == UP {
            Ok(())
        } else {
            Err("down".into())
        }
    })
    .config(cfg(1, 1))
    .on_offline(|| panic!("scripted callback panic"))
    .on_online(move || {
        o.fetch_add(1, Ordering::SeqCst);
    })
    .ticker(ticker.clone())
    .start()
    .unwrap();
    assert!(ticker.tick());
    assert!(!monitor.is_online());
    link.store(UP, Ordering::SeqCst);
    assert!(ticker.tick());
    assert_eq!(onlines.load(Ordering::SeqCst), 1);
}

#[test]
fn stop_from_inside_a_callback_returns_and_stops_the_monitor() {
    let ticker = Arc::new(ManualTicker::new());
    let handle: Arc<OnceLock<MonitorHandle>> = Arc::default();
    let log: Arc<Mutex<Vec<&'static str>>> = Arc::default();
    let probes = Arc::new(AtomicUsize::new(0));
    let (h, lg, p) = (handle.clone(), log.clone(), probes.clone());
    let monitor = NetworkMonitor::builder(move || {
        p.fetch_add(1, Ordering::SeqCst);
        Err("down".into())
    })
    .config(cfg(2, 1))
    .on_offline(move || {
        lg.lock().unwrap().push("offline");
        h.get().unwrap().stop();
        lg.lock().unwrap().push("stop returned");
        h.get().unwrap().stop(); // idempotent, still on the probe thread
    })
    .ticker(ticker.clone())
    .start()
    .unwrap();
    handle.set(monitor.handle()).unwrap();
    assert!(ticker.tick());
    assert!(
        !ticker.tick(),
        "the loop ended after the callback that stopped it"
    );
    assert_eq!(*log.lock().unwrap(), ["offline", "stop returned"]);
    assert!(ticker.has_exited());
    assert!(!monitor.is_running());
    assert!(!ticker.tick(), "no probe after stop");
    assert_eq!(probes.load(Ordering::SeqCst), 2);
    monitor.stop(); // idempotent from another thread too
    drop(monitor);
}

#[test]
fn dropping_the_monitor_from_its_own_callback_does_not_deadlock() {
    let ticker = Arc::new(ManualTicker::new());
    let slot: Arc<Mutex<Option<NetworkMonitor>>> = Arc::default();
    let s = slot.clone();
    let monitor = NetworkMonitor::builder(|| Err("down".into()))
        .config(cfg(1, 1))
        .on_offline(move || drop(s.lock().unwrap().take()))
        .ticker(ticker.clone())
        .start()
        .unwrap();
    let handle = monitor.handle();
    *slot.lock().unwrap() = Some(monitor);
    assert!(!ticker.tick());
    assert!(slot.lock().unwrap().is_none());
    assert!(!handle.is_running());
    assert!(handle.is_stopped());
}

#[test]
fn drop_stops_the_thread() {
    let rig = Rig::new(cfg(3, 1), UP);
    rig.tick();
    let handle = rig.monitor.handle();
    let (ticker, probes) = (rig.ticker.clone(), rig.probes.clone());
    assert!(handle.is_running());
    drop(rig);
    assert!(!handle.is_running(), "drop joined the probe thread");
    assert!(ticker.has_exited());
    assert!(!ticker.tick());
    assert_eq!(probes.load(Ordering::SeqCst), 1);
    handle.stop(); // a handle outliving the monitor is harmless
}

// ------------------------------------------------------------ coordinator

type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, s: impl Into<String>) {
    log.lock().unwrap().push(s.into());
}

/// A coordinator whose every step is recorded. `connect(n)` answers the
/// n-th attempt (1-based); `cont(n)` the n-th should_continue poll.
fn recorded(
    log: &Log,
    connect: impl Fn(u32) -> bool + Send + 'static,
    cont: impl Fn(u32) -> bool + Send + 'static,
    config: ReconnectConfig,
) -> ReconnectCoordinator<'static, &'static str> {
    let (l1, l2, l3, l4, l5, l6, l7) = (
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
        log.clone(),
    );
    let mut attempt = 0;
    let mut poll = 0;
    let deps = DepsBuilder::new()
        .try_reconnect(move || {
            attempt += 1;
            push(&l1, format!("try_reconnect#{attempt}"));
            connect(attempt)
        })
        .activate_primary(move || push(&l2, "activate_primary"))
        .activate_local(move || push(&l3, "activate_local"))
        .bind_context(move || push(&l4, "bind_context"))
        .replay(move || {
            push(&l5, "replay");
            "replayed 3 items"
        })
        .should_continue(move || {
            poll += 1;
            push(&l6, format!("should_continue#{poll}"));
            cont(poll)
        })
        .sleep(move |d| push(&l7, format!("sleep {}ms", d.as_millis())))
        .build()
        .unwrap();
    ReconnectCoordinator::new(deps, config).unwrap()
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn steps_run_in_strict_order() {
    let log: Log = Arc::default();
    let c = recorded(&log, |n| n == 3, |_| true, ReconnectConfig::default());
    let r = c.on_online();
    assert_eq!(r.outcome, ReconnectOutcome::Reconnected { replayed: true });
    assert_eq!(r.attempts, 3);
    assert_eq!(r.replay, Some("replayed 3 items"));
    assert_eq!(
        entries(&log),
        [
            "should_continue#1",
            "try_reconnect#1",
            "sleep 2000ms",
            "should_continue#2",
            "try_reconnect#2",
            "sleep 2000ms",
            "should_continue#3",
            "try_reconnect#3",
            "activate_primary",
            "bind_context",
            "should_continue#4",
            "replay",
        ]
    );
    log.lock().unwrap().clear();
    c.on_offline();
    assert_eq!(entries(&log), ["activate_local", "bind_context"]);
    let n = c.counters();
    assert_eq!(
        (n.attempts, n.reconnected, n.gave_up, n.aborted, n.offline),
        (3, 1, 0, 0, 1)
    );
}

#[test]
fn a_flap_between_attempts_aborts() {
    let log: Log = Arc::default();
    // The link goes away again before the third attempt.
    let c = recorded(&log, |_| false, |n| n < 3, ReconnectConfig::default());
    let r = c.on_online();
    assert_eq!(r.outcome, ReconnectOutcome::Aborted);
    assert_eq!(r.attempts, 2);
    assert_eq!(r.replay, None);
    assert_eq!(
        entries(&log),
        [
            "should_continue#1",
            "try_reconnect#1",
            "sleep 2000ms",
            "should_continue#2",
            "try_reconnect#2",
            "sleep 2000ms",
            "should_continue#3",
        ]
    );
    assert_eq!(c.counters().aborted, 1);

    // Gone before the first attempt: nothing runs at all.
    let log: Log = Arc::default();
    let c = recorded(&log, |_| true, |_| false, ReconnectConfig::default());
    assert_eq!(c.on_online().outcome, ReconnectOutcome::Aborted);
    assert_eq!(entries(&log), ["should_continue#1"]);
}

#[test]
fn a_flap_between_bind_and_replay_skips_replay_and_says_so() {
    let log: Log = Arc::default();
    let c = recorded(&log, |_| true, |n| n == 1, ReconnectConfig::default());
    let r = c.on_online();
    assert_eq!(r.outcome, ReconnectOutcome::Reconnected { replayed: false });
    assert_eq!(r.replay, None);
    assert_eq!(
        entries(&log),
        [
            "should_continue#1",
            "try_reconnect#1",
            "activate_primary",
            "bind_context",
            "should_continue#2",
        ]
    );
    let n = c.counters();
    assert_eq!((n.reconnected, n.replay_skipped), (1, 1));
}

#[test]
fn gave_up_after_max_attempts_without_a_final_sleep() {
    let clock = ManualClock::new(Timestamp::from_secs(0));
    let shared: SharedClock = Arc::new(clock.clone());
    let tries = Arc::new(AtomicUsize::new(0));
    let t = tries.clone();
    let deps = DepsBuilder::new()
        .try_reconnect(move || {
            t.fetch_add(1, Ordering::SeqCst);
            false
        })
        .activate_primary(|| panic!("must not activate"))
        .activate_local(|| {})
        .bind_context(|| panic!("must not bind"))
        .replay(|| panic!("must not replay"))
        .should_continue(|| true)
        .sleep_on(shared)
        .build()
        .unwrap();
    let config = ReconnectConfig {
        max_attempts: 4,
        retry_delay: Duration::from_millis(750),
    };
    let c: ReconnectCoordinator<'_, ()> = ReconnectCoordinator::new(deps, config).unwrap();
    let r = c.on_online();
    assert_eq!(r.outcome, ReconnectOutcome::GaveUp);
    assert_eq!(r.attempts, 4);
    assert_eq!(tries.load(Ordering::SeqCst), 4);
    assert_eq!(clock.sleeps(), vec![Duration::from_millis(750); 3]);
    let n = c.counters();
    assert_eq!((n.attempts, n.gave_up), (4, 1));
}

#[test]
fn a_panicking_try_reconnect_is_a_failed_attempt() {
    let log: Log = Arc::default();
    let c = recorded(
        &log,
        |n| {
            if n == 1 {
                panic!("scripted reconnect panic");
            }
            true
        },
        |_| true,
        ReconnectConfig::default(),
    );
    let r = c.on_online();
    assert_eq!(r.outcome, ReconnectOutcome::Reconnected { replayed: true });
    assert_eq!(r.attempts, 2);
    assert_eq!(
        entries(&log),
        [
            "should_continue#1",
            "try_reconnect#1",
            "sleep 2000ms",
            "should_continue#2",
            "try_reconnect#2",
            "activate_primary",
            "bind_context",
            "should_continue#3",
            "replay",
        ]
    );
}

#[test]
fn on_online_and_on_offline_are_serialised() {
    let log: Log = Arc::default();
    let yield_then = |log: &Log, s: &'static str| {
        let log = log.clone();
        move || {
            push(&log, s);
            std::thread::yield_now();
        }
    };
    let l = log.clone();
    let deps = DepsBuilder::new()
        .try_reconnect({
            let l = l.clone();
            move || {
                push(&l, "try_reconnect");
                std::thread::yield_now();
                true
            }
        })
        .activate_primary(yield_then(&log, "activate_primary"))
        .activate_local(yield_then(&log, "activate_local"))
        .bind_context(yield_then(&log, "bind_context"))
        .replay(yield_then(&log, "replay"))
        .should_continue(move || {
            push(&l, "should_continue");
            std::thread::yield_now();
            true
        })
        .sleep(|_| {})
        .build()
        .unwrap();
    let c = ReconnectCoordinator::new(deps, ReconnectConfig::default()).unwrap();
    let rounds = 300;
    std::thread::scope(|s| {
        s.spawn(|| {
            for _ in 0..rounds {
                c.on_online();
            }
        });
        s.spawn(|| {
            for _ in 0..rounds {
                c.on_offline();
            }
        });
    });
    let online = [
        "should_continue",
        "try_reconnect",
        "activate_primary",
        "bind_context",
        "should_continue",
        "replay",
    ];
    let offline = ["activate_local", "bind_context"];
    let all = entries(&log);
    let (mut i, mut ons, mut offs) = (0, 0, 0);
    while i < all.len() {
        let block: &[&str] = if all[i] == "activate_local" {
            offs += 1;
            &offline
        } else {
            ons += 1;
            &online
        };
        let got: Vec<&str> = all[i..(i + block.len()).min(all.len())]
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(got, block, "interleaving at entry {i}");
        i += block.len();
    }
    assert_eq!((ons, offs), (rounds, rounds));
}

#[test]
fn building_with_a_missing_dependency_is_an_error() {
    let e = DepsBuilder::<()>::new()
        .activate_primary(|| {})
        .activate_local(|| {})
        .bind_context(|| {})
        .replay(|| {})
        .should_continue(|| true)
        .sleep(|_| {})
        .build()
        .unwrap_err();
    assert_eq!(e.missing, [Dependency::TryReconnect]);
    assert!(e.to_string().contains("try_reconnect"), "{e}");
    let as_error: spool::Error = e.into();
    assert!(matches!(as_error, spool::Error::InvalidInput(_)));
    let e = DepsBuilder::<()>::new().build().unwrap_err();
    assert_eq!(e.missing.len(), 7);
}

/// A replay target that records payloads and delivers everything.
#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Target for Recorder {
    fn deliver(&self, d: &Delivery<'_>) -> Result<Outcome, String> {
        let text = String::from_utf8_lossy(&d.item.payload).into_owned();
        self.0.lock().unwrap().push(text);
        Ok(Outcome::Delivered(spool::Evidence::Exit(0)))
    }
    fn describe(&self) -> String {
        "recorder".into()
    }
}

/// The wiring `spool watch` uses: callbacks only post to a worker, the
/// worker runs the coordinator, should_continue reads the live monitor.
#[test]
fn monitor_posts_to_worker_which_runs_the_coordinator() {
    let log: Log = Arc::default();
    let spool = Arc::new(Spool::memory(&OpenOptions::default()));
    for (i, payload) in ["a", "b"].iter().enumerate() {
        spool
            .enqueue(payload.as_bytes(), &format!("op-{i}"))
            .unwrap();
    }
    let target = Arc::new(Recorder::default());
    let link = Arc::new(AtomicU8::new(DOWN));
    let monitor_handle: Arc<OnceLock<MonitorHandle>> = Arc::default();
    let (l, mh) = (log.clone(), monitor_handle.clone());
    let deps = DepsBuilder::new()
        .try_reconnect({
            let l = l.clone();
            move || {
                push(&l, "try_reconnect");
                true
            }
        })
        .activate_primary({
            let l = l.clone();
            move || push(&l, "activate_primary")
        })
        .activate_local({
            let l = l.clone();
            move || push(&l, "activate_local")
        })
        .bind_context({
            let l = l.clone();
            move || push(&l, "bind_context")
        })
        .replay({
            let (l, spool, target) = (l.clone(), spool.clone(), target.clone());
            move || -> Result<ReplayReport, String> {
                push(&l, "replay");
                let clock: SharedClock = Arc::new(SystemClock);
                SyncWorker::new(spool.queue(), &*target, ReplayOptions::default(), clock)
                    .and_then(|w| w.run())
                    .map_err(|e| e.to_string())
            }
        })
        .should_continue(move || mh.get().is_some_and(MonitorHandle::is_online))
        .sleep(|_| {})
        .build()
        .unwrap();
    let coordinator =
        Arc::new(ReconnectCoordinator::new(deps, ReconnectConfig::default()).unwrap());
    let worker = Worker::start("spool-watch-worker").unwrap();
    let ticker = Arc::new(ManualTicker::new());
    let probe_link = link.clone();
    let (p1, c1) = (worker.poster(), coordinator.clone());
    let (p2, c2, l2) = (worker.poster(), coordinator.clone(), log.clone());
    let monitor = NetworkMonitor::builder(move || {
        if probe_link.load(Ordering::SeqCst) == UP {
            Ok(())
        } else {
            Err("down".into())
        }
    })
    .config(cfg(2, 1))
    .on_offline(move || {
        let c = c1.clone();
        p1.post(move || c.on_offline());
    })
    .on_online(move || {
        let (c, l) = (c2.clone(), l2.clone());
        p2.post(move || {
            let r = c.on_online();
            let delivered = r
                .replay
                .as_ref()
                .map(|rep| rep.as_ref().map(|rep| rep.delivered));
            push(&l, format!("outcome {} {delivered:?}", r.outcome));
        });
    })
    .ticker(ticker.clone())
    .start()
    .unwrap();
    monitor_handle.set(monitor.handle()).unwrap();

    assert!(ticker.ticks(2));
    assert!(worker.flush());
    assert_eq!(entries(&log), ["activate_local", "bind_context"]);
    log.lock().unwrap().clear();
    link.store(UP, Ordering::SeqCst);
    assert!(ticker.tick());
    assert!(worker.flush());
    assert_eq!(
        entries(&log),
        [
            "try_reconnect",
            "activate_primary",
            "bind_context",
            "replay",
            "outcome reconnected Some(Ok(2))",
        ]
    );
    assert_eq!(*target.0.lock().unwrap(), ["a", "b"]);
    assert_eq!(spool.size().unwrap(), 0);
    monitor.stop();
    worker.shutdown(Shutdown::Drain);
    assert!(!worker.post(|| {}));
}

// ------------------------------------------------------------------ probes

fn probe(target: &str) -> Probe {
    Probe::parse(target, &ProbeOptions::default()).unwrap()
}

#[test]
fn tcp_probe_follows_a_listener() {
    let port = http_sink::quiet_port();
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let p = probe(&format!("tcp://127.0.0.1:{port}"));
    assert_eq!(p.describe(), format!("tcp://127.0.0.1:{port}"));
    assert_eq!(p.check(), Ok(()));
    drop(listener);
    let e = p.check().unwrap_err();
    assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
}

/// A local HTTP server: `/ok` 200 with the health text, `/fail` 500,
/// `/portal` 200 with a captive-portal page, `/moved` 302. It records the
/// requests it saw (their Authorization headers, for one).
fn http_server() -> (String, http_sink::Sink) {
    let sink = http_sink::Sink::start(|r, _| {
        let page = |status: u16, body: &str| http_sink::Answer::Full(status, vec![], body.into());
        match r.path.split('?').next().unwrap_or("") {
            "/ok" => page(200, "status: ok"),
            "/fail" => page(500, "boom"),
            "/portal" => page(200, "<h1>Welcome to the hotel wifi</h1>"),
            "/moved" => http_sink::Answer::Full(
                302,
                vec![("Location".into(), "http://127.0.0.1:1/".into())],
                String::new(),
            ),
            _ => page(404, "nope"),
        }
    });
    (sink.url(""), sink)
}

#[test]
fn http_probe_needs_2xx_and_the_expected_text() {
    let (base, sink) = http_server();
    assert_eq!(probe(&format!("{base}/ok")).check(), Ok(()));
    let e = probe(&format!("{base}/fail")).check().unwrap_err();
    assert!(e.contains("500"), "{e}");
    let e = probe(&format!("{base}/moved")).check().unwrap_err();
    assert!(e.contains("302"), "redirects are not followed: {e}");
    assert_eq!(
        probe(&format!("{base}/portal")).check(),
        Ok(()),
        "without expect a portal's 200 passes"
    );
    let expecting = ProbeOptions {
        expect: Some("status: ok".into()),
        ..Default::default()
    };
    let p = Probe::parse(&format!("{base}/portal"), &expecting).unwrap();
    let e = p.check().unwrap_err();
    assert!(e.contains("expected text"), "{e}");
    let p = Probe::parse(&format!("{base}/ok"), &expecting).unwrap();
    assert_eq!(p.check(), Ok(()));

    // Credentials in the URL are sent, never shown.
    let with_creds = base.replacen("http://", "http://watcher:pa55word@", 1);
    let p = probe(&format!("{with_creds}/fail?token=t0ps3cret"));
    assert_eq!(p.describe(), format!("{base}/fail?***"));
    let e = p.check().unwrap_err();
    assert!(!e.contains("pa55word") && !e.contains("t0ps3cret"), "{e}");
    assert!(sink
        .received()
        .iter()
        .filter_map(|r| r.header("Authorization"))
        .any(|h| h.starts_with("Basic ")));

    // Nobody listening: a failed probe, not an error of the caller.
    let port = http_sink::quiet_port();
    assert!(probe(&format!("http://127.0.0.1:{port}/")).check().is_err());
}

#[test]
fn exec_probe_uses_the_exit_status() {
    assert_eq!(probe("exec:true").check(), Ok(()));
    let e = probe("exec:false").check().unwrap_err();
    assert!(e.contains("exited with 1"), "{e}");
    let e = probe("exec:sh -c 'exit 7'").check().unwrap_err();
    assert!(e.contains("exited with 7"), "{e}");
    let e = probe("exec:/nonexistent/spool-probe").check().unwrap_err();
    assert!(e.contains("cannot run"), "{e}");
}

#[test]
fn exec_probe_is_killed_on_timeout() {
    let p = Probe::parse(
        "exec:sleep 30",
        &ProbeOptions {
            timeout: Duration::from_millis(200),
            ..Default::default()
        },
    )
    .unwrap();
    let started = Instant::now();
    let e = p.check().unwrap_err();
    assert!(e.contains("timed out"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn probe_parse_errors_are_invalid_input() {
    for t in ["tcp://nohost", "smtp://h:25", "exec:", "https://"] {
        let e = Probe::parse(t, &ProbeOptions::default()).unwrap_err();
        assert_eq!(e.kind(), spool::ErrorKind::Data, "{t}");
        assert!(matches!(e, spool::Error::InvalidInput(_)), "{t}");
    }
}

/// An https probe trusts what `--cacert` adds and, without it, names why
/// the handshake failed; a bad `--cacert` file fails the parse.
#[test]
fn https_probe_trusts_cacert_and_names_the_cause() {
    let ca = tls_pki::Ca::new("probe CA");
    let dir = tempfile::tempdir().unwrap();
    let ca_pem = dir.path().join("ca.pem");
    ca.write_pem(&ca_pem);
    let trusting = ProbeOptions {
        trust: spool::tls::TlsTrust::with_cacert(&ca_pem),
        ..Default::default()
    };
    let sink = http_sink::Sink::start_tls(ca.server(&["localhost"]).server_config(), |_, _| {
        http_sink::Answer::Full(200, vec![], "status: ok".into())
    });
    let url = sink.https_url("localhost", "/health?token=t0ps3cret");
    let port = sink.port();

    assert_eq!(Probe::parse(&url, &trusting).unwrap().check(), Ok(()));
    let e = probe(&url).check().unwrap_err();
    assert!(
        e.starts_with(&format!(
            "TLS handshake with localhost:{port} failed: certificate is signed by an unknown issuer"
        )),
        "{e}"
    );
    assert!(!e.contains("t0ps3cret"), "{e}");
    // The certificate is for localhost, not for the address.
    let by_ip = sink.https_url("127.0.0.1", "/health");
    let e = Probe::parse(&by_ip, &trusting)
        .unwrap()
        .check()
        .unwrap_err();
    assert!(e.contains("name mismatch"), "{e}");
    assert_eq!(
        sink.received().len(),
        1,
        "only the trusted probe got through"
    );

    // A bad --cacert file is refused whatever the probe.
    for target in [url.as_str(), "tcp://127.0.0.1:9", "exec:true"] {
        let o = ProbeOptions {
            trust: spool::tls::TlsTrust::with_cacert(dir.path().join("missing.pem")),
            ..Default::default()
        };
        let e = Probe::parse(target, &o).unwrap_err();
        assert_eq!(e.kind(), spool::ErrorKind::NotFound, "{target}: {e}");
    }
}

// ----------------------------------------------------------------- metrics

/// Parse one sample line `name{k="v",...} value`, unescaping label values.
fn parse_sample(line: &str) -> (String, HashMap<String, String>, f64) {
    let open = line.find('{').expect("labels");
    let name = line[..open].to_string();
    assert!(
        name.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "{name}"
    );
    let mut labels = HashMap::new();
    let mut chars = line[open + 1..].char_indices().peekable();
    let rest_start;
    loop {
        let mut key = String::new();
        for (_, c) in chars.by_ref() {
            if c == '=' {
                break;
            }
            key.push(c);
        }
        assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "quote in {line}");
        let mut value = String::new();
        loop {
            match chars.next().expect("unterminated value").1 {
                '\\' => match chars.next().expect("escape").1 {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    other => panic!("bad escape \\{other} in {line}"),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(key, value);
        match chars.next().expect("after value") {
            (_, ',') => continue,
            (i, '}') => {
                rest_start = open + 1 + i + 1;
                break;
            }
            (_, c) => panic!("unexpected {c:?} in {line}"),
        }
    }
    let rest = &line[rest_start..];
    assert!(rest.starts_with(' '), "space before the value in {line}");
    let value: f64 = rest[1..].parse().expect("numeric value");
    (name, labels, value)
}

#[test]
fn metrics_text_parses_and_escapes_the_path() {
    let path = Path::new("/var/spool/we\"ird\\name.ndjson");
    let m = WatchMetrics {
        gauges: SpoolGauges {
            depth: 7,
            held: 1,
            dead_letters: 2,
            bytes: 8192,
            oldest_item_age: Duration::from_millis(42_500),
            evicted_total: 4,
            delivered_retained: 3,
        },
        counters: WatchCounters {
            delivered: 10,
            failed: 3,
            dead_lettered: 2,
            reconnect_attempts: 5,
            reconnected: 2,
            gave_up: 1,
            aborted: 1,
        },
        online: true,
    };
    let text = render_watch(path, &m);
    let mut samples = Vec::new();
    let mut typed = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            typed.insert(name.to_string(), kind.to_string());
        } else if line.starts_with("# HELP ") {
            continue;
        } else {
            assert!(!line.starts_with('#'), "{line}");
            samples.push(parse_sample(line));
        }
    }
    for (name, labels, _) in &samples {
        assert_eq!(labels["spool"], path.to_str().unwrap(), "{name}");
        assert!(typed.contains_key(name), "{name} has a TYPE line");
    }
    let value = |name: &str, outcome: Option<&str>| -> f64 {
        samples
            .iter()
            .find(|(n, l, _)| n == name && l.get("outcome").map(String::as_str) == outcome)
            .unwrap_or_else(|| panic!("{name} {outcome:?}"))
            .2
    };
    assert_eq!(value("spool_depth", None), 7.0);
    assert_eq!(value("spool_held", None), 1.0);
    assert_eq!(value("spool_dead_letters", None), 2.0);
    assert_eq!(value("spool_bytes", None), 8192.0);
    assert_eq!(value("spool_oldest_item_age_seconds", None), 42.5);
    assert_eq!(value("spool_delivered_total", None), 10.0);
    assert_eq!(value("spool_failed_total", None), 3.0);
    assert_eq!(value("spool_dead_lettered_total", None), 2.0);
    assert_eq!(value("spool_reconnect_attempts_total", None), 5.0);
    assert_eq!(
        value("spool_reconnect_outcomes_total", Some("reconnected")),
        2.0
    );
    assert_eq!(
        value("spool_reconnect_outcomes_total", Some("gave_up")),
        1.0
    );
    assert_eq!(
        value("spool_reconnect_outcomes_total", Some("aborted")),
        1.0
    );
    assert_eq!(value("spool_online", None), 1.0);
    assert_eq!(typed["spool_depth"], "gauge");
    assert_eq!(typed["spool_online"], "gauge");
    assert_eq!(typed["spool_delivered_total"], "counter");
    assert_eq!(typed["spool_reconnect_outcomes_total"], "counter");
    assert_eq!(samples.len(), 6 + 1 + 4 + 3 + 1);
    assert_eq!(value("spool_evicted_total", None), 4.0);
    assert_eq!(value("spool_delivered_retained", None), 3.0);
    assert_eq!(typed["spool_delivered_retained"], "gauge");
    assert_eq!(typed["spool_evicted_total"], "counter");
    assert!(text.contains(r#"spool="/var/spool/we\"ird\\name.ndjson""#));

    // The gauges alone (stats --prometheus) are the first part.
    let gauges = render_gauges(path, &m.gauges);
    assert!(text.starts_with(&gauges));
    assert_eq!(gauges.lines().filter(|l| !l.starts_with('#')).count(), 7);
    assert_eq!(
        metrics::escape_label_value("a\nb"),
        "a\\nb",
        "newlines escaped"
    );
}

#[test]
fn metrics_file_is_replaced_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spool.prom");
    write_atomic(&file, b"first\n").unwrap();
    write_atomic(&file, b"second\n").unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "second\n");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["spool.prom"], "no temporary file left behind");
    let missing = dir.path().join("no-such-dir").join("m.prom");
    let e = write_atomic(&missing, b"x").unwrap_err();
    assert!(e.to_string().contains("m.prom"), "{e}");
}
