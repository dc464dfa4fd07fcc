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
use crate::time::Timestamp;
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A held replay lock; dropping it releases the lock.
#[derive(Debug)]
pub struct ReplayLock {
    file: File,
    path: PathBuf,
}

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
        let mut file = crate::private_file::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, "open the replay lock", e))?;
        let deadline = Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    if Instant::now() >= deadline {
                        let mut holder = String::new();
                        let _ = file.seek(SeekFrom::Start(0));
                        let _ = (&file).take(512).read_to_string(&mut holder);
                        let holder = holder.trim();
                        return Err(Error::ReplayLocked {
                            path: spool.to_path_buf(),
                            holder: if holder.is_empty() {
                                "holder unknown".into()
                            } else {
                                holder.to_string()
                            },
                        });
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::Error(e)) => {
                    return Err(Error::io(&path, "lock", e));
                }
            }
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown host".into());
        let line = format!(
            "pid {} on {} since {}\n",
            std::process::id(),
            host,
            Timestamp::now()
        );
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = file.write_all(line.as_bytes());
        Ok(ReplayLock { file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ReplayLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
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
