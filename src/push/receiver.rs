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

use super::wire::{self, ClientState, Entry, ErrorBody, Payload, PushRequest, Rejected};
use crate::error::{Error, Result};
use crate::item::Enqueued;

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
    /// even when the spool is full. `Ok(None)`: the spool is full and
    /// nothing was stored.
    fn enqueue(&mut self, payload: &[u8], key: &str) -> Result<Option<Enqueued>>;

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

/// The receiver's per-entry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveLimits {
    /// Largest payload accepted, in bytes (`serve --max-payload`).
    pub max_payload: u64,
    /// Longest key accepted, in bytes (of the key as sent).
    pub max_key_len: usize,
    /// Store keys as they come instead of qualifying each with its
    /// sender (`serve --shared-keys`): one key space for all clients and
    /// tokens, so that a key from one deduplicates an item from another.
    /// Off by default (see [`ReceiveLimits::stored_key`]).
    pub shared_keys: bool,
}

/// The default longest key: 1 KiB, far above any uuid-based key.
pub const DEFAULT_MAX_KEY_LEN: usize = 1024;

impl Default for ReceiveLimits {
    fn default() -> Self {
        ReceiveLimits {
            max_payload: crate::ops::input::DEFAULT_MAX_PAYLOAD,
            max_key_len: DEFAULT_MAX_KEY_LEN,
            shared_keys: false,
        }
    }
}

impl ReceiveLimits {
    /// The key the receiving spool stores for `key` sent by `sender` (a
    /// push client id, or a token's name on `/v1/items`; `None`: no
    /// sender to scope by): [`scoped_key`], or `key` itself with
    /// [`ReceiveLimits::shared_keys`] or without a sender.
    pub fn stored_key(&self, sender: Option<&str>, key: &str) -> String {
        match sender {
            Some(sender) if !self.shared_keys => scoped_key(sender, key),
            _ => key.to_string(),
        }
    }
}

/// `key` qualified by its sender: `<sender>:<key>`, the key a receiving
/// spool stores for a pushed key (the sender is the client id) or a
/// `/v1/items` key (the token's name), and so also the `Idempotency-Key`
/// it sends downstream. An empty key stays empty (the item has no key;
/// downstream it is identified by the receiving spool's `<uuid>:<id>`).
///
/// The scope always ends at the first `:`: a `%` or `:` in the sender is
/// written `%25` or `%3A` (client ids may hold `:`; ids in the usual
/// forms — spool uuids, host names — come out unchanged), so no two
/// senders can ever produce the same stored key.
///
/// ```
/// use spool::push::receiver::scoped_key;
/// assert_eq!(scoped_key("edge-1", "order-42"), "edge-1:order-42");
/// assert_eq!(scoped_key("edge-1", ""), "");
/// assert_eq!(scoped_key("a:b", "c"), "a%3Ab:c");
/// assert_ne!(scoped_key("a:b", "c"), scoped_key("a", "b:c"));
/// ```
pub fn scoped_key(sender: &str, key: &str) -> String {
    if key.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(sender.len() + 1 + key.len());
    for c in sender.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out.push(':');
    out.push_str(key);
    out
}

/// What [`apply_item`] did with one `POST /v1/items` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Stored, or a dedup hit (`201` / `200`).
    Enqueued(Enqueued),
    /// The spool is full; nothing was stored (`503` with `Retry-After`).
    Full,
    /// The key cannot be stored (`400`); nothing was stored. One line.
    Refused(String),
}

/// Enqueue one `POST /v1/items` payload inside the caller's transaction:
/// its key is refused when it holds a NUL byte, else stored as
/// [`ReceiveLimits::stored_key`] gives it for `sender` (the token's name
/// when a token file is in use, `None` without one).
pub fn apply_item<T: ReceiveTxn + ?Sized>(
    txn: &mut T,
    payload: &[u8],
    key: &str,
    sender: Option<&str>,
    limits: &ReceiveLimits,
) -> Result<ItemOutcome> {
    if let Some(problem) = crate::item::key_problem(key) {
        return Ok(ItemOutcome::Refused(format!(
            "the Idempotency-Key header is refused: {problem}"
        )));
    }
    let stored = limits.stored_key(sender, key);
    Ok(match txn.enqueue(payload, &stored)? {
        Some(e) => ItemOutcome::Enqueued(e),
        None => ItemOutcome::Full,
    })
}

