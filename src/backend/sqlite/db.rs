//! The SQL behind each queue operation, and the mapping between rows and
//! items.
//!
//! [`Db`] wraps a connection (or an open transaction, which derefs to
//! one) with the spool's path, the action that names errors, and the
//! [`Layout`] the handle reads, so that every read works on a plain
//! reference file too. Write helpers assume [`Layout::Spool`]: writable
//! handles always migrate at open.

use super::schema::{self, Layout};
use crate::error::{Error, Result};
use crate::item::{
    DeadLetter, DeliveredItem, Delivery, Evidence, Item, ItemId, NewItem, OnFull, PushState,
    QueueStats,
};
use crate::time::Timestamp;
use rusqlite::types::{ToSqlOutput, Type, Value, ValueRef};
use rusqlite::{params, Connection, OptionalExtension, Row};
use std::path::Path;

/// Stored in the NOT NULL `enqueued_at` column for a pending item whose
/// enqueue time is unknown (imported from a reference NDJSON spool).
/// `Timestamp::as_secs` can never return it, so it is never a real time.
pub(super) const UNKNOWN_ENQUEUED_AT: i64 = i64::MIN;

/// How many of the highest ids a retained delivery looks at for the last
/// record in order ([`Db::late`]).
const LATE_LOOKBACK: i64 = 64;

/// The item columns of a spool database, in the order [`item_from_row`]
/// reads them.
const ITEM_COLUMNS: &str = "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, group_name, coalesce_key";
/// The same for a schema version 2 database: no group or coalesce key.
const V2_ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, NULL, NULL";
/// The same for a schema version 1 database: no push number either.
const V1_ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, NULL, NULL, NULL";
/// The same for a reference database: the added columns read as their
/// defaults.
const REFERENCE_ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, NULL, NULL, 0, NULL, NULL, NULL";
const DEAD_COLUMNS: &str = "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, group_name, coalesce_key, dead_at";
const V2_DEAD_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, NULL, NULL, dead_at";
const V1_DEAD_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, NULL, NULL, NULL, dead_at";

/// The columns of a retained delivered item, in the order
/// [`delivered_from_row`] reads them.
const DELIVERED_COLUMNS: &str = "id, payload, idempotency_key, attempts, enqueued_at, NULL, \
     last_error, 0, NULL, group_name, coalesce_key, delivered_at, evidence";

/// Pending items; walks `ix_queue_attempts`, not the table.
const COUNT_PENDING: &str = "SELECT count(*) FROM morph_offline_queue";
/// The pending item that carries a key. The `<> ''` term lets SQLite use
/// the partial unique index `ix_queue_idem`.
const KEY_OWNER: &str = "SELECT id FROM morph_offline_queue \
     WHERE idempotency_key = ?1 AND idempotency_key <> '' ORDER BY id LIMIT 1";
/// The smallest attempt count, one seek in `ix_queue_attempts`.
const MIN_ATTEMPTS: &str = "SELECT min(attempts) FROM morph_offline_queue";
/// The next distinct attempt count, one seek in `ix_queue_attempts`.
const NEXT_ATTEMPTS: &str =
    "SELECT attempts FROM morph_offline_queue WHERE attempts > ?1 ORDER BY attempts LIMIT 1";
/// One range of `ix_queue_attempts`.
const COUNT_ATTEMPTS: &str = "SELECT count(*) FROM morph_offline_queue WHERE attempts = ?1";
/// The partial index `ix_queue_held`.
const COUNT_HELD: &str = "SELECT count(*) FROM morph_offline_queue WHERE held <> 0";
/// A range of the partial index `ix_queue_retry`.
const COUNT_WAITING: &str = "SELECT count(*) FROM morph_offline_queue WHERE next_retry_at > ?1";
/// Items both held and waiting, through the partial index of held items
/// (for when there are fewer of those).
const COUNT_HELD_WAITING_BY_HELD: &str = "SELECT count(*) FROM morph_offline_queue \
     INDEXED BY ix_queue_held WHERE held <> 0 AND next_retry_at > ?1";
/// The same through the partial index of backed-off items.
const COUNT_HELD_WAITING_BY_RETRY: &str = "SELECT count(*) FROM morph_offline_queue \
     INDEXED BY ix_queue_retry WHERE held <> 0 AND next_retry_at > ?1";
/// The first pending item of a group: one seek in `ix_queue_group`.
const GROUP_HEAD: &str = "SELECT id FROM morph_offline_queue \
     WHERE group_name = ?1 ORDER BY id LIMIT 1";
/// Items that would be due but wait behind an earlier pending item of
/// their ordering group (`?1`: the time retry times are compared with, or
/// NULL to ignore them): a walk over `ix_queue_group`, the grouped items
/// only, each probing the same index for an earlier item of its group.
const COUNT_GROUP_WAITING: &str = "SELECT count(*) FROM morph_offline_queue q \
     INDEXED BY ix_queue_group WHERE q.group_name IS NOT NULL AND q.held = 0 \
     AND (?1 IS NULL OR q.next_retry_at IS NULL OR q.next_retry_at <= ?1) \
     AND EXISTS (SELECT 1 FROM morph_offline_queue e INDEXED BY ix_queue_group \
         WHERE e.group_name = q.group_name AND e.id < q.id)";
/// The histogram of a reference database, which has no attempts index.
const HISTOGRAM_BY_GROUPING: &str =
    "SELECT attempts, count(*) FROM morph_offline_queue GROUP BY attempts";
/// Walks `ix_dead_dead_at`, not the payloads.
const COUNT_DEAD: &str = "SELECT count(*) FROM spool_dead_letters";
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

