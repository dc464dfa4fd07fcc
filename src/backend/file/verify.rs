//! `verify` for NDJSON spools: every line of the main, dead-letter and
//! delivered files, not just up to the first problem, with line numbers;
//! and the derived index `<spool>.idx` against what the files hold.

use super::format::{parse_delivered, parse_line, Line};
use super::index::{Entry, FileNow, Index, Unusable, Which};
use super::io::RealIo;
use super::{meta, scan};
use crate::backend::companion;
use crate::error::{Error, Result};
use crate::verify::{Severity, VerifyReport};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// At most this many bad lines are listed per file.
const MAX_LISTED: usize = 20;

#[derive(Default)]
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
    /// The last eviction count line's count.
    evicted: Option<u64>,
    /// Live items whose key holds a NUL byte (stored by an older
    /// version): id → line.
    nul_keys: BTreeMap<u64, u64>,
    /// Ids whose `done` line removed a live item with a retained
    /// delivery (main file), or any `done` line's id (delivered file:
    /// the records it pruned).
    done_retained: BTreeSet<u64>,
}

fn scan_file(
    path: &Path,
    report: &mut VerifyReport,
    also_seen: &BTreeSet<u64>,
    check_order: bool,
    parse: fn(&[u8]) -> std::result::Result<Line, String>,
    main: Option<&std::fs::File>,
) -> Result<Option<FileScan>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, "read", e)),
    };
    let _ = file.lock_shared();
    let len = super::file_len(&file, path)?;
    // An unfinished batch at the end is left out, as every read leaves it.
    let mut limit = match scan::unfinished_batch(path, &super::io::RealIo, &file, 0, len) {
        Ok(limit) => limit,
        Err(e) => {
            report.push(Severity::Damage, path, None, e.to_string());
            None
        }
    };
    // So is a move the main file never committed (a companion file's).
    let mut moved_from = None;
    if let Some(main_file) = main {
        let main_path = path.with_extension("");
        let ino = std::os::unix::fs::MetadataExt::ino(
            &main_file
                .metadata()
                .map_err(|e| Error::io(&main_path, "inspect", e))?,
        );
        let moved = scan::unfinished_move(&RealIo, path, &file, &main_path, main_file, ino)?;
        if let Some(start) = moved {
            limit = Some(limit.map_or(start, |l| l.min(start)));
            moved_from = Some(start);
        }
    }
    let mut reader = BufReader::new((&file).take(limit.unwrap_or(len)));
    let mut out = FileScan::default();
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
        let (content, has_newline) = scan::content_of(&buf);
        let line = match scan::classify(content, parse) {
            scan::Class::Blank => continue,
            scan::Class::Nul => {
                nul_lines.push(line_no);
                continue;
            }
            scan::Class::Parsed(line) => Ok(line),
            scan::Class::Bad(b) => Err(b.reason),
        };
        first_content_line.get_or_insert(line_no);
        last_content_line = line_no;
        match line {
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
                if crate::item::key_problem(&item.key).is_some() {
                    out.nul_keys.insert(id, line_no);
                } else {
                    out.nul_keys.remove(&id);
                }
            }
            Ok(Line::Done { id, delivery }) => {
                out.records += 1;
                if (out.live.remove(&id) && delivery.is_some()) || !check_order {
                    out.done_retained.insert(id);
                }
                out.nul_keys.remove(&id);
                out.high_water = out.high_water.max(id);
            }
            Ok(Line::Push(_)) | Ok(Line::Client(_)) => out.records += 1,
            Ok(Line::Evicted(n)) => {
                out.records += 1;
                out.evicted = Some(n);
            }
            Err(reason) => bad.push((line_no, reason, has_newline)),
        }
    }
    let _ = file.unlock();
    if let Some(start) = moved_from {
        report.push_repairable(path, Some(line_no + 1), format!(
                "the lines from byte {start} on are a move that a crash interrupted before the main file committed it; `spool verify --repair` or the next write cuts them"
            ));
    }
    if let Some((id, line)) = out.nul_keys.iter().next() {
        report.push(
            Severity::Warning,
            path,
            Some(*line),
            nul_key_finding(out.nul_keys.len() as u64, *id),
        );
    }
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
            report.push_repairable(path, Some(*line), format!(
                    "torn trailing line left by an interrupted write ({reason}); `spool verify --repair` or the next write cuts it"
                ));
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
        report.push_repairable(path, Some(*line), "NUL bytes at the end, left by a crash before the data reached the disk; `spool verify --repair` or the next write cuts them");
    }
    if let Some(at) = limit {
        report.push_repairable(path, Some(line_no + 1), format!(
                "unfinished batch at byte {at} ({} bytes): a multi-line write was interrupted, none of it counts; `spool verify --repair` or the next write cuts it",
                len - at
            ));
    }
    Ok(Some(out))
}

