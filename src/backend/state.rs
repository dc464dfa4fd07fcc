//! The in-memory image of the memory backend, and the planning that the
//! memory and NDJSON backends share.
//!
//! Every mutation is split in two: a `plan_*`/`prepare_*` step that checks
//! the request against the current state and computes exactly what will
//! change, without changing anything, and an `apply`/`insert` step that
//! changes the state. The planning functions read the spool through
//! [`View`], which [`State`] implements for the memory backend and the
//! NDJSON backend's index implements over its files (see
//! `backend::file::index`): one rule, two stores. The NDJSON backend
//! writes and fsyncs the planned lines between the two steps and then
//! applies them to its index; the memory backend simply does both.

use super::identity::Merge;
use super::policy::{self, EnqueueStore, ImportKeys, ImportStore, Limit};
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, DeadLetter, DeliveredItem, Delivery, DepthLimit, EnqueueOptions, Enqueued,
    Evidence, Imported, Item, ItemId, NewItem, OnFull, PushState, QueueStats, Record, RecordState,
};
use crate::push::wire::Rejected;
use crate::time::Timestamp;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// How many of the highest ids [`State::delivered_is_late`] looks at.
const LATE_LOOKBACK: usize = 64;

/// Whether a delivered record at `at` is still inside the retention
/// window `retain` at `now` (never, when retention is off).
pub(crate) fn within_window(at: Timestamp, retain: Option<Duration>, now: Timestamp) -> bool {
    retain.is_some_and(|w| now.as_millis() < at.as_millis().saturating_add(w.as_millis() as i64))
}

/// What planning a mutation reads of a spool. Implemented by [`State`]
/// (everything in memory) and by the NDJSON backend's index (rows in a
/// SQLite file, payloads read from the spool file one line at a time).
pub(crate) trait View {
    /// A pending (or held) item, whole.
    fn pending_item(&self, id: ItemId) -> Result<Option<Item>>;
    /// `None` when `id` is not pending; else its push sequence number.
    fn pending_seq(&self, id: ItemId) -> Result<Option<Option<u64>>>;
    /// The pending item a non-empty key deduplicates to.
    fn key_owner(&self, key: &str) -> Result<Option<ItemId>>;
    /// The pending items a new item with coalesce key `ck` replaces
    /// ([`coalescible`]), in id order.
    fn coalescible(&self, ck: &str) -> Result<Vec<ItemId>>;
    /// Pending items, held ones included.
    fn depth(&self) -> Result<u64>;
    /// The highest id ever seen.
    fn high_water(&self) -> Result<ItemId>;
    /// The stored depth bound.
    fn max_depth(&self) -> Option<u64>;
    /// A dead letter, whole.
    fn dead_item(&self, id: ItemId) -> Result<Option<DeadLetter>>;
    /// `None` when `id` is not a dead letter; else its key.
    fn dead_key(&self, id: ItemId) -> Result<Option<String>>;
    /// The push bookkeeping.
    fn push(&self) -> Result<PushState>;
    /// In-flight `(seq, id)` with `after < seq <= upto`, in sequence order.
    fn in_flight(&self, after: u64, upto: u64) -> Result<Vec<(u64, ItemId)>>;
    /// A push client's `last_seq` (0 when unknown).
    fn client_last_seq(&self, client: &str) -> Result<u64>;
    /// The digest recorded for a client's number, if any.
    fn client_digest(&self, client: &str, seq: u64) -> Result<Option<String>>;
    /// Whether a client's number is recorded at all.
    fn client_recorded(&self, client: &str, seq: u64) -> Result<bool>;
    /// A client's unacknowledged rejects above `after`, ascending.
    fn client_rejects(&self, client: &str, after: u64) -> Result<Vec<Rejected>>;
}

