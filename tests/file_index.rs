//! The NDJSON backend's derived index (`<spool>.idx`): calls read O(1)
//! bytes of the spool file however many items it holds; the index is
//! rebuilt or caught up whenever it is missing, damaged, foreign, stale or
//! behind; readers never write it; streamed batches are all or nothing.

use spool::backend::companion;
use spool::backend::file::io::FileIo;
use spool::backend::file::verify::verify_path;
use spool::backend::file::FileQueue;
use spool::{
    EnqueueOptions, ErrorKind, Evidence, Item, NewItem, OpenMode, OpenOptions, Queue, Record,
    RecordState, Timestamp,
};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn open(path: &Path, mode: OpenMode) -> FileQueue {
    FileQueue::open(path, &OpenOptions::new(mode)).unwrap()
}

fn idx(p: &Path) -> PathBuf {
    companion(p, "idx")
}

/// A spool of `n` items (keys `k<i>` on every tenth), written in one
/// batch.
fn spool_of(dir: &Path, n: usize) -> PathBuf {
    let p = dir.join("q.ndjson");
    let q = open(&p, OpenMode::Create);
    let items: Vec<NewItem> = (0..n)
        .map(|i| {
            let key = if i % 10 == 0 {
                format!("k{i}")
            } else {
                String::new()
            };
            NewItem::new(format!("payload {i} {}", "x".repeat(80)), key)
        })
        .collect();
    q.enqueue_batch(&items, &EnqueueOptions::default()).unwrap();
    p
}

fn ids(q: &dyn Queue) -> Vec<u64> {
    q.drain().unwrap().iter().map(|i| i.id).collect()
}

/// Reads through the seam, counted for one file (by inode).
#[derive(Debug, Default)]
struct Counting {
    ino: AtomicU64,
    bytes: AtomicU64,
}

impl FileIo for Counting {
    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(file, buf, offset)?;
        if file.metadata()?.ino() == self.ino.load(Ordering::SeqCst) {
            self.bytes.fetch_add(n as u64, Ordering::SeqCst);
        }
        Ok(n)
    }
}

impl Counting {
    fn take(&self) -> u64 {
        self.bytes.swap(0, Ordering::SeqCst)
    }
}

/// Bytes of the main file read by: opening + one enqueue (a one-shot
/// `spool enqueue`), `size`, `page(0, 20)`, `get` of an item in the
/// middle, and a keyed enqueue.
fn bytes_read(n: usize) -> [u64; 5] {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), n);
    let io = Arc::new(Counting::default());
    io.ino
        .store(std::fs::metadata(&p).unwrap().ino(), Ordering::SeqCst);
    let open_io = |mode| {
        FileQueue::open_with_io(&p, &OpenOptions::new(mode), io.clone() as Arc<dyn FileIo>).unwrap()
    };
    let q = open_io(OpenMode::ReadWrite);
    q.enqueue(b"one more", "").unwrap();
    let enqueue = io.take();
    drop(q);
    let q = open_io(OpenMode::ReadOnly);
    io.take();
    assert_eq!(q.size().unwrap(), n as u64 + 1);
    let size = io.take();
    assert_eq!(q.page(0, 20).unwrap().len(), 20);
    let page = io.take();
    let mid = n as u64 / 2;
    assert_eq!(q.get(mid).unwrap().unwrap().id, mid);
    let get = io.take();
    drop(q);
    let q = open_io(OpenMode::ReadWrite);
    io.take();
    q.enqueue(b"again", "k10").unwrap();
    let keyed = io.take();
    [enqueue, size, page, get, keyed]
}

#[test]
fn calls_read_a_bounded_number_of_bytes_of_the_spool_file() {
    let small = bytes_read(100);
    let large = bytes_read(20_000);
    eprintln!("bytes read, 100 items: {small:?}; 20,000 items: {large:?}");
    for (what, (s, l)) in ["enqueue", "size", "page", "get", "keyed enqueue"]
        .iter()
        .zip(small.iter().zip(large.iter()))
    {
        // The same work whatever the size: the fingerprint (8 KiB at
        // most), the first line, and the lines asked for.
        assert!(
            *l <= 64 << 10,
            "{what} read {l} bytes of a 20,000-item spool"
        );
        assert!(
            *l <= *s + 1024,
            "{what}: {s} bytes for 100 items, {l} for 20,000"
        );
    }
}