/// The warning about `count` items whose key holds a NUL byte, the first
/// being `first` (shared with the SQLite backend's check).
pub(crate) fn nul_key_finding(count: u64, first: u64) -> String {
    format!(
        "{count} item(s) carry an idempotency key with a NUL byte (first: id {first}), stored by \
         an older version; no key may hold one any more: they stay and dedup as before, but \
         `replay --push` dead-letters them unsent and `import` refuses them (to keep one, \
         re-enqueue its payload under a new key)"
    )
}

/// Check the NDJSON spool at `path` without changing anything.
pub fn verify_path(path: &Path) -> Result<VerifyReport> {
    if !path.exists() {
        return Err(Error::NotFound {
            path: path.to_path_buf(),
        });
    }
    // A shared lock for the whole check: no writer appends between the
    // scans of the files and the check of the index.
    let held = std::fs::File::open(path).ok();
    if let Some(file) = &held {
        scan::check_head(path, &RealIo, file)?;
        let _ = file.lock_shared();
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
    let delivered_path = companion(path, "delivered");
    let empty = BTreeSet::new();
    let main_file = held.as_ref();
    let dead = scan_file(
        &dead_path,
        &mut report,
        &empty,
        false,
        parse_line,
        main_file,
    )?;
    let delivered = scan_file(
        &delivered_path,
        &mut report,
        &empty,
        false,
        parse_delivered,
        main_file,
    )?;
    let mut moved_seen = dead.as_ref().map(|d| d.seen.clone()).unwrap_or_default();
    if let Some(d) = &delivered {
        moved_seen.extend(d.seen.iter().copied());
    }
    let main = scan_file(path, &mut report, &moved_seen, true, parse_line, None)?;
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
                    first_ids(&overlap)
                ),
            );
        }
        let mut delivered_live: BTreeSet<u64> = delivered
            .as_ref()
            .map(|d| d.live.clone())
            .unwrap_or_default();
        // The retained records the main file holds: deliveries whose
        // record the delivered file neither holds nor held and pruned.
        for id in &main.done_retained {
            let in_file = delivered
                .as_ref()
                .is_some_and(|d| d.seen.contains(id) || d.done_retained.contains(id));
            if !in_file && !dead_live.contains(id) {
                delivered_live.insert(*id);
            }
        }
        let unfinished: Vec<u64> = main
            .live
            .intersection(&delivered_live)
            .copied()
            .filter(|id| !dead_live.contains(id))
            .collect();
        if !unfinished.is_empty() {
            report.push(
                Severity::Warning,
                path,
                None,
                format!(
                    "{} item(s) are both pending and delivered ({}): a move between the files was interrupted; they count as delivered, and their `done` lines are written before their records are pruned",
                    unfinished.len(),
                    first_ids(&unfinished)
                ),
            );
        }
        if !damaged_lines {
            let pending_ids: BTreeSet<u64> = main
                .live
                .iter()
                .copied()
                .filter(|id| !dead_live.contains(id) && !delivered_live.contains(id))
                .collect();
            let pending = pending_ids.len() as u64;
            report.pending = Some(pending);
            report.dead_letters = Some(dead_live.len() as u64);
            let hw = main
                .high_water
                .max(dead.as_ref().map_or(0, |d| d.high_water))
                .max(delivered.as_ref().map_or(0, |d| d.high_water));
            let retained = match delivered_live.len() {
                0 => String::new(),
                n => format!(", {n} delivered retained"),
            };
            report.push(
                Severity::Info,
                path,
                None,
                format!(
                    "{pending} pending, {} dead{retained}, {} records in the main file, id high-water mark {hw}",
                    dead_live.len(),
                    main.records
                ),
            );
            let want = Expected {
                pending: &pending_ids,
                dead: dead_live.len() as u64,
                delivered: delivered_live.len() as u64,
                high_water: hw,
                records: main.records,
                evicted_total: dead.as_ref().and_then(|d| d.evicted).unwrap_or(0),
            };
            if let Err(e) = check_index(path, &mut report, &want) {
                report.push_repairable(
                    &companion(path, "idx"),
                    None,
                    format!("{e}; `spool verify --repair` or the next write rebuilds the index"),
                );
            }
        } else if companion(path, "idx").exists() {
            report.push(
                Severity::Info,
                &companion(path, "idx"),
                None,
                "the index was not checked: the spool files are damaged",
            );
        }
    }
    drop(held);
    for tmp in [
        "compact.tmp",
        "dead.compact.tmp",
        "delivered.compact.tmp",
        "meta.tmp",
        "idx.tmp",
    ] {
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

/// The first ten of `ids`, as a list for a finding.
fn first_ids(ids: &[u64]) -> String {
    let first: Vec<String> = ids.iter().take(10).map(u64::to_string).collect();
    first.join(", ")
}

/// What the files hold, for the comparison with the index.
struct Expected<'a> {
    pending: &'a BTreeSet<u64>,
    dead: u64,
    delivered: u64,
    high_water: u64,
    records: u64,
    evicted_total: u64,
}

