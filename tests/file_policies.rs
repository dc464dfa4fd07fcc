//! SPEC §9 ledger policies on the NDJSON backend, as the files show them:
//! what a reference reader sees after coalescing and eviction, the index
//! rebuilt from the files, compaction, and a batch that coalesces killed
//! halfway through.

mod common;

use common::reference::{reference_prefix, reference_view};
use spool::backend::companion;
use spool::backend::file::verify::verify_path;
use spool::backend::file::FileQueue;
use spool::{EnqueueOptions, Enqueued, ItemId, NewItem, OnFull, OpenMode, OpenOptions, Queue};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn open(path: &Path, mode: OpenMode) -> FileQueue {
    FileQueue::open(path, &OpenOptions::new(mode)).unwrap()
}

fn item(payload: &str, key: &str, group: Option<&str>, ck: Option<&str>) -> NewItem {
    let mut n = NewItem::new(payload.as_bytes(), key);
    n.group = group.map(str::to_string);
    n.coalesce_key = ck.map(str::to_string);
    n
}

fn one(q: &dyn Queue, n: NewItem) -> Enqueued {
    q.enqueue_batch(&[n], &EnqueueOptions::default())
        .unwrap()
        .pop()
        .unwrap()
}

fn ids(q: &dyn Queue) -> Vec<ItemId> {
    q.drain().unwrap().iter().map(|i| i.id).collect()
}

/// The `put` lines of `path` by id (the last one of each).
fn put_lines(path: &Path) -> BTreeMap<u64, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["op"] == "put" {
            out.insert(v["id"].as_u64().unwrap(), line.to_string());
        }
    }
    out
}

