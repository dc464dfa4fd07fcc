//! Import into a SQLite spool, with and without an export's spool header
//! (see [`crate::backend::identity`]): the records, and the push identity,
//! in the import's one write transaction.

use super::db::Db;
use super::schema;
use crate::backend::identity::{IdentityOutcome, Merge, SpoolHeader, Target};
use crate::backend::policy::{self, ImportStore};
use crate::error::{Error, Result};
use crate::item::{DeadLetter, DeliveredItem, Imported, ItemId, Record, RecordState};

/// Store `records` in the open transaction through
/// [`policy::import_records`] (the transaction makes it all-or-nothing).
/// With `merge`, pending records may keep their push numbers (see
/// [`crate::backend::identity`]).
pub(super) fn import_records(
    db: &Db<'_>,
    records: &mut dyn Iterator<Item = Result<Record>>,
    each: &mut dyn FnMut(&Record, Imported),
    merge: Option<&mut Merge>,
) -> Result<()> {
    let high_water = db.high_water()?;
    let mut s = Importing {
        db,
        stored_dead: false,
    };
    let hw = policy::import_records(&mut s, high_water, records, each, merge)?;
    if s.stored_dead {
        db.raise_sequence(hw)?;
    }
    Ok(())
}

/// The SQLite spool, inside an import's transaction, as the storage of
/// [`policy::import_records`].
struct Importing<'a, 'c> {
    db: &'a Db<'c>,
    /// A dead or delivered record was stored: the id sequence must cover
    /// it.
    stored_dead: bool,
}

impl ImportStore for Importing<'_, '_> {
    fn dead_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.db.dead_owner(key, upto)
    }

    fn delivered_owner(&mut self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        self.db.delivered_owner_upto(key, upto)
    }

    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        // Keys stored earlier in this import are in the table already.
        self.db.key_owner(key)
    }

    fn seq_in_use(&mut self, seq: u64) -> Result<bool> {
        self.db.seq_in_use(seq)
    }

    fn store(&mut self, rec: Record) -> Result<()> {
        match rec.state {
            RecordState::Pending | RecordState::Held => self.db.insert_pending(&rec.item),
            RecordState::Dead => {
                self.stored_dead = true;
                let dead_at = rec.dead_at.unwrap_or_default();
                self.db.insert_dead(&DeadLetter {
                    item: rec.item,
                    dead_at,
                })
            }
            RecordState::Delivered => {
                self.stored_dead = true;
                let delivery = rec.delivery.ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "delivered record {} has no delivered_at",
                        rec.item.id
                    ))
                })?;
                self.db.insert_delivered(&DeliveredItem {
                    item: rec.item,
                    delivery,
                })
            }
        }
    }
}

/// Import `records` under an export's spool `header` in the open write
/// transaction (see [`crate::Queue::import_with_identity`]).
pub(super) fn import_with_identity(
    db: &Db<'_>,
    header: &SpoolHeader,
    adopt: bool,
    records: &mut dyn Iterator<Item = Result<Record>>,
    each: &mut dyn FnMut(&Record, Imported),
) -> Result<IdentityOutcome> {
    let mut merge = Merge::begin(
        Target {
            uuid: schema::get_meta(db.conn, "uuid")
                .map_err(|e| db.err(e))?
                .unwrap_or_default(),
            push: db.push_state()?,
            pending: db.pending_count()?,
            dead: db.dead_count()?,
        },
        header,
        adopt,
    )?;
    if merge.keeps_numbers() {
        for (id, _) in db.in_flight_ids(merge.old_acked, merge.push.acked)? {
            db.unnumber(id)?;
        }
    }
    import_records(db, records, each, Some(&mut merge))?;
    if merge.keeps_numbers() {
        db.drop_skips_through(u64::MAX)?;
        for &seq in &merge.push.skips {
            db.add_skip(i64::try_from(seq).unwrap_or(i64::MAX))?;
        }
        db.set_push_counters(merge.push.last_assigned, merge.push.acked)?;
    }
    if let Some(uuid) = &merge.new_uuid {
        schema::set_meta(db.conn, "uuid", uuid).map_err(|e| db.err(e))?;
    }
    Ok(merge.outcome)
}
