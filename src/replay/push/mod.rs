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
//! Up to [`PushOptions::pipeline`] requests are in flight at once (see
//! `send.rs`: answers are applied in sequence order, and anything but an
//! acknowledgement resumes the stream from the watermark). Each request
//! is built afresh from the spool:
//!
//! 1. **The in-flight entries first**, from `watermark + 1` (or just past
//!    the requests still in flight) in sequence
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
//! * With one request in flight a batch starts at `watermark + 1`, so a
//!   409 gap means the receiver is below the watermark (it lost state, and
//!   the run stops). With several, a request may reach the receiver before
//!   the one ahead of it and be answered with a gap at the watermark it
//!   was sent with: that is a `Resend`, and once the answers before it are
//!   applied the stream resumes from the watermark.
//! * An answer already covered by an earlier answer's cumulative ack
//!   changes nothing, whatever it says (short of a refusal, which stops
//!   the run all the same).

mod batch;
mod send;

use super::{Backoff, ReplayObserver, ReplayStatus, StopHandle};
use crate::error::{Error, ErrorKind, Result};
use crate::item::{Item, ItemId};
use crate::push::retry_after::RetryAfter;
use crate::push::sender::Stop;
use crate::queue::{Queue, PAGE_SIZE};
use crate::time::{SharedClock, Timestamp};
use std::sync::Mutex;
use std::time::Duration;

/// The default number of entries per request (`--batch`).
pub const DEFAULT_BATCH: usize = 2000;
/// The default bound on one request body, in bytes (`--batch-bytes`).
pub const DEFAULT_BATCH_BYTES: u64 = 4 * 1024 * 1024;
/// The default number of requests in flight at once (`--pipeline`).
pub const DEFAULT_PIPELINE: usize = 2;
/// The most requests in flight at once.
pub const MAX_PIPELINE: usize = 64;

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

/// How a push stream is cut into requests (`--batch`, `--batch-bytes`,
/// `--pipeline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PushShape {
    /// Entries per request.
    pub batch: usize,
    /// Bytes of request body, before compression.
    pub batch_bytes: u64,
    /// Requests in flight at once.
    pub pipeline: usize,
}

impl Default for PushShape {
    fn default() -> Self {
        PushShape {
            batch: DEFAULT_BATCH,
            batch_bytes: DEFAULT_BATCH_BYTES,
            pipeline: DEFAULT_PIPELINE,
        }
    }
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
    /// Requests in flight at once (1 = wait for each answer; at most
    /// [`MAX_PIPELINE`]).
    pub pipeline: usize,
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
            pipeline: DEFAULT_PIPELINE,
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

/// The one wording of each event, as `replay --push -v` and the watch
/// daemon's log show it (the CLI words an over-ack as a warning and a
/// dry run's entries with the item's details).
impl std::fmt::Display for PushEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushEvent::Sending {
                first,
                last,
                items,
                skips,
                bytes,
            } => write!(
                f,
                "push: sending sequence {first}..{last} ({items} items, {skips} skips, {bytes} bytes)"
            ),
            PushEvent::Acked {
                last_seq,
                applied,
                duplicates,
            } => write!(
                f,
                "push: acknowledged up to {last_seq} ({applied} applied, {duplicates} duplicates)"
            ),
            PushEvent::OverAck { claimed, highest } => write!(
                f,
                "the push receiver acknowledged up to sequence {claimed}, but this spool has \
                 assigned only up to {highest}; the excess is ignored (does the receiver hold \
                 another client's history under this spool's uuid?)"
            ),
            PushEvent::RequestFailed {
                reason,
                failures,
                max,
                retry_in,
            } => match retry_in {
                Some(d) => write!(
                    f,
                    "{reason} (failed request {failures} of {max}); resending in {}",
                    crate::units::format_duration(*d)
                ),
                None => write!(
                    f,
                    "{reason} (failed request {failures} of {max}); no more requests in this run"
                ),
            },
            PushEvent::Halved {
                max_entries,
                max_bytes,
            } => write!(
                f,
                "push: the receiver refused the request as too large; at most {max_entries} \
                 entries and {max_bytes} bytes per request from now on"
            ),
            PushEvent::Resend { from } => {
                write!(f, "push: the receiver asked to resend from sequence {from}")
            }
            PushEvent::WouldSend {
                seq,
                item,
                in_flight,
            } => {
                let verb = if *in_flight { "resend" } else { "send" };
                match item {
                    Some(i) => write!(f, "push: would {verb} item {} as sequence {seq}", i.id),
                    None => write!(f, "push: would {verb} a skip entry as sequence {seq}"),
                }
            }
        }
    }
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

impl PushStatus {
    /// The replay status this stands for (SPEC §7: a push exits as §4
    /// says a replay does), or the kind of the receiver's refusal.
    pub fn replay_status(self) -> std::result::Result<ReplayStatus, ErrorKind> {
        match self {
            PushStatus::Clean => Ok(ReplayStatus::Clean),
            PushStatus::Retry => Ok(ReplayStatus::Retry),
            PushStatus::DeadLettered => Ok(ReplayStatus::DeadLettered),
            PushStatus::Refused(kind) => Err(kind),
        }
    }
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
    /// The watermark as far as this run knows it.
    acked: u64,
    /// The highest number assigned as far as this run knows it.
    highest: u64,
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
        if !(1..=MAX_PIPELINE).contains(&opts.pipeline) {
            return Err(Error::Unsupported(format!(
                "--pipeline must be between 1 and {MAX_PIPELINE}"
            )));
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
                acked: 0,
                highest: 0,
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
}
