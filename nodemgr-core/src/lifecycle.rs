//! Decides when the pods of an unhealthy node are evicted, as kube-controller-manager's node
//! lifecycle controller does (docs/peers.md §3): per-zone states
//! Normal / PartialDisruption / FullDisruption, a rate-limited eviction queue per zone, and the
//! eviction timeout after a node became unhealthy.
//!
//! # Rules
//!
//! * A node is **unhealthy** when it reports `Ready=false`, or when its last heartbeat is older
//!   than [`LifecycleConfig::node_monitor_grace_period`] (the controller would mark it `Unknown`).
//!   A node that never sent a heartbeat is judged by its `ready` flag alone.
//! * [`zone_state`] (upstream `ComputeZoneState`): FullDisruption = no Ready node and at least one
//!   NotReady; PartialDisruption = more than 2 NotReady and NotReady/(Ready+NotReady) at least
//!   [`LifecycleConfig::unhealthy_zone_threshold`]; otherwise Normal.
//! * Eviction rate of a zone: Normal and FullDisruption use [`LifecycleConfig::node_eviction_rate`]
//!   (a single fully disrupted zone keeps the normal rate in it); PartialDisruption uses
//!   [`LifecycleConfig::secondary_node_eviction_rate`] when the cluster has more than
//!   [`LifecycleConfig::large_cluster_size_threshold`] nodes and 0 (evictions stop) otherwise.
//!   docs/peers.md §3 speaks of the *cluster* size; upstream code passes the *zone* size to
//!   `ReducedQPSFunc`. [`LifecycleConfig::size_by_zone`] picks the upstream code's reading.
//! * When every zone is in FullDisruption, evictions stop everywhere (the controller is most
//!   likely the one cut off). When that ends, the eviction timeout of every unhealthy node
//!   restarts (upstream resets its probe timestamps the same way).
//! * A node's pods are evicted no earlier than [`LifecycleConfig::pod_eviction_timeout`] after it
//!   became unhealthy, once per unhealthy episode, and at most one node per token of its zone's
//!   token bucket (burst 1), like upstream's `RateLimitedTimedQueue`.
//!
//! NoExecute taints (`node.kubernetes.io/unreachable`, taint-based eviction) are not modelled:
//! the action is the eviction itself, as docs/peers.md §3 describes it.
//!
//! # Use
//!
//! Feed every node observation with [`NodeLifecycle::handle_node`] (and removals with
//! [`NodeLifecycle::handle_node_removed`]), then drain [`NodeLifecycle::poll_action`] until it
//! returns `None`, and call `poll_action` again at [`NodeLifecycle::next_deadline`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use crate::model::Timestamp;

/// Tokens are counted in nano-tokens so that the bucket is exact integer arithmetic.
const NANO: u64 = 1_000_000_000;

/// The node lifecycle controller's flags; `Default` gives the upstream defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct LifecycleConfig {
    /// `--node-eviction-rate`: nodes per second whose pods are evicted in a healthy zone (0.1).
    pub node_eviction_rate: f64,
    /// `--secondary-node-eviction-rate`: nodes per second in a partially disrupted zone of a
    /// large cluster (0.01).
    pub secondary_node_eviction_rate: f64,
    /// `--large-cluster-size-threshold`: a cluster with at most this many nodes stops evicting in
    /// partially disrupted zones (50).
    pub large_cluster_size_threshold: usize,
    /// `--unhealthy-zone-threshold`: share of NotReady nodes that makes a zone partially
    /// disrupted (0.55).
    pub unhealthy_zone_threshold: f64,
    /// `--node-monitor-grace-period`: heartbeat age after which a node counts as unhealthy
    /// (50 s since Kubernetes 1.32).
    pub node_monitor_grace_period: Duration,
    /// `--pod-eviction-timeout`: time between a node becoming unhealthy and the eviction of its
    /// pods (5 min).
    pub pod_eviction_timeout: Duration,
    /// Compare the zone's size, not the cluster's, with `large_cluster_size_threshold` (what
    /// upstream code does; docs/peers.md §3 says cluster). Default `false`.
    pub size_by_zone: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            node_eviction_rate: 0.1,
            secondary_node_eviction_rate: 0.01,
            large_cluster_size_threshold: 50,
            unhealthy_zone_threshold: 0.55,
            node_monitor_grace_period: Duration::from_secs(50),
            pod_eviction_timeout: Duration::from_secs(300),
            size_by_zone: false,
        }
    }
}

