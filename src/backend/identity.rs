//! A spool's push identity across export and import (SPEC §7: the push
//! sequence counter "survives … export/import between spools of the same
//! uuid").
//!
//! An export begins with a [`SpoolHeader`]: the exporting spool's uuid
//! (its client id at a push receiver) and its [`PushState`]. An import
//! that reads one calls [`crate::Queue::import_with_identity`], which
//! decides, inside the import's one commit, what becomes of it:
//!
//! * **adopt** (`import --identity`): the target takes the header's uuid
//!   and push state — only when it is fresh (no pending item, no dead
//!   letter, no push number ever assigned), else
//!   [`Error::IdentityRefused`] and nothing changes;
//! * **same uuid** (without `--identity`): the push states merge — the
//!   highest number assigned and the watermark are each the larger of
//!   the two;
//! * **another uuid** (without `--identity`): the header is ignored and
//!   the records come in unsent, as from an export without a header.
//!
//! When the identity is kept (adopted or merged), a record keeps its
//! `push_seq` only if it is pending (not held, not dead), its number is
//! above the resulting watermark and at most the resulting highest number,
//! and no other item (of the target, or earlier in the batch) and no skip
//! has that number; any other record comes in unsent. Items of the
//! target in flight at or below the resulting watermark lose their numbers
//! (they are sent again as new entries: a possible duplicate at the
//! receiver, never a loss). A number between the watermark and the
//! highest number that no item carries is sent as a `skip` entry, as
//! after `done --force`. This module holds that rule once for every
//! backend; the backends store its outcome.

use crate::error::{Error, Result};
use crate::item::{PushState, Record, RecordState};
pub use crate::queue::{IdentityOutcome, SpoolHeader};
use std::collections::BTreeSet;

/// The target as the rule needs it, read inside the import's commit.
pub(crate) struct Target {
    pub uuid: String,
    pub push: PushState,
    pub pending: u64,
    pub dead: u64,
}

/// One import's identity decision, and the numbers kept so far.
pub(crate) struct Merge {
    pub outcome: IdentityOutcome,
    /// The uuid to store, when it changes.
    pub new_uuid: Option<String>,
    /// The push state after the import (unchanged for `Ignored`).
    pub push: PushState,
    /// The target's watermark before the import: its in-flight items
    /// numbered in `(old_acked, push.acked]` lose their numbers.
    pub old_acked: u64,
    kept: BTreeSet<u64>,
}

impl Merge {
    /// Decide what the header does to `target`; for `adopt`, refuse
    /// (changing nothing) unless the target is fresh.
    pub fn begin(target: Target, header: &SpoolHeader, adopt: bool) -> Result<Merge> {
        header.check().map_err(Error::InvalidInput)?;
        let t = &target.push;
        if adopt {
            let mut why = Vec::new();
            if target.pending > 0 {
                why.push(format!("holds {} pending items", target.pending));
            }
            if target.dead > 0 {
                why.push(format!("holds {} dead letters", target.dead));
            }
            if t.last_assigned > 0 || t.acked > 0 || !t.skips.is_empty() {
                why.push(format!(
                    "has pushed as {} (push sequence numbers up to {} assigned)",
                    target.uuid, t.last_assigned
                ));
            }
            if !why.is_empty() {
                return Err(Error::IdentityRefused(format!(
                    "cannot adopt the identity of spool {} (import --identity): this spool {}; \
                     only a fresh spool can take another spool's identity; nothing was imported",
                    header.uuid,
                    why.join(" and ")
                )));
            }
            return Ok(Merge {
                outcome: IdentityOutcome::Adopted,
                new_uuid: (target.uuid != header.uuid).then(|| header.uuid.clone()),
                push: header.push.clone(),
                old_acked: 0,
                kept: BTreeSet::new(),
            });
        }
        if target.uuid != header.uuid {
            return Ok(Merge {
                outcome: IdentityOutcome::Ignored,
                new_uuid: None,
                push: target.push.clone(),
                old_acked: t.acked,
                kept: BTreeSet::new(),
            });
        }
        let h = &header.push;
        let last_assigned = t.last_assigned.max(h.last_assigned);
        let acked = t.acked.max(h.acked);
        let skips: BTreeSet<u64> = t
            .skips
            .iter()
            .chain(&h.skips)
            .copied()
            .filter(|s| *s > acked && *s <= last_assigned)
            .collect();
        Ok(Merge {
            outcome: IdentityOutcome::Kept,
            new_uuid: None,
            push: PushState {
                last_assigned,
                acked,
                skips: skips.into_iter().collect(),
            },
            old_acked: t.acked,
            kept: BTreeSet::new(),
        })
    }

    /// True when records may keep their numbers (adopted or kept).
    pub fn keeps_numbers(&self) -> bool {
        self.outcome != IdentityOutcome::Ignored
    }

