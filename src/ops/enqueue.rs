//! `enqueue`: add items in one atomic commit, optionally waiting for room.
//!
//! The items (read and checked by [`crate::ops::input`]: a list, or a
//! [`Batch`] kept in a spill file) go to the queue in ONE
//! [`Queue::enqueue_stream`] call: all of them are stored, or none, and a
//! backend that streams never holds them all in memory. On a full spool
//! the call fails with [`Error::QueueFull`] (exit 75 in the CLI) unless a
//! wait is asked for: then it polls, sleeping on the injected clock with a
//! growing interval (25 ms doubling to 1 s), until the batch fits or the
//! wait runs out, and then fails with the last `QueueFull`. A batch that
//! cannot fit even into an empty spool fails at once.

use crate::error::{Error, Result};
use crate::item::{BatchResults, DepthLimit, EnqueueOptions, NewItem};
use crate::ops::input::Batch;
use crate::queue::Queue;
use crate::time::SharedClock;
use std::time::Duration;

/// The items of an enqueue.
#[derive(Debug)]
pub enum Items {
    /// In memory (a single payload, or a library caller's list).
    List(Vec<NewItem>),
    /// A batch read into a spill file.
    Batch(Batch),
}

impl Items {
    /// How many there are.
    pub fn len(&self) -> u64 {
        match self {
            Items::List(v) => v.len() as u64,
            Items::Batch(b) => b.len(),
        }
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The items in order (each call starts from the first).
    pub fn iter(&self) -> Box<dyn Iterator<Item = Result<NewItem>> + '_> {
        match self {
            Items::List(v) => Box::new(v.iter().cloned().map(Ok)),
            Items::Batch(b) => Box::new(b.items()),
        }
    }
}

/// What to enqueue and how.
#[derive(Debug)]
pub struct EnqueueRequest {
    /// The items, in order.
    pub items: Items,
    /// A depth bound for this call instead of the stored one.
    pub max_depth: Option<u64>,
    /// How long to wait for room on a full spool (`None`: fail at once).
    pub wait_for_space: Option<Duration>,
    /// The clock to wait on.
    pub clock: SharedClock,
}

/// What [`enqueue`] did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct EnqueueReport {
    /// One result per requested item, in order (compact: see
    /// [`BatchResults`]).
    pub results: BatchResults,
    /// How long the call waited for room (zero when the batch fitted at
    /// once).
    pub waited: Duration,
}

impl EnqueueReport {
    /// Number of items stored (not deduplicated).
    pub fn stored(&self) -> u64 {
        self.results.stored()
    }
}

const FIRST_POLL: Duration = Duration::from_millis(25);
const MAX_POLL: Duration = Duration::from_secs(1);

