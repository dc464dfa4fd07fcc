//! The rule for one push request ([`apply_push`]; the documentation of
//! the [`receiver`](super) module states it), its outcome, and the state
//! of a client ([`client_state`]).

use super::limits::ReceiveLimits;
use super::refusal::check;
use super::store::{EntryRecord, ReceiveRead, ReceiveTxn};
use crate::error::{Error, Result};
use crate::push::wire::{self, ClientState, Entry, ErrorBody, PushRequest};

/// The result of one push request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PushOutcome {
    /// 200: the request was processed (possibly only partly, when the
    /// spool filled up).
    Accepted(Accepted),
    /// 409: a gap, or a number reused with different content. Nothing
    /// changed.
    Conflict {
        /// The client's `last_seq`.
        last_seq: u64,
        /// One line for the body.
        error: String,
    },
    /// 503 with `Retry-After`: the spool is full and no new entry could be
    /// processed. Nothing changed.
    Full {
        /// The client's `last_seq`.
        last_seq: u64,
    },
}

/// A processed request: the answer and counts for metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The `200` body.
    pub response: wire::PushResponse,
    /// New entries refused in this request.
    pub rejected: u64,
    /// New skip entries in this request.
    pub skipped: u64,
    /// Applied entries that were dedup hits (included in
    /// `response.applied`).
    pub deduplicated: u64,
}

impl PushOutcome {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        match self {
            PushOutcome::Accepted(_) => 200,
            PushOutcome::Conflict { .. } => 409,
            PushOutcome::Full { .. } => 503,
        }
    }

    /// The body of the answer.
    pub fn body(&self) -> Vec<u8> {
        match self {
            PushOutcome::Accepted(a) => a.response.to_json(),
            PushOutcome::Conflict { last_seq, error } => ErrorBody {
                error: error.clone(),
                last_seq: Some(*last_seq),
            }
            .to_json(),
            PushOutcome::Full { .. } => {
                ErrorBody::new("the receiving spool is full; retry later").to_json()
            }
        }
    }
}

/// Apply one push request inside the caller's transaction (see the
/// [`receiver`](super) module docs for the rule). `Err` means the
/// transaction must be rolled back; it is either the storage's error or
/// [`Error::InvalidInput`] for a request whose entries are not ascending
/// and contiguous (which [`wire::parse_request`] never returns).
pub fn apply_push<T: ReceiveTxn + ?Sized>(
    txn: &mut T,
    req: &PushRequest,
    limits: &ReceiveLimits,
) -> Result<PushOutcome> {
    check_contiguous(&req.entries)?;
    let client = req.client_id.as_str();
    let before = txn.last_seq(client)?;

    if let Some(first) = req.entries.first() {
        if first.seq() > before.saturating_add(1) {
            return Ok(PushOutcome::Conflict {
                last_seq: before,
                error: format!(
                    "batch starts at sequence {} but the last sequence received from this \
                     client is {before}: resend from {}",
                    first.seq(),
                    before.saturating_add(1)
                ),
            });
        }
    }

    // Duplicates first, all of them, before anything is written.
    let mut duplicates = 0u64;
    for entry in req.entries.iter().take_while(|e| e.seq() <= before) {
        duplicates += 1;
        if let Entry::Item(item) = entry {
            if let Some(recorded) = txn.digest(client, item.seq)? {
                if recorded != item.digest {
                    return Ok(PushOutcome::Conflict {
                        last_seq: before,
                        error: format!(
                            "sequence {} reused with different content: is this spool a copy \
                             of another?",
                            item.seq
                        ),
                    });
                }
            }
        }
    }

    let mut last = before;
    let (mut applied, mut rejected, mut skipped, mut deduplicated) = (0u64, 0u64, 0u64, 0u64);
    let mut full = false;
    for entry in &req.entries[duplicates as usize..] {
        let seq = entry.seq();
        match entry {
            Entry::Skip { .. } => skipped += 1,
            Entry::Item(item) => match check(item, limits) {
                Err(refusal) => {
                    txn.record(
                        client,
                        seq,
                        EntryRecord::Rejected {
                            digest: refusal.verified.then_some(item.digest.as_str()),
                            reason: &refusal.reason,
                        },
                    )?;
                    rejected += 1;
                }
                Ok(payload) => {
                    let stored = limits.stored_item(
                        Some(client),
                        payload,
                        &item.key,
                        item.group.as_deref(),
                        item.coalesce_key.as_deref(),
                    );
                    match txn.enqueue(stored)? {
                        Some(e) => {
                            txn.record(
                                client,
                                seq,
                                EntryRecord::Applied {
                                    digest: &item.digest,
                                },
                            )?;
                            applied += 1;
                            deduplicated += u64::from(e.deduplicated);
                        }
                        None => {
                            full = true;
                            break;
                        }
                    }
                }
            },
        }
        last = seq;
    }

    if full && last == before {
        return Ok(PushOutcome::Full { last_seq: before });
    }
    if last != before {
        txn.set_last_seq(client, last)?;
    }
    let acked = req.acked.min(before);
    if acked > 0 {
        txn.prune_rejects(client, acked)?;
    }
    let reported = txn.rejects(client, acked)?;
    Ok(PushOutcome::Accepted(Accepted {
        response: wire::PushResponse {
            last_seq: last,
            rejected: reported,
            applied,
            duplicates,
        },
        rejected,
        skipped,
        deduplicated,
    }))
}