/// Fresh items per multi-row INSERT (see [`Db::insert_fresh`]); with
/// [`FRESH_COLUMNS`] parameters each, far below SQLite's parameter limit.
pub(super) const FRESH_ROWS_PER_INSERT: usize = 64;
/// Parameters per row of a fresh insert.
const FRESH_COLUMNS: usize = 5;

/// `INSERT` of `rows` fresh items: id, payload, key, enqueue time.
fn fresh_insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO morph_offline_queue (id, payload, idempotency_key, enqueued_at, group_name) VALUES ",
    );
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str("(?,?,?,?,?)");
    }
    sql
}

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
}

/// An id as SQLite stores it; `None` for ids SQLite cannot hold (no such
/// item can exist).
pub(super) fn sql_id(id: ItemId) -> Option<i64> {
    i64::try_from(id).ok()
}

/// Bind a payload: valid UTF-8 as TEXT (what reference readers expect),
/// anything else as a BLOB, which the TEXT column stores unchanged.
fn payload_value(payload: &[u8]) -> ToSqlOutput<'_> {
    match std::str::from_utf8(payload) {
        Ok(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        Err(_) => ToSqlOutput::Borrowed(ValueRef::Blob(payload)),
    }
}

fn conversion(idx: usize, ty: Type, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, ty, what.into())
}

fn read_id(row: &Row<'_>, idx: usize) -> rusqlite::Result<ItemId> {
    let v: i64 = row.get(idx)?;
    ItemId::try_from(v).map_err(|_| conversion(idx, Type::Integer, format!("negative id {v}")))
}

fn read_payload(row: &Row<'_>, idx: usize) -> rusqlite::Result<Vec<u8>> {
    match row.get_ref(idx)? {
        ValueRef::Text(b) | ValueRef::Blob(b) => Ok(b.to_vec()),
        other => Err(rusqlite::Error::InvalidColumnType(
            idx,
            "payload".into(),
            other.data_type(),
        )),
    }
}

/// Text written by other programs may not be UTF-8; keep what can be kept.
fn read_text(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    match row.get_ref(idx)? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(b) | ValueRef::Blob(b) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        ValueRef::Integer(i) => Ok(Some(i.to_string())),
        ValueRef::Real(f) => Ok(Some(f.to_string())),
    }
}

fn read_attempts(row: &Row<'_>, idx: usize) -> rusqlite::Result<u32> {
    let v: i64 = row.get(idx)?;
    Ok(clamp_attempts(v))
}

