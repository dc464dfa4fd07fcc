//! The sending side of push in a PostgreSQL spool: push numbers on
//! pending rows, the counters in the spool row, and the skipped numbers in
//! `push_skips`.

use super::conn::Tx;
use super::rows::{id_param, u64_of};
use super::PostgresQueue;
use crate::error::{Error, Result};
use crate::item::{Evidence, ItemId, PushAck, PushState};

impl PostgresQueue {
    pub(super) fn push_state_in(&self, tx: &mut Tx<'_>) -> Result<PushState> {
        let row = tx.query_one(
            "SELECT push_last_assigned, push_acked FROM {s}.spools WHERE name = $1",
            &[self.spool()],
        )?;
        let skips = tx.query(
            "SELECT seq FROM {s}.push_skips WHERE spool = $1 ORDER BY seq",
            &[self.spool()],
        )?;
        Ok(PushState {
            last_assigned: u64_of(row.get(0)),
            acked: u64_of(row.get(1)),
            skips: skips.iter().map(|r| u64_of(r.get(0))).collect(),
        })
    }

    pub(super) fn set_push_counters(
        &self,
        tx: &mut Tx<'_>,
        last_assigned: u64,
        acked: u64,
    ) -> Result<()> {
        tx.execute(
            "UPDATE {s}.spools SET push_last_assigned = $2, push_acked = $3 WHERE name = $1",
            &[self.spool(), &id_param(last_assigned), &id_param(acked)],
        )?;
        Ok(())
    }

    pub(super) fn in_flight_ids(
        &self,
        tx: &mut Tx<'_>,
        after: u64,
        upto: u64,
    ) -> Result<Vec<(ItemId, u64)>> {
        let rows = tx.query(
            "SELECT id, push_seq FROM {s}.items WHERE spool = $1 AND push_seq > $2 AND push_seq <= $3 \
             ORDER BY push_seq",
            &[self.spool(), &id_param(after), &id_param(upto)],
        )?;
        Ok(rows
            .iter()
            .map(|r| (u64_of(r.get(0)), u64_of(r.get(1))))
            .collect())
    }

    pub(super) fn drop_skips_through(&self, tx: &mut Tx<'_>, seq: u64) -> Result<()> {
        tx.execute(
            "DELETE FROM {s}.push_skips WHERE spool = $1 AND seq <= $2",
            &[self.spool(), &id_param(seq)],
        )?;
        Ok(())
    }

    pub(super) fn push_seq_of(&self, tx: &mut Tx<'_>, id: ItemId) -> Result<Option<u64>> {
        let row = tx.query_opt(
            "SELECT push_seq FROM {s}.items WHERE spool = $1 AND id = $2",
            &[self.spool(), &id_param(id)],
        )?;
        Ok(row.and_then(|r| r.get::<_, Option<i64>>(0)).map(u64_of))
    }

    /// Number pending items `ids` for push inside `tx` (see
    /// [`crate::Queue::push_assign`]).
    pub(super) fn push_assign_in(
        &self,
        tx: &mut Tx<'_>,
        ids: &[ItemId],
    ) -> Result<Vec<(ItemId, u64)>> {
        self.lock_spool(tx)?;
        let mut push = self.push_state_in(tx)?;
        let mut out = Vec::new();
        for &id in ids {
            let next = push
                .last_assigned
                .checked_add(1)
                .ok_or_else(|| Error::Internal("push sequence numbers exhausted".into()))?;
            let n = tx.execute(
                "UPDATE {s}.items SET push_seq = $3 WHERE spool = $1 AND id = $2 \
                 AND NOT held AND push_seq IS NULL",
                &[self.spool(), &id_param(id), &id_param(next)],
            )?;
            if n > 0 {
                push.last_assigned = next;
                out.push((id, next));
            }
        }
        if !out.is_empty() {
            self.set_push_counters(tx, push.last_assigned, push.acked)?;
        }
        Ok(out)
    }

    /// Record the receiver's acknowledgement of every number up to
    /// `last_seq` inside `tx` (see [`crate::Queue::push_ack`]).
    pub(super) fn push_ack_in(
        &self,
        tx: &mut Tx<'_>,
        last_seq: u64,
        rejected: &[(u64, String)],
    ) -> Result<PushAck> {
        let spool = self.lock_spool(tx)?;
        let push = self.push_state_in(tx)?;
        let last = last_seq.min(push.last_assigned);
        let mut ack = PushAck {
            acked: push.acked.max(last),
            ..PushAck::default()
        };
        if last <= push.acked {
            return Ok(ack);
        }
        let mut delivered = Vec::new();
        for (id, seq) in self.in_flight_ids(tx, push.acked, last)? {
            match rejected.iter().find(|(s, _)| *s == seq) {
                Some((_, reason)) => {
                    self.kill(tx, id, reason, false, None, false)?;
                    ack.rejected.push(id);
                }
                None => {
                    delivered.push(id_param(id));
                    ack.delivered.push(id);
                }
            }
        }
        // Retained with the receiver's new watermark as evidence.
        let evidence = vec![Evidence::Push(last).encode(); delivered.len()];
        self.deliver_in(tx, &spool, &delivered, &evidence, None, false)?;
        self.drop_skips_through(tx, last)?;
        self.set_push_counters(tx, push.last_assigned, last)?;
        Ok(ack)
    }

    /// Give the spool a new uuid inside `tx` and number its in-flight
    /// items again from 1 (see [`crate::Queue::regenerate_uuid`]).
    pub(super) fn regenerate_uuid_in(&self, tx: &mut Tx<'_>) -> Result<String> {
        self.lock_spool(tx)?;
        let uuid = uuid::Uuid::new_v4().to_string();
        tx.execute(
            "UPDATE {s}.spools SET uuid = $2 WHERE name = $1",
            &[self.spool(), &uuid],
        )?;
        let in_flight = self.in_flight_ids(tx, 0, u64::MAX >> 1)?;
        for (n, (id, _)) in in_flight.iter().enumerate() {
            tx.execute(
                "UPDATE {s}.items SET push_seq = $3 WHERE spool = $1 AND id = $2",
                &[self.spool(), &id_param(*id), &(n as i64 + 1)],
            )?;
        }
        self.drop_skips_through(tx, u64::MAX >> 1)?;
        self.set_push_counters(tx, in_flight.len() as u64, 0)?;
        Ok(uuid)
    }
}
