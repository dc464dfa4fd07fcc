//! The HTTP side of `spool serve`: routing, authentication, bounded
//! bodies, the memory budget, and turning the writer's results into
//! answers.
//!
//! Per request, in this order, so that nothing is read, inflated or
//! parsed for a caller who may not send it:
//!
//! 1. route and method (404, 405 with `Allow`; `HEAD` wherever `GET`);
//! 2. the bearer token, when tokens are configured (401 with
//!    `WWW-Authenticate: Bearer`) — for every endpoint but `/healthz`;
//! 3. `Content-Encoding` (`gzip` or none; 415 otherwise) and a declared
//!    `Content-Length` over the limit (413 before reading anything);
//! 4. the body, read frame by frame up to `--max-body` bytes as received
//!    (413 at the first byte over) and within the request timeout (408);
//! 5. gzip inflated chunk by chunk up to the same limit (a bomb costs at
//!    most the limit, 413); truncated or corrupt gzip is 400;
//! 6. the push body parsed strictly (400 names the problem), its entries
//!    counted against `--max-entries` (413), then the token's client
//!    globs checked against its `client_id` (403);
//! 7. the writer commits; only then the answer.
//!
//! **Memory.** Every byte a request holds counts against one budget
//! shared by all requests ([`Reservation`]): the body as received, the
//! body as inflated (reserved as it grows, never the whole limit up
//! front), and the parsed push entries ([`ENTRY_COST`] each beside their
//! payload and key) until the answer is sent. A request that would go over
//! the budget is answered 503 with `Retry-After`; one that alone needs
//! more than the whole budget, 413.
//!
//! Every error answer is `{"error": "…"}`. An answer given before the
//! body was read in full closes the connection. Parsing and inflating
//! large bodies runs on the blocking pool, not on the reactor threads.

use super::auth::{self, Grant, Tokens};
use super::metrics::{self, Metrics, SpoolState};
use super::writer::{Done, Failure, Job, Snapshot, Work};
use super::{Access, ServeEvent, ServeLog, SNAPSHOT_MAX_AGE};
use crate::backend::Spool;
use crate::push::receiver::{ItemOutcome, PushOutcome};
use crate::push::wire::{self, Entry, ErrorBody, Payload, PushRequest};
use crate::time::Timestamp;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

/// Bodies above this size are inflated and parsed on the blocking pool.
const BLOCKING_ABOVE: usize = 256 << 10;

/// Deflate's largest expansion: no gzip body inflates to more than this
/// many times its size (plus a little), which decides, before
/// inflating, whether it may grow past [`BLOCKING_ABOVE`].
const DEFLATE_MAX_RATIO: usize = 1032;

/// Bytes inflated at a time.
const INFLATE_CHUNK: usize = 64 << 10;

/// What one parsed push item entry counts against the memory budget
/// beside its payload, key, digest and time: its structures and the
/// writer's work on it (statements, the NDJSON line).
pub const ENTRY_COST: usize = 512;

/// What one parsed skip entry counts against the memory budget.
pub const SKIP_COST: usize = 64;

/// The longest path an access-log line shows.
const LOGGED_PATH_MAX: usize = 200;

/// The longest method an access-log line shows.
const LOGGED_METHOD_MAX: usize = 32;

/// What every handler needs.
pub(crate) struct Shared {
    pub tokens: Option<Tokens>,
    pub max_body: u64,
    pub max_payload: u64,
    pub max_key_len: usize,
    pub max_entries: usize,
    pub request_timeout: Duration,
    pub retry_after: Duration,
    pub jobs: mpsc::Sender<Job>,
    pub metrics: Arc<Metrics>,
    pub log: Arc<dyn ServeLog>,
    pub spool: PathBuf,
    /// The memory budget: bytes that requests may hold at once (bodies
    /// as received and inflated, parsed entries), over all requests.
    pub budget: Arc<Semaphore>,
    /// Its size.
    pub budget_total: usize,
    /// The spool's state for `/metrics` and `/healthz`.
    pub state: StateCache,
}

