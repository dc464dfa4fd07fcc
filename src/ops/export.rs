//! `export`: a whole spool — pending and held items, and dead letters —
//! as NDJSON records that `import` reads back, on any backend.
//!
//! The first line is the spool header,
//! `{"spool":{"uuid":"…","push":{"last_assigned":N,"acked":M,"skips":[…]}}}`
//! ([`SpoolHeader`]): who the spool is as a push client, so that an
//! import can keep its sequence numbers (SPEC §7). It is read before the
//! items; a spool without a uuid yet (a reference file never written by
//! `spool`, read-only) has no header.
//!
//! A record is the item JSON object of [`super::json`] plus `"state"`
//! (`pending`, `held`, `dead` or `delivered`) and, for dead letters,
//! `dead_at`, for retained delivered items `delivered_at` and `evidence`.
//! Pending items come first (in id order, read page by page with
//! [`crate::Queue::page`]), then dead letters ([`crate::Queue::dead_page`]),
//! then retained delivered items ([`crate::Queue::delivered_page`]), so
//! memory stays at one page whatever the spool's size.
//!
//! The export is not a snapshot across pages: take it while no replay
//! runs for an exact copy. An item that a concurrent replay dead-letters
//! during the export can appear twice (pending and dead) — never zero
//! times, because pending items are read before dead letters.

use super::json::ItemJson;
use super::output::{sink_error, write_to, Destination};
use crate::error::Result;
use crate::item::{Record, RecordState};
use crate::queue::Queue;
use crate::queue::SpoolHeader;
use serde::Serialize;

/// What [`export`] wrote.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize)]
pub struct ExportReport {
    /// Pending records (not held).
    pub pending: u64,
    /// Held records.
    pub held: u64,
    /// Dead records.
    pub dead: u64,
    /// Retained delivered records (SPEC §9).
    pub delivered: u64,
    /// Where they went (`stdout` or the file).
    pub destination: String,
}

impl ExportReport {
    /// All records written.
    pub fn total(&self) -> u64 {
        self.pending + self.held + self.dead + self.delivered
    }
}

/// Write every record of `queue` to `dest` (a file is replaced
/// atomically, only when everything was written).
pub fn export(queue: &dyn Queue, dest: Destination<'_>) -> Result<ExportReport> {
    let destination = dest.label();
    let header = header_of(queue)?;
    let mut report = write_to(dest, |w| {
        let mut r = ExportReport::default();
        if let Some(h) = &header {
            writeln!(w, "{}", h.to_line()).map_err(sink_error)?;
        }
        for item in super::drain::ItemStream::new(queue, None) {
            let item = item?;
            let state = if item.held {
                r.held += 1;
                RecordState::Held
            } else {
                r.pending += 1;
                RecordState::Pending
            };
            let rec = Record {
                item,
                state,
                dead_at: None,
                delivery: None,
            };
            writeln!(w, "{}", ItemJson::record(&rec).to_line()).map_err(sink_error)?;
        }
        for dl in super::dlq::list(queue, &Default::default()) {
            let dl = dl?;
            let rec = Record {
                item: dl.item,
                state: RecordState::Dead,
                dead_at: Some(dl.dead_at),
                delivery: None,
            };
            writeln!(w, "{}", ItemJson::record(&rec).to_line()).map_err(sink_error)?;
            r.dead += 1;
        }
        for d in super::list::delivered_stream(queue) {
            let d = d?;
            writeln!(w, "{}", ItemJson::delivered(&d).to_line()).map_err(sink_error)?;
            r.delivered += 1;
        }
        Ok(r)
    })?;
    report.destination = destination;
    Ok(report)
}

/// The spool header of an export of `queue`: its uuid and push state.
/// `None` for a spool that has no uuid yet (a reference spool that
/// `spool` never wrote to, opened read-only).
pub fn header_of(queue: &dyn Queue) -> Result<Option<SpoolHeader>> {
    let Some(uuid) = super::config::assigned_uuid(queue)? else {
        return Ok(None);
    };
    Ok(Some(SpoolHeader {
        uuid,
        push: queue.push_state()?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn states_and_order() {
        let s = Spool::memory(&OpenOptions::default());
        for p in ["a", "b", "c"] {
            s.enqueue(p.as_bytes(), "").unwrap();
        }
        s.set_held(&[2], true).unwrap();
        s.dead_letter(1, "x").unwrap();
        let mut out = Vec::new();
        let r = export(
            &*s,
            Destination::Writer {
                writer: &mut out,
                label: "buf",
            },
        )
        .unwrap();
        assert_eq!((r.pending, r.held, r.dead, r.total()), (1, 1, 1, 3));
        let lines: Vec<serde_json::Value> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines[0]["spool"]["uuid"], s.uuid().unwrap().as_str());
        assert_eq!(lines[0]["spool"]["push"]["last_assigned"], 0);
        let states: Vec<_> = lines[1..]
            .iter()
            .map(|v| v["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["held", "pending", "dead"]);
        assert!(lines[3]["dead_at"].is_string());
    }
}
