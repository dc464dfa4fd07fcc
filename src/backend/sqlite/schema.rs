//! Recognising, creating and migrating a spool database.
//!
//! A database is one of: empty (no tables yet), a plain reference queue
//! (`morph_offline_queue` only, `user_version` 0), a spool of an earlier
//! version (`user_version` 1: `migrations/0001_spool.sql`), a spool
//! of version 2 (`user_version` 2: also `migrations/0002_push.sql`), a
//! spool of version 3 (`user_version` 3: also `migrations/0003_policies.sql`),
//! a spool of version 4 (`user_version` 4: also `migrations/0004_retention.sql`),
//! a spool of version 5 (`user_version` 5: also `migrations/0005_prune_order.sql`),
//! a spool (`user_version` 6: also `migrations/0006_dead_key.sql`), too
//! new (a later `user_version`), or not a spool at all. Writable opens
//! bring the others to the current version, in one `BEGIN IMMEDIATE` transaction that
//! re-checks what it found, so two processes opening the same file at once
//! migrate it once; read-only opens read every one of them as it is.

use crate::backend::OpenOptions;
use crate::error::{Error, Result};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use std::path::Path;

/// The reference `SqliteOfflineQueue` table and its partial unique index.
pub(super) const REFERENCE_SCHEMA: &str = include_str!("migrations/0000_reference.sql");

/// The migrations, in order: `MIGRATIONS[i]` brings version `i` (a
/// reference queue, for 0) to `i + 1`, and ends with its
/// `PRAGMA user_version`.
pub(super) const MIGRATIONS: [&str; 6] = [
    // What spool adds to the reference.
    include_str!("migrations/0001_spool.sql"),
    // Push, sending and receiving.
    include_str!("migrations/0002_push.sql"),
    // Ordering groups and coalesce keys.
    include_str!("migrations/0003_policies.sql"),
    // Retention of delivered items.
    include_str!("migrations/0004_retention.sql"),
    // Pruning without a time index for records delivered in id order.
    include_str!("migrations/0005_prune_order.sql"),
    // The index of dead letters by key.
    include_str!("migrations/0006_dead_key.sql"),
];

/// The schema version this code writes and understands.
pub(super) const SCHEMA_VERSION: i64 = 6;

/// The reference queue table.
pub(super) const QUEUE_TABLE: &str = "morph_offline_queue";

const REFERENCE_COLUMNS: [&str; 5] = [
    "id",
    "payload",
    "idempotency_key",
    "attempts",
    "enqueued_at",
];
const ADDED_COLUMNS: [&str; 3] = ["next_retry_at", "last_error", "held"];
const ADDED_TABLES: [&str; 2] = ["spool_dead_letters", "spool_meta"];
const PUSH_COLUMNS: [&str; 1] = ["push_seq"];
const POLICY_COLUMNS: [&str; 2] = ["group_name", "coalesce_key"];
const RETENTION_TABLES: [&str; 1] = ["spool_delivered"];
const PUSH_TABLES: [&str; 5] = [
    "spool_push_skips",
    "spool_push_clients",
    "spool_push_entries",
    "spool_counts",
    "spool_attempt_counts",
];

/// The shape of the database a handle reads, decided at open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// The current schema version: every column and table of this module.
    Spool,
    /// Schema version 1, read only: no push columns or tables (in-flight
    /// numbers read as none, the push state as empty).
    SpoolV1,
    /// Schema version 2, read only: no ordering groups or coalesce keys
    /// (they read as none).
    SpoolV2,
    /// Schema version 3, read only: no retained delivered items (none,
    /// retention off).
    SpoolV3,
    /// Schema version 4, read only: retained delivered items without
    /// their `late` flag (which only pruning, a write, reads).
    SpoolV4,
    /// Schema version 5, read only: dead letters without their key index
    /// (which only an import, a write, reads).
    SpoolV5,
    /// A plain reference queue, read only: added columns read as their
    /// defaults, no dead letters, no metadata.
    Reference,
    /// A SQLite database without tables, read only: an empty spool.
    Empty,
}

