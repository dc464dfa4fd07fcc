//! A plan: the operations one seed runs, generated from the seed alone.
//!
//! Ids are not chosen here but when an operation runs (a selector byte
//! picks among the ids the model has issued, 0 and the next unissued
//! one), so that any sub-list of a plan is a plan too: the shrinker
//! removes operations freely.

use super::rng::Rng;
use spool::{DepthLimit, RecordState};

/// A new item: payload, key, group number, coalesce-key number.
#[derive(Clone, Debug)]
pub struct NewSpec {
    pub payload: Vec<u8>,
    pub key: String,
    pub group: Option<u8>,
    pub coalesce: Option<u8>,
}

/// An import record, resolved against the spool when the import runs.
#[derive(Clone, Debug)]
pub struct RecordSpec {
    pub id: u8,
    pub state: RecordState,
    pub payload: Vec<u8>,
    pub key: String,
    pub attempts: u32,
    pub retry_in_ms: Option<u32>,
    pub error: Option<String>,
    /// For dead records the time of death, for delivered ones the time of
    /// delivery; `None` makes the record (and the import) invalid.
    pub dead_ms_ago: Option<u32>,
    pub enqueued_secs_ago: u32,
}

/// A push request from another spool that the spool under test receives
/// (`Queue::receive`, as `spool serve` applies it), from one of two
/// clients. A client gives each number one content for good: an entry
/// sent again carries what it carried the first time, unless `alter`.
#[derive(Clone, Debug)]
pub struct ReceiveSpec {
    /// Which client sends it.
    pub client: u8,
    /// It starts this many numbers before the receiver's next one (a
    /// retransmission), or, when 0 and `gap`, one past it (a gap), else
    /// at it.
    pub back: u8,
    pub gap: bool,
    /// Its entries, in number order: items, or skips (`None`).
    pub entries: Vec<Option<NewSpec>>,
    /// The client's watermark: this many numbers below the receiver's
    /// last (a rejection below it is forgotten).
    pub acked_back: u8,
    /// Entries sent before come with another payload (a client that
    /// reuses numbers: a digest conflict).
    pub alter: bool,
}

/// What happens to one push request on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The request never reaches the receiver.
    LoseRequest,
    /// The receiver applies it; the answer is lost.
    LoseResponse,
    /// It reaches the receiver twice (a retrying proxy); the sender hears
    /// the second answer.
    Duplicate,
    /// A proxy answers 502 without passing it on.
    BadGateway,
    /// A proxy refuses it as too large (413) without passing it on: the
    /// sender halves the batch, or dead-letters a lone entry's item and
    /// sends a skip in its place.
    TooLarge,
}

