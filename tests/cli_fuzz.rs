//! Random command lines and random stdin never make the binary panic,
//! die from a signal or exit 101: every outcome is a §6 exit code.

mod cli_common;

use cli_common::{backends, Env};
use proptest::prelude::*;
use std::sync::OnceLock;

/// Words drawn from the real command line, plus junk.
const WORDS: &[&str] = &[
    "init",
    "enqueue",
    "drain",
    "list",
    "ls",
    "show",
    "done",
    "hold",
    "release",
    "attempts",
    "size",
    "stats",
    "compact",
    "checkpoint",
    "verify",
    "dlq",
    "export",
    "import",
    "requeue",
    "purge",
    "--all",
    "--yes",
    "--repair",
    "--mode",
    "truncate",
    "--format",
    "csv",
    "-o",
    "completions",
    "man",
    "help",
    "bash",
    "zsh",
    "fish",
    "--json",
    "-q",
    "-v",
    "-vv",
    "--backend",
    "sqlite",
    "file",
    "--limit",
    "-n",
    "--key",
    "-k",
    "--min-attempts",
    "--due",
    "--raw",
    "--set",
    "--prometheus",
    "--max-depth",
    "--max-payload",
    "--wait-for-space",
    "--lines",
    "--ndjson",
    "--stdin",
    "--file",
    "-f",
    "--key-from-payload",
    "--help",
    "--version",
    "-",
    "--",
    "0",
    "1",
    "2",
    "3",
    "-1",
    "18446744073709551616",
    "99999999999999999999",
    "0ms",
    "10ms",
    "1KiB",
    "1e9",
    "",
    " ",
    "\u{1b}[2J",
    "caf\u{e9}",
    "/dev/null",
    "/nonexistent",
    "x.ndjson",
    "%s%n",
    "{}",
    "{\"payload\":\"x\"}",
    "=",
    "--json=true",
];

/// A spool to run against: two items, one held, so that ids 1 and 2 exist.
fn fixture(name: &str) -> &'static Env {
    static DB: OnceLock<Env> = OnceLock::new();
    static ND: OnceLock<Env> = OnceLock::new();
    let cell = if name.ends_with(".db") { &DB } else { &ND };
    cell.get_or_init(|| {
        let env = Env::new(name);
        env.run(&["init", "--max-depth", "50"]).success();
        env.enqueue("first");
        env.enqueue("second");
        env.run(&["hold", "2"]).success();
        env
    })
}

/// The subcommands, most command lines start with one.
const SUBCOMMANDS: &[&str] = &[
    "init",
    "enqueue",
    "drain",
    "list",
    "ls",
    "show",
    "done",
    "hold",
    "release",
    "attempts",
    "size",
    "stats",
    "completions",
    "man",
];

fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(WORDS).prop_map(str::to_string),
        1 => ".{0,12}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn never_panics(
        backend in prop::sample::select(backends()),
        command in prop::option::weighted(0.85, prop::sample::select(SUBCOMMANDS)),
        args in prop::collection::vec(arg(), 0..6),
        stdin in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let env = fixture(backend);
        // Waits are capped so that a random --wait-for-space cannot stall.
        // An argument cannot hold a NUL byte (the OS takes C strings).
        let mut args: Vec<String> = command
            .map(str::to_string)
            .into_iter()
            .chain(args)
            .map(|a| a.replace('\0', ""))
            .collect();
        for i in 1..args.len() {
            if args[i - 1] == "--wait-for-space" {
                args[i] = "10ms".into();
            }
        }
        let out = env
            .cmd()
            .args(&args)
            .write_stdin(stdin)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        prop_assert!(code.is_some(), "killed by a signal: {args:?}\n{stderr}");
        let code = code.unwrap();
        prop_assert!(
            [0, 64, 65, 66, 73, 74, 75, 77].contains(&code),
            "exit {code} for {args:?}\n{stderr}"
        );
        prop_assert!(!stderr.contains("panicked"), "{args:?}\n{stderr}");
        if code >= 64 {
            prop_assert!(
                out.stdout.is_empty() || args.iter().any(|a| a == "help" || a.starts_with("--help")),
                "stdout on error for {args:?}"
            );
        }
    }
}
