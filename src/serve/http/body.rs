//! Reading a request body within its limits: `Content-Encoding`, the
//! bytes as received, and gzip inflated chunk by chunk, all held against
//! the memory budget.

use super::budget::{append, Refused, Reservation};
use super::{Answer, Seen, Shared};
use http_body_util::BodyExt as _;
use hyper::body::{Body as _, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::Request;
use std::io::Read as _;

/// Bodies above this size are inflated and parsed on the blocking pool.
pub(super) const BLOCKING_ABOVE: usize = 256 << 10;

/// Deflate's largest expansion: no gzip body inflates to more than this
/// many times its size (plus a little), which decides, before
/// inflating, whether it may grow past [`BLOCKING_ABOVE`].
const DEFLATE_MAX_RATIO: usize = 1032;

/// Bytes inflated at a time.
const INFLATE_CHUNK: usize = 64 << 10;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    Identity,
    Gzip,
}

/// The body's encoding, from its `Content-Encoding` header: none,
/// `identity` or empty, else `gzip` or `x-gzip` (any case, blanks around
/// it); anything else is 415.
pub(crate) fn content_encoding(value: Option<&HeaderValue>) -> Result<Encoding, Answer> {
    let Some(v) = value else {
        return Ok(Encoding::Identity);
    };
    match v.to_str().map(|s| s.trim().to_ascii_lowercase()) {
        Ok(s) if s.is_empty() || s == "identity" => Ok(Encoding::Identity),
        Ok(s) if s == "gzip" || s == "x-gzip" => Ok(Encoding::Gzip),
        _ => Err(Answer::error(
            415,
            "unsupported Content-Encoding (send gzip or none)",
        )),
    }
}

/// A limit on a body, and how a 413 names it.
pub(crate) struct Limit {
    /// Most bytes, once decompressed.
    pub(crate) bytes: u64,
    /// What is limited: "request body", "payload".
    pub(crate) what: &'static str,
    /// The option that sets it: "--max-body", "--max-payload".
    pub(crate) flag: &'static str,
}

/// Read the body: at most `max_body` bytes as received and at most
/// `limit` once inflated, holding the memory budget for what it keeps.
pub(crate) async fn read_body(
    shared: &Shared,
    req: Request<Incoming>,
    limit: &Limit,
    seen: &mut Seen,
) -> Result<Vec<u8>, Answer> {
    let encoding = content_encoding(req.headers().get(header::CONTENT_ENCODING))?;
    let over = |l: &Limit, inflated: bool| {
        Answer::error(
            413,
            format!(
                "{} is over the limit of {} bytes ({}){}",
                l.what,
                l.bytes,
                l.flag,
                if inflated { " once decompressed" } else { "" }
            ),
        )
    };
    let body_limit = Limit {
        bytes: shared.max_body,
        what: "request body",
        flag: "--max-body",
    };
    let wire = match encoding {
        Encoding::Identity => limit,
        Encoding::Gzip => &body_limit,
    };
    let wire_max = usize::try_from(wire.bytes).unwrap_or(usize::MAX);
    let mut buf: Vec<u8> = Vec::new();
    if let Some(declared) = req.body().size_hint().exact() {
        if declared > wire.bytes {
            return Err(over(wire, false));
        }
        // Known: hold it and allocate it once.
        let declared = declared as usize;
        seen.reservation(shared)
            .take(declared)
            .map_err(Refused::answer)?;
        buf.reserve_exact(declared);
    }
    let deadline = tokio::time::Instant::now() + shared.request_timeout;
    let mut body = req.into_body();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err(Answer::error(
                    408,
                    "the request body did not arrive within the request timeout",
                ))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(Answer::error(
                    400,
                    format!("cannot read the request body: {e}"),
                ))
            }
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > wire.bytes {
                seen.bytes_in = (buf.len() + data.len()) as u64;
                return Err(over(wire, false));
            }
            append(&mut buf, &data, wire_max, seen.reservation(shared)).map_err(Refused::answer)?;
        }
    }
    seen.bytes_in = buf.len() as u64;
    seen.body_read = true;
    match encoding {
        Encoding::Identity => Ok(buf),
        Encoding::Gzip => {
            let max = limit.bytes;
            let mut res = seen.held.take().unwrap_or_else(|| Reservation::new(shared));
            let compressed = buf.capacity();
            let (inflated, mut res) =
                if buf.len().saturating_mul(DEFLATE_MAX_RATIO) > BLOCKING_ABOVE {
                    let back = tokio::task::spawn_blocking(move || {
                        let r = gunzip(&buf, max, &mut res);
                        (r, res)
                    })
                    .await;
                    match back {
                        Ok(b) => b,
                        Err(_) => return Err(Answer::error(500, "the request was not processed")),
                    }
                } else {
                    let r = gunzip(&buf, max, &mut res);
                    drop(buf);
                    (r, res)
                };
            // The compressed bytes are gone.
            res.release(compressed);
            seen.held = Some(res);
            match inflated {
                Ok(b) => Ok(b),
                Err(Gunzip::TooLarge) => Err(over(limit, true)),
                Err(Gunzip::Refused(r)) => Err(r.answer()),
                Err(Gunzip::Failed(e)) => {
                    Err(Answer::error(400, format!("invalid gzip body: {e}")))
                }
            }
        }
    }
}

