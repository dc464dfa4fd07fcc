//! Storage backends and the one way to open a spool by path.
//!
//! A spool is one path. [`Spool::open`] decides the backend the way the
//! spec's §2 table says: an existing file that starts with the SQLite
//! header, or has a SQLite rollback journal beside it (a crash interrupted
//! a write, see `has_sqlite_journal`), is SQLite, any other non-empty
//! existing file is NDJSON; a new
//! path — or an empty file, such as a `touch`ed `spool.db` — is NDJSON
//! when it ends in `.ndjson` or `.jsonl`, SQLite otherwise; an explicit
//! backend wins for a new or empty path and must match an existing one.
//! An empty file beside an NDJSON spool's companion files (`.meta`,
//! `.idx`, `.dead`, `.delivered`) is that NDJSON spool with no live
//! record, as `init --backend file` leaves it.

pub(crate) mod due_sql;
pub mod file;
pub(crate) mod held;
pub mod identity;
pub(crate) mod ledger_sql;
pub mod memory;
pub(crate) mod policy;
pub mod postgres;
pub(crate) mod receive;
pub(crate) mod retain_sql;
pub(crate) mod shape_sql;
pub(crate) mod sql;
pub mod sqlite;
pub(crate) mod state;

use crate::error::{Error, Result};
use crate::queue::{BackendKind, Queue};
use crate::time::{system_clock, SharedClock};
use std::io::Read;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use file::FileQueue;
pub use memory::MemoryQueue;
pub use postgres::PostgresQueue;
pub use sqlite::SqliteQueue;

/// The first 16 bytes of every SQLite database file.
pub const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// How to open a spool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only: the spool must exist and nothing on disk changes, not
    /// even a torn tail.
    ReadOnly,
    /// Read and write an existing spool.
    ReadWrite,
    /// Read and write, creating the spool when it is missing.
    Create,
    /// Create a new spool; an existing path is an error.
    CreateNew,
}

impl OpenMode {
    /// True for the modes that may write.
    pub fn writable(self) -> bool {
        self != OpenMode::ReadOnly
    }

    /// True for the modes that may create the spool.
    pub fn creates(self) -> bool {
        matches!(self, OpenMode::Create | OpenMode::CreateNew)
    }
}

/// Options for [`Spool::open`] and the backends' `open`.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Read only, read-write, create.
    pub mode: OpenMode,
    /// The backend to use for a new spool; for an existing spool it must
    /// match what is on disk.
    pub backend: Option<BackendKind>,
    /// The depth bound a newly created spool remembers.
    pub max_depth: Option<u64>,
    /// The clock for enqueue times and deaths.
    pub clock: SharedClock,
    /// How long to wait for another process's write lock before failing
    /// with [`Error::Busy`].
    pub busy_timeout: Duration,
    /// NDJSON: open without reading the files; the first operation reads
    /// them (and reports damage then). The meta file of a spool that has
    /// none yet (a reference writer's) is written by the first write,
    /// after that checked the files, so that a damaged spool is left as it
    /// was. [`crate::FileQueue::compact`] streams the files itself, so a
    /// spool opened only to be compacted never needs its whole image in
    /// memory. SQLite ignores it.
    pub defer_load: bool,
    /// Create the spool even on a network file system (NFS, SMB/CIFS,
    /// …), which is otherwise refused with
    /// [`Error::NetworkFileSystem`]: only for a share that one machine
    /// alone ever uses (see [`crate::fs_type`]).
    pub allow_network_fs: bool,
    /// NDJSON: the main file's size from which a mutation may compact it
    /// automatically (`None`: 4 MiB, see docs/formats.md). A seam for
    /// tests, which lower it to reach automatic compaction with small
    /// spools.
    #[doc(hidden)]
    pub auto_compact_min_bytes: Option<u64>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            mode: OpenMode::Create,
            backend: None,
            max_depth: None,
            clock: system_clock(),
            busy_timeout: Duration::from_secs(10),
            defer_load: false,
            allow_network_fs: false,
            auto_compact_min_bytes: None,
        }
    }
}

