//! Streamed batches: [`crate::Queue::enqueue_stream`] and
//! [`crate::Queue::import_stream`] on an NDJSON spool.
//!
//! The lines go to the spool file as they come, in chunks of
//! [`CHUNK`] bytes, as one framed batch (every line but the last carries
//! `"tx":<first byte of the batch>`; the last line is held back until the
//! input ends, so that it is written last). Each item is planned against
//! the index and against the keys the batch itself has stored, which are
//! kept in a temporary SQLite table (on disk, outside the spool), so
//! memory does not grow with the batch. Nothing of the batch is visible
//! before its last line is written and synced; the index takes the batch
//! in afterwards, in the same transaction and at the same point as any
//! appended tail — from the rows an enqueue kept as it wrote its lines
//! ([`OwnRows`], for as much of the batch as they cover), else from the
//! file. A hint starts the writeback of every MiB written, so that the
//! final sync waits for less. On any
//! error — a malformed input record, a depth bound the batch does not
//! fit, a failed write — the file is cut back to where the batch began
//! and the index transaction is rolled back: all lines or none.
//!
//! An enqueue that coalesces or evicts (SPEC §9) writes what it removes
//! into the same batch: a `done` line in the main file for every item it
//! replaced or evicted, before the item's own `put`. Evicted items also
//! go to the dead-letter file, as a framed batch of their own that ends
//! with the new eviction count and is finished first (the destination
//! first, as every move between the files); a crash between the two
//! leaves the evictions done and counted and the enqueue not, never an
//! item lost. Planning sees the batch's own effects through temporary
//! tables beside the batch's keys: the indexed items it removed and the
//! items it stored that a later item may remove.

use super::format::Line;
use super::index::{Index, Row, Which};
use super::io::{parent_dir, write_all};
use super::queue::FileView;
use super::{format, open_main, Access, FileQueue, Inner, MetaUse, Tail};
use crate::backend::identity::{IdentityOutcome, Merge, SpoolHeader, Target};
use crate::backend::policy::{self, EnqueueStore, ImportStore, Limit};
use crate::backend::state;
use crate::backend::OpenMode;
use crate::error::{Error, Result};
use crate::item::{
    BatchResults, DeadLetter, DepthLimit, EnqueueOptions, Imported, Item, ItemId, NewItem, OnFull,
    Record, RecordState,
};
use crate::time::Timestamp;
use std::borrow::Cow;
use std::fs::File;
use std::path::PathBuf;

/// Bytes buffered before a write.
const CHUNK: usize = 64 << 10;

/// Bytes written between two hints to start writing back what was
/// written ([`super::io::FileIo::start_writeback`]): the disk works while
/// the batch goes on, and the one sync at the end of the batch finds most
/// of it done (that sync took 41 ms of a 0.2 s batch of 100,000 lines
/// without the hints).
const WRITEBACK_STEP: u64 = 1 << 20;

/// A line of the batch as the file holds it once its frame is known: the
/// row of a `put` line kept for the index (see [`OwnRows`]), where
/// the line starts and its length without the newline.
type Placed = Option<(Row, u64, usize)>;

/// One file's part of a streamed batch.
struct BatchOut {
    path: PathBuf,
    /// The file, opened (for appending) at the first write.
    file: Option<File>,
    /// Where the batch's bytes begin.
    start: u64,
    /// Bytes not written yet: whole lines, the latest of which (from
    /// `last`) is held back, since it may be the batch's last line and so
    /// go without the frame.
    buf: Vec<u8>,
    /// Where the latest line starts in `buf`.
    last: Option<usize>,
    /// The index row that goes with the latest line, if it is to be taken
    /// in as it is written.
    last_row: Option<Row>,
    /// `,"tx":<offset of the first line>}` and the newline: how every
    /// line but the last ends.
    frame: Vec<u8>,
    written: u64,
    /// Bytes of `written` whose writeback was started.
    kicked: u64,
    /// A write was tried (it may have left bytes behind).
    tried: bool,
    lines: u64,
    /// For a companion file's part: `,"at":<start of the main file's
    /// part>}` and the newline, how every line ends (see
    /// [`format::stamp_at`]).
    stamp: Option<Vec<u8>>,
}

