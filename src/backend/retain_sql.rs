//! The retention rules of the two SQL stores of delivered records — the
//! SQLite backend's `spool_delivered` table and the NDJSON index's
//! `delivered` table — written once: which record is late, and which
//! expired records a prune takes. Each store names its own statements
//! ([`RecordsSql`]); the rules are here.
//!
//! A record is **late** when it is stored out of id order: its id is not
//! above every kept record's (or not above the prune cursor), or the last
//! record in order was delivered after it. Records in order then have
//! delivery times that never decrease with the id, so that a prune finds
//! the expired ones from the lowest id up and only late ones need a time
//! index. The **prune cursor** is the id up to which every record is late
//! or gone: the walk in id order starts above it and moves it on past the
//! records it takes and the late ones it passes, so that no late record
//! is walked over twice.

use rusqlite::Connection;

/// How many of the highest ids [`Order::read`] looks at for the last
/// record in order.
const LOOKBACK: i64 = 64;

/// One store's statements over its delivered records.
pub(crate) struct RecordsSql {
    /// The prune cursor: one row of one integer.
    pub cursor: &'static str,
    /// `id, delivered_at, late` of the `?1` highest ids, highest first.
    pub top: &'static str,
    /// `id, extra` of the late records delivered at or before `?1`,
    /// oldest first (then by id), at most `?2` of them.
    pub late_expired: &'static str,
    /// `id, delivered_at, late, extra` of the records above the cursor,
    /// in id order.
    pub walk: &'static str,
}

/// Where the records in id order end: what deciding whether the next
/// record is late needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Order {
    /// The highest id of a kept record, or the prune cursor when that is
    /// higher (0: neither).
    max_id: i64,
    /// The delivery time of the last record in order, if any.
    last_at: Option<i64>,
}

impl Order {
    /// Read it: the cursor, and the [`LOOKBACK`] highest ids. When all of
    /// those are late, every record to come counts as late.
    pub fn read(conn: &Connection, sql: &RecordsSql) -> rusqlite::Result<Order> {
        let cursor: i64 = conn
            .prepare_cached(sql.cursor)?
            .query_row([], |r| r.get(0))?;
        let mut stmt = conn.prepare_cached(sql.top)?;
        let mut rows = stmt.query([LOOKBACK])?;
        let mut order = Order {
            max_id: cursor,
            last_at: None,
        };
        let mut seen = 0;
        while let Some(r) = rows.next()? {
            let (id, at, late): (i64, i64, bool) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if seen == 0 {
                order.max_id = id.max(cursor);
            }
            seen += 1;
            if !late {
                order.last_at = Some(at);
                return Ok(order);
            }
        }
        if seen == LOOKBACK {
            order.last_at = Some(i64::MAX);
        }
        Ok(order)
    }

    /// Whether a record of `id` delivered at `at` (Unix ms), stored next,
    /// is late; the order then takes it into account.
    pub fn late(&mut self, id: i64, at: i64) -> bool {
        let late = id <= self.max_id || self.last_at.is_some_and(|t| t > at);
        self.max_id = self.max_id.max(id);
        if !late {
            self.last_at = Some(at);
        }
        late
    }
}

/// What a prune takes ([`expired`]).
pub(crate) struct Expired {
    /// The records to delete, each with the store's extra column.
    pub records: Vec<(i64, bool)>,
    /// Where the prune cursor moves (`None`: it stays).
    pub cursor: Option<i64>,
}

/// What a prune takes: up to `limit` records delivered at or before
/// `cutoff` (Unix ms) — the late ones oldest first, then the others from
/// the lowest id up, to the first one still inside its window — and
/// where the cursor moves. The caller deletes the records and stores the
/// cursor in the same transaction.
pub(crate) fn expired(
    conn: &Connection,
    sql: &RecordsSql,
    cutoff: i64,
    limit: usize,
) -> rusqlite::Result<Expired> {
    let mut out: Vec<(i64, bool)> = conn
        .prepare_cached(sql.late_expired)?
        .query_map([cutoff, i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut cursor = None;
    if out.len() < limit {
        let mut stmt = conn.prepare_cached(sql.walk)?;
        let mut rows = stmt.query([])?;
        while out.len() < limit {
            let Some(r) = rows.next()? else { break };
            let (id, at, late, extra): (i64, i64, bool, bool) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            if !late {
                if at > cutoff {
                    break;
                }
                out.push((id, extra));
            }
            cursor = Some(id);
        }
    }
    Ok(Expired {
        records: out,
        cursor,
    })
}
