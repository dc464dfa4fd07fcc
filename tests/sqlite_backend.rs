//! The SQLite backend against the frozen reference fixture, the reference's
//! own SQL, several handles at once, and the memory backend as a model.

use proptest::prelude::*;
use rusqlite::Connection;
use spool::backend::SQLITE_HEADER;
use spool::{
    AttemptUpdate, DeadLetter, DepthLimit, EnqueueOptions, Error, ErrorKind, Item, ManualClock,
    MemoryQueue, NewItem, OpenMode, OpenOptions, Queue, Record, RecordState, SharedClock, Spool,
    SqliteQueue, Timestamp,
};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const START: Timestamp = Timestamp::from_millis(1_800_000_000_123);

fn clock() -> ManualClock {
    ManualClock::new(START)
}

fn opts_with(mode: OpenMode, clock: &ManualClock) -> OpenOptions {
    let shared: SharedClock = Arc::new(clock.clone());
    OpenOptions {
        mode,
        clock: shared,
        ..OpenOptions::default()
    }
}

fn opts(mode: OpenMode) -> OpenOptions {
    opts_with(mode, &clock())
}

fn open(path: &Path, mode: OpenMode) -> SqliteQueue {
    SqliteQueue::open(path, &opts(mode)).expect("open spool")
}

/// A copy of `fixtures/reference.sqlite` in `dir`.
fn reference_copy(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference.sqlite");
    let dst = dir.join("reference.sqlite");
    std::fs::copy(src, &dst).expect("copy fixture");
    dst
}

fn user_version(path: &Path) -> i64 {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The fixture's rows as spool must read them.
fn reference_items() -> Vec<Item> {
    let item = |id, payload: &str, key: &str, attempts, secs| Item {
        id,
        payload: payload.as_bytes().to_vec(),
        key: key.to_string(),
        attempts,
        enqueued_at: Some(Timestamp::from_secs(secs)),
        next_retry_at: None,
        last_error: None,
        held: false,
        push_seq: None,
        group: None,
        coalesce_key: None,
    };
    vec![
        item(1, "hello, world", "", 0, 1_700_000_000),
        item(
            2,
            "tab\there\r\nline \"double\" 'single' back\\slash \x01\x1b[0m\x7f end",
            "",
            0,
            1_700_000_001,
        ),
        item(
            3,
            "{\"op\":\"create\",\"n\":42}",
            "order-42",
            0,
            1_700_000_002,
        ),
        item(4, "retry me", "", 3, 1_700_000_003),
    ]
}

#[test]
fn read_only_open_reads_the_reference_file_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = reference_copy(dir.path());
    let before = std::fs::read(&path).unwrap();

    let q = open(&path, OpenMode::ReadOnly);
    assert_eq!(q.drain().unwrap(), reference_items());
    assert_eq!(q.get(3).unwrap(), Some(reference_items()[2].clone()));
    assert_eq!(q.get(5).unwrap(), None);
    assert_eq!(q.size().unwrap(), 4);
    assert_eq!(q.high_water().unwrap(), 5);
    assert_eq!(q.dead_count().unwrap(), 0);
    assert_eq!(q.dead_page(0, 10).unwrap(), vec![]);
    assert_eq!(q.max_depth().unwrap(), None);
    let stats = q.stats(START).unwrap();
    assert_eq!(stats.depth, 4);
    assert_eq!(stats.held, 0);
    assert_eq!(stats.waiting, 0);
    assert_eq!(stats.oldest_id, Some(1));
    assert_eq!(
        stats.oldest_enqueued_at,
        Some(Timestamp::from_secs(1_700_000_000))
    );
    assert_eq!(
        stats.attempts_histogram.into_iter().collect::<Vec<_>>(),
        vec![(0, 3), (3, 1)]
    );
    assert_eq!(stats.high_water, 5);
    let e = q.uuid().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Usage);
    assert!(e.to_string().contains("no uuid yet"), "{e}");
    // Writes are refused before they reach SQLite.
    assert_eq!(q.enqueue(b"x", "").unwrap_err().kind(), ErrorKind::Usage);
    assert_eq!(q.mark_done(&[1]).unwrap_err().kind(), ErrorKind::Usage);
    drop(q);

    // Through Spool::open too.
    let s = Spool::open(&path, &opts(OpenMode::ReadOnly)).unwrap();
    assert_eq!(s.size().unwrap(), 4);
    drop(s);

    assert_eq!(std::fs::read(&path).unwrap(), before, "file changed");
    assert_eq!(user_version(&path), 0);
    // SQLite may create the -wal and -shm files any reader of a WAL
    // database needs; nothing may be written to the WAL.
    let wal = sidecar(&path, "-wal");
    if wal.exists() {
        assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0, "WAL written");
    }
}

#[test]
fn writable_open_migrates_keeps_rows_and_never_reuses_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = reference_copy(dir.path());
    let q = open(&path, OpenMode::ReadWrite);
    assert_eq!(user_version(&path), 6);
    assert_eq!(q.drain().unwrap(), reference_items());
    assert_eq!(q.high_water().unwrap(), 5);
    let uuid = q.uuid().unwrap();
    let parsed = uuid::Uuid::parse_str(&uuid).unwrap();
    assert_eq!(parsed.get_version_num(), 4);
    assert_eq!(uuid, parsed.hyphenated().to_string());

    // The sequence is 5 although the largest id is 4.
    let e = q.enqueue(b"new", "").unwrap();
    assert_eq!(e.id, 6);
    assert!(!e.deduplicated);
    // The reference's key dedups.
    let d = q.enqueue(b"other", "order-42").unwrap();
    assert_eq!((d.id, d.deduplicated), (3, true));
    drop(q);

    // Reopening keeps the uuid and migrates nothing again.
    let q = open(&path, OpenMode::ReadWrite);
    assert_eq!(q.uuid().unwrap(), uuid);
    assert_eq!(q.size().unwrap(), 5);
    drop(q);
    let q = open(&path, OpenMode::ReadOnly);
    assert_eq!(q.uuid().unwrap(), uuid);
}

