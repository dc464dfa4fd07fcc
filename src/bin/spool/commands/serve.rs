//! `spool serve`: receive pushes (and single payloads) over HTTP(S).

use super::signals::Signals;
use super::{Ctx, Verbosity};
use crate::exit::CliError;
use clap::Args;
use spool::ops::watch::Level;
use spool::serve::{auth, ServeEvent, ServeLog, ServeOptions, ServeStop, Server, TlsFiles, Tokens};
use spool::units::{parse_duration, parse_size};
use spool::{Error, OpenMode};
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Receive pushes from other spools, and single payloads, over HTTP(S)
///
/// The receiver of `spool replay --push`: what it receives is stored in
/// the spool given by -s (created when missing). Endpoints:
///   POST /v1/push        a batch from an edge spool, each entry applied
///                        exactly once (200; 409 gap; 503 full)
///   POST /v1/items       body = one payload, Idempotency-Key = its key,
///                        Spool-Group and Spool-Coalesce-Key its group and
///                        coalesce key: 201 {"id", "deduplicated": false};
///                        200 on a dedup hit; 503 when the spool is full
///   GET  /v1/clients/ID  {"last_seq", "rejected"} of one client
///   GET  /healthz        200 when the spool can be read
///   GET  /metrics        Prometheus text: spool gauges, server series
///
/// Every answer is sent after its data is committed; concurrent requests
/// share one commit. 503 answers carry Retry-After: 5.
///
/// Security: without --listen it serves 127.0.0.1:8787 only. A
/// non-loopback address needs --token-file (or --insecure-no-auth, with
/// a warning). A token file has one token per line (at least 16
/// characters), optionally followed by name=NAME (for the access log;
/// default: the first 8 hex digits of the token's SHA-256) and the
/// client ids (globs with * and ?) it may push as; # starts a comment
/// line. Requests send `Authorization: Bearer TOKEN`: a missing or wrong
/// token is 401, pushing as a client the token may not is 403. Every
/// endpoint but /healthz needs a token when a token file is in use.
/// Without --token-file, the systemd credential spool-serve-tokens
/// ($CREDENTIALS_DIRECTORY/spool-serve-tokens, from LoadCredential=) is
/// used. Tokens never appear in logs.
///
/// Refused with exit 78: $CREDENTIALS_DIRECTORY set without a readable
/// spool-serve-tokens in it, a token shorter than 16 characters, the same
/// token on two lines. A token file or TLS key readable by group or
/// others is a warning.
///
/// Keys are scoped per sender: a pushed key is stored as
/// CLIENT_ID:KEY, a /v1/items key as TOKEN_NAME:KEY (name=NAME on the
/// token's line, else the first 8 hex digits of the token's SHA-256; the
/// key as given without --token-file), so one client can never make
/// another's item vanish by sending its key first. The stored key is
/// also the Idempotency-Key the receiving spool sends downstream.
/// --shared-keys keeps one key space for every sender. A key holding a
/// NUL byte is refused (a rejected entry; 400 on /v1/items).
///
/// Limits: --max-body bounds a body as received and once decompressed
/// (Content-Encoding: gzip), --max-payload one payload, --max-entries
/// the entries of one push; over any is 413. What all requests hold at
/// once (bodies, inflated bodies, parsed entries) stays under
/// --memory-budget: a request that would go over it is 503 with
/// Retry-After. A request head must arrive within --header-timeout
/// (also how long an idle keep-alive connection stays open), its body
/// within --request-timeout (408). At most --max-connections are open,
/// at most --max-connections-per-peer from one address (more are closed
/// at once). /metrics and /healthz answer from a snapshot of the
/// spool's state taken at most once a second.
///
/// Console: with --console, a browser view of the spool is served at
/// /console/ (counts, the last hour's depth and delivery rate, the shape
/// table, the lists with filters, an item's detail, the push clients).
/// With a token file, a browser logs in once with any token and keeps a
/// session cookie; only a token with role=admin on its line may act
/// (hold, release, requeue, purge dead letters, mark done; at most 1,000
/// items per action, confirmed with the count), and every action is
/// logged with the token's name. Without a token file the console is
/// read-only, and --console is refused on a non-loopback address.
///
/// Prints `listening on http(s)://ADDR` on stdout once ready (with the
/// real port for --listen 127.0.0.1:0); nothing is created when the
/// address cannot be bound. With -v, one access line per request on
/// stderr, naming the token by its name. SIGTERM or SIGINT: stop
/// accepting, finish and commit the requests in flight, exit 0. Only one
/// serve may run on an NDJSON spool (a second exits 75 naming the
/// holder); several may share a SQLite spool.
///
/// Examples:
///   spool -s /var/spool/central.db serve
///   spool -s central.db serve --listen 0.0.0.0:8787 \
///       --token-file /etc/spool/tokens \
///       --tls-cert /etc/spool/cert.pem --tls-key /etc/spool/key.pem
///   curl -H 'Idempotency-Key: order-7' --data-binary @event.json \
///       http://127.0.0.1:8787/v1/items
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// Address to listen on: IP:PORT or HOST:PORT (port 0: any free port)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787", value_parser = parse_listen)]
    listen: SocketAddr,

    /// Accept only requests bearing a token from FILE
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,

    /// Serve HTTPS with this PEM certificate chain (needs --tls-key)
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The PEM private key for --tls-cert
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Largest request body, as sent and once decompressed
    #[arg(long, value_name = "SIZE", default_value = "8MiB", value_parser = parse_size)]
    max_body: u64,

    /// Largest payload (a push entry over it is rejected; an item is 413)
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size)]
    max_payload: u64,

    /// Most entries in one push request (more is 413: send smaller batches)
    #[arg(long, value_name = "N", default_value_t = 10_000, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 10_000))]
    max_entries: u32,

    /// Memory that all requests may hold at once (over it: 503 + Retry-After)
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    memory_budget: u64,

    /// Serve the browser console at /console/ (read-only without --token-file)
    #[arg(long)]
    console: bool,

    /// Listen on a non-loopback address without tokens (trusted networks only)
    #[arg(long)]
    insecure_no_auth: bool,

    /// One key space for every client and token: keys are stored as sent
    ///
    /// By default a pushed key is stored as CLIENT_ID:KEY and a /v1/items
    /// key as TOKEN_NAME:KEY, so that a key from one sender never
    /// deduplicates another sender's item. With --shared-keys they are
    /// stored as sent: any sender's key deduplicates any other's (for
    /// deployments that want cross-client dedup and trust every sender).
    #[arg(long)]
    shared_keys: bool,

    /// Time for a request head to arrive; also the keep-alive idle limit
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    header_timeout: Duration,

    /// Time for a request body to arrive after its head
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    request_timeout: Duration,

    /// Most connections open at once (more wait to be accepted)
    #[arg(long, value_name = "N", default_value_t = 512, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 512))]
    max_connections: u32,

    /// Most connections open at once from one IP address (more are closed)
    #[arg(long, value_name = "N", default_value_t = 32, allow_negative_numbers = true, value_parser = crate::whole::Whole::<u32>::at_least(1, 32))]
    max_connections_per_peer: u32,

    /// Sleep this long in every commit (simulates a slow disk; tests, benchmarks)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, hide = true)]
    commit_delay: Option<Duration>,
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.to_socket_addrs()
        .map_err(|e| format!("{s:?} is not an address to listen on (IP:PORT or HOST:PORT): {e}"))?
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

