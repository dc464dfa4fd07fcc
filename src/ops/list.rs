//! `list`: pending items for people, filtered, with a safe preview.
//!
//! [`list`] streams items like [`super::drain`] and applies the filters
//! (key, minimum attempts, due now); the limit counts items that passed
//! the filters. "Due now" is the spool's own rule ([`Queue::due_page`]):
//! exactly the items a replay would attempt, not held, not backing off,
//! not waiting behind their ordering group. [`Row`] is what a table shows of an item: sizes, ages and
//! retry state computed against one `now`, and key and payload escaped
//! by [`super::preview`] so that no stored byte reaches a terminal raw.

use super::drain::ItemStream;
use super::preview;
use crate::error::{Error, Result};
use crate::item::{DeadLetter, DeliveredItem, Item, ItemId};
use crate::queue::{Queue, PAGE_SIZE};
use crate::time::Timestamp;
use std::time::Duration;

/// Options for [`list`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ListOptions {
    /// At most this many items (after filtering).
    pub limit: Option<usize>,
    /// Only items with exactly this key.
    pub key: Option<String>,
    /// Only items with at least this many attempts.
    pub min_attempts: Option<u32>,
    /// Only items of this ordering group.
    pub group: Option<String>,
    /// Only items replay would attempt at `now` ([`Queue::due_page`]: not
    /// held, not waiting for a retry time, not waiting behind their
    /// ordering group).
    pub due: bool,
    /// Which set to list (`None`: pending items, held ones included).
    pub state: Option<StateFilter>,
    /// The time `due` is decided against.
    pub now: Timestamp,
}

/// The set `list --state` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateFilter {
    /// Pending items that are not held.
    Pending,
    /// Held items.
    Held,
    /// Retained delivered items (SPEC §9).
    Delivered,
    /// Dead letters.
    Dead,
}

impl StateFilter {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            StateFilter::Pending => "pending",
            StateFilter::Held => "held",
            StateFilter::Delivered => "delivered",
            StateFilter::Dead => "dead",
        }
    }
}

/// One entry of [`list_states`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listed {
    /// A pending (possibly held) item.
    Pending(Item),
    /// A dead letter.
    Dead(DeadLetter),
    /// A retained delivered item.
    Delivered(DeliveredItem),
}

impl Listed {
    /// The item, whichever set it is in.
    pub fn item(&self) -> &Item {
        match self {
            Listed::Pending(i) => i,
            Listed::Dead(d) => &d.item,
            Listed::Delivered(d) => &d.item,
        }
    }
}

impl ListOptions {
    fn matches(&self, item: &Item) -> bool {
        let state = match self.state {
            Some(StateFilter::Pending) => !item.held,
            Some(StateFilter::Held) => item.held,
            _ => true,
        };
        state
            && self.key.as_deref().is_none_or(|k| item.key == k)
            && self
                .group
                .as_deref()
                .is_none_or(|g| item.group.as_deref() == Some(g))
            && self.min_attempts.is_none_or(|n| item.attempts >= n)
    }
}

/// The matching items, lazily, in enqueue order.
pub fn list<'a>(
    queue: &'a dyn Queue,
    opts: &ListOptions,
) -> impl Iterator<Item = Result<Item>> + 'a {
    let filter = opts.clone();
    let filtered = opts.key.is_some()
        || opts.group.is_some()
        || opts.min_attempts.is_some()
        || opts.due
        || opts.state.is_some();
    let stream = if opts.due {
        ItemStream::due(queue, opts.now, false)
    } else if filtered {
        ItemStream::unlimited(queue)
    } else {
        ItemStream::new(queue, opts.limit)
    };
    let limit = opts.limit.unwrap_or(usize::MAX);
    stream
        .filter(move |r| r.as_ref().map_or(true, |i| filter.matches(i)))
        .take(limit)
}

