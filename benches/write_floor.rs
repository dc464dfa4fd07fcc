//! The receiver's write floor on this disk: a plain Rust loop that
//! inserts items into a SQLite spool's table (a spool created by the
//! library, so the same `morph_offline_queue` with its indexes and
//! triggers; WAL, `synchronous=FULL`) in transactions of a given size,
//! committing each durably. No HTTP, no JSON, no digests, no push
//! bookkeeping: what a receiver could reach at best per transaction size.
//! `benches/push.sh` compares `replay --push` with it.
//!
//! `cargo bench --bench write_floor -- ITEMS BATCH DIR` prints one line:
//! `floor: ITEMS items in S s, R items/s`.

use rusqlite::{params, Connection};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let (items, batch, dir) = match args.as_slice() {
        [n, b, d, ..] => (
            n.parse::<usize>().expect("ITEMS is a number"),
            b.parse::<usize>().expect("BATCH is a number").max(1),
            std::path::PathBuf::from(d),
        ),
        _ => {
            eprintln!("usage: write_floor ITEMS BATCH DIR");
            std::process::exit(64);
        }
    };
    let path = dir.join("write-floor.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    // The spool's schema, as `spool init` creates it.
    drop(
        spool::Spool::open(&path, &spool::OpenOptions::new(spool::OpenMode::Create))
            .expect("create the spool"),
    );
    let mut conn = Connection::open(&path).expect("open");
    conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
        .expect("WAL");
    conn.pragma_update(None, "synchronous", "FULL")
        .expect("synchronous");
    let start = Instant::now();
    let mut done = 0;
    while done < items {
        let tx = conn.transaction().expect("begin");
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO morph_offline_queue (payload, idempotency_key, enqueued_at) \
                     VALUES (?1, '', ?2)",
                )
                .expect("prepare");
            // The spool's triggers keep its counts; ids are the table's.
            for i in done..(done + batch).min(items) {
                let payload = format!(
                    r#"{{"event":"progress","user":{i},"pad":"0123456789abcdef0123456789abcdef0123456789"}}"#
                );
                insert.execute(params![payload, i as i64]).expect("insert");
            }
        }
        tx.commit().expect("commit");
        done = (done + batch).min(items);
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "floor: {items} items in {secs:.3} s, {:.0} items/s",
        items as f64 / secs
    );
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
