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
//! * `group` and `coalesce_key` (strings or `null`) may be left out; `null`
//!   and `""` mean none. A sender writes them only for items that have
//!   them, so that receivers without them keep taking other items.
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

mod digest;
mod encode;
mod parse;
mod request;
mod response;

pub use self::digest::{digest, is_well_formed_digest};
pub use self::encode::{encode_request, encoded_entry_len, request_overhead, OutEntry};
pub use self::parse::{parse_request, validate_client_id, BadRequest, MAX_CLIENT_ID_LEN};
pub use self::request::{Entry, ItemEntry, Payload, PushRequest};
pub use self::response::{
    parse_error_body, parse_response, ClientState, ErrorBody, PushResponse, Rejected,
};

#[cfg(test)]
mod tests {
    // Property tests of the format as a whole: what the parser accepts,
    // the writer writes back the same.
    use super::parse::decode_base64;
    use super::*;
    use proptest::prelude::*;

    /// The digest of an empty key and an empty payload.
    pub(super) const D: &str =
        "sha256:6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d";

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
                                    group: None,
                                    coalesce_key: None,
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
                group: None, coalesce_key: None,
            }]);
            let r = parse_request(&body).unwrap();
            let Entry::Item(e) = &r.entries[0] else { panic!() };
            prop_assert_eq!(&e.payload, &Payload::Bytes(payload.clone()));
            prop_assert_eq!(&e.digest, &digest(&key, &payload));
            prop_assert_eq!(&e.key, &key);
        }
    }
}
