//! The things a spool holds.

use crate::time::Timestamp;
use std::collections::BTreeMap;

/// A queue-local item id. Ids grow monotonically and are never reused
/// within a spool, not even after the item is done or compacted away.
pub type ItemId = u64;

/// A pending (or held) item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Stable, queue-local id.
    pub id: ItemId,
    /// The payload: arbitrary bytes.
    pub payload: Vec<u8>,
    /// Idempotency key; empty when none. Never interpreted.
    pub key: String,
    /// Durable count of failed delivery attempts.
    pub attempts: u32,
    /// When the item was enqueued (second precision). `None` only for
    /// items written by the reference NDJSON format, which carries no time.
    pub enqueued_at: Option<Timestamp>,
    /// Replay skips the item until this time.
    pub next_retry_at: Option<Timestamp>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// A held item is kept, listed and counted, but replay skips it.
    pub held: bool,
    /// The push sequence number the item was given when it first went into
    /// a push batch (SPEC §7); `None` until then. A pending item with a
    /// number is *in flight*: the receiver may hold it, so it stays in the
    /// spool, unchanged, until the receiver acknowledges or rejects it.
    pub push_seq: Option<u64>,
}

impl Item {
    /// A fresh item as enqueue creates it.
    pub fn new(id: ItemId, payload: Vec<u8>, key: String, enqueued_at: Timestamp) -> Item {
        Item {
            id,
            payload,
            key,
            attempts: 0,
            enqueued_at: Some(Timestamp::from_secs(enqueued_at.as_secs())),
            next_retry_at: None,
            last_error: None,
            held: false,
            push_seq: None,
        }
    }

    /// True when the item has a push sequence number that the receiver has
    /// not acknowledged yet.
    pub fn in_flight(&self) -> bool {
        self.push_seq.is_some()
    }

    /// True when replay may attempt the item at `now`: not held and not
    /// waiting for a backoff to expire.
    pub fn is_due(&self, now: Timestamp) -> bool {
        !self.held && self.next_retry_at.is_none_or(|t| t <= now)
    }
}

/// An item in the dead-letter set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The item as it was when it died (attempts and last error included).
    pub item: Item,
    /// When it was moved to the dead-letter set.
    pub dead_at: Timestamp,
}

/// A payload to enqueue.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NewItem {
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Idempotency key; empty for none.
    pub key: String,
}

impl NewItem {
    /// A payload with an idempotency key (empty for none).
    pub fn new(payload: impl Into<Vec<u8>>, key: impl Into<String>) -> NewItem {
        NewItem {
            payload: payload.into(),
            key: key.into(),
        }
    }
}

/// What one enqueue did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enqueued {
    /// The id of the stored item, or of the pending item that already
    /// carried the key.
    pub id: ItemId,
    /// True when nothing was stored because a pending item already
    /// carried the same non-empty key (first write wins).
    pub deduplicated: bool,
}

/// What a streamed batch enqueue did, item by item, kept compact: runs of
/// fresh items with consecutive ids take one entry, so the results of a
/// batch of millions of lines fit in a few bytes (dedup hits take one
/// entry each).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BatchResults {
    runs: Vec<BatchRun>,
    len: u64,
    stored: u64,
}

/// A run of results of [`BatchResults`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchRun {
    /// `count` fresh items with ids `first, first + 1, …`.
    Fresh { first: ItemId, count: u64 },
    /// A dedup hit on `id`.
    Dedup { id: ItemId },
}

impl BatchResults {
    /// Record the next item's result.
    pub fn push(&mut self, e: Enqueued) {
        self.len += 1;
        if e.deduplicated {
            self.runs.push(BatchRun::Dedup { id: e.id });
            return;
        }
        self.stored += 1;
        if let Some(BatchRun::Fresh { first, count }) = self.runs.last_mut() {
            if first.checked_add(*count) == Some(e.id) {
                *count += 1;
                return;
            }
        }
        self.runs.push(BatchRun::Fresh {
            first: e.id,
            count: 1,
        });
    }

    /// Items in the batch.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the batch had no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Items stored (not dedup hits).
    pub fn stored(&self) -> u64 {
        self.stored
    }

