//! `size`: the number of pending items, held ones included.

use crate::error::Result;
use crate::queue::Queue;

/// The number of pending items (held included), as [`Queue::size`].
pub fn size(queue: &dyn Queue) -> Result<u64> {
    queue.size()
}
