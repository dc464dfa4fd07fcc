//! The index and compaction: what a compaction keeps, as an index caught
//! up with the files knows it (where each live item's line is, the
//! receiver's ledger), and the index carried over to the compacted files.

use super::{to_i64, u, Index, Loc};
use crate::backend::file::compact::Layout;
use crate::backend::receive::ClientDelta;
use crate::error::{Error, Result};
use crate::item::ItemId;
use crate::push::memory::Recorded;
use crate::time::Timestamp;
use rusqlite::{params, Connection};
use std::collections::BTreeMap;
use std::path::Path;

impl Index {
    /// Where every pending item's line is, in id order.
    pub fn live_locs(&self) -> Result<Vec<Loc>> {
        self.locs("SELECT id, off, len FROM pending ORDER BY id", [])
    }

    /// Every known client's ledger as one change from nothing: its
    /// `last_seq`, every number recorded, the time of its last push, and
    /// the acknowledged-reject watermark just below the first reject still
    /// reported (`last_seq` when none is), so that the rejects reported
    /// stay the same.
    pub fn client_ledgers(&self) -> Result<Vec<(String, ClientDelta)>> {
        let clients: Vec<(String, i64, i64, Option<i64>)> = self
            .conn
            .prepare("SELECT id, last_seq, acked, at FROM clients WHERE known ORDER BY id")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect()
            })
            .map_err(self.err("read"))?;
        let mut out = Vec::with_capacity(clients.len());
        let mut s = self
            .conn
            .prepare(
                "SELECT seq, kind, digest, reason FROM client_entries WHERE client = ?1 ORDER BY seq",
            )
            .map_err(self.err("read"))?;
        for (id, last_seq, acked, at) in clients {
            let mut entries = BTreeMap::new();
            let mut first_reported = None;
            let rows = s
                .query_map([&id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })
                .map_err(self.err("read"))?;
            for row in rows {
                let (seq, kind, digest, reason) = row.map_err(self.err("read"))?;
                let recorded = if kind == 1 {
                    if seq > acked && first_reported.is_none() {
                        first_reported = Some(u(seq));
                    }
                    Recorded::Rejected {
                        digest,
                        reason: reason.unwrap_or_default(),
                    }
                } else {
                    Recorded::Applied {
                        digest: digest.unwrap_or_default(),
                    }
                };
                entries.insert(u(seq), recorded);
            }
            let last_seq = u(last_seq);
            out.push((
                id,
                ClientDelta {
                    last_seq: Some(last_seq),
                    entries,
                    acked: first_reported.map_or(last_seq, |first| first - 1),
                    at: at.map(Timestamp::from_millis),
                },
            ));
        }
        Ok(out)
    }

    /// Finish an index made by [`Carry::start`] and [`Carry::finish`]:
    /// commit.
    pub fn finish_carry(&self) -> Result<()> {
        self.conn
            .execute_batch("COMMIT")
            .map_err(self.err("carry the index over to the compacted file"))
    }
}

/// The index of a compacted spool, made from a byte copy of the index of
/// the files before the compaction (which must have been up to date with
/// them), in two steps. [`Carry::start`] needs nothing of the compaction
/// and runs beside it: every pending row gets its line's offset in the
/// new file (the live lines lie there one after the other in id order,
/// see [`crate::backend::file::compact::Layout`]). [`Carry::finish`] then drops the
/// dead-letter, delivered and file rows, for the caller to add for the
/// new files before [`Index::finish_carry`], and fails when the copy
/// does not hold exactly the live items the compaction kept. Everything
/// else (the columns, the secondary indexes, the counts, the push state,
/// the receiver's ledger, the high-water mark) stays as it is.
pub(crate) struct Carry {
    ix: Index,
    /// The rows given an offset, their lines' bytes (a newline each
    /// included) and the highest id among them.
    seen: (u64, u64, ItemId),
}

