//! `spool replay` end to end: the real binary, real spools, a real HTTP
//! server on 127.0.0.1 and real child processes.

mod cli_common;
mod http_sink;

use cli_common::*;
use http_sink::{Answer, Dropper, Sink};
use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn json_of(a: &assert_cmd::assert::Assert) -> serde_json::Value {
    serde_json::from_slice(&a.get_output().stdout).expect("one JSON object")
}

fn item(env: &Env, id: u64) -> serde_json::Value {
    let a = env.run(&["show", &id.to_string(), "--json"]).success();
    json_of(&a)
}

fn uuid_of(env: &Env) -> String {
    // The stable key of an unkeyed item is <uuid>:<id>; read it back from
    // what the server receives instead of reaching into the spool.
    let sink = Sink::always(200);
    let id = env.enqueue("probe for the uuid");
    env.run(&["replay", "--url", &sink.url("/uuid")]).success();
    let key = sink.received()[0]
        .header("Idempotency-Key")
        .unwrap()
        .to_string();
    key.strip_suffix(&format!(":{id}")).unwrap().to_string()
}

#[test]
fn url_delivers_exact_bytes_with_identity_headers_over_one_connection() {
    each_backend(|env| {
        let sink = Sink::always(200);
        let uuid = uuid_of(env);
        let payload: Vec<u8> = (0u8..=255).rev().collect();
        env.run_in(&["enqueue", "--stdin"], payload.clone())
            .success();
        let keyed = env.enqueue_key("{\"n\":2}", "order-2");
        let a = env
            .run(&[
                "replay",
                "--url",
                &sink.url("/in"),
                "-H",
                "X-Tenant: blue",
                "--content-type",
                "application/json",
            ])
            .success();
        assert!(
            stdout(&a).starts_with("delivered 2, failed 0, dead-lettered 0"),
            "{}",
            stdout(&a)
        );
        let got = sink.received();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].body, payload);
        assert_eq!(
            got[0].header("Idempotency-Key").unwrap(),
            format!("{uuid}:{}", keyed - 1)
        );
        assert_eq!(got[1].body, b"{\"n\":2}");
        assert_eq!(got[1].header("Idempotency-Key"), Some("order-2"));
        for r in &got {
            assert_eq!(r.method, "POST");
            assert_eq!(r.path, "/in");
            assert_eq!(r.header("X-Spool-Attempt"), Some("1"));
            assert_eq!(r.header("X-Tenant"), Some("blue"));
            assert_eq!(r.header("Content-Type"), Some("application/json"));
        }
        assert_eq!(
            sink.connections(),
            1,
            "keep-alive: one connection for the run"
        );
        assert_eq!(env.size(), 0);
    });
}

#[test]
fn failures_keep_the_same_key_across_processes_and_count_attempts() {
    each_backend(|env| {
        let sink = Sink::always(500);
        env.enqueue("x");
        for run in 1..=3 {
            let a = env
                .run(&[
                    "replay",
                    "--url",
                    &sink.url("/"),
                    "--ignore-backoff",
                    "--json",
                ])
                .code(75);
            let r = json_of(&a);
            assert_eq!(r["failed"], 1, "run {run}");
            let it = item(env, 1);
            assert_eq!(it["attempts"], run);
            assert!(
                it["last_error"].as_str().unwrap().contains("HTTP 500"),
                "{it}"
            );
            assert!(it["next_retry_at"].is_string());
        }
        let got = sink.received();
        let keys: Vec<_> = got
            .iter()
            .map(|r| r.header("Idempotency-Key").unwrap().to_string())
            .collect();
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        let attempts: Vec<_> = got
            .iter()
            .map(|r| r.header("X-Spool-Attempt").unwrap().to_string())
            .collect();
        assert_eq!(attempts, ["1", "2", "3"]);
        // Two more failures exhaust the default budget of 5: exit 1.
        env.run(&["replay", "--url", &sink.url("/"), "--ignore-backoff"])
            .code(75);
        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--ignore-backoff"])
            .code(1);
        assert!(stderr(&a).contains("dead-lettered"), "{}", stderr(&a));
        assert_eq!(env.size(), 0);
        let stats = json_of(&env.run(&["stats", "--json"]).success());
        assert_eq!(stats["dead_letters"], 1, "{stats}");
    });
}

