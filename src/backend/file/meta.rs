//! The NDJSON spool's metadata companion, `<spool>.meta`.
//!
//! A small JSON object, replaced atomically (temp file, fsync, rename,
//! fsync directory): `{"version":1,"uuid":"…","maxDepth":100}`, and
//! `"onFull":"drop-oldest"` when the overflow policy is not the default
//! (older versions ignore the field, and so reject at the bound: they
//! never drop what this version would keep), and `"retainMs":N`, the
//! retention window for delivered items in milliseconds, when one is set
//! (older versions ignore it too, and delete delivered items as they
//! always did). A reference NDJSON file has none; `spool` creates it on
//! the first write.

use super::index::Stamp;
use super::io::{parent_dir, write_all, FileIo};
use crate::error::{Error, Result};
use crate::item::OnFull;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// The current metadata format version.
pub const META_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    #[serde(default)]
    pub version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(default, rename = "maxDepth", skip_serializing_if = "Option::is_none")]
    pub max_depth: Option<u64>,
    /// The overflow policy's name ([`OnFull::name`]); absent: `reject`.
    #[serde(default, rename = "onFull", skip_serializing_if = "Option::is_none")]
    pub on_full: Option<String>,
    /// The retention window for delivered items, in milliseconds;
    /// absent: off.
    #[serde(default, rename = "retainMs", skip_serializing_if = "Option::is_none")]
    pub retain_ms: Option<u64>,
}

impl Meta {
    /// The overflow policy.
    pub fn on_full(&self, path: &Path) -> Result<OnFull> {
        match &self.on_full {
            None => Ok(OnFull::Reject),
            Some(v) => OnFull::parse(v).ok_or_else(|| {
                Error::corrupt(path, None, format!("onFull is not a policy: {v:?}"))
            }),
        }
    }

    /// The retention window for delivered items (`None`: off).
    pub fn retain(&self) -> Option<std::time::Duration> {
        self.retain_ms
            .filter(|ms| *ms > 0)
            .map(std::time::Duration::from_millis)
    }

    /// Set the retention window (off is written as no field).
    pub fn set_retain(&mut self, window: Option<std::time::Duration>) {
        self.retain_ms = window
            .map(|w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX))
            .filter(|ms| *ms > 0);
    }

    /// Set the overflow policy (the default is written as no field).
    pub fn set_on_full(&mut self, policy: OnFull) {
        self.on_full = match policy {
            OnFull::Reject => None,
            other => Some(other.name().to_string()),
        };
    }
}

/// Read the metadata; a missing file is the empty default.
pub(crate) fn read(path: &Path) -> Result<Meta> {
    Ok(read_changed(path, &mut None)?.unwrap_or_default())
}

/// The meta file as a process last read it.
///
/// The file read is kept open: while it is, its inode cannot be given to
/// another file, and since every write replaces the file (a new inode),
/// `stat` of the path saying the same inode, size and times means nobody
/// wrote it since. Checking costs one `stat` instead of an open, two reads
/// and a close.
#[derive(Debug)]
pub(crate) enum Seen {
    /// There was no meta file.
    Absent,
    /// What `stat` said of the file read (kept open, unread, for its
    /// inode).
    Read { _held: File, stamp: Stamp },
}

/// Read the metadata unless `seen` says it is unchanged since the last
/// read: `None` then. A missing file is the empty default.
pub(crate) fn read_changed(path: &Path, seen: &mut Option<Seen>) -> Result<Option<Meta>> {
    let now = match std::fs::metadata(path) {
        Ok(m) => Some(Stamp::of_metadata(&m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    match (&*seen, now) {
        (Some(Seen::Absent), None) => return Ok(None),
        (Some(Seen::Read { stamp, .. }), Some(now)) if *stamp == now => return Ok(None),
        _ => {}
    }
    *seen = None;
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            *seen = Some(Seen::Absent);
            return Ok(Some(Meta::default()));
        }
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    let stamp = file
        .metadata()
        .map(|m| Stamp::of_metadata(&m))
        .map_err(|e| Error::io(path, "read", e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, "read", e))?;
    let meta: Meta = serde_json::from_slice(&bytes)
        .map_err(|e| Error::corrupt(path, None, format!("bad metadata file: {e}")))?;
    if meta.version > META_VERSION {
        return Err(Error::SchemaTooNew {
            path: path.to_path_buf(),
            found: i64::from(meta.version),
            supported: i64::from(META_VERSION),
        });
    }
    *seen = Some(Seen::Read { _held: file, stamp });
    Ok(Some(meta))
}

/// Replace the metadata atomically.
pub(crate) fn write(io: &dyn FileIo, path: &Path, meta: &Meta) -> Result<()> {
    let tmp = super::super::companion(path, "tmp");
    let mut bytes = serde_json::to_vec(meta)
        .map_err(|e| Error::Internal(format!("cannot encode metadata: {e}")))?;
    bytes.push(b'\n');
    let mut f = crate::private_file::create_replacement(&tmp, path)
        .map_err(|e| Error::io(&tmp, "create", e))?;
    write_all(io, &mut f, &bytes).map_err(|e| Error::io(&tmp, "write", e))?;
    io.sync(&f).map_err(|e| Error::io(&tmp, "fsync", e))?;
    drop(f);
    io.rename(&tmp, path)
        .map_err(|e| Error::io(path, "replace", e))?;
    let dir = parent_dir(path);
    io.sync_dir(dir)
        .map_err(|e| Error::io(dir, "fsync directory", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::file::io::RealIo;

    #[test]
    fn a_read_is_skipped_until_the_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.ndjson.meta");
        let mut seen = None;
        assert_eq!(
            read_changed(&path, &mut seen).unwrap(),
            Some(Meta::default())
        );
        assert_eq!(read_changed(&path, &mut seen).unwrap(), None);
        let mut m = Meta {
            max_depth: Some(10),
            ..Meta::default()
        };
        write(&RealIo, &path, &m).unwrap();
        assert_eq!(read_changed(&path, &mut seen).unwrap(), Some(m.clone()));
        assert_eq!(read_changed(&path, &mut seen).unwrap(), None);
        // The same size and, within the clock's resolution, the same
        // times: only the inode tells the new file from the old one.
        m.max_depth = Some(20);
        write(&RealIo, &path, &m).unwrap();
        assert_eq!(read_changed(&path, &mut seen).unwrap(), Some(m));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            read_changed(&path, &mut seen).unwrap(),
            Some(Meta::default())
        );
        assert_eq!(read_changed(&path, &mut seen).unwrap(), None);
    }
}