/// The entries of the set `opts.state` names, filtered as [`list`]
/// filters, lazily, in id order: pending (held included, or one of the
/// two), dead letters or retained delivered items. `due` applies to
/// pending items only ([`Error::Unsupported`], a usage error, with the
/// other two).
pub fn list_states<'a>(
    queue: &'a dyn Queue,
    opts: &ListOptions,
) -> Result<Box<dyn Iterator<Item = Result<Listed>> + 'a>> {
    let filter = opts.clone();
    let limit = opts.limit.unwrap_or(usize::MAX);
    let keep = move |r: &Result<Listed>| r.as_ref().map_or(true, |l| filter.matches(l.item()));
    let set = match opts.state {
        Some(s @ (StateFilter::Delivered | StateFilter::Dead)) => s,
        _ => return Ok(Box::new(list(queue, opts).map(|r| r.map(Listed::Pending)))),
    };
    if opts.due {
        return Err(Error::Unsupported(format!(
            "--due applies to pending items, not to --state {}",
            set.name()
        )));
    }
    let all: Box<dyn Iterator<Item = Result<Listed>> + 'a> = if set == StateFilter::Dead {
        Box::new(super::dlq::list(queue, &Default::default()).map(|r| r.map(Listed::Dead)))
    } else {
        Box::new(delivered_stream(queue).map(|r| r.map(Listed::Delivered)))
    };
    Ok(Box::new(all.filter(keep).take(limit)))
}

/// Every retained delivered item, in id order, read page by page with
/// [`Queue::delivered_page`]. After an error it yields nothing more.
pub fn delivered_stream(queue: &dyn Queue) -> impl Iterator<Item = Result<DeliveredItem>> + '_ {
    let mut after: ItemId = 0;
    let mut buf = std::collections::VecDeque::new();
    let mut finished = false;
    std::iter::from_fn(move || loop {
        if let Some(d) = buf.pop_front() {
            return Some(Ok(d));
        }
        if finished {
            return None;
        }
        match queue.delivered_page(after, PAGE_SIZE) {
            Ok(page) => {
                finished = page.len() < PAGE_SIZE;
                if let Some(last) = page.last() {
                    after = last.item.id;
                }
                buf.extend(page);
            }
            Err(e) => {
                finished = true;
                return Some(Err(e));
            }
        }
    })
}

/// The default number of characters of a preview.
pub const PREVIEW_CHARS: usize = 40;

/// When replay will attempt an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryState {
    /// Now.
    Due,
    /// Not until released.
    Held,
    /// Not while this earlier item of its ordering group is pending
    /// (SPEC §9): the first pending item of the group, which replay
    /// delivers (or dead-letters) first.
    Behind(ItemId),
    /// At this time, this long from now.
    At(Timestamp, Duration),
    /// Claimed by a replayer (PostgreSQL), whose lease ends at this time,
    /// this long from now: another replayer takes it only after that.
    Leased(Timestamp, Duration),
    /// Never: delivered this long ago (a retained delivered item).
    Delivered(Duration),
    /// Never: dead-lettered this long ago.
    Dead(Duration),
}

/// What a table shows of one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// The id.
    pub id: ItemId,
    /// The key, escaped (`""` for none).
    pub key: String,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Time since enqueue in whole seconds (enqueue times have second
    /// precision), when known.
    pub age: Option<Duration>,
    /// When replay will try it.
    pub retry: RetryState,
    /// Payload size in bytes.
    pub size: u64,
    /// The payload, escaped and cut to `preview_chars`.
    pub preview: String,
    /// The last error, escaped, when there is one.
    pub last_error: Option<String>,
    /// The push sequence number of an item in flight.
    pub push_seq: Option<u64>,
}

impl Row {
    /// The row for `item` at `now`, with a preview of at most
    /// `preview_chars` characters.
    pub fn new(item: &Item, now: Timestamp, preview_chars: usize) -> Row {
        let retry = if item.held {
            RetryState::Held
        } else {
            match item.next_retry_at {
                Some(t) if t > now => RetryState::At(t, t.since(now)),
                _ => RetryState::Due,
            }
        };
        Row {
            id: item.id,
            key: preview::escape(item.key.as_bytes()),
            attempts: item.attempts,
            age: item
                .enqueued_at
                .map(|t| Duration::from_secs(now.since(t).as_secs())),
            retry,
            size: item.payload.len() as u64,
            preview: preview::preview(&item.payload, preview_chars),
            last_error: item
                .last_error
                .as_deref()
                .map(|e| preview::preview(e.as_bytes(), 200)),
            push_seq: item.push_seq,
        }
    }