#[derive(Clone, Debug)]
pub enum Op {
    /// `Queue::enqueue`: one payload and key.
    Enqueue(Vec<u8>, String),
    /// A batch with keys, groups and coalesce keys, under the stored
    /// bound or a bound for this call; streamed (`enqueue_stream`) or not.
    Batch(Vec<NewSpec>, DepthLimit, bool),
    SetMaxDepth(Option<u64>),
    /// The on-full policy (true: drop-oldest).
    SetDropOldest(bool),
    /// Replay outcome "delivered": these ids, with one kind of evidence.
    Deliver(Vec<u8>, u8),
    /// Replay outcome "failed": an attempt recorded.
    Fail {
        id: u8,
        attempts: u32,
        retry_in_ms: Option<u32>,
        error: Option<String>,
    },
    SetAttempts(u8, u32),
    /// Replay outcome "rejected": dead-lettered with a reason.
    Reject(u8, String),
    /// `hold` / `release` through the ops layer.
    Hold(Vec<u8>),
    Release(Vec<u8>),
    /// `done` (with `--force` or not) through the ops layer.
    Done(Vec<u8>, bool),
    /// `dlq requeue` (ids, or all when empty) through the ops layer.
    Requeue(Vec<u8>),
    /// `dlq purge` (ids, or all when empty) through the ops layer.
    Purge(Vec<u8>),
    /// The retention window, in minutes (`None`: off).
    SetRetain(Option<u8>),
    /// Prune at most this many expired delivered records.
    Prune(u8),
    /// The clock jumps forward, in milliseconds.
    Advance(u64),
    /// The clock jumps back, in milliseconds.
    Rewind(u64),
    /// `compact` through the ops layer (NDJSON compaction, SQLite vacuum).
    Compact,
    /// `checkpoint` through the ops layer (SQLite only; refused elsewhere).
    Checkpoint,
    /// `export` of the spool and `import` of that export back into it.
    ExportImport,
    /// `Queue::import` of hand-made records.
    Import(Vec<RecordSpec>),
    /// Push: number these ids (`push_assign`).
    PushAssign(Vec<u8>),
    /// Push: send up to this many in-flight entries to the receiver and
    /// apply its answer.
    PushSend(u8, Fault),
    /// Push: dead-letter the item whose lone entry the last
    /// [`Fault::TooLarge`] refused (its attempt is recorded first, in a
    /// commit of its own, as `replay --push` does).
    DeadLetterTooLarge,
    /// The receiver's consumer takes every item it holds.
    ReceiverDrain,
    /// The spool under test receives a push request.
    Receive(ReceiveSpec),
    /// The spool under test receives several push requests in one
    /// transaction, as `spool serve` commits the requests waiting
    /// together (each numbered from the receiver's state before the
    /// transaction: two of one client overlap).
    ReceiveGroup(Vec<ReceiveSpec>),
    /// The spool under test receives `POST /v1/items` payloads in one
    /// transaction (a group commit of several clients' requests), each
    /// with the name of the token it came with, if any.
    ReceiveItems(Vec<(NewSpec, Option<u8>)>),
    /// Close the spool and open it again.
    Reopen,
    /// Use the other of two handles on the spool from now on.
    Switch,
    /// Run `op` with a crash armed after `at` I/O operations (when it
    /// does not trip, the process dies after `op` returns), then reopen;
    /// with `power`, unsynced writes are lost too (torn as `seed` says).
    Crash {
        at: u16,
        power: bool,
        seed: u64,
        op: Box<Op>,
    },
    /// NDJSON: delete the derived index.
    DeleteIndex,
    /// NDJSON: remember the index as it is now ...
    SaveIndex,
    /// ... and put that copy back (an index that fell behind, or that
    /// describes the file before a compaction).
    RestoreIndex,
    /// NDJSON: a reference writer appends a `put` line for a new item.
    ReferencePut(Vec<u8>),
    /// NDJSON: a reference writer appends a `done` line for an id.
    ReferenceDone(u8),
}

impl Op {
    /// Whether a crash may be armed around this operation (it writes the
    /// spool, as one commit).
    fn crashable(&self) -> bool {
        !matches!(
            self,
            Op::Advance(_)
                | Op::Rewind(_)
                | Op::Reopen
                | Op::Switch
                | Op::ReceiverDrain
                | Op::Crash { .. }
                | Op::DeleteIndex
                | Op::SaveIndex
                | Op::RestoreIndex
                | Op::ReferencePut(_)
                | Op::ReferenceDone(_)
        )
    }
}

/// A seed's plan.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The bound the spool is created with.
    pub max_depth: Option<u64>,
    /// NDJSON: the main file's size from which a mutation compacts it
    /// automatically (`None`: the default, 4 MiB, which no plan reaches).
    pub auto_compact: Option<u64>,
    /// NDJSON: handles opened after creating the spool (reopens after a
    /// crash, the second handle) defer reading the files to their first
    /// operation, as the CLI's one-shot writes do
    /// (`OpenOptions::defer_load`).
    pub defer_open: bool,
    pub ops: Vec<Op>,
}

fn key(r: &mut Rng) -> String {
    r.pick(&["", "", "a", "b", "c"]).to_string()
}

fn payload(r: &mut Rng) -> Vec<u8> {
    match r.below(8) {
        0 => r
            .pick(&[
                &b""[..],
                b"\0",
                b"\xff\xfe",
                b"\"\\",
                b"\n{\"op\":\"done\",\"id\":1}\n",
                "\u{2028}\u{e9}".as_bytes(),
            ])
            .to_vec(),
        // Over the receiver's payload limit: refused when pushed.
        1 => vec![b'x'; 120],
        _ => (0..r.below(6)).map(|_| r.u8()).collect(),
    }
}

fn error_text(r: &mut Rng) -> String {
    r.pick(&["", "boom", "503 \"busy\"\nretry \\ later\u{2028}", "nul\0"])
        .to_string()
}

