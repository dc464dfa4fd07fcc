//! Follow mode: keep replaying a spool as items arrive.
//!
//! `spool replay --follow` is a service, not a cron job: it delivers what
//! is due, then waits, and delivers again as soon as there is something
//! to do. This module holds the waiting; the passes themselves are the
//! ordinary [`super::SyncWorker`] and [`super::push::PushSender`] runs.
//!
//! What wakes a [`Follower`]:
//!
//! * **A change notification** ([`Signal::notify`]): the
//!   [`SpoolWatcher`] watches the spool's directory (inotify through the
//!   `notify` crate) and calls it when the spool's own files change —
//!   the SQLite database and its `-wal` (every commit writes the WAL),
//!   the NDJSON main file (every mutation appends to it; compaction
//!   replaces it, which is why the directory is watched and events are
//!   filtered by file name). A notification is only a hint: the
//!   follower then compares a cheap [`ChangeMark`] of the spool (SQLite's
//!   `PRAGMA data_version`, the NDJSON file's identity, size and
//!   modification time) with the one taken when the last pass began,
//!   and runs a pass only when it differs. A SQLite writer's WAL writes
//!   are seen before its commit is visible, so a hint that shows no
//!   change yet is followed by a few quick re-checks ([`SETTLE_FOR`]).
//! * **The next due retry**: after every pass the follower asks the
//!   queue when the earliest waiting item becomes due
//!   ([`crate::Queue::next_retry_after`]) and wakes then.
//! * **Polling**, every [`FollowOptions::poll`]: the fallback when
//!   notifications are not available or miss a change (a network file
//!   system, a watch limit); again only a mark comparison.
//! * **Stop** ([`Signal::stop`], wired to SIGTERM/SIGINT by the CLI): the
//!   wait ends at once; a pass in flight finishes its item(s) and records
//!   their outcome first.
//!
//! It ends by itself after [`FollowOptions::idle_exit`] without an
//! attempt, or when [`FollowOptions::deadline`] passes. Everything that
//! reads the time or waits goes through a [`Clock`](crate::Clock) and a
//! [`Wait`], so tests drive a follower with a manual clock and scripted
//! wake-ups, without waiting for real.

use crate::backend::Spool;
use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::replay::StopHandle;
use crate::time::{SharedClock, Timestamp};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a hint that showed no change yet is followed by re-checks
/// (a SQLite writer's WAL write is seen before its commit is visible).
pub const SETTLE_FOR: Duration = Duration::from_millis(500);
/// The first re-check after such a hint; each next one waits twice as
/// long, until [`SETTLE_FOR`] has passed.
pub const SETTLE_FIRST: Duration = Duration::from_millis(2);

/// The default of [`FollowOptions::poll`] (`--poll`).
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// Why a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// A change notification arrived: the spool may have changed.
    Changed,
    /// The deadline came.
    Deadline,
    /// Stop was asked for.
    Stopped,
}

/// Waits for a deadline, a change notification or a stop request.
pub trait Wait: Send + Sync {
    /// Wait until `deadline` (on the follower's clock). Returns at once
    /// with [`Woke::Changed`] when a notification arrived since the last
    /// call (and forgets it), and with [`Woke::Stopped`] once stopped.
    fn wait_until(&self, deadline: Timestamp) -> Woke;
}

/// The switch that wakes a waiting follower (or `spool watch`): change
/// notifications and stop requests, from any thread. Cloneable; all
/// clones are the same switch.
#[derive(Clone, Debug, Default)]
pub struct Signal {
    inner: Arc<SignalInner>,
}

#[derive(Debug, Default)]
struct SignalInner {
    changed: Mutex<bool>,
    cv: Condvar,
    stopped: AtomicBool,
    /// Also told to stop, so that a pass in flight stops after its item.
    run: StopHandle,
}

impl Signal {
    /// A switch whose [`Signal::stop`] also stops `run` (the stop handle
    /// the passes use).
    pub fn new(run: StopHandle) -> Signal {
        Signal {
            inner: Arc::new(SignalInner {
                run,
                ..SignalInner::default()
            }),
        }
    }

    /// The stop handle the passes use.
    pub fn stop_handle(&self) -> StopHandle {
        self.inner.run.clone()
    }

    fn changed(&self) -> std::sync::MutexGuard<'_, bool> {
        self.inner.changed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The spool may have changed: wake a waiter.
    pub fn notify(&self) {
        *self.changed() = true;
        self.inner.cv.notify_all();
    }

