//! `compact`: give back the space a spool no longer needs, losing nothing.
//!
//! * NDJSON: [`crate::FileQueue::compact`] rewrites the main and
//!   dead-letter files last-write-wins (temp file, fsync, rename, fsync
//!   directory), keeps every pending item, dead letter, key and attempt
//!   count, and ends the main file with a `done` line for the id
//!   high-water mark so no id is ever issued twice. It holds the spool's
//!   exclusive lock for the duration: concurrent enqueuers wait and then
//!   append to the new file. Memory grows with the live items, not with
//!   the file: the backend streams the file, keeping only where the last
//!   line of each live item lies, and copies those lines as they are.
//! * SQLite: `VACUUM` (rebuilds the file without free pages) and then a
//!   truncating WAL checkpoint. A reader holding an old snapshot can stop
//!   the checkpoint; the report says so rather than failing.

use crate::backend::sqlite::maint::CheckpointReport;
use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::item::ItemId;
use crate::queue::BackendKind;
use crate::time::Timestamp;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Options for [`compact`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactOptions {
    /// SQLite: how long `VACUUM` and the checkpoint wait for other
    /// connections (NDJSON waits as the spool was opened).
    pub wait: Duration,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            wait: Duration::from_secs(10),
        }
    }
}

/// A torn trailing line that compaction dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DroppedTail {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset where it started.
    pub offset: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// Why it did not parse.
    pub reason: String,
}

/// What [`compact`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompactReport {
    /// The spool.
    pub path: PathBuf,
    /// Its backend.
    pub backend: BackendKind,
    /// Bytes of the spool's data files before (NDJSON: main and dead-letter
    /// files; SQLite: database and WAL).
    pub bytes_before: u64,
    /// The same files after.
    pub bytes_after: u64,
    /// NDJSON: lines in the main file before.
    pub records_before: Option<u64>,
    /// NDJSON: lines in the main file after.
    pub records_after: Option<u64>,
    /// Pending items (held included) kept.
    pub pending: u64,
    /// Dead letters kept.
    pub dead_letters: u64,
    /// Retained delivered records kept (SPEC §9).
    pub delivered_retained: u64,
    /// Delivered records whose retention window had ended, deleted first
    /// (SPEC §9).
    pub pruned_delivered: u64,
    /// The id high-water mark, unchanged by compaction.
    pub high_water: ItemId,
    /// NDJSON: a torn trailing line dropped on the way.
    pub dropped_torn_tail: Option<DroppedTail>,
    /// SQLite: the truncating checkpoint after `VACUUM`.
    pub checkpoint: Option<CheckpointReport>,
    /// PostgreSQL: dead tuples in the spool's tables before `VACUUM`.
    pub dead_tuples_before: Option<u64>,
    /// PostgreSQL: dead tuples after.
    pub dead_tuples_after: Option<u64>,
    /// What the backend noticed and repaired since the spool was opened
    /// (an NDJSON torn tail is cut by the writable open, before the
    /// compaction proper; see [`Spool::take_notices`]).
    pub notices: Vec<String>,
}

impl CompactReport {
    /// Bytes given back (0 when the files grew).
    pub fn bytes_saved(&self) -> u64 {
        self.bytes_before.saturating_sub(self.bytes_after)
    }

    /// The stable `--json` object.
    pub fn json(&self) -> CompactJson<'_> {
        CompactJson {
            spool: self.path.to_string_lossy().into_owned(),
            backend: self.backend.name(),
            bytes_before: self.bytes_before,
            bytes_after: self.bytes_after,
            bytes_saved: self.bytes_saved(),
            records_before: self.records_before,
            records_after: self.records_after,
            pending: self.pending,
            dead_letters: self.dead_letters,
            delivered_retained: self.delivered_retained,
            pruned_delivered: self.pruned_delivered,
            high_water: self.high_water,
            dropped_torn_tail: self.dropped_torn_tail.as_ref(),
            checkpoint: self
                .checkpoint
                .as_ref()
                .map(super::checkpoint::CheckpointJson::from),
            dead_tuples_before: self.dead_tuples_before,
            dead_tuples_after: self.dead_tuples_after,
            notices: &self.notices,
        }
    }
}

/// The `--json` object of `compact` (documented in `docs/maintenance.md`).
#[derive(Serialize)]
pub struct CompactJson<'a> {
    /// The spool path.
    pub spool: String,
    /// `file` or `sqlite`.
    pub backend: &'static str,
    /// Bytes before.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// `bytes_before - bytes_after`, at least 0.
    pub bytes_saved: u64,
    /// NDJSON main-file lines before (null for SQLite).
    pub records_before: Option<u64>,
    /// NDJSON main-file lines after (null for SQLite).
    pub records_after: Option<u64>,
    /// Pending items kept.
    pub pending: u64,
    /// Dead letters kept.
    pub dead_letters: u64,
    /// Retained delivered records kept.
    pub delivered_retained: u64,
    /// Expired delivered records deleted.
    pub pruned_delivered: u64,
    /// The id high-water mark.
    pub high_water: u64,
    /// The torn tail dropped, or null.
    pub dropped_torn_tail: Option<&'a DroppedTail>,
    /// SQLite: the checkpoint after VACUUM (null for NDJSON).
    pub checkpoint: Option<super::checkpoint::CheckpointJson>,
    /// PostgreSQL: dead tuples in the spool's tables before (null for
    /// files).
    pub dead_tuples_before: Option<u64>,
    /// PostgreSQL: dead tuples after.
    pub dead_tuples_after: Option<u64>,
    /// What the backend noticed and repaired (a torn tail cut).
    pub notices: &'a [String],
}

