//! `spool`: the command-line tool for durable offline spools.
//!
//! A thin layer over the `spool` library: [`commands`] holds one module
//! per subcommand, each turning its arguments into one library call and
//! rendering the report; [`exit`] holds the exit codes (the spec's §6
//! table) in one place; [`render`] holds stdout handling and table
//! helpers. Nothing here touches a spool file directly.

// The program starts at `main` below, not through Rust's runtime start-up:
// see there.
#![cfg_attr(not(test), no_main)]

mod commands;
mod exit;
mod help;
mod render;
mod whole;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, ValueEnum};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

const LONG_ABOUT: &str = "\
Durable offline spools: local queues of payloads that could not be delivered yet.

Shell scripts enqueue into a spool, operators inspect and repair it, cron jobs
replay it. A spool is one path: a SQLite database (the default) or an
append-only NDJSON file (a path ending in .ndjson or .jsonl, or --backend file).
Every command that exits 0 after changing a spool has made the change durable.";

/// The whole command line.
#[derive(Parser, Debug)]
#[command(
    name = "spool",
    version,
    about = "Durable offline spools: enqueue payloads, inspect and repair them",
    long_about = LONG_ABOUT,
    after_long_help = help::after_long_help(),
    arg_required_else_help = true,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    global: GlobalArgs,

    #[command(subcommand)]
    command: commands::Command,
}

/// Options every subcommand accepts, before or after its name.
#[derive(Args, Debug)]
pub struct GlobalArgs {
    /// The spool to use [default: $SPOOL_PATH, else ./spool.db]
    ///
    /// A path ending in .ndjson or .jsonl is an NDJSON spool when created;
    /// any other new path is SQLite; an existing file keeps its format. An
    /// empty file (a touched spool.db) takes its format from its name,
    /// like a new path.
    #[arg(
        short = 's',
        long = "spool",
        value_name = "PATH",
        global = true,
        help_heading = "Global options",
        value_parser = clap::builder::OsStringValueParser::new().try_map(spool_path),
    )]
    spool: Option<PathBuf>,

    /// The backend of a spool being created (an existing spool keeps its own)
    #[arg(
        long,
        value_enum,
        value_name = "BACKEND",
        global = true,
        help_heading = "Global options"
    )]
    backend: Option<BackendArg>,

    /// Create spools on a network file system (NFS, SMB/CIFS…), and do not warn about one
    ///
    /// A spool's locking works only between processes of one machine
    /// (SQLite's WAL shared memory, NDJSON's flock): creating a spool on a
    /// network file system is refused (exit 73) and opening one warns,
    /// unless this flag says that only this machine will ever use it.
    #[arg(long, global = true, help_heading = "Global options")]
    allow_network_fs: bool,

    /// Print JSON: one object, or NDJSON for streams of items
    #[arg(long, global = true, help_heading = "Global options")]
    json: bool,

    /// Print less on stderr: only errors (and why a replay failed)
    ///
    /// Silences notes, confirmations and progress. A replay still tells
    /// the cause of its first failure and its first dead letter, one line
    /// each, so that a cron mail says why it exited 75 or 1.
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = "Global options"
    )]
    quiet: bool,

    /// Print more on stderr
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = "Global options")]
    verbose: u8,
}

/// `--backend` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// SQLite database (WAL mode)
    Sqlite,
    /// Append-only NDJSON file
    File,
}

/// Check a `--spool` value. An empty path is refused, and a path that
/// SQLite would read as something other than a file name (`:memory:`,
/// `file:` URIs) is made explicitly relative, so that it names a file.
fn spool_path(s: OsString) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStrExt;
    let b = s.as_bytes();
    if b.is_empty() {
        return Err("the spool path is empty".into());
    }
    if b.starts_with(b":") || b.starts_with(b"file:") {
        return Ok(PathBuf::from(".").join(s));
    }
    Ok(PathBuf::from(s))
}

/// The spool when `--spool` is not given: `SPOOL_PATH`, else `./spool.db`.
///
/// Read here rather than through clap's `env`: clap counts a value from
/// the environment as given on the command line, so its usage lines then
/// show the optional global `--spool <PATH>` as if it were required
/// (`Usage: spool enqueue --spool <PATH> <PAYLOAD|…>`).
fn env_spool_path() -> Result<PathBuf, exit::CliError> {
    match std::env::var_os("SPOOL_PATH") {
        None => Ok(PathBuf::from("./spool.db")),
        Some(v) => spool_path(v).map_err(|e| {
            exit::CliError::new(
                exit::USAGE,
                format!("SPOOL_PATH: {e}; set it to a spool path or URL, or unset it"),
            )
        }),
    }
}

/// The last line of defence: a panic becomes one line on stderr and exit
/// 70, never a backtrace or exit 101.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown failure".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "spool: error: internal error{at}: {what}");
        let _ = writeln!(
            err,
            "hint: this is a bug in spool; please report it with the command you ran"
        );
        std::process::exit(i32::from(exit::SOFTWARE));
    }));
}

/// The name of the subcommand in `args` (after the program name), when
/// only global options come before it; `None` when the first word is not
/// plainly a subcommand (help, version, an unknown option…).
fn subcommand_name(args: &[OsString]) -> Option<&str> {
    let mut words = args.iter().skip(1);
    while let Some(w) = words.next() {
        let w = w.to_str()?;
        match w {
            "-s" | "--spool" | "--backend" => {
                words.next()?;
            }
            "--json" | "-q" | "--quiet" | "--verbose" => {}
            _ if w.starts_with("--spool=") || w.starts_with("--backend=") => {}
            _ if w.starts_with("-s") && w.len() > 2 => {}
            _ if w.len() > 1 && w.starts_with('-') && w[1..].bytes().all(|b| b == b'v') => {}
            _ if w.starts_with('-') => return None,
            _ => return Some(w),
        }
    }
    None
}

