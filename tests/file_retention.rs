//! Retention of delivered items (SPEC §9) on the NDJSON backend, as the
//! files show it: what a reference reader sees of the main file, the
//! `<spool>.delivered` companion, a crash between the two appends of a
//! move, compaction, and the index rebuilt from the files.

mod common;

use common::reference::{reference_prefix, reference_view};
use spool::backend::companion;
use spool::backend::file::io::{FileIo, RealIo};
use spool::backend::file::verify::verify_path;
use spool::backend::file::FileQueue;
use spool::{
    Clock, Delivery, EnqueueOptions, Enqueued, Evidence, ItemId, ManualClock, NewItem, OpenMode,
    OpenOptions, Queue, Record, RecordState, Timestamp,
};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);
const T0: Timestamp = Timestamp::from_secs(1_764_583_200);

fn open_at(path: &Path, mode: OpenMode, clock: &ManualClock) -> FileQueue {
    let mut opts = OpenOptions::new(mode);
    opts.clock = Arc::new(clock.clone());
    FileQueue::open(path, &opts).unwrap()
}

/// A new spool in a temporary directory, on a manual clock at `T0`, with
/// a one-hour window: the directory (kept alive), the path, the clock.
fn retaining() -> (tempfile::TempDir, PathBuf, ManualClock, FileQueue) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let clock = ManualClock::new(T0);
    let q = open_at(&p, OpenMode::Create, &clock);
    q.set_retain(Some(HOUR)).unwrap();
    (dir, p, clock, q)
}

fn add(q: &dyn Queue, payload: &str, key: &str) -> ItemId {
    let e = q.enqueue(payload.as_bytes(), key).unwrap();
    assert!(!e.deduplicated, "{payload}");
    e.id
}

fn pending(q: &dyn Queue) -> Vec<ItemId> {
    q.drain().unwrap().iter().map(|i| i.id).collect()
}

fn delivered(q: &dyn Queue) -> Vec<ItemId> {
    q.delivered_page(0, 100_000)
        .unwrap()
        .iter()
        .map(|d| d.item.id)
        .collect()
}

/// `verify` finds the spool at `p` healthy and says `text`.
fn healthy_saying(p: &Path, text: &str) {
    let report = verify_path(p).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        report.findings.iter().any(|f| f.message.contains(text)),
        "{text}: {report:?}"
    );
}

/// The lines of `path` as JSON objects (none when it does not exist).
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The state a crash between the two appends of a move leaves: the
/// item's record in the delivered file, and no `done` line in the main
/// file. Made by hand from the item's last `put` line.
fn crash_after_the_delivered_append(path: &Path, id: ItemId, at: Timestamp, evidence: &str) {
    let main = std::fs::read_to_string(path).unwrap();
    let put = main
        .lines()
        .rfind(|l| l.starts_with(&format!("{{\"op\":\"put\",\"id\":{id},")))
        .expect("the item's put line");
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_str(put).unwrap();
    v.insert("deliveredAt".into(), at.as_millis().into());
    v.insert("evidence".into(), evidence.into());
    let mut line = serde_json::to_vec(&v).unwrap();
    line.push(b'\n');
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(companion(path, "delivered"))
        .unwrap()
        .write_all(&line)
        .unwrap();
}

