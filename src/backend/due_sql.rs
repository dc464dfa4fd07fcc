//! The due rule (SPEC §4: what a replay at a given time would attempt)
//! counted over a SQLite table of pending items — the SQLite backend's
//! queue table and the NDJSON index's `pending` table — written once.
//! Each store names its own statements ([`DueSql`], made by
//! [`group_waiting_sql!`] where they must say the same); the counting
//! is here. [`crate::item::Item::is_due`] states the same rule for one
//! item.

use rusqlite::Connection;

/// One store's statements for [`due_count`]. `?1` is the time retry
/// times are compared with (Unix ms).
pub(crate) struct DueSql {
    /// Items not held that would be due but wait behind an earlier
    /// pending item of their ordering group (`?1` NULL: retry times
    /// ignored); see [`group_waiting_sql!`].
    pub group_waiting: &'static str,
    /// Items with a retry time after `?1`, held or not.
    pub waiting: &'static str,
    /// Items held and with a retry time after `?1`, walking the held
    /// ones (for when they are fewer).
    pub held_waiting_by_held: &'static str,
    /// The same, walking the ones with a retry time.
    pub held_waiting_by_retry: &'static str,
}

/// The statement of [`DueSql::group_waiting`] over table `$table` and its
/// index `$index` on `(group_name, id)`: a walk over the grouped items
/// only, each probing the same index for an earlier item of its group.
macro_rules! group_waiting_sql {
    ($table:literal, $index:literal) => {
        concat!(
            "SELECT count(*) FROM ",
            $table,
            " q INDEXED BY ",
            $index,
            " WHERE q.group_name IS NOT NULL AND NOT q.held \
             AND (?1 IS NULL OR q.next_retry_at IS NULL OR q.next_retry_at <= ?1) \
             AND EXISTS (SELECT 1 FROM ",
            $table,
            " e INDEXED BY ",
            $index,
            " WHERE e.group_name = q.group_name AND e.id < q.id)"
        )
    };
}
pub(crate) use group_waiting_sql;

/// Pending items a replay at `now` would attempt (`None`: retry times
/// ignored), of `depth` pending items, `held` of them held: not held,
/// without a retry time after `now`, and not waiting behind an earlier
/// pending item of their group. Items both held and waiting are counted
/// only when neither set is empty (the common case has no hold), walking
/// the smaller one.
pub(crate) fn due_count(
    conn: &Connection,
    sql: &DueSql,
    depth: u64,
    held: u64,
    now: Option<i64>,
) -> rusqlite::Result<u64> {
    let count = |stmt: &str| -> rusqlite::Result<u64> {
        let n: i64 = conn.prepare_cached(stmt)?.query_row([now], |r| r.get(0))?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let depth = depth.saturating_sub(count(sql.group_waiting)?);
    if now.is_none() {
        return Ok(depth.saturating_sub(held));
    }
    let waiting = count(sql.waiting)?;
    let both = match (held, waiting) {
        (0, _) | (_, 0) => 0,
        (h, w) if h <= w => count(sql.held_waiting_by_held)?,
        _ => count(sql.held_waiting_by_retry)?,
    };
    Ok(depth
        .saturating_sub(held)
        .saturating_sub(waiting.saturating_sub(both)))
}
