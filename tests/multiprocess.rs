//! Several processes enqueue into one spool at the same time: nothing is
//! lost, nothing is duplicated, ids stay unique, a key that several
//! processes race to enqueue ends up as exactly one item, and a bounded
//! spool they race to fill holds exactly its bound.
//!
//! Two handles on one spool in one process must agree the same way; that
//! case is deterministic and runs first.
//!
//! The children are this test binary itself, run again with
//! `--exact child_enqueue`: the `#[ignore]`d `child_enqueue` test does the
//! child's work when the `SPOOL_TEST_CHILD_*` variables are set and
//! returns at once otherwise.

mod common;

use common::{Backend, Harness, T0};
use spool::{
    BackendKind, EnqueueOptions, Enqueued, Error, ManualClock, NewItem, OpenMode, OpenOptions,
    Queue, Spool,
};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

const CHILDREN: usize = 4;
/// Single enqueues per child, half of them with a key of their own.
const PER_CHILD: usize = 200;
/// Every child also enqueues these shared keys, racing the others.
const SHARED_KEYS: usize = 10;
/// And one batch of this many items.
const BATCH: usize = 10;

const ENV_SPOOL: &str = "SPOOL_TEST_CHILD_SPOOL";
const ENV_BACKEND: &str = "SPOOL_TEST_CHILD_BACKEND";
const ENV_PREFIX: &str = "SPOOL_TEST_CHILD_PREFIX";
const ENV_OUT: &str = "SPOOL_TEST_CHILD_OUT";
/// `mixed` (singles, a batch, shared keys) or `bounded` (singles into a
/// bounded spool until it is full).
const ENV_MODE: &str = "SPOOL_TEST_CHILD_MODE";
/// The bound of the spool in the `bounded` runs: less than the children
/// try to enqueue together.
const BOUND: u64 = 500;

/// One enqueue a child made: `kind` is `single`, `shared` or `batch`, or
/// `full` for a rejected one (whose `id` field holds the reported depth).
#[derive(Debug)]
struct Outcome {
    kind: String,
    payload: String,
    id: u64,
    deduplicated: bool,
}

/// The child's work: open the spool, wait for the parent's go (a byte on
/// stdin, so that all children start together), enqueue, and write what
/// each enqueue returned to the file `SPOOL_TEST_CHILD_OUT`.
#[test]
#[ignore = "the child of the multi-process tests; returns at once when run alone"]
fn child_enqueue() {
    let Some(path) = std::env::var_os(ENV_SPOOL) else {
        return;
    };
    let backend = match std::env::var(ENV_BACKEND).unwrap().as_str() {
        "file" => BackendKind::File,
        "sqlite" => BackendKind::Sqlite,
        other => panic!("unknown backend {other}"),
    };
    let prefix = std::env::var(ENV_PREFIX).unwrap();
    let out_path = std::env::var_os(ENV_OUT).unwrap();

    let mut opts = OpenOptions::new(OpenMode::ReadWrite);
    opts.backend = Some(backend);
    opts.clock = Arc::new(ManualClock::new(T0));
    let spool = Spool::open(Path::new(&path), &opts).expect("child opens the spool");
    let q = spool.queue();

    let mut go = [0u8; 1];
    std::io::stdin().read_exact(&mut go).expect("wait for go");

    let mut out = String::new();
    let mut note = |kind: &str, payload: &str, id: u64, dedup: bool| {
        out.push_str(&format!("{kind} {payload} {id} {dedup}\n"));
    };
    if std::env::var(ENV_MODE).unwrap() == "bounded" {
        for i in 0..PER_CHILD {
            let payload = format!("{prefix}-single-{i}");
            match q.enqueue(payload.as_bytes(), "") {
                Ok(e) => note("single", &payload, e.id, e.deduplicated),
                Err(Error::QueueFull {
                    max_depth: BOUND,
                    depth,
                }) => note("full", &payload, depth, false),
                Err(err) => panic!("{prefix}: enqueue {i}: {err}"),
            }
        }
        std::fs::write(&out_path, out).expect("write the child's results");
        return;
    }
    for i in 0..PER_CHILD {
        if i % (PER_CHILD / SHARED_KEYS) == 0 {
            let j = i / (PER_CHILD / SHARED_KEYS);
            let payload = format!("{prefix}-shared-{j}");
            let e = q
                .enqueue(payload.as_bytes(), &format!("shared-{j}"))
                .unwrap_or_else(|err| panic!("{prefix}: shared enqueue {j}: {err}"));
            note("shared", &payload, e.id, e.deduplicated);
        }
        if i == PER_CHILD / 2 {
            let payloads: Vec<String> = (0..BATCH).map(|b| format!("{prefix}-batch-{b}")).collect();
            let items: Vec<NewItem> = payloads
                .iter()
                .enumerate()
                .map(|(b, p)| {
                    NewItem::new(
                        p.as_str(),
                        if b % 2 == 0 {
                            format!("{p}-key")
                        } else {
                            String::new()
                        },
                    )
                })
                .collect();
            let res = q
                .enqueue_batch(&items, &EnqueueOptions::default())
                .unwrap_or_else(|err| panic!("{prefix}: batch: {err}"));
            for (p, e) in payloads.iter().zip(res) {
                note("batch", p, e.id, e.deduplicated);
            }
        }
        let payload = format!("{prefix}-single-{i}");
        let key = if i % 2 == 1 {
            format!("{payload}-key")
        } else {
            String::new()
        };
        let e = q
            .enqueue(payload.as_bytes(), &key)
            .unwrap_or_else(|err| panic!("{prefix}: enqueue {i}: {err}"));
        note("single", &payload, e.id, e.deduplicated);
    }
    std::fs::write(&out_path, out).expect("write the child's results");
}