#[test]
fn the_reference_sql_keeps_working_after_spool_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = reference_copy(dir.path());
    let q = open(&path, OpenMode::ReadWrite);
    let a = q.enqueue(b"from spool", "k-spool").unwrap().id;
    let b = q.enqueue(b"bin\xff\x00", "").unwrap().id;
    q.set_held(&[1], true).unwrap();
    q.record_attempt(
        4,
        &AttemptUpdate {
            attempts: 4,
            next_retry_at: Some(START.saturating_add(Duration::from_secs(60))),
            last_error: Some("503".into()),
        },
    )
    .unwrap();
    assert!(q.dead_letter(b, "gave up").unwrap());
    assert!(q.mark_done(&[2]).unwrap()[0]);
    drop(q);

    let c = Connection::open(&path).unwrap();
    let rows: Vec<(i64, String, String, i64)> = c
        .prepare(
            "SELECT id, payload, idempotency_key, attempts FROM morph_offline_queue ORDER BY id",
        )
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        vec![
            (1, "hello, world".into(), "".into(), 0),
            (
                3,
                "{\"op\":\"create\",\"n\":42}".into(),
                "order-42".into(),
                0
            ),
            (4, "retry me".into(), "".into(), 4),
            (a as i64, "from spool".into(), "k-spool".into(), 0),
        ]
    );
    // The reference INSERT names only its own columns.
    let insert =
        "INSERT INTO morph_offline_queue (payload, idempotency_key, attempts, enqueued_at) \
                  VALUES (?1, ?2, 0, ?3)";
    c.execute(insert, ("from reference", "k-ref", 1_800_000_100i64))
        .unwrap();
    let ref_id = c.last_insert_rowid() as u64;
    // Above every id spool issued, the dead letter's included.
    assert!(ref_id > b, "{ref_id} <= {b}");
    // The partial unique index still dedups for the reference.
    assert!(c.execute(insert, ("dup", "k-spool", 0i64)).is_err());
    drop(c);

    let q = open(&path, OpenMode::ReadWrite);
    let got = q.get(ref_id).unwrap().unwrap();
    assert_eq!(got.payload, b"from reference");
    assert_eq!(got.key, "k-ref");
    assert_eq!(got.enqueued_at, Some(Timestamp::from_secs(1_800_000_100)));
    assert_eq!(
        (got.next_retry_at, got.last_error, got.held),
        (None, None, false)
    );
    let d = q.enqueue(b"again", "k-ref").unwrap();
    assert_eq!((d.id, d.deduplicated), (ref_id, true));
    assert_eq!(q.enqueue(b"next", "").unwrap().id, ref_id + 1);
    assert_eq!(q.dead_get(b).unwrap().unwrap().item.payload, b"bin\xff\x00");
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    drop(open(&path, OpenMode::CreateNew));
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 7")
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite, OpenMode::Create] {
        match SqliteQueue::open(&path, &opts(mode)) {
            Err(e @ Error::SchemaTooNew { found: 7, .. }) => {
                assert_eq!(e.kind(), ErrorKind::Data)
            }
            other => panic!("{mode:?}: {other:?}"),
        }
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn garbage_after_the_sqlite_header_is_bad_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let mut bytes = SQLITE_HEADER.to_vec();
    bytes.extend((0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    std::fs::write(&path, &bytes).unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let e = SqliteQueue::open(&path, &opts(mode)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Data, "{mode:?}: {e}");
        let e = Spool::open(&path, &opts(mode)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Data, "{mode:?}: {e}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn an_unrelated_database_is_not_a_spool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hi');")
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite, OpenMode::Create] {
        let e = SqliteQueue::open(&path, &opts(mode)).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{mode:?}: {e:?}");
        assert_eq!(e.kind(), ErrorKind::Data);
        assert!(e.to_string().contains("not a spool database"), "{e}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "file changed");
}

#[test]
fn an_empty_database_gets_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch("PRAGMA user_version = 0; VACUUM;")
        .unwrap();
    // Read-only: an empty spool, nothing written.
    let q = open(&path, OpenMode::ReadOnly);
    assert_eq!(q.size().unwrap(), 0);
    assert_eq!(q.drain().unwrap(), vec![]);
    assert_eq!(q.high_water().unwrap(), 0);
    assert_eq!(q.stats(START).unwrap().depth, 0);
    assert_eq!(q.uuid().unwrap_err().kind(), ErrorKind::Usage);
    drop(q);
    assert_eq!(user_version(&path), 0);

    let q = open(&path, OpenMode::ReadWrite);
    assert_eq!(user_version(&path), 6);
    assert_eq!(q.enqueue(b"first", "").unwrap().id, 1);
}

/// `(id, late)` of every retained record, by id.
fn late_flags(path: &Path) -> Vec<(i64, bool)> {
    Connection::open(path)
        .unwrap()
        .prepare("SELECT id, late FROM spool_delivered ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A spool of schema version 4 (every retained record in a time index)
/// is read as it is by a read-only open, and migrated by the first
/// writable one: records delivered in id order lose their time-index
/// entry, the others ("late") keep it, and pruning takes exactly the
/// expired records either way.
#[test]
fn a_version_4_spool_is_migrated_and_prunes_what_expired() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v4.db");
    let ms = START.as_millis();
    let minute = 60_000;
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        for sql in [
            include_str!("../src/backend/sqlite/migrations/0000_reference.sql"),
            include_str!("../src/backend/sqlite/migrations/0001_spool.sql"),
            include_str!("../src/backend/sqlite/migrations/0002_push.sql"),
            include_str!("../src/backend/sqlite/migrations/0003_policies.sql"),
            include_str!("../src/backend/sqlite/migrations/0004_retention.sql"),
        ] {
            c.execute_batch(sql).unwrap();
        }
        c.execute_batch("INSERT INTO spool_meta (key, value) VALUES ('retain_ms', '3600000')")
            .unwrap();
        // Delivered at +1m, +3m (id 2), +2m (id 3: out of order), +4m.
        for (id, at) in [(1, 1), (2, 3), (3, 2), (4, 4)] {
            c.execute(
                "INSERT INTO spool_delivered (id, payload, delivered_at, evidence) \
                 VALUES (?1, 'p', ?2, 'http:200')",
                [id, ms + at * minute],
            )
            .unwrap();
        }
    }
    assert_eq!(user_version(&path), 4);
    let ids = |q: &SqliteQueue| -> Vec<u64> {
        q.delivered_page(0, 100)
            .unwrap()
            .iter()
            .map(|d| d.item.id)
            .collect()
    };
    let q = open(&path, OpenMode::ReadOnly);
    assert_eq!(ids(&q), vec![1, 2, 3, 4]);
    assert_eq!(q.stats(START).unwrap().delivered_retained, 4);
    let report = q.verify().unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.starts_with("schema version 4")),
        "{report:?}"
    );
    drop(q);
    assert_eq!(user_version(&path), 4, "a read-only open never migrates");

    let clock = clock();
    let q = SqliteQueue::open(&path, &opts_with(OpenMode::ReadWrite, &clock)).unwrap();
    assert_eq!(user_version(&path), 6);
    {
        assert_eq!(
            late_flags(&path),
            vec![(1, false), (2, false), (3, true), (4, false)]
        );
        let c = Connection::open(&path).unwrap();
        let indexes: Vec<String> = c
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'spool_delivered' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(indexes, vec!["ix_delivered_key", "ix_delivered_late"]);
    }
    // A delivery after the migration, out of id order too: an item
    // enqueued now gets id 5; delivered at +5m it is in order.
    let five = q.enqueue(b"five", "").unwrap().id;
    clock.set(Timestamp::from_millis(ms + 5 * minute));
    q.deliver(&[(five, spool::Evidence::Exit(0))]).unwrap();
    let mut left = vec![1, 2, 3, 4, five];
    for (m, id) in [(1, 1), (2, 3), (3, 2), (4, 4), (5, five)] {
        clock.set(Timestamp::from_millis(ms + 3_600_000 + m * minute + 1));
        left.retain(|x| *x != id);
        assert_eq!(q.prune_delivered(1).unwrap(), 1, "at +{m}m");
        assert_eq!(q.prune_delivered(10).unwrap(), 0, "at +{m}m");
        assert_eq!(ids(&q), left, "at +{m}m");
    }
    // The walk's cursor stands at the last record it passed.
    let c = Connection::open(&path).unwrap();
    let after: String = c
        .query_row(
            "SELECT value FROM spool_meta WHERE key = 'prune_after'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(after, five.to_string());
}

/// Several retained deliveries in one call are marked late exactly as
/// one call each would mark them: the call learns where the records in
/// order end from the records it stores itself.
#[test]
fn deliveries_in_one_call_are_late_as_they_would_be_one_by_one() {
    let late_of = |batched: bool| -> Vec<(i64, bool)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let clock = clock();
        let q = SqliteQueue::open(&path, &opts_with(OpenMode::Create, &clock)).unwrap();
        q.set_retain(Some(Duration::from_secs(3600))).unwrap();
        for n in 0..8 {
            q.enqueue(format!("p{n}").as_bytes(), "").unwrap();
        }
        let ok = spool::Evidence::Exit(0);
        q.deliver(&[(4, ok)]).unwrap();
        clock.set(START.saturating_add(Duration::from_secs(60)));
        // 5 and 7 in order, 2 and 6 below a kept id, 8 in order.
        let ids = [5, 2, 7, 6, 8];
        if batched {
            let done: Vec<_> = ids.iter().map(|&id| (id, ok)).collect();
            q.deliver(&done).unwrap();
        } else {
            for id in ids {
                q.deliver(&[(id, ok)]).unwrap();
            }
        }
        // Delivered earlier than 8 although stored after it: late.
        clock.set(START.saturating_add(Duration::from_secs(30)));
        q.deliver(&[(1, ok)]).unwrap();
        late_flags(&path)
    };
    let want = vec![
        (1, true),
        (2, true),
        (4, false),
        (5, false),
        (6, true),
        (7, false),
        (8, false),
    ];
    assert_eq!(late_of(false), want, "one call each");
    assert_eq!(late_of(true), want, "one call");
}

