//! `spool drain`: the pending items as NDJSON, removing nothing.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::drain::{drain, DrainOptions};
use spool::ops::json::ItemJson;
use spool::OpenMode;

/// Print pending items as NDJSON, in enqueue order (removes nothing)
///
/// A non-destructive snapshot, as the reference `drain`: one JSON object
/// per line with id, payload (or payload_base64 when the payload is not
/// UTF-8), key, attempts, enqueued_at, next_retry_at, last_error and
/// held. Items are read page by page, so any spool size is fine. Never
/// creates or changes the spool.
///
/// Examples:
///   spool drain --limit 10
///   spool drain | jq -r 'select(.attempts > 0) | .id'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DrainArgs {
    /// Print at most N items
    #[arg(long, short = 'n', value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<usize>::any(20))]
    limit: Option<usize>,
}

pub fn run(args: DrainArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, "drain")?;
    for item in drain(&*spool, &DrainOptions { limit: args.limit }) {
        let item = item.map_err(|e| ctx.fail("drain", e))?;
        ctx.out.line(&ItemJson::item(&item).to_line())?;
    }
    Ok(())
}
