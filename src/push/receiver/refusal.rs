//! Why a new item entry is refused: an undecodable payload, a digest
//! that does not match, a key with a NUL byte, a key or payload over
//! the limits.

use super::limits::ReceiveLimits;
use crate::push::wire::{self, Payload};

/// Why an item entry is refused.
pub(super) struct Refusal {
    pub(super) reason: String,
    /// The entry's digest matches its key and payload.
    pub(super) verified: bool,
}

/// The payload to enqueue, or why the entry is refused.
pub(super) fn check<'a>(
    item: &'a wire::ItemEntry,
    limits: &ReceiveLimits,
) -> Result<&'a [u8], Refusal> {
    let payload = match &item.payload {
        Payload::Bytes(bytes) => bytes.as_slice(),
        Payload::Undecodable { reason, .. } => {
            return Err(Refusal {
                reason: reason.clone(),
                verified: false,
            })
        }
    };
    let computed = wire::digest(&item.key, payload);
    if computed != item.digest {
        return Err(Refusal {
            reason: format!(
                "digest {} does not match the key and payload (computed {computed})",
                item.digest
            ),
            verified: false,
        });
    }
    if let Some(problem) = crate::item::key_problem(&item.key) {
        // Its digest cannot tell its key from its payload: none is kept.
        return Err(Refusal {
            reason: problem.to_string(),
            verified: false,
        });
    }
    if item.key.len() > limits.max_key_len {
        return Err(Refusal {
            reason: format!(
                "key of {} bytes is over the receiver's limit of {} bytes",
                item.key.len(),
                limits.max_key_len
            ),
            verified: true,
        });
    }
    for (what, value) in [
        ("group", item.group.as_deref()),
        ("coalesce key", item.coalesce_key.as_deref()),
    ] {
        if let Some(reason) = value.and_then(|v| name_problem(what, v, limits)) {
            return Err(Refusal {
                reason,
                verified: true,
            });
        }
    }
    if payload.len() as u64 > limits.max_payload {
        return Err(Refusal {
            reason: format!(
                "payload of {} bytes is over the receiver's limit of {} bytes",
                payload.len(),
                limits.max_payload
            ),
            verified: true,
        });
    }
    Ok(payload)
}

/// Why a group or coalesce key (`what`) cannot be stored, if it cannot:
/// the rules of a key.
pub(super) fn name_problem(what: &str, value: &str, limits: &ReceiveLimits) -> Option<String> {
    if value.contains('\0') {
        return Some(format!(
            "the {what} contains a NUL byte, which no {what} may contain"
        ));
    }
    (value.len() > limits.max_key_len).then(|| {
        format!(
            "{what} of {} bytes is over the receiver's limit of {} bytes",
            value.len(),
            limits.max_key_len
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::memory::MemoryReceiver;
    use crate::push::receiver::apply_push;
    use crate::push::receiver::test_requests::{
        accepted, item, keys, limits, payloads, push, req, C,
    };
    use crate::push::wire::{Entry, ItemEntry, Rejected};

    #[test]
    fn refused_entries_are_recorded_and_advance_last_seq() {
        let mut rx = MemoryReceiver::new(None);
        let mut bad_digest = item(3, "", b"x");
        if let Entry::Item(e) = &mut bad_digest {
            e.digest = wire::digest("", b"y");
        }
        let undecodable = Entry::Item(Box::new(ItemEntry {
            seq: 4,
            id: 4,
            key: String::new(),
            payload: Payload::Undecodable {
                base64: "%".into(),
                reason: "invalid payload_base64: bad".into(),
            },
            enqueued_at: None,
            digest: wire::digest("", b""),
            group: None,
            coalesce_key: None,
        }));
        let a = accepted(push(
            &mut rx,
            &req(
                0,
                vec![
                    item(1, "", &[b'x'; 11]),
                    item(2, "12345", b"x"),
                    bad_digest,
                    undecodable,
                    item(5, "", &[b'x'; 10]),
                ],
            ),
        ));
        assert_eq!(a.response.last_seq, 5);
        assert_eq!((a.response.applied, a.rejected), (1, 4));
        let reasons: Vec<(u64, &str)> = a
            .response
            .rejected
            .iter()
            .map(|r| (r.seq, r.error.as_str()))
            .collect();
        assert_eq!(
            reasons[0],
            (
                1,
                "payload of 11 bytes is over the receiver's limit of 10 bytes"
            )
        );
        assert_eq!(
            reasons[1],
            (2, "key of 5 bytes is over the receiver's limit of 4 bytes")
        );
        assert!(
            reasons[2].1.starts_with("digest sha256:"),
            "{}",
            reasons[2].1
        );
        assert!(reasons[2].1.contains("does not match"), "{}", reasons[2].1);
        assert_eq!(reasons[3], (4, "invalid payload_base64: bad"));
        assert_eq!(payloads(&rx).len(), 1, "only the 10-byte payload fits");
        for r in &a.response.rejected {
            assert!(!r.error.contains('\n'));
        }
    }

    #[test]
    fn groups_and_coalesce_keys_follow_the_rules_of_keys() {
        let mut rx = MemoryReceiver::new(None);
        let with = |seq: u64, group: &str, ck: &str| {
            let mut e = item(seq, "", b"x");
            if let Entry::Item(i) = &mut e {
                i.group = Some(group.into());
                i.coalesce_key = Some(ck.into());
            }
            e
        };
        let a = accepted(push(
            &mut rx,
            &req(
                0,
                vec![
                    with(1, "a\0b", "c"),
                    with(2, "g", "12345"),
                    with(3, "g", "c"),
                ],
            ),
        ));
        assert_eq!((a.response.applied, a.rejected), (1, 2));
        let reasons: Vec<&str> = a
            .response
            .rejected
            .iter()
            .map(|r| r.error.as_str())
            .collect();
        assert_eq!(
            reasons,
            [
                "the group contains a NUL byte, which no group may contain",
                "coalesce key of 5 bytes is over the receiver's limit of 4 bytes",
            ]
        );
        let stored = &rx.pending()[0].1;
        assert_eq!(
            (stored.group.as_deref(), stored.coalesce_key.as_deref()),
            (Some("edge-1:g"), Some("edge-1:c"))
        );
    }

    #[test]
    fn a_key_with_a_nul_byte_is_refused_and_keeps_no_digest() {
        let mut rx = MemoryReceiver::new(None);
        let limits = ReceiveLimits {
            max_key_len: 64,
            ..limits()
        };
        // The two entries the NUL byte would make indistinguishable.
        assert_eq!(wire::digest("a\0b", b"x"), wire::digest("a", b"b\0x"));
        let o = apply_push(
            &mut rx,
            &req(0, vec![item(1, "a\0b", b"x"), item(2, "a", b"b\0x")]),
            &limits,
        )
        .unwrap();
        let a = accepted(o);
        assert_eq!(
            (a.response.last_seq, a.response.applied, a.rejected),
            (2, 1, 1)
        );
        assert_eq!(
            a.response.rejected,
            vec![Rejected {
                seq: 1,
                error: "the idempotency key contains a NUL byte, which no key may contain".into()
            }]
        );
        assert_eq!(keys(&rx), [("edge-1:a".to_string(), "b\0x".to_string())]);
        assert_eq!(rx.ledger.digest(C, 1), None);
    }
}
