//! The deterministic simulator: a seed drives a random plan of
//! operations through the `Queue` contract and the ops layer on one
//! backend — enqueues of every kind, replay outcomes, hold and release,
//! `done` and `done --force`, dead-letter requeue and purge, retention
//! under a clock that jumps forward and back, compaction, checkpoint,
//! export and import, push to a receiver that loses requests and answers
//! and sees requests twice, push requests of two clients received by the
//! spool under test (retransmitted, with gaps, skips, refusals and reused
//! numbers; several in one transaction) and `POST /v1/items` payloads,
//! reopen, a second handle, and crashes at any I/O operation of the
//! NDJSON data files (`sim/crash_io.rs`) and of the SQLite databases, the
//! SQLite backend's and the NDJSON index (`sim/crash_vfs.rs`), with
//! unsynced writes lost and torn on a power loss; on PostgreSQL the
//! spool's connection killed mid-transaction —
//! and checks the spool against the memory model
//! after every step and every reopen (see `sim/world.rs`).
//!
//! A failure prints the seed, the shortest plan that still fails, and the
//! command that replays it:
//!
//! ```text
//! SIM_BACKEND=ndjson SIM_SEED=1234 cargo test --test sim
//! ```
//!
//! `SIM_SEEDS=<n>` runs `n` seeds per backend (from `SIM_FIRST_SEED`, by
//! default a fixed one), `SIM_OPS=<n>` makes plans of `n` operations,
//! `SIM_BACKEND=memory|sqlite|ndjson|postgres` runs one backend.
//! `benches/sim.sh` runs fresh seeds for minutes. The fixed budget in
//! `cargo test`: 200 seeds of 50 operations per local backend, 10 seeds
//! of 30 on PostgreSQL.

mod common;
#[path = "sim/crash_io.rs"]
mod crash_io;
#[path = "sim/crash_vfs.rs"]
mod crash_vfs;
#[path = "sim/plan.rs"]
mod plan;
#[path = "sim/rng.rs"]
mod rng;
#[path = "sim/shrink.rs"]
mod shrink;
#[path = "sim/world.rs"]
mod world;

use common::Backend;
use plan::{Draw, Plan};
use std::panic::{catch_unwind, AssertUnwindSafe};
use world::{Stats, World};

/// Seeds that once failed, by backend: they always run (plans of
/// [`REGRESSION_LEN`] operations), each drawn as it was when it failed
/// (`Draw::Plain`: before plans had received requests).
const REGRESSIONS: &[(&str, u64, Draw)] = &[
    // A debug-build self-check of the NDJSON backend panicked on a read
    // that failed after a write.
    ("ndjson", 1364394130, Draw::Plain),
    // NDJSON: a dead letter purged after a requeue cut by a power loss
    // came back as pending once the index was rebuilt.
    ("ndjson", 1364393989, Draw::Plain),
    // NDJSON moves across files were not atomic: an eviction left the
    // evicted item dead without the new one stored; a push ack left the
    // refused item dead without the watermark moved; an import kept its
    // dead letters without its pending items; dead-lettering an item in
    // flight kept it dead without its number recorded as a skip.
    ("ndjson", 1364394093, Draw::Plain),
    ("ndjson", 1364394146, Draw::Plain),
    ("ndjson", 1364394001, Draw::Plain),
    ("ndjson", 41728073096760, Draw::Plain),
    // NDJSON: the prune of an expired delivered record, written alone to
    // the delivered file, was left unsynced; a power loss brought the
    // record back inside a retention window set since.
    ("ndjson", 1364395369, Draw::Plain),
    // NDJSON: a compaction cut between the replacement of the delivered
    // file (which no longer kept the highest id it named) and the main
    // file's lowered the high-water mark.
    ("ndjson", 211309755799995, Draw::Plain),
    // NDJSON: a compaction that rewrote the delivered file set the late
    // flags again in file order, so a bounded prune took other expired
    // records than the model (the comparison now allows that).
    ("ndjson", 202296477112933, Draw::Plain),
    // PostgreSQL: a push acknowledgement that delivered nothing (its
    // entries refused or skipped) did not prune expired delivered
    // records, as every other backend's does.
    ("postgres", 121900191832689, Draw::Plain),
    // PostgreSQL takes the oldest expired deliveries first, not the
    // model's order (late records first): a bounded prune took other
    // records, which the comparison now allows, as on NDJSON.
    ("postgres", 169573699531624, Draw::Plain),
    // SQLite, the first run with received requests: a received entry
    // whose coalesce key replaced an item was let in on a spool over its
    // bound (an import had put it there), where an enqueue is refused.
    ("sqlite", 1363345425, Draw::WithReceive),
    // SQLite counts a record delivered below its prune cursor as late,
    // the model does not: a bounded prune took another expired record,
    // which the comparison now allows on every backend.
    ("sqlite", 135734800185490, Draw::WithReceiveGroups),
    // The harness, not the spool: the index put back as it was earlier
    // (rewritten outside SQLite, shorter) kept the crash VFS's undo log of
    // its later writes, which a power loss then failed to replay.
    ("ndjson", 260598983713806, Draw::WithItems),
];

