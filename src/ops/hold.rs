//! `hold`: keep pending items but make replay skip them until released.
//! Held items stay listed and counted (pending includes held).

use super::ids::IdsReport;
use crate::error::Result;
use crate::item::ItemId;
use crate::queue::Queue;

/// Options for [`hold`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct HoldOptions {
    /// Distinct ids (see [`super::ids::resolve`]).
    pub ids: Vec<ItemId>,
}

/// Hold `opts.ids` in one [`Queue::set_held`] call. Holding a held item
/// is not an error.
pub fn hold(queue: &dyn Queue, opts: &HoldOptions) -> Result<IdsReport> {
    if opts.ids.is_empty() {
        return Ok(IdsReport::default());
    }
    let flags = queue.set_held(&opts.ids, true)?;
    IdsReport::from_flags(&opts.ids, &flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn hold_then_release() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let r = hold(&*s, &HoldOptions { ids: vec![a, 5] }).unwrap();
        assert_eq!(
            r,
            IdsReport {
                changed: vec![a],
                unknown: vec![5]
            }
        );
        assert!(s.get(a).unwrap().unwrap().held);
        assert_eq!(s.size().unwrap(), 1);
        let r = super::super::release::release(
            &*s,
            &super::super::release::ReleaseOptions { ids: vec![a] },
        )
        .unwrap();
        assert_eq!(r.changed, vec![a]);
        assert!(!s.get(a).unwrap().unwrap().held);
    }
}
