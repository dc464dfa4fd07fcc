//! [`Applier`]: the one path from "a line at this offset of a spool
//! file" to index rows, with the kept counts, the high-water mark and the
//! push state written once at the end.

use super::*;
use crate::backend::retain_sql::{Order, RecordsSql};
use crate::backend::sql::Cached;
use rusqlite::Statement;

/// Fresh `put` rows per multi-row `INSERT`: one statement opens the
/// table's cursor once for all of them, and binds them in one go (256
/// took 5% less CPU time than 64 for a batch of 100,000 lines).
const FRESH_ROWS: usize = 256;

/// The columns a fresh row binds: every column of `pending`, or (a
/// "plain" row: not held, no retry time, push number, group, coalesce
/// key or last error — what a batch enqueue stores) the first six.
const FULL_COLUMNS: usize = 12;
const PLAIN_COLUMNS: usize = 6;

/// The `INSERT` of `rows` fresh rows of `cols` columns each.
fn fresh_insert_sql(rows: usize, cols: usize) -> String {
    let mut sql = String::from(if cols == PLAIN_COLUMNS {
        "INSERT INTO pending (id, off, len, key, attempts, enqueued_at, held) VALUES "
    } else {
        "INSERT INTO pending (id, off, len, key, attempts, enqueued_at, next_retry_at, held, push_seq, \
         group_name, coalesce_key, last_error) VALUES "
    });
    for r in 0..rows {
        if r > 0 {
            sql.push(',');
        }
        sql.push_str(if cols == PLAIN_COLUMNS {
            "(?,?,?,?,?,?,0)"
        } else {
            "(?,?,?,?,?,?,?,?,?,?,?,?)"
        });
    }
    sql
}

/// A fresh `put` row waiting for its multi-row `INSERT`.
struct Fresh {
    id: i64,
    off: i64,
    len: i64,
    seq: Option<i64>,
    row: Row,
}

impl Fresh {
    fn plain(&self) -> bool {
        !self.row.held
            && self.row.next_retry_at.is_none()
            && self.seq.is_none()
            && self.row.group.is_none()
            && self.row.coalesce_key.is_none()
            && self.row.last_error.is_none()
    }
}

impl Index {
    /// Start applying lines.
    pub fn applier(&self) -> Result<Applier<'_>> {
        self.will_write();
        Ok(Applier {
            hw: self.high_water()?,
            ix: self,
            raised: false,
            push: None,
            evicted: None,
            err: None,
            depth: 0,
            held: 0,
            dead: 0,
            delivered: 0,
            attempts: std::collections::BTreeMap::new(),
            fresh: Vec::new(),
            insert_plain: None,
            insert_full: None,
            order: None,
        })
    }

    /// Where the records in id order end, for [`Applier`]'s `late`.
    fn delivered_order(&self) -> Result<Order> {
        Order::read(&self.conn, &RECORDS).map_err(self.err("update"))
    }
}

/// What a deleted delivered row was.
struct Gone {
    /// The main file holds a live `put` line of the item too.
    in_main: bool,
    late: bool,
    /// The record was the main file's (see [`Applier::retain_in_main`]).
    main_record: bool,
}

/// The statements of the retention rules ([`crate::backend::retain_sql`])
/// over the index's `delivered` table, with the prune cursor in `state`.
pub(super) const RECORDS: RecordsSql = RecordsSql {
    cursor: "SELECT prune_after FROM state",
    top: "SELECT id, delivered_at, late FROM delivered ORDER BY id DESC LIMIT ?1",
    late_expired: "SELECT id, in_main FROM delivered WHERE late AND delivered_at <= ?1 \
                   ORDER BY delivered_at, id LIMIT ?2",
    walk: "SELECT id, delivered_at, late, in_main FROM delivered \
           WHERE id > (SELECT prune_after FROM state) ORDER BY id",
};

