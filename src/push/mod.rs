//! Push: spool to spool, with sequence numbers and cumulative acks (§7).
//!
//! This module is the protocol and nothing else: no sockets, no files, no
//! queue backends.
//!
//! * [`wire`] — the request and response bodies.
//! * [`receiver`] — the receiver's per-entry rule over a storage trait.
//! * [`memory`] — push state in memory.

pub mod memory;
pub mod receiver;
pub mod wire;

pub use self::memory::{MemoryReceiver, PushLedger};
pub use self::receiver::{
    apply_push, client_state, Accepted, EntryRecord, PushOutcome, ReceiveLimits, ReceiveRead,
    ReceiveTxn,
};
pub use self::wire::{
    parse_request, BadRequest, ClientState, Entry, ItemEntry, Payload, PushRequest, PushResponse,
    Rejected,
};
