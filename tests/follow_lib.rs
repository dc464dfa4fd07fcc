//! Follow mode in the library: a `Follower` over real spools, driven by a
//! manual clock and scripted wake-ups (the fake notifier), never waiting
//! for real.

use spool::replay::follow::{
    ChangeCheck, FollowEnd, FollowOptions, Follower, Marks, PassEnd, Wait, Woke, SETTLE_FIRST,
};
use spool::replay::{Backoff, Delivery, Outcome, ReplayOptions, SyncWorker, Target};
use spool::{ManualClock, OpenMode, OpenOptions, SharedClock, Spool, Timestamp};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

type Step = Box<dyn FnOnce(Timestamp) -> Woke + Send>;

/// The fake notifier: each wait takes the next scripted step, and
/// remembers the deadline it was asked to wait for.
struct Script {
    steps: Mutex<VecDeque<Step>>,
    asked: Mutex<Vec<Timestamp>>,
}

impl Script {
    fn new() -> Script {
        Script {
            steps: Mutex::new(VecDeque::new()),
            asked: Mutex::new(Vec::new()),
        }
    }
    fn then(self, step: impl FnOnce(Timestamp) -> Woke + Send + 'static) -> Script {
        self.steps.lock().unwrap().push_back(Box::new(step));
        self
    }
    fn asked(&self) -> Vec<Timestamp> {
        self.asked.lock().unwrap().clone()
    }
}

impl Wait for Script {
    fn wait_until(&self, deadline: Timestamp) -> Woke {
        self.asked.lock().unwrap().push(deadline);
        let step = self
            .steps
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_else(|| panic!("nothing scripted for a wait until {deadline}"));
        step(deadline)
    }
}

/// A step that lets the deadline come.
fn until(clock: &ManualClock) -> impl FnOnce(Timestamp) -> Woke + Send + 'static {
    let c = clock.clone();
    move |deadline| {
        c.set(deadline);
        Woke::Deadline
    }
}

/// A target that records payloads and fails the attempts listed.
struct Recorder {
    seen: Mutex<Vec<(Vec<u8>, u32)>>,
    fail_attempts: Vec<u32>,
}

impl Recorder {
    fn new(fail_attempts: Vec<u32>) -> Recorder {
        Recorder {
            seen: Mutex::new(Vec::new()),
            fail_attempts,
        }
    }
    fn payloads(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| String::from_utf8_lossy(p).into_owned())
            .collect()
    }
}

impl Target for Recorder {
    fn deliver(&self, d: &Delivery<'_>) -> Result<Outcome, String> {
        self.seen
            .lock()
            .unwrap()
            .push((d.item.payload.clone(), d.attempt));
        if self.fail_attempts.contains(&d.attempt) {
            Ok(Outcome::failed("not now"))
        } else {
            Ok(Outcome::Delivered(spool::Evidence::Exit(0)))
        }
    }
    fn describe(&self) -> String {
        "recorder".into()
    }
}

const BACKENDS: [&str; 2] = ["q.db", "q.ndjson"];

fn open(path: &Path, clock: &SharedClock) -> Spool {
    let mut o = OpenOptions::new(OpenMode::Create);
    o.clock = clock.clone();
    Spool::open(path, &o).unwrap()
}

/// Another process's handle on the same spool (its own connection).
fn producer(path: &Path) -> Spool {
    Spool::open(path, &OpenOptions::new(OpenMode::ReadWrite)).unwrap()
}

fn options() -> ReplayOptions {
    ReplayOptions {
        backoff: Backoff {
            base: Duration::from_secs(10),
            max: Duration::from_secs(60),
        },
        ..ReplayOptions::default()
    }
}

/// Run a follower whose passes are SyncWorker runs (no jitter).
fn follow(
    spool: &Spool,
    target: &Recorder,
    wait: &Script,
    clock: &SharedClock,
    opts: FollowOptions,
) -> (FollowEnd, u64) {
    let follower = Follower::new(&**spool, spool, wait, clock.clone(), opts).unwrap();
    let stats = follower
        .run(&mut || {
            let r = SyncWorker::new(&**spool, target, options(), clock.clone())?
                .with_random(|| 0.999_999)
                .run()?;
            Ok(PassEnd {
                attempted: r.delivered + r.failed + r.dead_lettered,
                ..PassEnd::default()
            })
        })
        .unwrap();
    (stats.end, stats.passes)
}

fn manual() -> (ManualClock, SharedClock) {
    let c = ManualClock::new(T0);
    (c.clone(), Arc::new(c))
}

