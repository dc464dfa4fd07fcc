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
//! front), and the parsed push entries
//! ([`ENTRY_COST`](budget::ENTRY_COST) each beside their payload and
//! key) until the answer is sent. A request that would go over the
//! budget is answered 503 with `Retry-After`; one that alone needs more
//! than the whole budget, 413.
//!
//! Every error answer is `{"error": "…"}`. An answer given before the
//! body was read in full closes the connection. Parsing and inflating
//! large bodies runs on the blocking pool, not on the reactor threads.

mod body;
mod budget;
mod endpoints;
mod state;

pub(crate) use self::body::{content_encoding, gunzip, read_body, Encoding, Gunzip, Limit};
pub(crate) use self::budget::Reservation;
pub(crate) use self::endpoints::{client_of_path, idempotency_key};
pub(crate) use self::state::StateCache;

use super::auth::Tokens;
use super::metrics::Metrics;
use super::writer::Job;
use super::{Access, ServeEvent, ServeLog};
use crate::push::wire::ErrorBody;
use http_body_util::Full;
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Semaphore};

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
    /// `--console`: the browser view under `/console/`.
    pub console: Option<crate::serve::console::Console>,
}

/// An answer, before it becomes a response.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) content_type: &'static str,
    retry_after: bool,
    pub(crate) allow: Option<&'static str>,
    challenge: bool,
    /// The error text, for the access log.
    pub(crate) note: Option<String>,
    /// More headers (the console's cookies, redirects and security
    /// headers).
    pub(crate) headers: Vec<(&'static str, String)>,
}

impl Answer {
    pub(crate) fn json(status: u16, body: Vec<u8>) -> Answer {
        Answer {
            status,
            body,
            content_type: "application/json",
            retry_after: false,
            allow: None,
            challenge: false,
            note: None,
            headers: Vec::new(),
        }
    }

    pub(crate) fn error(status: u16, message: impl Into<String>) -> Answer {
        let message = message.into();
        let mut a = Answer::json(status, ErrorBody::new(message.clone()).to_json());
        a.note = Some(message);
        a
    }

    pub(crate) fn retry(mut self) -> Answer {
        self.retry_after = true;
        self
    }

    /// Whether the answer carries `Retry-After`.
    pub(crate) fn retries(&self) -> bool {
        self.retry_after
    }
}

/// What a request revealed, for the access log.
#[derive(Default)]
pub(crate) struct Seen {
    client: Option<String>,
    /// The name of the request's valid token.
    pub(crate) token: Option<String>,
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
        p if p == "/console" || p.starts_with("/console/") => "console",
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
    for (name, value) in a.headers {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.append(header::HeaderName::from_static(name), v);
        }
    }
    r
}

async fn route(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    method: &Method,
    path: &str,
    seen: &mut Seen,
) -> Answer {
    let endpoint = endpoint_of(path);
    if endpoint == "console" {
        if let Some(console) = &shared.console {
            return console.handle(shared, req, method, path, seen).await;
        }
    }
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
        "push" => endpoints::push(shared, req, seen).await,
        "items" => endpoints::items(shared, req, seen).await,
        "clients" => endpoints::clients(shared, req, path, seen).await,
        "healthz" => endpoints::health(shared).await,
        _ => endpoints::metrics(shared, req, seen).await,
    };
    result.unwrap_or_else(|a| a)
}

fn short(path: &str) -> String {
    path.chars().take(80).collect()
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
    fn cut_keeps_whole_characters() {
        assert_eq!(cut("GET", 32), "GET");
        assert_eq!(cut(&"X".repeat(5000), 32).len(), 32);
        assert_eq!(cut("aé", 2), "a");
    }
}
