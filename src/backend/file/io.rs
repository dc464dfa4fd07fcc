//! The I/O seam of the NDJSON backend.
//!
//! Every write, sync, truncate and rename the backend makes on its files
//! goes through a [`FileIo`]. Production code uses [`RealIo`]; tests pass
//! their own implementation (through [`super::FileQueue::open_with_io`])
//! to force short writes, write errors and fsync failures and check that
//! nothing is reported committed that was not — the role of the
//! reference's `FileIoOps`.

use std::fmt::Debug;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// The raw file operations the NDJSON backend performs when it changes a
/// file. Reads are not part of the seam.
pub trait FileIo: Send + Sync + Debug {
    /// One `write(2)`: may write fewer bytes than asked.
    fn write(&self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        file.write(buf)
    }

    /// Make the file's data durable (`fdatasync`).
    fn sync(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    /// Cut the file to `len` bytes.
    fn truncate(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    /// Atomically replace `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    /// Make a directory's entries durable (after a create or a rename).
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// The real system calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealIo;

impl FileIo for RealIo {}

/// Write all of `buf` through `io`, one `write` at a time. A write that
/// makes no progress is an error ([`io::ErrorKind::WriteZero`]).
pub(crate) fn write_all(io: &dyn FileIo, file: &mut File, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match io.write(file, buf) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short write: the file system accepted no more bytes",
                ))
            }
            Ok(n) => buf = &buf[n.min(buf.len())..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The directory that holds `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}
