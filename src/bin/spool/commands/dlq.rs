//! `spool dlq`: the dead-letter set.

use super::Ctx;
use crate::exit::{self, CliError};
use crate::render;
use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use spool::ops::dlq::{self, ExportFormat, ExportOptions, Selection};
use spool::ops::ids::IdArg;
use spool::ops::json::ItemJson;
use spool::ops::list::PREVIEW_CHARS;
use spool::ops::output::Destination;
use spool::ops::preview;
use spool::{DeadLetter, Error, ItemId, OpenMode, PAGE_SIZE};
use std::path::PathBuf;

/// Inspect, export, requeue or purge dead letters
///
/// Dead letters are items that used up their retry budget or that the
/// target rejected for good. They keep their payload, key, attempts,
/// last error and the time they died, in the same spool (the
/// spool_dead_letters table, or the <spool>.dead file). `list`, `show`
/// and `export` never create or change the spool.
///
/// Examples:
///   spool dlq list
///   spool dlq show 42 --raw > payload.bin
///   spool dlq export --format csv -o dead.csv
///   spool dlq requeue 42 43
///   spool dlq purge --all --yes
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
}

#[derive(Subcommand, Debug)]
enum DlqCommand {
    List(ListArgs),
    Show(ShowArgs),
    Export(ExportArgs),
    Requeue(RequeueArgs),
    Purge(PurgeArgs),
}

/// List dead letters: id, key, attempts, when they died, last error, size, preview
///
/// On a terminal, a table; otherwise the same columns as tab-separated
/// lines without a header (key, error and preview escaped). With --json,
/// NDJSON item objects with dead_at.
///
/// Examples:
///   spool dlq list
///   spool dlq list --json | jq -r .last_error | sort | uniq -c
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
struct ListArgs {
    /// Show at most N dead letters
    #[arg(long, short = 'n', value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<usize>::any(20))]
    limit: Option<usize>,
}

/// Show one dead letter, or with --raw its exact payload bytes
///
/// Examples:
///   spool dlq show 42
///   spool dlq show 42 --raw | jq .
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
struct ShowArgs {
    /// The dead letter's id
    #[arg(value_name = "ID", allow_negative_numbers = true, value_parser = crate::whole::Whole::<ItemId>::at_least(1, 42))]
    id: ItemId,

    /// Write exactly the payload bytes to stdout
    #[arg(long)]
    raw: bool,
}

/// Write every dead letter as NDJSON, a JSON array or CSV
///
/// Each record carries the payload (payload as text when it is valid
/// UTF-8, else payload_base64; in CSV payload_encoding utf8|base64), key,
/// attempts, enqueued_at, last_error and dead_at. CSV has the header
/// id,key,attempts,enqueued_at,dead_at,last_error,payload_encoding,payload
/// with RFC 4180 quoting and CRLF line ends. With -o the file is written
/// to a temporary file, synced and renamed into place: readers see the
/// old file or the whole new one.
///
/// Examples:
///   spool dlq export > dead.ndjson
///   spool dlq export --format csv -o /tmp/dead.csv
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
struct ExportArgs {
    /// The output format
    #[arg(long, value_enum, default_value_t = FormatArg::Ndjson)]
    format: FormatArg,

    /// Write to FILE (replaced atomically) instead of stdout
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `--format` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FormatArg {
    /// One JSON object per line
    Ndjson,
    /// One JSON array
    Json,
    /// CSV with a header row
    Csv,
}

/// Move dead letters back to pending (attempts reset, keys kept)
///
/// All of them in one atomic commit, under their own ids, with attempts,
/// next retry and hold cleared, so the next replay tries them at once.
/// Nothing changes when they would not fit under the spool's depth bound
/// (exit 75) or when a pending item already carries one of their keys
/// (exit 65). Ids that are not dead letters are named on stderr and make
/// the exit status 65 (the others are still requeued). `-` reads ids
/// from stdin, one per line.
///
/// Examples:
///   spool dlq requeue 42 43
///   spool dlq requeue --all && spool replay --url https://example.com/ingest
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("which").args(["ids", "all"]).required(true)))]
struct RequeueArgs {
    /// Dead-letter ids, or - to read ids from stdin (one per line)
    #[arg(value_name = "ID", num_args = 1.., allow_negative_numbers = true, value_parser = clap::value_parser!(IdArg))]
    ids: Vec<IdArg>,

