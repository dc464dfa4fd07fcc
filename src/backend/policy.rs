//! The queue rules that decide what an enqueue and an import do, written
//! once (SPEC §2, §3, §9).
//!
//! Each backend implements a handful of storage primitives — who owns a
//! key, which items a coalesce key replaces, the oldest item `drop-oldest`
//! may evict, store this — over its own storage ([`EnqueueStore`],
//! [`ImportStore`]), inside its own all-or-nothing write (a SQLite or
//! PostgreSQL transaction, an NDJSON batch, a copy of the memory state),
//! and calls [`enqueue_one`] or [`import_records`], which hold the order
//! the rules apply in. A new rule is written here, once; a backend adds at
//! most a primitive.
//!
//! Batches that neither coalesce nor evict take faster paths in the
//! SQLite, PostgreSQL and NDJSON backends (lookups and inserts many rows
//! at a time); they are [`enqueue_one`] specialised to that case — dedup,
//! retained-key dedup, the bound, insert — and the conformance suite and
//! the simulator hold every backend to the same answers.

use crate::error::{Error, Result};
use crate::item::OnFull;
use crate::item::{Enqueued, Imported, ItemId, NewItem, Record, RecordState};
use crate::time::Timestamp;
use std::borrow::Cow;
use std::collections::HashMap;

use super::identity::Merge;

/// The storage primitives of an enqueue, inside one all-or-nothing write.
pub(crate) trait EnqueueStore {
    /// The pending item that carries the (non-empty) key `key`, if any:
    /// the dedup target (items stored earlier in this write included).
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>>;
    /// The retained delivered item whose key `key` still deduplicates,
    /// inside the retention window (SPEC §9).
    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>>;
    /// Remove the pending items a new item with coalesce key `ck`
    /// replaces ([`super::state::coalescible`]); their ids, ascending.
    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>>;
    /// How many items are pending now.
    fn depth(&mut self) -> Result<u64>;
    /// The oldest pending item `drop-oldest` may evict
    /// ([`super::state::evictable`]).
    fn oldest_evictable(&mut self) -> Result<Option<ItemId>>;
    /// Move pending item `id` (the last [`EnqueueStore::oldest_evictable`]
    /// answer) to the dead letters with `reason`, counting an eviction.
    fn evict(&mut self, id: ItemId, reason: &str) -> Result<()>;
    /// Store `it` as a new pending item with the next id; that id.
    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId>;
}

/// The depth bound an enqueue meets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limit {
    /// The bound (stored or given); `None`: unbounded.
    pub bound: Option<u64>,
    /// What a full spool does.
    pub on_full: OnFull,
    /// The depth when the write began, for the error.
    pub depth_before: u64,
}

/// Enqueue one item (SPEC §2, §9): a pending item with its key is a dedup
/// hit, then a retained delivered item with its key; otherwise the items
/// it coalesces go, then, while the spool is at its bound, `drop-oldest`
/// evicts the oldest evictable item (or the enqueue fails with
/// [`Error::QueueFull`], and the caller's write rolls back), and the item
/// is stored under the next id.
pub(crate) fn enqueue_one<S: EnqueueStore + ?Sized>(
    s: &mut S,
    it: Cow<'_, NewItem>,
    limit: &Limit,
) -> Result<Enqueued> {
    if !it.key.is_empty() {
        if let Some(id) = s.key_owner(&it.key)? {
            return Ok(Enqueued::dedup(id));
        }
        if let Some(id) = s.delivered_owner(&it.key)? {
            return Ok(Enqueued::delivered(id));
        }
    }
    let mut e = Enqueued::default();
    if let Some(ck) = &it.coalesce_key {
        e.replaced = s.coalesce(ck)?;
    }
    if let Some(bound) = limit.bound {
        while s.depth()? >= bound {
            let victim = match limit.on_full {
                OnFull::Reject => None,
                OnFull::DropOldest => s.oldest_evictable()?,
            };
            let Some(victim) = victim else {
                return Err(Error::QueueFull {
                    max_depth: bound,
                    depth: limit.depth_before,
                });
            };
            s.evict(victim, &OnFull::eviction_error(bound))?;
            e.evicted.push(victim);
        }
    }
    e.id = s.insert(it)?;
    Ok(e)
}

/// The storage primitives of an import, inside one all-or-nothing write.
pub(crate) trait ImportStore {
    /// The lowest id up to `upto` of a dead letter with key `key`.
    fn dead_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>>;
    /// The lowest id up to `upto` of a retained delivered record with key
    /// `key`.
    fn delivered_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>>;
    /// The pending item with key `key` (records this import stored
    /// included).
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>>;
    /// Whether push number `seq` is an in-flight item's already.
    fn seq_in_use(&mut self, seq: u64) -> Result<bool>;
    /// Store `rec`, renumbered and normalised by [`import_record`].
    fn store(&mut self, rec: Record) -> Result<()>;
    /// The highest id the store can keep as it is.
    fn max_id(&self) -> ItemId {
        ItemId::MAX
    }
}

