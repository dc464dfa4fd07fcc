//! `spool shape`'s counts in one aggregate query: the spool's items of
//! one set grouped by the raw value of the dimension and the age bucket,
//! which `width_bucket` finds in the array of edges. Error texts are
//! grouped verbatim (distinct texts are few); the library merges them
//! into their classes.

use super::conn::Tx;
use super::rows::u64_of;
use super::PostgresQueue;
use crate::error::Result;
use crate::ops::shape::{ShapeBy, ShapeCell, ShapeQuery, ShapeState};

/// One statement per dimension and set: `$1` the spool, `$2` now in ms,
/// `$3` the edges in ms. An item without an enqueue time, or one enqueued
/// after now, is age 0.
macro_rules! shape_sql {
    ($value:expr, $from:literal) => {
        concat!(
            "SELECT ",
            $value,
            " AS v, attempts > 0 AS a, \
             width_bucket(CASE WHEN enqueued_at IS NULL THEN 0::int8 \
                 ELSE greatest($2::int8 - enqueued_at, 0::int8) END, $3::int8[]) AS b, \
             count(*) FROM ",
            $from,
            " GROUP BY v, a, b"
        )
    };
}

/// The key up to its first `:` (0x3a) or `/` (0x2f), whole when it has
/// neither, as [`crate::ops::shape::key_prefix`] cuts it (bytes: both are
/// ASCII, so a cut never splits a UTF-8 character).
macro_rules! key_prefix {
    () => {
        "substring(key from 1 for (CASE \
             WHEN position('\\x3a'::bytea in key) = 0 AND position('\\x2f'::bytea in key) = 0 \
                 THEN length(key) \
             WHEN position('\\x3a'::bytea in key) = 0 THEN position('\\x2f'::bytea in key) - 1 \
             WHEN position('\\x2f'::bytea in key) = 0 THEN position('\\x3a'::bytea in key) - 1 \
             ELSE least(position('\\x3a'::bytea in key), position('\\x2f'::bytea in key)) - 1 END))"
    };
}

macro_rules! by_state {
    ($value:expr) => {
        [
            shape_sql!($value, "{s}.items WHERE spool = $1 AND NOT held"),
            shape_sql!($value, "{s}.items WHERE spool = $1 AND held"),
            shape_sql!($value, "{s}.dead_letters WHERE spool = $1"),
            shape_sql!($value, "{s}.delivered WHERE spool = $1"),
        ]
    };
}

const BY_ERROR: [&str; 4] = by_state!("last_error");
const BY_GROUP: [&str; 4] = by_state!("grp");
const BY_ATTEMPTS: [&str; 4] = by_state!("attempts::text");
const BY_KEY_PREFIX: [&str; 4] = by_state!(key_prefix!());

impl PostgresQueue {
    /// Whether this spool's tables have what [`PostgresQueue::shape_in`]
    /// reads (a version-1 spool opened read-only has no groups, and
    /// retention came with version 3).
    pub(super) fn can_shape(&self, q: &ShapeQuery) -> bool {
        !self.v1 && (self.retention || q.state != ShapeState::Delivered)
    }

    /// The cells of `q` inside `tx` (see [`crate::Queue::shape_cells`]).
    pub(super) fn shape_in(&self, tx: &mut Tx<'_>, q: &ShapeQuery) -> Result<Vec<ShapeCell>> {
        let state = match q.state {
            ShapeState::Pending => 0,
            ShapeState::Held => 1,
            ShapeState::Dead => 2,
            ShapeState::Delivered => 3,
        };
        let sql = match q.by {
            ShapeBy::Error => BY_ERROR[state],
            ShapeBy::Group => BY_GROUP[state],
            ShapeBy::Attempts => BY_ATTEMPTS[state],
            ShapeBy::KeyPrefix => BY_KEY_PREFIX[state],
        };
        // width_bucket wants at least one threshold: with none, every
        // item is in the one bucket 0.
        let edges: Vec<i64> = if q.edges_ms.is_empty() {
            vec![i64::MAX]
        } else {
            q.edges_ms.clone()
        };
        // The planner cannot tell how few (value, bucket) groups there
        // are and plans for about 200,000: with the default 4 MB of
        // work_mem it then sorts the rows on disk. With room for that
        // many it hashes them in memory (~30% faster on a million items,
        // and no temporary files), for this read transaction only.
        tx.execute("SET LOCAL work_mem = '64MB'", &[])?;
        let rows = tx.query(sql, &[self.spool(), &q.now.as_millis(), &edges])?;
        Ok(rows
            .iter()
            .map(|r| ShapeCell {
                value: if q.by == ShapeBy::KeyPrefix {
                    r.get::<_, Option<Vec<u8>>>(0)
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                } else {
                    r.get::<_, Option<String>>(0)
                },
                attempted: r.get::<_, bool>(1),
                bucket: usize::try_from(r.get::<_, i32>(2).max(0)).unwrap_or(0),
                count: u64_of(r.get(3)),
            })
            .collect())
    }
}
