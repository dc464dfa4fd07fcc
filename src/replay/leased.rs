//! Leased replay: a spool that many replayers share is run by claiming
//! due items under a lease, delivering them and recording each outcome
//! under the claim's token.

use super::events::{end_timing, start_timing, Event, EventKind, Timing};
use super::run::RunCtx;
use super::{
    over_budget_reason, Delivery, ItemOutcome, Outcome, ReplayReport, RetryAfter, StopReason,
    SyncWorker, GROUP_COMMIT_MAX_AGE,
};
use crate::error::{Error, Result};
use crate::item::{Evidence, Item, ItemId};
use crate::queue::{Claimed, LeaseToken, Leasing};
use crate::time::Timestamp;
use std::sync::Mutex;
use std::time::Duration;

/// Delivered claims not yet committed as done, and when the oldest was
/// delivered.
/// The event of each is told after the group's commit.
pub(super) type LeasedGroup = (
    Vec<(Item, LeaseToken, Evidence, Option<Event>)>,
    Option<Timestamp>,
);

/// What the threads of a leased run share.
struct LeaseFeed<'r> {
    ctx: &'r mut RunCtx,
    report: &'r mut ReplayReport,
    /// No thread claims another item.
    closed: bool,
    /// The first error reading or writing the spool.
    error: Option<Error>,
    /// The first error of a target that cannot work.
    fatal: Option<Error>,
}

