//! `spool serve`: the push receiver (SPEC §7) over HTTP(S).
//!
//! The protocol lives in [`crate::push`]; this module only moves bytes
//! between sockets and the receiving spool, and guards the door.
//!
//! # Design
//!
//! * **One writer thread owns the spool.** [`Server::run`] moves the
//!   [`Spool`] into a `std::thread` that is the only code touching it.
//!   HTTP handlers run on a small tokio runtime; each sends the writer a
//!   job with a oneshot reply channel and awaits it.
//! * **Group commit.** The writer takes the first job and every job
//!   already queued behind it — without waiting for more, so a lone
//!   request is never delayed — runs them all in one
//!   [`crate::Queue::receive`] transaction, commits once, and then answers
//!   each. Throughput grows with the number of concurrent clients while a
//!   single client sees one commit per request. A failed transaction
//!   commits nothing and answers every request of its group with 503
//!   (busy) or 500. A 2xx is sent only after the commit returned: the
//!   SQLite backend commits with `synchronous=FULL`, the NDJSON backend
//!   fsyncs.
//! * **Limits while reading.** Bodies are read frame by frame and cut off
//!   at [`ServeOptions::max_body`] (413); gzip bodies are inflated only
//!   after authentication, and cut off at `max_body` once inflated too;
//!   payloads are bounded by [`ServeOptions::max_payload`], the entries
//!   of one push by [`ServeOptions::max_entries`] (413), so that no single
//!   request holds the writer for long. The request head must arrive
//!   within [`ServeOptions::header_timeout`] (this also closes idle
//!   keep-alive connections), the body within
//!   [`ServeOptions::request_timeout`] (408), a TLS handshake within the
//!   header timeout.
//! * **Connections.** At most [`ServeOptions::max_connections`] are open
//!   (more wait in the listen backlog), and at most
//!   [`ServeOptions::max_connections_per_peer`] from one IP address (more
//!   are closed at once), so that idle sockets of one peer cannot take
//!   every slot.
//! * **Memory.** What requests hold — bodies as received, as inflated,
//!   and parsed push entries — counts against one budget shared by all
//!   requests, [`ServeOptions::memory_budget`]: a request that would go
//!   over it is answered 503 with `Retry-After` (413 when it alone needs
//!   more than the whole budget). A gzip body reserves what it has
//!   inflated so far, not its limit.
//! * **The spool's state** for `/metrics` and `/healthz` is a snapshot
//!   computed on a second, read-only handle of the spool
//!   ([`Spool::reader`]), never on the writer thread, at most once per
//!   [`SNAPSHOT_MAX_AGE`] however many requests ask for it.
//! * **Authentication** ([`auth`]): bearer tokens compared in constant
//!   time; a token may be limited to client-id globs, and has a name for
//!   the access log. A non-loopback address without tokens is refused
//!   unless [`ServeOptions::insecure_no_auth`]; what is allowed but
//!   unwise is listed by [`ServeOptions::warnings`].
//! * **Binding first.** [`Server::listen`] checks the options and binds
//!   the socket before any spool is opened, so that a server that cannot
//!   start (a port in use) creates nothing; [`Listening::attach`] then
//!   takes the spool.
//! * **Stopping.** [`ServeStop::stop`] closes the listening socket, lets
//!   every request in flight finish (its commit included) and closes idle
//!   connections; [`Server::run`] returns once the writer has committed
//!   the last job, bounded by the request timeout plus five seconds.
//! * **One server per NDJSON spool** ([`lock`]); any number on SQLite.
//!
//! The library never prints: what happens goes to a [`ServeLog`], which
//! the command line renders on stderr (access lines with `-v`).
//!
//! # Endpoints
//!
//! | request | answer |
//! |---|---|
//! | `POST /v1/push` | §7: 200 with `last_seq`, `rejected`, `applied`, `duplicates`; 409 gap or reused number (with `last_seq`); 503 + `Retry-After` full |
//! | `POST /v1/items` | body = payload, `Idempotency-Key` = key: 201 `{"id": N, "deduplicated": false}`, 200 on a dedup hit, 503 + `Retry-After` full, 413 over `max_payload` |
//! | `GET /v1/clients/{id}` | `{"last_seq": N, "rejected": [...]}` (0 and `[]` for a client never seen; 400 for an invalid id) |
//! | `GET /healthz` | 200 `{"status": "ok", "depth": N}` when the spool reads, 503 otherwise; no token needed |
//! | `GET /metrics` | Prometheus text ([`metrics`]); a valid token when tokens are configured |
//!
//! `HEAD` is answered wherever `GET` is, without the body. Other paths
//! are 404, other methods 405; every error body is
//! `{"error": "…"}`. `Retry-After` is [`ServeOptions::retry_after`]
//! (default 5 s).
//!
//! ```no_run
//! use spool::serve::{ServeOptions, ServeStop, Server};
//! use spool::{OpenOptions, Spool};
//! use std::sync::Arc;
//!
//! let spool = Spool::open("central.db".as_ref(), &OpenOptions::default())?;
//! let server = Server::bind(spool, ServeOptions::default())?;
//! println!("listening on {}", server.url());
//! let stop = ServeStop::new(); // call stop.stop() from a signal handler
//! let report = server.run(&stop, Arc::new(|_: &spool::serve::ServeEvent<'_>| {}))?;
//! println!("{} requests", report.counters.requests);
//! # Ok::<(), spool::Error>(())
//! ```