/// Check the derived index against the files: that it is one (version,
/// identity, fingerprint, a sound database), how far behind it is, and —
/// after taking in the tail inside a transaction that is rolled back —
/// that it holds the same pending ids, counts and high-water mark as the
/// scan found. Findings about the index are repairable: `--repair`
/// rebuilds it from the files. Nothing is written.
fn check_index(path: &Path, report: &mut VerifyReport, want: &Expected<'_>) -> Result<()> {
    let idx = companion(path, "idx");
    let damage = |report: &mut VerifyReport, message: String| {
        report.push_repairable(&idx, None, message);
    };
    if std::fs::read(super::index::mark_path(&idx)).is_ok_and(|m| m != b"0") {
        report.push(
            Severity::Warning,
            &idx,
            None,
            "a write to the index was interrupted (its write mark is set): readers do without it until the next write rebuilds it",
        );
        return Ok(());
    }
    if super::index::journal_path(&idx).exists() {
        report.push(
            Severity::Warning,
            &idx,
            None,
            "a write to the index was interrupted (its journal is left): readers do without it until the next write rolls it back",
        );
        return Ok(());
    }
    let ix = match Index::open_shared(&idx, false, std::time::Duration::from_secs(10)) {
        Ok(ix) => ix,
        Err(Unusable::Missing) => {
            report.push(
                Severity::Info,
                &idx,
                None,
                "no index yet: the next write builds it from the files",
            );
            return Ok(());
        }
        Err(Unusable::Invalid(why)) => {
            damage(
                report,
                format!("the index cannot be used: {why}; `spool verify --repair` or the next write rebuilds it"),
            );
            return Ok(());
        }
    };
    let main = std::fs::File::open(path).map_err(|e| Error::io(path, "read", e))?;
    let dead_path = companion(path, "dead");
    let delivered_path = companion(path, "delivered");
    let dead = super::open_existing(&dead_path, false)?;
    let delivered = super::open_existing(&delivered_path, false)?;
    let main_now = FileNow::of(&main, path)?;
    let dead_now = dead
        .as_ref()
        .map(|f| FileNow::of(f, &dead_path))
        .transpose()?;
    let delivered_now = (delivered.as_ref())
        .map(|f| FileNow::of(f, &delivered_path))
        .transpose()?;
    ix.begin(false)?;
    let result = compare(&ix, path, main_now, dead_now, delivered_now, report, want);
    let _ = ix.rollback();
    match result? {
        Ok(()) => {}
        Err(why) => damage(
            report,
            format!("{why}; `spool verify --repair` or the next write rebuilds the index"),
        ),
    }
    Ok(())
}

