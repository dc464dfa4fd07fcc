//! Push state in memory: [`PushLedger`] (the per-client part of
//! [`ReceiveTxn`], for the memory queue backend to embed) and
//! [`MemoryReceiver`] (a whole receiving spool in memory, for tests).
//!
//! Both check the storage contract they are given: recording a number
//! twice, or moving a client's `last_seq` backwards, is an
//! [`Error::Internal`] — so a test driving [`super::receiver::apply_push`]
//! over them fails when the rule would break an invariant.

use super::receiver::{EntryRecord, ReceiveRead, ReceiveTxn};
use super::wire::Rejected;
use crate::error::{Error, Result};
use crate::item::{Enqueued, ItemId, NewItem};
use std::collections::BTreeMap;

/// What a receiver keeps about one processed item entry (a skip entry
/// leaves nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Applied, with its digest.
    Applied {
        /// The digest.
        digest: String,
    },
    /// Refused.
    Rejected {
        /// The digest, when it was verified.
        digest: Option<String>,
        /// Why.
        reason: String,
    },
}

/// One client's push state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientLedger {
    /// The highest number processed.
    pub last_seq: u64,
    /// The processed item entries: every applied number, and every
    /// refused one with a digest or not acknowledged yet.
    pub entries: BTreeMap<u64, Recorded>,
    /// Rejects not yet acknowledged: number → reason.
    pub rejects: BTreeMap<u64, String>,
}

/// Push state of every client, in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushLedger {
    clients: BTreeMap<String, ClientLedger>,
}

impl PushLedger {
    /// An empty ledger.
    pub fn new() -> PushLedger {
        PushLedger::default()
    }

    /// One client's state, if it was ever recorded.
    pub fn client(&self, client: &str) -> Option<&ClientLedger> {
        self.clients.get(client)
    }

    /// Every client, by id (for `spool clients`).
    pub fn clients(&self) -> impl Iterator<Item = (&str, &ClientLedger)> + '_ {
        self.clients.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn entry(&mut self, client: &str) -> &mut ClientLedger {
        self.clients.entry(client.to_string()).or_default()
    }

    /// See [`ReceiveRead::last_seq`].
    pub fn last_seq(&self, client: &str) -> u64 {
        self.clients.get(client).map_or(0, |c| c.last_seq)
    }

    /// See [`ReceiveRead::digest`].
    pub fn digest(&self, client: &str, seq: u64) -> Option<String> {
        match self.clients.get(client)?.entries.get(&seq)? {
            Recorded::Applied { digest } => Some(digest.clone()),
            Recorded::Rejected { digest, .. } => digest.clone(),
        }
    }

    /// See [`ReceiveRead::rejects`].
    pub fn rejects(&self, client: &str, after: u64) -> Vec<Rejected> {
        let Some(c) = self.clients.get(client) else {
            return Vec::new();
        };
        c.rejects
            .range(after.saturating_add(1)..)
            .map(|(seq, reason)| Rejected {
                seq: *seq,
                error: reason.clone(),
            })
            .collect()
    }

    /// See [`ReceiveTxn::record`]; recording a number twice is an error.
    pub fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()> {
        let c = self.entry(client);
        if c.entries.contains_key(&seq) {
            return Err(Error::Internal(format!(
                "push sequence number {seq} of client {client} recorded twice"
            )));
        }
        let rec = match record {
            EntryRecord::Applied { digest } => Recorded::Applied {
                digest: digest.to_string(),
            },
            EntryRecord::Rejected { digest, reason } => {
                c.rejects.insert(seq, reason.to_string());
                Recorded::Rejected {
                    digest: digest.map(str::to_string),
                    reason: reason.to_string(),
                }
            }
        };
        c.entries.insert(seq, rec);
        Ok(())
    }

    /// See [`ReceiveTxn::set_last_seq`]; moving backwards is an error.
    pub fn set_last_seq(&mut self, client: &str, seq: u64) -> Result<()> {
        let c = self.entry(client);
        if seq < c.last_seq {
            return Err(Error::Internal(format!(
                "last_seq of client {client} would move back from {} to {seq}",
                c.last_seq
            )));
        }
        c.last_seq = seq;
        Ok(())
    }

