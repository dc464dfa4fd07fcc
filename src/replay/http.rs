//! The `--url URL` target: one HTTP request per item.
//!
//! The body is the payload bytes. `Idempotency-Key` carries the item's key
//! (or the stable `<spool-uuid>:<id>`), `X-Spool-Attempt` the attempt
//! number. 2xx is delivered; 408, 425, 429, 5xx (plus any configured
//! retry statuses), connection errors and timeouts are failed attempts;
//! other 4xx reject the item for good. Redirects are not followed. One
//! agent keeps connections alive across items.
//!
//! TLS is rustls with the trust of [`crate::tls`]: the system store plus
//! `--cacert`, loaded when the target is built (a bad `--cacert` file
//! fails then, before anything is delivered). A failed handshake's cause
//! goes into `last_error` (`TLS handshake with HOST:PORT failed: …`).
//!
//! Credentials never leave this module in text: user info in the URL is
//! turned into an `Authorization: Basic` header and removed from the URL
//! used in messages, and every configured header value is masked in any
//! error text.

use super::{Delivery, Outcome, Target};
use crate::error::{Error, Result};
pub use crate::push::retry_after::parse_retry_after;
use crate::tls::{TlsTrust, TrustedRoots};
use base64::Engine;
use std::time::Duration;
use ureq::http;

/// Bytes of a response body quoted in `last_error`.
const BODY_SNIPPET: usize = 200;

/// Delivers an item with one HTTP request.
#[derive(Debug)]
pub struct HttpTarget {
    endpoint: Endpoint,
    method: http::Method,
    content_type: String,
    retry_status: Vec<u16>,
}

/// Options for [`HttpTarget::new`].
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Request method (default POST).
    pub method: String,
    /// `Content-Type` of the body.
    pub content_type: String,
    /// Extra headers, `Name: value`.
    pub headers: Vec<String>,
    /// 4xx statuses that are retried instead of rejected.
    pub retry_status: Vec<u16>,
    /// Bound on one request, connect to last byte.
    pub timeout: Option<Duration>,
    /// Connections kept open between requests (at least 1). A replay sets
    /// it to its concurrency, so that every delivery in flight goes out
    /// on a kept-alive connection instead of a new one.
    pub connections: usize,
    /// Which certificates an `https://` server may present (`--cacert`).
    pub trust: TlsTrust,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            method: "POST".into(),
            content_type: "application/octet-stream".into(),
            headers: Vec::new(),
            retry_status: Vec::new(),
            timeout: Some(Duration::from_secs(30)),
            connections: 1,
            trust: TlsTrust::default(),
        }
    }
}

/// How long a resolved address is reused.
const RESOLVE_TTL: Duration = Duration::from_secs(30);

/// Resolves the target's host once and reuses the answer for
/// [`RESOLVE_TTL`]. ureq's default resolver looks the host up before every
/// request — on a new thread when a timeout is set — even when a kept-alive
/// connection is then used; one replay sends thousands of requests to one
/// host.
#[derive(Debug, Default)]
struct CachedResolver {
    inner: ureq::unversioned::resolver::DefaultResolver,
    cache: std::sync::Mutex<
        Option<(
            String,
            std::time::Instant,
            ureq::unversioned::resolver::ResolvedSocketAddrs,
        )>,
    >,
}

impl ureq::unversioned::resolver::Resolver for CachedResolver {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> std::result::Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let key = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((k, at, addrs)) = &*cache {
                if *k == key && at.elapsed() < RESOLVE_TTL {
                    return Ok(addrs.clone());
                }
            }
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        *self.cache.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((key, std::time::Instant::now(), addrs.clone()));
        Ok(addrs)
    }
}

/// Parse a comma-separated list of HTTP statuses (`409,423`).
pub fn parse_statuses(s: &str) -> std::result::Result<Vec<u16>, String> {
    s.split(',')
        .map(|p| {
            p.trim()
                .parse::<u16>()
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| format!("invalid HTTP status {p:?} (expected 100-599)"))
        })
        .collect()
}

