//! `stats`: what an operator or a monitoring system wants to know about a
//! spool, cheaply.
//!
//! Counts come from [`Queue::stats`](crate::Queue::stats), which backends answer without
//! reading every payload; sizes come from [`Spool::files`] (the main
//! file, the SQLite WAL and shared-memory files, NDJSON companions).
//! [`StatsReport::json`] is the stable `--json` object and
//! [`StatsReport::prometheus`] the Prometheus text exposition, whose
//! gauges `watch --metrics-file` shares.

use crate::backend::Spool;
use crate::error::Result;
use crate::item::ItemId;
use crate::queue::BackendKind;
use crate::time::Timestamp;
use crate::watch::metrics::{render_gauges, SpoolGauges};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Everything `stats` reports.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsReport {
    /// The spool's path (empty for memory).
    pub path: PathBuf,
    /// The backend.
    pub backend: BackendKind,
    /// Pending items, held included.
    pub depth: u64,
    /// Held items.
    pub held: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Pending items waiting for a backoff to expire.
    pub waiting: u64,
    /// Pending items a replay would attempt now: neither held nor
    /// waiting (an item both held and waiting counts once as not due).
    pub due: u64,
    /// The oldest pending item's id.
    pub oldest_id: Option<ItemId>,
    /// The oldest pending item's enqueue time, when known.
    pub oldest_enqueued_at: Option<Timestamp>,
    /// Its age at `now`.
    pub oldest_age: Option<Duration>,
    /// Pending items per attempt count.
    pub attempts_histogram: BTreeMap<u32, u64>,
    /// The stored depth bound.
    pub max_depth: Option<u64>,
    /// What an enqueue does at the bound.
    pub on_full: crate::item::OnFull,
    /// Items ever evicted by `drop-oldest`.
    pub evicted_total: u64,
    /// Delivered items kept by the retention window (SPEC §9).
    pub delivered_retained: u64,
    /// The retention window, when set.
    pub retain: Option<Duration>,
    /// The highest id ever issued.
    pub high_water: u64,
    /// Every file of the spool with its size in bytes.
    pub files: Vec<(PathBuf, u64)>,
    /// The sum of `files`.
    pub total_bytes: u64,
    /// For NDJSON spools, the share of the main file's records that
    /// compaction would remove (`None` for other backends).
    pub ndjson_garbage_ratio: Option<f64>,
    /// The file system holding the spool (`ext4`, `nfs4`, `fuse.sshfs`),
    /// and whether it is a network share; `None` for memory.
    pub fs_type: Option<crate::fs_type::FsType>,
    /// The time the report was made for.
    pub now: Timestamp,
}

impl StatsReport {
    /// Items replay would attempt now: pending, not held, not waiting.
    /// (An item both held and waiting counts once, as held.)
    pub fn due(&self) -> u64 {
        self.due
    }
}

/// Gather the report for `spool` at `now`.
pub fn stats(spool: &Spool, now: Timestamp) -> Result<StatsReport> {
    let s = spool.stats(now)?;
    let files = spool.files();
    let total_bytes = match spool {
        // The tables (and their indexes) of the spool's schema, which all
        // its spools share.
        Spool::Postgres(q) => q.extra_stats()?.1,
        _ => files.iter().map(|(_, n)| n).sum(),
    };
    let ndjson_garbage_ratio = match spool {
        Spool::File(q) => Some(q.file_stats()?.garbage_ratio),
        _ => None,
    };
    Ok(StatsReport {
        path: match spool {
            Spool::Postgres(_) => spool.location(),
            _ => spool.path().map(|p| p.to_path_buf()).unwrap_or_default(),
        },
        backend: spool.kind(),
        depth: s.depth,
        held: s.held,
        dead_letters: s.dead_letters,
        waiting: s.waiting,
        due: spool.due_count(now, false, None)?,
        oldest_id: s.oldest_id,
        oldest_enqueued_at: s.oldest_enqueued_at,
        oldest_age: s.oldest_enqueued_at.map(|t| now.since(t)),
        attempts_histogram: s.attempts_histogram,
        max_depth: s.max_depth,
        on_full: s.on_full,
        evicted_total: s.evicted_total,
        delivered_retained: s.delivered_retained,
        retain: s.retain,
        high_water: s.high_water,
        files,
        total_bytes,
        ndjson_garbage_ratio,
        fs_type: spool.path().and_then(|p| crate::fs_type::of_path(p).ok()),
        now,
    })
}

/// The `--json` object of `stats`. Field names are stable; documented in
/// the README.
#[derive(Serialize)]
pub struct StatsJson {
    /// The spool path.
    pub spool: String,
    /// `sqlite`, `file` or `memory`.
    pub backend: &'static str,
    /// Pending items, held included.
    pub depth: u64,
    /// Held items.
    pub held: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Pending items waiting for a retry time.
    pub waiting: u64,
    /// Pending items replay would attempt now.
    pub due: u64,
    /// The oldest pending item's id, or null.
    pub oldest_id: Option<ItemId>,
    /// Its enqueue time (RFC 3339), or null.
    pub oldest_enqueued_at: Option<String>,
    /// Its age in whole seconds, or null.
    pub oldest_age_seconds: Option<u64>,
    /// `[{"attempts": N, "items": M}, ...]`, by attempts.
    pub attempts_histogram: Vec<HistogramBucket>,
    /// The stored depth bound, or null.
    pub max_depth: Option<u64>,
    /// `reject` or `drop-oldest`.
    pub on_full: &'static str,
    /// Items ever evicted by `drop-oldest`.
    pub evicted_total: u64,
    /// Delivered items kept by the retention window.
    pub delivered_retained: u64,
    /// The retention window (`off`, `7d`).
    pub retain: String,
    /// The highest id ever issued.
    pub high_water: u64,
    /// `[{"path": ..., "bytes": N}, ...]`.
    pub files: Vec<FileSize>,
    /// Sum of the file sizes.
    pub total_bytes: u64,
    /// Share of an NDJSON spool's records that compaction would drop
    /// (0 to 1); null for other backends.
    pub ndjson_garbage_ratio: Option<f64>,
    /// The file system type (`ext4`, `xfs`, `nfs4`, `fuse.sshfs`…), or
    /// null (memory, or it could not be told).
    pub fs_type: Option<String>,
    /// True when that is a network file system (see `fs_type` in the
    /// README); null when unknown (FUSE, or not told).
    pub network_fs: Option<bool>,
}

