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
    /// The ordering group (SPEC §9): replay delivers the items of one
    /// group strictly in enqueue order. `None`: no group.
    pub group: Option<String>,
    /// The coalesce key (SPEC §9): a later enqueue with the same key
    /// replaces this item while it was never attempted and is not in
    /// flight. `None`: never coalesced.
    pub coalesce_key: Option<String>,
}

impl Item {
    /// A new pending item `id` made of `new`, enqueued at `now`.
    pub fn from_new(id: ItemId, new: &NewItem, now: Timestamp) -> Item {
        let mut item = Item::new(id, new.payload.clone(), new.key.clone(), now);
        item.group = new.group.clone();
        item.coalesce_key = new.coalesce_key.clone();
        item
    }

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
            group: None,
            coalesce_key: None,
        }
    }

    /// True when the item has a push sequence number that the receiver has
    /// not acknowledged yet.
    pub fn in_flight(&self) -> bool {
        self.push_seq.is_some()
    }

    /// True when replay may attempt the item at `now`: not held and not
    /// waiting for a backoff to expire. That is the item's own part of the
    /// rule; whether it waits behind its ordering group is the spool's
    /// ([`crate::Queue::due_page`]).
    pub fn is_due(&self, now: Timestamp) -> bool {
        !self.held && self.next_retry_at.is_none_or(|t| t <= now)
    }

    /// [`Item::is_due`], where with `ignore_backoff` a retry time does not
    /// count (`replay --ignore-backoff`): only a hold keeps it back.
    pub fn is_due_unless(&self, now: Timestamp, ignore_backoff: bool) -> bool {
        if ignore_backoff {
            !self.held
        } else {
            self.is_due(now)
        }
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

/// What proves that an item was delivered: kept with a retained
/// delivered item (SPEC §9 "Retention of delivered items").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// The `--url` target answered with this 2xx status.
    Http(u16),
    /// The `--exec` command exited with this status (0).
    Exit(i32),
    /// The push receiver acknowledged up to this sequence number.
    Push(u64),
    /// Marked done by `spool done` (or a library caller), not by a replay.
    Done,
    /// Refused or out of attempts, and accepted by the replay's
    /// dead-letter sink instead of the spool's own dead-letter set.
    Sink,
}

impl Evidence {
    /// The compact form the backends store: `http:200`, `exit:0`,
    /// `push:41`, `done`, `sink`.
    pub fn encode(&self) -> String {
        match self {
            Evidence::Http(s) => format!("http:{s}"),
            Evidence::Exit(c) => format!("exit:{c}"),
            Evidence::Push(n) => format!("push:{n}"),
            Evidence::Done => "done".into(),
            Evidence::Sink => "sink".into(),
        }
    }

    /// Read [`Evidence::encode`]'s form back; `None` when it is not one.
    pub fn decode(s: &str) -> Option<Evidence> {
        match s {
            "done" => return Some(Evidence::Done),
            "sink" => return Some(Evidence::Sink),
            _ => {}
        }
        let (kind, n) = s.split_once(':')?;
        match kind {
            "http" => n.parse().ok().map(Evidence::Http),
            "exit" => n.parse().ok().map(Evidence::Exit),
            "push" => n.parse().ok().map(Evidence::Push),
            _ => None,
        }
    }

    /// The JSON object `list`/`show`/`export` print: `{"http_status":200}`,
    /// `{"exit_status":0}`, `{"push_last_seq":41}`, `{"marked_done":true}`
    /// or `{"dead_letter_sink":true}`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Evidence::Http(s) => serde_json::json!({ "http_status": s }),
            Evidence::Exit(c) => serde_json::json!({ "exit_status": c }),
            Evidence::Push(n) => serde_json::json!({ "push_last_seq": n }),
            Evidence::Done => serde_json::json!({ "marked_done": true }),
            Evidence::Sink => serde_json::json!({ "dead_letter_sink": true }),
        }
    }

    /// Read [`Evidence::to_json`]'s object back.
    pub fn from_json(v: &serde_json::Value) -> Option<Evidence> {
        let o = v.as_object().filter(|o| o.len() == 1)?;
        let (k, v) = o.iter().next()?;
        match k.as_str() {
            "http_status" => v
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .map(Evidence::Http),
            "exit_status" => v
                .as_i64()
                .and_then(|c| i32::try_from(c).ok())
                .map(Evidence::Exit),
            "push_last_seq" => v.as_u64().map(Evidence::Push),
            "marked_done" => (v.as_bool() == Some(true)).then_some(Evidence::Done),
            "dead_letter_sink" => (v.as_bool() == Some(true)).then_some(Evidence::Sink),
            _ => None,
        }
    }

    /// For people: `HTTP 200`, `exit 0`, `push ack 41`, `marked done`.
    pub fn describe(&self) -> String {
        match self {
            Evidence::Http(s) => format!("HTTP {s}"),
            Evidence::Exit(c) => format!("exit {c}"),
            Evidence::Push(n) => format!("push ack {n}"),
            Evidence::Done => "marked done".into(),
            Evidence::Sink => "handed to the dead-letter sink".into(),
        }
    }
}

