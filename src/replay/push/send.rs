//! Sending the requests of a push run and applying the receiver's
//! answers ([`crate::push::sender::decide`]): acks, resends, halving,
//! backoff and stops.
//!
//! Up to [`super::PushOptions::pipeline`] requests are in flight at once,
//! each on a worker thread of its own (the transport keeps a connection
//! per thread). The window is a queue: requests go out in sequence
//! order, each starting just past the one before, and their answers are
//! applied in the same order, whatever order they arrive in. An
//! acknowledgement is cumulative, so an answer that an earlier one
//! already covered is moot. Any other decision (a failure, a 409 gap
//! because a request overtook the one before it, a 413, a refusal)
//! closes the window first: the answers of the later requests are
//! collected and only their acknowledgements applied, and then the
//! decision is applied as with one request at a time — the stream
//! resumes from the watermark.

use super::batch::{Batch, Planned};
use super::{PushAnswer, PushEvent, PushHalt, PushReport, PushSender, Run, SLEEP_SLICE};
use crate::error::{ErrorKind, Result};
use crate::item::{AttemptUpdate, Item, ItemId};
use crate::push::retry_after::RetryAfter;
use crate::push::sender::{decide, Ack, Decision, Reply, Sent, Stop};
use crate::push::wire::{self, OutEntry};
use crate::replay::events::{Event, EventKind};
use crate::replay::ItemOutcome;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// A request in flight.
struct Flight {
    ticket: u64,
    batch: Batch,
    first: u64,
    last: u64,
    /// The watermark it was sent with (its `acked`).
    watermark: u64,
    /// Its body's length, for halving.
    body_len: usize,
}

/// What an answer means once the answers before it are applied.
enum Step {
    /// Settle what it acknowledges.
    Ack(Ack),
    /// Nothing: earlier answers settled everything it carried.
    Moot,
    /// Close the window, then apply this (never [`Decision::Ack`]).
    Act(Decision),
}

/// How filling the window ended.
enum Fill {
    /// `depth` requests are in flight.
    Full,
    /// Nothing more to send now (`limited`: because of `--limit`).
    Drained { limited: bool },
    /// No more requests: a stop or the deadline.
    Closing(PushHalt),
}

/// The main thread's side of the worker threads.
struct Link {
    jobs: mpsc::Sender<(u64, Vec<u8>)>,
    answers: mpsc::Receiver<(u64, PushAnswer)>,
    early: HashMap<u64, PushAnswer>,
    next: u64,
}

impl Link {
    /// Hand a body to a free worker; the ticket names its answer.
    fn send(&mut self, body: Vec<u8>) -> u64 {
        let ticket = self.next;
        self.next += 1;
        // The workers outlive the link, so the channel is open.
        let _ = self.jobs.send((ticket, body));
        ticket
    }

    /// The answer to `ticket` if it has come, without waiting.
    fn ready(&mut self, ticket: u64) -> Option<PushAnswer> {
        while let Ok((t, a)) = self.answers.try_recv() {
            self.early.insert(t, a);
        }
        self.early.remove(&ticket)
    }

    /// Wait for the answer to `ticket`, keeping those that come first.
    fn answer(&mut self, ticket: u64) -> PushAnswer {
        loop {
            if let Some(a) = self.early.remove(&ticket) {
                return a;
            }
            match self.answers.recv() {
                Ok((t, a)) => {
                    self.early.insert(t, a);
                }
                Err(_) => return PushAnswer::Failed("the sending thread ended".into()),
            }
        }
    }
}

/// The receiver's counts in a push response: applied now, had already.
fn answered(answer: &PushAnswer) -> (u64, u64) {
    match answer {
        PushAnswer::Http { body, .. } => wire::parse_response(body)
            .map(|r| (r.applied, r.duplicates))
            .unwrap_or_default(),
        PushAnswer::Failed(_) => (0, 0),
    }
}

