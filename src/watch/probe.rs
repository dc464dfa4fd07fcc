//! [`Probe`]: what `spool watch --probe TARGET` checks to decide whether
//! the link is up.
//!
//! | target | up when |
//! | --- | --- |
//! | `tcp://HOST:PORT` | a TCP connection opens within the timeout |
//! | `http://…`, `https://…` | a `GET` answers 2xx within the timeout (redirects are not followed) and, with `expect`, the body contains that text |
//! | `exec:CMD` | the command exits 0 within the timeout |
//!
//! `expect` exists because a captive portal answers 200 too. An HTTP probe
//! opens a fresh connection every time (no pooled connection can hide a
//! dead link). An `https://` probe trusts what [`crate::tls`] trusts (the
//! system store plus `--cacert`, [`ProbeOptions::trust`]) and a failed
//! handshake names its cause, like the `--url` target. An `exec:` command is split like a shell would (quotes
//! honoured) and run directly, never through a shell, in its own process
//! group, with stdin/stdout/stderr closed; on timeout the whole group is
//! killed ([`crate::child`]).
//!
//! Credentials never appear in text: user info in an HTTP URL becomes an
//! `Authorization: Basic` header and is removed, and the query string is
//! masked, in [`Probe::describe`] and every error message.

use crate::child::{self, Stderr};
use crate::error::{Error, Result};
use crate::replay::http::{
    authority, describe_error, describe_request_error, percent_decode, split_userinfo,
};
use crate::tls::{TlsTrust, TrustedRoots};
use base64::Engine;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};
use ureq::http;

/// Bytes of an HTTP body searched for the `expect` text.
const BODY_LIMIT: u64 = 1 << 20;

/// Options for [`Probe::parse`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeOptions {
    /// Bound on one probe, connect to last byte (default 5 s).
    pub timeout: Duration,
    /// HTTP only: text the body must contain (`--probe-expect`).
    pub expect: Option<String>,
    /// `https://` only: which certificates the server may present
    /// (`--cacert`). A bad `--cacert` file fails [`Probe::parse`] whatever
    /// the target.
    pub trust: TlsTrust,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            timeout: Duration::from_secs(5),
            expect: None,
            trust: TlsTrust::default(),
        }
    }
}

#[derive(Debug)]
enum Kind {
    Tcp {
        host: String,
        port: u16,
    },
    Http {
        agent: ureq::Agent,
        url: String,
        authority: String,
        roots: Option<TrustedRoots>,
        authorization: Option<String>,
        expect: Option<String>,
        secrets: Vec<String>,
    },
    Exec {
        argv: Vec<String>,
    },
}

/// A parsed probe target; see the module documentation.
#[derive(Debug)]
pub struct Probe {
    kind: Kind,
    timeout: Duration,
    shown: String,
}

fn invalid(shown: &str, why: &str) -> Error {
    Error::InvalidInput(format!("invalid --probe {shown:?}: {why}"))
}

/// `url` for people: the query string (which may carry a token) masked,
/// the fragment dropped.
fn shown_url(clean: &str) -> String {
    let no_fragment = clean.split('#').next().unwrap_or(clean);
    match no_fragment.split_once('?') {
        Some((base, _)) => format!("{base}?***"),
        None => no_fragment.to_string(),
    }
}

fn parse_tcp(rest: &str, shown: &str) -> Result<Kind> {
    let why = "expected tcp://HOST:PORT";
    let (host, port) = rest.rsplit_once(':').ok_or_else(|| invalid(shown, why))?;
    let host = match host.strip_prefix('[') {
        Some(h) => h
            .strip_suffix(']')
            .ok_or_else(|| invalid(shown, "unclosed '[' in the host"))?,
        None => host,
    };
    if host.is_empty() || host.contains(['/', '@', '?', '#', ' ']) {
        return Err(invalid(shown, why));
    }
    if !rest.starts_with('[') && host.contains(':') {
        return Err(invalid(
            shown,
            "write an IPv6 host in brackets: tcp://[::1]:PORT",
        ));
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| invalid(shown, "the port must be a number from 1 to 65535"))?;
    Ok(Kind::Tcp {
        host: host.to_string(),
        port,
    })
}

