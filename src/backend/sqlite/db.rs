//! The connection in the context of one spool operation ([`Db`]), and
//! the SQL every operation shares: the pending rows, the kept counts, the
//! high-water mark, and the settings in `spool_meta`. The SQL of each
//! other concern is in a file of its own (`enqueue.rs`, `dead.rs`,
//! `retain.rs`, `push.rs`, `stats.rs`), and the mapping between rows and
//! items in `rows.rs`.
//!
//! [`Db`] wraps a connection (or an open transaction, which derefs to
//! one) with the spool's path, the action that names errors, and the
//! [`Layout`] the handle reads, so that every read works on a plain
//! reference file too. Write helpers assume [`Layout::Spool`]: writable
//! handles always migrate at open.

use super::rows::{
    item_from_row, payload_value, read_id, DEAD_COLUMNS, ITEM_COLUMNS, REFERENCE_ITEM_COLUMNS,
    UNKNOWN_ENQUEUED_AT, V1_DEAD_COLUMNS, V1_ITEM_COLUMNS, V2_DEAD_COLUMNS, V2_ITEM_COLUMNS,
};
use super::schema::{self, Layout};
use crate::backend::sql::{Cached, SqlStore};
use crate::error::{Error, Result};
use crate::item::{Item, ItemId, OnFull};
use rusqlite::config::DbConfig;
use rusqlite::{params, Connection};
use std::path::Path;

/// Pending items; walks `ix_queue_attempts`, not the table.
pub(super) const COUNT_PENDING: &str = "SELECT count(*) FROM morph_offline_queue";
/// The pending item that carries a key. The `<> ''` term lets SQLite use
/// the partial unique index `ix_queue_idem`.
pub(super) const KEY_OWNER: &str = "SELECT id FROM morph_offline_queue \
     WHERE idempotency_key = ?1 AND idempotency_key <> '' ORDER BY id LIMIT 1";
/// The kept pending count, the sequence it is exact at, and the sequence.
const KEPT_PENDING: &str = "SELECT \
     (SELECT n FROM spool_counts WHERE name = 'pending'), \
     (SELECT n FROM spool_counts WHERE name = 'pending_seq'), \
     COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0), \
     (SELECT n FROM spool_counts WHERE name = 'delivered')";

/// The first read of a write on a schema with retained records: what
/// [`KEPT_PENDING`] reads, and the highest ids of the queue, dead-letter
/// and delivered tables (with the sequence, the high-water mark), so that
/// an enqueue needs no statement of its own for the mark.
const WRITE_START: &str = "SELECT \
     (SELECT n FROM spool_counts WHERE name = 'pending'), \
     (SELECT n FROM spool_counts WHERE name = 'pending_seq'), \
     COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0), \
     (SELECT n FROM spool_counts WHERE name = 'delivered'), \
     max(COALESCE((SELECT max(id) FROM morph_offline_queue), 0), \
         COALESCE((SELECT max(id) FROM spool_dead_letters), 0), \
         COALESCE((SELECT max(id) FROM spool_delivered), 0))";

/// A connection in the context of one spool operation.
pub(super) struct Db<'a> {
    pub conn: &'a Connection,
    pub path: &'a Path,
    pub action: &'static str,
    pub layout: Layout,
    /// The count of retained delivered records as the write's first read
    /// ([`Db::ensure_counts`]) found it, when it read it: with none kept,
    /// a prune has nothing to look at. Records this write adds are not
    /// counted here; they are inside their window, so a prune skipped for
    /// them misses nothing.
    pub retained_at_start: std::cell::Cell<Option<u64>>,
    /// The high-water mark as the write's first read found it (see
    /// [`Db::high_water_at_start`]).
    pub high_water_at_start: std::cell::Cell<Option<ItemId>>,
    /// Where the retained records in id order end, once a retained
    /// delivery of this operation read it (see `Db::late`); forgotten by
    /// a prune.
    pub order: std::cell::Cell<Option<crate::backend::retain_sql::Order>>,
}

/// An id as SQLite stores it; `None` for ids SQLite cannot hold (no such
/// item can exist).
pub(super) fn sql_id(id: ItemId) -> Option<i64> {
    i64::try_from(id).ok()
}

impl SqlStore for Db<'_> {
    fn conn(&self) -> &Connection {
        self.conn
    }

    fn fail(&self, e: rusqlite::Error, _write: bool) -> Error {
        self.err(e)
    }
}

impl<'a> Db<'a> {
    /// `conn` (a connection or an open transaction) for one operation.
    pub fn new(conn: &'a Connection, path: &'a Path, action: &'static str, layout: Layout) -> Self {
        Db {
            conn,
            path,
            action,
            layout,
            retained_at_start: Default::default(),
            high_water_at_start: Default::default(),
            order: Default::default(),
        }
    }

