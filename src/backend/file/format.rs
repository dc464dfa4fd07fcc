//! The NDJSON line format, read and written.
//!
//! One JSON object per line, as the reference `FileOfflineQueue` writes:
//!
//! ```text
//! {"op":"put","id":7,"payload":"hello","idempotencyKey":"k-1","attempts":0}
//! {"op":"done","id":7}
//! ```
//!
//! `spool` keeps those field names and adds optional fields to `put`
//! lines, each omitted when it holds its default:
//!
//! | field         | meaning                                              |
//! |---------------|------------------------------------------------------|
//! | `enqueuedAt`  | enqueue time, Unix seconds                           |
//! | `nextRetryAt` | replay skips the item until then, Unix milliseconds  |
//! | `lastError`   | why the last attempt failed                          |
//! | `held`        | `true` while an operator holds the item              |
//! | `deadAt`      | dead-letter file only: time of death, Unix ms        |
//!
//! A payload that is valid UTF-8 is a JSON string. Any other payload is an
//! object `{"base64": "..."}` (standard alphabet, padded): a reader that
//! expects a string rejects the line instead of mistaking the encoded
//! bytes for the payload text.

use crate::item::{DeadLetter, Item, ItemId};
use crate::time::Timestamp;
use base64::Engine;
use serde::{Deserialize, Serialize};

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// Store (or replace) an item.
    Put {
        item: Item,
        dead_at: Option<Timestamp>,
    },
    /// Remove an item; also raises the id high-water mark.
    Done { id: ItemId },
}

#[derive(Deserialize)]
struct LineIn<'a> {
    #[serde(borrow)]
    op: std::borrow::Cow<'a, str>,
    id: u64,
    #[serde(default)]
    payload: Option<PayloadIn>,
    #[serde(default, rename = "idempotencyKey")]
    key: Option<String>,
    #[serde(default)]
    attempts: Option<u32>,
    #[serde(default, rename = "enqueuedAt")]
    enqueued_at: Option<i64>,
    #[serde(default, rename = "nextRetryAt")]
    next_retry_at: Option<i64>,
    #[serde(default, rename = "lastError")]
    last_error: Option<String>,
    #[serde(default)]
    held: Option<bool>,
    #[serde(default, rename = "deadAt")]
    dead_at: Option<i64>,
}

/// A payload as read: a JSON string, or `{"base64": "..."}`.
///
/// Deserialised by hand rather than as an untagged enum: serde buffers an
/// untagged value before trying each variant, which made parsing — the
/// cost of opening and compacting a spool — much slower.
enum PayloadIn {
    Text(String),
    Encoded(String),
}