/// The spool reads the same through a fresh writer, a fresh reader and
/// `verify`, and the index is healthy again after the writer.
fn assert_reads(p: &Path, want: &[u64]) {
    let r = open(p, OpenMode::ReadOnly);
    assert_eq!(ids(&r), want, "read-only handle");
    assert_eq!(r.size().unwrap(), want.len() as u64);
    drop(r);
    let w = open(p, OpenMode::ReadWrite);
    assert_eq!(ids(&w), want, "writable handle");
    drop(w);
    let report = verify_path(p).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.contains("the index agrees with the files")),
        "{report:?}"
    );
}

/// The index's write mark (`<spool>.idx-dirty`).
fn mark(p: &Path) -> PathBuf {
    PathBuf::from(format!("{}-dirty", idx(p).display()))
}

/// The index file's bytes: a reader must leave them alone.
fn index_bytes(p: &Path) -> Option<Vec<u8>> {
    std::fs::read(idx(p)).ok()
}

/// `damage` the index of a spool; `verify_damage`: whether `verify`
/// reports it as damage (a missing index, or one from before a restart,
/// is not).
fn damaged_index_is_rebuilt(verify_damage: bool, damage: impl FnOnce(&Path)) {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 50);
    open(&p, OpenMode::ReadWrite).mark_done(&[3, 4]).unwrap();
    let want: Vec<u64> = (1..=50).filter(|i| *i != 3 && *i != 4).collect();
    damage(&p);
    let before = index_bytes(&p);
    // A reader works without it and writes nothing.
    let r = open(&p, OpenMode::ReadOnly);
    assert_eq!(ids(&r), want);
    assert_eq!(r.get(50).unwrap().unwrap().id, 50);
    drop(r);
    assert_eq!(index_bytes(&p), before, "a reader wrote the index");
    // `verify` says so (a missing index is no damage), a writer rebuilds.
    let report = verify_path(&p).unwrap();
    if verify_damage {
        assert!(!report.healthy() && report.repairable(), "{report:?}");
    } else {
        assert!(report.healthy(), "{report:?}");
    }
    let w = open(&p, OpenMode::ReadWrite);
    assert_eq!(w.enqueue(b"next", "").unwrap().id, 51);
    drop(w);
    let mut want = want;
    want.push(51);
    assert_reads(&p, &want);
    assert_eq!(std::fs::read(mark(&p)).unwrap(), b"0");
}

#[test]
fn a_missing_index_is_rebuilt() {
    damaged_index_is_rebuilt(false, |p| std::fs::remove_file(idx(p)).unwrap());
}

#[test]
fn a_truncated_index_is_rebuilt() {
    damaged_index_is_rebuilt(true, |p| {
        let len = std::fs::metadata(idx(p)).unwrap().len();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(idx(p))
            .unwrap();
        f.set_len(len / 2).unwrap();
    });
}

#[test]
fn a_garbage_index_is_rebuilt() {
    damaged_index_is_rebuilt(true, |p| {
        std::fs::write(idx(p), b"this is not a database at all\n").unwrap()
    });
}

#[test]
fn an_index_of_another_version_is_rebuilt() {
    damaged_index_is_rebuilt(true, |p| {
        let c = rusqlite::Connection::open(idx(p)).unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
    });
}

#[test]
fn an_index_written_before_a_restart_is_rebuilt() {
    damaged_index_is_rebuilt(false, |p| {
        let c = rusqlite::Connection::open(idx(p)).unwrap();
        c.execute_batch("UPDATE state SET boot = 'another boot'")
            .unwrap();
    });
}

/// A writer killed while SQLite wrote the index's pages (its journal is
/// kept in memory): rows that lie, and the write mark it set before its
/// first change. Readers do without the index, the next writer rebuilds it.
#[test]
fn an_index_whose_write_mark_is_set_is_not_used() {
    damaged_index_is_rebuilt(false, |p| {
        let c = rusqlite::Connection::open(idx(p)).unwrap();
        c.execute_batch("DELETE FROM pending WHERE id = 7").unwrap();
        std::fs::write(mark(p), b"1").unwrap();
    });
}

