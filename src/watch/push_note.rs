//! [`PushNote`]: what a push round did besides settling items, owned
//! for the watch daemon's log, and the words each reads as.

use crate::replay::push::PushEvent;
use crate::units::format_duration;
use std::fmt;
use std::time::Duration;

/// A push round's events besides items, owned (see
/// [`PushEvent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PushNote {
    /// A request goes out.
    Sending {
        /// Its first sequence number.
        first: u64,
        /// Its last sequence number.
        last: u64,
        /// Item entries in it.
        items: usize,
        /// Skip entries in it.
        skips: usize,
        /// Body bytes (before compression).
        bytes: usize,
    },
    /// The receiver acknowledged up to `last_seq`.
    Acked {
        /// The new watermark.
        last_seq: u64,
        /// Entries applied now.
        applied: u64,
        /// Entries it had already.
        duplicates: u64,
    },
    /// The receiver claimed more than was ever sent (ignored).
    OverAck {
        /// The receiver's `last_seq`.
        claimed: u64,
        /// The highest number this spool assigned.
        highest: u64,
    },
    /// A request failed.
    RequestFailed {
        /// Why.
        reason: String,
        /// Consecutive failed requests so far.
        failures: u32,
        /// The bound on them.
        max: u32,
        /// The wait before the next try; `None` when the round gives up.
        retry_in: Option<Duration>,
    },
    /// The receiver refused a body as too large: smaller ones follow.
    Halved {
        /// Entries per request from now on.
        max_entries: usize,
        /// Body bytes per request from now on.
        max_bytes: u64,
    },
    /// The receiver asked to resend from `from`.
    Resend {
        /// The first number of the next request.
        from: u64,
    },
    /// Dry run: this entry would be sent.
    WouldSend {
        /// Its number.
        seq: u64,
        /// The item's id; `None` for a skip entry.
        item: Option<u64>,
        /// True for an entry already in flight.
        in_flight: bool,
    },
}

impl PushNote {
    /// The note for `e`.
    pub fn of(e: &PushEvent<'_>) -> PushNote {
        match e {
            PushEvent::Sending {
                first,
                last,
                items,
                skips,
                bytes,
            } => PushNote::Sending {
                first: *first,
                last: *last,
                items: *items,
                skips: *skips,
                bytes: *bytes,
            },
            PushEvent::Acked {
                last_seq,
                applied,
                duplicates,
            } => PushNote::Acked {
                last_seq: *last_seq,
                applied: *applied,
                duplicates: *duplicates,
            },
            PushEvent::OverAck { claimed, highest } => PushNote::OverAck {
                claimed: *claimed,
                highest: *highest,
            },
            PushEvent::RequestFailed {
                reason,
                failures,
                max,
                retry_in,
            } => PushNote::RequestFailed {
                reason: (*reason).to_string(),
                failures: *failures,
                max: *max,
                retry_in: *retry_in,
            },
            PushEvent::Halved {
                max_entries,
                max_bytes,
            } => PushNote::Halved {
                max_entries: *max_entries,
                max_bytes: *max_bytes,
            },
            PushEvent::Resend { from } => PushNote::Resend { from: *from },
            PushEvent::WouldSend {
                seq,
                item,
                in_flight,
            } => PushNote::WouldSend {
                seq: *seq,
                item: item.map(|i| i.id),
                in_flight: *in_flight,
            },
        }
    }
}

impl fmt::Display for PushNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushNote::Sending {
                first,
                last,
                items,
                skips,
                bytes,
            } => write!(
                f,
                "push: sending sequence {first}..{last} ({items} items, {skips} skips, {bytes} bytes)"
            ),
            PushNote::Acked {
                last_seq,
                applied,
                duplicates,
            } => write!(
                f,
                "push: acknowledged up to {last_seq} ({applied} applied, {duplicates} duplicates)"
            ),
            PushNote::OverAck { claimed, highest } => write!(
                f,
                "push: the receiver acknowledged up to sequence {claimed}, but this spool has \
                 assigned only up to {highest}; the excess is ignored (does the receiver hold \
                 another client's history under this spool's uuid?)"
            ),
            PushNote::RequestFailed {
                reason,
                failures,
                max,
                retry_in,
            } => match retry_in {
                Some(d) => write!(
                    f,
                    "{reason} (failed request {failures} of {max}); resending in {}",
                    format_duration(*d)
                ),
                None => write!(
                    f,
                    "{reason} (failed request {failures} of {max}); no more requests in this round"
                ),
            },
            PushNote::Halved {
                max_entries,
                max_bytes,
            } => write!(
                f,
                "push: the receiver refused a request as too large; at most {max_entries} \
                 entries and {max_bytes} bytes per request from now on"
            ),
            PushNote::Resend { from } => {
                write!(f, "push: the receiver asked to resend from sequence {from}")
            }
            PushNote::WouldSend {
                seq,
                item,
                in_flight,
            } => {
                let verb = if *in_flight { "resend" } else { "send" };
                match item {
                    Some(id) => write!(f, "push: would {verb} item {id} as sequence {seq}"),
                    None => write!(f, "push: would {verb} a skip entry as sequence {seq}"),
                }
            }
        }
    }
}
