//! [`Worker`]: the executor monitor callbacks post to.
//!
//! The reference's rule is that a `NetworkMonitor` callback does O(1)
//! work — post and return — so the probe thread keeps probing while the
//! reconnect sequence and replay run elsewhere. This is that elsewhere:
//! one thread, a FIFO of boxed jobs.
//!
//! Guarantees:
//!
//! * Jobs run one at a time, in the order they were posted.
//! * A job that panics is contained; the worker keeps running
//!   ([`Worker::panicked_jobs`] counts them).
//! * [`Worker::post`] never blocks on the job queue and returns `false`
//!   once the worker is shut down (the job is dropped, not run).
//! * [`Worker::shutdown`] is idempotent: [`Shutdown::Drain`] runs what
//!   was posted before it, [`Shutdown::DiscardPending`] only lets the job
//!   in flight finish. From any thread but the worker's it returns once
//!   the thread has ended; from a job it detaches. Dropping the worker
//!   drains it.

use super::monitor::lock;
use crate::error::{Error, Result};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle, ThreadId};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// What happens to jobs still queued at shutdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// Run every job posted before the shutdown, then stop.
    Drain,
    /// Finish the job in flight; drop the rest unrun.
    DiscardPending,
}

struct Shared {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    discard: AtomicBool,
    pending: AtomicUsize,
    panicked: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: OnceLock<ThreadId>,
    running: Mutex<bool>,
    ended: Condvar,
}

impl Shared {
    fn post(&self, job: Job) -> bool {
        let tx = lock(&self.tx);
        let Some(tx) = tx.as_ref() else {
            return false;
        };
        self.pending.fetch_add(1, Ordering::SeqCst);
        if tx.send(job).is_err() {
            self.pending.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    fn on_worker_thread(&self) -> bool {
        self.thread_id.get() == Some(&thread::current().id())
    }
}

/// A cloneable way to post jobs to a [`Worker`] (for monitor callbacks).
/// It does not keep the worker alive.
#[derive(Clone)]
pub struct Poster {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Poster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster")
            .field("pending", &self.shared.pending.load(Ordering::SeqCst))
            .finish()
    }
}

impl Poster {
    /// Queue `job`; `false` (and the job dropped) once the worker is shut
    /// down.
    pub fn post(&self, job: impl FnOnce() + Send + 'static) -> bool {
        self.shared.post(Box::new(job))
    }

    /// Jobs posted and not started yet (a host can skip posting a
    /// periodic replay while one is still queued).
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::SeqCst)
    }
}

/// One thread running posted jobs in order.
pub struct Worker {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pending", &self.pending())
            .field("running", &*lock(&self.shared.running))
            .finish()
    }
}

