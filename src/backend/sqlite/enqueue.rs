//! The enqueue path of the SQLite backend: batches that neither coalesce
//! nor evict in multi-row inserts, the others item by item through
//! [`policy::enqueue_one`], with dedup against pending and retained keys
//! and the depth bound, all in the enqueue's one write transaction.

use super::db::Db;
use super::rows::payload_value;
use crate::backend::policy::{self, EnqueueStore, Limit};
use crate::backend::sql::SqlStore;
use crate::error::{Error, Result};
use crate::item::{
    BatchResults, DepthLimit, EnqueueOptions, Enqueued, Item, ItemId, NewItem, OnFull, PRUNE_BATCH,
};
use crate::time::Timestamp;
use std::borrow::Cow;
use std::collections::HashMap;

/// Fresh items per multi-row INSERT (see [`Db::insert_fresh`]); with
/// [`FRESH_COLUMNS`] parameters each, far below SQLite's parameter limit.
const FRESH_ROWS_PER_INSERT: usize = 64;
/// Parameters per row of a fresh insert.
const FRESH_COLUMNS: usize = 5;

/// `INSERT` of `rows` fresh items: id, payload, key, enqueue time.
fn fresh_insert_sql(rows: usize) -> String {
    multi_row_sql(
        "INSERT INTO morph_offline_queue (id, payload, idempotency_key, enqueued_at, group_name) VALUES ",
        rows,
        FRESH_COLUMNS,
    )
}

/// `head` followed by `rows` groups of `columns` parameters.
pub(super) fn multi_row_sql(head: &str, rows: usize, columns: usize) -> String {
    let mut sql = String::with_capacity(head.len() + rows * (2 * columns + 2));
    sql.push_str(head);
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push('(');
        for c in 0..columns {
            if c > 0 {
                sql.push(',');
            }
            sql.push('?');
        }
        sql.push(')');
    }
    sql
}

