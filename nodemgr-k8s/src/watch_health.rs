//! Tracks how current each reflector store is: when its watch last delivered something (a
//! list or an event) and whether its last list/watch attempt failed. The fencing controller
//! turns this into the core's [`nodemgr_core::fencing::CacheHealth`] and does nothing while a
//! watch is failing or the Lease watch is quiet (see `docs/fencing.md`).
//!
//! kube-runtime's watcher consumes bookmarks itself, so a quiet store and a stuck watch look
//! alike here; the Lease store is never quiet in a live cluster (every kubelet renews every
//! 10 s), which is why the fencing rule ages that store only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nodemgr_core::fencing::CacheHealth;

#[derive(Debug, Clone, Copy, Default)]
struct StoreState {
    last_event: Option<Instant>,
    /// The last error, when nothing was delivered since.
    failing_since_error: Option<Instant>,
}

/// The health of every store of a [`crate::cluster::KubeCluster`], by kind (`Lease`, `Pod`…).
#[derive(Debug, Clone, Default)]
pub struct WatchHealth {
    stores: Arc<Mutex<BTreeMap<String, StoreState>>>,
}

impl WatchHealth {
    /// A tracker with nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a store (a store that never answered counts as failing from now on).
    pub fn register(&self, kind: &str) {
        self.with(|s| {
            s.entry(kind.to_owned()).or_insert(StoreState {
                last_event: None,
                failing_since_error: Some(Instant::now()),
            });
        });
    }

    /// The store's watch delivered an event or a list.
    pub fn delivered(&self, kind: &str) {
        self.with(|s| {
            let e = s.entry(kind.to_owned()).or_default();
            e.last_event = Some(Instant::now());
            e.failing_since_error = None;
        });
    }

    /// The store's list or watch request failed.
    pub fn failed(&self, kind: &str) {
        self.with(|s| {
            s.entry(kind.to_owned()).or_default().failing_since_error = Some(Instant::now())
        });
    }

    /// How long ago the `kind` store last received something (`None`: never).
    pub fn age(&self, kind: &str) -> Option<Duration> {
        self.with(|s| s.get(kind).and_then(|e| e.last_event).map(|t| t.elapsed()))
    }

    /// The stores whose last attempt failed with nothing delivered since, with the age of
    /// that error.
    pub fn failing(&self) -> Vec<(String, Duration)> {
        self.with(|s| {
            s.iter()
                .filter_map(|(k, e)| Some((k.clone(), e.failing_since_error?.elapsed())))
                .collect()
        })
    }

    /// The core's view: the Lease store's age and the failing stores.
    pub fn cache_health(&self) -> CacheHealth {
        CacheHealth {
            lease_event_age: self.age("Lease"),
            failing: self.failing(),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, StoreState>) -> T) -> T {
        f(&mut self.stores.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_failing_from_its_first_error_until_it_delivers_again() {
        let health = WatchHealth::new();
        health.register("Lease");
        health.register("Pod");
        let names = |h: &WatchHealth| h.failing().into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(names(&health), vec!["Lease".to_owned(), "Pod".to_owned()]);
        assert_eq!(health.age("Lease"), None);
        health.delivered("Lease");
        health.delivered("Pod");
        assert!(health.failing().is_empty());
        assert!(
            health
                .age("Lease")
                .is_some_and(|a| a < Duration::from_secs(5))
        );
        health.failed("Pod");
        assert_eq!(names(&health), vec!["Pod".to_owned()]);
        health.delivered("Pod");
        assert!(health.cache_health().failing.is_empty());
    }
}
