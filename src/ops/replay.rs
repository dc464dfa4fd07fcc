//! `replay`: deliver the pending items of a spool to a command or a URL,
//! or push them to a receiving spool, holding the spool's replay lock:
//! once ([`replay`], [`push`]), or on and on as items arrive ([`follow`],
//! [`follow_push`]).

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::item::{Item, ItemId};
use crate::replay::exec::ExecTarget;
use crate::replay::follow::{
    FollowEnd, FollowOptions, FollowStats, Follower, PassEnd, Signal, SignalWait, SpoolWatcher,
    Watching, DEFAULT_POLL,
};
use crate::replay::http::{HttpOptions, HttpPush, HttpPushOptions, HttpTarget};
use crate::replay::push::{
    PushHalt, PushOptions, PushReport, PushSender, PushShape, PushStatus, MAX_PIPELINE,
};
use crate::replay::{
    ItemOutcome, ReplayLock, ReplayObserver, ReplayOptions, ReplayReport, ReplayStatus, StopHandle,
    StopReason, SyncWorker, Target,
};
use crate::time::SharedClock;
use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

/// Where to deliver.
#[derive(Clone, Debug)]
pub enum TargetSpec {
    /// Run a command per item (`--exec`).
    Exec {
        /// The command line.
        command: String,
        /// Run it through `/bin/sh -c`.
        shell: bool,
        /// Exit codes that reject an item for good.
        reject_exit: Vec<i32>,
        /// Bound on one attempt.
        timeout: Option<Duration>,
    },
    /// Send one HTTP request per item (`--url`).
    Url {
        /// The URL (credentials in it are used, never shown).
        url: String,
        /// Method, content type, headers, retry statuses, timeout, TLS
        /// trust (`--cacert`).
        http: HttpOptions,
    },
}

impl TargetSpec {
    /// Build the target for up to `in_flight` deliveries at once,
    /// checking the command line or URL, and for `Url` reading the
    /// certificates TLS trusts. Errors are [`Error::InvalidInput`] (a bad
    /// command line, URL or header), or an [`Error::Io`] for a `--cacert`
    /// file that is missing, unreadable or not PEM certificates.
    pub fn build(&self, in_flight: usize) -> Result<Box<dyn Target>> {
        Ok(match self {
            TargetSpec::Exec {
                command,
                shell,
                reject_exit,
                timeout,
            } => Box::new(ExecTarget::new(
                command,
                *shell,
                reject_exit.clone(),
                *timeout,
            )?),
            TargetSpec::Url { url, http } => Box::new(HttpTarget::new(
                url,
                &HttpOptions {
                    connections: in_flight.max(1),
                    ..http.clone()
                },
            )?),
        })
    }
}

/// Everything one replay run needs.
pub struct ReplayRequest<'a> {
    /// The target.
    pub target: TargetSpec,
    /// Worker options.
    pub options: ReplayOptions,
    /// How long to wait for another replay of the same spool to finish.
    pub wait: Duration,
    /// The clock.
    pub clock: SharedClock,
    /// Stops the run after the item in flight (signals).
    pub stop: StopHandle,
    /// Progress and per-item reports.
    pub observer: Option<&'a dyn ReplayObserver>,
}

/// What a run did, and the target it ran against (for the summary).
#[derive(Clone, Debug)]
pub struct ReplayRun {
    /// The worker's report.
    pub report: ReplayReport,
    /// The target, described without secrets.
    pub target: String,
}

/// Replay `spool` once. Holds the spool's replay lock for the run (a dry
/// run takes no lock: it changes nothing), so two overlapping replays
/// never deliver the same item twice at the same time.
pub fn replay(spool: &Spool, req: &ReplayRequest<'_>) -> Result<ReplayRun> {
    let target = req.target.build(req.options.concurrency)?;
    let path = spool.path().map(|p| p.to_path_buf());
    let _lock = match (&path, req.options.dry_run) {
        (Some(p), false) => Some(ReplayLock::acquire(p, req.wait)?),
        _ => None,
    };
    // Leased replay is shared; only an ordered one is exclusive.
    let _exclusive = match req.options.ordered && !req.options.dry_run {
        true => ExclusiveLease::take(spool, req.wait)?,
        false => None,
    };
    let shown = path.clone().or_else(|| shown_address(spool));
    let mut worker = SyncWorker::new(&**spool, &*target, req.options.clone(), req.clock.clone())?
        .with_spool_path(shown.as_deref())
        .with_stop_handle(req.stop.clone());
    if let Some(o) = req.observer {
        worker = worker.with_observer(o);
    }
    let report = worker.run()?;
    Ok(ReplayRun {
        report,
        target: target.describe(),
    })
}