fn parse_http(
    target: &str,
    timeout: Duration,
    expect: Option<String>,
    trust: &TlsTrust,
) -> Result<(Kind, String)> {
    let (clean, userinfo) = split_userinfo(target);
    let shown = shown_url(&clean);
    let uri: http::Uri = clean
        .parse()
        .map_err(|e| invalid(&shown, &format!("not a URL ({e})")))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid(&shown, "no host"));
    }
    let mut secrets = Vec::new();
    if let Some(q) = uri.query() {
        if !q.is_empty() {
            secrets.push(q.to_string());
        }
    }
    let authorization = match userinfo {
        Some(info) => {
            let (user, pass) = info.split_once(':').unwrap_or((&info, ""));
            let creds = format!("{}:{}", percent_decode(user), percent_decode(pass));
            let token = base64::engine::general_purpose::STANDARD.encode(creds.as_bytes());
            secrets.push(info.clone());
            secrets.push(token.clone());
            if !pass.is_empty() {
                secrets.push(pass.to_string());
            }
            Some(format!("Basic {token}"))
        }
        None => None,
    };
    let roots = if uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"))
    {
        Some(trust.load()?)
    } else {
        None
    };
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(timeout))
        .max_idle_connections(0)
        .user_agent(concat!("spool/", env!("CARGO_PKG_VERSION"), " (probe)"))
        .build();
    let agent = ureq::Agent::with_parts(
        config,
        crate::tls::ureq_connector(roots.as_ref()),
        ureq::unversioned::resolver::DefaultResolver::default(),
    );
    Ok((
        Kind::Http {
            agent,
            authority: authority(&uri),
            roots,
            url: clean,
            authorization,
            expect,
            secrets,
        },
        shown,
    ))
}

impl Probe {
    /// Parse `target` (`tcp://HOST:PORT`, `http(s)://URL` or `exec:CMD`).
    /// Errors are [`Error::InvalidInput`] and never quote credentials.
    pub fn parse(target: &str, opts: &ProbeOptions) -> Result<Probe> {
        if opts.timeout.is_zero() {
            return Err(Error::InvalidInput(
                "the probe timeout must be longer than zero".into(),
            ));
        }
        // A bad --cacert file is an error whatever the probe, not a flag
        // silently ignored.
        opts.trust.check()?;
        let target = target.trim();
        let lower = target.to_ascii_lowercase();
        let expect = opts.expect.clone().filter(|e| !e.is_empty());
        let not_http = |shown: &str| {
            if expect.is_some() {
                Err(invalid(
                    shown,
                    "--probe-expect applies to http(s) probes only",
                ))
            } else {
                Ok(())
            }
        };
        let (kind, shown) = if lower.starts_with("tcp://") {
            let shown = target.to_string();
            not_http(&shown)?;
            (parse_tcp(&target["tcp://".len()..], &shown)?, shown)
        } else if lower.starts_with("http://") || lower.starts_with("https://") {
            parse_http(target, opts.timeout, expect.clone(), &opts.trust)?
        } else if lower.starts_with("exec:") {
            let shown = target.to_string();
            not_http(&shown)?;
            let cmd = &target["exec:".len()..];
            let argv = shell_words::split(cmd)
                .map_err(|e| invalid(&shown, &format!("cannot split the command: {e}")))?;
            if argv.first().is_none_or(String::is_empty) {
                return Err(invalid(&shown, "exec: needs a command"));
            }
            (Kind::Exec { argv }, shown)
        } else {
            let shown = shown_url(&split_userinfo(target).0);
            return Err(invalid(
                &shown,
                "expected tcp://HOST:PORT, http(s)://URL or exec:CMD",
            ));
        };
        Ok(Probe {
            kind,
            timeout: opts.timeout,
            shown,
        })
    }

    /// The target for logs, without credentials.
    pub fn describe(&self) -> &str {
        &self.shown
    }

    /// The bound on one check.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Check the link once: `Ok` when up, `Err(reason)` when not. Blocks
    /// for at most about the timeout (a TCP host name is resolved first,
    /// outside it).
    pub fn check(&self) -> std::result::Result<(), String> {
        match &self.kind {
            Kind::Tcp { host, port } => self.check_tcp(host, *port),
            Kind::Http {
                agent,
                url,
                authority,
                roots,
                authorization,
                expect,
                secrets,
            } => {
                let call = HttpCall {
                    agent,
                    url,
                    authority,
                    roots: roots.as_ref(),
                };
                check_http(&call, authorization.as_deref(), expect.as_deref())
                    .map_err(|e| redact(&e, secrets))
            }
            Kind::Exec { argv } => self.check_exec(argv),
        }
    }

