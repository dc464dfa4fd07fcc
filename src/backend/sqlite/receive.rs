//! The receiving side of push (SPEC §7) in SQL: [`ReceiveTxn`] inside the
//! one write transaction that [`Queue::receive`](crate::Queue::receive) opens, on
//! the tables of `migrations/0002_push.sql`.

use super::db::Db;
use super::enqueue::multi_row_sql;
use crate::backend::held::{Held, HeldRecord};
use crate::backend::ledger_sql::{self, LedgerSql};
use crate::backend::policy;
use crate::backend::sql::{clamp, Cached, SqlStore};
use crate::error::Result;
use crate::item::{ClientSummary, Enqueued, Item, ItemId, NewItem};
use crate::push::receiver::{EntryRecord, ReceiveRead, ReceiveTxn};
use crate::push::wire::Rejected;
use crate::time::Timestamp;
use rusqlite::params;

/// Rows held back before they are written (see [`Held`]).
const HELD_ROWS: usize = 256;
/// Entry records per multi-row INSERT, five parameters each.
const RECORDS_PER_INSERT: usize = 64;

/// One receiving transaction. The depth, the bound and the next id are
/// read once and then kept up to date here, so that a group of many
/// entries costs one index lookup and one insert per entry. New items
/// without a coalesce key and entry records are [`Held`] and written
/// many rows to a statement.
pub(super) struct SqliteReceive<'t, 'c> {
    db: &'t Db<'c>,
    now: Timestamp,
    next_id: Option<ItemId>,
    /// The stored bound less the depth, once read (`Some(None)`: no
    /// bound); below 0 when the spool is over its bound (an import or a
    /// lowered bound put it there).
    room: Option<Option<i64>>,
    held: Held,
}

impl<'t, 'c> SqliteReceive<'t, 'c> {
    pub fn new(db: &'t Db<'c>, now: Timestamp) -> SqliteReceive<'t, 'c> {
        SqliteReceive {
            db,
            now,
            next_id: None,
            room: None,
            held: Held::new(HELD_ROWS),
        }
    }

    /// Write what is held back; the transaction is then complete.
    pub fn finish(mut self) -> Result<()> {
        self.write_items()?;
        self.write_records()
    }

    /// Insert the held items.
    fn write_items(&mut self) -> Result<()> {
        let items = self.held.take_items();
        if items.is_empty() {
            return Ok(());
        }
        let rows: Vec<(ItemId, &NewItem)> = items.iter().map(|(id, it)| (*id, it)).collect();
        self.db.insert_fresh(&rows, self.now)
    }

    /// Insert the held entry records.
    fn write_records(&mut self) -> Result<()> {
        let records = self.held.take_records();
        let mut chunks = records.chunks_exact(RECORDS_PER_INSERT);
        for chunk in &mut chunks {
            insert_records(self.db, RECORDS_PER_INSERT, chunk)?;
        }
        for one in chunks.remainder().chunks(1) {
            insert_records(self.db, 1, one)?;
        }
        Ok(())
    }

    /// How many more items fit under the stored bound, below 0 when the
    /// spool is over it (`None`: no bound).
    fn room(&mut self) -> Result<Option<i64>> {
        if let Some(r) = self.room {
            return Ok(r);
        }
        self.write_items()?;
        let r = match self.db.max_depth()? {
            None => None,
            Some(bound) => Some(clamp(bound).saturating_sub(clamp(self.db.pending_count()?))),
        };
        self.room = Some(r);
        Ok(r)
    }
}

// The statements on a client's rejects walk ix_push_unacked_rejects:
// what is not acknowledged yet, never the client's whole history. Left to
// itself the planner takes the primary key (client_id, seq), which visits
// every entry the client ever sent, on every request.

/// Forget the refused numbers without a digest up to `?2`.
pub(super) const PRUNE_REJECTS: &str =
    "DELETE FROM spool_push_entries INDEXED BY ix_push_unacked_rejects \
     WHERE client_id = ?1 AND seq <= ?2 AND reason IS NOT NULL AND digest IS NULL";

/// Forget the reasons of the refused numbers up to `?2` (keeping digests).
pub(super) const FORGET_REASONS: &str =
    "UPDATE spool_push_entries INDEXED BY ix_push_unacked_rejects SET reason = NULL \
     WHERE client_id = ?1 AND seq <= ?2 AND reason IS NOT NULL";

/// The rejects not acknowledged yet above `?2`.
pub(super) const CLIENT_REJECTS: &str =
    "SELECT seq, reason FROM spool_push_entries INDEXED BY ix_push_unacked_rejects \
     WHERE client_id = ?1 AND seq > ?2 AND reason IS NOT NULL ORDER BY seq";

/// Insert `rows` (`n` of them) into `spool_push_entries` in one statement.
fn insert_records(db: &Db<'_>, n: usize, rows: &[HeldRecord]) -> Result<()> {
    let sql = multi_row_sql(
        "INSERT INTO spool_push_entries (client_id, seq, outcome, digest, reason) VALUES ",
        n,
        5,
    );
    let mut stmt = db.conn.prepare_cached(&sql).map_err(|e| db.err(e))?;
    for (i, r) in rows.iter().enumerate() {
        let first = i * 5 + 1;
        stmt.raw_bind_parameter(first, r.client.as_str())
            .and_then(|()| stmt.raw_bind_parameter(first + 1, clamp(r.seq)))
            .and_then(|()| stmt.raw_bind_parameter(first + 2, r.outcome))
            .and_then(|()| stmt.raw_bind_parameter(first + 3, r.digest.as_deref()))
            .and_then(|()| stmt.raw_bind_parameter(first + 4, r.reason.as_deref()))
            .map_err(|e| db.err(e))?;
    }
    stmt.raw_execute().map_err(|e| db.err(e))?;
    Ok(())
}

