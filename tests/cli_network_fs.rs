//! Spools on network file systems, end to end. CI has no NFS mount: the
//! debug binary's `SPOOL_DEBUG_FS_TYPE` makes every path look as if it
//! were on the named file system (the detection itself is tested in
//! `src/fs_type.rs` from `statfs` magic numbers and mount types).

mod cli_common;

use cli_common::*;

const PRETEND: &str = spool::fs_type::DEBUG_FS_TYPE_ENV;

fn stderr(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

fn stdout(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stdout).into_owned()
}

#[test]
fn creating_a_spool_on_a_network_file_system_is_refused_with_73() {
    if !debug_build_or_skip("the file-system seam SPOOL_DEBUG_FS_TYPE") {
        return;
    }
    for b in BACKENDS {
        for fs in [
            "nfs",
            "nfs4",
            "cifs",
            "smb2",
            "0x517b",
            "fuse.sshfs",
            "ceph",
            "9p",
        ] {
            let env = Env::new(b);
            for args in [&["init"][..], &["enqueue", "x"]] {
                let a = env.cmd().env(PRETEND, fs).args(args).assert().code(73);
                let err = stderr(&a);
                assert!(
                    err.contains("refusing to create the spool on a network file system"),
                    "{b} {fs}: {err}"
                );
                assert!(err.contains("hint: put the spool on a local disk"), "{err}");
                assert!(err.contains("--allow-network-fs"), "{err}");
                assert!(stdout(&a).is_empty());
            }
            assert!(
                std::fs::read_dir(env.dir.path()).unwrap().next().is_none(),
                "{b} {fs}: nothing was created"
            );
        }
    }
}

#[test]
fn allow_network_fs_creates_it_and_silences_the_warning() {
    if !debug_build_or_skip("the file-system seam SPOOL_DEBUG_FS_TYPE") {
        return;
    }
    for b in BACKENDS {
        let env = Env::new(b);
        let a = env
            .cmd()
            .env(PRETEND, "nfs")
            .args(["--allow-network-fs", "init"])
            .assert()
            .code(0);
        assert!(!stderr(&a).contains("warning"), "{}", stderr(&a));
        let a = env
            .cmd()
            .env(PRETEND, "nfs")
            .args(["enqueue", "x", "--allow-network-fs"])
            .assert()
            .code(0);
        assert!(!stderr(&a).contains("warning"), "{}", stderr(&a));
    }
}

#[test]
fn opening_an_existing_spool_there_warns_on_stderr() {
    if !debug_build_or_skip("the file-system seam SPOOL_DEBUG_FS_TYPE") {
        return;
    }
    for b in BACKENDS {
        let env = Env::new(b);
        env.enqueue("x");
        let a = env.cmd().env(PRETEND, "cifs").arg("size").assert().code(0);
        assert_eq!(stdout(&a), "1\n");
        let err = stderr(&a);
        assert!(
            err.contains("spool: warning: ") && err.contains("is on a network file system (cifs)"),
            "{b}: {err}"
        );
        let a = env
            .cmd()
            .env(PRETEND, "cifs")
            .args(["enqueue", "y"])
            .assert()
            .code(0);
        assert!(stderr(&a).contains("network file system (cifs)"));
        let a = env
            .cmd()
            .env(PRETEND, "cifs")
            .args(["-q", "size"])
            .assert()
            .code(0);
        assert!(stderr(&a).is_empty(), "{}", stderr(&a));
        // A local file system says nothing.
        let a = env.cmd().env(PRETEND, "ext4").arg("size").assert().code(0);
        assert!(stderr(&a).is_empty(), "{}", stderr(&a));
    }
}

#[test]
fn a_fuse_file_system_of_unknown_kind_is_allowed_with_a_warning() {
    if !debug_build_or_skip("the file-system seam SPOOL_DEBUG_FS_TYPE") {
        return;
    }
    let env = Env::new("spool.db");
    let a = env
        .cmd()
        .env(PRETEND, "fuseblk")
        .arg("init")
        .assert()
        .code(0);
    assert!(
        stderr(&a).contains("fuseblk file system, which may be a network share"),
        "{}",
        stderr(&a)
    );
}

#[test]
fn verify_reports_it_as_a_finding() {
    if !debug_build_or_skip("the file-system seam SPOOL_DEBUG_FS_TYPE") {
        return;
    }
    for b in BACKENDS {
        let env = Env::new(b);
        env.enqueue("x");
        let a = env
            .cmd()
            .env(PRETEND, "nfs4")
            .arg("verify")
            .assert()
            .code(0);
        let out = stdout(&a);
        assert!(
            out.contains("warning") && out.contains("the spool is on a network file system (nfs4)"),
            "{b}: {out}"
        );
        let a = env
            .cmd()
            .env(PRETEND, "nfs4")
            .args(["verify", "--json"])
            .assert()
            .code(0);
        let v: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
        assert!(
            v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["severity"] == "warning"
                    && f["message"].as_str().unwrap().contains("(nfs4)")),
            "{v}"
        );
        let a = env.run(&["verify", "--json"]).code(0);
        assert!(
            !stdout(&a).contains("network file system"),
            "{}",
            stdout(&a)
        );
    }
}

#[test]
fn stats_json_names_the_file_system_type() {
    if !debug_build_or_skip("the file-system seam SPOOL_DEBUG_FS_TYPE") {
        return;
    }
    for b in BACKENDS {
        let env = Env::new(b);
        env.enqueue("x");
        let a = env.run(&["stats", "--json"]).code(0);
        let v: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
        assert!(v["fs_type"].as_str().is_some_and(|t| !t.is_empty()), "{v}");
        let a = env
            .cmd()
            .env(PRETEND, "smb2")
            .args(["stats", "--json"])
            .assert()
            .code(0);
        let v: serde_json::Value = serde_json::from_str(&stdout(&a)).unwrap();
        assert_eq!(v["fs_type"], "smb2", "{v}");
        assert_eq!(v["network_fs"], true, "{v}");
        let a = env.cmd().env(PRETEND, "xfs").arg("stats").assert().code(0);
        assert!(stdout(&a).contains("file system xfs\n"), "{}", stdout(&a));
    }
}
