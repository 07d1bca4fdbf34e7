//! Every label, annotation, finalizer and well-known name nodemgr reads or writes, in one place,
//! spelled exactly as Deckhouse spells them (docs/deckhouse.md §2, §3, §5, §7, §8).

/// API group of NodeGroup, StaticInstance, SSHCredentials and Instance.
pub const API_GROUP: &str = "deckhouse.io";
/// Namespace Deckhouse keeps node-manager objects in.
pub const NAMESPACE: &str = "d8-cloud-instance-manager";

/// Label: the NodeGroup a node belongs to.
pub const LABEL_NODE_GROUP: &str = "node.deckhouse.io/group";
/// Label: the node type of the node's group.
pub const LABEL_NODE_TYPE: &str = "node.deckhouse.io/type";
/// Label: a cloud node being terminated (spot logic).
pub const LABEL_TERMINATION_IN_PROGRESS: &str = "node.deckhouse.io/termination-in-progress";
/// Label Deckhouse's chaos monkey gate looks for on machines (see docs/deckhouse.md §7: the gate and the
/// marker it sets disagree; nodemgr tracks the victim itself).
pub const LABEL_CHAOS_MONKEY_VICTIM: &str = "node.deckhouse.io/chaos-monkey-victim";
/// Annotation the chaos monkey sets on its victim.
pub const ANNOTATION_CHAOS_MONKEY_VICTIM: &str = "node.deckhouse.io/chaos-monkey-victim";

/// Annotation: the configuration checksum the node currently runs.
pub const ANNOTATION_CONFIGURATION_CHECKSUM: &str = "node.deckhouse.io/configuration-checksum";
/// Annotation: the node waits for approval to apply an update.
pub const ANNOTATION_WAITING_FOR_APPROVAL: &str = "update.node.deckhouse.io/waiting-for-approval";
/// Annotation: the node may apply its update.
pub const ANNOTATION_APPROVED: &str = "update.node.deckhouse.io/approved";
/// Annotation: the node's update needs a disruption.
pub const ANNOTATION_DISRUPTION_REQUIRED: &str = "update.node.deckhouse.io/disruption-required";
/// Annotation: the disruption has been approved.
pub const ANNOTATION_DISRUPTION_APPROVED: &str = "update.node.deckhouse.io/disruption-approved";
/// Annotation: the node is replaced instead of updated in place.
pub const ANNOTATION_ROLLING_UPDATE: &str = "update.node.deckhouse.io/rolling-update";
/// Annotation: the node is being drained; value is the source (`bashible` or `user`).
pub const ANNOTATION_DRAINING: &str = "update.node.deckhouse.io/draining";
/// Annotation: the node has been drained; value is the source (`bashible` or `user`).
pub const ANNOTATION_DRAINED: &str = "update.node.deckhouse.io/drained";
/// Prefix shared by every update annotation (the `Updating` condition looks for it).
pub const UPDATE_ANNOTATION_PREFIX: &str = "update.node.deckhouse.io";
/// Value of `draining`/`drained` when nodemgr (Deckhouse: bashible) started the drain.
pub const DRAIN_SOURCE_BASHIBLE: &str = "bashible";
/// Value of `draining`/`drained` when a person started the drain.
pub const DRAIN_SOURCE_USER: &str = "user";

/// Label: the fencing agent runs and feeds the watchdog on this node.
pub const LABEL_FENCING_ENABLED: &str = "node-manager.deckhouse.io/fencing-enabled";
/// Label: the fencing mode of the node (`Watchdog` or `Notify`).
pub const LABEL_FENCING_MODE: &str = "node-manager.deckhouse.io/fencing-mode";
/// Annotation: a person asks the fencing agent to stand down on this node.
pub const ANNOTATION_FENCING_DISABLE: &str = "node-manager.deckhouse.io/fencing-disable";
/// Namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Annotation: adopt an already joined node without bootstrapping it.
pub const ANNOTATION_SKIP_BOOTSTRAP_PHASE: &str = "static.node.deckhouse.io/skip-bootstrap-phase";
/// Path of the cleanup script installed on every static node.
pub const CLEANUP_SCRIPT_PATH: &str = "/var/lib/bashible/cleanup_static_node.sh";
/// Argument the cleanup script demands before it destroys anything.
pub const CLEANUP_SCRIPT_CONFIRMATION: &str = "--yes-i-am-sane-and-i-understand-what-i-am-doing";
/// Finalizer nodemgr keeps on every StaticInstance so that a deleted instance is cleaned up over
/// SSH before it goes (nodemgr's own key: Deckhouse's CAPS finalizer name is not captured).
pub const FINALIZER_STATIC_INSTANCE: &str = "static.node.deckhouse.io/cleanup";
/// Prefix of the Secret holding a group's manual bootstrap script (`manual-bootstrap-for-<group>`).
pub const MANUAL_BOOTSTRAP_SECRET_PREFIX: &str = "manual-bootstrap-for-";

/// Name of the lowest priority class, used by standby-holder pods.
pub const STANDBY_PRIORITY_CLASS: &str = "standby";
/// Prefix of a group's standby-holder Deployment (`standby-holder-<group>`).
pub const STANDBY_HOLDER_PREFIX: &str = "standby-holder-";

/// Well-known node label: the zone.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
/// Well-known node label: the host name.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// Annotation on a pod: the mirror of a static pod (never evicted).
pub const ANNOTATION_MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// Annotation on a pod: whether the cluster autoscaler may evict it.
pub const ANNOTATION_SAFE_TO_EVICT: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
/// Taint the kubelet-side cordon corresponds to.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Taint the node controller sets on a node that is not ready.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint the node controller sets on a node it cannot reach.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// Annotation nodemgr sets on the nodes it creates: the checksum of the instance class the
/// machine was made from (`scaling::InstanceClass::checksum`). A node whose value differs from
/// its group's current class is replaced (`scaling::surge`). nodemgr's own key.
pub const ANNOTATION_INSTANCE_CLASS_CHECKSUM: &str =
    "node-manager.deckhouse.io/instance-class-checksum";
/// Label of standby-holder pods (`app=standby-holder`, docs/deckhouse.md §8).
pub const STANDBY_HOLDER_APP: &str = "standby-holder";

/// Annotation: the `nodeTemplate` last applied to the node, as JSON
/// `{"annotations":{…},"labels":{…},"taints":[…]}` (Deckhouse's node-template hook); keys
/// dropped from the template are removed from the node because they are recorded here.
pub const ANNOTATION_LAST_APPLIED_NODE_TEMPLATE: &str =
    "node-manager.deckhouse.io/last-applied-node-template";
/// Taint a node registers with until its group's template is applied.
pub const TAINT_UNINITIALIZED: &str = "node.deckhouse.io/uninitialized";
/// Prefix of node role labels (`node-role.kubernetes.io/<group>`).
pub const LABEL_NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
/// Annotation that keeps the cluster autoscaler from removing a node (set on nodes of
/// `CloudPermanent`, `CloudStatic` and `Static` groups).
pub const ANNOTATION_SCALE_DOWN_DISABLED: &str =
    "cluster-autoscaler.kubernetes.io/scale-down-disabled";
