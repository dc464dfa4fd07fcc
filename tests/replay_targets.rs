//! The exec and HTTP targets against real child processes and a real
//! HTTP server on 127.0.0.1.

mod http_sink;

use http_sink::{Answer, Dropper, Sink};
use spool::replay::exec::ExecTarget;
use spool::replay::http::{HttpOptions, HttpTarget};
use spool::replay::{Delivery, Outcome, RetryAfter, Target};
use spool::{Item, Timestamp};
use std::path::Path;
use std::time::{Duration, Instant};

fn item(id: u64, payload: &[u8], key: &str) -> Item {
    Item::new(id, payload.to_vec(), key.into(), Timestamp::from_secs(1))
}

fn deliver(t: &dyn Target, it: &Item, attempt: u32, key: &str) -> Outcome {
    t.deliver(&Delivery {
        item: it,
        attempt,
        idempotency_key: key,
        spool_path: Some(Path::new("/tmp/some.spool")),
    })
    .unwrap()
}

#[test]
fn http_sends_body_and_identity_headers() {
    let sink = Sink::always(204);
    let o = HttpOptions {
        headers: vec!["X-Tenant: blue".into()],
        content_type: "application/json".into(),
        ..HttpOptions::default()
    };
    let t = HttpTarget::new(&sink.url("/ingest"), &o).unwrap();
    let payload = b"\x00\xffbinary \"body\"\n";
    for attempt in [1, 2] {
        assert_eq!(
            deliver(&t, &item(7, payload, ""), attempt, "uuid:7"),
            Outcome::Delivered(spool::Evidence::Http(204))
        );
    }
    let got = sink.received();
    assert_eq!(got.len(), 2);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/ingest");
        assert_eq!(r.body, payload);
        assert_eq!(r.header("Idempotency-Key"), Some("uuid:7"));
        assert_eq!(r.header("X-Spool-Attempt"), Some(&*(i + 1).to_string()));
        assert_eq!(r.header("X-Tenant"), Some("blue"));
        assert_eq!(r.header("Content-Type"), Some("application/json"));
    }
    assert_eq!(sink.connections(), 1, "the connection is kept alive");
}