    /// Every dead letter
    #[arg(long)]
    all: bool,
}

/// Delete dead letters for good (needs --yes)
///
/// In one atomic commit. Without --yes nothing is deleted and the exit
/// status is 64. Ids that are not dead letters are named on stderr and
/// make the exit status 65 (the others are still deleted). Consider
/// `spool dlq export -o FILE` first.
///
/// Examples:
///   spool dlq purge 42 --yes
///   spool dlq export -o dead.ndjson && spool dlq purge --all --yes
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("which").args(["ids", "all"]).required(true)))]
struct PurgeArgs {
    /// Dead-letter ids, or - to read ids from stdin (one per line)
    #[arg(value_name = "ID", num_args = 1.., allow_negative_numbers = true, value_parser = clap::value_parser!(IdArg))]
    ids: Vec<IdArg>,

    /// Every dead letter
    #[arg(long)]
    all: bool,

    /// Really delete them
    #[arg(long)]
    yes: bool,
}

pub fn run(args: DlqArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    match args.command {
        DlqCommand::List(a) => list(a, ctx),
        DlqCommand::Show(a) => show(a, ctx),
        DlqCommand::Export(a) => export(a, ctx),
        DlqCommand::Requeue(a) => requeue(a, ctx),
        DlqCommand::Purge(a) => purge(a, ctx),
    }
}

fn list(args: ListArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "list the dead letters of";
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let now = ctx.now();
    let table = !ctx.json && ctx.out.is_terminal();
    let mut rows: Vec<[String; 7]> = Vec::new();
    let mut count = 0usize;
    for dl in dlq::list(&*spool, &dlq::ListOptions { limit: args.limit }) {
        let dl = dl.map_err(|e| ctx.fail(ACTION, e))?;
        count += 1;
        if ctx.json {
            ctx.out.line(&ItemJson::dead_letter(&dl).to_line())?;
            continue;
        }
        let row = cells(&dl, now);
        if table {
            rows.push(row);
            if rows.len() >= PAGE_SIZE {
                print_table(ctx, &mut rows)?;
            }
        } else {
            ctx.out.line(&row.join("\t"))?;
        }
    }
    if table {
        print_table(ctx, &mut rows)?;
    }
    if count == 0 && !ctx.json {
        ctx.note("no dead letters");
    }
    Ok(())
}

fn cells(dl: &DeadLetter, now: spool::Timestamp) -> [String; 7] {
    let it = &dl.item;
    [
        it.id.to_string(),
        preview::escape(it.key.as_bytes()),
        it.attempts.to_string(),
        format!("{} ago", render::age(now.since(dl.dead_at))),
        render::or_dash(
            it.last_error
                .as_deref()
                .map(|e| preview::preview(e.as_bytes(), 60)),
        ),
        it.payload.len().to_string(),
        preview::preview(&it.payload, PREVIEW_CHARS),
    ]
}

fn print_table(ctx: &mut Ctx, rows: &mut Vec<[String; 7]>) -> Result<(), CliError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut t = render::table(&[
        "id",
        "key",
        "attempts",
        "died",
        "last error",
        "size",
        "preview",
    ]);
    for r in rows.drain(..) {
        t.add_row(r.to_vec());
    }
    ctx.out.line(&t.to_string())
}