impl Carry {
    /// Open the copy at `path` and give every pending row its new offset.
    pub fn start(path: &Path) -> Result<Carry> {
        let err = |e| Error::sqlite(path, "carry the index over to the compacted file", e);
        let conn = Connection::open(path).map_err(err)?;
        conn.execute_batch(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -4000; BEGIN;",
        )
        .map_err(err)?;
        let ix = Index::unshared(conn, path.to_path_buf());
        // Each line's new offset: the lengths (and newlines) of the lines
        // before it in id order — a running sum, kept by a function that
        // the update calls row by row in rowid (id) order, and refuses
        // any other order. (A window function does the same in a new
        // table, but several times slower, and the secondary indexes would
        // have to be made again.) It also counts the rows and their bytes,
        // to check them against what the compaction kept.
        use std::sync::atomic::{AtomicI64, Ordering};
        let seen = std::sync::Arc::new([AtomicI64::new(0), AtomicI64::new(0), AtomicI64::new(0)]);
        let tally = seen.clone();
        ix.conn
            .create_scalar_function(
                "spool_next_offset",
                2,
                rusqlite::functions::FunctionFlags::SQLITE_UTF8,
                move |ctx| {
                    let id: i64 = ctx.get(0)?;
                    let len: i64 = ctx.get(1)?;
                    let [rows, bytes, last_id] = &*tally;
                    if id <= last_id.load(Ordering::Relaxed) {
                        return Err(rusqlite::Error::UserFunctionError(
                            "rows visited out of id order".into(),
                        ));
                    }
                    last_id.store(id, Ordering::Relaxed);
                    rows.fetch_add(1, Ordering::Relaxed);
                    Ok(bytes.fetch_add(len + 1, Ordering::Relaxed))
                },
            )
            .map_err(err)?;
        ix.conn
            .execute_batch("UPDATE pending SET off = spool_next_offset(id, len)")
            .map_err(err)?;
        ix.conn
            .remove_function("spool_next_offset", 2)
            .map_err(err)?;
        let [rows, bytes, last_id] = &*seen;
        let seen = (
            u(rows.load(Ordering::Relaxed)),
            u(bytes.load(Ordering::Relaxed)),
            u(last_id.load(Ordering::Relaxed)),
        );
        Ok(Carry { ix, seen })
    }

    /// With what the compaction kept: drop the rows of the files it
    /// replaced, and check the offsets given against its layout.
    pub fn finish(self, layout: &Layout) -> Result<Index> {
        let Carry { ix, seen } = self;
        let err = |e| Error::sqlite(&ix.path, "carry the index over to the compacted file", e);
        ix.conn
            .execute_batch(if layout.delivered_kept {
                // The delivered file stayed: its rows and file row stand;
                // no item of it is in the new main file.
                "DELETE FROM dead;
                 UPDATE delivered SET in_main = 0 WHERE in_main <> 0;
                 DELETE FROM pruned;
                 DELETE FROM files WHERE name <> 'delivered';
                 UPDATE state SET dead = 0;"
            } else {
                "DELETE FROM dead;
                 DELETE FROM delivered;
                 DELETE FROM pruned;
                 DELETE FROM files;
                 UPDATE state SET dead = 0, delivered = 0, prune_after = 0;"
            })
            .map_err(err)?;
        let (rows, bytes, last_id) = seen;
        if (rows, bytes.saturating_sub(rows), last_id)
            != (layout.pending, layout.lines_len, layout.max_live)
        {
            return Err(Error::Internal(format!(
                "the index before compaction held {rows} items ({} bytes of lines, up to id {last_id}); the compaction kept {} ({} bytes, up to id {})",
                bytes.saturating_sub(rows),
                layout.pending,
                layout.lines_len,
                layout.max_live
            )));
        }
        if let Some(len) = layout.last_len {
            ix.conn
                .execute(
                    "UPDATE pending SET len = ?2 WHERE id = ?1",
                    params![to_i64(layout.max_live, "item id")?, len as i64],
                )
                .map_err(err)?;
        }
        Ok(ix)
    }
}
