//! `spool checkpoint`: copy a SQLite spool's WAL into the database.

use super::Ctx;
use crate::exit::CliError;
use crate::render;
use clap::{Args, ValueEnum};
use spool::ops::checkpoint::{check_applies, checkpoint, CheckpointMode, CheckpointOptions};
use spool::units::parse_duration;
use spool::OpenMode;
use std::time::Duration;

/// Checkpoint a SQLite spool's WAL and report how far it got
///
/// Copies committed WAL frames into the database file (PRAGMA
/// wal_checkpoint) and reports SQLite's busy flag, the frames in the WAL,
/// the frames now in the database, and the size of the -wal file before
/// and after. Modes: passive (default; never waits), full (waits for
/// writers), restart (also waits for readers so the WAL starts over),
/// truncate (as restart, then truncates the WAL to 0 bytes).
///
/// A checkpoint is not a health check. A process that keeps a read
/// transaction open pins the frames written after its snapshot: they
/// cannot be copied and the WAL cannot shrink until it finishes. The
/// report then says "blocked by a reader" and the exit status is still
/// 0 — the data is committed and safe. Find the reader (fuser/lsof on
/// the spool) and run the checkpoint again. Never delete the -wal file.
///
/// NDJSON spools have no WAL: exit 64, use `spool compact`.
///
/// With --json one object: spool, mode, busy, wal_frames,
/// checkpointed_frames, wal_bytes_before, wal_bytes_after, complete,
/// blocked (null, "reader" or "wal_in_use"), note (an explanation, or
/// null).
///
/// Examples:
///   spool checkpoint
///   spool checkpoint --mode truncate --wait 30s
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CheckpointArgs {
    /// The checkpoint mode
    #[arg(long, value_enum, default_value_t = ModeArg::Passive)]
    mode: ModeArg,

    /// Wait up to DURATION for other connections (full, restart, truncate)
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    wait: Duration,
}

/// `--mode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// Copy what can be copied without waiting
    Passive,
    /// Wait for writers, then copy everything readers allow
    Full,
    /// As full, then wait for readers so the WAL starts over
    Restart,
    /// As restart, then truncate the WAL file to zero bytes
    Truncate,
}

impl From<ModeArg> for CheckpointMode {
    fn from(m: ModeArg) -> CheckpointMode {
        match m {
            ModeArg::Passive => CheckpointMode::Passive,
            ModeArg::Full => CheckpointMode::Full,
            ModeArg::Restart => CheckpointMode::Restart,
            ModeArg::Truncate => CheckpointMode::Truncate,
        }
    }
}

pub fn run(args: CheckpointArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "checkpoint";
    check_applies(&ctx.spool).map_err(|e| match e.kind() {
        spool::ErrorKind::Usage if spool::backend::postgres::is_postgres_url(ctx.shown()) => ctx
            .fail(ACTION, e)
            .hint("PostgreSQL checkpoints its WAL itself; run `spool compact` to VACUUM the spool's tables"),
        spool::ErrorKind::Usage => ctx
            .fail(ACTION, e)
            .hint("run `spool compact` to shrink an NDJSON spool"),
        _ => ctx.fail(ACTION, e),
    })?;
    let spool = ctx.open_waiting(OpenMode::ReadWrite, ACTION, args.wait)?;
    let out = checkpoint(
        &spool,
        &CheckpointOptions {
            mode: args.mode.into(),
            wait: args.wait,
        },
    )
    .map_err(|e| ctx.fail(ACTION, e))?;
    let j = out.json();
    if ctx.json {
        return ctx.out.json(&j);
    }
    let r = &out.report;
    let lines: Vec<(&str, String)> = vec![
        ("spool", out.path.display().to_string()),
        ("mode", r.mode.as_sql().to_ascii_lowercase()),
        (
            "frames",
            format!(
                "{} in the WAL, {} in the database",
                r.wal_frames, r.checkpointed_frames
            ),
        ),
        (
            "WAL size",
            format!(
                "{} -> {}",
                render::bytes(r.wal_bytes_before),
                render::bytes(r.wal_bytes_after)
            ),
        ),
        ("busy", if r.busy { "yes" } else { "no" }.into()),
        (
            "result",
            match &j.note {
                None => "complete: every WAL frame is in the database".into(),
                Some(n) => n.clone(),
            },
        ),
    ];
    for (k, v) in lines {
        ctx.out.line(&format!("{k:<9} {v}"))?;
    }
    if let Some(b) = out.blocked() {
        ctx.note(&format!(
            "the checkpoint was blocked ({}); this is not an error",
            b.code().replace('_', " ")
        ));
    }
    Ok(())
}