impl BatchOut {
    fn new(path: PathBuf, file: Option<File>, tail: &Tail) -> BatchOut {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        if tail.needs_newline {
            buf.push(b'\n');
        }
        let tx = tail.end + buf.len() as u64;
        BatchOut {
            path,
            file,
            start: tail.end,
            buf,
            last: None,
            last_row: None,
            frame: format!(",\"tx\":{tx}}}\n").into_bytes(),
            written: 0,
            kicked: 0,
            tried: false,
            lines: 0,
            stamp: None,
        }
    }

    /// A companion file's part of a batch whose main-file part starts at
    /// `at`: its lines are committed by that part (see
    /// [`format::stamp_at`]).
    fn committed_by_main(mut self, main: &BatchOut, main_ino: u64) -> BatchOut {
        let mut stamp = format::stamp_field(main.start, main_ino).into_bytes();
        stamp.push(b'\n');
        self.stamp = Some(stamp);
        self
    }

    /// Add a line (with its newline).
    fn push(&mut self, q: &FileQueue, line: &[u8]) -> Result<Placed> {
        self.push_with(q, None, |buf| buf.extend_from_slice(line))
    }

    /// Add the line `write` appends (with its newline), and `row`, its
    /// index row when it is to be taken in as it is written. The line
    /// before it now knows it is not the last: it gets the frame, and is
    /// returned with its row, if it has one.
    fn push_with(
        &mut self,
        q: &FileQueue,
        row: Option<Row>,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Placed> {
        self.lines += 1;
        let mut placed = None;
        if let Some(at) = self.last.take() {
            if !self.buf.ends_with(b"}\n") {
                return Err(Error::Internal(
                    "a batch line that does not end in }".into(),
                ));
            }
            self.buf.truncate(self.buf.len() - 2);
            self.buf.extend_from_slice(&self.frame);
            placed = self.last_row.take().map(|r| {
                (
                    r,
                    self.start + self.written + at as u64,
                    self.buf.len() - at - 1,
                )
            });
            if self.buf.len() >= CHUNK {
                self.flush(q)?;
            }
        }
        let at = self.buf.len();
        write(&mut self.buf);
        if let Some(stamp) = &self.stamp {
            if !self.buf.ends_with(b"}\n") {
                return Err(Error::Internal(
                    "a batch line that does not end in }".into(),
                ));
            }
            self.buf.truncate(self.buf.len() - 2);
            self.buf.extend_from_slice(stamp);
        }
        self.last = Some(at);
        self.last_row = row;
        Ok(placed)
    }

    /// The latest line (with its newline), as it stands.
    fn last_line(&self) -> &[u8] {
        self.last.map_or(&[], |at| &self.buf[at..])
    }

    /// The latest line's row with its place, that line being the last.
    fn take_last(&mut self) -> Placed {
        let at = self.last?;
        let row = self.last_row.take()?;
        Some((
            row,
            self.start + self.written + at as u64,
            self.buf.len() - at - 1,
        ))
    }

    fn flush(&mut self, q: &FileQueue) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            let (f, created) = open_main(&self.path, OpenMode::Create)?;
            if created {
                let dir = parent_dir(&self.path);
                q.io.sync_dir(dir)
                    .map_err(|e| Error::io(dir, "fsync directory", e))?;
            }
            self.file = Some(f);
        }
        let f = self.file.as_mut().ok_or_else(super::no_handle)?;
        self.tried = true;
        write_all(&*q.io, f, &self.buf).map_err(|e| Error::io(&self.path, "append to", e))?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        if self.written - self.kicked >= WRITEBACK_STEP {
            q.io.start_writeback(f, self.start + self.kicked, self.written - self.kicked);
            self.kicked = self.written;
        }
        Ok(())
    }

    /// Write the last line and sync; the end of the batch in the file
    /// (`start` when the batch had no line).
    fn finish(&mut self, q: &FileQueue) -> Result<u64> {
        if self.last.take().is_none() {
            return Ok(self.start);
        }
        self.flush(q)?;
        let f = self.file.as_ref().ok_or_else(super::no_handle)?;
        q.io.sync(f)
            .map_err(|e| Error::io(&self.path, "fsync", e))?;
        Ok(self.start + self.written)
    }

    /// Cut the file back to where the batch began.
    fn abort(&mut self, q: &FileQueue) {
        if let (Some(f), true) = (&self.file, self.tried) {
            let _ = q.io.truncate(f, self.start).and_then(|()| q.io.sync(f));
        }
    }
}

