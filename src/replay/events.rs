//! Replay events (`--events FILE`) and the `--on-dead` hook: what replay
//! tells the world about every outcome it records (SPEC §11).
//!
//! * An [`Event`] is one outcome, written as one NDJSON line
//!   ([`Event::to_line`]); its names are a stable contract, documented in
//!   `docs/events.md`. The worker ([`super::SyncWorker`]) and the push
//!   sender hand an event to [`ReplayObserver::recorded`] only **after
//!   the commit that recorded the outcome** (with a commit group, after
//!   that group's commit), so no line ever tells of something a crash
//!   rolled back.
//! * An [`EventWriter`] writes the lines on a thread of its own through a
//!   bounded queue of [`EVENT_QUEUE`] lines. Delivery never waits for the
//!   reader: when the reader is slower than delivery for long, the pipe's
//!   buffer fills, then the queue, and further lines are dropped and
//!   counted; one `{"ts":…,"event":"dropped","count":N}` line stands
//!   where they were, written as soon as the queue has room again. A
//!   write error (a reader that closed the pipe: EPIPE) ends the events,
//!   not the replay: the writer stops and tells its caller once.
//! * A [`DeadHook`] runs the `--on-dead` command once for every item the
//!   run dead-lettered (`dead_lettered` and `rejected` events), after the
//!   commit, with the item's JSON (the object `spool show --json`
//!   prints) on stdin, on a thread of its own, one at a time, each bounded
//!   by its timeout; a failing hook is told to the caller and changes
//!   nothing.
//! * [`Outcomes`] holds both for a run (or a daemon's many runs), and
//!   [`WithOutcomes`] is the observer that feeds it.

use super::ReplayObserver;
use crate::child::{self, Stderr};
use crate::error::{Error, Result};
use crate::item::{Evidence, Item, ItemId};
use crate::ops::json::ItemJson;
use crate::queue::Queue;
use crate::time::{SharedClock, Timestamp};
use serde::Serialize;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Lines the event writer keeps while its reader is busy; more are
/// dropped and counted. A line is a few hundred bytes (an error text is
/// at most a few KiB), so the queue holds a few MiB at worst.
pub const EVENT_QUEUE: usize = 4096;

/// How long [`EventWriter::finish`] waits for a reader to take the lines
/// still queued when the run ends; what is left then is counted as lost.
pub const FINISH_WAIT: Duration = Duration::from_secs(5);

/// Dead items waiting for the `--on-dead` hook; when that many wait, the
/// run waits for the hook (a hook runs once for every dead item, none is
/// dropped).
pub const HOOK_QUEUE: usize = 1024;

/// What kind of outcome an event tells of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `--exec`/`--url`: delivered and recorded as done.
    Delivered,
    /// A failed attempt, recorded; the item stays pending (`--push`: a
    /// failed request, one event per item of the batch).
    Failed,
    /// Moved to the dead-letter set: out of attempts, refused for good by
    /// `--exec`/`--url`, too large or unsendable for `--push`.
    DeadLettered,
    /// `--push`: the receiver acknowledged the item; it left the spool.
    Acked,
    /// `--push`: the receiver rejected the item; it was dead-lettered.
    Rejected,
    /// PostgreSQL: the lease ran out before the outcome was recorded and
    /// another replayer holds the item; this attempt's outcome was not
    /// recorded.
    LeaseLost,
    /// Evicted by `on-full drop-oldest`. Replay never evicts (an enqueue
    /// does), so no replay writes it; the name is reserved.
    Evicted,
}

impl EventKind {
    /// The `event` name.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Delivered => "delivered",
            EventKind::Failed => "failed",
            EventKind::DeadLettered => "dead_lettered",
            EventKind::Acked => "acked",
            EventKind::Rejected => "rejected",
            EventKind::LeaseLost => "lease_lost",
            EventKind::Evicted => "evicted",
        }
    }

    /// The item left the pending set for the dead-letter set.
    pub fn is_dead(self) -> bool {
        matches!(self, EventKind::DeadLettered | EventKind::Rejected)
    }
}

