//! The sender's side of push: the outbox that numbers entries, and what to
//! do with each answer. Pure decisions; the `replay --push` loop does the
//! HTTP and the storage.
//!
//! [`Outbox`] is the reliable outbox of the seeds: sequence numbers from 1
//! with no gaps, an in-flight map, cumulative acks clamped to what was
//! really assigned, a watermark that never moves backwards, and
//! retransmission with the original numbers. A durable sender keeps the
//! same three facts in its spool (next sequence number, watermark, the
//! in-flight items with their numbers), commits a new number *before* the
//! request that carries it is sent, and rebuilds an outbox from them with
//! [`Outbox::restore`].
//!
//! [`decide`] turns one answer into a [`Decision`], following §7's
//! sender rule:
//!
//! | answer | decision |
//! |---|---|
//! | 2xx with a push response | [`Decision::Ack`]: watermark to `min(last_seq, highest assigned)`, never backwards; an over-ack is flagged; rejects reported only inside the newly acknowledged range |
//! | 2xx whose body is not a push response | [`Decision::Backoff`] (resending is safe; see below) |
//! | 409 and the batch started beyond `last_seq + 1`, `last_seq` ≥ watermark | [`Decision::Resend`] from `last_seq + 1` |
//! | 409 and the batch started beyond `last_seq + 1`, `last_seq` < watermark | [`Decision::Stop`] (`Data`): the receiver lost state |
//! | 409 otherwise (a content conflict), or without `last_seq` | [`Decision::Stop`] (`Data`) with the body's error |
//! | 401, 403 | [`Decision::Stop`] (`PermissionDenied`); the request's entries stay in flight |
//! | 413, batch of two or more | [`Decision::Halve`] |
//! | 413, batch of one | [`Decision::DeadLetter`] that entry |
//! | 408, 425, 429, 5xx, 1xx, 3xx, timeout, connection error | [`Decision::Backoff`], honouring `Retry-After` |
//! | any other 4xx | [`Decision::Stop`] (`Data`) with the body's error |
//!
//! The CLI maps [`ErrorKind::Data`] to exit 65 and
//! [`ErrorKind::PermissionDenied`] to exit 77, as for every other error.
//!
//! Decisions made where §7 is silent:
//!
//! * A 2xx body that does not parse (a captive portal's HTML page, a proxy)
//!   is a failed request, not a refusal: the receiver's state is unknown,
//!   resending the same entries is always safe, and the request budget
//!   bounds it.
//! * 3xx is a failed request, as for `--url` (redirects are not followed).
//! * A 200 whose `last_seq` is *below* the watermark changes nothing (the
//!   watermark never moves backwards). It can only answer an empty batch:
//!   a non-empty one starts at `watermark + 1`, which such a receiver
//!   answers with a 409 gap, and that stops the run.
//! * A 413 for a single entry dead-letters its item; its sequence number
//!   is then abandoned with [`Outbox::abandon`] and goes out as a `skip`
//!   entry, exactly as for `done --force`, so the stream has no hole.

use super::retry_after::RetryAfter;
use super::wire::{self, PushResponse, Rejected};
use crate::error::{Error, ErrorKind, Result};
use std::collections::BTreeMap;
use std::ops::{Range, RangeInclusive};

/// The longest piece of a receiver's body quoted in a message, in bytes.
const BODY_SNIPPET: usize = 200;

/// What sits at an in-flight sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Slot<T> {
    /// An item that is in flight.
    Item(T),
    /// An abandoned number: the item is gone, a `skip` entry goes out.
    Skip,
}

/// The sender-local reliable state of one push stream.
///
/// Invariant: every sequence number in `watermark + 1 .. next_seq` is in
/// flight (as an item or a skip), and nothing else is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outbox<T> {
    next_seq: u64,
    watermark: u64,
    in_flight: BTreeMap<u64, Slot<T>>,
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Outbox::new()
    }
}

impl<T> Outbox<T> {
    /// A new stream: the first number assigned is 1, nothing acknowledged.
    pub fn new() -> Outbox<T> {
        Outbox {
            next_seq: 1,
            watermark: 0,
            in_flight: BTreeMap::new(),
        }
    }

