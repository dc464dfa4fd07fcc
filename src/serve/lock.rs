//! One `spool serve` per NDJSON spool.
//!
//! Two servers on one NDJSON spool would each keep their own image of
//! the file between requests; the file lock around each write keeps the
//! bytes whole, but the receiver's answers (`last_seq`, dedup) must come
//! from one process. So a server on an NDJSON spool holds an advisory
//! `flock` on the companion file `<spool>.serve.lock` for its whole run,
//! the way replay holds `<spool>.replay.lock`: the kernel releases it
//! however the process ends, the file (mode 0600) is never deleted, and
//! it names the holder for the error a second server reports. SQLite
//! spools need no such lock: every request is one transaction that
//! SQLite serialises across processes.

use crate::backend::companion;
use crate::error::{Error, Result};
use crate::holder_lock::HolderLock;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A held serve lock; dropping it releases the lock.
#[derive(Debug)]
pub struct ServeLock(HolderLock);

impl ServeLock {
    /// The lock file of the spool at `spool`.
    pub fn lock_path(spool: &Path) -> PathBuf {
        companion(spool, "serve.lock")
    }

    /// Take the serve lock of `spool` without waiting. Fails with
    /// [`Error::ServeLocked`] naming the holder.
    pub fn acquire(spool: &Path) -> Result<ServeLock> {
        let path = Self::lock_path(spool);
        match HolderLock::acquire(
            &path,
            Duration::ZERO,
            "spool serve, ",
            "open the serve lock",
        )? {
            Ok(lock) => Ok(ServeLock(lock)),
            Err(holder) => Err(Error::ServeLocked {
                path: spool.to_path_buf(),
                holder,
            }),
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_server_is_refused_with_the_first_named() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("q.ndjson");
        let first = ServeLock::acquire(&spool).unwrap();
        match ServeLock::acquire(&spool).unwrap_err() {
            Error::ServeLocked { holder, .. } => {
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                )
            }
            other => panic!("unexpected {other}"),
        }
        drop(first);
        ServeLock::acquire(&spool).unwrap();
    }
}
