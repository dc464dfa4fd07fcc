//! Several `spool serve` over one PostgreSQL spool (SPEC §7 "Several
//! receivers over one PostgreSQL spool"): the same batch reaching two
//! instances at the same moment (a retransmission after a lost response,
//! routed elsewhere by a load balancer) is applied once; `/v1/items` with
//! one key at two instances at once stores one item; `spool clients`
//! tells which instance last served each client. Pushes through faults
//! and a killed instance are in `push_e2e.rs`.

mod cli_common;
mod serve_common;

use cli_common::*;
use serve_common::*;
use std::sync::{Arc, Barrier};

/// Three instances over one fresh PostgreSQL spool; `None` (SKIPPED)
/// without a PostgreSQL server.
fn receivers(what: &str) -> Option<(Env, Vec<Serve>)> {
    let env = pg_env(what)?;
    env.run(&["init"]).success();
    let servers = (0..3).map(|_| Serve::start(&env, &[])).collect();
    Some((env, servers))
}

/// A push body of client `client` with the numbers `seqs`.
fn batch(client: &str, seqs: std::ops::RangeInclusive<u64>) -> Vec<u8> {
    let first = *seqs.start();
    let payloads: Vec<String> = seqs.map(|s| format!("{client} {s}")).collect();
    let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
    items_body(client, first - 1, first, &payloads)
}

/// POST `body` with `headers` to both `urls` from two threads released
/// at the same moment; both answers.
fn at_once(urls: [String; 2], headers: Vec<(&'static str, String)>, body: Vec<u8>) -> [Reply; 2] {
    let barrier = Arc::new(Barrier::new(2));
    let body = Arc::new(body);
    let headers = Arc::new(headers);
    let threads: Vec<_> = urls
        .into_iter()
        .map(|url| {
            let (barrier, body, headers) = (barrier.clone(), body.clone(), headers.clone());
            std::thread::spawn(move || {
                let a = agent();
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                barrier.wait();
                post(&a, &url, &headers, &body)
            })
        })
        .collect();
    let mut out = threads.into_iter().map(|t| t.join().expect("a poster"));
    [out.next().unwrap(), out.next().unwrap()]
}

#[test]
fn the_same_batch_at_two_receivers_at_once_is_applied_once() {
    let Some((env, servers)) = receivers("the_same_batch_at_two_receivers_at_once_is_applied_once")
    else {
        return;
    };
    const ROUNDS: u64 = 30;
    const PER: u64 = 5;
    let mut last = 0;
    for round in 0..ROUNDS {
        let (a, b) = (round as usize % 3, (round as usize + 1) % 3);
        let first = round * PER + 1;
        let body = batch("edge-1", first..=first + PER - 1);
        let answers = at_once(
            [servers[a].url("/v1/push"), servers[b].url("/v1/push")],
            vec![("Content-Type", "application/json".to_string())],
            body,
        );
        let mut applied = 0;
        let mut duplicates = 0;
        for r in &answers {
            assert_eq!(r.status, 200, "round {round}: {}", r.body);
            let v = r.json();
            assert_eq!(v["last_seq"], first + PER - 1, "round {round}: {v}");
            applied += v["applied"].as_u64().unwrap();
            duplicates += v["duplicates"].as_u64().unwrap();
        }
        assert_eq!((applied, duplicates), (PER, PER), "round {round}");
        assert!(first + PER - 1 > last);
        last = first + PER - 1;
    }
    // `/v1/items`: one key at two instances at once is one item.
    for round in 0..20 {
        let answers = at_once(
            [servers[0].url("/v1/items"), servers[2].url("/v1/items")],
            vec![("Idempotency-Key", format!("order-{round}"))],
            format!("item {round}").into_bytes(),
        );
        let mut statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 201], "round {round}");
        assert_eq!(answers[0].json()["id"], answers[1].json()["id"]);
    }
    let pids: Vec<u32> = servers.iter().map(Serve::pid).collect();
    for s in servers {
        let stopped = s.stop();
        assert_eq!(stopped.code, Some(0), "{}", stopped.stderr);
    }
    let items = env.drain();
    let payloads: Vec<String> = items
        .iter()
        .map(|i| i["payload"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = (1..=ROUNDS * PER).map(|s| format!("edge-1 {s}")).collect();
    want.extend((0..20).map(|r| format!("item {r}")));
    assert_eq!(payloads, want, "every entry once, in order");

    // `spool clients` names the instance that last served the client.
    let out = env.run(&["clients", "--json"]).success();
    let rows = ndjson(&out.get_output().stdout);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["last_seq"], ROUNDS * PER);
    let served_by = rows[0]["served_by"]
        .as_str()
        .expect("served_by")
        .to_string();
    let (host, pid) = served_by.rsplit_once(':').expect("host:pid");
    assert!(!host.is_empty(), "{served_by}");
    assert!(
        pids.contains(&pid.parse().expect("a pid")),
        "{served_by} is none of {pids:?}"
    );
    let table = env.run(&["clients"]).success();
    let table = String::from_utf8_lossy(&table.get_output().stdout).into_owned();
    assert!(table.contains(&served_by), "{table}");
}
