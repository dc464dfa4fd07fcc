//! One run of a plan: the spool under test, the memory model, a push
//! receiver, and the checks after every step.
//!
//! Every operation runs on the spool and on the model; both must answer
//! the same (equal `Ok` values, or errors of the same kind) and then hold
//! the same state. A crash (see [`Op::Crash`]) drops every handle, maybe
//! loses what was not synced, and reopens: an operation that returned
//! `Ok` must be there; one that failed (or was cut) must be there whole
//! or not at all — the reopened spool must equal the model after the
//! operation or the model before it.

use super::crash_io::CrashIo;
use super::crash_vfs::{self, Crash};
use super::plan::{Fault, NewSpec, Op, Plan, ReceiveSpec, RecordSpec};
use crate::common::{pg_spool_url, Backend, T0};
use spool::backend::file::FileQueue;
use spool::backend::sqlite::maint::CheckpointMode;
use spool::item::PRUNE_BATCH;
use spool::ops::checkpoint::CheckpointOptions;
use spool::ops::compact::CompactOptions;
use spool::ops::dlq::Selection;
use spool::ops::done::DoneOptions;
use spool::ops::hold::HoldOptions;
use spool::ops::import::ImportInput;
use spool::ops::output::Destination;
use spool::ops::release::ReleaseOptions;
use spool::push::receiver::{PushOutcome, ReceiveTxn};
use spool::push::wire::{self, OutEntry};
use spool::push::{
    apply_item, apply_push, decide, Decision, MemoryReceiver, ReceiveLimits, Reply, Sent,
};
use spool::{
    AttemptUpdate, Clock, Delivery, EnqueueOptions, Error, Evidence, Item, ItemId, ManualClock,
    MemoryQueue, NewItem, OnFull, OpenMode, OpenOptions, PushState, Queue, Record, RecordState,
    Result, Spool, Timestamp,
};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a run did, summed over seeds for the report.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub ops: u64,
    pub crashes: u64,
    /// Crashes that cut an operation (an I/O operation failed).
    pub cut: u64,
    /// Cut operations found not to have happened / to have happened.
    pub rolled_back: u64,
    pub kept: u64,
    pub power_losses: u64,
    pub reopens: u64,
    /// NDJSON: reopens that left reading the files to the next operation
    /// ([`Plan::defer_open`]).
    pub deferred_reopens: u64,
    pub push_requests: u64,
    pub push_acks: u64,
    pub push_applied: u64,
    /// Push requests the spool under test received ([`Op::Receive`]).
    pub received: u64,
    /// NDJSON: operations other than [`Op::Compact`] after which the main
    /// file was a new one (an automatic compaction; see
    /// [`Plan::auto_compact`]).
    pub auto_compactions: u64,
    /// NDJSON: directory entries that power losses took away or brought
    /// back (changed since the directory's last sync).
    pub lost_entries: u64,
    /// Items dead-lettered after a 413 refused their entry alone.
    pub too_large: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.crashes += o.crashes;
        self.cut += o.cut;
        self.rolled_back += o.rolled_back;
        self.kept += o.kept;
        self.power_losses += o.power_losses;
        self.reopens += o.reopens;
        self.deferred_reopens += o.deferred_reopens;
        self.push_requests += o.push_requests;
        self.push_acks += o.push_acks;
        self.push_applied += o.push_applied;
        self.received += o.received;
        self.auto_compactions += o.auto_compactions;
        self.lost_entries += o.lost_entries;
        self.too_large += o.too_large;
    }
}

/// The receiver's `--max-payload`: the plan's 120-byte payloads are
/// refused.
const MAX_PAYLOAD: u64 = 100;
/// The receiver's depth bound: it answers 503 when full until its
/// consumer drains it.
const RECEIVER_DEPTH: usize = 8;

/// A push receiver in memory that checks what it is sent.
struct Receiver {
    rx: MemoryReceiver,
    limits: ReceiveLimits,
    /// Every number applied, with the digest of what was applied.
    applied: BTreeMap<u64, String>,
}

impl Receiver {
    fn serve(
        &mut self,
        body: &[u8],
        stats: &mut Stats,
    ) -> std::result::Result<(u16, Vec<u8>), String> {
        let req = wire::parse_request(body).map_err(|e| format!("receiver refuses: {e:?}"))?;
        let client = req.client_id.clone();
        let before = self.rx.ledger.last_seq(&client);
        let outcome = apply_push(&mut self.rx, &req, &self.limits)
            .map_err(|e| format!("receiver failed (a number applied twice?): {e}"))?;
        let after = self.rx.ledger.last_seq(&client);
        if after < before {
            return Err(format!("receiver last_seq went back {before} -> {after}"));
        }
        if let PushOutcome::Conflict { .. } = outcome {
            return Err(format!("a conflict from a healthy sender: {outcome:?}"));
        }
        let ledger = self.rx.ledger.client(&client);
        for seq in before + 1..=after {
            if let Some(spool::push::memory::Recorded::Applied { digest }) =
                ledger.and_then(|c| c.entries.get(&seq))
            {
                if self.applied.insert(seq, digest.clone()).is_some() {
                    return Err(format!("receiver applied number {seq} twice"));
                }
                stats.push_applied += 1;
            }
        }
        Ok((outcome.status(), outcome.body()))
    }
}

/// The spool under test and everything around it.
pub struct World {
    backend: Backend,
    dir: tempfile::TempDir,
    path: PathBuf,
    clock: ManualClock,
    io: Arc<CrashIo>,
    /// The crash VFS's watch on the directory: the SQLite database, or
    /// the NDJSON index.
    vfs: crash_vfs::Watch,
    spool: Option<Spool>,
    second: Option<Spool>,
    use_second: bool,
    model: MemoryQueue,
    uuid: String,
    recv: Receiver,
    /// Ids acknowledged as delivered (or done): never pending again.
    delivered: BTreeSet<ItemId>,
    /// What each client of [`Op::Receive`] gave each number: an item or
    /// a skip (`None`).
    sent: BTreeMap<(u8, u64), Option<NewSpec>>,
    saved_index: Option<Option<Vec<u8>>>,
    /// Whether the last answer of the spool under test was `Ok`.
    durable_ok: Cell<Option<bool>>,
    /// PostgreSQL: a second connection, which kills the spool's.
    pg: Option<postgres::Client>,
    /// PostgreSQL: the next streamed batch loses its connection before
    /// this item.
    kill_mid_batch: Option<usize>,
    /// [`Plan::auto_compact`].
    auto_compact: Option<u64>,
    /// [`Plan::defer_open`].
    defer_open: bool,
    /// The item a 413 refused alone, and why, until
    /// [`Op::DeadLetterTooLarge`].
    too_large: Option<(ItemId, String)>,
    pub stats: Stats,
}

