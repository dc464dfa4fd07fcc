//! The PostgreSQL backend's own cases, beyond the conformance suite:
//! leases and their fencing tokens, concurrent producers and replayers as
//! separate processes, a replayer killed with SIGKILL, a connection killed
//! mid-transaction, the error mapping, schema versions, and durability
//! across a server crash (on a second cluster with default fsync settings,
//! started through `.ci/pg.sh`).
//!
//! Every case needs `SPOOL_TEST_PG_URL`; without it each prints
//! `SKIPPED: …` and passes (unless `SPOOL_REQUIRE_PG=1`).

mod common;
mod http_sink;

use common::{pg_spool_url, pg_url, T0};
use http_sink::{Answer, Sink};
use spool::{
    EnqueueOptions, Enqueued, ErrorKind, Evidence, Leasing, ManualClock, NewItem, OnFull, OpenMode,
    OpenOptions, Spool,
};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spool"));
    c.env_remove("SPOOL_PATH");
    c
}

/// A new spool URL in the test database, or `None` (skipped).
fn new_spool(name: &str) -> Option<String> {
    let base = pg_url(&format!("postgres::{name}"))?;
    Some(pg_spool_url(&base, name))
}

fn open_with(url: &str, mode: OpenMode, clock: Option<&ManualClock>) -> Spool {
    let mut opts = OpenOptions::new(mode);
    if let Some(c) = clock {
        opts.clock = Arc::new(c.clone());
    }
    Spool::open(Path::new(url), &opts).unwrap_or_else(|e| panic!("open {url}: {e}"))
}

fn leasing(s: &Spool) -> &dyn Leasing {
    s.leasing().expect("a PostgreSQL spool leases")
}

fn psql(base: &str, sql: &str) -> String {
    // The test URL is a libpq URL (our own parameters are not in it).
    let out = Command::new("psql")
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

// ------------------------------------------------------------ leases

/// A claim counts the attempt and leases the item; while the lease runs
/// nobody else can claim it; once it ran out the item is due again, the
/// new claim has a new token, and the first replayer's outcome is refused
/// ("lease lost") without changing anything.
/// `spool list` tells a leased item from a due one: a replayer holds
/// it, and nobody else takes it before its lease ends.
#[test]
fn list_shows_the_items_a_replayer_holds() {
    let Some(url) = new_spool("list_leases") else {
        return;
    };
    let s = open_with(&url, OpenMode::Create, None);
    for p in ["a", "b", "c"] {
        s.enqueue(p.as_bytes(), "").unwrap();
    }
    let claimed = leasing(&s)
        .claim(1, Duration::from_secs(600), false)
        .unwrap();
    assert_eq!(claimed.len(), 1);
    let out = bin().args(["-s", &url, "list"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let when: Vec<(String, String)> = text
        .lines()
        .map(|l| {
            let cells: Vec<&str> = l.split('\t').collect();
            (cells[0].to_string(), cells[4].to_string())
        })
        .collect();
    let leased = claimed[0].item.id.to_string();
    assert_eq!(when.len(), 3, "{text}");
    for (id, w) in &when {
        if *id == leased {
            assert!(w.starts_with("leased, ") && w.ends_with(" left"), "{text}");
        } else {
            assert_eq!(w, "due", "{text}");
        }
    }
}

#[test]
fn an_expired_lease_cannot_record_over_the_new_holder() {
    let Some(url) = new_spool("expired_lease") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let a = open_with(&url, OpenMode::Create, Some(&clock));
    let b = open_with(&url, OpenMode::ReadWrite, Some(&clock));
    let id = a.enqueue(b"p", "k").unwrap().id;
    let first = leasing(&a)
        .claim(10, Duration::from_secs(30), false)
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].item.attempts, 1, "the claim counts the attempt");
    assert_eq!(
        first[0].lease_until,
        T0.saturating_add(Duration::from_secs(30))
    );
    assert!(leasing(&b)
        .claim(10, Duration::from_secs(30), false)
        .unwrap()
        .is_empty());
    clock.advance(Duration::from_secs(31));
    let second = leasing(&b)
        .claim(10, Duration::from_secs(30), false)
        .unwrap();
    assert_eq!(second.len(), 1, "an expired lease makes the item due again");
    assert_eq!(second[0].item.attempts, 2);
    assert_ne!(second[0].token, first[0].token);
    // The first replayer comes back late: every outcome is refused.
    let la = leasing(&a);
    assert_eq!(
        la.complete(&[(id, first[0].token, spool::Evidence::Done)])
            .unwrap(),
        vec![false]
    );
    assert!(!la
        .retry_later(id, first[0].token, Duration::ZERO, "late")
        .unwrap());
    assert!(!la.dead_letter_claimed(id, first[0].token, "late").unwrap());
    let it = a.get(id).unwrap().expect("still pending");
    assert_eq!((it.attempts, it.last_error), (2, None));
    // The holder's outcome counts.
    assert_eq!(
        leasing(&b)
            .complete(&[(id, second[0].token, spool::Evidence::Done)])
            .unwrap(),
        vec![true]
    );
    assert_eq!(a.size().unwrap(), 0);
}

/// Retention (SPEC §9) under leases: the holder's `complete` keeps the
/// item with its evidence (an HTTP status here) and the time of the
/// commit; a replayer whose lease ran out retains nothing, before or
/// after the holder, and the retained key deduplicates for both.
#[test]
fn complete_retains_the_holder_s_delivery_only() {
    let Some(url) = new_spool("complete_retains") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let a = open_with(&url, OpenMode::Create, Some(&clock));
    let b = open_with(&url, OpenMode::ReadWrite, Some(&clock));
    a.set_retain(Some(Duration::from_secs(3600))).unwrap();
    let id = a.enqueue(b"p", "order-1").unwrap().id;
    let lease = Duration::from_secs(30);
    let first = leasing(&a).claim(10, lease, false).unwrap();
    clock.advance(Duration::from_secs(31));
    let second = leasing(&b).claim(10, lease, false).unwrap();
    assert_eq!((first.len(), second.len()), (1, 1));
    assert_ne!(first[0].token, second[0].token);
    // The late replayer's delivery is refused: nothing retained.
    assert_eq!(
        leasing(&a)
            .complete(&[(id, first[0].token, Evidence::Http(200))])
            .unwrap(),
        vec![false]
    );
    assert_eq!(a.delivered_get(id).unwrap(), None);
    assert!(a.get(id).unwrap().is_some(), "still pending, leased by b");
    assert_eq!(a.stats(T0).unwrap().delivered_retained, 0);
    // The holder's counts, with its evidence.
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        leasing(&b)
            .complete(&[(id, second[0].token, Evidence::Http(200))])
            .unwrap(),
        vec![true]
    );
    let d = a.delivered_get(id).unwrap().expect("retained");
    assert_eq!(d.delivery.evidence, Evidence::Http(200));
    assert_eq!(d.delivery.at, T0.saturating_add(Duration::from_secs(33)));
    assert_eq!((d.item.attempts, d.item.key.as_str()), (2, "order-1"));
    assert_eq!(a.size().unwrap(), 0);
    assert_eq!(a.stats(T0).unwrap().delivered_retained, 1);
    // Late again, after the holder: still nothing changes.
    assert_eq!(
        leasing(&a)
            .complete(&[(id, first[0].token, Evidence::Exit(0))])
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        a.delivered_get(id).unwrap().unwrap().delivery.evidence,
        Evidence::Http(200)
    );
    assert_eq!(a.stats(T0).unwrap().delivered_retained, 1);
    assert_eq!(
        a.enqueue(b"again", "order-1").unwrap(),
        Enqueued::delivered(id)
    );
    assert_eq!(
        b.enqueue(b"again", "order-1").unwrap(),
        Enqueued::delivered(id)
    );
    assert_eq!(a.size().unwrap(), 0);
}

