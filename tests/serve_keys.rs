//! Keys at a receiving spool, through the real binaries on loopback (SPEC
//! §7 "Security"): keys are scoped per sender, so one client can never
//! make another client's item vanish by sending its key first (by push or
//! through `/v1/items`), unless `serve --shared-keys` asks for one key
//! space; keys holding a NUL byte are refused on every way in; and skip
//! entries store nothing but the advanced `last_seq`.

mod cli_common;
mod common;
mod http_sink;
mod serve_common;

use cli_common::*;
use serve_common::*;
use sha2::{Digest as _, Sha256};
use spool::push::wire::OutEntry;
use std::path::{Path, PathBuf};

/// Limited to `edge-*` (and named `evil` where a name is given).
const EDGE_TOKEN: &str = "edge-token-5c1e0f7a9b3d4e21";
const BILLING_TOKEN: &str = "billing-token-8a2f6c4e0d1b3957";
const PLAIN_TOKEN: &str = "plain-token-0e4d2c7b9f1a6358";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
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

/// POST a push body as `token`.
fn push_as(a: &ureq::Agent, s: &Serve, token: Option<&str>, body: &[u8]) -> Reply {
    let auth = token.map(bearer);
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(b) = &auth {
        headers.push(("Authorization", b));
    }
    post(a, &s.url("/v1/push"), &headers, body)
}

/// POST one item with `key` as `token`.
fn item_as(a: &ureq::Agent, s: &Serve, token: &str, key: &str, payload: &[u8]) -> Reply {
    post(
        a,
        &s.url("/v1/items"),
        &[("Authorization", &bearer(token)), ("Idempotency-Key", key)],
        payload,
    )
}

