//! A spool's push identity across `export` and `import` (SPEC §7: the
//! sequence counter survives export/import between spools of the same
//! uuid): the export's spool header, `import --identity` into a fresh
//! spool of the other backend continuing the numbering against a real
//! push receiver, same-uuid and other-uuid imports, refusals and
//! malformed headers, and old exports without a header.

mod cli_common;
mod http_sink;
mod push_receiver;

use assert_cmd::assert::Assert;
use cli_common::*;
use push_receiver::{Act, PushReceiver};

/// Source and destination spool files: each backend moved to the other.
const MOVES: [(&str, &str); 2] = [("edge.db", "moved.ndjson"), ("edge.ndjson", "moved.db")];

fn push(env: &Env, url: &str, args: &[&str]) -> Assert {
    let mut all = vec!["replay", "--push", url, "--backoff-base", "10ms"];
    all.extend_from_slice(args);
    env.run(&all)
}

fn uuid(env: &Env) -> String {
    stdout(&env.run(&["config", "uuid"]).success())
        .trim()
        .to_string()
}

/// Every file of the spool's directory with its bytes, except SQLite's
/// shared-memory index (readers update its read marks).
fn data_snapshot(env: &Env) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    env.snapshot()
        .into_iter()
        .filter(|(p, _)| !p.to_string_lossy().ends_with("-shm"))
        .collect()
}

/// `export -o FILE` of `env`, returning the file's lines.
fn export(env: &Env, file: &str) -> (std::path::PathBuf, Vec<String>) {
    let out = env.dir.path().join(file);
    env.cmd()
        .args(["export", "-o"])
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(&out).expect("read the export");
    (out, text.lines().map(str::to_string).collect())
}

fn import(env: &Env, file: &std::path::Path, args: &[&str]) -> Assert {
    env.cmd().arg("import").args(args).arg(file).assert()
}

fn push_seqs(env: &Env) -> Vec<(String, Option<u64>)> {
    env.drain()
        .iter()
        .map(|v| {
            (
                v["payload"].as_str().unwrap().to_string(),
                v["push_seq"].as_u64(),
            )
        })
        .collect()
}

/// An edge spool that pushed p1..p3 (acknowledged), then p4 and p5 in a
/// request the receiver applied but whose answer was lost (in flight:
/// numbers 4 and 5), then enqueued p6 (never sent).
fn edge_with_history(env: &Env, rx: &PushReceiver) {
    for p in ["p1", "p2", "p3"] {
        env.enqueue(p);
    }
    push(env, &rx.url(), &[]).code(0);
    env.enqueue("p4");
    env.enqueue("p5");
    rx.script([Act::LoseAnswer]);
    push(env, &rx.url(), &["--max-attempts", "1"]).code(75);
    env.enqueue("p6");
    assert_eq!(
        push_seqs(env),
        [
            ("p4".to_string(), Some(4)),
            ("p5".to_string(), Some(5)),
            ("p6".to_string(), None)
        ]
    );
}

#[test]
fn export_begins_with_the_spool_header() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        edge_with_history(env, &rx);
        let (_, lines) = export(env, "all.ndjson");
        let head: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(
            head,
            serde_json::json!({"spool": {"uuid": uuid(env),
                "push": {"last_assigned": 5, "acked": 3, "skips": []}}})
        );
        assert_eq!(lines.len(), 4, "the header and three records");
        // On stdout too.
        let a = env.run(&["export"]).success();
        assert_eq!(stdout(&a).lines().next().unwrap(), lines[0]);
    });
}

#[test]
fn a_moved_spool_continues_its_numbering_at_the_receiver() {
    for (from, to) in MOVES {
        eprintln!("--- {from} -> {to}");
        let rx = PushReceiver::start();
        let edge = Env::new(from);
        edge_with_history(&edge, &rx);
        let (file, _) = export(&edge, "all.ndjson");
        let moved = Env::new(to);
        moved.run(&["init"]).success();
        let a = moved
            .cmd()
            .args(["--json", "import", "--identity"])
            .arg(&file)
            .assert()
            .success();
        assert_eq!(json_out(&a)["identity"], "adopted");
        assert_eq!(uuid(&moved), uuid(&edge));
        assert_eq!(
            push_seqs(&moved),
            push_seqs(&edge),
            "in-flight numbers kept"
        );
        let before = rx.requests().len();
        push(&moved, &rx.url(), &[]).code(0);
        // The moved spool resends 4 and 5 (duplicates, same content) and
        // numbers p6 as 6: contiguous, as the same client.
        let reqs = rx.requests();
        let seqs: Vec<u64> = reqs[before..].iter().flat_map(|r| r.seqs()).collect();
        assert_eq!(seqs, [4, 5, 6]);
        assert_eq!(
            reqs[before].req.as_ref().unwrap().client_id,
            uuid(&edge),
            "the same client"
        );
        assert_eq!(reqs[before].req.as_ref().unwrap().acked, 3);
        assert_eq!(rx.payloads(), ["p1", "p2", "p3", "p4", "p5", "p6"]);
        assert_eq!(rx.duplicates(), 2);
        assert_eq!(rx.clients(), [(uuid(&edge), 6)]);
        assert_eq!(moved.size(), 0);
        // And numbering goes on.
        moved.enqueue("p7");
        push(&moved, &rx.url(), &[]).code(0);
        assert_eq!(rx.requests().last().unwrap().seqs(), [7]);
        assert_eq!(rx.payloads().len(), 7);
    }
}

