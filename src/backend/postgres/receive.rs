//! The receiving side of push (SPEC §7) in PostgreSQL: [`ReceiveTxn`]
//! inside the one transaction that [`super::PostgresQueue::receive`]
//! opens, with the spool row locked, so that concurrent `spool serve`
//! processes on one spool apply each client's entries once.

use super::conn::Tx;
use super::rows::{id_param, text, u64_of};
use super::PostgresQueue;
use crate::error::{Error, Result};
use crate::item::{ClientSummary, Enqueued, ItemId, NewItem};
use crate::push::receiver::{EntryRecord, ReceiveRead, ReceiveTxn};
use crate::push::wire::Rejected;
use crate::time::Timestamp;
use std::collections::HashMap;

/// Rows held back before they are written (see [`PgReceive`]).
const HELD_ROWS: usize = 1000;
/// Payload bytes of held items that are written at once, whatever their
/// number: holding them copies what the requests already hold.
const HELD_BYTES: usize = 4 << 20;

/// One receiving transaction; keeps the high-water mark and the depth so
/// that the counts are written once at the end.
///
/// New items without a coalesce key and entry records are held back and
/// written in one statement each (one round trip for many rows): before
/// anything reads what they would change, when [`HELD_ROWS`] or
/// [`HELD_BYTES`] are held, and at [`PgReceive::finish`]. A key among the
/// held items is found in `held_keys`, so a keyed entry sees the entries
/// before it.
pub(super) struct PgReceive<'q, 't, 'c> {
    q: &'q PostgresQueue,
    tx: &'t mut Tx<'c>,
    high_water: ItemId,
    depth: u64,
    max_depth: Option<u64>,
    added: u64,
    /// Pending items that enqueued items replaced (their coalesce key).
    removed: u64,
    held: Vec<(ItemId, NewItem)>,
    held_bytes: usize,
    held_keys: HashMap<String, ItemId>,
    records: Vec<Record>,
}

/// An entry's outcome not written to `push_entries` yet.
struct Record {
    client: String,
    seq: i64,
    outcome: &'static str,
    digest: Option<String>,
    reason: Option<String>,
}

impl<'q, 't, 'c> PgReceive<'q, 't, 'c> {
    pub fn new(
        q: &'q PostgresQueue,
        tx: &'t mut Tx<'c>,
        high_water: ItemId,
        depth: u64,
        max_depth: Option<u64>,
    ) -> Self {
        PgReceive {
            q,
            tx,
            high_water,
            depth,
            max_depth,
            added: 0,
            removed: 0,
            held: Vec::new(),
            held_bytes: 0,
            held_keys: HashMap::new(),
            records: Vec::new(),
        }
    }

    /// Insert the held items.
    fn write_items(&mut self) -> Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let rows: Vec<(ItemId, &NewItem)> = self.held.iter().map(|(id, it)| (*id, it)).collect();
        self.q.insert_fresh(self.tx, &rows)?;
        self.held.clear();
        self.held_bytes = 0;
        self.held_keys.clear();
        Ok(())
    }

    /// Insert the held entry records.
    fn write_records(&mut self) -> Result<()> {
        if self.records.is_empty() {
            return Ok(());
        }
        let clients: Vec<String> = self.records.iter().map(|r| text(&r.client)).collect();
        let seqs: Vec<i64> = self.records.iter().map(|r| r.seq).collect();
        let outcomes: Vec<&str> = self.records.iter().map(|r| r.outcome).collect();
        let digests: Vec<Option<String>> = self
            .records
            .iter()
            .map(|r| r.digest.as_deref().map(text))
            .collect();
        let reasons: Vec<Option<String>> = self
            .records
            .iter()
            .map(|r| r.reason.as_deref().map(text))
            .collect();
        self.tx.execute(
            "INSERT INTO {s}.push_entries (spool, client_id, seq, outcome, digest, reason) \
             SELECT $1, t.c, t.s, t.o, t.d, t.r \
             FROM unnest($2::text[], $3::int8[], $4::text[], $5::text[], $6::text[]) AS t(c, s, o, d, r)",
            &[self.q.spool(), &clients, &seqs, &outcomes, &digests, &reasons],
        )?;
        self.records.clear();
        Ok(())
    }

    /// The pending items now.
    fn depth(&self) -> u64 {
        (self.depth + self.added).saturating_sub(self.removed)
    }

    /// Write what is held back and the counts (the held items and the
    /// counts in one statement), and tell listeners when items came.
    pub fn finish(mut self, start_high_water: ItemId) -> Result<()> {
        self.write_records()?;
        let depth = self.added as i64 - self.removed as i64;
        if self.held.is_empty() {
            if self.high_water > start_high_water || depth != 0 {
                self.q
                    .adjust_and_notify(self.tx, self.high_water, depth, 0)?;
            }
            return Ok(());
        }
        let rows: Vec<(ItemId, &NewItem)> = self.held.iter().map(|(id, it)| (*id, it)).collect();
        self.q
            .insert_fresh_and_adjust(self.tx, &rows, self.high_water, depth)
    }
}

