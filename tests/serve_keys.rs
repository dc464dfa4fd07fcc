//! Keys and bookkeeping at a receiving spool, through the real binaries
//! on loopback (SPEC §7 "Security"): skip entries store nothing but the
//! advanced `last_seq`.

mod cli_common;
mod common;
mod serve_common;

use cli_common::*;
use serve_common::*;
use spool::push::wire::OutEntry;
use std::path::{Path, PathBuf};

/// POST a push body (no token).
fn push(s: &Serve, body: &[u8]) -> Reply {
    post(
        &agent(),
        &s.url("/v1/push"),
        &[("Content-Type", "application/json")],
        body,
    )
}

/// Three pushes of `n` skip entries each from client `edge`.
fn push_skips(s: &Serve, n: u64) {
    for round in 0..3 {
        let entries: Vec<OutEntry<'_>> = (round * n + 1..=(round + 1) * n)
            .map(|seq| OutEntry::Skip { seq })
            .collect();
        let r = push(s, &body("edge", round * n, &entries));
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
    const N: u64 = 20_000;
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
    push_skips(&s, 20_000);
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
    assert_eq!(clients[0]["last_seq"], 60_000);
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