/// The exclusive replay lock of a spool with leased replay (PostgreSQL's
/// advisory lock), released when dropped.
struct ExclusiveLease<'a>(&'a dyn crate::queue::Leasing);

impl<'a> ExclusiveLease<'a> {
    /// Take it when the spool has leased replay (`None` otherwise: the
    /// local backends' replay lock is exclusive already).
    fn take(spool: &'a Spool, wait: Duration) -> Result<Option<ExclusiveLease<'a>>> {
        match spool.leasing() {
            Some(l) => {
                l.lock_exclusive(wait)?;
                Ok(Some(ExclusiveLease(l)))
            }
            None => Ok(None),
        }
    }
}

impl Drop for ExclusiveLease<'_> {
    fn drop(&mut self) {
        let _ = self.0.unlock_exclusive();
    }
}

/// What targets see as `SPOOL_PATH` for a spool without a path: its
/// address without the password.
fn shown_address(spool: &Spool) -> Option<std::path::PathBuf> {
    match spool {
        Spool::Postgres(q) => Some(q.display().into()),
        _ => None,
    }
}

/// Check replay options that the worker would refuse, with the flags'
/// names in the message.
pub fn check_options(o: &ReplayOptions) -> Result<()> {
    if o.ordered && o.concurrency > 1 {
        return Err(Error::Unsupported(
            "--ordered delivers one item at a time and cannot be combined with --concurrency"
                .into(),
        ));
    }
    if o.backoff.base > o.backoff.max {
        return Err(Error::Unsupported(
            "--backoff-base must not be larger than --backoff-max".into(),
        ));
    }
    Ok(())
}

/// Where and how to push (`--push URL`).
#[derive(Clone, Debug)]
pub struct PushTarget {
    /// The receiver's push endpoint (credentials in it are used, never
    /// shown).
    pub url: String,
    /// Headers, timeout, compression, TLS trust (`--cacert`).
    pub http: HttpPushOptions,
}

impl PushTarget {
    /// Build the transport, checking the URL and headers and reading the
    /// certificates TLS trusts: [`Error::InvalidInput`] for a bad URL or
    /// header, [`Error::Io`] for a bad `--cacert` file.
    pub fn build(&self) -> Result<HttpPush> {
        HttpPush::new(&self.url, &self.http)
    }
}

/// Everything one push run needs.
pub struct PushReplay<'a> {
    /// The receiver.
    pub target: PushTarget,
    /// Sender options.
    pub options: PushOptions,
    /// How long to wait for another replay of the same spool to finish.
    pub wait: Duration,
    /// The clock (backoff waits and the deadline).
    pub clock: SharedClock,
    /// Stops the run after the request in flight (signals).
    pub stop: StopHandle,
    /// Progress, per-item and per-request reports.
    pub observer: Option<&'a dyn ReplayObserver>,
}

/// What a push run did, and the receiver (for the summary).
#[derive(Clone, Debug)]
pub struct PushRun {
    /// The sender's report.
    pub report: PushReport,
    /// The receiver, described without secrets.
    pub target: String,
}

/// Push `spool` to a receiver once. Holds the spool's replay lock for
/// the run (a dry run takes none and changes nothing), so one stream of
/// sequence numbers goes out at a time.
pub fn push(spool: &Spool, req: &PushReplay<'_>) -> Result<PushRun> {
    use crate::replay::push::PushTransport as _;
    let transport = req.target.build()?;
    let path = spool.path().map(|p| p.to_path_buf());
    let _lock = match (&path, req.options.dry_run) {
        (Some(p), false) => Some(ReplayLock::acquire(p, req.wait)?),
        _ => None,
    };
    // One push stream per spool, across hosts.
    let _exclusive = match req.options.dry_run {
        false => ExclusiveLease::take(spool, req.wait)?,
        true => None,
    };
    let mut sender = PushSender::new(&**spool, &transport, req.options.clone(), req.clock.clone())?
        .with_stop_handle(req.stop.clone());
    if let Some(o) = req.observer {
        sender = sender.with_observer(o);
    }
    let report = sender.run()?;
    Ok(PushRun {
        report,
        target: transport.describe(),
    })
}

