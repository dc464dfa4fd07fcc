//! `spool shape`: the age histogram of postfix's qshape, for people,
//! scripts (TSV) and programs (JSON).

use super::Ctx;
use crate::exit::{self, CliError};
use crate::render;
use clap::{Args, ValueEnum};
use spool::ops::preview;
use spool::ops::shape::{shape, ShapeBy, ShapeOptions, ShapeState};
use spool::units::parse_duration;
use spool::OpenMode;
use std::time::Duration;

/// Show how many items are stuck, how old they are and why (qshape)
///
/// One row per value of --by, busiest first, under a TOTAL row; at most
/// --top rows and an (other) row for the rest. Columns: T (the count)
/// and age buckets by time since enqueue, each edge double the previous
/// (by default 5m 10m 20m 40m 80m 160m 320m 640m 1280m 1280m+); a bucket
/// holds the items younger than its edge and not younger than the
/// previous one. Items without an enqueue time (written by the reference
/// NDJSON format) count as age 0.
///
/// --by error (the default) groups by the cause of the last error, so
/// that one outage is one row: HTTP 503, HTTP 429, connection refused,
/// timeout, TLS: unknown issuer, exit 1, push rejected, evicted, never
/// attempted, ... (unknown texts by their first clause, numbers folded
/// to #). --by key-prefix uses the key up to its first `:` or `/`.
///
/// Read it from the top left: a row whose youngest buckets fill up is
/// an outage happening now; a row with only old buckets is one that
/// ended (its items wait for their retry or a person).
///
/// --state picks the set: pending (not held, the default), held, dead
/// (dead letters, aged since enqueue) or delivered (kept by `spool config
/// retain`). On a terminal, a table; when stdout is not a terminal, a
/// header line and one line per row, tab-separated; with --json one
/// object: {"by", "state", "edges_seconds": [...], "rows": [{"value",
/// "total", "counts": [...]}]}, the TOTAL row first. Never creates or
/// changes the spool, and takes no lock that blocks enqueue or replay.
///
/// Examples:
///   spool shape
///   spool shape --state dead --by error
///   spool shape --by key-prefix --first 1m --buckets 6
///   spool shape --json | jq '.rows[0].total'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ShapeArgs {
    /// The rows: error (cause class of the last error), group, attempts, key-prefix
    #[arg(long, value_enum, value_name = "DIMENSION", default_value = "error")]
    by: ByArg,

    /// Which items: pending (not held), held, dead, delivered (retained)
    #[arg(long, value_enum, value_name = "STATE", default_value = "pending")]
    state: StateArg,

    /// The number of age buckets (the last one has no upper edge)
    #[arg(long, value_name = "N", default_value = "10", allow_negative_numbers = true,
          value_parser = crate::whole::Whole::<usize>::between(1, spool::ops::shape::MAX_BUCKETS as u64, 10))]
    buckets: usize,

    /// The first bucket edge; each next one is double the previous
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    first: Duration,

    /// Show at most N value rows; the rest are summed in an (other) row
    #[arg(long, value_name = "N", default_value = "20", allow_negative_numbers = true,
          value_parser = crate::whole::Whole::<usize>::at_least(1, 20))]
    top: usize,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ByArg {
    Error,
    Group,
    Attempts,
    KeyPrefix,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StateArg {
    Pending,
    Held,
    Dead,
    Delivered,
}

const ACTION: &str = "show the shape of";

pub fn run(args: ShapeArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let opts = ShapeOptions {
        by: match args.by {
            ByArg::Error => ShapeBy::Error,
            ByArg::Group => ShapeBy::Group,
            ByArg::Attempts => ShapeBy::Attempts,
            ByArg::KeyPrefix => ShapeBy::KeyPrefix,
        },
        state: match args.state {
            StateArg::Pending => ShapeState::Pending,
            StateArg::Held => ShapeState::Held,
            StateArg::Dead => ShapeState::Dead,
            StateArg::Delivered => ShapeState::Delivered,
        },
        first: args.first,
        buckets: args.buckets,
        top: args.top,
        // One scan: an operator's one-off look, as fast as it can be.
        yield_to_writers: false,
    };
    // Bad options are a usage error, told before the spool is opened.
    if let Err(e) = opts.edges() {
        let why = match e {
            spool::Error::InvalidInput(m) => m,
            other => other.to_string(),
        };
        return Err(
            CliError::new(exit::USAGE, format!("{ACTION} {}: {why}", ctx.shown()))
                .hint("e.g. --first 5m --buckets 10 (edges 5m 10m … 1280m, then 1280m+)"),
        );
    }
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let s = shape(&*spool, &opts, ctx.now()).map_err(|e| ctx.fail(ACTION, e))?;
    if ctx.json {
        return ctx.out.json(&s.json());
    }
    let labels = s.bucket_labels();
    let cells = |r: &spool::ops::shape::ShapeRow| {
        let mut c = vec![preview::escape(r.value.as_bytes()), r.total.to_string()];
        c.extend(r.counts.iter().map(|n| n.to_string()));
        c
    };
    let mut header = vec![s.by.name().to_string(), "T".to_string()];
    header.extend(labels);
    if ctx.out.is_terminal() {
        let names: Vec<&str> = header.iter().map(String::as_str).collect();
        let mut t = render::table(&names);
        for (i, _) in header.iter().enumerate().skip(1) {
            if let Some(col) = t.column_mut(i) {
                col.set_cell_alignment(comfy_table::CellAlignment::Right);
            }
        }
        for r in &s.rows {
            t.add_row(cells(r));
        }
        ctx.out.line(&t.to_string())?;
    } else {
        ctx.out.line(&header.join("\t"))?;
        for r in &s.rows {
            ctx.out.line(&cells(r).join("\t"))?;
        }
    }
    Ok(())
}
