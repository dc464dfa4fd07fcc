//! What the index answers: counts, the push state, where items are
//! (pages, single items, in-flight entries), key owners, retention's
//! expired records, due counts and the group gate, stats, and the
//! receiver's ledger.

use super::{boot_id, u, DeliveredLoc, Index, Loc};
use crate::backend::due_sql::{self, group_waiting_sql, DueSql};
use crate::backend::ledger_sql::{self, LedgerSql};
use crate::backend::sql::{clamp, SqlStore};
use crate::error::{Error, Result};
use crate::item::{ClientSummary, ItemId, PushState, QueueStats};
use crate::push::wire::Rejected;
use crate::time::Timestamp;
use rusqlite::{params, Row};

/// The ledger's statements ([`crate::backend::ledger_sql`]) over the
/// index's `clients` and `client_entries` (a client is `known` once one
/// of its lines recorded a number or a `last_seq`).
/// The due rule's statements ([`crate::backend::due_sql`]) over
/// `pending`. The index keeps no index of held items: items both held
/// and waiting are found through `pending_retry` either way.
const DUE: DueSql = DueSql {
    group_waiting: group_waiting_sql!("pending", "pending_group"),
    waiting: "SELECT count(*) FROM pending WHERE next_retry_at > ?1",
    held_waiting_by_held: "SELECT count(*) FROM pending INDEXED BY pending_retry \
                           WHERE held AND next_retry_at > ?1",
    held_waiting_by_retry: "SELECT count(*) FROM pending INDEXED BY pending_retry \
                            WHERE held AND next_retry_at > ?1",
};

const LEDGER: LedgerSql = LedgerSql {
    last_seq: "SELECT last_seq FROM clients WHERE id = ?1 AND known",
    rejects: "SELECT e.seq, coalesce(e.reason, '') FROM client_entries e \
              JOIN clients c ON c.id = e.client \
              WHERE e.client = ?1 AND e.kind = 1 AND e.seq > max(?2, c.acked) ORDER BY e.seq",
    count: "SELECT count(*) FROM clients WHERE known",
    list: "SELECT id, last_seq, at FROM clients WHERE known ORDER BY id",
};

impl Index {
    /// The cells of `spool shape` over the pending items (`held`: the
    /// held ones, else the others) with an id above `after` — at most
    /// `limit` of them in id order, or all — from one scan of the
    /// `pending` table (see [`crate::backend::shape_sql`]); `seen` says how
    /// far it got.
    pub fn shape_cells(
        &self,
        q: &crate::ops::shape::ShapeQuery,
        held: bool,
        after: i64,
        limit: Option<usize>,
        seen: &mut crate::backend::shape_sql::Seen,
    ) -> Result<Vec<crate::ops::shape::ShapeCell>> {
        use crate::ops::shape::ShapeBy;
        let value = match q.by {
            ShapeBy::Error => "last_error",
            ShapeBy::Group => "group_name",
            ShapeBy::Attempts => "NULL",
            ShapeBy::KeyPrefix => "key",
        };
        let held = u8::from(held);
        let sql = match limit {
            // A chunk, in id order.
            Some(limit) => format!(
                "SELECT {value}, attempts, enqueued_at, id FROM pending \
                 WHERE held = {held} AND id > {after} ORDER BY id LIMIT {limit}"
            ),
            // Everything at once: a plain scan.
            None => format!(
                "SELECT {value}, attempts, enqueued_at, id FROM pending \
                 WHERE held = {held} AND id > {after}"
            ),
        };
        self.conn
            .prepare(&sql)
            .and_then(|mut stmt| {
                crate::backend::shape_sql::count_cells(&mut stmt, q, None, Some(seen))
            })
            .map_err(self.err("read"))
    }

    pub(super) fn state_u64(&self, column: &str) -> Result<u64> {
        self.row(&format!("SELECT {column} FROM state"), [], |r| {
            r.get::<_, i64>(0)
        })
        .map(u)
    }

