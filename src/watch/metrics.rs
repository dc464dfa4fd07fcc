//! Prometheus text for `spool watch --metrics-file` and
//! `spool stats --prometheus`, and the atomic file writer.
//!
//! Every metric of SPEC §5 ("Metric names") carries a `spool` label with
//! the spool's path, escaped as the text exposition format requires
//! (`\` → `\\`, `"` → `\"`, newline → `\n`), and comes with `# HELP` and
//! `# TYPE` lines. [`render_gauges`] is the state part shared by both
//! commands; [`render_watch`] adds the daemon's counters and `spool_online`.
//!
//! [`write_atomic`] replaces a file so that a scraper sees either the old
//! or the new content, never a torn one: temporary file in the same
//! directory, fsync, rename over the target, fsync of the directory.

use crate::error::{Error, Result};
use crate::item::QueueStats;
use crate::replay::push::PushReport;
use crate::replay::ReplayReport;
use crate::time::Timestamp;
use crate::watch::coordinator::CoordinatorCounters;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

/// The state gauges of one spool (`stats --prometheus` prints these).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpoolGauges {
    /// Pending items, held ones included (`spool_depth`).
    pub depth: u64,
    /// Held items (`spool_held`).
    pub held: u64,
    /// Dead letters (`spool_dead_letters`).
    pub dead_letters: u64,
    /// Bytes on disk of all the spool's files (`spool_bytes`).
    pub bytes: u64,
    /// Age of the oldest pending item; zero when there is none
    /// (`spool_oldest_item_age_seconds`).
    pub oldest_item_age: Duration,
    /// Items ever evicted by the `drop-oldest` overflow policy, kept by
    /// the spool (`spool_evicted_total`, a counter).
    pub evicted_total: u64,
    /// Delivered items kept by the retention window
    /// (`spool_delivered_retained`).
    pub delivered_retained: u64,
}

impl SpoolGauges {
    /// The gauges from a spool's stats, its size on disk and the time now.
    pub fn from_stats(stats: &QueueStats, bytes: u64, now: Timestamp) -> SpoolGauges {
        SpoolGauges {
            depth: stats.depth,
            held: stats.held,
            dead_letters: stats.dead_letters,
            bytes,
            oldest_item_age: stats
                .oldest_enqueued_at
                .map(|t| now.since(t))
                .unwrap_or_default(),
            evicted_total: stats.evicted_total,
            delivered_retained: stats.delivered_retained,
        }
    }
}

/// The counters a `spool watch` process keeps since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchCounters {
    /// Items delivered (`spool_delivered_total`).
    pub delivered: u64,
    /// Failed delivery attempts, or failed push requests
    /// (`spool_failed_total`).
    pub failed: u64,
    /// Items dead-lettered (`spool_dead_lettered_total`).
    pub dead_lettered: u64,
    /// Reconnect attempts (`spool_reconnect_attempts_total`).
    pub reconnect_attempts: u64,
    /// `Reconnected` outcomes.
    pub reconnected: u64,
    /// `GaveUp` outcomes.
    pub gave_up: u64,
    /// `Aborted` outcomes.
    pub aborted: u64,
}

impl WatchCounters {
    /// Add one replay run's results.
    pub fn add_replay(&mut self, r: &ReplayReport) {
        self.delivered += r.delivered;
        self.failed += r.failed;
        self.dead_lettered += r.dead_lettered;
    }

    /// Add one push run's results: items the receiver applied, failed
    /// requests (a push counts failures per request, not per item), items
    /// dead-lettered (rejected or too large).
    pub fn add_push(&mut self, r: &PushReport) {
        self.delivered += r.delivered;
        self.failed += r.failed_requests;
        self.dead_lettered += r.dead_lettered();
    }

    /// Take the reconnect counters from the coordinator.
    pub fn set_reconnect(&mut self, c: &CoordinatorCounters) {
        self.reconnect_attempts = c.attempts;
        self.reconnected = c.reconnected;
        self.gave_up = c.gave_up;
        self.aborted = c.aborted;
    }
}

/// Everything `--metrics-file` holds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WatchMetrics {
    /// The spool's state.
    pub gauges: SpoolGauges,
    /// The process's counters.
    pub counters: WatchCounters,
    /// The monitor's state (`spool_online`).
    pub online: bool,
}

/// Escape a label value for the text format.
pub fn escape_label_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{name}{{{labels}}} {value}");
}

fn spool_label(spool: &Path) -> String {
    format!("spool=\"{}\"", escape_label_value(&spool.to_string_lossy()))
}