/// Applies lines to the index: the one path from "line at offset" to
/// index rows. The high-water mark and the push state are written once,
/// by [`Applier::finish`].
pub(crate) struct Applier<'a> {
    ix: &'a Index,
    hw: ItemId,
    raised: bool,
    push: Option<PushLine>,
    /// The last eviction count line's count.
    evicted: Option<u64>,
    err: Option<Error>,
    /// Changes to the kept counts, written by `finish`.
    depth: i64,
    held: i64,
    dead: i64,
    delivered: i64,
    attempts: std::collections::BTreeMap<u32, i64>,
    /// Fresh `put` rows not inserted yet: every other change to the
    /// tables inserts them first ([`Applier::flush`]), so that the rows
    /// are the ones applying each line in turn would give.
    fresh: Vec<Fresh>,
    /// The [`FRESH_ROWS`]-row `INSERT`s, prepared at their first use and
    /// held for the applier's life.
    insert_plain: Option<Statement<'a>>,
    insert_full: Option<Statement<'a>>,
    /// Where the records in id order end, read at the first record
    /// applied and kept up to date by the applier's own records (records
    /// it deletes are not taken out: what it keeps can only be higher
    /// than the truth, which makes more records late, never fewer).
    order: Option<Order>,
}

impl<'a> Applier<'a> {
    /// Insert the fresh rows waiting: before reading the tables the
    /// applier writes.
    pub fn flush(&mut self) -> Result<()> {
        if self.fresh.is_empty() {
            return Ok(());
        }
        let ix = self.ix;
        let cols = if self.fresh.iter().all(Fresh::plain) {
            PLAIN_COLUMNS
        } else {
            FULL_COLUMNS
        };
        let rows = std::mem::take(&mut self.fresh);
        let r = if rows.len() == FRESH_ROWS {
            let slot = if cols == PLAIN_COLUMNS {
                &mut self.insert_plain
            } else {
                &mut self.insert_full
            };
            if slot.is_none() {
                *slot = Some(
                    ix.conn
                        .prepare(&fresh_insert_sql(FRESH_ROWS, cols))
                        .map_err(ix.err("update"))?,
                );
            }
            match slot {
                Some(stmt) => insert_fresh(stmt, &rows, cols),
                None => unreachable!("prepared above"),
            }
        } else {
            // Fewer (the end of a run): one row per statement, so that
            // the statement cache holds one shape, not one per count.
            ix.conn
                .prepare_cached(&fresh_insert_sql(1, cols))
                .and_then(|mut stmt| {
                    rows.chunks(1)
                        .try_for_each(|row| insert_fresh(&mut stmt, row, cols))
                })
        };
        r.map_err(ix.err("update"))?;
        // Keep the buffer's allocation.
        self.fresh = rows;
        self.fresh.clear();
        Ok(())
    }

    fn raise(&mut self, id: ItemId) {
        if id > self.hw {
            self.hw = id;
            self.raised = true;
        }
    }

    /// A pending row went away (`held`, `attempts` were its values).
    fn gone(&mut self, held: bool, attempts: u32) {
        self.depth -= 1;
        self.held -= i64::from(held);
        *self.attempts.entry(attempts).or_default() -= 1;
    }

    /// A pending row came.
    fn came(&mut self, held: bool, attempts: u32) {
        self.depth += 1;
        self.held += i64::from(held);
        *self.attempts.entry(attempts).or_default() += 1;
    }

    /// Delete pending row `id`, counting it; whether there was one.
    fn delete_pending(&mut self, id: i64) -> Result<bool> {
        self.delete_pending_at(id, false).map(|at| at.is_some())
    }

