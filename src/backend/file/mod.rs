//! The NDJSON file backend: the reference `FileOfflineQueue` format, made
//! safe for many processes and honest about damage.
//!
//! # Files
//!
//! | file               | what it holds                                        |
//! |--------------------|------------------------------------------------------|
//! | `<spool>`          | pending items: `put`/`done` lines (see [`format`])  |
//! | `<spool>.dead`     | dead letters, same format, `put` lines with `deadAt` |
//! | `<spool>.meta`     | uuid and depth bound (JSON, replaced atomically)     |
//!
//! The main file replays last-write-wins per id, exactly as the reference
//! reads it; delivered and dead-lettered items leave it through `done`
//! lines. Ids are never reused: new ids continue above the highest id ever
//! seen in either file, tombstones included, and compaction carries that
//! high-water mark as a trailing `done` line, as the reference does.
//!
//! # Guarantees
//!
//! * Every mutation appends its lines in one `write` sequence followed by
//!   `fdatasync`, under an exclusive advisory lock (`flock`) on the main
//!   file; only then does it return `Ok`. A short write or failed sync is
//!   an error, and the backend cuts the file back to where the append
//!   started, so a failed call leaves nothing behind.
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
//!   written at all, and is cut off like a torn write.
//! * Opening reads the file once and never rewrites it. Later calls read
//!   only what other processes appended since (or everything again after
//!   another process compacted). Compaction runs when asked
//!   ([`FileQueue::compact`]) or automatically after a mutation once the
//!   main file is over 4 MiB and at least three quarters of its records
//!   are garbage.
//! * Moving an item between the main and the dead-letter file writes the
//!   destination first. If a crash separates the two appends, the item is
//!   in both files, and the dead-letter file wins: it is a dead letter.
//!   An item is therefore never lost, and at worst a requeue has to be
//!   repeated.

pub(crate) mod format;
pub mod io;
mod meta;
pub(crate) mod scan;
pub mod verify;

use self::format::Line;
use self::io::{copy_all, parent_dir, write_all, FileIo, RealIo};
use self::meta::Meta;
pub use self::scan::TornTail;
use super::receive::{ClientDelta, Receive};
use super::state::State;
use super::{companion, OpenMode, OpenOptions};
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, ClientSummary, DeadLetter, EnqueueOptions, Enqueued, Imported, Item, ItemId,
    NewItem, PushAck, PushState, QueueStats, Record, RecordState,
};
use crate::push::memory::Recorded;
use crate::push::receiver::ReceiveTxn;
use crate::queue::{BackendKind, Queue};
use crate::time::{SharedClock, Timestamp};
use std::collections::BTreeMap;
use std::fs::{File, TryLockError};
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, MetadataExt};
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

/// What [`FileQueue::compact`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactReport {
    /// Bytes of the main and dead-letter files before.
    pub bytes_before: u64,
    /// Bytes of the main and dead-letter files after.
    pub bytes_after: u64,
    /// Lines in the main file before.
    pub records_before: u64,
    /// Lines in the main file after.
    pub records_after: u64,
    /// Pending items kept.
    pub pending: u64,
    /// Dead letters kept.
    pub dead_letters: u64,
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

/// One tracked file: its handle, identity and how far it has been read.
#[derive(Debug)]
struct Tracked {
    file: File,
    dev: u64,
    ino: u64,
    end: u64,
    lines: u64,
    records: u64,
    torn: Option<TornTail>,
    needs_newline: bool,
}

impl Tracked {
    fn new(file: File, path: &Path) -> Result<Tracked> {
        let m = file.metadata().map_err(|e| Error::io(path, "inspect", e))?;
        Ok(Tracked {
            file,
            dev: m.dev(),
            ino: m.ino(),
            end: 0,
            lines: 0,
            records: 0,
            torn: None,
            needs_newline: false,
        })
    }
}

/// Whether an operation re-reads the meta file (the depth bound, the
/// uuid) first. Only those that use the bound or the uuid do: another
/// process may replace the file at any time, so reading it costs an
/// open, a read and a close on every call, which the hot paths of replay
/// (`done`, a recorded attempt) have no use for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum MetaUse {
    /// Re-read it: the operation uses the depth bound or the uuid.
    Read,
    /// Keep the copy read before.
    Skip,
}

#[derive(Debug)]
struct Inner {
    main: Option<Tracked>,
    dead: Option<Tracked>,
    state: State,
    meta: Meta,
    /// The in-memory image may disagree with the files (after a failed
    /// write or a replaced file): reload everything before the next use.
    stale: bool,
    notices: Vec<String>,
}

/// A spool stored in an NDJSON file.
#[derive(Debug)]
pub struct FileQueue {
    path: PathBuf,
    dead_path: PathBuf,
    meta_path: PathBuf,
    writable: bool,
    io: Arc<dyn FileIo>,
    clock: SharedClock,
    busy_timeout: Duration,
    inner: Mutex<Inner>,
}

/// Which file an append goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Main,
    Dead,
}