/// The pending items of `env` as (key, payload).
fn keyed(env: &Env) -> Vec<(String, String)> {
    env.drain()
        .iter()
        .map(|v| {
            (
                v["key"].as_str().unwrap().to_string(),
                v["payload"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, p)| (k.to_string(), p.to_string()))
        .collect()
}

/// An edge spool next to the centre's, and its uuid (its push client id).
fn edge(centre: &Env) -> (Env, String) {
    let file = if centre.is_ndjson() {
        "edge.ndjson"
    } else {
        "edge.db"
    };
    let e = Env::new(file);
    e.run(&["init"]).success();
    let uuid = stdout(&e.run(&["config", "uuid"]).success())
        .trim()
        .to_string();
    (e, uuid)
}

#[test]
fn a_pushing_client_cannot_make_another_clients_item_vanish() {
    each_backend(|centre| {
        let (billing, uuid) = edge(centre);
        let tokens = write_file(
            centre.dir.path(),
            "tokens",
            &format!("{EDGE_TOKEN} edge-*\n{BILLING_TOKEN} {uuid}\n"),
        );
        let s = Serve::start(centre, &["--token-file", tokens.to_str().unwrap()]);
        let a = agent();
        // A token allowed only as edge-* pushes billing's key first.
        let r = push_as(
            &a,
            &s,
            Some(EDGE_TOKEN),
            &body("edge-evil", 0, &[item(1, "order-42", "FORGED")]),
        );
        assert_eq!(
            (r.status, &r.json()["applied"]),
            (200, &1.into()),
            "{}",
            r.body
        );
        // The billing spool pushes its real order-42 and lets it go.
        billing.enqueue_key("REAL", "order-42");
        let auth = format!("Authorization: {}", bearer(BILLING_TOKEN));
        let out = billing
            .run(&[
                "replay",
                "--push",
                &s.url("/v1/push"),
                "-H",
                &auth,
                "--json",
            ])
            .code(0);
        assert_eq!(json_out(&out)["delivered"], 1, "{}", stdout(&out));
        assert_eq!(billing.size(), 0);
        assert_eq!(s.stop().code, Some(0));
        // Both items are at the centre, each under its client's scope.
        let billing_key = format!("{uuid}:order-42");
        assert_eq!(
            keyed(centre),
            pairs(&[("edge-evil:order-42", "FORGED"), (&billing_key, "REAL")])
        );
        // Downstream, the scoped key is the item's Idempotency-Key.
        let sink = http_sink::Sink::always(200);
        centre.run(&["replay", "--url", &sink.url("/in")]).code(0);
        let sent: Vec<(String, String)> = sink
            .received()
            .iter()
            .map(|r| {
                (
                    r.header("idempotency-key").unwrap_or_default().to_string(),
                    String::from_utf8_lossy(&r.body).into_owned(),
                )
            })
            .collect();
        assert_eq!(
            sent,
            pairs(&[("edge-evil:order-42", "FORGED"), (&billing_key, "REAL")])
        );
    });
}

#[test]
fn a_token_cannot_make_another_tokens_item_vanish_through_items() {
    each_backend(|centre| {
        let tokens = write_file(
            centre.dir.path(),
            "tokens",
            &format!(
                "{EDGE_TOKEN} edge-* name=evil\n{BILLING_TOKEN} name=billing\n{PLAIN_TOKEN}\n"
            ),
        );
        let s = Serve::start(centre, &["--token-file", tokens.to_str().unwrap()]);
        let a = agent();
        let r = item_as(&a, &s, EDGE_TOKEN, "invoice-7", b"FORGED");
        assert_eq!(r.status, 201, "{}", r.body);
        let r = item_as(&a, &s, BILLING_TOKEN, "invoice-7", b"REAL");
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.json()["deduplicated"], false);
        let id = r.json()["id"].clone();
        // The same token's retry is a dedup hit on its own item.
        let r = item_as(&a, &s, BILLING_TOKEN, "invoice-7", b"RETRY");
        assert_eq!((r.status, &r.json()["id"]), (200, &id), "{}", r.body);
        // A token without name= is named by its SHA-256's first 8 hex digits.
        let r = item_as(&a, &s, PLAIN_TOKEN, "invoice-7", b"PLAIN");
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(s.stop().code, Some(0));
        let plain: String = Sha256::digest(PLAIN_TOKEN.as_bytes())[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let plain_key = format!("{plain}:invoice-7");
        assert_eq!(
            keyed(centre),
            pairs(&[
                ("evil:invoice-7", "FORGED"),
                ("billing:invoice-7", "REAL"),
                (&plain_key, "PLAIN")
            ])
        );
    });
}

#[test]
fn shared_keys_keep_one_key_space_for_every_sender() {
    each_backend(|centre| {
        let (billing, _) = edge(centre);
        let tokens = write_file(
            centre.dir.path(),
            "tokens",
            &format!("{EDGE_TOKEN} edge-* name=evil\n{BILLING_TOKEN} name=billing\n"),
        );
        let s = Serve::start(
            centre,
            &["--shared-keys", "--token-file", tokens.to_str().unwrap()],
        );
        let a = agent();
        let r = push_as(
            &a,
            &s,
            Some(EDGE_TOKEN),
            &body("edge-evil", 0, &[item(1, "order-42", "FORGED")]),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        billing.enqueue_key("REAL", "order-42");
        let auth = format!("Authorization: {}", bearer(BILLING_TOKEN));
        let out = billing
            .run(&[
                "replay",
                "--push",
                &s.url("/v1/push"),
                "-H",
                &auth,
                "--json",
            ])
            .code(0);
        assert_eq!(
            json_out(&out)["delivered"],
            1,
            "a dedup hit counts as applied"
        );
        let r = item_as(&a, &s, EDGE_TOKEN, "invoice-7", b"FORGED");
        assert_eq!(r.status, 201, "{}", r.body);
        let r = item_as(&a, &s, BILLING_TOKEN, "invoice-7", b"REAL");
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["deduplicated"], true);
        assert_eq!(s.stop().code, Some(0));
        assert_eq!(
            keyed(centre),
            pairs(&[("order-42", "FORGED"), ("invoice-7", "FORGED")])
        );
    });
}

/// An item with key `a\0b` written the way an older version (or the
/// reference) could write it, below what `spool` itself accepts now.
fn legacy_nul_key_item(env: &Env, payload: &str) {
    if env.is_ndjson() {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&env.path)
            .unwrap();
        writeln!(
            f,
            r#"{{"op":"put","id":1,"payload":"{payload}","idempotencyKey":"a\u0000b","attempts":0}}"#
        )
        .unwrap();
    } else {
        let db = rusqlite::Connection::open(&env.path).unwrap();
        db.execute(
            "INSERT INTO morph_offline_queue (payload, idempotency_key, enqueued_at) \
             VALUES (?1, 'a' || char(0) || 'b', 1700000000)",
            [payload],
        )
        .unwrap();
    }
}

#[test]
fn keys_with_a_nul_byte_are_refused_on_every_way_in() {
    each_backend(|env| {
        env.enqueue("before");
        // enqueue --ndjson: exit 65 naming the line, nothing enqueued.
        let a = env
            .run_in(
                &["enqueue", "--ndjson"],
                "{\"payload\":\"ok\",\"key\":\"fine\"}\n{\"payload\":\"x\",\"key\":\"a\\u0000b\"}\n",
            )
            .code(65);
        let err = stderr(&a);
        assert!(err.starts_with("spool: error: "), "{err}");
        assert!(err.contains("stdin line 2"), "{err}");
        assert!(err.contains("NUL byte"), "{err}");
        // import: exit 65 naming the line, nothing imported.
        let export = write_file(
            env.dir.path(),
            "export.ndjson",
            "{\"id\":50,\"payload\":\"ok\",\"key\":\"fine\"}\n{\"id\":51,\"payload\":\"x\",\"key\":\"a\\u0000b\"}\n",
        );
        let a = env.run(&["import", export.to_str().unwrap()]).code(65);
        let err = stderr(&a);
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("NUL byte"), "{err}");
        assert!(err.contains("nothing was imported"), "{err}");
        assert_eq!(payloads(env), ["before"]);

        // At a receiver: a pushed entry is rejected with the reason, a
        // posted item is 400; nothing is stored.
        let s = Serve::start(env, &[]);
        let a = agent();
        let r = push_as(
            &a,
            &s,
            None,
            &body("edge-1", 0, &[item(1, "a\0b", "x"), item(2, "a", "b\0x")]),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!((&v["last_seq"], &v["applied"]), (&2.into(), &1.into()));
        assert_eq!(v["rejected"][0]["seq"], 1);
        assert!(
            v["rejected"][0]["error"]
                .as_str()
                .unwrap()
                .contains("NUL byte"),
            "{v}"
        );
        let head = format!(
            "POST /v1/items HTTP/1.1\r\nHost: {}\r\nIdempotency-Key: a\0b\r\n\
             Content-Length: 1\r\nConnection: close\r\n\r\nx",
            s.addr
        );
        let answer = raw(&s.addr, head.as_bytes());
        assert_eq!(raw_status(&answer), 400, "{answer}");
        assert_eq!(s.stop().code, Some(0));
        assert_eq!(keyed(env), pairs(&[("", "before"), ("edge-1:a", "b\0x")]));
        let clients = ndjson(
            &env.run(&["clients", "--json"])
                .success()
                .get_output()
                .stdout,
        );
        assert_eq!(clients[0]["rejected"][0]["seq"], 1);
    });
}

#[test]
fn a_spool_that_holds_a_nul_key_from_before_keeps_it_and_never_pushes_it() {
    each_backend(|centre| {
        let (old, _) = edge(centre);
        legacy_nul_key_item(&old, "legacy");
        old.enqueue("fine");
        // verify reports it, as a warning: the spool is healthy.
        let a = old.run(&["verify"]).code(0);
        assert!(stdout(&a).contains("NUL byte"), "{}", stdout(&a));
        // A push dead-letters it without sending it; the rest goes.
        let s = Serve::start(centre, &[]);
        let out = old
            .run(&["replay", "--push", &s.url("/v1/push"), "--json"])
            .code(1);
        let r = json_out(&out);
        assert_eq!(
            (&r["delivered"], &r["unsendable"]),
            (&1.into(), &1.into()),
            "{r}"
        );
        assert_eq!(s.stop().code, Some(0));
        assert_eq!(payloads(centre), ["fine"]);
        let dead = ndjson(
            &old.run(&["dlq", "list", "--json"])
                .success()
                .get_output()
                .stdout,
        );
        assert_eq!(dead.len(), 1);
        assert!(
            dead[0]["last_error"]
                .as_str()
                .unwrap()
                .contains("not pushed: the idempotency key contains a NUL byte"),
            "{:?}",
            dead[0]
        );
        assert_eq!(old.size(), 0);
    });
}

/// Three pushes of `n` skip entries each from client `edge`.
fn push_skips(s: &Serve, n: u64) {
    let a = agent();
    for round in 0..3 {
        let entries: Vec<OutEntry<'_>> = (round * n + 1..=(round + 1) * n)
            .map(|seq| OutEntry::Skip { seq })
            .collect();
        let r = push_as(&a, s, None, &body("edge", round * n, &entries));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["last_seq"], (round + 1) * n);
    }
}

