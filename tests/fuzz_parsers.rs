//! Every parser of outside input, fuzzed on the stable toolchain inside
//! `cargo test`: one test per target of `tests/fuzz_common` (the same
//! targets `fuzz/` runs coverage-guided).
//!
//! Each test first replays the committed corpus — the seeds in
//! `fuzz/corpus/<target>/` and every input that ever failed, in
//! `fuzz/artifacts/<target>/` — and then a fixed number of inputs made
//! from a fixed seed: valid inputs built with spool's own writers, the
//! same mutated (bit flips, bytes set, inserted and deleted, truncation,
//! splices with other inputs, duplicated runs, huge numbers, deep
//! nesting, invalid UTF-8, NUL bytes, tokens of the format) and junk.
//!
//! Properties, beyond the target's own (see `fuzz_common`): no input
//! panics; none takes longer than [`HANG`] (each runs on a worker thread
//! that the test watches); none makes the parser hold more than its
//! bound of memory at once (a counting global allocator measures the
//! worker thread's peak: at most `k` times the input's length plus a
//! constant, per target).
//!
//! A failing input is written to `target/tmp/fuzz-failures/<target>/`
//! and named in the failure; fixed, it goes to `fuzz/artifacts/<target>/`
//! so that every later run replays it. `FUZZ_SEED=<n>` changes the seed,
//! `FUZZ_SCALE=<n>` multiplies the number of inputs (for a longer run by
//! hand); the defaults keep the whole file within its budget in CI.

mod fuzz_common;

use fuzz_common::{encode_files, SPOOL_FILES};
use spool::fuzzing::{ClientLine, Line, PushLine};
use spool::item::{Delivery, Evidence, Item};
use spool::Timestamp;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------
// Memory: a global allocator that counts, per thread, the bytes held and
// their peak.

struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = HELD.try_with(|h| {
        let now = h.get() + delta;
        h.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        note(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes this thread held at once while `f` ran, beyond what it
/// held before.
fn peak_of(f: impl FnOnce()) -> usize {
    let base = HELD.with(Cell::get);
    PEAK.with(|p| p.set(base));
    f();
    (PEAK.with(Cell::get) - base).max(0) as usize
}

// ---------------------------------------------------------------------
// The runner.

/// The longest one input may take (debug build, a loaded 2-core
/// machine): far above what any input takes, far below a hang.
const HANG: Duration = Duration::from_secs(20);

/// A target's plan: how its inputs are made, how many, and its bound.
struct Plan {
    name: &'static str,
    /// A valid input.
    valid: Maker,
    /// Tokens of the format, inserted by the mutator.
    dict: &'static [&'static [u8]],
    /// Inputs made (besides the corpus), at `FUZZ_SCALE=1`.
    inputs: usize,
    /// Memory bound: at most `k` × input length + `c` bytes held at once.
    memory: Option<(usize, usize)>,
    /// The input is files ([`encode_files`]): mutate one file at a time.
    files: bool,
}

/// Tokens every format gets: numbers at and past every integer limit,
/// fractions and exponents, escapes that are not characters, bytes that
/// are not UTF-8, NUL, deep nesting, long runs.
const COMMON: &[&[u8]] = &[
    b"0",
    b"-0",
    b"-1",
    b"1.5",
    b"1e999",
    b"-1e-999",
    b"4294967295",
    b"4294967296",
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"340282366920938463463374607431768211456",
    b"null",
    b"true",
    b"false",
    b"\"\"",
    b"\\u0000",
    b"\\ud800",
    b"\\udc00\\ud800",
    b"\\u00e9",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\0",
    b"\r\n",
    b"\n",
    b"  \t",
    b"{}",
    b"[]",
];

fn base_seed() -> u64 {
    std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5f00_1d0c_2026)
}

fn scale() -> usize {
    std::env::var("FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// The committed inputs of a target: seeds and past failures.
fn corpus(name: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        paths.sort();
        for p in paths {
            if p.is_file() {
                let bytes = std::fs::read(&p).expect("read a corpus file");
                out.push((p, bytes));
            }
        }
    }
    out
}

/// A short, stable name for an input.
fn fingerprint(bytes: &[u8]) -> String {
    // FNV-1a.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Keep a failing input where a person finds it.
fn save_failure(name: &str, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("fuzz-failures")
        .join(name);
    std::fs::create_dir_all(&dir).expect("make the failure directory");
    let path = dir.join(format!("crash-{}", fingerprint(input)));
    std::fs::write(&path, input).expect("save the failing input");
    path
}

enum Report {
    /// Input `i` passed.
    Passed,
    /// Input `i` failed: why.
    Failed { input: Vec<u8>, why: String },
    /// All inputs ran.
    Finished { inputs: usize },
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// Run `plan`: the corpus, then the made inputs; fail with every input
/// that broke a property.
fn fuzz(plan: Plan) {
    let started = Instant::now();
    let check = fuzz_common::target(plan.name);
    let name = plan.name;
    let seed = base_seed()
        ^ u64::from_le_bytes(
            fingerprint(name.as_bytes()).as_bytes()[..8]
                .try_into()
                .unwrap(),
        );
    let corpus = corpus(name);
    let (tx, rx) = mpsc::channel::<Report>();
    let (current_tx, current_rx) = mpsc::channel::<Vec<u8>>();
    let worker = std::thread::Builder::new()
        .name(format!("fuzz-{name}"))
        .spawn(move || {
            let mut rng = fastrand::Rng::with_seed(seed);
            let mut pool: Vec<Vec<u8>> = corpus.iter().map(|(_, b)| b.clone()).collect();
            let made = plan.inputs * scale();
            let total = corpus.len() + made;
            for i in 0..total {
                let input = if i < corpus.len() {
                    corpus[i].1.clone()
                } else {
                    next_input(&plan, &mut rng, &pool)
                };
                let _ = current_tx.send(input.clone());
                let mut outcome = Ok(());
                let peak = peak_of(|| {
                    outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        check(&input)
                    }));
                });
                let report = match outcome {
                    Err(p) => Report::Failed {
                        why: panic_text(&*p),
                        input,
                    },
                    Ok(()) => match plan.memory {
                        Some((k, c)) if peak > k * input.len() + c => Report::Failed {
                            why: format!(
                                "held {peak} bytes at once for a {}-byte input (bound: {k} × length + {c})",
                                input.len()
                            ),
                            input,
                        },
                        _ => {
                            if pool.len() < 256 && rng.u8(..) < 16 {
                                pool.push(input);
                            }
                            Report::Passed
                        }
                    },
                };
                if tx.send(report).is_err() {
                    return;
                }
            }
            let _ = tx.send(Report::Finished { inputs: total });
        })
        .expect("start the worker");
    let mut failures = Vec::new();
    let mut current = Vec::new();
    let inputs = loop {
        match rx.recv_timeout(HANG) {
            Ok(Report::Passed) => {}
            Ok(Report::Failed { input, why }) => {
                let saved = save_failure(name, &input);
                failures.push(format!("{}: {why}", saved.display()));
            }
            Ok(Report::Finished { inputs }) => break inputs,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                while let Ok(i) = current_rx.try_recv() {
                    current = i;
                }
                let saved = save_failure(name, &current);
                panic!(
                    "{name}: an input ran for more than {HANG:?} (a hang): {}",
                    saved.display()
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                panic!("{name}: the worker stopped")
            }
        }
    };
    worker.join().expect("the worker ends");
    println!(
        "{name}: {inputs} inputs (seed {seed}) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{name}: {} failing inputs (seed {seed}); once fixed, move each to fuzz/artifacts/{name}/:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The next input: a valid one (as it is, a quarter of the time),
/// mutated; an earlier input mutated; or junk.
fn next_input(plan: &Plan, rng: &mut fastrand::Rng, pool: &[Vec<u8>]) -> Vec<u8> {
    let roll = rng.u8(..100);
    let mut input = if roll < 10 {
        junk(rng)
    } else if roll < 40 && !pool.is_empty() {
        pool[rng.usize(..pool.len())].clone()
    } else {
        (plan.valid)(rng)
    };
    if roll < 10 || rng.u8(..4) == 0 {
        return input;
    }
    if plan.files {
        let mut files = fuzz_common::decode_files(&input);
        if files.is_empty() {
            return input;
        }
        for _ in 0..rng.usize(1..3) {
            let i = rng.usize(..files.len());
            // Splices take from another file of the same spool.
            let donor = files[rng.usize(..files.len())].1.clone();
            files[i].1 = mutate(rng, &files[i].1, plan.dict, &donor);
        }
        if rng.u8(..8) == 0 {
            let i = rng.usize(..files.len());
            files.remove(i);
        }
        return encode_files(&files);
    }
    let donor = if pool.is_empty() {
        (plan.valid)(rng)
    } else {
        pool[rng.usize(..pool.len())].clone()
    };
    for _ in 0..rng.usize(1..5) {
        input = mutate(rng, &input, plan.dict, &donor);
    }
    input
}

/// Random bytes, or random text of the format's punctuation.
fn junk(rng: &mut fastrand::Rng) -> Vec<u8> {
    let len = rng.usize(..300);
    if rng.bool() {
        return (0..len).map(|_| rng.u8(..)).collect();
    }
    const PUNCT: &[u8] = b"{}[]\":,0123456789-.eE \n\\abtrufnlsu";
    (0..len).map(|_| PUNCT[rng.usize(..PUNCT.len())]).collect()
}

/// One mutation of `input`.
fn mutate(rng: &mut fastrand::Rng, input: &[u8], dict: &[&[u8]], donor: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    let at = |rng: &mut fastrand::Rng, v: &Vec<u8>| rng.usize(..=v.len());
    match rng.u8(..11) {
        0 if !v.is_empty() => {
            let i = rng.usize(..v.len());
            v[i] ^= 1 << rng.u8(..8);
        }
        1 if !v.is_empty() => {
            let i = rng.usize(..v.len());
            v[i] = rng.u8(..);
        }
        2 => {
            let i = at(rng, &v);
            const BYTES: &[u8] = b"\0\xff\"\\{}[],:\n\r 09-.eE";
            v.insert(i, BYTES[rng.usize(..BYTES.len())]);
        }
        3 if !v.is_empty() => {
            let i = rng.usize(..v.len());
            let n = rng.usize(1..=(v.len() - i).min(16));
            v.drain(i..i + n);
        }
        4 => {
            let i = at(rng, &v);
            v.truncate(i);
        }
        5 if !v.is_empty() => {
            // A run of the input again, elsewhere.
            let i = rng.usize(..v.len());
            let n = rng.usize(1..=(v.len() - i).min(64));
            let run = v[i..i + n].to_vec();
            let j = at(rng, &v);
            v.splice(j..j, run);
        }
        6 if !donor.is_empty() => {
            // Splice: our head, the donor's tail.
            let i = at(rng, &v);
            let j = rng.usize(..=donor.len());
            v.truncate(i);
            v.extend_from_slice(&donor[j..]);
        }
        7 => {
            let tokens = if rng.bool() && !dict.is_empty() {
                dict
            } else {
                COMMON
            };
            let t = tokens[rng.usize(..tokens.len())];
            let i = at(rng, &v);
            v.splice(i..i, t.iter().copied());
        }
        8 => {
            // A number replaced by one at or past a limit.
            let digits: Vec<usize> = (0..v.len()).filter(|&i| v[i].is_ascii_digit()).collect();
            if let Some(&i) = digits.get(rng.usize(..digits.len().max(1))) {
                let end = (i..v.len())
                    .find(|&j| !v[j].is_ascii_digit())
                    .unwrap_or(v.len());
                let t = COMMON[rng.usize(4..15)];
                v.splice(i..end, t.iter().copied());
            }
        }
        9 => {
            // Deep nesting.
            let depth = rng.usize(1..400);
            let (open, close) = if rng.bool() {
                (b'[', b']')
            } else {
                (b'{', b'}')
            };
            let i = at(rng, &v);
            let mut nest = vec![open; depth];
            if open == b'{' {
                nest = b"{\"a\":".repeat(depth);
            }
            if rng.bool() {
                nest.extend(std::iter::repeat_n(close, depth));
            }
            v.splice(i..i, nest);
        }
        _ => {
            // A long run of one byte.
            let i = at(rng, &v);
            let b = [b'a', b'0', b' ', 0, b'\\', 0xff, b'\n'][rng.usize(..7)];
            let n = rng.usize(1..5000);
            v.splice(i..i, std::iter::repeat_n(b, n));
        }
    }
    v
}

// ---------------------------------------------------------------------
// Valid inputs, made with spool's writers.

fn text(rng: &mut fastrand::Rng, max: usize) -> String {
    const PIECES: &[&str] = &[
        "a", "b", "Z", "0", "7", " ", "-", ":", ".", "\"", "\\", "/", "\n", "\r", "\t", "\u{1}",
        "\u{1f}", "\u{7f}", "é", "中", "😀", "\u{2028}", "{", "}", "k", "order-",
    ];
    let n = rng.usize(..=max);
    (0..n).map(|_| PIECES[rng.usize(..PIECES.len())]).collect()
}

fn bytes(rng: &mut fastrand::Rng, max: usize) -> Vec<u8> {
    if rng.bool() {
        text(rng, max).into_bytes()
    } else {
        (0..rng.usize(..=max)).map(|_| rng.u8(..)).collect()
    }
}

fn maybe<T>(rng: &mut fastrand::Rng, f: impl FnOnce(&mut fastrand::Rng) -> T) -> Option<T> {
    if rng.bool() {
        Some(f(rng))
    } else {
        None
    }
}

fn time_ms(rng: &mut fastrand::Rng) -> i64 {
    match rng.u8(..8) {
        0 => 0,
        1 => rng.i64(..),
        _ => rng.i64(1_600_000_000_000..1_900_000_000_000),
    }
}

fn evidence(rng: &mut fastrand::Rng) -> Evidence {
    match rng.u8(..5) {
        0 => Evidence::Http(rng.u16(100..600)),
        1 => Evidence::Exit(rng.i32(..)),
        2 => Evidence::Push(rng.u64(..)),
        3 => Evidence::Done,
        _ => Evidence::Sink,
    }
}

fn item(rng: &mut fastrand::Rng) -> Item {
    Item {
        id: if rng.bool() {
            rng.u64(1..1000)
        } else {
            rng.u64(..)
        },
        payload: bytes(rng, 40),
        key: text(rng, 12),
        attempts: if rng.bool() {
            rng.u32(..5)
        } else {
            rng.u32(..)
        },
        enqueued_at: maybe(rng, |r| Timestamp::from_secs(time_ms(r) / 1000)),
        next_retry_at: maybe(rng, |r| Timestamp::from_millis(time_ms(r))),
        last_error: maybe(rng, |r| text(r, 20)),
        held: rng.bool(),
        push_seq: maybe(rng, |r| r.u64(1..1000)),
        group: maybe(rng, |r| text(r, 6)),
        coalesce_key: maybe(rng, |r| text(r, 6)),
    }
}

fn line_value(rng: &mut fastrand::Rng) -> Line {
    match rng.u8(..10) {
        0..=4 => {
            let delivery = maybe(rng, |r| Delivery {
                at: Timestamp::from_millis(time_ms(r)),
                evidence: evidence(r),
            });
            Line::Put {
                item: item(rng),
                dead_at: maybe(rng, |r| Timestamp::from_millis(time_ms(r))),
                delivered_at: delivery.map(|d| d.at),
                evidence: delivery.map(|d| d.evidence.encode()),
            }
        }
        5..=6 => Line::Done {
            id: rng.u64(1..1000),
            delivery: maybe(rng, |r| Delivery {
                at: Timestamp::from_millis(time_ms(r)),
                evidence: evidence(r),
            }),
        },
        7 => Line::Push(PushLine {
            assigned: rng.u64(..100),
            acked: rng.u64(..100),
            skips: (0..rng.usize(..3)).map(|_| rng.u64(..100)).collect(),
            uuid: maybe(rng, |r| text(r, 8)),
        }),
        8 => Line::Client(ClientLine {
            id: text(rng, 8),
            last: maybe(rng, |r| r.u64(..100)),
            acked: rng.u64(..10),
            at: maybe(rng, time_ms),
            applied: (0..rng.usize(..3))
                .map(|_| (rng.u64(..100), text(rng, 4)))
                .collect(),
            rejected: (0..rng.usize(..2))
                .map(|_| (rng.u64(..100), maybe(rng, |r| text(r, 4)), text(rng, 6)))
                .collect(),
            skipped: (0..rng.usize(..2)).map(|_| rng.u64(..100)).collect(),
        }),
        _ => Line::Evicted(rng.u64(..)),
    }
}

/// One line as `spool` (or, reordered and spaced, the reference and
/// other writers) writes it, without its newline; sometimes framed.
fn ndjson_line_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut line = spool::fuzzing::ndjson_write_line(&line_value(rng));
    line.pop();
    if rng.u8(..4) == 0 {
        // Another writer: fields reordered, spaces, escapes.
        if let Ok(serde_json::Value::Object(m)) = serde_json::from_slice(&line) {
            let mut fields: Vec<_> = m.into_iter().collect();
            fastrand_shuffle(rng, &mut fields);
            let obj: serde_json::Map<_, _> = fields.into_iter().collect();
            line = if rng.bool() {
                serde_json::to_vec_pretty(&obj)
                    .unwrap()
                    .into_iter()
                    .filter(|b| *b != b'\n')
                    .collect()
            } else {
                serde_json::to_vec(&obj).unwrap()
            };
        }
    }
    if rng.u8(..4) == 0 && line.ends_with(b"}") {
        line.pop();
        line.extend_from_slice(format!(",\"tx\":{}}}", rng.u64(..10_000)).as_bytes());
    }
    line
}

fn fastrand_shuffle<T>(rng: &mut fastrand::Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = rng.usize(..=i);
        v.swap(i, j);
    }
}

/// A spool file: lines, blank lines, CRLF, a framed batch (whole or cut),
/// a run of NUL bytes, a torn last line.
fn ndjson_file_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.usize(..8) {
        match rng.u8(..10) {
            0 => out.extend_from_slice(b"\n"),
            1 => {
                // A batch framed as spool writes it.
                let start = out.len() as u64;
                let n = rng.usize(2..4);
                for j in 0..n {
                    let mut l = spool::fuzzing::ndjson_write_line(&Line::Done {
                        id: rng.u64(1..100),
                        delivery: None,
                    });
                    if j + 1 < n {
                        l.truncate(l.len() - 2);
                        l.extend_from_slice(format!(",\"tx\":{start}}}\n").as_bytes());
                    }
                    out.extend_from_slice(&l);
                }
            }
            _ => {
                out.extend_from_slice(&ndjson_line_valid(rng));
                out.extend_from_slice(if rng.u8(..6) == 0 { b"\r\n" } else { b"\n" });
            }
        }
    }
    match rng.u8(..6) {
        0 => out.extend(std::iter::repeat_n(0u8, rng.usize(1..64))),
        1 => {
            let l = ndjson_line_valid(rng);
            let cut = rng.usize(..=l.len());
            out.extend_from_slice(&l[..cut]);
        }
        2 => {
            // A batch cut short.
            let cut = rng.usize(..=out.len());
            out.truncate(cut);
        }
        _ => {}
    }
    out
}

