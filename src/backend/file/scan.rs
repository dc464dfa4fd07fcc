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

/// What a line is on its own, before its neighbours are known.
enum Class<T> {
    Blank,
    Parsed(T),
    Bad(String),
}

/// A line's content without its line ending (`\n`, `\r\n`), and whether
/// it had a newline.
fn content_of(raw: &[u8]) -> (&[u8], bool) {
    let has_newline = raw.last() == Some(&b'\n');
    let mut content = raw;
    if has_newline {
        content = &content[..content.len() - 1];
    }
    if content.last() == Some(&b'\r') {
        content = &content[..content.len() - 1];
    }
    (content, has_newline)
}

fn classify<T>(
    content: &[u8],
    parse: impl FnOnce(&[u8]) -> std::result::Result<T, String>,
) -> Class<T> {
    if content.iter().all(|b| b.is_ascii_whitespace()) {
        return Class::Blank;
    }
    match parse(content) {
        Ok(t) => Class::Parsed(t),
        Err(reason) => Class::Bad(reason),
    }
}

/// The rules that need a line's neighbours — a malformed line is a torn
/// tail only when nothing but blank lines follows it — and the counting.
struct Walk<'p> {
    path: &'p Path,
    out: Scanned,
    offset: u64,
    line_no: u64,
    bad: Option<Bad>,
}