fn show(args: ShowArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "show a dead letter of";
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let dl = dlq::show(&*spool, args.id).map_err(|e| {
        ctx.fail(ACTION, e)
            .hint("`spool dlq list` shows the dead letters and their ids")
    })?;
    let it = &dl.item;
    if args.raw {
        return ctx.out.bytes(&it.payload);
    }
    if ctx.json {
        return ctx.out.line(&ItemJson::dead_letter(&dl).to_line());
    }
    let now = ctx.now();
    let when = |t: Option<spool::Timestamp>| match t {
        None => "-".to_string(),
        Some(t) => format!("{} ({} ago)", t, render::age(now.since(t))),
    };
    let encoding = if std::str::from_utf8(&it.payload).is_ok() {
        "UTF-8 text"
    } else {
        "binary"
    };
    let lines: Vec<(&str, String)> = vec![
        ("id", it.id.to_string()),
        ("state", "dead letter".into()),
        (
            "key",
            if it.key.is_empty() {
                "-".into()
            } else {
                preview::escape(it.key.as_bytes())
            },
        ),
        ("attempts", it.attempts.to_string()),
        ("enqueued at", when(it.enqueued_at)),
        ("dead at", when(Some(dl.dead_at))),
        (
            "last error",
            render::or_dash(
                it.last_error
                    .as_deref()
                    .map(|e| preview::escape(e.as_bytes())),
            ),
        ),
        ("size", format!("{} bytes ({encoding})", it.payload.len())),
        ("payload", preview::preview(&it.payload, 500)),
    ];
    for (k, v) in lines {
        ctx.out.line(&format!("{k:<12} {v}"))?;
    }
    Ok(())
}

fn export(args: ExportArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "export the dead letters of";
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let opts = ExportOptions {
        format: match args.format {
            FormatArg::Ndjson => ExportFormat::Ndjson,
            FormatArg::Json => ExportFormat::Json,
            FormatArg::Csv => ExportFormat::Csv,
        },
    };
    let r = match &args.output {
        Some(path) => {
            dlq::export(&*spool, &opts, Destination::File(path)).map_err(|e| ctx.fail(ACTION, e))?
        }
        None => dlq::export(
            &*spool,
            &opts,
            Destination::Writer {
                writer: &mut ctx.out,
                label: "stdout",
            },
        )
        .map_err(|e| ctx.fail_output(ACTION, e))?,
    };
    if args.output.is_some() {
        ctx.note(&format!(
            "exported {} dead letter{} to {}",
            r.exported,
            if r.exported == 1 { "" } else { "s" },
            r.destination
        ));
        if ctx.json {
            ctx.out.json(&serde_json::json!({
                "exported": r.exported,
                "output": r.destination,
            }))?;
        }
    }
    Ok(())
}

fn selection(ctx: &Ctx, ids: &[IdArg], all: bool, action: &str) -> Result<Selection, CliError> {
    if all {
        Ok(Selection::All)
    } else {
        Ok(Selection::Ids(ctx.resolve_ids(ids, action)?))
    }
}

fn requeue(args: RequeueArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "requeue dead letters of";
    let sel = selection(ctx, &args.ids, args.all, ACTION)?;
    let spool = ctx.open(OpenMode::ReadWrite, ACTION)?;
    let r = dlq::requeue(&*spool, &sel).map_err(|e| {
        let hint = match &e {
            Error::QueueFull { .. } => Some(
                "make room first (`spool replay`, `spool done ID`), or requeue fewer ids at a time; nothing was requeued",
            ),
            Error::InvalidInput(_) => Some(
                "deliver or remove the pending item with that key first (`spool list --key KEY`), or purge the duplicate dead letter; nothing was requeued",
            ),
            _ => None,
        };
        let err = ctx.fail(ACTION, e);
        match hint {
            Some(h) => err.hint(h),
            None => err,
        }
    })?;
    ctx.notices(&spool);
    ctx.finish_id_list(&r, &super::DEAD_IDS, ACTION, "requeued", "requeued")
}

fn purge(args: PurgeArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "purge dead letters of";
    if !args.yes {
        return Err(CliError::new(
            exit::USAGE,
            format!(
                "{ACTION} {}: purging deletes dead letters for good; refusing without --yes (nothing was changed)",
                ctx.shown()
            ),
        )
        .hint("add --yes; `spool dlq export -o FILE` saves them first"));
    }
    let sel = selection(ctx, &args.ids, args.all, ACTION)?;
    let spool = ctx.open(OpenMode::ReadWrite, ACTION)?;
    let r = dlq::purge(&*spool, &sel).map_err(|e| ctx.fail(ACTION, e))?;
    ctx.notices(&spool);
    ctx.finish_id_list(&r, &super::DEAD_IDS, ACTION, "purged", "purged")
}