/// The first `n` bytes of `rest`, stepped over.
fn take<'b>(rest: &mut &'b [u8], n: usize) -> &'b [u8] {
    let (head, tail) = rest.split_at(n.min(rest.len()));
    *rest = tail;
    head
}

/// A little-endian u32 at the start of `rest`, stepped over.
fn take_u32(rest: &mut &[u8]) -> u32 {
    let mut n = [0u8; 4];
    let head = take(rest, 4);
    n[..head.len()].copy_from_slice(head);
    u32::from_le_bytes(n)
}

/// Both files' parts of a batch enqueue.
struct Lines<'a> {
    main: &'a mut BatchOut,
    dead: &'a mut BatchOut,
    own: &'a mut OwnRows,
}

impl Lines<'_> {
    /// Add a line to the main file's part; `row` is its index row, for a
    /// `put` line the index may take in from memory (see [`OwnRows`]).
    fn main(
        &mut self,
        q: &FileQueue,
        row: Option<Row>,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        let keep = self.own.on && row.is_some();
        let placed = self.main.push_with(q, row.filter(|_| keep), write)?;
        self.own.take(placed);
        // Only a prefix of the batch is kept so.
        self.own.on &= keep;
        Ok(())
    }
}

/// Bytes of rows [`OwnRows`] keeps, at most; the lines after those are
/// read back from the file.
const OWN_ROWS_MAX: usize = 8 << 20;

/// The index rows of a batch's own `put` lines, kept (compactly, in
/// memory) as the lines are written, so that the index takes the batch
/// in from them instead of reading the lines back from the file and
/// parsing them: [`FileQueue::catch_up`] applies them through the same
/// [`index::Applier`] when the index stands exactly where the batch
/// began, after the batch is committed, as it would the parsed lines
/// (the rows are the ones parsing the lines gives, [`Row::of`]). Kept
/// for a prefix of the batch only: consecutive new items (ids and lines
/// one after the other, never attempted, not held, no retry time, push
/// number or coalesce key), up to the first line of a batch that
/// coalesces or evicts and up to [`OWN_ROWS_MAX`] bytes; the index reads
/// the rest back, as it reads any tail.
#[derive(Debug)]
pub(super) struct OwnRows {
    /// Rows are still kept.
    on: bool,
    /// Where the first line starts: where the index must stand.
    pub start: u64,
    /// Where the line after the last one kept starts.
    pub end: u64,
    /// The id of the first row.
    first_id: ItemId,
    /// The enqueue time of every row (Unix seconds).
    enqueued_at: Option<i64>,
    /// Rows kept.
    pub count: u64,
    /// Per row: the line's length (without newline), the key and the
    /// group (length + 1, 0 for none), each length a little-endian u32.
    rows: Vec<u8>,
}

impl OwnRows {
    /// Ready for a batch whose first line starts where `tail` ends
    /// (keeping nothing after a last line without its newline).
    fn new(tail: &Tail) -> OwnRows {
        OwnRows {
            on: !tail.needs_newline,
            start: tail.end,
            end: tail.end,
            first_id: 0,
            enqueued_at: None,
            count: 0,
            rows: Vec::new(),
        }
    }

    /// Keep the row of a line whose place in the file is now known.
    fn take(&mut self, placed: Placed) {
        let Some((row, off, len)) = placed else {
            return;
        };
        if self.count == 0 {
            self.first_id = row.id;
            self.enqueued_at = row.enqueued_at;
        }
        let fits = self.on
            && off == self.end
            && Some(row.id) == self.first_id.checked_add(self.count)
            && row.enqueued_at == self.enqueued_at
            && row.attempts == 0
            && !row.held
            && row.next_retry_at.is_none()
            && row.push_seq.is_none()
            && row.coalesce_key.is_none()
            && row.delivered_at.is_none()
            && self.rows.len() + row.key.len() + row.group.as_ref().map_or(0, String::len) + 64
                <= OWN_ROWS_MAX;
        let group = row.group.as_deref().map(str::as_bytes);
        let (Ok(len32), Ok(key_len), Ok(group_len)) = (
            u32::try_from(len),
            u32::try_from(row.key.len()),
            u32::try_from(group.map_or(0, |g| g.len() + 1)),
        ) else {
            self.on = false;
            return;
        };
        if !fits {
            self.on = false;
            return;
        }
        self.rows.extend_from_slice(&len32.to_le_bytes());
        self.rows.extend_from_slice(&key_len.to_le_bytes());
        self.rows.extend_from_slice(row.key.as_bytes());
        self.rows.extend_from_slice(&group_len.to_le_bytes());
        self.rows.extend_from_slice(group.unwrap_or_default());
        self.count += 1;
        self.end = off + len as u64 + 1;
    }

