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
mod enqueue;
mod identity;
mod lease;
mod receive;
mod retain;
pub mod schema;
pub mod url;

use self::conn::{connect, is_retryable, pg_error, Conn, Tx};
use self::schema::Found;
pub use self::url::{is_postgres_url, redact, PgTarget};
use crate::backend::identity::{IdentityOutcome, SpoolHeader};
use crate::backend::{OpenMode, OpenOptions};
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, BatchResults, ClientSummary, DeadLetter, DeliveredItem, DepthLimit,
    EnqueueOptions, Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck,
    PushState, QueueStats, Record,
};
use crate::push::receiver::ReceiveTxn;
use crate::queue::{BackendKind, Claimed, LeaseToken, Leasing, Queue};
use crate::time::{SharedClock, Timestamp};
use postgres::fallible_iterator::FallibleIterator;
use postgres::Row;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Rows per multi-row INSERT of a batch.
const ROWS_PER_INSERT: usize = 1000;
/// Payload bytes per multi-row INSERT of a batch.
const BYTES_PER_INSERT: usize = 8 << 20;
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

fn id_param(id: ItemId) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

fn u64_of(v: i64) -> u64 {
    v.max(0) as u64
}

/// The NUL byte is the one character PostgreSQL text cannot hold.
fn text(s: &str) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{fffd}")
    } else {
        s.to_string()
    }
}

fn item_from_row(r: &Row) -> Item {
    Item {
        id: u64_of(r.get(0)),
        payload: r.get(1),
        key: String::from_utf8_lossy(r.get::<_, &[u8]>(2)).into_owned(),
        attempts: u32::try_from(r.get::<_, i64>(3).max(0)).unwrap_or(u32::MAX),
        enqueued_at: r.get::<_, Option<i64>>(4).map(Timestamp::from_millis),
        next_retry_at: r.get::<_, Option<i64>>(5).map(Timestamp::from_millis),
        last_error: r.get(6),
        held: r.get(7),
        push_seq: r.get::<_, Option<i64>>(8).map(u64_of),
        group: r.get(9),
        coalesce_key: r.get(10),
    }
}

fn dead_from_row(r: &Row) -> DeadLetter {
    DeadLetter {
        item: item_from_row(r),
        dead_at: Timestamp::from_millis(r.get(11)),
    }
}

/// A statement that reads the item columns [`item_from_row`] expects,
/// between `$head` and `$tail`: `(schema version 2, schema version 1)`.
/// Version 1 has no group or coalesce key; they read as NULL (see
/// [`PostgresQueue::pick`]).
macro_rules! by_version {
    ($head:literal, $tail:literal) => {
        (
            concat!(
                $head,
                "id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                 grp, coalesce_key",
                $tail
            ),
            concat!(
                $head,
                "id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                 NULL::text, NULL::text",
                $tail
            ),
        )
    };
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
        let client = connect(&target, &display)?;
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
            let client = connect(&self.target, &self.display).map_err(|e| match e {
                Error::Postgres {
                    target,
                    kind,
                    detail,
                    retryable,
                    ..
                } => Error::Postgres {
                    target,
                    action,
                    kind,
                    detail,
                    retryable,
                },
                e => e,
            })?;
            *self.listening.lock().unwrap_or_else(|e| e.into_inner()) = false;
            *g = Some(Conn::new(client, &self.target.schema));
        }
        Ok(g)
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
            let conn = g
                .as_mut()
                .ok_or_else(|| Error::Internal("no connection".into()))?;
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

/// The spool row, locked for this transaction.
struct SpoolRow {
    high_water: u64,
    depth: u64,
    max_depth: Option<u64>,
    on_full: OnFull,
    /// The retention window in milliseconds (`None`: off).
    retain_ms: Option<i64>,
    /// Delivered rows kept (expired ones not yet pruned included).
    retained: u64,
}