    /// Delete pending row `id`, counting it; where its line was and (with
    /// `key`: only a retained delivery needs it) its key, when there was
    /// one.
    fn delete_pending_at(&mut self, id: i64, key: bool) -> Result<Option<(i64, i64, String)>> {
        let ix = self.ix;
        let old: Option<(bool, u32, i64, i64, String)> = ix
            .conn
            .first(
                "DELETE FROM pending WHERE id = ?1 RETURNING held, attempts, off, len, key",
                [id],
                |r| {
                    let k = if key { r.get(4)? } else { String::new() };
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, k))
                },
            )
            .map_err(ix.err("update"))?;
        Ok(old.map(|(held, attempts, off, len, key)| {
            self.gone(held, attempts);
            (off, len, key)
        }))
    }

    /// Delete delivered row `id`, counting it; what it was, when there
    /// was one.
    fn delete_delivered(&mut self, id: i64) -> Result<Option<Gone>> {
        let ix = self.ix;
        let old: Option<Gone> = ix
            .conn
            .first(
                "DELETE FROM delivered WHERE id = ?1 RETURNING in_main, late, done_off IS NOT NULL",
                [id],
                |r| {
                    Ok(Gone {
                        in_main: r.get(0)?,
                        late: r.get(1)?,
                        main_record: r.get(2)?,
                    })
                },
            )
            .map_err(ix.err("update"))?;
        if old.is_some() {
            self.delivered -= 1;
        }
        Ok(old)
    }

    /// Delete dead row `id`, counting it.
    fn delete_dead(&mut self, id: i64) -> Result<()> {
        let ix = self.ix;
        let n = ix.run("DELETE FROM dead WHERE id = ?1", [id])?;
        self.dead -= n as i64;
        Ok(())
    }

    fn keep<T>(&mut self, r: Result<T>) {
        if let (Err(e), None) = (r, &self.err) {
            self.err = Some(e);
        }
    }

    /// Apply a line of `which` at `off` (`len` bytes without its line
    /// ending). The first error stops the applier (see
    /// [`Applier::finish`]).
    pub fn apply(&mut self, which: Which, e: Entry, off: u64, len: usize) {
        if self.err.is_some() {
            return;
        }
        let r = match which {
            Which::Main => self.main(e, off, len),
            Which::Dead => self.dead(e, off, len),
            Which::Delivered => self.delivered(e, off, len),
        };
        self.keep(r);
    }

    /// A line of the main file.
    fn main(&mut self, e: Entry, off: u64, len: usize) -> Result<()> {
        let ix = self.ix;
        match e {
            Entry::Put(row) => {
                // An id above every id seen so far is in neither table:
                // the common case (new items) needs no lookup.
                let fresh = row.id > self.hw;
                self.raise(row.id);
                let id = to_i64(row.id, "item id")?;
                let seq = row.push_seq.map(|s| to_i64(s, "push number")).transpose()?;
                if fresh {
                    self.came(row.held, row.attempts);
                    self.fresh.push(Fresh {
                        id,
                        off: off as i64,
                        len: len as i64,
                        seq,
                        row,
                    });
                    if self.fresh.len() == FRESH_ROWS {
                        self.flush()?;
                    }
                    return Ok(());
                }
                self.flush()?;
                let values = params![
                    id,
                    off as i64,
                    len as i64,
                    row.key,
                    row.attempts,
                    row.enqueued_at,
                    row.next_retry_at,
                    row.held,
                    seq,
                    row.group,
                    row.coalesce_key,
                    row.last_error
                ];
                // Is it a dead letter or a delivered item, and what was it
                // before?
                let (dead, delivered, old): (bool, bool, Option<(bool, u32)>) = ix
                    .conn
                    .row(
                        "SELECT EXISTS (SELECT 1 FROM dead WHERE id = ?1), \
                         EXISTS (SELECT 1 FROM delivered WHERE id = ?1), p.held, p.attempts \
                         FROM (SELECT 1) LEFT JOIN pending p ON p.id = ?1",
                        [id],
                        |r| {
                            let held: Option<bool> = r.get(2)?;
                            let attempts: Option<u32> = r.get(3)?;
                            Ok((r.get(0)?, r.get(1)?, held.zip(attempts)))
                        },
                    )
                    .map_err(ix.err("update"))?;
                if dead {
                    // The dead-letter file wins (see the module docs of
                    // the backend): only the mark moves.
                    return Ok(());
                }
                if delivered {
                    // So does the delivered file: the item was delivered.
                    // The main file holds it until its `done` line.
                    return self.set_in_main(id, true);
                }
                if let Some((held, attempts)) = old {
                    self.gone(held, attempts);
                }
                self.came(row.held, row.attempts);
                let sql = if old.is_some() {
                    "UPDATE pending SET off = ?2, len = ?3, key = ?4, attempts = ?5, enqueued_at = ?6, \
                     next_retry_at = ?7, held = ?8, push_seq = ?9, group_name = ?10, coalesce_key = ?11, \
                     last_error = ?12 WHERE id = ?1"
                } else {
                    "INSERT INTO pending (id, off, len, key, attempts, enqueued_at, next_retry_at, held, push_seq, \
                     group_name, coalesce_key, last_error) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
                };
                ix.run(sql, values)?;
            }
            Entry::Done(id, delivery) => {
                self.flush()?;
                self.raise(id);
                if let Ok(iid) = i64::try_from(id) {
                    match (self.delete_pending_at(iid, delivery.is_some())?, delivery) {
                        // The `done` line that completes a move to the
                        // delivered file.
                        (None, _) => self.set_in_main(iid, false)?,
                        // A retained delivery: its record is this line
                        // and the item's last `put` line, until
                        // compaction moves it to the delivered file.
                        (Some((put_off, put_len, key)), Some(d)) => {
                            self.retain_in_main(iid, (put_off, put_len), key, &d, (off, len))?
                        }
                        (Some(_), None) => {}
                    }
                }
            }
            Entry::Push(p) => self.push = Some(p),
            Entry::Client(c) => {
                self.flush()?;
                self.client(c)?
            }
            // The eviction count lives in the dead-letter file only.
            Entry::Evicted(_) => {}
        }
        Ok(())
    }

    /// A line of the dead-letter file.
    fn dead(&mut self, e: Entry, off: u64, len: usize) -> Result<()> {
        self.flush()?;
        let ix = self.ix;
        match e {
            Entry::Put(row) => {
                self.raise(row.id);
                let id = to_i64(row.id, "item id")?;
                self.delete_pending(id)?;
                self.delete_dead(id)?;
                ix.run(
                    "INSERT INTO dead (id, off, len, key) VALUES (?1, ?2, ?3, ?4)",
                    params![id, off as i64, len as i64, row.key],
                )?;
                self.dead += 1;
            }
            Entry::Done(id, _) => {
                self.raise(id);
                if let Ok(id) = i64::try_from(id) {
                    self.delete_dead(id)?;
                }
            }
            // Push state lives in the main file only.
            Entry::Push(_) | Entry::Client(_) => {}
            Entry::Evicted(n) => self.evicted = Some(n),
        }
        Ok(())
    }

    /// A line of the delivered file: a `put` line is a retained
    /// delivered item (it leaves the pending set: the delivered file wins
    /// over the main file), a `done` line prunes one.
    fn delivered(&mut self, e: Entry, off: u64, len: usize) -> Result<()> {
        self.flush()?;
        let ix = self.ix;
        match e {
            Entry::Put(row) => {
                self.raise(row.id);
                let id = to_i64(row.id, "item id")?;
                // Still pending: its `done` line in the main file is to
                // come (or a crash kept it from coming).
                let was_pending = self.delete_pending(id)?;
                // A pending item has no delivered row (applying a record
                // deletes the pending row, and a later `put` line of a
                // delivered item only marks it `in_main`): only a record
                // of an item no longer pending may replace one.
                let old = self.delete_delivered(id)?;
                let in_main = was_pending || old.as_ref().is_some_and(|g| g.in_main);
                let at = row.delivered_at.unwrap_or(0);
                // A record the main file held, now in the delivered file
                // (moved by compaction), keeps its place in the order.
                let late = match old {
                    Some(g) if g.main_record => g.late,
                    _ => self.late(id, at)?,
                };
                ix.run(
                    "INSERT INTO delivered (id, off, len, key, delivered_at, in_main, late) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![id, off as i64, len as i64, row.key, at, in_main, late],
                )?;
                self.delivered += 1;
            }
            Entry::Done(id, _) => {
                self.raise(id);
                if let Ok(id) = i64::try_from(id) {
                    self.delete_delivered(id)?;
                    // The main file may hold the delivery's `done` line
                    // still, applied later (a rebuild reads the delivered
                    // file first), also when this file held the record
                    // (moved by a compaction that a crash cut short): the
                    // record stays pruned when it comes.
                    ix.run("INSERT OR IGNORE INTO pruned (id) VALUES (?1)", [id])?;
                }
            }
            // State lines live in the other files.
            Entry::Push(_) | Entry::Client(_) | Entry::Evicted(_) => {}
        }
        Ok(())
    }

    /// Whether a record of `id` delivered at `at` (Unix ms), applied
    /// next, is late (the rule is [`crate::backend::retain_sql`]'s).
    fn late(&mut self, id: i64, at: i64) -> Result<bool> {
        let mut order = match self.order {
            Some(o) => o,
            None => self.ix.delivered_order()?,
        };
        let late = order.late(id, at);
        self.order = Some(order);
        Ok(late)
    }

    /// The record of a retained delivery that the main file holds: the
    /// item's last `put` line at `put`, the delivery (`d`) in the `done`
    /// line at `done` — unless the delivered file pruned it already
    /// (a rebuild reads that file first) or holds its record.
    fn retain_in_main(
        &mut self,
        id: i64,
        put: (i64, i64),
        key: String,
        d: &crate::item::Delivery,
        done: (u64, usize),
    ) -> Result<()> {
        let ix = self.ix;
        let pruned = ix.run("DELETE FROM pruned WHERE id = ?1", [id])?;
        if pruned > 0 {
            return Ok(());
        }
        let at = d.at.as_millis();
        let late = self.late(id, at)?;
        let n = ix.run(
            "INSERT OR IGNORE INTO delivered (id, off, len, key, delivered_at, in_main, late, \
                 done_off, done_len) VALUES (?1, ?2, ?3, ?4, ?5, 0, ?6, ?7, ?8)",
            params![
                id,
                put.0,
                put.1,
                key,
                at,
                late,
                done.0 as i64,
                done.1 as i64
            ],
        )?;
        self.delivered += n as i64;
        Ok(())
    }

    /// Note whether the main file still holds a live `put` line for the
    /// delivered item `id` (nothing when `id` is not one).
    fn set_in_main(&mut self, id: i64, on: bool) -> Result<()> {
        let ix = self.ix;
        ix.run(
            "UPDATE delivered SET in_main = ?2 WHERE id = ?1 AND in_main <> ?2",
            params![id, on],
        )
        .map(drop)
    }

    /// What a receiver's client line adds (the rules of
    /// `State::apply_client_delta`): numbers not recorded yet, a
    /// `last_seq` that only grows, the acknowledged-reject watermark, the
    /// time of the push.
    fn client(&mut self, c: ClientLine) -> Result<()> {
        let ix = self.ix;
        let known = !c.applied.is_empty()
            || !c.rejected.is_empty()
            || !c.skipped.is_empty()
            || c.last.is_some();
        ix.run(
            "INSERT INTO clients (id, known, last_seq, acked, at) VALUES (?1, ?2, 0, 0, NULL) \
                 ON CONFLICT (id) DO UPDATE SET known = known OR excluded.known",
            params![c.id, known],
        )?;
        let add = |seq: u64, kind: i64, digest: Option<&str>, reason: Option<&str>| {
            let seq = to_i64(seq, "push number")?;
            ix.run("INSERT OR IGNORE INTO client_entries (client, seq, kind, digest, reason) VALUES (?1, ?2, ?3, ?4, ?5)", params![c.id, seq, kind, digest, reason])
                .map(drop)
        };
        for (seq, digest) in &c.applied {
            add(*seq, 0, Some(digest), None)?;
        }
        for (seq, digest, reason) in &c.rejected {
            add(*seq, 1, digest.as_deref(), Some(reason))?;
        }
        // Skipped numbers (in lines of older versions) need no entry:
        // `last_seq` covers them.
        if let Some(last) = c.last {
            let last = to_i64(last, "push number")?;
            ix.run(
                "UPDATE clients SET last_seq = max(last_seq, ?2) WHERE id = ?1",
                params![c.id, last],
            )?;
        }
        if c.acked > 0 {
            let acked = to_i64(c.acked, "push number")?;
            ix.run(
                "UPDATE clients SET acked = max(acked, ?2) WHERE id = ?1",
                params![c.id, acked],
            )?;
        }
        if let Some(at) = c.at {
            ix.run(
                "UPDATE clients SET at = ?2 WHERE id = ?1",
                params![c.id, at],
            )?;
        }
        Ok(())
    }

    /// The line of `which` at `off` that a row of `id` was taken in from
    /// is `len` bytes long after all (a batch's last line, which goes
    /// without the frame its row was taken in with).
    pub fn set_len(&mut self, which: Which, id: ItemId, off: u64, len: usize) -> Result<()> {
        self.flush()?;
        let sql = match which {
            Which::Main => "UPDATE pending SET len = ?3 WHERE id = ?1 AND off = ?2",
            Which::Dead => "UPDATE dead SET len = ?3 WHERE id = ?1 AND off = ?2",
            Which::Delivered => "UPDATE delivered SET len = ?3 WHERE id = ?1 AND off = ?2",
        };
        let ix = self.ix;
        ix.run(
            sql,
            params![
                to_i64(id, "item id").unwrap_or(i64::MAX),
                off as i64,
                len as i64
            ],
        )
        .map(drop)
    }

    /// Write what was accumulated; the first error met, if any.
    pub fn finish(mut self) -> Result<()> {
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        self.flush()?;
        let ix = self.ix;
        if self.depth != 0 || self.held != 0 || self.dead != 0 || self.delivered != 0 {
            ix.run(
                "UPDATE state SET depth = depth + ?1, held = held + ?2, dead = dead + ?3, \
                     delivered = delivered + ?4",
                params![self.depth, self.held, self.dead, self.delivered],
            )?;
        }
        for (attempts, n) in &self.attempts {
            if *n == 0 {
                continue;
            }
            ix.run(
                "INSERT INTO attempts (attempts, n) VALUES (?1, ?2) \
                     ON CONFLICT (attempts) DO UPDATE SET n = n + excluded.n",
                params![attempts, n],
            )?;
        }
        if self.raised {
            let hw = to_i64(self.hw, "item id")?;
            ix.run("UPDATE state SET high_water = max(high_water, ?1)", [hw])?;
        }
        if let Some(n) = self.evicted {
            let n = to_i64(n, "eviction count")?;
            ix.run("UPDATE state SET evicted_total = ?1", [n])?;
        }
        if let Some(p) = self.push {
            let skips = serde_json::to_string(&p.skips)
                .map_err(|e| Error::Internal(format!("cannot encode push skips: {e}")))?;
            let assigned = to_i64(p.assigned, "push number")?;
            let acked = to_i64(p.acked, "push number")?;
            ix.run("UPDATE state SET push_assigned = ?1, push_acked = ?2, push_skips = ?3, uuid = coalesce(?4, uuid)", params![assigned, acked, skips, p.uuid])?;
        }
        Ok(())
    }
}

