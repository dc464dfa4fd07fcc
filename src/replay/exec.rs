//! The `--exec CMD` target: one child process per item.
//!
//! The command line is split into argv like a shell would (quotes
//! honoured) and executed directly, never through a shell unless asked
//! (`shell: true` runs `/bin/sh -c CMD`), so a payload or key can never
//! become shell syntax: the payload goes to the child's stdin and the
//! metadata to its environment. The child runs in its own process group;
//! a timeout kills the whole group ([`crate::child`], shared with the
//! hooks and the watch probe).

use super::{Delivery, Outcome, Target};
use crate::child::{self, Ended, Stderr};
use crate::error::Result;
use std::process::Command;
use std::time::Duration;

/// Delivers an item by running a command with the payload on stdin.
#[derive(Debug, Clone)]
pub struct ExecTarget {
    argv: Vec<String>,
    reject_exit: Vec<i32>,
    timeout: Option<Duration>,
}

impl ExecTarget {
    /// Parse `command` (split like a shell, or run by `/bin/sh -c` when
    /// `shell`). `reject_exit` lists the exit codes that reject an item
    /// for good (default 65); `timeout` bounds one attempt.
    pub fn new(
        command: &str,
        shell: bool,
        reject_exit: Vec<i32>,
        timeout: Option<Duration>,
    ) -> Result<ExecTarget> {
        let argv = if shell {
            vec!["/bin/sh".to_string(), "-c".to_string(), command.to_string()]
        } else {
            child::parse_command("--exec", command)?
        };
        Ok(ExecTarget {
            argv,
            reject_exit,
            timeout,
        })
    }

    /// The argv that will run.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }
}

/// Parse a comma-separated list of exit codes (`65,66`).
pub fn parse_exit_codes(s: &str) -> std::result::Result<Vec<i32>, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .ok()
                .filter(|c| (0..=255).contains(c))
                .ok_or_else(|| format!("invalid exit code {p:?} (expected 0-255)"))
        })
        .collect()
}

impl Target for ExecTarget {
    fn describe(&self) -> String {
        shell_words::join(&self.argv)
    }

    fn deliver(&self, d: &Delivery<'_>) -> std::result::Result<Outcome, String> {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env("SPOOL_ITEM_ID", d.item.id.to_string())
            .env("SPOOL_IDEMPOTENCY_KEY", d.idempotency_key)
            .env("SPOOL_ATTEMPT", d.attempt.to_string())
            // The payload's length, so that a command can tell a payload
            // cut short (its replayer killed while writing stdin: the
            // command reads end-of-file early) from a whole one.
            .env("SPOOL_PAYLOAD_BYTES", d.item.payload.len().to_string());
        if let Some(p) = d.spool_path {
            cmd.env("SPOOL_PATH", p);
        }
        let done = child::run(
            cmd,
            &self.argv[0],
            Some(&d.item.payload),
            self.timeout,
            Stderr::Tail,
        )?;
        Ok(match done.ended {
            Ended::TimedOut => Outcome::failed(done.with_stderr(format!(
                "command timed out after {}; its process group was killed",
                crate::units::format_duration(self.timeout.unwrap_or_default())
            ))),
            Ended::Exited(0) => Outcome::Delivered(crate::item::Evidence::Exit(0)),
            Ended::Exited(c) if self.reject_exit.contains(&c) => Outcome::Rejected {
                reason: done.with_stderr(format!("command rejected the item (exit {c})")),
            },
            Ended::Exited(c) => {
                Outcome::failed(done.with_stderr(format!("command exited with {c}")))
            }
            Ended::Signal(sig) => {
                Outcome::failed(done.with_stderr(format!("command killed by signal {sig}")))
            }
            Ended::Abnormal => Outcome::failed(done.with_stderr("command ended abnormally".into())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_parse() {
        assert_eq!(parse_exit_codes("65").unwrap(), vec![65]);
        assert_eq!(parse_exit_codes("65, 66").unwrap(), vec![65, 66]);
        assert!(parse_exit_codes("x").is_err());
        assert!(parse_exit_codes("300").is_err());
        assert!(parse_exit_codes("").is_err());
    }

    #[test]
    fn commands_split_like_a_shell_without_one() {
        let t = ExecTarget::new("sh -c 'echo \"$1\"' x", false, vec![65], None).unwrap();
        assert_eq!(t.argv(), ["sh", "-c", "echo \"$1\"", "x"]);
        assert!(ExecTarget::new("'unclosed", false, vec![], None).is_err());
        assert!(ExecTarget::new("   ", false, vec![], None).is_err());
        let t = ExecTarget::new("a | b", true, vec![], None).unwrap();
        assert_eq!(t.argv(), ["/bin/sh", "-c", "a | b"]);
    }
}
