//! Requests, limits and readings of a memory receiver for the unit
//! tests of the receiver.

use super::apply::{apply_push, Accepted, PushOutcome};
use super::limits::ReceiveLimits;
use crate::push::memory::MemoryReceiver;
use crate::push::wire::{self, Entry, ItemEntry, Payload, PushRequest};

pub(super) const C: &str = "edge-1";

pub(super) fn item(seq: u64, key: &str, payload: &[u8]) -> Entry {
    Entry::Item(Box::new(ItemEntry {
        seq,
        id: seq + 100,
        key: key.into(),
        payload: Payload::Bytes(payload.to_vec()),
        enqueued_at: None,
        digest: wire::digest(key, payload),
        group: None,
        coalesce_key: None,
    }))
}

pub(super) fn text(seq: u64) -> Entry {
    item(seq, "", format!("p{seq}").as_bytes())
}

pub(super) fn req(acked: u64, entries: Vec<Entry>) -> PushRequest {
    PushRequest {
        client_id: C.into(),
        acked,
        entries,
    }
}

pub(super) fn limits() -> ReceiveLimits {
    ReceiveLimits {
        max_payload: 10,
        max_key_len: 4,
        shared_keys: false,
    }
}

pub(super) fn keys(rx: &MemoryReceiver) -> Vec<(String, String)> {
    rx.pending()
        .iter()
        .map(|(_, it)| {
            (
                it.key.clone(),
                String::from_utf8(it.payload.clone()).unwrap(),
            )
        })
        .collect()
}

pub(super) fn from(client: &str, entries: Vec<Entry>) -> PushRequest {
    PushRequest {
        client_id: client.into(),
        acked: 0,
        entries,
    }
}

pub(super) fn push(rx: &mut MemoryReceiver, r: &PushRequest) -> PushOutcome {
    apply_push(rx, r, &limits()).unwrap()
}

pub(super) fn accepted(o: PushOutcome) -> Accepted {
    match o {
        PushOutcome::Accepted(a) => a,
        other => panic!("expected 200, got {other:?}"),
    }
}

pub(super) fn payloads(rx: &MemoryReceiver) -> Vec<String> {
    rx.pending()
        .iter()
        .map(|(_, it)| String::from_utf8(it.payload.clone()).unwrap())
        .collect()
}