/// A key's item moving from pending to delivered while producers keep
/// enqueueing the key: every enqueue is a dedup hit on the one item,
/// pending or retained — never a second item (the spool row lock orders
/// the delivery and each dedup decision).
#[test]
fn a_key_stays_deduplicated_across_its_delivery() {
    let Some(url) = new_spool("dedup_across_delivery") else {
        return;
    };
    let s = open_with(&url, OpenMode::Create, None);
    s.set_retain(Some(Duration::from_secs(3600))).unwrap();
    let id = s.enqueue(b"p", "k").unwrap().id;
    let producers: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let p = open_with(&url, OpenMode::ReadWrite, None);
                (0..60)
                    .map(|_| p.enqueue(b"again", "k").unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let r = open_with(&url, OpenMode::ReadWrite, None);
    let claimed = loop {
        let c = leasing(&r)
            .claim(1, Duration::from_secs(60), false)
            .unwrap();
        if !c.is_empty() {
            break c;
        }
    };
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        leasing(&r)
            .complete(&[(id, claimed[0].token, Evidence::Exit(0))])
            .unwrap(),
        vec![true]
    );
    for p in producers {
        for e in p.join().unwrap() {
            assert_eq!(e.id, id, "{e:?}");
            assert!(e.deduplicated);
        }
    }
    assert_eq!(s.size().unwrap(), 0);
    assert_eq!(s.high_water().unwrap(), id);
    assert!(s.delivered_get(id).unwrap().is_some());
}

