//! The sending side's writer of request bodies ([`encode_request`],
//! [`PushRequest::encode`]) and the exact size of what it writes.

use super::digest::digest;
use super::request::{Entry, Payload, PushRequest};
use crate::time::Timestamp;
use base64::Engine as _;
use serde::Serialize;
use std::borrow::Cow;

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
        /// Its ordering group (left out on the wire when `None`).
        group: Option<&'a str>,
        /// Its coalesce key (left out on the wire when `None`).
        coalesce_key: Option<&'a str>,
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
        #[serde(skip_serializing_if = "Option::is_none")]
        group: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        coalesce_key: Option<&'a str>,
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

pub(super) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these types cannot fail: strings, numbers, bools, null,
    // arrays and objects with string keys.
    serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec())
}

/// Write a request body from borrowed items: the sender's path. Each item
/// entry gets its [`digest`]; its payload goes out as `payload` when it
/// is valid UTF-8 and as `payload_base64` otherwise.
///
/// The caller is responsible for the entries being in ascending,
/// contiguous `seq` order (an
/// [`super::sender::Outbox`](crate::push::sender::Outbox) hands them out
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
            group,
            coalesce_key,
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
                group,
                coalesce_key,
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
///     OutEntry::Item {
///         seq: 7, id: 3, key: "k", payload: b"\x00\xff", enqueued_at: None,
///         group: Some("orders"), coalesce_key: None,
///     },
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
                        group: item.group.as_deref(),
                        coalesce_key: item.coalesce_key.as_deref(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::wire::parse_request;

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
                    group: None,
                    coalesce_key: None,
                },
                OutEntry::Item {
                    seq: 43,
                    id: 98,
                    key: "",
                    payload: &[0xff, 0],
                    enqueued_at: None,
                    group: None,
                    coalesce_key: None,
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
}