#[test]
fn a_notification_wakes_it_and_the_new_item_is_delivered() {
    for name in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let (_manual, clock) = manual();
        let spool = open(&path, &clock);
        spool.enqueue(b"early", "").unwrap();
        let p = path.clone();
        let script = Script::new()
            .then(move |_| {
                producer(&p).enqueue(b"late", "").unwrap();
                Woke::Changed
            })
            .then(|_| Woke::Stopped);
        let target = Recorder::new(vec![]);
        let (end, passes) = follow(&spool, &target, &script, &clock, FollowOptions::default());
        assert_eq!(target.payloads(), ["early", "late"], "{name}");
        assert_eq!(end, FollowEnd::Stopped, "{name}");
        // Its own writes are no change for SQLite; NDJSON looks once more.
        assert!(
            passes == 2 || (name.ends_with("ndjson") && passes <= 3),
            "{name}: {passes}"
        );
        // Nothing waiting: it polls.
        assert_eq!(script.asked()[0], T0.saturating_add(Duration::from_secs(1)));
        assert_eq!(spool.size().unwrap(), 0);
    }
}

#[test]
fn a_hint_without_a_change_runs_no_pass_but_rechecks_quickly() {
    for name in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let (manual, clock) = manual();
        let spool = open(&path, &clock);
        let p = path.clone();
        // A hint before the writer's commit is visible (a WAL write),
        // then the commit lands before the second quick re-check.
        let script = Script::new()
            .then(|_| Woke::Changed)
            .then(until(&manual))
            .then({
                let c = manual.clone();
                move |deadline| {
                    producer(&p).enqueue(b"x", "").unwrap();
                    c.set(deadline);
                    Woke::Deadline
                }
            })
            .then(|_| Woke::Stopped);
        let target = Recorder::new(vec![]);
        let (end, _) = follow(
            &spool,
            &target,
            &script,
            &clock,
            FollowOptions {
                poll: Duration::from_secs(3600),
                ..FollowOptions::default()
            },
        );
        assert_eq!(end, FollowEnd::Stopped);
        assert_eq!(target.payloads(), ["x"], "{name}");
        let asked = script.asked();
        assert_eq!(
            asked[1],
            T0.saturating_add(SETTLE_FIRST),
            "{name}: {asked:?}"
        );
        assert_eq!(
            asked[2],
            T0.saturating_add(SETTLE_FIRST * 3),
            "the re-checks back off: {name}: {asked:?}"
        );
    }
}

#[test]
fn it_wakes_when_a_waiting_item_becomes_due() {
    for name in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let (manual, clock) = manual();
        let spool = open(&path, &clock);
        spool.enqueue(b"flaky", "").unwrap();
        let script = Script::new()
            .then(until(&manual))
            .then(until(&manual))
            .then(|_| Woke::Stopped);
        let target = Recorder::new(vec![1]);
        let (end, _) = follow(
            &spool,
            &target,
            &script,
            &clock,
            FollowOptions {
                poll: Duration::from_secs(3600),
                ..FollowOptions::default()
            },
        );
        assert_eq!(end, FollowEnd::Stopped);
        let asked = script.asked();
        let due = T0.saturating_add(options().backoff.delay(1, 0.999_999));
        assert_eq!(asked[0], due, "{name}: woken at the retry time, {asked:?}");
        assert_eq!(
            target.seen.lock().unwrap().clone(),
            vec![(b"flaky".to_vec(), 1), (b"flaky".to_vec(), 2)],
            "{name}"
        );
        assert_eq!(spool.size().unwrap(), 0, "{name}");
    }
}

#[test]
fn idle_exit_ends_the_run_after_the_last_attempt() {
    for name in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let (manual, clock) = manual();
        let spool = open(&path, &clock);
        let p = path.clone();
        let c = manual.clone();
        let script = Script::new()
            .then(move |_| {
                // 150ms later an item comes: the idle time starts again.
                c.advance(Duration::from_millis(150));
                producer(&p).enqueue(b"a", "").unwrap();
                Woke::Changed
            })
            .then(until(&manual))
            .then(until(&manual));
        let target = Recorder::new(vec![]);
        let (end, _) = follow(
            &spool,
            &target,
            &script,
            &clock,
            FollowOptions {
                idle_exit: Some(Duration::from_millis(200)),
                ..FollowOptions::default()
            },
        );
        assert_eq!(end, FollowEnd::Idle, "{name}");
        let asked = script.asked();
        assert_eq!(asked[0], T0.saturating_add(Duration::from_millis(200)));
        assert_eq!(
            *asked.last().unwrap(),
            T0.saturating_add(Duration::from_millis(350)),
            "{name}: {asked:?}"
        );
        assert_eq!(target.payloads(), ["a"]);
    }
}

