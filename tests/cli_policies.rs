//! SPEC §9 through the binary: `spool config on-full`, `init --on-full`,
//! `enqueue --group/--coalesce-key` (and the same fields in `--ndjson`),
//! `list --group`, the JSON item fields, concurrent producers against
//! `drop-oldest`, and `replay --concurrency` over many ordering groups.

mod cli_common;

use cli_common::*;
use std::collections::HashMap;
use std::process::Stdio;

fn json_lines(a: &assert_cmd::assert::Assert) -> Vec<serde_json::Value> {
    ndjson(&a.get_output().stdout)
}

#[test]
fn config_and_init_remember_on_full() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--max-depth", "2", "--on-full", "drop-oldest"])
            .success();
        let out = env.run(&["config", "on-full"]).success();
        assert_eq!(stdout(&out).trim(), "drop-oldest", "{b}");
        env.run(&["config", "on-full", "reject"]).success();
        let all = json_out(&env.run(&["--json", "config"]).success());
        assert_eq!(all["on_full"], "reject", "{b}: {all}");
        // A bad value changes nothing.
        let a = env.run(&["config", "on-full", "drop-newest"]).code(64);
        assert!(
            stderr(&a).contains("reject or drop-oldest"),
            "{}",
            stderr(&a)
        );
        assert_eq!(
            stdout(&env.run(&["config", "on-full"]).success()).trim(),
            "reject"
        );
        env.run(&["init", "--on-full", "sometimes"]).code(64);
    }
}

#[test]
fn drop_oldest_evicts_through_the_binary() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--max-depth", "2"]).success();
        env.enqueue("a");
        env.enqueue("b");
        env.run(&["enqueue", "c"]).code(75);
        env.run(&["config", "on-full", "drop-oldest"]).success();
        let a = env.run(&["--json", "enqueue", "c"]).success();
        let v = json_out(&a);
        assert_eq!(v["evicted"], serde_json::json!([1]), "{b}: {v}");
        assert!(v.get("replaced").is_none(), "{v}");
        let a = env.run(&["enqueue", "d"]).success();
        assert!(
            stderr(&a).contains("evicted item 2 to the dead letters"),
            "{}",
            stderr(&a)
        );
        let dead = json_lines(&env.run(&["dlq", "export"]).success());
        assert_eq!(dead.len(), 2);
        assert_eq!(dead[0]["last_error"], "evicted: spool full (max-depth 2)");
        let st = json_out(&env.run(&["--json", "stats"]).success());
        assert_eq!(st["on_full"], "drop-oldest");
        assert_eq!(st["evicted_total"], 2);
        let prom = stdout(&env.run(&["stats", "--prometheus"]).success());
        assert!(
            prom.contains("# TYPE spool_evicted_total counter"),
            "{prom}"
        );
        assert!(prom.contains("} 2\n"), "{prom}");
    }
}

/// Four producer processes against a bound of 20 with drop-oldest:
/// nothing is lost — every enqueued payload is either pending or a dead
/// letter, exactly once — and the bound holds.
#[test]
fn concurrent_producers_against_drop_oldest_lose_nothing() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["init", "--max-depth", "20", "--on-full", "drop-oldest"])
            .success();
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let script = format!(
                    "for i in $(seq 1 40); do \"$0\" -q -s \"$1\" enqueue \"p{p}-$i\" || exit 1; done"
                );
                std::process::Command::new("sh")
                    .args(["-c", &script, env!("CARGO_BIN_EXE_spool")])
                    .arg(&env.path)
                    .env_remove("SPOOL_PATH")
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut p in producers {
            assert!(p.wait().unwrap().success(), "{b}: a producer failed");
        }
        let pending: Vec<String> = env
            .drain()
            .iter()
            .map(|v| v["payload"].as_str().unwrap().to_string())
            .collect();
        let dead: Vec<String> = json_lines(&env.run(&["dlq", "export"]).success())
            .iter()
            .map(|v| v["payload"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(pending.len(), 20, "{b}");
        assert_eq!(pending.len() + dead.len(), 160, "{b}");
        let mut all: Vec<&String> = pending.iter().chain(&dead).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 160, "{b}: every payload exactly once");
        let st = json_out(&env.run(&["--json", "stats"]).success());
        assert_eq!(st["evicted_total"], 140, "{b}");
    }
}

