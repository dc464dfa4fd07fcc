//! The push sender (`replay --push`) over real spools, against an
//! in-process receiver (`push::apply_push` over a `MemoryReceiver`) that
//! a script can make fail, and an injected clock: backoff is measured in
//! the clock's recorded sleeps, never waited for.

use spool::push::wire::{self, PushRequest};
use spool::push::{apply_push, MemoryReceiver, ReceiveLimits, StopCause};
use spool::replay::push::{
    PushAnswer, PushEvent, PushHalt, PushOptions, PushReport, PushSender, PushStatus, PushTransport,
};
use spool::replay::{Backoff, ItemOutcome, ReplayObserver, RetryAfter, StopHandle};
use spool::{Item, ManualClock, OpenMode, OpenOptions, Queue, SharedClock, Spool, Timestamp};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the receiver does with one request.
#[derive(Clone, Debug)]
enum Fault {
    /// Apply and answer.
    Normal,
    /// Apply, then lose the answer (the sender sees a dropped connection).
    LoseAnswer,
    /// Lose the request (nothing applied).
    Drop,
    /// Answer this status and body without applying.
    Status(u16, &'static str, Option<RetryAfter>),
    /// Apply and claim `last_seq` this much higher.
    OverAck(u64),
}

struct Receiver {
    rx: Mutex<MemoryReceiver>,
    limits: ReceiveLimits,
    /// Faults for the next requests, in order; then `Normal`.
    script: Mutex<VecDeque<Fault>>,
    /// Refuse (413) any request of more than this many entries.
    max_entries: Option<usize>,
    /// Every request as parsed.
    log: Mutex<Vec<PushRequest>>,
    /// Every body size.
    sizes: Mutex<Vec<usize>>,
    /// Stop this handle while the n-th request (0-based) is in flight.
    stop_at: Mutex<Option<(usize, StopHandle)>>,
}

impl Receiver {
    fn new() -> Receiver {
        Receiver {
            rx: Mutex::new(MemoryReceiver::new(None)),
            limits: ReceiveLimits::default(),
            script: Mutex::new(VecDeque::new()),
            max_entries: None,
            log: Mutex::new(Vec::new()),
            sizes: Mutex::new(Vec::new()),
            stop_at: Mutex::new(None),
        }
    }

    fn script(self, faults: impl IntoIterator<Item = Fault>) -> Receiver {
        self.script.lock().unwrap().extend(faults);
        self
    }

    fn requests(&self) -> Vec<PushRequest> {
        self.log.lock().unwrap().clone()
    }

    /// The sequence numbers of every request, as ranges.
    fn seqs(&self) -> Vec<Vec<u64>> {
        self.requests()
            .iter()
            .map(|r| r.entries.iter().map(|e| e.seq()).collect())
            .collect()
    }

    /// The payloads the receiving spool holds, in order.
    fn payloads(&self) -> Vec<String> {
        self.rx
            .lock()
            .unwrap()
            .pending()
            .iter()
            .map(|(_, it)| String::from_utf8_lossy(&it.payload).into_owned())
            .collect()
    }

    fn apply(&self, req: &PushRequest) -> (u16, Vec<u8>) {
        let out = apply_push(&mut *self.rx.lock().unwrap(), req, &self.limits).unwrap();
        (out.status(), out.body())
    }
}

impl PushTransport for Receiver {
    fn send(&self, body: &[u8]) -> PushAnswer {
        let req = wire::parse_request(body).expect("the sender writes valid requests");
        let n = {
            let mut log = self.log.lock().unwrap();
            log.push(req.clone());
            log.len() - 1
        };
        self.sizes.lock().unwrap().push(body.len());
        if let Some((at, stop)) = &*self.stop_at.lock().unwrap() {
            if *at == n {
                stop.stop();
            }
        }
        if self.max_entries.is_some_and(|m| req.entries.len() > m) {
            return PushAnswer::Http {
                status: 413,
                body: br#"{"error":"body too large"}"#.to_vec(),
                retry_after: None,
            };
        }
        let fault = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fault::Normal);
        match fault {
            Fault::Normal => {
                let (status, body) = self.apply(&req);
                PushAnswer::Http {
                    status,
                    body,
                    retry_after: None,
                }
            }
            Fault::LoseAnswer => {
                self.apply(&req);
                PushAnswer::Failed("connection error: ConnectionReset".into())
            }
            Fault::Drop => PushAnswer::Failed("connection error: ConnectionReset".into()),
            Fault::Status(status, body, retry_after) => PushAnswer::Http {
                status,
                body: body.as_bytes().to_vec(),
                retry_after,
            },
            Fault::OverAck(extra) => {
                let (status, body) = self.apply(&req);
                let mut resp = wire::parse_response(&body).unwrap();
                resp.last_seq += extra;
                PushAnswer::Http {
                    status,
                    body: resp.to_json(),
                    retry_after: None,
                }
            }
        }
    }

