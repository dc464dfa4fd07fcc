//! The library's one error type.
//!
//! Every failure a caller can meet is a variant of [`Error`], and every
//! variant belongs to exactly one [`ErrorKind`]. The command-line tool maps
//! kinds to exit codes in one place; the library never exits and never
//! prints. Messages name the path and the action that failed so that a
//! person reading one line of stderr knows what to look at.

use std::io;
use std::path::{Path, PathBuf};

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The broad class of an error; what a caller branches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller asked for something that cannot be done this way
    /// (a SQLite-only operation on an NDJSON spool, conflicting options).
    Usage,
    /// Bad data: a corrupt spool, a malformed input record, an unknown id.
    Data,
    /// The spool or an input file does not exist.
    NotFound,
    /// A spool or output file cannot be created (it exists, or its
    /// directory is missing).
    CannotCreate,
    /// An I/O failure: disk full, short write, failed fsync.
    Io,
    /// Temporary: the spool is full, locked by another replay, or busy.
    Temporary,
    /// Permission denied on the spool, its directory or an output file.
    PermissionDenied,
    /// A bug in spool.
    Internal,
    /// A configuration that a long-running command (`spool serve`)
    /// refuses because it is unsafe or broken: a token file that is not
    /// there although systemd was asked to pass one, a guessable token.
    Config,
}

/// Every error the library returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on `path` failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },

    /// A SQLite call failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    /// A PostgreSQL spool's server refused or failed an operation. The
    /// kind is decided from the SQLSTATE or the connection failure (see
    /// `backend::postgres`); `target` is the spool's address without its
    /// password.
    #[error("cannot {action} {target}: {detail}")]
    Postgres {
        target: String,
        action: &'static str,
        kind: ErrorKind,
        detail: String,
        /// A serialization failure or deadlock: retrying the whole
        /// transaction may succeed.
        retryable: bool,
    },

    /// The spool's contents are damaged.
    #[error("{}: corrupt spool{}: {detail}", path.display(), line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Corrupt {
        path: PathBuf,
        /// 1-based line number for NDJSON spools.
        line: Option<u64>,
        detail: String,
    },

    /// The path holds a file that is not a spool (a mistyped `--spool`);
    /// it is left exactly as it is.
    #[error("{} is not a spool: {detail}; it was left untouched", path.display())]
    NotASpool { path: PathBuf, detail: String },

    /// The spool was written by a newer version of spool.
    #[error("{}: spool schema version {found} is newer than this spool supports ({supported})", path.display())]
    SchemaTooNew {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    /// The spool does not exist (and the caller did not ask to create it).
    #[error("spool {} does not exist", path.display())]
    NotFound { path: PathBuf },

    /// The path already exists and the caller asked for a new spool.
    #[error("{} already exists", path.display())]
    AlreadyExists { path: PathBuf },

    /// A PostgreSQL spool of this name already exists in the database,
    /// and the caller asked for a new spool; nothing was changed.
    #[error("a spool named {name:?} already exists in database {database:?}; nothing was changed")]
    SpoolNameTaken { name: String, database: String },

    /// The spool (or an output file) cannot be created where asked.
    #[error("cannot create {}: {detail}", path.display())]
    CannotCreate { path: PathBuf, detail: String },

    /// The spool would be created on a network file system, where its
    /// locking is not safe between machines (see [`crate::fs_type`]).
    #[error(
        "cannot create {}: it would be on a network file system ({fs_type}), where spool's locking (SQLite's WAL shared memory, NDJSON's flock) is not safe between machines",
        path.display()
    )]
    NetworkFileSystem { path: PathBuf, fs_type: String },

    /// Reject-newest: the spool holds `depth` items and its bound is
    /// `max_depth`.
    #[error("spool is full: {depth} items pending, the bound is {max_depth}")]
    QueueFull { max_depth: u64, depth: u64 },

    /// Another process holds the spool's replay lock.
    #[error("spool {} is being replayed by another process ({holder})", path.display())]
    ReplayLocked { path: PathBuf, holder: String },

    /// Another `spool serve` holds the NDJSON spool's serve lock.
    #[error("spool {} is served by another process ({holder})", path.display())]
    ServeLocked { path: PathBuf, holder: String },

    /// The spool stayed busy (locked by another writer) past the timeout.
    #[error("spool {} is busy: {detail}", path.display())]
    Busy { path: PathBuf, detail: String },

    /// Input handed to the library is malformed (an import record, a
    /// batch line, a key conflict on requeue).
    #[error("{0}")]
    InvalidInput(String),

    /// The operation does not apply to this kind of spool.
    #[error("{0}")]
    Unsupported(String),

    /// A broken internal invariant.
    #[error("internal error: {0}")]
    Internal(String),

    /// `import --identity` into a spool that is not fresh (it holds items
    /// or has pushed): it cannot take another spool's identity. Nothing
    /// was changed.
    #[error("{0}")]
    IdentityRefused(String),

    /// `spool serve` refuses to start with this configuration: it would
    /// run less safely than the operator asked for (no authentication
    /// although a credential was expected) or with a token anyone could
    /// guess. `hint` says what to change. Nothing was created.
    #[error("{detail}")]
    Config { detail: String, hint: String },
}