    /// Every item's result, in order.
    pub fn iter(&self) -> impl Iterator<Item = Enqueued> + '_ {
        self.runs.iter().flat_map(|r| {
            let (first, count, dedup) = match *r {
                BatchRun::Fresh { first, count } => (first, count, false),
                BatchRun::Dedup { id } => (id, 1, true),
            };
            (0..count).map(move |i| Enqueued {
                id: if dedup { first } else { first + i },
                deduplicated: dedup,
            })
        })
    }
}

impl FromIterator<Enqueued> for BatchResults {
    fn from_iter<I: IntoIterator<Item = Enqueued>>(iter: I) -> BatchResults {
        let mut r = BatchResults::default();
        for e in iter {
            r.push(e);
        }
        r
    }
}

/// Which depth bound an enqueue enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DepthLimit {
    /// The bound the spool remembers (if any).
    #[default]
    Stored,
    /// This bound for this call only (`None`: unbounded).
    Override(Option<u64>),
}

/// Options for [`crate::Queue::enqueue_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EnqueueOptions {
    /// Which depth bound applies.
    pub depth_limit: DepthLimit,
}

/// The bookkeeping replay writes after an attempt that did not deliver.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct AttemptUpdate {
    /// The new cumulative attempt count.
    pub attempts: u32,
    /// When the item may be tried again (`None`: at once).
    pub next_retry_at: Option<Timestamp>,
    /// Why the attempt failed.
    pub last_error: Option<String>,
}

/// The state of a record in an export stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordState {
    /// Pending, not held.
    Pending,
    /// Pending and held.
    Held,
    /// In the dead-letter set.
    Dead,
}

/// One item of a whole-spool export or import.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The item (for a held record, `held` is true).
    pub item: Item,
    /// Pending, held or dead.
    pub state: RecordState,
    /// For dead records, when the item died.
    pub dead_at: Option<Timestamp>,
}

/// What importing one record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imported {
    /// The id the record has in the target.
    pub id: ItemId,
    /// True when the record kept the id it had in the source.
    pub kept_id: bool,
    /// True when a pending item in the target already carried the key, so
    /// nothing was stored.
    pub deduplicated: bool,
}

/// A spool's bookkeeping as a sending push client (SPEC §7): the spool
/// is one client, identified by its uuid, whose items get sequence
/// numbers 1, 2, 3, … in the order they are first sent.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PushState {
    /// The highest sequence number ever assigned (0: none yet); the next
    /// item sent gets `last_assigned + 1`. Never goes down.
    pub last_assigned: u64,
    /// The highest sequence number the receiver has acknowledged: the
    /// watermark. Never goes down, never passes `last_assigned`.
    pub acked: u64,
    /// Sequence numbers whose item left the spool before an ack (an
    /// operator's `done --force`, a dead-lettering): the sender reports
    /// each as a `skip` entry until it is acknowledged. Ascending.
    pub skips: Vec<u64>,
}

/// What [`crate::Queue::push_ack`] did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PushAck {
    /// The watermark after the ack.
    pub acked: u64,
    /// In-flight items the ack covered that the receiver applied: removed
    /// from the pending set.
    pub delivered: Vec<ItemId>,
    /// In-flight items the receiver refused: moved to the dead-letter set
    /// with the receiver's reason.
    pub rejected: Vec<ItemId>,
}

/// A push client as the receiving spool knows it (`spool clients`,
/// `GET /v1/clients/{id}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSummary {
    /// The client's id (the sending spool's uuid).
    pub client_id: String,
    /// The highest sequence number processed.
    pub last_seq: u64,
    /// Refused entries the client has not acknowledged yet, ascending.
    pub rejected: Vec<crate::push::wire::Rejected>,
    /// When the client last pushed, when known.
    pub updated_at: Option<Timestamp>,
}

/// Counts that every backend can answer without reading every payload.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Pending items, held ones included.
    pub depth: u64,
    /// Held items.
    pub held: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Pending items whose next retry is in the future.
    pub waiting: u64,
    /// Enqueue time of the oldest pending item (by id), when known.
    pub oldest_enqueued_at: Option<Timestamp>,
    /// Id of the oldest pending item.
    pub oldest_id: Option<ItemId>,
    /// Number of pending items per attempt count.
    pub attempts_histogram: BTreeMap<u32, u64>,
    /// The stored depth bound.
    pub max_depth: Option<u64>,
    /// The highest id ever issued.
    pub high_water: u64,
}