/// The push options for replay options `o` (the flags `--url` and
/// `--push` share) and the shape of the requests. Refuses, naming the
/// flag, what does not apply to a push: one stream per client goes out in
/// sequence order (`--pipeline` requests at a time), and every
/// acknowledgement is committed for its whole batch.
pub fn push_options(o: &ReplayOptions, shape: PushShape) -> Result<PushOptions> {
    let PushShape {
        batch,
        batch_bytes,
        pipeline,
    } = shape;
    let refuse = |flag: &str, why: &str| {
        Err(Error::Unsupported(format!(
            "{flag} does not apply to --push: {why}"
        )))
    };
    if o.concurrency > 1 {
        return refuse(
            "--concurrency",
            "a spool is one push stream, sent in sequence order (use --batch to send more per request, --pipeline for more requests in flight)",
        );
    }
    if o.ordered {
        return refuse(
            "--ordered",
            "a push is always in sequence order, and a failed request stops nothing but itself",
        );
    }
    if o.commit_every > 1 {
        return refuse(
            "--commit-every",
            "every acknowledgement is one commit for its whole batch already",
        );
    }
    check_options(o)?;
    if batch == 0 {
        return Err(Error::Unsupported("--batch must be at least 1".into()));
    }
    if batch_bytes == 0 {
        return Err(Error::Unsupported(
            "--batch-bytes must be at least 1 byte".into(),
        ));
    }
    if !(1..=MAX_PIPELINE).contains(&pipeline) {
        return Err(Error::Unsupported(format!(
            "--pipeline must be between 1 and {MAX_PIPELINE}"
        )));
    }
    Ok(PushOptions {
        max_attempts: o.max_attempts,
        backoff: o.backoff,
        ignore_backoff: o.ignore_backoff,
        limit: o.limit,
        deadline: o.deadline,
        dry_run: o.dry_run,
        batch,
        batch_bytes,
        pipeline,
    })
}

/// Follow mode (`--follow`): what [`follow`] and [`follow_push`] need
/// besides the one-shot request.
#[derive(Clone, Debug)]
pub struct FollowRequest {
    /// Look at the spool at least this often (`--poll`).
    pub poll: Duration,
    /// End after this long without an attempt (`--idle-exit`).
    pub idle_exit: Option<Duration>,
    /// Wakes the waiting run (change notifications) and stops it. Build
    /// it over the request's stop handle ([`Signal::new`]) so that a stop
    /// also ends a pass in flight after its item.
    pub signal: Signal,
    /// Watch the spool's directory for changes; without it (or when the
    /// system cannot watch) only `poll` finds new items.
    pub notify: bool,
}

impl FollowRequest {
    /// Follow with notifications, polling every [`DEFAULT_POLL`], never
    /// ending by itself.
    pub fn new(signal: Signal) -> FollowRequest {
        FollowRequest {
            poll: DEFAULT_POLL,
            idle_exit: None,
            signal,
            notify: true,
        }
    }
}

/// What a follow run did.
#[derive(Clone, Debug)]
pub struct FollowRun<R> {
    /// The passes' reports added up ([`ReplayReport::absorb`],
    /// [`PushReport::absorb`]).
    pub report: R,
    /// The target, described without secrets.
    pub target: String,
    /// Why it ended, how many passes, how long.
    pub follow: FollowStats,
    /// Items that failed in this run and are still pending at its end
    /// (`--exec`/`--url`; 0 for a push, whose in-flight items the report
    /// counts).
    pub still_failing: u64,
    /// How it learned of new items.
    pub watching: Watching,
}

impl FollowRun<ReplayReport> {
    /// The status of the whole run: dead letters win; an item that failed
    /// and is still pending, or due items left by `--limit` or
    /// `--deadline`, is a retry; otherwise clean. (A stop is the caller's
    /// to treat: for a service it is not an error.)
    pub fn status(&self) -> ReplayStatus {
        let r = &self.report;
        if r.dead_lettered > 0 {
            ReplayStatus::DeadLettered
        } else if self.still_failing > 0 || (r.left_due && self.follow.end != FollowEnd::Stopped) {
            ReplayStatus::Retry
        } else {
            ReplayStatus::Clean
        }
    }

