//! The crash VFS (tests/sim/crash_vfs.rs) proved on real SQLite
//! databases, then used to crash the SQLite backend and the NDJSON
//! backend's index at every I/O operation of a spool's life (see
//! docs/testing.md, "The crash VFS").
//!
//! Budget: every sweep here is over a fixed list of operation indexes and
//! seeds (no time limit, no randomness outside the seeds): about 8 s of
//! CPU for the whole file.

#[path = "sim/crash_vfs.rs"]
mod crash_vfs;

use crash_vfs::Crash;
use rusqlite::Connection;
use spool::ops::verify::{verify, VerifyOptions};
use spool::{OpenMode, OpenOptions, Spool};
use std::collections::BTreeMap;
use std::path::Path;
use tempfile::TempDir;

/// A scratch directory; on tmpfs when there is one (a real sync costs
/// milliseconds there and proves nothing here: the shim decides what a
/// crash keeps).
fn scratch() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new()
            .prefix("spool-crash-vfs")
            .tempdir_in(shm)
        {
            return d;
        }
    }
    tempfile::tempdir().unwrap()
}

/// A connection as spool opens its SQLite spools: WAL, `synchronous` as
/// given (FULL for spool).
fn open_db(path: &Path, synchronous: &str) -> Connection {
    let conn = Connection::open(path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn.pragma_update(None, "synchronous", synchronous)
        .unwrap();
    conn
}

/// Rows per transaction: a transaction is atomic when all or none of its
/// rows are there.
const ROWS: u32 = 3;

/// Create the table (committed and checkpointed: durable before any crash).
fn create(path: &Path) {
    let conn = open_db(path, "FULL");
    conn.execute_batch(
        "CREATE TABLE t (txn INTEGER NOT NULL, n INTEGER NOT NULL, v BLOB NOT NULL)",
    )
    .unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

/// Insert transaction `txn`: [`ROWS`] rows of 1,500 bytes (a transaction
/// spans pages).
fn insert(conn: &Connection, txn: u32) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let res = (|| {
        for n in 0..ROWS {
            conn.execute(
                "INSERT INTO t (txn, n, v) VALUES (?1, ?2, ?3)",
                rusqlite::params![txn, n, vec![(txn * 7 + n) as u8; 1500]],
            )?;
        }
        conn.execute_batch("COMMIT")
    })();
    if res.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    res
}

/// Reopen the database after a crash: it must pass `integrity_check`;
/// returns the transactions found, each checked whole.
fn committed(path: &Path) -> Vec<u32> {
    let conn = open_db(path, "FULL");
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok", "{}", path.display());
    let mut rows: BTreeMap<u32, Vec<(u32, Vec<u8>)>> = BTreeMap::new();
    let mut stmt = conn.prepare("SELECT txn, n, v FROM t").unwrap();
    let mut q = stmt.query([]).unwrap();
    while let Some(r) = q.next().unwrap() {
        rows.entry(r.get(0).unwrap())
            .or_default()
            .push((r.get(1).unwrap(), r.get(2).unwrap()));
    }
    for (txn, mut got) in rows.clone() {
        got.sort();
        let want: Vec<(u32, Vec<u8>)> = (0..ROWS)
            .map(|n| (n, vec![(txn * 7 + n) as u8; 1500]))
            .collect();
        assert_eq!(got, want, "transaction {txn} is not whole");
    }
    rows.into_keys().collect()
}

/// The ops a closure makes on the watched files, run on a fresh copy.
fn ops_of(setup: impl Fn(&Path), f: impl Fn(&Path)) -> u64 {
    let dir = scratch();
    let db = dir.path().join("t.db");
    let w = crash_vfs::watch(dir.path());
    setup(&db);
    let before = w.ops();
    f(&db);
    w.ops() - before
}

/// The workload: six transactions (10 to 15) with a truncating
/// checkpoint after the third, then the close (which checkpoints and
/// deletes the WAL); returns the transactions acknowledged and attempted.
fn workload(db: &Path, synchronous: &str) -> (Vec<u32>, Vec<u32>) {
    let conn = open_db(db, synchronous);
    let (mut acked, mut tried) = (Vec::new(), Vec::new());
    for txn in 10..16 {
        tried.push(txn);
        if insert(&conn, txn).is_ok() {
            acked.push(txn);
        }
        if txn == 12 {
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }
    drop(conn);
    (acked, tried)
}

/// The table and transactions 1 and 2, committed and closed: what every
/// crash must keep.
fn baseline(db: &Path) {
    create(db);
    let conn = open_db(db, "FULL");
    insert(&conn, 1).unwrap();
    insert(&conn, 2).unwrap();
}

/// One run of the workload that dies after `k` operations and then
/// crashes as `kind` says; returns (acknowledged, attempted, found).
fn crash_run(k: u64, kind: Crash, synchronous: &str) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let dir = scratch();
    let db = dir.path().join("t.db");
    let w = crash_vfs::watch(dir.path());
    baseline(&db);
    w.fail_after(k);
    let (acked, tried) = workload(&db, synchronous);
    w.crash(kind);
    let found = committed(&db);
    (acked, tried, found)
}

#[test]
fn a_process_crash_after_any_op_keeps_every_committed_transaction() {
    let total = ops_of(baseline, |db| {
        workload(db, "FULL");
    });
    assert!(total > 20, "the workload made only {total} operations");
    for k in 0..=total {
        let (acked, tried, found) = crash_run(k, Crash::Process, "FULL");
        for t in [1, 2].iter().chain(&acked) {
            assert!(found.contains(t), "op {k}: transaction {t} lost: {found:?}");
        }
        for t in &found {
            assert!(
                [1, 2].contains(t) || tried.contains(t),
                "op {k}: transaction {t} was never written"
            );
        }
        if k == total {
            assert_eq!(acked, tried, "the whole workload fits in {total} ops");
        }
    }
}

#[test]
fn a_power_loss_keeps_every_synced_transaction() {
    let total = ops_of(baseline, |db| {
        workload(db, "FULL");
    });
    for k in 0..=total {
        for seed in [k, k + 1000] {
            let (acked, tried, found) = crash_run(k, Crash::PowerLoss { seed }, "FULL");
            for t in [1, 2].iter().chain(&acked) {
                assert!(
                    found.contains(t),
                    "op {k} seed {seed}: transaction {t} lost: {found:?}"
                );
            }
            for t in &found {
                assert!([1, 2].contains(t) || tried.contains(t));
            }
        }
    }
}

#[test]
fn a_power_loss_during_an_uncommitted_transaction_leaves_the_previous_state() {
    // The commit of transaction 3 makes `total` operations; the last one
    // is the WAL's sync, which makes it durable. Dying at any earlier one
    // and losing power leaves exactly transactions 1 and 2.
    let total = {
        let dir = scratch();
        let db = dir.path().join("t.db");
        let w = crash_vfs::watch(dir.path());
        baseline(&db);
        let conn = open_db(&db, "FULL");
        let before = w.ops();
        insert(&conn, 3).unwrap();
        w.ops() - before
    };
    assert!(total >= 3, "{total}");
    for k in 0..total {
        for seed in 0..8 {
            let dir = scratch();
            let db = dir.path().join("t.db");
            let w = crash_vfs::watch(dir.path());
            baseline(&db);
            let conn = open_db(&db, "FULL");
            w.fail_after(k);
            assert!(insert(&conn, 3).is_err(), "op {k}: the commit succeeded");
            assert!(w.tripped());
            drop(conn);
            w.crash(Crash::PowerLoss { seed });
            let found = committed(&db);
            if k + 1 < total {
                assert_eq!(found, [1, 2], "op {k} seed {seed}");
            } else {
                // Died at the sync: the frames were written, not synced;
                // either state is right, nothing in between.
                assert!(found == [1, 2] || found == [1, 2, 3], "{found:?}");
            }
        }
    }
}

#[test]
fn without_syncs_a_power_loss_loses_a_committed_transaction() {
    // synchronous=OFF: commits are acknowledged but never synced, so a
    // power loss can take them away. The shim must show it; with FULL the
    // same runs lose nothing (a_power_loss_keeps_every_synced_transaction).
    let mut lost = 0;
    let mut survived = 0;
    for seed in 0..16 {
        let dir = scratch();
        let db = dir.path().join("t.db");
        let w = crash_vfs::watch(dir.path());
        baseline(&db);
        let (acked, _) = workload(&db, "OFF");
        assert_eq!(acked, (10..16).collect::<Vec<_>>());
        w.crash(Crash::PowerLoss { seed });
        let whole = std::panic::catch_unwind(|| committed(&db));
        match whole {
            Ok(found) if acked.iter().all(|t| found.contains(t)) => survived += 1,
            _ => lost += 1,
        }
    }
    assert!(lost > 0, "no power loss lost an unsynced commit");
    assert!(survived + lost == 16);
}

#[test]
fn fail_after_makes_the_very_next_operation_fail() {
    let dir = scratch();
    let db = dir.path().join("t.db");
    let w = crash_vfs::watch(dir.path());
    baseline(&db);
    let conn = open_db(&db, "FULL");
    insert(&conn, 3).unwrap();
    // fail_after(0): the very next operation fails, and does not count.
    let before = w.ops();
    w.fail_after(0);
    let err = insert(&conn, 4).unwrap_err();
    assert!(w.tripped());
    assert_eq!(w.ops(), before);
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::SystemIoFailure),
        "{err}"
    );
    // Reads keep working.
    let n: u32 = conn
        .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 3 * ROWS);
    drop(conn);
    w.crash(Crash::Process);
    assert!(w.tripped(), "tripped stays true until the next fail_after");

    // fail_after(2): two operations succeed, the third fails.
    let conn = open_db(&db, "FULL");
    let before = w.ops();
    w.fail_after(2);
    assert!(!w.tripped());
    assert!(insert(&conn, 5).is_err());
    assert!(w.tripped());
    assert_eq!(w.ops() - before, 2);
    drop(conn);
    w.crash(Crash::Process);
    assert_eq!(committed(&db), [1, 2, 3]);

    // After a crash nothing fails any more.
    let conn = open_db(&db, "FULL");
    insert(&conn, 6).unwrap();
    drop(conn);
    assert_eq!(committed(&db), [1, 2, 3, 6]);
}