#[test]
fn an_index_without_its_write_mark_is_rebuilt() {
    damaged_index_is_rebuilt(true, |p| {
        let c = rusqlite::Connection::open(idx(p)).unwrap();
        c.execute_batch("DELETE FROM pending WHERE id = 7").unwrap();
        std::fs::remove_file(mark(p)).unwrap();
    });
}

/// A writer keeps the index's rollback journal in memory: no journal file
/// is made, and the mark is clear after every call.
#[test]
fn a_writer_leaves_no_journal_file_and_a_clear_mark() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 5);
    let q = open(&p, OpenMode::ReadWrite);
    let journal = PathBuf::from(format!("{}-journal", idx(&p).display()));
    for i in 0..5 {
        q.enqueue(format!("more {i}").as_bytes(), "").unwrap();
        q.mark_done(&[i + 1]).unwrap();
        assert!(!journal.exists());
        assert_eq!(std::fs::read(mark(&p)).unwrap(), b"0");
    }
}

#[test]
fn an_index_that_disagrees_with_the_file_is_found_by_verify_and_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 20);
    // Rows that lie (the checks on the files pass).
    let c = rusqlite::Connection::open(idx(&p)).unwrap();
    c.execute_batch("DELETE FROM pending WHERE id = 7").unwrap();
    drop(c);
    let report = verify_path(&p).unwrap();
    assert!(!report.healthy() && report.repairable(), "{report:?}");
    let out = spool::ops::verify::verify(
        &p,
        &spool::ops::verify::VerifyOptions { repair: true },
        &mut |_| {},
    )
    .unwrap();
    assert!(out.healthy(), "{out:?}");
    assert_eq!(out.rebuilt_index, Some(idx(&p)));
    assert_reads(&p, &(1..=20).collect::<Vec<_>>());
}

#[test]
fn the_index_of_a_copy_is_not_used_for_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let q = open(&p, OpenMode::Create);
    for i in 1..=30 {
        q.enqueue(format!("item {i}").as_bytes(), "").unwrap();
    }
    drop(q);
    let copy = dir.path().join("copy.ndjson");
    for suffix in ["", ".idx", ".meta"] {
        let from = PathBuf::from(format!("{}{suffix}", p.display()));
        let to = PathBuf::from(format!("{}{suffix}", copy.display()));
        std::fs::copy(from, to).unwrap();
    }
    // Change the copy behind the index's back: rewrite it with fewer
    // items (same length is not needed: the copy is another file).
    let text = std::fs::read_to_string(&copy).unwrap();
    let kept: String = text.lines().take(10).map(|l| format!("{l}\n")).collect();
    std::fs::write(&copy, kept).unwrap();
    assert_reads(&copy, &(1..=10).collect::<Vec<_>>());
    // The original is untouched and still indexed.
    assert_reads(&p, &(1..=30).collect::<Vec<_>>());
    // Another spool's index copied over this one's.
    std::fs::copy(idx(&p), idx(&copy)).unwrap();
    let q = open(&copy, OpenMode::ReadWrite);
    let notices = q.take_notices();
    assert!(
        notices.iter().any(|n| n.contains("rebuilt the index")),
        "{notices:?}"
    );
    drop(q);
    assert_reads(&copy, &(1..=10).collect::<Vec<_>>());
}

/// Rewrite the spool file in place — same inode, same length, other
/// bytes: item 2's payload changes one letter.
fn rewrite_item_2_in_place(p: &Path) {
    let text = std::fs::read_to_string(p).unwrap();
    let changed = text.replacen("payload 2 ", "payload 2!", 1);
    assert_ne!(text, changed);
    assert_eq!(text.len(), changed.len());
    std::fs::OpenOptions::new()
        .write(true)
        .open(p)
        .unwrap()
        .write_all(changed.as_bytes())
        .unwrap();
}

#[test]
fn a_file_rewritten_in_place_is_detected_by_its_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 30);
    rewrite_item_2_in_place(&p);
    let r = open(&p, OpenMode::ReadOnly);
    assert_eq!(
        r.get(3).unwrap().unwrap().payload,
        format!("payload 2!{}", "x".repeat(80)).into_bytes()
    );
    drop(r);
    assert!(!verify_path(&p).unwrap().healthy());
    assert_reads(&p, &(1..=30).collect::<Vec<_>>());
}

