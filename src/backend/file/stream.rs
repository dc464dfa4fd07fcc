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
//! in afterwards, from the file, as it takes in any appended tail. On any
//! error — a malformed input record, a depth bound the batch does not
//! fit, a failed write — the file is cut back to where the batch began
//! and the index transaction is rolled back: all lines or none.

use super::index::{Index, Which};
use super::io::{parent_dir, write_all};
use super::{format, open_main, Access, FileQueue, Inner, MetaUse, Tail};
use crate::backend::identity::{IdentityOutcome, Merge, SpoolHeader, Target};
use crate::backend::state;
use crate::backend::OpenMode;
use crate::error::{Error, Result};
use crate::item::{
    BatchResults, DepthLimit, EnqueueOptions, Enqueued, Imported, Item, ItemId, NewItem, Record,
    RecordState,
};
use crate::time::Timestamp;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// Bytes buffered before a write.
const CHUNK: usize = 64 << 10;

/// One file's part of a streamed batch.
struct BatchOut {
    path: PathBuf,
    /// The file, opened (for appending) at the first write.
    file: Option<File>,
    /// Where the batch's bytes begin.
    start: u64,
    /// Where its first line begins (after a newline that completes the
    /// file's last line, when it lacks one).
    tx: u64,
    buf: Vec<u8>,
    /// The latest line, not written yet: it may be the last.
    held: Option<Vec<u8>>,
    written: u64,
    /// A write was tried (it may have left bytes behind).
    tried: bool,
    lines: u64,
}

impl BatchOut {
    fn new(path: PathBuf, file: Option<File>, tail: &Tail) -> BatchOut {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        if tail.needs_newline {
            buf.push(b'\n');
        }
        BatchOut {
            path,
            file,
            start: tail.end,
            tx: tail.end + buf.len() as u64,
            buf,
            held: None,
            written: 0,
            tried: false,
            lines: 0,
        }
    }

    /// Add a line (with its newline).
    fn push(&mut self, q: &FileQueue, line: Vec<u8>) -> Result<()> {
        self.lines += 1;
        if let Some(prev) = self.held.replace(line) {
            let body = prev
                .strip_suffix(b"}\n")
                .ok_or_else(|| Error::Internal("a batch line that does not end in }".into()))?;
            self.buf.extend_from_slice(body);
            let _ = writeln!(self.buf, ",\"tx\":{}}}", self.tx);
            if self.buf.len() >= CHUNK {
                self.flush(q)?;
            }
        }
        Ok(())
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
        Ok(())
    }

