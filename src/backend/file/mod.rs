//! The NDJSON file backend: the reference `FileOfflineQueue` format, made
//! safe for many processes, honest about damage, and fast however much it
//! holds.
//!
//! # Files
//!
//! | file               | what it holds                                        |
//! |--------------------|------------------------------------------------------|
//! | `<spool>`          | pending items: `put`/`done` lines (see `format.rs`)  |
//! | `<spool>.dead`     | dead letters, same format, `put` lines with `deadAt` |
//! | `<spool>.delivered`| retained delivered items (SPEC §9), same format,     |
//! |                    | `put` lines with `deliveredAt` and `evidence`        |
//! | `<spool>.meta`     | uuid and depth bound (JSON, replaced atomically)     |
//! | `<spool>.idx`      | the derived index (SQLite, see `index`)            |
//!
//! The main file replays last-write-wins per id, exactly as the reference
//! reads it; delivered and dead-lettered items leave it through `done`
//! lines. Ids are never reused: new ids continue above the highest id ever
//! seen in either file, tombstones included, and compaction carries that
//! high-water mark as a trailing `done` line, as the reference does.
//!
//! # The index
//!
//! Nothing is held in memory between calls but file handles. Every call
//! reads the spool through the index `<spool>.idx` — the pending items'
//! ids, keys, attempts, times and line positions, the dead letters, the
//! counts, the push state and the receiver's ledger — and reads a payload
//! with one `pread` of its line. The files stay the source of truth: the
//! index is checked against them at every call (the files' identity and a
//! fingerprint of the bytes it covers; see `index`) and caught up with
//! what was appended since (by another process, by the reference, or
//! before a crash cut a writer short between its append and its index
//! update) by reading only that tail. An index that does not match is
//! rebuilt from the files by the next writer; a reader never writes it:
//! it takes in a short tail inside a transaction that it rolls back, and
//! anything more (a missing, damaged or foreign index, a long tail, the
//! journal of a writer that crashed) makes it build a private index in a
//! temporary file for the life of the handle.
//!
//! # Guarantees
//!
//! * Every mutation appends its lines in one `write` sequence followed by
//!   `fdatasync`, under an exclusive advisory lock (`flock`) on the main
//!   file; only then does it return `Ok`. A short write or failed sync is
//!   an error, and the backend cuts the file back to where the append
//!   started, so a failed call leaves nothing behind. The index is updated
//!   after the sync, in one SQLite transaction, from the lines just
//!   written — by the same code that catches up a tail.
//! * A trailing line without its newline that does not parse (or NUL
//!   bytes at the end) is a torn write: it is reported (see
//!   [`FileQueue::take_notices`]) and, by the next mutating call, cut off
//!   before anything is appended — never glued onto. A newline-terminated
//!   malformed line anywhere is corruption: [`Error::Corrupt`] with its
//!   line number, and the file is not touched. A file that is not a spool
//!   at all is refused ([`Error::NotASpool`]) before anything is written
//!   to it or beside it.
//! * A write of several lines is one batch: all but its last line carry a
//!   `tx` field naming the batch's first byte (`format::frame_batch`), so
//!   a batch that a crash cut short is seen by every reader as not
//!   written at all, and is cut off like a torn write. A streamed batch
//!   ([`crate::Queue::enqueue_stream`]) is written in chunks the same way.
//! * Opening never rewrites the file. Compaction runs when asked
//!   ([`FileQueue::compact`]) or automatically after a mutation once the
//!   main file is over 4 MiB and at least three quarters of its records
//!   are garbage; it carries the index over to the new files (see
//!   `Index::carry_from`), or builds one when there was none.
//! * A write that reaches a companion file as well (a move between the
//!   files: dead-lettering, requeue, an eviction, a push ack that
//!   rejects, pruning delivered records along with a delivery, an import
//!   of dead or delivered records) writes the
//!   companion lines first, each with `"at"` and `"ino"` naming the byte
//!   and the inode of the main file where its main-file part starts
//!   (`format::stamp_at`), then that part: the main file is the one
//!   commit point. A crash between the two leaves the companion lines an
//!   unfinished move, which every reader leaves out and the next writer
//!   cuts off (see `FileQueue::settle_moves`); `verify` reports it and
//!   `verify --repair` cuts it. Such a write changes all of its files or
//!   none. (Files written before this rule may hold an item in both the
//!   main and a companion file; the companion file wins, as it did. A
//!   delivered record's `done` line in the main file is written before
//!   the record is pruned, so that no reader of the main file alone ever
//!   sees it come back.) A retained delivery writes the main file only:
//!   its `done` line is the record until compaction moves it (see the
//!   `retain` module).

