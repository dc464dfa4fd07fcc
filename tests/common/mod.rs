//! A tiny harness shared by the backend-independent suites: one spool of a
//! chosen backend in a temporary directory, on a manual clock, that can be
//! closed and opened again.
//!
//! PostgreSQL spools live in the database `SPOOL_TEST_PG_URL` names (see
//! `.ci/pg.sh`), each under a spool name of its own, so that tests run in
//! parallel on one database. Without that variable a PostgreSQL case
//! prints `SKIPPED: …` and passes — unless `SPOOL_REQUIRE_PG=1` (CI), where
//! it fails.

#![allow(dead_code)]

pub mod reference;

use spool::{BackendKind, Clock, ManualClock, OpenMode, OpenOptions, Queue, Spool, Timestamp};
use std::path::PathBuf;
use std::sync::Arc;
use tempfile::TempDir;

/// The start of every harness clock: a whole second, so that enqueue
/// times (second precision) equal the clock.
pub const T0: Timestamp = Timestamp::from_secs(1_767_225_600);

/// Which backend a suite runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Memory,
    File,
    Sqlite,
    Postgres,
}

/// The base URL of the test database, or `None` after printing why the
/// test `name` is skipped. Panics when `SPOOL_REQUIRE_PG=1` and there is
/// no database: CI must never pass without running these tests.
pub fn pg_url(name: &str) -> Option<String> {
    match std::env::var("SPOOL_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            if std::env::var("SPOOL_REQUIRE_PG").is_ok_and(|v| v == "1") {
                panic!("{name}: SPOOL_REQUIRE_PG=1 but SPOOL_TEST_PG_URL is not set");
            }
            // Past the harness's capture, so that it shows for a pass too.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED: {name} needs PostgreSQL (SPOOL_TEST_PG_URL is not set)"
            );
            None
        }
    }
}

/// A URL for a new spool name in the test database: `base` with
/// `spool=<tag>-<pid>-<n>-<random>`.
pub fn pg_spool_url(base: &str, tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let sep = if base.contains('?') { '&' } else { '?' };
    let tag: String = tag
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "{base}{sep}spool={tag}-{}-{n}-{:08x}",
        std::process::id(),
        fastrand_u32()
    )
}

fn fastrand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    h.finish() as u32
}

impl Backend {
    pub fn kind(self) -> BackendKind {
        match self {
            Backend::Memory => BackendKind::Memory,
            Backend::File => BackendKind::File,
            Backend::Sqlite => BackendKind::Sqlite,
            Backend::Postgres => BackendKind::Postgres,
        }
    }

    /// The spool's file name: the extension alone selects the backend
    /// (for PostgreSQL, see [`Harness::missing`]).
    pub fn file_name(self) -> &'static str {
        match self {
            Backend::Memory => "unused",
            Backend::File => "spool.ndjson",
            Backend::Sqlite => "spool.db",
            Backend::Postgres => "unused",
        }
    }
}

/// One open spool in its own temporary directory.
pub struct Harness {
    pub backend: Backend,
    pub clock: ManualClock,
    pub path: PathBuf,
    /// When true, [`Harness::step`] reopens the spool.
    pub reopen_on_step: bool,
    spool: Option<Spool>,
    // Dropped last, after the spool.
    pub dir: TempDir,
}

impl Harness {
    /// A new spool (created with `max_depth`) on a clock at [`T0`].
    pub fn new(backend: Backend, max_depth: Option<u64>) -> Harness {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let path = match backend {
            Backend::Postgres => {
                let base = std::env::var("SPOOL_TEST_PG_URL").expect("SPOOL_TEST_PG_URL");
                let tag = std::thread::current().name().unwrap_or("t").to_string();
                PathBuf::from(pg_spool_url(&base, tag.rsplit("::").next().unwrap_or("t")))
            }
            _ => dir.path().join(backend.file_name()),
        };
        let clock = ManualClock::new(T0);
        let mut opts = OpenOptions::new(OpenMode::Create);
        opts.clock = Arc::new(clock.clone());
        opts.max_depth = max_depth;
        let spool = match backend {
            Backend::Memory => Spool::memory(&opts),
            _ => {
                opts.backend = Some(backend.kind());
                Spool::open(&path, &opts)
                    .unwrap_or_else(|e| panic!("create {backend:?} spool: {e}"))
            }
        };
        Harness {
            backend,
            clock,
            path,
            reopen_on_step: false,
            spool: Some(spool),
            dir,
        }
    }

    /// The same harness, reopening the spool on every [`Harness::step`].
    pub fn reopening(mut self, on: bool) -> Harness {
        self.reopen_on_step = on;
        self
    }

    /// Options for opening the existing spool again (no depth bound: the
    /// spool must remember its own).
    pub fn reopen_options(&self) -> OpenOptions {
        let mut opts = OpenOptions::new(OpenMode::ReadWrite);
        opts.clock = Arc::new(self.clock.clone());
        opts.backend = Some(self.backend.kind());
        opts
    }

    /// Close the spool and open the same path again. The memory backend
    /// keeps its instance.
    pub fn reopen(&mut self) {
        if self.backend == Backend::Memory {
            return;
        }
        drop(self.spool.take());
        let spool = Spool::open(&self.path, &self.reopen_options())
            .unwrap_or_else(|e| panic!("reopen {:?} spool: {e}", self.backend));
        self.spool = Some(spool);
    }

    /// A point between two steps of a test: reopens in the reopen flavour.
    pub fn step(&mut self) {
        if self.reopen_on_step {
            self.reopen();
        }
    }

    /// The open spool's queue operations.
    pub fn q(&self) -> &dyn Queue {
        self.spool.as_ref().expect("spool is open").queue()
    }

    /// The clock's current time.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// A spool path (or URL) of this backend that does not exist.
    pub fn missing(&self) -> PathBuf {
        match self.backend {
            Backend::Postgres => {
                let base = std::env::var("SPOOL_TEST_PG_URL").expect("SPOOL_TEST_PG_URL");
                PathBuf::from(pg_spool_url(&base, "missing"))
            }
            b => self.dir.path().join(format!("missing-{}", b.file_name())),
        }
    }

    /// The open spool.
    pub fn spool(&self) -> &Spool {
        self.spool.as_ref().expect("spool is open")
    }
}
