//! `replay --push`: the sending side of §7, run over a spool.
//!
//! [`PushSender`] delivers a spool's items to a push receiver in
//! numbered batches. The spool *is* the durable outbox: the numbers,
//! the watermark and the skips live in the queue ([`Queue::push_state`],
//! [`Queue::push_assign`], [`Queue::push_ack`]), so a process that dies
//! at any point resumes with the same numbers. The rules come from
//! [`crate::push::sender::decide`]; the bytes from [`crate::push::wire`];
//! the network from a [`PushTransport`] (HTTP in
//! [`super::http::HttpPush`], anything in tests). Nothing here opens a
//! socket.
//!
//! One request at a time, each built afresh from the spool:
//!
//! 1. **The in-flight entries first**, from `watermark + 1` in sequence
//!    order: each number is an in-flight item, or a `skip` when its item
//!    left the spool (`done --force`, a 413 dead-letter, a writer that
//!    does not know about push).
//! 2. **Then new items**: pending, not held, due (unless
//!    `ignore_backoff`), in enqueue order, numbered with
//!    [`Queue::push_assign`] — committed *before* the request is sent.
//! 3. Up to [`PushOptions::batch`] entries and
//!    [`PushOptions::batch_bytes`] bytes of body (always at least one
//!    entry), and at most [`PushOptions::limit`] items sent in the run.
//!
//! Each answer goes through `decide`, and the decision is applied:
//!
//! | decision | what the run does |
//! |---|---|
//! | `Ack` | [`Queue::push_ack`]: delivered items leave the spool, rejected ones are dead-lettered with the receiver's reason; an over-ack is reported ([`PushEvent::OverAck`]); next batch |
//! | `Resend { from }` | the next request starts at `from`, with the original numbers |
//! | `Halve` | the next request carries at most half the entries, and no later request of the run is as large as the refused body |
//! | `DeadLetter { seq }` | that item is dead-lettered with the reason (its number becomes a skip) |
//! | `Backoff` | an attempt is counted on every item of the batch (`last_error` = the reason; never a dead letter; a `Retry-After` becomes their `next_retry_at`), the run sleeps (exponential with jitter, at least `Retry-After`) and resends the same entries |
//! | `Stop` | the run ends; the items of the refused request stay in flight with their numbers (a later run resends them as they are), nothing else changes; the report carries the [`Stop`] |
//!
//! A failed request is a transport failure, not an item failure:
//! [`PushOptions::max_attempts`] bounds the *consecutive* failed requests
//! of one run, which then ends with the items left in flight for a later
//! run (exit 75). A 200 that moves nothing for a non-empty batch counts as
//! a failed request too, so a broken receiver cannot keep a run busy.
//!
//! Decisions made where §7 is silent:
//!
//! * The attempts counted on in-flight items leave `next_retry_at` unset:
//!   a stream cannot skip its head, so the next run resends them at once
//!   (with a fresh request budget) whatever their backoff would say —
//!   unless the receiver asked for time with `Retry-After`.
//! * A `Retry-After` is durable: the time it names becomes the
//!   `next_retry_at` of every item of the failed request (shown by
//!   `list` and `show`), and a run that finds the head of the stream
//!   waiting for such a time sends nothing before it
//!   ([`PushHalt::NotBefore`]; `--follow` sleeps until then), unless
//!   [`PushOptions::ignore_backoff`]. A `Retry-After` longer than the
//!   backoff cap ends the run (items left in flight) instead of sleeping
//!   for it; so does a backoff that would end after the deadline.
//! * `--limit` counts distinct items put into a request in this run;
//!   resending the same entries does not count again, skips never count.
//! * A batch starts at `watermark + 1`, so a 409 gap always means the
//!   receiver is below the watermark (it lost state, and the run stops);
//!   `Resend` is honoured all the same for a receiver that asks for it.

use super::events::{Event, EventKind};
use super::{Backoff, ItemOutcome, ReplayObserver, RetryAfter, StopHandle};
use crate::error::{Error, ErrorKind, Result};
use crate::item::{AttemptUpdate, Item, ItemId, PushState};
use crate::push::sender::{decide, Decision, Reply, Sent, Stop};
use crate::push::wire::{self, OutEntry};
use crate::queue::{Queue, PAGE_SIZE};
use crate::time::{SharedClock, Timestamp};
use std::sync::Mutex;
use std::time::Duration;

