//! `init`: create a new spool explicitly. An existing path is
//! [`crate::Error::AlreadyExists`], a PostgreSQL spool name the database
//! already has [`crate::Error::SpoolNameTaken`]; either stays untouched.

use crate::backend::{OpenMode, OpenOptions, Spool};
use crate::error::Result;
use crate::item::OnFull;
use crate::queue::BackendKind;
use crate::time::SharedClock;
use std::path::{Path, PathBuf};

/// Options for [`init`].
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// The backend; `None` decides by the path (see [`crate::detect`]).
    pub backend: Option<BackendKind>,
    /// The depth bound the spool remembers.
    pub max_depth: Option<u64>,
    /// The overflow policy the spool remembers (`None`: the default,
    /// reject).
    pub on_full: Option<OnFull>,
    /// The retention window for delivered items (`None`: off).
    pub retain: Option<std::time::Duration>,
    /// The spool's clock.
    pub clock: SharedClock,
    /// Create it even on a network file system (see
    /// [`OpenOptions::allow_network_fs`]).
    pub allow_network_fs: bool,
}

/// The spool [`init`] created.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitReport {
    /// Where.
    pub path: PathBuf,
    /// Which backend.
    pub backend: BackendKind,
    /// The stored depth bound.
    pub max_depth: Option<u64>,
    /// The stored overflow policy.
    pub on_full: OnFull,
    /// The stored retention window.
    pub retain: Option<std::time::Duration>,
    /// The new spool's UUID.
    pub uuid: String,
}

/// Create a spool at `path` ([`OpenMode::CreateNew`]).
pub fn init(path: &Path, opts: &InitOptions) -> Result<InitReport> {
    let spool = Spool::open(
        path,
        &OpenOptions {
            mode: OpenMode::CreateNew,
            backend: opts.backend,
            max_depth: opts.max_depth,
            clock: opts.clock.clone(),
            allow_network_fs: opts.allow_network_fs,
            ..OpenOptions::default()
        },
    )?;
    if let Some(policy) = opts.on_full {
        spool.set_on_full(policy)?;
    }
    if opts.retain.is_some() {
        spool.set_retain(opts.retain)?;
    }
    Ok(InitReport {
        path: match &spool {
            Spool::Postgres(q) => PathBuf::from(q.display()),
            _ => path.to_path_buf(),
        },
        backend: spool.kind(),
        max_depth: spool.max_depth()?,
        on_full: spool.on_full()?,
        retain: spool.retain()?,
        uuid: spool.uuid()?,
    })
}