#[test]
fn unwatched_files_are_untouched() {
    let watched = scratch();
    let other = scratch();
    let db = other.path().join("t.db");
    let w = crash_vfs::watch(watched.path());
    baseline(&db);
    w.fail_after(0);
    let conn = open_db(&db, "OFF");
    for txn in 3..6 {
        insert(&conn, txn).unwrap();
    }
    drop(conn);
    assert_eq!(w.ops(), 0);
    assert!(!w.tripped());
    let before = std::fs::read(&db).unwrap();
    w.crash(Crash::PowerLoss { seed: 1 });
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(committed(&db), [1, 2, 3, 4, 5]);

    // A dropped watch stops acting on its directory.
    let db = watched.path().join("t.db");
    w.fail_after(0);
    drop(w);
    baseline(&db);
    assert_eq!(committed(&db), [1, 2]);
}
// ---------------------------------------------------------------------
// The SQLite backend under crashes.

/// The payload of item `i`: small, but every third one spills to an
/// overflow page.
fn payload(i: u32) -> Vec<u8> {
    let len = if i % 3 == 2 { 6_000 } else { 200 };
    (0..len).map(|b| (b as u32 * 31 + i) as u8).collect()
}

/// What a spool's life acknowledged.
struct Life {
    /// The acknowledged enqueues: key and id.
    acked: Vec<(String, spool::ItemId)>,
    /// Whether the delivery of the first item was tried, and acknowledged.
    delivery: Option<bool>,
}

