//! `spool serve` on loopback, in three parts, each printing Markdown (the
//! figures in `docs/benchmarks.md` come from here):
//!
//! * `throughput` (the default): `/v1/items` throughput with 1 and with
//!   16 concurrent keep-alive clients (group commit at work), and the
//!   latency of a lone request.
//! * `metrics`: the latency of a lone push while 0, 8 and 64 connections
//!   scrape `/metrics` as fast as they can, on a spool that knows
//!   `SPOOL_BENCH_CLIENTS` push clients (default 100,000), and how many
//!   snapshots of the spool's state the scrapes cost.
//! * `memory`: 16 concurrent pushes of ~8 MB bodies (50,000 entries each)
//!   into a SQLite and an NDJSON spool under the default
//!   `--memory-budget`, then one 1,000,000-entry body; the server's peak
//!   RSS (`VmHWM`), the answers, and a lone small push's latency
//!   meanwhile.
//!
//! * `receivers`: `/v1/items` into one PostgreSQL spool
//!   (`SPOOL_BENCH_PG_URL`) through one instance with 1 and 16 clients,
//!   and through two instances sharing the spool.
//!
//! Run with `cargo bench --bench serve` (throughput), `cargo bench
//! --bench serve -- metrics`, `cargo bench --bench serve -- memory`,
//! `cargo bench --bench serve -- receivers`, or
//! `-- throughput metrics memory receivers` for all (release build of the real
//! binary; `SPOOL_BENCH_DIR` puts the spools on a particular disk,
//! default a temp dir; `SPOOL_BENCH_SECONDS` sets each timed phase's
//! length, default 5; `SPOOL_BIN` runs that `spool` binary instead of this
//! build's, to compare two builds). The clients run on the same machine as the
//! server, so on a small machine they compete with it for the CPU.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

fn bench_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("SPOOL_BENCH_DIR") {
        Some(d) => {
            let p = PathBuf::from(d);
            std::fs::create_dir_all(&p).expect("create SPOOL_BENCH_DIR");
            (None, p)
        }
        None => {
            let t = tempfile::tempdir().expect("temp dir");
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    }
}

fn payload(c: usize, i: u64) -> Vec<u8> {
    format!(
        "{{\"event\":\"progress\",\"client\":{c},\"seq\":{i},\"pad\":\"0123456789abcdef0123456789abcdef\"}}"
    )
    .into_bytes()
}

