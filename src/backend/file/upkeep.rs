//! Keeping the index of an NDJSON spool in step with its files, with
//! the lock held: check it, take in the tails other processes (or a
//! crash) left, cut torn tails, rebuild it from the files when it does not
//! match, build a reader's private one, and carry it over a compaction.

use super::*;

impl FileQueue {
    /// Before a compaction: whether the shared index is usable and, caught
    /// up with the files now, can be carried over to the compacted files
    /// (much cheaper than building one from them).
    pub(super) fn index_for_compaction(&self, inner: &mut Inner) -> bool {
        let notices = inner.notices.len();
        let r = (|| -> Result<bool> {
            self.track_companions(inner)?;
            if self.open_index(inner, true).is_some() {
                return Ok(false);
            }
            inner.index()?.use_file_journal(true)?;
            inner.index()?.begin(true)?;
            if self.check_index(inner)?.is_err() {
                return Ok(false);
            }
            let caught_up = self.catch_up_all(inner);
            inner.checked = [None; 3];
            caught_up?;
            // The compaction drops the main file's `done` lines of
            // retained deliveries: their records go to the delivered
            // file first.
            self.move_main_records(inner)?;
            inner.index()?.commit()?;
            Ok(true)
        })();
        inner.checked = [None; 3];
        // The compaction reports torn tails itself.
        inner.notices.truncate(notices);
        if let Some(ix) = &inner.index {
            let _ = ix.rollback();
        }
        r.unwrap_or(false)
    }

    /// Start carrying the shared index over a compaction on a thread of
    /// its own (the first step of [`Carry`], which needs nothing of the
    /// compaction): a byte copy of the index (committed, and nobody else
    /// may touch it while the spool is locked; the copy keeps the index
    /// file's mode) with every pending row given its new offset.
    pub(super) fn start_carry(&self) -> CarryJob {
        let tmp = companion(&self.index_path, "tmp");
        let (from, to) = (self.index_path.clone(), tmp.clone());
        let handle = std::thread::spawn(move || {
            let _ = std::fs::remove_file(&to);
            std::fs::copy(&from, &to).map_err(|e| Error::io(&to, "create", e))?;
            Carry::start(&to)
        });
        CarryJob {
            handle: Some(handle),
            tmp,
        }
    }

