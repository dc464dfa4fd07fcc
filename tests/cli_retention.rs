//! SPEC §9 "Retention of delivered items" through the binary: `config
//! retain`, `init --retain`, the evidence `replay --exec` and `--url`
//! record, `list --state`, `show`, dedup of a delivered key
//! (`"state":"delivered"`), `stats`, `export`/`import`, `compact`
//! pruning, and the reference view of the spool afterwards.

mod cli_common;
mod http_sink;

use cli_common::*;
use http_sink::Sink;

fn json_lines(a: &assert_cmd::assert::Assert) -> Vec<serde_json::Value> {
    ndjson(&a.get_output().stdout)
}

#[test]
fn config_and_init_remember_retain() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--retain", "7d"]).success();
        let out = env.run(&["config", "retain"]).success();
        assert_eq!(stdout(&out).trim(), "7d", "{b}");
        env.run(&["config", "retain", "36h"]).success();
        let all = json_out(&env.run(&["--json", "config"]).success());
        assert_eq!(all["retain"], "1d12h", "{b}: {all}");
        // A bad value changes nothing.
        let a = env.run(&["config", "retain", "forever"]).code(64);
        assert!(stderr(&a).contains("give off"), "{}", stderr(&a));
        assert_eq!(
            stdout(&env.run(&["config", "retain"]).success()).trim(),
            "1d12h"
        );
        env.run(&["config", "retain", "off"]).success();
        assert_eq!(
            stdout(&env.run(&["config", "retain"]).success()).trim(),
            "off"
        );
        let fresh = Env::new(b);
        fresh.run(&["init", "--retain", "sometimes"]).code(64);
        assert!(!fresh.path.exists(), "{b}: a refused init creates nothing");
    }
}

#[test]
fn exec_deliveries_are_retained_and_their_keys_dedup() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--retain", "1h"]).success();
        let id = env.enqueue_key("charge card 42", "order-42");
        let other = env.enqueue("no key");
        env.run(&["replay", "--exec", "cat"]).success();
        assert_eq!(env.size(), 0, "{b}");

        let listed = json_lines(
            &env.run(&["--json", "list", "--state", "delivered"])
                .success(),
        );
        assert_eq!(listed.len(), 2, "{b}: {listed:?}");
        let first = &listed[0];
        assert_eq!(first["id"], id);
        assert_eq!(first["state"], "delivered");
        assert_eq!(first["evidence"], serde_json::json!({"exit_status": 0}));
        assert_eq!(first["payload"], "charge card 42");
        assert!(first["delivered_at"].is_string(), "{first}");
        assert_eq!(listed[1]["id"], other);
        let none = env.run(&["list", "--state", "pending"]).success();
        assert!(stderr(&none).contains("no pending items match"), "{b}");
        let none = env.run(&["list", "--state", "dead"]).success();
        assert!(stderr(&none).contains("no dead letters match"), "{b}");
        let plain = stdout(&env.run(&["list", "--state", "delivered"]).success());
        assert!(plain.contains("exit 0"), "{b}: {plain}");

        let shown = stdout(&env.run(&["show", &id.to_string()]).success());
        assert!(shown.contains("delivered (retained"), "{b}: {shown}");
        assert!(shown.contains("exit 0"), "{b}: {shown}");
        let raw = env.run(&["show", &id.to_string(), "--raw"]).success();
        assert_eq!(raw.get_output().stdout, b"charge card 42");

        // A cron re-run of the producer stores nothing.
        let again = env
            .run(&["--json", "enqueue", "charge card 42", "--key", "order-42"])
            .success();
        let v = json_out(&again);
        assert_eq!(
            v,
            serde_json::json!({"id": id, "deduplicated": true, "state": "delivered"}),
            "{b}"
        );
        assert!(
            stderr(&again).contains("already delivered"),
            "{}",
            stderr(&again)
        );
        assert_eq!(env.size(), 0, "{b}");

        let stats = json_out(&env.run(&["--json", "stats"]).success());
        assert_eq!(stats["delivered_retained"], 2, "{b}: {stats}");
        assert_eq!(stats["retain"], "1h");
        let prom = stdout(&env.run(&["stats", "--prometheus"]).success());
        assert!(
            prom.lines()
                .any(|l| l.starts_with("spool_delivered_retained{") && l.ends_with(" 2")),
            "{b}: {prom}"
        );

        // Compaction keeps them, and says so.
        let c = stdout(&env.run(&["compact"]).success());
        assert!(
            c.contains("0 pending, 0 dead letters, 2 delivered items retained"),
            "{b}: {c}"
        );
        let c = json_out(&env.run(&["--json", "compact"]).success());
        assert_eq!(c["delivered_retained"], 2, "{b}: {c}");
    }
}

