//! `replay --events` and `--on-dead` end to end (SPEC §11): the real
//! binary, real spools, a real HTTP sink on 127.0.0.1, a real `spool
//! serve` receiver and real commands.
//!
//! Budget: about 10 s of a debug build on two cores, most of it the
//! slow-reader case (6,000 deliveries on SQLite) and the hook that hangs
//! until its 300 ms bound.

mod cli_common;
mod http_sink;
mod serve_common;

use cli_common::*;
use http_sink::{Answer, Sink};
use serve_common::Serve;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// Every line of an events file, parsed.
fn events(path: &Path) -> Vec<serde_json::Value> {
    ndjson(&std::fs::read(path).unwrap_or_default())
}

fn find<'a>(evs: &'a [serde_json::Value], event: &str, id: u64) -> &'a serde_json::Value {
    evs.iter()
        .find(|e| e["event"] == event && e["id"] == id)
        .unwrap_or_else(|| panic!("no {event} event for item {id} in {evs:#?}"))
}

/// The sink's answer by payload: `ok` 200, `busy` 503, anything else 400.
fn by_payload() -> Sink {
    Sink::start(|r, _| match r.body.as_slice() {
        b"ok" => Answer::Status(200),
        b"busy" => Answer::Status(503),
        _ => Answer::Status(400),
    })
}

/// The fields every item event has, and their types.
fn check_common(e: &serde_json::Value) {
    assert!(e["ts"].as_str().is_some_and(|t| t.ends_with('Z')), "{e}");
    assert!(
        e["id"].is_u64() && e["attempt"].is_u64() && e["key"].is_string(),
        "{e}"
    );
}

#[test]
fn url_events_tell_delivered_failed_and_dead_lettered_after_each_commit() {
    each_backend_and_postgres("replay --url --events", |env| {
        let sink = by_payload();
        let ok = env.enqueue_key("ok", "order-1");
        env.run(&["enqueue", "--group", "g", "--", "busy"])
            .success();
        let busy = ok + 1;
        let bad = env.enqueue("bad");
        let file = env.dir.path().join("events.ndjson");
        let file_s = file.to_str().unwrap();
        let a = env
            .run(&["replay", "--url", &sink.url("/in"), "--events", file_s])
            .code(1);
        // The summary keeps stdout when the events go to a file.
        assert!(stdout(&a).starts_with("delivered 1, failed 1, dead-lettered 1"));
        let evs = events(&file);
        assert_eq!(evs.len(), 3, "{evs:#?}");
        for e in &evs {
            check_common(e);
        }
        let d = find(&evs, "delivered", ok);
        assert_eq!(d["key"], "order-1");
        assert_eq!(d["status"], 200);
        assert_eq!(d["attempt"], 1);
        assert!(d["queue_ms"].is_u64() && d["duration_ms"].is_u64(), "{d}");
        for absent in ["group", "error", "exit_code", "next_retry_at", "push_seq"] {
            assert!(d.get(absent).is_none(), "{absent} in {d}");
        }
        let f = find(&evs, "failed", busy);
        assert_eq!(f["group"], "g");
        assert_eq!(f["key"], "");
        assert_eq!(f["status"], 503);
        assert!(f["error"].as_str().unwrap().starts_with("HTTP 503"), "{f}");
        assert!(f["next_retry_at"].is_string(), "{f}");
        let x = find(&evs, "dead_lettered", bad);
        assert_eq!(x["status"], 400);
        assert!(x["error"].as_str().unwrap().starts_with("HTTP 400"), "{x}");
        if !env.path.to_string_lossy().starts_with("postgres") {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "events file mode {mode:o}");
        }
        // A later run appends: the busy item, out of attempts, dies.
        env.run(&[
            "replay",
            "--url",
            &sink.url("/in"),
            "--events",
            file_s,
            "--ignore-backoff",
            "--max-attempts",
            "2",
        ])
        .code(1);
        let evs = events(&file);
        assert_eq!(evs.len(), 4, "{evs:#?}");
        let x = &evs[3];
        assert_eq!(
            (&x["event"], &x["id"], &x["attempt"]),
            (&"dead_lettered".into(), &busy.into(), &2.into())
        );
        assert!(
            x["error"]
                .as_str()
                .unwrap()
                .contains("gave up after 2 attempts"),
            "{x}"
        );
    });
}

