//! The NDJSON index through the real binary: a process killed between a
//! write and its index update, a torn index, an index of another spool,
//! and `enqueue --lines` killed while its batch is being written. Each
//! time the spool reads correctly, read-only commands leave the index
//! alone, `verify` says what it finds, and the next write puts it right.

mod cli_common;

use cli_common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn idx(p: &Path) -> PathBuf {
    PathBuf::from(format!("{}.idx", p.display()))
}

/// The index's write mark.
fn mark(p: &Path) -> PathBuf {
    PathBuf::from(format!("{}.idx-dirty", p.display()))
}

/// A rollback journal of the index, in a file.
fn journal(p: &Path) -> PathBuf {
    PathBuf::from(format!("{}.idx-journal", p.display()))
}

fn ids(env: &Env) -> Vec<u64> {
    env.drain()
        .iter()
        .map(|v| v["id"].as_u64().unwrap())
        .collect()
}

/// Readers see the items `want` and leave the index file as it is.
fn reads_leave_the_index_alone(env: &Env, want: &[u64]) {
    let index = std::fs::read(idx(&env.path)).unwrap();
    assert_eq!(ids(env), want);
    assert_eq!(
        std::fs::read(idx(&env.path)).unwrap(),
        index,
        "a reader wrote the index"
    );
}

/// Run with `SPOOL_DEBUG_KILL_AT=<at>` and expect the process to die by
/// SIGKILL.
fn killed_at(env: &Env, at: &str, args: &[&str]) {
    let out = env
        .cmd()
        .args(args)
        .env("SPOOL_DEBUG_KILL_AT", at)
        .write_stdin("")
        .output()
        .unwrap();
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{args:?} was to be killed at {at}: {out:?}"
    );
}

#[test]
fn killed_between_the_append_and_the_index_update() {
    if !debug_build_or_skip("killing a write before its index update") {
        return;
    }
    let env = Env::new("spool.ndjson");
    env.enqueue("a");
    env.enqueue_key("b", "kb");
    env.enqueue("c");
    killed_at(
        &env,
        "index-update:1",
        &["enqueue", "--key", "kd", "--", "d"],
    );
    // The line was synced before the kill, the index's transaction that
    // took it in was not committed: the item is there, the index's
    // journal is left, and readers do without the index without writing
    // it.
    assert_eq!(env.size(), 4);
    reads_leave_the_index_alone(&env, &[1, 2, 3, 4]);
    let v = env.run(&["verify"]).success();
    assert!(
        stdout(&v).contains("a write to the index was interrupted"),
        "{}",
        stdout(&v)
    );
    // The dedup of a key whose line the index had not taken in.
    let dup = env
        .run(&["--json", "enqueue", "--key", "kd", "--", "again"])
        .success();
    assert!(
        stdout(&dup).contains("\"deduplicated\":true"),
        "{}",
        stdout(&dup)
    );

    // A move between the files, killed between its two appends (the dead
    // letter is written, the main file's `done` is not): the main file's
    // part is the commit point, so the move did not happen — the item is
    // still pending, nothing is lost, nothing is dead. (Replay records
    // the attempt first: the dead letter is the second write.)
    killed_at(
        &env,
        "index-update:2",
        &[
            "replay",
            "--exec",
            "false",
            "--reject-exit",
            "1",
            "--limit",
            "1",
        ],
    );
    assert_eq!(ids(&env), vec![1, 2, 3, 4]);
    let dead = env.run(&["--json", "dlq", "list"]).success();
    assert_eq!(ndjson(&dead.get_output().stdout).len(), 0);
    let v = env.run(&["verify"]).code(65);
    assert!(
        stdout(&v).contains("before the main file committed it"),
        "{}",
        stdout(&v)
    );
    // The next write cuts the unfinished move off.
    assert_eq!(env.enqueue("e"), 5);
    assert_eq!(ids(&env), vec![1, 2, 3, 4, 5]);
    let dead = env.run(&["--json", "dlq", "list"]).success();
    assert_eq!(ndjson(&dead.get_output().stdout).len(), 0);
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("agrees"), "{}", stdout(&v));
}

/// Two items, and the dead-lettering of item 1 killed after its dead
/// letter was written and before the main file's part.
fn unfinished_dead_letter() -> Env {
    let env = Env::new("spool.ndjson");
    env.enqueue("a");
    env.enqueue("b");
    killed_at(
        &env,
        "index-update:2",
        &[
            "replay",
            "--exec",
            "false",
            "--reject-exit",
            "1",
            "--limit",
            "1",
        ],
    );
    env
}