    /// The row for any listed entry: dead letters and delivered items
    /// show when they left the pending set; a delivered item's last error
    /// is its evidence (`HTTP 200`, `exit 0`, …).
    pub fn listed(entry: &Listed, now: Timestamp, preview_chars: usize) -> Row {
        let mut row = Row::new(entry.item(), now, preview_chars);
        match entry {
            Listed::Pending(_) => {}
            Listed::Dead(d) => row.retry = RetryState::Dead(now.since(d.dead_at)),
            Listed::Delivered(d) => {
                row.retry = RetryState::Delivered(now.since(d.delivery.at));
                row.last_error = Some(d.delivery.evidence.describe());
            }
        }
        row
    }
}

/// Rows of listed entries whose retry state follows the due rule
/// ([`Queue::due_page`]): a pending item that is not held and not the
/// first pending item of its ordering group waits behind that item
/// ([`RetryState::Behind`]) — it is not "due" even when its own retry
/// time has come, as `list --due` leaves it out. The first item of each
/// group is looked up once ([`Queue::group_head`], one indexed read) and
/// remembered for a page of rows, so memory stays bounded on a spool of
/// many groups.
pub struct Rows<'a> {
    queue: &'a dyn Queue,
    now: Timestamp,
    preview_chars: usize,
    heads: std::collections::HashMap<String, Option<ItemId>>,
    rows: usize,
    /// The live leases read last (a spool with leases), and the ids
    /// they cover (`leases_from..=leases_upto`; none read yet: empty).
    leases: std::collections::BTreeMap<ItemId, Timestamp>,
    leases_from: ItemId,
    leases_upto: ItemId,
}