impl<'de> Deserialize<'de> for PayloadIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PayloadIn;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an object {\"base64\": \"...\"}")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PayloadIn, E> {
                Ok(PayloadIn::Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<PayloadIn, E> {
                Ok(PayloadIn::Text(v))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<PayloadIn, A::Error> {
                let mut b64: Option<String> = None;
                while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    if k == "base64" {
                        b64 = Some(m.next_value()?);
                    } else {
                        m.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                b64.map(PayloadIn::Encoded)
                    .ok_or_else(|| serde::de::Error::missing_field("base64"))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum PayloadOut<'a> {
    Text(&'a str),
    Encoded { base64: String },
}

#[derive(Serialize)]
struct PutOut<'a> {
    op: &'static str,
    id: u64,
    payload: PayloadOut<'a>,
    #[serde(rename = "idempotencyKey")]
    key: &'a str,
    attempts: u32,
    #[serde(rename = "enqueuedAt", skip_serializing_if = "Option::is_none")]
    enqueued_at: Option<i64>,
    #[serde(rename = "nextRetryAt", skip_serializing_if = "Option::is_none")]
    next_retry_at: Option<i64>,
    #[serde(rename = "lastError", skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    held: bool,
    #[serde(rename = "deadAt", skip_serializing_if = "Option::is_none")]
    dead_at: Option<i64>,
}

/// Parse one line (without its line ending). The error is a short reason.
pub(crate) fn parse_line(bytes: &[u8]) -> Result<Line, String> {
    let raw: LineIn<'_> = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    match raw.op.as_ref() {
        "done" => Ok(Line::Done { id: raw.id }),
        "put" => {
            let payload = match raw.payload {
                Some(PayloadIn::Text(s)) => s.into_bytes(),
                Some(PayloadIn::Encoded(base64)) => base64::engine::general_purpose::STANDARD
                    .decode(base64.as_bytes())
                    .map_err(|e| format!("payload.base64 is not valid base64: {e}"))?,
                None => return Err("a put line without a payload".into()),
            };
            Ok(Line::Put {
                item: Item {
                    id: raw.id,
                    payload,
                    key: raw.key.unwrap_or_default(),
                    attempts: raw.attempts.unwrap_or(0),
                    enqueued_at: raw.enqueued_at.map(Timestamp::from_secs),
                    next_retry_at: raw.next_retry_at.map(Timestamp::from_millis),
                    last_error: raw.last_error,
                    held: raw.held.unwrap_or(false),
                },
                dead_at: raw.dead_at.map(Timestamp::from_millis),
            })
        }
        other => Err(format!("unknown op {other:?}")),
    }
}

/// Append the `put` line for `item` (with its newline) to `out`.
pub(crate) fn write_put(out: &mut Vec<u8>, item: &Item, dead_at: Option<Timestamp>) {
    let payload = match std::str::from_utf8(&item.payload) {
        Ok(s) => PayloadOut::Text(s),
        Err(_) => PayloadOut::Encoded {
            base64: base64::engine::general_purpose::STANDARD.encode(&item.payload),
        },
    };
    let line = PutOut {
        op: "put",
        id: item.id,
        payload,
        key: &item.key,
        attempts: item.attempts,
        enqueued_at: item.enqueued_at.map(|t| t.as_secs()),
        next_retry_at: item.next_retry_at.map(|t| t.as_millis()),
        last_error: item.last_error.as_deref(),
        held: item.held,
        dead_at: dead_at.map(|t| t.as_millis()),
    };
    // Serialising plain strings and integers into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, &line).is_ok() {
        out.push(b'\n');
    }
}

/// Append the `put` line for a dead letter.
pub(crate) fn write_dead(out: &mut Vec<u8>, dl: &DeadLetter) {
    write_put(out, &dl.item, Some(dl.dead_at));
}

/// Append a `done` line.
pub(crate) fn write_done(out: &mut Vec<u8>, id: ItemId) {
    out.extend_from_slice(br#"{"op":"done","id":"#);
    out.extend_from_slice(id.to_string().as_bytes());
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(payload: &[u8]) -> Item {
        Item {
            id: 3,
            payload: payload.to_vec(),
            key: "k\"\\\u{1}".into(),
            attempts: 2,
            enqueued_at: Some(Timestamp::from_secs(1_700_000_000)),
            next_retry_at: Some(Timestamp::from_millis(1_700_000_000_123)),
            last_error: Some("boom\nline two".into()),
            held: true,
        }
    }

    #[test]
    fn reference_lines_parse() {
        let l = parse_line(
            br#"{"op":"put","id":1,"payload":"a\u0001\"b\\","idempotencyKey":"","attempts":4}"#,
        )
        .unwrap();
        match l {
            Line::Put { item, dead_at } => {
                assert_eq!(item.payload, b"a\x01\"b\\");
                assert_eq!(item.attempts, 4);
                assert_eq!(item.enqueued_at, None);
                assert_eq!(dead_at, None);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            parse_line(br#"{"op":"done","id":9}"#).unwrap(),
            Line::Done { id: 9 }
        );
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            &b"{\"op\":\"put\",\"id\":1"[..],
            b"{\"op\":\"put\",\"id\":1}",
            b"{\"op\":\"zap\",\"id\":1}",
            b"{\"op\":\"put\",\"id\":-1,\"payload\":\"\"}",
            b"[1,2]",
            b"{\"op\":\"put\",\"id\":1,\"payload\":{\"base64\":\"***\"}}",
            b"\xff\xfe",
        ] {
            assert!(
                parse_line(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn binary_payloads_are_marked() {
        let mut out = Vec::new();
        write_put(&mut out, &item(b"\xff\x00ok"), None);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.contains(r#""payload":{"base64":"#), "{text}");
        assert!(text.ends_with('\n'));
        assert_eq!(text.matches('\n').count(), 1);
    }

    #[test]
    fn done_lines_are_reference_shaped() {
        let mut out = Vec::new();
        write_done(&mut out, 42);
        assert_eq!(out, b"{\"op\":\"done\",\"id\":42}\n");
    }

    proptest! {
        #[test]
        fn put_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..200),
                           key in ".{0,12}", attempts in any::<u32>(), held in any::<bool>(),
                           dead in proptest::option::of(0i64..4_000_000_000_000)) {
            let mut it = item(&payload);
            it.key = key;
            it.attempts = attempts;
            it.held = held;
            let mut out = Vec::new();
            write_put(&mut out, &it, dead.map(Timestamp::from_millis));
            prop_assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 1);
            let parsed = parse_line(&out[..out.len() - 1]).unwrap();
            prop_assert_eq!(parsed, Line::Put { item: it, dead_at: dead.map(Timestamp::from_millis) });
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
            let _ = parse_line(&bytes);
        }
    }
}
