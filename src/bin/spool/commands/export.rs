//! `spool export`: the whole spool as NDJSON records.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::export::export;
use spool::ops::output::Destination;
use spool::OpenMode;
use std::path::PathBuf;

/// Write every pending, held, dead and retained delivered item as NDJSON records
///
/// The first line is the spool header, the spool's push identity:
/// {"spool": {"uuid": "…", "push": {"last_assigned": N, "acked": M,
/// "skips": […]}}} (its uuid, the highest push sequence number assigned,
/// the receiver's acknowledged watermark, abandoned numbers). Then one
/// record per line: the item object of --json (id, payload or
/// payload_base64, key, attempts, enqueued_at, next_retry_at, last_error,
/// held, push_seq, group, coalesce_key) plus "state": "pending", "held",
/// "dead" or "delivered"; dead letters add dead_at, delivered items kept
/// by a retention window (config retain) add delivered_at and evidence.
/// Pending items come first, then dead letters, then delivered items,
/// read page by page (any spool size).
///
/// `spool import` reads the records back into a spool of either backend;
/// `spool import --identity` into a fresh spool keeps the identity, so a
/// moved spool continues its push numbering. With -o the file is written
/// to a temporary file, synced and renamed into place. Never creates or
/// changes the spool. Stop replays first for an exact copy: an item
/// dead-lettered while the export runs can appear twice (never zero
/// times).
///
/// Examples:
///   spool -s old.db export -o spool.export
///   spool -s old.db export | spool -s new.ndjson import -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ExportArgs {
    /// Write to FILE (replaced atomically) instead of stdout
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: ExportArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "export";
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let r = match &args.output {
        Some(path) => export(&*spool, Destination::File(path)).map_err(|e| ctx.fail(ACTION, e))?,
        None => export(
            &*spool,
            Destination::Writer {
                writer: &mut ctx.out,
                label: "stdout",
            },
        )
        .map_err(|e| ctx.fail_output(ACTION, e))?,
    };
    if args.output.is_some() {
        ctx.note(&format!(
            "exported {} records ({} pending, {} held, {} dead) to {}",
            r.total(),
            r.pending,
            r.held,
            r.dead,
            r.destination
        ));
        if ctx.json {
            ctx.out.json(&serde_json::json!({
                "records": r.total(),
                "pending": r.pending,
                "held": r.held,
                "dead": r.dead,
                "output": r.destination,
            }))?;
        }
    }
    Ok(())
}