#[test]
fn import_identity_creates_a_missing_spool() {
    for (from, to) in MOVES {
        let rx = PushReceiver::start();
        let edge = Env::new(from);
        edge_with_history(&edge, &rx);
        let (file, _) = export(&edge, "all.ndjson");
        let moved = Env::new(to);
        import(&moved, &file, &["--identity"]).success();
        assert_eq!(uuid(&moved), uuid(&edge));
        push(&moved, &rx.url(), &[]).code(0);
        assert_eq!(rx.payloads(), ["p1", "p2", "p3", "p4", "p5", "p6"]);
    }
}

#[test]
fn a_same_uuid_import_keeps_push_numbers() {
    for (from, to) in MOVES {
        let rx = PushReceiver::start();
        let edge = Env::new(from);
        edge_with_history(&edge, &rx);
        let (file, lines) = export(&edge, "all.ndjson");
        // A spool of the edge's uuid without its items: the header alone.
        let header_only = edge.dir.path().join("header.ndjson");
        std::fs::write(&header_only, format!("{}\n", lines[0])).unwrap();
        let twin = Env::new(to);
        import(&twin, &header_only, &["--identity"]).success();
        assert_eq!(twin.size(), 0);
        let a = twin
            .cmd()
            .args(["--json", "import"])
            .arg(&file)
            .assert()
            .success();
        assert_eq!(json_out(&a)["identity"], "kept");
        assert_eq!(push_seqs(&twin), push_seqs(&edge));
        push(&twin, &rx.url(), &[]).code(0);
        assert_eq!(rx.payloads(), ["p1", "p2", "p3", "p4", "p5", "p6"]);
        assert_eq!(rx.clients(), [(uuid(&edge), 6)]);
    }
}

#[test]
fn another_uuid_import_drops_push_numbers() {
    for (from, to) in MOVES {
        let rx = PushReceiver::start();
        let edge = Env::new(from);
        edge_with_history(&edge, &rx);
        let (file, _) = export(&edge, "all.ndjson");
        let other = Env::new(to);
        other.run(&["init"]).success();
        let own = uuid(&other);
        let a = other
            .cmd()
            .args(["-v", "--json", "import"])
            .arg(&file)
            .assert()
            .success();
        assert_eq!(json_out(&a)["identity"], "ignored");
        let err = stderr(&a);
        assert!(
            err.contains(&format!(
                "the export is of spool {}, not this one",
                uuid(&edge)
            )),
            "{err}"
        );
        assert_eq!(uuid(&other), own);
        assert!(push_seqs(&other).iter().all(|(_, s)| s.is_none()));
        // Without -v, no note.
        let quiet = Env::new(to);
        let a = import(&quiet, &file, &[]).success();
        assert!(!stderr(&a).contains("not this one"), "{}", stderr(&a));
        // A new client at the receiver, numbered from 1.
        push(&other, &rx.url(), &[]).code(0);
        assert_eq!(rx.requests().last().unwrap().seqs(), [1, 2, 3]);
        assert_eq!(rx.clients().len(), 2);
    }
}