    /// The summary line: the counts of the whole run, then how it ended:
    /// `delivered 12, failed 1, dead-lettered 0, not due 0, held 0;
    /// followed for 2h3m (85 passes), stopped`.
    pub fn summary(&self) -> String {
        let mut r = self.report.clone();
        r.stopped = None;
        format!("{}; {}", r.summary(false), follow_tail(&self.follow))
    }
}

impl FollowRun<PushReport> {
    /// The status of the whole run, as [`PushReport::status`] for the
    /// state at its end.
    pub fn status(&self) -> PushStatus {
        let mut r = self.report.clone();
        if self.follow.end == FollowEnd::Stopped && r.halt == Some(PushHalt::Signal) {
            r.halt = None;
            r.left_due = false;
        }
        r.status()
    }

    /// The summary line, as [`FollowRun::summary`] for a push.
    pub fn summary(&self) -> String {
        let mut r = self.report.clone();
        if matches!(
            r.halt,
            Some(PushHalt::Signal | PushHalt::Limit | PushHalt::Deadline)
        ) {
            r.halt = None;
        }
        format!("{}; {}", r.summary(false), follow_tail(&self.follow))
    }
}

fn follow_tail(f: &FollowStats) -> String {
    let why = match f.end {
        FollowEnd::Stopped => "stopped",
        FollowEnd::Idle => "ended after --idle-exit with nothing to do",
        FollowEnd::Deadline => "--deadline passed",
        FollowEnd::Finished => "ended",
    };
    format!(
        "followed for {} ({} {}), {why}",
        crate::units::format_duration(Duration::from_secs(f.ran_for.as_secs())),
        f.passes,
        if f.passes == 1 { "pass" } else { "passes" }
    )
}

/// Refuse what cannot follow: a dry run shows one pass, and
/// `--ignore-backoff` would retry a failing item in a tight loop.
fn check_follow(dry_run: bool, ignore_backoff: bool, f: &FollowRequest) -> Result<()> {
    if dry_run {
        return Err(Error::Unsupported(
            "--dry-run shows what one run would do; it cannot be combined with --follow".into(),
        ));
    }
    if ignore_backoff {
        return Err(Error::Unsupported(
            "--ignore-backoff would retry a failing item over and over; it cannot be combined with --follow".into(),
        ));
    }
    FollowOptions {
        poll: f.poll,
        idle_exit: f.idle_exit,
        deadline: None,
    }
    .check()
}

/// Start the spool's watcher for `f`, if asked and possible.
fn start_watcher(spool: &Spool, f: &FollowRequest) -> (Option<SpoolWatcher>, Watching) {
    if !f.notify {
        return (None, Watching::PollOnly("notifications are off".into()));
    }
    let signal = f.signal.clone();
    match SpoolWatcher::start(spool, move || signal.notify()) {
        Ok(Some(w)) => {
            let watching = w.watching();
            (Some(w), watching)
        }
        Ok(None) => (None, Watching::PollOnly("the spool has no files".into())),
        Err(e) => (None, Watching::PollOnly(e.to_string())),
    }
}

/// What is left of a bound after `used`.
fn remaining(bound: Option<u64>, used: u64) -> Option<u64> {
    bound.map(|b| b.saturating_sub(used))
}

