//! Retention of delivered items (SPEC §9) on an NDJSON spool: the
//! `<spool>.delivered` companion file.
//!
//! With a window set (`retainMs` in `<spool>.meta`), a delivered item is
//! moved to `<spool>.delivered` — a `put` line in the dead-letter file's
//! format with `deliveredAt` and `evidence` — and leaves the main file
//! through its `done` line, as it always did; that `done` line carries
//! `deliveredAt` and `evidence` too.
//!
//! The move appends to the delivered file first, without syncing it, then
//! appends (and syncs) the main file: one sync per delivery, as without
//! retention. The main file is what commits the delivery, and it alone
//! tells the retained record (the item's last `put` line and the `done`
//! line's delivery) until the delivered file is synced — by a later
//! synced append to it (pruning), before a compaction drops those lines,
//! and when the spool is closed. A move whose delivered-file lines also
//! prune expired records syncs them before the main file's part: nothing
//! in the main file stands in for a prune.
//!
//! * A process killed between the two appends leaves the item in both
//!   files (its write reached the kernel): the delivered file wins (the
//!   item was delivered; it is never delivered again). The index notes
//!   such an item (`in_main`), and the `done` line the main file lacks is
//!   written before its record may be pruned, so that no reader of the
//!   main file alone sees it come back.
//! * A machine that crashes before the delivered file reached the disk
//!   loses that file's tail: the records appended last. The index, last
//!   written before the reboot, is rebuilt, and the rebuild finds the
//!   main file's retained deliveries whose records the delivered file
//!   lacks, after the last one it holds
//!   ([`crate::backend::file::index::Applier::track_lost`]). Before the
//!   writing call goes on, the records of those inside the window are
//!   written back to the delivered file, and the others are pruned there
//!   by `done` lines, so that a window set later cannot bring them back
//!   ([`FileQueue::restore_lost`]); a reader tells of the missing records
//!   in a notice.
//!
//! Expired records (window ended, or retention turned off) are pruned by
//! `done` lines in the delivered file, in bounded batches, by the calls
//! that deliver, by enqueues, and by [`crate::Queue::prune_delivered`].