/// The default number of entries per request (`--batch`).
pub const DEFAULT_BATCH: usize = 2000;
/// The default bound on one request body, in bytes (`--batch-bytes`).
pub const DEFAULT_BATCH_BYTES: u64 = 4 * 1024 * 1024;

/// The longest single sleep between two looks at the stop flag.
const SLEEP_SLICE: Duration = Duration::from_millis(100);

/// What came back for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushAnswer {
    /// An HTTP answer (body decompressed).
    Http {
        /// The status code.
        status: u16,
        /// The body.
        body: Vec<u8>,
        /// The parsed `Retry-After` header.
        retry_after: Option<RetryAfter>,
    },
    /// No answer: timeout, connection refused or dropped, TLS failure.
    /// The text is safe to show (no credentials).
    Failed(String),
}

/// Moves request bodies to a receiver and answers back.
pub trait PushTransport: Send + Sync {
    /// Send one request body (uncompressed JSON; the transport may
    /// compress it on the wire) and wait for the answer.
    fn send(&self, body: &[u8]) -> PushAnswer;

    /// The receiver, described without secrets.
    fn describe(&self) -> String;

    /// Remove the transport's secrets (header values, URL credentials)
    /// from `text`, which may quote the receiver.
    fn redact(&self, text: &str) -> String {
        text.to_string()
    }
}

/// Options of a push run; the defaults are the CLI's.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// Consecutive failed requests before the run gives up (default 5).
    pub max_attempts: u32,
    /// Waits between failed requests.
    pub backoff: Backoff,
    /// Send new items even when their next retry time has not come, and
    /// in-flight items before the time a receiver's `Retry-After` named.
    pub ignore_backoff: bool,
    /// Send at most this many distinct items in the run.
    pub limit: Option<u64>,
    /// Start no request (and no wait) that ends after this much time.
    pub deadline: Option<Duration>,
    /// Report what would be sent; send, number and change nothing.
    pub dry_run: bool,
    /// Entries per request (at least 1).
    pub batch: usize,
    /// Bytes of request body, before compression (a lone entry may be
    /// larger).
    pub batch_bytes: u64,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            max_attempts: 5,
            backoff: Backoff::default(),
            ignore_backoff: false,
            limit: None,
            deadline: None,
            dry_run: false,
            batch: DEFAULT_BATCH,
            batch_bytes: DEFAULT_BATCH_BYTES,
        }
    }
}

/// What a run reports besides settled items (which go to
/// [`ReplayObserver::attempted`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushEvent<'a> {
    /// A request goes out.
    Sending {
        /// Its first sequence number.
        first: u64,
        /// Its last sequence number.
        last: u64,
        /// Item entries in it.
        items: usize,
        /// Skip entries in it.
        skips: usize,
        /// Body bytes (before compression).
        bytes: usize,
    },
    /// The receiver acknowledged up to `last_seq`.
    Acked {
        /// The new watermark.
        last_seq: u64,
        /// Entries of the request the receiver applied now.
        applied: u64,
        /// Entries of the request it already had.
        duplicates: u64,
    },
    /// The receiver claimed more than was ever sent: clamped and ignored.
    OverAck {
        /// The receiver's `last_seq`.
        claimed: u64,
        /// The highest number this spool assigned.
        highest: u64,
    },
    /// A request failed; the same entries go out again after `retry_in`,
    /// unless the run gives up (`retry_in` is `None`).
    RequestFailed {
        /// Why (also every item's `last_error`).
        reason: &'a str,
        /// Consecutive failed requests so far.
        failures: u32,
        /// The bound on them.
        max: u32,
        /// The wait before the next try.
        retry_in: Option<Duration>,
    },
    /// The receiver refused the body as too large: smaller requests
    /// follow.
    Halved {
        /// Entries per request from now on.
        max_entries: usize,
        /// Body bytes per request from now on.
        max_bytes: u64,
    },
    /// The receiver asked to resend from `from`.
    Resend {
        /// The first number of the next request.
        from: u64,
    },
    /// Dry run: this entry would be sent.
    WouldSend {
        /// Its number (for a new item: the number it would get).
        seq: u64,
        /// The item, `None` for a skip entry.
        item: Option<&'a Item>,
        /// True for an entry already in flight (a resend).
        in_flight: bool,
    },
}