/// [`check_index`]'s comparison of the index (in its transaction) with
/// the spool files at `path` as `verify` found them.
fn compare(
    ix: &Index,
    path: &Path,
    main: FileNow<'_>,
    dead: Option<FileNow<'_>>,
    delivered: Option<FileNow<'_>>,
    report: &mut VerifyReport,
    want: &Expected<'_>,
) -> Result<std::result::Result<(), String>> {
    let idx = companion(path, "idx");
    let [main_row, dead_row, delivered_row] =
        match ix.check_files(&RealIo, main, dead, delivered, false, &Default::default())? {
            Ok(rows) => rows,
            Err(why) => {
                return Ok(Err(format!(
                    "the index does not describe these files: {why}"
                )))
            }
        };
    if let Some(problem) = ix.quick_check()? {
        return Ok(Err(format!("the index database is damaged: {problem}")));
    }
    if !ix.written_this_boot()? {
        report.push(
            Severity::Warning,
            &idx,
            None,
            "the index was last written before the machine restarted: the next write rebuilds it (until then, readers build a private one)",
        );
    }
    // Take in the tails, as every reader does, and roll back.
    let mut behind = 0;
    let mut records = main_row.records;
    let mut ap = ix.applier()?;
    let (dead_path, delivered_path) = (companion(path, "dead"), companion(path, "delivered"));
    for (which, file_path, now, row) in [
        (Which::Dead, dead_path.as_path(), dead, &dead_row),
        (
            Which::Delivered,
            delivered_path.as_path(),
            delivered,
            &delivered_row,
        ),
        (Which::Main, path, Some(main), &main_row),
    ] {
        let Some(now) = now else { continue };
        if now.len <= row.upto {
            continue;
        }
        let s = scan::scan_tail_with(
            file_path,
            &RealIo,
            now.file,
            row.upto,
            now.len,
            row.lines,
            row.needs_newline,
            Entry::parser(which),
            |e, off, l| ap.apply(which, e, off, l),
        )?;
        behind += s.end - row.upto;
        if which == Which::Main {
            records += s.records;
        }
    }
    ap.finish()?;
    if behind > 0 {
        report.push(
            Severity::Info,
            &idx,
            None,
            format!("the index is {behind} bytes behind the files (lines another process or an interrupted write left); the next command takes them in"),
        );
    }
    let mut differences = Vec::new();
    for (got, wanted, name) in [
        (ix.depth()?, want.pending.len() as u64, "pending items"),
        (ix.dead_count()?, want.dead, "dead letters"),
        (ix.delivered_count()?, want.delivered, "delivered records"),
        (ix.high_water()?, want.high_water, "high-water mark"),
        (ix.evicted_total()?, want.evicted_total, "eviction count"),
        (records, want.records, "records"),
    ] {
        if got != wanted {
            differences.push(match name {
                "high-water mark" | "eviction count" => format!("{name} {got} instead of {wanted}"),
                _ => format!("{got} {name} instead of {wanted}"),
            });
        }
    }
    let mut extra = 0u64;
    let mut seen = 0u64;
    ix.pending_ids(&mut |id| {
        if want.pending.contains(&id) {
            seen += 1;
        } else {
            extra += 1;
        }
    })?;
    if extra > 0 || seen != want.pending.len() as u64 {
        differences.push(format!(
            "{extra} pending ids the files do not hold, {} they hold missing",
            want.pending.len() as u64 - seen
        ));
    }
    if !differences.is_empty() {
        return Ok(Err(format!(
            "the index does not agree with the files: {}",
            differences.join(", ")
        )));
    }
    report.push(
        Severity::Info,
        &idx,
        None,
        format!(
            "the index agrees with the files (index version {})",
            super::index::INDEX_VERSION
        ),
    );
    Ok(Ok(()))
}
