//! The receiver's rule: what one push request does to the receiving spool.
//!
//! [`apply_push`] is §7's per-entry rule (the seed's step 4) over a
//! storage trait, [`ReceiveTxn`], that a backend implements inside *one*
//! write transaction. The caller (`spool serve`) opens the transaction,
//! calls `apply_push`, commits when it returns `Ok`, rolls back on `Err`,
//! and only then answers. Because the items enqueued, the new `last_seq`
//! and the recorded rejects commit together or not at all, a request
//! whose answer is lost can be resent as often as the network likes: the
//! second time every entry is a duplicate.
//!
//! Per request, in this order:
//!
//! 1. **Gap.** A batch that starts beyond `last_seq + 1` is answered
//!    [`PushOutcome::Conflict`] (409, with `last_seq`); nothing changes.
//! 2. **Duplicates** (`seq <= last_seq`) are skipped and counted. Each
//!    duplicate item entry is first checked against the digest recorded
//!    for its number; a different digest is [`PushOutcome::Conflict`]
//!    (409 "sequence N reused with different content"), and nothing of
//!    the batch is applied. All duplicates are checked before any new
//!    entry is applied.
//! 3. **New entries**, in order, each moving `last_seq` to its number: a
//!    skip entry applies and records nothing; an item entry is refused —
//!    recorded as rejected with a one-line reason — when its payload does
//!    not decode, its digest does not match its key and payload, its key
//!    holds a NUL byte ([`crate::item::key_problem`]) or is longer than
//!    [`ReceiveLimits::max_key_len`], or its payload is larger than
//!    [`ReceiveLimits::max_payload`]; otherwise it is enqueued under the
//!    key [`ReceiveLimits::stored_key`] gives it (the client's scope, a
//!    dedup hit counts as applied) and its digest recorded.
//! 4. **Full.** When the spool has no room for an item, processing stops
//!    before that entry and nothing about it is recorded. If no new entry
//!    was processed at all the answer is [`PushOutcome::Full`] (503 with
//!    `Retry-After`), else a normal 200 with the `last_seq` reached.
//! 5. **Acked.** The request's `acked`, clamped to the `last_seq` the
//!    client had *before* this request, lets the receiver forget the
//!    rejects at or below it (and the whole record of a refused number
//!    that has no digest).
//! 6. **Answer.** `last_seq`, every remembered reject above the clamped
//!    `acked` (so a reject whose answer was lost is reported again until
//!    the client acknowledges it), and the counts.
//!
//! Decisions made where §7 is silent:
//!
//! * `acked` is clamped to the `last_seq` before the request, not after:
//!   an honest client can only acknowledge what earlier answers told it,
//!   and a too-large `acked` must not make the receiver forget rejects
//!   that this very request creates before the client has seen them.
//! * A duplicate *skip* entry is never a conflict, and neither is a
//!   duplicate item entry whose number was skipped, or refused without a
//!   verifiable digest (undecodable payload, digest mismatch): there is
//!   no content to compare. This keeps `done --force` on an item that the
//!   receiver had in fact applied (its answer lost) from being mistaken
//!   for a copied spool.
//! * A refused entry whose digest was verified (key or payload too large)
//!   keeps that digest, so reusing its number for other content is a
//!   conflict like for an applied one.
//! * [`PushOutcome::Full`] and [`PushOutcome::Conflict`] write nothing,
//!   not even the `acked` pruning; the caller may commit or roll back.
//!
//! * **Keys are scoped per sender.** A pushed key is stored as
//!   `<client_id>:<key>` ([`scoped_key`]), so a client can never make
//!   another client's item vanish by sending its key first: a key from
//!   client A never deduplicates an item from client B. `/v1/items`
//!   scopes by the token's name the same way ([`apply_item`]).
//!   [`ReceiveLimits::shared_keys`] (`serve --shared-keys`) keeps one key
//!   space for deployments that want cross-client dedup. An empty key
//!   stays empty: the item's identity downstream is then the receiving
//!   spool's own `<uuid>:<id>`. The digest is always over the key as
//!   sent.
//!
//! What a backend stores, per client: `last_seq`; per applied number, and
//! per refused number whose digest was verified, that digest — kept while
//! the client's state is kept, because it is what catches a copied spool,
//! whose numbers collide with numbers the original client may have had
//! acknowledged long ago (so the digests of acknowledged numbers cannot
//! be dropped without blinding that check); and the rejects not yet
//! acknowledged, with their reasons. A skip entry stores nothing but the
//! advanced `last_seq`, and a refused number without a digest is
//! forgotten once acknowledged: what a client can make the receiver keep
//! beyond its unacknowledged entries is one digest per entry it had
//! applied or verifiably refused.

mod apply;
mod item;
mod limits;
mod refusal;
mod store;
#[cfg(test)]
mod test_requests;

pub use self::apply::{apply_push, client_state, Accepted, PushOutcome};
pub use self::item::{apply_item, ItemOutcome};
pub use self::limits::{scoped_key, ReceiveLimits, DEFAULT_MAX_KEY_LEN};
pub use self::store::{EntryRecord, ReceiveRead, ReceiveTxn};
