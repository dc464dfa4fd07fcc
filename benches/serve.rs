//! `spool serve` on loopback: `/v1/items` throughput with 1 and with 16
//! concurrent keep-alive clients (group commit at work), and the latency
//! of a lone request.
//!
//! Run with `cargo bench --bench serve` (release build of the real
//! binary; `SPOOL_BENCH_DIR` puts the spool on a particular disk, default
//! a temp dir; `SPOOL_BENCH_SECONDS` sets each throughput phase's length,
//! default 5). Prints Markdown; the figures in `docs/benchmarks.md` come
//! from here. The clients run on the same machine as the server, so on a
//! small machine they compete with it for the CPU.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
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
        use std::io::{Read, Write};
        let mut req = format!(
            "POST /v1/items HTTP/1.1\r\nHost: bench\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        self.stream.write_all(&req).expect("send");
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
                    let n = self.stream.read(&mut chunk).expect("read");
                    assert!(n > 0, "closed");
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                return status;
            }
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "closed");
            self.buf.extend_from_slice(&chunk[..n]);
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
fn throughput(addr: &str, clients: usize, secs: f64) -> (u64, Duration) {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(clients + 1);
    let mut elapsed = Duration::ZERO;
    std::thread::scope(|s| {
        for c in 0..clients {
            let (done, stop, barrier) = (&done, &stop, &barrier);
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

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let secs: f64 = std::env::var("SPOOL_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    let (_guard, dir) = bench_dir();
    let spool = dir.join("serve-bench.db");
    for suffix in ["", "-wal", "-shm"] {
        let mut p = spool.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("-s")
        .arg(&spool)
        .args(["serve", "--listen", "127.0.0.1:0"])
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
    let addr = base.strip_prefix("http://").expect("http").to_string();

    // Warm up (creates the tables, fills caches).
    throughput(&addr, 4, 0.5);

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
    let (n1, d1) = throughput(&addr, 1, secs);
    let mid = text(&a);
    let (n16, d16) = throughput(&addr, 16, secs);
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

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().expect("wait");

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
    assert!(status.success(), "spool serve exited with {status}");
}