    /// Rebuild the outbox from what a spool stores: the next number to
    /// assign, the watermark, and the in-flight items with their numbers.
    ///
    /// A number between the watermark and `next_seq` that has no item is a
    /// skip: the item left the spool while in flight (`done --force`, or a
    /// writer that does not know about push), and the receiver must be told
    /// to move past it. Fails, changing nothing, when the facts contradict
    /// each other (`next_seq` 0, a watermark at or above `next_seq`, an
    /// item numbered outside `watermark + 1 .. next_seq`).
    pub fn restore(
        next_seq: u64,
        watermark: u64,
        items: impl IntoIterator<Item = (u64, T)>,
    ) -> Result<Outbox<T>> {
        if next_seq == 0 || watermark >= next_seq {
            return Err(Error::InvalidInput(format!(
                "push state is inconsistent: watermark {watermark}, next sequence number {next_seq}"
            )));
        }
        let mut in_flight = BTreeMap::new();
        for (seq, item) in items {
            if seq <= watermark || seq >= next_seq {
                return Err(Error::InvalidInput(format!(
                    "push state is inconsistent: an item is in flight as sequence number {seq}, \
                     outside {}..{next_seq}",
                    watermark + 1
                )));
            }
            if in_flight.insert(seq, Slot::Item(item)).is_some() {
                return Err(Error::InvalidInput(format!(
                    "push state is inconsistent: two items are in flight as sequence number {seq}"
                )));
            }
        }
        for seq in watermark + 1..next_seq {
            in_flight.entry(seq).or_insert(Slot::Skip);
        }
        Ok(Outbox {
            next_seq,
            watermark,
            in_flight,
        })
    }

    /// The number the next [`Outbox::assign`] returns.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The highest number ever assigned (0 when none).
    pub fn highest_assigned(&self) -> u64 {
        self.next_seq - 1
    }

    /// The highest number the receiver has acknowledged (0 when none):
    /// the `acked` of the next request.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// The in-flight entries in ascending order: what a retransmission
    /// resends, with the original numbers. Always `watermark + 1 ..
    /// next_seq`, contiguous.
    pub fn in_flight(&self) -> impl Iterator<Item = (u64, &Slot<T>)> + '_ {
        self.in_flight.iter().map(|(s, slot)| (*s, slot))
    }

    /// The in-flight entries from `from` on (for [`Decision::Resend`]).
    pub fn in_flight_from(&self, from: u64) -> impl Iterator<Item = (u64, &Slot<T>)> + '_ {
        self.in_flight.range(from..).map(|(s, slot)| (*s, slot))
    }

    /// How many entries are in flight.
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    /// Give `item` the next number and put it in flight. A durable sender
    /// persists the number before sending it.
    pub fn assign(&mut self, item: T) -> u64 {
        let seq = self.next_seq;
        self.in_flight.insert(seq, Slot::Item(item));
        self.next_seq += 1;
        seq
    }

    /// Abandon an in-flight number: its item leaves the stream (an operator
    /// removed it, or a 413 dead-lettered it) and a `skip` entry takes its
    /// place. Returns the item, or `None` when `seq` is not an in-flight
    /// item.
    pub fn abandon(&mut self, seq: u64) -> Option<T> {
        match self.in_flight.get_mut(&seq) {
            Some(slot @ Slot::Item(_)) => match std::mem::replace(slot, Slot::Skip) {
                Slot::Item(item) => Some(item),
                Slot::Skip => None,
            },
            _ => None,
        }
    }

    /// A cumulative acknowledgement up to `last_seq`: the entries it
    /// settles, in ascending order. Clamped to the highest number
    /// assigned; an ack at or below the watermark settles nothing.
    pub fn ack(&mut self, last_seq: u64) -> Vec<(u64, Slot<T>)> {
        let upto = last_seq.min(self.highest_assigned());
        if upto <= self.watermark {
            return Vec::new();
        }
        let rest = self.in_flight.split_off(&(upto + 1));
        let settled = std::mem::replace(&mut self.in_flight, rest);
        self.watermark = upto;
        settled.into_iter().collect()
    }

    /// Apply an [`Ack`] decision: move the watermark and say what became of
    /// each settled entry (delivered, rejected with the receiver's reason,
    /// or an abandoned number).
    pub fn settle(&mut self, ack: &Ack) -> Vec<Settled<T>> {
        self.ack(ack.last_seq)
            .into_iter()
            .map(|(seq, slot)| match slot {
                Slot::Skip => Settled::Skipped { seq },
                Slot::Item(item) => match ack.reason(seq) {
                    Some(reason) => Settled::Rejected {
                        seq,
                        item,
                        reason: reason.to_string(),
                    },
                    None => Settled::Delivered { seq, item },
                },
            })
            .collect()
    }

    /// What [`decide`] needs to know about a request carrying the entries
    /// `batch`, sent from this state.
    pub fn sent(&self, batch: Range<u64>) -> Sent {
        Sent {
            batch,
            watermark: self.watermark,
            highest_assigned: self.highest_assigned(),
        }
    }
}