fn ids(r: &mut Rng) -> Vec<u8> {
    (0..r.below(4)).map(|_| r.u8()).collect()
}

fn opt<T>(r: &mut Rng, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
    if r.bool() {
        Some(f(r))
    } else {
        None
    }
}

fn new_spec(r: &mut Rng) -> NewSpec {
    NewSpec {
        payload: payload(r),
        key: key(r),
        group: if r.chance(1, 3) {
            Some(r.below(3) as u8)
        } else {
            None
        },
        coalesce: if r.chance(1, 3) {
            Some(r.below(3) as u8)
        } else {
            None
        },
    }
}

fn record_spec(r: &mut Rng) -> RecordSpec {
    RecordSpec {
        id: r.u8(),
        state: r.pick(&[
            RecordState::Pending,
            RecordState::Held,
            RecordState::Dead,
            RecordState::Delivered,
        ]),
        payload: payload(r),
        key: key(r),
        attempts: r.below(6) as u32,
        retry_in_ms: opt(r, |r| r.below(120_000) as u32),
        error: opt(r, error_text),
        dead_ms_ago: if r.chance(9, 10) {
            Some(r.below(100_000) as u32)
        } else {
            None
        },
        enqueued_secs_ago: r.below(100_000) as u32,
    }
}

fn fault(r: &mut Rng) -> Fault {
    match r.weighted(&[5, 1, 1, 1, 1]) {
        0 => Fault::None,
        1 => Fault::LoseRequest,
        2 => Fault::LoseResponse,
        3 => Fault::Duplicate,
        _ => Fault::BadGateway,
    }
}

fn plain_op(r: &mut Rng) -> Op {
    const WEIGHTS: &[u32] = &[
        6, 4, 1, 1, 3, 2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 2, 1, 1, 1, 1, 1, 3, 4, 1, 2, 2, 1, 1, 1, 1, 1,
    ];
    match r.weighted(WEIGHTS) {
        0 => Op::Enqueue(payload(r), key(r)),
        1 => {
            let n = r.range(0, 5);
            let items = (0..n).map(|_| new_spec(r)).collect();
            let limit = if r.chance(1, 4) {
                DepthLimit::Override(opt(r, |r| r.below(8)))
            } else {
                DepthLimit::Stored
            };
            Op::Batch(items, limit, r.bool())
        }
        2 => Op::SetMaxDepth(opt(r, |r| r.below(6))),
        3 => Op::SetDropOldest(r.bool()),
        4 => Op::Deliver(ids(r), r.u8()),
        5 => Op::Fail {
            id: r.u8(),
            attempts: r.below(6) as u32,
            retry_in_ms: opt(r, |r| r.below(120_000) as u32),
            error: opt(r, error_text),
        },
        6 => Op::SetAttempts(r.u8(), r.below(6) as u32),
        7 => Op::Reject(r.u8(), error_text(r)),
        8 => Op::Hold(ids(r)),
        9 => Op::Release(ids(r)),
        10 => Op::Done(ids(r), r.bool()),
        11 => Op::Requeue(ids(r)),
        12 => Op::Purge(ids(r)),
        13 => Op::SetRetain(opt(r, |r| r.range(1, 4) as u8)),
        14 => Op::Prune(r.below(4) as u8),
        15 => Op::Advance(r.below(300_000)),
        16 => Op::Rewind(r.below(120_000)),
        17 => Op::Compact,
        18 => Op::Checkpoint,
        19 => Op::ExportImport,
        20 => Op::Import((0..r.below(4)).map(|_| record_spec(r)).collect()),
        21 => Op::PushAssign(ids(r)),
        22 => Op::PushSend(r.range(1, 6) as u8, fault(r)),
        23 => Op::ReceiverDrain,
        24 => Op::Reopen,
        25 => Op::Switch,
        26 => Op::DeleteIndex,
        27 => Op::SaveIndex,
        28 => Op::RestoreIndex,
        29 => Op::ReferencePut(payload(r)),
        _ => Op::ReferenceDone(r.u8()),
    }
}

fn receive_op(r: &mut Rng) -> Op {
    Op::Receive(receive_spec(r))
}