impl Db<'_> {
    /// Remove the pending items a new item with coalesce key `ck` replaces
    /// (never attempted, not in flight; SPEC §9), returning their ids in
    /// id order.
    pub fn coalesce(&self, ck: &str) -> Result<Vec<ItemId>> {
        let mut ids: Vec<ItemId> = self.rows(
            "DELETE FROM morph_offline_queue \
                 WHERE coalesce_key = ?1 AND attempts = 0 AND push_seq IS NULL RETURNING id",
            [ck],
            |r| r.get::<_, i64>(0).map(|v| v.max(0) as u64),
        )?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// How many pending items [`Db::coalesce`] would remove.
    pub fn coalescible_count(&self, ck: &str) -> Result<u64> {
        self.row(
            "SELECT count(*) FROM morph_offline_queue \
                 WHERE coalesce_key = ?1 AND attempts = 0 AND push_seq IS NULL",
            [ck],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n.max(0) as u64)
    }

    /// The oldest pending item `drop-oldest` may evict: not held, not in
    /// flight.
    pub fn oldest_evictable(&self) -> Result<Option<ItemId>> {
        self.first(
            "SELECT id FROM morph_offline_queue WHERE held = 0 AND push_seq IS NULL \
                 ORDER BY id LIMIT 1",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|v| v.map(|v| v.max(0) as u64))
    }

    /// Store freshly enqueued items under the given ids: no attempts, no
    /// backoff, not held, so only the reference columns are written and
    /// the rest take their defaults.
    ///
    /// Rows go [`FRESH_ROWS_PER_INSERT`] to a statement: one multi-row
    /// INSERT opens the table and index cursors once for all of them,
    /// which is most of what a one-row INSERT costs beyond the B-tree
    /// work itself.
    pub fn insert_fresh(&self, rows: &[(ItemId, &NewItem)], enqueued_at: Timestamp) -> Result<()> {
        let at = enqueued_at.as_secs();
        let mut chunks = rows.chunks_exact(FRESH_ROWS_PER_INSERT);
        if rows.len() >= FRESH_ROWS_PER_INSERT {
            let mut stmt = self
                .conn
                .prepare_cached(&fresh_insert_sql(FRESH_ROWS_PER_INSERT))
                .map_err(|e| self.err(e))?;
            for chunk in &mut chunks {
                self.bind_fresh(&mut stmt, chunk, at)?;
                stmt.raw_execute().map_err(|e| self.err(e))?;
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut stmt = self
                .conn
                .prepare_cached(&fresh_insert_sql(1))
                .map_err(|e| self.err(e))?;
            for row in rest {
                self.bind_fresh(&mut stmt, std::slice::from_ref(row), at)?;
                stmt.raw_execute().map_err(|e| self.err(e))?;
            }
        }
        self.count_inserted(rows.len() as u64)
    }

    /// Bind `rows` to the parameters of a [`fresh_insert_sql`] statement.
    fn bind_fresh(
        &self,
        stmt: &mut rusqlite::Statement<'_>,
        rows: &[(ItemId, &NewItem)],
        at: i64,
    ) -> Result<()> {
        for (i, (id, item)) in rows.iter().enumerate() {
            let first = i * FRESH_COLUMNS + 1;
            let id = self.insert_id(*id)?;
            stmt.raw_bind_parameter(first, id)
                .and_then(|()| stmt.raw_bind_parameter(first + 1, payload_value(&item.payload)))
                .and_then(|()| stmt.raw_bind_parameter(first + 2, item.key.as_str()))
                .and_then(|()| stmt.raw_bind_parameter(first + 3, at))
                .and_then(|()| stmt.raw_bind_parameter(first + 4, item.group.as_deref()))
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }
}

/// The bound and overflow policy an enqueue works under.
struct Policy {
    bound: Option<u64>,
    on_full: OnFull,
    /// The retention window: a retained delivered item's key dedups.
    retain: Option<std::time::Duration>,
    /// The depth before the batch (what a refusal reports: the batch
    /// changes nothing then).
    depth_before: u64,
}

impl Policy {
    fn read(db: &Db<'_>, opts: &EnqueueOptions) -> Result<Policy> {
        let bound = match opts.depth_limit {
            DepthLimit::Stored => db.max_depth()?,
            DepthLimit::Override(b) => b,
        };
        Ok(Policy {
            bound,
            on_full: db.on_full()?,
            retain: db.retain()?,
            depth_before: match bound {
                Some(_) => db.pending_count()?,
                None => 0,
            },
        })
    }

    /// Items are stored one by one (coalescing, or eviction under a bound)
    /// rather than in multi-row inserts.
    fn per_item(&self, coalescing: bool) -> bool {
        coalescing || (self.on_full == OnFull::DropOldest && self.bound.is_some())
    }

    /// Store one item that may coalesce or evict (SPEC §9) inside the
    /// enqueue's transaction: [`policy::enqueue_one`].
    fn enqueue_one(&self, db: &Db<'_>, it: &NewItem, now: Timestamp) -> Result<Enqueued> {
        let limit = Limit {
            bound: self.bound,
            on_full: self.on_full,
            depth_before: self.depth_before,
        };
        let mut s = Enqueuing {
            db,
            now,
            retain: self.retain,
        };
        policy::enqueue_one(&mut s, Cow::Borrowed(it), &limit)
    }
}

/// The SQLite spool, inside an enqueue's transaction, as the storage of
/// [`policy::enqueue_one`].
struct Enqueuing<'a, 'c> {
    db: &'a Db<'c>,
    now: Timestamp,
    retain: Option<std::time::Duration>,
}

impl EnqueueStore for Enqueuing<'_, '_> {
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        self.db.key_owner(key)
    }

    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        self.db.delivered_owner(key, self.now, self.retain)
    }

    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>> {
        self.db.coalesce(ck)
    }

    fn depth(&mut self) -> Result<u64> {
        self.db.pending_count()
    }

    fn oldest_evictable(&mut self) -> Result<Option<ItemId>> {
        self.db.oldest_evictable()
    }

    fn evict(&mut self, id: ItemId, reason: &str) -> Result<()> {
        self.db.kill(id, reason, self.now)?;
        self.db.add_evicted(1)
    }

    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId> {
        let id = policy::next_id(self.db.high_water()?)?;
        self.db.insert_pending(&Item::from_new(id, &it, self.now))?;
        Ok(id)
    }
}

/// Store `items` in the open write transaction, as of `now` (see
/// [`crate::Queue::enqueue_batch`]).
pub(super) fn enqueue_batch(
    db: &Db<'_>,
    items: &[NewItem],
    opts: &EnqueueOptions,
    now: Timestamp,
) -> Result<Vec<Enqueued>> {
    let policy = Policy::read(db, opts)?;
    db.prune_delivered(now, policy.retain, PRUNE_BATCH)?;
    if policy.per_item(items.iter().any(|i| i.coalesce_key.is_some())) {
        return items
            .iter()
            .map(|it| policy.enqueue_one(db, it, now))
            .collect();
    }
    /// What one item of the batch does.
    enum Plan {
        Dedup(ItemId),
        Delivered(ItemId),
        SameAs(usize),
        Store,
    }
    let mut plans = Vec::with_capacity(items.len());
    let mut first_with_key: HashMap<&str, usize> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        let plan = if it.key.is_empty() {
            Plan::Store
        } else if let Some(id) = db.key_owner(&it.key)? {
            Plan::Dedup(id)
        } else if let Some(id) = db.delivered_owner(&it.key, now, policy.retain)? {
            Plan::Delivered(id)
        } else if let Some(&j) = first_with_key.get(it.key.as_str()) {
            Plan::SameAs(j)
        } else {
            first_with_key.insert(&it.key, i);
            Plan::Store
        };
        plans.push(plan);
    }
    let fresh = plans.iter().filter(|p| matches!(p, Plan::Store)).count() as u64;
    let bound = match opts.depth_limit {
        _ if fresh == 0 => None,
        DepthLimit::Stored => db.max_depth()?,
        DepthLimit::Override(b) => b,
    };
    if let Some(bound) = bound {
        let depth = db.pending_count()?;
        if depth.saturating_add(fresh) > bound {
            return Err(Error::QueueFull {
                max_depth: bound,
                depth,
            });
        }
    }
    let mut next = db.high_water()?;
    let mut results: Vec<Enqueued> = Vec::with_capacity(items.len());
    let mut fresh_rows: Vec<(ItemId, &NewItem)> = Vec::with_capacity(fresh as usize);
    for (it, plan) in items.iter().zip(&plans) {
        let result = match *plan {
            Plan::Dedup(id) => Enqueued::dedup(id),
            Plan::Delivered(id) => Enqueued::delivered(id),
            Plan::SameAs(j) => Enqueued {
                id: results
                    .get(j)
                    .map(|r| r.id)
                    .ok_or_else(|| Error::Internal("batch dedup out of order".into()))?,
                deduplicated: true,
                ..Default::default()
            },
            Plan::Store => {
                next = policy::next_id(next)?;
                fresh_rows.push((next, it));
                Enqueued::fresh(next)
            }
        };
        results.push(result);
    }
    db.insert_fresh(&fresh_rows, now)?;
    Ok(results)
}

