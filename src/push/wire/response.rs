//! The bodies of the receiver's answers: [`PushResponse`], [`ErrorBody`]
//! and [`ClientState`], read leniently by the sender.

use super::encode::to_json;
use super::parse::one_line;
use serde::{Deserialize, Serialize};

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
}
