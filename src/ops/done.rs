//! `done`: remove pending items by id (an operator's decision, or a
//! delivery made by hand). All ids in one commit; unknown ids change
//! nothing and are reported.
//!
//! An item *in flight* to a push receiver (it has a sequence number the
//! receiver has not acknowledged) may already be applied there. Removing
//! it is refused unless forced: forced, the item leaves the spool and its
//! number becomes a skip, which the next push sends so that the receiver
//! moves past it (SPEC §7). The receiver then holds the item at most once.

use super::ids::IdsReport;
use crate::error::{Error, Result};
use crate::item::ItemId;
use crate::queue::Queue;

/// Options for [`done`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DoneOptions {
    /// Distinct ids (see [`super::ids::resolve`]).
    pub ids: Vec<ItemId>,
    /// Also remove items in flight to a push receiver (`--force`).
    pub force: bool,
}

/// What [`done`] did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DoneReport {
    /// Removed and unknown ids.
    pub ids: IdsReport,
    /// Removed items that were in flight, with their sequence numbers,
    /// now skips for the next push.
    pub abandoned: Vec<(ItemId, u64)>,
}

/// Mark `opts.ids` done in one [`Queue::mark_done`] call. Without
/// `force`, an id of an in-flight item is [`Error::InvalidInput`] and
/// nothing is changed.
pub fn done(queue: &dyn Queue, opts: &DoneOptions) -> Result<DoneReport> {
    if opts.ids.is_empty() {
        return Ok(DoneReport::default());
    }
    let mut in_flight = Vec::new();
    let push = queue.push_state()?;
    if push.last_assigned > push.acked {
        for &id in &opts.ids {
            if let Some(seq) = queue.get(id)?.and_then(|i| i.push_seq) {
                in_flight.push((id, seq));
            }
        }
    }
    if !opts.force && !in_flight.is_empty() {
        return Err(Error::InvalidInput(in_flight_message(&in_flight)));
    }
    let flags = queue.mark_done(&opts.ids)?;
    let ids = IdsReport::from_flags(&opts.ids, &flags)?;
    in_flight.retain(|(id, _)| ids.changed.contains(id));
    Ok(DoneReport {
        ids,
        abandoned: in_flight,
    })
}

fn in_flight_message(in_flight: &[(ItemId, u64)]) -> String {
    let list = |f: fn(&(ItemId, u64)) -> u64| {
        in_flight
            .iter()
            .map(|p| f(p).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let [(id, seq)] = in_flight {
        format!(
            "item {id} is in flight to the push receiver (sequence {seq}); use --force to abandon \
             it: the receiver is told to skip its number"
        )
    } else {
        format!(
            "items {} are in flight to the push receiver (sequences {}); use --force to abandon \
             them: the receiver is told to skip their numbers",
            list(|p| p.0),
            list(|p| p.1)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn known_and_unknown() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let r = done(
            &*s,
            &DoneOptions {
                ids: vec![a, 99],
                force: false,
            },
        )
        .unwrap();
        assert_eq!(
            r.ids,
            IdsReport {
                changed: vec![a],
                unknown: vec![99]
            }
        );
        assert_eq!(s.size().unwrap(), 0);
    }

    #[test]
    fn in_flight_items_need_force_and_become_skips() {
        let s = Spool::memory(&OpenOptions::default());
        let a = s.enqueue(b"a", "").unwrap().id;
        let b = s.enqueue(b"b", "").unwrap().id;
        s.push_assign(&[a]).unwrap();
        let opts = DoneOptions {
            ids: vec![b, a],
            force: false,
        };
        let err = done(&*s, &opts).unwrap_err();
        assert_eq!(
            err.to_string(),
            "item 1 is in flight to the push receiver (sequence 1); use --force to abandon it: \
             the receiver is told to skip its number"
        );
        assert_eq!(s.size().unwrap(), 2, "nothing changed");
        let r = done(
            &*s,
            &DoneOptions {
                force: true,
                ..opts
            },
        )
        .unwrap();
        assert_eq!(r.ids.changed, vec![b, a]);
        assert_eq!(r.abandoned, vec![(a, 1)]);
        assert_eq!(s.push_state().unwrap().skips, vec![1]);
    }
}