/// Why a run ended before everything was sent and acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushHalt {
    /// `stop()` (a signal), after the request in flight.
    Signal,
    /// `limit` items were sent.
    Limit,
    /// The deadline passed (or a wait would have ended after it).
    Deadline,
    /// `max_attempts` consecutive requests failed.
    Budget,
    /// The receiver asked for a wait longer than the backoff cap.
    RetryAfter(Duration),
    /// Nothing was sent: an earlier run's receiver asked (`Retry-After`)
    /// not to be sent to before this time, and the in-flight items wait
    /// for it.
    NotBefore(Timestamp),
    /// The receiver refused the run (409, 401/403, other 4xx): nothing
    /// was settled; the refused request's entries stay in flight with
    /// their numbers.
    Refused(Stop),
}

/// What one run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PushReport {
    /// Requests sent.
    pub requests: u64,
    /// Of those, failed (no answer, 408/425/429/5xx, no progress).
    pub failed_requests: u64,
    /// Sequence numbers newly acknowledged (items and skips).
    pub acknowledged: u64,
    /// Items the receiver applied: removed from the spool.
    pub delivered: u64,
    /// Items the receiver rejected: dead-lettered with its reason.
    pub rejected: u64,
    /// Items too large for the receiver on their own (413):
    /// dead-lettered.
    pub too_large: u64,
    /// Items never sent because no spool may store their key (a NUL byte,
    /// which older versions let in): dead-lettered with the reason.
    pub unsendable: u64,
    /// Skip entries acknowledged.
    pub skipped: u64,
    /// Entries the receiver reported as duplicates (it had them already).
    pub duplicates: u64,
    /// Distinct items put into a request in this run.
    pub sent: u64,
    /// Sequence numbers still in flight at the end (items and skips).
    pub in_flight: u64,
    /// The watermark at the end.
    pub watermark: u64,
    /// Pending items waiting for their next retry time (at the end).
    pub not_due: u64,
    /// Held items (at the end).
    pub held: u64,
    /// Dry run: items in flight that would be resent.
    pub would_resend: u64,
    /// Dry run: new items that would be numbered and sent.
    pub would_send: u64,
    /// Why the run ended early, if it did.
    pub halt: Option<PushHalt>,
    /// True when items were left in flight or due (limit, deadline,
    /// budget, signal).
    pub left_due: bool,
    /// The reason of the last failed request.
    pub last_error: Option<String>,
    /// When the receiver's `Retry-After` allows the next request, if it
    /// asked for a time that has not come by the end of the run: the
    /// `next_retry_at` of the items in flight.
    pub not_before: Option<Timestamp>,
}

/// The exit status a push report calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushStatus {
    /// Everything due was delivered and acknowledged.
    Clean,
    /// Items are left for a later run.
    Retry,
    /// At least one item was dead-lettered in this run.
    DeadLettered,
    /// The receiver refused the run: [`ErrorKind::Data`] or
    /// [`ErrorKind::PermissionDenied`].
    Refused(ErrorKind),
}

impl PushReport {
    /// Items dead-lettered in this run (rejected, too large or
    /// unsendable).
    pub fn dead_lettered(&self) -> u64 {
        self.rejected + self.too_large + self.unsendable
    }

    /// The receiver's refusal, if the run ended with one.
    pub fn refusal(&self) -> Option<&Stop> {
        match &self.halt {
            Some(PushHalt::Refused(stop)) => Some(stop),
            _ => None,
        }
    }

    /// Add a later run's report to this one (follow mode's summary of
    /// many runs): the counts of what happened add up; what describes
    /// the spool and the stream at the end (in flight, watermark, not
    /// due, held, why the run stopped, the last error) is the later
    /// run's.
    pub fn absorb(&mut self, later: &PushReport) {
        self.requests += later.requests;
        self.failed_requests += later.failed_requests;
        self.acknowledged += later.acknowledged;
        self.delivered += later.delivered;
        self.rejected += later.rejected;
        self.too_large += later.too_large;
        self.unsendable += later.unsendable;
        self.skipped += later.skipped;
        self.duplicates += later.duplicates;
        self.sent += later.sent;
        self.would_resend += later.would_resend;
        self.would_send += later.would_send;
        self.in_flight = later.in_flight;
        self.watermark = later.watermark;
        self.not_due = later.not_due;
        self.held = later.held;
        self.halt = later.halt.clone();
        self.left_due = later.left_due;
        self.not_before = later.not_before;
        if later.last_error.is_some() {
            self.last_error = later.last_error.clone();
        }
    }

