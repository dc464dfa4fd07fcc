//! Where an export goes: a writer the caller owns (stdout), or a file that
//! is replaced atomically.
//!
//! A file destination is written to a temporary file in the same
//! directory, flushed, `fsync`ed, renamed over the target, and the
//! directory is `fsync`ed — so a reader of the target sees either the old
//! file or the complete new one, never a half-written export, and after
//! the call returns `Ok` the new file survives a crash. When anything
//! fails, the temporary file is removed and the target is left as it was.
//! A new file is created with mode 0600 (narrowed by the umask); a file
//! that is replaced keeps its mode (see [`crate::private_file`]).

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Where an export writes.
pub enum Destination<'a> {
    /// A writer such as stdout; `label` names it in errors.
    Writer {
        /// The writer. It is flushed at the end.
        writer: &'a mut dyn Write,
        /// What to call it in messages (`"stdout"`).
        label: &'a str,
    },
    /// A file, replaced atomically.
    File(&'a Path),
}

impl Destination<'_> {
    /// The name of the destination for messages.
    pub fn label(&self) -> String {
        match self {
            Destination::Writer { label, .. } => (*label).to_string(),
            Destination::File(p) => p.display().to_string(),
        }
    }
}

/// Run `f` against the destination. For a file, the new content replaces
/// the file only when `f` and every write, flush and sync succeed.
pub(crate) fn write_to<T>(
    dest: Destination<'_>,
    f: impl FnOnce(&mut dyn Write) -> Result<T>,
) -> Result<T> {
    match dest {
        Destination::Writer { writer, label } => {
            let mut w = LabelledWriter {
                inner: writer,
                label: PathBuf::from(label),
                failed: None,
            };
            let out = f(&mut w);
            let out = match (out, w.failed.take()) {
                // The write error itself is more useful than whatever
                // the serializer made of it.
                (Err(_), Some(e)) => return Err(e),
                (out, _) => out?,
            };
            w.inner
                .flush()
                .map_err(|e| Error::io(&w.label, "write to", e))?;
            Ok(out)
        }
        Destination::File(path) => {
            let mut file = AtomicFile::create(path)?;
            let out = {
                let mut w = LabelledWriter {
                    inner: &mut file.writer,
                    label: file.tmp.clone(),
                    failed: None,
                };
                match (f(&mut w), w.failed.take()) {
                    (Err(_), Some(e)) => return Err(e),
                    (out, _) => out?,
                }
            };
            file.commit()?;
            Ok(out)
        }
    }
}

/// A writer that remembers its first I/O error as a library [`Error`]
/// naming the destination.
struct LabelledWriter<'a> {
    inner: &'a mut dyn Write,
    label: PathBuf,
    failed: Option<Error>,
}

impl Write for LabelledWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).inspect_err(|e| self.remember(e))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf).inspect_err(|e| self.remember(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().inspect_err(|e| self.remember(e))
    }
}

impl LabelledWriter<'_> {
    fn remember(&mut self, e: &io::Error) {
        if self.failed.is_none() {
            self.failed = Some(Error::io(
                &self.label,
                "write to",
                io::Error::new(e.kind(), e.to_string()),
            ));
        }
    }
}

/// Turn an `io::Error` met while writing through [`write_to`]'s writer
/// into a library error ([`write_to`] replaces it with one that names the
/// destination).
pub(crate) fn sink_error(e: io::Error) -> Error {
    Error::io("the output", "write to", e)
}

/// A file being written next to its final path.
pub(crate) struct AtomicFile {
    path: PathBuf,
    tmp: PathBuf,
    writer: BufWriter<File>,
    committed: bool,
}

impl AtomicFile {
    /// Create the temporary file for `path` in `path`'s directory.
    pub(crate) fn create(path: &Path) -> Result<AtomicFile> {
        let dir = crate::backend::file::io::parent_dir(path);
        if !dir.is_dir() {
            return Err(Error::CannotCreate {
                path: path.to_path_buf(),
                detail: format!("directory {} does not exist", dir.display()),
            });
        }
        if path.is_dir() {
            return Err(Error::CannotCreate {
                path: path.to_path_buf(),
                detail: "it is a directory".into(),
            });
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "export".into());
        let tmp = dir.join(format!(
            ".{name}.tmp-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        let file = crate::private_file::options()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|e| Error::io(&tmp, "create", e))?;
        // A replaced file keeps its mode; a new one stays private.
        if let Err(e) = crate::private_file::match_mode(&file, path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(&tmp, "set the mode of", e));
        }
        Ok(AtomicFile {
            path: path.to_path_buf(),
            tmp,
            writer: BufWriter::with_capacity(1 << 16, file),
            committed: false,
        })
    }

    /// Flush, sync, rename over the target, sync the directory.
    pub(crate) fn commit(mut self) -> Result<()> {
        self.writer
            .flush()
            .map_err(|e| Error::io(&self.tmp, "write to", e))?;
        self.writer
            .get_ref()
            .sync_all()
            .map_err(|e| Error::io(&self.tmp, "fsync", e))?;
        std::fs::rename(&self.tmp, &self.path).map_err(|e| Error::io(&self.path, "replace", e))?;
        self.committed = true;
        let dir = crate::backend::file::io::parent_dir(&self.path);
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Error::io(dir, "fsync directory", e))
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_only_on_success() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        std::fs::write(&p, "old").unwrap();
        let r: Result<()> = write_to(Destination::File(&p), |w| {
            w.write_all(b"half").map_err(sink_error)?;
            Err(Error::InvalidInput("stop".into()))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        write_to(Destination::File(&p), |w| {
            w.write_all(b"new").map_err(sink_error)
        })
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_missing_directory_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("no/such/out.txt");
        let e = write_to(Destination::File(&p), |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::CannotCreate);
    }
}
