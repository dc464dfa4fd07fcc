//! A crash-injecting SQLite VFS for tests: it crashes a database the way a
//! process crash or a power loss does, at any I/O operation — the model of
//! SQLite's own crash VFS (`src/test6.c`).
//!
//! [`install`] registers the shim as the process's default VFS, wrapping
//! the previous default ("unix"), so that every connection the library
//! opens inside itself (the SQLite backend, the NDJSON backend's derived
//! index) goes through it. It acts only on files under a directory being
//! [`watch`]ed; tests run on many threads of one process, each in its own
//! temporary directory, and every other file passes straight through.
//!
//! For a watched file the shim
//! - counts the operations that change it — `xWrite`, `xSync`,
//!   `xTruncate`, `xDelete` ([`Watch::ops`]) — and, from a chosen one on,
//!   fails every further one with `SQLITE_IOERR` ([`Watch::fail_after`]):
//!   the process died there (reads keep working, as they would have for
//!   the instant before the death);
//! - keeps an undo log of every write and truncate made since the file's
//!   last `xSync` (offset, the bytes before, the length before), which
//!   [`Watch::crash`] replays to make what a power loss leaves: every
//!   unsynced write is, per 512-byte sector, either kept or lost, and an
//!   unsynced truncate is kept or undone, each by a seeded choice.
//!
//! What it does not model: the durability of directory entries (a file
//! created and never followed by a directory sync survives; a deleted
//! file stays deleted; there are no renames through SQLite), sectors
//! written with garbage (a sector is either its old or its new content),
//! and writes through the shared-memory file (`-shm`), which SQLite
//! rebuilds from the WAL after a crash anyway. The state of a file when it
//! starts being watched counts as durable.
//!
//! Every choice comes from the seed: the same sequence of operations and
//! the same seed give the same bytes on disk.
//!
//! A watch applies to the files of connections opened after [`install`],
//! whenever they were opened: each operation looks up whether its file is
//! watched right then. `CRASH_VFS_TRACE=1` prints every counted operation
//! (its index, kind, file, offset and length) to stderr.
#![allow(dead_code)] // each test binary that includes this uses a part of it

use rusqlite::ffi;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

/// The unit a power loss keeps or loses.
const SECTOR: u64 = 512;

/// What a crash leaves behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crash {
    /// A process crash: everything written stays (the operating system's
    /// page cache survives the process).
    Process,
    /// A power loss: every write made since a file's last sync is, per
    /// 512-byte sector, kept or lost, and an unsynced truncate may be
    /// undone, as `seed` chooses.
    PowerLoss {
        /// Drives every keep-or-lose choice.
        seed: u64,
    },
}

/// Registers the shim as the default VFS (idempotent, thread-safe).
pub fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| unsafe {
        let real = ffi::sqlite3_vfs_find(ptr::null());
        assert!(!real.is_null(), "SQLite has no default VFS");
        REAL_VFS.store(real, Ordering::SeqCst);
        let vfs = Box::new(ffi::sqlite3_vfs {
            iVersion: (*real).iVersion.min(3),
            szOsFile: (std::mem::size_of::<CrashFile>() as c_int) + (*real).szOsFile,
            mxPathname: (*real).mxPathname,
            pNext: ptr::null_mut(),
            zName: c"spool-crash".as_ptr(),
            pAppData: ptr::null_mut(),
            xOpen: Some(x_open),
            xDelete: Some(x_delete),
            xAccess: Some(x_access),
            xFullPathname: Some(x_full_pathname),
            xDlOpen: Some(x_dl_open),
            xDlError: Some(x_dl_error),
            xDlSym: Some(x_dl_sym),
            xDlClose: Some(x_dl_close),
            xRandomness: Some(x_randomness),
            xSleep: Some(x_sleep),
            xCurrentTime: Some(x_current_time),
            xGetLastError: Some(x_get_last_error),
            xCurrentTimeInt64: Some(x_current_time_int64),
            xSetSystemCall: Some(x_set_system_call),
            xGetSystemCall: Some(x_get_system_call),
            xNextSystemCall: Some(x_next_system_call),
        });
        let rc = ffi::sqlite3_vfs_register(Box::into_raw(vfs), 1);
        assert_eq!(rc, ffi::SQLITE_OK, "registering the crash VFS failed");
    });
}

