//! Compaction of an NDJSON spool: the main, dead-letter and delivered
//! files rewritten last-write-wins, atomically, keeping the id
//! high-water mark, the push state and the receiver's ledger; then the
//! index carried over to the new files. The live lines of the main file
//! are found in the index when it is caught up with the files (the
//! garbage is never read), by a scan of the file otherwise.

mod live;

use super::format::{self, parse_line, Line};
use super::index::{Index, Which};
use super::io::{copy_all, parent_dir, write_all, FileIo};
use super::scan::TornTail;
use super::upkeep::CarryJob;
use super::{
    client_delta, client_lines, cut_notice, file_len, no_handle, open_existing, push_line, scan,
    torn_notice, CompactReport, FileQueue, Inner, AUTO_COMPACT_RATIO, COMPACT_COPY_RUN,
};
use crate::backend::companion;
use crate::backend::receive::ClientDelta;
use crate::backend::state::State;
use crate::error::{Error, Result};
use crate::item::{DeadLetter, ItemId, PushState};
use live::LiveLines;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

impl FileQueue {
    /// Rewrite both files; returns the report, where the live items' lines
    /// went, and the new main file, still locked, so that no other process
    /// can use the new file before its index is in place.
    ///
    /// With `full` false (an automatic compaction, which the main file's
    /// garbage starts), the delivered file is left as it is unless at
    /// least half of its lines are garbage or it has a torn tail: it only
    /// grows within the retention window, and rewriting (and re-indexing)
    /// every retained record at each automatic compaction would cost in
    /// proportion to the records kept, not to the garbage.
    pub(super) fn compact_files(
        &self,
        inner: &mut Inner,
        full: bool,
        from_index: Option<MainPlan>,
    ) -> Result<Compacted> {
        // Dead letters are few: read them whole, as an image.
        let mut dead = State::default();
        let mut dead_len = 0;
        let dead_file = open_existing(&self.dead_path, false)?;
        let dead_exists = dead_file.is_some();
        let mut dead_torn = None;
        if let Some(file) = dead_file {
            dead_len = file_len(&file, &self.dead_path)?;
            let s = scan::scan_tail_with(
                &self.dead_path,
                &*self.io,
                &file,
                0,
                dead_len,
                0,
                false,
                parse_line,
                |l, _, _| apply_dead(&mut dead, l),
            )?;
            dead_torn = s.torn;
        }

        // Retained delivered items may be many: only where the last line
        // of each live record is, as for the main file.
        let mut delivered: BTreeMap<ItemId, (u64, usize)> = BTreeMap::new();
        let mut delivered_len = 0;
        let mut delivered_high = 0;
        let delivered_file = open_existing(&self.delivered_path, false)?;
        let mut delivered_torn = None;
        let mut delivered_records = 0;
        // Ids the delivered file's `done` lines name: records it pruned,
        // wherever they were.
        let mut pruned = BTreeSet::new();
        if let Some(file) = &delivered_file {
            delivered_len = file_len(file, &self.delivered_path)?;
            let s = scan::scan_tail_with(
                &self.delivered_path,
                &*self.io,
                file,
                0,
                delivered_len,
                0,
                false,
                format::parse_delivered,
                |l, offset, len| match l {
                    Line::Put { item, .. } => {
                        delivered_high = delivered_high.max(item.id);
                        delivered.insert(item.id, (offset, len));
                    }
                    Line::Done { id, .. } => {
                        delivered_high = delivered_high.max(id);
                        delivered.remove(&id);
                        pruned.insert(id);
                    }
                    // State lines live in the other files.
                    Line::Push(_) | Line::Client(_) | Line::Evicted(_) => {}
                },
            )?;
            delivered_torn = s.torn;
            delivered_records = s.records;
        }
        let keep_delivered = !full
            && delivered_file.is_some()
            && delivered_torn.is_none()
            && delivered_records < 2 * delivered.len() as u64;

        // The main file: where the last line of each live item is, from
        // the index when it is caught up with the files, from a scan
        // otherwise.
        let plan = match from_index {
            Some(plan) => plan,
            None => self.scan_main(inner, &dead, &delivered, &pruned)?,
        };
        if plan.holds_records {
            return Ok(Compacted::NeedsIndex);
        }
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        let main_len = file_len(&main.file, &self.path)?;
        let high_water = plan.high_water.max(dead.high_water).max(delivered_high);

        // The dead-letter file is replaced first, while every other
        // process still waits on the lock of the old main file. Once the
        // main file is replaced, a process can lock the new one at once;
        // by then both files are final, so its appends land in files that
        // stay. (The other order lets such a process append a dead letter
        // to the old dead-letter file just before it is replaced.)
        let mut bytes_after = 0;
        if dead_exists || !dead.dead.is_empty() || dead.evicted_total > 0 {
            let mut buf = Vec::new();
            for dl in dead.dead.values() {
                format::write_dead(&mut buf, dl);
            }
            // The highest id the file named, when no line kept names it:
            // until the main file is replaced (which carries it too), a
            // crash must not lower the high-water mark.
            if dead.high_water > dead.dead.keys().next_back().copied().unwrap_or(0) {
                format::write_done(&mut buf, dead.high_water);
            }
            // The eviction count, last: it survives the compaction.
            if dead.evicted_total > 0 {
                format::write_evicted(&mut buf, dead.evicted_total);
            }
            bytes_after += self
                .replace_file(&self.dead_path, false, |w| w.push(&buf))?
                .0;
        }
        // The delivered file next (before the main file, for the same
        // reason): the live records' lines, byte for byte, in file order;
        // the last one without a batch's `tx` field.
        if keep_delivered {
            bytes_after += delivered_len;
        } else if let Some(file) = &delivered_file {
            let mut order: Vec<(u64, usize)> = delivered.values().copied().collect();
            order.sort_unstable();
            let last = last_stripped(file, &order, &self.delivered_path)?;
            bytes_after += self
                .replace_file(&self.delivered_path, false, |w| {
                    copy_lines(w, file, &order, last.as_deref())?;
                    // As for the dead-letter file: the highest id it named.
                    if delivered_high > delivered.keys().next_back().copied().unwrap_or(0) {
                        let mut line = Vec::new();
                        format::write_done(&mut line, delivered_high);
                        w.push(&line)?;
                    }
                    Ok(())
                })?
                .0;
        }

        // Copy the kept lines in id order (the order in which ids first
        // appear must only grow; `verify` checks it).
        let pending = plan.live.len() as u64;
        let max_live = plan.live.last().map_or(0, |l| l.0);
        let mut records_after = pending;
        if high_water > max_live {
            records_after += 1;
        }
        let order: Vec<(u64, usize)> = plan.live.iter().map(|&(_, off, len)| (off, len)).collect();
        let last_line = match high_water > max_live {
            true => None,
            false => last_stripped(&main.file, &order, &self.path)?,
        };
        let layout = Layout {
            pending,
            lines_len: order.iter().map(|(_, len)| *len as u64).sum(),
            max_live,
            last_len: last_line.as_ref().map(Vec::len),
            delivered_kept: keep_delivered,
        };
        let push_state = plan.state_lines;
        records_after += push_state.iter().filter(|b| **b == b'\n').count() as u64;
        let (written, new_main) = self.replace_file(&self.path, true, |w| {
            copy_lines(w, &main.file, &order, last_line.as_deref())?;
            w.push(&push_state)?;
            if high_water > max_live {
                let mut line = Vec::new();
                format::write_done(&mut line, high_water);
                w.push(&line)?;
            }
            Ok(())
        })?;
        bytes_after += written;
        let new_main = new_main.ok_or_else(no_handle)?;

        for (path, torn) in [
            (&self.path, &plan.torn),
            (&self.dead_path, &dead_torn),
            (&self.delivered_path, &delivered_torn),
        ] {
            if let Some(torn) = torn {
                inner.notices.push(torn_notice(path, torn, true));
                inner.notices.push(cut_notice(path, torn));
            }
        }
        Ok(Compacted::Done(
            CompactReport {
                bytes_before: main_len + dead_len + delivered_len,
                bytes_after,
                records_before: plan.records,
                records_after,
                pending,
                dead_letters: dead.dead.len() as u64,
                delivered_retained: delivered.len() as u64,
                high_water,
                dropped_torn_tail: plan.torn,
            },
            layout,
            new_main,
        ))
    }