#[test]
fn exec_events_on_stdout_tell_exit_codes_and_the_summary_goes_to_stderr() {
    each_backend(|env| {
        let ok = env.enqueue("ok");
        let busy = env.enqueue("busy");
        let bad = env.enqueue("bad");
        let a = env
            .run(&[
                "replay",
                "--exec",
                "sh -c 'read p; case $p in ok) exit 0;; busy) echo warming up >&2; exit 3;; *) exit 65;; esac'",
                "--events",
                "-",
            ])
            .code(1);
        let evs = ndjson(&a.get_output().stdout);
        assert_eq!(evs.len(), 3, "stdout holds only events: {}", stdout(&a));
        assert!(stderr(&a).contains("delivered 1, failed 1, dead-lettered 1"));
        assert_eq!(find(&evs, "delivered", ok)["exit_code"], 0);
        let f = find(&evs, "failed", busy);
        assert_eq!(f["exit_code"], 3);
        assert_eq!(f["error"], "command exited with 3: warming up");
        assert!(f.get("status").is_none(), "{f}");
        let x = find(&evs, "dead_lettered", bad);
        assert_eq!(x["exit_code"], 65);
        assert!(x["duration_ms"].is_u64(), "{x}");
    });
}

#[test]
fn push_events_tell_acked_and_rejected_with_sequence_numbers() {
    each_backend(|env| {
        let central = Env::new("central.db");
        let serve = Serve::start(&central, &["--max-payload", "8"]);
        let small = env.enqueue_key("small", "k-small");
        let large = env.enqueue("this payload is over eight bytes");
        let file = env.dir.path().join("events.ndjson");
        let dead = env.dir.path().join("dead.json");
        let hook = format!("sh -c 'cat > {}'", dead.display());
        env.run(&[
            "replay",
            "--push",
            &serve.url("/v1/push"),
            "--events",
            file.to_str().unwrap(),
            "--on-dead",
            &hook,
        ])
        .code(1);
        let evs = events(&file);
        assert_eq!(evs.len(), 2, "{evs:#?}");
        let a = find(&evs, "acked", small);
        assert_eq!(a["push_seq"], 1);
        assert_eq!(a["key"], "k-small");
        assert_eq!(a["attempt"], 1);
        let r = find(&evs, "rejected", large);
        assert_eq!(r["push_seq"], 2);
        assert!(!r["error"].as_str().unwrap().is_empty(), "{r}");
        // The rejected item is a dead letter: --on-dead got its JSON.
        let shown = stdout(&env.run(&["show", &large.to_string(), "--json"]).success());
        let got = std::fs::read_to_string(&dead).unwrap();
        assert_eq!(got, shown);
        serve.stop();
    });
}