impl View for State {
    fn pending_item(&self, id: ItemId) -> Result<Option<Item>> {
        Ok(self.pending.get(&id).cloned())
    }
    fn pending_seq(&self, id: ItemId) -> Result<Option<Option<u64>>> {
        Ok(self.pending.get(&id).map(|i| i.push_seq))
    }
    fn key_owner(&self, key: &str) -> Result<Option<ItemId>> {
        Ok(self.keys.get(key).copied())
    }
    fn coalescible(&self, ck: &str) -> Result<Vec<ItemId>> {
        Ok(self
            .pending
            .values()
            .filter(|p| coalescible(p, ck))
            .map(|p| p.id)
            .collect())
    }
    fn depth(&self) -> Result<u64> {
        Ok(self.pending.len() as u64)
    }
    fn high_water(&self) -> Result<ItemId> {
        Ok(self.high_water)
    }
    fn max_depth(&self) -> Option<u64> {
        self.max_depth
    }
    fn dead_item(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        Ok(self.dead.get(&id).cloned())
    }
    fn dead_key(&self, id: ItemId) -> Result<Option<String>> {
        Ok(self.dead.get(&id).map(|d| d.item.key.clone()))
    }
    fn push(&self) -> Result<PushState> {
        Ok(self.push.clone())
    }
    fn in_flight(&self, after: u64, upto: u64) -> Result<Vec<(u64, ItemId)>> {
        if upto <= after {
            return Ok(Vec::new());
        }
        Ok(self
            .in_flight
            .range(after + 1..=upto)
            .map(|(s, i)| (*s, *i))
            .collect())
    }
    fn client_last_seq(&self, client: &str) -> Result<u64> {
        Ok(self.receiver.last_seq(client))
    }
    fn client_digest(&self, client: &str, seq: u64) -> Result<Option<String>> {
        Ok(self.receiver.digest(client, seq))
    }
    fn client_recorded(&self, client: &str, seq: u64) -> Result<bool> {
        Ok(self
            .receiver
            .client(client)
            .is_some_and(|c| c.entries.contains_key(&seq)))
    }
    fn client_rejects(&self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        Ok(self.receiver.rejects(client, after))
    }
}

/// The push state after the in-flight items among `ids` leave the
/// pending set other than by an ack: their numbers become skips. `None`
/// when none of them is in flight.
pub(crate) fn push_after_removing(v: &impl View, ids: &[ItemId]) -> Result<Option<PushState>> {
    let mut push = v.push()?;
    let mut changed = false;
    for id in ids {
        if let Some(Some(seq)) = v.pending_seq(*id)? {
            if seq > push.acked && !push.skips.contains(&seq) {
                push.skips.push(seq);
                changed = true;
            }
        }
    }
    push.skips.sort_unstable();
    Ok(changed.then_some(push))
}

/// Refuse to hold an in-flight item (holding would stop the stream of
/// sequence numbers the receiver expects in order).
pub(crate) fn check_hold(v: &impl View, ids: &[ItemId]) -> Result<()> {
    check_hold_with(ids, |id| Ok(v.pending_seq(id)?.flatten()))
}

/// [`check_hold`] for any store: `seq_of` gives the push sequence number
/// of a pending item, if it has one.
pub(crate) fn check_hold_with(
    ids: &[ItemId],
    mut seq_of: impl FnMut(ItemId) -> Result<Option<u64>>,
) -> Result<()> {
    for &id in ids {
        if let Some(seq) = seq_of(id)? {
            return Err(Error::InvalidInput(format!(
                "item {id} is in flight to the push receiver (sequence {seq}); it cannot be held until the receiver acknowledges it"
            )));
        }
    }
    Ok(())
}

/// The items that assigning numbers to `ids` changes (each with its new
/// number), and the push state afterwards.
pub(crate) fn plan_assign(v: &impl View, ids: &[ItemId]) -> Result<(Vec<Item>, PushState)> {
    let mut push = v.push()?;
    let mut out: Vec<Item> = Vec::new();
    for id in ids {
        if out.iter().any(|i| i.id == *id) {
            continue;
        }
        let Some(item) = v.pending_item(*id)? else {
            continue;
        };
        if item.held || item.push_seq.is_some() {
            continue;
        }
        push.last_assigned = push
            .last_assigned
            .checked_add(1)
            .ok_or_else(|| Error::Internal("push sequence numbers exhausted".into()))?;
        let mut item = item;
        item.push_seq = Some(push.last_assigned);
        out.push(item);
    }
    Ok((out, push))
}

