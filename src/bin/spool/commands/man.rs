//! `spool man`: the man pages.

use super::Ctx;
use crate::exit::{self, CliError};
use clap::{Args, CommandFactory};

/// Print the man page (roff), or a subcommand's page
///
/// `spool man` prints spool(1), which lists the global options, the
/// subcommands, the exit status table and the environment;
/// `spool man enqueue` prints spool-enqueue(1) with that subcommand's
/// full description and options. All pages are also in the source tree
/// under man/.
///
/// Examples:
///   spool man | man -l -
///   spool man enqueue > /usr/local/share/man/man1/spool-enqueue.1
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ManArgs {
    /// The subcommand whose page to print
    #[arg(value_name = "COMMAND")]
    command: Option<String>,
}

pub fn run(args: ManArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let mut cmd = crate::Cli::command().disable_help_subcommand(true);
    cmd.build();
    let page = match &args.command {
        None => cmd,
        Some(name) => cmd
            .get_subcommands()
            .find(|s| s.get_name() == name || s.get_all_aliases().any(|a| a == name))
            .cloned()
            .ok_or_else(|| {
                CliError::new(exit::USAGE, format!("man: there is no command {name:?}"))
                    .hint("`spool --help` lists the commands")
            })?,
    };
    let mut buf = Vec::new();
    clap_mangen::Man::new(page).render(&mut buf).map_err(|e| {
        CliError::new(
            exit::SOFTWARE,
            format!("internal error: render the man page: {e}"),
        )
    })?;
    ctx.out.bytes(&buf)
}