fn read_outcomes(path: &Path) -> Vec<Outcome> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("child results {}: {e}", path.display()));
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 4, "bad result line {l:?}");
            Outcome {
                kind: f[0].to_string(),
                payload: f[1].to_string(),
                id: f[2].parse().unwrap(),
                deduplicated: f[3].parse().unwrap(),
            }
        })
        .collect()
}

/// Run `CHILDREN` children in `mode` against the harness's spool; their
/// outcomes, per child.
fn run_children(h: &Harness, mode: &str) -> Vec<Vec<Outcome>> {
    let exe = std::env::current_exe().expect("current_exe");
    let backend_name = h.q().kind().name();
    let mut children = Vec::new();
    for c in 0..CHILDREN {
        let out = h.dir.path().join(format!("child-{c}.txt"));
        let child = Command::new(&exe)
            .args([
                "--exact",
                "child_enqueue",
                "--nocapture",
                "--include-ignored",
            ])
            .env(ENV_SPOOL, &h.path)
            .env(ENV_BACKEND, backend_name)
            .env(ENV_PREFIX, format!("c{c}"))
            .env(ENV_OUT, &out)
            .env(ENV_MODE, mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a child");
        children.push((child, out));
    }
    // All children are spawned: let them go together.
    for (child, _) in &mut children {
        let mut stdin = child.stdin.take().unwrap();
        // A child that died early has closed its stdin; its exit status
        // tells why, below.
        let _ = stdin.write_all(b"g");
    }
    let mut all = Vec::new();
    for (c, (child, out)) in children.into_iter().enumerate() {
        let res = child.wait_with_output().expect("wait for a child");
        assert!(
            res.status.success(),
            "child {c} failed: {}\nstdout:\n{}\nstderr:\n{}",
            res.status,
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
        all.push(read_outcomes(&out));
    }
    all
}

fn concurrent_enqueue(backend: Backend) {
    let mut h = Harness::new(backend, None);
    let mut outcomes = Vec::new();
    for (c, o) in run_children(&h, "mixed").into_iter().enumerate() {
        assert_eq!(
            o.len(),
            PER_CHILD + SHARED_KEYS + BATCH,
            "child {c} did not do all its work"
        );
        outcomes.extend(o);
    }

    // What the children were told.
    let fresh: Vec<&Outcome> = outcomes.iter().filter(|o| o.kind != "shared").collect();
    assert!(
        fresh.iter().all(|o| !o.deduplicated),
        "a unique key was a dedup hit"
    );
    let mut shared: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut shared_stored = BTreeMap::<String, usize>::new();
    for o in outcomes.iter().filter(|o| o.kind == "shared") {
        let key = o.payload.split_once("-shared-").unwrap().1.to_string();
        shared.entry(key.clone()).or_default().insert(o.id);
        if !o.deduplicated {
            *shared_stored.entry(key).or_default() += 1;
        }
    }
    assert_eq!(shared.len(), SHARED_KEYS);
    for (key, ids) in &shared {
        assert_eq!(ids.len(), 1, "shared key {key} got several ids: {ids:?}");
        assert_eq!(
            shared_stored.get(key),
            Some(&1),
            "exactly one child stored shared key {key}"
        );
    }

    // What the spool holds: seen by the handle that stayed open, and
    // after a reopen.
    let want_count = CHILDREN * (PER_CHILD + BATCH) + SHARED_KEYS;
    for round in ["open handle", "reopened"] {
        if round == "reopened" {
            h.reopen();
        }
        let items = h.q().drain().expect("drain");
        assert_eq!(items.len(), want_count, "{round}: item count");
        assert_eq!(h.q().size().unwrap(), want_count as u64, "{round}: size");
        let ids: BTreeSet<u64> = items.iter().map(|i| i.id).collect();
        assert_eq!(ids.len(), items.len(), "{round}: ids are unique");
        assert!(
            items.windows(2).all(|w| w[0].id < w[1].id),
            "{round}: drain in id order"
        );
        let mut by_payload: BTreeMap<String, u64> = BTreeMap::new();
        for it in &items {
            let p = String::from_utf8(it.payload.clone()).expect("utf-8 payload");
            assert!(
                by_payload.insert(p.clone(), it.id).is_none(),
                "{round}: payload {p} stored twice"
            );
        }
        for o in fresh.iter() {
            assert_eq!(
                by_payload.get(&o.payload),
                Some(&o.id),
                "{round}: payload {} under the id its enqueue returned",
                o.payload
            );
        }
        for (key, ids) in &shared {
            let id = *ids.iter().next().unwrap();
            let it = items.iter().find(|i| i.id == id).expect("shared item");
            assert_eq!(it.key, format!("shared-{key}"), "{round}");
        }
        assert_eq!(
            h.q().high_water().unwrap(),
            *ids.iter().next_back().unwrap(),
            "{round}: high-water mark"
        );
    }
}

/// Children race to fill a bounded spool: exactly `BOUND` items are
/// stored, every rejection names the bound and the full depth, and the
/// accepted enqueues are exactly the stored items.
fn concurrent_enqueue_bounded(backend: Backend) {
    let mut h = Harness::new(backend, Some(BOUND));
    let outcomes: Vec<Outcome> = run_children(&h, "bounded").into_iter().flatten().collect();
    assert_eq!(
        outcomes.len(),
        CHILDREN * PER_CHILD,
        "every child did all its work"
    );
    let (stored, full): (Vec<&Outcome>, Vec<&Outcome>) =
        outcomes.iter().partition(|o| o.kind == "single");
    assert_eq!(stored.len() as u64, BOUND, "accepted enqueues");
    assert!(
        full.iter().all(|o| o.id == BOUND),
        "a rejection reports a depth other than the bound"
    );
    h.reopen();
    let items = h.q().drain().unwrap();
    assert_eq!(items.len() as u64, BOUND, "stored items");
    let mut want: Vec<(u64, Vec<u8>)> = stored
        .iter()
        .map(|o| (o.id, o.payload.clone().into_bytes()))
        .collect();
    want.sort();
    let got: Vec<(u64, Vec<u8>)> = items.into_iter().map(|i| (i.id, i.payload)).collect();
    assert_eq!(got, want);
}

#[test]
fn concurrent_enqueue_bounded_file() {
    concurrent_enqueue_bounded(Backend::File);
}

#[test]
fn concurrent_enqueue_bounded_sqlite() {
    concurrent_enqueue_bounded(Backend::Sqlite);
}

#[test]
fn concurrent_enqueue_file() {
    concurrent_enqueue(Backend::File);
}

#[test]
fn concurrent_enqueue_sqlite() {
    concurrent_enqueue(Backend::Sqlite);
}

/// Two handles on one spool see each other's writes: ids, keys, dead
/// letters and the remembered bound are the spool's, not the handle's.
fn two_handles(backend: Backend) {
    let h = Harness::new(backend, Some(3));
    let other = Spool::open(&h.path, &h.reopen_options()).expect("a second handle");
    let (q1, q2): (&dyn Queue, &dyn Queue) = (h.q(), other.queue());
    let a = q1.enqueue(b"a", "k").unwrap();
    assert_eq!(
        q2.enqueue(b"b", "k").unwrap(),
        Enqueued {
            id: a.id,
            deduplicated: true,
            ..Default::default()
        },
        "the other handle knows the key"
    );
    let c = q2.enqueue(b"c", "").unwrap();
    assert!(c.id > a.id);
    let d = q1.enqueue(b"d", "").unwrap();
    assert!(d.id > c.id, "ids issued by the other handle are not reused");
    match q2.enqueue(b"e", "") {
        Err(Error::QueueFull {
            max_depth: 3,
            depth: 3,
        }) => {}
        other => panic!("expected QueueFull {{ 3, 3 }}, got {other:?}"),
    }
    assert_eq!(q1.mark_done(&[a.id]).unwrap(), vec![true]);
    let ids = |q: &dyn Queue| -> Vec<u64> { q.drain().unwrap().iter().map(|i| i.id).collect() };
    assert_eq!(ids(q2), vec![c.id, d.id]);
    let e = q2.enqueue(b"e", "k").unwrap();
    assert!(
        !e.deduplicated,
        "the key was released through the other handle"
    );
    assert!(q2.dead_letter(c.id, "x").unwrap());
    assert_eq!(q1.dead_count().unwrap(), 1);
    assert_eq!(q1.requeue(&[c.id]).unwrap(), vec![true]);
    assert!(q2.get(c.id).unwrap().is_some());
    // The bound is the spool's: set through one handle, it is enforced
    // and reported through the other.
    q2.set_max_depth(Some(4)).unwrap();
    q1.enqueue(b"f", "").unwrap();
    match q1.enqueue(b"g", "") {
        Err(Error::QueueFull {
            max_depth: 4,
            depth: 4,
        }) => {}
        other => panic!("expected QueueFull {{ 4, 4 }}, got {other:?}"),
    }
    assert_eq!(q1.high_water().unwrap(), q2.high_water().unwrap());
    assert_eq!(q1.drain().unwrap(), q2.drain().unwrap());
    assert_eq!(q1.uuid().unwrap(), q2.uuid().unwrap());
    assert_eq!(q1.max_depth().unwrap(), Some(4));
}

/// A bound set through one handle is what `max_depth()` and `stats()`
/// report through another that has not written since.
fn bound_read_through_another_handle(backend: Backend) {
    let h = Harness::new(backend, Some(3));
    let other = Spool::open(&h.path, &h.reopen_options()).expect("a second handle");
    assert_eq!(h.q().max_depth().unwrap(), Some(3));
    other.set_max_depth(Some(4)).unwrap();
    // Operations that have no use for the bound, which a backend may run
    // without reading it, come in between and must not hide the change.
    assert_eq!(h.q().size().unwrap(), 0);
    assert_eq!(h.q().mark_done(&[1]).unwrap(), vec![false]);
    assert_eq!(h.q().max_depth().unwrap(), Some(4), "max_depth()");
    assert_eq!(h.q().stats(T0).unwrap().max_depth, Some(4), "stats()");
    other.set_max_depth(None).unwrap();
    assert_eq!(h.q().max_depth().unwrap(), None, "max_depth()");
    // The same for the bound an enqueue enforces.
    for p in [b"a", b"b"] {
        h.q().enqueue(p, "").unwrap();
    }
    other.set_max_depth(Some(2)).unwrap();
    assert!(h.q().get(1).unwrap().is_some());
    assert_eq!(h.q().mark_done(&[99]).unwrap(), vec![false]);
    match h.q().enqueue(b"c", "") {
        Err(Error::QueueFull {
            max_depth: 2,
            depth: 2,
        }) => {}
        other => panic!("expected QueueFull {{ 2, 2 }}, got {other:?}"),
    }
}

#[test]
fn bound_read_through_another_handle_file() {
    bound_read_through_another_handle(Backend::File);
}

#[test]
fn bound_read_through_another_handle_sqlite() {
    bound_read_through_another_handle(Backend::Sqlite);
}

#[test]
fn two_handles_file() {
    two_handles(Backend::File);
}

#[test]
fn two_handles_sqlite() {
    two_handles(Backend::Sqlite);
}