    fn describe(&self) -> String {
        "in-process receiver".into()
    }
}

/// Records what the sender reports.
#[derive(Default)]
struct Log {
    settled: Mutex<Vec<(u64, String)>>,
    events: Mutex<Vec<String>>,
}

impl ReplayObserver for Log {
    fn attempted(&self, item: &Item, _attempt: u32, outcome: &ItemOutcome) {
        let what = match outcome {
            ItemOutcome::Delivered => "delivered".to_string(),
            ItemOutcome::DeadLettered { error, .. } => format!("dead: {error}"),
            other => format!("{other:?}"),
        };
        self.settled.lock().unwrap().push((item.id, what));
    }
    fn push_event(&self, e: &PushEvent<'_>) {
        let text = match e {
            PushEvent::WouldSend {
                seq,
                item,
                in_flight,
            } => format!(
                "would {} {seq} {:?}",
                if *in_flight { "resend" } else { "send" },
                item.map(|i| i.id)
            ),
            other => format!("{other:?}"),
        };
        self.events.lock().unwrap().push(text);
    }
}

impl Log {
    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
}

fn clock() -> (ManualClock, SharedClock) {
    let c = ManualClock::new(Timestamp::from_secs(1_800_000_000));
    (c.clone(), Arc::new(c))
}

fn opts() -> PushOptions {
    PushOptions {
        backoff: Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        },
        // One request at a time, so that a script's faults meet the
        // requests in a known order; the pipelined tests say otherwise.
        pipeline: 1,
        ..PushOptions::default()
    }
}

/// A memory spool with `n` items `p1`, `p2`, ….
fn spool_with(n: usize, clock: &SharedClock) -> Spool {
    let s = Spool::memory(&OpenOptions {
        clock: clock.clone(),
        ..OpenOptions::default()
    });
    for i in 1..=n {
        s.enqueue(format!("p{i}").as_bytes(), "").unwrap();
    }
    s
}

/// A spool file (`q.db`, `q.ndjson`) in `dir` with `n` items `p1`, `p2`, ….
fn file_spool_with(dir: &std::path::Path, backend: &str, n: usize, clock: &SharedClock) -> Spool {
    let mut o = OpenOptions::new(OpenMode::Create);
    o.clock = clock.clone();
    let s = Spool::open(&dir.join(backend), &o).unwrap();
    for i in 1..=n {
        s.enqueue(format!("p{i}").as_bytes(), "").unwrap();
    }
    s
}

fn run(
    q: &dyn Queue,
    rx: &dyn PushTransport,
    o: PushOptions,
    clock: &SharedClock,
    log: &Log,
) -> PushReport {
    PushSender::new(q, rx, o, clock.clone())
        .unwrap()
        .with_observer(log)
        .with_random(|| 0.0)
        .run()
        .unwrap()
}

fn numbers(n: u64) -> Vec<String> {
    (1..=n).map(|i| format!("p{i}")).collect()
}

