//! A push receiver for tests: a real HTTP server on 127.0.0.1 (ephemeral
//! port, plain or TLS) that runs the library's receiver rule
//! (`push::apply_push`) over a `MemoryReceiver`, and that a test can tell,
//! request by request, to misbehave: over-acknowledge, answer a status of
//! its choice, refuse large bodies, hang, drop the connection, or apply a
//! request and lose the answer.
//!
//! Needs `mod http_sink;` in the test crate.

#![allow(dead_code)]

use crate::http_sink::{Answer, Received, Server};
use spool::push::wire::{self, PushRequest};
use spool::push::{apply_push, MemoryReceiver, ReceiveLimits};
use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the receiver does with one request.
#[derive(Clone, Debug)]
pub enum Act {
    /// Apply it and answer (the default once the script is used up).
    Normal,
    /// Apply it and claim a `last_seq` this much higher.
    OverAck(u64),
    /// Answer this status, body and `Retry-After` (seconds) without
    /// applying anything.
    Status(u16, String, Option<u64>),
    /// Answer 409 as a receiver restored from an old backup would: a gap,
    /// with this `last_seq`.
    Gap(u64),
    /// Wait this long before answering 503 (the sender times out first).
    Hang(Duration),
    /// Close the connection without applying or answering.
    Hangup,
    /// Apply it, then close the connection without answering.
    LoseAnswer,
    /// Apply it, then hold the connection this long before answering.
    ApplyThenHang(Duration),
}

/// One request as the receiver saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    /// The parsed request (`None` when the body did not parse).
    pub req: Option<PushRequest>,
    /// The request headers.
    pub headers: Vec<(String, String)>,
    /// Bytes on the wire.
    pub wire_len: usize,
    /// The body after decompression.
    pub body: Vec<u8>,
}

impl Logged {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The sequence numbers of the entries.
    pub fn seqs(&self) -> Vec<u64> {
        self.req
            .as_ref()
            .map(|r| r.entries.iter().map(|e| e.seq()).collect())
            .unwrap_or_default()
    }
}

struct State {
    rx: MemoryReceiver,
    limits: ReceiveLimits,
    script: VecDeque<Act>,
    /// Refuse with 413 any body of more entries than this.
    max_entries: Option<usize>,
    /// Refuse with 413 any body (decompressed) over this many bytes.
    max_body: Option<usize>,
    /// Answer 401 unless `Authorization: Bearer <token>`.
    token: Option<String>,
    log: Vec<Logged>,
    duplicates: u64,
}

/// The receiver; stops when dropped.
pub struct PushReceiver {
    server: Server,
    state: Arc<Mutex<State>>,
    tls: bool,
}

fn json(status: u16, body: Vec<u8>, retry_after: Option<u64>) -> Answer {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(s) = retry_after {
        headers.push(("retry-after".into(), s.to_string()));
    }
    Answer::Full(
        status,
        headers,
        String::from_utf8(body).expect("JSON is UTF-8"),
    )
}

fn error(status: u16, msg: &str) -> Answer {
    json(status, wire::ErrorBody::new(msg).to_json(), None)
}

impl PushReceiver {
    /// A plain HTTP receiver.
    pub fn start() -> PushReceiver {
        PushReceiver::start_with(None)
    }

    /// A receiver over TLS with `config`.
    pub fn start_tls(config: Arc<rustls::ServerConfig>) -> PushReceiver {
        PushReceiver::start_with(Some(config))
    }

