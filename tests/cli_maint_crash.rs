//! Compaction under stress, through the real binary: enqueuers running
//! in other processes during `spool compact` lose nothing, and a
//! `compact` killed with SIGKILL at random points — the rename window
//! included — leaves a spool that opens with every committed item.

mod cli_common;

use cli_common::*;
use spool::{DeadLetter, Item, NewItem, OpenMode, Spool};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Add `n` items and mark them done again in two commits: `2n` records
/// of garbage for compaction to drop.
fn add_garbage(s: &Spool, n: usize, tag: usize) {
    let items: Vec<NewItem> = (0..n)
        .map(|i| NewItem::new(format!("garbage {tag}/{i} {}", "g".repeat(150)), ""))
        .collect();
    let ids: Vec<u64> = s
        .enqueue_batch(&items, &Default::default())
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    s.mark_done(&ids).unwrap();
}

#[test]
fn enqueuers_running_during_compaction_lose_nothing() {
    each_backend(|env| {
        {
            let s = env.lib(OpenMode::Create);
            for i in 0..50 {
                s.enqueue(format!("base {i}").as_bytes(), "").unwrap();
            }
            add_garbage(&s, 3000, 0);
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (enqueued, compactions) = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..3)
                .map(|w| {
                    let stop = &stop;
                    scope.spawn(move || {
                        let mut mine = Vec::new();
                        let mut i = 0;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) || i < 10 {
                            let payload = format!("worker {w} item {i}");
                            let out = env.run(&["enqueue", "--", &payload]).success();
                            mine.push((parse_id(&out.get_output().stdout), payload));
                            i += 1;
                        }
                        mine
                    })
                })
                .collect();
            let mut compactions = 0;
            let started = Instant::now();
            while compactions < 4 || started.elapsed() < Duration::from_millis(1500) {
                // Fresh garbage each round, so every compaction rewrites.
                add_garbage(&env.lib(OpenMode::ReadWrite), 500, compactions + 1);
                env.run(&["compact"]).success();
                compactions += 1;
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let all: Vec<(u64, String)> = workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect();
            (all, compactions)
        });
        eprintln!(
            "{} enqueues during {compactions} compactions",
            enqueued.len()
        );
        let items: BTreeMap<u64, String> = env
            .drain()
            .iter()
            .map(|v| {
                (
                    v["id"].as_u64().unwrap(),
                    v["payload"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            items.len(),
            50 + enqueued.len(),
            "items were lost or doubled"
        );
        for (id, payload) in &enqueued {
            assert_eq!(items.get(id), Some(payload), "item {id} lost");
        }
        env.run(&["verify"]).success();
    });
}

/// What the spool holds, for comparing before and after a crash.
fn contents(path: &std::path::Path) -> (Vec<Item>, Vec<DeadLetter>, u64) {
    let s = Spool::open(path, &spool::OpenOptions::new(OpenMode::ReadOnly))
        .expect("the spool opens after the crash");
    let dead = spool::ops::dlq::list(&*s, &Default::default())
        .map(|d| d.unwrap())
        .collect();
    (s.drain().unwrap(), dead, s.high_water().unwrap())
}

#[test]
fn compact_killed_at_random_points_loses_nothing() {
    let env = Env::new("spool.ndjson");
    let s = env.lib(OpenMode::Create);
    for i in 0..300 {
        let id = s
            .enqueue(
                format!("live {i} {}", "x".repeat(100)).as_bytes(),
                &format!("k{i}"),
            )
            .unwrap()
            .id;
        if i % 10 == 0 {
            s.set_attempts(id, i).unwrap();
        }
    }
    for i in 0..20 {
        let id = s.enqueue(format!("dead {i}").as_bytes(), "").unwrap().id;
        s.dead_letter(id, "rejected").unwrap();
    }
    drop(s);
    let mut round = 0usize;
    // Give the spool fresh garbage (main and dead-letter file) and return
    // the state every outcome of the next compaction must preserve.
    let mut prepare = || {
        round += 1;
        let s = env.lib(OpenMode::ReadWrite);
        add_garbage(&s, 3000, round);
        // Churn in the dead-letter file too: one more dies, one is purged.
        let id = s
            .enqueue(format!("dies in round {round}").as_bytes(), "")
            .unwrap()
            .id;
        s.dead_letter(id, "rejected").unwrap();
        let oldest = s.dead_page(0, 1).unwrap()[0].item.id;
        s.purge(&[oldest]).unwrap();
        drop(s);
        contents(&env.path)
    };
    // How long one whole `spool compact` takes here, process start
    // included (the fastest of three), so that kills spread over all of it.
    let mut full = Duration::MAX;
    for _ in 0..3 {
        let want = prepare();
        let started = Instant::now();
        env.run(&["compact"]).success();
        full = full.min(started.elapsed());
        assert_eq!(contents(&env.path), want);
    }
    eprintln!("one compaction takes {full:?}");

    // At least 30 runs, and on until 10 kills have landed while the files
    // were being replaced (at most 100 runs).
    let mut runs = 0;
    let mut killed_before_end = 0;
    // Where the kills landed: before the main file was replaced (its
    // temporary file is left), after it (the main file is new), or after
    // the process finished.
    let (mut during_write, mut after_rename) = (0, 0);
    let inode = |p: &std::path::Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0)
    };
    let tmp = env.side(".compact.tmp");
    while runs < 30 || (during_write + after_rename < 10 && runs < 100) {
        let run = runs;
        runs += 1;
        let want = prepare();
        let _ = std::fs::remove_file(&tmp);
        let before = inode(&env.path);
        let mut child = env
            .std_cmd()
            .arg("compact")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        if run % 4 == 0 {
            // Anywhere in the run, a little past its usual end.
            std::thread::sleep(full.mul_f64(fastrand::f64() * 1.2));
        } else {
            // Aim at the end: once the new main file exists, up to 4 ms
            // later — writing, syncing, renaming, the dead-letter file.
            let deadline = Instant::now() + full * 4;
            while !tmp.exists() && Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            std::thread::sleep(Duration::from_micros(fastrand::u64(0..4_000)));
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        if status.code().is_none() {
            killed_before_end += 1;
            if inode(&env.path) != before {
                after_rename += 1;
            } else if tmp.exists() {
                during_write += 1;
            }
        }
        let got = contents(&env.path);
        assert_eq!(
            got.0, want.0,
            "run {run}: pending items differ after SIGKILL"
        );
        assert_eq!(
            got.1, want.1,
            "run {run}: dead letters differ after SIGKILL"
        );
        assert!(got.2 >= want.2, "run {run}: high-water mark went back");
        // New ids stay above everything ever issued.
        let s = env.lib(OpenMode::ReadWrite);
        let next = s.enqueue(b"after the crash", "").unwrap().id;
        assert!(next > want.2, "run {run}: id {next} reissued");
        s.mark_done(&[next]).unwrap();
    }
    eprintln!(
        "{killed_before_end} of {runs} compactions were killed before they finished: \
         {during_write} while writing the new file, {after_rename} after replacing the main file"
    );
    assert!(
        during_write + after_rename >= 10,
        "the kills missed the window in which the files are replaced"
    );
    env.run(&["verify"]).success();
    env.run(&["compact"]).success();
    assert!(
        !env.files().iter().any(|f| f.contains("tmp")),
        "{:?}",
        env.files()
    );
}

