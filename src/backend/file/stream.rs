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
pub(super) use self::out::OwnRows;
use self::out::{BatchOut, Lines};

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
            let file = own_handle(inner.main.as_ref(), &q.path)?.ok_or_else(super::no_handle)?;
            let dead_file = own_handle(inner.dead.as_ref(), &q.dead_path)?;
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
            let main_file =
                own_handle(inner.main.as_ref(), &q.path)?.ok_or_else(super::no_handle)?;
            let dead_file = own_handle(inner.dead.as_ref(), &q.dead_path)?;
            let delivered_file = own_handle(inner.delivered.as_ref(), &q.delivered_path)?;
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

/// A handle of its own on the open file `t` (at `path`), for a batch's
/// writer.
fn own_handle(t: Option<&super::Tracked>, path: &std::path::Path) -> Result<Option<std::fs::File>> {
    t.map(|t| t.file.try_clone().map_err(|e| Error::io(path, "open", e)))
        .transpose()
}
