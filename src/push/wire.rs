//! The bytes of the push protocol: request and response bodies, strictly
//! parsed on the receiving side and leniently on the sending side.
//!
//! A request body is one JSON object:
//!
//! ```json
//! {"client_id": "<spool uuid>", "acked": 41,
//!  "entries": [{"seq": 42, "id": 97, "key": "order-7", "payload": "…",
//!               "enqueued_at": "2026-12-01T10:00:00Z", "digest": "sha256:…"},
//!              {"seq": 43, "id": 98, "key": "", "payload_base64": "AAE=",
//!               "enqueued_at": null, "digest": "sha256:…"},
//!              {"seq": 44, "skip": true}]}
//! ```
//!
//! [`parse_request`] is the receiver's gate. Everything that makes the
//! body *malformed* is a [`BadRequest`] (HTTP 400, nothing applied), with
//! a one-line message that names the problem and, inside `entries`, the
//! index of the entry:
//!
//! * not UTF-8 where JSON needs it, not JSON, not an object, trailing data;
//! * an unknown or duplicated field, anywhere; a field of the wrong type,
//!   `null` where a value is required, a negative number, a fraction, a
//!   number above `u64::MAX`;
//! * a missing `client_id` or `entries`; a `client_id` that is not 1 to
//!   128 characters of `A-Z a-z 0-9 . _ : -`;
//! * an entry without `seq`; `seq` 0; entries not in ascending, contiguous
//!   `seq` order;
//! * a skip entry with anything besides `seq` and `skip`, or `skip` other
//!   than `true`;
//! * an item entry without `id` or `digest`, with both or neither of
//!   `payload` and `payload_base64`, or with a `digest` that is not
//!   `sha256:` and 64 lowercase hex digits.
//!
//! What is *not* a 400: an item entry whose `payload_base64` does not
//! decode, or whose digest does not match its key and payload. The body
//! is well-formed and the entry has a sequence number, so the receiver
//! refuses that one entry (it is recorded as rejected and `last_seq`
//! moves past it); [`Payload::Undecodable`] keeps the text for that.
//! Whether a key or payload is too large, or a key holds a NUL byte, is
//! the receiver's policy, not the format's; see [`super::receiver`].
//!
//! Decisions this module makes where §7 is silent:
//!
//! * `acked` may be left out and means 0; `key` may be left out and means
//!   `""`; `enqueued_at` may be left out or `null`. Every other field of
//!   the example is required.
//! * `enqueued_at` is carried as text and not interpreted: the receiving
//!   spool stamps its own enqueue time, as it does for any enqueue.
//! * An empty `entries` array is valid: it is how a sender reports its
//!   `acked` watermark (letting the receiver forget acknowledged rejects)
//!   or asks for the current `last_seq` without sending anything.
//! * Base64 is the standard alphabet with padding, as in the item JSON of
//!   §3 and `enqueue --ndjson`.
//!
//! No input panics the parser: serde_json bounds nesting depth and the
//! visitors here never index or unwrap. Memory is proportional to the
//! body (an entry costs 16 bytes plus its item, if any).
//!
//! The sending side writes bodies with [`encode_request`] (from borrowed
//! items, computing digests) or [`PushRequest::encode`], and reads
//! answers with [`parse_response`] and [`parse_error_body`], which ignore
//! fields they do not know so that a newer receiver can add some.

use crate::time::Timestamp;
use base64::Engine as _;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use sha2::{Digest as _, Sha256};
use std::borrow::Cow;
use std::fmt;

/// The longest `client_id` a receiver accepts, in characters.
pub const MAX_CLIENT_ID_LEN: usize = 128;

/// The longest error message this module produces, in bytes; longer
/// texts (an unknown field name of a megabyte, say) are cut.
const MAX_MESSAGE_LEN: usize = 300;

/// The length of a digest in its one accepted form: `sha256:` + 64 hex.
const DIGEST_LEN: usize = 7 + 64;

/// The digest of an entry: `sha256:` followed by the 64 lowercase hex
/// digits of SHA-256 over the key's UTF-8 bytes, one `0x00` byte, and the
/// payload bytes.
///
/// The zero byte keeps key and payload apart: `("ab", "c")` and
/// `("a", "bc")` have different digests. It can do so because no key
/// holds a NUL byte ([`crate::item::key_problem`]): the receiver refuses
/// an entry whose key does, since `("a\0b", "x")` and `("a", "b\0x")`
/// would share a digest.
///
/// ```
/// assert_eq!(
///     spool::push::wire::digest("", b""),
///     "sha256:6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
/// );
/// ```
pub fn digest(key: &str, payload: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0u8]);
    h.update(payload);
    let mut out = String::with_capacity(DIGEST_LEN);
    out.push_str("sha256:");
    for b in h.finalize() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

/// True when `s` has the one form a digest may take on the wire.
pub fn is_well_formed_digest(s: &str) -> bool {
    s.len() == DIGEST_LEN
        && s.starts_with("sha256:")
        && s.bytes()
            .skip(7)
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A push request, as the receiver sees it after [`parse_request`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushRequest {
    /// The sending spool's identity (its uuid, for `spool` senders).
    pub client_id: String,
    /// The highest sequence number the client has seen acknowledged.
    pub acked: u64,
    /// The entries, in ascending, contiguous `seq` order (guaranteed by
    /// [`parse_request`]; [`super::receiver::apply_push`] checks it again
    /// for requests built in code).
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
    /// [`is_well_formed_digest`]) but not yet checked against key and
    /// payload.
    pub digest: String,
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

/// A body that is not a valid push request: HTTP 400, nothing applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRequest {
    message: String,
}

impl BadRequest {
    fn new(message: &str) -> BadRequest {
        BadRequest {
            message: one_line(message),
        }
    }

    /// What is wrong, one line.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The `{"error": "…"}` body of the 400 answer.
    pub fn to_body(&self) -> Vec<u8> {
        ErrorBody::new(self.message.clone()).to_json()
    }
}

impl fmt::Display for BadRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed push request: {}", self.message)
    }
}

