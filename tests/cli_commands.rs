//! Every subcommand through the real binary, on both durable backends:
//! normal use, `--json` shapes, and the exit codes each command produces.

mod cli_common;

use cli_common::*;
use predicates::prelude::*;
use std::io::Write;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- init

#[test]
fn init_creates_a_spool_with_a_remembered_bound() {
    each_backend(|env| {
        let a = env.run(&["--json", "init", "--max-depth", "2"]).success();
        let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
        assert_eq!(v["max_depth"], 2);
        assert_eq!(
            v["backend"],
            if env.is_ndjson() { "file" } else { "sqlite" }
        );
        assert_eq!(v["spool"], env.path.display().to_string());
        let uuid = v["uuid"].as_str().unwrap();
        assert_eq!(uuid.len(), 36, "{uuid}");
        assert!(env.path.exists());
        assert_eq!(env.size(), 0);

        // The bound holds for every later invocation.
        env.enqueue("a");
        env.enqueue("b");
        let a = assert_error(env.run(&["enqueue", "c"]), 75, &env.path);
        let err = stderr(&a);
        assert!(
            err.contains("the bound is 2") && err.contains("2 items pending"),
            "{err}"
        );
        assert!(err.contains("\nhint: "), "{err}");
        assert_eq!(env.size(), 2);
        // ... unless overridden for one call.
        env.run(&["enqueue", "--max-depth", "3", "c"]).success();
        assert_eq!(env.size(), 3);
        env.run(&["enqueue", "d"]).code(75);
        let s: serde_json::Value =
            serde_json::from_slice(&env.run(&["stats", "--json"]).success().get_output().stdout)
                .unwrap();
        assert_eq!(s["max_depth"], 2);
    });
}

#[test]
fn init_refuses_an_existing_path_and_leaves_it_untouched() {
    each_backend(|env| {
        env.run(&["init"]).success().stdout("");
        env.enqueue("keep me");
        let before = env.snapshot();
        let a = assert_error(env.run(&["init"]), 73, &env.path);
        assert!(stderr(&a).contains("already exists"), "{}", stderr(&a));
        assert_eq!(env.snapshot(), before);
        // Any existing file, not only a spool.
        let other = env.dir.path().join("notes.txt");
        std::fs::write(&other, "hello").unwrap();
        bin()
            .arg("-s")
            .arg(&other)
            .arg("init")
            .assert()
            .code(73)
            .stdout("");
        assert_eq!(std::fs::read(&other).unwrap(), b"hello");
    });
}

#[test]
fn init_in_a_missing_directory_is_73_and_creates_nothing() {
    for b in backends() {
        let env = Env::new(b);
        let path = env.dir.path().join("no/such/dir").join(b);
        let a = bin().arg("-s").arg(&path).arg("init").assert();
        let a = assert_error(a, 73, &path);
        assert!(stderr(&a).contains("does not exist"), "{}", stderr(&a));
        assert!(env.files().is_empty());
        // enqueue creates, so the same holds for it.
        assert_error(
            bin().arg("-s").arg(&path).args(["enqueue", "x"]).assert(),
            73,
            &path,
        );
        assert!(env.files().is_empty());
    }
}

#[test]
fn init_with_an_explicit_backend() {
    let env = Env::new("queue");
    env.run(&["--backend", "file", "init"]).success();
    let head = std::fs::read(&env.path).unwrap();
    assert!(!head.starts_with(b"SQLite format 3"));
    env.enqueue("x");
    assert!(std::fs::read_to_string(&env.path)
        .unwrap()
        .contains("\"op\":\"put\""));
    // The backend of an existing spool is its own; --backend only applies
    // when creating.
    env.run(&["--backend", "sqlite", "size"])
        .success()
        .stdout("1\n");
}

/// `init` names the backend as people do (as `-v` does), not with its
/// command-line name (which `--json` keeps).
#[test]
fn init_names_the_backend_in_words() {
    each_backend_and_postgres("init's message", |env| {
        let (title, name) = if env.is_ndjson() {
            ("NDJSON", "file")
        } else if env.path.to_string_lossy().starts_with("postgres") {
            ("PostgreSQL", "postgres")
        } else {
            ("SQLite", "sqlite")
        };
        let said = stderr(&env.run(&["init", "--max-depth", "3"]).success().stdout(""));
        assert!(
            said.starts_with(&format!("spool: created {title} spool ")),
            "{said}"
        );
        assert!(said.ends_with(", max depth 3\n"), "{said}");
        assert!(!said.contains(&format!(" {name} spool")), "{said}");
    });
}

// ------------------------------------------------------------- enqueue

#[test]
fn enqueue_prints_ids_and_json() {
    each_backend(|env| {
        env.run(&["enqueue", "one"])
            .success()
            .stdout("1\n")
            .stderr("");
        env.run(&["enqueue", "two"]).success().stdout("2\n");
        env.run(&["--json", "enqueue", "three"])
            .success()
            .stdout("{\"id\":3,\"deduplicated\":false}\n");
        let items = env.drain();
        let payloads: Vec<_> = items
            .iter()
            .map(|v| v["payload"].as_str().unwrap())
            .collect();
        assert_eq!(payloads, ["one", "two", "three"]);
    });
}

#[test]
fn enqueue_takes_exactly_one_source() {
    each_backend(|env| {
        let file = env.dir.path().join("payload.bin");
        std::fs::write(&file, b"from a file\n").unwrap();
        env.cmd()
            .args(["enqueue", "--file"])
            .arg(&file)
            .assert()
            .success()
            .stdout("1\n");
        env.run_in(&["enqueue", "--stdin"], "from stdin")
            .success()
            .stdout("2\n");
        // An empty payload is a payload.
        env.run(&["enqueue", ""]).success().stdout("3\n");
        env.run_in(&["enqueue", "--stdin"], "")
            .success()
            .stdout("4\n");
        let items = env.drain();
        assert_eq!(items[0]["payload"], "from a file\n");
        assert_eq!(items[1]["payload"], "from stdin");
        assert_eq!(items[2]["payload"], "");
        assert_eq!(items[3]["payload"], "");
        // None, or two, is a usage error.
        env.run(&["enqueue"]).code(64).stdout("");
        env.run_in(&["enqueue", "x", "--stdin"], "y")
            .code(64)
            .stdout("");
        env.cmd()
            .args(["enqueue", "x", "--file"])
            .arg(&file)
            .assert()
            .code(64);
        assert_eq!(env.size(), 4);
    });
}