pub mod auth;
pub mod console;
pub(crate) mod http;
pub mod lock;
pub mod metrics;
pub mod tls;
mod writer;

pub use self::auth::{Grant, Tokens};
pub use self::lock::ServeLock;
pub use self::metrics::ServeCounters;
pub use self::tls::TlsFiles;
pub use self::writer::{MAX_GROUP_BYTES, MAX_GROUP_REQUESTS};

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::ops::watch::Level;
use crate::push::receiver::{ReceiveLimits, DEFAULT_MAX_KEY_LEN};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};

/// The default address: loopback only.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8787);

/// The default `--max-body`: 8 MiB, on the body as received and once
/// decompressed.
pub const DEFAULT_MAX_BODY: u64 = 8 << 20;

/// The default `--memory-budget`: 256 MiB for what all requests hold at
/// once (bodies as received and inflated, parsed entries).
pub const DEFAULT_MEMORY_BUDGET: u64 = 256 << 20;

/// The default `--max-entries`: entries in one push request. Five times
/// the sender's default `--batch`; applying it takes the writer a few
/// tens of milliseconds, so no request holds up the others for long.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;

/// The default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// The default `--max-connections-per-peer`.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 32;

/// The default `--header-timeout`, also the idle limit of a keep-alive
/// connection.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The oldest a snapshot of the spool's state may be when `/metrics` or
/// `/healthz` answers from it: at most one computation a second, however
/// many requests ask.
pub const SNAPSHOT_MAX_AGE: Duration = Duration::from_secs(1);

/// How many jobs may wait for the writer before handlers wait to queue.
const JOB_QUEUE: usize = 1024;

/// How `spool serve` serves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Where to listen (port 0: any free port; see [`Server::local_addr`]).
    pub listen: SocketAddr,
    /// The accepted bearer tokens; `None`: no authentication.
    pub tokens: Option<Tokens>,
    /// Allow a non-loopback `listen` without tokens.
    pub insecure_no_auth: bool,
    /// Serve HTTPS with these PEM files.
    pub tls: Option<TlsFiles>,
    /// Largest request body, as received and once decompressed.
    pub max_body: u64,
    /// Largest payload: a push entry's (refused as rejected when over) or
    /// a `/v1/items` body (413 when over).
    pub max_payload: u64,
    /// Longest idempotency key, in bytes.
    pub max_key_len: usize,
    /// Most entries in one push request (413 when over).
    pub max_entries: usize,
    /// Bytes that all requests together may hold at once: bodies as
    /// received and inflated, parsed entries (503 when over).
    pub memory_budget: u64,
    /// Keep one key space for all senders (`--shared-keys`) instead of
    /// storing a pushed key as `<client_id>:<key>` and a `/v1/items` key
    /// as `<token name>:<key>` (see [`crate::push::receiver::scoped_key`]).
    pub shared_keys: bool,
    /// Time for a request head to arrive, also the longest a keep-alive
    /// connection may sit idle, and the TLS handshake's bound.
    pub header_timeout: Duration,
    /// Time for a request body to arrive once its head has (408 after).
    pub request_timeout: Duration,
    /// The `Retry-After` of 503 answers (whole seconds, at least 1).
    pub retry_after: Duration,
    /// Most connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Most connections open at once from one IP address; more are
    /// closed as soon as they are accepted.
    pub max_connections_per_peer: usize,
    /// Sleep this long inside every write transaction: a slow disk, for
    /// tests and benchmarks of group commit. Zero in production.
    pub commit_delay: Duration,
    /// Serve the console under `/console/` (`--console`; see
    /// [`console`]). Without tokens it is read-only, and only allowed on a
    /// loopback address.
    pub console: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: DEFAULT_LISTEN,
            tokens: None,
            insecure_no_auth: false,
            tls: None,
            max_body: DEFAULT_MAX_BODY,
            max_payload: crate::ops::input::DEFAULT_MAX_PAYLOAD,
            max_key_len: DEFAULT_MAX_KEY_LEN,
            max_entries: DEFAULT_MAX_ENTRIES,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            shared_keys: false,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            request_timeout: Duration::from_secs(60),
            retry_after: Duration::from_secs(5),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            commit_delay: Duration::ZERO,
            console: false,
        }
    }
}