#[test]
fn not_due_items_are_skipped_and_retry_after_is_honoured() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| {
            Answer::Full(
                429,
                vec![("Retry-After".into(), "120".into())],
                "slow down".into(),
            )
        });
        env.enqueue("x");
        let before = std::time::SystemTime::now();
        env.run(&["replay", "--url", &sink.url("/"), "--backoff-max", "1s"])
            .code(75);
        let it = item(env, 1);
        let next = humantime::parse_rfc3339_weak(
            it["next_retry_at"].as_str().unwrap().trim_end_matches('Z'),
        )
        .unwrap();
        let wait = next.duration_since(before).unwrap();
        assert!(
            wait >= Duration::from_secs(110) && wait <= Duration::from_secs(130),
            "{wait:?}"
        );
        // The item is not due: a plain replay skips it, exit 0.
        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--json"])
            .success();
        assert_eq!(json_of(&a)["not_due"], 1);
        assert_eq!(sink.received().len(), 1);
    });
}

#[test]
fn a_permanent_reject_dead_letters_at_once() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| Answer::Full(400, vec![], "bad field".into()));
        env.enqueue("x");
        env.enqueue("y");
        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--json"])
            .code(1);
        let r = json_of(&a);
        assert_eq!(
            (r["dead_lettered"].as_u64(), r["rejected"].as_u64()),
            (Some(2), Some(2))
        );
        assert_eq!(sink.received().len(), 2, "never retried");
        assert_eq!(env.size(), 0);
        // --retry-status turns the 400 into a retry.
        env.enqueue("z");
        env.run(&["replay", "--url", &sink.url("/"), "--retry-status", "400"])
            .code(75);
        assert_eq!(env.size(), 1);
    });
}

#[test]
fn timeouts_and_dropped_connections_are_failed_attempts() {
    each_backend(|env| {
        let slow = Sink::start(|_, _| Answer::Slow(Duration::from_secs(5), 200));
        env.enqueue("x");
        let t = Instant::now();
        env.run(&["replay", "--url", &slow.url("/"), "--timeout", "300ms"])
            .code(75);
        assert!(t.elapsed() < Duration::from_secs(4));
        assert!(item(env, 1)["last_error"]
            .as_str()
            .unwrap()
            .contains("timed out"));

        let dropper = Dropper::start();
        env.run(&["replay", "--url", &dropper.url("/"), "--ignore-backoff"])
            .code(75);
        assert!(dropper.accepted() >= 1);
        assert_eq!(item(env, 1)["attempts"], 2);
    });
}

#[test]
fn credentials_never_reach_output_or_last_error() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| {
            Answer::Full(503, vec![], "echo hunter2pass Bearer-s3cr3t-token".into())
        });
        env.enqueue("x");
        let url = sink
            .url("/")
            .replace("http://", "http://admin:hunter2pass@");
        let a = env
            .run(&[
                "-v",
                "replay",
                "--url",
                &url,
                "-H",
                "Authorization: Bearer-s3cr3t-token",
            ])
            .code(75);
        let it = item(env, 1);
        for text in [stdout(&a), stderr(&a), it.to_string()] {
            assert!(!text.contains("hunter2pass"), "{text}");
            assert!(!text.contains("s3cr3t"), "{text}");
        }
    });
}

#[test]
fn exec_gets_exact_stdin_and_environment() {
    each_backend(|env| {
        let out = env.dir.path().join("out");
        let payload: Vec<u8> = b"\x00\x01binary\xff\"'$(x)\n".to_vec();
        env.run_in(&["enqueue", "--stdin", "--key", "k 1"], payload.clone())
            .success();
        let cmd = format!(
            "sh -c 'cat > \"$0\"; printf \"\\n%s|%s|%s|%s|%s\" \"$SPOOL_ITEM_ID\" \"$SPOOL_IDEMPOTENCY_KEY\" \"$SPOOL_ATTEMPT\" \"$SPOOL_PAYLOAD_BYTES\" \"$SPOOL_PATH\" >> \"$0\"' {}",
            out.display()
        );
        env.run(&["replay", "--exec", &cmd]).success();
        let got = std::fs::read(&out).unwrap();
        let mut want = payload.clone();
        want.extend_from_slice(
            format!("\n1|k 1|1|{}|{}", payload.len(), env.path.display()).as_bytes(),
        );
        assert_eq!(got, want);
    });
}