impl ReceiveRead for SqliteReceive<'_, '_> {
    fn last_seq(&mut self, client: &str) -> Result<u64> {
        client_last_seq(self.db, client)
    }

    fn digest(&mut self, client: &str, seq: u64) -> Result<Option<String>> {
        self.write_records()?;
        let d: Option<Option<String>> = self
            .db
            .conn
            .first(
                "SELECT digest FROM spool_push_entries WHERE client_id = ?1 AND seq = ?2",
                params![client, clamp(seq)],
                |r| r.get(0),
            )
            .map_err(|e| self.db.err(e))?;
        Ok(d.flatten())
    }

    fn rejects(&mut self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        self.write_records()?;
        client_rejects(self.db, client, after)
    }
}

impl ReceiveTxn for SqliteReceive<'_, '_> {
    fn enqueue(&mut self, item: NewItem) -> Result<Option<Enqueued>> {
        let owner = match self.held.owner(&item.key) {
            Some(id) => Some(id),
            None => self.db.key_owner(&item.key)?,
        };
        if let Some(id) = owner {
            return Ok(Some(Enqueued::dedup(id)));
        }
        let ck = item.coalesce_key.as_deref();
        if ck.is_some() {
            self.write_items()?;
        }
        if let Some(room) = self.room()? {
            let replaceable = match ck {
                Some(ck) => self.db.coalescible_count(ck)?,
                None => 0,
            };
            // As an enqueue: what it replaces goes first, then it must
            // fit under the bound.
            if room.saturating_add(clamp(replaceable)) <= 0 {
                return Ok(None);
            }
        }
        let replaced = match ck {
            Some(ck) => self.db.coalesce(ck)?,
            None => Vec::new(),
        };
        if let Some(room) = self.room()? {
            self.room = Some(Some(room + clamp(replaced.len() as u64) - 1));
        }
        let next = policy::next_id(match self.next_id {
            Some(n) => n,
            None => self.db.high_water()?,
        })?;
        self.next_id = Some(next);
        match ck {
            // The fresh-row insert leaves the coalesce key out.
            Some(_) => self
                .db
                .insert_pending(&Item::from_new(next, &item, self.now))?,
            None => {
                if self.held.hold_item(next, item) {
                    self.write_items()?;
                }
            }
        }
        Ok(Some(Enqueued {
            replaced,
            ..Enqueued::fresh(next)
        }))
    }

    fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()> {
        if self.held.hold_record(client, seq, record) {
            self.write_records()?;
        }
        Ok(())
    }

    fn set_last_seq(&mut self, client: &str, seq: u64) -> Result<()> {
        self.db.run(
            "INSERT INTO spool_push_clients (client_id, last_seq, updated_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (client_id) DO UPDATE \
                 SET last_seq = max(last_seq, excluded.last_seq), updated_at = excluded.updated_at",
            params![client, clamp(seq), self.now.as_millis()],
        )?;
        Ok(())
    }

    fn prune_rejects(&mut self, client: &str, upto: u64) -> Result<()> {
        self.write_records()?;
        for sql in [PRUNE_REJECTS, FORGET_REASONS] {
            self.db.run(sql, params![client, clamp(upto)])?;
        }
        Ok(())
    }
}

/// The ledger's statements ([`crate::backend::ledger_sql`]) over the
/// tables of `migrations/0002_push.sql`.
const LEDGER: LedgerSql = LedgerSql {
    last_seq: "SELECT last_seq FROM spool_push_clients WHERE client_id = ?1",
    rejects: CLIENT_REJECTS,
    count: "SELECT count(*) FROM spool_push_clients",
    list: "SELECT client_id, last_seq, updated_at FROM spool_push_clients ORDER BY client_id",
};

/// What `read` reads of the push ledger, or `none` in a database
/// without the push tables.
fn ledger<T>(
    db: &Db<'_>,
    none: T,
    read: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
) -> Result<T> {
    if !db.layout.has_push() {
        return Ok(none);
    }
    read(db.conn).map_err(|e| db.err(e))
}

fn client_last_seq(db: &Db<'_>, client: &str) -> Result<u64> {
    ledger(db, 0, |c| ledger_sql::last_seq(c, &LEDGER, client))
}

fn client_rejects(db: &Db<'_>, client: &str, after: u64) -> Result<Vec<Rejected>> {
    ledger(db, Vec::new(), |c| {
        ledger_sql::rejects(c, &LEDGER, client, after)
    })
}

/// How many clients ever pushed, from one count over the clients table.
pub(super) fn client_count(db: &Db<'_>) -> Result<u64> {
    ledger(db, 0, |c| ledger_sql::count(c, &LEDGER))
}

/// Every client of the receiving spool, by id.
pub(super) fn clients(db: &Db<'_>) -> Result<Vec<ClientSummary>> {
    ledger(db, Vec::new(), |c| ledger_sql::summaries(c, &LEDGER))
}
