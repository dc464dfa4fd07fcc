//! Model-based property tests: random sequences of operations applied to a
//! durable backend and to the memory backend (the model) on one manual
//! clock. After every operation both must have answered the same (equal
//! `Ok` values, or errors of the same kind) and hold the same state:
//! pending items, dead letters, size, high-water mark, bound and stats.
//! Reopening the durable spool, switching to a second handle on it, and
//! compacting it are operations too; so are, for the NDJSON backend, what
//! can happen to its derived index — deleted, or put back as it was
//! earlier (what a crash between a write and its index update leaves) —
//! and lines appended by a reference writer that knows nothing of it.
//!
//! The seed is fixed so that runs are reproducible; set
//! `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`) to explore further.

mod common;

use common::{Backend, Harness};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use spool::backend::sqlite::maint::CheckpointMode;
use spool::{
    AttemptUpdate, Delivery, DepthLimit, EnqueueOptions, Error, Evidence, Item, ItemId,
    MemoryQueue, NewItem, OnFull, Queue, Record, RecordState, Result, Spool, Timestamp,
};
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

/// A payload, a key, a group number and a coalesce-key number.
type PolicyItem = (Vec<u8>, String, Option<u8>, Option<u8>);

/// One operation. Ids are chosen when the operation runs (see
/// [`pick`]), so that they mostly name items that exist.
#[derive(Clone, Debug)]
enum Op {
    Enqueue(Vec<u8>, String),
    Batch(Vec<(Vec<u8>, String)>, DepthLimit),
    MarkDone(Vec<u8>),
    SetAttempts(u8, u32),
    RecordAttempt {
        id: u8,
        attempts: u32,
        retry_in_ms: Option<u32>,
        error: Option<String>,
    },
    SetHeld(Vec<u8>, bool),
    DeadLetter(u8, String),
    Requeue(Vec<u8>),
    Purge(Vec<u8>),
    SetMaxDepth(Option<u64>),
    Import(Vec<RecordSpec>),
    Advance(u64),
    Reopen,
    /// Use the other of two handles on the durable spool from now on.
    Switch,
    /// Maintenance that must not change what the spool holds: NDJSON
    /// compaction, SQLite vacuum and checkpoint.
    Compact,
    /// NDJSON: delete the index.
    DeleteIndex,
    /// NDJSON: remember the index as it is now ...
    SaveIndex,
    /// ... and put that copy back (a crash between a write and its index
    /// update leaves an index that is behind; a copy from before a
    /// compaction describes another file).
    RestoreIndex,
    /// NDJSON: a reference writer appends a `put` line for a new item
    /// (no enqueue time, no dedup; a key of its own).
    ReferencePut(Vec<u8>),
    /// NDJSON: a reference writer appends a `done` line for an id.
    ReferenceDone(u8),
    /// A batch whose items may carry an ordering group and a coalesce key
    /// (from small alphabets, so that they meet).
    PolicyBatch(Vec<PolicyItem>),
    /// Switch the overflow policy (true: drop-oldest).
    SetDropOldest(bool),
    /// Set the retention window, in minutes (`None`: off).
    SetRetain(Option<u8>),
    /// Deliver items with one kind of evidence.
    Deliver(Vec<u8>, u8),
    /// Prune at most this many expired delivered records.
    Prune(u8),
}

/// An import record, resolved against the spool when the import runs.
#[derive(Clone, Debug)]
struct RecordSpec {
    id: u8,
    state: RecordState,
    payload: Vec<u8>,
    key: String,
    attempts: u32,
    retry_in_ms: Option<u32>,
    error: Option<String>,
    /// For dead records the time of death, for delivered ones the time
    /// of delivery; `None` makes the record (and the import) invalid.
    dead_ms_ago: Option<u32>,
    enqueued_secs_ago: u32,
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", "", "a", "b", "c"]).prop_map(String::from)
}

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 0..6),
        1 => prop::sample::select(vec![
            &b""[..],
            b"\0",
            b"\xff\xfe",
            b"\"\\",
            b"\n{\"op\":\"done\",\"id\":1}\n",
            "\u{2028}é".as_bytes(),
        ])
        .prop_map(|p| p.to_vec()),
    ]
}

fn error_text() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "",
        "boom",
        "503 \"busy\"\nretry \\ later\u{2028}",
        "nul\0",
    ])
    .prop_map(String::from)
}