/// One recorded outcome. Fields that do not apply are `None` and absent
/// from the line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// When the outcome was recorded.
    pub ts: Timestamp,
    /// What happened.
    pub kind: EventKind,
    /// The item.
    pub id: ItemId,
    /// Its key (`""` when none).
    pub key: String,
    /// Its ordering group.
    pub group: Option<String>,
    /// The attempt's number (1-based; for an item dead-lettered without
    /// an attempt, the attempts it had).
    pub attempt: u32,
    /// Milliseconds from the item's enqueue to the start of this attempt
    /// (`--push`: to the receiver's answer). Absent for items without an
    /// enqueue time (reference NDJSON lines).
    pub queue_ms: Option<u64>,
    /// Milliseconds the delivery took (`--exec`/`--url`).
    pub duration_ms: Option<u64>,
    /// The HTTP status of the target's answer (`--url`).
    pub status: Option<u16>,
    /// The exit code of the command (`--exec`).
    pub exit_code: Option<i32>,
    /// Why it failed, was rejected or was dead-lettered (the item's
    /// `last_error`).
    pub error: Option<String>,
    /// A failed item's next retry time.
    pub next_retry_at: Option<Timestamp>,
    /// The item's push sequence number (`--push`).
    pub push_seq: Option<u64>,
}

/// When an attempt started and how long it took.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The clock's time at its start.
    pub at: Timestamp,
    /// How long the delivery took.
    pub took: Duration,
}

/// The JSON line's shape (field order fixed).
#[derive(Serialize)]
struct Line<'a> {
    ts: String,
    event: &'static str,
    id: ItemId,
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_retry_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    push_seq: Option<u64>,
}

impl Event {
    /// An event about `item`'s attempt number `attempt`, recorded at `ts`;
    /// the other fields start empty, except `push_seq` (the item's).
    pub fn new(kind: EventKind, item: &Item, attempt: u32, ts: Timestamp) -> Event {
        Event {
            ts,
            kind,
            id: item.id,
            key: item.key.clone(),
            group: item.group.clone(),
            attempt,
            queue_ms: None,
            duration_ms: None,
            status: None,
            exit_code: None,
            error: None,
            next_retry_at: None,
            push_seq: item.push_seq,
        }
    }

    /// Set `queue_ms` (from the item's enqueue to `at`).
    pub fn queued_until(mut self, item: &Item, at: Timestamp) -> Event {
        self.queue_ms = item
            .enqueued_at
            .map(|e| u64::try_from(at.as_millis().saturating_sub(e.as_millis())).unwrap_or(0));
        self
    }

    /// Set `queue_ms` and `duration_ms` from an attempt's timing.
    pub fn timed(self, item: &Item, t: Option<Timing>) -> Event {
        match t {
            Some(t) => {
                let mut e = self.queued_until(item, t.at);
                e.duration_ms = Some(u64::try_from(t.took.as_millis()).unwrap_or(u64::MAX));
                e
            }
            None => self,
        }
    }

    /// Set `status` or `exit_code` from a delivery's evidence.
    pub fn with_evidence(mut self, evidence: &Evidence) -> Event {
        match evidence {
            Evidence::Http(s) => self.status = Some(*s),
            Evidence::Exit(c) => self.exit_code = Some(*c),
            Evidence::Push(_) | Evidence::Done | Evidence::Sink => {}
        }
        self
    }

    /// Set `error`, and `status` or `exit_code` when the error is a
    /// target's answer ([`answer_codes`]).
    pub fn with_error(mut self, error: &str) -> Event {
        let (status, exit_code) = answer_codes(error);
        self.status = self.status.or(status);
        self.exit_code = self.exit_code.or(exit_code);
        self.error = Some(error.to_string());
        self
    }

    /// The NDJSON line, without the newline.
    pub fn to_line(&self) -> String {
        let line = Line {
            ts: self.ts.to_rfc3339(),
            event: self.kind.name(),
            id: self.id,
            key: &self.key,
            group: self.group.as_deref(),
            attempt: self.attempt,
            queue_ms: self.queue_ms,
            duration_ms: self.duration_ms,
            status: self.status,
            exit_code: self.exit_code,
            error: self.error.as_deref(),
            next_retry_at: self.next_retry_at.map(Timestamp::to_rfc3339),
            push_seq: self.push_seq,
        };
        // Strings, numbers and nulls only: serializing cannot fail.
        serde_json::to_string(&line).unwrap_or_else(|_| String::from("{}"))
    }
}