/// The files of real spools, made once: pending, held, dead, delivered
/// (retained) items, push state, a receiver's clients, a compaction.
fn spool_files_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    static MADE: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    let made = MADE.get_or_init(|| (0..4).map(make_spool).collect());
    let spool = made[rng.usize(..made.len())].clone();
    if rng.u8(..3) != 0 {
        return spool;
    }
    // Other metadata: numbers at their limits, unknown policies.
    let mut files = fuzz_common::decode_files(&spool);
    let big = |r: &mut fastrand::Rng| [0, 1, 5, 1000, u64::MAX, i64::MAX as u64][r.usize(..6)];
    let mut meta = serde_json::Map::new();
    meta.insert("version".into(), rng.u32(..3).into());
    if rng.bool() {
        meta.insert("uuid".into(), text(rng, 36).into());
    }
    if rng.bool() {
        meta.insert("maxDepth".into(), big(rng).into());
    }
    if rng.bool() {
        let p = ["reject", "drop-oldest", "explode", ""][rng.usize(..4)];
        meta.insert("onFull".into(), p.into());
    }
    if rng.bool() {
        meta.insert("retainMs".into(), big(rng).into());
    }
    files.retain(|(w, _)| *w != 3);
    files.push((3, serde_json::to_vec(&meta).unwrap()));
    encode_files(&files)
}