/// Bind `rows` (of `cols` columns each) to a [`fresh_insert_sql`]
/// statement and run it.
fn insert_fresh(stmt: &mut Statement<'_>, rows: &[Fresh], cols: usize) -> rusqlite::Result<()> {
    for (i, f) in rows.iter().enumerate() {
        let at = i * cols;
        let r = &f.row;
        stmt.raw_bind_parameter(at + 1, f.id)?;
        stmt.raw_bind_parameter(at + 2, f.off)?;
        stmt.raw_bind_parameter(at + 3, f.len)?;
        stmt.raw_bind_parameter(at + 4, r.key.as_str())?;
        stmt.raw_bind_parameter(at + 5, r.attempts)?;
        stmt.raw_bind_parameter(at + 6, r.enqueued_at)?;
        if cols == FULL_COLUMNS {
            stmt.raw_bind_parameter(at + 7, r.next_retry_at)?;
            stmt.raw_bind_parameter(at + 8, r.held)?;
            stmt.raw_bind_parameter(at + 9, f.seq)?;
            stmt.raw_bind_parameter(at + 10, r.group.as_deref())?;
            stmt.raw_bind_parameter(at + 11, r.coalesce_key.as_deref())?;
            stmt.raw_bind_parameter(at + 12, r.last_error.as_deref())?;
        }
    }
    stmt.raw_execute().map(drop)
}