    /// Stop: a waiter wakes at once, a pass in flight stops after its
    /// item. Idempotent; cannot be undone.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        self.inner.run.stop();
        let _g = self.changed();
        self.inner.cv.notify_all();
    }

    /// True once [`Signal::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    /// Wait up to `d` of real time for a notification or a stop.
    pub fn wait_for(&self, d: Duration) -> Woke {
        self.wait_real(d, true)
    }

    /// Wait up to `d` of real time for a stop only (notifications are
    /// left for the next [`Signal::wait_for`]); true when stopped.
    pub fn wait_stop(&self, d: Duration) -> bool {
        self.wait_real(d, false) == Woke::Stopped
    }

    fn wait_real(&self, d: Duration, take_changes: bool) -> Woke {
        let deadline = Instant::now().checked_add(d);
        let mut changed = self.changed();
        loop {
            if self.is_stopped() {
                return Woke::Stopped;
            }
            if take_changes && *changed {
                *changed = false;
                return Woke::Changed;
            }
            let left = match deadline {
                Some(t) => t.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Woke::Deadline;
            }
            changed = self
                .inner
                .cv
                .wait_timeout(changed, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The real [`Wait`]: a [`Signal`], with deadlines on a clock.
#[derive(Clone, Debug)]
pub struct SignalWait {
    signal: Signal,
    clock: SharedClock,
}

impl SignalWait {
    /// Wait on `signal`; deadlines are read on `clock` (the system clock
    /// in production: the wait itself is real time).
    pub fn new(signal: Signal, clock: SharedClock) -> SignalWait {
        SignalWait { signal, clock }
    }
}

impl Wait for SignalWait {
    fn wait_until(&self, deadline: Timestamp) -> Woke {
        loop {
            let left = deadline.since(self.clock.now());
            match self.signal.wait_for(left) {
                // The clock may run differently from the condvar's timer:
                // only the clock says the deadline came.
                Woke::Deadline if self.clock.now() < deadline => continue,
                w => return w,
            }
        }
    }
}

/// A cheap fingerprint of a spool's committed state: two equal marks
/// mean nothing was committed in between (by another process, for
/// SQLite; by anyone, for NDJSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChangeMark([u64; 4]);

impl ChangeMark {
    /// A mark made of four numbers.
    pub const fn new(parts: [u64; 4]) -> ChangeMark {
        ChangeMark(parts)
    }
}

/// Where [`ChangeMark`]s come from.
pub trait Marks: Send + Sync {
    /// The spool's mark now; `None` when it has none (the memory
    /// backend), and then every hint and every poll counts as a change.
    fn mark(&self) -> Option<ChangeMark>;
}

impl Marks for Spool {
    fn mark(&self) -> Option<ChangeMark> {
        use std::os::unix::fs::MetadataExt;
        match self {
            Spool::Sqlite(q) => q
                .data_version()
                .ok()
                .map(|v| ChangeMark([v as u64, 0, 0, 0])),
            // Every mutation appends to the main file (its size grows);
            // compaction replaces it (a new inode).
            Spool::File(q) => std::fs::metadata(q.path()).ok().map(|m| {
                ChangeMark([
                    m.dev(),
                    m.ino(),
                    m.len(),
                    (m.mtime() as u64)
                        .wrapping_mul(1_000_000_000)
                        .wrapping_add(m.mtime_nsec() as u64),
                ])
            }),
            // Every hint and every poll runs a pass: a claim query is as
            // cheap as any mark would be.
            Spool::Memory(_) | Spool::Postgres(_) => None,
        }
    }
}

/// Turns hints and ticks into "look at the spool now" decisions, by
/// comparing [`ChangeMark`]s: the part of the waiting that
/// [`Follower`] and `spool watch` share.
pub struct ChangeCheck<'a> {
    marks: &'a dyn Marks,
    poll: Duration,
    /// The mark when the last pass began.
    seen: Option<ChangeMark>,
    next_poll: Timestamp,
    settle: Option<Settle>,
}

#[derive(Clone, Copy, Debug)]
struct Settle {
    next: Timestamp,
    step: Duration,
    until: Timestamp,
}

impl<'a> ChangeCheck<'a> {
    /// A check on `marks` that polls every `poll`, starting at `now`.
    pub fn new(marks: &'a dyn Marks, poll: Duration, now: Timestamp) -> ChangeCheck<'a> {
        ChangeCheck {
            marks,
            poll,
            seen: None,
            next_poll: now.saturating_add(poll),
            settle: None,
        }
    }

    /// A pass begins now: it sees every change committed up to here.
    pub fn pass_begins(&mut self, now: Timestamp) {
        self.seen = self.marks.mark();
        self.next_poll = now.saturating_add(self.poll);
        self.settle = None;
    }

    /// When the next check is due: the next poll, or sooner while a hint
    /// is settling.
    pub fn next_check(&self) -> Timestamp {
        match self.settle {
            Some(s) => s.next.min(self.next_poll),
            None => self.next_poll,
        }
    }

    fn changed(&self) -> bool {
        match (self.marks.mark(), self.seen) {
            (Some(now), Some(seen)) => now != seen,
            _ => true,
        }
    }

    /// A change notification came: true when the spool changed since the
    /// last pass began. When it did not (yet), a few quick re-checks
    /// follow ([`ChangeCheck::tick`]).
    pub fn hinted(&mut self, now: Timestamp) -> bool {
        if self.changed() {
            return true;
        }
        self.settle = Some(Settle {
            next: now.saturating_add(SETTLE_FIRST),
            step: SETTLE_FIRST,
            until: now.saturating_add(SETTLE_FOR),
        });
        false
    }

    /// A wait ended at its deadline: when a check is due, true when the
    /// spool changed since the last pass began.
    pub fn tick(&mut self, now: Timestamp) -> bool {
        let mut due = false;
        if now >= self.next_poll {
            self.next_poll = now.saturating_add(self.poll);
            due = true;
        }
        if let Some(s) = &mut self.settle {
            if now >= s.next {
                s.step = s.step.saturating_mul(2);
                s.next = now.saturating_add(s.step);
                due = true;
            }
            if s.next > s.until {
                self.settle = None;
            }
        }
        due && self.changed()
    }
}

/// How a follow run learns of new items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watching {
    /// File-change notifications on this directory (and polling).
    Notify(PathBuf),
    /// PostgreSQL `LISTEN` on this channel (and polling).
    Listen(String),
    /// Polling only, for this reason.
    PollOnly(String),
}

/// Follow-mode settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowOptions {
    /// Look at the spool at least this often (`--poll`, default 1s): the
    /// fallback for changes no notification reported.
    pub poll: Duration,
    /// End after this long without an attempt (`--idle-exit`).
    pub idle_exit: Option<Duration>,
    /// End once this much time has passed since the start (`--deadline`);
    /// a pass in flight stops starting attempts then.
    pub deadline: Option<Duration>,
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            poll: DEFAULT_POLL,
            idle_exit: None,
            deadline: None,
        }
    }
}

