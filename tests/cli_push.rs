//! `spool replay --push` end to end: the real binary against a real
//! HTTP (and HTTPS) push receiver on 127.0.0.1 that runs the library's
//! receiver rule and misbehaves on request, on both durable backends.
//! Also `done --force`, `hold` of an in-flight item, and
//! `config uuid --regenerate`.

mod cli_common;
mod http_sink;
mod push_receiver;
mod tls_pki;

use assert_cmd::assert::Assert;
use cli_common::*;
use push_receiver::{Act, PushReceiver};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// `replay --push URL ARGS…` with test-friendly backoff.
/// One push run, one request at a time (`--pipeline 1`): the scripted
/// receiver's faults then meet the requests in a known order. Pipelining
/// is tested in tests/push_sender.rs and tests/push_e2e.rs.
fn push(env: &Env, url: &str, args: &[&str]) -> Assert {
    let mut all = vec![
        "replay",
        "--push",
        url,
        "--pipeline",
        "1",
        "--backoff-base",
        "10ms",
    ];
    all.extend_from_slice(args);
    env.run(&all)
}

fn enqueue_lines(env: &Env, n: usize) {
    let lines: String = (1..=n).map(|i| format!("p{i}\n")).collect();
    env.run_in(&["enqueue", "--lines"], lines).success();
}

fn numbers(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("p{i}")).collect()
}

fn item(env: &Env, id: u64) -> serde_json::Value {
    json_out(&env.run(&["show", &id.to_string(), "--json"]).success())
}

fn uuid(env: &Env) -> String {
    stdout(&env.run(&["config", "uuid"]).success())
        .trim()
        .to_string()
}

#[test]
fn every_item_is_delivered_once_in_batches_with_contiguous_numbers() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        enqueue_lines(env, 12);
        env.enqueue_key("keyed", "order-7");
        let a = push(env, &rx.url(), &["--batch", "5", "--json"]).code(0);
        let r = json_out(&a);
        assert_eq!(r["delivered"], 13, "{r}");
        assert_eq!(r["requests"], 3);
        assert_eq!(r["in_flight"], 0);
        assert_eq!(r["watermark"], 13);
        assert_eq!(
            rx.seqs(),
            [vec![1, 2, 3, 4, 5], vec![6, 7, 8, 9, 10], vec![11, 12, 13]]
        );
        let mut want = numbers(12);
        want.push("keyed".into());
        assert_eq!(rx.payloads(), want);
        let reqs = rx.requests();
        let sent = reqs[2].req.as_ref().unwrap();
        let Some(spool::push::Entry::Item(keyed)) = sent.entries.last() else {
            panic!("{sent:?}")
        };
        assert_eq!(keyed.key, "order-7", "the key travels with the item");
        assert_eq!(
            rx.keys()[12],
            format!("{}:order-7", uuid(env)),
            "the receiver scopes it by the client"
        );
        let first = &reqs[0];
        assert_eq!(first.header("content-type"), Some("application/json"));
        assert_eq!(first.req.as_ref().unwrap().client_id, uuid(env));
        assert_eq!(env.size(), 0);
        assert_eq!(rx.duplicates(), 0);
        // Nothing left: a second run sends nothing and exits 0.
        let a = push(env, &rx.url(), &[]).code(0);
        assert!(
            stdout(&a).starts_with("delivered 0, rejected 0"),
            "{}",
            stdout(&a)
        );
        assert_eq!(rx.requests().len(), 3);
    });
}

#[test]
fn an_over_ack_is_clamped_and_logged() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script([Act::OverAck(100)]);
        enqueue_lines(env, 3);
        let a = push(env, &rx.url(), &["--json"]).code(0);
        let err = stderr(&a);
        assert!(
            err.contains("warning: the push receiver acknowledged up to sequence 103, but this spool has assigned only up to 3"),
            "{err}"
        );
        assert_eq!(
            json_out(&a)["watermark"],
            3,
            "clamped to the highest assigned"
        );
        // The next item gets number 4, and the request says acked 3.
        env.enqueue("p4");
        push(env, &rx.url(), &[]).code(0);
        let last = rx.requests().pop().unwrap();
        assert_eq!(last.seqs(), [4]);
        assert_eq!(last.req.unwrap().acked, 3);
    });
}

