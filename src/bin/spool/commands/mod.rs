//! One module per subcommand, named after the library operation it calls.
//!
//! Each module has an `Args` struct (clap derive; its doc comment is the
//! subcommand's help: a short first line, then the long help with an
//! example) and a `run` function: parse → one library call → render.
//! Adding a subcommand is one new file plus one variant and one match arm
//! in [`Command`].

mod attempts;
mod checkpoint;
mod clients;
mod compact;
mod completions;
mod config;
mod dlq;
mod done;
mod drain;
pub mod enqueue;
mod export;
mod hold;
mod import;
mod init;
mod list;
mod man;
mod release;
mod replay;
mod serve;
mod shape;
mod show;
mod signals;
mod size;
mod stats;
mod top;
mod verify;
mod watch;

use crate::exit::{self, CliError};
use crate::render::Out;
use clap::Subcommand;
use spool::ops::ids::{self, IdArg};
use spool::{BackendKind, Error, ErrorKind, ItemId, OpenMode, OpenOptions, SharedClock, Spool};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    Init(init::InitArgs),
    Enqueue(enqueue::EnqueueArgs),
    Drain(drain::DrainArgs),
    #[command(visible_alias = "ls")]
    List(list::ListArgs),
    Show(show::ShowArgs),
    Done(done::DoneArgs),
    Hold(hold::HoldArgs),
    Release(release::ReleaseArgs),
    Attempts(attempts::AttemptsArgs),
    Size(size::SizeArgs),
    Stats(stats::StatsArgs),
    Shape(shape::ShapeArgs),
    Top(top::TopArgs),
    Replay(replay::ReplayArgs),
    Watch(watch::WatchArgs),
    Serve(serve::ServeArgs),
    Clients(clients::ClientsArgs),
    Compact(compact::CompactArgs),
    Checkpoint(checkpoint::CheckpointArgs),
    Verify(verify::VerifyArgs),
    Dlq(dlq::DlqArgs),
    Export(export::ExportArgs),
    Import(import::ImportArgs),
    Config(config::ConfigArgs),
    Completions(completions::CompletionsArgs),
    Man(man::ManArgs),
}

impl Command {
    /// Run the subcommand.
    pub fn run(self, ctx: &mut Ctx) -> Result<(), CliError> {
        match self {
            Command::Init(a) => init::run(a, ctx),
            Command::Enqueue(a) => enqueue::run(a, ctx),
            Command::Drain(a) => drain::run(a, ctx),
            Command::List(a) => list::run(a, ctx),
            Command::Show(a) => show::run(a, ctx),
            Command::Done(a) => done::run(a, ctx),
            Command::Hold(a) => hold::run(a, ctx),
            Command::Release(a) => release::run(a, ctx),
            Command::Attempts(a) => attempts::run(a, ctx),
            Command::Size(a) => size::run(a, ctx),
            Command::Stats(a) => stats::run(a, ctx),
            Command::Shape(a) => shape::run(a, ctx),
            Command::Top(a) => top::run(a, ctx),
            Command::Replay(a) => replay::run(a, ctx),
            Command::Watch(a) => watch::run(a, ctx),
            Command::Serve(a) => serve::run(a, ctx),
            Command::Clients(a) => clients::run(a, ctx),
            Command::Compact(a) => compact::run(a, ctx),
            Command::Checkpoint(a) => checkpoint::run(a, ctx),
            Command::Verify(a) => verify::run(a, ctx),
            Command::Dlq(a) => dlq::run(a, ctx),
            Command::Export(a) => export::run(a, ctx),
            Command::Import(a) => import::run(a, ctx),
            Command::Config(a) => config::run(a, ctx),
            Command::Completions(a) => completions::run(a, ctx),
            Command::Man(a) => man::run(a, ctx),
        }
    }
}

/// How much to say on stderr besides errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// `-q`: errors only.
    Quiet,
    /// Notes such as dedup hits and confirmations.
    Normal,
    /// `-v`: also details such as the backend and timings.
    Verbose,
}

impl Verbosity {
    /// From the `-q` flag and the `-v` count.
    pub fn new(quiet: bool, verbose: u8) -> Verbosity {
        if quiet {
            Verbosity::Quiet
        } else if verbose > 0 {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        }
    }
}

