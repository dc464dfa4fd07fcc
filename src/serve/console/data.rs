//! What the console reads, and how: every read is a library call
//! ([`crate::ops`]) on the server's read-only handle of the spool, on
//! the blocking pool — or, for a memory spool, which has no second
//! handle, on the writer thread. Actions always run on the writer
//! thread, between write groups.
//!
//! The counts are read at most once per [`LIVE_MAX_AGE`] however many
//! pages and browsers ask; one sample of them is kept per
//! [`SAMPLE_EVERY`] for the last hour (in memory: a restarted server
//! starts a new hour). A shape is computed once per dimension and set,
//! then again in the background when it is older than [`SHAPE_MAX_AGE`]
//! and asked for.

use crate::backend::Spool;
use crate::error::Result as SpoolResult;
use crate::ops::shape::{shape, Shape, ShapeBy, ShapeOptions, ShapeState};
use crate::ops::top::{delivered_between, read_header, Header, Sample};
use crate::serve::http::{Answer, Shared};
use crate::serve::writer::Job;
use crate::serve::ServeEvent;
use crate::time::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The longest the counts are reused.
pub(crate) const LIVE_MAX_AGE: Duration = Duration::from_secs(1);

/// How often a sample of the counts is kept.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// Samples kept: one hour.
pub(crate) const SAMPLES: usize = 360;

/// The longest a shape is reused.
pub(crate) const SHAPE_MAX_AGE: Duration = Duration::from_secs(5);

/// The counts of the last read, and the hour of samples.
#[derive(Default)]
struct Live {
    at: Option<Instant>,
    header: Option<Arc<Header>>,
    samples: VecDeque<Sample>,
    /// The counts the last sample was taken from.
    sampled: Option<(Timestamp, Header)>,
}

/// The console's state, shared by every request.
pub(crate) struct Console {
    /// Served over TLS: cookies are `Secure`, the origin is `https://`.
    pub(crate) tls: bool,
    live: tokio::sync::Mutex<Live>,
    shapes: tokio::sync::Mutex<HashMap<(ShapeBy, ShapeState), Cached>>,
}

/// A shape, when it was computed, and whether a newer one is being
/// computed.
struct Cached {
    at: Instant,
    shape: Arc<Shape>,
    refreshing: bool,
}

/// The counts now and the samples of the last hour, oldest first.
pub(crate) struct Counts {
    pub(crate) header: Arc<Header>,
    pub(crate) samples: Vec<Sample>,
}