#[test]
fn every_item_arrives_once_in_batches_with_contiguous_numbers() {
    for backend in ["q.db", "q.ndjson"] {
        let dir = tempfile::tempdir().unwrap();
        let (_, c) = clock();
        let s = file_spool_with(dir.path(), backend, 23, &c);
        let rx = Receiver::new();
        let log = Log::default();
        let r = run(&*s, &rx, PushOptions { batch: 5, ..opts() }, &c, &log);
        assert_eq!(r.status(), PushStatus::Clean, "{backend}: {r:?}");
        assert_eq!((r.requests, r.delivered, r.acknowledged), (5, 23, 23));
        assert_eq!((r.in_flight, r.watermark, r.sent), (0, 23, 23));
        let seqs = rx.seqs();
        assert_eq!(seqs[0], vec![1, 2, 3, 4, 5]);
        assert_eq!(seqs[4], vec![21, 22, 23]);
        assert_eq!(rx.payloads(), numbers(23), "{backend}");
        assert_eq!(s.size().unwrap(), 0);
        assert_eq!(log.settled.lock().unwrap().len(), 23);
        // The client id is the spool's uuid; acked follows the watermark.
        let reqs = rx.requests();
        assert!(reqs.iter().all(|q| q.client_id == s.uuid().unwrap()));
        let acked: Vec<u64> = reqs.iter().map(|q| q.acked).collect();
        assert_eq!(acked, [0, 5, 10, 15, 20]);
        // A second run has nothing to send.
        let r = run(&*s, &rx, opts(), &c, &log);
        assert_eq!((r.requests, r.status()), (0, PushStatus::Clean));
    }
}

#[test]
fn a_lost_answer_is_resent_with_the_same_numbers_and_counted_as_duplicates() {
    let (clk, c) = clock();
    let s = spool_with(4, &c);
    let rx = Receiver::new().script([Fault::LoseAnswer, Fault::Drop]);
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean, "{r:?}");
    assert_eq!((r.requests, r.failed_requests), (3, 2));
    assert_eq!(
        r.duplicates, 4,
        "the third request repeats what was applied"
    );
    assert_eq!(rx.seqs(), vec![vec![1, 2, 3, 4]; 3]);
    assert_eq!(rx.payloads(), numbers(4), "applied exactly once");
    // Backoff on the injected clock: 0.5s then 1s (jitter 0 takes the
    // lower half of 1s, 2s), slept in slices.
    let slept: Duration = clk.sleeps().iter().sum();
    assert_eq!(slept, Duration::from_millis(1500));
}

