//! The drain of one node as a sans-I/O state machine: cordon, evict every pod that a drain
//! evicts, retry refused evictions every 20 s, and after the global timeout (5 min) delete what
//! is left forcibly (docs/deckhouse.md §3.3).
//!
//! # Expected flow
//! 1. The executor creates a [`Drain`] with the node, its pods and a [`DrainConfig`]
//!    ([`DrainConfig::for_group`] applies the group's `nodeDrainTimeoutSecond`).
//! 2. It drains [`Drain::poll_command`] until `None` and carries the commands out: first a
//!    [`DrainCommand::Cordon`] (only when the node is schedulable), then one
//!    [`DrainCommand::Evict`] for every pod; all evictions pending at once are meant to be issued
//!    concurrently.
//! 3. It reports each eviction's result with [`Drain::handle_eviction`] and each pod that
//!    disappears with [`Drain::handle_pod_deleted`], then polls again.
//! 4. At [`Drain::next_deadline`] it polls again: refused evictions are retried no sooner than
//!    [`DrainConfig::eviction_retry`] after the refusal; once `start + timeout` passes every pod
//!    still present gets a [`DrainCommand::ForceDelete`].
//! 5. [`Drain::outcome`] becomes `Some` once every pod is gone.
//!
//! # Guarantees
//! - DaemonSet-owned pods, mirror pods and finished pods are never evicted nor deleted.
//! - No `ForceDelete` before `start + timeout`.
//! - A refused eviction is retried no sooner than `eviction_retry` after the refusal was
//!   handled, and not after the timeout (the pod is force-deleted instead).
//! - A timed-out drain still counts as drained (docs/deckhouse.md §3.3) and names the pods it force-deleted.
//!
//! Spurious inputs (a pod the drain does not track, a result for a pod already gone, a poll
//! before any deadline) are no-ops.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use crate::model::{Node, NodeGroup, Pod, Timestamp};

/// How a drain retries and when it gives up on evictions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainConfig {
    /// Delay before a refused eviction (PDB, HTTP 429) is retried. Default 20 s (docs/deckhouse.md §3.3).
    pub eviction_retry: Duration,
    /// Global timeout after which remaining pods are deleted forcibly. Default 5 min (docs/deckhouse.md §3.3;
    /// Deckhouse's code uses 10 min, we follow the documented value).
    pub timeout: Duration,
}

impl DrainConfig {
    /// The default retry interval: 20 s.
    pub const DEFAULT_EVICTION_RETRY: Duration = Duration::from_secs(20);
    /// The default global timeout: 5 min.
    pub const DEFAULT_TIMEOUT: Duration = crate::model::spec_facts::DRAIN_TIMEOUT_DEFAULT;

    /// The configuration for a node of `group`: the defaults, with the timeout replaced by
    /// `spec.nodeDrainTimeoutSecond` when that is set and positive (unset and 0 mean the
    /// default: [`crate::model::spec_facts::drain_timeout`]).
    pub fn for_group(group: &NodeGroup) -> Self {
        Self {
            timeout: crate::model::spec_facts::drain_timeout(group.spec.node_drain_timeout_second),
            ..Self::default()
        }
    }
}

impl Default for DrainConfig {
    fn default() -> Self {
        Self {
            eviction_retry: Self::DEFAULT_EVICTION_RETRY,
            timeout: Self::DEFAULT_TIMEOUT,
        }
    }
}

/// The result of one eviction request, as the executor saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// The eviction was accepted; the pod terminates (report it with
    /// [`Drain::handle_pod_deleted`] once it is gone).
    Evicted,
    /// The eviction was refused (HTTP 429, a PodDisruptionBudget); retried later.
    Refused,
    /// The pod no longer exists: counts as gone.
    NotFound,
    /// Any other error; retried like [`EvictionOutcome::Refused`].
    Failed(String),
}

/// What the drain asks the executor to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainCommand {
    /// Mark the node unschedulable.
    Cordon {
        /// The node.
        node: String,
    },
    /// POST an Eviction for the pod (`namespace/name`), honouring PodDisruptionBudgets.
    Evict {
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// Delete the pod (`namespace/name`) without the eviction API, grace period 0.
    ForceDelete {
        /// The pod, `namespace/name`.
        pod: String,
    },
}