/// Parse the command line. `spool enqueue`, the command scripts run once
/// per event, is parsed against a command tree that holds only its own
/// subcommand: building every subcommand's arguments is most of what
/// parsing costs. Anything that does not parse that way (help, an error)
/// is parsed again against the whole tree, which words it exactly as
/// always.
fn parse() -> Result<Cli, clap::Error> {
    use clap::{Command, FromArgMatches};
    let args: Vec<OsString> = std::env::args_os().collect();
    if subcommand_name(&args) == Some("enqueue") {
        let one = GlobalArgs::augment_args(Command::new("spool")).subcommand(
            commands::enqueue::EnqueueArgs::augment_args(Command::new("enqueue")),
        );
        if let Ok(cli) = one
            .try_get_matches_from(&args)
            .and_then(|m| Cli::from_arg_matches(&m))
        {
            return Ok(cli);
        }
    }
    Cli::try_parse_from(args)
}

/// The process's entry point, called by the C runtime.
///
/// spool skips Rust's own start-up (`fn main` through `lang_start`): for a
/// command a script runs once per event, it is a large part of what the
/// process costs before it does anything — it reads and parses
/// `/proc/self/maps` to find the main thread's stack guard and sets up an
/// alternate signal stack, 21 system calls of 42 for a program that
/// prints a line, about 0.2 ms on the reference machine
/// (docs/benchmarks.md). What spool needs of it is done here: SIGPIPE is
/// ignored (a closed stdout is an `EPIPE` error that ends the command
/// quietly, as Rust's start-up arranges it), and stdout is flushed before
/// returning. Arguments come from `std::env::args_os`, which the standard
/// library fills before `main` on every platform spool supports. A stack
/// overflow ends the process with SIGSEGV instead of a message.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    // SAFETY: setting a signal's disposition to SIG_IGN, before any other
    // thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let code = run();
    let _ = std::io::stdout().flush();
    libc::c_int::from(code)
}

/// Parse the command line, run the command, report: the exit code.
#[cfg_attr(test, allow(dead_code))]
fn run() -> u8 {
    install_panic_hook();
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = exit::for_clap(&e);
            let _ = e.print();
            return code;
        }
    };
    // A way to check the panic hook end to end, in debug builds only.
    if cfg!(debug_assertions) && std::env::var_os("SPOOL_DEBUG_PANIC").is_some() {
        panic!("SPOOL_DEBUG_PANIC is set");
    }
    let spool = match cli.global.spool {
        Some(path) => path,
        None => match env_spool_path() {
            Ok(path) => path,
            Err(e) => return e.report(),
        },
    };
    let mut ctx = commands::Ctx::new(
        spool,
        cli.global.backend.map(|b| match b {
            BackendArg::Sqlite => spool::BackendKind::Sqlite,
            BackendArg::File => spool::BackendKind::File,
        }),
        cli.global.json,
        commands::Verbosity::new(cli.global.quiet, cli.global.verbose),
    );
    ctx.allow_network_fs = cli.global.allow_network_fs;
    let result = cli.command.run(&mut ctx).and_then(|()| ctx.out.flush());
    match result {
        Ok(()) => exit::OK,
        Err(e) => e.report(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_subcommand_is_found_after_global_options() {
        let name = |args: &[&str]| {
            let args: Vec<OsString> = std::iter::once("spool")
                .chain(args.iter().copied())
                .map(OsString::from)
                .collect();
            subcommand_name(&args).map(str::to_string)
        };
        assert_eq!(name(&["enqueue", "x"]).as_deref(), Some("enqueue"));
        assert_eq!(
            name(&["-s", "q.db", "--json", "-vv", "enqueue"]).as_deref(),
            Some("enqueue")
        );
        assert_eq!(
            name(&["--spool=q.db", "-sq.db", "size"]).as_deref(),
            Some("size")
        );
        assert_eq!(
            name(&["--backend", "file", "enqueue"]).as_deref(),
            Some("enqueue")
        );
        assert_eq!(name(&["--help", "enqueue"]), None);
        assert_eq!(name(&["-s"]), None);
        assert_eq!(name(&[]), None);
    }

    /// The one-subcommand tree parses `enqueue` exactly as the whole tree
    /// does.
    #[test]
    fn enqueue_parses_alike_on_both_trees() {
        use clap::{Command, FromArgMatches};
        for args in [
            &["spool", "enqueue", "x"][..],
            &[
                "spool", "-s", "a.ndjson", "enqueue", "--key", "k", "--json", "--", "-x",
            ],
            &[
                "spool",
                "enqueue",
                "--lines",
                "--max-payload",
                "1KiB",
                "-v",
                "--file",
                "f",
            ],
            &[
                "spool",
                "--backend",
                "file",
                "-q",
                "enqueue",
                "--ndjson",
                "--wait-for-space",
                "2s",
            ],
        ] {
            let one = GlobalArgs::augment_args(Command::new("spool")).subcommand(
                commands::enqueue::EnqueueArgs::augment_args(Command::new("enqueue")),
            );
            let fast = Cli::from_arg_matches(&one.try_get_matches_from(args).unwrap()).unwrap();
            let full = Cli::try_parse_from(args).unwrap();
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{args:?}");
        }
    }

    #[test]
    fn spool_paths() {
        assert!(spool_path(OsString::new()).is_err());
        assert_eq!(
            spool_path(":memory:".into()).unwrap(),
            PathBuf::from("./:memory:")
        );
        assert_eq!(spool_path("a.db".into()).unwrap(), PathBuf::from("a.db"));
    }
}