/// Decide what a cumulative ack for `last_seq` with `rejected` does.
pub(crate) fn plan_ack(
    v: &impl View,
    last_seq: u64,
    rejected: &[(u64, String)],
) -> Result<AckPlan> {
    let mut push = v.push()?;
    let last = last_seq.min(push.last_assigned);
    let mut plan = AckPlan::default();
    if last > push.acked {
        for (seq, id) in v.in_flight(push.acked, last)? {
            match rejected.iter().find(|(s, _)| *s == seq) {
                Some((_, reason)) => plan.rejected.push((id, reason.clone())),
                None => plan.delivered.push(id),
            }
        }
        push.acked = last;
        push.skips.retain(|s| *s > last);
    }
    plan.push = push;
    Ok(plan)
}

/// The in-flight items renumbered from 1 in their sequence order, and the
/// push state of a new client that has sent them.
pub(crate) fn plan_renumber(v: &impl View) -> Result<(Vec<Item>, PushState)> {
    let mut items = Vec::new();
    for (_, id) in v.in_flight(0, u64::MAX)? {
        if let Some(mut item) = v.pending_item(id)? {
            item.push_seq = Some(items.len() as u64 + 1);
            items.push(item);
        }
    }
    let push = PushState {
        last_assigned: items.len() as u64,
        acked: 0,
        skips: Vec::new(),
    };
    Ok((items, push))
}

/// The dead letter that dead-lettering `id` would create.
pub(crate) fn prepare_kill(
    v: &impl View,
    id: ItemId,
    last_error: &str,
    now: Timestamp,
) -> Result<Option<DeadLetter>> {
    let Some(mut item) = v.pending_item(id)? else {
        return Ok(None);
    };
    item.last_error = Some(last_error.to_string());
    // Holding means "replay, skip this"; a dead letter is never replayed,
    // so the flag does not follow it.
    item.held = false;
    Ok(Some(DeadLetter { item, dead_at: now }))
}

/// Check that requeueing `ids` is allowed: the stored bound holds and no
/// requeued key collides with a pending item or another requeued item.
pub(crate) fn check_requeue(v: &impl View, ids: &[ItemId]) -> Result<()> {
    check_requeue_with(
        &mut (),
        ids,
        |_, id| v.dead_key(id),
        |_, key| v.key_owner(key),
        |_| {
            v.max_depth()
                .map(|bound| Ok((bound, v.depth()?)))
                .transpose()
        },
    )
}

/// [`check_requeue`] for any store, read through `store` (so that a
/// backend can hand in its transaction): `dead_key` gives the key of a
/// dead letter, `key_owner` the pending item carrying a key, and `limit`
/// the stored bound with the depth, when the spool has a bound.
pub(crate) fn check_requeue_with<S: ?Sized>(
    store: &mut S,
    ids: &[ItemId],
    dead_key: impl Fn(&mut S, ItemId) -> Result<Option<String>>,
    key_owner: impl Fn(&mut S, &str) -> Result<Option<ItemId>>,
    limit: impl FnOnce(&mut S) -> Result<Option<(u64, u64)>>,
) -> Result<()> {
    let mut seen_keys: HashMap<String, ItemId> = HashMap::new();
    let mut seen_ids = std::collections::HashSet::new();
    let mut count = 0u64;
    for &id in ids {
        let Some(key) = dead_key(store, id)? else {
            continue;
        };
        if !seen_ids.insert(id) {
            continue;
        }
        count += 1;
        if key.is_empty() {
            continue;
        }
        if let Some(other) = key_owner(store, &key)? {
            return Err(Error::InvalidInput(format!(
                "cannot requeue dead letter {id}: pending item {other} already carries its key {key:?}"
            )));
        }
        if let Some(other) = seen_keys.insert(key.clone(), id) {
            return Err(Error::InvalidInput(format!(
                "cannot requeue dead letters {other} and {id} together: they carry the same key {key:?}"
            )));
        }
    }
    if let Some((bound, depth)) = limit(store)? {
        if count > 0 && depth.saturating_add(count) > bound {
            return Err(Error::QueueFull {
                max_depth: bound,
                depth,
            });
        }
    }
    Ok(())
}