impl FollowOptions {
    /// Refuse settings that cannot work: a zero poll interval (a busy
    /// loop) or a zero idle time.
    pub fn check(&self) -> Result<()> {
        if self.poll.is_zero() {
            return Err(Error::Unsupported("--poll must be longer than zero".into()));
        }
        if self.idle_exit.is_some_and(|d| d.is_zero()) {
            return Err(Error::Unsupported(
                "--idle-exit must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}

/// Why a follow run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowEnd {
    /// Stop was asked for (a signal).
    Stopped,
    /// Nothing was attempted for [`FollowOptions::idle_exit`].
    Idle,
    /// [`FollowOptions::deadline`] passed.
    Deadline,
    /// A pass said the run is over (a `--limit` reached, a receiver that
    /// refused the run).
    Finished,
}

impl FollowEnd {
    /// A stable name (`--json`).
    pub fn name(self) -> &'static str {
        match self {
            FollowEnd::Stopped => "stopped",
            FollowEnd::Idle => "idle",
            FollowEnd::Deadline => "deadline",
            FollowEnd::Finished => "finished",
        }
    }
}

/// What one pass told the follower.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassEnd {
    /// Items attempted (or requests sent) in the pass: activity, which
    /// restarts the idle time.
    pub attempted: u64,
    /// The run is over.
    pub end: Option<FollowEnd>,
    /// Start no pass before this time, whatever happens meanwhile (a push
    /// receiver that failed every request of the pass, or asked for a
    /// wait).
    pub not_before: Option<Timestamp>,
}

/// What a follow run did besides its passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowStats {
    /// Why it ended.
    pub end: FollowEnd,
    /// Passes run.
    pub passes: u64,
    /// How long it ran (on its clock).
    pub ran_for: Duration,
}

/// Runs passes over a spool whenever there may be something to do, and
/// waits in between. See the module docs.
pub struct Follower<'a> {
    queue: &'a dyn Queue,
    marks: &'a dyn Marks,
    wait: &'a dyn Wait,
    clock: SharedClock,
    opts: FollowOptions,
}

