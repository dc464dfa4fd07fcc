//! Leased replay on a PostgreSQL spool ([`Leasing`]): the claim
//! statements (`FOR UPDATE SKIP LOCKED`, the attempt counted at the
//! claim, one fencing token per replay run, never an item the run already
//! attempted, only the heads of ordering groups), outcomes fenced on the
//! token, the exclusive advisory lock of ordered and push replays, and
//! `LISTEN` for enqueues.

use super::conn::{self, pg_error};
use super::rows::{id_param, item_from_row, text, u64_of};
use super::{channel, PostgresQueue};
use crate::error::{Error, Result};
use crate::item::{Evidence, Item, ItemId};
use crate::queue::{Claimed, LeaseToken, Leasing};
use crate::time::Timestamp;
use postgres::fallible_iterator::FallibleIterator;
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// The claim: due fresh items by id and due waiting items by the time they
/// became due, each locked with `SKIP LOCKED` so that concurrent claimers
/// pass each other instead of queueing; the oldest `$2` of both are
/// leased under the run's token `$5` and their attempt counted. An item
/// that carries `$5` already was claimed by this run before (and failed:
/// its outcome keeps the token), and is left out: one run attempts an
/// item at most once.
///
/// Ordering groups (SPEC §9): only the head of a group — no pending item
/// of the group with a smaller id, whether held, waiting or leased — and
/// only while no other item of the group is leased (a dead letter
/// requeued under its old id behind a later item in delivery) can be
/// claimed, so one claim takes at most one item per group, and two
/// replayers never hold two items of one group: the next item stays
/// blocked by the head's row until the head is delivered (deleted) or
/// dead-lettered. Each test is one probe of `items_group` or
/// `items_group_leased`; items without a group skip both.
pub(super) const CLAIM: &str = concat!(
    "WITH fresh AS ( \
        SELECT c.id FROM {s}.items c \
        WHERE c.spool = $1 AND NOT c.held AND c.next_retry_at IS NULL AND c.lease_until IS NULL \
          AND c.push_seq IS NULL AND c.lease_token IS DISTINCT FROM $5 AND ",
    group_head!(),
    " ORDER BY c.id LIMIT $2 FOR UPDATE SKIP LOCKED), \
     waiting AS ( \
        SELECT c.id FROM {s}.items c \
        WHERE c.spool = $1 AND NOT c.held AND (c.next_retry_at IS NOT NULL OR c.lease_until IS NOT NULL) \
          AND c.push_seq IS NULL AND greatest(c.next_retry_at, c.lease_until) <= COALESCE($3::int8, {now}) \
          AND c.lease_token IS DISTINCT FROM $5 AND ",
    group_head!(),
    " ORDER BY greatest(c.next_retry_at, c.lease_until), c.id LIMIT $2 FOR UPDATE SKIP LOCKED), \
     picked AS (SELECT id FROM fresh UNION ALL SELECT id FROM waiting ORDER BY id LIMIT $2) ",
    claim_update!()
);

/// The claim of `--ignore-backoff`: retry times do not count, leases,
/// ordering groups and the run's own earlier attempts do.
const CLAIM_IGNORING_BACKOFF: &str = concat!(
    "WITH picked AS ( \
        SELECT c.id FROM {s}.items c \
        WHERE c.spool = $1 AND NOT c.held AND c.push_seq IS NULL \
          AND (c.lease_until IS NULL OR c.lease_until <= COALESCE($3::int8, {now})) \
          AND c.lease_token IS DISTINCT FROM $5 AND ",
    group_head!(),
    " ORDER BY c.id LIMIT $2 FOR UPDATE SKIP LOCKED) ",
    claim_update!()
);