/// What every command gets: the global options and stdout.
pub struct Ctx {
    /// The spool path (or a PostgreSQL URL, password included: show
    /// [`Ctx::shown`] instead).
    pub spool: PathBuf,
    /// The spool as messages show it (a URL without its password).
    pub shown: String,
    /// `--backend`, for a spool being created.
    pub backend: Option<BackendKind>,
    /// `--json`.
    pub json: bool,
    /// `-q` / `-v`.
    pub verbosity: Verbosity,
    /// Stdout.
    pub out: Out,
    /// The clock the library waits on and stamps with.
    pub clock: SharedClock,
    /// `--allow-network-fs`: create spools on network file systems, and
    /// do not warn about opening one.
    pub allow_network_fs: bool,
}

impl Ctx {
    /// The context for one run.
    pub fn new(
        path: PathBuf,
        backend: Option<BackendKind>,
        json: bool,
        verbosity: Verbosity,
    ) -> Ctx {
        let subject = spool::backend::postgres::redact(&path.to_string_lossy());
        Ctx {
            shown: subject.clone(),
            spool: path,
            backend,
            json,
            verbosity,
            out: Out::stdout(subject),
            clock: spool::time::system_clock(),
            allow_network_fs: false,
        }
    }

    /// The spool as messages show it: the path, or the URL without its
    /// password.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The current time.
    pub fn now(&self) -> spool::Timestamp {
        self.clock.now()
    }

    /// Open the spool. `action` says what the command was doing, for the
    /// error line (`"list"`, `"enqueue into"`).
    pub fn open(&self, mode: OpenMode, action: &str) -> Result<Spool, CliError> {
        self.open_waiting(mode, action, OpenOptions::default().busy_timeout)
    }

    /// [`Ctx::open`] for a command that runs one operation and then tells
    /// the backend's notices ([`Ctx::notices`]; when it fails,
    /// [`Ctx::fail_noting`]): the operation checks an NDJSON spool (and
    /// mends what it can), so the open does not do it first. With
    /// `nothing` to do (no ids, no items) the operation reads nothing, and
    /// the open checks the spool as [`Ctx::open`] does.
    pub fn open_for_one(
        &self,
        mode: OpenMode,
        action: &str,
        nothing: bool,
    ) -> Result<Spool, CliError> {
        if nothing {
            return self.open(mode, action);
        }
        self.open_keeping_notices(mode, action, OpenOptions::default().busy_timeout, true)
    }

    /// [`Ctx::fail`] after telling the backend's notices (see
    /// [`Ctx::open_for_one`]).
    pub fn fail_noting(&self, spool: &Spool, action: &str, e: Error) -> CliError {
        self.notices(spool);
        self.fail(action, e)
    }

    /// [`Ctx::open`], waiting at most `wait` for another process's lock
    /// on every later call (a command's `--wait`).
    pub fn open_waiting(
        &self,
        mode: OpenMode,
        action: &str,
        wait: std::time::Duration,
    ) -> Result<Spool, CliError> {
        let spool = self.open_keeping_notices(mode, action, wait, false)?;
        self.notices(&spool);
        Ok(spool)
    }

    /// [`Ctx::open_waiting`], leaving the backend's notices (a torn tail
    /// cut while opening) for the operation to put in its report; with
    /// `defer_load`, an NDJSON spool is not read until the operation needs
    /// it (see [`OpenOptions::defer_load`]).
    pub fn open_keeping_notices(
        &self,
        mode: OpenMode,
        action: &str,
        wait: std::time::Duration,
        defer_load: bool,
    ) -> Result<Spool, CliError> {
        let opts = OpenOptions {
            mode,
            backend: if mode.creates() { self.backend } else { None },
            clock: self.clock.clone(),
            busy_timeout: wait,
            defer_load,
            allow_network_fs: self.allow_network_fs,
            ..OpenOptions::default()
        };
        // Whether the open creates the spool (a path only: a PostgreSQL
        // spool name is created, when missing, inside the open).
        let url = spool::backend::postgres::is_postgres_url(&self.spool.to_string_lossy());
        let missing = mode.creates() && !url && !self.spool.exists();
        let spool = Spool::open(&self.spool, &opts).map_err(|e| self.fail(action, e))?;
        self.fs_warning();
        let kind = spool.kind().title();
        let shown = self.shown();
        self.detail(&match mode {
            _ if missing => format!("created {kind} spool {shown}"),
            OpenMode::ReadOnly => format!("opened {kind} spool {shown} read-only"),
            OpenMode::Create if url => {
                format!("opened {kind} spool {shown} for writing (created if it was missing)")
            }
            OpenMode::CreateNew => format!("created {kind} spool {shown}"),
            OpenMode::ReadWrite | OpenMode::Create => {
                format!("opened {kind} spool {shown} for writing")
            }
        });
        Ok(spool)
    }