#[test]
fn a_reference_reader_sees_replaced_items_done_and_evicted_ones_gone() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let q = open(&p, OpenMode::Create);
    q.set_max_depth(Some(3)).unwrap();
    q.set_on_full(OnFull::DropOldest).unwrap();
    let a = one(&q, item("a", "ka", Some("g"), None)).id;
    let b = one(&q, item("b", "", None, Some("c"))).id;
    let plain = one(&q, item("plain", "kp", None, None)).id;
    // Replaces b; the spool is at its bound, so it also evicts a.
    let r = q
        .enqueue_batch(
            &[
                item("b2", "", Some("g"), Some("c")),
                item("b3", "kb3", None, Some("c")),
            ],
            &EnqueueOptions::default(),
        )
        .unwrap();
    assert_eq!(r[0].replaced, vec![b]);
    assert!(r[0].evicted.is_empty(), "replacing b made room");
    assert_eq!(r[1].replaced, vec![r[0].id], "the batch's own item");
    assert!(r[1].evicted.is_empty());
    let d = one(&q, item("d", "", None, None));
    assert_eq!(d.evicted, vec![a]);
    let pending = ids(&q);
    assert_eq!(pending, vec![plain, r[1].id, d.id]);

    // The reference's view of the main file is the spool's pending set.
    let view = reference_view(&p);
    assert_eq!(view.keys().copied().collect::<Vec<_>>(), pending);
    assert_eq!(view[&plain], ("plain".into(), "kp".into(), 0));
    assert_eq!(view[&r[1].id], ("b3".into(), "kb3".into(), 0));
    // Replaced and evicted items are gone from it like delivered ones.
    for gone in [a, b, r[0].id] {
        assert!(!view.contains_key(&gone), "{gone} is still in the view");
    }

    // Lines keep the reference's shape; the fields ride at the end, and
    // only when set.
    let lines = put_lines(&p);
    let at = q
        .get(plain)
        .unwrap()
        .unwrap()
        .enqueued_at
        .unwrap()
        .as_secs();
    assert_eq!(
        lines[&plain],
        format!(
            "{},\"enqueuedAt\":{at}}}",
            reference_prefix(plain, "plain", "kp", 0)
        )
    );
    assert!(lines[&r[1].id].starts_with(&reference_prefix(r[1].id, "b3", "kb3", 0)));
    assert!(
        lines[&r[1].id].ends_with(r#","coalesceKey":"c"}"#),
        "{}",
        lines[&r[1].id]
    );
    assert!(!lines[&r[1].id].contains("group"));

    // The evicted item is a dead letter, in the dead-letter file, with its
    // group, key and the eviction error; the replaced ones are not.
    let dead = put_lines(&companion(&p, "dead"));
    assert_eq!(dead.keys().copied().collect::<Vec<_>>(), vec![a]);
    let v: serde_json::Value = serde_json::from_str(&dead[&a]).unwrap();
    assert_eq!(v["lastError"], "evicted: spool full (max-depth 3)");
    assert_eq!(v["group"], "g");
    assert_eq!(v["idempotencyKey"], "ka");
    assert!(dead[&a].starts_with(&reference_prefix(a, "a", "ka", 0)));
    let dl = q.dead_get(a).unwrap().unwrap();
    assert_eq!(dl.item.group.as_deref(), Some("g"));
    assert_eq!(
        q.stats(spool::Timestamp::from_secs(0))
            .unwrap()
            .evicted_total,
        1
    );
    // The count is the dead-letter file's last line; like the dead
    // letter, it names where the main file's part of the enqueue, which
    // commits it, begins (`at`, in the main file of inode `ino`).
    let dead_text = std::fs::read_to_string(companion(&p, "dead")).unwrap();
    let last: serde_json::Value = serde_json::from_str(dead_text.lines().last().unwrap()).unwrap();
    assert_eq!(last["op"], "done");
    assert_eq!(last["id"], 0);
    assert_eq!(last["evicted"], 1);
    assert!(last["at"].is_u64() && last["ino"].is_u64(), "{last}");
    // The policy is in the meta file.
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(companion(&p, "meta")).unwrap()).unwrap();
    assert_eq!(meta["onFull"], "drop-oldest");
    assert_eq!(meta["maxDepth"], 3);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn an_index_rebuilt_from_the_files_finds_the_same_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let (x1, tried, y) = {
        let q = open(&p, OpenMode::Create);
        let tried = one(&q, item("tried", "", None, Some("x"))).id;
        q.set_attempts(tried, 1).unwrap();
        let x1 = one(&q, item("x1", "", Some("g1"), Some("x")));
        assert!(x1.replaced.is_empty(), "tried was attempted");
        // Held items are replaced too.
        q.set_held(&[x1.id], true).unwrap();
        let y = one(&q, item("y", "", Some("g2"), Some("y"))).id;
        let d = one(&q, item("d", "", None, Some("x")));
        assert_eq!(d.replaced, vec![x1.id]);
        q.mark_done(&[d.id]).unwrap();
        let x1 = one(&q, item("x1", "", Some("g1"), Some("x"))).id;
        (x1, tried, y)
    };
    // No index: the next writer builds one from the files.
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    {
        let q = open(&p, OpenMode::ReadWrite);
        assert_eq!(q.get(x1).unwrap().unwrap().group.as_deref(), Some("g1"));
        assert_eq!(
            q.get(y).unwrap().unwrap().coalesce_key.as_deref(),
            Some("y")
        );
        let r = one(&q, item("x-new", "", None, Some("x")));
        assert_eq!(r.replaced, vec![x1], "tried was attempted");
        assert_eq!(ids(&q), vec![tried, y, r.id]);
    }
    // An index of version 1 (no group or coalesce key columns) is not
    // used: it is rebuilt, and finds the candidates too.
    {
        let conn = rusqlite::Connection::open(companion(&p, "idx")).unwrap();
        conn.execute_batch("PRAGMA user_version = 1").unwrap();
    }
    let q = open(&p, OpenMode::ReadWrite);
    let r = one(&q, item("y-new", "", None, Some("y")));
    assert_eq!(r.replaced, vec![y]);
    assert!(q
        .take_notices()
        .iter()
        .any(|n| n.contains("index version 1")));
    let conn = rusqlite::Connection::open(companion(&p, "idx")).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 9);
    // Version 9 points at the retained records the main file holds.
    let delivered = table_columns(&conn, "delivered");
    assert!(delivered.iter().any(|c| c == "done_off"), "{delivered:?}");
    // Version 8 keeps the last error of pending items (`shape --by
    // error`).
    let columns = table_columns(&conn, "pending");
    assert!(columns.iter().any(|c| c == "last_error"), "{columns:?}");
    // Version 7 finds dead letters by key (an import's dedup).
    let dead_key: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'dead_key'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dead_key, 1);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn compaction_keeps_groups_coalesce_keys_the_policy_and_the_eviction_count() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let q = open(&p, OpenMode::Create);
    q.set_max_depth(Some(2)).unwrap();
    q.set_on_full(OnFull::DropOldest).unwrap();
    let a = one(&q, item("a", "", Some("ga"), Some("ca"))).id;
    let b = one(&q, item("b", "kb", Some("gb"), None)).id;
    let c = one(&q, item("c", "", None, Some("cc"))).id;
    let d = one(&q, item("d", "", Some("gd"), Some("cd"))).id;
    assert_eq!(q.dead_count().unwrap(), 2, "a and b were evicted");
    q.mark_done(&[c]).unwrap();
    let before = q.stats(spool::Timestamp::from_secs(0)).unwrap();
    assert_eq!(before.evicted_total, 2);
    q.compact().unwrap();
    for q in [q, open(&p, OpenMode::ReadWrite)] {
        let s = q.stats(spool::Timestamp::from_secs(0)).unwrap();
        assert_eq!(s.evicted_total, 2);
        assert_eq!(s.on_full, OnFull::DropOldest);
        assert_eq!(q.on_full().unwrap(), OnFull::DropOldest);
        assert_eq!(ids(&q), vec![d]);
        let it = q.get(d).unwrap().unwrap();
        assert_eq!(
            (it.group.as_deref(), it.coalesce_key.as_deref()),
            (Some("gd"), Some("cd"))
        );
        let da = q.dead_get(a).unwrap().unwrap().item;
        assert_eq!(
            (da.group.as_deref(), da.coalesce_key.as_deref()),
            (Some("ga"), Some("ca"))
        );
        assert_eq!(
            q.dead_get(b).unwrap().unwrap().item.group.as_deref(),
            Some("gb")
        );
    }
    // With the index rebuilt from the compacted files, too.
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open(&p, OpenMode::ReadWrite);
    assert_eq!(
        q.stats(spool::Timestamp::from_secs(0))
            .unwrap()
            .evicted_total,
        2
    );
    let r = one(&q, item("d2", "", None, Some("cd")));
    assert_eq!(r.replaced, vec![d], "the coalesce key survived compaction");
    // A requeued dead letter keeps its fields; the count only grows.
    q.set_max_depth(None).unwrap();
    assert_eq!(q.requeue(&[a]).unwrap(), vec![true]);
    let back = q.get(a).unwrap().unwrap();
    assert_eq!(back.coalesce_key.as_deref(), Some("ca"));
    assert_eq!(
        q.stats(spool::Timestamp::from_secs(0))
            .unwrap()
            .evicted_total,
        2
    );
    q.compact().unwrap();
    assert_eq!(
        q.stats(spool::Timestamp::from_secs(0))
            .unwrap()
            .evicted_total,
        2
    );
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

