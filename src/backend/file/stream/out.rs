//! A streamed batch's output: each file's part of the batch, written in
//! framed chunks with writeback hints, cut back on failure; and the rows
//! an enqueue keeps of the lines it wrote, for the index to take in
//! without reading them back.

use crate::backend::file::index::Row;
use crate::backend::file::io::{parent_dir, write_all};
use crate::backend::file::{format, open_main, FileQueue, Tail};
use crate::backend::OpenMode;
use crate::error::{Error, Result};
use crate::item::ItemId;
use std::fs::File;
use std::path::PathBuf;

/// Bytes buffered before a write.
const CHUNK: usize = 64 << 10;

/// Bytes written between two hints to start writing back what was
/// written ([`crate::backend::file::io::FileIo::start_writeback`]): the disk works while
/// the batch goes on, and the one sync at the end of the batch finds most
/// of it done (that sync took 41 ms of a 0.2 s batch of 100,000 lines
/// without the hints).
const WRITEBACK_STEP: u64 = 1 << 20;

/// A line of the batch as the file holds it once its frame is known: the
/// row of a `put` line kept for the index (see [`OwnRows`]), where
/// the line starts and its length without the newline.
type Placed = Option<(Row, u64, usize)>;

/// One file's part of a streamed batch.
pub(super) struct BatchOut {
    path: PathBuf,
    /// The file, opened (for appending) at the first write.
    file: Option<File>,
    /// Where the batch's bytes begin.
    start: u64,
    /// Bytes not written yet: whole lines, the latest of which (from
    /// `last`) is held back, since it may be the batch's last line and so
    /// go without the frame.
    buf: Vec<u8>,
    /// Where the latest line starts in `buf`.
    last: Option<usize>,
    /// The index row that goes with the latest line, if it is to be taken
    /// in as it is written.
    last_row: Option<Row>,
    /// `,"tx":<offset of the first line>}` and the newline: how every
    /// line but the last ends.
    frame: Vec<u8>,
    written: u64,
    /// Bytes of `written` whose writeback was started.
    kicked: u64,
    /// A write was tried (it may have left bytes behind).
    tried: bool,
    pub(super) lines: u64,
    /// For a companion file's part: `,"at":<start of the main file's
    /// part>}` and the newline, how every line ends (see
    /// [`format::stamp_at`]).
    stamp: Option<Vec<u8>>,
}

impl BatchOut {
    pub(super) fn new(path: PathBuf, file: Option<File>, tail: &Tail) -> BatchOut {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        if tail.needs_newline {
            buf.push(b'\n');
        }
        let tx = tail.end + buf.len() as u64;
        BatchOut {
            path,
            file,
            start: tail.end,
            buf,
            last: None,
            last_row: None,
            frame: format!(",\"tx\":{tx}}}\n").into_bytes(),
            written: 0,
            kicked: 0,
            tried: false,
            lines: 0,
            stamp: None,
        }
    }

    /// A companion file's part of a batch whose main-file part starts at
    /// `at`: its lines are committed by that part (see
    /// [`format::stamp_at`]).
    pub(super) fn committed_by_main(mut self, main: &BatchOut, main_ino: u64) -> BatchOut {
        let mut stamp = format::stamp_field(main.start, main_ino).into_bytes();
        stamp.push(b'\n');
        self.stamp = Some(stamp);
        self
    }

    /// Add a line (with its newline).
    pub(super) fn push(&mut self, q: &FileQueue, line: &[u8]) -> Result<Placed> {
        self.push_with(q, None, |buf| buf.extend_from_slice(line))
    }