impl Worker {
    /// Start the worker thread, named `name`.
    pub fn start(name: &str) -> Result<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let shared = Arc::new(Shared {
            tx: Mutex::new(Some(tx)),
            discard: AtomicBool::new(false),
            pending: AtomicUsize::new(0),
            panicked: AtomicU64::new(0),
            thread: Mutex::new(None),
            thread_id: OnceLock::new(),
            running: Mutex::new(true),
            ended: Condvar::new(),
        });
        let inner = shared.clone();
        let spawned = thread::Builder::new()
            .name(name.to_string())
            .spawn(move || run(inner, rx));
        match spawned {
            Ok(h) => *lock(&shared.thread) = Some(h),
            Err(e) => {
                *lock(&shared.running) = false;
                return Err(Error::Internal(format!(
                    "cannot start the worker thread {name:?}: {e}"
                )));
            }
        }
        Ok(Worker { shared })
    }

    /// Queue `job`; `false` (and the job dropped) once shut down.
    pub fn post(&self, job: impl FnOnce() + Send + 'static) -> bool {
        self.shared.post(Box::new(job))
    }

    /// A cloneable poster for callbacks.
    pub fn poster(&self) -> Poster {
        Poster {
            shared: self.shared.clone(),
        }
    }

    /// Jobs posted and not started yet (a host can skip posting a
    /// periodic replay while one is still queued).
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::SeqCst)
    }

    /// Jobs that panicked so far.
    pub fn panicked_jobs(&self) -> u64 {
        self.shared.panicked.load(Ordering::SeqCst)
    }

    /// Wait until every job posted before this call has run. `false` when
    /// the worker is shut down, or when called from a job (it would wait
    /// for itself).
    pub fn flush(&self) -> bool {
        if self.shared.on_worker_thread() {
            return false;
        }
        let (tx, rx) = mpsc::channel::<()>();
        if !self.post(move || {
            let _ = tx.send(());
        }) {
            return false;
        }
        rx.recv().is_ok()
    }

    /// Stop accepting jobs and end the thread; see [`Shutdown`].
    /// Idempotent.
    pub fn shutdown(&self, mode: Shutdown) {
        if mode == Shutdown::DiscardPending {
            self.shared.discard.store(true, Ordering::SeqCst);
        }
        // Dropping the only sender ends the thread's loop once the queue
        // is empty.
        drop(lock(&self.shared.tx).take());
        if self.shared.on_worker_thread() {
            drop(lock(&self.shared.thread).take());
            return;
        }
        let handle = lock(&self.shared.thread).take();
        match handle {
            Some(h) => {
                let _ = h.join();
            }
            None => {
                let mut running = lock(&self.shared.running);
                while *running {
                    running = self
                        .shared
                        .ended
                        .wait(running)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shutdown(Shutdown::Drain);
    }
}

fn run(shared: Arc<Shared>, rx: mpsc::Receiver<Job>) {
    let _ = shared.thread_id.set(thread::current().id());
    while let Ok(job) = rx.recv() {
        shared.pending.fetch_sub(1, Ordering::SeqCst);
        if !shared.discard.load(Ordering::SeqCst) && catch_unwind(AssertUnwindSafe(job)).is_err() {
            shared.panicked.fetch_add(1, Ordering::SeqCst);
        }
    }
    *lock(&shared.running) = false;
    shared.ended.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn runs_jobs_in_order_and_survives_panics() {
        let w = Worker::start("t").unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let log = log.clone();
            assert!(w.post(move || {
                if i == 2 {
                    panic!("job 2");
                }
                log.lock().unwrap().push(i);
            }));
        }
        assert!(w.flush());
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 3, 4]);
        assert_eq!(w.panicked_jobs(), 1);
        assert_eq!(w.pending(), 0);
    }

    #[test]
    fn drain_runs_queued_jobs_and_discard_drops_them() {
        for (mode, expect) in [(Shutdown::Drain, 3), (Shutdown::DiscardPending, 1)] {
            let w = Worker::start("t").unwrap();
            let (gate_tx, gate_rx) = mpsc::channel::<()>();
            let (started_tx, started_rx) = mpsc::channel::<()>();
            let count = Arc::new(AtomicUsize::new(0));
            let c = count.clone();
            w.post(move || {
                let _ = started_tx.send(());
                let _ = gate_rx.recv();
                c.fetch_add(1, Ordering::SeqCst);
            });
            for _ in 0..2 {
                let c = count.clone();
                w.post(move || {
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
            started_rx.recv().unwrap();
            let poster = w.poster();
            let w = Arc::new(w);
            let w2 = w.clone();
            let stopper = thread::spawn(move || w2.shutdown(mode));
            // The shutdown closes the queue before it waits for the job.
            while poster.post(|| {}) {
                thread::yield_now();
            }
            gate_tx.send(()).unwrap();
            stopper.join().unwrap();
            assert_eq!(count.load(Ordering::SeqCst), expect, "{mode:?}");
            assert!(!w.post(|| {}), "no posting after shutdown");
            w.shutdown(mode);
        }
    }

    #[test]
    fn shutdown_from_a_job_detaches() {
        let w = Arc::new(Worker::start("t").unwrap());
        let w2 = w.clone();
        let (tx, rx) = mpsc::channel();
        w.post(move || {
            w2.shutdown(Shutdown::Drain);
            let _ = tx.send("returned");
        });
        assert_eq!(rx.recv().unwrap(), "returned");
        w.shutdown(Shutdown::Drain);
        assert!(!*lock(&w.shared.running));
    }
}