/// The spool's life: created, three enqueues, the first item delivered,
/// a truncating checkpoint (the database file written and the WAL
/// restarted, as a closing writer does once the WAL is large), two more
/// enqueues, closed. What a crash stops stays undone.
fn spool_life(path: &Path) -> Life {
    let mut life = Life {
        acked: Vec::new(),
        delivery: None,
    };
    let Ok(s) = Spool::open(path, &OpenOptions::new(OpenMode::Create)) else {
        return life;
    };
    let enqueue = |life: &mut Life, i: u32| {
        let key = format!("k{i}");
        if let Ok(e) = s.enqueue(&payload(i), &key) {
            life.acked.push((key, e.id));
        }
    };
    for i in 0..3 {
        enqueue(&mut life, i);
    }
    if let Some((_, id)) = life.acked.first() {
        life.delivery = Some(s.mark_done(&[*id]).is_ok_and(|d| d == [true]));
    }
    if let Spool::Sqlite(q) = &s {
        let _ = q.checkpoint(
            spool::backend::sqlite::maint::CheckpointMode::Truncate,
            std::time::Duration::ZERO,
        );
    }
    for i in 3..5 {
        enqueue(&mut life, i);
    }
    drop(s);
    life
}

/// Reopen the spool after a crash and check it: `spool verify` finds no
/// damage, every acknowledged enqueue is pending with its id and payload
/// (but the acknowledged delivery), nothing is there twice, and it takes a
/// new enqueue with a fresh id.
fn check_spool(path: &Path, what: &str, life: &Life) {
    let backend = spool::detect(path, None).unwrap();
    let outcome = verify(path, &VerifyOptions { repair: false }, &mut |_| {})
        .unwrap_or_else(|e| panic!("{what}: verify: {e}"));
    assert_eq!(outcome.backend, backend, "{what}");
    // The NDJSON index is derived: one that a crash left behind the files
    // (a compaction that replaced the main file before its index) is
    // reported, and rebuilt by the next writer; nothing else may be wrong.
    let stale_index =
        |f: &spool::verify::Finding| f.repairable && f.file.extension().is_some_and(|e| e == "idx");
    let damage: Vec<_> = outcome
        .report
        .findings
        .iter()
        .filter(|f| f.severity == spool::verify::Severity::Damage && !stale_index(f))
        .collect();
    assert!(damage.is_empty(), "{what}: {:?}", outcome.report);
    let s = Spool::open(path, &OpenOptions::new(OpenMode::ReadWrite))
        .unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
    assert_eq!(s.kind(), backend, "{what}");
    let items = s.drain().unwrap();
    for item in &items {
        let i: u32 = item.key[1..].parse().unwrap();
        assert_eq!(item.payload, payload(i), "{what}: {}'s payload", item.key);
        let copies = items.iter().filter(|o| o.key == item.key).count();
        assert_eq!(copies, 1, "{what}: {} is there {copies} times", item.key);
    }
    for (n, (key, id)) in life.acked.iter().enumerate() {
        let found = items.iter().find(|i| &i.key == key);
        match (n, life.delivery) {
            (0, Some(true)) => {
                assert!(found.is_none(), "{what}: the delivered item came back");
            }
            // A delivery that failed may have been made durable first.
            (0, Some(false)) => {}
            _ => {
                let item = found.unwrap_or_else(|| panic!("{what}: acknowledged {key} lost"));
                assert_eq!(item.id, *id, "{what}");
            }
        }
    }
    let high = life.acked.iter().map(|(_, id)| *id).max();
    let next = s.enqueue(b"after", "after").unwrap();
    if let Some(high) = high {
        assert!(next.id > high, "{what}: id {} reused", next.id);
    }
}