    /// The rows kept, with where their lines are.
    pub fn rows(&self) -> impl Iterator<Item = (Row, u64, usize)> + '_ {
        let mut rest = self.rows.as_slice();
        let mut off = self.start;
        (0..self.count).map(move |i| {
            let len = take_u32(&mut rest) as usize;
            let key_len = take_u32(&mut rest) as usize;
            let key = String::from_utf8_lossy(take(&mut rest, key_len)).into_owned();
            let group = match take_u32(&mut rest) as usize {
                0 => None,
                n => Some(String::from_utf8_lossy(take(&mut rest, n - 1)).into_owned()),
            };
            let row = Row {
                id: self.first_id + i,
                key,
                attempts: 0,
                enqueued_at: self.enqueued_at,
                next_retry_at: None,
                held: false,
                push_seq: None,
                group,
                coalesce_key: None,
                delivered_at: None,
            };
            let placed = (row, off, len);
            off += len as u64 + 1;
            placed
        })
    }
}

/// The three files' parts of an import.
struct ImportOut<'a> {
    main: &'a mut BatchOut,
    dead: &'a mut BatchOut,
    delivered: &'a mut BatchOut,
}

/// The keys a batch has stored so far: a temporary table of the index's
/// connection, so that a batch of millions of keyed lines needs no
/// memory for them.
#[derive(Default)]
struct BatchKeys {
    created: bool,
}

impl BatchKeys {
    fn get(&self, ix: &Index, key: &str) -> Result<Option<ItemId>> {
        if !self.created {
            return Ok(None);
        }
        ix.batch_key(key)
    }

    fn put(&mut self, ix: &Index, key: &str, id: ItemId) -> Result<()> {
        if !self.created {
            ix.batch_keys_begin()?;
            self.created = true;
        }
        ix.batch_key_put(key, id)
    }

    fn remove(&self, ix: &Index, key: &str, id: ItemId) -> Result<()> {
        if self.created && !key.is_empty() {
            ix.batch_key_remove(key, id)?;
        }
        Ok(())
    }

    fn clear(&self, ix: &Index) -> Result<()> {
        if self.created {
            ix.batch_keys_clear()?;
        }
        Ok(())
    }
}

/// What a batch that may coalesce or evict keeps track of.
struct Policy {
    /// The depth bound the batch enforces.
    bound: Option<u64>,
    /// `drop-oldest` under a bound: every item may have to make room.
    evicting: bool,
    /// The temporary tables are in use (from the first item that
    /// coalesces, or from the start when evicting).
    active: bool,
    /// The high-water mark before the batch: higher ids are the batch's.
    batch_after: ItemId,
    /// Indexed items at or below this id that could be evicted were.
    evict_cursor: ItemId,
    /// Items the batch evicted.
    evicted: u64,
}

impl Policy {
    fn begin(&mut self, ix: &Index) -> Result<()> {
        if !self.active {
            ix.batch_policy_begin()?;
            self.active = true;
        }
        Ok(())
    }

    /// A pending item (indexed, or stored by the batch) leaves.
    fn remove(&self, ix: &Index, keys: &BatchKeys, id: ItemId) -> Result<()> {
        if id > self.batch_after {
            if let Some(key) = ix.batch_item_remove(id)? {
                keys.remove(ix, &key, id)?;
            }
            Ok(())
        } else {
            ix.batch_gone_put(id)
        }
    }

    fn clear(&self, ix: &Index) -> Result<()> {
        if self.active {
            ix.batch_policy_clear()?;
        }
        Ok(())
    }
}

/// The pending item a key deduplicates to: a pending item's, else an
/// earlier item's of this batch. With `live`, indexed items the batch
/// removed do not count.
fn dedup(ix: &Index, keys: &BatchKeys, key: &str, live: bool) -> Result<Option<ItemId>> {
    if key.is_empty() {
        return Ok(None);
    }
    let owner = if live {
        ix.key_owner_live(key)?
    } else {
        ix.key_owner(key)?
    };
    match owner {
        Some(id) => Ok(Some(id)),
        None => keys.get(ix, key),
    }
}

