//! Streamed batches: [`crate::Queue::enqueue_stream`] and
//! [`crate::Queue::import_stream`] on an NDJSON spool.
//!
//! The lines go to the spool file as they come, in chunks of 64 KiB, as
//! one framed batch (every line but the last
//! carries `"tx":<first byte of the batch>`; the last line is held back
//! until the input ends, so that it is written last). Each line is
//! applied to the index's open transaction as it is written (through the
//! index's one `Applier`), so that each item is planned against the index
//! alone — the keys, coalesced and evicted items of the batch so far are
//! in it — and memory does not grow with the batch. Nothing of the batch
//! is visible before its last line is written and synced, and the index
//! commits after that sync. A hint starts the writeback of every MiB
//! written, so that the final sync waits for less. On any error — a
//! malformed input record, a depth bound the batch does not fit, a failed
//! write — the file is cut back to where the batch began and the index
//! transaction is rolled back: all lines or none.
//!
//! An enqueue that coalesces or evicts (SPEC §9) writes what it removes
//! into the same batch: a `done` line in the main file for every item it
//! replaced or evicted, before the item's own `put`. Evicted items also
//! go to the dead-letter file, as a framed batch of their own that ends
//! with the new eviction count and is finished first (the destination
//! first, as every move between the files); a crash between the two
//! leaves the evictions done and counted and the enqueue not, never an
//! item lost.

use super::format::Line;
use super::index::{Applier, Entry, FileRow, Index, Row, Which};
use super::queue::FileView;
use super::{format, Access, FileQueue, Inner, MetaUse};
use crate::backend::identity::{IdentityOutcome, Merge, SpoolHeader, Target};
use crate::backend::policy::{self, EnqueueStore, ImportStore, Limit};
use crate::backend::state;
use crate::error::{Error, Result};
use crate::item::{
    BatchResults, DeadLetter, DepthLimit, EnqueueOptions, Imported, Item, ItemId, NewItem, OnFull,
    Record, RecordState,
};
use crate::time::Timestamp;
use std::borrow::Cow;