    /// What the index, caught up with the files, says a compaction keeps
    /// of the main file: no line of the file is read. `None` when most of the main file's records are live items: the
    /// whole file is read by the copy anyway, and a scan of it (which
    /// reads ahead, on every core) costs less than asking the index for
    /// every line.
    pub(super) fn main_plan_from_index(&self, inner: &Inner) -> Result<Option<MainPlan>> {
        let ix = inner.index()?;
        let records = ix.file_row(Which::Main)?.map_or(0, |r| r.records);
        if ix.depth()?.saturating_mul(2) > records {
            return Ok(None);
        }
        let live = ix
            .live_locs()?
            .into_iter()
            .map(|l| (l.id, l.off, l.len))
            .collect();
        let mut state_lines = Vec::new();
        let (push, uuid) = (ix.push()?, ix.uuid()?);
        if push != PushState::default() || uuid.is_some() {
            state_lines = push_line(&push, uuid.as_ref());
        }
        for (id, delta) in ix.client_ledgers()? {
            client_lines(&mut state_lines, &id, &delta);
        }
        Ok(Some(MainPlan {
            live,
            high_water: ix.high_water()?,
            state_lines,
            records,
            torn: inner.tails[Which::Main.slot()].torn.clone(),
            holds_records: false,
        }))
    }

