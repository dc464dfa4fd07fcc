//! The in-memory backend: thread-safe, nothing survives the process.
//!
//! It implements the full [`Queue`] contract, idempotency-key dedup
//! included (unlike the reference's `InMemoryOfflineQueue`, which never
//! dedups), so that it is a faithful model of the durable backends: the
//! property tests compare both durable backends against it.

use super::identity::{IdentityOutcome, Merge, SpoolHeader, Target};
use super::receive::Receive;
use super::state::{self, State};
use crate::error::Result;
use crate::item::{
    AttemptUpdate, ClientSummary, DeadLetter, DeliveredItem, EnqueueOptions, Enqueued, Evidence,
    Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats, Record,
};
use crate::push::receiver::ReceiveTxn;
use crate::queue::{BackendKind, Queue};
use crate::time::{system_clock, SharedClock, Timestamp};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// A spool that lives in memory.
#[derive(Debug)]
pub struct MemoryQueue {
    state: Mutex<State>,
    clock: SharedClock,
}

/// A copy of the spool as it is now, on the same clock: what a model of
/// a durable spool needs to compare a crashed operation's outcome with
/// both the state before it and the state after it.
impl Clone for MemoryQueue {
    fn clone(&self) -> Self {
        MemoryQueue {
            state: Mutex::new(self.lock().clone()),
            clock: self.clock.clone(),
        }
    }
}

impl Default for MemoryQueue {
    fn default() -> Self {
        MemoryQueue::new()
    }
}

impl MemoryQueue {
    /// An empty, unbounded spool on the system clock.
    pub fn new() -> MemoryQueue {
        MemoryQueue::with_clock(system_clock())
    }

    /// An empty, unbounded spool on `clock`.
    pub fn with_clock(clock: SharedClock) -> MemoryQueue {
        MemoryQueue {
            state: Mutex::new(State {
                uuid: Some(uuid::Uuid::new_v4().to_string()),
                ..State::default()
            }),
            clock,
        }
    }

    /// An empty spool with a depth bound.
    pub fn with_max_depth(max_depth: Option<u64>, clock: SharedClock) -> MemoryQueue {
        let q = MemoryQueue::with_clock(clock);
        q.lock().max_depth = max_depth;
        q
    }

    /// What this spool keeps as a push receiver, per client (a copy):
    /// for tests and embedders that look at the receiver's bookkeeping.
    pub fn push_ledger(&self) -> crate::push::PushLedger {
        self.lock().receiver.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Queue for MemoryQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::Memory
    }

    fn enqueue_batch(&self, items: &[NewItem], opts: &EnqueueOptions) -> Result<Vec<Enqueued>> {
        let now = self.clock.now();
        let mut st = self.lock();
        let out = st.enqueue(items, opts, now)?;
        st.prune_delivered(now, crate::item::PRUNE_BATCH);
        Ok(out)
    }

    fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>> {
        Ok(self.lock().page(after, limit))
    }

    fn get(&self, id: ItemId) -> Result<Option<Item>> {
        Ok(self.lock().pending.get(&id).cloned())
    }

    fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        Ok(self
            .lock()
            .pending
            .values()
            .find(|it| it.group.as_deref() == Some(group))
            .map(|it| it.id))
    }

    fn deliver(&self, done: &[(ItemId, Evidence)]) -> Result<Vec<bool>> {
        let now = self.clock.now();
        self.lock().deliver(done, now)
    }

    fn retain(&self) -> Result<Option<Duration>> {
        Ok(self.lock().retain)
    }

    fn set_retain(&self, window: Option<Duration>) -> Result<()> {
        self.lock().retain = window;
        Ok(())
    }

    fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredItem>> {
        Ok(self.lock().delivered_page(after, limit))
    }

    fn delivered_get(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        Ok(self.lock().delivered.get(&id).cloned())
    }

    fn prune_delivered(&self, limit: usize) -> Result<u64> {
        let now = self.clock.now();
        Ok(self.lock().prune_delivered(now, limit))
    }

    fn set_attempts(&self, id: ItemId, attempts: u32) -> Result<bool> {
        Ok(self
            .lock()
            .update_pending(id, |it| it.attempts = attempts)
            .is_some())
    }

    fn record_attempt(&self, id: ItemId, update: &AttemptUpdate) -> Result<bool> {
        Ok(self
            .lock()
            .update_pending(id, |it| update.apply(it))
            .is_some())
    }

    fn set_held(&self, ids: &[ItemId], held: bool) -> Result<Vec<bool>> {
        let mut st = self.lock();
        if held {
            state::check_hold(&*st, ids)?;
        }
        Ok(ids
            .iter()
            .map(|id| st.update_pending(*id, |it| it.held = held).is_some())
            .collect())
    }

    fn size(&self) -> Result<u64> {
        Ok(self.lock().pending.len() as u64)
    }

    fn max_depth(&self) -> Result<Option<u64>> {
        Ok(self.lock().max_depth)
    }

    fn on_full(&self) -> Result<OnFull> {
        Ok(self.lock().on_full)
    }

    fn set_on_full(&self, policy: OnFull) -> Result<()> {
        self.lock().on_full = policy;
        Ok(())
    }

    fn set_max_depth(&self, bound: Option<u64>) -> Result<()> {
        self.lock().max_depth = bound;
        Ok(())
    }

    fn uuid(&self) -> Result<String> {
        Ok(self.lock().uuid.clone().unwrap_or_default())
    }

    fn high_water(&self) -> Result<ItemId> {
        Ok(self.lock().high_water)
    }

    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool> {
        let now = self.clock.now();
        let mut st = self.lock();
        if let Some(push) = state::push_after_removing(&*st, &[id])? {
            st.push = push;
        }
        Ok(st.kill(id, last_error, now).is_some())
    }

    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        Ok(self.lock().dead_page(after, limit))
    }

    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        Ok(self.lock().dead.get(&id).cloned())
    }

    fn dead_count(&self) -> Result<u64> {
        Ok(self.lock().dead.len() as u64)
    }

    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        let mut st = self.lock();
        state::check_requeue(&*st, ids)?;
        Ok(ids.iter().map(|id| st.requeue_one(*id).is_some()).collect())
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        let mut st = self.lock();
        Ok(ids.iter().map(|id| st.dead.remove(id).is_some()).collect())
    }

    fn import_stream(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<()> {
        let mut st = self.lock();
        // Work on a copy: the import is all or nothing.
        let mut next = st.clone();
        next.import(records, each, None)?;
        *st = next;
        Ok(())
    }

    fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        Ok(self.lock().stats(now))
    }

    fn push_state(&self) -> Result<PushState> {
        Ok(self.lock().push.clone())
    }

    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>> {
        Ok(self.lock().in_flight_page(after_seq, limit))
    }

    fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>> {
        let mut st = self.lock();
        let (items, push) = state::plan_assign(&*st, ids)?;
        let out = items
            .iter()
            .map(|i| (i.id, i.push_seq.unwrap_or_default()))
            .collect();
        for item in items {
            st.insert_pending(item);
        }
        st.push = push;
        Ok(out)
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        let now = self.clock.now();
        let mut st = self.lock();
        let plan = state::plan_ack(&*st, last_seq, rejected)?;
        let evidence = Evidence::Push(plan.push.acked);
        for id in &plan.delivered {
            if let Some(item) = st.remove_pending(*id) {
                if st.retain.is_some() {
                    st.insert_delivered(crate::item::DeliveredItem {
                        item,
                        delivery: crate::item::Delivery { at: now, evidence },
                    });
                }
            }
        }
        for (id, reason) in &plan.rejected {
            st.kill(*id, reason, now);
        }
        st.push = plan.push;
        // Expired records go in the commit, as with every delivery.
        st.prune_delivered(now, crate::item::PRUNE_BATCH);
        Ok(PushAck {
            acked: st.push.acked,
            delivered: plan.delivered,
            rejected: plan.rejected.into_iter().map(|(id, _)| id).collect(),
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        let mut st = self.lock();
        let (items, push) = state::plan_renumber(&*st)?;
        st.in_flight.clear();
        for item in items {
            st.insert_pending(item);
        }
        st.push = push;
        let uuid = uuid::Uuid::new_v4().to_string();
        st.uuid = Some(uuid.clone());
        Ok(uuid)
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let now = self.clock.now();
        let mut st = self.lock();
        let mut rx = Receive::new(&*st, now)?;
        f(&mut rx)?;
        let changes = rx.finish();
        st.apply_receive(changes);
        Ok(())
    }

    fn push_clients(&self) -> Result<Vec<ClientSummary>> {
        Ok(self.lock().client_summaries())
    }

    fn import_with_identity(
        &self,
        header: &SpoolHeader,
        adopt: bool,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<IdentityOutcome> {
        let mut st = self.lock();
        // Work on a copy: the import is all or nothing.
        let mut next = st.clone();
        let mut merge = Merge::begin(
            Target {
                uuid: next.uuid.clone().unwrap_or_default(),
                push: next.push.clone(),
                pending: next.pending.len() as u64,
                dead: next.dead.len() as u64,
            },
            header,
            adopt,
        )?;
        if merge.push.acked > merge.old_acked {
            let unnumber: Vec<(u64, ItemId)> = next
                .in_flight
                .range(merge.old_acked + 1..=merge.push.acked)
                .map(|(s, id)| (*s, *id))
                .collect();
            for (seq, id) in unnumber {
                next.in_flight.remove(&seq);
                next.update_pending(id, |it| it.push_seq = None);
            }
        }
        next.import(records, each, Some(&mut merge))?;
        next.push = merge.push.clone();
        if let Some(uuid) = merge.new_uuid.take() {
            next.uuid = Some(uuid);
        }
        *st = next;
        Ok(merge.outcome)
    }
}