/// An answer, before it becomes a response.
pub(crate) struct Answer {
    pub(crate) status: u16,
    body: Vec<u8>,
    content_type: &'static str,
    retry_after: bool,
    allow: Option<&'static str>,
    challenge: bool,
    /// The error text, for the access log.
    pub(crate) note: Option<String>,
}

impl Answer {
    fn json(status: u16, body: Vec<u8>) -> Answer {
        Answer {
            status,
            body,
            content_type: "application/json",
            retry_after: false,
            allow: None,
            challenge: false,
            note: None,
        }
    }

    fn error(status: u16, message: impl Into<String>) -> Answer {
        let message = message.into();
        let mut a = Answer::json(status, ErrorBody::new(message.clone()).to_json());
        a.note = Some(message);
        a
    }

    fn retry(mut self) -> Answer {
        self.retry_after = true;
        self
    }
}

/// Why a [`Reservation`] could not grow.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The budget is taken by other requests for now: 503.
    Busy,
    /// This request alone would need more than the whole budget: 413.
    Never { total: usize },
}

impl Refused {
    fn answer(self) -> Answer {
        match self {
            Refused::Busy => Answer::error(
                503,
                "the server holds too much request data at the moment (--memory-budget); retry \
                 later",
            )
            .retry(),
            Refused::Never { total } => Answer::error(
                413,
                format!(
                    "the request needs more memory than the server's whole budget of {total} \
                     bytes (--memory-budget); send a smaller request"
                ),
            ),
        }
    }
}

/// One request's share of the memory budget, held until its answer is
/// sent (dropping it gives the share back).
pub(crate) struct Reservation {
    budget: Arc<Semaphore>,
    total: usize,
    held: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    fn new(shared: &Shared) -> Reservation {
        Reservation::of_budget(shared.budget.clone(), shared.budget_total)
    }

    /// A reservation against `budget`, whose size is `total`.
    pub(crate) fn of_budget(budget: Arc<Semaphore>, total: usize) -> Reservation {
        Reservation {
            budget,
            total,
            held: None,
        }
    }

    /// Bytes held now.
    fn held(&self) -> usize {
        self.held.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Hold `n` more bytes, without waiting.
    fn take(&mut self, n: usize) -> Result<(), Refused> {
        if n == 0 {
            return Ok(());
        }
        if self.held().saturating_add(n) > self.total {
            return Err(Refused::Never { total: self.total });
        }
        let mut got: Option<OwnedSemaphorePermit> = None;
        let mut left = n;
        while left > 0 {
            let step = left.min(u32::MAX as usize);
            // Partial grants go back when `got` is dropped.
            let p = self
                .budget
                .clone()
                .try_acquire_many_owned(step as u32)
                .map_err(|_| Refused::Busy)?;
            match &mut got {
                Some(g) => g.merge(p),
                None => got = Some(p),
            }
            left -= step;
        }
        if let Some(p) = got {
            match &mut self.held {
                Some(h) => h.merge(p),
                None => self.held = Some(p),
            }
        }
        Ok(())
    }

    /// Give back `n` bytes (or all that is held, if less).
    fn release(&mut self, n: usize) {
        if let Some(h) = &mut self.held {
            let n = n.min(h.num_permits());
            drop(h.split(n));
        }
    }

    /// Hold exactly `n` bytes: give back the excess, or take the rest.
    fn set(&mut self, n: usize) -> Result<(), Refused> {
        let held = self.held();
        if n < held {
            self.release(held - n);
            Ok(())
        } else {
            self.take(n - held)
        }
    }
}

/// Append `data` to `buf`, holding the budget for every byte `buf`
/// allocates (its capacity, which grows by doubling up to `cap`).
fn append(
    buf: &mut Vec<u8>,
    data: &[u8],
    cap: usize,
    res: &mut Reservation,
) -> Result<(), Refused> {
    let need = buf.len() + data.len();
    if need > buf.capacity() {
        let want = need
            .max(buf.capacity().saturating_mul(2))
            .min(cap.max(need));
        res.take(want - buf.capacity())?;
        buf.reserve_exact(want - buf.len());
    }
    buf.extend_from_slice(data);
    Ok(())
}

/// What a request revealed, for the access log.
#[derive(Default)]
struct Seen {
    client: Option<String>,
    /// The name of the request's valid token.
    token: Option<String>,
    bytes_in: u64,
    body_read: bool,
    /// The share of the memory budget this request holds, kept until the
    /// answer is sent.
    held: Option<Reservation>,
}

impl Seen {
    /// This request's reservation (empty until the first take).
    fn reservation(&mut self, shared: &Shared) -> &mut Reservation {
        self.held.get_or_insert_with(|| Reservation::new(shared))
    }
}

/// Which `endpoint` label a path has.
fn endpoint_of(path: &str) -> &'static str {
    match path {
        "/v1/push" => "push",
        "/v1/items" => "items",
        "/healthz" => "healthz",
        "/metrics" => "metrics",
        p if p.starts_with("/v1/clients/") => "clients",
        _ => "other",
    }
}

