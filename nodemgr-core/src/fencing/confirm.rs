//! Decides whether the controller may act on what it sees: its cached view must be fresh
//! ([`judge_cache`]), every heartbeat age is measured on the controller's own clock from when
//! it observed the heartbeat ([`HeartbeatObserver`]), and a deletion goes ahead only when a
//! direct read of the node from the API confirms the silence the cache suggested
//! ([`HeartbeatObserver::confirm`]).
//!
//! A controller whose list/watch requests fail while its writes still pass sees every
//! heartbeat stop at once: without these rules it would fence healthy nodes. With them it does
//! nothing while a watch is failing or the Lease watch has been quiet for
//! [`FencingConfig::max_cache_age`], and even with a fresh-looking cache it deletes only after
//! reading the node's Lease and Node straight from the API and finding the same heartbeat it
//! observed more than a deadline ago.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::plan::{FencedNode, FencingConfig};
use crate::model::Timestamp;

/// How current the controller's cached view of the API is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheHealth {
    /// How long ago the Lease watch (`kube-node-lease`) last delivered an event (a renewal of
    /// any node's Lease, a list); `None` = never.
    pub lease_event_age: Option<Duration>,
    /// The stores whose last list or watch attempt returned an error with nothing delivered
    /// since, and how long ago that error was. A watch that keeps failing errs again at each
    /// retry (kube-runtime backs off to at most 30 s); one that recovered on a quiet store
    /// delivers nothing, so its error only ages.
    pub failing: Vec<(String, Duration)>,
}

/// The verdict on the cached view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheVerdict {
    /// Fresh enough to plan from (deletions still need a direct confirmation).
    Fresh,
    /// These stores' watches are failing: do nothing.
    Failing(Vec<String>),
    /// The Lease watch delivered nothing for this long (`None`: ever): do nothing.
    Stale(Option<Duration>),
}

impl CacheVerdict {
    /// Whether the controller may plan fencing from its cache.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Self::Fresh)
    }
}

impl fmt::Display for CacheVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fresh => f.write_str("the cached view is fresh"),
            Self::Failing(stores) => write!(
                f,
                "fencing paused: the watches of {} are failing",
                stores.join(", ")
            ),
            Self::Stale(None) => f.write_str("fencing paused: no Lease event seen yet"),
            Self::Stale(Some(age)) => write!(
                f,
                "fencing paused: no Lease event for {}s (every kubelet renews every 10 s, so the Lease watch is stuck)",
                age.as_secs()
            ),
        }
    }
}

/// Judges the cached view: fresh iff no watch erred within `cfg.max_cache_age` without
/// delivering since, and the Lease watch delivered an event within `cfg.max_cache_age`. In a
/// cluster where no kubelet renews anything for that long every node is silent, which the
/// cluster storm guard would hold back anyway.
pub fn judge_cache(health: &CacheHealth, cfg: &FencingConfig) -> CacheVerdict {
    let failing: Vec<String> = health
        .failing
        .iter()
        .filter(|(_, age)| *age <= cfg.max_cache_age)
        .map(|(store, _)| store.clone())
        .collect();
    if !failing.is_empty() {
        return CacheVerdict::Failing(failing);
    }
    match health.lease_event_age {
        Some(age) if age <= cfg.max_cache_age => CacheVerdict::Fresh,
        age => CacheVerdict::Stale(age),
    }
}

/// What a direct read of a node (its Node and its Lease, not from a cache) returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectRead {
    /// Both reads answered.
    Node {
        /// [`super::heartbeat_token`] of the Node and Lease read.
        heartbeat: Option<Timestamp>,
        /// A maintenance annotation is set ([`super::is_maintenance`]).
        maintenance: bool,
        /// The `fencing-enabled` label is still set.
        fencing_enabled: bool,
    },
    /// The Node does not exist any more.
    NodeGone,
    /// A read failed (error text).
    Failed(String),
}

/// The outcome of [`HeartbeatObserver::confirm`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// The node is silent: go ahead.
    Confirmed,
    /// The direct read contradicts the cache: do not act (why).
    Refuted(String),
    /// The direct read failed: do not act now (why).
    Unconfirmed(String),
}

/// When the controller observed each node's current heartbeat, on its own clock.
///
/// A heartbeat is a token ([`super::heartbeat_token`]); a token different from the last one
/// seen (from the cache or a direct read) is a renewal observed *now*. A node seen for the
/// first time (also after a controller restart) is observed now. So a node's silence is
/// never longer than the real time since its kubelet's last renewal, whatever the clocks of
/// the node and the controller say.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatObserver {
    seen: BTreeMap<String, (Option<Timestamp>, Timestamp)>,
}

impl HeartbeatObserver {
    /// An observer that has seen nothing (a controller that just started).
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `node`'s heartbeat token as seen at `now` and returns when the controller
    /// observed it (`None` when the node has no heartbeat at all).
    pub fn observe(
        &mut self,
        node: &str,
        heartbeat: Option<Timestamp>,
        now: Timestamp,
    ) -> Option<Timestamp> {
        heartbeat?;
        let entry = self.seen.entry(node.to_owned()).or_insert((heartbeat, now));
        if entry.0 != heartbeat {
            *entry = (heartbeat, now);
        }
        Some(entry.1)
    }