/// The health of a zone as the node lifecycle controller classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ZoneState {
    /// Few or no unhealthy nodes: the normal eviction rate.
    Normal,
    /// More than 2 and at least the threshold share of nodes unhealthy: reduced or no evictions.
    PartialDisruption,
    /// No Ready node and at least one NotReady node.
    FullDisruption,
}

impl fmt::Display for ZoneState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Normal => "Normal",
            Self::PartialDisruption => "PartialDisruption",
            Self::FullDisruption => "FullDisruption",
        })
    }
}

/// Classifies a zone with `ready` healthy and `not_ready` unhealthy nodes (upstream
/// `ComputeZoneState`).
pub fn zone_state(ready: usize, not_ready: usize, unhealthy_zone_threshold: f64) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        return ZoneState::FullDisruption;
    }
    let total = ready + not_ready;
    if not_ready > 2 && total > 0 && not_ready as f64 / total as f64 >= unhealthy_zone_threshold {
        return ZoneState::PartialDisruption;
    }
    ZoneState::Normal
}

/// What a node last reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeHealth {
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Last heartbeat (Lease renew time or Ready heartbeat, whichever is newer).
    pub last_heartbeat: Option<Timestamp>,
}

/// A decision of the node lifecycle policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleAction {
    /// Evict every pod of `node` (API-initiated eviction).
    EvictPods {
        /// The unhealthy node.
        node: String,
        /// Its zone.
        zone: String,
    },
    /// A zone changed state; `from` is `None` the first time the zone is seen.
    ZoneStateChanged {
        /// The zone.
        zone: String,
        /// Previous state.
        from: Option<ZoneState>,
        /// New state.
        to: ZoneState,
    },
}

impl fmt::Display for LifecycleAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EvictPods { node, zone } => {
                write!(f, "evict pods of node {node} (zone {zone:?})")
            }
            Self::ZoneStateChanged { zone, from, to } => match from {
                Some(from) => write!(f, "zone {zone:?}: {from} -> {to}"),
                None => write!(f, "zone {zone:?}: {to}"),
            },
        }
    }
}

/// A token bucket with burst 1, in nano-tokens per millisecond.
#[derive(Debug, Clone)]
struct Bucket {
    tokens: u64,
    per_ms: u64,
    updated: Timestamp,
}

impl Bucket {
    fn new(now: Timestamp) -> Self {
        Self {
            tokens: 0,
            per_ms: 0,
            updated: now,
        }
    }

    fn advance(&mut self, now: Timestamp) {
        if now <= self.updated {
            return;
        }
        let elapsed = u64::try_from(now.as_millis() - self.updated.as_millis()).unwrap_or(0);
        self.tokens = self
            .tokens
            .saturating_add(elapsed.saturating_mul(self.per_ms))
            .min(NANO);
        self.updated = now;
    }

    /// Changes the rate from `now` on, keeping the tokens gathered so far (a stopped bucket
    /// loses them).
    fn set_rate(&mut self, rate_per_sec: f64, now: Timestamp) {
        self.advance(now);
        let per_ms = if rate_per_sec.is_finite() && rate_per_sec > 0.0 {
            ((rate_per_sec * 1_000_000.0).round() as u64).max(1)
        } else {
            0
        };
        if per_ms == 0 {
            self.tokens = 0;
        }
        self.per_ms = per_ms;
    }