/// `s` cut at `max` bytes (on a character boundary).
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Answer one request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let endpoint = endpoint_of(&path);
    let has_body = !req.body().is_end_stream();
    let mut seen = Seen::default();
    let answer = route(&shared, req, &method, &path, &mut seen).await;
    let took = start.elapsed();
    shared.metrics.request(endpoint, answer.status, took);
    shared.log.log(&ServeEvent::Access(&Access {
        peer,
        method: cut(method.as_str(), LOGGED_METHOD_MAX),
        path: cut(&path, LOGGED_PATH_MAX),
        status: answer.status,
        took,
        bytes_in: seen.bytes_in,
        client: seen.client.as_deref(),
        token: seen.token.as_deref(),
        error: answer.note.as_deref(),
    }));
    let close = has_body && !seen.body_read;
    Ok(response(answer, shared.retry_after, close))
}

fn response(a: Answer, retry_after: Duration, close: bool) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(a.body)));
    *r.status_mut() = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(a.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if a.retry_after {
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after.as_secs().max(1)),
        );
    }
    if let Some(allow) = a.allow {
        h.insert(header::ALLOW, HeaderValue::from_static(allow));
    }
    if a.challenge {
        h.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"spool\""),
        );
    }
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

async fn route(
    shared: &Shared,
    req: Request<Incoming>,
    method: &Method,
    path: &str,
    seen: &mut Seen,
) -> Answer {
    let endpoint = endpoint_of(path);
    let (allow, allowed) = match endpoint {
        "push" | "items" => ("POST", *method == Method::POST),
        // HEAD is GET without the body (hyper leaves the body out).
        "clients" | "healthz" | "metrics" => (
            "GET, HEAD",
            *method == Method::GET || *method == Method::HEAD,
        ),
        _ => return Answer::error(404, format!("no such endpoint: {}", short(path))),
    };
    if !allowed {
        let mut a = Answer::error(405, format!("{path} answers {allow} only"));
        a.allow = Some(allow);
        return a;
    }
    let result = match endpoint {
        "push" => push(shared, req, seen).await,
        "items" => items(shared, req, seen).await,
        "clients" => clients(shared, req, path, seen).await,
        "healthz" => health(shared).await,
        _ => metrics(shared, req, seen).await,
    };
    result.unwrap_or_else(|a| a)
}

fn short(path: &str) -> String {
    path.chars().take(80).collect()
}

/// The request's token, when tokens are configured; its name goes to
/// the access log.
fn authenticate(
    shared: &Shared,
    headers: &HeaderMap,
    seen: &mut Seen,
) -> Result<Option<Grant>, Answer> {
    let Some(tokens) = &shared.tokens else {
        return Ok(None);
    };
    let unauthorized = |m: &str| {
        let mut a = Answer::error(401, m);
        a.challenge = true;
        a
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized(
            "missing bearer token (send Authorization: Bearer TOKEN)",
        ));
    };
    let Some(token) = auth::bearer(value.as_bytes()) else {
        return Err(unauthorized(
            "the Authorization header is not a bearer token (send Authorization: Bearer TOKEN)",
        ));
    };
    match tokens.authenticate(token) {
        Some(g) => {
            seen.token = Some(tokens.name(g).to_string());
            Ok(Some(g))
        }
        None => Err(unauthorized("invalid bearer token")),
    }
}