/// A spool of schema version 5 (dead letters not indexed by key) is read
/// as it is by a read-only open, which `verify` notes, and migrated by
/// the first writable one: the index `ix_dead_key` is there, rows are
/// kept, and an import finds a dead letter by its key through it.
#[test]
fn a_version_5_spool_gets_the_dead_letter_key_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        for sql in [
            include_str!("../src/backend/sqlite/migrations/0000_reference.sql"),
            include_str!("../src/backend/sqlite/migrations/0001_spool.sql"),
            include_str!("../src/backend/sqlite/migrations/0002_push.sql"),
            include_str!("../src/backend/sqlite/migrations/0003_policies.sql"),
            include_str!("../src/backend/sqlite/migrations/0004_retention.sql"),
            include_str!("../src/backend/sqlite/migrations/0005_prune_order.sql"),
        ] {
            c.execute_batch(sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO spool_meta (key, value) VALUES ('uuid', '9b2f8a4e-6f7e-4d1a-9c3b-2a1d0e5f6a7b');
             INSERT INTO spool_dead_letters (id, payload, idempotency_key, attempts, last_error, dead_at)
                 VALUES (3, 'gone', 'kd', 5, 'HTTP 500', 1700000002000);",
        )
        .unwrap();
    }
    let indexes = || -> Vec<String> {
        Connection::open(&path)
            .unwrap()
            .prepare(
                "SELECT name FROM sqlite_master WHERE type = 'index' \
                 AND tbl_name = 'spool_dead_letters' ORDER BY name",
            )
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    assert_eq!(user_version(&path), 5);
    let q = open(&path, OpenMode::ReadOnly);
    assert_eq!(q.dead_count().unwrap(), 1);
    let report = q.verify().unwrap();
    assert!(report.healthy(), "{report:?}");
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.starts_with("schema version 5")),
        "{report:?}"
    );
    drop(q);
    assert_eq!(user_version(&path), 5, "a read-only open never migrates");
    assert_eq!(indexes(), vec!["ix_dead_dead_at"]);

    let q = open(&path, OpenMode::ReadWrite);
    assert_eq!(user_version(&path), 6);
    assert_eq!(indexes(), vec!["ix_dead_dead_at", "ix_dead_key"]);
    assert_eq!(q.dead_get(3).unwrap().unwrap().item.key, "kd");
    let mut item = Item::new(7, b"again".to_vec(), "kd".into(), START);
    item.attempts = 5;
    let rec = Record {
        item,
        state: RecordState::Dead,
        dead_at: Some(START),
        delivery: None,
    };
    let r = q.import(&[rec]).unwrap();
    assert_eq!((r[0].id, r[0].deduplicated), (3, true));
    assert_eq!(q.dead_count().unwrap(), 1);
}

