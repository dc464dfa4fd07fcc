//! A PostgreSQL spool's address: `postgres://user:password@host:port/db?spool=NAME`.
//!
//! The URL is parsed here, not by the driver, because it carries spool's
//! own parameters (`spool=`, `schema=`, `sslrootcert=`) and because the
//! password must never reach a message: [`PgTarget::display`] is the
//! address as every error, log line and report shows it, without the
//! password. Missing parts fall back to `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGPASSWORD` and `PGDATABASE`, as libpq does.
//!
//! Accepted query parameters: `spool` (default `default`), `schema`
//! (default `spool`), `sslmode` (`disable`, `prefer` (default) or
//! `require`), `sslrootcert` (PEM file of a private CA), `host` (a host
//! name or a Unix socket directory), `port`, `user`, `password`, `dbname`,
//! `connect_timeout` (seconds, default 10) and `application_name`. Any
//! other parameter is refused, so that a typo is not silently ignored.
//!
//! TLS is rustls with certificate verification in both `prefer` and
//! `require` (stricter than libpq, whose `require` does not verify): the
//! server's certificate must chain to the system's store or to
//! `sslrootcert=`, and name the host. `prefer` falls back to a plain
//! connection only when the server does not offer TLS at all, never when
//! verification fails. A Unix socket never uses TLS (as in libpq).

use crate::error::{Error, Result};
use std::path::PathBuf;
use std::time::Duration;

/// The TLS policy of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it (verified), plain otherwise.
    Prefer,
    /// TLS, verified, or no connection.
    Require,
}

/// Everything a PostgreSQL spool's URL says, fallbacks applied.
#[derive(Clone)]
pub struct PgTarget {
    /// Host name, IP address, or (starting with `/`) a Unix socket
    /// directory.
    pub host: String,
    /// Port (also the Unix socket's name: `.s.PGSQL.<port>`).
    pub port: u16,
    /// User name.
    pub user: String,
    /// Password; never shown.
    pub password: Option<String>,
    /// Database name.
    pub dbname: String,
    /// The spool's name inside the database.
    pub spool: String,
    /// The schema of spool's tables.
    pub schema: String,
    /// TLS policy.
    pub sslmode: SslMode,
    /// A private CA's certificates (PEM).
    pub sslrootcert: Option<PathBuf>,
    /// How long to wait for the server to answer a connection.
    pub connect_timeout: Duration,
    /// Reported to the server (`pg_stat_activity`).
    pub application_name: String,
}

impl std::fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

/// The default spool name.
pub const DEFAULT_SPOOL: &str = "default";
/// The default schema.
pub const DEFAULT_SCHEMA: &str = "spool";

/// True when `s` is a PostgreSQL spool address rather than a path.
pub fn is_postgres_url(s: &str) -> bool {
    let lower = s.get(..13).unwrap_or(s).to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

/// `s` with the password of a PostgreSQL URL (or of a libpq key/value
/// string, see [`libpq_key_values`]) replaced by `***`; any other string
/// unchanged. For messages about a `--spool` value.
pub fn redact(s: &str) -> String {
    if !is_postgres_url(s) {
        return match libpq_key_values(s) {
            Some(pairs) => pairs
                .iter()
                .map(|(k, v)| match k.as_str() {
                    "password" => format!("{k}=***"),
                    _ => format!("{k}={}", quote_libpq(v)),
                })
                .collect::<Vec<_>>()
                .join(" "),
            None => s.to_string(),
        };
    }
    match PgTarget::parse_with_env(s, &|_| None) {
        Ok(t) => t.display(),
        Err(_) => {
            // Unparsable: keep the scheme and drop everything that could
            // hold a secret.
            let scheme_end = s.find("://").map_or(0, |i| i + 3);
            format!("{}…", &s[..scheme_end])
        }
    }
}

/// The keywords that make a string a libpq connection string
/// (`host=db user=app dbname=ops`) rather than a file name.
const LIBPQ_CONNECTION_KEYS: [&str; 6] = ["host", "hostaddr", "port", "dbname", "user", "password"];

/// The `key=value` pairs of a libpq key/value connection string
/// (`host=db.internal user=app dbname=ops`; values may be single-quoted),
/// or `None` when `s` is not one: every word is `key=value` with a
/// lowercase keyword, and one of them names a server, database, user or
/// password. spool takes PostgreSQL spools only as `postgres://` URLs;
/// this lets it say so (see [`libpq_hint`]) instead of looking for a file
/// of that name.
pub fn libpq_key_values(s: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let key_len = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(rest.len());
        if key_len == 0 {
            return None;
        }
        let key = &rest[..key_len];
        rest = rest[key_len..].trim_start().strip_prefix('=')?.trim_start();
        let mut value = String::new();
        if let Some(quoted) = rest.strip_prefix('\'') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next()?.1),
                    '\'' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            rest = &quoted[end?..];
            if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
                return None;
            }
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            value.push_str(&rest[..end]);
            rest = &rest[end..];
        }
        pairs.push((key.to_string(), value));
        rest = rest.trim_start();
    }
    pairs
        .iter()
        .any(|(k, _)| LIBPQ_CONNECTION_KEYS.contains(&k.as_str()))
        .then_some(pairs)
}