/// The result of one push request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// 200: the request was processed (possibly only partly, when the
    /// spool filled up).
    Accepted(Accepted),
    /// 409: a gap, or a number reused with different content. Nothing
    /// changed.
    Conflict {
        /// The client's `last_seq`.
        last_seq: u64,
        /// One line for the body.
        error: String,
    },
    /// 503 with `Retry-After`: the spool is full and no new entry could be
    /// processed. Nothing changed.
    Full {
        /// The client's `last_seq`.
        last_seq: u64,
    },
}

/// A processed request: the answer and counts for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The `200` body.
    pub response: wire::PushResponse,
    /// New entries refused in this request.
    pub rejected: u64,
    /// New skip entries in this request.
    pub skipped: u64,
    /// Applied entries that were dedup hits (included in
    /// `response.applied`).
    pub deduplicated: u64,
}

impl PushOutcome {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        match self {
            PushOutcome::Accepted(_) => 200,
            PushOutcome::Conflict { .. } => 409,
            PushOutcome::Full { .. } => 503,
        }
    }

    /// The body of the answer.
    pub fn body(&self) -> Vec<u8> {
        match self {
            PushOutcome::Accepted(a) => a.response.to_json(),
            PushOutcome::Conflict { last_seq, error } => ErrorBody {
                error: error.clone(),
                last_seq: Some(*last_seq),
            }
            .to_json(),
            PushOutcome::Full { .. } => {
                ErrorBody::new("the receiving spool is full; retry later").to_json()
            }
        }
    }
}

/// Apply one push request inside the caller's transaction (see the module
/// docs for the rule). `Err` means the transaction must be rolled back;
/// it is either the storage's error or [`Error::InvalidInput`] for a
/// request whose entries are not ascending and contiguous (which
/// [`wire::parse_request`] never returns).
pub fn apply_push<T: ReceiveTxn + ?Sized>(
    txn: &mut T,
    req: &PushRequest,
    limits: &ReceiveLimits,
) -> Result<PushOutcome> {
    check_contiguous(&req.entries)?;
    let client = req.client_id.as_str();
    let before = txn.last_seq(client)?;

    if let Some(first) = req.entries.first() {
        if first.seq() > before.saturating_add(1) {
            return Ok(PushOutcome::Conflict {
                last_seq: before,
                error: format!(
                    "batch starts at sequence {} but the last sequence received from this \
                     client is {before}: resend from {}",
                    first.seq(),
                    before.saturating_add(1)
                ),
            });
        }
    }

    // Duplicates first, all of them, before anything is written.
    let mut duplicates = 0u64;
    for entry in req.entries.iter().take_while(|e| e.seq() <= before) {
        duplicates += 1;
        if let Entry::Item(item) = entry {
            if let Some(recorded) = txn.digest(client, item.seq)? {
                if recorded != item.digest {
                    return Ok(PushOutcome::Conflict {
                        last_seq: before,
                        error: format!(
                            "sequence {} reused with different content: is this spool a copy \
                             of another?",
                            item.seq
                        ),
                    });
                }
            }
        }
    }

    let mut last = before;
    let (mut applied, mut rejected, mut skipped, mut deduplicated) = (0u64, 0u64, 0u64, 0u64);
    let mut full = false;
    for entry in &req.entries[duplicates as usize..] {
        let seq = entry.seq();
        match entry {
            Entry::Skip { .. } => skipped += 1,
            Entry::Item(item) => match check(item, limits) {
                Err(refusal) => {
                    txn.record(
                        client,
                        seq,
                        EntryRecord::Rejected {
                            digest: refusal.verified.then_some(item.digest.as_str()),
                            reason: &refusal.reason,
                        },
                    )?;
                    rejected += 1;
                }
                Ok(payload) => {
                    match txn.enqueue(payload, &limits.stored_key(Some(client), &item.key))? {
                        Some(e) => {
                            txn.record(
                                client,
                                seq,
                                EntryRecord::Applied {
                                    digest: &item.digest,
                                },
                            )?;
                            applied += 1;
                            deduplicated += u64::from(e.deduplicated);
                        }
                        None => {
                            full = true;
                            break;
                        }
                    }
                }
            },
        }
        last = seq;
    }

    if full && last == before {
        return Ok(PushOutcome::Full { last_seq: before });
    }
    if last != before {
        txn.set_last_seq(client, last)?;
    }
    let acked = req.acked.min(before);
    if acked > 0 {
        txn.prune_rejects(client, acked)?;
    }
    let reported = txn.rejects(client, acked)?;
    Ok(PushOutcome::Accepted(Accepted {
        response: wire::PushResponse {
            last_seq: last,
            rejected: reported,
            applied,
            duplicates,
        },
        rejected,
        skipped,
        deduplicated,
    }))
}

