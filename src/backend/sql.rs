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

/// `n` as an SQL integer, the largest one when it does not fit (an id
/// or a count past `i64::MAX` matches nothing, as no row holds one).
pub(crate) fn clamp<N: TryInto<i64>>(n: N) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}