#[test]
fn enqueue_from_a_missing_file_is_66() {
    each_backend(|env| {
        let a = env.run(&["enqueue", "--file", "/nonexistent/payload"]);
        let a = assert_error(a, 66, &env.path);
        assert!(stderr(&a).contains("/nonexistent/payload"));
        assert!(env.files().is_empty(), "nothing is created for bad input");
    });
}

#[test]
fn binary_and_non_utf8_payloads_round_trip() {
    use base64::Engine as _;
    each_backend(|env| {
        let all: Vec<u8> = (0..=255u8).chain([b'\r', b'\n', 0, 0xff, 0xfe]).collect();
        let id = parse_id(
            &env.run_in(&["enqueue", "--stdin"], all.clone())
                .success()
                .get_output()
                .stdout,
        );
        env.run(&["show", &id.to_string(), "--raw"])
            .success()
            .stdout(all.clone());
        let items = env.drain();
        assert!(items[0].get("payload").is_none());
        let b64 = items[0]["payload_base64"].as_str().unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap(),
            all
        );
        // An argument's bytes, non-UTF-8 included.
        use std::os::unix::ffi::OsStrExt;
        let arg = std::ffi::OsStr::from_bytes(b"caf\xe9\x01\tend");
        let out = env.cmd().arg("enqueue").arg(arg).assert().success();
        let id = parse_id(&out.get_output().stdout);
        env.run(&["show", &id.to_string(), "--raw"])
            .success()
            .stdout(b"caf\xe9\x01\tend".to_vec());
        // Control bytes in valid UTF-8 stay text in JSON.
        let id = parse_id(
            &env.run_in(&["enqueue", "--stdin"], "a\u{1b}[31mred\u{0}")
                .success()
                .get_output()
                .stdout,
        );
        let shown: serde_json::Value = serde_json::from_slice(
            &env.run(&["--json", "show", &id.to_string()])
                .success()
                .get_output()
                .stdout,
        )
        .unwrap();
        assert_eq!(shown["payload"], "a\u{1b}[31mred\u{0}");
    });
}

#[test]
fn dedup_hits_are_reported_and_succeed() {
    each_backend(|env| {
        let first = env.enqueue_key("first", "order-1");
        let a = env
            .run(&["enqueue", "--key", "order-1", "second"])
            .success();
        assert_eq!(parse_id(&a.get_output().stdout), first);
        assert_eq!(
            stderr(&a),
            format!("spool: item {first} already pending with key order-1 (deduplicated)\n")
        );
        env.run(&["--json", "enqueue", "--key", "order-1", "third"])
            .success()
            .stdout(format!("{{\"id\":{first},\"deduplicated\":true}}\n"));
        env.run(&["-q", "enqueue", "--key", "order-1", "x"])
            .success()
            .stderr("");
        let items = env.drain();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["payload"], "first");
        // A dedup hit succeeds even on a full spool.
        env.run(&["enqueue", "--max-depth", "1", "--key", "order-1", "y"])
            .success();
        // --key-from-payload: the same content dedups.
        let a = env
            .run(&["enqueue", "--key-from-payload", "same"])
            .success();
        let b = env
            .run(&["enqueue", "--key-from-payload", "same"])
            .success();
        assert_eq!(stdout(&a), stdout(&b));
        let key = env.drain()[1]["key"].as_str().unwrap().to_string();
        assert!(key.starts_with("sha256:") && key.len() == 7 + 64, "{key}");
        // done releases the key.
        env.run(&["done", &first.to_string()]).success();
        let again = env.enqueue_key("fourth", "order-1");
        assert!(again > first);
    });
}

#[test]
fn batches_from_lines_and_ndjson() {
    each_backend(|env| {
        let a = env
            .run_in(
                &["enqueue", "--stdin", "--lines"],
                &b"alpha\r\n\nbeta\n\xffgamma"[..],
            )
            .success();
        assert_eq!(stdout(&a), "1\n2\n3\n");
        let a = env
            .run_in(
                &["--json", "enqueue", "--stdin", "--ndjson"],
                "{\"payload\":\"x\",\"key\":\"k\"}\n\n{\"payload_base64\":\"/wA=\"}\n{\"payload\":\"y\",\"key\":\"k\"}\n",
            )
            .success();
        let v = ndjson(&a.get_output().stdout);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0], serde_json::json!({"id": 4, "deduplicated": false}));
        assert_eq!(v[2], serde_json::json!({"id": 4, "deduplicated": true}));
        let items = env.drain();
        assert_eq!(items[0]["payload"], "alpha");
        assert_eq!(items[1]["payload"], "beta");
        assert_eq!(items[2]["payload_base64"], "/2dhbW1h");
        assert_eq!(items[3]["key"], "k");
        assert_eq!(items[4]["payload_base64"], "/wA=");
        // A file works as the batch source too, and --key-from-payload keys each line.
        let f = env.dir.path().join("batch.txt");
        std::fs::write(&f, "p\nq\np\n").unwrap();
        let a = env
            .cmd()
            .args(["enqueue", "--lines", "--key-from-payload", "--file"])
            .arg(&f)
            .assert()
            .success();
        assert_eq!(stdout(&a), "6\n7\n6\n");
        // A fixed key cannot apply to a batch.
        env.run_in(&["enqueue", "--stdin", "--lines", "--key", "k"], "a\nb\n")
            .code(64);
    });
}

