//! Operating `spool serve`: stopping with requests in flight, one server
//! per NDJSON spool, group commit, slow clients, and the command line's
//! refusals and exit codes.

mod cli_common;
mod serve_common;

use cli_common::*;
use serve_common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

/// Read from `s` until `needle` has arrived; panics on close or timeout.
fn read_until(s: &mut TcpStream, needle: &str) -> String {
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let n = s.read(&mut buf).expect("read");
        assert!(
            n > 0,
            "closed before {needle:?}: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Poll `f` until it is true; panics after [`DEADLINE`].
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn sigterm_finishes_and_commits_the_requests_in_flight() {
    each_backend(|env| {
        let s = Serve::start(env, &[]);
        // An idle kept-alive connection must not hold the stop up.
        let a = agent();
        assert_eq!(post(&a, &s.url("/v1/items"), &[], b"before").status, 201);
        // Four requests whose handlers are running: each asked for its
        // body (100 Continue) and has not got it yet.
        let mut streams: Vec<TcpStream> = (0..4)
            .map(|i| {
                let mut t = TcpStream::connect(&s.addr).unwrap();
                write!(
                    t,
                    "POST /v1/items HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\
                     Idempotency-Key: in-flight-{i}\r\nExpect: 100-continue\r\n\r\n"
                )
                .unwrap();
                read_until(&mut t, "100 Continue\r\n\r\n");
                t
            })
            .collect();
        s.sigterm();
        eventually("the stop", || s.stderr().contains("stopping"));
        assert!(
            TcpStream::connect(&s.addr).is_err(),
            "no new connections after the stop"
        );
        for (i, t) in streams.iter_mut().enumerate() {
            write!(t, "flight-{i}").unwrap();
            let answer = read_until(t, "}");
            assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
        }
        let mut s = s;
        let stopped = s.wait();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        assert_eq!(
            payloads(env),
            ["before", "flight-0", "flight-1", "flight-2", "flight-3"]
        );
    });
}

#[test]
fn one_server_per_ndjson_spool_many_per_sqlite_spool() {
    let env = Env::new("spool.ndjson");
    let first = Serve::start(&env, &[]);
    let a = env.run(&["serve", "--listen", "127.0.0.1:0"]);
    let a = assert_error(a, 75, &env.path);
    let err = stderr(&a);
    assert!(err.contains("served by another process"), "{err}");
    assert!(err.contains(&format!("pid {}", first.pid())), "{err}");
    let lock = env.side(".serve.lock");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&lock).unwrap().permissions().mode() & 0o077,
        0,
        "the lock file is private"
    );
    assert_eq!(first.stop().code, Some(0));
    // Released at exit: a new server starts.
    Serve::start(&env, &[]).stop();

    let env = Env::new("spool.db");
    let one = Serve::start(&env, &[]);
    let two = Serve::start(&env, &[]);
    let a = agent();
    for (i, s) in [&one, &two, &one, &two].iter().enumerate() {
        let r = post(&a, &s.url("/v1/items"), &[], format!("item {i}").as_bytes());
        assert_eq!(r.status, 201, "{}", r.body);
    }
    // Both receive pushes from one client consistently.
    let r = post(
        &a,
        &one.url("/v1/push"),
        &[],
        &items_body("c", 0, 1, &["p1"]),
    );
    assert_eq!(r.json()["last_seq"], 1);
    let r = post(
        &a,
        &two.url("/v1/push"),
        &[],
        &items_body("c", 1, 1, &["p1", "p2"]),
    );
    assert_eq!(
        (&r.json()["last_seq"], &r.json()["duplicates"]),
        (&2.into(), &1.into())
    );
    assert_eq!(one.stop().code, Some(0));
    assert_eq!(two.stop().code, Some(0));
    assert_eq!(
        payloads(&env),
        ["item 0", "item 1", "item 2", "item 3", "p1", "p2"]
    );
}

/// A metric's value from `/metrics` text.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

#[test]
fn concurrent_requests_share_commits() {
    let env = Env::new("spool.db");
    // Every commit takes at least 50 ms, like a slow disk: requests that
    // arrive meanwhile must wait for the next commit, and share it.
    let s = Serve::start(&env, &["--commit-delay", "50ms"]);
    const CLIENTS: usize = 16;
    const EACH: usize = 8;
    let barrier = std::sync::Barrier::new(CLIENTS);
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (s, barrier) = (&s, &barrier);
            scope.spawn(move || {
                let a = agent();
                barrier.wait();
                for i in 0..EACH {
                    let r = post(&a, &s.url("/v1/items"), &[], format!("{c}-{i}").as_bytes());
                    assert_eq!(r.status, 201, "{}", r.body);
                }
            });
        }
    });
    let text = get(&agent(), &s.url("/metrics"), &[]).body;
    let requests = metric(&text, "spool_serve_committed_requests_total");
    let commits = metric(&text, "spool_serve_commits_total");
    let n = (CLIENTS * EACH) as u64;
    assert_eq!(requests, n);
    assert!(
        commits * 2 < n,
        "{commits} commits for {n} concurrent requests: no group commit"
    );
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped
            .stderr
            .contains(&format!("{commits} commit(s) for {n} request(s)")),
        "{}",
        stopped.stderr
    );
    assert_eq!(env.size(), n);
}

