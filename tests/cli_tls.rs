//! HTTPS end to end: the real binary against a real TLS server on
//! 127.0.0.1 (rustls with certificates made by the test, or `spool serve`
//! with certificates made by `openssl` as users make them): which
//! certificates `replay --url`, `replay --push` and `watch` trust (the
//! system store, `SSL_CERT_FILE`, `SSL_CERT_DIR`, `--cacert`, a pinned
//! self-signed certificate), how a refused certificate is named in
//! `last_error` and the log, and how a bad `--cacert` file is refused
//! before anything is delivered.
//!
//! Every run sets the trust environment itself: `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` of the machine running the tests are removed unless a
//! test sets them.

mod cli_common;
mod http_sink;
mod serve_common;
mod tls_pki;

use assert_cmd::Command;
use cli_common::*;
use http_sink::{Answer, Sink};
use serve_common::Serve;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use tls_pki::{openssl, Ca, ServerCert};

/// `spool --spool <path>` without the machine's SSL_CERT_* variables.
fn cmd(env: &Env) -> Command {
    let mut c = env.cmd();
    c.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR");
    c
}

fn run(env: &Env, args: &[&str]) -> assert_cmd::assert::Assert {
    cmd(env).args(args).write_stdin("").assert()
}

fn last_error(env: &Env, id: u64) -> String {
    let a = env.run(&["show", &id.to_string(), "--json"]).success();
    let v: serde_json::Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    v["last_error"].as_str().unwrap_or_default().to_string()
}