    fn check_tcp(&self, host: &str, port: u16) -> std::result::Result<(), String> {
        let started = Instant::now();
        let addrs: Vec<_> = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("{host} has no address"));
        }
        let mut last: Option<io::Error> = None;
        for addr in addrs {
            let left = self.timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "connect to {} timed out",
                    self.describe_tcp(host, port)
                ));
            }
            match TcpStream::connect_timeout(&addr, left) {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) if e.kind() == io::ErrorKind::TimedOut => {
                format!("connect to {} timed out", self.describe_tcp(host, port))
            }
            Some(e) => format!("cannot connect to {}: {e}", self.describe_tcp(host, port)),
            None => format!("cannot connect to {}", self.describe_tcp(host, port)),
        })
    }

    fn describe_tcp(&self, host: &str, port: u16) -> String {
        if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        }
    }

    fn check_exec(&self, argv: &[String]) -> std::result::Result<(), String> {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]);
        child::run(cmd, &argv[0], None, Some(self.timeout), Stderr::Discard)?
            .succeeded(&shell_words::join(argv), self.timeout)
    }
}

fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if !s.is_empty() {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

/// Where an HTTP probe goes and how it explains a failed connection.
struct HttpCall<'a> {
    agent: &'a ureq::Agent,
    url: &'a str,
    authority: &'a str,
    roots: Option<&'a TrustedRoots>,
}

fn check_http(
    call: &HttpCall<'_>,
    authorization: Option<&str>,
    expect: Option<&str>,
) -> std::result::Result<(), String> {
    let mut req = call.agent.get(call.url);
    if let Some(a) = authorization {
        req = req.header(http::header::AUTHORIZATION, a);
    }
    let resp = req
        .call()
        .map_err(|e| describe_request_error(&e, call.authority, call.roots))?;
    let status = resp.status();
    if !status.is_success() {
        let reason = status.canonical_reason().unwrap_or("");
        return Err(format!("HTTP {} {reason}", status.as_u16())
            .trim_end()
            .to_string());
    }
    let Some(expect) = expect else {
        return Ok(());
    };
    let body = resp
        .into_body()
        .with_config()
        .limit(BODY_LIMIT)
        .read_to_vec()
        .map_err(|e| format!("cannot read the response body: {}", describe_error(&e)))?;
    let needle = expect.as_bytes();
    if body.windows(needle.len()).any(|w| w == needle) {
        Ok(())
    } else {
        Err(format!(
            "HTTP {} but the body does not contain the expected text (a captive portal?)",
            status.as_u16()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str) -> Result<Probe> {
        Probe::parse(t, &ProbeOptions::default())
    }

    #[test]
    fn targets_parse() {
        assert!(matches!(
            parse("tcp://example.com:443").unwrap().kind,
            Kind::Tcp { ref host, port: 443 } if host == "example.com"
        ));
        assert!(matches!(
            parse("tcp://[::1]:8080").unwrap().kind,
            Kind::Tcp { ref host, port: 8080 } if host == "::1"
        ));
        assert!(matches!(
            parse("exec:ping -c 1 'a host'").unwrap().kind,
            Kind::Exec { ref argv } if argv == &["ping", "-c", "1", "a host"]
        ));
        assert_eq!(
            parse("https://h.example/health").unwrap().describe(),
            "https://h.example/health"
        );
    }

    #[test]
    fn bad_targets_are_invalid_input() {
        for t in [
            "tcp://host",
            "tcp://host:0",
            "tcp://host:99999",
            "tcp://:80",
            "tcp://::1:80",
            "tcp://h/x:80",
            "exec:",
            "exec:'unclosed",
            "ftp://h/x",
            "h:80",
            "http://",
        ] {
            let e = parse(t).err().unwrap_or_else(|| panic!("{t} parsed"));
            assert!(matches!(e, Error::InvalidInput(_)), "{t}: {e:?}");
            assert!(e.to_string().starts_with("invalid --probe"), "{e}");
        }
        let o = ProbeOptions {
            expect: Some("ok".into()),
            ..Default::default()
        };
        assert!(Probe::parse("tcp://h:1", &o).is_err());
        assert!(Probe::parse("exec:true", &o).is_err());
        assert!(Probe::parse("http://h/", &o).is_ok());
    }

    #[test]
    fn credentials_never_show() {
        let p = parse("https://user:s3cret@h.example/ping?token=abc123").unwrap();
        assert_eq!(p.describe(), "https://h.example/ping?***");
        let Kind::Http {
            authorization,
            secrets,
            ..
        } = &p.kind
        else {
            panic!("not http");
        };
        assert!(authorization.as_deref().unwrap().starts_with("Basic "));
        assert_eq!(
            redact(
                "GET https://h.example/ping?token=abc123 as user:s3cret",
                secrets
            ),
            "GET https://h.example/ping?*** as ***"
        );
        let e = parse("gopher://user:s3cret@h/x?k=v")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret") && !e.contains("k=v"), "{e}");
        let e = parse("http://user:s3cret@/x").unwrap_err().to_string();
        assert!(!e.contains("s3cret"), "{e}");
    }
}