impl Layout {
    /// Spool's own tables (dead letters, metadata) are there.
    pub(super) fn is_spool(self) -> bool {
        matches!(
            self,
            Layout::Spool
                | Layout::SpoolV1
                | Layout::SpoolV2
                | Layout::SpoolV3
                | Layout::SpoolV4
                | Layout::SpoolV5
        )
    }

    /// The push columns and tables are there.
    pub(super) fn has_push(self) -> bool {
        matches!(
            self,
            Layout::Spool | Layout::SpoolV2 | Layout::SpoolV3 | Layout::SpoolV4 | Layout::SpoolV5
        )
    }

    /// The ordering-group and coalesce-key columns are there.
    pub(super) fn has_groups(self) -> bool {
        matches!(
            self,
            Layout::Spool | Layout::SpoolV3 | Layout::SpoolV4 | Layout::SpoolV5
        )
    }

    /// The table of retained delivered items is there.
    pub(super) fn has_retention(self) -> bool {
        matches!(self, Layout::Spool | Layout::SpoolV4 | Layout::SpoolV5)
    }
}

/// What a database holds, as far as recognising it goes.
#[derive(Debug)]
struct Found {
    user_version: i64,
    tables: Vec<String>,
    queue_columns: Vec<String>,
}

/// Every column of the queue table that some schema version has, in the
/// order the migrations add them.
const KNOWN_COLUMNS: [&[&str]; 4] = [
    &REFERENCE_COLUMNS,
    &ADDED_COLUMNS,
    &PUSH_COLUMNS,
    &POLICY_COLUMNS,
];

/// Every table of spool's own that some schema version has.
const KNOWN_TABLES: [&[&str]; 3] = [&ADDED_TABLES, &PUSH_TABLES, &RETENTION_TABLES];

/// What the database holds of what [`classify`] looks for. The tables
/// and columns are looked up in the schema SQLite parses anyway when a
/// connection first reads ([`schema_has`]), not with queries of their
/// own: every process that opens a spool runs this, so its cost is part
/// of every one-shot command. Only a database without the queue table (a
/// new one, or not a spool) has its tables listed.
fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    let user_version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let mut tables = Vec::new();
    let mut queue_columns = Vec::new();
    if schema_has(conn, QUEUE_TABLE, None)? {
        tables.push(QUEUE_TABLE.to_string());
        for c in KNOWN_COLUMNS.iter().flat_map(|cs| cs.iter()) {
            if schema_has(conn, QUEUE_TABLE, Some(c))? {
                queue_columns.push(c.to_string());
            }
        }
        for t in KNOWN_TABLES.iter().flat_map(|ts| ts.iter()) {
            if schema_has(conn, t, None)? {
                tables.push(t.to_string());
            }
        }
    } else {
        let mut stmt = conn.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'",
        )?;
        tables = stmt
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
    }
    Ok(Found {
        user_version,
        tables,
        queue_columns,
    })
}