const ENV_CHILD: &str = "SPOOL_TEST_POLICY_CHILD";

/// Six items with coalesce keys `k`, `j`, `k`, … and payloads large
/// enough that a batch of them is written in several chunks, to both
/// files when it evicts.
fn child_batch() -> Vec<NewItem> {
    (0..6)
        .map(|i| {
            let ck = if i % 2 == 0 { "k" } else { "j" };
            item(
                &format!("new {i} {}", "x".repeat(30_000)),
                "",
                None,
                Some(ck),
            )
        })
        .collect()
}

/// The child of `a_coalescing_batch_killed_halfway_leaves_none_of_it`: a
/// batch of 6 items that coalesce (and, at the bound, evict), killed by
/// the debug crash point the parent names. Does nothing when run alone.
#[test]
fn child_coalescing_batch() {
    let Ok(path) = std::env::var(ENV_CHILD) else {
        return;
    };
    let q = open(Path::new(&path), OpenMode::ReadWrite);
    let _ = q.enqueue_batch(&child_batch(), &EnqueueOptions::default());
    panic!("the batch was to be killed");
}

fn kill_a_batch(path: &PathBuf, at: &str) {
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_coalescing_batch", "--nocapture"])
        .env(ENV_CHILD, path)
        .env("SPOOL_DEBUG_KILL_AT", at)
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "the child was to be killed at {at}: {out:?}"
    );
}