impl ServeOptions {
    /// Check the options without touching a spool or a socket, and load
    /// the TLS files: [`Error::Unsupported`] (a usage error) for a
    /// non-loopback `listen` without tokens and without
    /// `insecure_no_auth`, a zero limit, or a `max_body` over the
    /// `memory_budget` (such a body could never be served); the TLS
    /// files' errors. [`Server::listen`] calls it; a caller may call it
    /// first.
    pub fn check(&self) -> Result<Option<Arc<rustls::ServerConfig>>> {
        if !is_loopback(self.listen.ip()) && self.tokens.is_none() && !self.insecure_no_auth {
            return Err(Error::Unsupported(format!(
                "refusing to listen on {} without tokens: anyone who can reach it could push \
                 into the spool (give --token-file, or --insecure-no-auth on a trusted network)",
                self.listen
            )));
        }
        if self.console && self.tokens.is_none() && !is_loopback(self.listen.ip()) {
            return Err(Error::Unsupported(format!(
                "refusing to serve the console on {} without tokens: anyone who can reach it \
                 could read the spool's payloads (give --token-file, or listen on a loopback \
                 address)",
                self.listen
            )));
        }
        for (what, v) in [
            ("the header timeout", self.header_timeout.as_millis() as u64),
            (
                "the request timeout",
                self.request_timeout.as_millis() as u64,
            ),
            ("the body limit", self.max_body),
            ("the payload limit", self.max_payload),
            ("the connection limit", self.max_connections as u64),
            (
                "the per-peer connection limit",
                self.max_connections_per_peer as u64,
            ),
            ("the entry limit", self.max_entries as u64),
            ("the memory budget", self.memory_budget),
        ] {
            if v == 0 {
                return Err(Error::Unsupported(format!("{what} must be at least 1")));
            }
        }
        if self.max_body > self.memory_budget {
            return Err(Error::Unsupported(format!(
                "the body limit ({} bytes) is over the memory budget ({} bytes): a body that \
                 large could never be served; raise --memory-budget or lower --max-body",
                self.max_body, self.memory_budget
            )));
        }
        self.tls.as_ref().map(tls::server_config).transpose()
    }

    /// What these options allow but an operator should know is unwise,
    /// one line each: a token file or TLS key that group or others may
    /// read, a non-loopback address served without authentication.
    pub fn warnings(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .tokens
            .as_ref()
            .map(|t| t.warnings().to_vec())
            .unwrap_or_default();
        if let Some(t) = &self.tls {
            out.extend(auth::loose_permissions(
                &t.key,
                "TLS key",
                "whoever can read it can impersonate this server",
            ));
        }
        if self.tokens.is_none() && !is_loopback(self.listen.ip()) {
            out.push(format!(
                "serving {} without authentication (--insecure-no-auth): anyone who can reach \
                 it can push into the spool and read its metrics",
                self.listen
            ));
        }
        out
    }
}