    /// The index of the compacted files, carried over from the old one
    /// by `job` and [`Carry::finish`], its companion and file rows added,
    /// and renamed into place.
    pub(super) fn carry_shared(
        &self,
        job: CarryJob,
        main: &File,
        companions: [Option<&File>; 2],
        layout: &compact::Layout,
        report: &CompactReport,
    ) -> Result<()> {
        let tmp = job.tmp.clone();
        let built = job.join().and_then(|c| c.finish(layout)).and_then(|ix| {
            for (which, f) in Which::COMPANIONS.into_iter().zip(companions) {
                if which == Which::Delivered && layout.delivered_kept {
                    continue;
                }
                self.load_file(&ix, which, f, None)?;
            }
            let now = FileNow::of(main, &self.path)?;
            let fingerprint = index::fingerprint(&*self.io, main, now.len)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            ix.set_file_row(
                Which::Main,
                &FileRow {
                    dev: now.dev,
                    ino: now.ino,
                    upto: now.len,
                    lines: report.records_after,
                    records: report.records_after,
                    needs_newline: false,
                    fingerprint,
                },
            )?;
            ix.finish_carry()?;
            if ix.depth()? != report.pending {
                return Err(Error::Internal(
                    "the carried index does not count the items kept".into(),
                ));
            }
            ix.close()
        });
        if let Err(e) = built {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        self.install_index(&tmp)
    }

    /// Put a built index file in place of the shared index.
    pub(super) fn install_index(&self, tmp: &Path) -> Result<()> {
        // A journal of the old index must not be played back into the new
        // one.
        let journal = index::journal_path(&self.index_path);
        match std::fs::remove_file(&journal) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(&journal, "remove", e)),
        }
        std::fs::rename(tmp, &self.index_path)
            .map_err(|e| Error::io(&self.index_path, "replace", e))?;
        // Only now: the file in place holds a committed state. (Killed
        // before this, a set mark makes the next writer build it again.)
        index::clear_mark(&self.index_path)
            .map_err(|e| Error::io(index::mark_path(&self.index_path), "write", e))
    }

    /// [`FileQueue::catch_up`] of every file, companions first.
    pub(super) fn catch_up_all(&self, inner: &mut Inner) -> Result<()> {
        for which in Which::COMPANIONS {
            self.catch_up(inner, which)?;
        }
        self.catch_up(inner, Which::Main)
    }

    /// Make the index ready for a call with the lock held: open it, check
    /// it against the files, rebuild it when it does not match, take in
    /// the tails, cut torn tails (writers). `Ok(false)`: the shared index
    /// needs upkeep that only the exclusive lock allows; call again with
    /// it.
    pub(super) fn prepare(
        &self,
        inner: &mut Inner,
        exclusive: bool,
        bulk: bool,
        meta: MetaUse,
    ) -> Result<bool> {
        inner.index_broken = None;
        inner.checked = [None; 3];
        if meta == MetaUse::Read {
            if let Some(m) = meta::read_changed(&self.meta_path, &mut inner.meta_seen)? {
                inner.meta = m;
            }
        }
        self.track_companions(inner)?;
        self.settle_moves(inner, exclusive)?;
        let mut unusable = self.open_index(inner, exclusive);
        if unusable.is_none() {
            Self::begin_call(inner, exclusive, bulk)?;
            if let Err(why) = self.check_index(inner)? {
                let private = !inner.index()?.is_shared();
                inner.index()?.rollback()?;
                unusable = Some(why);
                if private {
                    // The files changed under a private index (another
                    // process compacted them): the shared index may
                    // describe them now.
                    inner.index = None;
                    unusable = self.open_index(inner, exclusive);
                    if unusable.is_none() {
                        Self::begin_call(inner, exclusive, bulk)?;
                        if let Err(why) = self.check_index(inner)? {
                            inner.index()?.rollback()?;
                            unusable = Some(why);
                        }
                    }
                }
            }
        }
        if let Some(why) = unusable {
            if self.writable {
                if !exclusive {
                    return Ok(false);
                }
                self.rebuild(inner, Some(&why))?;
            } else {
                self.build_private(inner)?;
            }
            Self::begin_call(inner, exclusive, bulk)?;
            if let Err(why) = self.check_index(inner)? {
                return Err(Error::Internal(format!(
                    "the index just built for {} does not match it: {why}",
                    self.path.display()
                )));
            }
        }
        // The tails: what the index has not taken in yet.
        let pending_tail = self.unindexed(inner)?;
        if pending_tail > 0 {
            let ix = inner.index()?;
            if ix.is_shared() && self.writable && !exclusive {
                ix.rollback()?;
                return Ok(false);
            }
            if ix.read_only && (ix.no_writes || pending_tail > READER_CATCH_UP_MAX) {
                ix.rollback()?;
                self.build_private(inner)?;
                inner.index()?.begin(false)?;
            } else if exclusive && pending_tail > SMALL_TAIL_MAX && !ix.file_journal() {
                // A long tail to take in: its journal goes to a file (see
                // `Index::use_file_journal`). Nothing was written yet.
                ix.rollback()?;
                Self::begin_call(inner, exclusive, true)?;
            }
        }
        let caught_up = self.catch_up_all(inner);
        // From here on, the call may write.
        inner.checked = [None; 3];
        caught_up?;
        if exclusive && self.writable {
            for which in [Which::Main, Which::Dead, Which::Delivered] {
                if let Some(torn) = inner.tail(which).torn.clone() {
                    self.cut_torn_tail(inner, which, torn)?;
                }
            }
        }
        Ok(true)
    }

    /// Begin the call's index transaction: a writer's with its journal in
    /// a file for a `bulk` change, in memory otherwise (see
    /// [`index::Index::use_file_journal`]).
    fn begin_call(inner: &Inner, exclusive: bool, bulk: bool) -> Result<()> {
        let ix = inner.index()?;
        if exclusive {
            ix.use_file_journal(bulk)?;
        }
        ix.begin(exclusive)
    }

    /// Keep or open the shared index; `Some(reason)` when there is no
    /// usable one (a private index of a read-only handle is kept).
    pub(super) fn open_index(&self, inner: &mut Inner, exclusive: bool) -> Option<String> {
        let journal = index::journal_path(&self.index_path);
        // A journal while we hold the lock is one a writer left when it
        // crashed in a bulk write (see `Index::use_file_journal`): only a
        // writer may roll it back (SQLite does so when it opens the
        // index).
        let hot = journal.exists();
        if let Some(ix) = &inner.index {
            if !ix.is_shared() {
                return None;
            }
            // Kept only while nobody else wrote the file since this call's
            // last use of it (see `index::Stamp`).
            if ix.seen.is_some()
                && index::Stamp::of(&self.index_path) == ix.seen
                && !(hot && !(self.writable && exclusive))
                && ix.mark_is_clear()
            {
                return None;
            }
            inner.index = None;
        }
        if hot && !(self.writable && exclusive) {
            return Some("a write to it was interrupted (its journal is left)".into());
        }
        match Index::open_shared(&self.index_path, self.writable, self.busy_timeout) {
            Ok(ix) => {
                inner.index = Some(ix);
                if hot {
                    // SQLite played a hot journal back as it opened the
                    // index; what is left is none (an empty or finished
                    // one), which no write of ours removes now.
                    if let Err(e) = std::fs::remove_file(&journal) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            return Some(format!("its journal cannot be removed: {e}"));
                        }
                    }
                }
                None
            }
            Err(Unusable::Missing) => Some(String::new()),
            Err(Unusable::Invalid(why)) => Some(why),
        }
    }

    /// Check the open index against the files; `Err(reason)` when it does
    /// not describe them.
    /// What it finds out of the files' fingerprints is kept (see
    /// [`index::Known`]).
    pub(super) fn check_index(&self, inner: &mut Inner) -> Result<std::result::Result<(), String>> {
        let ix = inner.index()?;
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        let main_now = FileNow::of(&main.file, &self.path)?;
        let dead_now = match &inner.dead {
            Some(t) => Some(FileNow::of(&t.file, &self.dead_path)?),
            None => None,
        };
        let delivered_now = match &inner.delivered {
            Some(t) => Some(FileNow::of(&t.file, &self.delivered_path)?),
            None => None,
        };
        let rows = match ix.check_files(
            &*self.io,
            main_now,
            dead_now,
            delivered_now,
            true,
            &inner.known,
        ) {
            Ok(Ok(rows)) => rows,
            Ok(Err(why)) => return Ok(Err(why)),
            Err(e) => return Ok(Err(format!("it cannot be read: {e}"))),
        };
        let nows = [Some(main_now), dead_now, delivered_now];
        inner.checked = nows.map(|n| n.map(|n| n.stamp));
        // Rows the index has (a file it has no row for has no fingerprint).
        let known = std::array::from_fn(|i| {
            nows[i]
                .filter(|_| !rows[i].fingerprint.is_empty())
                .map(|now| index::Known::of(&now, &rows[i]))
        });
        inner.known = known;
        Ok(Ok(()))
    }

    /// Bytes of the spool files that the index has not taken in, not
    /// counting an unfinished batch at the end.
    pub(super) fn unindexed(&self, inner: &Inner) -> Result<u64> {
        let ix = inner.index()?;
        let mut total = 0;
        for which in [Which::Main, Which::Dead, Which::Delivered] {
            let path = self.target_path(which);
            let Some(t) = inner.tracked(which) else {
                continue;
            };
            let upto = ix.file_row(which)?.map_or(0, |r| r.upto);
            let len = match inner.checked[which.slot()] {
                Some(stat) => FileNow::seen(&t.file, stat).len,
                None => file_len(&t.file, path)?,
            };
            if len <= upto {
                continue;
            }
            let mut tail = len - upto;
            if tail > READER_CATCH_UP_MAX {
                if let Some(start) = scan::unfinished_batch(path, &*self.io, &t.file, upto, len)? {
                    tail = start - upto;
                }
            }
            total += tail;
        }
        Ok(total)
    }

    /// Take in what was appended to `which` since the index last saw it,
    /// through the one path from lines to rows (the index's `Applier`), and
    /// note a torn tail.
    pub(super) fn catch_up(&self, inner: &mut Inner, which: Which) -> Result<()> {
        let path = self.target_path(which);
        let Some(t) = inner.tracked(which) else {
            *inner.tail(which) = Tail::default();
            return Ok(());
        };
        let ix = inner.index()?;
        let row = ix.file_row(which)?.unwrap_or_default();
        let now = match inner.checked[which.slot()] {
            Some(stat) => FileNow::seen(&t.file, stat),
            None => FileNow::of(&t.file, path)?,
        };
        let len = inner.unfinished[which.slot()].map_or(now.len, |u| u.min(now.len));
        // What this catch-up finds out of the file's fingerprint.
        let mut known = None;
        let mut tail = Tail {
            end: row.upto,
            needs_newline: row.needs_newline,
            torn: None,
        };
        if len > row.upto || (row.dev, row.ino) != (t.dev, t.ino) {
            let mut ap = ix.applier()?;
            let s = scan::scan_tail_with(
                path,
                &*self.io,
                &t.file,
                row.upto,
                len,
                row.lines,
                row.needs_newline,
                Entry::parser(which),
                |e, off, l| ap.apply(which, e, off, l),
            )?;
            ap.finish()?;
            if s.end != row.upto || (row.dev, row.ino) != (t.dev, t.ino) {
                let fingerprint = index::fingerprint(&*self.io, &t.file, s.end)
                    .map_err(|e| Error::io(path, "read", e))?;
                let row =
                    FileRow::read_to((t.dev, t.ino), &s, row.records + s.records, fingerprint);
                ix.set_file_row(which, &row)?;
                known = Some(index::Known::of(&now, &row));
            }
            tail = Tail {
                end: s.end,
                needs_newline: s.needs_newline,
                torn: s.torn,
            };
        } else if row.upto == now.len {
            // Taken in as it was written, or unchanged.
            known = Some(index::Known::of(&now, &row));
        }
        if known.is_some() {
            inner.known[which.slot()] = known;
        }
        self.note_torn(inner, which, &tail.torn);
        *inner.tail(which) = tail;
        Ok(())
    }

    /// Keep the torn tails a build found, telling each once.
    fn take_torn(&self, inner: &mut Inner, torn: TornTails) {
        for (which, t) in torn {
            self.note_torn(inner, which, &t);
            inner.tail(which).torn = t;
        }
    }

    /// Tell about a torn tail once (not again on every call).
    pub(super) fn note_torn(&self, inner: &mut Inner, which: Which, torn: &Option<TornTail>) {
        if let Some(t) = torn {
            if inner.tail(which).torn.as_ref() != Some(t) {
                let path = self.target_path(which);
                inner.notices.push(torn_notice(path, t, self.writable));
            }
        }
    }

    /// Rebuild the shared index from the files (with the exclusive lock
    /// held), and open it. `why` is told in a notice (none for a spool
    /// that had no index).
    pub(super) fn rebuild(&self, inner: &mut Inner, why: Option<&str>) -> Result<()> {
        if let Some(ix) = inner.index.take() {
            let _ = ix.rollback();
        }
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        let torn = self.build_shared(&main.file, companion_files(inner))?;
        if let Some(why) = why.filter(|w| !w.is_empty()) {
            inner.notices.push(format!(
                "{}: rebuilt the index from the spool files: {why}",
                self.index_path.display()
            ));
        }
        self.take_torn(inner, torn);
        match Index::open_shared(&self.index_path, true, self.busy_timeout) {
            Ok(ix) => {
                inner.index = Some(ix);
                Ok(())
            }
            Err(Unusable::Missing) => Err(Error::Internal(format!(
                "{} vanished right after it was built",
                self.index_path.display()
            ))),
            Err(Unusable::Invalid(why)) => Err(Error::Internal(format!(
                "{} cannot be used right after it was built: {why}",
                self.index_path.display()
            ))),
        }
    }

    /// Build the shared index of `main` and the companion files (dead
    /// letters, delivered items) into a temporary file and rename it into
    /// place. Returns the torn tails found.
    pub(super) fn build_shared(
        &self,
        main: &File,
        companions: [Option<&File>; 2],
    ) -> Result<TornTails> {
        let tmp = companion(&self.index_path, "tmp");
        let _ = std::fs::remove_file(&tmp);
        crate::private_file::create_replacement(&tmp, &self.index_path)
            .map_err(|e| Error::io(&tmp, "create", e))?;
        let built = Index::create(Some(&tmp)).and_then(|ix| {
            let torn = self.load(&ix, main, companions, [None; 2])?;
            ix.finish_build()?;
            ix.close()?;
            Ok(torn)
        });
        let torn = match built {
            Ok(t) => t,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        self.install_index(&tmp)?;
        Ok(torn)
    }

    /// Build a private index (a read-only handle that cannot use the
    /// shared one): in a temporary file that SQLite deletes on close.
    pub(super) fn build_private(&self, inner: &mut Inner) -> Result<()> {
        if let Some(ix) = inner.index.take() {
            let _ = ix.rollback();
        }
        let ix = Index::create(None)?;
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        let files = companion_files(inner);
        let limits = [inner.unfinished[1], inner.unfinished[2]];
        let torn = self.load(&ix, &main.file, files, limits)?;
        ix.finish_build()?;
        inner.index = Some(ix);
        self.take_torn(inner, torn);
        Ok(())
    }

    /// Fill a new index from the whole of the files (the companions
    /// first, as every catch-up reads them). Memory holds a few blocks of
    /// the file and SQLite's cache, whatever the size of the spool.
    pub(super) fn load(
        &self,
        ix: &Index,
        main: &File,
        companions: [Option<&File>; 2],
        limits: [Option<u64>; 2],
    ) -> Result<TornTails> {
        let mut torn = Vec::with_capacity(3);
        for ((which, f), limit) in Which::COMPANIONS.into_iter().zip(companions).zip(limits) {
            torn.push((which, self.load_file(ix, which, f, limit)?));
        }
        torn.push((
            Which::Main,
            self.load_file(ix, Which::Main, Some(main), None)?,
        ));
        Ok(torn)
    }

    /// Take the whole of one file (up to `limit`) into a new index, and
    /// its row; its torn tail. The main file is scanned on every core.
    pub(super) fn load_file(
        &self,
        ix: &Index,
        which: Which,
        file: Option<&File>,
        limit: Option<u64>,
    ) -> Result<Option<TornTail>> {
        let Some(f) = file else { return Ok(None) };
        let path = self.target_path(which);
        let mut ap = ix.applier()?;
        let now = FileNow::of(f, path)?;
        let apply = |e, off, l| ap.apply(which, e, off, l);
        let s = match which {
            Which::Main => scan::scan_file_parallel(path, &*self.io, f, Entry::parse, apply)?,
            _ => scan::scan_tail_with(
                path,
                &*self.io,
                f,
                0,
                limit.map_or(now.len, |l| l.min(now.len)),
                0,
                false,
                Entry::parser(which),
                apply,
            )?,
        };
        ap.finish()?;
        let fingerprint =
            index::fingerprint(&*self.io, f, s.end).map_err(|e| Error::io(path, "read", e))?;
        ix.set_file_row(
            which,
            &FileRow::read_to((now.dev, now.ino), &s, s.records, fingerprint),
        )?;
        Ok(s.torn)
    }

    /// Find the moves a crash left unfinished at the end of the companion
    /// files and settle them: a writer with the lock cuts each off, a
    /// reader leaves it out ([`Inner::unfinished`]).
    ///
    /// A move (dead-lettering, requeue, retained delivery, an eviction, an
    /// import of dead or delivered records, a push ack) writes its
    /// companion lines first, each with `"at":<offset>` naming where its
    /// main-file part starts, then that part: the main file's part is the
    /// commit point. Companion lines whose main-file part is not there
    /// (nothing past the offset, or only an unfinished batch or torn line
    /// that starts there) were never committed. Only the last move of a
    /// file can be unfinished: every writer settles moves before it
    /// writes.
    pub(super) fn settle_moves(&self, inner: &mut Inner, exclusive: bool) -> Result<()> {
        for which in Which::COMPANIONS {
            inner.unfinished[which.slot()] = None;
            let Some(t) = inner.tracked(which) else {
                continue;
            };
            let now = t
                .file
                .metadata()
                .map(|m| (m.ino(), m.len()))
                .map_err(|e| Error::io(self.target_path(which), "inspect", e))?;
            if inner.settled[which.slot()] == Some(now) {
                continue;
            }
            let Some(start) = self.unfinished_move(inner, which)? else {
                inner.settled[which.slot()] = Some(now);
                continue;
            };
            if self.writable && exclusive {
                let path = self.target_path(which);
                let t = inner.tracked(which).ok_or_else(no_handle)?;
                self.io
                    .truncate(&t.file, start)
                    .and_then(|()| self.io.sync(&t.file))
                    .map_err(|e| Error::io(path, "cut the unfinished move at the end of", e))?;
                *inner.tail(which) = Tail::default();
                inner.notices.push(format!(
                    "{}: cut off the lines from byte {start} on: a move that a crash \
                     interrupted before the main file committed it",
                    path.display()
                ));
            } else {
                inner.unfinished[which.slot()] = Some(start);
            }
        }
        Ok(())
    }

    /// Where the unfinished move at the end of companion `which` begins
    /// (see [`FileQueue::settle_moves`]), if there is one.
    fn unfinished_move(&self, inner: &Inner, which: Which) -> Result<Option<u64>> {
        let Some(t) = inner.tracked(which) else {
            return Ok(None);
        };
        let main = inner.main.as_ref().ok_or_else(no_handle)?;
        scan::unfinished_move(
            &*self.io,
            self.target_path(which),
            &t.file,
            &self.path,
            &main.file,
            main.ino,
        )
    }

    pub(super) fn cut_torn_tail(
        &self,
        inner: &mut Inner,
        which: Which,
        torn: TornTail,
    ) -> Result<()> {
        let path = self.target_path(which);
        let t = inner.tracked(which).ok_or_else(no_handle)?;
        self.io
            .truncate(&t.file, torn.offset)
            .and_then(|()| self.io.sync(&t.file))
            .map_err(|e| Error::io(path, "cut the torn tail of", e))?;
        inner.tail(which).torn = None;
        inner.notices.push(cut_notice(path, &torn));
        Ok(())
    }
}

/// A [`Carry`] started beside a compaction ([`FileQueue::start_carry`]).
/// Dropped without [`CarryJob::join`] (the compaction failed, or must run
/// again), it waits for its thread and removes the copy.
pub(super) struct CarryJob {
    handle: Option<std::thread::JoinHandle<Result<Carry>>>,
    tmp: PathBuf,
}

impl CarryJob {
    /// Wait for the first step.
    fn join(mut self) -> Result<Carry> {
        let handle = self.handle.take().ok_or_else(no_carry)?;
        handle.join().map_err(|_| no_carry())?
    }
}

fn no_carry() -> Error {
    Error::Internal("the index carry-over thread ended without a result".into())
}

impl Drop for CarryJob {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            // Its connection closes before the copy goes.
            drop(handle.join());
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