/// Rows of `spool_push_entries` in the SQLite spool at `path`.
fn sqlite_entry_rows(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM spool_push_entries", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn skips_store_nothing_at_the_receiver() {
    const N: u64 = 10_000;
    each_backend(|env| {
        env.run(&["init", "--max-depth", "10"]).success();
        let s = Serve::start(env, &[]);
        push_skips(&s, N);
        assert_eq!(s.stop().code, Some(0));
        let clients = ndjson(
            &env.run(&["clients", "--json"])
                .success()
                .get_output()
                .stdout,
        );
        assert_eq!(clients[0]["last_seq"], 3 * N);
        assert_eq!(env.size(), 0);
        if env.is_ndjson() {
            // Three client lines, one per push, each with its last_seq.
            let text = std::fs::read_to_string(&env.path).unwrap();
            assert!(!text.contains("skipped"), "{text}");
            assert!(text.len() < 1024, "{} bytes for skips", text.len());
        } else {
            assert_eq!(sqlite_entry_rows(&env.path), 0);
            // Rows an older version left for skips go with `compact`.
            let db = rusqlite::Connection::open(&env.path).unwrap();
            db.execute_batch(
                "WITH RECURSIVE n(s) AS (SELECT 1 UNION ALL SELECT s + 1 FROM n WHERE s < 5000) \
                 INSERT INTO spool_push_entries (client_id, seq, outcome) \
                 SELECT 'old', s, 'skipped' FROM n;",
            )
            .unwrap();
            drop(db);
            assert_eq!(sqlite_entry_rows(&env.path), 5000);
            env.run(&["compact"]).success();
            assert_eq!(sqlite_entry_rows(&env.path), 0);
        }
    });
}

