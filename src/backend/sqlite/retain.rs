//! Retention of delivered items (SPEC §9) in a SQLite spool: the window
//! in `spool_meta`, the `spool_delivered` table, dedup against it, and
//! pruning the records whose window ended (late ones first, then the
//! others in id order).

use super::db::{sql_id, Db};
use super::rows::{delivered_from_row, payload_value, DELIVERED_COLUMNS, UNKNOWN_ENQUEUED_AT};
use super::schema;
use crate::backend::retain_sql::{self, Order, RecordsSql};
use crate::backend::sql::SqlStore;
use crate::error::Result;
use crate::item::{DeliveredItem, Evidence, ItemId};
use crate::time::Timestamp;
use rusqlite::params;
use rusqlite::types::Value;

/// The statements of the retention rules ([`crate::backend::retain_sql`])
/// over `spool_delivered`, with the prune cursor in `spool_meta`.
const RECORDS: RecordsSql = RecordsSql {
    cursor: "SELECT COALESCE((SELECT CAST(value AS INTEGER) FROM spool_meta \
             WHERE key = 'prune_after'), 0)",
    top: "SELECT id, delivered_at, late FROM spool_delivered ORDER BY id DESC LIMIT ?1",
    late_expired: "SELECT id, 0 FROM spool_delivered WHERE late AND delivered_at <= ?1 \
                   ORDER BY delivered_at, id LIMIT ?2",
    walk: "SELECT id, delivered_at, late, 0 FROM spool_delivered WHERE id > \
           COALESCE((SELECT CAST(value AS INTEGER) FROM spool_meta WHERE key = 'prune_after'), 0) \
           ORDER BY id",
};