    /// The error line for a library error while doing `action` on the
    /// spool, with the exit code of its kind and a default hint.
    pub fn fail(&self, action: &str, e: Error) -> CliError {
        let code = exit::for_kind(e.kind());
        let message = format!(
            "{action} {}: {}",
            self.shown(),
            describe(&e, Path::new(&self.shown))
        );
        let err = CliError::new(code, message);
        match default_hint(&e) {
            Some(h) => err.hint(h),
            None => err,
        }
    }

    /// Like [`Ctx::fail`] for an operation that wrote a stream to stdout:
    /// a reader that closed the pipe is a quiet success, as everywhere.
    pub fn fail_output(&self, action: &str, e: Error) -> CliError {
        if let Error::Io { source, .. } = &e {
            if source.kind() == std::io::ErrorKind::BrokenPipe {
                return CliError::ClosedPipe;
            }
        }
        self.fail(action, e)
    }

    /// The warning for a spool on a network (or possibly network) file
    /// system, on stderr unless `-q` or `--allow-network-fs`.
    pub fn fs_warning(&self) {
        if !self.allow_network_fs {
            if let Some(w) = spool::fs_type::open_warning(&self.spool) {
                self.note(&w);
            }
        }
    }

    /// A note on stderr, unless `-q`.
    pub fn note(&self, msg: &str) {
        if self.verbosity >= Verbosity::Normal {
            let _ = writeln!(std::io::stderr().lock(), "spool: {msg}");
        }
    }

    /// Notes the backend has collected (an NDJSON spool reports a torn
    /// tail it cut off), on stderr unless `-q`.
    pub fn notices(&self, spool: &Spool) {
        for n in spool.take_notices() {
            self.note(&n);
        }
    }

    /// A detail on stderr, only with `-v`.
    pub fn detail(&self, msg: &str) {
        if self.verbosity >= Verbosity::Verbose {
            let _ = writeln!(std::io::stderr().lock(), "spool: {msg}");
        }
    }

    /// Expand id arguments (`-` reads stdin) for `action`.
    pub fn resolve_ids(&self, args: &[IdArg], action: &str) -> Result<Vec<ItemId>, CliError> {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        ids::resolve(args, &mut lock).map_err(|e| {
            self.fail(action, e)
                .hint("give one item id (a positive integer) per line; nothing was changed")
        })
    }

    /// Report the outcome of an id-list command on pending items.
    pub fn finish_ids(
        &mut self,
        report: &spool::ops::ids::IdsReport,
        action: &str,
        done_verb: &str,
        json_name: &str,
    ) -> Result<(), CliError> {
        self.finish_id_list(report, &PENDING_IDS, action, done_verb, json_name)
    }

    /// Report the outcome of an id-list command: exit 65 naming the ids
    /// that were not `kind` (nothing on stdout, as every error);
    /// otherwise a note for the changed ids and, with --json,
    /// `{"<json_name>": [...], "unknown": []}`.
    pub fn finish_id_list(
        &mut self,
        report: &spool::ops::ids::IdsReport,
        kind: &IdKind,
        action: &str,
        done_verb: &str,
        json_name: &str,
    ) -> Result<(), CliError> {
        let n = report.changed.len();
        let nouns = |n: usize| {
            if n == 1 {
                kind.noun.to_string()
            } else {
                format!("{}s", kind.noun)
            }
        };
        if !report.unknown.is_empty() {
            let list: Vec<String> = report.unknown.iter().map(|i| i.to_string()).collect();
            let others = if n > 0 {
                format!(
                    " (the {n} other {} {} {done_verb})",
                    nouns(n),
                    if n == 1 { "was" } else { "were" }
                )
            } else {
                String::new()
            };
            return Err(CliError::new(
                exit::DATA,
                format!(
                    "{action} {}: no {} with id {}{others}",
                    self.shown(),
                    kind.missing,
                    list.join(", ")
                ),
            )
            .hint(kind.hint));
        }
        if n > 0 {
            self.note(&format!("{done_verb} {n} {}", nouns(n)));
        } else if let Some(none) = kind.note_when_none {
            self.note(none);
        }
        if self.json {
            let mut obj = serde_json::Map::new();
            obj.insert(json_name.into(), serde_json::json!(report.changed));
            obj.insert("unknown".into(), serde_json::json!(report.unknown));
            self.out.json(&obj)?;
        }
        Ok(())
    }
}

