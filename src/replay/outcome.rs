//! Recording what a target did with an item of a local run: done (at
//! once or in a group commit), a failed attempt with its next retry
//! time, or a dead letter (in the spool or handed to the sink).

use super::events::{Event, EventKind, Timing};
use super::{
    over_budget_reason, ItemOutcome, Outcome, ReplayReport, RetryAfter, SyncWorker,
    GROUP_COMMIT_MAX_AGE,
};
use crate::error::Result;
use crate::item::{AttemptUpdate, Evidence, Item, ItemId};
use crate::time::Timestamp;

impl SyncWorker<'_> {
    /// Write the outcome of one attempt to the spool.
    pub(super) fn record(
        &self,
        item: &Item,
        attempt: u32,
        outcome: Outcome,
        timing: Timing,
        report: &mut ReplayReport,
    ) -> Result<ItemOutcome> {
        let now = self.clock.now();
        let result = match outcome {
            Outcome::Delivered(evidence) => {
                let event = self.observer.map(|_| {
                    Event::new(EventKind::Delivered, item, attempt, now)
                        .timed(item, Some(timing))
                        .with_evidence(&evidence)
                });
                self.delivered(item.id, evidence, event)?;
                report.delivered += 1;
                ItemOutcome::Delivered
            }
            Outcome::Rejected { reason } => {
                self.kill(item, attempt, reason, true, Some(timing), report)?
            }
            Outcome::Failed {
                reason,
                retry_after,
            } => {
                if attempt >= self.opts.max_attempts {
                    let reason = format!("{reason} (gave up after {attempt} attempts)");
                    self.kill(item, attempt, reason, false, Some(timing), report)?
                } else {
                    let next_retry_at = match retry_after {
                        Some(RetryAfter::Delay(d)) => now.saturating_add(d),
                        Some(RetryAfter::At(t)) => Timestamp::from_system_time(t).max(now),
                        None => {
                            let unit = (self.rng.lock().unwrap_or_else(|e| e.into_inner()))();
                            now.saturating_add(self.opts.backoff.delay(attempt, unit))
                        }
                    };
                    self.queue.record_attempt(
                        item.id,
                        &AttemptUpdate {
                            attempts: attempt,
                            next_retry_at: Some(next_retry_at),
                            last_error: Some(reason.clone()),
                        },
                    )?;
                    report.failed += 1;
                    self.emit(|| Event {
                        next_retry_at: Some(next_retry_at),
                        ..Event::new(EventKind::Failed, item, attempt, self.clock.now())
                            .timed(item, Some(timing))
                            .with_error(&reason)
                    });
                    ItemOutcome::Failed {
                        error: reason,
                        next_retry_at,
                    }
                }
            }
        };
        if let Some(o) = self.observer {
            o.attempted(item, attempt, &result);
        }
        Ok(result)
    }

    /// True when `item`'s attempts already reach the budget: it is
    /// dead-lettered without another attempt ([`SyncWorker::give_up`]).
    pub(super) fn over_budget(&self, item: &Item) -> bool {
        item.attempts >= self.opts.max_attempts
    }

    /// Dead-letter an item whose attempts already reach the budget,
    /// without an attempt, and report it.
    pub(super) fn give_up(&self, item: &Item, report: &mut ReplayReport) -> Result<ItemOutcome> {
        let reason = over_budget_reason(
            item.attempts,
            self.opts.max_attempts,
            item.last_error.as_deref(),
        );
        let result = self.kill(item, item.attempts, reason, false, None, report)?;
        if let Some(o) = self.observer {
            o.attempted(item, item.attempts, &result);
        }
        Ok(result)
    }

    fn kill(
        &self,
        item: &Item,
        attempt: u32,
        reason: String,
        rejected: bool,
        timing: Option<Timing>,
        report: &mut ReplayReport,
    ) -> Result<ItemOutcome> {
        let update = AttemptUpdate {
            attempts: attempt,
            next_retry_at: None,
            last_error: Some(reason.clone()),
        };
        self.queue.record_attempt(item.id, &update)?;
        match self.sink {
            None => {
                self.queue.dead_letter(item.id, &reason)?;
            }
            Some(sink) => {
                let mut dead = item.clone();
                update.apply(&mut dead);
                if let Err(sink_error) = sink.accept(&dead, &reason) {
                    report.failed += 1;
                    self.emit(|| {
                        Event::new(EventKind::Failed, item, attempt, self.clock.now())
                            .timed(item, timing)
                            .with_error(&format!(
                                "{reason}; the dead-letter sink failed: {sink_error}"
                            ))
                    });
                    return Ok(ItemOutcome::SinkFailed {
                        error: reason,
                        sink_error,
                    });
                }
                self.queue.deliver(&[(item.id, Evidence::Sink)])?;
            }
        }
        report.dead_lettered += 1;
        if rejected {
            report.rejected += 1;
        }
        self.emit(|| {
            Event::new(EventKind::DeadLettered, item, attempt, self.clock.now())
                .timed(item, timing)
                .with_error(&reason)
        });
        Ok(ItemOutcome::DeadLettered {
            error: reason,
            rejected,
        })
    }

    /// Mark a delivered item done: at once, or as part of a group.
    /// `event` is told once the item is committed as done.
    fn delivered(&self, id: ItemId, evidence: Evidence, event: Option<Event>) -> Result<()> {
        if self.opts.commit_every <= 1 {
            self.queue.deliver(&[(id, evidence)])?;
            if let Some(e) = event {
                self.emit(|| Event {
                    ts: self.clock.now(),
                    ..e
                });
            }
            return Ok(());
        }
        let now = self.clock.now();
        let full = {
            let mut g = self.done_group.lock().unwrap_or_else(|e| e.into_inner());
            g.0.push((id, evidence, event));
            let first = *g.1.get_or_insert(now);
            g.0.len() >= self.opts.commit_every || now.since(first) >= GROUP_COMMIT_MAX_AGE
        };
        if full {
            self.flush_done()?;
        }
        Ok(())
    }

    /// Commit the pending group of delivered items.
    pub(super) fn flush_done(&self) -> Result<()> {
        let ids = {
            let mut g = self.done_group.lock().unwrap_or_else(|e| e.into_inner());
            g.1 = None;
            std::mem::take(&mut g.0)
        };
        if !ids.is_empty() {
            let done: Vec<(ItemId, Evidence)> = ids.iter().map(|(i, e, _)| (*i, *e)).collect();
            self.queue.deliver(&done)?;
            let ts = self.clock.now();
            for (_, _, event) in ids {
                if let Some(e) = event {
                    self.emit(|| Event { ts, ..e });
                }
            }
        }
        Ok(())
    }
}

/// Delivered items not yet committed as done, with their evidence, and
/// when the oldest was delivered.
/// The event of each is told after the group's commit.
pub(super) type DoneGroup = (Vec<(ItemId, Evidence, Option<Event>)>, Option<Timestamp>);