/// What became of one settled entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Settled<T> {
    /// The receiver applied it: mark the item delivered.
    Delivered {
        /// Its number.
        seq: u64,
        /// The item.
        item: T,
    },
    /// The receiver refused it: dead-letter the item with `reason` as its
    /// `last_error`. Never retried.
    Rejected {
        /// Its number.
        seq: u64,
        /// The item.
        item: T,
        /// The receiver's reason.
        reason: String,
    },
    /// An abandoned number the receiver moved past.
    Skipped {
        /// The number.
        seq: u64,
    },
}

/// The request an answer belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The sequence numbers of its entries (empty for a request that only
    /// reports `acked`).
    pub batch: Range<u64>,
    /// The watermark when it was sent (its `acked`).
    pub watermark: u64,
    /// The highest number assigned when it was sent.
    pub highest_assigned: u64,
}

impl Sent {
    fn len(&self) -> u64 {
        self.batch.end.saturating_sub(self.batch.start)
    }
}

/// What came back for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    /// An HTTP answer.
    Http {
        /// The status code.
        status: u16,
        /// The body (as received, decompressed).
        body: &'a [u8],
        /// The parsed `Retry-After` header, if any.
        retry_after: Option<RetryAfter>,
    },
    /// No answer: a timeout, a refused or reset connection, a TLS failure.
    Transport {
        /// What happened, for the log and `last_error`.
        error: &'a str,
    },
}

/// A cumulative acknowledgement, clamped and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The new watermark: `max(watermark, min(receiver's last_seq,
    /// highest assigned))`.
    pub last_seq: u64,
    /// The watermark before this answer.
    pub previous: u64,
    /// `Some(n)` when the receiver claimed `last_seq = n` above the
    /// highest number ever assigned: ignored beyond the clamp, and to be
    /// logged loudly (the receiver holds another client's history under
    /// this id, or is broken).
    pub over_ack: Option<u64>,
    /// The receiver's rejects inside `previous + 1 ..= last_seq`,
    /// ascending, one per number.
    pub rejected: Vec<Rejected>,
}

impl Ack {
    /// The numbers this answer settles (empty when it moved nothing).
    pub fn seqs(&self) -> RangeInclusive<u64> {
        self.previous + 1..=self.last_seq
    }

    /// The same acknowledgement seen from a later watermark: an earlier
    /// answer of a pipelined stream may have moved it past `previous`.
    /// What this one settles is then only what lies beyond `watermark`
    /// (nothing, when `last_seq` is not above it).
    pub fn rebase(mut self, watermark: u64) -> Ack {
        if watermark > self.previous {
            self.previous = watermark;
            self.last_seq = self.last_seq.max(watermark);
            self.rejected.retain(|r| r.seq > watermark);
        }
        self
    }

    /// The receiver's reason when it refused `seq`.
    pub fn reason(&self, seq: u64) -> Option<&str> {
        self.rejected
            .binary_search_by_key(&seq, |r| r.seq)
            .ok()
            .map(|i| self.rejected[i].error.as_str())
    }
}

/// Why the push run stops. Nothing is resent and nothing is settled: the
/// entries of the refused request keep their sequence numbers, in flight,
/// for a later run to resend as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    /// [`ErrorKind::Data`] (exit 65) or [`ErrorKind::PermissionDenied`]
    /// (exit 77).
    pub kind: ErrorKind,
    /// Which situation it is, for the operator's next step.
    pub cause: StopCause,
    /// One line for the operator.
    pub message: String,
}