    pub fn err(&self, e: rusqlite::Error) -> Error {
        Error::sqlite(self.path, self.action, e)
    }

    fn item_columns(&self) -> &'static str {
        match self.layout {
            Layout::Reference => REFERENCE_ITEM_COLUMNS,
            Layout::SpoolV1 => V1_ITEM_COLUMNS,
            Layout::SpoolV2 => V2_ITEM_COLUMNS,
            _ => ITEM_COLUMNS,
        }
    }

    pub(super) fn dead_columns(&self) -> &'static str {
        match self.layout {
            Layout::SpoolV1 => V1_DEAD_COLUMNS,
            Layout::SpoolV2 => V2_DEAD_COLUMNS,
            _ => DEAD_COLUMNS,
        }
    }

    /// Number of pending items (held included): the kept count when it is
    /// known exact (see `migrations/0002_push.sql`), else counted.
    pub fn pending_count(&self) -> Result<u64> {
        if self.layout == Layout::Empty {
            return Ok(0);
        }
        if self.layout.has_push() {
            if let Some(n) = self.kept_pending()? {
                return Ok(n);
            }
        }
        self.count(COUNT_PENDING, None)
    }

    /// The kept pending count, when the AUTOINCREMENT sequence shows that
    /// nobody inserted a row since it was last exact.
    fn kept_pending(&self) -> Result<Option<u64>> {
        let (n, seq, now, retained): (Option<i64>, Option<i64>, i64, Option<i64>) =
            self.row(KEPT_PENDING, [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
        if self.layout.has_retention() {
            self.retained_at_start
                .set(retained.map(|n| u64::try_from(n).unwrap_or(0)));
        }
        Ok(match (n, seq) {
            (Some(n), Some(seq)) if seq == now => Some(n.max(0) as u64),
            _ => None,
        })
    }

    /// At the start of a write: make the kept pending count exact again
    /// if another writer inserted rows since it was (one full count).
    /// Notes what else the first read found (the retained count, the
    /// high-water mark) for the write.
    pub fn ensure_counts(&self) -> Result<()> {
        if !self.layout.has_push() {
            return Ok(());
        }
        let kept = if self.layout.has_retention() {
            self.write_start()?
        } else {
            self.kept_pending()?
        };
        if kept.is_some() {
            return Ok(());
        }
        let n = self.count(COUNT_PENDING, None)?;
        self.run(
            "INSERT OR REPLACE INTO spool_counts (name, n) VALUES ('pending', ?1)",
            [i64::try_from(n).unwrap_or(i64::MAX)],
        )?;
        self.seal_counts()
    }

    /// [`Db::kept_pending`] as the first read of a write on a schema with
    /// retained records ([`WRITE_START`]): also notes the retained count
    /// and the high-water mark.
    fn write_start(&self) -> Result<Option<u64>> {
        let (n, seq, now, retained, max_id): (Option<i64>, Option<i64>, i64, Option<i64>, i64) =
            self.row(WRITE_START, [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?;
        self.retained_at_start
            .set(retained.map(|n| u64::try_from(n).unwrap_or(0)));
        self.high_water_at_start
            .set(Some(now.max(max_id).max(0) as ItemId));
        Ok(match (n, seq) {
            (Some(n), Some(seq)) if seq == now => Some(n.max(0) as u64),
            _ => None,
        })
    }

    /// The high-water mark at the start of this write, for a write that
    /// has not inserted anything yet: as [`Db::ensure_counts`] found it
    /// when it could, else read now ([`Db::high_water`]).
    pub fn high_water_at_start(&self) -> Result<ItemId> {
        match self.high_water_at_start.get() {
            Some(hw) => Ok(hw),
            None => self.high_water(),
        }
    }

    /// Count `n` rows this write inserted into the queue table.
    pub fn count_inserted(&self, n: u64) -> Result<()> {
        if n == 0 || !self.layout.has_push() {
            return Ok(());
        }
        self.run(
            "UPDATE spool_counts SET n = n + ?1 WHERE name = 'pending'",
            [i64::try_from(n).unwrap_or(i64::MAX)],
        )?;
        Ok(())
    }

    /// Turn this connection's triggers off or on. Statements prepared
    /// while they are off run without them; SQLite prepares every
    /// statement again after each change.
    pub fn set_triggers(&self, on: bool) -> Result<()> {
        self.conn
            .set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, on)
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Count queue rows this write deleted with triggers off, given each
    /// one's attempt count: what `tr_queue_delete` does per row (see
    /// `migrations/0002_push.sql`), once per attempt count.
    pub fn count_deleted(&self, attempts: impl Iterator<Item = i64>) -> Result<()> {
        let mut n = 0i64;
        let mut by_attempts: std::collections::BTreeMap<i64, i64> = Default::default();
        for a in attempts {
            n += 1;
            if a != 0 {
                *by_attempts.entry(a).or_default() += 1;
            }
        }
        if n == 0 {
            return Ok(());
        }
        let run = |sql: &str, params: &[&dyn rusqlite::ToSql]| self.run(sql, params);
        run(
            "UPDATE spool_counts SET n = n - ?1 WHERE name = 'pending'",
            &[&n],
        )?;
        for (a, k) in by_attempts {
            run(
                "UPDATE spool_attempt_counts SET n = n - ?2 WHERE attempts = ?1",
                &[&a, &k],
            )?;
            run(
                "DELETE FROM spool_attempt_counts WHERE attempts = ?1 AND n <= 0",
                &[&a],
            )?;
        }
        Ok(())
    }

    /// At the end of a write: the kept count is exact at the sequence
    /// this write leaves behind.
    pub fn seal_counts(&self) -> Result<()> {
        if !self.layout.has_push() {
            return Ok(());
        }
        self.run("INSERT OR REPLACE INTO spool_counts (name, n) VALUES ('pending_seq', \
                 COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0))", [])?;
        Ok(())
    }

    /// The pending item that carries the non-empty `key`, if any.
    pub fn key_owner(&self, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() || self.layout == Layout::Empty {
            return Ok(None);
        }
        self.first(KEY_OWNER, [key], |r| read_id(r, 0))
    }

    pub(super) fn owner_upto(&self, sql: &str, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        let upto = i64::try_from(upto).unwrap_or(i64::MAX);
        self.first(sql, params![key, upto], |r| r.get::<_, Option<i64>>(0))
            .map(|v| v.flatten().map(|v| v.max(0) as u64))
    }

    /// The highest id ever issued: the AUTOINCREMENT sequence and the
    /// largest ids in both tables.
    pub fn high_water(&self) -> Result<ItemId> {
        let sql = match self.layout {
            Layout::Empty => return Ok(0),
            Layout::Reference => {
                "SELECT max( \
                   COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0), \
                   COALESCE((SELECT max(id) FROM morph_offline_queue), 0))"
            }
            Layout::SpoolV1 | Layout::SpoolV2 | Layout::SpoolV3 => {
                "SELECT max( \
                   COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0), \
                   COALESCE((SELECT max(id) FROM morph_offline_queue), 0), \
                   COALESCE((SELECT max(id) FROM spool_dead_letters), 0))"
            }
            Layout::Spool | Layout::SpoolV4 | Layout::SpoolV5 => {
                "SELECT max( \
                   COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0), \
                   COALESCE((SELECT max(id) FROM morph_offline_queue), 0), \
                   COALESCE((SELECT max(id) FROM spool_dead_letters), 0), \
                   COALESCE((SELECT max(id) FROM spool_delivered), 0))"
            }
        };
        let hw: i64 = self.row(sql, [], |r| r.get(0))?;
        Ok(hw.max(0) as u64)
    }

    /// Make the AUTOINCREMENT sequence at least `id`, so that reference
    /// writers, which know nothing of the dead-letter table, never reuse
    /// an id kept there.
    pub fn raise_sequence(&self, id: ItemId) -> Result<()> {
        let id = self.insert_id(id)?;
        self.conn
            .run("UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'morph_offline_queue' AND seq < ?1", [id])
            .and_then(|_| {
                self.conn.run(
                    "INSERT INTO sqlite_sequence (name, seq) SELECT 'morph_offline_queue', ?1 \
                     WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'morph_offline_queue')",
                    [id],
                )
            })
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// An id for an INSERT; ids beyond SQLite's range are refused.
    pub fn insert_id(&self, id: ItemId) -> Result<i64> {
        sql_id(id).ok_or_else(|| {
            Error::InvalidInput(format!(
                "item id {id} is too large for a SQLite spool (the largest is {})",
                i64::MAX
            ))
        })
    }

    /// Store `item` as a pending row under its own id.
    pub fn insert_pending(&self, item: &Item) -> Result<()> {
        let id = self.insert_id(item.id)?;
        self.run("INSERT INTO morph_offline_queue \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  group_name, coalesce_key) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)", params![
                    id,
                    payload_value(&item.payload),
                    item.key,
                    item.attempts,
                    item.enqueued_at
                        .map_or(UNKNOWN_ENQUEUED_AT, |t| t.as_secs()),
                    item.next_retry_at.map(|t| t.as_millis()),
                    item.last_error,
                    item.held,
                    item.push_seq.and_then(|s| i64::try_from(s).ok()),
                    item.group,
                    item.coalesce_key,
                ])?;
        self.count_inserted(1)
    }

    /// Up to `limit` pending items after `after`, in id order.
    pub fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>> {
        if self.layout == Layout::Empty || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {} FROM morph_offline_queue WHERE id > ?1 ORDER BY id LIMIT ?2",
            self.item_columns()
        );
        self.page_of(&sql, after, limit, item_from_row)
    }

    /// One pending item.
    pub fn get(&self, id: ItemId) -> Result<Option<Item>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        if self.layout == Layout::Empty {
            return Ok(None);
        }
        let sql = format!(
            "SELECT {} FROM morph_offline_queue WHERE id = ?1",
            self.item_columns()
        );
        self.first(&sql, [id], item_from_row)
    }

    /// Rows of `sql` (ids above `?1`, at most `?2` of them), mapped.
    pub(super) fn page_of<T>(
        &self,
        sql: &str,
        after: ItemId,
        limit: usize,
        map: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let after = sql_id(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(sql, [after, limit], map)
    }

    pub(super) fn delete_pending(&self, id: i64) -> Result<bool> {
        let n = self.run("DELETE FROM morph_offline_queue WHERE id = ?1", [id])?;
        Ok(n > 0)
    }

    /// Remove pending item `id`; whether it was pending. An in-flight
    /// item's number becomes a skip (see [`crate::Queue::mark_done`]).
    pub fn remove_pending(&self, id: ItemId) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let removed: Option<Option<i64>> = self.first(
            "DELETE FROM morph_offline_queue WHERE id = ?1 RETURNING push_seq",
            [id],
            |r| r.get(0),
        )?;
        match removed {
            None => Ok(false),
            Some(seq) => {
                if let Some(seq) = seq {
                    self.add_skip(seq)?;
                }
                Ok(true)
            }
        }
    }

    /// Run an UPDATE of one pending row with `params` (`?1` is the id).
    /// Returns whether the row exists.
    pub fn update_pending(
        &self,
        sql: &str,
        id: ItemId,
        rest: &[&dyn rusqlite::ToSql],
    ) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let mut all: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(rest.len() + 1);
        all.push(&id);
        all.extend_from_slice(rest);
        let n = self.run(sql, all.as_slice())?;
        Ok(n > 0)
    }

    /// One count over `sql` with optional single parameter.
    pub(super) fn count(&self, sql: &str, param: Option<i64>) -> Result<u64> {
        let n: i64 = match param {
            Some(p) => self.conn.row(sql, [p], |r| r.get(0)),
            None => self.conn.row(sql, [], |r| r.get(0)),
        }
        .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
    }

    /// The stored overflow policy ([`OnFull::Reject`] when unset).
    pub fn on_full(&self) -> Result<OnFull> {
        if !self.layout.is_spool() {
            return Ok(OnFull::Reject);
        }
        let Some(v) = schema::get_meta(self.conn, "on_full").map_err(|e| self.err(e))? else {
            return Ok(OnFull::Reject);
        };
        OnFull::parse(v.trim()).ok_or_else(|| {
            Error::corrupt(
                self.path,
                None,
                format!("spool_meta on_full is not a policy: {v:?}"),
            )
        })
    }

    /// The stored depth bound.
    pub fn max_depth(&self) -> Result<Option<u64>> {
        if !self.layout.is_spool() {
            return Ok(None);
        }
        self.meta_number("max_depth")
    }

    /// The number stored under `key` in `spool_meta`, if set.
    pub(super) fn meta_number(&self, key: &str) -> Result<Option<u64>> {
        let Some(v) = schema::get_meta(self.conn, key).map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        v.trim().parse::<u64>().map(Some).map_err(|_| {
            Error::corrupt(
                self.path,
                None,
                format!("spool_meta {key} is not a number: {v:?}"),
            )
        })
    }

    /// Set `key` in `spool_meta` to `value`, or remove it (`None`).
    pub(super) fn put_meta(&self, key: &str, value: Option<&str>) -> Result<()> {
        let done = match value {
            Some(v) => schema::set_meta(self.conn, key, v),
            None => self
                .conn
                .execute("DELETE FROM spool_meta WHERE key = ?1", [key])
                .map(|_| ()),
        };
        done.map_err(|e| self.err(e))
    }

    /// Items ever evicted by `drop-oldest`.
    pub fn evicted_total(&self) -> Result<u64> {
        if !self.layout.is_spool() {
            return Ok(0);
        }
        self.push_counter("evicted_total")
    }

    /// Count `n` more evicted items.
    pub fn add_evicted(&self, n: u64) -> Result<()> {
        let total = self.evicted_total()?.saturating_add(n);
        schema::set_meta(self.conn, "evicted_total", &total.to_string()).map_err(|e| self.err(e))
    }
}