fn make_spool(variant: u64) -> Vec<u8> {
    use spool::{OpenMode, OpenOptions, Spool};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SPOOL_FILES[0]);
    let clock = spool::ManualClock::new(Timestamp::from_millis(1_764_583_200_000));
    let opts = OpenOptions {
        backend: Some(spool::BackendKind::File),
        clock: std::sync::Arc::new(clock.clone()),
        ..OpenOptions::new(OpenMode::Create)
    };
    {
        let s = Spool::open(&path, &opts).unwrap();
        if variant % 2 == 1 {
            s.set_retain(Some(Duration::from_secs(3600))).unwrap();
        }
        let mut items = Vec::new();
        for i in 0..6 {
            let mut it = spool::NewItem::new(
                if i == 3 {
                    vec![0xff, 0, 1]
                } else {
                    format!("payload {i}").into_bytes()
                },
                if i % 2 == 0 {
                    format!("key-{i}")
                } else {
                    String::new()
                },
            );
            if variant >= 2 && i % 3 == 0 {
                it.group = Some("g".into());
            }
            items.push(it);
        }
        let ids: Vec<_> = s
            .enqueue_batch(&items, &Default::default())
            .unwrap()
            .into_iter()
            .map(|e| e.id)
            .collect();
        s.set_held(&[ids[1]], true).unwrap();
        s.dead_letter(ids[2], "HTTP 500").unwrap();
        s.deliver(&[(ids[0], Evidence::Http(204))]).unwrap();
        s.record_attempt(
            ids[4],
            &spool::AttemptUpdate {
                attempts: 1,
                next_retry_at: Some(Timestamp::from_millis(1_764_583_260_000)),
                last_error: Some("timeout".into()),
            },
        )
        .unwrap();
        s.push_assign(&[ids[5]]).unwrap();
        if variant == 2 {
            if let Spool::File(f) = &s {
                f.compact().unwrap();
            }
        }
        s.enqueue(b"after", "k-after").unwrap();
    }
    let files: Vec<(usize, Vec<u8>)> = SPOOL_FILES
        .iter()
        .enumerate()
        .filter_map(|(i, name)| Some((i, std::fs::read(dir.path().join(name)).ok()?)))
        .collect();
    encode_files(&files)
}

