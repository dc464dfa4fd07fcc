//! Dead letters in a SQLite spool: the `spool_dead_letters` table, moving
//! an item there and back, and the checks of a requeue.

use super::db::{sql_id, Db};
use super::rows::{dead_from_row, payload_value, read_text, UNKNOWN_ENQUEUED_AT};
use crate::backend::sql::SqlStore;
use crate::backend::state;
use crate::error::Result;
use crate::item::{DeadLetter, ItemId};
use crate::time::Timestamp;
use rusqlite::params;

/// Walks `ix_dead_dead_at`, not the payloads.
pub(super) const COUNT_DEAD: &str = "SELECT count(*) FROM spool_dead_letters";

impl Db<'_> {
    /// The lowest id up to `upto` of a dead letter that carries the
    /// non-empty key `key` (an import's dedup of dead records, see
    /// `policy::import_lookup`): one seek in `ix_dead_key`.
    pub fn dead_owner(&self, key: &str, upto: ItemId) -> Result<Option<ItemId>> {
        if key.is_empty() || !self.layout.is_spool() {
            return Ok(None);
        }
        self.owner_upto(
            "SELECT id FROM spool_dead_letters INDEXED BY ix_dead_key \
             WHERE idempotency_key = ?1 AND idempotency_key <> '' AND id <= ?2 \
             ORDER BY id LIMIT 1",
            key,
            upto,
        )
    }

    /// Store a dead letter under its own id.
    pub fn insert_dead(&self, dl: &DeadLetter) -> Result<()> {
        let id = self.insert_id(dl.item.id)?;
        let item = &dl.item;
        self.run("INSERT INTO spool_dead_letters \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  group_name, coalesce_key, dead_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)", params![
                    id,
                    payload_value(&item.payload),
                    item.key,
                    item.attempts,
                    item.enqueued_at.map(|t| t.as_secs()),
                    item.next_retry_at.map(|t| t.as_millis()),
                    item.last_error,
                    item.held,
                    item.push_seq.and_then(|s| i64::try_from(s).ok()),
                    item.group,
                    item.coalesce_key,
                    dl.dead_at.as_millis(),
                ])?;
        Ok(())
    }

    /// Up to `limit` dead letters after `after`, in id order.
    pub fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        if !self.layout.is_spool() || limit == 0 {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {} FROM spool_dead_letters WHERE id > ?1 ORDER BY id LIMIT ?2",
            self.dead_columns()
        );
        self.page_of(&sql, after, limit, dead_from_row)
    }

    /// One dead letter.
    pub fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        if !self.layout.is_spool() {
            return Ok(None);
        }
        let sql = format!(
            "SELECT {} FROM spool_dead_letters WHERE id = ?1",
            self.dead_columns()
        );
        self.first(&sql, [id], dead_from_row)
    }

    /// Number of dead letters.
    pub fn dead_count(&self) -> Result<u64> {
        if !self.layout.is_spool() {
            return Ok(0);
        }
        if self.layout.has_push() {
            let n: Option<i64> =
                self.first("SELECT n FROM spool_counts WHERE name = 'dead'", [], |r| {
                    r.get(0)
                })?;
            if let Some(n) = n {
                return Ok(n.max(0) as u64);
            }
        }
        let n: i64 = self.row(COUNT_DEAD, [], |r| r.get(0))?;
        Ok(n.max(0) as u64)
    }

    /// Move pending item `id` to the dead-letter set with `last_error`,
    /// dead at `now`. Returns whether it was pending.
    pub fn kill(&self, id: ItemId, last_error: &str, now: Timestamp) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let moved = self.run("INSERT INTO spool_dead_letters \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  group_name, coalesce_key, dead_at) \
                 SELECT id, payload, idempotency_key, attempts, NULLIF(enqueued_at, ?2), next_retry_at, ?3, 0, push_seq, \
                  group_name, coalesce_key, ?4 \
                 FROM morph_offline_queue WHERE id = ?1", params![id, UNKNOWN_ENQUEUED_AT, last_error, now.as_millis()])?;
        if moved == 0 {
            return Ok(false);
        }
        self.delete_pending(id)?;
        Ok(true)
    }

    /// Move dead letter `id` back to pending under its id: attempts 0, no
    /// next retry, not held; key, enqueue time and last error kept.
    /// Returns whether it was a dead letter.
    pub fn revive(&self, id: ItemId) -> Result<bool> {
        let Some(id) = sql_id(id) else {
            return Ok(false);
        };
        let moved = self.run("INSERT INTO morph_offline_queue \
                 (id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, last_error, held, \
                  group_name, coalesce_key) \
                 SELECT id, payload, idempotency_key, 0, COALESCE(enqueued_at, ?2), NULL, last_error, 0, \
                  group_name, coalesce_key \
                 FROM spool_dead_letters WHERE id = ?1", params![id, UNKNOWN_ENQUEUED_AT])?;
        if moved == 0 {
            return Ok(false);
        }
        self.count_inserted(1)?;
        self.delete_dead(id)?;
        Ok(true)
    }

    /// The key of dead letter `id`, if it is one.
    pub fn dead_key(&self, id: ItemId) -> Result<Option<String>> {
        let Some(id) = sql_id(id) else {
            return Ok(None);
        };
        self.first(
            "SELECT idempotency_key FROM spool_dead_letters WHERE id = ?1",
            [id],
            |r| Ok(read_text(r, 0)?.unwrap_or_default()),
        )
    }

    fn delete_dead(&self, id: i64) -> Result<bool> {
        let n = self.run("DELETE FROM spool_dead_letters WHERE id = ?1", [id])?;
        Ok(n > 0)
    }

    /// Remove dead letter `id`; whether it was one.
    pub fn remove_dead(&self, id: ItemId) -> Result<bool> {
        match sql_id(id) {
            Some(id) => self.delete_dead(id),
            None => Ok(false),
        }
    }

    /// Requeue dead letters `ids` (see [`crate::Queue::requeue`]): every
    /// check passes before anything moves.
    pub fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        state::check_requeue_with(
            &mut (),
            ids,
            |_, id| self.dead_key(id),
            |_, key| self.key_owner(key),
            |_| match self.max_depth()? {
                Some(bound) => Ok(Some((bound, self.pending_count()?))),
                None => Ok(None),
            },
        )?;
        ids.iter().map(|&id| self.revive(id)).collect()
    }
}
