//! A lock held for a whole run that names its holder: an advisory `flock`
//! on a companion file of the spool (`<spool>.replay.lock`,
//! `<spool>.serve.lock`). The kernel releases it when the holder exits,
//! however it exits, so a crashed run never leaves a stale lock. The file
//! (mode 0600) is never deleted (deleting lock files races); while held it
//! holds a line describing the holder, which a process that cannot take
//! the lock reports.

use crate::error::{Error, Result};
use crate::time::Timestamp;
use std::fs::{File, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A held lock; dropping it empties the file and releases the lock.
#[derive(Debug)]
pub struct HolderLock {
    file: File,
    path: PathBuf,
}

impl HolderLock {
    /// Take the lock on `path` (created if missing), waiting up to `wait`
    /// for its holder to let go, and write `who` with this process's pid,
    /// host and the time into it. `Ok(Err(holder))` when another process
    /// still holds it: the line it wrote, or "holder unknown". `opening`
    /// says what failed when the file cannot be opened.
    pub fn acquire(
        path: &Path,
        wait: Duration,
        who: &str,
        opening: &'static str,
    ) -> Result<std::result::Result<HolderLock, String>> {
        let mut file = crate::private_file::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, opening, e))?;
        let deadline = Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(TryLockError::WouldBlock) => {
                    let mut holder = String::new();
                    let _ = file.seek(SeekFrom::Start(0));
                    let _ = (&file).take(512).read_to_string(&mut holder);
                    let holder = holder.trim();
                    return Ok(Err(if holder.is_empty() {
                        "holder unknown".into()
                    } else {
                        holder.to_string()
                    }));
                }
                Err(TryLockError::Error(e)) => return Err(Error::io(path, "lock", e)),
            }
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown host".into());
        let line = format!(
            "{who}pid {} on {host} since {}\n",
            std::process::id(),
            Timestamp::now()
        );
        let _ = file.set_len(0);
        let _ = file.seek(SeekFrom::Start(0));
        let _ = file.write_all(line.as_bytes());
        Ok(Ok(HolderLock {
            file,
            path: path.to_path_buf(),
        }))
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for HolderLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}
