//! Items as JSON objects, the shape every command and export shares.
//!
//! The spec's "An item in JSON": `id`; `payload` (when the payload is
//! valid UTF-8) or `payload_base64` (otherwise), exactly one of the two;
//! `key` (`""` when none); `attempts`; `enqueued_at` (RFC 3339 UTC, null
//! only for items from reference NDJSON lines); `next_retry_at` (or
//! null); `last_error` (or null); `held`; `push_seq` (the number of an
//! item in flight to a push receiver, or null); `group` (its ordering
//! group, or null); `coalesce_key` (or null). Dead letters add `dead_at`.
//! Whole-spool exports add `state` (`pending`, `held` or `dead`).
//!
//! Field order is fixed (the order above), so output is stable for
//! people reading it and for diffs.

use crate::item::{DeadLetter, DeliveredItem, Delivery, Item, ItemId, Record, RecordState};
use crate::time::Timestamp;
use base64::Engine as _;
use serde::Serialize;

/// The JSON form of an item; serialize it with `serde_json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ItemJson<'a> {
    /// The item id.
    pub id: ItemId,
    /// The payload, when it is valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<&'a str>,
    /// The payload in standard base64 (with padding), when it is not
    /// valid UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    /// The idempotency key, `""` for none.
    pub key: &'a str,
    /// Durable count of failed attempts.
    pub attempts: u32,
    /// RFC 3339 UTC, or null when unknown.
    pub enqueued_at: Option<String>,
    /// RFC 3339 UTC, or null.
    pub next_retry_at: Option<String>,
    /// Why the last attempt failed, or null.
    pub last_error: Option<&'a str>,
    /// Whether the item is on hold.
    pub held: bool,
    /// The push sequence number of an in-flight item, or null.
    pub push_seq: Option<u64>,
    /// The ordering group, or null.
    pub group: Option<&'a str>,
    /// The coalesce key, or null.
    pub coalesce_key: Option<&'a str>,
    /// For dead letters: when the item died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_at: Option<String>,
    /// For export records: pending, held or dead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<RecordState>,
    /// Delivered items only: when the delivery was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered_at: Option<String>,
    /// Delivered items only: what proves the delivery
    /// ([`crate::item::Evidence::to_json`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<serde_json::Value>,
}

fn rfc3339(t: Option<Timestamp>) -> Option<String> {
    t.map(|t| t.to_rfc3339())
}

