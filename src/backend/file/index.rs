//! The derived index of an NDJSON spool: `<spool>.idx`, a SQLite database
//! that lets every command find what it needs without reading the whole
//! spool file.
//!
//! # What it holds
//!
//! * For the main and the dead-letter file (table `files`): the file's
//!   identity (device and inode), how far it has been indexed
//!   (`upto`: the byte offset just past the last line taken in; `lines`,
//!   `records`, and whether that content lacks its final newline), and a
//!   fingerprint of the bytes before `upto` (SHA-256 over the offset, the
//!   first 4 KiB and the last 4 KiB before it).
//! * Per pending item (`pending`): id, where its last line is (`off`,
//!   `len`), key, attempts, enqueue time, next retry time, hold flag, push
//!   sequence number, ordering group, coalesce key. Payloads stay in the
//!   spool file; an item is read with one `pread` of its line.
//! * Per dead letter (`dead`): id, where its line is in `<spool>.dead`, key.
//! * Per retained delivered item (`delivered`): id, where its line is in
//!   `<spool>.delivered` — or, while `done_off` is set, where the item's
//!   last `put` line and its delivery's `done` line are in the main file
//!   (see the `retain` module) —, key, time of delivery, and whether the
//!   main file still holds a live `put` line for a record of the
//!   delivered file (`in_main`: in files of earlier versions, a crash
//!   came between the two appends of the move; the delivered file wins,
//!   and the `done` line the main file lacks is written before the record
//!   is pruned). Ids a `done` line of the delivered file pruned are kept
//!   in `pruned` until compaction: the main file's delivery of one adds
//!   no record.
//! * One `state` row: the id high-water mark, counts kept by triggers
//!   (pending, held, dead letters, delivered records; attempts per count in `attempts`, kept
//!   by [`Applier`] as it applies lines), the
//!   push state of the last push-state line, the uuid a regeneration gave,
//!   the eviction count of the dead-letter file's last count line, and the
//!   boot the index was last written in.
//! * The push receiver's ledger (`clients`, `client_entries`): per client
//!   its `last_seq`, the acknowledged-reject watermark and the time it last
//!   pushed, and per processed number its outcome, digest and reason.
//!
//! # Why it can always be thrown away
//!
//! The spool file stays the source of truth. Every line enters the index
//! through one path, [`Applier`], whether it is caught up from a tail that
//! another process (or the reference, or a crash between a write and its
//! index update) left behind, written by a batch, or read during a full
//! build. Before the index is used it is checked against the files
//! ([`Index::check_files`]): a different file (identity), a shorter one, other
//! bytes before `upto` (fingerprint), an unknown version, a database that
//! does not open, or an index last written before the machine rebooted
//! (written with `synchronous=OFF`, it may have lost pages in a power
//! loss) is not used: a writer rebuilds it, a reader builds a private one.
//! A valid index that is merely behind is caught up from the tail.

use super::format::{self, ClientLine, Line, PushLine};
use super::io::{read_exact_at, FileIo};
use crate::backend::sql::{Cached, SqlStore};
use crate::error::{Error, Result};
use crate::item::ItemId;
use crate::time::Timestamp;
use rusqlite::{params, Connection, OpenFlags};
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The index format version (`PRAGMA user_version`). An index of any other
/// version is rebuilt.
/// Version 2 added the ordering group and coalesce key of pending items
/// and the eviction count; version 3 the retained delivered items;
/// version 4 the write mark (see [`mark_path`]) and the journal of small
/// writes kept in memory; version 5 the `late` flag of retained records
/// (records delivered in id order have no entry in a time index) and
/// `state.prune_after`; version 6 the index of pending items by ordering
/// group (`pending_group`), which the due rule reads; version 7 the index
/// of dead letters by key (`dead_key`), which an import's dedup reads;
/// version 8 the last error of pending items, which `spool shape --by
/// error` groups by; version 9 the retained records the main file holds
/// (`delivered.done_off`, `done_len`) and the `pruned` table.
mod apply;
mod journal;
mod keep;
mod query;
pub(crate) use apply::Applier;
use journal::mark_clear;
pub(crate) use journal::{clear_mark, journal_path, mark_path};
pub(crate) use keep::Carry;

