//! The PostgreSQL backend: one spool shared by many machines.
//!
//! Why it exists: when producers and replayers run on several hosts, a
//! spool on one machine's disk no longer fits. A spool in PostgreSQL is
//! the same [`Queue`] contract, and replay is not exclusive any more: any
//! number of replayers share the spool through leases ([`Leasing`]).
//!
//! What it guarantees:
//!
//! - **Addressing.** `postgres://user@host:port/db?spool=NAME&schema=S`
//!   (see [`url`]); many spools share one set of tables in schema `S`,
//!   every row keyed by the spool's name. The password never appears in a
//!   message: errors name [`PgTarget::display`].
//! - **Schema** (see `migrations/` and `docs/formats.md`): versioned
//!   migrations, each one transaction under an advisory lock ([`schema`]).
//!   Read-only opens create nothing: a missing spool is
//!   [`Error::NotFound`], an older schema is read as it is.
//! - **Exactness under concurrency.** Each spool has one row in `spools`
//!   with its settings, the id high-water mark and the kept counts (depth,
//!   dead letters). Every transaction that changes a count locks that row
//!   first (`FOR UPDATE`), so ids are allocated without gaps or reuse, the
//!   depth bound is exact however many producers race, and all writers
//!   take their locks in one order (no deadlocks). Dedup is a unique index
//!   on `(spool, key)` over pending items, checked after the lock, so two
//!   producers of one key store it once.
//! - **Durability.** Every mutation is one committed transaction when it
//!   returns `Ok` (PostgreSQL's `synchronous_commit` decides the fsync;
//!   the default flushes the WAL at commit).
//! - **Time.** Enqueue times, deaths, retry times and leases use the
//!   server's clock (`statement_timestamp()`), so that hosts with skewed
//!   clocks agree — unless the spool is opened with a clock other than
//!   the system clock (tests), which is then used for every time written.
//! - **Leased replay.** See [`Leasing`] and the claim statement below:
//!   `FOR UPDATE SKIP LOCKED` in a CTE, the attempt counted at the claim,
//!   a fencing token per claim that every outcome must present; only the
//!   head of an ordering group is claimable (SPEC §9), so replayers never
//!   deliver two items of one group at once.
//! - **Ledger policies** (SPEC §9): coalescing and `drop-oldest` run in
//!   the enqueue's transaction after the spool row lock, so concurrent
//!   producers take turns; neither touches an item under a running lease
//!   (see `PostgresQueue::enqueue_one`).
//! - **Retention of delivered items** (SPEC §9, see `retain.rs`): with a
//!   window set, a delivery moves its rows to `delivered` in one
//!   statement with the evidence; enqueues dedup against them after the
//!   spool row lock; expired rows are pruned in bounded batches.
//! - **Notifications.** Every commit that enqueues sends one `NOTIFY` on
//!   the schema's channel with the spool's name as payload (PostgreSQL
//!   folds repeats within a transaction): [`Leasing::wait_for_enqueue`]
//!   listens for it.

mod conn;
mod dead;
mod enqueue;
mod identity;
mod items;
mod lease;
mod maint;
mod push;
mod receive;
mod retain;
mod rows;
pub mod schema;
mod shape;
mod spool;
mod stats;
pub mod url;

use self::conn::{connect, is_retryable, pg_error, Conn, Tx};
use self::rows::{by_version, id_param, item_from_row, text, u64_of};
use self::schema::Found;
pub use self::url::{is_postgres_url, redact, PgTarget};
use crate::backend::identity::{IdentityOutcome, SpoolHeader};
use crate::backend::state;
use crate::backend::{OpenMode, OpenOptions};
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, BatchResults, ClientSummary, DeadLetter, DeliveredItem, EnqueueOptions,
    Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats,
    Record,
};
use crate::push::receiver::ReceiveTxn;
use crate::queue::{BackendKind, Leasing, Queue};
use crate::time::{SharedClock, Timestamp};
use postgres::types::{FromSqlOwned, ToSql};
use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Tries of a transaction that failed with a serialization failure or a
/// deadlock.
const RETRIES: u32 = 5;

