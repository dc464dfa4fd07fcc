//! Reading a SQLite spool's counts and times from its indexes: `stats`,
//! the due count, the next retry time, the head of an ordering group.

use super::db::Db;
use super::rows::{clamp_attempts, read_enqueued_at, read_id};
use super::schema::Layout;
use crate::backend::due_sql::{self, group_waiting_sql, DueSql};
use crate::backend::sql::SqlStore;
use crate::error::Result;
use crate::item::{ItemId, QueueStats};
use crate::time::Timestamp;

/// The smallest attempt count, one seek in `ix_queue_attempts`.
const MIN_ATTEMPTS: &str = "SELECT min(attempts) FROM morph_offline_queue";
/// The next distinct attempt count, one seek in `ix_queue_attempts`.
const NEXT_ATTEMPTS: &str =
    "SELECT attempts FROM morph_offline_queue WHERE attempts > ?1 ORDER BY attempts LIMIT 1";
/// One range of `ix_queue_attempts`.
const COUNT_ATTEMPTS: &str = "SELECT count(*) FROM morph_offline_queue WHERE attempts = ?1";
/// The partial index `ix_queue_held`.
const COUNT_HELD: &str = "SELECT count(*) FROM morph_offline_queue WHERE held <> 0";
/// The due rule's statements ([`crate::backend::due_sql`]): the
/// backed-off items from a range of the partial index `ix_queue_retry`,
/// those also held through the smaller of it and `ix_queue_held`, the
/// grouped ones from `ix_queue_group`.
const DUE: DueSql = DueSql {
    group_waiting: group_waiting_sql!("morph_offline_queue", "ix_queue_group"),
    waiting: "SELECT count(*) FROM morph_offline_queue WHERE next_retry_at > ?1",
    held_waiting_by_held: "SELECT count(*) FROM morph_offline_queue \
         INDEXED BY ix_queue_held WHERE held <> 0 AND next_retry_at > ?1",
    held_waiting_by_retry: "SELECT count(*) FROM morph_offline_queue \
         INDEXED BY ix_queue_retry WHERE held <> 0 AND next_retry_at > ?1",
};
/// The first pending item of a group: one seek in `ix_queue_group`.
const GROUP_HEAD: &str = "SELECT id FROM morph_offline_queue \
     WHERE group_name = ?1 ORDER BY id LIMIT 1";