/// Whether the main database has the table `table` (and, when given, the
/// column `column` in it): `sqlite3_table_column_metadata`, which reads
/// the schema SQLite has parsed instead of preparing a statement.
fn schema_has(conn: &Connection, table: &str, column: Option<&str>) -> rusqlite::Result<bool> {
    use rusqlite::ffi;
    use std::ffi::CString;
    use std::ptr;
    let name =
        |s: &str| CString::new(s).map_err(|_| rusqlite::Error::InvalidParameterName(s.to_string()));
    let table = name(table)?;
    let column = column.map(name).transpose()?;
    // SAFETY: the handle is the open connection's and is used by this
    // thread only while `conn` is borrowed; the strings outlive the call;
    // null output pointers are allowed and ask for nothing.
    let rc = unsafe {
        ffi::sqlite3_table_column_metadata(
            conn.handle(),
            c"main".as_ptr(),
            table.as_ptr(),
            column.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    match rc {
        ffi::SQLITE_OK => Ok(true),
        // "no such table column": the one plain error this call has.
        // Failures to read the schema come with their own codes
        // (SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_BUSY …).
        ffi::SQLITE_ERROR => Ok(false),
        rc => {
            // SAFETY: as above; sqlite3_errmsg returns a string owned by
            // the connection, copied before anything else uses it.
            let message = unsafe { std::ffi::CStr::from_ptr(ffi::sqlite3_errmsg(conn.handle())) }
                .to_string_lossy()
                .into_owned();
            Err(rusqlite::Error::SqliteFailure(
                ffi::Error::new(rc),
                Some(message),
            ))
        }
    }
}

/// Decide what `found` is; fail for a database spool cannot use.
fn classify(path: &Path, found: &Found) -> Result<Layout> {
    let v = found.user_version;
    if v > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            path: path.to_path_buf(),
            found: v,
            supported: SCHEMA_VERSION,
        });
    }
    let has_table = |t: &str| found.tables.iter().any(|n| n == t);
    let has_column = |c: &&str| found.queue_columns.iter().any(|n| n == c);
    if !has_table(QUEUE_TABLE) {
        if found.tables.is_empty() && v == 0 {
            return Ok(Layout::Empty);
        }
        return Err(Error::corrupt(
            path,
            None,
            format!("not a spool database: it has no {QUEUE_TABLE} table"),
        ));
    }
    if v < 0 {
        return Err(Error::corrupt(
            path,
            None,
            format!("not a spool database: unknown schema version {v}"),
        ));
    }
    if let Some(c) = REFERENCE_COLUMNS.iter().find(|c| !has_column(c)) {
        return Err(Error::corrupt(
            path,
            None,
            format!("table {QUEUE_TABLE} has no column {c}"),
        ));
    }
    if v == 0 {
        return Ok(Layout::Reference);
    }
    let mut columns: Vec<&str> = ADDED_COLUMNS.to_vec();
    let mut tables: Vec<&str> = ADDED_TABLES.to_vec();
    if v >= 2 {
        columns.extend(PUSH_COLUMNS);
        tables.extend(PUSH_TABLES);
    }
    if v >= 3 {
        columns.extend(POLICY_COLUMNS);
    }
    if v >= 4 {
        tables.extend(RETENTION_TABLES);
    }
    if let Some(c) = columns.iter().find(|c| !has_column(c)) {
        return Err(Error::corrupt(
            path,
            None,
            format!("schema version {v}, but table {QUEUE_TABLE} has no column {c}"),
        ));
    }
    if let Some(t) = tables.iter().find(|t| !has_table(t)) {
        return Err(Error::corrupt(
            path,
            None,
            format!("schema version {v}, but the table {t} is missing"),
        ));
    }
    Ok(match v {
        1 => Layout::SpoolV1,
        2 => Layout::SpoolV2,
        3 => Layout::SpoolV3,
        4 => Layout::SpoolV4,
        5 => Layout::SpoolV5,
        _ => Layout::Spool,
    })
}

/// Recognise the database behind a read-only connection. Never writes.
pub(super) fn read_layout(conn: &Connection, path: &Path) -> Result<Layout> {
    let found = inspect(conn).map_err(|e| Error::sqlite(path, "open", e))?;
    classify(path, &found)
}

