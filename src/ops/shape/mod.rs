//! `shape`: the age histogram of postfix's `qshape` (SPEC §11) — how much
//! is stuck, how old it is and why, at a glance.
//!
//! The items of one set (pending, held, dead or retained delivered) are
//! counted by a dimension — the cause class of their last error
//! ([`classify::error_class`]), their ordering group, their attempt count
//! or the prefix of their key — and by age since enqueue in buckets whose
//! edges double: `first`, `2×first`, … `2^(n-1)×first`, then one bucket
//! for everything older. Bucket `i` holds the items younger than its edge
//! and not younger than the previous one; an item without an enqueue time
//! (written by the reference NDJSON format) counts as age 0, and so does
//! one enqueued after `now` (a clock set back).
//!
//! The counting is [`Queue::shape_cells`]: one aggregate per backend where
//! the backend can answer it (SQLite and PostgreSQL group in SQL by the
//! raw value and the age bucket; distinct error texts are few), a walk
//! over the set's pages otherwise ([`scan_cells`]). This module merges the
//! raw values into rows (error texts into their classes), orders them
//! busiest first under a `TOTAL` row and folds the rows past `top` into
//! one `(other)` row.

pub mod classify;

pub use classify::error_class;

use crate::error::{Error, Result};
use crate::item::Item;
use crate::queue::{Queue, PAGE_SIZE};
use crate::time::Timestamp;
use serde::Serialize;
use std::collections::HashMap;
use std::time::Duration;

/// What the rows are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ShapeBy {
    /// The cause class of `last_error` ([`error_class`]).
    #[default]
    Error,
    /// The ordering group (`(no group)` for items without one).
    Group,
    /// The attempt count.
    Attempts,
    /// The key up to its first `:` or `/` (the whole key when it has
    /// neither; `(no key)` for an empty key).
    KeyPrefix,
}

impl ShapeBy {
    /// The name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            ShapeBy::Error => "error",
            ShapeBy::Group => "group",
            ShapeBy::Attempts => "attempts",
            ShapeBy::KeyPrefix => "key-prefix",
        }
    }
}

/// Which items are counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ShapeState {
    /// Pending items that are not held (as `list --state pending`).
    #[default]
    Pending,
    /// Held items.
    Held,
    /// Dead letters (aged by their enqueue time too, not their death).
    Dead,
    /// Delivered items kept by the retention window.
    Delivered,
}

impl ShapeState {
    /// The name on the command line and in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            ShapeState::Pending => "pending",
            ShapeState::Held => "held",
            ShapeState::Dead => "dead",
            ShapeState::Delivered => "delivered",
        }
    }
}

/// The row of every item.
pub const TOTAL: &str = "TOTAL";
/// The row of the values past `top`.
pub const OTHER: &str = "(other)";
/// The group row of items without a group.
pub const NO_GROUP: &str = "(no group)";
/// The key-prefix row of items without a key.
pub const NO_KEY: &str = "(no key)";
/// The error row, in the delivered set, of items delivered at their
/// first attempt.
pub const NO_FAILED_ATTEMPT: &str = "no failed attempt";
/// The most buckets [`ShapeOptions::edges`] makes.
pub const MAX_BUCKETS: usize = 32;

/// Options for [`shape`]; the defaults are the CLI's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeOptions {
    /// The dimension of the rows.
    pub by: ShapeBy,
    /// The set counted.
    pub state: ShapeState,
    /// The first bucket edge (default 5 minutes), whole seconds.
    pub first: Duration,
    /// How many age buckets (default 10): `buckets - 1` edges, then one
    /// bucket past the last edge (SPEC §11: `5m … 1280m 1280m+`).
    pub buckets: usize,
    /// At most this many value rows (default 20); the rest are summed in
    /// an `(other)` row.
    pub top: usize,
    /// Let writers in while counting (default false): a backend whose
    /// readers block writers (NDJSON) counts in chunks with gaps between
    /// them, a little slower. For views that recompute the shape over and
    /// over while the spool is in use (`spool top`).
    pub yield_to_writers: bool,
}

