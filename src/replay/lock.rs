//! One replay per spool at a time, across processes.
//!
//! The lock is an advisory `flock` on the companion file
//! `<spool>.replay.lock`, held for the whole run. The kernel releases it
//! when the holder exits, however it exits, so a crashed replay never
//! leaves a stale lock. The file is never deleted (deleting lock files
//! races); it holds a line describing the current holder, which a waiting
//! process reports. Enqueues do not take this lock and keep working
//! during a replay.

use crate::backend::companion;
use crate::error::{Error, Result};
use crate::holder_lock::HolderLock;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A held replay lock; dropping it releases the lock.
#[derive(Debug)]
pub struct ReplayLock(HolderLock);

impl ReplayLock {
    /// The lock file of the spool at `spool`.
    pub fn lock_path(spool: &Path) -> PathBuf {
        companion(spool, "replay.lock")
    }

    /// Take the replay lock of `spool`, waiting up to `wait` for another
    /// replay to finish. Fails with [`Error::ReplayLocked`] naming the
    /// holder.
    pub fn acquire(spool: &Path, wait: Duration) -> Result<ReplayLock> {
        let path = Self::lock_path(spool);
        match HolderLock::acquire(&path, wait, "", "open the replay lock")? {
            Ok(lock) => Ok(ReplayLock(lock)),
            Err(holder) => Err(Error::ReplayLocked {
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
    fn second_holder_is_refused_with_the_first_named() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("q.db");
        let first = ReplayLock::acquire(&spool, Duration::ZERO).unwrap();
        let err = ReplayLock::acquire(&spool, Duration::from_millis(50)).unwrap_err();
        match err {
            Error::ReplayLocked { holder, .. } => {
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                )
            }
            other => panic!("unexpected {other}"),
        }
        drop(first);
        ReplayLock::acquire(&spool, Duration::ZERO).unwrap();
    }
}