pub(crate) const INDEX_VERSION: i64 = 9;

/// `PRAGMA application_id` of an index: "SPIX".
const APPLICATION_ID: i64 = 0x5350_4958;

/// SQLite's page cache while an index is built, in KiB. A build inserts
/// the pending rows in id order (the table grows at its end: a few pages
/// of cache are all it needs) and then sorts them for the secondary
/// indexes — and SQLite's sorter keeps up to the cache size in memory
/// besides the cache itself. With 16 MB, rebuilding the index of a
/// million items peaked at 45 MiB; with 4 MB it takes as long, at
/// 19 MiB, and spills the sort to temporary files sooner.
const BUILD_CACHE_KIB: u32 = 4000;

/// Prepared statements a connection keeps: more than a call uses, so
/// that none is parsed again (rusqlite keeps 16 by default, fewer than a
/// delivery with retention uses).
const STATEMENT_CACHE: usize = 64;

/// Bytes at each end that the fingerprint covers.
const FINGERPRINT_SPAN: u64 = 4096;

const TABLES: &str = "
CREATE TABLE files (
    name TEXT PRIMARY KEY,
    dev INTEGER NOT NULL,
    ino INTEGER NOT NULL,
    upto INTEGER NOT NULL,
    lines INTEGER NOT NULL,
    records INTEGER NOT NULL,
    needs_newline INTEGER NOT NULL,
    fingerprint BLOB NOT NULL
);
CREATE TABLE state (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    boot TEXT NOT NULL,
    high_water INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    held INTEGER NOT NULL,
    dead INTEGER NOT NULL,
    push_assigned INTEGER NOT NULL,
    push_acked INTEGER NOT NULL,
    push_skips TEXT NOT NULL,
    uuid TEXT,
    evicted_total INTEGER NOT NULL,
    delivered INTEGER NOT NULL,
    prune_after INTEGER NOT NULL
);
INSERT INTO state VALUES (1, '', 0, 0, 0, 0, 0, 0, '[]', NULL, 0, 0, 0);
CREATE TABLE pending (
    id INTEGER PRIMARY KEY,
    off INTEGER NOT NULL,
    len INTEGER NOT NULL,
    key TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    enqueued_at INTEGER,
    next_retry_at INTEGER,
    held INTEGER NOT NULL,
    push_seq INTEGER,
    group_name TEXT,
    coalesce_key TEXT,
    last_error TEXT
);
CREATE TABLE attempts (attempts INTEGER PRIMARY KEY, n INTEGER NOT NULL);
CREATE TABLE dead (
    id INTEGER PRIMARY KEY,
    off INTEGER NOT NULL,
    len INTEGER NOT NULL,
    key TEXT NOT NULL
);
CREATE TABLE delivered (
    id INTEGER PRIMARY KEY,
    off INTEGER NOT NULL,
    len INTEGER NOT NULL,
    key TEXT NOT NULL,
    delivered_at INTEGER NOT NULL,
    in_main INTEGER NOT NULL,
    late INTEGER NOT NULL,
    done_off INTEGER,
    done_len INTEGER
);
CREATE TABLE pruned (id INTEGER PRIMARY KEY);
CREATE TABLE clients (
    id TEXT PRIMARY KEY,
    known INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    acked INTEGER NOT NULL,
    at INTEGER
);
CREATE TABLE client_entries (
    client TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    digest TEXT,
    reason TEXT,
    PRIMARY KEY (client, seq)
) WITHOUT ROWID;
";