impl std::error::Error for BadRequest {}

/// Check a client id: 1 to [`MAX_CLIENT_ID_LEN`] characters of
/// `A-Z a-z 0-9 . _ : -`. The receiver uses it for ids from the request
/// body and from the `GET /v1/clients/{client_id}` path alike.
pub fn validate_client_id(id: &str) -> Result<(), BadRequest> {
    client_id_problem(id).map_or(Ok(()), |m| Err(BadRequest::new(&m)))
}

fn client_id_problem(id: &str) -> Option<String> {
    let ok = !id.is_empty()
        && id.len() <= MAX_CLIENT_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    (!ok).then(|| {
        format!(
            "client_id must be 1 to {MAX_CLIENT_ID_LEN} characters of A-Z a-z 0-9 . _ : - \
             (got {} bytes)",
            id.len()
        )
    })
}

/// Parse and check a push request body (see the module docs for what is
/// refused). Never panics, whatever the bytes.
pub fn parse_request(body: &[u8]) -> Result<PushRequest, BadRequest> {
    serde_json::from_slice::<RequestDe>(body)
        .map(|r| r.0)
        .map_err(|e| BadRequest::new(&e.to_string()))
}

/// Make `s` one line of at most [`MAX_MESSAGE_LEN`] bytes: control
/// characters are escaped, the rest cut with an ellipsis.
fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len().min(MAX_MESSAGE_LEN + 3));
    for c in s.chars() {
        if out.len() >= MAX_MESSAGE_LEN {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Drop serde_json's " at line L column C" suffix from an inner error
/// that is about to be wrapped (the outer error gets its own position).
fn strip_position(msg: &str) -> &str {
    if let Some(i) = msg.rfind(" at line ") {
        if let Some((line, col)) = msg[i + 9..].split_once(" column ") {
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            if digits(line) && digits(col) {
                return &msg[..i];
            }
        }
    }
    msg
}

fn wrap<E: de::Error>(prefix: fmt::Arguments<'_>, inner: &E) -> E {
    E::custom(format_args!(
        "{prefix}: {}",
        strip_position(&inner.to_string())
    ))
}

/// Read the value of `field`, naming the field in any error.
fn value<'de, T: Deserialize<'de>, A: MapAccess<'de>>(
    map: &mut A,
    field: &str,
) -> Result<T, A::Error> {
    map.next_value::<T>()
        .map_err(|e| wrap(format_args!("{field}"), &e))
}

fn put<T, E: de::Error>(slot: &mut Option<T>, field: &str, v: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom(format_args!("duplicate field \"{field}\"")));
    }
    *slot = Some(v);
    Ok(())
}

fn missing<E: de::Error>(field: &str) -> E {
    E::custom(format_args!("missing field \"{field}\""))
}

/// The request body, deserialized only from a JSON object (a derived
/// struct would also accept an array of its fields in order).
struct RequestDe(PushRequest);

impl<'de> Deserialize<'de> for RequestDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RequestVisitor)
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = RequestDe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a push request object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestDe, A::Error> {
        let mut client_id: Option<String> = None;
        let mut acked: Option<u64> = None;
        let mut entries: Option<Vec<Entry>> = None;
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "client_id" => {
                    let id: String = value(&mut map, "client_id")?;
                    if let Some(problem) = client_id_problem(&id) {
                        return Err(de::Error::custom(problem));
                    }
                    put(&mut client_id, "client_id", id)?;
                }
                "acked" => put(&mut acked, "acked", value(&mut map, "acked")?)?,
                "entries" => {
                    // Errors inside name the entry themselves.
                    let list = map.next_value::<EntriesDe>()?.0;
                    put(&mut entries, "entries", list)?;
                }
                other => {
                    return Err(de::Error::custom(format_args!(
                        "unknown field {other:?} (a push request has client_id, acked, entries)"
                    )))
                }
            }
        }
        Ok(RequestDe(PushRequest {
            client_id: client_id.ok_or_else(|| missing("client_id"))?,
            acked: acked.unwrap_or(0),
            entries: entries.ok_or_else(|| missing("entries"))?,
        }))
    }
}

struct EntriesDe(Vec<Entry>);

impl<'de> Deserialize<'de> for EntriesDe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(EntriesVisitor)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = EntriesDe;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"entries\" as an array of entry objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EntriesDe, A::Error> {
        // No size_hint: the input decides the length, not a claim in it.
        let mut out: Vec<Entry> = Vec::new();
        loop {
            let i = out.len();
            let entry = match seq.next_element_seed(EntrySeed) {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => return Err(wrap(format_args!("entries[{i}]"), &e)),
            };
            let s = entry.seq();
            match out.last().map(Entry::seq) {
                None if s == 0 => {
                    return Err(de::Error::custom("entries[0]: seq must be at least 1"));
                }
                Some(prev) if prev.checked_add(1) != Some(s) => {
                    return Err(de::Error::custom(format_args!(
                        "entries[{i}]: seq {s} does not follow {prev}: entries must be in \
                         ascending, contiguous seq order"
                    )));
                }
                _ => {}
            }
            out.push(entry);
        }
        Ok(EntriesDe(out))
    }
}

