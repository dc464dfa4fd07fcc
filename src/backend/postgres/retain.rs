//! Retention of delivered items (SPEC §9) on PostgreSQL: with a window
//! set (`spools.retain_ms`), a delivery moves the item's row from `items`
//! to `delivered` in one statement, with the commit's time and the
//! evidence; a key no pending item carries deduplicates while the newest
//! delivered row with it is inside the window; expired rows are pruned in
//! bounded batches by the mutating calls that deliver or enqueue, and by
//! [`crate::Queue::prune_delivered`].
//!
//! Every writer of `delivered` (deliver, complete, push ack, import,
//! prune) holds the spool row lock, as enqueues do, so an enqueue's
//! dedup decision sees every delivery committed before it and none can
//! commit while it decides. `spools.retained` counts the rows, kept in
//! the same transactions (`stats` reads it).
//!
//! Times are the server's clock (`{now}`), or the spool's clock when it
//! was opened with one other than the system clock (tests).

use super::conn::Tx;
use super::rows::{id_param, item_from_row, text, u64_of};
use super::spool::SpoolRow;
use super::PostgresQueue;
use crate::error::{Error, Result};
use crate::item::{DeliveredItem, Delivery, Evidence, ItemId};
use crate::time::Timestamp;
use postgres::Row;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The longest window stored, in milliseconds (about 73 million years):
/// `now - window` stays far from overflowing.
const MAX_WINDOW_MS: i64 = i64::MAX / 4;

/// A retention window as stored in `spools.retain_ms`.
fn window_ms(w: Duration) -> i64 {
    i64::try_from(w.as_millis())
        .unwrap_or(MAX_WINDOW_MS)
        .min(MAX_WINDOW_MS)
}

/// The statement that moves delivered items from `items` to `delivered`:
/// `$t` the rows `t(id, ev, ...)` to move, `$fence` a further condition
/// on the item row. One text for [`MOVE`] and [`MOVE_LEASED`].
macro_rules! move_sql {
    ($t:literal, $fence:literal) => {
        concat!(
            "WITH t AS (", $t, "), \
             d AS (DELETE FROM {s}.items i USING t WHERE i.spool = $1 AND i.id = t.id", $fence, " \
                 RETURNING i.id, i.payload, i.key, i.attempts, i.enqueued_at, i.last_error, i.grp, \
                     i.coalesce_key, i.push_seq, t.ev), \
             sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM d \
                 WHERE push_seq IS NOT NULL AND $4 ON CONFLICT DO NOTHING), \
             ins AS (INSERT INTO {s}.delivered (spool, id, payload, key, attempts, enqueued_at, \
                     last_error, grp, coalesce_key, delivered_at, evidence) \
                 SELECT $1, id, payload, key, attempts, enqueued_at, last_error, grp, coalesce_key, \
                     COALESCE($5::int8, {now}), ev FROM d) \
             SELECT id FROM d"
        )
    };
}

/// Move delivered items (`$2` ids, `$3` encoded evidence) from `items` to
/// `delivered` at `COALESCE($5, now)`; push numbers of in-flight items
/// become skips when `$4`. Returns the ids moved.
const MOVE: &str = move_sql!(
    "SELECT * FROM unnest($2::int8[], $3::text[]) AS t(id, ev)",
    ""
);

/// [`MOVE`] fenced on lease tokens (`$6`): only items still carrying
/// theirs move.
const MOVE_LEASED: &str = move_sql!(
    "SELECT * FROM unnest($2::int8[], $3::text[], $6::int8[]) AS t(id, ev, tok)",
    " AND i.lease_token = t.tok"
);

/// Delete up to `$4` delivered rows whose window (`$3` ms; NULL: off,
/// every row has expired) ended at `COALESCE($2, now)`, oldest first (an
/// index range scan of `delivered_at_idx`), and count them off
/// `spools.retained`. Returns how many.
const PRUNE: &str = "WITH p AS (DELETE FROM {s}.delivered WHERE spool = $1 AND id IN ( \
         SELECT id FROM {s}.delivered WHERE spool = $1 \
           AND delivered_at <= COALESCE(COALESCE($2::int8, {now}) - $3::int8, 9223372036854775807) \
         ORDER BY delivered_at LIMIT $4) RETURNING 1), \
     u AS (UPDATE {s}.spools SET retained = retained - (SELECT count(*) FROM p) WHERE name = $1) \
     SELECT count(*) FROM p";

