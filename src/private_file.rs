//! Files that `spool` creates are private to their owner.
//!
//! Payloads often hold credentials and personal data, so every file
//! `spool` creates — the SQLite database (SQLite gives its `-wal` and
//! `-shm` files the database file's mode), the NDJSON main file and its
//! companions, lock files, the temporary files of atomic replacements,
//! exports written with `-o`, metrics files — is created with mode `0600`,
//! which the umask may narrow further but never widen.
//!
//! A file that already exists keeps its mode: opening it changes nothing,
//! and replacing it atomically (temporary file, rename) gives the
//! temporary file the replaced file's permission bits before the rename.
//! An operator who made a spool group-readable on purpose keeps it that
//! way through writes and compactions.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of every file `spool` creates, before the umask.
pub const MODE: u32 = 0o600;

/// The permission bits of a mode (no file type, no setuid/setgid/sticky).
const PERMISSION_BITS: u32 = 0o777;

/// [`OpenOptions`] whose `create` and `create_new` make a file with mode
/// [`MODE`] (narrowed by the umask). The caller adds the access and
/// creation flags as usual; an existing file opened through them keeps
/// its mode.
pub(crate) fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    o.mode(MODE);
    o
}

/// Create (or truncate) `tmp`, the temporary file that is about to
/// replace `target` by a rename, with [`options`], and give it the mode it
/// should have after the rename (see [`match_mode`]).
pub(crate) fn create_replacement(tmp: &Path, target: &Path) -> io::Result<File> {
    let file = options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    match_mode(&file, target)?;
    Ok(file)
}

/// Give `file`, a new temporary file that will replace `target` by a
/// rename, the permission bits `target` has now. When there is no
/// `target` yet, `file` keeps the private mode it was created with; a
/// stale temporary file (left by a crash, reused) is narrowed to at most
/// [`MODE`].
pub(crate) fn match_mode(file: &File, target: &Path) -> io::Result<()> {
    let have = file.metadata()?.permissions().mode() & PERMISSION_BITS;
    let want = match std::fs::metadata(target) {
        Ok(m) => m.permissions().mode() & PERMISSION_BITS,
        Err(e) if e.kind() == io::ErrorKind::NotFound => have & MODE,
        Err(e) => return Err(e),
    };
    if have != want {
        file.set_permissions(Permissions::from_mode(want))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & PERMISSION_BITS
    }

    #[test]
    fn new_files_are_at_most_0600() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("new");
        options().write(true).create_new(true).open(&p).unwrap();
        // The test process's umask can only take bits away.
        assert_eq!(mode(&p) & !MODE, 0, "{:o}", mode(&p));
    }

    #[test]
    fn an_existing_file_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("old");
        std::fs::write(&p, "x").unwrap();
        std::fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        options().append(true).create(true).open(&p).unwrap();
        assert_eq!(mode(&p), 0o644);
    }

    #[test]
    fn a_replacement_takes_the_mode_of_the_file_it_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let tmp = dir.path().join("target.tmp");
        std::fs::write(&target, "x").unwrap();
        for want in [0o640, 0o644, 0o600, 0o400] {
            std::fs::set_permissions(&target, Permissions::from_mode(want)).unwrap();
            let _ = std::fs::remove_file(&tmp);
            create_replacement(&tmp, &target).unwrap();
            assert_eq!(mode(&tmp), want, "{want:o}");
        }
    }

    #[test]
    fn a_stale_temporary_file_is_narrowed_when_there_is_no_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let tmp = dir.path().join("target.tmp");
        std::fs::write(&tmp, "stale").unwrap();
        std::fs::set_permissions(&tmp, Permissions::from_mode(0o666)).unwrap();
        let f = create_replacement(&tmp, &target).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0, "truncated");
        assert_eq!(mode(&tmp), 0o600);
    }
}
