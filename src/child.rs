//! Running a child process with a bound: the one helper behind the
//! `--exec` target, the `--on-dead` hook, watch's
//! `--on-online`/`--on-offline` hooks and its `exec:` probe.
//!
//! A command given on the command line is split into argv like a shell
//! would ([`parse_command`]) and run directly, not through a shell (unless
//! `--exec --shell` asks for `/bin/sh -c`). The child runs in its own
//! process group with stdout discarded; its stdin gets the given bytes
//! (or nothing); the tail of its stderr is kept for the caller's message
//! (read on a thread, so a chatty child never blocks on a full pipe), or
//! stderr is discarded ([`Stderr`]). When the bound passes, the whole
//! process group is killed (`SIGKILL`), so a shell's children go too.

use crate::error::{Error, Result};
use crate::units::format_duration;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes of the child's stderr kept.
pub const STDERR_TAIL: usize = 2048;

/// Stdin payloads up to this size are written without a helper thread
/// (they fit in the pipe buffer).
const INLINE_STDIN: usize = 32 * 1024;

/// How long the stderr reader may take to see the end of the pipe after
/// the child ended: a grandchild that keeps the pipe open must not stall
/// the caller.
const STDERR_GRACE: Duration = Duration::from_millis(200);

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it.
    Signal(i32),
    /// It ran past the bound; its process group was killed.
    TimedOut,
    /// Neither an exit code nor a signal (should not happen on Unix).
    Abnormal,
}

/// What becomes of the child's stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// Read on a thread; its last [`STDERR_TAIL`] bytes (or a little
    /// more) come back in [`Finished::stderr`].
    Tail,
    /// Discarded: nothing is read and nothing comes back.
    Discard,
}

/// What a finished child left.
#[derive(Clone, Debug)]
pub struct Finished {
    /// How it ended.
    pub ended: Ended,
    /// The last [`STDERR_TAIL`] bytes (or a little more) of its stderr;
    /// empty with [`Stderr::Discard`].
    pub stderr: Vec<u8>,
}

impl Finished {
    /// `head`, followed by the last lines of the child's stderr when it
    /// wrote any: `command exited with 3: line 4 | line 5`.
    pub fn with_stderr(&self, head: String) -> String {
        with_stderr(head, &self.stderr)
    }

    /// `Ok` when the child exited 0; otherwise how it ended, naming it as
    /// `` `shown` `` and followed by the tail of its stderr, as hooks and
    /// the `exec:` probe report it (`timeout` is the bound it was run
    /// with): `` `notify.sh` exited with 3: line 4 | line 5 ``.
    pub fn succeeded(&self, shown: &str, timeout: Duration) -> std::result::Result<(), String> {
        let head = match self.ended {
            Ended::Exited(0) => return Ok(()),
            Ended::Exited(c) => format!("`{shown}` exited with {c}"),
            Ended::Signal(s) => format!("`{shown}` was killed by signal {s}"),
            Ended::TimedOut => format!(
                "`{shown}` timed out after {}; its process group was killed",
                format_duration(timeout)
            ),
            Ended::Abnormal => format!("`{shown}` ended abnormally"),
        };
        Err(self.with_stderr(head))
    }
}

/// Split `command` into argv like a shell would (quotes honoured), to run
/// without one. `flag` names the option it came from in the errors
/// ([`Error::InvalidInput`]): a command that cannot be split, or an empty
/// one.
pub fn parse_command(flag: &str, command: &str) -> Result<Vec<String>> {
    let argv = shell_words::split(command)
        .map_err(|e| Error::InvalidInput(format!("cannot parse {flag} {command:?}: {e}")))?;
    if argv.first().is_none_or(String::is_empty) {
        return Err(Error::InvalidInput(format!("{flag} needs a command")));
    }
    Ok(argv)
}

/// The last five non-empty lines of `bytes`, joined with ` | `.
pub fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(5);
    lines[start..].join(" | ")
}

/// `head: <tail of stderr>`, or `head` when stderr had nothing.
pub fn with_stderr(head: String, stderr: &[u8]) -> String {
    let tail = tail_text(stderr);
    if tail.is_empty() {
        head
    } else {
        format!("{head}: {tail}")
    }
}