/// The histogram of a reference database, which has no attempts index.
const HISTOGRAM_BY_GROUPING: &str =
    "SELECT attempts, count(*) FROM morph_offline_queue GROUP BY attempts";

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
    /// The earliest next retry time after `now` of a pending item not
    /// held (`None`: no such item, or a database without retry times).
    pub fn next_retry_after(&self, now: Timestamp) -> Result<Option<Timestamp>> {
        if !self.layout.is_spool() {
            return Ok(None);
        }
        // The partial index on next_retry_at answers this by a range
        // scan from `now`, stopping at the first row not held.
        self.conn
            .query_row(
                "SELECT next_retry_at FROM morph_offline_queue INDEXED BY ix_queue_retry \
                 WHERE next_retry_at > ?1 AND held = 0 ORDER BY next_retry_at LIMIT 1",
                [now.as_millis()],
                |r| r.get::<_, i64>(0),
            )
            .map(|ms| Some(Timestamp::from_millis(ms)))
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(self.err(e)),
            })
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
        let held = self.count(COUNT_HELD, None)?;
        due_sql::due_count(self.conn, &DUE, depth, held, now.map(|t| t.as_millis()))
            .map_err(|e| self.err(e))
    }

    /// The first pending item of ordering group `group`, if any (see
    /// [`crate::Queue::group_head`]).
    pub fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        if !self.layout.has_groups() {
            return Ok(None);
        }
        self.first(GROUP_HEAD, [group], |r| r.get::<_, i64>(0))
            .map(|id| id.map(|id| id.max(0) as ItemId))
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
            let rows: Vec<(i64, i64)> =
                self.rows(HISTOGRAM_BY_GROUPING, [], |r| Ok((r.get(0)?, r.get(1)?)))?;
            for (value, n) in rows {
                s.add_attempts(value, n.max(0) as u64);
            }
        } else if self.layout.has_push() {
            // The kept counts: the pending rows, and per non-zero attempt
            // count the rows that have it; the rest have 0.
            let depth = self.pending_count()?;
            let buckets = self.rows(
                "SELECT attempts, n FROM spool_attempt_counts WHERE n > 0",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )?;
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
            let mut value: Option<i64> = self.row(MIN_ATTEMPTS, [], |r| r.get(0))?;
            while let Some(v) = value {
                let n = self.count(COUNT_ATTEMPTS, Some(v))?;
                s.add_attempts(v, n);
                value = self.first(NEXT_ATTEMPTS, [v], |r| r.get(0))?;
            }
        }
        if self.layout.is_spool() {
            s.held = self.count(COUNT_HELD, None)?;
            s.waiting = self.count(DUE.waiting, Some(now.as_millis()))?;
        }
        let oldest = self.first(
            "SELECT id, enqueued_at FROM morph_offline_queue ORDER BY id LIMIT 1",
            [],
            |r| Ok((read_id(r, 0)?, read_enqueued_at(r, 1)?)),
        )?;
        if let Some((id, at)) = oldest {
            s.oldest_id = Some(id);
            s.oldest_enqueued_at = at;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::super::db::{COUNT_PENDING, KEY_OWNER};
    use super::super::dead::COUNT_DEAD;
    use super::super::schema;
    use super::*;
    use rusqlite::Connection;

    /// `size` and `stats` must never fall back to reading the table.
    #[test]
    fn counting_queries_use_the_indexes() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(schema::REFERENCE_SCHEMA).unwrap();
        conn.execute_batch(schema::MIGRATIONS[0]).unwrap();
        for (sql, index) in [
            (COUNT_PENDING, "COVERING INDEX ix_queue_attempts"),
            (KEY_OWNER, "COVERING INDEX ix_queue_idem"),
            (MIN_ATTEMPTS, "COVERING INDEX ix_queue_attempts"),
            (NEXT_ATTEMPTS, "COVERING INDEX ix_queue_attempts"),
            (COUNT_ATTEMPTS, "COVERING INDEX ix_queue_attempts"),
            (COUNT_HELD, "INDEX ix_queue_held"),
            (DUE.waiting, "COVERING INDEX ix_queue_retry"),
            (DUE.held_waiting_by_held, "INDEX ix_queue_held"),
            (DUE.held_waiting_by_retry, "INDEX ix_queue_retry"),
            (COUNT_DEAD, "COVERING INDEX ix_dead_dead_at"),
        ] {
            assert_plan(&conn, sql, index);
        }
        conn.execute_batch(schema::MIGRATIONS[1]).unwrap();
        conn.execute_batch(schema::MIGRATIONS[2]).unwrap();
        assert_plan(&conn, GROUP_HEAD, "COVERING INDEX ix_queue_group");
        assert_plan_all(&conn, DUE.group_waiting, "ix_queue_group");
        // A push client's rejects: never its whole history.
        use super::super::receive::{CLIENT_REJECTS, FORGET_REASONS, PRUNE_REJECTS};
        for sql in [PRUNE_REJECTS, FORGET_REASONS, CLIENT_REJECTS] {
            assert_plan(&conn, sql, "INDEX ix_push_unacked_rejects");
        }
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

    /// The `EXPLAIN QUERY PLAN` lines of `sql`, its (one or two) parameters
    /// bound to 1.
    fn plan_of(conn: &Connection, sql: &str) -> Vec<String> {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let params: &[&dyn rusqlite::ToSql] = match stmt.parameter_count() {
            0 => &[],
            1 => &[&1],
            _ => &[&1, &1],
        };
        stmt.query_map(params, |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }
}
