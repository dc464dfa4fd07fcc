//! `spool watch` end to end: the real binary as a daemon, real spools, a
//! TCP listener on 127.0.0.1 that the test turns off and on as the
//! probed link, a real HTTP sink (or a real `spool serve` receiver, for
//! `--push`) as the target, real hook commands, real signals. Waits are bounded polls on observable effects (the sink's
//! record, the hooks file, the spool), never fixed sleeps that a test
//! relies on for correctness — except where a test asserts that nothing
//! happens for a while.

mod cli_common;
mod http_sink;
mod serve_common;

use cli_common::*;
use http_sink::{Answer, Sink};
use serve_common::Serve;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Poll `cond` every 10 ms until it holds or `limit` passes.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The probed "link": a listener on a fixed 127.0.0.1 port. Off means
/// no socket (connections are refused); on means a socket whose
/// connections are accepted and dropped.
struct Link {
    port: u16,
    on: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl Link {
    /// A port that is off, and that no other test can take while it is.
    fn off_port() -> Link {
        Link {
            port: http_sink::quiet_port(),
            on: None,
        }
    }

    fn up() -> Link {
        let mut l = Link::off_port();
        l.turn_on();
        l
    }

    fn probe(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    fn turn_on(&mut self) {
        if self.on.is_some() {
            return;
        }
        let mut listener = None;
        let ok = wait_until(Duration::from_secs(5), || {
            listener = TcpListener::bind(("127.0.0.1", self.port)).ok();
            listener.is_some()
        });
        assert!(ok, "could not bind port {} again", self.port);
        let listener = listener.unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let t = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((s, _)) => drop(s),
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        self.on = Some((stop, t));
    }

    fn turn_off(&mut self) {
        if let Some((stop, t)) = self.on.take() {
            stop.store(true, Ordering::SeqCst);
            t.join().unwrap();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.turn_off();
    }
}

/// A running `spool watch`, its stderr in a file.
struct Daemon {
    child: Option<Child>,
    log: PathBuf,
}

impl Daemon {
    fn start(env: &Env, args: &[&str]) -> Daemon {
        let log = env.dir.path().join(format!(
            "watch-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let child = env
            .std_cmd()
            .arg("watch")
            .args(args)
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn spool watch");
        Daemon {
            child: Some(child),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().unwrap().id() as i32;
        // SAFETY: kill only sends a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }

    /// Send SIGTERM and wait (bounded) for the exit.
    fn stop(mut self) -> (ExitStatus, String) {
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().unwrap();
        let mut status = None;
        let exited = wait_until(Duration::from_secs(15), || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        if !exited {
            let _ = child.kill();
            panic!("spool watch did not stop on SIGTERM:\n{}", self.log());
        }
        (status.unwrap(), self.log())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn bodies(sink: &Sink) -> Vec<String> {
    sink.received()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// A hook that appends `word` to `file` (no shell in spool: sh -c here).
/// The flags of a watch that notices a change within ~100 ms: probe
/// `link` every 50 ms, offline after 2 failures, deliver to `sink`, record
/// each hook run in `hooks`, replay every `replay_interval`.
fn quick_watch(link: &Link, sink: &Sink, hooks: &Path, replay_interval: &str) -> Vec<String> {
    [
        "--probe",
        &link.probe(),
        "--url",
        &sink.url("/in"),
        "--interval",
        "50ms",
        "--failure-threshold",
        "2",
        "--retry-delay",
        "20ms",
        "--replay-interval",
        replay_interval,
        "--on-online",
        &hook(hooks, "online"),
        "--on-offline",
        &hook(hooks, "offline"),
    ]
    .map(String::from)
    .to_vec()
}

fn hook(file: &Path, word: &str) -> String {
    format!(
        "sh -c {}",
        shell_words::quote(&format!(
            "echo {word} >> {}",
            shell_words::quote(&file.to_string_lossy())
        ))
    )
}

fn words(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Parse the metrics text: every line is a comment or
/// `name{labels} value`. Returns `name{labels}` → value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        let open = series
            .find('{')
            .unwrap_or_else(|| panic!("no labels in {line:?}"));
        assert!(series.ends_with('}'), "unclosed labels in {line:?}");
        let name = &series[..open];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        assert!(
            series[open..].contains("spool=\""),
            "no spool label in {line:?}"
        );
        let v: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value in {line:?}"));
        m.insert(series.to_string(), v);
    }
    m
}

const METRIC_NAMES: [&str; 11] = [
    "spool_depth",
    "spool_held",
    "spool_dead_letters",
    "spool_bytes",
    "spool_oldest_item_age_seconds",
    "spool_delivered_total",
    "spool_failed_total",
    "spool_dead_lettered_total",
    "spool_reconnect_attempts_total",
    "spool_reconnect_outcomes_total",
    "spool_online",
];

fn metric(m: &BTreeMap<String, f64>, name: &str, extra: &str) -> f64 {
    m.iter()
        .find(|(k, _)| k.starts_with(&format!("{name}{{")) && k.contains(extra))
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no {name} {extra} in {m:?}"))
}

/// Every log line starts with an RFC 3339 time and a level, and its
/// message is words: no name of a Rust value (`Reconnected`, `GaveUp`,
/// `Some(…)`) shows through.
fn check_log_lines(log: &str) {
    for line in log.lines() {
        for internal in [
            "Reconnected",
            "GaveUp",
            "Aborted",
            "Some(",
            "None",
            "Ok(",
            "Err(",
            "OtherError",
        ] {
            assert!(!line.contains(internal), "{internal} in {line:?}");
        }
        let (time, rest) = line.split_once(' ').unwrap_or((line, ""));
        assert!(
            time.len() == 24 && time.ends_with('Z') && time.as_bytes()[10] == b'T',
            "no timestamp in {line:?}"
        );
        assert!(
            ["detail: ", "info: ", "warn: ", "error: "]
                .iter()
                .any(|l| rest.starts_with(l)),
            "no level in {line:?}"
        );
    }
}

fn pending_payloads(env: &Env) -> Vec<String> {
    env.drain()
        .iter()
        .map(|v| v["payload"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn items_queued_offline_are_delivered_in_order_when_the_link_returns() {
    each_backend(|env| {
        let sink = Sink::always(200);
        let mut link = Link::up();
        env.enqueue("early-1");
        env.enqueue("early-2");
        let hooks = env.dir.path().join("hooks");
        let metrics = env.dir.path().join("watch.prom");
        let mut args = quick_watch(&link, &sink, &hooks, "200ms");
        args.extend(["--metrics-file".into(), metrics.to_string_lossy().into()]);
        let d = Daemon::start(env, &args.iter().map(String::as_str).collect::<Vec<_>>());
        let log = || d.log();
        assert!(
            wait_until(Duration::from_secs(10), || bodies(&sink).len() == 2),
            "startup replay: {}",
            log()
        );
        assert_eq!(words(&hooks), ["online"]);

        link.turn_off();
        assert!(
            wait_until(Duration::from_secs(10), || words(&hooks).len() == 2),
            "offline hook: {}",
            log()
        );
        assert_eq!(words(&hooks), ["online", "offline"]);
        for i in 1..=3 {
            env.enqueue(&format!("offline-{i}"));
        }
        // Two replay intervals and more: nothing goes out while offline.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(bodies(&sink).len(), 2, "delivered while offline: {}", log());
        assert_eq!(env.size(), 3);

        link.turn_on();
        assert!(
            wait_until(Duration::from_secs(10), || bodies(&sink).len() == 5),
            "replay after reconnect: {}",
            log()
        );
        assert_eq!(
            bodies(&sink),
            ["early-1", "early-2", "offline-1", "offline-2", "offline-3"]
        );
        assert!(wait_until(Duration::from_secs(5), || env.size() == 0));
        assert_eq!(words(&hooks), ["online", "offline", "online"]);
        // The metrics are rewritten after the reconnect's replay.
        assert!(wait_until(Duration::from_secs(5), || {
            let m = parse_metrics(&std::fs::read_to_string(&metrics).unwrap_or_default());
            m.keys().any(|k| k.starts_with("spool_delivered_total"))
                && metric(&m, "spool_delivered_total", "") == 5.0
        }));

        let (status, log) = d.stop();
        assert_eq!(status.code(), Some(0), "{log}");
        check_log_lines(&log);
        for needle in [
            "info: watching",
            "link up",
            "info: link offline: cannot connect to 127.0.0.1",
            "info: link online",
            "info: reconnected after 1 attempt",
            "info: replay (startup): delivered 2,",
            "info: replay (reconnect): delivered 3,",
            "info: stopping",
            "info: stopped: delivered 5,",
        ] {
            assert!(log.contains(needle), "{needle:?} missing from:\n{log}");
        }

        let text = std::fs::read_to_string(&metrics).unwrap();
        let m = parse_metrics(&text);
        for name in METRIC_NAMES {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} missing:\n{text}"
            );
            metric(&m, name, "");
        }
        assert_eq!(metric(&m, "spool_depth", ""), 0.0);
        assert_eq!(metric(&m, "spool_delivered_total", ""), 5.0);
        assert_eq!(metric(&m, "spool_failed_total", ""), 0.0);
        assert_eq!(metric(&m, "spool_online", ""), 1.0);
        assert_eq!(
            metric(
                &m,
                "spool_reconnect_outcomes_total",
                "outcome=\"reconnected\""
            ),
            2.0
        );
        assert_eq!(
            metric(&m, "spool_reconnect_outcomes_total", "outcome=\"gave_up\""),
            0.0
        );
        assert!(metric(&m, "spool_reconnect_attempts_total", "") >= 2.0);
        assert!(metric(&m, "spool_bytes", "") > 0.0);
        assert!(text.contains(&format!("spool=\"{}\"", env.path.to_string_lossy())));
    });
}

#[test]
fn a_link_down_at_startup_runs_on_offline_once_and_delivers_nothing_until_it_returns() {
    each_backend(|env| {
        let sink = Sink::always(200);
        let mut link = Link::off_port();
        env.enqueue("a");
        env.enqueue("b");
        let hooks = env.dir.path().join("hooks");
        let args = quick_watch(&link, &sink, &hooks, "100ms");
        let d = Daemon::start(env, &args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            wait_until(Duration::from_secs(10), || !words(&hooks).is_empty()),
            "{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(words(&hooks), ["offline"], "{}", d.log());
        assert!(sink.received().is_empty(), "{}", d.log());
        assert_eq!(env.size(), 2);

        link.turn_on();
        assert!(
            wait_until(Duration::from_secs(10), || bodies(&sink).len() == 2),
            "{}",
            d.log()
        );
        assert_eq!(bodies(&sink), ["a", "b"]);
        assert_eq!(words(&hooks), ["offline", "online"]);
        let (status, log) = d.stop();
        assert_eq!(status.code(), Some(0), "{log}");
        assert!(log.contains("link down (cannot connect to"), "{log}");
        assert!(log.contains("info: link online"), "{log}");
        assert!(log.contains("replay (reconnect): delivered 2,"), "{log}");
        check_log_lines(&log);
    });
}

#[test]
fn sigterm_stops_after_the_item_in_flight_and_marks_nothing_undelivered() {
    each_backend(|env| {
        let sink = Sink::start(|_, _| Answer::Slow(Duration::from_millis(120), 200));
        let link = Link::up();
        let all: Vec<String> = (0..25).map(|i| format!("item-{i:02}")).collect();
        let lines = all.join("\n") + "\n";
        env.run_in(&["enqueue", "--stdin", "--lines"], lines)
            .success();
        let d = Daemon::start(env, &["--probe", &link.probe(), "--url", &sink.url("/in")]);
        assert!(
            wait_until(Duration::from_secs(10), || sink.received().len() >= 3),
            "{}",
            d.log()
        );
        let (status, log) = d.stop();
        assert_eq!(status.code(), Some(0), "{log}");
        assert!(log.contains("stopped after the item in flight"), "{log}");

        let received = bodies(&sink);
        let pending = pending_payloads(env);
        let done: Vec<&String> = all.iter().filter(|p| !pending.contains(p)).collect();
        assert!(!pending.is_empty(), "the stop came mid-replay: {log}");
        for p in &done {
            assert!(received.contains(p), "{p} marked done but never delivered");
        }
        // The item in flight finished and was recorded: nothing the sink
        // got is still pending.
        assert_eq!(received.len(), done.len(), "{received:?} vs {done:?}");
        // What is left is the tail, in order.
        assert_eq!(pending, all[done.len()..]);
    });
}

#[test]
fn usage_errors_and_a_missing_spool() {
    let env = Env::new("spool.db");
    let sink_url = "http://127.0.0.1:9/in";
    let a = env.run(&["watch", "--url", sink_url]).code(64);
    assert!(stderr(&a).contains("--probe"), "{}", stderr(&a));
    let a = env.run(&["watch", "--probe", "tcp://127.0.0.1:9"]).code(64);
    assert!(stderr(&a).contains("--exec"), "{}", stderr(&a));
    for bad in [
        vec!["--probe", "ftp://example.com/x"],
        vec!["--probe", "tcp://127.0.0.1"],
        vec!["--probe", "tcp://127.0.0.1:9", "--probe-expect", "ok"],
        vec!["--probe", "tcp://127.0.0.1:9", "--on-online", "'unclosed"],
        vec!["--probe", "tcp://127.0.0.1:9", "--on-offline", ""],
        vec!["--probe", "tcp://127.0.0.1:9", "--interval", "0s"],
    ] {
        let mut args = vec!["watch", "--url", sink_url];
        args.extend(bad.iter().copied());
        let a = assert_error(env.run(&args), 64, &env.path);
        assert!(stderr(&a).contains("watch "), "{}", stderr(&a));
    }
    // --push takes the push options of replay and refuses the others.
    let push_url = "http://127.0.0.1:9/v1/push";
    for (bad, says) in [
        (vec!["--push", push_url, "--url", sink_url], "--url"),
        (
            vec!["--push", push_url, "--method", "PUT"],
            "--method does not apply to --push",
        ),
        (
            vec!["--push", push_url, "--concurrency", "2"],
            "--concurrency does not apply to --push",
        ),
        (vec!["--push", push_url, "--batch", "0"], "--batch"),
        (vec!["--url", sink_url, "--compress"], "--compress"),
        (vec!["--push", "ftp://h/v1/push"], "--push"),
    ] {
        let mut args = vec!["watch", "--probe", "tcp://127.0.0.1:9"];
        args.extend(bad.iter().copied());
        let a = env.run(&args).code(64).stdout("");
        assert!(stderr(&a).contains(says), "{bad:?}: {}", stderr(&a));
    }
    for bad in [
        vec!["--failure-threshold", "0"],
        vec!["--reconnect-attempts", "0"],
        vec!["--interval", "soon"],
    ] {
        let mut args = vec!["watch", "--url", sink_url, "--probe", "tcp://127.0.0.1:9"];
        args.extend(bad.iter().copied());
        env.run(&args).code(64).stdout("");
    }
    // A spool that does not exist is exit 66, and is not created.
    let a = assert_error(
        env.run(&["watch", "--probe", "tcp://127.0.0.1:9", "--url", sink_url]),
        66,
        &env.path,
    );
    assert!(stderr(&a).contains("no spool exists"), "{}", stderr(&a));
    assert!(env.files().is_empty(), "{:?}", env.files());
    // A metrics file that cannot be written fails at startup.
    env.enqueue("x");
    let a = env
        .run(&[
            "watch",
            "--probe",
            "tcp://127.0.0.1:9",
            "--url",
            sink_url,
            "--metrics-file",
            &env.dir.path().join("no/such/dir/m.prom").to_string_lossy(),
        ])
        .code(73);
    assert!(
        stderr(&a).contains("cannot create") && stderr(&a).contains("does not exist"),
        "{}",
        stderr(&a)
    );
}

/// A replay holding the spool's lock makes the daemon skip its rounds
/// (logged), and the daemon delivers once the lock is free. A failing
/// hook is logged and does not stop the sequence.
#[test]
fn a_busy_replay_lock_skips_the_round_and_a_failing_hook_is_logged() {
    let env = Env::new("spool.db");
    let sink = Sink::always(200);
    let link = Link::up();
    env.enqueue("held-back");
    let lock = spool::replay::ReplayLock::acquire(&env.path, Duration::ZERO).unwrap();
    let d = Daemon::start(
        &env,
        &[
            "--probe",
            &link.probe(),
            "--url",
            &sink.url("/in"),
            "--replay-interval",
            "100ms",
            "--on-online",
            "sh -c 'echo hook trouble >&2; exit 3'",
        ],
    );
    assert!(
        wait_until(Duration::from_secs(10), || d.log().contains(
            "warn: replay (startup) skipped: another replay holds the spool (pid"
        )),
        "{}",
        d.log()
    );
    assert!(sink.received().is_empty());
    drop(lock);
    assert!(
        wait_until(Duration::from_secs(10), || bodies(&sink) == ["held-back"]),
        "{}",
        d.log()
    );
    let (status, log) = d.stop();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("info: replay (periodic): delivered 1,"),
        "{log}"
    );
    assert!(
        log.contains(
            "warn: hook --on-online failed: `sh -c 'echo hook trouble >&2; exit 3'` exited with 3: hook trouble"
        ),
        "{log}"
    );
}

/// Hundreds of offline/online flaps while another process keeps
/// enqueueing: at the end the spool drains, every item arrived, and an
/// item that arrived twice came with the same key both times.
#[test]
fn soak_flapping_link_with_concurrent_enqueues() {
    each_backend(soak);
}

fn soak(env: &Env) {
    let sink = Sink::always(200);
    env.enqueue_key("body-seed", "key-seed");
    let marker = env.dir.path().join("link-up");
    std::fs::write(&marker, "").unwrap();
    let probe = format!(
        "exec:test -e {}",
        shell_words::quote(&marker.to_string_lossy())
    );
    let started = Instant::now();
    let d = Daemon::start(
        env,
        &[
            "--probe",
            &probe,
            "--url",
            &sink.url("/in"),
            "--interval",
            "5ms",
            "--failure-threshold",
            "1",
            "--online-threshold",
            "1",
            "--retry-delay",
            "5ms",
            "--reconnect-attempts",
            "3",
            "--replay-interval",
            "50ms",
        ],
    );

    assert!(
        wait_until(Duration::from_secs(10), || d.log().contains("link up")),
        "{}",
        d.log()
    );

    // The producer: the real binary in a loop, one item per process.
    let stop = Arc::new(AtomicBool::new(false));
    let enqueued: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(vec!["body-seed".into()]));
    let count = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (stop, enqueued, count) = (stop.clone(), enqueued.clone(), count.clone());
        let dir = env.dir.path().to_path_buf();
        let path = env.path.clone();
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let body = format!("body-{i:04}");
                let st = std::process::Command::new(env!("CARGO_BIN_EXE_spool"))
                    .current_dir(&dir)
                    .env_remove("SPOOL_PATH")
                    .args(["-q", "--spool"])
                    .arg(&path)
                    .args(["enqueue", "--key", &format!("key-{i:04}"), "--", &body])
                    .stdout(Stdio::null())
                    .status()
                    .unwrap();
                assert!(st.success(), "enqueue {i} failed");
                enqueued.lock().unwrap().push(body);
                count.fetch_add(1, Ordering::SeqCst);
                i += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };

    // The flapper: down, wait for the daemon to see it, up, wait again.
    let offline_lines = |log: &str| log.matches("info: link offline").count();
    let online_lines = |log: &str| log.matches("info: link online").count();
    let mut flaps = 0;
    let flap_deadline = Instant::now() + Duration::from_secs(40);
    while flaps < 220 && Instant::now() < flap_deadline {
        std::fs::remove_file(&marker).unwrap();
        let seen = wait_until(Duration::from_secs(2), || offline_lines(&d.log()) > flaps);
        std::fs::write(&marker, "").unwrap();
        let back = wait_until(Duration::from_secs(2), || online_lines(&d.log()) > flaps);
        assert!(seen && back, "flap {flaps} not seen:\n{}", d.log());
        flaps += 1;
        // Stay up a moment now and then so replays get to run.
        if flaps % 10 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    let flapping = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    producer.join().unwrap();

    let expected = enqueued.lock().unwrap().clone();
    let drained = wait_until(Duration::from_secs(20), || {
        let got = bodies(&sink);
        expected.iter().all(|b| got.contains(b))
    });
    assert!(drained, "not everything arrived:\n{}", d.log());
    assert!(wait_until(Duration::from_secs(10), || env.size() == 0));
    let (status, log) = d.stop();
    assert_eq!(status.code(), Some(0));

    let offline = offline_lines(&log);
    let online = online_lines(&log);
    assert!(
        flaps >= 200 && offline >= 200 && online >= 200,
        "{flaps} flaps, {offline} offline, {online} online"
    );
    assert!(flapping < Duration::from_secs(60), "{flapping:?}");

    // Every item arrived; repeats carry the key of their first delivery.
    let mut keys: HashMap<String, Vec<String>> = HashMap::new();
    for r in sink.received() {
        keys.entry(String::from_utf8_lossy(&r.body).into_owned())
            .or_default()
            .push(r.header("Idempotency-Key").unwrap_or_default().to_string());
    }
    for body in &expected {
        let ks = keys.get(body).unwrap_or_else(|| panic!("{body} lost"));
        let want = body.replacen("body-", "key-", 1);
        assert!(
            ks.iter().all(|k| *k == want),
            "{body} arrived with keys {ks:?}"
        );
    }
    assert_eq!(keys.len(), expected.len(), "unexpected bodies arrived");
    let repeats: usize = keys.values().map(|k| k.len() - 1).sum();
    let stats = env.run(&["--json", "stats"]).success();
    let stats: serde_json::Value = serde_json::from_slice(&stats.get_output().stdout).unwrap();
    assert_eq!(stats["depth"], 0);
    assert_eq!(stats["dead_letters"], 0);
    check_log_lines(&log);
    let interrupted = log.matches("(link down or stopping)").count();
    let aborted = log.matches("aborted reconnecting").count();
    let skipped = log.matches("replay skipped: the link went away").count();
    eprintln!(
        "soak {}: {flaps} flaps ({offline} offline / {online} online transitions logged) in {:.1}s, \
         {} items enqueued by {} processes, all delivered, {repeats} redeliveries (same key); \
         {interrupted} rounds stopped by a flap, {aborted} sequences aborted, {skipped} replays skipped \
         after bind; total {:.1}s",
        env.path.file_name().unwrap().to_string_lossy(),
        flapping.as_secs_f64(),
        expected.len(),
        count.load(Ordering::SeqCst),
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn new_items_are_replayed_at_once_not_at_the_next_interval() {
    each_backend(|env| {
        let sink = Sink::always(200);
        let link = Link::up();
        env.enqueue("first");
        let hooks = env.dir.path().join("hooks");
        let args = quick_watch(&link, &sink, &hooks, "1h");
        let d = Daemon::start(env, &args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(
            wait_until(Duration::from_secs(10), || bodies(&sink).len() == 1),
            "startup replay: {}",
            d.log()
        );
        env.enqueue("second");
        let enqueued = Instant::now();
        assert!(
            wait_until(Duration::from_secs(10), || bodies(&sink).len() == 2),
            "woken by the new item: {}",
            d.log()
        );
        assert!(
            enqueued.elapsed() < Duration::from_secs(2),
            "{:?}",
            enqueued.elapsed()
        );
        let (status, log) = d.stop();
        assert_eq!(status.code(), Some(0), "{log}");
    });
}

#[test]
fn push_delivers_to_a_spool_serve_receiver_and_stops_cleanly_on_sigterm() {
    use std::os::unix::fs::PermissionsExt as _;
    each_backend(|edge| {
        let central = Env::new("central.db");
        central.run(&["init"]).success();
        let token = "watch-push-token-0123456789";
        let tokens = central.dir.path().join("tokens");
        std::fs::write(&tokens, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let serve = Serve::start(&central, &["--token-file", &tokens.to_string_lossy()]);
        for i in 1..=5 {
            edge.enqueue(&format!("item-{i}"));
        }
        let auth = format!("Authorization: Bearer {token}");
        let d = Daemon::start(
            edge,
            &[
                "-v",
                "--probe",
                &format!("tcp://{}", serve.addr),
                "--push",
                &serve.url("/v1/push"),
                "-H",
                &auth,
                "--batch",
                "2",
                // One request at a time: the log below counts them.
                "--pipeline",
                "1",
                "--compress",
                "--interval",
                "50ms",
                "--replay-interval",
                "1h",
            ],
        );
        assert!(
            wait_until(Duration::from_secs(10), || edge.size() == 0),
            "startup push: {}",
            d.log()
        );
        // A new item goes out at once, as with --url.
        edge.enqueue("item-6");
        assert!(
            wait_until(Duration::from_secs(10), || edge.size() == 0),
            "woken by the new item: {}",
            d.log()
        );
        let (status, log) = d.stop();
        assert_eq!(status.code(), Some(0), "{log}");
        // -v: the command line's own note comes before the daemon's log.
        let (opened, daemon) = log.split_once('\n').unwrap();
        assert!(
            opened.starts_with("spool: opened ") && opened.ends_with(" for writing"),
            "{opened}"
        );
        check_log_lines(daemon);
        let target = format!("target push to {}): link up", serve.url("/v1/push"));
        for needle in [
            "(probe tcp://127.0.0.1:",
            &target,
            "info: reconnected after 1 attempt",
            "detail: push: sending sequence 1..2 (2 items, 0 skips,",
            "detail: push: sending sequence 5..5 (1 items, 0 skips,",
            "info: push (startup): delivered 5, rejected 0, dead-lettered 0, in flight 0; 3 requests,",
            "push (change): delivered 1,",
            "info: stopped: delivered 6,",
        ] {
            assert!(log.contains(needle), "{needle:?} missing from:\n{log}");
        }
        assert!(!log.contains(token), "the token shows:\n{log}");
        let got: Vec<String> = central
            .drain()
            .iter()
            .map(|v| v["payload"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            got,
            (1..=6).map(|i| format!("item-{i}")).collect::<Vec<_>>()
        );
        assert_eq!(serve.stop().code, Some(0));
    });
}

/// A push round that used up its request budget holds the next rounds
/// back for --backoff-max: a receiver that fails does not get a request
/// every --replay-interval (nor one after every write of the round).
#[test]
fn a_push_round_out_of_budget_holds_the_next_rounds_back() {
    let env = Env::new("spool.db");
    let sink = Sink::always(503);
    let link = Link::up();
    env.enqueue("a");
    let d = Daemon::start(
        &env,
        &[
            "-v",
            "--probe",
            &link.probe(),
            "--push",
            &sink.url("/v1/push"),
            "--max-attempts",
            "1",
            "--backoff-max",
            "1h",
            "--interval",
            "50ms",
            "--replay-interval",
            "100ms",
        ],
    );
    assert!(
        wait_until(Duration::from_secs(10), || !sink.received().is_empty()),
        "{}",
        d.log()
    );
    // Five replay intervals and more: no second request.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(sink.received().len(), 1, "{}", d.log());
    let (status, log) = d.stop();
    assert_eq!(status.code(), Some(0), "{log}");
    for needle in [
        "info: push (startup): delivered 0, rejected 0, dead-lettered 0, in flight 1; 1 requests, 1 failed,",
        "gave up after --max-attempts failed requests, items left for retry; last error: push receiver answered HTTP 503",
        "detail: replay (periodic) skipped: the last push round used up its request budget",
    ] {
        assert!(log.contains(needle), "{needle:?} missing from:\n{log}");
    }
    assert_eq!(env.size(), 1);
}
