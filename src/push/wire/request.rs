//! A push request as the receiver sees it: [`PushRequest`] and its
//! entries.

/// A push request, as the receiver sees it after
/// [`parse_request`](super::parse_request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushRequest {
    /// The sending spool's identity (its uuid, for `spool` senders).
    pub client_id: String,
    /// The highest sequence number the client has seen acknowledged.
    pub acked: u64,
    /// The entries, in ascending, contiguous `seq` order (guaranteed by
    /// [`parse_request`](super::parse_request);
    /// [`super::receiver::apply_push`](crate::push::receiver::apply_push)
    /// checks it again for requests built in code).
    pub entries: Vec<Entry>,
}

/// One entry of a push request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// An item to enqueue at the receiver. Boxed so that a batch of skip
    /// entries stays small.
    Item(Box<ItemEntry>),
    /// A sequence number the client abandoned (its item was removed by an
    /// operator): the receiver advances past it and applies nothing.
    Skip {
        /// The abandoned sequence number.
        seq: u64,
    },
}

impl Entry {
    /// The entry's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            Entry::Item(item) => item.seq,
            Entry::Skip { seq } => *seq,
        }
    }
}

/// An item entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemEntry {
    /// The sequence number the client assigned.
    pub seq: u64,
    /// The item's id in the sending spool (for people reading logs; the
    /// receiver assigns its own).
    pub id: u64,
    /// The idempotency key, `""` for none.
    pub key: String,
    /// The payload, decoded, or the base64 text that did not decode.
    pub payload: Payload,
    /// When the item was enqueued at the client (RFC 3339), as sent;
    /// `None` when left out or `null`.
    pub enqueued_at: Option<String>,
    /// The digest the client sent; well-formed (see
    /// [`is_well_formed_digest`](super::is_well_formed_digest)) but not yet checked against key and
    /// payload.
    pub digest: String,
    /// The item's ordering group at the client; `None` when left out,
    /// `null` or empty.
    pub group: Option<String>,
    /// The item's coalesce key at the client; `None` when left out,
    /// `null` or empty.
    pub coalesce_key: Option<String>,
}

/// The payload of an item entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// The payload bytes (from `payload`, or decoded from
    /// `payload_base64`).
    Bytes(Vec<u8>),
    /// `payload_base64` that is not valid base64. The receiver refuses the
    /// entry with `reason`; `base64` is the text as received.
    Undecodable {
        /// The text of `payload_base64`.
        base64: String,
        /// Why it does not decode, one line.
        reason: String,
    },
}
