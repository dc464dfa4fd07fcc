//! Creating a SQLite spool's database file and opening its connection:
//! the file made durably with mode 0600, names SQLite would read
//! specially, read-only and read-write connections, WAL mode.

use crate::backend::{OpenMode, OpenOptions};
use crate::error::{Error, Result};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, DatabaseName, OpenFlags};
use std::path::{Path, PathBuf};

/// Check that `path` exists or may be created as `mode` says, and create
/// a new, empty database file (durably: its directory is synced) when it
/// is missing.
pub(super) fn prepare_file(path: &Path, mode: OpenMode) -> Result<()> {
    let exists = path
        .try_exists()
        .map_err(|e| Error::io(path, "inspect spool", e))?;
    match (exists, mode) {
        (true, OpenMode::CreateNew) => Err(Error::AlreadyExists {
            path: path.to_path_buf(),
        }),
        (true, _) => Ok(()),
        (false, OpenMode::ReadOnly | OpenMode::ReadWrite) => Err(Error::NotFound {
            path: path.to_path_buf(),
        }),
        (false, OpenMode::Create | OpenMode::CreateNew) => {
            // Mode 0600: SQLite gives the -wal and -shm files it creates
            // later the database file's mode.
            match crate::private_file::options()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(_) => sync_parent(path),
                // Another process created it first; open theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if mode == OpenMode::CreateNew {
                        Err(Error::AlreadyExists {
                            path: path.to_path_buf(),
                        })
                    } else {
                        Ok(())
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(missing_directory(path)),
                Err(e) => Err(Error::io(path, "create spool", e)),
            }
        }
    }
}

/// The directory that holds `path`.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Make a new directory entry durable.
fn sync_parent(path: &Path) -> Result<()> {
    let dir = parent_dir(path);
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(dir, "sync directory", e))
}

/// "Cannot create" (not "not found") for a spool whose directory is
/// missing: SQLite's own `SQLITE_CANTOPEN`.
fn missing_directory(path: &Path) -> Error {
    Error::sqlite(
        path,
        "create spool",
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!(
                "directory {} does not exist",
                parent_dir(path).display()
            )),
        ),
    )
}

/// The name to hand SQLite for the spool at `path`: ":memory:" (and any
/// name starting with ':') means something else to SQLite, but a spool is
/// always the file of that name.
fn file_name(path: &Path) -> PathBuf {
    if path.as_os_str().as_encoded_bytes().starts_with(b":") {
        Path::new(".").join(path)
    } else {
        path.to_path_buf()
    }
}

/// Open the connection, read-only or read-write as `opts.mode` says.
pub(super) fn connect(path: &Path, opts: &OpenOptions) -> Result<Connection> {
    let err = |e| Error::sqlite(path, "open", e);
    let access = if opts.mode.writable() {
        OpenFlags::SQLITE_OPEN_READ_WRITE
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY
    };
    // The file exists (prepare_file); never let SQLite create one. The
    // handle's own mutex serialises use of the connection.
    let conn =
        Connection::open_with_flags(file_name(path), access | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(err)?;
    conn.busy_timeout(opts.busy_timeout).map_err(err)?;
    conn.set_prepared_statement_cache_capacity(64);
    if !opts.mode.writable() {
        return Ok(conn);
    }
    // SQLite quietly opens a file it may not write read-only.
    if conn.is_readonly(DatabaseName::Main).map_err(err)? {
        return Err(Error::io(
            path,
            "open for writing",
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        ));
    }
    Ok(conn)
}

/// Set up a writable connection: WAL mode (checked), full sync, no
/// checkpoint on close.
pub(super) fn set_up_writer(conn: &Connection, path: &Path) -> Result<()> {
    let err = |e| Error::sqlite(path, "open", e);
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .map_err(err)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::io(
            path,
            "use WAL journal mode for",
            std::io::Error::other(format!(
                "the journal mode in force is {mode:?}; spool needs WAL \
                 (it does not work on network file systems)"
            )),
        ));
    }
    // A one-shot process should not checkpoint (and fsync the database)
    // on every close; the WAL is durable and auto-checkpoint stays on.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod file_name_tests {
    use super::*;

    #[test]
    fn names_sqlite_reads_specially_become_relative_paths() {
        assert_eq!(
            file_name(Path::new(":memory:")),
            PathBuf::from("./:memory:")
        );
        assert_eq!(file_name(Path::new("q.db")), PathBuf::from("q.db"));
        assert_eq!(
            file_name(Path::new("/tmp/:memory:")),
            PathBuf::from("/tmp/:memory:")
        );
    }
}