/// Secondary indexes, made after a build has loaded the rows (faster than
/// keeping them up to date row by row).
const SECONDARY: &str = "
CREATE INDEX pending_key ON pending (key, id) WHERE key <> '';
CREATE INDEX pending_seq ON pending (push_seq) WHERE push_seq IS NOT NULL;
CREATE INDEX pending_retry ON pending (next_retry_at) WHERE next_retry_at IS NOT NULL;
CREATE INDEX pending_coalesce ON pending (coalesce_key, id) WHERE coalesce_key IS NOT NULL;
CREATE INDEX pending_group ON pending (group_name, id) WHERE group_name IS NOT NULL;
CREATE INDEX dead_key ON dead (key, id) WHERE key <> '';
CREATE INDEX delivered_key ON delivered (key, delivered_at, id) WHERE key <> '';
CREATE INDEX delivered_late ON delivered (delivered_at, id) WHERE late;
";

/// The counts, made after a full build. Afterwards [`Applier`] keeps them.
const COUNTS: &str = "
UPDATE state SET
    depth = (SELECT count(*) FROM pending),
    held = (SELECT count(*) FROM pending WHERE held),
    dead = (SELECT count(*) FROM dead),
    delivered = (SELECT count(*) FROM delivered);
DELETE FROM attempts;
INSERT INTO attempts SELECT attempts, count(*) FROM pending GROUP BY attempts;
";

/// Which spool file a `files` row describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    Main,
    Dead,
    Delivered,
}

impl Which {
    /// The companion files, in the order every catch-up reads them
    /// (before the main file, so that a move out of the main file is
    /// seen whole).
    pub const COMPANIONS: [Which; 2] = [Which::Dead, Which::Delivered];

    /// The place of this file in per-file arrays: main, dead, delivered.
    pub fn slot(self) -> usize {
        match self {
            Which::Main => 0,
            Which::Dead => 1,
            Which::Delivered => 2,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Which::Main => "main",
            Which::Dead => "dead",
            Which::Delivered => "delivered",
        }
    }
}

/// How far a spool file has been indexed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileRow {
    pub dev: u64,
    pub ino: u64,
    /// The offset just past the last line taken in.
    pub upto: u64,
    /// Lines before `upto`.
    pub lines: u64,
    /// Records (op lines) before `upto`.
    pub records: u64,
    /// The content before `upto` lacks its final newline.
    pub needs_newline: bool,
    pub fingerprint: Vec<u8>,
}

impl FileRow {
    /// The row of file `(dev, ino)` read up to where scan `s` ended, with
    /// `records` records before it and `fingerprint` its first bytes'.
    pub fn read_to(
        (dev, ino): (u64, u64),
        s: &super::scan::Scanned,
        records: u64,
        fingerprint: Vec<u8>,
    ) -> FileRow {
        FileRow {
            dev,
            ino,
            upto: s.end,
            lines: s.lines,
            records,
            needs_newline: s.needs_newline,
            fingerprint,
        }
    }

    /// The row of file `(dev, ino)` after `lines` lines written at
    /// `start`, up to `end`, when `before` (its row then; `None`: it had
    /// none) ended right there — else `None`: how many lines the write
    /// added to the file's count only a read of it tells (after a last
    /// line without its newline, say). `fingerprint` gives the new row's.
    pub fn extended(
        before: Option<&FileRow>,
        (dev, ino): (u64, u64),
        start: u64,
        end: u64,
        lines: u64,
        fingerprint: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Option<FileRow>> {
        let base = match before {
            Some(r) if r.upto == start && !r.needs_newline && (r.dev, r.ino) == (dev, ino) => {
                r.clone()
            }
            None if start == 0 => FileRow {
                dev,
                ino,
                ..FileRow::default()
            },
            _ => return Ok(None),
        };
        Ok(Some(FileRow {
            upto: end,
            lines: base.lines + lines,
            records: base.records + lines,
            fingerprint: fingerprint()?,
            ..base
        }))
    }
}

/// What a line says, as the index keeps it: everything but the payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    Put(Row),
    /// An item leaves; in the main file, with the delivery a retention
    /// window keeps.
    Done(ItemId, Option<crate::item::Delivery>),
    Push(PushLine),
    Client(ClientLine),
    Evicted(u64),
}