/// The HTTP status or exit code a failure reason carries when it is a
/// target's answer, as the targets word them: `HTTP 503 Service
/// Unavailable: …` (`--url`), `command exited with 3: …`, `command
/// rejected the item (exit 65)…` (`--exec`). Other reasons (connection
/// errors, timeouts, signals, budgets) carry neither.
pub fn answer_codes(reason: &str) -> (Option<u16>, Option<i32>) {
    fn number(s: &str) -> Option<&str> {
        let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        (end > 0).then(|| &s[..end])
    }
    if let Some(rest) = reason.strip_prefix("HTTP ") {
        return (number(rest).and_then(|n| n.parse().ok()), None);
    }
    if let Some(rest) = reason.strip_prefix("command exited with ") {
        return (None, number(rest).and_then(|n| n.parse().ok()));
    }
    if let Some(rest) = reason.strip_prefix("command rejected the item (exit ") {
        return (None, number(rest).and_then(|n| n.parse().ok()));
    }
    (None, None)
}

/// Something the events or the hook want an operator to know (the CLI
/// logs it as a warning). The replay goes on either way.
#[derive(Debug)]
pub enum OutcomeNotice {
    /// Writing events failed (the reader closed the pipe, the disk is
    /// full): no more events are written in this process.
    EventsEnded(io::Error),
    /// Lines still queued when the run ended were not taken by the reader
    /// within [`FINISH_WAIT`]: they are lost.
    EventsLost,
    /// The `--on-dead` hook failed for an item (or could not start).
    HookFailed {
        /// The dead item.
        id: ItemId,
        /// How it failed, with the tail of its stderr.
        error: String,
    },
    /// The item was no longer a dead letter when its hook was due (an
    /// operator requeued or purged it meanwhile): the hook did not run.
    HookSkipped {
        /// The item.
        id: ItemId,
    },
}

impl fmt::Display for OutcomeNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutcomeNotice::EventsEnded(e) if e.kind() == io::ErrorKind::BrokenPipe => write!(
                f,
                "the events reader closed its end (broken pipe): no more events are written; \
                 replay goes on"
            ),
            OutcomeNotice::EventsEnded(e) => write!(
                f,
                "cannot write events ({e}): no more events are written; replay goes on"
            ),
            OutcomeNotice::EventsLost => write!(
                f,
                "the events reader took nothing for {} after the run ended: the lines still \
                 queued are lost",
                crate::units::format_duration(FINISH_WAIT)
            ),
            OutcomeNotice::HookFailed { id, error } => {
                write!(f, "--on-dead hook for item {id} failed: {error}")
            }
            OutcomeNotice::HookSkipped { id } => write!(
                f,
                "--on-dead hook for item {id} not run: it is no longer a dead letter"
            ),
        }
    }
}

/// Where notices go (called from the writer's and the hook's threads).
pub type NoticeFn = Arc<dyn Fn(&OutcomeNotice) + Send + Sync>;

/// A queued line.
enum Queued {
    Line(String),
    Dropped(u64),
}

/// What the writer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventsReport {
    /// Lines written (`dropped` lines included).
    pub written: u64,
    /// Events dropped because the reader was behind.
    pub dropped: u64,
}

/// Writes events as NDJSON on a thread of its own (see the module
/// header): [`EventWriter::send`] never blocks on the reader.
pub struct EventWriter {
    side: Mutex<SendSide>,
    thread: Mutex<Option<(JoinHandle<()>, Receiver<()>)>>,
    ended: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
    dropped_total: AtomicU64,
    notice: NoticeFn,
}

struct SendSide {
    tx: Option<SyncSender<Queued>>,
    /// Dropped since the last `dropped` line was queued.
    dropped: u64,
}

impl fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("ended", &self.ended.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

/// Open `path` for events: appended to, created with mode `0600` (as
/// every file spool creates) when missing.
pub fn open_events_file(path: &Path) -> Result<std::fs::File> {
    crate::private_file::options()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| Error::io(path, "open the events file", e))
}

