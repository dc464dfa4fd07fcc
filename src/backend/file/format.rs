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
//! | `pushSeq`     | push sequence number of an item in flight            |
//! | `group`       | ordering group                                       |
//! | `coalesceKey` | coalesce key                                         |
//! | `deliveredAt` | `.delivered` file, and the main file's `done` line of a retained delivery: time of delivery, Unix ms |
//! | `evidence`    | as `deliveredAt`: [`Evidence::encode`]'s form        |
//!
//! A payload that is valid UTF-8 is a JSON string. Any other payload is an
//! object `{"base64": "..."}` (standard alphabet, padded): a reader that
//! expects a string rejects the line instead of mistaking the encoded
//! bytes for the payload text.

use crate::item::{DeadLetter, DeliveredItem, Delivery, Evidence, Item, ItemId};
use crate::time::Timestamp;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

mod write;
pub(crate) use self::write::{
    frame_batch, line_at, stamp_at, stamp_field, strip_tx, write_client, write_dead,
    write_delivered, write_done, write_done_delivered, write_evicted, write_push, write_put,
    write_put_line,
};

/// One parsed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Store (or replace) an item.
    Put {
        item: Item,
        dead_at: Option<Timestamp>,
        /// `deliveredAt`: only the `.delivered` file's lines carry it
        /// (see `parse_delivered`).
        delivered_at: Option<Timestamp>,
        /// `evidence`, as written ([`Evidence::encode`]'s form).
        evidence: Option<String>,
    },
    /// Remove an item; also raises the id high-water mark. In the main
    /// file, the `done` line of a delivery that a retention window keeps
    /// carries when and how (`deliveredAt`, `evidence`): with the item's
    /// last `put` line, it is the retained record until compaction moves
    /// it to `<spool>.delivered` (see the `retain` module).
    Done {
        id: ItemId,
        delivery: Option<Delivery>,
    },
    /// The spool's push state as a sending client: a `done` line for id 0
    /// (a no-op for every reader that does not know it) with a `push`
    /// object. The last one in the file is the state.
    Push(PushLine),
    /// What a push receiver recorded for one client: a `done` line for id
    /// 0 with a `client` object. The lines of a client add up.
    Client(ClientLine),
    /// The number of items the `drop-oldest` overflow policy ever evicted:
    /// a `done` line for id 0 with an `evicted` count, in the dead-letter
    /// file (written in the same batch as the dead letters it counts). The
    /// last one in the file is the count.
    Evicted(u64),
}

/// The `client` object of a receiver's client line: what a group of push
/// requests (or, after compaction, all of them) did for one client.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientLine {
    /// The client id.
    pub id: String,
    /// Its `last_seq`, when it moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u64>,
    /// Rejects at or below this are acknowledged.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub acked: u64,
    /// When the client pushed, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
    /// Applied numbers and their digests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<(u64, String)>,
    /// Refused numbers, their digests (when verified) and reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<(u64, Option<String>, String)>,
    /// Skipped numbers: written by older versions, read and ignored (a
    /// skip is recorded by `last` alone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The `push` object of a push-state line.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
