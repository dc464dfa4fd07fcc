//! The enqueue path of the PostgreSQL backend: runs of plain items in
//! multi-row inserts, coalescing and eviction item by item, dedup against
//! pending and retained keys, the depth bound, all under the spool row
//! lock.

use super::conn::Tx;
use super::rows::{id_param, text, u64_of};
use super::PostgresQueue;
use crate::backend::policy::{self, EnqueueStore, Limit};
use crate::error::{Error, Result};
use crate::item::{DepthLimit, EnqueueOptions, Enqueued, ItemId, NewItem, OnFull};
use std::borrow::Cow;
use std::collections::HashMap;

/// Rows per multi-row INSERT of a batch.
const ROWS_PER_INSERT: usize = 1000;
/// Payload bytes per multi-row INSERT of a batch.
const BYTES_PER_INSERT: usize = 8 << 20;

/// The running state of one enqueue transaction (the spool row is locked,
/// so these numbers are exact).
struct Batch {
    /// Pending items when the enqueue began (reported by `QueueFull`).
    start_depth: u64,
    /// Pending items now.
    depth: u64,
    /// The highest id issued.
    high_water: ItemId,
    /// Items stored minus items coalesced away (evictions adjust the
    /// counts themselves).
    added: i64,
    /// Items evicted.
    evicted: i64,
    /// The retention window in milliseconds (`None`: off): a key no
    /// pending item carries is a dedup hit while a delivered row with it
    /// is inside the window (SPEC §9).
    retain_ms: Option<i64>,
}

