//! What `spool serve` counts, for `GET /metrics` and the final report.
//!
//! The text is the Prometheus exposition format: the receiving spool's
//! state gauges of §5 (the same text `stats --prometheus` prints, from
//! [`crate::ops::stats`]), then the server's own series, each with the
//! `spool` label:
//!
//! | series | type | what |
//! |---|---|---|
//! | `spool_serve_requests_total{endpoint,code}` | counter | answered requests; `endpoint` is `push`, `items`, `clients`, `healthz`, `metrics` or `other` |
//! | `spool_serve_request_duration_seconds{endpoint}` | histogram | time from the request head to the answer |
//! | `spool_serve_entries_total{outcome}` | counter | push entries: `applied`, `duplicate`, `rejected`, `skipped` |
//! | `spool_serve_items_total{outcome}` | counter | `/v1/items` payloads: `stored`, `deduplicated` |
//! | `spool_serve_commits_total` | counter | write transactions committed (one per group) |
//! | `spool_serve_committed_requests_total` | counter | requests answered from those commits |
//! | `spool_serve_clients` | gauge | push clients the spool knows |
//! | `spool_serve_snapshots_total` | counter | snapshots of the spool's state computed for `/metrics` and `/healthz` (at most one a second) |
//!
//! `committed_requests / commits` is the mean group size: how much group
//! commit saves.
//!
//! The spool's gauges and the client count come from a snapshot
//! (`spool_state`) that the server computes on a read-only handle of
//! the spool, off the writer thread, and reuses for up to a second: a
//! scrape costs the same with ten clients and a hundred thousand.

use crate::backend::Spool;
use crate::error::Result;
use crate::time::Timestamp;
use crate::watch::metrics::escape_label_value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds of the request-duration histogram's buckets, in seconds.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// The endpoints, as the `endpoint` label names them.
pub const ENDPOINTS: [&str; 6] = ["push", "items", "clients", "healthz", "metrics", "other"];

#[derive(Clone, Debug, Default)]
struct Histogram {
    buckets: [u64; DURATION_BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The server's counters, shared by the handlers and the writer thread.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    durations: Mutex<BTreeMap<&'static str, Histogram>>,
    applied: AtomicU64,
    duplicates: AtomicU64,
    rejected: AtomicU64,
    skipped: AtomicU64,
    items_stored: AtomicU64,
    items_deduplicated: AtomicU64,
    commits: AtomicU64,
    committed_requests: AtomicU64,
    snapshots: AtomicU64,
}

/// The receiving spool's state, as `/metrics` and `/healthz` show it.
#[derive(Debug)]
pub(crate) struct SpoolState {
    /// The §5 gauges, Prometheus text.
    pub gauges: String,
    /// Pending items.
    pub depth: u64,
    /// Push clients known.
    pub clients: u64,
}

/// Compute the state of `spool` (a read-only handle) at `now`: the
/// `stats` gauges and a count of the push clients, without reading each
/// client.
pub(crate) fn spool_state(spool: &Spool, now: Timestamp) -> Result<SpoolState> {
    let stats = crate::ops::stats::stats(spool, now)?;
    let clients = spool.push_client_count()?;
    Ok(SpoolState {
        gauges: stats.prometheus(),
        depth: stats.depth,
        clients,
    })
}

/// A snapshot of the counters (also the body of [`super::ServeReport`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeCounters {
    /// Requests answered, every endpoint and status.
    pub requests: u64,
    /// Push entries applied (dedup hits included).
    pub applied: u64,
    /// Push entries that were duplicates.
    pub duplicates: u64,
    /// Push entries refused and recorded as rejected.
    pub rejected: u64,
    /// Push skip entries processed.
    pub skipped: u64,
    /// `/v1/items` payloads stored.
    pub items_stored: u64,
    /// `/v1/items` payloads that were dedup hits.
    pub items_deduplicated: u64,
    /// Write transactions committed.
    pub commits: u64,
    /// Requests answered from those transactions.
    pub committed_requests: u64,
    /// Snapshots of the spool's state computed (for `/metrics` and
    /// `/healthz`).
    pub snapshots: u64,
}