#[test]
fn exec_reject_code_failure_and_stderr_tail() {
    each_backend(|env| {
        env.enqueue("a");
        env.run(&[
            "replay",
            "--exec",
            "sh -c 'echo something broke >&2; exit 3'",
        ])
        .code(75);
        assert!(item(env, 1)["last_error"]
            .as_str()
            .unwrap()
            .contains("something broke"));
        env.run(&[
            "replay",
            "--exec",
            "sh -c 'exit 66'",
            "--reject-exit",
            "65,66",
            "--ignore-backoff",
        ])
        .code(1);
        assert_eq!(env.size(), 0);
    });
}

#[test]
fn exec_timeout_kills_the_process_group() {
    each_backend(|env| {
        env.enqueue("a");
        let pidfile = env.dir.path().join("pid");
        let cmd = format!("sh -c 'sleep 30 & echo $! > {}; wait'", pidfile.display());
        let t = Instant::now();
        env.run(&["replay", "--exec", &cmd, "--timeout", "300ms"])
            .code(75);
        assert!(t.elapsed() < Duration::from_secs(10));
        let pid = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .to_string();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
            if stat.is_empty() || state == Some('Z') {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sleep {pid} survived the timeout"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(item(env, 1)["last_error"]
            .as_str()
            .unwrap()
            .contains("timed out"));
    });
}

#[test]
fn payloads_and_keys_never_run_through_a_shell() {
    each_backend(|env| {
        let marker = env.dir.path().join("marker");
        let evil = format!("$(touch {})", marker.display());
        env.enqueue_key(&evil, &format!("`touch {}`", marker.display()));
        env.run(&["replay", "--exec", "cat"]).success();
        env.enqueue(&evil);
        env.run(&["replay", "--exec", "printf %s \"$SPOOL_IDEMPOTENCY_KEY\""])
            .success();
        assert!(!marker.exists());
        // --shell is the explicit opt-in to shell syntax in the command.
        let shell_out = env.dir.path().join("shell-out");
        env.enqueue("via shell");
        env.run(&[
            "replay",
            "--shell",
            "--exec",
            &format!("cat | tr a-z A-Z > {}", shell_out.display()),
        ])
        .success();
        assert_eq!(std::fs::read_to_string(&shell_out).unwrap(), "VIA SHELL");
    });
}

#[test]
fn ordered_limit_deadline_and_dry_run() {
    each_backend(|env| {
        let sink = Sink::start(|r, _| {
            if r.body == b"bad" {
                Answer::Status(500)
            } else {
                Answer::Status(200)
            }
        });
        for p in ["a", "bad", "c", "d"] {
            env.enqueue(p);
        }
        // SQLite readers touch the -shm index; the data files must not change.
        let data = || -> Vec<(std::path::PathBuf, Vec<u8>)> {
            env.snapshot()
                .into_iter()
                .filter(|(p, _)| !p.to_string_lossy().ends_with("-shm"))
                .collect()
        };
        let before = data();
        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--dry-run"])
            .success();
        assert!(
            stdout(&a).contains("dry run: 4 would be attempted"),
            "{}",
            stdout(&a)
        );
        assert!(data() == before, "dry run changes nothing");
        assert!(sink.received().is_empty());

        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--ordered", "--json"])
            .code(75);
        let r = json_of(&a);
        assert_eq!(
            (r["delivered"].as_u64(), r["failed"].as_u64()),
            (Some(1), Some(1))
        );
        assert_eq!(r["stopped"], "ordered_failure");
        assert_eq!(env.size(), 3, "c and d must not overtake bad");

        env.run(&["hold", "2"]).success();
        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--limit", "1", "--json"])
            .code(75);
        assert_eq!(json_of(&a)["stopped"], "limit");
        assert_eq!(env.size(), 2);
        let a = env
            .run(&["replay", "--url", &sink.url("/"), "--json"])
            .success();
        let r = json_of(&a);
        assert_eq!(
            (r["delivered"].as_u64(), r["held"].as_u64()),
            (Some(1), Some(1))
        );
    });
}