    /// What a compaction keeps of the main file, found by reading every
    /// line (checked as a normal read checks it) and keeping only where
    /// each live item's last line is: a put of a dead letter's id, or of a
    /// retained delivered item's, only raises the high-water mark (those
    /// files win).
    fn scan_main(
        &self,
        inner: &Inner,
        dead: &State,
        delivered: &BTreeMap<ItemId, (u64, usize)>,
        pruned: &BTreeSet<ItemId>,
    ) -> Result<MainPlan> {
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        let mut live = LiveLines::default();
        let mut high_water = 0;
        let mut last_push: Option<(u64, usize)> = None;
        let mut client_lines_at: Vec<(u64, usize)> = Vec::new();
        let mut holds_records = false;
        let scanned = scan::scan_file_parallel(
            &self.path,
            &*self.io,
            &main.file,
            format::check_line,
            |head, offset, len| {
                high_water = high_water.max(head.id);
                if head.push {
                    last_push = Some((offset, len));
                } else if head.client {
                    client_lines_at.push((offset, len));
                } else if !head.put {
                    let was_live = live.remove(head.id);
                    holds_records |= was_live && head.retained && !pruned.contains(&head.id);
                } else if !dead.dead.contains_key(&head.id) && !delivered.contains_key(&head.id) {
                    live.put(head.id, offset, len);
                }
            },
        )?;
        let read = |offset: u64, len: usize| -> Result<Vec<u8>> {
            let mut line = vec![0; len];
            main.file
                .read_exact_at(&mut line, offset)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            Ok(line)
        };
        // The push state, written anew (without any batch frame).
        let mut state_lines = Vec::new();
        if let Some((offset, len)) = last_push {
            if let Ok(Line::Push(p)) = format::parse_line(&read(offset, len)?) {
                format::write_push(&mut state_lines, &p);
            }
        }
        // The receiver's state: every client's lines added up, written as
        // one line per client (or a few for a long history).
        let mut receiver = State::default();
        for &(offset, len) in &client_lines_at {
            if let Ok(Line::Client(c)) = format::parse_line(&read(offset, len)?) {
                let id = c.id.clone();
                receiver.apply_client_delta(&id, client_delta(c));
            }
        }
        for (id, c) in receiver.receiver.clients() {
            // Rejects the client acknowledged keep their record but are no
            // longer reported: everything below the first one still
            // reported (all of them when none is) is acknowledged.
            let acked = c
                .rejects
                .keys()
                .next()
                .map_or(c.last_seq, |first| first - 1);
            let delta = ClientDelta {
                last_seq: Some(c.last_seq),
                entries: c.entries.clone(),
                acked,
                at: receiver.receiver_at.get(id).copied(),
            };
            client_lines(&mut state_lines, id, &delta);
        }
        Ok(MainPlan {
            live: live.into_vec(),
            high_water,
            state_lines,
            records: scanned.records,
            torn: scanned.torn,
            holds_records,
        })
    }

