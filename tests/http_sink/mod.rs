//! A real HTTP server on 127.0.0.1 (ephemeral port) for replay tests:
//! it answers as a script says and records what it received. Started and
//! stopped by the test that owns it.
//!
//! Every connection gets its own thread, for as long as the client keeps
//! it open, so any number of kept-alive connections are served at once
//! (a bounded pool starves connections once each of its threads holds a
//! kept-alive one). Requests are parsed with `httparse`; bodies are read
//! by `Content-Length`, which is what spool's client sends.
//!
//! [`Server::bind_tls`] / [`Sink::start_tls`] serve the same over TLS
//! (rustls, the server side of a real handshake) with a certificate the
//! test chose: see `tls_pki` for making one.

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Close the connection without answering (a dropped connection, or
    /// an answer lost on the way back).
    Hangup,
}

type Handler = dyn Fn(Received) -> Answer + Send + Sync;

/// A listener on 127.0.0.1 that answers every request with what
/// `handler` returns; stops (and stops accepting) when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// The connections open now, to shut down when the server stops.
    open: Arc<Mutex<HashMap<u64, TcpStream>>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listen on `port` (0: an ephemeral one).
    pub fn bind(
        port: u16,
        handler: impl Fn(Received) -> Answer + Send + Sync + 'static,
    ) -> std::io::Result<Server> {
        Server::bind_with(port, None, handler)
    }

    /// Listen on `port` (0: an ephemeral one) for HTTPS with `tls`.
    pub fn bind_tls(
        port: u16,
        tls: Arc<rustls::ServerConfig>,
        handler: impl Fn(Received) -> Answer + Send + Sync + 'static,
    ) -> std::io::Result<Server> {
        Server::bind_with(port, Some(tls), handler)
    }

    fn bind_with(
        port: u16,
        tls: Option<Arc<rustls::ServerConfig>>,
        handler: impl Fn(Received) -> Answer + Send + Sync + 'static,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<HashMap<u64, TcpStream>>> = Arc::default();
        let handler: Arc<Handler> = Arc::new(handler);
        let (st, op) = (stop.clone(), open.clone());
        let thread = std::thread::spawn(move || {
            for (id, conn) in (0u64..).zip(listener.incoming()) {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                let Ok(handle) = stream.try_clone() else {
                    continue;
                };
                op.lock().unwrap().insert(id, handle);
                let (handler, op, tls) = (handler.clone(), op.clone(), tls.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_nodelay(true);
                    let peer = stream.peer_addr().ok();
                    match tls {
                        None => serve_connection(stream, peer, &*handler),
                        // The handshake runs on the first read; a client
                        // that refuses the certificate ends it there.
                        Some(config) => {
                            if let Ok(conn) = rustls::ServerConnection::new(config) {
                                let stream = rustls::StreamOwned::new(conn, stream);
                                serve_connection(stream, peer, &*handler);
                            }
                        }
                    }
                    op.lock().unwrap().remove(&id);
                });
            }
        });
        Ok(Server {
            addr,
            stop,
            open,
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Kept-alive connections end with the server, as a stopped
        // endpoint's would.
        for (_, c) in self.open.lock().unwrap().drain() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Serve the requests of one connection, one after the other, until the
/// client closes it or sends something that is not HTTP/1.1.
fn serve_connection(mut stream: impl Read + Write, peer: Option<SocketAddr>, handler: &Handler) {
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    loop {
        // Read until a whole request head is in the buffer.
        let (head_len, method, path, headers) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 64];
            let mut req = httparse::Request::new(&mut slots);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let headers = req
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect::<Vec<_>>();
                    break (
                        len,
                        req.method.unwrap_or("").to_string(),
                        req.path.unwrap_or("").to_string(),
                        headers,
                    );
                }
                Ok(httparse::Status::Partial) => match stream.read(&mut chunk) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                },
                Err(_) => {
                    let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    return;
                }
            }
        };
        let header = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_string())
        };
        let body_len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        while buf.len() < head_len + body_len {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = buf[head_len..head_len + body_len].to_vec();
        buf.drain(..head_len + body_len);
        let close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let head_only = method == "HEAD";
        let answer = handler(Received {
            method,
            path,
            headers,
            body,
            peer,
        });
        let (status, extra, body) = match answer {
            Answer::Hangup => return,
            Answer::Status(s) => (s, vec![], String::new()),
            Answer::Full(s, h, b) => (s, h, b),
            Answer::Slow(d, s) => {
                std::thread::sleep(d);
                (s, vec![], String::new())
            }
        };
        let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
        // No body, and no length, for 1xx, 204 and 304.
        let bodiless = status < 200 || status == 204 || status == 304;
        if !bodiless {
            out.push_str(&format!("content-length: {}\r\n", body.len()));
        }
        for (k, v) in extra {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        if close {
            out.push_str("connection: close\r\n");
        }
        out.push_str("\r\n");
        if !(head_only || bodiless) {
            out.push_str(&body);
        }
        if stream.write_all(out.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// The reason phrase of the statuses tests use.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        409 => "Conflict",
        422 => "Unprocessable Entity",
        425 => "Too Early",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

type Script = dyn Fn(&Received, usize) -> Answer + Send + Sync;

/// A [`Server`] that records every request and answers the n-th one
/// (0-based, counted across connections) as a script says.
pub struct Sink {
    server: Server,
    received: Arc<Mutex<Vec<Received>>>,
    tls: bool,
}

impl Sink {
    /// Start a server whose answer to the n-th request (0-based) is
    /// `script(request, n)`.
    pub fn start(script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static) -> Sink {
        Sink::start_with(None, script)
    }

    /// [`Sink::start`] over HTTPS with `tls`; see [`Sink::https_url`].
    pub fn start_tls(
        tls: Arc<rustls::ServerConfig>,
        script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static,
    ) -> Sink {
        Sink::start_with(Some(tls), script)
    }

    fn start_with(
        tls: Option<Arc<rustls::ServerConfig>>,
        script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static,
    ) -> Sink {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let script: Arc<Script> = Arc::new(script);
        let rec = received.clone();
        let is_tls = tls.is_some();
        let server = Server::bind_with(0, tls, move |r| {
            let n = {
                let mut all = rec.lock().unwrap();
                all.push(r.clone());
                all.len() - 1
            };
            script(&r, n)
        })
        .expect("bind 127.0.0.1:0");
        Sink {
            server,
            received,
            tls: is_tls,
        }
    }

    /// A server that answers every request with `status`.
    pub fn always(status: u16) -> Sink {
        Sink::start(move |_, _| Answer::Status(status))
    }

    pub fn url(&self, path: &str) -> String {
        assert!(!self.tls, "an HTTPS sink: use https_url");
        format!("http://{}{}", self.server.addr(), path)
    }

    /// The port the sink listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// `https://HOST:PORT/PATH` of a TLS sink: HOST is the name the client
    /// checks the certificate against (the sink listens on 127.0.0.1).
    pub fn https_url(&self, host: &str, path: &str) -> String {
        assert!(self.tls, "a plain HTTP sink: use url");
        format!("https://{host}:{}{path}", self.server.addr().port())
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