/// Attempt counts outside `u32` (only a foreign writer can store them)
/// are clamped.
fn clamp_attempts(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

fn read_enqueued_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Timestamp>> {
    Ok(match row.get::<_, Option<i64>>(idx)? {
        None | Some(UNKNOWN_ENQUEUED_AT) => None,
        Some(s) => Some(Timestamp::from_secs(s)),
    })
}

fn read_millis(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Timestamp>> {
    Ok(row.get::<_, Option<i64>>(idx)?.map(Timestamp::from_millis))
}

/// An item from the columns of [`ITEM_COLUMNS`] (or [`DEAD_COLUMNS`]).
fn item_from_row(row: &Row<'_>) -> rusqlite::Result<Item> {
    Ok(Item {
        id: read_id(row, 0)?,
        payload: read_payload(row, 1)?,
        key: read_text(row, 2)?.unwrap_or_default(),
        attempts: read_attempts(row, 3)?,
        enqueued_at: read_enqueued_at(row, 4)?,
        next_retry_at: read_millis(row, 5)?,
        last_error: read_text(row, 6)?,
        held: row.get::<_, Option<i64>>(7)?.unwrap_or(0) != 0,
        push_seq: read_seq(row, 8)?,
        group: read_text(row, 9)?,
        coalesce_key: read_text(row, 10)?,
    })
}

fn dead_from_row(row: &Row<'_>) -> rusqlite::Result<DeadLetter> {
    Ok(DeadLetter {
        item: item_from_row(row)?,
        dead_at: Timestamp::from_millis(row.get(11)?),
    })
}

fn delivered_from_row(row: &Row<'_>) -> rusqlite::Result<DeliveredItem> {
    let evidence: String = row.get(12)?;
    Ok(DeliveredItem {
        item: item_from_row(row)?,
        delivery: Delivery {
            at: Timestamp::from_millis(row.get(11)?),
            evidence: Evidence::decode(&evidence).ok_or_else(|| {
                conversion(
                    12,
                    Type::Text,
                    format!("unknown delivery evidence {evidence:?}"),
                )
            })?,
        },
    })
}

/// A push sequence number, if set (only a foreign writer could store a
/// negative one; it reads as none).
fn read_seq(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    Ok(row
        .get::<_, Option<i64>>(idx)?
        .and_then(|v| u64::try_from(v).ok()))
}

/// Adding one bucket of the attempt histogram.
trait AddAttempts {
    fn add_attempts(&mut self, attempts: i64, n: u64);
}

impl AddAttempts for QueueStats {
    fn add_attempts(&mut self, attempts: i64, n: u64) {
        self.depth += n;
        *self
            .attempts_histogram
            .entry(clamp_attempts(attempts))
            .or_default() += n;
    }
}

impl Db<'_> {
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

    fn dead_columns(&self) -> &'static str {
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
        let (n, seq, now, retained): (Option<i64>, Option<i64>, i64, Option<i64>) = self
            .conn
            .prepare_cached(KEPT_PENDING)
            .and_then(|mut s| s.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))))
            .map_err(|e| self.err(e))?;
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
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO spool_counts (name, n) VALUES ('pending', ?1)")
            .and_then(|mut s| s.execute([i64::try_from(n).unwrap_or(i64::MAX)]))
            .map_err(|e| self.err(e))?;
        self.seal_counts()
    }

    /// [`Db::kept_pending`] as the first read of a write on a schema with
    /// retained records ([`WRITE_START`]): also notes the retained count
    /// and the high-water mark.
    fn write_start(&self) -> Result<Option<u64>> {
        let (n, seq, now, retained, max_id): (Option<i64>, Option<i64>, i64, Option<i64>, i64) =
            self.conn
                .prepare_cached(WRITE_START)
                .and_then(|mut s| {
                    s.query_row([], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                })
                .map_err(|e| self.err(e))?;
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
        self.conn
            .prepare_cached("UPDATE spool_counts SET n = n + ?1 WHERE name = 'pending'")
            .and_then(|mut s| s.execute([i64::try_from(n).unwrap_or(i64::MAX)]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// At the end of a write: the kept count is exact at the sequence
    /// this write leaves behind.
    pub fn seal_counts(&self) -> Result<()> {
        if !self.layout.has_push() {
            return Ok(());
        }
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO spool_counts (name, n) VALUES ('pending_seq', \
                 COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'morph_offline_queue'), 0))",
            )
            .and_then(|mut s| s.execute([]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The pending item that carries the non-empty `key`, if any.
    pub fn key_owner(&self, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() || self.layout == Layout::Empty {
            return Ok(None);
        }
        self.conn
            .prepare_cached(KEY_OWNER)
            .and_then(|mut s| s.query_row([key], |r| read_id(r, 0)).optional())
            .map_err(|e| self.err(e))
    }

    /// The lowest id up to `upto` of a dead letter that carries the
    /// non-empty key `key` (an import's dedup of dead records, see
    /// `state::import_lookup`): one seek in `ix_dead_key`.
    pub fn dead_owner(&self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        if key.is_empty() || !self.layout.is_spool() {
            return Ok(None);
        }
        self.owner_upto(
            "SELECT id FROM spool_dead_letters INDEXED BY ix_dead_key \
             WHERE idempotency_key = ?1 AND idempotency_key <> '' AND id <= ?2 \
             ORDER BY id LIMIT 1",
            key,
            upto,
        )
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

    fn owner_upto(&self, sql: &str, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        let upto = i64::try_from(upto).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.query_row(params![key, upto], |r| r.get::<_, Option<i64>>(0))
                    .optional()
            })
            .map(|v| v.flatten().map(|v| v.max(0) as u64))
            .map_err(|e| self.err(e))
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
        let hw: i64 = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        Ok(hw.max(0) as u64)
    }

    /// Make the AUTOINCREMENT sequence at least `id`, so that reference
    /// writers, which know nothing of the dead-letter table, never reuse
    /// an id kept there.
    pub fn raise_sequence(&self, id: ItemId) -> Result<()> {
        let id = self.insert_id(id)?;
        self.conn
            .prepare_cached(
                "UPDATE sqlite_sequence SET seq = ?1 WHERE name = 'morph_offline_queue' AND seq < ?1",
            )
            .and_then(|mut s| s.execute([id]))
            .and_then(|_| {
                self.conn.prepare_cached(
                    "INSERT INTO sqlite_sequence (name, seq) SELECT 'morph_offline_queue', ?1 \
                     WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'morph_offline_queue')",
                )
            })
            .and_then(|mut s| s.execute([id]))
            .map_err(|e| self.err(e))?;
        Ok(())
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

    /// Items ever evicted by `drop-oldest`.
    pub fn evicted_total(&self) -> Result<u64> {
        if !self.layout.is_spool() {
            return Ok(0);
        }
        self.push_counter("evicted_total")
    }

    /// Remove the pending items a new item with coalesce key `ck` replaces
    /// (never attempted, not in flight; SPEC §9), returning their ids in
    /// id order.
    pub fn coalesce(&self, ck: &str) -> Result<Vec<ItemId>> {
        let mut ids: Vec<ItemId> = self
            .conn
            .prepare_cached(
                "DELETE FROM morph_offline_queue \
                 WHERE coalesce_key = ?1 AND attempts = 0 AND push_seq IS NULL RETURNING id",
            )
            .and_then(|mut s| {
                s.query_map([ck], |r| r.get::<_, i64>(0))?
                    .map(|r| r.map(|v| v.max(0) as u64))
                    .collect()
            })
            .map_err(|e| self.err(e))?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// The oldest pending item `drop-oldest` may evict: not held, not in
    /// flight.
    pub fn oldest_evictable(&self) -> Result<Option<ItemId>> {
        self.conn
            .prepare_cached(
                "SELECT id FROM morph_offline_queue WHERE held = 0 AND push_seq IS NULL \
                 ORDER BY id LIMIT 1",
            )
            .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)).optional())
            .map(|v| v.map(|v| v.max(0) as u64))
            .map_err(|e| self.err(e))
    }

    // --- retention of delivered items (SPEC §9) ---------------------------

    /// The retention window (`None`: off, or a database older than
    /// schema version 4).
    pub fn retain(&self) -> Result<Option<std::time::Duration>> {
        if !self.layout.has_retention() {
            return Ok(None);
        }
        let Some(v) = schema::get_meta(self.conn, "retain_ms").map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        let ms: u64 = v.trim().parse().map_err(|_| {
            Error::corrupt(
                self.path,
                None,
                format!("spool_meta retain_ms is not a number: {v:?}"),
            )
        })?;
        Ok((ms > 0).then(|| std::time::Duration::from_millis(ms)))
    }

    /// Store the retention window.
    pub fn set_retain(&self, window: Option<std::time::Duration>) -> Result<()> {
        let r = match window {
            Some(w) => schema::set_meta(self.conn, "retain_ms", &w.as_millis().to_string()),
            None => self
                .conn
                .execute("DELETE FROM spool_meta WHERE key = 'retain_ms'", [])
                .map(|_| ()),
        };
        r.map_err(|e| self.err(e))
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
        self.conn
            .prepare_cached(
                "SELECT id FROM spool_delivered WHERE idempotency_key = ?1 AND idempotency_key <> '' \
                 AND delivered_at > ?2 ORDER BY delivered_at DESC LIMIT 1",
            )
            .and_then(|mut s| s.query_row(params![key, after], |r| r.get::<_, i64>(0)).optional())
            .map(|v| v.map(|v| v.max(0) as u64))
            .map_err(|e| self.err(e))
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
        let row: Option<[Value; 7]> = self
            .conn
            .prepare_cached(
                "SELECT payload, idempotency_key, attempts, NULLIF(enqueued_at, ?2), last_error, \
                 group_name, coalesce_key FROM morph_offline_queue WHERE id = ?1",
            )
            .and_then(|mut s| {
                s.query_row(params![id, UNKNOWN_ENQUEUED_AT], |r| {
                    Ok([
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ])
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        let Some([payload, key, attempts, enqueued_at, last_error, group, coalesce_key]) = row
        else {
            return Ok(false);
        };
        let at = now.as_millis();
        let late = self.late(id, at).map_err(|e| self.err(e))?;
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO spool_delivered \
                 (id, payload, idempotency_key, attempts, enqueued_at, last_error, group_name, \
                  coalesce_key, delivered_at, evidence, late) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut s| {
                s.execute(params![
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
                ])
            })
            .map_err(|e| self.err(e))?;
        Ok(true)
    }

    /// Whether a record of `id` delivered at `at` (Unix ms) is late, out
    /// of id order (`migrations/0005_prune_order.sql`): it is in order
    /// when every kept record has a lower id and the last record in order
    /// (looked for among the [`LATE_LOOKBACK`] highest ids) was not
    /// delivered after it. A seek to the end of the table, and in the
    /// common case one row. A record at or below the prune cursor
    /// (`prune_after`) is late whatever is kept: the walk in id order
    /// starts above the cursor and would never reach it.
    fn late(&self, id: i64, at: i64) -> rusqlite::Result<bool> {
        let cursor: i64 = self
            .conn
            .prepare_cached(
                "SELECT COALESCE((SELECT CAST(value AS INTEGER) FROM spool_meta \
                 WHERE key = 'prune_after'), 0)",
            )?
            .query_row([], |r| r.get(0))?;
        if id <= cursor {
            return Ok(true);
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, delivered_at, late FROM spool_delivered ORDER BY id DESC LIMIT ?1",
        )?;
        let mut rows = stmt.query([LATE_LOOKBACK])?;
        let mut seen: i64 = 0;
        while let Some(r) = rows.next()? {
            let (rid, rat, rlate): (i64, i64, bool) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if seen == 0 && rid >= id {
                return Ok(true);
            }
            seen += 1;
            if !rlate {
                return Ok(rat > at);
            }
        }
        // No record in order among the last ones: in order when that was
        // every record there is.
        Ok(seen == LATE_LOOKBACK)
    }

    /// Store an imported delivered record under its own id.
    pub fn insert_delivered(&self, d: &DeliveredItem) -> Result<()> {
        let id = self.insert_id(d.item.id)?;
        let item = &d.item;
        let late = self
            .late(id, d.delivery.at.as_millis())
            .map_err(|e| self.err(e))?;
        self.conn
            .prepare_cached(
                "INSERT INTO spool_delivered \
                 (id, payload, idempotency_key, attempts, enqueued_at, last_error, group_name, \
                  coalesce_key, delivered_at, evidence, late) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut s| {
                s.execute(params![
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
                ])
            })
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Delete up to `limit` retained records whose window ended at `now`
    /// (all of them when retention is off): the late ones oldest first,
    /// then the others in id order ([`Db::prune_in_order`]); how many.
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
        // Late records, oldest first (ix_delivered_late), then the others
        // from the lowest id up.
        let late = self
            .conn
            .prepare_cached(
                "DELETE FROM spool_delivered WHERE id IN (SELECT id FROM spool_delivered \
                 WHERE late AND delivered_at <= ?1 ORDER BY delivered_at LIMIT ?2)",
            )
            .and_then(|mut s| s.execute(params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)]))
            .map_err(|e| self.err(e))?;
        let in_order = match limit.saturating_sub(late) {
            0 => 0,
            rest => self.prune_in_order(cutoff, rest).map_err(|e| self.err(e))?,
        };
        Ok((late + in_order) as u64)
    }

    /// Delete up to `limit` records in order (not late) delivered at or
    /// before `cutoff`: their delivery times never decrease in id order,
    /// so they are the first ones from the lowest id up, to the first
    /// that is still inside its window. The walk starts after
    /// `prune_after` in `spool_meta` (every record up to it is late or
    /// gone) and moves it on past the records it deletes and the late
    /// ones it passes, so that no late record is walked over twice (the
    /// first walk after the migration of many late records is the long
    /// one). How many it deleted.
    fn prune_in_order(&self, cutoff: i64, limit: usize) -> rusqlite::Result<usize> {
        let mut ids = Vec::new();
        // Every record the walk passes has an id above `prune_after`, so
        // the cursor moved when it passed any.
        let mut cursor = None;
        {
            let mut stmt = self.conn.prepare_cached(
                "SELECT id, delivered_at, late FROM spool_delivered WHERE id > \
                 COALESCE((SELECT CAST(value AS INTEGER) FROM spool_meta WHERE key = 'prune_after'), 0) \
                 ORDER BY id",
            )?;
            let mut rows = stmt.query([])?;
            while ids.len() < limit {
                let Some(r) = rows.next()? else { break };
                let (id, at, late): (i64, i64, bool) = (r.get(0)?, r.get(1)?, r.get(2)?);
                if !late {
                    if at > cutoff {
                        break;
                    }
                    ids.push(id);
                }
                cursor = Some(id);
            }
        }
        let mut delete = self
            .conn
            .prepare_cached("DELETE FROM spool_delivered WHERE id = ?1")?;
        for id in &ids {
            delete.execute([id])?;
        }
        if let Some(cursor) = cursor {
            schema::set_meta(self.conn, "prune_after", &cursor.to_string())?;
        }
        Ok(ids.len())
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
        self.one_of(&sql, id, delivered_from_row)
    }

    /// Number of retained delivered items (the kept count).
    pub fn delivered_count(&self) -> Result<u64> {
        if !self.layout.has_retention() {
            return Ok(0);
        }
        let n: Option<i64> = self
            .conn
            .prepare_cached("SELECT n FROM spool_counts WHERE name = 'delivered'")
            .and_then(|mut s| s.query_row([], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// Count `n` more evicted items.
    pub fn add_evicted(&self, n: u64) -> Result<()> {
        let total = self.evicted_total()?.saturating_add(n);
        schema::set_meta(self.conn, "evicted_total", &total.to_string()).map_err(|e| self.err(e))
    }

    /// The stored depth bound.
    pub fn max_depth(&self) -> Result<Option<u64>> {
        if !self.layout.is_spool() {
            return Ok(None);
        }
        let Some(v) = schema::get_meta(self.conn, "max_depth").map_err(|e| self.err(e))? else {
            return Ok(None);
        };
        v.trim().parse::<u64>().map(Some).map_err(|_| {
            Error::corrupt(
                self.path,
                None,
                format!("spool_meta max_depth is not a number: {v:?}"),
            )
        })
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
        self.conn
            .prepare_cached(
                "INSERT INTO morph_offline_queue \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  group_name, coalesce_key) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut s| {
                s.execute(params![
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
                ])
            })
            .map_err(|e| self.err(e))?;
        self.count_inserted(1)
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

    /// Store a dead letter under its own id.
    pub fn insert_dead(&self, dl: &DeadLetter) -> Result<()> {
        let id = self.insert_id(dl.item.id)?;
        let item = &dl.item;
        self.conn
            .prepare_cached(
                "INSERT INTO spool_dead_letters \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  group_name, coalesce_key, dead_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    id,
                    payload_value(&item.payload),
                    item.key,
                    item.attempts,
                    item.enqueued_at.map(|t| t.as_secs()),
                    item.next_retry_at.map(|t| t.as_millis()),
                    item.last_error,
                    item.held,
                    item.push_seq.and_then(|s| i64::try_from(s).ok()),
                    item.group,
                    item.coalesce_key,
                    dl.dead_at.as_millis(),
                ])
            })
            .map_err(|e| self.err(e))?;
        Ok(())
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
        self.one_of(&sql, id, item_from_row)
    }

    /// Up to `limit` dead letters after `after`, in id order.
    pub fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        if !self.layout.is_spool() || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {} FROM spool_dead_letters WHERE id > ?1 ORDER BY id LIMIT ?2",
            self.dead_columns()
        );
        self.page_of(&sql, after, limit, dead_from_row)
    }

    /// One dead letter.
    pub fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        if !self.layout.is_spool() {
            return Ok(None);
        }
        let sql = format!(
            "SELECT {} FROM spool_dead_letters WHERE id = ?1",
            self.dead_columns()
        );
        self.one_of(&sql, id, dead_from_row)
    }

    /// Rows of `sql` (ids above `?1`, at most `?2` of them), mapped.
    fn page_of<T>(
        &self,
        sql: &str,
        after: ItemId,
        limit: usize,
        map: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let after = sql_id(after).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.query_map([after, limit], map)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.err(e))
    }

    /// The row of `sql` for id `?1`, mapped, if there is one.
    fn one_of<T>(
        &self,
        sql: &str,
        id: i64,
        map: fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Option<T>> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row([id], map).optional())
            .map_err(|e| self.err(e))
    }

    /// Number of dead letters.
    pub fn dead_count(&self) -> Result<u64> {
        if !self.layout.is_spool() {
            return Ok(0);
        }
        if self.layout.has_push() {
            let n: Option<i64> = self
                .conn
                .prepare_cached("SELECT n FROM spool_counts WHERE name = 'dead'")
                .and_then(|mut s| s.query_row([], |r| r.get(0)).optional())
                .map_err(|e| self.err(e))?;
            if let Some(n) = n {
                return Ok(n.max(0) as u64);
            }
        }
        let n: i64 = self
            .conn
            .prepare_cached(COUNT_DEAD)
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
    }

    /// Move pending item `id` to the dead-letter set with `last_error`,
    /// dead at `now`. Returns whether it was pending.
    pub fn kill(&self, id: ItemId, last_error: &str, now: Timestamp) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let moved = self
            .conn
            .prepare_cached(
                "INSERT INTO spool_dead_letters \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  group_name, coalesce_key, dead_at) \
                 SELECT id, payload, idempotency_key, attempts, NULLIF(enqueued_at, ?2), next_retry_at, ?3, 0, push_seq, \
                  group_name, coalesce_key, ?4 \
                 FROM morph_offline_queue WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![id, UNKNOWN_ENQUEUED_AT, last_error, now.as_millis()]))
            .map_err(|e| self.err(e))?;
        if moved == 0 {
            return Ok(false);
        }
        self.delete_pending(id)?;
        Ok(true)
    }

    /// Move dead letter `id` back to pending under its id: attempts 0, no
    /// next retry, not held; key, enqueue time and last error kept.
    /// Returns whether it was a dead letter.
    pub fn revive(&self, id: ItemId) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let moved = self
            .conn
            .prepare_cached(
                "INSERT INTO morph_offline_queue \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, \
                  group_name, coalesce_key) \
                 SELECT id, payload, idempotency_key, 0, COALESCE(enqueued_at, ?2), NULL, last_error, 0, \
                  group_name, coalesce_key \
                 FROM spool_dead_letters WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![id, UNKNOWN_ENQUEUED_AT]))
            .map_err(|e| self.err(e))?;
        if moved == 0 {
            return Ok(false);
        }
        self.count_inserted(1)?;
        self.delete_dead(id)?;
        Ok(true)
    }

    /// The key of dead letter `id`, if it is one.
    pub fn dead_key(&self, id: ItemId) -> Result<Option<String>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        self.conn
            .prepare_cached("SELECT idempotency_key FROM spool_dead_letters WHERE id = ?1")
            .and_then(|mut s| {
                s.query_row([id], |r| Ok(read_text(r, 0)?.unwrap_or_default()))
                    .optional()
            })
            .map_err(|e| self.err(e))
    }

    fn delete_pending(&self, id: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM morph_offline_queue WHERE id = ?1")
            .and_then(|mut s| s.execute([id]))
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    fn delete_dead(&self, id: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM spool_dead_letters WHERE id = ?1")
            .and_then(|mut s| s.execute([id]))
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Remove pending item `id`; whether it was pending. An in-flight
    /// item's number becomes a skip (see [`crate::Queue::mark_done`]).
    pub fn remove_pending(&self, id: ItemId) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let removed: Option<Option<i64>> = self
            .conn
            .prepare_cached("DELETE FROM morph_offline_queue WHERE id = ?1 RETURNING push_seq")
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))?;
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

    /// Remove delivered item `id` (an acknowledged push): no skip.
    pub fn remove_acked(&self, id: ItemId) -> Result<bool> {
        match sql_id(id) {
            Some(id) => self.delete_pending(id),
            None => Ok(false),
        }
    }

    /// The push number of pending item `id`, if it is in flight.
    pub fn push_seq_of(&self, id: ItemId) -> Result<Option<u64>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        if !self.layout.has_push() {
            return Ok(None);
        }
        let seq: Option<Option<i64>> = self
            .conn
            .prepare_cached("SELECT push_seq FROM morph_offline_queue WHERE id = ?1")
            .and_then(|mut s| s.query_row([id], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))?;
        Ok(seq.flatten().and_then(|v| u64::try_from(v).ok()))
    }

    /// Record `seq` as abandoned (sent as a `skip` entry until acked).
    pub fn add_skip(&self, seq: i64) -> Result<()> {
        self.conn
            .prepare_cached("INSERT OR IGNORE INTO spool_push_skips (seq) VALUES (?1)")
            .and_then(|mut s| s.execute([seq]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// A counter of the push state in `spool_meta` (0 when unset).
    fn push_counter(&self, key: &str) -> Result<u64> {
        let Some(v) = schema::get_meta(self.conn, key).map_err(|e| self.err(e))? else {
            return Ok(0);
        };
        v.trim().parse::<u64>().map_err(|_| {
            Error::corrupt(
                self.path,
                None,
                format!("spool_meta {key} is not a number: {v:?}"),
            )
        })
    }

    /// The spool's push state.
    pub fn push_state(&self) -> Result<PushState> {
        if !self.layout.has_push() {
            return Ok(PushState::default());
        }
        let skips = self
            .conn
            .prepare_cached("SELECT seq FROM spool_push_skips ORDER BY seq")
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, i64>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.err(e))?;
        Ok(PushState {
            last_assigned: self.push_counter("push_last_assigned")?,
            acked: self.push_counter("push_acked")?,
            skips: skips
                .into_iter()
                .filter_map(|s| u64::try_from(s).ok())
                .collect(),
        })
    }

    /// Store the push counters (the skips are rows of their own).
    pub fn set_push_counters(&self, last_assigned: u64, acked: u64) -> Result<()> {
        schema::set_meta(self.conn, "push_last_assigned", &last_assigned.to_string())
            .and_then(|()| schema::set_meta(self.conn, "push_acked", &acked.to_string()))
            .map_err(|e| self.err(e))
    }

    /// Forget the skips at or below `seq` (all of them for `u64::MAX`).
    pub fn drop_skips_through(&self, seq: u64) -> Result<()> {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached("DELETE FROM spool_push_skips WHERE seq <= ?1")
            .and_then(|mut s| s.execute([seq]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Up to `limit` in-flight items with a number above `after`, in
    /// number order.
    pub fn in_flight_page(&self, after: u64, limit: usize) -> Result<Vec<Item>> {
        if !self.layout.has_push() || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {ITEM_COLUMNS} FROM morph_offline_queue \
             WHERE push_seq > ?1 ORDER BY push_seq LIMIT ?2"
        );
        self.page_of(&sql, after, limit, item_from_row)
    }

    /// `(id, push_seq)` of the in-flight items numbered in `(after, upto]`,
    /// in number order.
    pub fn in_flight_ids(&self, after: u64, upto: u64) -> Result<Vec<(ItemId, u64)>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let upto = i64::try_from(upto).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(
                "SELECT id, push_seq FROM morph_offline_queue \
                 WHERE push_seq > ?1 AND push_seq <= ?2 ORDER BY push_seq",
            )
            .and_then(|mut s| {
                s.query_map([after, upto], |r| {
                    Ok((read_id(r, 0)?, read_seq(r, 1)?.unwrap_or_default()))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.err(e))
    }

    /// Give pending item `id` push number `seq` when it is not held and
    /// not in flight; whether it was given.
    pub fn assign_seq(&self, id: ItemId, seq: u64) -> Result<bool> {
        let (Some(id), Ok(seq)) = (sql_id(id), i64::try_from(seq)) else {
            return Ok(false);
        };
        let n = self
            .conn
            .prepare_cached(
                "UPDATE morph_offline_queue SET push_seq = ?2 \
                 WHERE id = ?1 AND held = 0 AND push_seq IS NULL",
            )
            .and_then(|mut s| s.execute([id, seq]))
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Change the push number of pending item `id`.
    pub fn renumber(&self, id: ItemId, seq: u64) -> Result<()> {
        let (Some(id), Ok(seq)) = (sql_id(id), i64::try_from(seq)) else {
            return Ok(());
        };
        self.conn
            .prepare_cached("UPDATE morph_offline_queue SET push_seq = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute([id, seq]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Take the push number of pending item `id` away: it is sent again
    /// as a new entry.
    pub fn unnumber(&self, id: ItemId) -> Result<()> {
        let Some(id) = sql_id(id) else {
            return Ok(());
        };
        self.conn
            .prepare_cached("UPDATE morph_offline_queue SET push_seq = NULL WHERE id = ?1")
            .and_then(|mut s| s.execute([id]))
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Whether a pending item carries push number `seq`.
    pub fn seq_in_use(&self, seq: u64) -> Result<bool> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(false);
        };
        self.conn
            .prepare_cached("SELECT 1 FROM morph_offline_queue WHERE push_seq = ?1")
            .and_then(|mut s| s.exists([seq]))
            .map_err(|e| self.err(e))
    }

    /// Remove dead letter `id`; whether it was one.
    pub fn remove_dead(&self, id: ItemId) -> Result<bool> {
        match sql_id(id) {
            Some(id) => self.delete_dead(id),
            None => Ok(false),
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
        let n = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(all.as_slice()))
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// One count over `sql` with optional single parameter.
    fn count(&self, sql: &str, param: Option<i64>) -> Result<u64> {
        let n: i64 = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| match param {
                Some(p) => s.query_row([p], |r| r.get(0)),
                None => s.query_row([], |r| r.get(0)),
            })
            .map_err(|e| self.err(e))?;
        Ok(n.max(0) as u64)
    }

    /// Pending items a replay would attempt: not held, with `now`
    /// without a next retry time after it, and not waiting behind an
    /// earlier pending item of their ordering group. Counted from the
    /// indexes: the pending count as [`Db::pending_count`], then the held
    /// and the backed-off items from their partial indexes (only items
    /// that are both are looked up in the table, walking the smaller of
    /// the two sets: none when either is empty, the common case), then
    /// the grouped items that wait behind their group, from the group
    /// index (nothing to walk on a spool without groups). A reference
    /// database has neither holds nor retry times nor groups.
    pub fn due_count(&self, now: Option<Timestamp>) -> Result<u64> {
        let depth = self.pending_count()?;
        if self.layout != Layout::Spool {
            return Ok(depth);
        }
        let now = now.map(|t| t.as_millis());
        let group_waiting: i64 = self
            .conn
            .prepare_cached(COUNT_GROUP_WAITING)
            .and_then(|mut s| s.query_row([now], |r| r.get(0)))
            .map_err(|e| self.err(e))?;
        let depth = depth.saturating_sub(group_waiting.max(0) as u64);
        let held = self.count(COUNT_HELD, None)?;
        let Some(now) = now else {
            return Ok(depth.saturating_sub(held));
        };
        let now = Some(now);
        let waiting = self.count(COUNT_WAITING, now)?;
        let both = match (held, waiting) {
            (0, _) | (_, 0) => 0,
            (h, w) if h <= w => self.count(COUNT_HELD_WAITING_BY_HELD, now)?,
            _ => self.count(COUNT_HELD_WAITING_BY_RETRY, now)?,
        };
        Ok(depth
            .saturating_sub(held)
            .saturating_sub(waiting.saturating_sub(both)))
    }

    /// The first pending item of ordering group `group`, if any (see
    /// [`crate::Queue::group_head`]).
    pub fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        if !self.layout.has_groups() {
            return Ok(None);
        }
        self.conn
            .prepare_cached(GROUP_HEAD)
            .and_then(|mut s| s.query_row([group], |r| r.get::<_, i64>(0)).optional())
            .map(|id| id.map(|id| id.max(0) as ItemId))
            .map_err(|e| self.err(e))
    }

    /// The counts of `stats`, from the indexes alone: no payload is read,
    /// and memory does not grow with the spool.
    pub fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        let mut s = QueueStats {
            max_depth: self.max_depth()?,
            high_water: self.high_water()?,
            on_full: self.on_full()?,
            evicted_total: self.evicted_total()?,
            delivered_retained: self.delivered_count()?,
            retain: self.retain()?,
            dead_letters: self.dead_count()?,
            ..QueueStats::default()
        };
        if self.layout == Layout::Empty {
            return Ok(s);
        }
        if self.layout == Layout::Reference {
            // No index to walk: one pass over the table.
            let mut stmt = self
                .conn
                .prepare_cached(HISTOGRAM_BY_GROUPING)
                .map_err(|e| self.err(e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
                .map_err(|e| self.err(e))?;
            for row in rows {
                let (value, n) = row.map_err(|e| self.err(e))?;
                s.add_attempts(value, n.max(0) as u64);
            }
        } else if self.layout.has_push() {
            // The kept counts: the pending rows, and per non-zero attempt
            // count the rows that have it; the rest have 0.
            let depth = self.pending_count()?;
            let buckets = self
                .conn
                .prepare_cached("SELECT attempts, n FROM spool_attempt_counts WHERE n > 0")
                .and_then(|mut st| {
                    st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(|e| self.err(e))?;
            let mut rest = depth;
            for (value, n) in buckets {
                let n = n.max(0) as u64;
                rest = rest.saturating_sub(n);
                s.add_attempts(value, n);
            }
            if rest > 0 {
                s.add_attempts(0, rest);
            }
        } else {
            // One range of ix_queue_attempts per distinct attempt count:
            // counting a range is cheaper than grouping every row.
            let mut value: Option<i64> = self
                .conn
                .prepare_cached(MIN_ATTEMPTS)
                .and_then(|mut st| st.query_row([], |r| r.get(0)))
                .map_err(|e| self.err(e))?;
            while let Some(v) = value {
                let n = self.count(COUNT_ATTEMPTS, Some(v))?;
                s.add_attempts(v, n);
                value = self
                    .conn
                    .prepare_cached(NEXT_ATTEMPTS)
                    .and_then(|mut st| st.query_row([v], |r| r.get(0)).optional())
                    .map_err(|e| self.err(e))?;
            }
        }
        if self.layout.is_spool() {
            s.held = self.count(COUNT_HELD, None)?;
            s.waiting = self.count(COUNT_WAITING, Some(now.as_millis()))?;
        }
        let oldest = self
            .conn
            .prepare_cached("SELECT id, enqueued_at FROM morph_offline_queue ORDER BY id LIMIT 1")
            .and_then(|mut st| {
                st.query_row([], |r| Ok((read_id(r, 0)?, read_enqueued_at(r, 1)?)))
                    .optional()
            })
            .map_err(|e| self.err(e))?;
        if let Some((id, at)) = oldest {
            s.oldest_id = Some(id);
            s.oldest_enqueued_at = at;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_time_marker_is_never_a_real_time() {
        for ms in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX] {
            assert_ne!(Timestamp::from_millis(ms).as_secs(), UNKNOWN_ENQUEUED_AT);
        }
    }

    #[test]
    fn attempts_are_clamped() {
        assert_eq!(clamp_attempts(-3), 0);
        assert_eq!(clamp_attempts(7), 7);
        assert_eq!(clamp_attempts(i64::MAX), u32::MAX);
    }

    /// `size` and `stats` must never fall back to reading the table.
    #[test]
    fn counting_queries_use_the_indexes() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(schema::REFERENCE_SCHEMA).unwrap();
        conn.execute_batch(schema::MIGRATION_0001).unwrap();
        for (sql, index) in [
            (COUNT_PENDING, "COVERING INDEX ix_queue_attempts"),
            (KEY_OWNER, "COVERING INDEX ix_queue_idem"),
            (MIN_ATTEMPTS, "COVERING INDEX ix_queue_attempts"),
            (NEXT_ATTEMPTS, "COVERING INDEX ix_queue_attempts"),
            (COUNT_ATTEMPTS, "COVERING INDEX ix_queue_attempts"),
            (COUNT_HELD, "INDEX ix_queue_held"),
            (COUNT_WAITING, "COVERING INDEX ix_queue_retry"),
            (COUNT_HELD_WAITING_BY_HELD, "INDEX ix_queue_held"),
            (COUNT_HELD_WAITING_BY_RETRY, "INDEX ix_queue_retry"),
            (COUNT_DEAD, "COVERING INDEX ix_dead_dead_at"),
        ] {
            assert_plan(&conn, sql, index);
        }
        conn.execute_batch(schema::MIGRATION_0002).unwrap();
        conn.execute_batch(schema::MIGRATION_0003).unwrap();
        assert_plan(&conn, GROUP_HEAD, "COVERING INDEX ix_queue_group");
        assert_plan_all(&conn, COUNT_GROUP_WAITING, "ix_queue_group");
    }

    /// The plan of `sql` is one step, and it uses `index`.
    fn assert_plan(conn: &Connection, sql: &str, index: &str) {
        let plan = plan_of(conn, sql);
        assert!(
            plan.len() == 1 && plan[0].contains(index),
            "{sql}: {plan:?}"
        );
    }

    /// Every table access in the plan of `sql` goes through `index`.
    fn assert_plan_all(conn: &Connection, sql: &str, index: &str) {
        let plan = plan_of(conn, sql);
        let scans: Vec<&String> = plan
            .iter()
            .filter(|s| s.starts_with("SCAN") || s.starts_with("SEARCH"))
            .collect();
        assert!(
            !scans.is_empty() && scans.iter().all(|s| s.contains(index)),
            "{sql}: {plan:?}"
        );
    }

    /// The `EXPLAIN QUERY PLAN` lines of `sql`, its parameters bound to 1.
    fn plan_of(conn: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let params: &[&dyn rusqlite::ToSql] = match stmt.parameter_count() {
            0 => &[],
            _ => &[&1],
        };
        stmt.query_map(params, |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    #[test]
    fn payloads_bind_as_text_or_blob() {
        assert!(matches!(
            payload_value(b"ok"),
            ToSqlOutput::Borrowed(ValueRef::Text(_))
        ));
        assert!(matches!(
            payload_value(b"\xff"),
            ToSqlOutput::Borrowed(ValueRef::Blob(_))
        ));
    }
}
