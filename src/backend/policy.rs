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
use std::borrow::Cow;

use super::identity::Merge;
use super::state::{import_lookup, import_record, ImportLookup};

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