impl FileQueue {
    /// [`crate::Queue::enqueue_stream`].
    pub(super) fn stream_enqueue(
        &self,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        opts: &EnqueueOptions,
    ) -> Result<BatchResults> {
        let items = &mut items.map(|r| r.and_then(crate::item::checked_item));
        let now = self.clock.now();
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            let bound = match opts.depth_limit {
                DepthLimit::Stored => inner.meta.max_depth,
                DepthLimit::Override(b) => b,
            };
            let on_full = inner.meta.on_full(&q.meta_path)?;
            let file = inner
                .main
                .as_ref()
                .ok_or_else(super::no_handle)?
                .file
                .try_clone()
                .map_err(|e| Error::io(&q.path, "open", e))?;
            let dead_file = match &inner.dead {
                Some(t) => Some(
                    t.file
                        .try_clone()
                        .map_err(|e| Error::io(&q.dead_path, "open", e))?,
                ),
                None => None,
            };
            let main_ino = inner.main.as_ref().map_or(0, |t| t.ino);
            let mut out = BatchOut::new(q.path.clone(), Some(file), &inner.main_tail);
            let mut dead = BatchOut::new(q.dead_path.clone(), dead_file, &inner.dead_tail)
                .committed_by_main(&out, main_ino);
            let ix = inner.index()?;
            let mut own = OwnRows::new(&inner.main_tail);
            let mut keys = BatchKeys::default();
            let mut policy = Policy {
                bound,
                evicting: on_full == OnFull::DropOldest && bound.is_some(),
                active: false,
                batch_after: ix.high_water()?,
                evict_cursor: 0,
                evicted: 0,
            };
            let mut lines = Lines {
                main: &mut out,
                dead: &mut dead,
                own: &mut own,
            };
            let planned = q
                .enqueue_lines(inner, &mut keys, &mut policy, &mut lines, items, now)
                .and_then(|r| {
                    if policy.evicted > 0 {
                        // The count goes last, with the dead letters it
                        // counts.
                        let total = ix.evicted_total()?.saturating_add(policy.evicted);
                        let mut line = Vec::new();
                        format::write_evicted(&mut line, total);
                        lines.dead.push(q, &line)?;
                    }
                    Ok(r)
                })
                .and_then(|r| keys.clear(ix).map(|()| r))
                .and_then(|r| policy.clear(ix).map(|()| r))
                .and_then(|r| lines.dead.finish(q).map(|d| (r, d)))
                .and_then(|(r, d)| {
                    let last = lines.main.take_last();
                    lines.own.take(last);
                    lines.main.finish(q).map(|m| (r, d, m))
                });
            match planned {
                Ok((results, dead_end, end)) => {
                    if own.count > 0 {
                        inner.own_rows = Some(own);
                    }
                    if dead.lines > 0 {
                        q.track_companions(inner)?;
                        q.committed(inner, Which::Dead, dead_end);
                    }
                    if out.lines > 0 {
                        q.committed(inner, Which::Main, end);
                    }
                    // Expired delivered records go too (SPEC §9), after
                    // the batch's own commit.
                    q.prune_after(inner, now);
                    Ok(results)
                }
                Err(e) => {
                    dead.abort(q);
                    out.abort(q);
                    Err(e)
                }
            }
        })
    }

    fn enqueue_lines(
        &self,
        inner: &Inner,
        keys: &mut BatchKeys,
        policy: &mut Policy,
        out: &mut Lines<'_>,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        now: Timestamp,
    ) -> Result<BatchResults> {
        let ix = inner.index()?;
        let depth_before = ix.depth()?;
        let next = ix.high_water()?;
        let mut results = BatchResults::default();
        if policy.evicting {
            policy.begin(ix)?;
        }
        let limit = Limit {
            bound: policy.bound,
            on_full: match policy.evicting {
                true => OnFull::DropOldest,
                false => OnFull::Reject,
            },
            depth_before,
        };
        let mut s = Enqueuing {
            q: self,
            inner,
            keys,
            policy,
            out,
            now,
            depth: depth_before,
            next,
            victim: None,
        };
        for it in items {
            let it = it?;
            if it.coalesce_key.is_some() {
                s.policy.begin(ix)?;
            }
            results.push(policy::enqueue_one(&mut s, Cow::Owned(it), &limit)?);
            crate::debug::crash_point("batch-item");
        }
        Ok(results)
    }

    /// The dead letter `drop-oldest` makes of the oldest pending item that
    /// is not held and not in flight — an indexed one, else one the batch
    /// stored — or `None` when there is none.
    fn evict_one(
        &self,
        inner: &Inner,
        policy: &mut Policy,
        bound: u64,
        now: Timestamp,
    ) -> Result<Option<DeadLetter>> {
        let ix = inner.index()?;
        let error = OnFull::eviction_error(bound);
        if let Some(id) = ix.oldest_evictable(policy.evict_cursor)? {
            policy.evict_cursor = id;
            let v = FileView { q: self, inner };
            return state::prepare_kill(&v, id, &error, now)?
                .map(Some)
                .ok_or_else(|| Error::Internal(format!("item {id} vanished from the index")));
        }
        let Some((id, line)) = ix.oldest_batch_item()? else {
            return Ok(None);
        };
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        match format::parse_line(text) {
            Ok(Line::Put { mut item, .. }) if item.id == id => {
                item.last_error = Some(error);
                item.held = false;
                Ok(Some(DeadLetter { item, dead_at: now }))
            }
            _ => Err(Error::Internal(format!(
                "the batch lost the line of its item {id}"
            ))),
        }
    }

    /// [`crate::Queue::import_stream`]: dead records to the dead-letter
    /// file, delivered records to the delivered file and the others to the
    /// main file, each as one streamed batch; the companion files' parts
    /// are finished first.
    pub(super) fn stream_import(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<()> {
        self.stream_import_with(records, each, None).map(|_| ())
    }

    /// [`FileQueue::stream_import`] of an export with a spool header
    /// (`identity`: the header, and whether to adopt it). The push-state
    /// line the header leads to is the main batch's last line, so it
    /// commits with the items that carry the numbers it counts.
    pub(super) fn stream_import_with(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
        identity: Option<(&SpoolHeader, bool)>,
    ) -> Result<Option<IdentityOutcome>> {
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            let main_file = inner
                .main
                .as_ref()
                .ok_or_else(super::no_handle)?
                .file
                .try_clone()
                .map_err(|e| Error::io(&q.path, "open", e))?;
            let dead_file = match &inner.dead {
                Some(t) => Some(
                    t.file
                        .try_clone()
                        .map_err(|e| Error::io(&q.dead_path, "open", e))?,
                ),
                None => None,
            };
            let delivered_file = match &inner.delivered {
                Some(t) => Some(
                    t.file
                        .try_clone()
                        .map_err(|e| Error::io(&q.delivered_path, "open", e))?,
                ),
                None => None,
            };
            let main_ino = inner.main.as_ref().map_or(0, |t| t.ino);
            let mut main = BatchOut::new(q.path.clone(), Some(main_file), &inner.main_tail);
            let mut dead = BatchOut::new(q.dead_path.clone(), dead_file, &inner.dead_tail)
                .committed_by_main(&main, main_ino);
            let mut delivered = BatchOut::new(
                q.delivered_path.clone(),
                delivered_file,
                &inner.delivered_tail,
            )
            .committed_by_main(&main, main_ino);
            let ix = inner.index()?;
            let mut merge = match identity {
                Some((header, adopt)) => Some(q.begin_identity(inner, header, adopt)?),
                None => None,
            };
            let mut keys = BatchKeys::default();
            let planned = q
                .unnumber_lines(inner, merge.as_ref(), &mut main)
                .and_then(|()| {
                    q.import_lines(
                        ix,
                        &mut keys,
                        ImportOut {
                            main: &mut main,
                            dead: &mut dead,
                            delivered: &mut delivered,
                        },
                        records,
                        each,
                        merge.as_mut(),
                    )
                })
                .and_then(|hw| {
                    q.push_state_line(ix, merge.as_ref(), &mut main)?;
                    if main.lines == 0 && (dead.lines > 0 || delivered.lines > 0) {
                        // The main file's part commits the others: a
                        // `done` line of the highest id the import
                        // stored (a no-op to every reader of the file).
                        let mut line = Vec::new();
                        format::write_done(&mut line, hw);
                        main.push(q, &line)?;
                    }
                    Ok(())
                })
                .and_then(|()| keys.clear(ix))
                .and_then(|()| dead.finish(q))
                .and_then(|d| delivered.finish(q).map(|v| (d, v)))
                .and_then(|(d, v)| main.finish(q).map(|m| (d, v, m)));
            match planned {
                Ok((dead_end, delivered_end, main_end)) => {
                    if dead.lines > 0 || delivered.lines > 0 {
                        q.track_companions(inner)?;
                    }
                    if dead.lines > 0 {
                        q.committed(inner, Which::Dead, dead_end);
                    }
                    if delivered.lines > 0 {
                        q.committed(inner, Which::Delivered, delivered_end);
                    }
                    if main.lines > 0 {
                        q.committed(inner, Which::Main, main_end);
                    }
                    Ok(merge.map(|m| m.outcome))
                }
                Err(e) => {
                    dead.abort(q);
                    delivered.abort(q);
                    main.abort(q);
                    Err(e)
                }
            }
        })
    }

    fn import_lines(
        &self,
        ix: &Index,
        keys: &mut BatchKeys,
        out: ImportOut<'_>,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
        merge: Option<&mut Merge>,
    ) -> Result<ItemId> {
        let ImportOut {
            main,
            dead,
            delivered,
        } = out;
        let mut s = Importing {
            q: self,
            ix,
            keys,
            main,
            dead,
            delivered,
        };
        policy::import_records(&mut s, ix.high_water()?, records, each, merge)
    }

    /// The identity decision for an import into this spool (see
    /// [`crate::backend::identity`]).
    fn begin_identity(&self, inner: &Inner, header: &SpoolHeader, adopt: bool) -> Result<Merge> {
        let ix = inner.index()?;
        Merge::begin(
            Target {
                uuid: ix
                    .uuid()?
                    .or_else(|| inner.meta.uuid.clone())
                    .unwrap_or_default(),
                push: ix.push()?,
                pending: ix.depth()?,
                dead: ix.dead_count()?,
            },
            header,
            adopt,
        )
    }

    /// `put` lines without a number for the spool's in-flight items that
    /// the merged watermark covers (they are sent again as new entries).
    fn unnumber_lines(
        &self,
        inner: &Inner,
        merge: Option<&Merge>,
        main: &mut BatchOut,
    ) -> Result<()> {
        let Some(m) = merge.filter(|m| m.keeps_numbers() && m.push.acked > m.old_acked) else {
            return Ok(());
        };
        for (_, id) in inner.index()?.in_flight(m.old_acked, m.push.acked)? {
            let Some(loc) = inner.index()?.pending_loc(id)? else {
                continue;
            };
            for mut item in self.items(inner, &[loc])? {
                item.push_seq = None;
                main.push_with(self, None, |buf| format::write_put(buf, &item, None))?;
            }
        }
        Ok(())
    }

    /// The push-state line an import that keeps the identity ends with.
    fn push_state_line(
        &self,
        ix: &Index,
        merge: Option<&Merge>,
        main: &mut BatchOut,
    ) -> Result<()> {
        let Some(m) = merge.filter(|m| m.keeps_numbers()) else {
            return Ok(());
        };
        let uuid = match &m.new_uuid {
            Some(u) => Some(u.clone()),
            None => ix.uuid()?,
        };
        main.push(self, &super::push_line(&m.push, uuid.as_ref()))
            .map(drop)
    }
}

