//! Helpers for the `serve_*` tests: start the real `spool serve` binary
//! on 127.0.0.1 with an ephemeral port, find its address from the
//! `listening on` line, talk HTTP to it (ureq, or raw bytes over a
//! `TcpStream` for what a well-behaved client would never send), and stop
//! it with SIGTERM.
//!
//! Nothing here sleeps to synchronise: waits are reads that block until
//! the server answers or closes, bounded by a deadline that only a broken
//! server reaches.

#![allow(dead_code)]

use crate::cli_common::Env;
use spool::push::wire::{self, OutEntry};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long anything may take before the test calls the server broken.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A running `spool serve`.
pub struct Serve {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` (or https).
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    logs: tempfile::TempDir,
}

/// How a stopped server ended.
pub struct Stopped {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Everything it wrote to stderr.
    pub stderr: String,
}

impl Serve {
    /// `spool -s <env spool> serve --listen 127.0.0.1:0 ARGS...`, running
    /// and listening; panics with its stderr when it does not start.
    pub fn start(env: &Env, args: &[&str]) -> Serve {
        Serve::start_with(env, args, |_| {})
    }

    /// [`Serve::start`], with a chance to change the command first (its
    /// environment).
    pub fn start_with(env: &Env, args: &[&str], f: impl FnOnce(&mut Command)) -> Serve {
        let logs = tempfile::tempdir().expect("temp dir");
        let err_path = logs.path().join("stderr");
        let err = std::fs::File::create(&err_path).expect("stderr file");
        let mut c = Command::new(env!("CARGO_BIN_EXE_spool"));
        c.env_remove("SPOOL_PATH")
            .env_remove("RUST_BACKTRACE")
            .env_remove("CREDENTIALS_DIRECTORY")
            .current_dir(env.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .arg("--spool")
            .arg(&env.path)
            .arg("serve");
        if !args.contains(&"--listen") {
            c.args(["--listen", "127.0.0.1:0"]);
        }
        c.args(args);
        f(&mut c);
        let mut child = c.spawn().expect("start spool serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(DEADLINE).unwrap_or_default();
        let Some(base) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "spool serve did not start (stdout {line:?}); stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        };
        let base = base.to_string();
        let addr = base.split("://").nth(1).unwrap_or_default().to_string();
        Serve {
            child: Some(child),
            base,
            addr,
            logs,
        }
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or_default()
    }

    /// Send SIGTERM.
    pub fn sigterm(&self) {
        // SAFETY: kill(2) on the pid of our own child process.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill");
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.logs.path().join("stderr")).unwrap_or_default()
    }

    /// SIGTERM, then wait for the exit.
    pub fn stop(mut self) -> Stopped {
        self.sigterm();
        self.wait()
    }

    /// Wait for the exit (after a signal sent some other way).
    pub fn wait(&mut self) -> Stopped {
        let mut child = self.child.take().expect("running");
        let start = Instant::now();
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return Stopped {
                    code: status.code(),
                    stderr: self.stderr(),
                };
            }
            if start.elapsed() > DEADLINE {
                let _ = child.kill();
                let _ = child.wait();
                panic!("spool serve did not stop; stderr:\n{}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `error` of an error body.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error in {}", self.body))
            .to_string()
    }
}

/// An HTTP client that reports every status instead of failing on 4xx/5xx.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(DEADLINE))
        .build()
        .into()
}

fn reply(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Reply {
    let mut r = r.expect("HTTP request");
    let status = r.status().as_u16();
    let headers = r
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = r
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_string()
        .expect("read body");
    Reply {
        status,
        body,
        headers,
    }
}

/// POST `body` to `url` with `headers`.
pub fn post(agent: &ureq::Agent, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut req = agent.post(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    reply(req.send(body))
}

/// GET `url` with `headers`.
pub fn get(agent: &ureq::Agent, url: &str, headers: &[(&str, &str)]) -> Reply {
    let mut req = agent.get(url);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    reply(req.call())
}

/// Send raw bytes on a new connection and read until the server closes
/// it; returns what came back (lossy text).
pub fn raw(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    // The server may answer (and close) before it has read everything.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// A TCP connection to `addr` from the local address `from` (another
/// loopback address, `127.0.0.2`, is another peer to the server).
pub fn connect_from(from: &str, addr: &str) -> TcpStream {
    use std::os::fd::FromRawFd;
    let from: std::net::Ipv4Addr = from.parse().expect("an IPv4 address");
    let to: std::net::SocketAddrV4 = addr.parse().expect("an IPv4 socket address");
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns until
    // it is handed to the TcpStream; the addresses live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(from, 0);
        let rc = libc::bind(fd, &local as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let remote = sockaddr(*to.ip(), to.port());
        let rc = libc::connect(fd, &remote as *const _ as *const libc::sockaddr, len);
        assert_eq!(rc, 0, "connect {to}: {}", std::io::Error::last_os_error());
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        stream
    }
}

/// Send one request on `s` (`Connection: close`) and read the answer
/// until the server closes the connection.
pub fn request_on(mut s: TcpStream, request: &str) -> String {
    s.write_all(request.as_bytes()).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The status code of a raw HTTP answer (`0` for none).
pub fn raw_status(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A push body with item entries `first..` holding `payloads` (no keys).
pub fn items_body(client: &str, acked: u64, first: u64, payloads: &[&str]) -> Vec<u8> {
    let entries: Vec<OutEntry<'_>> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| OutEntry::Item {
            seq: first + i as u64,
            id: 100 + first + i as u64,
            key: "",
            payload: p.as_bytes(),
            enqueued_at: None,
            group: None,
            coalesce_key: None,
        })
        .collect();
    wire::encode_request(client, acked, &entries)
}

/// A push body from entries.
pub fn body(client: &str, acked: u64, entries: &[OutEntry<'_>]) -> Vec<u8> {
    wire::encode_request(client, acked, entries)
}

/// Gzip `data`.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// The payloads of the spool's pending items, in order (as text).
pub fn payloads(env: &Env) -> Vec<String> {
    env.drain()
        .iter()
        .map(|v| v["payload"].as_str().unwrap_or("<bytes>").to_string())
        .collect()
}

/// Write `text` to `dir/name` and return the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}
