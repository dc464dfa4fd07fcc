//! `checkpoint`: copy a SQLite spool's WAL into the database file, and
//! say honestly how far that got.
//!
//! A checkpoint is not a health operation. A connection that keeps a read
//! transaction open pins the WAL frames written after its snapshot: they
//! cannot be copied (passive, full) and the WAL cannot restart or shrink
//! (restart, truncate) until that reader finishes. Nothing is wrong with
//! the spool's data then, so a blocked checkpoint is a result, not an
//! error: [`CheckpointOutcome::blocked`] says what stopped it. NDJSON
//! spools have no WAL; asking is a usage error that points to `compact`.

pub use crate::backend::sqlite::maint::{CheckpointMode, CheckpointReport};
use crate::backend::{detect_existing, Spool};
use crate::error::{Error, Result};
use crate::queue::BackendKind;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Options for [`checkpoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// `PRAGMA wal_checkpoint` mode.
    pub mode: CheckpointMode,
    /// How long full, restart and truncate wait for other connections.
    pub wait: Duration,
}

impl Default for CheckpointOptions {
    fn default() -> Self {
        CheckpointOptions {
            mode: CheckpointMode::Passive,
            wait: Duration::from_secs(5),
        }
    }
}

/// What stopped a checkpoint from finishing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Some WAL frames could not be copied: another connection reads a
    /// snapshot older than them (or was writing).
    FramesLeft {
        /// Frames still only in the WAL.
        remaining: i64,
    },
    /// Every frame is in the database, but another connection still uses
    /// the WAL, so it could not be restarted or truncated.
    WalInUse,
}

/// What [`checkpoint`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointOutcome {
    /// The spool.
    pub path: PathBuf,
    /// SQLite's answer, and the WAL sizes.
    pub report: CheckpointReport,
}

impl CheckpointOutcome {
    /// What kept the checkpoint from finishing, if anything did.
    pub fn blocked(&self) -> Option<Blocked> {
        blocked(&self.report)
    }

    /// The stable `--json` object.
    pub fn json(&self) -> CheckpointJson {
        let mut j = CheckpointJson::from(&self.report);
        j.spool = Some(self.path.to_string_lossy().into_owned());
        j
    }
}

fn blocked(r: &CheckpointReport) -> Option<Blocked> {
    if r.checkpointed_frames < r.wal_frames {
        Some(Blocked::FramesLeft {
            remaining: r.wal_frames - r.checkpointed_frames,
        })
    } else if r.busy {
        Some(Blocked::WalInUse)
    } else {
        None
    }
}

impl Blocked {
    /// One sentence for people: what happened and what to do.
    pub fn explain(self) -> String {
        match self {
            Blocked::FramesLeft { remaining } => format!(
                "blocked by a reader: {remaining} WAL frame(s) could not be copied because another \
                 connection is reading an older snapshot (or writing); the data is safe and \
                 committed, and the WAL shrinks once that reader finishes — find it with \
                 `fuser` or `lsof` on the spool and run the checkpoint again"
            ),
            Blocked::WalInUse => "every frame is in the database, but another connection still \
                 uses the WAL, so it could not be restarted or truncated; run the checkpoint again \
                 when that reader has finished"
                .to_string(),
        }
    }

    /// A short machine-readable word: `reader` or `wal_in_use`.
    pub fn code(self) -> &'static str {
        match self {
            Blocked::FramesLeft { .. } => "reader",
            Blocked::WalInUse => "wal_in_use",
        }
    }
}

/// The `--json` object of `checkpoint`, also nested in `compact`'s
/// (documented in `docs/maintenance.md`).
#[derive(Clone, Debug, Serialize)]
pub struct CheckpointJson {
    /// The spool path (absent when nested in another report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool: Option<String>,
    /// `passive`, `full`, `restart` or `truncate`.
    pub mode: CheckpointMode,
    /// SQLite's busy flag.
    pub busy: bool,
    /// Frames in the WAL.
    pub wal_frames: i64,
    /// Frames in the database now.
    pub checkpointed_frames: i64,
    /// `-wal` bytes before.
    pub wal_bytes_before: u64,
    /// `-wal` bytes after.
    pub wal_bytes_after: u64,
    /// True when every frame is in the database and nothing was busy.
    pub complete: bool,
    /// `null`, `"reader"` (frames left because of a reader) or
    /// `"wal_in_use"` (all copied, WAL not restarted).
    pub blocked: Option<&'static str>,
    /// The explanation for people, or null.
    pub note: Option<String>,
}

impl From<&CheckpointReport> for CheckpointJson {
    fn from(r: &CheckpointReport) -> CheckpointJson {
        let b = blocked(r);
        CheckpointJson {
            spool: None,
            mode: r.mode,
            busy: r.busy,
            wal_frames: r.wal_frames,
            checkpointed_frames: r.checkpointed_frames,
            wal_bytes_before: r.wal_bytes_before,
            wal_bytes_after: r.wal_bytes_after,
            complete: r.complete(),
            blocked: b.map(Blocked::code),
            note: b.map(Blocked::explain),
        }
    }
}

fn not_for_postgres(url: &str) -> Error {
    Error::Unsupported(format!(
        "{}: PostgreSQL manages its own WAL, there is nothing to checkpoint; `spool compact` runs VACUUM (ANALYZE) on the spool's tables",
        crate::backend::postgres::redact(url)
    ))
}

fn not_for_ndjson(path: &Path) -> Error {
    Error::Unsupported(format!(
        "{}: an NDJSON spool has no WAL to checkpoint; `spool compact` rewrites it without the records it no longer needs",
        path.display()
    ))
}

/// Check, without opening or changing anything, that `path` is a spool
/// `checkpoint` applies to: [`Error::NotFound`] when it is missing,
/// [`Error::Unsupported`] (pointing to `compact`) for an NDJSON spool.
/// Call it before opening the spool for writing, which on an NDJSON spool
/// would already cut a torn tail.
pub fn check_applies(path: &Path) -> Result<()> {
    match detect_existing(path)? {
        BackendKind::File => Err(not_for_ndjson(path)),
        BackendKind::Postgres => Err(not_for_postgres(&path.to_string_lossy())),
        _ => Ok(()),
    }
}

/// Checkpoint `spool`'s WAL (opened writable). An NDJSON spool is
/// [`Error::Unsupported`] (a usage error) whose message points to
/// `compact`.
pub fn checkpoint(spool: &Spool, opts: &CheckpointOptions) -> Result<CheckpointOutcome> {
    match spool {
        Spool::Sqlite(q) => Ok(CheckpointOutcome {
            path: q.path().to_path_buf(),
            report: q.checkpoint(opts.mode, opts.wait)?,
        }),
        Spool::File(q) => Err(not_for_ndjson(q.path())),
        Spool::Postgres(q) => Err(not_for_postgres(q.display())),
        Spool::Memory(_) => Err(Error::Unsupported(
            "an in-memory spool has no WAL to checkpoint".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(busy: bool, frames: i64, done: i64) -> CheckpointReport {
        CheckpointReport {
            mode: CheckpointMode::Truncate,
            busy,
            wal_frames: frames,
            checkpointed_frames: done,
            wal_bytes_before: 0,
            wal_bytes_after: 0,
        }
    }

    #[test]
    fn blocked_says_what_stopped_it() {
        assert_eq!(blocked(&report(false, 10, 10)), None);
        assert_eq!(
            blocked(&report(true, 10, 4)),
            Some(Blocked::FramesLeft { remaining: 6 })
        );
        assert_eq!(
            blocked(&report(false, 10, 4)),
            Some(Blocked::FramesLeft { remaining: 6 })
        );
        assert_eq!(blocked(&report(true, 10, 10)), Some(Blocked::WalInUse));
        let j = CheckpointJson::from(&report(true, 10, 4));
        assert_eq!(j.blocked, Some("reader"));
        assert!(!j.complete);
    }
}