impl PostgresQueue {
    /// Enqueue what `items` yields inside `tx` (SPEC §2, §9), telling
    /// `each` every result: runs of plain items go to the table in
    /// multi-row inserts (dedup against the table and within the run, the
    /// bound checked per item); an item with a coalesce key, and every
    /// item while `drop-oldest` applies under a bound, goes alone through
    /// [`PostgresQueue::enqueue_one`], after what came before it is
    /// stored. The spool row is locked first, so concurrent producers of
    /// one spool take turns and every decision sees the others' commits.
    pub(super) fn enqueue_in<'a>(
        &self,
        tx: &mut Tx<'_>,
        items: &mut dyn Iterator<Item = Result<Cow<'a, NewItem>>>,
        opts: &EnqueueOptions,
        each: &mut dyn FnMut(Enqueued),
    ) -> Result<()> {
        let spool = self.lock_spool(tx)?;
        let bound = match opts.depth_limit {
            DepthLimit::Stored => spool.max_depth,
            DepthLimit::Override(b) => b,
        };
        let evicting = spool.on_full == OnFull::DropOldest && bound.is_some();
        let mut b = Batch {
            start_depth: spool.depth,
            depth: spool.depth,
            high_water: spool.high_water,
            added: 0,
            evicted: 0,
            retain_ms: spool.retain_ms,
        };
        let mut chunk: Vec<Cow<'a, NewItem>> = Vec::new();
        let mut chunk_bytes = 0usize;
        loop {
            let item = items.next().transpose()?;
            if let Some(it) = &item {
                crate::item::check_key(&it.key)?;
            }
            let end = item.is_none();
            let mut alone = None;
            if let Some(it) = item {
                if evicting || it.coalesce_key.is_some() {
                    alone = Some(it);
                } else {
                    chunk_bytes += it.payload.len();
                    chunk.push(it);
                }
            }
            let flush = end
                || alone.is_some()
                || chunk.len() >= ROWS_PER_INSERT
                || chunk_bytes >= BYTES_PER_INSERT;
            if flush && !chunk.is_empty() {
                self.store_chunk(tx, &chunk, bound, &mut b, each)?;
                chunk.clear();
                chunk_bytes = 0;
                crate::debug::crash_point("batch-item");
            }
            if let Some(it) = alone {
                each(self.enqueue_one(tx, &it, bound, spool.on_full, &mut b)?);
                crate::debug::crash_point("batch-item");
            }
            if end {
                break;
            }
        }
        if b.evicted > 0 {
            tx.execute(
                "UPDATE {s}.spools SET evicted_total = evicted_total + $2 WHERE name = $1",
                &[self.spool(), &b.evicted],
            )?;
        }
        if b.high_water > spool.high_water || b.added != 0 {
            self.adjust_and_notify(tx, b.high_water, b.added, 0)?;
        }
        // Expired delivered records, a bounded batch (SPEC §9); an
        // enqueue retains nothing, so with none kept there is none.
        if spool.retained > 0 {
            self.prune_in(tx, spool.retain_ms, crate::item::PRUNE_BATCH)?;
        }
        Ok(())
    }

    /// Store `chunk`, items that neither coalesce nor evict: dedup against
    /// the table (earlier chunks are in it) and within the chunk, the
    /// bound checked per new item, one multi-row insert.
    fn store_chunk(
        &self,
        tx: &mut Tx<'_>,
        chunk: &[Cow<'_, NewItem>],
        bound: Option<u64>,
        b: &mut Batch,
        each: &mut dyn FnMut(Enqueued),
    ) -> Result<()> {
        let keys: Vec<&[u8]> = chunk
            .iter()
            .filter(|i| !i.key.is_empty())
            .map(|i| i.key.as_bytes())
            .collect();
        let owners = self.key_owners(tx, &keys)?;
        // Keys no pending item carries may belong to a retained delivered
        // item (a pending owner wins).
        let retained = match b.retain_ms {
            Some(w) => {
                let unowned: Vec<&[u8]> = keys
                    .iter()
                    .copied()
                    .filter(|k| !owners.contains_key(*k))
                    .collect();
                self.delivered_owners(tx, &unowned, w)?
            }
            None => HashMap::new(),
        };
        let mut in_chunk: HashMap<&str, ItemId> = HashMap::new();
        let mut fresh: Vec<(ItemId, &NewItem)> = Vec::new();
        let mut results = Vec::with_capacity(chunk.len());
        for it in chunk {
            if !it.key.is_empty() {
                if let Some(&id) = owners
                    .get(it.key.as_bytes())
                    .or_else(|| in_chunk.get(it.key.as_str()))
                {
                    results.push(Enqueued::dedup(id));
                    continue;
                }
                if let Some(&id) = retained.get(it.key.as_bytes()) {
                    results.push(Enqueued::delivered(id));
                    continue;
                }
            }
            if let Some(bound) = bound {
                if b.depth >= bound {
                    return Err(Error::QueueFull {
                        max_depth: bound,
                        depth: b.start_depth,
                    });
                }
            }
            b.high_water = policy::next_id(b.high_water)?;
            b.depth += 1;
            b.added += 1;
            if !it.key.is_empty() {
                in_chunk.insert(&it.key, b.high_water);
            }
            fresh.push((b.high_water, it.as_ref()));
            results.push(Enqueued::fresh(b.high_water));
        }
        self.insert_fresh(tx, &fresh)?;
        results.into_iter().for_each(each);
        Ok(())
    }

    /// Store one item that may coalesce or evict (SPEC §9), as the memory
    /// and SQLite backends do: a dedup hit stores and replaces nothing;
    /// otherwise the pending items it replaces go (same coalesce key,
    /// never attempted, not in flight, not leased), then, while the spool
    /// is full, `drop-oldest` moves the oldest evictable item to the dead
    /// letters, or the enqueue fails with [`Error::QueueFull`].
    fn enqueue_one(
        &self,
        tx: &mut Tx<'_>,
        it: &NewItem,
        bound: Option<u64>,
        on_full: OnFull,
        b: &mut Batch,
    ) -> Result<Enqueued> {
        let limit = Limit {
            bound,
            on_full,
            depth_before: b.start_depth,
        };
        policy::enqueue_one(&mut Enqueuing { q: self, tx, b }, Cow::Borrowed(it), &limit)
    }

    /// The oldest pending item `drop-oldest` may evict: not held, not in
    /// flight, not leased by a replayer whose lease still runs. Locked
    /// (`FOR UPDATE`): a claim changing it meanwhile is waited for, and
    /// the row re-read.
    pub(super) fn oldest_evictable(&self, tx: &mut Tx<'_>) -> Result<Option<ItemId>> {
        let row = tx.query_opt(
            "SELECT id FROM {s}.items WHERE spool = $1 AND NOT held AND push_seq IS NULL \
             AND (lease_until IS NULL OR lease_until <= COALESCE($2::int8, {now})) \
             ORDER BY id LIMIT 1 FOR UPDATE",
            &[self.spool(), &self.now_param()],
        )?;
        Ok(row.map(|r| u64_of(r.get(0))))
    }

    /// Insert fresh items (id, item) enqueued now.
    pub(super) fn insert_fresh(&self, tx: &mut Tx<'_>, rows: &[(ItemId, &NewItem)]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let f = Fresh::of(rows);
        let now = self.now_param();
        tx.execute(
            "INSERT INTO {s}.items (spool, id, payload, key, enqueued_at, grp, coalesce_key) \
             SELECT $1, t.id, t.p, t.k, (COALESCE($5::int8, {now}) / 1000) * 1000, t.g, t.c \
             FROM unnest($2::int8[], $3::bytea[], $4::bytea[], $6::text[], $7::text[]) AS t(id, p, k, g, c)",
            &[self.spool(), &f.ids, &f.payloads, &f.keys, &now, &f.groups, &f.coalesce],
        )?;
        Ok(())
    }

    /// [`PostgresQueue::insert_fresh`] of `rows` (not empty), then
    /// [`PostgresQueue::adjust_and_notify`] with `high_water` and `depth`,
    /// in one statement: one round trip while the spool row is locked.
    pub(super) fn insert_fresh_and_adjust(
        &self,
        tx: &mut Tx<'_>,
        rows: &[(ItemId, &NewItem)],
        high_water: u64,
        depth: i64,
    ) -> Result<()> {
        let f = Fresh::of(rows);
        let now = self.now_param();
        let ch = super::channel(&self.target.schema);
        tx.query(
            "WITH i AS (INSERT INTO {s}.items (spool, id, payload, key, enqueued_at, grp, coalesce_key) \
             SELECT $1, t.id, t.p, t.k, (COALESCE($5::int8, {now}) / 1000) * 1000, t.g, t.c \
             FROM unnest($2::int8[], $3::bytea[], $4::bytea[], $6::text[], $7::text[]) AS t(id, p, k, g, c)), \
             u AS (UPDATE {s}.spools SET high_water = greatest(high_water, $8), depth = depth + $9 \
             WHERE name = $1 RETURNING 1) \
             SELECT pg_notify($10, $1) FROM u",
            &[
                self.spool(),
                &f.ids,
                &f.payloads,
                &f.keys,
                &now,
                &f.groups,
                &f.coalesce,
                &id_param(high_water),
                &depth,
                &ch,
            ],
        )?;
        Ok(())
    }
}