/// Starts watching every file under `dir` (journal, WAL, `-shm`
/// included); installs the shim first if needed. Dropping the [`Watch`]
/// stops watching.
pub fn watch(dir: &Path) -> Watch {
    install();
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let canonical = std::fs::canonicalize(dir).unwrap_or_else(|_| abs.clone());
    let shared = Arc::new(Shared {
        dirs: vec![abs, canonical],
        state: Mutex::new(State::default()),
    });
    registry().push(shared.clone());
    Watch { shared }
}

/// A watched directory: its operation count, failure point and undo logs.
pub struct Watch {
    shared: Arc<Shared>,
}

impl Watch {
    /// I/O operations so far on watched files (`xWrite`, `xSync`,
    /// `xTruncate`, `xDelete` count; a failed one does not).
    pub fn ops(&self) -> u64 {
        self.shared.lock().ops
    }

    /// After `n` more operations, every further write/sync/truncate/delete
    /// on a watched file fails with `SQLITE_IOERR` (the "process" died
    /// there); reads keep working.
    pub fn fail_after(&self, n: u64) {
        let mut st = self.shared.lock();
        st.fail_at = Some(st.ops + n);
        st.tripped = false;
    }

    /// The file at `path` was rewritten outside SQLite: what it holds now
    /// counts as durable, and its undo log is dropped.
    pub fn forget(&self, path: &Path) {
        self.shared.lock().unsynced.remove(path);
    }

    /// True once the failure point was reached.
    pub fn tripped(&self) -> bool {
        self.shared.lock().tripped
    }

