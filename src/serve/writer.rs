//! The one thread that owns the receiving spool, and group commit.
//!
//! Handlers never touch the spool. Each sends a [`Job`] with a oneshot
//! reply channel and waits. The writer takes the first job, then every
//! job already waiting (without waiting for more: a lone request is not
//! delayed), runs all the writes in *one* [`crate::Queue::receive`]
//! transaction — [`apply_push`] per push, one enqueue per `/v1/items`
//! payload, [`client_state`] per reconciliation read — commits once, and
//! only then answers each job. When the transaction fails nothing of the
//! group is committed and every job of the group gets the same
//! [`Failure`]. Reads that do not need the transaction (`/metrics`,
//! `/healthz`) are answered after the group.
//!
//! A group is bounded ([`MAX_GROUP_REQUESTS`], [`MAX_GROUP_BYTES`]) so
//! that one transaction, and the time the spool is locked for other
//! writers, stays bounded too.

use super::metrics::Metrics;
use super::{ServeEvent, ServeLog};
use crate::backend::Spool;
use crate::error::{Error, ErrorKind};
use crate::item::NewItem;
use crate::push::receiver::{
    apply_item, apply_push, client_state, ItemOutcome, PushOutcome, ReceiveLimits,
};
use crate::push::wire::{ClientState, PushRequest};
use crate::time::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Most requests committed in one transaction.
pub const MAX_GROUP_REQUESTS: usize = 512;

/// Most request bytes (bodies as received, decompressed) committed in
/// one transaction; a single larger request still forms its own group.
/// The writer's working memory for a transaction (the NDJSON index's
/// page cache above all) grows with it and is not part of the memory
/// budget: 16 MiB keeps it near the budget (docs/benchmarks.md,
/// "Scraping and the memory budget").
pub const MAX_GROUP_BYTES: usize = 16 << 20;

/// What a write job asks for.
#[derive(Debug)]
pub(crate) enum Work {
    /// `POST /v1/push`.
    Push(PushRequest),
    /// `POST /v1/items`; `sender` is the token's name when a token file
    /// is in use (the key's scope).
    Item {
        item: NewItem,
        sender: Option<String>,
    },
    /// `GET /v1/clients/{id}`.
    Client(String),
}

/// What a write job got.
#[derive(Debug)]
pub(crate) enum Done {
    Push(PushOutcome),
    Item(ItemOutcome),
    Client(ClientState),
}

/// The spool's state for `/metrics`.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// The §5 gauges, Prometheus text.
    pub gauges: String,
    /// Push clients known.
    pub clients: u64,
}

/// Why a job could not be done: the group's transaction failed.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// Busy or locked: worth retrying soon (503), else 500.
    pub temporary: bool,
}

impl Failure {
    fn of(e: &Error) -> Failure {
        Failure {
            temporary: e.kind() == ErrorKind::Temporary,
        }
    }
}

pub(crate) type Reply<T> = oneshot::Sender<Result<T, Failure>>;

/// One request's business with the spool.
pub(crate) enum Job {
    Write {
        work: Work,
        /// Bytes the request carried, for [`MAX_GROUP_BYTES`].
        weight: usize,
        reply: Reply<Done>,
    },
    Stats {
        reply: Reply<Snapshot>,
    },
    Health {
        reply: Reply<u64>,
    },
    /// Run this on the writer's spool, between write groups: the
    /// console's actions, and its reads of a memory spool (which has no
    /// second handle). It answers through a channel of its own.
    Run(Box<dyn FnOnce(&Spool) + Send>),
}

/// The writer's equipment.
pub(crate) struct Writer {
    pub spool: Spool,
    pub limits: ReceiveLimits,
    pub metrics: Arc<Metrics>,
    pub log: Arc<dyn ServeLog>,
    pub commit_delay: Duration,
}