impl ReceiveRead for PgReceive<'_, '_, '_> {
    fn last_seq(&mut self, client: &str) -> Result<u64> {
        client_last_seq(self.q, self.tx, client)
    }

    fn digest(&mut self, client: &str, seq: u64) -> Result<Option<String>> {
        self.write_records()?;
        let row = self.tx.query_opt(
            "SELECT digest FROM {s}.push_entries WHERE spool = $1 AND client_id = $2 AND seq = $3",
            &[self.q.spool(), &text(client), &id_param(seq)],
        )?;
        Ok(row.and_then(|r| r.get(0)))
    }

    fn rejects(&mut self, client: &str, after: u64) -> Result<Vec<Rejected>> {
        self.write_records()?;
        client_rejects(self.q, self.tx, client, after)
    }
}

impl ReceiveTxn for PgReceive<'_, '_, '_> {
    fn enqueue(&mut self, item: NewItem) -> Result<Option<Enqueued>> {
        let owner = match self.held_keys.get(&item.key) {
            Some(&id) => Some(id),
            None => self.q.key_owner(self.tx, &item.key)?,
        };
        if let Some(id) = owner {
            return Ok(Some(Enqueued {
                id,
                deduplicated: true,
                ..Default::default()
            }));
        }
        let ck = item.coalesce_key.as_deref();
        if ck.is_some() {
            // What it replaces may be held.
            self.write_items()?;
        }
        if let Some(bound) = self.max_depth {
            let replaceable = match ck {
                Some(ck) => self.q.coalescible_count(self.tx, ck)?,
                None => 0,
            };
            if self.depth().saturating_sub(replaceable) >= bound {
                return Ok(None);
            }
        }
        let replaced = match ck {
            Some(ck) => self.q.coalesce(self.tx, ck)?,
            None => Vec::new(),
        };
        self.removed += replaced.len() as u64;
        let next = self
            .high_water
            .checked_add(1)
            .ok_or_else(|| Error::Internal("item ids exhausted".into()))?;
        if ck.is_some() {
            self.q.insert_fresh(self.tx, &[(next, &item)])?;
        } else {
            if !item.key.is_empty() {
                self.held_keys.insert(item.key.clone(), next);
            }
            self.held_bytes += item.payload.len();
            self.held.push((next, item));
            if self.held.len() >= HELD_ROWS || self.held_bytes >= HELD_BYTES {
                self.write_items()?;
            }
        }
        self.high_water = next;
        self.added += 1;
        Ok(Some(Enqueued {
            id: next,
            replaced,
            ..Default::default()
        }))
    }

    fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()> {
        let (outcome, digest, reason) = match record {
            EntryRecord::Applied { digest } => ("applied", Some(digest), None),
            EntryRecord::Rejected { digest, reason } => ("rejected", digest, Some(reason)),
        };
        self.records.push(Record {
            client: client.to_string(),
            seq: id_param(seq),
            outcome,
            digest: digest.map(str::to_string),
            reason: reason.map(str::to_string),
        });
        if self.records.len() >= HELD_ROWS {
            self.write_records()?;
        }
        Ok(())
    }

    fn set_last_seq(&mut self, client: &str, seq: u64) -> Result<()> {
        let now = self.q.now_param();
        self.tx.execute(
            "INSERT INTO {s}.push_clients (spool, client_id, last_seq, updated_at, served_by) \
             VALUES ($1, $2, $3, COALESCE($4::int8, {now}), $5) \
             ON CONFLICT (spool, client_id) DO UPDATE \
             SET last_seq = greatest({s}.push_clients.last_seq, excluded.last_seq), \
                 updated_at = excluded.updated_at, served_by = excluded.served_by",
            &[
                self.q.spool(),
                &text(client),
                &id_param(seq),
                &now,
                &instance(),
            ],
        )?;
        Ok(())
    }

    fn prune_rejects(&mut self, client: &str, upto: u64) -> Result<()> {
        self.write_records()?;
        // Both statements walk push_entries_unacked: what is not
        // acknowledged yet, never the client's whole history.
        for sql in [
            "DELETE FROM {s}.push_entries \
             WHERE spool = $1 AND client_id = $2 AND seq <= $3 AND reason IS NOT NULL \
               AND digest IS NULL",
            "UPDATE {s}.push_entries SET reason = NULL \
             WHERE spool = $1 AND client_id = $2 AND seq <= $3 AND reason IS NOT NULL",
        ] {
            self.tx
                .execute(sql, &[self.q.spool(), &text(client), &id_param(upto)])?;
        }
        Ok(())
    }
}