#[test]
fn concurrency_delivers_each_item_once() {
    each_backend(|env| {
        // The first four requests wait for each other: they meet only if
        // four deliveries are in flight at once (a sequential replay would
        // leave the first one waiting alone until the rendezvous gives up).
        let meet = std::sync::Arc::new((std::sync::Mutex::new(0usize), std::sync::Condvar::new()));
        let met = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (m, flag) = (meet.clone(), met.clone());
        let sink = Sink::start(move |_, n| {
            if n < 4 {
                let (lock, cv) = &*m;
                let mut arrived = lock.lock().unwrap();
                *arrived += 1;
                cv.notify_all();
                let (arrived, timeout) = cv
                    .wait_timeout_while(arrived, Duration::from_secs(10), |a| *a < 4)
                    .unwrap();
                if !timeout.timed_out() && *arrived >= 4 {
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                }
            }
            Answer::Slow(Duration::from_millis(5), 200)
        });
        let lines: String = (0..64).map(|i| format!("item-{i}\n")).collect();
        env.run_in(&["enqueue", "--stdin", "--lines"], lines)
            .success();
        env.run(&["replay", "--url", &sink.url("/"), "--concurrency", "16"])
            .success();
        let mut count: HashMap<Vec<u8>, usize> = HashMap::new();
        for r in sink.received() {
            *count.entry(r.body).or_default() += 1;
        }
        assert_eq!(count.len(), 64);
        assert!(count.values().all(|n| *n == 1));
        assert_eq!(env.size(), 0);
        assert!(
            met.load(std::sync::atomic::Ordering::SeqCst),
            "four deliveries were in flight at once"
        );
        // Every delivery in flight keeps its connection for the next one:
        // at most 16 connections for 64 requests, not one per request.
        assert!(
            (1..=16).contains(&sink.connections()),
            "{} connections",
            sink.connections()
        );
    });
}

#[test]
fn usage_and_environment_errors() {
    each_backend(|env| {
        assert_error(
            env.run(&["replay", "--url", "http://127.0.0.1:9/"]),
            66,
            &env.path,
        );
        assert!(!env.path.exists());
        env.enqueue("a");
        env.run(&["replay"]).code(64);
        env.run(&["replay", "--exec", "cat", "--url", "http://x/"])
            .code(64);
        env.run(&[
            "replay",
            "--url",
            "http://x/",
            "--ordered",
            "--concurrency",
            "2",
        ])
        .code(64);
        assert_error(env.run(&["replay", "--url", "ftp://x/"]), 64, &env.path);
        assert_error(
            env.run(&["replay", "--exec", "'unterminated"]),
            64,
            &env.path,
        );
        assert_error(
            env.run(&["replay", "--exec", "/nonexistent/deliver-cmd"]),
            64,
            &env.path,
        );
        assert_eq!(
            item(env, 1)["attempts"],
            0,
            "a broken command touches no item"
        );
    });
}

#[test]
fn a_second_replay_waits_or_exits_75_naming_the_holder() {
    each_backend(|env| {
        env.enqueue("a");
        let lock = spool::replay::ReplayLock::acquire(&env.path, Duration::ZERO).unwrap();
        let a = assert_error(env.run(&["replay", "--exec", "cat"]), 75, &env.path);
        assert!(
            stderr(&a).contains(&format!("pid {}", std::process::id())),
            "{}",
            stderr(&a)
        );
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(lock);
        });
        env.run(&["replay", "--exec", "cat", "--wait", "10s"])
            .success();
        releaser.join().unwrap();
        assert_eq!(env.size(), 0);
    });
}

#[test]
fn overlapping_replays_deliver_every_item_exactly_once() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| Answer::Slow(Duration::from_millis(5), 200));
        let lines: String = (0..40).map(|i| format!("p{i}\n")).collect();
        env.run_in(&["enqueue", "--stdin", "--lines"], lines)
            .success();
        let spawn = || {
            env.std_cmd()
                .args(["replay", "--url", &sink.url("/"), "--wait", "30s"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let (mut a, mut b) = (spawn(), spawn());
        assert!(a.wait().unwrap().success());
        assert!(b.wait().unwrap().success());
        let mut count: HashMap<Vec<u8>, usize> = HashMap::new();
        for r in sink.received() {
            *count.entry(r.body).or_default() += 1;
        }
        assert_eq!(count.len(), 40);
        assert!(count.values().all(|n| *n == 1), "{count:?}");
    });
}

