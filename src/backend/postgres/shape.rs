//! `spool shape`'s counts in one aggregate query: the spool's items of
//! one set grouped by the raw value of the dimension (and, for errors,
//! whether they were attempted), with one running count per age-bucket
//! edge. Error texts are grouped verbatim (distinct texts are few); the
//! library merges them into their classes.
//!
//! Why running counts and not `GROUP BY` the bucket: the planner cannot
//! estimate how few (value, bucket) groups there are. It plans for about
//! 200,000, so it sorts a million rows, or hashes them all in one process,
//! and never lets each parallel worker aggregate its share first (0.27 s
//! on a million items). Grouped by the value alone the estimate is right,
//! the workers each count their share, and the leader only adds up a few
//! rows (0.16 s). `count(*) FILTER (WHERE enqueued_at > now - edge)` is
//! one comparison per edge and row.

use super::conn::{Params, Tx};
use super::rows::u64_of;
use super::PostgresQueue;
use crate::error::Result;
use crate::ops::shape::{ShapeBy, ShapeCell, ShapeQuery, ShapeState};
use postgres::types::ToSql;

/// The key up to its first `:` (0x3a) or `/` (0x2f), whole when it has
/// neither, as [`crate::ops::shape::key_prefix`] cuts it (bytes: both are
/// ASCII, so a cut never splits a UTF-8 character). Since schema version 8
/// `items` stores it as the generated column `key_prefix` (see its
/// migration); the other tables' keys are cut with this expression.
pub(super) const KEY_PREFIX: &str = "substring(key from 1 for least(\
     nullif(position('\\x3a'::bytea in key), 0), \
     nullif(position('\\x2f'::bytea in key), 0), \
     length(key) + 1) - 1)";

/// The statement for `q` with `edges` running counts: `$1` the spool, `$2`
/// onwards each edge's threshold (an item enqueued after it is younger
/// than the edge). Columns: value, attempted, total, items without an
/// enqueue time, then one count per edge. `stored_prefix`: `items` has
/// the column `key_prefix` (schema version 8).
fn statement(q: &ShapeQuery, edges: usize, stored_prefix: bool) -> String {
    let items = matches!(q.state, ShapeState::Pending | ShapeState::Held);
    let value = match q.by {
        ShapeBy::Error => "last_error",
        ShapeBy::Group => "grp",
        ShapeBy::Attempts => "attempts::text",
        ShapeBy::KeyPrefix if items && stored_prefix => "key_prefix",
        ShapeBy::KeyPrefix => KEY_PREFIX,
    };
    // Only the error classes tell attempted items apart ("never
    // attempted"); every other dimension groups by the value alone.
    let attempted = match q.by {
        ShapeBy::Error => "attempts > 0",
        _ => "false",
    };
    let from = match q.state {
        ShapeState::Pending => "{s}.items WHERE spool = $1 AND NOT held",
        ShapeState::Held => "{s}.items WHERE spool = $1 AND held",
        ShapeState::Dead => "{s}.dead_letters WHERE spool = $1",
        ShapeState::Delivered => "{s}.delivered WHERE spool = $1",
    };
    let mut sql = format!(
        "SELECT {value} AS v, {attempted} AS a, count(*), \
         count(*) FILTER (WHERE enqueued_at IS NULL)"
    );
    for i in 0..edges {
        sql.push_str(&format!(
            ", count(*) FILTER (WHERE enqueued_at > ${})",
            i + 2
        ));
    }
    sql.push_str(&format!(" FROM {from} GROUP BY v, a"));
    sql
}

/// The cells of one row of [`statement`]'s answer: `below[k]` items are
/// younger than edge `k`, so bucket 0 holds `below[0]`, bucket `k` the
/// difference of the running counts, the last bucket the rest.
fn cells(
    value: Option<String>,
    attempted: bool,
    total: u64,
    below: &[u64],
    out: &mut Vec<ShapeCell>,
) {
    let mut previous = 0;
    for (bucket, &count) in below.iter().chain(std::iter::once(&total)).enumerate() {
        let n = count.saturating_sub(previous);
        previous = previous.max(count);
        if n > 0 {
            out.push(ShapeCell {
                value: value.clone(),
                attempted,
                bucket,
                count: n,
            });
        }
    }
}

impl PostgresQueue {
    /// Whether this spool's tables have what [`PostgresQueue::shape_in`]
    /// reads (a version-1 spool opened read-only has no groups, and
    /// retention came with version 3).
    pub(super) fn can_shape(&self, q: &ShapeQuery) -> bool {
        !self.v1 && (self.retention || q.state != ShapeState::Delivered)
    }

    /// The cells of `q` inside `tx` (see [`crate::Queue::shape_cells`]).
    pub(super) fn shape_in(&self, tx: &mut Tx<'_>, q: &ShapeQuery) -> Result<Vec<ShapeCell>> {
        let now = i128::from(q.now.as_millis());
        // An item's age is `now - enqueued_at`, 0 when it has no enqueue
        // time or one after now: it is below edge `e` (always > 0) when
        // it was enqueued after `now - e`.
        let thresholds: Vec<i64> = q
            .edges_ms
            .iter()
            .map(|&e| {
                i64::try_from(now - i128::from(e)).unwrap_or(if e > 0 {
                    i64::MIN
                } else {
                    i64::MAX
                })
            })
            .collect();
        let sql = statement(q, thresholds.len(), self.key_prefix);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![self.spool()];
        params.extend(thresholds.iter().map(|t| t as &(dyn ToSql + Sync)));
        let params: Params<'_> = &params;
        // Room to hash many distinct values (groups, key prefixes) in
        // memory, for this read transaction only.
        tx.execute("SET LOCAL work_mem = '64MB'", &[])?;
        let rows = tx.query_once(&sql, params)?;
        let mut out = Vec::new();
        let mut below = Vec::with_capacity(thresholds.len());
        for r in &rows {
            let value = if q.by == ShapeBy::KeyPrefix {
                r.get::<_, Option<Vec<u8>>>(0)
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
            } else {
                r.get::<_, Option<String>>(0)
            };
            let unknown = u64_of(r.get(3));
            below.clear();
            below.extend(q.edges_ms.iter().enumerate().map(|(i, &e)| {
                if e > 0 {
                    u64_of(r.get(4 + i)) + unknown
                } else {
                    0
                }
            }));
            cells(
                value,
                r.get::<_, bool>(1),
                u64_of(r.get(2)),
                &below,
                &mut out,
            );
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::cells;

    fn counts(total: u64, below: &[u64]) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        cells(None, true, total, below, &mut out);
        out.iter().map(|c| (c.bucket, c.count)).collect()
    }

    /// The stored column of schema version 8 is cut exactly as the other
    /// tables' keys are.
    #[test]
    fn the_stored_key_prefix_is_the_cut_expression() {
        let migration = include_str!("migrations/0008_key_prefix.sql");
        assert!(
            migration.contains(&format!(
                "GENERATED ALWAYS AS ({}) STORED",
                super::KEY_PREFIX
            )),
            "{migration}"
        );
    }

    #[test]
    fn running_counts_become_bucket_counts() {
        assert_eq!(counts(10, &[2, 5, 9]), vec![(0, 2), (1, 3), (2, 4), (3, 1)]);
        assert_eq!(counts(4, &[]), vec![(0, 4)]);
        // Empty buckets make no cell.
        assert_eq!(counts(3, &[0, 0, 3]), vec![(2, 3)]);
        assert_eq!(counts(0, &[0]), vec![]);
    }
}
