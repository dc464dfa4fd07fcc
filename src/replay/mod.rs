//! Replay: the [`SyncWorker`] delivers pending items to a [`Target`] with
//! a durable retry budget, backoff, and a dead-letter set.
//!
//! The worker follows the reference `SyncWorker` and improves on it where
//! the reference admits a weakness:
//!
//! * A target answers with an [`Outcome`], not a bool: delivered, failed
//!   (with a reason and an optional retry-after), or rejected for good.
//!   A rejected item is dead-lettered at once, never retried.
//! * Attempts are durable: the count starts from the item's stored
//!   `attempts` and is written back after every failure together with the
//!   next retry time and the reason, so a new process continues the count.
//! * After `max_attempts` failed attempts (default 5) the item moves to
//!   the spool's dead-letter set (or to a [`DeadLetterSink`]). An item
//!   whose attempts already reach the budget when a run comes to it (an
//!   operator set them, or the budget was lowered) is dead-lettered
//!   without another attempt, the reason saying so
//!   ([`over_budget_reason`]). A failing sink is reported and the item
//!   stays pending: nothing is dropped.
//! * One run attempts an item at most once, on every backend (a local
//!   run walks the spool once in id order; a leased run's claims leave out
//!   what the run attempted already).
//! * Nothing is marked done before its delivery succeeded. A crash after a
//!   delivery and before its `done` commit redelivers the item on the next
//!   run with the same idempotency key (at-least-once).
//! * Default order is the reference's: enqueue order, and a failure does
//!   not block later items. [`ReplayOptions::ordered`] stops at the first
//!   item that fails and stays queued.
//! * Clock, sleep and randomness are injected.

pub mod backoff;
pub mod child;
pub mod events;
pub mod exec;
pub mod follow;
pub mod http;
pub mod lock;
pub mod push;

pub use self::backoff::Backoff;
pub use self::exec::ExecTarget;
pub use self::http::HttpTarget;
pub use self::lock::ReplayLock;

use crate::error::{Error, Result};
use crate::item::{AttemptUpdate, Evidence, Item, ItemId};
use crate::queue::{Claimed, LeaseToken, Leasing, Queue, PAGE_SIZE};
use crate::time::{SharedClock, Timestamp};
use events::{end_timing, start_timing, Event, EventKind, Timing};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// When a target asks to be retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// After this long.
    Delay(Duration),
    /// Not before this time.
    At(SystemTime),
}

/// What a target did with one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered: the item is marked done, with what proves it.
    Delivered(Evidence),
    /// Not delivered this time; try again later.
    Failed {
        /// Why, for the item's `last_error`.
        reason: String,
        /// A retry time the target asked for (HTTP `Retry-After`).
        retry_after: Option<RetryAfter>,
    },
    /// Refused for good: the item is dead-lettered at once.
    Rejected {
        /// Why, for the dead letter's `last_error`.
        reason: String,
    },
}

impl Outcome {
    /// A failed attempt without a retry-after.
    pub fn failed(reason: impl Into<String>) -> Outcome {
        Outcome::Failed {
            reason: reason.into(),
            retry_after: None,
        }
    }
}

/// One delivery request.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// The item.
    pub item: &'a Item,
    /// 1-based number of this attempt (stored attempts + 1).
    pub attempt: u32,
    /// The item's key, or the stable `<spool-uuid>:<id>` when it has none.
    pub idempotency_key: &'a str,
    /// The spool's path, when it has one.
    pub spool_path: Option<&'a Path>,
}

