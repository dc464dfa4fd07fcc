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
    // A body limit over the memory budget could never be served.
    let a = assert_error(
        env.run(&["serve", "--max-body", "2MiB", "--memory-budget", "1MiB"]),
        64,
        &env.path,
    );
    assert!(
        stderr(&a).contains("over the memory budget"),
        "{}",
        stderr(&a)
    );
    assert!(!env.path.exists(), "no spool is created by a refused serve");
    // --insecure-no-auth allows it (talk to it on loopback only), with a
    // warning.
    let s = Serve::start(&env, &["--listen", "0.0.0.0:0", "--insecure-no-auth"]);
    let port = s.addr.rsplit(':').next().unwrap();
    let r = get(&agent(), &format!("http://127.0.0.1:{port}/healthz"), &[]);
    assert_eq!(r.status, 200);
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0));
    assert!(
        stopped.stderr.contains(
            "spool: warning: serving 0.0.0.0:0 without authentication (--insecure-no-auth)"
        ),
        "{}",
        stopped.stderr
    );
    // Loopback without tokens is the safe default: no warning.
    let stopped = Serve::start(&env, &[]).stop();
    assert!(!stopped.stderr.contains("warning"), "{}", stopped.stderr);
    // `spool clients`: a spool without clients; a missing spool.
    let a = env.run(&["clients"]).success().stdout("");
    assert!(stderr(&a).contains("no client"), "{}", stderr(&a));
    env.run(&["clients", "--json"]).success().stdout("");
    let missing = Env::new("missing.db");
    assert_error(missing.run(&["clients"]), 66, &missing.path);
}

#[test]
fn a_busy_port_leaves_no_spool_behind() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    each_backend(|env| {
        let a = assert_error(env.run(&["serve", "--listen", &addr]), 74, &env.path);
        let err = stderr(&a);
        assert!(err.contains(&addr), "{err}");
        assert!(err.contains("nothing was created"), "{err}");
        assert_eq!(
            env.files(),
            Vec::<String>::new(),
            "no spool, -wal, -shm, .serve.lock or index"
        );
        // An existing spool is left as it was.
        env.enqueue("kept");
        let before = env.snapshot();
        assert_error(env.run(&["serve", "--listen", &addr]), 74, &env.path);
        assert_eq!(env.snapshot(), before);
    });
}

const TOKEN: &str = "tok-3f7c0d9be1c24b7e9a55";

#[test]
fn configuration_traps_refuse_to_start_with_78() {
    use std::os::unix::fs::symlink;
    let env = Env::new("spool.db");
    let p = |s: &str| env.dir.path().join(s).to_string_lossy().into_owned();
    // systemd passed credentials, but not the token file: serving without
    // tokens would be serving without the authentication the unit meant.
    let creds = tempfile::tempdir().unwrap();
    let file = creds.path().join("spool-serve-tokens");
    let with_creds = |want: &str| {
        let a = env
            .cmd()
            .env("CREDENTIALS_DIRECTORY", creds.path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .write_stdin("")
            .assert();
        let a = assert_error(a, 78, &env.path);
        let err = stderr(&a);
        assert!(
            err.contains("$CREDENTIALS_DIRECTORY is set")
                && err.contains(&file.display().to_string())
                && err.contains(want),
            "{err}"
        );
        assert!(
            err.contains("\nhint: check the unit's LoadCredential=spool-serve-tokens:FILE"),
            "{err}"
        );
    };
    with_creds("it does not exist");
    symlink(creds.path().join("gone"), &file).unwrap();
    with_creds("it is a symbolic link to nothing");
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    with_creds("it is a directory");
    // --token-file wins over the credentials directory.
    std::fs::remove_dir(&file).unwrap();
    write_file(env.dir.path(), "tokens", &format!("{TOKEN}\n"));
    let s = Serve::start_with(&env, &["--token-file", &p("tokens")], |c| {
        c.env("CREDENTIALS_DIRECTORY", creds.path());
    });
    assert_eq!(s.stop().code, Some(0));
    std::fs::remove_file(&env.path).unwrap();
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(env.side(side));
    }

    // A token anyone could guess.
    write_file(env.dir.path(), "short", "# the ops team\nq!z\n");
    let a = assert_error(
        env.run(&["serve", "--token-file", &p("short")]),
        78,
        &env.path,
    );
    let err = stderr(&a);
    assert!(
        err.contains(&format!(
            "the token file {}, line 2: the token is 3 character(s) long; a token must have at \
             least 16",
            p("short")
        )),
        "{err}"
    );
    assert!(
        err.contains("\nhint: generate tokens with `openssl rand -hex 32`"),
        "{err}"
    );
    assert!(!err.contains("q!z"), "the token in an error: {err}");

    // One token on two lines: only one line's globs could apply.
    write_file(
        env.dir.path(),
        "twice",
        &format!("{TOKEN} edge-*\n\n{TOKEN} site-*\n"),
    );
    let a = assert_error(
        env.run(&["serve", "--token-file", &p("twice")]),
        78,
        &env.path,
    );
    let err = stderr(&a);
    assert!(err.contains("line 3 repeats the token of line 1"), "{err}");
    assert!(err.contains("\nhint: put the token on one line"), "{err}");
    assert!(!err.contains(TOKEN), "the token in an error: {err}");
    assert!(!env.path.exists(), "no spool is created by a refused serve");
}