#[test]
fn a_file_rewritten_in_place_under_an_open_writer_is_detected() {
    // A process that checked the files keeps their fingerprints while
    // `stat` says nothing wrote them; a rewrite of the same length
    // changes what `stat` says, and the next call checks the bytes again.
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 30);
    let q = open(&p, OpenMode::ReadWrite);
    q.deliver(&[(1, Evidence::Done)]).unwrap();
    assert_eq!(
        q.get(3).unwrap().unwrap().payload,
        format!("payload 2 {}", "x".repeat(80)).into_bytes()
    );
    rewrite_item_2_in_place(&p);
    assert_eq!(
        q.get(3).unwrap().unwrap().payload,
        format!("payload 2!{}", "x".repeat(80)).into_bytes()
    );
    let notices = q.take_notices();
    assert!(
        notices.iter().any(|n| n.contains("was rewritten")),
        "{notices:?}"
    );
}

#[test]
fn lines_a_reference_writer_appends_are_taken_in() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 10);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    writeln!(
        f,
        r#"{{"op":"put","id":11,"payload":"from the reference","idempotencyKey":"ref","attempts":2}}"#
    )
    .unwrap();
    writeln!(f, r#"{{"op":"done","id":1}}"#).unwrap();
    writeln!(f, r#"{{"op":"done","id":40}}"#).unwrap();
    drop(f);
    let before = index_bytes(&p);
    let r = open(&p, OpenMode::ReadOnly);
    let want: Vec<u64> = (2..=11).collect();
    assert_eq!(ids(&r), want);
    let it = r.get(11).unwrap().unwrap();
    assert_eq!((it.attempts, it.key.as_str()), (2, "ref"));
    assert_eq!(r.high_water().unwrap(), 40);
    drop(r);
    assert_eq!(index_bytes(&p), before, "a reader wrote the index");
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        report.findings.iter().any(|f| f.message.contains("behind")),
        "{report:?}"
    );
    let w = open(&p, OpenMode::ReadWrite);
    assert!(w.enqueue(b"dup", "ref").unwrap().deduplicated);
    assert_eq!(w.enqueue(b"new", "").unwrap().id, 41);
    drop(w);
    let mut want = want;
    want.push(41);
    assert_reads(&p, &want);
}

#[test]
fn a_long_tail_makes_a_reader_build_a_private_index() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 10);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    let pad = "p".repeat(1000);
    for id in 11..=6000 {
        writeln!(
            f,
            r#"{{"op":"put","id":{id},"payload":"{pad}","idempotencyKey":"","attempts":0}}"#
        )
        .unwrap();
    }
    drop(f);
    let before = index_bytes(&p);
    let r = open(&p, OpenMode::ReadOnly);
    assert_eq!(r.size().unwrap(), 6000);
    assert_eq!(r.page(5990, 100).unwrap().len(), 10);
    drop(r);
    assert_eq!(index_bytes(&p), before, "a reader wrote the index");
    assert_reads(&p, &(1..=6000).collect::<Vec<_>>());
}

#[test]
fn a_crash_between_the_append_and_the_index_update_is_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 10);
    // The index as it was before the later writes: what a crash between
    // the appends and their index updates leaves.
    let old = std::fs::read(idx(&p)).unwrap();
    {
        let q = open(&p, OpenMode::ReadWrite);
        q.enqueue(b"eleven", "k-11").unwrap();
        q.mark_done(&[2]).unwrap();
        q.dead_letter(3, "gone").unwrap();
        q.set_held(&[4], true).unwrap();
    }
    std::fs::write(idx(&p), &old).unwrap();
    let r = open(&p, OpenMode::ReadOnly);
    assert_eq!(ids(&r), vec![1, 4, 5, 6, 7, 8, 9, 10, 11]);
    assert!(r.get(4).unwrap().unwrap().held);
    assert_eq!(r.dead_count().unwrap(), 1);
    drop(r);
    let w = open(&p, OpenMode::ReadWrite);
    assert!(w.enqueue(b"x", "k-11").unwrap().deduplicated);
    drop(w);
    assert_reads(&p, &[1, 4, 5, 6, 7, 8, 9, 10, 11]);
}