    fn try_take(&mut self, now: Timestamp) -> bool {
        self.advance(now);
        if self.per_ms > 0 && self.tokens >= NANO {
            self.tokens -= NANO;
            true
        } else {
            false
        }
    }

    /// When the next token is there; `None` for a stopped bucket.
    fn ready_at(&self) -> Option<Timestamp> {
        if self.per_ms == 0 {
            return None;
        }
        let missing = NANO.saturating_sub(self.tokens);
        let ms = missing.div_ceil(self.per_ms);
        Some(Timestamp::from_millis(
            self.updated
                .as_millis()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
        ))
    }
}

#[derive(Debug, Clone)]
struct Tracked {
    zone: String,
    health: NodeHealth,
    /// When the node was first reported not ready (in the current run of such reports).
    not_ready_since: Option<Timestamp>,
    unhealthy_since: Option<Timestamp>,
    evicted: bool,
}

/// The node lifecycle eviction policy: zone states, per-zone rate-limited eviction queues.
#[derive(Debug, Clone)]
pub struct NodeLifecycle {
    cfg: LifecycleConfig,
    nodes: BTreeMap<String, Tracked>,
    zones: BTreeMap<String, ZoneState>,
    buckets: BTreeMap<String, Bucket>,
    all_disrupted: bool,
    pending: VecDeque<LifecycleAction>,
    last_now: Timestamp,
}