/// Where the receiver stands for `client`: the answer to
/// `GET /v1/clients/{client_id}` (the seed's pull). `rejected` holds the
/// rejects the client has not acknowledged yet.
pub fn client_state<R: ReceiveRead + ?Sized>(read: &mut R, client: &str) -> Result<ClientState> {
    Ok(ClientState {
        last_seq: read.last_seq(client)?,
        rejected: read.rejects(client, 0)?,
    })
}

fn check_contiguous(entries: &[Entry]) -> Result<()> {
    if entries.first().is_some_and(|e| e.seq() == 0) {
        return Err(Error::InvalidInput(
            "push entries start at sequence number 0".into(),
        ));
    }
    for w in entries.windows(2) {
        if w[0].seq().checked_add(1) != Some(w[1].seq()) {
            return Err(Error::InvalidInput(format!(
                "push entries are not contiguous: {} is followed by {}",
                w[0].seq(),
                w[1].seq()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::memory::MemoryReceiver;
    use crate::push::receiver::test_requests::{
        accepted, item, limits, payloads, push, req, text, C,
    };
    use crate::push::wire::{PushResponse, Rejected};

    #[test]
    fn new_entries_are_applied_in_order() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(&mut rx, &req(0, vec![text(1), text(2), text(3)])));
        assert_eq!(
            a.response,
            PushResponse {
                last_seq: 3,
                rejected: vec![],
                applied: 3,
                duplicates: 0
            }
        );
        assert_eq!(payloads(&rx), ["p1", "p2", "p3"]);
        assert_eq!(rx.ledger.last_seq(C), 3);
        assert_eq!(
            rx.ledger.digest(C, 2),
            Some(wire::digest("", b"p2")),
            "the digest of an applied number is kept"
        );
    }

    #[test]
    fn a_resent_batch_is_all_duplicates() {
        let mut rx = MemoryReceiver::new(None);
        let r = req(0, vec![text(1), text(2)]);
        push(&mut rx, &r);
        let a = accepted(push(&mut rx, &r));
        assert_eq!((a.response.applied, a.response.duplicates), (0, 2));
        assert_eq!(a.response.last_seq, 2);
        assert_eq!(payloads(&rx), ["p1", "p2"], "nothing applied twice");
        // Overlapping: 2 is a duplicate, 3 is new.
        let a = accepted(push(&mut rx, &req(0, vec![text(2), text(3)])));
        assert_eq!((a.response.applied, a.response.duplicates), (1, 1));
        assert_eq!(payloads(&rx), ["p1", "p2", "p3"]);
    }

    #[test]
    fn a_gap_is_a_conflict_that_changes_nothing() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1)]));
        let before = rx.clone();
        let o = push(&mut rx, &req(1, vec![text(3), text(4)]));
        assert_eq!(o.status(), 409);
        let PushOutcome::Conflict { last_seq, error } = &o else {
            panic!()
        };
        assert_eq!(*last_seq, 1);
        assert!(error.contains("resend from 2"), "{error}");
        let body: serde_json::Value = serde_json::from_slice(&o.body()).unwrap();
        assert_eq!(body["last_seq"], 1);
        assert_eq!(rx, before);
        // A brand-new client must start at 1.
        let o = push(
            &mut rx,
            &PushRequest {
                client_id: "other".into(),
                acked: 0,
                entries: vec![text(2)],
            },
        );
        assert_eq!(o.status(), 409);
    }

    #[test]
    fn a_reused_number_with_other_content_is_a_conflict_and_nothing_is_applied() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), text(2)]));
        let before = rx.clone();
        // seq 1 matches, seq 2 does not; seq 3 is new and valid.
        let o = push(
            &mut rx,
            &req(0, vec![text(1), item(2, "", b"other"), text(3)]),
        );
        let PushOutcome::Conflict { last_seq, error } = &o else {
            panic!("{o:?}")
        };
        assert_eq!(*last_seq, 2);
        assert_eq!(
            error,
            "sequence 2 reused with different content: is this spool a copy of another?"
        );
        assert_eq!(rx, before, "entry 3 must not be applied");
        // The key is part of the content.
        let o = push(&mut rx, &req(0, vec![item(1, "k", b"p1")]));
        assert_eq!(o.status(), 409);
    }

    #[test]
    fn a_dedup_hit_counts_as_applied() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(
            &mut rx,
            &req(0, vec![item(1, "k", b"first"), item(2, "k", b"second")]),
        ));
        assert_eq!((a.response.applied, a.deduplicated), (2, 1));
        assert_eq!(payloads(&rx), ["first"]);
        assert_eq!(rx.ledger.last_seq(C), 2);
    }

    #[test]
    fn skip_entries_advance_without_applying() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(
            &mut rx,
            &req(0, vec![text(1), Entry::Skip { seq: 2 }, text(3)]),
        ));
        assert_eq!(a.response.last_seq, 3);
        assert_eq!((a.response.applied, a.skipped), (2, 1));
        assert_eq!(payloads(&rx), ["p1", "p3"]);
    }

    #[test]
    fn skip_entries_store_nothing_but_last_seq() {
        let mut rx = MemoryReceiver::new(None);
        let skips: Vec<Entry> = (1..=1000).map(|seq| Entry::Skip { seq }).collect();
        let a = accepted(push(&mut rx, &req(0, skips)));
        assert_eq!((a.response.last_seq, a.skipped), (1000, 1000));
        let c = rx.ledger.client(C).unwrap();
        assert_eq!(c.last_seq, 1000);
        assert!(c.entries.is_empty(), "{} numbers recorded", c.entries.len());
        // A skipped number sent again, as an item, is a duplicate.
        let a = accepted(push(&mut rx, &req(1000, vec![text(1000), text(1001)])));
        assert_eq!((a.response.duplicates, a.response.applied), (1, 1));
        assert_eq!(rx.ledger.client(C).unwrap().entries.len(), 1);
    }

    #[test]
    fn acknowledged_refusals_without_a_digest_are_forgotten() {
        let mut rx = MemoryReceiver::new(None);
        let mut bad = item(1, "", b"x");
        if let Entry::Item(e) = &mut bad {
            e.digest = wire::digest("", b"y");
        }
        // 1: no verifiable digest; 2: verified, refused (too large).
        push(&mut rx, &req(0, vec![bad, item(2, "", &[0; 11]), text(3)]));
        assert_eq!(rx.ledger.client(C).unwrap().entries.len(), 3);
        let a = accepted(push(&mut rx, &req(3, vec![])));
        assert!(a.response.rejected.is_empty());
        let c = rx.ledger.client(C).unwrap();
        assert_eq!(
            c.entries.keys().copied().collect::<Vec<_>>(),
            [2, 3],
            "what has a digest stays, the rest goes once acknowledged"
        );
        assert_eq!(c.last_seq, 3);
    }

    #[test]
    fn a_full_spool_stops_before_the_entry_that_does_not_fit() {
        let mut rx = MemoryReceiver::new(Some(2));
        let a = accepted(push(
            &mut rx,
            &req(0, vec![item(1, "a", b"p1"), text(2), text(3), text(4)]),
        ));
        assert_eq!(a.response.last_seq, 2, "partial batch, 200");
        assert_eq!(rx.ledger.client(C).unwrap().entries.len(), 2);
        // Nothing new fits: 503, nothing changed.
        let before = rx.clone();
        let o = push(&mut rx, &req(2, vec![text(3), text(4)]));
        assert_eq!(o, PushOutcome::Full { last_seq: 2 });
        assert_eq!(o.status(), 503);
        assert_eq!(rx, before);
        // Refusals, skips and dedup hits need no room.
        let a = accepted(push(
            &mut rx,
            &req(
                2,
                vec![
                    item(3, "", &[b'x'; 11]),
                    Entry::Skip { seq: 4 },
                    item(5, "a", b"again"),
                    text(6),
                ],
            ),
        ));
        assert_eq!(a.response.last_seq, 5);
        rx.take_pending();
        let a = accepted(push(&mut rx, &req(5, vec![text(6)])));
        assert_eq!(a.response.last_seq, 6);
    }

    #[test]
    fn a_dedup_hit_succeeds_on_a_full_spool() {
        let mut rx = MemoryReceiver::new(Some(1));
        push(&mut rx, &req(0, vec![item(1, "k", b"a")]));
        let a = accepted(push(&mut rx, &req(1, vec![item(2, "k", b"b")])));
        assert_eq!((a.response.last_seq, a.deduplicated), (2, 1));
    }

    #[test]
    fn rejects_are_reported_until_acknowledged() {
        let mut rx = MemoryReceiver::new(None);
        let a = accepted(push(&mut rx, &req(0, vec![text(1), item(2, "", &[0; 11])])));
        assert_eq!(a.response.rejected.len(), 1);
        // The answer was lost; the client resends with acked 0.
        let a = accepted(push(&mut rx, &req(0, vec![text(1), item(2, "", &[0; 11])])));
        assert_eq!(a.response.rejected.len(), 1, "reported again");
        // Later batches keep reporting it while acked < 2.
        let a = accepted(push(&mut rx, &req(1, vec![text(3)])));
        assert_eq!(a.response.rejected[0].seq, 2);
        // Acknowledged: forgotten.
        let a = accepted(push(&mut rx, &req(3, vec![])));
        assert!(a.response.rejected.is_empty());
        assert!(rx.ledger.client(C).unwrap().rejects.is_empty());
        assert!(
            rx.ledger.digest(C, 2).is_some(),
            "the digest of a refused entry outlives the reject"
        );
    }

    #[test]
    fn acked_is_clamped_to_last_seq_before_the_request() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![item(1, "", &[0; 11]), text(2)]));
        // A client acknowledging far more than it was told: the reject at
        // 1 may go, the one this request creates at 3 may not.
        let a = accepted(push(&mut rx, &req(1_000, vec![item(3, "", &[0; 11])])));
        assert_eq!(
            a.response.rejected,
            vec![Rejected {
                seq: 3,
                error: "payload of 11 bytes is over the receiver's limit of 10 bytes".into()
            }]
        );
        assert_eq!(
            rx.ledger
                .client(C)
                .unwrap()
                .rejects
                .keys()
                .copied()
                .collect::<Vec<_>>(),
            [3]
        );
    }

    #[test]
    fn duplicates_without_comparable_content_are_not_conflicts() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), Entry::Skip { seq: 2 }]));
        // done --force on an item the receiver had applied: its number
        // comes again as a skip.
        let a = accepted(push(&mut rx, &req(0, vec![Entry::Skip { seq: 1 }])));
        assert_eq!(a.response.duplicates, 1);
        // An item where a skip was recorded: nothing to compare.
        let a = accepted(push(&mut rx, &req(0, vec![item(2, "", b"z")])));
        assert_eq!(a.response.duplicates, 1);
        // A refusal whose digest could not be verified keeps none.
        let mut bad = item(3, "", b"x");
        if let Entry::Item(e) = &mut bad {
            e.digest = wire::digest("", b"y");
        }
        push(&mut rx, &req(0, vec![bad]));
        assert_eq!(rx.ledger.digest(C, 3), None);
        let a = accepted(push(&mut rx, &req(0, vec![item(3, "", b"x")])));
        assert_eq!(a.response.duplicates, 1);
        // A refusal with a verified digest keeps it: other content is a
        // conflict.
        push(&mut rx, &req(0, vec![item(4, "", &[1; 11])]));
        assert_eq!(
            push(&mut rx, &req(0, vec![item(4, "", &[2; 11])])).status(),
            409
        );
        assert_eq!(
            push(&mut rx, &req(0, vec![item(4, "", &[1; 11])])).status(),
            200
        );
    }

    #[test]
    fn requests_built_in_code_must_be_contiguous() {
        let mut rx = MemoryReceiver::new(None);
        for entries in [
            vec![text(1), text(3)],
            vec![text(2), text(1)],
            vec![text(0)],
        ] {
            let e = apply_push(&mut rx, &req(0, entries), &limits()).unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{e}");
        }
        assert_eq!(rx, MemoryReceiver::new(None));
    }

    #[test]
    fn clients_are_independent_and_their_state_can_be_read() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), item(2, "", &[0; 11])]));
        let other = PushRequest {
            client_id: "edge-2".into(),
            acked: 0,
            entries: vec![text(1)],
        };
        let a = accepted(push(&mut rx, &other));
        assert_eq!((a.response.last_seq, a.response.applied), (1, 1));
        let state = client_state(&mut rx, C).unwrap();
        assert_eq!(state.last_seq, 2);
        assert_eq!(state.rejected.len(), 1);
        assert_eq!(
            String::from_utf8(state.to_json()).unwrap(),
            r#"{"last_seq":2,"rejected":[{"seq":2,"error":"payload of 11 bytes is over the receiver's limit of 10 bytes"}]}"#
        );
        assert_eq!(
            client_state(&mut rx, "nobody").unwrap(),
            ClientState::default()
        );
    }

    #[test]
    fn an_empty_request_reports_where_the_receiver_stands() {
        let mut rx = MemoryReceiver::new(None);
        push(&mut rx, &req(0, vec![text(1), text(2)]));
        let a = accepted(push(&mut rx, &req(2, vec![])));
        assert_eq!(a.response.last_seq, 2);
        let o = push(
            &mut rx,
            &PushRequest {
                client_id: "new".into(),
                acked: 0,
                entries: vec![],
            },
        );
        assert_eq!(accepted(o).response.last_seq, 0);
    }

    #[test]
    fn answers_have_the_spec_bodies() {
        let full = PushOutcome::Full { last_seq: 3 };
        let v: serde_json::Value = serde_json::from_slice(&full.body()).unwrap();
        assert!(v["error"].as_str().unwrap().contains("full"));
        let mut rx = MemoryReceiver::new(None);
        let o = push(&mut rx, &req(0, vec![text(1)]));
        assert_eq!(
            String::from_utf8(o.body()).unwrap(),
            r#"{"last_seq":1,"rejected":[],"applied":1,"duplicates":0}"#
        );
    }
}
