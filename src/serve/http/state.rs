//! The spool's state for `/metrics` and `/healthz`, computed at most
//! once per [`SNAPSHOT_MAX_AGE`] however many requests ask.

use super::{Answer, Shared};
use crate::backend::Spool;
use crate::serve::metrics::{self, SpoolState};
use crate::serve::writer::{Failure, Job, Snapshot};
use crate::serve::{ServeEvent, SNAPSHOT_MAX_AGE};
use crate::time::Timestamp;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

async fn ask<T>(
    shared: &Shared,
    job: impl FnOnce(oneshot::Sender<Result<T, Failure>>) -> Job,
) -> Result<T, ()> {
    let (reply, answer) = oneshot::channel();
    if shared.jobs.send(job(reply)).await.is_err() {
        return Err(());
    }
    match answer.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) | Err(_) => Err(()),
    }
}

/// The spool's state for `/metrics` and `/healthz`: one snapshot, kept
/// for [`SNAPSHOT_MAX_AGE`]. Requests that find it stale wait for one
/// computation together (the lock is held across it), so it is computed
/// at most once per `SNAPSHOT_MAX_AGE` however many requests ask, and a
/// request that finds it fresh costs nothing but a copy.
pub(crate) struct StateCache {
    /// A read-only handle of the spool, used on the blocking pool; `None`
    /// (a memory spool): the writer thread computes it.
    reader: Option<Arc<Spool>>,
    last: tokio::sync::Mutex<Option<(Instant, Computed)>>,
}

/// A snapshot, or the failure to take one (logged when it happened).
type Computed = Result<Arc<SpoolState>, ()>;

impl StateCache {
    pub fn new(reader: Option<Arc<Spool>>) -> StateCache {
        StateCache {
            reader,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The read-only handle of the spool (`None`: a memory spool, read
    /// on the writer thread).
    pub(crate) fn reader(&self) -> Option<Arc<Spool>> {
        self.reader.clone()
    }

    pub(super) async fn get(&self, shared: &Shared) -> Result<Arc<SpoolState>, Answer> {
        let unreadable = || Answer::error(503, "the spool cannot be read; see the server's log");
        let mut last = self.last.lock().await;
        if let Some((at, state)) = &*last {
            if at.elapsed() < SNAPSHOT_MAX_AGE {
                return state.clone().map_err(|_| unreadable());
            }
        }
        let state = self.compute(shared).await;
        shared.metrics.snapshot_computed();
        *last = Some((Instant::now(), state.clone()));
        state.map_err(|_| unreadable())
    }

    async fn compute(&self, shared: &Shared) -> Computed {
        let Some(reader) = &self.reader else {
            let Snapshot { gauges, clients } = ask(shared, |reply| Job::Stats { reply }).await?;
            let depth = ask(shared, |reply| Job::Health { reply }).await?;
            return Ok(Arc::new(SpoolState {
                gauges,
                depth,
                clients,
            }));
        };
        let reader = reader.clone();
        let state =
            tokio::task::spawn_blocking(move || metrics::spool_state(&reader, Timestamp::now()))
                .await;
        match state {
            Ok(Ok(s)) => Ok(Arc::new(s)),
            Ok(Err(e)) => {
                shared.log.log(&ServeEvent::ReadError(&e));
                Err(())
            }
            Err(_) => Err(()),
        }
    }
}
