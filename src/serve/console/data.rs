//! What the console reads, and how: every read is a library call
//! ([`crate::ops`]) on the server's read-only handle of the spool, on
//! the blocking pool — or, for a memory spool, which has no second
//! handle, on the writer thread. Actions always run on the writer
//! thread, between write groups.
//!
//! The counts are read at most once per [`LIVE_MAX_AGE`] however many
//! pages and browsers ask; one sample of them is kept per
//! [`SAMPLE_EVERY`] for the last hour (in memory: a restarted server
//! starts a new hour). The shapes are computed at most once per
//! [`SHAPE_MAX_AGE`] per dimension and set.

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
    shapes: tokio::sync::Mutex<HashMap<(ShapeBy, ShapeState), (Instant, Arc<Shape>)>>,
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

    /// The shape of `state` by `by`, computed at most once per
    /// [`SHAPE_MAX_AGE`]; and how old it is.
    pub(crate) async fn shape(
        &self,
        shared: &Shared,
        by: ShapeBy,
        state: ShapeState,
    ) -> Result<(Arc<Shape>, Duration), Answer> {
        let mut shapes = self.shapes.lock().await;
        if let Some((at, s)) = shapes.get(&(by, state)) {
            if at.elapsed() < SHAPE_MAX_AGE {
                return Ok((s.clone(), at.elapsed()));
            }
        }
        let opts = ShapeOptions {
            by,
            state,
            // Never keep enqueue or replay waiting for a page.
            yield_to_writers: true,
            ..ShapeOptions::default()
        };
        let s = Arc::new(read(shared, move |sp| shape(sp.queue(), &opts, Timestamp::now())).await?);
        shapes.insert((by, state), (Instant::now(), s.clone()));
        Ok((s, Duration::ZERO))
    }
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
    Answer::error(503, "the spool cannot be read; see the server's log")
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
