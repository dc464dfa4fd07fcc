//! Retention of delivered items (SPEC §9) on an NDJSON spool.
//!
//! With a window set (`retainMs` in `<spool>.meta`), a delivered item
//! leaves the main file through a `done` line that carries `deliveredAt`
//! and `evidence`: that line and the item's last `put` line before it
//! are the retained record, committed by the delivery's one synced
//! append. The index points at both lines. Compaction, before it drops
//! them, moves such records to `<spool>.delivered` — `put` lines in the
//! dead-letter file's format with `deliveredAt` and `evidence` — in a
//! synced append ([`FileQueue::move_main_records`]); a crash between
//! that append and the new main file leaves a record in both places, and
//! the delivered file's wins. Imported delivered records go to the
//! delivered file directly.
//!
//! Expired records (window ended, or retention turned off) are pruned by
//! `done` lines in the delivered file, wherever the record is, in bounded
//! batches, by the calls that deliver, by enqueues, and by
//! [`crate::Queue::prune_delivered`]. Such a line is synced before the
//! call's main-file part. The index keeps the ids such lines name (its
//! `pruned` table, emptied by compaction): a main-file delivery of one,
//! taken in later — a rebuild reads the delivered file first, and a
//! compaction cut short leaves a moved record's lines in the main file —
//! adds no record.
//!
//! (Spools written by earlier versions also hold, in the delivered file,
//! records whose main-file `done` lines carry the delivery: the delivered
//! file's record wins.)

use super::format;
use super::format::Line;
use super::index::{DeliveredLoc, Entry, Loc, Row, Which};
use super::{FileQueue, Inner, Tail};
use crate::backend::state::within_window;
use crate::error::{Error, Result};
use crate::item::{DeliveredItem, Delivery, Evidence, Item, ItemId};
use crate::time::Timestamp;
use std::time::Duration;

/// The window in milliseconds, for comparisons with stored times.
fn window_ms(w: Duration) -> i64 {
    i64::try_from(w.as_millis()).unwrap_or(i64::MAX)
}

/// The record a delivered item is kept as: not held, not in flight, not
/// waiting for a retry.
pub(super) fn retained(mut item: Item, at: Timestamp, evidence: Evidence) -> DeliveredItem {
    item.held = false;
    item.push_seq = None;
    item.next_retry_at = None;
    DeliveredItem {
        item,
        delivery: Delivery { at, evidence },
    }
}

/// Lines for the delivered file — retained records, `done` lines of
/// pruned ones — with their index entries, one per line.
#[derive(Debug, Default)]
pub(super) struct Records {
    pub bytes: Vec<u8>,
    pub entries: Vec<Entry>,
}

impl Records {
    /// The record `d`.
    pub fn push(&mut self, d: &DeliveredItem) {
        format::write_delivered(&mut self.bytes, d);
        let mut row = Row::of(&d.item);
        row.delivered_at = Some(d.delivery.at.as_millis());
        self.entries.push(Entry::Put(row));
    }

    /// The `done` line that prunes the record of `id`.
    pub fn push_done(&mut self, id: ItemId) {
        format::write_done(&mut self.bytes, id);
        self.entries.push(Entry::Done(id, None));
    }
}

/// Expired delivered records, split by what pruning them needs.
#[derive(Debug, Default)]
pub(super) struct Expired {
    /// Records whose move is complete: a `done` line in the delivered
    /// file prunes them.
    pub prunable: Vec<ItemId>,
    /// Records the main file still holds (a crash came between the two
    /// appends of their move): they need their `done` line in the main
    /// file first.
    pub unfinished: Vec<ItemId>,
}

/// One companion file's part of a move: the file, its lines, and the
/// index entries of those lines when the caller has them.
pub(super) type MovePart<'a> = (Which, &'a [u8], Option<Vec<Entry>>);

impl FileQueue {
    /// The delivered item a non-empty key deduplicates to at `now`: the
    /// newest retained record with that key, while its window is open.
    /// One lookup in the index.
    pub(super) fn retained_owner(
        inner: &Inner,
        key: &str,
        now: Timestamp,
    ) -> Result<Option<ItemId>> {
        let retain = inner.meta.retain();
        if key.is_empty() || retain.is_none() {
            return Ok(None);
        }
        Ok(inner
            .index()?
            .delivered_owner(key)?
            .filter(|(_, at)| within_window(Timestamp::from_millis(*at), retain, now))
            .map(|(id, _)| id))
    }