/// A spool of schema version 1 (before push) is read as it is by a
/// read-only open — nothing in flight, no push state — and migrated,
/// rows, dead letters and uuid kept, by the first writable one.
#[test]
fn a_version_1_spool_is_read_as_it_is_and_migrated_by_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL").unwrap();
        c.execute_batch(include_str!(
            "../src/backend/sqlite/migrations/0000_reference.sql"
        ))
        .unwrap();
        c.execute_batch(include_str!(
            "../src/backend/sqlite/migrations/0001_spool.sql"
        ))
        .unwrap();
        c.execute_batch(
            "INSERT INTO spool_meta (key, value) VALUES ('uuid', '9b2f8a4e-6f7e-4d1a-9c3b-2a1d0e5f6a7b');
             INSERT INTO morph_offline_queue (payload, idempotency_key, enqueued_at) VALUES ('one', 'k1', 1700000000);
             INSERT INTO morph_offline_queue (payload, enqueued_at, held) VALUES ('two', 1700000001, 1);
             INSERT INTO spool_dead_letters (id, payload, attempts, last_error, dead_at) VALUES (9, 'gone', 5, 'HTTP 500', 1700000002000);",
        )
        .unwrap();
    }
    assert_eq!(user_version(&path), 1);
    let q = open(&path, OpenMode::ReadOnly);
    let items = q.drain().unwrap();
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| i.push_seq.is_none()));
    assert!(items[1].held);
    assert_eq!(
        q.dead_get(9).unwrap().unwrap().item.last_error.as_deref(),
        Some("HTTP 500")
    );
    assert_eq!(q.push_state().unwrap(), spool::PushState::default());
    assert!(q.push_in_flight(0, 10).unwrap().is_empty());
    drop(q);
    assert_eq!(user_version(&path), 1, "a read-only open never migrates");

    let q = open(&path, OpenMode::ReadWrite);
    assert_eq!(user_version(&path), 6);
    assert_eq!(q.uuid().unwrap(), "9b2f8a4e-6f7e-4d1a-9c3b-2a1d0e5f6a7b");
    assert_eq!(q.drain().unwrap(), items);
    assert_eq!(
        q.push_assign(&[1, 2]).unwrap(),
        vec![(1, 1)],
        "held items get no number"
    );
    assert_eq!(
        q.enqueue(b"three", "").unwrap().id,
        10,
        "ids continue above the dead letter"
    );
}

#[test]
fn create_modes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let e = SqliteQueue::open(&path, &opts(OpenMode::ReadWrite)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = SqliteQueue::open(&path, &opts(OpenMode::ReadOnly)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(!path.exists());

    let q = open(&path, OpenMode::CreateNew);
    assert_eq!(q.high_water().unwrap(), 0);
    assert_eq!(q.stats(START).unwrap().high_water, 0);
    assert_eq!(q.path(), path);
    let files = q.files();
    assert_eq!(files[0], path);
    assert_eq!(files[1], sidecar(&path, "-wal"));
    assert_eq!(files[2], sidecar(&path, "-shm"));
    drop(q);
    let e = SqliteQueue::open(&path, &opts(OpenMode::CreateNew)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CannotCreate);
    drop(open(&path, OpenMode::Create));

    let missing = dir.path().join("no/such/dir/q.db");
    let e = SqliteQueue::open(&missing, &opts(OpenMode::Create)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::CannotCreate, "{e}");
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn journal_mode_is_wal_and_sync_is_full() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let q = open(&path, OpenMode::Create);
    q.enqueue(b"x", "").unwrap();
    let c = Connection::open(&path).unwrap();
    let mode: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn payload_bytes_round_trip_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin.db");
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let payloads: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\0".to_vec(),
        b"a\0b\0".to_vec(),
        all_bytes.clone(),
        all_bytes.iter().rev().copied().collect(),
        b"\xff\xfe".to_vec(),
        b"\x80".to_vec(),
        b"\xc0\xaf".to_vec(),
        b"\xed\xa0\x80".to_vec(),
        b"ok then \xf5".to_vec(),
        b"'single' \"double\" back\\slash \\0 \\n".to_vec(),
        "h\u{e9}llo \u{2713} \u{1f389}".as_bytes().to_vec(),
        b"\r\n\t\x1b[31m".to_vec(),
    ];
    let q = open(&path, OpenMode::Create);
    let items: Vec<NewItem> = payloads
        .iter()
        .map(|p| NewItem::new(p.clone(), ""))
        .collect();
    q.enqueue_batch(&items, &EnqueueOptions::default()).unwrap();
    drop(q);

    let q = open(&path, OpenMode::ReadOnly);
    let got: Vec<Vec<u8>> = q.drain().unwrap().into_iter().map(|i| i.payload).collect();
    assert_eq!(got, payloads);
    drop(q);

    // UTF-8 is TEXT, what the reference reads; the rest is BLOB.
    let c = Connection::open(&path).unwrap();
    let types: Vec<String> = c
        .prepare("SELECT typeof(payload) FROM morph_offline_queue ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (p, t) in payloads.iter().zip(&types) {
        let want = if std::str::from_utf8(p).is_ok() {
            "text"
        } else {
            "blob"
        };
        assert_eq!(t, want, "{p:?}");
    }
    drop(c);

    // Through the dead-letter set and back.
    let q = open(&path, OpenMode::ReadWrite);
    for i in q.drain().unwrap() {
        assert!(q.dead_letter(i.id, "x").unwrap());
    }
    let dead: Vec<Vec<u8>> = q
        .dead_page(0, 100)
        .unwrap()
        .into_iter()
        .map(|d| d.item.payload)
        .collect();
    assert_eq!(dead, payloads);
    let ids: Vec<u64> = (1..=payloads.len() as u64).collect();
    assert!(q.requeue(&ids).unwrap().iter().all(|&b| b));
    let back: Vec<Vec<u8>> = q.drain().unwrap().into_iter().map(|i| i.payload).collect();
    assert_eq!(back, payloads);
}

