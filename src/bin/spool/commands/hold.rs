//! `spool hold`: keep items but make replay skip them.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::hold::{hold, HoldOptions};
use spool::ops::ids::IdArg;
use spool::OpenMode;

/// Put pending items on hold: kept, listed and counted, but not replayed
///
/// The operator's "don't send this yet", without deleting anything;
/// `spool release` undoes it. Unknown ids are named on stderr and make
/// the exit status 65 (the known ones are still held). `-` reads ids
/// from stdin, one per line.
///
/// Examples:
///   spool hold 17
///   spool list --key customer-9 --json | jq -r .id | spool hold -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct HoldArgs {
    /// Item ids, or - to read ids from stdin (one per line)
    #[arg(value_name = "ID", required = true, num_args = 1.., allow_negative_numbers = true, value_parser = clap::value_parser!(IdArg))]
    ids: Vec<IdArg>,
}

pub fn run(args: HoldArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "hold items in";
    let ids = ctx.resolve_ids(&args.ids, ACTION)?;
    let spool = ctx.open_for_one(OpenMode::ReadWrite, ACTION, ids.is_empty())?;
    let report =
        hold(&*spool, &HoldOptions { ids }).map_err(|e| ctx.fail_noting(&spool, ACTION, e))?;
    ctx.notices(&spool);
    ctx.finish_ids(&report, ACTION, "held", "held")
}
