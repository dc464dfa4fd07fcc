//! NDJSON backend: reference fixtures, torn tails, corruption, compaction
//! and injected I/O faults.

use spool::backend::file::io::{FileIo, RealIo};
use spool::backend::file::FileQueue;
use spool::{Error, ErrorKind, OpenMode, OpenOptions, Queue};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/ndjson")
        .join(name)
}

/// Copy a fixture into a fresh temp dir; returns the dir guard and path.
fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join(name);
    std::fs::copy(fixture(name), &dst).unwrap();
    (dir, dst)
}

fn open(path: &Path, mode: OpenMode) -> spool::Result<FileQueue> {
    FileQueue::open(path, &OpenOptions::new(mode))
}

fn ids(q: &dyn Queue) -> Vec<u64> {
    q.drain().unwrap().iter().map(|i| i.id).collect()
}

#[test]
fn tombstones_replay_last_write_wins() {
    let (_d, p) = copy_fixture("tombstones.ndjson");
    let q = open(&p, OpenMode::ReadOnly).unwrap();
    let items = q.drain().unwrap();
    assert_eq!(items.iter().map(|i| i.id).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(items[0].attempts, 2);
    assert_eq!(items[0].enqueued_at, None);
    assert_eq!(items[1].key, "op-3");
    assert_eq!(q.high_water().unwrap(), 4);
    // Keys of done items are released, pending ones dedup.
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    assert!(q.enqueue(b"again", "op-3").unwrap().deduplicated);
    let fresh = q.enqueue(b"again", "op-1").unwrap();
    assert!(!fresh.deduplicated);
    assert_eq!(fresh.id, 5, "ids continue above tombstoned 4");
}

#[test]
fn high_water_trailer_is_honoured() {
    let (_d, p) = copy_fixture("high_water_trailer.ndjson");
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    assert_eq!(ids(&q), vec![2, 3]);
    assert_eq!(q.enqueue(b"x", "").unwrap().id, 10);
}

#[test]
fn control_characters_and_escapes_round_trip() {
    let (_d, p) = copy_fixture("control_chars.ndjson");
    let q = open(&p, OpenMode::ReadOnly).unwrap();
    let items = q.drain().unwrap();
    assert_eq!(
        items[0].payload,
        b"tab\there \x01\x02\x1f bell\x07 nul\x00 end".to_vec()
    );
    assert_eq!(items[0].key, "k\u{1}");
    assert_eq!(
        items[1].payload,
        b"quote \" backslash \\ slash / newline \n cr \r".to_vec()
    );
    assert_eq!(
        String::from_utf8(items[2].payload.clone()).unwrap(),
        "unicode é ✓ \u{2028} 😀"
    );
    assert_eq!(items[2].key, "\"quoted\\key\"");
    assert_eq!(items[2].attempts, 3);
    // Rewriting them through compaction keeps every byte.
    let before = q.drain().unwrap();
    drop(q);
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    q.compact().unwrap();
    drop(q);
    let q = open(&p, OpenMode::ReadOnly).unwrap();
    assert_eq!(q.drain().unwrap(), before);
}

#[test]
fn torn_tail_is_reported_read_only_and_cut_before_the_next_append() {
    let (_d, p) = copy_fixture("torn_tail.ndjson");
    let original = std::fs::read(&p).unwrap();
    let q = open(&p, OpenMode::ReadOnly).unwrap();
    assert_eq!(ids(&q), vec![1, 2]);
    let notices = q.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(notices[0].contains("torn trailing line 3"), "{notices:?}");
    let torn = q.file_stats().unwrap().torn_tail.unwrap();
    assert_eq!(torn.line, 3);
    drop(q);
    assert_eq!(
        std::fs::read(&p).unwrap(),
        original,
        "read-only open must not heal"
    );

    let q = open(&p, OpenMode::ReadWrite).unwrap();
    let e = q.enqueue(b"three", "").unwrap();
    assert_eq!(e.id, 3);
    drop(q);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(
        !text.contains("half a li"),
        "torn bytes must be cut: {text}"
    );
    assert!(text.ends_with("\n"));
    let q = open(&p, OpenMode::ReadOnly).unwrap();
    assert_eq!(ids(&q), vec![1, 2, 3]);
    assert!(q.take_notices().is_empty());
}

#[test]
fn corrupt_middle_line_is_an_error_and_the_file_is_untouched() {
    let (_d, p) = copy_fixture("corrupt_middle.ndjson");
    let original = std::fs::read(&p).unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite, OpenMode::Create] {
        let err = open(&p, mode).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Data);
        assert!(matches!(err, Error::Corrupt { line: Some(2), .. }), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
    }
    assert_eq!(std::fs::read(&p).unwrap(), original);
    assert!(!spool::backend::companion(&p, "meta").exists());
}