/// The pending item that requeueing dead letter `id` would create.
pub(crate) fn prepare_requeue(v: &impl View, id: ItemId) -> Result<Option<Item>> {
    let Some(dl) = v.dead_item(id)? else {
        return Ok(None);
    };
    let mut item = dl.item;
    item.attempts = 0;
    item.next_retry_at = None;
    item.held = false;
    // Back in the stream, it is a new entry with a new number.
    item.push_seq = None;
    Ok(Some(item))
}

/// A pending item a new item with coalesce key `ck` replaces: same
/// coalesce key, never attempted, not in flight (SPEC §9).
pub(crate) fn coalescible(item: &Item, ck: &str) -> bool {
    item.coalesce_key.as_deref() == Some(ck) && item.attempts == 0 && item.push_seq.is_none()
}

/// A pending item the `drop-oldest` policy may evict: not held, not in
/// flight.
pub(crate) fn evictable(item: &Item) -> bool {
    !item.held && item.push_seq.is_none()
}

/// Pending items, dead letters, the key index and the id high-water mark.
#[derive(Debug, Default, Clone)]
pub(crate) struct State {
    pub pending: BTreeMap<ItemId, Item>,
    /// Non-empty keys of pending items: the dedup target of each key (the
    /// first pending item that carried it).
    pub keys: HashMap<String, ItemId>,
    /// Further pending items that carry a key already in `keys`. Only a
    /// reference file can hold such duplicates (spool never stores one);
    /// keeping them apart keeps removal O(log n) instead of a scan.
    pub shared_keys: HashMap<String, std::collections::BTreeSet<ItemId>>,
    pub dead: BTreeMap<ItemId, DeadLetter>,
    pub high_water: ItemId,
    pub max_depth: Option<u64>,
    /// The overflow policy.
    pub on_full: OnFull,
    /// Items ever evicted by `drop-oldest`.
    pub evicted_total: u64,
    /// The spool as a push client: numbers assigned, watermark, skips.
    pub push: PushState,
    /// In-flight pending items by push sequence number.
    pub in_flight: BTreeMap<u64, ItemId>,
    /// A uuid given by [`crate::Queue::regenerate_uuid`], when the backend
    /// keeps it here (the NDJSON backend keeps it with the push state, so
    /// that the new identity and the renumbering commit together).
    pub uuid: Option<String>,
    /// The spool as a push receiver: every client's state.
    pub receiver: crate::push::memory::PushLedger,
    /// When each client last pushed.
    pub receiver_at: HashMap<String, Timestamp>,
    /// The retention window for delivered items (SPEC §9).
    pub retain: Option<Duration>,
    /// Retained delivered items.
    pub delivered: BTreeMap<ItemId, DeliveredItem>,
    /// Non-empty keys of retained delivered items: the newest record
    /// that carried each.
    pub delivered_keys: HashMap<String, ItemId>,
    /// Retained records delivered out of id order ("late", see
    /// [`State::delivered_is_late`]): pruning takes them by time, the
    /// others in id order, as the durable backends do.
    pub delivered_late: std::collections::BTreeSet<ItemId>,
}

/// What acknowledging a push does, decided before anything changes.
#[derive(Debug, Default)]
pub(crate) struct AckPlan {
    /// The push state afterwards.
    pub push: PushState,
    /// Items delivered: removed.
    pub delivered: Vec<ItemId>,
    /// Items refused, with the receiver's reason: dead-lettered.
    pub rejected: Vec<(ItemId, String)>,
}

impl AttemptUpdate {
    /// Write this update into `item`.
    pub fn apply(&self, item: &mut Item) {
        item.attempts = self.attempts;
        item.next_retry_at = self.next_retry_at;
        item.last_error = self.last_error.clone();
    }
}