impl PushSender<'_> {
    pub(super) fn send_all(&self, run: &mut Run, report: &mut PushReport) -> Result<()> {
        let depth = self.opts.pipeline.max(1);
        let transport = self.transport;
        let (jobs, queue) = mpsc::channel::<(u64, Vec<u8>)>();
        let queue = Mutex::new(queue);
        let (answered, answers) = mpsc::channel::<(u64, PushAnswer)>();
        std::thread::scope(|scope| {
            for _ in 0..depth {
                let queue = &queue;
                let answered = answered.clone();
                scope.spawn(move || loop {
                    let job = queue.lock().unwrap_or_else(|e| e.into_inner()).recv();
                    let Ok((ticket, body)) = job else { break };
                    if answered.send((ticket, transport.send(&body))).is_err() {
                        break;
                    }
                });
            }
            drop(answered);
            let mut link = Link {
                jobs,
                answers,
                early: HashMap::new(),
                next: 0,
            };
            // Dropping the link closes the job queue: the workers end
            // once their request is answered.
            self.pump(run, report, depth, &mut link)
        })
    }

    /// Keep the window full and apply the answers in order.
    fn pump(
        &self,
        run: &mut Run,
        report: &mut PushReport,
        depth: usize,
        link: &mut Link,
    ) -> Result<()> {
        let mut window: VecDeque<Flight> = VecDeque::new();
        loop {
            let fill = self.fill(run, report, depth, &mut window, link, 0)?;
            let Some(front) = window.pop_front() else {
                return match fill {
                    // Nothing in flight and nothing sent: stopped or out of time.
                    Fill::Closing(why) => self.halt(report, why),
                    Fill::Drained { limited: true } => {
                        report.halt = Some(PushHalt::Limit);
                        report.left_due = true;
                        Ok(())
                    }
                    Fill::Drained { limited: false } | Fill::Full => Ok(()),
                };
            };
            let answer = link.answer(front.ticket);
            match self.judge(&front, &answer, run.acked, run.highest) {
                Step::Moot => {}
                Step::Ack(ack) => {
                    let mut counts = answered(&answer);
                    let (ack, last) =
                        self.merge(&mut window, link, ack, front, run.highest, &mut counts);
                    // The answered requests are in flight no more: with a
                    // pipeline the next ones go out before the
                    // acknowledgement is committed, so that the receiver is
                    // not kept waiting for it. One request at a time stays
                    // strict: each request carries the watermark its
                    // predecessor's answer moved.
                    if depth > 1 {
                        self.fill(run, report, depth, &mut window, link, last.last)?;
                    }
                    self.acked(run, report, &last.batch, &ack, counts)?;
                }
                Step::Act(decision) => {
                    // The later requests counted on this one: keep what
                    // they acknowledged, then resume from the watermark.
                    while let Some(later) = window.pop_front() {
                        let answer = link.answer(later.ticket);
                        if let Step::Ack(ack) = self.judge(&later, &answer, run.acked, run.highest)
                        {
                            self.acked(run, report, &later.batch, &ack, answered(&answer))?;
                        }
                    }
                    let stop = matches!(decision, Decision::Stop(_));
                    if front.last <= run.acked && !stop {
                        continue;
                    }
                    if self.act(run, report, &front, decision)? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Send requests until `depth` are in flight, each starting just past
    /// the one before (and past `after`, the last number of answered
    /// requests whose acknowledgement is not committed yet).
    fn fill(
        &self,
        run: &mut Run,
        report: &mut PushReport,
        depth: usize,
        window: &mut VecDeque<Flight>,
        link: &mut Link,
        after: u64,
    ) -> Result<Fill> {
        while window.len() < depth {
            if self.stop.is_stopped() {
                return Ok(Fill::Closing(PushHalt::Signal));
            }
            if self.deadline_passed(run) {
                return Ok(Fill::Closing(PushHalt::Deadline));
            }
            let from = window.back().map_or(after, |f| f.last.max(after));
            let from = (from > 0).then_some(from + 1);
            let batch = self.build(run, report, from)?;
            if batch.entries.is_empty() {
                return Ok(Fill::Drained {
                    limited: batch.limited,
                });
            }
            window.push_back(self.dispatch(run, report, batch, link));
        }
        Ok(Fill::Full)
    }

    /// Send `batch`: encode it, report it and hand it to a worker.
    fn dispatch(
        &self,
        run: &Run,
        report: &mut PushReport,
        batch: Batch,
        link: &mut Link,
    ) -> Flight {
        let first = batch.entries.first().map_or(0, Planned::seq);
        let last = first + batch.entries.len() as u64 - 1;
        let body = {
            let out: Vec<OutEntry<'_>> = batch.entries.iter().map(Planned::out).collect();
            wire::encode_request(&run.uuid, batch.state.acked, &out)
        };
        let items = batch.items().count();
        self.event(PushEvent::Sending {
            first,
            last,
            items,
            skips: batch.entries.len() - items,
            bytes: body.len(),
        });
        report.requests += 1;
        let body_len = body.len();
        let watermark = batch.state.acked;
        let ticket = link.send(body);
        Flight {
            ticket,
            batch,
            first,
            last,
            watermark,
            body_len,
        }
    }

    /// What the answer to `f` means now. The gap and lost-state rules
    /// look at the watermark the request was sent with; the ack is then
    /// rebased on the watermark the earlier answers reached.
    fn judge(&self, f: &Flight, answer: &PushAnswer, acked: u64, highest: u64) -> Step {
        let reply = match answer {
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
            batch: f.first..f.last + 1,
            watermark: f.watermark,
            highest_assigned: highest,
        };
        let covered = f.last <= acked;
        match decide(&sent, reply) {
            Decision::Ack(ack) => {
                let ack = ack.rebase(acked);
                if ack.last_seq > ack.previous {
                    Step::Ack(ack)
                } else if covered {
                    Step::Moot
                } else {
                    Step::Act(Decision::Backoff {
                        retry_after: None,
                        reason: format!(
                            "the push receiver acknowledged nothing of sequence numbers \
                             {}..={} (its last_seq is at or below {})",
                            f.first, f.last, ack.previous
                        ),
                    })
                }
            }
            stop @ Decision::Stop(_) => Step::Act(stop),
            _ if covered => Step::Moot,
            other => Step::Act(other),
        }
    }

    /// Fold into `ack` the acknowledgements of the requests after `front`
    /// whose answers are already here: one commit settles them all (an
    /// ack is cumulative). Stops at the first answer that is not an ack,
    /// or not here yet. Returns the merged ack and the last request it
    /// covers.
    fn merge(
        &self,
        window: &mut VecDeque<Flight>,
        link: &mut Link,
        mut ack: Ack,
        front: Flight,
        highest: u64,
        counts: &mut (u64, u64),
    ) -> (Ack, Flight) {
        let mut last = front;
        while let Some(next) = window.front() {
            let Some(answer) = link.ready(next.ticket) else {
                break;
            };
            match self.judge(next, &answer, ack.last_seq, highest) {
                Step::Ack(more) => {
                    ack.last_seq = more.last_seq;
                    ack.over_ack = ack.over_ack.or(more.over_ack);
                    ack.rejected.extend(more.rejected);
                    ack.rejected.sort_by_key(|r| r.seq);
                    ack.rejected.dedup_by_key(|r| r.seq);
                    let (a, d) = answered(&answer);
                    counts.0 += a;
                    counts.1 += d;
                }
                Step::Moot => {}
                Step::Act(_) => {
                    // Applied in its turn, after this ack is committed.
                    link.early.insert(next.ticket, answer);
                    break;
                }
            }
            if let Some(next) = window.pop_front() {
                last = next;
            }
        }
        (ack, last)
    }

    /// Apply an acknowledgement; `batch` is the request it answers (the
    /// last one, when several answers were merged), `counts` the entries
    /// the receiver applied now and had already.
    fn acked(
        &self,
        run: &mut Run,
        report: &mut PushReport,
        batch: &Batch,
        ack: &Ack,
        (applied, duplicates): (u64, u64),
    ) -> Result<()> {
        if let Some(claimed) = ack.over_ack {
            self.event(PushEvent::OverAck {
                claimed,
                highest: run.highest,
            });
        }
        self.settle(run, batch, ack, report)?;
        report.duplicates += duplicates;
        self.event(PushEvent::Acked {
            last_seq: ack.last_seq,
            applied,
            duplicates,
        });
        run.failures = 0;
        run.resend_from = None;
        run.max_entries = self.opts.batch;
        Ok(())
    }

    /// Apply a decision other than an ack about the request `f`, with
    /// nothing else in flight. True when the run ends.
    fn act(
        &self,
        run: &mut Run,
        report: &mut PushReport,
        f: &Flight,
        decision: Decision,
    ) -> Result<bool> {
        match decision {
            // `judge` turns acks into settlements; nothing is left to do.
            Decision::Ack(_) => {}
            Decision::Resend { from } => {
                self.event(PushEvent::Resend { from });
                run.resend_from = Some(from);
            }
            Decision::Halve { max_entries } => {
                run.max_entries = usize::try_from(max_entries).unwrap_or(1).max(1);
                // Never again a body as large as one refused.
                run.max_bytes = run.max_bytes.min(f.body_len as u64 - 1).max(1);
                self.event(PushEvent::Halved {
                    max_entries: run.max_entries,
                    max_bytes: run.max_bytes,
                });
            }
            Decision::DeadLetter { seq, reason } => {
                let reason = self.transport.redact(&reason);
                let Some(item) = f.batch.find(seq) else {
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
                    self.halt(report, PushHalt::Refused(stop))?;
                    return Ok(true);
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
                return self.failed(run, report, &f.batch, &reason, retry_after);
            }
            Decision::Stop(mut stop) => {
                stop.message = self.transport.redact(&stop.message);
                self.halt(report, PushHalt::Refused(stop))?;
                return Ok(true);
            }
        }
        Ok(false)
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
        // Items an answer to a later request settled are not touched.
        for item in batch.items().filter(|i| i.push_seq > Some(run.acked)) {
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
        run: &mut Run,
        batch: &Batch,
        ack: &Ack,
        report: &mut PushReport,
    ) -> Result<()> {
        // The items the ack covers, for the observer: the batch's, and any
        // before or beyond it that the receiver had from another request
        // (an earlier one whose answer was lost, a later one of the
        // pipeline).
        let mut covered: Vec<Item> = Vec::new();
        if self.observer.is_some() {
            let acked = |i: &Item| {
                i.push_seq
                    .is_some_and(|s| s > ack.previous && s <= ack.last_seq)
            };
            let first = batch.entries.first().map_or(0, Planned::seq);
            let last = batch.entries.last().map_or(0, Planned::seq);
            let around = |after: u64, upto: u64| -> Result<Vec<Item>> {
                if upto <= after {
                    return Ok(Vec::new());
                }
                let n = usize::try_from(upto - after).unwrap_or(usize::MAX);
                let mut items = self.queue.push_in_flight(after, n)?;
                items.retain(|i| i.push_seq.is_some_and(|s| s <= upto) && acked(i));
                Ok(items)
            };
            covered.extend(around(ack.previous, first.saturating_sub(1))?);
            covered.extend(batch.items().filter(|i| acked(i)).cloned());
            covered.extend(around(last.max(ack.previous), ack.last_seq)?);
        }
        let rejected: Vec<(u64, String)> = ack
            .rejected
            .iter()
            .map(|r| (r.seq, r.error.clone()))
            .collect();
        let done = self.queue.push_ack(ack.last_seq, &rejected)?;
        run.acked = run.acked.max(done.acked);
        let acknowledged = done.acked.saturating_sub(ack.previous);
        report.acknowledged += acknowledged;
        report.delivered += done.delivered.len() as u64;
        report.rejected += done.rejected.len() as u64;
        report.skipped +=
            acknowledged.saturating_sub((done.delivered.len() + done.rejected.len()) as u64);
        if let Some(o) = self.observer {
            let now = self.clock.now();
            let delivered: HashSet<ItemId> = done.delivered.iter().copied().collect();
            let refused: HashSet<ItemId> = done.rejected.iter().copied().collect();
            for item in &covered {
                let attempt = item.attempts.saturating_add(1);
                if delivered.contains(&item.id) {
                    o.recorded(
                        &Event::new(EventKind::Acked, item, attempt, now).queued_until(item, now),
                    );
                    o.attempted(item, attempt, &ItemOutcome::Delivered);
                } else if refused.contains(&item.id) {
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