impl OpenOptions {
    /// Default options with `mode`.
    pub fn new(mode: OpenMode) -> OpenOptions {
        OpenOptions {
            mode,
            ..OpenOptions::default()
        }
    }
}

/// The backend of the spool at `path`, which must exist
/// ([`Error::NotFound`] otherwise); nothing is created or changed.
pub fn detect_existing(path: &Path) -> Result<BackendKind> {
    if path.to_str().is_some_and(postgres::is_postgres_url) {
        return Ok(BackendKind::Postgres);
    }
    let exists = path
        .try_exists()
        .map_err(|e| Error::io(path, "inspect spool", e))?;
    if !exists {
        not_libpq(path)?;
        return Err(Error::NotFound {
            path: path.to_path_buf(),
        });
    }
    detect(path, None)
}

/// A missing `path` that is a libpq key/value string (`host=db
/// dbname=ops`) is no file name: [`Error::Unsupported`] with the
/// equivalent `postgres://` URL (see [`postgres::url::libpq_hint`]).
fn not_libpq(path: &Path) -> Result<()> {
    match path.to_str().and_then(postgres::url::libpq_hint) {
        Some(msg) => Err(Error::Unsupported(msg)),
        None => Ok(()),
    }
}

/// Decide which backend `path` uses (see the module docs).
pub fn detect(path: &Path, requested: Option<BackendKind>) -> Result<BackendKind> {
    if path.to_str().is_some_and(postgres::is_postgres_url) {
        return Ok(BackendKind::Postgres);
    }
    match std::fs::File::open(path) {
        Ok(mut f) => {
            let meta = f
                .metadata()
                .map_err(|e| Error::io(path, "inspect spool", e))?;
            if meta.is_dir() {
                return Err(Error::InvalidInput(format!(
                    "{} is a directory, not a spool",
                    path.display()
                )));
            }
            let mut head = [0u8; 16];
            let mut n = 0;
            while n < head.len() {
                match f.read(&mut head[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(path, "read spool header", e)),
                }
            }
            let found = if n == head.len() && &head == SQLITE_HEADER {
                BackendKind::Sqlite
            } else if has_sqlite_journal(path) {
                // A crash interrupted a write of a SQLite database whose
                // first page had not reached the disk yet (the first write
                // of a new spool: a power loss can leave the file's length
                // with zeros for content); the journal restores it.
                BackendKind::Sqlite
            } else if n == 0 && !has_file_companion(path) {
                // An empty file holds no spool yet: it takes its backend
                // as a new path does (a `touch`ed `spool.db` is SQLite).
                return Ok(requested.unwrap_or_else(|| by_name(path)));
            } else {
                BackendKind::File
            };
            match requested {
                Some(r) if r != found => Err(Error::Unsupported(format!(
                    "{} is an existing {} spool; --backend {} applies only when creating a spool",
                    path.display(),
                    found.name(),
                    r.name()
                ))),
                _ => Ok(found),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(requested.unwrap_or_else(|| by_name(path)))
        }
        Err(e) => Err(Error::io(path, "open spool", e)),
    }
}

/// The backend a new (or empty) path takes from its name: NDJSON for
/// `.ndjson` and `.jsonl`, SQLite for any other.
fn by_name(path: &Path) -> BackendKind {
    match path.extension().and_then(|e| e.to_str()) {
        Some("ndjson") | Some("jsonl") => BackendKind::File,
        _ => BackendKind::Sqlite,
    }
}

/// The first 8 bytes of a SQLite rollback journal's header.
const SQLITE_JOURNAL_MAGIC: [u8; 8] = [0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7];

/// True when `<path>-journal` is a SQLite rollback journal: `path` is a
/// SQLite database whose last write a crash interrupted, and the next
/// writable open rolls that write back, whatever the file holds now.
fn has_sqlite_journal(path: &Path) -> bool {
    let mut journal = path.as_os_str().to_owned();
    journal.push("-journal");
    let mut magic = [0u8; 8];
    std::fs::File::open(PathBuf::from(journal))
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == SQLITE_JOURNAL_MAGIC)
}

