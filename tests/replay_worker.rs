//! SyncWorker with an injected clock and scripted targets.

use spool::replay::{
    Backoff, DeadLetterSink, Delivery, ItemOutcome, Outcome, ReplayObserver, ReplayOptions,
    ReplayStatus, RetryAfter, StopReason, SyncWorker, Target,
};
use spool::{Item, ManualClock, OpenMode, OpenOptions, SharedClock, Spool, Timestamp};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// (id, attempt, idempotency key, payload) of one delivery.
type Seen = (u64, u32, String, Vec<u8>);

/// A target whose answer is decided by a function of (payload, attempt),
/// recording every delivery.
struct Scripted<F: Fn(&[u8], u32) -> Outcome + Send + Sync> {
    answer: F,
    log: Mutex<Vec<Seen>>,
}

impl<F: Fn(&[u8], u32) -> Outcome + Send + Sync> Scripted<F> {
    fn new(answer: F) -> Self {
        Scripted {
            answer,
            log: Mutex::new(Vec::new()),
        }
    }
    fn deliveries(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }
}

impl<F: Fn(&[u8], u32) -> Outcome + Send + Sync> Target for Scripted<F> {
    fn deliver(&self, d: &Delivery<'_>) -> Result<Outcome, String> {
        self.log.lock().unwrap().push((
            d.item.id,
            d.attempt,
            d.idempotency_key.to_string(),
            d.item.payload.clone(),
        ));
        Ok((self.answer)(&d.item.payload, d.attempt))
    }
    fn describe(&self) -> String {
        "scripted".into()
    }
}

fn clock() -> (ManualClock, SharedClock) {
    let c = ManualClock::new(Timestamp::from_secs(1_800_000_000));
    (c.clone(), Arc::new(c))
}

fn ndjson(dir: &tempfile::TempDir, shared: &SharedClock) -> Spool {
    let mut o = OpenOptions::new(OpenMode::Create);
    o.clock = shared.clone();
    Spool::open(&dir.path().join("q.ndjson"), &o).unwrap()
}

fn fixed_opts() -> ReplayOptions {
    ReplayOptions {
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
        ..ReplayOptions::default()
    }
}

fn fail(_: &[u8], _: u32) -> Outcome {
    Outcome::failed("boom")
}

#[test]
fn budget_survives_restarts_and_dead_letters_on_the_fifth_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let (manual, shared) = clock();
    let target = Scripted::new(fail);
    {
        let s = ndjson(&dir, &shared);
        s.enqueue(b"poison", "k-poison").unwrap();
    }
    for run in 1..=5u32 {
        // A fresh process: reopen the spool, build a new worker.
        let s = ndjson(&dir, &shared);
        let w = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
            .unwrap()
            .with_random(|| 0.999);
        let r = w.run().unwrap();
        if run < 5 {
            assert_eq!((r.failed, r.dead_lettered), (1, 0), "run {run}");
            assert_eq!(r.status(), ReplayStatus::Retry);
            let it = s.get(1).unwrap().unwrap();
            assert_eq!(it.attempts, run);
            assert_eq!(it.last_error.as_deref(), Some("boom"));
        } else {
            assert_eq!((r.failed, r.dead_lettered), (0, 1));
            assert_eq!(r.status(), ReplayStatus::DeadLettered);
            assert_eq!(s.size().unwrap(), 0);
            let dl = s.dead_get(1).unwrap().unwrap();
            assert_eq!(dl.item.attempts, 5);
            assert_eq!(dl.item.key, "k-poison");
            assert!(dl
                .item
                .last_error
                .unwrap()
                .contains("gave up after 5 attempts"));
            assert_eq!(dl.dead_at, manual.now_ts());
        }
        manual.advance(Duration::from_secs(3600));
    }
    let attempts: Vec<u32> = target.deliveries().iter().map(|d| d.1).collect();
    assert_eq!(attempts, vec![1, 2, 3, 4, 5]);
}

trait NowTs {
    fn now_ts(&self) -> Timestamp;
}
impl NowTs for ManualClock {
    fn now_ts(&self) -> Timestamp {
        use spool::Clock;
        self.now()
    }
}