/// Store the items `items` yields in the open write transaction, as of
/// `now` (see [`crate::Queue::enqueue_stream`]).
pub(super) fn enqueue_stream(
    db: &Db<'_>,
    items: &mut dyn Iterator<Item = Result<NewItem>>,
    opts: &EnqueueOptions,
    now: Timestamp,
) -> Result<BatchResults> {
    // One transaction, filled as the items come: fresh rows go to
    // the table FRESH_ROWS_PER_INSERT at a time, so a key repeated
    // within the rows not inserted yet is looked up among them.
    let policy = Policy::read(db, opts)?;
    db.prune_delivered(now, policy.retain, PRUNE_BATCH)?;
    let bound = policy.bound;
    let evicting = policy.per_item(false);
    let mut depth = policy.depth_before;
    // Nothing was inserted yet: the mark the write's first read
    // found (a prune only deletes records below it).
    let mut next = db.high_water_at_start()?;
    let mut results = BatchResults::default();
    let mut fresh: u64 = 0;
    let mut chunk: Vec<(ItemId, NewItem)> = Vec::with_capacity(FRESH_ROWS_PER_INSERT);
    let mut chunk_keys: HashMap<String, ItemId> = HashMap::new();
    let flush =
        |chunk: &mut Vec<(ItemId, NewItem)>, keys: &mut HashMap<String, ItemId>| -> Result<()> {
            let rows: Vec<(ItemId, &NewItem)> = chunk.iter().map(|(id, it)| (*id, it)).collect();
            db.insert_fresh(&rows, now)?;
            chunk.clear();
            keys.clear();
            Ok(())
        };
    for item in items {
        let item = crate::item::checked_item(item?)?;
        if evicting || item.coalesce_key.is_some() {
            // Coalescing and eviction look at what is stored: store
            // what came before first.
            flush(&mut chunk, &mut chunk_keys)?;
            let e = policy.enqueue_one(db, &item, now)?;
            next = next.max(e.id);
            results.push(e);
            if bound.is_some() {
                depth = db.pending_count()?;
                fresh = 0;
            }
            crate::debug::crash_point("batch-item");
            continue;
        }
        if !item.key.is_empty() {
            let owner = match chunk_keys.get(&item.key) {
                Some(id) => Some(*id),
                None => db.key_owner(&item.key)?,
            };
            if let Some(id) = owner {
                results.push(Enqueued::dedup(id));
                continue;
            }
            if let Some(id) = db.delivered_owner(&item.key, now, policy.retain)? {
                results.push(Enqueued::delivered(id));
                continue;
            }
        }
        fresh += 1;
        if let Some(bound) = bound {
            if depth.saturating_add(fresh) > bound {
                return Err(Error::QueueFull {
                    max_depth: bound,
                    depth: policy.depth_before,
                });
            }
        }
        next = policy::next_id(next)?;
        if !item.key.is_empty() {
            chunk_keys.insert(item.key.clone(), next);
        }
        chunk.push((next, item));
        results.push(Enqueued::fresh(next));
        if chunk.len() == FRESH_ROWS_PER_INSERT {
            flush(&mut chunk, &mut chunk_keys)?;
        }
        crate::debug::crash_point("batch-item");
    }
    flush(&mut chunk, &mut chunk_keys)?;
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::multi_row_sql;

    #[test]
    fn multi_row_sql_has_one_group_per_row() {
        assert_eq!(multi_row_sql("V ", 1, 1), "V (?)");
        assert_eq!(multi_row_sql("V ", 2, 3), "V (?,?,?),(?,?,?)");
    }
}