#[test]
fn a_receiver_that_lost_state_stops_the_push_with_65_and_nothing_changes() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        enqueue_lines(env, 2);
        push(env, &rx.url(), &[]).code(0);
        rx.lose_state();
        let id = env.enqueue("p3");
        let a = push(env, &rx.url(), &[]).code(65);
        let err = stderr(&a);
        assert!(err.contains("spool: error: push "), "{err}");
        assert!(err.contains("has lost state"), "{err}");
        assert!(err.contains("acknowledged 2"), "{err}");
        assert!(
            err.contains("hint: the receiver went back to an older state"),
            "{err}"
        );
        // The summary still goes to stdout.
        assert!(
            stdout(&a).contains("refused by the receiver"),
            "{}",
            stdout(&a)
        );
        let it = item(env, id);
        assert_eq!(it["push_seq"], 3);
        assert_eq!(it["attempts"], 0, "a refusal is not an attempt");
        assert!(rx.payloads().is_empty(), "nothing resent");
        // A receiver still answering a gap: the same again.
        rx.script([Act::Gap(1)]);
        push(env, &rx.url(), &[]).code(65);
        assert_eq!(env.size(), 1);
    });
}

#[test]
fn a_copied_spool_is_told_to_regenerate_its_uuid_and_then_pushes_as_a_new_client() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        env.enqueue("base");
        // A copy of the spool, files and all: the same uuid.
        let copy = Env::new(env.path.file_name().unwrap().to_str().unwrap());
        let name = env.path.file_name().unwrap().to_string_lossy().into_owned();
        for f in env.files() {
            if f.starts_with(&name) && !f.ends_with(".lock") {
                std::fs::copy(env.dir.path().join(&f), copy.dir.path().join(&f)).unwrap();
            }
        }
        assert_eq!(uuid(&copy), uuid(env));
        push(env, &rx.url(), &[]).code(0);
        // The copy's first item was the same one: a duplicate, fine. Its
        // second differs from the original's second.
        env.enqueue("original-2");
        push(env, &rx.url(), &[]).code(0);
        copy.enqueue("copy-2");
        let a = push(&copy, &rx.url(), &[]).code(65);
        let err = stderr(&a);
        assert!(err.contains("reused with different content"), "{err}");
        assert!(err.contains("spool config uuid --regenerate"), "{err}");
        assert_eq!(
            rx.payloads(),
            ["base", "original-2"],
            "nothing lost or applied"
        );

        let a = copy.run(&["config", "uuid", "--regenerate"]).success();
        let new = stdout(&a).trim().to_string();
        assert_ne!(new, uuid(env));
        assert_eq!(uuid(&copy), new);
        assert!(
            stderr(&a).contains("2 in-flight item(s) renumbered from 1"),
            "{}",
            stderr(&a)
        );
        push(&copy, &rx.url(), &[]).code(0);
        let last = rx.requests().pop().unwrap();
        assert_eq!(last.req.as_ref().unwrap().client_id, new);
        assert_eq!(last.seqs(), [1, 2], "renumbered from 1");
        assert_eq!(rx.payloads(), ["base", "original-2", "base", "copy-2"]);
        assert_eq!(rx.clients().len(), 2);
    });
}

#[test]
fn unauthorized_is_77_with_items_untouched_and_credentials_masked() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.require_token("right-token-0123456789");
        enqueue_lines(env, 2);
        let a = push(
            env,
            &rx.url(),
            &["-H", "Authorization: Bearer wrong-token-9876543210"],
        )
        .code(77);
        let err = stderr(&a);
        assert!(err.contains("HTTP 401"), "{err}");
        assert!(err.contains("hint: check the credentials"), "{err}");
        assert!(!err.contains("wrong-token"), "{err}");
        assert_eq!(item(env, 1)["attempts"], 0);
        assert_eq!(env.size(), 2);
        push(
            env,
            &rx.url(),
            &["-H", "Authorization: Bearer right-token-0123456789"],
        )
        .code(0);
        assert_eq!(rx.payloads(), numbers(2));
    });
}

