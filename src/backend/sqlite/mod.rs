//! The SQLite backend: the default spool, in the reference's own table.
//!
//! Why it exists: a SQLite spool in WAL mode gives indexed dedup, one
//! committed transaction per mutation, and safe concurrent writers from
//! any number of processes, in a file the reference `SqliteOfflineQueue`
//! can keep reading and writing.
//!
//! What it guarantees:
//!
//! - **Schema.** Pending items (held ones included) are the rows of the
//!   reference table `morph_offline_queue` (`id INTEGER PRIMARY KEY
//!   AUTOINCREMENT, payload TEXT, idempotency_key TEXT, attempts INTEGER,
//!   enqueued_at INTEGER` in Unix seconds) with its partial unique index
//!   on non-empty keys. Delivered items are deleted from it; dead-lettered
//!   ones move, under the same id, to `spool_dead_letters`.
//! - **Additions** (schema version 1, `PRAGMA user_version = 1`, see
//!   `migrations/0001_spool.sql`): columns `next_retry_at` (Unix ms),
//!   `last_error` and `held` with defaults, so that reference writers that
//!   insert only the reference columns keep working; the tables
//!   `spool_dead_letters` and `spool_meta` (the spool's `uuid`, and
//!   `max_depth` when bounded); indexes that let `size` and `stats` count
//!   millions of rows without reading a payload.
//! - **Compatibility.** A plain reference file (`user_version` 0) is
//!   migrated, rows kept, by the first writable open, in one transaction.
//!   A read-only open never migrates and never writes (SQLite may create
//!   the empty `-wal` and `-shm` files every reader of a WAL database
//!   needs): it reads a reference file with the added columns at their
//!   defaults. A `user_version` above 1 is [`Error::SchemaTooNew`]; a
//!   database with tables but no `morph_offline_queue` is
//!   [`Error::Corrupt`]; neither is touched.
//! - **Payloads** round-trip as bytes: valid UTF-8 is stored as TEXT (what
//!   reference readers expect), anything else as a BLOB in the same
//!   column.
//! - **Ids** are never reused: new ids are above the AUTOINCREMENT
//!   sequence and the largest id of both tables, and an import that keeps
//!   a dead letter's id raises the sequence, so reference writers never
//!   reuse it either.
//! - **Durability and atomicity.** `journal_mode=WAL` (checked),
//!   `synchronous=FULL`; every mutation is one `BEGIN IMMEDIATE`
//!   transaction that changes nothing when it fails. Connections do not
//!   checkpoint on close (auto-checkpoint stays on), so a one-shot CLI
//!   enqueue costs the WAL's fsync (plus the directory fsync SQLite does
//!   after opening the WAL), not a checkpoint of the database.
//!
//! Every operation behaves as the memory backend's model in
//! `backend/state.rs`, with two limits of the reference columns: the enqueue time
//! is stored in whole seconds (an import with a finer time keeps the
//! second), and an item imported without an enqueue time stores
//! `i64::MIN` in the NOT NULL `enqueued_at` column, which reads back as
//! unknown.

mod db;
mod dead;
mod enqueue;
mod import;
pub mod maint;
mod open;
mod push;
mod receive;
mod retain;
mod rows;
mod schema;
mod shape;
mod stats;