impl<'a> ItemJson<'a> {
    /// A pending (or held) item.
    pub fn item(item: &'a Item) -> ItemJson<'a> {
        let (payload, payload_base64) = match std::str::from_utf8(&item.payload) {
            Ok(s) => (Some(s), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&item.payload)),
            ),
        };
        ItemJson {
            id: item.id,
            payload,
            payload_base64,
            key: &item.key,
            attempts: item.attempts,
            enqueued_at: rfc3339(item.enqueued_at),
            next_retry_at: rfc3339(item.next_retry_at),
            last_error: item.last_error.as_deref(),
            held: item.held,
            push_seq: item.push_seq,
            group: item.group.as_deref(),
            coalesce_key: item.coalesce_key.as_deref(),
            dead_at: None,
            state: None,
            delivered_at: None,
            evidence: None,
        }
    }

    /// A retained delivered item: the item fields, `"state":"delivered"`,
    /// `delivered_at` and `evidence`.
    pub fn delivered(d: &'a DeliveredItem) -> ItemJson<'a> {
        ItemJson {
            state: Some(RecordState::Delivered),
            ..ItemJson::item(&d.item).with_delivery(Some(&d.delivery))
        }
    }

    fn with_delivery(mut self, d: Option<&Delivery>) -> ItemJson<'a> {
        if let Some(d) = d {
            self.delivered_at = Some(d.at.to_rfc3339());
            self.evidence = Some(d.evidence.to_json());
        }
        self
    }

    /// A dead letter: the item plus `dead_at`.
    pub fn dead_letter(dl: &'a DeadLetter) -> ItemJson<'a> {
        ItemJson {
            dead_at: Some(dl.dead_at.to_rfc3339()),
            ..ItemJson::item(&dl.item)
        }
    }

    /// An export record: the item plus `state` (and `dead_at` for dead
    /// records).
    pub fn record(rec: &'a Record) -> ItemJson<'a> {
        ItemJson {
            dead_at: rfc3339(rec.dead_at),
            state: Some(rec.state),
            ..ItemJson::item(&rec.item).with_delivery(rec.delivery.as_ref())
        }
    }

    /// One line of JSON, without the newline.
    pub fn to_line(&self) -> String {
        // Serializing this struct cannot fail: every field is a string,
        // a number, a bool or null.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(payload: &[u8]) -> Item {
        Item::new(
            7,
            payload.to_vec(),
            "k".into(),
            Timestamp::from_secs(1_764_504_000),
        )
    }

    #[test]
    fn text_payload() {
        let it = item(b"hello");
        assert_eq!(
            ItemJson::item(&it).to_line(),
            r#"{"id":7,"payload":"hello","key":"k","attempts":0,"enqueued_at":"2025-11-30T12:00:00.000Z","next_retry_at":null,"last_error":null,"held":false,"push_seq":null,"group":null,"coalesce_key":null}"#
        );
    }

    #[test]
    fn binary_payload_is_base64() {
        let it = item(&[0xff, 0x00, 0x41]);
        let v: serde_json::Value = serde_json::from_str(&ItemJson::item(&it).to_line()).unwrap();
        assert_eq!(v["payload_base64"], "/wBB");
        assert!(v.get("payload").is_none());
    }

    #[test]
    fn dead_letters_and_records() {
        let dl = DeadLetter {
            item: item(b"x"),
            dead_at: Timestamp::from_secs(1_764_504_060),
        };
        let v: serde_json::Value =
            serde_json::from_str(&ItemJson::dead_letter(&dl).to_line()).unwrap();
        assert_eq!(v["dead_at"], "2025-11-30T12:01:00.000Z");
        let rec = Record {
            item: item(b"x"),
            state: RecordState::Held,
            dead_at: None,
            delivery: None,
        };
        let v: serde_json::Value = serde_json::from_str(&ItemJson::record(&rec).to_line()).unwrap();
        assert_eq!(v["state"], "held");
        assert!(v.get("dead_at").is_none());
    }
}

/// Why a line of JSON input was refused, in words and with an example of
/// a good line (`example`): serde_json's own message says what its parser
/// expected (`expected ident`, `EOF while parsing an object`) and names
/// internal types, which tell a person nothing. The column is within the
/// line.
pub(crate) fn line_error(e: &serde_json::Error, example: &str) -> String {
    let msg = e.to_string();
    // serde_json appends " at line 1 column N"; the line is ours.
    let msg = match msg.rsplit_once(" at line ") {
        Some((m, _)) => m.to_string(),
        None => msg,
    };
    let at = if e.column() > 0 {
        format!("column {}: ", e.column())
    } else {
        String::new()
    };
    match e.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            let what = if msg.starts_with("EOF while parsing") {
                "the line ends before the JSON object does".to_string()
            } else if msg == "trailing characters" {
                "more text after the JSON object".to_string()
            } else if msg.starts_with("expected ident") || msg.starts_with("expected value") {
                "this is not JSON".to_string()
            } else {
                msg
            };
            format!("not a JSON object ({at}{what}); write one object per line, e.g. {example}")
        }
        _ => {
            // `invalid type: sequence, expected struct NdjsonLine`.
            let what = match msg.find("expected struct ") {
                Some(i) => format!("{}expected a JSON object", &msg[..i]),
                None => msg,
            };
            format!("{at}{what}; e.g. {example}")
        }
    }
}

#[cfg(test)]
mod line_error_tests {
    use super::line_error;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Obj {
        payload: String,
    }

    fn err(line: &str) -> String {
        line_error(
            &serde_json::from_str::<Obj>(line).unwrap_err(),
            r#"{"payload": "…"}"#,
        )
    }

    #[test]
    fn says_what_was_expected_with_an_example() {
        for (line, want) in [
            ("not json", "not a JSON object (column 2: this is not JSON); write one object per line, e.g. {\"payload\": \"…\"}"),
            ("{\"payload\":\"a\"", "not a JSON object (column 14: the line ends before the JSON object does)"),
            ("{\"payload\":\"a\"} x", "more text after the JSON object"),
            ("1", "column 1: invalid type: integer `1`, expected a JSON object; e.g. {\"payload\": \"…\"}"),
            ("{\"kee\":1}", "unknown field `kee`, expected `payload`"),
        ] {
            let e = err(line);
            assert!(e.contains(want), "{line}: {e}");
            assert!(!e.contains("ident") && !e.contains("Obj"), "{line}: {e}");
        }
    }
}