/// 403 unless the token may act as `client`.
fn authorize(shared: &Shared, grant: Option<Grant>, client: &str) -> Result<(), Answer> {
    match (&shared.tokens, grant) {
        (Some(tokens), Some(g)) if !tokens.may_act_as(g, client) => Err(Answer::error(
            403,
            format!("this token may not act as client {client}"),
        )),
        _ => Ok(()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Identity,
    Gzip,
}

/// The body's encoding, from its `Content-Encoding` header: none,
/// `identity` or empty, else `gzip` or `x-gzip` (any case, blanks around
/// it); anything else is 415.
pub(crate) fn content_encoding(value: Option<&HeaderValue>) -> Result<Encoding, Answer> {
    let Some(v) = value else {
        return Ok(Encoding::Identity);
    };
    match v.to_str().map(|s| s.trim().to_ascii_lowercase()) {
        Ok(s) if s.is_empty() || s == "identity" => Ok(Encoding::Identity),
        Ok(s) if s == "gzip" || s == "x-gzip" => Ok(Encoding::Gzip),
        _ => Err(Answer::error(
            415,
            "unsupported Content-Encoding (send gzip or none)",
        )),
    }
}

/// A limit on a body, and how a 413 names it.
struct Limit {
    /// Most bytes, once decompressed.
    bytes: u64,
    /// What is limited: "request body", "payload".
    what: &'static str,
    /// The option that sets it: "--max-body", "--max-payload".
    flag: &'static str,
}

/// Read the body: at most `max_body` bytes as received and at most
/// `limit` once inflated, holding the memory budget for what it keeps.
async fn read_body(
    shared: &Shared,
    req: Request<Incoming>,
    limit: &Limit,
    seen: &mut Seen,
) -> Result<Vec<u8>, Answer> {
    let encoding = content_encoding(req.headers().get(header::CONTENT_ENCODING))?;
    let over = |l: &Limit, inflated: bool| {
        Answer::error(
            413,
            format!(
                "{} is over the limit of {} bytes ({}){}",
                l.what,
                l.bytes,
                l.flag,
                if inflated { " once decompressed" } else { "" }
            ),
        )
    };
    let body_limit = Limit {
        bytes: shared.max_body,
        what: "request body",
        flag: "--max-body",
    };
    let wire = match encoding {
        Encoding::Identity => limit,
        Encoding::Gzip => &body_limit,
    };
    let wire_max = usize::try_from(wire.bytes).unwrap_or(usize::MAX);
    let mut buf: Vec<u8> = Vec::new();
    if let Some(declared) = req.body().size_hint().exact() {
        if declared > wire.bytes {
            return Err(over(wire, false));
        }
        // Known: hold it and allocate it once.
        let declared = declared as usize;
        seen.reservation(shared)
            .take(declared)
            .map_err(Refused::answer)?;
        buf.reserve_exact(declared);
    }
    let deadline = tokio::time::Instant::now() + shared.request_timeout;
    let mut body = req.into_body();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err(Answer::error(
                    408,
                    "the request body did not arrive within the request timeout",
                ))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(Answer::error(
                    400,
                    format!("cannot read the request body: {e}"),
                ))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > wire.bytes {
                seen.bytes_in = (buf.len() + data.len()) as u64;
                return Err(over(wire, false));
            }
            append(&mut buf, &data, wire_max, seen.reservation(shared)).map_err(Refused::answer)?;
        }
    }
    seen.bytes_in = buf.len() as u64;
    seen.body_read = true;
    match encoding {
        Encoding::Identity => Ok(buf),
        Encoding::Gzip => {
            let max = limit.bytes;
            let mut res = seen.held.take().unwrap_or_else(|| Reservation::new(shared));
            let compressed = buf.capacity();
            let (inflated, mut res) =
                if buf.len().saturating_mul(DEFLATE_MAX_RATIO) > BLOCKING_ABOVE {
                    let back = tokio::task::spawn_blocking(move || {
                        let r = gunzip(&buf, max, &mut res);
                        (r, res)
                    })
                    .await;
                    match back {
                        Ok(b) => b,
                        Err(_) => return Err(Answer::error(500, "the request was not processed")),
                    }
                } else {
                    let r = gunzip(&buf, max, &mut res);
                    drop(buf);
                    (r, res)
                };
            // The compressed bytes are gone.
            res.release(compressed);
            seen.held = Some(res);
            match inflated {
                Ok(b) => Ok(b),
                Err(Gunzip::TooLarge) => Err(over(limit, true)),
                Err(Gunzip::Refused(r)) => Err(r.answer()),
                Err(Gunzip::Failed(e)) => {
                    Err(Answer::error(400, format!("invalid gzip body: {e}")))
                }
            }
        }
    }
}