/// A minimal keep-alive HTTP/1.1 client for one connection: it writes a
/// request and reads the answer's head and `Content-Length` body, and
/// nothing else, so that the clients take as little of the machine's CPU
/// from the server as possible.
struct Conn {
    stream: std::net::TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn new(addr: &str) -> Conn {
        let stream = std::net::TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            buf: Vec::with_capacity(4096),
        }
    }

    /// POST `body` to /v1/items; returns the status.
    fn post(&mut self, body: &[u8]) -> u16 {
        self.request("POST", "/v1/items", body)
    }

    /// Send one request with `body` (none for an empty GET); returns the
    /// status once the whole answer has arrived, 0 when the connection
    /// failed. A server that answers before reading the body (a 413 or
    /// 503 on a declared length) closes the connection: after any status
    /// but 2xx, make a new one.
    fn request(&mut self, method: &str, path: &str, body: &[u8]) -> u16 {
        use std::io::{Read, Write};
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        // The server may answer before it has read everything.
        let _ = self.stream.write_all(&req);
        self.buf.clear();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
                let status: u16 = head[9..12].parse().expect("status");
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().expect("length"))
                    .unwrap_or(0);
                while self.buf.len() < end + 4 + len {
                    match self.stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return 0,
                        Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                    }
                }
                return status;
            }
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return 0,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// `clients` keep-alive clients posting to `addr` for `secs`; returns
/// (requests, elapsed).
/// `clients` keep-alive clients posting to `addrs` (client `c` to
/// `addrs[c % addrs.len()]`) for `secs` seconds: requests done, time.
fn throughput(addrs: &[&str], clients: usize, secs: f64) -> (u64, Duration) {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(clients + 1);
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        for c in 0..clients {
            let (done, stop, barrier) = (&done, &stop, &barrier);
            let addr = addrs[c % addrs.len()];
            s.spawn(move || {
                let mut conn = Conn::new(addr);
                barrier.wait();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(conn.post(&payload(c, i)), 201);
                    i += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        elapsed = start.elapsed();
    });
    (done.load(Ordering::Relaxed), elapsed)
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Remove a spool and its companions.
fn fresh(spool: &Path) {
    for suffix in [
        "",
        "-wal",
        "-shm",
        ".dead",
        ".meta",
        ".idx",
        ".delivered",
        ".serve.lock",
    ] {
        let mut p = spool.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
}

/// `spool -s SPOOL serve --listen 127.0.0.1:0 ARGS…`, running: the child
/// and its `http://` base URL.
fn serve(spool: &Path, args: &[&str]) -> (Child, String) {
    let bin = std::env::var_os("SPOOL_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_spool").into());
    let mut child = Command::new(bin)
        .arg("-s")
        .arg(spool)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start spool serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("listening line");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .expect("listening on")
        .to_string();
    (child, base)
}

/// SIGTERM the server and wait; panics unless it exits 0.
fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert!(status.success(), "spool serve exited with {status}");
}

/// The peak resident set of process `pid` so far, in MiB (`VmHWM`).
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// p50, p90, p99 and max of `lat`, as a Markdown row's cells.
fn percentiles(lat: &mut [Duration]) -> String {
    if lat.is_empty() {
        return "– | – | – | –".into();
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    format!(
        "{} | {} | {} | {}",
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(*lat.last().unwrap())
    )
}

/// A push body for `client`: entries `first..first + n` with payloads of
/// `size` bytes.
fn push_body(client: &str, acked: u64, first: u64, n: u64, size: usize) -> Vec<u8> {
    use spool::push::wire::{encode_request, OutEntry};
    let payloads: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut p = format!("{:012}", first + i).into_bytes();
            p.resize(size.max(12), b'x');
            p
        })
        .collect();
    let entries: Vec<OutEntry<'_>> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| OutEntry::Item {
            seq: first + i as u64,
            id: first + i as u64,
            key: "",
            payload: p,
            enqueued_at: None,
            group: None,
            coalesce_key: None,
        })
        .collect();
    encode_request(client, acked, &entries)
}

/// A lone client pushing one small entry at a time for `secs` (or until
/// `stop_early`), one request after another: the time until each entry
/// was acknowledged, a 503 answered (memory budget) being resent at once,
/// and how many 503s there were.
fn lone_pushes(
    addr: &str,
    client: &str,
    secs: f64,
    stop_early: &AtomicBool,
) -> (Vec<Duration>, u64) {
    let mut conn = Conn::new(addr);
    let mut lat = Vec::new();
    let mut busy = 0u64;
    let start = Instant::now();
    let mut seq = 1u64;
    while start.elapsed().as_secs_f64() < secs && !stop_early.load(Ordering::Relaxed) {
        let body = push_body(client, seq - 1, seq, 1, 90);
        let t = Instant::now();
        loop {
            match conn.request("POST", "/v1/push", &body) {
                200 => break,
                0 | 503 => {
                    busy += 1;
                    conn = Conn::new(addr);
                }
                other => panic!("lone push: status {other}"),
            }
        }
        lat.push(t.elapsed());
        seq += 1;
    }
    (lat, busy)
}

/// Make `n` push clients in `spool` (SQLite), in one transaction.
fn make_clients(spool: &Path, n: u64) {
    use spool::push::receiver::{apply_push, ReceiveLimits};
    use spool::push::wire::{Entry, PushRequest};
    let q = spool::Spool::open(spool, &spool::OpenOptions::new(spool::OpenMode::Create))
        .expect("open the spool");
    q.receive(&mut |txn| {
        for i in 0..n {
            let req = PushRequest {
                client_id: format!("bench-client-{i:07}"),
                acked: 0,
                entries: vec![Entry::Skip { seq: 1 }],
            };
            apply_push(txn, &req, &ReceiveLimits::default())?;
        }
        Ok(())
    })
    .expect("make clients");
}