/// Cut a good spool at every byte of its last line: each prefix opens,
/// keeps every earlier record, and accepts a new append cleanly.
#[test]
fn every_truncation_of_the_last_line_opens() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.ndjson");
    {
        let q = open(&good, OpenMode::Create).unwrap();
        q.enqueue(b"first", "a").unwrap();
        q.enqueue(b"second \"quoted\" \x01", "b").unwrap();
        q.enqueue(b"\xff\xfebinary third", "c").unwrap();
    }
    let bytes = std::fs::read(&good).unwrap();
    let last_start = bytes[..bytes.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    for cut in last_start..bytes.len() {
        let p = dir.path().join(format!("cut-{cut}.ndjson"));
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let q = open(&p, OpenMode::ReadWrite).unwrap();
        let got = ids(&q);
        // The last line parses only when every byte but the newline is there.
        let complete = cut == bytes.len() - 1;
        assert_eq!(
            got,
            if complete { vec![1, 2, 3] } else { vec![1, 2] },
            "cut at {cut}"
        );
        let next = q.enqueue(b"after", "").unwrap();
        assert_eq!(
            next.id,
            if complete { 4 } else { 3 },
            "cut at {cut}: ids continue"
        );
        drop(q);
        let q = open(&p, OpenMode::ReadOnly).unwrap();
        assert_eq!(q.size().unwrap(), if complete { 4 } else { 3 });
        assert!(q.take_notices().is_empty(), "cut at {cut}: no damage left");
    }
}

/// A batch is one commit: cut the file at every byte of a batch append
/// (as a crash in the middle of the write would) and at every cut the
/// spool shows none of the batch, or all of it once its last line is
/// whole; the next write cuts the unfinished part off, and `verify`
/// reports it as repairable until then. NUL bytes after the cut (a crash
/// before the data reached the disk) change nothing.
#[test]
fn a_batch_cut_at_any_byte_is_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.ndjson");
    let before;
    {
        let q = open(&good, OpenMode::Create).unwrap();
        q.enqueue(b"first", "a").unwrap();
        q.enqueue(b"second", "").unwrap();
        before = std::fs::metadata(&good).unwrap().len() as usize;
        let batch: Vec<spool::NewItem> = (0..3)
            .map(|i| spool::NewItem::new(format!("b{i}\x01\""), format!("k{i}")))
            .collect();
        q.enqueue_batch(&batch, &Default::default()).unwrap();
    }
    let bytes = std::fs::read(&good).unwrap();
    for cut in before..bytes.len() {
        // NUL bytes after the cuts around line ends.
        let near_line_end =
            bytes[cut.saturating_sub(1)..(cut + 2).min(bytes.len())].contains(&b'\n');
        let nuls: &[usize] = if near_line_end { &[0, 37] } else { &[0] };
        for &nul in nuls {
            let p = dir.path().join(format!("cut-{cut}-{nul}.ndjson"));
            let mut text = bytes[..cut].to_vec();
            text.extend(std::iter::repeat_n(0u8, nul));
            std::fs::write(&p, &text).unwrap();
            let meta = spool::backend::companion(&good, "meta");
            std::fs::copy(&meta, spool::backend::companion(&p, "meta")).unwrap();
            // Complete once every byte of the last line but its newline
            // is there.
            let whole = cut == bytes.len() || (cut == bytes.len() - 1 && nul == 0);
            let want = if whole { 5 } else { 2 };
            let q = open(&p, OpenMode::ReadOnly).unwrap();
            assert_eq!(q.size().unwrap(), want, "cut at {cut} +{nul} NULs");
            drop(q);
            let report = spool::backend::file::verify::verify_path(&p).unwrap();
            let damaged = nul > 0 || (cut > before && !whole);
            assert_eq!(
                report.findings.iter().any(|f| f.repairable),
                damaged,
                "cut at {cut} +{nul}: {:?}",
                report.findings
            );
            assert!(
                report
                    .findings
                    .iter()
                    .all(|f| f.repairable || f.severity != spool::verify::Severity::Damage),
                "cut at {cut} +{nul}: {:?}",
                report.findings
            );
            let q = open(&p, OpenMode::ReadWrite).unwrap();
            let next = q.enqueue(b"after", "k0").unwrap();
            assert_eq!(
                next.deduplicated, whole,
                "cut at {cut}: k0 is pending only if the batch is"
            );
            drop(q);
            let q = open(&p, OpenMode::ReadOnly).unwrap();
            assert_eq!(q.size().unwrap(), if whole { 5 } else { 3 }, "cut at {cut}");
            assert!(q.take_notices().is_empty(), "cut at {cut}: no damage left");
        }
    }
}

