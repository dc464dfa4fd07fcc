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
/// 65 and nothing is removed. Removing an item releases its key.
///
/// Examples:
///   spool done 17 18
///   spool list --json | jq -r 'select(.attempts > 10) | .id' | spool done -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DoneArgs {
    /// Item ids, or - to read ids from stdin (one per line)
    #[arg(value_name = "ID", required = true, num_args = 1.., value_parser = clap::value_parser!(IdArg))]
    ids: Vec<IdArg>,
}

pub fn run(args: DoneArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "mark items done in";
    let ids = ctx.resolve_ids(&args.ids, ACTION)?;
    let spool = ctx.open(OpenMode::ReadWrite, ACTION)?;
    let report = done(&*spool, &DoneOptions { ids }).map_err(|e| ctx.fail(ACTION, e))?;
    ctx.notices(&spool);
    ctx.finish_ids(&report, ACTION, "marked done", "done")
}
