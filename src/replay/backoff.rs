//! Exponential backoff with a cap and jitter.

use std::time::Duration;

/// How long a failed item waits before its next attempt.
///
/// After the `n`-th failed attempt the nominal delay is
/// `base * 2^(n-1)`, capped at `max`; the actual delay is drawn uniformly
/// from the upper half of it, `[nominal / 2, nominal]` ("equal jitter"),
/// so that items that failed together do not all retry at the same
/// moment while the delay still grows with every failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Delay after the first failure (before jitter).
    pub base: Duration,
    /// Upper bound of the delay.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    /// The nominal (un-jittered) delay after `attempts` failures.
    pub fn nominal(&self, attempts: u32) -> Duration {
        let shift = attempts.saturating_sub(1).min(63);
        let factor = 1u64 << shift;
        let ms = u64::try_from(self.base.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_mul(factor);
        Duration::from_millis(ms).min(self.max)
    }

    /// The delay after `attempts` failures, with `unit` a uniform random
    /// number in `[0, 1)` choosing the jitter.
    pub fn delay(&self, attempts: u32, unit: f64) -> Duration {
        let nominal = self.nominal(attempts);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let half = nominal / 2;
        half + (nominal - half).mul_f64(unit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn schedule_doubles_and_caps() {
        let b = Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(5),
        };
        let got: Vec<u64> = (1..=6).map(|n| b.nominal(n).as_millis() as u64).collect();
        assert_eq!(got, vec![500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(b.nominal(0), Duration::from_millis(500));
        assert_eq!(b.nominal(u32::MAX), Duration::from_secs(5));
    }

    proptest! {
        #[test]
        fn jitter_stays_in_the_upper_half(n in 1u32..80, unit in 0.0f64..1.0,
                                          base in 1u64..10_000, max in 1u64..1_000_000) {
            let b = Backoff { base: Duration::from_millis(base), max: Duration::from_millis(max) };
            let d = b.delay(n, unit);
            let nominal = b.nominal(n);
            prop_assert!(d <= nominal);
            prop_assert!(d >= nominal / 2);
            prop_assert!(d <= Duration::from_millis(max));
        }
    }
}