#[test]
fn a_413_halves_the_batch_then_dead_letters_an_item_too_large_alone() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.max_body(1500);
        enqueue_lines(env, 6);
        let big = env.enqueue(&"x".repeat(2000));
        env.enqueue("last");
        let a = push(env, &rx.url(), &["--json"]).code(1);
        let r = json_out(&a);
        assert_eq!(r["too_large"], 1, "{r}");
        assert_eq!(r["delivered"], 7);
        assert_eq!(r["skipped"], 1);
        let sizes: Vec<usize> = rx.seqs().iter().map(Vec::len).collect();
        assert_eq!(sizes[..2], [8, 4], "{sizes:?}");
        assert!(stderr(&a).contains("refused the request as too large"));
        let dead = json_out(
            &env.run(&["dlq", "show", &big.to_string(), "--json"])
                .success(),
        );
        let why = dead["last_error"].as_str().unwrap();
        assert!(
            why.starts_with("too large for the push receiver (HTTP 413): body over"),
            "{why}"
        );
        // Its number went out as a skip entry.
        let skip_sent = rx.requests().iter().any(|l| {
            l.req.as_ref().is_some_and(|q| {
                q.entries
                    .iter()
                    .any(|e| matches!(e, spool::push::Entry::Skip { seq: 7 }))
            })
        });
        assert!(skip_sent);
        let mut want = numbers(6);
        want.push("last".into());
        assert_eq!(rx.payloads(), want);
    });
}

#[test]
fn rejected_entries_become_dead_letters_with_the_receivers_reason() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.max_payload(16);
        env.enqueue("ok-1");
        let bad = env.enqueue(&"y".repeat(40));
        env.enqueue("ok-2");
        let a = push(env, &rx.url(), &["--json"]).code(1);
        let r = json_out(&a);
        assert_eq!(
            (r["delivered"].as_u64(), r["rejected"].as_u64()),
            (Some(2), Some(1))
        );
        let dead = json_out(
            &env.run(&["dlq", "show", &bad.to_string(), "--json"])
                .success(),
        );
        let why = dead["last_error"].as_str().unwrap();
        assert!(why.contains("16"), "the receiver's reason: {why}");
        assert!(stderr(&a).contains(&format!("item {bad}: dead-lettered")));
        assert_eq!(rx.payloads(), ["ok-1", "ok-2"]);
        assert_eq!(env.size(), 0);
    });
}

#[test]
fn failed_requests_end_at_the_budget_with_75_and_attempts_on_every_item() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script(vec![
            Act::Status(
                503,
                r#"{"error":"maintenance"}"#.into(),
                None
            );
            3
        ]);
        enqueue_lines(env, 3);
        let a = push(env, &rx.url(), &["--max-attempts", "3"]).code(75);
        assert!(stdout(&a).contains("gave up after --max-attempts failed requests"));
        assert!(
            stderr(&a).contains("(failed request 3 of 3)"),
            "{}",
            stderr(&a)
        );
        assert_eq!(rx.requests().len(), 3);
        for id in 1..=3 {
            let it = item(env, id);
            assert_eq!(it["attempts"], 3, "{it}");
            assert_eq!(it["push_seq"], id);
            assert!(it["last_error"]
                .as_str()
                .unwrap()
                .contains("HTTP 503: maintenance"));
        }
        let dead = stdout(&env.run(&["dlq", "list", "--json"]).success());
        assert!(dead.trim().is_empty(), "nothing dead-lettered: {dead}");
        // A timeout is a failed request too.
        rx.script(vec![Act::Hang(Duration::from_secs(3)); 2]);
        let a = push(
            env,
            &rx.url(),
            &["--timeout", "200ms", "--max-attempts", "2"],
        )
        .code(75);
        assert!(stderr(&a).contains("timed out"), "{}", stderr(&a));
        assert_eq!(item(env, 1)["attempts"], 5);
        // Then the receiver is back: the same numbers, delivered.
        push(env, &rx.url(), &[]).code(0);
        assert!(rx.seqs().iter().all(|s| s == &[1, 2, 3]));
        assert_eq!(rx.payloads(), numbers(3));
    });
}

#[test]
fn a_dropped_connection_and_a_lost_answer_are_resent_and_counted_as_duplicates() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script([Act::Hangup, Act::LoseAnswer]);
        enqueue_lines(env, 4);
        let a = push(env, &rx.url(), &["--json"]).code(0);
        let r = json_out(&a);
        assert_eq!(
            (r["requests"].as_u64(), r["failed_requests"].as_u64()),
            (Some(3), Some(2))
        );
        assert_eq!(r["duplicates"], 4);
        assert_eq!(rx.payloads(), numbers(4), "applied exactly once");
        assert_eq!(rx.duplicates(), 4);
    });
}