    /// Up to `limit` delivered records whose window ended at `now` (all
    /// of them count as ended when retention is off): the late ones oldest
    /// first, then the others in id order (see [`super::index::Index::delivered_expired`]).
    pub(super) fn expired(inner: &Inner, now: Timestamp, limit: usize) -> Result<Expired> {
        let ix = inner.index()?;
        let mut out = Expired::default();
        if limit == 0 {
            return Ok(out);
        }
        let cutoff = inner
            .meta
            .retain()
            .map(|w| now.as_millis().saturating_sub(window_ms(w)));
        for (id, in_main) in ix.delivered_expired(cutoff, limit)? {
            match in_main {
                false => out.prunable.push(id),
                true => out.unfinished.push(id),
            }
        }
        Ok(out)
    }

    /// Move items out of the main file into the companion files: append
    /// and sync each of `parts` (a companion file, its lines, and the
    /// index entries of those lines when the caller has them, see
    /// [`FileQueue::append_entries`]) first, then `main_lines`, the
    /// commit point: the companion lines carry `"at"` with where the main
    /// file's part starts, and a crash before it is written leaves them
    /// an unfinished move that the next writer cuts off (see
    /// [`FileQueue::settle_moves`]). When an append fails, what the call
    /// appended is cut off again, so that the call changes nothing.
    pub(super) fn move_out(
        &self,
        inner: &mut Inner,
        parts: Vec<MovePart<'_>>,
        main_lines: &[u8],
    ) -> Result<()> {
        let at = inner.tail(Which::Main).end;
        let ino = inner.main.as_ref().map_or(0, |t| t.ino);
        let mut done: Vec<(Which, Tail)> = Vec::new();
        let mut result = Ok(());
        for (dest, lines, entries) in parts {
            if lines.is_empty() {
                continue;
            }
            let before = inner.tail(dest).clone();
            let lines = match main_lines.is_empty() {
                true => std::borrow::Cow::Borrowed(lines),
                false => std::borrow::Cow::Owned(format::stamp_at(lines, at, ino)),
            };
            result = self.append_entries(inner, dest, &lines, entries);
            if result.is_err() {
                break;
            }
            done.push((dest, before));
        }
        if result.is_ok() {
            result = self.append(inner, Which::Main, main_lines);
        }
        let Err(e) = result else {
            return Ok(());
        };
        for (dest, before) in done {
            // The index took those lines in: this call's index
            // transaction is not to commit.
            inner.index_broken = Some(format!("{e}"));
            if let Some(t) = inner.tracked(dest) {
                let cut = self
                    .io
                    .truncate(&t.file, before.end)
                    .and_then(|()| self.io.sync(&t.file));
                if cut.is_ok() {
                    *inner.tail(dest) = before;
                }
            }
        }
        Err(e)
    }

    /// Prune up to `limit` expired delivered records at `now`: the `done`
    /// lines that unfinished moves lack go to the main file first, then
    /// the delivered file gets a `done` line per record. How many.
    pub(super) fn prune_locked(
        &self,
        inner: &mut Inner,
        now: Timestamp,
        limit: usize,
    ) -> Result<u64> {
        let expired = FileQueue::expired(inner, now, limit)?;
        let mut main = Vec::new();
        for id in &expired.unfinished {
            format::write_done(&mut main, *id);
        }
        let mut delivered = Records::default();
        for id in expired.unfinished.iter().chain(&expired.prunable) {
            delivered.push_done(*id);
        }
        self.append(inner, Which::Main, &main)?;
        let Records { bytes, entries } = delivered;
        self.append_entries(inner, Which::Delivered, &bytes, Some(entries))?;
        Ok((expired.unfinished.len() + expired.prunable.len()) as u64)
    }

    /// [`FileQueue::prune_locked`] after a call's own commit, as
    /// upkeep: a failure is told in a notice (the next call prunes), not
    /// returned, since the call itself is committed.
    pub(super) fn prune_after(&self, inner: &mut Inner, now: Timestamp) {
        if let Err(e) = self.prune_locked(inner, now, crate::item::PRUNE_BATCH) {
            inner.notices.push(format!(
                "{}: expired delivered records were not pruned ({e}); the next write prunes them",
                self.delivered_path.display()
            ));
        }
    }