#[test]
fn a_reference_reader_sees_delivered_items_gone_and_the_records_are_beside_it() {
    let (_dir, p, clock, q) = retaining();
    let a = add(&q, "a", "ka");
    let b = add(&q, "b", "");
    let c = add(&q, "c", "kc");
    q.set_attempts(b, 2).unwrap();
    clock.advance(Duration::from_millis(1500));
    assert_eq!(
        q.deliver(&[(a, Evidence::Http(200)), (b, Evidence::Exit(0))])
            .unwrap(),
        vec![true, true]
    );

    // The main file: delivered items leave it through `done` lines, as
    // they always did.
    let view = reference_view(&p);
    assert_eq!(view.keys().copied().collect::<Vec<_>>(), vec![c]);
    let main = lines(&p);
    for id in [a, b] {
        assert!(
            main.iter().any(|v| v["op"] == "done" && v["id"] == id),
            "no done line for {id}"
        );
    }
    // Their `done` lines say when and how (a reference reader reads them
    // as plain `done` lines); no `put` line carries a delivery.
    let at_ms = T0.as_millis() + 1500;
    for (id, evidence) in [(a, "http:200"), (b, "exit:0")] {
        let done = main
            .iter()
            .find(|v| v["op"] == "done" && v["id"] == id)
            .unwrap();
        assert_eq!(done["deliveredAt"], at_ms, "{done}");
        assert_eq!(done["evidence"], evidence, "{done}");
    }
    assert!(main
        .iter()
        .all(|v| v["op"] == "done" || v.get("deliveredAt").is_none()));

    // Those two lines are the records, until compaction moves them:
    // the delivery wrote nothing else.
    let dpath = companion(&p, "delivered");
    assert!(!dpath.exists(), "a delivery appends to the main file only");
    // The window is in the meta file.
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(companion(&p, "meta")).unwrap()).unwrap();
    assert_eq!(meta["retainMs"], 3_600_000);

    // The spool reads them back, and their keys dedup, before compaction
    // and after it.
    let check = |q: &FileQueue| {
        let da = q.delivered_get(a).unwrap().unwrap();
        assert_eq!(
            da.delivery,
            Delivery {
                at: Timestamp::from_millis(T0.as_millis() + 1500),
                evidence: Evidence::Http(200)
            }
        );
        assert_eq!(da.item.payload, b"a".to_vec());
        assert_eq!(q.delivered_get(b).unwrap().unwrap().item.attempts, 2);
        assert_eq!(q.enqueue(b"again", "ka").unwrap(), Enqueued::delivered(a));
        assert_eq!(q.stats(T0).unwrap().delivered_retained, 2);
        assert_eq!(delivered(q), vec![a, b]);
        healthy_saying(&p, "2 delivered retained");
    };
    check(&q);
    q.compact().unwrap();
    check(&q);

    // Compaction moved them to the delivered file: the item's put line,
    // the reference's fields first, then the time and the evidence.
    let text = std::fs::read_to_string(&dpath).unwrap();
    let put: Vec<&str> = text.lines().collect();
    assert_eq!(put.len(), 2, "{text}");
    let at = (T0.as_millis() + 1500).to_string();
    assert!(
        put[0].starts_with(&reference_prefix(a, "a", "ka", 0)),
        "{}",
        put[0]
    );
    assert!(
        put[0].contains(&format!(r#","deliveredAt":{at},"evidence":"http:200""#)),
        "{}",
        put[0]
    );
    assert!(
        put[1].starts_with(&reference_prefix(b, "b", "", 2)),
        "{}",
        put[1]
    );
    assert!(
        put[1].contains(&format!(r#","deliveredAt":{at},"evidence":"exit:0""#)),
        "{}",
        put[1]
    );
    // Created private, like every spool file.
    assert_eq!(
        std::fs::metadata(&dpath).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // ... and the main file's lines of the deliveries are gone.
    assert!(lines(&p).iter().all(|v| v.get("deliveredAt").is_none()));

    // Retention off: a delivered item is deleted as it always was, and
    // the records kept go as expired.
    q.set_retain(None).unwrap();
    assert_eq!(meta_field(&p, "retainMs"), serde_json::Value::Null);
    q.mark_done(&[c]).unwrap();
    let done_c = lines(&p)
        .into_iter()
        .find(|v| v["op"] == "done" && v["id"] == c)
        .unwrap();
    assert_eq!(
        done_c.get("deliveredAt"),
        None,
        "not retained: a plain done line"
    );
    assert!(delivered(&q).is_empty(), "pruned by the delivery");
    assert!(reference_view(&p).is_empty());
    assert_eq!(q.delivered_get(c).unwrap(), None);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

fn meta_field(p: &Path, name: &str) -> serde_json::Value {
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(companion(p, "meta")).unwrap()).unwrap();
    meta[name].clone()
}

#[test]
fn without_retention_no_delivered_file_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let clock = ManualClock::new(T0);
    let q = open_at(&p, OpenMode::Create, &clock);
    let a = add(&q, "a", "k");
    q.deliver(&[(a, Evidence::Http(200))]).unwrap();
    assert!(!companion(&p, "delivered").exists());
    assert!(reference_view(&p).is_empty());
    assert!(!q.enqueue(b"b", "k").unwrap().deduplicated);
}

#[test]
fn a_crash_between_the_two_appends_leaves_the_item_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let clock = ManualClock::new(T0);
    let (x, y) = {
        let q = open_at(&p, OpenMode::Create, &clock);
        q.set_retain(Some(HOUR)).unwrap();
        (add(&q, "x", "kx"), add(&q, "y", ""))
    };
    crash_after_the_delivered_append(&p, x, T0, "http:204");
    // The reference still sees x in the main file ...
    assert!(reference_view(&p).contains_key(&x));
    // ... spool sees it delivered: the delivered file wins.
    let check = |q: &FileQueue, writable: bool| {
        assert_eq!(pending(q), vec![y]);
        assert_eq!(q.get(x).unwrap(), None);
        let d = q.delivered_get(x).unwrap().expect("x is delivered");
        assert_eq!(d.delivery.evidence, Evidence::Http(204));
        assert_eq!(d.item.payload, b"x");
        if writable {
            assert_eq!(q.enqueue(b"x again", "kx").unwrap(), Enqueued::delivered(x));
            assert_eq!(q.deliver(&[(x, Evidence::Done)]).unwrap(), vec![false]);
        }
        assert_eq!(q.size().unwrap(), 1);
    };
    check(&open_at(&p, OpenMode::ReadOnly, &clock), false);
    check(&open_at(&p, OpenMode::ReadWrite, &clock), true);
    // The same from an index built from the files.
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    check(&open_at(&p, OpenMode::ReadOnly, &clock), false);
    check(&open_at(&p, OpenMode::ReadWrite, &clock), true);
    healthy_saying(&p, "both pending and delivered");

    // Once the window ends, the main file gets the `done` line it lacks
    // before the record goes, so that the item never comes back.
    clock.advance(HOUR);
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    let z = add(&q, "z", "kx");
    assert_eq!(q.delivered_get(x).unwrap(), None, "pruned by the enqueue");
    assert_eq!(
        reference_view(&p).keys().copied().collect::<Vec<_>>(),
        vec![y, z]
    );
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert_eq!(pending(&q), vec![y, z]);
    assert!(delivered(&q).is_empty());
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        !report
            .findings
            .iter()
            .any(|f| f.message.contains("both pending and delivered")),
        "{report:?}"
    );
}

#[test]
fn an_unfinished_move_is_completed_before_prune_delivered_removes_the_record() {
    let (_dir, p, clock, q) = retaining();
    let x = add(&q, "x", "");
    let y = add(&q, "y", "");
    q.deliver(&[(y, Evidence::Exit(0))]).unwrap();
    drop(q);
    crash_after_the_delivered_append(&p, x, T0, "exit:0");
    clock.advance(2 * HOUR);
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert_eq!(q.prune_delivered(10).unwrap(), 2);
    assert!(delivered(&q).is_empty());
    assert!(reference_view(&p).is_empty());
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert!(pending(&q).is_empty(), "x never comes back");
}

/// The child of `a_delivery_killed_after_its_append_is_retained`:
/// delivers the spool's item 1, killed by the debug crash point the
/// parent names. Does nothing when run alone.
#[test]
fn child_deliver() {
    let Ok(path) = std::env::var(ENV_CHILD) else {
        return;
    };
    let q = FileQueue::open(Path::new(&path), &OpenOptions::new(OpenMode::ReadWrite)).unwrap();
    let _ = q.deliver(&[(1, Evidence::Http(200))]);
    panic!("the delivery was to be killed");
}

const ENV_CHILD: &str = "SPOOL_TEST_RETENTION_CHILD";

#[test]
fn a_delivery_killed_after_its_append_is_retained() {
    use std::os::unix::process::ExitStatusExt;
    if !cfg!(debug_assertions) {
        eprintln!("SKIPPED: the crash points exist in debug builds only");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    {
        let q = FileQueue::open(&p, &OpenOptions::new(OpenMode::Create)).unwrap();
        q.set_retain(Some(24 * HOUR)).unwrap();
        assert_eq!(add(&q, "x", "kx"), 1);
        add(&q, "y", "");
    }
    // The delivery's one synced append is the main file's; the process
    // dies before the index takes it in.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_deliver", "--nocapture"])
        .env(ENV_CHILD, &p)
        .env("SPOOL_DEBUG_KILL_AT", "index-update:1")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    assert!(
        !reference_view(&p).contains_key(&1),
        "the main file's append ran"
    );
    assert!(!companion(&p, "delivered").exists());
    // Committed: the item is delivered, and its record is retained.
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
    let q = FileQueue::open(&p, &OpenOptions::new(OpenMode::ReadWrite)).unwrap();
    assert_eq!(pending(&q), vec![2]);
    let d = q.delivered_get(1).unwrap().unwrap();
    assert_eq!(d.delivery.evidence, Evidence::Http(200));
    assert_eq!(d.item.payload, b"x".to_vec());
    assert_eq!(q.enqueue(b"x again", "kx").unwrap(), Enqueued::delivered(1));
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn compaction_keeps_live_records_and_drops_pruned_ones() {
    let (_dir, p, clock, q) = retaining();
    let ids: Vec<ItemId> = (0..6)
        .map(|i| add(&q, &format!("p{i}"), &format!("k{i}")))
        .collect();
    q.deliver(&[(ids[0], Evidence::Http(200)), (ids[1], Evidence::Http(201))])
        .unwrap();
    clock.advance(HOUR / 2);
    q.deliver(&[(ids[2], Evidence::Exit(0)), (ids[3], Evidence::Push(7))])
        .unwrap();
    drop(q);
    // ids[4] was delivered too, but a crash cut the move short.
    crash_after_the_delivered_append(&p, ids[4], clock.now(), "done");
    clock.advance(HOUR / 2);
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert_eq!(
        q.prune_delivered(100).unwrap(),
        2,
        "ids[0] and ids[1] expired"
    );
    let before = q.stats(clock.now()).unwrap();
    assert_eq!((before.depth, before.delivered_retained), (1, 3));
    let report = q.compact().unwrap();
    assert_eq!(report.pending, 1);
    assert_eq!(report.delivered_retained, 3);

    // The delivered file holds the live records only: no done lines (and
    // its last line carries no batch frame). The one it held comes
    // first; compaction moved the others from the main file.
    let dlines = lines(&companion(&p, "delivered"));
    assert_eq!(
        dlines
            .iter()
            .map(|v| v["id"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        vec![ids[4], ids[2], ids[3]]
    );
    assert!(dlines.iter().all(|v| v["op"] == "put"));
    assert!(dlines.last().unwrap().get("tx").is_none());
    // The main file no longer holds the item whose move was cut short.
    assert_eq!(
        reference_view(&p).keys().copied().collect::<Vec<_>>(),
        vec![ids[5]]
    );
    let check = |q: &FileQueue| {
        assert_eq!(delivered(q), vec![ids[2], ids[3], ids[4]]);
        assert_eq!(pending(q), vec![ids[5]]);
        assert_eq!(
            q.delivered_get(ids[3]).unwrap().unwrap().delivery.evidence,
            Evidence::Push(7)
        );
        assert_eq!(
            q.enqueue(b"dup", "k4").unwrap(),
            Enqueued::delivered(ids[4])
        );
        assert!(q.high_water().unwrap() >= ids[5]);
    };
    check(&q);
    check(&open_at(&p, OpenMode::ReadWrite, &clock));
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    check(&open_at(&p, OpenMode::ReadWrite, &clock));
    // Keys of pruned records are free again; ids stay unique.
    let fresh = q.enqueue(b"new", "k0").unwrap();
    assert!(!fresh.deduplicated);
    assert!(fresh.id > ids[5]);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// Records delivered out of id order are pruned when their own window
/// ends, whether the index took them in as they were written, was
/// rebuilt from the files, or a compaction rewrote the delivered file in
/// id order (which the index then takes in afresh).
#[test]
fn records_delivered_out_of_order_are_pruned_on_time_after_a_rebuild_or_a_compaction() {
    let minute = Duration::from_secs(60);
    for how in ["as written", "rebuilt", "compacted"] {
        let (_dir, p, clock, q) = retaining();
        let ids: Vec<ItemId> = (0..5).map(|i| add(&q, &format!("p{i}"), "")).collect();
        // Delivered at +1m, +2m, ... in the order 3, 1, 0, 4, 2.
        for id in [ids[3], ids[1], ids[0], ids[4], ids[2]] {
            clock.advance(minute);
            q.deliver(&[(id, Evidence::Http(200))]).unwrap();
        }
        let q = match how {
            "rebuilt" => {
                drop(q);
                std::fs::remove_file(companion(&p, "idx")).unwrap();
                open_at(&p, OpenMode::ReadWrite, &clock)
            }
            "compacted" => {
                q.compact().unwrap();
                q
            }
            _ => q,
        };
        let mut left = ids.clone();
        for (m, id) in [
            (1, ids[3]),
            (2, ids[1]),
            (3, ids[0]),
            (4, ids[4]),
            (5, ids[2]),
        ] {
            clock.set(T0.saturating_add(HOUR + minute * m + Duration::from_secs(1)));
            left.retain(|x| *x != id);
            assert_eq!(q.prune_delivered(1).unwrap(), 1, "{how}, +{m}m");
            assert_eq!(q.prune_delivered(10).unwrap(), 0, "{how}, +{m}m");
            assert_eq!(delivered(&q), left, "{how}, +{m}m");
        }
        let report = verify_path(&p).unwrap();
        assert!(report.healthy(), "{how}: {report:?}");
    }
}

#[test]
fn an_index_rebuilt_from_the_files_sees_the_same_delivered_records() {
    let (_dir, p, clock, q) = retaining();
    let a = add(&q, "a", "order-1");
    let b = add(&q, "b", "order-2");
    let c = add(&q, "c", "");
    q.deliver(&[(a, Evidence::Http(200))]).unwrap();
    clock.advance(Duration::from_secs(60));
    q.push_assign(&[b, c]).unwrap();
    q.push_ack(2, &[]).unwrap();
    // An imported delivered record, and a pending one with a key a
    // delivered record already has (only pending keys dedup an import).
    let mut rec_item = spool::Item::new(50, b"imported".to_vec(), "order-9".into(), T0);
    rec_item.attempts = 3;
    let imported = q
        .import(&[
            Record {
                item: rec_item,
                state: RecordState::Delivered,
                dead_at: None,
                delivery: Some(Delivery {
                    at: T0,
                    evidence: Evidence::Sink,
                }),
            },
            Record {
                item: spool::Item::new(51, b"pending".to_vec(), "order-1".into(), T0),
                state: RecordState::Pending,
                dead_at: None,
                delivery: None,
            },
        ])
        .unwrap();
    assert!(imported.iter().all(|i| !i.deduplicated && i.kept_id));
    let snapshot = |q: &FileQueue| {
        (
            q.delivered_page(0, 100).unwrap(),
            pending(q),
            q.stats(clock.now()).unwrap().delivered_retained,
            q.high_water().unwrap(),
        )
    };
    let before = snapshot(&q);
    assert_eq!(
        before.0.iter().map(|d| d.item.id).collect::<Vec<_>>(),
        vec![a, b, c, 50]
    );
    assert_eq!(before.0[1].delivery.evidence, Evidence::Push(2));
    assert_eq!(before.1, vec![51]);
    drop(q);

    // No index: the next command builds one from the files.
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert_eq!(snapshot(&q), before);
    // Dedup as before: a pending key first, then the newest record.
    assert_eq!(q.enqueue(b"x", "order-1").unwrap(), Enqueued::dedup(51));
    assert_eq!(q.enqueue(b"x", "order-2").unwrap(), Enqueued::delivered(b));
    assert_eq!(q.enqueue(b"x", "order-9").unwrap(), Enqueued::delivered(50));
    drop(q);

    // An index of version 2 (before retention) is not used: rebuilt.
    {
        let conn = rusqlite::Connection::open(companion(&p, "idx")).unwrap();
        conn.execute_batch("PRAGMA user_version = 2").unwrap();
    }
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert_eq!(q.enqueue(b"x", "order-2").unwrap(), Enqueued::delivered(b));
    assert!(q
        .take_notices()
        .iter()
        .any(|n| n.contains("index version 2")));
    assert_eq!(snapshot(&q), before);
    // The window ends for the imported record (delivered at T0) first.
    clock.set(Timestamp::from_millis(T0.as_millis() + 3_600_000));
    assert!(!q.enqueue(b"x", "order-9").unwrap().deduplicated);
    assert_eq!(q.enqueue(b"x", "order-1").unwrap(), Enqueued::dedup(51));
    assert_eq!(q.enqueue(b"x", "order-2").unwrap(), Enqueued::delivered(b));
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// An I/O seam that counts the syncs of each file (by inode), and whose
/// n-th `fsync` fails (`fail_sync_in`: n, 0 for none).
#[derive(Debug, Default)]
struct SyncSeam {
    fail_sync_in: AtomicUsize,
    syncs: std::sync::Mutex<BTreeMap<u64, usize>>,
}

impl SyncSeam {
    fn of(&self, path: &Path) -> usize {
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(path).unwrap().ino();
        self.syncs.lock().unwrap().get(&ino).copied().unwrap_or(0)
    }
}

impl FileIo for SyncSeam {
    fn sync(&self, file: &File) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let v = self.fail_sync_in.load(Ordering::SeqCst);
        if v > 0 {
            self.fail_sync_in.store(v - 1, Ordering::SeqCst);
            if v == 1 {
                return Err(io::Error::from_raw_os_error(5));
            }
        }
        let ino = file.metadata()?.ino();
        *self.syncs.lock().unwrap().entry(ino).or_default() += 1;
        RealIo.sync(file)
    }
}

/// A spool at `p` through `io`, with a one-hour window.
fn retaining_with(p: &Path, mode: OpenMode, io: &Arc<SyncSeam>) -> FileQueue {
    let q = FileQueue::open_with_io(p, &OpenOptions::new(mode), io.clone()).unwrap();
    q.set_retain(Some(HOUR)).unwrap();
    q
}

#[test]
fn a_failed_main_file_append_delivers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let io = Arc::new(SyncSeam::default());
    let q = retaining_with(&p, OpenMode::Create, &io);
    let a = add(&q, "a", "ka");
    // The main file's sync fails: the delivery's only write.
    io.fail_sync_in.store(1, Ordering::SeqCst);
    assert!(q.deliver(&[(a, Evidence::Http(200))]).is_err());
    assert_eq!(pending(&q), vec![a]);
    assert!(delivered(&q).is_empty());
    assert!(!companion(&p, "delivered").exists());
    let again = FileQueue::open(&p, &OpenOptions::new(OpenMode::ReadOnly)).unwrap();
    assert_eq!(pending(&again), vec![a]);
    assert!(delivered(&again).is_empty());
    // The next delivery goes through.
    assert_eq!(q.deliver(&[(a, Evidence::Http(200))]).unwrap(), vec![true]);
    assert_eq!(delivered(&q), vec![a]);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

#[test]
fn retained_keys_dedup_in_a_streamed_batch() {
    let (_dir, _, _, q) = retaining();
    let a = add(&q, "a", "k");
    q.deliver(&[(a, Evidence::Http(200))]).unwrap();
    let mut items = vec![
        Ok(NewItem::new("1", "k")),
        Ok(NewItem::new("2", "other")),
        Ok(NewItem::new("3", "other")),
    ]
    .into_iter();
    let r: Vec<Enqueued> = q
        .enqueue_stream(&mut items, &EnqueueOptions::default())
        .unwrap()
        .iter()
        .collect();
    assert_eq!(r[0], Enqueued::delivered(a));
    assert!(!r[1].deduplicated);
    assert_eq!(r[2], Enqueued::dedup(r[1].id));
}

/// One sync per delivery, as without retention: the main file's, whose
/// `done` line holds the record. Nothing is left to sync on close.
#[test]
fn a_retained_delivery_syncs_the_main_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("q.ndjson");
    let io = Arc::new(SyncSeam::default());
    let q = retaining_with(&p, OpenMode::Create, &io);
    let ids: Vec<ItemId> = (0..5).map(|i| add(&q, &format!("p{i}"), "")).collect();
    let main_before = io.of(&p);
    for id in &ids {
        q.deliver(&[(*id, Evidence::Http(200))]).unwrap();
    }
    assert_eq!(
        io.of(&p) - main_before,
        5,
        "one sync of the main file per delivery"
    );
    drop(q);
    assert!(!companion(&p, "delivered").exists());
    let q = FileQueue::open(&p, &OpenOptions::new(OpenMode::ReadOnly)).unwrap();
    assert_eq!(delivered(&q), ids);
}

/// The records of retained deliveries are the main file's lines until a
/// compaction moves them: every reader, a rebuilt index and the
/// compaction agree on them, whatever order they were delivered in and
/// however (delivery, push ack), next to records imported into the
/// delivered file.
#[test]
fn retained_records_stay_in_the_main_file_until_a_compaction_moves_them() {
    let (_dir, p, clock, q) = retaining();
    let dpath = companion(&p, "delivered");
    let a = add(&q, "a", "ka");
    let b = add(&q, "b", "kb");
    let c = add(&q, "c", "");
    let d = add(&q, "d", "kd");
    let e = add(&q, "e", "ke");
    q.set_attempts(c, 3).unwrap();
    q.deliver(&[(b, Evidence::Http(201))]).unwrap();
    clock.advance(Duration::from_secs(10));
    q.import(&[Record {
        item: spool::Item::new(90, b"imported".to_vec(), "ki".into(), T0),
        state: RecordState::Delivered,
        dead_at: None,
        delivery: Some(Delivery {
            at: T0,
            evidence: Evidence::Sink,
        }),
    }])
    .unwrap();
    q.deliver(&[(a, Evidence::Exit(0)), (c, Evidence::Http(200))])
        .unwrap();
    clock.advance(Duration::from_secs(10));
    q.push_assign(&[d]).unwrap();
    q.push_ack(1, &[]).unwrap();
    let want = q.delivered_page(0, 100).unwrap();
    assert_eq!(
        want.iter().map(|r| r.item.id).collect::<Vec<_>>(),
        vec![a, b, c, d, 90]
    );
    assert_eq!(want[2].item.attempts, 3);
    assert_eq!(want[3].delivery.evidence, Evidence::Push(1));
    // The delivered file holds the imported record only.
    assert_eq!(lines(&dpath).len(), 1);
    let check = |q: &FileQueue| {
        assert_eq!(q.delivered_page(0, 100).unwrap(), want);
        assert_eq!(q.delivered_get(c).unwrap().unwrap(), want[2]);
        assert_eq!(q.stats(clock.now()).unwrap().delivered_retained, 5);
        assert_eq!(pending(q), vec![e]);
    };
    check(&q);
    assert_eq!(q.enqueue(b"x", "kd").unwrap(), Enqueued::delivered(d));
    drop(q);
    check(&open_at(&p, OpenMode::ReadOnly, &clock));
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    check(&open_at(&p, OpenMode::ReadOnly, &clock));
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    check(&q);
    healthy_saying(&p, "5 delivered retained");
    assert_eq!(q.compact().unwrap().delivered_retained, 5);
    check(&q);
    assert_eq!(lines(&dpath).len(), 5);
    assert!(lines(&p).iter().all(|v| v.get("deliveredAt").is_none()));
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    check(&open_at(&p, OpenMode::ReadWrite, &clock));
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// Records pruned from the delivered file stay pruned when the index is
/// rebuilt from the files, even once a longer window would keep them.
#[test]
fn a_rebuilt_index_brings_no_pruned_record_back() {
    let (_dir, p, clock, q) = retaining();
    let a = add(&q, "a", "ka");
    let b = add(&q, "b", "kb");
    q.deliver(&[(a, Evidence::Http(200))]).unwrap();
    q.deliver(&[(b, Evidence::Http(200))]).unwrap();
    q.set_retain(None).unwrap();
    assert_eq!(q.prune_delivered(100).unwrap(), 2);
    q.set_retain(Some(HOUR * 24)).unwrap();
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert!(delivered(&q).is_empty());
    assert!(!q.enqueue(b"x", "ka").unwrap().deduplicated);
    assert!(!q.take_notices().iter().any(|n| n.contains("restored")));
}

/// An automatic compaction (started by the main file's garbage) moves
/// the retained records the main file holds to the delivered file, and a
/// later one appends to a delivered file with little garbage, leaving
/// what it holds as it is; the index rows stand.
#[test]
fn an_automatic_compaction_leaves_the_delivered_file_alone() {
    let (_dir, p, _, q) = retaining();
    let dpath = companion(&p, "delivered");
    // Enough garbage in the main file (over 4 MiB twice, items all
    // delivered) for two automatic compactions on the way.
    let ino = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().ino()
    };
    let payload = "x".repeat(8000);
    let mut kept = Vec::new();
    let mut first = None;
    let mut compactions = 0;
    let mut main_ino = ino(&p);
    for i in 0..1200 {
        let id = add(&q, &payload, &format!("k{i}"));
        q.deliver(&[(id, Evidence::Http(200))]).unwrap();
        kept.push(id);
        if ino(&p) != main_ino {
            main_ino = ino(&p);
            compactions += 1;
        }
        if first.is_none() && dpath.exists() {
            first = Some((ino(&dpath), kept.len()));
        }
    }
    assert_eq!(compactions, 2, "the main file was compacted twice");
    let (dino, moved) = first.expect("the first compaction made the delivered file");
    assert_eq!(ino(&dpath), dino, "the delivered file stayed");
    assert!(std::fs::metadata(&dpath).unwrap().len() > moved as u64 * 8000);
    assert!(std::fs::metadata(&p).unwrap().len() < 4 << 20);
    assert_eq!(delivered(&q), kept);
    assert_eq!(
        q.enqueue(b"again", "k7").unwrap(),
        Enqueued::delivered(kept[7])
    );
    drop(q);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// Without a usable index (deleted here; one of another version reads
/// the same), compaction finds that the main file holds retained records
/// and builds the index to move them before it drops their lines.
#[test]
fn compaction_without_an_index_keeps_the_records_the_main_file_holds() {
    let (_dir, p, clock, q) = retaining();
    let a = add(&q, "a", "ka");
    let b = add(&q, "b", "");
    q.deliver(&[(a, Evidence::Http(200))]).unwrap();
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    let report = q.compact().unwrap();
    assert_eq!((report.pending, report.delivered_retained), (1, 1));
    assert_eq!(lines(&companion(&p, "delivered")).len(), 1);
    assert!(lines(&p).iter().all(|v| v.get("deliveredAt").is_none()));
    assert_eq!(delivered(&q), vec![a]);
    assert_eq!(pending(&q), vec![b]);
    assert_eq!(q.enqueue(b"x", "ka").unwrap(), Enqueued::delivered(a));
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}

/// A record pruned while the main file still held it is not one to move:
/// compaction goes on with or without an index (found by the simulator,
/// NDJSON seed 68775869099169).
#[test]
fn compaction_after_a_prune_of_a_record_the_main_file_held() {
    for with_index in [true, false] {
        let (_dir, p, clock, q) = retaining();
        let a = add(&q, "a", "ka");
        q.deliver(&[(a, Evidence::Http(200))]).unwrap();
        clock.advance(HOUR * 2);
        assert_eq!(q.prune_delivered(100).unwrap(), 1);
        // Mostly live items: the compaction scans the main file.
        let live: Vec<ItemId> = (0..10).map(|i| add(&q, &format!("b{i}"), "")).collect();
        drop(q);
        if !with_index {
            std::fs::remove_file(companion(&p, "idx")).unwrap();
        }
        let q = open_at(&p, OpenMode::ReadWrite, &clock);
        let report = q.compact().unwrap();
        assert_eq!((report.pending, report.delivered_retained), (10, 0));
        assert!(delivered(&q).is_empty());
        assert_eq!(pending(&q), live);
        assert!(!q.enqueue(b"x", "ka").unwrap().deduplicated);
        let report = verify_path(&p).unwrap();
        assert!(report.healthy(), "{report:?}");
    }
}

/// Compaction moves the main file's records in bounded appends (by count
/// and by bytes), every one of them.
#[test]
fn compaction_moves_many_and_large_records() {
    let (_dir, p, clock, q) = retaining();
    let big = "y".repeat(3 << 20);
    let mut ids: Vec<ItemId> = (0..3).map(|_| add(&q, &big, "")).collect();
    let mut items = (0..5000).map(|i| Ok(NewItem::new(format!("s{i}"), format!("k{i}"))));
    let stored = q
        .enqueue_stream(&mut items, &EnqueueOptions::default())
        .unwrap();
    ids.extend(stored.iter().map(|e| e.id));
    let done: Vec<(ItemId, Evidence)> = ids.iter().map(|id| (*id, Evidence::Http(200))).collect();
    q.deliver(&done).unwrap();
    let want = q.delivered_page(0, 10_000).unwrap();
    assert_eq!(want.len(), ids.len());
    let report = q.compact().unwrap();
    assert_eq!(report.delivered_retained, ids.len() as u64);
    assert_eq!(lines(&companion(&p, "delivered")).len(), ids.len());
    assert_eq!(q.delivered_page(0, 10_000).unwrap(), want);
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    let q = open_at(&p, OpenMode::ReadOnly, &clock);
    assert_eq!(q.delivered_page(0, 10_000).unwrap(), want);
    assert_eq!(want[0].item.payload.len(), 3 << 20);
}

/// A compaction cut short after it moved a record leaves it in both
/// files; pruned there, it stays pruned when a rebuilt index reads the
/// main file's delivery after the delivered file's `done` line (found by
/// the simulator, NDJSON seed 99222181149975).
#[test]
fn a_record_in_both_files_stays_pruned_after_a_rebuild() {
    let (_dir, p, clock, q) = retaining();
    let a = add(&q, "a", "ka");
    q.deliver(&[(a, Evidence::Http(200))]).unwrap();
    drop(q);
    // What the cut-short compaction leaves: the record moved, the main
    // file as it was.
    crash_after_the_delivered_append(&p, a, clock.now(), "http:200");
    clock.advance(HOUR * 2);
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    assert_eq!(q.prune_delivered(100).unwrap(), 1);
    assert!(delivered(&q).is_empty());
    drop(q);
    std::fs::remove_file(companion(&p, "idx")).unwrap();
    clock.advance(Duration::from_secs(1));
    let q = open_at(&p, OpenMode::ReadWrite, &clock);
    q.set_retain(Some(HOUR * 24)).unwrap();
    assert!(delivered(&q).is_empty());
    assert!(!q.enqueue(b"x", "ka").unwrap().deduplicated);
    let report = verify_path(&p).unwrap();
    assert!(report.healthy(), "{report:?}");
}