impl EventWriter {
    /// A writer to `out` with a queue of `capacity` lines; `clock` gives
    /// the `dropped` lines their time.
    pub fn new(
        out: Box<dyn Write + Send>,
        capacity: usize,
        clock: SharedClock,
        notice: NoticeFn,
    ) -> EventWriter {
        let (tx, rx) = mpsc::sync_channel::<Queued>(capacity.max(1));
        let ended = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let (done_tx, done_rx) = mpsc::channel();
        let thread = {
            let ended = ended.clone();
            let written = written.clone();
            let notice = notice.clone();
            std::thread::Builder::new()
                .name("spool-events".into())
                .spawn(move || {
                    if let Err(e) = write_loop(out, rx, &clock, &written) {
                        ended.store(true, Ordering::SeqCst);
                        notice(&OutcomeNotice::EventsEnded(e));
                    }
                    let _ = done_tx.send(());
                })
                .ok()
        };
        if thread.is_none() {
            ended.store(true, Ordering::SeqCst);
        }
        EventWriter {
            side: Mutex::new(SendSide {
                tx: Some(tx),
                dropped: 0,
            }),
            thread: Mutex::new(thread.map(|t| (t, done_rx))),
            ended,
            written,
            dropped_total: AtomicU64::new(0),
            notice,
        }
    }

    /// Queue `event`'s line; drop it (counted) when the queue is full.
    pub fn send(&self, event: &Event) {
        if self.ended.load(Ordering::SeqCst) {
            return;
        }
        let mut side = self.side.lock().unwrap_or_else(|e| e.into_inner());
        let SendSide { tx, dropped } = &mut *side;
        let Some(q) = tx.as_ref() else {
            return;
        };
        if *dropped > 0 {
            match q.try_send(Queued::Dropped(*dropped)) {
                Ok(()) => *dropped = 0,
                Err(TrySendError::Full(_)) => {
                    *dropped += 1;
                    self.dropped_total.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
        match q.try_send(Queued::Line(event.to_line())) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                *dropped += 1;
                self.dropped_total.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// No more events: queue the last `dropped` line if one is owed, and
    /// wait (at most [`FINISH_WAIT`]) for the lines to be written.
    /// Later calls do nothing.
    pub fn finish(&self) -> EventsReport {
        let tx = {
            let mut side = self.side.lock().unwrap_or_else(|e| e.into_inner());
            let tx = side.tx.take();
            if let (Some(q), n) = (&tx, side.dropped) {
                if n > 0 {
                    let _ = q.send(Queued::Dropped(n));
                }
            }
            side.dropped = 0;
            tx
        };
        drop(tx);
        let taken = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((handle, done)) = taken {
            match done.recv_timeout(FINISH_WAIT) {
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let _ = handle.join();
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // The reader takes nothing: leave the thread blocked
                    // on it; the process ends without it.
                    (self.notice)(&OutcomeNotice::EventsLost);
                }
            }
        }
        EventsReport {
            written: self.written.load(Ordering::SeqCst),
            dropped: self.dropped_total.load(Ordering::SeqCst),
        }
    }
}

/// The writer thread: a line at a time, flushed whenever the queue is
/// empty (so a reader sees each line without delay).
fn write_loop(
    out: Box<dyn Write + Send>,
    rx: Receiver<Queued>,
    clock: &SharedClock,
    written: &AtomicU64,
) -> io::Result<()> {
    let mut out = io::BufWriter::new(out);
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(q) = next.take() {
            let line = match q {
                Queued::Line(l) => l,
                Queued::Dropped(n) => format!(
                    "{{\"ts\":\"{}\",\"event\":\"dropped\",\"count\":{n}}}",
                    clock.now().to_rfc3339()
                ),
            };
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            written.fetch_add(1, Ordering::SeqCst);
            next = rx.try_recv().ok();
        }
        out.flush()?;
    }
    out.flush()
}

/// What the hook did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HookReport {
    /// Runs that exited 0.
    pub ran: u64,
    /// Runs that failed (exit ≠ 0, a signal, the timeout, cannot start).
    pub failed: u64,
}

/// The `--on-dead CMD` hook (see the module header).
pub struct DeadHook {
    command: String,
    tx: Mutex<Option<SyncSender<(ItemId, String)>>>,
    thread: Mutex<Option<JoinHandle<HookReport>>>,
}

impl fmt::Debug for DeadHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadHook")
            .field("command", &self.command)
            .finish_non_exhaustive()
    }
}