/// Where replay delivers items.
pub trait Target: Send + Sync {
    /// Try to deliver one item. `Err` means the target itself cannot work
    /// (its command does not exist, say): the run stops and the item is
    /// left exactly as it was.
    fn deliver(&self, delivery: &Delivery<'_>) -> std::result::Result<Outcome, String>;

    /// A description for logs, with any secret removed.
    fn describe(&self) -> String;
}

/// Receives items that exhausted their budget or were rejected, instead
/// of the spool's own dead-letter set.
pub trait DeadLetterSink: Send + Sync {
    /// Take the item. On `Ok` the worker removes it from the spool; on
    /// `Err` it stays pending and the failure is reported.
    fn accept(&self, item: &Item, last_error: &str) -> std::result::Result<(), String>;
}

/// Why an item with `attempts` is not attempted again under a budget of
/// `max_attempts`: `attempts (2) already reach --max-attempts 2`.
pub fn over_budget_cause(attempts: u32, max_attempts: u32) -> String {
    format!("attempts ({attempts}) already reach --max-attempts {max_attempts}")
}

/// The `last_error` of an item dead-lettered without another attempt
/// because its `attempts` already reach `max_attempts` (SPEC §4), keeping
/// its previous last error visible:
/// `attempts (2) already reach --max-attempts 2; dead-lettered without
/// another attempt (last error: HTTP 503: busy)`.
pub fn over_budget_reason(attempts: u32, max_attempts: u32, last_error: Option<&str>) -> String {
    let mut reason = format!(
        "{}; dead-lettered without another attempt",
        over_budget_cause(attempts, max_attempts)
    );
    if let Some(e) = last_error.filter(|e| !e.is_empty()) {
        reason.push_str(&format!(" (last error: {e})"));
    }
    reason
}

/// Replay options; the defaults are the reference's.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Cumulative attempts before an item is dead-lettered (default 5).
    pub max_attempts: u32,
    /// Backoff between attempts of one item.
    pub backoff: Backoff,
    /// Attempt items whose next retry time is in the future.
    pub ignore_backoff: bool,
    /// Stop at the first item that fails and stays queued.
    pub ordered: bool,
    /// Attempt at most this many items.
    pub limit: Option<u64>,
    /// Stop starting new attempts after this much time.
    pub deadline: Option<Duration>,
    /// Report what would be attempted; deliver and change nothing.
    pub dry_run: bool,
    /// Deliveries in flight at once (1 = sequential). Not with `ordered`.
    pub concurrency: usize,
    /// Record delivered items as done in groups of up to this many, one
    /// commit per group (1 = every delivery is committed before the next
    /// item is sent). A group is also committed after
    /// [`GROUP_COMMIT_MAX_AGE`] and at the end of every run, so a crash
    /// redelivers at most `commit_every - 1` delivered items (with their
    /// idempotency keys), never loses one.
    pub commit_every: usize,
    /// How long a claim leases an item on a spool with leased replay
    /// (PostgreSQL; see [`crate::Leasing`]): another replayer may take the
    /// item over once it runs out. Longer than one delivery can take (the
    /// CLI's default is `--timeout` + 30s).
    pub lease: Duration,
}

/// The lease of [`ReplayOptions::lease`] by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

/// The longest a delivered item waits in a commit group.
pub const GROUP_COMMIT_MAX_AGE: Duration = Duration::from_millis(500);

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            max_attempts: 5,
            backoff: Backoff::default(),
            ignore_backoff: false,
            ordered: false,
            limit: None,
            deadline: None,
            dry_run: false,
            concurrency: 1,
            commit_every: 1,
            lease: DEFAULT_LEASE,
        }
    }
}

/// What happened to one attempted item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Delivered and marked done.
    Delivered,
    /// Failed; stays pending until `next_retry_at`.
    Failed {
        /// The reason stored as `last_error`.
        error: String,
        /// When it may be retried.
        next_retry_at: Timestamp,
    },
    /// Moved to the dead-letter set (budget exhausted or rejected).
    DeadLettered {
        /// The reason stored as `last_error`.
        error: String,
        /// True when the target rejected it (rather than the budget).
        rejected: bool,
    },
    /// Should have been dead-lettered, but the sink failed; stays pending.
    SinkFailed {
        /// The delivery error.
        error: String,
        /// The sink's error.
        sink_error: String,
    },
    /// Dry run: would have been attempted.
    WouldAttempt,
    /// Dry run: would have been dead-lettered without an attempt, its
    /// attempts already reaching the budget.
    WouldDeadLetter {
        /// Why ([`over_budget_cause`]).
        cause: String,
    },
}

