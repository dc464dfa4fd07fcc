//! The failure side of the contract (spec §6): exit codes, one-line
//! errors naming the spool, nothing on stdout, read-only commands that
//! never create or touch a spool, damaged spools left byte-for-byte
//! unchanged, closed pipes, concurrency, and no panics.

mod cli_common;

use assert_cmd::assert::{Assert, OutputAssertExt};
use cli_common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command as StdCommand, Stdio};

/// Commands that must not create a missing spool, with the exit code a
/// missing spool gives.
const NEVER_CREATE: &[&[&str]] = &[
    &["drain"],
    &["list"],
    &["ls", "--json"],
    &["show", "1"],
    &["show", "1", "--raw"],
    &["size"],
    &["stats"],
    &["stats", "--prometheus"],
    &["attempts", "1"],
    &["attempts", "1", "--set", "2"],
    &["done", "1"],
    &["hold", "1"],
    &["release", "1"],
];

#[test]
fn a_missing_spool_is_66_and_is_not_created() {
    each_backend(|env| {
        for args in NEVER_CREATE {
            let a = assert_error(env.run(args), 66, &env.path);
            assert!(
                stderr(&a).contains("does not exist") || stderr(&a).contains("no spool"),
                "{}",
                stderr(&a)
            );
            assert!(env.files().is_empty(), "{args:?} created {:?}", env.files());
        }
    });
}