/// The columns of fresh rows, as the arrays of an `unnest` insert.
struct Fresh<'a> {
    ids: Vec<i64>,
    payloads: Vec<&'a [u8]>,
    keys: Vec<&'a [u8]>,
    groups: Vec<Option<String>>,
    coalesce: Vec<Option<String>>,
}

impl<'a> Fresh<'a> {
    fn of(rows: &[(ItemId, &'a NewItem)]) -> Fresh<'a> {
        Fresh {
            ids: rows.iter().map(|(id, _)| id_param(*id)).collect(),
            payloads: rows.iter().map(|(_, it)| it.payload.as_slice()).collect(),
            keys: rows.iter().map(|(_, it)| it.key.as_bytes()).collect(),
            groups: rows
                .iter()
                .map(|(_, it)| it.group.as_deref().map(text))
                .collect(),
            coalesce: rows
                .iter()
                .map(|(_, it)| it.coalesce_key.as_deref().map(text))
                .collect(),
        }
    }
}

/// The spool, inside an enqueue's transaction (its row locked), as the
/// storage of [`policy::enqueue_one`]; `b` keeps the counts.
struct Enqueuing<'a, 't> {
    q: &'a PostgresQueue,
    tx: &'a mut Tx<'t>,
    b: &'a mut Batch,
}

impl EnqueueStore for Enqueuing<'_, '_> {
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        self.q.key_owner(self.tx, key)
    }

    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        match self.b.retain_ms {
            Some(w) => self.q.delivered_owner(self.tx, key, w),
            None => Ok(None),
        }
    }

    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>> {
        let ids = self.q.coalesce(self.tx, ck)?;
        let n = ids.len() as u64;
        self.b.depth = self.b.depth.saturating_sub(n);
        self.b.added -= n as i64;
        Ok(ids)
    }

    fn depth(&mut self) -> Result<u64> {
        Ok(self.b.depth)
    }

    fn oldest_evictable(&mut self) -> Result<Option<ItemId>> {
        self.q.oldest_evictable(self.tx)
    }

    fn evict(&mut self, id: ItemId, reason: &str) -> Result<()> {
        if !self.q.kill(self.tx, id, reason, false, None, false)? {
            return Err(Error::Internal(format!(
                "item {id} to evict from {} vanished under the spool lock",
                self.q.display
            )));
        }
        self.b.depth -= 1;
        self.b.evicted += 1;
        Ok(())
    }

    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId> {
        self.b.high_water = policy::next_id(self.b.high_water)?;
        let id = self.b.high_water;
        self.q.insert_fresh(self.tx, &[(id, &it)])?;
        self.b.depth += 1;
        self.b.added += 1;
        Ok(id)
    }
}