#[test]
fn batches_read_stdin_without_the_stdin_flag() {
    each_backend(|env| {
        // `tail -f log | spool enqueue --lines` must just work.
        let a = env
            .run_in(&["enqueue", "--lines"], "one\ntwo\r\n\nthree")
            .success();
        assert_eq!(stdout(&a), "1\n2\n3\n");
        let a = env
            .run_in(
                &["--json", "enqueue", "--ndjson"],
                "{\"payload\":\"four\",\"key\":\"k4\"}\n{\"payload_base64\":\"/wA=\"}\n",
            )
            .success();
        let v = ndjson(&a.get_output().stdout);
        assert_eq!(v[0], serde_json::json!({"id": 4, "deduplicated": false}));
        assert_eq!(v[1], serde_json::json!({"id": 5, "deduplicated": false}));
        // --stdin is still accepted, before or after the batch flag.
        env.run_in(&["enqueue", "--stdin", "--lines"], "six\n")
            .success()
            .stdout("6\n");
        env.run_in(
            &["enqueue", "--ndjson", "--stdin"],
            "{\"payload\":\"seven\"}\n",
        )
        .success()
        .stdout("7\n");
        let items = env.drain();
        let payloads: Vec<_> = items.iter().map(|i| i["payload"].clone()).collect();
        assert_eq!(
            payloads,
            ["one", "two", "three", "four", "null", "six", "seven"].map(|p| if p == "null" {
                serde_json::Value::Null
            } else {
                p.into()
            })
        );
        assert_eq!(items[3]["key"], "k4");
        assert_eq!(items[4]["payload_base64"], "/wA=");
        // A PAYLOAD or --file is the batch when given; stdin is not read.
        env.run_in(&["enqueue", "--lines", "--", "a\nb"], "not read\n")
            .success()
            .stdout("8\n9\n");
        let f = env.dir.path().join("batch.txt");
        std::fs::write(&f, "c\n").unwrap();
        env.cmd()
            .args(["enqueue", "--lines", "--file"])
            .arg(&f)
            .write_stdin("not read either\n")
            .assert()
            .success()
            .stdout("10\n");
        // Empty stdin is an empty batch: nothing enqueued, exit 0.
        env.run_in(&["enqueue", "--lines"], "").success().stdout("");
        // A bad line from the implicit stdin is named as a stdin line.
        let a = assert_error(
            env.run_in(&["enqueue", "--ndjson"], "{\"payload\":\"x\"}\n{]\n"),
            65,
            &env.path,
        );
        assert!(stderr(&a).contains("stdin line 2"), "{}", stderr(&a));
        assert_eq!(env.size(), 10);
        // Without a batch flag, a payload source is still required.
        let a = env
            .run_in(&["enqueue"], "would be ignored")
            .code(64)
            .stdout("");
        assert!(stderr(&a).contains("--stdin"), "{}", stderr(&a));
        env.run_in(&["enqueue", "--key", "k"], "x")
            .code(64)
            .stdout("");
        // Two sources stay a usage error with a batch flag too.
        env.cmd()
            .args(["enqueue", "--lines", "x", "--file"])
            .arg(&f)
            .assert()
            .code(64)
            .stdout("");
        env.run_in(&["enqueue", "--lines", "--stdin", "x"], "y")
            .code(64)
            .stdout("");
        assert_eq!(env.size(), 10);
    });
}

#[test]
fn a_bad_batch_line_enqueues_nothing() {
    each_backend(|env| {
        env.run(&["init"]).success();
        for (input, line) in [
            ("{\"payload\":\"a\"}\n{\"payload\":\"b\"}\n{\"payload\":\"c\",\"colour\":\"red\"}\n", 3),
            ("{\"payload\":\"a\"}\nnot json\n", 2),
            ("{\"key\":\"no payload\"}\n", 1),
            ("{\"payload\":\"a\"}\n\n{\"payload_base64\":\"!!\"}\n", 3),
        ] {
            let a = assert_error(env.run_in(&["enqueue", "--stdin", "--ndjson"], input), 65, &env.path);
            assert!(stderr(&a).contains(&format!("stdin line {line}")), "{}", stderr(&a));
            assert_eq!(env.size(), 0);
        }
        // A batch that does not fit under the bound: nothing either.
        let a = env.run_in(
            &["enqueue", "--stdin", "--lines", "--max-depth", "2"],
            "a\nb\nc\n",
        );
        assert_error(a, 75, &env.path);
        assert_eq!(env.size(), 0);
    });
}

#[test]
fn payload_size_limit() {
    each_backend(|env| {
        let a = env.run_in(&["enqueue", "--stdin", "--max-payload", "4"], "12345");
        let a = assert_error(a, 65, &env.path);
        assert!(stderr(&a).contains("--max-payload"), "{}", stderr(&a));
        env.run_in(&["enqueue", "--stdin", "--max-payload", "4"], "1234")
            .success();
        let a = env.run_in(
            &["enqueue", "--stdin", "--lines", "--max-payload", "4"],
            "ok\ntoo long\n",
        );
        assert!(stderr(&assert_error(a, 65, &env.path)).contains("stdin line 2"));
        env.run(&["enqueue", "--max-payload", "lots", "x"]).code(64);
        assert_eq!(env.size(), 1);
    });
}

#[test]
fn wait_for_space_times_out_with_75() {
    each_backend(|env| {
        env.run(&["init", "--max-depth", "1"]).success();
        env.enqueue("a");
        let start = Instant::now();
        let a = env.run(&["enqueue", "--wait-for-space", "300ms", "b"]);
        let a = assert_error(a, 75, &env.path);
        assert!(start.elapsed() >= Duration::from_millis(300));
        assert!(stderr(&a).contains("waited"), "{}", stderr(&a));
        assert_eq!(env.size(), 1);
    });
}