mod compact;
mod files;
pub(crate) mod format;
pub(crate) mod index;
pub mod io;
mod meta;
mod queue;
mod retain;
pub(crate) mod scan;
mod stream;
mod upkeep;
pub mod verify;

use self::index::{Carry, Entry, FileNow, FileRow, Index, Stamp, Unusable, Which};
use self::io::{parent_dir, FileIo, RealIo};
use self::meta::Meta;
pub use self::scan::TornTail;
use super::receive::ClientDelta;
use super::{companion, OpenMode, OpenOptions};
use crate::error::{Error, Result};
use crate::item::{ItemId, PushState};
use crate::push::memory::Recorded;
use crate::time::{SharedClock, Timestamp};
use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Auto-compaction threshold: main file size.
const AUTO_COMPACT_MIN_BYTES: u64 = 4 << 20;
/// Auto-compaction threshold: records per live item.
const AUTO_COMPACT_RATIO: u64 = 4;
/// Compaction copies a run of adjacent kept lines at least this long inside
/// the kernel (`copy_file_range`) instead of through its buffer.
const COMPACT_COPY_RUN: u64 = 64 << 10;
/// A reader takes in at most this many bytes of unindexed tail (in a
/// transaction it rolls back, held in memory); beyond that it builds a
/// private index.
const READER_CATCH_UP_MAX: u64 = 4 << 20;

/// The most items an [`Access::Small`] call changes. A changed item
/// changes a few index pages (its row, its secondary index entries, a
/// retained record's two): the in-memory journal of such a call holds at
/// most a few MiB.
const SMALL_ROWS: usize = 256;

/// The longest tail (bytes) that an [`Access::Small`] call takes in with
/// its journal in memory (a few hundred lines at the most); a longer one
/// journals to a file.
const SMALL_TAIL_MAX: u64 = 8 << 10;
/// Adjacent lines closer than this are read with one `pread`.
const READ_GAP: u64 = 4096;
/// ... up to this many bytes at a time.
const READ_SPAN: u64 = 1 << 20;

/// The longest pause between two tries for a lock another process holds.
const LOCK_POLL_MAX: Duration = Duration::from_millis(2);

/// What a reader walking the set in chunks leaves between two chunks
/// without the lock, so that a waiting writer (which looks at least every
/// [`LOCK_POLL_MAX`]) gets in.
const CHUNK_GAP: Duration = Duration::from_millis(3);

/// What [`FileQueue::compact`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactReport {
    /// Bytes of the main, dead-letter and delivered files before.
    pub bytes_before: u64,
    /// Bytes of the main, dead-letter and delivered files after.
    pub bytes_after: u64,
    /// Lines in the main file before.
    pub records_before: u64,
    /// Lines in the main file after.
    pub records_after: u64,
    /// Pending items kept.
    pub pending: u64,
    /// Dead letters kept.
    pub dead_letters: u64,
    /// Retained delivered records kept.
    pub delivered_retained: u64,
    /// The id high-water mark carried over.
    pub high_water: ItemId,
    /// The torn tail that was dropped, if any.
    pub dropped_torn_tail: Option<TornTail>,
}