#[test]
fn verify_repair_cuts_an_unfinished_move() {
    if !debug_build_or_skip("killing a move between its two appends") {
        return;
    }
    let env = unfinished_dead_letter();
    env.run(&["verify"]).code(65);
    env.run(&["verify", "--repair"]).success();
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("agrees"), "{}", stdout(&v));
    assert_eq!(ids(&env), vec![1, 2]);
    let dead = env.run(&["--json", "dlq", "list"]).success();
    assert_eq!(ndjson(&dead.get_output().stdout).len(), 0);
    // The item is still there to be dead-lettered for good (its first
    // attempt counted).
    let r = env
        .run(&[
            "replay",
            "--exec",
            "false",
            "--reject-exit",
            "1",
            "--limit",
            "1",
        ])
        .code(1);
    assert!(stderr(&r).contains("after attempt 2"), "{}", stderr(&r));
    let dead = env.run(&["--json", "dlq", "list"]).success();
    assert_eq!(ndjson(&dead.get_output().stdout).len(), 1);
    assert_eq!(ids(&env), vec![2]);
}

/// `compact` right after a dead-lettering killed between its two appends:
/// the dead letter the main file never committed is cut off, not kept,
/// and the item stays pending.
#[test]
fn compact_cuts_an_unfinished_move() {
    if !debug_build_or_skip("killing a move between its two appends") {
        return;
    }
    let env = unfinished_dead_letter();
    let c = env.run(&["compact"]).success();
    assert!(stderr(&c).contains("cut off"), "{}", stderr(&c));
    assert_eq!(ids(&env), vec![1, 2]);
    let dead = env.run(&["--json", "dlq", "list"]).success();
    assert_eq!(ndjson(&dead.get_output().stdout).len(), 0);
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("agrees"), "{}", stdout(&v));
}

/// A small write (`done` of one item: its index journal kept in memory)
/// killed while it writes the index (its write mark set, the commit not
/// done): readers do without the index and leave it alone, `verify`
/// warns, and the next write rebuilds it.
#[test]
fn killed_while_writing_the_index_with_its_journal_in_memory() {
    if !debug_build_or_skip("killing a write while it writes the index") {
        return;
    }
    let env = Env::new("spool.ndjson");
    env.enqueue("a");
    env.enqueue("b");
    env.enqueue("c");
    let mark = mark(&env.path);
    assert_eq!(std::fs::read(&mark).unwrap(), b"0");
    killed_at(&env, "index-commit:1", &["done", "2"]);
    assert_eq!(std::fs::read(&mark).unwrap(), b"1");
    assert!(
        !journal(&env.path).exists(),
        "a small write journals in memory"
    );
    reads_leave_the_index_alone(&env, &[1, 3]);
    assert_eq!(std::fs::read(&mark).unwrap(), b"1");
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("interrupted"), "{}", stdout(&v));
    let e = env.run(&["enqueue", "--", "d"]).success();
    assert_eq!(parse_id(&e.get_output().stdout), 4);
    assert!(stderr(&e).contains("rebuilt the index"), "{}", stderr(&e));
    assert!(stderr(&e).contains("interrupted"), "{}", stderr(&e));
    assert_eq!(std::fs::read(&mark).unwrap(), b"0");
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("agrees"), "{}", stdout(&v));
    assert_eq!(ids(&env), vec![1, 3, 4]);
}

/// A bulk write (a batch enqueue: its index journal in a file) killed
/// while it writes the index: the journal is left (the mark stays
/// clear), readers do without the index, and the next writer plays the
/// journal back and goes on with the index as it was, without a rebuild.
#[test]
fn killed_while_writing_the_index_with_its_journal_in_a_file() {
    if !debug_build_or_skip("killing a write while it writes the index") {
        return;
    }
    let env = Env::new("spool.ndjson");
    env.enqueue("a");
    let mark = mark(&env.path);
    let out = env
        .cmd()
        .args(["enqueue", "--lines"])
        .env("SPOOL_DEBUG_KILL_AT", "index-commit:1")
        .write_stdin("b\nc\nd\n")
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "{out:?}");
    assert!(journal(&env.path).exists(), "a batch journals to a file");
    assert_eq!(
        std::fs::read(&mark).unwrap(),
        b"0",
        "a write journaled to a file needs no mark"
    );
    reads_leave_the_index_alone(&env, &[1, 2, 3, 4]);
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("interrupted"), "{}", stdout(&v));
    let e = env.run(&["enqueue", "--", "e"]).success();
    assert_eq!(parse_id(&e.get_output().stdout), 5);
    assert!(!stderr(&e).contains("rebuilt"), "{}", stderr(&e));
    assert_eq!(std::fs::read(&mark).unwrap(), b"0");
    assert!(!journal(&env.path).exists());
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("agrees"), "{}", stdout(&v));
    assert_eq!(ids(&env), vec![1, 2, 3, 4, 5]);
}