#[test]
fn a_left_journal_keeps_readers_off_the_shared_index() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 10);
    let journal = PathBuf::from(format!("{}-journal", idx(&p).display()));
    std::fs::write(&journal, b"").unwrap();
    let before = index_bytes(&p);
    let r = open(&p, OpenMode::ReadOnly);
    assert_eq!(ids(&r), (1..=10).collect::<Vec<_>>());
    drop(r);
    assert_eq!(index_bytes(&p), before);
    assert!(journal.exists(), "a reader removed the journal");
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
    // A writer takes over (SQLite plays back or discards the journal).
    let w = open(&p, OpenMode::ReadWrite);
    w.enqueue(b"eleven", "").unwrap();
    drop(w);
    assert_reads(&p, &(1..=11).collect::<Vec<_>>());
}

#[test]
fn compaction_rebuilds_the_index_for_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 100);
    let other = open(&p, OpenMode::ReadWrite);
    let q = open(&p, OpenMode::ReadWrite);
    q.mark_done(&(1..=90).collect::<Vec<_>>()).unwrap();
    q.dead_letter(95, "dead").unwrap();
    q.compact().unwrap();
    let want: Vec<u64> = (91..=100).filter(|i| *i != 95).collect();
    assert_eq!(ids(&other), want);
    assert_eq!(other.enqueue(b"after", "").unwrap().id, 101);
    drop((q, other));
    let mut want = want;
    want.push(101);
    assert_reads(&p, &want);
}

/// Reads through the seam, per inode.
#[derive(Debug, Default)]
struct PerFile(std::sync::Mutex<std::collections::HashMap<u64, u64>>);

impl FileIo for PerFile {
    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = std::os::unix::fs::FileExt::read_at(file, buf, offset)?;
        *self
            .0
            .lock()
            .unwrap()
            .entry(file.metadata()?.ino())
            .or_default() += n as u64;
        Ok(n)
    }
}

#[test]
fn compaction_carries_the_index_over_without_reading_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 5000);
    let io = Arc::new(PerFile::default());
    let q = FileQueue::open_with_io(
        &p,
        &OpenOptions::new(OpenMode::ReadWrite),
        io.clone() as Arc<dyn FileIo>,
    )
    .unwrap();
    q.mark_done(&(1..=2500).collect::<Vec<_>>()).unwrap();
    q.set_held(&[4000], true).unwrap();
    q.dead_letter(4001, "dead").unwrap();
    q.compact().unwrap();
    let ino = std::fs::metadata(&p).unwrap().ino();
    let len = std::fs::metadata(&p).unwrap().len();
    let read = io.0.lock().unwrap().get(&ino).copied().unwrap_or(0);
    assert!(
        read <= 16 << 10,
        "{read} bytes of the {len}-byte compacted file were read to index it"
    );
    assert!(q.get(4000).unwrap().unwrap().held);
    assert_eq!(q.dead_count().unwrap(), 1);
    drop(q);
    let want: Vec<u64> = (2501..=5000).filter(|i| *i != 4001).collect();
    assert_reads(&p, &want);
    // Without an index to carry over, the compaction builds one.
    std::fs::remove_file(idx(&p)).unwrap();
    let q = open(&p, OpenMode::ReadWrite);
    q.mark_done(&[2501]).unwrap();
    std::fs::remove_file(idx(&p)).unwrap();
    q.compact().unwrap();
    drop(q);
    assert_reads(&p, &want[1..]);
}

fn fails_at(n: usize) -> impl Iterator<Item = spool::Result<NewItem>> {
    (0..n + 5).map(move |i| {
        if i == n {
            Err(spool::Error::InvalidInput(format!("bad line {i}")))
        } else {
            Ok(NewItem::new(
                format!("streamed {i} {}", "s".repeat(200)),
                "",
            ))
        }
    })
}