/// A file that is not a spool — what a mistyped `--spool` points at — is
/// refused by every open, and nothing is written to it or beside it.
#[test]
fn a_file_that_is_not_a_spool_is_never_touched() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("notes.txt", &b"my important notes\nsecond line\n"[..]),
        ("one-line.txt", b"my important notes\n"),
        ("no-newline.txt", b"my important notes"),
        (
            "array.json",
            b"[{\"op\":\"put\",\"id\":1,\"payload\":\"a\"}]\n",
        ),
        ("config.json", b"{\"debug\": true}"),
        ("binary.bin", b"\x7fELF\x02\x01\x01\x00\xff\xfe\n\x00"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite, OpenMode::Create] {
            let err = open(&p, mode).unwrap_err();
            assert!(matches!(err, Error::NotASpool { .. }), "{name}: {err}");
            assert_eq!(err.kind(), ErrorKind::Data);
        }
        let deferred = FileQueue::open(
            &p,
            &OpenOptions {
                defer_load: true,
                ..OpenOptions::new(OpenMode::ReadWrite)
            },
        );
        assert!(matches!(deferred, Err(Error::NotASpool { .. })), "{name}");
        assert_eq!(std::fs::read(&p).unwrap(), text, "{name}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 6, "no companion file was created");
}

#[test]
fn compaction_keeps_the_high_water_mark_across_repeated_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    {
        let q = open(&p, OpenMode::Create).unwrap();
        q.enqueue(b"1", "").unwrap();
        q.enqueue(b"2", "").unwrap();
        q.mark_done(&[2]).unwrap();
        let r = q.compact().unwrap();
        assert_eq!(r.pending, 1);
        assert_eq!(r.high_water, 2);
        assert!(r.bytes_after < r.bytes_before);
    }
    for _ in 0..2 {
        let q = open(&p, OpenMode::ReadWrite).unwrap();
        q.compact().unwrap();
    }
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(
        text.ends_with("{\"op\":\"done\",\"id\":2}\n"),
        "trailer: {text}"
    );
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    assert_eq!(
        q.enqueue(b"3", "").unwrap().id,
        3,
        "id 2 must never be reissued"
    );
}

#[test]
fn compaction_keeps_dead_letters_keys_and_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let q = open(&p, OpenMode::Create).unwrap();
    for i in 0..10 {
        q.enqueue(format!("p{i}").as_bytes(), &format!("k{i}"))
            .unwrap();
    }
    q.set_attempts(3, 4).unwrap();
    q.dead_letter(5, "gave up").unwrap();
    q.mark_done(&[1, 2, 10]).unwrap();
    q.set_held(&[4], true).unwrap();
    let pending = q.drain().unwrap();
    let dead = q.dead_page(0, 100).unwrap();
    q.compact().unwrap();
    assert_eq!(q.drain().unwrap(), pending);
    drop(q);
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    assert_eq!(q.drain().unwrap(), pending);
    assert_eq!(q.dead_page(0, 100).unwrap(), dead);
    assert!(q.enqueue(b"dup", "k3").unwrap().deduplicated);
    assert_eq!(q.enqueue(b"new", "k10").unwrap().id, 11);
}

fn deferred(path: &Path) -> FileQueue {
    let opts = OpenOptions {
        defer_load: true,
        ..OpenOptions::new(OpenMode::ReadWrite)
    };
    FileQueue::open(path, &opts).unwrap()
}

