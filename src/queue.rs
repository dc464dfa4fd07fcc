//! The queue contract every backend implements.
//!
//! [`Queue`] carries every operation of the reference `IOfflineQueue`
//! (enqueue with and without key, non-destructive drain in enqueue order,
//! mark done, set attempts, size, max depth) plus what replay and
//! operators need: paged reads, replay bookkeeping, hold/release, a
//! durable dead-letter set, and whole-spool import. The conformance suite
//! in `tests/conformance.rs` is this contract written as tests; every
//! backend runs it.
//!
//! Every mutating method is a committed, durable transaction when it
//! returns `Ok` (for the durable backends), and all-or-nothing when it
//! returns `Err`.

use crate::error::Result;
use crate::item::{
    AttemptUpdate, BatchResults, ClientSummary, DeadLetter, DeliveredItem, EnqueueOptions,
    Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats,
    Record,
};
use crate::push::receiver::ReceiveTxn;
use crate::time::Timestamp;
use std::time::Duration;

/// Which storage a spool uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// SQLite database (the default).
    Sqlite,
    /// Append-only NDJSON file.
    File,
    /// In memory, for tests and embedding.
    Memory,
    /// A PostgreSQL database shared by many machines.
    Postgres,
}

impl BackendKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "sqlite",
            BackendKind::File => "file",
            BackendKind::Memory => "memory",
            BackendKind::Postgres => "postgres",
        }
    }

    /// The backend as prose names it: `SQLite`, `NDJSON`, `memory`,
    /// `PostgreSQL`.
    pub fn title(self) -> &'static str {
        match self {
            BackendKind::Sqlite => "SQLite",
            BackendKind::File => "NDJSON",
            BackendKind::Memory => "memory",
            BackendKind::Postgres => "PostgreSQL",
        }
    }
}

/// Page size used by the provided [`Queue::drain`] and by callers that
/// stream a spool.
pub const PAGE_SIZE: usize = 512;

/// A durable offline queue.
///
/// Dedup semantics (all backends, as the reference's durable queues):
/// only a non-empty key carried by a pending (or held) item is a dedup
/// candidate; a hit stores nothing, keeps the first payload and returns
/// the existing id with `deduplicated: true`; `mark_done` and
/// dead-lettering release the key; a dedup hit succeeds even on a full
/// spool, since it stores nothing. With a retention window
/// ([`Queue::retain`]), a key with no pending owner that a retained
/// delivered item carries, delivered less than the window ago, is a dedup
/// hit too ([`Enqueued::delivered`]: the newest such item's id); the
/// push receiver dedups against pending keys only, and imports as
/// [`Queue::import`] says.
///
/// Depth bound: with the default overflow policy ([`OnFull::Reject`]) an
/// enqueue that would take the number of pending items past the bound
/// fails with [`crate::Error::QueueFull`] and stores nothing. With
/// [`OnFull::DropOldest`], each new item that does not fit first moves
/// the oldest pending item that is not held and not in flight (no push
/// sequence number; on PostgreSQL, no running lease) to the dead-letter
/// set with `last_error` [`OnFull::eviction_error`], reported in
/// [`Enqueued::evicted`] and counted in [`QueueStats::evicted_total`];
/// when no item can be evicted, the batch fails as with `Reject`.
///
/// Coalescing (SPEC §9): a new item with a coalesce key first removes
/// every pending item with the same coalesce key that was never attempted
/// (`attempts == 0`) and is not in flight, earlier items of the same batch
/// included, reported in [`Enqueued::replaced`]; removed items release
/// their keys as `mark_done` does. A dedup hit (checked first) stores
/// nothing and replaces nothing. Ordering groups ([`Item::group`]) are
/// stored and returned; replay enforces them.
pub trait Queue: Send + Sync {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Enqueue `items` in one atomic commit, in order. Returns one result
    /// per item. A key repeated within the batch dedups against the
    /// batch's first item with that key. If the batch does not fit under
    /// the depth bound, nothing is stored.
    fn enqueue_batch(&self, items: &[NewItem], opts: &EnqueueOptions) -> Result<Vec<Enqueued>>;

