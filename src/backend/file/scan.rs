//! Reading an NDJSON spool file line by line.
//!
//! The scanner streams (memory grows with what the caller keeps, not with
//! the file) and sorts damage into three kinds:
//!
//! * A *torn write* — an append interrupted by a crash — is a malformed
//!   last line that lacks its newline, or a run of NUL bytes at the end
//!   (what a crash can leave when the file grew but its data never reached
//!   the disk). It is reported, not applied, and cut off by the next
//!   writer. A torn write never ends with a newline: a complete,
//!   newline-terminated malformed line is never torn, wherever it is.
//! * An *unfinished batch* — a multi-line append cut short — is found by
//!   [`unfinished_batch`] before the lines are walked: its lines are left
//!   out and reported like a torn tail, so a batch is seen whole or not at
//!   all (see `format::frame_batch`).
//! * *Corruption*: any other malformed line stops the scan with an error
//!   that names its line number.
//!
//! A file that is not a spool at all — one whose first non-blank byte is
//! not `{`, or whose first line is not a spool record — is refused with
//! [`Error::NotASpool`] before anything is applied, so that a mistyped
//! `--spool` path can never be "repaired" into a spool.

#[cfg(test)]
use super::format::Line;
use super::format::{self, parse_line, parse_line_tx};
use super::io::{read_some, FileIo, ReadFrom};
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
pub struct Scanned {
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
pub(crate) enum Class<T> {
    Blank,
    /// Nothing but NUL bytes (and whitespace).
    Nul,
    Parsed(T),
    Bad(BadLine),
}

/// A line that does not parse.
pub(crate) struct BadLine {
    pub(crate) reason: String,
    /// Its first byte that is neither whitespace nor NUL is `{`.
    brace: bool,
    /// It could be the beginning of a record that a crash cut short: it
    /// starts with (a prefix of) `{"op"`.
    record_prefix: bool,
}

impl BadLine {
    fn of(content: &[u8], reason: String) -> BadLine {
        let start = content
            .iter()
            .position(|b| !b.is_ascii_whitespace() && *b != 0)
            .unwrap_or(content.len());
        let text = &content[start..];
        const HEAD: &[u8] = br#"{"op""#;
        let n = text.len().min(HEAD.len());
        BadLine {
            reason,
            brace: text.first() == Some(&b'{'),
            record_prefix: !text.is_empty() && text[..n] == HEAD[..n],
        }
    }
}

/// A line's content without its line ending (`\n`, `\r\n`), and whether
/// it had a newline.
pub(crate) fn content_of(raw: &[u8]) -> (&[u8], bool) {
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

pub(crate) fn classify<T>(
    content: &[u8],
    parse: impl FnOnce(&[u8]) -> std::result::Result<T, String>,
) -> Class<T> {
    if content.iter().all(|b| b.is_ascii_whitespace()) {
        return Class::Blank;
    }
    if content.iter().all(|b| *b == 0 || b.is_ascii_whitespace()) {
        return Class::Nul;
    }
    match parse(content) {
        Ok(t) => Class::Parsed(t),
        Err(reason) => Class::Bad(BadLine::of(content, reason)),
    }
}

/// The rules that need a line's neighbours — a run of NUL bytes is a torn
/// tail only when nothing but blank lines, more NULs or a last line
/// without its newline follows it; the first line decides whether the
/// file is a spool at all — and the counting.
struct Walk<'p> {
    path: &'p Path,
    out: Scanned,
    offset: u64,
    line_no: u64,
    bad: Option<Bad>,
    /// No line but blank ones has been seen since the start of the file.
    at_start: bool,
    /// The content before `start` lacks its final newline: a first line
    /// that is only that newline ends the line before (and is no line of
    /// its own, as a scan from the start of the file counts it).
    continues: bool,
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
            at_start: start == 0,
            continues: prev_needs_newline,
        }
    }

    fn not_a_spool(&self, detail: &str) -> Error {
        Error::NotASpool {
            path: self.path.to_path_buf(),
            detail: detail.to_string(),
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
        let ends_the_line_before =
            std::mem::take(&mut self.continues) && matches!(class, Class::Blank);
        if !ends_the_line_before {
            self.line_no += 1;
        }
        let torn_may_follow = matches!(class, Class::Blank | Class::Nul)
            || matches!(class, Class::Bad(_) if !has_newline);
        if let (Some(b), false) = (&self.bad, torn_may_follow) {
            // A line after the NUL bytes: they were no torn tail.
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
            Class::Nul => {
                self.bad.get_or_insert_with(|| Bad {
                    line: self.line_no,
                    offset: line_start,
                    reason: "a run of NUL bytes where data never reached the disk".into(),
                });
            }
            Class::Parsed(t) => {
                self.at_start = false;
                apply(t, line_start, content_len);
                self.out.records += 1;
                self.out.end = self.offset;
                self.out.lines = self.line_no;
                self.out.needs_newline = !has_newline;
            }
            Class::Bad(bad) => {
                if self.at_start && !bad.brace {
                    return Err(self.not_a_spool("it does not start with a JSON object"));
                }
                if self.at_start && (has_newline || !bad.record_prefix) {
                    return Err(self.not_a_spool(&format!(
                        "its first line is not a spool record ({})",
                        bad.reason
                    )));
                }
                if has_newline {
                    // Complete lines are never torn writes.
                    return Err(Error::corrupt(self.path, Some(self.line_no), bad.reason));
                }
                self.bad.get_or_insert(Bad {
                    line: self.line_no,
                    offset: line_start,
                    reason: bad.reason,
                });
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
#[cfg(test)]
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

/// A scan (`scan`, in tests) with another line parser: `parse` judges each non-blank line
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

/// Where the unfinished batch at the end of `file` begins, if the file
/// ends in one: the last line of the file (its last complete line, or a
/// last line without newline that parses) carries a `tx` field. Only the
/// part from `start` (a line start) to `len` is looked at; nothing before
/// `start` is read but the batch's first line, which must be at a line
/// start and carry the same `tx`, so that a stray field can never make a
/// reader drop committed lines — anything that does not add up is
/// corruption, and nothing is cut.
///
/// Reads backwards from the end: the cost is the size of the last lines,
/// not of the file.
pub(crate) fn unfinished_batch(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    start: u64,
    len: u64,
) -> Result<Option<u64>> {
    let Some((line_start, line)) = last_record(path, io, file, start, len)? else {
        return Ok(None);
    };
    let Ok((_, Some(tx))) = parse_line_tx(&line) else {
        return Ok(None);
    };
    let bad = |detail: String| Err(Error::corrupt(path, None, detail));
    if tx < start || tx > line_start {
        return bad(format!(
            "the last line (at byte {line_start}) belongs to a batch said to start at byte {tx}, which is not before it"
        ));
    }
    let first = if tx == line_start {
        Some(line)
    } else {
        let at_line_start = tx == 0 || read_at(path, io, file, tx - 1, 1)? == b"\n";
        let end = find_forward(path, io, file, tx, line_start, b'\n')?;
        match (at_line_start, end) {
            (true, Some(end)) => {
                let raw = read_at(path, io, file, tx, (end - tx) as usize)?;
                Some(content_of(&raw).0.to_vec())
            }
            _ => None,
        }
    };
    match first.map(|l| parse_line_tx(&l)) {
        Some(Ok((_, Some(t)))) if t == tx => Ok(Some(tx)),
        _ => bad(format!(
            "the last line (at byte {line_start}) belongs to a batch said to start at byte {tx}, but no line of that batch starts there"
        )),
    }
}

/// The last line of `file[start..len]` that holds a record: the trailing
/// line without newline when it parses, else the last complete line that
/// is neither blank nor NUL bytes. `None` when there is none, or when
/// that line does not parse (the forward scan reports it).
///
/// Filler (blank lines, NUL bytes) is stepped over as one run, not line
/// by line: the bytes read are at most twice the run and the two lines
/// looked at, however many lines the run holds.
fn last_record(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    start: u64,
    len: u64,
) -> Result<Option<(u64, Vec<u8>)>> {
    let filler = |b: u8| b == 0 || b.is_ascii_whitespace();
    let mut end = len;
    loop {
        // The last byte before `end` that is not filler, and its line.
        let Some(last) = find_backward(path, io, file, start, end, |c| {
            c.iter().rposition(|&b| !filler(b))
        })?
        else {
            return Ok(None);
        };
        let line_start = find_backward(path, io, file, start, last, |c| memchr::memrchr(b'\n', c))?
            .map_or(start, |p| p + 1);
        let newline = find_forward(path, io, file, last + 1, len, b'\n')?;
        let line_end = newline.unwrap_or(len);
        let raw = read_at(path, io, file, line_start, (line_end - line_start) as usize)?;
        let (content, _) = content_of(&raw);
        if parse_line(content).is_ok() {
            return Ok(Some((line_start, content.to_vec())));
        }
        if newline.is_some() {
            return Ok(None);
        }
        // A trailing line without newline that does not parse (a torn
        // write): the record is the complete line before it, if any.
        end = line_start;
    }
}

fn read_at(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    let mut buf = vec![0; len];
    super::io::read_exact_at(io, file, &mut buf, offset).map_err(|e| Error::io(path, "read", e))?;
    Ok(buf)
}

/// Chunk size of the backward and forward byte searches.
const SEARCH_CHUNK: u64 = 64 << 10;

/// The offset of the last byte in `file[from..to]` that `find` finds in
/// a chunk (it returns the byte's index in the chunk, as `memrchr` does).
fn find_backward(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    from: u64,
    to: u64,
    find: impl Fn(&[u8]) -> Option<usize>,
) -> Result<Option<u64>> {
    let mut hi = to;
    while hi > from {
        let lo = hi.saturating_sub(SEARCH_CHUNK).max(from);
        let chunk = read_at(path, io, file, lo, (hi - lo) as usize)?;
        if let Some(i) = find(&chunk) {
            return Ok(Some(lo + i as u64));
        }
        hi = lo;
    }
    Ok(None)
}

/// The offset of the first `byte` in `file[from..to]`.
fn find_forward(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    from: u64,
    to: u64,
    byte: u8,
) -> Result<Option<u64>> {
    let mut lo = from;
    while lo < to {
        let hi = (lo + SEARCH_CHUNK).min(to);
        let chunk = read_at(path, io, file, lo, (hi - lo) as usize)?;
        if let Some(i) = memchr::memchr(byte, &chunk) {
            return Ok(Some(lo + i as u64));
        }
        lo = hi;
    }
    Ok(None)
}

/// What an unfinished batch looks like as a torn tail: `line` is its
/// first line's number, `offset` where it starts, `len` the file length.
pub(crate) fn unfinished_tail(line: u64, offset: u64, len: u64) -> TornTail {
    TornTail {
        line,
        offset,
        len: len - offset,
        reason: "unfinished batch: a multi-line write was interrupted before its last line".into(),
    }
}

/// Scan `file[start..len]` (open for reading), as [`scan_with`] does,
/// leaving out an unfinished batch at its end, which is reported as the
/// torn tail. Reads go through `io`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn scan_tail_with<T>(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    start: u64,
    len: u64,
    start_line: u64,
    prev_needs_newline: bool,
    parse: impl FnMut(&[u8]) -> std::result::Result<T, String>,
    apply: impl FnMut(T, u64, usize),
) -> Result<Scanned> {
    let limit = unfinished_batch(path, io, file, start, len)?.unwrap_or(len);
    let reader = std::io::BufReader::with_capacity(
        1 << 16,
        ReadFrom {
            io,
            file,
            pos: start,
            end: limit,
        },
    );
    let mut s = scan_with(
        path,
        reader,
        start,
        start_line,
        prev_needs_newline,
        parse,
        apply,
    )?;
    if limit < len && s.torn.is_none() {
        s.torn = Some(unfinished_tail(s.lines + 1, limit, len));
    }
    Ok(s)
}

/// How much of a first line [`check_head`] reads.
const HEAD_LINE_MAX: usize = 1 << 20;

/// Refuse a file that is not a spool, reading only its first line (what
/// every scan from the start would find first, and fail on, anyway):
/// openers call it before they create a companion file, so that a
/// mistyped `--spool` path gets nothing written beside it either.
pub(crate) fn check_head(path: &Path, io: &dyn FileIo, file: &std::fs::File) -> Result<()> {
    let mut walk = Walk::new(path, 0, 0, false);
    let mut line = Vec::new();
    let mut offset = 0u64;
    let mut chunk = vec![0u8; 4096];
    loop {
        let n = read_some(io, file, &mut chunk, offset).map_err(|e| Error::io(path, "read", e))?;
        let got = &chunk[..n];
        let nl = memchr::memchr(b'\n', got);
        line.extend_from_slice(&got[..nl.map_or(n, |i| i + 1)]);
        offset += n as u64;
        if nl.is_none() && n > 0 {
            if line.len() < HEAD_LINE_MAX {
                continue;
            }
            // A very long first line: judge it by its first byte only
            // and leave the rest to the full read.
            let first = line.iter().find(|b| !b.is_ascii_whitespace() && **b != 0);
            return match first {
                Some(b'{') | None => Ok(()),
                Some(_) => Err(walk.not_a_spool("it does not start with a JSON object")),
            };
        }
        let (content, has_newline) = content_of(&line);
        let class = classify(content, parse_line);
        if matches!(class, Class::Blank) && has_newline {
            line.clear();
            offset -= (n - nl.map_or(n, |i| i + 1)) as u64;
            continue;
        }
        // Only the verdict on the file as a whole counts here; damage
        // further on is for the full read to report.
        return match walk.step(
            line.len() as u64,
            has_newline,
            content.len(),
            class,
            &mut |_, _, _| {},
        ) {
            Err(e @ Error::NotASpool { .. }) => Err(e),
            _ => Ok(()),
        };
    }
}

/// Bytes per block of [`scan_file_parallel`]. Up to twice as many
/// blocks as parsing threads are in flight, each with its lines parsed
/// (about as many bytes again): with 1 MiB blocks that was ~6 MiB of a
/// rebuild's peak, with 256 KiB ~1.5 MiB, no slower.
const BLOCK: usize = 256 << 10;

/// [`scan_with`] over a whole file (from byte 0), with the lines parsed on
/// several threads: the file is read in blocks cut at line ends, the
/// blocks are parsed in parallel, and the results are walked and applied
/// in file order, so `apply` sees exactly what [`scan_with`] would show
/// it. Memory holds a few blocks at a time. An unfinished batch at the
/// end is left out and reported as the torn tail, as [`scan_tail_with`] does.
pub(crate) fn scan_file_parallel<T: Send>(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    parse: fn(&[u8]) -> std::result::Result<T, String>,
    apply: impl FnMut(T, u64, usize),
) -> Result<Scanned> {
    let len = super::file_len(file, path)?;
    let limit = unfinished_batch(path, io, file, 0, len)?.unwrap_or(len);
    let mut s = scan_blocks_parallel(path, io, file, BLOCK, limit, parse, apply)?;
    if limit < len && s.torn.is_none() {
        s.torn = Some(unfinished_tail(s.lines + 1, limit, len));
    }
    Ok(s)
}

/// One parsed line of a block: raw length, newline, content length, class.
type Parsed<T> = (usize, bool, usize, Class<T>);

fn scan_blocks_parallel<T: Send>(
    path: &Path,
    io: &dyn FileIo,
    file: &std::fs::File,
    block: usize,
    limit: u64,
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
            io,
            file,
            pos: 0,
            limit,
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
    io: &'f dyn FileIo,
    file: &'f std::fs::File,
    pos: u64,
    /// Nothing at or after this offset is read.
    limit: u64,
    carry: Vec<u8>,
    block: usize,
}

impl Blocks<'_> {
    /// The next block, read into `buf` (a spare buffer, or a new one).
    fn next(&mut self, mut buf: Vec<u8>) -> std::io::Result<Option<Vec<u8>>> {
        buf.clear();
        buf.extend_from_slice(&self.carry);
        self.carry.clear();
        loop {
            let start = buf.len();
            let want = (self.limit.saturating_sub(self.pos)).min(self.block as u64) as usize;
            buf.resize(start + want, 0);
            let n = read_some(self.io, self.file, &mut buf[start..], self.pos)?;
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

/// Where the unfinished move at the end of a companion file (`path`,
/// `file`: dead letters or delivered items) begins, if it ends in one: its
/// last record carries `"at"` and `"ino"` (see `format::stamp_at`) naming
/// the main file (`main_path`, `main_file`, inode `main_ino`) and the byte
/// where the move's part of it starts, and that part is not there as a
/// committed batch. A main file replaced since (another inode: a
/// compaction, which only runs on settled files) committed it. The move's
/// lines are one batch, so its start is the `tx` of the line before the
/// last when that line belongs to it, else the last line's start.
pub(crate) fn unfinished_move(
    io: &dyn FileIo,
    path: &Path,
    file: &std::fs::File,
    main_path: &Path,
    main_file: &std::fs::File,
    main_ino: u64,
) -> Result<Option<u64>> {
    let len = super::file_len(file, path)?;
    let Some((line_start, line)) = last_record(path, io, file, 0, len)? else {
        return Ok(None);
    };
    let Some((at, ino)) = format::line_at(&line) else {
        return Ok(None);
    };
    if ino != main_ino || main_commits(io, main_path, main_file, at)? {
        return Ok(None);
    }
    let start = match last_record(path, io, file, 0, line_start)? {
        Some((_, prev)) if format::line_at(&prev) == Some((at, ino)) => {
            match parse_line_tx(&prev) {
                Ok((_, Some(tx))) if tx <= line_start => tx,
                _ => line_start,
            }
        }
        _ => line_start,
    };
    Ok(Some(start))
}

/// Whether the main file holds a committed batch that starts at byte `at`
/// or later: a record past `at` that is not part of an unfinished batch.
fn main_commits(io: &dyn FileIo, path: &Path, file: &std::fs::File, at: u64) -> Result<bool> {
    let len = super::file_len(file, path)?;
    if len <= at {
        return Ok(false);
    }
    let end = unfinished_batch(path, io, file, at, len)?.unwrap_or(len);
    Ok(last_record(path, io, file, at, end)?.is_some())
}

#[cfg(test)]
mod tests;