/// An NDJSON enqueue batch as the storage of [`policy::enqueue_one`]: the
/// index and the keys and items the batch stored so far answer, the lines
/// go to the batch's files.
struct Enqueuing<'a, 'o> {
    q: &'a FileQueue,
    inner: &'a Inner,
    keys: &'a mut BatchKeys,
    policy: &'a mut Policy,
    out: &'a mut Lines<'o>,
    now: Timestamp,
    /// Pending items now.
    depth: u64,
    /// The highest id issued.
    next: ItemId,
    /// The dead letter of the item [`EnqueueStore::oldest_evictable`]
    /// named last.
    victim: Option<DeadLetter>,
}

impl EnqueueStore for Enqueuing<'_, '_> {
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        dedup(self.inner.index()?, self.keys, key, self.policy.active)
    }

    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        // A delivered item retained with the key, inside its window.
        FileQueue::retained_owner(self.inner, key, self.now)
    }

    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>> {
        let ix = self.inner.index()?;
        let replaced = ix.coalesce_candidates(ck)?;
        for id in &replaced {
            self.policy.remove(ix, self.keys, *id)?;
            self.out
                .main(self.q, None, |buf| format::write_done(buf, *id))?;
        }
        self.depth -= replaced.len() as u64;
        Ok(replaced)
    }

    fn depth(&mut self) -> Result<u64> {
        Ok(self.depth)
    }

    fn oldest_evictable(&mut self) -> Result<Option<ItemId>> {
        let bound = self.policy.bound.unwrap_or_default();
        self.victim = self.q.evict_one(self.inner, self.policy, bound, self.now)?;
        Ok(self.victim.as_ref().map(|dl| dl.item.id))
    }

    fn evict(&mut self, id: ItemId, _reason: &str) -> Result<()> {
        let dl = self
            .victim
            .take()
            .filter(|dl| dl.item.id == id)
            .ok_or_else(|| Error::Internal(format!("item {id} to evict was not looked up")))?;
        let ix = self.inner.index()?;
        self.policy.remove(ix, self.keys, id)?;
        self.out
            .dead
            .push_with(self.q, None, |buf| format::write_dead(buf, &dl))?;
        self.out
            .main(self.q, None, |buf| format::write_done(buf, id))?;
        self.policy.evicted += 1;
        self.depth -= 1;
        Ok(())
    }

    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId> {
        let ix = self.inner.index()?;
        let it = it.into_owned();
        self.next = self
            .next
            .checked_add(1)
            .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
        let next = self.next;
        self.depth += 1;
        let mut item = Item::new(next, it.payload, it.key, self.now);
        item.group = it.group;
        item.coalesce_key = it.coalesce_key;
        if !item.key.is_empty() {
            self.keys.put(ix, &item.key, next)?;
        }
        // Its index row, kept for the index (see `OwnRows`).
        let row = (!self.policy.active).then(|| Row::of(&item));
        self.out
            .main(self.q, row, |buf| format::write_put(buf, &item, None))?;
        if self.policy.active && (self.policy.evicting || item.coalesce_key.is_some()) {
            // A later item of the batch may replace or evict it.
            ix.batch_item_put(
                next,
                &item.key,
                item.coalesce_key.as_deref(),
                self.policy.evicting.then_some(self.out.main.last_line()),
            )?;
        }
        Ok(next)
    }
}