fn record_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    use spool::ops::json::ItemJson;
    use spool::{Record, RecordState};
    let mut out = Vec::new();
    if rng.bool() {
        let h = spool::SpoolHeader {
            uuid: "0a6e1c2d-1111-4c4c-9a9a-0123456789ab".into(),
            push: spool::PushState {
                last_assigned: 5,
                acked: 3,
                skips: if rng.bool() { vec![4] } else { vec![] },
            },
        };
        out.extend_from_slice(h.to_line().as_bytes());
        out.push(b'\n');
    }
    for _ in 0..rng.usize(1..4) {
        let mut it = item(rng);
        it.id = rng.u64(1..1000);
        it.key = it.key.replace('\0', "");
        let state = [
            RecordState::Pending,
            RecordState::Held,
            RecordState::Dead,
            RecordState::Delivered,
        ][rng.usize(..4)];
        it.held = state == RecordState::Held;
        let t = |r: &mut fastrand::Rng| Timestamp::from_millis(r.i64(0..253_402_300_799_999));
        it.enqueued_at = maybe(rng, t);
        it.next_retry_at = maybe(rng, t);
        if state == RecordState::Delivered {
            it.push_seq = None;
        }
        let rec = Record {
            dead_at: (state == RecordState::Dead).then(|| t(rng)),
            delivery: (state == RecordState::Delivered).then(|| Delivery {
                at: t(rng),
                evidence: evidence(rng),
            }),
            item: it,
            state,
        };
        out.extend_from_slice(ItemJson::record(&rec).to_line().as_bytes());
        out.push(b'\n');
    }
    if rng.bool() {
        // One record alone (the single-record parser sees it whole).
        if let Some(first) = out
            .split(|b| *b == b'\n')
            .find(|l| !l.is_empty() && !l.starts_with(b"{\"spool\""))
        {
            return first.to_vec();
        }
    }
    out
}

