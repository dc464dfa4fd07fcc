//! A fast local HTTP sink for the replay benchmark (`benches/replay.sh`).
//!
//! Listens on 127.0.0.1, reads every request body, answers `200 OK`
//! (after `--delay-ms N` when asked, to play a distant endpoint) and counts
//! the requests it answered. `GET /count` returns that count (and is not
//! counted itself), so a benchmark can check that every item arrived.
//! Every connection has its own thread, so any number of kept-alive
//! clients are served at once (the server of the replay tests,
//! `tests/http_sink`).
//!
//! ```sh
//! cargo build --release --example http_sink
//! target/release/examples/http_sink --port 0 --delay-ms 20
//! ```

#[path = "../tests/http_sink/mod.rs"]
mod http_sink;

use http_sink::{Answer, Server};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Options {
    port: u16,
    delay: Duration,
}

const USAGE: &str = "usage: http_sink [--port N] [--delay-ms N]";

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(64);
}

fn parse_args() -> Options {
    let mut opts = Options {
        port: 0,
        delay: Duration::ZERO,
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
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => usage(),
        }
    }
    opts
}

fn main() {
    let opts = parse_args();
    let count = Arc::new(AtomicU64::new(0));
    let delay = opts.delay;
    let server = Server::bind(opts.port, move |r| {
        if r.method == "GET" && r.path == "/count" {
            return Answer::Full(200, vec![], count.load(Ordering::SeqCst).to_string());
        }
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        count.fetch_add(1, Ordering::SeqCst);
        Answer::Status(200)
    })
    .unwrap_or_else(|e| {
        eprintln!("http_sink: cannot listen on 127.0.0.1:{}: {e}", opts.port);
        std::process::exit(71);
    });
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on http://{}", server.addr());
        let _ = out.flush();
    }
    // Serve until killed.
    loop {
        std::thread::park();
    }
}