#[test]
fn dedup_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let q = open(&path, OpenMode::Create);
    let first = q.enqueue(b"first", "op-1").unwrap();
    let empty1 = q.enqueue(b"e1", "").unwrap();
    let empty2 = q.enqueue(b"e2", "").unwrap();
    assert_ne!(empty1.id, empty2.id);
    drop(q);

    let q = open(&path, OpenMode::ReadWrite);
    let again = q.enqueue(b"second", "op-1").unwrap();
    assert_eq!((again.id, again.deduplicated), (first.id, true));
    assert_eq!(q.get(first.id).unwrap().unwrap().payload, b"first");
    assert_eq!(q.size().unwrap(), 3);
    assert_eq!(
        q.mark_done(&[first.id, first.id, 999]).unwrap(),
        vec![true, false, false]
    );
    drop(q);

    let q = open(&path, OpenMode::ReadWrite);
    let fresh = q.enqueue(b"third", "op-1").unwrap();
    assert!(!fresh.deduplicated);
    assert!(fresh.id > empty2.id);
}

#[test]
fn the_depth_bound_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let mut o = opts(OpenMode::CreateNew);
    o.max_depth = Some(2);
    let q = SqliteQueue::open(&path, &o).unwrap();
    q.enqueue(b"a", "ka").unwrap();
    q.enqueue(b"b", "").unwrap();
    drop(q);

    // Reopened without a bound, and with another one: the stored bound wins.
    for bound in [None, Some(10)] {
        let mut o = opts(OpenMode::ReadWrite);
        o.max_depth = bound;
        let q = SqliteQueue::open(&path, &o).unwrap();
        assert_eq!(q.max_depth().unwrap(), Some(2));
        match q.enqueue(b"c", "") {
            Err(Error::QueueFull {
                max_depth: 2,
                depth: 2,
            }) => {}
            other => panic!("{other:?}"),
        }
        // A dedup hit stores nothing, so it succeeds on a full spool.
        let d = q.enqueue(b"a2", "ka").unwrap();
        assert!(d.deduplicated);
        // A batch that does not fit stores nothing.
        let batch = [NewItem::new("x", "kx"), NewItem::new("y", "")];
        let over = EnqueueOptions {
            depth_limit: DepthLimit::Override(Some(3)),
        };
        assert!(q.enqueue_batch(&batch, &over).is_err());
        assert_eq!(q.size().unwrap(), 2);
        assert_eq!(q.stats(START).unwrap().max_depth, Some(2));
    }
    let q = open(&path, OpenMode::ReadWrite);
    let unbounded = EnqueueOptions {
        depth_limit: DepthLimit::Override(None),
    };
    q.enqueue_batch(&[NewItem::new("c", "")], &unbounded)
        .unwrap();
    q.set_max_depth(None).unwrap();
    drop(q);
    let q = open(&path, OpenMode::ReadOnly);
    assert_eq!(q.max_depth().unwrap(), None);
    drop(q);
    let q = open(&path, OpenMode::ReadWrite);
    q.set_max_depth(Some(3)).unwrap();
    drop(q);
    assert_eq!(
        open(&path, OpenMode::ReadOnly).max_depth().unwrap(),
        Some(3)
    );
}

#[test]
fn two_handles_and_four_threads_lose_and_duplicate_nothing() {
    const PER_THREAD: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let handles = [
        Arc::new(open(&path, OpenMode::Create)),
        Arc::new(open(&path, OpenMode::Create)),
    ];
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let q = Arc::clone(&handles[t % 2]);
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for i in 0..PER_THREAD {
                    let payload = format!("t{t}-{i}");
                    if i % 10 == 0 {
                        let batch = [
                            NewItem::new(payload.clone(), ""),
                            NewItem::new(format!("{payload}-b"), format!("key-{t}-{i}")),
                        ];
                        let r = q.enqueue_batch(&batch, &EnqueueOptions::default()).unwrap();
                        ids.extend(r.iter().map(|e| e.id));
                    } else {
                        ids.push(q.enqueue(payload.as_bytes(), "").unwrap().id);
                    }
                }
                ids
            })
        })
        .collect();
    let ids: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let expected = 4 * (PER_THREAD + PER_THREAD / 10);
    assert_eq!(ids.len(), expected);
    let unique: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), expected);
    for q in &handles {
        assert_eq!(q.size().unwrap(), expected as u64);
        assert_eq!(q.high_water().unwrap(), expected as u64);
        let payloads: HashSet<Vec<u8>> =
            q.drain().unwrap().into_iter().map(|i| i.payload).collect();
        assert_eq!(payloads.len(), expected);
    }
}