impl fmt::Display for DrainCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cordon { node } => write!(f, "cordon node {node}"),
            Self::Evict { pod } => write!(f, "evict pod {pod}"),
            Self::ForceDelete { pod } => write!(f, "force-delete pod {pod}"),
        }
    }
}

/// How a drain ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    /// Every pod was evicted (or was gone already) before the timeout.
    Completed,
    /// The timeout passed; the listed pods (`namespace/name`) were deleted forcibly. The node
    /// still counts as drained.
    TimedOut {
        /// Pods deleted forcibly, sorted.
        force_deleted: Vec<String>,
    },
}

impl DrainOutcome {
    /// How [`DrainOutcome::Completed`] reads.
    pub const COMPLETED: &'static str = "drained";

    /// The outcome as its `Display` writes it, the common one without a format string to
    /// interpret.
    pub fn message(&self) -> String {
        match self {
            Self::Completed => Self::COMPLETED.to_owned(),
            Self::TimedOut { .. } => self.to_string(),
        }
    }
}

impl fmt::Display for DrainOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Completed => f.write_str(Self::COMPLETED),
            Self::TimedOut { force_deleted } => write!(
                f,
                "drain timed out, {} pod(s) deleted forcibly: {}",
                force_deleted.len(),
                force_deleted.join(", ")
            ),
        }
    }
}

/// Where one pod is in the drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodState {
    /// An eviction should be issued at the given time.
    EvictAt(Timestamp),
    /// An eviction was issued; waiting for its result.
    Evicting,
    /// The eviction was accepted; waiting for the pod to disappear.
    Terminating,
    /// The timeout passed; a force delete should be issued.
    ForceDeletePending,
    /// A force delete was issued; waiting for the pod to disappear.
    ForceDeleting,
    /// A force delete failed; it is issued again at the given time.
    ForceDeleteAt(Timestamp),
    /// The pod is gone.
    Gone,
}

/// Whether a drain evicts `pod` at all: DaemonSet-owned, mirror and finished pods are left alone.
pub fn is_evictable(pod: &Pod) -> bool {
    !(pod.is_daemonset() || pod.is_mirror() || pod.is_terminal())
}

/// The drain of one node (see the module docs for the flow).
#[derive(Debug, Clone)]
pub struct Drain {
    node: String,
    config: DrainConfig,
    started: Timestamp,
    cordon_pending: bool,
    timed_out: bool,
    pods: BTreeMap<String, PodState>,
    force_deleted: BTreeSet<String>,
    outcome: Option<DrainOutcome>,
}

impl Drain {
    /// Starts draining `node` at `now`. Only `pods` bound to this node are considered, and of
    /// those only the ones [`is_evictable`] accepts; a cordon is asked for first unless the node is
    /// already unschedulable.
    pub fn new(node: &Node, pods: &[Pod], config: DrainConfig, now: Timestamp) -> Self {
        Self::from_pods(node, pods, config, now)
    }