#[test]
fn a_killed_sender_resends_the_same_numbers_and_the_receiver_counts_duplicates() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script([Act::ApplyThenHang(Duration::from_secs(20))]);
        enqueue_lines(env, 5);
        let mut child = env
            .std_cmd()
            .args([
                "replay",
                "--push",
                &rx.url(),
                "--batch",
                "3",
                "--pipeline",
                "1",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while rx.requests().is_empty() {
            assert!(Instant::now() < deadline, "no request");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The receiver applied 1..3 and holds the answer.
        std::thread::sleep(Duration::from_millis(50));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let seqs: Vec<serde_json::Value> =
            env.drain().iter().map(|i| i["push_seq"].clone()).collect();
        let before: Vec<serde_json::Value> =
            (1..=5).map(|i| item(env, i)["push_seq"].clone()).collect();
        assert_eq!(
            before[..3],
            [1, 2, 3],
            "numbered before the request: {seqs:?}"
        );
        assert!(before[3].is_null() && before[4].is_null());
        push(env, &rx.url(), &["--batch", "3"]).code(0);
        assert_eq!(rx.seqs(), [vec![1, 2, 3], vec![1, 2, 3], vec![4, 5]]);
        assert_eq!(rx.duplicates(), 3);
        assert_eq!(rx.payloads(), numbers(5));
        assert_eq!(env.size(), 0);
    });
}

#[test]
fn sigterm_finishes_the_request_in_flight_and_records_it() {
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        each_backend(|env| {
            let rx = PushReceiver::start();
            rx.script([Act::Hang(Duration::from_millis(400))]);
            enqueue_lines(env, 2);
            let child = env
                .std_cmd()
                .args(["replay", "--push", &rx.url(), "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while rx.requests().is_empty() {
                assert!(Instant::now() < deadline);
                std::thread::sleep(Duration::from_millis(5));
            }
            unsafe {
                libc::kill(child.id() as i32, sig);
            }
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(code),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(r["stopped"], "signal", "{r}");
            assert_eq!(r["failed_requests"], 1);
            assert_eq!(rx.requests().len(), 1, "no request after the signal");
            assert_eq!(item(env, 1)["attempts"], 1, "the outcome was recorded");
        });
    }
}

#[test]
fn done_force_sends_a_skip_and_hold_of_an_in_flight_item_is_refused() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script([Act::Hangup]);
        enqueue_lines(env, 3);
        push(env, &rx.url(), &["--max-attempts", "1"]).code(75);
        let listed = stdout(&env.run(&["list"]).success());
        let first: Vec<&str> = listed.lines().next().unwrap().split('\t').collect();
        assert_eq!(first.last(), Some(&"1"), "the push column: {listed}");
        assert!(stdout(&env.run(&["show", "2"]).success()).contains("push seq     2"));

        let a = assert_error(env.run(&["hold", "2"]), 65, &env.path);
        assert!(stderr(&a).contains("in flight to the push receiver"));
        let a = assert_error(env.run(&["done", "2"]), 65, &env.path);
        assert!(
            stderr(&a).contains(
                "item 2 is in flight to the push receiver (sequence 2); use --force to abandon it: \
                 the receiver is told to skip its number"
            ),
            "{}",
            stderr(&a)
        );
        assert_eq!(env.size(), 3, "nothing changed");
        let a = env.run(&["done", "--force", "2"]).success();
        assert!(stderr(&a).contains("skip sequence 2"), "{}", stderr(&a));
        assert_eq!(env.size(), 2);

        push(env, &rx.url(), &["--json"]).code(0);
        let last = rx.requests().pop().unwrap();
        let req = last.req.unwrap();
        assert_eq!(req.entries[1], spool::push::Entry::Skip { seq: 2 });
        assert_eq!(rx.payloads(), ["p1", "p3"]);
        assert_eq!(rx.last_seq(&uuid(env)), 3);
        // The list has no push column once nothing is in flight.
        env.enqueue("p4");
        let listed = stdout(&env.run(&["list"]).success());
        assert_eq!(
            listed.lines().next().unwrap().split('\t').count(),
            8,
            "{listed}"
        );
    });
}

#[test]
fn a_dry_run_numbers_sends_and_changes_nothing() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script([Act::Hangup]);
        enqueue_lines(env, 3);
        push(env, &rx.url(), &["--batch", "2", "--max-attempts", "1"]).code(75);
        // SQLite's shared-memory index may be touched by any reader.
        let files = || -> Vec<_> {
            env.snapshot()
                .into_iter()
                .filter(|(p, _)| !p.to_string_lossy().ends_with("-shm"))
                .collect()
        };
        let before = files();
        let a = push(env, &rx.url(), &["--dry-run"]).code(0);
        assert_eq!(
            stdout(&a).trim(),
            "dry run: 2 in flight would be resent, 1 new would be sent, not due 0, held 0"
        );
        assert!(
            stderr(&a).contains("seq 3: would send item 3"),
            "{}",
            stderr(&a)
        );
        assert!(files() == before, "a spool file changed");
        assert_eq!(rx.requests().len(), 1);
    });
}

