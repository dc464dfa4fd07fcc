//! The counts of a PostgreSQL spool: `stats` from the spool row and the
//! attempt histogram, and the counts only this backend has (leases, table
//! sizes).

use super::conn::Tx;
use super::rows::u64_of;
use super::PostgresQueue;
use crate::error::Result;
use crate::item::QueueStats;
use crate::time::Timestamp;
use std::time::Duration;

impl PostgresQueue {
    /// The counts of `stats` inside `tx` (see [`crate::Queue::stats`]).
    pub(super) fn stats_in(&self, tx: &mut Tx<'_>, now: Timestamp) -> Result<QueueStats> {
        // Version 1 has no overflow policy (reject) nor evictions;
        // versions 1 and 2 retain nothing.
        macro_rules! stats_sql {
            ($cols:literal) => {
                concat!(
                    "SELECT s.depth, s.dead, s.max_depth, s.high_water, \
                        (SELECT count(*) FROM {s}.items WHERE spool = $1 AND held), \
                        (SELECT count(*) FROM {s}.items WHERE spool = $1 AND next_retry_at > $2), \
                        o.id, o.enqueued_at, ",
                    $cols,
                    " FROM {s}.spools s LEFT JOIN LATERAL \
                        (SELECT id, enqueued_at FROM {s}.items WHERE spool = $1 ORDER BY id LIMIT 1) o ON true \
                     WHERE s.name = $1"
                )
            };
        }
        let sql = if self.v1 {
            stats_sql!("'reject', 0::int8, 0::int8, NULL::int8")
        } else if !self.retention {
            stats_sql!("s.on_full, s.evicted_total, 0::int8, NULL::int8")
        } else {
            stats_sql!("s.on_full, s.evicted_total, s.retained, s.retain_ms")
        };
        let row = tx.query_one(sql, &[self.spool(), &now.as_millis()])?;
        let mut s = QueueStats {
            depth: u64_of(row.get(0)),
            dead_letters: u64_of(row.get(1)),
            max_depth: row.get::<_, Option<i64>>(2).map(u64_of),
            high_water: u64_of(row.get(3)),
            held: u64_of(row.get(4)),
            waiting: u64_of(row.get(5)),
            oldest_id: row.get::<_, Option<i64>>(6).map(u64_of),
            oldest_enqueued_at: row.get::<_, Option<i64>>(7).map(Timestamp::from_millis),
            on_full: self.policy_of(row.get(8))?,
            evicted_total: u64_of(row.get(9)),
            delivered_retained: u64_of(row.get(10)),
            retain: row
                .get::<_, Option<i64>>(11)
                .map(|ms| Duration::from_millis(u64_of(ms))),
            ..QueueStats::default()
        };
        let rows = tx.query(
            "SELECT attempts, count(*) FROM {s}.items WHERE spool = $1 AND attempts <> 0 GROUP BY attempts",
            &[self.spool()],
        )?;
        let mut rest = s.depth;
        for r in &rows {
            let a = u32::try_from(r.get::<_, i64>(0).max(0)).unwrap_or(u32::MAX);
            let n = u64_of(r.get(1));
            rest = rest.saturating_sub(n);
            *s.attempts_histogram.entry(a).or_default() += n;
        }
        if rest > 0 {
            *s.attempts_histogram.entry(0).or_default() += rest;
        }
        Ok(s)
    }

    /// Counts of `stats` beyond [`QueueStats`]: leased items (leases
    /// running at the spool's clock, as claims decide), and the table and
    /// index sizes of the whole schema in bytes.
    pub fn extra_stats(&self) -> Result<(u64, u64)> {
        self.txn("read stats of", false, |tx| {
            let row = tx.query_one(
                "SELECT (SELECT count(*) FROM {s}.items WHERE spool = $1 AND lease_until IS NOT NULL \
                         AND lease_until > COALESCE($3::int8, {now})), \
                        COALESCE((SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c \
                         JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $2 AND c.relkind = 'r'), 0)::int8",
                &[self.spool(), &self.target.schema, &self.now_param()],
            )?;
            Ok((u64_of(row.get(0)), u64_of(row.get(1))))
        })
    }
}