#[test]
fn a_streamed_batch_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 5);
    let q = open(&p, OpenMode::ReadWrite);
    let len = std::fs::metadata(&p).unwrap().len();
    // Many chunks written, then a malformed record.
    let e = q
        .enqueue_stream(&mut fails_at(20_000), &EnqueueOptions::default())
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Data);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), len, "file cut back");
    assert_eq!(q.size().unwrap(), 5);
    // A depth bound it does not fit.
    q.set_max_depth(Some(1000)).unwrap();
    let e = q
        .enqueue_stream(
            &mut (0..5000).map(|i| Ok(NewItem::new(format!("{i}"), ""))),
            &EnqueueOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Temporary, "{e}");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), len, "file cut back");
    q.set_max_depth(None).unwrap();
    // A whole one dedups against the spool and against itself.
    let r = q
        .enqueue_stream(
            &mut (0..30_000).map(|i| Ok(NewItem::new(format!("{i}"), format!("s{}", i % 20_000)))),
            &EnqueueOptions::default(),
        )
        .unwrap();
    assert_eq!((r.len(), r.stored()), (30_000, 20_000));
    let results: Vec<_> = r.iter().collect();
    assert_eq!(results[20_000].id, results[0].id);
    assert!(results[20_000].deduplicated);
    assert_eq!(q.size().unwrap(), 20_005);
    drop(q);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn a_streamed_import_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 3);
    let q = open(&p, OpenMode::ReadWrite);
    let record = |id: u64, state: RecordState| Record {
        item: Item::new(
            id,
            b"imported".to_vec(),
            String::new(),
            Timestamp::from_secs(1),
        ),
        state,
        dead_at: (state == RecordState::Dead).then(|| Timestamp::from_millis(5)),
        delivery: None,
    };
    let mut bad = (10..2000u64)
        .map(|id| {
            Ok(record(
                id,
                if id % 3 == 0 {
                    RecordState::Dead
                } else {
                    RecordState::Pending
                },
            ))
        })
        .chain(std::iter::once(Err(spool::Error::InvalidInput(
            "bad".into(),
        ))));
    assert!(q.import_stream(&mut bad, &mut |_, _| {}).is_err());
    assert_eq!((q.size().unwrap(), q.dead_count().unwrap()), (3, 0));
    let mut good = (10..2000u64).map(|id| {
        Ok(record(
            id,
            if id % 3 == 0 {
                RecordState::Dead
            } else {
                RecordState::Pending
            },
        ))
    });
    let mut n = 0;
    q.import_stream(&mut good, &mut |_, _| n += 1).unwrap();
    assert_eq!(n, 1990);
    assert_eq!(q.dead_count().unwrap(), 663);
    assert_eq!(q.size().unwrap(), 3 + 1990 - 663);
    drop(q);
    assert!(verify_path(&p).unwrap().healthy());
}

/// Every row of the index at `p` that describes the files (the boot it
/// was written in left out), as text.
fn index_rows(p: &Path) -> Vec<String> {
    let c = rusqlite::Connection::open(idx(p)).unwrap();
    let mut out = Vec::new();
    for (table, order) in [
        ("files", "name"),
        ("pending", "id"),
        ("dead", "id"),
        ("delivered", "id"),
        ("attempts", "attempts"),
        ("clients", "id"),
        ("client_entries", "client, seq"),
        ("state", "one"),
    ] {
        let mut s = c
            .prepare(&format!("SELECT * FROM {table} ORDER BY {order}"))
            .unwrap();
        let names: Vec<String> = s.column_names().iter().map(|n| n.to_string()).collect();
        let mut rows = s.query([]).unwrap();
        while let Some(r) = rows.next().unwrap() {
            let mut line = format!("{table}:");
            for (i, name) in names.iter().enumerate() {
                if name == "boot" {
                    continue;
                }
                let v: rusqlite::types::Value = r.get(i).unwrap();
                line.push_str(&format!(" {name}={v:?}"));
            }
            out.push(line);
        }
    }
    out
}