/// The index columns of a `put` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub id: ItemId,
    pub key: String,
    pub attempts: u32,
    /// Unix seconds.
    pub enqueued_at: Option<i64>,
    /// Unix milliseconds.
    pub next_retry_at: Option<i64>,
    pub held: bool,
    pub push_seq: Option<u64>,
    pub group: Option<String>,
    pub coalesce_key: Option<String>,
    /// Why the last attempt failed (`spool shape --by error` reads it).
    pub last_error: Option<String>,
    /// Unix milliseconds (lines of the `.delivered` file).
    pub delivered_at: Option<i64>,
}

impl Row {
    /// The row of `item`'s `put` line in the main file: what
    /// [`Entry::parse`] gives for the line [`format::write_put`] writes.
    pub fn of(item: &crate::item::Item) -> Row {
        Row {
            id: item.id,
            key: item.key.clone(),
            attempts: item.attempts,
            enqueued_at: item.enqueued_at.map(Timestamp::as_secs),
            next_retry_at: item.next_retry_at.map(Timestamp::as_millis),
            held: item.held,
            push_seq: item.push_seq,
            group: item.group.clone(),
            coalesce_key: item.coalesce_key.clone(),
            last_error: item.last_error.clone(),
            delivered_at: None,
        }
    }
}

impl From<Line> for Entry {
    fn from(line: Line) -> Entry {
        match line {
            Line::Put {
                item, delivered_at, ..
            } => Entry::Put(Row {
                id: item.id,
                key: item.key,
                attempts: item.attempts,
                enqueued_at: item.enqueued_at.map(Timestamp::as_secs),
                next_retry_at: item.next_retry_at.map(Timestamp::as_millis),
                held: item.held,
                push_seq: item.push_seq,
                group: item.group,
                coalesce_key: item.coalesce_key,
                last_error: item.last_error,
                delivered_at: delivered_at.map(Timestamp::as_millis),
            }),
            Line::Done { id, delivery } => Entry::Done(id, delivery),
            Line::Push(p) => Entry::Push(p),
            Line::Client(c) => Entry::Client(c),
            Line::Evicted(n) => Entry::Evicted(n),
        }
    }
}

impl Entry {
    /// Parse one line (as [`format::parse_line`], the authority, reads it).
    pub fn parse(bytes: &[u8]) -> std::result::Result<Entry, String> {
        format::parse_line_without_payload(bytes).map(Entry::from)
    }

    /// Parse one line of the `.delivered` file (as
    /// [`format::parse_delivered`] reads it).
    pub fn parse_delivered(bytes: &[u8]) -> std::result::Result<Entry, String> {
        format::parse_delivered_without_payload(bytes).map(Entry::from)
    }

    /// The parser for the lines of `which`.
    pub fn parser(which: Which) -> fn(&[u8]) -> std::result::Result<Entry, String> {
        match which {
            Which::Delivered => Entry::parse_delivered,
            Which::Main | Which::Dead => Entry::parse,
        }
    }
}

/// Where a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub id: ItemId,
    pub off: u64,
    pub len: usize,
}

/// Where a retained delivered record is: a line of the delivered file
/// (`loc`), or, while `done` is set, the item's last `put` line (`loc`)
/// and the `done` line of its delivery (`done`: offset, length) in the
/// main file (see the `retain` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeliveredLoc {
    pub loc: Loc,
    pub done: Option<(u64, usize)>,
}

/// Why an index cannot be used as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// There is none.
    Missing,
    /// It exists but is not a usable index of these files; the reason.
    Invalid(String),
}

/// An open index: the shared `<spool>.idx`, or a private temporary one.
pub(crate) struct Index {
    conn: Connection,
    /// The path for messages (the shared file, or a description).
    path: PathBuf,
    /// Identity of the shared index file when it was opened; `None` for a
    /// private index.
    shared: Option<(u64, u64)>,
    /// The shared index file as this connection last left it.
    pub seen: Option<Stamp>,
    /// This connection may not commit (a read-only handle on the shared
    /// index): whatever it applies is rolled back.
    pub read_only: bool,
    /// SQLite refuses writes on this connection altogether.
    pub no_writes: bool,
    /// The shared index's write mark (see [`mark_path`]), open for
    /// writing on a writer's connection; `None` for a private index.
    mark: Option<File>,
    /// The running transaction changed the index (see
    /// [`Index::will_write`]).
    changed: Cell<bool>,
    /// This connection set the write mark (for a commit).
    marked: Cell<bool>,
    /// The running transaction recorded this boot in `state` (see
    /// [`Index::set_file_row`]).
    boot_written: Cell<bool>,
    /// A writer's connection keeps its rollback journal in a file (for
    /// the transaction about to begin; see [`Index::use_file_journal`]),
    /// not in memory.
    file_journal: Cell<bool>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("path", &self.path)
            .field("shared", &self.shared)
            .field("read_only", &self.read_only)
            .finish()
    }
}