    /// Enqueue the items `items` yields as ONE atomic commit, in order, as
    /// [`Queue::enqueue_batch`] does, without needing them all in memory
    /// at once (the durable backends write them as they come). An `Err`
    /// from `items` — a malformed input line — or a depth bound the batch
    /// does not fit stops it, and nothing of it is stored.
    ///
    /// The default collects the items and calls `enqueue_batch`.
    fn enqueue_stream(
        &self,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        opts: &EnqueueOptions,
    ) -> Result<BatchResults> {
        let items: Vec<NewItem> = items.collect::<Result<_>>()?;
        Ok(self.enqueue_batch(&items, opts)?.into_iter().collect())
    }

    /// Enqueue one payload with a key (`""` for none) under the stored
    /// depth bound.
    fn enqueue(&self, payload: &[u8], key: &str) -> Result<Enqueued> {
        let mut v =
            self.enqueue_batch(&[NewItem::new(payload, key)], &EnqueueOptions::default())?;
        v.pop()
            .ok_or_else(|| crate::Error::Internal("enqueue returned no result".into()))
    }

    /// Up to `limit` pending items (held included) with `id > after`, in
    /// enqueue (id) order. Never removes anything.
    fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>>;

    /// Every pending item in enqueue order, without removing any (the
    /// reference `drain`). Prefer [`Queue::page`] for large spools.
    fn drain(&self) -> Result<Vec<Item>> {
        let mut all = Vec::new();
        let mut after = 0;
        loop {
            let page = self.page(after, PAGE_SIZE)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            let n = page.len();
            all.extend(page);
            if n < PAGE_SIZE {
                break;
            }
        }
        Ok(all)
    }

    /// One pending item.
    fn get(&self, id: ItemId) -> Result<Option<Item>>;

    /// Remove delivered pending items, in one commit, each with what
    /// proves its delivery. Returns, per id, whether it was pending.
    /// Unknown ids are a no-op, as in the reference. With a retention
    /// window set ([`Queue::retain`]), each item is kept as a read-only
    /// delivered record ([`Queue::delivered_get`]) with the commit's time
    /// and its evidence, and its key keeps deduplicating until the window
    /// ends; the same commit prunes up to [`crate::item::PRUNE_BATCH`]
    /// expired records.
    fn deliver(&self, done: &[(ItemId, Evidence)]) -> Result<Vec<bool>>;

    /// Remove pending items (delivered, or an operator's decision), in one
    /// commit: [`Queue::deliver`] with [`Evidence::Done`].
    fn mark_done(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        let done: Vec<(ItemId, Evidence)> = ids.iter().map(|id| (*id, Evidence::Done)).collect();
        self.deliver(&done)
    }

    /// Set an item's durable attempt count. Returns whether it exists.
    fn set_attempts(&self, id: ItemId, attempts: u32) -> Result<bool>;

    /// Record a failed attempt: attempts, next retry time and last error
    /// in one commit. Returns whether the item exists.
    fn record_attempt(&self, id: ItemId, update: &AttemptUpdate) -> Result<bool>;

    /// Hold (`true`) or release (`false`) pending items, in one commit.
    /// Returns, per id, whether it was pending.
    fn set_held(&self, ids: &[ItemId], held: bool) -> Result<Vec<bool>>;

    /// Number of pending items, held ones included.
    fn size(&self) -> Result<u64>;