    /// Pending items, held included.
    pub fn depth(&self) -> Result<u64> {
        self.state_u64("depth")
    }

    /// Dead letters.
    pub fn dead_count(&self) -> Result<u64> {
        self.state_u64("dead")
    }

    /// Retained delivered records (expired ones not pruned yet included).
    pub fn delivered_count(&self) -> Result<u64> {
        self.state_u64("delivered")
    }

    /// The id high-water mark.
    pub fn high_water(&self) -> Result<ItemId> {
        self.state_u64("high_water")
    }

    /// Items ever evicted by the `drop-oldest` policy.
    pub fn evicted_total(&self) -> Result<u64> {
        self.state_u64("evicted_total")
    }

    /// The push state.
    pub fn push(&self) -> Result<PushState> {
        let (assigned, acked, skips): (i64, i64, String) = self.row(
            "SELECT push_assigned, push_acked, push_skips FROM state",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let skips: Vec<u64> = serde_json::from_str(&skips)
            .map_err(|e| Error::corrupt(&self.path, None, format!("bad push skips: {e}")))?;
        Ok(PushState {
            last_assigned: u(assigned),
            acked: u(acked),
            skips,
        })
    }

    /// The uuid a regeneration gave, if any.
    pub fn uuid(&self) -> Result<Option<String>> {
        self.row("SELECT uuid FROM state", [], |r| r.get(0))
    }

    /// The pending item a non-empty key deduplicates to: the oldest
    /// pending item carrying it.
    pub fn key_owner(&self, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        self.first(
            "SELECT id FROM pending WHERE key = ?1 AND key <> '' ORDER BY id LIMIT 1",
            [key],
            |r| r.get::<_, i64>(0),
        )
        .map(|o| o.map(u))
    }

    fn ids(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<ItemId>> {
        self.rows(sql, p, |r| r.get::<_, i64>(0).map(u))
    }

    /// The pending items a new item with coalesce key `ck` replaces (SPEC
    /// §9: that key, never attempted, not in flight), in id order.
    pub fn coalescible(&self, ck: &str) -> Result<Vec<ItemId>> {
        self.ids(
            "SELECT id FROM pending WHERE coalesce_key = ?1 AND attempts = 0 \
             AND push_seq IS NULL ORDER BY id",
            [ck],
        )
    }

    /// The oldest pending item above `after` that `drop-oldest` may evict
    /// (not held, not in flight).
    pub fn oldest_evictable(&self, after: ItemId) -> Result<Option<ItemId>> {
        Ok(self
            .ids(
                "SELECT id FROM pending WHERE id > ?1 AND NOT held AND push_seq IS NULL \
                 ORDER BY id LIMIT 1",
                [clamp(after)],
            )?
            .pop())
    }

    pub(super) fn locs(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<Loc>> {
        self.rows(sql, p, loc_of)
    }

    /// The one row of `sql` for `id` (`?1`), mapped by `f`, if it has one
    /// (none for an id past `i64::MAX`, which no row holds).
    fn by_id<T>(
        &self,
        sql: &str,
        id: ItemId,
        f: impl FnOnce(&Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Option<T>> {
        let Ok(id) = i64::try_from(id) else {
            return Ok(None);
        };
        self.first(sql, [id], f)
    }

    /// Where pending items after `after` are, in id order.
    pub fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Loc>> {
        self.locs(
            "SELECT id, off, len FROM pending WHERE id > ?1 ORDER BY id LIMIT ?2",
            [clamp(after), clamp(limit)],
        )
    }

    /// Where dead letters after `after` are, in id order.
    pub fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<Loc>> {
        self.locs(
            "SELECT id, off, len FROM dead WHERE id > ?1 ORDER BY id LIMIT ?2",
            [clamp(after), clamp(limit)],
        )
    }

    /// Where retained delivered items after `after` are, in id order.
    pub fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredLoc>> {
        self.delivered_locs(
            "SELECT id, off, len, done_off, done_len FROM delivered WHERE id > ?1 ORDER BY id LIMIT ?2",
            [clamp(after), clamp(limit)],
        )
    }

    /// Where retained delivered item `id` is.
    pub fn delivered_loc(&self, id: ItemId) -> Result<Option<DeliveredLoc>> {
        self.by_id(
            "SELECT id, off, len, done_off, done_len FROM delivered WHERE id = ?1",
            id,
            delivered_loc_of,
        )
    }

    /// Up to `limit` retained records the main file holds, with ids
    /// after `after`, in id order (see the `retain` module).
    pub fn main_records(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredLoc>> {
        self.delivered_locs(
            "SELECT id, off, len, done_off, done_len FROM delivered \
             WHERE id > ?1 AND done_off IS NOT NULL ORDER BY id LIMIT ?2",
            [clamp(after), clamp(limit)],
        )
    }

    fn delivered_locs(&self, sql: &str, p: impl rusqlite::Params) -> Result<Vec<DeliveredLoc>> {
        self.rows(sql, p, delivered_loc_of)
    }

    /// The newest retained delivered record that carries the non-empty
    /// key `key` (the latest `delivered_at`, the highest id among equal
    /// ones), with its time of delivery (Unix ms). Whether its window is
    /// still open is the caller's to decide. One lookup in the key index.
    pub fn delivered_owner(&self, key: &str) -> Result<Option<(ItemId, i64)>> {
        if key.is_empty() {
            return Ok(None);
        }
        self.first(
            "SELECT id, delivered_at FROM delivered WHERE key = ?1 AND key <> '' \
                 ORDER BY delivered_at DESC, id DESC LIMIT 1",
            [key],
            |r| Ok((u(r.get(0)?), r.get(1)?)),
        )
    }

    /// The lowest id up to `upto` of a dead letter that carries the
    /// non-empty key `key` (an import's dedup of dead records, see
    /// `policy::import_lookup`). One lookup in the key index.
    pub fn dead_owner(&self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.owner_upto(
            "SELECT id FROM dead INDEXED BY dead_key WHERE key = ?1 AND key <> '' AND id <= ?2 \
             ORDER BY id LIMIT 1",
            key,
            upto,
        )
    }

    /// The lowest id up to `upto` of a retained delivered record that
    /// carries the non-empty key `key` (an import's dedup of delivered
    /// records). One range of the key index.
    pub fn delivered_owner_upto(&self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.owner_upto(
            "SELECT min(id) FROM delivered INDEXED BY delivered_key \
             WHERE key = ?1 AND key <> '' AND id <= ?2",
            key,
            upto,
        )
    }

    pub(super) fn owner_upto(&self, sql: &str, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        let upto = clamp(upto);
        self.first(sql, params![key, upto], |r| r.get::<_, Option<i64>>(0))
            .map(|o| o.flatten().map(u))
    }

    /// Up to `limit` delivered records delivered at or before `cutoff`
    /// (Unix ms; `None`: every record), each with whether the main file
    /// still holds a live `put` line for it: the late ones (see
    /// [`super::Applier`]'s `late`) oldest first, then the others from the
    /// lowest id up, to the first one still inside its window (their
    /// delivery times never decrease with the id). The walk starts after
    /// `state.prune_after` (every record up to it is late or gone) and
    /// moves it on past the records it returns and the late ones it
    /// passes, in the call's transaction: the returned records are pruned
    /// by the call, or the transaction rolls back.
    pub fn delivered_expired(
        &self,
        cutoff: Option<i64>,
        limit: usize,
    ) -> Result<Vec<(ItemId, bool)>> {
        let crate::backend::retain_sql::Expired { records, cursor } =
            crate::backend::retain_sql::expired(
                &self.conn,
                &super::apply::RECORDS,
                cutoff.unwrap_or(i64::MAX),
                limit,
            )
            .map_err(self.err("read"))?;
        if let Some(cursor) = cursor {
            self.will_write();
            self.run("UPDATE state SET prune_after = ?1", [cursor])?;
        }
        Ok(records
            .into_iter()
            .map(|(id, in_main)| (u(id), in_main))
            .collect())
    }

    /// Where in-flight items with a number above `after` are, in
    /// sequence order.
    pub fn in_flight_page(&self, after: u64, limit: usize) -> Result<Vec<Loc>> {
        self.locs(
            "SELECT id, off, len FROM pending WHERE push_seq > ?1 ORDER BY push_seq LIMIT ?2",
            [clamp(after), clamp(limit)],
        )
    }

    /// Where pending item `id` is.
    pub fn pending_loc(&self, id: ItemId) -> Result<Option<Loc>> {
        self.by_id("SELECT id, off, len FROM pending WHERE id = ?1", id, loc_of)
    }

    /// Where dead letter `id` is.
    pub fn dead_loc(&self, id: ItemId) -> Result<Option<Loc>> {
        self.by_id("SELECT id, off, len FROM dead WHERE id = ?1", id, loc_of)
    }

    /// `None` when `id` is not pending; else its push sequence number.
    pub fn pending_seq(&self, id: ItemId) -> Result<Option<Option<u64>>> {
        self.by_id("SELECT push_seq FROM pending WHERE id = ?1", id, |r| {
            r.get::<_, Option<i64>>(0)
        })
        .map(|o| o.map(|seq| seq.map(u)))
    }

    /// `None` when `id` is not a dead letter; else its key.
    pub fn dead_key(&self, id: ItemId) -> Result<Option<String>> {
        self.by_id("SELECT key FROM dead WHERE id = ?1", id, |r| r.get(0))
    }

    /// In-flight `(seq, id)` with `after < seq <= upto`.
    pub fn in_flight(&self, after: u64, upto: u64) -> Result<Vec<(u64, ItemId)>> {
        self.rows(
                "SELECT push_seq, id FROM pending WHERE push_seq > ?1 AND push_seq <= ?2 ORDER BY push_seq",
                [clamp(after), clamp(upto)],
                |r| Ok((u(r.get(0)?), u(r.get(1)?))),
            )
    }

    /// Pending items a replay at `now` would attempt (the rule is
    /// [`crate::backend::due_sql`]'s): not held, unless `ignore_backoff`
    /// not waiting, and not waiting behind an earlier pending item of
    /// their ordering group.
    pub fn due_count(&self, now: Timestamp, ignore_backoff: bool) -> Result<u64> {
        let now = (!ignore_backoff).then(|| now.as_millis());
        due_sql::due_count(
            &self.conn,
            &DUE,
            self.depth()?,
            self.state_u64("held")?,
            now,
        )
        .map_err(self.err("read"))
    }

    /// The first pending item of ordering group `group` (see
    /// [`crate::Queue::group_head`]).
    pub fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        self.first(
            "SELECT id FROM pending INDEXED BY pending_group \
                 WHERE group_name = ?1 ORDER BY id LIMIT 1",
            [group],
            |r| r.get::<_, i64>(0),
        )
        .map(|id| id.map(u))
    }

    /// The earliest retry time after `now` of a pending item that is not
    /// held (see [`crate::Queue::next_retry_after`]).
    pub fn next_retry_after(&self, now: Timestamp) -> Result<Option<Timestamp>> {
        self.row(
            "SELECT min(next_retry_at) FROM pending WHERE next_retry_at > ?1 AND NOT held",
            [now.as_millis()],
            |r| r.get::<_, Option<i64>>(0),
        )
        .map(|t| t.map(Timestamp::from_millis))
    }

    /// Counts for `stats`; the bound is the caller's.
    pub fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        let mut s = QueueStats {
            depth: self.depth()?,
            held: self.state_u64("held")?,
            dead_letters: self.dead_count()?,
            high_water: self.high_water()?,
            evicted_total: self.evicted_total()?,
            delivered_retained: self.delivered_count()?,
            ..QueueStats::default()
        };
        s.waiting = self
            .row(DUE.waiting, [now.as_millis()], |r| r.get::<_, i64>(0))
            .map(u)?;
        let oldest: Option<(i64, Option<i64>)> = self.first(
            "SELECT id, enqueued_at FROM pending ORDER BY id LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if let Some((id, at)) = oldest {
            s.oldest_id = Some(u(id));
            s.oldest_enqueued_at = at.map(Timestamp::from_secs);
        }
        let hist: Vec<(i64, i64)> = self.rows(
            "SELECT attempts, n FROM attempts WHERE n > 0 ORDER BY attempts",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        for (a, n) in hist {
            s.attempts_histogram
                .insert(u32::try_from(a).unwrap_or(u32::MAX), u(n));
        }
        Ok(s)
    }

    /// A client's `last_seq`.
    pub fn client_last_seq(&self, client: &str) -> Result<u64> {
        ledger_sql::last_seq(&self.conn, &LEDGER, client).map_err(self.err("read"))
    }

    pub(super) fn client_entry(
        &self,
        client: &str,
        seq: u64,
    ) -> Result<Option<(i64, Option<String>)>> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        self.first(
            "SELECT kind, digest FROM client_entries WHERE client = ?1 AND seq = ?2",
            params![client, seq],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// The digest recorded for a client's number.
    pub fn client_digest(&self, client: &str, seq: u64) -> Result<Option<String>> {
        Ok(self.client_entry(client, seq)?.and_then(|(_, d)| d))
    }

    /// Whether a client's number is recorded.
    pub fn client_recorded(&self, client: &str, seq: u64) -> Result<bool> {
        Ok(self.client_entry(client, seq)?.is_some())
    }

    /// A client's unacknowledged rejects above `after`.
    pub fn client_rejects(&self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        ledger_sql::rejects(&self.conn, &LEDGER, client, after).map_err(self.err("read"))
    }

    /// How many clients are known, from one count.
    pub fn client_count(&self) -> Result<u64> {
        ledger_sql::count(&self.conn, &LEDGER).map_err(self.err("read"))
    }

    /// Every client, as `spool clients` shows it.
    pub fn client_summaries(&self) -> Result<Vec<ClientSummary>> {
        ledger_sql::summaries(&self.conn, &LEDGER).map_err(self.err("read"))
    }

    /// Every pending id, ascending (for `verify`).
    pub fn pending_ids(&self, f: &mut dyn FnMut(ItemId)) -> Result<()> {
        let mut s = self
            .conn
            .prepare("SELECT id FROM pending ORDER BY id")
            .map_err(self.err("read"))?;
        let mut rows = s.query([]).map_err(self.err("read"))?;
        while let Some(r) = rows.next().map_err(self.err("read"))? {
            f(u(r.get(0).map_err(self.err("read"))?));
        }
        Ok(())
    }

    /// Whether the index was last written in this boot.
    pub fn written_this_boot(&self) -> Result<bool> {
        let boot: Option<String> = self.first("SELECT boot FROM state", [], |r| r.get(0))?;
        Ok(boot.as_deref() == Some(boot_id()))
    }

    /// `PRAGMA quick_check`: `None` when the database is sound.
    pub fn quick_check(&self) -> Result<Option<String>> {
        let r: String = self
            .conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(self.err("check"))?;
        Ok((r != "ok").then_some(r))
    }
}

/// A row's `id, off, len`, as a [`Loc`].
fn loc_of(r: &Row<'_>) -> rusqlite::Result<Loc> {
    Ok(Loc {
        id: u(r.get(0)?),
        off: u(r.get(1)?),
        len: u(r.get(2)?) as usize,
    })
}

/// A row's `id, off, len, done_off, done_len`, as a [`DeliveredLoc`].
fn delivered_loc_of(r: &Row<'_>) -> rusqlite::Result<DeliveredLoc> {
    let done: Option<(i64, i64)> = match r.get::<_, Option<i64>>(3)? {
        Some(off) => Some((off, r.get(4)?)),
        None => None,
    };
    Ok(DeliveredLoc {
        loc: loc_of(r)?,
        done: done.map(|(off, len)| (u(off), u(len) as usize)),
    })
}
