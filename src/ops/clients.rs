//! `clients`: the push clients a receiving spool knows (SPEC §7).
//!
//! Every spool that ever pushed into this one (through `spool serve`) is
//! a client, named by its uuid. Per client the receiving spool keeps the
//! highest sequence number it processed (`last_seq`), the rejects the
//! client has not acknowledged yet, and when it last pushed. This is the
//! state `GET /v1/clients/{id}` answers from, for all clients at once.

use crate::error::Result;
use crate::item::ClientSummary;
use crate::push::wire::Rejected;
use crate::queue::Queue;
use serde::Serialize;

/// Every client of the receiving spool, by id.
pub fn clients(queue: &dyn Queue) -> Result<Vec<ClientSummary>> {
    queue.push_clients()
}

/// The `--json` object of one client (one per line). Field names are
/// stable; documented in the README.
#[derive(Clone, Debug, Serialize)]
pub struct ClientJson<'a> {
    /// The client id (the sending spool's uuid).
    pub client_id: &'a str,
    /// The highest sequence number processed for it.
    pub last_seq: u64,
    /// Refused entries it has not acknowledged, `[{"seq", "error"}]`.
    pub rejected: &'a [Rejected],
    /// When it last pushed (RFC 3339), or null when unknown.
    pub updated_at: Option<String>,
    /// The receiver (`host:pid`) that last applied its entries, or null
    /// when the backend does not record it.
    pub served_by: Option<&'a str>,
}

impl<'a> ClientJson<'a> {
    /// The object for `c`.
    pub fn new(c: &'a ClientSummary) -> ClientJson<'a> {
        ClientJson {
            client_id: &c.client_id,
            last_seq: c.last_seq,
            rejected: &c.rejected,
            updated_at: c.updated_at.map(|t| t.to_rfc3339()),
            served_by: c.served_by.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};
    use crate::push::{apply_push, wire, ReceiveLimits};

    #[test]
    fn clients_after_a_push() {
        let s = Spool::memory(&OpenOptions::default());
        assert!(clients(&*s).unwrap().is_empty());
        let body = wire::encode_request(
            "edge-1",
            0,
            &[wire::OutEntry::Item {
                seq: 1,
                id: 7,
                key: "",
                payload: b"x",
                enqueued_at: None,
                group: None,
                coalesce_key: None,
            }],
        );
        let req = wire::parse_request(&body).unwrap();
        s.receive(&mut |txn| {
            apply_push(txn, &req, &ReceiveLimits::default())?;
            Ok(())
        })
        .unwrap();
        let c = clients(&*s).unwrap();
        assert_eq!(c.len(), 1);
        let v = serde_json::to_value(ClientJson::new(&c[0])).unwrap();
        assert_eq!(v["client_id"], "edge-1");
        assert_eq!(v["last_seq"], 1);
        assert_eq!(v["rejected"], serde_json::json!([]));
        assert!(v["updated_at"].is_string());
    }
}