impl Writer {
    /// Serve jobs until every sender is gone. Returns the spool.
    pub fn run(self, mut rx: mpsc::Receiver<Job>) -> Spool {
        let mut carry: Option<Job> = None;
        loop {
            let first = match carry.take() {
                Some(j) => j,
                None => match rx.blocking_recv() {
                    Some(j) => j,
                    None => break,
                },
            };
            let mut writes: Vec<(Work, Reply<Done>)> = Vec::new();
            let mut reads: Vec<Job> = Vec::new();
            let mut bytes = 0usize;
            let mut next = Some(first);
            while let Some(job) = next.take() {
                match job {
                    Job::Write {
                        work,
                        weight,
                        reply,
                    } => {
                        if !writes.is_empty() && bytes.saturating_add(weight) > MAX_GROUP_BYTES {
                            carry = Some(Job::Write {
                                work,
                                weight,
                                reply,
                            });
                            break;
                        }
                        bytes = bytes.saturating_add(weight);
                        writes.push((work, reply));
                    }
                    read => reads.push(read),
                }
                if writes.len() + reads.len() >= MAX_GROUP_REQUESTS {
                    break;
                }
                next = rx.try_recv().ok();
            }
            if !writes.is_empty() {
                self.commit(writes);
            }
            for job in reads {
                self.read(job);
            }
        }
        self.spool
    }

    /// Run `writes` in one transaction, then answer each.
    fn commit(&self, writes: Vec<(Work, Reply<Done>)>) {
        let mut done: Vec<Done> = Vec::with_capacity(writes.len());
        let limits = self.limits;
        let delay = self.commit_delay;
        let result = self.spool.receive(&mut |txn| {
            done.clear();
            for (work, _) in &writes {
                done.push(match work {
                    Work::Push(req) => Done::Push(apply_push(txn, req, &limits)?),
                    Work::Item { item, sender } => {
                        Done::Item(apply_item(txn, item, sender.as_deref(), &limits)?)
                    }
                    Work::Client(id) => Done::Client(client_state(txn, id)?),
                });
            }
            if !delay.is_zero() {
                // A slow disk, for tests and benchmarks of group commit.
                std::thread::sleep(delay);
            }
            Ok(())
        });
        match result {
            Ok(()) => {
                self.metrics.commit(writes.len() as u64);
                for ((_, reply), d) in writes.into_iter().zip(done) {
                    match &d {
                        Done::Push(PushOutcome::Accepted(a)) => self.metrics.entries(
                            a.response.applied,
                            a.response.duplicates,
                            a.rejected,
                            a.skipped,
                        ),
                        Done::Item(ItemOutcome::Enqueued(e)) => self.metrics.item(e.deduplicated),
                        _ => {}
                    }
                    // The requester may have gone away; what it sent is
                    // committed all the same, and a resend is a duplicate.
                    let _ = reply.send(Ok(d));
                }
            }
            Err(e) => {
                let failure = Failure::of(&e);
                self.log.log(&ServeEvent::StorageError {
                    requests: writes.len(),
                    error: &e,
                });
                for (_, reply) in writes {
                    let _ = reply.send(Err(failure.clone()));
                }
            }
        }
    }

    fn read(&self, job: Job) {
        match job {
            Job::Stats { reply } => {
                let snapshot = (|| {
                    let gauges = crate::ops::stats::stats(&self.spool, Timestamp::now())?;
                    let clients = self.spool.push_clients()?.len() as u64;
                    Ok::<_, Error>(Snapshot {
                        gauges: gauges.prometheus(),
                        clients,
                    })
                })();
                let _ = reply.send(self.reported(snapshot));
            }
            Job::Health { reply } => {
                let size = self.spool.size();
                let _ = reply.send(self.reported(size));
            }
            Job::Run(run) => run(&self.spool),
            Job::Write { reply, .. } => {
                let _ = reply.send(Err(Failure { temporary: false }));
            }
        }
    }

    fn reported<T>(&self, r: crate::Result<T>) -> Result<T, Failure> {
        r.map_err(|e| {
            self.log.log(&ServeEvent::ReadError(&e));
            Failure::of(&e)
        })
    }
}