pub struct PushLine {
    /// The highest sequence number assigned.
    pub assigned: u64,
    /// The receiver's acknowledged watermark.
    pub acked: u64,
    /// Abandoned in-flight numbers, not yet acknowledged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skips: Vec<u64>,
    /// The uuid given by `config uuid --regenerate`, which overrides the
    /// one in `<spool>.meta` (it commits with the renumbering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// The fields of a line. [`parse_line`] reads them with `P` = [`PayloadIn`]
/// and `S` = `String`; [`check_line`] with [`PayloadCheck`] and [`AnyStr`],
/// which check the same JSON without keeping it — one field list, so the
/// two accept exactly the same lines.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object with op and id")]
struct Fields<'a, P, S> {
    #[serde(borrow)]
    op: std::borrow::Cow<'a, str>,
    id: u64,
    #[serde(default = "none")]
    payload: Option<P>,
    #[serde(default = "none", rename = "idempotencyKey")]
    key: Option<S>,
    #[serde(default)]
    attempts: Option<u32>,
    #[serde(default, rename = "enqueuedAt")]
    enqueued_at: Option<i64>,
    #[serde(default, rename = "nextRetryAt")]
    next_retry_at: Option<i64>,
    #[serde(default = "none", rename = "lastError")]
    last_error: Option<S>,
    #[serde(default)]
    held: Option<bool>,
    #[serde(default, rename = "deadAt")]
    dead_at: Option<i64>,
    #[serde(default, rename = "pushSeq")]
    push_seq: Option<u64>,
    #[serde(default = "none")]
    group: Option<S>,
    #[serde(default = "none", rename = "coalesceKey")]
    coalesce_key: Option<S>,
    #[serde(default, rename = "deliveredAt")]
    delivered_at: Option<i64>,
    // Always kept (short): a `done` line's evidence is checked by every
    // reader, [`check_line`] included.
    #[serde(default = "none")]
    evidence: Option<String>,
    #[serde(default = "none")]
    push: Option<PushLine>,
    #[serde(default = "none")]
    client: Option<ClientLine>,
    #[serde(default)]
    evicted: Option<u64>,
    #[serde(default)]
    tx: Option<u64>,
}

/// An absent field (without asking the field's type for a default).
fn none<T>() -> Option<T> {
    None
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

/// A line in exactly the shape `spool` writes — its fields in its order,
/// strings without `\u` escapes or control characters, integers as plain
/// digits — read without serde. Anything else is `None` and goes through
/// serde, which stays the authority: a line read here is one serde reads
/// with the same values (tested against it).
#[derive(Default)]
struct Plain<'a> {
    put: bool,
    id: u64,
    payload: Cow<'a, str>,
    key: Cow<'a, str>,
    attempts: u32,
    enqueued_at: Option<i64>,
    next_retry_at: Option<i64>,
    last_error: Option<Cow<'a, str>>,
    held: bool,
    dead_at: Option<i64>,
    push_seq: Option<u64>,
    group: Option<Cow<'a, str>>,
    coalesce_key: Option<Cow<'a, str>>,
    delivered_at: Option<i64>,
    evidence: Option<Cow<'a, str>>,
    tx: Option<u64>,
}

