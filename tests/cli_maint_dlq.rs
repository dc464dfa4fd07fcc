//! `spool dlq` through the real binary, on both durable backends: list,
//! show, export in every format (parsed back), requeue and purge, and
//! every exit code each can produce.

mod cli_common;

use base64::Engine as _;
use cli_common::*;
use spool::OpenMode;

/// Payloads that break naive CSV and JSON writers.
fn nasty() -> Vec<(Vec<u8>, &'static str, &'static str)> {
    vec![
        (b"plain".to_vec(), "", "HTTP 500"),
        (b"a,b,\"c\"".to_vec(), "k,1", "said \"no\", twice"),
        (
            b"line one\r\nline two\n".to_vec(),
            "k\n2",
            "multi\nline\r\nerror",
        ),
        (b"\xff\x00\x01binary\x80".to_vec(), "bin", "rejected"),
        (Vec::new(), "empty", ""),
    ]
}

/// Enqueue `nasty()` and dead-letter all of it; returns the ids.
fn dead_letters(env: &Env) -> Vec<u64> {
    let s = env.lib(OpenMode::Create);
    let mut ids = Vec::new();
    for (payload, key, err) in nasty() {
        let id = s.enqueue(&payload, key).unwrap().id;
        s.set_attempts(id, 4).unwrap();
        s.dead_letter(id, err).unwrap();
        ids.push(id);
    }
    ids
}

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// The payload bytes of an item JSON object.
fn payload_of(v: &serde_json::Value) -> Vec<u8> {
    match (v.get("payload"), v.get("payload_base64")) {
        (Some(p), None) => p.as_str().unwrap().as_bytes().to_vec(),
        (None, Some(b)) => b64(b.as_str().unwrap()),
        other => panic!("exactly one payload field expected: {other:?} in {v}"),
    }
}

/// Check that exported JSON items are the dead letters of `nasty()`.
fn check_items(items: &[serde_json::Value], ids: &[u64]) {
    assert_eq!(items.len(), ids.len());
    for ((v, id), (payload, key, err)) in items.iter().zip(ids).zip(nasty()) {
        assert_eq!(v["id"].as_u64(), Some(*id));
        assert_eq!(payload_of(v), payload, "{v}");
        assert_eq!(v["key"], key);
        assert_eq!(v["attempts"], 4);
        assert_eq!(v["last_error"], err);
        assert_eq!(v["held"], false);
        assert!(v["enqueued_at"].is_string(), "{v}");
        assert!(
            spool::Timestamp::parse_rfc3339(v["dead_at"].as_str().unwrap()).is_some(),
            "{v}"
        );
    }
}

#[test]
fn list_and_show() {
    each_backend(|env| {
        let ids = dead_letters(env);
        env.enqueue("still pending");
        let a = env.run(&["--json", "dlq", "list"]).success();
        check_items(&ndjson(&a.get_output().stdout), &ids);
        // Not a terminal: tab-separated lines, escaped, one per item.
        let a = env.run(&["dlq", "list", "--limit", "2"]).success();
        let out = stdout(&a);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        let cols: Vec<&str> = lines[1].split('\t').collect();
        assert_eq!(cols[0], "2");
        assert_eq!(cols[1], "k,1");
        assert_eq!(cols[2], "4");
        assert!(cols[3].ends_with(" ago"), "{out}");
        assert_eq!(cols[4], "said \"no\", twice");
        assert_eq!(cols[6], "a,b,\"c\"");
        let a = env.run(&["dlq", "list"]).success();
        assert!(
            stdout(&a).contains("line one\\r\\nline two\\n"),
            "{}",
            stdout(&a)
        );
        // show: text, JSON and exact bytes.
        let a = env.run(&["dlq", "show", "4"]).success();
        let out = stdout(&a);
        assert!(out.contains("state        dead letter"), "{out}");
        assert!(out.contains("last error   rejected"), "{out}");
        assert!(out.contains("(binary)"), "{out}");
        let v = json_out(&env.run(&["--json", "dlq", "show", "3"]).success());
        assert_eq!(payload_of(&v), b"line one\r\nline two\n");
        assert!(v["dead_at"].is_string());
        env.run(&["dlq", "show", "4", "--raw"])
            .success()
            .stdout(b"\xff\x00\x01binary\x80".to_vec());
        // 65: not a dead letter (a pending id says where it is).
        let a = assert_error(env.run(&["dlq", "show", "6"]), 65, &env.path);
        assert!(stderr(&a).contains("it is pending"), "{}", stderr(&a));
        assert_error(env.run(&["dlq", "show", "99"]), 65, &env.path);
        // 64: not an id.
        env.run(&["dlq", "show", "x"]).code(64).stdout("");
    });
}

