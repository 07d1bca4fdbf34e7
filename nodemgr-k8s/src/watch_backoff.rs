//! The retry schedule of node-manager's watches after an error: exponential from 200 ms,
//! doubling, capped at 2 s, with up to 25 % jitter, reset by the first event that gets through.
//!
//! kube-runtime's default grows to 30 s (plus jitter) and resets only after 120 s without
//! errors. After an API outage of a dozen seconds, that left the caches blind for up to half a
//! minute after the API server was back, and the controllers acted on a frozen view meanwhile.
//! With a 2 s cap, a watch is back within about 2.5 s of the API server recovering. A
//! failing API server then gets one list or watch per resource every 2 s, a load it
//! carries easily.

use std::time::Duration;

use kube::runtime::utils::Backoff;

/// First wait after an error.
pub const FIRST_RETRY: Duration = Duration::from_millis(200);
/// Longest wait between tries.
pub const MAX_RETRY: Duration = Duration::from_secs(2);

/// The schedule (see the module docs). Never gives up.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    /// Errors since the last reset.
    retries: u32,
    draws: u64,
}

/// The doubling from [`FIRST_RETRY`] to [`MAX_RETRY`], before jitter.
const POLICY: nodemgr_core::backoff::Backoff =
    nodemgr_core::backoff::Backoff::new(FIRST_RETRY, MAX_RETRY);

impl Default for WatchBackoff {
    fn default() -> Self {
        Self::new()
    }
}

impl WatchBackoff {
    /// A fresh schedule starting at [`FIRST_RETRY`].
    pub fn new() -> Self {
        WatchBackoff {
            retries: 0,
            draws: 0,
        }
    }

    /// A fraction in `[0, 1)` for jitter, from std's randomly keyed hasher.
    fn jitter(&mut self) -> f64 {
        use std::hash::BuildHasher;
        self.draws = self.draws.wrapping_add(1);
        let bits = std::hash::RandomState::new().hash_one(self.draws);
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = POLICY.delay(self.retries);
        self.retries = self.retries.saturating_add(1);
        Some(base.mul_f64(1.0 + 0.25 * self.jitter()))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.retries = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_from_the_first_retry_to_the_cap_and_resets() {
        let mut backoff = WatchBackoff::new();
        let waits: Vec<Duration> = backoff.by_ref().take(20).collect();
        let bases = [200u64, 400, 800, 1600, 2000, 2000];
        for (wait, base) in waits.iter().zip(bases) {
            let base = Duration::from_millis(base);
            assert!(
                *wait >= base && *wait <= base.mul_f64(1.25),
                "{wait:?} vs {base:?}"
            );
        }
        assert!(waits.iter().all(|w| *w <= MAX_RETRY.mul_f64(1.25)));
        backoff.reset();
        assert!(
            backoff
                .next()
                .is_some_and(|w| w <= FIRST_RETRY.mul_f64(1.25))
        );
    }
}