/// A spool in a PostgreSQL database.
pub struct PostgresQueue {
    target: PgTarget,
    display: String,
    conn: Mutex<Option<Conn>>,
    /// `None`: the server's clock.
    clock: Option<SharedClock>,
    read_only: bool,
    /// The schema is at version 1 (opened read-only, so not migrated):
    /// statements read the columns of version 2 as their defaults.
    v1: bool,
    /// The schema has the tables of retention (version 3 or later; false
    /// only for an older schema opened read-only): without them retention
    /// reads as off, with nothing retained.
    retention: bool,
    /// `push_clients` has `served_by` (version 6 or later; false only for
    /// an older schema opened read-only).
    served_by: bool,
    /// `items` has the generated column `key_prefix` (version 8 or later;
    /// false only for an older schema opened read-only).
    key_prefix: bool,
    /// The channel enqueues notify (`LISTEN` once, on first wait).
    listening: Mutex<bool>,
}

impl std::fmt::Debug for PostgresQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresQueue")
            .field("target", &self.display)
            .finish()
    }
}

/// The name of the channel enqueues notify: one per schema, the spool's
/// name as payload.
pub fn channel(schema: &str) -> String {
    format!("spool_enqueue:{schema}")
}

impl PostgresQueue {
    /// Open the spool `url` names, as `opts.mode` says: create the tables
    /// and the spool when missing (`Create`, `CreateNew`), or require them
    /// (`ReadWrite`, `ReadOnly`; nothing is written by a read-only open).
    pub fn open(url: &str, opts: &OpenOptions) -> Result<PostgresQueue> {
        let target = PgTarget::parse(url)?;
        let display = target.display();
        let client = connect(&target, &display, "connect to")?;
        let mut conn = Conn::new(client, &target.schema);
        let err = |e| pg_error(&target, &display, "open", e);
        let (found, exists) =
            schema::inspect(&mut conn.client, &target.schema, &target.spool).map_err(err)?;
        schema::check(found, &display)?;
        let clock = if opts.clock.is_system() {
            None
        } else {
            Some(opts.clock.clone())
        };
        let q = PostgresQueue {
            target,
            display,
            conn: Mutex::new(None),
            clock,
            read_only: !opts.mode.writable(),
            v1: found == Found::Version(1) && !opts.mode.writable(),
            retention: opts.mode.writable() || matches!(found, Found::Version(v) if v >= 3),
            served_by: opts.mode.writable() || matches!(found, Found::Version(v) if v >= 6),
            key_prefix: opts.mode.writable() || matches!(found, Found::Version(v) if v >= 8),
            listening: Mutex::new(false),
        };
        match (exists, opts.mode) {
            (false, OpenMode::ReadOnly | OpenMode::ReadWrite) => {
                return Err(Error::NotFound {
                    path: q.display.clone().into(),
                })
            }
            (true, OpenMode::CreateNew) => return Err(q.name_taken()),
            (true, _) => {
                if found != Found::Version(schema::SCHEMA_VERSION) && opts.mode.writable() {
                    schema::migrate(&mut conn, &q.target, &q.display)?;
                }
            }
            (false, _) => {
                if found != Found::Version(schema::SCHEMA_VERSION) {
                    schema::migrate(&mut conn, &q.target, &q.display)?;
                }
                let uuid = uuid::Uuid::new_v4().to_string();
                let bound = opts.max_depth.map(id_param);
                let created = conn
                    .client
                    .query_opt(
                        &format!(
                            "INSERT INTO {}.spools (name, uuid, max_depth) VALUES ($1, $2, $3) \
                             ON CONFLICT (name) DO NOTHING RETURNING 1",
                            conn.schema_q()
                        ),
                        &[&q.target.spool, &uuid, &bound],
                    )
                    .map_err(|e| pg_error(&q.target, &q.display, "create", e))?;
                if created.is_none() && opts.mode == OpenMode::CreateNew {
                    return Err(q.name_taken());
                }
            }
        }
        *q.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(conn);
        Ok(q)
    }