mod out;
use self::out::BatchOut;

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
            let mut main = q.batch_out(inner, Which::Main)?;
            let mut dead = q
                .batch_out(inner, Which::Dead)?
                .committed_by_main(&main, main_ino(inner));
            let before = q.rows_before(inner)?;
            let ix = inner.index()?;
            let depth = ix.depth()?;
            let high_water = ix.high_water()?;
            let mut s = Enqueuing {
                q,
                inner,
                ix,
                ap: ix.applier()?,
                main: &mut main,
                dead: &mut dead,
                bound,
                evicting: on_full == OnFull::DropOldest && bound.is_some(),
                batch_after: high_water,
                evict_cursor: 0,
                evicted: 0,
                now,
                depth,
                next: high_water,
                victim: None,
            };
            let limit = Limit {
                bound,
                on_full: match s.evicting {
                    true => OnFull::DropOldest,
                    false => OnFull::Reject,
                },
                depth_before: depth,
            };
            let planned = (|| {
                let mut results = BatchResults::default();
                for it in items {
                    results.push(policy::enqueue_one(&mut s, Cow::Owned(it?), &limit)?);
                    crate::debug::crash_point("batch-item");
                }
                if s.evicted > 0 {
                    // The count goes last, with the dead letters it
                    // counts.
                    let total = ix.evicted_total()?.saturating_add(s.evicted);
                    s.dead
                        .push(q, &mut s.ap, None, |buf| format::write_evicted(buf, total))?;
                }
                let Enqueuing { ap, main, dead, .. } = s;
                end_lines(ap, [&*main, &*dead])?;
                let dead_end = dead.finish(q)?;
                let end = main.finish(q)?;
                Ok((results, dead_end, end))
            })();
            match planned {
                Ok((results, dead_end, end)) => {
                    q.batch_committed(inner, &before, &[(&dead, dead_end), (&main, end)])?;
                    // Expired delivered records go too (SPEC §9), after
                    // the batch's own commit.
                    if inner.index.is_some() {
                        q.prune_after(inner, now);
                    }
                    Ok(results)
                }
                Err(e) => {
                    dead.abort(q);
                    main.abort(q);
                    Err(e)
                }
            }
        })
    }

    /// `which`'s part of a batch (a companion part is not yet committed
    /// by the main file's).
    fn batch_out(&self, inner: &Inner, which: Which) -> Result<BatchOut> {
        let path = self.target_path(which);
        let file = inner
            .tracked(which)
            .map(|t| t.file.try_clone())
            .transpose()
            .map_err(|e| Error::io(path, "open", e))?;
        if which == Which::Main && file.is_none() {
            return Err(super::no_handle());
        }
        let tail = &inner.tails[which.slot()];
        Ok(BatchOut::new(which, path.to_path_buf(), file, tail))
    }

    /// The index's rows of the three files before a batch, in
    /// [`Which::slot`] order.
    fn rows_before(&self, inner: &Inner) -> Result<[Option<FileRow>; 3]> {
        let ix = inner.index()?;
        Ok([
            ix.file_row(Which::Main)?,
            ix.file_row(Which::Dead)?,
            ix.file_row(Which::Delivered)?,
        ])
    }

    /// A batch's parts are written and synced (`parts`: each with its
    /// end, the main file's last), the index took their lines in as they were written: move
    /// the index's rows of the files past them, and the tails. The batch
    /// is committed whatever happens to the index: when its rows cannot
    /// be moved, the index transaction is rolled back (the next call
    /// catches up from the files), with a notice.
    fn batch_committed(
        &self,
        inner: &mut Inner,
        before: &[Option<FileRow>; 3],
        parts: &[(&BatchOut, u64)],
    ) -> Result<()> {
        let companions = parts
            .iter()
            .any(|(out, _)| out.which() != Which::Main && out.lines > 0);
        if companions {
            self.track_companions(inner)?;
        }
        let mut moved = Ok(());
        for (out, end) in parts {
            if out.lines > 0 && moved.is_ok() {
                moved = self.move_row(inner, &before[out.which().slot()], out, *end);
            }
        }
        if let Err(e) = moved {
            if let Some(ix) = inner.index.take() {
                let _ = ix.rollback();
            }
            self.note_index_behind(inner, e);
        }
        for (out, end) in parts {
            if out.lines > 0 {
                self.committed(inner, out.which(), *end);
            }
        }
        Ok(())
    }

    /// Move the index's row of `out`'s file (`before`: as it was when the
    /// batch began) to `end`, past the batch's lines.
    fn move_row(
        &self,
        inner: &Inner,
        before: &Option<FileRow>,
        out: &BatchOut,
        end: u64,
    ) -> Result<()> {
        let which = out.which();
        let path = self.target_path(which);
        let t = inner.tracked(which).ok_or_else(super::no_handle)?;
        let ix = inner.index()?;
        let fingerprint = |upto| {
            super::index::fingerprint(&*self.io, &t.file, upto)
                .map_err(|e| Error::io(path, "read", e))
        };
        let file = (t.dev, t.ino);
        let extended = || fingerprint(end);
        if let Some(row) =
            FileRow::extended(before.as_ref(), file, out.start, end, out.lines, extended)?
        {
            return ix.set_file_row(which, &row);
        }
        // After a last line without its newline, say: count the batch's
        // lines as a catch-up would.
        let r = before.clone().unwrap_or_default();
        let s = super::scan::scan_tail_with(
            path,
            &*self.io,
            &t.file,
            r.upto,
            end,
            r.lines,
            r.needs_newline,
            |_| Ok(()),
            |(), _, _| {},
        )?;
        if s.end != end {
            return Err(Error::Internal(format!(
                "a batch ending at byte {end} reads back as ending at {}",
                s.end
            )));
        }
        let row = FileRow::read_to(file, &s, r.records + s.records, fingerprint(end)?);
        ix.set_file_row(which, &row)
    }

    /// The dead letter `drop-oldest` makes of the oldest pending item
    /// that is not held and not in flight, or `None` when there is none.
    fn evict_one(s: &mut Enqueuing<'_, '_>) -> Result<Option<DeadLetter>> {
        s.ap.flush()?;
        let error = OnFull::eviction_error(s.bound.unwrap_or_default());
        let Some(id) = s.ix.oldest_evictable(s.evict_cursor)? else {
            return Ok(None);
        };
        s.evict_cursor = id;
        if id <= s.batch_after {
            let v = FileView {
                q: s.q,
                inner: s.inner,
            };
            return state::prepare_kill(&v, id, &error, s.now)?
                .map(Some)
                .ok_or_else(|| Error::Internal(format!("item {id} vanished from the index")));
        }
        // An item of this batch: its line is written, or still in the
        // batch's buffer.
        let loc =
            s.ix.pending_loc(id)?
                .ok_or_else(|| Error::Internal(format!("item {id} vanished from the index")))?;
        let line = match s.main.buffered_line(loc.off) {
            Some(line) => line.to_vec(),
            None => {
                let t = s.inner.main.as_ref().ok_or_else(super::no_handle)?;
                let mut buf = vec![0; loc.len];
                super::io::read_exact_at(&*s.q.io, &t.file, &mut buf, loc.off)
                    .map_err(|e| Error::io(&s.q.path, "read", e))?;
                buf
            }
        };
        match format::parse_line(&line) {
            Ok(Line::Put { mut item, .. }) if item.id == id => {
                item.last_error = Some(error);
                item.held = false;
                Ok(Some(DeadLetter {
                    item,
                    dead_at: s.now,
                }))
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
            let mut main = q.batch_out(inner, Which::Main)?;
            let mut dead = q
                .batch_out(inner, Which::Dead)?
                .committed_by_main(&main, main_ino(inner));
            let mut delivered = q
                .batch_out(inner, Which::Delivered)?
                .committed_by_main(&main, main_ino(inner));
            let before = q.rows_before(inner)?;
            let ix = inner.index()?;
            let mut merge = match identity {
                Some((header, adopt)) => Some(q.begin_identity(inner, header, adopt)?),
                None => None,
            };
            let mut ap = ix.applier()?;
            let planned = (|| {
                q.unnumber_lines(inner, merge.as_ref(), &mut ap, &mut main)?;
                let mut s = Importing {
                    q,
                    ix,
                    ap,
                    main: &mut main,
                    dead: &mut dead,
                    delivered: &mut delivered,
                };
                let hw = policy::import_records(
                    &mut s,
                    ix.high_water()?,
                    records,
                    each,
                    merge.as_mut(),
                )?;
                q.push_state_line(ix, merge.as_ref(), &mut s.ap, s.main)?;
                if s.main.lines == 0 && (s.dead.lines > 0 || s.delivered.lines > 0) {
                    // The main file's part commits the others: a `done`
                    // line of the highest id the import stored (a no-op
                    // to every reader of the file).
                    s.main
                        .push(q, &mut s.ap, Some(Entry::Done(hw, None)), |buf| {
                            format::write_done(buf, hw)
                        })?;
                }
                let Importing {
                    ap,
                    main,
                    dead,
                    delivered,
                    ..
                } = s;
                end_lines(ap, [&*main, &*dead, &*delivered])?;
                let dead_end = dead.finish(q)?;
                let delivered_end = delivered.finish(q)?;
                let main_end = main.finish(q)?;
                Ok((dead_end, delivered_end, main_end))
            })();
            match planned {
                Ok((dead_end, delivered_end, main_end)) => {
                    q.batch_committed(
                        inner,
                        &before,
                        &[
                            (&dead, dead_end),
                            (&delivered, delivered_end),
                            (&main, main_end),
                        ],
                    )?;
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
        ap: &mut Applier<'_>,
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
                main.push(self, ap, Some(Entry::Put(Row::of(&item))), |buf| {
                    format::write_put(buf, &item, None)
                })?;
            }
        }
        Ok(())
    }

    /// The push-state line an import that keeps the identity ends with.
    fn push_state_line(
        &self,
        ix: &Index,
        merge: Option<&Merge>,
        ap: &mut Applier<'_>,
        main: &mut BatchOut,
    ) -> Result<()> {
        let Some(m) = merge.filter(|m| m.keeps_numbers()) else {
            return Ok(());
        };
        let uuid = match &m.new_uuid {
            Some(u) => Some(u.clone()),
            None => ix.uuid()?,
        };
        let line = super::push_line(&m.push, uuid.as_ref());
        main.push(self, ap, None, |buf| buf.extend_from_slice(&line))
    }
}

/// The inode of the main file (companion lines name it).
fn main_ino(inner: &Inner) -> u64 {
    inner.main.as_ref().map_or(0, |t| t.ino)
}

/// The batch's lines are all written to its buffers and applied: the
/// index gets each file's last line's length (it goes without the frame)
/// and what the applier accumulated.
fn end_lines<const N: usize>(mut ap: Applier<'_>, outs: [&BatchOut; N]) -> Result<()> {
    for out in outs {
        if let Some((id, off, len)) = out.end_last() {
            ap.set_len(out.which(), id, off, len)?;
        }
    }
    ap.finish()
}

/// An NDJSON enqueue batch as the storage of [`policy::enqueue_one`]: the
/// index (which has taken in the batch's lines so far) answers, the lines
/// go to the batch's files.
struct Enqueuing<'a, 'o> {
    q: &'a FileQueue,
    inner: &'a Inner,
    ix: &'a Index,
    ap: Applier<'a>,
    main: &'o mut BatchOut,
    dead: &'o mut BatchOut,
    /// The depth bound the batch enforces.
    bound: Option<u64>,
    /// `drop-oldest` under a bound: every item may have to make room.
    evicting: bool,
    /// The high-water mark before the batch: higher ids are the batch's.
    batch_after: ItemId,
    /// Items at or below this id that could be evicted were.
    evict_cursor: ItemId,
    /// Items the batch evicted.
    evicted: u64,
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
        if key.is_empty() {
            return Ok(None);
        }
        self.ap.flush()?;
        self.ix.key_owner(key)
    }

    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        // A delivered item retained with the key, inside its window.
        FileQueue::retained_owner(self.inner, key, self.now)
    }

    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>> {
        self.ap.flush()?;
        let replaced = self.ix.coalescible(ck)?;
        for id in &replaced {
            let id = *id;
            self.main
                .push(self.q, &mut self.ap, Some(Entry::Done(id, None)), |buf| {
                    format::write_done(buf, id)
                })?;
        }
        self.depth -= replaced.len() as u64;
        Ok(replaced)
    }

    fn depth(&mut self) -> Result<u64> {
        Ok(self.depth)
    }

    fn oldest_evictable(&mut self) -> Result<Option<ItemId>> {
        self.victim = FileQueue::evict_one(self)?;
        Ok(self.victim.as_ref().map(|dl| dl.item.id))
    }

    fn evict(&mut self, id: ItemId, _reason: &str) -> Result<()> {
        let dl = self
            .victim
            .take()
            .filter(|dl| dl.item.id == id)
            .ok_or_else(|| Error::Internal(format!("item {id} to evict was not looked up")))?;
        self.dead.push(self.q, &mut self.ap, None, |buf| {
            format::write_dead(buf, &dl)
        })?;
        self.main
            .push(self.q, &mut self.ap, Some(Entry::Done(id, None)), |buf| {
                format::write_done(buf, id)
            })?;
        self.evicted += 1;
        self.depth -= 1;
        Ok(())
    }

    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId> {
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
        self.main.push(
            self.q,
            &mut self.ap,
            Some(Entry::Put(Row::of(&item))),
            |buf| format::write_put(buf, &item, None),
        )?;
        Ok(next)
    }
}