fn bodies(sink: &Sink) -> Vec<String> {
    sink.received()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

/// An HTTPS sink that presents `cert` and answers 200.
fn sink_with(cert: &ServerCert) -> Sink {
    Sink::start_tls(cert.server_config(), |_, _| Answer::Status(200))
}

/// The CA's certificate in `<env dir>/ca.pem`.
fn write_ca(env: &Env, ca: &Ca) -> PathBuf {
    let path = env.dir.path().join("ca.pem");
    ca.write_pem(&path);
    path
}

#[test]
fn replay_trusts_cacert_ssl_cert_file_and_ssl_cert_dir_and_names_an_unknown_issuer() {
    let env = Env::new("spool.db");
    let ca = Ca::new("CA");
    let ca_pem = write_ca(&env, &ca);
    let sink = sink_with(&ca.server(&["localhost", "127.0.0.1"]));
    let port = sink.port();
    let url = sink.https_url("localhost", "/in");

    // Without the CA: every attempt fails, and says why, without the
    // credentials of the URL.
    env.enqueue("a");
    let with_creds = url.replace("https://", "https://admin:hunter2pass@");
    let a = run(&env, &["-v", "replay", "--url", &with_creds]).code(75);
    let err = last_error(&env, 1);
    let expected = format!(
        "TLS handshake with localhost:{port} failed: certificate is signed by an unknown issuer (add its CA"
    );
    assert!(err.starts_with(&expected), "last_error: {err}");
    assert!(
        err.contains("--cacert") && err.contains("SSL_CERT_FILE"),
        "{err}"
    );
    assert!(
        stderr(&a).contains(&format!("attempt 1 failed: {expected}")),
        "the log names the cause: {}",
        stderr(&a)
    );
    for text in [stdout(&a), stderr(&a), err.clone()] {
        assert!(!text.contains("hunter2pass"), "{text}");
    }
    assert!(sink.received().is_empty(), "nothing got through");

    // --cacert: delivered (by name and by IP address).
    let ca_arg = ca_pem.to_str().unwrap();
    run(
        &env,
        &[
            "replay",
            "--url",
            &url,
            "--cacert",
            ca_arg,
            "--ignore-backoff",
        ],
    )
    .success();
    env.enqueue("b");
    let by_ip = sink.https_url("127.0.0.1", "/in");
    run(&env, &["replay", "--url", &by_ip, "--cacert", ca_arg]).success();

    // SSL_CERT_FILE and SSL_CERT_DIR stand for the system store.
    env.enqueue("c");
    cmd(&env)
        .env("SSL_CERT_FILE", &ca_pem)
        .args(["replay", "--url", &url])
        .assert()
        .success();
    env.enqueue("d");
    let dir = env.dir.path().join("certs");
    std::fs::create_dir(&dir).unwrap();
    ca.write_pem(&dir.join("spool-test-ca.pem"));
    cmd(&env)
        .env("SSL_CERT_DIR", &dir)
        .args(["replay", "--url", &url])
        .assert()
        .success();
    assert_eq!(bodies(&sink), ["a", "b", "c", "d"]);
    assert_eq!(env.size(), 0);
}

#[test]
fn an_empty_system_store_trusts_nothing_and_says_so() {
    let env = Env::new("spool.db");
    let ca = Ca::new("CA");
    let sink = sink_with(&ca.server(&["localhost"]));
    env.enqueue("a");
    let missing = env.dir.path().join("no-such-bundle.pem");
    cmd(&env)
        .env("SSL_CERT_FILE", &missing)
        .args(["replay", "--url", &sink.https_url("localhost", "/")])
        .assert()
        .code(75);
    let err = last_error(&env, 1);
    assert!(err.contains("unknown issuer"), "{err}");
    assert!(
        err.contains("no CA certificate was found in the system store")
            && err.contains("no-such-bundle.pem"),
        "{err}"
    );
    assert!(sink.received().is_empty());
}

#[test]
fn name_mismatch_expiry_and_self_signed_are_named() {
    let env = Env::new("spool.db");
    let ca = Ca::new("CA");
    let ca_pem = write_ca(&env, &ca);
    let ca_arg = ca_pem.to_str().unwrap().to_string();
    let cases: [(ServerCert, &str); 3] = [
        (
            ca.server(&["other.example"]),
            "certificate is not valid for this host name (name mismatch: it is for other.example)",
        ),
        (
            ca.server_valid(&["localhost"], 2000, 2001),
            "certificate has expired (valid until 2001-01-01T00:00:00Z)",
        ),
        (
            ca.server_valid(&["localhost"], 2090, 2091),
            "certificate is not valid yet (valid from 2090-01-01T00:00:00Z)",
        ),
    ];
    for (n, (cert, cause)) in cases.iter().enumerate() {
        let sink = sink_with(cert);
        let id = env.enqueue(&format!("item {n}"));
        let url = sink.https_url("localhost", "/");
        run(
            &env,
            &[
                "replay",
                "--url",
                &url,
                "--cacert",
                &ca_arg,
                "--ignore-backoff",
            ],
        )
        .code(75);
        let err = last_error(&env, id);
        let port = sink.port();
        assert_eq!(
            err,
            format!("TLS handshake with localhost:{port} failed: {cause}")
        );
        assert!(sink.received().is_empty());
        env.run(&["done", &id.to_string()]).success();
    }

    // A self-signed server: an unknown issuer, until its own certificate
    // is given with --cacert.
    let cert = tls_pki::self_signed(&["localhost"]);
    let own = env.dir.path().join("server.pem");
    cert.write_pem(&own);
    let sink = sink_with(&cert);
    let url = sink.https_url("localhost", "/");
    let id = env.enqueue("self");
    run(&env, &["replay", "--url", &url, "--cacert", &ca_arg]).code(75);
    let err = last_error(&env, id);
    assert!(err.contains("unknown issuer"), "{err}");
    run(
        &env,
        &[
            "replay",
            "--url",
            &url,
            "--cacert",
            own.to_str().unwrap(),
            "--ignore-backoff",
        ],
    )
    .success();
    assert_eq!(bodies(&sink), ["self"]);
}

#[test]
fn a_bad_cacert_file_is_refused_before_anything_is_delivered() {
    let env = Env::new("spool.db");
    let ca = Ca::new("CA");
    let sink = sink_with(&ca.server(&["localhost"]));
    let url = sink.https_url("localhost", "/");
    env.enqueue("a");
    let dir = env.dir.path();
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "\n").unwrap();
    let text = dir.join("text.pem");
    std::fs::write(&text, "not a certificate\n").unwrap();
    let key_only = dir.join("key.pem");
    std::fs::write(
        &key_only,
        rcgen::KeyPair::generate().unwrap().serialize_pem(),
    )
    .unwrap();
    let broken = dir.join("broken.pem");
    std::fs::write(
        &broken,
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let missing = dir.join("missing.pem");
    let cases: [(&Path, i32, &str); 6] = [
        (&missing, 66, "No such file"),
        (&empty, 65, "the file is empty"),
        (&text, 65, "not a PEM file"),
        (&key_only, 65, "no certificate in it"),
        (&broken, 65, "invalid PEM"),
        (dir, 65, "is a directory"),
    ];
    let before = env.snapshot();
    for (file, code, why) in cases {
        let f = file.to_str().unwrap();
        for target in [url.as_str(), "http://127.0.0.1:9/"] {
            let a = assert_error(
                run(&env, &["replay", "--url", target, "--cacert", f]),
                code,
                &env.path,
            );
            let first = stderr(&a).lines().next().unwrap().to_string();
            assert!(
                first.contains(&format!("cannot read --cacert file {f}: ")) && first.contains(why),
                "{first}"
            );
        }
        // watch checks it too, for its probe and its target.
        let a = assert_error(
            run(
                &env,
                &["watch", "--probe", &url, "--exec", "true", "--cacert", f],
            ),
            code,
            &env.path,
        );
        assert!(stderr(&a).contains("--cacert"), "{}", stderr(&a));
    }
    assert_eq!(env.snapshot(), before, "the spool is unchanged");
    assert!(sink.received().is_empty());
    // --cacert means nothing to --exec: a usage error.
    run(
        &env,
        &[
            "replay",
            "--exec",
            "cat",
            "--cacert",
            empty.to_str().unwrap(),
        ],
    )
    .code(64);
}

/// Start `spool watch` with `args`, wait (bounded) until its log holds
/// `want`, stop it with SIGTERM and return the log.
fn watch_until(env: &Env, args: &[&str], want: &str) -> String {
    let log = env.dir.path().join("watch.log");
    let mut child = env
        .std_cmd()
        .env_remove("SSL_CERT_FILE")
        .env_remove("SSL_CERT_DIR")
        .arg("watch")
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn spool watch");
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read().contains(want) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: kill only sends a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let text = read();
    assert!(text.contains(want), "no {want:?} in the log:\n{text}");
    assert!(status.success(), "{status:?}\n{text}");
    text
}

#[test]
fn watch_probes_and_delivers_over_https_with_cacert_and_names_the_cause_without() {
    let env = Env::new("spool.db");
    let ca = Ca::new("CA");
    let ca_pem = write_ca(&env, &ca);
    let sink = Sink::start_tls(ca.server(&["localhost"]).server_config(), |r, _| {
        if r.path == "/health" {
            Answer::Full(200, vec![], "ok".into())
        } else {
            Answer::Status(200)
        }
    });
    let probe = sink.https_url("localhost", "/health");
    let target = sink.https_url("localhost", "/in");
    let port = sink.port();
    env.enqueue("queued while the CA was unknown");

    let log = watch_until(&env, &["--probe", &probe, "--url", &target], "link down");
    assert!(
        log.contains(&format!(
            "link down (TLS handshake with localhost:{port} failed: certificate is signed by an unknown issuer"
        )),
        "{log}"
    );
    assert!(sink.received().is_empty(), "{log}");

    let log = watch_until(
        &env,
        &[
            "--probe",
            &probe,
            "--url",
            &target,
            "--cacert",
            ca_pem.to_str().unwrap(),
        ],
        "delivered 1",
    );
    assert!(log.contains("link up"), "{log}");
    let paths: Vec<String> = sink.received().iter().map(|r| r.path.clone()).collect();
    assert!(paths.iter().any(|p| p == "/health"), "{paths:?}");
    assert_eq!(
        bodies(&sink)
            .into_iter()
            .filter(|b| !b.is_empty())
            .collect::<Vec<_>>(),
        ["queued while the CA was unknown"]
    );
    assert_eq!(env.size(), 0);
}

/// Text that shows a TLS library's internal names (`Debug` output)
/// instead of words.
fn assert_worded(text: &str) {
    for internal in [
        "Other(",
        "OtherError",
        "CaUsedAsEndEntity",
        "InvalidCertificate",
        "NotValidForName",
        "UnknownIssuer",
        "BadEncoding",
        "AlertReceived",
    ] {
        assert!(!text.contains(internal), "{internal} in: {text}");
    }
}

/// The payloads of the receiving spool, in order.
fn payloads(env: &Env) -> Vec<String> {
    env.drain()
        .iter()
        .map(|v| v["payload"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_usual_openssl_self_signed_certificate_works_with_cacert_for_push_url_and_watch() {
    let central = Env::new("central.db");
    central.run(&["init"]).success();
    let edge = Env::new("edge.db");
    let certs = openssl::self_signed(
        central.dir.path(),
        "server",
        "localhost",
        "DNS:localhost,IP:127.0.0.1",
    );
    let serve = Serve::start(
        &central,
        &["--tls-cert", certs.cert_arg(), "--tls-key", certs.key_arg()],
    );
    let port = serve.addr.rsplit(':').next().unwrap().to_string();
    let push_url = format!("https://localhost:{port}/v1/push");
    let items_url = format!("https://localhost:{port}/v1/items");
    let cacert = certs.cert_arg();

    // Without --cacert: refused, and the cause and the two ways out are
    // named in words.
    edge.enqueue("pushed");
    let a = run(
        &edge,
        &["replay", "--push", &push_url, "--max-attempts", "1"],
    )
    .code(75);
    let err = last_error(&edge, 1);
    let expected = format!(
        "push request failed: TLS handshake with localhost:{port} failed: certificate is \
         self-signed (unknown issuer) and is a CA certificate (CA:TRUE) presented as the \
         server's own (trust that exact certificate by giving it to --cacert, or give the \
         server a leaf certificate: openssl req -x509 "
    );
    assert!(err.starts_with(&expected), "last_error: {err}");
    for text in [err.clone(), stdout(&a), stderr(&a)] {
        assert_worded(&text);
    }
    assert!(stderr(&a).contains(&expected), "{}", stderr(&a));

    // With it: pushed, and posted to /v1/items by name and by address.
    run(
        &edge,
        &[
            "replay",
            "--push",
            &push_url,
            "--cacert",
            cacert,
            "--ignore-backoff",
        ],
    )
    .success();
    edge.enqueue("posted by name");
    run(&edge, &["replay", "--url", &items_url, "--cacert", cacert]).success();
    edge.enqueue("posted by address");
    let by_ip = format!("https://127.0.0.1:{port}/v1/items");
    run(&edge, &["replay", "--url", &by_ip, "--cacert", cacert]).success();

    // watch: its https probe is up with --cacert, and it pushes.
    edge.enqueue("watched");
    let probe = format!("https://localhost:{port}/healthz");
    let log = watch_until(
        &edge,
        &["--probe", &probe, "--push", &push_url, "--cacert", cacert],
        "delivered 1",
    );
    assert!(log.contains("link up"), "{log}");
    assert_worded(&log);
    assert_eq!(edge.size(), 0);
    assert_eq!(
        payloads(&central),
        ["pushed", "posted by name", "posted by address", "watched"]
    );
    assert_eq!(serve.stop().code, Some(0));

    // The leaf certificate the message proposes works as it says, even
    // where nothing is pinned (SSL_CERT_FILE).
    let command = err
        .split("give the server a leaf certificate: ")
        .nth(1)
        .and_then(|c| c.strip_suffix(')'))
        .unwrap();
    let leaf_dir = edge.dir.path().join("leaf");
    std::fs::create_dir(&leaf_dir).unwrap();
    let argv = shell_words::split(command).unwrap();
    openssl::run(
        &leaf_dir,
        &argv.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let leaf = openssl::Files {
        cert: leaf_dir.join("cert.pem"),
        key: leaf_dir.join("key.pem"),
    };
    let sink = Sink::start_tls(leaf.server_config(), |_, _| Answer::Status(200));
    edge.enqueue("to the leaf");
    cmd(&edge)
        .env("SSL_CERT_FILE", &leaf.cert)
        .args(["replay", "--url", &sink.https_url("localhost", "/")])
        .write_stdin("")
        .assert()
        .success();
    assert_eq!(bodies(&sink), ["to the leaf"]);
}

#[test]
fn a_pinned_certificate_is_still_checked_for_the_name_and_the_validity() {
    let env = Env::new("spool.db");
    let dir = env.dir.path();
    let cases = [
        (
            openssl::self_signed(dir, "elsewhere", "elsewhere.example", "DNS:elsewhere.example"),
            "certificate is not valid for this host name (name mismatch: it is for elsewhere.example)",
        ),
        (
            openssl::expired(dir, "old", "localhost", "DNS:localhost,IP:127.0.0.1"),
            "certificate has expired (valid until 2001-01-01T00:00:00Z)",
        ),
    ];
    for (n, (certs, cause)) in cases.iter().enumerate() {
        let sink = Sink::start_tls(certs.server_config(), |_, _| Answer::Status(200));
        let id = env.enqueue(&format!("item {n}"));
        let a = run(
            &env,
            &[
                "-v",
                "replay",
                "--url",
                &sink.https_url("localhost", "/"),
                "--cacert",
                certs.cert_arg(),
                "--ignore-backoff",
            ],
        )
        .code(75);
        let err = last_error(&env, id);
        assert_eq!(
            err,
            format!(
                "TLS handshake with localhost:{} failed: {cause}",
                sink.port()
            )
        );
        assert_worded(&stderr(&a));
        assert!(sink.received().is_empty());
        env.run(&["done", &id.to_string()]).success();
    }
}