/// A valid spool of three items with its middle record damaged.
fn damaged(env: &Env) {
    for p in ["first", "second", "third"] {
        env.enqueue(p);
    }
    if env.is_ndjson() {
        let text = std::fs::read_to_string(&env.path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() >= 3, "{text}");
        let mut broken = String::new();
        for (i, l) in lines.iter().enumerate() {
            if i == 1 {
                broken.push_str("{\"op\":\"put\",\"id\":2,\"payl");
            } else {
                broken.push_str(l);
            }
            broken.push('\n');
        }
        std::fs::write(&env.path, broken).unwrap();
    } else {
        // Remove the WAL and shared memory first, then keep the header and
        // replace everything after it with garbage.
        for suffix in ["-wal", "-shm"] {
            let mut p = env.path.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
        let mut bytes = b"SQLite format 3\0".to_vec();
        bytes.extend((0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
        std::fs::write(&env.path, bytes).unwrap();
    }
}

#[test]
fn a_damaged_spool_is_65_and_left_unchanged() {
    each_backend(|env| {
        damaged(env);
        let before = env.snapshot();
        let mut all: Vec<Vec<&str>> = NEVER_CREATE.iter().map(|a| a.to_vec()).collect();
        all.push(vec!["enqueue", "more"]);
        all.push(vec!["enqueue", "--lines", "a\nb"]);
        all.push(vec!["init"]);
        for args in &all {
            let code = if args[0] == "init" { 73 } else { 65 };
            let a = assert_error(env.run(args), code, &env.path);
            if code == 65 {
                let err = stderr(&a);
                assert!(err.contains("corrupt"), "{args:?}: {err}");
                if env.is_ndjson() {
                    assert!(err.contains("line 2"), "{args:?}: {err}");
                }
            }
            assert_eq!(env.snapshot(), before, "{args:?} changed the spool");
        }
    });
}

/// `-s` pointing at a file that spool did not write — notes, a JSON
/// document, a binary — must never damage it: every command, the
/// mutating ones first of all, refuses it with 65 (`init`: 73), and the
/// file and its directory stay exactly as they were.
#[test]
fn a_file_that_is_not_a_spool_is_refused_by_every_command_and_left_untouched() {
    let files: &[(&str, &[u8])] = &[
        ("notes.txt", b"my important notes\nsecond line\n"),
        ("one-line.txt", b"my important notes\n"),
        ("no-newline.txt", b"my important notes"),
        (
            "list.json",
            b"[{\"op\":\"put\",\"id\":1,\"payload\":\"a\"}]\n",
        ),
        ("config.json", b"{\"debug\": true}"),
        ("program.bin", b"\x7fELF\x02\x01\x01\x00\xff\xfe\n\x00\x01"),
    ];
    let record = r#"{"id":1,"payload":"x","key":"","attempts":0,"enqueued_at":null,"next_retry_at":null,"last_error":null,"held":false,"state":"pending"}"#;
    let mut commands: Vec<(Vec<&str>, &[u8])> = NEVER_CREATE
        .iter()
        .map(|a| (a.to_vec(), &b""[..]))
        .collect();
    commands.extend([
        (vec!["enqueue", "more"], &b""[..]),
        (vec!["enqueue", "--key", "k", "more"], b""),
        (vec!["enqueue", "--stdin", "--lines"], b"a\nb\n"),
        (
            vec!["enqueue", "--stdin", "--ndjson"],
            b"{\"payload\":\"a\"}\n",
        ),
        (vec!["done", "-"], b"1\n"),
        (vec!["replay", "--exec", "true"], b""),
        (vec!["compact"], b""),
        (vec!["verify"], b""),
        (vec!["verify", "--repair"], b""),
        (vec!["dlq", "list"], b""),
        (vec!["dlq", "requeue", "--all"], b""),
        (vec!["dlq", "purge", "--all", "--yes"], b""),
        (vec!["export"], b""),
        (vec!["import", "-"], record.as_bytes()),
    ]);
    for (name, text) in files {
        let env = Env::new(name);
        std::fs::write(&env.path, text).unwrap();
        let before = env.snapshot();
        for (args, input) in &commands {
            let a = assert_error(env.run_in(args, input.to_vec()), 65, &env.path);
            let err = stderr(&a);
            assert!(err.contains("is not a spool"), "{name} {args:?}: {err}");
            assert_eq!(env.snapshot(), before, "{name}: {args:?} changed something");
        }
        assert_error(env.run(&["init"]), 73, &env.path);
        assert_eq!(env.snapshot(), before, "{name}: init changed something");
    }
}

#[test]
fn a_closed_stdout_pipe_ends_quietly_with_0() {
    each_backend(|env| {
        let lines: String = (0..3000)
            .map(|i| format!("payload number {i:05} {}\n", "x".repeat(100)))
            .collect();
        env.run_in(&["enqueue", "--stdin", "--lines"], lines)
            .success();
        for args in [&["drain"][..], &["list"], &["list", "--json"]] {
            let mut child = StdCommand::new(env!("CARGO_BIN_EXE_spool"))
                .arg("-s")
                .arg(&env.path)
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut first = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .unwrap();
            assert!(!first.is_empty());
            // The reader is gone; the writer must notice and stop.
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stderr.is_empty(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    });
}

#[test]
fn eight_processes_enqueueing_at_once_lose_nothing() {
    each_backend(|env| {
        const PROCS: usize = 8;
        const EACH: usize = 5;
        env.run(&["init"]).success();
        let children: Vec<_> = (0..PROCS)
            .map(|p| {
                let script = (0..EACH)
                    .map(|i| {
                        format!(
                            "{} -s '{}' enqueue 'p{p}-{i}' || exit 1",
                            env!("CARGO_BIN_EXE_spool"),
                            env.path.display()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                StdCommand::new("sh")
                    .arg("-c")
                    .arg(script)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut ids = Vec::new();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            ids.extend(
                String::from_utf8(out.stdout)
                    .unwrap()
                    .lines()
                    .map(|l| l.parse::<u64>().unwrap()),
            );
        }
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), PROCS * EACH, "every id distinct");
        assert_eq!(env.size(), (PROCS * EACH) as u64);
        let mut payloads: Vec<String> = env
            .drain()
            .iter()
            .map(|v| v["payload"].as_str().unwrap().to_string())
            .collect();
        payloads.sort();
        let mut want: Vec<String> = (0..PROCS)
            .flat_map(|p| (0..EACH).map(move |i| format!("p{p}-{i}")))
            .collect();
        want.sort();
        assert_eq!(payloads, want);
    });
}

fn dev_full() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full")
}

/// Every row of the §6 table that these commands can produce. (1, 130 and
/// 143 belong to replay and watch.)
#[test]
fn every_reachable_exit_code_row() {
    each_backend(|env| {
        // 0
        env.run(&["enqueue", "x"]).code(0);
        bin().arg("--help").assert().code(0);
        bin().arg("--version").assert().code(0);
        // 64: usage
        env.run(&["enqueue", "--no-such-flag"]).code(64).stdout("");
        env.run(&["list", "--limit", "many"]).code(64).stdout("");
        // 65: bad data (unknown id, malformed input)
        assert_error(env.run(&["show", "4242"]), 65, &env.path);
        assert_error(
            env.run_in(&["enqueue", "--stdin", "--ndjson"], "{]"),
            65,
            &env.path,
        );
        // 66: missing spool, missing input file
        let missing = env.dir.path().join(format!(
            "missing-{}",
            env.path.file_name().unwrap().to_str().unwrap()
        ));
        assert_error(
            bin().arg("-s").arg(&missing).arg("size").assert(),
            66,
            &missing,
        );
        assert_error(
            env.run(&["enqueue", "--file", "/nonexistent"]),
            66,
            &env.path,
        );
        // 70: internal error, through the panic hook (SPOOL_DEBUG_PANIC
        // makes debug builds only panic; a release binary ignores it)
        if debug_build_or_skip("exit 70 through the panic hook (SPOOL_DEBUG_PANIC)") {
            let a = env
                .cmd()
                .env("SPOOL_DEBUG_PANIC", "1")
                .arg("size")
                .assert()
                .code(70)
                .stdout("");
            let err = stderr(&a);
            assert!(err.starts_with("spool: error: internal error"), "{err}");
            assert!(
                !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
                "{err}"
            );
        }
        // 73: cannot create
        assert_error(env.run(&["init"]), 73, &env.path);
        // 74: I/O error (stdout is a full disk)
        for args in [&["drain"][..], &["size"], &["show", "1", "--raw"]] {
            let a = env.std_cmd().args(args).stdout(dev_full()).assert();
            assert_error(a, 74, &env.path);
        }
        // 75: full spool
        assert_error(
            env.run(&["enqueue", "--max-depth", "1", "y"]),
            75,
            &env.path,
        );
        // 77: permission denied
        permission_denied(env);
        // 78: a configuration serve refuses (a guessable token)
        let short = env.dir.path().join("short-tokens");
        std::fs::write(&short, "0123456789\n").unwrap();
        let a = assert_error(
            env.run(&["serve", "--token-file", short.to_str().unwrap()]),
            78,
            &env.path,
        );
        assert!(stderr(&a).contains("at least 16"), "{}", stderr(&a));
    });
}

fn permission_denied(env: &Env) {
    let is_root = unsafe { libc::geteuid() } == 0;
    if is_root {
        // Root ignores file modes; sysfs refuses file creation to root too.
        let name = env.path.file_name().unwrap().to_str().unwrap();
        let path =
            std::path::PathBuf::from(format!("/sys/spool-test-{}-{name}", std::process::id()));
        let a = bin().arg("-s").arg(&path).args(["enqueue", "x"]).assert();
        assert_error(a, 77, &path);
        assert!(!path.exists());
    } else {
        use std::os::unix::fs::PermissionsExt;
        let locked = env.dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let path = locked.join(env.path.file_name().unwrap());
        assert_error(
            bin().arg("-s").arg(&path).args(["enqueue", "x"]).assert(),
            77,
            &path,
        );
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        let f = env.path.clone();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o000)).unwrap();
        assert_error(env.run(&["size"]), 77, &env.path);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

#[test]
fn errors_write_nothing_to_stdout() {
    each_backend(|env| {
        env.enqueue("a");
        for args in [
            &["show", "9"][..],
            &["show", "9", "--raw"],
            &["--json", "show", "9"],
            &["--json", "attempts", "9"],
            &["--json", "enqueue", "--max-depth", "1", "b"],
            &["--json", "hold", "1", "9"],
            &["--json", "done", "1", "9"],
        ] {
            env.run(args).failure().stdout("");
        }
        let _ = std::io::stdout().flush();
    });
}

#[test]
fn a_torn_ndjson_tail_is_left_alone_by_readers_and_cut_by_the_next_write() {
    let env = Env::new("spool.ndjson");
    env.enqueue("a");
    env.enqueue("b");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&env.path)
        .unwrap();
    f.write_all(b"{\"op\":\"put\",\"id\":3,\"pay").unwrap();
    drop(f);
    let before = env.snapshot();
    for args in [
        &["drain"][..],
        &["list"],
        &["size"],
        &["stats", "--json"],
        &["show", "1"],
    ] {
        env.run(args).success();
        assert_eq!(env.snapshot(), before, "{args:?} changed the spool");
    }
    assert_eq!(env.size(), 2);
    let a = env.run(&["enqueue", "c"]).success();
    assert!(stderr(&a).contains("torn"), "{}", stderr(&a));
    let payloads: Vec<_> = env
        .drain()
        .iter()
        .map(|v| v["payload"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(payloads, ["a", "b", "c"]);
    assert!(!std::fs::read_to_string(&env.path)
        .unwrap()
        .contains("\"pay{"));
}

/// Parser errors say what was expected, with an example: durations,
/// sizes, retention windows, `--ndjson` lines and import records. None
/// shows a parser's internals (`expected number at 0`, `expected
/// ident`), and none changes the spool.
#[test]
fn parse_errors_say_what_was_expected_with_an_example() {
    each_backend(|env| {
        env.enqueue("x");
        // SQLite's shared-memory index changes under readers.
        let data = || -> Vec<_> {
            env.snapshot()
                .into_iter()
                .filter(|(p, _)| !p.to_string_lossy().ends_with("-shm"))
                .collect()
        };
        let before = data();
        let check = |a: Assert, code: i32, wants: &[&str]| {
            let a = a.code(code).stdout("");
            let err = stderr(&a);
            for w in wants {
                assert!(err.contains(w), "{w:?} not in {err}");
            }
            for internal in ["at 0", "ident", "supported units", "struct", "Header"] {
                assert!(!err.contains(internal), "{internal:?} in {err}");
            }
        };
        const DURATION: &str = "e.g. 500ms, 5s, 2m, 1h, 1h30m, 7d; a bare number is seconds";
        check(
            env.run(&["config", "retain", "forever"]),
            64,
            &["invalid retention \"forever\"", "e.g. 7d, 12h, 1d12h"],
        );
        check(
            env.run(&["replay", "--exec", "true", "--timeout", "forever"]),
            64,
            &[
                "invalid duration \"forever\": it does not start with a number",
                DURATION,
            ],
        );
        check(
            env.run(&["replay", "--exec", "true", "--backoff-max", "7x"]),
            64,
            &["unknown unit \"x\"", DURATION],
        );
        check(
            env.run(&["enqueue", "--max-payload", "16XB", "y"]),
            64,
            &["unknown unit \"XB\"", "e.g. 512, 64KiB, 16MiB"],
        );
        check(
            env.run_in(&["enqueue", "--ndjson"], "{\"payload\":\"a\"}\nnot json\n"),
            65,
            &[
                "stdin line 2: not a JSON object (column 2: this is not JSON)",
                "e.g. {\"payload\": \"…\", \"key\": \"…\"}",
            ],
        );
        check(
            env.run_in(&["enqueue", "--ndjson"], "{\"payload\":\"a\""),
            65,
            &[
                "stdin line 1: not a JSON object",
                "the line ends before the JSON object does",
            ],
        );
        check(
            env.run_in(&["import", "-"], "{\"id\":1,\"payload\":\"a\"}\n{id: 2}\n"),
            65,
            &[
                "stdin line 2: not a JSON object",
                "e.g. {\"id\": 1, \"payload\": \"…\", \"state\": \"pending\"}",
            ],
        );
        check(
            env.run_in(&["import", "-"], "{\"spool\": 5}\n"),
            65,
            &[
                "stdin line 1: spool header: column 11: invalid type: integer `5`, expected a JSON object",
                "e.g. {\"spool\": {\"uuid\": \"…\"",
            ],
        );
        assert!(data() == before, "nothing changed");
    });
}

/// A bad value for a flag or an argument that takes a whole number says
/// what was expected, with an example (as durations and sizes do), never
/// Rust's "invalid digit found in string"; a negative number reaches the
/// check instead of being taken for a flag. Exit 64, nothing on stdout,
/// nothing created.
#[test]
fn whole_number_errors_say_what_was_expected_with_an_example() {
    let env = Env::new("spool.db");
    for (args, want) in [
        (
            &["init", "--max-depth", "x"][..],
            "invalid value 'x' for '--max-depth <N>': expected a whole number of 1 or more, such as 1000",
        ),
        (
            &["enqueue", "--max-depth", "0", "p"],
            "invalid value '0' for '--max-depth <N>': too small; expected a whole number of 1 or more",
        ),
        (
            &["list", "--limit", "-3"],
            "invalid value '-3' for '--limit <N>': expected a whole number such as 20",
        ),
        (
            &["drain", "-n", "ten"],
            "invalid value 'ten' for '--limit <N>': expected a whole number such as 20",
        ),
        (
            &["dlq", "list", "--limit", "1.5"],
            "invalid value '1.5' for '--limit <N>': expected a whole number such as 20",
        ),
        (
            &["list", "--min-attempts", "-1"],
            "invalid value '-1' for '--min-attempts <N>': expected a whole number such as 3",
        ),
        (
            &["replay", "--push", "http://127.0.0.1:9/", "--batch", "abc"],
            "invalid value 'abc' for '--batch <N>': expected a whole number from 1 to 1000000, such as 500",
        ),
        (
            &["replay", "--exec", "true", "--max-attempts", "0.5"],
            "invalid value '0.5' for '--max-attempts <N>': expected a whole number of 1 or more, such as 5",
        ),
        (
            &["replay", "--exec", "true", "--max-attempts", "99999999999"],
            "invalid value '99999999999' for '--max-attempts <N>': too large; expected",
        ),
        (
            &["replay", "--exec", "true", "--limit", "-3"],
            "invalid value '-3' for '--limit <N>': expected a whole number such as 100",
        ),
        (
            &["replay", "--exec", "true", "--concurrency", "999"],
            "invalid value '999' for '--concurrency <N>': too large; expected a whole number from 1 to 256, such as 8",
        ),
        (
            &["replay", "--exec", "true", "--commit-every", "0"],
            "invalid value '0' for '--commit-every <N>': too small; expected a whole number from 1 to 10000",
        ),
        (
            &["watch", "--probe", "tcp://127.0.0.1:9", "--exec", "true", "--failure-threshold", "x"],
            "invalid value 'x' for '--failure-threshold <N>': expected a whole number of 1 or more, such as 3",
        ),
        (
            &["serve", "--listen", "127.0.0.1:0", "--max-entries", "1e4"],
            "invalid value '1e4' for '--max-entries <N>': expected a whole number of 1 or more, such as 10000",
        ),
        (
            &["attempts", "1", "--set", "-1"],
            "invalid value '-1' for '--set <N>': expected a whole number such as 1",
        ),
        (
            &["show", "abc"],
            "invalid value 'abc' for '<ID>': expected a whole number of 1 or more, such as 42",
        ),
        (
            &["dlq", "show", "-2"],
            "invalid value '-2' for '<ID>': expected a whole number of 1 or more, such as 42",
        ),
        (
            &["done", "-5"],
            "invalid value '-5' for '<ID>...': \"-5\" is not an item id",
        ),
    ] {
        let a = env.run(args).code(64).stdout("");
        let err = stderr(&a);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want:?} not in {err}");
        for internal in ["invalid digit", "unexpected argument", "is not in 1.."] {
            assert!(!err.contains(internal), "{args:?}: {err}");
        }
    }
    assert!(env.files().is_empty(), "{:?}", env.files());
    // `config max-depth` says the same, and changes nothing.
    env.run(&["init", "--max-depth", "7"]).success();
    let a = env
        .run(&["config", "max-depth", "lots"])
        .code(64)
        .stdout("");
    assert!(
        stderr(&a)
            .contains("invalid max-depth \"lots\": expected a whole number such as 1000, or none"),
        "{}",
        stderr(&a)
    );
    env.run(&["config", "max-depth"]).success().stdout("7\n");
}

/// A libpq key/value string given as the spool is not looked for as a
/// file: exit 64 with the equivalent `postgres://` URL, and the password
/// appears nowhere; nothing is created.
#[test]
fn a_libpq_key_value_string_gets_the_equivalent_url() {
    let dir = tempfile::tempdir().unwrap();
    let conninfo = "host=/run/postgresql user=app dbname=ops password=s3cret";
    for args in [&["size"][..], &["enqueue", "x"], &["init"]] {
        let a = bin()
            .current_dir(dir.path())
            .args(["-s", conninfo])
            .args(args)
            .assert()
            .code(64)
            .stdout("");
        let err = stderr(&a);
        assert!(
            err.contains("libpq key/value connection string")
                && err.contains("postgres://app@/ops?host=/run/postgresql&spool=default")
                && err.contains("PGPASSWORD"),
            "{err}"
        );
        assert!(!err.contains("s3cret"), "{err}");
        assert!(!err.contains("no spool exists"), "{err}");
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
