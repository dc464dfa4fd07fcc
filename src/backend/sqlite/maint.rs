//! Operator maintenance on a SQLite spool: WAL checkpoints, `VACUUM`, and
//! integrity checks.
//!
//! A checkpoint copies committed WAL frames into the database file. It is
//! not a health operation: a long-lived reader can stop it, the WAL then
//! grows, and nothing is wrong with the spool's data. The report says
//! exactly what happened — how many frames the WAL holds, how many were
//! checkpointed, whether a reader or writer got in the way — rather than
//! turning a blocked checkpoint into an error. Nothing here deletes the
//! `-wal` file or pending rows to save space.

use super::SqliteQueue;
use crate::error::{Error, Result};
use crate::verify::{Severity, VerifyReport};
use std::path::Path;
use std::time::Duration;

/// `PRAGMA wal_checkpoint` modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CheckpointMode {
    /// Checkpoint what can be done without waiting for anyone.
    Passive,
    /// Wait for writers, then checkpoint everything readers allow.
    Full,
    /// As full, then wait for readers so the WAL restarts from the top.
    Restart,
    /// As restart, then truncate the WAL file to zero bytes.
    Truncate,
}

impl CheckpointMode {
    /// The SQL keyword.
    pub fn as_sql(self) -> &'static str {
        match self {
            CheckpointMode::Passive => "PASSIVE",
            CheckpointMode::Full => "FULL",
            CheckpointMode::Restart => "RESTART",
            CheckpointMode::Truncate => "TRUNCATE",
        }
    }
}

/// What a checkpoint did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CheckpointReport {
    /// The mode asked for.
    pub mode: CheckpointMode,
    /// SQLite's busy flag: the checkpoint could not finish because another
    /// connection was writing or reading (full, restart, truncate).
    pub busy: bool,
    /// Frames in the WAL.
    pub wal_frames: i64,
    /// Frames copied into the database (including earlier checkpoints).
    pub checkpointed_frames: i64,
    /// Size of the `-wal` file before, in bytes.
    pub wal_bytes_before: u64,
    /// Size of the `-wal` file after, in bytes.
    pub wal_bytes_after: u64,
}

impl CheckpointReport {
    /// True when every WAL frame is in the database now.
    pub fn complete(&self) -> bool {
        !self.busy && self.checkpointed_frames >= self.wal_frames
    }
}

/// What `compact` on a SQLite spool did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VacuumReport {
    /// The truncating checkpoint after the vacuum.
    pub checkpoint: CheckpointReport,
    /// Database plus WAL bytes before.
    pub bytes_before: u64,
    /// Database plus WAL bytes after.
    pub bytes_after: u64,
}