    /// Leaves on disk what a crash of `kind` leaves. Call after the
    /// connections on the files are closed; it also stops failing
    /// operations and starts the files' undo logs afresh (what is on disk
    /// afterwards counts as durable).
    pub fn crash(&self, kind: Crash) {
        let mut st = self.shared.lock();
        let files = std::mem::take(&mut st.unsynced);
        st.fail_at = None;
        if let Crash::PowerLoss { seed } = kind {
            let mut rng = SplitMix64(seed);
            for (path, u) in files {
                use std::os::unix::fs::MetadataExt;
                // Another file renamed over this one keeps its own content.
                if std::fs::metadata(&path).is_ok_and(|m| m.ino() == u.ino) {
                    lose_unsynced(&path, &u.changes, &mut rng);
                }
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        registry().retain(|w| !Arc::ptr_eq(w, &self.shared));
    }
}

/// What a power loss does to one file: start from its content at the last
/// sync (undo every change, newest first), then redo each change in order,
/// keeping each sector of a write, and each truncate, by a seeded choice.
fn lose_unsynced(path: &Path, changes: &[Change], rng: &mut SplitMix64) {
    if changes.is_empty() {
        return;
    }
    let mut image = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => panic!("crash VFS: cannot read {}: {e}", path.display()),
    };
    for c in changes.iter().rev() {
        match c {
            Change::Write {
                offset,
                old,
                old_len,
                ..
            } => {
                let at = *offset as usize;
                image[at..at + old.len()].copy_from_slice(old);
                image.truncate(*old_len as usize);
            }
            Change::Truncate { old_len, tail, .. } => {
                image.truncate(*old_len as usize);
                let cut = (*old_len as usize) - tail.len();
                image.resize(cut, 0);
                image.extend_from_slice(tail);
            }
        }
    }
    for c in changes {
        match c {
            Change::Write { offset, data, .. } => {
                let end = offset + data.len() as u64;
                let mut pos = *offset;
                while pos < end {
                    let next = ((pos / SECTOR + 1) * SECTOR).min(end);
                    if rng.keep() {
                        if image.len() < next as usize {
                            image.resize(next as usize, 0);
                        }
                        let from = (pos - offset) as usize;
                        let to = (next - offset) as usize;
                        image[pos as usize..next as usize].copy_from_slice(&data[from..to]);
                    }
                    pos = next;
                }
            }
            Change::Truncate { len, .. } => {
                if rng.keep() {
                    image.resize(*len as usize, 0);
                }
            }
        }
    }
    std::fs::write(path, &image)
        .unwrap_or_else(|e| panic!("crash VFS: cannot write {}: {e}", path.display()));
}

/// A change to a file since its last sync, with what undoes it.
enum Change {
    Write {
        offset: u64,
        data: Vec<u8>,
        /// The bytes `data` replaced (those that were inside the file).
        old: Vec<u8>,
        /// The file's length before.
        old_len: u64,
    },
    Truncate {
        len: u64,
        /// The file's length before.
        old_len: u64,
        /// The bytes the truncate cut off (empty when it grew the file).
        tail: Vec<u8>,
    },
}

struct Shared {
    /// The watched directory as given (made absolute) and canonical.
    dirs: Vec<PathBuf>,
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn covers(&self, path: &Path) -> bool {
        self.dirs.iter().any(|d| path.starts_with(d))
    }
}

#[derive(Default)]
struct State {
    ops: u64,
    fail_at: Option<u64>,
    tripped: bool,
    /// Per file, the changes since its last sync, oldest first.
    unsynced: BTreeMap<PathBuf, Unsynced>,
}

/// The changes to the file at a path since its last sync: to the file of
/// inode `ino` (a file renamed over it since, outside SQLite, starts
/// afresh: the changes went with the old file).
struct Unsynced {
    ino: u64,
    changes: Vec<Change>,
}

impl State {
    /// Note `change` to the file at `path`.
    fn note(&mut self, path: &Path, change: Change) {
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(path).map_or(0, |m| m.ino());
        let u = self.unsynced.entry(path.to_path_buf()).or_insert(Unsynced {
            ino,
            changes: Vec::new(),
        });
        if u.ino != ino {
            *u = Unsynced {
                ino,
                changes: Vec::new(),
            };
        }
        u.changes.push(change);
    }
}

impl State {
    /// Whether the next operation dies (and remember that it did).
    fn dies(&mut self) -> bool {
        if self.fail_at.is_some_and(|f| self.ops >= f) {
            self.tripped = true;
        }
        self.tripped && self.fail_at.is_some()
    }
}

/// `CRASH_VFS_TRACE=1`: print every counted operation to stderr.
fn trace(watch: &State, what: &str, path: &Path, detail: std::fmt::Arguments<'_>) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("CRASH_VFS_TRACE").is_some_and(|v| v == "1")) {
        eprintln!(
            "crash-vfs op {} {what} {} {detail}",
            watch.ops,
            path.display()
        );
    }
}

fn registry() -> MutexGuard<'static, Vec<Arc<Shared>>> {
    static WATCHES: Mutex<Vec<Arc<Shared>>> = Mutex::new(Vec::new());
    WATCHES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watch covering `path`, if any.
fn watcher(path: &Path) -> Option<Arc<Shared>> {
    registry().iter().find(|w| w.covers(path)).cloned()
}

/// SplitMix64: a small, well-mixed generator; all the shim needs.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn keep(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

// ---------------------------------------------------------------------
// The VFS: xOpen and xDelete act, everything else is forwarded to the
// wrapped VFS.

/// The wrapped VFS (the default before [`install`]).
static REAL_VFS: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());

fn real_vfs() -> *mut ffi::sqlite3_vfs {
    REAL_VFS.load(Ordering::SeqCst)
}

/// A wrapped file: our methods first, the path, then the real file (of
/// the wrapped VFS's `szOsFile` bytes) right after this header.
#[repr(C)]
struct CrashFile {
    base: ffi::sqlite3_file,
    path: *mut PathBuf,
}

unsafe fn inner(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    (file as *mut u8).add(std::mem::size_of::<CrashFile>()) as *mut ffi::sqlite3_file
}