#[test]
fn compaction_copies_each_live_item_s_last_line_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let lines = [
        r#"{"op":"put","id":1,"payload":"a","idempotencyKey":"","attempts":0}"#,
        "",
        r#"{"op":"put","id":2,"payload":"b","idempotencyKey":"k2","attempts":0}"#,
        // CRLF on a kept line; the copy ends with a plain newline.
        "{\"op\":\"put\",\"id\":3,\"payload\":{\"base64\":\"/w==\"},\"idempotencyKey\":\"k3\",\"attempts\":0}\r",
        r#"{"op":"done","id":2}"#,
        // A later version of id 1, with a field spool does not know: kept byte for byte.
        r#"{ "op": "put", "id": 1, "payload": "a", "attempts": 3, "x-origin": "edge-7" }"#,
        r#"{"op":"put","id":5,"payload":"e","idempotencyKey":"","attempts":0}"#,
        r#"{"op":"done","id":5}"#,
        r#"{"op":"done","id":7}"#,
    ];
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    let before = open(&p, OpenMode::ReadOnly).unwrap().drain().unwrap();

    let q = deferred(&p);
    let r = q.compact().unwrap();
    assert_eq!(
        (r.records_before, r.records_after, r.pending, r.high_water),
        (8, 3, 2, 7)
    );
    assert_eq!(r.bytes_after, std::fs::metadata(&p).unwrap().len());
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(
        text,
        [
            lines[5],
            "{\"op\":\"put\",\"id\":3,\"payload\":{\"base64\":\"/w==\"},\"idempotencyKey\":\"k3\",\"attempts\":0}",
            lines[8],
            "",
        ]
        .join("\n"),
        "one line per item, in id order, then the high-water mark"
    );
    let r = spool::backend::file::verify::verify_path(&p).unwrap();
    assert!(r.healthy(), "{r:?}");
    // The same items, and the handle reads the new file.
    assert_eq!(q.drain().unwrap(), before);
    assert_eq!(before[0].attempts, 3);
    assert_eq!(before[1].payload, b"\xff");
    assert!(q.enqueue(b"x", "k3").unwrap().deduplicated);
    assert_eq!(q.enqueue(b"x", "").unwrap().id, 8);
}

#[test]
fn compaction_checks_every_line_and_changes_nothing_on_damage() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    {
        let q = open(&p, OpenMode::Create).unwrap();
        for i in 0..5 {
            q.enqueue(format!("p{i}").as_bytes(), "").unwrap();
        }
        q.dead_letter(4, "no").unwrap();
    }
    let good = std::fs::read(&p).unwrap();
    let dead = std::fs::read(dir.path().join("q.ndjson.dead")).unwrap();
    // Damage in lines that compaction would drop: a superseded put whose
    // base64 payload is invalid, a done line whose id is not a number.
    for bad in [
        r#"{"op":"put","id":1,"payload":{"base64":"***"}}"#,
        r#"{"op":"done","id":"1"}"#,
    ] {
        let mut text = good.clone();
        text.extend_from_slice(bad.as_bytes());
        text.extend_from_slice(b"\n{\"op\":\"done\",\"id\":1}\n");
        std::fs::write(&p, &text).unwrap();
        let q = deferred(&p);
        let e = q.compact().unwrap_err();
        assert!(
            matches!(e, Error::Corrupt { line: Some(7), .. }),
            "{bad}: {e}"
        );
        assert_eq!(std::fs::read(&p).unwrap(), text, "{bad}");
        assert_eq!(
            std::fs::read(dir.path().join("q.ndjson.dead")).unwrap(),
            dead
        );
        // A normal open says the same.
        let e = open(&p, OpenMode::ReadOnly).unwrap_err();
        assert!(matches!(e, Error::Corrupt { line: Some(7), .. }), "{e}");
    }
}

#[test]
fn compaction_of_a_deferred_open_drops_a_torn_tail_and_says_so() {
    let (_d, p) = copy_fixture("torn_tail.ndjson");
    let expected = open(&p, OpenMode::ReadOnly).unwrap().drain().unwrap();
    let q = deferred(&p);
    let r = q.compact().unwrap();
    let torn = r.dropped_torn_tail.unwrap();
    assert_eq!(torn.line, 3);
    let notices = q.take_notices();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("cut a torn trailing line (line 3")),
        "{notices:?}"
    );
    assert_eq!(q.drain().unwrap(), expected);
    assert!(open(&p, OpenMode::ReadOnly)
        .unwrap()
        .take_notices()
        .is_empty());
}