#[test]
fn the_sqlite_backend_survives_a_crash_at_every_operation() {
    let total = {
        let dir = scratch();
        let path = dir.path().join("s.db");
        let w = crash_vfs::watch(dir.path());
        let life = spool_life(&path);
        assert_eq!(life.acked.len(), 5);
        assert_eq!(life.delivery, Some(true));
        w.ops()
    };
    assert!(total > 30, "the spool's life made only {total} operations");
    for k in 0..=total {
        for kind in [Crash::Process, Crash::PowerLoss { seed: k }] {
            let dir = scratch();
            let path = dir.path().join("s.db");
            let w = crash_vfs::watch(dir.path());
            w.fail_after(k);
            let life = spool_life(&path);
            w.crash(kind);
            let what = format!("op {k} of {total}, {kind:?}");
            assert_eq!(
                spool::detect(&path, None).unwrap(),
                spool::BackendKind::Sqlite,
                "{what}"
            );
            check_spool(&path, &what, &life);
        }
    }
}

// ---------------------------------------------------------------------
// The NDJSON backend's index under crashes.

/// An NDJSON spool's life as replay and maintenance see it: created,
/// three enqueues, a failed attempt and a delivery as a replay records
/// them, a compaction (which carries the index over to the new
/// files), two more enqueues, closed. Every index write goes through the
/// crash VFS; the NDJSON files themselves are written whole.
fn ndjson_life(path: &Path) -> Life {
    let mut life = Life {
        acked: Vec::new(),
        delivery: None,
    };
    let Ok(s) = Spool::open(path, &OpenOptions::new(OpenMode::Create)) else {
        return life;
    };
    let enqueue = |life: &mut Life, i: u32| {
        let key = format!("k{i}");
        if let Ok(e) = s.enqueue(&payload(i), &key) {
            life.acked.push((key, e.id));
        }
    };
    for i in 0..3 {
        enqueue(&mut life, i);
    }
    // As a sequential replay records them: a failed attempt on the
    // second item, the first one delivered.
    if let Some((_, second)) = life.acked.get(1) {
        let failed = spool::AttemptUpdate {
            attempts: 1,
            next_retry_at: None,
            last_error: Some("exit status 1".into()),
        };
        let _ = s.record_attempt(*second, &failed);
    }
    if let Some((_, first)) = life.acked.first() {
        let done = s.deliver(&[(*first, spool::Evidence::Exit(0))]);
        life.delivery = Some(done.is_ok_and(|d| d == [true]));
    }
    if let Spool::File(q) = &s {
        let _ = q.compact();
    }
    for i in 3..5 {
        enqueue(&mut life, i);
    }
    drop(s);
    life
}

