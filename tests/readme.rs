//! The README documents every subcommand and every exit code (the docs
//! cannot drift from the command line).

use std::process::Command;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_spool"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // Command names sit at two spaces; wrapped help text is deeper.
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect()
}

#[test]
fn every_subcommand_has_a_section_with_an_example() {
    let readme = readme();
    let commands = subcommands();
    assert!(commands.len() >= 10, "{commands:?}");
    for c in commands {
        let heading = format!("`spool {c}`");
        let at = readme
            .lines()
            .position(|l| l.starts_with("### ") && l.contains(&heading))
            .unwrap_or_else(|| panic!("README has no section for `spool {c}`"));
        let section: Vec<&str> = readme
            .lines()
            .skip(at + 1)
            .take_while(|l| !l.starts_with("### ") && !l.starts_with("## "))
            .collect();
        assert!(
            section.iter().any(|l| l.starts_with("```sh")),
            "the README section for `spool {c}` has no example"
        );
    }
}

#[test]
fn every_exit_code_is_in_the_table() {
    let readme = readme();
    for code in [
        "0",
        "1",
        "64",
        "65",
        "66",
        "70",
        "73",
        "74",
        "75",
        "77",
        "78",
        "130 / 143",
    ] {
        assert!(
            readme
                .lines()
                .any(|l| l.starts_with(&format!("| {code} |"))),
            "exit code {code} missing from the README table"
        );
    }
}

#[test]
fn the_quick_start_commands_are_the_ones_ci_runs() {
    let readme = readme();
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    assert!(readme.contains("\ncargo test --locked\n"));
    assert!(ci.lines().any(|l| l.trim() == "cargo test --locked"));
}

/// The quick start's spool commands, run from the README's code block in
/// an empty directory, leave only files that `.gitignore` keeps out of
/// the repository (the README runs them in the checkout).
#[test]
fn what_the_quick_start_leaves_is_ignored() {
    let readme = readme();
    let line = readme
        .lines()
        .find(|l| l.starts_with("cargo build --release --locked && "))
        .expect("the quick start's build-and-run line");
    let dir = tempfile::tempdir().unwrap();
    for step in line.split(" && ").skip(1) {
        let words = shell_words(step);
        assert_eq!(words[0], "./target/release/spool", "{step}");
        let out = Command::new(env!("CARGO_BIN_EXE_spool"))
            .args(&words[1..])
            .env_remove("SPOOL_PATH")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{step}: {out:?}");
    }
    let ignore =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.gitignore")).unwrap();
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert!(left.contains(&"spool.db".to_string()), "{left:?}");
    for name in left {
        assert!(
            ignore.lines().any(|l| l.trim() == format!("/{name}")),
            "the quick start leaves {name}, which .gitignore does not ignore"
        );
    }
}

/// The words of a simple shell command line: single-quoted words kept
/// whole, quotes removed.
fn shell_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in s.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any {
                    words.push(std::mem::take(&mut cur));
                    any = false;
                }
            }
            c => {
                cur.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(cur);
    }
    words
}

/// `cargo build --release` gives users a lean binary: no debug
/// information (an 83 MiB binary otherwise); benchmarks that need symbols
/// build the `profiling` profile.
#[test]
fn the_release_profile_is_lean() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let section = |name: &str| -> Vec<String> {
        manifest
            .lines()
            .skip_while(|l| l.trim() != format!("[profile.{name}]"))
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .map(|l| l.split('#').next().unwrap().trim().replace(' ', ""))
            .filter(|l| !l.is_empty())
            .collect()
    };
    let release = section("release");
    assert!(
        !release.iter().any(|l| l.starts_with("debug=")),
        "{release:?}"
    );
    assert!(
        release.contains(&"strip=\"debuginfo\"".to_string()),
        "{release:?}"
    );
    let profiling = section("profiling");
    assert!(
        profiling.contains(&"inherits=\"release\"".to_string()),
        "{profiling:?}"
    );
    assert!(profiling.contains(&"debug=1".to_string()), "{profiling:?}");
}

/// On Linux the binary is linked position-dependent (build.rs): no
/// relocations for the dynamic loader to apply at every start. ELF
/// `e_type` 2 is an executable, 3 a position-independent one.
#[test]
#[cfg(target_os = "linux")]
fn the_binary_is_linked_position_dependent() {
    if option_env!("SPOOL_BUILD_PIE").is_some() {
        eprintln!("SKIPPED: built with SPOOL_BUILD_PIE set");
        return;
    }
    let elf = std::fs::read(env!("CARGO_BIN_EXE_spool")).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let e_type = u16::from_le_bytes([elf[16], elf[17]]);
    assert_eq!(
        e_type, 2,
        "ELF type {e_type}: not a position-dependent executable"
    );
}