#[test]
fn read_only_dlq_commands_never_create_a_spool() {
    each_backend(|env| {
        for args in [
            &["dlq", "list"][..],
            &["dlq", "show", "1"],
            &["dlq", "export"],
            &["dlq", "export", "--format", "csv", "-o", "out.csv"],
            &["dlq", "requeue", "1"],
            &["dlq", "requeue", "--all"],
            &["dlq", "purge", "--all", "--yes"],
        ] {
            assert_error(env.run(args), 66, &env.path);
            assert!(env.files().is_empty(), "{args:?} created {:?}", env.files());
        }
        // An empty dead-letter set is fine.
        env.enqueue("x");
        env.run(&["dlq", "list"]).success().stdout("");
        env.run(&["dlq", "export", "--format", "json"])
            .success()
            .stdout("[\n]\n");
    });
}

#[test]
fn export_in_every_format_parses_back() {
    each_backend(|env| {
        let ids = dead_letters(env);
        // NDJSON (the default) on stdout.
        let a = env.run(&["dlq", "export"]).success();
        check_items(&ndjson(&a.get_output().stdout), &ids);
        // One JSON array.
        let a = env.run(&["dlq", "export", "--format", "json"]).success();
        let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
        check_items(v.as_array().unwrap(), &ids);
        // CSV, into a file replaced atomically.
        let out = env.dir.path().join("dead.csv");
        std::fs::write(&out, "stale").unwrap();
        let a = env
            .cmd()
            .args(["dlq", "export", "--format", "csv", "-o"])
            .arg(&out)
            .assert()
            .success()
            .stdout("");
        assert!(
            stderr(&a).contains("exported 5 dead letters to"),
            "{}",
            stderr(&a)
        );
        assert!(
            !env.files().iter().any(|f| f.contains("tmp")),
            "{:?}",
            env.files()
        );
        let bytes = std::fs::read(&out).unwrap();
        assert!(bytes.starts_with(
            b"id,key,attempts,enqueued_at,dead_at,last_error,payload_encoding,payload\r\n"
        ));
        let mut rdr = csv::ReaderBuilder::new().from_reader(&bytes[..]);
        assert_eq!(
            rdr.headers().unwrap(),
            vec![
                "id",
                "key",
                "attempts",
                "enqueued_at",
                "dead_at",
                "last_error",
                "payload_encoding",
                "payload"
            ]
        );
        let rows: Vec<csv::ByteRecord> = rdr.byte_records().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 5);
        for ((row, id), (payload, key, err)) in rows.iter().zip(&ids).zip(nasty()) {
            let field = |i: usize| std::str::from_utf8(&row[i]).unwrap().to_string();
            assert_eq!(field(0), id.to_string());
            assert_eq!(field(1), key);
            assert_eq!(field(2), "4");
            assert!(spool::Timestamp::parse_rfc3339(&field(3)).is_some());
            assert!(spool::Timestamp::parse_rfc3339(&field(4)).is_some());
            assert_eq!(field(5), err);
            let decoded = match field(6).as_str() {
                "utf8" => row[7].to_vec(),
                "base64" => b64(&field(7)),
                other => panic!("payload_encoding {other}"),
            };
            assert_eq!(decoded, payload, "row {id}");
        }
        assert_eq!(&rows[3][6], b"base64");
        assert_eq!(&rows[1][6], b"utf8");
        // --json with -o prints a summary object.
        let a = env
            .cmd()
            .args(["--json", "dlq", "export", "--format", "ndjson", "-o"])
            .arg(&out)
            .assert()
            .success();
        assert_eq!(json_out(&a)["exported"], 5);
        check_items(&ndjson(&std::fs::read(&out).unwrap()), &ids);
        // 73: the output's directory is missing; nothing written.
        let nowhere = env.dir.path().join("missing/dead.csv");
        let a = env
            .cmd()
            .args(["dlq", "export", "-o"])
            .arg(&nowhere)
            .assert();
        assert_error(a, 73, &env.path);
        // 64: an unknown format.
        env.run(&["dlq", "export", "--format", "xml"])
            .code(64)
            .stdout("");
    });
}

#[test]
fn requeue_then_replay_delivers() {
    each_backend(|env| {
        let ids = dead_letters(env);
        let a = env.run(&["--json", "dlq", "requeue", "1", "2"]).success();
        assert_eq!(
            json_out(&a),
            serde_json::json!({"requeued": [1, 2], "unknown": []})
        );
        let items = env.drain();
        assert_eq!(items.len(), 2);
        for (v, (payload, key, err)) in items.iter().zip(nasty()) {
            assert_eq!(payload_of(v), payload);
            assert_eq!(v["key"], key, "keys are kept");
            assert_eq!(v["attempts"], 0, "attempts are reset");
            assert_eq!(v["last_error"], err, "the last error is kept for reference");
            assert!(v["next_retry_at"].is_null());
        }
        let a = env.run(&["dlq", "requeue", "--all"]).success();
        assert!(
            stderr(&a).contains("requeued 3 dead letters"),
            "{}",
            stderr(&a)
        );
        assert_eq!(env.size(), 5);
        env.run(&["dlq", "list"]).success().stdout("");
        // A replay delivers every requeued item, exact bytes, in id order.
        let out = env.dir.path().join("delivered");
        let cmd = format!(
            "sh -c 'cat >> \"$0\"; printf \"|%s\\n\" \"$SPOOL_ITEM_ID\" >> \"$0\"' {}",
            out.display()
        );
        env.run(&["replay", "--exec", &cmd]).success();
        assert_eq!(env.size(), 0);
        let mut want = Vec::new();
        for (id, (payload, _, _)) in ids.iter().zip(nasty()) {
            want.extend_from_slice(&payload);
            want.extend_from_slice(format!("|{id}\n").as_bytes());
        }
        assert_eq!(std::fs::read(&out).unwrap(), want);
        // Nothing left to requeue: still exit 0.
        let a = env.run(&["dlq", "requeue", "--all"]).success();
        assert!(stderr(&a).contains("no dead letters"), "{}", stderr(&a));
    });
}

