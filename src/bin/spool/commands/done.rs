//! `spool done`: remove pending items by id.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::done::{done, DoneOptions};
use spool::ops::ids::IdArg;
use spool::OpenMode;

/// Remove pending items by id (an operator's decision)
///
/// Known ids are removed in one commit; unknown ids are named on stderr
/// and make the exit status 65 (the known ones are still removed). `-`
/// reads ids from stdin, one per line; a line that is not an id is exit
/// 65 and nothing is removed. Removing an item releases its key — unless
/// the spool keeps delivered items (`spool config retain 7d`): then it is
/// kept as delivered, evidence "marked done", and its key keeps
/// deduplicating until the window ends.
///
/// An item in flight to a push receiver (`replay --push` gave it a
/// sequence number that the receiver has not acknowledged yet) may
/// already be applied there: removing it is refused (exit 65, nothing
/// changed) unless --force. Forced, its number becomes a skip entry that
/// the next push sends, so that the receiver moves past it.
///
/// Examples:
///   spool done 17 18
///   spool done --force 42
///   spool list --json | jq -r 'select(.attempts > 10) | .id' | spool done -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DoneArgs {
    /// Item ids, or - to read ids from stdin (one per line)
    #[arg(value_name = "ID", required = true, num_args = 1.., allow_negative_numbers = true, value_parser = clap::value_parser!(IdArg))]
    ids: Vec<IdArg>,

    /// Also remove items in flight to a push receiver (it is told to skip their numbers)
    #[arg(long)]
    force: bool,
}

pub fn run(args: DoneArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "mark items done in";
    let ids = ctx.resolve_ids(&args.ids, ACTION)?;
    let spool = ctx.open_for_one(OpenMode::ReadWrite, ACTION, ids.is_empty())?;
    let report = done(
        &*spool,
        &DoneOptions {
            ids,
            force: args.force,
        },
    )
    .map_err(|e| ctx.fail_noting(&spool, ACTION, e))?;
    ctx.notices(&spool);
    if !report.abandoned.is_empty() {
        let seqs: Vec<String> = report
            .abandoned
            .iter()
            .map(|(_, s)| s.to_string())
            .collect();
        ctx.note(&format!(
            "abandoned {} in-flight item(s): the next push tells the receiver to skip sequence {}",
            report.abandoned.len(),
            seqs.join(", ")
        ));
    }
    ctx.finish_ids(&report.ids, ACTION, "marked done", "done")
}
