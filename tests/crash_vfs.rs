//! The crash VFS (tests/sim/crash_vfs.rs) proved on real SQLite databases.
//!
//! Budget: every sweep here is over a fixed list of operation indexes and
//! seeds (no time limit, no randomness outside the seeds).

#[path = "sim/crash_vfs.rs"]
mod crash_vfs;

use crash_vfs::Crash;
use rusqlite::Connection;
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

/// Two committed transactions, then a workload: six transactions with a
/// checkpoint after the third; returns those acknowledged and attempted.
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