    /// As [`Drain::new`], over any iterator of pods (callers that index pods by node pass only
    /// the node's pods, without copying them).
    pub fn from_pods<'a>(
        node: &Node,
        pods: impl IntoIterator<Item = &'a Pod>,
        config: DrainConfig,
        now: Timestamp,
    ) -> Self {
        let keys = pods
            .into_iter()
            .filter(|p| p.node_name.as_deref() == Some(node.name.as_str()) && is_evictable(p))
            .map(Pod::key);
        Self::from_keys(node, keys, config, now)
    }

    /// As [`Drain::from_pods`] for pods already known to be on `node` and evictable, given
    /// by their `namespace/name` ([`Pod::key`]); what the update executor builds from
    /// [`crate::ports::ClusterRead::list_node_pods`].
    pub fn from_keys(
        node: &Node,
        keys: impl IntoIterator<Item = String>,
        config: DrainConfig,
        now: Timestamp,
    ) -> Self {
        Self::of_named(&node.name, node.unschedulable, keys, config, now)
    }

    /// As [`Drain::from_keys`] for the node named `node`, unschedulable or not: all a drain
    /// reads of its node (a caller that keeps only these need not make a [`Node`]).
    pub fn of_named(
        node: &str,
        unschedulable: bool,
        keys: impl IntoIterator<Item = String>,
        config: DrainConfig,
        now: Timestamp,
    ) -> Self {
        let pods = map_of(keys.into_iter().map(|key| (key, PodState::EvictAt(now))));
        let mut drain = Self {
            node: node.to_owned(),
            config,
            started: now,
            cordon_pending: !unschedulable,
            timed_out: false,
            pods,
            force_deleted: BTreeSet::new(),
            outcome: None,
        };
        drain.update_outcome();
        drain
    }

    /// The node being drained.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// When the drain started.
    pub fn started(&self) -> Timestamp {
        self.started
    }

    /// The configuration in force.
    pub fn config(&self) -> DrainConfig {
        self.config
    }

    /// When remaining pods get deleted forcibly: `started + timeout`.
    pub fn timeout_at(&self) -> Timestamp {
        self.started + self.config.timeout
    }

    /// Pods (`namespace/name`) still on the node as far as the drain knows.
    pub fn remaining(&self) -> impl Iterator<Item = &str> {
        self.pods
            .iter()
            .filter(|(_, s)| **s != PodState::Gone)
            .map(|(k, _)| k.as_str())
    }

    /// Reports the result of an [`DrainCommand::Evict`] for `pod`. Call
    /// [`Drain::poll_command`] afterwards. Results for unknown pods, for pods already gone and,
    /// after the timeout, anything but [`EvictionOutcome::NotFound`] are ignored.
    pub fn handle_eviction(&mut self, pod: &str, outcome: EvictionOutcome, now: Timestamp) {
        let retry_at = now + self.config.eviction_retry;
        let timed_out = self.timed_out;
        let Some(state) = self.pods.get_mut(pod) else {
            tracing::debug!(node = %self.node, pod, "eviction result for an unknown pod ignored");
            return;
        };
        match (outcome, *state) {
            (_, PodState::Gone) => {}
            (EvictionOutcome::NotFound, _) => *state = PodState::Gone,
            (
                _,
                PodState::ForceDeletePending | PodState::ForceDeleting | PodState::ForceDeleteAt(_),
            ) => {}
            (EvictionOutcome::Evicted, _) => *state = PodState::Terminating,
            (EvictionOutcome::Refused | EvictionOutcome::Failed(_), PodState::Terminating) => {}
            (EvictionOutcome::Refused | EvictionOutcome::Failed(_), _) if timed_out => {}
            (EvictionOutcome::Refused | EvictionOutcome::Failed(_), _) => {
                *state = PodState::EvictAt(retry_at);
            }
        }
        self.update_outcome();
    }

    /// Reports that `pod` no longer exists (it terminated after an eviction, a force delete
    /// finished, or it went away on its own). Call [`Drain::poll_command`] afterwards.
    pub fn handle_pod_deleted(&mut self, pod: &str, _now: Timestamp) {
        if let Some(state) = self.pods.get_mut(pod) {
            *state = PodState::Gone;
            self.update_outcome();
        }
    }

    /// Reports as gone every pod still on the node ([`Drain::remaining`]) for which `gone`
    /// answers `true`, as [`Drain::handle_pod_deleted`] for each would; `gone` is asked of
    /// each remaining pod once, in key order. Call [`Drain::poll_command`] afterwards.
    pub fn handle_pods_gone(&mut self, mut gone: impl FnMut(&str) -> bool, _now: Timestamp) {
        let mut any = false;
        for (key, state) in &mut self.pods {
            if *state != PodState::Gone && gone(key) {
                *state = PodState::Gone;
                any = true;
            }
        }
        if any {
            self.update_outcome();
        }
    }

    /// Reports that a [`DrainCommand::ForceDelete`] failed with an error other than not-found;
    /// it is issued again no sooner than `eviction_retry` later (a not-found is a
    /// [`Drain::handle_pod_deleted`]).
    pub fn handle_force_delete_failed(&mut self, pod: &str, now: Timestamp) {
        if let Some(state) = self.pods.get_mut(pod)
            && *state == PodState::ForceDeleting
        {
            *state = PodState::ForceDeleteAt(now + self.config.eviction_retry);
        }
    }

    /// The next command to carry out at `now`, or `None` when nothing is due. Call it until
    /// `None` after creating the drain, after every `handle_*` and whenever
    /// [`Drain::next_deadline`] passes.
    #[must_use]
    pub fn poll_command(&mut self, now: Timestamp) -> Option<DrainCommand> {
        if self.cordon_pending {
            self.cordon_pending = false;
            self.update_outcome();
            return Some(DrainCommand::Cordon {
                node: self.node.clone(),
            });
        }
        if !self.timed_out && now >= self.timeout_at() && self.outcome.is_none() {
            self.timed_out = true;
            for state in self.pods.values_mut() {
                if *state != PodState::Gone {
                    *state = PodState::ForceDeletePending;
                }
            }
        }
        for (key, state) in &mut self.pods {
            match *state {
                PodState::EvictAt(at) if at <= now => {
                    *state = PodState::Evicting;
                    return Some(DrainCommand::Evict { pod: key.clone() });
                }
                PodState::ForceDeleteAt(at) if at <= now => {
                    *state = PodState::ForceDeleting;
                    return Some(DrainCommand::ForceDelete { pod: key.clone() });
                }
                PodState::ForceDeletePending => {
                    *state = PodState::ForceDeleting;
                    self.force_deleted.insert(key.clone());
                    return Some(DrainCommand::ForceDelete { pod: key.clone() });
                }
                _ => {}
            }
        }
        None
    }

    /// When [`Drain::poll_command`] will next have something to say without new input: the
    /// earliest eviction retry, or the timeout while pods remain. `None` once finished.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if self.outcome.is_some() {
            return None;
        }
        let retries = self.pods.values().filter_map(|s| match s {
            PodState::EvictAt(at) | PodState::ForceDeleteAt(at) => Some(*at),
            _ => None,
        });
        let timeout = (!self.timed_out).then(|| self.timeout_at());
        retries.chain(timeout).min()
    }

    /// How the drain ended: `Some` once the cordon was issued and every pod is gone
    /// ([`DrainOutcome::Completed`]), or once the timeout passed and every force delete was
    /// confirmed ([`DrainOutcome::TimedOut`]).
    pub fn outcome(&self) -> Option<&DrainOutcome> {
        self.outcome.as_ref()
    }

    fn update_outcome(&mut self) {
        if self.outcome.is_some()
            || self.cordon_pending
            || self.pods.values().any(|s| *s != PodState::Gone)
        {
            return;
        }
        self.outcome = Some(if self.timed_out {
            DrainOutcome::TimedOut {
                force_deleted: self.force_deleted.iter().cloned().collect(),
            }
        } else {
            DrainOutcome::Completed
        });
    }
}