    /// Add the line `write` appends (with its newline), and `row`, its
    /// index row when it is to be taken in as it is written. The line
    /// before it now knows it is not the last: it gets the frame, and is
    /// returned with its row, if it has one.
    pub(super) fn push_with(
        &mut self,
        q: &FileQueue,
        row: Option<Row>,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Placed> {
        self.lines += 1;
        let mut placed = None;
        if let Some(at) = self.last.take() {
            if !self.buf.ends_with(b"}\n") {
                return Err(Error::Internal(
                    "a batch line that does not end in }".into(),
                ));
            }
            self.buf.truncate(self.buf.len() - 2);
            self.buf.extend_from_slice(&self.frame);
            placed = self.last_row.take().map(|r| {
                (
                    r,
                    self.start + self.written + at as u64,
                    self.buf.len() - at - 1,
                )
            });
            if self.buf.len() >= CHUNK {
                self.flush(q)?;
            }
        }
        let at = self.buf.len();
        write(&mut self.buf);
        if let Some(stamp) = &self.stamp {
            if !self.buf.ends_with(b"}\n") {
                return Err(Error::Internal(
                    "a batch line that does not end in }".into(),
                ));
            }
            self.buf.truncate(self.buf.len() - 2);
            self.buf.extend_from_slice(stamp);
        }
        self.last = Some(at);
        self.last_row = row;
        Ok(placed)
    }

    /// The latest line (with its newline), as it stands.
    pub(super) fn last_line(&self) -> &[u8] {
        self.last.map_or(&[], |at| &self.buf[at..])
    }

    /// The latest line's row with its place, that line being the last.
    pub(super) fn take_last(&mut self) -> Placed {
        let at = self.last?;
        let row = self.last_row.take()?;
        Some((
            row,
            self.start + self.written + at as u64,
            self.buf.len() - at - 1,
        ))
    }

    fn flush(&mut self, q: &FileQueue) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            let (f, created) = open_main(&self.path, OpenMode::Create)?;
            if created {
                let dir = parent_dir(&self.path);
                q.io.sync_dir(dir)
                    .map_err(|e| Error::io(dir, "fsync directory", e))?;
            }
            self.file = Some(f);
        }
        let f = self
            .file
            .as_mut()
            .ok_or_else(crate::backend::file::no_handle)?;
        self.tried = true;
        write_all(&*q.io, f, &self.buf).map_err(|e| Error::io(&self.path, "append to", e))?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        if self.written - self.kicked >= WRITEBACK_STEP {
            q.io.start_writeback(f, self.start + self.kicked, self.written - self.kicked);
            self.kicked = self.written;
        }
        Ok(())
    }

    /// Write the last line and sync; the end of the batch in the file
    /// (`start` when the batch had no line).
    pub(super) fn finish(&mut self, q: &FileQueue) -> Result<u64> {
        if self.last.take().is_none() {
            return Ok(self.start);
        }
        self.flush(q)?;
        let f = self
            .file
            .as_ref()
            .ok_or_else(crate::backend::file::no_handle)?;
        q.io.sync(f)
            .map_err(|e| Error::io(&self.path, "fsync", e))?;
        Ok(self.start + self.written)
    }

    /// Cut the file back to where the batch began.
    pub(super) fn abort(&mut self, q: &FileQueue) {
        if let (Some(f), true) = (&self.file, self.tried) {
            let _ = q.io.truncate(f, self.start).and_then(|()| q.io.sync(f));
        }
    }
}

/// The first `n` bytes of `rest`, stepped over.
fn take<'b>(rest: &mut &'b [u8], n: usize) -> &'b [u8] {
    let (head, tail) = rest.split_at(n.min(rest.len()));
    *rest = tail;
    head
}

/// A little-endian u32 at the start of `rest`, stepped over.
fn take_u32(rest: &mut &[u8]) -> u32 {
    let mut n = [0u8; 4];
    let head = take(rest, 4);
    n[..head.len()].copy_from_slice(head);
    u32::from_le_bytes(n)
}

/// Both files' parts of a batch enqueue.
pub(super) struct Lines<'a> {
    pub(super) main: &'a mut BatchOut,
    pub(super) dead: &'a mut BatchOut,
    pub(super) own: &'a mut OwnRows,
}

impl Lines<'_> {
    /// Add a line to the main file's part; `row` is its index row, for a
    /// `put` line the index may take in from memory (see [`OwnRows`]).
    pub(super) fn main(
        &mut self,
        q: &FileQueue,
        row: Option<Row>,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        let keep = self.own.on && row.is_some();
        let placed = self.main.push_with(q, row.filter(|_| keep), write)?;
        self.own.take(placed);
        // Only a prefix of the batch is kept so.
        self.own.on &= keep;
        Ok(())
    }
}

/// Bytes of rows [`OwnRows`] keeps, at most; the lines after those are
/// read back from the file.
const OWN_ROWS_MAX: usize = 8 << 20;