impl<'p> Walk<'p> {
    fn new(path: &'p Path, start: u64, start_line: u64, prev_needs_newline: bool) -> Walk<'p> {
        Walk {
            path,
            out: Scanned {
                end: start,
                lines: start_line,
                needs_newline: prev_needs_newline,
                ..Scanned::default()
            },
            offset: start,
            line_no: start_line,
            bad: None,
        }
    }

    /// The next line: `raw_len` bytes in all, `content_len` of them before
    /// its line ending.
    fn step<T>(
        &mut self,
        raw_len: u64,
        has_newline: bool,
        content_len: usize,
        class: Class<T>,
        apply: &mut impl FnMut(T, u64, usize),
    ) -> Result<()> {
        let line_start = self.offset;
        self.offset += raw_len;
        self.line_no += 1;
        if let (Some(b), false) = (&self.bad, matches!(class, Class::Blank)) {
            // A line after the malformed one: that one was no torn tail.
            return Err(Error::corrupt(self.path, Some(b.line), b.reason.clone()));
        }
        match class {
            Class::Blank => {
                if self.bad.is_none() {
                    self.out.end = self.offset;
                    self.out.lines = self.line_no;
                    self.out.needs_newline = !has_newline;
                }
            }
            Class::Parsed(t) => {
                apply(t, line_start, content_len);
                self.out.records += 1;
                self.out.end = self.offset;
                self.out.lines = self.line_no;
                self.out.needs_newline = !has_newline;
            }
            Class::Bad(reason) => {
                self.bad = Some(Bad {
                    line: self.line_no,
                    offset: line_start,
                    reason,
                })
            }
        }
        Ok(())
    }

    fn finish(mut self) -> Scanned {
        if let Some(b) = self.bad {
            self.out.torn = Some(TornTail {
                line: b.line,
                offset: b.offset,
                len: self.offset - b.offset,
                reason: b.reason,
            });
        }
        self.out
    }
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
/// returned with the line's byte offset and the length of its content
/// (without the line ending).
pub(crate) fn scan_with<T>(
    path: &Path,
    mut reader: impl BufRead,
    start: u64,
    start_line: u64,
    prev_needs_newline: bool,
    mut parse: impl FnMut(&[u8]) -> std::result::Result<T, String>,
    mut apply: impl FnMut(T, u64, usize),
) -> Result<Scanned> {
    let mut walk = Walk::new(path, start, start_line, prev_needs_newline);
    let mut one = |raw: &[u8], walk: &mut Walk| -> Result<()> {
        let (content, has_newline) = content_of(raw);
        let class = classify(content, &mut parse);
        walk.step(
            raw.len() as u64,
            has_newline,
            content.len(),
            class,
            &mut apply,
        )
    };
    // Lines are parsed where they lie in the reader's buffer; only a line
    // that straddles two buffer fills is copied.
    let mut straddling = Vec::new();
    loop {
        let chunk = reader.fill_buf().map_err(|e| Error::io(path, "read", e))?;
        if chunk.is_empty() {
            if !straddling.is_empty() {
                one(&straddling, &mut walk)?;
            }
            break;
        }
        let used = match memchr::memchr(b'\n', chunk) {
            Some(i) if straddling.is_empty() => {
                one(&chunk[..=i], &mut walk)?;
                i + 1
            }
            Some(i) => {
                straddling.extend_from_slice(&chunk[..=i]);
                one(&straddling, &mut walk)?;
                straddling.clear();
                i + 1
            }
            None => {
                straddling.extend_from_slice(chunk);
                chunk.len()
            }
        };
        reader.consume(used);
    }
    Ok(walk.finish())
}

/// Bytes per block of [`scan_file_parallel`].
const BLOCK: usize = 1 << 20;

/// [`scan_with`] over a whole file (from byte 0), with the lines parsed on
/// several threads: the file is read in blocks cut at line ends, the
/// blocks are parsed in parallel, and the results are walked and applied
/// in file order, so `apply` sees exactly what [`scan_with`] would show
/// it. Memory holds a few blocks at a time.
pub(crate) fn scan_file_parallel<T: Send>(
    path: &Path,
    file: &std::fs::File,
    parse: fn(&[u8]) -> std::result::Result<T, String>,
    apply: impl FnMut(T, u64, usize),
) -> Result<Scanned> {
    scan_blocks_parallel(path, file, BLOCK, parse, apply)
}

/// One parsed line of a block: raw length, newline, content length, class.
type Parsed<T> = (usize, bool, usize, Class<T>);

fn scan_blocks_parallel<T: Send>(
    path: &Path,
    file: &std::fs::File,
    block: usize,
    parse: fn(&[u8]) -> std::result::Result<T, String>,
    mut apply: impl FnMut(T, u64, usize),
) -> Result<Scanned> {
    use std::sync::{mpsc, Mutex};
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let (work_tx, work_rx) = mpsc::sync_channel::<(usize, Vec<u8>)>(workers);
    let work_rx = Mutex::new(work_rx);
    // A block's lines, or None when its parser panicked (so that the walk
    // stops instead of waiting for a block that never comes).
    let (done_tx, done_rx) = mpsc::channel::<(usize, Option<Vec<Parsed<T>>>, Vec<u8>)>();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let (work_rx, done_tx) = (&work_rx, done_tx.clone());
            scope.spawn(move || loop {
                let job = work_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
                let Ok((index, bytes)) = job else { break };
                let lines = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    parse_block(&bytes, parse)
                }))
                .ok();
                if done_tx.send((index, lines, bytes)).is_err() {
                    break;
                }
            });
        }
        drop(done_tx);

        let mut walk = Walk::new(path, 0, 0, false);
        let mut reader = Blocks {
            file,
            pos: 0,
            carry: Vec::new(),
            block,
        };
        let mut ready = std::collections::BTreeMap::new();
        // Block buffers go round: the parsers hand each one back.
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let (mut sent, mut walked, mut eof) = (0usize, 0usize, false);
        loop {
            while !eof && sent - walked < 2 * workers {
                match reader
                    .next(spare.pop().unwrap_or_default())
                    .map_err(|e| Error::io(path, "read", e))?
                {
                    Some(bytes) => {
                        if work_tx.send((sent, bytes)).is_err() {
                            return Err(Error::Internal("a parsing thread stopped".into()));
                        }
                        sent += 1;
                    }
                    None => eof = true,
                }
            }
            if walked == sent {
                break;
            }
            let (index, lines, bytes) = done_rx
                .recv()
                .map_err(|_| Error::Internal("a parsing thread stopped".into()))?;
            spare.push(bytes);
            let lines = lines.ok_or_else(|| Error::Internal("a line parser panicked".into()))?;
            ready.insert(index, lines);
            while let Some(lines) = ready.remove(&walked) {
                for (raw_len, has_newline, content_len, class) in lines {
                    walk.step(raw_len as u64, has_newline, content_len, class, &mut apply)?;
                }
                walked += 1;
            }
        }
        drop(work_tx);
        Ok(walk.finish())
    })
}

