//! `verify`: check a spool and report what is wrong, where, and what to
//! do; with `repair`, cut a torn tail and nothing else.
//!
//! * NDJSON: [`crate::backend::file::verify::verify_path`] reads every
//!   line of the main and dead-letter files (line numbers, torn tails,
//!   ids that do not grow, items both pending and dead, the metadata
//!   file). It takes a shared lock and changes nothing.
//! * SQLite: a read-only open and [`crate::SqliteQueue::verify`]
//!   (`PRAGMA integrity_check`, journal mode, schema). A database so
//!   damaged that it cannot even be opened is a damage finding in the
//!   report, not an error without one.
//!
//! Repair only ever cuts a torn trailing line (an append a crash
//! interrupted, which was never reported committed) and rebuilds the
//! NDJSON index (`<spool>.idx`, derived from the files) when it is stale
//! or damaged. It runs only when every damage finding is one of those:
//! corruption anywhere else is reported and left for a person, because
//! "fixing" it would mean dropping committed records. Each cut is
//! announced to the caller (`before_cut`) before it is made, and the
//! spool is verified again afterwards.

use crate::backend::file::verify::verify_path;
use crate::backend::{detect_existing, FileQueue, OpenMode, OpenOptions, SqliteQueue};
use crate::error::{Error, ErrorKind, Result};
use crate::queue::BackendKind;
use crate::verify::{Finding, Severity, VerifyReport};
use serde::Serialize;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// Options for [`verify`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct VerifyOptions {
    /// Cut torn tails when they are the only damage.
    pub repair: bool,
}

/// A torn trailing line that repair cuts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cut {
    /// The file.
    #[serde(serialize_with = "lossy")]
    pub file: PathBuf,
    /// 1-based line number of the torn line.
    pub line: u64,
    /// Byte offset the file is cut at.
    pub offset: u64,
    /// Bytes removed.
    pub bytes: u64,
}

fn lossy<S: serde::Serializer>(p: &Path, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// What [`verify`] found (and cut).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyOutcome {
    /// The spool.
    pub path: PathBuf,
    /// Its backend.
    pub backend: BackendKind,
    /// The findings; after a repair, those of the check that followed it.
    pub report: VerifyReport,
    /// The torn tails that were cut.
    pub repaired: Vec<Cut>,
    /// The index that was rebuilt (NDJSON), if one was.
    pub rebuilt_index: Option<PathBuf>,
    /// Why `repair` changed nothing although the spool is damaged.
    pub repair_refused: Option<String>,
}

impl VerifyOutcome {
    /// True when nothing is damaged (exit 0).
    pub fn healthy(&self) -> bool {
        self.report.healthy()
    }

    /// The stable `--json` object.
    pub fn json(&self) -> VerifyJson<'_> {
        VerifyJson {
            spool: self.path.to_string_lossy().into_owned(),
            backend: self.backend.name(),
            healthy: self.healthy(),
            repairable: !self.healthy() && self.report.repairable(),
            pending: self.report.pending,
            dead_letters: self.report.dead_letters,
            findings: self.report.findings.iter().map(FindingJson::from).collect(),
            repaired: &self.repaired,
            index_rebuilt: self.rebuilt_index.is_some(),
            repair_refused: self.repair_refused.as_deref(),
        }
    }
}

/// The `--json` object of `verify` (documented in `docs/maintenance.md`).
#[derive(Serialize)]
pub struct VerifyJson<'a> {
    /// The spool path.
    pub spool: String,
    /// `file` or `sqlite`.
    pub backend: &'static str,
    /// No damage found.
    pub healthy: bool,
    /// Damaged, and `--repair` would fix all of it.
    pub repairable: bool,
    /// Pending items counted, or null when the spool could not be read.
    pub pending: Option<u64>,
    /// Dead letters counted, or null.
    pub dead_letters: Option<u64>,
    /// Every finding.
    pub findings: Vec<FindingJson<'a>>,
    /// Torn tails cut by `--repair`.
    pub repaired: &'a [Cut],
    /// True when `--repair` rebuilt the NDJSON index.
    pub index_rebuilt: bool,
    /// Why `--repair` did nothing, or null.
    pub repair_refused: Option<&'a str>,
}

/// One finding in `--json`.
#[derive(Serialize)]
pub struct FindingJson<'a> {
    /// `info`, `warning` or `damage`.
    pub severity: Severity,
    /// The file it concerns.
    pub file: String,
    /// 1-based line (NDJSON), or null.
    pub line: Option<u64>,
    /// What was found and what to do.
    pub message: &'a str,
    /// True when `--repair` fixes it.
    pub repairable: bool,
}