/// The situations that stop a push run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopCause {
    /// 409 gap below the watermark: the receiver forgot what it had
    /// acknowledged (restored from a backup).
    LostState,
    /// 409 that is not a gap: a number reused with different content,
    /// most likely a copied spool pushing as the same client.
    ContentConflict,
    /// 401 or 403: the receiver does not accept this client.
    Unauthorized,
    /// Any other refusal (400 and other 4xx, a 409 without `last_seq`, a
    /// 413 for an empty request).
    Refused,
}

/// What the sender does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Settle the acknowledged entries ([`Outbox::settle`]) and continue
    /// with the next batch.
    Ack(Ack),
    /// The receiver is behind the batch but not behind the watermark:
    /// resend the in-flight entries from `from` on. Nothing is settled.
    Resend {
        /// The first number to send (`last_seq + 1`).
        from: u64,
    },
    /// The body was too large: retry with at most `max_entries` entries.
    Halve {
        /// Half the entries of the refused batch (at least 1).
        max_entries: u64,
    },
    /// One entry alone is too large: dead-letter its item with `reason`
    /// and abandon its number ([`Outbox::abandon`]) so that a `skip` goes
    /// out in its place.
    DeadLetter {
        /// The entry's number.
        seq: u64,
        /// Why, for `last_error`.
        reason: String,
    },
    /// A failed request: count an attempt on every entry of the batch,
    /// back off (with jitter, at least `retry_after` when given) and resend
    /// the same entries.
    Backoff {
        /// What the receiver asked for.
        retry_after: Option<RetryAfter>,
        /// What happened, for `last_error`.
        reason: String,
    },
    /// Stop the run.
    Stop(Stop),
}

/// Decide what to do with the answer to the request described by `sent`.
pub fn decide(sent: &Sent, reply: Reply<'_>) -> Decision {
    let (status, body, retry_after) = match reply {
        Reply::Transport { error } => {
            return Decision::Backoff {
                retry_after: None,
                reason: format!("push request failed: {error}"),
            }
        }
        Reply::Http {
            status,
            body,
            retry_after,
        } => (status, body, retry_after),
    };
    match status {
        200..=299 => match wire::parse_response(body) {
            Ok(resp) => Decision::Ack(ack(sent, resp)),
            Err(e) => Decision::Backoff {
                retry_after,
                reason: format!(
                    "receiver answered HTTP {status} with a body that is not a push response \
                     ({e}): {}",
                    snippet(body)
                ),
            },
        },
        409 => conflict(sent, body),
        401 | 403 => Decision::Stop(Stop {
            kind: ErrorKind::PermissionDenied,
            cause: StopCause::Unauthorized,
            message: format!(
                "the push receiver refused this client (HTTP {status}): {}",
                error_text(body)
            ),
        }),
        413 => match sent.len() {
            0 => Decision::Stop(Stop {
                kind: ErrorKind::Data,
                cause: StopCause::Refused,
                message: format!(
                    "the push receiver refused an empty request as too large (HTTP 413): {}",
                    error_text(body)
                ),
            }),
            1 => Decision::DeadLetter {
                seq: sent.batch.start,
                reason: format!(
                    "too large for the push receiver (HTTP 413): {}",
                    error_text(body)
                ),
            },
            n => Decision::Halve { max_entries: n / 2 },
        },
        408 | 425 | 429 | 500..=599 | 100..=199 | 300..=399 => Decision::Backoff {
            retry_after,
            reason: format!("push receiver answered HTTP {status}: {}", error_text(body)),
        },
        400..=499 => Decision::Stop(Stop {
            kind: ErrorKind::Data,
            cause: StopCause::Refused,
            message: format!(
                "the push receiver refused the batch (HTTP {status}): {}",
                error_text(body)
            ),
        }),
        _ => Decision::Backoff {
            retry_after,
            reason: format!("push receiver answered HTTP {status}: {}", snippet(body)),
        },
    }
}