#[test]
fn failed_requests_count_an_attempt_on_every_item_and_end_at_the_budget() {
    let (clk, c) = clock();
    let s = spool_with(3, &c);
    let rx = Receiver::new().script(vec![Fault::Status(503, r#"{"error":"busy"}"#, None); 10]);
    let log = Log::default();
    let r = run(
        &*s,
        &rx,
        PushOptions {
            max_attempts: 3,
            ..opts()
        },
        &c,
        &log,
    );
    assert_eq!(r.status(), PushStatus::Retry);
    assert_eq!(r.halt, Some(PushHalt::Budget));
    assert_eq!((r.requests, r.failed_requests, r.in_flight), (3, 3, 3));
    assert_eq!(r.dead_lettered(), 0);
    assert!(r.left_due);
    for it in s.drain().unwrap() {
        assert_eq!(it.attempts, 3, "{it:?}");
        assert!(it.in_flight());
        assert_eq!(
            it.next_retry_at, None,
            "the stream's head is resent next run"
        );
        assert!(
            it.last_error.as_deref().unwrap().contains("HTTP 503: busy"),
            "{:?}",
            it.last_error
        );
    }
    assert_eq!(s.dead_count().unwrap(), 0);
    // Two waits (0.5s, 1s): none after the last failure.
    assert_eq!(
        clk.sleeps().iter().sum::<Duration>(),
        Duration::from_millis(1500)
    );
    // A later run starts a fresh budget and resends the same numbers.
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Retry, "7 more 503s, budget 5");
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean, "{r:?}");
    assert!(rx.seqs().iter().all(|s| s == &[1, 2, 3]));
    assert_eq!(rx.payloads(), numbers(3));
}

#[test]
fn retry_after_is_honoured_and_one_beyond_the_cap_ends_the_run() {
    let (clk, c) = clock();
    let s = spool_with(1, &c);
    let ra = Some(RetryAfter::Delay(Duration::from_secs(7)));
    let rx = Receiver::new().script([Fault::Status(503, r#"{"error":"full"}"#, ra)]);
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean);
    assert_eq!(
        clk.sleeps().iter().sum::<Duration>(),
        Duration::from_secs(7)
    );

    let s = spool_with(1, &c);
    let ra = Some(RetryAfter::Delay(Duration::from_secs(3600)));
    let rx = Receiver::new().script([Fault::Status(429, "", ra)]);
    let before = clk.sleeps().len();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(
        r.halt,
        Some(PushHalt::RetryAfter(Duration::from_secs(3600)))
    );
    assert_eq!(r.status(), PushStatus::Retry);
    assert_eq!(clk.sleeps().len(), before, "no hour-long sleep");
}

#[test]
fn a_wait_past_the_deadline_ends_the_run_at_once() {
    let (clk, c) = clock();
    let s = spool_with(2, &c);
    let rx = Receiver::new().script(vec![Fault::Drop; 10]);
    let log = Log::default();
    let o = PushOptions {
        deadline: Some(Duration::from_millis(1200)),
        ..opts()
    };
    let r = run(&*s, &rx, o, &c, &log);
    assert_eq!(r.halt, Some(PushHalt::Deadline));
    assert_eq!(r.status(), PushStatus::Retry);
    // 0.5s fits, the next 1s would end at 1.5s > 1.2s.
    assert_eq!(r.requests, 2);
    assert_eq!(
        clk.sleeps().iter().sum::<Duration>(),
        Duration::from_millis(500)
    );
}

#[test]
fn a_413_halves_the_batch_down_to_one_then_dead_letters_that_item() {
    let (_, c) = clock();
    let s = spool_with(8, &c);
    // The receiver takes at most 2 entries per request, and item 3 is
    // too large on its own.
    let mut rx = Receiver::new();
    rx.max_entries = Some(2);
    let big = s.enqueue(&vec![b'x'; 5000], "big").unwrap().id;
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean, "{r:?}");
    assert_eq!(r.delivered, 9);
    let sizes: Vec<usize> = rx.seqs().iter().map(|s| s.len()).collect();
    assert_eq!(sizes[..3], [9, 4, 2], "halved: 9 → 4 → 2");
    assert_eq!(rx.payloads().len(), 9);
    assert_eq!(s.dead_count().unwrap(), 0);
    assert!(log.events().iter().any(|e| e.contains("Halved")));
    assert_eq!(s.get(big).unwrap(), None);

    // Now a receiver whose body limit fits no lone entry of item `huge`.
    let s = spool_with(2, &c);
    let huge = s.enqueue(&[b'y'; 100], "").unwrap().id;
    s.enqueue(b"after", "").unwrap();
    let rx = BodyLimit {
        inner: Receiver::new(),
        max: 300,
    };
    let r = PushSender::new(&*s, &rx, opts(), c.clone())
        .unwrap()
        .with_observer(&log)
        .run()
        .unwrap();
    assert_eq!(r.status(), PushStatus::DeadLettered, "{r:?}");
    assert_eq!((r.too_large, r.delivered, r.skipped), (1, 3, 1));
    let dead = s.dead_get(huge).unwrap().expect("dead-lettered");
    assert!(
        dead.item
            .last_error
            .as_deref()
            .unwrap()
            .contains("too large for the push receiver (HTTP 413)"),
        "{:?}",
        dead.item.last_error
    );
    // Its number went out as a skip, so the stream has no hole.
    let skips: Vec<u64> = rx
        .inner
        .requests()
        .iter()
        .flat_map(|q| q.entries.clone())
        .filter(|e| matches!(e, spool::push::Entry::Skip { .. }))
        .map(|e| e.seq())
        .collect();
    assert_eq!(skips, [3]);
    assert_eq!(rx.inner.payloads(), ["p1", "p2", "after"]);
}

/// A receiver that refuses bodies above `max` bytes with 413.
struct BodyLimit {
    inner: Receiver,
    max: usize,
}

impl PushTransport for BodyLimit {
    fn send(&self, body: &[u8]) -> PushAnswer {
        if body.len() > self.max {
            return PushAnswer::Http {
                status: 413,
                body: br#"{"error":"body over 300 bytes"}"#.to_vec(),
                retry_after: None,
            };
        }
        self.inner.send(body)
    }
    fn describe(&self) -> String {
        "limited".into()
    }
}

#[test]
fn rejects_become_dead_letters_with_the_receivers_reason() {
    let (_, c) = clock();
    let s = spool_with(2, &c);
    let bad = s.enqueue(&[b'z'; 64], "").unwrap().id;
    s.enqueue(b"p4", "").unwrap();
    let mut rx = Receiver::new();
    rx.limits.max_payload = 10;
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::DeadLettered);
    assert_eq!((r.delivered, r.rejected, r.dead_lettered()), (3, 1, 1));
    let dead = s.dead_get(bad).unwrap().unwrap();
    let why = dead.item.last_error.unwrap();
    assert!(why.contains("10"), "the receiver's reason: {why}");
    assert_eq!(rx.payloads(), ["p1", "p2", "p4"]);
    assert!(log
        .settled
        .lock()
        .unwrap()
        .iter()
        .any(|(id, w)| *id == bad && w.starts_with("dead: ")));
}

#[test]
fn an_over_ack_is_clamped_and_reported() {
    let (_, c) = clock();
    let s = spool_with(3, &c);
    let rx = Receiver::new().script([Fault::OverAck(10)]);
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean);
    assert_eq!((r.watermark, r.acknowledged), (3, 3));
    assert_eq!(
        s.push_state().unwrap().acked,
        3,
        "clamped to the highest assigned"
    );
    assert!(
        log.events()
            .iter()
            .any(|e| e == "OverAck { claimed: 13, highest: 3 }"),
        "{:?}",
        log.events()
    );
}

