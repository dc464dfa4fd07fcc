//! `spool clients`: the push clients a receiving spool knows.

use super::Ctx;
use crate::exit::CliError;
use crate::render;
use clap::Args;
use spool::ops::clients::{clients, ClientJson};
use spool::OpenMode;

/// Show the clients that pushed into this spool, and where each stands
///
/// For a spool that `spool serve` receives into: one row per pushing
/// client (the sending spool's uuid) with the highest sequence number
/// processed (last_seq), how many rejected entries it has not
/// acknowledged yet, when it last pushed, and (on PostgreSQL, whose spool
/// several `spool serve` may share) which receiver served it last, as
/// host:pid. On a terminal, a table; otherwise tab-separated lines
/// (client, last_seq, rejects, last push, served by) without a header;
/// "-" for what is not known. With --json, one object per client (NDJSON):
///   client_id, last_seq, rejected [{seq, error}], updated_at (or null),
///   served_by (or null)
/// Never creates or changes the spool.
///
/// Examples:
///   spool -s central.db clients
///   spool -s central.db clients --json | jq 'select(.rejected != [])'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ClientsArgs {}

pub fn run(_args: ClientsArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, "list the push clients of")?;
    let all = clients(&*spool).map_err(|e| ctx.fail("list the push clients of", e))?;
    let now = ctx.now();
    if ctx.json {
        for c in &all {
            ctx.out.json(&ClientJson::new(c))?;
        }
        return Ok(());
    }
    if all.is_empty() {
        ctx.note("no client has pushed into this spool");
        return Ok(());
    }
    let rows: Vec<[String; 5]> = all
        .iter()
        .map(|c| {
            [
                c.client_id.clone(),
                c.last_seq.to_string(),
                c.rejected.len().to_string(),
                match c.updated_at {
                    Some(t) => format!("{} ({} ago)", t.to_rfc3339(), render::age(now.since(t))),
                    None => "-".into(),
                },
                c.served_by.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    if ctx.out.is_terminal() {
        let mut t = render::table(&["client", "last seq", "rejects", "last push", "served by"]);
        for r in rows {
            t.add_row(r.to_vec());
        }
        ctx.out.line(&t.to_string())
    } else {
        for r in rows {
            ctx.out.line(&r.join("\t"))?;
        }
        Ok(())
    }
}
