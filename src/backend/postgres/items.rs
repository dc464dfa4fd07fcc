//! The pending rows of a PostgreSQL spool (`items`) that every write path
//! shares: the owners of keys, storing an imported item under its own id
//! (pending, or in `dead_letters`), and removing delivered items.

use super::conn::Tx;
use super::rows::{id_param, text, u64_of};
use super::PostgresQueue;
use crate::error::Result;
use crate::item::{Item, ItemId};
use crate::time::Timestamp;
use postgres::types::ToSql;
use std::collections::{HashMap, HashSet};

/// The pending items a new item with coalesce key `$2` replaces (SPEC
/// §9): that key, never attempted, not in flight to a push receiver, not
/// leased (`$3`: the injected clock's now, or `NULL` for the server's).
macro_rules! coalescible {
    () => {
        "spool = $1 AND coalesce_key = $2 AND attempts = 0 AND push_seq IS NULL \
         AND (lease_until IS NULL OR lease_until <= COALESCE($3::int8, {now}))"
    };
}

impl PostgresQueue {
    /// The pending items that carry `keys`, by key.
    pub(super) fn key_owners(
        &self,
        tx: &mut Tx<'_>,
        keys: &[&[u8]],
    ) -> Result<HashMap<Vec<u8>, ItemId>> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = tx.query(
            "SELECT key, id FROM {s}.items WHERE spool = $1 AND key = ANY($2) AND key <> '\\x'::bytea",
            &[self.spool(), &keys],
        )?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), u64_of(r.get(1))))
            .collect())
    }

    /// Remove the pending items a new item with coalesce key `ck`
    /// replaces (never attempted, not in flight, not leased; SPEC §9),
    /// returning their ids in id order.
    pub(super) fn coalesce(&self, tx: &mut Tx<'_>, ck: &str) -> Result<Vec<ItemId>> {
        // A claim that took one of them first has counted its attempt (the
        // DELETE re-reads a row a claim changed meanwhile and leaves it);
        // one that comes later skips the rows this locks.
        let rows = tx.query(
            concat!(
                "DELETE FROM {s}.items WHERE ",
                coalescible!(),
                " RETURNING id"
            ),
            &[self.spool(), &text(ck), &self.now_param()],
        )?;
        let mut ids: Vec<ItemId> = rows.iter().map(|r| u64_of(r.get(0))).collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// How many pending items [`PostgresQueue::coalesce`] would remove.
    pub(super) fn coalescible_count(&self, tx: &mut Tx<'_>, ck: &str) -> Result<u64> {
        let row = tx.query_one(
            concat!("SELECT count(*) FROM {s}.items WHERE ", coalescible!()),
            &[self.spool(), &text(ck), &self.now_param()],
        )?;
        Ok(u64_of(row.get(0)))
    }

    pub(super) fn key_owner(&self, tx: &mut Tx<'_>, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        let row = tx.query_opt(
            "SELECT id FROM {s}.items WHERE spool = $1 AND key = $2 AND key <> '\\x'::bytea",
            &[self.spool(), &key.as_bytes()],
        )?;
        Ok(row.map(|r| u64_of(r.get(0))))
    }

    /// Store `item` under its own id: as pending (`dead_at` is `None`), or
    /// as a dead letter dead at `dead_at`.
    pub(super) fn insert_item(
        &self,
        tx: &mut Tx<'_>,
        item: &Item,
        dead_at: Option<Timestamp>,
    ) -> Result<()> {
        let dead_at_ms = dead_at.map(|t| t.as_millis());
        let params: [&(dyn ToSql + Sync); 13] = [
            self.spool(),
            &id_param(item.id),
            &item.payload,
            &item.key.as_bytes(),
            &i64::from(item.attempts),
            &item.enqueued_at.map(|t| t.as_millis()),
            &item.next_retry_at.map(|t| t.as_millis()),
            &item.last_error.as_deref().map(text),
            &item.held,
            &item.push_seq.map(id_param),
            &item.group.as_deref().map(text),
            &item.coalesce_key.as_deref().map(text),
            &dead_at_ms,
        ];
        match dead_at {
            None => tx.execute(
                "INSERT INTO {s}.items (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                 grp, coalesce_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                &params[..12],
            )?,
            Some(_) => tx.execute(
                "INSERT INTO {s}.dead_letters (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                 grp, coalesce_key, dead_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &params,
            )?,
        };
        Ok(())
    }

    /// Delete pending items `ids` (with `tokens`, only those still
    /// carrying them); push numbers of removed in-flight items become
    /// skips when `skip`. Returns the removed ids.
    pub(super) fn remove(
        &self,
        tx: &mut Tx<'_>,
        ids: &[i64],
        tokens: Option<&[i64]>,
        skip: bool,
    ) -> Result<HashSet<ItemId>> {
        let rows = match tokens {
            None => tx.query(
                "WITH d AS (DELETE FROM {s}.items WHERE spool = $1 AND id = ANY($2) RETURNING id, push_seq), \
                 sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM d \
                     WHERE push_seq IS NOT NULL AND $3 ON CONFLICT DO NOTHING) \
                 SELECT id FROM d",
                &[self.spool(), &ids, &skip],
            )?,
            Some(tokens) => tx.query(
                "WITH d AS (DELETE FROM {s}.items i USING unnest($2::int8[], $3::int8[]) AS t(id, tok) \
                     WHERE i.spool = $1 AND i.id = t.id AND i.lease_token = t.tok RETURNING i.id, i.push_seq), \
                 sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM d \
                     WHERE push_seq IS NOT NULL ON CONFLICT DO NOTHING) \
                 SELECT id FROM d",
                &[self.spool(), &ids, &tokens],
            )?,
        };
        let removed: HashSet<ItemId> = rows.iter().map(|r| u64_of(r.get(0))).collect();
        if !removed.is_empty() {
            self.adjust(tx, 0, -(removed.len() as i64), 0)?;
        }
        Ok(removed)
    }
}
