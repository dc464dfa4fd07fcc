//! Which file system holds a spool, and whether it is a network share.
//!
//! Why it exists: a spool's safety between processes rests on things that
//! work only inside one machine. SQLite's WAL mode keeps its index in a
//! shared-memory file (`-shm`) that every process maps; over NFS, SMB and
//! their kind, processes on two machines do not share that memory and can
//! corrupt the database (SQLite's own documentation says WAL "does not
//! work over a network filesystem"). The NDJSON backend relies on `flock`
//! and on appends landing whole at the end of the file; over NFS `flock`
//! is emulated with byte-range locks (or not at all, with `local_lock`),
//! appends from two clients are not atomic, and a client's cache can
//! hide another's appends. So the same rule holds for both backends:
//!
//! * **Creating** a spool on a network file system is refused
//!   ([`crate::Error::NetworkFileSystem`], exit 73) unless the caller
//!   allows it ([`crate::OpenOptions::allow_network_fs`],
//!   `--allow-network-fs`) — for a share that only ever one machine uses.
//! * **Opening** one warns ([`open_warning`]); `verify` reports it.
//!
//! Detection uses `statfs(2)`'s `f_type` magic number, and the mount's
//! type from `/proc/self/mountinfo` for the name (`ext4` rather than the
//! magic `0xef53` that ext2/3/4 share) and for FUSE, whose magic is the
//! same for every FUSE file system: `fuse.sshfs`, `fuse.rclone` and other
//! known network file systems on FUSE count as network; any other FUSE
//! file system (ntfs-3g, a local overlay, a virtiofs share) is
//! [`Locality::Unknown`]: allowed, with a warning.
//!
//! [`classify`] is the pure part (magic and mount type in, verdict out),
//! tested with every known magic. In debug builds only, the environment
//! variable [`DEBUG_FS_TYPE_ENV`] makes every path look as if it were on
//! the named file system (`nfs`, `cifs`, `fuse.sshfs`, `0x6969`…), so
//! the end-to-end tests can check the refusal without an NFS mount.

use std::io;
use std::path::Path;

/// In debug builds, pretend every spool lives on this file system: a
/// name from the tables here (`nfs`, `smb2`, `ext4`, `fuse.sshfs`…) or a
/// magic number (`0x6969`). Ignored by release builds.
pub const DEBUG_FS_TYPE_ENV: &str = "SPOOL_DEBUG_FS_TYPE";

/// Where a file system keeps its data, as far as spool can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Locality {
    /// A local disk (or memory): safe.
    Local,
    /// A network or cluster file system: processes on other machines may
    /// use the same files.
    Network,
    /// FUSE, which may be either: allowed, with a warning.
    Unknown,
}

/// A file system type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsType {
    /// `statfs`'s `f_type`.
    pub magic: u64,
    /// The mount's type (`ext4`, `nfs4`, `fuse.sshfs`), or a name for the
    /// magic number, or the number in hex.
    pub name: String,
    /// Local, network or unknown.
    pub locality: Locality,
}

/// FUSE's magic: every FUSE file system has it.
pub const FUSE_MAGIC: u64 = 0x6573_5546;

/// Network and cluster file systems by magic number (`linux/magic.h`,
/// `statfs(2)`).
const NETWORK: &[(u64, &str)] = &[
    (0x6969, "nfs"),
    (0x517b, "smbfs"),
    (0xfe53_4d42, "smb2"),
    (0xff53_4d42, "cifs"),
    (0x00c3_6400, "ceph"),
    (0x0102_1997, "9p"),
    (0x5346_414f, "afs"),
    (0x6b41_4653, "kafs"),
    (0x7375_7245, "coda"),
    (0x564c, "ncpfs"),
    (0x0bd0_0bd0, "lustre"),
    (0x4750_4653, "gpfs"),
    (0x1983_0326, "beegfs"),
    (0x2003_0528, "orangefs"),
    (0x0116_1970, "gfs2"),
    (0x7461_636f, "ocfs2"),
    (0xaad7_aaea, "panfs"),
    (0x786f_4256, "vboxsf"),
];