impl ItemOutcome {
    /// The item is no longer pending (delivered or dead-lettered).
    pub fn left_pending(&self) -> bool {
        matches!(
            self,
            ItemOutcome::Delivered | ItemOutcome::DeadLettered { .. }
        )
    }
}

/// Observes a run (progress bars, logs). Called from the worker's thread.
pub trait ReplayObserver: Sync {
    /// Whether [`ReplayObserver::started`] wants the number of items the
    /// run expects to attempt. Counting them takes index counts (SQLite)
    /// or a walk over the pending items (NDJSON, memory), so a run counts
    /// only for an observer that asks (a progress bar, not a log).
    fn wants_total(&self) -> bool {
        false
    }
    /// The run starts. `total` is `None` unless
    /// [`ReplayObserver::wants_total`]; then it is the number of items the
    /// run expects to attempt (or, dry, to report): the items due now —
    /// not held and, unless [`ReplayOptions::ignore_backoff`], not waiting
    /// for a retry time — at most [`ReplayOptions::limit`]. It is counted
    /// when the run starts: items enqueued during the run can take the
    /// number of attempts past it, and `--deadline`, a stop or an
    /// `--ordered` failure can end the run before it.
    fn started(&self, _total: Option<u64>) {}
    /// One item was attempted (or would be, in a dry run).
    fn attempted(&self, _item: &Item, _attempt: u32, _outcome: &ItemOutcome) {}
    /// One item was skipped (held or not due).
    fn skipped(&self, _item: &Item) {}
    /// Something happened in a push run besides an item settling
    /// (`replay --push`; see [`push::PushEvent`]).
    fn push_event(&self, _event: &push::PushEvent<'_>) {}
    /// Follow mode (`--follow`) starts, learning of new items this way.
    fn following(&self, _watching: &follow::Watching) {}
    /// Leased replay: the lease on `item` ran out before its outcome was
    /// recorded and another replayer holds it now, so the outcome of this
    /// attempt was not recorded ("lease lost"; the other replayer's wins).
    fn lease_lost(&self, _item: &Item) {}
    /// An outcome was recorded: called after the commit that recorded it
    /// (with [`ReplayOptions::commit_every`], after its group's commit),
    /// never for an outcome that was not recorded (see [`events`]).
    fn recorded(&self, _event: &events::Event) {}
}

/// Why a run ended before it had looked at every item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `stop()` (a signal).
    Stopped,
    /// `--limit` reached.
    Limit,
    /// `--deadline` passed.
    Deadline,
    /// `--ordered` and an item failed.
    OrderedFailure,
}

/// The result of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayReport {
    /// Delivered and marked done.
    pub delivered: u64,
    /// Failed and left for retry (sink failures included).
    pub failed: u64,
    /// Moved to the dead-letter set in this run.
    pub dead_lettered: u64,
    /// Of those, rejected by the target.
    pub rejected: u64,
    /// Skipped because their next retry time is in the future.
    pub not_due: u64,
    /// Skipped because they are held.
    pub held: u64,
    /// Skipped because an earlier item of their ordering group is still
    /// pending (SPEC §9).
    pub group_waiting: u64,
    /// Dry run: items that would be attempted.
    pub would_attempt: u64,
    /// Dry run: items that would be dead-lettered without an attempt
    /// (their attempts already reach the budget).
    pub would_dead_letter: u64,
    /// Why the run ended early, if it did.
    pub stopped: Option<StopReason>,
    /// True when due items were left unattempted (limit, deadline, stop,
    /// ordered failure).
    pub left_due: bool,
}

/// The exit status a replay report calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayStatus {
    /// Every due item was delivered.
    Clean,
    /// Something stays queued for retry.
    Retry,
    /// At least one item was dead-lettered.
    DeadLettered,
}

