//! What a compaction keeps, as an index caught up with the files knows
//! it: where each live item's line is, and the receiver's ledger.

use super::{u, Index, Loc};
use crate::backend::receive::ClientDelta;
use crate::error::Result;
use crate::push::memory::Recorded;
use crate::time::Timestamp;
use std::collections::BTreeMap;

impl Index {
    /// Where every pending item's line is, in id order.
    pub fn live_locs(&self) -> Result<Vec<Loc>> {
        self.locs("SELECT id, off, len FROM pending ORDER BY id", [])
    }

    /// Every known client's ledger as one change from nothing: its
    /// `last_seq`, every number recorded, the time of its last push, and
    /// the acknowledged-reject watermark just below the first reject still
    /// reported (`last_seq` when none is), so that the rejects reported
    /// stay the same.
    pub fn client_ledgers(&self) -> Result<Vec<(String, ClientDelta)>> {
        let clients: Vec<(String, i64, i64, Option<i64>)> = self
            .conn
            .prepare("SELECT id, last_seq, acked, at FROM clients WHERE known ORDER BY id")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect()
            })
            .map_err(self.err("read"))?;
        let mut out = Vec::with_capacity(clients.len());
        let mut s = self
            .conn
            .prepare(
                "SELECT seq, kind, digest, reason FROM client_entries WHERE client = ?1 ORDER BY seq",
            )
            .map_err(self.err("read"))?;
        for (id, last_seq, acked, at) in clients {
            let mut entries = BTreeMap::new();
            let mut first_reported = None;
            let rows = s
                .query_map([&id], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })
                .map_err(self.err("read"))?;
            for row in rows {
                let (seq, kind, digest, reason) = row.map_err(self.err("read"))?;
                let recorded = if kind == 1 {
                    if seq > acked && first_reported.is_none() {
                        first_reported = Some(u(seq));
                    }
                    Recorded::Rejected {
                        digest,
                        reason: reason.unwrap_or_default(),
                    }
                } else {
                    Recorded::Applied {
                        digest: digest.unwrap_or_default(),
                    }
                };
                entries.insert(u(seq), recorded);
            }
            let last_seq = u(last_seq);
            out.push((
                id,
                ClientDelta {
                    last_seq: Some(last_seq),
                    entries,
                    acked: first_reported.map_or(last_seq, |first| first - 1),
                    at: at.map(Timestamp::from_millis),
                },
            ));
        }
        Ok(out)
    }
}
