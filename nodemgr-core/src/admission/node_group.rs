//! The NodeGroup review (`nodegroup-policy.deckhouse.io`): every rule of
//! [`validate_node_group`] on CREATE and [`validate_node_group_update`] on UPDATE, with the
//! group's nodes' `containerd-config=custom` and `containerd-v2-unsupported` labels, and
//! Deckhouse's two warnings: `kubelet.maxPods` above what the per-node pod subnet holds
//! (rule 3), and a CRI change of `master` with fewer than 3 API server endpoints (rule 6).

use crate::model::{CriType, NodeGroup};
use crate::validate::{ValidationContext, validate_node_group, validate_node_group_update};

use super::{ClusterInputs, Verdict};

/// Label a node carries when its containerd configuration is custom (value `custom`).
pub const LABEL_CONTAINERD_CONFIG: &str = "node.deckhouse.io/containerd-config";
/// Label a node carries when it cannot run ContainerdV2.
pub const LABEL_CONTAINERD_V2_UNSUPPORTED: &str = "node.deckhouse.io/containerd-v2-unsupported";

fn context(inputs: &ClusterInputs) -> ValidationContext {
    let mut ctx = inputs.settings.clone();
    ctx.nodes_with_custom_containerd_config = inputs
        .group_nodes
        .iter()
        .filter(|n| n.labels.get(LABEL_CONTAINERD_CONFIG).map(String::as_str) == Some("custom"))
        .map(|n| n.name.clone())
        .collect();
    ctx.nodes_without_containerd_v2 = inputs
        .group_nodes
        .iter()
        .filter(|n| n.labels.contains_key(LABEL_CONTAINERD_V2_UNSUPPORTED))
        .map(|n| n.name.clone())
        .collect();
    ctx
}

fn warnings(ng: &NodeGroup, old: Option<&NodeGroup>, inputs: &ClusterInputs) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(prefix), Some(max_pods)) = (
        inputs.pod_subnet_node_cidr_prefix,
        ng.spec.kubelet.as_ref().and_then(|k| k.max_pods),
    ) && prefix <= 32
    {
        let addresses = 1u64 << (32 - u32::from(prefix)).min(63);
        if u64::try_from(max_pods).is_ok_and(|m| m > addresses) {
            out.push(format!(
                "spec.kubelet.maxPods {max_pods} is more than the {addresses} pod addresses a \
                 node's /{prefix} pod subnet holds (podSubnetNodeCIDRPrefix); pods beyond that \
                 will not start"
            ));
        }
    }
    if ng.name() == "master"
        && let Some(old) = old
        && old.spec.cri_type() != ng.spec.cri_type()
        && inputs.api_endpoints.is_some_and(|n| n < 3)
    {
        let (from, to): (CriType, CriType) = (old.spec.cri_type(), ng.spec.cri_type());
        out.push(format!(
            "changing cri.type of the master group from {from} to {to} restarts containerd on \
             the control-plane nodes, and with fewer than 3 API server endpoints the API will be \
             unavailable meanwhile"
        ));
    }
    out
}