    /// The push number record `r` (the record as read, before the backend
    /// normalised it) is stored with; `in_use(seq)` says whether an item
    /// of the target already carries `seq`.
    pub fn seq_for(
        &mut self,
        r: &Record,
        in_use: impl FnOnce(u64) -> Result<bool>,
    ) -> Result<Option<u64>> {
        let Some(seq) = r.item.push_seq else {
            return Ok(None);
        };
        if !self.keeps_numbers()
            || r.state != RecordState::Pending
            || seq <= self.push.acked
            || seq > self.push.last_assigned
            || self.kept.contains(&seq)
            || self.push.skips.binary_search(&seq).is_ok()
        {
            return Ok(None);
        }
        // The target's own in-flight items are only looked at when the
        // identity was kept (an adopting target is fresh).
        if self.outcome == IdentityOutcome::Kept && in_use(seq)? {
            return Ok(None);
        }
        self.kept.insert(seq);
        Ok(Some(seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::Item;
    use crate::time::Timestamp;

    const U1: &str = "3f0c8a52-5a4e-4c77-9a3e-1f6f1d2b9c10";
    const U2: &str = "7a1e0f00-1111-4222-8333-944455556666";

    fn push(last_assigned: u64, acked: u64) -> PushState {
        PushState {
            last_assigned,
            acked,
            skips: Vec::new(),
        }
    }

    fn target(uuid: &str, p: PushState, pending: u64) -> Target {
        Target {
            uuid: uuid.into(),
            push: p,
            pending,
            dead: 0,
        }
    }

    fn rec(seq: Option<u64>, state: RecordState) -> Record {
        let mut item = Item::new(1, b"x".to_vec(), String::new(), Timestamp::from_secs(0));
        item.push_seq = seq;
        Record {
            item,
            state,
            dead_at: None,
            delivery: None,
        }
    }

    #[test]
    fn adopting_needs_a_fresh_target() {
        let h = SpoolHeader {
            uuid: U1.into(),
            push: push(7, 4),
        };
        let m = Merge::begin(target(U2, push(0, 0), 0), &h, true).unwrap();
        assert_eq!(m.outcome, IdentityOutcome::Adopted);
        assert_eq!(m.new_uuid.as_deref(), Some(U1));
        assert_eq!(m.push, push(7, 4));
        for t in [target(U2, push(0, 0), 1), target(U2, push(1, 0), 0)] {
            let e = Merge::begin(t, &h, true).err().unwrap();
            assert_eq!(e.kind(), crate::ErrorKind::CannotCreate, "{e}");
        }
        let mut dead = target(U2, push(0, 0), 0);
        dead.dead = 1;
        assert!(Merge::begin(dead, &h, true).is_err());
    }

    #[test]
    fn same_uuid_merges_and_keeps_numbers_above_the_watermark() {
        let h = SpoolHeader {
            uuid: U1.into(),
            push: push(9, 4),
        };
        let mut m = Merge::begin(target(U1, push(6, 5), 3), &h, false).unwrap();
        assert_eq!(m.outcome, IdentityOutcome::Kept);
        assert_eq!((m.push.last_assigned, m.push.acked, m.old_acked), (9, 5, 5));
        let no = |_| Ok(false);
        assert_eq!(
            m.seq_for(&rec(Some(5), RecordState::Pending), no).unwrap(),
            None
        );
        assert_eq!(
            m.seq_for(&rec(Some(6), RecordState::Pending), no).unwrap(),
            Some(6)
        );
        assert_eq!(
            m.seq_for(&rec(Some(6), RecordState::Pending), no).unwrap(),
            None,
            "twice"
        );
        assert_eq!(
            m.seq_for(&rec(Some(7), RecordState::Held), no).unwrap(),
            None
        );
        assert_eq!(
            m.seq_for(&rec(Some(7), RecordState::Dead), no).unwrap(),
            None
        );
        assert_eq!(
            m.seq_for(&rec(Some(10), RecordState::Pending), no).unwrap(),
            None
        );
        let yes = |_| Ok(true);
        assert_eq!(
            m.seq_for(&rec(Some(8), RecordState::Pending), yes).unwrap(),
            None
        );
        assert_eq!(
            m.seq_for(&rec(None, RecordState::Pending), no).unwrap(),
            None
        );
    }

    #[test]
    fn another_uuid_is_ignored() {
        let h = SpoolHeader {
            uuid: U1.into(),
            push: push(9, 4),
        };
        let mut m = Merge::begin(target(U2, push(2, 1), 3), &h, false).unwrap();
        assert_eq!(m.outcome, IdentityOutcome::Ignored);
        assert_eq!(m.push, push(2, 1));
        assert_eq!(
            m.seq_for(&rec(Some(6), RecordState::Pending), |_| Ok(false))
                .unwrap(),
            None
        );
    }
}
