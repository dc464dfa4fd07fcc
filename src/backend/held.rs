//! What a SQL receiving transaction holds back so that it writes many
//! rows to a statement: new items without a coalesce key and entry
//! records (SQLite's `SqliteReceive`, PostgreSQL's `PgReceive`).
//!
//! The backend writes what is held before anything reads what it would
//! change, when [`Held::hold_item`] or [`Held::hold_record`] say so, and
//! when the transaction ends. A key among the held items is found with
//! [`Held::owner`], so a keyed entry sees the entries before it.

use crate::item::{ItemId, NewItem};
use crate::push::receiver::EntryRecord;
use std::collections::HashMap;

/// Payload bytes of held items that are written at once, whatever their
/// number: holding them copies what the requests already hold.
const HELD_BYTES: usize = 4 << 20;

/// An entry's outcome not written yet.
pub(crate) struct HeldRecord {
    pub client: String,
    pub seq: u64,
    pub outcome: &'static str,
    pub digest: Option<String>,
    pub reason: Option<String>,
}

/// Held items and records; `rows` held of either kind are written.
#[derive(Default)]
pub(crate) struct Held {
    rows: usize,
    items: Vec<(ItemId, NewItem)>,
    bytes: usize,
    keys: HashMap<String, ItemId>,
    records: Vec<HeldRecord>,
}

impl Held {
    pub fn new(rows: usize) -> Held {
        Held {
            rows,
            ..Held::default()
        }
    }

    /// The held item that carries the non-empty `key`, if any.
    pub fn owner(&self, key: &str) -> Option<ItemId> {
        self.keys.get(key).copied()
    }

    /// Hold `item` under `id`; whether what is held should be written now.
    pub fn hold_item(&mut self, id: ItemId, item: NewItem) -> bool {
        if !item.key.is_empty() {
            self.keys.insert(item.key.clone(), id);
        }
        self.bytes += item.payload.len();
        self.items.push((id, item));
        self.items.len() >= self.rows || self.bytes >= HELD_BYTES
    }

    /// The held items, to be written; nothing is held after.
    pub fn take_items(&mut self) -> Vec<(ItemId, NewItem)> {
        self.bytes = 0;
        self.keys.clear();
        std::mem::take(&mut self.items)
    }

    /// Hold the outcome of `client`'s entry `seq`; whether the held
    /// records should be written now.
    pub fn hold_record(&mut self, client: &str, seq: u64, record: EntryRecord<'_>) -> bool {
        let (outcome, digest, reason) = match record {
            EntryRecord::Applied { digest } => ("applied", Some(digest), None),
            EntryRecord::Rejected { digest, reason } => ("rejected", digest, Some(reason)),
        };
        self.records.push(HeldRecord {
            client: client.to_string(),
            seq,
            outcome,
            digest: digest.map(str::to_string),
            reason: reason.map(str::to_string),
        });
        self.records.len() >= self.rows
    }

    /// The held records, to be written; nothing is held after.
    pub fn take_records(&mut self) -> Vec<HeldRecord> {
        std::mem::take(&mut self.records)
    }
}