#[test]
fn backoff_schedule_and_not_due_skipping() {
    let (manual, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    s.enqueue(b"x", "").unwrap();
    let target = Scripted::new(fail);
    let w = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .with_random(|| 0.0);
    let start = manual.now_ts();
    // Jitter 0 picks the lower half-bound: 0.5s, 1s, 2s.
    let mut expected_wait = Duration::from_millis(500);
    for _ in 0..3 {
        let r = w.run().unwrap();
        assert_eq!(r.failed, 1);
        let next = s.get(1).unwrap().unwrap().next_retry_at.unwrap();
        assert_eq!(next, manual.now_ts().saturating_add(expected_wait));
        // Not due yet: skipped, nothing delivered.
        let r = w.run().unwrap();
        assert_eq!((r.not_due, r.failed, r.delivered), (1, 0, 0));
        assert_eq!(r.status(), ReplayStatus::Clean);
        manual.set(next);
        expected_wait *= 2;
    }
    assert!(manual.now_ts() > start);
    assert_eq!(target.deliveries().len(), 3);
}

#[test]
fn ignore_backoff_attempts_items_that_are_not_due() {
    let (_m, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    s.enqueue(b"x", "").unwrap();
    let target = Scripted::new(fail);
    let mut o = fixed_opts();
    SyncWorker::new(&*s, &target, o.clone(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    o.ignore_backoff = true;
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(r.failed, 1);
    assert_eq!(target.deliveries().len(), 2);
}

#[test]
fn retry_after_overrides_backoff_even_beyond_the_cap() {
    let (manual, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    s.enqueue(b"x", "").unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Failed {
        reason: "HTTP 429".into(),
        retry_after: Some(RetryAfter::Delay(Duration::from_secs(3600))),
    });
    SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    let it = s.get(1).unwrap().unwrap();
    assert_eq!(
        it.next_retry_at,
        Some(manual.now_ts().saturating_add(Duration::from_secs(3600)))
    );
}

fn three_items(shared: &SharedClock) -> Spool {
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    for p in [&b"a"[..], b"fail", b"c"] {
        s.enqueue(p, "").unwrap();
    }
    s
}

fn fail_on_fail(p: &[u8], _: u32) -> Outcome {
    if p == b"fail" {
        Outcome::failed("no")
    } else {
        Outcome::Delivered(spool::Evidence::Exit(0))
    }
}

#[test]
fn unordered_replay_has_no_head_of_line_blocking() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    let target = Scripted::new(fail_on_fail);
    let r = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.delivered, r.failed), (2, 1));
    assert_eq!(
        s.drain().unwrap().iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(r.stopped, None);
}

#[test]
fn ordered_replay_stops_at_the_first_failure_but_not_at_a_reject() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    let target = Scripted::new(fail_on_fail);
    let mut o = fixed_opts();
    o.ordered = true;
    let r = SyncWorker::new(&*s, &target, o.clone(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.delivered, r.failed), (1, 1));
    assert_eq!(r.stopped, Some(StopReason::OrderedFailure));
    assert!(r.left_due);
    assert_eq!(s.size().unwrap(), 2, "item 3 must not overtake item 2");

    let s = three_items(&shared);
    let target = Scripted::new(|p: &[u8], _| {
        if p == b"fail" {
            Outcome::Rejected {
                reason: "bad".into(),
            }
        } else {
            Outcome::Delivered(spool::Evidence::Exit(0))
        }
    });
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.delivered, r.dead_lettered, r.rejected), (2, 1, 1));
    assert_eq!(r.stopped, None);
}

#[test]
fn reject_dead_letters_at_once_without_retry() {
    let (_m, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    s.enqueue(b"x", "key-x").unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Rejected {
        reason: "HTTP 400 Bad Request".into(),
    });
    let r = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.dead_lettered, r.rejected), (1, 1));
    let dl = s.dead_get(1).unwrap().unwrap();
    assert_eq!(dl.item.attempts, 1);
    assert_eq!(dl.item.last_error.as_deref(), Some("HTTP 400 Bad Request"));
    assert_eq!(target.deliveries().len(), 1);
}

#[test]
fn stop_before_run_returns_at_once_and_resets() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let w = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone()).unwrap();
    w.stop();
    let r = w.run().unwrap();
    assert_eq!(r.stopped, Some(StopReason::Stopped));
    assert_eq!(target.deliveries().len(), 0);
    let r = w.run().unwrap();
    assert_eq!(r.delivered, 3, "the flag is one-shot");
}

/// A target that asks the worker to stop while delivering item 2.
struct StopsMidway {
    stop: spool::replay::StopHandle,
    seen: Mutex<Vec<u64>>,
}

impl Target for StopsMidway {
    fn deliver(&self, d: &Delivery<'_>) -> Result<Outcome, String> {
        self.seen.lock().unwrap().push(d.item.id);
        if d.item.id == 2 {
            self.stop.stop();
        }
        Ok(Outcome::Delivered(spool::Evidence::Exit(0)))
    }
    fn describe(&self) -> String {
        "stops".into()
    }
}

#[test]
fn stop_finishes_the_item_in_flight_and_records_it() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    let stop = spool::replay::StopHandle::default();
    let target = StopsMidway {
        stop: stop.clone(),
        seen: Mutex::new(vec![]),
    };
    let w = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .with_stop_handle(stop);
    let r = w.run().unwrap();
    assert_eq!(r.delivered, 2);
    assert_eq!(r.stopped, Some(StopReason::Stopped));
    assert!(r.left_due);
    assert_eq!(r.status(), ReplayStatus::Retry);
    assert_eq!(
        s.drain().unwrap().iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![3]
    );
}

struct BrokenSink;
impl DeadLetterSink for BrokenSink {
    fn accept(&self, _: &Item, _: &str) -> Result<(), String> {
        Err("sink is down".into())
    }
}

#[derive(Default)]
struct CollectingSink(Mutex<Vec<Item>>);
impl DeadLetterSink for CollectingSink {
    fn accept(&self, item: &Item, _: &str) -> Result<(), String> {
        self.0.lock().unwrap().push(item.clone());
        Ok(())
    }
}