unsafe fn file_path<'a>(file: *mut ffi::sqlite3_file) -> &'a Path {
    &*(*(file as *mut CrashFile)).path
}

/// Run `f`, turning a panic into `SQLITE_IOERR`: no unwinding into C.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(ffi::SQLITE_IOERR)
}

unsafe fn path_of(name: *const c_char) -> Option<PathBuf> {
    if name.is_null() {
        return None;
    }
    let bytes = CStr::from_ptr(name).to_bytes();
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
}

unsafe extern "C" fn x_open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let real = real_vfs();
    let Some(open) = (*real).xOpen else {
        return ffi::SQLITE_CANTOPEN;
    };
    // A temporary file without a name passes straight through: the real
    // file object fits in the space we asked for.
    let Some(path) = path_of(name) else {
        return open(real, name, file, flags, out_flags);
    };
    // A file that is not there was removed behind the shim's back (the
    // library removes a journal of an index it replaces): what SQLite
    // creates now starts afresh.
    if !path.exists() {
        if let Some(watch) = watcher(&path) {
            watch.lock().unsynced.remove(&path);
        }
    }
    let real_file = inner(file);
    (*real_file).pMethods = ptr::null();
    let rc = open(real, name, real_file, flags, out_flags);
    if rc != ffi::SQLITE_OK {
        let methods = (*real_file).pMethods;
        if !methods.is_null() {
            if let Some(close) = (*methods).xClose {
                close(real_file);
            }
        }
        (*file).pMethods = ptr::null();
        return rc;
    }
    let version = (*(*real_file).pMethods).iVersion.clamp(1, 3);
    (*(file as *mut CrashFile)).path = Box::into_raw(Box::new(path));
    (*file).pMethods = &METHODS[(version - 1) as usize];
    rc
}

unsafe extern "C" fn x_delete(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    sync_dir: c_int,
) -> c_int {
    let real = real_vfs();
    let Some(delete) = (*real).xDelete else {
        return ffi::SQLITE_IOERR_DELETE;
    };
    let watched = path_of(name).and_then(|p| watcher(&p).map(|w| (p, w)));
    let Some((path, watch)) = watched else {
        return delete(real, name, sync_dir);
    };
    guard(|| {
        let mut st = watch.lock();
        if st.dies() {
            return ffi::SQLITE_IOERR_DELETE;
        }
        trace(&st, "delete", &path, format_args!(""));
        let rc = delete(real, name, sync_dir);
        st.ops += 1;
        st.unsynced.remove(&path);
        rc
    })
}

unsafe extern "C" fn x_access(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    flags: c_int,
    out: *mut c_int,
) -> c_int {
    let real = real_vfs();
    match (*real).xAccess {
        Some(f) => f(real, name, flags, out),
        None => ffi::SQLITE_IOERR_ACCESS,
    }
}

unsafe extern "C" fn x_full_pathname(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    let real = real_vfs();
    match (*real).xFullPathname {
        Some(f) => f(real, name, n, out),
        None => ffi::SQLITE_CANTOPEN,
    }
}

unsafe extern "C" fn x_dl_open(_vfs: *mut ffi::sqlite3_vfs, name: *const c_char) -> *mut c_void {
    let real = real_vfs();
    match (*real).xDlOpen {
        Some(f) => f(real, name),
        None => ptr::null_mut(),
    }
}

unsafe extern "C" fn x_dl_error(_vfs: *mut ffi::sqlite3_vfs, n: c_int, out: *mut c_char) {
    let real = real_vfs();
    if let Some(f) = (*real).xDlError {
        f(real, n, out)
    }
}

type DlSym = Option<unsafe extern "C" fn(*mut ffi::sqlite3_vfs, *mut c_void, *const c_char)>;

unsafe extern "C" fn x_dl_sym(
    _vfs: *mut ffi::sqlite3_vfs,
    handle: *mut c_void,
    symbol: *const c_char,
) -> DlSym {
    let real = real_vfs();
    match (*real).xDlSym {
        Some(f) => f(real, handle, symbol),
        None => None,
    }
}