/// Split user info out of `url`: the URL without it, and the
/// `user:password` text if there was any.
pub(crate) fn split_userinfo(url: &str) -> (String, Option<String>) {
    let Some(scheme_end) = url.find("://") else {
        return (url.to_string(), None);
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let info = &authority[..at];
            let clean = format!(
                "{}{}{}",
                &url[..scheme_end + 3],
                &authority[at + 1..],
                &rest[authority_end..]
            );
            (clean, Some(info.to_string()))
        }
        None => (url.to_string(), None),
    }
}

/// Decode `%XX` escapes (user info in URLs); invalid escapes stay as
/// they are.
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| (c as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP endpoint spool sends to: the URL without credentials, the
/// configured headers (credentials from the URL become an
/// `Authorization: Basic` header), the texts that must never be shown,
/// and a keep-alive agent with the TLS trust of [`crate::tls`]. Shared
/// by the `--url` target and the `--push` transport.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) agent: ureq::Agent,
    pub(crate) url: String,
    /// `host:port` of the server, for TLS messages.
    pub(crate) authority: String,
    /// What TLS trusts (https only).
    pub(crate) roots: Option<TrustedRoots>,
    pub(crate) headers: Vec<(http::HeaderName, http::HeaderValue)>,
    secrets: Vec<String>,
}

impl Endpoint {
    /// Check `url` and `headers` (messages name the option `flag`, e.g.
    /// `--url`), load the TLS trust for an https URL, and build the agent.
    pub(crate) fn new(
        flag: &str,
        url: &str,
        headers: &[String],
        timeout: Option<Duration>,
        connections: usize,
        trust: &TlsTrust,
    ) -> Result<Endpoint> {
        let (clean, userinfo) = split_userinfo(url);
        let uri: http::Uri = clean
            .parse()
            .map_err(|e| Error::InvalidInput(format!("invalid {flag} {clean:?}: {e}")))?;
        match uri.scheme_str() {
            Some("http") | Some("https") => {}
            _ => {
                return Err(Error::InvalidInput(format!(
                    "invalid {flag} {clean:?}: only http:// and https:// URLs are supported"
                )))
            }
        }
        if uri.host().is_none() {
            return Err(Error::InvalidInput(format!(
                "invalid {flag} {clean:?}: no host"
            )));
        }
        let mut secrets = Vec::new();
        let mut parsed = Vec::new();
        for h in headers {
            let (name, value) = h.split_once(':').ok_or_else(|| {
                Error::InvalidInput(format!(
                    "invalid header {:?}: write it as 'Name: value'",
                    h.split(':').next().unwrap_or_default()
                ))
            })?;
            let name = http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                Error::InvalidInput(format!("invalid header name {:?}", name.trim()))
            })?;
            let value_text = value.trim();
            let value = http::HeaderValue::from_str(value_text)
                .map_err(|_| Error::InvalidInput(format!("invalid value for header {name}")))?;
            // Header values may be credentials ("Bearer <token>"): mask the
            // whole value and each long word of it wherever it shows up.
            if value_text.len() >= 4 {
                secrets.push(value_text.to_string());
            }
            secrets.extend(
                value_text
                    .split_whitespace()
                    .filter(|w| w.len() >= 8)
                    .map(str::to_string),
            );
            parsed.push((name, value));
        }
        if let Some(info) = userinfo {
            let (user, pass) = info.split_once(':').unwrap_or((&info, ""));
            let creds = format!("{}:{}", percent_decode(user), percent_decode(pass));
            let token = base64::engine::general_purpose::STANDARD.encode(creds.as_bytes());
            let auth = format!("Basic {token}");
            if !parsed
                .iter()
                .any(|(n, _)| *n == http::header::AUTHORIZATION)
            {
                let value = http::HeaderValue::from_str(&auth)
                    .map_err(|_| Error::InvalidInput(format!("invalid credentials in {flag}")))?;
                parsed.push((http::header::AUTHORIZATION, value));
            }
            secrets.push(info.clone());
            secrets.push(token);
            if !pass.is_empty() {
                secrets.push(pass.to_string());
            }
        }
        // The --cacert file is checked for every URL; the system store is
        // read only when TLS will need it.
        let roots = if uri.scheme_str() == Some("https") {
            Some(trust.load()?)
        } else {
            trust.check()?;
            None
        };
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(timeout)
            .max_idle_connections(connections.max(1))
            .max_idle_connections_per_host(connections.max(1))
            .user_agent(concat!("spool/", env!("CARGO_PKG_VERSION")))
            .build();
        let agent = ureq::Agent::with_parts(
            config,
            crate::tls::ureq_connector(roots.as_ref()),
            CachedResolver::default(),
        );
        Ok(Endpoint {
            agent,
            url: clean,
            authority: authority(&uri),
            roots,
            headers: parsed,
            secrets,
        })
    }

    /// Remove every secret from `text`.
    pub(crate) fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        // Longest first, so a whole value is masked before its parts.
        let mut secrets: Vec<&String> = self.secrets.iter().collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for s in secrets {
            if !s.is_empty() {
                out = out.replace(s.as_str(), "***");
            }
        }
        out
    }

    /// A failed request in words, with secrets removed (a TLS failure
    /// names its cause).
    pub(crate) fn describe_failure(&self, e: &ureq::Error) -> String {
        self.redact(&describe_request_error(
            e,
            &self.authority,
            self.roots.as_ref(),
        ))
    }
}

