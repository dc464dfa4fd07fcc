//! # spool
//!
//! Durable offline spools: local queues of payloads that could not be
//! delivered yet.
//!
//! A spool is one path, stored either in SQLite (the default) or in an
//! append-only NDJSON file, in the on-disk formats of the reference
//! offline-support module (`morph_offline_queue`, `put`/`done` lines), so
//! spools written by either side stay readable and writable by the other.
//! Every mutating operation is durable when it returns `Ok`.
//!
//! ```
//! use spool::{OpenOptions, Spool, Queue};
//!
//! let spool = Spool::memory(&OpenOptions::default());
//! let first = spool.enqueue(b"hello", "op-1").unwrap();
//! let again = spool.enqueue(b"hello, corrected", "op-1").unwrap();
//! assert!(again.deduplicated);
//! assert_eq!(again.id, first.id);
//! assert_eq!(spool.drain().unwrap()[0].payload, b"hello");
//! ```
//!
//! The command-line tool `spool` is a thin layer over this crate: each
//! subcommand calls one operation here and renders its result.

pub mod backend;
pub mod child;
pub mod debug;
pub mod error;
pub mod fs_type;
#[doc(hidden)]
pub mod fuzzing;
pub mod holder_lock;
pub mod item;
pub mod ops;
pub mod private_file;
pub mod push;
pub mod queue;
pub mod replay;
#[cfg(feature = "serve")]
pub mod serve;
pub mod time;
pub mod tls;
pub mod units;
pub mod verify;
pub mod watch;

pub use backend::{
    detect, FileQueue, MemoryQueue, OpenMode, OpenOptions, PostgresQueue, Spool, SqliteQueue,
};
pub use error::{Error, ErrorKind, Result};
pub use item::{
    AttemptUpdate, ClientSummary, DeadLetter, DeliveredItem, Delivery, DepthLimit, EnqueueOptions,
    Enqueued, Evidence, Imported, Item, ItemId, NewItem, OnFull, PushAck, PushState, QueueStats,
    Record, RecordState, PRUNE_BATCH,
};
pub use queue::{BackendKind, Claimed, LeaseToken, Leasing, Queue, PAGE_SIZE};
pub use queue::{IdentityOutcome, SpoolHeader};
pub use time::{Clock, ManualClock, SharedClock, SystemClock, Timestamp};
