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
        group: None,
        coalesce_key: None,
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
        // Over the default --max-entries: a clear 413 (a sender halves its
        // batch), nothing applied, so that one request cannot hold the
        // writer for long.
        let s = Serve::start(env, &[]);
        let r = push(&agent(), &s, b.as_bytes());
        assert_eq!(r.status, 413, "{}", r.body);
        assert_eq!(
            r.error(),
            "the request holds 300000 entries, over the limit of 10000 per request \
             (--max-entries); send smaller batches"
        );
        let r = get(&agent(), &s.url("/v1/clients/tiny"), &[]);
        assert_eq!(r.json()["last_seq"], 0);
        assert_eq!(s.stop().code, Some(0));
        // Allowed, they are applied without harm.
        let s = Serve::start(env, &["--max-entries", "300000"]);
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

/// SPEC §7 "Groups and coalescing travel": `/v1/items` takes the
/// `Spool-Group` and `Spool-Coalesce-Key` headers, and an item pushed from
/// a grouped edge stays grouped at the centre, each qualified by its
/// sender like a key.
#[test]
fn groups_and_coalesce_keys_travel() {
    each_backend(|env| {
        env.run(&["init"]).success();
        let s = Serve::start(env, &[]);
        let a = agent();
        let url = s.url("/v1/items");
        let headers = [("Spool-Group", "web"), ("Spool-Coalesce-Key", "cfg")];
        let first = post(&a, &url, &headers, b"v1");
        assert_eq!(first.status, 201, "{}", first.body);
        let r = post(&a, &url, &headers, b"v2");
        assert_eq!(r.status, 201, "{}", r.body);
        let long = "g".repeat(2000);
        let r = post(&a, &url, &[("Spool-Group", long.as_str())], b"x");
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.error().contains("Spool-Group"), "{}", r.body);

        let edge = Env::new("edge.db");
        edge.run(&["init"]).success();
        edge.run(&["enqueue", "--group", "orders", "o1"]).success();
        edge.run(&["enqueue", "--coalesce-key", "status", "s1"])
            .success();
        edge.run(&["replay", "--push", &s.url("/v1/push")])
            .success();
        edge.run(&["enqueue", "--coalesce-key", "status", "s2"])
            .success();
        edge.run(&["replay", "--push", &s.url("/v1/push")])
            .success();
        let uuid = edge.run(&["config", "uuid"]).get_output().stdout.clone();
        let uuid = String::from_utf8(uuid).unwrap().trim().to_string();
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);

        let got: Vec<(String, serde_json::Value, serde_json::Value)> = env
            .drain()
            .iter()
            .map(|i| {
                (
                    i["payload"].as_str().unwrap().to_string(),
                    i["group"].clone(),
                    i["coalesce_key"].clone(),
                )
            })
            .collect();
        let scoped = |v: &str| serde_json::Value::from(format!("{uuid}:{v}"));
        assert_eq!(
            got,
            [
                ("v2".into(), "web".into(), "cfg".into()),
                ("o1".into(), scoped("orders"), serde_json::Value::Null),
                ("s2".into(), serde_json::Value::Null, scoped("status")),
            ]
        );
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
        // This scrape's own snapshot.
        format!("spool_serve_snapshots_total{{{label}}} 1\n"),
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
        &format!("# edge boxes\n{TOKEN_A} edge-* name=edge-boxes site-?\n\n{TOKEN_B}\n"),
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
    // /v1/items and /metrics need a valid token; health needs none.
    let i = s.url("/v1/items");
    assert_eq!(post(&a, &i, &[], b"x").status, 401);
    assert_eq!(
        post(&a, &i, &[("Authorization", &bearer_a)], b"item").status,
        201
    );
    assert_eq!(get(&a, &s.url("/healthz"), &[]).status, 200);
    let r = get(&a, &s.url("/metrics"), &[]);
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(!r.body.contains("spool_"), "{}", r.body);
    assert_eq!(
        get(
            &a,
            &s.url("/metrics"),
            &[("Authorization", "Bearer wrong-token")]
        )
        .status,
        401
    );
    let r = get(&a, &s.url("/metrics"), &[("Authorization", &bearer_b)]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("spool_depth{"), "{}", r.body);

    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    // The access log names the token: by its name=, or by the first 8
    // hex digits of its SHA-256.
    use sha2::Digest as _;
    let b_name: String = sha2::Sha256::digest(TOKEN_B.as_bytes())[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for want in [
        "POST /v1/push 403".to_string(),
        "POST /v1/push 200".to_string(),
        "client=edge-1 token=edge-boxes\n".to_string(),
        format!("client=other token={b_name}\n"),
        "GET /metrics 200 ".to_string(),
        "GET /metrics 401 ".to_string(),
    ] {
        assert!(
            stopped.stderr.contains(&want),
            "{want} not in\n{}",
            stopped.stderr
        );
    }
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
    {
        // A key that group or others may read: served, with a warning.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o640)).unwrap();
        let s = Serve::start(
            &env,
            &[
                "--tls-cert",
                cert_file.to_str().unwrap(),
                "--tls-key",
                key_file.to_str().unwrap(),
            ],
        );
        let stopped = s.stop();
        assert!(
            stopped.stderr.contains(&format!(
                "spool: warning: the TLS key {} is readable by its group (mode 0640): whoever \
                 can read it can impersonate this server; chmod 600 it",
                key_file.display()
            )),
            "{}",
            stopped.stderr
        );
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
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
    let a = roots.ureq_agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build(),
    );
    let r = post(&a, &s.url("/v1/items"), &[], b"over tls");
    assert_eq!(r.status, 201, "{}", r.body);
    let r = push(&a, &s, &items_body("tls-edge", 0, 1, &["pushed over tls"]));
    assert_eq!(r.status, 200, "{}", r.body);
    // A client that does not trust the CA fails the handshake, and plain
    // HTTP to the TLS port gets no answer; the server goes on.
    let untrusting = spool::tls::TlsTrust::system().load().unwrap();
    let b = untrusting.ureq_agent(ureq::Agent::config_builder().build());
    assert!(b.get(&s.url("/healthz")).call().is_err());
    let answer = raw(&s.addr, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(get(&a, &s.url("/healthz"), &[]).status, 200);
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(!stopped.stderr.contains("warning"), "{}", stopped.stderr);
    assert_eq!(payloads(&env), ["over tls", "pushed over tls"]);
}

#[test]
fn head_is_get_without_the_body_and_odd_methods_are_logged_short() {
    let env = Env::new("spool.db");
    let s = Serve::start(&env, &["-v"]);
    // Load balancers check health with HEAD.
    let answer = raw(
        &s.addr,
        b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(raw_status(&answer), 200, "{answer}");
    assert!(answer.ends_with("\r\n\r\n"), "no body: {answer:?}");
    assert!(
        answer.to_ascii_lowercase().contains("content-length: "),
        "{answer}"
    );
    let r = post(&agent(), &s.url("/healthz"), &[], b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD")));
    // A 5,000-byte method is answered and logged cut short.
    let method = "X".repeat(5000);
    let answer = raw(
        &s.addr,
        format!("{method} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(raw_status(&answer), 405, "{answer}");
    let stopped = s.stop();
    assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    assert!(
        stopped.stderr.contains("HEAD /healthz 200 "),
        "{}",
        stopped.stderr
    );
    assert!(
        stopped
            .stderr
            .contains(&format!(" {} /healthz 405 ", "X".repeat(32))),
        "{}",
        stopped.stderr
    );
    assert!(
        !stopped.stderr.contains(&"X".repeat(33)),
        "the method logged in full:\n{}",
        stopped.stderr
    );
}

/// A gzip body of `n` bytes of `b` (tiny on the wire).
fn gzip_of(b: u8, n: usize) -> Vec<u8> {
    gzip(&vec![b; n])
}

#[test]
fn max_body_bounds_the_decompressed_size() {
    each_backend(|env| {
        let s = Serve::start(env, &["--max-body", "1MiB"]);
        let a = agent();
        let gz = [("Content-Encoding", "gzip")];
        // A few KB on the wire, 3 MiB inflated: over --max-body.
        let bomb = gzip_of(b'x', 3 << 20);
        assert!(bomb.len() < 16 << 10);
        let r = post(&a, &s.url("/v1/items"), &gz, &bomb);
        assert_eq!(r.status, 413, "{}", r.body);
        assert_eq!(
            r.error(),
            "request body is over the limit of 1048576 bytes (--max-body) once decompressed"
        );
        let r = post(&a, &s.url("/v1/push"), &gz, &bomb);
        assert_eq!(r.status, 413, "{}", r.body);
        // Just under it: stored.
        let r = post(&a, &s.url("/v1/items"), &gz, &gzip_of(b'y', 1 << 20));
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(s.stop().code, Some(0));
        assert_eq!(env.size(), 1);

        // A payload limit over the memory budget no longer reserves
        // itself up front: gzip items are served.
        let s = Serve::start(env, &["--max-payload", "300MiB"]);
        let r = post(&a, &s.url("/v1/items"), &gz, &gzip(b"small"));
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(s.stop().code, Some(0));
    });
}

#[test]
fn small_gzip_bodies_never_wait_for_the_budget() {
    let env = Env::new("spool.db");
    // 64 MiB bodies allowed: a gzip body that reserved its limit up front
    // would leave room for four at a time. (All 40 come from one address.)
    let s = Serve::start(
        &env,
        &["--max-body", "64MiB", "--max-connections-per-peer", "64"],
    );
    const CLIENTS: usize = 40;
    let barrier = std::sync::Barrier::new(CLIENTS);
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (s, barrier) = (&s, &barrier);
            scope.spawn(move || {
                let payload = "p".repeat(150);
                let body = gzip(&items_body(&format!("gz-{c}"), 0, 1, &[payload.as_str()]));
                let a = agent();
                barrier.wait();
                let r = post(
                    &a,
                    &s.url("/v1/push"),
                    &[("Content-Encoding", "gzip")],
                    &body,
                );
                assert_eq!(r.status, 200, "client {c}: {}", r.body);
            });
        }
    });
    assert_eq!(s.stop().code, Some(0));
    assert_eq!(env.size(), CLIENTS as u64);
}

/// A push body of `n` entries of `size`-byte payloads for `client`.
fn big_push(client: &str, n: u64, size: usize) -> Vec<u8> {
    let payloads: Vec<String> = (0..n)
        .map(|i| format!("{i:08}{}", "z".repeat(size - 8)))
        .collect();
    let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
    items_body(client, 0, 1, &refs)
}

/// Read from `s` until `needle` has arrived; panics on close.
fn read_until(s: &mut std::net::TcpStream, needle: &str) -> String {
    use std::io::Read;
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
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

#[test]
fn the_memory_budget_is_shared_and_nothing_is_lost() {
    use std::io::Write;
    each_backend(|env| {
        let s = Serve::start(env, &["--memory-budget", "1MiB", "--max-body", "1MiB"]);
        let a = agent();
        // One request holds much of the budget while its body arrives (a
        // declared length is held once the handler runs: 100 Continue).
        let held = big_push("first", 130, 2900);
        assert!(
            held.len() > 380 << 10 && held.len() < 450 << 10,
            "{}",
            held.len()
        );
        let mut first = std::net::TcpStream::connect(&s.addr).unwrap();
        write!(
            first,
            "POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\
             Expect: 100-continue\r\n\r\n",
            held.len()
        )
        .unwrap();
        read_until(&mut first, "100 Continue\r\n\r\n");
        first.write_all(&held[..held.len() / 2]).unwrap();
        // Another that does not fit beside it: 503 with Retry-After,
        // nothing applied.
        let second = big_push("second", 130, 2900);
        let r = push(&a, &s, &second);
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.header("retry-after"), Some("5"), "{}", r.body);
        assert!(r.error().contains("--memory-budget"), "{}", r.body);
        let r = get(&a, &s.url("/v1/clients/second"), &[]);
        assert_eq!(r.json()["last_seq"], 0);
        // The first finishes; then the second fits.
        first.write_all(&held[held.len() / 2..]).unwrap();
        let answer = read_until(&mut first, "\"duplicates\"");
        assert_eq!(raw_status(&answer), 200, "{answer}");
        drop(first);
        let r = eventually_status(&a, &s, &second, 200);
        assert_eq!(r.json()["last_seq"], 130);

        // A request that alone needs more than the whole budget can never
        // be served: 413 saying so (a sender halves its batch).
        let r = push(&a, &s, &big_push("huge", 300, 3000));
        assert_eq!(r.status, 413, "{}", r.body);
        assert_eq!(
            r.error(),
            "the request needs more memory than the server's whole budget of 1048576 bytes \
             (--memory-budget); send a smaller request"
        );

        // Many concurrent senders: every answer is 200, or 503 with
        // Retry-After; resent, every entry lands exactly once.
        const CLIENTS: usize = 8;
        std::thread::scope(|scope| {
            for c in 0..CLIENTS {
                let s = &s;
                scope.spawn(move || {
                    let body = big_push(&format!("many-{c}"), 40, 3000);
                    let a = agent();
                    eventually_status(&a, s, &body, 200);
                });
            }
        });
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
        assert_eq!(
            payloads(env).len(),
            260 + CLIENTS * 40,
            "none lost, none twice"
        );
        env.run(&["verify"]).success();
    });
}

/// Push `body` until the answer has `status`; every other answer must
/// be 503 with `Retry-After` (the budget frees up as other requests
/// finish). Panics after the deadline.
fn eventually_status(a: &ureq::Agent, s: &Serve, body: &[u8], status: u16) -> Reply {
    let start = std::time::Instant::now();
    loop {
        let r = push(a, s, body);
        if r.status == status {
            return r;
        }
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.header("retry-after"), Some("5"), "{}", r.body);
        assert!(
            start.elapsed() < DEADLINE,
            "no {status}: {} {}",
            r.status,
            r.body
        );
    }
}
