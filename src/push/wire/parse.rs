//! The receiver's strict parser of request bodies ([`parse_request`]),
//! the check of client ids, and [`BadRequest`], the one-line reason a
//! body is refused.

use super::digest::is_well_formed_digest;
use super::request::{Entry, ItemEntry, Payload, PushRequest};
use super::response::ErrorBody;
use base64::Engine as _;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use std::fmt;

/// The longest `client_id` a receiver accepts, in characters.
pub const MAX_CLIENT_ID_LEN: usize = 128;

/// The longest error message this module produces, in bytes; longer
/// texts (an unknown field name of a megabyte, say) are cut.
const MAX_MESSAGE_LEN: usize = 300;
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

/// Parse and check a push request body (see the [`wire`](super) module
/// docs for what is refused). Never panics, whatever the bytes.
pub fn parse_request(body: &[u8]) -> Result<PushRequest, BadRequest> {
    serde_json::from_slice::<RequestDe>(body)
        .map(|r| r.0)
        .map_err(|e| BadRequest::new(&e.to_string()))
}

/// Make `s` one line of at most [`MAX_MESSAGE_LEN`] bytes: control
/// characters are escaped, the rest cut with an ellipsis.
pub(super) fn one_line(s: &str) -> String {
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
    group: Option<Option<String>>,
    coalesce_key: Option<Option<String>>,
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
            ("group", self.group.is_some()),
            ("coalesce_key", self.coalesce_key.is_some()),
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
                "group" => put(&mut f.group, "group", value(&mut map, "group")?)?,
                "coalesce_key" => put(
                    &mut f.coalesce_key,
                    "coalesce_key",
                    value(&mut map, "coalesce_key")?,
                )?,
                other => {
                    return Err(de::Error::custom(format_args!(
                        "unknown field {other:?} (an entry has seq, skip, id, key, payload, \
                         payload_base64, enqueued_at, digest, group, coalesce_key)"
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
        group: f.group.flatten().filter(|g| !g.is_empty()),
        coalesce_key: f.coalesce_key.flatten().filter(|c| !c.is_empty()),
    })))
}

/// Decode `payload_base64`, keeping the text when it does not decode.
pub(super) fn decode_base64(b64: String) -> Payload {
    match base64::engine::general_purpose::STANDARD.decode(&b64) {
        Ok(bytes) => Payload::Bytes(bytes),
        Err(e) => Payload::Undecodable {
            reason: one_line(&format!("invalid payload_base64: {e}")),
            base64: b64,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::wire::digest;
    use crate::push::wire::tests::D;

    fn bad(body: &str) -> String {
        match parse_request(body.as_bytes()) {
            Err(e) => e.message().to_string(),
            Ok(r) => panic!("accepted {body}: {r:?}"),
        }
    }

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
    fn groups_and_coalesce_keys_are_optional_strings() {
        let entry = |extra: &str| {
            format!(
                r#"{{"client_id":"c","entries":[{{"seq":1,"id":1,"payload":"","digest":"{D}"{extra}}}]}}"#
            )
        };
        let item = |extra: &str| match parse_request(entry(extra).as_bytes()).unwrap().entries[0]
            .clone()
        {
            Entry::Item(e) => (e.group, e.coalesce_key),
            other => panic!("{other:?}"),
        };
        assert_eq!(item(""), (None, None));
        assert_eq!(
            item(r#","group":"orders","coalesce_key":"status""#),
            (Some("orders".into()), Some("status".into()))
        );
        assert_eq!(item(r#","group":null,"coalesce_key":"""#), (None, None));
        assert!(bad(&entry(r#","group":7"#)).starts_with("entries[0]: "));
        assert!(bad(&entry(r#","group":"a","group":"b""#)).contains("duplicate"));
        let skip = r#"{"client_id":"c","entries":[{"seq":1,"skip":true,"group":"g"}]}"#;
        assert!(bad(skip).contains("\"group\""), "{}", bad(skip));
        // What the sender writes, the receiver reads back.
        let body = super::super::encode_request(
            "c",
            0,
            &[super::super::OutEntry::Item {
                seq: 1,
                id: 1,
                key: "",
                payload: b"x",
                enqueued_at: None,
                group: Some("orders"),
                coalesce_key: Some("status"),
            }],
        );
        let r = parse_request(&body).unwrap();
        assert_eq!(r.encode(), body);
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
}
