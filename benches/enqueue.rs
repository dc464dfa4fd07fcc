//! Library enqueue rate per durable backend: one committed (fsynced) item
//! per call, and batches of items in one commit.
//!
//! Run with `cargo bench --bench enqueue` (set `SPOOL_BENCH_DIR` to put
//! the spools on a particular disk; default: a temp dir). Prints a
//! Markdown table; the figures in `docs/benchmarks.md` come from here.
//! `SPOOL_BENCH_ONLY=sqlite|ndjson` runs one backend.

use spool::{EnqueueOptions, NewItem, OpenMode, OpenOptions, Spool};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn bench_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("SPOOL_BENCH_DIR") {
        Some(d) => {
            let p = PathBuf::from(d);
            std::fs::create_dir_all(&p).expect("create SPOOL_BENCH_DIR");
            (None, p)
        }
        None => {
            let t = tempfile::tempdir().expect("temp dir");
            let p = t.path().to_path_buf();
            (Some(t), p)
        }
    }
}

fn payload(i: usize) -> Vec<u8> {
    format!("{{\"event\":\"progress\",\"seq\":{i},\"user\":\"u-{}\",\"pad\":\"0123456789abcdef0123456789abcdef\"}}", i % 97)
        .into_bytes()
}

fn rate(n: usize, d: Duration) -> String {
    format!("{:.0}", n as f64 / d.as_secs_f64())
}

fn main() {
    // `cargo test` runs benches with --bench-less flags; only run for real
    // under `cargo bench`.
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return;
    }
    let (_guard, dir) = bench_dir();
    let single = 2_000;
    let batched = 100_000;
    let batch = 1_000;
    println!("| backend | mode | items | seconds | items/s |");
    println!("|---|---|---:|---:|---:|");
    let only = std::env::var("SPOOL_BENCH_ONLY").unwrap_or_default();
    for (name, file) in [("sqlite", "bench.db"), ("ndjson", "bench.ndjson")] {
        if !only.is_empty() && only != name {
            continue;
        }
        let path = dir.join(file);
        let _ = std::fs::remove_file(&path);
        for suffix in ["-wal", "-shm", ".dead", ".meta"] {
            let mut p = path.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        let spool = Spool::open(&path, &OpenOptions::new(OpenMode::Create)).expect("open");

        let t = Instant::now();
        for i in 0..single {
            spool.enqueue(&payload(i), "").expect("enqueue");
        }
        let d = t.elapsed();
        println!(
            "| {name} | one item per commit | {single} | {:.3} | {} |",
            d.as_secs_f64(),
            rate(single, d)
        );

        let t = Instant::now();
        let mut i = 0;
        while i < batched {
            let items: Vec<NewItem> = (i..i + batch)
                .map(|j| NewItem::new(payload(j), format!("key-{j}")))
                .collect();
            spool
                .enqueue_batch(&items, &EnqueueOptions::default())
                .expect("batch");
            i += batch;
        }
        let d = t.elapsed();
        println!(
            "| {name} | batches of {batch} (keyed) | {batched} | {:.3} | {} |",
            d.as_secs_f64(),
            rate(batched, d)
        );
    }
}