#[test]
fn sigterm_and_sigint_stop_after_the_item_in_flight() {
    for (sig, code) in [(libc::SIGTERM, 143), (libc::SIGINT, 130)] {
        each_backend(|env| {
            let sink = Sink::start(|_, _| Answer::Slow(Duration::from_millis(150), 200));
            let lines: String = (0..10).map(|i| format!("p{i}\n")).collect();
            env.run_in(&["enqueue", "--stdin", "--lines"], lines)
                .success();
            let child = env
                .std_cmd()
                .args(["replay", "--url", &sink.url("/"), "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while sink.received().is_empty() {
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
            assert_eq!(r["stopped"], "signal");
            let delivered = r["delivered"].as_u64().unwrap();
            assert!((1..10).contains(&delivered), "{r}");
            assert_eq!(
                sink.received().len() as u64,
                delivered,
                "only delivered items were attempted"
            );
            assert_eq!(
                env.size(),
                10 - delivered,
                "nothing marked done that was not delivered"
            );
        });
    }
}

#[test]
fn a_killed_replay_loses_nothing_and_redelivers_at_most_once() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| Answer::Slow(Duration::from_millis(10), 200));
        let lines: String = (0..60).map(|i| format!("p{i}\n")).collect();
        env.run_in(&["enqueue", "--stdin", "--lines"], lines)
            .success();
        let mut child = env
            .std_cmd()
            .args(["replay", "--url", &sink.url("/")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sink.received().len() < 15 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        env.run(&["replay", "--url", &sink.url("/")]).success();
        assert_eq!(env.size(), 0);
        let mut per_body: HashMap<Vec<u8>, Vec<String>> = HashMap::new();
        for r in sink.received() {
            per_body
                .entry(r.body.clone())
                .or_default()
                .push(r.header("Idempotency-Key").unwrap().to_string());
        }
        assert_eq!(per_body.len(), 60, "every item delivered");
        for (body, keys) in per_body {
            assert!(
                keys.len() <= 2,
                "{:?} delivered {} times",
                String::from_utf8_lossy(&body),
                keys.len()
            );
            assert!(
                keys.iter().all(|k| *k == keys[0]),
                "same identity on redelivery"
            );
        }
    });
}

#[test]
fn progress_and_summary_streams() {
    each_backend(|env| {
        env.enqueue("a");
        // Not a terminal: no progress bar on stderr, summary on stdout.
        let a = env.run(&["replay", "--exec", "cat"]).success();
        assert_eq!(stderr(&a), "");
        assert_eq!(stdout(&a).lines().count(), 1);
    });
}

#[test]
fn list_and_show_display_attempts_next_retry_and_last_error() {
    each_backend(|env| {
        env.enqueue("x");
        env.run(&[
            "replay",
            "--exec",
            "sh -c 'echo upstream said no >&2; exit 1'",
        ])
        .code(75);
        let out = stdout(&env.run(&["list"]).success());
        let row: Vec<&str> = out.lines().next().unwrap().split('\t').collect();
        assert_eq!(row[2], "1", "attempts: {row:?}");
        assert!(row[4].starts_with("in "), "next retry: {row:?}");
        assert!(row[7].contains("upstream said no"), "last error: {row:?}");
        let shown = stdout(&env.run(&["show", "1"]).success());
        assert!(shown.contains("upstream said no"), "{shown}");
        assert!(
            shown
                .lines()
                .any(|l| l.starts_with("attempts") && l.contains('1')),
            "{shown}"
        );
    });
}

#[test]
fn group_commit_after_a_kill_redelivers_at_most_a_group() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| Answer::Slow(Duration::from_millis(5), 200));
        let lines: String = (0..80).map(|i| format!("p{i}\n")).collect();
        env.run_in(&["enqueue", "--stdin", "--lines"], lines)
            .success();
        let mut child = env
            .std_cmd()
            .args(["replay", "--url", &sink.url("/"), "--commit-every", "8"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sink.received().len() < 30 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let first_run = sink.received().len();
        let pending_after_kill = env.size() as usize;
        // At most one group (7 items, plus the one in flight) went out
        // without its done record.
        assert!(
            pending_after_kill + first_run <= 80 + 8,
            "{first_run} delivered, {pending_after_kill} still pending"
        );
        env.run(&["replay", "--url", &sink.url("/"), "--commit-every", "8"])
            .success();
        assert_eq!(env.size(), 0);
        let mut per_body: HashMap<Vec<u8>, usize> = HashMap::new();
        for r in sink.received() {
            *per_body.entry(r.body).or_default() += 1;
        }
        assert_eq!(per_body.len(), 80);
        let redelivered = per_body.values().filter(|n| **n > 1).count();
        assert!(redelivered <= 8, "{redelivered} redelivered");
    });
}

