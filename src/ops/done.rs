//! `done`: remove pending items by id (an operator's decision, or a
//! delivery made by hand). All ids in one commit; unknown ids change
//! nothing and are reported.

use super::ids::IdsReport;
use crate::error::Result;
use crate::item::ItemId;
use crate::queue::Queue;

/// Options for [`done`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DoneOptions {
    /// Distinct ids (see [`super::ids::resolve`]).
    pub ids: Vec<ItemId>,
}

/// Mark `opts.ids` done in one [`Queue::mark_done`] call.
pub fn done(queue: &dyn Queue, opts: &DoneOptions) -> Result<IdsReport> {
    if opts.ids.is_empty() {
        return Ok(IdsReport::default());
    }
    let flags = queue.mark_done(&opts.ids)?;
    IdsReport::from_flags(&opts.ids, &flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn known_and_unknown() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let r = done(&*s, &DoneOptions { ids: vec![a, 99] }).unwrap();
        assert_eq!(
            r,
            IdsReport {
                changed: vec![a],
                unknown: vec![99]
            }
        );
        assert_eq!(s.size().unwrap(), 0);
    }
}