#[test]
fn a_receiver_below_the_watermark_stops_the_run_and_changes_nothing() {
    let (_, c) = clock();
    let s = spool_with(2, &c);
    let rx = Receiver::new();
    let log = Log::default();
    run(&*s, &rx, opts(), &c, &log);
    // The receiver is restored from a backup taken before the push.
    *rx.rx.lock().unwrap() = MemoryReceiver::new(None);
    s.enqueue(b"p3", "").unwrap();
    let before = s.drain().unwrap();
    let r = run(&*s, &rx, opts(), &c, &log);
    let stop = r.refusal().expect("refused").clone();
    assert_eq!(stop.cause, StopCause::LostState);
    assert_eq!(r.status(), PushStatus::Refused(spool::ErrorKind::Data));
    assert!(stop.message.contains("lost state"), "{}", stop.message);
    // p3 got its number before the request went out; nothing else moved.
    let after = s.drain().unwrap();
    assert_eq!(after.len(), before.len());
    assert_eq!(after[0].push_seq, Some(3));
    assert_eq!(after[0].attempts, 0, "a refusal is not an attempt");
    assert_eq!(s.push_state().unwrap().acked, 2);
}

#[test]
fn unauthorized_stops_with_items_untouched() {
    let (_, c) = clock();
    let s = spool_with(2, &c);
    let rx = Receiver::new().script([Fault::Status(401, r#"{"error":"bad token"}"#, None)]);
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(
        r.status(),
        PushStatus::Refused(spool::ErrorKind::PermissionDenied)
    );
    assert_eq!(r.refusal().unwrap().cause, StopCause::Unauthorized);
    assert!(s.drain().unwrap().iter().all(|i| i.attempts == 0));
    assert_eq!(r.requests, 1);
}

#[test]
fn the_limit_counts_distinct_items_and_leaves_the_rest() {
    let (_, c) = clock();
    let s = spool_with(10, &c);
    let rx = Receiver::new().script([Fault::Drop]);
    let log = Log::default();
    let o = PushOptions {
        limit: Some(3),
        batch: 2,
        ..opts()
    };
    let r = run(&*s, &rx, o, &c, &log);
    assert_eq!(r.halt, Some(PushHalt::Limit));
    assert_eq!(r.status(), PushStatus::Retry);
    assert_eq!((r.sent, r.delivered), (3, 3));
    assert_eq!(rx.seqs(), [vec![1, 2], vec![1, 2], vec![3]]);
    assert_eq!(
        s.push_state().unwrap().last_assigned,
        3,
        "no number beyond the limit"
    );
}

#[test]
fn a_stop_finishes_the_request_in_flight_and_records_it() {
    let (_, c) = clock();
    let s = spool_with(6, &c);
    let rx = Receiver::new();
    let stop = StopHandle::default();
    *rx.stop_at.lock().unwrap() = Some((0, stop.clone()));
    let r = PushSender::new(&*s, &rx, PushOptions { batch: 2, ..opts() }, c.clone())
        .unwrap()
        .with_stop_handle(stop)
        .run()
        .unwrap();
    assert_eq!(r.halt, Some(PushHalt::Signal));
    assert_eq!((r.requests, r.delivered), (1, 2));
    assert!(r.left_due);
    assert_eq!(s.size().unwrap(), 4);
}

#[test]
fn bodies_stay_within_batch_bytes_unless_one_entry_is_larger() {
    let (_, c) = clock();
    let s = spool_with(0, &c);
    for i in 0..20 {
        s.enqueue(format!("{i:0>100}").as_bytes(), "").unwrap();
    }
    s.enqueue(&[0xff; 900], "").unwrap();
    let rx = Receiver::new();
    let log = Log::default();
    let r = run(
        &*s,
        &rx,
        PushOptions {
            batch_bytes: 700,
            ..opts()
        },
        &c,
        &log,
    );
    assert_eq!((r.status(), r.delivered), (PushStatus::Clean, 21));
    let sizes = rx.sizes.lock().unwrap().clone();
    let reqs = rx.requests();
    for (n, size) in sizes.iter().enumerate() {
        assert!(
            *size <= 700 || reqs[n].entries.len() == 1,
            "request {n}: {size} bytes, {} entries",
            reqs[n].entries.len()
        );
    }
    assert!(reqs.iter().any(|q| q.entries.len() > 1));
}

#[test]
fn an_operator_abandoning_an_in_flight_item_sends_a_skip() {
    let (_, c) = clock();
    let s = spool_with(3, &c);
    let rx = Receiver::new().script(vec![Fault::Drop; 5]);
    let log = Log::default();
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Retry);
    let second = s.drain().unwrap()[1].clone();
    assert_eq!(second.push_seq, Some(2));
    // Holding it is refused; removing it records a skip.
    let err = s.set_held(&[second.id], true).unwrap_err();
    assert_eq!(err.kind(), spool::ErrorKind::Data);
    s.mark_done(&[second.id]).unwrap();
    assert_eq!(s.push_state().unwrap().skips, [2]);
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean, "{r:?}");
    assert_eq!((r.delivered, r.skipped), (2, 1));
    let last = rx.requests().pop().unwrap();
    assert_eq!(last.entries[1], spool::push::Entry::Skip { seq: 2 });
    assert_eq!(rx.payloads(), ["p1", "p3"]);
    assert!(s.push_state().unwrap().skips.is_empty());
}

#[test]
fn a_dry_run_numbers_and_changes_nothing() {
    let (_, c) = clock();
    let s = spool_with(3, &c);
    let rx = Receiver::new().script([Fault::Drop]);
    let log = Log::default();
    run(
        &*s,
        &rx,
        PushOptions {
            batch: 2,
            max_attempts: 1,
            ..opts()
        },
        &c,
        &log,
    );
    let held = s.enqueue(b"held", "").unwrap().id;
    s.set_held(&[held], true).unwrap();
    let before = (s.drain().unwrap(), s.push_state().unwrap());
    let requests = rx.requests().len();
    let log = Log::default();
    let r = run(
        &*s,
        &rx,
        PushOptions {
            dry_run: true,
            ..opts()
        },
        &c,
        &log,
    );
    assert_eq!((r.would_resend, r.would_send, r.held), (2, 1, 1));
    assert_eq!((s.drain().unwrap(), s.push_state().unwrap()), before);
    assert_eq!(rx.requests().len(), requests, "nothing sent");
    assert_eq!(
        log.events(),
        [
            "would resend 1 Some(1)",
            "would resend 2 Some(2)",
            "would send 3 Some(3)"
        ]
    );
}

#[test]
fn a_regenerated_uuid_starts_a_new_stream_from_one() {
    let (_, c) = clock();
    let s = spool_with(3, &c);
    let rx = Receiver::new().script([Fault::Drop]);
    let log = Log::default();
    run(
        &*s,
        &rx,
        PushOptions {
            batch: 2,
            max_attempts: 1,
            ..opts()
        },
        &c,
        &log,
    );
    let old = s.uuid().unwrap();
    let new = s.regenerate_uuid().unwrap();
    assert_ne!(old, new);
    let r = run(&*s, &rx, opts(), &c, &log);
    assert_eq!(r.status(), PushStatus::Clean);
    let last = rx.requests().pop().unwrap();
    assert_eq!(last.client_id, new);
    let seqs: Vec<u64> = last.entries.iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, [1, 2, 3]);
}

