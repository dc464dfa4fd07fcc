//! Push end to end: `spool replay --push` from an edge spool to a real
//! `spool serve`, through a fault-injecting TCP proxy that drops
//! requests, loses answers after the server acted on them, resets
//! connections in the middle of a body and delays traffic (seeded, so a
//! failure can be replayed). Whatever the network does, and when either
//! process is killed with SIGKILL, the central spool ends up with every
//! item exactly once and the edge's dead-letter set with exactly the
//! items the receiver refused.

mod cli_common;
mod fault_proxy;
mod serve_common;

use cli_common::*;
use fault_proxy::{Mix, Proxy};
use serve_common::Serve;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Payloads over this are refused by the receiver (`--max-payload`).
const MAX: usize = 120;

/// The edge's items: mostly small (delivered), one in twenty too large
/// (refused), every payload distinct, a third of them keyed.
fn fill_edge(edge: &Env, n: usize) -> (Vec<String>, Vec<String>) {
    let mut ok = Vec::new();
    let mut refused = Vec::new();
    let mut lines = String::new();
    for i in 0..n {
        let payload = if i % 20 == 7 {
            format!("large {i} {}", "x".repeat(MAX))
        } else {
            format!("item {i}")
        };
        let key = if i % 3 == 0 {
            format!("k-{i}")
        } else {
            String::new()
        };
        lines.push_str(&serde_json::json!({"payload": payload, "key": key}).to_string());
        lines.push('\n');
        if payload.len() > MAX {
            refused.push(payload);
        } else {
            ok.push(payload);
        }
    }
    edge.run_in(&["enqueue", "--ndjson"], lines).success();
    (ok, refused)
}

/// One `replay --push` run of the edge through `url` (with the default
/// `--pipeline`); its exit code.
fn push_once(edge: &Env, url: &str) -> i32 {
    push_once_with(edge, url, &[])
}

