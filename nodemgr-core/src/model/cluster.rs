//! Snapshots of the cluster objects policies look at: nodes, pods and PodDisruptionBudgets,
//! reduced to the fields nodemgr decides on. Adapters fill them from the API; the simulator
//! keeps them as its state. A pod's inter-pod scheduling constraints (topology spread, pod
//! affinity and anti-affinity on the hostname and zone keys) are modelled as
//! docs/scheduling.md §1 describes; what the model cannot express is kept as a description in
//! [`Pod::unmodelled_constraints`] so that no policy plans around it blindly.

use std::collections::BTreeMap;

use super::keys;
use super::meta::{LabelSelector, LabelSelectorRequirement};
use super::node_group::{Taint, TaintEffect};
use super::quantity::Quantity;
use super::shared_map::{SharedResources, StringMap};
use super::time::Timestamp;

/// Resource amounts by resource name (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, …).
pub type Resources = BTreeMap<String, Quantity>;

/// A node as policies see it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    /// Node name.
    pub name: String,
    /// UID, used as a precondition when deleting.
    pub uid: String,
    /// `metadata.resourceVersion` of the object this view was read from; empty when unknown.
    /// Decisions are written with it as a precondition ([`crate::ports::NodePatch`]).
    pub resource_version: String,
    /// Labels.
    pub labels: StringMap,
    /// Annotations.
    pub annotations: StringMap,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Cordoned.
    pub unschedulable: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Last heartbeat (Lease renew time, or the Ready condition's heartbeat).
    pub last_heartbeat: Option<Timestamp>,
    /// Allocatable resources.
    pub allocatable: SharedResources,
    /// Cloud provider ID (`aws:///zone/i-…`).
    pub provider_id: Option<String>,
    /// `status.addresses[].address` (InternalIP, ExternalIP, Hostname, …): how a StaticInstance
    /// finds the Node it became or is adopted as.
    pub addresses: Vec<String>,
    /// When the node registered.
    pub created: Option<Timestamp>,
}

impl Node {
    /// The NodeGroup the node belongs to (`node.deckhouse.io/group`).
    pub fn group(&self) -> Option<&str> {
        self.labels.get(keys::LABEL_NODE_GROUP).map(String::as_str)
    }

    /// The node's zone (`topology.kubernetes.io/zone`).
    pub fn zone(&self) -> Option<&str> {
        self.labels
            .get(keys::LABEL_TOPOLOGY_ZONE)
            .map(String::as_str)
    }

    /// The configuration checksum the node reports.
    pub fn checksum(&self) -> Option<&str> {
        self.annotations
            .get(keys::ANNOTATION_CONFIGURATION_CHECKSUM)
            .map(String::as_str)
    }

    /// Whether the node carries annotation `key`.
    pub fn has_annotation(&self, key: &str) -> bool {
        self.annotations.contains_key(key)
    }
}

/// What kind of controller owns a pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Owner {
    /// Owner kind (`ReplicaSet`, `DaemonSet`, `StatefulSet`, `Job`, `Node`, …).
    pub kind: String,
    /// Owner name.
    pub name: String,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Toleration {
    /// Key; empty with `Exists` tolerates everything.
    pub key: String,
    /// `true` for `Exists`, `false` for `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` tolerates every effect.
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes semantics).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect_ok = self.effect.is_none() || self.effect == taint.effect;
        if !effect_ok {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == taint.key
            && (self.exists || self.value == taint.value.as_deref().unwrap_or_default())
    }
}

/// A topology key nodemgr plans with (docs/scheduling.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum TopologyKey {
    /// `kubernetes.io/hostname`: every node is a domain of its own.
    #[default]
    Hostname,
    /// `topology.kubernetes.io/zone`: the nodes of one zone form a domain.
    Zone,
}

impl TopologyKey {
    /// The label key.
    pub fn label(self) -> &'static str {
        match self {
            Self::Hostname => keys::LABEL_HOSTNAME,
            Self::Zone => keys::LABEL_TOPOLOGY_ZONE,
        }
    }

    /// The key of a label, when nodemgr models it.
    pub fn from_label(label: &str) -> Option<Self> {
        match label {
            keys::LABEL_HOSTNAME => Some(Self::Hostname),
            keys::LABEL_TOPOLOGY_ZONE => Some(Self::Zone),
            _ => None,
        }
    }
}