impl Default for ShapeOptions {
    fn default() -> ShapeOptions {
        ShapeOptions {
            by: ShapeBy::Error,
            state: ShapeState::Pending,
            first: Duration::from_secs(300),
            buckets: 10,
            top: 20,
            yield_to_writers: false,
        }
    }
}

impl ShapeOptions {
    /// The bucket edges: `first`, each next one double the previous,
    /// `buckets - 1` of them (the last bucket has no upper edge). [`Error::InvalidInput`] when `first` is not a
    /// whole number of seconds of at least 1s, `buckets` is not within
    /// 1..=[`MAX_BUCKETS`], `top` is 0, or the last edge passes 100 years.
    pub fn edges(&self) -> Result<Vec<Duration>> {
        if self.first.is_zero() || self.first.subsec_nanos() != 0 {
            return Err(Error::InvalidInput(format!(
                "the first bucket edge must be a whole number of seconds, at least 1s (not {})",
                crate::units::format_duration(self.first)
            )));
        }
        if self.buckets == 0 || self.buckets > MAX_BUCKETS {
            return Err(Error::InvalidInput(format!(
                "the number of buckets must be 1 to {MAX_BUCKETS} (not {})",
                self.buckets
            )));
        }
        if self.top == 0 {
            return Err(Error::InvalidInput(
                "the number of rows shown (top) must be at least 1".into(),
            ));
        }
        const CENTURY: u64 = 100 * 365 * 86_400;
        let mut edges = Vec::with_capacity(self.buckets - 1);
        let mut edge = self.first.as_secs();
        for _ in 1..self.buckets {
            if edge > CENTURY {
                return Err(Error::InvalidInput(format!(
                    "the last bucket edge ({} × 2^{}) passes 100 years: give fewer buckets or a \
                     shorter first edge",
                    crate::units::format_duration(self.first),
                    self.buckets - 2
                )));
            }
            edges.push(Duration::from_secs(edge));
            edge = edge.saturating_mul(2);
        }
        Ok(edges)
    }
}

/// What a backend counts for [`shape`]: the items of `state`, by the raw
/// value of `by` and the age bucket at `now`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeQuery {
    /// The dimension.
    pub by: ShapeBy,
    /// The set.
    pub state: ShapeState,
    /// Ages are measured to this time.
    pub now: Timestamp,
    /// The bucket edges in milliseconds, ascending.
    pub edges_ms: Vec<i64>,
    /// See [`ShapeOptions::yield_to_writers`].
    pub yield_to_writers: bool,
}

impl ShapeQuery {
    /// The bucket of an item enqueued at `enqueued_at`: the first edge its
    /// age is below, or `edges_ms.len()` when it is at least the last.
    /// No enqueue time, or one after `now`, is age 0.
    pub fn bucket(&self, enqueued_at: Option<Timestamp>) -> usize {
        let age = enqueued_at.map_or(0, |t| {
            self.now.as_millis().saturating_sub(t.as_millis()).max(0)
        });
        self.edges_ms.partition_point(|e| *e <= age)
    }

    /// The cell an item falls into (count 1).
    pub fn cell(&self, item: &Item) -> ShapeCell {
        let value = match self.by {
            ShapeBy::Error => item.last_error.clone(),
            ShapeBy::Group => item.group.clone(),
            ShapeBy::Attempts => Some(item.attempts.to_string()),
            ShapeBy::KeyPrefix => Some(key_prefix(&item.key).to_string()),
        };
        ShapeCell {
            value,
            attempted: item.attempts > 0,
            bucket: self.bucket(item.enqueued_at),
            count: 1,
        }
    }
}

/// The key up to its first `:` or `/` (the whole key when it has
/// neither).
pub fn key_prefix(key: &str) -> &str {
    key.find([':', '/']).map_or(key, |i| &key[..i])
}

/// A count of items sharing a raw value and an age bucket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ShapeCell {
    /// The raw value: the `last_error` text, the group, the attempt count
    /// in decimal, or the key prefix; `None` for no error or no group.
    pub value: Option<String>,
    /// Whether the items have failed attempts (`attempts > 0`); only
    /// [`ShapeBy::Error`] uses it (to tell "never attempted" apart).
    /// Backends may split a value's count over both, and for the other
    /// dimensions may leave it `false`.
    pub attempted: bool,
    /// The age bucket, `0..=edges_ms.len()`.
    pub bucket: usize,
    /// How many items.
    pub count: u64,
}