/// The newest delivered row per key of `$2` whose window (`$4` ms) still
/// runs at `COALESCE($3, now)`.
const OWNERS: &str = "SELECT DISTINCT ON (key) key, id FROM {s}.delivered \
     WHERE spool = $1 AND key = ANY($2) AND key <> '\\x'::bytea \
       AND delivered_at > COALESCE($3::int8, {now}) - $4::int8 \
     ORDER BY key, delivered_at DESC, id DESC";

/// [`OWNERS`] for one key.
const OWNER: &str = "SELECT id FROM {s}.delivered \
     WHERE spool = $1 AND key = $2 AND key <> '\\x'::bytea \
       AND delivered_at > COALESCE($3::int8, {now}) - $4::int8 \
     ORDER BY delivered_at DESC, id DESC LIMIT 1";

/// The columns [`PostgresQueue::delivered_from_row`](super::PostgresQueue::delivered_from_row) reads: those of [`item_from_row`]
/// (what a delivered row does not keep reads as not held, not waiting,
/// not in flight), then `delivered_at` and `evidence`.
macro_rules! delivered_select {
    ($tail:literal) => {
        concat!(
            "SELECT id, payload, key, attempts, enqueued_at, NULL::int8, last_error, false, \
             NULL::int8, grp, coalesce_key, delivered_at, evidence FROM {s}.delivered ",
            $tail
        )
    };
}

impl PostgresQueue {
    fn delivered_from_row(&self, r: &Row) -> Result<DeliveredItem> {
        let item = item_from_row(r);
        let ev: &str = r.get(12);
        let evidence = Evidence::decode(ev).ok_or_else(|| {
            Error::Internal(format!(
                "{}: delivered item {} has evidence {ev:?}, which this version cannot read",
                self.display, item.id
            ))
        })?;
        Ok(DeliveredItem {
            item,
            delivery: Delivery {
                at: Timestamp::from_millis(r.get(11)),
                evidence,
            },
        })
    }

    /// Remove delivered pending items `ids` (with `tokens`, only those
    /// still carrying them), each with its encoded `evidence`: kept in
    /// `delivered` while the spool has a window, deleted otherwise; push
    /// numbers of removed in-flight items become skips when `skip`. Then
    /// prune up to [`crate::item::PRUNE_BATCH`] expired records, also
    /// when `ids` is empty (a push acknowledgement that only rejected or
    /// skipped prunes too, as on every backend). The spool row (`spool`)
    /// is locked. Returns the ids removed.
    pub(super) fn deliver_in(
        &self,
        tx: &mut Tx<'_>,
        spool: &SpoolRow,
        ids: &[i64],
        evidence: &[String],
        tokens: Option<&[i64]>,
        skip: bool,
    ) -> Result<HashSet<ItemId>> {
        let removed = if ids.is_empty() {
            HashSet::new()
        } else if spool.retain_ms.is_some() {
            let now = self.now_param();
            let rows = match tokens {
                None => tx.query(MOVE, &[self.spool(), &ids, &evidence, &skip, &now])?,
                Some(tokens) => tx.query(
                    MOVE_LEASED,
                    &[self.spool(), &ids, &evidence, &skip, &now, &tokens],
                )?,
            };
            let moved: HashSet<ItemId> = rows.iter().map(|r| u64_of(r.get(0))).collect();
            if !moved.is_empty() {
                let n = moved.len() as i64;
                tx.execute(
                    "UPDATE {s}.spools SET depth = depth - $2, retained = retained + $2 \
                     WHERE name = $1",
                    &[self.spool(), &n],
                )?;
            }
            moved
        } else {
            self.remove(tx, ids, tokens, skip)?
        };
        if spool.retained > 0 || (spool.retain_ms.is_some() && !removed.is_empty()) {
            self.prune_in(tx, spool.retain_ms, crate::item::PRUNE_BATCH)?;
        }
        Ok(removed)
    }

    /// Delete up to `limit` delivered records whose window (`retain_ms`;
    /// `None`: off, all of them) has ended, in the open transaction (the
    /// spool row locked). How many.
    pub(super) fn prune_in(
        &self,
        tx: &mut Tx<'_>,
        retain_ms: Option<i64>,
        limit: usize,
    ) -> Result<u64> {
        let limit = limit.min(i64::MAX as usize) as i64;
        let row = tx.query_one(
            PRUNE,
            &[self.spool(), &self.now_param(), &retain_ms, &limit],
        )?;
        Ok(u64_of(row.get(0)))
    }