/// Where the receiver stands for `client`: the answer to
/// `GET /v1/clients/{client_id}` (the seed's pull). `rejected` holds the
/// rejects the client has not acknowledged yet.
pub fn client_state<R: ReceiveRead + ?Sized>(read: &mut R, client: &str) -> Result<ClientState> {
    Ok(ClientState {
        last_seq: read.last_seq(client)?,
        rejected: read.rejects(client, 0)?,
    })
}

fn check_contiguous(entries: &[Entry]) -> Result<()> {
    if entries.first().is_some_and(|e| e.seq() == 0) {
        return Err(Error::InvalidInput(
            "push entries start at sequence number 0".into(),
        ));
    }
    for w in entries.windows(2) {
        if w[0].seq().checked_add(1) != Some(w[1].seq()) {
            return Err(Error::InvalidInput(format!(
                "push entries are not contiguous: {} is followed by {}",
                w[0].seq(),
                w[1].seq()
            )));
        }
    }
    Ok(())
}

/// Why an item entry is refused.
struct Refusal {
    reason: String,
    /// The entry's digest matches its key and payload.
    verified: bool,
}

/// The payload to enqueue, or why the entry is refused.
fn check<'a>(item: &'a wire::ItemEntry, limits: &ReceiveLimits) -> Result<&'a [u8], Refusal> {
    let payload = match &item.payload {
        Payload::Bytes(bytes) => bytes.as_slice(),
        Payload::Undecodable { reason, .. } => {
            return Err(Refusal {
                reason: reason.clone(),
                verified: false,
            })
        }
    };
    let computed = wire::digest(&item.key, payload);
    if computed != item.digest {
        return Err(Refusal {
            reason: format!(
                "digest {} does not match the key and payload (computed {computed})",
                item.digest
            ),
            verified: false,
        });
    }
    if let Some(problem) = crate::item::key_problem(&item.key) {
        // Its digest cannot tell its key from its payload: none is kept.
        return Err(Refusal {
            reason: problem.to_string(),
            verified: false,
        });
    }
    if item.key.len() > limits.max_key_len {
        return Err(Refusal {
            reason: format!(
                "key of {} bytes is over the receiver's limit of {} bytes",
                item.key.len(),
                limits.max_key_len
            ),
            verified: true,
        });
    }
    if payload.len() as u64 > limits.max_payload {
        return Err(Refusal {
            reason: format!(
                "payload of {} bytes is over the receiver's limit of {} bytes",
                payload.len(),
                limits.max_payload
            ),
            verified: true,
        });
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::memory::MemoryReceiver;
    use crate::push::wire::{ItemEntry, PushResponse};

    const C: &str = "edge-1";

    fn item(seq: u64, key: &str, payload: &[u8]) -> Entry {
        Entry::Item(Box::new(ItemEntry {
            seq,
            id: seq + 100,
            key: key.into(),
            payload: Payload::Bytes(payload.to_vec()),
            enqueued_at: None,
            digest: wire::digest(key, payload),
        }))
    }

    fn text(seq: u64) -> Entry {
        item(seq, "", format!("p{seq}").as_bytes())
    }

    fn req(acked: u64, entries: Vec<Entry>) -> PushRequest {
        PushRequest {
            client_id: C.into(),
            acked,
            entries,
        }
    }

    fn limits() -> ReceiveLimits {
        ReceiveLimits {
            max_payload: 10,
            max_key_len: 4,
            shared_keys: false,
        }
    }

    fn keys(rx: &MemoryReceiver) -> Vec<(String, String)> {
        rx.pending()
            .iter()
            .map(|(_, it)| {
                (
                    it.key.clone(),
                    String::from_utf8(it.payload.clone()).unwrap(),
                )
            })
            .collect()
    }

    fn from(client: &str, entries: Vec<Entry>) -> PushRequest {
        PushRequest {
            client_id: client.into(),
            acked: 0,
            entries,
        }
    }

    fn push(rx: &mut MemoryReceiver, r: &PushRequest) -> PushOutcome {
        apply_push(rx, r, &limits()).unwrap()
    }

    fn accepted(o: PushOutcome) -> Accepted {
        match o {
            PushOutcome::Accepted(a) => a,
            other => panic!("expected 200, got {other:?}"),
        }
    }

    fn payloads(rx: &MemoryReceiver) -> Vec<String> {
        rx.pending()
            .iter()
            .map(|(_, it)| String::from_utf8(it.payload.clone()).unwrap())
            .collect()
    }

    #[test]
    fn new_entries_are_applied_in_order() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(&mut rx, &req(0, vec![text(1), text(2), text(3)])));
        assert_eq!(
            a.response,
            PushResponse {
                last_seq: 3,
                rejected: vec![],
                applied: 3,
                duplicates: 0
            }
        );
        assert_eq!(payloads(&rx), ["p1", "p2", "p3"]);
        assert_eq!(rx.ledger.last_seq(C), 3);
        assert_eq!(
            rx.ledger.digest(C, 2),
            Some(wire::digest("", b"p2")),
            "the digest of an applied number is kept"
        );
    }

    #[test]
    fn a_resent_batch_is_all_duplicates() {
        let mut rx = MemoryReceiver::new(None);
        let r = req(0, vec![text(1), text(2)]);
        push(&mut rx, &r);
        let a = accepted(push(&mut rx, &r));
        assert_eq!((a.response.applied, a.response.duplicates), (0, 2));
        assert_eq!(a.response.last_seq, 2);
        assert_eq!(payloads(&rx), ["p1", "p2"], "nothing applied twice");
        // Overlapping: 2 is a duplicate, 3 is new.
        let a = accepted(push(&mut rx, &req(0, vec![text(2), text(3)])));
        assert_eq!((a.response.applied, a.response.duplicates), (1, 1));
        assert_eq!(payloads(&rx), ["p1", "p2", "p3"]);
    }

    #[test]
    fn a_gap_is_a_conflict_that_changes_nothing() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1)]));
        let before = rx.clone();
        let o = push(&mut rx, &req(1, vec![text(3), text(4)]));
        assert_eq!(o.status(), 409);
        let PushOutcome::Conflict { last_seq, error } = &o else {
            panic!()
        };
        assert_eq!(*last_seq, 1);
        assert!(error.contains("resend from 2"), "{error}");
        let body: serde_json::Value = serde_json::from_slice(&o.body()).unwrap();
        assert_eq!(body["last_seq"], 1);
        assert_eq!(rx, before);
        // A brand-new client must start at 1.
        let o = push(
            &mut rx,
            &PushRequest {
                client_id: "other".into(),
                acked: 0,
                entries: vec![text(2)],
            },
        );
        assert_eq!(o.status(), 409);
    }

    #[test]
    fn a_reused_number_with_other_content_is_a_conflict_and_nothing_is_applied() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), text(2)]));
        let before = rx.clone();
        // seq 1 matches, seq 2 does not; seq 3 is new and valid.
        let o = push(
            &mut rx,
            &req(0, vec![text(1), item(2, "", b"other"), text(3)]),
        );
        let PushOutcome::Conflict { last_seq, error } = &o else {
            panic!("{o:?}")
        };
        assert_eq!(*last_seq, 2);
        assert_eq!(
            error,
            "sequence 2 reused with different content: is this spool a copy of another?"
        );
        assert_eq!(rx, before, "entry 3 must not be applied");
        // The key is part of the content.
        let o = push(&mut rx, &req(0, vec![item(1, "k", b"p1")]));
        assert_eq!(o.status(), 409);
    }

    #[test]
    fn refused_entries_are_recorded_and_advance_last_seq() {
        let mut rx = MemoryReceiver::new(None);
        let mut bad_digest = item(3, "", b"x");
        if let Entry::Item(e) = &mut bad_digest {
            e.digest = wire::digest("", b"y");
        }
        let undecodable = Entry::Item(Box::new(ItemEntry {
            seq: 4,
            id: 4,
            key: String::new(),
            payload: Payload::Undecodable {
                base64: "%".into(),
                reason: "invalid payload_base64: bad".into(),
            },
            enqueued_at: None,
            digest: wire::digest("", b""),
        }));
        let a = accepted(push(
            &mut rx,
            &req(
                0,
                vec![
                    item(1, "", &[b'x'; 11]),
                    item(2, "12345", b"x"),
                    bad_digest,
                    undecodable,
                    item(5, "", &[b'x'; 10]),
                ],
            ),
        ));
        assert_eq!(a.response.last_seq, 5);
        assert_eq!((a.response.applied, a.rejected), (1, 4));
        let reasons: Vec<(u64, &str)> = a
            .response
            .rejected
            .iter()
            .map(|r| (r.seq, r.error.as_str()))
            .collect();
        assert_eq!(
            reasons[0],
            (
                1,
                "payload of 11 bytes is over the receiver's limit of 10 bytes"
            )
        );
        assert_eq!(
            reasons[1],
            (2, "key of 5 bytes is over the receiver's limit of 4 bytes")
        );
        assert!(
            reasons[2].1.starts_with("digest sha256:"),
            "{}",
            reasons[2].1
        );
        assert!(reasons[2].1.contains("does not match"), "{}", reasons[2].1);
        assert_eq!(reasons[3], (4, "invalid payload_base64: bad"));
        assert_eq!(payloads(&rx).len(), 1, "only the 10-byte payload fits");
        for r in &a.response.rejected {
            assert!(!r.error.contains('\n'));
        }
    }

    #[test]
    fn a_dedup_hit_counts_as_applied() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(
            &mut rx,
            &req(0, vec![item(1, "k", b"first"), item(2, "k", b"second")]),
        ));
        assert_eq!((a.response.applied, a.deduplicated), (2, 1));
        assert_eq!(payloads(&rx), ["first"]);
        assert_eq!(rx.ledger.last_seq(C), 2);
    }

    #[test]
    fn skip_entries_advance_without_applying() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(
            &mut rx,
            &req(0, vec![text(1), Entry::Skip { seq: 2 }, text(3)]),
        ));
        assert_eq!(a.response.last_seq, 3);
        assert_eq!((a.response.applied, a.skipped), (2, 1));
        assert_eq!(payloads(&rx), ["p1", "p3"]);
    }

    #[test]
    fn skip_entries_store_nothing_but_last_seq() {
        let mut rx = MemoryReceiver::new(None);
        let skips: Vec<Entry> = (1..=1000).map(|seq| Entry::Skip { seq }).collect();
        let a = accepted(push(&mut rx, &req(0, skips)));
        assert_eq!((a.response.last_seq, a.skipped), (1000, 1000));
        let c = rx.ledger.client(C).unwrap();
        assert_eq!(c.last_seq, 1000);
        assert!(c.entries.is_empty(), "{} numbers recorded", c.entries.len());
        // A skipped number sent again, as an item, is a duplicate.
        let a = accepted(push(&mut rx, &req(1000, vec![text(1000), text(1001)])));
        assert_eq!((a.response.duplicates, a.response.applied), (1, 1));
        assert_eq!(rx.ledger.client(C).unwrap().entries.len(), 1);
    }

    #[test]
    fn acknowledged_refusals_without_a_digest_are_forgotten() {
        let mut rx = MemoryReceiver::new(None);
        let mut bad = item(1, "", b"x");
        if let Entry::Item(e) = &mut bad {
            e.digest = wire::digest("", b"y");
        }
        // 1: no verifiable digest; 2: verified, refused (too large).
        push(&mut rx, &req(0, vec![bad, item(2, "", &[0; 11]), text(3)]));
        assert_eq!(rx.ledger.client(C).unwrap().entries.len(), 3);
        let a = accepted(push(&mut rx, &req(3, vec![])));
        assert!(a.response.rejected.is_empty());
        let c = rx.ledger.client(C).unwrap();
        assert_eq!(
            c.entries.keys().copied().collect::<Vec<_>>(),
            [2, 3],
            "what has a digest stays, the rest goes once acknowledged"
        );
        assert_eq!(c.last_seq, 3);
    }

    #[test]
    fn keys_are_scoped_per_client() {
        let mut rx = MemoryReceiver::new(None);
        // A client that may push only as edge-* sends billing's key first.
        let a = accepted(push(
            &mut rx,
            &from("edge-evil", vec![item(1, "o-42", b"FORGED")]),
        ));
        assert_eq!(a.response.applied, 1);
        let a = accepted(push(
            &mut rx,
            &from("billing", vec![item(1, "o-42", b"REAL")]),
        ));
        assert_eq!((a.response.applied, a.deduplicated), (1, 0));
        assert_eq!(
            keys(&rx),
            [
                ("edge-evil:o-42".to_string(), "FORGED".to_string()),
                ("billing:o-42".to_string(), "REAL".to_string())
            ]
        );
        // The same client's key still dedups; an empty key stays empty.
        let a = accepted(push(
            &mut rx,
            &from(
                "billing",
                vec![item(2, "o-42", b"AGAIN"), item(3, "", b"nokey")],
            ),
        ));
        assert_eq!((a.response.applied, a.deduplicated), (2, 1));
        assert_eq!(keys(&rx)[2], (String::new(), "nokey".to_string()));
        // Client ids with ':' cannot borrow another client's scope.
        push(&mut rx, &from("a:b", vec![item(1, "c", b"1")]));
        let a = accepted(push(&mut rx, &from("a", vec![item(1, "b:c", b"2")])));
        assert_eq!(a.deduplicated, 0);
        assert_eq!(keys(&rx)[3].0, "a%3Ab:c");
        assert_eq!(keys(&rx)[4].0, "a:b:c");
    }

    #[test]
    fn shared_keys_keep_one_key_space() {
        let mut rx = MemoryReceiver::new(None);
        let shared = ReceiveLimits {
            shared_keys: true,
            ..limits()
        };
        apply_push(&mut rx, &from("x", vec![item(1, "k", b"X")]), &shared).unwrap();
        let o = apply_push(&mut rx, &from("y", vec![item(1, "k", b"Y")]), &shared).unwrap();
        assert_eq!(accepted(o).deduplicated, 1);
        assert_eq!(keys(&rx), [("k".to_string(), "X".to_string())]);
    }

    #[test]
    fn a_key_with_a_nul_byte_is_refused_and_keeps_no_digest() {
        let mut rx = MemoryReceiver::new(None);
        let limits = ReceiveLimits {
            max_key_len: 64,
            ..limits()
        };
        // The two entries the NUL byte would make indistinguishable.
        assert_eq!(wire::digest("a\0b", b"x"), wire::digest("a", b"b\0x"));
        let o = apply_push(
            &mut rx,
            &req(0, vec![item(1, "a\0b", b"x"), item(2, "a", b"b\0x")]),
            &limits,
        )
        .unwrap();
        let a = accepted(o);
        assert_eq!(
            (a.response.last_seq, a.response.applied, a.rejected),
            (2, 1, 1)
        );
        assert_eq!(
            a.response.rejected,
            vec![Rejected {
                seq: 1,
                error: "the idempotency key contains a NUL byte, which no key may contain".into()
            }]
        );
        assert_eq!(keys(&rx), [("edge-1:a".to_string(), "b\0x".to_string())]);
        assert_eq!(rx.ledger.digest(C, 1), None);
    }

    #[test]
    fn items_are_scoped_by_the_token_name() {
        let mut rx = MemoryReceiver::new(None);
        let l = limits();
        let stored = |o: ItemOutcome| match o {
            ItemOutcome::Enqueued(e) => e,
            other => panic!("{other:?}"),
        };
        let e = stored(apply_item(&mut rx, b"FORGED", "inv-7", Some("evil"), &l).unwrap());
        assert!(!e.deduplicated);
        let e = stored(apply_item(&mut rx, b"REAL", "inv-7", Some("billing"), &l).unwrap());
        assert!(!e.deduplicated, "another token's key does not dedup");
        let e = stored(apply_item(&mut rx, b"AGAIN", "inv-7", Some("billing"), &l).unwrap());
        assert!(e.deduplicated);
        // Without a token file there is no name: the key as given.
        stored(apply_item(&mut rx, b"LOCAL", "inv-7", None, &l).unwrap());
        let shared = ReceiveLimits {
            shared_keys: true,
            ..l
        };
        let e = stored(apply_item(&mut rx, b"SHARED", "inv-7", Some("other"), &shared).unwrap());
        assert!(e.deduplicated, "--shared-keys: the key as given");
        assert_eq!(
            keys(&rx).into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["evil:inv-7", "billing:inv-7", "inv-7"]
        );
        let before = rx.clone();
        assert_eq!(
            apply_item(&mut rx, b"x", "a\0b", Some("billing"), &l).unwrap(),
            ItemOutcome::Refused(
                "the Idempotency-Key header is refused: the idempotency key contains a NUL \
                 byte, which no key may contain"
                    .into()
            )
        );
        assert_eq!(rx, before);
        rx.set_max_depth(Some(3));
        assert_eq!(
            apply_item(&mut rx, b"x", "new", Some("billing"), &l).unwrap(),
            ItemOutcome::Full
        );
    }

    #[test]
    fn a_full_spool_stops_before_the_entry_that_does_not_fit() {
        let mut rx = MemoryReceiver::new(Some(2));
        let a = accepted(push(
            &mut rx,
            &req(0, vec![item(1, "a", b"p1"), text(2), text(3), text(4)]),
        ));
        assert_eq!(a.response.last_seq, 2, "partial batch, 200");
        assert_eq!(rx.ledger.client(C).unwrap().entries.len(), 2);
        // Nothing new fits: 503, nothing changed.
        let before = rx.clone();
        let o = push(&mut rx, &req(2, vec![text(3), text(4)]));
        assert_eq!(o, PushOutcome::Full { last_seq: 2 });
        assert_eq!(o.status(), 503);
        assert_eq!(rx, before);
        // Refusals, skips and dedup hits need no room.
        let a = accepted(push(
            &mut rx,
            &req(
                2,
                vec![
                    item(3, "", &[b'x'; 11]),
                    Entry::Skip { seq: 4 },
                    item(5, "a", b"again"),
                    text(6),
                ],
            ),
        ));
        assert_eq!(a.response.last_seq, 5);
        rx.take_pending();
        let a = accepted(push(&mut rx, &req(5, vec![text(6)])));
        assert_eq!(a.response.last_seq, 6);
    }

    #[test]
    fn a_dedup_hit_succeeds_on_a_full_spool() {
        let mut rx = MemoryReceiver::new(Some(1));
        push(&mut rx, &req(0, vec![item(1, "k", b"a")]));
        let a = accepted(push(&mut rx, &req(1, vec![item(2, "k", b"b")])));
        assert_eq!((a.response.last_seq, a.deduplicated), (2, 1));
    }

    #[test]
    fn rejects_are_reported_until_acknowledged() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(&mut rx, &req(0, vec![text(1), item(2, "", &[0; 11])])));
        assert_eq!(a.response.rejected.len(), 1);
        // The answer was lost; the client resends with acked 0.
        let a = accepted(push(&mut rx, &req(0, vec![text(1), item(2, "", &[0; 11])])));
        assert_eq!(a.response.rejected.len(), 1, "reported again");
        // Later batches keep reporting it while acked < 2.
        let a = accepted(push(&mut rx, &req(1, vec![text(3)])));
        assert_eq!(a.response.rejected[0].seq, 2);
        // Acknowledged: forgotten.
        let a = accepted(push(&mut rx, &req(3, vec![])));
        assert!(a.response.rejected.is_empty());
        assert!(rx.ledger.client(C).unwrap().rejects.is_empty());
        assert!(
            rx.ledger.digest(C, 2).is_some(),
            "the digest of a refused entry outlives the reject"
        );
    }

    #[test]
    fn acked_is_clamped_to_last_seq_before_the_request() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![item(1, "", &[0; 11]), text(2)]));
        // A client acknowledging far more than it was told: the reject at
        // 1 may go, the one this request creates at 3 may not.
        let a = accepted(push(&mut rx, &req(1_000, vec![item(3, "", &[0; 11])])));
        assert_eq!(
            a.response.rejected,
            vec![Rejected {
                seq: 3,
                error: "payload of 11 bytes is over the receiver's limit of 10 bytes".into()
            }]
        );
        assert_eq!(
            rx.ledger
                .client(C)
                .unwrap()
                .rejects
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [3]
        );
    }

    #[test]
    fn duplicates_without_comparable_content_are_not_conflicts() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), Entry::Skip { seq: 2 }]));
        // done --force on an item the receiver had applied: its number
        // comes again as a skip.
        let a = accepted(push(&mut rx, &req(0, vec![Entry::Skip { seq: 1 }])));
        assert_eq!(a.response.duplicates, 1);
        // An item where a skip was recorded: nothing to compare.
        let a = accepted(push(&mut rx, &req(0, vec![item(2, "", b"z")])));
        assert_eq!(a.response.duplicates, 1);
        // A refusal whose digest could not be verified keeps none.
        let mut bad = item(3, "", b"x");
        if let Entry::Item(e) = &mut bad {
            e.digest = wire::digest("", b"y");
        }
        push(&mut rx, &req(0, vec![bad]));
        assert_eq!(rx.ledger.digest(C, 3), None);
        let a = accepted(push(&mut rx, &req(0, vec![item(3, "", b"x")])));
        assert_eq!(a.response.duplicates, 1);
        // A refusal with a verified digest keeps it: other content is a
        // conflict.
        push(&mut rx, &req(0, vec![item(4, "", &[1; 11])]));
        assert_eq!(
            push(&mut rx, &req(0, vec![item(4, "", &[2; 11])])).status(),
            409
        );
        assert_eq!(
            push(&mut rx, &req(0, vec![item(4, "", &[1; 11])])).status(),
            200
        );
    }

    #[test]
    fn requests_built_in_code_must_be_contiguous() {
        let mut rx = MemoryReceiver::new(None);
        for entries in [
            vec![text(1), text(3)],
            vec![text(2), text(1)],
            vec![text(0)],
        ] {
            let e = apply_push(&mut rx, &req(0, entries), &limits()).unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        }
        assert_eq!(rx, MemoryReceiver::new(None));
    }

    #[test]
    fn clients_are_independent_and_their_state_can_be_read() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), item(2, "", &[0; 11])]));
        let other = PushRequest {
            client_id: "edge-2".into(),
            acked: 0,
            entries: vec![text(1)],
        };
        let a = accepted(push(&mut rx, &other));
        assert_eq!((a.response.last_seq, a.response.applied), (1, 1));
        let state = client_state(&mut rx, C).unwrap();
        assert_eq!(state.last_seq, 2);
        assert_eq!(state.rejected.len(), 1);
        assert_eq!(
            String::from_utf8(state.to_json()).unwrap(),
            r#"{"last_seq":2,"rejected":[{"seq":2,"error":"payload of 11 bytes is over the receiver's limit of 10 bytes"}]}"#
        );
        assert_eq!(
            client_state(&mut rx, "nobody").unwrap(),
            ClientState::default()
        );
    }

    #[test]
    fn an_empty_request_reports_where_the_receiver_stands() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), text(2)]));
        let a = accepted(push(&mut rx, &req(2, vec![])));
        assert_eq!(a.response.last_seq, 2);
        let o = push(
            &mut rx,
            &PushRequest {
                client_id: "new".into(),
                acked: 0,
                entries: vec![],
            },
        );
        assert_eq!(accepted(o).response.last_seq, 0);
    }

    #[test]
    fn answers_have_the_spec_bodies() {
        let full = PushOutcome::Full { last_seq: 3 };
        let v: serde_json::Value = serde_json::from_slice(&full.body()).unwrap();
        assert!(v["error"].as_str().unwrap().contains("full"));
        let mut rx = MemoryReceiver::new(None);
        let o = push(&mut rx, &req(0, vec![text(1)]));
        assert_eq!(
            String::from_utf8(o.body()).unwrap(),
            r#"{"last_seq":1,"rejected":[],"applied":1,"duplicates":0}"#
        );
    }
}