#[test]
fn a_loose_token_file_is_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("spool.db");
    let file = write_file(env.dir.path(), "tokens", &format!("{TOKEN}\n"));
    let f = file.to_str().unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stopped = Serve::start(&env, &["--token-file", f]).stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains(&format!(
            "spool: warning: the token file {f} is readable by group and others (mode 0644)"
        )) && stopped.stderr.contains("chmod 600"),
        "{}",
        stopped.stderr
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stopped = Serve::start(&env, &["--token-file", f]).stop();
    assert!(!stopped.stderr.contains("warning"), "{}", stopped.stderr);
}

/// Open `n` idle connections from `from`; each is accepted before the
/// next (the server answers a `HEAD /healthz` on it first).
fn idle_connections(s: &Serve, from: &str, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut t = connect_from(from, &s.addr);
            t.write_all(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            read_until(&mut t, "\r\n\r\n");
            t
        })
        .collect()
}

/// True when the server closed `t` (EOF or reset), reading at most
/// until the deadline.
fn closed_by_server(t: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(t.read(&mut buf), Ok(0) | Err(_))
}

const HEALTH: &str = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

#[test]
fn one_peer_cannot_take_every_connection() {
    let env = Env::new("spool.db");
    // Idle connections are not timed out here: only the limits act.
    let s = Serve::start(
        &env,
        &[
            "-v",
            "--max-connections-per-peer",
            "2",
            "--header-timeout",
            "10m",
        ],
    );
    let mut mine = idle_connections(&s, "127.0.0.1", 2);
    // A third from the same address is closed at once.
    let mut third = connect_from("127.0.0.1", &s.addr);
    assert!(closed_by_server(&mut third));
    // Another peer is served meanwhile.
    let answer = request_on(connect_from("127.0.0.2", &s.addr), HEALTH);
    assert_eq!(raw_status(&answer), 200, "{answer}");
    // A slot given back is a slot to use again.
    drop(mine.pop());
    eventually("a freed slot", || {
        raw_status(&request_on(connect_from("127.0.0.1", &s.addr), HEALTH)) == 200
    });
    drop(mine);
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("connection from 127.0.0.1:")
            && stopped
                .stderr
                .contains("closed at once: 2 connections from this address are open already"),
        "{}",
        stopped.stderr
    );
}

#[test]
fn idle_connections_make_room_after_the_idle_timeout() {
    let env = Env::new("spool.db");
    let s = Serve::start(
        &env,
        &[
            "--max-connections",
            "3",
            "--max-connections-per-peer",
            "2",
            "--header-timeout",
            "300ms",
        ],
    );
    // Every slot taken by idle kept-alive connections.
    let mut idle = idle_connections(&s, "127.0.0.1", 2);
    idle.extend(idle_connections(&s, "127.0.0.2", 1));
    // A new peer waits in the backlog until the idle ones time out, then
    // is served.
    let answer = request_on(connect_from("127.0.0.3", &s.addr), HEALTH);
    assert_eq!(raw_status(&answer), 200, "{answer}");
    for t in &mut idle {
        assert!(closed_by_server(t), "an idle connection was closed");
    }
    assert_eq!(s.stop().code, Some(0));
}

