//! `spool top` through a real pseudo-terminal: the binary runs in a pty
//! of a fixed size, `vt100` keeps the screen it draws, and each test
//! polls that screen against a generous deadline (no fixed sleeps).
//! Checked: the header's depth, an enqueue from another process showing
//! up, a hold through the keys changing the spool, `q` and SIGTERM
//! restoring the terminal, `--read-only` refusing, enqueue and replay
//! running unhindered beside it, and exit 64 without a terminal.

mod cli_common;

use cli_common::{Env, BACKENDS};
use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};
use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROWS: u16 = 40;
const COLS: u16 = 160;
/// Long enough for a debug binary on a loaded two-core machine.
const DEADLINE: Duration = Duration::from_secs(20);

/// What the pty has shown so far: the parsed screen and the raw bytes.
struct Seen {
    parser: vt100::Parser,
    raw: Vec<u8>,
}

/// `spool top` running in a pty.
struct Top {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    seen: Arc<Mutex<Seen>>,
    _master: Box<dyn MasterPty + Send>,
}

impl Top {
    fn start(env: &Env, args: &[&str]) -> Top {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("open a pty");
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_spool"));
        cmd.cwd(env.dir.path());
        cmd.env_remove("SPOOL_PATH");
        cmd.env("LC_ALL", "C");
        cmd.env("TERM", "xterm-256color");
        cmd.arg("--spool");
        cmd.arg(&env.path);
        cmd.arg("top");
        cmd.args(args);
        let child = pair.slave.spawn_command(cmd).expect("spawn spool top");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("pty reader");
        let writer = pair.master.take_writer().expect("pty writer");
        let seen = Arc::new(Mutex::new(Seen {
            parser: vt100::Parser::new(
                NonZeroU16::new(ROWS).unwrap(),
                NonZeroU16::new(COLS).unwrap(),
                0,
            ),
            raw: Vec::new(),
        }));
        let sink = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = sink.lock().unwrap();
                s.parser.process(&buf[..n]);
                s.raw.extend_from_slice(&buf[..n]);
            }
        });
        Top {
            child,
            writer,
            seen,
            _master: pair.master,
        }
    }

    fn screen(&self) -> String {
        self.seen.lock().unwrap().parser.screen().contents()
    }

    /// Wait until the screen contains `text`; panics with the screen
    /// after the deadline.
    fn wait_for(&self, text: &str) {
        let end = Instant::now() + DEADLINE;
        loop {
            if self.screen().contains(text) {
                return;
            }
            if Instant::now() > end {
                panic!("{text:?} never appeared; the screen:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn keys(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Wait for the process to end; its exit code.
    fn exit_code(&mut self) -> u32 {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.exit_code();
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("spool top did not exit; the screen:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The terminal was given back: the alternate screen left, the
    /// cursor shown, in the escape sequences and in the parsed state.
    /// (The reader thread may lag the exit a little: poll.)
    fn assert_restored(&self) {
        let end = Instant::now() + DEADLINE;
        loop {
            {
                let s = self.seen.lock().unwrap();
                let raw = String::from_utf8_lossy(&s.raw);
                let restored = raw.contains("\x1b[?1049l")
                    && raw.rfind("\x1b[?25h") > raw.rfind("\x1b[?25l")
                    && !s.parser.screen().alternate_screen()
                    && !s.parser.screen().hide_cursor();
                if restored {
                    return;
                }
            }
            if Instant::now() > end {
                let s = self.seen.lock().unwrap();
                panic!(
                    "terminal not restored (alternate screen {}, cursor hidden {})",
                    s.parser.screen().alternate_screen(),
                    s.parser.screen().hide_cursor()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Top {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn enqueue(env: &Env, payload: &str) {
    env.cmd().args(["enqueue", payload]).assert().success();
}

fn held_ids(env: &Env) -> Vec<u64> {
    let out = env
        .cmd()
        .args(["list", "--state", "held", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect()
}

#[test]
fn the_header_shows_the_depth_and_a_new_enqueue_appears() {
    for file in BACKENDS {
        let env = Env::new(file);
        for p in ["a", "b", "c"] {
            enqueue(&env, p);
        }
        let mut top = Top::start(&env, &["--interval", "100ms"]);
        top.wait_for("depth 3 ");
        // The shape, computed on the side: three items never attempted.
        top.wait_for("never attempted");
        enqueue(&env, "from-another-process");
        top.wait_for("depth 4 ");
        top.wait_for("from-another-process");
        top.keys("q");
        assert_eq!(top.exit_code(), 0, "{file}");
        top.assert_restored();
    }
}

#[test]
fn a_hold_through_the_keys_changes_the_spool() {
    for file in BACKENDS {
        let env = Env::new(file);
        enqueue(&env, "first");
        enqueue(&env, "second");
        let mut top = Top::start(&env, &["--interval", "100ms"]);
        top.wait_for("second");
        top.keys("h");
        top.wait_for("hold item 1? (y/n)");
        top.keys("y");
        top.wait_for("held 1 item");
        assert_eq!(held_ids(&env), vec![1], "{file}");
        // The filtered set: every pending item matching "sec".
        top.keys("/sec\r");
        top.wait_for("filter: sec");
        top.keys("H");
        top.wait_for("hold item 2? (y/n)");
        top.keys("n");
        top.wait_for("cancelled: nothing changed");
        assert_eq!(held_ids(&env), vec![1], "{file}");
        top.keys("q");
        assert_eq!(top.exit_code(), 0);
        top.assert_restored();
    }
}

#[test]
fn read_only_refuses_actions() {
    let env = Env::new("spool.db");
    enqueue(&env, "keep-me");
    let mut top = Top::start(
        &env,
        &["--interval", "100ms", "--read-only", "--filter", "keep"],
    );
    top.wait_for("filter: keep");
    top.wait_for("keep-me");
    top.keys("h");
    top.wait_for("read-only: actions are disabled");
    top.keys("d");
    top.keys("y");
    top.keys("q");
    assert_eq!(top.exit_code(), 0);
    top.assert_restored();
    assert!(held_ids(&env).is_empty());
    env.cmd().arg("size").assert().success().stdout("1\n");
}

#[test]
fn sigterm_and_the_help_screen_leave_the_terminal_restored() {
    let env = Env::new("spool.ndjson");
    enqueue(&env, "x");
    let mut top = Top::start(&env, &["--interval", "100ms"]);
    top.wait_for("depth 1 ");
    top.keys("?");
    top.wait_for("keys (any key closes)");
    let pid = top.child.process_id().unwrap() as i32;
    // SAFETY: a plain kill(2) of the child this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert_eq!(top.exit_code(), 143);
    top.assert_restored();
}

#[test]
fn enqueue_and_replay_are_not_blocked_while_top_runs() {
    const N: usize = 200;
    for file in BACKENDS {
        let env = Env::new(file);
        enqueue(&env, "seed");
        let top = Top::start(&env, &["--interval", "100ms"]);
        top.wait_for("depth 1 ");
        let start = Instant::now();
        let lines: String = (0..N).map(|i| format!("item-{i}\n")).collect();
        env.cmd()
            .args(["enqueue", "--stdin", "--lines"])
            .write_stdin(lines)
            .timeout(DEADLINE)
            .assert()
            .success();
        top.wait_for(&format!("depth {} ", N + 1));
        env.cmd()
            .args(["replay", "--exec", "true"])
            .timeout(DEADLINE)
            .assert()
            .success();
        env.cmd().arg("size").assert().success().stdout("0\n");
        top.wait_for("depth 0 ");
        assert!(
            start.elapsed() < DEADLINE,
            "{file}: enqueue and replay took {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn without_a_terminal_it_exits_64_with_a_hint() {
    let env = Env::new("spool.db");
    enqueue(&env, "x");
    env.cmd()
        .arg("top")
        .assert()
        .code(64)
        .stderr(predicates::str::contains("needs a terminal"))
        .stderr(predicates::str::contains("spool shape"));
    env.cmd().args(["top", "--interval", "0"]).assert().code(64);
    env.cmd()
        .args(["top", "--interval", "soon"])
        .assert()
        .code(64);
}

#[test]
fn on_postgresql_the_header_and_the_rows_show_leases() {
    let base = match std::env::var("SPOOL_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            if std::env::var("SPOOL_REQUIRE_PG").is_ok_and(|v| v == "1") {
                panic!("SPOOL_REQUIRE_PG=1 but SPOOL_TEST_PG_URL is not set");
            }
            eprintln!("SKIPPED: on_postgresql_the_header_and_the_rows_show_leases needs PostgreSQL (SPOOL_TEST_PG_URL is not set)");
            return;
        }
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!(
        "{base}{sep}spool=top-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    );
    let env = Env {
        dir: tempfile::tempdir().unwrap(),
        path: url.clone().into(),
    };
    enqueue(&env, "leased-one");
    enqueue(&env, "free-one");
    let spool = spool::Spool::open(
        std::path::Path::new(&url),
        &spool::OpenOptions::new(spool::OpenMode::ReadWrite),
    )
    .unwrap();
    let claimed = spool
        .leasing()
        .expect("PostgreSQL leases")
        .claim(1, Duration::from_secs(600), false)
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let mut top = Top::start(&env, &["--interval", "100ms"]);
    top.wait_for("leased 1 ");
    top.wait_for("leased, 9m");
    top.keys("q");
    assert_eq!(top.exit_code(), 0);
    top.assert_restored();
}