impl<'a> From<&'a Finding> for FindingJson<'a> {
    fn from(f: &'a Finding) -> FindingJson<'a> {
        FindingJson {
            severity: f.severity,
            file: f.file.to_string_lossy().into_owned(),
            line: f.line,
            message: &f.message,
            repairable: f.repairable,
        }
    }
}

/// Check the spool at `path` without creating or changing anything; with
/// `opts.repair`, cut torn tails when they are all the damage, calling
/// `before_cut` for each one just before cutting.
pub fn verify(
    path: &Path,
    opts: &VerifyOptions,
    before_cut: &mut dyn FnMut(&Cut),
) -> Result<VerifyOutcome> {
    let backend = detect_existing(path)?;
    let mut outcome = VerifyOutcome {
        path: path.to_path_buf(),
        backend,
        report: VerifyReport::default(),
        repaired: Vec::new(),
        rebuilt_index: None,
        repair_refused: None,
    };
    match backend {
        BackendKind::File => {
            outcome.report = verify_path(path)?;
            if opts.repair && !outcome.report.healthy() {
                if outcome.report.repairable() {
                    (outcome.repaired, outcome.rebuilt_index) =
                        repair_file(path, &outcome.report, before_cut)?;
                    outcome.report = verify_path(path)?;
                } else {
                    outcome.repair_refused = Some(
                        "--repair only cuts a torn trailing line and rebuilds the index; the other damage listed needs a person (restore the file from a backup, or fix the named lines by hand)".into(),
                    );
                }
            }
        }
        BackendKind::Sqlite => {
            outcome.report = verify_sqlite(path)?;
            if opts.repair && !outcome.report.healthy() {
                outcome.repair_refused = Some(
                    "--repair only cuts torn tails of NDJSON spools; a damaged SQLite spool needs a backup (`spool export` saves what is still readable)".into(),
                );
            }
        }
        BackendKind::Postgres => {
            outcome.path = PathBuf::from(crate::backend::postgres::redact(&path.to_string_lossy()));
            outcome.report = verify_postgres(path)?;
            if opts.repair && !outcome.report.healthy() {
                outcome.repair_refused = Some(
                    "--repair only cuts torn tails of NDJSON spools; fix a PostgreSQL spool's counts or indexes with the statements in docs/formats.md".into(),
                );
            }
        }
        BackendKind::Memory => {
            return Err(Error::Internal("detected a memory spool".into()));
        }
    }
    if let Ok(t) = crate::fs_type::of_path(path) {
        if let Some(risk) = crate::fs_type::risk(&t) {
            let severity = match t.locality {
                crate::fs_type::Locality::Network => Severity::Warning,
                _ => Severity::Info,
            };
            outcome
                .report
                .push(severity, path, None, format!("the spool is {risk}"));
        }
    }
    Ok(outcome)
}

/// Open a PostgreSQL spool read-only and check its schema version, kept
/// counts, ids, indexes and leases.
fn verify_postgres(url: &Path) -> Result<VerifyReport> {
    use crate::backend::Spool;
    let spool = Spool::open(url, &OpenOptions::new(OpenMode::ReadOnly))?;
    let Spool::Postgres(q) = &spool else {
        return Err(Error::Internal(
            "a postgres URL opened another backend".into(),
        ));
    };
    let shown = PathBuf::from(q.display());
    let mut r = VerifyReport::default();
    let (findings, notes) = q.verify()?;
    for n in notes {
        r.push(Severity::Info, &shown, None, n);
    }
    for f in findings {
        r.push(Severity::Damage, &shown, None, f);
    }
    use crate::queue::Queue;
    r.pending = Some(q.size()?);
    r.dead_letters = Some(q.dead_count()?);
    Ok(r)
}

/// Open read-only and check; damage that stops the open or the check is a
/// finding.
fn verify_sqlite(path: &Path) -> Result<VerifyReport> {
    let damage = |e: Error| -> Result<VerifyReport> {
        if e.kind() == ErrorKind::Data && !matches!(e, Error::SchemaTooNew { .. }) {
            let mut r = VerifyReport::default();
            r.push(
                Severity::Damage,
                path,
                None,
                format!(
                    "the database cannot be read: {e}; restore it from a backup (`spool export` may still save what is readable)"
                ),
            );
            Ok(r)
        } else {
            Err(e)
        }
    };
    let q = match SqliteQueue::open(path, &OpenOptions::new(OpenMode::ReadOnly)) {
        Ok(q) => q,
        Err(e) if interrupted_write(&e) => {
            // Nothing committed is lost, but only a writer may roll the
            // interrupted write back, and a check writes nothing.
            let mut r = VerifyReport::default();
            r.push(
                Severity::Warning,
                path,
                None,
                format!(
                    "a write that a crash interrupted left {}-journal; the next command that writes to the spool rolls it back (until then the read-only commands cannot read it)",
                    path.display()
                ),
            );
            return Ok(r);
        }
        Err(e) => return damage(e),
    };
    match q.verify() {
        Ok(r) => Ok(r),
        Err(e) => damage(e),
    }
}

