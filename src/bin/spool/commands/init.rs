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
/// find the backend from the file itself; an empty file (a touched
/// spool.db) takes it from its name, like a new path.
///
/// A depth bound given here is remembered by the spool: every later
/// enqueue that would take the number of pending items past it is refused
/// with exit 75 (enqueue --max-depth overrides it for one call), unless
/// --on-full drop-oldest makes room by moving the oldest pending item that
/// is not held and not in flight to the dead letters. --retain keeps
/// delivered items for a window (read-only; their keys still
/// deduplicate, so a re-run of a cron job that already delivered an
/// event stores nothing). All are settings `spool config` shows and
/// changes later.
///
/// Examples:
///   spool -s /var/spool/app/outbox.db init --max-depth 10000
///   spool -s metrics.db init --max-depth 100000 --on-full drop-oldest
///   spool -s events.ndjson init
///   spool -s audit.db init --retain 7d
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct InitArgs {
    /// Refuse enqueues beyond N pending items (remembered by the spool)
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<u64>::at_least(1, 1000))]
    max_depth: Option<u64>,

    /// At max-depth: reject new items (exit 75), or drop-oldest (evict to the dead letters)
    #[arg(long, value_name = "POLICY", value_parser = ["reject", "drop-oldest"])]
    on_full: Option<String>,

    /// Keep delivered items for this long (e.g. 7d; off: delete them, the default)
    #[arg(long, value_name = "WINDOW", value_parser = parse_retain)]
    retain: Option<RetainArg>,
}

/// A parsed --retain (clap needs a named type for an `Option` value).
#[derive(Clone, Copy, Debug)]
struct RetainArg(Option<std::time::Duration>);

fn parse_retain(s: &str) -> Result<RetainArg, String> {
    spool::item::parse_retain(s).map(RetainArg)
}

#[derive(serde::Serialize)]
struct InitJson<'a> {
    spool: String,
    backend: &'a str,
    max_depth: Option<u64>,
    on_full: &'a str,
    retain: String,
    uuid: &'a str,
}

pub fn run(args: InitArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let report = init(
        &ctx.spool,
        &InitOptions {
            backend: ctx.backend,
            max_depth: args.max_depth,
            on_full: args.on_full.as_deref().and_then(spool::OnFull::parse),
            retain: args.retain.and_then(|r| r.0),
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
            retain: spool::ops::config::retain_name(report.retain),
            uuid: &report.uuid,
        })?;
    } else {
        let bound = match (report.max_depth, report.on_full) {
            (Some(n), spool::OnFull::Reject) => format!(", max depth {n}"),
            (Some(n), policy) => format!(", max depth {n}, on full {}", policy.name()),
            (None, _) => String::new(),
        };
        let bound = match report.retain {
            Some(w) => format!(
                "{bound}, delivered items kept {}",
                spool::ops::config::retain_name(Some(w))
            ),
            None => bound,
        };
        ctx.note(&format!(
            "created {} spool {}{bound}",
            report.backend.title(),
            report.path.display()
        ));
    }
    Ok(())
}