/// The group rule of a claim for candidate `c` (see [`CLAIM`]).
macro_rules! group_head {
    () => {
        group_head!("$3")
    };
    ($now:literal) => {
        concat!(
            "(c.grp IS NULL OR ( \
            NOT EXISTS (SELECT 1 FROM {s}.items e \
                WHERE e.spool = $1 AND e.grp = c.grp AND e.grp IS NOT NULL AND e.id < c.id) \
            AND NOT EXISTS (SELECT 1 FROM {s}.items e \
                WHERE e.spool = $1 AND e.grp = c.grp AND e.grp IS NOT NULL \
                  AND e.lease_until IS NOT NULL AND e.lease_until > COALESCE(",
            $now,
            "::int8, {now}))))"
        )
    };
}
use group_head;

/// The end of a claim: lease what `picked` holds under the run's token.
macro_rules! claim_update {
    () => {
        "UPDATE {s}.items i SET attempts = i.attempts + 1, \
            lease_until = COALESCE($3::int8, {now}) + $4, lease_token = $5 \
         FROM picked WHERE i.spool = $1 AND i.id = picked.id \
         RETURNING i.id, i.payload, i.key, i.attempts, i.enqueued_at, i.next_retry_at, i.last_error, \
            i.held, i.push_seq, i.grp, i.coalesce_key, i.lease_token, i.lease_until"
    };
}
use claim_update;

/// The item columns of a due page, `c` the items table (see
/// [`item_from_row`]); schema version 1 has no group or coalesce key.
macro_rules! due_columns {
    (v2) => {
        "SELECT c.id, c.payload, c.key, c.attempts, c.enqueued_at, c.next_retry_at, \
            c.last_error, c.held, c.push_seq, c.grp, c.coalesce_key FROM {s}.items c "
    };
    (v1) => {
        "SELECT c.id, c.payload, c.key, c.attempts, c.enqueued_at, c.next_retry_at, \
            c.last_error, c.held, c.push_seq, NULL::text, NULL::text FROM {s}.items c "
    };
}

/// The due rule ([`crate::Queue::due_page`]) for item `c`, as a claim
/// sees it, besides its group: not held, not in flight to a push
/// receiver, no retry time after `$3` (unless `$5`: ignore backoff), no
/// running lease. `$1` is the spool.
macro_rules! due_alone {
    () => {
        "c.spool = $1 AND NOT c.held AND c.push_seq IS NULL \
         AND ($5 OR c.next_retry_at IS NULL OR c.next_retry_at <= COALESCE($3::int8, {now})) \
         AND (c.lease_until IS NULL OR c.lease_until <= COALESCE($3::int8, {now}))"
    };
}

/// The due items after `$2`, at most `$4`, in id order: what claims at
/// `$3` would take, in the order of ids.
const DUE_PAGE: (&str, &str) = (
    concat!(
        due_columns!(v2),
        "WHERE c.id > $2 AND ",
        due_alone!(),
        " AND ",
        group_head!(),
        " ORDER BY c.id LIMIT $4"
    ),
    concat!(
        due_columns!(v1),
        "WHERE c.id > $2 AND ",
        due_alone!(),
        " ORDER BY c.id LIMIT $4"
    ),
);

/// The number of due items at `$2`: the depth, less the held items and
/// those waiting for a retry time or a running lease (through
/// `items_held` and `items_waiting`), less the items that would be due
/// alone but are in flight to a push receiver or wait behind their
/// ordering group (through `items_push_seq` and `items_group`: the
/// in-flight and grouped items only). `$waiting` is the waiting test for
/// item `c`.
macro_rules! due_count {
    ($waiting:expr, $rest:expr) => {
        concat!(
            "SELECT s.depth \
               - (SELECT count(*) FROM {s}.items c WHERE c.spool = $1 AND c.held) \
               - (SELECT count(*) FROM {s}.items c WHERE c.spool = $1 AND NOT c.held \
                   AND (c.next_retry_at IS NOT NULL OR c.lease_until IS NOT NULL) AND ",
            $waiting,
            ") - (SELECT count(*) FROM {s}.items c WHERE c.spool = $1 AND c.push_seq IS NOT NULL \
                   AND NOT c.held AND NOT COALESCE(",
            $waiting,
            ", false)) ",
            $rest,
            " FROM {s}.spools s WHERE s.name = $1"
        )
    };
}