/// Stops a running server from another thread (a signal handler).
/// Cheap to clone; stopping is idempotent.
#[derive(Clone, Debug)]
pub struct ServeStop {
    tx: Arc<watch::Sender<bool>>,
}

impl Default for ServeStop {
    fn default() -> Self {
        ServeStop::new()
    }
}

impl ServeStop {
    /// A switch that is not stopped.
    pub fn new() -> ServeStop {
        let (tx, _) = watch::channel(false);
        ServeStop { tx: Arc::new(tx) }
    }

    /// Stop accepting, finish what is in flight, return from
    /// [`Server::run`].
    pub fn stop(&self) {
        self.tx.send_replace(true);
    }

    /// True once [`ServeStop::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        *self.tx.borrow()
    }
}

/// One answered request, for the access log. Never holds a token or a
/// query string.
#[derive(Clone, Debug)]
pub struct Access<'a> {
    /// The peer's address.
    pub peer: SocketAddr,
    /// The request method, cut at 32 bytes.
    pub method: &'a str,
    /// The request path (without the query), cut at 200 bytes.
    pub path: &'a str,
    /// The answer's status.
    pub status: u16,
    /// Time from the request head to the answer.
    pub took: Duration,
    /// Body bytes read (as received).
    pub bytes_in: u64,
    /// The client id the request named, if any.
    pub client: Option<&'a str>,
    /// The name of the token the request presented, when it was valid.
    pub token: Option<&'a str>,
    /// The error the answer carried, if any.
    pub error: Option<&'a str>,
}

/// An action taken in the console, for the server's log.
#[derive(Clone, Debug)]
pub struct ConsoleAction<'a> {
    /// The name of the token whose session acted.
    pub token: &'a str,
    /// What was done: `hold`, `release`, `requeue`, `purge`, `mark done`.
    pub action: &'a str,
    /// Items the operator confirmed.
    pub requested: usize,
    /// The items it changed.
    pub changed: &'a [crate::item::ItemId],
    /// Items that were no longer there (another process moved them).
    pub gone: usize,
}

/// Something that happened in a server.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeEvent<'a> {
    /// An operator acted in the console.
    ConsoleAction(&'a ConsoleAction<'a>),
    /// A request was answered.
    Access(&'a Access<'a>),
    /// A write transaction (or a read) failed; its requests were answered
    /// 503 or 500 and nothing of them was committed.
    StorageError {
        /// Requests in the failed group.
        requests: usize,
        /// What failed.
        error: &'a Error,
    },
    /// Reading the spool's state for `/metrics` or `/healthz` failed; the
    /// request was answered 503.
    ReadError(&'a Error),
    /// A connection ended with an error before or between requests (a
    /// header timeout, a reset, a failed TLS handshake).
    Connection {
        /// The peer.
        peer: SocketAddr,
        /// What happened.
        error: String,
    },
    /// Accepting a connection failed (out of file descriptors, say); the
    /// server goes on after a short pause.
    AcceptError(&'a std::io::Error),
    /// Stop was requested: the listening socket is closed and
    /// `connections` connections are being finished.
    Stopping {
        /// Connections still open.
        connections: usize,
    },
    /// Connections that did not finish within the shutdown bound were
    /// dropped (their requests, if any, were not answered).
    Abandoned {
        /// How many.
        connections: usize,
    },
}

impl ServeEvent<'_> {
    /// How much an operator cares: access lines and connection errors
    /// are details, the rest info or warnings.
    pub fn level(&self) -> Level {
        match self {
            ServeEvent::Access(a) if a.status >= 500 => Level::Warn,
            ServeEvent::Access(_) | ServeEvent::Connection { .. } => Level::Detail,
            ServeEvent::Stopping { .. } | ServeEvent::ConsoleAction(_) => Level::Info,
            ServeEvent::StorageError { .. }
            | ServeEvent::ReadError(_)
            | ServeEvent::AcceptError(_)
            | ServeEvent::Abandoned { .. } => Level::Warn,
        }
    }
}

