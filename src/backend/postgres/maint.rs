//! Maintenance of a PostgreSQL spool: `verify` (the schema version, the
//! kept counts against the rows, the constraints, leases that ran out),
//! `VACUUM`, table statistics, and the server process of a handle.

use super::conn::{pg_error, Tx};
use super::rows::u64_of;
use super::{schema, PostgresQueue};
use crate::error::{Error, Result};

impl PostgresQueue {
    /// The process id of this handle's server process
    /// (`pg_stat_activity.pid`), for operators and tests.
    pub fn server_pid(&self) -> Result<i32> {
        self.txn("read the server process of", false, |tx| {
            Ok(tx.query_one("SELECT pg_backend_pid()", &[])?.get(0))
        })
    }

    /// Tables of this schema and their dead tuples (for `compact`).
    pub fn dead_tuples(&self) -> Result<Vec<(String, u64, u64)>> {
        self.txn("read the table statistics of", false, |tx| {
            let rows = tx.query(
                "SELECT relname::text, n_live_tup, n_dead_tup FROM pg_stat_user_tables \
                 WHERE schemaname = $1 ORDER BY relname",
                &[&self.target.schema],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), u64_of(r.get(1)), u64_of(r.get(2))))
                .collect())
        })
    }

    /// `VACUUM (ANALYZE)` every table of the spool's schema (shared by all
    /// its spools); returns the tables vacuumed. Rows that older versions
    /// wrote for this spool's skipped push numbers (a skip now records
    /// nothing but the client's `last_seq`) are deleted first.
    pub fn vacuum(&self) -> Result<Vec<String>> {
        if self.read_only {
            return Err(Error::Unsupported(format!(
                "cannot vacuum {}: the spool was opened read-only",
                self.display
            )));
        }
        let tables = [
            "items",
            "dead_letters",
            "delivered",
            "spools",
            "push_skips",
            "push_clients",
            "push_entries",
        ];
        let mut g = self.lock("vacuum")?;
        let conn = Self::conn_of(&mut g)?;
        let schema_q = conn.schema_q().to_string();
        conn.client
            .execute(
                &format!(
                    "DELETE FROM {schema_q}.push_entries WHERE spool = $1 AND outcome = 'skipped'"
                ),
                &[&self.target.spool],
            )
            .map_err(|e| pg_error(&self.target, &self.display, "vacuum", e))?;
        for t in tables {
            conn.client
                .batch_execute(&format!("VACUUM (ANALYZE) {schema_q}.{t}"))
                .map_err(|e| pg_error(&self.target, &self.display, "vacuum", e))?;
        }
        Ok(tables
            .iter()
            .map(|t| format!("{}.{t}", self.target.schema))
            .collect())
    }

    /// What `verify` checks: the schema version, the kept counts against
    /// the rows, the constraints, and leases that ran out. Returns the
    /// findings (empty: healthy) and notes.
    pub fn verify(&self) -> Result<(Vec<String>, Vec<String>)> {
        self.txn("verify", false, |tx| {
            let mut findings = Vec::new();
            let mut notes = Vec::new();
            let v: i32 = tx
                .query_one("SELECT COALESCE(max(version), 0) FROM {s}.spool_schema", &[])?
                .get(0);
            notes.push(format!("schema {} version {v}", self.target.schema));
            if v != schema::SCHEMA_VERSION {
                findings.push(format!(
                    "schema version {v}, this spool writes version {}",
                    schema::SCHEMA_VERSION
                ));
            }
            let row = tx.query_one(
                "SELECT s.depth, s.dead, s.high_water, \
                    (SELECT count(*) FROM {s}.items WHERE spool = $1), \
                    (SELECT count(*) FROM {s}.dead_letters WHERE spool = $1), \
                    GREATEST((SELECT max(id) FROM {s}.items WHERE spool = $1), \
                             (SELECT max(id) FROM {s}.dead_letters WHERE spool = $1)), \
                    (SELECT count(*) FROM {s}.items WHERE spool = $1 AND lease_until IS NOT NULL \
                        AND lease_until <= {now}), \
                    (SELECT count(*) FROM {s}.items WHERE spool = $1 AND lease_until IS NOT NULL), \
                    (SELECT count(*) FROM {s}.items i JOIN {s}.dead_letters d \
                        ON d.spool = i.spool AND d.id = i.id WHERE i.spool = $1) \
                 FROM {s}.spools s WHERE s.name = $1",
                &[self.spool()],
            )?;
            let (depth, dead, hw): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let (items, deads): (i64, i64) = (row.get(3), row.get(4));
            let max_id: Option<i64> = row.get(5);
            let (expired, leased, both): (i64, i64, i64) = (row.get(6), row.get(7), row.get(8));
            if depth != items {
                findings.push(format!("kept depth {depth}, but {items} pending rows"));
            }
            if dead != deads {
                findings.push(format!("kept dead-letter count {dead}, but {deads} rows"));
            }
            if max_id.is_some_and(|m| m > hw) {
                findings.push(format!(
                    "high-water mark {hw} is below the largest id {}",
                    max_id.unwrap_or_default()
                ));
            }
            if both > 0 {
                findings.push(format!("{both} ids are both pending and dead"));
            }
            if self.retention {
                self.verify_delivered(tx, hw, &mut findings, &mut notes)?;
            }
            let invalid: i64 = tx
                .query_one(
                    "SELECT count(*) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid \
                     JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE n.nspname = $1 AND NOT x.indisvalid",
                    &[&self.target.schema],
                )?
                .get(0);
            if invalid > 0 {
                findings.push(format!("{invalid} invalid indexes (rebuild with REINDEX)"));
            }
            notes.push(format!(
                "{leased} items leased by replayers, {expired} of those leases ran out (due again; not an error)"
            ));
            Ok((findings, notes))
        })
    }

    /// The retention part of `verify`: the kept count against the rows,
    /// ids (at most `hw`, used once), evidence this version can read.
    fn verify_delivered(
        &self,
        tx: &mut Tx<'_>,
        hw: i64,
        findings: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        let row = tx.query_one(
            "SELECT s.retained, \
                (SELECT count(*) FROM {s}.delivered WHERE spool = $1), \
                (SELECT max(id) FROM {s}.delivered WHERE spool = $1), \
                (SELECT count(*) FROM {s}.delivered d WHERE d.spool = $1 \
                    AND (EXISTS (SELECT 1 FROM {s}.items i WHERE i.spool = d.spool AND i.id = d.id) \
                      OR EXISTS (SELECT 1 FROM {s}.dead_letters x WHERE x.spool = d.spool AND x.id = d.id))), \
                (SELECT count(*) FROM {s}.delivered WHERE spool = $1 AND evidence !~ \
                    '^(http:[0-9]{1,5}|exit:-?[0-9]{1,10}|push:[0-9]{1,19}|done|sink)$'), \
                (SELECT count(*) FROM {s}.delivered WHERE spool = $1 \
                    AND delivered_at <= COALESCE({now} - s.retain_ms, 9223372036854775807)) \
             FROM {s}.spools s WHERE s.name = $1",
            &[self.spool()],
        )?;
        let (kept, rows): (i64, i64) = (row.get(0), row.get(1));
        let max_id: Option<i64> = row.get(2);
        let (both, unreadable, expired): (i64, i64, i64) = (row.get(3), row.get(4), row.get(5));
        if kept != rows {
            findings.push(format!(
                "kept count of retained delivered items {kept}, but {rows} rows"
            ));
        }
        if let Some(m) = max_id.filter(|m| *m > hw) {
            findings.push(format!(
                "high-water mark {hw} is below the largest delivered id {m}"
            ));
        }
        if both > 0 {
            findings.push(format!("{both} ids are both delivered and pending or dead"));
        }
        if unreadable > 0 {
            findings.push(format!(
                "{unreadable} delivered items carry evidence this version cannot read"
            ));
        }
        notes.push(format!(
            "{rows} delivered items retained, {expired} of those past their window \
             (pruned by the next delivery or enqueue, or by compact; not an error)"
        ));
        Ok(())
    }
}
