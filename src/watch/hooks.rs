//! The watch daemon's hooks: the `--on-online` and `--on-offline`
//! commands, split like `--exec` and run through [`crate::child`].

use crate::child::{self, Stderr};
use crate::error::Result;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Which hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// `--on-online`
    Online,
    /// `--on-offline`
    Offline,
}

impl HookKind {
    /// The flag's name.
    pub fn flag(self) -> &'static str {
        match self {
            HookKind::Online => "--on-online",
            HookKind::Offline => "--on-offline",
        }
    }

    fn event(self) -> &'static str {
        match self {
            HookKind::Online => "online",
            HookKind::Offline => "offline",
        }
    }
}

/// A hook command (`--on-online`, `--on-offline`).
#[derive(Clone, Debug)]
pub(crate) struct Hook {
    /// Which hook.
    pub(crate) kind: HookKind,
    /// The command, as given.
    pub(crate) command: String,
    argv: Vec<String>,
    timeout: Duration,
}

impl Hook {
    /// Split `command` like `--exec` (no shell); errors name the hook's
    /// flag.
    pub(crate) fn parse(kind: HookKind, command: &str, timeout: Duration) -> Result<Hook> {
        Ok(Hook {
            kind,
            command: command.to_string(),
            argv: child::parse_command(kind.flag(), command)?,
            timeout,
        })
    }

    /// Run the hook: no shell, its own process group, stdin and stdout
    /// closed, `SPOOL_PATH` and `SPOOL_EVENT` set. `Err` describes a
    /// failure with the tail of its stderr.
    pub(crate) fn run(&self, spool: &Path) -> std::result::Result<(), String> {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env("SPOOL_PATH", spool)
            .env("SPOOL_EVENT", self.kind.event());
        child::run(cmd, &self.argv[0], None, Some(self.timeout), Stderr::Tail)?
            .succeeded(&self.command, self.timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_report_failures_with_their_stderr() {
        let h = Hook::parse(HookKind::Online, "true", Duration::from_secs(5)).unwrap();
        assert_eq!(h.run(Path::new("/x")), Ok(()));
        let h = Hook::parse(
            HookKind::Offline,
            "sh -c 'echo \"$SPOOL_EVENT $SPOOL_PATH\" >&2; exit 3'",
            Duration::from_secs(5),
        )
        .unwrap();
        let e = h.run(Path::new("/x/q.db")).unwrap_err();
        assert!(e.contains("exited with 3: offline /x/q.db"), "{e}");
        let h = Hook::parse(HookKind::Online, "sleep 5", Duration::from_millis(50)).unwrap();
        let e = h.run(Path::new("/x")).unwrap_err();
        assert!(e.contains("timed out"), "{e}");
        let h = Hook::parse(HookKind::Online, "/no/such/hook", Duration::from_secs(1)).unwrap();
        assert!(h
            .run(Path::new("/x"))
            .unwrap_err()
            .starts_with("cannot run"));
    }
}