fn quote_libpq(v: &str) -> String {
    if !v.is_empty() && !v.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\') {
        return v.to_string();
    }
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// For a `--spool` value that is a libpq key/value string (see
/// [`libpq_key_values`]): the message that says a `postgres://` URL is
/// needed, with the URL equivalent to the given keys — never with the
/// password, which goes in `PGPASSWORD` (or the URL) instead. `None` for
/// any other string.
pub fn libpq_hint(s: &str) -> Option<String> {
    let pairs = libpq_key_values(s)?;
    let get = |k: &str| {
        pairs
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let host = get("host").or(get("hostaddr")).unwrap_or("");
    let mut url = String::from("postgres://");
    if let Some(u) = get("user") {
        url.push_str(&percent_encode(u));
        url.push('@');
    }
    let mut params = Vec::new();
    if host.starts_with('/') {
        params.push(format!("host={}", percent_encode(host)));
        if let Some(p) = get("port") {
            params.push(format!("port={}", percent_encode(p)));
        }
    } else {
        if host.contains(':') {
            url.push_str(&format!("[{host}]"));
        } else {
            url.push_str(&percent_encode(host));
        }
        if let Some(p) = get("port") {
            url.push(':');
            url.push_str(&percent_encode(p));
        }
    }
    url.push('/');
    url.push_str(&percent_encode(get("dbname").unwrap_or("")));
    for k in [
        "sslmode",
        "sslrootcert",
        "connect_timeout",
        "application_name",
    ] {
        if let Some(v) = get(k) {
            params.push(format!("{k}={}", percent_encode(v)));
        }
    }
    params.push("spool=default".to_string());
    url.push('?');
    url.push_str(&params.join("&"));
    let known = |k: &str| {
        LIBPQ_CONNECTION_KEYS.contains(&k)
            || [
                "sslmode",
                "sslrootcert",
                "connect_timeout",
                "application_name",
            ]
            .contains(&k)
    };
    let mut unused: Vec<&str> = pairs
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !known(k))
        .collect();
    unused.dedup();
    let mut msg = format!(
        "this is a libpq key/value connection string; a PostgreSQL spool is given as a \
         postgres:// URL: {url} (spool= names the spool in the database)"
    );
    if get("password").is_some() {
        msg.push_str(
            "; the password is left out: set PGPASSWORD, or write user:PASSWORD@ in the URL",
        );
    }
    if !unused.is_empty() {
        msg.push_str(&format!(
            "; not carried over: {} (a spool URL does not take them)",
            unused.join(", ")
        ));
    }
    Some(msg)
}

