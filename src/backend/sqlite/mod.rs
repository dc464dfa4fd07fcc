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
pub mod maint;
mod receive;
mod schema;

use self::db::Db;
use self::schema::Layout;
use crate::backend::identity::{IdentityOutcome, Merge, SpoolHeader, Target};
use crate::backend::policy::{self, EnqueueStore, ImportStore, Limit};
use crate::backend::{OpenMode, OpenOptions};
use crate::error::{Error, Result};
use crate::item::{
    AttemptUpdate, BatchResults, ClientSummary, DeadLetter, DeliveredItem, DepthLimit,
    EnqueueOptions, Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck,
    PushState, QueueStats, Record, RecordState, PRUNE_BATCH,
};
use crate::push::receiver::ReceiveTxn;
use crate::queue::{BackendKind, Queue};
use crate::time::{SharedClock, Timestamp};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, DatabaseName, OpenFlags, TransactionBehavior};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
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
        f(&Db {
            conn: &conn,
            path: &self.path,
            action,
            layout: self.layout,
            retained_at_start: Default::default(),
            high_water_at_start: Default::default(),
        })
    }

    /// Run `f` in one read transaction, so that its reads see one state.
    fn snapshot<T>(&self, action: &'static str, f: impl FnOnce(&Db<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Deferred)
            .map_err(|e| Error::sqlite(&self.path, action, e))?;
        let out = f(&Db {
            conn: &tx,
            path: &self.path,
            action,
            layout: self.layout,
            retained_at_start: Default::default(),
            high_water_at_start: Default::default(),
        })?;
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
        let db = Db {
            conn: &tx,
            path: &self.path,
            action,
            layout: self.layout,
            retained_at_start: Default::default(),
            high_water_at_start: Default::default(),
        };
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

/// Check that `path` exists or may be created as `mode` says, and create
/// a new, empty database file (durably: its directory is synced) when it
/// is missing.
fn prepare_file(path: &Path, mode: OpenMode) -> Result<()> {
    let exists = path
        .try_exists()
        .map_err(|e| Error::io(path, "inspect spool", e))?;
    match (exists, mode) {
        (true, OpenMode::CreateNew) => Err(Error::AlreadyExists {
            path: path.to_path_buf(),
        }),
        (true, _) => Ok(()),
        (false, OpenMode::ReadOnly | OpenMode::ReadWrite) => Err(Error::NotFound {
            path: path.to_path_buf(),
        }),
        (false, OpenMode::Create | OpenMode::CreateNew) => {
            // Mode 0600: SQLite gives the -wal and -shm files it creates
            // later the database file's mode.
            match crate::private_file::options()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(_) => sync_parent(path),
                // Another process created it first; open theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if mode == OpenMode::CreateNew {
                        Err(Error::AlreadyExists {
                            path: path.to_path_buf(),
                        })
                    } else {
                        Ok(())
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing_directory(path)),
                Err(e) => Err(Error::io(path, "create spool", e)),
            }
        }
    }
}

/// The directory that holds `path`.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Make a new directory entry durable.
fn sync_parent(path: &Path) -> Result<()> {
    let dir = parent_dir(path);
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, "sync directory", e))
}

/// "Cannot create" (not "not found") for a spool whose directory is
/// missing: SQLite's own `SQLITE_CANTOPEN`.
fn missing_directory(path: &Path) -> Error {
    Error::sqlite(
        path,
        "create spool",
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!(
                "directory {} does not exist",
                parent_dir(path).display()
            )),
        ),
    )
}

/// The name to hand SQLite for the spool at `path`: ":memory:" (and any
/// name starting with ':') means something else to SQLite, but a spool is
/// always the file of that name.
fn file_name(path: &Path) -> PathBuf {
    if path.as_os_str().as_encoded_bytes().starts_with(b":") {
        Path::new(".").join(path)
    } else {
        path.to_path_buf()
    }
}