/// An NDJSON import batch as the storage of [`policy::import_records`]:
/// the index (which has taken in the batch's lines so far) answers, each
/// record goes to its file's part of the batch.
struct Importing<'a, 'o> {
    q: &'a FileQueue,
    ix: &'a Index,
    ap: Applier<'a>,
    main: &'o mut BatchOut,
    dead: &'o mut BatchOut,
    delivered: &'o mut BatchOut,
}

impl ImportStore for Importing<'_, '_> {
    fn dead_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.ix.dead_owner(key, upto)
    }

    fn delivered_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.ix.delivered_owner_upto(key, upto)
    }

    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        self.ap.flush()?;
        self.ix.key_owner(key)
    }

    fn seq_in_use(&mut self, seq: u64) -> Result<bool> {
        self.ap.flush()?;
        Ok(!self.ix.in_flight(seq - 1, seq)?.is_empty())
    }

    fn store(&mut self, rec: Record) -> Result<()> {
        let (q, ap) = (self.q, &mut self.ap);
        match rec.state {
            RecordState::Dead => {
                let dead_at = rec.dead_at;
                self.dead.push(q, ap, None, |buf| {
                    format::write_put(buf, &rec.item, dead_at)
                })
            }
            RecordState::Pending | RecordState::Held => {
                self.main
                    .push(q, ap, Some(Entry::Put(Row::of(&rec.item))), |buf| {
                        format::write_put(buf, &rec.item, None)
                    })
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
                    .push(q, ap, None, |buf| format::write_delivered(buf, &d))
            }
        }
    }
}