    /// The refusal of a new spool whose name the database already has.
    fn name_taken(&self) -> Error {
        Error::SpoolNameTaken {
            name: self.target.spool.clone(),
            database: self.target.dbname.clone(),
        }
    }

    /// Another handle on the same spool with a connection of its own
    /// (opened on first use), read-only: follow mode listens for
    /// enqueues on it while this one replays.
    pub fn second_handle(&self) -> PostgresQueue {
        PostgresQueue {
            target: self.target.clone(),
            display: self.display.clone(),
            conn: Mutex::new(None),
            clock: self.clock.clone(),
            read_only: true,
            v1: self.v1,
            retention: self.retention,
            served_by: self.served_by,
            key_prefix: self.key_prefix,
            listening: Mutex::new(false),
        }
    }

    /// The spool's address without the password.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// What the URL says.
    pub fn target(&self) -> &PgTarget {
        &self.target
    }

    /// The connection, reconnecting when the last one was lost.
    fn lock(&self, action: &'static str) -> Result<MutexGuard<'_, Option<Conn>>> {
        let mut g = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let lost = g.as_ref().is_none_or(|c| c.client.is_closed());
        if lost {
            *g = None;
            let client = connect(&self.target, &self.display, action)?;
            *self.listening.lock().unwrap_or_else(|e| e.into_inner()) = false;
            *g = Some(Conn::new(client, &self.target.schema));
        }
        Ok(g)
    }

    /// The connection that a guard of [`Self::lock`] holds.
    fn conn_of<'g>(g: &'g mut MutexGuard<'_, Option<Conn>>) -> Result<&'g mut Conn> {
        g.as_mut()
            .ok_or_else(|| Error::Internal("no connection".into()))
    }

    /// The clock's time for statements (`None`: the server's).
    fn now_param(&self) -> Option<i64> {
        self.clock.as_ref().map(|c| c.now().as_millis())
    }

    /// Run `f` in one transaction; retried (from the start) after a
    /// serialization failure or deadlock, a bounded number of times.
    fn txn<T>(
        &self,
        action: &'static str,
        write: bool,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        if write && self.read_only {
            return Err(Error::Unsupported(format!(
                "cannot {action} {}: the spool was opened read-only",
                self.display
            )));
        }
        let mut tries = 0;
        loop {
            tries += 1;
            let mut g = self.lock(action)?;
            let conn = Self::conn_of(&mut g)?;
            let res = (|| {
                let mut tx = Tx::begin(conn, &self.target, &self.display, action, !write)?;
                let out = f(&mut tx)?;
                tx.commit()?;
                Ok(out)
            })();
            match res {
                Err(e) if is_retryable(&e) && tries < RETRIES => {
                    drop(g);
                    std::thread::sleep(Duration::from_millis(5 * u64::from(tries)));
                }
                other => return other,
            }
        }
    }

    /// Run `f` once in one transaction (for work that cannot be redone,
    /// such as a consumed input stream).
    fn txn_once<T>(
        &self,
        action: &'static str,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut f = Some(f);
        let mut ran = false;
        self.txn(action, true, |tx| {
            if ran {
                return Err(Error::Internal(
                    "a streamed transaction cannot be retried".into(),
                ));
            }
            ran = true;
            (f.take().expect("runs once"))(tx)
        })
    }

    /// The one value that `sql` (with the spool's name as `$1`) reads,
    /// in a transaction of its own.
    fn spool_value<T: FromSqlOwned>(&self, action: &'static str, sql: &'static str) -> Result<T> {
        self.txn(action, false, |tx| {
            Ok(tx.query_one(sql, &[self.spool()])?.get(0))
        })
    }

    /// Run the update `sql` of the spool (its name as `$1`) with `value`
    /// as `$2`, in a transaction of its own.
    fn set_spool_value(
        &self,
        action: &'static str,
        sql: &'static str,
        value: &(dyn ToSql + Sync),
    ) -> Result<()> {
        self.txn(action, true, |tx| {
            tx.execute(sql, &[self.spool(), value])?;
            Ok(())
        })
    }

    fn spool(&self) -> &String {
        &self.target.spool
    }

    /// The statement of `by_version!` for this spool's schema version.
    fn pick(&self, (v2, v1): (&'static str, &'static str)) -> &'static str {
        if self.v1 {
            v1
        } else {
            v2
        }
    }

