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
use crate::time::Timestamp;
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A held serve lock; dropping it releases the lock.
#[derive(Debug)]
pub struct ServeLock {
    file: File,
    path: PathBuf,
}

impl ServeLock {
    /// The lock file of the spool at `spool`.
    pub fn lock_path(spool: &Path) -> PathBuf {
        companion(spool, "serve.lock")
    }

    /// Take the serve lock of `spool` without waiting. Fails with
    /// [`Error::ServeLocked`] naming the holder.
    pub fn acquire(spool: &Path) -> Result<ServeLock> {
        let path = Self::lock_path(spool);
        let mut file = crate::private_file::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(&path, "open the serve lock", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.seek(SeekFrom::Start(0));
                let _ = (&file).take(512).read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(Error::ServeLocked {
                    path: spool.to_path_buf(),
                    holder: if holder.is_empty() {
                        "holder unknown".into()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(Error::io(&path, "lock", e)),
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown host".into());
        let line = format!(
            "spool serve, pid {} on {} since {}\n",
            std::process::id(),
            host,
            Timestamp::now()
        );
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = file.write_all(line.as_bytes());
        Ok(ServeLock { file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ServeLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
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