/// Enqueue `req.items` in one commit (see the module docs).
pub fn enqueue(queue: &dyn Queue, req: &EnqueueRequest) -> Result<EnqueueReport> {
    if req.items.is_empty() {
        return Ok(EnqueueReport::default());
    }
    let opts = EnqueueOptions {
        depth_limit: match req.max_depth {
            Some(n) => DepthLimit::Override(Some(n)),
            None => DepthLimit::Stored,
        },
    };
    let start = req.clock.now();
    let mut poll = FIRST_POLL;
    let mut slept = false;
    loop {
        match queue.enqueue_stream(&mut req.items.iter(), &opts) {
            Ok(results) => {
                if results.len() != req.items.len() {
                    return Err(Error::Internal(format!(
                        "enqueue_stream gave {} results for {} items",
                        results.len(),
                        req.items.len()
                    )));
                }
                let waited = if slept {
                    req.clock.now().since(start)
                } else {
                    Duration::ZERO
                };
                return Ok(EnqueueReport { results, waited });
            }
            Err(Error::QueueFull { max_depth, depth }) => {
                let full = Error::QueueFull { max_depth, depth };
                let Some(wait) = req.wait_for_space else {
                    return Err(full);
                };
                // Even an empty spool would not take this batch.
                if depth == 0 {
                    return Err(full);
                }
                let waited = req.clock.now().since(start);
                if waited >= wait {
                    return Err(full);
                }
                req.clock.sleep(poll.min(wait - waited));
                slept = true;
                poll = (poll * 2).min(MAX_POLL);
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{OpenOptions, Spool};
    use crate::time::{ManualClock, Timestamp};
    use std::sync::Arc;

    fn request(clock: &ManualClock, n: usize, wait: Option<Duration>) -> EnqueueRequest {
        EnqueueRequest {
            items: Items::List((0..n).map(|i| NewItem::new(format!("p{i}"), "")).collect()),
            max_depth: None,
            wait_for_space: wait,
            clock: Arc::new(clock.clone()),
        }
    }

    fn bounded(bound: u64, clock: &ManualClock) -> Spool {
        Spool::memory(&OpenOptions {
            max_depth: Some(bound),
            clock: Arc::new(clock.clone()),
            ..OpenOptions::default()
        })
    }

    #[test]
    fn a_batch_is_reported_in_order_with_dedup() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let spool = bounded(10, &clock);
        let mut req = request(&clock, 0, None);
        req.items = Items::List(vec![
            NewItem::new("a", "k"),
            NewItem::new("b", ""),
            NewItem::new("c", "k"),
        ]);
        let r = enqueue(&*spool, &req).unwrap();
        assert_eq!(r.stored(), 2);
        let results: Vec<_> = r.results.iter().collect();
        assert_eq!(
            results[2],
            crate::item::Enqueued {
                id: results[0].id,
                deduplicated: true,
                ..Default::default()
            }
        );
    }

    #[test]
    fn full_spool_fails_at_once_without_wait() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let spool = bounded(1, &clock);
        enqueue(&*spool, &request(&clock, 1, None)).unwrap();
        let e = enqueue(&*spool, &request(&clock, 1, None)).unwrap_err();
        assert!(matches!(
            e,
            Error::QueueFull {
                max_depth: 1,
                depth: 1
            }
        ));
        assert!(clock.sleeps().is_empty());
    }

    #[test]
    fn waiting_polls_until_the_time_runs_out() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let spool = bounded(1, &clock);
        enqueue(&*spool, &request(&clock, 1, None)).unwrap();
        let e = enqueue(&*spool, &request(&clock, 1, Some(Duration::from_secs(3)))).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Temporary);
        let slept: Duration = clock.sleeps().iter().sum();
        assert_eq!(slept, Duration::from_secs(3));
        assert!(clock.sleeps().iter().all(|d| *d <= MAX_POLL));
    }

    #[test]
    fn the_override_bound_applies_to_one_call() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let spool = bounded(1, &clock);
        enqueue(&*spool, &request(&clock, 1, None)).unwrap();
        let mut req = request(&clock, 2, None);
        req.max_depth = Some(3);
        assert_eq!(enqueue(&*spool, &req).unwrap().stored(), 2);
        assert!(enqueue(&*spool, &request(&clock, 1, None)).is_err());
    }

    #[test]
    fn a_batch_larger_than_the_bound_fails_at_once() {
        let clock = ManualClock::new(Timestamp::from_secs(1000));
        let spool = bounded(1, &clock);
        let e = enqueue(&*spool, &request(&clock, 2, Some(Duration::from_secs(60)))).unwrap_err();
        assert!(matches!(e, Error::QueueFull { .. }));
        assert!(clock.sleeps().is_empty());
    }

    /// A clock whose third sleep makes room, as a replay in another
    /// process would.
    #[derive(Debug)]
    struct FreeingClock {
        inner: ManualClock,
        spool: std::sync::Mutex<Option<Arc<Spool>>>,
        first: crate::item::ItemId,
    }

    impl crate::Clock for FreeingClock {
        fn now(&self) -> Timestamp {
            self.inner.now()
        }
        fn sleep(&self, d: Duration) {
            self.inner.sleep(d);
            if self.inner.sleeps().len() == 3 {
                if let Some(s) = self.spool.lock().unwrap().take() {
                    s.mark_done(&[self.first]).unwrap();
                }
            }
        }
    }

    #[test]
    fn waiting_succeeds_when_room_appears() {
        let manual = ManualClock::new(Timestamp::from_secs(1000));
        let spool = Arc::new(bounded(1, &manual));
        let first = enqueue(&**spool, &request(&manual, 1, None))
            .unwrap()
            .results
            .iter()
            .next()
            .unwrap()
            .id;
        let clock = Arc::new(FreeingClock {
            inner: manual.clone(),
            spool: std::sync::Mutex::new(Some(spool.clone())),
            first,
        });
        let mut req = request(&manual, 1, Some(Duration::from_secs(60)));
        req.clock = clock;
        let r = enqueue(&**spool, &req).unwrap();
        assert_eq!(r.stored(), 1);
        assert_eq!(manual.sleeps().len(), 3);
        assert_eq!(r.waited, manual.sleeps().iter().sum::<Duration>());
    }
}