impl FileQueue {
    /// Open the NDJSON spool at `path` as `opts` says.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<FileQueue> {
        FileQueue::open_with_io(path, opts, Arc::new(RealIo))
    }

    /// Open with an I/O seam (for fault-injection tests).
    pub fn open_with_io(path: &Path, opts: &OpenOptions, io: Arc<dyn FileIo>) -> Result<FileQueue> {
        let writable = opts.mode.writable();
        let (file, created) = open_main(path, opts.mode)?;
        if !created {
            scan::check_head(path, &file)?;
        }
        if created {
            let dir = parent_dir(path);
            io.sync_dir(dir)
                .map_err(|e| Error::io(dir, "fsync directory", e))?;
        }
        let q = FileQueue {
            path: path.to_path_buf(),
            dead_path: companion(path, "dead"),
            meta_path: companion(path, "meta"),
            writable,
            io,
            clock: opts.clock.clone(),
            busy_timeout: opts.busy_timeout,
            inner: Mutex::new(Inner {
                main: Some(Tracked::new(file, path)?),
                dead: None,
                state: State::default(),
                meta: Meta::default(),
                stale: true,
                notices: Vec::new(),
            }),
        };
        let max_depth = opts.max_depth;
        let defer = opts.defer_load;
        let init = |q: &FileQueue, inner: &mut Inner| {
            if defer {
                inner.meta = meta::read(&q.meta_path)?;
            }
            if writable && inner.meta.uuid.is_none() {
                let mut m = inner.meta.clone();
                m.version = meta::META_VERSION;
                m.uuid = Some(uuid::Uuid::new_v4().to_string());
                if created || m.max_depth.is_none() {
                    m.max_depth = max_depth;
                }
                meta::write(&*q.io, &q.meta_path, &m)?;
                inner.state.max_depth = m.max_depth;
                inner.meta = m;
            }
            Ok(())
        };
        if defer {
            q.locked_unloaded(writable, init)?;
        } else {
            q.locked(writable, MetaUse::Read, init)?;
        }
        Ok(q)
    }

    /// The main file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The files that make up this spool (some may not exist).
    pub fn files(&self) -> Vec<PathBuf> {
        vec![
            self.path.clone(),
            self.dead_path.clone(),
            self.meta_path.clone(),
        ]
    }

    /// Messages about damage found and repaired (torn tails), oldest
    /// first; taking them clears the list.
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut self.lock_inner().notices)
    }

    /// Numbers about the main file.
    pub fn file_stats(&self) -> Result<FileStats> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            let main = inner.main.as_ref().ok_or_else(no_handle)?;
            let live = inner.state.pending.len() as u64;
            let records = main.records;
            let garbage_ratio = if records == 0 {
                0.0
            } else {
                records.saturating_sub(live) as f64 / records as f64
            };
            Ok(FileStats {
                records,
                live,
                garbage_ratio,
                torn_tail: main.torn.clone(),
            })
        })
    }

    /// Rewrite the main and dead-letter files last-write-wins: each file
    /// is written to a temporary file, synced, renamed over the original,
    /// and the directory synced. The main file ends with a `done` line for
    /// the high-water mark when it is above every pending id, so ids are
    /// never reissued. A torn tail is dropped. Concurrent writers wait on
    /// the lock and then continue on the new file.
    ///
    /// Compaction reads the files afresh, not the in-memory image, and
    /// streams the main file: every line is checked as a normal read
    /// checks it (a damaged line stops the compaction and changes
    /// nothing), but only each live item's position is kept, and the
    /// bytes of its last line are copied as they are. Memory grows with
    /// the live items and the dead letters, never with the garbage.
    pub fn compact(&self) -> Result<CompactReport> {
        self.require_writable("compact")?;
        self.locked_unloaded(true, |q, inner| q.compact_locked(inner))
    }

    /// Cut a torn trailing line off the main and dead-letter files, if
    /// either has one, and change nothing else (no append, no automatic
    /// compaction). What was cut is reported through
    /// [`FileQueue::take_notices`].
    pub fn repair_torn_tail(&self) -> Result<()> {
        self.require_writable("repair")?;
        // Taking the exclusive lock brings the image up to date, which
        // cuts any torn tail before returning.
        self.locked(true, MetaUse::Skip, |_, _| Ok(()))
    }

    /// Compact with the exclusive lock held. Afterwards the image is
    /// read afresh on the next call: the files were replaced (or, after a
    /// failure, one of them may have been).
    fn compact_locked(&self, inner: &mut Inner) -> Result<CompactReport> {
        let r = self.compact_files(inner);
        inner.stale = true;
        inner.dead = None;
        r
    }

    fn compact_files(&self, inner: &mut Inner) -> Result<CompactReport> {
        // Dead letters are few: read them whole, as an image.
        let mut dead = State::default();
        let mut dead_len = 0;
        let dead_file = open_existing(&self.dead_path, false)?;
        let dead_exists = dead_file.is_some();
        let mut dead_torn = None;
        if let Some(file) = dead_file {
            let mut t = Tracked::new(file, &self.dead_path)?;
            dead_len = file_len(&t.file, &self.dead_path)?;
            read_into(&self.dead_path, &mut t, |l| apply_dead(&mut dead, l))?;
            dead_torn = t.torn;
        }

        // The main file: where the last line of each live item is, as the
        // image would apply the lines (a put of a dead letter's id only
        // raises the high-water mark).
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        let main_len = file_len(&main.file, &self.path)?;
        let mut live: BTreeMap<ItemId, (u64, usize)> = BTreeMap::new();
        let mut high_water = dead.high_water;
        let mut last_push: Option<(u64, usize)> = None;
        let mut client_lines_at: Vec<(u64, usize)> = Vec::new();
        let scanned = scan::scan_file_parallel(
            &self.path,
            &main.file,
            format::check_line,
            |head, offset, len| {
                high_water = high_water.max(head.id);
                if head.push {
                    last_push = Some((offset, len));
                } else if head.client {
                    client_lines_at.push((offset, len));
                } else if !head.put {
                    live.remove(&head.id);
                } else if !dead.dead.contains_key(&head.id) {
                    live.insert(head.id, (offset, len));
                }
            },
        )?;

        // The dead-letter file is replaced first, while every other
        // process still waits on the lock of the old main file. Once the
        // main file is replaced, a process can lock the new one at once;
        // by then both files are final, so its appends land in files that
        // stay. (The other order lets such a process append a dead letter
        // to the old dead-letter file just before it is replaced.)
        let mut bytes_after = 0;
        if dead_exists || !dead.dead.is_empty() {
            let mut buf = Vec::new();
            for dl in dead.dead.values() {
                format::write_dead(&mut buf, dl);
            }
            bytes_after += self.replace_file(&self.dead_path, |w| w.push(&buf))?;
        }

        // Copy the kept lines in id order (the order in which ids first
        // appear must only grow; `verify` checks it). Most of them lie in
        // that order in the file already and are copied in one forward
        // pass: a line is read in passing when no line of a later id lies
        // before it. The others (an item updated after later ones were
        // enqueued) are read on their own.
        let pending = live.len() as u64;
        let max_live = live.keys().next_back().copied().unwrap_or(0);
        let mut records_after = pending;
        if high_water > max_live {
            records_after += 1;
        }
        let order: Vec<(u64, usize)> = live.into_values().collect();
        // The new file must not end in a line that carries a batch's `tx`
        // field (it would read as an unfinished batch): such a last line
        // is written without the field.
        let mut last_line = None;
        if let (Some(&(offset, len)), false) = (order.last(), high_water > max_live) {
            let mut line = vec![0; len];
            main.file
                .read_exact_at(&mut line, offset)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            last_line = format::strip_tx(&line);
        }
        let copied = order.len() - usize::from(last_line.is_some());
        // The push state, written anew (without any batch frame).
        let mut push_state = Vec::new();
        if let Some((offset, len)) = last_push {
            let mut line = vec![0; len];
            main.file
                .read_exact_at(&mut line, offset)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            if let Ok(Line::Push(p)) = format::parse_line(&line) {
                format::write_push(&mut push_state, &p);
            }
        }
        // The receiver's state: every client's lines added up, written as
        // one line per client (or a few for a long history).
        let mut receiver = State::default();
        for &(offset, len) in &client_lines_at {
            let mut line = vec![0; len];
            main.file
                .read_exact_at(&mut line, offset)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            if let Ok(Line::Client(c)) = format::parse_line(&line) {
                let id = c.id.clone();
                receiver.apply_client_delta(&id, client_delta(c));
            }
        }
        for (id, c) in receiver.receiver.clients() {
            let mut entries = c.entries.clone();
            // Rejects the client acknowledged keep their record but are no
            // longer reported: everything below the first one still
            // reported (all of them when none is) is acknowledged.
            let acked = c
                .rejects
                .keys()
                .next()
                .map_or(c.last_seq, |first| first - 1);
            let delta = ClientDelta {
                last_seq: Some(c.last_seq),
                entries: std::mem::take(&mut entries),
                acked,
                at: receiver.receiver_at.get(id).copied(),
            };
            client_lines(&mut push_state, id, &delta);
        }
        records_after += push_state.iter().filter(|b| **b == b'\n').count() as u64;
        let mut later_min = vec![u64::MAX; order.len()];
        let mut m = u64::MAX;
        for (i, &(offset, _)) in order.iter().enumerate().rev() {
            later_min[i] = m;
            m = m.min(offset);
        }
        bytes_after += self.replace_file(&self.path, |w| {
            let mut r = BufReader::with_capacity(1 << 20, &main.file);
            r.seek(SeekFrom::Start(0))?;
            let mut pos = 0u64;
            let mut line = Vec::new();
            let mut i = 0;
            while i < copied {
                // Lines next to each other in the file (one newline
                // between them) that come one after the other in id order
                // too: a long run of them is copied inside the kernel.
                let (start, first_len) = order[i];
                let mut end = start + first_len as u64;
                let mut next = i + 1;
                while next < copied && order[next].0 == end + 1 {
                    end = order[next].0 + order[next].1 as u64;
                    next += 1;
                }
                if next - i > 1 && end - start >= COMPACT_COPY_RUN {
                    w.copy_from(&main.file, start, (end - start) as usize)?;
                    w.push(b"\n")?;
                    i = next;
                    continue;
                }
                let (offset, len) = order[i];
                let later = later_min[i];
                i += 1;
                if offset >= pos && offset <= later {
                    r.seek_relative((offset - pos) as i64)?;
                    w.push_line_from(&mut r, len)?;
                    pos = offset + len as u64;
                } else {
                    line.resize(len, 0);
                    main.file.read_exact_at(&mut line, offset)?;
                    line.push(b'\n');
                    w.push(&line)?;
                }
            }
            if let Some(last) = &last_line {
                w.push(last)?;
                w.push(b"\n")?;
            }
            w.push(&push_state)?;
            if high_water > max_live {
                line.clear();
                format::write_done(&mut line, high_water);
                w.push(&line)?;
            }
            Ok(())
        })?;

        for (path, torn) in [(&self.path, &scanned.torn), (&self.dead_path, &dead_torn)] {
            if let Some(torn) = torn {
                inner.notices.push(torn_notice(path, torn, true));
                inner.notices.push(cut_notice(path, torn));
            }
        }
        Ok(CompactReport {
            bytes_before: main_len + dead_len,
            bytes_after,
            records_before: scanned.records,
            records_after,
            pending,
            dead_letters: dead.dead.len() as u64,
            high_water,
            dropped_torn_tail: scanned.torn,
        })
    }

    /// Replace `path` with what `fill` writes: into a temporary file,
    /// synced, renamed over `path`, directory synced. Returns the bytes
    /// written.
    fn replace_file(
        &self,
        path: &Path,
        fill: impl FnOnce(&mut Replacement<'_>) -> std::io::Result<()>,
    ) -> Result<u64> {
        let tmp = companion(path, "compact.tmp");
        let file = crate::private_file::create_replacement(&tmp, path)
            .map_err(|e| Error::io(&tmp, "create", e))?;
        let mut w = Replacement {
            io: &*self.io,
            file,
            buf: Vec::with_capacity(Replacement::CHUNK),
            written: 0,
        };
        fill(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| Error::io(&tmp, "write", e))?;
        self.io
            .sync(&w.file)
            .map_err(|e| Error::io(&tmp, "fsync", e))?;
        let written = w.written;
        drop(w);
        self.io
            .rename(&tmp, path)
            .map_err(|e| Error::io(path, "replace", e))?;
        let dir = parent_dir(path);
        self.io
            .sync_dir(dir)
            .map_err(|e| Error::io(dir, "fsync directory", e))?;
        Ok(written)
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
    /// in-memory image caught up with the files; `meta` says whether `f`
    /// needs the latest meta file too.
    fn locked<T>(
        &self,
        exclusive: bool,
        meta: MetaUse,
        f: impl FnOnce(&FileQueue, &mut Inner) -> Result<T>,
    ) -> Result<T> {
        self.locked_unloaded(exclusive, |q, inner| {
            q.refresh(inner, exclusive, meta)?;
            f(q, inner)
        })
    }

    /// Run `f` with the advisory lock held, leaving the in-memory image as
    /// it is (up to date or not).
    fn locked_unloaded<T>(
        &self,
        exclusive: bool,
        f: impl FnOnce(&FileQueue, &mut Inner) -> Result<T>,
    ) -> Result<T> {
        let mut inner = self.lock_inner();
        let inner = &mut *inner;
        self.acquire(inner, exclusive)?;
        let result = f(self, inner);
        if let Some(m) = &inner.main {
            let _ = m.file.unlock();
        }
        result
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
                inner.stale = true;
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
                    pause = (pause * 2).min(Duration::from_millis(20));
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

    /// Bring the in-memory image up to date with the files: read what was
    /// appended since the last call, or everything after a replacement or
    /// a failure. Dead letters are read before the main file so that a
    /// move between the files is seen whole.
    fn refresh(&self, inner: &mut Inner, exclusive: bool, meta: MetaUse) -> Result<()> {
        if !inner.stale {
            let dead_ok = self.refresh_dead(inner)?;
            let main_ok = dead_ok && self.refresh_main(inner)?;
            if !main_ok {
                inner.stale = true;
            } else if meta == MetaUse::Read {
                // The depth bound lives in the meta file, which another
                // process may have replaced: every call that uses it sees
                // the latest.
                inner.meta = meta::read(&self.meta_path)?;
                inner.state.max_depth = inner.meta.max_depth;
            }
        }
        if inner.stale {
            self.reload(inner)?;
        }
        if exclusive {
            if let Some(torn) = inner.main.as_ref().and_then(|m| m.torn.clone()) {
                self.cut_torn_tail(inner, Target::Main, torn)?;
            }
            if let Some(torn) = inner.dead.as_ref().and_then(|m| m.torn.clone()) {
                self.cut_torn_tail(inner, Target::Dead, torn)?;
            }
        }
        Ok(())
    }

    fn reload(&self, inner: &mut Inner) -> Result<()> {
        inner.meta = meta::read(&self.meta_path)?;
        let mut state = State {
            max_depth: inner.meta.max_depth,
            ..State::default()
        };
        inner.dead = None;
        if let Some(file) = open_existing(&self.dead_path, self.writable)? {
            let mut t = Tracked::new(file, &self.dead_path)?;
            read_into(&self.dead_path, &mut t, |l| apply_dead(&mut state, l))?;
            if let Some(torn) = &t.torn {
                inner
                    .notices
                    .push(torn_notice(&self.dead_path, torn, self.writable));
            }
            inner.dead = Some(t);
        }
        let main = inner.main.as_mut().ok_or_else(no_handle)?;
        main.end = 0;
        main.lines = 0;
        main.records = 0;
        main.torn = None;
        main.needs_newline = false;
        read_into(&self.path, main, |l| apply_main(&mut state, l))?;
        if let Some(torn) = &main.torn {
            inner
                .notices
                .push(torn_notice(&self.path, torn, self.writable));
        }
        inner.state = state;
        inner.stale = false;
        Ok(())
    }

    /// Catch up on the dead-letter file; false when a full reload is
    /// needed.
    fn refresh_dead(&self, inner: &mut Inner) -> Result<bool> {
        let on_disk = match std::fs::metadata(&self.dead_path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&self.dead_path, "inspect", e)),
        };
        match (&mut inner.dead, on_disk) {
            (None, None) => Ok(true),
            (None, Some(_)) => Ok(false),
            (Some(_), None) => Ok(false),
            (Some(t), Some(m)) => {
                if m.dev() != t.dev || m.ino() != t.ino || m.len() < t.end {
                    return Ok(false);
                }
                if m.len() == t.end {
                    return Ok(true);
                }
                let state = &mut inner.state;
                read_into(&self.dead_path, t, |l| apply_dead(state, l))?;
                Ok(true)
            }
        }
    }

    /// Catch up on the main file; false when a full reload is needed.
    fn refresh_main(&self, inner: &mut Inner) -> Result<bool> {
        let t = inner.main.as_mut().ok_or_else(no_handle)?;
        let len = file_len(&t.file, &self.path)?;
        if len < t.end {
            return Ok(false);
        }
        if len == t.end {
            return Ok(true);
        }
        let state = &mut inner.state;
        read_into(&self.path, t, |l| apply_main(state, l))?;
        Ok(true)
    }

    fn cut_torn_tail(&self, inner: &mut Inner, target: Target, torn: TornTail) -> Result<()> {
        let path = self.target_path(target);
        let t = match target {
            Target::Main => inner.main.as_mut(),
            Target::Dead => inner.dead.as_mut(),
        }
        .ok_or_else(no_handle)?;
        self.io
            .truncate(&t.file, torn.offset)
            .and_then(|()| self.io.sync(&t.file))
            .map_err(|e| Error::io(path, "cut the torn tail of", e))?;
        t.torn = None;
        t.end = torn.offset;
        inner.notices.push(cut_notice(path, &torn));
        Ok(())
    }

    fn target_path(&self, target: Target) -> &Path {
        match target {
            Target::Main => &self.path,
            Target::Dead => &self.dead_path,
        }
    }

    /// Append `bytes` (whole lines) to a file and sync it. On failure the
    /// file is cut back to where the append began and the image is marked
    /// stale.
    fn append(&self, inner: &mut Inner, target: Target, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let path = self.target_path(target);
        if target == Target::Dead && inner.dead.is_none() {
            let (file, created) = open_main(&self.dead_path, OpenMode::Create)?;
            if created {
                let dir = parent_dir(&self.dead_path);
                self.io
                    .sync_dir(dir)
                    .map_err(|e| Error::io(dir, "fsync directory", e))?;
            }
            let mut t = Tracked::new(file, &self.dead_path)?;
            t.end = file_len(&t.file, &self.dead_path)?;
            inner.dead = Some(t);
        }
        let t = match target {
            Target::Main => inner.main.as_mut(),
            Target::Dead => inner.dead.as_mut(),
        }
        .ok_or_else(no_handle)?;
        let start = t.end;
        let mut buf = Vec::with_capacity(bytes.len() + 1);
        if t.needs_newline {
            buf.push(b'\n');
        }
        // Several lines are one batch: framed so that a crash halfway
        // leaves none of them visible.
        buf.extend_from_slice(&format::frame_batch(bytes, start + buf.len() as u64));
        let written = write_all(&*self.io, &mut t.file, &buf)
            .map_err(|e| Error::io(path, "append to", e))
            .and_then(|()| {
                self.io
                    .sync(&t.file)
                    .map_err(|e| Error::io(path, "fsync", e))
            });
        if let Err(e) = written {
            // Take back whatever reached the file, so that nothing that
            // was not reported committed can look committed later.
            let _ = self
                .io
                .truncate(&t.file, start)
                .and_then(|()| self.io.sync(&t.file));
            inner.stale = true;
            return Err(e);
        }
        t.end = start + buf.len() as u64;
        let n = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        t.lines += n;
        t.records += n;
        t.needs_newline = false;
        Ok(())
    }

    /// Run a mutation: `f` plans it against the image and appends its
    /// lines; then auto-compaction runs if garbage dominates.
    fn mutate<T>(
        &self,
        meta: MetaUse,
        f: impl FnOnce(&FileQueue, &mut Inner) -> Result<T>,
    ) -> Result<T> {
        self.require_writable("write")?;
        self.locked(true, meta, |q, inner| {
            let out = f(q, inner)?;
            let compact = match &inner.main {
                Some(m) => {
                    m.end >= AUTO_COMPACT_MIN_BYTES
                        && m.records >= AUTO_COMPACT_RATIO * (inner.state.pending.len() as u64 + 1)
                }
                None => false,
            };
            if compact {
                if let Err(e) = q.compact_locked(inner) {
                    inner
                        .notices
                        .push(format!("automatic compaction failed (nothing lost): {e}"));
                }
            }
            Ok(out)
        })
    }
}