impl<'a> Plain<'a> {
    /// Read `text`; with `decode` false, strings are checked but not
    /// unescaped (their values are then the raw text).
    fn read(text: &'a str, decode: bool) -> Option<Plain<'a>> {
        Plain::read_with(text, decode, decode)
    }

    /// [`Plain::read`], decoding the payload only when `decode_payload`
    /// (the other strings as `decode` says).
    fn read_with(text: &'a str, decode: bool, decode_payload: bool) -> Option<Plain<'a>> {
        let mut c = Cursor {
            text,
            at: 0,
            decode,
        };
        if c.eat(r#"{"op":"done","id":"#) {
            let id = c.uint()?;
            let delivered_at = c.int_field(r#","deliveredAt":"#)?;
            let evidence = c.str_field(r#","evidence":""#)?;
            let tx = c.uint_field(r#","tx":"#)?;
            c.end()?;
            // Anything but a complete, readable delivery (or none) is
            // left to serde, which words the error.
            done_delivery(id, delivered_at, evidence.as_deref()).ok()?;
            return Some(Plain {
                id,
                delivered_at,
                evidence,
                tx,
                ..Plain::default()
            });
        }
        c.eat(r#"{"op":"put","id":"#).then_some(())?;
        let id = c.uint()?;
        c.eat(r#","payload":""#).then_some(())?;
        c.decode = decode_payload;
        let payload = c.string()?;
        c.decode = decode;
        c.eat(r#","idempotencyKey":""#).then_some(())?;
        let key = c.string()?;
        c.eat(r#","attempts":"#).then_some(())?;
        let attempts = u32::try_from(c.uint()?).ok()?;
        let enqueued_at = c.int_field(r#","enqueuedAt":"#)?;
        let next_retry_at = c.int_field(r#","nextRetryAt":"#)?;
        let last_error = c.str_field(r#","lastError":""#)?;
        let held = c.eat(r#","held":true"#);
        let dead_at = c.int_field(r#","deadAt":"#)?;
        let push_seq = c.uint_field(r#","pushSeq":"#)?;
        let group = c.str_field(r#","group":""#)?;
        let coalesce_key = c.str_field(r#","coalesceKey":""#)?;
        let delivered_at = c.int_field(r#","deliveredAt":"#)?;
        let evidence = c.str_field(r#","evidence":""#)?;
        let tx = c.uint_field(r#","tx":"#)?;
        c.end()?;
        Some(Plain {
            put: true,
            id,
            payload,
            key,
            attempts,
            enqueued_at,
            next_retry_at,
            last_error,
            held,
            dead_at,
            push_seq,
            group,
            coalesce_key,
            delivered_at,
            evidence,
            tx,
        })
    }

    fn into_line(self) -> Line {
        if !self.put {
            let delivery = done_delivery(self.id, self.delivered_at, self.evidence.as_deref())
                .ok()
                .flatten();
            return Line::Done {
                id: self.id,
                delivery,
            };
        }
        Line::Put {
            item: Item {
                id: self.id,
                payload: self.payload.into_owned().into_bytes(),
                key: self.key.into_owned(),
                attempts: self.attempts,
                enqueued_at: self.enqueued_at.map(Timestamp::from_secs),
                next_retry_at: self.next_retry_at.map(Timestamp::from_millis),
                last_error: self.last_error.map(Cow::into_owned),
                held: self.held,
                push_seq: self.push_seq,
                group: self.group.map(Cow::into_owned),
                coalesce_key: self.coalesce_key.map(Cow::into_owned),
            },
            dead_at: self.dead_at.map(Timestamp::from_millis),
            delivered_at: self.delivered_at.map(Timestamp::from_millis),
            evidence: self.evidence.map(Cow::into_owned),
        }
    }
}

struct Cursor<'a> {
    text: &'a str,
    at: usize,
    decode: bool,
}

impl<'a> Cursor<'a> {
    /// Step over `lit` if it comes next.
    fn eat(&mut self, lit: &str) -> bool {
        let next = self.text[self.at..].starts_with(lit);
        if next {
            self.at += lit.len();
        }
        next
    }

    /// A non-negative integer without sign, fraction, exponent or
    /// leading zero, that fits a `u64`.
    fn uint(&mut self) -> Option<u64> {
        let rest = &self.text[self.at..];
        let len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let digits = &rest[..len];
        if digits.is_empty() || (len > 1 && digits.starts_with('0')) {
            return None;
        }
        self.at += len;
        digits.parse().ok()
    }

    /// `Some(None)` when `name` does not come next, `Some(Some(v))` for
    /// the field with a value `value` reads, `None` otherwise.
    fn field<T>(
        &mut self,
        name: &str,
        value: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        if !self.eat(name) {
            return Some(None);
        }
        value(self).map(Some)
    }

    /// [`Cursor::field`] with an integer that fits an `i64`.
    fn int_field(&mut self, name: &str) -> Option<Option<i64>> {
        self.field(name, |c| i64::try_from(c.uint()?).ok())
    }

    /// [`Cursor::field`] with a string (`name` ends with the opening
    /// quote).
    fn str_field(&mut self, name: &str) -> Option<Option<Cow<'a, str>>> {
        self.field(name, Cursor::string)
    }

    /// [`Cursor::field`] with an unsigned integer.
    fn uint_field(&mut self, name: &str) -> Option<Option<u64>> {
        self.field(name, Cursor::uint)
    }

    /// The rest of a string whose opening quote was eaten: no control
    /// character, and only the one-letter escapes (`\u` goes to serde).
    fn string(&mut self) -> Option<Cow<'a, str>> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut owned: Option<String> = None;
        let mut from = start;
        loop {
            let at = from + memchr::memchr2(b'"', b'\\', &bytes[from..])?;
            if has_control(&bytes[from..at]) {
                return None;
            }
            if bytes[at] == b'"' {
                self.at = at + 1;
                return Some(match owned {
                    Some(mut s) => {
                        s.push_str(&self.text[from..at]);
                        Cow::Owned(s)
                    }
                    None => Cow::Borrowed(&self.text[start..at]),
                });
            }
            let unescaped = match bytes.get(at + 1)? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                _ => return None,
            };
            if self.decode {
                let s = owned.get_or_insert_with(String::new);
                s.push_str(&self.text[from..at]);
                s.push(unescaped);
            }
            from = at + 2;
        }
    }

    /// The closing brace, and nothing after it.
    fn end(&mut self) -> Option<()> {
        (&self.text[self.at..] == "}").then_some(())
    }
}

/// Whether `bytes` holds a control character (below 0x20), which a JSON
/// string may not hold raw. Checked 32 bytes at a time without an early
/// exit inside a block, which the compiler turns into vector compares:
/// byte by byte, it took about half the time of parsing a line with a
/// 200-byte payload.
fn has_control(bytes: &[u8]) -> bool {
    let mut blocks = bytes.chunks_exact(32);
    let found = blocks.any(|b| b.iter().fold(false, |acc, &c| acc | (c < 0x20)));
    found || blocks.remainder().iter().any(|&c| c < 0x20)
}

/// Deserialise a line. A line that is valid UTF-8 (nearly all; `text` is
/// then the same bytes, checked once as a whole rather than string by
/// string) is read as text; any other line goes through the byte parser,
/// which words the error.
fn from_line<'a, T: Deserialize<'a>>(bytes: &'a [u8], text: Option<&'a str>) -> Result<T, String> {
    match text {
        Some(text) => serde_json::from_str(text),
        None => serde_json::from_slice(bytes),
    }
    .map_err(|e| e.to_string())
}

/// Parse one line (without its line ending). The error is a short reason.
pub(crate) fn parse_line(bytes: &[u8]) -> Result<Line, String> {
    parse_line_tx(bytes).map(|(line, _)| line)
}

/// [`parse_line`] for readers that never look at the payload (the
/// index): the same lines pass and fail, with the same values, but a
/// `put` line's payload is left empty — checked, not decoded or copied.
pub(crate) fn parse_line_without_payload(bytes: &[u8]) -> Result<Line, String> {
    let text = std::str::from_utf8(bytes).ok();
    if let Some(mut line) = text.and_then(|text| Plain::read_with(text, true, false)) {
        line.payload = Cow::Borrowed("");
        return Ok(line.into_line());
    }
    let (mut line, _) = parse_line_serde(bytes, text)?;
    if let Line::Put { item, .. } = &mut line {
        item.payload = Vec::new();
    }
    Ok(line)
}

/// [`parse_delivered`] without the payload (see
/// [`parse_line_without_payload`]).
pub(crate) fn parse_delivered_without_payload(bytes: &[u8]) -> Result<Line, String> {
    delivered_only(parse_line_without_payload(bytes)?)
}

/// Parse one line of the `.delivered` file: as [`parse_line`], and a
/// `put` line must carry `deliveredAt` and an `evidence` that
/// [`Evidence::decode`] reads (else it is malformed, like any line that
/// does not parse).
pub(crate) fn parse_delivered(bytes: &[u8]) -> Result<Line, String> {
    delivered_only(parse_line(bytes)?)
}

/// `line`, if it may stand in the `.delivered` file.
fn delivered_only(line: Line) -> Result<Line, String> {
    if let Line::Put { .. } = &line {
        if line.delivery()?.is_none() {
            return Err("a delivered record without deliveredAt and evidence".into());
        }
    }
    Ok(line)
}

impl Line {
    /// The delivery a `put` line records (`None` for any other line, and
    /// for a `put` line without `deliveredAt` and `evidence`). `Err` when
    /// a `put` line has one without the other, or an evidence that is
    /// not one.
    pub(crate) fn delivery(&self) -> Result<Option<Delivery>, String> {
        let Line::Put {
            delivered_at,
            evidence,
            ..
        } = self
        else {
            return Ok(None);
        };
        decode_delivery(*delivered_at, evidence.as_deref())
    }
}

/// The delivery that `deliveredAt` (`at`) and `evidence` record: both, or
/// neither; `Err` for one without the other, or an evidence that is not
/// one.
fn decode_delivery(
    at: Option<Timestamp>,
    evidence: Option<&str>,
) -> Result<Option<Delivery>, String> {
    match (at, evidence) {
        (Some(at), Some(e)) => match Evidence::decode(e) {
            Some(evidence) => Ok(Some(Delivery { at, evidence })),
            None => Err(format!(
                "evidence {e:?} is not one of http:N, exit:N, push:N, done, sink"
            )),
        },
        (None, None) => Ok(None),
        (Some(_), None) => Err("deliveredAt without evidence".into()),
        (None, Some(_)) => Err("evidence without deliveredAt".into()),
    }
}

/// [`parse_line`], also giving the line's `tx` field: the offset of the
/// first line of the batch it belongs to, carried by every line of a
/// multi-line append but its last (see [`frame_batch`]).
pub(crate) fn parse_line_tx(bytes: &[u8]) -> Result<(Line, Option<u64>), String> {
    let text = std::str::from_utf8(bytes).ok();
    if let Some(line) = text.and_then(|text| Plain::read(text, true)) {
        let tx = line.tx;
        return Ok((line.into_line(), tx));
    }
    parse_line_serde(bytes, text)
}

/// [`parse_line_tx`] through serde alone: the authority on what a line
/// says.
fn parse_line_serde<'a>(
    bytes: &'a [u8],
    text: Option<&'a str>,
) -> Result<(Line, Option<u64>), String> {
    let raw: Fields<'_, PayloadIn, String> = from_line(bytes, text)?;
    let tx = raw.tx;
    let line = match raw.op.as_ref() {
        "done" => match state_kind(raw.id, &raw.push, &raw.client, raw.evicted)? {
            StateKind::Push => Ok(Line::Push(raw.push.unwrap_or_default())),
            StateKind::Client => Ok(Line::Client(raw.client.unwrap_or_default())),
            StateKind::Evicted(n) => Ok(Line::Evicted(n)),
            StateKind::Done => Ok(Line::Done {
                id: raw.id,
                delivery: done_delivery(raw.id, raw.delivered_at, raw.evidence.as_deref())?,
            }),
        },
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
                    push_seq: raw.push_seq,
                    group: raw.group,
                    coalesce_key: raw.coalesce_key,
                },
                dead_at: raw.dead_at.map(Timestamp::from_millis),
                delivered_at: raw.delivered_at.map(Timestamp::from_millis),
                evidence: raw.evidence,
            })
        }
        other => Err(format!("unknown op {other:?}")),
    }?;
    Ok((line, tx))
}

/// Which kind of `done` line a line is.
enum StateKind {
    Done,
    Push,
    Client,
    Evicted(u64),
}

/// The kind of a `done` line with these fields: at most one kind of state,
/// and only on id 0.
fn state_kind<P, C>(
    id: u64,
    push: &Option<P>,
    client: &Option<C>,
    evicted: Option<u64>,
) -> Result<StateKind, String> {
    let kind = match (push.is_some(), client.is_some(), evicted) {
        (false, false, None) => return Ok(StateKind::Done),
        (true, false, None) => StateKind::Push,
        (false, true, None) => StateKind::Client,
        (false, false, Some(n)) => StateKind::Evicted(n),
        _ => return Err("a line cannot hold more than one kind of state".into()),
    };
    if id != 0 {
        return Err("a state line must be a done line for id 0".into());
    }
    Ok(kind)
}

/// The delivery a `done` line records: `deliveredAt` and `evidence`
/// together, or neither; only on an item's line (not id 0).
fn done_delivery(
    id: ItemId,
    delivered_at: Option<i64>,
    evidence: Option<&str>,
) -> Result<Option<Delivery>, String> {
    match decode_delivery(delivered_at.map(Timestamp::from_millis), evidence)? {
        Some(_) if id == 0 => Err("a done line for id 0 cannot record a delivery".into()),
        delivery => Ok(delivery),
    }
}

/// What `check_line` learns of a line: its op and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// A `put` line (else `done`).
    pub put: bool,
    pub id: ItemId,
    /// A push-state line (a `done` line for id 0 with a `push` object).
    pub push: bool,
    /// A receiver's client line (a `done` line for id 0 with `client`).
    pub client: bool,
    /// A `done` line that carries a delivery (a retained record's).
    pub retained: bool,
}

/// A JSON string, validated and dropped.
struct AnyStr;

impl<'de> Deserialize<'de> for AnyStr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = AnyStr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<AnyStr, E> {
                Ok(AnyStr)
            }
        }
        d.deserialize_str(V)
    }
}

/// A payload as [`PayloadIn`] accepts it; a `base64` form is decoded (to
/// check it) into a buffer that is reused from line to line.
enum PayloadCheck {
    Text,
    Encoded(bool),
}

thread_local! {
    static BASE64_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<'de> Deserialize<'de> for PayloadCheck {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = PayloadCheck;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an object {\"base64\": \"...\"}")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<PayloadCheck, E> {
                Ok(PayloadCheck::Text)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<PayloadCheck, A::Error> {
                let mut valid: Option<bool> = None;
                while let Some(k) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    if k == "base64" {
                        let text: std::borrow::Cow<'de, str> = m.next_value()?;
                        valid = Some(BASE64_SCRATCH.with_borrow_mut(|buf| {
                            buf.clear();
                            base64::engine::general_purpose::STANDARD
                                .decode_vec(text.as_bytes(), buf)
                                .is_ok()
                        }));
                    } else {
                        m.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                valid
                    .map(PayloadCheck::Encoded)
                    .ok_or_else(|| serde::de::Error::missing_field("base64"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Check one line (without its line ending) exactly as [`parse_line`]
/// does — the same lines pass, the same lines fail — without building the
/// item. Compaction uses it: it needs each line's op and id, and copies
/// the bytes of the lines it keeps.
pub(crate) fn check_line(bytes: &[u8]) -> Result<Head, String> {
    let text = std::str::from_utf8(bytes).ok();
    if let Some(line) = text.and_then(|text| Plain::read(text, false)) {
        return Ok(Head {
            put: line.put,
            id: line.id,
            push: false,
            client: false,
            retained: !line.put && line.delivered_at.is_some(),
        });
    }
    let raw: Fields<'_, PayloadCheck, AnyStr> = from_line(bytes, text)?;
    let head = |put, push, client| Head {
        put,
        id: raw.id,
        push,
        client,
        retained: false,
    };
    match raw.op.as_ref() {
        "done" => match state_kind(raw.id, &raw.push, &raw.client, raw.evicted)? {
            StateKind::Push => Ok(head(false, true, false)),
            StateKind::Client => Ok(head(false, false, true)),
            // An eviction count is not an item: compaction of the main
            // file (where it never belongs) drops it like a `done` line.
            StateKind::Evicted(_) => Ok(head(false, false, false)),
            StateKind::Done => {
                let delivery = done_delivery(raw.id, raw.delivered_at, raw.evidence.as_deref())?;
                Ok(Head {
                    retained: delivery.is_some(),
                    ..head(false, false, false)
                })
            }
        },
        "put" => match raw.payload {
            Some(PayloadCheck::Text) | Some(PayloadCheck::Encoded(true)) => {
                Ok(head(true, false, false))
            }
            // Let the full parser word the error.
            Some(PayloadCheck::Encoded(false)) => Err(parse_line(bytes)
                .err()
                .unwrap_or_else(|| "payload.base64 is not valid base64".into())),
            None => Err("a put line without a payload".into()),
        },
        other => Err(format!("unknown op {other:?}")),
    }
}

#[cfg(test)]
mod tests;