#[test]
fn dead_letters_requeue_and_purge_keep_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let clock = clock();
    let q = SqliteQueue::open(&path, &opts_with(OpenMode::Create, &clock)).unwrap();
    q.enqueue(b"one", "").unwrap();
    q.enqueue(b"two", "k2").unwrap();
    q.enqueue(b"three", "").unwrap();
    q.record_attempt(
        2,
        &AttemptUpdate {
            attempts: 5,
            next_retry_at: Some(START.saturating_add(Duration::from_secs(30))),
            last_error: Some("timeout".into()),
        },
    )
    .unwrap();
    clock.advance(Duration::from_millis(1500));
    assert!(q.dead_letter(2, "rejected: 422").unwrap());
    assert!(!q.dead_letter(2, "again").unwrap());
    assert!(q.dead_letter(3, "gone").unwrap());
    let dl = q.dead_get(2).unwrap().unwrap();
    assert_eq!(
        dl.dead_at,
        START.saturating_add(Duration::from_millis(1500))
    );
    assert_eq!(dl.item.id, 2);
    assert_eq!(dl.item.key, "k2");
    assert_eq!(dl.item.attempts, 5);
    assert_eq!(dl.item.last_error.as_deref(), Some("rejected: 422"));
    assert_eq!(
        dl.item.next_retry_at,
        Some(START.saturating_add(Duration::from_secs(30)))
    );
    assert_eq!(q.get(2).unwrap(), None);
    assert_eq!(q.size().unwrap(), 1);
    assert_eq!(q.dead_count().unwrap(), 2);
    assert_eq!(q.stats(START).unwrap().dead_letters, 2);
    // The largest id is dead: new ids stay above it.
    assert_eq!(q.high_water().unwrap(), 3);
    assert_eq!(q.enqueue(b"four", "").unwrap().id, 4);

    // A pending item took the key over: requeue refuses, changing nothing.
    assert_eq!(q.enqueue(b"two again", "k2").unwrap().id, 5);
    let e = q.requeue(&[3, 2]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Data);
    assert_eq!(q.dead_count().unwrap(), 2);
    assert!(q.mark_done(&[5]).unwrap()[0]);

    assert_eq!(q.requeue(&[2, 2, 42]).unwrap(), vec![true, false, false]);
    let back = q.get(2).unwrap().unwrap();
    assert_eq!(back.id, 2);
    assert_eq!(back.key, "k2");
    assert_eq!(back.attempts, 0);
    assert_eq!(back.next_retry_at, None);
    assert_eq!(back.last_error.as_deref(), Some("rejected: 422"));
    assert!(!back.held);
    assert_eq!(q.enqueue(b"dup", "k2").unwrap().id, 2);

    // Requeue respects the stored bound, changing nothing when over it.
    q.set_max_depth(Some(q.size().unwrap())).unwrap();
    match q.requeue(&[3]) {
        Err(Error::QueueFull { .. }) => {}
        other => panic!("{other:?}"),
    }
    assert!(q.dead_get(3).unwrap().is_some());
    q.set_max_depth(None).unwrap();

    // A held item loses its flag in the dead-letter set (a dead letter
    // is never replayed, so there is nothing to hold); requeue keeps it
    // released.
    q.set_held(&[1], true).unwrap();
    assert!(q.dead_letter(1, "held and dead").unwrap());
    assert!(!q.dead_get(1).unwrap().unwrap().item.held);
    assert_eq!(q.requeue(&[1]).unwrap(), vec![true]);
    assert!(!q.get(1).unwrap().unwrap().held);

    assert_eq!(q.purge(&[3, 3, 2]).unwrap(), vec![true, false, false]);
    assert_eq!(q.dead_count().unwrap(), 0);
    assert_eq!(q.enqueue(b"six", "").unwrap().id, 6);
    drop(q);

    // The ids survive a reopen.
    let q = open(&path, OpenMode::ReadOnly);
    let ids: Vec<u64> = q.drain().unwrap().iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![1, 2, 4, 6]);
}

#[test]
fn import_keeps_ids_above_the_high_water_mark() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let q = open(&path, OpenMode::Create);
    q.enqueue(b"a", "ka").unwrap();
    q.enqueue(b"b", "").unwrap();
    let rec = |id, key: &str, state, enqueued_at: Option<Timestamp>| Record {
        item: Item {
            id,
            payload: format!("p{id}").into_bytes(),
            key: key.into(),
            attempts: 2,
            enqueued_at,
            next_retry_at: None,
            last_error: Some("e".into()),
            held: false,
            push_seq: None,
            group: None,
            coalesce_key: None,
        },
        state,
        dead_at: (state == RecordState::Dead).then_some(START),
        delivery: None,
    };
    let records = [
        rec(1, "", RecordState::Pending, None),
        rec(10, "ka", RecordState::Held, None),
        rec(20, "", RecordState::Dead, None),
        rec(15, "kb", RecordState::Held, Some(Timestamp::from_secs(5))),
        rec(30, "kb", RecordState::Pending, None),
    ];
    let out = q.import(&records).unwrap();
    let summary: Vec<(u64, bool, bool)> = out
        .iter()
        .map(|i| (i.id, i.kept_id, i.deduplicated))
        .collect();
    assert_eq!(
        summary,
        vec![
            (3, false, false),
            (1, false, true),
            (20, true, false),
            (21, false, false),
            (21, false, true),
        ]
    );
    let three = q.get(3).unwrap().unwrap();
    assert_eq!(three.enqueued_at, None);
    assert_eq!(three.attempts, 2);
    let held = q.get(21).unwrap().unwrap();
    assert!(held.held);
    assert_eq!(held.enqueued_at, Some(Timestamp::from_secs(5)));
    let dead: DeadLetter = q.dead_get(20).unwrap().unwrap();
    assert_eq!(dead.dead_at, START);
    assert_eq!(dead.item.enqueued_at, None);
    // Moving between the tables keeps the unknown enqueue time unknown.
    assert!(q.dead_letter(3, "x").unwrap());
    assert_eq!(q.dead_get(3).unwrap().unwrap().item.enqueued_at, None);
    assert_eq!(q.requeue(&[3, 20]).unwrap(), vec![true, true]);
    assert_eq!(q.get(20).unwrap().unwrap().enqueued_at, None);

    // A record that does not parse changes nothing.
    let mut bad = rec(50, "", RecordState::Dead, None);
    bad.dead_at = None;
    let before = q.drain().unwrap();
    assert_eq!(
        q.import(&[rec(40, "", RecordState::Pending, None), bad])
            .unwrap_err()
            .kind(),
        ErrorKind::Data
    );
    assert_eq!(q.drain().unwrap(), before);
    assert_eq!(q.high_water().unwrap(), 21);
    drop(q);

    // A dead letter imported above the sequence raises it: the reference
    // INSERT does not reuse its id.
    let q = open(&path, OpenMode::ReadWrite);
    q.import(&[rec(100, "", RecordState::Dead, None)]).unwrap();
    drop(q);
    let c = Connection::open(&path).unwrap();
    c.execute(
        "INSERT INTO morph_offline_queue (payload, idempotency_key, attempts, enqueued_at) \
         VALUES ('ref', '', 0, 1)",
        [],
    )
    .unwrap();
    assert_eq!(c.last_insert_rowid(), 101);
}

