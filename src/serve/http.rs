//! The HTTP side of `spool serve`: routing, authentication, bounded
//! bodies, and turning the writer's results into answers.
//!
//! Per request, in this order, so that nothing is read, inflated or
//! parsed for a caller who may not send it:
//!
//! 1. route and method (404, 405 with `Allow`);
//! 2. the bearer token, when tokens are configured (401 with
//!    `WWW-Authenticate: Bearer`);
//! 3. `Content-Encoding` (`gzip` or none; 415 otherwise) and a declared
//!    `Content-Length` over the limit (413 before reading anything);
//! 4. the body, read frame by frame up to `--max-body` bytes as received
//!    (413 at the first byte over) and within the request timeout (408);
//! 5. gzip inflated into a buffer that stops one byte past the limit (a
//!    bomb costs at most the limit, 413); truncated or corrupt gzip is 400;
//! 6. the push body parsed strictly (400 names the problem), then the
//!    token's client globs checked against its `client_id` (403);
//! 7. the writer commits; only then the answer.
//!
//! Every error answer is `{"error": "…"}`. An answer given before the
//! body was read in full closes the connection. Parsing and inflating
//! large bodies runs on the blocking pool, not on the reactor threads.

use super::auth::{self, Grant, Tokens};
use super::metrics::Metrics;
use super::writer::{Done, Failure, Job, Snapshot, Work};
use super::{Access, ServeEvent, ServeLog};
use crate::push::receiver::{ItemOutcome, PushOutcome};
use crate::push::wire::{self, ErrorBody};
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

/// The longest path an access-log line shows.
const LOGGED_PATH_MAX: usize = 200;

/// What every handler needs.
pub(crate) struct Shared {
    pub tokens: Option<Tokens>,
    pub max_body: u64,
    pub max_payload: u64,
    pub max_key_len: usize,
    pub request_timeout: Duration,
    pub retry_after: Duration,
    pub jobs: mpsc::Sender<Job>,
    pub metrics: Arc<Metrics>,
    pub log: Arc<dyn ServeLog>,
    pub spool: PathBuf,
    /// Bytes of request bodies (as received and inflated) that may be
    /// held at once, over all requests.
    pub budget: Arc<Semaphore>,
}