fn enqueue_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.usize(..5) {
        let mut obj = serde_json::Map::new();
        let payload = bytes(rng, 30);
        match String::from_utf8(payload) {
            Ok(s) if rng.bool() => obj.insert("payload".into(), s.into()),
            Ok(s) => {
                use base64::Engine as _;
                obj.insert(
                    "payload_base64".into(),
                    base64::engine::general_purpose::STANDARD.encode(s).into(),
                )
            }
            Err(e) => {
                use base64::Engine as _;
                obj.insert(
                    "payload_base64".into(),
                    base64::engine::general_purpose::STANDARD
                        .encode(e.as_bytes())
                        .into(),
                )
            }
        };
        if rng.bool() {
            obj.insert(
                "key".into(),
                if rng.u8(..4) == 0 {
                    serde_json::Value::Null
                } else {
                    text(rng, 8).into()
                },
            );
        }
        if rng.bool() {
            obj.insert("group".into(), text(rng, 4).into());
        }
        if rng.bool() {
            obj.insert("coalesce_key".into(), text(rng, 4).into());
        }
        out.extend_from_slice(&serde_json::to_vec(&obj).unwrap());
        out.extend_from_slice(if rng.u8(..5) == 0 { b"\r\n\n" } else { b"\n" });
    }
    out
}

fn push_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    use spool::push::wire::{self, OutEntry};
    match rng.u8(..6) {
        0 => {
            let r = wire::PushResponse {
                last_seq: rng.u64(..100),
                rejected: (0..rng.usize(..3))
                    .map(|_| wire::Rejected {
                        seq: rng.u64(..100),
                        error: text(rng, 10),
                    })
                    .collect(),
                applied: rng.u64(..10),
                duplicates: rng.u64(..10),
            };
            r.to_json()
        }
        1 => wire::ErrorBody {
            error: text(rng, 10),
            last_seq: maybe(rng, |r| r.u64(..)),
        }
        .to_json(),
        _ => {
            let payloads: Vec<(String, Vec<u8>)> = (0..rng.usize(..4))
                .map(|_| (text(rng, 8), bytes(rng, 30)))
                .collect();
            let first = rng.u64(1..100);
            let entries: Vec<OutEntry> = payloads
                .iter()
                .enumerate()
                .map(|(i, (key, payload))| {
                    let seq = first + i as u64;
                    if rng.u8(..4) == 0 {
                        OutEntry::Skip { seq }
                    } else {
                        OutEntry::Item {
                            seq,
                            id: rng.u64(1..1000),
                            key,
                            payload,
                            enqueued_at: maybe(rng, |r| Timestamp::from_millis(time_ms(r))),
                            group: (rng.u8(..3) == 0).then_some(key.as_str()),
                            coalesce_key: (rng.u8(..3) == 0).then_some("status"),
                        }
                    }
                })
                .collect();
            let client =
                ["edge-1", "0a6e1c2d-1111-4c4c-9a9a-0123456789ab", "a.b_c:d"][rng.usize(..3)];
            wire::encode_request(client, first - 1, &entries)
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

fn gzip_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    static BOMB: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    match rng.u8(..8) {
        // Inflates to eight times the limit.
        0 => BOMB
            .get_or_init(|| gzip(&vec![b' '; 8 * fuzz_common::GUNZIP_LIMIT as usize]))
            .clone(),
        // Two members.
        1 => [gzip(&push_valid(rng)), gzip(b" ")].concat(),
        _ => gzip(&push_valid(rng)),
    }
}

fn headers_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    let key = text(rng, 20).replace(['\n', '\r'], "");
    let encoding = ["gzip", " GZIP ", "x-gzip", "identity", "", "br", "gzip, br"][rng.usize(..7)];
    let auth = [
        "Bearer secret-token-0123456789",
        "bearer  abc ",
        "Basic dXNlcg==",
        "Bearer",
        "",
    ][rng.usize(..5)];
    let path = ["edge-1", "edge%2D1", "a%zz", "%C3%A9", "", "x/y"][rng.usize(..6)];
    format!("{key}\n{encoding}\n{auth}\n{path}").into_bytes()
}

