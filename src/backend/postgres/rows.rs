//! The mapping between PostgreSQL rows and items: ids and counts as
//! `int8`, text without NUL, reading a row into an [`Item`] or a
//! [`DeadLetter`], and the item columns of each schema version
//! ([`by_version`]).

use crate::item::{DeadLetter, Item, ItemId};
use crate::time::Timestamp;
use postgres::Row;

pub(super) fn id_param(id: ItemId) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

pub(super) fn u64_of(v: i64) -> u64 {
    v.max(0) as u64
}

/// The NUL byte is the one character PostgreSQL text cannot hold.
pub(super) fn text(s: &str) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{fffd}")
    } else {
        s.to_string()
    }
}

pub(super) fn item_from_row(r: &Row) -> Item {
    Item {
        id: u64_of(r.get(0)),
        payload: r.get(1),
        key: String::from_utf8_lossy(r.get::<_, &[u8]>(2)).into_owned(),
        attempts: u32::try_from(r.get::<_, i64>(3).max(0)).unwrap_or(u32::MAX),
        enqueued_at: r.get::<_, Option<i64>>(4).map(Timestamp::from_millis),
        next_retry_at: r.get::<_, Option<i64>>(5).map(Timestamp::from_millis),
        last_error: r.get(6),
        held: r.get(7),
        push_seq: r.get::<_, Option<i64>>(8).map(u64_of),
        group: r.get(9),
        coalesce_key: r.get(10),
    }
}

pub(super) fn dead_from_row(r: &Row) -> DeadLetter {
    DeadLetter {
        item: item_from_row(r),
        dead_at: Timestamp::from_millis(r.get(11)),
    }
}

/// A statement that reads the item columns [`item_from_row`] expects,
/// between `$head` and `$tail`: `(schema version 2, schema version 1)`.
/// Version 1 has no group or coalesce key; they read as NULL (see
/// [`super::PostgresQueue::pick`]).
macro_rules! by_version {
    ($head:literal, $tail:literal) => {
        (
            concat!(
                $head,
                "id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                 grp, coalesce_key",
                $tail
            ),
            concat!(
                $head,
                "id, payload, key, attempts, enqueued_at, next_retry_at, last_error, held, push_seq, \
                 NULL::text, NULL::text",
                $tail
            ),
        )
    };
}
pub(super) use by_version;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_without_nul() {
        assert_eq!(text("a\0b"), "a\u{fffd}b");
        assert_eq!(text("ab"), "ab");
    }
}