/// An answer, before it becomes a response.
struct Answer {
    status: u16,
    body: Vec<u8>,
    content_type: &'static str,
    retry_after: bool,
    allow: Option<&'static str>,
    challenge: bool,
    /// The error text, for the access log.
    note: Option<String>,
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

/// What a request revealed, for the access log.
#[derive(Default)]
struct Seen {
    client: Option<String>,
    bytes_in: u64,
    body_read: bool,
    /// The share of the memory budget this request's bodies hold, kept
    /// until the answer is sent.
    held: Option<OwnedSemaphorePermit>,
}

/// Take `n` more bytes of the memory budget for this request, or answer
/// 503: the server holds too many bodies already.
fn reserve(shared: &Shared, seen: &mut Seen, n: usize) -> Result<(), Answer> {
    let n = u32::try_from(n).unwrap_or(u32::MAX);
    match shared.budget.clone().try_acquire_many_owned(n) {
        Ok(p) => {
            match &mut seen.held {
                Some(held) => held.merge(p),
                None => seen.held = Some(p),
            }
            Ok(())
        }
        Err(_) => Err(Answer::error(
            503,
            "the server holds too many request bodies at the moment; retry later",
        )
        .retry()),
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
    let mut logged = path.as_str();
    if logged.len() > LOGGED_PATH_MAX {
        let mut end = LOGGED_PATH_MAX;
        while !logged.is_char_boundary(end) {
            end -= 1;
        }
        logged = &logged[..end];
    }
    shared.log.log(&ServeEvent::Access(&Access {
        peer,
        method: method.as_str(),
        path: logged,
        status: answer.status,
        took,
        bytes_in: seen.bytes_in,
        client: seen.client.as_deref(),
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
    let (allow, want) = match endpoint_of(path) {
        "push" | "items" => ("POST", Method::POST),
        "clients" | "healthz" | "metrics" => ("GET", Method::GET),
        _ => return Answer::error(404, format!("no such endpoint: {}", short(path))),
    };
    if *method != want {
        let mut a = Answer::error(405, format!("{path} answers {allow} only"));
        a.allow = Some(allow);
        return a;
    }
    let result = match endpoint_of(path) {
        "push" => push(shared, req, seen).await,
        "items" => items(shared, req, seen).await,
        "clients" => clients(shared, req, path, seen).await,
        "healthz" => health(shared).await,
        _ => metrics(shared).await,
    };
    result.unwrap_or_else(|a| a)
}

fn short(path: &str) -> String {
    path.chars().take(80).collect()
}

/// The request's token, when tokens are configured.
fn authenticate(shared: &Shared, headers: &HeaderMap) -> Result<Option<Grant>, Answer> {
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
        Some(g) => Ok(Some(g)),
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

enum Encoding {
    Identity,
    Gzip,
}

/// Read the body: at most `max_body` bytes as received and at most
/// `limit` bytes once inflated; `what` names `limit` in the 413.
async fn read_body(
    shared: &Shared,
    req: Request<Incoming>,
    limit: u64,
    what: &str,
    seen: &mut Seen,
) -> Result<Vec<u8>, Answer> {
    let encoding = match req.headers().get(header::CONTENT_ENCODING) {
        None => Encoding::Identity,
        Some(v) => match v.to_str().map(|s| s.trim().to_ascii_lowercase()) {
            Ok(s) if s.is_empty() || s == "identity" => Encoding::Identity,
            Ok(s) if s == "gzip" || s == "x-gzip" => Encoding::Gzip,
            _ => {
                return Err(Answer::error(
                    415,
                    "unsupported Content-Encoding (send gzip or none)",
                ))
            }
        },
    };
    let wire_limit = match encoding {
        Encoding::Identity => shared.max_body.min(limit),
        Encoding::Gzip => shared.max_body,
    };
    let too_large = || {
        if wire_limit < shared.max_body {
            Answer::error(413, format!("{what} is over the limit of {limit} bytes"))
        } else {
            Answer::error(
                413,
                format!(
                    "request body is over the limit of {} bytes (--max-body)",
                    shared.max_body
                ),
            )
        }
    };
    if let Some(declared) = req.body().size_hint().exact() {
        if declared > wire_limit {
            return Err(too_large());
        }
    }
    let deadline = tokio::time::Instant::now() + shared.request_timeout;
    let mut body = req.into_body();
    let mut buf: Vec<u8> = Vec::new();
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
            if (buf.len() + data.len()) as u64 > wire_limit {
                seen.bytes_in = (buf.len() + data.len()) as u64;
                return Err(too_large());
            }
            reserve(shared, seen, data.len())?;
            buf.extend_from_slice(&data);
        }
    }
    seen.bytes_in = buf.len() as u64;
    seen.body_read = true;
    match encoding {
        Encoding::Identity => Ok(buf),
        Encoding::Gzip => {
            // The inflated body may grow to the limit: hold that much.
            reserve(shared, seen, usize::try_from(limit).unwrap_or(usize::MAX))?;
            let inflated = if buf.len() > BLOCKING_ABOVE {
                tokio::task::spawn_blocking(move || gunzip(&buf, limit))
                    .await
                    .unwrap_or(Err(Gunzip::Failed("interrupted".into())))
            } else {
                gunzip(&buf, limit)
            };
            match inflated {
                Ok(b) => Ok(b),
                Err(Gunzip::TooLarge) => Err(Answer::error(
                    413,
                    format!("{what} is over the limit of {limit} bytes once decompressed"),
                )),
                Err(Gunzip::Failed(e)) => {
                    Err(Answer::error(400, format!("invalid gzip body: {e}")))
                }
            }
        }
    }
}

enum Gunzip {
    TooLarge,
    Failed(String),
}

/// Inflate `data`, keeping at most `limit + 1` bytes of output.
fn gunzip(data: &[u8], limit: u64) -> Result<Vec<u8>, Gunzip> {
    let mut out = Vec::new();
    let dec = flate2::read::MultiGzDecoder::new(data);
    dec.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Gunzip::Failed(e.to_string()))?;
    if out.len() as u64 > limit {
        return Err(Gunzip::TooLarge);
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

async fn push(shared: &Shared, req: Request<Incoming>, seen: &mut Seen) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers())?;
    let body = read_body(shared, req, shared.max_body, "request body", seen).await?;
    let weight = body.len();
    let parsed = if body.len() > BLOCKING_ABOVE {
        tokio::task::spawn_blocking(move || wire::parse_request(&body))
            .await
            .map_err(|_| Answer::error(500, "the request was not processed"))?
    } else {
        wire::parse_request(&body)
    };
    let req = parsed.map_err(|e| Answer::error(400, e.message()))?;
    seen.client = Some(req.client_id.clone());
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
    let grant = authenticate(shared, req.headers())?;
    // The key's scope: the token's name (none without a token file).
    let sender = match (&shared.tokens, grant) {
        (Some(tokens), Some(g)) => Some(tokens.name(g).to_string()),
        _ => None,
    };
    let key = match req.headers().get("idempotency-key") {
        None => String::new(),
        Some(v) => {
            let key = std::str::from_utf8(v.as_bytes())
                .map_err(|_| Answer::error(400, "the Idempotency-Key header is not UTF-8"))?;
            if key.len() > shared.max_key_len {
                return Err(Answer::error(
                    400,
                    format!(
                        "the Idempotency-Key header is {} bytes, over the limit of {}",
                        key.len(),
                        shared.max_key_len
                    ),
                ));
            }
            key.to_string()
        }
    };
    let payload = read_body(shared, req, shared.max_payload, "payload", seen).await?;
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

async fn clients(
    shared: &Shared,
    req: Request<Incoming>,
    path: &str,
    seen: &mut Seen,
) -> Result<Answer, Answer> {
    let grant = authenticate(shared, req.headers())?;
    let raw = path.strip_prefix("/v1/clients/").unwrap_or_default();
    let id = percent_decode(raw)
        .ok_or_else(|| Answer::error(400, "the client id in the path is not valid"))?;
    wire::validate_client_id(&id).map_err(|e| Answer::error(400, e.message()))?;
    seen.client = Some(id.clone());
    authorize(shared, grant, &id)?;
    match submit(shared, Work::Client(id), 0).await? {
        Done::Client(state) => Ok(Answer::json(200, state.to_json())),
        _ => Err(Answer::error(500, "internal error: wrong answer")),
    }
}

async fn ask<T>(
    shared: &Shared,
    job: impl FnOnce(oneshot::Sender<Result<T, Failure>>) -> Job,
) -> Result<T, Answer> {
    let (reply, answer) = oneshot::channel();
    if shared.jobs.send(job(reply)).await.is_err() {
        return Err(Answer::error(503, "the server is shutting down").retry());
    }
    match answer.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) | Err(_) => Err(Answer::error(
            503,
            "the spool cannot be read; see the server's log",
        )),
    }
}

async fn health(shared: &Shared) -> Result<Answer, Answer> {
    let depth = ask(shared, |reply| Job::Health { reply }).await?;
    Ok(Answer::json(
        200,
        format!("{{\"status\":\"ok\",\"depth\":{depth}}}").into_bytes(),
    ))
}

async fn metrics(shared: &Shared) -> Result<Answer, Answer> {
    let Snapshot { gauges, clients } = ask(shared, |reply| Job::Stats { reply }).await?;
    let mut text = gauges;
    text.push_str(&shared.metrics.render(&shared.spool, clients));
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

    #[test]
    fn gunzip_stops_at_the_limit() {
        use flate2::write::GzEncoder;
        use std::io::Write as _;
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; 1 << 20]).unwrap();
        let bomb = e.finish().unwrap();
        assert!(matches!(gunzip(&bomb, 1000), Err(Gunzip::TooLarge)));
        assert_eq!(gunzip(&bomb, 1 << 20).ok().map(|v| v.len()), Some(1 << 20));
        assert!(matches!(
            gunzip(&bomb[..bomb.len() / 2], 1 << 20),
            Err(Gunzip::Failed(_))
        ));
        assert!(matches!(gunzip(b"not gzip", 100), Err(Gunzip::Failed(_))));
    }
}