/// Log lines on stderr: `<time> <level>: <message>`, or one JSON object
/// per line with `--json`.
struct StderrLog {
    verbosity: Verbosity,
    json: bool,
}

impl StderrLog {
    fn shown(&self, level: Level) -> bool {
        match self.verbosity {
            Verbosity::Quiet => level >= Level::Warn,
            Verbosity::Normal => level >= Level::Info,
            Verbosity::Verbose => true,
        }
    }

    fn line(&self, level: Level, event: &str, message: &str) {
        if !self.shown(level) {
            return;
        }
        let now = spool::Timestamp::now();
        let line = if self.json {
            serde_json::json!({
                "time": now.to_rfc3339(),
                "level": level.name(),
                "event": event,
                "message": message,
            })
            .to_string()
        } else {
            format!("{} {}: {message}", now.to_rfc3339(), level.name())
        };
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}

impl ServeLog for StderrLog {
    fn log(&self, e: &ServeEvent<'_>) {
        let level = e.level();
        if !self.shown(level) {
            return;
        }
        match e {
            ServeEvent::Access(a) if self.json => {
                let line = serde_json::json!({
                    "time": spool::Timestamp::now().to_rfc3339(),
                    "level": level.name(),
                    "event": "access",
                    "peer": a.peer.to_string(),
                    "method": a.method,
                    "path": a.path,
                    "status": a.status,
                    "ms": a.took.as_secs_f64() * 1000.0,
                    "bytes_in": a.bytes_in,
                    "client": a.client,
                    "token": a.token,
                    "error": a.error,
                });
                let _ = writeln!(std::io::stderr().lock(), "{line}");
            }
            _ => {
                let name = match e {
                    ServeEvent::Access(_) => "access",
                    ServeEvent::StorageError { .. } => "storage_error",
                    ServeEvent::ReadError(_) => "read_error",
                    ServeEvent::Connection { .. } => "connection",
                    ServeEvent::AcceptError(_) => "accept_error",
                    ServeEvent::Stopping { .. } => "stopping",
                    ServeEvent::Abandoned { .. } => "abandoned",
                    ServeEvent::ConsoleAction(_) => "console_action",
                    _ => "event",
                };
                self.line(level, name, &e.to_string());
            }
        }
    }
}

/// SIGINT/SIGTERM: the first stops the server cleanly. One that comes
/// more than a second later exits at once (130/143).
fn install_signals(stop: ServeStop, log: Arc<StderrLog>) -> Result<(), CliError> {
    let first = log.clone();
    Signals::handle(
        move |name| {
            first.line(Level::Info, "signal", &format!("received {name}"));
            stop.stop();
        },
        Some(Box::new(move |name| {
            log.line(
                Level::Warn,
                "signal",
                &format!("received {name} again: exiting now"),
            );
        })),
    )?;
    Ok(())
}

fn failed(ctx: &Ctx, e: Error) -> CliError {
    let hint = match &e {
        Error::Config { hint, .. } => Some(hint.clone()),
        Error::ServeLocked { .. } => Some(
            "stop the other `spool serve` first; several servers may share a SQLite spool, not an NDJSON one"
                .to_string(),
        ),
        Error::Io { action, .. } if *action == "listen on" => Some(
            "another process may be listening there; choose another --listen address (nothing was created)"
                .to_string(),
        ),
        _ => None,
    };
    let err = ctx.fail("serve", e);
    match hint {
        Some(h) => err.hint(h),
        None => err,
    }
}

pub fn run(args: ServeArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let token_file = match args.token_file {
        Some(f) => Some(f),
        None => auth::credential_token_file(
            std::env::var_os("CREDENTIALS_DIRECTORY")
                .as_deref()
                .map(std::path::Path::new),
        )
        .map_err(|e| failed(ctx, e))?,
    };
    let tokens = match &token_file {
        Some(f) => Some(Tokens::load(f).map_err(|e| failed(ctx, e))?),
        None => None,
    };
    let opts = ServeOptions {
        listen: args.listen,
        tokens,
        insecure_no_auth: args.insecure_no_auth,
        shared_keys: args.shared_keys,
        tls: match (args.tls_cert, args.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            _ => None,
        },
        max_body: args.max_body,
        max_payload: args.max_payload,
        max_entries: args.max_entries as usize,
        memory_budget: args.memory_budget,
        header_timeout: args.header_timeout,
        request_timeout: args.request_timeout,
        max_connections: args.max_connections as usize,
        max_connections_per_peer: args.max_connections_per_peer as usize,
        commit_delay: args.commit_delay.unwrap_or_default(),
        console: args.console,
        ..ServeOptions::default()
    };
    if let Some(f) = &token_file {
        ctx.detail(&format!(
            "{} token(s) from {}",
            opts.tokens.as_ref().map_or(0, Tokens::len),
            f.display()
        ));
    }
    // Every option is checked, and the socket bound, before the spool is
    // created or opened: a server that cannot start leaves nothing.
    let warnings = opts.warnings();
    let open_without_tokens = opts.tokens.is_none()
        && !opts.insecure_no_auth
        && !opts.listen.ip().to_canonical().is_loopback();
    let listening = Server::listen(opts).map_err(|e| {
        let refused = matches!(e, Error::Unsupported(_)) && open_without_tokens;
        let err = failed(ctx, e);
        if refused {
            err.hint(
                "give --token-file FILE (one token per line), or --insecure-no-auth on a trusted network",
            )
        } else {
            err
        }
    })?;
    for w in warnings {
        ctx.note(&format!("warning: {w}"));
    }
    let log = Arc::new(StderrLog {
        verbosity: ctx.verbosity,
        json: ctx.json,
    });
    let stop = ServeStop::new();
    install_signals(stop.clone(), log.clone())?;
    let spool = ctx.open(OpenMode::Create, "serve")?;
    let server = listening.attach(spool).map_err(|e| failed(ctx, e))?;
    if ctx.json {
        ctx.out
            .json(&serde_json::json!({"listening_on": server.url()}))?;
    } else {
        ctx.out.line(&format!("listening on {}", server.url()))?;
        if args.console {
            ctx.note(&format!("console: {}/console/", server.url()));
        }
    }
    ctx.out.flush()?;
    let report = server.run(&stop, log).map_err(|e| failed(ctx, e))?;
    let c = report.counters;
    ctx.note(&format!(
        "stopped after {} request(s) on {} connection(s); {} commit(s) for {} request(s)",
        c.requests, report.connections, c.commits, c.committed_requests
    ));
    Ok(())
}