#[test]
fn wait_for_space_succeeds_when_room_appears() {
    each_backend(|env| {
        env.run(&["init", "--max-depth", "1"]).success();
        let first = env.enqueue("a");
        let waiter = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
            .arg("-s")
            .arg(&env.path)
            .args(["enqueue", "--wait-for-space", "20s", "b"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(150));
        env.run(&["done", &first.to_string()]).success();
        let out = waiter.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(env.size(), 1);
        assert_eq!(env.drain()[0]["payload"], "b");
    });
}

// ----------------------------------------------------- drain, list, show

fn json_item_keys(v: &serde_json::Value) -> Vec<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

#[test]
fn drain_is_a_snapshot_in_order() {
    each_backend(|env| {
        for p in ["a", "b", "c"] {
            env.enqueue(p);
        }
        let items = env.drain();
        assert_eq!(items.len(), 3);
        let mut keys = json_item_keys(&items[0]);
        keys.sort();
        assert_eq!(
            keys,
            [
                "attempts",
                "coalesce_key",
                "enqueued_at",
                "group",
                "held",
                "id",
                "key",
                "last_error",
                "next_retry_at",
                "payload",
                "push_seq"
            ]
        );
        assert!(items[0]["group"].is_null() && items[0]["coalesce_key"].is_null());
        assert_eq!(items[0]["id"], 1);
        assert!(items[0]["push_seq"].is_null());
        assert_eq!(items[0]["key"], "");
        assert_eq!(items[0]["attempts"], 0);
        assert_eq!(items[0]["held"], false);
        assert!(items[0]["last_error"].is_null() && items[0]["next_retry_at"].is_null());
        let t = items[0]["enqueued_at"].as_str().unwrap();
        assert!(t.ends_with('Z') && t.len() >= 20, "{t}");
        let a = env.run(&["drain", "--limit", "2"]).success();
        assert_eq!(ndjson(&a.get_output().stdout).len(), 2);
        // --json changes nothing for a stream that already is JSON.
        assert_eq!(
            stdout(&env.run(&["--json", "drain"]).success()),
            stdout(&env.run(&["drain"]).success())
        );
        assert_eq!(env.size(), 3, "drain removes nothing");
        // An empty spool drains to nothing.
        let e = Env::new(env.path.file_name().unwrap().to_str().unwrap());
        e.run(&["init"]).success();
        e.run(&["drain"]).success().stdout("");
    });
}

#[test]
fn list_prints_plain_rows_when_not_a_terminal() {
    each_backend(|env| {
        env.enqueue_key("hello", "k1");
        let second = env.enqueue("line\nbreak\u{1b}[2J");
        env.run(&["attempts", &second.to_string(), "--set", "4"])
            .success();
        env.run_in(&["enqueue", "--stdin"], vec![0xffu8, 0x00, b'x'])
            .success();
        let out = stdout(&env.run(&["list"]).success());
        let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(rows.len(), 3, "{out}");
        for r in &rows {
            assert_eq!(r.len(), 8, "{r:?}");
        }
        assert_eq!(rows[0][0], "1");
        assert_eq!(rows[0][1], "k1");
        assert_eq!(rows[0][4], "due");
        assert_eq!(rows[0][5], "5");
        assert_eq!(rows[0][6], "hello");
        assert_eq!(rows[1][2], "4");
        assert_eq!(rows[1][6], "line\\nbreak\\u001b[2J");
        assert_eq!(rows[2][6], "\\udcff\\u0000x");
        // ls is the same command.
        let first_column = |s: &str| {
            s.lines()
                .map(|l| l.split('\t').next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            first_column(&stdout(&env.run(&["ls"]).success())),
            first_column(&out)
        );
        // Filters.
        let ids = |args: &[&str]| -> Vec<String> {
            let mut full = vec!["list"];
            full.extend_from_slice(args);
            stdout(&env.run(&full).success())
                .lines()
                .map(|l| l.split('\t').next().unwrap().to_string())
                .collect()
        };
        assert_eq!(ids(&["--key", "k1"]), ["1"]);
        assert_eq!(ids(&["--min-attempts", "1"]), ["2"]);
        assert_eq!(ids(&["--limit", "2"]), ["1", "2"]);
        env.run(&["hold", "1"]).success();
        assert_eq!(ids(&["--due"]), ["2", "3"]);
        assert_eq!(ids(&[]), ["1", "2", "3"], "held items are listed");
        assert!(stdout(&env.run(&["list"]).success())
            .lines()
            .next()
            .unwrap()
            .contains("\theld\t"));
        // JSON is the item objects.
        let v = ndjson(
            &env.run(&["list", "--json", "--key", "k1"])
                .success()
                .get_output()
                .stdout,
        );
        assert_eq!(v.len(), 1);
        assert_eq!(v[0]["held"], true);
        // Nothing matches: no rows, a note on stderr.
        env.run(&["list", "--key", "nope"])
            .success()
            .stdout("")
            .stderr(predicate::str::contains("no pending items"));
    });
}

#[test]
fn show_metadata_json_raw_and_dead_letters() {
    each_backend(|env| {
        let id = env.enqueue_key("{\"a\":1}", "the-key");
        let out = stdout(&env.run(&["show", &id.to_string()]).success());
        for needle in [
            "id           1",
            "state        pending",
            "key          the-key",
            "attempts     0",
            "size         7 bytes",
            "payload      {\"a\":1}",
        ] {
            assert!(out.contains(needle), "{needle:?} in\n{out}");
        }
        let v: serde_json::Value = serde_json::from_slice(
            &env.run(&["--json", "show", "1"])
                .success()
                .get_output()
                .stdout,
        )
        .unwrap();
        assert_eq!(v["payload"], "{\"a\":1}");
        assert_eq!(v["key"], "the-key");
        assert!(v.get("dead_at").is_none());
        env.run(&["show", "1", "--raw"])
            .success()
            .stdout("{\"a\":1}");
        let a = assert_error(env.run(&["show", "99"]), 65, &env.path);
        assert!(stderr(&a).contains("99"));
        env.run(&["show", "nope"]).code(64).stdout("");
        env.run(&["hold", "1"]).success();
        assert!(stdout(&env.run(&["show", "1"]).success()).contains("state        held"));
    });
}

// ------------------------------------------------- done, hold, release

#[test]
fn done_by_argument_and_from_stdin() {
    each_backend(|env| {
        for p in ["a", "b", "c", "d", "e"] {
            env.enqueue(p);
        }
        env.run(&["done", "1", "2"])
            .success()
            .stdout("")
            .stderr("spool: marked done 2 items\n");
        env.run_in(&["--json", "done", "-"], "3\n\n 4 \n")
            .success()
            .stdout("{\"done\":[3,4],\"unknown\":[]}\n");
        assert_eq!(env.size(), 1);
        // A line that is not an id: nothing changes.
        let a = assert_error(env.run_in(&["done", "-"], "5\nfive\n"), 65, &env.path);
        assert!(stderr(&a).contains("stdin line 2"), "{}", stderr(&a));
        assert_eq!(env.size(), 1);
        // Unknown ids are named; known ones are still removed.
        let a = assert_error(env.run(&["done", "5", "1", "77"]), 65, &env.path);
        let err = stderr(&a);
        assert!(err.contains("no pending item with id 1, 77"), "{err}");
        assert_eq!(env.size(), 0);
        // Not an id as an argument is a usage error.
        env.run(&["done", "x"]).code(64).stdout("");
        env.run(&["done"]).code(64);
    });
}

#[test]
fn hold_and_release() {
    each_backend(|env| {
        env.enqueue("a");
        env.enqueue("b");
        env.run(&["--json", "hold", "1", "2"])
            .success()
            .stdout("{\"held\":[1,2],\"unknown\":[]}\n");
        assert_eq!(env.size(), 2, "held items are counted");
        let items = env.drain();
        assert!(items.iter().all(|i| i["held"] == true));
        let s: serde_json::Value =
            serde_json::from_slice(&env.run(&["--json", "stats"]).success().get_output().stdout)
                .unwrap();
        assert_eq!(s["held"], 2);
        env.run_in(&["release", "-"], "2\n").success();
        let items = env.drain();
        assert_eq!(items[0]["held"], true);
        assert_eq!(items[1]["held"], false);
        assert_error(env.run(&["release", "9"]), 65, &env.path);
        assert_error(env.run(&["hold", "9"]), 65, &env.path);
        assert_error(env.run_in(&["hold", "-"], "1\n-3\n"), 65, &env.path);
        assert_eq!(env.drain()[1]["held"], false, "nothing changed");
    });
}

// ------------------------------------------------------ attempts, size

#[test]
fn attempts_show_and_set() {
    each_backend(|env| {
        env.enqueue("a");
        env.run(&["attempts", "1"]).success().stdout("0\n");
        env.run(&["attempts", "1", "--set", "3"])
            .success()
            .stdout("3\n");
        env.run(&["--json", "attempts", "1"])
            .success()
            .stdout("{\"id\":1,\"attempts\":3,\"previous\":null}\n");
        env.run(&["--json", "attempts", "1", "--set", "0"])
            .success()
            .stdout("{\"id\":1,\"attempts\":0,\"previous\":3}\n");
        assert_error(env.run(&["attempts", "2"]), 65, &env.path);
        assert_error(env.run(&["attempts", "2", "--set", "1"]), 65, &env.path);
        env.run(&["attempts", "1", "--set", "-1"]).code(64);
    });
}

#[test]
fn size_prints_only_the_number() {
    each_backend(|env| {
        env.run(&["init"]).success();
        env.run(&["size"]).success().stdout("0\n").stderr("");
        env.enqueue("a");
        env.run(&["size"]).success().stdout("1\n");
        env.run(&["--json", "size"])
            .success()
            .stdout("{\"size\":1}\n");
    });
}

// ---------------------------------------------------------------- stats

#[test]
fn shape_prints_tsv_when_piped_and_the_spec_json() {
    each_backend_and_postgres("shape", |env| {
        env.enqueue_key("a", "order:1");
        env.enqueue_key("b", "order/2");
        env.enqueue_key("c", "tenant:7");
        let hold = env.enqueue("d");
        env.run(&["hold", &hold.to_string()]).success();
        let out = stdout(&env.run(&["shape"]).success());
        let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split('\t').collect()).collect();
        assert_eq!(
            lines[0],
            [
                "error", "T", "5m", "10m", "20m", "40m", "80m", "160m", "320m", "640m", "1280m",
                "1280m+"
            ],
            "{out}"
        );
        assert_eq!(
            lines[1..],
            [
                vec!["TOTAL", "3", "3", "0", "0", "0", "0", "0", "0", "0", "0", "0"],
                vec![
                    "never attempted",
                    "3",
                    "3",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0",
                    "0"
                ],
            ],
            "{out}"
        );
        let out = stdout(
            &env.run(&[
                "shape",
                "--by",
                "key-prefix",
                "--first",
                "1m",
                "--buckets",
                "3",
                "--top",
                "1",
            ])
            .success(),
        );
        assert_eq!(
            out,
            "key-prefix\tT\t1m\t2m\t2m+\nTOTAL\t3\t3\t0\t0\norder\t2\t2\t0\t0\n(other)\t1\t1\t0\t0\n"
        );
        let held = stdout(
            &env.run(&["shape", "--state", "held", "--by", "attempts"])
                .success(),
        );
        assert!(held.contains("\nTOTAL\t1\t1\t"), "{held}");
        assert!(held.contains("\n0\t1\t1\t"), "{held}");

        let v = json_out(
            &env.run(&["shape", "--json", "--state", "dead", "--buckets", "2"])
                .success(),
        );
        assert_eq!(
            v,
            serde_json::json!({
                "by": "error",
                "state": "dead",
                "edges_seconds": [300],
                "rows": [{"value": "TOTAL", "total": 0, "counts": [0, 0]}],
            })
        );
        let v = json_out(&env.run(&["--json", "shape", "--by", "group"]).success());
        assert_eq!(v["by"], "group");
        assert_eq!(v["state"], "pending");
        assert_eq!(
            v["edges_seconds"],
            serde_json::json!([300, 600, 1200, 2400, 4800, 9600, 19200, 38400, 76800])
        );
        assert_eq!(
            v["rows"],
            serde_json::json!([
                {"value": "TOTAL", "total": 3, "counts": [3, 0, 0, 0, 0, 0, 0, 0, 0, 0]},
                {"value": "(no group)", "total": 3, "counts": [3, 0, 0, 0, 0, 0, 0, 0, 0, 0]},
            ])
        );
    });
}

#[test]
fn shape_refuses_bad_arguments_with_64_and_changes_nothing() {
    each_backend_and_postgres("shape arguments", |env| {
        env.enqueue_key("a", "k");
        // The spool file itself (the SQLite -shm changes with any reader)
        // and its items.
        let state = || (std::fs::read(&env.path).ok(), env.drain());
        let before = state();
        for args in [
            &["shape", "--buckets", "0"][..],
            &["shape", "--buckets", "33"],
            &["shape", "--buckets", "-1"],
            &["shape", "--top", "0"],
            &["shape", "--by", "nope"],
            &["shape", "--state", "gone"],
            &["shape", "--first", "soon"],
        ] {
            env.run(args).code(64).stdout("");
        }
        for args in [
            &["shape", "--first", "0s"][..],
            &["shape", "--first", "1500ms"],
            &["shape", "--first", "365d", "--buckets", "32"],
        ] {
            let a = env.run(args).code(64).stdout("");
            let err = stderr(&a);
            assert!(
                err.starts_with("spool: error: show the shape of ") && err.contains("bucket"),
                "{err}"
            );
            assert_eq!(err.lines().count(), 2, "{err}");
        }
        assert!(state() == before, "the spool changed");
    });
    // A read-only command never creates a spool.
    each_backend(|env| {
        assert_error(env.run(&["shape"]), 66, &env.path);
        assert!(env.files().is_empty());
    });
}

#[test]
fn shape_reads_a_reference_database_without_changing_it() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference.sqlite");
    let env = Env::new("reference.sqlite");
    std::fs::copy(&fixture, &env.path).unwrap();
    let before = std::fs::read(&env.path).unwrap();
    let total = env.drain().len().to_string();
    let out = stdout(&env.run(&["shape", "--by", "attempts"]).success());
    let second = out.lines().nth(1).unwrap_or_default();
    assert!(second.starts_with(&format!("TOTAL\t{total}\t")), "{out}");
    assert_eq!(std::fs::read(&env.path).unwrap(), before);
}