/// SPEC §4: an item whose attempts already reach `--max-attempts` (set by
/// an operator, or a lowered budget) is dead-lettered by the next replay
/// without another attempt, the reason saying so and keeping the last
/// error; the run exits 1. On every backend.
#[test]
fn an_item_at_its_budget_is_dead_lettered_without_another_attempt() {
    each_backend_and_postgres("an item at its budget", |env| {
        let sink = Sink::start(|_, _| Answer::Full(503, vec![], "{\"error\": \"busy\"}".into()));
        let tried = env.enqueue("tried");
        let fresh = env.enqueue("fresh");
        env.run(&["replay", "--url", &sink.url("/"), "--limit", "1"])
            .code(75);
        assert_eq!(sink.received().len(), 1);
        let before = item(env, tried)["last_error"].as_str().unwrap().to_string();
        env.run(&["attempts", &tried.to_string(), "--set", "2"])
            .success();
        env.run(&["attempts", &fresh.to_string(), "--set", "3"])
            .success();
        let a = env
            .run(&[
                "replay",
                "--url",
                &sink.url("/"),
                "--max-attempts",
                "2",
                "--ignore-backoff",
            ])
            .code(1);
        assert!(
            stdout(&a).starts_with("delivered 0, failed 0, dead-lettered 2"),
            "{}",
            stdout(&a)
        );
        assert_eq!(sink.received().len(), 1, "no further attempt");
        let dead = |id: u64| {
            json_of(
                &env.run(&["dlq", "show", &id.to_string(), "--json"])
                    .success(),
            )
        };
        let d = dead(tried);
        assert_eq!(d["attempts"], 2, "{d}");
        assert_eq!(
            d["last_error"],
            format!(
                "attempts (2) already reach --max-attempts 2; dead-lettered without another \
                 attempt (last error: {before})"
            )
        );
        let d = dead(fresh);
        assert_eq!(d["attempts"], 3, "{d}");
        assert_eq!(
            d["last_error"],
            "attempts (3) already reach --max-attempts 2; dead-lettered without another attempt"
        );
        assert!(
            stderr(&a).contains("already reach --max-attempts 2"),
            "{}",
            stderr(&a)
        );
    });
}