    /// A refusal wins over dead letters, dead letters over retries.
    pub fn status(&self) -> PushStatus {
        if let Some(stop) = self.refusal() {
            PushStatus::Refused(stop.kind)
        } else if self.dead_lettered() > 0 {
            PushStatus::DeadLettered
        } else if self.left_due || self.in_flight > 0 {
            PushStatus::Retry
        } else {
            PushStatus::Clean
        }
    }

    /// The one-line summary `spool replay --push` prints.
    pub fn summary(&self, dry_run: bool) -> String {
        let mut s = if dry_run {
            format!(
                "dry run: {} in flight would be resent, {} new would be sent",
                self.would_resend, self.would_send
            )
        } else {
            format!(
                "delivered {}, rejected {}, dead-lettered {}, in flight {}; \
                 {} requests, {} failed, {} entries acknowledged (watermark {})",
                self.delivered,
                self.rejected,
                self.dead_lettered(),
                self.in_flight,
                self.requests,
                self.failed_requests,
                self.acknowledged,
                self.watermark
            )
        };
        s.push_str(&format!(", not due {}, held {}", self.not_due, self.held));
        match &self.halt {
            Some(PushHalt::Signal) => s.push_str("; stopped after the request in flight"),
            Some(PushHalt::Limit) => s.push_str("; --limit reached, items left"),
            Some(PushHalt::Deadline) => s.push_str("; --deadline passed, items left"),
            Some(PushHalt::Budget) => {
                s.push_str("; gave up after --max-attempts failed requests, items left for retry")
            }
            Some(PushHalt::RetryAfter(d)) => {
                s.push_str(&format!(
                    "; the receiver asked to wait {}s, longer than --backoff-max: items left for retry",
                    d.as_secs()
                ));
                if let Some(t) = self.not_before {
                    s.push_str(&format!(", not sent again before {t}"));
                }
            }
            Some(PushHalt::NotBefore(t)) => s.push_str(&format!(
                "; the receiver asked (Retry-After) not to be sent to before {t}: nothing sent, \
                 items left for retry"
            )),
            Some(PushHalt::Refused(_)) => s.push_str("; refused by the receiver"),
            None => {}
        }
        s
    }
}

/// One entry of a batch being built.
#[derive(Clone, Debug)]
enum Planned {
    Item(Item),
    Skip(u64),
}

impl Planned {
    fn seq(&self) -> u64 {
        match self {
            Planned::Item(i) => i.push_seq.unwrap_or_default(),
            Planned::Skip(s) => *s,
        }
    }

    fn out(&self) -> OutEntry<'_> {
        match self {
            Planned::Item(i) => out_item(i, i.push_seq.unwrap_or_default()),
            Planned::Skip(seq) => OutEntry::Skip { seq: *seq },
        }
    }
}

fn out_item(item: &Item, seq: u64) -> OutEntry<'_> {
    OutEntry::Item {
        seq,
        id: item.id,
        key: &item.key,
        payload: &item.payload,
        enqueued_at: item.enqueued_at,
    }
}

/// A request about to go out.
struct Batch {
    entries: Vec<Planned>,
    /// The push state the request is built from (after numbering).
    state: PushState,
    /// New items were left out because of the limit.
    limited: bool,
}

impl Batch {
    fn items(&self) -> impl Iterator<Item = &Item> {
        self.entries.iter().filter_map(|e| match e {
            Planned::Item(i) => Some(i),
            Planned::Skip(_) => None,
        })
    }

    fn find(&self, seq: u64) -> Option<&Item> {
        self.items().find(|i| i.push_seq == Some(seq))
    }
}

/// What one run carries from request to request.
struct Run {
    uuid: String,
    started: Timestamp,
    /// Entries per request now.
    max_entries: usize,
    /// Body bytes per request now.
    max_bytes: u64,
    /// Where the receiver asked the next request to start.
    resend_from: Option<u64>,
    /// The highest number put into a request in this run.
    sent_upto: u64,
    /// Consecutive failed requests.
    failures: u32,
    /// New items with an id up to this were looked at.
    cursor: ItemId,
}