#[test]
fn compress_sends_gzip_that_the_receiver_decodes() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        let lines: String = (0..50)
            .map(|i| format!("{{\"event\":\"signup\",\"n\":{i}}}\n"))
            .collect();
        env.run_in(&["enqueue", "--lines"], lines).success();
        push(env, &rx.url(), &["--compress"]).code(0);
        let reqs = rx.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].header("content-encoding"), Some("gzip"));
        assert!(
            reqs[0].wire_len * 3 < reqs[0].body.len(),
            "{} vs {}",
            reqs[0].wire_len,
            reqs[0].body.len()
        );
        assert_eq!(rx.payloads().len(), 50);
    });
}

#[test]
fn https_with_cacert_and_a_named_tls_failure_without_it() {
    let env = Env::new("spool.db");
    let ca = tls_pki::Ca::new("push CA");
    let ca_pem = env.dir.path().join("ca.pem");
    ca.write_pem(&ca_pem);
    let rx = PushReceiver::start_tls(ca.server(&["localhost"]).server_config());
    enqueue_lines(&env, 2);
    let url = rx.https_url("localhost");
    let a = env
        .cmd()
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .args(["replay", "--push", &url, "--max-attempts", "1"])
        .write_stdin("")
        .assert()
        .code(75);
    assert!(stderr(&a).contains("unknown issuer"), "{}", stderr(&a));
    assert!(item(&env, 1)["last_error"]
        .as_str()
        .unwrap()
        .contains("TLS handshake with localhost:"));
    env.cmd()
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .args([
            "replay",
            "--push",
            &url,
            "--cacert",
            ca_pem.to_str().unwrap(),
        ])
        .write_stdin("")
        .assert()
        .code(0);
    assert_eq!(rx.payloads(), numbers(2));
}

#[test]
fn options_that_do_not_apply_to_push_are_usage_errors() {
    let env = Env::new("spool.db");
    env.enqueue("a");
    let url = "http://127.0.0.1:9/v1/push";
    for args in [
        vec!["--concurrency", "4"],
        vec!["--ordered"],
        vec!["--commit-every", "10"],
    ] {
        let mut all = vec!["replay", "--push", url];
        all.extend(args.iter().copied());
        let a = assert_error(env.run(&all), 64, &env.path);
        assert!(
            stderr(&a).contains("does not apply to --push"),
            "{}",
            stderr(&a)
        );
    }
    env.run(&["replay", "--push", url, "--url", url]).code(64);
    env.run(&["replay", "--url", url, "--batch", "5"]).code(64);
    env.run(&["replay", "--exec", "true", "--compress"])
        .code(64);
    // The options of one target are refused with another.
    env.run(&["replay", "--url", url, "--shell"]).code(64);
    env.run(&["replay", "--exec", "true", "--method", "PUT"])
        .code(64);
    for args in [
        vec!["--method", "PUT"],
        vec!["--content-type", "text/plain"],
        vec!["--retry-status", "409"],
        vec!["--shell"],
    ] {
        let mut all = vec!["replay", "--push", url];
        all.extend(args.iter().copied());
        env.run(&all).code(64);
    }
    env.run(&["replay", "--push", url, "--batch", "0"]).code(64);
    for n in ["0", "65", "-1", "two"] {
        let a = env
            .run(&["replay", "--push", url, "--pipeline", n])
            .code(64);
        assert!(stderr(&a).contains("--pipeline"), "{}", stderr(&a));
    }
    env.run(&["replay", "--exec", "true", "--pipeline", "2"])
        .code(64);
    env.run(&["replay", "--push", "ftp://x/y"]).code(64);
    assert_eq!(
        item(&env, 1)["push_seq"],
        serde_json::Value::Null,
        "nothing numbered"
    );
}

