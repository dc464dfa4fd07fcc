//! Push: spool to spool, with sequence numbers and cumulative acks (§7).
//!
//! This module is the protocol and nothing else: no sockets, no files, no
//! queue backends.
//!
//! * [`wire`] — the request and response bodies.

pub mod wire;

pub use self::wire::{
    parse_request, BadRequest, ClientState, Entry, ItemEntry, Payload, PushRequest, PushResponse,
    Rejected,
};