/// Open the connection, read-only or read-write as `opts.mode` says.
fn connect(path: &Path, opts: &OpenOptions) -> Result<Connection> {
    let err = |e| Error::sqlite(path, "open", e);
    let access = if opts.mode.writable() {
        OpenFlags::SQLITE_OPEN_READ_WRITE
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    };
    // The file exists (prepare_file); never let SQLite create one. The
    // handle's own mutex serialises use of the connection.
    let conn =
        Connection::open_with_flags(file_name(path), access | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(err)?;
    conn.busy_timeout(opts.busy_timeout).map_err(err)?;
    conn.set_prepared_statement_cache_capacity(64);
    if !opts.mode.writable() {
        return Ok(conn);
    }
    // SQLite quietly opens a file it may not write read-only.
    if conn.is_readonly(DatabaseName::Main).map_err(err)? {
        return Err(Error::io(
            path,
            "open for writing",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        ));
    }
    Ok(conn)
}

/// Set up a writable connection: WAL mode (checked), full sync, no
/// checkpoint on close.
fn set_up_writer(conn: &Connection, path: &Path) -> Result<()> {
    let err = |e| Error::sqlite(path, "open", e);
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::io(
            path,
            "use WAL journal mode for",
            std::io::Error::other(format!(
                "the journal mode in force is {mode:?}; spool needs WAL \
                 (it does not work on network file systems)"
            )),
        ));
    }
    // A one-shot process should not checkpoint (and fsync the database)
    // on every close; the WAL is durable and auto-checkpoint stays on.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(err)?;
    Ok(())
}

impl Drop for SqliteQueue {
    fn drop(&mut self) {
        if !self.read_only {
            let conn = self.lock();
            self.keep_wal_small(&conn);
        }
    }
}

/// The bound and overflow policy an enqueue works under.
struct Policy {
    bound: Option<u64>,
    on_full: OnFull,
    /// The retention window: a retained delivered item's key dedups.
    retain: Option<std::time::Duration>,
    /// The depth before the batch (what a refusal reports: the batch
    /// changes nothing then).
    depth_before: u64,
}

impl Policy {
    fn read(db: &Db<'_>, opts: &EnqueueOptions) -> Result<Policy> {
        let bound = match opts.depth_limit {
            DepthLimit::Stored => db.max_depth()?,
            DepthLimit::Override(b) => b,
        };
        Ok(Policy {
            bound,
            on_full: db.on_full()?,
            retain: db.retain()?,
            depth_before: match bound {
                Some(_) => db.pending_count()?,
                None => 0,
            },
        })
    }

    /// Items are stored one by one (coalescing, or eviction under a bound)
    /// rather than in multi-row inserts.
    fn per_item(&self, coalescing: bool) -> bool {
        coalescing || (self.on_full == OnFull::DropOldest && self.bound.is_some())
    }

    /// Store one item that may coalesce or evict (SPEC §9) inside the
    /// enqueue's transaction: [`policy::enqueue_one`].
    fn enqueue_one(&self, db: &Db<'_>, it: &NewItem, now: Timestamp) -> Result<Enqueued> {
        let limit = Limit {
            bound: self.bound,
            on_full: self.on_full,
            depth_before: self.depth_before,
        };
        let mut s = Enqueuing {
            db,
            now,
            retain: self.retain,
        };
        policy::enqueue_one(&mut s, Cow::Borrowed(it), &limit)
    }
}

/// The SQLite spool, inside an enqueue's transaction, as the storage of
/// [`policy::enqueue_one`].
struct Enqueuing<'a, 'c> {
    db: &'a Db<'c>,
    now: Timestamp,
    retain: Option<std::time::Duration>,
}

