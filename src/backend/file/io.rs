//! The I/O seam of the NDJSON backend.
//!
//! Every read, write, copy, sync, truncate and rename the backend makes on
//! its spool files (the main and dead-letter files) goes through a
//! [`FileIo`]. Production code uses [`RealIo`]; tests pass their own
//! implementation (through [`super::FileQueue::open_with_io`]) to force
//! short writes, write errors and fsync failures and check that nothing is
//! reported committed that was not — the role of the reference's
//! `FileIoOps` — and to count the bytes an operation reads, which must not
//! grow with the spool. (The derived index, a SQLite database, does its
//! own I/O.)

use std::fmt::Debug;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

/// The raw file operations the NDJSON backend performs on its files.
pub trait FileIo: Send + Sync + Debug {
    /// One positioned read (`pread(2)`): may read fewer bytes than asked.
    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(file, buf, offset)
    }

    /// One `write(2)`: may write fewer bytes than asked.
    fn write(&self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        file.write(buf)
    }

    /// Make the file's data durable (`fdatasync`).
    fn sync(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    /// Start writing `len` bytes at `offset` of the file back to the disk
    /// without waiting for them (`sync_file_range(2)` with
    /// `SYNC_FILE_RANGE_WRITE`): a hint, so that a later [`FileIo::sync`]
    /// has less left to wait for. Durability still comes from that sync
    /// alone; errors are ignored.
    fn start_writeback(&self, file: &File, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (
            libc::off64_t::try_from(offset),
            libc::off64_t::try_from(len),
        ) else {
            return;
        };
        // SAFETY: the descriptor is open while borrowed; the call only
        // reads its arguments.
        let _ = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
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

    /// Copy up to `len` bytes at `offset` of `from` to `to` at its current
    /// position (compaction copies kept lines this way, inside the kernel
    /// where it can): may copy fewer.
    fn copy(&self, from: &File, offset: u64, to: &mut File, len: usize) -> io::Result<usize> {
        copy_range(from, offset, to, len)
    }
}

/// One `copy_file_range(2)`, or a read and a write where the file system
/// cannot do it.
fn copy_range(from: &File, offset: u64, to: &mut File, len: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let mut off_in = libc::loff_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: both descriptors are open while borrowed; `off_in` outlives
    // the call and the output offset is the file's own (null).
    let n = unsafe {
        libc::copy_file_range(
            from.as_raw_fd(),
            &mut off_in,
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            0,
        )
    };
    if let Ok(n) = usize::try_from(n) {
        return Ok(n);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOSYS | libc::EXDEV | libc::EINVAL | libc::EOPNOTSUPP | libc::EPERM) => {
            let mut buf = vec![0; len.min(1 << 20)];
            let n = from.read_at(&mut buf, offset)?;
            to.write(&buf[..n])
        }
        _ => Err(e),
    }
}

/// Copy all `len` bytes at `offset` of `from` to `to` through `io`. A
/// copy that makes no progress (the source ended early) is an error.
pub(crate) fn copy_all(
    io: &dyn FileIo,
    from: &File,
    mut offset: u64,
    to: &mut File,
    mut len: usize,
) -> io::Result<()> {
    while len > 0 {
        match io.copy(from, offset, to, len) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                offset += n as u64;
                len -= n.min(len);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// One read of `buf` from `offset` of `file` through `io` (0 at the end of
/// the file), tried again when a signal interrupts it.
pub(crate) fn read_some(
    io: &dyn FileIo,
    file: &File,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    loop {
        match io.read_at(file, buf, offset) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Fill `buf` from `offset` of `file` through `io`; fewer bytes than asked
/// (the file ended) is [`io::ErrorKind::UnexpectedEof`].
pub(crate) fn read_exact_at(
    io: &dyn FileIo,
    file: &File,
    mut buf: &mut [u8],
    mut offset: u64,
) -> io::Result<()> {
    while !buf.is_empty() {
        match read_some(io, file, buf, offset)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => {
                let n = n.min(buf.len());
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

/// A file read forward from an offset, up to an end, through the seam.
pub(crate) struct ReadFrom<'a> {
    pub io: &'a dyn FileIo,
    pub file: &'a File,
    pub pos: u64,
    pub end: u64,
}

impl io::Read for ReadFrom<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = read_some(self.io, self.file, &mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
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