#[test]
fn http_status_classes() {
    let sink = Sink::start(|r, _| {
        let code: u16 = r.path.trim_start_matches('/').parse().unwrap();
        match code {
            429 => Answer::Full(
                429,
                vec![("Retry-After".into(), "120".into())],
                "slow down".into(),
            ),
            301 => Answer::Full(
                301,
                vec![("Location".into(), "http://elsewhere/x".into())],
                String::new(),
            ),
            c => Answer::Full(c, vec![], format!("status {c}")),
        }
    });
    let o = HttpOptions::default();
    let check = |code: u16| {
        let t = HttpTarget::new(&sink.url(&format!("/{code}")), &o).unwrap();
        deliver(&t, &item(1, b"x", "k"), 1, "k")
    };
    assert_eq!(check(200), Outcome::Delivered(spool::Evidence::Http(200)));
    assert_eq!(check(201), Outcome::Delivered(spool::Evidence::Http(201)));
    for code in [408, 425, 500, 503] {
        assert!(matches!(check(code), Outcome::Failed { .. }), "{code}");
    }
    match check(429) {
        Outcome::Failed {
            reason,
            retry_after,
        } => {
            assert_eq!(
                retry_after,
                Some(RetryAfter::Delay(Duration::from_secs(120)))
            );
            assert!(
                reason.contains("429") && reason.contains("slow down"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    for code in [400, 404, 409, 422] {
        assert!(matches!(check(code), Outcome::Rejected { .. }), "{code}");
    }
    match check(301) {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains("http://elsewhere/x"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    let o2 = HttpOptions {
        retry_status: vec![409],
        ..HttpOptions::default()
    };
    let t = HttpTarget::new(&sink.url("/409"), &o2).unwrap();
    assert!(matches!(
        deliver(&t, &item(1, b"x", ""), 1, "u:1"),
        Outcome::Failed { .. }
    ));
}

#[test]
fn http_timeouts_and_dropped_connections_are_failures() {
    let sink = Sink::start(|_, _| Answer::Slow(Duration::from_secs(3), 200));
    let o = HttpOptions {
        timeout: Some(Duration::from_millis(200)),
        ..HttpOptions::default()
    };
    let t = HttpTarget::new(&sink.url("/slow"), &o).unwrap();
    let start = Instant::now();
    match deliver(&t, &item(1, b"x", ""), 1, "u:1") {
        Outcome::Failed { reason, .. } => assert!(reason.contains("timed out"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(2));

    let dropper = Dropper::start();
    let t = HttpTarget::new(&dropper.url("/"), &HttpOptions::default()).unwrap();
    assert!(matches!(
        deliver(&t, &item(1, b"x", ""), 1, "u:1"),
        Outcome::Failed { .. }
    ));
    assert!(dropper.accepted() >= 1);

    // Nobody listening at all.
    let port = http_sink::quiet_port();
    let t = HttpTarget::new(
        &format!("http://127.0.0.1:{port}/"),
        &HttpOptions::default(),
    )
    .unwrap();
    assert!(matches!(
        deliver(&t, &item(1, b"x", ""), 1, "u:1"),
        Outcome::Failed { .. }
    ));
}

#[test]
fn http_credentials_never_reach_messages() {
    let sink =
        Sink::start(|_, _| Answer::Full(500, vec![], "echo: user:hunter22 token-abcdef".into()));
    let o = HttpOptions {
        headers: vec!["Authorization: Bearer token-abcdef".into()],
        ..HttpOptions::default()
    };
    let url = sink.url("/x").replace("http://", "http://user:hunter22@");
    let t = HttpTarget::new(&url, &o).unwrap();
    assert!(!t.describe().contains("hunter22"));
    match deliver(&t, &item(1, b"x", ""), 1, "u:1") {
        Outcome::Failed { reason, .. } => {
            assert!(!reason.contains("hunter22"), "{reason}");
            assert!(!reason.contains("token-abcdef"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The explicit Authorization header wins over URL credentials.
    assert_eq!(
        sink.received()[0].header("Authorization"),
        Some("Bearer token-abcdef")
    );
    let sink2 = Sink::always(200);
    let t = HttpTarget::new(
        &sink2.url("/").replace("http://", "http://user:hunter22@"),
        &HttpOptions::default(),
    )
    .unwrap();
    deliver(&t, &item(1, b"x", ""), 1, "u:1");
    assert_eq!(
        sink2.received()[0].header("Authorization"),
        Some("Basic dXNlcjpodW50ZXIyMg==")
    );
}

#[test]
fn exec_passes_payload_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let env_out = dir.path().join("env");
    let cmd = format!(
        "sh -c 'cat > \"$0\"; printf \"%s|%s|%s|%s\" \"$SPOOL_ITEM_ID\" \"$SPOOL_IDEMPOTENCY_KEY\" \"$SPOOL_ATTEMPT\" \"$SPOOL_PATH\" > \"$1\"' {} {}",
        out.display(),
        env_out.display()
    );
    let t = ExecTarget::new(&cmd, false, vec![65], None).unwrap();
    let payload: Vec<u8> = (0u8..=255).collect();
    assert_eq!(
        deliver(&t, &item(42, &payload, "key 1"), 3, "key 1"),
        Outcome::Delivered(spool::Evidence::Exit(0))
    );
    assert_eq!(std::fs::read(&out).unwrap(), payload);
    assert_eq!(
        std::fs::read_to_string(&env_out).unwrap(),
        "42|key 1|3|/tmp/some.spool"
    );
}

#[test]
fn exec_exit_codes_and_stderr_tail() {
    let t = ExecTarget::new(
        "sh -c 'echo first >&2; echo \"why: $0\" >&2; exit 3' x",
        false,
        vec![65],
        None,
    )
    .unwrap();
    match deliver(&t, &item(1, b"", ""), 1, "u:1") {
        Outcome::Failed { reason, .. } => {
            assert!(reason.contains("exited with 3"), "{reason}");
            assert!(reason.contains("why: x"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let t = ExecTarget::new("sh -c 'exit 65'", false, vec![65], None).unwrap();
    assert!(matches!(
        deliver(&t, &item(1, b"", ""), 1, "u:1"),
        Outcome::Rejected { .. }
    ));
    let t = ExecTarget::new("sh -c 'exit 66'", false, vec![65, 66], None).unwrap();
    assert!(matches!(
        deliver(&t, &item(1, b"", ""), 1, "u:1"),
        Outcome::Rejected { .. }
    ));
    let t = ExecTarget::new("sh -c 'kill -TERM $$'", false, vec![65], None).unwrap();
    match deliver(&t, &item(1, b"", ""), 1, "u:1") {
        Outcome::Failed { reason, .. } => assert!(reason.contains("signal 15"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn exec_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("grandchild.pid");
    let cmd = format!("sh -c 'sleep 30 & echo $! > {}; wait'", pidfile.display());
    let t = ExecTarget::new(&cmd, false, vec![65], Some(Duration::from_millis(300))).unwrap();
    let start = Instant::now();
    match deliver(&t, &item(1, b"", ""), 1, "u:1") {
        Outcome::Failed { reason, .. } => assert!(reason.contains("timed out"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The grandchild (sleep) was in the group and must be gone (or a zombie
    // about to be reaped by init).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit(')').next().unwrap_or("").trim().chars().next();
        if stat.is_empty() || state == Some('Z') {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "grandchild {pid} still running: {stat}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn exec_never_runs_payload_or_key_through_a_shell() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let evil = format!("$(touch {})", marker.display());
    let t = ExecTarget::new("cat", false, vec![65], None).unwrap();
    assert_eq!(
        deliver(&t, &item(1, evil.as_bytes(), &evil), 1, &evil),
        Outcome::Delivered(spool::Evidence::Exit(0))
    );
    let t = ExecTarget::new(&format!("echo {evil}"), false, vec![65], None).unwrap();
    assert_eq!(
        deliver(&t, &item(1, b"x", ""), 1, "u:1"),
        Outcome::Delivered(spool::Evidence::Exit(0))
    );
    assert!(!marker.exists(), "nothing may be evaluated by a shell");
}

#[test]
fn exec_missing_command_is_a_target_error_not_an_outcome() {
    let t = ExecTarget::new("/nonexistent/spool-test-command", false, vec![65], None).unwrap();
    let e = t
        .deliver(&Delivery {
            item: &item(1, b"", ""),
            attempt: 1,
            idempotency_key: "k",
            spool_path: None,
        })
        .unwrap_err();
    assert!(e.contains("/nonexistent/spool-test-command"), "{e}");
}
