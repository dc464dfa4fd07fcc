//! `spool size`: the number of pending items.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::OpenMode;

/// Print the number of pending items (held ones included)
///
/// Only the number, so scripts can use it directly; with --json
/// {"size": N}. Never creates or changes the spool.
///
/// Example:
///   [ "$(spool size)" -gt 1000 ] && echo "backlog"
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct SizeArgs {}

pub fn run(_args: SizeArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, "read the size of")?;
    let n = spool::ops::size::size(&*spool).map_err(|e| ctx.fail("read the size of", e))?;
    if ctx.json {
        ctx.out.json(&serde_json::json!({ "size": n }))
    } else {
        ctx.out.line(&n.to_string())
    }
}