/// Replay `spool` and keep going (`--follow`): a pass now, then one
/// whenever new items arrive or a waiting item becomes due (see
/// [`crate::replay::follow`]), until `f.signal` stops it, `--idle-exit`,
/// `--deadline` or `--limit`. Holds the spool's replay lock for the whole
/// run. `--limit` and `--deadline` bound the whole run.
pub fn follow(
    spool: &Spool,
    req: &ReplayRequest<'_>,
    f: &FollowRequest,
) -> Result<FollowRun<ReplayReport>> {
    check_follow(req.options.dry_run, req.options.ignore_backoff, f)?;
    check_options(&req.options)?;
    let target = req.target.build(req.options.concurrency)?;
    let path = spool.path().map(|p| p.to_path_buf());
    let _lock = match &path {
        Some(p) => Some(ReplayLock::acquire(p, req.wait)?),
        None => None,
    };
    // Leased replay is shared; only an ordered one is exclusive.
    let _exclusive = match req.options.ordered {
        true => ExclusiveLease::take(spool, req.wait)?,
        false => None,
    };
    let (_watcher, watching) = start_watcher(spool, f);
    if let Some(o) = req.observer {
        o.following(&watching);
    }
    let tracker = Tracker {
        inner: req.observer,
        failing: Mutex::new(HashSet::new()),
    };
    let wait = SignalWait::new(f.signal.clone(), req.clock.clone());
    let follower = Follower::new(
        &**spool,
        spool,
        &wait,
        req.clock.clone(),
        FollowOptions {
            poll: f.poll,
            idle_exit: f.idle_exit,
            deadline: req.options.deadline,
        },
    )?;
    let started = req.clock.now();
    let mut total = ReplayReport::default();
    let mut attempted = 0u64;
    let stats = follower.run(&mut || {
        let mut opts = req.options.clone();
        opts.limit = remaining(req.options.limit, attempted);
        opts.deadline = req
            .options
            .deadline
            .map(|d| d.saturating_sub(req.clock.now().since(started)));
        let worker = SyncWorker::new(&**spool, &*target, opts, req.clock.clone())?
            .with_spool_path(path.as_deref())
            .with_stop_handle(req.stop.clone())
            .with_observer(&tracker);
        let r = worker.run()?;
        let n = r.delivered + r.failed + r.dead_lettered;
        attempted += n;
        total.absorb(&r);
        let end = match r.stopped {
            Some(StopReason::Stopped) => Some(FollowEnd::Stopped),
            Some(StopReason::Deadline) => Some(FollowEnd::Deadline),
            Some(StopReason::Limit) => Some(FollowEnd::Finished),
            _ if remaining(req.options.limit, attempted) == Some(0) => Some(FollowEnd::Finished),
            _ => None,
        };
        Ok(PassEnd {
            attempted: n,
            end,
            not_before: None,
        })
    });
    // A stop between passes: the stop handle is still set for the next
    // run of the caller's; leave it as a one-shot run would.
    let stats = stats?;
    if stats.end == FollowEnd::Stopped {
        total.stopped = Some(StopReason::Stopped);
    }
    let still_failing = tracker.failing.lock().map(|s| s.len()).unwrap_or(0) as u64;
    Ok(FollowRun {
        report: total,
        target: target.describe(),
        follow: stats,
        still_failing,
        watching,
    })
}

/// Push `spool` to a receiver and keep going (`--push --follow`), as
/// [`follow`] does for `--exec`/`--url`. A run that failed its whole
/// request budget waits `--backoff-max` before the next one (a
/// receiver's longer `Retry-After`, that long); a receiver that refuses
/// the run ends it.
pub fn follow_push(
    spool: &Spool,
    req: &PushReplay<'_>,
    f: &FollowRequest,
) -> Result<FollowRun<PushReport>> {
    use crate::replay::push::PushTransport as _;
    check_follow(req.options.dry_run, req.options.ignore_backoff, f)?;
    let transport = req.target.build()?;
    let path = spool.path().map(|p| p.to_path_buf());
    let _lock = match &path {
        Some(p) => Some(ReplayLock::acquire(p, req.wait)?),
        None => None,
    };
    // A push replay is exclusive on a shared spool too.
    let _exclusive = ExclusiveLease::take(spool, req.wait)?;
    let (_watcher, watching) = start_watcher(spool, f);
    if let Some(o) = req.observer {
        o.following(&watching);
    }
    let wait = SignalWait::new(f.signal.clone(), req.clock.clone());
    let follower = Follower::new(
        &**spool,
        spool,
        &wait,
        req.clock.clone(),
        FollowOptions {
            poll: f.poll,
            idle_exit: f.idle_exit,
            deadline: req.options.deadline,
        },
    )?;
    let started = req.clock.now();
    let mut total = PushReport::default();
    let mut sent = 0u64;
    let stats = follower.run(&mut || {
        let mut opts = req.options.clone();
        opts.limit = remaining(req.options.limit, sent);
        opts.deadline = req
            .options
            .deadline
            .map(|d| d.saturating_sub(req.clock.now().since(started)));
        let mut sender = PushSender::new(&**spool, &transport, opts, req.clock.clone())?
            .with_stop_handle(req.stop.clone());
        if let Some(o) = req.observer {
            sender = sender.with_observer(o);
        }
        let r = sender.run()?;
        sent += r.sent;
        total.absorb(&r);
        let now = req.clock.now();
        let (end, not_before) = match &r.halt {
            Some(PushHalt::Signal) => (Some(FollowEnd::Stopped), None),
            Some(PushHalt::Deadline) => (Some(FollowEnd::Deadline), None),
            Some(PushHalt::Limit | PushHalt::Refused(_)) => (Some(FollowEnd::Finished), None),
            Some(PushHalt::Budget) => (None, Some(now.saturating_add(req.options.backoff.max))),
            Some(PushHalt::RetryAfter(d)) => (None, Some(now.saturating_add(*d))),
            Some(PushHalt::NotBefore(t)) => (None, Some(*t)),
            None if remaining(req.options.limit, sent) == Some(0) => {
                (Some(FollowEnd::Finished), None)
            }
            None => (None, None),
        };
        Ok(PassEnd {
            attempted: r.requests,
            end,
            not_before,
        })
    })?;
    Ok(FollowRun {
        report: total,
        target: transport.describe(),
        follow: stats,
        still_failing: 0,
        watching,
    })
}

