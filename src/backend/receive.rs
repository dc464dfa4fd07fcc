//! The receiving side of push (SPEC §7) for the memory and NDJSON
//! backends, over a [`View`] of the spool (the memory image, or the NDJSON
//! backend's index).
//!
//! [`Receive`] implements [`ReceiveTxn`] without changing the spool: it
//! reads the view and keeps what a group of requests adds — new items,
//! per-client ledger changes — to itself. When the group succeeds the
//! backend makes the changes durable (the NDJSON backend appends them as
//! one framed batch, which its index then takes in) or applies them with
//! [`State::apply_receive`]; when it fails, dropping the [`Receive`] is
//! the rollback.

use super::policy;
use super::state::{State, View};
use crate::error::{Error, Result};
use crate::item::{Enqueued, Item, ItemId, NewItem};
use crate::push::memory::Recorded;
use crate::push::receiver::{EntryRecord, ReceiveRead, ReceiveTxn};
use crate::push::wire::Rejected;
use crate::time::Timestamp;
use std::collections::{BTreeMap, HashMap};

/// What a group of requests did to one client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClientDelta {
    /// The new `last_seq`, when it moved.
    pub last_seq: Option<u64>,
    /// Numbers processed, with what became of them.
    pub entries: BTreeMap<u64, Recorded>,
    /// Rejects at or below this were acknowledged (0: none).
    pub acked: u64,
    /// When the client pushed.
    pub at: Option<Timestamp>,
}

/// The changes of a group of requests, ready to be stored and applied.
#[derive(Clone, Debug, Default)]
pub(crate) struct ReceiveChanges {
    /// Items enqueued, in order.
    pub items: Vec<Item>,
    /// Pending items of the spool that enqueued items replaced (their
    /// coalesce key), ascending; to be removed before `items` are added.
    pub replaced: Vec<ItemId>,
    /// Per-client changes.
    pub clients: BTreeMap<String, ClientDelta>,
}

/// One write transaction of a receiving spool over `state`.
pub(crate) struct Receive<'s, V: View> {
    state: &'s V,
    now: Timestamp,
    next_id: ItemId,
    /// Pending items before the transaction.
    depth: u64,
    changes: ReceiveChanges,
    keys: HashMap<String, ItemId>,
}

impl<'s, V: View> Receive<'s, V> {
    /// A transaction that enqueues at `now`.
    pub fn new(state: &'s V, now: Timestamp) -> Result<Receive<'s, V>> {
        Ok(Receive {
            state,
            now,
            next_id: state.high_water()?,
            depth: state.depth()?,
            changes: ReceiveChanges::default(),
            keys: HashMap::new(),
        })
    }

    /// What the transaction did.
    pub fn finish(self) -> ReceiveChanges {
        self.changes
    }

    fn delta(&mut self, client: &str) -> &mut ClientDelta {
        let now = self.now;
        let d = self.changes.clients.entry(client.to_string()).or_default();
        d.at = Some(now);
        d
    }
}

fn digest_of(r: &Recorded) -> Option<String> {
    match r {
        Recorded::Applied { digest } => Some(digest.clone()),
        Recorded::Rejected { digest, .. } => digest.clone(),
    }
}

impl<V: View> ReceiveRead for Receive<'_, V> {
    fn last_seq(&mut self, client: &str) -> Result<u64> {
        let before = self.state.client_last_seq(client)?;
        Ok(self
            .changes
            .clients
            .get(client)
            .and_then(|d| d.last_seq)
            .map_or(before, |l| l.max(before)))
    }

    fn digest(&mut self, client: &str, seq: u64) -> Result<Option<String>> {
        if let Some(r) = self
            .changes
            .clients
            .get(client)
            .and_then(|d| d.entries.get(&seq))
        {
            return Ok(digest_of(r));
        }
        self.state.client_digest(client, seq)
    }

    fn rejects(&mut self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        let delta = self.changes.clients.get(client);
        let after = after.max(delta.map_or(0, |d| d.acked));
        let mut out = self.state.client_rejects(client, after)?;
        if let Some(d) = delta {
            for (seq, r) in d.entries.range(after.saturating_add(1)..) {
                if let Recorded::Rejected { reason, .. } = r {
                    out.push(Rejected {
                        seq: *seq,
                        error: reason.clone(),
                    });
                }
            }
        }
        out.sort_by_key(|r| r.seq);
        Ok(out)
    }
}