type Check<T = ()> = std::result::Result<T, String>;

fn same_error(a: &Error, b: &Error) -> bool {
    match (a, b) {
        (
            Error::QueueFull {
                max_depth: m1,
                depth: d1,
            },
            Error::QueueFull {
                max_depth: m2,
                depth: d2,
            },
        ) => (m1, d1) == (m2, d2),
        (Error::QueueFull { .. }, _) | (_, Error::QueueFull { .. }) => false,
        _ => a.kind() == b.kind(),
    }
}

fn cmp<T: PartialEq + Debug>(what: &str, got: &Result<T>, want: &Result<T>) -> Check {
    let ok = match (got, want) {
        (Ok(g), Ok(w)) => g == w,
        (Err(g), Err(w)) => same_error(g, w),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{what}:\n  spool: {got:?}\n  model: {want:?}"))
    }
}

/// An id for a selector: any id issued so far, 0, or the next unissued
/// one.
fn pick(sel: u8, high_water: ItemId) -> ItemId {
    u64::from(sel) % (high_water + 2)
}

/// Distinct ids in order.
fn pick_all(sels: &[u8], high_water: ItemId) -> Vec<ItemId> {
    let mut out: Vec<ItemId> = Vec::new();
    for s in sels {
        let id = pick(*s, high_water);
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn at(now: Timestamp, ms: u32) -> Timestamp {
    now.saturating_add(Duration::from_millis(ms.into()))
}

fn ago(now: Timestamp, ms: i64) -> Timestamp {
    Timestamp::from_millis(now.as_millis() - ms)
}

fn record(spec: &RecordSpec, high_water: ItemId, now: Timestamp) -> Record {
    let id = u64::from(spec.id) % (high_water + 8);
    let enqueued = Timestamp::from_secs(now.as_secs() - i64::from(spec.enqueued_secs_ago));
    let mut item = Item::new(id, spec.payload.clone(), spec.key.clone(), enqueued);
    item.attempts = spec.attempts;
    item.next_retry_at = spec.retry_in_ms.map(|ms| at(now, ms));
    item.last_error = spec.error.clone();
    item.held = spec.state == RecordState::Held;
    Record {
        item,
        state: spec.state,
        dead_at: match spec.state {
            RecordState::Dead => spec.dead_ms_ago.map(|ms| ago(now, ms.into())),
            _ => None,
        },
        delivery: match spec.state {
            RecordState::Delivered => spec.dead_ms_ago.map(|ms| Delivery {
                at: ago(now, ms.into()),
                evidence: Evidence::Http(200),
            }),
            _ => None,
        },
    }
}

fn new_item(s: &NewSpec) -> NewItem {
    let mut n = NewItem::new(s.payload.clone(), s.key.clone());
    n.group = s.group.map(|g| format!("g{g}"));
    n.coalesce_key = s.coalesce.map(|c| format!("c{c}"));
    n
}

/// The `last_seq` a receiving spool holds for `client` (0: never heard of).
fn client_last_seq(q: &dyn Queue, client: &str) -> Check<u64> {
    Ok(q.push_clients()
        .map_err(|e| format!("push clients: {e}"))?
        .iter()
        .find(|c| c.client_id == client)
        .map_or(0, |c| c.last_seq))
}

/// One client as [`ledgers`] shows it: id, `last_seq`, refusals.
type Ledger = (String, u64, Vec<(u64, String)>);

/// What a receiving spool keeps per client and a sender can see: its
/// `last_seq` and the refusals not acknowledged yet (not when it last
/// pushed, nor which instance served it).
fn ledgers(q: &dyn Queue) -> Result<Vec<Ledger>> {
    Ok(q.push_clients()?
        .into_iter()
        .map(|c| {
            let rejected = c.rejected.into_iter().map(|r| (r.seq, r.error)).collect();
            (c.client_id, c.last_seq, rejected)
        })
        .collect())
}

/// A push request as `q` builds it: the in-flight entries from the
/// watermark on (items, or skips for numbers whose item left), at most
/// `max`. `None` when nothing is in flight.
type Request = (Vec<u8>, Sent, Vec<Item>);

fn build_request(q: &dyn Queue, uuid: &str, max: u64) -> Result<Option<Request>> {
    let ps = q.push_state()?;
    let end = ps.last_assigned.min(ps.acked + max);
    if end <= ps.acked {
        return Ok(None);
    }
    let items = q.push_in_flight(ps.acked, max as usize)?;
    let mut entries = Vec::new();
    for seq in ps.acked + 1..=end {
        match items.iter().find(|i| i.push_seq == Some(seq)) {
            Some(it) => entries.push(OutEntry::Item {
                seq,
                id: it.id,
                key: &it.key,
                payload: &it.payload,
                enqueued_at: it.enqueued_at,
                group: it.group.as_deref(),
                coalesce_key: it.coalesce_key.as_deref(),
            }),
            None if ps.skips.contains(&seq) => entries.push(OutEntry::Skip { seq }),
            None => {
                return Err(Error::Internal(format!(
                    "number {seq} is neither in flight nor a skip: {ps:?}"
                )))
            }
        }
    }
    let body = wire::encode_request(uuid, ps.acked, &entries);
    let sent = Sent {
        batch: ps.acked + 1..end + 1,
        watermark: ps.acked,
        highest_assigned: ps.last_assigned,
    };
    Ok(Some((body, sent, items)))
}

/// A directory for one run: in `SIM_TMPDIR`, else in `/dev/shm` when
/// there is one — the simulator decides itself what a crash keeps, so a
/// real disk's syncs would only cost time — else the usual place.
fn temp_dir() -> tempfile::TempDir {
    let base = std::env::var_os("SIM_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|p| p.is_dir()));
    match base {
        Some(b) => tempfile::tempdir_in(b),
        None => tempfile::tempdir(),
    }
    .expect("create a temporary directory")
}

/// Delete every expired delivered record, as the next mutating calls
/// would. After a crash an expired record may come back (its pruning
/// `done` line, written beside a commit, was not synced with it): that
/// loses nothing, so both sides are pruned before they are compared.
fn prune_expired(q: &dyn Queue) -> Check {
    while q
        .prune_delivered(PRUNE_BATCH)
        .map_err(|e| format!("prune after a crash: {e}"))?
        > 0
    {}
    Ok(())
}

impl World {
    pub fn new(backend: Backend, plan: &Plan) -> World {
        let (max_depth, auto_compact) = (plan.max_depth, plan.auto_compact);
        let dir = temp_dir();
        let path = match backend {
            Backend::Postgres => {
                let base = std::env::var("SPOOL_TEST_PG_URL").expect("SPOOL_TEST_PG_URL");
                PathBuf::from(pg_spool_url(&base, "sim"))
            }
            _ => dir.path().join(backend.file_name()),
        };
        let clock = ManualClock::new(T0);
        let io = Arc::new(CrashIo::new(dir.path()));
        let vfs = crash_vfs::watch(dir.path());
        let mut w = World {
            backend,
            dir,
            path,
            clock: clock.clone(),
            io,
            vfs,
            spool: None,
            second: None,
            use_second: false,
            model: MemoryQueue::with_max_depth(max_depth, Arc::new(clock)),
            uuid: String::new(),
            recv: Receiver {
                rx: MemoryReceiver::new(Some(RECEIVER_DEPTH)),
                limits: ReceiveLimits {
                    max_payload: MAX_PAYLOAD,
                    max_key_len: 64,
                    shared_keys: false,
                },
                applied: BTreeMap::new(),
            },
            delivered: BTreeSet::new(),
            sent: BTreeMap::new(),
            saved_index: None,
            durable_ok: Cell::new(None),
            pg: None,
            kill_mid_batch: None,
            auto_compact,
            defer_open: plan.defer_open,
            too_large: None,
            stats: Stats::default(),
        };
        let spool = w
            .open(OpenMode::Create, max_depth)
            .unwrap_or_else(|e| panic!("create {backend:?} spool: {e}"));
        w.spool = Some(spool);
        w.uuid = w.q().uuid().expect("uuid");
        w.model
            .adopt_identity(&w.uuid, &PushState::default())
            .expect("the model takes the spool's identity");
        w
    }

    fn open(&self, mode: OpenMode, max_depth: Option<u64>) -> Result<Spool> {
        let mut opts = OpenOptions::new(mode);
        opts.clock = Arc::new(self.clock.clone());
        opts.max_depth = max_depth;
        opts.auto_compact_min_bytes = self.auto_compact;
        opts.defer_load = self.defer_open && mode == OpenMode::ReadWrite;
        match self.backend {
            Backend::Memory => Ok(Spool::memory(&opts)),
            Backend::File => {
                opts.backend = Some(self.backend.kind());
                FileQueue::open_with_io(&self.path, &opts, self.io.clone()).map(Spool::File)
            }
            _ => {
                opts.backend = Some(self.backend.kind());
                Spool::open(&self.path, &opts)
            }
        }
    }

    fn spool(&self) -> &Spool {
        match (&self.second, self.use_second) {
            (Some(s), true) => s,
            _ => self.spool.as_ref().expect("the spool is open"),
        }
    }

    fn q(&self) -> &dyn Queue {
        self.spool().queue()
    }

    /// Compare answers, remembering whether the spool's was `Ok`.
    fn same<T: PartialEq + Debug>(&self, what: &str, got: Result<T>, want: Result<T>) -> Check {
        self.durable_ok.set(Some(got.is_ok()));
        cmp(what, &got, &want)
    }

    /// A text as the spool stores it: PostgreSQL cannot hold NUL, which
    /// becomes U+FFFD (docs/formats.md).
    fn text(&self, s: &str) -> String {
        match self.backend {
            Backend::Postgres => s.replace('\0', "\u{fffd}"),
            _ => s.to_string(),
        }
    }

    fn hw(&self) -> ItemId {
        self.model.high_water().expect("model high_water")
    }

    /// Run a whole plan.
    pub fn run(&mut self, plan: &Plan) -> std::result::Result<(), (usize, String)> {
        self.check()
            .map_err(|e| (0, format!("after creating: {e}")))?;
        let trace = std::env::var_os("SIM_TRACE").is_some();
        for (i, op) in plan.ops.iter().enumerate() {
            self.stats.ops += 1;
            let t = std::time::Instant::now();
            let full = matches!(op, Op::Crash { .. } | Op::Reopen | Op::Switch);
            // A deferred reopen is checked after the next operation, so
            // that the first call on the handle is that operation (a
            // write, mostly), as in a one-shot CLI command.
            let deferred = matches!(op, Op::Reopen) && self.deferring();
            let ino = self.main_ino();
            self.step(op)
                .and_then(|()| match (deferred, full) {
                    (true, _) => Ok(()),
                    (false, true) => self.check(),
                    (false, false) => self.check_lean(),
                })
                .map_err(|e| (i, format!("op {i} {op:?}: {e}")))?;
            if ino != self.main_ino() && !matches!(op, Op::Compact | Op::ExportImport) {
                self.stats.auto_compactions += 1;
            }
            if trace {
                eprintln!("{:8.1} ms  op {i} {op:?}", t.elapsed().as_secs_f64() * 1e3);
            }
        }
        if matches!(plan.ops.last(), Some(Op::Reopen)) && self.deferring() {
            self.check()
                .map_err(|e| (plan.ops.len(), format!("after the last reopen: {e}")))?;
        }
        Ok(())
    }

    /// Whether reopens defer reading the files ([`Plan::defer_open`]).
    fn deferring(&self) -> bool {
        self.defer_open && self.backend == Backend::File
    }

    /// The NDJSON main file's inode (`None` for the other backends).
    fn main_ino(&self) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        (self.backend == Backend::File)
            .then(|| std::fs::metadata(&self.path).ok().map(|m| m.ino()))
            .flatten()
    }

    fn step(&mut self, op: &Op) -> Check {
        match op {
            Op::Crash {
                at,
                power,
                seed,
                op,
            } => self.crash_around(u64::from(*at), *power, *seed, op),
            op => self.apply(op),
        }
    }

    /// Run `op` with a crash armed, die, reopen, and check the outcome.
    fn crash_around(&mut self, at: u64, power: bool, seed: u64, op: &Op) -> Check {
        if self.backend == Backend::Memory {
            // Nothing of it would survive a crash: the operation alone.
            return self.apply(op);
        }
        let before = self.model.clone();
        self.durable_ok.set(None);
        self.io.fail_after(at, seed);
        self.vfs.fail_after(at);
        if self.backend == Backend::Postgres {
            // The server side fails: the spool's connection is killed in
            // the middle of a streamed batch, or before the operation.
            match op {
                Op::Batch(items, _, true) if !items.is_empty() => {
                    self.connect_killer()?;
                    self.kill_mid_batch = Some(at as usize % items.len());
                }
                _ => self.kill_connection()?,
            }
        }
        let answers = self.apply(op);
        self.kill_mid_batch = None;
        self.io.disarm();
        let cut_sqlite = self.vfs.tripped();
        self.vfs.fail_after(1 << 60);
        // On PostgreSQL the connection died before the operation or in
        // it: whatever did not answer Ok was cut.
        let cut = self.io.tripped()
            || cut_sqlite
            || (self.backend == Backend::Postgres && self.durable_ok.get() != Some(true));
        if !cut {
            // Nothing failed: the answers must agree.
            answers?;
        }
        let returned_ok = self.durable_ok.get() == Some(true);
        self.stats.crashes += 1;
        self.die(power, seed)?;
        prune_expired(self.q())?;
        prune_expired(&self.model)?;
        prune_expired(&before)?;
        let after = self.check();
        if cut {
            self.stats.cut += 1;
        }
        if !cut || returned_ok {
            return after.map_err(|e| {
                format!(
                    "after a crash (cut: {cut}, power loss: {power}), an operation that \
                     returned Ok is not all there: {e}"
                )
            });
        }
        match after {
            Ok(()) => {
                self.stats.kept += 1;
                Ok(())
            }
            Err(with) => {
                let after_model = std::mem::replace(&mut self.model, before);
                match self.check() {
                    Ok(()) => {
                        self.stats.rolled_back += 1;
                        Ok(())
                    }
                    Err(without) => {
                        self.model = after_model;
                        Err(format!(
                            "after a crash that cut the operation (power loss: {power}), the \
                             spool is neither with it nor without it.\n with: {with}\n \
                             without: {without}"
                        ))
                    }
                }
            }
        }
    }

    /// The process dies: every handle dropped, unsynced data lost when
    /// `power`, and a new process opens the spool.
    fn die(&mut self, power: bool, seed: u64) -> Check {
        self.second = None;
        self.use_second = false;
        self.spool = None;
        self.vfs.crash(if power {
            Crash::PowerLoss { seed }
        } else {
            Crash::Process
        });
        if power && self.backend != Backend::Postgres {
            self.stats.power_losses += 1;
        }
        if power && self.backend == Backend::File {
            self.io.power_loss(seed);
            self.stats.lost_entries += self.io.take_lost_entries();
            self.reboot();
        }
        self.io.reset();
        self.reopen()
    }

    /// NDJSON: the machine starts again after a power loss. The index
    /// notes the boot it was last written in (`boot_id`) and is rebuilt
    /// in another one; the simulator cannot change the boot, so it
    /// changes the index's note.
    fn reboot(&self) {
        let Ok(c) = rusqlite::Connection::open(self.index_path()) else {
            return;
        };
        let _ = c.execute("UPDATE state SET boot = 'a boot before the power loss'", []);
    }

    fn reopen(&mut self) -> Check {
        if self.backend == Backend::Memory {
            return Ok(());
        }
        self.stats.reopens += 1;
        if self.deferring() {
            self.stats.deferred_reopens += 1;
        }
        self.second = None;
        self.use_second = false;
        self.spool = None;
        let s = self
            .open(OpenMode::ReadWrite, None)
            .map_err(|e| format!("reopen: {e}"))?;
        self.spool = Some(s);
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Check {
        let hw = self.hw();
        let now = self.clock.now();
        let what = format!("{op:?}");
        let m = &self.model;
        match op {
            Op::Enqueue(p, k) => self.same(&what, self.q().enqueue(p, k), m.enqueue(p, k)),
            Op::Batch(items, limit, stream) => {
                let items: Vec<NewItem> = items.iter().map(new_item).collect();
                let opts = EnqueueOptions {
                    depth_limit: *limit,
                };
                let want = m.enqueue_batch(&items, &opts);
                if !*stream {
                    return self.same(&what, self.q().enqueue_batch(&items, &opts), want);
                }
                // Streamed; on PostgreSQL under a crash, the connection is
                // killed in the middle of the transaction.
                let kill = self.kill_mid_batch.take();
                let pid = match kill {
                    Some(_) => Some(self.server_pid()?),
                    None => None,
                };
                let mut n = 0;
                let mut killer = self.pg.take();
                let mut iter = items.iter().map(|it| {
                    if kill == Some(n) {
                        if let (Some(c), Some(pid)) = (killer.as_mut(), pid) {
                            let _ = c.execute("SELECT pg_terminate_backend($1)", &[&pid]);
                        }
                    }
                    n += 1;
                    Ok(it.clone())
                });
                let got = self.q().enqueue_stream(&mut iter, &opts);
                drop(iter);
                self.pg = killer;
                self.same(&what, got, want.map(|v| v.into_iter().collect()))
            }
            Op::SetMaxDepth(b) => self.same(&what, self.q().set_max_depth(*b), m.set_max_depth(*b)),
            Op::SetDropOldest(on) => {
                let p = if *on {
                    OnFull::DropOldest
                } else {
                    OnFull::Reject
                };
                self.same(&what, self.q().set_on_full(p), m.set_on_full(p))
            }
            Op::Deliver(sels, e) => {
                let ids = pick_all(sels, hw);
                let evidence = match e % 4 {
                    0 => Evidence::Http(200 + u16::from(*e % 7)),
                    1 => Evidence::Exit(0),
                    2 => Evidence::Push(u64::from(*e)),
                    _ => Evidence::Done,
                };
                let done: Vec<(ItemId, Evidence)> = ids.iter().map(|i| (*i, evidence)).collect();
                let got = self.q().deliver(&done);
                if let Ok(flags) = &got {
                    for (id, f) in ids.iter().zip(flags) {
                        if *f {
                            self.delivered.insert(*id);
                        }
                    }
                }
                self.same(&what, got, self.model.deliver(&done))
            }
            Op::Fail {
                id,
                attempts,
                retry_in_ms,
                error,
            } => {
                let id = pick(*id, hw);
                let upd = AttemptUpdate {
                    attempts: *attempts,
                    next_retry_at: retry_in_ms.map(|ms| at(now, ms)),
                    last_error: error.as_deref().map(|e| self.text(e)),
                };
                self.same(
                    &what,
                    self.q().record_attempt(id, &upd),
                    m.record_attempt(id, &upd),
                )
            }
            Op::SetAttempts(sel, n) => {
                let id = pick(*sel, hw);
                self.same(&what, self.q().set_attempts(id, *n), m.set_attempts(id, *n))
            }
            Op::Reject(sel, e) => {
                let id = pick(*sel, hw);
                let e = &self.text(e);
                self.same(&what, self.q().dead_letter(id, e), m.dead_letter(id, e))
            }
            Op::Hold(sels) => {
                let opts = HoldOptions {
                    ids: pick_all(sels, hw),
                };
                self.same(
                    &what,
                    spool::ops::hold::hold(self.q(), &opts),
                    spool::ops::hold::hold(m, &opts),
                )
            }
            Op::Release(sels) => {
                let opts = ReleaseOptions {
                    ids: pick_all(sels, hw),
                };
                self.same(
                    &what,
                    spool::ops::release::release(self.q(), &opts),
                    spool::ops::release::release(m, &opts),
                )
            }
            Op::Done(sels, force) => {
                let opts = DoneOptions {
                    ids: pick_all(sels, hw),
                    force: *force,
                };
                let got = spool::ops::done::done(self.q(), &opts);
                if let Ok(r) = &got {
                    self.delivered.extend(r.ids.changed.iter().copied());
                }
                self.same(&what, got, spool::ops::done::done(&self.model, &opts))
            }
            Op::Requeue(sels) => {
                let sel = match pick_all(sels, hw) {
                    ids if ids.is_empty() => Selection::All,
                    ids => Selection::Ids(ids),
                };
                self.same(
                    &what,
                    spool::ops::dlq::requeue(self.q(), &sel),
                    spool::ops::dlq::requeue(m, &sel),
                )
            }
            Op::Purge(sels) => {
                let sel = match pick_all(sels, hw) {
                    ids if ids.is_empty() => Selection::All,
                    ids => Selection::Ids(ids),
                };
                self.same(
                    &what,
                    spool::ops::dlq::purge(self.q(), &sel),
                    spool::ops::dlq::purge(m, &sel),
                )
            }
            Op::SetRetain(minutes) => {
                let w = minutes.map(|m| Duration::from_secs(60 * u64::from(m)));
                self.same(&what, self.q().set_retain(w), m.set_retain(w))
            }
            Op::Prune(n) => {
                let n = usize::from(*n);
                self.same(&what, self.q().prune_delivered(n), m.prune_delivered(n))?;
                // Which expired records a bounded prune takes first is
                // not part of the contract. The model, SQLite and NDJSON
                // take the late ones by time, then the others by id,
                // following their late flags; but SQLite and NDJSON also
                // count a record below their prune cursor as late (the
                // model keeps no cursor), and an NDJSON index sets the
                // flags again in file order when a compaction rewrites
                // the delivered file or the index is rebuilt. PostgreSQL
                // takes the oldest deliveries first (ties in no fixed
                // order). So: the same count, maybe other records. Then
                // both sides prune every expired record; the comparison
                // after the operation sees whether either took a record
                // that had not expired.
                let ids = |q: &dyn Queue| -> std::result::Result<Vec<ItemId>, String> {
                    Ok(q.delivered_page(0, 1 << 20)
                        .map_err(|e| e.to_string())?
                        .iter()
                        .map(|d| d.item.id)
                        .collect())
                };
                // (Inside a crash the spool may no longer answer: the
                // crash prunes every expired record on both sides anyway.)
                if let (Ok(got), Ok(want)) = (ids(self.q()), ids(m)) {
                    if got != want {
                        prune_expired(self.q())?;
                        prune_expired(m)?;
                    }
                }
                Ok(())
            }
            Op::Advance(ms) => {
                self.clock.advance(Duration::from_millis(*ms));
                Ok(())
            }
            Op::Rewind(ms) => {
                self.clock.set(ago(now, *ms as i64));
                Ok(())
            }
            Op::Compact => self.compact(&what),
            Op::Checkpoint => {
                let Spool::Sqlite(_) = self.spool() else {
                    return Ok(());
                };
                let opts = CheckpointOptions {
                    mode: CheckpointMode::Truncate,
                    wait: Duration::from_secs(5),
                };
                let got = spool::ops::checkpoint::checkpoint(self.spool(), &opts).map(drop);
                self.same(&what, got, Ok(()))
            }
            Op::ExportImport => self.export_import(),
            Op::Import(specs) => {
                let recs: Vec<Record> = specs
                    .iter()
                    .map(|s| {
                        let mut r = record(s, hw, now);
                        r.item.last_error = r.item.last_error.map(|e| self.text(&e));
                        r
                    })
                    .collect();
                let what = format!("import {recs:?}");
                self.same(&what, self.q().import(&recs), m.import(&recs))
            }
            Op::PushAssign(sels) => {
                let ids = pick_all(sels, hw);
                self.same(&what, self.q().push_assign(&ids), m.push_assign(&ids))
            }
            Op::PushSend(max, fault) => self.push_send(u64::from(*max), *fault),
            Op::DeadLetterTooLarge => match self.too_large.take() {
                Some((id, reason)) => {
                    self.stats.too_large += 1;
                    self.same(
                        &format!("dead_letter({id}) after a 413"),
                        self.q().dead_letter(id, &reason),
                        self.model.dead_letter(id, &reason),
                    )
                }
                None => Ok(()),
            },
            Op::Receive(spec) => self.receive(&what, std::slice::from_ref(spec)),
            Op::ReceiveGroup(specs) => self.receive(&what, specs),
            Op::ReceiveItems(items) => self.receive_items(&what, items),
            Op::ReceiverDrain => {
                self.recv.rx.take_pending();
                Ok(())
            }
            Op::Reopen => self.reopen(),
            Op::Switch => self.switch(),
            Op::Crash { .. } => Err("a crash inside a crash".into()),
            Op::DeleteIndex | Op::SaveIndex | Op::RestoreIndex if self.backend != Backend::File => {
                Ok(())
            }
            Op::DeleteIndex => {
                let _ = std::fs::remove_file(self.index_path());
                Ok(())
            }
            Op::SaveIndex => {
                self.saved_index = Some(std::fs::read(self.index_path()).ok());
                Ok(())
            }
            Op::RestoreIndex => {
                match self.saved_index.clone() {
                    Some(Some(bytes)) => {
                        std::fs::write(self.index_path(), bytes)
                            .map_err(|e| format!("restore the index: {e}"))?;
                        self.vfs.forget(&self.index_path());
                    }
                    Some(None) => {
                        let _ = std::fs::remove_file(self.index_path());
                    }
                    None => {}
                }
                Ok(())
            }
            Op::ReferencePut(_) | Op::ReferenceDone(_) if self.backend != Backend::File => Ok(()),
            // The reference appends blindly: onto a torn tail a crash left
            // (cut by spool's next write, not by a reader) its line would
            // be glued into a malformed one, which spool reports as
            // corruption and the model knows nothing of. It writes only
            // to a file that ends in a whole line.
            Op::ReferencePut(_) | Op::ReferenceDone(_) if !self.ends_in_a_whole_line() => Ok(()),
            Op::ReferencePut(p) => {
                // The reference writes text payloads only.
                let Ok(text) = std::str::from_utf8(p) else {
                    return Ok(());
                };
                let id = hw + 1;
                let key = format!("ref-{id}");
                let line = serde_json::json!({
                    "op": "put", "id": id, "payload": text, "idempotencyKey": key, "attempts": 0
                });
                self.append_line(&line.to_string())?;
                let mut item = Item::new(id, p.clone(), key, now);
                item.enqueued_at = None;
                let rec = Record {
                    item,
                    state: RecordState::Pending,
                    dead_at: None,
                    delivery: None,
                };
                self.model.import(&[rec]).map_err(|e| e.to_string())?;
                Ok(())
            }
            Op::ReferenceDone(sel) => {
                let id = pick(*sel, hw);
                // (A `done` above the mark would raise it: the model has
                // no such operation.)
                if id == 0 || id > hw {
                    return Ok(());
                }
                // A reference writer's `done` deletes; under a retention
                // window the model would keep the item, and the model's
                // `mark_done` prunes what retention kept, which a line
                // appended by another writer does not. An item in flight
                // would become a skip in the model only.
                let st = self.model.stats(now).map_err(|e| e.to_string())?;
                let in_flight = self
                    .model
                    .get(id)
                    .map_err(|e| e.to_string())?
                    .is_some_and(|i| i.push_seq.is_some());
                if self.model.retain().map_err(|e| e.to_string())?.is_some()
                    || st.delivered_retained > 0
                    || in_flight
                {
                    return Ok(());
                }
                self.append_line(&format!(r#"{{"op":"done","id":{id}}}"#))?;
                if self.model.mark_done(&[id]).map_err(|e| e.to_string())? == [true] {
                    self.delivered.insert(id);
                }
                Ok(())
            }
        }
    }

    /// PostgreSQL: the server process of the spool's connection.
    fn server_pid(&self) -> Check<i32> {
        match self.spool() {
            Spool::Postgres(p) => p.server_pid().map_err(|e| format!("server pid: {e}")),
            _ => Err("not a PostgreSQL spool".into()),
        }
    }

    /// PostgreSQL: kill the spool's connection from a second one.
    fn kill_connection(&mut self) -> Check {
        let pid = self.server_pid()?;
        self.connect_killer()?;
        let c = self.pg.as_mut().expect("connected");
        c.execute("SELECT pg_terminate_backend($1)", &[&pid])
            .map_err(|e| format!("pg_terminate_backend: {e}"))?;
        Ok(())
    }

    /// PostgreSQL: the second connection.
    fn connect_killer(&mut self) -> Check {
        if self.pg.is_none() {
            let base = std::env::var("SPOOL_TEST_PG_URL").map_err(|e| e.to_string())?;
            let c = postgres::Client::connect(&base, postgres::NoTls)
                .map_err(|e| format!("connect a second client: {e}"))?;
            self.pg = Some(c);
        }
        Ok(())
    }

    fn index_path(&self) -> PathBuf {
        spool::backend::companion(&self.path, "idx")
    }

    /// Append a line as a reference writer would: no lock, no index;
    /// synced (it is not the spool's write to lose).
    /// The spool file is empty or ends in a newline.
    fn ends_in_a_whole_line(&self) -> bool {
        std::fs::read(&self.path).map_or(true, |b| b.last().is_none_or(|c| *c == b'\n'))
    }

    fn append_line(&self, line: &str) -> Check {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| format!("open the spool file: {e}"))?;
        writeln!(f, "{line}").map_err(|e| format!("append: {e}"))?;
        f.sync_data().map_err(|e| format!("sync: {e}"))?;
        self.io.settle();
        Ok(())
    }

    /// Go over to the other handle (the memory backend has only one).
    fn switch(&mut self) -> Check {
        if self.backend == Backend::Memory {
            return Ok(());
        }
        if self.second.is_none() {
            let s = self
                .open(OpenMode::ReadWrite, None)
                .map_err(|e| format!("open a second handle: {e}"))?;
            self.second = Some(s);
        }
        self.use_second = !self.use_second;
        Ok(())
    }

    fn compact(&mut self, what: &str) -> Check {
        let got = match self.spool() {
            Spool::Memory(_) => return Ok(()),
            s => spool::ops::compact::compact(s, &CompactOptions::default()).map(drop),
        };
        // Compaction prunes the expired delivered records first.
        while self
            .model
            .prune_delivered(PRUNE_BATCH)
            .map_err(|e| e.to_string())?
            > 0
        {}
        if got.is_ok() {
            if let Spool::File(f) = self.spool() {
                // The rewritten file is one a fresh check finds healthy.
                let r = spool::backend::file::verify::verify_path(f.path())
                    .map_err(|e| format!("verify after compaction: {e}"))?;
                if !r.healthy() {
                    return Err(format!("after compaction: {r:?}"));
                }
            }
        }
        self.same(what, got, Ok(()))
    }

    /// Export both, compare the exports, import each into itself.
    fn export_import(&mut self) -> Check {
        let pd = self.dir.path().join("export-spool.ndjson");
        let pm = self.dir.path().join("export-model.ndjson");
        let got = spool::ops::export::export(self.q(), Destination::File(&pd));
        let want = spool::ops::export::export(&self.model, Destination::File(&pm));
        let total = |r: &Result<spool::ops::export::ExportReport>| match r {
            Ok(r) => Ok((r.pending, r.held, r.dead, r.delivered)),
            Err(e) => Err(e.kind()),
        };
        self.durable_ok.set(Some(got.is_ok()));
        if total(&got) != total(&want) {
            return Err(format!("export:\n  spool: {got:?}\n  model: {want:?}"));
        }
        if got.is_err() {
            return Ok(());
        }
        let (d, m) = (std::fs::read(&pd), std::fs::read(&pm));
        if d.as_ref().ok() != m.as_ref().ok() {
            return Err(format!(
                "the exports differ:\n  spool: {}\n  model: {}",
                String::from_utf8_lossy(&d.unwrap_or_default()),
                String::from_utf8_lossy(&m.unwrap_or_default())
            ));
        }
        let input = |p: &PathBuf| ImportInput::file(p);
        let got = input(&pd).and_then(|i| spool::ops::import::import_input(self.q(), &i));
        let want = input(&pm).and_then(|i| spool::ops::import::import_input(&self.model, &i));
        self.same("import of the export", got, want)
    }

    /// The spool under test and the model receive the same push
    /// requests in one transaction (as `spool serve` applies them:
    /// `apply_push` of each in one `receive`) and must answer alike; the
    /// check after the step compares what they stored, their clients'
    /// ledgers included.
    fn receive(&mut self, what: &str, specs: &[ReceiveSpec]) -> Check {
        let mut reqs = Vec::with_capacity(specs.len());
        for spec in specs {
            reqs.push(self.request(spec)?);
        }
        let limits = self.recv.limits;
        self.receive_all(what, &reqs, |txn, req| apply_push(txn, req, &limits))
    }

    /// Each of `inputs` applied by `apply` in one receiving transaction,
    /// on the spool and on the model, and the answers compared.
    fn receive_all<I, T: PartialEq + Debug>(
        &mut self,
        what: &str,
        inputs: &[I],
        apply: impl Fn(&mut dyn ReceiveTxn, &I) -> Result<T>,
    ) -> Check {
        self.stats.received += inputs.len() as u64;
        let run = |q: &dyn Queue| -> Result<Vec<T>> {
            let mut answers = Vec::new();
            q.receive(&mut |txn| {
                // A transaction that fails is tried again whole.
                answers.clear();
                for input in inputs {
                    answers.push(apply(txn, input)?);
                }
                Ok(())
            })?;
            Ok(answers)
        };
        self.same(what, run(self.q()), run(&self.model))
    }

    /// The spool under test and the model receive the same `POST
    /// /v1/items` payloads in one transaction (`apply_item` of each, as
    /// `spool serve` applies them) and must answer alike.
    fn receive_items(&mut self, what: &str, items: &[(NewSpec, Option<u8>)]) -> Check {
        let posts: Vec<(NewItem, Option<String>)> = items
            .iter()
            .map(|(spec, token)| (new_item(spec), token.map(|t| format!("token-{t}"))))
            .collect();
        let limits = self.recv.limits;
        self.receive_all(what, &posts, |txn, (item, sender)| {
            apply_item(txn, item, sender.as_deref(), &limits)
        })
    }

    /// The push request of `spec`, numbered from where the model's ledger
    /// stands.
    fn request(&mut self, spec: &ReceiveSpec) -> Check<wire::PushRequest> {
        let client = format!("sim-client-{}", spec.client);
        let last = client_last_seq(&self.model, &client)?;
        let start = if spec.back > 0 {
            last.saturating_sub(u64::from(spec.back)).max(1)
        } else if spec.gap {
            last + 2
        } else {
            last + 1
        };
        let mut entries = Vec::with_capacity(spec.entries.len());
        for (k, fresh) in spec.entries.iter().enumerate() {
            let seq = start + k as u64;
            let mut e = self
                .sent
                .entry((spec.client, seq))
                .or_insert_with(|| fresh.clone())
                .clone();
            if spec.alter && seq <= last {
                if let Some(item) = &mut e {
                    item.payload.push(b'!');
                }
            }
            entries.push((seq, e.map(|s| new_item(&s))));
        }
        let now = self.clock.now();
        let out: Vec<OutEntry<'_>> = entries
            .iter()
            .map(|(seq, e)| match e {
                Some(item) => OutEntry::Item {
                    seq: *seq,
                    id: *seq,
                    key: &item.key,
                    payload: &item.payload,
                    enqueued_at: Some(now),
                    group: item.group.as_deref(),
                    coalesce_key: item.coalesce_key.as_deref(),
                },
                None => OutEntry::Skip { seq: *seq },
            })
            .collect();
        let acked = last.saturating_sub(u64::from(spec.acked_back));
        let body = wire::encode_request(&client, acked, &out);
        wire::parse_request(&body).map_err(|e| format!("a request: {e:?}"))
    }

    /// One push request: built from the spool (and from the model: the
    /// same bytes), sent through `fault`, answered by the receiver, its
    /// answer decided and applied to both.
    fn push_send(&mut self, max: u64, fault: Fault) -> Check {
        let built = build_request(self.q(), &self.uuid, max);
        self.durable_ok.set(Some(built.is_ok()));
        let built = built.map_err(|e| format!("push request: {e}"))?;
        let want = build_request(&self.model, &self.uuid, max).map_err(|e| e.to_string())?;
        let key = |r: &Option<Request>| r.as_ref().map(|(b, s, _)| (b.clone(), s.clone()));
        if key(&built) != key(&want) {
            return Err(format!(
                "push requests differ:\n  spool: {:?}\n  model: {:?}",
                built.map(|(b, _, _)| String::from_utf8_lossy(&b).into_owned()),
                want.map(|(b, _, _)| String::from_utf8_lossy(&b).into_owned())
            ));
        }
        let Some((body, sent, _)) = built else {
            return Ok(());
        };
        self.stats.push_requests += 1;
        let mut stats = std::mem::take(&mut self.stats);
        let answer = match fault {
            Fault::LoseRequest => None,
            Fault::BadGateway => Some(Ok((502, b"<html>bad gateway</html>".to_vec()))),
            Fault::TooLarge => Some(Ok((413, br#"{"error":"body over 1 MiB"}"#.to_vec()))),
            Fault::None => Some(self.recv.serve(&body, &mut stats)),
            Fault::LoseResponse => {
                let _ = self.recv.serve(&body, &mut stats);
                None
            }
            Fault::Duplicate => {
                let first = self.recv.serve(&body, &mut stats);
                Some(first.and_then(|_| self.recv.serve(&body, &mut stats)))
            }
        };
        let answer = match answer {
            None => None,
            Some(Ok(a)) => Some(a),
            Some(Err(e)) => {
                self.stats = stats;
                return Err(e);
            }
        };
        self.stats = stats;
        let reply = match &answer {
            None => Reply::Transport {
                error: "connection reset by peer",
            },
            Some((status, body)) => Reply::Http {
                status: *status,
                body,
                retry_after: (*status == 503)
                    .then_some(spool::replay::RetryAfter::Delay(Duration::from_secs(5))),
            },
        };
        match decide(&sent, reply) {
            Decision::Ack(ack) => {
                if ack.over_ack.is_some() {
                    return Err(format!("over-ack from a healthy receiver: {ack:?}"));
                }
                let rejected: Vec<(u64, String)> = ack
                    .rejected
                    .iter()
                    .map(|r| (r.seq, r.error.clone()))
                    .collect();
                // What the acknowledged numbers carry, before the ack.
                let in_flight: BTreeMap<ItemId, Item> = self
                    .model
                    .push_in_flight(0, 100_000)
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|i| (i.id, i))
                    .collect();
                let got = self.q().push_ack(ack.last_seq, &rejected);
                let want = self.model.push_ack(ack.last_seq, &rejected);
                if let Ok(a) = &got {
                    self.stats.push_acks += 1;
                    for id in &a.delivered {
                        self.delivered.insert(*id);
                        // Delivered means the receiver applied exactly
                        // this content under this number.
                        let it = &in_flight[id];
                        let seq = it.push_seq.unwrap_or_default();
                        let digest = wire::digest(&it.key, &it.payload);
                        if self.recv.applied.get(&seq) != Some(&digest) {
                            return Err(format!(
                                "item {id} acknowledged as delivered under number {seq}, but \
                                 the receiver applied {:?} there (digest {digest})",
                                self.recv.applied.get(&seq)
                            ));
                        }
                    }
                }
                self.same(&format!("push_ack {ack:?}"), got, want)
            }
            Decision::Backoff { .. } | Decision::Halve { .. } => Ok(()),
            Decision::DeadLetter { seq, reason } => self.too_large(seq, &reason),
            other => Err(format!("a healthy receiver never causes {other:?}")),
        }
    }

    /// A lone entry refused as too large: its item gets an attempt, and
    /// [`Op::DeadLetterTooLarge`] dead-letters it, as `replay --push` does
    /// (its number then goes out as a skip). A skip entry refused so
    /// stops a run: nothing changes.
    fn too_large(&mut self, seq: u64, reason: &str) -> Check {
        let in_flight = self
            .model
            .push_in_flight(0, 100_000)
            .map_err(|e| e.to_string())?;
        let Some(item) = in_flight.into_iter().find(|i| i.push_seq == Some(seq)) else {
            return Ok(());
        };
        let upd = AttemptUpdate {
            attempts: item.attempts.saturating_add(1),
            next_retry_at: None,
            last_error: Some(reason.to_string()),
        };
        let (q, m) = (self.q(), &self.model);
        let what = format!("record_attempt({}) after a 413", item.id);
        self.same(
            &what,
            q.record_attempt(item.id, &upd),
            m.record_attempt(item.id, &upd),
        )?;
        self.too_large = Some((item.id, reason.to_string()));
        Ok(())
    }

    /// The spool and the model hold the same state, and the invariants
    /// hold: every read of the contract, single-item and paged reads
    /// included.
    pub fn check(&self) -> Check {
        self.check_lean()?;
        let q = self.q();
        let m = &self.model;
        cmp("size", &q.size(), &m.size())?;
        cmp("dead_count", &q.dead_count(), &m.dead_count())?;
        cmp("high_water", &q.high_water(), &m.high_water())?;
        cmp("max_depth", &q.max_depth(), &m.max_depth())?;
        cmp("on_full", &q.on_full(), &m.on_full())?;
        cmp("retain", &q.retain(), &m.retain())?;
        cmp("uuid", &q.uuid(), &Ok(self.uuid.clone()))?;
        let hw = self.hw();
        for id in [0, hw / 3, hw / 2, hw, hw + 1] {
            cmp(&format!("get({id})"), &q.get(id), &m.get(id))?;
            cmp(&format!("dead_get({id})"), &q.dead_get(id), &m.dead_get(id))?;
            cmp(
                &format!("delivered_get({id})"),
                &q.delivered_get(id),
                &m.delivered_get(id),
            )?;
        }
        let mid = hw / 2;
        cmp("page", &q.page(mid, 3), &m.page(mid, 3))?;
        cmp("dead_page", &q.dead_page(mid, 2), &m.dead_page(mid, 2))?;
        Ok(())
    }

    /// The check after an ordinary step: the whole state through the
    /// fewest reads — pending items, dead letters and retained records in
    /// full, the stats (depth, held, counts, high-water mark, bound,
    /// on-full policy, retention window), the push state and in-flight
    /// items — and the invariants.
    pub fn check_lean(&self) -> Check {
        let q = self.q();
        let m = &self.model;
        let now = self.clock.now();
        let drained = q.drain();
        cmp("drain", &drained, &m.drain())?;
        let dead = q.dead_page(0, 100_000);
        cmp("dead letters", &dead, &m.dead_page(0, 100_000))?;
        cmp(
            "delivered",
            &q.delivered_page(0, 100_000),
            &m.delivered_page(0, 100_000),
        )?;
        cmp("stats", &q.stats(now), &m.stats(now))?;
        let ps = q.push_state();
        cmp("push_state", &ps, &m.push_state())?;
        cmp("push clients", &ledgers(q), &ledgers(m))?;
        cmp(
            "push_in_flight",
            &q.push_in_flight(0, 100_000),
            &m.push_in_flight(0, 100_000),
        )?;
        // Nothing acknowledged as delivered comes back.
        if let (Ok(items), Ok(dead)) = (&drained, &dead) {
            let back = items
                .iter()
                .map(|i| i.id)
                .chain(dead.iter().map(|d| d.item.id))
                .find(|id| self.delivered.contains(id));
            if let Some(id) = back {
                return Err(format!(
                    "item {id} was acknowledged as delivered and is back"
                ));
            }
        }
        // The watermark is never above what the receiver processed.
        if let Ok(ps) = ps {
            let last = self.recv.rx.ledger.last_seq(&self.uuid);
            if ps.acked > last {
                return Err(format!(
                    "watermark {} above the receiver's {last}",
                    ps.acked
                ));
            }
        }
        Ok(())
    }

    /// The kind of the spool (a sanity check of the harness).
    pub fn kind(&self) -> spool::BackendKind {
        self.q().kind()
    }

    /// Enqueue on the spool behind the model's back (tests of the
    /// checks themselves).
    pub fn tamper_enqueue(&self, payload: &[u8]) {
        self.q().enqueue(payload, "").expect("enqueue");
    }
}