fn ids() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..4)
}

fn depth_limit() -> impl Strategy<Value = DepthLimit> {
    prop_oneof![
        3 => Just(DepthLimit::Stored),
        1 => prop::option::of(0u64..8).prop_map(DepthLimit::Override),
    ]
}

fn record_spec() -> impl Strategy<Value = RecordSpec> {
    (
        any::<u8>(),
        prop::sample::select(vec![
            RecordState::Pending,
            RecordState::Held,
            RecordState::Dead,
            RecordState::Delivered,
        ]),
        (payload(), key(), 0u32..6),
        prop::option::of(0u32..120_000),
        prop::option::of(error_text()),
        prop_oneof![9 => (0u32..100_000).prop_map(Some), 1 => Just(None)],
        0u32..100_000,
    )
        .prop_map(
            |(id, state, (payload, key, attempts), retry_in_ms, error, dead_ms_ago, ago)| {
                RecordSpec {
                    id,
                    state,
                    payload,
                    key,
                    attempts,
                    retry_in_ms,
                    error,
                    dead_ms_ago,
                    enqueued_secs_ago: ago,
                }
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (payload(), key()).prop_map(|(p, k)| Op::Enqueue(p, k)),
        2 => (prop::collection::vec((payload(), key()), 0..5), depth_limit())
            .prop_map(|(items, limit)| Op::Batch(items, limit)),
        2 => ids().prop_map(Op::MarkDone),
        1 => (any::<u8>(), 0u32..6).prop_map(|(id, n)| Op::SetAttempts(id, n)),
        2 => (
            any::<u8>(),
            0u32..6,
            prop::option::of(0u32..120_000),
            prop::option::of(error_text()),
        )
            .prop_map(|(id, attempts, retry_in_ms, error)| Op::RecordAttempt {
                id,
                attempts,
                retry_in_ms,
                error,
            }),
        1 => (ids(), any::<bool>()).prop_map(|(ids, on)| Op::SetHeld(ids, on)),
        2 => (any::<u8>(), error_text()).prop_map(|(id, e)| Op::DeadLetter(id, e)),
        1 => ids().prop_map(Op::Requeue),
        1 => ids().prop_map(Op::Purge),
        1 => prop::option::of(0u64..6).prop_map(Op::SetMaxDepth),
        1 => prop::collection::vec(record_spec(), 0..4).prop_map(Op::Import),
        1 => (0u64..100_000).prop_map(Op::Advance),
        2 => Just(Op::Reopen),
        2 => Just(Op::Switch),
        1 => Just(Op::Compact),
        1 => Just(Op::DeleteIndex),
        1 => Just(Op::SaveIndex),
        1 => Just(Op::RestoreIndex),
        1 => payload().prop_map(Op::ReferencePut),
        1 => any::<u8>().prop_map(Op::ReferenceDone),
        2 => prop::collection::vec(
            (payload(), key(), prop::option::of(0u8..3), prop::option::of(0u8..3)),
            1..4
        )
        .prop_map(Op::PolicyBatch),
        1 => any::<bool>().prop_map(Op::SetDropOldest),
        1 => prop::option::of(1u8..4).prop_map(Op::SetRetain),
        2 => (ids(), any::<u8>()).prop_map(|(ids, e)| Op::Deliver(ids, e)),
        1 => (0u8..4).prop_map(Op::Prune),
    ]
}

/// An id for a selector: any id issued so far, 0, or the next unissued
/// one.
fn pick(sel: u8, high_water: ItemId) -> ItemId {
    u64::from(sel) % (high_water + 2)
}

/// Distinct ids in order: what a call with a repeated id returns is left
/// open by the contract.
fn pick_all(sels: &[u8], high_water: ItemId) -> Vec<ItemId> {
    let mut out: Vec<ItemId> = Vec::new();
    for s in sels {
        let id = pick(*s, high_water);
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn at(now: Timestamp, ms: u32) -> Timestamp {
    now.saturating_add(Duration::from_millis(ms.into()))
}

fn ago(now: Timestamp, ms: i64) -> Timestamp {
    Timestamp::from_millis(now.as_millis() - ms)
}

fn record(spec: &RecordSpec, high_water: ItemId, now: Timestamp) -> Record {
    let id = u64::from(spec.id) % (high_water + 8);
    let enqueued = Timestamp::from_secs(now.as_secs() - i64::from(spec.enqueued_secs_ago));
    let mut item = Item::new(id, spec.payload.clone(), spec.key.clone(), enqueued);
    item.attempts = spec.attempts;
    item.next_retry_at = spec.retry_in_ms.map(|ms| at(now, ms));
    item.last_error = spec.error.clone();
    item.held = spec.state == RecordState::Held;
    Record {
        item,
        state: spec.state,
        dead_at: match spec.state {
            RecordState::Dead => spec.dead_ms_ago.map(|ms| ago(now, ms.into())),
            _ => None,
        },
        delivery: match spec.state {
            RecordState::Delivered => spec.dead_ms_ago.map(|ms| Delivery {
                at: ago(now, ms.into()),
                evidence: Evidence::Http(200),
            }),
            _ => None,
        },
    }
}

fn same_error(a: &Error, b: &Error) -> bool {
    match (a, b) {
        (
            Error::QueueFull {
                max_depth: m1,
                depth: d1,
            },
            Error::QueueFull {
                max_depth: m2,
                depth: d2,
            },
        ) => (m1, d1) == (m2, d2),
        (Error::QueueFull { .. }, _) | (_, Error::QueueFull { .. }) => false,
        _ => a.kind() == b.kind(),
    }
}

/// Both answered the same.
fn same<T: PartialEq + Debug>(
    what: &str,
    got: Result<T>,
    want: Result<T>,
) -> std::result::Result<(), TestCaseError> {
    let ok = match (&got, &want) {
        (Ok(g), Ok(w)) => g == w,
        (Err(g), Err(w)) => same_error(g, w),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{what}:\n  backend: {got:?}\n  model:   {want:?}"
        )))
    }
}

