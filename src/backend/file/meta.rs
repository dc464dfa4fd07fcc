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

use super::io::{parent_dir, write_all, FileIo};
use crate::error::{Error, Result};
use crate::item::OnFull;
use serde::{Deserialize, Serialize};
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
    match std::fs::read(path) {
        Ok(bytes) => {
            let meta: Meta = serde_json::from_slice(&bytes)
                .map_err(|e| Error::corrupt(path, None, format!("bad metadata file: {e}")))?;
            if meta.version > META_VERSION {
                return Err(Error::SchemaTooNew {
                    path: path.to_path_buf(),
                    found: i64::from(meta.version),
                    supported: i64::from(META_VERSION),
                });
            }
            Ok(meta)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Meta::default()),
        Err(e) => Err(Error::io(path, "read", e)),
    }
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