impl SyncWorker<'_> {
    /// Leased replay (a spool that many replayers share): each of
    /// `concurrency` threads claims due items, delivers them and records
    /// each outcome under the claim's token. Claims are taken in groups
    /// of up to `commit_every` (at most 64) so that one commit of done
    /// items matches one claim. An item whose attempt count, counted at
    /// its claim, is already past the budget (earlier claims whose
    /// replayer died before recording anything) is dead-lettered without
    /// another delivery. Items claimed but not delivered when the run
    /// halts (a stop, the deadline, an `--ordered` failure) are released,
    /// their attempt taken back.
    pub(super) fn run_leased(
        &self,
        leasing: &dyn Leasing,
        ctx: &mut RunCtx,
        report: &mut ReplayReport,
    ) -> Result<()> {
        let (held, waiting) = leasing.skipped_now(self.opts.ignore_backoff)?;
        report.held = held;
        report.not_due = waiting;
        // One token for the whole run: its claims never take an item the
        // run attempted already.
        let run = leasing.run_token()?;
        let batch = self.opts.commit_every.clamp(1, 64);
        let shared = Mutex::new(LeaseFeed {
            ctx,
            report,
            closed: false,
            error: None,
            fatal: None,
        });
        {
            let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
            let worker = || loop {
                // Reserve what this claim may take under --limit.
                let want = {
                    let mut f = lock();
                    if f.closed {
                        break;
                    }
                    if let Some(why) = self.halt(f.ctx) {
                        if why != StopReason::Limit {
                            f.report.stopped = Some(why);
                            f.report.left_due = true;
                        } else {
                            f.report.stopped.get_or_insert(why);
                        }
                        f.closed = true;
                        break;
                    }
                    let left = self
                        .opts
                        .limit
                        .map_or(u64::MAX, |l| l.saturating_sub(f.ctx.attempted));
                    let n = (batch as u64).min(left) as usize;
                    f.ctx.attempted += n as u64;
                    n
                };
                let claimed_at = std::time::Instant::now();
                let claims =
                    match leasing.claim_for(run, want, self.opts.lease, self.opts.ignore_backoff) {
                        Ok(c) => c,
                        Err(e) => {
                            let mut f = lock();
                            f.error.get_or_insert(e);
                            f.closed = true;
                            break;
                        }
                    };
                {
                    let mut f = lock();
                    f.ctx.attempted -= (want - claims.len()) as u64;
                    if claims.is_empty() {
                        // Nothing due is left (for this replayer).
                        if f.report.stopped == Some(StopReason::Limit) {
                            f.report.stopped = None;
                        }
                        f.closed = true;
                        break;
                    }
                }
                let mut rest = claims.into_iter();
                while let Some(c) = rest.next() {
                    let halted = {
                        let mut f = lock();
                        let why = if f.closed && (f.error.is_some() || f.fatal.is_some()) {
                            Some(StopReason::Stopped)
                        } else {
                            self.halt(f.ctx).filter(|w| *w != StopReason::Limit)
                        };
                        if let Some(why) = why {
                            if f.error.is_none() && f.fatal.is_none() {
                                f.report.stopped = Some(why);
                                f.report.left_due = true;
                            }
                            f.closed = true;
                            true
                        } else {
                            false
                        }
                    };
                    // A lease about to run out is given back rather than
                    // used: another replayer could take the item over while
                    // it is being delivered here.
                    let lease_left = self.opts.lease.saturating_sub(claimed_at.elapsed());
                    if halted || lease_left < self.opts.lease / 10 {
                        let back: Vec<(ItemId, LeaseToken)> = std::iter::once(&c)
                            .chain(rest.as_slice())
                            .map(|c| (c.item.id, c.token))
                            .collect();
                        if let Err(e) = leasing.release(&back) {
                            lock().error.get_or_insert(e);
                        }
                        break;
                    }
                    match self.deliver_claimed(leasing, &c, &lock) {
                        Ok(ItemOutcome::Failed { .. }) if self.opts.ordered => {
                            let mut f = lock();
                            f.report.stopped = Some(StopReason::OrderedFailure);
                            f.report.left_due = true;
                            f.closed = true;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            let mut f = lock();
                            f.closed = true;
                            match e {
                                Error::Unsupported(_) => f.fatal.get_or_insert(e),
                                e => f.error.get_or_insert(e),
                            };
                        }
                    }
                }
            };
            if self.opts.concurrency <= 1 {
                worker();
            } else {
                std::thread::scope(|s| {
                    for _ in 0..self.opts.concurrency {
                        s.spawn(worker);
                    }
                });
            }
        }
        let feed = shared.into_inner().unwrap_or_else(|e| e.into_inner());
        match feed.error.or(feed.fatal) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Deliver one claimed item and record its outcome under its token.
    fn deliver_claimed<'g, 'r: 'g>(
        &self,
        leasing: &dyn Leasing,
        c: &Claimed,
        lock: &dyn Fn() -> std::sync::MutexGuard<'g, LeaseFeed<'r>>,
    ) -> Result<ItemOutcome> {
        let item = &c.item;
        let attempt = item.attempts;
        let was_lost = std::cell::Cell::new(false);
        let lost = |r: Result<bool>| -> Result<()> {
            if !r? {
                was_lost.set(true);
                if let Some(o) = self.observer {
                    o.lease_lost(item);
                }
            }
            Ok(())
        };
        if attempt > self.opts.max_attempts {
            // The attempts already reach the budget before this claim (an
            // operator set them, the budget was lowered, or earlier claims
            // spent it without recording an outcome): dead-lettered
            // without another attempt, the claim's count taken back.
            let before = attempt - 1;
            let reason =
                over_budget_reason(before, self.opts.max_attempts, item.last_error.as_deref());
            let out = self.kill_claimed(leasing, c, reason, false, true, &lost)?;
            self.tell_claimed(item, was_lost.get(), before, None, &out);
            let mut f = lock();
            f.report.dead_lettered += 1;
            if let Some(o) = self.observer {
                let mut shown = item.clone();
                shown.attempts = before;
                o.attempted(&shown, before, &out);
            }
            return Ok(out);
        }
        let key = if item.key.is_empty() {
            format!("{}:{}", lock().ctx.uuid, item.id)
        } else {
            item.key.clone()
        };
        let started = start_timing(&self.clock);
        let outcome = self
            .target
            .deliver(&Delivery {
                item,
                attempt,
                idempotency_key: &key,
                spool_path: self.spool_path.as_deref(),
            })
            .map_err(Error::Unsupported);
        let timing = end_timing(started);
        let outcome = match outcome {
            Ok(o) => o,
            Err(e) => {
                // The target cannot work: give the item back untouched.
                leasing.release(&[(item.id, c.token)])?;
                return Err(e);
            }
        };
        let now = self.clock.now();
        let result = match outcome {
            Outcome::Delivered(evidence) => {
                let event = self.observer.map(|_| {
                    Event::new(EventKind::Delivered, item, attempt, now)
                        .timed(item, Some(timing))
                        .with_evidence(&evidence)
                });
                self.delivered_leased(leasing, c, evidence, event)?;
                ItemOutcome::Delivered
            }
            Outcome::Rejected { reason } => {
                self.kill_claimed(leasing, c, reason, true, false, &lost)?
            }
            Outcome::Failed {
                reason,
                retry_after,
            } => {
                if attempt >= self.opts.max_attempts {
                    let reason = format!("{reason} (gave up after {attempt} attempts)");
                    self.kill_claimed(leasing, c, reason, false, false, &lost)?
                } else {
                    let next_retry_at = match retry_after {
                        Some(RetryAfter::Delay(d)) => now.saturating_add(d),
                        Some(RetryAfter::At(t)) => Timestamp::from_system_time(t).max(now),
                        None => {
                            let unit = (self.rng.lock().unwrap_or_else(|e| e.into_inner()))();
                            now.saturating_add(self.opts.backoff.delay(attempt, unit))
                        }
                    };
                    lost(leasing.retry_later(item.id, c.token, next_retry_at.since(now), &reason))?;
                    ItemOutcome::Failed {
                        error: reason,
                        next_retry_at,
                    }
                }
            }
        };
        if result != ItemOutcome::Delivered {
            // A delivered claim's event waits for its group's commit.
            self.tell_claimed(item, was_lost.get(), attempt, Some(timing), &result);
        }
        let mut f = lock();
        match &result {
            ItemOutcome::Delivered => f.report.delivered += 1,
            ItemOutcome::Failed { .. } | ItemOutcome::SinkFailed { .. } => f.report.failed += 1,
            ItemOutcome::DeadLettered { rejected, .. } => {
                f.report.dead_lettered += 1;
                if *rejected {
                    f.report.rejected += 1;
                }
            }
            ItemOutcome::WouldAttempt | ItemOutcome::WouldDeadLetter { .. } => {}
        }
        if let Some(o) = self.observer {
            o.attempted(item, attempt, &result);
        }
        Ok(result)
    }

    /// Tell the event of a claimed item's recorded outcome `out` (not a
    /// delivery: see [`SyncWorker::flush_leased`]), or `lease_lost` when
    /// recording it found the lease gone.
    fn tell_claimed(
        &self,
        item: &Item,
        lost: bool,
        attempt: u32,
        timing: Option<Timing>,
        out: &ItemOutcome,
    ) {
        let Some(o) = self.observer else {
            return;
        };
        let now = self.clock.now();
        let event = |kind| Event::new(kind, item, attempt, now).timed(item, timing);
        let e = match out {
            _ if lost => event(EventKind::LeaseLost),
            ItemOutcome::DeadLettered { error, .. } => {
                event(EventKind::DeadLettered).with_error(error)
            }
            ItemOutcome::Failed {
                error,
                next_retry_at,
            } => Event {
                next_retry_at: Some(*next_retry_at),
                ..event(EventKind::Failed).with_error(error)
            },
            ItemOutcome::SinkFailed { error, sink_error } => event(EventKind::Failed).with_error(
                &format!("{error}; the dead-letter sink failed: {sink_error}"),
            ),
            ItemOutcome::Delivered
            | ItemOutcome::WouldAttempt
            | ItemOutcome::WouldDeadLetter { .. } => return,
        };
        o.recorded(&e);
    }

    /// Dead-letter a claimed item (or hand it to the sink and remove it);
    /// with `unattempted`, one that was not delivered (the claim's count
    /// is taken back).
    fn kill_claimed(
        &self,
        leasing: &dyn Leasing,
        c: &Claimed,
        reason: String,
        rejected: bool,
        unattempted: bool,
        lost: &dyn Fn(Result<bool>) -> Result<()>,
    ) -> Result<ItemOutcome> {
        match self.sink {
            None if unattempted => {
                lost(leasing.dead_letter_unattempted(c.item.id, c.token, &reason))?
            }
            None => lost(leasing.dead_letter_claimed(c.item.id, c.token, &reason))?,
            Some(sink) => {
                let mut dead = c.item.clone();
                if unattempted {
                    dead.attempts = dead.attempts.saturating_sub(1);
                }
                dead.last_error = Some(reason.clone());
                dead.next_retry_at = None;
                if let Err(sink_error) = sink.accept(&dead, &reason) {
                    lost(leasing.retry_later(c.item.id, c.token, Duration::ZERO, &reason))?;
                    return Ok(ItemOutcome::SinkFailed {
                        error: reason,
                        sink_error,
                    });
                }
                lost(
                    leasing
                        .complete(&[(c.item.id, c.token, Evidence::Sink)])
                        .map(|v| v.iter().all(|b| *b)),
                )?;
            }
        }
        Ok(ItemOutcome::DeadLettered {
            error: reason,
            rejected,
        })
    }

    /// Record a delivered claim as done: at once, or as part of a group.
    fn delivered_leased(
        &self,
        leasing: &dyn Leasing,
        c: &Claimed,
        evidence: Evidence,
        event: Option<Event>,
    ) -> Result<()> {
        let now = self.clock.now();
        let full = {
            let mut g = self.leased_group.lock().unwrap_or_else(|e| e.into_inner());
            g.0.push((c.item.clone(), c.token, evidence, event));
            let first = *g.1.get_or_insert(now);
            g.0.len() >= self.opts.commit_every.max(1) || now.since(first) >= GROUP_COMMIT_MAX_AGE
        };
        if full {
            self.flush_leased(leasing)?;
        }
        Ok(())
    }

    /// Commit the group of delivered claims; report the leases lost.
    pub(super) fn flush_leased(&self, leasing: &dyn Leasing) -> Result<()> {
        let group = {
            let mut g = self.leased_group.lock().unwrap_or_else(|e| e.into_inner());
            g.1 = None;
            std::mem::take(&mut g.0)
        };
        if group.is_empty() {
            return Ok(());
        }
        let claims: Vec<(ItemId, LeaseToken, Evidence)> =
            group.iter().map(|(i, t, e, _)| (i.id, *t, *e)).collect();
        let kept = leasing.complete(&claims)?;
        if let Some(o) = self.observer {
            let ts = self.clock.now();
            for ((item, _, _, event), ok) in group.into_iter().zip(kept) {
                if !ok {
                    o.lease_lost(&item);
                }
                if let Some(e) = event {
                    o.recorded(&if ok {
                        Event { ts, ..e }
                    } else {
                        Event {
                            kind: EventKind::LeaseLost,
                            ts,
                            status: None,
                            exit_code: None,
                            ..e
                        }
                    });
                }
            }
        }
        Ok(())
    }
}
