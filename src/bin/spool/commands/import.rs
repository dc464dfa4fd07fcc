//! `spool import`: add the records of an export to a spool.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::import::{import_input, ImportInput};
use spool::OpenMode;
use std::path::PathBuf;

/// Add the records of `spool export` to this spool (all or nothing)
///
/// Reads NDJSON records from FILE, or from stdin with -, and checks all
/// of them before changing anything: one malformed record is exit 65
/// naming its line, and nothing is imported (the spool is not even
/// created). Then stores them in one atomic commit, keeping payloads,
/// keys, attempts, last errors, retry times, hold state and dead letters.
/// A record keeps its id when the spool never issued it (it is above the
/// spool's high-water mark); otherwise it gets a new id, and the report
/// lists the renumbering. A pending record whose key a pending item
/// already carries stores nothing (a dedup hit, noted on stderr). The
/// depth bound does not apply (the items were accepted once). Creates the
/// spool if it is missing, like enqueue. Records without "state" import
/// too: with dead_at they are dead, with "held": true held, else pending
/// (so `drain` and `dlq export` output can be imported).
///
/// With --json one object: records, imported, kept_ids, renumbered
/// [{from, to}], deduplicated [{from, existing, key}], pending, held,
/// dead.
///
/// Examples:
///   spool -s new.ndjson import spool.export
///   spool -s old.db export | spool -s new.ndjson import -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ImportArgs {
    /// The export to read, or - for stdin
    #[arg(value_name = "FILE")]
    input: PathBuf,
}

pub fn run(args: ImportArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "import into";
    // Every record is checked before the spool is opened; the records
    // are then streamed into one commit (stdin through a spill file
    // beside the spool), so memory stays bounded whatever the size.
    let input = if args.input.as_os_str() == "-" {
        let dir = match ctx.spool.parent() {
            Some(d) if !d.as_os_str().is_empty() && d.is_dir() => d.to_path_buf(),
            Some(d) if d.as_os_str().is_empty() => std::path::PathBuf::from("."),
            _ => std::env::temp_dir(),
        };
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        ImportInput::spill(&mut lock, "stdin", &dir)
    } else {
        ImportInput::file(&args.input)
    }
    .map_err(|e| ctx.fail(ACTION, e))?;
    let spool = ctx.open(OpenMode::Create, ACTION)?;
    let r = import_input(&*spool, &input).map_err(|e| ctx.fail(ACTION, e))?;
    ctx.notices(&spool);
    for d in &r.deduplicated {
        ctx.note(&format!(
            "record {} deduplicated: pending item {} already carries its key {}; nothing stored for it",
            d.from,
            d.existing,
            spool::ops::preview::preview(d.key.as_bytes(), 80)
        ));
    }
    if ctx.json {
        return ctx.out.json(&r);
    }
    ctx.out.line(&format!(
        "imported {} of {} records ({} pending, {} held, {} dead): {} kept their ids, {} renumbered, {} deduplicated",
        r.imported,
        r.records,
        r.pending,
        r.held,
        r.dead,
        r.kept_ids,
        r.renumbered.len(),
        r.deduplicated.len()
    ))?;
    for n in &r.renumbered {
        ctx.out
            .line(&format!("renumbered {} -> {}", n.from, n.to))?;
    }
    Ok(())
}