#[test]
fn slow_clients_are_cut_off() {
    let env = Env::new("spool.db");
    let s = Serve::start(
        &env,
        &["--header-timeout", "300ms", "--request-timeout", "300ms"],
    );
    // A head that never ends, and an idle connection: closed.
    for head in [&b"POST /v1/items HTTP/1.1\r\nHost: x\r\n"[..], b""] {
        let mut t = TcpStream::connect(&s.addr).unwrap();
        t.set_read_timeout(Some(DEADLINE)).unwrap();
        t.write_all(head).unwrap();
        let mut out = Vec::new();
        t.read_to_end(&mut out)
            .expect("the server closes the connection (not the test's timeout)");
    }
    // A body that stops halfway: 408.
    let mut t = TcpStream::connect(&s.addr).unwrap();
    t.write_all(b"POST /v1/items HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nten bytes!")
        .unwrap();
    let answer = read_until(&mut t, "}");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(get(&agent(), &s.url("/healthz"), &[]).status, 200);
    assert_eq!(s.stop().code, Some(0));
    assert_eq!(env.size(), 0);
}

#[test]
fn a_failed_commit_is_answered_500_and_commits_nothing() {
    let env = Env::new("spool.ndjson");
    let s = Serve::start(&env, &[]);
    let a = agent();
    assert_eq!(post(&a, &s.url("/v1/items"), &[], b"stored").status, 201);
    // Another writer damages the file: the server's next transaction
    // finds it and fails.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&env.path)
        .unwrap();
    f.write_all(b"{\"op\":\"garbage\"}\n").unwrap();
    let r = post(&a, &s.url("/v1/items"), &[], b"never-stored");
    assert_eq!(r.status, 500, "{}", r.body);
    assert!(r.error().contains("could not store"), "{}", r.body);
    let r = get(&a, &s.url("/healthz"), &[]);
    assert_eq!(r.status, 503, "{}", r.body);
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("nothing of it was committed"),
        "{}",
        stopped.stderr
    );
    assert!(
        stopped.stderr.contains("corrupt spool at line 2"),
        "{}",
        stopped.stderr
    );
    let bytes = std::fs::read_to_string(&env.path).unwrap();
    assert!(
        bytes.contains("stored") && !bytes.contains("never-stored"),
        "{bytes}"
    );
}

#[test]
fn refusals_and_exit_codes() {
    let env = Env::new("spool.db");
    let p = |s: &str| env.dir.path().join(s).to_string_lossy().into_owned();
    // Non-loopback without tokens: 64, and no spool created.
    let a = assert_error(env.run(&["serve", "--listen", "0.0.0.0:0"]), 64, &env.path);
    assert!(stderr(&a).contains("--token-file"), "{}", stderr(&a));
    assert!(!env.path.exists());
    let a = env.run(&["serve", "--listen", "not an address"]).code(64);
    assert!(stderr(&a).contains("not an address"));
    env.run(&["serve", "--tls-cert", "c.pem"]).code(64);
    // Files that are missing (66) or not what they should be (65).
    assert_error(
        env.run(&["serve", "--token-file", &p("missing")]),
        66,
        &env.path,
    );
    write_file(env.dir.path(), "empty-tokens", "# nothing\n");
    let a = assert_error(
        env.run(&["serve", "--token-file", &p("empty-tokens")]),
        65,
        &env.path,
    );
    assert!(stderr(&a).contains("holds no token"), "{}", stderr(&a));
    write_file(env.dir.path(), "junk.pem", "not pem");
    assert_error(
        env.run(&[
            "serve",
            "--tls-cert",
            &p("missing.pem"),
            "--tls-key",
            &p("junk.pem"),
        ]),
        66,
        &env.path,
    );
    assert_error(
        env.run(&[
            "serve",
            "--tls-cert",
            &p("junk.pem"),
            "--tls-key",
            &p("junk.pem"),
        ]),
        65,
        &env.path,
    );
    assert!(!env.path.exists(), "no spool is created by a refused serve");
    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let a = assert_error(env.run(&["serve", "--listen", &addr]), 74, &env.path);
    assert!(stderr(&a).contains(&addr), "{}", stderr(&a));
    // --insecure-no-auth allows it (talk to it on loopback only).
    let s = Serve::start(&env, &["--listen", "0.0.0.0:0", "--insecure-no-auth"]);
    let port = s.addr.rsplit(':').next().unwrap();
    let r = get(&agent(), &format!("http://127.0.0.1:{port}/healthz"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(s.stop().code, Some(0));
    // `spool clients`: a spool without clients; a missing spool.
    let a = env.run(&["clients"]).success().stdout("");
    assert!(stderr(&a).contains("no client"), "{}", stderr(&a));
    env.run(&["clients", "--json"]).success().stdout("");
    let missing = Env::new("missing.db");
    assert_error(missing.run(&["clients"]), 66, &missing.path);
}
