//! A crash-injecting [`FileIo`] for the NDJSON backend's data files (the
//! main, dead-letter, delivered and meta files; the derived `.idx` index
//! is a SQLite database and does its own I/O).
//!
//! * Every call through the seam is one operation, counted. Armed with
//!   [`CrashIo::fail_after`]`(n)`, the operations after the first `n`
//!   fail with an I/O error (the one that trips, if it is a write, first
//!   writes a seeded prefix of its buffer: a process killed in the middle
//!   of an append), and so does every later one until [`CrashIo::reset`]:
//!   the process is dying.
//! * Each file is tracked by inode (the seam gets a `&File`): its content
//!   as of its last `sync` (its *durable image*, or the content it had
//!   when first seen, which a fresh run treats as durable) and the writes
//!   and truncations made since, in order.
//! * [`CrashIo::power_loss`] then rewrites every tracked file still in
//!   the directory as a power loss would leave it: the durable image plus
//!   a seeded prefix of the unsynced mutations — half the time nothing of
//!   them, otherwise cut at a seeded byte, so that the last unsynced
//!   write survives torn.
//! * `rename` and `sync_dir` are counted (and fail once tripped). The
//!   directory's entries are durable as of its last `sync_dir` (or the
//!   last [`CrashIo::reset`]: what a new process finds): half of the power
//!   losses (seeded) put the directory back as it was then — files
//!   created since are gone, files renamed over or removed since are back
//!   (the seam keeps a hard link of every file the last sync saw) — and
//!   the other half keep every change, in which case a rename-over keeps
//!   the data synced before it (ext4's `auto_da_alloc`, XFS). So a missing
//!   directory sync loses what it would on a real disk.

use spool::backend::file::io::{FileIo, RealIo};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Seek};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Clone, Debug)]
enum Mutation {
    Write { offset: u64, data: Vec<u8> },
    Truncate(u64),
}

#[derive(Debug, Default)]
struct Tracked {
    /// The content as of the last sync.
    image: Vec<u8>,
    /// What happened since, in order.
    log: Vec<Mutation>,
}

#[derive(Debug, Default)]
struct State {
    ops: u64,
    fail_after: Option<u64>,
    tripped: bool,
    /// Seeds the length of the prefix a tripping write still writes.
    tear: u64,
    files: HashMap<u64, Tracked>,
    /// The directory's entries (name, inode) as of its last sync.
    entries: BTreeMap<OsString, u64>,
    /// Entries that power losses took away or brought back.
    lost: u64,
}

/// See the module documentation.
#[derive(Debug)]
pub struct CrashIo {
    dir: PathBuf,
    /// A hard link of every file of the last synced entries, named by
    /// inode, so that a power loss can bring back one removed since.
    links: PathBuf,
    st: Mutex<State>,
}

/// The regular files of `dir` by name, with their inodes.
fn entries(dir: &Path) -> BTreeMap<OsString, u64> {
    let Ok(list) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    list.filter_map(|e| e.ok())
        .filter_map(|e| {
            let md = std::fs::symlink_metadata(e.path()).ok()?;
            md.is_file().then(|| (e.file_name(), md.ino()))
        })
        .collect()
}