impl<'a> Rows<'a> {
    /// Rows at `now` with previews of at most `preview_chars` characters.
    pub fn new(queue: &'a dyn Queue, now: Timestamp, preview_chars: usize) -> Rows<'a> {
        Rows {
            queue,
            now,
            preview_chars,
            heads: std::collections::HashMap::new(),
            rows: 0,
            leases: std::collections::BTreeMap::new(),
            leases_from: 1,
            leases_upto: 0,
        }
    }

    /// The end of item `id`'s live lease, if it has one: the leases are
    /// read a page at a time, in id order (rows come in id order; a row
    /// below what was read is looked up from the start again).
    fn lease_of(&mut self, id: ItemId) -> Result<Option<Timestamp>> {
        let Some(leasing) = self.queue.leasing() else {
            return Ok(None);
        };
        if id < self.leases_from || id > self.leases_upto {
            let page = leasing.leases_after(id.saturating_sub(1), PAGE_SIZE)?;
            self.leases_from = id;
            self.leases_upto = match page.last() {
                Some((last, _)) if page.len() == PAGE_SIZE => *last,
                _ => ItemId::MAX,
            };
            self.leases = page.into_iter().collect();
        }
        Ok(self.leases.get(&id).copied())
    }

    /// The row of `entry` ([`Row::listed`], with the group rule).
    pub fn row(&mut self, entry: &Listed) -> Result<Row> {
        let mut row = Row::listed(entry, self.now, self.preview_chars);
        self.rows += 1;
        if self.rows.is_multiple_of(PAGE_SIZE) {
            self.heads.clear();
        }
        let Listed::Pending(item) = entry else {
            return Ok(row);
        };
        if !item.held {
            if let Some(until) = self.lease_of(item.id)?.filter(|t| *t > self.now) {
                row.retry = RetryState::Leased(until, until.since(self.now));
                return Ok(row);
            }
        }
        let Some(group) = item.group.as_ref().filter(|_| !item.held) else {
            return Ok(row);
        };
        let head = match self.heads.get(group) {
            Some(h) => *h,
            None => {
                let h = self.queue.group_head(group)?;
                self.heads.insert(group.clone(), h);
                h
            }
        };
        if let Some(head) = head.filter(|h| *h != item.id) {
            row.retry = RetryState::Behind(head);
        }
        Ok(row)
    }
}

/// True when an item of the spool is in flight to a push receiver (the
/// listing then shows push sequence numbers). One indexed read.
pub fn any_in_flight(queue: &dyn Queue) -> Result<bool> {
    Ok(!queue.push_in_flight(0, 1)?.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};
    use crate::item::AttemptUpdate;

    #[test]
    fn filters_then_limit() {
        let s = Spool::memory(&OpenOptions::default());
        for i in 0..6u32 {
            let id = s
                .enqueue(
                    format!("p{i}").as_bytes(),
                    if i % 2 == 0 { "even" } else { "" },
                )
                .unwrap()
                .id;
            s.set_attempts(id, i).unwrap();
        }
        // Keys dedup: only the first "even" was stored; ids 1, 2, 3, 4.
        let now = Timestamp::now();
        let ids = |o: &ListOptions| list(&*s, o).map(|r| r.unwrap().id).collect::<Vec<_>>();
        let base = ListOptions {
            now,
            ..Default::default()
        };
        assert_eq!(ids(&base), vec![1, 2, 3, 4]);
        assert_eq!(
            ids(&ListOptions {
                key: Some("even".into()),
                ..base.clone()
            }),
            vec![1]
        );
        assert_eq!(
            ids(&ListOptions {
                min_attempts: Some(5),
                limit: Some(1),
                ..base.clone()
            }),
            vec![4]
        );
        s.set_held(&[2], true).unwrap();
        s.record_attempt(
            3,
            &AttemptUpdate {
                attempts: 3,
                next_retry_at: Some(now.saturating_add(Duration::from_secs(60))),
                last_error: Some("boom\n".into()),
            },
        )
        .unwrap();
        assert_eq!(
            ids(&ListOptions {
                due: true,
                ..base.clone()
            }),
            vec![1, 4]
        );
    }

    #[test]
    fn an_item_behind_its_group_s_first_is_not_due() {
        let s = Spool::memory(&OpenOptions::default());
        let add = |group: Option<&str>| {
            let item = crate::item::NewItem {
                payload: b"p".to_vec(),
                key: String::new(),
                group: group.map(String::from),
                coalesce_key: None,
            };
            s.enqueue_batch(&[item], &Default::default()).unwrap()[0].id
        };
        let (g1, g2, free, h1, h2) = (
            add(Some("g")),
            add(Some("g")),
            add(None),
            add(Some("h")),
            add(Some("h")),
        );
        s.set_held(&[h1], true).unwrap();
        let now = Timestamp::now();
        let mut rows = Rows::new(&*s, now, 40);
        let retry = |rows: &mut Rows, id| {
            let item = s.get(id).unwrap().unwrap();
            rows.row(&Listed::Pending(item)).unwrap().retry
        };
        assert_eq!(retry(&mut rows, g1), RetryState::Due);
        assert_eq!(retry(&mut rows, g2), RetryState::Behind(g1));
        assert_eq!(retry(&mut rows, free), RetryState::Due);
        assert_eq!(retry(&mut rows, h1), RetryState::Held);
        assert_eq!(retry(&mut rows, h2), RetryState::Behind(h1));
    }

    #[test]
    fn rows_are_safe() {
        let now = Timestamp::from_secs(2000);
        let mut item = Item::new(
            1,
            b"line1\nline2\x1b[0m".to_vec(),
            "k\tey".into(),
            Timestamp::from_secs(1000),
        );
        item.next_retry_at = Some(Timestamp::from_secs(2060));
        let r = Row::new(&item, now, 40);
        assert_eq!(r.preview, "line1\\nline2\\u001b[0m");
        assert_eq!(r.key, "k\\tey");
        assert_eq!(r.age, Some(Duration::from_secs(1000)));
        assert_eq!(
            r.retry,
            RetryState::At(Timestamp::from_secs(2060), Duration::from_secs(60))
        );
        item.held = true;
        assert_eq!(Row::new(&item, now, 40).retry, RetryState::Held);
    }
}