#[test]
fn stats_json_prometheus_and_text() {
    each_backend(|env| {
        env.run(&["init", "--max-depth", "10"]).success();
        env.enqueue("a");
        env.enqueue("bb");
        env.run(&["hold", "2"]).success();
        env.run(&["attempts", "2", "--set", "2"]).success();
        let v: serde_json::Value =
            serde_json::from_slice(&env.run(&["stats", "--json"]).success().get_output().stdout)
                .unwrap();
        let mut keys = json_item_keys(&v);
        keys.sort();
        assert_eq!(
            keys,
            [
                "attempts_histogram",
                "backend",
                "dead_letters",
                "delivered_retained",
                "depth",
                "due",
                "evicted_total",
                "files",
                "fs_type",
                "held",
                "high_water",
                "max_depth",
                "ndjson_garbage_ratio",
                "network_fs",
                "oldest_age_seconds",
                "oldest_enqueued_at",
                "oldest_id",
                "on_full",
                "retain",
                "spool",
                "total_bytes",
                "waiting"
            ]
        );
        assert_eq!(v["depth"], 2);
        assert_eq!(v["held"], 1);
        assert_eq!(v["due"], 1);
        assert_eq!(v["dead_letters"], 0);
        assert_eq!(v["oldest_id"], 1);
        assert_eq!(v["high_water"], 2);
        assert_eq!(
            v["attempts_histogram"],
            serde_json::json!([{"attempts":0,"items":1},{"attempts":2,"items":1}])
        );
        assert_eq!(
            v["backend"],
            if env.is_ndjson() { "file" } else { "sqlite" }
        );
        let files = v["files"].as_array().unwrap();
        assert!(files
            .iter()
            .any(|f| f["path"] == env.path.display().to_string()));
        let total: u64 = files.iter().map(|f| f["bytes"].as_u64().unwrap()).sum();
        assert_eq!(v["total_bytes"], total);
        assert!(total > 0);
        assert_eq!(v["ndjson_garbage_ratio"].is_null(), !env.is_ndjson());

        let p = stdout(&env.run(&["stats", "--prometheus"]).success());
        let label = format!("{{spool=\"{}\"}}", env.path.display());
        for (name, value) in [
            ("spool_depth", "2".to_string()),
            ("spool_held", "1".to_string()),
            ("spool_dead_letters", "0".to_string()),
            ("spool_bytes", total.to_string()),
        ] {
            assert!(p.contains(&format!("# HELP {name} ")), "{p}");
            assert!(p.contains(&format!("# TYPE {name} gauge\n")), "{p}");
            assert!(
                p.contains(&format!("\n{name}{label} {value}\n")),
                "{name} in {p}"
            );
        }
        assert!(
            p.contains(&format!("spool_oldest_item_age_seconds{label} ")),
            "{p}"
        );

        let text = stdout(&env.run(&["stats"]).success());
        for needle in [
            "depth       2 pending (1 due, 1 held",
            "bound       10 items",
            "attempts    0: 1, 2: 1",
        ] {
            assert!(text.contains(needle), "{needle:?} in\n{text}");
        }
    });
}