impl<'a> Follower<'a> {
    /// A follower of `queue` (whose marks `marks` gives), waiting with
    /// `wait`.
    pub fn new(
        queue: &'a dyn Queue,
        marks: &'a dyn Marks,
        wait: &'a dyn Wait,
        clock: SharedClock,
        opts: FollowOptions,
    ) -> Result<Follower<'a>> {
        opts.check()?;
        Ok(Follower {
            queue,
            marks,
            wait,
            clock,
            opts,
        })
    }

    /// Run `pass` at once, then again whenever the spool may hold
    /// something to do, until a pass ends the run, a stop, the idle time
    /// or the deadline. `Err` from a pass (or from reading the next retry
    /// time) ends the run with that error.
    pub fn run(&self, pass: &mut dyn FnMut() -> Result<PassEnd>) -> Result<FollowStats> {
        let started = self.clock.now();
        let mut passes = 0u64;
        let stats = |end, passes| FollowStats {
            end,
            passes,
            ran_for: self.clock.now().since(started),
        };
        let deadline_at = self.opts.deadline.map(|d| started.saturating_add(d));
        let mut last_activity = started;
        let mut check = ChangeCheck::new(self.marks, self.opts.poll, started);
        loop {
            check.pass_begins(self.clock.now());
            let p = pass()?;
            passes += 1;
            let now = self.clock.now();
            if p.attempted > 0 {
                last_activity = now;
            }
            if let Some(end) = p.end {
                return Ok(stats(end, passes));
            }
            let retry_at = self.queue.next_retry_after(now)?;
            let not_before = p.not_before;
            let mut pending = false;
            loop {
                let now = self.clock.now();
                if deadline_at.is_some_and(|t| now >= t) {
                    return Ok(stats(FollowEnd::Deadline, passes));
                }
                let idle_at = self.opts.idle_exit.map(|d| last_activity.saturating_add(d));
                if idle_at.is_some_and(|t| now >= t) {
                    return Ok(stats(FollowEnd::Idle, passes));
                }
                if retry_at.is_some_and(|t| now >= t) {
                    pending = true;
                }
                let held_back = not_before.filter(|t| now < *t);
                if pending && held_back.is_none() {
                    break;
                }
                let mut wake = if pending {
                    held_back.unwrap_or(now)
                } else {
                    let mut w = check.next_check();
                    if let Some(t) = retry_at {
                        w = w.min(t.max(held_back.unwrap_or(t)));
                    }
                    w
                };
                for t in [idle_at, deadline_at].into_iter().flatten() {
                    wake = wake.min(t);
                }
                match self.wait.wait_until(wake) {
                    Woke::Stopped => return Ok(stats(FollowEnd::Stopped, passes)),
                    Woke::Changed => {
                        if check.hinted(self.clock.now()) {
                            pending = true;
                        }
                    }
                    Woke::Deadline => {
                        if check.tick(self.clock.now()) {
                            pending = true;
                        }
                    }
                }
            }
        }
    }
}

/// The directory to watch for changes to `spool`, and the names in it
/// whose changes count: the SQLite database and its `-wal` (and a
/// rollback `-journal`, should one appear); the NDJSON main file. `None`
/// for the memory backend.
pub fn watched_files(spool: &Spool) -> Option<(PathBuf, Vec<OsString>)> {
    let path = spool.path()?;
    // Watch where the file really is: a symlinked spool changes there.
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let name = real.file_name()?.to_os_string();
    let dir = match real.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let with = |suffix: &str| {
        let mut n = name.clone();
        n.push(suffix);
        n
    };
    let names = match spool {
        Spool::Sqlite(_) => vec![name.clone(), with("-wal"), with("-journal")],
        Spool::File(_) => vec![name.clone()],
        Spool::Memory(_) | Spool::Postgres(_) => return None,
    };
    Some((dir, names))
}

/// Watches a spool's directory and calls back on every change to one of
/// the spool's own files (see [`watched_files`]). Opening, reading and
/// closing a file without writing are not changes. Stops when dropped.
///
/// A PostgreSQL spool has no files: its watcher is a thread that
/// `LISTEN`s on a connection of its own for the `NOTIFY` every enqueue
/// sends ([`crate::backend::postgres::channel`]).
pub struct SpoolWatcher {
    source: Source,
}

enum Source {
    Files {
        _watcher: notify::RecommendedWatcher,
        dir: PathBuf,
    },
    Listen {
        channel: String,
        /// Tells the listening thread to end (it notices within
        /// [`LISTEN_SLICE`]; nobody waits for it).
        stop: Arc<AtomicBool>,
    },
}

/// How long the listening thread blocks on its connection at a time.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

