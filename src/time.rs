//! Time, injected.
//!
//! Everything in spool that reads the clock or waits goes through a
//! [`Clock`], so tests drive backoff, probes and deadlines with a
//! [`ManualClock`] and never sleep for real.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time: milliseconds since the Unix epoch, UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// From milliseconds since the Unix epoch.
    pub const fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// From whole seconds since the Unix epoch. Seconds past what
    /// milliseconds can hold saturate to the last whole second that fits,
    /// so that `from_secs(t.as_secs()) == t` for every `t` it gives (an
    /// NDJSON line's `enqueuedAt` is written in seconds and read back).
    pub const fn from_secs(s: i64) -> Timestamp {
        const MAX: i64 = i64::MAX / 1000;
        const MIN: i64 = i64::MIN / 1000;
        let s = if s > MAX {
            MAX
        } else if s < MIN {
            MIN
        } else {
            s
        };
        Timestamp(s * 1000)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// Whole seconds since the Unix epoch (rounded down).
    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// Convert from a [`SystemTime`].
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Timestamp(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }

    /// Convert to a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let t = if self.0 >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_millis(self.0 as u64))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_millis(self.0.unsigned_abs()))
        };
        t.unwrap_or(UNIX_EPOCH)
    }

    /// This time plus `d` (saturating).
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// The time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// RFC 3339 in UTC with millisecond precision, e.g.
    /// `2026-11-30T12:00:00.000Z`. Times before 1970 or past 9999 are
    /// clamped to the representable range.
    pub fn to_rfc3339(self) -> String {
        let clamped = self.0.clamp(0, 253_402_300_799_999);
        humantime::format_rfc3339_millis(Timestamp(clamped).to_system_time()).to_string()
    }

    /// Parse an RFC 3339 time as written by [`Timestamp::to_rfc3339`]
    /// (any precision, `Z` or no offset).
    pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
        humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
            .ok()
            .map(Timestamp::from_system_time)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// The source of time and the way to wait.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> Timestamp;
    /// Block the calling thread for `d` (a manual clock advances instead).
    fn sleep(&self, d: Duration);
    /// True for the real wall clock, which a backend with a clock of its
    /// own (a PostgreSQL server's) may use instead.
    fn is_system(&self) -> bool {
        false
    }
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d)
    }
    fn is_system(&self) -> bool {
        true
    }
}

/// A clock for tests: time moves only when told to, and `sleep` advances
/// it by the requested duration at once.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    slept: Arc<std::sync::Mutex<Vec<Duration>>>,
}

impl ManualClock {
    /// A clock that starts at `start`.
    pub fn new(start: Timestamp) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicI64::new(start.as_millis())),
            slept: Arc::default(),
        }
    }

    /// Move time forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.fetch_add(
            i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Set the time.
    pub fn set(&self, t: Timestamp) {
        self.now.store(t.as_millis(), Ordering::SeqCst);
    }

    /// Every duration passed to `sleep`, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.slept.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::SeqCst))
    }
    fn sleep(&self, d: Duration) {
        self.slept.lock().unwrap_or_else(|e| e.into_inner()).push(d);
        self.advance(d);
    }
}

/// The shared clock handle the library passes around.
pub type SharedClock = Arc<dyn Clock>;

/// The default clock handle.
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp::from_millis(1_764_504_000_123);
        let s = t.to_rfc3339();
        assert_eq!(s, "2025-11-30T12:00:00.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&s), Some(t));
    }

    #[test]
    fn manual_clock_sleep_advances() {
        let c = ManualClock::new(Timestamp::from_secs(10));
        c.sleep(Duration::from_millis(1500));
        assert_eq!(c.now(), Timestamp::from_millis(11_500));
        assert_eq!(c.sleeps(), vec![Duration::from_millis(1500)]);
    }

    #[test]
    fn negative_and_huge_times_do_not_panic() {
        assert_eq!(
            Timestamp::from_millis(-5).to_rfc3339(),
            "1970-01-01T00:00:00.000Z"
        );
        let _ = Timestamp::from_millis(i64::MAX).to_rfc3339();
        assert_eq!(Timestamp::from_millis(-1500).as_secs(), -2);
        let _ = Timestamp::from_millis(i64::MIN).to_system_time();
    }

    #[test]
    fn seconds_past_the_range_saturate_to_a_whole_second() {
        for s in [
            i64::MAX,
            i64::MAX / 1000 + 1,
            i64::MIN,
            i64::MIN / 1000 - 1,
            -1,
            0,
            7,
        ] {
            let t = Timestamp::from_secs(s);
            assert_eq!(Timestamp::from_secs(t.as_secs()), t, "{s}");
        }
        assert_eq!(
            Timestamp::from_secs(i64::MAX).as_millis(),
            i64::MAX / 1000 * 1000
        );
    }
}