/// Every `delivered` line is read while the replay runs, and the item it
/// names is checked at once: it must not be pending any more (its done
/// was committed before the line was written), also with commit groups.
#[test]
fn a_line_is_written_only_after_the_commit_that_recorded_it() {
    each_backend(|env| {
        let sink = Sink::always(200);
        for i in 0..7 {
            env.enqueue(&format!("p{i}"));
        }
        let mut child = env
            .std_cmd()
            .args([
                "replay",
                "--url",
                &sink.url("/in"),
                "--commit-every",
                "3",
                "--events",
                "-",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut seen = 0;
        for line in out.lines() {
            let e: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            assert_eq!(e["event"], "delivered");
            let id = e["id"].as_u64().unwrap().to_string();
            // Not pending: `show` finds no pending item (exit 65: gone).
            let shown = env.run(&["show", &id, "--json"]);
            let out = shown.get_output();
            if out.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_ne!(v["state"], "pending", "item {id} still pending: {v}");
                assert!(v.get("state").is_some(), "item {id} still pending: {v}");
            } else {
                assert_eq!(out.status.code(), Some(65));
            }
            seen += 1;
        }
        assert_eq!(child.wait().unwrap().code(), Some(0));
        assert_eq!(seen, 7);
    });
}

/// The reader takes one line and closes the pipe while the second
/// delivery is held at the sink: the rest is delivered, the exit status
/// is the run's, and one warning says the events ended.
#[test]
fn a_reader_that_closes_the_pipe_ends_the_events_not_the_replay() {
    each_backend(|env| {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let sink = Sink::start(move |_, n| {
            if n == 1 {
                let _ = go_rx.lock().unwrap().recv_timeout(Duration::from_secs(30));
            }
            Answer::Status(200)
        });
        for i in 0..20 {
            env.enqueue(&format!("p{i}"));
        }
        let mut child = env
            .std_cmd()
            .args(["replay", "--url", &sink.url("/in"), "--events", "-"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        assert!(first.contains("\"delivered\""), "{first}");
        drop(out);
        go_tx.send(()).unwrap();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0), "{err}");
        assert_eq!(sink.received().len(), 20);
        assert_eq!(env.size(), 0);
        assert_eq!(
            err.matches("warning: the events reader closed its end")
                .count(),
            1,
            "{err}"
        );
        assert!(err.contains("delivered 20, failed 0"), "{err}");
    });
}

/// A reader that reads nothing until every item was delivered: delivery
/// never waited for it (the sink saw all requests first), and the lines
/// beyond the pipe's buffer and the queue are dropped, counted where
/// they are missing.
#[test]
fn a_slow_reader_never_holds_up_delivery() {
    let env = Env::new("spool.db");
    const N: usize = 6000;
    let (all_tx, all_rx) = mpsc::channel::<()>();
    let all_tx = Mutex::new(all_tx);
    let sink = Sink::start(move |_, n| {
        if n + 1 == N {
            let _ = all_tx.lock().unwrap().send(());
        }
        Answer::Status(200)
    });
    let lines: String = (0..N).map(|i| format!("item-{i}\n")).collect();
    env.run_in(&["enqueue", "--lines"], lines).success();
    let started = Instant::now();
    let mut child = env
        .std_cmd()
        .args([
            "replay",
            "--url",
            &sink.url("/in"),
            "--concurrency",
            "4",
            "--commit-every",
            "200",
            "--events",
            "-",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    all_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("every item delivered while nobody read the events");
    let took = started.elapsed();
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(0), "{err}");
    let evs = ndjson(text.as_bytes());
    let delivered = evs.iter().filter(|e| e["event"] == "delivered").count();
    let dropped: u64 = evs
        .iter()
        .filter(|e| e["event"] == "dropped")
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    assert!(dropped > 0, "nothing dropped in {took:?}");
    assert_eq!(delivered as u64 + dropped, N as u64);
    assert!(err.contains("event(s) dropped"), "{err}");
}

#[test]
fn on_dead_gets_the_dead_letters_json_once_per_dead_item() {
    each_backend_and_postgres("replay --on-dead", |env| {
        let sink = by_payload();
        env.enqueue("ok");
        let bad1 = env.enqueue("bad-1");
        let bad2 = env.enqueue_key("bad-2", "k2");
        let hook = "sh -c 'cat > dead-$SPOOL_ITEM_ID.json; echo $SPOOL_EVENT >> events.log'";
        let a = env
            .run(&["replay", "--url", &sink.url("/in"), "--on-dead", hook])
            .code(1);
        assert!(!stderr(&a).contains("warning"), "{}", stderr(&a));
        for id in [bad1, bad2] {
            let got =
                std::fs::read_to_string(env.dir.path().join(format!("dead-{id}.json"))).unwrap();
            let shown = stdout(&env.run(&["show", &id.to_string(), "--json"]).success());
            assert_eq!(got, shown, "item {id}");
            let v: serde_json::Value = serde_json::from_str(&got).unwrap();
            assert!(v["dead_at"].is_string(), "{v}");
        }
        let log = std::fs::read_to_string(env.dir.path().join("events.log")).unwrap();
        assert_eq!(log, "dead_lettered\ndead_lettered\n");
    });
}

#[test]
fn a_failing_or_hanging_hook_is_logged_and_changes_nothing() {
    each_backend(|env| {
        let sink = by_payload();
        let ok = env.enqueue("ok");
        let bad = env.enqueue("bad");
        let a = env
            .run(&[
                "replay",
                "--url",
                &sink.url("/in"),
                "--on-dead",
                "sh -c 'echo no pager configured >&2; exit 7'",
            ])
            .code(1);
        let err = stderr(&a);
        assert!(
            err.contains(&format!(
                "spool: warning: --on-dead hook for item {bad} failed: `sh -c 'echo no pager \
                 configured >&2; exit 7'` exited with 7: no pager configured"
            )),
            "{err}"
        );
        assert!(stdout(&a).starts_with("delivered 1, failed 0, dead-lettered 1"));
        let shown = json_out(&env.run(&["show", &bad.to_string(), "--json"]).success());
        assert!(shown["dead_at"].is_string(), "{shown}");
        let _ = ok;

        // A hook that hangs is killed at --hook-timeout.
        let late = env.enqueue("bad again");
        let started = Instant::now();
        let a = env
            .run(&[
                "replay",
                "--url",
                &sink.url("/in"),
                "--on-dead",
                "sleep 30",
                "--hook-timeout",
                "300ms",
            ])
            .code(1);
        assert!(started.elapsed() < Duration::from_secs(20));
        let err = stderr(&a);
        assert!(
            err.contains(&format!(
                "--on-dead hook for item {late} failed: `sleep 30` timed out after 300ms; its \
                 process group was killed"
            )),
            "{err}"
        );
        // A hook that cannot start is the same.
        let gone = env.enqueue("bad once more");
        let a = env
            .run(&[
                "replay",
                "--url",
                &sink.url("/in"),
                "--on-dead",
                "/nonexistent/pager",
            ])
            .code(1);
        assert!(
            stderr(&a).contains(&format!(
                "--on-dead hook for item {gone} failed: cannot run /nonexistent/pager"
            )),
            "{}",
            stderr(&a)
        );
    });
}

#[test]
fn bad_event_and_hook_flags_are_refused_before_the_spool_is_touched() {
    let env = Env::new("spool.db");
    env.enqueue("x");
    let before = env.snapshot();
    let a = env
        .run(&["replay", "--exec", "true", "--on-dead", "'unclosed"])
        .code(64);
    assert!(
        stderr(&a).contains("cannot parse --on-dead"),
        "{}",
        stderr(&a)
    );
    let a = env
        .run(&[
            "replay",
            "--exec",
            "true",
            "--events",
            env.dir.path().join("no/such/dir/ev").to_str().unwrap(),
        ])
        .code(66);
    assert!(stderr(&a).contains("events file"), "{}", stderr(&a));
    assert_eq!(env.snapshot(), before);
}

/// `replay --follow` and `watch` take the same options.
#[test]
fn follow_and_watch_write_events_and_run_the_hook() {
    each_backend(|env| {
        let sink = by_payload();
        env.enqueue("ok");
        let bad = env.enqueue("bad");
        let file = env.dir.path().join("follow.ndjson");
        env.run(&[
            "replay",
            "--follow",
            "--idle-exit",
            "200ms",
            "--url",
            &sink.url("/in"),
            "--events",
            file.to_str().unwrap(),
            "--on-dead",
            "sh -c 'cat > dead-follow.json'",
        ])
        .code(1);
        let evs = events(&file);
        assert_eq!(evs.len(), 2, "{evs:#?}");
        find(&evs, "dead_lettered", bad);
        assert!(env.dir.path().join("dead-follow.json").exists());

        let ok2 = env.enqueue("ok");
        let bad2 = env.enqueue("bad");
        let file = env.dir.path().join("watch.ndjson");
        let mut child = env
            .std_cmd()
            .args([
                "watch",
                "--probe",
                &format!("tcp://127.0.0.1:{}", sink.port()),
                "--url",
                &sink.url("/in"),
                "--events",
                file.to_str().unwrap(),
                "--on-dead",
                "sh -c 'cat > dead-watch.json'",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let dead = env.dir.path().join("dead-watch.json");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(events(&file).len() == 2 && std::fs::metadata(&dead).is_ok_and(|m| m.len() > 0)) {
            assert!(
                Instant::now() < deadline,
                "watch wrote {:#?}",
                events(&file)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill only signals our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(child.wait().unwrap().code(), Some(0), "{err}");
        let evs = events(&file);
        assert_eq!(find(&evs, "delivered", ok2)["status"], 200);
        find(&evs, "dead_lettered", bad2);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&dead).unwrap()).unwrap();
        assert_eq!(v["id"], bad2);
    });
}

/// PostgreSQL: the delivery outlives its lease, and another replayer
/// (started by the delivering command itself, after its lease ran out)
/// takes the item over and delivers it: the first replayer's outcome is
/// not recorded, and its event says `lease_lost`.
#[test]
fn a_delivery_that_outlives_its_lease_is_told_as_lease_lost() {
    let Some(env) = pg_env("replay --events lease_lost") else {
        return;
    };
    let id = env.enqueue_key("slow", "k-slow");
    let outer = env.dir.path().join("outer.ndjson");
    let inner = env.dir.path().join("inner.ndjson");
    let takeover = format!(
        "sh -c 'sleep 2; \"$0\" -s \"$1\" replay --exec true --events \"$2\"' {} {} {}",
        env!("CARGO_BIN_EXE_spool"),
        env.path.display(),
        inner.display()
    );
    let a = env
        .run(&[
            "replay",
            "--exec",
            &takeover,
            "--lease",
            "1s",
            "--events",
            outer.to_str().unwrap(),
        ])
        .success();
    assert!(stderr(&a).contains("lease lost"), "{}", stderr(&a));
    let evs = events(&inner);
    assert_eq!(evs.len(), 1, "{evs:#?}");
    assert_eq!(find(&evs, "delivered", id)["attempt"], 2);
    let evs = events(&outer);
    assert_eq!(evs.len(), 1, "{evs:#?}");
    let lost = find(&evs, "lease_lost", id);
    assert_eq!(lost["key"], "k-slow");
    assert_eq!(lost["attempt"], 1);
    assert!(
        lost.get("exit_code").is_none() && lost.get("error").is_none(),
        "{lost}"
    );
    assert_eq!(env.size(), 0);
}