/// When and how an item was delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// When the delivery was recorded.
    pub at: Timestamp,
    /// What proves it.
    pub evidence: Evidence,
}

/// A delivered item kept for the retention window (SPEC §9): read-only,
/// out of the pending set; its key still deduplicates until the window
/// ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveredItem {
    /// The item as it was delivered (attempts included).
    pub item: Item,
    /// When and how.
    pub delivery: Delivery,
}

/// How many expired delivered records one mutating call prunes at most,
/// in the same commit (SPEC §9: pruning in bounded batches).
pub const PRUNE_BATCH: usize = 256;

/// The retention setting (`spool config retain`): `off`, or a window
/// such as `7d`.
pub fn parse_retain(s: &str) -> std::result::Result<Option<std::time::Duration>, String> {
    match s.trim() {
        "off" | "none" | "0" => Ok(None),
        t => {
            let d = crate::units::parse_duration(t).map_err(|_| {
                format!(
                    "invalid retention {s:?}: give off, or a window written as a number \
                     and a unit (s, m, h, d), e.g. 7d, 12h, 1d12h"
                )
            })?;
            if d.is_zero() {
                Ok(None)
            } else if d.as_millis() < 1000 {
                Err(format!(
                    "invalid retention {s:?}: the window is at least 1s"
                ))
            } else {
                Ok(Some(d))
            }
        }
    }
}

/// A payload to enqueue.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NewItem {
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// Idempotency key; empty for none.
    pub key: String,
    /// Ordering group, if any.
    pub group: Option<String>,
    /// Coalesce key, if any.
    pub coalesce_key: Option<String>,
}

impl NewItem {
    /// A payload with an idempotency key (empty for none).
    pub fn new(payload: impl Into<Vec<u8>>, key: impl Into<String>) -> NewItem {
        NewItem {
            payload: payload.into(),
            key: key.into(),
            group: None,
            coalesce_key: None,
        }
    }

    /// The same item in ordering group `group`.
    pub fn in_group(mut self, group: impl Into<String>) -> NewItem {
        self.group = Some(group.into());
        self
    }

    /// The same item with coalesce key `key`.
    pub fn coalescing(mut self, key: impl Into<String>) -> NewItem {
        self.coalesce_key = Some(key.into());
        self
    }
}

/// Why `key` cannot be an idempotency key, or `None` when it can.
///
/// A key must not contain a NUL byte (SPEC §7): the push digest is taken
/// over the key, one `0x00` byte and the payload, so a key holding a NUL
/// would let two different entries (`"a\0b"` + `x`, `"a"` + `b\0x`) share
/// a digest. Every way into a spool refuses such a key — `enqueue` and
/// `import` (exit 65), a push entry (rejected with this reason),
/// `POST /v1/items` (400) — and the backends refuse it too. Items that
/// older versions stored with such a key stay as they are; `verify`
/// reports them.
pub fn key_problem(key: &str) -> Option<&'static str> {
    key.contains('\0')
        .then_some("the idempotency key contains a NUL byte, which no key may contain")
}

/// [`key_problem`] as the backends' error: every backend refuses to
/// store an item or record whose key no key may be, so that the rule
/// holds for library callers as it does for the command line.
pub(crate) fn check_key(key: &str) -> crate::Result<()> {
    match key_problem(key) {
        None => Ok(()),
        Some(problem) => Err(crate::Error::InvalidInput(format!(
            "cannot store the key {key:?}: {problem}"
        ))),
    }
}

/// `item`, or [`check_key`]'s error.
pub(crate) fn checked_item(item: NewItem) -> crate::Result<NewItem> {
    check_key(&item.key)?;
    Ok(item)
}

/// What one enqueue did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Enqueued {
    /// The id of the stored item, or of the pending item that already
    /// carried the key.
    pub id: ItemId,
    /// True when nothing was stored because a pending item already
    /// carried the same non-empty key (first write wins).
    pub deduplicated: bool,
    /// Pending items this one replaced (removed) because they carried its
    /// coalesce key, had never been attempted and were not in flight
    /// (SPEC §9 "Coalescing").
    pub replaced: Vec<ItemId>,
    /// Pending items moved to the dead-letter set to make room for this
    /// one (the `drop-oldest` overflow policy, SPEC §9).
    pub evicted: Vec<ItemId>,
    /// With `deduplicated`: the key belongs to an item already delivered
    /// and retained (SPEC §9), not to a pending one.
    pub delivered: bool,
}

impl Enqueued {
    /// A new item stored as `id`.
    pub fn fresh(id: ItemId) -> Enqueued {
        Enqueued {
            id,
            ..Enqueued::default()
        }
    }

