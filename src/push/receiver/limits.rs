//! The receiver's per-entry policy ([`ReceiveLimits`]) and the key a
//! receiving spool stores for a key a sender sent ([`scoped_key`]).

use crate::item::NewItem;

/// The receiver's per-entry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveLimits {
    /// Largest payload accepted, in bytes (`serve --max-payload`).
    pub max_payload: u64,
    /// Longest key accepted, in bytes (of the key as sent).
    pub max_key_len: usize,
    /// Store keys as they come instead of qualifying each with its
    /// sender (`serve --shared-keys`): one key space for all clients and
    /// tokens, so that a key from one deduplicates an item from another.
    /// Off by default (see [`ReceiveLimits::stored_key`]).
    pub shared_keys: bool,
}

/// The default longest key: 1 KiB, far above any uuid-based key.
pub const DEFAULT_MAX_KEY_LEN: usize = 1024;

impl Default for ReceiveLimits {
    fn default() -> Self {
        ReceiveLimits {
            max_payload: crate::ops::input::DEFAULT_MAX_PAYLOAD,
            max_key_len: DEFAULT_MAX_KEY_LEN,
            shared_keys: false,
        }
    }
}

impl ReceiveLimits {
    /// The key the receiving spool stores for `key` sent by `sender` (a
    /// push client id, or a token's name on `/v1/items`; `None`: no
    /// sender to scope by): [`scoped_key`], or `key` itself with
    /// [`ReceiveLimits::shared_keys`] or without a sender.
    pub fn stored_key(&self, sender: Option<&str>, key: &str) -> String {
        match sender {
            Some(sender) if !self.shared_keys => scoped_key(sender, key),
            _ => key.to_string(),
        }
    }

    /// The item a receiving spool stores for one that `sender` sent (see
    /// [`ReceiveLimits::stored_key`]): its key, group and coalesce key
    /// qualified alike, so that one sender's group never holds up another
    /// sender's items and one sender's coalesce key never replaces
    /// another's. An empty group or coalesce key is none.
    pub fn stored_item(
        &self,
        sender: Option<&str>,
        payload: &[u8],
        key: &str,
        group: Option<&str>,
        coalesce_key: Option<&str>,
    ) -> NewItem {
        let scoped = |v: Option<&str>| {
            v.filter(|v| !v.is_empty())
                .map(|v| self.stored_key(sender, v))
        };
        NewItem {
            payload: payload.to_vec(),
            key: self.stored_key(sender, key),
            group: scoped(group),
            coalesce_key: scoped(coalesce_key),
        }
    }
}

/// `key` qualified by its sender: `<sender>:<key>`, the key a receiving
/// spool stores for a pushed key (the sender is the client id) or a
/// `/v1/items` key (the token's name), and so also the `Idempotency-Key`
/// it sends downstream. An empty key stays empty (the item has no key;
/// downstream it is identified by the receiving spool's `<uuid>:<id>`).
///
/// The scope always ends at the first `:`: a `%` or `:` in the sender is
/// written `%25` or `%3A` (client ids may hold `:`; ids in the usual
/// forms — spool uuids, host names — come out unchanged), so no two
/// senders can ever produce the same stored key.
///
/// ```
/// use spool::push::receiver::scoped_key;
/// assert_eq!(scoped_key("edge-1", "order-42"), "edge-1:order-42");
/// assert_eq!(scoped_key("edge-1", ""), "");
/// assert_eq!(scoped_key("a:b", "c"), "a%3Ab:c");
/// assert_ne!(scoped_key("a:b", "c"), scoped_key("a", "b:c"));
/// ```
pub fn scoped_key(sender: &str, key: &str) -> String {
    if key.is_empty() {
        return String::new();
    }
    let mut out = String::with_capacity(sender.len() + 1 + key.len());
    for c in sender.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            c => out.push(c),
        }
    }
    out.push(':');
    out.push_str(key);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::push::memory::MemoryReceiver;
    use crate::push::receiver::apply_push;
    use crate::push::receiver::test_requests::{accepted, from, item, keys, limits, push};

    #[test]
    fn keys_are_scoped_per_client() {
        let mut rx = MemoryReceiver::new(None);
        // A client that may push only as edge-* sends billing's key first.
        let a = accepted(push(
            &mut rx,
            &from("edge-evil", vec![item(1, "o-42", b"FORGED")]),
        ));
        assert_eq!(a.response.applied, 1);
        let a = accepted(push(
            &mut rx,
            &from("billing", vec![item(1, "o-42", b"REAL")]),
        ));
        assert_eq!((a.response.applied, a.deduplicated), (1, 0));
        assert_eq!(
            keys(&rx),
            [
                ("edge-evil:o-42".to_string(), "FORGED".to_string()),
                ("billing:o-42".to_string(), "REAL".to_string())
            ]
        );
        // The same client's key still dedups; an empty key stays empty.
        let a = accepted(push(
            &mut rx,
            &from(
                "billing",
                vec![item(2, "o-42", b"AGAIN"), item(3, "", b"nokey")],
            ),
        ));
        assert_eq!((a.response.applied, a.deduplicated), (2, 1));
        assert_eq!(keys(&rx)[2], (String::new(), "nokey".to_string()));
        // Client ids with ':' cannot borrow another client's scope.
        push(&mut rx, &from("a:b", vec![item(1, "c", b"1")]));
        let a = accepted(push(&mut rx, &from("a", vec![item(1, "b:c", b"2")])));
        assert_eq!(a.deduplicated, 0);
        assert_eq!(keys(&rx)[3].0, "a%3Ab:c");
        assert_eq!(keys(&rx)[4].0, "a:b:c");
    }

    #[test]
    fn shared_keys_keep_one_key_space() {
        let mut rx = MemoryReceiver::new(None);
        let shared = ReceiveLimits {
            shared_keys: true,
            ..limits()
        };
        apply_push(&mut rx, &from("x", vec![item(1, "k", b"X")]), &shared).unwrap();
        let o = apply_push(&mut rx, &from("y", vec![item(1, "k", b"Y")]), &shared).unwrap();
        assert_eq!(accepted(o).deduplicated, 1);
        assert_eq!(keys(&rx), [("k".to_string(), "X".to_string())]);
    }
}