fn percent_decode(s: &str, what: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        Error::Unsupported(format!(
                            "the PostgreSQL URL has a bad %-escape in its {what}"
                        ))
                    })?;
                out.push(hex);
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| {
        Error::Unsupported(format!(
            "the PostgreSQL URL's {what} is not UTF-8 after %-decoding"
        ))
    })
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for c in s.bytes() {
        if c.is_ascii_alphanumeric() || b"-._~/".contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

impl PgTarget {
    /// Parse `url`, with the `PG*` environment variables as fallbacks.
    pub fn parse(url: &str) -> Result<PgTarget> {
        PgTarget::parse_with_env(url, &|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// Parse `url` with `env` as the environment.
    pub fn parse_with_env(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<PgTarget> {
        let bad = |why: &str| Error::Unsupported(format!("bad PostgreSQL URL: {why}"));
        let rest = url
            .find("://")
            .filter(|_| is_postgres_url(url))
            .map(|i| &url[i + 3..])
            .ok_or_else(|| bad("it must start with postgres:// or postgresql://"))?;
        let (before_query, query) = match rest.find('?') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i + 1..]),
            None => (before_query, ""),
        };
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let (mut user, mut password) = (None, None);
        if let Some(ui) = userinfo {
            match ui.find(':') {
                Some(i) => {
                    user = Some(percent_decode(&ui[..i], "user name")?);
                    password = Some(percent_decode(&ui[i + 1..], "password")?);
                }
                None => user = Some(percent_decode(ui, "user name")?),
            }
        }
        if hostport.contains(',') {
            return Err(bad("several hosts are not supported; give one"));
        }
        let (mut host, mut port) = (None, None);
        if let Some(h) = hostport.strip_prefix('[') {
            let end = h.find(']').ok_or_else(|| bad("unclosed [ in the host"))?;
            host = Some(h[..end].to_string());
            if let Some(p) = h[end + 1..].strip_prefix(':') {
                port = Some(p.to_string());
            }
        } else if !hostport.is_empty() {
            match hostport.rfind(':') {
                Some(i) => {
                    host = Some(percent_decode(&hostport[..i], "host")?);
                    port = Some(hostport[i + 1..].to_string());
                }
                None => host = Some(percent_decode(hostport, "host")?),
            }
        }
        let host = host.filter(|h| !h.is_empty());
        let mut dbname = Some(percent_decode(path, "database name")?).filter(|d| !d.is_empty());
        let mut spool = None;
        let mut schema = None;
        let mut sslmode = None;
        let mut sslrootcert = None;
        let mut connect_timeout = None;
        let mut application_name = None;
        let mut host = host;
        if let Some(q) = query {
            for pair in q.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = match pair.find('=') {
                    Some(i) => (&pair[..i], &pair[i + 1..]),
                    None => (pair, ""),
                };
                let k = percent_decode(k, "query")?;
                let v = percent_decode(v, "query")?;
                match k.as_str() {
                    "spool" => spool = Some(v),
                    "schema" => schema = Some(v),
                    "sslmode" => sslmode = Some(v),
                    "sslrootcert" => sslrootcert = Some(PathBuf::from(v)),
                    "host" => host = Some(v),
                    "port" => port = Some(v),
                    "user" => user = Some(v),
                    "password" => password = Some(v),
                    "dbname" => dbname = Some(v),
                    "connect_timeout" => connect_timeout = Some(v),
                    "application_name" => application_name = Some(v),
                    other => {
                        return Err(bad(&format!(
                            "unknown parameter {other:?} (known: spool, schema, sslmode, sslrootcert, host, port, user, password, dbname, connect_timeout, application_name)"
                        )))
                    }
                }
            }
        }
        let host = host
            .or_else(|| env("PGHOST"))
            .unwrap_or_else(|| "localhost".to_string());
        let port = match port.filter(|p| !p.is_empty()).or_else(|| env("PGPORT")) {
            None => 5432,
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| bad(&format!("port {p:?} is not a number from 1 to 65535")))?,
        };
        let user = user
            .filter(|u| !u.is_empty())
            .or_else(|| env("PGUSER"))
            .or_else(|| env("USER"))
            .unwrap_or_else(|| "postgres".to_string());
        let password = password.or_else(|| env("PGPASSWORD"));
        let dbname = dbname
            .or_else(|| env("PGDATABASE"))
            .unwrap_or_else(|| user.clone());
        let spool = spool.unwrap_or_else(|| DEFAULT_SPOOL.to_string());
        if spool.is_empty() || spool.contains('\0') {
            return Err(bad("spool= must name the spool (a non-empty string)"));
        }
        let schema = schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_string());
        if schema.is_empty() || schema.len() > 63 || schema.contains('\0') {
            return Err(bad("schema= must be a name of 1 to 63 bytes"));
        }
        let sslmode = match sslmode.as_deref() {
            None | Some("prefer") => SslMode::Prefer,
            Some("disable") => SslMode::Disable,
            Some("require") => SslMode::Require,
            Some(other) => {
                return Err(bad(&format!(
                    "sslmode={other} is not supported (use disable, prefer or require)"
                )))
            }
        };
        let connect_timeout = match connect_timeout {
            None => Duration::from_secs(10),
            Some(s) => Duration::from_secs(
                s.parse::<u64>()
                    .map_err(|_| bad("connect_timeout must be whole seconds"))?,
            ),
        };
        Ok(PgTarget {
            host,
            port,
            user,
            password,
            dbname,
            spool,
            schema,
            sslmode,
            sslrootcert,
            connect_timeout,
            application_name: application_name.unwrap_or_else(|| "spool".to_string()),
        })
    }

    /// True when the host is a Unix socket directory.
    pub fn is_unix_socket(&self) -> bool {
        self.host.starts_with('/')
    }

    /// The server, as messages name it: `host:port`, or the socket's path.
    pub fn server(&self) -> String {
        if self.is_unix_socket() {
            format!("{}/.s.PGSQL.{}", self.host.trim_end_matches('/'), self.port)
        } else if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The address without the password, as every message shows it:
    /// `postgres://user@host:port/db?spool=NAME`.
    pub fn display(&self) -> String {
        let mut s = format!("postgres://{}@", percent_encode(&self.user));
        let mut params = Vec::new();
        if self.is_unix_socket() {
            params.push(format!("host={}", self.host));
            if self.port != 5432 {
                params.push(format!("port={}", self.port));
            }
        } else if self.host.contains(':') {
            s.push_str(&format!("[{}]:{}", self.host, self.port));
        } else {
            s.push_str(&format!("{}:{}", self.host, self.port));
        }
        s.push('/');
        s.push_str(&percent_encode(&self.dbname));
        params.push(format!("spool={}", percent_encode(&self.spool)));
        if self.schema != DEFAULT_SCHEMA {
            params.push(format!("schema={}", percent_encode(&self.schema)));
        }
        s.push('?');
        s.push_str(&params.join("&"));
        s
    }

    /// The driver's configuration.
    pub fn config(&self) -> postgres::Config {
        let mut c = postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name(&self.application_name)
            .connect_timeout(self.connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(60));
        if let Some(p) = &self.password {
            c.password(p);
        }
        c.ssl_mode(match (self.sslmode, self.is_unix_socket()) {
            (SslMode::Disable, _) | (_, true) => postgres::config::SslMode::Disable,
            (SslMode::Prefer, false) => postgres::config::SslMode::Prefer,
            (SslMode::Require, false) => postgres::config::SslMode::Require,
        });
        c
    }

    /// True when connecting may use TLS.
    pub fn uses_tls(&self) -> bool {
        self.sslmode != SslMode::Disable && !self.is_unix_socket()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_strings_are_recognised_and_given_as_urls() {
        let s = "host=/tmp/pg user=postgres dbname=ops password='se cr\\'et'";
        let pairs = libpq_key_values(s).unwrap();
        assert_eq!(pairs[3], ("password".to_string(), "se cr'et".to_string()));
        let hint = libpq_hint(s).unwrap();
        assert!(
            hint.contains("postgres://postgres@/ops?host=/tmp/pg&spool=default"),
            "{hint}"
        );
        assert!(
            !hint.contains("se cr") && hint.contains("PGPASSWORD"),
            "{hint}"
        );
        assert_eq!(
            redact(s),
            "host=/tmp/pg user=postgres dbname=ops password=***"
        );
        let hint = libpq_hint(
            "host = db.internal port=6432 user=app dbname=ops sslmode=require options=-cx",
        )
        .unwrap();
        assert!(
            hint.contains("postgres://app@db.internal:6432/ops?sslmode=require&spool=default"),
            "{hint}"
        );
        assert!(hint.contains("not carried over: options"), "{hint}");
        for not in [
            "spool.db",
            "a=b",
            "x y",
            "/var/spool/host=a.db",
            "host='open",
        ] {
            assert!(libpq_hint(not).is_none(), "{not}");
        }
        assert_eq!(redact("spool.db"), "spool.db");
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_full_url() {
        let t = PgTarget::parse_with_env(
            "postgres://ann:s3cr%40t@db.example:6543/app?spool=orders&schema=q&sslmode=require",
            &no_env,
        )
        .unwrap();
        assert_eq!(t.host, "db.example");
        assert_eq!(t.port, 6543);
        assert_eq!(t.user, "ann");
        assert_eq!(t.password.as_deref(), Some("s3cr@t"));
        assert_eq!(t.dbname, "app");
        assert_eq!(t.spool, "orders");
        assert_eq!(t.schema, "q");
        assert_eq!(t.sslmode, SslMode::Require);
        assert_eq!(
            t.display(),
            "postgres://ann@db.example:6543/app?spool=orders&schema=q"
        );
        assert!(!format!("{t:?}").contains("s3cr"));
    }

    #[test]
    fn fallbacks_and_defaults() {
        let env = |k: &str| match k {
            "PGHOST" => Some("/run/pg".to_string()),
            "PGUSER" => Some("bob".to_string()),
            "PGPASSWORD" => Some("pw".to_string()),
            _ => None,
        };
        let t = PgTarget::parse_with_env("postgresql://", &env).unwrap();
        assert_eq!(t.host, "/run/pg");
        assert_eq!(t.port, 5432);
        assert_eq!(t.user, "bob");
        assert_eq!(t.dbname, "bob");
        assert_eq!(t.spool, "default");
        assert_eq!(t.schema, "spool");
        assert_eq!(t.password.as_deref(), Some("pw"));
        assert!(t.is_unix_socket());
        assert_eq!(t.server(), "/run/pg/.s.PGSQL.5432");
        assert!(!t.uses_tls());
    }

    #[test]
    fn socket_directories_in_the_query_or_escaped() {
        let t = PgTarget::parse_with_env("postgresql:///db?host=/tmp/x&user=u", &no_env).unwrap();
        assert_eq!((t.host.as_str(), t.dbname.as_str()), ("/tmp/x", "db"));
        assert_eq!(t.display(), "postgres://u@/db?host=/tmp/x&spool=default");
        let t = PgTarget::parse_with_env("postgres://u@%2Ftmp%2Fy/db", &no_env).unwrap();
        assert_eq!(t.host, "/tmp/y");
    }

    #[test]
    fn unknown_parameters_and_modes_are_refused() {
        for url in [
            "postgres://h/db?spol=x",
            "postgres://h/db?sslmode=verify-full",
            "postgres://h:99999/db",
            "postgres://a,b/db",
            "postgres://h/db?spool=",
        ] {
            assert!(PgTarget::parse_with_env(url, &no_env).is_err(), "{url}");
        }
    }

    #[test]
    fn redaction() {
        assert_eq!(
            redact("postgres://u:hunter2@h/db"),
            "postgres://u@h:5432/db?spool=default"
        );
        assert_eq!(redact("/tmp/q.db"), "/tmp/q.db");
        assert!(!redact("postgres://u:hunter2@h/db?bad=1").contains("hunter2"));
        assert!(is_postgres_url("PostgreSQL://x"));
        assert!(!is_postgres_url("postgres.db"));
    }
}
