//! `spool`: the command-line tool for durable offline spools.
//!
//! A thin layer over the `spool` library: [`commands`] holds one module
//! per subcommand, each turning its arguments into one library call and
//! rendering the report; [`exit`] holds the exit codes (the spec's §6
//! table) in one place; [`render`] holds stdout handling and table
//! helpers. Nothing here touches a spool file directly.

mod commands;
mod exit;
mod render;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, ValueEnum};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const LONG_ABOUT: &str = "\
Durable offline spools: local queues of payloads that could not be delivered yet.

Shell scripts enqueue into a spool, operators inspect and repair it, cron jobs
replay it. A spool is one path: a SQLite database (the default) or an
append-only NDJSON file (a path ending in .ndjson or .jsonl, or --backend file).
Every command that exits 0 after changing a spool has made the change durable.";

const AFTER_LONG_HELP: &str = "\
Examples:
  spool enqueue '{\"event\":\"signup\"}' --key signup-42
  some-producer | spool -s /var/spool/app/outbox.db enqueue --lines
  spool list --min-attempts 3
  spool show 17 --raw | jq .
  spool list --json | jq -r 'select(.attempts > 5) | .id' | spool done -
  spool stats --prometheus > /var/lib/node_exporter/spool.prom
  spool verify && spool compact
  spool dlq export --format csv -o dead.csv && spool dlq requeue --all
  spool -s old.db export | spool -s new.ndjson import -

Conventions:
  Durations are written 500ms, 5s, 2m, 1h, 1h30m (a bare number is seconds);
  sizes 512, 64KiB, 16MiB. Data goes to stdout, diagnostics to stderr.
  Commands that only read (drain, list, show, size, stats, verify without
  --repair, dlq list/show/export, export) never create or modify a spool. With --json, items are objects with id, payload (or
  payload_base64 when not UTF-8), key, attempts, enqueued_at, next_retry_at,
  last_error and held; streams are NDJSON.

Exit status:
  0    success (also --help, --version, and a reader closing the output pipe)
  1    replay dead-lettered at least one item
  64   usage error: bad flags or arguments
  65   bad data: corrupt spool, malformed input line, unknown id
  66   the spool or an input file does not exist
  70   internal error (a bug: please report it)
  73   cannot create the spool: the path exists (init), its directory is missing,
       or it is on a network file system (see --allow-network-fs)
  74   I/O error: disk full, failed write or fsync
  75   temporary: the spool is full, locked by another replay, or busy
  77   permission denied on the spool, its directory or a file
  130  interrupted by SIGINT; 143 by SIGTERM

Files:
  Every file spool creates (the database and its -wal and -shm files, the
  NDJSON file and its .dead and .meta companions, <spool>.replay.lock,
  <spool>.serve.lock, outputs written with -o, the watch metrics file) gets
  mode 0600, narrowed further by the umask. An existing file keeps its
  mode, also when it is replaced atomically.

Environment:
  SPOOL_PATH  the spool to use when --spool is not given (default ./spool.db)
  CREDENTIALS_DIRECTORY  serve: read tokens from spool-serve-tokens in it
              when --token-file is not given (systemd LoadCredential=)";

/// The whole command line.
#[derive(Parser, Debug)]
#[command(
    name = "spool",
    version,
    about = "Durable offline spools: enqueue payloads, inspect and repair them",
    long_about = LONG_ABOUT,
    after_long_help = AFTER_LONG_HELP,
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
    /// The spool to use [default: ./spool.db]
    ///
    /// A path ending in .ndjson or .jsonl is an NDJSON spool when created;
    /// any other new path is SQLite; an existing file keeps its format.
    #[arg(
        short = 's',
        long = "spool",
        env = "SPOOL_PATH",
        hide_env_values = true,
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

fn main() -> ExitCode {
    install_panic_hook();
    let cli = match parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = exit::for_clap(&e);
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // A way to check the panic hook end to end, in debug builds only.
    if cfg!(debug_assertions) && std::env::var_os("SPOOL_DEBUG_PANIC").is_some() {
        panic!("SPOOL_DEBUG_PANIC is set");
    }
    let mut ctx = commands::Ctx::new(
        cli.global
            .spool
            .unwrap_or_else(|| PathBuf::from("./spool.db")),
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
        Ok(()) => ExitCode::SUCCESS,
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
