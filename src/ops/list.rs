//! `list`: pending items for people, filtered, with a safe preview.
//!
//! [`list`] streams items like [`super::drain`] and applies the filters
//! (key, minimum attempts, due now); the limit counts items that passed
//! the filters. [`Row`] is what a table shows of an item: sizes, ages and
//! retry state computed against one `now`, and key and payload escaped
//! by [`super::preview`] so that no stored byte reaches a terminal raw.

use super::drain::ItemStream;
use super::preview;
use crate::error::Result;
use crate::item::{Item, ItemId};
use crate::queue::Queue;
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
    /// Only items replay would attempt at `now` (not held, not waiting).
    pub due: bool,
    /// The time `due` is decided against.
    pub now: Timestamp,
}

impl ListOptions {
    fn matches(&self, item: &Item) -> bool {
        self.key.as_deref().is_none_or(|k| item.key == k)
            && self
                .group
                .as_deref()
                .is_none_or(|g| item.group.as_deref() == Some(g))
            && self.min_attempts.is_none_or(|n| item.attempts >= n)
            && (!self.due || item.is_due(self.now))
    }
}

/// The matching items, lazily, in enqueue order.
pub fn list<'a>(
    queue: &'a dyn Queue,
    opts: &ListOptions,
) -> impl Iterator<Item = Result<Item>> + 'a {
    let filter = opts.clone();
    let filtered =
        opts.key.is_some() || opts.group.is_some() || opts.min_attempts.is_some() || opts.due;
    let stream = if filtered {
        ItemStream::unlimited(queue)
    } else {
        ItemStream::new(queue, opts.limit)
    };
    let limit = opts.limit.unwrap_or(usize::MAX);
    stream
        .filter(move |r| r.as_ref().map_or(true, |i| filter.matches(i)))
        .take(limit)
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
    /// At this time, this long from now.
    At(Timestamp, Duration),
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
        assert_eq!(r.preview, "line1\\nline2\\u{001b}[0m");
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