    /// See [`ReceiveTxn::prune_rejects`].
    pub fn prune_rejects(&mut self, client: &str, upto: u64) {
        if let Some(c) = self.clients.get_mut(client) {
            let kept = c.rejects.split_off(&upto.saturating_add(1));
            for seq in std::mem::replace(&mut c.rejects, kept).into_keys() {
                if matches!(
                    c.entries.get(&seq),
                    Some(Recorded::Rejected { digest: None, .. })
                ) {
                    c.entries.remove(&seq);
                }
            }
        }
    }
}

/// A receiving spool in memory: pending items with dedup on non-empty
/// keys, an optional depth bound, and a [`PushLedger`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryReceiver {
    /// The push state.
    pub ledger: PushLedger,
    pending: Vec<(ItemId, NewItem)>,
    next_id: ItemId,
    max_depth: Option<usize>,
    stored: u64,
    deduplicated: u64,
}

impl MemoryReceiver {
    /// An empty receiver holding at most `max_depth` pending items.
    pub fn new(max_depth: Option<usize>) -> MemoryReceiver {
        MemoryReceiver {
            next_id: 1,
            max_depth,
            ..MemoryReceiver::default()
        }
    }

    /// Change the depth bound (`None`: unbounded).
    pub fn set_max_depth(&mut self, max_depth: Option<usize>) {
        self.max_depth = max_depth;
    }

    /// The depth bound.
    pub fn max_depth(&self) -> Option<usize> {
        self.max_depth
    }

    /// The pending items, in enqueue order.
    pub fn pending(&self) -> &[(ItemId, NewItem)] {
        &self.pending
    }

    /// Remove and return every pending item (a consumer draining the
    /// receiving spool).
    pub fn take_pending(&mut self) -> Vec<(ItemId, NewItem)> {
        std::mem::take(&mut self.pending)
    }

    /// Items ever stored (dedup hits not included).
    pub fn stored(&self) -> u64 {
        self.stored
    }

    /// Enqueues that were dedup hits.
    pub fn deduplicated(&self) -> u64 {
        self.deduplicated
    }
}

impl ReceiveRead for MemoryReceiver {
    fn last_seq(&mut self, client: &str) -> Result<u64> {
        Ok(self.ledger.last_seq(client))
    }

    fn digest(&mut self, client: &str, seq: u64) -> Result<Option<String>> {
        Ok(self.ledger.digest(client, seq))
    }

    fn rejects(&mut self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        Ok(self.ledger.rejects(client, after))
    }
}

impl ReceiveTxn for MemoryReceiver {
    fn enqueue(&mut self, item: NewItem) -> Result<Option<Enqueued>> {
        if !item.key.is_empty() {
            if let Some((id, _)) = self.pending.iter().find(|(_, it)| it.key == item.key) {
                self.deduplicated += 1;
                return Ok(Some(Enqueued {
                    id: *id,
                    deduplicated: true,
                    ..Default::default()
                }));
            }
        }
        // Every pending item here is unattempted and not in flight: the
        // coalesce key alone decides.
        let ck = item.coalesce_key.clone();
        let coalesces = |it: &NewItem| ck.is_some() && it.coalesce_key == ck;
        let replaced = self.pending.iter().filter(|(_, it)| coalesces(it)).count();
        if self
            .max_depth
            .is_some_and(|m| self.pending.len() - replaced >= m)
        {
            return Ok(None);
        }
        let replaced: Vec<ItemId> = self
            .pending
            .iter()
            .filter(|(_, it)| coalesces(it))
            .map(|(id, _)| *id)
            .collect();
        self.pending.retain(|(_, it)| !coalesces(it));
        let id = self.next_id.max(1);
        self.next_id = id + 1;
        self.pending.push((id, item));
        self.stored += 1;
        Ok(Some(Enqueued {
            id,
            replaced,
            ..Default::default()
        }))
    }

    fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()> {
        self.ledger.record(client, seq, record)
    }

    fn set_last_seq(&mut self, client: &str, seq: u64) -> Result<()> {
        self.ledger.set_last_seq(client, seq)
    }

    fn prune_rejects(&mut self, client: &str, upto: u64) -> Result<()> {
        self.ledger.prune_rejects(client, upto);
        Ok(())
    }
}
