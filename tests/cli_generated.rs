//! The committed shell completions and man pages must be what the
//! binary generates now. After changing the command line, refresh them
//! with
//!
//!     SPOOL_UPDATE_GENERATED=1 cargo test --test cli_generated
//!
//! (or by hand: `spool completions bash > completions/spool.bash`,
//! `zsh > completions/_spool`, `fish > completions/spool.fish`,
//! `spool man > man/spool.1`, `spool man CMD > man/spool-CMD.1`).

mod cli_common;

use cli_common::bin;
use std::path::Path;

/// Every subcommand, each with its own man page.
const COMMANDS: &[&str] = &[
    "init",
    "enqueue",
    "drain",
    "list",
    "show",
    "done",
    "hold",
    "release",
    "attempts",
    "size",
    "stats",
    "shape",
    "top",
    "replay",
    "watch",
    "serve",
    "clients",
    "compact",
    "checkpoint",
    "verify",
    "dlq",
    "export",
    "import",
    "config",
    "completions",
    "man",
];

fn generated() -> Vec<(Vec<String>, String)> {
    let mut v: Vec<(Vec<String>, String)> = [
        ("bash", "completions/spool.bash"),
        ("zsh", "completions/_spool"),
        ("fish", "completions/spool.fish"),
    ]
    .iter()
    .map(|(sh, f)| {
        (
            vec!["completions".to_string(), sh.to_string()],
            f.to_string(),
        )
    })
    .collect();
    v.push((vec!["man".into()], "man/spool.1".into()));
    for c in COMMANDS {
        v.push((
            vec!["man".into(), c.to_string()],
            format!("man/spool-{c}.1"),
        ));
    }
    v
}

#[test]
fn committed_completions_and_man_pages_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var_os("SPOOL_UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    let all = generated();
    for (args, file) in &all {
        let out = bin()
            .args(args)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        assert!(!out.is_empty(), "{args:?} printed nothing");
        let path = root.join(file);
        let committed = std::fs::read(&path).unwrap_or_default();
        if committed != out {
            if update {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &out).unwrap();
            } else {
                stale.push(file.clone());
            }
        }
    }
    // No page for a command that no longer exists.
    for entry in std::fs::read_dir(root.join("man")).unwrap() {
        let name = format!("man/{}", entry.unwrap().file_name().to_string_lossy());
        if !all.iter().any(|(_, f)| *f == name) {
            stale.push(format!("{name} (no such command; delete it)"));
        }
    }
    assert!(
        stale.is_empty(),
        "out of date: {stale:?}\nrefresh them with: SPOOL_UPDATE_GENERATED=1 cargo test --test cli_generated"
    );
}

#[test]
fn every_subcommand_has_a_man_page() {
    let help = String::from_utf8(
        bin()
            .arg("--help")
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    let listed: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap()
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, COMMANDS, "update COMMANDS in this test");
}