#[test]
fn identity_is_refused_by_a_spool_that_is_not_fresh() {
    for (from, to) in MOVES {
        let rx = PushReceiver::start();
        let edge = Env::new(from);
        edge_with_history(&edge, &rx);
        let (file, _) = export(&edge, "all.ndjson");
        // Holds an item.
        let busy = Env::new(to);
        busy.enqueue("mine");
        let before = data_snapshot(&busy);
        let own = uuid(&busy);
        let a = assert_error(import(&busy, &file, &["--identity"]), 73, &busy.path);
        let err = stderr(&a);
        assert!(err.contains("holds 1 pending items"), "{err}");
        assert!(
            err.contains("hint: import --identity into a new spool"),
            "{err}"
        );
        assert!(data_snapshot(&busy) == before, "nothing changed");
        assert_eq!(uuid(&busy), own);
        // Pushed everything: empty, but it has a history as a client.
        let pushed = Env::new(to);
        pushed.enqueue("mine");
        push(&pushed, &rx.url(), &[]).code(0);
        assert_eq!(pushed.size(), 0);
        let before = data_snapshot(&pushed);
        let a = assert_error(import(&pushed, &file, &["--identity"]), 73, &pushed.path);
        assert!(stderr(&a).contains("has pushed as"), "{}", stderr(&a));
        assert!(data_snapshot(&pushed) == before, "nothing changed");
    }
}

#[test]
fn misplaced_or_malformed_headers_are_exit_65_and_change_nothing() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        let edge = Env::new(if env.is_ndjson() {
            "edge.db"
        } else {
            "edge.ndjson"
        });
        edge_with_history(&edge, &rx);
        let (_, lines) = export(&edge, "all.ndjson");
        let head = &lines[0];
        let bad_state = head.replace("\"acked\":3", "\"acked\":9");
        let unknown = head.replace("\"push\":", "\"extra\":1,\"push\":");
        let cases = [
            (
                "on line 2",
                format!("{}\n{}\n{}\n", lines[1], head, lines[2]),
                2,
            ),
            ("twice", format!("{head}\n{head}\n{}\n", lines[1]), 2),
            ("last", format!("{}\n{head}\n", lines[1]), 2),
            ("after a blank line", format!("\n{head}\n{}\n", lines[1]), 2),
            (
                "acked above last_assigned",
                format!("{bad_state}\n{}\n", lines[1]),
                1,
            ),
            ("unknown field", format!("{unknown}\n{}\n", lines[1]), 1),
        ];
        env.enqueue("mine");
        let before = data_snapshot(env);
        for (what, text, line) in cases {
            let file = edge.dir.path().join("bad.ndjson");
            std::fs::write(&file, &text).unwrap();
            let arg_sets: [&[&str]; 2] = [&[], &["--identity"]];
            for args in arg_sets {
                let a = assert_error(import(env, &file, args), 65, &env.path);
                let err = stderr(&a);
                assert!(
                    err.contains(&format!("bad.ndjson line {line}: ")),
                    "{what}: {err}"
                );
                assert!(err.contains("nothing was imported"), "{what}: {err}");
                assert!(data_snapshot(env) == before, "{what}: nothing changed");
            }
            // A spool that does not exist is not created.
            let missing = Env::new("new.db");
            assert_error(import(&missing, &file, &[]), 65, &missing.path);
            assert!(!missing.path.exists(), "{what}");
        }
    });
}

#[test]
fn old_exports_without_a_header_still_import() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        let edge = Env::new(if env.is_ndjson() {
            "edge.db"
        } else {
            "edge.ndjson"
        });
        edge_with_history(&edge, &rx);
        let (_, lines) = export(&edge, "all.ndjson");
        let file = env.dir.path().join("old.ndjson");
        std::fs::write(&file, lines[1..].join("\n") + "\n").unwrap();
        // --identity needs a header: 65, and the spool is not created.
        let a = assert_error(import(env, &file, &["--identity"]), 65, &env.path);
        assert!(stderr(&a).contains("no spool header"), "{}", stderr(&a));
        assert!(!env.path.exists());
        let a = env
            .cmd()
            .args(["--json", "import"])
            .arg(&file)
            .assert()
            .success();
        let r = json_out(&a);
        assert_eq!(r["identity"], serde_json::Value::Null);
        assert_eq!(r["imported"], 3);
        assert!(push_seqs(env).iter().all(|(_, s)| s.is_none()));
        assert_ne!(uuid(env), uuid(&edge));
    });
}

/// `Idempotency-Key` of every request `sink` received, by body.
fn keys_by_body(sink: &http_sink::Sink) -> std::collections::BTreeMap<String, String> {
    sink.received()
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.body).into_owned(),
                r.header("Idempotency-Key").unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A key-less item keeps the key it was sent under across export and