/// The temporary file of a compaction, written in large chunks through
/// the I/O seam.
struct Replacement<'a> {
    io: &'a dyn FileIo,
    file: File,
    buf: Vec<u8>,
    written: u64,
}

impl Replacement<'_> {
    const CHUNK: usize = 1 << 20;

    fn push(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= Self::CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Copy `len` bytes at `offset` of `from`.
    fn copy_from(&mut self, from: &File, offset: u64, len: usize) -> std::io::Result<()> {
        self.flush()?;
        copy_all(self.io, from, offset, &mut self.file, len)?;
        start_writeback(&self.file, self.written, len);
        self.written += len as u64;
        Ok(())
    }

    /// Copy the next `len` bytes of `r` and a newline.
    fn push_line_from(&mut self, r: &mut impl Read, len: usize) -> std::io::Result<()> {
        let start = self.buf.len();
        self.buf.resize(start + len, 0);
        r.read_exact(&mut self.buf[start..])?;
        self.buf.push(b'\n');
        if self.buf.len() >= Self::CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        write_all(self.io, &mut self.file, &self.buf)?;
        start_writeback(&self.file, self.written, self.buf.len());
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// Ask the kernel to start writing `len` bytes at `offset` of `file` to
/// disk now, so that the fsync at the end of a large rewrite finds little
/// left to do. Only a hint: durability still comes from that fsync.
fn start_writeback(file: &File, offset: u64, len: usize) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return;
    };
    // SAFETY: sync_file_range only reads its integer arguments; the
    // descriptor stays open while `file` is borrowed.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
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

/// Read `t.file` from `t.end` to its end (leaving out an unfinished batch
/// there), applying records and updating the tracking numbers.
fn read_into(path: &Path, t: &mut Tracked, apply: impl FnMut(Line)) -> Result<()> {
    let s = scan::scan_tail(path, &t.file, t.end, t.lines, t.needs_newline, apply)?;
    t.end = s.end;
    t.lines = s.lines;
    t.records += s.records;
    t.torn = s.torn;
    t.needs_newline = s.needs_newline;
    Ok(())
}

fn apply_main(state: &mut State, line: Line) {
    match line {
        Line::Push(p) => apply_push_line(state, p),
        Line::Client(c) => {
            let id = c.id.clone();
            state.apply_client_delta(&id, client_delta(c));
        }
        Line::Put { item, .. } => {
            if state.dead.contains_key(&item.id) {
                state.high_water = state.high_water.max(item.id);
            } else {
                state.insert_pending(item);
            }
        }
        Line::Done { id } => {
            state.remove_pending(id);
            state.high_water = state.high_water.max(id);
        }
    }
}

/// Take the push state of a push-state line.
fn apply_push_line(state: &mut State, p: format::PushLine) {
    state.push = PushState {
        last_assigned: p.assigned,
        acked: p.acked,
        skips: p.skips,
    };
    if p.uuid.is_some() {
        state.uuid = p.uuid;
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
    for seq in c.skipped {
        entries.insert(seq, Recorded::Skipped);
    }
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
            Recorded::Skipped => line.skipped.push(*seq),
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

fn apply_dead(state: &mut State, line: Line) {
    match line {
        // Push state lives in the main file only.
        Line::Push(_) | Line::Client(_) => {}
        Line::Put { item, dead_at } => {
            state.remove_pending(item.id);
            state.high_water = state.high_water.max(item.id);
            let dead_at = dead_at.unwrap_or_default();
            state.dead.insert(item.id, DeadLetter { item, dead_at });
        }
        Line::Done { id } => {
            state.dead.remove(&id);
            state.high_water = state.high_water.max(id);
        }
    }
}

impl Queue for FileQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::File
    }

    fn enqueue_batch(&self, items: &[NewItem], opts: &EnqueueOptions) -> Result<Vec<Enqueued>> {
        let now = self.clock.now();
        self.mutate(MetaUse::Read, |q, inner| {
            let (results, fresh) = inner.state.plan_enqueue(items, opts, now)?;
            let mut buf = Vec::new();
            for it in &fresh {
                format::write_put(&mut buf, it, None);
            }
            q.append(inner, Target::Main, &buf)?;
            for it in fresh {
                inner.state.insert_pending(it);
            }
            Ok(results)
        })
    }

    fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.page(after, limit))
        })
    }

    fn get(&self, id: ItemId) -> Result<Option<Item>> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.pending.get(&id).cloned())
        })
    }

    fn mark_done(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.mutate(MetaUse::Skip, |q, inner| {
            let mut seen = std::collections::HashSet::new();
            // As in the other backends, a repeated id reports true once.
            let found: Vec<bool> = ids
                .iter()
                .map(|id| inner.state.pending.contains_key(id) && seen.insert(*id))
                .collect();
            let mut buf = Vec::new();
            for (id, f) in ids.iter().zip(&found) {
                if *f {
                    format::write_done(&mut buf, *id);
                }
            }
            // In-flight items leave skips behind, in the same commit.
            let push = inner.state.push_after_removing(ids);
            if let Some(push) = &push {
                buf.extend(push_line(push, inner.state.uuid.as_ref()));
            }
            q.append(inner, Target::Main, &buf)?;
            for id in seen {
                inner.state.remove_pending(id);
            }
            if let Some(push) = push {
                inner.state.push = push;
            }
            Ok(found)
        })
    }

    fn set_attempts(&self, id: ItemId, attempts: u32) -> Result<bool> {
        self.update_one(id, |it| it.attempts = attempts)
    }

    fn record_attempt(&self, id: ItemId, update: &AttemptUpdate) -> Result<bool> {
        self.update_one(id, |it| update.apply(it))
    }

    fn set_held(&self, ids: &[ItemId], held: bool) -> Result<Vec<bool>> {
        self.mutate(MetaUse::Skip, |q, inner| {
            if held {
                inner.state.check_hold(ids)?;
            }
            let mut found = Vec::with_capacity(ids.len());
            let mut changed: Vec<Item> = Vec::new();
            for id in ids {
                match inner.state.pending.get(id) {
                    Some(it) => {
                        found.push(true);
                        if it.held != held && !changed.iter().any(|c| c.id == *id) {
                            let mut it = it.clone();
                            it.held = held;
                            changed.push(it);
                        }
                    }
                    None => found.push(false),
                }
            }
            let mut buf = Vec::new();
            for it in &changed {
                format::write_put(&mut buf, it, None);
            }
            q.append(inner, Target::Main, &buf)?;
            for it in changed {
                inner.state.insert_pending(it);
            }
            Ok(found)
        })
    }

    fn size(&self) -> Result<u64> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.pending.len() as u64)
        })
    }

    fn max_depth(&self) -> Result<Option<u64>> {
        self.locked(false, MetaUse::Read, |_, inner| Ok(inner.state.max_depth))
    }

    fn set_max_depth(&self, bound: Option<u64>) -> Result<()> {
        self.mutate(MetaUse::Read, |q, inner| {
            let mut m = inner.meta.clone();
            m.version = meta::META_VERSION;
            m.max_depth = bound;
            meta::write(&*q.io, &q.meta_path, &m)?;
            inner.meta = m;
            inner.state.max_depth = bound;
            Ok(())
        })
    }

    fn uuid(&self) -> Result<String> {
        self.locked(false, MetaUse::Read, |q, inner| {
            let regenerated = inner.state.uuid.clone();
            regenerated
                .or_else(|| inner.meta.uuid.clone())
                .ok_or_else(|| {
                    Error::Unsupported(format!(
                        "{} has no uuid yet; the first write to the spool assigns one",
                        q.path.display()
                    ))
                })
        })
    }

    fn high_water(&self) -> Result<ItemId> {
        self.locked(false, MetaUse::Skip, |_, inner| Ok(inner.state.high_water))
    }

    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool> {
        let now = self.clock.now();
        self.mutate(MetaUse::Skip, |q, inner| {
            let Some(dl) = inner.state.prepare_kill(id, last_error, now) else {
                return Ok(false);
            };
            let mut buf = Vec::new();
            format::write_dead(&mut buf, &dl);
            q.append(inner, Target::Dead, &buf)?;
            buf.clear();
            format::write_done(&mut buf, id);
            let push = inner.state.push_after_removing(&[id]);
            if let Some(push) = &push {
                buf.extend(push_line(push, inner.state.uuid.as_ref()));
            }
            q.append(inner, Target::Main, &buf)?;
            inner.state.apply_kill(dl);
            if let Some(push) = push {
                inner.state.push = push;
            }
            Ok(true)
        })
    }

    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.dead_page(after, limit))
        })
    }

    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.dead.get(&id).cloned())
        })
    }

    fn dead_count(&self) -> Result<u64> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.dead.len() as u64)
        })
    }

    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.mutate(MetaUse::Read, |q, inner| {
            inner.state.check_requeue(ids)?;
            let mut seen = std::collections::HashSet::new();
            let found: Vec<bool> = ids
                .iter()
                .map(|id| inner.state.dead.contains_key(id) && seen.insert(*id))
                .collect();
            let mut items: Vec<Item> = Vec::new();
            for id in ids {
                if items.iter().any(|i| i.id == *id) {
                    continue;
                }
                if let Some(it) = inner.state.prepare_requeue(*id) {
                    items.push(it);
                }
            }
            let mut main = Vec::new();
            let mut dead = Vec::new();
            for it in &items {
                format::write_put(&mut main, it, None);
                format::write_done(&mut dead, it.id);
            }
            q.append(inner, Target::Main, &main)?;
            q.append(inner, Target::Dead, &dead)?;
            for it in items {
                inner.state.apply_requeue(it);
            }
            Ok(found)
        })
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.mutate(MetaUse::Skip, |q, inner| {
            let mut gone = std::collections::BTreeSet::new();
            let found: Vec<bool> = ids
                .iter()
                .map(|id| inner.state.dead.contains_key(id) && gone.insert(*id))
                .collect();
            let mut buf = Vec::new();
            for id in &gone {
                format::write_done(&mut buf, *id);
            }
            q.append(inner, Target::Dead, &buf)?;
            for id in gone {
                inner.state.dead.remove(&id);
            }
            Ok(found)
        })
    }

    fn import(&self, records: &[Record]) -> Result<Vec<Imported>> {
        self.mutate(MetaUse::Read, |q, inner| {
            let (results, store) = inner.state.plan_import(records)?;
            let mut main = Vec::new();
            let mut dead = Vec::new();
            for r in &store {
                match r.state {
                    RecordState::Dead => format::write_put(&mut dead, &r.item, r.dead_at),
                    RecordState::Pending | RecordState::Held => {
                        format::write_put(&mut main, &r.item, None)
                    }
                }
            }
            q.append(inner, Target::Dead, &dead)?;
            q.append(inner, Target::Main, &main)?;
            for r in store {
                inner.state.apply_record(r);
            }
            Ok(results)
        })
    }

    fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        self.locked(false, MetaUse::Read, |_, inner| Ok(inner.state.stats(now)))
    }

    fn push_state(&self) -> Result<PushState> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.push.clone())
        })
    }

    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.in_flight_page(after_seq, limit))
        })
    }

    fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>> {
        self.mutate(MetaUse::Skip, |q, inner| {
            let (items, push) = inner.state.plan_assign(ids)?;
            if items.is_empty() {
                return Ok(Vec::new());
            }
            let mut buf = Vec::new();
            for it in &items {
                format::write_put(&mut buf, it, None);
            }
            buf.extend(push_line(&push, inner.state.uuid.as_ref()));
            q.append(inner, Target::Main, &buf)?;
            let out = items
                .iter()
                .map(|i| (i.id, i.push_seq.unwrap_or_default()))
                .collect();
            for it in items {
                inner.state.insert_pending(it);
            }
            inner.state.push = push;
            Ok(out)
        })
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        let now = self.clock.now();
        self.mutate(MetaUse::Skip, |q, inner| {
            let plan = inner.state.plan_ack(last_seq, rejected);
            if plan.push == inner.state.push {
                return Ok(PushAck {
                    acked: plan.push.acked,
                    ..PushAck::default()
                });
            }
            // Dead letters first, as for every move between the files.
            let mut dead = Vec::new();
            let mut kills = Vec::new();
            for (id, reason) in &plan.rejected {
                if let Some(dl) = inner.state.prepare_kill(*id, reason, now) {
                    format::write_dead(&mut dead, &dl);
                    kills.push(dl);
                }
            }
            q.append(inner, Target::Dead, &dead)?;
            let mut main = Vec::new();
            for id in plan
                .delivered
                .iter()
                .chain(plan.rejected.iter().map(|(id, _)| id))
            {
                format::write_done(&mut main, *id);
            }
            main.extend(push_line(&plan.push, inner.state.uuid.as_ref()));
            q.append(inner, Target::Main, &main)?;
            for id in &plan.delivered {
                inner.state.remove_pending(*id);
            }
            for dl in kills {
                inner.state.apply_kill(dl);
            }
            inner.state.push = plan.push;
            Ok(PushAck {
                acked: inner.state.push.acked,
                delivered: plan.delivered,
                rejected: plan.rejected.into_iter().map(|(id, _)| id).collect(),
            })
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        self.mutate(MetaUse::Skip, |q, inner| {
            let (items, push) = inner.state.plan_renumber();
            let uuid = uuid::Uuid::new_v4().to_string();
            let mut buf = Vec::new();
            for it in &items {
                format::write_put(&mut buf, it, None);
            }
            buf.extend(push_line(&push, Some(&uuid)));
            q.append(inner, Target::Main, &buf)?;
            inner.state.in_flight.clear();
            for it in items {
                inner.state.insert_pending(it);
            }
            inner.state.push = push;
            inner.state.uuid = Some(uuid.clone());
            Ok(uuid)
        })
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let now = self.clock.now();
        self.mutate(MetaUse::Read, |q, inner| {
            let mut rx = Receive::new(&inner.state, now);
            f(&mut rx)?;
            let changes = rx.finish();
            let mut buf = Vec::new();
            for it in &changes.items {
                format::write_put(&mut buf, it, None);
            }
            for (id, delta) in &changes.clients {
                client_lines(&mut buf, id, delta);
            }
            q.append(inner, Target::Main, &buf)?;
            inner.state.apply_receive(changes);
            Ok(())
        })
    }

    fn push_clients(&self) -> Result<Vec<ClientSummary>> {
        self.locked(false, MetaUse::Skip, |_, inner| {
            Ok(inner.state.client_summaries())
        })
    }
}

impl FileQueue {
    fn update_one(&self, id: ItemId, f: impl FnOnce(&mut Item)) -> Result<bool> {
        self.mutate(MetaUse::Skip, |q, inner| {
            let Some(item) = inner.state.pending.get(&id) else {
                return Ok(false);
            };
            let mut item = item.clone();
            f(&mut item);
            let mut buf = Vec::new();
            format::write_put(&mut buf, &item, None);
            q.append(inner, Target::Main, &buf)?;
            inner.state.insert_pending(item);
            Ok(true)
        })
    }
}
