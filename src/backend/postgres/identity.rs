//! Import on PostgreSQL, with and without an export's spool header (see
//! [`crate::backend::identity`]): the records and the push identity in
//! the import's one transaction, the spool row locked.

use super::conn::Tx;
use super::rows::{id_param, u64_of};
use super::PostgresQueue;
use crate::backend::identity::{Merge, SpoolHeader, Target};
use crate::backend::policy::{self, ImportStore};
use crate::error::{Error, Result};
use crate::item::{DeliveredItem, Imported, ItemId, Record, RecordState};

impl PostgresQueue {
    /// Store `records` in the open transaction (the spool row locked,
    /// its high-water mark `high_water`). With `merge`, pending records
    /// may keep their push numbers (see [`crate::backend::identity`]).
    /// Delivered records go to `delivered` with their time and evidence
    /// (whether or not the spool has a window: without one they are
    /// pruned as expired by the next mutation). A dead or delivered
    /// record whose key a dead letter or retained record the spool held
    /// already carries is a dedup hit (`policy::import_lookup`).
    pub(super) fn import_records(
        &self,
        tx: &mut Tx<'_>,
        high_water: u64,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
        merge: Option<&mut Merge>,
    ) -> Result<()> {
        let mut s = Importing {
            q: self,
            tx,
            pending: 0,
            dead: 0,
            delivered: 0,
        };
        let hw = policy::import_records(&mut s, high_water, records, each, merge)?;
        let Importing {
            tx,
            pending,
            dead,
            delivered,
            ..
        } = s;
        self.adjust(tx, hw, pending, dead)?;
        if delivered > 0 {
            tx.execute(
                "UPDATE {s}.spools SET retained = retained + $2 WHERE name = $1",
                &[self.spool(), &delivered],
            )?;
        }
        if pending > 0 {
            self.notify(tx)?;
        }
        Ok(())
    }

    /// The lowest id up to `upto` of a dead letter that carries `key`:
    /// one seek in `dead_letters_key`.
    fn dead_owner(&self, tx: &mut Tx<'_>, key: &str, upto: u64) -> Result<Option<ItemId>> {
        let row = tx.query_opt(
            "SELECT id FROM {s}.dead_letters WHERE spool = $1 AND key = $2 \
             AND key <> '\\x'::bytea AND id <= $3 ORDER BY id LIMIT 1",
            &[self.spool(), &key.as_bytes(), &id_param(upto)],
        )?;
        Ok(row.map(|r| u64_of(r.get(0))))
    }

    /// The lowest id up to `upto` of a retained delivered record that
    /// carries `key`: one range of `delivered_key`.
    fn delivered_owner_upto(
        &self,
        tx: &mut Tx<'_>,
        key: &str,
        upto: u64,
    ) -> Result<Option<ItemId>> {
        let row = tx.query_one(
            "SELECT min(id) FROM {s}.delivered WHERE spool = $1 AND key = $2 \
             AND key <> '\\x'::bytea AND id <= $3",
            &[self.spool(), &key.as_bytes(), &id_param(upto)],
        )?;
        Ok(row.get::<_, Option<i64>>(0).map(u64_of))
    }

    fn seq_in_use(&self, tx: &mut Tx<'_>, seq: u64) -> Result<bool> {
        let row = tx.query_opt(
            "SELECT 1 FROM {s}.items WHERE spool = $1 AND push_seq = $2",
            &[self.spool(), &id_param(seq)],
        )?;
        Ok(row.is_some())
    }

    /// The identity part of an import: decide (refusing an adoption by a
    /// spool that is not fresh), and take the numbers of the spool's
    /// in-flight items that the merged watermark covers.
    pub(super) fn begin_identity(
        &self,
        tx: &mut Tx<'_>,
        header: &SpoolHeader,
        adopt: bool,
    ) -> Result<Merge> {
        let row = tx.query_one(
            "SELECT uuid, depth, dead FROM {s}.spools WHERE name = $1",
            &[self.spool()],
        )?;
        let merge = Merge::begin(
            Target {
                uuid: row.get(0),
                pending: u64_of(row.get(1)),
                dead: u64_of(row.get(2)),
                push: self.push_state_in(tx)?,
            },
            header,
            adopt,
        )?;
        if merge.keeps_numbers() && merge.push.acked > merge.old_acked {
            tx.execute(
                "UPDATE {s}.items SET push_seq = NULL WHERE spool = $1 AND push_seq > $2 AND push_seq <= $3",
                &[self.spool(), &id_param(merge.old_acked), &id_param(merge.push.acked)],
            )?;
        }
        Ok(merge)
    }

    /// Store the push state (and uuid) an identity import ends with.
    pub(super) fn finish_identity(&self, tx: &mut Tx<'_>, merge: &Merge) -> Result<()> {
        if !merge.keeps_numbers() {
            return Ok(());
        }
        self.drop_skips_through(tx, u64::MAX >> 1)?;
        let skips: Vec<i64> = merge.push.skips.iter().map(|s| id_param(*s)).collect();
        tx.execute(
            "INSERT INTO {s}.push_skips (spool, seq) SELECT $1, unnest($2::int8[]) ON CONFLICT DO NOTHING",
            &[self.spool(), &skips],
        )?;
        self.set_push_counters(tx, merge.push.last_assigned, merge.push.acked)?;
        if let Some(uuid) = &merge.new_uuid {
            tx.execute(
                "UPDATE {s}.spools SET uuid = $2 WHERE name = $1",
                &[self.spool(), uuid],
            )?;
        }
        Ok(())
    }
}

/// The spool, inside an import's transaction (its row locked), as the
/// storage of [`policy::import_records`], counting what it stores.
struct Importing<'a, 't> {
    q: &'a PostgresQueue,
    tx: &'a mut Tx<'t>,
    pending: i64,
    dead: i64,
    delivered: i64,
}

impl ImportStore for Importing<'_, '_> {
    fn dead_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.q.dead_owner(self.tx, key, upto)
    }

    fn delivered_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.q.delivered_owner_upto(self.tx, key, upto)
    }

    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        self.q.key_owner(self.tx, key)
    }

    fn seq_in_use(&mut self, seq: u64) -> Result<bool> {
        self.q.seq_in_use(self.tx, seq)
    }

    fn store(&mut self, rec: Record) -> Result<()> {
        match rec.state {
            RecordState::Pending | RecordState::Held => {
                self.pending += 1;
                self.q.insert_item(self.tx, &rec.item, None)
            }
            RecordState::Dead => {
                self.dead += 1;
                let dead_at = rec.dead_at.unwrap_or_default();
                self.q.insert_item(self.tx, &rec.item, Some(dead_at))
            }
            RecordState::Delivered => {
                self.delivered += 1;
                let delivery = rec.delivery.ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "delivered record {} has no delivered_at",
                        rec.item.id
                    ))
                })?;
                self.q.insert_delivered(
                    self.tx,
                    &DeliveredItem {
                        item: rec.item,
                        delivery,
                    },
                )
            }
        }
    }

    fn max_id(&self) -> ItemId {
        i64::MAX as ItemId
    }
}
