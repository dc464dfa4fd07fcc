//! Writing the lines of an NDJSON spool file: `put` lines by hand
//! (exactly the bytes serde would write, without its per-byte escaping
//! loop), `done` and state lines, and the framing of a multi-line append
//! as one batch. [`super`] reads them.

use super::*;

/// A `put` line as serde writes it: the reference for the hand-written
/// [`write_put_line`] (in the tests).
#[cfg(test)]
#[derive(Serialize)]
#[serde(untagged)]
enum PayloadOut<'a> {
    Text(&'a str),
    Encoded { base64: String },
}

#[cfg(test)]
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
    #[serde(rename = "pushSeq", skip_serializing_if = "Option::is_none")]
    push_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group: Option<&'a str>,
    #[serde(rename = "coalesceKey", skip_serializing_if = "Option::is_none")]
    coalesce_key: Option<&'a str>,
    #[serde(rename = "deliveredAt", skip_serializing_if = "Option::is_none")]
    delivered_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    evidence: Option<String>,
}

/// Append the `put` line for `item` (with its newline) to `out`.
pub(crate) fn write_put(out: &mut Vec<u8>, item: &Item, dead_at: Option<Timestamp>) {
    write_put_line(out, item, dead_at, None);
}

/// Append the `put` line of a retained delivered item (for the
/// `.delivered` file): the item's line with `deliveredAt` and `evidence`.
pub(crate) fn write_delivered(out: &mut Vec<u8>, d: &DeliveredItem) {
    write_put_line(out, &d.item, None, Some(&d.delivery));
}