fn bump(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

impl Metrics {
    /// One answered request.
    pub fn request(&self, endpoint: &'static str, code: u16, took: Duration) {
        *lock(&self.requests).entry((endpoint, code)).or_default() += 1;
        let secs = took.as_secs_f64();
        let mut d = lock(&self.durations);
        let h = d.entry(endpoint).or_default();
        for (i, le) in DURATION_BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// The push entries of one committed request.
    pub fn entries(&self, applied: u64, duplicates: u64, rejected: u64, skipped: u64) {
        bump(&self.applied, applied);
        bump(&self.duplicates, duplicates);
        bump(&self.rejected, rejected);
        bump(&self.skipped, skipped);
    }

    /// One committed `/v1/items` payload.
    pub fn item(&self, deduplicated: bool) {
        if deduplicated {
            bump(&self.items_deduplicated, 1);
        } else {
            bump(&self.items_stored, 1);
        }
    }

    /// One committed group of `requests` requests.
    pub fn commit(&self, requests: u64) {
        bump(&self.commits, 1);
        bump(&self.committed_requests, requests);
    }

    /// One snapshot of the spool's state computed.
    pub fn snapshot_computed(&self) {
        bump(&self.snapshots, 1);
    }

    /// The counters now.
    pub fn snapshot(&self) -> ServeCounters {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServeCounters {
            requests: lock(&self.requests).values().sum(),
            applied: get(&self.applied),
            duplicates: get(&self.duplicates),
            rejected: get(&self.rejected),
            skipped: get(&self.skipped),
            items_stored: get(&self.items_stored),
            items_deduplicated: get(&self.items_deduplicated),
            commits: get(&self.commits),
            committed_requests: get(&self.committed_requests),
            snapshots: get(&self.snapshots),
        }
    }

    /// The server's series (after the spool's gauges), for `spool`.
    pub fn render(&self, spool: &Path, clients: u64) -> String {
        let l = format!("spool=\"{}\"", escape_label_value(&spool.to_string_lossy()));
        let c = self.snapshot();
        let mut out = String::new();

        let name = "spool_serve_requests_total";
        header(
            &mut out,
            name,
            "counter",
            "Requests answered, by endpoint and HTTP status.",
        );
        for ((endpoint, code), n) in lock(&self.requests).iter() {
            let _ = writeln!(
                out,
                "{name}{{{l},endpoint=\"{endpoint}\",code=\"{code}\"}} {n}"
            );
        }

        let name = "spool_serve_request_duration_seconds";
        header(
            &mut out,
            name,
            "histogram",
            "Time from a request's head to its answer, by endpoint.",
        );
        for (endpoint, h) in lock(&self.durations).iter() {
            let el = format!("{l},endpoint=\"{endpoint}\"");
            for (le, n) in DURATION_BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(out, "{name}_bucket{{{el},le=\"{le}\"}} {n}");
            }
            let _ = writeln!(out, "{name}_bucket{{{el},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{el}}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{{el}}} {}", h.count);
        }

        let name = "spool_serve_entries_total";
        header(
            &mut out,
            name,
            "counter",
            "Push entries processed, by outcome.",
        );
        for (outcome, n) in [
            ("applied", c.applied),
            ("duplicate", c.duplicates),
            ("rejected", c.rejected),
            ("skipped", c.skipped),
        ] {
            let _ = writeln!(out, "{name}{{{l},outcome=\"{outcome}\"}} {n}");
        }

        let name = "spool_serve_items_total";
        header(
            &mut out,
            name,
            "counter",
            "Payloads received on /v1/items, by outcome.",
        );
        for (outcome, n) in [
            ("stored", c.items_stored),
            ("deduplicated", c.items_deduplicated),
        ] {
            let _ = writeln!(out, "{name}{{{l},outcome=\"{outcome}\"}} {n}");
        }

        for (name, help, n) in [
            (
                "spool_serve_commits_total",
                "Write transactions committed; each holds a group of requests.",
                c.commits,
            ),
            (
                "spool_serve_committed_requests_total",
                "Requests answered from committed write transactions.",
                c.committed_requests,
            ),
            (
                "spool_serve_snapshots_total",
                "Snapshots of the spool's state computed for /metrics and /healthz (at most one a second).",
                c.snapshots,
            ),
        ] {
            header(&mut out, name, "counter", help);
            let _ = writeln!(out, "{name}{{{l}}} {n}");
        }

        let name = "spool_serve_clients";
        header(
            &mut out,
            name,
            "gauge",
            "Push clients the receiving spool knows.",
        );
        let _ = writeln!(out, "{name}{{{l}}} {clients}");
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A poisoned lock only means another thread panicked while counting;
/// the counts are still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_and_histogram() {
        let m = Metrics::default();
        m.request("push", 200, Duration::from_millis(3));
        m.request("push", 200, Duration::from_millis(30));
        m.request("items", 503, Duration::from_secs(20));
        m.entries(2, 1, 1, 0);
        m.commit(2);
        m.snapshot_computed();
        let t = m.render(Path::new("/q.db"), 4);
        for want in [
            "spool_serve_requests_total{spool=\"/q.db\",endpoint=\"push\",code=\"200\"} 2\n",
            "spool_serve_requests_total{spool=\"/q.db\",endpoint=\"items\",code=\"503\"} 1\n",
            "spool_serve_request_duration_seconds_bucket{spool=\"/q.db\",endpoint=\"push\",le=\"0.005\"} 1\n",
            "spool_serve_request_duration_seconds_bucket{spool=\"/q.db\",endpoint=\"push\",le=\"0.05\"} 2\n",
            "spool_serve_request_duration_seconds_bucket{spool=\"/q.db\",endpoint=\"items\",le=\"10\"} 0\n",
            "spool_serve_request_duration_seconds_bucket{spool=\"/q.db\",endpoint=\"items\",le=\"+Inf\"} 1\n",
            "spool_serve_request_duration_seconds_count{spool=\"/q.db\",endpoint=\"push\"} 2\n",
            "spool_serve_entries_total{spool=\"/q.db\",outcome=\"duplicate\"} 1\n",
            "spool_serve_commits_total{spool=\"/q.db\"} 1\n",
            "spool_serve_clients{spool=\"/q.db\"} 4\n",
            "spool_serve_snapshots_total{spool=\"/q.db\"} 1\n",
        ] {
            assert!(t.contains(want), "{want} not in\n{t}");
        }
        assert_eq!(m.snapshot().requests, 3);
    }
}
