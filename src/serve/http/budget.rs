//! The memory budget of `spool serve`: one request's share of it
//! ([`Reservation`]), why a share cannot grow ([`Refused`]), and what a
//! parsed push request counts against it.

use super::{Answer, Shared};
use crate::push::wire::{Entry, Payload, PushRequest};
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What one parsed push item entry counts against the memory budget
/// beside its payload, key, digest and time: its structures and the
/// writer's work on it (statements, the NDJSON line).
pub const ENTRY_COST: usize = 512;

/// What one parsed skip entry counts against the memory budget.
pub const SKIP_COST: usize = 64;
/// Why a [`Reservation`] could not grow.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The budget is taken by other requests for now: 503.
    Busy,
    /// This request alone would need more than the whole budget: 413.
    Never { total: usize },
}

impl Refused {
    pub(super) fn answer(self) -> Answer {
        match self {
            Refused::Busy => Answer::error(
                503,
                "the server holds too much request data at the moment (--memory-budget); retry \
                 later",
            )
            .retry(),
            Refused::Never { total } => Answer::error(
                413,
                format!(
                    "the request needs more memory than the server's whole budget of {total} \
                     bytes (--memory-budget); send a smaller request"
                ),
            ),
        }
    }
}

/// One request's share of the memory budget, held until its answer is
/// sent (dropping it gives the share back).
pub(crate) struct Reservation {
    budget: Arc<Semaphore>,
    total: usize,
    held: Option<OwnedSemaphorePermit>,
}

impl Reservation {
    pub(super) fn new(shared: &Shared) -> Reservation {
        Reservation::of_budget(shared.budget.clone(), shared.budget_total)
    }

    /// A reservation against `budget`, whose size is `total`.
    pub(crate) fn of_budget(budget: Arc<Semaphore>, total: usize) -> Reservation {
        Reservation {
            budget,
            total,
            held: None,
        }
    }

    /// Bytes held now.
    pub(super) fn held(&self) -> usize {
        self.held.as_ref().map_or(0, |p| p.num_permits())
    }

    /// Hold `n` more bytes, without waiting.
    pub(super) fn take(&mut self, n: usize) -> Result<(), Refused> {
        if n == 0 {
            return Ok(());
        }
        if self.held().saturating_add(n) > self.total {
            return Err(Refused::Never { total: self.total });
        }
        let mut got: Option<OwnedSemaphorePermit> = None;
        let mut left = n;
        while left > 0 {
            let step = left.min(u32::MAX as usize);
            // Partial grants go back when `got` is dropped.
            let p = self
                .budget
                .clone()
                .try_acquire_many_owned(step as u32)
                .map_err(|_| Refused::Busy)?;
            match &mut got {
                Some(g) => g.merge(p),
                None => got = Some(p),
            }
            left -= step;
        }
        if let Some(p) = got {
            match &mut self.held {
                Some(h) => h.merge(p),
                None => self.held = Some(p),
            }
        }
        Ok(())
    }

    /// Give back `n` bytes (or all that is held, if less).
    pub(super) fn release(&mut self, n: usize) {
        if let Some(h) = &mut self.held {
            let n = n.min(h.num_permits());
            drop(h.split(n));
        }
    }

    /// Hold exactly `n` bytes: give back the excess, or take the rest.
    pub(super) fn set(&mut self, n: usize) -> Result<(), Refused> {
        let held = self.held();
        if n < held {
            self.release(held - n);
            Ok(())
        } else {
            self.take(n - held)
        }
    }
}

/// Append `data` to `buf`, holding the budget for every byte `buf`
/// allocates (its capacity, which grows by doubling up to `cap`).
pub(super) fn append(
    buf: &mut Vec<u8>,
    data: &[u8],
    cap: usize,
    res: &mut Reservation,
) -> Result<(), Refused> {
    let need = buf.len() + data.len();
    if need > buf.capacity() {
        let want = need
            .max(buf.capacity().saturating_mul(2))
            .min(cap.max(need));
        res.take(want - buf.capacity())?;
        buf.reserve_exact(want - buf.len());
    }
    buf.extend_from_slice(data);
    Ok(())
}

/// What the parsed `req` counts against the memory budget.
pub(super) fn parsed_cost(req: &PushRequest) -> usize {
    req.entries
        .iter()
        .map(|e| match e {
            Entry::Skip { .. } => SKIP_COST,
            Entry::Item(item) => {
                let payload = match &item.payload {
                    Payload::Bytes(b) => b.len(),
                    Payload::Undecodable { base64, reason } => base64.len() + reason.len(),
                };
                ENTRY_COST
                    + payload
                    + item.key.len()
                    + item.digest.len()
                    + item.enqueued_at.as_ref().map_or(0, String::len)
            }
        })
        .fold(req.client_id.len(), usize::saturating_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(total: usize) -> Reservation {
        Reservation {
            budget: Arc::new(Semaphore::new(total)),
            total,
            held: None,
        }
    }

    #[test]
    fn reservations_grow_shrink_and_give_back() {
        let mut a = reservation(1000);
        let budget = a.budget.clone();
        a.take(600).unwrap();
        assert!(matches!(a.take(500), Err(Refused::Never { total: 1000 })));
        let mut b = Reservation {
            budget: budget.clone(),
            total: 1000,
            held: None,
        };
        assert!(matches!(b.take(500), Err(Refused::Busy)));
        assert_eq!(
            budget.available_permits(),
            400,
            "a refused take holds nothing"
        );
        a.set(100).unwrap();
        assert_eq!(budget.available_permits(), 900);
        b.take(500).unwrap();
        a.set(300).unwrap();
        assert_eq!(budget.available_permits(), 200);
        drop(a);
        drop(b);
        assert_eq!(budget.available_permits(), 1000);
    }
}