/// Run `cmd` (program, arguments and environment set by the caller) in
/// its own process group, `stdin` on its standard input (`None`: closed),
/// stdout discarded, stderr as `stderr` says, and wait for it at most
/// `timeout`. `Err` when it cannot be started or waited for, naming
/// `program`.
pub fn run(
    mut cmd: Command,
    program: &str,
    stdin: Option<&[u8]>,
    timeout: Option<Duration>,
    stderr: Stderr,
) -> std::result::Result<Finished, String> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::null())
    .stderr(match stderr {
        Stderr::Tail => Stdio::piped(),
        Stderr::Discard => Stdio::null(),
    })
    .process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let pid = child.id() as i32;

    // The stderr reader says when it saw the end of the pipe.
    let tail: Arc<Mutex<Vec<u8>>> = Arc::default();
    let eof = child.stderr.take().map(|mut err| {
        let tail = tail.clone();
        let (eof_tx, eof_rx) = mpsc::channel::<()>();
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
        eof_rx
    });

    // A child that does not read its stdin is fine.
    if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), stdin) {
        if bytes.len() <= INLINE_STDIN {
            let _ = pipe.write_all(bytes);
        } else {
            let bytes = bytes.to_vec();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
    }

    let mut timed_out = false;
    let status = match timeout {
        None => child.wait(),
        Some(limit) => {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(child.wait());
            });
            match rx.recv_timeout(limit) {
                Ok(r) => r,
                Err(_) => {
                    timed_out = true;
                    // SAFETY: killpg only sends a signal to the process
                    // group this child leads (started with process_group(0)).
                    unsafe {
                        libc::killpg(pid, libc::SIGKILL);
                    }
                    rx.recv()
                        .map_err(|_| format!("lost track of the timed-out {program}"))?
                }
            }
        }
    }
    .map_err(|e| format!("cannot wait for {program}: {e}"))?;
    if let Some(eof) = eof {
        let _ = eof.recv_timeout(STDERR_GRACE);
    }
    let stderr = tail.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let ended = if timed_out {
        Ended::TimedOut
    } else {
        match (status.code(), status.signal()) {
            (Some(c), _) => Ended::Exited(c),
            (None, Some(s)) => Ended::Signal(s),
            (None, None) => Ended::Abnormal,
        }
    };
    Ok(Finished { ended, stderr })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn stderr_tail_keeps_last_lines() {
        assert_eq!(tail_text(b"a\nb\n\nc\nd\ne\nf\n"), "b | c | d | e | f");
        assert_eq!(with_stderr("x".into(), b""), "x");
    }

    #[test]
    fn stdin_exit_code_and_stderr_come_through() {
        let f = run(
            sh("read x; echo \"got $x\" >&2; exit 3"),
            "sh",
            Some(b"hello\n"),
            Some(Duration::from_secs(30)),
            Stderr::Tail,
        )
        .unwrap();
        assert_eq!(f.ended, Ended::Exited(3));
        assert_eq!(f.with_stderr("failed".into()), "failed: got hello");
    }

    #[test]
    fn a_child_past_its_bound_is_killed_with_its_group() {
        let f = run(
            sh("sleep 30 & wait"),
            "sh",
            None,
            Some(Duration::from_millis(100)),
            Stderr::Tail,
        )
        .unwrap();
        assert_eq!(f.ended, Ended::TimedOut);
    }

    #[test]
    fn discarded_stderr_leaves_nothing() {
        let f = run(
            sh("echo noise >&2; exit 4"),
            "sh",
            None,
            Some(Duration::from_secs(30)),
            Stderr::Discard,
        )
        .unwrap();
        assert_eq!(f.ended, Ended::Exited(4));
        assert!(f.stderr.is_empty());
    }

    #[test]
    fn success_and_failures_read_as_hooks_report_them() {
        let done = |ended, stderr: &[u8]| Finished {
            ended,
            stderr: stderr.to_vec(),
        };
        let t = Duration::from_secs(5);
        assert_eq!(done(Ended::Exited(0), b"").succeeded("x", t), Ok(()));
        assert_eq!(
            done(Ended::Exited(3), b"oops\n").succeeded("x", t),
            Err("`x` exited with 3: oops".into())
        );
        assert_eq!(
            done(Ended::Signal(9), b"").succeeded("x", t),
            Err("`x` was killed by signal 9".into())
        );
        assert_eq!(
            done(Ended::TimedOut, b"").succeeded("x", t),
            Err("`x` timed out after 5s; its process group was killed".into())
        );
        assert_eq!(
            done(Ended::Abnormal, b"").succeeded("x", t),
            Err("`x` ended abnormally".into())
        );
    }

    #[test]
    fn commands_split_like_a_shell() {
        assert_eq!(
            parse_command("--on-dead", "sh -c 'echo \"$1\"' x").unwrap(),
            ["sh", "-c", "echo \"$1\"", "x"]
        );
        let e = parse_command("--on-dead", "'unclosed").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot parse --on-dead \"'unclosed\":"),
            "{e}"
        );
        let e = parse_command("--exec", "  ").unwrap_err();
        assert_eq!(e.to_string(), "--exec needs a command");
    }

    #[test]
    fn a_missing_program_is_an_error_naming_it() {
        let e = run(
            Command::new("/nonexistent/spool-test"),
            "/nonexistent/spool-test",
            None,
            None,
            Stderr::Tail,
        )
        .unwrap_err();
        assert!(e.starts_with("cannot run /nonexistent/spool-test:"), "{e}");
    }
}