/// An NDJSON import batch as the storage of [`policy::import_records`]:
/// the index and the keys the batch stored so far answer, each record
/// goes to its file's part of the batch.
struct Importing<'a> {
    q: &'a FileQueue,
    ix: &'a Index,
    keys: &'a mut BatchKeys,
    main: &'a mut BatchOut,
    dead: &'a mut BatchOut,
    delivered: &'a mut BatchOut,
}

impl ImportStore for Importing<'_> {
    fn dead_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.ix.dead_owner(key, upto)
    }

    fn delivered_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.ix.delivered_owner_upto(key, upto)
    }

    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        dedup(self.ix, self.keys, key, false)
    }

    fn seq_in_use(&mut self, seq: u64) -> Result<bool> {
        Ok(!self.ix.in_flight(seq - 1, seq)?.is_empty())
    }

    fn store(&mut self, rec: Record) -> Result<()> {
        let q = self.q;
        match rec.state {
            RecordState::Dead => {
                let dead_at = rec.dead_at;
                self.dead
                    .push_with(q, None, |buf| format::write_put(buf, &rec.item, dead_at))?;
            }
            RecordState::Pending | RecordState::Held => {
                if !rec.item.key.is_empty() {
                    self.keys.put(self.ix, &rec.item.key, rec.item.id)?;
                }
                self.main
                    .push_with(q, None, |buf| format::write_put(buf, &rec.item, None))?;
            }
            RecordState::Delivered => {
                let delivery = rec.delivery.ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "delivered record {} has no delivered_at",
                        rec.item.id
                    ))
                })?;
                let d = super::retain::retained(rec.item, delivery.at, delivery.evidence);
                self.delivered
                    .push_with(q, None, |buf| format::write_delivered(buf, &d))?;
            }
        }
        Ok(())
    }
}
