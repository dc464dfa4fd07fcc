//! How the index's writes are journaled: a writer's transactions keep
//! SQLite's rollback journal in a file (`<index>-journal`, not synced:
//! the index is derived, and one last written before a reboot is
//! rebuilt), so that a writer killed in the middle of its commit leaves a
//! hot journal the next writer plays back, as SQLite always does. The
//! file stays between transactions (`PERSIST`: its header is zeroed as
//! each ends, cheaper than creating and deleting it every time; at most
//! 1 MiB of it is kept). A reader's connection never commits: its
//! journal stays in memory and is rolled back.

use super::Index;
use crate::error::Result;
use std::path::{Path, PathBuf};

/// SQLite's rollback journal of the index at `index`: `<index>-journal`.
pub(crate) fn journal_path(index: &Path) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push("-journal");
    PathBuf::from(s)
}

/// Whether the index at `index` has a hot rollback journal: one a writer
/// killed in the middle of a transaction left, which only a writer may
/// play back. A writer's journal persists between its transactions
/// (`PRAGMA journal_mode = PERSIST`), its header zeroed as each one ends:
/// only a journal whose header still holds SQLite's magic number is hot.
pub(crate) fn journal_hot(index: &Path) -> bool {
    const MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];
    let Ok(f) = std::fs::File::open(journal_path(index)) else {
        return false;
    };
    let mut b = [0u8; 8];
    matches!(std::os::unix::fs::FileExt::read_at(&f, &mut b, 0), Ok(8) if b == MAGIC)
}

/// The write mark older versions of spool kept beside the index at
/// `index` (`<index>-dirty`; an index of theirs has another version and is
/// rebuilt): removed when an index is put in place.
pub(crate) fn legacy_mark_path(index: &Path) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push("-dirty");
    PathBuf::from(s)
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
    /// writer's connection): the crash point `index-commit` is reached
    /// only by a commit that writes. Every change goes through
    /// [`Index::applier`] or [`Index::set_file_row`], which call it.
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
