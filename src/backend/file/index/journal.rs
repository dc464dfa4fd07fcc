//! The index's transactions. A writer's connection journals to SQLite's
//! rollback journal in a file, `<spool>.idx-journal`, which it keeps
//! (`journal_mode=PERSIST`: a commit zeroes its header instead of
//! deleting it, which would cost a create and an unlink per write). A
//! writer killed in the middle of a commit leaves it hot, and the next
//! writer to open the index plays it back, as SQLite always does. A
//! reader's connection never commits: its journal stays in memory.

use super::Index;
use crate::error::Result;
use std::path::{Path, PathBuf};

/// SQLite's rollback journal of the index at `index`: `<index>-journal`.
pub(crate) fn journal_path(index: &Path) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push("-journal");
    PathBuf::from(s)
}

/// Whether the index at `index` has a hot journal, by SQLite's rule: its
/// first byte is not zero (a finished transaction zeroes the header).
pub(crate) fn journal_is_hot(index: &Path) -> bool {
    let mut first = [0u8; 1];
    std::fs::File::open(journal_path(index))
        .and_then(|f| std::os::unix::fs::FileExt::read_at(&f, &mut first, 0))
        .is_ok_and(|n| n == 1 && first[0] != 0)
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
    /// writer's connection: where [`Index::commit`] has a crash point). Every change goes
    /// through [`Index::applier`] or [`Index::set_file_row`], which call
    /// it.
    pub fn will_write(&self) {
        if !self.read_only && self.shared.is_some() {
            debug_assert!(
                !self.conn.is_autocommit(),
                "a change to the shared index outside a transaction"
            );
            self.changed.set(true);
        }
    }
}