/// Sends a spool's items to a push receiver. See the module docs.
pub struct PushSender<'a> {
    queue: &'a dyn Queue,
    transport: &'a dyn PushTransport,
    opts: PushOptions,
    clock: SharedClock,
    observer: Option<&'a dyn ReplayObserver>,
    rng: Mutex<Box<dyn FnMut() -> f64 + Send + 'a>>,
    stop: StopHandle,
}

impl<'a> PushSender<'a> {
    /// A sender over `queue` through `transport`. Fails with
    /// [`Error::Unsupported`] for options that cannot work (a batch of 0
    /// entries or bytes, 0 attempts).
    pub fn new(
        queue: &'a dyn Queue,
        transport: &'a dyn PushTransport,
        opts: PushOptions,
        clock: SharedClock,
    ) -> Result<PushSender<'a>> {
        if opts.batch == 0 {
            return Err(Error::Unsupported("--batch must be at least 1".into()));
        }
        if opts.batch_bytes == 0 {
            return Err(Error::Unsupported(
                "--batch-bytes must be at least 1 byte".into(),
            ));
        }
        if opts.max_attempts == 0 {
            return Err(Error::Unsupported(
                "--max-attempts must be at least 1".into(),
            ));
        }
        Ok(PushSender {
            queue,
            transport,
            opts,
            clock,
            observer: None,
            rng: Mutex::new(Box::new(fastrand::f64)),
            stop: StopHandle::default(),
        })
    }

    /// Report progress to `observer`.
    pub fn with_observer(mut self, observer: &'a dyn ReplayObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Use `unit` (uniform in `[0, 1)`) for jitter.
    pub fn with_random(mut self, unit: impl FnMut() -> f64 + Send + 'a) -> Self {
        self.rng = Mutex::new(Box::new(unit));
        self
    }

    /// Use this stop handle (so a signal handler can be wired up first).
    pub fn with_stop_handle(mut self, stop: StopHandle) -> Self {
        self.stop = stop;
        self
    }

    /// The handle that stops the run after the request in flight.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    fn event(&self, e: PushEvent<'_>) {
        if let Some(o) = self.observer {
            o.push_event(&e);
        }
    }

    /// Run once: send until nothing is due and nothing is in flight, or
    /// until a bound, a failure budget, a refusal or a stop ends the run.
    /// `Err` is a failure of the spool itself (reading or recording);
    /// everything the receiver does is in the report.
    pub fn run(&self) -> Result<PushReport> {
        let mut report = PushReport::default();
        let uuid = self.queue.uuid()?;
        if let Some(t) = self.waiting_for_receiver()? {
            // An earlier run's receiver asked for time: nothing goes out
            // before it (the stream cannot skip its head).
            report.halt = Some(PushHalt::NotBefore(t));
            report.left_due = true;
        } else if self.opts.dry_run {
            self.dry_run(&mut report)?;
        } else {
            if let Some(o) = self.observer {
                let total = if o.wants_total() {
                    Some(self.queue.due_count(
                        self.clock.now(),
                        self.opts.ignore_backoff,
                        self.opts.limit,
                    )?)
                } else {
                    None
                };
                o.started(total);
            }
            let mut run = Run {
                uuid,
                started: self.clock.now(),
                max_entries: self.opts.batch,
                max_bytes: self.opts.batch_bytes,
                resend_from: None,
                sent_upto: 0,
                failures: 0,
                cursor: 0,
            };
            self.send_all(&mut run, &mut report)?;
        }
        let state = self.queue.push_state()?;
        report.in_flight = state.last_assigned - state.acked;
        report.watermark = state.acked;
        report.not_before = self.waiting_for_receiver()?;
        let stats = self.queue.stats(self.clock.now())?;
        report.held = stats.held;
        report.not_due = if self.opts.ignore_backoff {
            0
        } else {
            stats.waiting
        };
        Ok(report)
    }

    /// The time a receiver's `Retry-After` asked for, when it has not
    /// come: the latest `next_retry_at` after now among the first page of
    /// in-flight items (those of the next request). `None` with
    /// `ignore_backoff`.
    fn waiting_for_receiver(&self) -> Result<Option<Timestamp>> {
        if self.opts.ignore_backoff {
            return Ok(None);
        }
        let state = self.queue.push_state()?;
        if state.last_assigned <= state.acked {
            return Ok(None);
        }
        let now = self.clock.now();
        Ok(self
            .queue
            .push_in_flight(state.acked, PAGE_SIZE)?
            .iter()
            .filter_map(|i| i.next_retry_at)
            .filter(|t| *t > now)
            .max())
    }

    /// True when the run leaves something to send: entries in flight, or
    /// a due item.
    fn anything_left(&self) -> Result<bool> {
        let state = self.queue.push_state()?;
        Ok(state.last_assigned > state.acked
            || self
                .queue
                .due_count(self.clock.now(), self.opts.ignore_backoff, Some(1))?
                > 0)
    }

    /// True once the deadline has passed.
    fn deadline_passed(&self, run: &Run) -> bool {
        self.opts
            .deadline
            .is_some_and(|d| self.clock.now().since(run.started) >= d)
    }

    /// True when a wait of `wait` would end after the deadline.
    fn wait_passes_deadline(&self, run: &Run, wait: Duration) -> bool {
        self.opts
            .deadline
            .is_some_and(|d| self.clock.now().saturating_add(wait).since(run.started) > d)
    }

    fn halt(&self, report: &mut PushReport, why: PushHalt) -> Result<()> {
        report.left_due = self.anything_left()?;
        report.halt = Some(why);
        Ok(())
    }

    fn send_all(&self, run: &mut Run, report: &mut PushReport) -> Result<()> {
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

    /// The next request: the in-flight entries from where the receiver
    /// stands, then new items, numbered and committed before it is sent.
    fn build(&self, run: &mut Run, report: &mut PushReport) -> Result<Batch> {
        let mut state = self.queue.push_state()?;
        let start = (state.acked + 1).max(run.resend_from.unwrap_or(0));
        let budget = run.max_bytes;
        let limit = self.opts.limit.unwrap_or(u64::MAX);
        let mut bytes = wire::request_overhead(&run.uuid, state.acked, 0) as u64;
        let mut entries: Vec<Planned> = Vec::new();
        let mut new_items = 0u64;
        let mut limited = false;
        let mut room = true;
        if start <= state.last_assigned {
            let mut items = self
                .queue
                .push_in_flight(start - 1, run.max_entries)?
                .into_iter()
                .peekable();
            for seq in start..=state.last_assigned {
                if entries.len() >= run.max_entries {
                    room = false;
                    break;
                }
                while items.peek().is_some_and(|i| i.push_seq < Some(seq)) {
                    items.next();
                }
                let entry = match items.next_if(|i| i.push_seq == Some(seq)) {
                    Some(item) => Planned::Item(item),
                    None => Planned::Skip(seq),
                };
                let counts = matches!(entry, Planned::Item(_)) && seq > run.sent_upto;
                if counts && report.sent + new_items >= limit {
                    limited = true;
                    room = false;
                    break;
                }
                let len = wire::encoded_entry_len(&entry.out()) as u64 + 1;
                if !entries.is_empty() && bytes + len > budget {
                    room = false;
                    break;
                }
                bytes += len;
                new_items += u64::from(counts);
                entries.push(entry);
            }
        }
        if room && entries.len() < run.max_entries {
            let now = self.clock.now();
            let mut picked: Vec<Item> = Vec::new();
            'walk: loop {
                let page = self.queue.page(run.cursor, PAGE_SIZE)?;
                let n = page.len();
                for item in page {
                    if item.push_seq.is_some()
                        || item.held
                        || (!self.opts.ignore_backoff && !item.is_due(now))
                    {
                        run.cursor = item.id;
                        continue;
                    }
                    if let Some(problem) = crate::item::key_problem(&item.key) {
                        // Never numbered, never sent: a receiver would
                        // refuse it, and its digest would be ambiguous.
                        run.cursor = item.id;
                        let reason = format!("not pushed: {problem}");
                        if self.queue.dead_letter(item.id, &reason)? {
                            report.unsendable += 1;
                            if let Some(o) = self.observer {
                                o.recorded(
                                    &Event::new(
                                        EventKind::DeadLettered,
                                        &item,
                                        item.attempts,
                                        self.clock.now(),
                                    )
                                    .with_error(&reason),
                                );
                                o.attempted(
                                    &item,
                                    item.attempts,
                                    &ItemOutcome::DeadLettered {
                                        error: reason,
                                        rejected: true,
                                    },
                                );
                            }
                        }
                        continue;
                    }
                    if entries.len() + picked.len() >= run.max_entries {
                        break 'walk;
                    }
                    if report.sent + new_items >= limit {
                        limited = true;
                        break 'walk;
                    }
                    let seq = state.last_assigned + 1 + picked.len() as u64;
                    let len = wire::encoded_entry_len(&out_item(&item, seq)) as u64 + 1;
                    if !(entries.is_empty() && picked.is_empty()) && bytes + len > budget {
                        break 'walk;
                    }
                    bytes += len;
                    new_items += 1;
                    run.cursor = item.id;
                    picked.push(item);
                }
                if n < PAGE_SIZE {
                    break;
                }
            }
            if !picked.is_empty() {
                let ids: Vec<ItemId> = picked.iter().map(|i| i.id).collect();
                let assigned = self.queue.push_assign(&ids)?;
                for (id, seq) in assigned {
                    if seq != state.last_assigned + 1 {
                        return Err(Error::Internal(format!(
                            "push numbering jumped from {} to {seq} while this run held the \
                             replay lock",
                            state.last_assigned
                        )));
                    }
                    state.last_assigned = seq;
                    if let Some(mut item) = picked.iter().find(|i| i.id == id).cloned() {
                        item.push_seq = Some(seq);
                        entries.push(Planned::Item(item));
                    }
                }
                // Items that became held or left meanwhile got no number.
                new_items = entries
                    .iter()
                    .filter(|e| matches!(e, Planned::Item(_)) && e.seq() > run.sent_upto)
                    .count() as u64;
            }
        }
        if let Some(last) = entries.last() {
            report.sent += new_items;
            run.sent_upto = run.sent_upto.max(last.seq());
        }
        Ok(Batch {
            entries,
            state,
            limited,
        })
    }

    /// What a run would send now, reported through the observer; nothing
    /// is numbered or changed.
    fn dry_run(&self, report: &mut PushReport) -> Result<()> {
        let state = self.queue.push_state()?;
        let limit = self.opts.limit.unwrap_or(u64::MAX);
        if let Some(o) = self.observer {
            let total = if o.wants_total() {
                Some(self.queue.due_count(
                    self.clock.now(),
                    self.opts.ignore_backoff,
                    self.opts.limit,
                )?)
            } else {
                None
            };
            o.started(total);
        }
        let mut after = state.acked;
        let mut next = state.acked + 1;
        'in_flight: while next <= state.last_assigned {
            let page = self.queue.push_in_flight(after, PAGE_SIZE)?;
            let n = page.len();
            for item in &page {
                let seq = item.push_seq.unwrap_or_default();
                while next < seq {
                    self.would_skip(next);
                    next += 1;
                }
                if report.would_resend >= limit {
                    report.left_due = true;
                    report.halt = Some(PushHalt::Limit);
                    return Ok(());
                }
                self.event(PushEvent::WouldSend {
                    seq,
                    item: Some(item),
                    in_flight: true,
                });
                report.would_resend += 1;
                next = seq + 1;
                after = seq;
            }
            if n < PAGE_SIZE {
                break 'in_flight;
            }
        }
        while next <= state.last_assigned {
            self.would_skip(next);
            next += 1;
        }
        let now = self.clock.now();
        let mut cursor: ItemId = 0;
        loop {
            let page = self.queue.page(cursor, PAGE_SIZE)?;
            let n = page.len();
            for item in &page {
                cursor = item.id;
                if item.push_seq.is_some()
                    || item.held
                    || (!self.opts.ignore_backoff && !item.is_due(now))
                    // Never sent: a real run dead-letters it (unsendable).
                    || crate::item::key_problem(&item.key).is_some()
                {
                    continue;
                }
                if report.would_resend + report.would_send >= limit {
                    report.left_due = true;
                    report.halt = Some(PushHalt::Limit);
                    return Ok(());
                }
                self.event(PushEvent::WouldSend {
                    seq: next,
                    item: Some(item),
                    in_flight: false,
                });
                next += 1;
                report.would_send += 1;
            }
            if n < PAGE_SIZE {
                return Ok(());
            }
        }
    }

    fn would_skip(&self, seq: u64) {
        self.event(PushEvent::WouldSend {
            seq,
            item: None,
            in_flight: true,
        });
    }
}