pub(crate) enum Gunzip {
    TooLarge,
    Refused(Refused),
    Failed(String),
}

/// Inflate `data`, keeping at most `limit` bytes of output and holding
/// the memory budget for the output as it grows.
pub(crate) fn gunzip(data: &[u8], limit: u64, res: &mut Reservation) -> Result<Vec<u8>, Gunzip> {
    let max = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    let mut dec = flate2::read::MultiGzDecoder::new(data);
    let mut chunk = vec![0u8; INFLATE_CHUNK];
    loop {
        let n = match dec.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Gunzip::Failed(e.to_string())),
        };
        if out.len() + n > max {
            return Err(Gunzip::TooLarge);
        }
        append(&mut out, &chunk[..n], max, res).map_err(Gunzip::Refused)?;
    }
    Ok(out)
}

/// Hand `work` to the writer and wait for the commit.
async fn submit(shared: &Shared, work: Work, weight: usize) -> Result<Done, Answer> {
    let (reply, answer) = oneshot::channel();
    if shared
        .jobs
        .send(Job::Write {
            work,
            weight,
            reply,
        })
        .await
        .is_err()
    {
        return Err(Answer::error(503, "the server is shutting down; retry later").retry());
    }
    match answer.await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(f)) => Err(failed(f)),
        Err(_) => Err(Answer::error(
            500,
            "the request was not processed; see the server's log",
        )),
    }
}

fn failed(f: Failure) -> Answer {
    if f.temporary {
        Answer::error(503, "the receiving spool is busy; retry later").retry()
    } else {
        Answer::error(
            500,
            "the receiving spool could not store the request; see the server's log",
        )
    }
}

/// What the parsed `req` counts against the memory budget.
fn parsed_cost(req: &PushRequest) -> usize {
    req.entries
        .iter()
        .map(|e| match e {
            Entry::Skip { .. } => SKIP_COST,
            Entry::Item(item) => {
                let payload = match &item.payload {
                    Payload::Bytes(b) => b.len(),
                    Payload::Undecodable { base64, reason } => base64.len() + reason.len(),
                };
                ENTRY_COST
                    + payload
                    + item.key.len()
                    + item.digest.len()
                    + item.enqueued_at.as_ref().map_or(0, String::len)
            }
        })
        .fold(req.client_id.len(), usize::saturating_add)
}

