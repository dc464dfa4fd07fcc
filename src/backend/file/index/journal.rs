//! How the index's writes are journaled: SQLite's rollback journal in a
//! file for bulk writes, in memory for small ones, and the write mark that
//! tells a small write killed in the middle of its commit (see
//! [`mark_path`]).

use super::Index;
use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// SQLite's rollback journal of the index at `index`: `<index>-journal`.
pub(crate) fn journal_path(index: &Path) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push("-journal");
    PathBuf::from(s)
}

/// The write mark of the index at `index`: `<index>-dirty`, one byte,
/// `0` while the index file holds a committed state and `1` while a
/// writer commits a change whose rollback journal is in memory.
///
/// A writer's connection keeps the rollback journal of a small write in
/// memory (see [`Index::use_file_journal`]), and SQLite writes its pages
/// to the index file only as it commits: a writer killed in the middle
/// of that commit leaves no journal to roll them back, and the mark
/// tells. An index whose mark is not `0` (or missing) is not used: a
/// writer rebuilds it, a reader builds a private one. A writer killed
/// before or after its commit leaves the mark clear and the index valid
/// (at most behind the files); a bulk write, journaled to a file, never
/// sets it.
pub(crate) fn mark_path(index: &Path) -> PathBuf {
    let mut s = index.as_os_str().to_owned();
    s.push("-dirty");
    PathBuf::from(s)
}

/// Whether the write mark `mark` says the index holds a committed state.
pub(super) fn mark_clear(mark: &File) -> std::io::Result<bool> {
    let mut b = [0u8; 2];
    let n = std::os::unix::fs::FileExt::read_at(mark, &mut b, 0)?;
    Ok(n == 1 && b[0] == b'0')
}

/// Write `b` over the mark.
fn write_mark(mark: &File, b: u8) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(mark, &[b], 0)
}

/// Write the mark at `index` clear (after a built index is put in place):
/// the index file holds a committed state. A new mark gets the index
/// file's permission bits, so that whoever may read the index may read
/// its mark.
pub(crate) fn clear_mark(index: &Path) -> std::io::Result<()> {
    let mut f = crate::private_file::create_replacement(&mark_path(index), index)?;
    std::io::Write::write_all(&mut f, b"0")
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

    /// Commit (for a read-only connection: roll back). A change with its
    /// journal in memory is committed under the write mark (see
    /// [`mark_path`]): set before SQLite writes the first page to the
    /// file, cleared after the commit. (A failed commit leaves it set:
    /// the next command rebuilds the index.)
    pub fn commit(&self) -> Result<()> {
        if self.read_only {
            return self.rollback();
        }
        let changed = self.changed.replace(false);
        if let (true, false, Some(mark)) = (changed, self.file_journal.get(), &self.mark) {
            write_mark(mark, b'1').map_err(|e| Error::io(mark_path(&self.path), "write", e))?;
            self.marked.set(true);
        }
        if changed {
            crate::debug::crash_point("index-commit");
        }
        self.conn
            .execute_batch("COMMIT")
            .map_err(self.err("commit to"))?;
        if let (true, Some(mark)) = (self.marked.get(), &self.mark) {
            write_mark(mark, b'0').map_err(|e| Error::io(mark_path(&self.path), "write", e))?;
            self.marked.set(false);
        }
        Ok(())
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
    /// writer's connection; see [`Index::commit`]). Every change goes
    /// through [`Index::applier`] or [`Index::set_file_row`], which call
    /// it.
    pub fn will_write(&self) {
        if !self.read_only && self.mark.is_some() {
            debug_assert!(
                !self.conn.is_autocommit(),
                "a change to the shared index outside a transaction"
            );
            self.changed.set(true);
        }
    }

    /// Keep the rollback journal of the transaction about to begin in a
    /// file (`on`), or in memory. Called outside a transaction, on a
    /// writer's connection (a reader's never writes: its journal stays in
    /// memory).
    ///
    /// In memory, a transaction costs no journal file (a create, three
    /// writes per changed page, an unlink), but SQLite holds the original
    /// of every page the transaction changes in memory, whatever their
    /// number: only calls that change a bounded number of rows use it
    /// (see `Access::Small` in the backend). A bulk change journals to a
    /// file, which a writer killed in the middle leaves behind for the
    /// next writer to play back, as SQLite always did.
    pub fn use_file_journal(&self, on: bool) -> Result<()> {
        if self.read_only || self.mark.is_none() || self.file_journal.get() == on {
            return Ok(());
        }
        let want = if on { "delete" } else { "memory" };
        let got: String = self
            .conn
            .query_row(&format!("PRAGMA journal_mode = {want}"), [], |r| r.get(0))
            .map_err(self.err("set the journal mode of"))?;
        // In memory, no page may reach the file before the commit (which
        // the write mark covers); with the journal in a file, pages spill
        // when the cache is full, so that memory stays bounded.
        self.conn
            .execute_batch(if on {
                "PRAGMA cache_spill = ON"
            } else {
                "PRAGMA cache_spill = OFF"
            })
            .map_err(self.err("set the cache spill of"))?;
        if !got.eq_ignore_ascii_case(want) {
            return Err(Error::Internal(format!(
                "{}: the journal mode could not be set to {want} (got {got})",
                self.path.display()
            )));
        }
        self.file_journal.set(on);
        Ok(())
    }

    /// Whether the running transaction journals to a file.
    pub fn file_journal(&self) -> bool {
        self.file_journal.get()
    }

    /// Whether the shared index's write mark is clear (always true for a
    /// private index): checked before a kept connection is used again.
    pub fn mark_is_clear(&self) -> bool {
        match &self.mark {
            Some(m) => !self.marked.get() && mark_clear(m).unwrap_or(false),
            None => true,
        }
    }
}