struct EntrySeed;

impl<'de> DeserializeSeed<'de> for EntrySeed {
    type Value = Entry;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Entry, D::Error> {
        d.deserialize_map(EntryVisitor)
    }
}

/// The fields of one entry object as they arrive, before the entry's
/// kind decides which of them are allowed.
#[derive(Default)]
struct EntryFields {
    seq: Option<u64>,
    skip: Option<bool>,
    id: Option<u64>,
    key: Option<String>,
    payload: Option<String>,
    payload_base64: Option<String>,
    enqueued_at: Option<Option<String>>,
    digest: Option<String>,
}

impl EntryFields {
    /// The first field present that a skip entry may not have.
    fn item_field(&self) -> Option<&'static str> {
        [
            ("id", self.id.is_some()),
            ("key", self.key.is_some()),
            ("payload", self.payload.is_some()),
            ("payload_base64", self.payload_base64.is_some()),
            ("enqueued_at", self.enqueued_at.is_some()),
            ("digest", self.digest.is_some()),
        ]
        .into_iter()
        .find_map(|(name, present)| present.then_some(name))
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an entry object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let mut f = EntryFields::default();
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "seq" => put(&mut f.seq, "seq", value(&mut map, "seq")?)?,
                "skip" => put(&mut f.skip, "skip", value(&mut map, "skip")?)?,
                "id" => put(&mut f.id, "id", value(&mut map, "id")?)?,
                "key" => put(&mut f.key, "key", value(&mut map, "key")?)?,
                "payload" => put(&mut f.payload, "payload", value(&mut map, "payload")?)?,
                "payload_base64" => put(
                    &mut f.payload_base64,
                    "payload_base64",
                    value(&mut map, "payload_base64")?,
                )?,
                "enqueued_at" => put(
                    &mut f.enqueued_at,
                    "enqueued_at",
                    value(&mut map, "enqueued_at")?,
                )?,
                "digest" => put(&mut f.digest, "digest", value(&mut map, "digest")?)?,
                other => {
                    return Err(de::Error::custom(format_args!(
                        "unknown field {other:?} (an entry has seq, skip, id, key, payload, \
                         payload_base64, enqueued_at, digest)"
                    )))
                }
            }
        }
        build_entry(f)
    }
}

fn build_entry<E: de::Error>(f: EntryFields) -> Result<Entry, E> {
    let seq = f.seq.ok_or_else(|| missing("seq"))?;
    match f.skip {
        Some(true) => {
            if let Some(field) = f.item_field() {
                return Err(E::custom(format_args!(
                    "a skip entry has only \"seq\" and \"skip\", not {field:?}"
                )));
            }
            return Ok(Entry::Skip { seq });
        }
        Some(false) => {
            return Err(E::custom(
                "\"skip\" must be true (leave it out for an item entry)",
            ))
        }
        None => {}
    }
    let id = f.id.ok_or_else(|| missing("id"))?;
    let digest = f.digest.ok_or_else(|| missing("digest"))?;
    if !is_well_formed_digest(&digest) {
        return Err(E::custom(
            "\"digest\" must be \"sha256:\" followed by 64 lowercase hex digits",
        ));
    }
    let payload = match (f.payload, f.payload_base64) {
        (Some(text), None) => Payload::Bytes(text.into_bytes()),
        (None, Some(b64)) => decode_base64(b64),
        (Some(_), Some(_)) => {
            return Err(E::custom(
                "has both \"payload\" and \"payload_base64\"; give exactly one",
            ))
        }
        (None, None) => return Err(E::custom("has neither \"payload\" nor \"payload_base64\"")),
    };
    Ok(Entry::Item(Box::new(ItemEntry {
        seq,
        id,
        key: f.key.unwrap_or_default(),
        payload,
        enqueued_at: f.enqueued_at.flatten(),
        digest,
    })))
}

/// Decode `payload_base64`, keeping the text when it does not decode.
fn decode_base64(b64: String) -> Payload {
    match base64::engine::general_purpose::STANDARD.decode(&b64) {
        Ok(bytes) => Payload::Bytes(bytes),
        Err(e) => Payload::Undecodable {
            reason: one_line(&format!("invalid payload_base64: {e}")),
            base64: b64,
        },
    }
}

/// An entry as a sender puts it on the wire, borrowing the item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutEntry<'a> {
    /// An item; [`encode_request`] computes its digest.
    Item {
        /// Its sequence number.
        seq: u64,
        /// Its id in the sending spool.
        id: u64,
        /// Its idempotency key, `""` for none.
        key: &'a str,
        /// Its payload bytes.
        payload: &'a [u8],
        /// When it was enqueued (`null` on the wire when unknown).
        enqueued_at: Option<Timestamp>,
    },
    /// An abandoned sequence number.
    Skip {
        /// The sequence number.
        seq: u64,
    },
}

impl OutEntry<'_> {
    /// The entry's sequence number.
    pub fn seq(&self) -> u64 {
        match self {
            OutEntry::Item { seq, .. } | OutEntry::Skip { seq } => *seq,
        }
    }
}

/// One entry in the order and shape it is written.
#[derive(Serialize)]
#[serde(untagged)]
enum WireEntry<'a> {
    Item {
        seq: u64,
        id: u64,
        key: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        payload: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        payload_base64: Option<Cow<'a, str>>,
        enqueued_at: Option<Cow<'a, str>>,
        digest: Cow<'a, str>,
    },
    Skip {
        seq: u64,
        skip: bool,
    },
}