/// Import `records` into a spool whose high-water mark is `high_water`
/// (SPEC §3), telling `each` what became of every record: a dead or
/// delivered record whose key a dead letter or retained record of the
/// spool already carried is a dedup hit ([`import_lookup`]), as is a
/// pending or held record whose key a pending item carries; any other
/// keeps its id when it is above the high-water mark, else gets the next
/// one. With `merge` (an export's spool header), pending records may keep
/// their push numbers (see [`super::identity`]). The new high-water mark.
pub(crate) fn import_records<S: ImportStore + ?Sized>(
    s: &mut S,
    high_water: ItemId,
    records: &mut dyn Iterator<Item = Result<Record>>,
    each: &mut dyn FnMut(&Record, Imported),
    mut merge: Option<&mut Merge>,
) -> Result<ItemId> {
    let mut hw = high_water;
    let dedup = |id| Imported {
        id,
        kept_id: false,
        deduplicated: true,
    };
    for r in records {
        let r = r?;
        crate::item::check_key(&r.item.key)?;
        // Records this import stored have ids above `high_water`.
        let found = match import_lookup(&r) {
            Some(ImportLookup::Dead(key)) => s.dead_owner(key, high_water)?,
            Some(ImportLookup::Delivered(key)) => s.delivered_owner(key, high_water)?,
            None => None,
        };
        if let Some(id) = found {
            each(&r, dedup(id));
            continue;
        }
        let live = matches!(r.state, RecordState::Pending | RecordState::Held);
        if live && !r.item.key.is_empty() {
            if let Some(id) = s.key_owner(&r.item.key)? {
                each(&r, dedup(id));
                continue;
            }
        }
        let (imported, mut rec) = import_record(&r, &mut hw, s.max_id())?;
        if let Some(m) = merge.as_deref_mut() {
            rec.item.push_seq = m.seq_for(&r, |seq| s.seq_in_use(seq))?;
        }
        s.store(rec)?;
        each(&r, imported);
    }
    Ok(hw)
}

/// The keys of the dead letters and of the retained delivered records a
/// spool held when an import started: each key with the lowest id that
/// carries it ([`import_lookup`]).
#[derive(Debug, Default)]
pub(crate) struct ImportKeys {
    pub dead: HashMap<String, ItemId>,
    pub delivered: HashMap<String, ItemId>,
}

/// The dedup rule of an import for dead and delivered records (SPEC §3:
/// importing the same export twice adds nothing twice): a dead record
/// whose non-empty key a dead letter of the spool already carries, or a
/// delivered record whose non-empty key a retained delivered record
/// already carries, is a dedup hit on that record (the lowest id with the
/// key). Only what the spool held before the import counts — an export
/// may hold several dead letters with one key (each enqueue after a death
/// is a new item), and the first import keeps them all. Pending and held
/// records dedup against pending keys, as enqueues do; that is the
/// caller's. `None` for a record without a key: nothing to look up.
pub(crate) fn import_lookup(r: &Record) -> Option<ImportLookup<'_>> {
    if r.item.key.is_empty() {
        return None;
    }
    match r.state {
        RecordState::Dead => Some(ImportLookup::Dead(&r.item.key)),
        RecordState::Delivered => Some(ImportLookup::Delivered(&r.item.key)),
        RecordState::Pending | RecordState::Held => None,
    }
}

/// Where [`import_lookup`] looks for a record's key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ImportLookup<'a> {
    /// Among the dead letters.
    Dead(&'a str),
    /// Among the retained delivered records.
    Delivered(&'a str),
}

/// The id after the high-water mark `hw`.
pub(crate) fn next_id(hw: ItemId) -> Result<ItemId> {
    hw.checked_add(1)
        .ok_or_else(|| Error::Internal("item ids exhausted".into()))
}

/// What importing `r` does given the high-water mark `hw` (raised by each
/// record kept) and the highest id the spool can keep (`max_id`): its id
/// in this spool and whether it kept its own, and the
/// record to store, normalised as every backend stores it. Dedup is the
/// caller's (it knows which keys the batch has stored so far).
pub(crate) fn import_record(
    r: &Record,
    hw: &mut ItemId,
    max_id: ItemId,
) -> Result<(Imported, Record)> {
    let (id, kept) = if r.item.id > *hw && r.item.id <= max_id {
        (r.item.id, true)
    } else {
        (next_id(*hw)?, false)
    };
    *hw = id;
    let mut rec = r.clone();
    rec.item.id = id;
    // Enqueue times have second precision in every backend.
    rec.item.enqueued_at = rec
        .item
        .enqueued_at
        .map(|t| Timestamp::from_secs(t.as_secs()));
    rec.item.held = r.state == RecordState::Held;
    // Push numbers belong to the exporting spool's stream.
    rec.item.push_seq = None;
    if r.state == RecordState::Dead && rec.dead_at.is_none() {
        return Err(Error::InvalidInput(format!(
            "dead record {} has no dead_at",
            r.item.id
        )));
    }
    if r.state == RecordState::Delivered {
        if rec.delivery.is_none() {
            return Err(Error::InvalidInput(format!(
                "delivered record {} has no delivered_at",
                r.item.id
            )));
        }
        rec.item.held = false;
        rec.item.next_retry_at = None;
    }
    Ok((
        Imported {
            id,
            kept_id: kept,
            deduplicated: false,
        },
        rec,
    ))
}
