//! `spool serve` over real HTTP, on both durable backends: the push
//! protocol of SPEC §7 end to end, `/v1/items`, reconciliation, metrics,
//! tokens, TLS, and input that must be refused without touching the
//! spool or stopping the server.

mod cli_common;
mod serve_common;
mod tls_pki;

use cli_common::*;
use serve_common::*;
use spool::push::wire::OutEntry;

fn push(a: &ureq::Agent, s: &Serve, body: &[u8]) -> Reply {
    post(
        a,
        &s.url("/v1/push"),
        &[("Content-Type", "application/json")],
        body,
    )
}

fn item(seq: u64, key: &'static str, payload: &'static str) -> OutEntry<'static> {
    OutEntry::Item {
        seq,
        id: seq,
        key,
        payload: payload.as_bytes(),
        enqueued_at: None,
    }
}

#[test]
fn the_push_protocol_over_http() {
    each_backend(|env| {
        let s = Serve::start(env, &["--max-payload", "1KiB"]);
        let a = agent();

        // New entries, then the same batch again: all duplicates.
        let r = push(&a, &s, &items_body("edge-1", 0, 1, &["p1", "p2", "p3"]));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(
            (&v["last_seq"], &v["applied"], &v["duplicates"]),
            (&3.into(), &3.into(), &0.into())
        );
        let r = push(&a, &s, &items_body("edge-1", 0, 1, &["p1", "p2", "p3"]));
        let v = r.json();
        assert_eq!((&v["applied"], &v["duplicates"]), (&0.into(), &3.into()));

        // A gap: 409 with last_seq, nothing applied.
        let r = push(&a, &s, &items_body("edge-1", 3, 5, &["p5"]));
        assert_eq!(r.status, 409, "{}", r.body);
        assert_eq!(r.json()["last_seq"], 3);
        assert!(r.error().contains("resend from 4"), "{}", r.body);

        // A rejected entry (payload over --max-payload) is reported until
        // acknowledged; a skip entry applies nothing.
        let big = "x".repeat(2000);
        let big: &'static str = Box::leak(big.into_boxed_str());
        let r = push(
            &a,
            &s,
            &body(
                "edge-1",
                3,
                &[
                    item(4, "", big),
                    OutEntry::Skip { seq: 5 },
                    item(6, "", "p6"),
                ],
            ),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["last_seq"], 6);
        assert_eq!(v["rejected"][0]["seq"], 4);
        assert!(
            v["rejected"][0]["error"]
                .as_str()
                .unwrap()
                .contains("over the receiver's limit"),
            "{v}"
        );
        assert_eq!(v["applied"], 1);
        // Lost answer: the resend with acked 3 reports the reject again.
        let r = push(&a, &s, &body("edge-1", 3, &[item(7, "", "p7")]));
        assert_eq!(r.json()["rejected"][0]["seq"], 4);
        let r = get(&a, &s.url("/v1/clients/edge-1"), &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["last_seq"], 7);
        assert_eq!(r.json()["rejected"][0]["seq"], 4);
        // Acknowledged: forgotten.
        let r = push(&a, &s, &body("edge-1", 7, &[]));
        assert_eq!(r.json()["rejected"], serde_json::json!([]));
        assert_eq!(r.json()["last_seq"], 7, "last_seq never moves back");

        // A number reused with other content: 409, nothing applied.
        let r = push(
            &a,
            &s,
            &body(
                "edge-1",
                7,
                &[
                    item(2, "", "other"),
                    item(3, "", "p3"),
                    item(4, "", big),
                    OutEntry::Skip { seq: 5 },
                    item(6, "", "p6"),
                    item(7, "", "p7"),
                    item(8, "", "p8"),
                ],
            ),
        );
        assert_eq!(r.status, 409, "{}", r.body);
        assert!(
            r.error()
                .contains("sequence 2 reused with different content"),
            "{}",
            r.body
        );

        // Keys are scoped per client: the same key from another client is
        // another item; from the same client, a dedup hit (counted as
        // applied).
        let r = push(&a, &s, &body("edge-a", 0, &[item(1, "order-7", "from a")]));
        assert_eq!(r.status, 200);
        let r = push(&a, &s, &body("edge-b", 0, &[item(1, "order-7", "from b")]));
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["applied"], 1);
        let r = push(&a, &s, &body("edge-a", 1, &[item(2, "order-7", "again")]));
        assert_eq!(r.json()["applied"], 1, "a dedup hit counts as applied");

        // Reconciliation: unknown clients are at 0; invalid ids are 400.
        let r = get(&a, &s.url("/v1/clients/never-seen"), &[]);
        assert_eq!(r.json(), serde_json::json!({"last_seq": 0, "rejected": []}));
        let r = get(&a, &s.url("/v1/clients/bad%20id"), &[]);
        assert_eq!(r.status, 400, "{}", r.body);
        let r = get(&a, &s.url("/v1/clients/edge-a"), &[]);
        assert_eq!(r.json()["last_seq"], 2);

        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        assert_eq!(
            payloads(env),
            ["p1", "p2", "p3", "p6", "p7", "from a", "from b"]
        );
        let keys: Vec<String> = env.drain()[5..]
            .iter()
            .map(|v| v["key"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(keys, ["edge-a:order-7", "edge-b:order-7"]);

        // `spool clients` shows the three clients.
        let a = env.run(&["clients", "--json"]).success();
        let clients = ndjson(&a.get_output().stdout);
        let ids: Vec<&str> = clients
            .iter()
            .map(|c| c["client_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["edge-1", "edge-a", "edge-b"]);
        assert_eq!(clients[0]["last_seq"], 7);
        assert!(clients[0]["updated_at"].is_string());
        let a = env.run(&["clients"]).success();
        let out = stdout(&a);
        assert!(out.starts_with("edge-1\t7\t0\t"), "{out}");
    });
}

#[test]
fn malformed_oversized_and_compressed_bodies() {
    each_backend(|env| {
        let s = Serve::start(env, &["--max-body", "64KiB"]);
        let a = agent();
        let ok = items_body("edge-1", 0, 1, &["p1"]);
        let bomb = gzip(&vec![b' '; 1 << 20]);
        let cases: Vec<(&str, Vec<u8>, Option<&str>, u16)> = vec![
            ("not JSON", b"{nope".to_vec(), None, 400),
            ("empty", Vec::new(), None, 400),
            (
                "unknown field",
                br#"{"client_id":"e","entries":[],"extra":1}"#.to_vec(),
                None,
                400,
            ),
            (
                "wrong type",
                br#"{"client_id":"e","entries":{}}"#.to_vec(),
                None,
                400,
            ),
            (
                "negative",
                br#"{"client_id":"e","acked":-1,"entries":[]}"#.to_vec(),
                None,
                400,
            ),
            (
                "huge number",
                br#"{"client_id":"e","acked":184467440737095516160,"entries":[]}"#.to_vec(),
                None,
                400,
            ),
            (
                "invalid UTF-8",
                b"{\"client_id\":\"\xff\",\"entries\":[]}".to_vec(),
                None,
                400,
            ),
            (
                "bad client id",
                br#"{"client_id":"a b","entries":[]}"#.to_vec(),
                None,
                400,
            ),
            (
                "not contiguous",
                br#"{"client_id":"e","entries":[{"seq":1,"skip":true},{"seq":3,"skip":true}]}"#
                    .to_vec(),
                None,
                400,
            ),
            ("deep nesting", vec![b'['; 10_000], None, 400),
            ("over --max-body", vec![b' '; 65 << 10], None, 413),
            ("gzip bomb", bomb.clone(), Some("gzip"), 413),
            (
                "truncated gzip",
                gzip(&ok)[..20].to_vec(),
                Some("gzip"),
                400,
            ),
            (
                "gzip of garbage",
                gzip(b"\x00\x01garbage"),
                Some("gzip"),
                400,
            ),
            ("not gzip at all", ok.clone(), Some("gzip"), 400),
            ("unknown encoding", ok.clone(), Some("br"), 415),
        ];
        for (what, body, encoding, want) in cases {
            let mut headers = vec![("Content-Type", "application/json")];
            if let Some(e) = encoding {
                headers.push(("Content-Encoding", e));
            }
            let r = post(&a, &s.url("/v1/push"), &headers, &body);
            assert_eq!(r.status, want, "{what}: {}", r.body);
            assert!(!r.error().is_empty(), "{what}");
            // Still serving.
            assert_eq!(get(&agent(), &s.url("/healthz"), &[]).status, 200, "{what}");
        }
        // A declared Content-Length over the limit is refused before the
        // body is sent.
        let answer = raw(
            &s.addr,
            b"POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n",
        );
        assert_eq!(raw_status(&answer), 413, "{answer}");
        // Chunked, over the limit.
        let mut chunked =
            b"POST /v1/push HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for _ in 0..80 {
            chunked.extend_from_slice(b"400\r\n");
            chunked.extend_from_slice(&[b' '; 0x400]);
            chunked.extend_from_slice(b"\r\n");
        }
        chunked.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(raw_status(&raw(&s.addr, &chunked)), 413);
        // Garbage instead of HTTP.
        let answer = raw(&s.addr, b"\x16\x03\x01 hello\r\n\r\n");
        assert!(answer.is_empty() || raw_status(&answer) == 400, "{answer}");
        // A gzip body within the limits works.
        let r = post(
            &a,
            &s.url("/v1/push"),
            &[("Content-Encoding", "gzip")],
            &gzip(&ok),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        assert_eq!(payloads(env), ["p1"], "only the good request applied");
        env.run(&["verify"]).success();
    });
}

#[test]
fn many_tiny_entries_in_one_body() {
    each_backend(|env| {
        let s = Serve::start(env, &[]);
        // 300,000 skip entries: under the default 8 MiB.
        let mut b = String::from(r#"{"client_id":"tiny","acked":0,"entries":["#);
        let n = 300_000u64;
        for seq in 1..=n {
            if seq > 1 {
                b.push(',');
            }
            b.push_str(&format!(r#"{{"seq":{seq},"skip":true}}"#));
        }
        b.push_str("]}");
        assert!(b.len() < 8 << 20);
        let r = push(&agent(), &s, b.as_bytes());
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["last_seq"], n);
        let r = push(&agent(), &s, &items_body("tiny", n, n + 1, &["after"]));
        assert_eq!(r.json()["last_seq"], n + 1);
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        assert_eq!(payloads(env), ["after"]);
        env.run(&["verify"]).success();
    });
}

#[test]
fn single_items_with_keys_limits_and_a_full_spool() {
    each_backend(|env| {
        env.run(&["init", "--max-depth", "2"]).success();
        let s = Serve::start(env, &["--max-payload", "100"]);
        let a = agent();
        let url = s.url("/v1/items");
        let r = post(&a, &url, &[("Idempotency-Key", "k1")], b"first");
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(
            r.json(),
            serde_json::json!({"id": 1, "deduplicated": false})
        );
        let r = post(&a, &url, &[("Idempotency-Key", "k1")], b"second");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json(), serde_json::json!({"id": 1, "deduplicated": true}));
        let r = post(
            &a,
            &url,
            &[("Content-Encoding", "gzip")],
            &gzip(b"\x00\xffbytes"),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        // Full: 503 with Retry-After; a dedup hit still succeeds.
        let r = post(&a, &url, &[], b"third");
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.header("retry-after"), Some("5"));
        assert!(r.error().contains("full"));
        let r = post(&a, &url, &[("Idempotency-Key", "k1")], b"again");
        assert_eq!(r.status, 200);
        // Over --max-payload, plain and once inflated.
        let r = post(&a, &url, &[], &[b'x'; 101]);
        assert_eq!(r.status, 413, "{}", r.body);
        let r = post(
            &a,
            &url,
            &[("Content-Encoding", "gzip")],
            &gzip(&[b'x'; 101]),
        );
        assert_eq!(r.status, 413, "{}", r.body);
        let r = post(&a, &url, &[("Idempotency-Key", &"k".repeat(2000))], b"x");
        assert_eq!(r.status, 400, "{}", r.body);
        // Wrong method, unknown path.
        let r = get(&a, &url, &[]);
        assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
        assert_eq!(get(&a, &s.url("/v2/nothing"), &[]).status, 404);
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        let items = env.drain();
        assert_eq!(items.len(), 2);
        assert_eq!(
            (&items[0]["payload"], &items[0]["key"]),
            (&"first".into(), &"k1".into())
        );
        assert_eq!(items[1]["payload_base64"], "AP9ieXRlcw==");
    });
}

#[test]
fn metrics_name_the_series() {
    let env = Env::new("spool.db");
    let s = Serve::start(&env, &[]);
    let a = agent();
    post(&a, &s.url("/v1/items"), &[], b"one");
    push(
        &a,
        &s,
        &body("m", 0, &[item(1, "", "x"), OutEntry::Skip { seq: 2 }]),
    );
    push(&a, &s, &body("m", 0, &[item(1, "", "x")]));
    let r = get(&a, &s.url("/metrics"), &[]);
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let label = format!("spool=\"{}\"", env.path.display());
    for want in [
        format!("spool_depth{{{label}}} 2\n"),
        "spool_held{".into(),
        "spool_dead_letters{".into(),
        "spool_bytes{".into(),
        "spool_oldest_item_age_seconds{".into(),
        format!("spool_serve_requests_total{{{label},endpoint=\"items\",code=\"201\"}} 1\n"),
        format!("spool_serve_requests_total{{{label},endpoint=\"push\",code=\"200\"}} 2\n"),
        format!("spool_serve_entries_total{{{label},outcome=\"applied\"}} 1\n"),
        format!("spool_serve_entries_total{{{label},outcome=\"duplicate\"}} 1\n"),
        format!("spool_serve_entries_total{{{label},outcome=\"rejected\"}} 0\n"),
        format!("spool_serve_entries_total{{{label},outcome=\"skipped\"}} 1\n"),
        format!("spool_serve_clients{{{label}}} 1\n"),
        format!("spool_serve_commits_total{{{label}}} 3\n"),
        "# TYPE spool_serve_request_duration_seconds histogram\n".into(),
        format!("spool_serve_request_duration_seconds_count{{{label},endpoint=\"push\"}} 2\n"),
    ] {
        assert!(r.body.contains(&want), "{want} not in\n{}", r.body);
    }
    assert_eq!(s.stop().code, Some(0));
}

const TOKEN_A: &str = "tok-a-3f7c0d9be1c24b7e9a55";
const TOKEN_B: &str = "tok-b-9b1a22f04c6e4d1f8c0c";

#[test]
fn tokens_guard_every_write_and_never_show_up_in_logs() {
    let env = Env::new("spool.db");
    let file = write_file(
        env.dir.path(),
        "tokens",
        &format!("# edge boxes\n{TOKEN_A} edge-* site-?\n\n{TOKEN_B}\n"),
    );
    let s = Serve::start(&env, &["-v", "--token-file", file.to_str().unwrap()]);
    let a = agent();
    let bearer_a = format!("Bearer {TOKEN_A}");
    let bearer_b = format!("Bearer {TOKEN_B}");
    let p = s.url("/v1/push");
    let edge = items_body("edge-1", 0, 1, &["from edge"]);
    let other = items_body("other", 0, 1, &["from other"]);

    let r = post(&a, &p, &[], &edge);
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    let r = post(&a, &p, &[("Authorization", "Bearer wrong-token")], &edge);
    assert_eq!(r.status, 401);
    let r = post(
        &a,
        &p,
        &[("Authorization", &format!("Basic {TOKEN_A}"))],
        &edge,
    );
    assert_eq!(r.status, 401);
    // Authentication comes before the body is inflated or parsed.
    let r = post(
        &a,
        &p,
        &[("Content-Encoding", "gzip")],
        &gzip(&vec![0; 10 << 20]),
    );
    assert_eq!(r.status, 401);
    // A token limited to edge-* may not push as `other`: 403, nothing applied.
    let r = post(&a, &p, &[("Authorization", &bearer_a)], &other);
    assert_eq!(r.status, 403, "{}", r.body);
    let r = post(&a, &p, &[("Authorization", &bearer_a)], &edge);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(
        &a,
        &p,
        &[("authorization", &format!("bearer  {TOKEN_B}"))],
        &other,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Reconciliation follows the same rule.
    let c = s.url("/v1/clients/other");
    assert_eq!(get(&a, &c, &[]).status, 401);
    assert_eq!(get(&a, &c, &[("Authorization", &bearer_a)]).status, 403);
    assert_eq!(get(&a, &c, &[("Authorization", &bearer_b)]).status, 200);
    // /v1/items needs a valid token; health and metrics need none.
    let i = s.url("/v1/items");
    assert_eq!(post(&a, &i, &[], b"x").status, 401);
    assert_eq!(
        post(&a, &i, &[("Authorization", &bearer_a)], b"item").status,
        201
    );
    assert_eq!(get(&a, &s.url("/healthz"), &[]).status, 200);
    assert_eq!(get(&a, &s.url("/metrics"), &[]).status, 200);

    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("POST /v1/push 403"),
        "{}",
        stopped.stderr
    );
    for t in [TOKEN_A, TOKEN_B, "wrong-token"] {
        assert!(
            !stopped.stderr.contains(t),
            "a token in the log:\n{}",
            stopped.stderr
        );
    }
    assert_eq!(payloads(&env), ["from edge", "from other", "item"]);
}

#[test]
fn tokens_from_the_systemd_credentials_directory() {
    let env = Env::new("spool.db");
    let creds = tempfile::tempdir().unwrap();
    write_file(creds.path(), "spool-serve-tokens", &format!("{TOKEN_A}\n"));
    let s = Serve::start_with(&env, &[], |c| {
        c.env("CREDENTIALS_DIRECTORY", creds.path());
    });
    let a = agent();
    assert_eq!(post(&a, &s.url("/v1/items"), &[], b"x").status, 401);
    let bearer = format!("Bearer {TOKEN_A}");
    assert_eq!(
        post(&a, &s.url("/v1/items"), &[("Authorization", &bearer)], b"x").status,
        201
    );
    assert_eq!(s.stop().code, Some(0));
}

#[test]
fn https_with_a_certificate_from_a_private_ca() {
    let env = Env::new("spool.ndjson");
    let ca = tls_pki::Ca::new("serve ca");
    let cert = ca.server(&["localhost", "127.0.0.1"]);
    let cert_file = write_file(env.dir.path(), "cert.pem", &cert.pem);
    let key_file = write_file(env.dir.path(), "key.pem", &cert.key_pem());
    let ca_file = write_file(env.dir.path(), "ca.pem", &ca.pem);
    let s = Serve::start(
        &env,
        &[
            "--tls-cert",
            cert_file.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
        ],
    );
    assert!(s.base.starts_with("https://127.0.0.1:"), "{}", s.base);
    let roots = spool::tls::TlsTrust::with_cacert(&ca_file).load().unwrap();
    let a: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(roots.ureq_tls_config())
        .http_status_as_error(false)
        .build()
        .into();
    let r = post(&a, &s.url("/v1/items"), &[], b"over tls");
    assert_eq!(r.status, 201, "{}", r.body);
    let r = push(&a, &s, &items_body("tls-edge", 0, 1, &["pushed over tls"]));
    assert_eq!(r.status, 200, "{}", r.body);
    // A client that does not trust the CA fails the handshake, and plain
    // HTTP to the TLS port gets no answer; the server goes on.
    let untrusting = spool::tls::TlsTrust::system().load().unwrap();
    let b: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(untrusting.ureq_tls_config())
        .build()
        .into();
    assert!(b.get(&s.url("/healthz")).call().is_err());
    let answer = raw(&s.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(get(&a, &s.url("/healthz"), &[]).status, 200);
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert_eq!(payloads(&env), ["over tls", "pushed over tls"]);
}
