//! `verify` for NDJSON spools: every line of the main and dead-letter
//! files, not just up to the first problem, with line numbers.

use super::format::{parse_line, Line};
use super::{meta, scan};
use crate::backend::companion;
use crate::error::{Error, Result};
use crate::verify::{Finding, Severity, VerifyReport};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// At most this many bad lines are listed per file.
const MAX_LISTED: usize = 20;

struct FileScan {
    /// Live ids after last-write-wins.
    live: BTreeSet<u64>,
    /// Every id that appeared in a put line.
    seen: BTreeSet<u64>,
    /// First-seen put ids that were not above every earlier id, with
    /// their line and the mark they fell under.
    non_monotonic: Vec<(u64, u64, u64)>,
    high_water: u64,
    records: u64,
}

fn scan_file(
    path: &Path,
    report: &mut VerifyReport,
    also_seen: &BTreeSet<u64>,
    check_order: bool,
) -> Result<Option<FileScan>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    let _ = file.lock_shared();
    let len = file
        .metadata()
        .map_err(|e| Error::io(path, "inspect", e))?
        .len();
    // An unfinished batch at the end is left out, as every read leaves it.
    let limit = match scan::unfinished_batch(path, &file, 0, len) {
        Ok(limit) => limit,
        Err(e) => {
            report.push(Severity::Damage, path, None, e.to_string());
            None
        }
    };
    let mut reader = BufReader::new((&file).take(limit.unwrap_or(len)));
    let mut out = FileScan {
        live: BTreeSet::new(),
        seen: BTreeSet::new(),
        non_monotonic: Vec::new(),
        high_water: 0,
        records: 0,
    };
    // Malformed lines: line number, reason, whether the line had its
    // newline.
    let mut bad: Vec<(u64, String, bool)> = Vec::new();
    let mut nul_lines: Vec<u64> = Vec::new();
    let mut first_content_line = None;
    let mut last_content_line = 0u64;
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(path, "read", e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let has_newline = buf.ends_with(b"\n");
        let mut content: &[u8] = &buf;
        if let Some(c) = content.strip_suffix(b"\n") {
            content = c;
        }
        if let Some(c) = content.strip_suffix(b"\r") {
            content = c;
        }
        if content.iter().all(|b| b.is_ascii_whitespace()) {
            continue;
        }
        if content.iter().all(|b| *b == 0 || b.is_ascii_whitespace()) {
            nul_lines.push(line_no);
            continue;
        }
        first_content_line.get_or_insert(line_no);
        last_content_line = line_no;
        match parse_line(content) {
            Ok(Line::Put { item, .. }) => {
                out.records += 1;
                let id = item.id;
                if check_order
                    && !out.seen.contains(&id)
                    && !also_seen.contains(&id)
                    && id <= out.high_water
                {
                    out.non_monotonic.push((line_no, id, out.high_water));
                }
                out.seen.insert(id);
                out.live.insert(id);
                out.high_water = out.high_water.max(id);
            }
            Ok(Line::Done { id }) => {
                out.records += 1;
                out.live.remove(&id);
                out.high_water = out.high_water.max(id);
            }
            Ok(Line::Push(_)) | Ok(Line::Client(_)) => out.records += 1,
            Err(reason) => bad.push((line_no, reason, has_newline)),
        }
    }
    let _ = file.unlock();
    // Only a last line without its newline, or NUL bytes at the end, can
    // be a torn write; a complete malformed line never is.
    let torn_line = |line: u64, has_newline: bool| line == last_content_line && !has_newline;
    let mut listed = 0;
    for (line, reason, has_newline) in &bad {
        if Some(*line) == first_content_line && !torn_line(*line, *has_newline) {
            report.push(
                Severity::Damage,
                path,
                Some(*line),
                format!("not a spool: the first line is not a spool record ({reason})"),
            );
        } else if torn_line(*line, *has_newline) {
            report.findings.push(Finding {
                severity: Severity::Damage,
                file: path.to_path_buf(),
                line: Some(*line),
                message: format!(
                    "torn trailing line left by an interrupted write ({reason}); `spool verify --repair` or the next write cuts it"
                ),
                repairable: true,
            });
        } else if listed < MAX_LISTED {
            listed += 1;
            report.push(
                Severity::Damage,
                path,
                Some(*line),
                format!("malformed line ({reason}); the spool cannot be opened until it is fixed by hand or restored from a backup"),
            );
        }
    }
    let unlisted = bad
        .iter()
        .filter(|(l, _, nl)| Some(*l) != first_content_line && !torn_line(*l, *nl))
        .count()
        .saturating_sub(MAX_LISTED);
    if unlisted > 0 {
        report.push(
            Severity::Damage,
            path,
            None,
            format!("{unlisted} more malformed lines not listed"),
        );
    }
    let (inner_nul, tail_nul): (Vec<u64>, Vec<u64>) =
        nul_lines.iter().partition(|l| **l < last_content_line);
    if let Some(line) = inner_nul.first() {
        report.push(
            Severity::Damage,
            path,
            Some(*line),
            "a run of NUL bytes between records; the spool cannot be opened until it is fixed by hand or restored from a backup",
        );
    }
    let torn_last = bad.last().is_some_and(|(l, _, nl)| torn_line(*l, *nl));
    if let (Some(line), false) = (tail_nul.first(), torn_last) {
        report.findings.push(Finding {
            severity: Severity::Damage,
            file: path.to_path_buf(),
            line: Some(*line),
            message: "NUL bytes at the end, left by a crash before the data reached the disk; `spool verify --repair` or the next write cuts them".into(),
            repairable: true,
        });
    }
    if let Some(at) = limit {
        report.findings.push(Finding {
            severity: Severity::Damage,
            file: path.to_path_buf(),
            line: Some(line_no + 1),
            message: format!(
                "unfinished batch at byte {at} ({} bytes): a multi-line write was interrupted, none of it counts; `spool verify --repair` or the next write cuts it",
                len - at
            ),
            repairable: true,
        });
    }
    Ok(Some(out))
}

