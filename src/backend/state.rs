//! The in-memory image of a spool, shared by the memory backend and the
//! NDJSON backend.
//!
//! Every mutation is split in two: a `plan_*`/`prepare_*` step that checks
//! the request against the current state and computes exactly what will
//! change, without changing anything, and an `apply`/`insert` step that
//! changes the state. The NDJSON backend writes and fsyncs the planned
//! records between the two steps, so its memory never runs ahead of its
//! file; the memory backend simply does both.

use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, DeadLetter, DepthLimit, EnqueueOptions, Enqueued, Imported, Item, ItemId,
    NewItem, PushState, QueueStats, Record, RecordState,
};
use crate::time::Timestamp;
use std::collections::{BTreeMap, HashMap};

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

    /// The push state after the in-flight items among `ids` leave the
    /// pending set other than by an ack: their numbers become skips.
    /// `None` when none of them is in flight.
    pub fn push_after_removing(&self, ids: &[ItemId]) -> Option<PushState> {
        let mut push = self.push.clone();
        let mut changed = false;
        for id in ids {
            if let Some(seq) = self.pending.get(id).and_then(|i| i.push_seq) {
                if seq > push.acked && !push.skips.contains(&seq) {
                    push.skips.push(seq);
                    changed = true;
                }
            }
        }
        push.skips.sort_unstable();
        changed.then_some(push)
    }

    /// Refuse to hold an in-flight item (holding would stop the stream of
    /// sequence numbers the receiver expects in order).
    pub fn check_hold(&self, ids: &[ItemId]) -> Result<()> {
        for id in ids {
            if let Some(seq) = self.pending.get(id).and_then(|i| i.push_seq) {
                return Err(Error::InvalidInput(format!(
                    "item {id} is in flight to the push receiver (sequence {seq}); it cannot be held until the receiver acknowledges it"
                )));
            }
        }
        Ok(())
    }

    /// In-flight items above `after`, in sequence order.
    pub fn in_flight_page(&self, after: u64, limit: usize) -> Vec<Item> {
        self.in_flight
            .range(after.saturating_add(1)..)
            .filter_map(|(_, id)| self.pending.get(id).cloned())
            .take(limit)
            .collect()
    }

    /// The items that assigning numbers to `ids` changes (each with its
    /// new number), and the push state afterwards.
    pub fn plan_assign(&self, ids: &[ItemId]) -> Result<(Vec<Item>, PushState)> {
        let mut push = self.push.clone();
        let mut out: Vec<Item> = Vec::new();
        for id in ids {
            let Some(item) = self.pending.get(id) else {
                continue;
            };
            if item.held || item.push_seq.is_some() || out.iter().any(|i| i.id == *id) {
                continue;
            }
            push.last_assigned = push
                .last_assigned
                .checked_add(1)
                .ok_or_else(|| Error::Internal("push sequence numbers exhausted".into()))?;
            let mut item = item.clone();
            item.push_seq = Some(push.last_assigned);
            out.push(item);
        }
        Ok((out, push))
    }

    /// Decide what a cumulative ack for `last_seq` with `rejected` does.
    pub fn plan_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> AckPlan {
        let mut push = self.push.clone();
        let last = last_seq.min(push.last_assigned);
        let mut plan = AckPlan::default();
        if last > push.acked {
            for (&seq, &id) in self.in_flight.range(push.acked + 1..=last) {
                match rejected.iter().find(|(s, _)| *s == seq) {
                    Some((_, reason)) => plan.rejected.push((id, reason.clone())),
                    None => plan.delivered.push(id),
                }
            }
            push.acked = last;
            push.skips.retain(|s| *s > last);
        }
        plan.push = push;
        plan
    }

    /// The in-flight items renumbered from 1 in their sequence order, and
    /// the push state of a new client that has sent them.
    pub fn plan_renumber(&self) -> (Vec<Item>, PushState) {
        let mut items = Vec::with_capacity(self.in_flight.len());
        for (n, (_, id)) in self.in_flight.iter().enumerate() {
            if let Some(item) = self.pending.get(id) {
                let mut item = item.clone();
                item.push_seq = Some(n as u64 + 1);
                items.push(item);
            }
        }
        let push = PushState {
            last_assigned: items.len() as u64,
            acked: 0,
            skips: Vec::new(),
        };
        (items, push)
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

    /// Decide what enqueueing `items` at `now` does: per item, a dedup hit
    /// or a new id; and the new items themselves. Fails with
    /// [`Error::QueueFull`] when the new items do not fit.
    pub fn plan_enqueue(
        &self,
        items: &[NewItem],
        opts: &EnqueueOptions,
        now: Timestamp,
    ) -> Result<(Vec<Enqueued>, Vec<Item>)> {
        let mut results = Vec::with_capacity(items.len());
        let mut fresh: Vec<Item> = Vec::new();
        let mut batch_keys: HashMap<&str, ItemId> = HashMap::new();
        let mut next = self.high_water;
        for it in items {
            if !it.key.is_empty() {
                if let Some(&id) = self
                    .keys
                    .get(&it.key)
                    .or_else(|| batch_keys.get(it.key.as_str()))
                {
                    results.push(Enqueued {
                        id,
                        deduplicated: true,
                    });
                    continue;
                }
            }
            next = next
                .checked_add(1)
                .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
            if !it.key.is_empty() {
                batch_keys.insert(&it.key, next);
            }
            fresh.push(Item::new(next, it.payload.clone(), it.key.clone(), now));
            results.push(Enqueued {
                id: next,
                deduplicated: false,
            });
        }
        if let Some(bound) = self.bound(opts.depth_limit) {
            let depth = self.pending.len() as u64;
            if !fresh.is_empty() && depth + fresh.len() as u64 > bound {
                return Err(Error::QueueFull {
                    max_depth: bound,
                    depth,
                });
            }
        }
        Ok((results, fresh))
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

    /// The dead letter that dead-lettering `id` would create.
    pub fn prepare_kill(&self, id: ItemId, last_error: &str, now: Timestamp) -> Option<DeadLetter> {
        let mut item = self.pending.get(&id)?.clone();
        item.last_error = Some(last_error.to_string());
        // Holding means "replay, skip this"; a dead letter is never
        // replayed, so the flag does not follow it.
        item.held = false;
        Some(DeadLetter { item, dead_at: now })
    }

    /// Move a pending item to the dead-letter set as `dl` describes.
    pub fn apply_kill(&mut self, dl: DeadLetter) {
        self.remove_pending(dl.item.id);
        self.high_water = self.high_water.max(dl.item.id);
        self.dead.insert(dl.item.id, dl);
    }

    /// Dead-letter a pending item at once.
    pub fn kill(&mut self, id: ItemId, last_error: &str, now: Timestamp) -> Option<DeadLetter> {
        let dl = self.prepare_kill(id, last_error, now)?;
        self.apply_kill(dl.clone());
        Some(dl)
    }

    /// Check that requeueing `ids` is allowed: the stored bound holds and
    /// no requeued key collides with a pending item or another requeued
    /// item.
    pub fn check_requeue(&self, ids: &[ItemId]) -> Result<()> {
        let mut seen_keys: HashMap<&str, ItemId> = HashMap::new();
        let mut seen_ids = std::collections::HashSet::new();
        let mut count = 0u64;
        for id in ids {
            let Some(dl) = self.dead.get(id) else {
                continue;
            };
            if !seen_ids.insert(*id) {
                continue;
            }
            count += 1;
            let key = dl.item.key.as_str();
            if key.is_empty() {
                continue;
            }
            if let Some(other) = self.keys.get(key) {
                return Err(Error::InvalidInput(format!(
                    "cannot requeue dead letter {id}: pending item {other} already carries its key {key:?}"
                )));
            }
            if let Some(other) = seen_keys.insert(key, *id) {
                return Err(Error::InvalidInput(format!(
                    "cannot requeue dead letters {other} and {id} together: they carry the same key {key:?}"
                )));
            }
        }
        if let Some(bound) = self.max_depth {
            let depth = self.pending.len() as u64;
            if count > 0 && depth + count > bound {
                return Err(Error::QueueFull {
                    max_depth: bound,
                    depth,
                });
            }
        }
        Ok(())
    }

    /// The pending item that requeueing dead letter `id` would create.
    pub fn prepare_requeue(&self, id: ItemId) -> Option<Item> {
        let mut item = self.dead.get(&id)?.item.clone();
        item.attempts = 0;
        item.next_retry_at = None;
        item.held = false;
        // Back in the stream, it is a new entry with a new number.
        item.push_seq = None;
        Some(item)
    }

    /// Move dead letter `item.id` back to pending as `item`.
    pub fn apply_requeue(&mut self, item: Item) {
        self.dead.remove(&item.id);
        self.insert_pending(item);
    }

    /// Requeue one dead letter at once (after [`State::check_requeue`]).
    pub fn requeue_one(&mut self, id: ItemId) -> Option<Item> {
        let item = self.prepare_requeue(id)?;
        self.apply_requeue(item.clone());
        Some(item)
    }

    /// Decide what importing `records` does: per record, its id in this
    /// spool, whether it kept its own, whether it was a dedup hit; and the
    /// records to store, renumbered.
    pub fn plan_import(&self, records: &[Record]) -> Result<(Vec<Imported>, Vec<Record>)> {
        let mut out = Vec::with_capacity(records.len());
        let mut store = Vec::new();
        let mut hw = self.high_water;
        let mut batch_keys: HashMap<&str, ItemId> = HashMap::new();
        for r in records {
            let live = r.state != RecordState::Dead;
            if live && !r.item.key.is_empty() {
                if let Some(&id) = self
                    .keys
                    .get(&r.item.key)
                    .or_else(|| batch_keys.get(r.item.key.as_str()))
                {
                    out.push(Imported {
                        id,
                        kept_id: false,
                        deduplicated: true,
                    });
                    continue;
                }
            }
            let (id, kept) = if r.item.id > hw {
                (r.item.id, true)
            } else {
                (
                    hw.checked_add(1)
                        .ok_or_else(|| Error::Internal("item ids exhausted".into()))?,
                    false,
                )
            };
            hw = id;
            if live && !r.item.key.is_empty() {
                batch_keys.insert(&r.item.key, id);
            }
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
            store.push(rec);
            out.push(Imported {
                id,
                kept_id: kept,
                deduplicated: false,
            });
        }
        Ok((out, store))
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
        }
    }

    /// The counts `stats` reports.
    pub fn stats(&self, now: Timestamp) -> QueueStats {
        let mut s = QueueStats {
            depth: self.pending.len() as u64,
            dead_letters: self.dead.len() as u64,
            max_depth: self.max_depth,
            high_water: self.high_water,
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