#[test]
fn prometheus_labels_are_escaped() {
    let env = Env::new("we\"ird\\name.ndjson");
    env.enqueue("a");
    let p = stdout(&env.run(&["stats", "--prometheus"]).success());
    assert!(p.contains("we\\\"ird\\\\name.ndjson\"}"), "{p}");
}

// -------------------------------------------------------- global options

#[test]
fn global_options_go_before_or_after_the_subcommand() {
    each_backend(|env| {
        let p = env.path.to_str().unwrap();
        bin()
            .args(["enqueue", "x", "--spool", p])
            .assert()
            .success()
            .stdout("1\n");
        bin()
            .args(["enqueue", "-s", p, "y", "--json"])
            .assert()
            .success()
            .stdout("{\"id\":2,\"deduplicated\":false}\n");
        bin()
            .args(["--json", "-s", p, "size"])
            .assert()
            .success()
            .stdout("{\"size\":2}\n");
        bin()
            .args(["size", "--json", "-s", p])
            .assert()
            .success()
            .stdout("{\"size\":2}\n");
        bin()
            .args(["-q", "enqueue", "--key", "k", "z", "-s", p])
            .assert()
            .success();
        bin()
            .args(["enqueue", "--key", "k", "z", "-s", p, "-q"])
            .assert()
            .success()
            .stderr("");
        bin()
            .args(["enqueue", "--key", "k", "z", "-s", p, "-q", "-v"])
            .assert()
            .code(64);
    });
}

#[test]
fn spool_path_comes_from_the_environment_or_defaults_to_spool_db() {
    each_backend(|env| {
        bin()
            .env("SPOOL_PATH", &env.path)
            .args(["enqueue", "x"])
            .assert()
            .success();
        bin()
            .env("SPOOL_PATH", &env.path)
            .arg("size")
            .assert()
            .success()
            .stdout("1\n");
        // --spool wins over the environment.
        let other = env.dir.path().join("other.ndjson");
        bin()
            .env("SPOOL_PATH", &env.path)
            .arg("-s")
            .arg(&other)
            .arg("size")
            .assert()
            .code(66);
    });
    // The default is ./spool.db (SQLite).
    let env = Env::new("unused");
    bin()
        .current_dir(env.dir.path())
        .args(["enqueue", "x"])
        .assert()
        .success();
    assert_eq!(env.files()[0], "spool.db");
    let head = std::fs::read(env.dir.path().join("spool.db")).unwrap();
    assert!(head.starts_with(b"SQLite format 3\0"));
    bin()
        .current_dir(env.dir.path())
        .args(["size"])
        .assert()
        .success()
        .stdout("1\n");
    // An empty path is refused; ":memory:" is a file name, never an
    // in-memory database.
    bin()
        .current_dir(env.dir.path())
        .args(["-s", "", "size"])
        .assert()
        .code(64);
    bin()
        .current_dir(env.dir.path())
        .args(["-s", ":memory:", "enqueue", "x"])
        .assert()
        .success();
    assert!(env.dir.path().join(":memory:").exists());
}