impl ReplayReport {
    /// The one-line summary `spool replay` prints (and `spool watch`
    /// logs): `delivered 3, failed 1, dead-lettered 0, not due 2, held 0`,
    /// plus why the run stopped early. A dry run says what would be
    /// attempted instead.
    pub fn summary(&self, dry_run: bool) -> String {
        let mut s = if dry_run {
            let mut s = format!("dry run: {} would be attempted", self.would_attempt);
            if self.would_dead_letter > 0 {
                s.push_str(&format!(
                    ", {} would be dead-lettered without an attempt",
                    self.would_dead_letter
                ));
            }
            s
        } else {
            format!(
                "delivered {}, failed {}, dead-lettered {}",
                self.delivered, self.failed, self.dead_lettered
            )
        };
        s.push_str(&format!(", not due {}, held {}", self.not_due, self.held));
        if self.group_waiting > 0 {
            s.push_str(&format!(
                ", waiting behind their group {}",
                self.group_waiting
            ));
        }
        s.push_str(match self.stopped {
            Some(StopReason::Stopped) => "; stopped after the item in flight",
            Some(StopReason::Limit) => "; --limit reached, due items left",
            Some(StopReason::Deadline) => "; --deadline passed, due items left",
            Some(StopReason::OrderedFailure) => "; --ordered: stopped at the first failure",
            None => "",
        });
        s
    }

    /// Add a later run's report to this one (follow mode's summary of
    /// many passes): the counts of what happened add up; what describes
    /// the spool at the end (not due, held, why the run stopped, due
    /// items left) is the later run's.
    pub fn absorb(&mut self, later: &ReplayReport) {
        self.delivered += later.delivered;
        self.failed += later.failed;
        self.dead_lettered += later.dead_lettered;
        self.rejected += later.rejected;
        self.would_attempt += later.would_attempt;
        self.would_dead_letter += later.would_dead_letter;
        self.not_due = later.not_due;
        self.held = later.held;
        self.stopped = later.stopped;
        self.left_due = later.left_due;
    }

    /// Dead letters win over retries, retries over clean.
    pub fn status(&self) -> ReplayStatus {
        if self.dead_lettered > 0 {
            ReplayStatus::DeadLettered
        } else if self.failed > 0 || self.left_due {
            ReplayStatus::Retry
        } else {
            ReplayStatus::Clean
        }
    }
}

/// A handle that stops a run after the item in flight.
#[derive(Clone, Debug, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Ask the current (or next) run to stop after the item in flight.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// True once stop was asked for.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The flag itself (for signal handlers).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }
}

/// Replays a spool against a target.
pub struct SyncWorker<'a> {
    queue: &'a dyn Queue,
    target: &'a dyn Target,
    sink: Option<&'a dyn DeadLetterSink>,
    observer: Option<&'a dyn ReplayObserver>,
    opts: ReplayOptions,
    clock: SharedClock,
    rng: Mutex<Box<dyn FnMut() -> f64 + Send + 'a>>,
    stop: StopHandle,
    spool_path: Option<PathBuf>,
    run_lock: Mutex<()>,
    /// Delivered ids not yet committed as done, and when the oldest was
    /// delivered (group commit).
    done_group: Mutex<DoneGroup>,
    /// Leased replay: delivered claims not yet committed, and when the
    /// oldest was delivered.
    leased_group: Mutex<LeasedGroup>,
}