    fn start_with(tls: Option<Arc<rustls::ServerConfig>>) -> PushReceiver {
        let state = Arc::new(Mutex::new(State {
            rx: MemoryReceiver::new(None),
            limits: ReceiveLimits::default(),
            script: VecDeque::new(),
            max_entries: None,
            max_body: None,
            token: None,
            log: Vec::new(),
            duplicates: 0,
        }));
        let st = state.clone();
        let handler = move |r: Received| handle(&st, r);
        let is_tls = tls.is_some();
        let server = match tls {
            None => Server::bind(0, handler),
            Some(c) => Server::bind_tls(0, c, handler),
        }
        .expect("bind 127.0.0.1:0");
        PushReceiver {
            server,
            state,
            tls: is_tls,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// `http://127.0.0.1:PORT/v1/push`.
    pub fn url(&self) -> String {
        assert!(!self.tls, "a TLS receiver: use https_url");
        format!("http://{}/v1/push", self.server.addr())
    }

    /// `https://HOST:PORT/v1/push` of a TLS receiver.
    pub fn https_url(&self, host: &str) -> String {
        assert!(self.tls, "a plain receiver: use url");
        format!("https://{host}:{}/v1/push", self.server.addr().port())
    }

    /// What to do with the next requests, in order.
    pub fn script(&self, acts: impl IntoIterator<Item = Act>) {
        self.lock().script.extend(acts);
    }

    pub fn max_entries(&self, n: usize) {
        self.lock().max_entries = Some(n);
    }

    pub fn max_body(&self, n: usize) {
        self.lock().max_body = Some(n);
    }

    pub fn max_payload(&self, n: u64) {
        self.lock().limits.max_payload = n;
    }

    pub fn require_token(&self, token: &str) {
        self.lock().token = Some(token.to_string());
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }

    /// The sequence numbers of every request.
    pub fn seqs(&self) -> Vec<Vec<u64>> {
        self.requests().iter().map(Logged::seqs).collect()
    }

    /// The payloads the receiving spool holds, in order.
    pub fn payloads(&self) -> Vec<String> {
        self.lock()
            .rx
            .pending()
            .iter()
            .map(|(_, it)| String::from_utf8_lossy(&it.payload).into_owned())
            .collect()
    }

    /// The keys of the items the receiving spool holds, in order.
    pub fn keys(&self) -> Vec<String> {
        self.lock()
            .rx
            .pending()
            .iter()
            .map(|(_, it)| it.key.clone())
            .collect()
    }

    /// Entries answered as duplicates, over all requests.
    pub fn duplicates(&self) -> u64 {
        self.lock().duplicates
    }

    /// `last_seq` of `client`.
    pub fn last_seq(&self, client: &str) -> u64 {
        self.lock().rx.ledger.last_seq(client)
    }

    /// Every client id seen, with its `last_seq`.
    pub fn clients(&self) -> Vec<(String, u64)> {
        self.lock()
            .rx
            .ledger
            .clients()
            .map(|(c, l)| (c.to_string(), l.last_seq))
            .collect()
    }

    /// Go back to an empty receiver, as a restore from a backup taken
    /// before anything was pushed would.
    pub fn lose_state(&self) {
        self.lock().rx = MemoryReceiver::new(None);
    }
}

fn handle(state: &Mutex<State>, r: Received) -> Answer {
    let wire_len = r.body.len();
    let gzip = r
        .header("content-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    let body = if gzip {
        let mut out = Vec::new();
        if flate2::read::GzDecoder::new(&r.body[..])
            .read_to_end(&mut out)
            .is_err()
        {
            return error(400, "body is not valid gzip");
        }
        out
    } else {
        r.body.clone()
    };
    let parsed = wire::parse_request(&body);
    let mut st = state.lock().unwrap();
    st.log.push(Logged {
        req: parsed.clone().ok(),
        headers: r.headers.clone(),
        wire_len,
        body: body.clone(),
    });
    if r.method != "POST" || r.path != "/v1/push" {
        return error(404, "no such endpoint");
    }
    if let Some(token) = &st.token {
        if r.header("authorization") != Some(&format!("Bearer {token}")) {
            return error(401, "missing or wrong token");
        }
    }
    if st.max_body.is_some_and(|m| body.len() > m) {
        return error(413, "body over the receiver's --max-body");
    }
    let req = match parsed {
        Ok(req) => req,
        Err(e) => return json(400, e.to_body(), None),
    };
    if st.max_entries.is_some_and(|m| req.entries.len() > m) {
        return error(413, "too many entries");
    }
    let act = st.script.pop_front().unwrap_or(Act::Normal);
    let apply = |st: &mut State| {
        let limits = st.limits;
        let out = apply_push(&mut st.rx, &req, &limits).expect("apply_push");
        if let spool::push::PushOutcome::Accepted(a) = &out {
            st.duplicates += a.response.duplicates;
        }
        let retry = (out.status() == 503).then_some(1);
        (out.status(), out.body(), retry)
    };
    match act {
        Act::Normal => {
            let (status, body, retry) = apply(&mut st);
            json(status, body, retry)
        }
        Act::OverAck(extra) => {
            let (status, body, retry) = apply(&mut st);
            let mut resp = wire::parse_response(&body).expect("a 200 body");
            resp.last_seq += extra;
            json(status, resp.to_json(), retry)
        }
        Act::Status(status, body, retry) => json(status, body.into_bytes(), retry),
        Act::Gap(last_seq) => json(
            409,
            wire::ErrorBody {
                error: format!(
                    "batch starts at {}, beyond last_seq {last_seq} + 1",
                    req.entries.first().map_or(0, |e| e.seq())
                ),
                last_seq: Some(last_seq),
            }
            .to_json(),
            None,
        ),
        Act::Hang(d) => {
            drop(st);
            Answer::Slow(d, 503)
        }
        Act::Hangup => Answer::Hangup,
        Act::LoseAnswer => {
            apply(&mut st);
            Answer::Hangup
        }
        Act::ApplyThenHang(d) => {
            apply(&mut st);
            drop(st);
            Answer::Slow(d, 503)
        }
    }
}