#[test]
fn stats_count_held_waiting_and_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let q = open(&path, OpenMode::Create);
    for i in 0..6 {
        q.enqueue(format!("{i}").as_bytes(), "").unwrap();
    }
    q.set_held(&[2, 3, 99], true).unwrap();
    q.set_attempts(4, 2).unwrap();
    let later = START.saturating_add(Duration::from_secs(10));
    q.record_attempt(
        5,
        &AttemptUpdate {
            attempts: 2,
            next_retry_at: Some(later),
            last_error: None,
        },
    )
    .unwrap();
    q.mark_done(&[1]).unwrap();
    let s = q.stats(START).unwrap();
    assert_eq!(s.depth, 5);
    assert_eq!(s.held, 2);
    assert_eq!(s.waiting, 1);
    assert_eq!(s.oldest_id, Some(2));
    assert_eq!(
        s.oldest_enqueued_at,
        Some(Timestamp::from_secs(START.as_secs()))
    );
    assert_eq!(
        s.attempts_histogram.into_iter().collect::<Vec<_>>(),
        vec![(0, 3), (2, 2)]
    );
    assert_eq!(q.stats(later).unwrap().waiting, 0);
    assert_eq!(q.set_held(&[2, 99], false).unwrap(), vec![true, false]);
    assert_eq!(q.stats(START).unwrap().held, 1);
}

// ---------------------------------------------------------------------
// The memory backend is the model: every operation, same results.

#[derive(Clone, Debug)]
enum Op {
    Enqueue(Vec<(u8, u8)>, Option<Option<u64>>),
    MarkDone(Vec<u64>),
    SetAttempts(u64, u32),
    Record(u64, u32, Option<u32>, bool),
    Hold(Vec<u64>, bool),
    Kill(u64),
    Requeue(Vec<u64>),
    Purge(Vec<u64>),
    Import(Vec<(u64, u8, u8, bool, bool)>),
    SetMaxDepth(Option<u64>),
    Advance(u32),
}

const KEYS: [&str; 4] = ["", "a", "b", "c"];

fn op() -> impl Strategy<Value = Op> {
    // Small ids, so that most operations meet an item.
    let id = 0u64..9;
    let ids = prop::collection::vec(id.clone(), 0..4);
    prop_oneof![
        4 => (
            prop::collection::vec((0u8..5, 0u8..4), 0..4),
            prop::option::of(prop::option::of(0u64..8))
        )
            .prop_map(|(v, d)| Op::Enqueue(v, d)),
        1 => ids.clone().prop_map(Op::MarkDone),
        1 => (id.clone(), 0u32..4).prop_map(|(i, a)| Op::SetAttempts(i, a)),
        1 => (id.clone(), 0u32..4, prop::option::of(0u32..20), any::<bool>())
            .prop_map(|(i, a, r, e)| Op::Record(i, a, r, e)),
        1 => (ids.clone(), any::<bool>()).prop_map(|(v, h)| Op::Hold(v, h)),
        2 => id.clone().prop_map(Op::Kill),
        1 => ids.clone().prop_map(Op::Requeue),
        1 => ids.prop_map(Op::Purge),
        1 => prop::collection::vec((0u64..16, 0u8..4, 0u8..3, any::<bool>(), any::<bool>()), 0..4)
            .prop_map(Op::Import),
        1 => prop::option::of(0u64..8).prop_map(Op::SetMaxDepth),
        1 => (0u32..5000).prop_map(Op::Advance),
    ]
}

fn payload(n: u8) -> Vec<u8> {
    match n {
        0 => b"".to_vec(),
        1 => b"text".to_vec(),
        2 => b"\xff\x00bin".to_vec(),
        3 => b"quote ' \" \\".to_vec(),
        _ => vec![n; 3],
    }
}

/// The outcome of one call, comparable across backends.
fn outcome<T: std::fmt::Debug>(r: spool::Result<T>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("err {:?} {e}", e.kind()),
    }
}

fn apply(q: &dyn Queue, clock: &ManualClock, op: &Op) -> String {
    match op {
        Op::Enqueue(items, limit) => {
            let items: Vec<NewItem> = items
                .iter()
                .map(|&(p, k)| NewItem::new(payload(p), KEYS[k as usize]))
                .collect();
            let opts = EnqueueOptions {
                depth_limit: limit.map_or(DepthLimit::Stored, DepthLimit::Override),
            };
            outcome(q.enqueue_batch(&items, &opts))
        }
        Op::MarkDone(ids) => outcome(q.mark_done(ids)),
        Op::SetAttempts(id, a) => outcome(q.set_attempts(*id, *a)),
        Op::Record(id, a, retry, err) => outcome(q.record_attempt(
            *id,
            &AttemptUpdate {
                attempts: *a,
                next_retry_at: retry.map(|s| clock.now_plus(s)),
                last_error: err.then(|| format!("failed {a}")),
            },
        )),
        Op::Hold(ids, held) => outcome(q.set_held(ids, *held)),
        Op::Kill(id) => outcome(q.dead_letter(*id, "dead")),
        Op::Requeue(ids) => outcome(q.requeue(ids)),
        Op::Purge(ids) => outcome(q.purge(ids)),
        Op::Import(recs) => {
            let records: Vec<Record> = recs
                .iter()
                .map(|&(id, k, state, known_time, has_dead_at)| {
                    let state = [RecordState::Pending, RecordState::Held, RecordState::Dead]
                        [state as usize];
                    Record {
                        item: Item {
                            id,
                            payload: payload((id % 5) as u8),
                            key: KEYS[k as usize].into(),
                            attempts: (id % 3) as u32,
                            // Whole seconds: the reference column holds seconds.
                            enqueued_at: known_time
                                .then(|| Timestamp::from_secs(1_000 + id as i64)),
                            next_retry_at: (id % 2 == 0).then(|| Timestamp::from_millis(7_777)),
                            last_error: (id % 3 == 0).then(|| "imported".to_string()),
                            held: id % 2 == 1,
                            push_seq: None,
                            group: None,
                            coalesce_key: None,
                        },
                        state,
                        dead_at: (has_dead_at || state != RecordState::Dead)
                            .then(|| Timestamp::from_millis(123_456)),
                        delivery: None,
                    }
                })
                .collect();
            outcome(q.import(&records))
        }
        Op::SetMaxDepth(b) => outcome(q.set_max_depth(*b)),
        Op::Advance(ms) => {
            clock.advance(Duration::from_millis(u64::from(*ms)));
            String::new()
        }
    }
}