/// Operations per plan.
const PLAN_LEN: usize = 50;
/// Operations per plan of a regression seed: as many as the longest
/// runs that found them (`SIM_OPS=80 benches/sim.sh`); the first
/// [`PLAN_LEN`] are the plan `cargo test` draws from the same seed.
const REGRESSION_LEN: usize = 80;
/// Seeds per backend in `cargo test`.
const SEEDS: u64 = 200;
const PG_SEEDS: u64 = 10;
/// Operations per plan on PostgreSQL (every call is a round trip).
const PG_PLAN_LEN: usize = 30;
/// The first seed of `cargo test`'s runs (each backend adds its own
/// offset, so that the backends run different plans).
const FIRST_SEED: u64 = 0x5133_0000;
/// Runs the shrinker may spend on one failure.
const SHRINK_RUNS: usize = 400;

fn name(b: Backend) -> &'static str {
    match b {
        Backend::Memory => "memory",
        Backend::Sqlite => "sqlite",
        Backend::File => "ndjson",
        Backend::Postgres => "postgres",
    }
}

fn env_u64(var: &str) -> Option<u64> {
    let v = std::env::var(var).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{var}={v}: not a number")))
}

fn plan_len(default: usize) -> usize {
    env_u64("SIM_OPS").map_or(default, |n| n as usize)
}

/// Run one plan; a panic counts as a failure too.
fn run(backend: Backend, plan: &Plan) -> Result<Stats, (usize, String)> {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut w = World::new(backend, plan);
        assert_eq!(w.kind(), backend.kind());
        w.run(plan).map(|()| w.stats.clone())
    }));
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err((usize::MAX, format!("panic: {msg}")))
        }
    }
}

/// Run `seed`; on failure, shrink and panic with the report.
fn run_seed(backend: Backend, seed: u64, len: usize, draw: Draw, total: &mut Stats) {
    let plan = plan::generate(seed, len, draw);
    let Err((_, failure)) = run(backend, &plan).map(|s| total.add(&s)) else {
        return;
    };
    let mut last = failure.clone();
    let short = shrink::shrink(&plan, SHRINK_RUNS, &mut |p| match run(backend, p) {
        Ok(_) => false,
        Err((_, f)) => {
            last = f;
            true
        }
    });
    // The message of the shortest plan, from a fresh run of it.
    let short_failure = run(backend, &short).err().map_or(last, |(_, f)| f);
    let ops: Vec<String> = short
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| format!("  {i:3}: {op:?}"))
        .collect();
    panic!(
        "simulation failed: backend {b}, seed {seed}\n\
         replay: SIM_BACKEND={b} SIM_SEED={seed} cargo test --test sim\n\
         failure: {failure}\n\n\
         shortest failing plan ({n} of {all} operations, spool created with max_depth {md:?}):\n\
         {ops}\n\
         its failure: {short_failure}",
        b = name(backend),
        n = short.ops.len(),
        all = plan.ops.len(),
        md = short.max_depth,
        ops = ops.join("\n"),
    );
}

fn explore(backend: Backend, default_seeds: u64, default_len: usize) {
    if let Ok(only) = std::env::var("SIM_BACKEND") {
        if only != name(backend) {
            return;
        }
    }
    let seeds: Vec<u64> = match env_u64("SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let n = env_u64("SIM_SEEDS").unwrap_or(default_seeds);
            let offset = match backend {
                Backend::Memory => 0,
                Backend::Sqlite => 1 << 20,
                Backend::File => 2 << 20,
                Backend::Postgres => 3 << 20,
            };
            let first = env_u64("SIM_FIRST_SEED").unwrap_or(FIRST_SEED + offset);
            (first..first + n).collect()
        }
    };
    let started = std::time::Instant::now();
    let mut total = Stats::default();
    for seed in &seeds {
        run_seed(
            backend,
            *seed,
            plan_len(default_len),
            Draw::WithTooLarge,
            &mut total,
        );
    }
    // Past the harness's capture, for benches/sim.sh and the curious.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "sim {}: {} seeds, {} operations, {} crashes ({} cut an operation: {} rolled back, \
         {} kept; {} power losses), {} reopens ({} deferred), {} push requests, {} acks, {} items applied \
         at the receiver, {} requests received, {} automatic compactions, {} directory entries lost, {} items dead-lettered after a 413, in {:.1}s",
        name(backend),
        seeds.len(),
        total.ops,
        total.crashes,
        total.cut,
        total.rolled_back,
        total.kept,
        total.power_losses,
        total.reopens,
        total.deferred_reopens,
        total.push_requests,
        total.push_acks,
        total.push_applied,
        total.received,
        total.auto_compactions,
        total.lost_entries,
        total.too_large,
        started.elapsed().as_secs_f64(),
    );
}

#[test]
fn memory() {
    explore(Backend::Memory, SEEDS, PLAN_LEN);
}

#[test]
fn sqlite() {
    explore(Backend::Sqlite, SEEDS, PLAN_LEN);
}

#[test]
fn ndjson() {
    explore(Backend::File, SEEDS, PLAN_LEN);
}

