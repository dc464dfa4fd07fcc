//! `spool verify`: check a spool; with --repair, cut a torn tail and
//! rebuild a stale NDJSON index.

use super::Ctx;
use crate::exit::{self, CliError};
use clap::Args;
use spool::ops::verify::{verify, Cut, VerifyOptions};
use spool::verify::Severity;

/// Check a spool's integrity and report what is wrong and where
///
/// SQLite: PRAGMA integrity_check, the journal mode and the schema, on a
/// read-only connection (a database too damaged to open is reported as
/// damage). NDJSON: every line of the main and dead-letter files, with
/// line numbers: malformed lines, a torn trailing line left by a crash,
/// ids that do not grow (the high-water mark), items both pending and
/// dead, the metadata file; and the index (<spool>.idx, derived from the
/// files): that it describes these files and agrees with them.
///
/// The findings go to stdout whatever the outcome; the exit status is 0
/// when nothing is damaged and 65 when anything is (a torn tail
/// included). Without --repair the spool is never created or changed.
///
/// --repair only ever cuts a torn trailing line (an append a crash
/// interrupted, never reported committed) and rebuilds a stale or damaged
/// NDJSON index from the files, and only when that is all the damage: it
/// says what it does on stderr, does it, checks again and exits 0.
/// Corruption anywhere else stays reported (exit 65) and the file stays
/// untouched: fixing it would mean dropping committed records.
///
/// With --json one object: spool, backend, healthy, repairable, pending,
/// dead_letters, findings [{severity (info|warning|damage), file, line,
/// message, repairable}], repaired [{file, line, offset, bytes}],
/// index_rebuilt (bool), repair_refused (a reason, or null).
///
/// Examples:
///   spool verify
///   spool -s outbox.ndjson verify --repair
///   spool verify --json | jq '.findings[] | select(.severity == "damage")'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct VerifyArgs {
    /// Cut a torn trailing line and rebuild a stale index (NDJSON) when that is all the damage
    #[arg(long)]
    repair: bool,
}

pub fn run(args: VerifyArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    const ACTION: &str = "verify";
    let announce = |c: &Cut| {
        ctx.note(&format!(
            "cutting the torn trailing line {} of {} ({} bytes from offset {}; an interrupted write that was never committed)",
            c.line,
            c.file.display(),
            c.bytes,
            c.offset
        ))
    };
    let outcome = verify(
        &ctx.spool,
        &VerifyOptions {
            repair: args.repair,
        },
        &mut { announce },
    )
    .map_err(|e| ctx.fail(ACTION, e))?;
    if let Some(index) = &outcome.rebuilt_index {
        ctx.note(&format!(
            "rebuilt the index {} from the spool files",
            index.display()
        ));
    }
    let healthy = outcome.healthy();
    if ctx.json {
        ctx.out.json(&outcome.json())?;
    } else {
        let damage = outcome
            .report
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Damage)
            .count();
        let verdict = if healthy {
            "healthy".to_string()
        } else if outcome.report.repairable() && !args.repair {
            format!(
                "damaged ({damage} problem{}; `spool verify --repair` fixes it)",
                plural(damage)
            )
        } else {
            format!("damaged ({damage} problem{})", plural(damage))
        };
        ctx.out.line(&format!(
            "{} ({}): {verdict}",
            outcome.path.display(),
            outcome.backend.name()
        ))?;
        for f in &outcome.report.findings {
            let at = match f.line {
                Some(l) => format!("{}:{l}", f.file.display()),
                None => f.file.display().to_string(),
            };
            let sev = match f.severity {
                Severity::Info => "info",
                Severity::Warning => "warning",
                Severity::Damage => "DAMAGE",
            };
            ctx.out.line(&format!("{sev:<7} {at}: {}", f.message))?;
        }
        if let Some(why) = &outcome.repair_refused {
            ctx.out
                .line(&format!("repair  nothing was changed: {why}"))?;
        }
    }
    if healthy {
        return Ok(());
    }
    // The report is what this command exists to print: it stays on
    // stdout, and the error line says what the exit status means.
    ctx.out.flush()?;
    let err = CliError::new(
        exit::DATA,
        format!(
            "{ACTION} {}: the spool is damaged (the findings are on stdout)",
            ctx.shown()
        ),
    );
    Err(
        match (&outcome.repair_refused, outcome.report.repairable()) {
            (Some(_), _) => err.hint(
                "restore the spool from a backup; `spool export` saves what is still readable",
            ),
            (None, true) => err.hint("`spool verify --repair` fixes it"),
            (None, false) => err.hint(
                "restore the spool from a backup; `spool export` saves what is still readable",
            ),
        },
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