/// One `replay --push` run with `extra` arguments; its exit code.
fn push_once_with(edge: &Env, url: &str, extra: &[&str]) -> i32 {
    let out = edge
        .cmd()
        .args([
            "replay",
            "--push",
            url,
            "--batch",
            "13",
            "--timeout",
            "3s",
            "--max-attempts",
            "4",
            "--backoff-base",
            "10ms",
            "--backoff-max",
            "40ms",
        ])
        .args(extra)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(
        [0, 1, 75].contains(&code),
        "unexpected exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    code
}

/// Push until the edge is empty (bounded).
fn push_until_empty(edge: &Env, url: &str) {
    push_until_empty_with(edge, url, &[]);
}

/// Push with `extra` arguments until the edge is empty (bounded).
fn push_until_empty_with(edge: &Env, url: &str, extra: &[&str]) {
    let start = Instant::now();
    let mut runs = 0;
    while edge.size() > 0 {
        runs += 1;
        assert!(
            runs < 200 && start.elapsed() < Duration::from_secs(120),
            "the edge did not empty: {} left after {runs} runs",
            edge.size()
        );
        push_once_with(edge, url, extra);
    }
}

/// The central spool's payloads, counted.
fn central_payloads(central: &Env) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for v in central.drain() {
        *m.entry(v["payload"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    m
}

/// The edge's dead letters' payloads.
fn edge_dead(edge: &Env) -> Vec<String> {
    let out = edge.run(&["dlq", "export"]).success();
    let mut v: Vec<String> = ndjson(&out.get_output().stdout)
        .iter()
        .map(|d| d["payload"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn check_exactly_once(central: &Env, edge: &Env, ok: &[String], refused: &[String]) {
    let got = central_payloads(central);
    let want: BTreeMap<String, usize> = ok.iter().map(|p| (p.clone(), 1)).collect();
    assert_eq!(got, want, "every delivered item exactly once at the center");
    let mut refused = refused.to_vec();
    refused.sort();
    assert_eq!(
        edge_dead(edge),
        refused,
        "exactly the refused items are dead at the edge"
    );
    central.run(&["verify"]).success();
    edge.run(&["verify"]).success();
}

fn start_central(central: &Env) -> Serve {
    Serve::start(central, &["--max-payload", &MAX.to_string()])
}

fn addr(s: &Serve) -> SocketAddr {
    s.addr.parse().unwrap()
}

#[test]
fn exactly_once_through_a_network_that_loses_and_breaks_things() {
    for (edge_file, central_file, seed) in [
        ("edge.db", "central.db", 11),
        ("edge.ndjson", "central.ndjson", 12),
    ] {
        let edge = Env::new(edge_file);
        let central = Env::new(central_file);
        let server = start_central(&central);
        let proxy = Proxy::start(
            addr(&server),
            Mix {
                pass: 3,
                drop_request: 2,
                drop_response: 2,
                reset_mid_body: 2,
                delay: 1,
            },
            seed,
        );
        let (ok, refused) = fill_edge(&edge, 300);
        push_until_empty(&edge, &proxy.url("/v1/push"));
        let faults = proxy.faults();
        for kind in ["DropRequest", "DropResponse", "ResetMidBody"] {
            assert!(
                faults.iter().any(|f| format!("{f:?}").starts_with(kind)),
                "seed {seed} never produced {kind}: {faults:?}"
            );
        }
        let stopped = server.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        check_exactly_once(&central, &edge, &ok, &refused);
    }
}

#[test]
fn exactly_once_with_a_deep_pipeline_through_a_network_that_loses_and_breaks_things() {
    let edge = Env::new("edge.ndjson");
    let central = Env::new("central.db");
    // Slow commits keep several requests of the stream in flight at once.
    let server = Serve::start(
        &central,
        &["--max-payload", &MAX.to_string(), "--commit-delay", "5ms"],
    );
    let proxy = Proxy::start(
        addr(&server),
        Mix {
            pass: 4,
            drop_request: 1,
            drop_response: 1,
            reset_mid_body: 1,
            delay: 2,
        },
        21,
    );
    let (ok, refused) = fill_edge(&edge, 300);
    push_until_empty_with(&edge, &proxy.url("/v1/push"), &["--pipeline", "4"]);
    let stopped = server.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    check_exactly_once(&central, &edge, &ok, &refused);
}

#[test]
fn exactly_once_when_the_server_is_killed_mid_stream() {
    let edge = Env::new("edge.db");
    let central = Env::new("central.db");
    let (ok, refused) = fill_edge(&edge, 400);
    // Slow commits, so that the server is killed with requests in flight.
    let mut server = Serve::start(
        &central,
        &["--max-payload", &MAX.to_string(), "--commit-delay", "20ms"],
    );
    let proxy = Proxy::start(addr(&server), Mix::CLEAN, 1);
    let url = proxy.url("/v1/push");
    let pusher = spawn_pusher(&edge, &url);
    // Kill the server once part of the stream has been applied.
    let start = Instant::now();
    while central_size(&central) < 50 {
        assert!(start.elapsed() < Duration::from_secs(60), "nothing arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(server.pid() as libc::pid_t, libc::SIGKILL) };
    let _ = server.wait();
    // A new server on the same spool; the proxy sends traffic to it.
    let server = start_central(&central);
    proxy.set_upstream(addr(&server));
    let mut pusher = pusher;
    let _ = pusher.wait();
    push_until_empty(&edge, &url);
    drop(server);
    check_exactly_once(&central, &edge, &ok, &refused);
}

#[test]
fn exactly_once_when_the_sender_is_killed_between_send_and_ack() {
    let edge = Env::new("edge.ndjson");
    let central = Env::new("central.db");
    let (ok, refused) = fill_edge(&edge, 60);
    // The server holds each commit long enough for the sender to be
    // killed after its request went out and before the answer came.
    let server = Serve::start(
        &central,
        &["--max-payload", &MAX.to_string(), "--commit-delay", "300ms"],
    );
    let proxy = Proxy::start(addr(&server), Mix::CLEAN, 2);
    let url = proxy.url("/v1/push");
    for round in 0..3 {
        let before = proxy.connections();
        let mut c = edge.std_cmd();
        c.args(["replay", "--push", &url, "--batch", "7"]);
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut pusher = c.spawn().unwrap();
        let start = Instant::now();
        while proxy.connections() == before {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "round {round}: no request"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // The request is on its way (the server sits on it for 300 ms).
        std::thread::sleep(Duration::from_millis(50));
        let _ = pusher.kill();
        let _ = pusher.wait();
    }
    push_until_empty(&edge, &url);
    let stopped = server.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    check_exactly_once(&central, &edge, &ok, &refused);
}

/// Several receivers over one PostgreSQL spool (SPEC §7): the edge goes
/// to one instance and then another, each behind a proxy that loses
/// requests and answers, and one instance is killed with requests in
/// flight (the edge goes on with another, as behind a load balancer).
#[test]
fn exactly_once_through_several_receivers_over_postgresql() {
    let Some(central) = pg_env("exactly_once_through_several_receivers_over_postgresql") else {
        return;
    };
    central.run(&["init"]).success();
    let edge = Env::new("edge.db");
    let (ok, refused) = fill_edge(&edge, 300);
    let mix = Mix {
        pass: 4,
        drop_request: 1,
        drop_response: 2,
        reset_mid_body: 1,
        delay: 1,
    };
    let mut a = Serve::start(
        &central,
        &["--max-payload", &MAX.to_string(), "--commit-delay", "20ms"],
    );
    let b = start_central(&central);
    let (pa, pb) = (
        Proxy::start(addr(&a), mix, 21),
        Proxy::start(addr(&b), mix, 22),
    );
    // A stream through instance A, killed once part of it is applied.
    let pusher = spawn_pusher(&edge, &pa.url("/v1/push"));
    let start = Instant::now();
    while central_size(&central) < 40 {
        assert!(start.elapsed() < Duration::from_secs(60), "nothing arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGKILL) };
    let _ = a.wait();
    let mut pusher = pusher;
    let _ = pusher.kill();
    let _ = pusher.wait();
    // The rest through B and a new A, alternately.
    let a = start_central(&central);
    pa.set_upstream(addr(&a));
    let start = Instant::now();
    let mut runs = 0;
    while edge.size() > 0 {
        runs += 1;
        assert!(
            runs < 300 && start.elapsed() < Duration::from_secs(150),
            "the edge did not empty: {} left after {runs} runs",
            edge.size()
        );
        let proxy = if runs % 2 == 0 { &pa } else { &pb };
        push_once(&edge, &proxy.url("/v1/push"));
    }
    let faults: Vec<String> = (pa.faults().into_iter().chain(pb.faults()))
        .map(|f| format!("{f:?}"))
        .collect();
    assert!(
        faults.iter().any(|f| f.starts_with("DropResponse")),
        "no answer was lost after a commit: {faults:?}"
    );
    for s in [a, b] {
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    }
    check_exactly_once(&central, &edge, &ok, &refused);
}

/// `replay --push URL` of the edge in small batches with a patient
/// retry budget, running in the background.
fn spawn_pusher(edge: &Env, url: &str) -> std::process::Child {
    let mut c = edge.std_cmd();
    c.args([
        "replay",
        "--push",
        url,
        "--batch",
        "5",
        "--max-attempts",
        "50",
        "--backoff-base",
        "20ms",
        "--backoff-max",
        "100ms",
    ]);
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    c.spawn().unwrap()
}

fn central_size(central: &Env) -> u64 {
    let out = central.run(&["size"]);
    let out = out.get_output();
    if out.status.success() {
        parse_id(&out.stdout)
    } else {
        0
    }
}
