//! Crash points for tests, in debug builds only.
//!
//! A crash test needs a process to die at a chosen point of a real write
//! — in the middle of a batch, between a data write and the write that
//! follows it — the way `kill -9` or a power cut would, and not at the
//! mercy of timing. With `SPOOL_DEBUG_KILL_AT=<point>:<n>` in the
//! environment, the `n`-th time a debug build reaches `<point>` the
//! process sends itself `SIGKILL`. Release builds compile every check
//! away: [`crash_point`] is an empty function there.
//!
//! Points:
//!
//! | point | reached |
//! |---|---|
//! | `batch-item` | after each item a streamed batch enqueue has written |
//! | `index-update` | NDJSON: after a write to a spool file is synced, before the index takes it in |

/// Die here with `SIGKILL` when `SPOOL_DEBUG_KILL_AT` names `point` and
/// this is its `n`-th visit (debug builds only).
#[inline]
pub fn crash_point(point: &str) {
    #[cfg(debug_assertions)]
    imp::visit(point);
    #[cfg(not(debug_assertions))]
    let _ = point;
}

#[cfg(debug_assertions)]
mod imp {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static TARGET: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static VISITS: AtomicU64 = AtomicU64::new(0);

    pub fn visit(point: &str) {
        let target = TARGET.get_or_init(|| {
            let v = std::env::var("SPOOL_DEBUG_KILL_AT").ok()?;
            let (p, n) = v.rsplit_once(':')?;
            Some((p.to_string(), n.parse().ok()?))
        });
        let Some((p, n)) = target else { return };
        if p != point {
            return;
        }
        if VISITS.fetch_add(1, Ordering::SeqCst) + 1 == *n {
            // SAFETY: kill(2) with our own pid and a constant signal.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        }
    }
}