/// Check the NDJSON spool at `path` without changing anything.
pub fn verify_path(path: &Path) -> Result<VerifyReport> {
    if !path.exists() {
        return Err(Error::NotFound {
            path: path.to_path_buf(),
        });
    }
    if let Ok(file) = std::fs::File::open(path) {
        scan::check_head(path, &file)?;
    }
    let mut report = VerifyReport::default();
    let meta_path = companion(path, "meta");
    match meta::read(&meta_path) {
        Ok(m) if m.uuid.is_none() && meta_path.exists() => report.push(
            Severity::Warning,
            &meta_path,
            None,
            "metadata has no uuid; the next write assigns one",
        ),
        Ok(_) => {}
        Err(e) => report.push(Severity::Damage, &meta_path, None, e.to_string()),
    }
    let dead_path = companion(path, "dead");
    let empty = BTreeSet::new();
    let dead = scan_file(&dead_path, &mut report, &empty, false)?;
    let dead_seen = dead.as_ref().map(|d| d.seen.clone()).unwrap_or_default();
    let main = scan_file(path, &mut report, &dead_seen, true)?;
    let damaged_lines = report
        .findings
        .iter()
        .any(|f| f.severity == Severity::Damage && !f.repairable);
    if let Some(main) = &main {
        for (line, id, mark) in main.non_monotonic.iter().take(MAX_LISTED) {
            report.push(
                Severity::Damage,
                path,
                Some(*line),
                format!("item {id} first appears after id {mark}: ids must only grow (an id was reused or lines were reordered)"),
            );
        }
        let dead_live: BTreeSet<u64> = dead.as_ref().map(|d| d.live.clone()).unwrap_or_default();
        let overlap: Vec<u64> = main.live.intersection(&dead_live).copied().collect();
        if !overlap.is_empty() {
            report.push(
                Severity::Warning,
                path,
                None,
                format!(
                    "{} item(s) are both pending and dead ({}): a move between the files was interrupted; they count as dead letters",
                    overlap.len(),
                    overlap
                        .iter()
                        .take(10)
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if !damaged_lines {
            let pending = main.live.difference(&dead_live).count() as u64;
            report.pending = Some(pending);
            report.dead_letters = Some(dead_live.len() as u64);
            let hw = main
                .high_water
                .max(dead.as_ref().map_or(0, |d| d.high_water));
            report.push(
                Severity::Info,
                path,
                None,
                format!(
                    "{pending} pending, {} dead, {} records in the main file, id high-water mark {hw}",
                    dead_live.len(),
                    main.records
                ),
            );
        }
    }
    for tmp in ["compact.tmp", "dead.compact.tmp", "meta.tmp"] {
        let p = companion(path, tmp);
        if p.exists() {
            report.push(
                Severity::Info,
                &p,
                None,
                "leftover temporary file of an interrupted compaction or metadata update; safe to delete",
            );
        }
    }
    Ok(report)
}
