//! `spool stats`: counts, ages and sizes, for people, JSON or Prometheus.

use super::Ctx;
use crate::exit::CliError;
use crate::render;
use clap::Args;
use spool::ops::stats::stats;
use spool::OpenMode;

/// Show depth, held and dead counts, oldest age, attempts, sizes, bounds
///
/// Cheap on any spool size: counts come from the backend without reading
/// payloads. With --json a stable object:
///   spool, backend, depth, held, dead_letters, waiting, due, oldest_id,
///   oldest_enqueued_at, oldest_age_seconds,
///   attempts_histogram [{attempts, items}], max_depth, on_full,
///   evicted_total, delivered_retained, retain, high_water,
///   files [{path, bytes}], total_bytes, ndjson_garbage_ratio
/// (absent values are null). With --prometheus the gauges spool_depth,
/// spool_held, spool_dead_letters, spool_bytes,
/// spool_oldest_item_age_seconds and spool_delivered_retained (delivered
/// items kept by `spool config retain`) and the counter spool_evicted_total
/// (items the drop-oldest policy evicted) in the Prometheus text format, labelled
/// with the spool path (--prometheus wins over --json). Never creates or
/// changes the spool.
///
/// Examples:
///   spool stats
///   spool stats --prometheus > /var/lib/node_exporter/textfile/spool.prom
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct StatsArgs {
    /// Print the Prometheus text format (for node_exporter's textfile collector)
    #[arg(long)]
    prometheus: bool,
}

pub fn run(args: StatsArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, "gather stats of")?;
    let r = stats(&spool, ctx.now()).map_err(|e| ctx.fail("gather stats of", e))?;
    if args.prometheus {
        return ctx.out.bytes(r.prometheus().as_bytes());
    }
    if ctx.json {
        return ctx.out.json(&r.json());
    }
    let mut lines: Vec<(&str, String)> = vec![
        (
            "spool",
            format!("{} ({})", r.path.display(), r.backend.name()),
        ),
        (
            "depth",
            format!(
                "{} pending ({} due, {} held, {} waiting for a retry time)",
                r.depth,
                r.due(),
                r.held,
                r.waiting
            ),
        ),
        ("dead", format!("{} dead letters", r.dead_letters)),
        (
            "delivered",
            match r.retain {
                None if r.delivered_retained == 0 => "not retained (retain off)".into(),
                w => format!(
                    "{} retained (retain {})",
                    r.delivered_retained,
                    spool::ops::config::retain_name(w)
                ),
            },
        ),
        (
            "bound",
            match (r.max_depth, r.on_full) {
                (Some(n), spool::OnFull::Reject) => format!("{n} items"),
                (Some(n), p) => format!(
                    "{n} items, on full {} ({} evicted so far)",
                    p.name(),
                    r.evicted_total
                ),
                (None, _) => "none".into(),
            },
        ),
        ("high water", format!("id {}", r.high_water)),
        (
            "oldest",
            match (r.oldest_id, r.oldest_age) {
                (None, _) => "-".into(),
                (Some(id), Some(age)) => format!("id {id}, {} old", render::age(age)),
                (Some(id), None) => format!("id {id}, age unknown"),
            },
        ),
        (
            "attempts",
            if r.attempts_histogram.is_empty() {
                "-".into()
            } else {
                r.attempts_histogram
                    .iter()
                    .map(|(a, n)| format!("{a}: {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ),
    ];
    for (i, (path, n)) in r.files.iter().enumerate() {
        lines.push((
            if i == 0 { "files" } else { "" },
            format!("{} {}", render::bytes(*n), path.display()),
        ));
    }
    lines.push(("total", render::bytes(r.total_bytes)));
    if let Some(t) = &r.fs_type {
        let what = match t.locality {
            spool::fs_type::Locality::Local => "",
            spool::fs_type::Locality::Network => " (a network file system)",
            spool::fs_type::Locality::Unknown => " (may be a network file system)",
        };
        lines.push(("file system", format!("{}{what}", t.name)));
    }
    if let Some(g) = r.ndjson_garbage_ratio {
        lines.push(("garbage", format!("{:.0}% of the file", g * 100.0)));
    }
    for (k, v) in lines {
        ctx.out.line(&format!("{k:<11} {v}"))?;
    }
    Ok(())
}