/// Released claims take their attempt back; failures wait for their retry
/// time; held and in-flight items are never claimed; claims come oldest
/// first.
#[test]
fn claims_release_retry_and_skip() {
    let Some(url) = new_spool("claims") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let s = open_with(&url, OpenMode::Create, Some(&clock));
    let l = leasing(&s);
    let ids: Vec<u64> = (0..5)
        .map(|i| s.enqueue(format!("p{i}").as_bytes(), "").unwrap().id)
        .collect();
    s.set_held(&[ids[1]], true).unwrap();
    s.push_assign(&[ids[2]]).unwrap();
    let c = l.claim(10, Duration::from_secs(60), false).unwrap();
    let got: Vec<u64> = c.iter().map(|c| c.item.id).collect();
    assert_eq!(got, vec![ids[0], ids[3], ids[4]]);
    l.release(&[(c[1].item.id, c[1].token)]).unwrap();
    assert_eq!(s.get(ids[3]).unwrap().unwrap().attempts, 0);
    assert!(l
        .retry_later(ids[0], c[0].token, Duration::from_secs(10), "boom")
        .unwrap());
    let it = s.get(ids[0]).unwrap().unwrap();
    assert_eq!(it.attempts, 1);
    assert_eq!(it.last_error.as_deref(), Some("boom"));
    assert_eq!(
        it.next_retry_at,
        Some(T0.saturating_add(Duration::from_secs(10)))
    );
    let (held, waiting) = l.skipped_now(false).unwrap();
    assert_eq!(
        (held, waiting),
        (1, 2),
        "ids[0] backs off, ids[4] is leased"
    );
    let again = l.claim(10, Duration::from_secs(60), false).unwrap();
    assert_eq!(
        again.iter().map(|c| c.item.id).collect::<Vec<_>>(),
        vec![ids[3]]
    );
    clock.advance(Duration::from_secs(11));
    let later = l.claim(10, Duration::from_secs(60), false).unwrap();
    assert_eq!(
        later.iter().map(|c| c.item.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    assert_eq!(later[0].item.attempts, 2);
    assert!(l
        .dead_letter_claimed(ids[0], later[0].token, "poison")
        .unwrap());
    assert_eq!(s.dead_count().unwrap(), 1);
    assert_eq!(s.size().unwrap(), 4);
}

/// A poison item that kills every replayer still reaches the dead-letter
/// set: each claim counted an attempt, and the claim past the budget
/// dead-letters it without delivering it again.
#[test]
fn a_poison_item_reaches_the_dead_letters() {
    let Some(url) = new_spool("poison") else {
        return;
    };
    let s = open_with(&url, OpenMode::Create, None);
    let id = s.enqueue(b"poison", "").unwrap().id;
    // Three replayers "die" mid-delivery: their claims expire at once.
    for _ in 0..3 {
        let c = leasing(&s).claim(1, Duration::ZERO, false).unwrap();
        assert_eq!(c.len(), 1);
    }
    std::thread::sleep(Duration::from_millis(5));
    let out = bin()
        .args([
            "-s",
            &url,
            "replay",
            "--exec",
            "true",
            "--max-attempts",
            "3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let dead = s.dead_get(id).unwrap().expect("dead-lettered");
    assert_eq!(
        dead.item.attempts, 3,
        "the claim that found it at its budget took its count back"
    );
    assert_eq!(
        dead.item.last_error.as_deref(),
        Some("attempts (3) already reach --max-attempts 3; dead-lettered without another attempt"),
        "{dead:?}"
    );
}

// --------------------------------------------------- many processes

/// 8 producer processes enqueue overlapping keys into one bounded spool:
/// exactly one item per key, and the depth never passes the bound.
#[test]
fn concurrent_producers_store_each_key_once_under_an_exact_bound() {
    let Some(url) = new_spool("producers") else {
        return;
    };
    const PRODUCERS: usize = 8;
    const KEYS: usize = 60;
    const BOUND: u64 = 150;
    let st = bin()
        .args(["-s", &url, "init", "--max-depth", &BOUND.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let dir = tempfile::tempdir().unwrap();
    let mut children = Vec::new();
    for p in 0..PRODUCERS {
        // Each producer: every shared key (racing the others), then fresh
        // unkeyed items until the spool is full.
        let mut lines = String::new();
        for k in 0..KEYS {
            lines.push_str(&format!(
                "{{\"payload\":\"p{p}-k{k}\",\"key\":\"key-{k}\"}}\n"
            ));
        }
        let keyed = dir.path().join(format!("keyed-{p}.ndjson"));
        std::fs::write(&keyed, lines).unwrap();
        let script = "set -u; S=\"$1\"; B=\"$2\"; F=\"$3\"; P=\"$4\"; \
             while read -r line; do printf '%s\\n' \"$line\" | \"$B\" -q -s \"$S\" enqueue --ndjson || echo fail; done < \"$F\"; \
             i=0; while [ $i -lt 40 ]; do \"$B\" -q -s \"$S\" enqueue \"$P-free-$i\" >/dev/null 2>&1 || echo full; i=$((i+1)); done";
        children.push(
            Command::new("bash")
                .args(["-c", script, "producer"])
                .arg(&url)
                .arg(env!("CARGO_BIN_EXE_spool"))
                .arg(&keyed)
                .arg(format!("p{p}"))
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let mut full = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("fail"), "a keyed enqueue failed: {text}");
        full += text.lines().filter(|l| *l == "full").count();
    }
    let s = open_with(&url, OpenMode::ReadOnly, None);
    let items = s.drain().unwrap();
    assert_eq!(s.size().unwrap(), items.len() as u64);
    assert_eq!(items.len() as u64, BOUND, "the bound is exact");
    let mut per_key: BTreeMap<String, usize> = BTreeMap::new();
    for it in &items {
        if !it.key.is_empty() {
            *per_key.entry(it.key.clone()).or_default() += 1;
        }
    }
    assert_eq!(per_key.len(), KEYS, "every key stored");
    assert!(per_key.values().all(|n| *n == 1), "{per_key:?}");
    let ids: BTreeSet<u64> = items.iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), items.len(), "ids are unique");
    let tried = PRODUCERS * 40;
    assert_eq!(
        tried - full,
        (BOUND as usize) - KEYS,
        "rejected exactly the overflow"
    );
}

/// 4 replayer processes share 2,000 items against a real HTTP sink: each
/// item is delivered exactly once (no crash, no expired lease), and the
/// spool ends empty.
#[test]
fn four_replayers_deliver_each_item_once() {
    let Some(url) = new_spool("replayers") else {
        return;
    };
    const ITEMS: usize = 2000;
    let input: String = (0..ITEMS).map(|i| format!("item-{i}\n")).collect();
    let mut c = bin()
        .args(["-q", "-s", &url, "enqueue", "--lines"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    assert!(c.wait().unwrap().success());
    let sink = Sink::start(|_, _| Answer::Status(200));
    let children: Vec<_> = (0..4)
        .map(|_| {
            bin()
                .args([
                    "-q",
                    "-s",
                    &url,
                    "replay",
                    "--url",
                    &sink.url("/in"),
                    "--concurrency",
                    "2",
                ])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let got = sink.received();
    let mut bodies: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
    for r in &got {
        *bodies.entry(r.body.clone()).or_default() += 1;
    }
    assert_eq!(bodies.len(), ITEMS, "every item delivered");
    let dup: Vec<_> = bodies.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dup.is_empty(), "delivered twice: {}", dup.len());
    let s = open_with(&url, OpenMode::ReadOnly, None);
    assert_eq!(s.size().unwrap(), 0);
}

/// A replayer killed with SIGKILL mid-delivery loses nothing: its item
/// comes back when the lease runs out, with the attempt counted, and the
/// next replayer delivers it.
#[test]
fn a_killed_replayer_s_item_is_redelivered_after_its_lease() {
    let Some(url) = new_spool("killed") else {
        return;
    };
    let s = open_with(&url, OpenMode::Create, None);
    let id = s.enqueue(b"slow", "").unwrap().id;
    s.enqueue(b"other", "").unwrap();
    let mut r = bin()
        .args([
            "-q",
            "-s",
            &url,
            "replay",
            "--exec",
            "sleep 60",
            "--lease",
            "2s",
            "--timeout",
            "90s",
        ])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while s.get(id).unwrap().unwrap().attempts == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "never claimed");
        std::thread::sleep(Duration::from_millis(20));
    }
    r.kill().unwrap();
    r.wait().unwrap();
    // While the lease runs, nobody takes the item.
    let out = bin()
        .args([
            "-q",
            "-s",
            &url,
            "replay",
            "--exec",
            "true",
            "--ignore-backoff",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(s.size().unwrap(), 1, "only the leased item is left");
    assert_eq!(
        s.get(id).unwrap().unwrap().attempts,
        1,
        "the attempt was counted"
    );
    std::thread::sleep(Duration::from_millis(2100));
    let out = bin()
        .args([
            "-s",
            &url,
            "replay",
            "--exec",
            "sh -c '[ \"$SPOOL_ATTEMPT\" = 2 ]'",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(s.size().unwrap(), 0, "redelivered and done");
}

/// `--ordered` takes the spool's advisory lock: a second ordered replay
/// waits `--wait`, then exits 75 naming the holder.
#[test]
fn ordered_replays_are_exclusive() {
    let Some(url) = new_spool("ordered") else {
        return;
    };
    let s = open_with(&url, OpenMode::Create, None);
    s.enqueue(b"a", "").unwrap();
    let mut first = bin()
        .args(["-q", "-s", &url, "replay", "--ordered", "--exec", "sleep 3"])
        .spawn()
        .unwrap();
    let start = Instant::now();
    while s.get(1).unwrap().is_some_and(|i| i.attempts == 0) {
        assert!(start.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = bin()
        .args([
            "-s",
            &url,
            "replay",
            "--ordered",
            "--exec",
            "true",
            "--wait",
            "200ms",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("advisory lock"), "{err}");
    assert!(first.wait().unwrap().success());
}

// ----------------------------------------------------------- failures

/// A connection killed in the middle of a transaction (here, a streamed
/// batch) stores nothing of it and is a temporary error; the next call
/// reconnects.
#[test]
fn a_connection_killed_mid_transaction_changes_nothing() {
    let Some(url) = new_spool("terminated") else {
        return;
    };
    let base = pg_url("terminated").unwrap();
    let s = open_with(&url, OpenMode::Create, None);
    s.enqueue(b"before", "").unwrap();
    let Spool::Postgres(q) = &s else {
        unreachable!()
    };
    let pid = q.server_pid().unwrap();
    let mut n = 0;
    let mut items = std::iter::from_fn(|| {
        n += 1;
        if n == 50 {
            // Kill the server process of this spool's connection while
            // its transaction is open.
            psql(&base, &format!("SELECT pg_terminate_backend({pid})"));
        }
        (n <= 100).then(|| Ok(spool::NewItem::new(format!("x{n}"), "")))
    });
    let r = s.enqueue_stream(&mut items, &Default::default());
    match r {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Temporary, "{e}"),
        Ok(_) => panic!("the batch survived its connection"),
    }
    // Nothing of the batch; the next call reconnects.
    assert_eq!(s.size().unwrap(), 1);
    assert_eq!(s.enqueue(b"after", "").unwrap().id, 2);
}

/// Unreachable: 75 naming host and port; an unknown role: 77; a missing
/// spool for a read-only command: 66 and nothing created; a schema newer
/// than this binary: 65 with a hint; the password is never shown.
#[test]
fn errors_map_to_exit_codes() {
    let Some(url) = new_spool("errors") else {
        return;
    };
    let base = pg_url("errors").unwrap();
    let out = bin()
        .args(["-s", "postgres://u:hunter2@127.0.0.1:1/db", "size"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("127.0.0.1:1"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");

    let nobody = format!("{base}&user=nobody_{}", std::process::id()).replace("&user=postgres", "");
    let out = bin().args(["-s", &nobody, "size"]).output().unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");

    let schema = format!("fresh_{}", std::process::id());
    let fresh = format!("{url}&schema={schema}");
    let out = bin().args(["-s", &fresh, "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(66), "{out:?}");
    assert_eq!(
        psql(
            &base,
            &format!("SELECT count(*) FROM pg_namespace WHERE nspname = '{schema}'")
        ),
        "0",
        "a read-only command created the schema"
    );
    assert!(bin()
        .args(["-s", &fresh, "enqueue", "x"])
        .status()
        .unwrap()
        .success());
    psql(
        &base,
        &format!("INSERT INTO {schema}.spool_schema (version) VALUES (99)"),
    );
    let out = bin().args(["-s", &fresh, "size"]).output().unwrap();
    assert_eq!(out.status.code(), Some(65), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("newer") && err.contains("hint:"), "{err}");
    psql(&base, &format!("DROP SCHEMA {schema} CASCADE"));

    let out = bin().args(["-s", &url, "init"]).output().unwrap();
    assert!(out.status.success());
    let out = bin().args(["-s", &url, "checkpoint"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

/// Many processes using a fresh schema at once create it once.
#[test]
fn concurrent_first_use_migrates_once() {
    let Some(url) = new_spool("first_use") else {
        return;
    };
    let base = pg_url("first_use").unwrap();
    let schema = format!("race_{}", std::process::id());
    let fresh = format!("{url}&schema={schema}");
    let children: Vec<_> = (0..6)
        .map(|i| {
            bin()
                .args(["-q", "-s", &fresh, "enqueue", &format!("p{i}")])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    assert_eq!(
        psql(
            &base,
            &format!(
                "SELECT string_agg(version::text, ',' ORDER BY version) FROM {schema}.spool_schema"
            )
        ),
        "1,2,3,4,5,6,7,8",
        "every migration applied once"
    );
    assert_eq!(
        psql(&base, &format!("SELECT depth FROM {schema}.spools")),
        "6"
    );
    psql(&base, &format!("DROP SCHEMA {schema} CASCADE"));
}

/// SQLite → PostgreSQL through export | import keeps ids, keys,
/// attempts, holds and dead letters.
#[test]
fn export_from_sqlite_imports_into_postgres() {
    let Some(url) = new_spool("migrate") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.db");
    let db = db.to_str().unwrap();
    for (p, k) in [("a", "ka"), ("b", ""), ("c", "kc")] {
        assert!(bin()
            .args(["-q", "-s", db, "enqueue", p, "--key", k])
            .status()
            .unwrap()
            .success());
    }
    assert!(bin()
        .args(["-q", "-s", db, "hold", "2"])
        .status()
        .unwrap()
        .success());
    assert!(bin()
        .args(["-q", "-s", db, "attempts", "3", "--set", "4"])
        .status()
        .unwrap()
        .success());
    let export = bin().args(["-s", db, "export"]).output().unwrap();
    assert!(export.status.success());
    let mut imp = bin()
        .args(["-q", "-s", &url, "import", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    imp.stdin.take().unwrap().write_all(&export.stdout).unwrap();
    assert!(imp.wait().unwrap().success());
    let a = open_with(db, OpenMode::ReadOnly, None);
    let b = open_with(&url, OpenMode::ReadOnly, None);
    let mut expected = a.drain().unwrap();
    // The key-less item carries the key it was sent under from SQLite.
    expected[1].key = format!("{}:2", a.uuid().unwrap());
    assert_eq!(expected, b.drain().unwrap());
    assert_eq!(b.high_water().unwrap(), 3);
}

/// `Idempotency-Key` of every request `sink` received, by body.
fn keys_by_body(sink: &Sink) -> BTreeMap<String, String> {
    sink.received()
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.body).into_owned(),
                r.header("Idempotency-Key").unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// SQLite → PostgreSQL: a key-less item that a receiver took before the
/// move (its answer lost) is sent with the same `Idempotency-Key` after
/// it, although PostgreSQL renumbered it; importing the export a second
/// time adds nothing.
#[test]
fn a_key_less_item_keeps_its_idempotency_key_into_postgres() {
    let Some(url) = new_spool("stable_key") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.db");
    let db = db.to_str().unwrap();
    let run = |spool: &str, args: &[&str], stdin: &[u8]| {
        let mut c = bin()
            .args(["-q", "-s", spool])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(stdin).unwrap();
        c.wait_with_output().unwrap()
    };
    // PostgreSQL has issued ids 1 and 2 already: the import renumbers.
    for p in ["t1", "t2"] {
        assert!(run(&url, &["enqueue", p], b"").status.success());
    }
    assert!(run(&url, &["done", "1", "2"], b"").status.success());
    for p in ["a", "b"] {
        assert!(run(db, &["enqueue", p], b"").status.success());
    }
    let before = Sink::always(503);
    let out = run(db, &["replay", "--url", &before.url("/in")], b"");
    assert_eq!(out.status.code(), Some(75));
    let sent = keys_by_body(&before);
    let export = run(db, &["export"], b"");
    assert!(export.status.success());
    let out = run(&url, &["--json", "import", "-"], &export.stdout);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["renumbered"].as_array().unwrap().len(), 2);
    let out = run(&url, &["--json", "import", "-"], &export.stdout);
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["imported"], 0, "{report}");
    assert_eq!(report["deduplicated"].as_array().unwrap().len(), 2);
    let after = Sink::always(200);
    let out = run(
        &url,
        &["replay", "--url", &after.url("/in"), "--ignore-backoff"],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(keys_by_body(&after), sent);
    assert_eq!(sent.len(), 2);
}

/// `wait_for_enqueue` wakes on a NOTIFY from another process's enqueue,
/// and times out without one.
#[test]
fn enqueues_wake_a_listener() {
    let Some(url) = new_spool("notify") else {
        return;
    };
    let s = open_with(&url, OpenMode::Create, None);
    assert!(!leasing(&s)
        .wait_for_enqueue(Duration::from_millis(50))
        .unwrap());
    let u = url.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        assert!(bin()
            .args(["-q", "-s", &u, "enqueue", "x"])
            .status()
            .unwrap()
            .success());
    });
    let start = Instant::now();
    assert!(leasing(&s)
        .wait_for_enqueue(Duration::from_secs(20))
        .unwrap());
    assert!(start.elapsed() < Duration::from_secs(10));
    t.join().unwrap();
}

// ------------------------------------------------------ §9 ledger policies

/// drop-oldest under concurrent producers: 4 processes enqueue in loops
/// into a spool bounded at 50; nothing vanishes (pending + dead letters =
/// items enqueued), the bound is exact, every dead letter is an eviction
/// and counted.
#[test]
fn concurrent_producers_under_drop_oldest_lose_nothing() {
    let Some(url) = new_spool("drop_oldest") else {
        return;
    };
    const PRODUCERS: usize = 4;
    const EACH: usize = 40;
    const BOUND: u64 = 50;
    let st = bin()
        .args(["-q", "-s", &url, "init", "--max-depth", &BOUND.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    open_with(&url, OpenMode::ReadWrite, None)
        .set_on_full(OnFull::DropOldest)
        .unwrap();
    let script = "set -u; S=\"$1\"; B=\"$2\"; P=\"$3\"; N=\"$4\"; i=0; \
         while [ $i -lt $N ]; do \"$B\" -q -s \"$S\" enqueue \"$P-$i\" >/dev/null || echo fail; i=$((i+1)); done";
    let children: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            Command::new("bash")
                .args(["-c", script, "producer"])
                .arg(&url)
                .arg(env!("CARGO_BIN_EXE_spool"))
                .arg(format!("p{p}"))
                .arg(EACH.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("fail"), "an enqueue failed: {text}");
    }
    let s = open_with(&url, OpenMode::ReadOnly, None);
    let pending = s.drain().unwrap();
    let dead = s.dead_page(0, 100_000).unwrap();
    let st = s.stats(T0).unwrap();
    assert_eq!(pending.len() as u64, BOUND, "the bound is exact");
    assert_eq!(s.size().unwrap(), BOUND);
    assert_eq!(
        pending.len() + dead.len(),
        PRODUCERS * EACH,
        "every enqueued item is pending or dead"
    );
    assert_eq!(s.dead_count().unwrap(), dead.len() as u64);
    assert_eq!(st.evicted_total, dead.len() as u64);
    assert_eq!(st.on_full, OnFull::DropOldest);
    let err = OnFull::eviction_error(BOUND);
    assert!(dead
        .iter()
        .all(|d| d.item.last_error.as_deref() == Some(err.as_str())));
    // The oldest went: every pending item is newer than every eviction.
    let newest_dead = dead.iter().map(|d| d.item.id).max().unwrap();
    assert!(pending.iter().all(|i| i.id > newest_dead));
    let mut payloads: BTreeSet<Vec<u8>> = pending.iter().map(|i| i.payload.clone()).collect();
    payloads.extend(dead.iter().map(|d| d.item.payload.clone()));
    assert_eq!(payloads.len(), PRODUCERS * EACH, "no payload twice");
}

/// drop-oldest never evicts an item a replayer holds a running lease on;
/// coalescing never replaces one either (nor one whose attempt was
/// counted). With only leased items left, the spool is full.
#[test]
fn leased_items_are_neither_evicted_nor_coalesced() {
    let Some(url) = new_spool("leased_policies") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let s = open_with(&url, OpenMode::Create, Some(&clock));
    s.set_max_depth(Some(2)).unwrap();
    s.set_on_full(OnFull::DropOldest).unwrap();
    let ck = |p: &str| NewItem::new(p.as_bytes(), "").coalescing("c");
    let one = |n: NewItem| {
        s.enqueue_batch(&[n], &EnqueueOptions::default())
            .unwrap()
            .pop()
            .unwrap()
    };
    let a = one(ck("a")).id;
    let b = s.enqueue(b"b", "").unwrap().id;
    let claimed = leasing(&s)
        .claim(1, Duration::from_secs(60), false)
        .unwrap();
    assert_eq!(claimed[0].item.id, a);
    // a is leased: a coalescing enqueue leaves it and evicts b instead.
    let c = one(ck("c"));
    assert!(c.replaced.is_empty(), "{c:?}");
    assert_eq!(c.evicted, vec![b]);
    // Release a (its attempt is taken back, attempts 0 again): now it is
    // neither leased nor attempted, and the next coalescing enqueue
    // replaces both a and c.
    leasing(&s).release(&[(a, claimed[0].token)]).unwrap();
    let d = one(ck("d"));
    assert_eq!(d.replaced, vec![a, c.id]);
    assert!(d.evicted.is_empty());
    // Lease everything: nothing can be evicted.
    let e = s.enqueue(b"e", "").unwrap().id;
    assert_eq!(
        leasing(&s)
            .claim(10, Duration::from_secs(60), false)
            .unwrap()
            .len(),
        2
    );
    let err = s.enqueue(b"f", "").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Temporary, "{err}");
    assert_eq!(s.size().unwrap(), 2);
    // Once the leases ran out, the oldest is evictable again.
    clock.advance(Duration::from_secs(61));
    let f = s.enqueue(b"f", "").unwrap();
    assert_eq!(f.evicted, vec![d.id]);
    let ids: Vec<u64> = s.drain().unwrap().iter().map(|i| i.id).collect();
    assert_eq!(ids, vec![e, f.id]);
    let st = s.stats(T0).unwrap();
    assert_eq!((st.evicted_total, st.dead_letters), (2, 2));
}

/// Ordering groups under leases, from two handles (two connections): an
/// item is claimable only when no earlier item of its group is pending;
/// two items of one group are never leased at once; the next becomes
/// claimable once the head is completed or dead-lettered, not while it
/// waits for a retry or is held. Items without a group are never blocked.
#[test]
fn ordering_groups_hold_across_replayers() {
    let Some(url) = new_spool("groups") else {
        return;
    };
    let clock = ManualClock::new(T0);
    let a = open_with(&url, OpenMode::Create, Some(&clock));
    let b = open_with(&url, OpenMode::ReadWrite, Some(&clock));
    let lease = Duration::from_secs(60);
    let items: Vec<NewItem> = [
        ("g1-1", Some("g1")),
        ("g2-1", Some("g2")),
        ("g1-2", Some("g1")),
        ("free-1", None),
        ("g1-3", Some("g1")),
        ("g2-2", Some("g2")),
        ("free-2", None),
    ]
    .iter()
    .map(|(p, g)| {
        let n = NewItem::new(p.as_bytes(), "");
        match g {
            Some(g) => n.in_group(*g),
            None => n,
        }
    })
    .collect();
    let ids: Vec<u64> = a
        .enqueue_batch(&items, &EnqueueOptions::default())
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    let (g1_1, g2_1, g1_2, free1, g1_3, g2_2, free2) =
        (ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]);
    let payloads = |c: &[spool::Claimed]| -> Vec<String> {
        c.iter()
            .map(|c| String::from_utf8_lossy(&c.item.payload).into_owned())
            .collect()
    };
    // One claim takes one item per group: the heads, and the free items.
    let ca = leasing(&a).claim(10, lease, false).unwrap();
    assert_eq!(payloads(&ca), vec!["g1-1", "g2-1", "free-1", "free-2"]);
    assert_eq!(ca[0].item.group.as_deref(), Some("g1"));
    // The other replayer finds nothing: the next items are blocked by the
    // leased heads.
    assert!(leasing(&b).claim(10, lease, false).unwrap().is_empty());
    // g1's head fails and waits for a retry: it still blocks g1-2.
    let tok = |id| ca.iter().find(|c| c.item.id == id).unwrap().token;
    assert!(leasing(&a)
        .retry_later(g1_1, tok(g1_1), Duration::from_secs(30), "boom")
        .unwrap());
    assert!(leasing(&b).claim(10, lease, false).unwrap().is_empty());
    // g2's head is delivered: g2-2 becomes claimable, by either replayer.
    assert_eq!(
        leasing(&a)
            .complete(&[(g2_1, tok(g2_1), spool::Evidence::Done)])
            .unwrap(),
        vec![true]
    );
    let cb = leasing(&b).claim(10, lease, false).unwrap();
    assert_eq!(payloads(&cb), vec!["g2-2"]);
    assert!(leasing(&a).claim(10, lease, false).unwrap().is_empty());
    // With backoff ignored, g1-1 is claimable again (it is the head), g1-2
    // is not.
    let again = leasing(&a).claim(10, lease, true).unwrap();
    assert_eq!(payloads(&again), vec!["g1-1"]);
    // Dead-lettering the head unblocks the next item of its group.
    assert!(leasing(&a)
        .dead_letter_claimed(g1_1, again[0].token, "poison")
        .unwrap());
    let cb2 = leasing(&b).claim(10, lease, false).unwrap();
    assert_eq!(payloads(&cb2), vec!["g1-2"]);
    // A held head blocks its group too.
    leasing(&b).release(&[(g1_2, cb2[0].token)]).unwrap();
    b.set_held(&[g1_2], true).unwrap();
    assert!(leasing(&a).claim(10, lease, false).unwrap().is_empty());
    b.set_held(&[g1_2], false).unwrap();
    // A dead letter requeued under its old id, behind a later item of its
    // group that is being delivered, waits for that delivery.
    let cb3 = leasing(&b).claim(10, lease, false).unwrap();
    assert_eq!(payloads(&cb3), vec!["g1-2"]);
    assert_eq!(a.requeue(&[g1_1]).unwrap(), vec![true]);
    assert!(leasing(&a).claim(10, lease, false).unwrap().is_empty());
    assert_eq!(
        leasing(&b)
            .complete(&[(g1_2, cb3[0].token, spool::Evidence::Done)])
            .unwrap(),
        vec![true]
    );
    let ca4 = leasing(&a).claim(10, lease, false).unwrap();
    assert_eq!(payloads(&ca4), vec!["g1-1"]);
    // g1-3 waits behind the requeued g1-1; the free items (leased by the
    // first claim) and g2-2 are still out.
    let left: Vec<u64> = a.drain().unwrap().iter().map(|i| i.id).collect();
    assert_eq!(left, vec![g1_1, free1, g1_3, g2_2, free2]);
    assert!(leasing(&b).claim(10, lease, false).unwrap().is_empty());
}

/// Many replayers claiming at once never lease two items of one group
/// together, and each group is delivered in enqueue order.
#[test]
fn concurrent_claimers_keep_one_item_per_group_in_flight() {
    let Some(url) = new_spool("groups_race") else {
        return;
    };
    const GROUPS: usize = 5;
    const PER_GROUP: usize = 12;
    let s = open_with(&url, OpenMode::Create, None);
    let items: Vec<NewItem> = (0..PER_GROUP)
        .flat_map(|i| {
            (0..GROUPS).map(move |g| NewItem::new(format!("{g}-{i}"), "").in_group(format!("g{g}")))
        })
        .collect();
    s.enqueue_batch(&items, &EnqueueOptions::default()).unwrap();
    // Per group: who holds a lease now, and the order of deliveries.
    let state = Arc::new(std::sync::Mutex::new((
        BTreeMap::<String, u64>::new(),
        BTreeMap::<String, Vec<u64>>::new(),
    )));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            let state = state.clone();
            std::thread::spawn(move || {
                let s = open_with(&url, OpenMode::ReadWrite, None);
                let l = leasing(&s);
                let mut idle = 0;
                while idle < 50 {
                    let got = l.claim(3, Duration::from_secs(60), false).unwrap();
                    if got.is_empty() {
                        idle += 1;
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    idle = 0;
                    for c in &got {
                        let g = c.item.group.clone().unwrap();
                        let mut st = state.lock().unwrap();
                        if let Some(other) = st.0.insert(g.clone(), c.item.id) {
                            panic!("group {g}: {} leased while {other} is", c.item.id);
                        }
                        st.1.entry(g).or_default().push(c.item.id);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                    for c in &got {
                        // Forget the lease before the commit that ends it.
                        state
                            .lock()
                            .unwrap()
                            .0
                            .remove(c.item.group.as_deref().unwrap());
                        assert_eq!(
                            l.complete(&[(c.item.id, c.token, spool::Evidence::Done)])
                                .unwrap(),
                            vec![true]
                        );
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(s.size().unwrap(), 0);
    let st = state.lock().unwrap();
    assert_eq!(st.1.len(), GROUPS);
    for (g, order) in &st.1 {
        assert_eq!(order.len(), PER_GROUP, "{g}");
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{g}: {order:?}");
    }
}

/// A schema at version 1 (as an older spool binary left it): a read-only
/// open reads it as it is, without the columns of versions 2 and 3
/// (retention reads as off, no client tells its receiver); the first
/// writable open migrates it to version 8 and every row stays.
#[test]
fn a_version_1_schema_is_read_and_then_migrated() {
    let Some(url) = new_spool("v1") else {
        return;
    };
    let base = pg_url("v1").unwrap();
    let schema = format!("v1_{}", std::process::id());
    let url = format!("{url}&schema={schema}");
    let s = open_with(&url, OpenMode::Create, None);
    let a = s.enqueue(b"a", "ka").unwrap().id;
    let b = s.enqueue(b"b", "").unwrap().id;
    assert!(s.dead_letter(b, "gone").unwrap());
    drop(s);
    // Back to version 1: what migrations 0008, 0007, 0006, 0005, 0004,
    // 0003 and 0002 changed is undone (version 1 tied rows to their spool with
    // foreign keys).
    psql(
        &base,
        &format!(
            "BEGIN; \
             ALTER TABLE {schema}.items DROP COLUMN key_prefix; \
             DELETE FROM {schema}.spool_schema WHERE version = 8; \
             DROP INDEX {schema}.items_leased; \
             DELETE FROM {schema}.spool_schema WHERE version = 7; \
             ALTER TABLE {schema}.push_clients DROP COLUMN served_by; \
             DELETE FROM {schema}.spool_schema WHERE version = 6; \
             DROP INDEX {schema}.dead_letters_key; \
             DELETE FROM {schema}.spool_schema WHERE version = 5; \
             DROP TRIGGER spools_cascade ON {schema}.spools; \
             DROP FUNCTION {schema}.spools_cascade(); \
             ALTER TABLE {schema}.items ADD FOREIGN KEY (spool) REFERENCES {schema}.spools (name) ON DELETE CASCADE; \
             ALTER TABLE {schema}.dead_letters ADD FOREIGN KEY (spool) REFERENCES {schema}.spools (name) ON DELETE CASCADE; \
             ALTER TABLE {schema}.push_skips ADD FOREIGN KEY (spool) REFERENCES {schema}.spools (name) ON DELETE CASCADE; \
             ALTER TABLE {schema}.push_clients ADD FOREIGN KEY (spool) REFERENCES {schema}.spools (name) ON DELETE CASCADE; \
             ALTER TABLE {schema}.push_entries ADD FOREIGN KEY (spool) REFERENCES {schema}.spools (name) ON DELETE CASCADE; \
             DELETE FROM {schema}.spool_schema WHERE version = 4; \
             DROP TABLE {schema}.delivered; \
             ALTER TABLE {schema}.spools DROP COLUMN retain_ms, DROP COLUMN retained; \
             DELETE FROM {schema}.spool_schema WHERE version = 3; \
             DROP INDEX {schema}.items_coalesce, {schema}.items_group, {schema}.items_group_leased; \
             ALTER TABLE {schema}.items DROP COLUMN grp, DROP COLUMN coalesce_key; \
             ALTER TABLE {schema}.dead_letters DROP COLUMN grp, DROP COLUMN coalesce_key; \
             ALTER TABLE {schema}.spools DROP COLUMN on_full, DROP COLUMN evicted_total; \
             DELETE FROM {schema}.spool_schema WHERE version = 2; COMMIT;"
        ),
    );
    let ro = open_with(&url, OpenMode::ReadOnly, None);
    let items = ro.drain().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!((items[0].id, items[0].key.as_str()), (a, "ka"));
    assert_eq!(items[0].group, None);
    assert_eq!(ro.get(a).unwrap().unwrap().coalesce_key, None);
    assert_eq!(ro.dead_get(b).unwrap().unwrap().item.payload, b"b");
    assert_eq!(ro.dead_page(0, 10).unwrap().len(), 1);
    assert_eq!(ro.on_full().unwrap(), OnFull::Reject);
    let st = ro.stats(T0).unwrap();
    assert_eq!((st.depth, st.dead_letters, st.evicted_total), (1, 1, 0));
    assert_eq!((st.delivered_retained, st.retain), (0, None));
    assert_eq!(ro.retain().unwrap(), None);
    assert!(ro.push_clients().unwrap().is_empty());
    assert!(ro.delivered_page(0, 10).unwrap().is_empty());
    assert_eq!(ro.delivered_get(a).unwrap(), None);
    assert_eq!(
        psql(
            &base,
            &format!("SELECT max(version) FROM {schema}.spool_schema")
        ),
        "1",
        "a read-only open migrated"
    );
    // The export path reads it too.
    let out = bin().args(["-s", &url, "export"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    // The spool header and the two items.
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    // A writable open migrates, keeping every row.
    let rw = open_with(&url, OpenMode::ReadWrite, None);
    assert_eq!(
        psql(
            &base,
            &format!(
                "SELECT string_agg(version::text, ',' ORDER BY version) FROM {schema}.spool_schema"
            )
        ),
        "1,2,3,4,5,6,7,8"
    );
    // Version 8 stores the key prefix, computed for the rows already there.
    assert_eq!(
        psql(
            &base,
            &format!("SELECT encode(key_prefix, 'escape') FROM {schema}.items")
        ),
        "ka"
    );
    // Version 7 finds the leased items by id.
    assert_eq!(
        psql(
            &base,
            &format!(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = '{schema}' \
                 AND indexname = 'items_leased'"
            )
        ),
        "1"
    );
    // Version 5 finds dead letters by key.
    assert_eq!(
        psql(
            &base,
            &format!(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = '{schema}' \
                 AND indexname = 'dead_letters_key'"
            )
        ),
        "1"
    );
    // Version 4 checks no foreign key per row.
    assert_eq!(
        psql(
            &base,
            &format!(
                "SELECT count(*) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace \
                 WHERE n.nspname = '{schema}' AND c.contype = 'f'"
            )
        ),
        "0"
    );
    assert_eq!(rw.drain().unwrap(), items);
    assert_eq!(rw.dead_count().unwrap(), 1);
    let g = rw
        .enqueue_batch(
            &[NewItem::new(&b"c"[..], "").in_group("g")],
            &EnqueueOptions::default(),
        )
        .unwrap();
    assert_eq!(
        rw.get(g[0].id).unwrap().unwrap().group.as_deref(),
        Some("g")
    );
    assert_eq!(rw.requeue(&[b]).unwrap(), vec![true]);
    assert_eq!(rw.size().unwrap(), 3);
    // Retention (version 3) works on the migrated schema.
    rw.set_retain(Some(Duration::from_secs(3600))).unwrap();
    assert_eq!(rw.mark_done(&[a]).unwrap(), vec![true]);
    assert_eq!(
        rw.delivered_get(a).unwrap().unwrap().delivery.evidence,
        Evidence::Done
    );
    assert_eq!(rw.enqueue(b"a2", "ka").unwrap(), Enqueued::delivered(a));
    // The read-only handle opened at version 1 still reads (retention as
    // off: it does not know the table).
    assert_eq!(ro.size().unwrap(), 2);
    assert_eq!(ro.drain().unwrap().len(), 2);
    assert_eq!(ro.retain().unwrap(), None);
    drop((ro, rw));
    // Deleting a spool's row removes the whole spool (the cascade of
    // versions 1 to 3, a trigger since version 4), and no other spool.
    let sep = if base.contains('?') { '&' } else { '?' };
    let other = open_with(
        &format!("{base}{sep}schema={schema}&spool=other"),
        OpenMode::Create,
        None,
    );
    other.enqueue(b"o", "").unwrap();
    drop(other);
    psql(
        &base,
        &format!("DELETE FROM {schema}.spools WHERE name <> 'other'"),
    );
    let left = |table: &str| {
        psql(
            &base,
            &format!("SELECT spool || ':' || count(*) FROM {schema}.{table} GROUP BY spool"),
        )
    };
    assert_eq!(left("items"), "other:1");
    assert_eq!(left("dead_letters"), "");
    assert_eq!(left("delivered"), "");
    psql(&base, &format!("DROP SCHEMA {schema} CASCADE"));
}

// ----------------------------------------------------------- durability

fn pg_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/pg.sh")
}

/// On a cluster with PostgreSQL's default durability settings, every
/// enqueue that exited 0 is present after the server was killed with
/// SIGKILL and restarted.
#[test]
fn acknowledged_enqueues_survive_a_server_crash() {
    if pg_url("postgres::acknowledged_enqueues_survive_a_server_crash").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("durable");
    let cluster = cluster.to_str().unwrap();
    let out = Command::new("bash")
        .arg(pg_script())
        .args(["start", cluster, "--durable"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stop = scopeguard(cluster.to_string());
    let url = format!("{base}&spool=durable");
    // Producers keep enqueueing while the server is killed.
    let acked = Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let url = url.clone();
            let acked = acked.clone();
            std::thread::spawn(move || {
                for i in 0..400 {
                    let out = bin()
                        .args(["-q", "-s", &url, "enqueue", &format!("w{w}-{i}")])
                        .output()
                        .unwrap();
                    if out.status.success() {
                        let id: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
                        acked.lock().unwrap().push(id);
                    } else {
                        assert_eq!(out.status.code(), Some(75), "{out:?}");
                        break;
                    }
                }
            })
        })
        .collect();
    let start = Instant::now();
    while acked.lock().unwrap().len() < 30 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let k = Command::new("bash")
        .arg(pg_script())
        .args(["kill", cluster])
        .status()
        .unwrap();
    assert!(k.success());
    for w in workers {
        w.join().unwrap();
    }
    let r = Command::new("bash")
        .arg(pg_script())
        .args(["restart", cluster])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 10,
        "too few enqueues before the crash: {}",
        acked.len()
    );
    let s = open_with(&url, OpenMode::ReadOnly, None);
    let have: BTreeSet<u64> = s.drain().unwrap().iter().map(|i| i.id).collect();
    let lost: Vec<u64> = acked
        .iter()
        .filter(|id| !have.contains(id))
        .copied()
        .collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert_eq!(s.size().unwrap(), have.len() as u64);
    drop(s);
    drop(stop);
}

/// Stops the cluster in `dir` when dropped (also when the test fails).
struct Stop(String);

fn scopeguard(dir: String) -> Stop {
    Stop(dir)
}

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(pg_script())
            .args(["stop", &self.0])
            .status();
    }
}

// ----------------------------------------------------------- follow mode

/// `replay --follow` on a PostgreSQL spool is woken by the NOTIFY of
/// another process's enqueue (with a poll of an hour, only the
/// notification can find it), and SIGTERM ends it with exit 0.
#[test]
fn follow_mode_is_woken_by_another_process_s_enqueue() {
    let Some(url) = new_spool("follow") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("delivered.txt");
    let err = dir.path().join("follow.err");
    let exec = format!(
        "sh -c 'cat >> {}; echo >> {}'",
        file.display(),
        file.display()
    );
    assert!(bin()
        .args(["-q", "-s", &url, "enqueue", "first"])
        .status()
        .unwrap()
        .success());
    let mut child = bin()
        .args(["-v", "-s", &url, "replay", "--follow", "--poll", "1h"])
        .args(["--exec", &exec])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let delivered = |want: &[&str]| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let got = std::fs::read_to_string(&file).unwrap_or_default();
            if got.lines().collect::<Vec<_>>() == want {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    assert!(
        delivered(&["first"]),
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    assert!(bin()
        .args(["-q", "-s", &url, "enqueue", "second"])
        .status()
        .unwrap()
        .success());
    let start = Instant::now();
    assert!(
        delivered(&["first", "second"]),
        "{}",
        std::fs::read_to_string(&err).unwrap()
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    // SAFETY: kill only sends a signal to our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("woken by NOTIFY on spool_enqueue:"),
        "{stderr}"
    );
}

/// `spool shape` counts an item without an enqueue time (a reference
/// import) and one enqueued after now as age 0, an item exactly at an
/// edge in the bucket that edge opens, and agrees with the generic walk.
#[test]
fn shape_ages_items_without_or_after_now_as_0() {
    use spool::ops::shape::{scan_cells, ShapeBy, ShapeCell, ShapeQuery, ShapeState};
    let Some(url) = new_spool("shape-ages") else {
        return;
    };
    let base = pg_url("postgres::shape-ages").unwrap();
    let schema = format!("shape_{}", std::process::id());
    let url = format!("{url}&schema={schema}");
    let clock = ManualClock::new(T0);
    let s = open_with(&url, OpenMode::Create, Some(&clock));
    for (p, k) in [("a", "x:1"), ("b", "x/2"), ("c", "y"), ("d", "")] {
        s.enqueue(p.as_bytes(), k).unwrap();
    }
    drop(s);
    let ms = T0.as_millis();
    psql(
        &base,
        &format!(
            "UPDATE {schema}.items SET enqueued_at = CASE id \
               WHEN 1 THEN NULL WHEN 2 THEN {} WHEN 3 THEN {} ELSE {} END",
            ms + 3_600_000,
            ms - 60_000,
            ms - 86_400_000
        ),
    );
    let counted = |cells: Vec<ShapeCell>| {
        let mut m = BTreeMap::new();
        for c in cells {
            *m.entry((c.value, c.attempted, c.bucket)).or_insert(0u64) += c.count;
        }
        m
    };
    let check = |s: &Spool| {
        for by in [
            ShapeBy::Error,
            ShapeBy::Group,
            ShapeBy::Attempts,
            ShapeBy::KeyPrefix,
        ] {
            let q = ShapeQuery {
                by,
                state: ShapeState::Pending,
                now: T0,
                edges_ms: vec![60_000, 120_000],
                yield_to_writers: false,
            };
            let cells = counted(s.shape_cells(&q).unwrap());
            assert_eq!(cells, counted(scan_cells(&**s, &q).unwrap()), "{by:?}");
            let mut buckets = [0u64; 3];
            for ((_, _, b), n) in &cells {
                buckets[*b] += n;
            }
            assert_eq!(buckets, [2, 1, 1], "{by:?}");
        }
    };
    // Version 8: key prefixes from the stored column.
    check(&open_with(&url, OpenMode::ReadOnly, Some(&clock)));
    // Version 7 opened read-only: cut from the key by the query itself.
    psql(
        &base,
        &format!(
            "BEGIN; ALTER TABLE {schema}.items DROP COLUMN key_prefix; \
             DELETE FROM {schema}.spool_schema WHERE version = 8; COMMIT"
        ),
    );
    check(&open_with(&url, OpenMode::ReadOnly, Some(&clock)));
    psql(&base, &format!("DROP SCHEMA {schema} CASCADE"));
}

/// `init` of a spool name the database already has says so in
/// PostgreSQL's words (exit 73, nothing changed), and `compact` reports
/// the dead tuples and what became of the tables' size without calling
/// growth "saved".
#[test]
fn init_and_compact_speak_of_postgresql() {
    let Some(url) = new_spool("wording") else {
        return;
    };
    let run = |args: &[&str]| bin().args(["-s", &url]).args(args).output().unwrap();
    assert!(run(&["init"]).status.success());
    assert!(run(&["enqueue", "a"]).status.success());
    let out = run(&["init", "--max-depth", "5"]);
    assert_eq!(out.status.code(), Some(73));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("a spool named \"wording")
            && err.contains("already exists in database \"")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(!err.contains("path") && !err.contains("file"), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&run(&["config", "max-depth"]).stdout).trim(),
        "none"
    );
    for p in ["b", "c", "d"] {
        assert!(run(&["enqueue", p]).status.success());
    }
    assert!(run(&["done", "2", "3", "4"]).status.success());
    let out = run(&["compact"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let tables = text
        .lines()
        .find(|l| l.starts_with("tables"))
        .unwrap_or_else(|| panic!("no tables line: {text}"));
    let (before, after) = {
        let json = run(&["--json", "compact"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
        assert!(
            v["dead_tuples_before"].is_u64() && v["dead_tuples_after"].is_u64(),
            "{v}"
        );
        (v["bytes_before"].as_u64(), v["bytes_after"].as_u64())
    };
    assert!(before.is_some() && after.is_some());
    assert!(
        ["saved", "grew by", "unchanged"]
            .iter()
            .any(|w| tables.contains(w)),
        "{tables}"
    );
    assert!(!tables.contains("0 B saved"), "{tables}");
    assert!(text.contains("dead tuples"), "{text}");
}

/// `spool serve` on a PostgreSQL spool answers `/metrics` and `/healthz`
/// from a snapshot read on a second connection (not the one that
/// commits pushes), with the client count from one count.
#[test]
fn serve_reads_its_metrics_on_a_second_connection() {
    use std::io::{BufRead, BufReader};
    let Some(url) = new_spool("serve_metrics") else {
        return;
    };
    let mut child = bin()
        .env_remove("CREDENTIALS_DIRECTORY")
        .args(["-s", &url, "serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start spool serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("listening line");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not listening: {line:?}"))
        .to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    for client in ["edge-1", "edge-2"] {
        let body = spool::push::wire::encode_request(
            client,
            0,
            &[spool::push::wire::OutEntry::Item {
                seq: 1,
                id: 1,
                key: "",
                payload: client.as_bytes(),
                enqueued_at: None,
                group: None,
                coalesce_key: None,
            }],
        );
        let r = agent
            .post(&format!("{base}/v1/push"))
            .send(&body[..])
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    let text = agent
        .get(&format!("{base}/metrics"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .to_string()
    };
    assert_eq!(value("spool_serve_clients"), "2");
    assert_eq!(value("spool_depth"), "2");
    assert_eq!(value("spool_serve_snapshots_total"), "1");
    assert!(!text.contains("password"), "{text}");
    let r = agent.get(&format!("{base}/healthz")).call().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
}