#[test]
fn a_second_handle_sees_appends_and_follows_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let a = open(&p, OpenMode::Create).unwrap();
    let b = open(&p, OpenMode::ReadWrite).unwrap();
    a.enqueue(b"from a", "k").unwrap();
    assert!(b.enqueue(b"from b", "k").unwrap().deduplicated);
    b.enqueue(b"b2", "").unwrap();
    a.mark_done(&[1]).unwrap();
    a.compact().unwrap();
    assert_eq!(ids(&b), vec![2]);
    assert_eq!(b.enqueue(b"b3", "").unwrap().id, 3);
    assert_eq!(ids(&a), vec![2, 3]);
    b.dead_letter(2, "boom").unwrap();
    assert_eq!(a.dead_count().unwrap(), 1);
    assert_eq!(ids(&a), vec![3]);
    a.requeue(&[2]).unwrap();
    assert_eq!(ids(&b), vec![2, 3]);
    assert_eq!(b.dead_count().unwrap(), 0);
}

#[test]
fn a_crash_between_dead_letter_appends_keeps_the_item_dead() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    {
        let q = open(&p, OpenMode::Create).unwrap();
        q.enqueue(b"x", "kx").unwrap();
    }
    // The dead-letter file got its line; the main file's done never came.
    let dead = spool::backend::companion(&p, "dead");
    std::fs::write(
        &dead,
        "{\"op\":\"put\",\"id\":1,\"payload\":\"x\",\"idempotencyKey\":\"kx\",\"attempts\":5,\"lastError\":\"e\",\"deadAt\":1}\n",
    )
    .unwrap();
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    assert_eq!(q.size().unwrap(), 0);
    assert_eq!(q.dead_count().unwrap(), 1);
    assert!(
        !q.enqueue(b"y", "kx").unwrap().deduplicated,
        "a dead item releases its key"
    );
}

/// An I/O seam that fails on command.
#[derive(Debug, Default)]
struct Faulty {
    /// Fail the write call with this many calls left (0 = off).
    fail_write_in: AtomicUsize,
    /// Write only half of the buffer on the next write, then fail.
    short_write: Mutex<bool>,
    fail_sync_in: AtomicUsize,
    /// Fail every in-kernel copy.
    fail_copy: std::sync::atomic::AtomicBool,
}

fn countdown(c: &AtomicUsize) -> bool {
    let v = c.load(Ordering::SeqCst);
    if v == 0 {
        return false;
    }
    c.store(v - 1, Ordering::SeqCst);
    v == 1
}

impl FileIo for Faulty {
    fn write(&self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        let mut short = self.short_write.lock().unwrap();
        if *short {
            *short = false;
            let half = buf.len() / 2;
            RealIo.write(file, &buf[..half])?;
            // The next call hits a full disk.
            self.fail_write_in.store(1, Ordering::SeqCst);
            return Ok(half);
        }
        if countdown(&self.fail_write_in) {
            return Err(io::Error::from_raw_os_error(libc_enospc()));
        }
        RealIo.write(file, buf)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        if countdown(&self.fail_sync_in) {
            return Err(io::Error::from_raw_os_error(5));
        }
        RealIo.sync(file)
    }

    fn copy(&self, from: &File, offset: u64, to: &mut File, len: usize) -> io::Result<usize> {
        if self.fail_copy.load(Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(5));
        }
        RealIo.copy(from, offset, to, len)
    }
}

fn libc_enospc() -> i32 {
    28
}

fn faulty_spool() -> (tempfile::TempDir, PathBuf, Arc<Faulty>, FileQueue) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let io = Arc::new(Faulty::default());
    let q = FileQueue::open_with_io(&p, &OpenOptions::new(OpenMode::Create), io.clone()).unwrap();
    q.enqueue(b"committed", "c").unwrap();
    (dir, p, io, q)
}

fn assert_only_committed(p: &Path) {
    let q = open(p, OpenMode::ReadOnly).unwrap();
    let items = q.drain().unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].payload, b"committed");
    assert!(
        q.take_notices().is_empty(),
        "no torn tail may be left behind"
    );
}

#[test]
fn write_error_is_reported_and_leaves_nothing() {
    let (_d, p, io, q) = faulty_spool();
    io.fail_write_in.store(1, Ordering::SeqCst);
    let err = q.enqueue(b"lost", "").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert_only_committed(&p);
    // The same handle recovers and keeps ids unique.
    let next = q.enqueue(b"next", "").unwrap();
    assert_eq!(next.id, 2);
}