impl HttpTarget {
    /// A target for `url`.
    pub fn new(url: &str, opts: &HttpOptions) -> Result<HttpTarget> {
        let method = http::Method::from_bytes(opts.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| Error::InvalidInput(format!("invalid --method {:?}", opts.method)))?;
        let endpoint = Endpoint::new(
            "--url",
            url,
            &opts.headers,
            opts.timeout,
            opts.connections,
            &opts.trust,
        )?;
        Ok(HttpTarget {
            endpoint,
            method,
            content_type: opts.content_type.clone(),
            retry_status: opts.retry_status.clone(),
        })
    }

    /// Remove every secret from `text`.
    fn redact(&self, text: &str) -> String {
        self.endpoint.redact(text)
    }

    fn is_retryable(&self, status: u16) -> bool {
        matches!(status, 408 | 425 | 429) || status >= 500 || self.retry_status.contains(&status)
    }
}

fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(BODY_SNIPPET)]);
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    flat.trim().to_string()
}

/// `host:port` of `uri` (the scheme's default port when it has none),
/// without user info.
pub(crate) fn authority(uri: &http::Uri) -> String {
    let host = uri.host().unwrap_or_default();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    format!("{host}:{port}")
}

/// A ureq error in words, without the URL (which may hold credentials):
/// a TLS failure with its cause when `roots` can name it; a failure to
/// reach the server names it (`connection error: connection refused
/// (127.0.0.1:9)`), so that a log line or a `last_error` says where.
pub(crate) fn describe_request_error(
    e: &ureq::Error,
    authority: &str,
    roots: Option<&TrustedRoots>,
) -> String {
    if let Some(explained) = roots.and_then(|r| r.explain(authority, e)) {
        return explained;
    }
    let text = describe_error(e);
    match e {
        ureq::Error::Timeout(_)
        | ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::Io(_) => format!("{text} ({authority})"),
        _ => text,
    }
}

/// A ureq error in words, without the URL (which may hold credentials).
pub(crate) fn describe_error(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(t) => format!("request timed out ({t})"),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::Io(io) => format!("connection error: {}", io.kind()),
        ureq::Error::Tls(m) => format!("TLS error: {m}"),
        ureq::Error::Rustls(r) => format!("TLS error: {r}"),
        ureq::Error::Protocol(p) => format!("HTTP protocol error: {p}"),
        other => format!("request failed: {other}"),
    }
}