async fn push(shared: &Shared, req: Request<Incoming>, seen: &mut Seen) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers(), seen)?;
    let limit = Limit {
        bytes: shared.max_body,
        what: "request body",
        flag: "--max-body",
    };
    let body = read_body(shared, req, &limit, seen).await?;
    let weight = body.len();
    // Before parsing, hold what the parsed request may take: its strings
    // are no longer than the body, and each entry (one "seq" apiece)
    // costs at most ENTRY_COST beside them.
    let entries = memchr::memmem::find_iter(&body, b"\"seq\"").count();
    seen.reservation(shared)
        .take(
            body.len()
                .saturating_add(entries.saturating_mul(ENTRY_COST)),
        )
        .map_err(Refused::answer)?;
    let parsed = if body.len() > BLOCKING_ABOVE {
        tokio::task::spawn_blocking(move || wire::parse_request(&body))
            .await
            .map_err(|_| Answer::error(500, "the request was not processed"))?
    } else {
        wire::parse_request(&body)
    };
    let req = parsed.map_err(|e| Answer::error(400, e.message()))?;
    seen.client = Some(req.client_id.clone());
    if req.entries.len() > shared.max_entries {
        return Err(Answer::error(
            413,
            format!(
                "the request holds {} entries, over the limit of {} per request \
                 (--max-entries); send smaller batches",
                req.entries.len(),
                shared.max_entries
            ),
        ));
    }
    // The body is gone; hold what the parsed request takes.
    seen.reservation(shared)
        .set(parsed_cost(&req))
        .map_err(Refused::answer)?;
    authorize(shared, grant, &req.client_id)?;
    match submit(shared, Work::Push(req), weight).await? {
        Done::Push(outcome) => {
            let mut a = Answer::json(outcome.status(), outcome.body());
            match &outcome {
                PushOutcome::Accepted(_) => {}
                PushOutcome::Conflict { error, .. } => a.note = Some(error.clone()),
                PushOutcome::Full { .. } => {
                    a.note = Some("the receiving spool is full".into());
                    a.retry_after = true;
                }
            }
            Ok(a)
        }
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

async fn items(shared: &Shared, req: Request<Incoming>, seen: &mut Seen) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers(), seen)?;
    // The key's scope: the token's name (none without a token file).
    let sender = match (&shared.tokens, grant) {
        (Some(tokens), Some(g)) => Some(tokens.name(g).to_string()),
        _ => None,
    };
    let key = idempotency_key(req.headers().get("idempotency-key"), shared.max_key_len)?;
    // The payload is bounded by --max-payload and, like every body, by
    // --max-body: the smaller one names the 413.
    let limit = if shared.max_payload <= shared.max_body {
        Limit {
            bytes: shared.max_payload,
            what: "payload",
            flag: "--max-payload",
        }
    } else {
        Limit {
            bytes: shared.max_body,
            what: "request body",
            flag: "--max-body",
        }
    };
    let payload = read_body(shared, req, &limit, seen).await?;
    seen.reservation(shared)
        .take(ENTRY_COST)
        .map_err(Refused::answer)?;
    let weight = payload.len();
    let work = Work::Item {
        payload,
        key,
        sender,
    };
    match submit(shared, work, weight).await? {
        Done::Item(ItemOutcome::Enqueued(e)) => Ok(Answer::json(
            if e.deduplicated { 200 } else { 201 },
            format!("{{\"id\":{},\"deduplicated\":{}}}", e.id, e.deduplicated).into_bytes(),
        )),
        Done::Item(ItemOutcome::Full) => {
            Ok(Answer::error(503, "the receiving spool is full; retry later").retry())
        }
        Done::Item(ItemOutcome::Refused(why)) => Err(Answer::error(400, why)),
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

/// The key of a `POST /v1/items`, from its `Idempotency-Key` header:
/// none is `""`; a value that is not UTF-8 or is longer than `max` bytes
/// is 400.
pub(crate) fn idempotency_key(value: Option<&HeaderValue>, max: usize) -> Result<String, Answer> {
    let Some(v) = value else {
        return Ok(String::new());
    };
    let key = std::str::from_utf8(v.as_bytes())
        .map_err(|_| Answer::error(400, "the Idempotency-Key header is not UTF-8"))?;
    if key.len() > max {
        return Err(Answer::error(
            400,
            format!(
                "the Idempotency-Key header is {} bytes, over the limit of {max}",
                key.len()
            ),
        ));
    }
    Ok(key.to_string())
}

async fn clients(
    shared: &Shared,
    req: Request<Incoming>,
    path: &str,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers(), seen)?;
    let id = client_of_path(path)?;
    seen.client = Some(id.clone());
    authorize(shared, grant, &id)?;
    match submit(shared, Work::Client(id), 0).await? {
        Done::Client(state) => Ok(Answer::json(200, state.to_json())),
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

/// The client id of a `GET /v1/clients/{client_id}` path, percent-decoded
/// and checked (400 otherwise).
pub(crate) fn client_of_path(path: &str) -> Result<String, Answer> {
    let raw = path.strip_prefix("/v1/clients/").unwrap_or_default();
    let id = percent_decode(raw)
        .ok_or_else(|| Answer::error(400, "the client id in the path is not valid"))?;
    wire::validate_client_id(&id).map_err(|e| Answer::error(400, e.message()))?;
    Ok(id)
}

async fn ask<T>(
    shared: &Shared,
    job: impl FnOnce(oneshot::Sender<Result<T, Failure>>) -> Job,
) -> Result<T, ()> {
    let (reply, answer) = oneshot::channel();
    if shared.jobs.send(job(reply)).await.is_err() {
        return Err(());
    }
    match answer.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) | Err(_) => Err(()),
    }
}

