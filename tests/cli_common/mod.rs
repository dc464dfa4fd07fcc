//! Helpers shared by the `cli_*` tests: run the real `spool` binary
//! against real spools in temporary directories, once per durable
//! backend.
#![allow(dead_code)]

use assert_cmd::assert::Assert;
use assert_cmd::Command;
use std::path::{Path, PathBuf};

/// The spool file names that select each durable backend.
pub const BACKENDS: [&str; 2] = ["spool.db", "spool.ndjson"];

/// The `spool` binary with a clean environment: no `SPOOL_PATH`, no
/// backtraces, a C locale.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spool"));
    c.env_remove("SPOOL_PATH")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .env_remove("CREDENTIALS_DIRECTORY")
        .env("LC_ALL", "C")
        .timeout(std::time::Duration::from_secs(60));
    c
}

/// A temporary directory with one spool path in it (the spool itself is
/// not created).
pub struct Env {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl Env {
    /// A fresh directory; the spool is `dir/<file>`.
    pub fn new(file: &str) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(file);
        Env { dir, path }
    }

    /// True for the NDJSON backend.
    pub fn is_ndjson(&self) -> bool {
        self.path.extension().is_some_and(|e| e == "ndjson")
    }

    /// `spool --spool <path>`, run in the temp directory.
    pub fn cmd(&self) -> Command {
        let mut c = bin();
        c.current_dir(self.dir.path())
            .arg("--spool")
            .arg(&self.path);
        c
    }

    /// `spool --spool <path>` as a plain `std::process::Command` (for
    /// redirecting stdout), stdin closed.
    pub fn std_cmd(&self) -> std::process::Command {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_spool"));
        c.env_remove("SPOOL_PATH")
            .env_remove("RUST_BACKTRACE")
            .env_remove("CREDENTIALS_DIRECTORY")
            .current_dir(self.dir.path())
            .stdin(std::process::Stdio::null())
            .arg("--spool")
            .arg(&self.path);
        c
    }

    /// Run with `args` and no stdin.
    pub fn run(&self, args: &[&str]) -> Assert {
        self.cmd().args(args).write_stdin("").assert()
    }

    /// Run with `args` and `stdin`.
    pub fn run_in(&self, args: &[&str], stdin: impl Into<Vec<u8>>) -> Assert {
        self.cmd().args(args).write_stdin(stdin.into()).assert()
    }

    /// Enqueue a payload and return its id.
    pub fn enqueue(&self, payload: &str) -> u64 {
        let out = self
            .run(&["enqueue", "--", payload])
            .success()
            .get_output()
            .stdout
            .clone();
        parse_id(&out)
    }

    /// Enqueue with a key and return the id.
    pub fn enqueue_key(&self, payload: &str, key: &str) -> u64 {
        let out = self
            .run(&["enqueue", "--key", key, "--", payload])
            .success()
            .get_output()
            .stdout
            .clone();
        parse_id(&out)
    }

    /// `spool size`.
    pub fn size(&self) -> u64 {
        let out = self.run(&["size"]).success().get_output().stdout.clone();
        parse_id(&out)
    }

    /// `spool drain` parsed.
    pub fn drain(&self) -> Vec<serde_json::Value> {
        let out = self.run(&["drain"]).success().get_output().stdout.clone();
        ndjson(&out)
    }

    /// Every file in the directory with its bytes (to prove nothing
    /// changed).
    pub fn snapshot(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut v: Vec<_> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| {
                let p = e.unwrap().path();
                let b = std::fs::read(&p).unwrap_or_default();
                (p, b)
            })
            .collect();
        v.sort();
        v
    }

    /// The names of the files in the directory.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

/// True when the `spool` binary under test is a debug build. The test
/// crate is built with the same cargo profile as the binary, so its own
/// `debug_assertions` tell. Otherwise (`cargo test --release`) print
/// `SKIPPED: <what> needs a debug build` and return false, so the caller
/// skips the part that only a debug binary can do. The line goes straight
/// to stderr, past the test harness's output capture, so it shows in the
/// test log of a passing test too.
pub fn debug_build_or_skip(what: &str) -> bool {
    if cfg!(debug_assertions) {
        return true;
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: {what} needs a debug build"
    );
    false
}

