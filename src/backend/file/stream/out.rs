//! A streamed batch's output: each file's part of the batch, written in
//! framed chunks with writeback hints, cut back on failure, and applied
//! to the open index transaction line by line as it is written.

use crate::backend::file::index::{Applier, Entry, Which};
use crate::backend::file::io::write_all;
use crate::backend::file::{format, open_synced, FileQueue, Tail};
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

/// One file's part of a streamed batch.
pub(super) struct BatchOut {
    which: Which,
    path: PathBuf,
    /// The file, opened (for appending) at the first write.
    file: Option<File>,
    /// Where the batch's bytes begin.
    pub(super) start: u64,
    /// Bytes not written yet: whole lines, the latest of which (from
    /// `last`) is held back, since it may be the batch's last line and so
    /// go without the frame.
    buf: Vec<u8>,
    /// Where the latest line starts in `buf`.
    last: Option<usize>,
    /// The id of the latest line's row, when it has one (the index took
    /// it in with the frame's length; see [`BatchOut::end_last`]).
    last_id: Option<ItemId>,
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
    pub(super) fn new(which: Which, path: PathBuf, file: Option<File>, tail: &Tail) -> BatchOut {
        let mut buf = Vec::with_capacity(CHUNK + 4096);
        if tail.needs_newline {
            buf.push(b'\n');
        }
        let tx = tail.end + buf.len() as u64;
        BatchOut {
            which,
            path,
            file,
            start: tail.end,
            buf,
            last: None,
            last_id: None,
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

    /// Add the line `write` appends (with its newline) and apply it to
    /// the index through `ap`: as `entry` when the caller has its entry
    /// (what parsing the line gives; checked in debug builds), else as
    /// parsing it gives. The line before it now knows it is not the last:
    /// it gets the frame.
    pub(super) fn push(
        &mut self,
        q: &FileQueue,
        ap: &mut Applier<'_>,
        entry: Option<Entry>,
        write: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        self.lines += 1;
        if self.last.take().is_some() {
            if !self.buf.ends_with(b"}\n") {
                return Err(Error::Internal(
                    "a batch line that does not end in }".into(),
                ));
            }
            self.buf.truncate(self.buf.len() - 2);
            self.buf.extend_from_slice(&self.frame);
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
        let line = &self.buf[at..self.buf.len() - 1];
        let parse = Entry::parser(self.which);
        let entry = match entry {
            Some(e) => {
                #[cfg(debug_assertions)]
                assert_eq!(
                    parse(line).as_ref(),
                    Ok(&e),
                    "the entry given for a line differs from its parse"
                );
                e
            }
            None => parse(line).map_err(|e| {
                Error::Internal(format!("a batch line that does not read back: {e}"))
            })?,
        };
        self.last_id = match &entry {
            Entry::Put(row) => Some(row.id),
            _ => None,
        };
        // Its length once the next line gives it the frame: without the
        // closing brace, with the frame but its newline.
        let framed = line.len() - 1 + self.frame.len() - 1;
        ap.apply(
            self.which,
            entry,
            self.start + self.written + at as u64,
            framed,
        );
        Ok(())
    }

    /// Which file this part goes to.
    pub(super) fn which(&self) -> Which {
        self.which
    }

    /// The bytes of the line at `off` (without its newline), when the
    /// batch holds it still unwritten.
    pub(super) fn buffered_line(&self, off: u64) -> Option<&[u8]> {
        let at = usize::try_from(off.checked_sub(self.start + self.written)?).ok()?;
        let rest = self.buf.get(at..)?;
        memchr::memchr(b'\n', rest).map(|nl| &rest[..nl])
    }

    /// The batch ends here: the row of its last line, taken in with the
    /// frame's length, gets the length the line has without it (`id`,
    /// the line's offset and that length), when it has a row.
    pub(super) fn end_last(&self) -> Option<(ItemId, u64, usize)> {
        let at = self.last?;
        Some((
            self.last_id?,
            self.start + self.written + at as u64,
            self.buf.len() - at - 1,
        ))
    }

    fn flush(&mut self, q: &FileQueue) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            let (f, _) = open_synced(&*q.io, &self.path, OpenMode::Create)?;
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
