//! `spool list` (`ls`): pending items for people.

use super::Ctx;
use crate::exit::CliError;
use crate::render;
use clap::{Args, ValueEnum};
use spool::ops::json::ItemJson;
use spool::ops::list::{
    any_in_flight, list_states, ListOptions, Listed, Row, Rows, StateFilter, PREVIEW_CHARS,
};
use spool::{OpenMode, PAGE_SIZE};

/// List pending items with their attempts, next retry and last error
///
/// --state picks the set: pending (not held), held, dead (the dead
/// letters, as `dlq list` shows them) or delivered (delivered items kept
/// by the retention window, `spool config retain`: the "next retry"
/// column says when they were delivered and "last error" the evidence,
/// e.g. HTTP 200). Without it, every pending item, held ones included.
///
/// On a terminal, a table. When stdout is not a terminal, the same
/// columns as plain lines, separated by tabs, without a header (key and
/// preview are escaped, so a line is always one record). With --json,
/// NDJSON item objects as drain prints them. Previews show control bytes
/// and invalid UTF-8 escaped (\n, \u{1b}, \xff) and are cut to 40
/// characters. Held items are listed (next retry "held"); an item of an
/// ordering group that waits for an earlier pending item of its group
/// shows "behind #ID" (that item goes first; `list --due` leaves it out,
/// whatever its own retry time); on PostgreSQL an item a replayer holds
/// shows "leased, 4m left". While items are
/// in flight to a push receiver (`replay --push`), a "push" column shows
/// their sequence numbers ("-" for the others; in the plain lines it is
/// the last field). Items are read page by page; never creates or changes
/// the spool.
///
/// Examples:
///   spool list --limit 20
///   spool ls --min-attempts 3
///   spool list --group customer-42
///   spool list --due --json | jq -r .id
///   spool list --state delivered --key order-42
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ListArgs {
    /// Show at most N items (after filtering)
    #[arg(long, short = 'n', value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<usize>::any(20))]
    limit: Option<usize>,

    /// Only the item(s) with this idempotency key
    #[arg(long, short = 'k', value_name = "KEY")]
    key: Option<String>,

    /// Only items tried at least N times
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::any(3))]
    min_attempts: Option<u32>,

    /// Only items of ordering group G (enqueue --group)
    #[arg(long, short = 'g', value_name = "G")]
    group: Option<String>,

    /// Only items a replay would attempt now (not held, not backing off, not waiting behind their group)
    ///
    /// Exactly what `spool replay` would attempt now: not held, not
    /// waiting for a retry time, and not waiting behind an earlier pending
    /// item of its ordering group (enqueue --group; a held or backing-off
    /// item holds its group back). On PostgreSQL also not leased by a
    /// running replayer and not in flight to a push receiver. The same
    /// rule counts `due` in `spool stats`.
    #[arg(long)]
    due: bool,

    /// Which items: pending (not held), held, delivered (retained), dead
    #[arg(long, value_enum, value_name = "STATE")]
    state: Option<StateArg>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
    Pending,
    Held,
    Delivered,
    Dead,
}

impl From<StateArg> for StateFilter {
    fn from(s: StateArg) -> StateFilter {
        match s {
            StateArg::Pending => StateFilter::Pending,
            StateArg::Held => StateFilter::Held,
            StateArg::Delivered => StateFilter::Delivered,
            StateArg::Dead => StateFilter::Dead,
        }
    }
}

pub fn run(args: ListArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, "list")?;
    let now = ctx.now();
    let opts = ListOptions {
        limit: args.limit,
        key: args.key,
        min_attempts: args.min_attempts,
        group: args.group,
        due: args.due,
        state: args.state.map(StateFilter::from),
        now,
    };
    let (when_header, error_header, none) = match opts.state {
        Some(StateFilter::Delivered) => ("delivered", "evidence", "no delivered items match"),
        Some(StateFilter::Dead) => ("died", "last error", "no dead letters match"),
        _ => ("next retry", "last error", "no pending items match"),
    };
    let headers = Headers {
        when: when_header,
        error: error_header,
    };
    let entries = list_states(&*spool, &opts).map_err(|e| ctx.fail("list", e))?;
    let table = !ctx.json && ctx.out.is_terminal();
    let push = !ctx.json && any_in_flight(&*spool).map_err(|e| ctx.fail("list", e))?;
    let mut rows: Vec<Row> = Vec::new();
    let mut make_row = Rows::new(&*spool, now, PREVIEW_CHARS);
    let mut count = 0usize;
    for entry in entries {
        let entry = entry.map_err(|e| ctx.fail("list", e))?;
        count += 1;
        if ctx.json {
            let j = match &entry {
                Listed::Pending(i) => ItemJson::item(i),
                Listed::Dead(d) => ItemJson::dead_letter(d),
                Listed::Delivered(d) => ItemJson::delivered(d),
            };
            ctx.out.line(&j.to_line())?;
            continue;
        }
        let row = make_row.row(&entry).map_err(|e| ctx.fail("list", e))?;
        if table {
            rows.push(row);
            // One table per page keeps memory flat on a huge spool.
            if rows.len() >= PAGE_SIZE {
                print_table(ctx, &mut rows, push, &headers)?;
            }
        } else {
            ctx.out.line(&tsv(&row, push))?;
        }
    }
    if table {
        print_table(ctx, &mut rows, push, &headers)?;
    }
    if count == 0 && !ctx.json {
        ctx.note(none);
    }
    Ok(())
}

/// A row's cells: id, key, attempts, age, next retry, size, preview,
/// last error (also `spool top`'s, which adds the group).
pub(super) fn cells(row: &Row) -> [String; 8] {
    [
        row.id.to_string(),
        row.key.clone(),
        row.attempts.to_string(),
        row.age.map(render::age).unwrap_or_else(|| "-".into()),
        render::retry(&row.retry),
        row.size.to_string(),
        row.preview.clone(),
        row.last_error.clone().unwrap_or_default(),
    ]
}

fn push_cell(row: &Row) -> String {
    row.push_seq
        .map(|s| s.to_string())
        .unwrap_or_else(|| "-".into())
}

/// A plain line; with `push`, the sequence number is the last field.
fn tsv(row: &Row, push: bool) -> String {
    let mut c = cells(row).to_vec();
    if push {
        c.push(push_cell(row));
    }
    c.join("\t")
}

/// The names of the two columns that depend on the listed set.
struct Headers {
    when: &'static str,
    error: &'static str,
}

/// The table; with `push`, a "push" column after the id.
fn print_table(
    ctx: &mut Ctx,
    rows: &mut Vec<Row>,
    push: bool,
    h: &Headers,
) -> Result<(), CliError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut header = vec![
        "id", "key", "attempts", "age", h.when, "size", "preview", h.error,
    ];
    if push {
        header.insert(1, "push");
    }
    let mut t = render::table(&header);
    for r in rows.drain(..) {
        let mut c = cells(&r).to_vec();
        if push {
            c.insert(1, push_cell(&r));
        }
        t.add_row(c);
    }
    ctx.out.line(&t.to_string())
}