impl fmt::Display for ServeEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeEvent::Access(a) => {
                write!(
                    f,
                    "{} {} {} {} {}ms {}B",
                    a.peer,
                    a.method,
                    a.path,
                    a.status,
                    a.took.as_millis(),
                    a.bytes_in
                )?;
                if let Some(c) = a.client {
                    write!(f, " client={c}")?;
                }
                if let Some(t) = a.token {
                    write!(f, " token={t}")?;
                }
                if let Some(e) = a.error {
                    write!(f, " error={e:?}")?;
                }
                Ok(())
            }
            ServeEvent::ConsoleAction(a) => {
                write!(
                    f,
                    "console: token {} {} {} of {} item(s)",
                    a.token,
                    a.action,
                    a.changed.len(),
                    a.requested
                )?;
                if a.gone > 0 {
                    write!(f, " ({} gone)", a.gone)?;
                }
                let ids: Vec<String> = a.changed.iter().take(20).map(|i| i.to_string()).collect();
                if !ids.is_empty() {
                    write!(
                        f,
                        ": ids {}{}",
                        ids.join(","),
                        if a.changed.len() > 20 { ",…" } else { "" }
                    )?;
                }
                Ok(())
            }
            ServeEvent::StorageError { requests, error } => write!(
                f,
                "a write transaction of {requests} request(s) failed, nothing of it was committed: {error}"
            ),
            ServeEvent::ReadError(error) => write!(f, "cannot read the spool's state: {error}"),
            ServeEvent::Connection { peer, error } => write!(f, "connection from {peer}: {error}"),
            ServeEvent::AcceptError(e) => write!(f, "cannot accept a connection: {e}"),
            ServeEvent::Stopping { connections } => write!(
                f,
                "stopping: no new connections; finishing {connections} open connection(s)"
            ),
            ServeEvent::Abandoned { connections } => write!(
                f,
                "{connections} connection(s) did not finish in time and were dropped"
            ),
        }
    }
}

/// Where a server's events go.
pub trait ServeLog: Send + Sync {
    /// Record one event.
    fn log(&self, event: &ServeEvent<'_>);
}

impl<F: Fn(&ServeEvent<'_>) + Send + Sync> ServeLog for F {
    fn log(&self, event: &ServeEvent<'_>) {
        self(event)
    }
}

/// What a server did, once it stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeReport {
    /// Its counters (also on `/metrics`).
    pub counters: ServeCounters,
    /// Connections accepted.
    pub connections: u64,
}

/// A listening socket that has no spool yet ([`Server::listen`]).
pub struct Listening {
    opts: ServeOptions,
    listener: std::net::TcpListener,
    local: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl fmt::Debug for Listening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listening")
            .field("local", &self.local)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Listening {
    /// The address the socket is bound to (the real port for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serve `spool` on this socket: take the NDJSON serve lock
    /// ([`Error::ServeLocked`] when another server holds it) and open the
    /// second, read-only handle for `/metrics` and `/healthz`
    /// ([`Spool::reader`]).
    pub fn attach(self, spool: Spool) -> Result<Server> {
        let lock = match &spool {
            Spool::File(q) => Some(ServeLock::acquire(q.path())?),
            _ => None,
        };
        let reader = spool.reader()?;
        Ok(Server {
            spool,
            reader,
            opts: self.opts,
            listener: self.listener,
            local: self.local,
            tls: self.tls,
            _lock: lock,
        })
    }
}

/// A bound, not yet running server.
pub struct Server {
    spool: Spool,
    reader: Option<Spool>,
    opts: ServeOptions,
    listener: std::net::TcpListener,
    local: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    _lock: Option<ServeLock>,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("spool", &self.spool.path())
            .field("local", &self.local)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// True for addresses only this machine can reach.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

impl Server {
    /// Check `opts` ([`ServeOptions::check`]: [`Error::Unsupported`] for a
    /// non-loopback address without tokens and without
    /// `insecure_no_auth`, the TLS files' errors) and bind the listening
    /// socket, before any spool is opened: a server that cannot listen
    /// creates nothing.
    pub fn listen(opts: ServeOptions) -> Result<Listening> {
        let tls = opts.check()?;
        let listen_error = |e: std::io::Error| Error::io(opts.listen.to_string(), "listen on", e);
        let listener = std::net::TcpListener::bind(opts.listen).map_err(listen_error)?;
        listener.set_nonblocking(true).map_err(listen_error)?;
        let local = listener.local_addr().map_err(listen_error)?;
        Ok(Listening {
            opts,
            listener,
            local,
            tls,
        })
    }

