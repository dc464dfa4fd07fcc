//! A run's report as the user sees it: its JSON, the hint after a
//! refused push, and the exit status it calls for.

use crate::exit::{self, CliError};
use spool::push::StopCause;
use spool::replay::push::{PushHalt, PushReport};
use spool::replay::{ReplayReport, StopReason};
use spool::ErrorKind;

/// The report as JSON.
pub fn report_json(r: &ReplayReport, target: &str) -> serde_json::Value {
    serde_json::json!({
        "target": target,
        "delivered": r.delivered,
        "failed": r.failed,
        "dead_lettered": r.dead_lettered,
        "rejected": r.rejected,
        "not_due": r.not_due,
        "group_waiting": r.group_waiting,
        "held": r.held,
        "would_attempt": r.would_attempt,
        "would_dead_letter": r.would_dead_letter,
        "stopped": r.stopped.map(|s| match s {
            StopReason::Stopped => "signal",
            StopReason::Limit => "limit",
            StopReason::Deadline => "deadline",
            StopReason::OrderedFailure => "ordered_failure",
        }),
        "left_due": r.left_due,
    })
}

/// The push report as JSON.
pub fn push_report_json(r: &PushReport, target: &str) -> serde_json::Value {
    serde_json::json!({
        "target": target,
        "requests": r.requests,
        "failed_requests": r.failed_requests,
        "acknowledged": r.acknowledged,
        "delivered": r.delivered,
        "rejected": r.rejected,
        "too_large": r.too_large,
        "unsendable": r.unsendable,
        "dead_lettered": r.dead_lettered(),
        "skipped": r.skipped,
        "duplicates": r.duplicates,
        "sent": r.sent,
        "in_flight": r.in_flight,
        "watermark": r.watermark,
        "not_due": r.not_due,
        "held": r.held,
        "would_resend": r.would_resend,
        "would_send": r.would_send,
        "stopped": r.halt.as_ref().map(|h| match h {
            PushHalt::Signal => "signal",
            PushHalt::Limit => "limit",
            PushHalt::Deadline => "deadline",
            PushHalt::Budget => "budget",
            PushHalt::RetryAfter(_) => "retry_after",
            PushHalt::NotBefore(_) => "not_before",
            PushHalt::Refused(_) => "refused",
        }),
        "left_due": r.left_due,
        "last_error": r.last_error,
        "not_before": r.not_before.map(|t| t.to_string()),
        "error": r.refusal().map(|s| s.message.clone()),
    })
}

/// The next step after the receiver stopped a push that left `in_flight`
/// sequence numbers unacknowledged. The items of the refused request were
/// numbered (committed before it was sent): they stay in flight, and the
/// next run resends them with the same numbers; `done --force` abandons
/// one. Only a stop with nothing in flight changed no item.
fn push_hint(cause: StopCause, in_flight: u64) -> String {
    let stays = match in_flight {
        0 => "no item was changed".to_string(),
        1 => "1 entry stays in flight with its sequence number, and the next run resends it \
              with the same number (`spool list` shows it; `spool done --force ID` abandons it)"
            .to_string(),
        n => format!(
            "{n} entries stay in flight with their sequence numbers, and the next run resends \
             them with the same numbers (`spool list` shows them; `spool done --force ID` \
             abandons one)"
        ),
    };
    match cause {
        StopCause::LostState => format!(
            "the receiver went back to an older state (a restored backup?); nothing was resent or \
             dropped: find out what it lost (GET /v1/clients/<spool uuid> on spool serve) before \
             pushing again; {stays}"
        ),
        StopCause::ContentConflict => "if this spool is a copy of another one (a cloned disk \
             or VM image, a restored backup), give it its own identity with `spool config uuid \
             --regenerate` (which renumbers what is in flight), then push again"
            .to_string(),
        StopCause::Unauthorized => format!(
            "check the credentials sent with -H (e.g. 'Authorization: Bearer …') against the \
             receiver's tokens; {stays}"
        ),
        StopCause::Refused => format!("the receiver's answer is quoted above; {stays}"),
    }
}

/// The error of a push the receiver refused (`kind`), naming `shown`
/// (the spool), with the next step as its hint.
pub fn push_refused(r: &PushReport, kind: ErrorKind, shown: &str) -> CliError {
    let (message, cause) = r
        .refusal()
        .map(|s| (s.message.clone(), s.cause))
        .unwrap_or_else(|| {
            (
                "the push receiver refused the run".into(),
                StopCause::Refused,
            )
        });
    CliError::new(exit::for_kind(kind), format!("push {shown}: {message}"))
        .hint(push_hint(cause, r.in_flight))
}
