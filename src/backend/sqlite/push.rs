//! The sending side of push in a SQLite spool: push numbers on pending
//! rows, the counters in `spool_meta`, and the skipped numbers in
//! `spool_push_skips`.

use super::db::{sql_id, Db};
use super::rows::{item_from_row, read_id, read_seq, ITEM_COLUMNS};
use super::schema;
use crate::backend::sql::SqlStore;
use crate::error::{Error, Result};
use crate::item::{Evidence, Item, ItemId, PushAck, PushState, PRUNE_BATCH};
use crate::time::Timestamp;

/// Acknowledged ranges at least this long are deleted without triggers
/// (see `Db::remove_numbered`).
const BULK_ROWS: u64 = 64;

impl Db<'_> {
    /// The push number of pending item `id`, if it is in flight.
    pub fn push_seq_of(&self, id: ItemId) -> Result<Option<u64>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        if !self.layout.has_push() {
            return Ok(None);
        }
        let seq: Option<Option<i64>> = self.first(
            "SELECT push_seq FROM morph_offline_queue WHERE id = ?1",
            [id],
            |r| r.get(0),
        )?;
        Ok(seq.flatten().and_then(|v| u64::try_from(v).ok()))
    }

    /// Record `seq` as abandoned (sent as a `skip` entry until acked).
    pub fn add_skip(&self, seq: i64) -> Result<()> {
        self.run(
            "INSERT OR IGNORE INTO spool_push_skips (seq) VALUES (?1)",
            [seq],
        )?;
        Ok(())
    }

    /// A counter of the push state in `spool_meta` (0 when unset).
    pub(super) fn push_counter(&self, key: &str) -> Result<u64> {
        Ok(self.meta_number(key)?.unwrap_or(0))
    }

    /// The spool's push state.
    pub fn push_state(&self) -> Result<PushState> {
        if !self.layout.has_push() {
            return Ok(PushState::default());
        }
        let skips = self.rows("SELECT seq FROM spool_push_skips ORDER BY seq", [], |r| {
            r.get::<_, i64>(0)
        })?;
        Ok(PushState {
            last_assigned: self.push_counter("push_last_assigned")?,
            acked: self.push_counter("push_acked")?,
            skips: skips
                .into_iter()
                .filter_map(|s| u64::try_from(s).ok())
                .collect(),
        })
    }

    /// Store the push counters (the skips are rows of their own).
    pub fn set_push_counters(&self, last_assigned: u64, acked: u64) -> Result<()> {
        schema::set_meta(self.conn, "push_last_assigned", &last_assigned.to_string())
            .and_then(|()| schema::set_meta(self.conn, "push_acked", &acked.to_string()))
            .map_err(|e| self.err(e))
    }

    /// Forget the skips at or below `seq` (all of them for `u64::MAX`).
    pub fn drop_skips_through(&self, seq: u64) -> Result<()> {
        let seq = i64::try_from(seq).unwrap_or(i64::MAX);
        self.run("DELETE FROM spool_push_skips WHERE seq <= ?1", [seq])?;
        Ok(())
    }

    /// Up to `limit` in-flight items with a number above `after`, in
    /// number order.
    pub fn in_flight_page(&self, after: u64, limit: usize) -> Result<Vec<Item>> {
        if !self.layout.has_push() || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {ITEM_COLUMNS} FROM morph_offline_queue \
             WHERE push_seq > ?1 ORDER BY push_seq LIMIT ?2"
        );
        self.page_of(&sql, after, limit, item_from_row)
    }

    /// `(id, push_seq)` of the in-flight items numbered in `(after, upto]`,
    /// in number order.
    pub fn in_flight_ids(&self, after: u64, upto: u64) -> Result<Vec<(ItemId, u64)>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let upto = i64::try_from(upto).unwrap_or(i64::MAX);
        self.rows(
            "SELECT id, push_seq FROM morph_offline_queue \
                 WHERE push_seq > ?1 AND push_seq <= ?2 ORDER BY push_seq",
            [after, upto],
            |r| Ok((read_id(r, 0)?, read_seq(r, 1)?.unwrap_or_default())),
        )
    }

    /// Give pending item `id` push number `seq` when it is not held and
    /// not in flight; whether it was given.
    pub fn assign_seq(&self, id: ItemId, seq: u64) -> Result<bool> {
        let (Some(id), Ok(seq)) = (sql_id(id), i64::try_from(seq)) else {
            return Ok(false);
        };
        let n = self.run(
            "UPDATE morph_offline_queue SET push_seq = ?2 \
                 WHERE id = ?1 AND held = 0 AND push_seq IS NULL",
            [id, seq],
        )?;
        Ok(n > 0)
    }

    /// Change the push number of pending item `id`.
    pub fn renumber(&self, id: ItemId, seq: u64) -> Result<()> {
        let (Some(id), Ok(seq)) = (sql_id(id), i64::try_from(seq)) else {
            return Ok(());
        };
        self.run(
            "UPDATE morph_offline_queue SET push_seq = ?2 WHERE id = ?1",
            [id, seq],
        )?;
        Ok(())
    }

    /// Take the push number of pending item `id` away: it is sent again
    /// as a new entry.
    pub fn unnumber(&self, id: ItemId) -> Result<()> {
        let Some(id) = sql_id(id) else {
            return Ok(());
        };
        self.run(
            "UPDATE morph_offline_queue SET push_seq = NULL WHERE id = ?1",
            [id],
        )?;
        Ok(())
    }

    /// Whether a pending item carries push number `seq`.
    pub fn seq_in_use(&self, seq: u64) -> Result<bool> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(false);
        };
        self.conn
            .prepare_cached("SELECT 1 FROM morph_offline_queue WHERE push_seq = ?1")
            .and_then(|mut s| s.exists([seq]))
            .map_err(|e| self.err(e))
    }

    /// Number pending items `ids` for push (see
    /// [`crate::Queue::push_assign`]). Consecutive ids, the common case,
    /// are numbered a run at a time, in one statement.
    pub fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>> {
        let mut push = self.push_state()?;
        let mut out = Vec::with_capacity(ids.len());
        let mut rest = ids;
        while !rest.is_empty() {
            let len = 1 + rest
                .windows(2)
                .take_while(|w| w[0].checked_add(1) == Some(w[1]))
                .count();
            let (run, tail) = rest.split_at(len);
            rest = tail;
            let exhausted = || Error::Internal("push sequence numbers exhausted".into());
            let first = push.last_assigned.checked_add(1).ok_or_else(exhausted)?;
            if len > 1 && self.assign_run(run[0], run[len - 1], first)? {
                for (k, &id) in run.iter().enumerate() {
                    out.push((id, first + k as u64));
                }
                push.last_assigned = first + (len as u64 - 1);
                continue;
            }
            for &id in run {
                let next = push.last_assigned.checked_add(1).ok_or_else(exhausted)?;
                if self.assign_seq(id, next)? {
                    push.last_assigned = next;
                    out.push((id, next));
                }
            }
        }
        if !out.is_empty() {
            self.set_push_counters(push.last_assigned, push.acked)?;
        }
        Ok(out)
    }

    /// Give pending items `lo..=hi` push numbers from `first` on, in id
    /// order, when every one of them is there, not held and not in
    /// flight; whether they were given (nothing changes otherwise).
    fn assign_run(&self, lo: ItemId, hi: ItemId, first: u64) -> Result<bool> {
        let (Some(lo), Some(hi), Ok(first)) = (sql_id(lo), sql_id(hi), i64::try_from(first)) else {
            return Ok(false);
        };
        let (Some(len), Some(shift)) = (hi.checked_sub(lo), first.checked_sub(lo)) else {
            return Ok(false);
        };
        if first.checked_add(len).is_none() {
            return Ok(false);
        }
        let ready: i64 = self.row(
            "SELECT count(*) FROM morph_offline_queue \
                 WHERE id BETWEEN ?1 AND ?2 AND held = 0 AND push_seq IS NULL",
            [lo, hi],
            |r| r.get(0),
        )?;
        if ready != len + 1 {
            return Ok(false);
        }
        self.run(
            "UPDATE morph_offline_queue SET push_seq = id + ?3 WHERE id BETWEEN ?1 AND ?2",
            [lo, hi, shift],
        )?;
        Ok(true)
    }

    /// Record the receiver's acknowledgement of every number up to
    /// `last_seq`, `rejected` ones dead at `now` (see
    /// [`crate::Queue::push_ack`]).
    pub fn push_ack(
        &self,
        last_seq: u64,
        rejected: &[(u64, String)],
        now: Timestamp,
    ) -> Result<PushAck> {
        let push = self.push_state()?;
        let last = last_seq.min(push.last_assigned);
        let mut ack = PushAck {
            acked: push.acked.max(last),
            ..PushAck::default()
        };
        if last <= push.acked {
            return Ok(ack);
        }
        let retain = self.retain()?;
        let refused_here = rejected
            .iter()
            .any(|(s, _)| (push.acked + 1..=last).contains(s));
        if retain.is_none() && !refused_here {
            // Nothing to keep or kill: the whole range goes in one
            // statement instead of one per item.
            ack.delivered = self.remove_numbered(push.acked, last)?;
        } else {
            for (id, seq) in self.in_flight_ids(push.acked, last)? {
                match rejected.iter().find(|(s, _)| *s == seq) {
                    Some((_, reason)) => {
                        self.kill(id, reason, now)?;
                        ack.rejected.push(id);
                    }
                    None => {
                        if retain.is_some() {
                            self.retain_delivered(id, Evidence::Push(last), now)?;
                        }
                        // An acknowledged push: no skip.
                        if let Some(id) = sql_id(id) {
                            self.delete_pending(id)?;
                        }
                        ack.delivered.push(id);
                    }
                }
            }
        }
        self.prune_delivered(now, retain, PRUNE_BATCH)?;
        self.drop_skips_through(last)?;
        self.set_push_counters(push.last_assigned, last)?;
        Ok(ack)
    }

    /// Remove the in-flight items numbered in `(after, upto]`, one
    /// statement for all of them; their ids in number order.
    ///
    /// A range of [`BULK_ROWS`] or more is deleted with this connection's
    /// triggers off and counted here, once for the range, instead of by
    /// `tr_queue_delete` once per row (the counts are the same; the
    /// trigger is 40% of such a delete). Turning triggers off and on
    /// makes SQLite prepare this connection's statements again, which a
    /// short range would not pay back.
    fn remove_numbered(&self, after: u64, upto: u64) -> Result<Vec<ItemId>> {
        let bulk = upto.saturating_sub(after) >= BULK_ROWS;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let upto = i64::try_from(upto).unwrap_or(i64::MAX);
        if bulk {
            self.set_triggers(false)?;
        }
        let removed = self.rows(
            "DELETE FROM morph_offline_queue WHERE push_seq > ?1 AND push_seq <= ?2 \
                 RETURNING id, push_seq, attempts",
            [after, upto],
            |r| {
                Ok((
                    read_id(r, 0)?,
                    read_seq(r, 1)?.unwrap_or_default(),
                    r.get::<_, i64>(2)?,
                ))
            },
        );
        if bulk {
            // Back on before anything else runs, whatever the delete did.
            self.set_triggers(true)?;
        }
        let mut removed = removed?;
        if bulk {
            self.count_deleted(removed.iter().map(|&(_, _, attempts)| attempts))?;
        }
        removed.sort_unstable_by_key(|&(_, seq, _)| seq);
        Ok(removed.into_iter().map(|(id, _, _)| id).collect())
    }

    /// Give the spool a new uuid and number its in-flight items again
    /// from 1 (see [`crate::Queue::regenerate_uuid`]).
    pub fn regenerate_uuid(&self) -> Result<String> {
        let uuid = uuid::Uuid::new_v4().to_string();
        schema::set_meta(self.conn, "uuid", &uuid).map_err(|e| self.err(e))?;
        // In number order, each new number is at most its old one and
        // below every number still to be changed: the unique index
        // never sees two items with one number.
        let in_flight = self.in_flight_ids(0, u64::MAX)?;
        for (n, (id, _)) in in_flight.iter().enumerate() {
            self.renumber(*id, n as u64 + 1)?;
        }
        self.drop_skips_through(u64::MAX)?;
        self.set_push_counters(in_flight.len() as u64, 0)?;
        Ok(uuid)
    }
}
