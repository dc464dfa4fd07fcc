//! Where each live item's last line is, as a scan of the main file finds
//! it. Ids mostly first appear in increasing order (`verify` checks that
//! they do), so a sorted vector takes nearly every put at its end; a line
//! of an earlier id (an update, a delivery) is found by binary search,
//! and a delivered item leaves a hole that a later put of its id (a
//! requeue) fills again. The rare put of an earlier id the vector never
//! held goes to a map beside it.

use crate::item::ItemId;
use std::collections::BTreeMap;

/// A hole: the item is not live (its offset means nothing).
const GONE: usize = usize::MAX;

#[derive(Default)]
pub(super) struct LiveLines {
    /// Increasing ids, each with its last line (offset, length) or
    /// [`GONE`].
    sorted: Vec<(ItemId, u64, usize)>,
    /// Lines of ids below the vector's last that it does not hold.
    others: BTreeMap<ItemId, (u64, usize)>,
}

impl LiveLines {
    /// A put: `id`'s last line is now at `off`, `len` bytes.
    pub fn put(&mut self, id: ItemId, off: u64, len: usize) {
        match self.sorted.last() {
            Some(&(last, _, _)) if id <= last => {
                match self.sorted.binary_search_by_key(&id, |e| e.0) {
                    Ok(i) => self.sorted[i] = (id, off, len),
                    Err(_) => {
                        self.others.insert(id, (off, len));
                    }
                }
            }
            _ => self.sorted.push((id, off, len)),
        }
    }

    /// A done line: `id` is no longer live. Whether it was.
    pub fn remove(&mut self, id: ItemId) -> bool {
        match self.sorted.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => std::mem::replace(&mut self.sorted[i].2, GONE) != GONE,
            Err(_) => self.others.remove(&id).is_some(),
        }
    }

    /// The live items' lines, in id order (in the vector's own memory).
    pub fn into_vec(self) -> Vec<(ItemId, u64, usize)> {
        let LiveLines { mut sorted, others } = self;
        sorted.retain(|e| e.2 != GONE);
        if !others.is_empty() {
            sorted.extend(others.into_iter().map(|(id, (off, len))| (id, off, len)));
            sorted.sort_unstable_by_key(|e| e.0);
        }
        sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The same answers as a map, whatever the order of ids.
        #[test]
        fn agrees_with_a_map(ops in proptest::collection::vec((any::<bool>(), 1u64..40, 0u64..1000), 0..300)) {
            let mut lines = LiveLines::default();
            let mut map = BTreeMap::new();
            for (is_put, id, off) in ops {
                if is_put {
                    lines.put(id, off, off as usize % 7);
                    map.insert(id, (off, off as usize % 7));
                } else {
                    prop_assert_eq!(lines.remove(id), map.remove(&id).is_some());
                }
            }
            let want: Vec<_> = map.into_iter().map(|(id, (off, len))| (id, off, len)).collect();
            prop_assert_eq!(lines.into_vec(), want);
        }
    }

    #[test]
    fn a_requeued_item_is_live_again_where_it_was() {
        let mut lines = LiveLines::default();
        lines.put(1, 0, 5);
        lines.put(2, 6, 5);
        assert!(lines.remove(1));
        assert!(!lines.remove(1));
        lines.put(3, 12, 5);
        lines.put(1, 18, 5);
        lines.put(0, 24, 3);
        assert_eq!(
            lines.into_vec(),
            vec![(0, 24, 3), (1, 18, 5), (2, 6, 5), (3, 12, 5)]
        );
    }
}