/// The running state of one enqueue transaction (the spool row is locked,
/// so these numbers are exact).
struct Batch {
    /// Pending items when the enqueue began (reported by `QueueFull`).
    start_depth: u64,
    /// Pending items now.
    depth: u64,
    /// The highest id issued.
    high_water: ItemId,
    /// Items stored minus items coalesced away (evictions adjust the
    /// counts themselves).
    added: i64,
    /// Items evicted.
    evicted: i64,
    /// The retention window in milliseconds (`None`: off): a key no
    /// pending item carries is a dedup hit while a delivered row with it
    /// is inside the window (SPEC §9).
    retain_ms: Option<i64>,
}

impl PostgresQueue {
    fn lock_spool(&self, tx: &mut Tx<'_>) -> Result<SpoolRow> {
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
    fn policy_of(&self, v: &str) -> Result<OnFull> {
        OnFull::parse(v).ok_or_else(|| {
            Error::Internal(format!(
                "{}: spools.on_full is not an overflow policy: {v:?}",
                self.display
            ))
        })
    }

    /// Add to the kept counts and move the high-water mark up.
    fn adjust(&self, tx: &mut Tx<'_>, high_water: u64, depth: i64, dead: i64) -> Result<()> {
        tx.execute(
            "UPDATE {s}.spools SET high_water = greatest(high_water, $2), \
             depth = depth + $3, dead = dead + $4 WHERE name = $1",
            &[self.spool(), &id_param(high_water), &depth, &dead],
        )?;
        Ok(())
    }

    /// [`PostgresQueue::adjust`] and [`PostgresQueue::notify`] in one
    /// statement (one round trip), for commits that enqueue.
    fn adjust_and_notify(
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

    fn notify(&self, tx: &mut Tx<'_>) -> Result<()> {
        let ch = channel(&self.target.schema);
        tx.execute("SELECT pg_notify($1, $2)", &[&ch, self.spool()])?;
        Ok(())
    }

    /// The pending items that carry `keys`, by key.
    fn key_owners(&self, tx: &mut Tx<'_>, keys: &[&[u8]]) -> Result<HashMap<Vec<u8>, ItemId>> {
        if keys.is_empty() {
            return Ok(HashMap::new());
        }
        let rows = tx.query(
            "SELECT key, id FROM {s}.items WHERE spool = $1 AND key = ANY($2) AND key <> '\\x'::bytea",
            &[self.spool(), &keys],
        )?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), u64_of(r.get(1))))
            .collect())
    }

    fn key_owner(&self, tx: &mut Tx<'_>, key: &str) -> Result<Option<ItemId>> {
        if key.is_empty() {
            return Ok(None);
        }
        let row = tx.query_opt(
            "SELECT id FROM {s}.items WHERE spool = $1 AND key = $2 AND key <> '\\x'::bytea",
            &[self.spool(), &key.as_bytes()],
        )?;
        Ok(row.map(|r| u64_of(r.get(0))))
    }

    /// Store `item` as pending under its own id.
    fn insert_pending(&self, tx: &mut Tx<'_>, item: &Item) -> Result<()> {
        tx.execute(
            "INSERT INTO {s}.items (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
             grp, coalesce_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                self.spool(),
                &id_param(item.id),
                &item.payload,
                &item.key.as_bytes(),
                &i64::from(item.attempts),
                &item.enqueued_at.map(|t| t.as_millis()),
                &item.next_retry_at.map(|t| t.as_millis()),
                &item.last_error.as_deref().map(text),
                &item.held,
                &item.push_seq.map(id_param),
                &item.group.as_deref().map(text),
                &item.coalesce_key.as_deref().map(text),
            ],
        )?;
        Ok(())
    }

    fn insert_dead(&self, tx: &mut Tx<'_>, dl: &DeadLetter) -> Result<()> {
        let item = &dl.item;
        tx.execute(
            "INSERT INTO {s}.dead_letters (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
             grp, coalesce_key, dead_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
            &[
                self.spool(),
                &id_param(item.id),
                &item.payload,
                &item.key.as_bytes(),
                &i64::from(item.attempts),
                &item.enqueued_at.map(|t| t.as_millis()),
                &item.next_retry_at.map(|t| t.as_millis()),
                &item.last_error.as_deref().map(text),
                &item.held,
                &item.push_seq.map(id_param),
                &item.group.as_deref().map(text),
                &item.coalesce_key.as_deref().map(text),
                &dl.dead_at.as_millis(),
            ],
        )?;
        Ok(())
    }

    /// Move pending item `id` to the dead letters (when `token` is given,
    /// only while it carries it). A push number becomes a skip when
    /// `skip`; with `uncount`, the dead letter keeps one attempt fewer
    /// (the one a claim counted for a delivery that was never made).
    /// Counts are adjusted. Whether it moved.
    fn kill(
        &self,
        tx: &mut Tx<'_>,
        id: ItemId,
        last_error: &str,
        skip: bool,
        token: Option<LeaseToken>,
        uncount: bool,
    ) -> Result<bool> {
        let row = tx.query_one(
            "WITH d AS (DELETE FROM {s}.items WHERE spool = $1 AND id = $2 \
                 AND ($6::int8 IS NULL OR lease_token = $6) RETURNING *), \
             ins AS (INSERT INTO {s}.dead_letters \
                 (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                  grp, coalesce_key, dead_at) \
                 SELECT spool, id, payload, key, \
                 CASE WHEN $7 THEN greatest(attempts - 1, 0) ELSE attempts END, \
                 enqueued_at, next_retry_at, $3, false, push_seq, \
                 grp, coalesce_key, COALESCE($4::int8, {now}) FROM d RETURNING push_seq), \
             sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM ins \
                 WHERE push_seq IS NOT NULL AND $5 ON CONFLICT DO NOTHING) \
             SELECT count(*) FROM ins",
            &[
                self.spool(),
                &id_param(id),
                &text(last_error),
                &self.now_param(),
                &skip,
                &token,
                &uncount,
            ],
        )?;
        let n: i64 = row.get(0);
        if n > 0 {
            self.adjust(tx, 0, -n, n)?;
        }
        Ok(n > 0)
    }

    /// Delete pending items `ids` (with `tokens`, only those still
    /// carrying them); push numbers of removed in-flight items become
    /// skips when `skip`. Returns the removed ids.
    fn remove(
        &self,
        tx: &mut Tx<'_>,
        ids: &[i64],
        tokens: Option<&[i64]>,
        skip: bool,
    ) -> Result<HashSet<ItemId>> {
        let rows = match tokens {
            None => tx.query(
                "WITH d AS (DELETE FROM {s}.items WHERE spool = $1 AND id = ANY($2) RETURNING id, push_seq), \
                 sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM d \
                     WHERE push_seq IS NOT NULL AND $3 ON CONFLICT DO NOTHING) \
                 SELECT id FROM d",
                &[self.spool(), &ids, &skip],
            )?,
            Some(tokens) => tx.query(
                "WITH d AS (DELETE FROM {s}.items i USING unnest($2::int8[], $3::int8[]) AS t(id, tok) \
                     WHERE i.spool = $1 AND i.id = t.id AND i.lease_token = t.tok RETURNING i.id, i.push_seq), \
                 sk AS (INSERT INTO {s}.push_skips (spool, seq) SELECT $1, push_seq FROM d \
                     WHERE push_seq IS NOT NULL ON CONFLICT DO NOTHING) \
                 SELECT id FROM d",
                &[self.spool(), &ids, &tokens],
            )?,
        };
        let removed: HashSet<ItemId> = rows.iter().map(|r| u64_of(r.get(0))).collect();
        if !removed.is_empty() {
            self.adjust(tx, 0, -(removed.len() as i64), 0)?;
        }
        Ok(removed)
    }

    fn push_state_in(&self, tx: &mut Tx<'_>) -> Result<PushState> {
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

    fn set_push_counters(&self, tx: &mut Tx<'_>, last_assigned: u64, acked: u64) -> Result<()> {
        tx.execute(
            "UPDATE {s}.spools SET push_last_assigned = $2, push_acked = $3 WHERE name = $1",
            &[self.spool(), &id_param(last_assigned), &id_param(acked)],
        )?;
        Ok(())
    }

    fn in_flight_ids(&self, tx: &mut Tx<'_>, after: u64, upto: u64) -> Result<Vec<(ItemId, u64)>> {
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

    fn drop_skips_through(&self, tx: &mut Tx<'_>, seq: u64) -> Result<()> {
        tx.execute(
            "DELETE FROM {s}.push_skips WHERE spool = $1 AND seq <= $2",
            &[self.spool(), &id_param(seq)],
        )?;
        Ok(())
    }

    fn push_seq_of(&self, tx: &mut Tx<'_>, id: ItemId) -> Result<Option<u64>> {
        let row = tx.query_opt(
            "SELECT push_seq FROM {s}.items WHERE spool = $1 AND id = $2",
            &[self.spool(), &id_param(id)],
        )?;
        Ok(row.and_then(|r| r.get::<_, Option<i64>>(0)).map(u64_of))
    }

    /// The process id of this handle's server process
    /// (`pg_stat_activity.pid`), for operators and tests.
    pub fn server_pid(&self) -> Result<i32> {
        self.txn("read the server process of", false, |tx| {
            Ok(tx.query_one("SELECT pg_backend_pid()", &[])?.get(0))
        })
    }

    /// Tables of this schema and their dead tuples (for `compact`).
    pub fn dead_tuples(&self) -> Result<Vec<(String, u64, u64)>> {
        self.txn("read the table statistics of", false, |tx| {
            let rows = tx.query(
                "SELECT relname::text, n_live_tup, n_dead_tup FROM pg_stat_user_tables \
                 WHERE schemaname = $1 ORDER BY relname",
                &[&self.target.schema],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), u64_of(r.get(1)), u64_of(r.get(2))))
                .collect())
        })
    }

    /// `VACUUM (ANALYZE)` every table of the spool's schema (shared by all
    /// its spools); returns the tables vacuumed. Rows that older versions
    /// wrote for this spool's skipped push numbers (a skip now records
    /// nothing but the client's `last_seq`) are deleted first.
    pub fn vacuum(&self) -> Result<Vec<String>> {
        if self.read_only {
            return Err(Error::Unsupported(format!(
                "cannot vacuum {}: the spool was opened read-only",
                self.display
            )));
        }
        let tables = [
            "items",
            "dead_letters",
            "delivered",
            "spools",
            "push_skips",
            "push_clients",
            "push_entries",
        ];
        let mut g = self.lock("vacuum")?;
        let conn = g
            .as_mut()
            .ok_or_else(|| Error::Internal("no connection".into()))?;
        let schema_q = conn.schema_q().to_string();
        conn.client
            .execute(
                &format!(
                    "DELETE FROM {schema_q}.push_entries WHERE spool = $1 AND outcome = 'skipped'"
                ),
                &[&self.target.spool],
            )
            .map_err(|e| pg_error(&self.target, &self.display, "vacuum", e))?;
        for t in tables {
            conn.client
                .batch_execute(&format!("VACUUM (ANALYZE) {schema_q}.{t}"))
                .map_err(|e| pg_error(&self.target, &self.display, "vacuum", e))?;
        }
        Ok(tables
            .iter()
            .map(|t| format!("{}.{t}", self.target.schema))
            .collect())
    }

    /// What `verify` checks: the schema version, the kept counts against
    /// the rows, the constraints, and leases that ran out. Returns the
    /// findings (empty: healthy) and notes.
    pub fn verify(&self) -> Result<(Vec<String>, Vec<String>)> {
        self.txn("verify", false, |tx| {
            let mut findings = Vec::new();
            let mut notes = Vec::new();
            let v: i32 = tx
                .query_one("SELECT COALESCE(max(version), 0) FROM {s}.spool_schema", &[])?
                .get(0);
            notes.push(format!("schema {} version {v}", self.target.schema));
            if v != schema::SCHEMA_VERSION {
                findings.push(format!(
                    "schema version {v}, this spool writes version {}",
                    schema::SCHEMA_VERSION
                ));
            }
            let row = tx.query_one(
                "SELECT s.depth, s.dead, s.high_water, \
                    (SELECT count(*) FROM {s}.items WHERE spool = $1), \
                    (SELECT count(*) FROM {s}.dead_letters WHERE spool = $1), \
                    GREATEST((SELECT max(id) FROM {s}.items WHERE spool = $1), \
                             (SELECT max(id) FROM {s}.dead_letters WHERE spool = $1)), \
                    (SELECT count(*) FROM {s}.items WHERE spool = $1 AND lease_until IS NOT NULL \
                        AND lease_until <= {now}), \
                    (SELECT count(*) FROM {s}.items WHERE spool = $1 AND lease_until IS NOT NULL), \
                    (SELECT count(*) FROM {s}.items i JOIN {s}.dead_letters d \
                        ON d.spool = i.spool AND d.id = i.id WHERE i.spool = $1) \
                 FROM {s}.spools s WHERE s.name = $1",
                &[self.spool()],
            )?;
            let (depth, dead, hw): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let (items, deads): (i64, i64) = (row.get(3), row.get(4));
            let max_id: Option<i64> = row.get(5);
            let (expired, leased, both): (i64, i64, i64) = (row.get(6), row.get(7), row.get(8));
            if depth != items {
                findings.push(format!("kept depth {depth}, but {items} pending rows"));
            }
            if dead != deads {
                findings.push(format!("kept dead-letter count {dead}, but {deads} rows"));
            }
            if max_id.is_some_and(|m| m > hw) {
                findings.push(format!(
                    "high-water mark {hw} is below the largest id {}",
                    max_id.unwrap_or_default()
                ));
            }
            if both > 0 {
                findings.push(format!("{both} ids are both pending and dead"));
            }
            if self.retention {
                self.verify_delivered(tx, hw, &mut findings, &mut notes)?;
            }
            let invalid: i64 = tx
                .query_one(
                    "SELECT count(*) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = $1 AND NOT x.indisvalid",
                    &[&self.target.schema],
                )?
                .get(0);
            if invalid > 0 {
                findings.push(format!("{invalid} invalid indexes (rebuild with REINDEX)"));
            }
            notes.push(format!(
                "{leased} items leased by replayers, {expired} of those leases ran out (due again; not an error)"
            ));
            Ok((findings, notes))
        })
    }

    /// The retention part of `verify`: the kept count against the rows,
    /// ids (at most `hw`, used once), evidence this version can read.
    fn verify_delivered(
        &self,
        tx: &mut Tx<'_>,
        hw: i64,
        findings: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let row = tx.query_one(
            "SELECT s.retained, \
                (SELECT count(*) FROM {s}.delivered WHERE spool = $1), \
                (SELECT max(id) FROM {s}.delivered WHERE spool = $1), \
                (SELECT count(*) FROM {s}.delivered d WHERE d.spool = $1 \
                    AND (EXISTS (SELECT 1 FROM {s}.items i WHERE i.spool = d.spool AND i.id = d.id) \
                      OR EXISTS (SELECT 1 FROM {s}.dead_letters x WHERE x.spool = d.spool AND x.id = d.id))), \
                (SELECT count(*) FROM {s}.delivered WHERE spool = $1 AND evidence !~ \
                    '^(http:[0-9]{1,5}|exit:-?[0-9]{1,10}|push:[0-9]{1,19}|done|sink)$'), \
                (SELECT count(*) FROM {s}.delivered WHERE spool = $1 \
                    AND delivered_at <= COALESCE({now} - s.retain_ms, 9223372036854775807)) \
             FROM {s}.spools s WHERE s.name = $1",
            &[self.spool()],
        )?;
        let (kept, rows): (i64, i64) = (row.get(0), row.get(1));
        let max_id: Option<i64> = row.get(2);
        let (both, unreadable, expired): (i64, i64, i64) = (row.get(3), row.get(4), row.get(5));
        if kept != rows {
            findings.push(format!(
                "kept count of retained delivered items {kept}, but {rows} rows"
            ));
        }
        if let Some(m) = max_id.filter(|m| *m > hw) {
            findings.push(format!(
                "high-water mark {hw} is below the largest delivered id {m}"
            ));
        }
        if both > 0 {
            findings.push(format!("{both} ids are both delivered and pending or dead"));
        }
        if unreadable > 0 {
            findings.push(format!(
                "{unreadable} delivered items carry evidence this version cannot read"
            ));
        }
        notes.push(format!(
            "{rows} delivered items retained, {expired} of those past their window \
             (pruned by the next delivery or enqueue, or by compact; not an error)"
        ));
        Ok(())
    }

    /// Counts of `stats` beyond [`QueueStats`]: leased items, and the
    /// table and index sizes of the whole schema in bytes.
    pub fn extra_stats(&self) -> Result<(u64, u64)> {
        self.txn("read stats of", false, |tx| {
            let row = tx.query_one(
                "SELECT (SELECT count(*) FROM {s}.items WHERE spool = $1 AND lease_until IS NOT NULL \
                         AND lease_until > {now}), \
                        COALESCE((SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c \
                         JOIN pg_namespace n ON n.oid = c.relnamespace \
                         WHERE n.nspname = $2 AND c.relkind = 'r'), 0)::int8",
                &[self.spool(), &self.target.schema],
            )?;
            Ok((u64_of(row.get(0)), u64_of(row.get(1))))
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
        if limit == 0 {
            return Ok(Vec::new());
        }
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
                for &id in ids {
                    if let Some(seq) = self.push_seq_of(tx, id)? {
                        return Err(Error::InvalidInput(format!(
                            "item {id} is in flight to the push receiver (sequence {seq}); it cannot be held until the receiver acknowledges it"
                        )));
                    }
                }
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
        self.txn("count items in", false, |tx| {
            let row = tx.query_one(
                "SELECT depth FROM {s}.spools WHERE name = $1",
                &[self.spool()],
            )?;
            Ok(u64_of(row.get(0)))
        })
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
        self.txn("read the overflow policy of", false, |tx| {
            let row = tx.query_one(
                "SELECT on_full FROM {s}.spools WHERE name = $1",
                &[self.spool()],
            )?;
            self.policy_of(row.get(0))
        })
    }

    fn set_on_full(&self, policy: OnFull) -> Result<()> {
        self.txn("set the overflow policy of", true, |tx| {
            tx.execute(
                "UPDATE {s}.spools SET on_full = $2 WHERE name = $1",
                &[self.spool(), &policy.name()],
            )?;
            Ok(())
        })
    }

    fn max_depth(&self) -> Result<Option<u64>> {
        self.txn("read the depth bound of", false, |tx| {
            let row = tx.query_one(
                "SELECT max_depth FROM {s}.spools WHERE name = $1",
                &[self.spool()],
            )?;
            Ok(row.get::<_, Option<i64>>(0).map(u64_of))
        })
    }

    fn set_max_depth(&self, bound: Option<u64>) -> Result<()> {
        self.txn("set the depth bound of", true, |tx| {
            tx.execute(
                "UPDATE {s}.spools SET max_depth = $2 WHERE name = $1",
                &[self.spool(), &bound.map(id_param)],
            )?;
            Ok(())
        })
    }

    fn uuid(&self) -> Result<String> {
        self.txn("read the uuid of", false, |tx| {
            let row = tx.query_one(
                "SELECT uuid FROM {s}.spools WHERE name = $1",
                &[self.spool()],
            )?;
            Ok(row.get(0))
        })
    }

    fn high_water(&self) -> Result<ItemId> {
        self.txn("read", false, |tx| {
            let row = tx.query_one(
                "SELECT high_water FROM {s}.spools WHERE name = $1",
                &[self.spool()],
            )?;
            Ok(u64_of(row.get(0)))
        })
    }

    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool> {
        self.txn("dead-letter an item in", true, |tx| {
            self.lock_spool(tx)?;
            self.kill(tx, id, last_error, true, None, false)
        })
    }

    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.txn("read dead letters in", false, |tx| {
            let rows = tx.query(
                self.pick(by_version!(
                    "SELECT ",
                    ", dead_at FROM {s}.dead_letters WHERE spool = $1 AND id > $2 ORDER BY id LIMIT $3"
                )),
                &[self.spool(), &id_param(after), &(limit.min(i64::MAX as usize) as i64)],
            )?;
            Ok(rows.iter().map(dead_from_row).collect())
        })
    }

    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        self.txn("read dead letters in", false, |tx| {
            let row = tx.query_opt(
                self.pick(by_version!(
                    "SELECT ",
                    ", dead_at FROM {s}.dead_letters WHERE spool = $1 AND id = $2"
                )),
                &[self.spool(), &id_param(id)],
            )?;
            Ok(row.as_ref().map(dead_from_row))
        })
    }

    fn dead_count(&self) -> Result<u64> {
        self.txn("count dead letters in", false, |tx| {
            let row = tx.query_one(
                "SELECT dead FROM {s}.spools WHERE name = $1",
                &[self.spool()],
            )?;
            Ok(u64_of(row.get(0)))
        })
    }

    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.txn("requeue dead letters in", true, |tx| {
            let spool = self.lock_spool(tx)?;
            let mut seen_ids = HashSet::new();
            let mut seen_keys: HashMap<String, ItemId> = HashMap::new();
            let mut count = 0u64;
            for &id in ids {
                let row = tx.query_opt(
                    "SELECT key FROM {s}.dead_letters WHERE spool = $1 AND id = $2",
                    &[self.spool(), &id_param(id)],
                )?;
                let Some(row) = row else { continue };
                if !seen_ids.insert(id) {
                    continue;
                }
                count += 1;
                let key = String::from_utf8_lossy(row.get::<_, &[u8]>(0)).into_owned();
                if key.is_empty() {
                    continue;
                }
                if let Some(other) = self.key_owner(tx, &key)? {
                    return Err(Error::InvalidInput(format!(
                        "cannot requeue dead letter {id}: pending item {other} already carries its key {key:?}"
                    )));
                }
                if let Some(other) = seen_keys.insert(key.clone(), id) {
                    return Err(Error::InvalidInput(format!(
                        "cannot requeue dead letters {other} and {id} together: they carry the same key {key:?}"
                    )));
                }
            }
            if let Some(bound) = spool.max_depth {
                if count > 0 && spool.depth.saturating_add(count) > bound {
                    return Err(Error::QueueFull {
                        max_depth: bound,
                        depth: spool.depth,
                    });
                }
            }
            let mut out = Vec::with_capacity(ids.len());
            let mut moved = 0i64;
            for &id in ids {
                let n = tx.execute(
                    "WITH d AS (DELETE FROM {s}.dead_letters WHERE spool = $1 AND id = $2 RETURNING *) \
                     INSERT INTO {s}.items (spool, id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, \
                     grp, coalesce_key) \
                     SELECT spool, id, payload, key, 0, enqueued_at, NULL, last_error, false, grp, coalesce_key FROM d",
                    &[self.spool(), &id_param(id)],
                )?;
                moved += n as i64;
                out.push(n > 0);
            }
            if moved > 0 {
                self.adjust_and_notify(tx, 0, moved, -moved)?;
            }
            Ok(out)
        })
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.txn("purge dead letters from", true, |tx| {
            self.lock_spool(tx)?;
            let mut out = Vec::with_capacity(ids.len());
            let mut n_all = 0i64;
            for &id in ids {
                let n = tx.execute(
                    "DELETE FROM {s}.dead_letters WHERE spool = $1 AND id = $2",
                    &[self.spool(), &id_param(id)],
                )?;
                n_all += n as i64;
                out.push(n > 0);
            }
            if n_all > 0 {
                self.adjust(tx, 0, 0, -n_all)?;
            }
            Ok(out)
        })
    }

    fn import(&self, records: &[Record]) -> Result<Vec<Imported>> {
        let mut out = Vec::with_capacity(records.len());
        self.import_stream(&mut records.iter().cloned().map(Ok), &mut |_, i| {
            out.push(i)
        })?;
        Ok(out)
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
        self.txn("read stats of", false, |tx| {
            // Version 1 has no overflow policy (reject) nor evictions;
            // versions 1 and 2 retain nothing.
            macro_rules! stats_sql {
                ($cols:literal) => {
                    concat!(
                        "SELECT s.depth, s.dead, s.max_depth, s.high_water, \
                            (SELECT count(*) FROM {s}.items WHERE spool = $1 AND held), \
                            (SELECT count(*) FROM {s}.items WHERE spool = $1 AND next_retry_at > $2), \
                            o.id, o.enqueued_at, ",
                        $cols,
                        " FROM {s}.spools s LEFT JOIN LATERAL \
                            (SELECT id, enqueued_at FROM {s}.items WHERE spool = $1 ORDER BY id LIMIT 1) o ON true \
                         WHERE s.name = $1"
                    )
                };
            }
            let sql = if self.v1 {
                stats_sql!("'reject', 0::int8, 0::int8, NULL::int8")
            } else if !self.retention {
                stats_sql!("s.on_full, s.evicted_total, 0::int8, NULL::int8")
            } else {
                stats_sql!("s.on_full, s.evicted_total, s.retained, s.retain_ms")
            };
            let row = tx.query_one(sql, &[self.spool(), &now.as_millis()])?;
            let mut s = QueueStats {
                depth: u64_of(row.get(0)),
                dead_letters: u64_of(row.get(1)),
                max_depth: row.get::<_, Option<i64>>(2).map(u64_of),
                high_water: u64_of(row.get(3)),
                held: u64_of(row.get(4)),
                waiting: u64_of(row.get(5)),
                oldest_id: row.get::<_, Option<i64>>(6).map(u64_of),
                oldest_enqueued_at: row.get::<_, Option<i64>>(7).map(Timestamp::from_millis),
                on_full: self.policy_of(row.get(8))?,
                evicted_total: u64_of(row.get(9)),
                delivered_retained: u64_of(row.get(10)),
                retain: row
                    .get::<_, Option<i64>>(11)
                    .map(|ms| Duration::from_millis(u64_of(ms))),
                ..QueueStats::default()
            };
            let rows = tx.query(
                "SELECT attempts, count(*) FROM {s}.items WHERE spool = $1 AND attempts <> 0 GROUP BY attempts",
                &[self.spool()],
            )?;
            let mut rest = s.depth;
            for r in &rows {
                let a = u32::try_from(r.get::<_, i64>(0).max(0)).unwrap_or(u32::MAX);
                let n = u64_of(r.get(1));
                rest = rest.saturating_sub(n);
                *s.attempts_histogram.entry(a).or_default() += n;
            }
            if rest > 0 {
                *s.attempts_histogram.entry(0).or_default() += rest;
            }
            Ok(s)
        })
    }

    fn push_state(&self) -> Result<PushState> {
        self.txn("read the push state of", false, |tx| self.push_state_in(tx))
    }

    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
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
        })
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        self.txn("record a push acknowledgement in", true, |tx| {
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
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        self.txn("give a new uuid to", true, |tx| {
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
        })
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let mut f = Some(f);
        self.txn_once("receive a push into", |tx| {
            let spool = self.lock_spool(tx)?;
            let mut rx =
                receive::PgReceive::new(self, tx, spool.high_water, spool.depth, spool.max_depth);
            (f.take().expect("runs once"))(&mut rx)?;
            let (hw, added) = rx.finish()?;
            if added > 0 {
                self.adjust_and_notify(tx, hw, added as i64, 0)?;
            }
            Ok(())
        })
    }

    fn push_clients(&self) -> Result<Vec<ClientSummary>> {
        self.txn("read the push clients of", false, |tx| {
            receive::clients(self, tx)
        })
    }

    fn push_client_count(&self) -> Result<u64> {
        self.txn("count the push clients of", false, |tx| {
            let row = tx.query_one(
                "SELECT count(*) FROM {s}.push_clients WHERE spool = $1",
                &[self.spool()],
            )?;
            Ok(u64_of(row.get(0)))
        })
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
    fn text_without_nul() {
        assert_eq!(text("a\0b"), "a\u{fffd}b");
        assert_eq!(text("ab"), "ab");
    }

    #[test]
    fn statements_name_their_schema() {
        let sql = conn::render(lease::CLAIM, "\"spool\"");
        assert!(sql.contains("\"spool\".items") && sql.contains("FOR UPDATE SKIP LOCKED"));
        assert!(!sql.contains("{s}") && !sql.contains("{now}"));
    }
}
