//! Building the next request of a push run from the spool: the
//! in-flight entries first, then new items, numbered and committed
//! before the request is sent; and what a dry run would send.

use super::{PushEvent, PushHalt, PushReport, PushSender, Run};
use crate::error::{Error, Result};
use crate::item::{Item, ItemId, PushState};
use crate::push::wire::{self, OutEntry};
use crate::queue::PAGE_SIZE;
use crate::replay::events::{Event, EventKind};
use crate::replay::ItemOutcome;
use std::collections::HashMap;

/// One entry of a batch being built.
#[derive(Clone, Debug)]
pub(super) enum Planned {
    Item(Item),
    Skip(u64),
}

impl Planned {
    pub(super) fn seq(&self) -> u64 {
        match self {
            Planned::Item(i) => i.push_seq.unwrap_or_default(),
            Planned::Skip(s) => *s,
        }
    }

    pub(super) fn out(&self) -> OutEntry<'_> {
        match self {
            Planned::Item(i) => out_item(i, i.push_seq.unwrap_or_default()),
            Planned::Skip(seq) => OutEntry::Skip { seq: *seq },
        }
    }
}

pub(super) fn out_item(item: &Item, seq: u64) -> OutEntry<'_> {
    OutEntry::Item {
        seq,
        id: item.id,
        key: &item.key,
        payload: &item.payload,
        enqueued_at: item.enqueued_at,
        group: item.group.as_deref(),
        coalesce_key: item.coalesce_key.as_deref(),
    }
}

/// A request about to go out.
pub(super) struct Batch {
    pub(super) entries: Vec<Planned>,
    /// The push state the request is built from (after numbering).
    pub(super) state: PushState,
    /// New items were left out because of the limit.
    pub(super) limited: bool,
}

impl Batch {
    pub(super) fn items(&self) -> impl Iterator<Item = &Item> {
        self.entries.iter().filter_map(|e| match e {
            Planned::Item(i) => Some(i),
            Planned::Skip(_) => None,
        })
    }

    pub(super) fn find(&self, seq: u64) -> Option<&Item> {
        self.items().find(|i| i.push_seq == Some(seq))
    }
}