impl Target for HttpTarget {
    fn describe(&self) -> String {
        format!("{} {}", self.method, self.endpoint.url)
    }

    fn deliver(&self, d: &Delivery<'_>) -> std::result::Result<Outcome, String> {
        let mut req = http::Request::builder()
            .method(self.method.clone())
            .uri(self.endpoint.url.as_str())
            .header(http::header::CONTENT_TYPE, self.content_type.as_str());
        for (n, v) in &self.endpoint.headers {
            req = req.header(n, v);
        }
        let key = http::HeaderValue::from_str(d.idempotency_key)
            .or_else(|_| {
                // A key with bytes a header cannot carry goes percent-encoded.
                let enc: String = d
                    .idempotency_key
                    .bytes()
                    .map(|b| {
                        if b.is_ascii_graphic() || b == b' ' {
                            (b as char).to_string()
                        } else {
                            format!("%{b:02X}")
                        }
                    })
                    .collect();
                http::HeaderValue::from_str(&enc)
            })
            .map_err(|_| "idempotency key cannot be sent as a header".to_string())?;
        req = req
            .header("Idempotency-Key", key)
            .header("X-Spool-Attempt", d.attempt.to_string());
        let req = req
            .body(d.item.payload.as_slice())
            .map_err(|e| self.redact(&format!("cannot build the request: {e}")))?;
        let resp = match self.endpoint.agent.run(req) {
            Ok(r) => r,
            Err(e) => return Ok(Outcome::failed(self.endpoint.describe_failure(&e))),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let location = resp
            .headers()
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| split_userinfo(l).0);
        let reason = resp.status().canonical_reason().unwrap_or("").to_string();
        // Read the body to the end so the connection can be reused.
        let body = resp
            .into_body()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .unwrap_or_default();
        let head = format!("HTTP {status} {reason}").trim_end().to_string();
        let text = match snippet(&body) {
            s if s.is_empty() => head,
            s => format!("{head}: {s}"),
        };
        let text = self.redact(&text);
        Ok(match status {
            200..=299 => Outcome::Delivered(crate::item::Evidence::Http(status)),
            300..=399 => Outcome::failed(match location {
                Some(l) => self.redact(&format!("{text} (redirect to {l}, not followed)")),
                None => text,
            }),
            s if self.is_retryable(s) => Outcome::Failed {
                reason: text,
                retry_after,
            },
            _ => Outcome::Rejected { reason: text },
        })
    }
}

/// The largest push answer read, in bytes (a 200 lists rejects, at
/// most one per entry of the request).
const MAX_PUSH_ANSWER: u64 = 16 << 20;

/// Options for [`HttpPush::new`].
#[derive(Debug, Clone)]
pub struct HttpPushOptions {
    /// Extra headers, `Name: value` (`Authorization: Bearer …`).
    pub headers: Vec<String>,
    /// Bound on one request, connect to last byte.
    pub timeout: Option<Duration>,
    /// Send bodies gzip-compressed (`Content-Encoding: gzip`).
    pub compress: bool,
    /// Which certificates an `https://` receiver may present.
    pub trust: TlsTrust,
}

impl Default for HttpPushOptions {
    fn default() -> Self {
        HttpPushOptions {
            headers: Vec::new(),
            timeout: Some(Duration::from_secs(30)),
            compress: false,
            trust: TlsTrust::default(),
        }
    }
}

/// The `--push URL` transport: each request body is `POST`ed to the
/// receiver's push endpoint as `application/json` (gzip-compressed with
/// `compress`), over one kept-alive connection, with the TLS trust and
/// the credential masking of the `--url` target.
#[derive(Debug)]
pub struct HttpPush {
    endpoint: Endpoint,
    compress: bool,
}