#[test]
fn groups_and_coalesce_keys_through_enqueue_list_and_export() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["enqueue", "--group", "g1", "a"]).success();
        env.run(&["enqueue", "--coalesce-key", "temp", "20C"])
            .success();
        env.run_in(
            &["enqueue", "--ndjson"],
            "{\"payload\":\"b\",\"group\":\"g2\"}\n{\"payload\":\"c\",\"group\":\"g1\",\"coalesce_key\":\"x\"}\n",
        )
        .success();
        let a = env
            .run(&["--json", "enqueue", "--coalesce-key", "temp", "21C"])
            .success();
        let v = json_out(&a);
        assert_eq!(v["replaced"], serde_json::json!([2]), "{b}: {v}");
        let a = env
            .run(&["enqueue", "--coalesce-key", "temp", "22C"])
            .success();
        assert!(
            stderr(&a).contains("replaced item 5 (coalesced)"),
            "{}",
            stderr(&a)
        );
        let items = env.drain();
        let summary: Vec<(String, serde_json::Value, serde_json::Value)> = items
            .iter()
            .map(|v| {
                (
                    v["payload"].as_str().unwrap().to_string(),
                    v["group"].clone(),
                    v["coalesce_key"].clone(),
                )
            })
            .collect();
        use serde_json::json;
        assert_eq!(
            summary,
            vec![
                ("a".into(), json!("g1"), json!(null)),
                ("b".into(), json!("g2"), json!(null)),
                ("c".into(), json!("g1"), json!("x")),
                ("22C".into(), json!(null), json!("temp")),
            ],
            "{b}"
        );
        let g1: Vec<u64> = json_lines(&env.run(&["--json", "list", "--group", "g1"]).success())
            .iter()
            .map(|v| v["id"].as_u64().unwrap())
            .collect();
        assert_eq!(g1, vec![1, 4], "{b}");
        // Export and import carry both fields.
        let exported = env.run(&["export"]).success().get_output().stdout.clone();
        let other = Env::new(b);
        other.run_in(&["import", "-"], exported).success();
        let again: Vec<(serde_json::Value, serde_json::Value)> = other
            .drain()
            .iter()
            .map(|v| (v["group"].clone(), v["coalesce_key"].clone()))
            .collect();
        assert_eq!(
            again,
            summary
                .iter()
                .map(|(_, g, c)| (g.clone(), c.clone()))
                .collect::<Vec<_>>()
        );
    }
}

/// `replay --concurrency 8` over 12 groups of 5 items: the target logs
/// when each delivery starts and ends; no two deliveries of one group
/// overlap, and each group is delivered in enqueue order.
#[test]
fn concurrent_replay_never_runs_two_items_of_a_group_at_once() {
    for b in backends() {
        let env = Env::new(b);
        let mut lines = String::new();
        for k in 0..5 {
            for g in 0..12 {
                lines.push_str(&format!(
                    "{{\"payload\":\"g{g} {k}\",\"group\":\"g{g}\"}}\n"
                ));
            }
        }
        env.run_in(&["enqueue", "--ndjson"], lines).success();
        let log = env.dir.path().join("log");
        let exec = format!(
            "sh -c 'read g k; echo \"start $g $k\" >> {l}; sleep 0.02; echo \"end $g $k\" >> {l}'",
            l = log.display()
        );
        let a = env
            .run(&["--json", "replay", "--concurrency", "8", "--exec", &exec])
            .success();
        let r = json_out(&a);
        assert_eq!(r["delivered"], 60, "{b}: {r}");
        assert_eq!(r["group_waiting"], 0);
        let text = std::fs::read_to_string(&log).unwrap();
        let mut open: HashMap<String, String> = HashMap::new();
        let mut order: HashMap<String, Vec<String>> = HashMap::new();
        let mut most = 0;
        for line in text.lines() {
            let mut w = line.split(' ');
            let (what, g, k) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            match what {
                "start" => {
                    assert!(
                        open.insert(g.to_string(), k.to_string()).is_none(),
                        "{b}: two items of {g} at once:\n{text}"
                    );
                    most = most.max(open.len());
                    order.entry(g.to_string()).or_default().push(k.to_string());
                }
                _ => assert_eq!(open.remove(g).as_deref(), Some(k), "{text}"),
            }
        }
        for (g, ks) in &order {
            assert_eq!(
                ks,
                &["0", "1", "2", "3", "4"],
                "{b}: group {g} out of order"
            );
        }
        assert!(most > 1, "{b}: groups must run side by side");
        assert_eq!(env.size(), 0);
    }
}

/// An empty group or coalesce key is none (as an empty idempotency key
/// is); a non-string group in `--ndjson` is bad data (65), nothing stored.
#[test]
fn empty_group_and_coalesce_key_are_none_and_bad_fields_are_refused() {
    for b in backends() {
        let env = Env::new(b);
        env.run(&["enqueue", "--group", "", "--coalesce-key", "", "a"])
            .success();
        env.run(&["enqueue", "--coalesce-key", "", "b"]).success();
        let items = env.drain();
        assert_eq!(
            items.len(),
            2,
            "{b}: an empty coalesce key replaced something"
        );
        assert!(items[0]["group"].is_null() && items[0]["coalesce_key"].is_null());
        let a = env
            .run_in(
                &["enqueue", "--ndjson"],
                "{\"payload\":\"x\"}\n{\"payload\":\"y\",\"group\":5}\n",
            )
            .code(65);
        assert!(stderr(&a).contains("line 2"), "{}", stderr(&a));
        assert!(stderr(&a).contains("\"group\""), "{}", stderr(&a));
        assert_eq!(env.size(), 2, "{b}: nothing of the bad batch stored");
    }
}
