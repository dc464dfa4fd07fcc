//! The `--exec CMD` target: one child process per item.
//!
//! The command line is split into argv like a shell would (quotes
//! honoured) and executed directly, never through a shell unless asked
//! (`shell: true` runs `/bin/sh -c CMD`), so a payload or key can never
//! become shell syntax: the payload goes to the child's stdin and the
//! metadata to its environment. The child runs in its own process group;
//! a timeout kills the whole group.

use super::{Delivery, Outcome, Target};
use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of the child's stderr kept for `last_error`.
const STDERR_TAIL: usize = 2048;

/// Payloads up to this size are written to the child's stdin without a
/// helper thread (they fit in the pipe buffer).
const INLINE_STDIN: usize = 32 * 1024;

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
            shell_words::split(command)
                .map_err(|e| Error::InvalidInput(format!("cannot parse --exec {command:?}: {e}")))?
        };
        if argv.is_empty() || argv[0].is_empty() {
            return Err(Error::InvalidInput("--exec needs a command".into()));
        }
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

fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(5);
    lines[start..].join(" | ")
}

fn with_stderr(head: String, stderr: &[u8]) -> String {
    let tail = tail_text(stderr);
    if tail.is_empty() {
        head
    } else {
        format!("{head}: {tail}")
    }
}

impl Target for ExecTarget {
    fn describe(&self) -> String {
        shell_words::join(&self.argv)
    }

    fn deliver(&self, d: &Delivery<'_>) -> std::result::Result<Outcome, String> {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .env("SPOOL_ITEM_ID", d.item.id.to_string())
            .env("SPOOL_IDEMPOTENCY_KEY", d.idempotency_key)
            .env("SPOOL_ATTEMPT", d.attempt.to_string())
            .process_group(0);
        if let Some(p) = d.spool_path {
            cmd.env("SPOOL_PATH", p);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.argv[0]))?;
        let pid = child.id() as i32;

        // stderr: keep the tail, read on a thread so a chatty child never
        // blocks on a full pipe.
        let tail: Arc<Mutex<Vec<u8>>> = Arc::default();
        let (eof_tx, eof_rx) = mpsc::channel::<()>();
        if let Some(mut err) = child.stderr.take() {
            let tail = tail.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match err.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                            t.extend_from_slice(&buf[..n]);
                            if t.len() > STDERR_TAIL * 2 {
                                let cut = t.len() - STDERR_TAIL;
                                t.drain(..cut);
                            }
                        }
                    }
                }
                let _ = eof_tx.send(());
            });
        }

        // stdin: the payload. A child that does not read it is fine.
        if let Some(mut stdin) = child.stdin.take() {
            if d.item.payload.len() <= INLINE_STDIN {
                let _ = stdin.write_all(&d.item.payload);
            } else {
                let payload = d.item.payload.clone();
                std::thread::spawn(move || {
                    let _ = stdin.write_all(&payload);
                });
            }
        }

        let status: ExitStatus;
        let mut timed_out = false;
        match self.timeout {
            None => {
                status = child
                    .wait()
                    .map_err(|e| format!("cannot wait for {}: {e}", self.argv[0]))?;
            }
            Some(limit) => {
                let (tx, rx) = mpsc::channel();
                std::thread::spawn(move || {
                    let _ = tx.send(child.wait());
                });
                let got = match rx.recv_timeout(limit) {
                    Ok(r) => r,
                    Err(_) => {
                        timed_out = true;
                        // SAFETY: killpg only sends a signal to the
                        // process group this child leads.
                        unsafe {
                            libc::killpg(pid, libc::SIGKILL);
                        }
                        rx.recv()
                            .map_err(|_| "lost track of the timed-out command".to_string())?
                    }
                };
                status = got.map_err(|e| format!("cannot wait for {}: {e}", self.argv[0]))?;
            }
        }
        // Give the stderr reader a moment to see EOF; a grandchild that
        // keeps the pipe open must not stall the replay.
        let _ = eof_rx.recv_timeout(Duration::from_millis(200));
        let stderr = tail.lock().unwrap_or_else(|e| e.into_inner()).clone();

        if timed_out {
            let limit = self.timeout.unwrap_or_default();
            return Ok(Outcome::failed(with_stderr(
                format!(
                    "command timed out after {}; its process group was killed",
                    crate::units::format_duration(limit)
                ),
                &stderr,
            )));
        }
        Ok(match (status.code(), status.signal()) {
            (Some(0), _) => Outcome::Delivered(crate::item::Evidence::Exit(0)),
            (Some(c), _) if self.reject_exit.contains(&c) => Outcome::Rejected {
                reason: with_stderr(format!("command rejected the item (exit {c})"), &stderr),
            },
            (Some(c), _) => {
                Outcome::failed(with_stderr(format!("command exited with {c}"), &stderr))
            }
            (None, Some(sig)) => Outcome::failed(with_stderr(
                format!("command killed by signal {sig}"),
                &stderr,
            )),
            (None, None) => {
                Outcome::failed(with_stderr("command ended abnormally".into(), &stderr))
            }
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

    #[test]
    fn stderr_tail_keeps_last_lines() {
        assert_eq!(tail_text(b"a\nb\n\nc\nd\ne\nf\n"), "b | c | d | e | f");
        assert_eq!(with_stderr("x".into(), b""), "x");
    }
}