    /// The retained delivered items whose keys (of `keys`) still
    /// deduplicate under the window `window_ms`: the newest per key.
    pub(super) fn delivered_owners(
        &self,
        tx: &mut Tx<'_>,
        keys: &[&[u8]],
        window_ms: i64,
    ) -> Result<HashMap<Vec<u8>, ItemId>> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = tx.query(
            OWNERS,
            &[self.spool(), &keys, &self.now_param(), &window_ms],
        )?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), u64_of(r.get(1))))
            .collect())
    }

    /// [`PostgresQueue::delivered_owners`] for one key.
    pub(super) fn delivered_owner(
        &self,
        tx: &mut Tx<'_>,
        key: &str,
        window_ms: i64,
    ) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        let row = tx.query_opt(
            OWNER,
            &[self.spool(), &key.as_bytes(), &self.now_param(), &window_ms],
        )?;
        Ok(row.map(|r| u64_of(r.get(0))))
    }

    /// Store an imported delivered record under its (already decided)
    /// id; the caller counts it in `spools.retained`.
    pub(super) fn insert_delivered(&self, tx: &mut Tx<'_>, d: &DeliveredItem) -> Result<()> {
        let item = &d.item;
        tx.execute(
            "INSERT INTO {s}.delivered (spool, id, payload, key, attempts, enqueued_at, last_error, \
             grp, coalesce_key, delivered_at, evidence) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                self.spool(),
                &id_param(item.id),
                &item.payload,
                &item.key.as_bytes(),
                &i64::from(item.attempts),
                &item.enqueued_at.map(|t| t.as_millis()),
                &item.last_error.as_deref().map(text),
                &item.group.as_deref().map(text),
                &item.coalesce_key.as_deref().map(text),
                &d.delivery.at.as_millis(),
                &d.delivery.evidence.encode(),
            ],
        )?;
        Ok(())
    }

    /// [`crate::Queue::retain`].
    pub(super) fn retain_window(&self) -> Result<Option<Duration>> {
        if !self.retention {
            return Ok(None);
        }
        let sql = "SELECT retain_ms FROM {s}.spools WHERE name = $1";
        let ms: Option<i64> = self.spool_value("read the retention window of", sql)?;
        Ok(ms.map(|ms| Duration::from_millis(u64_of(ms))))
    }

    /// [`crate::Queue::set_retain`].
    pub(super) fn set_retain_window(&self, window: Option<Duration>) -> Result<()> {
        self.set_spool_value(
            "set the retention window of",
            "UPDATE {s}.spools SET retain_ms = $2 WHERE name = $1",
            &window.map(window_ms),
        )
    }

    /// [`crate::Queue::delivered_page`].
    pub(super) fn delivered_after(
        &self,
        after: ItemId,
        limit: usize,
    ) -> Result<Vec<DeliveredItem>> {
        if limit == 0 || !self.retention {
            return Ok(Vec::new());
        }
        self.txn("read delivered items in", false, |tx| {
            let rows = tx.query(
                delivered_select!("WHERE spool = $1 AND id > $2 ORDER BY id LIMIT $3"),
                &[
                    self.spool(),
                    &id_param(after),
                    &(limit.min(i64::MAX as usize) as i64),
                ],
            )?;
            rows.iter().map(|r| self.delivered_from_row(r)).collect()
        })
    }

    /// [`crate::Queue::delivered_get`].
    pub(super) fn delivered_one(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        if !self.retention {
            return Ok(None);
        }
        self.txn("read delivered items in", false, |tx| {
            let row = tx.query_opt(
                delivered_select!("WHERE spool = $1 AND id = $2"),
                &[self.spool(), &id_param(id)],
            )?;
            row.map(|r| self.delivered_from_row(&r)).transpose()
        })
    }

    /// [`crate::Queue::prune_delivered`]: one commit, the spool row
    /// locked as by every writer of `delivered`.
    pub(super) fn prune_expired(&self, limit: usize) -> Result<u64> {
        if limit == 0 {
            return Ok(0);
        }
        self.txn("prune delivered items of", true, |tx| {
            let spool = self.lock_spool(tx)?;
            self.prune_in(tx, spool.retain_ms, limit)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_stored_in_range() {
        assert_eq!(window_ms(Duration::from_secs(7 * 86_400)), 604_800_000);
        assert_eq!(window_ms(Duration::MAX), MAX_WINDOW_MS);
        assert!(crate::time::Timestamp::from_secs(4_102_444_800)
            .as_millis()
            .checked_sub(window_ms(Duration::MAX))
            .is_some());
    }
}
