//! `spool enqueue`: add one payload, or a batch in one atomic commit.

use super::Ctx;
use crate::exit::CliError;
use clap::{ArgGroup, Args};
use spool::ops::enqueue::{enqueue, EnqueueRequest, Items};
use spool::ops::input::{read_items, Batch, Format, InputOptions, KeyPolicy, Source};
use spool::ops::preview;
use spool::units::{parse_duration, parse_size};
use spool::{Error, OpenMode};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Add a payload (or a batch of payloads) to the spool
///
/// The payload is the argument's bytes exactly (non-UTF-8 included), a
/// whole file (--file), or all of stdin (--stdin): at most one of the
/// three. An empty payload is valid. Creates the spool if it is missing.
/// Prints the id of each item on stdout, one per line; with --json one
/// object {"id": N, "deduplicated": BOOL} per item, plus "replaced": [ids]
/// and "evicted": [ids] when it replaced or evicted items, and
/// "state": "delivered" for a dedup hit on a delivered item.
///
/// Batches: --lines enqueues each line of the input (without its \n or
/// \r\n; empty lines are skipped), --ndjson each JSON object
/// {"payload": "...", "key": "...", "group": "...", "coalesce_key": "..."}
/// (or "payload_base64" for bytes; all but the payload optional). A
/// batch reads stdin unless PAYLOAD or --file is given, so --stdin is
/// optional there. A batch is one atomic commit: a malformed line (exit
/// 65, naming the line) or a full spool means nothing is enqueued.
///
/// Idempotency keys: while an item with a key is pending, enqueueing the
/// same key again stores nothing and prints the existing id, with a note
/// on stderr ("deduplicated"); the exit status is still 0. With a
/// retention window (`spool config retain 7d`), so does a key whose item
/// was delivered within the window: a re-run of a job stores nothing.
///
/// Ordering groups (--group, or "group" in --ndjson): replay delivers the
/// items of one group in enqueue order, one at a time; other groups and
/// items without a group go on meanwhile. Coalescing (--coalesce-key, or
/// "coalesce_key" in --ndjson): the new item replaces every pending item
/// with the same coalesce key that was never attempted and is not in
/// flight (last write wins); --json lists them as "replaced".
///
/// A full spool (see init --max-depth) refuses the batch with exit 75,
/// unless --wait-for-space waits for a replay to make room. With the
/// setting on-full drop-oldest (spool config on-full drop-oldest), the
/// oldest pending item that is not held and not in flight moves to the
/// dead letters instead ("evicted" in --json).
///
/// Examples:
///   spool enqueue 'hello world'
///   spool enqueue --key order-1234 '{"order":1234}'
///   curl -s https://example.com/feed | spool enqueue --stdin --key-from-payload
///   tail -n 100 events.log | spool enqueue --lines
///   spool enqueue --file report.pdf --wait-for-space 30s
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("source").args(["payload", "file", "stdin"])))]
#[command(group(
    ArgGroup::new("input")
        .args(["payload", "file", "stdin", "lines", "ndjson"])
        .multiple(true)
        .required(true)
))]
pub struct EnqueueArgs {
    /// The payload (its bytes, exactly); use -- before a payload that starts with -
    #[arg(value_name = "PAYLOAD", value_parser = clap::value_parser!(OsString))]
    payload: Option<OsString>,

    /// Read the payload (or the batch) from FILE
    #[arg(short = 'f', long, value_name = "FILE")]
    file: Option<PathBuf>,

    /// Read the payload (or the batch) from stdin; the default for --lines and --ndjson
    #[arg(long)]
    stdin: bool,

    /// Idempotency key of a single payload
    #[arg(short = 'k', long, value_name = "KEY", conflicts_with_all = ["key_from_payload", "lines", "ndjson"])]
    key: Option<String>,

    /// Use the payload's content hash (sha256:<hex>) as its key
    #[arg(long)]
    key_from_payload: bool,

    /// One payload per input line (a batch, one atomic commit)
    #[arg(long, conflicts_with = "ndjson")]
    lines: bool,

    /// One JSON object per input line: {"payload": ..., "key": ...} (a batch, one atomic commit)
    #[arg(long)]
    ndjson: bool,

    /// Refuse a payload larger than SIZE (exit 65)
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    max_payload: u64,

    /// Enforce this depth bound for this call instead of the spool's own
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<u64>::at_least(1, 1000))]
    max_depth: Option<u64>,

    /// On a full spool, wait up to DURATION for room instead of failing
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    wait_for_space: Option<Duration>,

    /// Ordering group: replay delivers the items of a group in enqueue order ("" is none)
    #[arg(long, value_name = "G")]
    group: Option<String>,

    /// Replace pending items with this coalesce key that were never attempted ("" is none)
    #[arg(long, value_name = "K")]
    coalesce_key: Option<String>,
}

#[derive(serde::Serialize)]
struct EnqueuedJson<'a> {
    id: u64,
    deduplicated: bool,
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    replaced: &'a [u64],
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    evicted: &'a [u64],
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'static str>,
}

