//! The spool's files as a call handles them: the companion files tracked
//! and opened for appending, lines appended (and synced) with their index
//! entries, and lines read back where the index says they are.

use super::format::{self, parse_line, Line};
use super::index::{Entry, FileRow, Loc, Which};
use super::io::{read_exact_at, write_all};
use super::{
    file_len, no_handle, open_existing, open_synced, FileQueue, Inner, Tail, Tracked, READ_GAP,
    READ_SPAN,
};
use crate::backend::OpenMode;
use crate::error::{Error, Result};
use crate::item::{DeadLetter, Item};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

impl FileQueue {
    /// Open (or keep) the handles on the companion files (dead letters,
    /// delivered items), following a replacement.
    pub(super) fn track_companions(&self, inner: &mut Inner) -> Result<()> {
        for which in Which::COMPANIONS {
            self.track_companion(inner, which)?;
        }
        Ok(())
    }

    pub(super) fn track_companion(&self, inner: &mut Inner, which: Which) -> Result<()> {
        let path = self.target_path(which);
        let on_disk = match std::fs::metadata(path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(path, "inspect", e)),
        };
        let same = match (inner.tracked(which), &on_disk) {
            (Some(t), Some(m)) => t.dev == m.dev() && t.ino == m.ino(),
            (None, None) => true,
            _ => false,
        };
        if !same {
            *inner.tail(which) = Tail::default();
            *inner.slot(which) = match on_disk {
                None => None,
                Some(_) => match open_existing(path, self.writable)? {
                    Some(f) => Some(Tracked::new(f, path)?),
                    None => None,
                },
            };
        }
        Ok(())
    }

    pub(super) fn target_path(&self, which: Which) -> &Path {
        match which {
            Which::Main => &self.path,
            Which::Dead => &self.dead_path,
            Which::Delivered => &self.delivered_path,
        }
    }

    /// A companion file (dead letters, delivered items), created (mode
    /// 0600) when missing.
    pub(super) fn companion_for_append(&self, inner: &mut Inner, which: Which) -> Result<()> {
        if inner.tracked(which).is_none() {
            let path = self.target_path(which);
            let (file, _) = open_synced(&*self.io, path, OpenMode::Create)?;
            let t = Tracked::new(file, path)?;
            *inner.tail(which) = Tail {
                end: file_len(&t.file, path)?,
                ..Tail::default()
            };
            *inner.slot(which) = Some(t);
        }
        Ok(())
    }

    /// Append `bytes` (whole lines) to a file as one batch and sync it,
    /// then take them into the index. On failure the file is cut back to
    /// where the append began.
    pub(super) fn append(&self, inner: &mut Inner, which: Which, bytes: &[u8]) -> Result<()> {
        self.append_entries(inner, which, bytes, None)
    }

    /// [`FileQueue::append`], with the lines' index entries when the
    /// caller has them (`entries`, one per line, in order; otherwise the
    /// lines are parsed here, from memory): the index takes them into its
    /// open transaction once the lines are synced, without reading them
    /// back (see [`FileQueue::take_in_written`]).
    pub(super) fn append_entries(
        &self,
        inner: &mut Inner,
        which: Which,
        bytes: &[u8],
        entries: Option<Vec<Entry>>,
    ) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        if which != Which::Main {
            self.companion_for_append(inner, which)?;
        }
        let path = self.target_path(which);
        let tail = inner.tail(which).clone();
        let t = inner.slot(which).as_mut().ok_or_else(no_handle)?;
        let start = tail.end;
        let mut buf = Vec::with_capacity(bytes.len() + 1);
        if tail.needs_newline {
            buf.push(b'\n');
        }
        // Several lines are one batch: framed so that a crash halfway
        // leaves none of them visible.
        buf.extend_from_slice(&format::frame_batch(bytes, start + buf.len() as u64));
        let written = write_all(&*self.io, &mut t.file, &buf)
            .map_err(|e| Error::io(path, "append to", e))
            .and_then(|()| {
                self.io
                    .sync(&t.file)
                    .map_err(|e| Error::io(path, "fsync", e))
            });
        if let Err(e) = written {
            // Take back whatever reached the file, so that nothing that
            // was not reported committed can look committed later.
            let _ = self
                .io
                .truncate(&t.file, start)
                .and_then(|()| self.io.sync(&t.file));
            return Err(e);
        }
        if !tail.needs_newline {
            let parse = Entry::parser(which);
            let entries = entries.or_else(|| {
                buf.split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| parse(l).ok())
                    .collect()
            });
            if let Some(entries) = entries {
                self.take_in_written(inner, which, start, &buf, entries);
            }
        }
        self.committed(inner, which, start + buf.len() as u64);
        Ok(())
    }

    /// Take the lines just appended at `start` (`written`, whole lines)
    /// into the index's open transaction, with their `entries` (one per
    /// line, what parsing it gives; checked in debug builds), when the
    /// index stands where they begin; otherwise the catch-up at the end
    /// of the call reads them back. A failure of the index is the call's
    /// index transaction's only (see [`Inner::index_broken`]): the lines
    /// are committed.
    fn take_in_written(
        &self,
        inner: &mut Inner,
        which: Which,
        start: u64,
        written: &[u8],
        entries: Vec<Entry>,
    ) {
        if inner.index_broken.is_some() || inner.index.is_none() {
            return;
        }
        let r = (|| {
            let mut spans = Vec::with_capacity(entries.len());
            let mut pos = 0;
            for nl in memchr::memchr_iter(b'\n', written) {
                spans.push((start + pos as u64, nl - pos));
                pos = nl + 1;
            }
            if spans.len() != entries.len() || pos != written.len() {
                // Left to the catch-up, which reads them back.
                return Ok(());
            }
            let ix = inner.index()?;
            let t = inner.tracked(which).ok_or_else(no_handle)?;
            let before = ix.file_row(which)?;
            let end = start + written.len() as u64;
            let count = entries.len() as u64;
            let fingerprint = || {
                super::index::fingerprint(&*self.io, &t.file, end)
                    .map_err(|e| Error::io(self.target_path(which), "read", e))
            };
            let file = (t.dev, t.ino);
            let Some(row) =
                FileRow::extended(before.as_ref(), file, start, end, count, fingerprint)?
            else {
                return Ok(());
            };
            let mut ap = ix.applier()?;
            for (e, (off, len)) in entries.into_iter().zip(spans) {
                #[cfg(debug_assertions)]
                {
                    let at = (off - start) as usize;
                    let parsed = Entry::parser(which)(&written[at..at + len]);
                    assert_eq!(
                        parsed.as_ref(),
                        Ok(&e),
                        "the entry given for a line differs from its parse"
                    );
                }
                ap.apply(which, e, off, len);
            }
            ap.finish()?;
            ix.set_file_row(which, &row)
        })();
        if let Err(e) = r {
            inner.index_broken = Some(e.to_string());
        }
    }

    /// Lines up to `end` of `which` are durable; the index took them in
    /// already, or takes them in at the end of the call
    /// ([`FileQueue::finish`]).
    pub(super) fn committed(&self, inner: &mut Inner, which: Which, end: u64) {
        crate::debug::crash_point("index-update");
        *inner.tail(which) = Tail {
            end,
            needs_newline: false,
            torn: None,
        };
        inner.appended = true;
        if which == Which::Main {
            // A record of the main file past every companion line there
            // is: each of those lines is committed now (the lock was held
            // since the moves were settled), so that the next call need
            // not look for an unfinished move (see `Inner::settled`).
            for c in Which::COMPANIONS {
                let len = inner.tracked(c).map(|t| (t.ino, t.file.metadata()));
                inner.settled[c.slot()] = match len {
                    Some((ino, Ok(m))) => Some((ino, m.len())),
                    _ => None,
                };
            }
        }
    }

    /// Read the lines at `locs` of `which`, nearby ones with one `pread`,
    /// each through `take`, which says what it is (`None`: not the line
    /// the index said, an error).
    pub(super) fn read_each<T>(
        &self,
        inner: &Inner,
        which: Which,
        locs: &[Loc],
        mut take: impl FnMut(Line, &Loc) -> Option<T>,
    ) -> Result<Vec<T>> {
        if locs.is_empty() {
            return Ok(Vec::new());
        }
        let path = self.target_path(which);
        let t = inner.tracked(which).ok_or_else(no_handle)?;
        let mut out = Vec::with_capacity(locs.len());
        let mut i = 0;
        let mut buf = Vec::new();
        while i < locs.len() {
            let start = locs[i].off;
            let mut end = start + locs[i].len as u64;
            let mut j = i + 1;
            while j < locs.len()
                && locs[j].off >= end
                && locs[j].off - end <= READ_GAP
                && locs[j].off + locs[j].len as u64 - start <= READ_SPAN
            {
                end = locs[j].off + locs[j].len as u64;
                j += 1;
            }
            buf.resize((end - start) as usize, 0);
            read_exact_at(&*self.io, &t.file, &mut buf, start)
                .map_err(|e| Error::io(path, "read", e))?;
            for loc in &locs[i..j] {
                let at = (loc.off - start) as usize;
                let bytes = &buf[at..at + loc.len];
                let line = match which {
                    Which::Delivered => format::parse_delivered(bytes),
                    Which::Main | Which::Dead => parse_line(bytes),
                }
                .map_err(|_| self.out_of_step(which, loc))?;
                out.push(take(line, loc).ok_or_else(|| self.out_of_step(which, loc))?);
            }
            i = j;
        }
        Ok(out)
    }

    pub(super) fn out_of_step(&self, which: Which, loc: &Loc) -> Error {
        Error::corrupt(
            &self.index_path,
            None,
            format!(
                "the index places item {} at byte {} of {}, but that line is not it; `spool verify --repair` rebuilds the index",
                loc.id,
                loc.off,
                self.target_path(which).display()
            ),
        )
    }

    /// The pending items at `locs`.
    pub(super) fn items(&self, inner: &Inner, locs: &[Loc]) -> Result<Vec<Item>> {
        self.read_each(inner, Which::Main, locs, |line, loc| match line {
            Line::Put { item, .. } if item.id == loc.id => Some(item),
            _ => None,
        })
    }

    /// The dead letters at `locs`.
    pub(super) fn dead_letters(&self, inner: &Inner, locs: &[Loc]) -> Result<Vec<DeadLetter>> {
        self.read_each(inner, Which::Dead, locs, |line, loc| match line {
            Line::Put { item, dead_at, .. } if item.id == loc.id => Some(DeadLetter {
                item,
                dead_at: dead_at.unwrap_or_default(),
            }),
            _ => None,
        })
    }
}