/// [`Queue::shape_cells`] by walking the set page by page: what every
/// backend can do. Cells come out merged by value, `attempted` and bucket.
pub fn scan_cells<Q: Queue + ?Sized>(queue: &Q, q: &ShapeQuery) -> Result<Vec<ShapeCell>> {
    let mut cells: HashMap<(Option<String>, bool, usize), u64> = HashMap::new();
    let mut add = |item: &Item| {
        let c = q.cell(item);
        *cells.entry((c.value, c.attempted, c.bucket)).or_default() += 1;
    };
    let mut after = 0;
    loop {
        let (n, last) = match q.state {
            ShapeState::Pending | ShapeState::Held => {
                let page = queue.page(after, PAGE_SIZE)?;
                let want_held = q.state == ShapeState::Held;
                for item in page.iter().filter(|i| i.held == want_held) {
                    add(item);
                }
                (page.len(), page.last().map(|i| i.id))
            }
            ShapeState::Dead => {
                let page = queue.dead_page(after, PAGE_SIZE)?;
                for d in &page {
                    add(&d.item);
                }
                (page.len(), page.last().map(|d| d.item.id))
            }
            ShapeState::Delivered => {
                let page = queue.delivered_page(after, PAGE_SIZE)?;
                for d in &page {
                    add(&d.item);
                }
                (page.len(), page.last().map(|d| d.item.id))
            }
        };
        match last {
            Some(id) if n == PAGE_SIZE => after = id,
            _ => break,
        }
    }
    Ok(cells
        .into_iter()
        .map(|((value, attempted, bucket), count)| ShapeCell {
            value,
            attempted,
            bucket,
            count,
        })
        .collect())
}

/// One row of the histogram.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShapeRow {
    /// `TOTAL`, a value of the dimension, or `(other)`.
    pub value: String,
    /// Items in the row (`T`).
    pub total: u64,
    /// Items per age bucket: one per edge, then the bucket past the last.
    pub counts: Vec<u64>,
}

/// What [`shape`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The dimension.
    pub by: ShapeBy,
    /// The set.
    pub state: ShapeState,
    /// The bucket edges.
    pub edges: Vec<Duration>,
    /// `TOTAL` first, then the values busiest first (ties by value), then
    /// `(other)` when values were left out.
    pub rows: Vec<ShapeRow>,
}

/// The `--json` object of `shape`.
#[derive(Serialize)]
pub struct ShapeJson<'a> {
    /// `error`, `group`, `attempts` or `key-prefix`.
    pub by: &'static str,
    /// `pending`, `held`, `dead` or `delivered`.
    pub state: &'static str,
    /// The bucket edges in seconds.
    pub edges_seconds: Vec<u64>,
    /// The rows, `TOTAL` first.
    pub rows: &'a [ShapeRow],
}

impl Shape {
    /// The stable JSON object: `{"by", "state", "edges_seconds", "rows":
    /// [{"value", "total", "counts"}]}`.
    pub fn json(&self) -> ShapeJson<'_> {
        ShapeJson {
            by: self.by.name(),
            state: self.state.name(),
            edges_seconds: self.edges.iter().map(|e| e.as_secs()).collect(),
            rows: &self.rows,
        }
    }

    /// The bucket columns' names: each edge in minutes when all are whole
    /// minutes (`5m … 1280m`), else in seconds, then the last with `+`.
    pub fn bucket_labels(&self) -> Vec<String> {
        let minutes = self.edges.iter().all(|e| e.as_secs() % 60 == 0);
        let name = |e: &Duration| {
            if minutes {
                format!("{}m", e.as_secs() / 60)
            } else {
                format!("{}s", e.as_secs())
            }
        };
        let mut labels: Vec<String> = self.edges.iter().map(name).collect();
        let last = self.edges.last().copied().unwrap_or_default();
        labels.push(format!("{}+", name(&last)));
        labels
    }
}