trait NowPlus {
    fn now_plus(&self, secs: u32) -> Timestamp;
}

impl NowPlus for ManualClock {
    fn now_plus(&self, secs: u32) -> Timestamp {
        use spool::Clock;
        self.now()
            .saturating_add(Duration::from_secs(u64::from(secs)))
    }
}

/// Everything a caller can observe, besides the uuid.
fn observe(q: &dyn Queue, now: Timestamp) -> String {
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        q.drain().unwrap(),
        q.dead_page(0, 1000).unwrap(),
        q.stats(now).unwrap(),
        q.size().unwrap(),
        q.dead_count().unwrap(),
        q.high_water().unwrap(),
        q.max_depth().unwrap(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn behaves_as_the_memory_model(
        initial_bound in prop::option::of(0u64..6),
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.db");
        let clock = clock();
        let shared: SharedClock = Arc::new(clock.clone());
        let model = MemoryQueue::with_max_depth(initial_bound, shared);
        let mut o = opts_with(OpenMode::CreateNew, &clock);
        o.max_depth = initial_bound;
        let mut sqlite = SqliteQueue::open(&path, &o).unwrap();
        for (i, op) in ops.iter().enumerate() {
            let want = apply(&model, &clock, op);
            // Both see the same time: undo the model's advance for sqlite.
            if let Op::Advance(_) = op {
            } else {
                let got = apply(&sqlite, &clock, op);
                prop_assert_eq!(&got, &want, "op {} {:?}", i, op);
            }
            let now = { use spool::Clock; clock.now() };
            prop_assert_eq!(observe(&sqlite, now), observe(&model, now), "after op {} {:?}", i, op);
            if i % 7 == 6 {
                // Everything survives reopening.
                drop(sqlite);
                sqlite = SqliteQueue::open(&path, &opts_with(OpenMode::ReadWrite, &clock)).unwrap();
            }
        }
    }
}

#[test]
fn a_spool_named_memory_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(":memory:");
    {
        let q = spool::Spool::open(&p, &spool::OpenOptions::default()).unwrap();
        q.enqueue(b"x", "").unwrap();
    }
    assert!(p.exists());
    let q = spool::Spool::open(&p, &spool::OpenOptions::new(spool::OpenMode::ReadOnly)).unwrap();
    assert_eq!(q.size().unwrap(), 1);
}

/// `size`, the attempt histogram and the dead-letter count come from
/// counts the database keeps (so that they cost nothing on ten million
/// rows); they stay exact when a reference writer inserts, deletes and
/// sets attempts behind spool's back, for read-only and writable handles.
#[test]
fn kept_counts_stay_exact_under_a_reference_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let truth = |path: &Path| -> (u64, BTreeMap<u32, u64>, u64) {
        let c = Connection::open(path).unwrap();
        let n: i64 = c
            .query_row("SELECT count(*) FROM morph_offline_queue", [], |r| r.get(0))
            .unwrap();
        let mut st = c
            .prepare("SELECT attempts, count(*) FROM morph_offline_queue GROUP BY attempts")
            .unwrap();
        let hist: BTreeMap<u32, u64> = st
            .query_map([], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, u64>(1)?)))
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        let d: i64 = c
            .query_row("SELECT count(*) FROM spool_dead_letters", [], |r| r.get(0))
            .unwrap();
        (n as u64, hist, d as u64)
    };
    let check = |what: &str| {
        let want = truth(&path);
        for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
            let q = open(&path, mode);
            let s = q.stats(START).unwrap();
            assert_eq!(
                (
                    q.size().unwrap(),
                    s.attempts_histogram,
                    q.dead_count().unwrap()
                ),
                want,
                "{what} ({mode:?})"
            );
        }
    };
    let q = open(&path, OpenMode::Create);
    let ids: Vec<u64> = (0..10)
        .map(|i| q.enqueue(format!("p{i}").as_bytes(), "").unwrap().id)
        .collect();
    q.set_attempts(ids[0], 3).unwrap();
    q.set_attempts(ids[1], 3).unwrap();
    q.dead_letter(ids[2], "gone").unwrap();
    q.mark_done(&[ids[3]]).unwrap();
    drop(q);
    check("spool's own writes");
    let raw = Connection::open(&path).unwrap();
    raw.execute_batch(
        "INSERT INTO morph_offline_queue (payload, enqueued_at) VALUES ('ref 1', 1);
         INSERT INTO morph_offline_queue (payload, enqueued_at, attempts) VALUES ('ref 2', 1, 2);",
    )
    .unwrap();
    check("a reference writer's inserts");
    raw.execute_batch(
        "DELETE FROM morph_offline_queue WHERE id = 1;
         UPDATE morph_offline_queue SET attempts = 5 WHERE id = 2;
         UPDATE morph_offline_queue SET attempts = 0 WHERE payload = 'ref 2';",
    )
    .unwrap();
    drop(raw);
    check("a reference writer's deletes and attempts");
    let q = open(&path, OpenMode::ReadWrite);
    q.enqueue(b"after", "").unwrap();
    q.requeue(&[ids[2]]).unwrap();
    q.import(&[Record {
        item: Item::new(500, b"imported".to_vec(), String::new(), START),
        state: RecordState::Dead,
        dead_at: Some(START),
        delivery: None,
    }])
    .unwrap();
    drop(q);
    check("writes after the reference writer");
}
