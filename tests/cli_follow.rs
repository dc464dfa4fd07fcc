//! `spool replay --follow` end to end: the real binary as a service,
//! items enqueued by other processes, real signals. Waits are bounded
//! polls on observable effects, never fixed sleeps.

mod cli_common;
mod http_sink;
mod push_receiver;

use cli_common::*;
use http_sink::Sink;
use push_receiver::PushReceiver;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Poll `cond` every 5 ms until it holds or `limit` passes.
fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A running `spool replay --follow`, its stdout and stderr in files.
struct Follow {
    child: Option<Child>,
    out: PathBuf,
    err: PathBuf,
}

impl Follow {
    fn start(env: &Env, args: &[&str]) -> Follow {
        let out = env.dir.path().join("follow.out");
        let err = env.dir.path().join("follow.err");
        let child = env
            .std_cmd()
            .args(["replay", "--follow"])
            .args(args)
            .stdout(File::create(&out).unwrap())
            .stderr(File::create(&err).unwrap())
            .spawn()
            .expect("spawn spool replay --follow");
        Follow {
            child: Some(child),
            out,
            err,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Send `sig` and wait (bounded) for the exit: status and stdout.
    fn stop(mut self, sig: i32) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill only sends a signal to our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let mut status = None;
        let exited = wait_until(Duration::from_secs(15), || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        if !exited {
            let _ = child.kill();
            panic!("replay --follow did not stop:\n{}", self.stderr());
        }
        (status.unwrap(), std::fs::read_to_string(&self.out).unwrap())
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An `--exec` target that appends each payload as a line to `file`.
fn appender(env: &Env) -> (String, PathBuf) {
    let file = env.dir.path().join("delivered.txt");
    (
        format!(
            "sh -c 'cat >> {}; echo >> {}'",
            file.display(),
            file.display()
        ),
        file,
    )
}

fn lines(file: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn an_item_enqueued_by_another_process_is_delivered_within_a_second() {
    for b in BACKENDS {
        let env = Env::new(b);
        env.enqueue("first");
        let (exec, file) = appender(&env);
        // A long --poll: the notification, not the poll, must find it.
        let f = Follow::start(&env, &["--exec", &exec, "--poll", "1h", "-v"]);
        assert!(
            wait_until(Duration::from_secs(20), || lines(&file) == ["first"]),
            "{b}: the first item was not delivered:\n{}",
            f.stderr()
        );
        for n in 0..3 {
            let payload = format!("next {n}");
            env.enqueue(&payload);
            let enqueued = Instant::now();
            assert!(
                wait_until(Duration::from_secs(10), || lines(&file).contains(&payload)),
                "{b}: {payload} was not delivered:\n{}",
                f.stderr()
            );
            let took = enqueued.elapsed();
            assert!(
                took < Duration::from_secs(1),
                "{b}: {payload} took {took:?}"
            );
        }
        let (status, out) = f.stop(libc::SIGTERM);
        assert_eq!(status.code(), Some(0), "{b}: {out}");
        assert!(out.contains("delivered 4, failed 0"), "{b}: {out}");
        assert!(out.contains("stopped"), "{b}: {out}");
        env.run(&["size"]).code(0).stdout("0\n");
    }
}

#[test]
fn sigterm_and_sigint_stop_it_with_exit_0_and_the_summary_of_the_whole_run() {
    for (b, sig) in BACKENDS.iter().zip([libc::SIGTERM, libc::SIGINT]) {
        let env = Env::new(b);
        env.run(&["init"]).code(0);
        let (exec, file) = appender(&env);
        let f = Follow::start(&env, &["--exec", &exec, "--json"]);
        // The second item is enqueued only once the first was delivered,
        // so that it needs a pass of its own whatever the machine's load.
        for n in 0..2 {
            env.enqueue(&format!("item {n}"));
            assert!(
                wait_until(Duration::from_secs(20), || lines(&file).len() == n + 1),
                "{b}:\n{}",
                f.stderr()
            );
        }
        let (status, out) = f.stop(sig);
        assert_eq!(status.code(), Some(0), "{b}: {out}");
        let r: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
        assert_eq!(r["delivered"], 2, "{r}");
        assert_eq!(r["follow"]["end"], "stopped", "{r}");
        assert!(r["follow"]["passes"].as_u64().unwrap() >= 2, "{r}");
        assert_eq!(r["follow"]["notifications"], true, "{r}");
    }
}

#[test]
fn idle_exit_ends_it_by_itself_with_exit_0() {
    for b in BACKENDS {
        let env = Env::new(b);
        env.enqueue("a");
        let started = Instant::now();
        let a = env
            .run(&[
                "replay",
                "--follow",
                "--idle-exit",
                "200ms",
                "--exec",
                "true",
            ])
            .code(0);
        assert!(started.elapsed() < Duration::from_secs(20));
        let out = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
        assert!(out.starts_with("delivered 1, failed 0"), "{out}");
        assert!(out.contains("--idle-exit"), "{out}");
    }
}

#[test]
fn an_item_that_failed_and_stays_queued_makes_idle_exit_75() {
    let env = Env::new("spool.db");
    env.enqueue("a");
    env.run(&[
        "replay",
        "--follow",
        "--idle-exit",
        "200ms",
        "--exec",
        "false",
        "--backoff-base",
        "1h",
        "--backoff-max",
        "1h",
    ])
    .code(75);
}

#[test]
fn it_works_with_url_and_concurrency() {
    let sink = Sink::always(200);
    let env = Env::new("spool.db");
    env.run(&["init"]).code(0);
    let f = Follow::start(&env, &["--url", &sink.url("/in"), "--concurrency", "4"]);
    for n in 0..8 {
        env.enqueue(&format!("u{n}"));
    }
    assert!(
        wait_until(Duration::from_secs(20), || sink.received().len() == 8),
        "{}",
        f.stderr()
    );
    let (status, out) = f.stop(libc::SIGTERM);
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("delivered 8,"), "{out}");
}

#[test]
fn it_works_with_push() {
    let rx = PushReceiver::start();
    let env = Env::new("spool.ndjson");
    env.enqueue("p0");
    let f = Follow::start(&env, &["--push", &rx.url()]);
    assert!(
        wait_until(Duration::from_secs(20), || rx.seqs() == [vec![1]]),
        "{}",
        f.stderr()
    );
    env.enqueue("p1");
    assert!(
        wait_until(Duration::from_secs(20), || rx.seqs().len() == 2),
        "{}",
        f.stderr()
    );
    let (status, out) = f.stop(libc::SIGTERM);
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.starts_with("delivered 2,"), "{out}");
    env.run(&["size"]).code(0).stdout("0\n");
}

#[test]
fn a_second_replay_is_refused_while_it_runs() {
    let env = Env::new("spool.db");
    env.enqueue("a");
    let (exec, file) = appender(&env);
    let f = Follow::start(&env, &["--exec", &exec]);
    assert!(wait_until(Duration::from_secs(20), || lines(&file).len() == 1));
    env.run(&["replay", "--exec", "true"]).code(75);
    let (status, _) = f.stop(libc::SIGTERM);
    assert_eq!(status.code(), Some(0));
}

#[test]
fn flags_that_cannot_follow_are_usage_errors() {
    let env = Env::new("spool.db");
    env.enqueue("a");
    for args in [
        &["replay", "--follow", "--dry-run", "--exec", "true"][..],
        &["replay", "--follow", "--ignore-backoff", "--exec", "true"],
        &["replay", "--poll", "5s", "--exec", "true"],
        &["replay", "--idle-exit", "5s", "--exec", "true"],
        &["replay", "--follow", "--poll", "0", "--exec", "true"],
        &["replay", "--follow", "--idle-exit", "0", "--exec", "true"],
    ] {
        env.run(args).code(64);
    }
    env.run(&["size"]).code(0).stdout("1\n");
}