/// Numbers about the files themselves (for `stats`).
#[derive(Debug, Clone, PartialEq)]
pub struct FileStats {
    /// Records (lines) in the main file.
    pub records: u64,
    /// Pending items (live records).
    pub live: u64,
    /// Fraction of the main file's records that compaction would drop.
    pub garbage_ratio: f64,
    /// The torn tail, if the file has one now.
    pub torn_tail: Option<TornTail>,
}

/// One open spool file and its identity.
#[derive(Debug)]
struct Tracked {
    file: File,
    dev: u64,
    ino: u64,
}

impl Tracked {
    fn new(file: File, path: &Path) -> Result<Tracked> {
        let m = file.metadata().map_err(|e| Error::io(path, "inspect", e))?;
        Ok(Tracked {
            file,
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// Where a file's valid content ends, as the last catch-up saw it.
#[derive(Debug, Clone, Default)]
struct Tail {
    /// Just past the last valid line (where the next append starts).
    end: u64,
    /// The valid content lacks its final newline.
    needs_newline: bool,
    /// A torn write (or an unfinished batch) after `end`.
    torn: Option<TornTail>,
}

/// Whether an operation re-reads the meta file (the depth bound, the
/// uuid, the retention window) first. Only those that use them do:
/// another process may replace the file at any time, so each such call
/// costs a `stat` of it (and a read when it changed; see
/// [`meta::read_changed`]), which the hot paths of replay without
/// retention (a recorded attempt) have no use for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MetaUse {
    /// Re-read it: the operation uses the depth bound or the uuid.
    Read,
    /// Keep the copy read before.
    Skip,
}

/// What a call does with the spool.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Access {
    /// Reads (shared lock).
    Read,
    /// Writes (exclusive lock).
    Write,
    /// Writes, then compacts when garbage dominates.
    Mutate,
    /// [`Access::Mutate`] that changes at most [`SMALL_ROWS`] items: the
    /// index keeps the call's rollback journal in memory (see
    /// [`index::Index::use_file_journal`]); every other write journals to
    /// a file.
    Small,
}

impl Access {
    /// [`Access::Small`] for a change of `n` items, [`Access::Mutate`]
    /// for more.
    fn for_items(n: usize) -> Access {
        match n <= SMALL_ROWS {
            true => Access::Small,
            false => Access::Mutate,
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    main: Option<Tracked>,
    dead: Option<Tracked>,
    delivered: Option<Tracked>,
    index: Option<Index>,
    meta: Meta,
    /// Where each file's valid content ends, in [`Which::slot`] order.
    tails: [Tail; 3],
    /// This call appended to a file: the index takes the lines in before
    /// it commits.
    appended: bool,
    /// What this call's index transaction said of the main file's garbage
    /// before it committed: an automatic compaction is due (see
    /// [`FileQueue::auto_compact`]).
    compact_due: bool,
    /// The index could not take in lines this call wrote (or took in
    /// lines the call then cut off again): why. The call's index
    /// transaction is rolled back at its end, with a notice; the next
    /// call catches up from the files.
    index_broken: Option<String>,
    notices: Vec<String>,
    /// The meta file as this process last read it into `meta`.
    meta_seen: Option<meta::Seen>,
    /// A deferred open of a spool without a uuid: the first write assigns
    /// one (the depth bound to write with it, see
    /// [`FileQueue::assign_uuid`]).
    uuid_pending: Option<Option<u64>>,
    /// What `stat` said of each file when [`FileQueue::check_index`]
    /// looked, in [`Which::slot`] order: valid until this call writes, so
    /// only the rest of `prepare` uses it (and then clears it).
    checked: [Option<Stamp>; 3],
    /// What this process knows of each file's fingerprint, in
    /// [`Which::slot`] order (see [`index::Known`]).
    known: [Option<index::Known>; 3],
    /// Where an unfinished move begins at the end of each file, in
    /// [`Which::slot`] order: lines a reader leaves out (a writer cuts
    /// them off; see [`FileQueue::settle_moves`]).
    unfinished: [Option<u64>; 3],
    /// Per file, in [`Which::slot`] order: the inode and length at which
    /// it was last found to end in no unfinished move. Its bytes up to
    /// there never change (a move the main file committed stays
    /// committed; only lines past a committed end are ever cut), so while
    /// it still has that inode and length it is not looked at again.
    settled: [Option<(u64, u64)>; 3],
}

impl Inner {
    fn tail(&mut self, which: Which) -> &mut Tail {
        &mut self.tails[which.slot()]
    }

    fn tracked(&self, which: Which) -> Option<&Tracked> {
        match which {
            Which::Main => self.main.as_ref(),
            Which::Dead => self.dead.as_ref(),
            Which::Delivered => self.delivered.as_ref(),
        }
    }

    fn slot(&mut self, which: Which) -> &mut Option<Tracked> {
        match which {
            Which::Main => &mut self.main,
            Which::Dead => &mut self.dead,
            Which::Delivered => &mut self.delivered,
        }
    }

    fn index(&self) -> Result<&Index> {
        self.index
            .as_ref()
            .ok_or_else(|| Error::Internal("NDJSON spool index missing".into()))
    }
}

/// A spool stored in an NDJSON file.
#[derive(Debug)]
pub struct FileQueue {
    path: PathBuf,
    dead_path: PathBuf,
    delivered_path: PathBuf,
    meta_path: PathBuf,
    index_path: PathBuf,
    writable: bool,
    io: Arc<dyn FileIo>,
    clock: SharedClock,
    busy_timeout: Duration,
    /// [`OpenOptions::auto_compact_min_bytes`].
    auto_compact_min: u64,
    inner: Mutex<Inner>,
}

impl FileQueue {
    /// Open the NDJSON spool at `path` as `opts` says.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<FileQueue> {
        FileQueue::open_with_io(path, opts, Arc::new(RealIo))
    }

    /// Open with an I/O seam (for fault-injection tests).
    pub fn open_with_io(path: &Path, opts: &OpenOptions, io: Arc<dyn FileIo>) -> Result<FileQueue> {
        let writable = opts.mode.writable();
        let (file, created) = open_synced(&*io, path, opts.mode)?;
        if !created {
            scan::check_head(path, &*io, &file)?;
        }
        let q = FileQueue {
            path: path.to_path_buf(),
            dead_path: companion(path, "dead"),
            delivered_path: companion(path, "delivered"),
            meta_path: companion(path, "meta"),
            index_path: companion(path, "idx"),
            writable,
            io,
            clock: opts.clock.clone(),
            busy_timeout: opts.busy_timeout,
            auto_compact_min: opts
                .auto_compact_min_bytes
                .unwrap_or(AUTO_COMPACT_MIN_BYTES),
            inner: Mutex::new(Inner {
                main: Some(Tracked::new(file, path)?),
                ..Inner::default()
            }),
        };
        let max_depth = opts.max_depth;
        let defer = opts.defer_load;
        let init = |q: &FileQueue, inner: &mut Inner| {
            if defer {
                if let Some(m) = meta::read_changed(&q.meta_path, &mut inner.meta_seen)? {
                    inner.meta = m;
                }
                // Deferred, the files are not checked yet: the meta file of
                // a spool that has none waits for the first write, which
                // checks them first, so that a damaged spool is left as it
                // was (see `FileQueue::assign_uuid`).
                if writable && !created && inner.meta.uuid.is_none() {
                    inner.uuid_pending = Some(max_depth);
                    return Ok(());
                }
            }
            if writable && inner.meta.uuid.is_none() {
                q.write_uuid(inner, created, max_depth)?;
            }
            Ok(())
        };
        if defer {
            q.locked_unloaded(writable, init)?;
        } else {
            let access = if writable {
                Access::Write
            } else {
                Access::Read
            };
            q.locked(access, MetaUse::Read, init)?;
        }
        Ok(q)
    }

    /// Write the meta file with a new uuid (and the depth bound
    /// `max_depth` for a spool just `created`, or one whose meta file names
    /// none).
    fn write_uuid(&self, inner: &mut Inner, created: bool, max_depth: Option<u64>) -> Result<()> {
        self.update_meta(inner, |m| {
            m.uuid = Some(uuid::Uuid::new_v4().to_string());
            if created || m.max_depth.is_none() {
                m.max_depth = max_depth;
            }
        })
    }

    /// The uuid a deferred open left to the first write
    /// ([`Inner::uuid_pending`]), with the exclusive lock held: read the
    /// meta file again (another process may have written it since) and
    /// write it when it still names none.
    fn assign_uuid(&self, inner: &mut Inner) -> Result<()> {
        let Some(max_depth) = inner.uuid_pending else {
            return Ok(());
        };
        if let Some(m) = meta::read_changed(&self.meta_path, &mut inner.meta_seen)? {
            inner.meta = m;
        }
        if inner.meta.uuid.is_none() {
            self.write_uuid(inner, false, max_depth)?;
        }
        // Kept after a failure: the next write tries again.
        inner.uuid_pending = None;
        Ok(())
    }

    /// The main file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The index file's path (`<spool>.idx`).
    pub fn index_path(&self) -> &Path {
        &self.index_path
    }

    /// The files that make up this spool (some may not exist).
    pub fn files(&self) -> Vec<PathBuf> {
        vec![
            self.path.clone(),
            self.dead_path.clone(),
            self.delivered_path.clone(),
            self.meta_path.clone(),
            self.index_path.clone(),
            index::journal_path(&self.index_path),
            index::mark_path(&self.index_path),
        ]
    }

    /// Messages about damage found and repaired (torn tails, an index
    /// rebuilt), oldest first; taking them clears the list.
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut self.lock_inner().notices)
    }

    /// Numbers about the main file.
    pub fn file_stats(&self) -> Result<FileStats> {
        self.locked(Access::Read, MetaUse::Skip, |_, inner| {
            let ix = inner.index()?;
            let live = ix.depth()?;
            let records = ix.file_row(Which::Main)?.map_or(0, |r| r.records);
            let garbage_ratio = if records == 0 {
                0.0
            } else {
                records.saturating_sub(live) as f64 / records as f64
            };
            Ok(FileStats {
                records,
                live,
                garbage_ratio,
                torn_tail: inner.tails[Which::Main.slot()].torn.clone(),
            })
        })
    }

    /// Cut a torn trailing line off the main and dead-letter files, if
    /// either has one, and change nothing else (no append, no automatic
    /// compaction). What was cut is reported through
    /// [`FileQueue::take_notices`].
    pub fn repair_torn_tail(&self) -> Result<()> {
        self.require_writable("repair")?;
        // Taking the exclusive lock brings the index up to date, which
        // cuts any torn tail before returning.
        self.locked(Access::Write, MetaUse::Skip, |_, _| Ok(()))
    }

    /// Rebuild the index from the files, whatever state it is in
    /// (`verify --repair`).
    pub fn rebuild_index(&self) -> Result<()> {
        self.require_writable("rebuild the index of")?;
        self.locked_unloaded(true, |q, inner| {
            q.track_companions(inner)?;
            q.rebuild(inner, None)
        })
    }

    fn lock_inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn require_writable(&self, what: &str) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::Internal(format!(
                "{what} on a spool opened read-only ({})",
                self.path.display()
            )))
        }
    }

    /// Run `f` with the advisory lock held (exclusive for writers) and the
    /// index checked and caught up with the files, inside an index
    /// transaction that commits when `f` succeeds (a reader's is rolled
    /// back); `meta` says whether `f` needs the latest meta file too.
    fn locked<T>(
        &self,
        access: Access,
        meta: MetaUse,
        f: impl FnOnce(&FileQueue, &mut Inner) -> Result<T>,
    ) -> Result<T> {
        if access != Access::Read {
            self.require_writable("write")?;
        }
        let mut guard = self.lock_inner();
        let inner = &mut *guard;
        let mut exclusive = access != Access::Read;
        // Upkeep of a reader (catching the shared index up) is small too,
        // unless its tail is long (see `prepare`).
        let bulk = matches!(access, Access::Write | Access::Mutate);
        loop {
            self.acquire(inner, exclusive)?;
            match self.prepare(inner, exclusive, bulk, meta) {
                Ok(true) => break,
                Ok(false) => {
                    // Upkeep of the shared index needs the write lock.
                    self.release(inner);
                    exclusive = true;
                }
                Err(e) => {
                    if let Some(ix) = &inner.index {
                        let _ = ix.rollback();
                    }
                    self.release(inner);
                    return Err(e);
                }
            }
        }
        let r = match access != Access::Read {
            true => self.assign_uuid(inner).and_then(|()| f(self, inner)),
            false => f(self, inner),
        };
        let r = self.finish(inner, r);
        let due = std::mem::take(&mut inner.compact_due);
        if matches!(access, Access::Mutate | Access::Small) && r.is_ok() && due {
            self.auto_compact(inner);
        }
        self.release(inner);
        r
    }

    /// End the index transaction of a call. When the call succeeded, the
    /// index takes in the lines it appended — the dead-letter file first,
    /// as every process catching up reads it, so that a move between the
    /// files is seen whole — and commits. When it failed, roll back. A
    /// failure of the index loses nothing: the lines are committed in the
    /// file, and the index, rolled back, catches up next time.
    fn finish<T>(&self, inner: &mut Inner, r: Result<T>) -> Result<T> {
        let r = self.end_transaction(inner, r);
        if let Some(ix) = &mut inner.index {
            if ix.is_shared() {
                ix.seen = index::Stamp::of(&self.index_path);
            }
        }
        r
    }

    fn end_transaction<T>(&self, inner: &mut Inner, r: Result<T>) -> Result<T> {
        let appended = std::mem::take(&mut inner.appended);
        let broken = inner.index_broken.take();
        if inner.index.is_none() {
            return r;
        }
        if r.is_err() {
            let _ = inner.index()?.rollback();
            return r;
        }
        if let Some(e) = broken {
            let _ = inner.index()?.rollback();
            self.note_index_behind(inner, e);
            return r;
        }
        let taken = if appended {
            let ends = inner.tails.clone();
            let done = self.catch_up_all(inner);
            if done.is_err() {
                inner.tails = ends;
            }
            done
        } else {
            Ok(())
        };
        // Read inside the transaction: afterwards, each read would be a
        // transaction of its own.
        let due = appended
            && taken.is_ok()
            && compact::compaction_due(inner.index()?, self.auto_compact_min);
        inner.compact_due = due;
        let ix = inner.index()?;
        if let Err(e) = taken.and_then(|()| ix.commit()) {
            let _ = ix.rollback();
            self.note_index_behind(inner, e);
        }
        r
    }

    /// Tell that the index could not take in the lines just written (its
    /// transaction rolled back): `why`.
    fn note_index_behind(&self, inner: &mut Inner, why: impl std::fmt::Display) {
        inner.notices.push(format!(
            "{}: the index could not take in the lines just written ({why}); the next command catches up",
            self.index_path.display()
        ));
    }

    /// Run `f` with the advisory lock held, without touching the index.
    fn locked_unloaded<T>(
        &self,
        exclusive: bool,
        f: impl FnOnce(&FileQueue, &mut Inner) -> Result<T>,
    ) -> Result<T> {
        let mut inner = self.lock_inner();
        let inner = &mut *inner;
        self.acquire(inner, exclusive)?;
        let result = f(self, inner);
        self.release(inner);
        result
    }

    fn release(&self, inner: &mut Inner) {
        if let Some(m) = &inner.main {
            let _ = m.file.unlock();
        }
    }

    /// Take the flock on the main file, making sure the handle still is
    /// the file at `path` (compaction replaces it).
    fn acquire(&self, inner: &mut Inner, exclusive: bool) -> Result<()> {
        let deadline = Instant::now() + self.busy_timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            if inner.main.is_none() {
                let (file, _) = open_main(
                    &self.path,
                    if self.writable {
                        OpenMode::ReadWrite
                    } else {
                        OpenMode::ReadOnly
                    },
                )?;
                inner.main = Some(Tracked::new(file, &self.path)?);
                *inner.tail(Which::Main) = Tail::default();
            }
            let main = inner.main.as_ref().ok_or_else(no_handle)?;
            let attempt = if exclusive {
                main.file.try_lock()
            } else {
                main.file.try_lock_shared()
            };
            match attempt {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    if Instant::now() >= deadline {
                        return Err(Error::Busy {
                            path: self.path.clone(),
                            detail: format!(
                                "another process held its lock for more than {}",
                                crate::units::format_duration(self.busy_timeout)
                            ),
                        });
                    }
                    std::thread::sleep(pause);
                    // Short pauses: a reader that walks the set in chunks
                    // (`shape`) leaves gaps of CHUNK_GAP between them, and a
                    // waiting writer must look within one.
                    pause = (pause * 2).min(LOCK_POLL_MAX);
                    continue;
                }
                Err(TryLockError::Error(e)) => return Err(Error::io(&self.path, "lock", e)),
            }
            let now = std::fs::metadata(&self.path);
            match now {
                Ok(m) if m.dev() == main.dev && m.ino() == main.ino => return Ok(()),
                Ok(_) => {
                    // Replaced by a compaction: follow the new file.
                    let _ = main.file.unlock();
                    inner.main = None;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let _ = main.file.unlock();
                    return Err(Error::NotFound {
                        path: self.path.clone(),
                    });
                }
                Err(e) => {
                    let _ = main.file.unlock();
                    return Err(Error::io(&self.path, "inspect", e));
                }
            }
        }
    }
}