#[test]
fn a_coalescing_batch_killed_halfway_leaves_none_of_it() {
    if !cfg!(debug_assertions) {
        eprintln!("SKIPPED: the crash points exist in debug builds only");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let (k, j, other) = {
        let q = open(&p, OpenMode::Create);
        q.set_max_depth(Some(4)).unwrap();
        q.set_on_full(OnFull::DropOldest).unwrap();
        let other = one(&q, item("other", "ko", None, None)).id;
        let k = one(&q, item("k", "kk", None, Some("k"))).id;
        let j = one(&q, item("j", "", None, Some("j"))).id;
        (k, j, other)
    };
    let files = |p: &Path| {
        [p.to_path_buf(), companion(p, "dead")].map(|f| std::fs::read(f).unwrap_or_default())
    };
    let before = files(&p);
    for at in ["batch-item:1", "batch-item:3", "batch-item:6"] {
        kill_a_batch(&p, at);
        // Lines of the batch may be in the files, but none counts.
        let q = open(&p, OpenMode::ReadOnly);
        assert_eq!(ids(&q), vec![other, k, j], "killed at {at}");
        assert_eq!(q.dead_count().unwrap(), 0, "killed at {at}");
        assert_eq!(
            q.stats(spool::Timestamp::from_secs(0))
                .unwrap()
                .evicted_total,
            0
        );
        drop(q);
        // The next writer cuts the unfinished batch off (which the
        // reference, knowing no frames, would have read).
        open(&p, OpenMode::ReadWrite).repair_torn_tail().unwrap();
        assert_eq!(files(&p), before, "killed at {at}: the files are as before");
        assert_eq!(
            reference_view(&p).keys().copied().collect::<Vec<_>>(),
            vec![other, k, j]
        );
        let report = verify_path(&p).unwrap();
        assert!(report.healthy(), "{report:?}");
    }
    // Unkilled, the same batch replaces and evicts as it should.
    let q = open(&p, OpenMode::ReadWrite);
    let r = q
        .enqueue_batch(&child_batch(), &EnqueueOptions::default())
        .unwrap();
    assert_eq!(r[0].replaced, vec![k]);
    assert_eq!(r[1].replaced, vec![j]);
    assert_eq!(r[2].replaced, vec![r[0].id]);
    let pending = ids(&q);
    assert_eq!(pending, vec![other, r[4].id, r[5].id]);
    assert!(q.get(other).unwrap().is_some());
    assert_eq!(
        reference_view(&p).keys().copied().collect::<Vec<_>>(),
        pending
    );
}

#[test]
fn a_killed_evicting_batch_leaves_neither_dead_letters_nor_items() {
    if !cfg!(debug_assertions) {
        eprintln!("SKIPPED: the crash points exist in debug builds only");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    {
        let q = open(&p, OpenMode::Create);
        q.set_max_depth(Some(1)).unwrap();
        q.set_on_full(OnFull::DropOldest).unwrap();
        one(&q, item("first", "", None, None));
    }
    let before = std::fs::read(&p).unwrap();
    // Each item of the child's batch evicts the one before it.
    kill_a_batch(&p, "batch-item:5");
    let q = open(&p, OpenMode::ReadWrite);
    assert_eq!(ids(&q), vec![1]);
    assert_eq!(q.dead_count().unwrap(), 0);
    q.repair_torn_tail().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), before);
    assert_eq!(
        std::fs::read(companion(&p, "dead")).unwrap_or_default(),
        b"",
        "the dead-letter part of the batch was cut too"
    );
    let r = one(&q, item("next", "", None, None));
    assert_eq!(r.evicted, vec![1]);
    assert_eq!(
        q.stats(spool::Timestamp::from_secs(0))
            .unwrap()
            .evicted_total,
        1
    );
}

