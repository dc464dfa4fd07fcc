//! `show`: one item, pending, dead or delivered and retained.

use crate::error::Result;
use crate::item::{DeadLetter, DeliveredItem, Item, ItemId};
use crate::queue::Queue;

/// An item found by [`show`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Shown {
    /// A pending (possibly held) item.
    Pending(Item),
    /// A dead letter.
    Dead(DeadLetter),
    /// A delivered item kept for the retention window (SPEC §9).
    Delivered(DeliveredItem),
}

impl Shown {
    /// The item, whichever set it is in.
    pub fn item(&self) -> &Item {
        match self {
            Shown::Pending(i) => i,
            Shown::Dead(d) => &d.item,
            Shown::Delivered(d) => &d.item,
        }
    }
}

/// Look `id` up among pending items, then among dead letters, then among
/// retained delivered items. An id in none is
/// [`crate::Error::InvalidInput`].
pub fn show(queue: &dyn Queue, id: ItemId) -> Result<Shown> {
    if let Some(item) = queue.get(id)? {
        return Ok(Shown::Pending(item));
    }
    if let Some(dl) = queue.dead_get(id)? {
        return Ok(Shown::Dead(dl));
    }
    if let Some(d) = queue.delivered_get(id)? {
        return Ok(Shown::Delivered(d));
    }
    Err(crate::Error::InvalidInput(format!(
        "no item with id {id} (not pending, not a dead letter, not a retained delivered item)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn pending_dead_and_unknown() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let b = s.enqueue(b"b", "").unwrap().id;
        s.dead_letter(b, "rejected").unwrap();
        assert!(matches!(show(&*s, a).unwrap(), Shown::Pending(_)));
        match show(&*s, b).unwrap() {
            Shown::Dead(d) => assert_eq!(d.item.last_error.as_deref(), Some("rejected")),
            other => panic!("{other:?}"),
        }
        assert_eq!(show(&*s, 9).unwrap_err().kind(), crate::ErrorKind::Data);
    }
}