unsafe extern "C" fn x_dl_close(_vfs: *mut ffi::sqlite3_vfs, handle: *mut c_void) {
    let real = real_vfs();
    if let Some(f) = (*real).xDlClose {
        f(real, handle)
    }
}

unsafe extern "C" fn x_randomness(
    _vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    let real = real_vfs();
    match (*real).xRandomness {
        Some(f) => f(real, n, out),
        None => 0,
    }
}

unsafe extern "C" fn x_sleep(_vfs: *mut ffi::sqlite3_vfs, micros: c_int) -> c_int {
    let real = real_vfs();
    match (*real).xSleep {
        Some(f) => f(real, micros),
        None => 0,
    }
}

unsafe extern "C" fn x_current_time(_vfs: *mut ffi::sqlite3_vfs, out: *mut f64) -> c_int {
    let real = real_vfs();
    match (*real).xCurrentTime {
        Some(f) => f(real, out),
        None => ffi::SQLITE_ERROR,
    }
}

unsafe extern "C" fn x_get_last_error(
    _vfs: *mut ffi::sqlite3_vfs,
    n: c_int,
    out: *mut c_char,
) -> c_int {
    let real = real_vfs();
    match (*real).xGetLastError {
        Some(f) => f(real, n, out),
        None => 0,
    }
}

unsafe extern "C" fn x_current_time_int64(
    _vfs: *mut ffi::sqlite3_vfs,
    out: *mut ffi::sqlite3_int64,
) -> c_int {
    let real = real_vfs();
    match (*real).xCurrentTimeInt64 {
        Some(f) if (*real).iVersion >= 2 => f(real, out),
        _ => {
            let mut days = 0.0;
            let rc = x_current_time(real, &mut days);
            *out = (days * 86_400_000.0) as ffi::sqlite3_int64;
            rc
        }
    }
}

unsafe extern "C" fn x_set_system_call(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    call: ffi::sqlite3_syscall_ptr,
) -> c_int {
    let real = real_vfs();
    match (*real).xSetSystemCall {
        Some(f) if (*real).iVersion >= 3 => f(real, name, call),
        _ => ffi::SQLITE_NOTFOUND,
    }
}

unsafe extern "C" fn x_get_system_call(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
) -> ffi::sqlite3_syscall_ptr {
    let real = real_vfs();
    match (*real).xGetSystemCall {
        Some(f) if (*real).iVersion >= 3 => f(real, name),
        _ => None,
    }
}

unsafe extern "C" fn x_next_system_call(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
) -> *const c_char {
    let real = real_vfs();
    match (*real).xNextSystemCall {
        Some(f) if (*real).iVersion >= 3 => f(real, name),
        _ => ptr::null(),
    }
}

// ---------------------------------------------------------------------
// The file methods: writes, syncs and truncates of watched files act;
// everything else (reads, locks, shared memory, file controls) is
// forwarded to the real file.

/// Our methods in the three versions; a file gets the version of the
/// real file's methods (WAL needs version 2 for shared memory).
static METHODS: [ffi::sqlite3_io_methods; 3] = [methods(1), methods(2), methods(3)];

const fn methods(version: c_int) -> ffi::sqlite3_io_methods {
    ffi::sqlite3_io_methods {
        iVersion: version,
        xClose: Some(f_close),
        xRead: Some(f_read),
        xWrite: Some(f_write),
        xTruncate: Some(f_truncate),
        xSync: Some(f_sync),
        xFileSize: Some(f_file_size),
        xLock: Some(f_lock),
        xUnlock: Some(f_unlock),
        xCheckReservedLock: Some(f_check_reserved_lock),
        xFileControl: Some(f_file_control),
        xSectorSize: Some(f_sector_size),
        xDeviceCharacteristics: Some(f_device_characteristics),
        xShmMap: Some(f_shm_map),
        xShmLock: Some(f_shm_lock),
        xShmBarrier: Some(f_shm_barrier),
        xShmUnmap: Some(f_shm_unmap),
        xFetch: Some(f_fetch),
        xUnfetch: Some(f_unfetch),
    }
}