#[test]
fn help_version_and_generators() {
    bin()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit status:"));
    bin()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("spool "));
    bin()
        .args(["enqueue", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("Examples:"));
    bin().args(["help", "list"]).assert().success();
    bin().assert().code(64);
    bin().arg("frobnicate").assert().code(64).stdout("");
    bin()
        .args(["list", "--frobnicate"])
        .assert()
        .code(64)
        .stdout("");
    bin()
        .args(["completions", "bash"])
        .assert()
        .success()
        .stdout(predicate::str::contains("_spool"));
    bin().args(["completions", "tcsh"]).assert().code(64);
    bin()
        .arg("man")
        .assert()
        .success()
        .stdout(predicate::str::contains(".TH spool 1"));
    let _ = std::io::stdout().flush();
}

// ------------------------------------- replay bookkeeping and dead letters

/// Replay is not part of these commands, so its traces (a failed attempt
/// with a retry time, a dead letter) are written through the library.
#[test]
fn retry_times_last_errors_and_dead_letters_are_shown() {
    use spool::{AttemptUpdate, OpenMode, OpenOptions, Spool, Timestamp};
    each_backend(|env| {
        let waiting = env.enqueue("waiting");
        let dead = env.enqueue("dead");
        let due = env.enqueue("due");
        {
            let s = Spool::open(&env.path, &OpenOptions::new(OpenMode::ReadWrite)).unwrap();
            let later = Timestamp::now().saturating_add(Duration::from_secs(600));
            assert!(s
                .record_attempt(
                    waiting,
                    &AttemptUpdate {
                        attempts: 1,
                        next_retry_at: Some(later),
                        last_error: Some("HTTP 503\nService Unavailable".into()),
                    },
                )
                .unwrap());
            assert!(s.dead_letter(dead, "HTTP 400: rejected").unwrap());
        }
        // list: the waiting item says when, --due leaves it out.
        let out = stdout(&env.run(&["list"]).success());
        let first: Vec<&str> = out.lines().next().unwrap().split('\t').collect();
        assert!(first[4].starts_with("in "), "{out}");
        let due_ids: Vec<String> = stdout(&env.run(&["list", "--due"]).success())
            .lines()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect();
        assert_eq!(due_ids, [due.to_string()]);
        // show: last error (escaped), retry time; a dead letter with dead_at.
        let text = stdout(&env.run(&["show", &waiting.to_string()]).success());
        assert!(
            text.contains("last error   HTTP 503\\nService Unavailable"),
            "{text}"
        );
        assert!(
            text.contains("next retry   ") && text.contains("(in "),
            "{text}"
        );
        let text = stdout(&env.run(&["show", &dead.to_string()]).success());
        assert!(text.contains("state        dead letter"), "{text}");
        assert!(text.contains("dead at      "), "{text}");
        let v: serde_json::Value = serde_json::from_slice(
            &env.run(&["--json", "show", &dead.to_string()])
                .success()
                .get_output()
                .stdout,
        )
        .unwrap();
        assert_eq!(v["last_error"], "HTTP 400: rejected");
        assert!(v["dead_at"].as_str().unwrap().ends_with('Z'));
        env.run(&["show", &dead.to_string(), "--raw"])
            .success()
            .stdout("dead");
        let v: serde_json::Value = serde_json::from_slice(
            &env.run(&["--json", "show", &waiting.to_string()])
                .success()
                .get_output()
                .stdout,
        )
        .unwrap();
        assert!(v["next_retry_at"].as_str().unwrap().ends_with('Z'));
        assert!(v.get("dead_at").is_none());
        // A dead letter is not pending: done, hold and attempts do not know it.
        assert_error(env.run(&["done", &dead.to_string()]), 65, &env.path);
        assert_error(env.run(&["attempts", &dead.to_string()]), 65, &env.path);
        // stats counts both.
        let s: serde_json::Value =
            serde_json::from_slice(&env.run(&["stats", "--json"]).success().get_output().stdout)
                .unwrap();
        assert_eq!(
            (
                s["depth"].as_u64(),
                s["dead_letters"].as_u64(),
                s["waiting"].as_u64(),
                s["due"].as_u64()
            ),
            (Some(2), Some(1), Some(1), Some(1))
        );
        let p = stdout(&env.run(&["stats", "--prometheus"]).success());
        assert!(
            p.contains(&format!(
                "spool_dead_letters{{spool=\"{}\"}} 1\n",
                env.path.display()
            )),
            "{p}"
        );
        assert_eq!(env.size(), 2);
    });
}

/// `config --json` names settings in snake_case, as every JSON report
/// does (`jq .max_depth`), listing all, reading one and setting one; the
/// command line keeps its kebab-case keys.
#[test]
fn config_json_uses_snake_case_names() {
    each_backend(|env| {
        env.run(&["init", "--max-depth", "5"]).success();
        let all = json_out(&env.run(&["--json", "config"]).success());
        let names: Vec<&str> = all
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(names, ["max_depth", "on_full", "retain", "uuid"], "{all}");
        assert_eq!(all["max_depth"], 5);
        assert_eq!(all["on_full"], "reject");
        let one = json_out(&env.run(&["--json", "config", "max-depth"]).success());
        assert_eq!(one, serde_json::json!({"max_depth": 5}));
        let set = json_out(
            &env.run(&["--json", "config", "on-full", "drop-oldest"])
                .success(),
        );
        assert_eq!(set, serde_json::json!({"on_full": "drop-oldest"}));
        assert_eq!(
            stdout(&env.run(&["config", "on-full"]).success()).trim(),
            "drop-oldest"
        );
    });
}

