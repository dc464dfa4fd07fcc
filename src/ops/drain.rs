//! `drain`: a non-destructive snapshot of pending items in enqueue order
//! (the reference meaning of drain: it removes nothing).
//!
//! Items are read page by page ([`Queue::page`]) as the caller iterates,
//! so a caller that writes each item out as it comes holds one page in
//! memory, whatever the size of the spool. Items enqueued while the
//! iteration runs may or may not appear; none appears twice.

use crate::error::Result;
use crate::item::{Item, ItemId};
use crate::queue::{Queue, PAGE_SIZE};
use crate::time::Timestamp;

/// Options for [`drain`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct DrainOptions {
    /// At most this many items.
    pub limit: Option<usize>,
}

/// The pending items, lazily, page by page.
pub fn drain<'a>(queue: &'a dyn Queue, opts: &DrainOptions) -> ItemStream<'a> {
    ItemStream::new(queue, opts.limit)
}

/// An iterator over pending items that reads one page at a time. After
/// an error it yields nothing more.
pub struct ItemStream<'a> {
    queue: &'a dyn Queue,
    after: ItemId,
    buf: std::vec::IntoIter<Item>,
    remaining: Option<usize>,
    page_size: usize,
    finished: bool,
    /// Only the items replay would attempt at this time (with backoff
    /// ignored when true): [`Queue::due_page`] instead of [`Queue::page`].
    due: Option<(Timestamp, bool)>,
}

impl<'a> ItemStream<'a> {
    /// A stream of at most `limit` items.
    pub fn new(queue: &'a dyn Queue, limit: Option<usize>) -> ItemStream<'a> {
        ItemStream {
            queue,
            after: 0,
            buf: Vec::new().into_iter(),
            remaining: limit,
            page_size: PAGE_SIZE,
            finished: false,
            due: None,
        }
    }

    /// An unlimited stream of the items a replay at `now` would attempt
    /// ([`Queue::due_page`]), for filtering.
    pub(crate) fn due(
        queue: &'a dyn Queue,
        now: Timestamp,
        ignore_backoff: bool,
    ) -> ItemStream<'a> {
        ItemStream {
            due: Some((now, ignore_backoff)),
            ..ItemStream::new(queue, None)
        }
    }

    /// Read pages of `n` items (at least 1).
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = n.max(1);
        self
    }

    /// An unlimited stream for filtering: the limit applies after the
    /// filter, so it must not cut the pages.
    pub(crate) fn unlimited(queue: &'a dyn Queue) -> ItemStream<'a> {
        ItemStream::new(queue, None)
    }
}

impl Iterator for ItemStream<'_> {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        if self.remaining == Some(0) {
            return None;
        }
        loop {
            if let Some(item) = self.buf.next() {
                if let Some(r) = self.remaining.as_mut() {
                    *r -= 1;
                }
                return Some(Ok(item));
            }
            if self.finished {
                return None;
            }
            let want = match self.remaining {
                Some(r) => r.min(self.page_size),
                None => self.page_size,
            };
            let page = match self.due {
                Some((now, ignore_backoff)) => {
                    self.queue.due_page(now, ignore_backoff, self.after, want)
                }
                None => self.queue.page(self.after, want),
            };
            match page {
                Ok(page) => {
                    if page.len() < want {
                        self.finished = true;
                    }
                    match page.last() {
                        Some(last) if last.id > self.after => self.after = last.id,
                        Some(_) => {
                            // A backend that does not move forward would
                            // loop forever; stop instead.
                            self.finished = true;
                            return Some(Err(crate::Error::Internal(
                                "page did not advance past the previous page".into(),
                            )));
                        }
                        None => {
                            self.finished = true;
                            return None;
                        }
                    }
                    self.buf = page.into_iter();
                }
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};

    #[test]
    fn pages_and_limits() {
        let s = Spool::memory(&OpenOptions::default());
        for i in 0..10 {
            s.enqueue(format!("p{i}").as_bytes(), "").unwrap();
        }
        let all: Vec<_> = ItemStream::new(&*s, None)
            .with_page_size(3)
            .map(|r| r.unwrap().id)
            .collect();
        assert_eq!(all, (1..=10).collect::<Vec<_>>());
        let some: Vec<_> = drain(&*s, &DrainOptions { limit: Some(4) })
            .map(|r| r.unwrap().id)
            .collect();
        assert_eq!(some, vec![1, 2, 3, 4]);
        assert_eq!(drain(&*s, &DrainOptions { limit: Some(0) }).count(), 0);
        assert_eq!(s.size().unwrap(), 10);
    }
}