/// Call the real file's method `$m`, or return `$none` when it has none.
macro_rules! forward {
    ($file:expr, $m:ident, $none:expr $(, $arg:expr)*) => {{
        let real = inner($file);
        match (*(*real).pMethods).$m {
            Some(f) => f(real $(, $arg)*),
            None => $none,
        }
    }};
}

unsafe extern "C" fn f_close(file: *mut ffi::sqlite3_file) -> c_int {
    let rc = forward!(file, xClose, ffi::SQLITE_OK);
    let me = file as *mut CrashFile;
    if !(*me).path.is_null() {
        drop(Box::from_raw((*me).path));
        (*me).path = ptr::null_mut();
    }
    rc
}

unsafe extern "C" fn f_read(
    file: *mut ffi::sqlite3_file,
    buf: *mut c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    forward!(file, xRead, ffi::SQLITE_IOERR_READ, buf, amt, offset)
}

/// The real file's length.
unsafe fn real_len(file: *mut ffi::sqlite3_file) -> Result<u64, c_int> {
    let mut size: ffi::sqlite3_int64 = 0;
    let rc = forward!(file, xFileSize, ffi::SQLITE_IOERR_FSTAT, &mut size);
    if rc == ffi::SQLITE_OK {
        Ok(size as u64)
    } else {
        Err(rc)
    }
}

/// The real file's bytes `[offset, offset + len)`, all inside the file.
unsafe fn real_bytes(
    file: *mut ffi::sqlite3_file,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, c_int> {
    let mut buf = vec![0u8; len as usize];
    if len == 0 {
        return Ok(buf);
    }
    let rc = forward!(
        file,
        xRead,
        ffi::SQLITE_IOERR_READ,
        buf.as_mut_ptr() as *mut c_void,
        len as c_int,
        offset as ffi::sqlite3_int64
    );
    if rc == ffi::SQLITE_OK {
        Ok(buf)
    } else {
        Err(rc)
    }
}

unsafe extern "C" fn f_write(
    file: *mut ffi::sqlite3_file,
    buf: *const c_void,
    amt: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let path = file_path(file);
    let Some(watch) = watcher(path) else {
        return forward!(file, xWrite, ffi::SQLITE_IOERR_WRITE, buf, amt, offset);
    };
    guard(|| {
        let mut st = watch.lock();
        if st.dies() {
            return ffi::SQLITE_IOERR_WRITE;
        }
        let (off, len) = (offset as u64, amt.max(0) as u64);
        let old_len = match real_len(file) {
            Ok(l) => l,
            Err(rc) => return rc,
        };
        let kept = old_len.saturating_sub(off).min(len);
        let old = match real_bytes(file, off, kept) {
            Ok(b) => b,
            Err(rc) => return rc,
        };
        trace(&st, "write", path, format_args!("{off}+{len}"));
        let rc = forward!(file, xWrite, ffi::SQLITE_IOERR_WRITE, buf, amt, offset);
        st.ops += 1;
        if rc == ffi::SQLITE_OK {
            let data = std::slice::from_raw_parts(buf as *const u8, len as usize).to_vec();
            st.note(
                path,
                Change::Write {
                    offset: off,
                    data,
                    old,
                    old_len,
                },
            );
        }
        rc
    })
}

unsafe extern "C" fn f_truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    let path = file_path(file);
    let Some(watch) = watcher(path) else {
        return forward!(file, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, size);
    };
    guard(|| {
        let mut st = watch.lock();
        if st.dies() {
            return ffi::SQLITE_IOERR_TRUNCATE;
        }
        let old_len = match real_len(file) {
            Ok(l) => l,
            Err(rc) => return rc,
        };
        trace(&st, "truncate", path, format_args!("{old_len} -> {size}"));
        let rc = match real_bytes(file, size as u64, old_len.saturating_sub(size as u64)) {
            Ok(tail) => {
                let rc = forward!(file, xTruncate, ffi::SQLITE_IOERR_TRUNCATE, size);
                // What the real truncate left (it may round a size up).
                let len = real_len(file).unwrap_or(size as u64);
                if rc == ffi::SQLITE_OK {
                    let tail =
                        tail[..(old_len.saturating_sub(len) as usize).min(tail.len())].to_vec();
                    st.note(path, Change::Truncate { len, old_len, tail });
                }
                rc
            }
            Err(rc) => rc,
        };
        st.ops += 1;
        rc
    })
}