impl Db<'_> {
    /// The retention window (`None`: off, or a database older than
    /// schema version 4).
    pub fn retain(&self) -> Result<Option<std::time::Duration>> {
        if !self.layout.has_retention() {
            return Ok(None);
        }
        let ms = self.meta_number("retain_ms")?;
        Ok(ms
            .filter(|&ms| ms > 0)
            .map(std::time::Duration::from_millis))
    }

    /// Store the retention window.
    pub fn set_retain(&self, window: Option<std::time::Duration>) -> Result<()> {
        let ms = window.map(|w| w.as_millis().to_string());
        self.put_meta("retain_ms", ms.as_deref())
    }

    /// The newest retained delivered item with `key` whose window has not
    /// ended at `now`; one seek in `ix_delivered_key`.
    pub fn delivered_owner(
        &self,
        key: &str,
        now: Timestamp,
        window: Option<std::time::Duration>,
    ) -> Result<Option<ItemId>> {
        let Some(w) = window else {
            return Ok(None);
        };
        if key.is_empty() || !self.layout.has_retention() {
            return Ok(None);
        }
        let after = now
            .as_millis()
            .saturating_sub(i64::try_from(w.as_millis()).unwrap_or(i64::MAX));
        self.first(
            "SELECT id FROM spool_delivered WHERE idempotency_key = ?1 AND idempotency_key <> '' \
                 AND delivered_at > ?2 ORDER BY delivered_at DESC LIMIT 1",
            params![key, after],
            |r| r.get::<_, i64>(0),
        )
        .map(|v| v.map(|v| v.max(0) as u64))
    }

    /// The lowest id up to `upto` of a retained delivered record that
    /// carries the non-empty key `key` (an import's dedup of delivered
    /// records): one range of `ix_delivered_key`.
    pub fn delivered_owner_upto(&self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        if key.is_empty() || !self.layout.has_retention() {
            return Ok(None);
        }
        self.owner_upto(
            "SELECT min(id) FROM spool_delivered INDEXED BY ix_delivered_key \
             WHERE idempotency_key = ?1 AND idempotency_key <> '' AND id <= ?2",
            key,
            upto,
        )
    }

    /// Copy pending item `id` into the retained delivered items, delivered
    /// at `now` with `evidence` (the caller then removes it from the
    /// pending set). Whether it was pending.
    pub fn retain_delivered(&self, id: ItemId, evidence: Evidence, now: Timestamp) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        // The row is read, then inserted: an `INSERT … SELECT` into a
        // table with triggers goes through a temporary table, which cost
        // more than the copy. The values keep their SQLite types.
        let row: Option<[Value; 7]> = self.first(
            "SELECT payload, idempotency_key, attempts, NULLIF(enqueued_at, ?2), last_error, \
                 group_name, coalesce_key FROM morph_offline_queue WHERE id = ?1",
            params![id, UNKNOWN_ENQUEUED_AT],
            |r| {
                Ok([
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ])
            },
        )?;
        let Some([payload, key, attempts, enqueued_at, last_error, group, coalesce_key]) = row
        else {
            return Ok(false);
        };
        let at = now.as_millis();
        let late = self.late(id, at).map_err(|e| self.err(e))?;
        self.run(
            "INSERT OR REPLACE INTO spool_delivered \
                 (id, payload, idempotency_key, attempts, enqueued_at, last_error, group_name, \
                  coalesce_key, delivered_at, evidence, late) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                id,
                payload,
                key,
                attempts,
                enqueued_at,
                last_error,
                group,
                coalesce_key,
                at,
                evidence.encode(),
                late
            ],
        )?;
        Ok(true)
    }

    /// Whether a record of `id` delivered at `at` (Unix ms), stored next,
    /// is late (the rule is [`crate::backend::retain_sql`]'s): where the
    /// records in order end is read once per operation and kept up to
    /// date by the records it stores.
    fn late(&self, id: i64, at: i64) -> rusqlite::Result<bool> {
        let mut order = match self.order.get() {
            Some(o) => o,
            None => Order::read(self.conn, &RECORDS)?,
        };
        let late = order.late(id, at);
        self.order.set(Some(order));
        Ok(late)
    }

    /// Store an imported delivered record under its own id.
    pub fn insert_delivered(&self, d: &DeliveredItem) -> Result<()> {
        let id = self.insert_id(d.item.id)?;
        let item = &d.item;
        let late = self
            .late(id, d.delivery.at.as_millis())
            .map_err(|e| self.err(e))?;
        self.run(
            "INSERT INTO spool_delivered \
                 (id, payload, idempotency_key, attempts, enqueued_at, last_error, group_name, \
                  coalesce_key, delivered_at, evidence, late) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                id,
                payload_value(&item.payload),
                item.key,
                item.attempts,
                item.enqueued_at.map(|t| t.as_secs()),
                item.last_error,
                item.group,
                item.coalesce_key,
                d.delivery.at.as_millis(),
                d.delivery.evidence.encode(),
                late,
            ],
        )?;
        Ok(())
    }

    /// Delete up to `limit` retained records whose window ended at `now`
    /// (all of them when retention is off), as
    /// [`crate::backend::retain_sql::expired`] picks them; how many.
    pub fn prune_delivered(
        &self,
        now: Timestamp,
        window: Option<std::time::Duration>,
        limit: usize,
    ) -> Result<u64> {
        if !self.layout.has_retention() || limit == 0 || self.retained_at_start.get() == Some(0) {
            return Ok(0);
        }
        let cutoff = match window {
            Some(w) => now
                .as_millis()
                .saturating_sub(i64::try_from(w.as_millis()).unwrap_or(i64::MAX)),
            None => i64::MAX,
        };
        let retain_sql::Expired {
            records: ids,
            cursor,
        } = retain_sql::expired(self.conn, &RECORDS, cutoff, limit).map_err(|e| self.err(e))?;
        if !ids.is_empty() {
            let mut delete = self
                .conn
                .prepare_cached("DELETE FROM spool_delivered WHERE id = ?1")
                .map_err(|e| self.err(e))?;
            for (id, _) in &ids {
                delete.execute([id]).map_err(|e| self.err(e))?;
            }
        }
        if let Some(cursor) = cursor {
            schema::set_meta(self.conn, "prune_after", &cursor.to_string())
                .map_err(|e| self.err(e))?;
        }
        if !ids.is_empty() || cursor.is_some() {
            self.order.set(None);
        }
        Ok(ids.len() as u64)
    }

    /// Up to `limit` retained delivered items after `after`, in id order.
    pub fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredItem>> {
        if !self.layout.has_retention() || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {DELIVERED_COLUMNS} FROM spool_delivered WHERE id > ?1 ORDER BY id LIMIT ?2"
        );
        self.page_of(&sql, after, limit, delivered_from_row)
    }

    /// One retained delivered item.
    pub fn delivered_get(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        if !self.layout.has_retention() {
            return Ok(None);
        }
        let sql = format!("SELECT {DELIVERED_COLUMNS} FROM spool_delivered WHERE id = ?1");
        self.first(&sql, [id], delivered_from_row)
    }

    /// Number of retained delivered items (the kept count).
    pub fn delivered_count(&self) -> Result<u64> {
        if !self.layout.has_retention() {
            return Ok(0);
        }
        let n: Option<i64> = self.first(
            "SELECT n FROM spool_counts WHERE name = 'delivered'",
            [],
            |r| r.get(0),
        )?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }
}