fn size_of(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

impl SqliteQueue {
    fn wal_path(&self) -> std::path::PathBuf {
        let mut s = self.path.as_os_str().to_owned();
        s.push("-wal");
        s.into()
    }

    /// Run `PRAGMA wal_checkpoint(mode)`, waiting at most `wait` for other
    /// connections, and report the outcome.
    pub fn checkpoint(&self, mode: CheckpointMode, wait: Duration) -> Result<CheckpointReport> {
        let conn = self.lock();
        let err = |e| Error::sqlite(&self.path, "checkpoint", e);
        let wal = self.wal_path();
        let wal_bytes_before = size_of(&wal);
        conn.busy_timeout(wait).map_err(err)?;
        let row = conn.query_row(
            &format!("PRAGMA wal_checkpoint({})", mode.as_sql()),
            [],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            },
        );
        let _ = conn.busy_timeout(self.busy_timeout);
        let (busy, log, done) = row.map_err(err)?;
        Ok(CheckpointReport {
            mode,
            busy: busy != 0,
            wal_frames: log.max(0),
            checkpointed_frames: done.max(0),
            wal_bytes_before,
            wal_bytes_after: size_of(&wal),
        })
    }

    /// Rebuild the database file without free pages (`VACUUM`), then
    /// checkpoint and truncate the WAL. Rows that older versions wrote
    /// for skipped push numbers (a skip now records nothing but the
    /// client's `last_seq`) are deleted first.
    pub fn vacuum(&self, wait: Duration) -> Result<VacuumReport> {
        let wal = self.wal_path();
        let bytes_before = size_of(&self.path) + size_of(&wal);
        {
            let conn = self.lock();
            let purge = if self.layout.has_push() {
                "DELETE FROM spool_push_entries WHERE outcome = 'skipped';"
            } else {
                ""
            };
            conn.busy_timeout(wait)
                .and_then(|()| conn.execute_batch(&format!("{purge}VACUUM")))
                .map_err(|e| Error::sqlite(&self.path, "vacuum", e))?;
            let _ = conn.busy_timeout(self.busy_timeout);
        }
        let checkpoint = self.checkpoint(CheckpointMode::Truncate, wait)?;
        Ok(VacuumReport {
            checkpoint,
            bytes_before,
            bytes_after: size_of(&self.path) + size_of(&wal),
        })
    }

    /// `PRAGMA integrity_check`, the journal mode, and the id sequence.
    pub fn verify(&self) -> Result<VerifyReport> {
        let conn = self.lock();
        let err = |e| Error::sqlite(&self.path, "verify", e);
        let mut report = VerifyReport::default();
        let mut stmt = conn.prepare("PRAGMA integrity_check(100)").map_err(err)?;
        let rows: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(err)?
            .collect::<rusqlite::Result<_>>()
            .map_err(err)?;
        drop(stmt);
        let damaged = !(rows.len() == 1 && rows[0] == "ok");
        if damaged {
            for r in rows {
                report.push(
                    Severity::Damage,
                    &self.path,
                    None,
                    format!("integrity_check: {r}"),
                );
            }
        }
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .map_err(err)?;
        // An empty database (a touched file) has no journal mode of its
        // own yet: the first write sets WAL along with the tables.
        if !mode.eq_ignore_ascii_case("wal") && self.layout != super::Layout::Empty {
            report.push(
                Severity::Warning,
                &self.path,
                None,
                format!("journal mode is {mode}, not wal; the next write switches it"),
            );
        }
        match self.layout {
            super::Layout::Spool => {}
            super::Layout::SpoolV1 => report.push(
                Severity::Info,
                &self.path,
                None,
                "schema version 1 (before push); the next write migrates it",
            ),
            super::Layout::SpoolV2 => report.push(
                Severity::Info,
                &self.path,
                None,
                "schema version 2 (before ordering groups and coalescing); the next write migrates it",
            ),
            super::Layout::SpoolV3 => report.push(
                Severity::Info,
                &self.path,
                None,
                "schema version 3 (before retention of delivered items); the next write migrates it",
            ),
            super::Layout::SpoolV4 => report.push(
                Severity::Info,
                &self.path,
                None,
                "schema version 4 (retained records all in a time index); the next write migrates it",
            ),
            super::Layout::SpoolV5 => report.push(
                Severity::Info,
                &self.path,
                None,
                "schema version 5 (dead letters not indexed by key); the next write migrates it",
            ),
            super::Layout::Empty => report.push(
                Severity::Info,
                &self.path,
                None,
                "no tables yet (an empty database, such as a touched spool.db): an empty spool; \
                 the first write creates them",
            ),
            super::Layout::Reference => report.push(
                Severity::Info,
                &self.path,
                None,
                "reference schema (user_version 0); the next write migrates it",
            ),
        }
        if !damaged {
            let tables: &[&str] = match self.layout {
                super::Layout::Empty => &[],
                super::Layout::Reference => &["morph_offline_queue"],
                _ => &["morph_offline_queue", "spool_dead_letters"],
            };
            for table in tables {
                // Through a BLOB: text functions may stop at a NUL byte.
                let (count, first): (i64, Option<i64>) = conn
                    .query_row(
                        &format!(
                            "SELECT count(*), min(id) FROM {table} \
                             WHERE instr(CAST(idempotency_key AS BLOB), x'00') > 0"
                        ),
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .map_err(err)?;
                if let (Some(first), true) = (first, count > 0) {
                    let what = crate::backend::file::verify::nul_key_finding(
                        u64::try_from(count).unwrap_or(0),
                        u64::try_from(first).unwrap_or(0),
                    );
                    report.push(
                        Severity::Warning,
                        &self.path,
                        None,
                        format!("{table}: {what}"),
                    );
                }
            }
        }
        drop(conn);
        if !damaged {
            use crate::queue::Queue;
            report.pending = Some(self.size()?);
            report.dead_letters = Some(self.dead_count()?);
            let hw = self.high_water()?;
            report.push(
                Severity::Info,
                &self.path,
                None,
                format!(
                    "{} pending, {} dead, id high-water mark {hw}, WAL {} bytes",
                    report.pending.unwrap_or(0),
                    report.dead_letters.unwrap_or(0),
                    size_of(&self.wal_path())
                ),
            );
        }
        Ok(report)
    }
}