use self::db::Db;
use self::open::{connect, prepare_file, set_up_writer};
use self::schema::Layout;
use crate::backend::identity::{IdentityOutcome, SpoolHeader};
use crate::backend::state;
use crate::backend::OpenOptions;
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, BatchResults, ClientSummary, DeadLetter, DeliveredItem, EnqueueOptions,
    Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats,
    Record, PRUNE_BATCH,
};
use crate::push::receiver::ReceiveTxn;
use crate::queue::{BackendKind, Queue};
use crate::time::{SharedClock, Timestamp};
use rusqlite::{Connection, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// A spool stored in a SQLite database.
#[derive(Debug)]
pub struct SqliteQueue {
    path: PathBuf,
    conn: Mutex<Connection>,
    clock: SharedClock,
    layout: Layout,
    read_only: bool,
    busy_timeout: std::time::Duration,
}

impl SqliteQueue {
    /// Open the spool database at `path` as `opts.mode` says: create it
    /// (with the full schema and `opts.max_depth`), migrate a reference
    /// database, or open it read-only without writing anything.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<SqliteQueue> {
        prepare_file(path, opts.mode)?;
        let read_only = !opts.mode.writable();
        let mut conn = connect(path, opts)?;
        // Recognise the database before anything writes to it: a file that
        // is not a spool, or is too new, must stay exactly as it is.
        let mut layout = schema::read_layout(&conn, path)?;
        if !read_only {
            set_up_writer(&conn, path)?;
            layout = schema::ensure_spool(&mut conn, path, opts, layout)?;
        }
        Ok(SqliteQueue {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
            clock: opts.clock.clone(),
            layout,
            read_only,
            busy_timeout: opts.busy_timeout,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The database file and its WAL and shared-memory files (some may not
    /// exist right now).
    pub fn files(&self) -> Vec<PathBuf> {
        let with = |suffix: &str| {
            let mut s = self.path.as_os_str().to_owned();
            s.push(suffix);
            PathBuf::from(s)
        };
        vec![self.path.clone(), with("-wal"), with("-shm")]
    }

    /// SQLite's `PRAGMA data_version`: a number that changes whenever a
    /// commit by another connection (of this process or any other)
    /// becomes visible to this handle, and never because of this handle's
    /// own commits. Follow mode compares it to tell whether a file-change
    /// notification (or a poll) found anything new.
    pub fn data_version(&self) -> Result<i64> {
        self.read("read the data version of", |db| {
            db.conn
                .query_row("PRAGMA data_version", [], |r| r.get(0))
                .map_err(|e| db.err(e))
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the connection, outside a transaction (single reads).
    fn read<T>(&self, action: &'static str, f: impl FnOnce(&Db<'_>) -> Result<T>) -> Result<T> {
        let conn = self.lock();
        f(&Db::new(&conn, &self.path, action, self.layout))
    }

    /// Run `f` in one read transaction, so that its reads see one state.
    fn snapshot<T>(&self, action: &'static str, f: impl FnOnce(&Db<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(|e| Error::sqlite(&self.path, action, e))?;
        let out = f(&Db::new(&tx, &self.path, action, self.layout))?;
        tx.commit()
            .map_err(|e| Error::sqlite(&self.path, action, e))?;
        Ok(out)
    }

    /// Run `f` in one write transaction (`BEGIN IMMEDIATE`), committed
    /// when `f` succeeds and rolled back when it fails.
    fn write<T>(&self, action: &'static str, f: impl FnOnce(&Db<'_>) -> Result<T>) -> Result<T> {
        if self.read_only {
            return Err(Error::Unsupported(format!(
                "cannot {action} {}: the spool was opened read-only",
                self.path.display()
            )));
        }
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Error::sqlite(&self.path, action, e))?;
        let db = Db::new(&tx, &self.path, action, self.layout);
        db.ensure_counts()?;
        let out = f(&db)?;
        db.seal_counts()?;
        tx.commit()
            .map_err(|e| Error::sqlite(&self.path, action, e))?;
        Ok(out)
    }

    /// On close: when the WAL has grown past [`WAL_TRUNCATE_BYTES`],
    /// checkpoint it and truncate it, without waiting for anyone.
    ///
    /// Connections do not checkpoint on close, and a process that opens
    /// the database rebuilds its WAL index by reading the whole WAL and
    /// forgets what was already checkpointed, so without this a spool
    /// used by one-shot processes grows its WAL forever and every open
    /// gets slower. While a connection stays open, SQLite's own
    /// auto-checkpoint keeps restarting the WAL, so this runs only when
    /// a handle closes. Every commit is already durable: a checkpoint that
    /// cannot run now (a reader holds the WAL) changes nothing and is
    /// tried again when the next handle closes.
    fn keep_wal_small(&self, conn: &Connection) {
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        let big = std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_TRUNCATE_BYTES);
        if !big {
            return;
        }
        let _ = conn.busy_timeout(std::time::Duration::ZERO);
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        let _ = conn.busy_timeout(self.busy_timeout);
    }
}

/// WAL size above which a closing writer checkpoints and truncates it
/// (64 pages of 4 KiB).
const WAL_TRUNCATE_BYTES: u64 = 256 * 1024;

impl Drop for SqliteQueue {
    fn drop(&mut self) {
        if !self.read_only {
            let conn = self.lock();
            self.keep_wal_small(&conn);
        }
    }
}

impl Queue for SqliteQueue {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn enqueue_batch(&self, items: &[NewItem], opts: &EnqueueOptions) -> Result<Vec<Enqueued>> {
        for it in items {
            crate::item::check_key(&it.key)?;
        }
        let now = self.clock.now();
        self.write("enqueue into", |db| {
            enqueue::enqueue_batch(db, items, opts, now)
        })
    }

    fn enqueue_stream(
        &self,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        opts: &EnqueueOptions,
    ) -> Result<BatchResults> {
        let now = self.clock.now();
        self.write("enqueue into", |db| {
            enqueue::enqueue_stream(db, items, opts, now)
        })
    }

    fn page(&self, after: ItemId, limit: usize) -> Result<Vec<Item>> {
        self.read("read", |db| db.page(after, limit))
    }

    fn get(&self, id: ItemId) -> Result<Option<Item>> {
        self.read("read", |db| db.get(id))
    }

    fn deliver(&self, done: &[(ItemId, Evidence)]) -> Result<Vec<bool>> {
        let now = self.clock.now();
        self.write("mark items done in", |db| {
            let retain = db.retain()?;
            let out = done
                .iter()
                .map(|&(id, evidence)| {
                    if retain.is_some() {
                        db.retain_delivered(id, evidence, now)?;
                    }
                    db.remove_pending(id)
                })
                .collect::<Result<Vec<bool>>>()?;
            db.prune_delivered(now, retain, PRUNE_BATCH)?;
            Ok(out)
        })
    }

    fn retain(&self) -> Result<Option<std::time::Duration>> {
        self.read("read the settings of", |db| db.retain())
    }

    fn set_retain(&self, window: Option<std::time::Duration>) -> Result<()> {
        self.write("change the settings of", |db| db.set_retain(window))
    }

    fn delivered_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeliveredItem>> {
        self.read("read", |db| db.delivered_page(after, limit))
    }

    fn delivered_get(&self, id: ItemId) -> Result<Option<DeliveredItem>> {
        self.read("read", |db| db.delivered_get(id))
    }

    fn prune_delivered(&self, limit: usize) -> Result<u64> {
        let now = self.clock.now();
        self.write("prune delivered items of", |db| {
            let retain = db.retain()?;
            db.prune_delivered(now, retain, limit)
        })
    }

    fn set_attempts(&self, id: ItemId, attempts: u32) -> Result<bool> {
        self.write("set attempts in", |db| {
            db.update_pending(
                "UPDATE morph_offline_queue SET attempts = ?2 WHERE id = ?1",
                id,
                &[&attempts],
            )
        })
    }

    fn record_attempt(&self, id: ItemId, update: &AttemptUpdate) -> Result<bool> {
        let next_retry_at = update.next_retry_at.map(|t| t.as_millis());
        self.write("record an attempt in", |db| {
            db.update_pending(
                "UPDATE morph_offline_queue \
                 SET attempts = ?2, next_retry_at = ?3, last_error = ?4 WHERE id = ?1",
                id,
                &[&update.attempts, &next_retry_at, &update.last_error],
            )
        })
    }

    fn set_held(&self, ids: &[ItemId], held: bool) -> Result<Vec<bool>> {
        let action = if held {
            "hold items in"
        } else {
            "release items in"
        };
        self.write(action, |db| {
            if held {
                state::check_hold_with(ids, |id| db.push_seq_of(id))?;
            }
            ids.iter()
                .map(|&id| {
                    db.update_pending(
                        "UPDATE morph_offline_queue SET held = ?2 WHERE id = ?1",
                        id,
                        &[&held],
                    )
                })
                .collect()
        })
    }

    fn size(&self) -> Result<u64> {
        self.read("count items in", |db| db.pending_count())
    }

    fn due_count(&self, now: Timestamp, ignore_backoff: bool, at_most: Option<u64>) -> Result<u64> {
        let due = self.snapshot("count due items in", |db| {
            db.due_count((!ignore_backoff).then_some(now))
        })?;
        Ok(at_most.map_or(due, |m| due.min(m)))
    }

    fn group_head(&self, group: &str) -> Result<Option<ItemId>> {
        self.read("read", |db| db.group_head(group))
    }

    fn next_retry_after(&self, now: Timestamp) -> Result<Option<Timestamp>> {
        self.read("find the next retry time in", |db| db.next_retry_after(now))
    }

    fn max_depth(&self) -> Result<Option<u64>> {
        self.read("read the depth bound of", |db| db.max_depth())
    }

    fn on_full(&self) -> Result<OnFull> {
        self.read("read the overflow policy of", |db| db.on_full())
    }

    fn set_on_full(&self, policy: OnFull) -> Result<()> {
        self.write("set the overflow policy of", |db| {
            schema::set_meta(db.conn, "on_full", policy.name()).map_err(|e| db.err(e))
        })
    }

    fn set_max_depth(&self, bound: Option<u64>) -> Result<()> {
        let bound = bound.map(|b| b.to_string());
        self.write("set the depth bound of", |db| {
            db.put_meta("max_depth", bound.as_deref())
        })
    }

    fn uuid(&self) -> Result<String> {
        if !self.layout.is_spool() {
            return Err(Error::Unsupported(format!(
                "{} was opened read-only before spool ever wrote to it: it has no uuid yet; the first write assigns one",
                self.path.display()
            )));
        }
        self.read("read the uuid of", |db| {
            schema::get_meta(db.conn, "uuid")
                .map_err(|e| db.err(e))?
                .ok_or_else(|| Error::corrupt(&self.path, None, "spool_meta has no uuid"))
        })
    }

    fn high_water(&self) -> Result<ItemId> {
        self.read("read", |db| db.high_water())
    }

    fn dead_letter(&self, id: ItemId, last_error: &str) -> Result<bool> {
        let now = self.clock.now();
        self.write("dead-letter an item in", |db| {
            let seq = db.push_seq_of(id)?;
            let killed = db.kill(id, last_error, now)?;
            if let (true, Some(seq)) = (killed, seq) {
                db.add_skip(i64::try_from(seq).unwrap_or(i64::MAX))?;
            }
            Ok(killed)
        })
    }

    fn dead_page(&self, after: ItemId, limit: usize) -> Result<Vec<DeadLetter>> {
        self.read("read dead letters in", |db| db.dead_page(after, limit))
    }

    fn dead_get(&self, id: ItemId) -> Result<Option<DeadLetter>> {
        self.read("read dead letters in", |db| db.dead_get(id))
    }

    fn dead_count(&self) -> Result<u64> {
        self.read("count dead letters in", |db| db.dead_count())
    }

    fn requeue(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.write("requeue dead letters in", |db| db.requeue(ids))
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.write("purge dead letters from", |db| {
            ids.iter().map(|&id| db.remove_dead(id)).collect()
        })
    }

    fn import_stream(
        &self,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<()> {
        self.write("import into", |db| {
            import::import_records(db, records, each, None)
        })
    }

    fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        self.snapshot("read stats of", |db| db.stats(now))
    }

    fn shape_cells(
        &self,
        query: &crate::ops::shape::ShapeQuery,
    ) -> Result<Vec<crate::ops::shape::ShapeCell>> {
        if self.layout != Layout::Spool {
            return crate::ops::shape::scan_cells(self, query);
        }
        self.read("count the shape of", |db| db.shape_cells(query))
    }

    fn push_state(&self) -> Result<PushState> {
        self.snapshot("read the push state of", |db| db.push_state())
    }

    fn push_in_flight(&self, after_seq: u64, limit: usize) -> Result<Vec<Item>> {
        self.read("read in-flight items of", |db| {
            db.in_flight_page(after_seq, limit)
        })
    }

    fn push_assign(&self, ids: &[ItemId]) -> Result<Vec<(ItemId, u64)>> {
        self.write("number items for push in", |db| db.push_assign(ids))
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        let now = self.clock.now();
        self.write("record a push acknowledgement in", |db| {
            db.push_ack(last_seq, rejected, now)
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        self.write("give a new uuid to", |db| db.regenerate_uuid())
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let now = self.clock.now();
        self.write("receive a push into", |db| {
            let mut rx = receive::SqliteReceive::new(db, now);
            f(&mut rx)?;
            rx.finish()
        })
    }

    fn push_clients(&self) -> Result<Vec<ClientSummary>> {
        self.snapshot("read the push clients of", receive::clients)
    }

    fn push_client_count(&self) -> Result<u64> {
        self.snapshot("count the push clients of", receive::client_count)
    }

    fn import_with_identity(
        &self,
        header: &SpoolHeader,
        adopt: bool,
        records: &mut dyn Iterator<Item = Result<Record>>,
        each: &mut dyn FnMut(&Record, Imported),
    ) -> Result<IdentityOutcome> {
        self.write("import into", |db| {
            import::import_with_identity(db, header, adopt, records, each)
        })
    }
}