/// The index rows of a batch's own `put` lines, kept (compactly, in
/// memory) as the lines are written, so that the index takes the batch
/// in from them instead of reading the lines back from the file and
/// parsing them: [`FileQueue::catch_up`] applies them through the same
/// [`index::Applier`] when the index stands exactly where the batch
/// began, after the batch is committed, as it would the parsed lines
/// (the rows are the ones parsing the lines gives, [`Row::of`]). Kept
/// for a prefix of the batch only: consecutive new items (ids and lines
/// one after the other, never attempted, not held, no retry time, push
/// number or coalesce key), up to the first line of a batch that
/// coalesces or evicts and up to [`OWN_ROWS_MAX`] bytes; the index reads
/// the rest back, as it reads any tail.
#[derive(Debug)]
pub(in crate::backend::file) struct OwnRows {
    /// Rows are still kept.
    on: bool,
    /// Where the first line starts: where the index must stand.
    pub start: u64,
    /// Where the line after the last one kept starts.
    pub end: u64,
    /// The id of the first row.
    first_id: ItemId,
    /// The enqueue time of every row (Unix seconds).
    enqueued_at: Option<i64>,
    /// Rows kept.
    pub count: u64,
    /// Per row: the line's length (without newline), the key and the
    /// group (length + 1, 0 for none), each length a little-endian u32.
    rows: Vec<u8>,
}

impl OwnRows {
    /// Ready for a batch whose first line starts where `tail` ends
    /// (keeping nothing after a last line without its newline).
    pub(super) fn new(tail: &Tail) -> OwnRows {
        OwnRows {
            on: !tail.needs_newline,
            start: tail.end,
            end: tail.end,
            first_id: 0,
            enqueued_at: None,
            count: 0,
            rows: Vec::new(),
        }
    }

    /// Keep the row of a line whose place in the file is now known.
    pub(super) fn take(&mut self, placed: Placed) {
        let Some((row, off, len)) = placed else {
            return;
        };
        if self.count == 0 {
            self.first_id = row.id;
            self.enqueued_at = row.enqueued_at;
        }
        let fits = self.on
            && off == self.end
            && Some(row.id) == self.first_id.checked_add(self.count)
            && row.enqueued_at == self.enqueued_at
            && row.attempts == 0
            && !row.held
            && row.next_retry_at.is_none()
            && row.push_seq.is_none()
            && row.coalesce_key.is_none()
            && row.last_error.is_none()
            && row.delivered_at.is_none()
            && self.rows.len() + row.key.len() + row.group.as_ref().map_or(0, String::len) + 64
                <= OWN_ROWS_MAX;
        let group = row.group.as_deref().map(str::as_bytes);
        let (Ok(len32), Ok(key_len), Ok(group_len)) = (
            u32::try_from(len),
            u32::try_from(row.key.len()),
            u32::try_from(group.map_or(0, |g| g.len() + 1)),
        ) else {
            self.on = false;
            return;
        };
        if !fits {
            self.on = false;
            return;
        }
        self.rows.extend_from_slice(&len32.to_le_bytes());
        self.rows.extend_from_slice(&key_len.to_le_bytes());
        self.rows.extend_from_slice(row.key.as_bytes());
        self.rows.extend_from_slice(&group_len.to_le_bytes());
        self.rows.extend_from_slice(group.unwrap_or_default());
        self.count += 1;
        self.end = off + len as u64 + 1;
    }

    /// The rows kept, with where their lines are.
    pub fn rows(&self) -> impl Iterator<Item = (Row, u64, usize)> + '_ {
        let mut rest = self.rows.as_slice();
        let mut off = self.start;
        (0..self.count).map(move |i| {
            let len = take_u32(&mut rest) as usize;
            let key_len = take_u32(&mut rest) as usize;
            let key = String::from_utf8_lossy(take(&mut rest, key_len)).into_owned();
            let group = match take_u32(&mut rest) as usize {
                0 => None,
                n => Some(String::from_utf8_lossy(take(&mut rest, n - 1)).into_owned()),
            };
            let row = Row {
                id: self.first_id + i,
                key,
                attempts: 0,
                enqueued_at: self.enqueued_at,
                next_retry_at: None,
                held: false,
                push_seq: None,
                group,
                coalesce_key: None,
                last_error: None,
                delivered_at: None,
            };
            let placed = (row, off, len);
            off += len as u64 + 1;
            placed
        })
    }
}
