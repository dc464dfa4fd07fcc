//! A real HTTP server on 127.0.0.1 (ephemeral port) for replay tests:
//! it answers as a script says and records what it received. Started and
//! stopped by the test that owns it.

#![allow(dead_code)]

use std::collections::HashSet;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: Option<SocketAddr>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// What to answer.
#[derive(Clone, Debug)]
pub enum Answer {
    /// A status with an empty body.
    Status(u16),
    /// A status, extra headers and a body.
    Full(u16, Vec<(String, String)>, String),
    /// Wait, then answer with a status.
    Slow(Duration, u16),
}

type Script = dyn Fn(&Received, usize) -> Answer + Send + Sync;

pub struct Sink {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    received: Arc<Mutex<Vec<Received>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Start a server whose answer to the n-th request (0-based) is
    /// `script(request, n)`.
    pub fn start(script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static) -> Sink {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
        let addr = server
            .server_addr()
            .to_ip()
            .expect("an IP listener address");
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let (srv, rec) = (server.clone(), received.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0usize;
            while let Ok(mut req) = srv.recv() {
                let mut body = Vec::new();
                let _ = req.as_reader().read_to_end(&mut body);
                let r = Received {
                    method: req.method().to_string(),
                    path: req.url().to_string(),
                    headers: req
                        .headers()
                        .iter()
                        .map(|h| (h.field.to_string(), h.value.to_string()))
                        .collect(),
                    body,
                    peer: req.remote_addr().copied(),
                };
                rec.lock().unwrap().push(r.clone());
                let answer = script(&r, n);
                n += 1;
                let respond = move |req: tiny_http::Request, answer: Answer| {
                    let (status, headers, body) = match answer {
                        Answer::Status(s) => (s, vec![], String::new()),
                        Answer::Full(s, h, b) => (s, h, b),
                        Answer::Slow(d, s) => {
                            std::thread::sleep(d);
                            (s, vec![], String::new())
                        }
                    };
                    let mut resp = tiny_http::Response::from_string(body).with_status_code(status);
                    for (k, v) in headers {
                        if let Ok(h) = tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
                            resp = resp.with_header(h);
                        }
                    }
                    let _ = req.respond(resp);
                };
                if matches!(answer, Answer::Slow(..)) {
                    std::thread::spawn(move || respond(req, answer));
                } else {
                    respond(req, answer);
                }
            }
        });
        Sink {
            addr,
            server,
            received,
            thread: Some(thread),
        }
    }

    /// A server that answers every request with `status`.
    pub fn always(status: u16) -> Sink {
        Sink::start(move |_, _| Answer::Status(status))
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Distinct client connections (peer addresses) seen.
    pub fn connections(&self) -> usize {
        self.received()
            .iter()
            .filter_map(|r| r.peer)
            .collect::<HashSet<_>>()
            .len()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A peer that accepts connections, reads the request and hangs up
/// without answering: a dropped connection.
pub struct Dropper {
    pub addr: SocketAddr,
    accepted: Arc<Mutex<usize>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Dropper {
    pub fn start() -> Dropper {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.set_nonblocking(true).expect("nonblocking");
        let addr = l.local_addr().expect("addr");
        let accepted: Arc<Mutex<usize>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (acc, st) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(std::sync::atomic::Ordering::SeqCst) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        *acc.lock().unwrap() += 1;
                        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                        let mut buf = [0u8; 4096];
                        let _ = s.read(&mut buf);
                        drop(s);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Dropper {
            addr,
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn accepted(&self) -> usize {
        *self.accepted.lock().unwrap()
    }
}

impl Drop for Dropper {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A TCP port on 127.0.0.1 that nothing listens on and that no other socket
/// of this test run can take while the test leaves it closed.
///
/// A port freed after `bind("127.0.0.1:0")` is back in the kernel's
/// ephemeral range, where a server another test starts meanwhile (or the
/// same test's next `bind(0)`) can be handed it: a "closed" link then looks
/// open. Ports below the ephemeral range are only ever taken by an explicit
/// bind, so this picks one of those (distinct per call within a process,
/// spread by process id across processes) and checks that it is free.
pub fn quiet_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let span = low.saturating_sub(2048).min(16384);
    if span < 256 {
        // An unusual range leaves no room below it: fall back to the kernel's choice.
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        return l.local_addr().expect("addr").port();
    }
    let base = low - span;
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (base + (start + n) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 127.0.0.1:{base}..{low}");
}
