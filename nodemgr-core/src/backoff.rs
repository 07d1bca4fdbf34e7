//! The one backoff policy of nodemgr: how long to wait before the next try of something that
//! keeps failing. The wait doubles from `base` with each failure and stops growing at `cap`;
//! callers that want jitter scale it by a random unit they draw themselves (this module reads
//! no clock and no random source, like the rest of the crate).
//!
//! The core's controllers (static nodes, machines) and every adapter (the reconcile retries
//! and watch restarts of `nodemgr-k8s`, the cloud calls of `nodemgr-cloud`) take their waits
//! from here; only the bookkeeping (which object failed how often, when it may run again)
//! stays with them. The async retry loops stay in the adapters: they sleep between calls and
//! decide which errors are worth another try, which is not a policy question.
//!
//! Why not `backon` (in the tree through kube-runtime): it is an async retry loop, while the
//! core needs the delay as a pure function of a failure count (the static node and machine
//! controllers store `not_before` times, the simulator replays them), and its jitter adds up to
//! a whole delay on top where the adapters keep theirs (full jitter for cloud calls, at most
//! 25 % for watches, none for reconciles). Our retry loops also wait on a stop signal beside
//! the sleep, which a `Retryable` future does not offer.

use std::time::Duration;

/// Exponential backoff bounds: the wait before retry `n` (0 = the first retry) is
/// `min(cap, base × 2^n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the first retry (and the ceiling of its jitter).
    pub base: Duration,
    /// The longest wait.
    pub cap: Duration,
}

impl Backoff {
    /// Bounds starting at `base`, never longer than `cap`.
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Self { base, cap }
    }

    /// The wait before retry number `retry` (0 for the first retry): `base` doubled `retry`
    /// times, capped at `cap`. Saturates instead of overflowing.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use nodemgr_core::backoff::Backoff;
    ///
    /// let b = Backoff::new(Duration::from_secs(10), Duration::from_secs(300));
    /// assert_eq!(b.delay(0), Duration::from_secs(10));
    /// assert_eq!(b.delay(3), Duration::from_secs(80));
    /// assert_eq!(b.delay(40), Duration::from_secs(300));
    /// ```
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = 1_u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait after `failures` failures in a row (1 = after the first failure, which waits
    /// `base`); zero failures wait `base` too.
    pub fn after_failures(&self, failures: u32) -> Duration {
        self.delay(failures.saturating_sub(1))
    }

    /// "Full jitter": [`Backoff::delay`] scaled by `unit`, a uniform random number in `[0, 1)`
    /// that the caller draws (clamped into `[0, 1]`).
    pub fn full_jitter(&self, retry: u32, unit: f64) -> Duration {
        self.delay(retry).mul_f64(unit.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn doubles_from_the_base_to_the_cap() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        assert_eq!(b.delay(0), Duration::from_millis(100));
        assert_eq!(b.delay(3), Duration::from_millis(800));
        assert_eq!(b.delay(6), Duration::from_secs(5));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
        assert_eq!(b.after_failures(0), Duration::from_millis(100));
        assert_eq!(b.after_failures(1), Duration::from_millis(100));
        assert_eq!(b.after_failures(2), Duration::from_millis(200));
        assert_eq!(b.full_jitter(2, 0.0), Duration::ZERO);
        assert_eq!(b.full_jitter(2, 0.5), Duration::from_millis(200));
        assert_eq!(b.full_jitter(2, 7.0), Duration::from_millis(400));
    }

    proptest! {
        /// Waits never pass the cap, never shrink as failures add up, and jitter stays
        /// under the wait it scales.
        #[test]
        fn waits_grow_monotonically_up_to_the_cap(
            base_ms in 0u64..100_000, cap_ms in 0u64..10_000_000, retry in 0u32..200,
            unit in 0.0f64..1.0,
        ) {
            let b = Backoff::new(Duration::from_millis(base_ms), Duration::from_millis(cap_ms));
            prop_assert!(b.delay(retry) <= b.cap);
            prop_assert!(b.delay(retry) <= b.delay(retry.saturating_add(1)));
            prop_assert!(b.full_jitter(retry, unit) <= b.delay(retry));
            prop_assert_eq!(b.delay(0), b.base.min(b.cap));
        }
    }
}