#[test]
fn the_ndjson_index_survives_a_process_crash_at_every_operation() {
    // Process crashes only: the index is written with synchronous=OFF and
    // trusted after a crash only within the same boot, which a simulated
    // power loss does not change.
    let total = {
        let dir = scratch();
        let path = dir.path().join("s.ndjson");
        let w = crash_vfs::watch(dir.path());
        let life = ndjson_life(&path);
        assert_eq!(life.acked.len(), 5);
        assert_eq!(life.delivery, Some(true));
        w.ops()
    };
    assert!(
        total > 10,
        "the spool's life made only {total} index operations"
    );
    for k in 0..=total {
        let dir = scratch();
        let path = dir.path().join("s.ndjson");
        let w = crash_vfs::watch(dir.path());
        w.fail_after(k);
        let life = ndjson_life(&path);
        w.crash(Crash::Process);
        check_spool(&path, &format!("index op {k} of {total}"), &life);
    }
}

/// What the sweep found at operation 5 (the first write of a new spool,
/// its switch to WAL through a rollback journal) with a power loss of seed
/// 5: the database file had its length but zeros for content, beside the
/// hot journal (the bytes below are that journal's header, as SQLite wrote
/// it: no page saved, the database was empty). It is a SQLite spool, not an
/// NDJSON one with a torn tail; `verify` says a writer will roll the write
/// back, and the first writer does.
#[test]
fn a_new_sqlite_spool_whose_first_write_was_interrupted_stays_sqlite() {
    let dir = scratch();
    let path = dir.path().join("s.db");
    std::fs::write(&path, [0u8; 4096]).unwrap();
    let mut journal = vec![0u8; 512];
    journal[..28].copy_from_slice(&[
        0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7, // magic
        0, 0, 0, 0, // no page records
        0xb4, 0xc7, 0xdd, 0xe3, // checksum nonce
        0, 0, 0, 0, // the database had 0 pages
        0, 0, 2, 0, // sector size 512
        0, 0, 16, 0, // page size 4096
    ]);
    std::fs::write(dir.path().join("s.db-journal"), &journal).unwrap();

    assert_eq!(
        spool::detect(&path, None).unwrap(),
        spool::BackendKind::Sqlite
    );
    let outcome = verify(&path, &VerifyOptions { repair: false }, &mut |_| {}).unwrap();
    assert_eq!(outcome.backend, spool::BackendKind::Sqlite);
    assert!(outcome.healthy(), "{:?}", outcome.report);
    let warning = &outcome.report.findings[0];
    assert_eq!(warning.severity, spool::verify::Severity::Warning);
    assert!(
        warning.message.contains("s.db-journal"),
        "{}",
        warning.message
    );
    // Nothing was written.
    assert_eq!(std::fs::read(&path).unwrap(), [0u8; 4096]);
    // A read-only command may not roll it back, and says what to do.
    let read = Spool::open(&path, &OpenOptions::new(OpenMode::ReadOnly)).and_then(|s| s.drain());
    let e = read.expect_err("a read-only open rolled a hot journal back");
    assert!(
        e.to_string()
            .contains("only a command that writes may roll it back"),
        "{e}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), [0u8; 4096]);

    let s = Spool::open(&path, &OpenOptions::new(OpenMode::ReadWrite)).unwrap();
    assert!(matches!(s, Spool::Sqlite(_)));
    assert!(s.drain().unwrap().is_empty());
    s.enqueue(b"first", "k").unwrap();
    drop(s);
    assert!(!dir.path().join("s.db-journal").exists());
    let outcome = verify(&path, &VerifyOptions { repair: false }, &mut |_| {}).unwrap();
    assert!(outcome
        .report
        .findings
        .iter()
        .all(|f| f.severity == spool::verify::Severity::Info));
}