impl<'a> SyncWorker<'a> {
    /// A worker over `queue` delivering to `target`.
    pub fn new(
        queue: &'a dyn Queue,
        target: &'a dyn Target,
        opts: ReplayOptions,
        clock: SharedClock,
    ) -> Result<SyncWorker<'a>> {
        if opts.max_attempts == 0 {
            return Err(Error::InvalidInput(
                "max attempts must be at least 1".into(),
            ));
        }
        if opts.concurrency == 0 {
            return Err(Error::InvalidInput("concurrency must be at least 1".into()));
        }
        if opts.ordered && opts.concurrency > 1 {
            return Err(Error::Unsupported(
                "ordered replay delivers one item at a time; drop --concurrency or --ordered"
                    .into(),
            ));
        }
        let mut rng = fastrand::Rng::new();
        Ok(SyncWorker {
            queue,
            target,
            sink: None,
            observer: None,
            opts,
            clock,
            rng: Mutex::new(Box::new(move || rng.f64())),
            stop: StopHandle::default(),
            spool_path: None,
            run_lock: Mutex::new(()),
            done_group: Mutex::new((Vec::new(), None)),
            leased_group: Mutex::new((Vec::new(), None)),
        })
    }

    /// Tell the observer of a recorded outcome.
    fn emit(&self, event: impl FnOnce() -> Event) {
        if let Some(o) = self.observer {
            o.recorded(&event());
        }
    }

    /// Send dead letters to `sink` instead of the spool's own set.
    pub fn with_sink(mut self, sink: &'a dyn DeadLetterSink) -> Self {
        self.sink = Some(sink);
        self
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

    /// The spool path handed to targets (`SPOOL_PATH`).
    pub fn with_spool_path(mut self, path: Option<&Path>) -> Self {
        self.spool_path = path.map(Path::to_path_buf);
        self
    }

    /// Use this stop handle (so a signal handler can be wired up first).
    pub fn with_stop_handle(mut self, stop: StopHandle) -> Self {
        self.stop = stop;
        self
    }

    /// The handle that stops a run after the item in flight.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Ask the run to stop after the item in flight (one-shot).
    pub fn stop(&self) {
        self.stop.stop()
    }

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
    fn halt(&self, ctx: &RunCtx) -> Option<StopReason> {
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

    /// Write the outcome of one attempt to the spool.
    fn record(
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
    fn over_budget(&self, item: &Item) -> bool {
        item.attempts >= self.opts.max_attempts
    }

    /// Dead-letter an item whose attempts already reach the budget,
    /// without an attempt, and report it.
    fn give_up(&self, item: &Item, report: &mut ReplayReport) -> Result<ItemOutcome> {
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
}

impl SyncWorker<'_> {
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
    fn flush_done(&self) -> Result<()> {
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
type DoneGroup = (Vec<(ItemId, Evidence, Option<Event>)>, Option<Timestamp>);

/// Delivered claims not yet committed as done, and when the oldest was
/// delivered.
/// The event of each is told after the group's commit.
type LeasedGroup = (
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
    fn run_leased(
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
    fn flush_leased(&self, leasing: &dyn Leasing) -> Result<()> {
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

struct RunCtx {
    uuid: String,
    started: Timestamp,
    attempted: u64,
    /// Ordering groups in the current sweep.
    groups: GroupGate,
}

/// Ordering groups (SPEC §9) during a local replay: an item is attempted
/// only when no earlier item of its group is pending. A sweep walks the
/// spool in id order; the first pending item of a group it meets is the
/// group's head (held, waiting or due alike), and every later item of the
/// group waits. When a head leaves the pending set during the sweep
/// (delivered or dead-lettered), the next item of its group becomes the
/// head: a concurrent run hands it straight to the worker that finished
/// the old head (the sweep remembers, per group, the ids it passed over,
/// up to [`GroupGate::CHAIN_CAP`] in all), and a run sweeps again over the
/// items of the groups that made progress, for what was not handed on,
/// until no group made progress. With `--concurrency`, at most one item
/// per group is in flight (the others wait behind it).
#[derive(Debug, Default)]
struct GroupGate {
    /// Groups whose head this sweep has met.
    seen: std::collections::HashSet<String>,
    /// Groups whose head left the pending set during this sweep.
    progressed: std::collections::HashSet<String>,
    /// A later sweep looks only at the items of these groups.
    only: Option<std::collections::HashSet<String>>,
    /// Per group, the ids this sweep passed over because they waited
    /// behind the group's head, in id order: the group's next heads.
    waiting: std::collections::HashMap<String, std::collections::VecDeque<ItemId>>,
    /// Groups whose waiting ids were not all remembered (the cap): only
    /// the remembered prefix is handed on.
    capped: std::collections::HashSet<String>,
    /// Ids remembered in `waiting` during this sweep.
    remembered: usize,
    /// Heads admitted in this run that have not left the pending set (in
    /// flight, held, waiting for a retry time, failed): a later sweep
    /// meets them as heads again without counting them again.
    heads: std::collections::HashSet<ItemId>,
    /// Ids handed on, with their group, to be taken before the sweep
    /// goes on.
    ready: std::collections::VecDeque<(ItemId, String)>,
    /// Groups whose head left during this sweep with no later item
    /// remembered: the next item of the group the sweep meets leads.
    free: std::collections::HashSet<String>,
}

impl GroupGate {
    /// The most waiting ids one sweep remembers (a few MiB at most).
    const CHAIN_CAP: usize = 100_000;

    /// Whether the sweep looks at `item` at all, and whether it may go on
    /// to be attempted (it is the head of its group, or has none). Counts
    /// the items that wait behind their group.
    fn admit(&mut self, item: &Item, report: &mut ReplayReport) -> bool {
        let Some(g) = &item.group else {
            // Items without a group were all looked at by the first sweep.
            return self.only.is_none();
        };
        if let Some(only) = &self.only {
            if !only.contains(g) {
                return false;
            }
        }
        if self.heads.contains(&item.id) {
            // Met again by a later sweep: still its group's head, and
            // counted already.
            self.seen.insert(g.clone());
            return false;
        }
        if self.seen.contains(g) {
            if self.free.remove(g) {
                // Everything before it in its group has left.
                self.heads.insert(item.id);
                return true;
            }
            if self.only.is_none() {
                report.group_waiting += 1;
            }
            if self.remembered < Self::CHAIN_CAP && !self.capped.contains(g) {
                self.waiting
                    .entry(g.clone())
                    .or_default()
                    .push_back(item.id);
                self.remembered += 1;
            } else {
                self.capped.insert(g.clone());
            }
            return false;
        }
        self.seen.insert(g.clone());
        self.heads.insert(item.id);
        if self.only.is_some() {
            // It waited behind its group in the sweep before; now it leads.
            report.group_waiting = report.group_waiting.saturating_sub(1);
        }
        true
    }

    /// `item` left the pending set (delivered or dead-lettered): the next
    /// item of its group that this sweep passed over becomes ready.
    fn left(&mut self, item: &Item) {
        if let Some(g) = &item.group {
            self.heads.remove(&item.id);
            self.progressed.insert(g.clone());
            self.hand_on(g);
        }
    }

    /// The head of group `g` is gone: its next remembered item becomes
    /// ready, or, with none, the group is free.
    fn hand_on(&mut self, g: &str) {
        match self.waiting.get_mut(g).and_then(|w| w.pop_front()) {
            Some(next) => self.ready.push_back((next, g.to_string())),
            None if !self.capped.contains(g) => {
                self.free.insert(g.to_string());
            }
            // Items past the cap were not remembered: the next sweep.
            None => {}
        }
    }

    /// Ready item `id` of group `g` may not be attempted now (held,
    /// waiting for its retry time): it leads, no longer waits, and the
    /// rest of the group waits for the next sweep.
    fn blocked(&mut self, id: ItemId, g: &str, report: &mut ReplayReport) {
        self.heads.insert(id);
        report.group_waiting = report.group_waiting.saturating_sub(1);
        if let Some(w) = self.waiting.get_mut(g) {
            w.clear();
        }
        self.capped.insert(g.to_string());
    }

    /// A ready item is taken: it leads and no longer waits.
    fn took(&mut self, id: ItemId, report: &mut ReplayReport) {
        self.heads.insert(id);
        report.group_waiting = report.group_waiting.saturating_sub(1);
    }

    /// Start another sweep if a group made progress while later items of
    /// it waited; false when the run is over.
    fn next_sweep(&mut self, report: &ReplayReport) -> bool {
        self.waiting.clear();
        self.capped.clear();
        self.remembered = 0;
        self.ready.clear();
        self.free.clear();
        if self.progressed.is_empty() || report.group_waiting == 0 {
            return false;
        }
        self.only = Some(std::mem::take(&mut self.progressed));
        self.seen.clear();
        true
    }
}