/// `config` reads any spool that opens, also one that has no uuid yet —
/// a `touch`ed `spool.db` or `x.ndjson`, a reference-schema database that
/// `spool` never wrote to: the defaults, and the uuid "not assigned yet"
/// (null in JSON); reading writes nothing. Setting a value creates what
/// is needed, the uuid included.
#[test]
fn config_reads_a_spool_that_has_no_uuid_yet() {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/reference.sqlite");
    for name in ["spool.db", "spool.ndjson", "reference.sqlite"] {
        let env = Env::new(name);
        if name == "reference.sqlite" {
            std::fs::copy(&fixture, &env.path).unwrap();
        } else {
            std::fs::write(&env.path, b"").unwrap();
        }
        // SQLite readers of a WAL database may make its shared-memory
        // index and an empty WAL; the data must not change.
        let data = || -> Vec<_> {
            env.snapshot()
                .into_iter()
                .filter(|(p, bytes)| {
                    let p = p.to_string_lossy();
                    let empty_wal = p.ends_with("-wal") && bytes.is_empty();
                    !(p.ends_with("-shm") || empty_wal)
                })
                .collect()
        };
        let before = data();
        let all = stdout(&env.run(&["config"]).success());
        assert_eq!(
            all,
            "max-depth  none\non-full    reject\nretain     off\n\
             uuid       not assigned yet (the first write to the spool assigns one)\n",
            "{name}"
        );
        let json = json_out(&env.run(&["--json", "config"]).success());
        assert_eq!(
            json,
            serde_json::json!({
                "max_depth": null, "on_full": "reject", "retain": "off", "uuid": null
            }),
            "{name}"
        );
        let one = json_out(&env.run(&["--json", "config", "uuid"]).success());
        assert_eq!(one, serde_json::json!({"uuid": null}), "{name}");
        env.run(&["config", "max-depth"]).success().stdout("none\n");
        assert!(data() == before, "{name}: reading wrote nothing");

        env.run(&["config", "max-depth", "9"]).success();
        let json = json_out(&env.run(&["--json", "config"]).success());
        assert_eq!(json["max_depth"], 9, "{name}: {json}");
        let uuid = json["uuid"].as_str().unwrap_or_default();
        assert_eq!(uuid.len(), 36, "{name}: {json}");
        env.run(&["config", "uuid"])
            .success()
            .stdout(format!("{uuid}\n"));
    }
}

fn mode_of(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// An empty existing file takes its backend from its name, as a new path
/// does: a `touch`ed `spool.db` is an empty SQLite spool to read-only
/// commands (which write nothing) and becomes a SQLite database on the
/// first write, keeping its mode; an empty `x.ndjson` is NDJSON.
#[test]
fn an_empty_file_takes_its_backend_from_its_name() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("spool.db");
    std::fs::write(&env.path, b"").unwrap();
    std::fs::set_permissions(&env.path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let before = env.snapshot();
    assert_eq!(env.size(), 0);
    assert_eq!(env.drain(), Vec::<serde_json::Value>::new());
    env.run(&["list"]).success();
    let verify = env.run(&["verify"]).success();
    assert!(
        stdout(&verify).contains("no tables yet"),
        "{}",
        stdout(&verify)
    );
    assert!(
        !stdout(&verify).contains("journal mode"),
        "{}",
        stdout(&verify)
    );
    env.run(&["export"]).success().stdout("");
    env.run(&["dlq", "list"]).success();
    let stats = json_out(&env.run(&["--json", "stats"]).success());
    assert_eq!(stats["backend"], "sqlite", "{stats}");
    assert!(env.snapshot() == before, "read-only commands wrote nothing");

    env.enqueue("x");
    let bytes = std::fs::read(&env.path).unwrap();
    assert!(bytes.starts_with(b"SQLite format 3\0"), "{bytes:?}");
    assert_eq!(mode_of(&env.path), 0o640, "an existing file keeps its mode");
    assert_eq!(env.drain()[0]["payload"], "x");

    // An empty .ndjson file is NDJSON; --backend chooses for an empty
    // file as for a new path.
    for (name, args, ndjson) in [
        ("e.ndjson", &[][..], true),
        ("chosen.db", &["--backend", "file"][..], true),
        ("chosen.ndjson", &["--backend", "sqlite"][..], false),
    ] {
        let e = Env::new(name);
        std::fs::write(&e.path, b"").unwrap();
        if args.is_empty() {
            e.enqueue("y");
        } else {
            e.run(&["init"]).code(73);
            let mut all = vec!["enqueue"];
            all.extend_from_slice(args);
            all.push("y");
            e.run(&all).success();
        }
        let bytes = std::fs::read(&e.path).unwrap();
        assert_eq!(
            bytes.starts_with(b"{\"op\":\"put\""),
            ndjson,
            "{name}: {bytes:?}"
        );
        assert_eq!(e.drain()[0]["payload"], "y", "{name}");
    }

    // An NDJSON spool whose main file is empty (as `init --backend file`
    // leaves it) stays NDJSON.
    let nd = Env::new("q.db");
    nd.run(&["init", "--backend", "file"]).success();
    assert_eq!(std::fs::metadata(&nd.path).unwrap().len(), 0);
    nd.enqueue("z");
    let bytes = std::fs::read(&nd.path).unwrap();
    assert!(bytes.starts_with(b"{\"op\":\"put\""), "{bytes:?}");
}

/// With `SPOOL_PATH` set, a usage error does not show the optional global
/// `--spool` as required; an empty `SPOOL_PATH` is a usage error that
/// names it.
#[test]
fn spool_path_from_the_environment_keeps_usage_lines_honest() {
    let env = Env::new("spool.db");
    for args in [&["enqueue"][..], &["show"], &["attempts"]] {
        let a = bin()
            .env("SPOOL_PATH", &env.path)
            .args(args)
            .assert()
            .code(64);
        let err = stderr(&a);
        let usage = err
            .lines()
            .find(|l| l.starts_with("Usage:"))
            .unwrap_or_else(|| panic!("no usage line: {err}"));
        assert!(!usage.contains("--spool <PATH>"), "{usage}");
    }
    let a = bin().env("SPOOL_PATH", "").arg("size").assert().code(64);
    assert!(
        stderr(&a).starts_with("spool: error: SPOOL_PATH: the spool path is empty"),
        "{}",
        stderr(&a)
    );
    assert!(!env.path.exists());
}

/// `-v` says in words how the spool was opened — created, for writing,
/// read-only — and names the backend as people do, never an internal
/// enum's name (`(ReadWrite)`).
#[test]
fn verbose_open_messages_are_words() {
    for (file, kind) in [("b.db", "SQLite"), ("b.ndjson", "NDJSON")] {
        let env = Env::new(file);
        let shown = env.path.display().to_string();
        let says = |args: &[&str]| {
            let mut all = vec!["-v"];
            all.extend_from_slice(args);
            stderr(&env.run(&all).success())
        };
        let created = says(&["enqueue", "a"]);
        assert!(
            created.contains(&format!("created {kind} spool {shown}\n")),
            "{created}"
        );
        let wrote = says(&["enqueue", "b"]);
        assert!(
            wrote.contains(&format!("opened {kind} spool {shown} for writing\n")),
            "{wrote}"
        );
        let read = says(&["size"]);
        assert!(
            read.contains(&format!("opened {kind} spool {shown} read-only\n")),
            "{read}"
        );
        for said in [created, wrote, read] {
            for internal in ["ReadWrite", "ReadOnly", "(Create", "CreateNew"] {
                assert!(!said.contains(internal), "{said}");
            }
        }
    }
}
