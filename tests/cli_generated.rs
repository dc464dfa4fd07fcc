//! The committed shell completions and man page must be what the binary
//! generates now. After changing the command line, refresh them with
//!
//!     SPOOL_UPDATE_GENERATED=1 cargo test --test cli_generated
//!
//! (or by hand: `spool completions bash > completions/spool.bash`,
//! `zsh > completions/_spool`, `fish > completions/spool.fish`,
//! `spool man > man/spool.1`).

mod cli_common;

use cli_common::bin;
use std::path::Path;

const GENERATED: &[(&[&str], &str)] = &[
    (&["completions", "bash"], "completions/spool.bash"),
    (&["completions", "zsh"], "completions/_spool"),
    (&["completions", "fish"], "completions/spool.fish"),
    (&["man"], "man/spool.1"),
];

#[test]
fn committed_completions_and_man_page_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let update = std::env::var_os("SPOOL_UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for (args, file) in GENERATED {
        let out = bin()
            .args(*args)
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
                stale.push(*file);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "out of date: {stale:?}\nrefresh them with: SPOOL_UPDATE_GENERATED=1 cargo test --test cli_generated"
    );
}