    /// The first pending item of ordering group `group` (held, waiting and
    /// in-flight items included; dead letters do not count), or `None`
    /// when the group has no pending item. Only that item of a group is
    /// due (SPEC §9).
    ///
    /// The provided implementation walks the pending items page by page.
    /// Backends with an index on the group override it.
    fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        let mut after = 0;
        loop {
            let page = self.page(after, PAGE_SIZE)?;
            let Some(last) = page.last() else {
                return Ok(None);
            };
            after = last.id;
            if let Some(head) = page.iter().find(|it| it.group.as_deref() == Some(group)) {
                return Ok(Some(head.id));
            }
            if page.len() < PAGE_SIZE {
                return Ok(None);
            }
        }
    }

    /// Up to `limit` pending items with `id > after` that a replay at
    /// `now` would attempt, in enqueue (id) order: the one definition of
    /// *due* (SPEC §3) that `list --due`, [`Queue::due_count`] (`stats`,
    /// replay's progress) and replay itself share. An item is due when it
    /// is not held, not waiting for its next retry time (unless
    /// `ignore_backoff`), and not waiting behind its ordering group (it is
    /// the first pending item of its group, [`Queue::group_head`]). On a
    /// spool with leased replay ([`Queue::leasing`]) an item is not due
    /// either while another replayer's lease on it, or on another item of
    /// its group, runs, or while it is in flight to a push receiver: what
    /// a claim would take.
    ///
    /// The provided implementation reads pages and asks
    /// [`Queue::group_head`] once per group met in a page.
    fn due_page(
        &self,
        now: Timestamp,
        ignore_backoff: bool,
        after: ItemId,
        limit: usize,
    ) -> Result<Vec<Item>> {
        let mut due = Vec::new();
        let mut after = after;
        while due.len() < limit {
            let page = self.page(after, PAGE_SIZE)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            let full = page.len() == PAGE_SIZE;
            let mut heads = std::collections::HashMap::new();
            for item in page {
                if !item.is_due_unless(now, ignore_backoff) {
                    continue;
                }
                if let Some(g) = &item.group {
                    let head = match heads.get(g) {
                        Some(h) => *h,
                        None => {
                            let h = self.group_head(g)?;
                            heads.insert(g.clone(), h);
                            h
                        }
                    };
                    if head != Some(item.id) {
                        continue;
                    }
                }
                due.push(item);
                if due.len() >= limit {
                    break;
                }
            }
            if !full {
                break;
            }
        }
        Ok(due)
    }

    /// Number of pending items a replay at `now` would attempt — the items
    /// of [`Queue::due_page`] — counted up to `at_most`. Sizes a replay's
    /// progress report and `stats`' due count.
    ///
    /// The provided implementation reads [`Queue::due_page`] and stops
    /// once it has counted `at_most`: it reads no more than a replay
    /// limited to `at_most` items walks anyway. Backends that can count
    /// from indexes override it.
    fn due_count(&self, now: Timestamp, ignore_backoff: bool, at_most: Option<u64>) -> Result<u64> {
        let at_most = at_most.unwrap_or(u64::MAX);
        let mut due = 0u64;
        let mut after = 0;
        while due < at_most {
            let page = self.due_page(now, ignore_backoff, after, PAGE_SIZE)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            due = due.saturating_add(page.len() as u64);
            if page.len() < PAGE_SIZE {
                break;
            }
        }
        Ok(due.min(at_most))
    }

    /// The earliest next retry time after `now` among the pending items
    /// that are not held: when an item that is waiting for its backoff
    /// becomes due (`None` when none is waiting). Follow mode sleeps until
    /// then.
    ///
    /// The provided implementation walks the pending items page by page.
    /// Backends with an index on the retry time override it.
    fn next_retry_after(&self, now: Timestamp) -> Result<Option<Timestamp>> {
        let mut next: Option<Timestamp> = None;
        let mut after = 0;
        loop {
            let page = self.page(after, PAGE_SIZE)?;
            let Some(last) = page.last() else { break };
            after = last.id;
            for t in page
                .iter()
                .filter(|it| !it.held)
                .filter_map(|it| it.next_retry_at)
                .filter(|t| *t > now)
            {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
            if page.len() < PAGE_SIZE {
                break;
            }
        }
        Ok(next)
    }

    /// The depth bound the spool remembers, if any.
    fn max_depth(&self) -> Result<Option<u64>>;

    /// Remember a depth bound (`None`: unbounded) for every later call.
    fn set_max_depth(&self, bound: Option<u64>) -> Result<()>;

    /// The overflow policy the spool remembers.
    fn on_full(&self) -> Result<OnFull>;

    /// Remember an overflow policy (durable).
    fn set_on_full(&self, policy: OnFull) -> Result<()>;

    /// The retention window for delivered items (`None`: delivered items
    /// are deleted, the default).
    fn retain(&self) -> Result<Option<Duration>> {
        Ok(None)
    }

    /// Remember a retention window (durable). Turning it off keeps the
    /// records already retained until they expire under the old window:
    /// they are pruned as expired from then on.
    fn set_retain(&self, window: Option<Duration>) -> Result<()> {
        match window {
            None => Ok(()),
            Some(_) => Err(crate::Error::Unsupported(format!(
                "the {} backend does not retain delivered items",
                self.kind().name()
            ))),
        }
    }

    /// Up to `limit` retained delivered items with `id > after`, in id
    /// order (expired ones not yet pruned included).
    fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredItem>> {
        let _ = (after, limit);
        Ok(Vec::new())
    }

    /// One retained delivered item.
    fn delivered_get(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        let _ = id;
        Ok(None)
    }

    /// Delete up to `limit` delivered records whose window has ended, in
    /// one commit; how many. `compact` calls it until it returns 0.
    fn prune_delivered(&self, limit: usize) -> Result<u64> {
        let _ = limit;
        Ok(0)
    }

    /// The spool's RFC 4122 UUID (lowercase hyphenated), created with the
    /// spool and kept by it.
    fn uuid(&self) -> Result<String>;

    /// The highest id ever issued (0 for a new spool). Ids of new items
    /// are always greater.
    fn high_water(&self) -> Result<ItemId>;

    /// Move a pending item to the dead-letter set, with `last_error` and
    /// the current time as its time of death, in one commit. Releases its
    /// key. Returns whether it was pending.
    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool>;

    /// Up to `limit` dead letters with `id > after`, in id order.
    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>>;

    /// One dead letter.
    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>>;

    /// Number of dead letters.
    fn dead_count(&self) -> Result<u64>;

    /// Move dead letters back to pending under their own ids, attempts
    /// reset, next retry and hold cleared, keys kept; all in one commit.
    /// Returns, per id, whether it was a dead letter. Fails, changing
    /// nothing, when the result would exceed the stored depth bound or
    /// when a pending item already carries a requeued item's key.
    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>>;

    /// Delete dead letters for good, in one commit. Returns, per id,
    /// whether it was a dead letter.
    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>>;

    /// Add exported records in one commit. A record keeps its id when the
    /// id is above this spool's high-water mark (and above every id kept
    /// earlier in the batch); otherwise it gets a new id. A pending or
    /// held record whose key a pending item already carries (or an
    /// earlier record of the batch) is a dedup hit and stores nothing; so
    /// is a dead record whose key a dead letter carries, and a delivered
    /// record whose key a retained delivered item carries — counting only
    /// what the spool held before the call (the lowest such id is the
    /// hit), so that importing the same records twice adds nothing the
    /// second time. Empty keys never dedup. The depth bound is not enforced: an import
    /// moves items that were already accepted once.
    fn import(&self, records: &[Record]) -> Result<Vec<Imported>> {
        let mut out = Vec::with_capacity(records.len());
        self.import_stream(&mut records.iter().cloned().map(Ok), &mut |_, i| {
            out.push(i)
        })?;
        Ok(out)
    }

    /// [`Queue::import`] of the records `records` yields, as ONE atomic
    /// commit, without needing them all in memory at once; `each` hears
    /// of every record's result as it is decided (the results count only
    /// if this returns `Ok`). An `Err` from `records` stops the import and
    /// nothing of it is stored.
    fn import_stream(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<()>;

    /// Counts for `stats`, computed without reading every payload where
    /// the backend allows. `now` decides which items are waiting.
    fn stats(&self, now: Timestamp) -> Result<QueueStats>;

    /// The counts behind `spool shape` (SPEC §11): the items of
    /// `query.state` counted by the raw value of `query.by` and by age
    /// bucket at `query.now`, as [`crate::ops::shape::ShapeQuery::cell`]
    /// defines them. A value may come in several cells of the same bucket
    /// (the caller adds them up). Reads only; takes no lock that blocks
    /// enqueue or replay.
    ///
    /// The provided implementation walks the set page by page
    /// ([`crate::ops::shape::scan_cells`]); backends that can count in
    /// one aggregate query override it.
    fn shape_cells(
        &self,
        query: &crate::ops::shape::ShapeQuery,
    ) -> Result<Vec<crate::ops::shape::ShapeCell>> {
        crate::ops::shape::scan_cells(self, query)
    }

    // --- Push: the spool as a sending client (SPEC §7) ------------------
    //
    // An item is *in flight* once it has a push sequence number and until
    // the receiver acknowledges or rejects it. While in flight it cannot
    // be held (`set_held` fails with `InvalidInput`, changing nothing);
    // when it leaves the pending set any other way (`mark_done`,
    // `dead_letter`), its number is recorded as a skip in the same commit,
    // so that the receiver can be told to advance past it. A requeued dead
    // letter comes back without a number: it is a new entry.

    /// The push bookkeeping: highest number assigned, watermark, skips.
    fn push_state(&self) -> Result<PushState>;

    /// Up to `limit` in-flight items with a sequence number above
    /// `after_seq`, in sequence order.
    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>>;

    /// Give the next sequence numbers, in order, to those of `ids` that
    /// are pending, not held and not in flight yet, in one commit.
    /// Returns `(id, seq)` for each number given.
    fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>>;

    /// Apply a cumulative acknowledgement in one commit: `last_seq` is
    /// clamped to the highest number assigned and never moves the
    /// watermark back; every in-flight item with a number in
    /// `(watermark, last_seq]` is delivered (removed), or, when `rejected`
    /// names its number, dead-lettered with the receiver's reason; skips in
    /// that range are forgotten.
    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck>;

    /// Give the spool a new uuid — a new push client — in one commit: the
    /// in-flight items are renumbered 1, 2, … in their sequence order, the
    /// watermark goes back to 0 and the skips are dropped (a new client
    /// never had them). For a spool that was copied from another one.
    fn regenerate_uuid(&self) -> Result<String>;

    // --- Push: the spool as a receiver (`spool serve`) -------------------

    /// Run `f` in one write transaction of the receiving spool: the
    /// receiver's reads and writes through [`ReceiveTxn`] — per-client
    /// `last_seq`, digests and rejects, and enqueues under the spool's
    /// depth bound and dedup rules — commit together when `f` returns
    /// `Ok`, and not at all when it fails. `f` may apply many requests
    /// (group commit); the spool stays locked for writers while it runs.
    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()>;

    /// Every client that ever pushed to this spool, by id.
    fn push_clients(&self) -> Result<Vec<ClientSummary>>;

    /// How many clients ever pushed to this spool: the length of
    /// [`Queue::push_clients`], counted without reading each client and
    /// its rejects (`spool serve`'s `/metrics`). The provided
    /// implementation reads them; the durable backends count rows.
    fn push_client_count(&self) -> Result<u64> {
        Ok(self.push_clients()?.len() as u64)
    }

    // --- Leased replay -------------------------------------------------

    /// The leased-replay operations, for a backend whose replay is not
    /// exclusive (PostgreSQL: many replayers share one spool). `None`, the
    /// default, means replay walks the spool with [`Queue::page`] under
    /// the spool's exclusive replay lock, as the local backends do.
    fn leasing(&self) -> Option<&dyn Leasing> {
        None
    }

    // --- Push identity across export/import (SPEC §7) -------------------

    /// [`Queue::import_stream`] of an export that began with `header`,
    /// header and records in ONE atomic commit. With `adopt`, this spool
    /// takes the header's uuid and push state — only if it is fresh (no
    /// pending item, no dead letter, no push number ever assigned), else
    /// [`crate::Error::IdentityRefused`] and nothing changes. Without
    /// `adopt`, a header of this spool's own uuid merges the push states
    /// (the larger highest number, the larger watermark) and one of
    /// another uuid is ignored. When the identity is kept, a pending
    /// record keeps its `push_seq` if it is above the resulting watermark,
    /// at most the resulting highest number, and not taken; the rule is
    /// [`crate::backend::identity`]'s.
    fn import_with_identity(
        &self,
        header: &SpoolHeader,
        adopt: bool,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<IdentityOutcome>;

    /// Take another spool's identity — `uuid` becomes this spool's uuid
    /// (its push client id) and `state` its push state — in one commit.
    /// Only a fresh spool (no pending item, no dead letter, never pushed)
    /// may; any other is refused with [`crate::Error::IdentityRefused`]
    /// and left unchanged. For a spool moved to another backend or host
    /// (`spool import --identity`).
    fn adopt_identity(&self, uuid: &str, state: &PushState) -> Result<()> {
        let header = SpoolHeader {
            uuid: uuid.to_string(),
            push: state.clone(),
        };
        self.import_with_identity(&header, true, &mut std::iter::empty(), &mut |_, _| {})
            .map(|_| ())
    }
}

/// The fencing token of one claim: outcomes are recorded only while the
/// item still carries the token it was claimed with.
pub type LeaseToken = i64;

/// An item claimed for delivery under a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The item, its attempt count already including this attempt.
    pub item: Item,
    /// The claim's fencing token.
    pub token: LeaseToken,
    /// When the lease ends (the backend's clock).
    pub lease_until: Timestamp,
}

/// Leased, concurrent replay: the contract the replay engine uses on a
/// spool that any number of replayers, on any hosts, share.
///
/// A claim takes due items (not held, not in flight to a push receiver,
/// not waiting for a retry time — unless `ignore_backoff` — and not
/// leased by anyone whose lease is still running), counts the attempt on
/// each (so a replayer that dies mid-delivery still spends the item's
/// budget), and leases them until `now + lease` under the token of the
/// replay run that claims ([`Leasing::run_token`]: one per run, shared by
/// all its claims). Every outcome must present the token: once a lease
/// ran out and another replayer claimed the item, the first replayer's
/// outcome is refused (`false`, "lease lost") and changes nothing. An
/// item whose lease ran out without an outcome is due again
/// (at-least-once delivery).
///
/// One run attempts an item at most once (SPEC §4): a claim under a run's
/// token never takes an item that carries that token — one the run
/// claimed before and failed (even with `ignore_backoff`, or a retry time
/// already past) — unless the run gave it back ([`Leasing::release`]).
pub trait Leasing: Send + Sync {
    /// A new token for one replay run: every claim of the run
    /// ([`Leasing::claim_for`]) leases under it. Tokens are never reused.
    fn run_token(&self) -> Result<LeaseToken>;

    /// Claim up to `limit` due items, oldest first, leased for `lease`
    /// under the run's token `run`, leaving out the items that already
    /// carry `run` (attempted in this run).
    fn claim_for(
        &self,
        run: LeaseToken,
        limit: usize,
        lease: Duration,
        ignore_backoff: bool,
    ) -> Result<Vec<Claimed>>;

    /// One claim as a run of its own: [`Leasing::claim_for`] under a new
    /// [`Leasing::run_token`].
    fn claim(&self, limit: usize, lease: Duration, ignore_backoff: bool) -> Result<Vec<Claimed>> {
        let run = self.run_token()?;
        self.claim_for(run, limit, lease, ignore_backoff)
    }

    /// Record delivered items as done (removed, or retained with their
    /// evidence as [`Queue::deliver`] does), in one commit. Returns, per
    /// item, whether its lease was still ours.
    fn complete(&self, done: &[(ItemId, LeaseToken, Evidence)]) -> Result<Vec<bool>>;

    /// Record a failed attempt: due again `retry_in` from now (the
    /// backend's clock), with `last_error`; the lease ends. Whether the
    /// lease was still ours.
    fn retry_later(
        &self,
        id: ItemId,
        token: LeaseToken,
        retry_in: Duration,
        last_error: &str,
    ) -> Result<bool>;

    /// Move a claimed item to the dead-letter set. Whether the lease was
    /// still ours.
    fn dead_letter_claimed(&self, id: ItemId, token: LeaseToken, last_error: &str) -> Result<bool>;

    /// Move a claimed item to the dead-letter set without delivering it
    /// (its attempts already reached the budget): as
    /// [`Leasing::dead_letter_claimed`], with the attempt counted at the
    /// claim taken back. Whether the lease was still ours.
    fn dead_letter_unattempted(
        &self,
        id: ItemId,
        token: LeaseToken,
        last_error: &str,
    ) -> Result<bool>;

    /// Give claimed items back undelivered (a stop, a deadline): the lease
    /// ends, the attempt counted at the claim is taken back, and the item
    /// no longer carries the run's token (the run may claim it again).
    fn release(&self, claims: &[(ItemId, LeaseToken)]) -> Result<()>;

    /// Pending items a replay skips now: `(held, waiting)` where waiting
    /// counts items whose retry time (unless `ignore_backoff`) or someone
    /// else's lease has not run out.
    fn skipped_now(&self, ignore_backoff: bool) -> Result<(u64, u64)>;

    /// The items whose lease has not run out (a replayer holds them now),
    /// with the time each lease ends: ids above `after`, ascending, at
    /// most `limit`. What `spool list` shows of them.
    fn leases_after(&self, after: ItemId, limit: usize) -> Result<Vec<(ItemId, Timestamp)>>;

    /// Take the spool's exclusive replay lock (`--ordered`, `--push`),
    /// waiting up to `wait`; [`crate::Error::ReplayLocked`] when another
    /// process keeps it. Held until [`Leasing::unlock_exclusive`] or the
    /// end of the connection.
    fn lock_exclusive(&self, wait: Duration) -> Result<()>;

    /// Release the lock [`Leasing::lock_exclusive`] took.
    fn unlock_exclusive(&self) -> Result<()>;

    /// Block until an enqueue into this spool commits (a notification) or
    /// `timeout` passes; `true` when woken by an enqueue. A notification
    /// is a hint: a caller polls the spool after every wake-up and after
    /// every timeout alike.
    fn wait_for_enqueue(&self, timeout: Duration) -> Result<bool>;
}

// --- Push identity across export/import (SPEC §7) -------------------

/// The first line of an export: who the exporting spool is as a push
/// client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpoolHeader {
    /// The exporting spool's uuid (lowercase, hyphenated).
    pub uuid: String,
    /// Its push state when the export began.
    pub push: PushState,
}