/// Compact `spool` (opened writable). Notices the backend collected and
/// nobody took yet (see [`Spool::take_notices`]) go into the report.
pub fn compact(spool: &Spool, opts: &CompactOptions) -> Result<CompactReport> {
    // Expired delivered records first, a bounded batch per commit, so
    // that the compaction below drops their bytes too.
    let mut pruned = 0;
    loop {
        let n = spool.prune_delivered(crate::item::PRUNE_BATCH)?;
        pruned += n;
        if n == 0 {
            break;
        }
    }
    let mut report = compact_backend(spool, opts)?;
    report.pruned_delivered = pruned;
    report.notices = spool.take_notices();
    Ok(report)
}

fn compact_backend(spool: &Spool, opts: &CompactOptions) -> Result<CompactReport> {
    match spool {
        Spool::File(q) => {
            let r = q.compact()?;
            Ok(CompactReport {
                path: q.path().to_path_buf(),
                backend: BackendKind::File,
                bytes_before: r.bytes_before,
                bytes_after: r.bytes_after,
                records_before: Some(r.records_before),
                records_after: Some(r.records_after),
                pending: r.pending,
                dead_letters: r.dead_letters,
                delivered_retained: r.delivered_retained,
                pruned_delivered: 0,
                high_water: r.high_water,
                dropped_torn_tail: r.dropped_torn_tail.map(|t| DroppedTail {
                    line: t.line,
                    offset: t.offset,
                    bytes: t.len,
                    reason: t.reason,
                }),
                checkpoint: None,
                dead_tuples_before: None,
                dead_tuples_after: None,
                notices: Vec::new(),
            })
        }
        Spool::Postgres(q) => {
            use crate::queue::Queue;
            let dead = |t: &[(String, u64, u64)]| t.iter().map(|x| x.2).sum::<u64>();
            let before = q.dead_tuples()?;
            let (_, bytes_before) = q.extra_stats()?;
            q.vacuum()?;
            let after = q.dead_tuples()?;
            let (_, bytes_after) = q.extra_stats()?;
            // What it holds now, in one read (the counts used do not
            // depend on the time).
            let kept = q.stats(Timestamp::now())?;
            Ok(CompactReport {
                path: PathBuf::from(q.display()),
                backend: BackendKind::Postgres,
                bytes_before,
                bytes_after,
                records_before: None,
                records_after: None,
                pending: kept.depth,
                dead_letters: kept.dead_letters,
                delivered_retained: kept.delivered_retained,
                pruned_delivered: 0,
                high_water: kept.high_water,
                dropped_torn_tail: None,
                checkpoint: None,
                dead_tuples_before: Some(dead(&before)),
                dead_tuples_after: Some(dead(&after)),
                notices: Vec::new(),
            })
        }
        Spool::Sqlite(q) => {
            use crate::queue::Queue;
            let r = q.vacuum(opts.wait)?;
            // What it holds now, in one read (the counts used do not
            // depend on the time).
            let kept = q.stats(Timestamp::now())?;
            Ok(CompactReport {
                path: q.path().to_path_buf(),
                backend: BackendKind::Sqlite,
                bytes_before: r.bytes_before,
                bytes_after: r.bytes_after,
                records_before: None,
                records_after: None,
                pending: kept.depth,
                dead_letters: kept.dead_letters,
                delivered_retained: kept.delivered_retained,
                pruned_delivered: 0,
                high_water: kept.high_water,
                dropped_torn_tail: None,
                checkpoint: Some(r.checkpoint),
                dead_tuples_before: None,
                dead_tuples_after: None,
                notices: Vec::new(),
            })
        }
        Spool::Memory(_) => Err(Error::Unsupported(
            "an in-memory spool has nothing to compact".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenMode, OpenOptions};

    #[test]
    fn ndjson_compaction_keeps_items_and_the_mark() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("q.ndjson");
        let s = Spool::open(&p, &OpenOptions::new(OpenMode::Create)).unwrap();
        for i in 0..10 {
            s.enqueue(format!("p{i}").as_bytes(), "").unwrap();
        }
        s.mark_done(&[1, 2, 3, 10]).unwrap();
        s.dead_letter(4, "no").unwrap();
        let r = compact(&s, &CompactOptions::default()).unwrap();
        assert_eq!((r.pending, r.dead_letters, r.high_water), (5, 1, 10));
        assert!(r.bytes_after < r.bytes_before, "{r:?}");
        assert_eq!(r.records_after, Some(6), "5 puts and the high-water done");
        drop(s);
        let s = Spool::open(&p, &OpenOptions::new(OpenMode::ReadWrite)).unwrap();
        assert_eq!(s.enqueue(b"next", "").unwrap().id, 11);
    }

    #[test]
    fn memory_spools_are_refused() {
        let s = Spool::memory(&OpenOptions::default());
        let e = compact(&s, &CompactOptions::default()).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Usage);
    }
}