/// Parse one decimal number printed on a line.
pub fn parse_id(out: &[u8]) -> u64 {
    let s = std::str::from_utf8(out).expect("utf-8 output");
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// Parse NDJSON output.
pub fn ndjson(out: &[u8]) -> Vec<serde_json::Value> {
    std::str::from_utf8(out)
        .expect("utf-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// stdout as text.
pub fn stdout(a: &Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stdout).into_owned()
}

/// stderr as text.
pub fn stderr(a: &Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

/// Check the error contract: the exit code, nothing on stdout, and a
/// first stderr line `spool: error: <action> <path>: …` naming the spool.
pub fn assert_error(a: Assert, code: i32, path: &Path) -> Assert {
    let a = a.code(code).stdout("");
    let err = stderr(&a);
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("spool: error: "), "stderr: {err}");
    assert!(
        first.contains(&path.display().to_string()),
        "the error should name the spool {}: {err}",
        path.display()
    );
    for l in err.lines().skip(1) {
        assert!(
            l.starts_with("hint: "),
            "unexpected stderr line {l:?} in {err}"
        );
    }
    a
}

/// The backends to test: both, unless `SPOOL_TEST_BACKENDS` names a
/// subset (`db`, `ndjson`, comma-separated) for a quicker local run.
pub fn backends() -> Vec<&'static str> {
    match std::env::var("SPOOL_TEST_BACKENDS") {
        Ok(only) => BACKENDS
            .into_iter()
            .filter(|b| only.split(',').any(|o| b.ends_with(o.trim())))
            .collect(),
        Err(_) => BACKENDS.to_vec(),
    }
}

/// Run `f` once per durable backend.
pub fn each_backend(f: impl Fn(&Env)) {
    for b in backends() {
        let env = Env::new(b);
        eprintln!("--- backend: {b}");
        f(&env);
    }
}

impl Env {
    /// The spool opened through the library (for setting up states the
    /// CLI reaches only through replay, such as dead letters).
    pub fn lib(&self, mode: spool::OpenMode) -> spool::Spool {
        spool::Spool::open(&self.path, &spool::OpenOptions::new(mode)).expect("open the spool")
    }

    /// `<spool><suffix>`: `-wal`, `.dead`, `.meta`.
    pub fn side(&self, suffix: &str) -> PathBuf {
        let mut s = self.path.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    }
}

/// stdout parsed as one JSON object.
pub fn json_out(a: &Assert) -> serde_json::Value {
    serde_json::from_slice(&a.get_output().stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {}", stdout(a)))
}

/// A spool in the PostgreSQL test database (`SPOOL_TEST_PG_URL`), under
/// a new spool name; `None` (after a `SKIPPED: <what> …` line on stderr)
/// when the variable is not set, or a panic when `SPOOL_REQUIRE_PG=1`.
pub fn pg_env(what: &str) -> Option<Env> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let base = match std::env::var("SPOOL_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            if std::env::var("SPOOL_REQUIRE_PG").is_ok_and(|v| v == "1") {
                panic!("{what}: SPOOL_REQUIRE_PG=1 but SPOOL_TEST_PG_URL is not set");
            }
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED: {what} on PostgreSQL needs SPOOL_TEST_PG_URL"
            );
            return None;
        }
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let url = format!(
        "{base}{sep}spool=cli-{}-{}-{nanos:08x}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    Some(Env {
        dir: tempfile::tempdir().expect("temp dir"),
        path: PathBuf::from(url),
    })
}

/// Run `f` once per durable backend, and once more on PostgreSQL when
/// `SPOOL_TEST_PG_URL` is set (see [`pg_env`]).
pub fn each_backend_and_postgres(what: &str, f: impl Fn(&Env)) {
    each_backend(&f);
    if let Some(env) = pg_env(what) {
        eprintln!("--- backend: postgres");
        f(&env);
    }
}