#[test]
fn a_stop_request_ends_the_wait_and_the_deadline_ends_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (manual, clock) = manual();
    let spool = open(&dir.path().join("q.db"), &clock);
    let target = Recorder::new(vec![]);
    let script = Script::new().then(|_| Woke::Stopped);
    let (end, passes) = follow(&spool, &target, &script, &clock, FollowOptions::default());
    assert_eq!((end, passes), (FollowEnd::Stopped, 1));

    let script = Script::new().then(until(&manual)).then(until(&manual));
    let (end, _) = follow(
        &spool,
        &target,
        &script,
        &clock,
        FollowOptions {
            deadline: Some(Duration::from_millis(1500)),
            ..FollowOptions::default()
        },
    );
    assert_eq!(end, FollowEnd::Deadline);
    assert_eq!(
        script.asked(),
        vec![
            T0.saturating_add(Duration::from_secs(1)),
            T0.saturating_add(Duration::from_millis(1500))
        ]
    );
}

#[test]
fn a_pass_that_asks_for_a_pause_holds_every_wake_up_back() {
    let (manual, clock) = manual();
    // The memory backend has no marks: every hint counts as a change.
    let spool = Spool::memory(&OpenOptions::default());
    let script = Script::new()
        .then(|_| Woke::Changed)
        .then(until(&manual))
        .then(|_| Woke::Stopped);
    let follower = Follower::new(
        &*spool,
        &spool,
        &script,
        clock.clone(),
        FollowOptions::default(),
    )
    .unwrap();
    let mut passes = Vec::new();
    let c = clock.clone();
    let stats = follower
        .run(&mut || {
            passes.push(c.now());
            Ok(PassEnd {
                attempted: 1,
                not_before: Some(c.now().saturating_add(Duration::from_secs(30))),
                end: None,
            })
        })
        .unwrap();
    assert_eq!(stats.end, FollowEnd::Stopped);
    let later = T0.saturating_add(Duration::from_secs(30));
    assert_eq!(script.asked()[1], later, "the hint waits for the pause");
    assert_eq!(passes, vec![T0, later]);
}

/// Marks that change only when told.
struct Counter(Mutex<u64>);

impl Marks for Counter {
    fn mark(&self) -> Option<spool::replay::follow::ChangeMark> {
        Some(spool::replay::follow::ChangeMark::new([
            *self.0.lock().unwrap(),
            0,
            0,
            0,
        ]))
    }
}

#[test]
fn change_checks_poll_and_settle() {
    let marks = Counter(Mutex::new(0));
    let mut c = ChangeCheck::new(&marks, Duration::from_secs(1), T0);
    c.pass_begins(T0);
    assert_eq!(c.next_check(), T0.saturating_add(Duration::from_secs(1)));
    assert!(
        !c.tick(T0.saturating_add(Duration::from_millis(500))),
        "not due"
    );
    assert!(!c.hinted(T0), "no change");
    assert_eq!(c.next_check(), T0.saturating_add(SETTLE_FIRST));
    *marks.0.lock().unwrap() = 1;
    assert!(c.tick(T0.saturating_add(SETTLE_FIRST)));
    c.pass_begins(T0);
    assert!(
        !c.tick(T0.saturating_add(Duration::from_secs(1))),
        "polled: no change"
    );
    *marks.0.lock().unwrap() = 2;
    assert!(c.hinted(T0.saturating_add(Duration::from_secs(1))));
    // The memory backend has no marks: every poll and hint counts.
    let mem = Spool::memory(&OpenOptions::default());
    let mut c = ChangeCheck::new(&mem, Duration::from_secs(1), T0);
    c.pass_begins(T0);
    assert!(c.hinted(T0));
    assert!(c.tick(T0.saturating_add(Duration::from_secs(1))));
}

#[test]
fn next_retry_after_is_the_earliest_waiting_item_not_held() {
    for name in BACKENDS {
        let dir = tempfile::tempdir().unwrap();
        let (_m, clock) = manual();
        let spool = open(&dir.path().join(name), &clock);
        assert_eq!(spool.next_retry_after(T0).unwrap(), None);
        let mut ids = Vec::new();
        for p in [b"a", b"b", b"c"] {
            ids.push(spool.enqueue(p, "").unwrap().id);
        }
        let at = |s| T0.saturating_add(Duration::from_secs(s));
        for (id, s) in ids.iter().zip([30, 10, 20]) {
            spool
                .record_attempt(
                    *id,
                    &spool::AttemptUpdate {
                        attempts: 1,
                        next_retry_at: Some(at(s)),
                        last_error: Some("x".into()),
                    },
                )
                .unwrap();
        }
        assert_eq!(spool.next_retry_after(T0).unwrap(), Some(at(10)), "{name}");
        spool.set_held(&[ids[1]], true).unwrap();
        assert_eq!(spool.next_retry_after(T0).unwrap(), Some(at(20)), "{name}");
        assert_eq!(
            spool.next_retry_after(at(25)).unwrap(),
            Some(at(30)),
            "{name}"
        );
        assert_eq!(spool.next_retry_after(at(30)).unwrap(), None, "{name}");
    }
}
