//! Push: spool to spool, with sequence numbers and cumulative acks (§7).
//!
//! An edge spool pushes batches of its items to a receiving spool; the
//! receiver applies each entry exactly once however often the network
//! drops a request or an answer. This module is the protocol and nothing
//! else: no sockets, no files, no queue backends. `spool replay --push`
//! and `spool serve` move its bytes over HTTP, and the backends store its
//! state; the rules live here, as plain types that tests drive directly
//! (the way `quinn-proto` and `rustls` keep QUIC and TLS apart from I/O).
//!
//! * [`wire`] — the request and response bodies: a strict parser for the
//!   receiver ([`wire::parse_request`]: anything malformed is a 400 that
//!   names the problem, and no input panics), the writer for the sender
//!   ([`wire::encode_request`]), lenient readers for answers, and the
//!   entry [`wire::digest`].
//! * [`receiver`] — the receiver's per-entry rule, [`apply_push`], over a
//!   small storage trait, [`ReceiveTxn`], that a backend implements inside
//!   one write transaction; [`apply_item`] for `/v1/items`; keys scoped
//!   per sender ([`scoped_key`]); [`client_state`] for reconciliation.
//! * [`sender`] — the sender's [`Outbox`] (numbers from 1 without gaps,
//!   in-flight map, clamped cumulative acks, retransmission with the
//!   original numbers) and [`decide`], which turns each answer into a
//!   [`Decision`].
//! * [`retry_after`] — the `Retry-After` a server answers with
//!   ([`RetryAfter`], [`parse_retry_after`]).
//! * [`memory`] — push state in memory: [`PushLedger`] for the memory
//!   backend, [`MemoryReceiver`] for tests.
//!
//! # Guarantees
//!
//! Given a receiver that commits what [`apply_push`] writes atomically
//! and a sender that persists its outbox before sending:
//!
//! * every item the sender puts in flight ends, exactly once, either
//!   applied at the receiver or rejected there with a reason that the
//!   sender learns and dead-letters — unless an operator abandons it
//!   first (`done --force`), in which case the receiver applies it at most
//!   once;
//! * sequence numbers are contiguous from 1 and never reused; the
//!   receiver's `last_seq` never decreases, and the sender's watermark
//!   never decreases and never passes what it assigned;
//! * a reject is reported in every answer until the sender acknowledges
//!   it, so a lost answer never loses a reject;
//! * a copied spool pushing as the same client, or a receiver restored
//!   from an old backup, stops the sender with an error instead of
//!   losing items as "duplicates" or resending them silently.
//!
//! `tests/push_model.rs` checks these against the seed's `Server`/`Client`
//! model under random loss, failures, operator actions and full spools.
//!
//! # The two sides in a few lines
//!
//! ```
//! use spool::push::{apply_push, decide, wire, Decision, MemoryReceiver, Outbox, ReceiveLimits,
//!                   Reply, Settled};
//!
//! // Sender: number two items and write the request.
//! let mut outbox = Outbox::new();
//! let items = [(1u64, b"hello".as_slice()), (2, b"world".as_slice())];
//! for (id, _) in &items {
//!     outbox.assign(*id);
//! }
//! let entries: Vec<_> = outbox
//!     .in_flight()
//!     .map(|(seq, _)| {
//!         let (id, payload) = items[(seq - 1) as usize];
//!         wire::OutEntry::Item {
//!             seq, id, key: "", payload, enqueued_at: None, group: None, coalesce_key: None,
//!         }
//!     })
//!     .collect();
//! let body = wire::encode_request("edge-1", outbox.watermark(), &entries);
//! let sent = outbox.sent(1..3);
//!
//! // Receiver: parse, apply in one transaction, answer.
//! let mut rx = MemoryReceiver::new(None);
//! let req = wire::parse_request(&body).unwrap();
//! let outcome = apply_push(&mut rx, &req, &ReceiveLimits::default()).unwrap();
//! assert_eq!(outcome.status(), 200);
//!
//! // Sender: the answer settles both items.
//! let answer = outcome.body();
//! let reply = Reply::Http { status: 200, body: &answer, retry_after: None };
//! let Decision::Ack(ack) = decide(&sent, reply) else { panic!() };
//! let settled = outbox.settle(&ack);
//! assert!(matches!(settled[1], Settled::Delivered { seq: 2, item: 2 }));
//! assert_eq!(outbox.watermark(), 2);
//! ```

pub mod memory;
pub mod receiver;
pub mod retry_after;
pub mod sender;
pub mod wire;

pub use self::memory::{MemoryReceiver, PushLedger};
pub use self::receiver::{
    apply_item, apply_push, client_state, scoped_key, Accepted, EntryRecord, ItemOutcome,
    PushOutcome, ReceiveLimits, ReceiveRead, ReceiveTxn,
};
pub use self::retry_after::{parse_retry_after, RetryAfter};
pub use self::sender::{
    decide, Ack, Decision, Outbox, Reply, Sent, Settled, Slot, Stop, StopCause,
};
pub use self::wire::{
    parse_request, BadRequest, ClientState, Entry, ItemEntry, Payload, PushRequest, PushResponse,
    Rejected,
};