impl State {
    /// Put a pending item in place (a new item, a restored one, or a
    /// replacement of the same id), keeping the key index and the
    /// high-water mark right.
    pub fn insert_pending(&mut self, item: Item) {
        if let Some(old) = self.pending.get(&item.id) {
            let (id, key, seq) = (old.id, old.key.clone(), old.push_seq);
            self.unlink_key(id, &key);
            if let Some(seq) = seq {
                if self.in_flight.get(&seq) == Some(&id) {
                    self.in_flight.remove(&seq);
                }
            }
        }
        if !item.key.is_empty() {
            match self.keys.get(&item.key) {
                None => {
                    self.keys.insert(item.key.clone(), item.id);
                }
                Some(&first) if first != item.id => {
                    self.shared_keys
                        .entry(item.key.clone())
                        .or_default()
                        .insert(item.id);
                }
                Some(_) => {}
            }
        }
        self.high_water = self.high_water.max(item.id);
        if let Some(seq) = item.push_seq {
            self.in_flight.insert(seq, item.id);
        }
        self.pending.insert(item.id, item);
    }

    /// Remove a pending item, releasing its key.
    pub fn remove_pending(&mut self, id: ItemId) -> Option<Item> {
        let item = self.pending.remove(&id)?;
        self.unlink_key(id, &item.key);
        if let Some(seq) = item.push_seq {
            if self.in_flight.get(&seq) == Some(&id) {
                self.in_flight.remove(&seq);
            }
        }
        Some(item)
    }

    // --- push -----------------------------------------------------------

    /// In-flight items above `after`, in sequence order.
    pub fn in_flight_page(&self, after: u64, limit: usize) -> Vec<Item> {
        self.in_flight
            .range(after.saturating_add(1)..)
            .filter_map(|(_, id)| self.pending.get(id).cloned())
            .take(limit)
            .collect()
    }

    /// Forget that pending item `id` carries `key`. When it was the key's
    /// dedup target and another pending item shares the key, the oldest of
    /// those takes over.
    fn unlink_key(&mut self, id: ItemId, key: &str) {
        if key.is_empty() {
            return;
        }
        if self.keys.get(key) == Some(&id) {
            let next = self
                .shared_keys
                .get_mut(key)
                .and_then(|set| set.pop_first());
            match next {
                Some(other) => {
                    self.keys.insert(key.to_string(), other);
                }
                None => {
                    self.keys.remove(key);
                }
            }
        } else if let Some(set) = self.shared_keys.get_mut(key) {
            set.remove(&id);
        }
        if self.shared_keys.get(key).is_some_and(|s| s.is_empty()) {
            self.shared_keys.remove(key);
        }
    }

    /// Change a pending item in place; the key must not change.
    pub fn update_pending(&mut self, id: ItemId, f: impl FnOnce(&mut Item)) -> Option<&Item> {
        let item = self.pending.get_mut(&id)?;
        f(item);
        Some(item)
    }

    /// The bound that applies to an enqueue with `opts`.
    fn bound(&self, limit: DepthLimit) -> Option<u64> {
        match limit {
            DepthLimit::Stored => self.max_depth,
            DepthLimit::Override(b) => b,
        }
    }

    /// Enqueue `items` at `now` as one all-or-nothing step (SPEC §2, §9),
    /// item by item through [`policy::enqueue_one`]. Fails with
    /// [`Error::QueueFull`], changing nothing, when the new items do not
    /// fit.
    pub fn enqueue(
        &mut self,
        items: &[NewItem],
        opts: &EnqueueOptions,
        now: Timestamp,
    ) -> Result<Vec<Enqueued>> {
        for it in items {
            crate::item::check_key(&it.key)?;
        }
        let limit = Limit {
            bound: self.bound(opts.depth_limit),
            on_full: self.on_full,
            depth_before: self.pending.len() as u64,
        };
        let each = |st: &mut State| -> Result<Vec<Enqueued>> {
            let mut s = Enqueuing { st, now };
            items
                .iter()
                .map(|it| policy::enqueue_one(&mut s, Cow::Borrowed(it), &limit))
                .collect()
        };
        // A batch that can remove nothing can only fail at the bound,
        // before it removed anything: taking back what it stored undoes
        // it. Any other works on a copy.
        if self.on_full == OnFull::Reject && items.iter().all(|i| i.coalesce_key.is_none()) {
            let high_water = self.high_water;
            return each(self).inspect_err(|_| {
                let stored: Vec<ItemId> = self
                    .pending
                    .range(high_water.saturating_add(1)..)
                    .map(|(id, _)| *id)
                    .collect();
                for id in stored {
                    self.remove_pending(id);
                }
                self.high_water = high_water;
            });
        }
        let mut scratch = self.clone();
        let results = each(&mut scratch)?;
        *self = scratch;
        Ok(results)
    }

