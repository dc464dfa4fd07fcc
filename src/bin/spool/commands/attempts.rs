//! `spool attempts`: show or set an item's attempt count.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::attempts::{attempts, AttemptsOptions};
use spool::{ItemId, OpenMode};

/// Show or set an item's durable attempt count
///
/// Prints the count (after --set, the new count). Replay dead-letters an
/// item whose count reaches its --max-attempts; setting the count to 0
/// gives an item a fresh budget. An unknown id is exit 65. With --json
/// {"id": N, "attempts": N, "previous": N|null}.
///
/// Examples:
///   spool attempts 17
///   spool attempts 17 --set 0
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct AttemptsArgs {
    /// The item's id
    #[arg(value_name = "ID", allow_negative_numbers = true, value_parser = crate::whole::Whole::<ItemId>::at_least(1, 42))]
    id: ItemId,

    /// Set the count to N
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::any(1))]
    set: Option<u32>,
}

#[derive(serde::Serialize)]
struct AttemptsJson {
    id: ItemId,
    attempts: u32,
    previous: Option<u32>,
}

pub fn run(args: AttemptsArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let (mode, action) = match args.set {
        Some(_) => (OpenMode::ReadWrite, "set attempts in"),
        None => (OpenMode::ReadOnly, "read attempts in"),
    };
    let spool = ctx.open_for_one(mode, action, false)?;
    let r = attempts(
        &*spool,
        &AttemptsOptions {
            id: args.id,
            set: args.set,
        },
    )
    .map_err(|e| {
        ctx.fail_noting(&spool, action, e)
            .hint("`spool list` shows the pending items and their ids")
    })?;
    ctx.notices(&spool);
    if ctx.json {
        ctx.out.json(&AttemptsJson {
            id: r.id,
            attempts: r.attempts,
            previous: r.previous,
        })
    } else {
        ctx.out.line(&r.attempts.to_string())
    }
}
