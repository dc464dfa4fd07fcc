//! `spool release`: let replay attempt held items again.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::ids::IdArg;
use spool::ops::release::{release, ReleaseOptions};
use spool::OpenMode;

/// Release held items so that replay attempts them again
///
/// Releasing an item that is not held is not an error. Unknown ids are
/// named on stderr and make the exit status 65 (the known ones are still
/// released). `-` reads ids from stdin, one per line.
///
/// Examples:
///   spool release 17
///   spool list --json | jq -r 'select(.held) | .id' | spool release -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ReleaseArgs {
    /// Item ids, or - to read ids from stdin (one per line)
    #[arg(value_name = "ID", required = true, num_args = 1.., allow_negative_numbers = true, value_parser = clap::value_parser!(IdArg))]
    ids: Vec<IdArg>,
}

pub fn run(args: ReleaseArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "release items in";
    let ids = ctx.resolve_ids(&args.ids, ACTION)?;
    let spool = ctx.open_for_one(OpenMode::ReadWrite, ACTION, ids.is_empty())?;
    let report = release(&*spool, &ReleaseOptions { ids })
        .map_err(|e| ctx.fail_noting(&spool, ACTION, e))?;
    ctx.notices(&spool);
    ctx.finish_ids(&report, ACTION, "released", "released")
}