#[test]
fn a_failing_sink_loses_nothing() {
    let (_m, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    s.enqueue(b"x", "").unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Rejected {
        reason: "no".into(),
    });
    let sink = BrokenSink;
    struct Watch(Mutex<Vec<ItemOutcome>>);
    impl ReplayObserver for Watch {
        fn attempted(&self, _: &Item, _: u32, o: &ItemOutcome) {
            self.0.lock().unwrap().push(o.clone());
        }
    }
    let watch = Watch(Mutex::new(vec![]));
    let r = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .with_sink(&sink)
        .with_observer(&watch)
        .run()
        .unwrap();
    assert_eq!((r.failed, r.dead_lettered), (1, 0));
    assert_eq!(s.size().unwrap(), 1, "the item stays pending");
    assert_eq!(s.dead_count().unwrap(), 0);
    assert!(matches!(
        watch.0.lock().unwrap()[0],
        ItemOutcome::SinkFailed { .. }
    ));

    let good = CollectingSink::default();
    let r = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .with_sink(&good)
        .run()
        .unwrap();
    assert_eq!(r.dead_lettered, 1);
    assert_eq!(s.size().unwrap(), 0);
    assert_eq!(good.0.lock().unwrap()[0].attempts, 2);
}

#[test]
fn limit_and_deadline_leave_due_items_and_say_so() {
    let (manual, shared) = clock();
    let s = three_items(&shared);
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let mut o = fixed_opts();
    o.limit = Some(2);
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(r.delivered, 2);
    assert_eq!(r.stopped, Some(StopReason::Limit));
    assert_eq!(r.status(), ReplayStatus::Retry);

    // Each delivery takes 1s of (manual) time; a 1.5s deadline allows two.
    let s = three_items(&shared);
    let m2 = manual.clone();
    let slow = Scripted::new(move |_: &[u8], _| {
        m2.advance(Duration::from_secs(1));
        Outcome::Delivered(spool::Evidence::Exit(0))
    });
    let mut o = fixed_opts();
    o.deadline = Some(Duration::from_millis(1500));
    let r = SyncWorker::new(&*s, &slow, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(r.delivered, 2);
    assert_eq!(r.stopped, Some(StopReason::Deadline));
}

#[test]
fn dry_run_changes_nothing() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    s.set_held(&[3], true).unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let mut o = fixed_opts();
    o.dry_run = true;
    let before = s.drain().unwrap();
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.would_attempt, r.held), (2, 1));
    assert_eq!(r.status(), ReplayStatus::Clean);
    assert!(target.deliveries().is_empty());
    assert_eq!(s.drain().unwrap(), before);
}

/// A dry run reports what the real run would do with an item whose
/// attempts already reach the budget: dead-letter it without an attempt.
#[test]
fn a_dry_run_counts_items_at_their_budget_as_would_be_dead_lettered() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    s.set_attempts(2, 5).unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let mut o = fixed_opts();
    o.dry_run = true;
    o.max_attempts = 5;
    let before = s.drain().unwrap();
    let r = SyncWorker::new(&*s, &target, o.clone(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.would_attempt, r.would_dead_letter), (2, 1));
    assert_eq!(
        r.summary(true),
        "dry run: 2 would be attempted, 1 would be dead-lettered without an attempt, \
         not due 0, held 0"
    );
    assert!(target.deliveries().is_empty());
    assert_eq!(s.drain().unwrap(), before);
    o.dry_run = false;
    let real = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((real.delivered, real.dead_lettered), (2, 1));
}

#[test]
fn held_items_are_skipped() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    s.set_held(&[1], true).unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let r = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.delivered, r.held), (2, 1));
    assert_eq!(r.status(), ReplayStatus::Clean);
    assert_eq!(s.drain().unwrap()[0].id, 1);
}

#[test]
fn keys_are_the_item_key_or_a_stable_uuid_id_pair() {
    let (_m, shared) = clock();
    let dir = tempfile::tempdir().unwrap();
    let s = ndjson(&dir, &shared);
    s.enqueue(b"a", "mine").unwrap();
    s.enqueue(b"b", "").unwrap();
    let uuid = s.uuid().unwrap();
    let target = Scripted::new(fail);
    let mut o = fixed_opts();
    o.ignore_backoff = true;
    for _ in 0..2 {
        let s = ndjson(&dir, &shared);
        SyncWorker::new(&*s, &target, o.clone(), shared.clone())
            .unwrap()
            .run()
            .unwrap();
    }
    let keys: Vec<String> = target.deliveries().iter().map(|d| d.2.clone()).collect();
    let stable = format!("{uuid}:2");
    assert_eq!(
        keys,
        vec!["mine".to_string(), stable.clone(), "mine".into(), stable]
    );
}

#[test]
fn concurrent_replay_records_every_outcome() {
    let (_m, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    for i in 0..200u32 {
        s.enqueue(format!("{i}").as_bytes(), "").unwrap();
    }
    let target = Scripted::new(|p: &[u8], _| {
        let n: u32 = std::str::from_utf8(p).unwrap().parse().unwrap();
        match n % 10 {
            0 => Outcome::failed("even tens fail"),
            5 => Outcome::Rejected {
                reason: "fives".into(),
            },
            _ => Outcome::Delivered(spool::Evidence::Exit(0)),
        }
    });
    let mut o = fixed_opts();
    o.concurrency = 8;
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!((r.delivered, r.failed, r.dead_lettered), (160, 20, 20));
    assert_eq!(s.size().unwrap(), 20);
    assert_eq!(s.dead_count().unwrap(), 20);
    let mut per_item: HashMap<u64, usize> = HashMap::new();
    for d in target.deliveries() {
        *per_item.entry(d.0).or_default() += 1;
    }
    assert_eq!(per_item.len(), 200);
    assert!(per_item.values().all(|n| *n == 1));
    assert!(s.drain().unwrap().iter().all(|i| i.attempts == 1));
}

#[test]
fn ordered_with_concurrency_is_refused() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let mut o = fixed_opts();
    o.ordered = true;
    o.concurrency = 4;
    assert!(SyncWorker::new(&*s, &target, o, shared.clone()).is_err());
}

