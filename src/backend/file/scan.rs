//! Reading an NDJSON spool file line by line.
//!
//! The scanner streams (memory grows with what the caller keeps, not with
//! the file) and applies the reference's rule for damage: a malformed line
//! that is the last non-blank line of the file is a *torn write* — an
//! append interrupted by a crash — and is reported, not applied; a
//! malformed line anywhere else is *corruption* and stops the scan with an
//! error that names its line number.

use super::format::{parse_line, Line};
use crate::error::{Error, Result};
use std::io::BufRead;
use std::path::Path;

/// A malformed last line left by an interrupted append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset where the torn line starts (the file is cut here).
    pub offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub len: u64,
    /// Why the line does not parse.
    pub reason: String,
}

/// What a scan found.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scanned {
    /// Offset just past the last byte that belongs to valid content (the
    /// start of the torn tail, if any).
    pub end: u64,
    /// Lines up to `end`.
    pub lines: u64,
    /// Op lines (put/done) seen.
    pub records: u64,
    /// A torn trailing line, if any.
    pub torn: Option<TornTail>,
    /// True when the valid content does not end with a newline (a
    /// complete last record whose newline was never written).
    pub needs_newline: bool,
}

struct Bad {
    line: u64,
    offset: u64,
    reason: String,
}

/// Scan `reader`, which starts at byte `start` of the file, line number
/// `start_line` (lines before it), calling `apply` for every valid record
/// in order. `prev_newline` says whether the content before `start` ends
/// with a newline.
pub(crate) fn scan(
    path: &Path,
    reader: impl BufRead,
    start: u64,
    start_line: u64,
    prev_needs_newline: bool,
    mut apply: impl FnMut(Line),
) -> Result<Scanned> {
    scan_with(
        path,
        reader,
        start,
        start_line,
        prev_needs_newline,
        parse_line,
        |line, _, _| apply(line),
    )
}

/// [`scan`] with another line parser: `parse` judges each non-blank line
/// (an error is damage, as for [`parse_line`]), and `apply` gets what it
/// returned with the line's byte offset and its content (without the line
/// ending).
pub(crate) fn scan_with<T>(
    path: &Path,
    mut reader: impl BufRead,
    start: u64,
    start_line: u64,
    prev_needs_newline: bool,
    mut parse: impl FnMut(&[u8]) -> std::result::Result<T, String>,
    mut apply: impl FnMut(T, u64, &[u8]),
) -> Result<Scanned> {
    let mut out = Scanned {
        end: start,
        lines: start_line,
        needs_newline: prev_needs_newline,
        ..Scanned::default()
    };
    let mut offset = start;
    let mut line_no = start_line;
    let mut bad: Option<Bad> = None;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| Error::io(path, "read", e))?;
        if n == 0 {
            break;
        }
        let line_start = offset;
        offset += n as u64;
        line_no += 1;
        let has_newline = buf.last() == Some(&b'\n');
        let mut content = &buf[..];
        if has_newline {
            content = &content[..content.len() - 1];
        }
        if content.last() == Some(&b'\r') {
            content = &content[..content.len() - 1];
        }
        if content.iter().all(|b| b.is_ascii_whitespace()) {
            if bad.is_none() {
                out.end = offset;
                out.lines = line_no;
                out.needs_newline = !has_newline;
            }
            continue;
        }
        if let Some(b) = &bad {
            return Err(Error::corrupt(path, Some(b.line), b.reason.clone()));
        }
        match parse(content) {
            Ok(line) => {
                apply(line, line_start, content);
                out.records += 1;
                out.end = offset;
                out.lines = line_no;
                out.needs_newline = !has_newline;
            }
            Err(reason) => {
                bad = Some(Bad {
                    line: line_no,
                    offset: line_start,
                    reason,
                })
            }
        }
    }
    if let Some(b) = bad {
        out.torn = Some(TornTail {
            line: b.line,
            offset: b.offset,
            len: offset - b.offset,
            reason: b.reason,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &[u8]) -> Result<(Scanned, usize)> {
        let mut n = 0;
        let s = scan(Path::new("t.ndjson"), text, 0, 0, false, |_| n += 1)?;
        Ok((s, n))
    }

    const PUT: &str = r#"{"op":"put","id":1,"payload":"a","idempotencyKey":"","attempts":0}"#;

    #[test]
    fn clean_file() {
        let text = format!("{PUT}\n{{\"op\":\"done\",\"id\":1}}\n");
        let (s, n) = run(text.as_bytes()).unwrap();
        assert_eq!(n, 2);
        assert_eq!(s.end, text.len() as u64);
        assert_eq!(s.lines, 2);
        assert!(s.torn.is_none());
        assert!(!s.needs_newline);
    }

    #[test]
    fn torn_tail_is_reported_not_applied() {
        let text = format!("{PUT}\n{{\"op\":\"pu");
        let (s, n) = run(text.as_bytes()).unwrap();
        assert_eq!(n, 1);
        let t = s.torn.unwrap();
        assert_eq!(t.line, 2);
        assert_eq!(t.offset, PUT.len() as u64 + 1);
        assert_eq!(s.end, t.offset);
    }

    #[test]
    fn malformed_middle_line_is_corruption() {
        let text = format!("{PUT}\nnot json\n{PUT}\n");
        let e = run(text.as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Corrupt { line: Some(2), .. }), "{e}");
    }

    #[test]
    fn blank_lines_and_crlf_are_tolerated() {
        let text = format!("\n{PUT}\r\n   \n");
        let (s, n) = run(text.as_bytes()).unwrap();
        assert_eq!(n, 1);
        assert!(s.torn.is_none());
    }

    #[test]
    fn complete_last_line_without_newline_is_kept() {
        let (s, n) = run(PUT.as_bytes()).unwrap();
        assert_eq!(n, 1);
        assert!(s.needs_newline);
        assert!(s.torn.is_none());
    }

    #[test]
    fn torn_line_followed_by_blank_lines_is_still_torn() {
        let text = format!("{PUT}\n{{\"op\"\n\n  \n");
        let (s, _) = run(text.as_bytes()).unwrap();
        assert_eq!(s.torn.unwrap().line, 2);
    }
}