/// `--dry-run` says what the run would do: an item whose attempts
/// already reach `--max-attempts` would be dead-lettered without an
/// attempt, not attempted; the others would be attempted. Nothing
/// changes and nothing is sent. On every backend.
#[test]
fn a_dry_run_says_an_item_at_its_budget_would_be_dead_lettered() {
    each_backend_and_postgres("a dry run at the budget", |env| {
        let sink = Sink::always(200);
        let spent = env.enqueue("spent");
        let fresh = env.enqueue("fresh");
        env.run(&["attempts", &spent.to_string(), "--set", "3"])
            .success();
        let url = sink.url("/");
        let dry = ["replay", "--url", &url, "--max-attempts", "3", "--dry-run"];
        let a = env.run(&dry).success();
        assert_eq!(
            stdout(&a),
            "dry run: 1 would be attempted, 1 would be dead-lettered without an attempt, \
             not due 0, held 0\n"
        );
        let err = stderr(&a);
        assert!(
            err.contains(&format!(
                "item {spent}: would be dead-lettered: attempts (3) already reach --max-attempts 3\n"
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!("item {fresh}: would be attempted (attempt 1,")),
            "{err}"
        );
        assert!(
            !err.contains(&format!("item {spent}: would be attempted")),
            "{err}"
        );
        let mut json = dry.to_vec();
        json.push("--json");
        let r = json_of(&env.run(&json).success());
        assert_eq!(
            (r["would_attempt"].as_u64(), r["would_dead_letter"].as_u64()),
            (Some(1), Some(1)),
            "{r}"
        );
        assert!(sink.received().is_empty());
        assert_eq!(env.size(), 2);
        assert_eq!(item(env, spent)["attempts"], 3);
        env.run(&["dlq", "list"]).success().stdout("");
        // The real run does what the dry run said.
        let a = env
            .run(&["replay", "--url", &url, "--max-attempts", "3"])
            .code(1);
        assert!(
            stdout(&a).starts_with("delivered 1, failed 0, dead-lettered 1"),
            "{}",
            stdout(&a)
        );
        assert_eq!(sink.received().len(), 1);
    });
}

/// SPEC §4: one run attempts an item at most once — with
/// `--ignore-backoff`, with a backoff of zero, with `--concurrency` — on
/// every backend, PostgreSQL's leased replay included: an always-failing
/// item with `--max-attempts 2` fails in the first run (75) and is
/// dead-lettered in the second (1).
#[test]
fn one_run_attempts_an_item_at_most_once_on_every_backend() {
    each_backend_and_postgres("one attempt per run", |env| {
        let sink = Sink::always(500);
        let ids = [env.enqueue("a"), env.enqueue("b")];
        let runs: [&[&str]; 3] = [
            &["--ignore-backoff"],
            &["--backoff-base", "0s", "--backoff-max", "0s"],
            &["--ignore-backoff", "--concurrency", "2"],
        ];
        for (i, extra) in runs.iter().enumerate() {
            let url = sink.url("/");
            let mut args = vec!["replay", "--url", &url, "--max-attempts", "2"];
            args.extend_from_slice(extra);
            let received = sink.received().len();
            let a = env.run(&args).code(75);
            assert!(
                stdout(&a).starts_with("delivered 0, failed 2, dead-lettered 0"),
                "{extra:?}: {}",
                stdout(&a)
            );
            assert_eq!(sink.received().len(), received + 2, "{extra:?}");
            let a = env.run(&args).code(1);
            assert!(
                stdout(&a).starts_with("delivered 0, failed 0, dead-lettered 2"),
                "{extra:?}: {}",
                stdout(&a)
            );
            assert_eq!(sink.received().len(), received + 4, "{extra:?}");
            for id in ids {
                let d = json_of(
                    &env.run(&["dlq", "show", &id.to_string(), "--json"])
                        .success(),
                );
                assert_eq!(d["attempts"], 2, "{extra:?}: {d}");
            }
            if i + 1 < runs.len() {
                env.run(&["dlq", "requeue", "--all"]).success();
            }
        }
    });
}

/// SPEC §3: `list --due`, the due count of `stats` and a replay agree on
/// what is due now — not held, not backing off, not waiting behind an
/// earlier pending item of its ordering group (a held or backing-off head
/// holds its group back; a dead letter does not). On every backend.
#[test]
fn list_due_and_stats_are_what_replay_attempts() {
    each_backend_and_postgres("the due rule", |env| {
        let fail = Sink::always(500);
        let later = ["--backoff-base", "1h", "--backoff-max", "1h"];
        let add = |payload: &str, group: Option<&str>| -> u64 {
            let mut args = vec!["enqueue"];
            if let Some(g) = group {
                args.extend(["--group", g]);
            }
            args.extend(["--", payload]);
            parse_id(&env.run(&args).success().get_output().stdout)
        };
        // The head of group "dead" is rejected for good first.
        add("x1", Some("dead"));
        let reject = Sink::always(400);
        env.run(&["replay", "--url", &reject.url("/")]).code(1);
        let held_head = add("h1", Some("held"));
        let h2 = add("h2", Some("held"));
        let w1 = add("w1", Some("waiting"));
        let w2 = add("w2", Some("waiting"));
        let head = add("d1", Some("due"));
        let d2 = add("d2", Some("due"));
        let plain = add("p", None);
        let after_dead = add("x2", Some("dead"));
        let held = add("ph", None);
        env.run(&["hold", &held_head.to_string(), &held.to_string()])
            .success();
        // The head of group "waiting" fails and waits an hour.
        let fail_url = fail.url("/");
        let mut args = vec!["replay", "--url", &fail_url, "--limit", "1"];
        args.extend(later);
        env.run(&args).code(75);
        let bodies = |sink: &Sink| -> Vec<String> {
            sink.received()
                .iter()
                .map(|r| String::from_utf8_lossy(&r.body).into_owned())
                .collect()
        };
        assert_eq!(bodies(&fail), ["w1"]);
        let listed = |args: &[&str]| -> Vec<u64> {
            let mut all = vec!["--json", "list", "--due"];
            all.extend(args);
            ndjson(&env.run(&all).success().get_output().stdout)
                .iter()
                .map(|v| v["id"].as_u64().unwrap())
                .collect()
        };
        let due = vec![head, plain, after_dead];
        assert_eq!(listed(&[]), due);
        // The "next retry" column of `list` says the same: "due" for
        // exactly those, and for an item waiting behind the first pending
        // item of its group, that item — whatever its own retry time.
        let column: Vec<(u64, String)> = stdout(&env.run(&["list"]).success())
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[0].parse().unwrap(), f[4].to_string())
            })
            .collect();
        let shown_due: Vec<u64> = column
            .iter()
            .filter(|(_, r)| r == "due")
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(shown_due, due, "{column:?}");
        let shown = |id: u64| column.iter().find(|(i, _)| *i == id).unwrap().1.clone();
        assert_eq!(shown(h2), format!("behind #{held_head}"));
        assert_eq!(shown(w2), format!("behind #{w1}"));
        assert_eq!(shown(d2), format!("behind #{head}"));
        assert_eq!(shown(held_head), "held");
        assert!(shown(w1).starts_with("in "), "{}", shown(w1));
        let g = stdout(&env.run(&["list", "--group", "due"]).success());
        assert!(g.contains(&format!("\tbehind #{head}\t")), "{g}");
        assert_eq!(listed(&["--limit", "2"]), due[..2]);
        assert!(listed(&["--group", "held"]).is_empty());
        assert!(listed(&["--group", "waiting"]).is_empty());
        let stats = json_of(&env.run(&["stats", "--json"]).success());
        assert_eq!(stats["due"], due.len(), "{stats}");
        // A replay attempts exactly those.
        let mut args = vec!["replay", "--url", &fail_url];
        args.extend(later);
        let r = json_of(&env.run(&[&args[..], &["--json"]].concat()).code(75));
        assert_eq!(r["failed"], 3, "{r}");
        assert_eq!(bodies(&fail), ["w1", "d1", "p", "x2"]);
        assert!(listed(&[]).is_empty());
        let stats = json_of(&env.run(&["stats", "--json"]).success());
        assert_eq!(stats["due"], 0, "{stats}");
    });
}