impl SpoolHeader {
    /// Check what a header must satisfy: an RFC 4122 uuid in its
    /// lowercase hyphenated form, a watermark at most the highest number
    /// assigned, and skips ascending within `(acked, last_assigned]`.
    pub fn check(&self) -> std::result::Result<(), String> {
        match uuid::Uuid::parse_str(&self.uuid) {
            Ok(u) if u.hyphenated().to_string() == self.uuid => {}
            _ => {
                return Err(format!(
                    "spool header: uuid {:?} is not a lowercase hyphenated RFC 4122 uuid",
                    self.uuid
                ))
            }
        }
        let p = &self.push;
        if p.acked > p.last_assigned {
            return Err(format!(
                "spool header: push acked {} is above last_assigned {}",
                p.acked, p.last_assigned
            ));
        }
        let mut prev = p.acked;
        for &s in &p.skips {
            if s <= prev || s > p.last_assigned {
                return Err(format!(
                    "spool header: push skips must be ascending numbers in {}..={}, not {s}",
                    p.acked + 1,
                    p.last_assigned
                ));
            }
            prev = s;
        }
        Ok(())
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderLine {
    spool: HeaderSpool,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderSpool {
    uuid: String,
    push: HeaderPush,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderPush {
    last_assigned: u64,
    acked: u64,
    #[serde(default)]
    skips: Vec<u64>,
}

impl SpoolHeader {
    /// The header as the first line of an export, without the newline:
    /// `{"spool":{"uuid":"…","push":{"last_assigned":N,"acked":M,"skips":[…]}}}`.
    pub fn to_line(&self) -> String {
        let line = HeaderLine {
            spool: HeaderSpool {
                uuid: self.uuid.clone(),
                push: HeaderPush {
                    last_assigned: self.push.last_assigned,
                    acked: self.push.acked,
                    skips: self.push.skips.clone(),
                },
            },
        };
        // Strings and numbers only: serializing cannot fail.
        serde_json::to_string(&line).unwrap_or_default()
    }

    /// True when `line` is meant as a header: a JSON object with a
    /// `spool` field (an item record never has one).
    pub fn is_header(line: &[u8]) -> bool {
        serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(line)
            .is_ok_and(|m| m.contains_key("spool"))
    }

    /// Parse and [check](SpoolHeader::check) a header line. Unknown
    /// fields are errors; `skips` may be left out.
    pub fn parse_line(line: &[u8]) -> std::result::Result<SpoolHeader, String> {
        let h: HeaderLine = serde_json::from_slice(line).map_err(|e| {
            let why = crate::ops::json::line_error(
                &e,
                r#"{"spool": {"uuid": "…", "push": {"last_assigned": 0, "acked": 0}}}"#,
            );
            format!("spool header: {why}")
        })?;
        let header = SpoolHeader {
            uuid: h.spool.uuid,
            push: PushState {
                last_assigned: h.spool.push.last_assigned,
                acked: h.spool.push.acked,
                skips: h.spool.push.skips,
            },
        };
        header.check()?;
        Ok(header)
    }
}

/// What [`crate::Queue::import_with_identity`] did with the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityOutcome {
    /// The target took the header's uuid and push state (`--identity`).
    Adopted,
    /// The target has the header's uuid: push states merged, in-flight
    /// numbers kept.
    Kept,
    /// The uuids differ: the header was ignored, the records came in
    /// unsent.
    Ignored,
}

#[cfg(test)]
mod tests {
    use super::*;

    const U1: &str = "3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10";

    fn push(last_assigned: u64, acked: u64) -> PushState {
        PushState {
            last_assigned,
            acked,
            skips: Vec::new(),
        }
    }

    #[test]
    fn headers_are_checked() {
        let ok = SpoolHeader {
            uuid: U1.into(),
            push: push(5, 2),
        };
        assert!(ok.check().is_ok());
        for bad in [
            SpoolHeader {
                uuid: U1.to_uppercase(),
                ..ok.clone()
            },
            SpoolHeader {
                uuid: "x".into(),
                ..ok.clone()
            },
            SpoolHeader {
                push: push(2, 5),
                ..ok.clone()
            },
            SpoolHeader {
                push: PushState {
                    skips: vec![2],
                    ..push(5, 2)
                },
                ..ok.clone()
            },
            SpoolHeader {
                push: PushState {
                    skips: vec![4, 3],
                    ..push(5, 2)
                },
                ..ok.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn header_lines_round_trip() {
        let h = SpoolHeader {
            uuid: U1.into(),
            push: PushState {
                skips: vec![5],
                ..push(7, 4)
            },
        };
        let line = h.to_line();
        assert_eq!(
            line,
            format!(
                r#"{{"spool":{{"uuid":"{U1}","push":{{"last_assigned":7,"acked":4,"skips":[5]}}}}}}"#
            )
        );
        assert!(SpoolHeader::is_header(line.as_bytes()));
        assert_eq!(SpoolHeader::parse_line(line.as_bytes()).unwrap(), h);
        let short =
            format!(r#"{{"spool":{{"uuid":"{U1}","push":{{"last_assigned":7,"acked":4}}}}}}"#);
        assert_eq!(
            SpoolHeader::parse_line(short.as_bytes()).unwrap().push,
            push(7, 4)
        );
        assert!(!SpoolHeader::is_header(br#"{"id":1,"payload":"a"}"#));
        for bad in [
            format!(
                r#"{{"spool":{{"uuid":"{U1}","push":{{"last_assigned":7,"acked":4}},"x":1}}}}"#
            ),
            format!(r#"{{"spool":{{"uuid":"{U1}"}}}}"#),
            format!(r#"{{"spool":{{"uuid":"{U1}","push":{{"last_assigned":1,"acked":4}}}}}}"#),
            r#"{"spool":{"uuid":"nope","push":{"last_assigned":0,"acked":0}}}"#.to_string(),
        ] {
            assert!(SpoolHeader::parse_line(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
