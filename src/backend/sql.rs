//! Running one cached statement on a SQLite connection, for the SQLite
//! backend and the NDJSON index alike: a call per statement, instead of
//! preparing, running and mapping its rows at every place that uses it.

use rusqlite::{Connection, OptionalExtension, Params, Result, Row};

/// Cached statements on a connection (every method prepares `sql` once
/// per connection and keeps it).
pub(crate) trait Cached {
    /// Run `sql`; the number of rows it changed.
    fn run(&self, sql: &str, p: impl Params) -> Result<usize>;
    /// The one row of `sql`, mapped by `f`.
    fn row<T>(&self, sql: &str, p: impl Params, f: impl FnOnce(&Row<'_>) -> Result<T>)
        -> Result<T>;
    /// The first row of `sql`, mapped by `f`, if it has one.
    fn first<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>>;
    /// Every row of `sql`, each mapped by `f`.
    fn rows<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>>;
}

impl Cached for Connection {
    fn run(&self, sql: &str, p: impl Params) -> Result<usize> {
        self.prepare_cached(sql)?.execute(p)
    }

    fn row<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.prepare_cached(sql)?.query_row(p, f)
    }

    fn first<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        self.prepare_cached(sql)?.query_row(p, f).optional()
    }

    fn rows<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.prepare_cached(sql)?.query_map(p, f)?.collect()
    }
}

/// A store over one connection whose failures name it (the SQLite
/// backend's `Db`, the NDJSON index's `Index`): [`Cached`]'s calls, each
/// failure turned into spool's error by the store.
pub(crate) trait SqlStore {
    /// The connection.
    fn conn(&self) -> &Connection;
    /// A failed statement as spool's error: one that changes the store
    /// (`write`) or one that reads it.
    fn fail(&self, e: rusqlite::Error, write: bool) -> crate::error::Error;

    /// [`Cached::run`].
    fn run(&self, sql: &str, p: impl Params) -> crate::error::Result<usize> {
        self.conn().run(sql, p).map_err(|e| self.fail(e, true))
    }
    /// [`Cached::row`].
    fn row<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> crate::error::Result<T> {
        self.conn().row(sql, p, f).map_err(|e| self.fail(e, false))
    }
    /// [`Cached::first`].
    fn first<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> crate::error::Result<Option<T>> {
        self.conn()
            .first(sql, p, f)
            .map_err(|e| self.fail(e, false))
    }
    /// [`Cached::rows`].
    fn rows<T>(
        &self,
        sql: &str,
        p: impl Params,
        f: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> crate::error::Result<Vec<T>> {
        self.conn().rows(sql, p, f).map_err(|e| self.fail(e, false))
    }
}

/// `n` as an SQL integer, the largest one when it does not fit (an id
/// or a count past `i64::MAX` matches nothing, as no row holds one).
pub(crate) fn clamp<N: TryInto<i64>>(n: N) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}