/// Local file systems by magic number, for a name when the mount table
/// does not say.
const LOCAL: &[(u64, &str)] = &[
    (0xef53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683e, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0x2fc1_2fc1, "zfs"),
    (0xf2f5_2010, "f2fs"),
    (0x794c_7630, "overlay"),
    (0x8584_58f6, "ramfs"),
    (0x7371_7368, "squashfs"),
    (0x4d44, "vfat"),
    (0x2011_bab0, "exfat"),
    (0x5346_544e, "ntfs"),
    (0x7366_746e, "ntfs3"),
    (0xca45_1a4e, "bcachefs"),
    (0x3153_464a, "jfs"),
    (0x5265_4973, "reiserfs"),
    (0x3434, "nilfs2"),
    (0x482b, "hfsplus"),
    (0x1501_3346, "udf"),
    (0x9660, "iso9660"),
    (0xe0f5_e1e2, "erofs"),
    (0xf15f, "ecryptfs"),
];

/// Mount types that are network file systems, whatever the magic says
/// (FUSE ones above all).
const NETWORK_MOUNT_TYPES: &[&str] = &[
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "ceph",
    "9p",
    "afs",
    "coda",
    "glusterfs",
    "lustre",
    "gpfs",
    "beegfs",
    "fuse.sshfs",
    "fuse.rclone",
    "fuse.s3fs",
    "fuse.gcsfuse",
    "fuse.goofys",
    "fuse.glusterfs",
    "fuse.ceph-fuse",
    "fuse.cephfs",
    "fuse.juicefs",
    "fuse.mfs",
    "fuse.lizardfs",
    "fuse.seaweedfs",
    "fuse.weed",
    "fuse.blobfuse",
    "fuse.blobfuse2",
    "fuse.curlftpfs",
    "fuse.smbnetfs",
    "fuse.davfs",
    "fuse.gvfsd-fuse",
];

/// The verdict for a `statfs` magic number and, when known, the mount's
/// type.
pub fn classify(magic: u64, mount_type: Option<&str>) -> FsType {
    let named = |table: &[(u64, &str)]| {
        table
            .iter()
            .find(|(m, _)| *m == magic)
            .map(|(_, n)| n.to_string())
    };
    let name = mount_type
        .map(str::to_string)
        .or_else(|| named(NETWORK))
        .or_else(|| named(LOCAL))
        .or_else(|| (magic == FUSE_MAGIC).then(|| "fuse".to_string()))
        .unwrap_or_else(|| format!("0x{magic:x}"));
    let network_mount = mount_type.is_some_and(|t| NETWORK_MOUNT_TYPES.contains(&t));
    let locality = if network_mount || NETWORK.iter().any(|(m, _)| *m == magic) {
        Locality::Network
    } else if magic == FUSE_MAGIC || mount_type.is_some_and(|t| t.starts_with("fuse")) {
        Locality::Unknown
    } else {
        Locality::Local
    };
    FsType {
        magic,
        name,
        locality,
    }
}

/// The file system type a debug build pretends every path is on
/// ([`DEBUG_FS_TYPE_ENV`]), if any.
fn pretended() -> Option<FsType> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let v = std::env::var(DEBUG_FS_TYPE_ENV).ok()?;
    let v = v.trim();
    if let Some(hex) = v.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(|m| classify(m, None));
    }
    let magic = NETWORK
        .iter()
        .chain(LOCAL)
        .find(|(_, n)| *n == v)
        .map(|(m, _)| *m)
        .unwrap_or(if v.starts_with("fuse") { FUSE_MAGIC } else { 0 });
    Some(classify(magic, Some(v)))
}

/// The file system holding `path`: the file itself when it exists, else
/// the directory it would be created in. Named after the mount table.
pub fn of_path(path: &Path) -> io::Result<FsType> {
    detect(path, true)
}

/// [`of_path`] for the checks made at every open: the mount table is
/// read only for FUSE (whose subtype decides), so the name may be the
/// magic's (`ext4` for ext2/3/4).
pub fn quick_of_path(path: &Path) -> io::Result<FsType> {
    detect(path, false)
}

fn detect(path: &Path, named: bool) -> io::Result<FsType> {
    if let Some(t) = pretended() {
        return Ok(t);
    }
    let target = if path.exists() {
        path
    } else {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    };
    let magic = statfs_magic(target)?;
    let mount_type = if named || magic == FUSE_MAGIC {
        mount_type_of(target)
    } else {
        None
    };
    Ok(classify(magic, mount_type.as_deref()))
}

/// `statfs(2)`'s `f_type` for `path`.
fn statfs_magic(path: &Path) -> io::Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // f_type is a signed word; the magic numbers are 32-bit.
    Ok((st.f_type as u64) & 0xffff_ffff)
}

/// The mount type of the file system holding `path`, from
/// `/proc/self/mountinfo` (matched by device number).
fn mount_type_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(path).ok()?.dev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    let want = format!("{major}:{minor}");
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mount_type_in(&table, &want)
}