#[test]
fn short_write_is_reported_and_rolled_back() {
    let (_d, p, io, q) = faulty_spool();
    *io.short_write.lock().unwrap() = true;
    let err = q
        .enqueue_batch(
            &[
                spool::NewItem::new(b"a".to_vec(), ""),
                spool::NewItem::new(b"b".to_vec(), ""),
            ],
            &Default::default(),
        )
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert_only_committed(&p);
}

#[test]
fn fsync_failure_is_reported_and_rolled_back() {
    let (_d, p, io, q) = faulty_spool();
    io.fail_sync_in.store(1, Ordering::SeqCst);
    let err = q.mark_done(&[1]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("fsync"), "{err}");
    assert_only_committed(&p);
    assert_eq!(q.size().unwrap(), 1);
}

#[test]
fn fsync_failure_on_the_dead_letter_file_keeps_the_item_pending() {
    let (_d, p, io, q) = faulty_spool();
    io.fail_sync_in.store(1, Ordering::SeqCst);
    assert!(q.dead_letter(1, "boom").is_err());
    assert_eq!(q.size().unwrap(), 1);
    assert_eq!(q.dead_count().unwrap(), 0);
    assert_only_committed(&p);
}

#[test]
fn compaction_failure_leaves_the_spool_as_it_was() {
    let (_d, p, io, q) = faulty_spool();
    q.enqueue(b"gone", "").unwrap();
    q.mark_done(&[2]).unwrap();
    let before = std::fs::read(&p).unwrap();
    io.fail_sync_in.store(1, Ordering::SeqCst);
    assert!(q.compact().is_err());
    assert_eq!(std::fs::read(&p).unwrap(), before);
    assert_only_committed(&p);
}

#[test]
fn a_failed_copy_during_compaction_leaves_the_spool_as_it_was() {
    let (_d, p, io, q) = faulty_spool();
    // A long run of adjacent live lines: compaction copies it in the kernel.
    let payload = "x".repeat(300);
    for _ in 0..400 {
        q.enqueue(payload.as_bytes(), "").unwrap();
    }
    let drained = q.drain().unwrap();
    let before = std::fs::read(&p).unwrap();
    io.fail_copy.store(true, Ordering::SeqCst);
    assert!(q.compact().is_err());
    assert_eq!(std::fs::read(&p).unwrap(), before);
    assert_eq!(q.drain().unwrap(), drained);
    io.fail_copy.store(false, Ordering::SeqCst);
    let r = q.compact().unwrap();
    assert_eq!(r.pending, 401);
    assert_eq!(q.drain().unwrap(), drained);
}

#[test]
fn garbage_ratio_reflects_dead_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let q = open(&p, OpenMode::Create).unwrap();
    for _ in 0..4 {
        q.enqueue(b"x", "").unwrap();
    }
    q.mark_done(&[1, 2, 3]).unwrap();
    let s = q.file_stats().unwrap();
    assert_eq!(s.records, 7);
    assert_eq!(s.live, 1);
    assert!((s.garbage_ratio - 6.0 / 7.0).abs() < 1e-9);
    q.compact().unwrap();
    let s = q.file_stats().unwrap();
    assert_eq!(s.records, 1, "id 4 is both the live item and the mark");
    q.mark_done(&[4]).unwrap();
    q.compact().unwrap();
    let s = q.file_stats().unwrap();
    assert_eq!(s.records, 1, "only the high-water trailer");
    assert_eq!(q.enqueue(b"y", "").unwrap().id, 5);
}

/// A requeue cut between its two appends leaves the item in both files
/// (a live `put` in the main file, the record in the dead-letter file):
/// it is a dead letter. Purging it must not bring the `put` back to
/// life, even for an index built again from the files. (Found by the
/// simulator: the purged dead letter came back as pending.)
#[test]
fn a_purged_dead_letter_stays_gone_after_a_cut_requeue() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("spool.ndjson");
    let q = open(&path, OpenMode::Create).unwrap();
    let id = q.enqueue(b"x", "").unwrap().id;
    assert!(q.dead_letter(id, "HTTP 400").unwrap());
    drop(q);
    // What the requeue's first append (the main file's) left behind.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    writeln!(
        f,
        r#"{{"op":"put","id":{id},"payload":"x","idempotencyKey":"","attempts":0}}"#
    )
    .unwrap();
    drop(f);
    let q = open(&path, OpenMode::ReadWrite).unwrap();
    assert_eq!(ids(&q), Vec::<u64>::new(), "the dead-letter file wins");
    assert_eq!(q.purge(&[id]).unwrap(), [true]);
    drop(q);
    std::fs::remove_file(spool::backend::companion(&path, "idx")).unwrap();
    let q = open(&path, OpenMode::ReadWrite).unwrap();
    assert_eq!(ids(&q), Vec::<u64>::new(), "purged, not pending again");
    assert_eq!(q.dead_count().unwrap(), 0);
}