    /// Move the retained records the main file holds to the delivered
    /// file (see the module docs), with the index's write transaction
    /// open and caught up: synced appends of at most [`MOVE_CHUNK`]
    /// records and [`MOVE_BYTES`] of their lines each, each taken into the
    /// index, which then points at the delivered file's lines.
    pub(super) fn move_main_records(&self, inner: &mut Inner) -> Result<u64> {
        if inner.index()?.main_records(0, 1)?.is_empty() {
            return Ok(0);
        }
        // Appended after the last whole line, never glued onto a torn one.
        if let Some(torn) = inner.tail(Which::Delivered).torn.clone() {
            self.cut_torn_tail(inner, Which::Delivered, torn)?;
        }
        let mut moved = 0;
        let mut after = 0;
        loop {
            let mut locs = inner.index()?.main_records(after, MOVE_CHUNK)?;
            // At most MOVE_BYTES of `put` lines in memory (one at least).
            let mut size = 0;
            let fit = locs
                .iter()
                .take_while(|l| {
                    size += l.loc.len;
                    size <= MOVE_BYTES
                })
                .count();
            locs.truncate(fit.max(1));
            let Some(last) = locs.last() else {
                return Ok(moved);
            };
            after = last.loc.id;
            let mut out = Records::default();
            for d in self.delivered_items(inner, &locs)? {
                out.push(&d);
            }
            let Records { bytes, entries } = out;
            self.append_entries(inner, Which::Delivered, &bytes, Some(entries))?;
            self.catch_up(inner, Which::Delivered)?;
            moved += locs.len() as u64;
        }
    }

    /// The retained records at `locs`, read from the delivered file or
    /// (their `put` and `done` lines) from the main file.
    pub(super) fn delivered_items(
        &self,
        inner: &Inner,
        locs: &[DeliveredLoc],
    ) -> Result<Vec<DeliveredItem>> {
        let (in_main, in_file): (Vec<&DeliveredLoc>, Vec<&DeliveredLoc>) =
            locs.iter().partition(|l| l.done.is_some());
        let file_locs: Vec<Loc> = in_file.iter().map(|l| l.loc).collect();
        let mut from_file = self
            .read_each(inner, Which::Delivered, &file_locs, |line, _| {
                let delivery = line.delivery().ok().flatten()?;
                match line {
                    Line::Put { item, .. } => Some(DeliveredItem { item, delivery }),
                    _ => None,
                }
            })?
            .into_iter();
        let put_locs: Vec<Loc> = in_main.iter().map(|l| l.loc).collect();
        let done_locs: Vec<Loc> = in_main
            .iter()
            .filter_map(|l| {
                l.done.map(|(off, len)| Loc {
                    id: l.loc.id,
                    off,
                    len,
                })
            })
            .collect();
        let items = self.items(inner, &put_locs)?;
        let deliveries =
            self.read_each(inner, Which::Main, &done_locs, |line, loc| match line {
                Line::Done {
                    id,
                    delivery: Some(d),
                } if id == loc.id => Some(d),
                _ => None,
            })?;
        let mut from_main = items
            .into_iter()
            .zip(deliveries)
            .map(|(item, d)| retained(item, d.at, d.evidence));
        let mut out = Vec::with_capacity(locs.len());
        for l in locs {
            let record = match l.done {
                None => from_file.next(),
                Some(_) => from_main.next(),
            };
            out.push(
                record.ok_or_else(|| Error::Internal("a retained record went missing".into()))?,
            );
        }
        Ok(out)
    }
}

/// Records [`FileQueue::move_main_records`] moves per append, at most,
/// and bytes of their `put` lines.
const MOVE_CHUNK: usize = 4096;
const MOVE_BYTES: usize = 8 << 20;

/// Append the main file's `done` line of item `id`, delivered at `now`
/// on `evidence`: with the delivery when `retaining` (see the module
/// docs), a plain `done` line otherwise.
pub(super) fn write_delivered_done(
    out: &mut Vec<u8>,
    id: ItemId,
    retaining: bool,
    now: Timestamp,
    evidence: Evidence,
) {
    match retaining {
        true => format::write_done_delivered(out, id, &Delivery { at: now, evidence }),
        false => format::write_done(out, id),
    }
}
