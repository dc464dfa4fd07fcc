//! The receiver's rule for one `POST /v1/items` payload: [`apply_item`].

use super::limits::ReceiveLimits;
use super::refusal::name_problem;
use super::store::ReceiveTxn;
use crate::error::Result;
use crate::item::{Enqueued, NewItem};

/// What [`apply_item`] did with one `POST /v1/items` payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Stored, or a dedup hit (`201` / `200`).
    Enqueued(Enqueued),
    /// The spool is full; nothing was stored (`503` with `Retry-After`).
    Full,
    /// The key cannot be stored (`400`); nothing was stored. One line.
    Refused(String),
}

/// Enqueue one `POST /v1/items` payload (`item`: its payload, and the
/// key, group and coalesce key of its `Idempotency-Key`, `Spool-Group`
/// and `Spool-Coalesce-Key` headers) inside the caller's transaction: a
/// key, group or coalesce key that holds a NUL byte is refused (as is a
/// group or coalesce key over the key length limit), else the item is
/// stored as [`ReceiveLimits::stored_item`] gives it for `sender` (the
/// token's name when a token file is in use, `None` without one).
pub fn apply_item<T: ReceiveTxn + ?Sized>(
    txn: &mut T,
    item: &NewItem,
    sender: Option<&str>,
    limits: &ReceiveLimits,
) -> Result<ItemOutcome> {
    if let Some(problem) = crate::item::key_problem(&item.key) {
        return Ok(ItemOutcome::Refused(format!(
            "the Idempotency-Key header is refused: {problem}"
        )));
    }
    for (header, what, value) in [
        ("Spool-Group", "group", &item.group),
        ("Spool-Coalesce-Key", "coalesce key", &item.coalesce_key),
    ] {
        if let Some(problem) = value.as_deref().and_then(|v| name_problem(what, v, limits)) {
            return Ok(ItemOutcome::Refused(format!(
                "the {header} header is refused: {problem}"
            )));
        }
    }
    let stored = limits.stored_item(
        sender,
        &item.payload,
        &item.key,
        item.group.as_deref(),
        item.coalesce_key.as_deref(),
    );
    Ok(match txn.enqueue(stored)? {
        Some(e) => ItemOutcome::Enqueued(e),
        None => ItemOutcome::Full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::memory::MemoryReceiver;
    use crate::push::receiver::test_requests::{keys, limits};

    #[test]
    fn items_are_scoped_by_the_token_name() {
        let mut rx = MemoryReceiver::new(None);
        let l = limits();
        let stored = |o: ItemOutcome| match o {
            ItemOutcome::Enqueued(e) => e,
            other => panic!("{other:?}"),
        };
        let e = stored(
            apply_item(
                &mut rx,
                &NewItem::new(b"FORGED".to_vec(), "inv-7"),
                Some("evil"),
                &l,
            )
            .unwrap(),
        );
        assert!(!e.deduplicated);
        let e = stored(
            apply_item(
                &mut rx,
                &NewItem::new(b"REAL".to_vec(), "inv-7"),
                Some("billing"),
                &l,
            )
            .unwrap(),
        );
        assert!(!e.deduplicated, "another token's key does not dedup");
        let e = stored(
            apply_item(
                &mut rx,
                &NewItem::new(b"AGAIN".to_vec(), "inv-7"),
                Some("billing"),
                &l,
            )
            .unwrap(),
        );
        assert!(e.deduplicated);
        // Without a token file there is no name: the key as given.
        stored(apply_item(&mut rx, &NewItem::new(b"LOCAL".to_vec(), "inv-7"), None, &l).unwrap());
        let shared = ReceiveLimits {
            shared_keys: true,
            ..l
        };
        let e = stored(
            apply_item(
                &mut rx,
                &NewItem::new(b"SHARED".to_vec(), "inv-7"),
                Some("other"),
                &shared,
            )
            .unwrap(),
        );
        assert!(e.deduplicated, "--shared-keys: the key as given");
        assert_eq!(
            keys(&rx).into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            ["evil:inv-7", "billing:inv-7", "inv-7"]
        );
        let before = rx.clone();
        assert_eq!(
            apply_item(
                &mut rx,
                &NewItem::new(b"x".to_vec(), "a\0b"),
                Some("billing"),
                &l
            )
            .unwrap(),
            ItemOutcome::Refused(
                "the Idempotency-Key header is refused: the idempotency key contains a NUL \
                 byte, which no key may contain"
                    .into()
            )
        );
        assert_eq!(rx, before);
        rx.set_max_depth(Some(3));
        assert_eq!(
            apply_item(
                &mut rx,
                &NewItem::new(b"x".to_vec(), "new"),
                Some("billing"),
                &l
            )
            .unwrap(),
            ItemOutcome::Full
        );
    }
}
