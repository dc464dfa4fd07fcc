//! `spool completions`: shell completion scripts.

use super::Ctx;
use crate::exit::CliError;
use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Print a shell completion script
///
/// The scripts for bash, zsh and fish are also in the source tree under
/// completions/.
///
/// Examples:
///   spool completions bash > /etc/bash_completion.d/spool
///   spool completions zsh > ~/.zfunc/_spool
///   spool completions fish > ~/.config/fish/completions/spool.fish
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_name = "SHELL", value_enum)]
    shell: Shell,
}

pub fn run(args: CompletionsArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut crate::Cli::command(), "spool", &mut buf);
    ctx.out.bytes(&buf)
}
