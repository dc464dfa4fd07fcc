//! `release`: let replay attempt held items again.

use super::ids::IdsReport;
use crate::error::Result;
use crate::item::ItemId;
use crate::queue::Queue;

/// Options for [`release`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ReleaseOptions {
    /// Distinct ids (see [`super::ids::resolve`]).
    pub ids: Vec<ItemId>,
}

/// Release `opts.ids` in one [`Queue::set_held`] call. Releasing an item
/// that is not held is not an error.
pub fn release(queue: &dyn Queue, opts: &ReleaseOptions) -> Result<IdsReport> {
    if opts.ids.is_empty() {
        return Ok(IdsReport::default());
    }
    let flags = queue.set_held(&opts.ids, false)?;
    IdsReport::from_flags(&opts.ids, &flags)
}