/// Holds the first request of the stream (the one starting at 1) until
/// the receiver has answered a later one, so that the later one
/// overtakes it: the receiver sees a gap.
struct Overtaking {
    inner: Receiver,
    /// Whether a later request was answered.
    gate: Mutex<bool>,
    turn: std::sync::Condvar,
}

impl PushTransport for Overtaking {
    fn send(&self, body: &[u8]) -> PushAnswer {
        let first = wire::parse_request(body).unwrap().entries[0].seq();
        let held = first == 1 && !*self.gate.lock().unwrap();
        if held {
            let g = self.gate.lock().unwrap();
            let (_g, waited) = self
                .turn
                .wait_timeout_while(g, Duration::from_secs(20), |g| !*g)
                .unwrap();
            assert!(!waited.timed_out(), "the second request never came");
        }
        let answer = self.inner.send(body);
        if first > 1 {
            *self.gate.lock().unwrap() = true;
            self.turn.notify_all();
        }
        answer
    }
    fn describe(&self) -> String {
        "overtaking".into()
    }
}

#[test]
fn a_pipelined_request_that_overtakes_the_one_ahead_is_resent_after_it() {
    for backend in ["q.db", "q.ndjson"] {
        let dir = tempfile::tempdir().unwrap();
        let (_, c) = clock();
        let s = file_spool_with(dir.path(), backend, 12, &c);
        let rx = Overtaking {
            inner: Receiver::new(),
            gate: Mutex::new(false),
            turn: std::sync::Condvar::new(),
        };
        let log = Log::default();
        let r = run(
            &*s,
            &rx,
            PushOptions {
                batch: 3,
                pipeline: 2,
                ..opts()
            },
            &c,
            &log,
        );
        assert_eq!(r.status(), PushStatus::Clean, "{backend}: {r:?}");
        assert_eq!((r.delivered, r.in_flight, r.watermark), (12, 0, 12));
        assert_eq!(r.failed_requests, 0, "a gap is not a failure");
        let seqs = rx.inner.seqs();
        // The receiver saw 4..6 first (refused as a gap), then 1..3.
        assert_eq!(seqs[0], vec![4, 5, 6], "{backend}: {seqs:?}");
        assert_eq!(seqs[1], vec![1, 2, 3], "{backend}: {seqs:?}");
        assert!(
            seqs[2..].iter().any(|s| s == &vec![4, 5, 6]),
            "{backend}: 4..6 resent: {seqs:?}"
        );
        assert_eq!(rx.inner.payloads(), numbers(12), "{backend}: exactly once");
        assert!(
            log.events().iter().any(|e| e.starts_with("Resend")),
            "{:?}",
            log.events()
        );
        assert_eq!(
            log.settled.lock().unwrap().len(),
            12,
            "each item reported once"
        );
        assert_eq!(s.size().unwrap(), 0);
    }
}