/// One bucket of the attempts histogram.
#[derive(Serialize)]
pub struct HistogramBucket {
    /// Attempt count.
    pub attempts: u32,
    /// Pending items with that count.
    pub items: u64,
}

/// One file of the spool.
#[derive(Serialize)]
pub struct FileSize {
    /// The file's path.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
}

impl StatsReport {
    /// The stable JSON object.
    pub fn json(&self) -> StatsJson {
        StatsJson {
            spool: self.path.to_string_lossy().into_owned(),
            backend: self.backend.name(),
            depth: self.depth,
            held: self.held,
            dead_letters: self.dead_letters,
            waiting: self.waiting,
            due: self.due(),
            oldest_id: self.oldest_id,
            oldest_enqueued_at: self.oldest_enqueued_at.map(|t| t.to_rfc3339()),
            oldest_age_seconds: self.oldest_age.map(|d| d.as_secs()),
            attempts_histogram: self
                .attempts_histogram
                .iter()
                .map(|(&attempts, &items)| HistogramBucket { attempts, items })
                .collect(),
            max_depth: self.max_depth,
            on_full: self.on_full.name(),
            evicted_total: self.evicted_total,
            delivered_retained: self.delivered_retained,
            retain: super::config::retain_name(self.retain),
            high_water: self.high_water,
            files: self
                .files
                .iter()
                .map(|(p, n)| FileSize {
                    path: p.to_string_lossy().into_owned(),
                    bytes: *n,
                })
                .collect(),
            total_bytes: self.total_bytes,
            ndjson_garbage_ratio: self.ndjson_garbage_ratio,
            fs_type: self.fs_type.as_ref().map(|t| t.name.clone()),
            network_fs: self.fs_type.as_ref().and_then(|t| match t.locality {
                crate::fs_type::Locality::Local => Some(false),
                crate::fs_type::Locality::Network => Some(true),
                crate::fs_type::Locality::Unknown => None,
            }),
        }
    }

    /// The state gauges in the Prometheus text format, each with
    /// `# HELP` and `# TYPE` and a `spool` label holding the path: the
    /// same text `watch --metrics-file` starts with
    /// ([`crate::watch::metrics::render_gauges`]). The age of the oldest
    /// item is 0 for an empty spool or when its enqueue time is unknown.
    pub fn prometheus(&self) -> String {
        render_gauges(
            &self.path,
            &SpoolGauges {
                depth: self.depth,
                held: self.held,
                dead_letters: self.dead_letters,
                bytes: self.total_bytes,
                oldest_item_age: self.oldest_age.unwrap_or_default(),
                evicted_total: self.evicted_total,
                delivered_retained: self.delivered_retained,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::OpenOptions;
    use crate::time::{Clock, ManualClock};
    use std::sync::Arc;

    #[test]
    fn counts_and_formats() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let s = Spool::memory(&OpenOptions {
            max_depth: Some(9),
            clock: Arc::new(clock.clone()),
            ..OpenOptions::default()
        });
        s.enqueue(b"a", "").unwrap();
        s.enqueue(b"b", "").unwrap();
        s.set_held(&[2], true).unwrap();
        s.set_attempts(2, 3).unwrap();
        clock.advance(Duration::from_millis(90_500));
        let r = stats(&s, clock.now()).unwrap();
        assert_eq!((r.depth, r.held, r.due(), r.max_depth), (2, 1, 1, Some(9)));
        // An item both held and waiting for a retry is not due once.
        s.record_attempt(
            2,
            &crate::item::AttemptUpdate {
                attempts: 3,
                next_retry_at: Some(clock.now().saturating_add(Duration::from_secs(60))),
                last_error: Some("x".into()),
            },
        )
        .unwrap();
        let r = stats(&s, clock.now()).unwrap();
        assert_eq!((r.held, r.waiting, r.due()), (1, 1, 1));
        assert_eq!(r.oldest_age, Some(Duration::from_millis(90_500)));
        let v = serde_json::to_value(r.json()).unwrap();
        assert_eq!(
            v["attempts_histogram"],
            serde_json::json!([{"attempts":0,"items":1},{"attempts":3,"items":1}])
        );
        assert_eq!(v["ndjson_garbage_ratio"], serde_json::Value::Null);
        assert_eq!(v["oldest_age_seconds"], 90);
        let p = r.prometheus();
        assert!(
            p.contains("# TYPE spool_depth gauge\nspool_depth{spool=\"\"} 2\n"),
            "{p}"
        );
        assert!(
            p.contains("spool_oldest_item_age_seconds{spool=\"\"} 90.5\n"),
            "{p}"
        );
    }
}