/// How many entries [`map_of`] puts into a map one by one; more are sorted and built at once.
const INSERT_AT_MOST: usize = 16;

/// The map of `entries` (a key given twice: the last one counts), as `collect` makes it: the
/// few entries a node's drain usually has are put in one by one, without the list that
/// `collect` sorts first.
pub(crate) fn map_of<V>(entries: impl Iterator<Item = (String, V)>) -> BTreeMap<String, V> {
    match entries.size_hint() {
        (_, Some(at_most)) if at_most <= INSERT_AT_MOST => {
            let mut map = BTreeMap::new();
            for (key, value) in entries {
                map.insert(key, value);
            }
            map
        }
        _ => entries.collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Owner, PodPhase, keys};
    use proptest::prelude::*;

    fn node(name: &str, unschedulable: bool) -> Node {
        Node {
            name: name.into(),
            unschedulable,
            ready: true,
            ..Node::default()
        }
    }

    fn pod(name: &str, node: &str) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: name.into(),
            node_name: Some(node.into()),
            phase: PodPhase::Running,
            ..Pod::default()
        }
    }

    fn owned(mut p: Pod, kind: &str) -> Pod {
        p.owner = Some(Owner {
            kind: kind.into(),
            name: "owner".into(),
        });
        p
    }

    fn drain_all(drain: &mut Drain, now: Timestamp) -> Vec<DrainCommand> {
        std::iter::from_fn(|| drain.poll_command(now)).collect()
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(1_000_000 + secs)
    }

    #[test]
    fn cordons_then_evicts_only_evictable_pods_of_the_node() {
        let mut mirror = pod("mirror", "n1");
        mirror
            .annotations
            .insert(keys::ANNOTATION_MIRROR_POD.into(), "x".into());
        let mut done = pod("done", "n1");
        done.phase = PodPhase::Succeeded;
        let pods = vec![
            pod("a", "n1"),
            pod("b", "n1"),
            pod("elsewhere", "n2"),
            owned(pod("ds", "n1"), "DaemonSet"),
            owned(pod("static", "n1"), "Node"),
            mirror,
            done,
        ];
        let mut drain = Drain::new(&node("n1", false), &pods, DrainConfig::default(), t(0));
        let commands = drain_all(&mut drain, t(0));
        assert_eq!(
            commands,
            vec![
                DrainCommand::Cordon { node: "n1".into() },
                DrainCommand::Evict { pod: "ns/a".into() },
                DrainCommand::Evict { pod: "ns/b".into() },
            ]
        );
        assert_eq!(commands[0].to_string(), "cordon node n1");
        assert_eq!(drain.node(), "n1");
        assert!(drain.outcome().is_none());
        drain.handle_eviction("ns/a", EvictionOutcome::Evicted, t(1));
        drain.handle_eviction("ns/b", EvictionOutcome::NotFound, t(1));
        assert!(drain.outcome().is_none(), "ns/a is still terminating");
        drain.handle_pod_deleted("ns/a", t(3));
        assert_eq!(drain.outcome(), Some(&DrainOutcome::Completed));
        assert_eq!(drain.next_deadline(), None);
    }

    #[test]
    fn cordoned_node_without_pods_completes_without_commands() {
        let mut drain = Drain::new(&node("n1", true), &[], DrainConfig::default(), t(0));
        assert!(drain_all(&mut drain, t(0)).is_empty());
        assert_eq!(drain.outcome(), Some(&DrainOutcome::Completed));
    }

    #[test]
    fn schedulable_node_without_pods_completes_after_the_cordon() {
        let mut drain = Drain::new(&node("n1", false), &[], DrainConfig::default(), t(0));
        assert!(drain.outcome().is_none());
        assert_eq!(drain_all(&mut drain, t(0)).len(), 1);
        assert_eq!(drain.outcome(), Some(&DrainOutcome::Completed));
    }

    #[test]
    fn refused_eviction_is_retried_after_twenty_seconds() {
        let mut drain = Drain::new(
            &node("n1", true),
            &[pod("a", "n1")],
            DrainConfig::default(),
            t(0),
        );
        assert_eq!(drain_all(&mut drain, t(0)).len(), 1);
        drain.handle_eviction("ns/a", EvictionOutcome::Refused, t(2));
        assert!(drain_all(&mut drain, t(2)).is_empty());
        assert_eq!(drain.next_deadline(), Some(t(22)));
        assert!(drain_all(&mut drain, t(21)).is_empty());
        assert_eq!(
            drain_all(&mut drain, t(22)),
            vec![DrainCommand::Evict { pod: "ns/a".into() }]
        );
        drain.handle_eviction("ns/a", EvictionOutcome::Failed("boom".into()), t(23));
        assert_eq!(drain.next_deadline(), Some(t(43)));
    }

    #[test]
    fn timeout_force_deletes_what_is_left_and_still_counts_as_drained() {
        let pods = [pod("a", "n1"), pod("b", "n1"), pod("c", "n1")];
        let mut drain = Drain::new(&node("n1", false), &pods, DrainConfig::default(), t(0));
        assert_eq!(drain_all(&mut drain, t(0)).len(), 4);
        drain.handle_eviction("ns/a", EvictionOutcome::Evicted, t(0));
        drain.handle_pod_deleted("ns/a", t(5));
        drain.handle_eviction("ns/b", EvictionOutcome::Refused, t(0));
        drain.handle_eviction("ns/c", EvictionOutcome::Evicted, t(0));
        let mut now = t(0);
        while now < t(300) {
            let next = drain.next_deadline().expect("pending");
            assert!(next > now);
            now = next;
            for command in drain_all(&mut drain, now) {
                match command {
                    DrainCommand::Evict { pod } => {
                        assert!(now < t(300));
                        drain.handle_eviction(&pod, EvictionOutcome::Refused, now);
                    }
                    DrainCommand::ForceDelete { .. } => assert!(now >= t(300)),
                    DrainCommand::Cordon { .. } => panic!("cordon twice"),
                }
            }
        }
        assert_eq!(now, t(300));
        assert!(drain.outcome().is_none(), "force deletes not confirmed yet");
        assert_eq!(drain.next_deadline(), None);
        drain.handle_pod_deleted("ns/b", t(301));
        drain.handle_pod_deleted("ns/c", t(301));
        assert_eq!(
            drain.outcome(),
            Some(&DrainOutcome::TimedOut {
                force_deleted: vec!["ns/b".into(), "ns/c".into()]
            })
        );
    }

    #[test]
    fn failed_force_delete_is_retried() {
        let config = DrainConfig {
            eviction_retry: Duration::from_secs(20),
            timeout: Duration::from_secs(30),
        };
        let mut drain = Drain::new(&node("n1", true), &[pod("a", "n1")], config, t(0));
        assert_eq!(drain_all(&mut drain, t(0)).len(), 1);
        drain.handle_eviction("ns/a", EvictionOutcome::Refused, t(0));
        assert_eq!(drain_all(&mut drain, t(20)).len(), 1);
        assert_eq!(
            drain_all(&mut drain, t(30)),
            vec![DrainCommand::ForceDelete { pod: "ns/a".into() }]
        );
        drain.handle_force_delete_failed("ns/a", t(31));
        assert_eq!(drain.next_deadline(), Some(t(51)));
        assert_eq!(
            drain_all(&mut drain, t(51)),
            vec![DrainCommand::ForceDelete { pod: "ns/a".into() }]
        );
        drain.handle_pod_deleted("ns/a", t(52));
        assert!(matches!(
            drain.outcome(),
            Some(DrainOutcome::TimedOut { .. })
        ));
    }

    #[test]
    fn group_timeout_overrides_the_default() {
        let mut group = NodeGroup::default();
        assert_eq!(DrainConfig::for_group(&group), DrainConfig::default());
        group.spec.node_drain_timeout_second = Some(42);
        let config = DrainConfig::for_group(&group);
        assert_eq!(config.timeout, Duration::from_secs(42));
        assert_eq!(config.eviction_retry, Duration::from_secs(20));
        group.spec.node_drain_timeout_second = Some(-1);
        assert_eq!(
            DrainConfig::for_group(&group).timeout,
            Duration::from_secs(300)
        );
    }

    #[test]
    fn spurious_inputs_are_ignored() {
        let mut drain = Drain::new(
            &node("n1", true),
            &[pod("a", "n1")],
            DrainConfig::default(),
            t(0),
        );
        drain.handle_eviction("ns/unknown", EvictionOutcome::Evicted, t(0));
        drain.handle_pod_deleted("ns/unknown", t(0));
        assert_eq!(drain_all(&mut drain, t(0)).len(), 1);
        drain.handle_pod_deleted("ns/a", t(1));
        drain.handle_eviction("ns/a", EvictionOutcome::Refused, t(2));
        assert_eq!(drain.outcome(), Some(&DrainOutcome::Completed));
        assert!(drain_all(&mut drain, t(500)).is_empty());
    }

    /// How a generated pod behaves.
    #[derive(Debug, Clone)]
    struct PodScript {
        kind: u8,
        refusals: u8,
        fail_with_error: bool,
        terminate_secs: u16,
    }

    fn pod_script() -> impl Strategy<Value = PodScript> {
        (0u8..8, 0u8..12, any::<bool>(), 0u16..200).prop_map(
            |(kind, refusals, fail_with_error, terminate_secs)| PodScript {
                kind,
                refusals,
                fail_with_error,
                terminate_secs,
            },
        )
    }

    fn scripted_pod(i: usize, script: &PodScript) -> Pod {
        let p = pod(&format!("p{i}"), "n1");
        match script.kind {
            0 => owned(p, "DaemonSet"),
            1 => {
                let mut p = p;
                p.annotations
                    .insert(keys::ANNOTATION_MIRROR_POD.into(), "x".into());
                p
            }
            2 => Pod {
                phase: PodPhase::Failed,
                ..p
            },
            3 => Pod {
                node_name: Some("other".into()),
                ..p
            },
            _ => p,
        }
    }

    proptest! {
        /// A map made entry by entry (few entries) or sorted and built at once (many) is the
        /// map `collect` makes, keys given twice included.
        #[test]
        fn a_map_of_entries_is_the_collected_one(
            entries in proptest::collection::vec(("[a-d]{1,2}", any::<u8>()), 0..40),
        ) {
            let collected: BTreeMap<String, u8> = entries.iter().cloned().collect();
            prop_assert_eq!(map_of(entries.iter().cloned()), collected.clone());
            // Through a filter, whose size hint is a bound only.
            prop_assert_eq!(
                map_of(entries.iter().filter(|&(k, _)| !k.is_empty()).cloned()),
                collected
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Drives a drain against scripted pods, jumping from deadline to deadline, and checks
        /// the guarantees of the module docs.
        #[test]
        fn drain_guarantees_hold(
            scripts in proptest::collection::vec(pod_script(), 0..12),
            retry_secs in 1u64..60,
            timeout_secs in 1u64..400,
            unschedulable in any::<bool>(),
        ) {
            let config = DrainConfig {
                eviction_retry: Duration::from_secs(retry_secs),
                timeout: Duration::from_secs(timeout_secs),
            };
            let pods: Vec<Pod> = scripts.iter().enumerate().map(|(i, s)| scripted_pod(i, s)).collect();
            let start = t(0);
            let mut drain = Drain::new(&node("n1", unschedulable), &pods, config, start);
            let deadline = start + config.timeout;
            let mut remaining_refusals: BTreeMap<String, u8> = BTreeMap::new();
            let mut refused_at: BTreeMap<String, Timestamp> = BTreeMap::new();
            let mut deletions: Vec<(Timestamp, String)> = Vec::new();
            let mut evicted = BTreeSet::new();
            let mut force_deleted = BTreeSet::new();
            let mut cordons = 0;
            let mut now = start;
            for _ in 0..10_000 {
                while let Some(command) = drain.poll_command(now) {
                    match command {
                        DrainCommand::Cordon { node } => {
                            prop_assert_eq!(node.as_str(), "n1");
                            cordons += 1;
                        }
                        DrainCommand::Evict { pod } => {
                            let i: usize = pod.trim_start_matches("ns/p").parse().unwrap();
                            let script = &scripts[i];
                            prop_assert!(is_evictable(&pods[i]) && pods[i].node_name.as_deref() == Some("n1"));
                            prop_assert!(cordons == 1 || unschedulable, "evict before cordon");
                            prop_assert!(now < deadline, "eviction after the timeout");
                            if let Some(at) = refused_at.get(&pod) {
                                prop_assert!(now >= *at + config.eviction_retry, "retried too early");
                            }
                            let left = remaining_refusals.entry(pod.clone()).or_insert(script.refusals);
                            if *left > 0 {
                                *left -= 1;
                                refused_at.insert(pod.clone(), now);
                                let outcome = if script.fail_with_error {
                                    EvictionOutcome::Failed("conflict".into())
                                } else {
                                    EvictionOutcome::Refused
                                };
                                drain.handle_eviction(&pod, outcome, now);
                            } else {
                                evicted.insert(pod.clone());
                                drain.handle_eviction(&pod, EvictionOutcome::Evicted, now);
                                deletions.push((now + Duration::from_secs(script.terminate_secs.into()), pod));
                            }
                        }
                        DrainCommand::ForceDelete { pod } => {
                            let i: usize = pod.trim_start_matches("ns/p").parse().unwrap();
                            prop_assert!(is_evictable(&pods[i]));
                            prop_assert!(now >= deadline, "force delete before the timeout");
                            force_deleted.insert(pod.clone());
                            deletions.push((now, pod));
                        }
                    }
                }
                if drain.outcome().is_some() {
                    break;
                }
                // Deliver due deletions, else jump to the next event.
                deletions.sort();
                if let Some((at, _)) = deletions.first() && *at <= now {
                    let (_, pod) = deletions.remove(0);
                    drain.handle_pod_deleted(&pod, now);
                    continue;
                }
                let next = [drain.next_deadline(), deletions.first().map(|(at, _)| *at)]
                    .into_iter()
                    .flatten()
                    .min();
                prop_assert!(next.is_some(), "drain stuck without a deadline");
                let next = next.unwrap();
                prop_assert!(next >= now);
                now = next;
            }
            let outcome = drain.outcome().cloned();
            prop_assert!(outcome.is_some(), "drain did not finish");
            prop_assert_eq!(cordons, usize::from(!unschedulable));
            let expected: BTreeSet<String> = pods
                .iter()
                .filter(|p| is_evictable(p) && p.node_name.as_deref() == Some("n1"))
                .map(Pod::key)
                .collect();
            let handled: BTreeSet<String> = evicted.union(&force_deleted).cloned().collect();
            prop_assert_eq!(&handled, &expected, "every pod evicted or force-deleted");
            match outcome {
                Some(DrainOutcome::TimedOut { force_deleted: reported }) => {
                    prop_assert_eq!(reported.into_iter().collect::<BTreeSet<_>>(), force_deleted);
                }
                _ => prop_assert!(force_deleted.is_empty()),
            }
        }
    }
}