    /// Replace `path` with what `fill` writes: into a temporary file,
    /// synced, renamed over `path`, directory synced. Returns the bytes
    /// written and, when `lock` is set, the new file, which was locked
    /// (`flock`, exclusive) before the rename: a process that opens the
    /// new file waits until that handle is dropped.
    fn replace_file(
        &self,
        path: &Path,
        lock: bool,
        fill: impl FnOnce(&mut Replacement<'_>) -> std::io::Result<()>,
    ) -> Result<(u64, Option<File>)> {
        let tmp = companion(path, "compact.tmp");
        let file = if lock {
            // Read too: the index of the new file is built through it.
            let f = crate::private_file::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)
                .and_then(|f| crate::private_file::match_mode(&f, path).map(|()| f))
                .map_err(|e| Error::io(&tmp, "create", e))?;
            f.lock().map_err(|e| Error::io(&tmp, "lock", e))?;
            f
        } else {
            crate::private_file::create_replacement(&tmp, path)
                .map_err(|e| Error::io(&tmp, "create", e))?
        };
        let mut w = Replacement {
            io: &*self.io,
            file,
            buf: Vec::with_capacity(Replacement::CHUNK),
            written: 0,
        };
        fill(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| Error::io(&tmp, "write", e))?;
        self.io
            .sync(&w.file)
            .map_err(|e| Error::io(&tmp, "fsync", e))?;
        let written = w.written;
        let file = w.file;
        self.io
            .rename(&tmp, path)
            .map_err(|e| Error::io(path, "replace", e))?;
        let dir = parent_dir(path);
        self.io
            .sync_dir(dir)
            .map_err(|e| Error::io(dir, "fsync directory", e))?;
        Ok((written, lock.then_some(file)))
    }
}

/// What a compaction keeps of the main file.
pub(super) struct MainPlan {
    /// Each live item's id and where its last line is (offset, length
    /// without the newline), in id order.
    live: Vec<(ItemId, u64, usize)>,
    /// The highest id the file names.
    high_water: ItemId,
    /// The push state and the receiver's ledger, as lines written anew.
    state_lines: Vec<u8>,
    /// Records (op lines) the file holds.
    records: u64,
    /// Its torn tail, which the compaction drops.
    torn: Option<TornTail>,
    /// The file holds retained records (a delivery's `done` line of an
    /// item whose record the delivered file lacks): only the index knows
    /// them (see `FileQueue::move_main_records`).
    holds_records: bool,
}

/// What [`FileQueue::compact_files`] did: the report, where the live
/// items' lines went and the new main file, still locked; or nothing,
/// because the main file holds retained records and there was no index
/// to move them with.
pub(super) enum Compacted {
    Done(CompactReport, Layout, File),
    NeedsIndex,
}

/// Where compaction put the live items' lines: one after the other, in
/// id order, from byte 0, each as it was (with its newline) — but the last
/// one, which may have lost a `tx` field. The old index, which knows every
/// live item's line length and columns, can be carried over to the new
/// file from this alone (see `Index::carry_from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Live items.
    pub pending: u64,
    /// The sum of their lines' lengths (without newlines), before any
    /// `tx` was stripped.
    pub lines_len: u64,
    /// The highest live id.
    pub max_live: ItemId,
    /// The new length of the highest live id's line, when it lost a `tx`
    /// field.
    pub last_len: Option<usize>,
    /// The delivered file was left as it was: its index rows stand.
    pub delivered_kept: bool,
}

/// Apply a line of the dead-letter file to a dead-letter image.
fn apply_dead(state: &mut State, line: Line) {
    match line {
        // Push state lives in the main file only.
        Line::Push(_) | Line::Client(_) => {}
        Line::Evicted(n) => state.evicted_total = n,
        Line::Put { item, dead_at, .. } => {
            state.remove_pending(item.id);
            state.high_water = state.high_water.max(item.id);
            let dead_at = dead_at.unwrap_or_default();
            state.dead.insert(item.id, DeadLetter { item, dead_at });
        }
        Line::Done { id, .. } => {
            state.dead.remove(&id);
            state.high_water = state.high_water.max(id);
        }
    }
}

/// The temporary file of a compaction, written in large chunks through
/// the I/O seam.
pub(super) struct Replacement<'a> {
    io: &'a dyn FileIo,
    file: File,
    buf: Vec<u8>,
    written: u64,
}