#[test]
fn http_deliveries_keep_the_status_and_move_with_export() {
    let sink = Sink::always(202);
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--retain", "7d"]).success();
        let id = env.enqueue_key("event", "ev-1");
        env.run(&["replay", "--url", &sink.url("/in")]).success();
        let d = json_out(&env.run(&["--json", "show", &id.to_string()]).success());
        assert_eq!(
            d["evidence"],
            serde_json::json!({"http_status": 202}),
            "{b}"
        );

        // export carries the delivered record; import keeps it (and its
        // key's dedup) on the other backend.
        let exported = env.run(&["export"]).success();
        let records = json_lines(&exported);
        let rec = records
            .iter()
            .find(|r| r["state"] == "delivered")
            .unwrap_or_else(|| panic!("{b}: no delivered record in {records:?}"));
        assert_eq!(rec["evidence"]["http_status"], 202);
        let other = Env::new(if b.ends_with(".db") {
            "other.ndjson"
        } else {
            "other.db"
        });
        other.run(&["init", "--retain", "7d"]).success();
        let out = other
            .run_in(
                &["--json", "import", "-"],
                exported.get_output().stdout.clone(),
            )
            .success();
        assert_eq!(json_out(&out)["delivered"], 1, "{b}");
        let moved = json_out(&other.run(&["--json", "show", &id.to_string()]).success());
        assert_eq!(moved["state"], "delivered");
        assert_eq!(moved["delivered_at"], d["delivered_at"]);
        let again = json_out(
            &other
                .run(&["--json", "enqueue", "event", "--key", "ev-1"])
                .success(),
        );
        assert_eq!(again["state"], "delivered", "{b}: {again}");
    }
}

#[test]
fn without_retain_nothing_is_kept() {
    for b in backends() {
        let env = Env::new(b);
        env.enqueue_key("x", "k");
        env.run(&["replay", "--exec", "cat"]).success();
        let out = env.run(&["list", "--state", "delivered"]).success();
        assert!(stderr(&out).contains("no delivered items match"), "{b}");
        assert!(
            !env.files().iter().any(|f| f.ends_with(".delivered")),
            "{b}"
        );
        let v = json_out(&env.run(&["--json", "enqueue", "x", "--key", "k"]).success());
        assert_eq!(v["deduplicated"], false, "{b}");
        assert!(v.get("state").is_none(), "{v}");
        let stats = json_out(&env.run(&["--json", "stats"]).success());
        assert_eq!(stats["delivered_retained"], 0);
        assert_eq!(stats["retain"], "off");
        let c = stdout(&env.run(&["compact"]).success());
        assert!(
            c.contains("1 pending, 0 dead letters, id high-water mark 2"),
            "{b}: {c}"
        );
    }
}

/// Delivered items leave the reference table exactly as before; their
/// copies live in `spool_delivered`, and `compact` prunes the expired
/// ones (the window is moved back in the file: no sleeping).
#[test]
fn sqlite_reference_view_and_compact_pruning() {
    let env = Env::new("q.db");
    env.run(&["init", "--retain", "1h"]).success();
    for i in 0..5 {
        env.enqueue_key(&format!("p{i}"), &format!("k{i}"));
    }
    let pending = env.enqueue("stays");
    // 75: a due item was left for the next run by --limit.
    env.run(&["replay", "--exec", "cat", "--limit", "5"])
        .code(75);
    let conn = rusqlite::Connection::open(&env.path).unwrap();
    let ids: Vec<i64> = conn
        .prepare("SELECT id FROM morph_offline_queue ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        ids,
        vec![pending as i64],
        "the reference table holds pending items only"
    );
    // Three records' windows end (they were delivered two hours ago).
    conn.execute(
        "UPDATE spool_delivered SET delivered_at = delivered_at - 7200000 WHERE id <= 3",
        [],
    )
    .unwrap();
    drop(conn);
    let report = json_out(&env.run(&["--json", "compact"]).success());
    assert_eq!(report["pruned_delivered"], 3, "{report}");
    assert_eq!(report["delivered_retained"], 2, "{report}");
    let left: Vec<u64> = json_lines(
        &env.run(&["--json", "list", "--state", "delivered"])
            .success(),
    )
    .iter()
    .map(|v| v["id"].as_u64().unwrap())
    .collect();
    assert_eq!(left, vec![4, 5]);
    // Their keys are free again; the others still dedup.
    let v = json_out(
        &env.run(&["--json", "enqueue", "again", "--key", "k0"])
            .success(),
    );
    assert_eq!(v["deduplicated"], false);
    let v = json_out(
        &env.run(&["--json", "enqueue", "again", "--key", "k4"])
            .success(),
    );
    assert_eq!(v["state"], "delivered");
}

#[test]
fn list_state_rejects_due_outside_pending() {
    let env = Env::new("q.db");
    env.enqueue("x");
    let a = env.run(&["list", "--state", "delivered", "--due"]).code(64);
    assert!(
        stderr(&a).contains("--due applies to pending items"),
        "{}",
        stderr(&a)
    );
    env.run(&["list", "--state", "later"]).code(64);
    let held = env.run(&["hold", "1"]).success();
    drop(held);
    let v = json_lines(&env.run(&["--json", "list", "--state", "held"]).success());
    assert_eq!(v.len(), 1);
    let v = json_lines(&env.run(&["--json", "list", "--state", "pending"]).success());
    assert!(v.is_empty());
}

#[test]
fn compact_names_a_single_retained_item_in_the_singular() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--retain", "1h"]).success();
        env.enqueue("only");
        env.run(&["replay", "--exec", "cat"]).success();
        let c = stdout(&env.run(&["compact"]).success());
        assert!(
            c.contains(
                "0 pending, 0 dead letters, 1 delivered item retained, id high-water mark 1"
            ),
            "{b}: {c}"
        );
    }
}