/// Torn tails found per file.
type TornTails = Vec<(Which, Option<TornTail>)>;

/// The open companion files (dead letters, delivered items), in
/// [`Which::COMPANIONS`] order.
fn companion_files(inner: &Inner) -> [Option<&File>; 2] {
    Which::COMPANIONS.map(|w| inner.tracked(w).map(|t| &t.file))
}

fn no_handle() -> Error {
    Error::Internal("NDJSON spool file handle missing".into())
}

fn torn_notice(path: &Path, torn: &TornTail, writable: bool) -> String {
    format!(
        "{}: torn trailing line {} ({} bytes) left by an interrupted write: {}; {}",
        path.display(),
        torn.line,
        torn.len,
        torn.reason,
        if writable {
            "cutting it before the next write"
        } else {
            "the next write will cut it"
        }
    )
}

fn cut_notice(path: &Path, torn: &TornTail) -> String {
    format!(
        "{}: cut a torn trailing line (line {}, {} bytes) left by an interrupted write: {}",
        path.display(),
        torn.line,
        torn.len,
        torn.reason
    )
}

fn file_len(f: &File, path: &Path) -> Result<u64> {
    f.metadata()
        .map(|m| m.len())
        .map_err(|e| Error::io(path, "inspect", e))
}

/// [`open_main`], and when that created the file, sync its directory.
fn open_synced(io: &dyn FileIo, path: &Path, mode: OpenMode) -> Result<(File, bool)> {
    let (file, created) = open_main(path, mode)?;
    if created {
        let dir = parent_dir(path);
        io.sync_dir(dir)
            .map_err(|e| Error::io(dir, "fsync directory", e))?;
    }
    Ok((file, created))
}