fn psql(base: &str, sql: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([base, "-XAtqc", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn skips_store_nothing_at_a_postgres_receiver() {
    let Some(base) = common::pg_url("serve_keys::skips_store_nothing_at_a_postgres_receiver")
    else {
        return;
    };
    let url = common::pg_spool_url(&base, "skips");
    let name = url.rsplit_once("spool=").unwrap().1.to_string();
    let env = Env {
        dir: tempfile::tempdir().unwrap(),
        path: PathBuf::from(&url),
    };
    env.run(&["init", "--max-depth", "10"]).success();
    let s = Serve::start(&env, &[]);
    push_skips(&s, 10_000);
    assert_eq!(s.stop().code, Some(0));
    let rows = |extra: &str| {
        psql(
            &base,
            &format!("SELECT count(*) FROM spool.push_entries WHERE spool = '{name}'{extra}"),
        )
    };
    assert_eq!(rows(""), "0");
    let clients = ndjson(
        &env.run(&["clients", "--json"])
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(clients[0]["last_seq"], 30_000);
    // Rows an older version left for skips go with `compact`.
    psql(
        &base,
        &format!(
            "INSERT INTO spool.push_entries (spool, client_id, seq, outcome) \
             SELECT '{name}', 'old', s, 'skipped' FROM generate_series(1, 5000) s"
        ),
    );
    assert_eq!(rows(""), "5000");
    env.run(&["compact"]).success();
    assert_eq!(rows(""), "0");
}
