//! `spool show`: one item, pending or dead.

use super::Ctx;
use crate::exit::CliError;
use crate::render;
use clap::Args;
use spool::ops::json::ItemJson;
use spool::ops::preview;
use spool::ops::show::{show, Shown};
use spool::{ItemId, OpenMode};

/// Show one item's metadata, or with --raw its exact payload bytes
///
/// Looks among pending items first, then among dead letters (which show
/// when and why they died), then among delivered items kept by the
/// retention window (`spool config retain`; they show when and how they
/// were delivered). An id that is none of these is exit 65. With --json,
/// the item object (dead letters add dead_at; delivered items
/// "state":"delivered", delivered_at and evidence). With --raw, the
/// payload bytes exactly as stored and nothing else, so
/// `spool show 7 --raw > payload.bin` restores the payload. Never creates
/// or changes the spool.
///
/// Examples:
///   spool show 42
///   spool show 42 --raw | jq .
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ShowArgs {
    /// The item's id
    #[arg(value_name = "ID", allow_negative_numbers = true, value_parser = crate::whole::Whole::<ItemId>::at_least(1, 42))]
    id: ItemId,

    /// Write exactly the payload bytes to stdout
    #[arg(long)]
    raw: bool,
}

pub fn run(args: ShowArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, "show an item of")?;
    let shown = show(&*spool, args.id).map_err(|e| {
        ctx.fail("show an item of", e)
            .hint("`spool list` shows the pending items and their ids")
    })?;
    let item = shown.item();
    if args.raw {
        return ctx.out.bytes(&item.payload);
    }
    if ctx.json {
        let j = match &shown {
            Shown::Pending(i) => ItemJson::item(i),
            Shown::Dead(d) => ItemJson::dead_letter(d),
            Shown::Delivered(d) => ItemJson::delivered(d),
        };
        return ctx.out.line(&j.to_line());
    }
    let now = ctx.now();
    let when = |t: Option<spool::Timestamp>| match t {
        None => "-".to_string(),
        Some(t) if t <= now => format!("{} ({} ago)", t, render::age(now.since(t))),
        Some(t) => format!("{} (in {})", t, render::duration(t.since(now))),
    };
    let state = match &shown {
        Shown::Dead(_) => "dead letter",
        Shown::Delivered(_) => "delivered (retained, read-only)",
        Shown::Pending(i) if i.held => "held (pending, skipped by replay)",
        Shown::Pending(i) if i.in_flight() => "in flight to the push receiver (pending)",
        Shown::Pending(_) => "pending",
    };
    let mut lines: Vec<(&str, String)> = vec![
        ("id", item.id.to_string()),
        ("state", state.into()),
        (
            "key",
            if item.key.is_empty() {
                "-".into()
            } else {
                preview::escape(item.key.as_bytes())
            },
        ),
        (
            "group",
            render::or_dash(item.group.as_deref().map(|g| preview::escape(g.as_bytes()))),
        ),
        (
            "coalesce key",
            render::or_dash(
                item.coalesce_key
                    .as_deref()
                    .map(|c| preview::escape(c.as_bytes())),
            ),
        ),
        ("attempts", item.attempts.to_string()),
        (
            "push seq",
            render::or_dash(item.push_seq.map(|s| s.to_string())),
        ),
        ("enqueued at", when(item.enqueued_at)),
        ("next retry", when(item.next_retry_at)),
        (
            "last error",
            render::or_dash(
                item.last_error
                    .as_deref()
                    .map(|e| preview::escape(e.as_bytes())),
            ),
        ),
    ];
    if let Shown::Dead(d) = &shown {
        lines.push(("dead at", when(Some(d.dead_at))));
    }
    if let Shown::Delivered(d) = &shown {
        lines.push(("delivered at", when(Some(d.delivery.at))));
        lines.push(("evidence", d.delivery.evidence.describe()));
    }
    let encoding = if std::str::from_utf8(&item.payload).is_ok() {
        "UTF-8 text"
    } else {
        "binary"
    };
    lines.push(("size", format!("{} bytes ({encoding})", item.payload.len())));
    lines.push(("payload", preview::preview(&item.payload, 500)));
    for (k, v) in lines {
        ctx.out.line(&format!("{k:<12} {v}"))?;
    }
    Ok(())
}
