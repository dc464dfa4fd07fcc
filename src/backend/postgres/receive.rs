//! The receiving side of push (SPEC §7) in PostgreSQL: [`ReceiveTxn`]
//! inside the one transaction that [`Queue::receive`](crate::Queue::receive)
//! opens, with the spool row locked, so that concurrent `spool serve`
//! processes on one spool apply each client's entries once.

use super::conn::Tx;
use super::rows::{id_param, text, u64_of};
use super::PostgresQueue;
use crate::backend::held::Held;
use crate::backend::policy;
use crate::error::Result;
use crate::item::{ClientSummary, Enqueued, ItemId, NewItem};
use crate::push::receiver::{EntryRecord, ReceiveRead, ReceiveTxn};
use crate::push::wire::Rejected;
use crate::time::Timestamp;

/// Rows held back before they are written (see [`Held`]).
const HELD_ROWS: usize = 1000;

/// One receiving transaction; keeps the high-water mark and the depth so
/// that the counts are written once at the end. New items without a
/// coalesce key and entry records are [`Held`] and written in one
/// statement each: one round trip for many rows.
pub(super) struct PgReceive<'q, 't, 'c> {
    q: &'q PostgresQueue,
    tx: &'t mut Tx<'c>,
    high_water: ItemId,
    depth: u64,
    max_depth: Option<u64>,
    added: u64,
    /// Pending items that enqueued items replaced (their coalesce key).
    removed: u64,
    held: Held,
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
            held: Held::new(HELD_ROWS),
        }
    }

    /// Insert the held items.
    fn write_items(&mut self) -> Result<()> {
        let items = self.held.take_items();
        if items.is_empty() {
            return Ok(());
        }
        let rows: Vec<(ItemId, &NewItem)> = items.iter().map(|(id, it)| (*id, it)).collect();
        self.q.insert_fresh(self.tx, &rows)
    }

    /// Insert the held entry records.
    fn write_records(&mut self) -> Result<()> {
        let records = self.held.take_records();
        if records.is_empty() {
            return Ok(());
        }
        let clients: Vec<String> = records.iter().map(|r| text(&r.client)).collect();
        let seqs: Vec<i64> = records.iter().map(|r| id_param(r.seq)).collect();
        let outcomes: Vec<&str> = records.iter().map(|r| r.outcome).collect();
        let digests: Vec<Option<String>> = records
            .iter()
            .map(|r| r.digest.as_deref().map(text))
            .collect();
        let reasons: Vec<Option<String>> = records
            .iter()
            .map(|r| r.reason.as_deref().map(text))
            .collect();
        self.tx.execute(
            "INSERT INTO {s}.push_entries (spool, client_id, seq, outcome, digest, reason) \
             SELECT $1, t.c, t.s, t.o, t.d, t.r \
             FROM unnest($2::text[], $3::int8[], $4::text[], $5::text[], $6::text[]) AS t(c, s, o, d, r)",
            &[self.q.spool(), &clients, &seqs, &outcomes, &digests, &reasons],
        )?;
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
        let items = self.held.take_items();
        if items.is_empty() {
            if self.high_water > start_high_water || depth != 0 {
                self.q
                    .adjust_and_notify(self.tx, self.high_water, depth, 0)?;
            }
            return Ok(());
        }
        let rows: Vec<(ItemId, &NewItem)> = items.iter().map(|(id, it)| (*id, it)).collect();
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
        let owner = match self.held.owner(&item.key) {
            Some(id) => Some(id),
            None => self.q.key_owner(self.tx, &item.key)?,
        };
        if let Some(id) = owner {
            return Ok(Some(Enqueued::dedup(id)));
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
        let next = policy::next_id(self.high_water)?;
        if ck.is_some() {
            self.q.insert_fresh(self.tx, &[(next, &item)])?;
        } else if self.held.hold_item(next, item) {
            self.write_items()?;
        }
        self.high_water = next;
        self.added += 1;
        Ok(Some(Enqueued {
            replaced,
            ..Enqueued::fresh(next)
        }))
    }

    fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()> {
        if self.held.hold_record(client, seq, record) {
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