#[test]
fn postgres() {
    if common::pg_url("sim::postgres").is_none() {
        return;
    }
    explore(Backend::Postgres, PG_SEEDS, PG_PLAN_LEN);
}

/// Every seed that ever failed, on the backend it failed on.
#[test]
fn regressions() {
    let mut total = Stats::default();
    let pg = REGRESSIONS.iter().any(|(b, _, _)| *b == "postgres")
        && common::pg_url("sim::regressions (its PostgreSQL seeds)").is_some();
    for (backend, seed, draw) in REGRESSIONS {
        let b = match *backend {
            "memory" => Backend::Memory,
            "sqlite" => Backend::Sqlite,
            "ndjson" => Backend::File,
            "postgres" if pg => Backend::Postgres,
            _ => continue,
        };
        run_seed(b, *seed, REGRESSION_LEN, *draw, &mut total);
    }
}

/// The comparison is not vacuous: a spool that differs from the model
/// is caught, and a crash that loses an acknowledged write is too.
#[test]
fn the_checks_catch_a_difference() {
    let plan = Plan {
        max_depth: None,
        auto_compact: None,
        defer_open: false,
        ops: vec![plan::Op::Enqueue(b"x".to_vec(), String::new())],
    };
    let mut w = World::new(Backend::Memory, &plan);
    w.run(&plan).expect("the plan runs");
    w.tamper_enqueue(b"y");
    assert!(w.check().is_err(), "a spool holding more than the model");
}

/// A power loss keeps what was synced and a prefix of what was not: all
/// of it, none of it, or the last write torn — and across seeds, each.
#[test]
fn a_power_loss_keeps_the_synced_bytes_and_a_prefix_of_the_rest() {
    use spool::backend::file::io::FileIo;
    let (mut none, mut torn) = (false, false);
    for seed in 0..32 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let io = crash_io::CrashIo::new(dir.path());
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        io.sync_dir(dir.path()).unwrap();
        io.write(&mut f, b"synced\n").unwrap();
        io.sync(&f).unwrap();
        io.write(&mut f, b"lost-1\n").unwrap();
        io.write(&mut f, b"lost-2\n").unwrap();
        drop(f);
        io.power_loss(seed);
        let after = std::fs::read(&path).unwrap();
        let full = b"synced\nlost-1\nlost-2\n";
        assert!(
            after.len() >= 7 && full.starts_with(&after),
            "seed {seed}: {after:?}"
        );
        none |= after == b"synced\n";
        torn |= after.len() > 7 && after.len() < full.len() && !after.ends_with(b"\n");
    }
    assert!(none && torn, "lost: {none}, torn: {torn}");
}

/// A power loss keeps the directory's entries as of its last sync, or
/// every change made since — and across seeds, each: a file created
/// since is gone or there, a file renamed over since is the old one or
/// the new one, whatever was synced inside them.
#[test]
fn a_power_loss_keeps_the_directory_as_of_its_last_sync_or_all_of_it() {
    use spool::backend::file::io::FileIo;
    let (mut lost, mut kept) = (false, false);
    for seed in 0..32 {
        let dir = tempfile::tempdir().unwrap();
        let (old, tmp, new) = (
            dir.path().join("old"),
            dir.path().join("tmp"),
            dir.path().join("new"),
        );
        let io = crash_io::CrashIo::new(dir.path());
        let write = |path: &std::path::Path, data: &[u8]| {
            let mut f = std::fs::File::create(path).unwrap();
            io.write(&mut f, data).unwrap();
            io.sync(&f).unwrap();
        };
        write(&old, b"before");
        io.sync_dir(dir.path()).unwrap();
        write(&tmp, b"after");
        io.rename(&tmp, &old).unwrap();
        write(&new, b"created");
        io.power_loss(seed);
        let read = |p: &std::path::Path| std::fs::read(p).ok();
        assert_eq!(read(&tmp), None, "seed {seed}");
        match read(&old).as_deref() {
            Some(b"before") => {
                assert_eq!(read(&new), None, "seed {seed}");
                lost = true;
            }
            Some(b"after") => {
                assert_eq!(read(&new).as_deref(), Some(&b"created"[..]), "seed {seed}");
                kept = true;
            }
            other => panic!("seed {seed}: {other:?}"),
        }
    }
    assert!(lost && kept, "lost: {lost}, kept: {kept}");
}

/// An armed crash fails the operations after the first `n`, and every
/// later one, until the next process.
#[test]
fn an_armed_crash_fails_every_operation_after_the_nth() {
    use spool::backend::file::io::FileIo;
    let dir = tempfile::tempdir().unwrap();
    let io = crash_io::CrashIo::new(dir.path());
    let mut f = std::fs::File::create(dir.path().join("f")).unwrap();
    io.fail_after(2, 0);
    assert!(io.write(&mut f, b"a").is_ok());
    assert!(io.sync(&f).is_ok());
    assert!(io.write(&mut f, b"b").is_err());
    assert!(io.sync(&f).is_err());
    assert!(io.tripped());
    io.reset();
    assert!(io.write(&mut f, b"c").is_ok());
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"ac");
}