    // --- retention (SPEC §9) ----------------------------------------------

    /// The retained delivered item whose key `key` still deduplicates at
    /// `now`.
    pub fn delivered_owner(&self, key: &str, now: Timestamp) -> Option<ItemId> {
        let id = *self.delivered_keys.get(key)?;
        let d = self.delivered.get(&id)?;
        within_window(d.delivery.at, self.retain, now).then_some(id)
    }

    /// Remove delivered pending items at `now`, each with its evidence:
    /// retained when a window is set; then prune up to
    /// [`crate::item::PRUNE_BATCH`] expired records. Per id, whether it
    /// was pending.
    pub fn deliver(&mut self, done: &[(ItemId, Evidence)], now: Timestamp) -> Result<Vec<bool>> {
        let ids: Vec<ItemId> = done.iter().map(|d| d.0).collect();
        if let Some(push) = push_after_removing(&*self, &ids)? {
            self.push = push;
        }
        let out = done
            .iter()
            .map(|(id, evidence)| match self.remove_pending(*id) {
                Some(item) => {
                    if self.retain.is_some() {
                        self.insert_delivered(DeliveredItem {
                            item,
                            delivery: Delivery {
                                at: now,
                                evidence: *evidence,
                            },
                        });
                    }
                    true
                }
                None => false,
            })
            .collect();
        self.prune_delivered(now, crate::item::PRUNE_BATCH);
        Ok(out)
    }

    /// Keep a delivered record.
    pub fn insert_delivered(&mut self, mut d: DeliveredItem) {
        d.item.held = false;
        d.item.push_seq = None;
        d.item.next_retry_at = None;
        let id = d.item.id;
        self.high_water = self.high_water.max(id);
        if !d.item.key.is_empty() {
            let newer = self
                .delivered_keys
                .get(&d.item.key)
                .and_then(|o| self.delivered.get(o))
                .is_some_and(|o| o.delivery.at > d.delivery.at);
            if !newer {
                self.delivered_keys.insert(d.item.key.clone(), id);
            }
        }
        match self.delivered_is_late(id, d.delivery.at) {
            true => self.delivered_late.insert(id),
            false => self.delivered_late.remove(&id),
        };
        self.delivered.insert(id, d);
    }

    /// Whether a record of `id` delivered at `at` is late, out of id
    /// order: in order when its id is above every retained record's and
    /// the last record in order (looked for among the [`LATE_LOOKBACK`]
    /// highest ids) was not delivered after it. The rule of the durable
    /// backends (SQLite's `spool_delivered.late`, the NDJSON index's
    /// `delivered.late`): records in order have delivery times that
    /// never decrease with the id.
    fn delivered_is_late(&self, id: ItemId, at: Timestamp) -> bool {
        for (seen, (rid, r)) in self.delivered.iter().rev().enumerate() {
            if seen == 0 && *rid >= id {
                return true;
            }
            if !self.delivered_late.contains(rid) {
                return r.delivery.at > at;
            }
            if seen + 1 == LATE_LOOKBACK {
                return true;
            }
        }
        false
    }

    /// Delete up to `limit` delivered records whose window ended at `now`
    /// (the late ones oldest first, then the others in id order, as the
    /// durable backends do); how many.
    pub fn prune_delivered(&mut self, now: Timestamp, limit: usize) -> u64 {
        let ended = |d: &DeliveredItem| !within_window(d.delivery.at, self.retain, now);
        let mut late: Vec<(Timestamp, ItemId)> = self
            .delivered_late
            .iter()
            .filter_map(|id| self.delivered.get(id))
            .filter(|d| ended(d))
            .map(|d| (d.delivery.at, d.item.id))
            .collect();
        late.sort();
        let mut expired: Vec<ItemId> = late.into_iter().take(limit).map(|(_, id)| id).collect();
        for (id, d) in &self.delivered {
            if expired.len() >= limit {
                break;
            }
            if self.delivered_late.contains(id) {
                continue;
            }
            if !ended(d) {
                break;
            }
            expired.push(*id);
        }
        for id in &expired {
            self.delivered_late.remove(id);
            if let Some(d) = self.delivered.remove(id) {
                if self.delivered_keys.get(&d.item.key) == Some(id) {
                    self.delivered_keys.remove(&d.item.key);
                }
            }
        }
        expired.len() as u64
    }

