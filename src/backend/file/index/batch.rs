//! The temporary tables a streamed batch plans with (its keys, the items
//! it stored and removed), and the planning queries that read them with
//! the index: dedup, coalescing, eviction. Temporary tables live outside
//! the spool directory and are never part of the shared index.

use super::{to_i64, u, Index};
use crate::error::Result;
use crate::item::ItemId;
use rusqlite::{params, OptionalExtension};

impl Index {
    /// Make the (temporary) table of a batch's keys ready.
    pub fn batch_keys_begin(&self) -> Result<()> {
        self.conn
            .execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS batch_keys (key TEXT PRIMARY KEY, id INTEGER NOT NULL); \
                 DELETE FROM temp.batch_keys;",
            )
            .map_err(self.err("prepare a batch in"))
    }

    /// The id a key of the batch was stored under.
    pub fn batch_key(&self, key: &str) -> Result<Option<ItemId>> {
        self.conn
            .prepare_cached("SELECT id FROM temp.batch_keys WHERE key = ?1")
            .and_then(|mut s| s.query_row([key], |r| r.get::<_, i64>(0)).optional())
            .map(|o| o.map(u))
            .map_err(self.err("read"))
    }

    /// Remember a key of the batch.
    pub fn batch_key_put(&self, key: &str, id: ItemId) -> Result<()> {
        let id = to_i64(id, "item id")?;
        self.conn
            .prepare_cached("INSERT INTO temp.batch_keys (key, id) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute(params![key, id]))
            .map_err(self.err("write"))
            .map(drop)
    }

    /// Forget the batch's keys.
    pub fn batch_keys_clear(&self) -> Result<()> {
        self.conn
            .execute_batch("DELETE FROM temp.batch_keys")
            .map_err(self.err("write"))
    }

    /// Forget a key of the batch (its item was replaced or evicted by a
    /// later item of the batch).
    pub fn batch_key_remove(&self, key: &str, id: ItemId) -> Result<()> {
        let id = to_i64(id, "item id")?;
        self.conn
            .prepare_cached("DELETE FROM temp.batch_keys WHERE key = ?1 AND id = ?2")
            .and_then(|mut s| s.execute(params![key, id]))
            .map_err(self.err("write"))
            .map(drop)
    }

    /// Make the (temporary) tables of a batch that coalesces or evicts
    /// ready: `batch_gone`, the indexed pending items the batch removed;
    /// `batch_items`, the items the batch stored that are still pending
    /// and that a later item may remove (with their `put` line when the
    /// batch may evict them).
    pub fn batch_policy_begin(&self) -> Result<()> {
        self.conn
            .execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS batch_gone (id INTEGER PRIMARY KEY); \
                 CREATE TEMP TABLE IF NOT EXISTS batch_items \
                   (id INTEGER PRIMARY KEY, key TEXT NOT NULL, ck TEXT, line BLOB); \
                 CREATE INDEX IF NOT EXISTS temp.batch_items_ck ON batch_items (ck, id) \
                   WHERE ck IS NOT NULL; \
                 DELETE FROM temp.batch_gone; DELETE FROM temp.batch_items;",
            )
            .map_err(self.err("prepare a batch in"))
    }

    /// Forget the batch's stored and removed items.
    pub fn batch_policy_clear(&self) -> Result<()> {
        self.conn
            .execute_batch("DELETE FROM temp.batch_gone; DELETE FROM temp.batch_items;")
            .map_err(self.err("write"))
    }

    /// Remember an item the batch stored.
    pub fn batch_item_put(
        &self,
        id: ItemId,
        key: &str,
        ck: Option<&str>,
        line: Option<&[u8]>,
    ) -> Result<()> {
        let id = to_i64(id, "item id")?;
        self.conn
            .prepare_cached(
                "INSERT INTO temp.batch_items (id, key, ck, line) VALUES (?1, ?2, ?3, ?4)",
            )
            .and_then(|mut s| s.execute(params![id, key, ck, line]))
            .map_err(self.err("write"))
            .map(drop)
    }

    /// Forget an item the batch stored (a later one removed it); its key.
    pub fn batch_item_remove(&self, id: ItemId) -> Result<Option<String>> {
        let id = to_i64(id, "item id")?;
        self.conn
            .prepare_cached("DELETE FROM temp.batch_items WHERE id = ?1 RETURNING key")
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(self.err("write"))
    }

    /// Remember that the batch removed indexed pending item `id`.
    pub fn batch_gone_put(&self, id: ItemId) -> Result<()> {
        let id = to_i64(id, "item id")?;
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO temp.batch_gone (id) VALUES (?1)")
            .and_then(|mut s| s.execute([id]))
            .map_err(self.err("write"))
            .map(drop)
    }

    /// [`Index::key_owner`] leaving out the items the batch removed.
    pub fn key_owner_live(&self, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        self.conn
            .prepare_cached(
                "SELECT id FROM pending WHERE key = ?1 AND key <> '' \
                 AND id NOT IN (SELECT id FROM temp.batch_gone) ORDER BY id LIMIT 1",
            )
            .and_then(|mut s| s.query_row([key], |r| r.get::<_, i64>(0)).optional())
            .map(|o| o.map(u))
            .map_err(self.err("read"))
    }

    fn ids(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<ItemId>> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_map(p, |r| r.get::<_, i64>(0).map(u))?.collect())
            .map_err(self.err("read"))
    }

    /// The indexed pending items a new item with coalesce key `ck`
    /// replaces (SPEC §9: that key, never attempted, not in flight), in id
    /// order, outside a batch.
    pub fn coalescible(&self, ck: &str) -> Result<Vec<ItemId>> {
        self.ids(
            "SELECT id FROM pending WHERE coalesce_key = ?1 AND attempts = 0 \
             AND push_seq IS NULL ORDER BY id",
            [ck],
        )
    }

    /// The pending items a new item with coalesce key `ck` replaces (SPEC
    /// §9: that key, never attempted, not in flight), in id order: the
    /// indexed ones the batch has not removed yet, then the batch's own.
    /// Found through the coalesce-key index, never by reading the file.
    pub fn coalesce_candidates(&self, ck: &str) -> Result<Vec<ItemId>> {
        let mut ids = self.ids(
            "SELECT id FROM pending WHERE coalesce_key = ?1 AND attempts = 0 \
             AND push_seq IS NULL AND id NOT IN (SELECT id FROM temp.batch_gone) ORDER BY id",
            [ck],
        )?;
        ids.extend(self.ids(
            "SELECT id FROM temp.batch_items WHERE ck = ?1 ORDER BY id",
            [ck],
        )?);
        Ok(ids)
    }

    /// The oldest indexed pending item above `after` that `drop-oldest`
    /// may evict (not held, not in flight) and the batch has not removed.
    pub fn oldest_evictable(&self, after: ItemId) -> Result<Option<ItemId>> {
        Ok(self
            .ids(
                "SELECT id FROM pending WHERE id > ?1 AND NOT held AND push_seq IS NULL \
                 AND id NOT IN (SELECT id FROM temp.batch_gone) ORDER BY id LIMIT 1",
                [i64::try_from(after).unwrap_or(i64::MAX)],
            )?
            .pop())
    }

    /// The oldest item the batch stored that is still pending, with its
    /// `put` line.
    pub fn oldest_batch_item(&self) -> Result<Option<(ItemId, Vec<u8>)>> {
        self.conn
            .prepare_cached("SELECT id, line FROM temp.batch_items ORDER BY id LIMIT 1")
            .and_then(|mut s| {
                s.query_row([], |r| {
                    Ok((
                        u(r.get(0)?),
                        r.get::<_, Option<Vec<u8>>>(1)?.unwrap_or_default(),
                    ))
                })
                .optional()
            })
            .map_err(self.err("read"))
    }
}