fn to_i64(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| {
        Error::Unsupported(format!(
            "{what} {n} is above 2^63-1, which the NDJSON index cannot hold"
        ))
    })
}

fn u(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The boot this process runs in (Linux: `/proc/sys/kernel/random/boot_id`).
/// An index last written in another boot may have lost writes in a power
/// loss (it is written without fsync), so it is rebuilt.
pub(crate) fn boot_id() -> &'static str {
    static BOOT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into())
    })
}

/// The fingerprint of `file[..upto]`: SHA-256 over `upto` and the bytes
/// of its first and last [`FINGERPRINT_SPAN`] bytes. Reads at most 8 KiB.
pub(crate) fn fingerprint(io: &dyn FileIo, file: &File, upto: u64) -> std::io::Result<Vec<u8>> {
    let mut h = Sha256::new();
    h.update(upto.to_le_bytes());
    let head = upto.min(FINGERPRINT_SPAN);
    let mut buf = vec![0; head as usize];
    read_exact_at(io, file, &mut buf, 0)?;
    h.update(&buf);
    let tail_start = upto.saturating_sub(FINGERPRINT_SPAN).max(head);
    buf.resize((upto - tail_start) as usize, 0);
    read_exact_at(io, file, &mut buf, tail_start)?;
    h.update(&buf);
    Ok(h.finalize().to_vec())
}

/// What `stat` says of the index file: identity, size, times. When it
/// changes between two calls of a process, another process wrote the
/// index — or something outside SQLite rewrote it in place, which a
/// connection's page cache must not outlive: the connection is opened
/// afresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub fn of(path: &Path) -> Option<Stamp> {
        std::fs::metadata(path).ok().map(|m| Stamp::of_metadata(&m))
    }

    pub fn of_metadata(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A spool file as it is now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FileNow<'a> {
    pub file: &'a File,
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    /// What `stat` says of it (see [`Known`]).
    pub stamp: Stamp,
}

impl<'a> FileNow<'a> {
    pub fn of(file: &'a File, path: &Path) -> Result<FileNow<'a>> {
        let m = file.metadata().map_err(|e| Error::io(path, "inspect", e))?;
        Ok(FileNow {
            file,
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            stamp: Stamp::of_metadata(&m),
        })
    }

    /// `file` as `stat` said it was at some point of the call, kept so
    /// that the call does not ask again while nothing can have changed
    /// it (the lock is held, and the call has not written yet).
    pub fn seen(file: &'a File, stamp: Stamp) -> FileNow<'a> {
        FileNow {
            file,
            dev: stamp.dev,
            ino: stamp.ino,
            len: stamp.len,
            stamp,
        }
    }
}

/// A spool file's fingerprint up to `upto`, read (or checked) by this
/// process while `stat` said `stamp` of the file. While `stat` still says
/// so, nothing wrote the file since (a write changes its modification and
/// change times, to the file system's timestamp resolution), and
/// [`Index::check_files`] takes the fingerprint from
/// here instead of reading the file again: once per call and file, the
/// largest part of a small call's reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Known {
    pub stamp: Stamp,
    pub upto: u64,
    pub fingerprint: Vec<u8>,
}

impl Known {
    /// What this process knows of the file `now` at the index's `row`.
    pub fn of(now: &FileNow<'_>, row: &FileRow) -> Known {
        Known {
            stamp: now.stamp,
            upto: row.upto,
            fingerprint: row.fingerprint.clone(),
        }
    }
}

impl SqlStore for Index {
    fn conn(&self) -> &Connection {
        &self.conn
    }

