//! One connection to the server, its prepared statements, and the
//! mapping of the driver's errors to spool's.
//!
//! Every statement is written once as a template in which `{s}` stands for
//! the quoted schema and `{now}` for the server's clock in Unix
//! milliseconds; [`Conn`] prepares each template once per connection.

use super::url::PgTarget;
use crate::error::{Error, ErrorKind, Result};
use postgres::types::ToSql;
use postgres::{Client, Row, Statement};
use std::collections::HashMap;

/// The server's clock, Unix milliseconds (`statement_timestamp()` so that
/// every statement of a long transaction reads the time it runs at).
pub(super) const NOW_MS: &str = "(floor(extract(epoch from statement_timestamp()) * 1000))::int8";

/// Statement parameters.
pub(super) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connection and its prepared statements.
pub(super) struct Conn {
    pub client: Client,
    stmts: HashMap<&'static str, Statement>,
    schema_q: String,
}

/// Quote an identifier for SQL.
pub(super) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Fill in a template.
pub(super) fn render(template: &str, schema_q: &str) -> String {
    template.replace("{s}", schema_q).replace("{now}", NOW_MS)
}

/// Connect to the server `target` names, for `action` (which a failure
/// names).
pub(super) fn connect(target: &PgTarget, display: &str, action: &'static str) -> Result<Client> {
    let config = target.config();
    let res = if target.uses_tls() {
        let trust = match &target.sslrootcert {
            Some(p) => crate::tls::TlsTrust::with_cacert(p),
            None => crate::tls::TlsTrust::system(),
        };
        let roots = trust.load()?;
        let tls_config = (*roots.rustls_client_config()).clone();
        config.connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls_config))
    } else {
        config.connect(postgres::NoTls)
    };
    res.map_err(|e| pg_error(target, display, action, e))
}

impl Conn {
    pub fn new(client: Client, schema: &str) -> Conn {
        Conn {
            client,
            stmts: HashMap::new(),
            schema_q: quote_ident(schema),
        }
    }

    pub fn schema_q(&self) -> &str {
        &self.schema_q
    }
}

/// A transaction (or a plain connection) in the context of one spool
/// operation: runs templates, maps errors.
pub(super) struct Tx<'a> {
    pub tx: postgres::Transaction<'a>,
    pub stmts: &'a mut HashMap<&'static str, Statement>,
    pub schema_q: &'a str,
    pub target: &'a PgTarget,
    pub display: &'a str,
    pub action: &'static str,
}

impl<'a> Tx<'a> {
    /// Open a transaction on `conn`.
    pub fn begin(
        conn: &'a mut Conn,
        target: &'a PgTarget,
        display: &'a str,
        action: &'static str,
        read_only: bool,
    ) -> Result<Tx<'a>> {
        let Conn {
            client,
            stmts,
            schema_q,
        } = conn;
        let mut b = client.build_transaction();
        if read_only {
            b = b.read_only(true);
        }
        let tx = b
            .start()
            .map_err(|e| pg_error(target, display, action, e))?;
        Ok(Tx {
            tx,
            stmts,
            schema_q,
            target,
            display,
            action,
        })
    }

    pub fn err(&self, e: postgres::Error) -> Error {
        pg_error(self.target, self.display, self.action, e)
    }

    fn stmt(&mut self, template: &'static str) -> Result<Statement> {
        if let Some(s) = self.stmts.get(template) {
            return Ok(s.clone());
        }
        let sql = render(template, self.schema_q);
        let st = self.tx.prepare(&sql).map_err(|e| self.err(e))?;
        self.stmts.insert(template, st.clone());
        Ok(st)
    }

    pub fn query(&mut self, template: &'static str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(template)?;
        self.tx.query(&st, params).map_err(|e| self.err(e))
    }

    pub fn query_opt(&mut self, template: &'static str, params: Params<'_>) -> Result<Option<Row>> {
        let st = self.stmt(template)?;
        self.tx.query_opt(&st, params).map_err(|e| self.err(e))
    }

    pub fn query_one(&mut self, template: &'static str, params: Params<'_>) -> Result<Row> {
        let st = self.stmt(template)?;
        self.tx.query_one(&st, params).map_err(|e| self.err(e))
    }

    /// [`Tx::query`] for a template built at run time: planned for this
    /// call only, not kept among the connection's prepared statements.
    pub fn query_once(&mut self, template: &str, params: Params<'_>) -> Result<Vec<Row>> {
        let sql = render(template, self.schema_q);
        self.tx.query(sql.as_str(), params).map_err(|e| self.err(e))
    }

    pub fn execute(&mut self, template: &'static str, params: Params<'_>) -> Result<u64> {
        let st = self.stmt(template)?;
        self.tx.execute(&st, params).map_err(|e| self.err(e))
    }

    pub fn commit(self) -> Result<()> {
        let (target, display, action) = (self.target, self.display, self.action);
        self.tx
            .commit()
            .map_err(|e| pg_error(target, display, action, e))
    }
}