    /// Retained delivered items after `after`, in id order.
    pub fn delivered_page(&self, after: ItemId, limit: usize) -> Vec<DeliveredItem> {
        self.delivered
            .range(after.saturating_add(1)..)
            .take(limit)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Pending items after `after`, in id order.
    pub fn page(&self, after: ItemId, limit: usize) -> Vec<Item> {
        self.pending
            .range(after.saturating_add(1)..)
            .take(limit)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Dead letters after `after`, in id order.
    pub fn dead_page(&self, after: ItemId, limit: usize) -> Vec<DeadLetter> {
        self.dead
            .range(after.saturating_add(1)..)
            .take(limit)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Move a pending item to the dead-letter set as `dl` describes.
    pub fn apply_kill(&mut self, dl: DeadLetter) {
        self.remove_pending(dl.item.id);
        self.high_water = self.high_water.max(dl.item.id);
        self.dead.insert(dl.item.id, dl);
    }

    /// Dead-letter a pending item at once.
    pub fn kill(&mut self, id: ItemId, last_error: &str, now: Timestamp) -> Option<DeadLetter> {
        let dl = prepare_kill(self, id, last_error, now).ok()??;
        self.apply_kill(dl.clone());
        Some(dl)
    }

    /// Move dead letter `item.id` back to pending as `item`.
    pub fn apply_requeue(&mut self, item: Item) {
        self.dead.remove(&item.id);
        self.insert_pending(item);
    }

    /// Requeue one dead letter at once (after [`check_requeue`]).
    pub fn requeue_one(&mut self, id: ItemId) -> Option<Item> {
        let item = prepare_requeue(self, id).ok()??;
        self.apply_requeue(item.clone());
        Some(item)
    }

    /// The keys of the dead letters and retained delivered records this
    /// spool holds now, for the import about to start ([`policy::import_lookup`]).
    pub fn import_keys(&self) -> ImportKeys {
        let mut keys = ImportKeys::default();
        for (id, d) in &self.dead {
            if !d.item.key.is_empty() {
                keys.dead.entry(d.item.key.clone()).or_insert(*id);
            }
        }
        for (id, d) in &self.delivered {
            if !d.item.key.is_empty() {
                keys.delivered.entry(d.item.key.clone()).or_insert(*id);
            }
        }
        keys
    }

    /// Import `records` through [`policy::import_records`], storing as it
    /// goes (the caller works on a copy for all-or-nothing).
    pub fn import(
        &mut self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
        merge: Option<&mut Merge>,
    ) -> Result<()> {
        let before = self.import_keys();
        let high_water = self.high_water;
        let mut s = Importing { st: self, before };
        policy::import_records(&mut s, high_water, records, each, merge).map(drop)
    }

    /// Store one planned import record.
    pub fn apply_record(&mut self, rec: Record) {
        match rec.state {
            RecordState::Dead => {
                self.high_water = self.high_water.max(rec.item.id);
                let dead_at = rec.dead_at.unwrap_or_default();
                self.dead.insert(
                    rec.item.id,
                    DeadLetter {
                        item: rec.item,
                        dead_at,
                    },
                );
            }
            RecordState::Pending | RecordState::Held => self.insert_pending(rec.item),
            RecordState::Delivered => {
                let delivery = rec.delivery.unwrap_or(Delivery {
                    at: Timestamp::default(),
                    evidence: Evidence::Done,
                });
                self.insert_delivered(DeliveredItem {
                    item: rec.item,
                    delivery,
                });
            }
        }
    }

    /// The counts `stats` reports.
    pub fn stats(&self, now: Timestamp) -> QueueStats {
        let mut s = QueueStats {
            depth: self.pending.len() as u64,
            dead_letters: self.dead.len() as u64,
            max_depth: self.max_depth,
            high_water: self.high_water,
            on_full: self.on_full,
            evicted_total: self.evicted_total,
            delivered_retained: self.delivered.len() as u64,
            retain: self.retain,
            ..QueueStats::default()
        };
        if let Some(first) = self.pending.values().next() {
            s.oldest_id = Some(first.id);
            s.oldest_enqueued_at = first.enqueued_at;
        }
        for it in self.pending.values() {
            if it.held {
                s.held += 1;
            }
            if it.next_retry_at.is_some_and(|t| t > now) {
                s.waiting += 1;
            }
            *s.attempts_histogram.entry(it.attempts).or_default() += 1;
        }
        s
    }
}

/// [`State`] as the storage of [`policy::enqueue_one`], at `now`.
struct Enqueuing<'a> {
    st: &'a mut State,
    now: Timestamp,
}

impl EnqueueStore for Enqueuing<'_> {
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        Ok(self.st.keys.get(key).copied())
    }

    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        Ok(self.st.delivered_owner(key, self.now))
    }

    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>> {
        let ids: Vec<ItemId> = self
            .st
            .pending
            .values()
            .filter(|p| coalescible(p, ck))
            .map(|p| p.id)
            .collect();
        for id in &ids {
            self.st.remove_pending(*id);
        }
        Ok(ids)
    }

    fn depth(&mut self) -> Result<u64> {
        Ok(self.st.pending.len() as u64)
    }

    fn oldest_evictable(&mut self) -> Result<Option<ItemId>> {
        Ok(self
            .st
            .pending
            .values()
            .find(|p| evictable(p))
            .map(|p| p.id))
    }

    fn evict(&mut self, id: ItemId, reason: &str) -> Result<()> {
        self.st.kill(id, reason, self.now);
        self.st.evicted_total += 1;
        Ok(())
    }

    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId> {
        let id = policy::next_id(self.st.high_water)?;
        self.st.insert_pending(Item::from_new(id, &it, self.now));
        Ok(id)
    }
}