/// A target that cannot work at all (its command is missing) stops the
/// run and leaves the item untouched.
struct Broken;
impl Target for Broken {
    fn deliver(&self, _: &Delivery<'_>) -> Result<Outcome, String> {
        Err("cannot run nosuchcommand: No such file or directory".into())
    }
    fn describe(&self) -> String {
        "broken".into()
    }
}

#[test]
fn a_broken_target_touches_nothing() {
    let (_m, shared) = clock();
    let s = three_items(&shared);
    let before = s.drain().unwrap();
    let err = SyncWorker::new(&*s, &Broken, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap_err();
    assert!(err.to_string().contains("nosuchcommand"));
    assert_eq!(s.drain().unwrap(), before);
}

/// A broken target that counts how often it was called.
struct CountingBroken(AtomicUsize);
impl Target for CountingBroken {
    fn deliver(&self, _: &Delivery<'_>) -> Result<Outcome, String> {
        self.0.fetch_add(1, AtomicOrdering::SeqCst);
        Err("cannot run nosuchcommand: No such file or directory".into())
    }
    fn describe(&self) -> String {
        "broken".into()
    }
}

fn hundred_items(shared: &SharedClock) -> Spool {
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    for i in 0..100u32 {
        s.enqueue(format!("{i}").as_bytes(), "").unwrap();
    }
    s
}

/// With deliveries in flight, a target that cannot work stops every
/// thread from taking another item: each thread calls it at most once,
/// and the spool is left as it was.
#[test]
fn a_broken_target_stops_a_concurrent_run() {
    let (_m, shared) = clock();
    let s = hundred_items(&shared);
    let before = s.drain().unwrap();
    let target = CountingBroken(AtomicUsize::new(0));
    let mut o = fixed_opts();
    o.concurrency = 4;
    let err = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap_err();
    assert!(err.to_string().contains("nosuchcommand"), "{err}");
    let calls = target.0.load(AtomicOrdering::SeqCst);
    assert!((1..=4).contains(&calls), "{calls} calls");
    assert_eq!(s.drain().unwrap(), before);
}

/// A target whose first delivery asks the worker to stop. Every delivery
/// passes through one lock, which the first holds until the stop is
/// asked, so no delivery finishes before it.
struct StopsFirst {
    stop: spool::replay::StopHandle,
    seen: Mutex<Vec<u64>>,
}

impl Target for StopsFirst {
    fn deliver(&self, d: &Delivery<'_>) -> Result<Outcome, String> {
        let mut seen = self.seen.lock().unwrap();
        if seen.is_empty() {
            self.stop.stop();
        }
        seen.push(d.item.id);
        Ok(Outcome::Delivered(spool::Evidence::Exit(0)))
    }
    fn describe(&self) -> String {
        "stops first".into()
    }
}

/// A stop during a concurrent run lets the deliveries in flight finish
/// and records each of them; no thread takes another item.
#[test]
fn stop_during_a_concurrent_run_records_what_was_in_flight() {
    let (_m, shared) = clock();
    let s = hundred_items(&shared);
    let stop = spool::replay::StopHandle::default();
    let target = StopsFirst {
        stop: stop.clone(),
        seen: Mutex::new(vec![]),
    };
    let mut o = fixed_opts();
    o.concurrency = 4;
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .with_stop_handle(stop)
        .run()
        .unwrap();
    assert_eq!(r.stopped, Some(StopReason::Stopped));
    assert!(r.left_due);
    let seen = target.seen.lock().unwrap().clone();
    assert!((1..=4).contains(&seen.len()), "{seen:?}");
    assert_eq!(r.delivered, seen.len() as u64, "every delivery recorded");
    let left: Vec<u64> = s.drain().unwrap().iter().map(|i| i.id).collect();
    assert_eq!(left.len(), 100 - seen.len());
    assert!(seen.iter().all(|id| !left.contains(id)));
}

/// A target that records, at each delivery, how many items the spool
/// still holds (so the test sees when done records were committed).
struct SizeProbe<'a> {
    queue: &'a dyn spool::Queue,
    sizes: Mutex<Vec<u64>>,
}

impl Target for SizeProbe<'_> {
    fn deliver(&self, _: &Delivery<'_>) -> Result<Outcome, String> {
        self.sizes.lock().unwrap().push(self.queue.size().unwrap());
        Ok(Outcome::Delivered(spool::Evidence::Exit(0)))
    }
    fn describe(&self) -> String {
        "size probe".into()
    }
}