/// The histogram of `queue` at `now`. [`Error::InvalidInput`] for options
/// [`ShapeOptions::edges`] refuses; nothing is changed.
pub fn shape(queue: &dyn Queue, opts: &ShapeOptions, now: Timestamp) -> Result<Shape> {
    let edges = opts.edges()?;
    let q = ShapeQuery {
        by: opts.by,
        state: opts.state,
        now,
        edges_ms: edges
            .iter()
            .map(|e| i64::try_from(e.as_millis()).unwrap_or(i64::MAX))
            .collect(),
        yield_to_writers: opts.yield_to_writers,
    };
    let cells = queue.shape_cells(&q)?;
    Ok(rows_of(opts, edges, cells))
}

/// The row label of a cell.
fn label(opts: &ShapeOptions, cell: &ShapeCell) -> String {
    match opts.by {
        ShapeBy::Error => {
            let class = error_class(cell.value.as_deref(), u32::from(cell.attempted));
            if opts.state == ShapeState::Delivered && class == classify::NEVER_ATTEMPTED {
                NO_FAILED_ATTEMPT.into()
            } else {
                class
            }
        }
        ShapeBy::Group => cell.value.clone().unwrap_or_else(|| NO_GROUP.into()),
        ShapeBy::Attempts => cell.value.clone().unwrap_or_else(|| "0".into()),
        ShapeBy::KeyPrefix => match cell.value.as_deref() {
            None | Some("") => NO_KEY.into(),
            Some(v) => v.into(),
        },
    }
}