/// Counts how many requests are at the receiver at once.
struct Slow {
    inner: Receiver,
    now: Mutex<(usize, usize)>,
}

impl PushTransport for Slow {
    fn send(&self, body: &[u8]) -> PushAnswer {
        {
            let mut n = self.now.lock().unwrap();
            n.0 += 1;
            n.1 = n.1.max(n.0);
        }
        std::thread::sleep(Duration::from_millis(30));
        let answer = self.inner.send(body);
        self.now.lock().unwrap().0 -= 1;
        answer
    }
    fn describe(&self) -> String {
        "slow".into()
    }
}

#[test]
fn the_pipeline_keeps_that_many_requests_in_flight_and_one_waits_for_each() {
    for pipeline in [1, 3] {
        let (_, c) = clock();
        let s = spool_with(30, &c);
        let rx = Slow {
            inner: Receiver::new(),
            now: Mutex::new((0, 0)),
        };
        let log = Log::default();
        let r = run(
            &*s,
            &rx,
            PushOptions {
                batch: 3,
                pipeline,
                ..opts()
            },
            &c,
            &log,
        );
        assert_eq!(r.status(), PushStatus::Clean, "{r:?}");
        assert_eq!(rx.inner.payloads(), numbers(30));
        let most = rx.now.lock().unwrap().1;
        assert_eq!(most, pipeline, "requests at the receiver at once");
        // Whatever order the requests arrived in, the events report the
        // acknowledgements in sequence order.
        let acked: Vec<String> = log
            .events()
            .into_iter()
            .filter(|e| e.starts_with("Acked"))
            .collect();
        let mut sorted = acked.clone();
        sorted.sort_by_key(|e| {
            e.split("last_seq: ")
                .nth(1)
                .and_then(|t| t.split(',').next().and_then(|n| n.parse::<u64>().ok()))
        });
        assert_eq!(acked, sorted);
    }
}