/// The column names of `table` in the index open on `conn`.
fn table_columns(conn: &rusqlite::Connection, table: &str) -> Vec<String> {
    conn.prepare("SELECT name FROM pragma_table_info(?1)")
        .unwrap()
        .query_map([table], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A batch far larger than the writer's 64 KiB chunks that evicts and
/// coalesces its own items (SPEC §9): items whose lines are still in the
/// batch's buffer and items whose lines were already written; every dead
/// letter is the evicted item's, every pending item reads back (the last
/// line too, written without the batch's frame), and an index rebuilt
/// from the files finds the same.
#[test]
fn a_large_batch_evicts_and_coalesces_its_own_items() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let q = open(&p, OpenMode::Create);
    q.set_max_depth(Some(3)).unwrap();
    q.set_on_full(OnFull::DropOldest).unwrap();
    let pad = "x".repeat(200);
    // 2,000 items of ~250 bytes (~500 KiB): every fourth coalesces the
    // one before it with its key.
    let batch: Vec<NewItem> = (0..2000)
        .map(|i| {
            let ck = (i % 4 >= 2).then(|| format!("c{}", i / 4));
            item(
                &format!("p{i} {pad}"),
                &format!("k{i}"),
                None,
                ck.as_deref(),
            )
        })
        .collect();
    let r = q.enqueue_batch(&batch, &EnqueueOptions::default()).unwrap();
    let payload = |i: usize| format!("p{i} {pad}").into_bytes();
    let mut by_id = BTreeMap::new();
    for (i, e) in r.iter().enumerate() {
        by_id.insert(e.id, i);
    }
    let evicted: Vec<ItemId> = r.iter().flat_map(|e| e.evicted.clone()).collect();
    let replaced: Vec<ItemId> = r.iter().flat_map(|e| e.replaced.clone()).collect();
    assert_eq!(replaced.len(), 500, "every fourth replaces the one before");
    assert_eq!(evicted.len(), 2000 - 500 - 3);
    let pending = ids(&q);
    let kept: Vec<ItemId> = r
        .iter()
        .map(|e| e.id)
        .filter(|id| !replaced.contains(id) && !evicted.contains(id))
        .collect();
    assert_eq!(pending, kept);
    assert_eq!(pending.len(), 3, "the bound holds");
    for id in &pending {
        assert_eq!(q.get(*id).unwrap().unwrap().payload, payload(by_id[id]));
    }
    let dead = q.dead_page(0, 10_000).unwrap();
    assert_eq!(
        dead.iter().map(|d| d.item.id).collect::<Vec<_>>(),
        evicted,
        "dead letters in the order evicted"
    );
    for d in &dead {
        assert_eq!(
            d.item.payload,
            payload(by_id[&d.item.id]),
            "item {}",
            d.item.id
        );
        assert!(d.item.last_error.as_deref().unwrap().contains("evicted"));
    }
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open(&p, OpenMode::ReadWrite);
    assert_eq!(ids(&q), pending);
    assert_eq!(q.dead_count().unwrap(), evicted.len() as u64);
    assert_eq!(
        q.stats(spool::Timestamp::now()).unwrap().evicted_total,
        evicted.len() as u64
    );
}