    fn fail(&self, e: rusqlite::Error, write: bool) -> Error {
        Error::sqlite(&self.path, if write { "update" } else { "read" }, e)
    }
}

impl Index {
    fn err(&self, action: &'static str) -> impl Fn(rusqlite::Error) -> Error + '_ {
        move |e| Error::sqlite(&self.path, action, e)
    }

    /// Open the shared index at `path`. A writer's connection commits
    /// (rollback journal, `synchronous=OFF`: the index is derived and
    /// checked before use); a reader's (`writer` false) never does: it
    /// keeps its journal in memory and never spills a page to the file,
    /// so that whatever it applies to catch up stays in memory and is
    /// rolled back.
    pub fn open_shared(
        path: &Path,
        writer: bool,
        busy: Duration,
    ) -> std::result::Result<Index, Unusable> {
        let m = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::Missing),
            Err(e) => return Err(Unusable::Invalid(format!("cannot inspect it: {e}"))),
        };
        if !m.is_file() {
            return Err(Unusable::Invalid("it is not a regular file".into()));
        }
        let base = OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_EXRESCODE;
        let mut no_writes = false;
        let conn = match Connection::open_with_flags(path, base | OpenFlags::SQLITE_OPEN_READ_WRITE)
        {
            Ok(c) => c,
            Err(_) if !writer => {
                no_writes = true;
                Connection::open_with_flags(path, base | OpenFlags::SQLITE_OPEN_READ_ONLY)
                    .map_err(|e| Unusable::Invalid(format!("cannot open it: {e}")))?
            }
            Err(e) => return Err(Unusable::Invalid(format!("cannot open it: {e}"))),
        };
        let bad = |e: rusqlite::Error| Unusable::Invalid(format!("it cannot be read: {e}"));
        let _ = conn.busy_timeout(busy);
        // Only read before it is known to be an index of ours.
        let app: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(bad)?;
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(bad)?;
        if app != APPLICATION_ID {
            return Err(Unusable::Invalid("it is not a spool index".into()));
        }
        if version != INDEX_VERSION {
            return Err(Unusable::Invalid(format!(
                "it has index version {version}; this version of spool reads version {INDEX_VERSION}"
            )));
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(bad)?;
        if mode.eq_ignore_ascii_case("wal") {
            return Err(Unusable::Invalid(
                "it is in WAL mode, which spool never uses".into(),
            ));
        }
        // Both start with the rollback journal in memory and no cache
        // spill (no page reaches the file before the commit); a writer
        // chooses per transaction (see `Index::use_file_journal`).
        let want = "memory";
        let mark = std::fs::OpenOptions::new()
            .read(true)
            .write(writer)
            .open(mark_path(path));
        let mark = match mark {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Unusable::Invalid("it has no write mark".into()))
            }
            Err(e) => {
                return Err(Unusable::Invalid(format!(
                    "its write mark cannot be opened: {e}"
                )))
            }
        };
        match mark_clear(&mark) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Unusable::Invalid(
                    "a write to it was interrupted (its write mark is set)".into(),
                ))
            }
            Err(e) => {
                return Err(Unusable::Invalid(format!(
                    "its write mark cannot be read: {e}"
                )))
            }
        }
        let got: String = conn
            .query_row(&format!("PRAGMA journal_mode = {want}"), [], |r| r.get(0))
            .map_err(bad)?;
        if !got.eq_ignore_ascii_case(want) {
            return Err(Unusable::Invalid(format!(
                "its journal mode cannot be set to {want} (got {got})"
            )));
        }
        conn.execute_batch(if writer {
            "PRAGMA synchronous = OFF; PRAGMA cache_size = -8000; PRAGMA cache_spill = OFF"
        } else {
            "PRAGMA cache_spill = OFF"
        })
        .map_err(bad)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Index {
            conn,
            path: path.to_path_buf(),
            shared: Some((m.dev(), m.ino())),
            seen: Stamp::of(path),
            read_only: !writer,
            no_writes,
            mark: Some(mark),
            changed: Cell::new(false),
            marked: Cell::new(false),
            boot_written: Cell::new(false),
            file_journal: Cell::new(false),
        })
    }

    /// A new, empty index at `path` (a temporary file about to be renamed
    /// over the shared index), or a private one in a temporary file that
    /// SQLite deletes when it is closed (`path` `None`). Fill it with an
    /// [`Applier`] and call [`Index::finish_build`].
    pub fn create(path: Option<&Path>) -> Result<Index> {
        let (conn, shown) = match path {
            Some(p) => (
                Connection::open(p).map_err(|e| Error::sqlite(p, "create index", e))?,
                p.to_path_buf(),
            ),
            None => (
                Connection::open("")
                    .map_err(|e| Error::sqlite(Path::new("(private index)"), "create index", e))?,
                PathBuf::from("(private index)"),
            ),
        };
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let ix = Index::unshared(conn, shown);
        // Without a journal (`OFF`) nothing is rolled back: the tables
        // and the rows that fill them are one transaction.
        ix.conn
            .execute_batch(&format!(
                "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; \
                 PRAGMA cache_size = -{BUILD_CACHE_KIB}; PRAGMA temp_store = FILE; BEGIN; {TABLES}"
            ))
            .map_err(ix.err("create index"))?;
        Ok(ix)
    }

    /// An index on `conn` that is not the shared `<spool>.idx` in use
    /// (a build, a private index, a carry-over), writable, nothing marked.
    fn unshared(conn: Connection, path: PathBuf) -> Index {
        Index {
            conn,
            path,
            shared: None,
            seen: None,
            read_only: false,
            no_writes: false,
            mark: None,
            changed: Cell::new(false),
            marked: Cell::new(false),
            boot_written: Cell::new(false),
            file_journal: Cell::new(false),
        }
    }

    /// Finish a build: the secondary indexes, the counts, the version,
    /// and commit.
    pub fn finish_build(&self) -> Result<()> {
        self.conn
            .execute_batch(SECONDARY)
            .map_err(self.err("build index"))?;
        self.conn
            .execute_batch(COUNTS)
            .map_err(self.err("build index"))?;
        self.conn
            .execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {INDEX_VERSION}; COMMIT;"
            ))
            .map_err(self.err("build index"))?;
        if self.shared.is_none() {
            // A private index is kept up to date afterwards: it needs a
            // journal to roll back a failed catch-up.
            self.conn
                .execute_batch("PRAGMA journal_mode = MEMORY")
                .map_err(self.err("build index"))?;
        }
        Ok(())
    }

    /// Close a built index file (before it is renamed into place).
    pub fn close(self) -> Result<()> {
        let path = self.path.clone();
        self.conn
            .close()
            .map_err(|(_, e)| Error::sqlite(&path, "close index", e))
    }

    /// True for the shared `<spool>.idx` (false for a private index).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Check the index against the files as they are now. `Err(reason)`
    /// when it is not an index of these files (another file, rewritten
    /// bytes, written before a reboot — the restart rule, which `verify`
    /// checks apart: `restart` false). `known`: what this process knows
    /// of the files' fingerprints (see [`Known`]), in [`Which::slot`]
    /// order.
    /// The rows returned are the main file's, the dead-letter file's and
    /// the delivered file's (a companion file the index has no row for
    /// yet gets an empty one).
    pub fn check_files(
        &self,
        io: &dyn FileIo,
        main: FileNow<'_>,
        dead: Option<FileNow<'_>>,
        delivered: Option<FileNow<'_>>,
        boot_rule: bool,
        known: &[Option<Known>; 3],
    ) -> Result<std::result::Result<[FileRow; 3], String>> {
        let boot: Option<String> = self.first("SELECT boot FROM state", [], |r| r.get(0))?;
        match boot {
            None => return Ok(Err("it has no state row".into())),
            Some(b) if boot_rule && b != boot_id() => {
                return Ok(Err(
                    "it was last written before the machine restarted (it is written without fsync, so a power loss may have damaged it)".into(),
                ))
            }
            Some(_) => {}
        }
        let Some(m) = self.file_row(Which::Main)? else {
            return Ok(Err("it describes no main file".into()));
        };
        if let Err(why) = same_file(io, &m, main, known[0].as_ref()) {
            return Ok(Err(format!("the spool file {why}")));
        }
        let mut rows = [m, FileRow::default(), FileRow::default()];
        for (i, which, now, what) in [
            (1, Which::Dead, dead, "dead-letter"),
            (2, Which::Delivered, delivered, "delivered"),
        ] {
            rows[i] = match (self.file_row(which)?, now) {
                (Some(d), Some(now)) => {
                    if let Err(why) = same_file(io, &d, now, known[i].as_ref()) {
                        return Ok(Err(format!("the {what} file {why}")));
                    }
                    d
                }
                (Some(d), None) if d.upto > 0 => {
                    return Ok(Err(format!("the {what} file it describes is gone")))
                }
                (_, Some(now)) => FileRow {
                    dev: now.dev,
                    ino: now.ino,
                    ..FileRow::default()
                },
                (_, None) => FileRow::default(),
            };
        }
        Ok(Ok(rows))
    }

    /// The row of `which`, if any.
    pub fn file_row(&self, which: Which) -> Result<Option<FileRow>> {
        self.first("SELECT dev, ino, upto, lines, records, needs_newline, fingerprint FROM files WHERE name = ?1", [which.name()], |r| {
                    Ok(FileRow {
                        dev: r.get::<_, i64>(0)? as u64,
                        ino: r.get::<_, i64>(1)? as u64,
                        upto: u(r.get(2)?),
                        lines: u(r.get(3)?),
                        records: u(r.get(4)?),
                        needs_newline: r.get(5)?,
                        fingerprint: r.get(6)?,
                    })
                })
    }

    /// Record how far `which` is indexed, and (once per transaction) that
    /// the index was written in this boot.
    pub fn set_file_row(&self, which: Which, row: &FileRow) -> Result<()> {
        self.will_write();
        self.conn
            .run("INSERT INTO files (name, dev, ino, upto, lines, records, needs_newline, fingerprint) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (name) DO UPDATE SET \
                 dev = excluded.dev, ino = excluded.ino, upto = excluded.upto, lines = excluded.lines, \
                 records = excluded.records, needs_newline = excluded.needs_newline, \
                 fingerprint = excluded.fingerprint", params![
                    which.name(),
                    row.dev as i64,
                    row.ino as i64,
                    row.upto as i64,
                    row.lines as i64,
                    row.records as i64,
                    row.needs_newline,
                    row.fingerprint
                ])
            .map_err(self.err("write"))?;
        if !self.boot_written.replace(true) {
            self.conn
                .run("UPDATE state SET boot = ?1", [boot_id()])
                .map_err(self.err("write"))?;
        }
        Ok(())
    }
}

/// Whether `row` still describes `now`: the same file, at least as long,
/// with the same bytes before `upto`. `Err` says what changed.
fn same_file(
    io: &dyn FileIo,
    row: &FileRow,
    now: FileNow<'_>,
    known: Option<&Known>,
) -> std::result::Result<(), String> {
    if (row.dev, row.ino) != (now.dev, now.ino) {
        return Err("is another file than the one indexed (a copy, or replaced)".into());
    }
    if now.len < row.upto {
        return Err(format!(
            "is shorter ({} bytes) than the {} bytes indexed",
            now.len, row.upto
        ));
    }
    // The fingerprint this process knows, while nothing wrote the file
    // since; else read.
    let same = match known.filter(|k| k.stamp == now.stamp && k.upto == row.upto) {
        Some(k) => Ok(k.fingerprint == row.fingerprint),
        None => fingerprint(io, now.file, row.upto).map(|fp| fp == row.fingerprint),
    };
    match same {
        Ok(true) => Ok(()),
        Ok(false) => Err("was rewritten: its bytes differ from the ones indexed".into()),
        Err(e) => Err(format!("cannot be read to check it: {e}")),
    }
}