fn tokens_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    let mut out = String::new();
    for i in 0..rng.usize(1..5) {
        match rng.u8(..5) {
            0 => out.push_str("# a comment\n"),
            1 => out.push('\n'),
            _ => {
                out.push_str(&format!("token-{i}-{:016x}", rng.u64(..)));
                if rng.bool() {
                    out.push_str(&format!(" name=site-{i}"));
                }
                for g in ["edge-*", "0a6e1c2d-*", "site.?", "a"] {
                    if rng.u8(..3) == 0 {
                        out.push(' ');
                        out.push_str(g);
                    }
                }
                out.push_str(if rng.u8(..4) == 0 { "\r\n" } else { "\n" });
            }
        }
    }
    out.into_bytes()
}

fn units_valid(rng: &mut fastrand::Rng) -> Vec<u8> {
    const FORMS: &[&str] = &[
        "500ms",
        "5s",
        "2m",
        "1h",
        "1h30m",
        "7d",
        "30",
        "0.5",
        " 12 ",
        "1y",
        "1M",
        "2w",
        "512",
        "64KiB",
        "16MiB",
        "1GiB",
        "2kB",
        "1 MB",
        "1.5MiB",
        "20",
        "0",
        "409,423",
        "65, 66",
        "599",
        "off",
        "none",
        "12h",
        "120",
        "Wed, 21 Oct 2015 07:28:00 GMT",
        "2026-12-01T10:00:00Z",
        "2026-12-01T10:00:00.123456Z",
        "1970-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999Z",
        "http:200",
        "exit:-1",
        "push:41",
        "done",
        "sink",
    ];
    let mut s = FORMS[rng.usize(..FORMS.len())].to_string();
    if rng.u8(..4) == 0 {
        s.push_str(FORMS[rng.usize(..FORMS.len())]);
    }
    s.into_bytes()
}

// ---------------------------------------------------------------------
// One test per target. Budgets (inputs at FUZZ_SCALE=1) keep the file at
// about 30 s in a debug build on two cores.

const JSON_TOKENS: &[&[u8]] = &[
    b"\"op\":\"put\"",
    b"\"op\":\"done\"",
    b"\"id\":0",
    b"\"payload\":{\"base64\":\"AAE=\"}",
    b"{\"base64\":\"***\"}",
    b"\"tx\":0",
    b",\"tx\":1",
    b"\"deliveredAt\":1",
    b"\"evidence\":\"http:+200\"",
    b"\"evidence\":\"exit:-0\"",
    b"\"push\":{\"assigned\":1,\"acked\":0}",
    b"\"client\":{\"id\":\"c\"}",
    b"\"evicted\":1",
    b"\"enqueuedAt\":9223372036854775807",
    b"\"enqueuedAt\":-9223372036854775808",
    b"\"held\":true",
    b"\"group\":\"g\"",
    b"\"coalesceKey\":\"c\"",
    b"\"pushSeq\":1",
    b"\"attempts\":4294967295",
];

/// [`JSON_TOKENS`] and the metadata file's fields.
const SPOOL_TOKENS: &[&[u8]] = &[
    b"\"retainMs\":18446744073709551615",
    b"\"retainMs\":1",
    b"\"maxDepth\":0",
    b"\"maxDepth\":18446744073709551615",
    b"\"onFull\":\"drop-oldest\"",
    b"\"onFull\":\"explode\"",
    b"\"version\":2",
    b"\"uuid\":\"\"",
    b"\"enqueuedAt\":9223372036854775807",
    b"\"pushSeq\":18446744073709551615",
    b"\"id\":18446744073709551615",
    b"\"id\":9223372036854775808",
    b"\"evicted\":18446744073709551615",
    b"\"push\":{\"assigned\":18446744073709551615,\"acked\":18446744073709551615}",
    b"\"deliveredAt\":-9223372036854775808",
    b"\"tx\":0",
    b"0",
    b"1",
];

#[test]
fn ndjson_line() {
    fuzz(Plan {
        name: "ndjson_line",
        valid: ndjson_line_valid,
        dict: JSON_TOKENS,
        inputs: 20000,
        memory: Some((8, 64 << 10)),
        files: false,
    });
}

#[test]
fn ndjson_scan() {
    fuzz(Plan {
        name: "ndjson_scan",
        valid: ndjson_file_valid,
        dict: JSON_TOKENS,
        inputs: 3000,
        memory: None,
        files: false,
    });
}

#[test]
fn spool_files() {
    fuzz(Plan {
        name: "spool_files",
        valid: spool_files_valid,
        dict: SPOOL_TOKENS,
        inputs: 300,
        memory: None,
        files: true,
    });
}

#[test]
fn export_record() {
    fuzz(Plan {
        name: "export_record",
        valid: record_valid,
        dict: &[
            b"\"state\":\"delivered\"",
            b"\"state\":\"dead\"",
            b"\"dead_at\":\"2026-12-01T10:00:00Z\"",
            b"\"delivered_at\":\"1969-12-31T23:59:59Z\"",
            b"\"evidence\":{\"http_status\":70000}",
            b"\"evidence\":{\"exit_status\":-1}",
            b"\"push_seq\":0",
            b"\"key\":\"a\\u0000b\"",
            b"{\"spool\":{\"uuid\":\"u\",\"push\":{\"last_assigned\":1,\"acked\":2}}}\n",
            b"\"enqueued_at\":\"0000-01-01T00:00:00Z\"",
        ],
        inputs: 12000,
        memory: Some((16, 64 << 10)),
        files: false,
    });
}