/// `payload` when the bytes are UTF-8, else `payload_base64` (§3).
fn payload_fields(bytes: &[u8]) -> (Option<&str>, Option<Cow<'_, str>>) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (Some(text), None),
        Err(_) => (
            None,
            Some(Cow::Owned(
                base64::engine::general_purpose::STANDARD.encode(bytes),
            )),
        ),
    }
}

#[derive(Serialize)]
struct WireRequest<'a> {
    client_id: &'a str,
    acked: u64,
    entries: Vec<WireEntry<'a>>,
}

fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these types cannot fail: strings, numbers, bools, null,
    // arrays and objects with string keys.
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

/// Write a request body from borrowed items: the sender's path. Each item
/// entry gets its [`digest`]; its payload goes out as `payload` when it
/// is valid UTF-8 and as `payload_base64` otherwise.
///
/// The caller is responsible for the entries being in ascending,
/// contiguous `seq` order (an [`super::sender::Outbox`] hands them out
/// that way); a receiver refuses anything else with 400.
pub fn encode_request(client_id: &str, acked: u64, entries: &[OutEntry<'_>]) -> Vec<u8> {
    let entries = entries
        .iter()
        .map(|e| wire_entry(e, |key, payload| Cow::Owned(digest(key, payload))))
        .collect();
    to_json(&WireRequest {
        client_id,
        acked,
        entries,
    })
}

/// An outgoing entry in its written shape, with the digest `digest_of`
/// gives for its key and payload.
fn wire_entry<'a>(
    e: &OutEntry<'a>,
    digest_of: impl FnOnce(&'a str, &'a [u8]) -> Cow<'a, str>,
) -> WireEntry<'a> {
    match *e {
        OutEntry::Item {
            seq,
            id,
            key,
            payload,
            enqueued_at,
        } => {
            let (text, b64) = payload_fields(payload);
            WireEntry::Item {
                seq,
                id,
                key,
                payload: text,
                payload_base64: b64,
                enqueued_at: enqueued_at.map(|t| Cow::Owned(t.to_rfc3339())),
                digest: digest_of(key, payload),
            }
        }
        OutEntry::Skip { seq } => WireEntry::Skip { seq, skip: true },
    }
}

/// Counts the bytes a serializer writes.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn json_len<T: Serialize>(value: &T) -> usize {
    let mut c = Counter(0);
    // As in `to_json`, these types always serialize.
    let _ = serde_json::to_writer(&mut c, value);
    c.0
}

/// The exact number of bytes `entry` takes in a body written by
/// [`encode_request`], without hashing its payload. A sender fills a
/// batch up to a byte budget with it:
///
/// ```
/// use spool::push::wire::{encode_request, encoded_entry_len, request_overhead, OutEntry};
///
/// let entries = [
///     OutEntry::Item { seq: 7, id: 3, key: "k", payload: b"\x00\xff", enqueued_at: None },
///     OutEntry::Skip { seq: 8 },
/// ];
/// let total: usize = entries.iter().map(encoded_entry_len).sum();
/// assert_eq!(
///     encode_request("edge-1", 6, &entries).len(),
///     request_overhead("edge-1", 6, entries.len()) + total
/// );
/// ```
pub fn encoded_entry_len(entry: &OutEntry<'_>) -> usize {
    // Every digest has the same length, so a placeholder measures it.
    const PLACEHOLDER: &str =
        "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    json_len(&wire_entry(entry, |_, _| Cow::Borrowed(PLACEHOLDER)))
}

/// The bytes of a request body besides its entries' own: the envelope
/// and the commas between `entries` entries (see [`encoded_entry_len`]).
pub fn request_overhead(client_id: &str, acked: u64, entries: usize) -> usize {
    json_len(&WireRequest {
        client_id,
        acked,
        entries: Vec::new(),
    }) + entries.saturating_sub(1)
}

impl PushRequest {
    /// Write this request as a body, keeping every field as it is (the
    /// digest is not recomputed; an undecodable payload goes out as the
    /// same `payload_base64` text). `parse_request(&r.encode()) == Ok(r)`
    /// for every request that `parse_request` can return.
    pub fn encode(&self) -> Vec<u8> {
        let entries = self
            .entries
            .iter()
            .map(|e| match e {
                Entry::Item(item) => {
                    let (text, b64) = match &item.payload {
                        Payload::Bytes(bytes) => payload_fields(bytes),
                        Payload::Undecodable { base64, .. } => {
                            (None, Some(Cow::Borrowed(&**base64)))
                        }
                    };
                    WireEntry::Item {
                        seq: item.seq,
                        id: item.id,
                        key: &item.key,
                        payload: text,
                        payload_base64: b64,
                        enqueued_at: item.enqueued_at.as_deref().map(Cow::Borrowed),
                        digest: Cow::Borrowed(&item.digest),
                    }
                }
                Entry::Skip { seq } => WireEntry::Skip {
                    seq: *seq,
                    skip: true,
                },
            })
            .collect();
        to_json(&WireRequest {
            client_id: &self.client_id,
            acked: self.acked,
            entries,
        })
    }
}

/// One refused entry, as the receiver reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// The entry's sequence number.
    pub seq: u64,
    /// Why it was refused, one line.
    pub error: String,
}

/// The body of a `200` answer to a push.
///
/// Parsed leniently ([`parse_response`]): unknown fields are ignored and
/// `rejected`, `applied`, `duplicates` default to empty and 0, so a
/// receiver may add fields without breaking older senders.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushResponse {
    /// The highest sequence number the receiver has processed for this
    /// client (applied, rejected or skipped). Never decreases.
    pub last_seq: u64,
    /// Every recorded reject with `acked < seq <= last_seq`, ascending.
    #[serde(default)]
    pub rejected: Vec<Rejected>,
    /// Entries of this request that were enqueued (dedup hits included).
    #[serde(default)]
    pub applied: u64,
    /// Entries of this request at or below the previous `last_seq`.
    #[serde(default)]
    pub duplicates: u64,
}

