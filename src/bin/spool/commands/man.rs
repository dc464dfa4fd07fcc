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
    let rendered = match &args.command {
        // spool(1): the closing sections of `spool --help` become sections
        // of their own (EXAMPLES, EXIT STATUS, FILES …).
        None => render_main(
            clap_mangen::Man::new(page.after_long_help(None::<&'static str>)),
            &mut buf,
        ),
        Some(_) => clap_mangen::Man::new(page).render(&mut buf),
    };
    rendered.map_err(|e| {
        CliError::new(
            exit::SOFTWARE,
            format!("internal error: render the man page: {e}"),
        )
    })?;
    ctx.out.bytes(&buf)
}

/// spool(1): clap_mangen's page without its catch-all `EXTRA` section,
/// and the closing sections of `spool --help` as sections of their own
/// before `VERSION`.
fn render_main(man: clap_mangen::Man, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let mut page = Vec::new();
    man.render(&mut page)?;
    let page = String::from_utf8_lossy(&page);
    let at = page.find("\n.SH VERSION").map_or(page.len(), |i| i + 1);
    buf.extend_from_slice(page[..at].as_bytes());
    buf.extend_from_slice(crate::help::roff().as_bytes());
    buf.extend_from_slice(page[at..].as_bytes());
    Ok(())
}