/// Open the main file (or the dead-letter file) as `mode` says; the bool
/// is true when the file was created now.
fn open_main(path: &Path, mode: OpenMode) -> Result<(File, bool)> {
    let mut o = crate::private_file::options();
    o.read(true);
    if mode.writable() {
        o.append(true);
    }
    match mode {
        OpenMode::CreateNew | OpenMode::Create => {
            let mut c = o.clone();
            match c.create_new(true).open(path) {
                Ok(f) => return Ok((f, true)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if mode == OpenMode::CreateNew {
                        return Err(Error::AlreadyExists {
                            path: path.to_path_buf(),
                        });
                    }
                }
                Err(e) => return Err(Error::io(path, "create", e)),
            }
        }
        OpenMode::ReadOnly | OpenMode::ReadWrite => {}
    }
    match o.open(path) {
        Ok(f) => Ok((f, false)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NotFound {
            path: path.to_path_buf(),
        }),
        Err(e) => Err(Error::io(path, "open", e)),
    }
}

fn open_existing(path: &Path, writable: bool) -> Result<Option<File>> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    if writable {
        o.append(true);
    }
    match o.open(path) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, "open", e)),
    }
}

/// The push-state line for `push` (carrying the uuid given by a
/// regeneration, when there was one).
fn push_line(push: &PushState, uuid: Option<&String>) -> Vec<u8> {
    let mut out = Vec::new();
    format::write_push(
        &mut out,
        &format::PushLine {
            assigned: push.last_assigned,
            acked: push.acked,
            skips: push.skips.clone(),
            uuid: uuid.cloned(),
        },
    );
    out
}

