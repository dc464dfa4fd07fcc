//! `spool man`: the man page.

use super::Ctx;
use crate::exit::{self, CliError};
use clap::{Args, CommandFactory};

/// Print the man page (roff)
///
/// The page is also in the source tree as man/spool.1.
///
/// Example:
///   spool man | man -l -
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ManArgs {}

pub fn run(_args: ManArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let mut buf = Vec::new();
    clap_mangen::Man::new(crate::Cli::command())
        .render(&mut buf)
        .map_err(|e| {
            CliError::new(
                exit::SOFTWARE,
                format!("internal error: render the man page: {e}"),
            )
        })?;
    ctx.out.bytes(&buf)
}
