//! Checkpoint, vacuum and verify on SQLite spools.

use spool::backend::sqlite::maint::CheckpointMode;
use spool::{NewItem, OpenMode, OpenOptions, Queue, SqliteQueue};
use std::time::Duration;

fn spool_with(n: usize) -> (tempfile::TempDir, std::path::PathBuf, SqliteQueue) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.db");
    let q = SqliteQueue::open(&p, &OpenOptions::new(OpenMode::Create)).unwrap();
    let items: Vec<NewItem> = (0..n)
        .map(|i| NewItem::new(vec![b'x'; 200 + i % 7], ""))
        .collect();
    for chunk in items.chunks(100) {
        q.enqueue_batch(chunk, &Default::default()).unwrap();
    }
    (dir, p, q)
}

#[test]
fn passive_checkpoint_moves_every_frame() {
    let (_d, _p, q) = spool_with(300);
    let r = q
        .checkpoint(CheckpointMode::Passive, Duration::from_millis(200))
        .unwrap();
    assert!(r.wal_frames > 0, "{r:?}");
    assert!(r.complete(), "{r:?}");
    let r = q
        .checkpoint(CheckpointMode::Truncate, Duration::from_millis(200))
        .unwrap();
    assert!(r.complete(), "{r:?}");
    assert_eq!(r.wal_bytes_after, 0);
}

#[test]
fn a_reader_holding_the_wal_is_reported_not_hidden() {
    let (_d, p, q) = spool_with(50);
    // Another connection opens a read transaction on the current snapshot.
    let reader = rusqlite::Connection::open(&p).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM morph_offline_queue", [], |r| r.get(0))
        .unwrap();
    // New commits go to the WAL after the reader's snapshot.
    for _ in 0..20 {
        q.enqueue(b"more", "").unwrap();
    }
    let r = q
        .checkpoint(CheckpointMode::Truncate, Duration::from_millis(100))
        .unwrap();
    assert!(r.busy, "{r:?}");
    assert!(!r.complete());
    assert!(r.wal_bytes_after > 0, "the WAL cannot be truncated: {r:?}");
    reader.execute_batch("COMMIT").unwrap();
    let r = q
        .checkpoint(CheckpointMode::Truncate, Duration::from_millis(100))
        .unwrap();
    assert!(r.complete(), "{r:?}");
}

#[test]
fn vacuum_shrinks_a_spool_that_was_drained() {
    let (_d, p, q) = spool_with(3000);
    let ids: Vec<u64> = q.drain().unwrap().iter().map(|i| i.id).collect();
    q.mark_done(&ids[..2900]).unwrap();
    q.checkpoint(CheckpointMode::Truncate, Duration::from_millis(200))
        .unwrap();
    let before = std::fs::metadata(&p).unwrap().len();
    let r = q.vacuum(Duration::from_millis(500)).unwrap();
    assert!(r.bytes_after < r.bytes_before, "{r:?}");
    assert!(std::fs::metadata(&p).unwrap().len() < before);
    assert_eq!(q.size().unwrap(), 100);
    assert_eq!(
        q.high_water().unwrap(),
        3000,
        "vacuum keeps the id sequence"
    );
}

#[test]
fn verify_reports_a_healthy_spool_and_counts() {
    let (_d, _p, q) = spool_with(10);
    q.dead_letter(1, "x").unwrap();
    let r = q.verify().unwrap();
    assert!(r.healthy(), "{r:?}");
    assert_eq!((r.pending, r.dead_letters), (Some(9), Some(1)));
}

#[test]
fn verify_finds_a_damaged_page() {
    let (_d, p, q) = spool_with(2000);
    q.checkpoint(CheckpointMode::Truncate, Duration::from_millis(200))
        .unwrap();
    drop(q);
    // Scribble over the middle of the file (past the header and schema).
    let mut bytes = std::fs::read(&p).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 4096] {
        *b = 0x5a;
    }
    std::fs::write(&p, &bytes).unwrap();
    match SqliteQueue::open(&p, &OpenOptions::new(OpenMode::ReadOnly)) {
        Ok(q) => {
            let r = q.verify();
            match r {
                Ok(r) => assert!(!r.healthy(), "{r:?}"),
                Err(e) => assert_eq!(e.kind(), spool::ErrorKind::Data, "{e}"),
            }
        }
        Err(e) => assert_eq!(e.kind(), spool::ErrorKind::Data, "{e}"),
    }
}

#[test]
fn one_shot_writers_keep_the_wal_small() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.db");
    let wal = dir.path().join("q.db-wal");
    let mut largest = 0;
    for i in 0..300u32 {
        // A new connection per enqueue, as the CLI does.
        let q = SqliteQueue::open(&p, &OpenOptions::new(OpenMode::Create)).unwrap();
        q.enqueue(
            format!("payload number {i} {}", "x".repeat(200)).as_bytes(),
            "",
        )
        .unwrap();
        drop(q);
        largest = largest.max(std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0));
    }
    assert!(largest <= 512 * 1024, "the WAL grew to {largest} bytes");
    let q = SqliteQueue::open(&p, &OpenOptions::new(OpenMode::ReadOnly)).unwrap();
    assert_eq!(q.size().unwrap(), 300);
}

#[test]
fn a_reader_holding_the_wal_does_not_block_writers() {
    let (_d, p, q) = spool_with(10);
    let reader = rusqlite::Connection::open(&p).unwrap();
    reader.execute_batch("BEGIN").unwrap();
    let _: i64 = reader
        .query_row("SELECT count(*) FROM morph_offline_queue", [], |r| r.get(0))
        .unwrap();
    let t = std::time::Instant::now();
    for _ in 0..200 {
        q.enqueue(&[b'y'; 3000], "").unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(20));
    reader.execute_batch("COMMIT").unwrap();
    assert_eq!(q.size().unwrap(), 210);
}
