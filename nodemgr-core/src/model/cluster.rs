//! Snapshots of the cluster objects policies look at: nodes, pods and PodDisruptionBudgets,
//! reduced to the fields nodemgr decides on. Adapters fill them from the API; the simulator
//! keeps them as its state.

use std::collections::BTreeMap;

use super::keys;
use super::meta::{LabelSelector, LabelSelectorRequirement};
use super::node_group::{Taint, TaintEffect};
use super::quantity::Quantity;
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
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Cordoned.
    pub unschedulable: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// Last heartbeat (Lease renew time, or the Ready condition's heartbeat).
    pub last_heartbeat: Option<Timestamp>,
    /// Allocatable resources.
    pub allocatable: Resources,
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
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
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
    /// Required pod anti-affinity on `kubernetes.io/hostname`: no two matching pods per node.
    pub hostname_anti_affinity: Vec<LabelSelector>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Uses `emptyDir` or `hostPath` volumes.
    pub has_local_storage: bool,
    /// Phase.
    pub phase: PodPhase,
}

impl Pod {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
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
