//! How the index's writes are journaled: SQLite's write-ahead log
//! (`<index>-wal`, with its shared-memory index `<index>-shm`), kept in
//! place between processes.
//!
//! A transaction appends the pages it changes to the log and commits with
//! a frame that says so; the index file itself is written only when the
//! log is checkpointed (by the writer that closes the index last, or when
//! the log grows past SQLite's threshold). A writer killed at any point
//! leaves either its whole transaction in the log or none of it: SQLite
//! checks every frame's checksum when it next opens the index, and drops
//! an unfinished transaction. So a killed writer costs nothing: the index
//! is at most behind the files and is caught up from their tails. Nothing
//! is synced (`synchronous=OFF`): a power loss may lose what the log held,
//! which is why an index last written in another boot is rebuilt (see
//! [`super::Index::check`]).

use super::Index;
use crate::error::{Error, Result};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// A file beside the index at `index`: `<index><suffix>`.
fn beside(index: &Path, suffix: &str) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// The files that belong to the index at `index` besides the index file
/// itself: its write-ahead log and shared-memory index, and what index
/// version 8 and older left (a rollback journal, the write mark).
pub(crate) fn side_paths(index: &Path) -> [PathBuf; 4] {
    ["-wal", "-shm", "-journal", "-dirty"].map(|s| beside(index, s))
}

/// The most bytes of log a writer keeps once it has been checkpointed
/// (SQLite's `journal_size_limit`; a larger transaction grows it for its
/// time).
const LOG_KEPT: i64 = 1 << 20;

/// Put the shared index on `conn` in write-ahead-log mode (a writer's
/// connection; the mode is recorded in the index file) and keep the log
/// and its shared-memory file when the connection closes, so that a
/// reader without write permission in the directory can still open the
/// index (SQLite needs both files to exist for a read-only connection).
pub(super) fn use_log(conn: &Connection) -> std::result::Result<(), String> {
    let got: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(|e| format!("its journal mode cannot be set: {e}"))?;
    if !got.eq_ignore_ascii_case("wal") {
        return Err(format!("its journal mode cannot be set to WAL (got {got})"));
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous = OFF; PRAGMA cache_size = -8000; PRAGMA journal_size_limit = {LOG_KEPT}"
    ))
    .map_err(|e| format!("it cannot be set up: {e}"))?;
    let mut persist: std::ffi::c_int = 1;
    // SAFETY: the handle is the open connection's and is used by this
    // thread only while `conn` is borrowed; the schema name is a
    // NUL-terminated literal; SQLITE_FCNTL_PERSIST_WAL reads and writes
    // one int, which `persist` is and outlives the call.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut persist as *mut std::ffi::c_int).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(format!("its log cannot be kept (SQLite error {rc})"));
    }
    Ok(())
}

/// A reader's connection (`conn`): never writes the index file. It
/// checkpoints nothing when it closes, and keeps whatever it applies to
/// catch up in memory (no page spills to the log before a commit, which a
/// reader never makes). An index in rollback-journal mode (just built,
/// before a writer opened it) is read with the journal in memory.
pub(super) fn read_only_setup(
    conn: &Connection,
    no_writes: bool,
) -> std::result::Result<(), String> {
    let bad = |e: rusqlite::Error| format!("it cannot be read: {e}");
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .map_err(bad)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .map_err(bad)?;
    if !mode.eq_ignore_ascii_case("wal") && !no_writes {
        conn.query_row("PRAGMA journal_mode = memory", [], |r| {
            r.get::<_, String>(0)
        })
        .map_err(bad)?;
    }
    conn.execute_batch("PRAGMA cache_spill = OFF").map_err(bad)
}

impl Index {
    /// Start a transaction: `IMMEDIATE` (the write lock at once) for a
    /// writer of the shared index, deferred otherwise.
    pub fn begin(&self, immediate: bool) -> Result<()> {
        let sql = if immediate && !self.no_writes {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN"
        };
        self.boot_written.set(false);
        self.conn
            .execute_batch(sql)
            .map_err(self.err("begin a transaction on"))
    }

    /// Commit (for a read-only connection: roll back).
    pub fn commit(&self) -> Result<()> {
        if self.read_only {
            return self.rollback();
        }
        if self.changed.replace(false) {
            crate::debug::crash_point("index-commit");
        }
        self.conn
            .execute_batch("COMMIT")
            .map_err(self.err("commit to"))
    }

    /// Roll back, when a transaction is open.
    pub fn rollback(&self) -> Result<()> {
        self.changed.set(false);
        self.boot_written.set(false);
        if self.conn.is_autocommit() {
            return Ok(());
        }
        self.conn
            .execute_batch("ROLLBACK")
            .map_err(self.err("roll back"))
    }

    /// Note a change to the shared index in the running transaction (a
    /// writer's connection). Every change goes through [`Index::applier`]
    /// or [`Index::set_file_row`], which call it.
    pub fn will_write(&self) {
        if !self.read_only && self.shared.is_some() {
            debug_assert!(
                !self.conn.is_autocommit(),
                "a change to the shared index outside a transaction"
            );
            self.changed.set(true);
        }
    }

    /// Write everything the log holds into the index file and empty the
    /// log (a writer's connection, outside a transaction, with the spool
    /// locked exclusively): afterwards the index file alone holds the
    /// index, and may be copied. Fails when a connection of another
    /// process kept the checkpoint from finishing.
    pub fn checkpoint(&self) -> Result<()> {
        let (busy, log, done): (i64, i64, i64) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(self.err("checkpoint"))?;
        if busy != 0 || log != done {
            return Err(Error::Internal(format!(
                "{}: the index's log could not be checkpointed ({done} of {log} pages)",
                self.path.display()
            )));
        }
        Ok(())
    }
}