fn parse_block<T>(
    bytes: &[u8],
    parse: fn(&[u8]) -> std::result::Result<T, String>,
) -> Vec<Parsed<T>> {
    let mut lines = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
        let (raw, tail) = rest.split_at(end);
        let (content, has_newline) = content_of(raw);
        lines.push((
            raw.len(),
            has_newline,
            content.len(),
            classify(content, parse),
        ));
        rest = tail;
    }
    lines
}

/// A file read in blocks that end at a line end (the last block may end
/// without one). A line longer than a block makes a longer block.
struct Blocks<'f> {
    file: &'f std::fs::File,
    pos: u64,
    carry: Vec<u8>,
    block: usize,
}

impl Blocks<'_> {
    /// The next block, read into `buf` (a spare buffer, or a new one).
    fn next(&mut self, mut buf: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        buf.clear();
        buf.extend_from_slice(&self.carry);
        self.carry.clear();
        loop {
            let start = buf.len();
            buf.resize(start + self.block, 0);
            let n = loop {
                match self.file.read_at(&mut buf[start..], self.pos) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    r => break r?,
                }
            };
            buf.truncate(start + n);
            self.pos += n as u64;
            if n == 0 {
                return Ok((!buf.is_empty()).then_some(buf));
            }
            if let Some(i) = memchr::memrchr(b'\n', &buf[start..]) {
                self.carry.extend_from_slice(&buf[start + i + 1..]);
                buf.truncate(start + i + 1);
                return Ok(Some(buf));
            }
        }
    }
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

    /// What a scan saw, comparable across runs.
    fn outline(text: &[u8], capacity: usize) -> String {
        let mut ids = Vec::new();
        let r = scan_with(
            Path::new("t.ndjson"),
            std::io::BufReader::with_capacity(capacity, text),
            0,
            0,
            false,
            parse_line,
            |l, at, len| ids.push((format!("{l:?}"), at, len)),
        );
        format!(
            "{:?} {ids:?}",
            r.map(|s| (s.end, s.lines, s.records, s.torn, s.needs_newline))
        )
    }

    /// The same, scanned in parallel blocks of `block` bytes from a file.
    fn outline_parallel(text: &[u8], block: usize) -> String {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.ndjson");
        std::fs::write(&p, text).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        let mut ids = Vec::new();
        let r = scan_blocks_parallel(
            Path::new("t.ndjson"),
            &f,
            block,
            parse_line,
            |l, at, len| ids.push((format!("{l:?}"), at, len)),
        );
        format!(
            "{:?} {ids:?}",
            r.map(|s| (s.end, s.lines, s.records, s.torn, s.needs_newline))
        )
    }

    /// A text made of the fragments that `parts` picks: whole lines (LF and
    /// CRLF), blank ones, an unterminated line, and (the last one) a
    /// malformed line.
    fn assemble(parts: &[u8]) -> Vec<u8> {
        let fragments = [
            format!("{PUT}\n"),
            "\n".to_string(),
            format!("{PUT}\r\n"),
            "  \t \n".to_string(),
            "{\"op\":\"done\",\"id\":1}\n".to_string(),
            "{\"op\":\"pu".to_string(),
            "not json\n".to_string(),
        ];
        parts
            .iter()
            .flat_map(|&p| fragments[usize::from(p)].bytes())
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn lines_across_buffer_fills_scan_alike(
            parts in proptest::collection::vec(0u8..6, 0..12),
            capacity in 1usize..80,
        ) {
            let text = assemble(&parts);
            proptest::prop_assert_eq!(outline(&text, capacity), outline(&text, 1 << 16));
        }

        #[test]
        fn parallel_blocks_scan_alike(
            parts in proptest::collection::vec(0u8..7, 0..40),
            block in 1usize..200,
        ) {
            let text = assemble(&parts);
            proptest::prop_assert_eq!(outline_parallel(&text, block), outline(&text, 1 << 16));
        }
    }

    #[test]
    fn torn_line_followed_by_blank_lines_is_still_torn() {
        let text = format!("{PUT}\n{{\"op\"\n\n  \n");
        let (s, _) = run(text.as_bytes()).unwrap();
        assert_eq!(s.torn.unwrap().line, 2);
    }
}