impl Console {
    pub(crate) fn new(tls: bool) -> Console {
        Console {
            tls,
            live: tokio::sync::Mutex::new(Live::default()),
            shapes: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The counts, read at most once per [`LIVE_MAX_AGE`].
    pub(crate) async fn counts(&self, shared: &Shared) -> Result<Counts, Answer> {
        let mut live = self.live.lock().await;
        let fresh = live.at.is_some_and(|at| at.elapsed() < LIVE_MAX_AGE);
        if !fresh || live.header.is_none() {
            let now = Timestamp::now();
            let header = read(shared, move |s| read_header(s, now)).await?;
            let due = live
                .sampled
                .as_ref()
                .is_none_or(|(at, _)| now.since(*at) >= SAMPLE_EVERY);
            if due {
                let rate = live.sampled.as_ref().and_then(|(at, prev)| {
                    let secs = now.since(*at).as_secs_f64();
                    (secs > 0.0).then(|| delivered_between(prev, &header) as f64 / secs)
                });
                live.samples.push_back(Sample {
                    at: now,
                    depth: header.depth,
                    rate,
                });
                while live.samples.len() > SAMPLES {
                    live.samples.pop_front();
                }
                live.sampled = Some((now, header.clone()));
            }
            live.header = Some(Arc::new(header));
            live.at = Some(Instant::now());
        }
        Ok(Counts {
            header: live.header.clone().unwrap_or_default(),
            samples: live.samples.iter().copied().collect(),
        })
    }

    /// The shape of `state` by `by`, and how old it is. One older than
    /// [`SHAPE_MAX_AGE`] is computed again: now when `wait` (the shape
    /// page), else in the background while the last one is returned (the
    /// overview: a shape walks the whole set, the overview never waits
    /// for it but the first time).
    pub(crate) async fn shape(
        &self,
        shared: &Arc<Shared>,
        by: ShapeBy,
        state: ShapeState,
        wait: bool,
    ) -> Result<(Arc<Shape>, Duration), Answer> {
        let mut shapes = self.shapes.lock().await;
        let stale = |c: &Cached| c.at.elapsed() >= SHAPE_MAX_AGE;
        if let Some(c) = shapes.get_mut(&(by, state)).filter(|c| !wait || !stale(c)) {
            if stale(c) && !c.refreshing {
                c.refreshing = true;
                let shared = shared.clone();
                tokio::spawn(async move {
                    let fresh = compute_shape(&shared, by, state).await;
                    let Some(console) = &shared.console else {
                        return;
                    };
                    let mut shapes = console.shapes.lock().await;
                    match fresh {
                        Ok(shape) => {
                            shapes.insert(
                                (by, state),
                                Cached {
                                    at: Instant::now(),
                                    shape: Arc::new(shape),
                                    refreshing: false,
                                },
                            );
                        }
                        Err(_) => {
                            if let Some(c) = shapes.get_mut(&(by, state)) {
                                c.refreshing = false;
                            }
                        }
                    }
                });
            }
            return Ok((c.shape.clone(), c.at.elapsed()));
        }
        let shape = Arc::new(compute_shape(shared, by, state).await?);
        shapes.insert(
            (by, state),
            Cached {
                at: Instant::now(),
                shape: shape.clone(),
                refreshing: false,
            },
        );
        Ok((shape, Duration::ZERO))
    }
}

async fn compute_shape(shared: &Shared, by: ShapeBy, state: ShapeState) -> Result<Shape, Answer> {
    let opts = ShapeOptions {
        by,
        state,
        // Never keep enqueue or replay waiting for a page.
        yield_to_writers: true,
        ..ShapeOptions::default()
    };
    read(shared, move |sp| shape(sp.queue(), &opts, Timestamp::now())).await
}

/// Run `f` on a read-only handle of the spool: the server's reader on the
/// blocking pool, or the writer's spool for a memory spool.
pub(crate) async fn read<T: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce(&Spool) -> SpoolResult<T> + Send + 'static,
) -> Result<T, Answer> {
    let result = match shared.state.reader() {
        Some(reader) => tokio::task::spawn_blocking(move || f(&reader))
            .await
            .map_err(|_| unreadable())?,
        None => return on_writer(shared, f).await,
    };
    result.map_err(|e| failed(shared, &e))
}

/// Run `f` on the writer's spool, between write groups.
pub(crate) async fn on_writer<T: Send + 'static>(
    shared: &Shared,
    f: impl FnOnce(&Spool) -> SpoolResult<T> + Send + 'static,
) -> Result<T, Answer> {
    let (tx, rx) = oneshot::channel();
    let job = Job::Run(Box::new(move |spool: &Spool| {
        let _ = tx.send(f(spool));
    }));
    if shared.jobs.send(job).await.is_err() {
        return Err(Answer::error(503, "the server is shutting down").retry());
    }
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(failed(shared, &e)),
        Err(_) => Err(unreadable()),
    }
}

fn unreadable() -> Answer {
    Answer::error(503, "the spool cannot be read; see the server's log").retry()
}

/// A library call's error as an answer: what the operator did wrong
/// (an unknown id, a refused option) is 400 and says why; the rest is
/// logged and 503.
fn failed(shared: &Shared, e: &crate::Error) -> Answer {
    match e.kind() {
        crate::ErrorKind::Usage | crate::ErrorKind::Data => Answer::error(400, e.to_string()),
        _ => {
            shared.log.log(&ServeEvent::ReadError(e));
            unreadable()
        }
    }
}