/// Passes the observer's calls on, and keeps the ids of the items that
/// failed in this run and are still pending.
struct Tracker<'a> {
    inner: Option<&'a dyn ReplayObserver>,
    failing: Mutex<HashSet<ItemId>>,
}

impl ReplayObserver for Tracker<'_> {
    fn wants_total(&self) -> bool {
        self.inner.is_some_and(|o| o.wants_total())
    }
    fn started(&self, total: Option<u64>) {
        if let Some(o) = self.inner {
            o.started(total)
        }
    }
    fn attempted(&self, item: &Item, attempt: u32, outcome: &ItemOutcome) {
        {
            let mut failing = self.failing.lock().unwrap_or_else(|e| e.into_inner());
            match outcome {
                ItemOutcome::Failed { .. } | ItemOutcome::SinkFailed { .. } => {
                    failing.insert(item.id);
                }
                ItemOutcome::Delivered | ItemOutcome::DeadLettered { .. } => {
                    failing.remove(&item.id);
                }
                ItemOutcome::WouldAttempt | ItemOutcome::WouldDeadLetter { .. } => {}
            }
        }
        if let Some(o) = self.inner {
            o.attempted(item, attempt, outcome)
        }
    }
    fn skipped(&self, item: &Item) {
        if let Some(o) = self.inner {
            o.skipped(item)
        }
    }
    fn push_event(&self, event: &crate::replay::push::PushEvent<'_>) {
        if let Some(o) = self.inner {
            o.push_event(event)
        }
    }
    fn following(&self, watching: &Watching) {
        if let Some(o) = self.inner {
            o.following(watching)
        }
    }
    fn lease_lost(&self, item: &Item) {
        if let Some(o) = self.inner {
            o.lease_lost(item)
        }
    }
    fn recorded(&self, event: &crate::replay::events::Event) {
        if let Some(o) = self.inner {
            o.recorded(event)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::events::{Event, EventKind};
    use crate::time::Timestamp;

    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl ReplayObserver for Heard {
        fn lease_lost(&self, item: &Item) {
            self.0
                .lock()
                .unwrap()
                .push(format!("lease_lost {}", item.id));
        }
        fn recorded(&self, event: &Event) {
            self.0
                .lock()
                .unwrap()
                .push(format!("{} {}", event.kind.name(), event.id));
        }
    }

    /// Follow mode's tracker once kept `lease_lost` to itself: a
    /// `replay --follow` on PostgreSQL never told that a lease ran out.
    #[test]
    fn the_follow_tracker_passes_lease_lost_and_recorded_outcomes_on() {
        let heard = Heard::default();
        let tracker = Tracker {
            inner: Some(&heard),
            failing: Mutex::new(HashSet::new()),
        };
        let item = Item::new(4, b"x".to_vec(), String::new(), Timestamp::from_millis(0));
        tracker.lease_lost(&item);
        tracker.recorded(&Event::new(
            EventKind::Delivered,
            &item,
            1,
            Timestamp::from_millis(0),
        ));
        assert_eq!(*heard.0.lock().unwrap(), ["lease_lost 4", "delivered 4"]);
    }
}
