//! Recognising, creating and migrating the tables of a PostgreSQL spool.
//!
//! The tables live in one schema (`spool` unless the URL says `schema=`)
//! and are shared by every spool of that schema; `spool_schema` holds the
//! versions applied. Migrations run in one transaction each, after
//! `pg_advisory_xact_lock` on a key derived from the schema name, and
//! re-read the version once they hold the lock: many processes starting
//! at once against an empty database create the tables exactly once, and
//! the others wait for that commit. A version above [`SCHEMA_VERSION`] is
//! [`Error::SchemaTooNew`]; read-only opens never create or migrate
//! anything. An older version is migrated by the first writable open; a
//! read-only open reads it as it is (version 1 has no ordering groups,
//! coalesce keys or overflow policy: they read as none, `reject` and 0;
//! versions 1 and 2 retain no delivered items: retention reads as off,
//! with nothing retained; before version 6 no client tells which receiver
//! served it).

use super::conn::{quote_ident, render, Conn};
use super::url::PgTarget;
use crate::error::{Error, Result};

/// The schema version this code writes and understands.
pub const SCHEMA_VERSION: i32 = 8;

/// The migrations, in order: `MIGRATIONS[i]` brings version `i` to `i + 1`.
const MIGRATIONS: [&str; 8] = [
    include_str!("migrations/0001_spool.sql"),
    include_str!("migrations/0002_policies.sql"),
    include_str!("migrations/0003_retention.sql"),
    include_str!("migrations/0004_no_row_fk.sql"),
    include_str!("migrations/0005_dead_key.sql"),
    include_str!("migrations/0006_served_by.sql"),
    include_str!("migrations/0007_leased.sql"),
    include_str!("migrations/0008_key_prefix.sql"),
];

/// What the database holds for a schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// No spool tables (or no schema) yet.
    Nothing,
    /// Tables at this version.
    Version(i32),
}

/// Whether the version table exists. A query of the catalog (under the
/// statement's snapshot), not `to_regclass`, whose cached catalog may not
/// have seen a commit that happened while this session waited for the
/// migration lock.
const EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
     WHERE schemaname = $1 AND tablename = 'spool_schema')";

/// The advisory lock key of migrations in `schema`.
fn lock_key(schema: &str) -> String {
    format!("spool migrate {schema}")
}

/// Read the schema version and whether spool `name` exists, in one round
/// trip (never writes): a missing schema or table is [`Found::Nothing`].
pub(super) fn inspect(
    client: &mut postgres::Client,
    schema: &str,
    name: &str,
) -> std::result::Result<(Found, bool), postgres::Error> {
    use postgres::error::SqlState;
    use postgres::types::Type;
    let s = quote_ident(schema);
    let sql = format!(
        "SELECT (SELECT COALESCE(max(version), 0) FROM {s}.spool_schema), \
                EXISTS (SELECT 1 FROM {s}.spools WHERE name = $1)"
    );
    match client.query_typed_one(&sql, &[(&name, Type::TEXT)]) {
        Ok(row) => Ok((Found::Version(row.get(0)), row.get(1))),
        Err(e)
            if e.code() == Some(&SqlState::UNDEFINED_TABLE)
                || e.code() == Some(&SqlState::INVALID_SCHEMA_NAME) =>
        {
            Ok((Found::Nothing, false))
        }
        Err(e) => Err(e),
    }
}

/// Fail for a schema newer than this code.
pub(super) fn check(found: Found, display: &str) -> Result<()> {
    if let Found::Version(v) = found {
        if v > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                path: display.into(),
                found: v.into(),
                supported: SCHEMA_VERSION.into(),
            });
        }
    }
    Ok(())
}

/// Bring the schema to [`SCHEMA_VERSION`], creating it when missing.
pub(super) fn migrate(conn: &mut Conn, target: &PgTarget, display: &str) -> Result<()> {
    let err = |e| super::conn::pg_error(target, display, "create the tables of", e);
    let schema_q = conn.schema_q().to_string();
    let mut tx = conn.client.transaction().map_err(err)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&lock_key(&target.schema)],
    )
    .map_err(err)?;
    // Another process may have migrated while we waited for the lock.
    let table = format!("{schema_q}.spool_schema");
    let exists: bool = tx.query_one(EXISTS, &[&target.schema]).map_err(err)?.get(0);
    let version: i32 = if exists {
        tx.query_one(
            &format!("SELECT COALESCE(max(version), 0) FROM {table}"),
            &[],
        )
        .map_err(err)?
        .get(0)
    } else {
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema_q}"))
            .map_err(err)?;
        0
    };
    check(Found::Version(version), display)?;
    for m in MIGRATIONS.iter().skip(version.max(0) as usize) {
        tx.batch_execute(&render(m, &schema_q)).map_err(err)?;
    }
    tx.commit().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_templates_of_the_schema() {
        let sql = render(MIGRATIONS[0], "\"q\"");
        assert!(!sql.contains("{s}"));
        assert!(sql.contains("\"q\".items"));
        assert_eq!(MIGRATIONS.len() as i32, SCHEMA_VERSION);
        for (i, m) in MIGRATIONS.iter().enumerate() {
            let sql = render(m, "\"q\"");
            assert!(!sql.contains("{s}"), "migration {}", i + 1);
            assert!(
                sql.contains(&format!("spool_schema (version) VALUES ({})", i + 1)),
                "migration {} records its version",
                i + 1
            );
        }
    }
}