/// The grouped items of [`due_count!`] that wait behind their group.
macro_rules! group_waiting {
    ($waiting:expr) => {
        concat!(
            "- (SELECT count(*) FROM {s}.items c WHERE c.spool = $1 AND c.grp IS NOT NULL \
                AND c.push_seq IS NULL AND NOT c.held AND NOT COALESCE(",
            $waiting,
            ", false) AND NOT ",
            group_head!("$2"),
            ")"
        )
    };
}

/// Waiting for a retry time or a running lease at `$2`.
macro_rules! waiting_at {
    () => {
        "greatest(c.next_retry_at, c.lease_until) > COALESCE($2::int8, {now})"
    };
}

/// With `--ignore-backoff`: waiting for a running lease only.
macro_rules! leased_at {
    () => {
        "c.lease_until > COALESCE($2::int8, {now})"
    };
}

/// [`due_count!`]: `(schema version 2, version 1)` for the rule with
/// retry times, then ignoring them.
const DUE_COUNT: [(&str, &str); 2] = [
    (
        due_count!(waiting_at!(), group_waiting!(waiting_at!())),
        due_count!(waiting_at!(), ""),
    ),
    (
        due_count!(leased_at!(), group_waiting!(leased_at!())),
        due_count!(leased_at!(), ""),
    ),
];