    /// Forgets nodes for which `keep` is false (deleted nodes).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.seen.retain(|name, _| keep(name));
    }

    /// Confirms with a direct `read` that `node` (as planned from the cache) is still silent
    /// at `now`: the read must answer, show the node still fencing-enabled, not in
    /// maintenance, and with a heartbeat observed more than its deadline ago (a different
    /// heartbeat than the cache had is a renewal observed now).
    pub fn confirm(
        &mut self,
        node: &FencedNode,
        read: &DirectRead,
        cfg: &FencingConfig,
        now: Timestamp,
    ) -> Confirmation {
        match read {
            DirectRead::Failed(error) => {
                Confirmation::Unconfirmed(format!("direct read of {} failed: {error}", node.name))
            }
            DirectRead::NodeGone => {
                Confirmation::Refuted(format!("node {} no longer exists", node.name))
            }
            DirectRead::Node {
                heartbeat,
                maintenance,
                fencing_enabled,
            } => {
                if *maintenance {
                    return Confirmation::Refuted(format!("node {} is in maintenance", node.name));
                }
                if !*fencing_enabled {
                    return Confirmation::Refuted(format!(
                        "node {} is no longer fencing-enabled",
                        node.name
                    ));
                }
                let Some(observed) = self.observe(&node.name, *heartbeat, now) else {
                    return Confirmation::Refuted(format!("node {} has no heartbeat", node.name));
                };
                let silent = now.saturating_since(observed);
                if silent > node.deadline(cfg) {
                    Confirmation::Confirmed
                } else {
                    Confirmation::Refuted(format!(
                        "node {} renewed its heartbeat (observed {}s ago)",
                        node.name,
                        silent.as_secs()
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{FencingMode, NodeType};

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn node(observed: i64) -> FencedNode {
        FencedNode {
            name: "n".into(),
            zone: "z".into(),
            group: "g".into(),
            mode: FencingMode::Watchdog,
            node_type: NodeType::CloudEphemeral,
            last_heartbeat: Some(t(observed)),
            maintenance: false,
            timeout: None,
            has_pods: true,
        }
    }

    #[test]
    fn a_failing_or_quiet_cache_pauses_fencing() {
        let cfg = FencingConfig::default();
        let fresh = CacheHealth {
            lease_event_age: Some(Duration::from_secs(3)),
            failing: vec![],
        };
        assert!(judge_cache(&fresh, &cfg).is_fresh());
        let failing = CacheHealth {
            failing: vec![("Pod".into(), Duration::from_secs(1))],
            ..fresh.clone()
        };
        assert_eq!(
            judge_cache(&failing, &cfg),
            CacheVerdict::Failing(vec!["Pod".into()])
        );
        // A quiet store whose watch recovered: its last error ages out.
        let recovered = CacheHealth {
            failing: vec![("Pod".into(), Duration::from_secs(31))],
            ..fresh.clone()
        };
        assert!(judge_cache(&recovered, &cfg).is_fresh());
        let quiet = CacheHealth {
            lease_event_age: Some(Duration::from_secs(31)),
            failing: vec![],
        };
        assert!(!judge_cache(&quiet, &cfg).is_fresh());
        assert!(!judge_cache(&CacheHealth::default(), &cfg).is_fresh());
    }

    #[test]
    fn heartbeats_are_aged_from_their_observation_on_the_controllers_clock() {
        let mut seen = HeartbeatObserver::new();
        // A token far in the future or past of the controller's clock: only its change counts.
        assert_eq!(seen.observe("n", Some(t(10_000)), t(100)), Some(t(100)));
        assert_eq!(seen.observe("n", Some(t(10_000)), t(150)), Some(t(100)));
        assert_eq!(seen.observe("n", Some(t(-5)), t(160)), Some(t(160)));
        assert_eq!(seen.observe("n", None, t(170)), None);
        seen.retain(|_| false);
        assert_eq!(seen.observe("n", Some(t(-5)), t(200)), Some(t(200)));
    }

    #[test]
    fn the_direct_read_confirms_or_refutes_the_cache() {
        let cfg = FencingConfig::default();
        let deadline = cfg.deadline_for(None).as_secs() as i64;
        let read = |hb: i64| DirectRead::Node {
            heartbeat: Some(t(hb)),
            maintenance: false,
            fencing_enabled: true,
        };
        let mut seen = HeartbeatObserver::new();
        assert_eq!(seen.observe("n", Some(t(1)), t(0)), Some(t(0)));
        let now = t(deadline + 1);
        // The cache is stale: the API shows a newer renewal, observed now.
        assert!(matches!(
            seen.confirm(&node(0), &read(2), &cfg, now),
            Confirmation::Refuted(_)
        ));
        // Same heartbeat as observed a deadline ago: confirmed.
        let mut seen = HeartbeatObserver::new();
        let _ = seen.observe("n", Some(t(1)), t(0));
        assert_eq!(
            seen.confirm(&node(0), &read(1), &cfg, now),
            Confirmation::Confirmed
        );
        assert!(matches!(
            seen.confirm(&node(0), &DirectRead::Failed("503".into()), &cfg, now),
            Confirmation::Unconfirmed(_)
        ));
        assert!(matches!(
            seen.confirm(&node(0), &DirectRead::NodeGone, &cfg, now),
            Confirmation::Refuted(_)
        ));
        let maintenance = DirectRead::Node {
            heartbeat: Some(t(1)),
            maintenance: true,
            fencing_enabled: true,
        };
        assert!(matches!(
            seen.confirm(&node(0), &maintenance, &cfg, now),
            Confirmation::Refuted(_)
        ));
        let unlabelled = DirectRead::Node {
            heartbeat: Some(t(1)),
            maintenance: false,
            fencing_enabled: false,
        };
        assert!(matches!(
            seen.confirm(&node(0), &unlabelled, &cfg, now),
            Confirmation::Refuted(_)
        ));
    }
}