use super::format;
use super::index::{Entry, Loc, Lost, Row, Which};
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

    /// The records of the pending items `done` delivered at `now`, each
    /// with its evidence (read from the main file, nearby lines with one
    /// `pread`), with their index entries.
    pub(super) fn retained_records(
        &self,
        inner: &Inner,
        done: &[(ItemId, Evidence)],
        now: Timestamp,
    ) -> Result<Records> {
        let ix = inner.index()?;
        let mut locs = Vec::with_capacity(done.len());
        for (id, _) in done {
            let loc = ix
                .pending_loc(*id)?
                .ok_or_else(|| Error::Internal(format!("item {id} vanished from the index")))?;
            locs.push(loc);
        }
        let mut out = Records::default();
        for (item, (id, evidence)) in self.items(inner, &locs)?.into_iter().zip(done) {
            if item.id != *id {
                return Err(Error::Internal(format!(
                    "item {id} was read as item {}",
                    item.id
                )));
            }
            out.push(&retained(item, now, *evidence));
        }
        Ok(out)
    }

    /// Move items out of the main file into the companion files: append
    /// each of `parts` (a companion file, its lines, and the index
    /// entries of those lines when the caller has them, see
    /// [`FileQueue::append_entries`]) first — synced for the dead-letter
    /// file; the delivered file's records are synced later, see the
    /// module docs — then `main_lines`, the commit point: the companion
    /// lines carry `"at"` with where the main file's part starts, and a
    /// crash before it is written leaves them an unfinished move that the
    /// next writer cuts off (see [`FileQueue::settle_moves`]). When an
    /// append fails, what the call appended is cut off again, so that the
    /// call changes nothing.
    pub(super) fn move_out(
        &self,
        inner: &mut Inner,
        parts: Vec<MovePart<'_>>,
        main_lines: &[u8],
    ) -> Result<()> {
        let at = inner.tail(Which::Main).end;
        let ino = inner.main.as_ref().map_or(0, |t| t.ino);
        let mut done: Vec<(Which, Tail)> = Vec::new();
        let unsynced_before = inner.delivered_unsynced;
        let mut result = Ok(());
        for (dest, lines, entries) in parts {
            if lines.is_empty() {
                continue;
            }
            let before = inner.tail(dest).clone();
            // The delivered file's records wait for a later sync only
            // when the main file's part follows (its lines tell them,
            // see the module docs); alone, they are the commit. The
            // `done` lines that prune records have no such stand-in: lost
            // in a power loss, they would bring the records back.
            let prunes = entries
                .as_ref()
                .is_none_or(|es| es.iter().any(|e| matches!(e, Entry::Done(..))));
            let sync = dest != Which::Delivered || main_lines.is_empty() || prunes;
            let lines = match main_lines.is_empty() {
                true => std::borrow::Cow::Borrowed(lines),
                false => std::borrow::Cow::Owned(format::stamp_at(lines, at, ino)),
            };
            result = self.append_entries(inner, dest, &lines, sync, entries);
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
            // Those lines are no longer there (or to be read back).
            inner.own_lines[dest.slot()] = None;
            if let Some(t) = inner.tracked(dest) {
                let cut = self
                    .io
                    .truncate(&t.file, before.end)
                    .and_then(|()| self.io.sync(&t.file));
                if cut.is_ok() {
                    *inner.tail(dest) = before;
                    if dest == Which::Delivered {
                        inner.delivered_unsynced = unsynced_before;
                    }
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
        self.append_entries(inner, Which::Delivered, &bytes, true, Some(entries))?;
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

    /// Of the deliveries a rebuild found missing from the delivered file,
    /// those it still lacks (no record of the id in it since), split in
    /// two: the ones inside the window at this call, whose records belong
    /// there, and the others (the window ended, or retention is off),
    /// which are to be pruned.
    pub(super) fn still_lost(
        &self,
        inner: &Inner,
        lost: Vec<Lost>,
    ) -> Result<(Vec<Lost>, Vec<Lost>)> {
        if lost.is_empty() {
            return Ok(Default::default());
        }
        let retain = inner.meta.retain();
        let now = self.clock.now();
        let ix = inner.index()?;
        let (mut inside, mut ended) = (Vec::new(), Vec::new());
        for l in lost {
            if ix.delivered_loc(l.id)?.is_some() {
                continue;
            }
            match within_window(l.delivery.at, retain, now) {
                true => inside.push(l),
                false => ended.push(l),
            }
        }
        Ok((inside, ended))
    }

    /// Settle the delivered records a crash took from the tail of the
    /// delivered file (found by a rebuild of the index): the record of
    /// each delivery still inside the window is written back — its
    /// item's last `put` line in the main file with the delivery its
    /// `done` line tells, told in a notice — and the others get the
    /// `done` line that prunes them, as if they had been pruned before the
    /// crash: a window set later then cannot bring them back. One synced
    /// append. As upkeep: a failure (the main file changed since the
    /// rebuild, an I/O error) is told in a notice, not returned; the
    /// records stay missing until the next rebuild (`spool verify
    /// --repair`).
    pub(super) fn restore_lost(&self, inner: &mut Inner, lost: Vec<Lost>) {
        let restored = self.still_lost(inner, lost).and_then(|(inside, ended)| {
            if inside.is_empty() && ended.is_empty() {
                return Ok(0);
            }
            let locs: Vec<Loc> = inside
                .iter()
                .map(|l| Loc {
                    id: l.id,
                    off: l.off,
                    len: l.len,
                })
                .collect();
            let mut out = Vec::new();
            for (item, l) in self.items(inner, &locs)?.into_iter().zip(&inside) {
                if item.id != l.id {
                    return Err(Error::Internal(format!(
                        "item {} was read as item {}",
                        l.id, item.id
                    )));
                }
                let record = retained(item, l.delivery.at, l.delivery.evidence);
                format::write_delivered(&mut out, &record);
            }
            for l in &ended {
                format::write_done(&mut out, l.id);
            }
            self.append(inner, Which::Delivered, &out)?;
            Ok(inside.len())
        });
        let path = self.delivered_path.display();
        match restored {
            Ok(0) => {}
            Ok(n) => inner.notices.push(format!(
                "{path}: restored {n} delivered record(s) lost in a crash before they reached \
                 the disk (the main file's done lines tell them)"
            )),
            Err(e) => inner.notices.push(format!(
                "{path}: delivered records lost in a crash were not restored ({e}); \
                 `spool verify --repair` restores them"
            )),
        }
    }
}

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