impl PushResponse {
    /// The body bytes.
    pub fn to_json(&self) -> Vec<u8> {
        to_json(self)
    }
}

/// Parse a `200` body (leniently; see [`PushResponse`]).
pub fn parse_response(body: &[u8]) -> Result<PushResponse, String> {
    serde_json::from_slice(body).map_err(|e| one_line(&e.to_string()))
}

/// The body of every error answer: `{"error": "…"}`, plus `last_seq` on a
/// `409`, so that the sender knows where the receiver stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, one line.
    pub error: String,
    /// The client's `last_seq` at the receiver (409 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seq: Option<u64>,
}

impl ErrorBody {
    /// An error body without `last_seq`.
    pub fn new(error: impl Into<String>) -> ErrorBody {
        ErrorBody {
            error: error.into(),
            last_seq: None,
        }
    }

    /// The body bytes.
    pub fn to_json(&self) -> Vec<u8> {
        to_json(self)
    }
}

/// Parse an error body leniently (unknown fields ignored).
pub fn parse_error_body(body: &[u8]) -> Result<ErrorBody, String> {
    serde_json::from_slice(body).map_err(|e| one_line(&e.to_string()))
}

/// The answer to `GET /v1/clients/{client_id}`: where the receiver
/// stands for one client, and the rejects it has not seen acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClientState {
    /// The client's `last_seq` (0 for a client never seen).
    pub last_seq: u64,
    /// Recorded rejects above the client's last `acked`, ascending.
    #[serde(default)]
    pub rejected: Vec<Rejected>,
}