impl Replacement<'_> {
    const CHUNK: usize = 1 << 20;

    fn push(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= Self::CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Copy `len` bytes at `offset` of `from`.
    fn copy_from(&mut self, from: &File, offset: u64, len: usize) -> std::io::Result<()> {
        self.flush()?;
        copy_all(self.io, from, offset, &mut self.file, len)?;
        self.io
            .start_writeback(&self.file, self.written, len as u64);
        self.written += len as u64;
        Ok(())
    }

    /// Copy the next `len` bytes of `r` and a newline.
    fn push_line_from(&mut self, r: &mut impl Read, len: usize) -> std::io::Result<()> {
        let start = self.buf.len();
        self.buf.resize(start + len, 0);
        r.read_exact(&mut self.buf[start..])?;
        self.buf.push(b'\n');
        if self.buf.len() >= Self::CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        write_all(self.io, &mut self.file, &self.buf)?;
        self.io
            .start_writeback(&self.file, self.written, self.buf.len() as u64);
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

impl FileQueue {
    /// Rewrite the main, dead-letter and delivered files last-write-wins:
    /// each file is written to a temporary file, synced, renamed over the
    /// original, and the directory synced. The main file ends with a
    /// `done` line for the high-water mark when it is above every pending
    /// id, so ids are never reissued. A torn tail is dropped. Concurrent
    /// writers wait on the lock and then continue on the new file. The
    /// index is carried over to the new files (or built, when there was
    /// no usable one) before the lock is let go.
    ///
    /// Every delivered record not pruned yet is kept, expired or not
    /// (`spool compact` prunes the expired ones first, through
    /// [`crate::Queue::prune_delivered`]). An item that a crash left in
    /// the main file and in the dead-letter or delivered file is kept in
    /// the latter only.
    ///
    /// The index, brought up to date with the files first (which checks
    /// every line not taken in yet: a damaged line stops the compaction
    /// and changes nothing), says where each live item's last line is;
    /// those bytes are copied as they are, and the main file's garbage is
    /// never read. Without a usable index the main file is streamed
    /// instead, every line checked, only each live item's position kept.
    /// The dead-letter and delivered files are streamed. Memory grows
    /// with the live items, the retained records and the dead letters,
    /// never with the garbage.
    pub fn compact(&self) -> Result<CompactReport> {
        self.require_writable("compact")?;
        self.locked_unloaded(true, |q, inner| {
            q.assign_uuid(inner)?;
            q.compact_locked(inner, true)
        })
    }

    /// Compact with the exclusive lock held; afterwards every handle and
    /// the index are opened afresh on the next call. `full`: the delivered
    /// file too, whatever its garbage (see [`FileQueue::compact_files`]).
    pub(super) fn compact_locked(&self, inner: &mut Inner, full: bool) -> Result<CompactReport> {
        // A move a crash interrupted is cut off first: the compaction
        // must not keep companion lines the main file never committed.
        self.track_companions(inner)?;
        self.settle_moves(inner, true)?;
        let mut carry = self.index_for_compaction(inner);
        let mut r = self.compact_with(inner, full, carry);
        if let Ok((Compacted::NeedsIndex, job)) = r {
            // Its copy is of the index before the rebuild.
            drop(job);
            // Only the index knows the retained records the main file
            // holds, which go to the delivered file before the rewrite
            // drops their lines (see `index_for_compaction`).
            self.rebuild(inner, None)?;
            carry = self.index_for_compaction(inner);
            r = match carry {
                true => self.compact_with(inner, full, carry),
                false => Err(Error::Internal(format!(
                    "{}: the index cannot be brought up to date; nothing was compacted",
                    self.index_path.display()
                ))),
            };
        }
        inner.dead = None;
        inner.delivered = None;
        inner.tails = Default::default();
        let (report, layout, new_main, job) = match r? {
            (Compacted::Done(report, layout, new_main), job) => (report, layout, new_main, job),
            (Compacted::NeedsIndex, _) => {
                return Err(Error::Internal(
                    "compaction found retained records its index does not know".into(),
                ))
            }
        };
        // The new main file stays locked (through `new_main`) until its
        // index is in place; the old one is let go with its handle.
        let dead = open_existing(&self.dead_path, false)?;
        let delivered = open_existing(&self.delivered_path, false)?;
        let companions = [dead.as_ref(), delivered.as_ref()];
        let carried = match job {
            Some(job) => self.carry_shared(job, &new_main, companions, &layout, &report),
            None => Err(Error::Internal("no index to carry over".into())),
        };
        let installed = match carried {
            Ok(()) => Ok(()),
            // A full build from the new files.
            Err(_) => self.build_shared(&new_main, companions).map(drop),
        };
        if let Err(e) = installed {
            inner.notices.push(format!(
                "{}: the index was not rebuilt after compaction ({e}); the next command rebuilds it",
                self.index_path.display()
            ));
        }
        inner.main = None;
        drop(new_main);
        Ok(report)
    }

    /// [`FileQueue::compact_files`], from the index's plan when `carry`
    /// (the index is caught up: it tells where every live line is, and
    /// the main file's garbage is not read at all when most of the file
    /// is garbage; see `main_plan_from_index`), with the index's carry-over
    /// started beside it.
    fn compact_with(
        &self,
        inner: &mut Inner,
        full: bool,
        carry: bool,
    ) -> Result<(Compacted, Option<CarryJob>)> {
        let plan = match carry {
            true => self.main_plan_from_index(inner).ok().flatten(),
            false => None,
        };
        if let Some(ix) = inner.index.take() {
            let _ = ix.rollback();
        }
        // The index is committed and closed: its copy can start.
        let job = carry.then(|| self.start_carry());
        Ok((self.compact_files(inner, full, plan)?, job))
    }

    /// Compact the files after a call whose index transaction found it
    /// due ([`compaction_due`]).
    pub(super) fn auto_compact(&self, inner: &mut Inner) {
        if let Err(e) = self.compact_locked(inner, false) {
            inner
                .notices
                .push(format!("automatic compaction failed (nothing lost): {e}"));
        }
    }
}

/// Whether the main file, as `ix` describes it, is large enough
/// (`min_bytes`, [`super::AUTO_COMPACT_MIN_BYTES`] but in tests) and mostly
/// garbage: [`AUTO_COMPACT_RATIO`] records per live item.
pub(super) fn compaction_due(ix: &Index, min_bytes: u64) -> bool {
    let (Ok(Some(row)), Ok(depth)) = (ix.file_row(Which::Main), ix.depth()) else {
        return false;
    };
    row.upto >= min_bytes && row.records >= AUTO_COMPACT_RATIO * (depth + 1)
}

/// The last of the lines at `order` (offset, length) of `file` without
/// its batch's `tx` field, when it has one: a file must not end in such a
/// line (it would read as an unfinished batch).
fn last_stripped(file: &File, order: &[(u64, usize)], path: &Path) -> Result<Option<Vec<u8>>> {
    let Some(&(offset, len)) = order.last() else {
        return Ok(None);
    };
    let mut line = vec![0; len];
    file.read_exact_at(&mut line, offset)
        .map_err(|e| Error::io(path, "read", e))?;
    Ok(format::strip_tx(&line))
}

/// Copy the lines at `order` (offset, length) of `file` in that order,
/// each with its newline, the last one as `last` when given. Most of
/// them lie in that order in the file already and are copied in one
/// forward pass: a line is read in passing when no later line lies
/// before it. The others (an item updated after later ones were
/// enqueued) are read on their own.
fn copy_lines(
    w: &mut Replacement<'_>,
    file: &File,
    order: &[(u64, usize)],
    last: Option<&[u8]>,
) -> std::io::Result<()> {
    let copied = order.len() - usize::from(last.is_some());
    let mut later_min = vec![u64::MAX; order.len()];
    let mut m = u64::MAX;
    for (i, &(offset, _)) in order.iter().enumerate().rev() {
        later_min[i] = m;
        m = m.min(offset);
    }
    let mut r = BufReader::with_capacity(1 << 20, file);
    r.seek(SeekFrom::Start(0))?;
    let mut pos = 0u64;
    let mut line = Vec::new();
    let mut i = 0;
    while i < copied {
        // Lines next to each other in the file (one newline between
        // them) that come one after the other in `order` too: a long run
        // of them is copied inside the kernel.
        let (start, first_len) = order[i];
        let mut end = start + first_len as u64;
        let mut next = i + 1;
        while next < copied && order[next].0 == end + 1 {
            end = order[next].0 + order[next].1 as u64;
            next += 1;
        }
        if next - i > 1 && end - start >= COMPACT_COPY_RUN {
            w.copy_from(file, start, (end - start) as usize)?;
            w.push(b"\n")?;
            i = next;
            continue;
        }
        let (offset, len) = order[i];
        let later = later_min[i];
        i += 1;
        if offset >= pos && offset <= later {
            r.seek_relative((offset - pos) as i64)?;
            w.push_line_from(&mut r, len)?;
            pos = offset + len as u64;
        } else {
            line.resize(len, 0);
            file.read_exact_at(&mut line, offset)?;
            line.push(b'\n');
            w.push(&line)?;
        }
    }
    if let Some(last) = last {
        w.push(last)?;
        w.push(b"\n")?;
    }
    Ok(())
}