/// import into another spool (where it is renumbered): the receiver that
/// took it before the move sees the same `Idempotency-Key` after it.
/// Held and dead records get their stable key too; an explicit key is
/// kept; importing the same export again is a dedup hit for every
/// record, the dead one included.
#[test]
fn a_moved_key_less_item_keeps_its_idempotency_key() {
    for (from, to) in MOVES {
        eprintln!("--- {from} -> {to}");
        let edge = Env::new(from);
        let a = edge.enqueue("a");
        edge.enqueue_key("b", "order-7");
        let c = edge.enqueue("c");
        let d = edge.enqueue("d");
        edge.run(&["hold", &c.to_string()]).success();
        // The receiver takes a and b but its answers are lost (503), and
        // rejects d for good.
        let before = http_sink::Sink::start(|r, _| {
            http_sink::Answer::Status(if r.body == b"d" { 400 } else { 503 })
        });
        edge.run(&["replay", "--url", &before.url("/in")]).code(1);
        let sent = keys_by_body(&before);
        let edge_uuid = uuid(&edge);
        assert_eq!(sent["a"], format!("{edge_uuid}:{a}"));
        assert_eq!(sent["b"], "order-7");

        let moved = Env::new(to);
        // The target has issued ids of its own: every record is renumbered.
        for p in ["t1", "t2", "t3", "t4"] {
            moved.enqueue(p);
        }
        moved.run(&["done", "1", "2", "3", "4"]).success();
        let (file, _) = export(&edge, "all.ndjson");
        let r = json_out(
            &moved
                .cmd()
                .args(["--json", "import"])
                .arg(&file)
                .assert()
                .success(),
        );
        assert_eq!(r["renumbered"].as_array().unwrap().len(), 4, "{r}");
        assert_eq!(r["deduplicated"], serde_json::json!([]));
        let keys: Vec<(String, String)> =
            ndjson(&moved.run(&["export"]).success().get_output().stdout)[1..]
                .iter()
                .map(|v| {
                    (
                        v["payload"].as_str().unwrap().to_string(),
                        v["key"].as_str().unwrap().to_string(),
                    )
                })
                .collect();
        assert_eq!(
            keys,
            [
                ("a".to_string(), format!("{edge_uuid}:{a}")),
                ("b".to_string(), "order-7".to_string()),
                ("c".to_string(), format!("{edge_uuid}:{c}")),
                ("d".to_string(), format!("{edge_uuid}:{d}")),
            ]
        );

        // The same export again: nothing is added, pending, held or dead.
        let again = moved
            .cmd()
            .args(["--json", "import"])
            .arg(&file)
            .assert()
            .success();
        let r = json_out(&again);
        let hits: Vec<&str> = r["deduplicated"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["key"].as_str().unwrap())
            .collect();
        let (ka, kc, kd) = (
            format!("{edge_uuid}:{a}"),
            format!("{edge_uuid}:{c}"),
            format!("{edge_uuid}:{d}"),
        );
        assert_eq!(hits, [ka.as_str(), "order-7", kc.as_str(), kd.as_str()]);
        assert_eq!(
            (
                r["pending"].as_u64(),
                r["held"].as_u64(),
                r["dead"].as_u64()
            ),
            (Some(0), Some(0), Some(0))
        );
        assert!(
            stderr(&again).contains("deduplicated"),
            "{}",
            stderr(&again)
        );
        assert_eq!(moved.size(), 3);
        assert_eq!(
            stdout(&moved.run(&["--json", "dlq", "list"]).success())
                .lines()
                .count(),
            1,
            "the dead letter is not stored twice"
        );

        // After the move the receiver sees the keys it saw before.
        moved
            .run(&[
                "release",
                "--",
                &r["deduplicated"][2]["existing"].to_string(),
            ])
            .success();
        let after = http_sink::Sink::always(200);
        moved
            .run(&["replay", "--url", &after.url("/in"), "--ignore-backoff"])
            .success();
        let resent = keys_by_body(&after);
        assert_eq!(resent["a"], sent["a"]);
        assert_eq!(resent["b"], sent["b"]);
        assert_eq!(resent["c"], format!("{edge_uuid}:{c}"));
        assert_eq!(resent.len(), 3);
    }
}

/// An export without a header names no source spool, so no key can be
/// derived: a key-less record stays key-less (and is sent under the
/// target's own `<uuid>:<id>`).
#[test]
fn a_headerless_export_leaves_key_less_records_key_less() {
    each_backend(|env| {
        let file = env.dir.path().join("hand.ndjson");
        std::fs::write(&file, "{\"id\":7,\"payload\":\"x\"}\n").unwrap();
        import(env, &file, &[]).success();
        let items = env.drain();
        assert_eq!(items[0]["key"], "");
        let sink = http_sink::Sink::always(200);
        env.run(&["replay", "--url", &sink.url("/in")]).success();
        assert_eq!(keys_by_body(&sink)["x"], format!("{}:7", uuid(env)));
    });
}