pub(crate) enum Gunzip {
    TooLarge,
    Refused(Refused),
    Failed(String),
}

/// Inflate `data`, keeping at most `limit` bytes of output and holding
/// the memory budget for the output as it grows.
pub(crate) fn gunzip(data: &[u8], limit: u64, res: &mut Reservation) -> Result<Vec<u8>, Gunzip> {
    let max = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut out = Vec::new();
    let mut dec = flate2::read::MultiGzDecoder::new(data);
    let mut chunk = vec![0u8; INFLATE_CHUNK];
    loop {
        let n = match dec.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Gunzip::Failed(e.to_string())),
        };
        if out.len() + n > max {
            return Err(Gunzip::TooLarge);
        }
        append(&mut out, &chunk[..n], max, res).map_err(Gunzip::Refused)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    fn reservation(total: usize) -> Reservation {
        Reservation::of_budget(Arc::new(Semaphore::new(total)), total)
    }

    #[test]
    fn gunzip_stops_at_the_limit_and_holds_what_it_inflated() {
        use flate2::write::GzEncoder;
        use std::io::Write as _;
        let mut e = GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(&vec![0u8; 1 << 20]).unwrap();
        let bomb = e.finish().unwrap();
        let mut res = reservation(4 << 20);
        assert!(matches!(
            gunzip(&bomb, 1000, &mut res),
            Err(Gunzip::TooLarge)
        ));
        let mut res = reservation(4 << 20);
        let out = gunzip(&bomb, 1 << 20, &mut res).ok().unwrap();
        assert_eq!(out.len(), 1 << 20);
        assert_eq!(
            res.held(),
            out.capacity(),
            "the budget holds what was inflated"
        );
        assert!(matches!(
            gunzip(&bomb[..bomb.len() / 2], 1 << 20, &mut reservation(4 << 20)),
            Err(Gunzip::Failed(_))
        ));
        assert!(matches!(
            gunzip(b"not gzip", 100, &mut reservation(100)),
            Err(Gunzip::Failed(_))
        ));
        // A budget smaller than the inflated body: refused, never the
        // whole limit up front.
        assert!(matches!(
            gunzip(&bomb, 1 << 20, &mut reservation(100 << 10)),
            Err(Gunzip::Refused(Refused::Never { .. }))
        ));
        let shared_budget = Arc::new(Semaphore::new(2 << 20));
        let mut other = Reservation::of_budget(shared_budget.clone(), 2 << 20);
        other.take(3 << 19).unwrap();
        let mut mine = Reservation::of_budget(shared_budget, 2 << 20);
        assert!(matches!(
            gunzip(&bomb, 1 << 20, &mut mine),
            Err(Gunzip::Refused(Refused::Busy))
        ));
        drop(other);
        assert!(gunzip(&bomb, 1 << 20, &mut mine).is_ok());
    }
}