#[test]
fn sqlite_compact_killed_at_random_points_loses_nothing() {
    let env = Env::new("spool.db");
    let s = env.lib(OpenMode::Create);
    let live: Vec<NewItem> = (0..20_000)
        .map(|i| NewItem::new(format!("live {i} {}", "x".repeat(300)), format!("k{i}")))
        .collect();
    s.enqueue_batch(&live, &Default::default()).unwrap();
    for i in 0..20 {
        let id = s.enqueue(format!("dead {i}").as_bytes(), "").unwrap().id;
        s.dead_letter(id, "rejected").unwrap();
    }
    drop(s);
    let mut round = 0usize;
    // Free pages for VACUUM to give back, and a WAL to checkpoint.
    let mut prepare = || {
        round += 1;
        add_garbage(&env.lib(OpenMode::ReadWrite), 3000, round);
        contents(&env.path)
    };
    let mut full = Duration::MAX;
    for _ in 0..2 {
        let want = prepare();
        let started = Instant::now();
        env.run(&["compact"]).success();
        full = full.min(started.elapsed());
        assert_eq!(contents(&env.path), want);
    }
    eprintln!("one SQLite compaction takes {full:?}");
    let mut killed = 0;
    for run in 0..15 {
        let want = prepare();
        let mut child = env
            .std_cmd()
            .arg("compact")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(fastrand::f64() * 1.1));
        child.kill().unwrap();
        if child.wait().unwrap().code().is_none() {
            killed += 1;
        }
        let got = contents(&env.path);
        assert_eq!(
            got.0, want.0,
            "run {run}: pending items differ after SIGKILL"
        );
        assert_eq!(
            got.1, want.1,
            "run {run}: dead letters differ after SIGKILL"
        );
        assert_eq!(got.2, want.2, "run {run}: the high-water mark changed");
    }
    eprintln!("{killed} of 15 SQLite compactions were killed before they finished");
    env.run(&["verify"]).success();
}

/// A batch enqueue killed with SIGKILL halfway through its commit leaves
/// none of it visible: the spool holds what it held before, checks
/// healthy (or, on NDJSON, reports the unfinished batch as repairable),
/// and the next write works. The process dies at a chosen item through
/// the debug-only crash point `SPOOL_DEBUG_KILL_AT` (see `spool::debug`).
#[test]
fn a_batch_killed_halfway_leaves_none_of_it_on_sqlite() {
    batch_killed_halfway("spool.db");
}

#[test]
fn a_batch_killed_halfway_leaves_none_of_it_on_ndjson() {
    batch_killed_halfway("spool.ndjson");
}

fn batch_killed_halfway(file: &str) {
    if !debug_build_or_skip("killing a batch at a chosen item") {
        return;
    }
    let env = Env::new(file);
    env.enqueue("before 1");
    env.enqueue_key("before 2", "k-before");
    let before = contents(&env.path);
    let lines: String = (0..3000).map(|i| format!("batch line {i}\n")).collect();
    let out = env
        .cmd()
        .args(["enqueue", "--lines"])
        .env("SPOOL_DEBUG_KILL_AT", "batch-item:2000")
        .write_stdin(lines)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "{file}: the batch was killed halfway: {out:?}"
    );
    assert_eq!(
        contents(&env.path),
        before,
        "{file}: none of the batch is visible"
    );
    assert_eq!(env.size(), 2);
    let v = env.run(&["verify"]);
    if env.is_ndjson() {
        let v = v.code(65);
        assert!(stdout(&v).contains("unfinished batch"), "{}", stdout(&v));
    } else {
        v.success();
    }
    let id = env.enqueue("after");
    assert_eq!(id, 3, "{file}: ids continue");
    assert_eq!(env.size(), 3);
    env.run(&["verify"]).success();
}
