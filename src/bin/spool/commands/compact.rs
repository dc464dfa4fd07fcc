//! `spool compact`: shrink a spool without losing anything.

use super::Ctx;
use crate::exit::CliError;
use crate::render;
use clap::Args;
use spool::ops::checkpoint::CheckpointJson;
use spool::ops::compact::{compact, CompactOptions};
use spool::units::parse_duration;
use spool::{BackendKind, OpenMode};
use std::time::{Duration, Instant};

/// The size line: what the files (or PostgreSQL's tables) measured
/// before and after, and what changed — saved, grew, or unchanged.
fn size_line(backend: BackendKind, before: u64, after: u64) -> (&'static str, String) {
    let change = match after.cmp(&before) {
        std::cmp::Ordering::Less => format!("{} saved", render::bytes(before - after)),
        std::cmp::Ordering::Greater => format!("grew by {}", render::bytes(after - before)),
        std::cmp::Ordering::Equal => "unchanged".to_string(),
    };
    let sizes = format!("{} -> {}", render::bytes(before), render::bytes(after));
    match backend {
        // VACUUM (without FULL) keeps the space it frees inside the
        // tables for new rows and may add free-space and visibility maps.
        BackendKind::Postgres => (
            "tables",
            format!(
                "{sizes} ({change}; PostgreSQL keeps the space VACUUM frees for new rows \
                 instead of returning it)"
            ),
        ),
        _ => ("size", format!("{sizes} ({change})")),
    }
}

/// Rewrite an NDJSON spool without dead records, or VACUUM a SQLite spool
///
/// NDJSON: rewrites the main and dead-letter files last-write-wins (the
/// last line of each pending item is copied as it is), each
/// into a temporary file that is synced and renamed over the original
/// (then the directory is synced), so a crash at any point leaves either
/// the old or the new file. Every pending item, dead letter, key and
/// attempt count is kept, and so is the id high-water mark (a trailing
/// done line, as the reference format does): no id is ever issued twice.
/// Other processes that write meanwhile wait for the spool's lock and
/// then continue on the new file (they lose nothing). A torn trailing line left by a crash
/// is dropped (it was never committed).
///
/// SQLite: VACUUM (rebuilds the database without free pages), then a
/// truncating WAL checkpoint. A reader holding the WAL is reported, not
/// an error (see `spool checkpoint`).
///
/// PostgreSQL: VACUUM (ANALYZE) of the spool schema's tables, reporting
/// the dead tuples before and after and the tables' size. That size need
/// not shrink, and may grow: PostgreSQL keeps the space VACUUM frees for
/// new rows, and the report says which it was (saved, grew, unchanged).
///
/// With --json one object: spool, backend, bytes_before, bytes_after,
/// bytes_saved, records_before, records_after (NDJSON lines; null for
/// SQLite), pending, dead_letters, delivered_retained (delivered items
/// kept for their retention window), pruned_delivered (delivered items
/// whose retention window ended, deleted first), high_water, dropped_torn_tail
/// ({line, offset, bytes, reason} or null), checkpoint (SQLite: the
/// object `spool checkpoint --json` prints; null for NDJSON and
/// PostgreSQL), dead_tuples_before, dead_tuples_after (PostgreSQL; null
/// for the files), notices
/// (what was repaired on the way, such as a torn tail cut; also on
/// stderr).
///
/// Examples:
///   spool -s outbox.ndjson compact
///   spool compact --json | jq .bytes_saved
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CompactArgs {
    /// Wait up to DURATION for another process's lock, then exit 75
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    wait: Duration,
}

pub fn run(args: CompactArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "compact";
    // Reading the spool is most of the work on NDJSON: time it too. The
    // compaction streams an NDJSON spool itself; opening it does not read it.
    let started = Instant::now();
    let spool = ctx.open_keeping_notices(OpenMode::ReadWrite, ACTION, args.wait, true)?;
    let r =
        compact(&spool, &CompactOptions { wait: args.wait }).map_err(|e| ctx.fail(ACTION, e))?;
    let took = started.elapsed();
    for n in &r.notices {
        ctx.note(n);
    }
    ctx.detail(&format!("compaction took {}", render::duration(took)));
    if ctx.json {
        return ctx.out.json(&r.json());
    }
    let mut lines: Vec<(&str, String)> = vec![
        (
            "spool",
            format!("{} ({})", r.path.display(), r.backend.name()),
        ),
        size_line(r.backend, r.bytes_before, r.bytes_after),
    ];
    if let (Some(b), Some(a)) = (r.records_before, r.records_after) {
        lines.push(("records", format!("{b} -> {a} lines")));
    }
    if let (Some(b), Some(a)) = (r.dead_tuples_before, r.dead_tuples_after) {
        lines.push((
            "dead tuples",
            format!("{b} -> {a} (VACUUM (ANALYZE) of the schema's tables)"),
        ));
    }
    let retained = match r.delivered_retained {
        0 => String::new(),
        1 => ", 1 delivered item retained".to_string(),
        n => format!(", {n} delivered items retained"),
    };
    lines.push((
        "kept",
        format!(
            "{} pending, {} dead letters{retained}, id high-water mark {}",
            r.pending, r.dead_letters, r.high_water
        ),
    ));
    if r.pruned_delivered > 0 {
        lines.push((
            "pruned",
            format!(
                "{} delivered items whose retention window ended",
                r.pruned_delivered
            ),
        ));
    }
    if let Some(t) = &r.dropped_torn_tail {
        lines.push((
            "dropped",
            format!(
                "torn trailing line {} ({} bytes, never committed): {}",
                t.line, t.bytes, t.reason
            ),
        ));
    }
    if let Some(c) = &r.checkpoint {
        let j = CheckpointJson::from(c);
        lines.push((
            "checkpoint",
            format!(
                "WAL {} -> {}, {}",
                render::bytes(j.wal_bytes_before),
                render::bytes(j.wal_bytes_after),
                match &j.note {
                    None => "complete".to_string(),
                    Some(n) => n.clone(),
                }
            ),
        ));
    }
    lines.push(("took", render::duration(took)));
    for (k, v) in lines {
        ctx.out.line(&format!("{k:<11} {v}"))?;
    }
    Ok(())
}