/// Run `op` on both queues and compare the answers.
fn apply(op: &Op, d: &mut Durable, model: &MemoryQueue) -> std::result::Result<(), TestCaseError> {
    let hw = model.high_water().expect("model high_water");
    let now = d.h.now();
    let q = d.q();
    let what = format!("{op:?}");
    match op {
        Op::Enqueue(p, k) => same(&what, q.enqueue(p, k), model.enqueue(p, k)),
        Op::Batch(items, limit) => {
            let items: Vec<NewItem> = items
                .iter()
                .map(|(p, k)| NewItem::new(p.clone(), k.clone()))
                .collect();
            let opts = EnqueueOptions {
                depth_limit: *limit,
            };
            same(
                &what,
                q.enqueue_batch(&items, &opts),
                model.enqueue_batch(&items, &opts),
            )
        }
        Op::MarkDone(sels) => {
            let ids = pick_all(sels, hw);
            same(&what, q.mark_done(&ids), model.mark_done(&ids))
        }
        Op::SetAttempts(sel, n) => {
            let id = pick(*sel, hw);
            same(&what, q.set_attempts(id, *n), model.set_attempts(id, *n))
        }
        Op::RecordAttempt {
            id,
            attempts,
            retry_in_ms,
            error,
        } => {
            let id = pick(*id, hw);
            let upd = AttemptUpdate {
                attempts: *attempts,
                next_retry_at: retry_in_ms.map(|ms| at(now, ms)),
                last_error: error.clone(),
            };
            same(
                &what,
                q.record_attempt(id, &upd),
                model.record_attempt(id, &upd),
            )
        }
        Op::SetHeld(sels, on) => {
            let ids = pick_all(sels, hw);
            same(&what, q.set_held(&ids, *on), model.set_held(&ids, *on))
        }
        Op::DeadLetter(sel, e) => {
            let id = pick(*sel, hw);
            same(&what, q.dead_letter(id, e), model.dead_letter(id, e))
        }
        Op::Requeue(sels) => {
            let ids = pick_all(sels, hw);
            same(&what, q.requeue(&ids), model.requeue(&ids))
        }
        Op::Purge(sels) => {
            let ids = pick_all(sels, hw);
            same(&what, q.purge(&ids), model.purge(&ids))
        }
        Op::SetMaxDepth(b) => same(&what, q.set_max_depth(*b), model.set_max_depth(*b)),
        Op::PolicyBatch(items) => {
            let items: Vec<NewItem> = items
                .iter()
                .map(|(p, k, g, c)| {
                    let mut n = NewItem::new(p.clone(), k.clone());
                    n.group = g.map(|g| format!("g{g}"));
                    n.coalesce_key = c.map(|c| format!("c{c}"));
                    n
                })
                .collect();
            let opts = EnqueueOptions::default();
            same(
                &what,
                q.enqueue_batch(&items, &opts),
                model.enqueue_batch(&items, &opts),
            )
        }
        Op::SetDropOldest(on) => {
            let p = if *on {
                OnFull::DropOldest
            } else {
                OnFull::Reject
            };
            same(&what, q.set_on_full(p), model.set_on_full(p))
        }
        Op::SetRetain(minutes) => {
            let w = minutes.map(|m| Duration::from_secs(60 * u64::from(m)));
            same(&what, q.set_retain(w), model.set_retain(w))
        }
        Op::Deliver(sels, e) => {
            let ids = pick_all(sels, hw);
            let evidence = match e % 4 {
                0 => Evidence::Http(200 + u16::from(*e % 7)),
                1 => Evidence::Exit(0),
                2 => Evidence::Push(u64::from(*e)),
                _ => Evidence::Done,
            };
            let done: Vec<(ItemId, Evidence)> = ids.iter().map(|i| (*i, evidence)).collect();
            same(&what, q.deliver(&done), model.deliver(&done))
        }
        Op::Prune(n) => same(
            &what,
            q.prune_delivered(usize::from(*n)),
            model.prune_delivered(usize::from(*n)),
        ),
        Op::Import(specs) => {
            let recs: Vec<Record> = specs.iter().map(|s| record(s, hw, now)).collect();
            let what = format!("import {recs:?}");
            same(&what, q.import(&recs), model.import(&recs))
        }
        Op::Advance(ms) => {
            d.h.clock.advance(Duration::from_millis(*ms));
            Ok(())
        }
        Op::Reopen => {
            d.h.reopen();
            Ok(())
        }
        Op::Switch => {
            d.switch();
            Ok(())
        }
        Op::Compact => {
            let done = match d.spool() {
                Spool::File(f) => f.compact().map(|_| {
                    // The rewritten file is one a fresh check finds healthy
                    // (ids first appear in increasing order, among others).
                    let r = spool::backend::file::verify::verify_path(f.path())
                        .expect("verify after compaction");
                    assert!(r.healthy(), "after {what}: {r:?}");
                }),
                Spool::Sqlite(s) => s
                    .vacuum(Duration::from_secs(10))
                    .and_then(|_| s.checkpoint(CheckpointMode::Truncate, Duration::from_secs(10)))
                    .map(drop),
                Spool::Postgres(p) => p.vacuum().map(drop),
                Spool::Memory(_) => Ok(()),
            };
            same(&what, done, Ok(()))
        }
        Op::DeleteIndex | Op::SaveIndex | Op::RestoreIndex if d.h.backend != Backend::File => {
            Ok(())
        }
        Op::DeleteIndex => {
            let _ = std::fs::remove_file(index_path(d));
            Ok(())
        }
        Op::SaveIndex => {
            d.saved_index = Some(std::fs::read(index_path(d)).ok());
            Ok(())
        }
        Op::RestoreIndex => {
            match d.saved_index.clone() {
                Some(Some(bytes)) => std::fs::write(index_path(d), bytes).unwrap(),
                Some(None) => {
                    let _ = std::fs::remove_file(index_path(d));
                }
                None => {}
            }
            Ok(())
        }
        Op::ReferencePut(_) | Op::ReferenceDone(_) if d.h.backend != Backend::File => Ok(()),
        Op::ReferencePut(p) => {
            // The reference writes text payloads only.
            let Ok(text) = std::str::from_utf8(p) else {
                return Ok(());
            };
            let id = hw + 1;
            let key = format!("ref-{id}");
            let line = serde_json::json!({
                "op": "put", "id": id, "payload": text, "idempotencyKey": key, "attempts": 0
            });
            append_line(d, &line.to_string());
            let mut item = Item::new(id, p.clone(), key, now);
            item.enqueued_at = None;
            let rec = Record {
                item,
                state: RecordState::Pending,
                dead_at: None,
                delivery: None,
            };
            model.import(&[rec]).expect("model import");
            Ok(())
        }
        Op::ReferenceDone(sel) => {
            let id = pick(*sel, hw);
            // (A `done` above the mark would raise it: the model has no
            // such operation.)
            if id == 0 || id > hw {
                return Ok(());
            }
            // A reference writer's `done` deletes; under a retention
            // window the model would keep the item. And the model's
            // `mark_done` prunes what retention kept, as every write of
            // it does, which a line appended by another writer does not.
            if model.retain().expect("model retain").is_some()
                || model.stats(now).expect("model stats").delivered_retained > 0
            {
                return Ok(());
            }
            append_line(d, &format!(r#"{{"op":"done","id":{id}}}"#));
            model.mark_done(&[id]).expect("model done");
            Ok(())
        }
    }
}

fn index_path(d: &Durable) -> std::path::PathBuf {
    spool::backend::companion(&d.h.path, "idx")
}

/// Append a line as a reference writer would: no lock, no index.
fn append_line(d: &Durable, line: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&d.h.path)
        .expect("open the spool file");
    writeln!(f, "{line}").expect("append");
}

/// Both hold the same state.
fn same_state(
    step: &str,
    d: &Durable,
    model: &MemoryQueue,
) -> std::result::Result<(), TestCaseError> {
    let q = d.q();
    let now = d.h.now();
    let what = |x: &str| format!("after {step}: {x}");
    same(&what("drain"), q.drain(), model.drain())?;
    same(
        &what("dead letters"),
        q.dead_page(0, 10_000),
        model.dead_page(0, 10_000),
    )?;
    same(&what("size"), q.size(), model.size())?;
    same(&what("dead_count"), q.dead_count(), model.dead_count())?;
    same(&what("high_water"), q.high_water(), model.high_water())?;
    // Every handle reports the bound another handle set.
    same(&what("max_depth"), q.max_depth(), model.max_depth())?;
    same(&what("stats"), q.stats(now), model.stats(now))?;
    same(
        &what("delivered"),
        q.delivered_page(0, 10_000),
        model.delivered_page(0, 10_000),
    )?;
    // The single-item and paged reads agree with the full ones.
    let hw = model.high_water().expect("model high_water");
    for id in 0..=hw + 1 {
        same(&what(&format!("get({id})")), q.get(id), model.get(id))?;
        same(
            &what(&format!("dead_get({id})")),
            q.dead_get(id),
            model.dead_get(id),
        )?;
        same(
            &what(&format!("delivered_get({id})")),
            q.delivered_get(id),
            model.delivered_get(id),
        )?;
    }
    let mid = hw / 2;
    same(&what("page"), q.page(mid, 3), model.page(mid, 3))?;
    same(
        &what("dead_page"),
        q.dead_page(mid, 2),
        model.dead_page(mid, 2),
    )?;
    Ok(())
}

/// The durable spool under test, through one of two handles.
struct Durable {
    h: Harness,
    /// A second handle on the same path, opened at the first switch.
    second: Option<Spool>,
    use_second: bool,
    /// A copy of the NDJSON index (`Some(None)`: there was none).
    saved_index: Option<Option<Vec<u8>>>,
}

impl Durable {
    fn spool(&self) -> &Spool {
        match (&self.second, self.use_second) {
            (Some(s), true) => s,
            _ => self.h.spool(),
        }
    }

    fn q(&self) -> &dyn Queue {
        self.spool().queue()
    }

    /// Go over to the other handle (the memory backend has only one).
    fn switch(&mut self) {
        if self.h.backend == Backend::Memory {
            return;
        }
        if self.second.is_none() {
            let opts = self.h.reopen_options();
            self.second = Some(Spool::open(&self.h.path, &opts).expect("open a second handle"));
        }
        self.use_second = !self.use_second;
    }
}

fn run(
    backend: Backend,
    max_depth: Option<u64>,
    ops: &[Op],
) -> std::result::Result<(), TestCaseError> {
    let mut d = Durable {
        h: Harness::new(backend, max_depth),
        second: None,
        use_second: false,
        saved_index: None,
    };
    let model = MemoryQueue::with_max_depth(max_depth, Arc::new(d.h.clock.clone()));
    prop_assert_eq!(d.q().kind(), backend.kind());
    let uuid = d.q().uuid().expect("uuid");
    same_state("open", &d, &model)?;
    for (i, op) in ops.iter().enumerate() {
        apply(op, &mut d, &model)?;
        let which = if d.use_second { "second" } else { "first" };
        same_state(&format!("op {i} {op:?} ({which} handle)"), &d, &model)?;
        prop_assert_eq!(d.q().uuid().expect("uuid"), uuid.clone(), "uuid changed");
    }
    Ok(())
}

fn config() -> ProptestConfig {
    let mut c = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_some() {
        c.cases = ProptestConfig::default().cases;
    }
    if std::env::var_os("PROPTEST_RNG_SEED").is_none() {
        c.rng_seed = RngSeed::Fixed(0x5900_1000);
    }
    c
}

fn scenario() -> impl Strategy<Value = (Option<u64>, Vec<Op>)> {
    (
        prop::option::of(1u64..6),
        prop::collection::vec(op(), 0..=40),
    )
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn file_backend_follows_the_model((max_depth, ops) in scenario()) {
        run(Backend::File, max_depth, &ops)?;
    }

    #[test]
    fn sqlite_backend_follows_the_model((max_depth, ops) in scenario()) {
        run(Backend::Sqlite, max_depth, &ops)?;
    }

    /// The harness itself: the memory backend follows itself, reopen
    /// included (a check that the comparison runs and can fail is in
    /// `the_comparison_catches_a_difference`).
    #[test]
    fn memory_backend_follows_the_model((max_depth, ops) in scenario()) {
        run(Backend::Memory, max_depth, &ops)?;
    }
}

/// The comparison is not vacuous: two queues that differ are caught.
#[test]
fn the_comparison_catches_a_difference() {
    let d = Durable {
        h: Harness::new(Backend::Memory, None),
        second: None,
        use_second: false,
        saved_index: None,
    };
    let model = MemoryQueue::with_max_depth(None, Arc::new(d.h.clock.clone()));
    d.q().enqueue(b"x", "").unwrap();
    assert!(same_state("test", &d, &model).is_err());
    model.enqueue(b"y", "").unwrap();
    assert!(same_state("test", &d, &model).is_err(), "payloads differ");
    assert!(same("e", d.q().enqueue(b"z", "k"), model.enqueue(b"z", "k")).is_ok());
    let full = Error::QueueFull {
        max_depth: 1,
        depth: 1,
    };
    let other = Error::QueueFull {
        max_depth: 2,
        depth: 1,
    };
    assert!(same::<()>("e", Err(full), Err(other)).is_err());
}

/// A bounded prune takes the same records on the durable backends as in
/// the model: the records delivered out of id order ("late") by time of
/// delivery, then the others by id. (The random scenarios above rarely
/// leave more expired records than a prune takes.)
#[test]
fn bounded_prunes_take_the_same_records_as_the_model() {
    let minute = Duration::from_secs(60);
    for backend in [Backend::File, Backend::Sqlite] {
        let h = Harness::new(backend, None);
        let model = MemoryQueue::with_max_depth(None, Arc::new(h.clock.clone()));
        let both: [&dyn Queue; 2] = [h.q(), &model];
        for q in both {
            q.set_retain(Some(Duration::from_secs(3600))).unwrap();
            for i in 0..8 {
                q.enqueue(format!("m{i}").as_bytes(), "").unwrap();
            }
        }
        // Delivered one a minute, in this order of ids.
        for id in [3, 1, 6, 2, 8, 4, 7, 5] {
            h.clock.advance(minute);
            for q in both {
                assert_eq!(q.deliver(&[(id, Evidence::Http(200))]).unwrap(), vec![true]);
            }
        }
        h.clock.advance(Duration::from_secs(3600) + 10 * minute);
        let mut rounds = Vec::new();
        loop {
            let ids = |q: &dyn Queue| -> Vec<ItemId> {
                q.delivered_page(0, 100)
                    .unwrap()
                    .iter()
                    .map(|d| d.item.id)
                    .collect()
            };
            let n = h.q().prune_delivered(2).unwrap();
            assert_eq!(n, model.prune_delivered(2).unwrap(), "{backend:?}");
            assert_eq!(ids(h.q()), ids(&model), "{backend:?}");
            if n == 0 {
                break;
            }
            rounds.push(ids(&model));
        }
        // Late (1, 2, 4, 7, 5 by time), then in order (3, 6, 8 by id).
        assert_eq!(
            rounds,
            vec![vec![3, 4, 5, 6, 7, 8], vec![3, 5, 6, 8], vec![6, 8], vec![],],
            "{backend:?}"
        );
    }
}