    /// Up to `limit` items a query of the shape `spool = $1 AND … > $2 …
    /// LIMIT $3` (in both schema versions) returns after `after`.
    fn items_after(
        &self,
        action: &'static str,
        sql: (&'static str, &'static str),
        after: u64,
        limit: usize,
    ) -> Result<Vec<Item>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.txn(action, false, |tx| {
            let rows = tx.query(
                self.pick(sql),
                &[
                    self.spool(),
                    &id_param(after),
                    &(limit.min(i64::MAX as usize) as i64),
                ],
            )?;
            Ok(rows.iter().map(item_from_row).collect())
        })
    }
}

impl Queue for PostgresQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }

    fn enqueue_batch(&self, items: &[NewItem], opts: &EnqueueOptions) -> Result<Vec<Enqueued>> {
        self.txn("enqueue into", true, |tx| {
            let mut results = Vec::with_capacity(items.len());
            let mut input = items
                .iter()
                .map(|it| -> Result<Cow<'_, NewItem>> { Ok(Cow::Borrowed(it)) });
            self.enqueue_in(tx, &mut input, opts, &mut |e| results.push(e))?;
            Ok(results)
        })
    }

    fn enqueue_stream(
        &self,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        opts: &EnqueueOptions,
    ) -> Result<BatchResults> {
        self.txn_once("enqueue into", |tx| {
            let mut results = BatchResults::default();
            let mut input = items.map(|it| it.map(Cow::Owned));
            self.enqueue_in(tx, &mut input, opts, &mut |e| results.push(e))?;
            Ok(results)
        })
    }

    fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>> {
        self.items_after(
            "read",
            by_version!(
                "SELECT ",
                " FROM {s}.items WHERE spool = $1 AND id > $2 ORDER BY id LIMIT $3"
            ),
            after,
            limit,
        )
    }

    fn get(&self, id: ItemId) -> Result<Option<Item>> {
        self.txn("read", false, |tx| {
            let row = tx.query_opt(
                self.pick(by_version!(
                    "SELECT ",
                    " FROM {s}.items WHERE spool = $1 AND id = $2"
                )),
                &[self.spool(), &id_param(id)],
            )?;
            Ok(row.as_ref().map(item_from_row))
        })
    }

    fn deliver(&self, done: &[(ItemId, Evidence)]) -> Result<Vec<bool>> {
        // The first evidence given for an id counts.
        let mut seen = HashSet::new();
        let (ids, evidence): (Vec<i64>, Vec<String>) = done
            .iter()
            .filter(|(id, _)| seen.insert(*id))
            .map(|(id, ev)| (id_param(*id), ev.encode()))
            .unzip();
        self.txn("mark items done in", true, |tx| {
            let spool = self.lock_spool(tx)?;
            let removed = self.deliver_in(tx, &spool, &ids, &evidence, None, true)?;
            let mut seen = HashSet::new();
            Ok(done
                .iter()
                .map(|(id, _)| removed.contains(id) && seen.insert(*id))
                .collect())
        })
    }

    fn retain(&self) -> Result<Option<Duration>> {
        self.retain_window()
    }

    fn set_retain(&self, window: Option<Duration>) -> Result<()> {
        self.set_retain_window(window)
    }

    fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredItem>> {
        self.delivered_after(after, limit)
    }

    fn delivered_get(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        self.delivered_one(id)
    }

    fn prune_delivered(&self, limit: usize) -> Result<u64> {
        self.prune_expired(limit)
    }

    fn set_attempts(&self, id: ItemId, attempts: u32) -> Result<bool> {
        self.txn("set attempts in", true, |tx| {
            let n = tx.execute(
                "UPDATE {s}.items SET attempts = $3 WHERE spool = $1 AND id = $2",
                &[self.spool(), &id_param(id), &i64::from(attempts)],
            )?;
            Ok(n > 0)
        })
    }

    fn record_attempt(&self, id: ItemId, update: &AttemptUpdate) -> Result<bool> {
        self.txn("record an attempt in", true, |tx| {
            let n = tx.execute(
                "UPDATE {s}.items SET attempts = $3, next_retry_at = $4, last_error = $5, lease_until = NULL \
                 WHERE spool = $1 AND id = $2",
                &[
                    self.spool(),
                    &id_param(id),
                    &i64::from(update.attempts),
                    &update.next_retry_at.map(|t| t.as_millis()),
                    &update.last_error.as_deref().map(text),
                ],
            )?;
            Ok(n > 0)
        })
    }

    fn set_held(&self, ids: &[ItemId], held: bool) -> Result<Vec<bool>> {
        let action = if held {
            "hold items in"
        } else {
            "release items in"
        };
        self.txn(action, true, |tx| {
            if held {
                state::check_hold_with(ids, |id| self.push_seq_of(tx, id))?;
            }
            let mut out = Vec::with_capacity(ids.len());
            for &id in ids {
                let n = tx.execute(
                    "UPDATE {s}.items SET held = $3 WHERE spool = $1 AND id = $2",
                    &[self.spool(), &id_param(id), &held],
                )?;
                out.push(n > 0);
            }
            Ok(out)
        })
    }

    fn size(&self) -> Result<u64> {
        let sql = "SELECT depth FROM {s}.spools WHERE name = $1";
        self.spool_value("count items in", sql).map(u64_of)
    }

    fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        if self.v1 {
            return Ok(None);
        }
        self.txn("read", false, |tx| {
            let row = tx.query_opt(
                "SELECT id FROM {s}.items WHERE spool = $1 AND grp = $2 AND grp IS NOT NULL \
                 ORDER BY id LIMIT 1",
                &[self.spool(), &group],
            )?;
            Ok(row.map(|r| u64_of(r.get(0))))
        })
    }

    fn due_page(
        &self,
        now: Timestamp,
        ignore_backoff: bool,
        after: ItemId,
        limit: usize,
    ) -> Result<Vec<Item>> {
        self.due_items(now, ignore_backoff, after, limit)
    }

    fn due_count(&self, now: Timestamp, ignore_backoff: bool, at_most: Option<u64>) -> Result<u64> {
        let due = self.count_due(now, ignore_backoff)?;
        Ok(at_most.map_or(due, |m| due.min(m)))
    }

    fn next_retry_after(&self, now: Timestamp) -> Result<Option<Timestamp>> {
        // An item leased by another replayer becomes due when its lease
        // runs out.
        let now = self.clock.as_ref().map(|_| now.as_millis());
        self.txn("read the next retry time of", false, |tx| {
            let row = tx.query_one(
                "SELECT min(greatest(next_retry_at, lease_until)) FROM {s}.items \
                 WHERE spool = $1 AND NOT held \
                   AND greatest(next_retry_at, lease_until) > COALESCE($2::int8, {now})",
                &[self.spool(), &now],
            )?;
            Ok(row.get::<_, Option<i64>>(0).map(Timestamp::from_millis))
        })
    }

    fn on_full(&self) -> Result<OnFull> {
        if self.v1 {
            return Ok(OnFull::Reject);
        }
        let sql = "SELECT on_full FROM {s}.spools WHERE name = $1";
        let policy: String = self.spool_value("read the overflow policy of", sql)?;
        self.policy_of(&policy)
    }

    fn set_on_full(&self, policy: OnFull) -> Result<()> {
        self.set_spool_value(
            "set the overflow policy of",
            "UPDATE {s}.spools SET on_full = $2 WHERE name = $1",
            &policy.name(),
        )
    }

    fn max_depth(&self) -> Result<Option<u64>> {
        let sql = "SELECT max_depth FROM {s}.spools WHERE name = $1";
        let bound: Option<i64> = self.spool_value("read the depth bound of", sql)?;
        Ok(bound.map(u64_of))
    }

    fn set_max_depth(&self, bound: Option<u64>) -> Result<()> {
        self.set_spool_value(
            "set the depth bound of",
            "UPDATE {s}.spools SET max_depth = $2 WHERE name = $1",
            &bound.map(id_param),
        )
    }

    fn uuid(&self) -> Result<String> {
        let sql = "SELECT uuid FROM {s}.spools WHERE name = $1";
        self.spool_value("read the uuid of", sql)
    }

    fn high_water(&self) -> Result<ItemId> {
        let sql = "SELECT high_water FROM {s}.spools WHERE name = $1";
        self.spool_value("read", sql).map(u64_of)
    }

    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool> {
        self.txn("dead-letter an item in", true, |tx| {
            self.lock_spool(tx)?;
            self.kill(tx, id, last_error, true, None, false)
        })
    }

    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        self.dead_after(after, limit)
    }

    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        self.dead_one(id)
    }

    fn dead_count(&self) -> Result<u64> {
        let sql = "SELECT dead FROM {s}.spools WHERE name = $1";
        self.spool_value("count dead letters in", sql).map(u64_of)
    }

    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.txn("requeue dead letters in", true, |tx| {
            self.requeue_in(tx, ids)
        })
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.txn("purge dead letters from", true, |tx| self.purge_in(tx, ids))
    }

    fn import_stream(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<()> {
        self.txn_once("import into", |tx| {
            let spool = self.lock_spool(tx)?;
            self.import_records(tx, spool.high_water, records, each, None)
        })
    }

    fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        self.txn("read stats of", false, |tx| self.stats_in(tx, now))
    }

    fn shape_cells(
        &self,
        query: &crate::ops::shape::ShapeQuery,
    ) -> Result<Vec<crate::ops::shape::ShapeCell>> {
        if !self.can_shape(query) {
            return crate::ops::shape::scan_cells(self, query);
        }
        self.txn("count the shape of", false, |tx| self.shape_in(tx, query))
    }

    fn push_state(&self) -> Result<PushState> {
        self.txn("read the push state of", false, |tx| self.push_state_in(tx))
    }

    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>> {
        self.items_after(
            "read in-flight items of",
            by_version!(
                "SELECT ",
                " FROM {s}.items WHERE spool = $1 AND push_seq > $2 ORDER BY push_seq LIMIT $3"
            ),
            after_seq,
            limit,
        )
    }

    fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>> {
        self.txn("number items for push in", true, |tx| {
            self.push_assign_in(tx, ids)
        })
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        self.txn("record a push acknowledgement in", true, |tx| {
            self.push_ack_in(tx, last_seq, rejected)
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        self.txn("give a new uuid to", true, |tx| self.regenerate_uuid_in(tx))
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let mut f = Some(f);
        self.txn_once("receive a push into", |tx| {
            let spool = self.lock_spool(tx)?;
            let mut rx =
                receive::PgReceive::new(self, tx, spool.high_water, spool.depth, spool.max_depth);
            (f.take().expect("runs once"))(&mut rx)?;
            rx.finish(spool.high_water)
        })
    }

    fn push_clients(&self) -> Result<Vec<ClientSummary>> {
        self.txn("read the push clients of", false, |tx| {
            receive::clients(self, tx)
        })
    }

    fn push_client_count(&self) -> Result<u64> {
        let sql = "SELECT count(*) FROM {s}.push_clients WHERE spool = $1";
        self.spool_value("count the push clients of", sql)
            .map(u64_of)
    }

    fn leasing(&self) -> Option<&dyn Leasing> {
        Some(self)
    }

    fn import_with_identity(
        &self,
        header: &SpoolHeader,
        adopt: bool,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<IdentityOutcome> {
        self.txn_once("import into", |tx| {
            let spool = self.lock_spool(tx)?;
            let mut merge = self.begin_identity(tx, header, adopt)?;
            self.import_records(tx, spool.high_water, records, each, Some(&mut merge))?;
            self.finish_identity(tx, &merge)?;
            Ok(merge.outcome)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_their_schema() {
        let sql = conn::render(lease::CLAIM, "\"spool\"");
        assert!(sql.contains("\"spool\".items") && sql.contains("FOR UPDATE SKIP LOCKED"));
        assert!(!sql.contains("{s}") && !sql.contains("{now}"));
    }
}