/// True for errors that a retry of the whole transaction may cure:
/// serialization failures and deadlocks.
pub(super) fn is_retryable(e: &Error) -> bool {
    matches!(
        e,
        Error::Postgres {
            retryable: true,
            ..
        }
    )
}

/// Map a driver error to spool's error, naming the server for errors of
/// the connection, never the password.
pub(super) fn pg_error(
    target: &PgTarget,
    display: &str,
    action: &'static str,
    e: postgres::Error,
) -> Error {
    use postgres::error::SqlState;
    let mut retryable = false;
    let (kind, detail) = if let Some(db) = e.as_db_error() {
        let code = db.code();
        let msg = match db.detail() {
            Some(d) => format!("{} ({d}) [SQLSTATE {}]", db.message(), code.code()),
            None => format!("{} [SQLSTATE {}]", db.message(), code.code()),
        };
        let kind = if *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
            || *code == SqlState::INSUFFICIENT_PRIVILEGE
        {
            ErrorKind::PermissionDenied
        } else if *code == SqlState::INVALID_CATALOG_NAME {
            ErrorKind::NotFound
        } else if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
        {
            retryable = true;
            ErrorKind::Temporary
        } else if *code == SqlState::LOCK_NOT_AVAILABLE
            || *code == SqlState::QUERY_CANCELED
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
            || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
            || code.code().starts_with("08")
        {
            ErrorKind::Temporary
        } else if *code == SqlState::DISK_FULL || code.code().starts_with("58") {
            ErrorKind::Io
        } else if *code == SqlState::CHARACTER_NOT_IN_REPERTOIRE
            || *code == SqlState::UNTRANSLATABLE_CHARACTER
            || *code == SqlState::PROGRAM_LIMIT_EXCEEDED
        {
            ErrorKind::Data
        } else {
            ErrorKind::Internal
        };
        let detail = if kind == ErrorKind::PermissionDenied && code.code().starts_with("28") {
            format!(
                "authentication failed for user {:?} at {}: {msg}",
                target.user,
                target.server()
            )
        } else if kind == ErrorKind::Temporary && !retryable {
            format!("server {}: {msg}", target.server())
        } else {
            msg
        };
        (kind, detail)
    } else if e.is_closed() {
        (
            ErrorKind::Temporary,
            format!("the connection to {} was lost", target.server()),
        )
    } else {
        // Connection errors: refused, unreachable, timeouts, TLS.
        let mut text = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            let t = s.to_string();
            if !text.contains(&t) {
                text.push_str(": ");
                text.push_str(&t);
            }
            src = s.source();
        }
        (
            ErrorKind::Temporary,
            format!("cannot reach the server at {}: {text}", target.server()),
        )
    };
    Error::Postgres {
        target: display.to_string(),
        action,
        kind,
        detail,
        retryable,
    }
}
