//! The storage a receiver works on: [`ReceiveRead`] and [`ReceiveTxn`],
//! which each backend implements inside one write transaction, and
//! [`EntryRecord`], what it records of a new item entry.

use crate::error::Result;
use crate::item::{Enqueued, NewItem};
use crate::push::wire::Rejected;

/// The receiver's reads, for one client at a time.
pub trait ReceiveRead {
    /// The client's `last_seq`; 0 for a client never seen.
    fn last_seq(&mut self, client: &str) -> Result<u64>;

    /// The digest recorded for `seq` (applied, or refused with a verified
    /// digest); `None` for a skipped number, a number refused without a
    /// verifiable digest, or one never processed.
    fn digest(&mut self, client: &str, seq: u64) -> Result<Option<String>>;

    /// The remembered rejects with `seq > after`, ascending.
    fn rejects(&mut self, client: &str, after: u64) -> Result<Vec<Rejected>>;
}

/// The receiver's writes, inside the one transaction that holds a whole
/// request. A backend implements this with a handful of statements on two
/// tables (per-client `last_seq`; per-number digest and reject reason).
pub trait ReceiveTxn: ReceiveRead {
    /// Enqueue one item into the receiving spool under the spool's own
    /// rules: a non-empty key that a pending item already carries is a
    /// dedup hit (nothing stored, `Some` with `deduplicated`), which works
    /// even when the spool is full; else the item replaces the pending
    /// items its coalesce key coalesces (never attempted, not in flight:
    /// `replaced`), and is stored with its group. `Ok(None)`: the spool
    /// is full even after those replacements, and nothing changed.
    fn enqueue(&mut self, item: NewItem) -> Result<Option<Enqueued>>;

    /// Record what became of a new item entry. Called at most once per
    /// number and client, in ascending order; never for a skip entry
    /// (skipped numbers leave no record but `last_seq`).
    fn record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> Result<()>;

    /// Set the client's `last_seq` (never lower than before).
    fn set_last_seq(&mut self, client: &str, seq: u64) -> Result<()>;

    /// Forget the client's rejects with `seq <= upto` (the client has
    /// acknowledged them): their reasons, and the whole record of a
    /// refused number without a digest. Digests stay.
    fn prune_rejects(&mut self, client: &str, upto: u64) -> Result<()>;
}

/// What became of one new item entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryRecord<'a> {
    /// Enqueued (or a dedup hit); keep the digest.
    Applied {
        /// The entry's verified digest.
        digest: &'a str,
    },
    /// Refused; remember the reason until acknowledged, and keep the
    /// digest when there is one.
    Rejected {
        /// The verified digest, `None` when it could not be verified.
        digest: Option<&'a str>,
        /// Why, one line.
        reason: &'a str,
    },
}