/// The spool's state for `/metrics` and `/healthz`: one snapshot, kept
/// for [`SNAPSHOT_MAX_AGE`]. Requests that find it stale wait for one
/// computation together (the lock is held across it), so it is computed
/// at most once per `SNAPSHOT_MAX_AGE` however many requests ask, and a
/// request that finds it fresh costs nothing but a copy.
pub(crate) struct StateCache {
    /// A read-only handle of the spool, used on the blocking pool; `None`
    /// (a memory spool): the writer thread computes it.
    reader: Option<Arc<Spool>>,
    last: tokio::sync::Mutex<Option<(Instant, Computed)>>,
}

/// A snapshot, or the failure to take one (logged when it happened).
type Computed = Result<Arc<SpoolState>, ()>;

impl StateCache {
    pub fn new(reader: Option<Arc<Spool>>) -> StateCache {
        StateCache {
            reader,
            last: tokio::sync::Mutex::new(None),
        }
    }

    async fn get(&self, shared: &Shared) -> Result<Arc<SpoolState>, Answer> {
        let unreadable = || Answer::error(503, "the spool cannot be read; see the server's log");
        let mut last = self.last.lock().await;
        if let Some((at, state)) = &*last {
            if at.elapsed() < SNAPSHOT_MAX_AGE {
                return state.clone().map_err(|_| unreadable());
            }
        }
        let state = self.compute(shared).await;
        shared.metrics.snapshot_computed();
        *last = Some((Instant::now(), state.clone()));
        state.map_err(|_| unreadable())
    }

    async fn compute(&self, shared: &Shared) -> Computed {
        let Some(reader) = &self.reader else {
            let Snapshot { gauges, clients } = ask(shared, |reply| Job::Stats { reply }).await?;
            let depth = ask(shared, |reply| Job::Health { reply }).await?;
            return Ok(Arc::new(SpoolState {
                gauges,
                depth,
                clients,
            }));
        };
        let reader = reader.clone();
        let state =
            tokio::task::spawn_blocking(move || metrics::spool_state(&reader, Timestamp::now()))
                .await;
        match state {
            Ok(Ok(s)) => Ok(Arc::new(s)),
            Ok(Err(e)) => {
                shared.log.log(&ServeEvent::ReadError(&e));
                Err(())
            }
            Err(_) => Err(()),
        }
    }
}

async fn health(shared: &Shared) -> Result<Answer, Answer> {
    let state = shared.state.get(shared).await?;
    Ok(Answer::json(
        200,
        format!("{{\"status\":\"ok\",\"depth\":{}}}", state.depth).into_bytes(),
    ))
}

async fn metrics(
    shared: &Shared,
    req: Request<Incoming>,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    authenticate(shared, req.headers(), seen)?;
    let state = shared.state.get(shared).await?;
    let mut text = state.gauges.clone();
    text.push_str(&shared.metrics.render(&shared.spool, state.clients));
    let mut a = Answer::json(200, text.into_bytes());
    a.content_type = "text/plain; version=0.0.4; charset=utf-8";
    Ok(a)
}