/// True for SQLite's refusal to read a database whose hot rollback
/// journal a read-only connection may not roll back.
fn interrupted_write(e: &Error) -> bool {
    matches!(
        e,
        Error::Sqlite {
            source: rusqlite::Error::SqliteFailure(f, _),
            ..
        } if f.extended_code == rusqlite::ffi::SQLITE_READONLY_ROLLBACK
    )
}

/// Cut the torn tails `report` lists, announcing each first, and rebuild
/// the index when `report` finds it stale or damaged.
fn repair_file(
    path: &Path,
    report: &VerifyReport,
    before_cut: &mut dyn FnMut(&Cut),
) -> Result<(Vec<Cut>, Option<PathBuf>)> {
    let mut cuts = Vec::new();
    let index = crate::backend::companion(path, "idx");
    let mut rebuild = false;
    for f in report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Damage && f.repairable)
    {
        if f.file == index {
            rebuild = true;
            continue;
        }
        let Some(line) = f.line else { continue };
        let (offset, bytes) = line_span(&f.file, line)?;
        cuts.push(Cut {
            file: f.file.clone(),
            line,
            offset,
            bytes,
        });
    }
    if cuts.is_empty() && !rebuild {
        return Ok((cuts, None));
    }
    for c in &cuts {
        before_cut(c);
    }
    let q = FileQueue::open(path, &OpenOptions::new(OpenMode::ReadWrite))?;
    q.repair_torn_tail()?;
    if rebuild {
        q.rebuild_index()?;
    }
    Ok((cuts, rebuild.then_some(index)))
}

/// Where line `line` (1-based) of `file` starts, and how many bytes from
/// there to the end of the file.
fn line_span(file: &Path, line: u64) -> Result<(u64, u64)> {
    let f = std::fs::File::open(file).map_err(|e| Error::io(file, "read", e))?;
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    let mut offset = 0u64;
    let mut buf = Vec::new();
    for _ in 1..line {
        buf.clear();
        let n = r
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(file, "read", e))?;
        if n == 0 {
            break;
        }
        offset += n as u64;
    }
    let len = std::fs::metadata(file)
        .map_err(|e| Error::io(file, "inspect", e))?
        .len();
    Ok((offset, len.saturating_sub(offset)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Spool;
    use std::io::Write;

    fn spool(dir: &Path) -> PathBuf {
        let p = dir.join("q.ndjson");
        let s = Spool::open(&p, &OpenOptions::new(OpenMode::Create)).unwrap();
        s.enqueue(b"a", "").unwrap();
        s.enqueue(b"b", "").unwrap();
        p
    }

    #[test]
    fn a_torn_tail_is_announced_then_cut() {
        let dir = tempfile::tempdir().unwrap();
        let p = spool(dir.path());
        let good = std::fs::read(&p).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"{\"op\":\"put\",\"id\":3,\"pay")
            .unwrap();
        let r = verify(&p, &VerifyOptions::default(), &mut |_| panic!("no cut")).unwrap();
        assert!(!r.healthy() && r.report.repairable(), "{r:?}");
        let mut announced = Vec::new();
        let r = verify(&p, &VerifyOptions { repair: true }, &mut |c| {
            announced.push(c.clone())
        })
        .unwrap();
        assert!(r.healthy(), "{r:?}");
        assert_eq!(announced, r.repaired);
        assert_eq!(
            (announced[0].line, announced[0].offset, announced[0].bytes),
            (3, good.len() as u64, 23)
        );
        assert_eq!(std::fs::read(&p).unwrap(), good);
    }

    #[test]
    fn other_damage_is_not_touched() {
        let dir = tempfile::tempdir().unwrap();
        let p = spool(dir.path());
        let mut text = std::fs::read(&p).unwrap();
        // Damage the second line, and leave a torn tail too.
        let second = text.iter().position(|b| *b == b'\n').unwrap() + 1;
        text.splice(second..second + 1, b"X".iter().copied());
        text.extend_from_slice(b"{\"op\":");
        std::fs::write(&p, &text).unwrap();
        let r = verify(&p, &VerifyOptions { repair: true }, &mut |_| {
            panic!("no cut")
        })
        .unwrap();
        assert!(!r.healthy());
        assert!(r.repair_refused.is_some());
        assert_eq!(std::fs::read(&p).unwrap(), text);
    }

    #[test]
    fn missing_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let e = verify(
            &dir.path().join("nope.db"),
            &VerifyOptions::default(),
            &mut |_| {},
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