#[test]
fn requeue_exit_codes() {
    each_backend(|env| {
        env.run(&["init", "--max-depth", "3"]).success();
        dead_letters(env);
        env.enqueue("a");
        env.enqueue("b");
        // 75: more than the bound allows; nothing changes.
        let before = export_all(env);
        let a = assert_error(env.run(&["dlq", "requeue", "1", "2"]), 75, &env.path);
        let err = stderr(&a);
        assert!(
            err.contains("the bound is 3") && err.contains("nothing was requeued"),
            "{err}"
        );
        assert_eq!(export_all(env), before);
        // 65: a pending item carries the requeued key; nothing changes.
        env.enqueue_key("newer", "bin");
        let a = assert_error(env.run(&["dlq", "requeue", "4"]), 65, &env.path);
        let err = stderr(&a);
        assert!(err.contains("already carries its key \"bin\""), "{err}");
        let before = export_all(env);
        // 65: unknown ids are named; the known one is requeued.
        env.run(&["done", "7", "8"]).success();
        let a = assert_error(env.run(&["dlq", "requeue", "2", "42", "43"]), 65, &env.path);
        let err = stderr(&a);
        assert!(
            err.contains("no dead letter with id 42, 43 (the 1 other dead letter was requeued)"),
            "{err}"
        );
        assert!(export_all(env) != before);
        assert_eq!(env.drain()[0]["id"], 2);
        // 65: a bad id on stdin; nothing changes.
        let before = export_all(env);
        assert_error(
            env.run_in(&["dlq", "requeue", "-"], "1\nnope\n"),
            65,
            &env.path,
        );
        assert_eq!(export_all(env), before);
        // 64: neither ids nor --all, or both.
        env.run(&["dlq", "requeue"]).code(64).stdout("");
        env.run(&["dlq", "requeue", "1", "--all"])
            .code(64)
            .stdout("");
    });
}

/// Every record of the spool (pending and dead), for "nothing changed".
fn export_all(env: &Env) -> Vec<serde_json::Value> {
    records_of(&env.run(&["export"]).success().get_output().stdout)
}

/// The records of an export: its lines without the spool header (the
/// first line, `{"spool": …}`).
fn records_of(out: &[u8]) -> Vec<serde_json::Value> {
    let mut v = ndjson(out);
    if v.first().is_some_and(|h| h.get("spool").is_some()) {
        v.remove(0);
    }
    v
}

#[test]
fn purge_needs_yes() {
    each_backend(|env| {
        dead_letters(env);
        let before = env.snapshot();
        for args in [&["dlq", "purge", "1"][..], &["dlq", "purge", "--all"]] {
            let a = assert_error(env.run(args), 64, &env.path);
            let err = stderr(&a);
            assert!(err.contains("refusing without --yes"), "{err}");
            assert!(err.contains("nothing was changed"), "{err}");
            assert_eq!(env.snapshot(), before);
        }
        let a = env
            .run(&["--json", "dlq", "purge", "1", "2", "--yes"])
            .success();
        assert_eq!(
            json_out(&a),
            serde_json::json!({"purged": [1, 2], "unknown": []})
        );
        let left: Vec<u64> = ndjson(
            &env.run(&["--json", "dlq", "list"])
                .success()
                .get_output()
                .stdout,
        )
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect();
        assert_eq!(left, [3, 4, 5]);
        // 65: unknown ids named; the known one is purged.
        let a = assert_error(env.run(&["dlq", "purge", "1", "3", "--yes"]), 65, &env.path);
        assert!(
            stderr(&a).contains("no dead letter with id 1 (the 1 other dead letter was purged)"),
            "{}",
            stderr(&a)
        );
        let a = env.run(&["dlq", "purge", "--all", "--yes"]).success();
        assert!(
            stderr(&a).contains("purged 2 dead letters"),
            "{}",
            stderr(&a)
        );
        env.run(&["dlq", "list"]).success().stdout("");
        // Purged ids are never reissued.
        assert_eq!(env.enqueue("next"), 6);
        // 64: --yes alone names nothing.
        env.run(&["dlq", "purge", "--yes"]).code(64).stdout("");
    });
}