    /// [`Server::listen`], then [`Listening::attach`] `spool`.
    pub fn bind(spool: Spool, opts: ServeOptions) -> Result<Server> {
        Server::listen(opts)?.attach(spool)
    }

    /// The address the socket is bound to (the real port for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `http://ADDR` or `https://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.local)
    }

    /// Serve until `stop`; see the module docs. Errors only when the
    /// runtime or the writer thread cannot start; failures of single
    /// requests or connections are answered and logged.
    pub fn run(self, stop: &ServeStop, log: Arc<dyn ServeLog>) -> Result<ServeReport> {
        let Server {
            spool,
            reader,
            opts,
            listener,
            tls,
            _lock,
            ..
        } = self;
        let metrics = Arc::new(metrics::Metrics::default());
        let path = spool.location();
        let (jobs, rx) = mpsc::channel(JOB_QUEUE);
        let writer = writer::Writer {
            spool,
            limits: ReceiveLimits {
                max_payload: opts.max_payload,
                max_key_len: opts.max_key_len,
                shared_keys: opts.shared_keys,
            },
            metrics: metrics.clone(),
            log: log.clone(),
            commit_delay: opts.commit_delay,
        };
        let writer = std::thread::Builder::new()
            .name("spool-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::Internal(format!("cannot start the writer thread: {e}")))?;
        // The reader is used on the blocking pool and must be dropped
        // outside the runtime too (a PostgreSQL connection blocks on its
        // own runtime when it closes): this clone outlives the runtime.
        let reader = reader.map(Arc::new);
        let budget = usize::try_from(opts.memory_budget)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        let shared = Arc::new(http::Shared {
            tokens: opts.tokens.clone(),
            max_body: opts.max_body,
            max_payload: opts.max_payload,
            max_key_len: opts.max_key_len,
            max_entries: opts.max_entries,
            request_timeout: opts.request_timeout,
            retry_after: opts.retry_after,
            jobs,
            metrics: metrics.clone(),
            log: log.clone(),
            spool: path,
            budget: Arc::new(Semaphore::new(budget)),
            budget_total: budget,
            state: http::StateCache::new(reader.clone()),
            console: opts.console.then(|| console::Console::new(tls.is_some())),
        });
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("spool-serve")
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the server runtime: {e}")))?;
        if shared.console.is_some() {
            runtime.spawn(console::sample(shared.clone(), stop.tx.subscribe()));
        }
        let served = runtime.block_on(accept_loop(
            listener,
            shared,
            tls.map(tokio_rustls::TlsAcceptor::from),
            &opts,
            stop.tx.subscribe(),
            log,
        ));
        // Whatever is still running (abandoned connections) is dropped,
        // which drops the last senders: the writer commits the jobs it
        // already has and ends.
        runtime.shutdown_timeout(Duration::from_secs(1));
        drop(reader);
        let connections = served?;
        let _spool = writer
            .join()
            .map_err(|_| Error::Internal("the writer thread panicked".into()))?;
        Ok(ServeReport {
            counters: metrics.snapshot(),
            connections,
        })
    }
}

/// Bind and serve in one call (see [`Server`]).
pub fn serve(
    spool: Spool,
    opts: ServeOptions,
    stop: &ServeStop,
    log: Arc<dyn ServeLog>,
) -> Result<ServeReport> {
    Server::bind(spool, opts)?.run(stop, log)
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    // A dropped sender also means stop.
    let _ = rx.wait_for(|s| *s).await;
}

async fn accept_loop(
    listener: std::net::TcpListener,
    shared: Arc<http::Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    opts: &ServeOptions,
    mut stop: watch::Receiver<bool>,
    log: Arc<dyn ServeLog>,
) -> Result<u64> {
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| Error::Internal(format!("cannot register the listening socket: {e}")))?;
    let graceful = GracefulShutdown::new();
    let max_connections = opts.max_connections.min(Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max_connections));
    let peers = Arc::new(Peers::new(opts.max_connections_per_peer));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_timeout)
        .max_header_size(64 << 10)
        .keep_alive(true);
    let mut accepted = 0u64;
    loop {
        let permit = tokio::select! {
            _ = stopped(&mut stop) => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = stopped(&mut stop) => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    log.log(&ServeEvent::AcceptError(&e));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        accepted += 1;
        let Some(peer_slot) = peers.take(peer.ip()) else {
            // Closed at once: its slot goes back with `permit`.
            drop(stream);
            log.log(&ServeEvent::Connection {
                peer,
                error: format!(
                    "closed at once: {} connections from this address are open already \
                     (--max-connections-per-peer)",
                    opts.max_connections_per_peer
                ),
            });
            continue;
        };
        let conn = Conn {
            peer,
            shared: shared.clone(),
            builder: builder.clone(),
            watcher: graceful.watcher(),
            log: log.clone(),
            handshake_timeout: opts.header_timeout,
        };
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _peer_slot = peer_slot;
            let _ = stream.set_nodelay(true);
            match tls {
                None => conn.serve(TokioIo::new(stream)).await,
                Some(acceptor) => {
                    match tokio::time::timeout(conn.handshake_timeout, acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(s)) => conn.serve(TokioIo::new(s)).await,
                        Ok(Err(e)) => conn.failed(format!("TLS handshake failed: {e}")),
                        Err(_) => conn.failed("TLS handshake timed out".into()),
                    }
                }
            }
        });
    }
    drop(listener);
    drop(shared);
    log.log(&ServeEvent::Stopping {
        connections: graceful.count(),
    });
    let bound = opts.request_timeout + Duration::from_secs(5);
    if tokio::time::timeout(bound, graceful.shutdown())
        .await
        .is_err()
    {
        let remaining = max_connections.saturating_sub(slots.available_permits());
        log.log(&ServeEvent::Abandoned {
            connections: remaining,
        });
    }
    Ok(accepted)
}