fn receive_spec(r: &mut Rng) -> ReceiveSpec {
    let back = if r.chance(1, 3) {
        r.range(1, 4) as u8
    } else {
        0
    };
    ReceiveSpec {
        client: r.below(2) as u8,
        back,
        gap: back == 0 && r.chance(1, 8),
        entries: (0..r.range(1, 5))
            .map(|_| (!r.chance(1, 5)).then(|| new_spec(r)))
            .collect(),
        acked_back: r.below(4) as u8,
        alter: r.chance(1, 10),
    }
}

/// Maybe wrap `op` in a crash: about one operation in six dies in one.
fn maybe_crash(r: &mut Rng, op: Op) -> Op {
    if op.crashable() && r.chance(1, 6) {
        Op::Crash {
            // Most operations make a handful of I/O operations.
            at: if r.chance(3, 4) {
                r.below(8)
            } else {
                r.below(40)
            } as u16,
            power: r.bool(),
            seed: r.next_u64(),
            op: Box::new(op),
        }
    } else {
        op
    }
}

/// Which operations a plan draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Draw {
    /// The operations every seed of [`crate::REGRESSIONS`] was found
    /// with: the same seed gives the same plan.
    Plain,
    /// Those, with received push requests ([`Op::Receive`]) between
    /// them, drawn from a second stream of the seed so that the plain
    /// operations come out as with [`Draw::Plain`].
    WithReceive,
    /// Those, with groups of received requests ([`Op::ReceiveGroup`])
    /// from a third stream.
    WithReceiveGroups,
    /// Those, with received `POST /v1/items` payloads
    /// ([`Op::ReceiveItems`]) from a fourth stream.
    WithItems,
    /// Those, with push requests refused as too large
    /// ([`Fault::TooLarge`]) from a fifth stream.
    WithTooLarge,
}

/// The plan of `seed`: `len` operations.
pub fn generate(seed: u64, len: usize, draw: Draw) -> Plan {
    let mut r = Rng::new(seed);
    let mut extra = Rng::new(seed ^ 0x5245_4345_4956_4553);
    let mut groups = Rng::new(seed ^ 0x4752_4f55_5053_0000);
    let mut posts = Rng::new(seed ^ 0x4954_454d_5300_0000);
    let mut big = Rng::new(seed ^ 0x3431_3320_4249_4700);
    let max_depth = opt(&mut r, |r| r.range(1, 6));
    // From a stream of its own, so that a seed's operations stay the same.
    let auto_compact = opt(&mut Rng::new(seed ^ 0x434f_4d50_4143_5400), |r| {
        256 << r.below(5)
    });
    let defer_open = Rng::new(seed ^ 0x4445_4645_5200_0000).chance(1, 2);
    let mut ops = Vec::with_capacity(len);
    while ops.len() < len {
        let op = plain_op(&mut r);
        ops.push(maybe_crash(&mut r, op));
        if draw != Draw::Plain && ops.len() < len && extra.chance(1, 8) {
            let op = receive_op(&mut extra);
            ops.push(maybe_crash(&mut extra, op));
        }
        let with_items = matches!(draw, Draw::WithItems | Draw::WithTooLarge);
        let with_groups = with_items || draw == Draw::WithReceiveGroups;
        if with_groups && ops.len() < len && groups.chance(1, 16) {
            let n = groups.range(2, 4);
            let op = Op::ReceiveGroup((0..n).map(|_| receive_spec(&mut groups)).collect());
            ops.push(maybe_crash(&mut groups, op));
        }
        if with_items && ops.len() < len && posts.chance(1, 12) {
            let items = (0..posts.range(1, 4))
                .map(|_| {
                    let token = posts.chance(1, 2).then(|| posts.below(2) as u8);
                    (new_spec(&mut posts), token)
                })
                .collect();
            ops.push(maybe_crash(&mut posts, Op::ReceiveItems(items)));
        }
        if draw == Draw::WithTooLarge && ops.len() + 2 <= len && big.chance(1, 16) {
            let op = Op::PushSend(big.range(1, 3) as u8, Fault::TooLarge);
            ops.push(maybe_crash(&mut big, op));
            ops.push(maybe_crash(&mut big, Op::DeadLetterTooLarge));
        }
    }
    Plan {
        max_depth,
        auto_compact,
        defer_open,
        ops,
    }
}