impl std::fmt::Debug for SpoolWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpoolWatcher")
            .field("watching", &self.watching())
            .finish()
    }
}

impl Drop for SpoolWatcher {
    fn drop(&mut self) {
        if let Source::Listen { stop, .. } = &self.source {
            stop.store(true, Ordering::SeqCst);
        }
    }
}

impl SpoolWatcher {
    /// Start watching `spool`, calling `on_change` (from the watcher's
    /// own thread) for every change. `Ok(None)` for a spool without
    /// files; `Err` when the system cannot watch (no inotify, its watch
    /// limit reached): the caller falls back to polling.
    pub fn start(
        spool: &Spool,
        on_change: impl Fn() + Send + 'static,
    ) -> Result<Option<SpoolWatcher>> {
        if let Spool::Postgres(q) = spool {
            return Self::listen(q, on_change).map(Some);
        }
        let Some((dir, names)) = watched_files(spool) else {
            return Ok(None);
        };
        Self::start_in(&dir, names, on_change).map(Some)
    }

    /// Listen for a PostgreSQL spool's enqueues on a second connection.
    /// The first `LISTEN` happens before this returns, so an enqueue
    /// committed after it is never missed; a lost connection is
    /// reconnected, and counts as a change (something may have been
    /// missed meanwhile).
    fn listen(
        q: &crate::backend::postgres::PostgresQueue,
        on_change: impl Fn() + Send + 'static,
    ) -> Result<SpoolWatcher> {
        let listener = q.second_handle();
        crate::queue::Leasing::wait_for_enqueue(&listener, Duration::ZERO)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let channel = crate::backend::postgres::channel(&q.target().schema);
        std::thread::Builder::new()
            .name("spool-listen".into())
            .spawn(move || {
                use crate::queue::Leasing as _;
                while !stopped.load(Ordering::SeqCst) {
                    match listener.wait_for_enqueue(LISTEN_SLICE) {
                        Ok(true) => on_change(),
                        Ok(false) => {}
                        Err(_) => {
                            on_change();
                            std::thread::sleep(LISTEN_SLICE);
                        }
                    }
                }
            })
            .map_err(|e| Error::Internal(format!("cannot start the listening thread: {e}")))?;
        Ok(SpoolWatcher {
            source: Source::Listen { channel, stop },
        })
    }

    /// How this watcher learns of changes.
    pub fn watching(&self) -> Watching {
        match &self.source {
            Source::Files { dir, .. } => Watching::Notify(dir.clone()),
            Source::Listen { channel, .. } => Watching::Listen(channel.clone()),
        }
    }

    /// Watch `dir` for changes to the files named `names`.
    pub fn start_in(
        dir: &Path,
        names: Vec<OsString>,
        on_change: impl Fn() + Send + 'static,
    ) -> Result<SpoolWatcher> {
        use notify::event::{AccessKind, AccessMode, EventKind};
        use notify::Watcher as _;
        let handler = move |res: notify::Result<notify::Event>| {
            let Ok(event) = res else {
                // The watcher lost events (a queue overflow): look anyway.
                on_change();
                return;
            };
            let counts = match event.kind {
                EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
                EventKind::Access(_) => false,
                _ => true,
            };
            if counts
                && event
                    .paths
                    .iter()
                    .any(|p| p.file_name().is_some_and(|n| names.iter().any(|x| x == n)))
            {
                on_change();
            }
        };
        let fail = |e: notify::Error| {
            Error::io(
                dir,
                "watch for changes in",
                std::io::Error::other(e.to_string()),
            )
        };
        let mut watcher = notify::recommended_watcher(handler).map_err(fail)?;
        watcher
            .watch(dir, notify::RecursiveMode::NonRecursive)
            .map_err(fail)?;
        Ok(SpoolWatcher {
            source: Source::Files {
                _watcher: watcher,
                dir: dir.to_path_buf(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_a_waiter_and_a_stop_is_sticky() {
        let s = Signal::default();
        assert_eq!(s.wait_for(Duration::from_millis(1)), Woke::Deadline);
        s.notify();
        assert!(!s.wait_stop(Duration::from_millis(1)), "hints are kept");
        assert_eq!(s.wait_for(Duration::from_secs(60)), Woke::Changed);
        assert_eq!(s.wait_for(Duration::from_millis(1)), Woke::Deadline);
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.wait_for(Duration::from_secs(60)));
        s.stop();
        assert_eq!(t.join().unwrap(), Woke::Stopped);
        assert!(s.stop_handle().is_stopped());
        assert!(s.wait_stop(Duration::from_secs(60)));
    }
}
