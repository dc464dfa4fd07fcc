//! What the receiver's ledger of push clients (SPEC §7) answers, written
//! once for the two SQLite stores that keep it — the SQLite backend's
//! `spool_push_clients` and `spool_push_entries`, and the NDJSON index's
//! `clients` and `client_entries`. Each store names its own statements
//! ([`LedgerSql`]); reading them is here.

use crate::backend::sql::{clamp, Cached};
use crate::item::ClientSummary;
use crate::push::wire::Rejected;
use crate::time::Timestamp;
use rusqlite::Connection;

/// One store's statements over its ledger.
pub(crate) struct LedgerSql {
    /// `last_seq` of client `?1` (no row: 0).
    pub last_seq: &'static str,
    /// `seq, reason` of client `?1`'s unacknowledged rejects above
    /// `?2`, in number order.
    pub rejects: &'static str,
    /// How many clients there are: one row of one integer.
    pub count: &'static str,
    /// `client id, last_seq, updated_at` (Unix ms) of every client, by id.
    pub list: &'static str,
}

/// A stored number or count (never negative).
fn u(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A client's `last_seq` (0 for a client never seen).
pub(crate) fn last_seq(conn: &Connection, sql: &LedgerSql, client: &str) -> rusqlite::Result<u64> {
    let v: Option<i64> = conn.first(sql.last_seq, [client], |r| r.get(0))?;
    Ok(v.map_or(0, u))
}

/// A client's unacknowledged rejects above `after`.
pub(crate) fn rejects(
    conn: &Connection,
    sql: &LedgerSql,
    client: &str,
    after: u64,
) -> rusqlite::Result<Vec<Rejected>> {
    conn.rows(sql.rejects, rusqlite::params![client, clamp(after)], |r| {
        Ok(Rejected {
            seq: u(r.get(0)?),
            error: r.get(1)?,
        })
    })
}

/// How many clients there are.
pub(crate) fn count(conn: &Connection, sql: &LedgerSql) -> rusqlite::Result<u64> {
    conn.row(sql.count, [], |r| r.get(0)).map(u)
}

/// Every client, by id, as `spool clients` shows it.
pub(crate) fn summaries(
    conn: &Connection,
    sql: &LedgerSql,
) -> rusqlite::Result<Vec<ClientSummary>> {
    let clients: Vec<(String, i64, Option<i64>)> =
        conn.rows(sql.list, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    clients
        .into_iter()
        .map(|(client_id, last_seq, at)| {
            Ok(ClientSummary {
                rejected: rejects(conn, sql, &client_id, 0)?,
                client_id,
                last_seq: u(last_seq),
                updated_at: at.map(Timestamp::from_millis),
                served_by: None,
            })
        })
        .collect()
}