    /// Write the last line and sync; the end of the batch in the file
    /// (`start` when the batch had no line).
    fn finish(&mut self, q: &FileQueue) -> Result<u64> {
        let Some(last) = self.held.take() else {
            return Ok(self.start);
        };
        self.buf.extend_from_slice(&last);
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

    fn clear(&self, ix: &Index) -> Result<()> {
        if self.created {
            ix.batch_keys_clear()?;
        }
        Ok(())
    }
}

/// The pending item a key deduplicates to: a pending item's, else an
/// earlier item's of this batch.
fn dedup(ix: &Index, keys: &BatchKeys, key: &str) -> Result<Option<ItemId>> {
    if key.is_empty() {
        return Ok(None);
    }
    match ix.key_owner(key)? {
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
        let now = self.clock.now();
        self.locked(Access::Mutate, MetaUse::Read, |q, inner| {
            let bound = match opts.depth_limit {
                DepthLimit::Stored => inner.meta.max_depth,
                DepthLimit::Override(b) => b,
            };
            let file = inner
                .main
                .as_ref()
                .ok_or_else(super::no_handle)?
                .file
                .try_clone()
                .map_err(|e| Error::io(&q.path, "open", e))?;
            let mut out = BatchOut::new(q.path.clone(), Some(file), &inner.main_tail);
            let ix = inner.index()?;
            let mut keys = BatchKeys::default();
            let planned = q
                .enqueue_lines(ix, &mut keys, &mut out, items, bound, now)
                .and_then(|r| keys.clear(ix).map(|()| r))
                .and_then(|r| out.finish(q).map(|end| (r, end)));
            match planned {
                Ok((results, end)) => {
                    if out.lines > 0 {
                        q.committed(inner, Which::Main, end);
                    }
                    Ok(results)
                }
                Err(e) => {
                    out.abort(q);
                    Err(e)
                }
            }
        })
    }

    fn enqueue_lines(
        &self,
        ix: &Index,
        keys: &mut BatchKeys,
        out: &mut BatchOut,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        bound: Option<u64>,
        now: Timestamp,
    ) -> Result<BatchResults> {
        let depth = ix.depth()?;
        let mut next = ix.high_water()?;
        let mut results = BatchResults::default();
        let mut fresh = 0u64;
        for it in items {
            let it = it?;
            if let Some(id) = dedup(ix, keys, &it.key)? {
                results.push(Enqueued {
                    id,
                    deduplicated: true,
                    ..Default::default()
                });
                continue;
            }
            next = next
                .checked_add(1)
                .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
            fresh += 1;
            if let Some(bound) = bound {
                if depth + fresh > bound {
                    return Err(Error::QueueFull {
                        max_depth: bound,
                        depth,
                    });
                }
            }
            if !it.key.is_empty() {
                keys.put(ix, &it.key, next)?;
            }
            let item = Item::new(next, it.payload, it.key, now);
            let mut line = Vec::with_capacity(item.payload.len() + 128);
            format::write_put(&mut line, &item, None);
            out.push(self, line)?;
            results.push(Enqueued {
                id: next,
                deduplicated: false,
                ..Default::default()
            });
            crate::debug::crash_point("batch-item");
        }
        Ok(results)
    }

    /// [`crate::Queue::import_stream`]: dead records to the dead-letter
    /// file and the others to the main file, each as one streamed batch;
    /// the dead-letter part is finished first.
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
            let mut main = BatchOut::new(q.path.clone(), Some(main_file), &inner.main_tail);
            let mut dead = BatchOut::new(q.dead_path.clone(), dead_file, &inner.dead_tail);
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
                        &mut main,
                        &mut dead,
                        records,
                        each,
                        merge.as_mut(),
                    )
                })
                .and_then(|()| q.push_state_line(ix, merge.as_ref(), &mut main))
                .and_then(|()| keys.clear(ix))
                .and_then(|()| dead.finish(q))
                .and_then(|d| main.finish(q).map(|m| (d, m)));
            match planned {
                Ok((dead_end, main_end)) => {
                    if dead.lines > 0 {
                        q.track_dead(inner)?;
                        q.committed(inner, Which::Dead, dead_end);
                    }
                    if main.lines > 0 {
                        q.committed(inner, Which::Main, main_end);
                    }
                    Ok(merge.map(|m| m.outcome))
                }
                Err(e) => {
                    dead.abort(q);
                    main.abort(q);
                    Err(e)
                }
            }
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn import_lines(
        &self,
        ix: &Index,
        keys: &mut BatchKeys,
        main: &mut BatchOut,
        dead: &mut BatchOut,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
        mut merge: Option<&mut Merge>,
    ) -> Result<()> {
        let mut hw = ix.high_water()?;
        for r in records {
            let r = r?;
            let live = r.state != RecordState::Dead;
            if live {
                if let Some(id) = dedup(ix, keys, &r.item.key)? {
                    each(
                        &r,
                        Imported {
                            id,
                            kept_id: false,
                            deduplicated: true,
                        },
                    );
                    continue;
                }
            }
            let (imported, mut rec) = state::import_record(&r, &mut hw)?;
            if let Some(m) = merge.as_deref_mut() {
                rec.item.push_seq =
                    m.seq_for(&r, |seq| Ok(!ix.in_flight(seq - 1, seq)?.is_empty()))?;
            }
            if live && !r.item.key.is_empty() {
                keys.put(ix, &r.item.key, imported.id)?;
            }
            let mut line = Vec::with_capacity(rec.item.payload.len() + 128);
            match rec.state {
                RecordState::Dead => {
                    format::write_put(&mut line, &rec.item, rec.dead_at);
                    dead.push(self, line)?;
                }
                RecordState::Pending | RecordState::Held => {
                    format::write_put(&mut line, &rec.item, None);
                    main.push(self, line)?;
                }
            }
            each(&r, imported);
        }
        Ok(())
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
                let mut line = Vec::new();
                format::write_put(&mut line, &item, None);
                main.push(self, line)?;
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
        main.push(self, super::push_line(&m.push, uuid.as_ref()))
    }
}
