//! Entry points for the fuzzers: the parsers of outside input that are
//! not public API, one thin function each, with no behaviour of their own.
//!
//! The coverage-guided targets in `fuzz/fuzz_targets/` and the seeded
//! harness `tests/fuzz_parsers.rs` call these (and the public parsers:
//! [`crate::push::wire::parse_request`], [`crate::ops::import::parse_record`],
//! [`crate::ops::input::read_items`], [`crate::serve::auth::Tokens::parse`],
//! [`crate::units`] …), so that both fuzz exactly what a user's input
//! reaches. Nothing here is a stable interface.

use crate::backend::file::format;
use crate::backend::file::io::FileIo;
use crate::backend::file::scan;
use crate::error::Result;
use std::path::Path;

pub use crate::backend::file::format::{ClientLine, Head, Line, PushLine};
pub use crate::backend::file::scan::Scanned;

/// One record of a scan: the line, its byte offset, its length without
/// the line ending.
pub type ScannedLine = (Line, u64, usize);

/// An NDJSON spool line (without its line ending), as every reader of the
/// main and dead-letter files reads it, with its batch frame (`tx`).
pub fn ndjson_line(bytes: &[u8]) -> std::result::Result<(Line, Option<u64>), String> {
    format::parse_line_tx(bytes)
}

/// [`ndjson_line`] as the index reads it: the payload checked, not kept.
pub fn ndjson_line_without_payload(bytes: &[u8]) -> std::result::Result<Line, String> {
    format::parse_line_without_payload(bytes)
}

/// A line of the `.delivered` file.
pub fn ndjson_delivered_line(bytes: &[u8]) -> std::result::Result<Line, String> {
    format::parse_delivered(bytes)
}

/// [`ndjson_delivered_line`] as the index reads it.
pub fn ndjson_delivered_line_without_payload(bytes: &[u8]) -> std::result::Result<Line, String> {
    format::parse_delivered_without_payload(bytes)
}

/// A line as compaction checks it (op and id only).
pub fn ndjson_check_line(bytes: &[u8]) -> std::result::Result<Head, String> {
    format::check_line(bytes)
}

/// The line `spool` writes for `line` (with its newline): a `put` line
/// with the delivery it records, if any, a `done`, push-state, client or
/// eviction-count line.
pub fn ndjson_write_line(line: &Line) -> Vec<u8> {
    let mut out = Vec::new();
    match line {
        Line::Put { item, dead_at, .. } => {
            let delivery = line.delivery().ok().flatten();
            format::write_put_line(&mut out, item, *dead_at, delivery.as_ref());
        }
        Line::Done { id, delivery: None } => format::write_done(&mut out, *id),
        Line::Done {
            id,
            delivery: Some(d),
        } => format::write_done_delivered(&mut out, *id, d),
        Line::Push(p) => format::write_push(&mut out, p),
        Line::Client(c) => format::write_client(&mut out, c),
        Line::Evicted(n) => format::write_evicted(&mut out, *n),
    }
    out
}

/// Scan NDJSON text from `reader` as a spool file's reader does, line by
/// line, collecting the records.
pub fn ndjson_scan(reader: impl std::io::BufRead) -> Result<(Vec<ScannedLine>, Scanned)> {
    let mut lines = Vec::new();
    let scanned = scan::scan_with(
        Path::new("fuzz.ndjson"),
        reader,
        0,
        0,
        false,
        format::parse_line,
        |line, off, len| lines.push((line, off, len)),
    )?;
    Ok((lines, scanned))
}

/// Scan the spool file `file` (at `path`) from its start as opening a
/// spool does, reading through `io`: an unfinished batch at its end left
/// out, the lines parsed on several threads (`parallel`) or in one pass.
pub fn ndjson_scan_file(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    parallel: bool,
) -> Result<(Vec<ScannedLine>, Scanned)> {
    let mut lines = Vec::new();
    let apply = |line, off, len| lines.push((line, off, len));
    let scanned = if parallel {
        scan::scan_file_parallel(path, io, file, format::parse_line, apply)?
    } else {
        let len = file
            .metadata()
            .map_err(|e| crate::Error::io(path, "inspect", e))?
            .len();
        scan::scan_tail_with(path, io, file, 0, len, 0, false, format::parse_line, apply)?
    };
    Ok((lines, scanned))
}

/// Why [`gunzip`] gave nothing back.
#[cfg(feature = "serve")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GunzipError {
    /// The body inflates to more than the limit.
    TooLarge,
    /// The memory budget would not hold it.
    OverBudget,
    /// Not gzip, or damaged: the reason.
    Invalid(String),
}

/// Inflate a gzip request body as `spool serve` does, keeping at most
/// `limit` bytes, against a memory budget of `budget` bytes.
#[cfg(feature = "serve")]
pub fn gunzip(data: &[u8], limit: u64, budget: usize) -> std::result::Result<Vec<u8>, GunzipError> {
    use crate::serve::http::{Gunzip, Reservation};
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(budget));
    let mut res = Reservation::of_budget(semaphore, budget);
    crate::serve::http::gunzip(data, limit, &mut res).map_err(|e| match e {
        Gunzip::TooLarge => GunzipError::TooLarge,
        Gunzip::Refused(_) => GunzipError::OverBudget,
        Gunzip::Failed(why) => GunzipError::Invalid(why),
    })
}

/// A refusal of `spool serve`: the HTTP status and the error message.
#[cfg(feature = "serve")]
pub type Refusal = (u16, String);

#[cfg(feature = "serve")]
fn refusal(a: crate::serve::http::Answer) -> Refusal {
    (a.status, a.note.unwrap_or_default())
}

#[cfg(feature = "serve")]
fn header_value(value: Option<&[u8]>) -> Option<hyper::header::HeaderValue> {
    // Bytes that no header value may hold never reach a handler.
    value.and_then(|v| hyper::header::HeaderValue::from_bytes(v).ok())
}

/// The key `POST /v1/items` takes from an `Idempotency-Key` header with
/// these bytes (`None`: no header, or bytes HTTP refuses in a header).
#[cfg(feature = "serve")]
pub fn idempotency_key(
    value: Option<&[u8]>,
    max_key_len: usize,
) -> std::result::Result<String, Refusal> {
    let v = header_value(value);
    crate::serve::http::idempotency_key(v.as_ref(), max_key_len).map_err(refusal)
}

/// Whether a body with this `Content-Encoding` header is gzip (`true`)
/// or taken as it is (`false`).
#[cfg(feature = "serve")]
pub fn content_encoding(value: Option<&[u8]>) -> std::result::Result<bool, Refusal> {
    use crate::serve::http::Encoding;
    let v = header_value(value);
    crate::serve::http::content_encoding(v.as_ref())
        .map(|e| e == Encoding::Gzip)
        .map_err(refusal)
}

/// The client id of a `GET /v1/clients/{client_id}` path.
#[cfg(feature = "serve")]
pub fn client_of_path(path: &str) -> std::result::Result<String, Refusal> {
    crate::serve::http::client_of_path(path).map_err(refusal)
}
