//! Ordering groups (SPEC §9) in a local run: which item of a group may
//! be attempted, and when another sweep is needed.

use super::ReplayReport;
use crate::item::{Item, ItemId};

/// Ordering groups (SPEC §9) during a local replay: an item is attempted
/// only when no earlier item of its group is pending. A sweep walks the
/// spool in id order; the first pending item of a group it meets is the
/// group's head (held, waiting or due alike), and every later item of the
/// group waits. When a head leaves the pending set during the sweep
/// (delivered or dead-lettered), the next item of its group becomes the
/// head: a concurrent run hands it straight to the worker that finished
/// the old head (the sweep remembers, per group, the ids it passed over,
/// up to [`GroupGate::CHAIN_CAP`] in all), and a run sweeps again over the
/// items of the groups that made progress, for what was not handed on,
/// until no group made progress. With `--concurrency`, at most one item
/// per group is in flight (the others wait behind it).
#[derive(Debug, Default)]
pub(super) struct GroupGate {
    /// Groups whose head this sweep has met.
    seen: std::collections::HashSet<String>,
    /// Groups whose head left the pending set during this sweep.
    progressed: std::collections::HashSet<String>,
    /// A later sweep looks only at the items of these groups.
    only: Option<std::collections::HashSet<String>>,
    /// Per group, the ids this sweep passed over because they waited
    /// behind the group's head, in id order: the group's next heads.
    waiting: std::collections::HashMap<String, std::collections::VecDeque<ItemId>>,
    /// Groups whose waiting ids were not all remembered (the cap): only
    /// the remembered prefix is handed on.
    capped: std::collections::HashSet<String>,
    /// Ids remembered in `waiting` during this sweep.
    remembered: usize,
    /// Heads admitted in this run that have not left the pending set (in
    /// flight, held, waiting for a retry time, failed): a later sweep
    /// meets them as heads again without counting them again.
    heads: std::collections::HashSet<ItemId>,
    /// Ids handed on, with their group, to be taken before the sweep
    /// goes on.
    pub(super) ready: std::collections::VecDeque<(ItemId, String)>,
    /// Groups whose head left during this sweep with no later item
    /// remembered: the next item of the group the sweep meets leads.
    free: std::collections::HashSet<String>,
}

impl GroupGate {
    /// The most waiting ids one sweep remembers (a few MiB at most).
    const CHAIN_CAP: usize = 100_000;

    /// Whether the sweep looks at `item` at all, and whether it may go on
    /// to be attempted (it is the head of its group, or has none). Counts
    /// the items that wait behind their group.
    pub(super) fn admit(&mut self, item: &Item, report: &mut ReplayReport) -> bool {
        let Some(g) = &item.group else {
            // Items without a group were all looked at by the first sweep.
            return self.only.is_none();
        };
        if let Some(only) = &self.only {
            if !only.contains(g) {
                return false;
            }
        }
        if self.heads.contains(&item.id) {
            // Met again by a later sweep: still its group's head, and
            // counted already.
            self.seen.insert(g.clone());
            return false;
        }
        if self.seen.contains(g) {
            if self.free.remove(g) {
                // Everything before it in its group has left.
                self.heads.insert(item.id);
                return true;
            }
            if self.only.is_none() {
                report.group_waiting += 1;
            }
            if self.remembered < Self::CHAIN_CAP && !self.capped.contains(g) {
                self.waiting
                    .entry(g.clone())
                    .or_default()
                    .push_back(item.id);
                self.remembered += 1;
            } else {
                self.capped.insert(g.clone());
            }
            return false;
        }
        self.seen.insert(g.clone());
        self.heads.insert(item.id);
        if self.only.is_some() {
            // It waited behind its group in the sweep before; now it leads.
            report.group_waiting = report.group_waiting.saturating_sub(1);
        }
        true
    }

    /// `item` left the pending set (delivered or dead-lettered): the next
    /// item of its group that this sweep passed over becomes ready.
    pub(super) fn left(&mut self, item: &Item) {
        if let Some(g) = &item.group {
            self.heads.remove(&item.id);
            self.progressed.insert(g.clone());
            self.hand_on(g);
        }
    }

    /// The head of group `g` is gone: its next remembered item becomes
    /// ready, or, with none, the group is free.
    pub(super) fn hand_on(&mut self, g: &str) {
        match self.waiting.get_mut(g).and_then(|w| w.pop_front()) {
            Some(next) => self.ready.push_back((next, g.to_string())),
            None if !self.capped.contains(g) => {
                self.free.insert(g.to_string());
            }
            // Items past the cap were not remembered: the next sweep.
            None => {}
        }
    }

    /// Ready item `id` of group `g` may not be attempted now (held,
    /// waiting for its retry time): it leads, no longer waits, and the
    /// rest of the group waits for the next sweep.
    pub(super) fn blocked(&mut self, id: ItemId, g: &str, report: &mut ReplayReport) {
        self.heads.insert(id);
        report.group_waiting = report.group_waiting.saturating_sub(1);
        if let Some(w) = self.waiting.get_mut(g) {
            w.clear();
        }
        self.capped.insert(g.to_string());
    }

    /// A ready item is taken: it leads and no longer waits.
    pub(super) fn took(&mut self, id: ItemId, report: &mut ReplayReport) {
        self.heads.insert(id);
        report.group_waiting = report.group_waiting.saturating_sub(1);
    }

    /// Start another sweep if a group made progress while later items of
    /// it waited; false when the run is over.
    pub(super) fn next_sweep(&mut self, report: &ReplayReport) -> bool {
        self.waiting.clear();
        self.capped.clear();
        self.remembered = 0;
        self.ready.clear();
        self.free.clear();
        if self.progressed.is_empty() || report.group_waiting == 0 {
            return false;
        }
        self.only = Some(std::mem::take(&mut self.progressed));
        self.seen.clear();
        true
    }
}