/// Merge cells into rows: `TOTAL`, the `top` busiest values, `(other)`.
fn rows_of(opts: &ShapeOptions, edges: Vec<Duration>, cells: Vec<ShapeCell>) -> Shape {
    let width = edges.len() + 1;
    let mut by_value: HashMap<String, Vec<u64>> = HashMap::new();
    let mut total = vec![0u64; width];
    for cell in &cells {
        let b = cell.bucket.min(width - 1);
        by_value
            .entry(label(opts, cell))
            .or_insert_with(|| vec![0; width])[b] += cell.count;
        total[b] += cell.count;
    }
    let row = |value: String, counts: Vec<u64>| ShapeRow {
        value,
        total: counts.iter().sum(),
        counts,
    };
    let mut values: Vec<ShapeRow> = by_value.into_iter().map(|(v, c)| row(v, c)).collect();
    values.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.value.cmp(&b.value)));
    let mut rows = vec![row(TOTAL.into(), total)];
    if values.len() > opts.top {
        let rest = values.split_off(opts.top);
        let mut other = vec![0u64; width];
        for r in rest {
            for (o, c) in other.iter_mut().zip(r.counts) {
                *o += c;
            }
        }
        rows.extend(values);
        rows.push(row(OTHER.into(), other));
    } else {
        rows.extend(values);
    }
    Shape {
        by: opts.by,
        state: opts.state,
        edges,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(edges_s: &[i64]) -> ShapeQuery {
        ShapeQuery {
            by: ShapeBy::Error,
            state: ShapeState::Pending,
            now: Timestamp::from_secs(10_000),
            edges_ms: edges_s.iter().map(|s| s * 1000).collect(),
            yield_to_writers: false,
        }
    }

    #[test]
    fn buckets_hold_ages_below_their_edge_and_not_below_the_previous() {
        let q = q(&[300, 600, 1200]);
        let at = |age: i64| Some(Timestamp::from_secs(10_000 - age));
        assert_eq!(q.bucket(at(0)), 0);
        assert_eq!(q.bucket(at(299)), 0);
        assert_eq!(q.bucket(at(300)), 1);
        assert_eq!(q.bucket(at(599)), 1);
        assert_eq!(q.bucket(at(600)), 2);
        assert_eq!(q.bucket(at(1199)), 2);
        assert_eq!(q.bucket(at(1200)), 3);
        assert_eq!(q.bucket(at(1_000_000 - 10_000)), 3);
        // Unknown, or in the future: age 0.
        assert_eq!(q.bucket(None), 0);
        assert_eq!(q.bucket(at(-50)), 0);
    }

    #[test]
    fn edges_double_and_bad_options_are_refused() {
        let o = ShapeOptions::default();
        let e: Vec<u64> = o
            .edges()
            .unwrap()
            .iter()
            .map(|d| d.as_secs() / 60)
            .collect();
        assert_eq!(e, [5, 10, 20, 40, 80, 160, 320, 640, 1280]);
        for bad in [
            ShapeOptions {
                buckets: 0,
                ..o.clone()
            },
            ShapeOptions {
                buckets: MAX_BUCKETS + 1,
                ..o.clone()
            },
            ShapeOptions {
                first: Duration::ZERO,
                ..o.clone()
            },
            ShapeOptions {
                first: Duration::from_millis(1500),
                ..o.clone()
            },
            ShapeOptions {
                top: 0,
                ..o.clone()
            },
            ShapeOptions {
                first: Duration::from_secs(86_400 * 365),
                buckets: 32,
                ..o.clone()
            },
        ] {
            assert!(
                matches!(bad.edges(), Err(Error::InvalidInput(_))),
                "{bad:?}"
            );
        }
        assert!(ShapeOptions {
            buckets: MAX_BUCKETS,
            first: Duration::from_secs(1),
            ..o
        }
        .edges()
        .is_ok());
    }

    #[test]
    fn labels_are_minutes_when_whole() {
        let s = Shape {
            by: ShapeBy::Error,
            state: ShapeState::Pending,
            edges: ShapeOptions::default().edges().unwrap(),
            rows: vec![],
        };
        assert_eq!(
            s.bucket_labels().join(" "),
            "5m 10m 20m 40m 80m 160m 320m 640m 1280m 1280m+"
        );
        let s = Shape {
            edges: vec![Duration::from_secs(30), Duration::from_secs(60)],
            ..s
        };
        assert_eq!(s.bucket_labels().join(" "), "30s 60s 60s+");
        let s = Shape { edges: vec![], ..s };
        assert_eq!(s.bucket_labels(), ["0m+"]);
    }

    #[test]
    fn key_prefixes_end_at_the_first_colon_or_slash() {
        assert_eq!(key_prefix("order:42"), "order");
        assert_eq!(key_prefix("tenant/7:x"), "tenant");
        assert_eq!(key_prefix("a:b/c"), "a");
        assert_eq!(key_prefix("plain"), "plain");
        assert_eq!(key_prefix(":x"), "");
        assert_eq!(key_prefix(""), "");
    }

    #[test]
    fn rows_merge_classes_order_busiest_first_and_fold_the_rest() {
        let cell = |v: Option<&str>, attempted, bucket, count| ShapeCell {
            value: v.map(String::from),
            attempted,
            bucket,
            count,
        };
        let opts = ShapeOptions {
            top: 2,
            buckets: 3,
            first: Duration::from_secs(60),
            ..ShapeOptions::default()
        };
        let cells = vec![
            cell(Some("HTTP 503 Service Unavailable: a"), true, 0, 2),
            cell(Some("HTTP 503 Service Unavailable: b"), true, 2, 1),
            cell(None, false, 1, 3),
            cell(Some("command exited with 1"), true, 0, 1),
            cell(Some("command exited with 2"), true, 0, 1),
        ];
        let s = rows_of(&opts, opts.edges().unwrap(), cells);
        let rows: Vec<(&str, u64, Vec<u64>)> = s
            .rows
            .iter()
            .map(|r| (r.value.as_str(), r.total, r.counts.clone()))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("TOTAL", 8, vec![4, 3, 1]),
                // Ties by value: "HTTP 503" < "never attempted".
                ("HTTP 503", 3, vec![2, 0, 1]),
                ("never attempted", 3, vec![0, 3, 0]),
                ("(other)", 2, vec![2, 0, 0]),
            ]
        );
        let j = serde_json::to_value(s.json()).unwrap();
        assert_eq!(j["by"], "error");
        assert_eq!(j["state"], "pending");
        assert_eq!(j["edges_seconds"], serde_json::json!([60, 120]));
        assert_eq!(
            j["rows"][0],
            serde_json::json!({"value": "TOTAL", "total": 8, "counts": [4, 3, 1]})
        );
    }
}