/// Make `n` push clients in `env`'s spool, in one transaction, through
/// the library.
fn make_clients(env: &Env, n: u64) {
    use spool::push::receiver::{apply_push, ReceiveLimits};
    use spool::push::wire::{Entry, PushRequest};
    let q = env.lib(spool::OpenMode::Create);
    q.receive(&mut |txn| {
        for i in 0..n {
            let req = PushRequest {
                client_id: format!("client-{i:06}"),
                acked: 0,
                entries: vec![Entry::Skip { seq: 1 }],
            };
            apply_push(txn, &req, &ReceiveLimits::default())?;
        }
        Ok(())
    })
    .unwrap();
}

#[test]
fn metrics_need_a_token_and_cost_one_snapshot_a_second_however_many_clients() {
    for clients in [10u64, 100_000] {
        let env = Env::new("spool.db");
        make_clients(&env, clients);
        let file = write_file(env.dir.path(), "tokens", &format!("{TOKEN}\n"));
        let s = Serve::start(&env, &["--token-file", file.to_str().unwrap()]);
        let a = agent();
        let bearer = format!("Bearer {TOKEN}");
        let auth = [("Authorization", bearer.as_str())];
        // Without a token: 401, and nothing computed for it.
        let r = get(&a, &s.url("/metrics"), &[]);
        assert_eq!(r.status, 401, "{}", r.body);
        assert!(!r.body.contains("spool_depth"), "{}", r.body);
        // /healthz needs none (load balancers).
        assert_eq!(get(&a, &s.url("/healthz"), &[]).status, 200);
        // Eight clients scraping as fast as they can: every answer comes
        // from a snapshot computed at most once a second.
        let start = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let a = agent();
                    for _ in 0..25 {
                        let r = get(&a, &s.url("/metrics"), &auth);
                        assert_eq!(r.status, 200, "{}", r.body);
                        assert_eq!(metric(&r.body, "spool_serve_clients"), clients);
                    }
                });
            }
        });
        let seconds = start.elapsed().as_secs();
        let text = get(&a, &s.url("/metrics"), &auth).body;
        let snapshots = metric(&text, "spool_serve_snapshots_total");
        assert!(
            snapshots <= seconds + 2,
            "{snapshots} snapshots for 200 scrapes in {seconds} whole second(s), {clients} clients"
        );
        let requests: u64 = text
            .lines()
            .filter(|l| l.starts_with("spool_serve_requests_total{") && l.contains("\"metrics\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(requests, 201, "{text}");
        assert_eq!(s.stop().code, Some(0));
    }
}

/// Through the library, a memory spool (which has no second handle) is
/// served too: its snapshot is taken by the writer thread.
#[test]
fn a_memory_spool_is_served_through_the_library() {
    use spool::serve::{ServeEvent, ServeOptions, ServeStop, Server};
    use std::sync::Arc;
    let spool = spool::Spool::memory(&spool::OpenOptions::default());
    let opts = ServeOptions {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..ServeOptions::default()
    };
    let listening = Server::listen(opts).unwrap();
    let addr = listening.local_addr();
    let server = listening.attach(spool).unwrap();
    let stop = ServeStop::new();
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || server.run(&stop, Arc::new(|_: &ServeEvent<'_>| {})))
    };
    let a = agent();
    let base = format!("http://{addr}");
    let r = post(&a, &format!("{base}/v1/items"), &[], b"in memory");
    assert_eq!(r.status, 201, "{}", r.body);
    let r = get(&a, &format!("{base}/metrics"), &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(metric(&r.body, "spool_depth"), 1);
    assert_eq!(metric(&r.body, "spool_serve_snapshots_total"), 1);
    let r = get(&a, &format!("{base}/healthz"), &[]);
    assert_eq!(r.json()["depth"], 1);
    stop.stop();
    let report = running.join().unwrap().unwrap();
    assert_eq!(report.counters.items_stored, 1);
    assert_eq!(report.counters.snapshots, 1, "/healthz used the snapshot");
}