#[test]
fn a_pipelined_stream_through_lost_answers_and_drops_applies_everything_once() {
    for seed in 0..4u64 {
        let (_, c) = clock();
        let s = spool_with(40, &c);
        let faults = [Fault::Normal, Fault::LoseAnswer, Fault::Drop, Fault::Normal];
        let script = (0..12).map(|i| faults[((i + seed) % 4) as usize].clone());
        let rx = Receiver::new().script(script);
        let log = Log::default();
        let r = run(
            &*s,
            &rx,
            PushOptions {
                batch: 2,
                pipeline: 3,
                max_attempts: 20,
                ..opts()
            },
            &c,
            &log,
        );
        assert_eq!(r.status(), PushStatus::Clean, "seed {seed}: {r:?}");
        assert_eq!(rx.payloads(), numbers(40), "seed {seed}: exactly once");
        assert_eq!(r.delivered, 40);
        assert_eq!(s.size().unwrap(), 0);
        let settled = log.settled.lock().unwrap().clone();
        assert_eq!(settled.len(), 40, "seed {seed}: each item reported once");
    }
}

#[test]
fn a_stop_finishes_every_pipelined_request_in_flight() {
    let (_, c) = clock();
    let s = spool_with(10, &c);
    let rx = Receiver::new();
    let stop = StopHandle::default();
    *rx.stop_at.lock().unwrap() = Some((0, stop.clone()));
    let r = PushSender::new(
        &*s,
        &rx,
        PushOptions {
            batch: 2,
            pipeline: 2,
            ..opts()
        },
        c.clone(),
    )
    .unwrap()
    .with_stop_handle(stop)
    .run()
    .unwrap();
    assert_eq!(r.halt, Some(PushHalt::Signal));
    assert!((1..=2).contains(&r.requests), "{r:?}");
    // Every answer was applied before the run ended: what was sent is
    // delivered, or in flight when a request overtook the one ahead of
    // it (a gap, resent by the next run).
    assert!(r.delivered >= 2, "{r:?}");
    assert_eq!(r.delivered + r.in_flight, 2 * r.requests, "{r:?}");
    assert_eq!(s.size().unwrap(), 10 - r.delivered);
}

#[test]
fn a_pipeline_outside_one_to_sixty_four_is_refused() {
    let (_, c) = clock();
    let s = spool_with(1, &c);
    let rx = Receiver::new();
    for pipeline in [0, 65] {
        let e = PushSender::new(&*s, &rx, PushOptions { pipeline, ..opts() }, c.clone())
            .err()
            .unwrap();
        assert!(e.to_string().contains("--pipeline"), "{e}");
    }
}
