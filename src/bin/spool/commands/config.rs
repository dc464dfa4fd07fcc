//! `spool config`: show or change the settings a spool remembers.

use super::Ctx;
use crate::exit::{self, CliError};
use clap::builder::PossibleValuesParser;
use clap::Args;
use spool::ops::config;
use spool::units::parse_duration;
use spool::OpenMode;
use std::time::Duration;

/// Show or change the settings the spool remembers (max-depth, on-full, retain, uuid)
///
/// Without KEY, every setting, one per line; with --json one object
/// {"max_depth": N|null, "on_full": "…", "retain": "…", "uuid": "…"}
/// (snake_case names, as in every JSON report: `jq .max_depth`). With
/// KEY, its value alone (for scripts); with --json an object of that one
/// setting. With KEY VALUE, set it, durably, for every later command.
///
/// Settings:
///   max-depth  the most pending items the spool accepts, or none
///              (enqueue --max-depth overrides it for one call)
///   on-full    at max-depth: reject (exit 75, the default) or
///              drop-oldest (evict the oldest pending item that is not
///              held nor in flight to the dead letters)
///   retain     how long delivered items are kept: off (the default) or
///              a window such as 7d, 12h, 1d12h; kept items are
///              read-only (list --state delivered, show) and their keys
///              still dedup enqueues until the window ends
///   uuid       the spool's identity: the prefix of the stable
///              idempotency keys (<uuid>:<id>) and its client id when it
///              pushes (replay --push); never set to a chosen value
///
/// Reading works on any spool that opens and writes nothing. A spool that
/// spool never wrote to (a touched spool.db, a reference-schema database)
/// shows the defaults and its uuid as "not assigned yet" (null in JSON);
/// the first write, setting a value included, assigns one.
///
/// `spool config uuid --regenerate` gives a spool that was copied from
/// another one (a cloned disk or VM image, a restored backup) its own
/// identity, so that both can push to the same receiver: the receiver
/// sees a new client, the items in flight are renumbered from 1, and
/// items without a key get new stable idempotency keys. It prints the new
/// uuid and takes the replay lock (waiting up to --wait).
///
/// Examples:
///   spool config
///   spool config max-depth 10000
///   spool config max-depth none
///   spool config on-full drop-oldest
///   spool config retain 7d
///   spool config uuid --regenerate
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ConfigArgs {
    /// The setting to show or change
    #[arg(value_name = "KEY", value_parser = key_parser())]
    key: Option<String>,

    /// The new value (max-depth: a number of items or none; on-full: reject or drop-oldest; retain: off or a window such as 7d)
    #[arg(value_name = "VALUE")]
    value: Option<String>,

    /// Give the spool a new uuid (KEY must be uuid)
    #[arg(long, requires = "key", conflicts_with = "value")]
    regenerate: bool,

    /// With --regenerate: if a replay holds the spool, wait up to DURATION
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration, requires = "regenerate")]
    wait: Duration,
}

fn key_parser() -> PossibleValuesParser {
    PossibleValuesParser::new(config::keys())
}

pub fn run(args: ConfigArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    if args.regenerate {
        return regenerate(args, ctx);
    }
    match (&args.key, &args.value) {
        (None, _) => {
            const ACTION: &str = "read the settings of";
            let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
            let all = config::list(&*spool).map_err(|e| ctx.fail(ACTION, e))?;
            if ctx.json {
                return ctx.out.json(&config::to_json(&all));
            }
            let width = all.iter().map(|s| s.key.len()).max().unwrap_or(0);
            for s in &all {
                ctx.out.line(&format!("{:<width$}  {}", s.key, s.value))?;
            }
            Ok(())
        }
        (Some(key), None) => {
            const ACTION: &str = "read a setting of";
            let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
            let s = config::get(&*spool, key).map_err(|e| ctx.fail(ACTION, e))?;
            if ctx.json {
                return ctx.out.json(&config::to_json(std::slice::from_ref(&s)));
            }
            ctx.out.line(&s.value.to_string())
        }
        (Some(key), Some(value)) => {
            const ACTION: &str = "change a setting of";
            let spool = ctx.open(OpenMode::ReadWrite, ACTION)?;
            let s = config::set(&*spool, key, value).map_err(|e| ctx.fail(ACTION, e))?;
            ctx.notices(&spool);
            ctx.note(&format!("{} set to {}", s.key, s.value));
            if ctx.json {
                ctx.out.json(&config::to_json(std::slice::from_ref(&s)))?;
            }
            Ok(())
        }
    }
}

fn regenerate(args: ConfigArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "regenerate the uuid of";
    if args.key.as_deref() != Some("uuid") {
        return Err(CliError::new(
            exit::USAGE,
            format!(
                "{ACTION} {}: --regenerate applies to the uuid only (spool config uuid --regenerate)",
                ctx.shown()
            ),
        ));
    }
    let spool = ctx.open(OpenMode::ReadWrite, ACTION)?;
    let r = config::regenerate_uuid(&spool, args.wait).map_err(|e| ctx.fail(ACTION, e))?;
    ctx.notices(&spool);
    ctx.note(&format!(
        "the spool's uuid was {}; a push receiver sees it as a new client from now on \
         ({} in-flight item(s) renumbered from 1)",
        r.old, r.renumbered
    ));
    if ctx.json {
        return ctx.out.json(&serde_json::json!({
            "uuid": r.new,
            "previous": r.old,
            "renumbered": r.renumbered,
        }));
    }
    ctx.out.line(&r.new)
}
