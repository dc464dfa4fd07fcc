//! `spool shape`'s counts in one aggregate query: the items of one set
//! grouped by the raw value of the dimension and the age bucket, which
//! SQLite computes with a `CASE` over the bucket edges. Error texts are
//! grouped verbatim (distinct texts are few); the library merges them
//! into their classes.

use super::db::Db;
use super::rows::UNKNOWN_ENQUEUED_AT;
use crate::error::Result;
use crate::ops::shape::{ShapeBy, ShapeCell, ShapeQuery, ShapeState};
use rusqlite::types::ValueRef;

/// The key up to its first `:` or `/` (the whole key when it has
/// neither), as [`crate::ops::shape::key_prefix`] cuts it.
const KEY_PREFIX: &str = "CASE \
     WHEN instr(idempotency_key, ':') = 0 AND instr(idempotency_key, '/') = 0 \
         THEN idempotency_key \
     WHEN instr(idempotency_key, ':') = 0 \
         THEN substr(idempotency_key, 1, instr(idempotency_key, '/') - 1) \
     WHEN instr(idempotency_key, '/') = 0 \
         THEN substr(idempotency_key, 1, instr(idempotency_key, ':') - 1) \
     ELSE substr(idempotency_key, 1, \
         min(instr(idempotency_key, ':'), instr(idempotency_key, '/')) - 1) END";

impl Db<'_> {
    /// The cells of `q` in one `GROUP BY` over the set's table.
    pub fn shape_cells(&self, q: &ShapeQuery) -> Result<Vec<ShapeCell>> {
        let value = match q.by {
            ShapeBy::Error => "last_error",
            ShapeBy::Group => "group_name",
            ShapeBy::Attempts => "attempts",
            ShapeBy::KeyPrefix => KEY_PREFIX,
        };
        let (table, filter) = match q.state {
            ShapeState::Pending => ("morph_offline_queue", "WHERE held = 0"),
            ShapeState::Held => ("morph_offline_queue", "WHERE held <> 0"),
            ShapeState::Dead => ("spool_dead_letters", ""),
            ShapeState::Delivered => ("spool_delivered", ""),
        };
        // ?1: now in ms; ?2: the "unknown" enqueue time. Edges are our own
        // integers, written into the statement.
        let mut bucket = String::from(
            "CASE WHEN enqueued_at IS NULL OR enqueued_at = ?2 THEN 0",
        );
        for (i, e) in q.edges_ms.iter().enumerate() {
            bucket.push_str(&format!(" WHEN ?1 - enqueued_at * 1000 < {e} THEN {i}"));
        }
        bucket.push_str(&format!(" ELSE {} END", q.edges_ms.len()));
        let sql = format!(
            "SELECT {value} AS v, attempts > 0 AS a, {bucket} AS b, count(*) \
             FROM {table} {filter} GROUP BY v, a, b"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(
                rusqlite::params![q.now.as_millis(), UNKNOWN_ENQUEUED_AT],
                |r| {
                    let value = match r.get_ref(0)? {
                        ValueRef::Null => None,
                        ValueRef::Integer(i) => Some(i.to_string()),
                        ValueRef::Real(f) => Some(f.to_string()),
                        ValueRef::Text(b) | ValueRef::Blob(b) => {
                            Some(String::from_utf8_lossy(b).into_owned())
                        }
                    };
                    Ok(ShapeCell {
                        value,
                        attempted: r.get::<_, bool>(1)?,
                        bucket: usize::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                        count: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                    })
                },
            )
            .map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))
    }
}
