//! Sending the requests of a push run and applying the receiver's
//! answers ([`crate::push::sender::decide`]): acks, resends, halving,
//! backoff and stops.

use super::batch::{Batch, Planned};
use super::{PushAnswer, PushEvent, PushHalt, PushReport, PushSender, Run, SLEEP_SLICE};
use crate::error::{ErrorKind, Result};
use crate::item::{AttemptUpdate, Item};
use crate::push::retry_after::RetryAfter;
use crate::push::sender::{decide, Decision, Reply, Sent, Stop};
use crate::push::wire::{self, OutEntry};
use crate::replay::events::{Event, EventKind};
use crate::replay::ItemOutcome;
use std::time::Duration;

impl PushSender<'_> {
    pub(super) fn send_all(&self, run: &mut Run, report: &mut PushReport) -> Result<()> {
        loop {
            if self.stop.is_stopped() {
                return self.halt(report, PushHalt::Signal);
            }
            if self.deadline_passed(run) {
                return self.halt(report, PushHalt::Deadline);
            }
            let batch = self.build(run, report)?;
            let Some(first) = batch.entries.first().map(Planned::seq) else {
                if batch.limited {
                    report.halt = Some(PushHalt::Limit);
                    report.left_due = true;
                }
                return Ok(());
            };
            let last = first + batch.entries.len() as u64 - 1;
            let out: Vec<OutEntry<'_>> = batch.entries.iter().map(Planned::out).collect();
            let body = wire::encode_request(&run.uuid, batch.state.acked, &out);
            let items = batch.items().count();
            self.event(PushEvent::Sending {
                first,
                last,
                items,
                skips: batch.entries.len() - items,
                bytes: body.len(),
            });
            report.requests += 1;
            let answer = self.transport.send(&body);
            let reply = match &answer {
                PushAnswer::Http {
                    status,
                    body,
                    retry_after,
                } => Reply::Http {
                    status: *status,
                    body,
                    retry_after: *retry_after,
                },
                PushAnswer::Failed(error) => Reply::Transport { error },
            };
            let sent = Sent {
                batch: first..last + 1,
                watermark: batch.state.acked,
                highest_assigned: batch.state.last_assigned,
            };
            match decide(&sent, reply) {
                Decision::Ack(ack) => {
                    if let Some(claimed) = ack.over_ack {
                        self.event(PushEvent::OverAck {
                            claimed,
                            highest: sent.highest_assigned,
                        });
                    }
                    let (applied, duplicates) = match &answer {
                        PushAnswer::Http { body, .. } => wire::parse_response(body)
                            .map(|r| (r.applied, r.duplicates))
                            .unwrap_or_default(),
                        PushAnswer::Failed(_) => (0, 0),
                    };
                    if ack.last_seq <= ack.previous {
                        let reason = format!(
                            "the push receiver acknowledged nothing of sequence numbers \
                             {first}..={last} (its last_seq is at or below {})",
                            ack.previous
                        );
                        if self.failed(run, report, &batch, &reason, None)? {
                            return Ok(());
                        }
                        continue;
                    }
                    self.settle(&batch, &ack, report)?;
                    report.duplicates += duplicates;
                    self.event(PushEvent::Acked {
                        last_seq: ack.last_seq,
                        applied,
                        duplicates,
                    });
                    run.failures = 0;
                    run.resend_from = None;
                    run.max_entries = self.opts.batch;
                }
                Decision::Resend { from } => {
                    self.event(PushEvent::Resend { from });
                    run.resend_from = Some(from);
                }
                Decision::Halve { max_entries } => {
                    run.max_entries = usize::try_from(max_entries).unwrap_or(1).max(1);
                    // Never again a body as large as one refused.
                    run.max_bytes = run.max_bytes.min(body.len() as u64 - 1).max(1);
                    self.event(PushEvent::Halved {
                        max_entries: run.max_entries,
                        max_bytes: run.max_bytes,
                    });
                }
                Decision::DeadLetter { seq, reason } => {
                    let reason = self.transport.redact(&reason);
                    let Some(item) = batch.find(seq) else {
                        // A lone skip entry is a few bytes: a receiver that
                        // calls it too large cannot be pushed to.
                        let stop = Stop {
                            kind: ErrorKind::Data,
                            cause: crate::push::StopCause::Refused,
                            message: format!(
                                "the push receiver refused a request of one skip entry as too \
                                 large: {reason}"
                            ),
                        };
                        return self.halt(report, PushHalt::Refused(stop));
                    };
                    let attempt = item.attempts.saturating_add(1);
                    self.queue.record_attempt(
                        item.id,
                        &AttemptUpdate {
                            attempts: attempt,
                            next_retry_at: None,
                            last_error: Some(reason.clone()),
                        },
                    )?;
                    if self.queue.dead_letter(item.id, &reason)? {
                        report.too_large += 1;
                        if let Some(o) = self.observer {
                            let now = self.clock.now();
                            o.recorded(
                                &Event::new(EventKind::DeadLettered, item, attempt, now)
                                    .queued_until(item, now)
                                    .with_error(&reason),
                            );
                            o.attempted(
                                item,
                                attempt,
                                &ItemOutcome::DeadLettered {
                                    error: reason,
                                    rejected: true,
                                },
                            );
                        }
                    }
                }
                Decision::Backoff {
                    retry_after,
                    reason,
                } => {
                    let reason = self.transport.redact(&reason);
                    if self.failed(run, report, &batch, &reason, retry_after)? {
                        return Ok(());
                    }
                }
                Decision::Stop(mut stop) => {
                    stop.message = self.transport.redact(&stop.message);
                    return self.halt(report, PushHalt::Refused(stop));
                }
            }
        }
    }

    /// A failed request: count an attempt on every item of the batch,
    /// then wait before the same entries go out again. True when the run
    /// ends instead (budget, deadline, a too-long Retry-After).
    fn failed(
        &self,
        run: &mut Run,
        report: &mut PushReport,
        batch: &Batch,
        reason: &str,
        retry_after: Option<RetryAfter>,
    ) -> Result<bool> {
        run.failures += 1;
        report.failed_requests += 1;
        report.last_error = Some(reason.to_string());
        let now = self.clock.now();
        // The time the receiver asked for, kept with the items so that a
        // later run (or `--follow`) does not send before it.
        let asked = retry_after.map(|ra| match ra {
            RetryAfter::Delay(d) => d,
            RetryAfter::At(t) => t
                .duration_since(now.to_system_time())
                .unwrap_or(Duration::ZERO),
        });
        let not_before = asked.map(|d| now.saturating_add(d));
        for item in batch.items() {
            self.queue.record_attempt(
                item.id,
                &AttemptUpdate {
                    attempts: item.attempts.saturating_add(1),
                    next_retry_at: not_before,
                    last_error: Some(reason.to_string()),
                },
            )?;
            if let Some(o) = self.observer {
                let now = self.clock.now();
                o.recorded(&Event {
                    next_retry_at: not_before,
                    ..Event::new(
                        EventKind::Failed,
                        item,
                        item.attempts.saturating_add(1),
                        now,
                    )
                    .queued_until(item, now)
                    .with_error(reason)
                });
            }
        }
        let failed = |retry_in| PushEvent::RequestFailed {
            reason,
            failures: run.failures,
            max: self.opts.max_attempts,
            retry_in,
        };
        if run.failures >= self.opts.max_attempts {
            self.event(failed(None));
            self.halt(report, PushHalt::Budget)?;
            return Ok(true);
        }
        let unit = (self.rng.lock().unwrap_or_else(|e| e.into_inner()))();
        let mut wait = self.opts.backoff.delay(run.failures, unit);
        if let Some(asked) = asked {
            if asked > self.opts.backoff.max {
                self.event(failed(None));
                self.halt(report, PushHalt::RetryAfter(asked))?;
                return Ok(true);
            }
            wait = wait.max(asked);
        }
        if self.wait_passes_deadline(run, wait) {
            self.event(failed(None));
            self.halt(report, PushHalt::Deadline)?;
            return Ok(true);
        }
        self.event(failed(Some(wait)));
        self.pause(wait);
        Ok(false)
    }

    /// Sleep for `d` on the clock, in slices, ending early on a stop.
    fn pause(&self, d: Duration) {
        let mut left = d;
        while !left.is_zero() && !self.stop.is_stopped() {
            let step = left.min(SLEEP_SLICE);
            self.clock.sleep(step);
            left -= step;
        }
    }

    /// Apply an acknowledgement to the spool and report every settled
    /// item.
    fn settle(
        &self,
        batch: &Batch,
        ack: &crate::push::sender::Ack,
        report: &mut PushReport,
    ) -> Result<()> {
        // The items the ack covers, for the observer: the batch's, and any
        // beyond it that the receiver had from an earlier request.
        let mut covered: Vec<Item> = batch
            .items()
            .filter(|i| i.push_seq.is_some_and(|s| s <= ack.last_seq))
            .cloned()
            .collect();
        let batch_last = batch.entries.last().map_or(0, Planned::seq);
        if ack.last_seq > batch_last && self.observer.is_some() {
            let n = usize::try_from(ack.last_seq - batch_last).unwrap_or(usize::MAX);
            covered.extend(self.queue.push_in_flight(batch_last, n)?);
        }
        let rejected: Vec<(u64, String)> = ack
            .rejected
            .iter()
            .map(|r| (r.seq, r.error.clone()))
            .collect();
        let done = self.queue.push_ack(ack.last_seq, &rejected)?;
        let acknowledged = done.acked.saturating_sub(ack.previous);
        report.acknowledged += acknowledged;
        report.delivered += done.delivered.len() as u64;
        report.rejected += done.rejected.len() as u64;
        report.skipped +=
            acknowledged.saturating_sub((done.delivered.len() + done.rejected.len()) as u64);
        if let Some(o) = self.observer {
            let now = self.clock.now();
            for item in &covered {
                let attempt = item.attempts.saturating_add(1);
                if done.delivered.contains(&item.id) {
                    o.recorded(
                        &Event::new(EventKind::Acked, item, attempt, now).queued_until(item, now),
                    );
                    o.attempted(item, attempt, &ItemOutcome::Delivered);
                } else if done.rejected.contains(&item.id) {
                    let error = item
                        .push_seq
                        .and_then(|s| ack.reason(s))
                        .unwrap_or_default()
                        .to_string();
                    o.recorded(&Event {
                        error: Some(error.clone()),
                        ..Event::new(EventKind::Rejected, item, attempt, now)
                            .queued_until(item, now)
                    });
                    o.attempted(
                        item,
                        attempt,
                        &ItemOutcome::DeadLettered {
                            error,
                            rejected: true,
                        },
                    );
                }
            }
        }
        Ok(())
    }
}
