//! The counts behind `spool shape` from one SQL scan, shared by the
//! SQLite backend (its tables) and the NDJSON backend (its index, which
//! is SQLite too).
//!
//! SQLite's `GROUP BY` sorts its input when no index covers the grouping:
//! on a million items, grouping by error text and age bucket in SQL took
//! 600–900 ms, while one scan reading the three columns takes about
//! 110 ms. So the statement only selects the raw value, the attempt count
//! and the enqueue time, and [`count_cells`] counts them into cells in a
//! hash map keyed by the value's bytes (no allocation per row: distinct
//! values are few, except for key prefixes of keys without a separator).
//! Error texts are kept verbatim; the library merges them into their
//! classes.

use crate::ops::shape::{ShapeBy, ShapeCell, ShapeQuery};
use rusqlite::types::ValueRef;
use std::collections::HashMap;

/// The key up to its first `:` or `/` (the whole key when it has
/// neither), as [`crate::ops::shape::key_prefix`] cuts it.
fn key_prefix(key: &[u8]) -> &[u8] {
    key.iter()
        .position(|b| *b == b':' || *b == b'/')
        .map_or(key, |i| &key[..i])
}

/// How far a scan in id order got: for a walk in chunks.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Seen {
    /// Rows counted.
    pub rows: usize,
    /// The id of the last one (a fourth column of the statement).
    pub last_id: i64,
}

/// Run `stmt`, whose rows are (the raw value of `q.by`, the attempt count,
/// the enqueue time in Unix seconds or NULL), and count them into the
/// cells of `q`. An enqueue time equal to `unknown` counts as unknown
/// (age 0). With `seen`, the rows carry their id as a fourth column, and
/// `seen` says how many rows there were and the last id.
pub(crate) fn count_cells(
    stmt: &mut rusqlite::Statement<'_>,
    q: &ShapeQuery,
    unknown: Option<i64>,
    mut seen: Option<&mut Seen>,
) -> rusqlite::Result<Vec<ShapeCell>> {
    let mut rows = stmt.query([])?;
    let now = q.now.as_millis();
    let width = q.edges_ms.len() + 1;
    // Key: a tag byte (0: no value, 1: a value; +2 when attempted),
    // then the value's bytes. Counts per bucket.
    let mut cells: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    let mut key: Vec<u8> = Vec::with_capacity(128);
    while let Some(r) = rows.next()? {
        if let Some(seen) = seen.as_deref_mut() {
            seen.rows += 1;
            seen.last_id = r.get(3)?;
        }
        let attempts: i64 = r.get(1)?;
        let bucket = match r.get::<_, Option<i64>>(2)? {
            None => 0,
            Some(secs) if Some(secs) == unknown => 0,
            Some(secs) => {
                let age = now.saturating_sub(secs.saturating_mul(1000)).max(0);
                q.edges_ms.partition_point(|e| *e <= age)
            }
        };
        key.clear();
        let attempted = if attempts > 0 { 2 } else { 0 };
        if q.by == ShapeBy::Attempts {
            key.push(1 + attempted);
            key.extend_from_slice(attempts.to_string().as_bytes());
        } else {
            match r.get_ref(0)? {
                ValueRef::Null => key.push(attempted),
                ValueRef::Text(b) | ValueRef::Blob(b) => {
                    key.push(1 + attempted);
                    key.extend_from_slice(if q.by == ShapeBy::KeyPrefix {
                        key_prefix(b)
                    } else {
                        b
                    });
                }
                ValueRef::Integer(i) => {
                    key.push(1 + attempted);
                    key.extend_from_slice(i.to_string().as_bytes());
                }
                ValueRef::Real(f) => {
                    key.push(1 + attempted);
                    key.extend_from_slice(f.to_string().as_bytes());
                }
            }
        }
        match cells.get_mut(key.as_slice()) {
            Some(counts) => counts[bucket] += 1,
            None => {
                let mut counts = vec![0; width];
                counts[bucket] = 1;
                cells.insert(key.clone(), counts);
            }
        }
    }
    let mut out = Vec::new();
    for (key, counts) in cells {
        let (tag, bytes) = (key[0], &key[1..]);
        let value = (tag & 1 == 1).then(|| String::from_utf8_lossy(bytes).into_owned());
        for (bucket, count) in counts.into_iter().enumerate().filter(|(_, n)| *n > 0) {
            out.push(ShapeCell {
                value: value.clone(),
                attempted: tag & 2 == 2,
                bucket,
                count,
            });
        }
    }
    Ok(out)
}
