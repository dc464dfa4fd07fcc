//! `attempts`: read or set an item's durable attempt count (to give an
//! item a fresh retry budget, or to push it toward the dead-letter set).

use crate::error::Result;
use crate::item::ItemId;
use crate::queue::Queue;

/// Options for [`attempts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AttemptsOptions {
    /// The item.
    pub id: ItemId,
    /// The new count; `None` only reads it.
    pub set: Option<u32>,
}

/// An item's attempt count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptsReport {
    /// The item.
    pub id: ItemId,
    /// The count now.
    pub attempts: u32,
    /// The count before a `set`.
    pub previous: Option<u32>,
}

/// Read (and, with `set`, change) the attempt count of a pending item.
/// An id that names no pending item is [`crate::Error::InvalidInput`].
pub fn attempts(queue: &dyn Queue, opts: &AttemptsOptions) -> Result<AttemptsReport> {
    let item = queue
        .get(opts.id)?
        .ok_or_else(|| super::no_pending_item(opts.id))?;
    match opts.set {
        None => Ok(AttemptsReport {
            id: opts.id,
            attempts: item.attempts,
            previous: None,
        }),
        Some(n) => {
            if !queue.set_attempts(opts.id, n)? {
                return Err(super::no_pending_item(opts.id));
            }
            Ok(AttemptsReport {
                id: opts.id,
                attempts: n,
                previous: Some(item.attempts),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn read_and_set() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let r = attempts(
            &*s,
            &AttemptsOptions {
                id: a,
                set: Some(4),
            },
        )
        .unwrap();
        assert_eq!((r.attempts, r.previous), (4, Some(0)));
        let r = attempts(&*s, &AttemptsOptions { id: a, set: None }).unwrap();
        assert_eq!((r.attempts, r.previous), (4, None));
        let e = attempts(&*s, &AttemptsOptions { id: 42, set: None }).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Data);
    }
}
