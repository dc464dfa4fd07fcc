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