/// The file's whole content, read through a new open file description
/// (the seam's may be write-only).
fn read_all(file: &File) -> io::Result<Vec<u8>> {
    use std::os::fd::AsRawFd;
    std::fs::read(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

fn crashed() -> io::Error {
    io::Error::other("simulated crash: the process is dying")
}

impl CrashIo {
    /// A seam for the files of the spool in `dir`.
    pub fn new(dir: &Path) -> CrashIo {
        let io = CrashIo {
            dir: dir.to_path_buf(),
            links: dir.join(".crash-io-links"),
            st: Mutex::new(State::default()),
        };
        std::fs::create_dir(&io.links).expect("create the directory of saved links");
        io.sync_entries(&mut io.lock());
        io
    }

    /// Take the directory's entries as durable (a directory sync).
    fn sync_entries(&self, st: &mut State) {
        st.entries = entries(&self.dir);
        let keep: std::collections::HashSet<String> =
            st.entries.values().map(|ino| ino.to_string()).collect();
        for e in std::fs::read_dir(&self.links)
            .into_iter()
            .flatten()
            .flatten()
        {
            if !keep.contains(&*e.file_name().to_string_lossy()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        // A file that went between the listing and its link (a thread
        // of the spool renamed it) is not taken as durable under that name.
        st.entries.retain(|name, ino| {
            let link = self.links.join(ino.to_string());
            link.exists() || std::fs::hard_link(self.dir.join(name), &link).is_ok()
        });
    }

    /// Put the directory's entries back as of its last sync.
    fn lose_entries(&self, st: &mut State) {
        let now = entries(&self.dir);
        for (name, ino) in &now {
            if st.entries.get(name) != Some(ino) {
                std::fs::remove_file(self.dir.join(name)).expect("lose a directory entry");
                st.lost += 1;
            }
        }
        for (name, ino) in &st.entries {
            if now.get(name) != Some(ino) {
                std::fs::hard_link(self.links.join(ino.to_string()), self.dir.join(name))
                    .expect("bring back a directory entry");
                st.lost += 1;
            }
        }
    }

    /// How many directory entries power losses changed since the last
    /// call.
    pub fn take_lost_entries(&self) -> u64 {
        std::mem::take(&mut self.lock().lost)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fail every operation after the next `n` (`tear` seeds how much of
    /// a tripping write is written).
    pub fn fail_after(&self, n: u64, tear: u64) {
        let mut st = self.lock();
        st.fail_after = Some(st.ops + n);
        st.tear = tear;
    }

    /// Stop failing (an armed crash that did not trip is called off).
    pub fn disarm(&self) {
        self.lock().fail_after = None;
    }

    /// Whether an operation failed since the last reset.
    pub fn tripped(&self) -> bool {
        self.lock().tripped
    }

    /// A new process: nothing armed, nothing tripped, every file's
    /// current content taken as durable (what is on disk after a crash
    /// is what the next process finds).
    pub fn reset(&self) {
        let mut st = self.lock();
        st.fail_after = None;
        st.tripped = false;
        st.files.clear();
        self.sync_entries(&mut st);
    }

    /// Take every file's current content as durable: another writer
    /// (a reference writer, a test) wrote and synced outside the seam.
    pub fn settle(&self) {
        let mut st = self.lock();
        st.files.clear();
        self.sync_entries(&mut st);
    }

    /// Count one operation on `file` (tracking it from now on); `Err`
    /// once the crash tripped.
    fn enter(&self, st: &mut State, file: Option<&File>) -> io::Result<()> {
        if let Some(f) = file {
            let ino = f.metadata()?.ino();
            if let std::collections::hash_map::Entry::Vacant(v) = st.files.entry(ino) {
                v.insert(Tracked {
                    image: read_all(f)?,
                    log: Vec::new(),
                });
            }
        }
        let n = st.ops;
        st.ops += 1;
        if st.tripped || st.fail_after.is_some_and(|f| n >= f) {
            st.tripped = true;
            return Err(crashed());
        }
        Ok(())
    }

    fn log(st: &mut State, file: &File, m: Mutation) -> io::Result<()> {
        let ino = file.metadata()?.ino();
        st.files.entry(ino).or_default().log.push(m);
        Ok(())
    }

    /// Rewrite the tracked files of the directory as a power loss leaves
    /// them (see the module documentation). Call after every handle on
    /// them is dropped.
    pub fn power_loss(&self, seed: u64) {
        let mut rng = super::rng::Rng::new(seed);
        let mut st = self.lock();
        // A stream of its own, so that the files' prefixes stay as before.
        if super::rng::Rng::new(seed ^ 0x4449_5245_4e54_5259).bool() {
            self.lose_entries(&mut st);
        }
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut paths: Vec<(PathBuf, u64)> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let md = e.metadata().ok()?;
                md.is_file().then(|| (e.path(), md.ino()))
            })
            .collect();
        paths.sort();
        for (path, ino) in paths {
            let Some(t) = st.files.get(&ino) else {
                continue;
            };
            // The unsynced mutations as a stream of units: a byte of a
            // write, or a whole truncation. A prefix of it survives.
            let total: u64 = t
                .log
                .iter()
                .map(|m| match m {
                    Mutation::Write { data, .. } => data.len() as u64,
                    Mutation::Truncate(_) => 1,
                })
                .sum();
            let mut budget = if rng.bool() { 0 } else { rng.below(total + 1) };
            let mut content = t.image.clone();
            for m in &t.log {
                if budget == 0 {
                    break;
                }
                match m {
                    Mutation::Truncate(len) => {
                        budget -= 1;
                        content.resize(*len as usize, 0);
                    }
                    Mutation::Write { offset, data } => {
                        let n = (data.len() as u64).min(budget) as usize;
                        budget -= n as u64;
                        let off = *offset as usize;
                        if content.len() < off + n {
                            content.resize(off + n, 0);
                        }
                        content[off..off + n].copy_from_slice(&data[..n]);
                    }
                }
            }
            std::fs::write(&path, &content).expect("rewrite a file after a power loss");
        }
    }
}

impl FileIo for CrashIo {
    fn read_at(&self, file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.enter(&mut self.lock(), None)?;
        RealIo.read_at(file, buf, offset)
    }

    fn write(&self, file: &mut File, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.lock();
        let r = self.enter(&mut st, Some(&*file));
        let buf = match r {
            Ok(()) => buf,
            Err(e) => {
                // The first failing operation: part of the write may land.
                let n = (st.tear % (buf.len() as u64 + 1)) as usize;
                st.tear = 0;
                if n > 0 {
                    if let Ok(k) = RealIo.write(file, &buf[..n]) {
                        let offset = file.stream_position()? - k as u64;
                        let data = buf[..k].to_vec();
                        Self::log(&mut st, file, Mutation::Write { offset, data })?;
                    }
                }
                return Err(e);
            }
        };
        let n = RealIo.write(file, buf)?;
        let offset = file.stream_position()? - n as u64;
        let data = buf[..n].to_vec();
        Self::log(&mut st, file, Mutation::Write { offset, data })?;
        Ok(n)
    }

    fn sync(&self, file: &File) -> io::Result<()> {
        let mut st = self.lock();
        self.enter(&mut st, Some(file))?;
        RealIo.sync(file)?;
        let ino = file.metadata()?.ino();
        let image = read_all(file)?;
        st.files.insert(
            ino,
            Tracked {
                image,
                log: Vec::new(),
            },
        );
        Ok(())
    }

    fn start_writeback(&self, _file: &File, _offset: u64, _len: u64) {
        // A hint: nothing becomes durable before `sync`.
    }

    fn truncate(&self, file: &File, len: u64) -> io::Result<()> {
        let mut st = self.lock();
        self.enter(&mut st, Some(file))?;
        RealIo.truncate(file, len)?;
        Self::log(&mut st, file, Mutation::Truncate(len))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.enter(&mut self.lock(), None)?;
        RealIo.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.lock();
        self.enter(&mut st, None)?;
        RealIo.sync_dir(dir)?;
        if dir == self.dir {
            self.sync_entries(&mut st);
        }
        Ok(())
    }

    fn copy(&self, from: &File, offset: u64, to: &mut File, len: usize) -> io::Result<usize> {
        let mut st = self.lock();
        self.enter(&mut st, Some(&*to))?;
        let n = RealIo.copy(from, offset, to, len)?;
        let start = to.stream_position()? - n as u64;
        let mut data = vec![0; n];
        let got = from.read_at(&mut data, offset)?;
        data.truncate(got);
        Self::log(
            &mut st,
            to,
            Mutation::Write {
                offset: start,
                data,
            },
        )?;
        Ok(n)
    }
}
