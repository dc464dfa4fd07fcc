//! The spool's row in `spools`: locked first by every transaction that
//! changes a count, the kept counts and the high-water mark it holds, and
//! the notification of a commit that enqueues.

use super::conn::Tx;
use super::rows::{id_param, u64_of};
use super::{channel, PostgresQueue};
use crate::error::{Error, Result};
use crate::item::OnFull;

/// The spool row, locked for this transaction.
pub(super) struct SpoolRow {
    pub high_water: u64,
    pub depth: u64,
    pub max_depth: Option<u64>,
    pub on_full: OnFull,
    /// The retention window in milliseconds (`None`: off).
    pub retain_ms: Option<i64>,
    /// Delivered rows kept (expired ones not yet pruned included).
    pub retained: u64,
}

impl PostgresQueue {
    pub(super) fn lock_spool(&self, tx: &mut Tx<'_>) -> Result<SpoolRow> {
        let row = tx.query_opt(
            "SELECT high_water, depth, max_depth, on_full, retain_ms, retained \
             FROM {s}.spools WHERE name = $1 FOR UPDATE",
            &[self.spool()],
        )?;
        let row = row.ok_or_else(|| Error::NotFound {
            path: self.display.clone().into(),
        })?;
        Ok(SpoolRow {
            high_water: u64_of(row.get(0)),
            depth: u64_of(row.get(1)),
            max_depth: row.get::<_, Option<i64>>(2).map(u64_of),
            on_full: self.policy_of(row.get(3))?,
            retain_ms: row.get(4),
            retained: u64_of(row.get(5)),
        })
    }

    /// The overflow policy a `spools.on_full` value names.
    pub(super) fn policy_of(&self, v: &str) -> Result<OnFull> {
        OnFull::parse(v).ok_or_else(|| {
            Error::Internal(format!(
                "{}: spools.on_full is not an overflow policy: {v:?}",
                self.display
            ))
        })
    }

    /// Add to the kept counts and move the high-water mark up.
    pub(super) fn adjust(
        &self,
        tx: &mut Tx<'_>,
        high_water: u64,
        depth: i64,
        dead: i64,
    ) -> Result<()> {
        tx.execute(
            "UPDATE {s}.spools SET high_water = greatest(high_water, $2), \
             depth = depth + $3, dead = dead + $4 WHERE name = $1",
            &[self.spool(), &id_param(high_water), &depth, &dead],
        )?;
        Ok(())
    }

    /// [`PostgresQueue::adjust`] and [`PostgresQueue::notify`] in one
    /// statement (one round trip), for commits that enqueue.
    pub(super) fn adjust_and_notify(
        &self,
        tx: &mut Tx<'_>,
        high_water: u64,
        depth: i64,
        dead: i64,
    ) -> Result<()> {
        let ch = channel(&self.target.schema);
        tx.query(
            "WITH u AS (UPDATE {s}.spools SET high_water = greatest(high_water, $2), \
             depth = depth + $3, dead = dead + $4 WHERE name = $1 RETURNING 1) \
             SELECT pg_notify($5, $1) FROM u",
            &[self.spool(), &id_param(high_water), &depth, &dead, &ch],
        )?;
        Ok(())
    }

    pub(super) fn notify(&self, tx: &mut Tx<'_>) -> Result<()> {
        let ch = channel(&self.target.schema);
        tx.execute("SELECT pg_notify($1, $2)", &[&ch, self.spool()])?;
        Ok(())
    }
}
