//! Dead letters in a PostgreSQL spool (`dead_letters`): moving an item
//! there, reading them, and requeueing or purging them under the spool
//! row lock.

use super::conn::Tx;
use super::rows::{by_version, dead_from_row, id_param, text};
use super::PostgresQueue;
use crate::backend::state;
use crate::error::Result;
use crate::item::{DeadLetter, ItemId};
use crate::queue::LeaseToken;

impl PostgresQueue {
    /// Move pending item `id` to the dead letters (when `token` is given,
    /// only while it carries it). A push number becomes a skip when
    /// `skip`; with `uncount`, the dead letter keeps one attempt fewer
    /// (the one a claim counted for a delivery that was never made).
    /// Counts are adjusted. Whether it moved.
    pub(super) fn kill(
        &self,
        tx: &mut Tx<'_>,
        id: ItemId,
        last_error: &str,
        skip: bool,
        token: Option<LeaseToken>,
        uncount: bool,
    ) -> Result<bool> {
        let row = tx.query_one(
            "WITH d AS (DELETE FROM {s}.items WHERE spool = $1 AND id = $2 \
                 AND ($6::int8 IS NULL OR lease_token = $6) RETURNING *), \
             ins AS (INSERT INTO {s}.dead_letters \
                 (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  grp, coalesce_key, dead_at) \
                 SELECT spool, id, payload, key, \
                 CASE WHEN $7 THEN greatest(attempts - 1, 0) ELSE attempts END, \
                 enqueued_at, next_retry_at, $3, false, push_seq, \
                 grp, coalesce_key, COALESCE($4::int8, {now}) FROM d RETURNING push_seq), \
             sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM ins \
                 WHERE push_seq IS NOT NULL AND $5 ON CONFLICT DO NOTHING) \
             SELECT count(*) FROM ins",
            &[
                self.spool(),
                &id_param(id),
                &text(last_error),
                &self.now_param(),
                &skip,
                &token,
                &uncount,
            ],
        )?;
        let n: i64 = row.get(0);
        if n > 0 {
            self.adjust(tx, 0, -n, n)?;
        }
        Ok(n > 0)
    }

    /// Up to `limit` dead letters after `after`, in id order.
    pub(super) fn dead_after(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.txn("read dead letters in", false, |tx| {
            let rows = tx.query(
                self.pick(by_version!(
                    "SELECT ",
                    ", dead_at FROM {s}.dead_letters WHERE spool = $1 AND id > $2 ORDER BY id LIMIT $3"
                )),
                &[self.spool(), &id_param(after), &(limit.min(i64::MAX as usize) as i64)],
            )?;
            Ok(rows.iter().map(dead_from_row).collect())
        })
    }

    /// One dead letter.
    pub(super) fn dead_one(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        self.txn("read dead letters in", false, |tx| {
            let row = tx.query_opt(
                self.pick(by_version!(
                    "SELECT ",
                    ", dead_at FROM {s}.dead_letters WHERE spool = $1 AND id = $2"
                )),
                &[self.spool(), &id_param(id)],
            )?;
            Ok(row.as_ref().map(dead_from_row))
        })
    }

    /// Requeue dead letters `ids` inside `tx` (see
    /// [`crate::Queue::requeue`]): every check passes before anything
    /// moves.
    pub(super) fn requeue_in(&self, tx: &mut Tx<'_>, ids: &[ItemId]) -> Result<Vec<bool>> {
        let spool = self.lock_spool(tx)?;
        state::check_requeue_with(
            tx,
            ids,
            |tx, id| {
                let row = tx.query_opt(
                    "SELECT key FROM {s}.dead_letters WHERE spool = $1 AND id = $2",
                    &[self.spool(), &id_param(id)],
                )?;
                Ok(row.map(|row| String::from_utf8_lossy(row.get::<_, &[u8]>(0)).into_owned()))
            },
            |tx, key| self.key_owner(tx, key),
            |_| Ok(spool.max_depth.map(|bound| (bound, spool.depth))),
        )?;
        let mut out = Vec::with_capacity(ids.len());
        let mut moved = 0i64;
        for &id in ids {
            let n = tx.execute(
                "WITH d AS (DELETE FROM {s}.dead_letters WHERE spool = $1 AND id = $2 RETURNING *) \
                 INSERT INTO {s}.items (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, \
                 grp, coalesce_key) \
                 SELECT spool, id, payload, key, 0, enqueued_at, NULL, last_error, false, grp, coalesce_key FROM d",
                &[self.spool(), &id_param(id)],
            )?;
            moved += n as i64;
            out.push(n > 0);
        }
        if moved > 0 {
            self.adjust_and_notify(tx, 0, moved, -moved)?;
        }
        Ok(out)
    }

    /// Delete dead letters `ids` inside `tx`; whether each was one.
    pub(super) fn purge_in(&self, tx: &mut Tx<'_>, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.lock_spool(tx)?;
        let mut out = Vec::with_capacity(ids.len());
        let mut n_all = 0i64;
        for &id in ids {
            let n = tx.execute(
                "DELETE FROM {s}.dead_letters WHERE spool = $1 AND id = $2",
                &[self.spool(), &id_param(id)],
            )?;
            n_all += n as i64;
            out.push(n > 0);
        }
        if n_all > 0 {
            self.adjust(tx, 0, 0, -n_all)?;
        }
        Ok(out)
    }
}