#[test]
fn group_commit_marks_done_in_groups_and_flushes_at_the_end() {
    let (_m, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    for i in 0..25u32 {
        s.enqueue(format!("{i}").as_bytes(), "").unwrap();
    }
    let target = SizeProbe {
        queue: &*s,
        sizes: Mutex::new(vec![]),
    };
    let mut o = fixed_opts();
    o.commit_every = 10;
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(r.delivered, 25);
    assert_eq!(s.size().unwrap(), 0, "the last partial group is committed");
    let sizes = target.sizes.lock().unwrap().clone();
    // Items 1-10 see 25 pending, 11-20 see 15, 21-25 see 5.
    let want: Vec<u64> = (0..25).map(|k| 25 - (k / 10) * 10).collect();
    assert_eq!(sizes, want);
}

#[test]
fn group_commit_flushes_a_group_that_waited_too_long() {
    let (manual, shared) = clock();
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    for _ in 0..4 {
        s.enqueue(b"x", "").unwrap();
    }
    let q: &dyn spool::Queue = &*s;
    let m2 = manual.clone();
    let sizes = Mutex::new(Vec::new());
    let target = Scripted::new(|_: &[u8], _| {
        sizes.lock().unwrap().push(q.size().unwrap());
        m2.advance(Duration::from_millis(300));
        Outcome::Delivered(spool::Evidence::Exit(0))
    });
    let mut o = fixed_opts();
    o.commit_every = 100;
    SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    // Deliveries are recorded at t=300, 600, 900 and 1200ms. The group
    // started at 300ms is 600ms old when the third one is recorded and is
    // committed then; the fourth is committed at the end of the run.
    assert_eq!(sizes.into_inner().unwrap(), vec![4, 4, 4, 1]);
    assert_eq!(s.size().unwrap(), 0);
}

/// What a progress observer is told at the start of each run, and how
/// many items it then saw attempted.
#[derive(Default)]
struct Totals {
    wants: bool,
    started: Mutex<Vec<Option<u64>>>,
    attempted: AtomicUsize,
}

impl ReplayObserver for Totals {
    fn wants_total(&self) -> bool {
        self.wants
    }
    fn started(&self, total: Option<u64>) {
        self.started.lock().unwrap().push(total);
    }
    fn attempted(&self, _: &Item, _: u32, _: &ItemOutcome) {
        self.attempted.fetch_add(1, AtomicOrdering::SeqCst);
    }
}

/// A progress bar's total is what the run will attempt: the due items
/// (not held, not backed off unless --ignore-backoff), at most --limit;
/// not every pending item.
#[test]
fn the_progress_total_is_the_due_items_capped_by_the_limit() {
    for name in ["memory", "q.ndjson", "q.db"] {
        let dir = tempfile::tempdir().unwrap();
        let (_m, shared) = clock();
        let mut o = OpenOptions::new(OpenMode::Create);
        o.clock = shared.clone();
        let s = if name == "memory" {
            Spool::memory(&o)
        } else {
            Spool::open(&dir.path().join(name), &o).unwrap()
        };
        for i in 1..=10 {
            s.enqueue(format!("p{i}").as_bytes(), "").unwrap();
        }
        // 1 held, 2 held and backed off, 3 and 4 backed off, 5 was tried
        // and is due again; 6 to 10 were never tried.
        let later = |secs| spool::AttemptUpdate {
            attempts: 1,
            next_retry_at: Some(shared.now().saturating_add(Duration::from_secs(secs))),
            last_error: Some("boom".into()),
        };
        s.set_held(&[1, 2], true).unwrap();
        for id in [2, 3, 4] {
            s.record_attempt(id, &later(60)).unwrap();
        }
        s.record_attempt(5, &later(0)).unwrap();
        let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
        let run = |limit: Option<u64>, ignore_backoff: bool, dry_run: bool, wants: bool| {
            let observer = Totals {
                wants,
                ..Totals::default()
            };
            let mut opts = fixed_opts();
            opts.limit = limit;
            opts.ignore_backoff = ignore_backoff;
            opts.dry_run = dry_run;
            SyncWorker::new(&*s, &target, opts, shared.clone())
                .unwrap()
                .with_observer(&observer)
                .run()
                .unwrap();
            let started = observer.started.lock().unwrap().clone();
            assert_eq!(started.len(), 1, "{name}: started once");
            (started[0], observer.attempted.load(AtomicOrdering::SeqCst))
        };
        for (limit, ignore_backoff, want) in [
            (None, false, 6),
            (Some(4), false, 4),
            (Some(6), false, 6),
            (Some(100), false, 6),
            (None, true, 8),
            (Some(5), true, 5),
            (Some(0), false, 0),
        ] {
            let (total, attempted) = run(limit, ignore_backoff, true, true);
            assert_eq!(
                total,
                Some(want),
                "{name}: limit {limit:?}, ignore backoff {ignore_backoff}"
            );
            assert_eq!(attempted, want as usize, "{name}: the total is what ran");
        }
        // An observer that does not ask gets no count.
        assert_eq!(run(Some(4), false, true, false), (None, 4));
        // Real runs: --limit 4 of 6 due, then the 2 left.
        assert_eq!(run(Some(4), false, false, true), (Some(4), 4));
        assert_eq!(run(Some(4), false, false, true), (Some(2), 2));
        assert_eq!(run(None, false, false, true), (Some(0), 0));
        assert_eq!(
            s.size().unwrap(),
            4,
            "{name}: held and backed-off items stay"
        );
    }
}

// ------------------------------------------------------ ordering groups

/// A memory spool of `(payload, group)` items.
fn grouped(shared: &SharedClock, items: &[(&str, Option<&str>)]) -> Spool {
    let s = Spool::memory(&OpenOptions {
        clock: shared.clone(),
        ..OpenOptions::default()
    });
    for (p, g) in items {
        let mut n = spool::NewItem::new(p.as_bytes(), "");
        n.group = g.map(str::to_string);
        s.enqueue_batch(&[n], &spool::EnqueueOptions::default())
            .unwrap();
    }
    s
}

fn payloads(target: &[Seen]) -> Vec<String> {
    target
        .iter()
        .map(|d| String::from_utf8(d.3.clone()).unwrap())
        .collect()
}

/// Per-group FIFO: an item waits while an earlier item of its group is
/// pending (a failure blocks the rest of its group and nothing else);
/// items of other groups and without a group go on; a dead letter stops
/// blocking; a delivered head lets the next item go in the same run.
#[test]
fn a_group_delivers_in_order_and_a_failure_blocks_only_its_group() {
    let (manual, shared) = clock();
    let s = grouped(
        &shared,
        &[
            ("a1", Some("a")),
            ("b1", Some("b")),
            ("a2", Some("a")),
            ("x", None),
            ("b2", Some("b")),
            ("a3", Some("a")),
        ],
    );
    // b1 fails twice, then is rejected.
    let target = Scripted::new(|p: &[u8], attempt: u32| match (p, attempt) {
        (b"b1", 1) => Outcome::failed("busy"),
        (b"b1", _) => Outcome::Rejected {
            reason: "no".into(),
        },
        _ => Outcome::Delivered(spool::Evidence::Exit(0)),
    });
    let run = |ignore_backoff| {
        let mut o = fixed_opts();
        o.ignore_backoff = ignore_backoff;
        SyncWorker::new(&*s, &target, o, shared.clone())
            .unwrap()
            .run()
            .unwrap()
    };
    let r = run(false);
    // a1 has left when the walk meets a2: a2 leads at once.
    assert_eq!(
        payloads(&target.deliveries()),
        ["a1", "b1", "a2", "x", "a3"]
    );
    assert_eq!((r.delivered, r.failed, r.group_waiting), (4, 1, 1));
    assert!(
        r.summary(false).contains("waiting behind their group 1"),
        "{}",
        r.summary(false)
    );
    // b2 still waits behind b1, which is not due yet.
    let r = run(false);
    assert_eq!((r.delivered, r.not_due, r.group_waiting), (0, 1, 1));
    manual.advance(Duration::from_secs(3600));
    let r = run(false);
    assert_eq!((r.dead_lettered, r.delivered, r.group_waiting), (1, 1, 0));
    assert_eq!(
        payloads(&target.deliveries()),
        ["a1", "b1", "a2", "x", "a3", "b1", "b2"]
    );
    assert_eq!(s.size().unwrap(), 0);
}

/// A held head blocks its group (it is pending); releasing it lets the
/// group go on in order.
#[test]
fn a_held_item_blocks_its_group() {
    let (_m, shared) = clock();
    let s = grouped(
        &shared,
        &[("g1", Some("g")), ("g2", Some("g")), ("h1", Some("h"))],
    );
    s.set_held(&[1], true).unwrap();
    let target = Scripted::new(|_: &[u8], _| Outcome::Delivered(spool::Evidence::Exit(0)));
    let r = SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(payloads(&target.deliveries()), ["h1"]);
    assert_eq!((r.held, r.group_waiting), (1, 1));
    s.set_held(&[1], false).unwrap();
    SyncWorker::new(&*s, &target, fixed_opts(), shared.clone())
        .unwrap()
        .run()
        .unwrap();
    assert_eq!(payloads(&target.deliveries()), ["h1", "g1", "g2"]);
}

/// Under `--concurrency`, the next item of a group is handed to a worker
/// as soon as the head leaves; a held or failing item stops the hand-on,
/// and what waits behind it is counted.
#[test]
fn concurrent_hand_on_stops_at_a_held_or_failed_item() {
    let (_m, shared) = clock();
    let s = grouped(
        &shared,
        &[
            ("a1", Some("a")),
            ("b1", Some("b")),
            ("a2", Some("a")),
            ("b2", Some("b")),
            ("a3", Some("a")),
            ("c1", Some("c")),
            ("c2", Some("c")),
            ("c3", Some("c")),
        ],
    );
    s.set_held(&[3], true).unwrap();
    let target = Scripted::new(|p: &[u8], _| match p {
        b"b1" => Outcome::failed("busy"),
        _ => Outcome::Delivered(spool::Evidence::Exit(0)),
    });
    let mut o = fixed_opts();
    o.concurrency = 4;
    let r = SyncWorker::new(&*s, &target, o, shared.clone())
        .unwrap()
        .run()
        .unwrap();
    let mut got = payloads(&target.deliveries());
    got.sort();
    assert_eq!(got, ["a1", "b1", "c1", "c2", "c3"]);
    let c: Vec<String> = payloads(&target.deliveries())
        .into_iter()
        .filter(|p| p.starts_with('c'))
        .collect();
    assert_eq!(c, ["c1", "c2", "c3"]);
    assert_eq!(
        (r.delivered, r.failed, r.held, r.group_waiting),
        (4, 1, 1, 2),
        "a3 waits behind held a2, b2 behind failed b1"
    );
    let left: Vec<u64> = s.drain().unwrap().iter().map(|i| i.id).collect();
    assert_eq!(left, [2, 3, 4, 5]);
}

/// With `--concurrency`, two items of one group are never in flight at
/// once, groups run side by side, and each group keeps its order; with
/// group commits of done items too.
#[test]
fn concurrent_replay_keeps_one_item_per_group_in_flight() {
    struct Tracking {
        in_flight: Mutex<HashMap<String, usize>>,
        order: Mutex<Vec<String>>,
        max_total: AtomicUsize,
        now: AtomicUsize,
    }
    impl Target for Tracking {
        fn deliver(&self, d: &Delivery<'_>) -> Result<Outcome, String> {
            let g = d.item.group.clone().unwrap_or_default();
            {
                let mut m = self.in_flight.lock().unwrap();
                let n = m.entry(g.clone()).or_default();
                *n += 1;
                assert_eq!(*n, 1, "two items of group {g} in flight");
            }
            let now = self.now.fetch_add(1, AtomicOrdering::SeqCst) + 1;
            self.max_total.fetch_max(now, AtomicOrdering::SeqCst);
            std::thread::sleep(Duration::from_millis(2));
            self.now.fetch_sub(1, AtomicOrdering::SeqCst);
            self.order
                .lock()
                .unwrap()
                .push(String::from_utf8(d.item.payload.clone()).unwrap());
            *self.in_flight.lock().unwrap().get_mut(&g).unwrap() -= 1;
            Ok(Outcome::Delivered(spool::Evidence::Exit(0)))
        }
        fn describe(&self) -> String {
            "tracking".into()
        }
    }
    let (_m, shared) = clock();
    let mut items = Vec::new();
    let names: Vec<String> = (0..40).map(|i| format!("g{}-{}", i % 8, i / 8)).collect();
    let groups: Vec<String> = (0..40).map(|i| format!("g{}", i % 8)).collect();
    for i in 0..40 {
        items.push((names[i].as_str(), Some(groups[i].as_str())));
    }
    let s = grouped(&shared, &items);
    for commit_every in [1, 16] {
        let t = Tracking {
            in_flight: Mutex::new(HashMap::new()),
            order: Mutex::new(Vec::new()),
            max_total: AtomicUsize::new(0),
            now: AtomicUsize::new(0),
        };
        let mut o = fixed_opts();
        o.concurrency = 8;
        o.commit_every = commit_every;
        let r = SyncWorker::new(&*s, &t, o, shared.clone())
            .unwrap()
            .run()
            .unwrap();
        assert_eq!(r.group_waiting, 0, "every item was handed on or swept");
        if commit_every == 1 {
            assert_eq!(r.delivered, 40);
            let order = t.order.lock().unwrap().clone();
            for g in 0..8 {
                let mine: Vec<&String> = order
                    .iter()
                    .filter(|p| p.starts_with(&format!("g{g}-")))
                    .collect();
                let want: Vec<String> = (0..5).map(|k| format!("g{g}-{k}")).collect();
                assert_eq!(mine, want.iter().collect::<Vec<_>>(), "group g{g}");
            }
            assert!(
                t.max_total.load(AtomicOrdering::SeqCst) > 1,
                "groups ran side by side"
            );
            assert_eq!(s.size().unwrap(), 0);
            for (i, it) in items.iter().enumerate() {
                let mut n = spool::NewItem::new(it.0.as_bytes(), "");
                n.group = Some(groups[i].clone());
                s.enqueue_batch(&[n], &spool::EnqueueOptions::default())
                    .unwrap();
            }
        } else {
            assert_eq!(r.delivered, 40, "no item delivered twice, none left");
            assert_eq!(t.order.lock().unwrap().len(), 40);
            assert_eq!(s.size().unwrap(), 0);
        }
    }
}

/// SPEC §4: an item whose attempts already reach the budget is
/// dead-lettered without another delivery — sequentially and with
/// `--concurrency` — the reason saying so and keeping the last error; the
/// run's status is "dead-lettered".
#[test]
fn an_item_at_its_budget_is_dead_lettered_without_a_delivery() {
    for concurrency in [1, 3] {
        let (_m, shared) = clock();
        let s = Spool::memory(&OpenOptions {
            clock: shared.clone(),
            ..OpenOptions::default()
        });
        let tried = s.enqueue(b"tried", "").unwrap().id;
        let set = s.enqueue(b"set", "").unwrap().id;
        let fresh = s.enqueue(b"fresh", "").unwrap().id;
        s.record_attempt(
            tried,
            &spool::AttemptUpdate {
                attempts: 2,
                next_retry_at: None,
                last_error: Some("HTTP 503: busy".into()),
            },
        )
        .unwrap();
        s.set_attempts(set, 5).unwrap();
        let target = Scripted::new(fail);
        let opts = ReplayOptions {
            max_attempts: 2,
            concurrency,
            ..fixed_opts()
        };
        let r = SyncWorker::new(&*s, &target, opts, shared.clone())
            .unwrap()
            .run()
            .unwrap();
        assert_eq!((r.dead_lettered, r.failed), (2, 1), "{concurrency}");
        assert_eq!(r.status(), ReplayStatus::DeadLettered);
        let delivered: Vec<u64> = target.deliveries().iter().map(|d| d.0).collect();
        assert_eq!(delivered, [fresh], "only the item under its budget");
        let dead = |id| s.dead_get(id).unwrap().unwrap().item;
        assert_eq!(dead(tried).attempts, 2);
        assert_eq!(
            dead(tried).last_error.as_deref(),
            Some(
                "attempts (2) already reach --max-attempts 2; dead-lettered without another \
                 attempt (last error: HTTP 503: busy)"
            )
        );
        assert_eq!(dead(set).attempts, 5);
        assert_eq!(
            dead(set).last_error.as_deref(),
            Some("attempts (5) already reach --max-attempts 2; dead-lettered without another attempt")
        );
        assert_eq!(s.get(fresh).unwrap().unwrap().attempts, 1);
    }
}

/// The progress total leaves out the items that wait behind their
/// ordering group (here behind a held head and behind a due one): it is
/// what the run attempts, on every local backend.
#[test]
fn the_progress_total_leaves_out_items_waiting_behind_their_group() {
    for name in ["memory", "q.ndjson", "q.db"] {
        let dir = tempfile::tempdir().unwrap();
        let (_m, shared) = clock();
        let mut o = OpenOptions::new(OpenMode::Create);
        o.clock = shared.clone();
        let s = if name == "memory" {
            Spool::memory(&o)
        } else {
            Spool::open(&dir.path().join(name), &o).unwrap()
        };
        for (p, g) in [
            ("a1", Some("a")),
            ("a2", Some("a")),
            ("b1", Some("b")),
            ("b2", Some("b")),
            ("p", None),
        ] {
            let mut n = spool::NewItem::new(p.as_bytes(), "");
            n.group = g.map(str::to_string);
            s.enqueue_batch(&[n], &spool::EnqueueOptions::default())
                .unwrap();
        }
        s.set_held(&[1], true).unwrap();
        let target = Scripted::new(fail);
        let observer = Totals {
            wants: true,
            ..Totals::default()
        };
        let opts = ReplayOptions {
            dry_run: true,
            ..fixed_opts()
        };
        SyncWorker::new(&*s, &target, opts, shared.clone())
            .unwrap()
            .with_observer(&observer)
            .run()
            .unwrap();
        assert_eq!(*observer.started.lock().unwrap(), [Some(2)], "{name}");
        assert_eq!(observer.attempted.load(AtomicOrdering::SeqCst), 2, "{name}");
    }
}

/// Checks, at the moment each event is told, that the spool already
/// holds what the event says (its commit came first).
struct CommittedFirst<'a> {
    spool: &'a Spool,
    told: Mutex<Vec<(String, u64, u32)>>,
}