#[test]
fn a_torn_index_is_reported_and_rebuilt() {
    let env = Env::new("spool.ndjson");
    for i in 0..200 {
        env.enqueue(&format!("item {i} {}", "x".repeat(100)));
    }
    let len = std::fs::metadata(idx(&env.path)).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(idx(&env.path))
        .unwrap()
        .set_len(len / 3)
        .unwrap();
    let torn = std::fs::read(idx(&env.path)).unwrap();
    assert_eq!(env.size(), 200);
    assert_eq!(ids(&env).len(), 200);
    env.run(&["show", "150"]).success();
    assert_eq!(
        std::fs::read(idx(&env.path)).unwrap(),
        torn,
        "a reader wrote the index"
    );
    let v = env.run(&["verify"]).code(65);
    assert!(stdout(&v).contains(".idx"), "{}", stdout(&v));
    assert!(stderr(&v).contains("--repair"), "{}", stderr(&v));
    let r = env.run(&["verify", "--repair"]).success();
    assert!(stderr(&r).contains("rebuilt the index"), "{}", stderr(&r));
    let v = env.run(&["verify"]).success();
    assert!(stdout(&v).contains("agrees"), "{}", stdout(&v));
    assert_eq!(env.enqueue("next"), 201);
}

#[test]
fn an_index_of_another_spool_is_not_used() {
    let env = Env::new("spool.ndjson");
    let other = env.dir.path().join("other.ndjson");
    for i in 0..20 {
        env.enqueue(&format!("mine {i}"));
    }
    bin()
        .args(["--spool"])
        .arg(&other)
        .args(["enqueue", "--lines"])
        .write_stdin("theirs 1\ntheirs 2\n")
        .assert()
        .success();
    std::fs::copy(idx(&other), idx(&env.path)).unwrap();
    let foreign = std::fs::read(idx(&env.path)).unwrap();
    assert_eq!(env.size(), 20);
    assert_eq!(ids(&env), (1..=20).collect::<Vec<_>>());
    assert_eq!(
        std::fs::read(idx(&env.path)).unwrap(),
        foreign,
        "a reader wrote the index"
    );
    let v = env.run(&["verify"]).code(65);
    assert!(stdout(&v).contains("another file"), "{}", stdout(&v));
    let e = env.run(&["enqueue", "--", "next"]).success();
    assert_eq!(parse_id(&e.get_output().stdout), 21);
    assert!(stderr(&e).contains("rebuilt the index"), "{}", stderr(&e));
    env.run(&["verify"]).success();
}

/// `enqueue --lines` killed with SIGKILL while it writes its batch to
/// the spool file (the file has grown, the batch is not finished): none
/// of the batch is visible, `verify` reports the unfinished batch as
/// repairable, and the next write cuts it. (The command reads and checks
/// its whole input into a spill file before it writes to the spool: the
/// file grows once the input has ended.)
#[test]
fn enqueue_lines_killed_while_writing_its_batch() {
    killed_while_writing("spool.ndjson");
}

/// The same on SQLite: the batch is one transaction, whose pages reach
/// the WAL before it commits; killed then, none of it is visible.
#[test]
fn enqueue_lines_killed_while_writing_its_batch_on_sqlite() {
    killed_while_writing("spool.db");
}

fn killed_while_writing(file: &str) {
    let env = Env::new(file);
    env.enqueue("before 1");
    env.enqueue("before 2");
    // What grows while the batch is written: the NDJSON file, or the
    // SQLite WAL.
    let grows = if env.is_ndjson() {
        env.path.clone()
    } else {
        PathBuf::from(format!("{}-wal", env.path.display()))
    };
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let before = len(&grows);
    let lines = 200_000usize;
    let mut child = env
        .std_cmd()
        .args(["enqueue", "--lines"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        let mut chunk = String::new();
        for i in 0..lines {
            chunk.push_str(&format!("streamed line {i} {}\n", "z".repeat(60)));
            if chunk.len() > 1 << 16 {
                if stdin.write_all(chunk.as_bytes()).is_err() {
                    return;
                }
                chunk.clear();
            }
        }
        let _ = stdin.write_all(chunk.as_bytes());
        // Dropping stdin ends the input.
    });
    // The batch is written in chunks: kill once the file has grown.
    let deadline = Instant::now() + Duration::from_secs(120);
    let grew = loop {
        if len(&grows) > before {
            break true;
        }
        if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let _ = child.kill();
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    assert!(grew, "the spool file never grew: {status:?}");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the batch finished before it could be killed"
    );
    assert_eq!(env.size(), 2, "{file}");
    assert_eq!(ids(&env), vec![1, 2], "{file}");
    if env.is_ndjson() {
        let v = env.run(&["verify"]).code(65);
        assert!(stdout(&v).contains("unfinished batch"), "{}", stdout(&v));
        assert!(stdout(&v).contains("--repair"), "{}", stdout(&v));
    } else {
        env.run(&["verify"]).success();
    }
    let e = env.run(&["enqueue", "--", "after"]).success();
    assert_eq!(parse_id(&e.get_output().stdout), 3, "{file}");
    if env.is_ndjson() {
        assert!(stderr(&e).contains("unfinished batch"), "{}", stderr(&e));
    }
    assert_eq!(ids(&env), vec![1, 2, 3], "{file}");
    env.run(&["verify"]).success();
}