impl PushSender<'_> {
    /// The next request: the in-flight entries from where the receiver
    /// stands (or from `from`, just past the requests still in flight),
    /// then new items, numbered and committed before it is sent.
    pub(super) fn build(
        &self,
        run: &mut Run,
        report: &mut PushReport,
        from: Option<u64>,
    ) -> Result<Batch> {
        let mut state = self.queue.push_state()?;
        run.acked = run.acked.max(state.acked);
        let start = (state.acked + 1)
            .max(run.resend_from.unwrap_or(0))
            .max(from.unwrap_or(0));
        let budget = run.max_bytes;
        let limit = self.opts.limit.unwrap_or(u64::MAX);
        let mut bytes = wire::request_overhead(&run.uuid, state.acked, 0) as u64;
        let mut entries: Vec<Planned> = Vec::new();
        let mut new_items = 0u64;
        let mut limited = false;
        let mut room = true;
        if start <= state.last_assigned {
            let mut items = self
                .queue
                .push_in_flight(start - 1, run.max_entries)?
                .into_iter()
                .peekable();
            for seq in start..=state.last_assigned {
                if entries.len() >= run.max_entries {
                    room = false;
                    break;
                }
                while items.peek().is_some_and(|i| i.push_seq < Some(seq)) {
                    items.next();
                }
                let entry = match items.next_if(|i| i.push_seq == Some(seq)) {
                    Some(item) => Planned::Item(item),
                    None => Planned::Skip(seq),
                };
                let counts = matches!(entry, Planned::Item(_)) && seq > run.sent_upto;
                if counts && report.sent + new_items >= limit {
                    limited = true;
                    room = false;
                    break;
                }
                let len = wire::encoded_entry_len(&entry.out()) as u64 + 1;
                if !entries.is_empty() && bytes + len > budget {
                    room = false;
                    break;
                }
                bytes += len;
                new_items += u64::from(counts);
                entries.push(entry);
            }
        }
        if room && entries.len() < run.max_entries {
            let now = self.clock.now();
            let mut picked: Vec<Item> = Vec::new();
            'walk: loop {
                let page = self.queue.page(run.cursor, PAGE_SIZE)?;
                let n = page.len();
                for item in page {
                    if item.push_seq.is_some()
                        || item.held
                        || (!self.opts.ignore_backoff && !item.is_due(now))
                    {
                        run.cursor = item.id;
                        continue;
                    }
                    if let Some(problem) = crate::item::key_problem(&item.key) {
                        // Never numbered, never sent: a receiver would
                        // refuse it, and its digest would be ambiguous.
                        run.cursor = item.id;
                        let reason = format!("not pushed: {problem}");
                        if self.queue.dead_letter(item.id, &reason)? {
                            report.unsendable += 1;
                            if let Some(o) = self.observer {
                                o.recorded(
                                    &Event::new(
                                        EventKind::DeadLettered,
                                        &item,
                                        item.attempts,
                                        self.clock.now(),
                                    )
                                    .with_error(&reason),
                                );
                                o.attempted(
                                    &item,
                                    item.attempts,
                                    &ItemOutcome::DeadLettered {
                                        error: reason,
                                        rejected: true,
                                    },
                                );
                            }
                        }
                        continue;
                    }
                    if entries.len() + picked.len() >= run.max_entries {
                        break 'walk;
                    }
                    if report.sent + new_items >= limit {
                        limited = true;
                        break 'walk;
                    }
                    let seq = state.last_assigned + 1 + picked.len() as u64;
                    let len = wire::encoded_entry_len(&out_item(&item, seq)) as u64 + 1;
                    if !(entries.is_empty() && picked.is_empty()) && bytes + len > budget {
                        break 'walk;
                    }
                    bytes += len;
                    new_items += 1;
                    run.cursor = item.id;
                    picked.push(item);
                }
                if n < PAGE_SIZE {
                    break;
                }
            }
            if !picked.is_empty() {
                let ids: Vec<ItemId> = picked.iter().map(|i| i.id).collect();
                let assigned = self.queue.push_assign(&ids)?;
                let mut picked: HashMap<ItemId, Item> =
                    picked.into_iter().map(|i| (i.id, i)).collect();
                for (id, seq) in assigned {
                    if seq != state.last_assigned + 1 {
                        return Err(Error::Internal(format!(
                            "push numbering jumped from {} to {seq} while this run held the \
                             replay lock",
                            state.last_assigned
                        )));
                    }
                    state.last_assigned = seq;
                    if let Some(mut item) = picked.remove(&id) {
                        item.push_seq = Some(seq);
                        entries.push(Planned::Item(item));
                    }
                }
                // Items that became held or left meanwhile got no number.
                new_items = entries
                    .iter()
                    .filter(|e| matches!(e, Planned::Item(_)) && e.seq() > run.sent_upto)
                    .count() as u64;
            }
        }
        run.highest = run.highest.max(state.last_assigned);
        if let Some(last) = entries.last() {
            report.sent += new_items;
            run.sent_upto = run.sent_upto.max(last.seq());
        }
        Ok(Batch {
            entries,
            state,
            limited,
        })
    }

    /// What a run would send now, reported through the observer; nothing
    /// is numbered or changed.
    pub(super) fn dry_run(&self, report: &mut PushReport) -> Result<()> {
        let state = self.queue.push_state()?;
        let limit = self.opts.limit.unwrap_or(u64::MAX);
        if let Some(o) = self.observer {
            let total = if o.wants_total() {
                Some(self.queue.due_count(
                    self.clock.now(),
                    self.opts.ignore_backoff,
                    self.opts.limit,
                )?)
            } else {
                None
            };
            o.started(total);
        }
        let mut after = state.acked;
        let mut next = state.acked + 1;
        'in_flight: while next <= state.last_assigned {
            let page = self.queue.push_in_flight(after, PAGE_SIZE)?;
            let n = page.len();
            for item in &page {
                let seq = item.push_seq.unwrap_or_default();
                while next < seq {
                    self.would_skip(next);
                    next += 1;
                }
                if report.would_resend >= limit {
                    report.left_due = true;
                    report.halt = Some(PushHalt::Limit);
                    return Ok(());
                }
                self.event(PushEvent::WouldSend {
                    seq,
                    item: Some(item),
                    in_flight: true,
                });
                report.would_resend += 1;
                next = seq + 1;
                after = seq;
            }
            if n < PAGE_SIZE {
                break 'in_flight;
            }
        }
        while next <= state.last_assigned {
            self.would_skip(next);
            next += 1;
        }
        let now = self.clock.now();
        let mut cursor: ItemId = 0;
        loop {
            let page = self.queue.page(cursor, PAGE_SIZE)?;
            let n = page.len();
            for item in &page {
                cursor = item.id;
                if item.push_seq.is_some()
                    || item.held
                    || (!self.opts.ignore_backoff && !item.is_due(now))
                    // Never sent: a real run dead-letters it (unsendable).
                    || crate::item::key_problem(&item.key).is_some()
                {
                    continue;
                }
                if report.would_resend + report.would_send >= limit {
                    report.left_due = true;
                    report.halt = Some(PushHalt::Limit);
                    return Ok(());
                }
                self.event(PushEvent::WouldSend {
                    seq: next,
                    item: Some(item),
                    in_flight: false,
                });
                next += 1;
                report.would_send += 1;
            }
            if n < PAGE_SIZE {
                return Ok(());
            }
        }
    }

    fn would_skip(&self, seq: u64) {
        self.event(PushEvent::WouldSend {
            seq,
            item: None,
            in_flight: true,
        });
    }
}