/// Bring the database behind a writable connection, found to be `layout`
/// by [`read_layout`], to the current schema: create it in an empty
/// database (remembering `opts.max_depth`), migrate a reference queue
/// (keeping its rows). Returns [`Layout::Spool`].
pub(super) fn ensure_spool(
    conn: &mut Connection,
    path: &Path,
    opts: &OpenOptions,
    layout: Layout,
) -> Result<Layout> {
    if layout == Layout::Spool {
        return Ok(Layout::Spool);
    }
    const ACTION: &str = "migrate";
    let err = |e| Error::sqlite(path, ACTION, e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(err)?;
    // Another process may have migrated it while we waited for the lock.
    let found = classify(path, &inspect(&tx).map_err(err)?)?;
    let from = match found {
        Layout::Spool => MIGRATIONS.len(),
        Layout::SpoolV1 => 1,
        Layout::SpoolV2 => 2,
        Layout::SpoolV3 => 3,
        Layout::SpoolV4 => 4,
        Layout::SpoolV5 => 5,
        Layout::Reference | Layout::Empty => 0,
    };
    if found == Layout::Empty {
        tx.execute_batch(REFERENCE_SCHEMA).map_err(err)?;
    }
    for migration in &MIGRATIONS[from..] {
        tx.execute_batch(migration).map_err(err)?;
    }
    if from == 0 {
        set_meta(&tx, "uuid", &uuid::Uuid::new_v4().to_string()).map_err(err)?;
    }
    if found == Layout::Empty {
        if let Some(bound) = opts.max_depth {
            set_meta(&tx, "max_depth", &bound.to_string()).map_err(err)?;
        }
    }
    tx.commit().map_err(err)?;
    Ok(Layout::Spool)
}

/// Set one metadata value.
pub(super) fn set_meta(conn: &Connection, key: &str, value: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO spool_meta (key, value) VALUES (?1, ?2)")?
        .execute([key, value])?;
    Ok(())
}

/// One metadata value, if set.
pub(super) fn get_meta(conn: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT value FROM spool_meta WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(v: i64, tables: &[&str], cols: &[&str]) -> Found {
        Found {
            user_version: v,
            tables: tables.iter().map(|s| s.to_string()).collect(),
            queue_columns: cols.iter().map(|s| s.to_string()).collect(),
        }
    }

    const ALL: [&str; 11] = [
        "id",
        "payload",
        "idempotency_key",
        "attempts",
        "enqueued_at",
        "next_retry_at",
        "last_error",
        "held",
        "push_seq",
        "group_name",
        "coalesce_key",
    ];

    #[test]
    fn classification() {
        let p = Path::new("q.db");
        let t1 = [QUEUE_TABLE, "spool_dead_letters", "spool_meta"];
        let t = [
            QUEUE_TABLE,
            "spool_dead_letters",
            "spool_meta",
            "spool_push_skips",
            "spool_push_clients",
            "spool_push_entries",
            "spool_counts",
            "spool_attempt_counts",
        ];
        assert_eq!(classify(p, &found(0, &[], &[])).ok(), Some(Layout::Empty));
        assert_eq!(
            classify(p, &found(0, &[QUEUE_TABLE], &ALL[..5])).ok(),
            Some(Layout::Reference)
        );
        assert_eq!(
            classify(p, &found(1, &t1, &ALL[..8])).ok(),
            Some(Layout::SpoolV1)
        );
        assert_eq!(
            classify(p, &found(2, &t, &ALL[..9])).ok(),
            Some(Layout::SpoolV2)
        );
        assert_eq!(classify(p, &found(3, &t, &ALL)).ok(), Some(Layout::SpoolV3));
        let t4: Vec<&str> = t.iter().copied().chain(["spool_delivered"]).collect();
        assert_eq!(
            classify(p, &found(4, &t4, &ALL)).ok(),
            Some(Layout::SpoolV4)
        );
        assert_eq!(
            classify(p, &found(5, &t4, &ALL)).ok(),
            Some(Layout::SpoolV5)
        );
        assert_eq!(classify(p, &found(6, &t4, &ALL)).ok(), Some(Layout::Spool));
        assert!(matches!(
            classify(p, &found(7, &t4, &ALL)),
            Err(Error::SchemaTooNew { found: 7, .. })
        ));
        for bad in [
            found(0, &["other"], &[]),
            found(1, &[], &[]),
            found(0, &[QUEUE_TABLE], &ALL[..4]),
            found(1, &[QUEUE_TABLE], &ALL),
            found(1, &t1, &ALL[..7]),
            found(2, &t1, &ALL),
            found(2, &t, &ALL[..8]),
            found(3, &t, &ALL[..10]),
            found(4, &t, &ALL),
            found(-1, &t, &ALL),
        ] {
            assert!(
                matches!(classify(p, &bad), Err(Error::Corrupt { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn migrations_apply_to_a_reference_database() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(REFERENCE_SCHEMA).unwrap();
        conn.execute(
            "INSERT INTO morph_offline_queue (payload, enqueued_at) VALUES ('x', 7)",
            [],
        )
        .unwrap();
        for migration in MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        let f = inspect(&conn).unwrap();
        assert_eq!(f.user_version, SCHEMA_VERSION);
        assert_eq!(f.queue_columns, ALL);
        let row: (Option<i64>, Option<String>, i64) = conn
            .query_row(
                "SELECT next_retry_at, last_error, held FROM morph_offline_queue",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(row, (None, None, 0));
    }
}