/// What the ids of an id-list command name, for its messages.
pub struct IdKind {
    /// One of them: "item", "dead letter".
    pub noun: &'static str,
    /// What an unknown id is not: "pending item", "dead letter".
    pub missing: &'static str,
    /// The hint after an unknown id.
    pub hint: &'static str,
    /// A note when nothing changed (and nothing was unknown).
    pub note_when_none: Option<&'static str>,
}

/// Ids of pending items (done, hold, release).
pub const PENDING_IDS: IdKind = IdKind {
    noun: "item",
    missing: "pending item",
    hint: "`spool list` shows the pending items and their ids",
    note_when_none: None,
};

/// Ids of dead letters (dlq requeue, dlq purge).
pub const DEAD_IDS: IdKind = IdKind {
    noun: "dead letter",
    missing: "dead letter",
    hint: "`spool dlq list` shows the dead letters and their ids",
    note_when_none: Some("no dead letters"),
};

/// The library's message, without a repetition of the spool path.
fn describe(e: &Error, spool: &Path) -> String {
    match e {
        Error::NotFound { path }
            if path == spool
                && spool::backend::postgres::is_postgres_url(&path.to_string_lossy()) =>
        {
            "no spool of this name exists in the database".into()
        }
        Error::NotFound { path } if path == spool => "no spool exists at this path".into(),
        Error::AlreadyExists { path } if path == spool => {
            "the path already exists (it was left untouched)".into()
        }
        Error::CannotCreate { path, detail } if path == spool => {
            format!("cannot create the spool: {detail}")
        }
        Error::NetworkFileSystem { path, fs_type } if path == spool => format!(
            "refusing to create the spool on a network file system ({fs_type}): its locking \
             (SQLite's WAL shared memory, NDJSON's flock) is not safe between machines"
        ),
        _ => {
            let msg = e.to_string();
            let prefix = format!("{}: ", spool.display());
            match msg.strip_prefix(&prefix) {
                Some(rest) => rest.to_string(),
                None => msg,
            }
        }
    }
}

/// The next step for a person who meets `e`.
fn default_hint(e: &Error) -> Option<String> {
    let h = match e {
        Error::NotFound { .. } => {
            "create it with `spool init` (enqueue creates it too), or point --spool or SPOOL_PATH at an existing spool"
        }
        Error::AlreadyExists { .. } => "choose another --spool path; the existing file was not changed",
        Error::SpoolNameTaken { .. } => {
            "use the existing spool as it is, or give the new one another name (?spool=NAME in the URL)"
        }
        Error::CannotCreate { .. } => {
            "make sure the spool's directory exists (mkdir -p) and is writable"
        }
        Error::Corrupt { .. } => {
            "the spool file was left unchanged; `spool verify` describes the damage"
        }
        Error::NotASpool { .. } => {
            "check the --spool path (or SPOOL_PATH): it names a file that spool did not write"
        }
        Error::SchemaTooNew { .. } => "use a newer version of spool for this spool",
        Error::NetworkFileSystem { .. } => {
            "put the spool on a local disk; if only this machine will ever use the share, --allow-network-fs creates it there anyway"
        }
        Error::QueueFull { .. } => {
            "make room (`spool replay`, `spool done ID`), allow more for one call with --max-depth N, or wait with --wait-for-space DURATION"
        }
        Error::IdentityRefused(_) => {
            "import --identity into a new spool (a path that does not exist yet, or one just made with `spool init`); without --identity the items come in unsent under this spool's own identity"
        }
        Error::ReplayLocked { .. } | Error::Busy { .. } => {
            "another process holds the spool; try again shortly"
        }
        _ => match e.kind() {
            ErrorKind::PermissionDenied => {
                "check the permissions of the spool, its directory and any input file"
            }
            ErrorKind::Io => "check free disk space and the health of the file system",
            ErrorKind::Internal => "this is a bug in spool; please report it with the command you ran",
            _ => return None,
        },
    };
    Some(h.to_string())
}