/// A seconds value in the text format (`1.5`, `0`).
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.is_finite() {
        format!("{s}")
    } else {
        "+Inf".into()
    }
}

/// The state gauges of `spool` in Prometheus text format.
pub fn render_gauges(spool: &Path, g: &SpoolGauges) -> String {
    let l = spool_label(spool);
    let mut out = String::new();
    let gauges: [(&str, &str, String); 6] = [
        (
            "spool_depth",
            "Pending items, held ones included.",
            g.depth.to_string(),
        ),
        ("spool_held", "Held items.", g.held.to_string()),
        (
            "spool_dead_letters",
            "Items in the dead-letter set.",
            g.dead_letters.to_string(),
        ),
        (
            "spool_bytes",
            "Bytes on disk of all the spool's files.",
            g.bytes.to_string(),
        ),
        (
            "spool_oldest_item_age_seconds",
            "Age of the oldest pending item in seconds (0 when empty).",
            seconds(g.oldest_item_age),
        ),
        (
            "spool_delivered_retained",
            "Delivered items kept by the retention window (spool config retain).",
            g.delivered_retained.to_string(),
        ),
    ];
    for (name, help, value) in gauges {
        header(&mut out, name, "gauge", help);
        sample(&mut out, name, &l, value);
    }
    header(
        &mut out,
        "spool_evicted_total",
        "counter",
        "Items the drop-oldest overflow policy moved to the dead letters.",
    );
    sample(&mut out, "spool_evicted_total", &l, g.evicted_total);
    out
}

/// Everything `spool watch --metrics-file` writes, in Prometheus text
/// format.
pub fn render_watch(spool: &Path, m: &WatchMetrics) -> String {
    let l = spool_label(spool);
    let mut out = render_gauges(spool, &m.gauges);
    let c = &m.counters;
    let counters = [
        (
            "spool_delivered_total",
            "Items delivered since the watch started.",
            c.delivered,
        ),
        (
            "spool_failed_total",
            "Failed delivery attempts since the watch started.",
            c.failed,
        ),
        (
            "spool_dead_lettered_total",
            "Items dead-lettered since the watch started.",
            c.dead_lettered,
        ),
        (
            "spool_reconnect_attempts_total",
            "Reconnect attempts since the watch started.",
            c.reconnect_attempts,
        ),
    ];
    for (name, help, value) in counters {
        header(&mut out, name, "counter", help);
        sample(&mut out, name, &l, value);
    }
    let name = "spool_reconnect_outcomes_total";
    header(
        &mut out,
        name,
        "counter",
        "Reconnect sequences by outcome since the watch started.",
    );
    for (outcome, value) in [
        ("reconnected", c.reconnected),
        ("gave_up", c.gave_up),
        ("aborted", c.aborted),
    ] {
        sample(&mut out, name, &format!("{l},outcome=\"{outcome}\""), value);
    }
    header(
        &mut out,
        "spool_online",
        "gauge",
        "1 when the network monitor reports the link up, else 0.",
    );
    sample(&mut out, "spool_online", &l, u8::from(m.online));
    out
}

/// Replace `path` with `contents` atomically (temporary file in the same
/// directory, fsync, rename, fsync of the directory). A new file gets mode
/// 0600 (narrowed by the umask), a replaced one keeps its mode.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::InvalidInput(format!("{} is not a file path", path.display())))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}.{:08x}",
        name.to_string_lossy(),
        std::process::id(),
        fastrand::u32(..)
    ));
    let written = (|| -> std::io::Result<()> {
        let mut f = crate::private_file::options()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        crate::private_file::match_mode(&f, path)?;
        f.write_all(contents)?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, "write", e));
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, "replace", e));
    }
    fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(&dir, "sync", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping() {
        assert_eq!(escape_label_value(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label_value("x\ny"), "x\\ny");
    }

    #[test]
    fn seconds_are_plain_numbers() {
        assert_eq!(seconds(Duration::ZERO), "0");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5");
    }

    #[test]
    fn gauges_from_stats() {
        let stats = QueueStats {
            depth: 3,
            held: 1,
            dead_letters: 2,
            oldest_enqueued_at: Some(Timestamp::from_secs(100)),
            ..Default::default()
        };
        let g = SpoolGauges::from_stats(&stats, 4096, Timestamp::from_secs(130));
        assert_eq!(g.oldest_item_age, Duration::from_secs(30));
        assert_eq!((g.depth, g.held, g.dead_letters, g.bytes), (3, 1, 2, 4096));
    }
}