impl ClientState {
    /// The body bytes.
    pub fn to_json(&self) -> Vec<u8> {
        to_json(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bad(body: &str) -> String {
        match parse_request(body.as_bytes()) {
            Err(e) => e.message().to_string(),
            Ok(r) => panic!("accepted {body}: {r:?}"),
        }
    }

    const D: &str = "sha256:6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d";

    fn item(seq: u64, payload: &str) -> String {
        format!(r#"{{"seq":{seq},"id":{seq},"key":"","payload":"{payload}","digest":"{D}"}}"#)
    }

    fn body(entries: &[String]) -> String {
        format!(
            r#"{{"client_id":"c-1","acked":0,"entries":[{}]}}"#,
            entries.join(",")
        )
    }

    #[test]
    fn digest_test_vectors() {
        // sha256 of the single byte 0x00.
        assert_eq!(digest("", b""), D);
        // printf 'order-7\0hello' | sha256sum
        assert_eq!(
            digest("order-7", b"hello"),
            "sha256:2cdbf6d71067c493f43f4b5072c0d0353ac7392b6c7da9440c97207595bc6486"
        );
        // printf 'k\0\xff\x00' | sha256sum
        assert_eq!(
            digest("k", b"\xff\x00"),
            "sha256:e7b82bc6304a6c41afdc9960a1757422b672cb2b744e243b538b4684477bf0c9"
        );
        assert_ne!(digest("ab", b"c"), digest("a", b"bc"));
        assert!(is_well_formed_digest(&digest("x", b"y")));
        assert!(!is_well_formed_digest(&D.to_uppercase()));
        assert!(!is_well_formed_digest(&D[..70]));
    }

    #[test]
    fn the_spec_example_parses() {
        let b64 = digest("", b"\x00\x01");
        let text = format!(
            r#"{{"client_id": "0b7c6a1e-8d44-4c1f-9f0e-3a2b1c0d9e8f", "acked": 41,
              "entries": [{{"seq": 42, "id": 97, "key": "order-7", "payload": "hello",
                            "enqueued_at": "2026-12-01T10:00:00Z", "digest": "{}"}},
                          {{"seq": 43, "id": 98, "key": "", "payload_base64": "AAE=",
                            "enqueued_at": null, "digest": "{b64}"}},
                          {{"seq": 44, "skip": true}}]}}"#,
            digest("order-7", b"hello")
        );
        let r = parse_request(text.as_bytes()).unwrap();
        assert_eq!(r.client_id, "0b7c6a1e-8d44-4c1f-9f0e-3a2b1c0d9e8f");
        assert_eq!(r.acked, 41);
        assert_eq!(r.entries.len(), 3);
        let Entry::Item(first) = &r.entries[0] else {
            panic!()
        };
        assert_eq!(first.payload, Payload::Bytes(b"hello".to_vec()));
        assert_eq!(first.enqueued_at.as_deref(), Some("2026-12-01T10:00:00Z"));
        let Entry::Item(second) = &r.entries[1] else {
            panic!()
        };
        assert_eq!(second.payload, Payload::Bytes(vec![0, 1]));
        assert_eq!(second.enqueued_at, None);
        assert_eq!(r.entries[2], Entry::Skip { seq: 44 });
    }

    #[test]
    fn defaults_for_acked_key_and_enqueued_at() {
        let text = format!(
            r#"{{"client_id":"c","entries":[{{"seq":1,"id":1,"payload":"","digest":"{D}"}}]}}"#
        );
        let r = parse_request(text.as_bytes()).unwrap();
        assert_eq!(r.acked, 0);
        let Entry::Item(e) = &r.entries[0] else {
            panic!()
        };
        assert_eq!(e.key, "");
        assert_eq!(e.enqueued_at, None);
        let empty = parse_request(br#"{"client_id":"c","entries":[]}"#).unwrap();
        assert!(empty.entries.is_empty());
    }

    #[test]
    fn unknown_fields_are_named_wherever_they_are() {
        assert!(bad(r#"{"client_id":"c","entries":[],"extra":1}"#)
            .starts_with("unknown field \"extra\""));
        let m = bad(&body(&[
            item(1, "a"),
            format!(r#"{{"seq":2,"id":2,"payload":"","digest":"{D}","colour":"red"}}"#),
        ]));
        assert!(m.starts_with("entries[1]: unknown field \"colour\""), "{m}");
        let m = bad(&body(&[r#"{"seq":1,"skip":true,"note":"x"}"#.into()]));
        assert!(m.contains("entries[0]: unknown field \"note\""), "{m}");
    }

    #[test]
    fn wrong_types_and_numbers_are_400() {
        for (text, needle) in [
            (
                r#"{"client_id":"c","acked":-1,"entries":[]}"#,
                "acked: invalid value: integer `-1`",
            ),
            (
                r#"{"client_id":"c","acked":1.5,"entries":[]}"#,
                "acked: invalid type: floating point",
            ),
            (
                r#"{"client_id":"c","acked":18446744073709551616,"entries":[]}"#,
                "acked: invalid type",
            ),
            (
                r#"{"client_id":"c","acked":"1","entries":[]}"#,
                "acked: invalid type: string",
            ),
            (
                r#"{"client_id":"c","acked":null,"entries":[]}"#,
                "acked: invalid type: null",
            ),
            (
                r#"{"client_id":7,"entries":[]}"#,
                "client_id: invalid type: integer",
            ),
            (
                r#"{"client_id":"c","entries":{}}"#,
                "expected \"entries\" as an array",
            ),
            (
                r#"{"client_id":"c","entries":[1]}"#,
                "entries[0]: invalid type: integer `1`, expected an entry object",
            ),
            (r#"["c",0,[]]"#, "expected a push request object"),
            (
                r#"{"client_id":"c","entries":[{"seq":-3,"skip":true}]}"#,
                "entries[0]: seq: invalid value",
            ),
            (
                r#"{"client_id":"c","entries":[{"seq":1,"skip":"yes"}]}"#,
                "entries[0]: skip: invalid type",
            ),
            (
                r#"{"client_id":"c","entries":[{"seq":1,"skip":null}]}"#,
                "entries[0]: skip: invalid type: null",
            ),
            ("", "EOF while parsing"),
            ("nul", "EOF while parsing"),
            (r#"{"client_id":"c","entries":[]} x"#, "trailing characters"),
        ] {
            let m = bad(text);
            assert!(m.contains(needle), "{text}: {m}");
        }
        let m = bad(&body(&[format!(
            r#"{{"seq":1,"id":1,"key":null,"payload":"","digest":"{D}"}}"#
        )]));
        assert!(m.contains("entries[0]: key: invalid type: null"), "{m}");
    }

    #[test]
    fn invalid_utf8_is_400() {
        let mut b = body(&[item(1, "XX")]).into_bytes();
        let at = b.windows(2).position(|w| w == b"XX").unwrap();
        b[at] = 0xff;
        let e = parse_request(&b).unwrap_err();
        assert!(e.message().contains("invalid unicode"), "{e}");
        assert!(parse_request(b"\xff{}").is_err());
        // A lone surrogate escape is not a string either.
        assert!(parse_request(body(&[item(1, "\\ud800")]).as_bytes()).is_err());
    }

    #[test]
    fn missing_and_duplicate_fields() {
        assert!(bad(r#"{"entries":[]}"#).starts_with("missing field \"client_id\""));
        assert!(bad(r#"{"client_id":"c"}"#).starts_with("missing field \"entries\""));
        assert!(bad(r#"{"client_id":"c","client_id":"d","entries":[]}"#)
            .starts_with("duplicate field \"client_id\""));
        let m = bad(&body(&[r#"{"skip":true}"#.into()]));
        assert!(m.starts_with("entries[0]: missing field \"seq\""), "{m}");
        let m = bad(&body(&[r#"{"seq":1,"payload":"x","digest":"x"}"#.into()]));
        assert!(m.contains("missing field \"id\""), "{m}");
        let m = bad(&body(&[r#"{"seq":1,"id":1,"payload":"x"}"#.into()]));
        assert!(m.starts_with("entries[0]: missing field \"digest\""), "{m}");
        let m = bad(&body(&[r#"{"seq":1,"seq":1,"skip":true}"#.into()]));
        assert!(m.contains("duplicate field \"seq\""), "{m}");
    }

    #[test]
    fn payload_is_exactly_one_of_two() {
        let m = bad(&body(&[format!(
            r#"{{"seq":1,"id":1,"payload":"a","payload_base64":"YQ==","digest":"{D}"}}"#
        )]));
        assert!(m.contains("has both"), "{m}");
        let m = bad(&body(&[format!(r#"{{"seq":1,"id":1,"digest":"{D}"}}"#)]));
        assert!(m.contains("has neither"), "{m}");
    }

    #[test]
    fn undecodable_base64_is_kept_for_the_receiver_to_refuse() {
        let r = parse_request(
            body(&[format!(
                r#"{{"seq":1,"id":1,"payload_base64":"%%%","digest":"{D}"}}"#
            )])
            .as_bytes(),
        )
        .unwrap();
        let Entry::Item(e) = &r.entries[0] else {
            panic!()
        };
        match &e.payload {
            Payload::Undecodable { base64, reason } => {
                assert_eq!(base64, "%%%");
                assert!(reason.starts_with("invalid payload_base64: "), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Round trip keeps the text.
        assert_eq!(parse_request(&r.encode()).unwrap(), r);
    }

    #[test]
    fn digest_must_be_well_formed() {
        let m = bad(&body(&[format!(
            r#"{{"seq":1,"id":1,"payload":"","digest":"{}"}}"#,
            D.to_uppercase()
        )]));
        assert!(m.contains("\"digest\" must be"), "{m}");
        let m = bad(&body(&[
            r#"{"seq":1,"id":1,"payload":"","digest":"md5:00"}"#.into(),
        ]));
        assert!(m.contains("\"digest\" must be"), "{m}");
    }

    #[test]
    fn skip_entries_are_only_seq_and_true() {
        let m = bad(&body(&[r#"{"seq":1,"skip":false}"#.into()]));
        assert!(m.contains("\"skip\" must be true"), "{m}");
        let m = bad(&body(&[format!(
            r#"{{"seq":1,"skip":true,"digest":"{D}"}}"#
        )]));
        assert!(m.contains("a skip entry has only"), "{m}");
        let m = bad(&body(&[r#"{"seq":1,"skip":true,"payload":"x"}"#.into()]));
        assert!(m.contains("not \"payload\""), "{m}");
    }

    #[test]
    fn entries_are_ascending_contiguous_from_one() {
        let m = bad(&body(&[r#"{"seq":0,"skip":true}"#.into()]));
        assert!(m.contains("seq must be at least 1"), "{m}");
        let m = bad(&body(&[item(3, "a"), item(5, "b")]));
        assert!(m.contains("entries[1]: seq 5 does not follow 3"), "{m}");
        let m = bad(&body(&[item(3, "a"), item(3, "b")]));
        assert!(m.contains("entries[1]: seq 3 does not follow 3"), "{m}");
        let m = bad(&body(&[item(3, "a"), item(2, "b")]));
        assert!(m.contains("does not follow"), "{m}");
        let max = u64::MAX;
        let m = bad(&body(&[
            format!(r#"{{"seq":{max},"skip":true}}"#),
            r#"{"seq":1,"skip":true}"#.into(),
        ]));
        assert!(m.contains("does not follow"), "{m}");
        // Starting anywhere above 0 is the receiver's business (409), not
        // the format's.
        assert!(parse_request(body(&[item(7, "a"), item(8, "b")]).as_bytes()).is_ok());
    }

    #[test]
    fn client_ids() {
        for ok in [
            "a",
            "0b7c6a1e-8d44-4c1f-9f0e-3a2b1c0d9e8f",
            "edge.01:eu_west-1",
        ] {
            validate_client_id(ok).unwrap();
        }
        validate_client_id(&"x".repeat(128)).unwrap();
        for no in ["", "a b", "a/b", "é", "a\n", &"x".repeat(129)] {
            assert!(validate_client_id(no).is_err(), "{no:?}");
        }
        let m = bad(r#"{"client_id":"a/b","entries":[]}"#);
        assert!(
            m.starts_with("client_id must be 1 to 128 characters"),
            "{m}"
        );
    }

    #[test]
    fn messages_are_one_bounded_line() {
        let name = format!("a\\nb{}", "z".repeat(5000));
        let m = bad(&format!(r#"{{"client_id":"c","entries":[],"{name}":1}}"#));
        assert!(!m.contains('\n'), "{m}");
        assert!(m.len() <= MAX_MESSAGE_LEN + 4, "{}", m.len());
        let e = parse_request(b"{").unwrap_err();
        let v: serde_json::Value = serde_json::from_slice(&e.to_body()).unwrap();
        assert_eq!(v["error"], e.message());
        assert_eq!(v.as_object().unwrap().len(), 1);
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!(
            r#"{{"client_id":"c","entries":[{}{}]}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(parse_request(deep.as_bytes()).is_err());
        let deep_obj = format!(
            r#"{{"client_id":"c","entries":[{{"seq":1,"skip":true,"x":{}1{}}}]}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(parse_request(deep_obj.as_bytes()).is_err());
    }

    #[test]
    fn many_tiny_entries() {
        let n = 200_000u64;
        let mut text = String::from(r#"{"client_id":"c","acked":0,"entries":["#);
        for seq in 1..=n {
            if seq > 1 {
                text.push(',');
            }
            text.push_str(&format!(r#"{{"seq":{seq},"skip":true}}"#));
        }
        text.push_str("]}");
        let r = parse_request(text.as_bytes()).unwrap();
        assert_eq!(r.entries.len() as u64, n);
        assert_eq!(std::mem::size_of::<Entry>(), 16);
    }

    #[test]
    fn encode_request_writes_the_spec_shape() {
        let t = Timestamp::from_secs(1_764_504_000);
        let body = encode_request(
            "c-1",
            41,
            &[
                OutEntry::Item {
                    seq: 42,
                    id: 97,
                    key: "order-7",
                    payload: b"hello",
                    enqueued_at: Some(t),
                },
                OutEntry::Item {
                    seq: 43,
                    id: 98,
                    key: "",
                    payload: &[0xff, 0],
                    enqueued_at: None,
                },
                OutEntry::Skip { seq: 44 },
            ],
        );
        let text = String::from_utf8(body.clone()).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"client_id":"c-1","acked":41,"entries":[{{"seq":42,"id":97,"key":"order-7","payload":"hello","enqueued_at":"2025-11-30T12:00:00.000Z","digest":"{}"}},{{"seq":43,"id":98,"key":"","payload_base64":"/wA=","enqueued_at":null,"digest":"{}"}},{{"seq":44,"skip":true}}]}}"#,
                digest("order-7", b"hello"),
                digest("", &[0xff, 0])
            )
        );
        let r = parse_request(&body).unwrap();
        assert_eq!(r.entries.len(), 3);
    }

    #[test]
    fn responses_are_read_leniently() {
        let r = parse_response(
            br#"{"last_seq":9,"rejected":[{"seq":8,"error":"too big","hint":"x"}],"applied":1,"duplicates":2,"new_field":[1]}"#,
        )
        .unwrap();
        assert_eq!(r.last_seq, 9);
        assert_eq!(
            r.rejected,
            vec![Rejected {
                seq: 8,
                error: "too big".into()
            }]
        );
        let r = parse_response(br#"{"last_seq":3}"#).unwrap();
        assert_eq!((r.applied, r.duplicates, r.rejected.len()), (0, 0, 0));
        assert!(parse_response(br#"{"applied":3}"#).is_err());
        assert!(parse_response(b"<html>").is_err());
        let e = parse_error_body(br#"{"error":"gap","last_seq":4,"more":true}"#).unwrap();
        assert_eq!(e.last_seq, Some(4));
        assert_eq!(ErrorBody::new("x").to_json(), br#"{"error":"x"}"#.to_vec());
        let resp = PushResponse {
            last_seq: 5,
            rejected: vec![],
            applied: 1,
            duplicates: 0,
        };
        assert_eq!(
            String::from_utf8(resp.to_json()).unwrap(),
            r#"{"last_seq":5,"rejected":[],"applied":1,"duplicates":0}"#
        );
        assert_eq!(parse_response(&resp.to_json()).unwrap(), resp);
    }

    // ---- property tests -------------------------------------------------

    /// An item entry's fields (id, key, payload, enqueued_at, whether the
    /// payload is undecodable base64), or `None` for a skip entry.
    type EntryKind = Option<(u64, String, Vec<u8>, Option<String>, bool)>;

    fn arb_entry_kind() -> impl Strategy<Value = EntryKind> {
        prop::option::weighted(
            0.8,
            (
                any::<u64>(),
                "[a-z0-9\u{0}-\u{1f}\u{e9}\u{1f600}]{0,6}",
                prop::collection::vec(any::<u8>(), 0..24),
                prop::option::of("[0-9TZ:-]{0,20}"),
                prop::bool::weighted(0.1),
            ),
        )
    }

    /// Valid requests, as `parse_request` can return them.
    fn arb_request() -> impl Strategy<Value = PushRequest> {
        (
            "[A-Za-z0-9._:-]{1,20}",
            any::<u64>(),
            1u64..(u64::MAX - 64),
            prop::collection::vec(arb_entry_kind(), 0..8),
        )
            .prop_map(|(client_id, acked, first, kinds)| PushRequest {
                client_id,
                acked,
                entries: kinds
                    .into_iter()
                    .enumerate()
                    .map(|(i, k)| {
                        let seq = first + i as u64;
                        match k {
                            None => Entry::Skip { seq },
                            Some((id, key, bytes, enqueued_at, undecodable)) => {
                                let payload = if undecodable {
                                    decode_base64("A=B".into())
                                } else {
                                    Payload::Bytes(bytes)
                                };
                                let d = match &payload {
                                    Payload::Bytes(b) => digest(&key, b),
                                    Payload::Undecodable { .. } => D.to_string(),
                                };
                                Entry::Item(Box::new(ItemEntry {
                                    seq,
                                    id,
                                    key,
                                    payload,
                                    enqueued_at,
                                    digest: d,
                                }))
                            }
                        }
                    })
                    .collect(),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Err(e) = parse_request(&bytes) {
                prop_assert!(!e.message().contains('\n'));
            }
            let _ = parse_response(&bytes);
            let _ = parse_error_body(&bytes);
        }

        #[test]
        fn valid_requests_round_trip(req in arb_request()) {
            let body = req.encode();
            prop_assert_eq!(parse_request(&body), Ok(req));
        }

        /// A valid body with bytes flipped, inserted or cut: never a
        /// panic, and anything accepted is a valid request again.
        #[test]
        fn mutated_bodies_never_panic(
            req in arb_request(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
        ) {
            let mut body = req.encode();
            for (at, byte, how) in edits {
                let i = at.index(body.len() + 1);
                match how {
                    0 if i < body.len() => body[i] = byte,
                    1 => body.insert(i, byte),
                    _ => body.truncate(i),
                }
            }
            if let Ok(r) = parse_request(&body) {
                validate_client_id(&r.client_id).unwrap();
                for w in r.entries.windows(2) {
                    prop_assert_eq!(w[0].seq() + 1, w[1].seq());
                }
                prop_assert_eq!(parse_request(&r.encode()), Ok(r));
            }
        }

        #[test]
        fn encode_request_agrees_with_digest_and_parse(
            key in "\\PC{0,8}",
            payload in prop::collection::vec(any::<u8>(), 0..40),
            seq in 1u64..1000,
        ) {
            let body = encode_request("c", seq - 1, &[OutEntry::Item {
                seq, id: 1, key: &key, payload: &payload, enqueued_at: None,
            }]);
            let r = parse_request(&body).unwrap();
            let Entry::Item(e) = &r.entries[0] else { panic!() };
            prop_assert_eq!(&e.payload, &Payload::Bytes(payload.clone()));
            prop_assert_eq!(&e.digest, &digest(&key, &payload));
            prop_assert_eq!(&e.key, &key);
        }
    }
}