impl PostgresQueue {
    /// [`crate::Queue::due_page`]: the claim's rule, page by page.
    pub(super) fn due_items(
        &self,
        now: Timestamp,
        ignore_backoff: bool,
        after: ItemId,
        limit: usize,
    ) -> Result<Vec<Item>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = self.clock.as_ref().map(|_| now.as_millis());
        let limit = limit.min(i64::MAX as usize) as i64;
        self.txn("read", false, |tx| {
            let rows = tx.query(
                self.pick(DUE_PAGE),
                &[
                    self.spool(),
                    &id_param(after),
                    &now,
                    &limit,
                    &ignore_backoff,
                ],
            )?;
            Ok(rows.iter().map(item_from_row).collect())
        })
    }

    /// [`crate::Queue::due_count`]: counted from the indexes.
    pub(super) fn count_due(&self, now: Timestamp, ignore_backoff: bool) -> Result<u64> {
        let now = self.clock.as_ref().map(|_| now.as_millis());
        self.txn("count due items in", false, |tx| {
            let row = tx.query_one(
                self.pick(DUE_COUNT[usize::from(ignore_backoff)]),
                &[self.spool(), &now],
            )?;
            Ok(u64_of(row.get(0)))
        })
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

impl Leasing for PostgresQueue {
    fn run_token(&self) -> Result<LeaseToken> {
        self.txn("start a replay run of", true, |tx| {
            let row = tx.query_one("SELECT nextval('{s}.lease_tokens')", &[])?;
            Ok(row.get(0))
        })
    }

    fn claim_for(
        &self,
        run: LeaseToken,
        limit: usize,
        lease: Duration,
        ignore_backoff: bool,
    ) -> Result<Vec<Claimed>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = limit.min(10_000) as i64;
        self.txn("claim items of", true, |tx| {
            let sql = if ignore_backoff {
                CLAIM_IGNORING_BACKOFF
            } else {
                CLAIM
            };
            let rows = tx.query(
                sql,
                &[
                    self.spool(),
                    &limit,
                    &self.now_param(),
                    &millis(lease),
                    &run,
                ],
            )?;
            let mut out: Vec<Claimed> = rows
                .iter()
                .map(|r| Claimed {
                    item: item_from_row(r),
                    token: r.get(11),
                    lease_until: Timestamp::from_millis(r.get(12)),
                })
                .collect();
            out.sort_by_key(|c| c.item.id);
            Ok(out)
        })
    }

    fn complete(&self, done: &[(ItemId, LeaseToken, Evidence)]) -> Result<Vec<bool>> {
        if done.is_empty() {
            return Ok(Vec::new());
        }
        // Fenced on the token: a replayer whose lease ran out removes
        // (and retains) nothing. The first evidence given for a claim
        // counts.
        let mut seen = HashSet::new();
        let mut ids = Vec::with_capacity(done.len());
        let mut tokens = Vec::with_capacity(done.len());
        let mut evidence = Vec::with_capacity(done.len());
        for (id, token, ev) in done {
            if seen.insert((*id, *token)) {
                ids.push(id_param(*id));
                tokens.push(*token);
                evidence.push(ev.encode());
            }
        }
        self.txn("mark items done in", true, |tx| {
            let spool = self.lock_spool(tx)?;
            let removed = self.deliver_in(tx, &spool, &ids, &evidence, Some(&tokens), true)?;
            Ok(done.iter().map(|(id, _, _)| removed.contains(id)).collect())
        })
    }

    fn retry_later(
        &self,
        id: ItemId,
        token: LeaseToken,
        retry_in: Duration,
        last_error: &str,
    ) -> Result<bool> {
        self.txn("record an attempt in", true, |tx| {
            let n = tx.execute(
                "UPDATE {s}.items SET next_retry_at = COALESCE($4::int8, {now}) + $5, last_error = $6, \
                 lease_until = NULL WHERE spool = $1 AND id = $2 AND lease_token = $3",
                &[
                    self.spool(),
                    &id_param(id),
                    &token,
                    &self.now_param(),
                    &millis(retry_in),
                    &text(last_error),
                ],
            )?;
            Ok(n > 0)
        })
    }

    fn dead_letter_claimed(&self, id: ItemId, token: LeaseToken, last_error: &str) -> Result<bool> {
        self.txn("dead-letter an item in", true, |tx| {
            self.lock_spool(tx)?;
            self.kill(tx, id, last_error, true, Some(token), false)
        })
    }

    fn dead_letter_unattempted(
        &self,
        id: ItemId,
        token: LeaseToken,
        last_error: &str,
    ) -> Result<bool> {
        self.txn("dead-letter an item in", true, |tx| {
            self.lock_spool(tx)?;
            self.kill(tx, id, last_error, true, Some(token), true)
        })
    }

    fn release(&self, claims: &[(ItemId, LeaseToken)]) -> Result<()> {
        if claims.is_empty() {
            return Ok(());
        }
        self.txn("release claimed items of", true, |tx| {
            let ids: Vec<i64> = claims.iter().map(|(i, _)| id_param(*i)).collect();
            let tokens: Vec<i64> = claims.iter().map(|(_, t)| *t).collect();
            tx.execute(
                "UPDATE {s}.items i SET lease_until = NULL, lease_token = NULL, \
                    attempts = greatest(i.attempts - 1, 0) \
                 FROM unnest($2::int8[], $3::int8[]) AS t(id, tok) \
                 WHERE i.spool = $1 AND i.id = t.id AND i.lease_token = t.tok",
                &[self.spool(), &ids, &tokens],
            )?;
            Ok(())
        })
    }

    fn skipped_now(&self, ignore_backoff: bool) -> Result<(u64, u64)> {
        self.txn("count items of", false, |tx| {
            let row = tx.query_one(
                "SELECT (SELECT count(*) FROM {s}.items WHERE spool = $1 AND held), \
                        (SELECT count(*) FROM {s}.items WHERE spool = $1 AND NOT held \
                          AND (next_retry_at IS NOT NULL OR lease_until IS NOT NULL) \
                          AND greatest(CASE WHEN $3 THEN NULL ELSE next_retry_at END, lease_until) \
                              > COALESCE($2::int8, {now}))",
                &[self.spool(), &self.now_param(), &ignore_backoff],
            )?;
            Ok((u64_of(row.get(0)), u64_of(row.get(1))))
        })
    }

    fn leases_after(&self, after: ItemId, limit: usize) -> Result<Vec<(ItemId, Timestamp)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.txn("read the leases of", false, |tx| {
            let rows = tx.query(
                // `lease_until IS NOT NULL`: the partial index
                // items_leased (schema version 7) holds only leased rows.
                "SELECT id, lease_until FROM {s}.items WHERE spool = $1 AND id > $2 \
                 AND lease_until IS NOT NULL AND lease_until > COALESCE($3::int8, {now}) \
                 ORDER BY id LIMIT $4",
                &[self.spool(), &id_param(after), &self.now_param(), &limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| (u64_of(r.get(0)), Timestamp::from_millis(r.get(1))))
                .collect())
        })
    }

    fn lock_exclusive(&self, wait: Duration) -> Result<()> {
        let key = format!("spool replay {}.{}", self.target.schema, self.target.spool);
        let deadline = Instant::now() + wait;
        loop {
            let got = {
                let mut g = self.lock("lock the replay of")?;
                let conn = Self::conn_of(&mut g)?;
                conn.client
                    .query_one("SELECT pg_try_advisory_lock(hashtext($1))", &[&key])
                    .map_err(|e| pg_error(&self.target, &self.display, "lock the replay of", e))?
                    .get::<_, bool>(0)
            };
            if got {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let holder = {
                    let mut g = self.lock("lock the replay of")?;
                    let conn = Self::conn_of(&mut g)?;
                    conn.client
                        .query_opt(
                            "SELECT a.pid, COALESCE(a.client_addr::text, 'local'), a.application_name \
                             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                             WHERE l.locktype = 'advisory' AND l.granted \
                               AND l.objid = (hashtext($1)::int8 & 4294967295)::oid LIMIT 1",
                            &[&key],
                        )
                        .ok()
                        .flatten()
                        .map(|r| {
                            format!(
                                "server process {} for {} ({})",
                                r.get::<_, i32>(0),
                                r.get::<_, String>(1),
                                r.get::<_, String>(2)
                            )
                        })
                };
                return Err(Error::ReplayLocked {
                    path: self.display.clone().into(),
                    holder: format!(
                        "an ordered or push replay holds its advisory lock: {}",
                        holder.unwrap_or_else(|| "holder unknown".into())
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(100).min(deadline - Instant::now()));
        }
    }

    fn unlock_exclusive(&self) -> Result<()> {
        let key = format!("spool replay {}.{}", self.target.schema, self.target.spool);
        let mut g = self.lock("unlock the replay of")?;
        let conn = Self::conn_of(&mut g)?;
        conn.client
            .query_one("SELECT pg_advisory_unlock(hashtext($1))", &[&key])
            .map_err(|e| pg_error(&self.target, &self.display, "unlock the replay of", e))?;
        Ok(())
    }

    fn wait_for_enqueue(&self, timeout: Duration) -> Result<bool> {
        let mut g = self.lock("wait for enqueues into")?;
        let conn = Self::conn_of(&mut g)?;
        let err = |e| pg_error(&self.target, &self.display, "wait for enqueues into", e);
        {
            let mut listening = self.listening.lock().unwrap_or_else(|e| e.into_inner());
            if !*listening {
                conn.client
                    .batch_execute(&format!(
                        "LISTEN {}",
                        conn::quote_ident(&channel(&self.target.schema))
                    ))
                    .map_err(err)?;
                *listening = true;
            }
        }
        let deadline = Instant::now() + timeout;
        let mut notes = conn.client.notifications();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = notes.timeout_iter(left).next();
            match next {
                Ok(Some(n)) => {
                    if n.payload() == self.target.spool {
                        // Take what else arrived: one wake-up per burst.
                        while let Ok(Some(_)) = notes.iter().next() {}
                        return Ok(true);
                    }
                    if left.is_zero() {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(err(e)),
                Ok(None) => return Ok(false),
            }
        }
    }
}