impl NodeLifecycle {
    /// A policy with no nodes yet.
    pub fn new(cfg: LifecycleConfig) -> Self {
        Self {
            cfg,
            nodes: BTreeMap::new(),
            zones: BTreeMap::new(),
            buckets: BTreeMap::new(),
            all_disrupted: false,
            pending: VecDeque::new(),
            last_now: Timestamp::EPOCH,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &LifecycleConfig {
        &self.cfg
    }

    /// Records what `name` (in `zone`, `""` when it has none) reports at `now`. Call
    /// [`Self::poll_action`] afterwards.
    pub fn handle_node(&mut self, name: &str, zone: &str, health: NodeHealth, now: Timestamp) {
        self.last_now = self.last_now.max(now);
        let entry = self
            .nodes
            .entry(name.to_owned())
            .or_insert_with(|| Tracked {
                zone: zone.to_owned(),
                health,
                not_ready_since: None,
                unhealthy_since: None,
                evicted: false,
            });
        entry.zone = zone.to_owned();
        entry.health = health;
        if health.ready {
            entry.not_ready_since = None;
        } else if entry.not_ready_since.is_none() {
            entry.not_ready_since = Some(now);
        }
    }

    /// Forgets a deleted node. Call [`Self::poll_action`] afterwards.
    pub fn handle_node_removed(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// The current state of every zone that has nodes.
    pub fn zone_states(&self) -> &BTreeMap<String, ZoneState> {
        &self.zones
    }

    /// When `name` became unhealthy, as far as the policy knows (`None` when healthy or unknown).
    pub fn unhealthy_since(&self, name: &str) -> Option<Timestamp> {
        self.nodes.get(name).and_then(|n| n.unhealthy_since)
    }

    /// The next decision at `now`: zone state changes first, then at most one eviction per
    /// available token. Call after every `handle_*` and at [`Self::next_deadline`], until `None`.
    #[must_use]
    pub fn poll_action(&mut self, now: Timestamp) -> Option<LifecycleAction> {
        let now = now.max(self.last_now);
        self.last_now = now;
        self.refresh(now);
        if let Some(action) = self.pending.pop_front() {
            return Some(action);
        }
        let timeout = self.cfg.pod_eviction_timeout;
        // Per zone, the eligible node that has waited longest (ties by name).
        let mut best: BTreeMap<&str, (Timestamp, &str)> = BTreeMap::new();
        for (name, node) in &self.nodes {
            let Some(since) = node.unhealthy_since else {
                continue;
            };
            if node.evicted || since + timeout > now {
                continue;
            }
            let slot = best.entry(node.zone.as_str()).or_insert((since, name));
            if since < slot.0 {
                *slot = (since, name);
            }
        }
        let mut chosen = None;
        for (zone, (_, name)) in best {
            if let Some(bucket) = self.buckets.get_mut(zone)
                && bucket.try_take(now)
            {
                chosen = Some((zone.to_owned(), name.to_owned()));
                break;
            }
        }
        let (zone, name) = chosen?;
        if let Some(node) = self.nodes.get_mut(&name) {
            node.evicted = true;
        }
        tracing::debug!(node = %name, zone = %zone, "evicting pods of unhealthy node");
        Some(LifecycleAction::EvictPods { node: name, zone })
    }

    /// The earliest time at which [`Self::poll_action`] may have something new to say: a
    /// heartbeat going stale, an eviction timeout expiring, a token arriving. `None` when only a
    /// new input can change anything.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if !self.pending.is_empty() {
            return Some(self.last_now);
        }
        let grace = self.cfg.node_monitor_grace_period;
        let timeout = self.cfg.pod_eviction_timeout;
        let mut earliest: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| {
            earliest = Some(earliest.map_or(t, |e: Timestamp| e.min(t)));
        };
        for node in self.nodes.values() {
            match node.unhealthy_since {
                None => {
                    if node.health.ready
                        && let Some(hb) = node.health.last_heartbeat
                    {
                        // Stale once strictly older than the grace period.
                        consider(hb + grace + Duration::from_millis(1));
                    }
                }
                Some(since) if !node.evicted => {
                    let Some(bucket) = self.buckets.get(&node.zone) else {
                        continue;
                    };
                    if let Some(token) = bucket.ready_at() {
                        consider((since + timeout).max(token));
                    }
                }
                Some(_) => {}
            }
        }
        earliest
    }

    /// Since when `node` is unhealthy at `now`: the earlier of the moment its heartbeat went
    /// stale and the first report of not ready; `None` when healthy.
    fn is_unhealthy(&self, node: &Tracked, now: Timestamp) -> Option<Timestamp> {
        let grace = self.cfg.node_monitor_grace_period;
        let stale_at = node
            .health
            .last_heartbeat
            .filter(|hb| now.saturating_since(*hb) > grace)
            .map(|hb| hb + grace + Duration::from_millis(1));
        let not_ready_at = if node.health.ready {
            None
        } else {
            Some(node.not_ready_since.unwrap_or(now))
        };
        match (stale_at, not_ready_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn refresh(&mut self, now: Timestamp) {
        // 1. Node health.
        let verdicts: Vec<(String, Option<Timestamp>)> = self
            .nodes
            .iter()
            .map(|(name, node)| (name.clone(), self.is_unhealthy(node, now)))
            .collect();
        for (name, verdict) in verdicts {
            let Some(node) = self.nodes.get_mut(&name) else {
                continue;
            };
            match verdict {
                None => {
                    node.unhealthy_since = None;
                    node.evicted = false;
                }
                Some(since) => {
                    if node.unhealthy_since.is_none() {
                        node.unhealthy_since = Some(since);
                    }
                }
            }
        }
        // 2. Zone states.
        let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for node in self.nodes.values() {
            let slot = counts.entry(node.zone.as_str()).or_insert((0, 0));
            if node.unhealthy_since.is_some() {
                slot.1 += 1;
            } else {
                slot.0 += 1;
            }
        }
        let cluster_size = self.nodes.len();
        let mut new_states = BTreeMap::new();
        let mut sizes = BTreeMap::new();
        for (zone, (ready, not_ready)) in counts {
            let state = zone_state(ready, not_ready, self.cfg.unhealthy_zone_threshold);
            new_states.insert(zone.to_owned(), state);
            sizes.insert(zone.to_owned(), ready + not_ready);
        }
        for (zone, state) in &new_states {
            let old = self.zones.get(zone).copied();
            if old != Some(*state) {
                tracing::info!(zone = %zone, to = %state, "zone state changed");
                self.pending.push_back(LifecycleAction::ZoneStateChanged {
                    zone: zone.clone(),
                    from: old,
                    to: *state,
                });
            }
        }
        self.zones = new_states;
        // 3. Rates.
        let all_disrupted =
            !self.zones.is_empty() && self.zones.values().all(|s| *s == ZoneState::FullDisruption);
        if self.all_disrupted && !all_disrupted {
            // Leaving "everything is down": restart every eviction timeout.
            for node in self.nodes.values_mut() {
                if node.unhealthy_since.is_some() {
                    node.unhealthy_since = Some(now);
                }
            }
        }
        self.all_disrupted = all_disrupted;
        self.buckets.retain(|zone, _| self.zones.contains_key(zone));
        for (zone, state) in &self.zones {
            let size = if self.cfg.size_by_zone {
                sizes.get(zone).copied().unwrap_or(0)
            } else {
                cluster_size
            };
            let rate = if all_disrupted {
                0.0
            } else {
                match state {
                    ZoneState::Normal | ZoneState::FullDisruption => self.cfg.node_eviction_rate,
                    ZoneState::PartialDisruption => {
                        if size > self.cfg.large_cluster_size_threshold {
                            self.cfg.secondary_node_eviction_rate
                        } else {
                            0.0
                        }
                    }
                }
            };
            self.buckets
                .entry(zone.clone())
                .or_insert_with(|| Bucket::new(now))
                .set_rate(rate, now);
        }
    }

    /// The eviction rate (nodes per second) a zone currently has; 0 when evictions are stopped.
    pub fn zone_rate(&self, zone: &str) -> f64 {
        self.buckets
            .get(zone)
            .map_or(0.0, |b| b.per_ms as f64 / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    fn healthy(at: Timestamp) -> NodeHealth {
        NodeHealth {
            ready: true,
            last_heartbeat: Some(at),
        }
    }

    fn drain(lc: &mut NodeLifecycle, now: Timestamp) -> Vec<LifecycleAction> {
        let mut out = Vec::new();
        while let Some(a) = lc.poll_action(now) {
            out.push(a);
        }
        out
    }

    fn evictions(actions: &[LifecycleAction]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                LifecycleAction::EvictPods { node, .. } => Some(node.clone()),
                LifecycleAction::ZoneStateChanged { .. } => None,
            })
            .collect()
    }

    #[test]
    fn zone_state_follows_compute_zone_state() {
        let th = 0.55;
        assert_eq!(zone_state(0, 0, th), ZoneState::Normal);
        assert_eq!(zone_state(0, 1, th), ZoneState::FullDisruption);
        assert_eq!(zone_state(1, 2, th), ZoneState::Normal, "needs more than 2");
        assert_eq!(zone_state(2, 3, th), ZoneState::PartialDisruption);
        assert_eq!(zone_state(3, 3, th), ZoneState::Normal, "0.5 < 0.55");
        assert_eq!(zone_state(9, 11, th), ZoneState::PartialDisruption);
        assert_eq!(zone_state(10, 0, th), ZoneState::Normal);
    }

    #[test]
    fn evicts_only_after_the_timeout_from_going_stale() {
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        for i in 0..10 {
            lc.handle_node(&format!("n{i}"), "a", healthy(t(0)), t(0));
        }
        let first = drain(&mut lc, t(0));
        assert_eq!(
            first,
            vec![LifecycleAction::ZoneStateChanged {
                zone: "a".into(),
                from: None,
                to: ZoneState::Normal
            }]
        );
        // Everyone but n0 keeps heartbeating.
        for s in (10..=400).step_by(10) {
            for i in 1..10 {
                lc.handle_node(&format!("n{i}"), "a", healthy(t(s)), t(s));
            }
            let acts = drain(&mut lc, t(s));
            let ev = evictions(&acts);
            // n0 stale at 50.001 s; evicted from 350.001 s on.
            if s <= 350 {
                assert!(ev.is_empty(), "evicted at {s}: {ev:?}");
            } else if s == 360 {
                assert_eq!(ev, vec!["n0".to_owned()]);
            } else {
                assert!(ev.is_empty(), "evicted twice at {s}");
            }
        }
        assert_eq!(
            lc.unhealthy_since("n0"),
            Some(Timestamp::from_millis(50_001))
        );
    }

    #[test]
    fn next_deadline_points_at_the_eviction() {
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        lc.handle_node("n0", "a", healthy(t(0)), t(0));
        lc.handle_node(
            "n1",
            "a",
            NodeHealth {
                ready: true,
                last_heartbeat: Some(t(1000)),
            },
            t(0),
        );
        let _ = drain(&mut lc, t(0));
        assert_eq!(lc.next_deadline(), Some(Timestamp::from_millis(50_001)));
        let _ = drain(&mut lc, Timestamp::from_millis(50_001));
        let deadline = lc.next_deadline();
        assert_eq!(deadline, Some(Timestamp::from_millis(350_001)));
        let acts = drain(&mut lc, Timestamp::from_millis(350_001));
        assert_eq!(evictions(&acts), vec!["n0".to_owned()]);
    }

    #[test]
    fn partial_disruption_in_small_cluster_stops_evictions() {
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        for i in 0..5 {
            let ready = i >= 3; // 3 of 5 NotReady: 0.6 >= 0.55
            lc.handle_node(
                &format!("n{i}"),
                "a",
                NodeHealth {
                    ready,
                    last_heartbeat: None,
                },
                t(0),
            );
        }
        let acts = drain(&mut lc, t(0));
        assert!(acts.contains(&LifecycleAction::ZoneStateChanged {
            zone: "a".into(),
            from: None,
            to: ZoneState::PartialDisruption
        }));
        assert_eq!(lc.zone_rate("a"), 0.0);
        assert!(evictions(&drain(&mut lc, t(10_000))).is_empty());
    }

    #[test]
    fn partial_disruption_in_large_cluster_uses_secondary_rate() {
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        // Zone a: 4 of 6 NotReady; zone b: 60 healthy. Cluster of 66 > 50.
        for i in 0..6 {
            lc.handle_node(
                &format!("a{i}"),
                "a",
                NodeHealth {
                    ready: i >= 4,
                    last_heartbeat: None,
                },
                t(0),
            );
        }
        for i in 0..60 {
            lc.handle_node(
                &format!("b{i}"),
                "b",
                NodeHealth {
                    ready: true,
                    last_heartbeat: None,
                },
                t(0),
            );
        }
        let _ = drain(&mut lc, t(0));
        assert_eq!(lc.zone_states()["a"], ZoneState::PartialDisruption);
        assert!((lc.zone_rate("a") - 0.01).abs() < 1e-9);
        assert!((lc.zone_rate("b") - 0.1).abs() < 1e-9);
        // Timeout at 300 s; one token per 100 s: evictions at 300, 400, 500, 600.
        let mut times = Vec::new();
        while let Some(now) = lc.next_deadline() {
            for node in evictions(&drain(&mut lc, now)) {
                times.push((now.as_millis() / 1000, node));
            }
            if now > t(2000) {
                break;
            }
        }
        let secs: Vec<i64> = times.iter().map(|(s, _)| *s).collect();
        assert_eq!(secs, vec![300, 400, 500, 600]);
        // With size_by_zone the zone (6 nodes) is small: evictions stop.
        let mut lc2 = NodeLifecycle::new(LifecycleConfig {
            size_by_zone: true,
            ..LifecycleConfig::default()
        });
        for i in 0..6 {
            lc2.handle_node(
                &format!("a{i}"),
                "a",
                NodeHealth {
                    ready: i >= 4,
                    last_heartbeat: None,
                },
                t(0),
            );
        }
        for i in 0..60 {
            lc2.handle_node(&format!("b{i}"), "b", healthy(t(0)), t(0));
        }
        let _ = drain(&mut lc2, t(0));
        assert_eq!(lc2.zone_rate("a"), 0.0);
    }

    #[test]
    fn one_fully_disrupted_zone_keeps_normal_rate_all_disrupted_stops() {
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        let down = NodeHealth {
            ready: false,
            last_heartbeat: None,
        };
        let up = NodeHealth {
            ready: true,
            last_heartbeat: None,
        };
        lc.handle_node("a0", "a", down, t(0));
        lc.handle_node("a1", "a", down, t(0));
        lc.handle_node("b0", "b", up, t(0));
        let _ = drain(&mut lc, t(0));
        assert_eq!(lc.zone_states()["a"], ZoneState::FullDisruption);
        assert!((lc.zone_rate("a") - 0.1).abs() < 1e-9);
        let ev = evictions(&drain(&mut lc, t(300)));
        assert_eq!(ev, vec!["a0".to_owned()]);
        let ev = evictions(&drain(&mut lc, t(310)));
        assert_eq!(ev, vec!["a1".to_owned()]);

        // Everything down: nothing is evicted, however long we wait.
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        lc.handle_node("a0", "a", down, t(0));
        lc.handle_node("b0", "b", down, t(0));
        let _ = drain(&mut lc, t(0));
        assert!(evictions(&drain(&mut lc, t(5000))).is_empty());
        assert_eq!(lc.next_deadline(), None);
        // b0 comes back: a0's timeout restarts.
        lc.handle_node("b0", "b", up, t(5000));
        assert!(evictions(&drain(&mut lc, t(5000))).is_empty());
        assert!(evictions(&drain(&mut lc, t(5299))).is_empty());
        assert_eq!(evictions(&drain(&mut lc, t(5300))), vec!["a0".to_owned()]);
    }

    #[test]
    fn recovered_node_is_not_evicted_and_can_be_again_later() {
        let mut lc = NodeLifecycle::new(LifecycleConfig::default());
        let down = NodeHealth {
            ready: false,
            last_heartbeat: None,
        };
        let up = NodeHealth {
            ready: true,
            last_heartbeat: None,
        };
        lc.handle_node("a0", "a", down, t(0));
        lc.handle_node("a1", "a", up, t(0));
        let _ = drain(&mut lc, t(0));
        lc.handle_node("a0", "a", up, t(200));
        assert!(evictions(&drain(&mut lc, t(400))).is_empty());
        lc.handle_node("a0", "a", down, t(400));
        assert!(evictions(&drain(&mut lc, t(699))).is_empty());
        assert_eq!(evictions(&drain(&mut lc, t(700))), vec!["a0".to_owned()]);
        lc.handle_node_removed("a0");
        assert!(evictions(&drain(&mut lc, t(2000))).is_empty());
    }

    /// One step of a random scenario: at `dt` seconds after the previous step, node `node`
    /// (of 12, in zone `node % zones`) reports `ready`, and heartbeats if `beat`.
    fn scenario() -> impl Strategy<Value = (usize, Vec<(u16, usize, bool, bool)>)> {
        (
            1usize..4,
            prop::collection::vec((0u16..40, 0usize..12, any::<bool>(), any::<bool>()), 1..120),
        )
    }

    /// Drains at `now`, checks that no eviction happens where the seed stops evictions, and
    /// records eviction times per zone.
    fn check_run(
        lc: &mut NodeLifecycle,
        now: Timestamp,
        evicted: &mut BTreeMap<String, Vec<Timestamp>>,
    ) -> Result<(), TestCaseError> {
        let acts = drain(lc, now);
        let all_full = lc
            .zone_states()
            .values()
            .all(|s| *s == ZoneState::FullDisruption);
        for a in acts {
            if let LifecycleAction::EvictPods { zone, .. } = a {
                let state = lc.zone_states()[&zone];
                prop_assert!(!(state == ZoneState::PartialDisruption && lc.nodes.len() <= 50));
                prop_assert!(!all_full);
                evicted.entry(zone).or_default().push(now);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn eviction_invariants((zones, steps) in scenario()) {
            let cfg = LifecycleConfig::default();
            let mut lc = NodeLifecycle::new(cfg.clone());
            let mut now = t(0);
            let mut last_reports: BTreeMap<String, Vec<(Timestamp, NodeHealth)>> = BTreeMap::new();
            let mut evicted: BTreeMap<String, Vec<Timestamp>> = BTreeMap::new();
            for (dt, node, ready, beat) in steps {
                // Walk through deadlines up to the next input.
                let target = now + Duration::from_secs(u64::from(dt) * 5);
                while let Some(d) = lc.next_deadline() {
                    if d > target { break; }
                    let d = d.max(now);
                    now = d;
                    check_run(&mut lc, now, &mut evicted)?;
                    if lc.next_deadline() == Some(d) { break; }
                }
                now = target;
                let name = format!("n{node}");
                let zone = format!("z{}", node % zones);
                let prev_hb = last_reports.get(&name).and_then(|r| r.last()).and_then(|r| r.1.last_heartbeat);
                let health = NodeHealth { ready, last_heartbeat: if beat { Some(now) } else { prev_hb } };
                last_reports.entry(name.clone()).or_default().push((now, health));
                lc.handle_node(&name, &zone, health, now);
                check_run(&mut lc, now, &mut evicted)?;
            }
            // Rate: in every zone, evictions in any window ≤ rate × window + 1.
            for times in evicted.values() {
                for (i, a) in times.iter().enumerate() {
                    for (j, b) in times.iter().enumerate().skip(i) {
                        let window = b.saturating_since(*a).as_secs_f64();
                        let count = (j - i + 1) as f64;
                        prop_assert!(count <= cfg.node_eviction_rate * window + 1.0 + 1e-9,
                            "{count} evictions in {window} s");
                    }
                }
            }
        }

        #[test]
        fn never_evicts_before_timeout(steps in prop::collection::vec((1u16..30, 0usize..6, any::<bool>()), 1..80)) {
            // Nodes report ready/not-ready without heartbeats; an eviction of node n at time t
            // needs n continuously not ready over [t - timeout, t].
            let cfg = LifecycleConfig::default();
            let mut lc = NodeLifecycle::new(cfg.clone());
            let mut now = t(0);
            let mut not_ready_since: BTreeMap<String, Timestamp> = BTreeMap::new();
            for (dt, node, ready) in steps {
                let target = now + Duration::from_secs(u64::from(dt) * 20);
                while let Some(d) = lc.next_deadline() {
                    if d > target || d < now { break; }
                    now = d;
                    for a in drain(&mut lc, now) {
                        if let LifecycleAction::EvictPods { node, .. } = a {
                            let since = not_ready_since.get(&node).copied();
                            prop_assert!(since.is_some_and(|s| s + cfg.pod_eviction_timeout <= now));
                        }
                    }
                }
                now = target;
                let name = format!("n{node}");
                if ready { not_ready_since.remove(&name); } else { not_ready_since.entry(name.clone()).or_insert(now); }
                lc.handle_node(&name, if node % 2 == 0 { "a" } else { "b" }, NodeHealth { ready, last_heartbeat: None }, now);
                for a in drain(&mut lc, now) {
                    if let LifecycleAction::EvictPods { node, .. } = a {
                        let since = not_ready_since.get(&node).copied();
                        prop_assert!(since.is_some_and(|s| s + cfg.pod_eviction_timeout <= now));
                    }
                }
            }
        }
    }
}