pub fn run(args: EnqueueArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "enqueue into";
    let format = if args.lines {
        Format::Lines
    } else if args.ndjson {
        Format::Ndjson
    } else {
        Format::Single
    };
    let key = match (args.key, args.key_from_payload) {
        (Some(k), _) => KeyPolicy::Fixed(k),
        (None, true) => KeyPolicy::FromPayload,
        (None, false) => KeyPolicy::None,
    };
    let opts = InputOptions {
        format,
        key,
        max_payload: args.max_payload,
        group: args.group,
        coalesce_key: args.coalesce_key,
    };
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    let source = if let Some(p) = args.payload {
        use std::os::unix::ffi::OsStringExt;
        Source::Bytes(p.into_vec())
    } else if let Some(f) = args.file {
        Source::File(f)
    } else {
        // --stdin, or a batch (--lines, --ndjson) without PAYLOAD or
        // --file: clap accepts nothing else.
        Source::Reader {
            reader: &mut lock,
            label: "stdin".into(),
        }
    };
    // All input is read and checked before the spool is even opened: bad
    // input creates nothing and changes nothing. A batch goes to a spill
    // file beside the spool, so memory stays bounded whatever its size.
    let items = if format == Format::Single {
        Items::List(read_items(source, &opts).map_err(|e| input_error(ctx, e, format))?)
    } else {
        let dir = match ctx.spool.parent() {
            Some(d) if d.as_os_str().is_empty() => std::path::Path::new("."),
            Some(d) => d,
            None => std::path::Path::new("."),
        };
        // A spool whose directory is missing fails at open (73); the
        // batch waits in the temporary directory until then.
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        Items::Batch(Batch::read(source, &opts, &dir).map_err(|e| input_error(ctx, e, format))?)
    };
    // An empty batch runs no operation: the open checks the spool then (an
    // NDJSON spool's index is built or caught up, torn tails are cut).
    let spool = ctx.open_for_one(OpenMode::Create, ACTION, items.is_empty())?;
    ctx.detail(&format!("enqueueing {} item(s) in one commit", items.len()));
    let req = EnqueueRequest {
        items,
        max_depth: args.max_depth,
        wait_for_space: args.wait_for_space,
        clock: ctx.clock.clone(),
    };
    let report = enqueue(&*spool, &req).map_err(|e| {
        let waited = match (&e, args.wait_for_space) {
            (Error::QueueFull { .. }, Some(w)) => {
                format!(" (waited {} for room)", crate::render::duration(w))
            }
            _ => String::new(),
        };
        match ctx.fail_noting(&spool, ACTION, e) {
            CliError::Failed {
                code,
                message,
                hint,
            } => CliError::Failed {
                code,
                message: format!("{message}{waited}"),
                hint,
            },
            other => other,
        }
    })?;
    ctx.notices(&spool);
    if !report.waited.is_zero() {
        ctx.detail(&format!(
            "waited {} for room",
            crate::render::duration(report.waited)
        ));
    }
    // The keys are read again only for the notes about dedup hits.
    let mut keys = (report.stored() < report.results.len()).then(|| req.items.iter());
    for item in report.results.iter() {
        let key = keys
            .as_mut()
            .and_then(|k| k.next())
            .and_then(|r| r.ok())
            .map(|i| i.key);
        if ctx.json {
            ctx.out.json(&EnqueuedJson {
                id: item.id,
                deduplicated: item.deduplicated,
                replaced: &item.replaced,
                evicted: &item.evicted,
                state: item.delivered.then_some("delivered"),
            })?;
        } else {
            ctx.out.line(&item.id.to_string())?;
        }
        if !item.replaced.is_empty() {
            ctx.note(&format!(
                "item {} replaced {} (coalesced)",
                item.id,
                id_list(&item.replaced)
            ));
        }
        if !item.evicted.is_empty() {
            ctx.note(&format!(
                "item {} evicted {} to the dead letters (spool full, on-full drop-oldest)",
                item.id,
                id_list(&item.evicted)
            ));
        }
        if item.deduplicated {
            let already = if item.delivered {
                "already delivered (retained)"
            } else {
                "already pending"
            };
            ctx.note(&format!(
                "item {} {already} with key {} (deduplicated)",
                item.id,
                preview::escape(key.unwrap_or_default().as_bytes())
            ));
        }
    }
    Ok(())
}

/// "item 3" or "items 3, 4".
fn id_list(ids: &[u64]) -> String {
    let list: Vec<String> = ids.iter().map(u64::to_string).collect();
    match ids.len() {
        1 => format!("item {}", list[0]),
        _ => format!("items {}", list.join(", ")),
    }
}

fn input_error(ctx: &Ctx, e: Error, format: Format) -> CliError {
    let larger = e.to_string().contains("larger than the limit");
    let err = ctx.fail("enqueue into", e);
    if larger {
        return err.hint("raise the limit with --max-payload SIZE (e.g. --max-payload 64MiB); nothing was enqueued");
    }
    match (format, &err) {
        (Format::Ndjson, CliError::Failed { code, .. }) if *code == crate::exit::DATA => err.hint(
            "each line must be a JSON object with \"payload\" (or \"payload_base64\") and optional \"key\", \"group\" and \"coalesce_key\" strings; nothing was enqueued",
        ),
        _ => err,
    }
}
