//! `spool init`: create a spool explicitly.

use super::Ctx;
use crate::exit::CliError;
use clap::Args;
use spool::ops::init::{init, InitOptions};

/// Create a new, empty spool
///
/// The path must not exist yet (otherwise exit 73, and the file is left
/// untouched) and its directory must exist (otherwise exit 73 too). The
/// backend follows the path: .ndjson or .jsonl makes an NDJSON file, any
/// other name a SQLite database; --backend overrides that. Other commands
/// find the backend from the file itself.
///
/// A depth bound given here is remembered by the spool: every later
/// enqueue that would take the number of pending items past it is refused
/// with exit 75 (enqueue --max-depth overrides it for one call), unless
/// --on-full drop-oldest makes room by moving the oldest pending item that
/// is not held and not in flight to the dead letters. Both are settings
/// `spool config` shows and changes later.
///
/// Examples:
///   spool -s /var/spool/app/outbox.db init --max-depth 10000
///   spool -s metrics.db init --max-depth 100000 --on-full drop-oldest
///   spool -s events.ndjson init
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct InitArgs {
    /// Refuse enqueues beyond N pending items (remembered by the spool)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    max_depth: Option<u64>,

    /// At max-depth: reject new items (exit 75), or drop-oldest (evict to the dead letters)
    #[arg(long, value_name = "POLICY", value_parser = ["reject", "drop-oldest"])]
    on_full: Option<String>,
}

#[derive(serde::Serialize)]
struct InitJson<'a> {
    spool: String,
    backend: &'a str,
    max_depth: Option<u64>,
    on_full: &'a str,
    uuid: &'a str,
}

pub fn run(args: InitArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let report = init(
        &ctx.spool,
        &InitOptions {
            backend: ctx.backend,
            max_depth: args.max_depth,
            on_full: args.on_full.as_deref().and_then(spool::OnFull::parse),
            clock: ctx.clock.clone(),
            allow_network_fs: ctx.allow_network_fs,
        },
    )
    .map_err(|e| ctx.fail("create spool", e))?;
    ctx.fs_warning();
    if ctx.json {
        ctx.out.json(&InitJson {
            spool: report.path.display().to_string(),
            backend: report.backend.name(),
            max_depth: report.max_depth,
            on_full: report.on_full.name(),
            uuid: &report.uuid,
        })?;
    } else {
        let bound = match (report.max_depth, report.on_full) {
            (Some(n), spool::OnFull::Reject) => format!(", max depth {n}"),
            (Some(n), policy) => format!(", max depth {n}, on full {}", policy.name()),
            (None, _) => String::new(),
        };
        ctx.note(&format!(
            "created {} spool {}{bound}",
            report.backend.name(),
            report.path.display()
        ));
    }
    Ok(())
}