/// Decides a NodeGroup review: `old` is the stored group on UPDATE.
pub(super) fn admit(ng: &NodeGroup, old: Option<&NodeGroup>, inputs: &ClusterInputs) -> Verdict {
    let ctx = context(inputs);
    let errors = match old {
        Some(old) => validate_node_group_update(old, ng, &ctx),
        None => validate_node_group(ng, &ctx),
    };
    Verdict::from_errors("NodeGroup", ng.name(), &errors, warnings(ng, old, inputs))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::super::{NodeLabels, Operation, Review, admit as admit_review};
    use super::*;

    fn ng(name: &str, spec: Value) -> Value {
        json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": name}, "spec": spec})
    }

    fn review<'a>(old: Option<&'a Value>, new: &'a Value) -> Review<'a> {
        Review {
            kind: "NodeGroup",
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            old,
            new: Some(new),
        }
    }

    fn node(name: &str, label: &str, value: &str) -> NodeLabels {
        NodeLabels {
            name: name.into(),
            labels: BTreeMap::from([(label.to_owned(), value.to_owned())]),
        }
    }

    #[test]
    fn node_type_is_immutable_on_update() {
        let old = ng("w", json!({"nodeType": "Static"}));
        let new = ng("w", json!({"nodeType": "CloudStatic"}));
        let verdict = admit_review(&review(Some(&old), &new), &ClusterInputs::default());
        assert!(!verdict.allowed);
        let message = verdict.message.unwrap_or_default();
        assert!(
            message.contains("spec.nodeType: nodeType is immutable"),
            "{message}"
        );
        assert!(admit_review(&review(None, &new), &ClusterInputs::default()).allowed);
    }

    #[test]
    fn cri_changes_wait_for_custom_containerd_nodes() {
        let old = ng(
            "w",
            json!({"nodeType": "Static", "cri": {"type": "Containerd"}}),
        );
        let new = ng(
            "w",
            json!({"nodeType": "Static", "cri": {"type": "NotManaged"}}),
        );
        let mut inputs = ClusterInputs {
            group_nodes: vec![node("w-1", LABEL_CONTAINERD_CONFIG, "custom")],
            ..ClusterInputs::default()
        };
        let verdict = admit_review(&review(Some(&old), &new), &inputs);
        assert!(!verdict.allowed);
        assert!(verdict.message.unwrap_or_default().contains("w-1"));
        inputs.group_nodes = vec![node("w-1", LABEL_CONTAINERD_CONFIG, "default")];
        assert!(admit_review(&review(Some(&old), &new), &inputs).allowed);
        let v2 = ng(
            "w",
            json!({"nodeType": "Static", "cri": {"type": "ContainerdV2"}}),
        );
        inputs.group_nodes = vec![node("w-2", LABEL_CONTAINERD_V2_UNSUPPORTED, "")];
        let verdict = admit_review(&review(Some(&old), &v2), &inputs);
        assert!(!verdict.allowed);
        assert!(verdict.message.unwrap_or_default().contains("w-2"));
    }

    #[test]
    fn warnings_for_max_pods_and_master_cri_changes() {
        let inputs = ClusterInputs {
            api_endpoints: Some(1),
            pod_subnet_node_cidr_prefix: Some(24),
            ..ClusterInputs::default()
        };
        let old = ng(
            "master",
            json!({"nodeType": "CloudPermanent", "cri": {"type": "Containerd"}}),
        );
        let new = ng(
            "master",
            json!({"nodeType": "CloudPermanent", "cri": {"type": "NotManaged"},
                "kubelet": {"maxPods": 300}}),
        );
        let verdict = admit_review(&review(Some(&old), &new), &inputs);
        assert!(verdict.allowed, "{verdict:?}");
        assert_eq!(verdict.warnings.len(), 2, "{verdict:?}");
        assert!(verdict.warnings[0].contains("256 pod addresses"));
        assert!(verdict.warnings[1].contains("fewer than 3 API server endpoints"));
        let three = ClusterInputs {
            api_endpoints: Some(3),
            ..ClusterInputs::default()
        };
        assert!(
            admit_review(&review(Some(&old), &new), &three)
                .warnings
                .is_empty()
        );
    }

    proptest! {
        /// The verdict is the validator's: refused exactly when `validate_node_group` (CREATE)
        /// or `validate_node_group_update` (UPDATE) finds an error, and every error is in the
        /// message.
        #[test]
        fn verdict_agrees_with_validation(
            old_type in proptest::sample::select(&["Static", "CloudStatic", "CloudPermanent"][..]),
            new_type in proptest::sample::select(&["Static", "CloudStatic", "CloudPermanent", "Bogus"][..]),
            mode in proptest::sample::select(&["Manual", "Automatic", "RollingUpdate"][..]),
            update in any::<bool>(),
        ) {
            let old = ng("w", json!({"nodeType": old_type}));
            let new = ng("w", json!({"nodeType": new_type, "disruptions": {"approvalMode": mode}}));
            let inputs = ClusterInputs::default();
            let verdict = admit_review(&review(update.then_some(&old), &new), &inputs);
            let parse = |v: &Value| crate::model::parse_node_group(&v.to_string());
            let (Ok(new_ng), Ok(old_ng)) = (parse(&new), parse(&old)) else {
                return Err(TestCaseError::fail("fixture does not parse"));
            };
            let errors = if update {
                validate_node_group_update(&old_ng, &new_ng, &ValidationContext::default())
            } else {
                validate_node_group(&new_ng, &ValidationContext::default())
            };
            prop_assert_eq!(verdict.allowed, errors.is_empty());
            let message = verdict.message.unwrap_or_default();
            for e in errors {
                prop_assert!(message.contains(&e.to_string()), "{} not in {}", e, message);
            }
        }
    }
}