impl Error {
    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } => io_kind(source),
            Error::Sqlite { source, .. } => sqlite_kind(source),
            Error::Postgres { kind, .. } => *kind,
            Error::Corrupt { .. }
            | Error::NotASpool { .. }
            | Error::SchemaTooNew { .. }
            | Error::InvalidInput(_) => ErrorKind::Data,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::AlreadyExists { .. }
            | Error::SpoolNameTaken { .. }
            | Error::CannotCreate { .. }
            | Error::NetworkFileSystem { .. }
            | Error::IdentityRefused(_) => ErrorKind::CannotCreate,
            Error::QueueFull { .. }
            | Error::ReplayLocked { .. }
            | Error::ServeLocked { .. }
            | Error::Busy { .. } => ErrorKind::Temporary,
            Error::Unsupported(_) => ErrorKind::Usage,
            Error::Internal(_) => ErrorKind::Internal,
            Error::Config { .. } => ErrorKind::Config,
        }
    }

    /// Build an [`Error::Io`].
    pub fn io(path: impl AsRef<Path>, action: &'static str, source: io::Error) -> Error {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            action,
            source,
        }
    }

    /// Build an [`Error::Sqlite`], turning corruption and "not a database"
    /// into [`Error::Corrupt`] so that callers see one kind for damage.
    pub fn sqlite(path: impl AsRef<Path>, action: &'static str, source: rusqlite::Error) -> Error {
        let path = path.as_ref().to_path_buf();
        if let rusqlite::Error::SqliteFailure(e, ref msg) = source {
            use rusqlite::ErrorCode::*;
            match e.code {
                DatabaseCorrupt | NotADatabase => {
                    return Error::Corrupt {
                        path,
                        line: None,
                        detail: msg.clone().unwrap_or_else(|| e.to_string()),
                    }
                }
                DatabaseBusy | DatabaseLocked => {
                    return Error::Busy {
                        path,
                        detail: format!("{action}: another process holds the database lock"),
                    }
                }
                ReadOnly if e.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK => {
                    // A read-only connection may not roll back the hot
                    // journal a crashed writer left: say what to do.
                    let detail = "a write to the spool was interrupted (a crash left its \
                                  rollback journal) and only a command that writes may roll it \
                                  back: run one (`spool checkpoint` does), then try again";
                    return Error::Sqlite {
                        path,
                        action,
                        source: rusqlite::Error::SqliteFailure(e, Some(detail.into())),
                    };
                }
                _ => {}
            }
        }
        Error::Sqlite {
            path,
            action,
            source,
        }
    }

    /// Build an [`Error::Corrupt`].
    pub fn corrupt(path: impl AsRef<Path>, line: Option<u64>, detail: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.as_ref().to_path_buf(),
            line,
            detail: detail.into(),
        }
    }
}

fn io_kind(e: &io::Error) -> ErrorKind {
    match e.kind() {
        io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        io::ErrorKind::NotFound => ErrorKind::NotFound,
        io::ErrorKind::AlreadyExists => ErrorKind::CannotCreate,
        io::ErrorKind::InvalidData => ErrorKind::Data,
        _ => match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::EROFS) => {
                ErrorKind::PermissionDenied
            }
            _ => ErrorKind::Io,
        },
    }
}

fn sqlite_kind(e: &rusqlite::Error) -> ErrorKind {
    use rusqlite::ErrorCode::*;
    match e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            DatabaseCorrupt | NotADatabase => ErrorKind::Data,
            DatabaseBusy | DatabaseLocked => ErrorKind::Temporary,
            ReadOnly if f.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK => {
                ErrorKind::Temporary
            }
            PermissionDenied | ReadOnly => ErrorKind::PermissionDenied,
            CannotOpen => ErrorKind::CannotCreate,
            DiskFull | SystemIoFailure => ErrorKind::Io,
            _ => ErrorKind::Internal,
        },
        rusqlite::Error::InvalidColumnType(..) | rusqlite::Error::FromSqlConversionFailure(..) => {
            ErrorKind::Data
        }
        _ => ErrorKind::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_variant() {
        assert_eq!(
            Error::QueueFull {
                max_depth: 1,
                depth: 1
            }
            .kind(),
            ErrorKind::Temporary
        );
        assert_eq!(Error::corrupt("x", Some(3), "bad").kind(), ErrorKind::Data);
        assert_eq!(
            Error::io(
                "x",
                "open",
                io::Error::from(io::ErrorKind::PermissionDenied)
            )
            .kind(),
            ErrorKind::PermissionDenied
        );
        assert_eq!(
            Error::io("x", "write", io::Error::from_raw_os_error(libc::ENOSPC)).kind(),
            ErrorKind::Io
        );
    }

    #[test]
    fn corrupt_message_names_the_line() {
        let e = Error::corrupt("/tmp/q.ndjson", Some(7), "expected an object");
        assert_eq!(
            e.to_string(),
            "/tmp/q.ndjson: corrupt spool at line 7: expected an object"
        );
    }
}