impl HttpPush {
    /// A transport to the push endpoint `url`. Errors as for
    /// [`HttpTarget::new`], naming `--push`.
    pub fn new(url: &str, opts: &HttpPushOptions) -> Result<HttpPush> {
        Ok(HttpPush {
            endpoint: Endpoint::new("--push", url, &opts.headers, opts.timeout, 1, &opts.trust)?,
            compress: opts.compress,
        })
    }
}

/// `body` compressed with gzip.
fn gzip(body: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4 + 64),
        flate2::Compression::default(),
    );
    enc.write_all(body)?;
    enc.finish()
}

impl super::push::PushTransport for HttpPush {
    fn describe(&self) -> String {
        format!("push to {}", self.endpoint.url)
    }

    fn redact(&self, text: &str) -> String {
        self.endpoint.redact(text)
    }

    fn send(&self, body: &[u8]) -> super::push::PushAnswer {
        use super::push::PushAnswer;
        let compressed;
        let mut req = http::Request::builder()
            .method(http::Method::POST)
            .uri(self.endpoint.url.as_str())
            .header(http::header::CONTENT_TYPE, "application/json");
        let wire: &[u8] = if self.compress {
            compressed = match gzip(body) {
                Ok(c) => c,
                Err(e) => return PushAnswer::Failed(format!("cannot compress the request: {e}")),
            };
            req = req.header(http::header::CONTENT_ENCODING, "gzip");
            &compressed
        } else {
            body
        };
        for (n, v) in &self.endpoint.headers {
            req = req.header(n, v);
        }
        let req = match req.body(wire) {
            Ok(r) => r,
            Err(e) => {
                return PushAnswer::Failed(self.redact(&format!("cannot build the request: {e}")))
            }
        };
        let resp = match self.endpoint.agent.run(req) {
            Ok(r) => r,
            Err(e) => return PushAnswer::Failed(self.endpoint.describe_failure(&e)),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        match resp
            .into_body()
            .with_config()
            .limit(MAX_PUSH_ANSWER)
            .read_to_vec()
        {
            Ok(body) => PushAnswer::Http {
                status,
                body,
                retry_after,
            },
            // The receiver's state is unknown: a failed request, resent.
            Err(e) => PushAnswer::Failed(format!(
                "reading the answer (HTTP {status}) failed: {}",
                self.endpoint.describe_failure(&e)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_split_off() {
        assert_eq!(
            split_userinfo("https://u:p%40ss@h.example:8443/x?q=1"),
            (
                "https://h.example:8443/x?q=1".to_string(),
                Some("u:p%40ss".to_string())
            )
        );
        assert_eq!(
            split_userinfo("http://h/a@b"),
            ("http://h/a@b".to_string(), None)
        );
        assert_eq!(percent_decode("p%40ss%2"), "p@ss%2");
    }

    #[test]
    fn bad_urls_and_headers_are_refused() {
        let o = HttpOptions::default();
        assert!(HttpTarget::new("ftp://h/x", &o).is_err());
        assert!(HttpTarget::new("not a url", &o).is_err());
        let mut o2 = o.clone();
        o2.headers = vec!["NoColon".into()];
        assert!(HttpTarget::new("http://h/x", &o2).is_err());
        o2.headers = vec!["X-Token: s3cr3t-value".into()];
        let t = HttpTarget::new("http://user:pw12345@h/x", &o2).unwrap();
        assert_eq!(t.describe(), "POST http://h/x");
        assert_eq!(
            t.redact("failed with s3cr3t-value and user:pw12345"),
            "failed with *** and ***"
        );
    }

    #[test]
    fn statuses_parse() {
        assert_eq!(parse_statuses("409, 423").unwrap(), vec![409, 423]);
        assert!(parse_statuses("99").is_err());
        assert!(parse_statuses("abc").is_err());
    }
}