/// The mount type of the last mount of device `dev` (`MAJOR:MINOR`) in
/// a mountinfo table.
fn mount_type_in(table: &str, dev: &str) -> Option<String> {
    table
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some(dev))
        .filter_map(|l| l.split(" - ").nth(1))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_string)
        .next_back()
}

/// The line to show when a spool at `path` is opened: `Some` for a
/// network file system (and for FUSE, which may be one).
pub fn open_warning(path: &Path) -> Option<String> {
    let t = quick_of_path(path).ok()?;
    describe_risk(path, &t).map(|r| format!("warning: {r}"))
}

/// What is risky about a spool at `path` on `t`, if anything.
pub fn describe_risk(path: &Path, t: &FsType) -> Option<String> {
    risk(t).map(|r| format!("{} is {r}", path.display()))
}

/// What is risky about a spool on `t`, if anything: "on a network file
/// system (nfs4); …".
pub fn risk(t: &FsType) -> Option<String> {
    match t.locality {
        Locality::Local => None,
        Locality::Network => Some(format!(
            "on a network file system ({}); spool's locking (SQLite's WAL shared memory, \
             NDJSON's flock) works only between processes of one machine: use the spool \
             from one machine only, or move it to a local disk",
            t.name
        )),
        Locality::Unknown => Some(format!(
            "on a {} file system, which may be a network share; if it is, use the spool \
             from one machine only, or move it to a local disk",
            t.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_network_magic_is_network() {
        for (m, n) in NETWORK {
            let t = classify(*m, None);
            assert_eq!(t.locality, Locality::Network, "{n}");
            assert_eq!(t.name, *n);
        }
        assert_eq!(classify(0x6969, Some("nfs4")).name, "nfs4");
    }

    #[test]
    fn local_magics_are_local_and_named_by_the_mount_when_known() {
        for (m, n) in LOCAL {
            assert_eq!(classify(*m, None).locality, Locality::Local, "{n}");
        }
        assert_eq!(classify(0xef53, None).name, "ext4");
        assert_eq!(classify(0xef53, Some("ext3")).name, "ext3");
        let odd = classify(0x1234_5678, None);
        assert_eq!(
            (odd.name.as_str(), odd.locality),
            ("0x12345678", Locality::Local)
        );
    }

    #[test]
    fn fuse_is_network_only_for_known_network_subtypes() {
        let t = classify(FUSE_MAGIC, Some("fuse.sshfs"));
        assert_eq!(
            (t.name.as_str(), t.locality),
            ("fuse.sshfs", Locality::Network)
        );
        assert_eq!(
            classify(FUSE_MAGIC, Some("fuse.rclone")).locality,
            Locality::Network
        );
        assert_eq!(
            classify(FUSE_MAGIC, Some("fuseblk")).locality,
            Locality::Unknown
        );
        assert_eq!(classify(FUSE_MAGIC, None).locality, Locality::Unknown);
        assert_eq!(classify(FUSE_MAGIC, None).name, "fuse");
    }

    #[test]
    fn mountinfo_lines_give_the_type_of_the_device() {
        let table = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:52 / /mnt/share rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2
41 22 0:53 / /mnt/my\\040dir rw - fuse.sshfs host: rw
";
        assert_eq!(mount_type_in(table, "8:1").as_deref(), Some("ext4"));
        assert_eq!(mount_type_in(table, "0:52").as_deref(), Some("nfs4"));
        assert_eq!(mount_type_in(table, "0:53").as_deref(), Some("fuse.sshfs"));
        assert_eq!(mount_type_in(table, "9:9"), None);
    }

    #[test]
    fn this_machine_s_temp_dir_has_a_type() {
        let dir = tempfile::tempdir().unwrap();
        if std::env::var_os(DEBUG_FS_TYPE_ENV).is_none() {
            let t = of_path(&dir.path().join("new.db")).unwrap();
            assert!(!t.name.is_empty());
        }
    }

    #[test]
    fn risks_are_described_with_the_path_and_the_type() {
        let p = Path::new("/mnt/share/q.db");
        assert_eq!(describe_risk(p, &classify(0xef53, None)), None);
        let w = describe_risk(p, &classify(0x6969, Some("nfs4"))).unwrap();
        assert!(
            w.contains("/mnt/share/q.db is on a network file system (nfs4)"),
            "{w}"
        );
        let w = describe_risk(p, &classify(FUSE_MAGIC, Some("fuseblk"))).unwrap();
        assert!(
            w.contains("fuseblk file system, which may be a network share"),
            "{w}"
        );
    }
}