mod verify {
    use super::*;
    use spool::backend::file::verify::verify_path;
    use spool::verify::Severity;

    #[test]
    fn reference_fixtures_are_healthy() {
        for f in [
            "tombstones.ndjson",
            "high_water_trailer.ndjson",
            "control_chars.ndjson",
        ] {
            let r = verify_path(&fixture(f)).unwrap();
            assert!(r.healthy(), "{f}: {r:?}");
        }
        let r = verify_path(&fixture("tombstones.ndjson")).unwrap();
        assert_eq!((r.pending, r.dead_letters), (Some(2), Some(0)));
    }

    #[test]
    fn torn_tail_is_damage_that_repair_can_fix() {
        let r = verify_path(&fixture("torn_tail.ndjson")).unwrap();
        assert!(!r.healthy());
        assert!(r.repairable());
        let f = r
            .findings
            .iter()
            .find(|f| f.severity == Severity::Damage)
            .unwrap();
        assert_eq!(f.line, Some(3));
        assert_eq!(r.pending, Some(2));
    }

    #[test]
    fn corruption_is_listed_with_line_numbers_and_not_repairable() {
        let (_d, p) = copy_fixture("corrupt_middle.ndjson");
        let before = std::fs::read(&p).unwrap();
        let r = verify_path(&p).unwrap();
        assert!(!r.healthy());
        assert!(!r.repairable());
        assert!(r
            .findings
            .iter()
            .any(|f| f.line == Some(2) && f.severity == Severity::Damage));
        assert_eq!(std::fs::read(&p).unwrap(), before);
    }

    #[test]
    fn reused_ids_and_interrupted_moves_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.ndjson");
        std::fs::write(
            &p,
            concat!(
                "{\"op\":\"put\",\"id\":5,\"payload\":\"a\",\"idempotencyKey\":\"\",\"attempts\":0}\n",
                "{\"op\":\"put\",\"id\":3,\"payload\":\"b\",\"idempotencyKey\":\"\",\"attempts\":0}\n",
            ),
        )
        .unwrap();
        let r = verify_path(&p).unwrap();
        assert!(!r.healthy());
        assert!(r.findings.iter().any(|f| f.line == Some(2)));

        std::fs::write(
            &p,
            "{\"op\":\"put\",\"id\":1,\"payload\":\"a\",\"idempotencyKey\":\"\",\"attempts\":0}\n",
        )
        .unwrap();
        std::fs::write(
            spool::backend::companion(&p, "dead"),
            "{\"op\":\"put\",\"id\":1,\"payload\":\"a\",\"idempotencyKey\":\"\",\"attempts\":5,\"deadAt\":1}\n",
        )
        .unwrap();
        let r = verify_path(&p).unwrap();
        assert!(r.healthy(), "{r:?}");
        assert!(r.findings.iter().any(|f| f.severity == Severity::Warning));
        assert_eq!((r.pending, r.dead_letters), (Some(0), Some(1)));
    }
}

type Hook = Box<dyn FnOnce() + Send>;

/// An I/O seam that runs a hook after the first rename of a compaction.
struct AfterFirstRename {
    fired: AtomicUsize,
    hook: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for AfterFirstRename {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterFirstRename")
    }
}

impl FileIo for AfterFirstRename {
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        RealIo.rename(from, to)?;
        if self.fired.fetch_add(1, Ordering::SeqCst) == 0 {
            if let Some(h) = self.hook.lock().unwrap().take() {
                h();
            }
        }
        Ok(())
    }
}