/// What a client line says, as changes to the receiver's state.
fn client_delta(c: format::ClientLine) -> ClientDelta {
    let mut entries = BTreeMap::new();
    for (seq, digest) in c.applied {
        entries.insert(seq, Recorded::Applied { digest });
    }
    for (seq, digest, reason) in c.rejected {
        entries.insert(seq, Recorded::Rejected { digest, reason });
    }
    // Skipped numbers (written by older versions) need no record:
    // `last_seq` covers them.
    ClientDelta {
        last_seq: c.last,
        entries,
        acked: c.acked,
        at: c.at.map(Timestamp::from_millis),
    }
}

/// The client lines for `delta`: one line, or several of at most
/// [`CLIENT_LINE_ENTRIES`] numbers each (the first carries the rest of
/// the state), so that no line grows with the client's history.
fn client_lines(out: &mut Vec<u8>, id: &str, delta: &ClientDelta) {
    let mut line = format::ClientLine {
        id: id.to_string(),
        last: delta.last_seq,
        acked: delta.acked,
        at: delta.at.map(|t| t.as_millis()),
        ..format::ClientLine::default()
    };
    let mut count = 0;
    let flush = |line: &mut format::ClientLine, count: &mut usize, out: &mut Vec<u8>| {
        format::write_client(out, line);
        *line = format::ClientLine {
            id: id.to_string(),
            ..format::ClientLine::default()
        };
        *count = 0;
    };
    for (seq, r) in &delta.entries {
        match r {
            Recorded::Applied { digest } => line.applied.push((*seq, digest.clone())),
            Recorded::Rejected { digest, reason } => {
                line.rejected.push((*seq, digest.clone(), reason.clone()))
            }
        }
        count += 1;
        if count == CLIENT_LINE_ENTRIES {
            flush(&mut line, &mut count, out);
        }
    }
    if count > 0 || line.last.is_some() || line.acked > 0 || line.at.is_some() {
        flush(&mut line, &mut count, out);
    }
}

/// Numbers per client line.
const CLIENT_LINE_ENTRIES: usize = 4096;
