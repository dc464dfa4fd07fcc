//! `spool import`: add the records of an export to a spool.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::import::{import_input_with, ImportInput};
use spool::{IdentityOutcome, OpenMode, RecordState};
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
/// lists the renumbering. A record whose key the spool already has
/// stores nothing (a dedup hit, noted on stderr): a pending or held
/// record whose key a pending item carries, a dead record whose key a
/// dead letter carries, a delivered record whose key a retained delivered
/// item carries (the last two against what the spool held before the
/// import: an export's several dead letters of one key all come in). The
/// depth bound does not apply (the items were accepted once). Creates the
/// spool if it is missing, like enqueue. Records without "state" import
/// too: with dead_at they are dead, with "held": true held, else pending
/// (so `drain` and `dlq export` output can be imported).
///
/// A record without a key keeps its identity: when the export has a
/// spool header, it gets the key <source-uuid>:<source-id>, the
/// Idempotency-Key (and SPOOL_IDEMPOTENCY_KEY) that replay sent for it
/// from the exporting spool, whatever its state. So a receiver that
/// already took an item before the move deduplicates it, and importing
/// the same export twice stores nothing twice (each record is a dedup hit
/// the second time). An export without a header (older versions, drain
/// or dlq export output, hand-written NDJSON) names no source spool: its
/// key-less records stay key-less and are sent under this spool's
/// <uuid>:<id>, a new key; keys are compared only when non-empty, so a
/// second import of such records stores them again.
///
/// The push identity: an export begins with a spool header (the
/// exporting spool's uuid and push state, see `spool export`). A header
/// is allowed only as the first line; anywhere else it is a malformed
/// record. With --identity this spool takes the exporting spool's uuid
/// and push state, so that `replay --push` continues its sequence
/// numbers where the exporting spool left off and the receiver sees the
/// same client: the way to move an edge spool to another backend or
/// machine. Only a fresh spool may take an identity (a path that does
/// not exist yet, or one just made with `spool init`: no items, no dead
/// letters, never pushed); any other is refused with exit 73 and left
/// unchanged. Without --identity, a header of this spool's own uuid keeps
/// the push state (the larger counter and watermark of the two) and the
/// numbers of in-flight items; a header of another uuid is ignored (with
/// -v a note says so) and the items come in unsent, under this spool's
/// own identity. Exports without a header import as before.
///
/// With --json one object: records, imported, kept_ids, renumbered
/// [{from, to}], deduplicated [{from, existing, key, state}] (state: the
/// record's, pending, held, dead or delivered), pending, held, dead,
/// delivered, identity ("adopted", "kept", "ignored", or null without a
/// header).
///
/// Examples:
///   spool -s new.ndjson import spool.export
///   spool -s old.db export | spool -s new.ndjson import -
///   spool -s edge.db export | spool -s moved.ndjson import --identity -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ImportArgs {
    /// The export to read, or - for stdin
    #[arg(value_name = "FILE")]
    input: PathBuf,

    /// Take the exporting spool's uuid and push state (fresh spools only)
    #[arg(long)]
    identity: bool,
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
    if args.identity {
        // Checked before the spool is opened (and perhaps created).
        input.check_identity().map_err(|e| {
            ctx.fail(ACTION, e).hint(
                "export the spool again with this version of spool, or import without --identity",
            )
        })?;
    }
    let spool = ctx.open(OpenMode::Create, ACTION)?;
    let r = import_input_with(&*spool, &input, args.identity).map_err(|e| ctx.fail(ACTION, e))?;
    ctx.notices(&spool);
    if let (Some(h), Some(outcome)) = (input.header(), r.identity) {
        match outcome {
            IdentityOutcome::Adopted => ctx.detail(&format!(
                "took the identity of spool {}: push numbers continue after {}, acknowledged up to {}",
                h.uuid, h.push.last_assigned, h.push.acked
            )),
            IdentityOutcome::Kept => ctx.detail(&format!(
                "the export is of this spool ({}): its push state and in-flight numbers were kept",
                h.uuid
            )),
            IdentityOutcome::Ignored => ctx.detail(&format!(
                "the export is of spool {}, not this one: its push state was ignored and its items come in unsent (import --identity into a fresh spool keeps it)",
                h.uuid
            )),
        }
    }
    for d in &r.deduplicated {
        let holder = match d.state {
            RecordState::Pending | RecordState::Held => "pending item",
            RecordState::Dead => "dead letter",
            RecordState::Delivered => "retained delivered item",
        };
        ctx.note(&format!(
            "record {} deduplicated: {holder} {} already carries its key {}; nothing stored for it",
            d.from,
            d.existing,
            spool::ops::preview::preview(d.key.as_bytes(), 80)
        ));
    }
    if ctx.json {
        return ctx.out.json(&r);
    }
    ctx.out.line(&format!(
        "imported {} of {} records ({} pending, {} held, {} dead, {} delivered): {} kept their ids, {} renumbered, {} deduplicated",
        r.imported,
        r.records,
        r.pending,
        r.held,
        r.dead,
        r.delivered,
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