fn ack(sent: &Sent, resp: PushResponse) -> Ack {
    let over_ack = (resp.last_seq > sent.highest_assigned).then_some(resp.last_seq);
    let last_seq = resp.last_seq.min(sent.highest_assigned).max(sent.watermark);
    let mut rejected: Vec<Rejected> = resp
        .rejected
        .into_iter()
        .filter(|r| r.seq > sent.watermark && r.seq <= last_seq)
        .collect();
    rejected.sort_by_key(|r| r.seq);
    rejected.dedup_by_key(|r| r.seq);
    Ack {
        last_seq,
        previous: sent.watermark,
        over_ack,
        rejected,
    }
}

fn conflict(sent: &Sent, body: &[u8]) -> Decision {
    let parsed = wire::parse_error_body(body);
    let Some(last_seq) = parsed.as_ref().ok().and_then(|b| b.last_seq) else {
        return Decision::Stop(Stop {
            kind: ErrorKind::Data,
            cause: StopCause::Refused,
            message: format!(
                "the push receiver answered HTTP 409 without its last_seq: {}",
                error_text(body)
            ),
        });
    };
    let starts_beyond = !sent.batch.is_empty() && sent.batch.start > last_seq.saturating_add(1);
    if !starts_beyond {
        // Not a gap: the receiver refuses the content (a sequence number
        // reused with different content, most likely a copied spool).
        return Decision::Stop(Stop {
            kind: ErrorKind::Data,
            cause: StopCause::ContentConflict,
            message: format!(
                "the push receiver refused the batch (HTTP 409): {}",
                error_text(body)
            ),
        });
    }
    if last_seq < sent.watermark {
        return Decision::Stop(Stop {
            kind: ErrorKind::Data,
            cause: StopCause::LostState,
            message: format!(
                "the push receiver has lost state: it has processed this client only up to \
                 sequence number {last_seq}, but had already acknowledged {} (restored from a \
                 backup?); nothing was resent or dropped",
                sent.watermark
            ),
        });
    }
    Decision::Resend { from: last_seq + 1 }
}

/// The `error` of a JSON error body, else a bounded one-line snippet.
fn error_text(body: &[u8]) -> String {
    match wire::parse_error_body(body) {
        Ok(b) => one_line(&b.error),
        Err(_) => snippet(body),
    }
}

fn snippet(body: &[u8]) -> String {
    if body.is_empty() {
        return "(empty body)".into();
    }
    one_line(&String::from_utf8_lossy(
        &body[..body.len().min(BODY_SNIPPET)],
    ))
}