/// Append a `put` line, written by hand: exactly the bytes serde writes
/// for `PutOut` (`write_put_line_serde`, the reference, which the tests
/// compare it with), without serde's per-byte escaping loop.
pub(crate) fn write_put_line(
    out: &mut Vec<u8>,
    item: &Item,
    dead_at: Option<Timestamp>,
    delivery: Option<&Delivery>,
) {
    out.reserve(item.payload.len() + item.key.len() + 96);
    out.extend_from_slice(br#"{"op":"put","id":"#);
    push_uint(out, item.id);
    match std::str::from_utf8(&item.payload) {
        Ok(text) => {
            out.extend_from_slice(br#","payload":"#);
            write_json_str(out, text);
        }
        Err(_) => {
            out.extend_from_slice(br#","payload":{"base64":""#);
            let encoded = base64::engine::general_purpose::STANDARD.encode(&item.payload);
            out.extend_from_slice(encoded.as_bytes());
            out.extend_from_slice(b"\"}");
        }
    }
    out.extend_from_slice(br#","idempotencyKey":"#);
    write_json_str(out, &item.key);
    out.extend_from_slice(br#","attempts":"#);
    push_uint(out, u64::from(item.attempts));
    let int = |out: &mut Vec<u8>, name: &[u8], v: Option<i64>| {
        if let Some(v) = v {
            out.extend_from_slice(name);
            push_int(out, v);
        }
    };
    int(
        out,
        br#","enqueuedAt":"#,
        item.enqueued_at.map(|t| t.as_secs()),
    );
    int(
        out,
        br#","nextRetryAt":"#,
        item.next_retry_at.map(|t| t.as_millis()),
    );
    if let Some(e) = &item.last_error {
        out.extend_from_slice(br#","lastError":"#);
        write_json_str(out, e);
    }
    if item.held {
        out.extend_from_slice(br#","held":true"#);
    }
    int(out, br#","deadAt":"#, dead_at.map(|t| t.as_millis()));
    if let Some(seq) = item.push_seq {
        out.extend_from_slice(br#","pushSeq":"#);
        push_uint(out, seq);
    }
    if let Some(g) = &item.group {
        out.extend_from_slice(br#","group":"#);
        write_json_str(out, g);
    }
    if let Some(c) = &item.coalesce_key {
        out.extend_from_slice(br#","coalesceKey":"#);
        write_json_str(out, c);
    }
    if let Some(d) = delivery {
        out.extend_from_slice(br#","deliveredAt":"#);
        push_int(out, d.at.as_millis());
        out.extend_from_slice(br#","evidence":"#);
        write_json_str(out, &d.evidence.encode());
    }
    out.extend_from_slice(b"}\n");
}

/// Append `n` in decimal.
fn push_uint(out: &mut Vec<u8>, mut n: u64) {
    if n < 10 {
        // Attempts, mostly.
        out.push(b'0' + n as u8);
        return;
    }
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[at..]);
}

/// Append `n` in decimal (with a `-` when negative).
fn push_int(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    push_uint(out, n.unsigned_abs());
}

/// What JSON writes for each byte of a string: 0 for the byte itself,
/// else the letter after the backslash (`u` for `\u00xx`).
const ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = b'u';
        c += 1;
    }
    t[0x08] = b'b';
    t[0x0c] = b'f';
    t[b'\n' as usize] = b'n';
    t[b'\r' as usize] = b'r';
    t[b'\t' as usize] = b't';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// Whether any byte of `part` is one JSON escapes: a control character,
/// `"` or `\` (eight bytes at a time).
fn needs_escape(part: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH != 0;
    let mut words = part.chunks_exact(8);
    for word in &mut words {
        let mut a = [0u8; 8];
        a.copy_from_slice(word);
        let w = u64::from_le_bytes(a);
        if w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0
            || zero_in(w ^ (ONES * u64::from(b'"')))
            || zero_in(w ^ (ONES * u64::from(b'\\')))
        {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&c| ESCAPE[usize::from(c)] != 0)
}

/// Append `s` as a JSON string, escaped exactly as serde_json escapes it:
/// `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, other control characters
/// as `\u00xx` (lower-case hex), everything else (DEL and non-ASCII
/// included) as it is. A part without any of those is copied whole; one
/// with is escaped into a buffer on the stack and copied from there.
fn write_json_str(out: &mut Vec<u8>, s: &str) {
    const PART: usize = 64;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut tmp = [0u8; PART * 6];
    out.push(b'"');
    for part in s.as_bytes().chunks(PART) {
        if !needs_escape(part) {
            out.extend_from_slice(part);
            continue;
        }
        let mut n = 0;
        for &c in part {
            match ESCAPE[usize::from(c)] {
                0 => {
                    tmp[n] = c;
                    n += 1;
                }
                b'u' => {
                    tmp[n..n + 6].copy_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(c >> 4)],
                        HEX[usize::from(c & 15)],
                    ]);
                    n += 6;
                }
                e => {
                    tmp[n] = b'\\';
                    tmp[n + 1] = e;
                    n += 2;
                }
            }
        }
        out.extend_from_slice(&tmp[..n]);
    }
    out.push(b'"');
}

/// [`write_put_line`] through serde: the reference the hand-written
/// writer must match byte for byte.
#[cfg(test)]
pub(super) fn write_put_line_serde(
    out: &mut Vec<u8>,
    item: &Item,
    dead_at: Option<Timestamp>,
    delivery: Option<&Delivery>,
) {
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
        push_seq: item.push_seq,
        group: item.group.as_deref(),
        coalesce_key: item.coalesce_key.as_deref(),
        delivered_at: delivery.map(|d| d.at.as_millis()),
        evidence: delivery.map(|d| d.evidence.encode()),
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

/// Append a push-state line.
pub(crate) fn write_push(out: &mut Vec<u8>, push: &PushLine) {
    write_state(out, "push", push);
}

/// Append a receiver's client line.
pub(crate) fn write_client(out: &mut Vec<u8>, client: &ClientLine) {
    write_state(out, "client", client);
}

/// Append the eviction count line of the dead-letter file.
pub(crate) fn write_evicted(out: &mut Vec<u8>, total: u64) {
    write_state(out, "evicted", &total);
}

/// Append a state line: a `done` line for id 0 whose field `name` holds
/// `state`, as serde writes it.
fn write_state(out: &mut Vec<u8>, name: &str, state: &impl Serialize) {
    out.extend_from_slice(br#"{"op":"done","id":0,""#);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(br#"":"#);
    // Serialising plain strings and integers into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, state).is_ok() {
        out.extend_from_slice(b"}\n");
    }
}

/// Append a `done` line.
pub(crate) fn write_done(out: &mut Vec<u8>, id: ItemId) {
    out.extend_from_slice(br#"{"op":"done","id":"#);
    push_uint(out, id);
    out.extend_from_slice(b"}\n");
}

/// Append the main file's `done` line of a delivery that a retention
/// window keeps: a `done` line (all a reference reader needs) with when
/// and how the item was delivered.
pub(crate) fn write_done_delivered(out: &mut Vec<u8>, id: ItemId, d: &Delivery) {
    out.extend_from_slice(br#"{"op":"done","id":"#);
    push_uint(out, id);
    out.extend_from_slice(br#","deliveredAt":"#);
    out.extend_from_slice(d.at.as_millis().to_string().as_bytes());
    out.extend_from_slice(br#","evidence":""#);
    out.extend_from_slice(d.evidence.encode().as_bytes());
    out.extend_from_slice(b"\"}\n");
}

/// Frame `lines` (whole lines as this module writes them, each ending in
/// `}` and a newline) as one batch that starts at byte `start` of its
/// file: every line but the last gets a trailing `"tx":<start>` field.
///
/// A batch is committed when its last line is in the file. After a crash
/// in the middle of the append, the last complete line of the file still
/// carries `tx`, which names where the unfinished batch began, so a
/// reader can leave the whole batch out and a writer can cut it off (see
/// `scan::unfinished_batch`). Readers that do not know the field — the
/// reference, older versions of `spool` — ignore it. A single line needs
/// no framing: it is in the file whole or it is a torn tail.
pub(crate) fn frame_batch(lines: &[u8], start: u64) -> Cow<'_, [u8]> {
    let count = memchr::memchr_iter(b'\n', lines).count();
    if count < 2 {
        return Cow::Borrowed(lines);
    }
    let field = format!(r#","tx":{start}}}"#);
    let mut out = Vec::with_capacity(lines.len() + (count - 1) * field.len());
    let mut rest = lines;
    for _ in 0..count - 1 {
        let Some(nl) = memchr::memchr(b'\n', rest) else {
            break;
        };
        let line = &rest[..nl];
        match line.strip_suffix(b"}") {
            Some(body) => {
                out.extend_from_slice(body);
                out.extend_from_slice(field.as_bytes());
            }
            None => out.extend_from_slice(line),
        }
        out.push(b'\n');
        rest = &rest[nl + 1..];
    }
    out.extend_from_slice(rest);
    Cow::Owned(out)
}

/// `line` (without its line ending) without a `tx` field. Lines that
/// `spool` framed carry it last, as `,"tx":N}`, and lose it by a cut;
/// any other placement is removed through a JSON round trip, which keeps
/// every other field. `None` when the line has no `tx` field.
pub(crate) fn strip_tx(line: &[u8]) -> Option<Vec<u8>> {
    let (_, tx) = parse_line_tx(line).ok()?;
    let tx = tx?;
    let suffix = format!(r#","tx":{tx}}}"#);
    if let Some(body) = line.strip_suffix(suffix.as_bytes()) {
        let mut out = body.to_vec();
        out.push(b'}');
        return Some(out);
    }
    let mut value: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(line).ok()?;
    value.remove("tx");
    serde_json::to_vec(&value).ok()
}

/// `lines` (whole lines as this module writes them, each ending in `}`
/// and a newline) with `"at":<at>,"ino":<ino>` added to each: the lines of
/// a companion file (dead letters, delivered items) that a move writes
/// before the main file's part of it, which starts at byte `at` of the
/// main file, inode `ino`. The main file's part commits them: until it is
/// there, they are an unfinished move, which readers leave out and
/// writers cut off (see [`line_at`] and the backend's module docs). Once
/// the main file was replaced (a compaction), the fields say nothing.
pub(crate) fn stamp_at(lines: &[u8], at: u64, ino: u64) -> Vec<u8> {
    let field = stamp_field(at, ino);
    let count = memchr::memchr_iter(b'\n', lines).count();
    let mut out = Vec::with_capacity(lines.len() + count * field.len());
    for line in lines.split_inclusive(|b| *b == b'\n') {
        match line.strip_suffix(b"}\n") {
            Some(body) => {
                out.extend_from_slice(body);
                out.extend_from_slice(field.as_bytes());
                out.push(b'\n');
            }
            None => out.extend_from_slice(line),
        }
    }
    out
}

/// How [`stamp_at`] ends a line: `,"at":<at>,"ino":<ino>}`.
pub(crate) fn stamp_field(at: u64, ino: u64) -> String {
    format!(r#","at":{at},"ino":{ino}}}"#)
}

/// The `at` and `ino` fields of a line (see [`stamp_at`]), if it has
/// them.
pub(crate) fn line_at(line: &[u8]) -> Option<(u64, u64)> {
    #[derive(Deserialize)]
    struct At {
        #[serde(default)]
        at: Option<u64>,
        #[serde(default)]
        ino: Option<u64>,
    }
    let a = serde_json::from_slice::<At>(line).ok()?;
    a.at.zip(a.ino)
}