/// Decode `%XX` escapes; `None` for a malformed escape or bytes that are
/// not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(endpoint_of("/v1/push"), "push");
        assert_eq!(endpoint_of("/v1/clients/x"), "clients");
        assert_eq!(endpoint_of("/v1/clients"), "other");
        assert_eq!(endpoint_of("/v1/push/"), "other");
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%3Ab").as_deref(), Some("a:b"));
        assert_eq!(percent_decode("plain").as_deref(), Some("plain"));
        assert_eq!(percent_decode("%"), None);
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%ff"), None);
        assert_eq!(percent_decode("%+1"), None);
    }

    fn reservation(total: usize) -> Reservation {
        Reservation {
            budget: Arc::new(Semaphore::new(total)),
            total,
            held: None,
        }
    }

    #[test]
    fn gunzip_stops_at_the_limit_and_holds_what_it_inflated() {
        use flate2::write::GzEncoder;
        use std::io::Write as _;
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; 1 << 20]).unwrap();
        let bomb = e.finish().unwrap();
        let mut res = reservation(4 << 20);
        assert!(matches!(
            gunzip(&bomb, 1000, &mut res),
            Err(Gunzip::TooLarge)
        ));
        let mut res = reservation(4 << 20);
        let out = gunzip(&bomb, 1 << 20, &mut res).ok().unwrap();
        assert_eq!(out.len(), 1 << 20);
        assert_eq!(
            res.held(),
            out.capacity(),
            "the budget holds what was inflated"
        );
        assert!(matches!(
            gunzip(&bomb[..bomb.len() / 2], 1 << 20, &mut reservation(4 << 20)),
            Err(Gunzip::Failed(_))
        ));
        assert!(matches!(
            gunzip(b"not gzip", 100, &mut reservation(100)),
            Err(Gunzip::Failed(_))
        ));
        // A budget smaller than the inflated body: refused, never the
        // whole limit up front.
        assert!(matches!(
            gunzip(&bomb, 1 << 20, &mut reservation(100 << 10)),
            Err(Gunzip::Refused(Refused::Never { .. }))
        ));
        let shared_budget = reservation(2 << 20);
        let mut other = Reservation {
            budget: shared_budget.budget.clone(),
            total: 2 << 20,
            held: None,
        };
        other.take(3 << 19).unwrap();
        let mut mine = Reservation {
            budget: shared_budget.budget.clone(),
            total: 2 << 20,
            held: None,
        };
        assert!(matches!(
            gunzip(&bomb, 1 << 20, &mut mine),
            Err(Gunzip::Refused(Refused::Busy))
        ));
        drop(other);
        assert!(gunzip(&bomb, 1 << 20, &mut mine).is_ok());
    }

    #[test]
    fn reservations_grow_shrink_and_give_back() {
        let mut a = reservation(1000);
        let budget = a.budget.clone();
        a.take(600).unwrap();
        assert!(matches!(a.take(500), Err(Refused::Never { total: 1000 })));
        let mut b = Reservation {
            budget: budget.clone(),
            total: 1000,
            held: None,
        };
        assert!(matches!(b.take(500), Err(Refused::Busy)));
        assert_eq!(
            budget.available_permits(),
            400,
            "a refused take holds nothing"
        );
        a.set(100).unwrap();
        assert_eq!(budget.available_permits(), 900);
        b.take(500).unwrap();
        a.set(300).unwrap();
        assert_eq!(budget.available_permits(), 200);
        drop(a);
        drop(b);
        assert_eq!(budget.available_permits(), 1000);
    }

    #[test]
    fn cut_keeps_whole_characters() {
        assert_eq!(cut("GET", 32), "GET");
        assert_eq!(cut(&"X".repeat(5000), 32).len(), 32);
        assert_eq!(cut("aé", 2), "a");
    }
}