unsafe extern "C" fn f_sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    let path = file_path(file);
    let Some(watch) = watcher(path) else {
        return forward!(file, xSync, ffi::SQLITE_IOERR_FSYNC, flags);
    };
    guard(|| {
        let mut st = watch.lock();
        if st.dies() {
            return ffi::SQLITE_IOERR_FSYNC;
        }
        trace(&st, "sync", path, format_args!("{flags:#x}"));
        let rc = forward!(file, xSync, ffi::SQLITE_IOERR_FSYNC, flags);
        st.ops += 1;
        if rc == ffi::SQLITE_OK {
            st.unsynced.remove(path);
        }
        rc
    })
}

unsafe extern "C" fn f_file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    forward!(file, xFileSize, ffi::SQLITE_IOERR_FSTAT, size)
}

unsafe extern "C" fn f_lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(file, xLock, ffi::SQLITE_IOERR_LOCK, level)
}

unsafe extern "C" fn f_unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    forward!(file, xUnlock, ffi::SQLITE_IOERR_UNLOCK, level)
}

unsafe extern "C" fn f_check_reserved_lock(file: *mut ffi::sqlite3_file, out: *mut c_int) -> c_int {
    forward!(
        file,
        xCheckReservedLock,
        ffi::SQLITE_IOERR_CHECKRESERVEDLOCK,
        out
    )
}

unsafe extern "C" fn f_file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    arg: *mut c_void,
) -> c_int {
    forward!(file, xFileControl, ffi::SQLITE_NOTFOUND, op, arg)
}

unsafe extern "C" fn f_sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    forward!(file, xSectorSize, SECTOR as c_int)
}

unsafe extern "C" fn f_device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    forward!(file, xDeviceCharacteristics, 0)
}

unsafe extern "C" fn f_shm_map(
    file: *mut ffi::sqlite3_file,
    region: c_int,
    size: c_int,
    extend: c_int,
    out: *mut *mut c_void,
) -> c_int {
    forward!(
        file,
        xShmMap,
        ffi::SQLITE_IOERR_SHMMAP,
        region,
        size,
        extend,
        out
    )
}

unsafe extern "C" fn f_shm_lock(
    file: *mut ffi::sqlite3_file,
    offset: c_int,
    n: c_int,
    flags: c_int,
) -> c_int {
    forward!(file, xShmLock, ffi::SQLITE_IOERR_SHMLOCK, offset, n, flags)
}

unsafe extern "C" fn f_shm_barrier(file: *mut ffi::sqlite3_file) {
    forward!(file, xShmBarrier, ())
}

unsafe extern "C" fn f_shm_unmap(file: *mut ffi::sqlite3_file, delete: c_int) -> c_int {
    forward!(file, xShmUnmap, ffi::SQLITE_OK, delete)
}

unsafe extern "C" fn f_fetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    let real = inner(file);
    if (*(*real).pMethods).iVersion < 3 {
        *out = ptr::null_mut();
        return ffi::SQLITE_OK;
    }
    forward!(file, xFetch, ffi::SQLITE_OK, offset, amt, out)
}

unsafe extern "C" fn f_unfetch(
    file: *mut ffi::sqlite3_file,
    offset: ffi::sqlite3_int64,
    p: *mut c_void,
) -> c_int {
    let real = inner(file);
    if (*(*real).pMethods).iVersion < 3 {
        return ffi::SQLITE_OK;
    }
    forward!(file, xUnfetch, ffi::SQLITE_OK, offset, p)
}