    /// A dedup hit on the pending item `id`.
    pub fn dedup(id: ItemId) -> Enqueued {
        Enqueued {
            id,
            deduplicated: true,
            ..Enqueued::default()
        }
    }

    /// A dedup hit on the retained delivered item `id`.
    pub fn delivered(id: ItemId) -> Enqueued {
        Enqueued {
            id,
            deduplicated: true,
            delivered: true,
            ..Enqueued::default()
        }
    }

    /// True when this result is only an id and a dedup flag.
    fn is_plain(&self) -> bool {
        self.replaced.is_empty() && self.evicted.is_empty() && !self.delivered
    }
}

/// What a streamed batch enqueue did, item by item, kept compact: runs of
/// fresh items with consecutive ids take one entry, so the results of a
/// batch of millions of lines fit in a few bytes (dedup hits, and items
/// that replaced or evicted others, take one entry each).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BatchResults {
    runs: Vec<BatchRun>,
    len: u64,
    stored: u64,
}

/// A run of results of [`BatchResults`].
#[derive(Clone, Debug, PartialEq, Eq)]
enum BatchRun {
    /// `count` fresh items with ids `first, first + 1, …`.
    Fresh { first: ItemId, count: u64 },
    /// A dedup hit on `id`.
    Dedup { id: ItemId },
    /// An item that replaced or evicted others.
    Other(Enqueued),
}

impl BatchResults {
    /// Record the next item's result.
    pub fn push(&mut self, e: Enqueued) {
        self.len += 1;
        if !e.deduplicated {
            self.stored += 1;
        }
        if !e.is_plain() {
            self.runs.push(BatchRun::Other(e));
            return;
        }
        if e.deduplicated {
            self.runs.push(BatchRun::Dedup { id: e.id });
            return;
        }
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

    /// Every id the batch's items replaced, in order.
    pub fn replaced(&self) -> impl Iterator<Item = ItemId> + '_ {
        self.runs
            .iter()
            .flat_map(|r| match r {
                BatchRun::Other(e) => e.replaced.as_slice(),
                _ => &[],
            })
            .copied()
    }

    /// Every id the batch's items evicted, in order.
    pub fn evicted(&self) -> impl Iterator<Item = ItemId> + '_ {
        self.runs
            .iter()
            .flat_map(|r| match r {
                BatchRun::Other(e) => e.evicted.as_slice(),
                _ => &[],
            })
            .copied()
    }

    /// Every item's result, in order.
    pub fn iter(&self) -> impl Iterator<Item = Enqueued> + '_ {
        self.runs.iter().flat_map(|r| {
            let (first, count, dedup, other) = match r {
                BatchRun::Fresh { first, count } => (*first, *count, false, None),
                BatchRun::Dedup { id } => (*id, 1, true, None),
                BatchRun::Other(e) => (e.id, 1, e.deduplicated, Some(e)),
            };
            (0..count).map(move |i| match other {
                Some(e) => e.clone(),
                None if dedup => Enqueued::dedup(first),
                None => Enqueued::fresh(first + i),
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

/// What an enqueue does when the spool is at its depth bound (the
/// `on-full` setting, SPEC §9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum OnFull {
    /// Refuse the enqueue ([`crate::Error::QueueFull`], exit 75); store
    /// nothing.
    #[default]
    Reject,
    /// Move the oldest pending item that is not held and not in flight to
    /// the dead-letter set (`last_error` [`OnFull::eviction_error`]) and
    /// store the new one.
    DropOldest,
}

impl OnFull {
    /// The setting's value as `spool config` shows it.
    pub fn name(self) -> &'static str {
        match self {
            OnFull::Reject => "reject",
            OnFull::DropOldest => "drop-oldest",
        }
    }

    /// Parse a setting value (`reject`, `drop-oldest`).
    pub fn parse(s: &str) -> Option<OnFull> {
        match s {
            "reject" => Some(OnFull::Reject),
            "drop-oldest" => Some(OnFull::DropOldest),
            _ => None,
        }
    }

    /// The `last_error` of an item evicted by a spool bounded at
    /// `max_depth`.
    pub fn eviction_error(max_depth: u64) -> String {
        format!("evicted: spool full (max-depth {max_depth})")
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
    /// Delivered and retained (SPEC §9).
    Delivered,
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
    /// For delivered records, when and how.
    pub delivery: Option<Delivery>,
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
    /// The receiver that last applied the client's entries, `host:pid`,
    /// where the backend records it: PostgreSQL, whose spool several
    /// `spool serve` may share (`None` elsewhere, and before a receiver
    /// that records it served the client).
    pub served_by: Option<String>,
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
    /// What an enqueue does at the bound.
    pub on_full: OnFull,
    /// Items ever evicted by the `drop-oldest` policy.
    pub evicted_total: u64,
    /// Delivered items kept for the retention window (expired ones not
    /// yet pruned included).
    pub delivered_retained: u64,
    /// The retention window, when set.
    pub retain: Option<std::time::Duration>,
}
