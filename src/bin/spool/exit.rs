//! Exit codes, in one place (the spec's §6 table, after `sysexits.h`),
//! and the one error type every command returns.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; also `--help`, `--version`, and a reader closing stdout |
//! | 1 | replay dead-lettered an item (replay only) |
//! | 64 | usage error |
//! | 65 | bad data: corrupt spool, malformed input, unknown id |
//! | 66 | the spool or an input file does not exist |
//! | 70 | internal error (a bug) |
//! | 73 | cannot create the spool (it exists, or its directory is missing) |
//! | 74 | I/O error |
//! | 75 | temporary: spool full, locked or busy |
//! | 77 | permission denied |
//! | 78 | configuration error: `serve` refuses an unsafe or broken configuration |
//! | 130 / 143 | interrupted by SIGINT / SIGTERM (replay, watch) |

use spool::replay::ReplayStatus;
use spool::ErrorKind;

/// Success.
pub const OK: u8 = 0;
/// Replay dead-lettered at least one item (used by `replay`).
pub const DEAD_LETTERED: u8 = 1;
/// Usage error (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// Bad data (`EX_DATAERR`).
pub const DATA: u8 = 65;
/// Missing spool or input file (`EX_NOINPUT`).
pub const NO_INPUT: u8 = 66;
/// Internal error (`EX_SOFTWARE`).
pub const SOFTWARE: u8 = 70;
/// Cannot create (`EX_CANTCREAT`).
pub const CANT_CREATE: u8 = 73;
/// I/O error (`EX_IOERR`).
pub const IO: u8 = 74;
/// Temporary failure (`EX_TEMPFAIL`).
pub const TEMP_FAIL: u8 = 75;
/// Permission denied (`EX_NOPERM`).
pub const NO_PERM: u8 = 77;
/// Configuration error (`EX_CONFIG`): `serve` refuses an unsafe or
/// broken configuration.
pub const CONFIG: u8 = 78;
/// Stopped by SIGINT (used by `replay` and `watch`).
pub const INTERRUPTED: u8 = 130;
/// Stopped by SIGTERM (used by `replay` and `watch`).
pub const TERMINATED: u8 = 143;

/// The exit code for a library error of `kind`.
pub fn for_kind(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Usage => USAGE,
        ErrorKind::Data => DATA,
        ErrorKind::NotFound => NO_INPUT,
        ErrorKind::CannotCreate => CANT_CREATE,
        ErrorKind::Io => IO,
        ErrorKind::Temporary => TEMP_FAIL,
        ErrorKind::PermissionDenied => NO_PERM,
        ErrorKind::Internal => SOFTWARE,
        ErrorKind::Config => CONFIG,
        _ => SOFTWARE,
    }
}

/// The exit status of a replay (or push) run whose report was printed
/// (SPEC §4): 0 when every due item was delivered, 75 when something
/// stays queued for retry, 1 when an item was dead-lettered.
pub fn for_replay(status: ReplayStatus) -> Result<(), CliError> {
    match status {
        ReplayStatus::Clean => Ok(()),
        ReplayStatus::Retry => Err(CliError::Silent(TEMP_FAIL)),
        ReplayStatus::DeadLettered => Err(CliError::Silent(DEAD_LETTERED)),
    }
}

/// The exit code for an argument-parser error: 0 for `--help` and
/// `--version` (printed to stdout), 64 for everything else.
pub fn for_clap(e: &clap::Error) -> u8 {
    if e.use_stderr() {
        USAGE
    } else {
        OK
    }
}

/// Why a command did not succeed.
#[derive(Debug)]
pub enum CliError {
    /// The reader of stdout went away (`spool drain | head -1`): stop
    /// quietly, successfully.
    ClosedPipe,
    /// An exit status whose explanation was already printed (replay's
    /// summary goes to stdout whatever the exit code).
    Silent(u8),
    /// A failure to report: one `spool: error: …` line, an optional
    /// `hint: …` line, and the exit code.
    Failed {
        code: u8,
        message: String,
        hint: Option<String>,
    },
}

impl CliError {
    /// A failure with `code` and `message`.
    pub fn new(code: u8, message: impl Into<String>) -> CliError {
        CliError::Failed {
            code,
            message: message.into(),
            hint: None,
        }
    }

    /// Add (or replace) the hint.
    pub fn hint(self, h: impl Into<String>) -> CliError {
        match self {
            CliError::Failed { code, message, .. } => CliError::Failed {
                code,
                message,
                hint: Some(h.into()),
            },
            other => other,
        }
    }

    /// The exit code.
    pub fn code(&self) -> u8 {
        match self {
            CliError::ClosedPipe => OK,
            CliError::Silent(code) => *code,
            CliError::Failed { code, .. } => *code,
        }
    }

    /// The message and hint on one line, for a status bar (`spool top`).
    pub fn to_string_line(&self) -> String {
        match self {
            CliError::Failed {
                message,
                hint: Some(h),
                ..
            } => format!("error: {message} (hint: {h})"),
            CliError::Failed { message, .. } => format!("error: {message}"),
            CliError::ClosedPipe | CliError::Silent(_) => format!("exit {}", self.code()),
        }
    }

    /// Write the message (and hint) to stderr and give the exit code.
    pub fn report(self) -> u8 {
        use std::io::Write;
        if let CliError::Failed { message, hint, .. } = &self {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "spool: error: {message}");
            if let Some(h) = hint {
                let _ = writeln!(err, "hint: {h}");
            }
        }
        self.code()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_row() {
        assert_eq!(for_kind(ErrorKind::Usage), 64);
        assert_eq!(for_kind(ErrorKind::Data), 65);
        assert_eq!(for_kind(ErrorKind::NotFound), 66);
        assert_eq!(for_kind(ErrorKind::Internal), 70);
        assert_eq!(for_kind(ErrorKind::CannotCreate), 73);
        assert_eq!(for_kind(ErrorKind::Io), 74);
        assert_eq!(for_kind(ErrorKind::Temporary), 75);
        assert_eq!(for_kind(ErrorKind::PermissionDenied), 77);
        assert_eq!(for_kind(ErrorKind::Config), 78);
    }

    #[test]
    fn every_replay_status_has_its_row() {
        assert!(for_replay(ReplayStatus::Clean).is_ok());
        let code = |s| for_replay(s).map_err(|e| e.code()).err();
        assert_eq!(code(ReplayStatus::Retry), Some(75));
        assert_eq!(code(ReplayStatus::DeadLettered), Some(1));
    }
}
