//! What node-manager's caches keep of the objects their watches deliver (`docs/scale.md` §1):
//! each function strips, in place and before the object is stored, the fields no reader of
//! that cache uses — `managedFields` everywhere, and of a Node its image list, system info,
//! volumes, daemon endpoints, capacity and every condition but `Ready` (of which only the type,
//! status and heartbeat). What stays is enough for [`crate::convert`]'s views, which is all
//! the cached objects are read through; the tests check that the views are unchanged.
//!
//! Pods are not cached as API objects at all: see [`crate::pod_cache`].

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::crd::NodeGroup;

/// A Node as the node caches keep it: metadata but `managedFields`, the spec, and of the
/// status the allocatable resources, the addresses and the Ready condition's type, status and
/// heartbeat.
pub fn node(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.daemon_endpoints = None;
        status.capacity = None;
        status.config = None;
        status.features = None;
        status.runtime_handlers = None;
        status.phase = None;
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| c.type_ == "Ready");
            for c in conditions.iter_mut() {
                *c = NodeCondition {
                    type_: std::mem::take(&mut c.type_),
                    status: std::mem::take(&mut c.status),
                    last_heartbeat_time: c.last_heartbeat_time.take(),
                    ..NodeCondition::default()
                };
            }
        }
    }
}

/// A node Lease without `managedFields`.
pub fn lease(lease: &mut Lease) {
    lease.metadata.managed_fields = None;
}

/// A NodeGroup without `managedFields`.
pub fn node_group(group: &mut NodeGroup) {
    group.metadata.managed_fields = None;
}

/// A PodDisruptionBudget without `managedFields` and of its status only
/// `disruptionsAllowed` (not the per-pod `disruptedPods` map nor the conditions).
pub fn pod_disruption_budget(pdb: &mut PodDisruptionBudget) {
    pdb.metadata.managed_fields = None;
    if let Some(status) = pdb.status.as_mut() {
        status.disrupted_pods = None;
        status.conditions = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::{lease_renew_time, node_to_core, pdb_to_core};
    use proptest::prelude::*;
    use serde_json::json;

    fn realistic_node(
        ready: &str,
        taints: usize,
        annotations: usize,
        conditions_first: bool,
    ) -> Node {
        let mut conditions = vec![
            json!({"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                   "message": "kubelet has sufficient memory available",
                   "lastHeartbeatTime": "2024-05-01T10:00:00Z", "lastTransitionTime": "2024-05-01T09:00:00Z"}),
            json!({"type": "DiskPressure", "status": "False", "lastHeartbeatTime": "2024-05-01T10:00:00Z"}),
        ];
        let ready = json!({"type": "Ready", "status": ready, "reason": "KubeletReady",
            "message": "kubelet is posting ready status", "lastHeartbeatTime": "2024-05-01T10:00:07Z",
            "lastTransitionTime": "2024-05-01T09:00:00Z"});
        if conditions_first {
            conditions.insert(0, ready);
        } else {
            conditions.push(ready);
        }
        let annotations: serde_json::Map<String, serde_json::Value> = (0..annotations)
            .map(|i| (format!("example.com/a{i}"), json!(format!("v{i}"))))
            .collect();
        let cordoned = taints % 2 == 1;
        let taints: Vec<_> = (0..taints)
            .map(|i| json!({"key": format!("t{i}"), "value": "x", "effect": "NoSchedule"}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "7",
                "creationTimestamp": "2024-05-01T08:00:00Z",
                "labels": {"node.deckhouse.io/group": "w"},
                "annotations": annotations,
                "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:images": {}}}}],
            },
            "spec": {"providerID": "static://", "taints": taints, "unschedulable": cordoned},
            "status": {
                "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}],
                "allocatable": {"cpu": "3800m", "memory": "15Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "images": [{"names": ["registry.example.com/app@sha256:0123", "registry.example.com/app:v1"], "sizeBytes": 1000}],
                "nodeInfo": {"architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "containerd://1.7",
                    "kernelVersion": "6.1", "kubeProxyVersion": "v1.30", "kubeletVersion": "v1.30",
                    "machineID": "m", "operatingSystem": "linux", "osImage": "Debian", "systemUUID": "s"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "volumesInUse": ["kubernetes.io/csi/x"],
            },
        }))
        .expect("a valid Node")
    }

    proptest! {
        /// Pruning never changes the core's view of a node (what every reader of the node
        /// caches sees), whatever its Ready status, taints, annotations and condition order.
        #[test]
        fn pruning_keeps_the_core_view_of_a_node(
            ready in prop::sample::select(vec!["True", "False", "Unknown"]),
            taints in 0usize..3,
            annotations in 0usize..4,
            conditions_first in any::<bool>(),
        ) {
            let original = realistic_node(ready, taints, annotations, conditions_first);
            let mut pruned = original.clone();
            node(&mut pruned);
            prop_assert_eq!(node_to_core(&pruned), node_to_core(&original));
            prop_assert!(pruned.metadata.managed_fields.is_none());
            let status = pruned.status.as_ref().expect("status");
            prop_assert!(status.images.is_none() && status.node_info.is_none());
            prop_assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1));
        }
    }

    #[test]
    fn pruning_keeps_the_views_of_leases_and_budgets() {
        let mut l: Lease = serde_json::from_value(json!({
            "metadata": {"name": "n1", "namespace": "kube-node-lease",
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"holderIdentity": "n1", "renewTime": "2024-05-01T10:00:00.000000Z"},
        }))
        .expect("a valid Lease");
        let renew = lease_renew_time(&l);
        lease(&mut l);
        assert_eq!(lease_renew_time(&l), renew);
        assert!(renew.is_some() && l.metadata.managed_fields.is_none());

        let mut b: PodDisruptionBudget = serde_json::from_value(json!({
            "metadata": {"name": "b", "namespace": "ns", "managedFields": [{"manager": "x"}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
            "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2,
                "expectedPods": 3, "disruptedPods": {"web-1": "2024-05-01T10:00:00Z"},
                "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods",
                    "message": "", "lastTransitionTime": "2024-05-01T10:00:00Z"}]},
        }))
        .expect("a valid PodDisruptionBudget");
        let view = pdb_to_core(&b);
        pod_disruption_budget(&mut b);
        assert_eq!(pdb_to_core(&b), view);
        assert!(b.metadata.managed_fields.is_none());
    }
}