/// True when a companion file of an NDJSON spool at `path` exists
/// (`.meta`, `.idx`, `.dead`, `.delivered`): an empty main file beside
/// one is an NDJSON spool with no live record (as `init --backend file`
/// leaves it), not a path to give a backend.
fn has_file_companion(path: &Path) -> bool {
    ["meta", "idx", "dead", "delivered"]
        .iter()
        .any(|s| companion(path, s).exists())
}

/// An open spool of any backend.
#[allow(clippy::large_enum_variant)] // one per process; boxing buys nothing
#[derive(Debug)]
pub enum Spool {
    /// In memory.
    Memory(MemoryQueue),
    /// NDJSON file.
    File(FileQueue),
    /// SQLite database.
    Sqlite(SqliteQueue),
    /// PostgreSQL database.
    Postgres(PostgresQueue),
}

impl Spool {
    /// Open (or create, as `opts.mode` allows) the spool at `path`.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Spool> {
        // A URL is never a path: no file is looked at, created or locked.
        if let Some(url) = path.to_str().filter(|s| postgres::is_postgres_url(s)) {
            if let Some(b) = opts.backend.filter(|b| *b != BackendKind::Postgres) {
                return Err(Error::Unsupported(format!(
                    "{} is a PostgreSQL spool; --backend {} applies only to a spool path",
                    postgres::redact(url),
                    b.name()
                )));
            }
            return Ok(Spool::Postgres(PostgresQueue::open(url, opts)?));
        }
        if opts.backend == Some(BackendKind::Postgres) {
            return Err(Error::Unsupported(format!(
                "{} is a path; a PostgreSQL spool is a postgres:// or postgresql:// URL",
                path.display()
            )));
        }
        if opts.backend == Some(BackendKind::Memory) {
            return Err(Error::Unsupported(
                "the memory backend has no path; use Spool::memory".into(),
            ));
        }
        let exists = path
            .try_exists()
            .map_err(|e| Error::io(path, "inspect spool", e))?;
        if !exists {
            not_libpq(path)?;
        }
        if exists && opts.mode == OpenMode::CreateNew {
            return Err(Error::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        if !exists && !opts.mode.creates() {
            return Err(Error::NotFound {
                path: path.to_path_buf(),
            });
        }
        if !exists {
            let dir = file::io::parent_dir(path);
            if !dir.is_dir() {
                return Err(Error::CannotCreate {
                    path: path.to_path_buf(),
                    detail: format!("directory {} does not exist", dir.display()),
                });
            }
            if !opts.allow_network_fs {
                if let Ok(t) = crate::fs_type::quick_of_path(path) {
                    if t.locality == crate::fs_type::Locality::Network {
                        return Err(Error::NetworkFileSystem {
                            path: path.to_path_buf(),
                            fs_type: t.name,
                        });
                    }
                }
            }
        }
        match detect(path, opts.backend)? {
            BackendKind::Sqlite => Ok(Spool::Sqlite(SqliteQueue::open(path, opts)?)),
            BackendKind::File => Ok(Spool::File(FileQueue::open(path, opts)?)),
            BackendKind::Memory | BackendKind::Postgres => {
                Err(Error::Internal("detected a spool without a path".into()))
            }
        }
    }

    /// A new in-memory spool.
    pub fn memory(opts: &OpenOptions) -> Spool {
        Spool::Memory(MemoryQueue::with_max_depth(
            opts.max_depth,
            opts.clock.clone(),
        ))
    }

    /// The queue operations.
    pub fn queue(&self) -> &(dyn Queue + 'static) {
        match self {
            Spool::Memory(q) => q,
            Spool::File(q) => q,
            Spool::Sqlite(q) => q,
            Spool::Postgres(q) => q,
        }
    }

    /// Messages the backend collected about damage it found or repaired
    /// (an NDJSON torn tail), oldest first; taking them clears the list.
    pub fn take_notices(&self) -> Vec<String> {
        match self {
            Spool::File(q) => q.take_notices(),
            Spool::Memory(_) | Spool::Sqlite(_) | Spool::Postgres(_) => Vec::new(),
        }
    }

    /// The spool's path (none for memory and PostgreSQL).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Spool::Memory(_) | Spool::Postgres(_) => None,
            Spool::File(q) => Some(q.path()),
            Spool::Sqlite(q) => Some(q.path()),
        }
    }

    /// Another handle on this spool, for reading only, with a connection
    /// of its own: reads through it never wait for, or hold up, work on
    /// this handle in another thread (`spool serve` computes `/metrics`
    /// on it, beside the thread that commits pushes). `None` for a memory
    /// spool, which has no second handle.
    pub fn reader(&self) -> Result<Option<Spool>> {
        let read_only = OpenOptions::new(OpenMode::ReadOnly);
        match self {
            Spool::Memory(_) => Ok(None),
            Spool::File(q) => Ok(Some(Spool::File(FileQueue::open(q.path(), &read_only)?))),
            Spool::Sqlite(q) => Ok(Some(Spool::Sqlite(SqliteQueue::open(
                q.path(),
                &read_only,
            )?))),
            Spool::Postgres(q) => Ok(Some(Spool::Postgres(q.second_handle()))),
        }
    }

    /// The notification source of `replay --follow` and `watch`: block
    /// until another process commits an enqueue into this spool (`true`)
    /// or `timeout` passes (`false`). `None`, at once, for a backend with
    /// no such source: the caller polls (local spools watch their files
    /// instead). A wake-up is a hint, never a promise that an item is due:
    /// poll the spool after every return, and after every timeout too.
    ///
    /// PostgreSQL: `LISTEN` on the schema's channel, to which every commit
    /// that enqueues sends one `NOTIFY` (see [`postgres::channel`]). The
    /// first call starts listening: an enqueue that commits before it is
    /// not seen, so poll once after the first call returns.
    pub fn wait_for_enqueue(&self, timeout: Duration) -> Result<Option<bool>> {
        match self.leasing() {
            Some(l) => l.wait_for_enqueue(timeout).map(Some),
            None => Ok(None),
        }
    }

    /// Where the spool is, as reports and metrics name it: its path, a
    /// PostgreSQL spool's URL without the password, or `memory`.
    pub fn location(&self) -> PathBuf {
        match self {
            Spool::Memory(_) => PathBuf::from("memory"),
            Spool::File(q) => q.path().to_path_buf(),
            Spool::Sqlite(q) => q.path().to_path_buf(),
            Spool::Postgres(q) => PathBuf::from(q.display()),
        }
    }

    /// Every file that belongs to the spool and exists now, with its size
    /// in bytes (main file, WAL, companions).
    pub fn files(&self) -> Vec<(PathBuf, u64)> {
        let candidates = match self {
            Spool::Memory(_) | Spool::Postgres(_) => Vec::new(),
            Spool::File(q) => q.files(),
            Spool::Sqlite(q) => q.files(),
        };
        candidates
            .into_iter()
            .filter_map(|p| std::fs::metadata(&p).ok().map(|m| (p, m.len())))
            .collect()
    }
}

impl Deref for Spool {
    type Target = dyn Queue;
    fn deref(&self) -> &Self::Target {
        self.queue()
    }
}

/// The path of a companion file: `spool.ndjson` + `dead` gives
/// `spool.ndjson.dead`.
pub fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    s.push(suffix);
    PathBuf::from(s)
}