/// A lone push's latency while `scrapers` connections loop `/metrics`.
fn bench_metrics(dir: &Path, secs: f64) {
    let clients: u64 = std::env::var("SPOOL_BENCH_CLIENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let spool = dir.join("serve-metrics-bench.db");
    fresh(&spool);
    make_clients(&spool, clients);
    // Items too, so that the gauges have something to count.
    let items: u64 = std::env::var("SPOOL_BENCH_ITEMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let lines = dir.join("serve-metrics-bench.lines");
    let text: String = (0..items)
        .map(|i| format!("{{\"event\":\"progress\",\"n\":{i}}}\n"))
        .collect();
    std::fs::write(&lines, text).expect("write the lines");
    let status = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("-s")
        .arg(&spool)
        .args(["enqueue", "--lines", "--file"])
        .arg(&lines)
        .stdout(Stdio::null())
        .status()
        .expect("enqueue");
    assert!(status.success());
    let _ = std::fs::remove_file(&lines);
    let (child, base) = serve(&spool, &["--max-connections-per-peer", "128"]);
    let addr = base.strip_prefix("http://").expect("http").to_string();
    let a = agent();
    let text = |a: &ureq::Agent| {
        a.get(&format!("{base}/metrics"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    };
    println!(
        "### A lone push while connections scrape `/metrics` ({clients} push clients, {items} items)"
    );
    println!();
    println!("| scrapers | scrapes | snapshots computed | lone pushes | p50 | p90 | p99 | max |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (round, scrapers) in [0usize, 8, 64].into_iter().enumerate() {
        let before = metric(&text(&a), "spool_serve_snapshots_total");
        let scrapes = AtomicU64::new(0);
        let stop_flag = AtomicBool::new(false);
        let mut lat = Vec::new();
        std::thread::scope(|s| {
            for _ in 0..scrapers {
                let (addr, scrapes, stop_flag) = (&addr, &scrapes, &stop_flag);
                s.spawn(move || {
                    let mut conn = Conn::new(addr);
                    while !stop_flag.load(Ordering::Relaxed) {
                        assert_eq!(conn.request("GET", "/metrics", b""), 200);
                        scrapes.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            lat = lone_pushes(
                &addr,
                &format!("lone-{round}"),
                secs,
                &AtomicBool::new(false),
            )
            .0;
            stop_flag.store(true, Ordering::Relaxed);
        });
        let after = metric(&text(&a), "spool_serve_snapshots_total");
        println!(
            "| {scrapers} | {} | {} | {} | {} |",
            scrapes.load(Ordering::Relaxed),
            after.saturating_sub(before),
            lat.len(),
            percentiles(&mut lat)
        );
    }
    println!();
    stop(child);
}

/// Concurrent large bodies under the memory budget; one huge body.
fn bench_memory(dir: &Path, secs: f64) {
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    // SPOOL_BENCH_SENDERS and SPOOL_BENCH_ENTRIES shrink it for a quick
    // check that the benchmark runs.
    let senders = env("SPOOL_BENCH_SENDERS", 16) as usize;
    let entries = env("SPOOL_BENCH_ENTRIES", 50_000);
    let huge_entries = env("SPOOL_BENCH_HUGE_ENTRIES", 1_000_000);
    // ~8 MB on the wire, under the default --max-body of 8 MiB.
    let body_of = |c: usize| push_body(&format!("big-{c}"), 0, 1, entries, 8);
    let sample = body_of(0);
    assert!(sample.len() < 8 << 20, "{} bytes", sample.len());
    println!(
        "### {senders} concurrent pushes of {entries} entries ({:.1} MB each), default `--memory-budget`",
        sample.len() as f64 / 1e6
    );
    println!();
    println!("| spool | 200 | 503 (resent) | 413 | seconds | lone pushes (503s) | lone p50 | p90 | p99 | max | server peak RSS |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    drop(sample);
    for name in ["serve-memory-bench.db", "serve-memory-bench.ndjson"] {
        let spool = dir.join(name);
        fresh(&spool);
        let (child, base) = serve(&spool, &["--max-entries", "100000"]);
        let addr = base.strip_prefix("http://").expect("http").to_string();
        let counts = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
        let done = AtomicBool::new(false);
        let barrier = Barrier::new(senders + 1);
        let mut lat = (Vec::new(), 0);
        let mut took = Duration::ZERO;
        std::thread::scope(|s| {
            let mut handles = Vec::new();
            for c in 0..senders {
                let (addr, counts, barrier) = (&addr, &counts, &barrier);
                handles.push(s.spawn(move || {
                    let body = body_of(c);
                    barrier.wait();
                    loop {
                        let mut conn = Conn::new(addr);
                        match conn.request("POST", "/v1/push", &body) {
                            200 => {
                                counts[0].fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            0 | 503 => counts[1].fetch_add(1, Ordering::Relaxed),
                            413 => {
                                counts[2].fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            other => panic!("status {other}"),
                        };
                        // A sender honours Retry-After; here: a short pause.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }));
            }
            barrier.wait();
            let start = Instant::now();
            let (addr, done) = (&addr, &done);
            let lone = s.spawn(move || lone_pushes(addr, "lone", secs * 12.0, done));
            for h in handles {
                h.join().unwrap();
            }
            took = start.elapsed();
            done.store(true, Ordering::Relaxed);
            lat = lone.join().unwrap();
        });
        let rss = peak_rss_mib(child.id());
        let (mut lat, busy) = lat;
        println!(
            "| {} | {} | {} | {} | {:.2} | {} ({busy}) | {} | {rss:.0} MiB |",
            if name.ends_with(".db") {
                "SQLite"
            } else {
                "NDJSON"
            },
            counts[0].load(Ordering::Relaxed),
            counts[1].load(Ordering::Relaxed),
            counts[2].load(Ordering::Relaxed),
            took.as_secs_f64(),
            lat.len(),
            percentiles(&mut lat)
        );
        stop(child);
    }
    println!();

    // One body of a million entries (over 100 MB even with 8-byte
    // payloads) under the default limits but for --max-body and
    // --max-entries: the memory budget refuses it (413) rather than let it
    // hold everyone up.
    let spool = dir.join("serve-memory-bench-huge.db");
    fresh(&spool);
    let (child, base) = serve(
        &spool,
        &["--max-body", "200MiB", "--max-entries", "1000000"],
    );
    let addr = base.strip_prefix("http://").expect("http").to_string();
    let huge = push_body("huge", 0, 1, huge_entries, 8);
    let done = AtomicBool::new(false);
    let (status, took, (mut lat, busy)) = std::thread::scope(|s| {
        let (addr, done) = (&addr, &done);
        let lone = s.spawn(move || lone_pushes(addr, "lone", secs * 12.0, done));
        let t = Instant::now();
        let status = Conn::new(addr).request("POST", "/v1/push", &huge);
        let took = t.elapsed();
        done.store(true, Ordering::Relaxed);
        (status, took, lone.join().unwrap())
    });
    println!(
        "### One push of {huge_entries} entries ({:.0} MB), `--max-body 200MiB --max-entries 1000000`",
        huge.len() as f64 / 1e6
    );
    println!();
    println!("| answer | seconds | lone pushes meanwhile (503s) | lone p50 | p90 | p99 | max | server peak RSS |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {status} | {:.2} | {} ({busy}) | {} | {:.0} MiB |",
        took.as_secs_f64(),
        lat.len(),
        percentiles(&mut lat),
        peak_rss_mib(child.id())
    );
    println!();
    stop(child);
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let parts: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |p: &str| {
        if parts.is_empty() {
            p == "throughput"
        } else {
            parts.iter().any(|a| a == p)
        }
    };
    let secs: f64 = std::env::var("SPOOL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let (_guard, dir) = bench_dir();
    if wants("throughput") {
        bench_throughput(&dir, secs);
    }
    if wants("metrics") {
        bench_metrics(&dir, secs);
    }
    if wants("memory") {
        bench_memory(&dir, secs);
    }
    if wants("receivers") {
        bench_receivers(secs);
    }
}

/// `/v1/items` into one PostgreSQL spool (`SPOOL_BENCH_PG_URL`, e.g. the
/// cluster `benches/postgres.sh` starts): one instance with 1 and 16
/// keep-alive clients, then two instances sharing the spool with 16
/// clients split between them. All on one machine: the clients, the
/// servers and PostgreSQL share its cores.
fn bench_receivers(secs: f64) {
    let Ok(base) = std::env::var("SPOOL_BENCH_PG_URL") else {
        println!("receivers: skipped, SPOOL_BENCH_PG_URL is not set");
        return;
    };
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}spool=serve-bench-{}", std::process::id());
    let spool = Path::new(&url);
    let addr = |base: &str| base.strip_prefix("http://").expect("http").to_string();
    let (a, base_a) = serve(spool, &[]);
    let addr_a = addr(&base_a);
    throughput(&[&addr_a], 4, 0.5);
    let (n1, d1) = throughput(&[&addr_a], 1, secs);
    let (n16, d16) = throughput(&[&addr_a], 16, secs);
    let (b, base_b) = serve(spool, &[]);
    let addr_b = addr(&base_b);
    throughput(&[&addr_b], 4, 0.5);
    let (n2, d2) = throughput(&[&addr_a, &addr_b], 16, secs);
    stop(a);
    stop(b);
    let rate = |n: u64, d: Duration| n as f64 / d.as_secs_f64();
    let (r1, r16, r2) = (rate(n1, d1), rate(n16, d16), rate(n2, d2));
    println!("### `/v1/items` into one PostgreSQL spool, one and two `spool serve` instances\n");
    println!("| instances | clients | requests | seconds | requests/s | vs one client |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (inst, clients, n, d, r) in [
        (1, 1, n1, d1, r1),
        (1, 16, n16, d16, r16),
        (2, 16, n2, d2, r2),
    ] {
        println!(
            "| {inst} | {clients} | {n} | {:.2} | {r:.0} | {:.1}x |",
            d.as_secs_f64(),
            r / r1
        );
    }
    println!();
}

/// `/v1/items` throughput with 1 and 16 clients, and a lone request's
/// latency.
fn bench_throughput(dir: &Path, secs: f64) {
    let spool = dir.join("serve-bench.db");
    fresh(&spool);
    let (child, base) = serve(&spool, &[]);
    let addr = base.strip_prefix("http://").expect("http").to_string();

    // Warm up (creates the tables, fills caches).
    throughput(&[&addr], 4, 0.5);

    // A lone client: the latency of each request, one after another.
    let a = agent();
    let mut conn = Conn::new(&addr);
    let mut lat: Vec<Duration> = Vec::new();
    for i in 0..2_000u64 {
        let t = Instant::now();
        assert_eq!(conn.post(&payload(99, i)), 201);
        lat.push(t.elapsed());
    }
    drop(conn);
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];

    let text = |a: &ureq::Agent| {
        a.get(&format!("{base}/metrics"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap()
    };
    let before = text(&a);
    let (n1, d1) = throughput(&[&addr], 1, secs);
    let mid = text(&a);
    let (n16, d16) = throughput(&[&addr], 16, secs);
    let after = text(&a);
    let groups = |from: &str, to: &str| {
        let commits =
            metric(to, "spool_serve_commits_total") - metric(from, "spool_serve_commits_total");
        let reqs = metric(to, "spool_serve_committed_requests_total")
            - metric(from, "spool_serve_committed_requests_total");
        (commits, reqs as f64 / commits.max(1) as f64)
    };
    let (c1, g1) = groups(&before, &mid);
    let (c16, g16) = groups(&mid, &after);
    let r1 = n1 as f64 / d1.as_secs_f64();
    let r16 = n16 as f64 / d16.as_secs_f64();
    stop(child);

    println!("| clients | requests | seconds | requests/s | commits | requests per commit |");
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| 1 | {n1} | {:.2} | {r1:.0} | {c1} | {g1:.1} |",
        d1.as_secs_f64()
    );
    println!(
        "| 16 | {n16} | {:.2} | {r16:.0} | {c16} | {g16:.1} |",
        d16.as_secs_f64()
    );
    println!();
    println!("16 clients / 1 client: {:.1}x", r16 / r1);
    println!();
    println!("| lone request (2,000 in a row, keep-alive) | p50 | p90 | p99 | max |");
    println!("|---|---:|---:|---:|---:|");
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    println!(
        "| `POST /v1/items`, ~90-byte payload | {} | {} | {} | {} |",
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(*lat.last().unwrap())
    );
    println!();
}