/// SPEC §7: a `Retry-After` longer than `--backoff-max` ends the run with
/// 75, and the next run — a cron run or `--follow` — does not send before
/// that time: the items in flight keep it as their next retry time
/// (`show`, `list`); `--ignore-backoff` sends anyway.
#[test]
fn a_retry_after_holds_back_later_runs_until_its_time() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script([Act::Status(503, r#"{"error":"full"}"#.into(), Some(120))]);
        enqueue_lines(env, 2);
        let a = push(env, &rx.url(), &["--backoff-max", "1m", "--json"]).code(75);
        let r = json_out(&a);
        assert_eq!(r["stopped"], "retry_after", "{r}");
        assert!(r["not_before"].is_string(), "{r}");
        assert_eq!(rx.requests().len(), 1);
        for id in 1..=2 {
            let it = item(env, id);
            assert_eq!(it["next_retry_at"], r["not_before"], "{it}");
        }
        let listed = stdout(&env.run(&["list"]).success());
        for row in listed.lines() {
            let retry = row.split('\t').nth(4).unwrap();
            assert!(retry.starts_with("in 1m"), "next retry: {row}");
        }
        // The next run sends nothing, and says why.
        let a = push(env, &rx.url(), &[]).code(75);
        assert!(
            stdout(&a).contains("asked (Retry-After) not to be sent to before"),
            "{}",
            stdout(&a)
        );
        let r = json_out(&push(env, &rx.url(), &["--json"]).code(75));
        assert_eq!(r["stopped"], "not_before", "{r}");
        assert_eq!(r["requests"], 0, "{r}");
        // Nor does a follower before the time comes.
        push(env, &rx.url(), &["--follow", "--idle-exit", "1s"]).code(75);
        assert_eq!(rx.requests().len(), 1, "nothing sent before the time");
        // --ignore-backoff overrides it.
        push(env, &rx.url(), &["--ignore-backoff"]).code(0);
        assert_eq!(rx.payloads(), numbers(2));
        assert_eq!(rx.seqs().last().unwrap(), &[1, 2], "the same numbers");
    });
}

/// A push the receiver refuses (401/403, another 4xx) leaves the items of
/// the refused request in flight with their numbers: the hint says so
/// (and that the next run resends them), never that nothing changed.
#[test]
fn a_refused_push_says_its_entries_stay_in_flight() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.require_token("right-token-0123456789");
        enqueue_lines(env, 2);
        let a = push(
            env,
            &rx.url(),
            &["-H", "Authorization: Bearer wrong-token-9876543210"],
        )
        .code(77);
        let hint = stderr(&a)
            .lines()
            .find_map(|l| l.strip_prefix("hint: ").map(str::to_string))
            .unwrap_or_default();
        assert!(
            hint.ends_with(
                "2 entries stay in flight with their sequence numbers, and the next run resends \
                 them with the same numbers (`spool list` shows them; `spool done --force ID` \
                 abandons one)"
            ),
            "{hint}"
        );
        assert!(
            !stderr(&a).contains("no item was changed"),
            "{}",
            stderr(&a)
        );
        assert_eq!(item(env, 1)["push_seq"], 1);
        assert_eq!(item(env, 2)["push_seq"], 2);
        // Another 4xx: the same truth.
        rx.script([Act::Status(422, r#"{"error":"no"}"#.into(), None)]);
        let a = push(
            env,
            &rx.url(),
            &["-H", "Authorization: Bearer right-token-0123456789"],
        )
        .code(65);
        assert!(
            stderr(&a).contains("hint: the receiver's answer is quoted above; 2 entries stay"),
            "{}",
            stderr(&a)
        );
        push(
            env,
            &rx.url(),
            &["-H", "Authorization: Bearer right-token-0123456789"],
        )
        .code(0);
        assert_eq!(rx.seqs().last().unwrap(), &[1, 2], "resent as they were");
        assert_eq!(rx.payloads(), numbers(2));
    });
}

/// A failed push request tells its cause on stderr even with `-q`, once
/// (the first); the summary stays on stdout.
#[test]
fn a_failed_push_tells_the_first_cause_with_q_too() {
    each_backend(|env| {
        let rx = PushReceiver::start();
        rx.script(vec![
            Act::Status(
                503,
                r#"{"error":"maintenance"}"#.into(),
                None
            );
            2
        ]);
        enqueue_lines(env, 1);
        let a = push(env, &rx.url(), &["-q", "--max-attempts", "2"]).code(75);
        let err = stderr(&a);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(
                "spool: push receiver answered HTTP 503: maintenance (failed request 1 of 2)"
            ),
            "{err}"
        );
        assert_eq!(stdout(&a).lines().count(), 1);
    });
}