impl<V: View> ReceiveTxn for Receive<'_, V> {
    fn enqueue(&mut self, item: NewItem) -> Result<Option<Enqueued>> {
        let key = item.key.as_str();
        if !key.is_empty() {
            let owner = self
                .state
                .key_owner(key)?
                .filter(|id| !self.changes.replaced.contains(id));
            let existing = match owner {
                Some(id) => Some(id),
                None => self.keys.get(key).copied(),
            };
            if let Some(id) = existing {
                return Ok(Some(Enqueued::dedup(id)));
            }
        }
        // The items its coalesce key replaces: the spool's, then this
        // transaction's own (never attempted, not in flight either).
        let (mut theirs, mut own) = (Vec::new(), Vec::new());
        if let Some(ck) = item.coalesce_key.as_deref() {
            theirs = self.state.coalescible(ck)?;
            theirs.retain(|id| !self.changes.replaced.contains(id));
            own = (self.changes.items.iter())
                .filter(|it| it.coalesce_key.as_deref() == Some(ck))
                .map(|it| it.id)
                .collect();
        }
        if let Some(bound) = self.state.max_depth() {
            let depth = self.depth + self.changes.items.len() as u64
                - (self.changes.replaced.len() + theirs.len() + own.len()) as u64;
            if depth >= bound {
                return Ok(None);
            }
        }
        self.changes
            .items
            .retain(|it| it.coalesce_key.is_none() || it.coalesce_key != item.coalesce_key);
        self.keys.retain(|_, id| !own.contains(id));
        self.changes.replaced.extend(&theirs);
        self.changes.replaced.sort_unstable();
        let mut replaced = theirs;
        replaced.extend(own);
        self.next_id = policy::next_id(self.next_id)?;
        let id = self.next_id;
        if !key.is_empty() {
            self.keys.insert(key.to_string(), id);
        }
        let NewItem {
            payload,
            key,
            group,
            coalesce_key,
        } = item;
        let mut stored = Item::new(id, payload, key, self.now);
        stored.group = group;
        stored.coalesce_key = coalesce_key;
        self.changes.items.push(stored);
        Ok(Some(Enqueued {
            replaced,
            ..Enqueued::fresh(id)
        }))
    }

    fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()> {
        let known = self.state.client_recorded(client, seq)?;
        let d = self.delta(client);
        if known || d.entries.contains_key(&seq) {
            return Err(Error::Internal(format!(
                "push sequence number {seq} of client {client} recorded twice"
            )));
        }
        let r = match record {
            EntryRecord::Applied { digest } => Recorded::Applied {
                digest: digest.to_string(),
            },
            EntryRecord::Rejected { digest, reason } => Recorded::Rejected {
                digest: digest.map(str::to_string),
                reason: reason.to_string(),
            },
        };
        d.entries.insert(seq, r);
        Ok(())
    }

    fn set_last_seq(&mut self, client: &str, seq: u64) -> Result<()> {
        let before = self.last_seq(client)?;
        if seq < before {
            return Err(Error::Internal(format!(
                "last_seq of client {client} would move back from {before} to {seq}"
            )));
        }
        self.delta(client).last_seq = Some(seq);
        Ok(())
    }

    fn prune_rejects(&mut self, client: &str, upto: u64) -> Result<()> {
        let d = self.delta(client);
        d.acked = d.acked.max(upto);
        Ok(())
    }
}

impl State {
    /// Apply what a receiving transaction did (after it was made durable).
    pub(crate) fn apply_receive(&mut self, changes: ReceiveChanges) {
        for id in changes.replaced {
            self.remove_pending(id);
        }
        for item in changes.items {
            self.insert_pending(item);
        }
        for (client, delta) in changes.clients {
            self.apply_client_delta(&client, delta);
        }
    }

    /// Apply one client's changes (also what reading an NDJSON client line
    /// does). Idempotent: a number already recorded is kept as it is.
    pub(crate) fn apply_client_delta(&mut self, client: &str, delta: ClientDelta) {
        for (seq, r) in delta.entries {
            let known = self
                .receiver
                .client(client)
                .is_some_and(|c| c.entries.contains_key(&seq));
            if known {
                continue;
            }
            let rec = match &r {
                Recorded::Applied { digest } => EntryRecord::Applied { digest },
                Recorded::Rejected { digest, reason } => EntryRecord::Rejected {
                    digest: digest.as_deref(),
                    reason,
                },
            };
            // Cannot fail: the number is not recorded yet.
            let _ = self.receiver.record(client, seq, rec);
        }
        if let Some(last) = delta.last_seq {
            let before = self.receiver.last_seq(client);
            let _ = self.receiver.set_last_seq(client, last.max(before));
        }
        if delta.acked > 0 {
            self.receiver.prune_rejects(client, delta.acked);
        }
        if let Some(at) = delta.at {
            self.receiver_at.insert(client.to_string(), at);
        }
    }

    /// Every client's state, as `spool clients` shows it.
    pub(crate) fn client_summaries(&self) -> Vec<crate::item::ClientSummary> {
        self.receiver
            .clients()
            .map(|(id, c)| crate::item::ClientSummary {
                client_id: id.to_string(),
                last_seq: c.last_seq,
                rejected: c
                    .rejects
                    .iter()
                    .map(|(seq, reason)| Rejected {
                        seq: *seq,
                        error: reason.clone(),
                    })
                    .collect(),
                updated_at: self.receiver_at.get(id).copied(),
                served_by: None,
            })
            .collect()
    }
}