impl ReplayObserver for CommittedFirst<'_> {
    fn recorded(&self, e: &spool::replay::events::Event) {
        let pending = self.spool.get(e.id).unwrap();
        let dead = self.spool.dead_get(e.id).unwrap();
        match e.kind.name() {
            "delivered" => assert!(pending.is_none() && dead.is_none(), "{e:?}"),
            "failed" => {
                let p = pending.unwrap_or_else(|| panic!("{e:?}: not pending"));
                assert_eq!(p.attempts, e.attempt, "{e:?}");
                assert_eq!(p.next_retry_at, e.next_retry_at, "{e:?}");
                assert_eq!(p.last_error, e.error, "{e:?}");
            }
            "dead_lettered" => {
                let d = dead.unwrap_or_else(|| panic!("{e:?}: not dead"));
                assert_eq!(d.item.last_error, e.error, "{e:?}");
            }
            other => panic!("unexpected {other}"),
        }
        self.told
            .lock()
            .unwrap()
            .push((e.kind.name().to_string(), e.id, e.attempt));
    }
}

#[test]
fn every_event_is_told_after_the_commit_that_recorded_it() {
    for (commit_every, concurrency) in [(1, 1), (3, 1), (4, 4), (1, 3)] {
        let dir = tempfile::tempdir().unwrap();
        let (_, shared) = clock();
        let s = ndjson(&dir, &shared);
        let mut kinds = HashMap::new();
        for i in 0..12u32 {
            let p = ["ok", "busy", "bad"][(i % 3) as usize];
            kinds.insert(s.enqueue(p.as_bytes(), "").unwrap().id, p);
        }
        // An item at its budget: dead-lettered without an attempt.
        let spent = s.enqueue(b"busy", "").unwrap().id;
        s.set_attempts(spent, 5).unwrap();
        let target = Scripted::new(|p: &[u8], _| match p {
            b"ok" => Outcome::Delivered(spool::Evidence::Http(200)),
            b"busy" => Outcome::failed("HTTP 503 Service Unavailable"),
            _ => Outcome::Rejected {
                reason: "HTTP 400 Bad Request".into(),
            },
        });
        let obs = CommittedFirst {
            spool: &s,
            told: Mutex::new(Vec::new()),
        };
        let opts = ReplayOptions {
            commit_every,
            concurrency,
            ..fixed_opts()
        };
        let r = SyncWorker::new(&*s, &target, opts, shared.clone())
            .unwrap()
            .with_observer(&obs)
            .run()
            .unwrap();
        let told = obs.told.into_inner().unwrap();
        assert_eq!(told.len(), 13, "{told:?}");
        assert_eq!((r.delivered, r.failed, r.dead_lettered), (4, 4, 5));
        for (kind, id, attempt) in told {
            let want = match kinds.get(&id) {
                Some(&"ok") => ("delivered", 1),
                Some(&"busy") => ("failed", 1),
                Some(_) => ("dead_lettered", 1),
                None => ("dead_lettered", 5),
            };
            assert_eq!((kind.as_str(), attempt), want, "item {id}");
        }
    }
}