/// Open connections per peer address, bounded.
struct Peers {
    max: usize,
    open: std::sync::Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of a peer; dropping it gives the slot back.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    fn new(max: usize) -> Peers {
        Peers {
            max,
            open: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for one more connection from `ip`; `None` when it has
    /// `max` open already.
    fn take(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let ip = ip.to_canonical();
        let mut open = self.lock();
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.lock();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// One accepted connection.
struct Conn {
    peer: SocketAddr,
    shared: Arc<http::Shared>,
    builder: hyper::server::conn::http1::Builder,
    watcher: Watcher,
    log: Arc<dyn ServeLog>,
    handshake_timeout: Duration,
}

impl Conn {
    async fn serve<I>(self, io: I)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let Conn {
            peer,
            shared,
            builder,
            watcher,
            log,
            ..
        } = self;
        let service = hyper::service::service_fn(move |req| {
            let shared = shared.clone();
            http::handle(shared, peer, req)
        });
        if let Err(e) = watcher.watch(builder.serve_connection(io, service)).await {
            log.log(&ServeEvent::Connection {
                peer,
                error: e.to_string(),
            });
        }
    }

    fn failed(self, error: String) {
        self.log.log(&ServeEvent::Connection {
            peer: self.peer,
            error,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_are_bounded_one_address_at_a_time() {
        let peers = Arc::new(Peers::new(2));
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let a1 = peers.take(a).unwrap();
        let a2 = peers.take(a).unwrap();
        assert!(peers.take(a).is_none(), "a third from one address");
        // An IPv4-mapped address is the same peer as the IPv4 one.
        let b1 = peers.take(b).unwrap();
        let _b2 = peers.take("127.0.0.2".parse().unwrap()).unwrap();
        assert!(peers.take(b).is_none());
        drop(a1);
        let _a3 = peers.take(a).unwrap();
        drop(a2);
        drop(b1);
        assert_eq!(peers.lock().len(), 2);
        drop(_a3);
        drop(_b2);
        assert!(peers.lock().is_empty(), "nothing kept for gone peers");
    }

    #[test]
    fn the_body_limit_must_fit_the_memory_budget() {
        let opts = ServeOptions {
            max_body: 2 << 20,
            memory_budget: 1 << 20,
            ..ServeOptions::default()
        };
        let e = opts.check().unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Usage);
        assert!(e.to_string().contains("over the memory budget"), "{e}");
        let opts = ServeOptions {
            max_connections_per_peer: 0,
            ..ServeOptions::default()
        };
        assert!(opts.check().is_err());
    }
}