#[test]
fn a_dead_letter_written_during_compaction_is_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    {
        let q = open(&p, OpenMode::Create).unwrap();
        q.enqueue(b"a", "").unwrap();
        q.enqueue(b"b", "").unwrap();
        q.dead_letter(1, "first").unwrap();
    }
    let p2 = p.clone();
    let io = Arc::new(AfterFirstRename {
        fired: AtomicUsize::new(0),
        hook: Mutex::new(Some(Box::new(move || {
            // Another process acts between the two renames of the
            // compaction: it may wait and fail, but what it commits stays.
            let p3 = p2.clone();
            std::thread::spawn(move || {
                let mut o = OpenOptions::new(OpenMode::ReadWrite);
                o.busy_timeout = std::time::Duration::from_millis(200);
                let other = FileQueue::open(&p3, &o)?;
                other.dead_letter(2, "second")
            })
            .join()
            .unwrap()
            .ok();
        }))),
    });
    let q = FileQueue::open_with_io(&p, &OpenOptions::new(OpenMode::ReadWrite), io).unwrap();
    q.compact().unwrap();
    drop(q);
    let q = open(&p, OpenMode::ReadOnly).unwrap();
    let pending = ids(&q);
    let dead: Vec<u64> = q
        .dead_page(0, 10)
        .unwrap()
        .iter()
        .map(|d| d.item.id)
        .collect();
    assert!(dead.contains(&1), "{dead:?}");
    assert!(
        pending.contains(&2) || dead.contains(&2),
        "item 2 was lost: pending {pending:?}, dead {dead:?}"
    );
}

/// Compaction keeps what a push receiver knows — every client's
/// `last_seq`, the digest of every processed number and the rejects not
/// yet acknowledged — in a few lines per client, while the delivered
/// items themselves go.
#[test]
fn compaction_keeps_the_receiver_state_in_bounded_lines() {
    use spool::push::wire::{self, OutEntry};
    use spool::push::{apply_push, PushOutcome, ReceiveLimits};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("central.ndjson");
    let q = open(&p, OpenMode::Create).unwrap();
    let limits = ReceiveLimits {
        max_payload: 9,
        ..ReceiveLimits::default()
    };
    let payloads: Vec<String> = (1..=5000u64)
        .map(|s| {
            if s % 1000 == 0 {
                format!("too large {s}")
            } else {
                format!("p{s}")
            }
        })
        .collect();
    let push = |q: &FileQueue, from: u64, to: u64, acked: u64| -> PushOutcome {
        let entries: Vec<OutEntry<'_>> = (from..=to)
            .map(|s| OutEntry::Item {
                seq: s,
                id: s,
                key: "",
                payload: payloads[(s - 1) as usize].as_bytes(),
                enqueued_at: None,
                group: None,
                coalesce_key: None,
            })
            .collect();
        let req = wire::parse_request(&wire::encode_request("edge", acked, &entries)).unwrap();
        let mut out = None;
        q.receive(&mut |txn| {
            out = Some(apply_push(txn, &req, &limits)?);
            Ok(())
        })
        .unwrap();
        out.unwrap()
    };
    for batch in 0..10 {
        push(&q, batch * 500 + 1, batch * 500 + 500, batch * 500);
    }
    // The receiving side delivers everything it got.
    let ids: Vec<u64> = q.drain().unwrap().iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 4995);
    q.mark_done(&ids).unwrap();
    let before = q.push_clients().unwrap();
    assert_eq!(before[0].last_seq, 5000);
    // Rejects 1000..4000 were acknowledged by later pushes; 5000 was not.
    assert_eq!(
        before[0].rejected.iter().map(|r| r.seq).collect::<Vec<_>>(),
        vec![5000]
    );
    let report = q.compact().unwrap();
    assert_eq!(report.pending, 0);
    drop(q);
    let text = std::fs::read_to_string(&p).unwrap();
    assert!(text.lines().count() <= 4, "{} lines", text.lines().count());
    assert!(
        text.lines().all(|l| l.len() < 400_000),
        "a client line stays bounded"
    );
    let q = open(&p, OpenMode::ReadWrite).unwrap();
    assert_eq!(q.push_clients().unwrap(), before);
    // Digests survive: number 7 with other content is a copied spool.
    let entries = [OutEntry::Item {
        seq: 7,
        id: 7,
        key: "",
        payload: b"other",
        enqueued_at: None,
        group: None,
        coalesce_key: None,
    }];
    let req = wire::parse_request(&wire::encode_request("edge", 0, &entries)).unwrap();
    let mut out = None;
    q.receive(&mut |txn| {
        out = Some(apply_push(txn, &req, &limits)?);
        Ok(())
    })
    .unwrap();
    assert!(
        matches!(out, Some(PushOutcome::Conflict { last_seq: 5000, .. })),
        "{out:?}"
    );
    assert_eq!(q.high_water().unwrap(), 4995, "ids are never reused");
}