#[test]
fn enqueue_ndjson() {
    fuzz(Plan {
        name: "enqueue_ndjson",
        valid: enqueue_valid,
        dict: &[
            b"\"payload_base64\":\"/w==\"",
            b"\"payload_base64\":\"%%\"",
            b"\"key\":null",
            b"\"group\":\"\"",
            b"\"coalesce_key\":\"\"",
            b"\"kee\":1",
        ],
        inputs: 12000,
        memory: Some((16, 256 << 10)),
        files: false,
    });
}

#[test]
fn push_request() {
    fuzz(Plan {
        name: "push_request",
        valid: push_valid,
        dict: &[
            b"\"client_id\":\"edge-1\"",
            b"\"acked\":18446744073709551615",
            b"\"entries\":[]",
            b"{\"seq\":1,\"skip\":true}",
            b"\"seq\":0",
            b"\"seq\":18446744073709551615",
            b"\"payload_base64\":\"***\"",
            b"\"digest\":\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"",
            b"\"enqueued_at\":null",
            b"\"rejected\":[{\"seq\":1,\"error\":\"x\"}]",
            b"\"last_seq\":18446744073709551616",
        ],
        inputs: 15000,
        memory: Some((16, 64 << 10)),
        files: false,
    });
}

#[test]
fn push_gzip() {
    // What inflating holds is bounded by the limit, not by the input.
    let limit = fuzz_common::GUNZIP_LIMIT as usize;
    fuzz(Plan {
        name: "push_gzip",
        valid: gzip_valid,
        dict: &[
            b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03",
            b"\x00\x00\xff\xff",
        ],
        inputs: 2000,
        memory: Some((64, 4 * limit + (512 << 10))),
        files: false,
    });
}

#[test]
fn serve_headers() {
    fuzz(Plan {
        name: "serve_headers",
        valid: headers_valid,
        dict: &[b"Bearer ", b"%", b"%00", b"%ff", b"\x7f", b"\t"],
        inputs: 12000,
        memory: Some((8, 16 << 10)),
        files: false,
    });
}

#[test]
fn token_file() {
    fuzz(Plan {
        name: "token_file",
        valid: tokens_valid,
        dict: &[
            b"name=",
            b"name=a name=b",
            b"*",
            b"?",
            b"#",
            b"\xe2\x80\xa8",
            b"\xc2\xa0",
        ],
        inputs: 9000,
        memory: Some((16, 64 << 10)),
        files: false,
    });
}

#[test]
fn units() {
    fuzz(Plan {
        name: "units",
        valid: units_valid,
        dict: &[
            b"ms", b"s", b"h", b"d", b"KiB", b"GiB", b"GB", b"e", b".", b",", b"T", b"Z", b"+",
        ],
        inputs: 10000,
        // Errors quote the value, escaped (up to six bytes a byte).
        memory: Some((32, 16 << 10)),
        files: false,
    });
}

/// Every target has seeds in `fuzz/corpus/<target>/` (the coverage-
/// guided fuzzers start from them; the tests above replay them). With
/// `FUZZ_WRITE_SEEDS=1` they are first written anew, made as the tests
/// make valid inputs: run so after a format changes.
#[test]
fn every_target_has_seeds() {
    if std::env::var_os("FUZZ_WRITE_SEEDS").is_some() {
        write_seed_corpus();
    }
    for (name, _) in fuzz_common::TARGETS {
        let seeds = corpus(name)
            .iter()
            .filter(|(p, _)| p.to_string_lossy().contains("/corpus/"))
            .count();
        assert!(seeds > 0, "no seeds in fuzz/corpus/{name}/");
    }
}

/// Makes a valid input.
type Maker = fn(&mut fastrand::Rng) -> Vec<u8>;

fn write_seed_corpus() {
    let makers: &[(&str, Maker, usize)] = &[
        ("ndjson_line", ndjson_line_valid, 24),
        ("ndjson_scan", ndjson_file_valid, 12),
        ("spool_files", spool_files_valid, 4),
        ("export_record", record_valid, 12),
        ("enqueue_ndjson", enqueue_valid, 8),
        ("push_request", push_valid, 16),
        ("push_gzip", gzip_valid, 6),
        ("serve_headers", headers_valid, 8),
        ("token_file", tokens_valid, 8),
        ("units", units_valid, 24),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    for (name, make, n) in makers {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..*n * 4 {
            let input = make(&mut rng);
            if input.len() > 256 << 10 || !seen.insert(input.clone()) {
                continue;
            }
            std::fs::write(dir.join(format!("seed-{}", fingerprint(&input))), &input).unwrap();
            if seen.len() == *n {
                break;
            }
        }
    }
}
