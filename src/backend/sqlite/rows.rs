//! The mapping between SQLite rows and items: the column lists of each
//! schema version, reading a row into an [`Item`], a [`DeadLetter`] or a
//! [`DeliveredItem`], and binding a payload.

use crate::item::{DeadLetter, DeliveredItem, Delivery, Evidence, Item, ItemId};
use crate::time::Timestamp;
use rusqlite::types::{ToSqlOutput, Type, ValueRef};
use rusqlite::Row;

/// Stored in the NOT NULL `enqueued_at` column for a pending item whose
/// enqueue time is unknown (imported from a reference NDJSON spool).
/// `Timestamp::as_secs` can never return it, so it is never a real time.
pub(super) const UNKNOWN_ENQUEUED_AT: i64 = i64::MIN;

/// The item columns of a spool database, in the order [`item_from_row`]
/// reads them.
pub(super) const ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, group_name, coalesce_key";
/// The same for a schema version 2 database: no group or coalesce key.
pub(super) const V2_ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, NULL, NULL";
/// The same for a schema version 1 database: no push number either.
pub(super) const V1_ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, NULL, NULL, NULL";
/// The same for a reference database: the added columns read as their
/// defaults.
pub(super) const REFERENCE_ITEM_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, NULL, NULL, 0, NULL, NULL, NULL";
pub(super) const DEAD_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, group_name, coalesce_key, dead_at";
pub(super) const V2_DEAD_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, push_seq, NULL, NULL, dead_at";
pub(super) const V1_DEAD_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, next_retry_at, \
     last_error, held, NULL, NULL, NULL, dead_at";

/// The columns of a retained delivered item, in the order
/// [`delivered_from_row`] reads them.
pub(super) const DELIVERED_COLUMNS: &str =
    "id, payload, idempotency_key, attempts, enqueued_at, NULL, \
     last_error, 0, NULL, group_name, coalesce_key, delivered_at, evidence";

/// Bind a payload: valid UTF-8 as TEXT (what reference readers expect),
/// anything else as a BLOB, which the TEXT column stores unchanged.
pub(super) fn payload_value(payload: &[u8]) -> ToSqlOutput<'_> {
    match std::str::from_utf8(payload) {
        Ok(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        Err(_) => ToSqlOutput::Borrowed(ValueRef::Blob(payload)),
    }
}

fn conversion(idx: usize, ty: Type, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, ty, what.into())
}

pub(super) fn read_id(row: &Row<'_>, idx: usize) -> rusqlite::Result<ItemId> {
    let v: i64 = row.get(idx)?;
    ItemId::try_from(v).map_err(|_| conversion(idx, Type::Integer, format!("negative id {v}")))
}

fn read_payload(row: &Row<'_>, idx: usize) -> rusqlite::Result<Vec<u8>> {
    match row.get_ref(idx)? {
        ValueRef::Text(b) | ValueRef::Blob(b) => Ok(b.to_vec()),
        other => Err(rusqlite::Error::InvalidColumnType(
            idx,
            "payload".into(),
            other.data_type(),
        )),
    }
}

/// Text written by other programs may not be UTF-8; keep what can be kept.
pub(super) fn read_text(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<String>> {
    match row.get_ref(idx)? {
        ValueRef::Null => Ok(None),
        ValueRef::Text(b) | ValueRef::Blob(b) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        ValueRef::Integer(i) => Ok(Some(i.to_string())),
        ValueRef::Real(f) => Ok(Some(f.to_string())),
    }
}

fn read_attempts(row: &Row<'_>, idx: usize) -> rusqlite::Result<u32> {
    let v: i64 = row.get(idx)?;
    Ok(clamp_attempts(v))
}

/// Attempt counts outside `u32` (only a foreign writer can store them)
/// are clamped.
pub(super) fn clamp_attempts(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

pub(super) fn read_enqueued_at(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Timestamp>> {
    Ok(match row.get::<_, Option<i64>>(idx)? {
        None | Some(UNKNOWN_ENQUEUED_AT) => None,
        Some(s) => Some(Timestamp::from_secs(s)),
    })
}

fn read_millis(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Timestamp>> {
    Ok(row.get::<_, Option<i64>>(idx)?.map(Timestamp::from_millis))
}

/// An item from the columns of [`ITEM_COLUMNS`] (or [`DEAD_COLUMNS`]).
pub(super) fn item_from_row(row: &Row<'_>) -> rusqlite::Result<Item> {
    Ok(Item {
        id: read_id(row, 0)?,
        payload: read_payload(row, 1)?,
        key: read_text(row, 2)?.unwrap_or_default(),
        attempts: read_attempts(row, 3)?,
        enqueued_at: read_enqueued_at(row, 4)?,
        next_retry_at: read_millis(row, 5)?,
        last_error: read_text(row, 6)?,
        held: row.get::<_, Option<i64>>(7)?.unwrap_or(0) != 0,
        push_seq: read_seq(row, 8)?,
        group: read_text(row, 9)?,
        coalesce_key: read_text(row, 10)?,
    })
}

pub(super) fn dead_from_row(row: &Row<'_>) -> rusqlite::Result<DeadLetter> {
    Ok(DeadLetter {
        item: item_from_row(row)?,
        dead_at: Timestamp::from_millis(row.get(11)?),
    })
}

pub(super) fn delivered_from_row(row: &Row<'_>) -> rusqlite::Result<DeliveredItem> {
    let evidence: String = row.get(12)?;
    Ok(DeliveredItem {
        item: item_from_row(row)?,
        delivery: Delivery {
            at: Timestamp::from_millis(row.get(11)?),
            evidence: Evidence::decode(&evidence).ok_or_else(|| {
                conversion(
                    12,
                    Type::Text,
                    format!("unknown delivery evidence {evidence:?}"),
                )
            })?,
        },
    })
}

/// A push sequence number, if set (only a foreign writer could store a
/// negative one; it reads as none).
pub(super) fn read_seq(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    Ok(row
        .get::<_, Option<i64>>(idx)?
        .and_then(|v| u64::try_from(v).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unknown_time_marker_is_never_a_real_time() {
        for ms in [i64::MIN, i64::MIN + 1, -1, 0, i64::MAX] {
            assert_ne!(Timestamp::from_millis(ms).as_secs(), UNKNOWN_ENQUEUED_AT);
        }
    }

    #[test]
    fn attempts_are_clamped() {
        assert_eq!(clamp_attempts(-3), 0);
        assert_eq!(clamp_attempts(7), 7);
        assert_eq!(clamp_attempts(i64::MAX), u32::MAX);
    }

    #[test]
    fn payloads_bind_as_text_or_blob() {
        assert!(matches!(
            payload_value(b"ok"),
            ToSqlOutput::Borrowed(ValueRef::Text(_))
        ));
        assert!(matches!(
            payload_value(b"\xff"),
            ToSqlOutput::Borrowed(ValueRef::Blob(_))
        ));
    }
}