#[test]
fn a_streamed_batch_leaves_the_index_a_rebuild_gives() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 50);
    let q = open(&p, OpenMode::ReadWrite);
    let same_as_rebuilt = |q: &FileQueue, what: &str| {
        let before = index_rows(&p);
        q.rebuild_index().unwrap();
        let after = index_rows(&p);
        let differ: Vec<_> = before
            .iter()
            .zip(&after)
            .filter(|(a, b)| a != b)
            .take(3)
            .collect();
        assert!(
            differ.is_empty() && before.len() == after.len(),
            "{what}: {} rows, {} rebuilt; {differ:?}",
            before.len(),
            after.len()
        );
    };
    let batch = |q: &FileQueue, items: Vec<NewItem>| {
        q.enqueue_stream(&mut items.into_iter().map(Ok), &EnqueueOptions::default())
            .unwrap()
    };
    // Plain lines, many chunks of the file and many INSERTs.
    batch(
        &q,
        (0..5000)
            .map(|i| NewItem::new(format!("plain \"{i}\" {}", "p".repeat(i % 300)), ""))
            .collect(),
    );
    same_as_rebuilt(&q, "plain");
    // Keys (deduplicated against the spool and the batch), groups.
    let r = batch(
        &q,
        (0..3000)
            .map(|i| {
                let item = NewItem::new(format!("keyed {i}"), format!("k{}", i % 1000));
                if i % 3 == 0 {
                    item.in_group(format!("g{}", i % 7))
                } else {
                    item
                }
            })
            .collect(),
    );
    assert_eq!(r.stored(), 1000 - 5, "k0..k40 by tens are the spool's");
    same_as_rebuilt(&q, "keys and groups");
    // An item that coalesces halfway: the index takes the lines before
    // it in as they are written, and reads the rest back.
    let mut items: Vec<NewItem> = (0..400)
        .map(|i| {
            let mut item = NewItem::new(format!("c {i}"), "");
            if i >= 200 {
                item.coalesce_key = Some(format!("ck{}", i % 3));
            }
            item
        })
        .collect();
    items.push(NewItem::new("after", "k-after"));
    let r = batch(&q, items);
    assert_eq!(r.len(), 401);
    same_as_rebuilt(&q, "coalescing");
    // A spool file whose last line lacks its newline.
    drop(q);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(
        br#"{"op":"put","id":100000,"payload":"no newline","idempotencyKey":"","attempts":0}"#,
    )
    .unwrap();
    drop(f);
    let q = open(&p, OpenMode::ReadWrite);
    batch(
        &q,
        (0..100)
            .map(|i| NewItem::new(format!("n {i}"), ""))
            .collect(),
    );
    same_as_rebuilt(&q, "after a line without newline");
    // Evicting under drop-oldest.
    q.set_max_depth(Some(q.size().unwrap() + 10)).unwrap();
    q.set_on_full(spool::OnFull::DropOldest).unwrap();
    batch(
        &q,
        (0..300)
            .map(|i| NewItem::new(format!("e {i}"), ""))
            .collect(),
    );
    same_as_rebuilt(&q, "evicting");
    drop(q);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn the_index_takes_a_streamed_batch_in_without_reading_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let p = spool_of(dir.path(), 10);
    let io = Arc::new(Counting::default());
    io.ino
        .store(std::fs::metadata(&p).unwrap().ino(), Ordering::SeqCst);
    let q = FileQueue::open_with_io(
        &p,
        &OpenOptions::new(OpenMode::ReadWrite),
        io.clone() as Arc<dyn FileIo>,
    )
    .unwrap();
    q.size().unwrap();
    io.take();
    let before = std::fs::metadata(&p).unwrap().len();
    let r = q
        .enqueue_stream(
            &mut (0..20_000).map(|i| {
                let key = if i % 10 == 0 {
                    format!("b{i}")
                } else {
                    String::new()
                };
                Ok(NewItem::new(format!("batch {i} {}", "b".repeat(100)), key))
            }),
            &EnqueueOptions::default(),
        )
        .unwrap();
    assert_eq!(r.stored(), 20_000);
    let read = io.take();
    let written = std::fs::metadata(&p).unwrap().len() - before;
    // The fingerprint, not the batch's 2.5 MB.
    assert!(
        read <= 64 << 10,
        "{read} bytes read back of a batch of {written} bytes"
    );
    assert_eq!(q.size().unwrap(), 20_010);
    assert_eq!(q.get(10_005).unwrap().unwrap().key, "");
    assert_eq!(q.get(10_011).unwrap().unwrap().key, "b10000");
    drop(q);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}