/// Which namespaces a pod affinity term's selector looks in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum NamespaceScope {
    /// The namespace of the pod carrying the term (no `namespaces`, no `namespaceSelector`).
    #[default]
    Own,
    /// The listed namespaces (`namespaces`).
    Listed(Vec<String>),
    /// Every namespace (`namespaceSelector: {}`).
    All,
}

impl NamespaceScope {
    /// Whether a pod in namespace `other` is in scope of a term carried by a pod in `own`.
    pub fn contains(&self, own: &str, other: &str) -> bool {
        match self {
            Self::Own => own == other,
            Self::Listed(list) => list.iter().any(|n| n == other),
            Self::All => true,
        }
    }
}

/// A pod (anti-)affinity term: pods matching `selector` in `namespaces`, per `topology`
/// domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PodAffinityTerm {
    /// The pods the term is about; `None` (a missing `labelSelector`) matches no pod.
    pub selector: Option<LabelSelector>,
    /// Where the selector looks.
    pub namespaces: NamespaceScope,
    /// The domain.
    pub topology: TopologyKey,
}

impl PodAffinityTerm {
    /// Whether `other` is a pod this term, carried by a pod in namespace `own`, is about.
    pub fn matches(&self, own: &str, other: &Pod) -> bool {
        self.namespaces.contains(own, &other.namespace)
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&other.labels))
    }
}

/// A preferred pod (anti-)affinity term with its weight (1–100).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct WeightedPodAffinityTerm {
    /// Weight.
    pub weight: i32,
    /// The term.
    pub term: PodAffinityTerm,
}

/// What the scheduler does when a spread constraint cannot be met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WhenUnsatisfiable {
    /// A filter: the pod is not placed where the skew would exceed `maxSkew`.
    #[default]
    DoNotSchedule,
    /// A preference only.
    ScheduleAnyway,
}

/// A `topologySpreadConstraint` (with the default node inclusion policies: node affinity
/// honoured, taints ignored).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TopologySpreadConstraint {
    /// `maxSkew` (at least 1).
    pub max_skew: u32,
    /// `topologyKey`.
    pub topology: TopologyKey,
    /// `whenUnsatisfiable`.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `labelSelector` (with `matchLabelKeys` already merged in, as the API server does);
    /// `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// `minDomains` (only with `DoNotSchedule`).
    pub min_domains: Option<u32>,
}

impl TopologySpreadConstraint {
    /// Whether `other` counts for this constraint of a pod in namespace `own`.
    pub fn matches(&self, own: &str, other: &Pod) -> bool {
        own == other.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&other.labels))
    }
}

/// Phase of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodPhase {
    /// Not yet running (unscheduled pods are Pending).
    #[default]
    Pending,
    /// Running.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished with a failure.
    Failed,
}

/// A pod as policies see it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Node the pod is bound to, if any.
    pub node_name: Option<String>,
    /// Labels.
    pub labels: StringMap,
    /// Annotations.
    pub annotations: StringMap,
    /// The controlling owner.
    pub owner: Option<Owner>,
    /// Scheduling priority.
    pub priority: i32,
    /// Priority class name.
    pub priority_class: Option<String>,
    /// Sum of container requests (plus the largest init container request where larger).
    pub requests: Resources,
    /// `spec.nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: the pod fits a node matching any one term.
    pub required_node_affinity: Vec<Vec<LabelSelectorRequirement>>,
    /// Required pod anti-affinity on `kubernetes.io/hostname` in the pod's own namespace: no
    /// two matching pods per node. Other required anti-affinity terms (zone key, other
    /// namespaces) are in [`Pod::pod_anti_affinity`].
    pub hostname_anti_affinity: Vec<LabelSelector>,
    /// Required pod affinity (`requiredDuringSchedulingIgnoredDuringExecution`): the pod goes
    /// where, for every term, a pod matching all the terms runs in the term's domain.
    pub pod_affinity: Vec<PodAffinityTerm>,
    /// Required pod anti-affinity terms beyond [`Pod::hostname_anti_affinity`].
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    /// Preferred pod affinity (`preferredDuringSchedulingIgnoredDuringExecution`): a tie-breaker.
    pub preferred_pod_affinity: Vec<WeightedPodAffinityTerm>,
    /// Preferred pod anti-affinity: a tie-breaker.
    pub preferred_pod_anti_affinity: Vec<WeightedPodAffinityTerm>,
    /// `topologySpreadConstraints` on the hostname and zone keys.
    pub topology_spread: Vec<TopologySpreadConstraint>,
    /// Required constraints nodemgr does not model (another topology key, a
    /// `namespaceSelector`, a non-default node inclusion policy), one description each. The
    /// planners never place such a pod and never move it (docs/scheduling.md §1).
    pub unmodelled_constraints: Vec<String>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Uses `emptyDir` or `hostPath` volumes.
    pub has_local_storage: bool,
    /// Phase.
    pub phase: PodPhase,
}

