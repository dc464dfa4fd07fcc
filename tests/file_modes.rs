//! SPEC §2 "File modes": every file `spool` creates is created with mode
//! 0600 (narrowed further by the umask), on both durable backends, and an
//! existing file keeps its mode, also when it is replaced atomically.
//!
//! The binary runs under an explicit umask (`sh -c 'umask …; exec spool
//! …'`), so the results do not depend on the umask of whoever runs the
//! tests.

mod cli_common;

use cli_common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

/// `spool -s <spool> ARGS…` run under `umask`, in the spool's directory.
fn under_umask(env: &Env, umask: &str, args: &[&str]) -> StdCommand {
    let mut c = StdCommand::new("sh");
    c.arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_spool"))
        .arg("-s")
        .arg(&env.path)
        .args(args)
        .current_dir(env.dir.path())
        .env_remove("SPOOL_PATH")
        .env_remove("RUST_BACKTRACE")
        .env("LC_ALL", "C");
    c
}

/// Run `spool ARGS…` under `umask` with `stdin`; return the exit code.
fn run(env: &Env, umask: &str, args: &[&str], stdin: &str) -> i32 {
    use std::io::Write;
    let mut child = under_umask(env, umask, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    out.status
        .code()
        .unwrap_or_else(|| panic!("{args:?} died: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Like [`run`], but the command must exit with `code`.
fn check(env: &Env, umask: &str, args: &[&str], stdin: &str, code: i32) {
    assert_eq!(
        run(env, umask, args, stdin),
        code,
        "{args:?} under umask {umask}"
    );
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

fn set_mode(p: &Path, m: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
}

/// Every file in the directory, with its mode, sorted by name.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                mode(&e.path()),
            )
        })
        .collect();
    v.sort();
    v
}

/// The files a spool that has pending items, dead letters and a finished
/// replay consists of, beside the spool itself.
fn spool_files(env: &Env) -> Vec<PathBuf> {
    let mut v = vec![env.path.clone(), env.side(".replay.lock")];
    if env.is_ndjson() {
        v.extend([
            env.side(".dead"),
            env.side(".meta"),
            env.side(".idx"),
            env.side(".idx-dirty"),
        ]);
    } else {
        v.extend([env.side("-wal"), env.side("-shm")]);
    }
    v
}

/// Fill a spool: three pending items, one dead letter (through a replay
/// that fails for good), so that every companion file exists.
fn fill(env: &Env, umask: &str) {
    check(env, umask, &["enqueue", "--lines"], "a\nb\nc\nd\n", 0);
    // Item 1 is rejected by the target (exit 65) and dead-lettered; the
    // limit leaves the others pending.
    check(
        env,
        umask,
        &[
            "replay",
            "--exec",
            "false",
            "--reject-exit",
            "1",
            "--limit",
            "1",
        ],
        "",
        1,
    );
}

/// Start `spool watch` writing a metrics file, wait until the file is
/// there, stop the daemon with SIGTERM.
fn watch_writes_metrics(env: &Env, umask: &str, metrics: &Path, replace: bool) {
    let before = std::fs::read(metrics).ok();
    let child = under_umask(
        env,
        umask,
        &[
            "watch",
            "--probe",
            "exec:true",
            "--exec",
            "true",
            "--interval",
            "50ms",
            "--replay-interval",
            "50ms",
            "--metrics-file",
            &metrics.to_string_lossy(),
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn spool watch");
    let deadline = Instant::now() + Duration::from_secs(20);
    let written = loop {
        let now = std::fs::read(metrics).ok();
        if now.is_some() && (!replace || now != before) {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill only sends a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert!(
        written,
        "no metrics file: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_file_spool_creates_is_0600_under_umask_022() {
    each_backend(|env| {
        let dir = env.dir.path();
        fill(env, "022");
        check(env, "022", &["export", "-o", "all.ndjson"], "", 0);
        check(
            env,
            "022",
            &["dlq", "export", "-o", "dead.csv", "--format", "csv"],
            "",
            0,
        );
        check(env, "022", &["compact"], "", 0);
        watch_writes_metrics(env, "022", &dir.join("watch.prom"), false);
        let mut want = spool_files(env);
        want.extend(["all.ndjson", "dead.csv", "watch.prom"].map(|f| dir.join(f)));
        for p in &want {
            assert!(p.exists(), "{} was not created", p.display());
        }
        // Every file in the directory, not only the expected ones: a
        // leftover temporary file would show up here too.
        let all = modes(dir);
        assert_eq!(all.len(), want.len(), "{all:?}");
        for (name, m) in all {
            assert_eq!(m, 0o600, "{name} has mode {m:o}");
        }
    });
}

#[test]
fn the_ndjson_metadata_and_compaction_replacements_are_0600() {
    // .meta is written through .meta.tmp, and compaction writes
    // .compact.tmp files renamed over the main and dead-letter files: the
    // files that result carry the temporary files' modes.
    let env = Env::new("spool.ndjson");
    check(&env, "022", &["init", "--max-depth", "10"], "", 0);
    assert_eq!(mode(&env.side(".meta")), 0o600);
    fill(&env, "022");
    for f in [&env.path, &env.side(".dead")] {
        set_mode(f, 0o600);
    }
    // A stale temporary file from a crash, with a wide mode, is reused
    // narrowed.
    let stale = env.side(".compact.tmp");
    std::fs::write(&stale, "stale").unwrap();
    set_mode(&stale, 0o666);
    check(&env, "022", &["compact"], "", 0);
    assert!(!stale.exists());
    assert_eq!(mode(&env.path), 0o600);
    assert_eq!(mode(&env.side(".dead")), 0o600);
}

#[test]
fn umask_077_still_gives_0600() {
    each_backend(|env| {
        fill(env, "077");
        check(env, "077", &["export", "-o", "all.ndjson"], "", 0);
        for p in spool_files(env)
            .into_iter()
            .chain([env.dir.path().join("all.ndjson")])
        {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
        }
    });
}

#[test]
fn an_existing_spool_keeps_its_mode_through_writes_and_compaction() {
    each_backend(|env| {
        fill(env, "022");
        // The operator makes the spool group-readable on purpose (0640, a
        // mode that neither 0600 nor 0666 minus the umask would give).
        for p in spool_files(env) {
            set_mode(&p, 0o640);
        }
        check(env, "022", &["enqueue", "more"], "", 0);
        check(env, "022", &["hold", "2"], "", 0);
        check(
            env,
            "022",
            &[
                "replay",
                "--exec",
                "false",
                "--reject-exit",
                "1",
                "--limit",
                "1",
            ],
            "",
            1,
        );
        check(env, "022", &["compact"], "", 0);
        check(env, "022", &["enqueue", "after compaction"], "", 0);
        for p in spool_files(env) {
            assert_eq!(mode(&p), 0o640, "{}", p.display());
        }
        if !env.is_ndjson() {
            // New -wal and -shm files follow the database file's mode.
            check(env, "022", &["checkpoint", "--mode", "truncate"], "", 0);
            for suffix in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(env.side(suffix));
            }
            check(env, "022", &["enqueue", "new wal"], "", 0);
            for p in spool_files(env) {
                assert_eq!(mode(&p), 0o640, "{}", p.display());
            }
        }
        assert_eq!(env.size(), if env.is_ndjson() { 4 } else { 5 });
    });
}

#[test]
fn outputs_replaced_with_o_keep_their_mode() {
    each_backend(|env| {
        let dir = env.dir.path();
        fill(env, "022");
        let out = dir.join("all.ndjson");
        let dead = dir.join("dead.csv");
        let metrics = dir.join("watch.prom");
        for (p, m) in [(&out, 0o640), (&dead, 0o604), (&metrics, 0o660)] {
            std::fs::write(p, "old").unwrap();
            set_mode(p, m);
        }
        check(env, "022", &["export", "-o", "all.ndjson"], "", 0);
        check(
            env,
            "022",
            &["dlq", "export", "-o", "dead.csv", "--format", "csv"],
            "",
            0,
        );
        watch_writes_metrics(env, "022", &metrics, true);
        for (p, m) in [(&out, 0o640), (&dead, 0o604), (&metrics, 0o660)] {
            assert_ne!(
                std::fs::read(p).unwrap(),
                b"old",
                "{} was replaced",
                p.display()
            );
            assert_eq!(mode(p), m, "{}", p.display());
        }
    });
}