fn one_line(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if out.len() > BODY_SNIPPET {
        let mut cut = BODY_SNIPPET;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push('…');
    }
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn outbox(n: u64) -> Outbox<char> {
        let mut o = Outbox::new();
        for i in 0..n {
            o.assign(char::from(b'a' + i as u8));
        }
        o
    }

    fn ok(body: &str) -> Reply<'_> {
        Reply::Http {
            status: 200,
            body: body.as_bytes(),
            retry_after: None,
        }
    }

    fn status(status: u16, body: &str) -> Reply<'_> {
        Reply::Http {
            status,
            body: body.as_bytes(),
            retry_after: None,
        }
    }

    fn sent(batch: Range<u64>, watermark: u64, highest_assigned: u64) -> Sent {
        Sent {
            batch,
            watermark,
            highest_assigned,
        }
    }

    fn stop(d: Decision) -> Stop {
        match d {
            Decision::Stop(s) => s,
            other => panic!("expected a stop, got {other:?}"),
        }
    }

    #[test]
    fn numbers_start_at_one_without_gaps() {
        let mut o = Outbox::new();
        assert_eq!(
            (o.next_seq(), o.highest_assigned(), o.watermark()),
            (1, 0, 0)
        );
        assert_eq!([o.assign('a'), o.assign('b'), o.assign('c')], [1, 2, 3]);
        let seqs: Vec<u64> = o.in_flight().map(|(s, _)| s).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(o.in_flight_from(2).count(), 2);
    }

    #[test]
    fn acks_are_cumulative_clamped_and_never_go_back() {
        let mut o = outbox(3);
        assert_eq!(o.ack(2), vec![(1, Slot::Item('a')), (2, Slot::Item('b'))]);
        assert_eq!(o.watermark(), 2);
        assert!(o.ack(1).is_empty(), "an old ack is a no-op");
        assert!(o.ack(2).is_empty());
        assert_eq!(o.watermark(), 2);
        // An ack for numbers never assigned settles only what exists.
        assert_eq!(o.ack(100), vec![(3, Slot::Item('c'))]);
        assert_eq!(o.watermark(), 3);
        assert_eq!(o.assign('d'), 4, "the clamp keeps the next number honest");
        assert_eq!(o.in_flight_len(), 1);
    }

    #[test]
    fn abandoned_numbers_stay_in_the_stream_as_skips() {
        let mut o = outbox(3);
        assert_eq!(o.abandon(2), Some('b'));
        assert_eq!(o.abandon(2), None);
        assert_eq!(o.abandon(9), None);
        let slots: Vec<_> = o.in_flight().map(|(s, x)| (s, x.clone())).collect();
        assert_eq!(
            slots,
            [(1, Slot::Item('a')), (2, Slot::Skip), (3, Slot::Item('c'))]
        );
    }

    #[test]
    fn restore_fills_holes_with_skips_and_refuses_contradictions() {
        let o = Outbox::restore(5, 1, [(2, 'b'), (4, 'd')]).unwrap();
        let slots: Vec<_> = o.in_flight().map(|(s, x)| (s, x.clone())).collect();
        assert_eq!(
            slots,
            [(2, Slot::Item('b')), (3, Slot::Skip), (4, Slot::Item('d'))]
        );
        assert_eq!((o.next_seq(), o.watermark()), (5, 1));
        assert!(
            Outbox::restore(5, 1, [(1, 'a')]).is_err(),
            "at the watermark"
        );
        assert!(
            Outbox::restore(5, 1, [(5, 'a')]).is_err(),
            "not yet assigned"
        );
        assert!(Outbox::restore(5, 1, [(2, 'a'), (2, 'b')]).is_err());
        assert!(Outbox::<char>::restore(3, 3, []).is_err());
        assert!(Outbox::<char>::restore(0, 0, []).is_err());
        assert_eq!(Outbox::<char>::restore(1, 0, []).unwrap(), Outbox::new());
    }

    #[test]
    fn a_200_acks_up_to_last_seq() {
        let o = outbox(5);
        let d = decide(
            &o.sent(1..4),
            ok(
                r#"{"last_seq":3,"rejected":[{"seq":2,"error":"too big"}],"applied":2,"duplicates":0}"#,
            ),
        );
        let Decision::Ack(ack) = d else {
            panic!("{d:?}")
        };
        assert_eq!((ack.previous, ack.last_seq, ack.over_ack), (0, 3, None));
        assert_eq!(ack.seqs(), 1..=3);
        assert_eq!(ack.reason(2), Some("too big"));
        assert_eq!(ack.reason(1), None);
        let mut o = o;
        let settled = o.settle(&ack);
        assert_eq!(
            settled,
            vec![
                Settled::Delivered { seq: 1, item: 'a' },
                Settled::Rejected {
                    seq: 2,
                    item: 'b',
                    reason: "too big".into()
                },
                Settled::Delivered { seq: 3, item: 'c' },
            ]
        );
        assert_eq!(o.watermark(), 3);
    }

    #[test]
    fn an_over_ack_is_clamped_and_flagged() {
        let d = decide(
            &sent(1..3, 0, 2),
            ok(r#"{"last_seq":9,"rejected":[{"seq":7,"error":"x"}]}"#),
        );
        let Decision::Ack(ack) = d else {
            panic!("{d:?}")
        };
        assert_eq!(ack.last_seq, 2);
        assert_eq!(ack.over_ack, Some(9));
        assert!(
            ack.rejected.is_empty(),
            "rejects beyond what was sent are ignored"
        );
        let d = decide(&sent(1..3, 0, 2), ok(r#"{"last_seq":2}"#));
        let Decision::Ack(ack) = d else {
            panic!("{d:?}")
        };
        assert_eq!(ack.over_ack, None);
    }

    #[test]
    fn an_ack_never_moves_the_watermark_back() {
        let d = decide(
            &sent(6..6, 5, 5),
            ok(r#"{"last_seq":3,"rejected":[{"seq":2,"error":"x"}]}"#),
        );
        let Decision::Ack(ack) = d else {
            panic!("{d:?}")
        };
        assert_eq!(ack.last_seq, 5);
        assert!(ack.seqs().is_empty());
        assert!(ack.rejected.is_empty());
    }

    #[test]
    fn rejects_count_only_inside_the_newly_acked_range() {
        let body = r#"{"last_seq":6,"rejected":[
            {"seq":5,"error":"old"},{"seq":8,"error":"later"},
            {"seq":7,"error":"dup-b"},{"seq":6,"error":"six"},{"seq":7,"error":"dup-c"}]}"#;
        let d = decide(&sent(6..9, 5, 8), ok(body));
        let Decision::Ack(ack) = d else {
            panic!("{d:?}")
        };
        assert_eq!(ack.last_seq, 6);
        assert_eq!(
            ack.rejected,
            vec![Rejected {
                seq: 6,
                error: "six".into()
            }]
        );
        let d = decide(
            &sent(6..9, 5, 8),
            ok(&body.replace("\"last_seq\":6", "\"last_seq\":8")),
        );
        let Decision::Ack(ack) = d else {
            panic!("{d:?}")
        };
        let seqs: Vec<u64> = ack.rejected.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [6, 7, 8], "sorted, one per number");
    }

    #[test]
    fn a_409_gap_resends_from_the_receivers_last_seq() {
        // A sender that started beyond the receiver, which is still at or
        // above the watermark.
        let d = decide(
            &sent(8..10, 5, 9),
            status(409, r#"{"error":"gap","last_seq":6}"#),
        );
        assert_eq!(d, Decision::Resend { from: 7 });
    }

    #[test]
    fn a_409_below_the_watermark_means_the_receiver_lost_state() {
        let s = stop(decide(
            &sent(11..13, 10, 12),
            status(409, r#"{"error":"batch starts at 11","last_seq":4}"#),
        ));
        assert_eq!(s.kind, ErrorKind::Data);
        assert_eq!(s.cause, StopCause::LostState);
        assert!(s.message.contains("lost state"), "{}", s.message);
        assert!(
            s.message.contains(" 4,") && s.message.contains("acknowledged 10"),
            "{}",
            s.message
        );
    }

    #[test]
    fn a_409_that_is_not_a_gap_is_a_content_conflict() {
        let error = "sequence 3 reused with different content: is this spool a copy of another?";
        let body = format!(r#"{{"error":"{error}","last_seq":4}}"#);
        let s = stop(decide(&sent(3..6, 2, 5), status(409, &body)));
        assert_eq!(s.kind, ErrorKind::Data);
        assert_eq!(s.cause, StopCause::ContentConflict);
        assert!(s.message.ends_with(error), "{}", s.message);
        // Starting exactly at last_seq + 1 is not a gap either.
        let s = stop(decide(&sent(5..6, 4, 5), status(409, &body)));
        assert!(s.message.ends_with(error));
        // No last_seq: cannot resynchronise.
        let s = stop(decide(
            &sent(5..6, 4, 5),
            status(409, r#"{"error":"nope"}"#),
        ));
        assert!(s.message.contains("without its last_seq"), "{}", s.message);
        assert_eq!(s.cause, StopCause::Refused);
    }

    #[test]
    fn auth_failures_stop_with_permission_denied() {
        for code in [401, 403] {
            let s = stop(decide(
                &sent(1..2, 0, 1),
                status(code, r#"{"error":"bad token"}"#),
            ));
            assert_eq!(s.kind, ErrorKind::PermissionDenied);
            assert_eq!(s.cause, StopCause::Unauthorized);
            assert!(s.message.contains("bad token"), "{}", s.message);
            assert!(s.message.contains(&code.to_string()));
        }
    }

    #[test]
    fn a_413_halves_the_batch_down_to_one_entry() {
        let body = r#"{"error":"body over 1 MiB"}"#;
        assert_eq!(
            decide(&sent(1..8, 0, 7), status(413, body)),
            Decision::Halve { max_entries: 3 }
        );
        assert_eq!(
            decide(&sent(1..3, 0, 7), status(413, body)),
            Decision::Halve { max_entries: 1 }
        );
        match decide(&sent(4..5, 3, 7), status(413, body)) {
            Decision::DeadLetter { seq, reason } => {
                assert_eq!(seq, 4);
                assert!(
                    reason.contains("413") && reason.contains("body over 1 MiB"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn temporary_failures_back_off_and_honour_retry_after() {
        let later = Some(RetryAfter::Delay(Duration::from_secs(7)));
        for code in [408, 425, 429, 500, 502, 503, 504, 599] {
            let d = decide(
                &sent(1..3, 0, 2),
                Reply::Http {
                    status: code,
                    body: br#"{"error":"the receiving spool is full; retry later"}"#,
                    retry_after: later,
                },
            );
            match d {
                Decision::Backoff {
                    retry_after,
                    reason,
                } => {
                    assert_eq!(retry_after, later);
                    assert!(reason.contains(&code.to_string()), "{reason}");
                }
                other => panic!("{code}: {other:?}"),
            }
        }
        let d = decide(
            &sent(1..3, 0, 2),
            Reply::Transport {
                error: "connection refused",
            },
        );
        assert!(
            matches!(d, Decision::Backoff { retry_after: None, ref reason } if reason.contains("connection refused"))
        );
        for code in [302, 101] {
            assert!(matches!(
                decide(&sent(1..3, 0, 2), status(code, "")),
                Decision::Backoff { .. }
            ));
        }
    }

    #[test]
    fn a_2xx_that_is_not_a_push_response_backs_off() {
        let d = decide(&sent(1..3, 0, 2), ok("<html>captive portal</html>"));
        match d {
            Decision::Backoff { reason, .. } => {
                assert!(reason.contains("captive portal"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_4xx_stop_with_the_bodys_error() {
        for code in [400, 404, 405, 410, 422] {
            let s = stop(decide(
                &sent(1..3, 0, 2),
                status(code, r#"{"error":"entries[0]: unknown field \"x\""}"#),
            ));
            assert_eq!(s.kind, ErrorKind::Data);
            assert!(
                s.message.ends_with(r#"entries[0]: unknown field "x""#),
                "{}",
                s.message
            );
        }
        // A body that is not JSON is quoted, on one bounded line.
        let long = format!("line one\nline two {}", "x".repeat(1000));
        let s = stop(decide(&sent(1..3, 0, 2), status(400, &long)));
        assert!(s.message.contains("line one line two"), "{}", s.message);
        assert!(!s.message.contains('\n'));
        assert!(s.message.len() < 400);
    }

    #[test]
    fn a_rebased_ack_settles_only_beyond_the_newer_watermark() {
        let body =
            r#"{"last_seq":6,"rejected":[{"seq":2,"error":"two"},{"seq":5,"error":"five"}]}"#;
        let Decision::Ack(ack) = decide(&sent(1..4, 0, 8), ok(body)) else {
            panic!()
        };
        let later = ack.clone().rebase(3);
        assert_eq!((later.previous, later.last_seq), (3, 6));
        assert_eq!(later.seqs(), 4..=6);
        assert_eq!(later.reason(2), None, "settled by the earlier answer");
        assert_eq!(later.reason(5), Some("five"));
        let moot = ack.clone().rebase(7);
        assert!(moot.seqs().is_empty(), "{moot:?}");
        assert!(moot.rejected.is_empty());
        assert_eq!(
            ack.clone().rebase(0),
            ack,
            "an older watermark changes nothing"
        );
    }

    #[test]
    fn settle_reports_skips_for_abandoned_numbers() {
        let mut o = outbox(2);
        o.abandon(1);
        let d = decide(
            &o.sent(1..3),
            ok(r#"{"last_seq":2,"rejected":[{"seq":1,"error":"x"}]}"#),
        );
        let Decision::Ack(ack) = d else { panic!() };
        assert_eq!(
            o.settle(&ack),
            vec![
                Settled::Skipped { seq: 1 },
                Settled::Delivered { seq: 2, item: 'b' }
            ]
        );
        assert_eq!(o.in_flight_len(), 0);
    }
}