/// [`State`] as the storage of [`policy::import_records`]; `before`: the
/// keys of its dead letters and retained records when the import began.
struct Importing<'a> {
    st: &'a mut State,
    before: ImportKeys,
}

impl ImportStore for Importing<'_> {
    fn dead_owner(&mut self, key: &str, _upto: ItemId) -> Result<Option<ItemId>> {
        Ok(self.before.dead.get(key).copied())
    }

    fn delivered_owner(&mut self, key: &str, _upto: ItemId) -> Result<Option<ItemId>> {
        Ok(self.before.delivered.get(key).copied())
    }

    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        Ok(self.st.keys.get(key).copied())
    }

    fn seq_in_use(&mut self, seq: u64) -> Result<bool> {
        Ok(self.st.in_flight.contains_key(&seq))
    }

    fn store(&mut self, rec: Record) -> Result<()> {
        self.st.apply_record(rec);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(id: ItemId, key: &str) -> Item {
        Item::new(id, b"p".to_vec(), key.into(), Timestamp::from_secs(1))
    }

    #[test]
    fn shared_keys_hand_over_to_the_oldest_remaining_item() {
        // Only a reference file can hold two pending items with one key.
        let mut st = State::default();
        for (id, key) in [(1, "k"), (2, "k"), (3, "k"), (4, "other")] {
            st.insert_pending(keyed(id, key));
        }
        assert_eq!(st.keys.get("k"), Some(&1));
        st.remove_pending(2);
        assert_eq!(st.keys.get("k"), Some(&1));
        st.remove_pending(1);
        assert_eq!(st.keys.get("k"), Some(&3));
        // Replacing item 3 with a new key releases "k" entirely.
        st.insert_pending(keyed(3, "renamed"));
        assert_eq!(st.keys.get("k"), None);
        assert_eq!(st.keys.get("renamed"), Some(&3));
        assert!(st.shared_keys.is_empty());
    }
}