/// A replay that fails tells why on stderr, one line for the first failed
/// item (with `-q` too: a cron mail must say why), while stdout keeps its
/// one summary line; `-v` tells every failure instead.
#[test]
fn a_failed_run_tells_the_first_failure_s_cause_on_stderr() {
    each_backend(|env| {
        let port = http_sink::quiet_port();
        let url = format!("http://127.0.0.1:{port}/");
        let first = env.enqueue("a");
        env.enqueue("b");
        for quiet in [&[][..], &["-q"][..]] {
            let mut args = quiet.to_vec();
            args.extend(["replay", "--url", &url, "--ignore-backoff"]);
            let a = env.run(&args).code(75);
            assert_eq!(
                stdout(&a),
                "delivered 0, failed 2, dead-lettered 0, not due 0, held 0\n"
            );
            assert_eq!(
                stderr(&a),
                format!(
                    "spool: item {first} failed: connection error: connection refused \
                     (127.0.0.1:{port})\n"
                ),
                "{quiet:?}"
            );
        }
        let a = env
            .run(&["-v", "replay", "--url", &url, "--ignore-backoff"])
            .code(75);
        let err = stderr(&a);
        assert_eq!(
            err.lines()
                .filter(|l| l.contains("failed: connection"))
                .count(),
            2,
            "{err}"
        );
        // --exec: the command's last stderr lines.
        let a = env
            .run(&[
                "-q",
                "replay",
                "--ignore-backoff",
                "--exec",
                "sh -c 'echo upstream said no >&2; exit 3'",
            ])
            .code(75);
        assert_eq!(
            stderr(&a),
            format!("spool: item {first} failed: command exited with 3: upstream said no\n")
        );
        // The first dead letter is told as well, also with -q.
        let a = env
            .run(&[
                "-q",
                "replay",
                "--ignore-backoff",
                "--exec",
                "sh -c 'echo gone >&2; exit 65'",
            ])
            .code(1);
        assert_eq!(
            stderr(&a),
            format!(
                "spool: item {first}: dead-lettered after attempt 5 (rejected by the target): \
                 command rejected the item (exit 65): gone\n"
            )
        );
    });
}
