//! A fault-injecting TCP proxy for end-to-end tests: it sits between a
//! client and a server on 127.0.0.1 and, per connection, passes the bytes
//! through or breaks the exchange the way a real network does — the
//! request never arrives, the answer is lost after the server acted on
//! the request, the connection is reset in the middle of a body, or
//! everything is slow. Which fault a connection gets comes from a seeded
//! generator, so a failing run can be repeated with its seed.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What happens to one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Bytes pass both ways.
    Pass,
    /// The request never reaches the server: the client's connection is
    /// closed once it has sent something.
    DropRequest,
    /// The request reaches the server, which answers; the answer is
    /// thrown away and the client's connection closed.
    DropResponse,
    /// Part of the request reaches the server, then both connections are
    /// reset.
    ResetMidBody,
    /// Bytes pass both ways, each chunk after this delay.
    Delay(Duration),
}

/// The mix of faults: weights out of their sum.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub pass: u32,
    pub drop_request: u32,
    pub drop_response: u32,
    pub reset_mid_body: u32,
    pub delay: u32,
}

impl Mix {
    /// No faults at all.
    pub const CLEAN: Mix = Mix {
        pass: 1,
        drop_request: 0,
        drop_response: 0,
        reset_mid_body: 0,
        delay: 0,
    };
}

/// A running proxy; dropping it stops accepting.
pub struct Proxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
    log: Arc<Mutex<Vec<Fault>>>,
    mix: Arc<Mutex<Mix>>,
    upstream: Arc<Mutex<SocketAddr>>,
    connections: Arc<AtomicUsize>,
}

impl Proxy {
    /// Proxy 127.0.0.1:<ephemeral> to `upstream` with faults drawn from
    /// `mix` by a generator seeded with `seed`.
    pub fn start(upstream: SocketAddr, mix: Mix, seed: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let mix = Arc::new(Mutex::new(mix));
        let upstream = Arc::new(Mutex::new(upstream));
        let connections = Arc::new(AtomicUsize::new(0));
        let (s, l, m, c) = (stop.clone(), log.clone(), mix.clone(), connections.clone());
        let u = upstream.clone();
        let accept = std::thread::spawn(move || {
            let mut rng = fastrand::Rng::with_seed(seed);
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        c.fetch_add(1, Ordering::SeqCst);
                        let fault = pick(&mut rng, *m.lock().unwrap());
                        l.lock().unwrap().push(fault);
                        let to = *u.lock().unwrap();
                        std::thread::spawn(move || serve(client, to, fault));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err(_) => break,
                }
            }
        });
        Proxy {
            addr,
            stop,
            accept: Some(accept),
            log,
            mix,
            upstream,
            connections,
        }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<proxy><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Send new connections to another server (one restarted elsewhere).
    pub fn set_upstream(&self, to: SocketAddr) {
        *self.upstream.lock().unwrap() = to;
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Change the mix for connections from now on.
    pub fn set_mix(&self, mix: Mix) {
        *self.mix.lock().unwrap() = mix;
    }

    /// The faults given so far, in connection order.
    pub fn faults(&self) -> Vec<Fault> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn pick(rng: &mut fastrand::Rng, m: Mix) -> Fault {
    let total = m.pass + m.drop_request + m.drop_response + m.reset_mid_body + m.delay;
    let mut n = rng.u32(..total.max(1));
    for (w, f) in [
        (m.pass, Fault::Pass),
        (m.drop_request, Fault::DropRequest),
        (m.drop_response, Fault::DropResponse),
        (m.reset_mid_body, Fault::ResetMidBody),
        (m.delay, Fault::Delay(Duration::ZERO)),
    ] {
        if n < w {
            return match f {
                Fault::Delay(_) => Fault::Delay(Duration::from_millis(rng.u64(5..60))),
                f => f,
            };
        }
        n -= w;
    }
    Fault::Pass
}

/// How long a server stays quiet after an answer before the proxy closes
/// the connection.
const QUIET: Duration = Duration::from_millis(25);

/// Whether `bytes` hold a whole HTTP answer with a `Content-Length` (a
/// `100 Continue` interim answer does not count).
fn answer_complete(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    loop {
        let Some(end) = rest.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&rest[..end]).to_ascii_lowercase();
        let body = &rest[end + 4..];
        if head.starts_with("http/1.1 100") || head.starts_with("http/1.0 100") {
            rest = body;
            continue;
        }
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok());
        return len.is_some_and(|n| body.len() >= n);
    }
}

/// Close a socket with a reset (RST) rather than an orderly FIN.
fn reset(s: &TcpStream) {
    let _ = socket2_linger_zero(s);
    let _ = s.shutdown(Shutdown::Both);
}

fn socket2_linger_zero(s: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a valid descriptor with a correctly sized
    // linger struct.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn serve(client: TcpStream, upstream: SocketAddr, fault: Fault) {
    let _ = client.set_nonblocking(false);
    let timeout = Some(Duration::from_secs(20));
    let _ = client.set_read_timeout(timeout);
    if fault == Fault::DropRequest {
        let mut buf = [0u8; 1024];
        let _ = (&client).read(&mut buf);
        reset(&client);
        return;
    }
    let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
        reset(&client);
        return;
    };
    let _ = server.set_read_timeout(timeout);
    let delay = match fault {
        Fault::Delay(d) => d,
        _ => Duration::ZERO,
    };
    if fault == Fault::ResetMidBody {
        // Forward a part of what the client sends, then reset both.
        let mut buf = [0u8; 4096];
        if let Ok(n) = (&client).read(&mut buf) {
            let _ = (&server).write_all(&buf[..n / 2]);
        }
        reset(&server);
        reset(&client);
        return;
    }
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => return,
    };
    // Client to server.
    let up = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match (&c2).read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = s2.shutdown(Shutdown::Write);
                    return;
                }
                Ok(n) => {
                    if !delay.is_zero() {
                        std::thread::sleep(delay);
                    }
                    if (&s2).write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            }
        }
    });
    // Server to client. Once an answer has gone through and the server
    // has gone quiet, the connection is closed: every request comes on a
    // connection of its own, so every request gets a fault of its own
    // (a client that keeps connections alive would otherwise carry its
    // whole run over one).
    let mut buf = vec![0u8; 64 << 10];
    let mut answered = false;
    let mut seen: Vec<u8> = Vec::new();
    loop {
        match (&server).read(&mut buf) {
            Err(e)
                if answered
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
            {
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                break;
            }
            Ok(0) | Err(_) => {
                let _ = client.shutdown(Shutdown::Both);
                break;
            }
            Ok(n) => {
                if fault == Fault::DropResponse {
                    // The server acted and answered; the answer is lost.
                    reset(&client);
                    let _ = server.shutdown(Shutdown::Both);
                    break;
                }
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                if (&client).write_all(&buf[..n]).is_err() {
                    let _ = server.shutdown(Shutdown::Both);
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
                if answer_complete(&seen) {
                    // One request, one connection: close after the answer.
                    let _ = client.shutdown(Shutdown::Both);
                    let _ = server.shutdown(Shutdown::Both);
                    break;
                }
                if !answered {
                    answered = true;
                    let _ = server.set_read_timeout(Some(QUIET));
                }
            }
        }
    }
    let _ = up.join();
}
