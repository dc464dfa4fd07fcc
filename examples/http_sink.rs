//! A fast local HTTP sink for the replay benchmark (`benches/replay.sh`).
//!
//! Listens on 127.0.0.1, reads every request body, answers `200 OK`
//! (after `--delay-ms N` when asked, to play a distant endpoint) and counts
//! the requests it answered. `GET /count` returns that count (and is not
//! counted itself), so a benchmark can check that every item arrived.
//!
//! ```sh
//! cargo build --release --example http_sink
//! target/release/examples/http_sink --port 0 --delay-ms 20 --threads 64
//! ```
//!
//! The first line on stdout is `listening on http://127.0.0.1:PORT`; the
//! sink runs until it is killed. Requests are served by `--threads`
//! worker threads (default 64), so up to that many delayed answers are in
//! flight at once.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Options {
    port: u16,
    delay: Duration,
    threads: usize,
}

fn usage() -> ! {
    eprintln!("usage: http_sink [--port N] [--delay-ms N] [--threads N]");
    std::process::exit(64);
}

fn parse_args() -> Options {
    let mut opts = Options {
        port: 0,
        delay: Duration::ZERO,
        threads: 64,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage())
        };
        match flag.as_str() {
            "--port" => opts.port = u16::try_from(value()).unwrap_or_else(|_| usage()),
            "--delay-ms" => opts.delay = Duration::from_millis(value()),
            "--threads" => opts.threads = usize::try_from(value()).unwrap_or(1).max(1),
            "-h" | "--help" => {
                println!("usage: http_sink [--port N] [--delay-ms N] [--threads N]");
                std::process::exit(0);
            }
            _ => usage(),
        }
    }
    opts
}

fn main() {
    let opts = parse_args();
    let server = match tiny_http::Server::http(("127.0.0.1", opts.port)) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("http_sink: cannot listen on 127.0.0.1:{}: {e}", opts.port);
            std::process::exit(71);
        }
    };
    let port = server
        .server_addr()
        .to_ip()
        .map(|a| a.port())
        .unwrap_or(opts.port);
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://127.0.0.1:{port}");
        let _ = out.flush();
    }
    let count = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..opts.threads)
        .map(|_| {
            let server = server.clone();
            let count = count.clone();
            let delay = opts.delay;
            std::thread::spawn(move || serve(&server, &count, delay))
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

fn serve(server: &tiny_http::Server, count: &AtomicU64, delay: Duration) {
    let mut body = Vec::with_capacity(4096);
    loop {
        let mut request = match server.recv() {
            Ok(r) => r,
            Err(_) => return,
        };
        if request.method() == &tiny_http::Method::Get && request.url() == "/count" {
            let n = count.load(Ordering::SeqCst).to_string();
            let _ = request.respond(tiny_http::Response::from_string(n));
            continue;
        }
        body.clear();
        let _ = request.as_reader().read_to_end(&mut body);
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        // Count before answering: once a client has its 200, the count
        // includes it.
        count.fetch_add(1, Ordering::SeqCst);
        let _ = request.respond(tiny_http::Response::empty(200));
    }
}