impl DeadHook {
    /// Parse `command` (split into words like `--exec`, no shell) and
    /// start the thread that runs it: with the item's JSON on stdin,
    /// `SPOOL_ITEM_ID`, `SPOOL_EVENT=dead_lettered` and (when given)
    /// `SPOOL_PATH` in its environment, for at most `timeout` (then its
    /// process group is killed). A command that cannot be parsed is
    /// [`Error::InvalidInput`].
    pub fn start(
        command: &str,
        timeout: Duration,
        spool_path: Option<PathBuf>,
        notice: NoticeFn,
    ) -> Result<DeadHook> {
        let argv = child::parse_command("--on-dead", command)?;
        if timeout.is_zero() {
            return Err(Error::InvalidInput(
                "--hook-timeout must be longer than 0s".into(),
            ));
        }
        let (tx, rx) = mpsc::sync_channel::<(ItemId, String)>(HOOK_QUEUE);
        let shown = command.to_string();
        let thread = std::thread::Builder::new()
            .name("spool-on-dead".into())
            .spawn(move || {
                let mut report = HookReport::default();
                while let Ok((id, json)) = rx.recv() {
                    let mut cmd = Command::new(&argv[0]);
                    cmd.args(&argv[1..])
                        .env("SPOOL_ITEM_ID", id.to_string())
                        .env("SPOOL_EVENT", "dead_lettered");
                    if let Some(p) = &spool_path {
                        cmd.env("SPOOL_PATH", p);
                    }
                    let mut stdin = json.into_bytes();
                    stdin.push(b'\n');
                    let ran = child::run(cmd, &argv[0], Some(&stdin), Some(timeout), Stderr::Tail)
                        .and_then(|done| done.succeeded(&shown, timeout));
                    match ran {
                        Ok(()) => report.ran += 1,
                        Err(error) => {
                            report.failed += 1;
                            notice(&OutcomeNotice::HookFailed { id, error });
                        }
                    }
                }
                report
            })
            .map_err(|e| Error::Internal(format!("cannot start the --on-dead thread: {e}")))?;
        Ok(DeadHook {
            command: command.to_string(),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Run the hook for dead item `id` with `json` on stdin (after the
    /// runs queued before it). Waits while [`HOOK_QUEUE`] items wait.
    pub fn send(&self, id: ItemId, json: String) {
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(tx) = tx {
            let _ = tx.send((id, json));
        }
    }

    /// Wait for every queued run. Later calls return an empty report.
    pub fn finish(&self) -> HookReport {
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        t.and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

/// The events and the hook of a run (or of a daemon's runs).
#[derive(Default)]
pub struct Outcomes {
    events: Option<EventWriter>,
    on_dead: Option<DeadHook>,
    notice: Option<NoticeFn>,
}

impl fmt::Debug for Outcomes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outcomes")
            .field("events", &self.events)
            .field("on_dead", &self.on_dead)
            .finish_non_exhaustive()
    }
}

/// What [`Outcomes::finish`] reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutcomesReport {
    /// The event writer's.
    pub events: EventsReport,
    /// The hook's.
    pub hook: HookReport,
}

impl Outcomes {
    /// Events to `events`, dead items to `on_dead`; `notice` hears of a
    /// dead item whose hook could not run.
    pub fn new(
        events: Option<EventWriter>,
        on_dead: Option<DeadHook>,
        notice: NoticeFn,
    ) -> Outcomes {
        Outcomes {
            events,
            on_dead,
            notice: Some(notice),
        }
    }

    /// True when there is nothing to feed.
    pub fn is_empty(&self) -> bool {
        self.events.is_none() && self.on_dead.is_none()
    }

    /// An outcome was recorded in `queue`: write its event; for a dead
    /// item, queue the hook with the item's JSON as the dead-letter set
    /// holds it now.
    pub fn record(&self, queue: &dyn Queue, event: &Event) {
        if let Some(w) = &self.events {
            w.send(event);
        }
        if let (Some(h), true) = (&self.on_dead, event.kind.is_dead()) {
            match queue.dead_get(event.id) {
                Ok(Some(dl)) => h.send(event.id, ItemJson::dead_letter(&dl).to_line()),
                Ok(None) => {
                    if let Some(n) = &self.notice {
                        n(&OutcomeNotice::HookSkipped { id: event.id });
                    }
                }
                Err(e) => {
                    if let Some(n) = &self.notice {
                        n(&OutcomeNotice::HookFailed {
                            id: event.id,
                            error: format!("cannot read the dead letter: {e}"),
                        });
                    }
                }
            }
        }
    }

    /// Wait for the hook's runs, then for the events to be written.
    pub fn finish(&self) -> OutcomesReport {
        let hook = self.on_dead.as_ref().map(DeadHook::finish);
        let events = self.events.as_ref().map(EventWriter::finish);
        OutcomesReport {
            events: events.unwrap_or_default(),
            hook: hook.unwrap_or_default(),
        }
    }
}

/// An observer that passes every call on to `inner` and feeds recorded
/// outcomes to `outcomes`.
pub struct WithOutcomes<'a> {
    /// The observer wrapped (progress, logs).
    pub inner: Option<&'a dyn ReplayObserver>,
    /// Where recorded outcomes go.
    pub outcomes: &'a Outcomes,
    /// The spool the outcomes are recorded in.
    pub queue: &'a dyn Queue,
}

impl ReplayObserver for WithOutcomes<'_> {
    fn wants_total(&self) -> bool {
        self.inner.is_some_and(|o| o.wants_total())
    }
    fn started(&self, total: Option<u64>) {
        if let Some(o) = self.inner {
            o.started(total)
        }
    }
    fn attempted(&self, item: &Item, attempt: u32, outcome: &super::ItemOutcome) {
        if let Some(o) = self.inner {
            o.attempted(item, attempt, outcome)
        }
    }
    fn skipped(&self, item: &Item) {
        if let Some(o) = self.inner {
            o.skipped(item)
        }
    }
    fn push_event(&self, event: &super::push::PushEvent<'_>) {
        if let Some(o) = self.inner {
            o.push_event(event)
        }
    }
    fn following(&self, watching: &super::follow::Watching) {
        if let Some(o) = self.inner {
            o.following(watching)
        }
    }
    fn lease_lost(&self, item: &Item) {
        if let Some(o) = self.inner {
            o.lease_lost(item)
        }
    }
    fn recorded(&self, event: &Event) {
        self.outcomes.record(self.queue, event);
        if let Some(o) = self.inner {
            o.recorded(event)
        }
    }
}

/// Time a delivery: the clock's time at its start, and a monotonic
/// stopwatch for its length.
pub(crate) fn start_timing(clock: &SharedClock) -> (Timestamp, Instant) {
    (clock.now(), Instant::now())
}

/// The [`Timing`] of a delivery started with [`start_timing`].
pub(crate) fn end_timing(started: (Timestamp, Instant)) -> Timing {
    Timing {
        at: started.0,
        took: started.1.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{Clock as _, ManualClock};

    fn item() -> Item {
        let mut i = Item::new(
            7,
            b"p".to_vec(),
            "order-7".into(),
            Timestamp::from_millis(1_700_000_000_000),
        );
        i.group = Some("g".into());
        i
    }

    #[test]
    fn a_line_has_the_contract_names_and_leaves_out_what_does_not_apply() {
        let at = Timestamp::from_millis(1_700_000_001_500);
        let e = Event::new(EventKind::Failed, &item(), 2, at)
            .timed(
                &item(),
                Some(Timing {
                    at,
                    took: Duration::from_millis(12),
                }),
            )
            .with_error("HTTP 503 Service Unavailable: busy");
        let e = Event {
            next_retry_at: Some(Timestamp::from_millis(1_700_000_010_000)),
            ..e
        };
        assert_eq!(
            e.to_line(),
            "{\"ts\":\"2023-11-14T22:13:21.500Z\",\"event\":\"failed\",\"id\":7,\"key\":\"order-7\",\
             \"group\":\"g\",\"attempt\":2,\"queue_ms\":1500,\"duration_ms\":12,\"status\":503,\
             \"error\":\"HTTP 503 Service Unavailable: busy\",\
             \"next_retry_at\":\"2023-11-14T22:13:30.000Z\"}"
        );
        let mut plain = item();
        plain.group = None;
        plain.enqueued_at = None;
        let e = Event::new(EventKind::Delivered, &plain, 1, at).with_evidence(&Evidence::Exit(0));
        assert_eq!(
            e.to_line(),
            "{\"ts\":\"2023-11-14T22:13:21.500Z\",\"event\":\"delivered\",\"id\":7,\
             \"key\":\"order-7\",\"attempt\":1,\"exit_code\":0}"
        );
    }

    #[test]
    fn codes_come_only_from_a_targets_answer() {
        assert_eq!(
            answer_codes("HTTP 503 Service Unavailable"),
            (Some(503), None)
        );
        assert_eq!(answer_codes("HTTP 429: slow down"), (Some(429), None));
        assert_eq!(answer_codes("command exited with 3: oops"), (None, Some(3)));
        assert_eq!(
            answer_codes("command rejected the item (exit 65): bad"),
            (None, Some(65))
        );
        for other in [
            "connection error: connection refused (127.0.0.1:9)",
            "command killed by signal 9",
            "request timed out (global)",
            "push request failed: HTTP 503",
            "HTTP protocol error: x",
            "attempts (5) already reach --max-attempts 5; dead-lettered without another attempt \
             (last error: HTTP 503)",
        ] {
            assert_eq!(answer_codes(other), (None, None), "{other}");
        }
    }

    /// A writer that blocks until told, then fails or takes everything.
    struct Gate {
        open: Arc<(Mutex<bool>, std::sync::Condvar)>,
        got: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (m, c) = &*self.open;
            let mut open = m.lock().unwrap();
            while !*open {
                open = c.wait(open).unwrap();
            }
            self.got.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_stalled_reader_costs_lines_not_time_and_the_gap_is_marked() {
        let open = Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let got = Arc::new(Mutex::new(Vec::new()));
        let clock = ManualClock::new(Timestamp::from_millis(1_700_000_000_000));
        let notices = Arc::new(Mutex::new(Vec::<String>::new()));
        let n2 = notices.clone();
        let w = EventWriter::new(
            Box::new(Gate {
                open: open.clone(),
                got: got.clone(),
            }),
            4,
            Arc::new(clock.clone()),
            Arc::new(move |n| n2.lock().unwrap().push(n.to_string())),
        );
        // The writer thread takes one line and blocks on it; the queue
        // holds 4; the rest are dropped at once (send never blocks).
        let t = std::time::Instant::now();
        for id in 1..=50 {
            let mut i = item();
            i.id = id;
            w.send(&Event::new(EventKind::Delivered, &i, 1, clock.now()));
        }
        assert!(t.elapsed() < Duration::from_secs(5));
        {
            let (m, c) = &*open;
            *m.lock().unwrap() = true;
            c.notify_all();
        }
        let mut i = item();
        i.id = 51;
        w.send(&Event::new(EventKind::Delivered, &i, 1, clock.now()));
        let report = w.finish();
        let text = String::from_utf8(got.lock().unwrap().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let ids: Vec<u64> = lines.iter().filter_map(|l| l["id"].as_u64()).collect();
        let dropped: u64 = lines
            .iter()
            .filter(|l| l["event"] == "dropped")
            .map(|l| l["count"].as_u64().unwrap())
            .sum();
        assert_eq!(ids.len() as u64 + dropped, 51, "{text}");
        assert_eq!(report.dropped, dropped);
        assert!(dropped > 0 && ids.len() >= 4, "{text}");
        // Order is kept, and the gap's marker stands where the gap is.
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted);
        assert!(
            text.contains("{\"ts\":\"2023-11-14T22:13:20.000Z\",\"event\":\"dropped\",\"count\":")
        );
        assert!(notices.lock().unwrap().is_empty());
    }

    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
    }

    #[test]
    fn a_closed_reader_ends_the_events_with_one_notice() {
        let notices = Arc::new(Mutex::new(Vec::<String>::new()));
        let n2 = notices.clone();
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let w = EventWriter::new(
            Box::new(Closed),
            8,
            Arc::new(clock.clone()),
            Arc::new(move |n| n2.lock().unwrap().push(n.to_string())),
        );
        for _ in 0..100 {
            w.send(&Event::new(EventKind::Delivered, &item(), 1, clock.now()));
        }
        w.finish();
        let n = notices.lock().unwrap();
        assert_eq!(n.len(), 1, "{n:?}");
        assert!(n[0].contains("broken pipe"), "{}", n[0]);
    }
}