impl EnqueueStore for Enqueuing<'_, '_> {
    fn key_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        self.db.key_owner(key)
    }

    fn delivered_owner(&mut self, key: &str) -> Result<Option<ItemId>> {
        self.db.delivered_owner(key, self.now, self.retain)
    }

    fn coalesce(&mut self, ck: &str) -> Result<Vec<ItemId>> {
        self.db.coalesce(ck)
    }

    fn depth(&mut self) -> Result<u64> {
        self.db.pending_count()
    }

    fn oldest_evictable(&mut self) -> Result<Option<ItemId>> {
        self.db.oldest_evictable()
    }

    fn evict(&mut self, id: ItemId, reason: &str) -> Result<()> {
        self.db.kill(id, reason, self.now)?;
        self.db.add_evicted(1)
    }

    fn insert(&mut self, it: Cow<'_, NewItem>) -> Result<ItemId> {
        let id = self
            .db
            .high_water()?
            .checked_add(1)
            .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
        self.db.insert_pending(&Item::from_new(id, &it, self.now))?;
        Ok(id)
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
            let policy = Policy::read(db, opts)?;
            db.prune_delivered(now, policy.retain, PRUNE_BATCH)?;
            if policy.per_item(items.iter().any(|i| i.coalesce_key.is_some())) {
                return items
                    .iter()
                    .map(|it| policy.enqueue_one(db, it, now))
                    .collect();
            }
            /// What one item of the batch does.
            enum Plan {
                Dedup(ItemId),
                Delivered(ItemId),
                SameAs(usize),
                Store,
            }
            let mut plans = Vec::with_capacity(items.len());
            let mut first_with_key: HashMap<&str, usize> = HashMap::new();
            for (i, it) in items.iter().enumerate() {
                let plan = if it.key.is_empty() {
                    Plan::Store
                } else if let Some(id) = db.key_owner(&it.key)? {
                    Plan::Dedup(id)
                } else if let Some(id) = db.delivered_owner(&it.key, now, policy.retain)? {
                    Plan::Delivered(id)
                } else if let Some(&j) = first_with_key.get(it.key.as_str()) {
                    Plan::SameAs(j)
                } else {
                    first_with_key.insert(&it.key, i);
                    Plan::Store
                };
                plans.push(plan);
            }
            let fresh = plans.iter().filter(|p| matches!(p, Plan::Store)).count() as u64;
            let bound = match opts.depth_limit {
                _ if fresh == 0 => None,
                DepthLimit::Stored => db.max_depth()?,
                DepthLimit::Override(b) => b,
            };
            if let Some(bound) = bound {
                let depth = db.pending_count()?;
                if depth.saturating_add(fresh) > bound {
                    return Err(Error::QueueFull {
                        max_depth: bound,
                        depth,
                    });
                }
            }
            let mut next = db.high_water()?;
            let mut results: Vec<Enqueued> = Vec::with_capacity(items.len());
            let mut fresh_rows: Vec<(ItemId, &NewItem)> = Vec::with_capacity(fresh as usize);
            for (it, plan) in items.iter().zip(&plans) {
                let result = match *plan {
                    Plan::Dedup(id) => Enqueued {
                        id,
                        deduplicated: true,
                        ..Default::default()
                    },
                    Plan::Delivered(id) => Enqueued::delivered(id),
                    Plan::SameAs(j) => Enqueued {
                        id: results
                            .get(j)
                            .map(|r| r.id)
                            .ok_or_else(|| Error::Internal("batch dedup out of order".into()))?,
                        deduplicated: true,
                        ..Default::default()
                    },
                    Plan::Store => {
                        next = next
                            .checked_add(1)
                            .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
                        fresh_rows.push((next, it));
                        Enqueued {
                            id: next,
                            deduplicated: false,
                            ..Default::default()
                        }
                    }
                };
                results.push(result);
            }
            db.insert_fresh(&fresh_rows, now)?;
            Ok(results)
        })
    }

    fn enqueue_stream(
        &self,
        items: &mut dyn Iterator<Item = Result<NewItem>>,
        opts: &EnqueueOptions,
    ) -> Result<BatchResults> {
        let now = self.clock.now();
        self.write("enqueue into", |db| {
            // One transaction, filled as the items come: fresh rows go to
            // the table FRESH_ROWS_PER_INSERT at a time, so a key repeated
            // within the rows not inserted yet is looked up among them.
            let policy = Policy::read(db, opts)?;
            db.prune_delivered(now, policy.retain, PRUNE_BATCH)?;
            let bound = policy.bound;
            let evicting = policy.per_item(false);
            let mut depth = policy.depth_before;
            // Nothing was inserted yet: the mark the write's first read
            // found (a prune only deletes records below it).
            let mut next = db.high_water_at_start()?;
            let mut results = BatchResults::default();
            let mut fresh: u64 = 0;
            let mut chunk: Vec<(ItemId, NewItem)> = Vec::with_capacity(db::FRESH_ROWS_PER_INSERT);
            let mut chunk_keys: HashMap<String, ItemId> = HashMap::new();
            let flush = |chunk: &mut Vec<(ItemId, NewItem)>,
                         keys: &mut HashMap<String, ItemId>|
             -> Result<()> {
                let rows: Vec<(ItemId, &NewItem)> =
                    chunk.iter().map(|(id, it)| (*id, it)).collect();
                db.insert_fresh(&rows, now)?;
                chunk.clear();
                keys.clear();
                Ok(())
            };
            for item in items {
                let item = crate::item::checked_item(item?)?;
                if evicting || item.coalesce_key.is_some() {
                    // Coalescing and eviction look at what is stored: store
                    // what came before first.
                    flush(&mut chunk, &mut chunk_keys)?;
                    let e = policy.enqueue_one(db, &item, now)?;
                    next = next.max(e.id);
                    results.push(e);
                    if bound.is_some() {
                        depth = db.pending_count()?;
                        fresh = 0;
                    }
                    crate::debug::crash_point("batch-item");
                    continue;
                }
                if !item.key.is_empty() {
                    let owner = match chunk_keys.get(&item.key) {
                        Some(id) => Some(*id),
                        None => db.key_owner(&item.key)?,
                    };
                    if let Some(id) = owner {
                        results.push(Enqueued {
                            id,
                            deduplicated: true,
                            ..Default::default()
                        });
                        continue;
                    }
                    if let Some(id) = db.delivered_owner(&item.key, now, policy.retain)? {
                        results.push(Enqueued::delivered(id));
                        continue;
                    }
                }
                fresh += 1;
                if let Some(bound) = bound {
                    if depth.saturating_add(fresh) > bound {
                        return Err(Error::QueueFull {
                            max_depth: bound,
                            depth: policy.depth_before,
                        });
                    }
                }
                next = next
                    .checked_add(1)
                    .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
                if !item.key.is_empty() {
                    chunk_keys.insert(item.key.clone(), next);
                }
                chunk.push((next, item));
                results.push(Enqueued {
                    id: next,
                    deduplicated: false,
                    ..Default::default()
                });
                if chunk.len() == db::FRESH_ROWS_PER_INSERT {
                    flush(&mut chunk, &mut chunk_keys)?;
                }
                crate::debug::crash_point("batch-item");
            }
            flush(&mut chunk, &mut chunk_keys)?;
            Ok(results)
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
                for &id in ids {
                    if let Some(seq) = db.push_seq_of(id)? {
                        return Err(Error::InvalidInput(format!(
                            "item {id} is in flight to the push receiver (sequence {seq}); it cannot be held until the receiver acknowledges it"
                        )));
                    }
                }
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
        if !self.layout.is_spool() {
            return Ok(None);
        }
        self.read("find the next retry time in", |db| {
            // The partial index on next_retry_at answers this by a range
            // scan from `now`, stopping at the first row not held.
            db.conn
                .query_row(
                    "SELECT next_retry_at FROM morph_offline_queue INDEXED BY ix_queue_retry \
                     WHERE next_retry_at > ?1 AND held = 0 ORDER BY next_retry_at LIMIT 1",
                    [now.as_millis()],
                    |r| r.get::<_, i64>(0),
                )
                .map(|ms| Some(Timestamp::from_millis(ms)))
                .or_else(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => Ok(None),
                    e => Err(db.err(e)),
                })
        })
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
        self.write("set the depth bound of", |db| {
            let done = match bound {
                Some(b) => schema::set_meta(db.conn, "max_depth", &b.to_string()),
                None => db
                    .conn
                    .execute("DELETE FROM spool_meta WHERE key = 'max_depth'", [])
                    .map(|_| ()),
            };
            done.map_err(|e| db.err(e))
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
        self.write("requeue dead letters in", |db| {
            // The checks of State::check_requeue, in its order, before
            // anything moves.
            let mut seen_ids = HashSet::new();
            let mut seen_keys: HashMap<String, ItemId> = HashMap::new();
            let mut count = 0u64;
            for &id in ids {
                let Some(key) = db.dead_key(id)? else {
                    continue;
                };
                if !seen_ids.insert(id) {
                    continue;
                }
                count += 1;
                if key.is_empty() {
                    continue;
                }
                if let Some(other) = db.key_owner(&key)? {
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
            if let Some(bound) = db.max_depth()? {
                let depth = db.pending_count()?;
                if count > 0 && depth.saturating_add(count) > bound {
                    return Err(Error::QueueFull {
                        max_depth: bound,
                        depth,
                    });
                }
            }
            ids.iter().map(|&id| db.revive(id)).collect()
        })
    }

    fn purge(&self, ids: &[ItemId]) -> Result<Vec<bool>> {
        self.write("purge dead letters from", |db| {
            ids.iter().map(|&id| db.remove_dead(id)).collect()
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
        self.write("import into", |db| import_records(db, records, each, None))
    }

    fn stats(&self, now: Timestamp) -> Result<QueueStats> {
        self.snapshot("read stats of", |db| db.stats(now))
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
        self.write("number items for push in", |db| {
            let mut push = db.push_state()?;
            let mut out = Vec::new();
            for &id in ids {
                let next = push
                    .last_assigned
                    .checked_add(1)
                    .ok_or_else(|| Error::Internal("push sequence numbers exhausted".into()))?;
                if db.assign_seq(id, next)? {
                    push.last_assigned = next;
                    out.push((id, next));
                }
            }
            if !out.is_empty() {
                db.set_push_counters(push.last_assigned, push.acked)?;
            }
            Ok(out)
        })
    }

    fn push_ack(&self, last_seq: u64, rejected: &[(u64, String)]) -> Result<PushAck> {
        let now = self.clock.now();
        self.write("record a push acknowledgement in", |db| {
            let push = db.push_state()?;
            let last = last_seq.min(push.last_assigned);
            let mut ack = PushAck {
                acked: push.acked.max(last),
                ..PushAck::default()
            };
            if last <= push.acked {
                return Ok(ack);
            }
            let retain = db.retain()?;
            for (id, seq) in db.in_flight_ids(push.acked, last)? {
                match rejected.iter().find(|(s, _)| *s == seq) {
                    Some((_, reason)) => {
                        db.kill(id, reason, now)?;
                        ack.rejected.push(id);
                    }
                    None => {
                        if retain.is_some() {
                            db.retain_delivered(id, Evidence::Push(last), now)?;
                        }
                        db.remove_acked(id)?;
                        ack.delivered.push(id);
                    }
                }
            }
            db.prune_delivered(now, retain, PRUNE_BATCH)?;
            db.drop_skips_through(last)?;
            db.set_push_counters(push.last_assigned, last)?;
            Ok(ack)
        })
    }

    fn regenerate_uuid(&self) -> Result<String> {
        self.write("give a new uuid to", |db| {
            let uuid = uuid::Uuid::new_v4().to_string();
            schema::set_meta(db.conn, "uuid", &uuid).map_err(|e| db.err(e))?;
            // In number order, each new number is at most its old one and
            // below every number still to be changed: the unique index
            // never sees two items with one number.
            let in_flight = db.in_flight_ids(0, u64::MAX)?;
            for (n, (id, _)) in in_flight.iter().enumerate() {
                db.renumber(*id, n as u64 + 1)?;
            }
            db.drop_skips_through(u64::MAX)?;
            db.set_push_counters(in_flight.len() as u64, 0)?;
            Ok(uuid)
        })
    }

    fn receive(&self, f: &mut dyn FnMut(&mut dyn ReceiveTxn) -> Result<()>) -> Result<()> {
        let now = self.clock.now();
        self.write("receive a push into", |db| {
            let mut rx = receive::SqliteReceive::new(db, now);
            f(&mut rx)
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
        })
    }
}

/// Store `records` in the open transaction through
/// [`policy::import_records`] (the transaction makes it all-or-nothing).
/// With `merge`, pending records may keep their push numbers (see
/// [`crate::backend::identity`]).
fn import_records(
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

#[cfg(test)]
mod file_name_tests {
    use super::*;

    #[test]
    fn names_sqlite_reads_specially_become_relative_paths() {
        assert_eq!(
            file_name(Path::new(":memory:")),
            PathBuf::from("./:memory:")
        );
        assert_eq!(file_name(Path::new("q.db")), PathBuf::from("q.db"));
        assert_eq!(
            file_name(Path::new("/tmp/:memory:")),
            PathBuf::from("/tmp/:memory:")
        );
    }
}