fn client_last_seq(q: &PostgresQueue, tx: &mut Tx<'_>, client: &str) -> Result<u64> {
    let row = tx.query_opt(
        "SELECT last_seq FROM {s}.push_clients WHERE spool = $1 AND client_id = $2",
        &[q.spool(), &text(client)],
    )?;
    Ok(row.map_or(0, |r| u64_of(r.get(0))))
}

fn client_rejects(
    q: &PostgresQueue,
    tx: &mut Tx<'_>,
    client: &str,
    after: u64,
) -> Result<Vec<Rejected>> {
    let rows = tx.query(
        "SELECT seq, reason FROM {s}.push_entries \
         WHERE spool = $1 AND client_id = $2 AND seq > $3 AND reason IS NOT NULL ORDER BY seq",
        &[q.spool(), &text(client), &id_param(after)],
    )?;
    Ok(rows
        .iter()
        .map(|r| Rejected {
            seq: u64_of(r.get(0)),
            error: r.get(1),
        })
        .collect())
}

/// This process as a receiver, `host:pid`: what `spool clients` shows of
/// the instance that last served a client.
fn instance() -> &'static str {
    static INSTANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    INSTANCE.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: gethostname(2) writes at most `buf.len()` bytes into
        // `buf`, which lives for the call.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let host = match rc {
            0 if end > 0 => String::from_utf8_lossy(&buf[..end]).into_owned(),
            _ => "localhost".to_string(),
        };
        format!("{host}:{}", std::process::id())
    })
}

/// Every client of the receiving spool, by id.
pub(super) fn clients(q: &PostgresQueue, tx: &mut Tx<'_>) -> Result<Vec<ClientSummary>> {
    let rows = tx.query(
        if q.served_by {
            "SELECT client_id, last_seq, updated_at, served_by FROM {s}.push_clients \
             WHERE spool = $1 ORDER BY client_id"
        } else {
            "SELECT client_id, last_seq, updated_at, NULL::text FROM {s}.push_clients \
             WHERE spool = $1 ORDER BY client_id"
        },
        &[q.spool()],
    )?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let client_id: String = r.get(0);
        let rejected = client_rejects(q, tx, &client_id, 0)?;
        out.push(ClientSummary {
            client_id,
            last_seq: u64_of(r.get(1)),
            rejected,
            updated_at: r.get::<_, Option<i64>>(2).map(Timestamp::from_millis),
            served_by: r.get(3),
        });
    }
    Ok(out)
}