/// `namespace/name`, the key a pod is known by (one allocation of the right size).
pub fn pod_key(namespace: &str, name: &str) -> String {
    let mut key = String::with_capacity(namespace.len() + 1 + name.len());
    key.push_str(namespace);
    key.push('/');
    key.push_str(name);
    key
}

impl Pod {
    /// `namespace/name` ([`pod_key`]).
    pub fn key(&self) -> String {
        pod_key(&self.namespace, &self.name)
    }

    /// Owned by a DaemonSet: never evicted by a drain.
    pub fn is_daemonset(&self) -> bool {
        self.owner.as_ref().is_some_and(|o| o.kind == "DaemonSet")
    }

    /// A mirror pod of a static pod: never evicted by a drain.
    pub fn is_mirror(&self) -> bool {
        self.annotations.contains_key(keys::ANNOTATION_MIRROR_POD)
            || self.owner.as_ref().is_some_and(|o| o.kind == "Node")
    }

    /// Finished pods hold no resources and need no eviction.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, PodPhase::Succeeded | PodPhase::Failed)
    }

    /// Whether the pod carries an inter-pod constraint the placement engine evaluates beyond
    /// [`Pod::hostname_anti_affinity`] (affinity, other anti-affinity, spread, preferences).
    pub fn has_topology_constraints(&self) -> bool {
        !self.pod_affinity.is_empty()
            || !self.pod_anti_affinity.is_empty()
            || !self.preferred_pod_affinity.is_empty()
            || !self.preferred_pod_anti_affinity.is_empty()
            || !self.topology_spread.is_empty()
    }

    /// Whether the pod tolerates every `NoSchedule`/`NoExecute` taint in `taints`.
    pub fn tolerates_all(&self, taints: &[Taint]) -> bool {
        taints
            .iter()
            .filter(|t| !matches!(t.effect, Some(TaintEffect::PreferNoSchedule)))
            .all(|t| self.tolerations.iter().any(|tol| tol.tolerates(t)))
    }
}

/// A PodDisruptionBudget as a drain sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodDisruptionBudget {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Pods covered.
    pub selector: LabelSelector,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: i32,
}

impl PodDisruptionBudget {
    /// Whether the budget covers `pod`.
    pub fn covers(&self, pod: &Pod) -> bool {
        self.namespace == pod.namespace && self.selector.matches(&pod.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: Some(effect),
        }
    }

    #[test]
    fn tolerations_follow_kubernetes_rules() {
        let t = taint("dedicated", Some("gpu"), TaintEffect::NoSchedule);
        let equal = Toleration {
            key: "dedicated".into(),
            exists: false,
            value: "gpu".into(),
            effect: None,
        };
        let wrong_value = Toleration {
            value: "cpu".into(),
            ..equal.clone()
        };
        let exists_any = Toleration {
            key: String::new(),
            exists: true,
            value: String::new(),
            effect: None,
        };
        let wrong_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..equal.clone()
        };
        assert!(equal.tolerates(&t));
        assert!(!wrong_value.tolerates(&t));
        assert!(exists_any.tolerates(&t));
        assert!(!wrong_effect.tolerates(&t));
    }

    #[test]
    fn prefer_no_schedule_does_not_block() {
        let pod = Pod::default();
        assert!(pod.tolerates_all(&[taint("soft", None, TaintEffect::PreferNoSchedule)]));
        assert!(!pod.tolerates_all(&[taint("hard", None, TaintEffect::NoSchedule)]));
    }
}
