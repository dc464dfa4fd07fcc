//! One run of the [`SyncWorker`] over a local spool: the walk in id
//! order, one item at a time or with up to `concurrency` in flight, and
//! what stops it early (stop, `--limit`, `--deadline`, `--ordered`).
//! A spool that many replayers share is run by [`super::leased`].

use super::events::{end_timing, start_timing};
use super::groups::GroupGate;
use super::{over_budget_cause, Delivery, ItemOutcome, ReplayReport, StopReason, SyncWorker};
use crate::error::{Error, Result};
use crate::item::{Item, ItemId};
use crate::queue::PAGE_SIZE;
use crate::time::Timestamp;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

impl SyncWorker<'_> {
    /// Run once over the spool. Concurrent calls are serialised. If stop
    /// was asked for before the run began, it returns at once (and the
    /// flag is reset).
    pub fn run(&self) -> Result<ReplayReport> {
        let _serial = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut report = ReplayReport::default();
        if self.stop.0.swap(false, Ordering::SeqCst) {
            report.stopped = Some(StopReason::Stopped);
            return Ok(report);
        }
        let uuid = self.queue.uuid().unwrap_or_default();
        if let Some(o) = self.observer {
            let total = if o.wants_total() {
                Some(self.expected_attempts()?)
            } else {
                None
            };
            o.started(total);
        }
        let started = self.clock.now();
        let mut ctx = RunCtx {
            uuid,
            started,
            attempted: 0,
            groups: GroupGate::default(),
        };
        let leasing = self.queue.leasing().filter(|_| !self.opts.dry_run);
        let ran = if let Some(leasing) = leasing {
            self.run_leased(leasing, &mut ctx, &mut report)
        } else if self.opts.concurrency > 1 && !self.opts.dry_run {
            self.run_concurrent(&mut ctx, &mut report)
        } else {
            self.run_sequential(&mut ctx, &mut report)
        };
        // Commit the last group whatever happened, so that a failed run
        // does not make delivered items look pending.
        let flushed = self.flush_done();
        let flushed = match leasing {
            Some(l) => flushed.and(self.flush_leased(l)),
            None => flushed,
        };
        ran?;
        flushed?;
        if report.stopped == Some(StopReason::Stopped) {
            self.stop.0.store(false, Ordering::SeqCst);
        }
        Ok(report)
    }

    /// How many items a run starting now expects to attempt: the due
    /// items, at most the limit.
    fn expected_attempts(&self) -> Result<u64> {
        self.queue
            .due_count(self.clock.now(), self.opts.ignore_backoff, self.opts.limit)
    }

    /// Why no further item may be started now, if so.
    pub(super) fn halt(&self, ctx: &RunCtx) -> Option<StopReason> {
        if self.stop.is_stopped() {
            return Some(StopReason::Stopped);
        }
        if self.opts.limit.is_some_and(|l| ctx.attempted >= l) {
            return Some(StopReason::Limit);
        }
        if let Some(d) = self.opts.deadline {
            if self.clock.now().since(ctx.started) >= d {
                return Some(StopReason::Deadline);
            }
        }
        None
    }

    /// True when replay should attempt `item` now; counts the skips.
    fn is_candidate(&self, item: &Item, report: &mut ReplayReport) -> bool {
        if item.held {
            report.held += 1;
        } else if !self.opts.ignore_backoff && !item.is_due(self.clock.now()) {
            report.not_due += 1;
        } else {
            return true;
        }
        if let Some(o) = self.observer {
            o.skipped(item);
        }
        false
    }

    fn key_for(&self, ctx: &RunCtx, item: &Item) -> String {
        if item.key.is_empty() {
            format!("{}:{}", ctx.uuid, item.id)
        } else {
            item.key.clone()
        }
    }

    /// Walk the spool page by page, calling `each` for every candidate;
    /// `each` returns false to end the walk.
    fn walk(
        &self,
        ctx: &mut RunCtx,
        report: &mut ReplayReport,
        mut each: impl FnMut(Item, &mut RunCtx, &mut ReplayReport) -> Result<bool>,
    ) -> Result<()> {
        loop {
            let mut after: ItemId = 0;
            let mut ended = false;
            'sweep: loop {
                let page = self.queue.page(after, PAGE_SIZE)?;
                let n = page.len();
                for item in page {
                    after = item.id;
                    if !ctx.groups.admit(&item, report) {
                        continue;
                    }
                    if !self.is_candidate(&item, report) {
                        continue;
                    }
                    if !each(item, ctx, report)? {
                        ended = true;
                        break 'sweep;
                    }
                }
                if n < PAGE_SIZE {
                    break;
                }
            }
            if ended || !ctx.groups.next_sweep(report) {
                return Ok(());
            }
            // The next sweep must not see delivered items as pending.
            self.flush_done()?;
        }
    }

    fn run_sequential(&self, ctx: &mut RunCtx, report: &mut ReplayReport) -> Result<()> {
        self.walk(ctx, report, |item, ctx, report| {
            if let Some(why) = self.halt(ctx) {
                report.stopped = Some(why);
                report.left_due = true;
                return Ok(false);
            }
            ctx.attempted += 1;
            let attempt = item.attempts.saturating_add(1);
            if self.opts.dry_run {
                // What the real run would do: an item at its budget is
                // dead-lettered without an attempt (SPEC §4).
                let (would, attempt) = if self.over_budget(&item) {
                    report.would_dead_letter += 1;
                    let cause = over_budget_cause(item.attempts, self.opts.max_attempts);
                    (ItemOutcome::WouldDeadLetter { cause }, item.attempts)
                } else {
                    report.would_attempt += 1;
                    (ItemOutcome::WouldAttempt, attempt)
                };
                if let Some(o) = self.observer {
                    o.attempted(&item, attempt, &would);
                }
                return Ok(true);
            }
            let recorded = if self.over_budget(&item) {
                self.give_up(&item, report)?
            } else {
                let key = self.key_for(ctx, &item);
                let started = start_timing(&self.clock);
                let outcome = self
                    .target
                    .deliver(&Delivery {
                        item: &item,
                        attempt,
                        idempotency_key: &key,
                        spool_path: self.spool_path.as_deref(),
                    })
                    .map_err(Error::Unsupported)?;
                self.record(&item, attempt, outcome, end_timing(started), report)?
            };
            if recorded.left_pending() {
                ctx.groups.left(&item);
            }
            if self.opts.ordered && matches!(recorded, ItemOutcome::Failed { .. }) {
                report.stopped = Some(StopReason::OrderedFailure);
                report.left_due = true;
                return Ok(false);
            }
            Ok(true)
        })
    }

    /// Deliver with up to `concurrency` items in flight. Each of that many
    /// threads takes the next candidate, delivers it and records the
    /// outcome itself, under one lock that guards the walk and the report;
    /// no item passes from thread to thread, so a delivery costs no
    /// wake-up beyond its own round trip. The first error (reading the
    /// spool, recording an outcome, a target that cannot work) stops every
    /// thread from taking another item; the deliveries in flight finish
    /// and are recorded.
    fn run_concurrent(&self, ctx: &mut RunCtx, report: &mut ReplayReport) -> Result<()> {
        loop {
            let ended = self.sweep_concurrent(ctx, report)?;
            if ended || !ctx.groups.next_sweep(report) {
                return Ok(());
            }
            // The next sweep must not see delivered items as pending.
            self.flush_done()?;
        }
    }

    /// One sweep of [`SyncWorker::run_concurrent`]; true when it ended
    /// early (a halt).
    fn sweep_concurrent(&self, ctx: &mut RunCtx, report: &mut ReplayReport) -> Result<bool> {
        let shared = Mutex::new(Feed {
            ctx,
            report,
            page: Vec::new().into_iter(),
            after: 0,
            last_page: false,
            closed: false,
            walk_done: false,
            error: None,
            fatal: None,
        });
        let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
        std::thread::scope(|s| {
            for _ in 0..self.opts.concurrency {
                s.spawn(|| loop {
                    let Some((item, attempt, key)) = self.take(&mut lock()) else {
                        break;
                    };
                    // `None`: at the budget already, not delivered.
                    let out = (!self.over_budget(&item)).then(|| {
                        let started = start_timing(&self.clock);
                        let out = self.target.deliver(&Delivery {
                            item: &item,
                            attempt,
                            idempotency_key: &key,
                            spool_path: self.spool_path.as_deref(),
                        });
                        out.map(|o| (o, end_timing(started)))
                    });
                    let mut feed = lock();
                    let feed = &mut *feed;
                    let recorded = match out {
                        None => Some(self.give_up(&item, feed.report)),
                        Some(Ok((outcome, timing))) => {
                            Some(self.record(&item, attempt, outcome, timing, feed.report))
                        }
                        Some(Err(e)) => {
                            feed.fatal.get_or_insert(Error::Unsupported(e));
                            feed.closed = true;
                            None
                        }
                    };
                    if let Some(recorded) = recorded {
                        match recorded {
                            Ok(recorded) => {
                                if recorded.left_pending() {
                                    feed.ctx.groups.left(&item);
                                }
                            }
                            Err(e) => {
                                feed.error.get_or_insert(e);
                                feed.closed = true;
                            }
                        }
                    }
                });
            }
        });
        let feed = shared.into_inner().unwrap_or_else(|e| e.into_inner());
        let ended = feed.report.stopped.is_some();
        match feed.error.or(feed.fatal) {
            Some(e) => Err(e),
            None => Ok(ended),
        }
    }

    /// The next item a concurrent run should deliver, with its attempt
    /// number and key; `None` when the walk is over or was stopped.
    fn take(&self, feed: &mut Feed<'_>) -> Option<(Item, u32, String)> {
        loop {
            if feed.closed {
                return None;
            }
            if let Some((id, group)) = feed.ctx.groups.ready.pop_front() {
                match self.queue.get(id) {
                    Ok(Some(item)) => {
                        if !self.is_candidate(&item, feed.report) {
                            feed.ctx.groups.blocked(id, &group, feed.report);
                            continue;
                        }
                        if let Some(why) = self.halt(feed.ctx) {
                            feed.report.stopped = Some(why);
                            feed.report.left_due = true;
                            feed.closed = true;
                            return None;
                        }
                        feed.ctx.groups.took(id, feed.report);
                        feed.ctx.attempted += 1;
                        let attempt = item.attempts.saturating_add(1);
                        let key = self.key_for(feed.ctx, &item);
                        return Some((item, attempt, key));
                    }
                    Ok(None) => {
                        // Gone meanwhile (an operator's `done`): the
                        // group's next remembered item leads now.
                        feed.report.group_waiting = feed.report.group_waiting.saturating_sub(1);
                        feed.ctx.groups.hand_on(&group);
                        continue;
                    }
                    Err(e) => {
                        feed.error.get_or_insert(e);
                        feed.closed = true;
                        return None;
                    }
                }
            }
            if feed.walk_done {
                return None;
            }
            let Some(item) = feed.page.next() else {
                if feed.last_page {
                    feed.walk_done = true;
                    return None;
                }
                match self.queue.page(feed.after, PAGE_SIZE) {
                    Ok(page) => {
                        feed.last_page = page.len() < PAGE_SIZE;
                        feed.page = page.into_iter();
                    }
                    Err(e) => {
                        feed.error.get_or_insert(e);
                        feed.closed = true;
                    }
                }
                continue;
            };
            feed.after = item.id;
            if !feed.ctx.groups.admit(&item, feed.report) {
                continue;
            }
            if !self.is_candidate(&item, feed.report) {
                continue;
            }
            if let Some(why) = self.halt(feed.ctx) {
                feed.report.stopped = Some(why);
                feed.report.left_due = true;
                feed.closed = true;
                return None;
            }
            feed.ctx.attempted += 1;
            let attempt = item.attempts.saturating_add(1);
            let key = self.key_for(feed.ctx, &item);
            return Some((item, attempt, key));
        }
    }
}

/// What the threads of a concurrent run share: the walk through the
/// spool and the report.
struct Feed<'r> {
    ctx: &'r mut RunCtx,
    report: &'r mut ReplayReport,
    /// The rest of the current page.
    page: std::vec::IntoIter<Item>,
    /// The last id taken from a page.
    after: ItemId,
    /// The current page was the spool's last.
    last_page: bool,
    /// No thread takes another item.
    closed: bool,
    /// The walk through the spool is over: only items handed on within
    /// their group are still taken.
    walk_done: bool,
    /// The first error reading or writing the spool.
    error: Option<Error>,
    /// The first error of a target that cannot work.
    fatal: Option<Error>,
}

/// One run's state: the spool's uuid (for default keys), when the run
/// began, how many items it attempted, and its ordering groups.
pub(super) struct RunCtx {
    pub(super) uuid: String,
    pub(super) started: Timestamp,
    pub(super) attempted: u64,
    /// Ordering groups in the current sweep.
    pub(super) groups: GroupGate,
}
