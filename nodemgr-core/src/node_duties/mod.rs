//! Small duties Deckhouse's node-manager does besides updates and scaling, each a pure decision
//! (docs/deckhouse.md §11):
//!
//! | module | decides |
//! |---|---|
//! | [`provider_id`] | the `spec.providerID` a Static node without one gets (`static://`) |
//! | [`csi_taint`] | when the `node.deckhouse.io/csi-not-bootstrapped` taint leaves a node |
//! | [`master_group`] | the `master` NodeGroup created when a cluster has none |
//!
//! [`plan_node_duties`] combines the per-node ones into one [`NodePatch`].

pub mod csi_taint;
pub mod master_group;
pub mod provider_id;

use crate::model::Node;
use crate::ports::NodePatch;

/// What a node's duties need to know beyond the Node itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NodeFacts {
    /// Whether a `CSINode` object named like the node exists (`storage.k8s.io/v1`).
    pub csi_node_exists: bool,
}

/// The patch that carries out every duty `node` is due, guarded by the node's resourceVersion,
/// or `None` when nothing is due. Applying it makes the next decision `None`
/// (`duties_are_idempotent`).
pub fn plan_node_duties(node: &Node, facts: NodeFacts) -> Option<NodePatch> {
    let mut patch = NodePatch::new();
    if let Some(id) = provider_id::provider_id_to_set(node) {
        patch = patch.provider_id(id);
    }
    if csi_taint::remove_csi_taint(node, facts.csi_node_exists) {
        patch = patch.remove_taint(csi_taint::CSI_NOT_BOOTSTRAPPED_TAINT);
    }
    (!patch.is_empty()).then(|| patch.if_resource_version(&node.resource_version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Taint, TaintEffect, keys};
    use proptest::prelude::*;

    fn taint(key: &str) -> Taint {
        Taint {
            key: key.into(),
            value: None,
            effect: Some(TaintEffect::NoSchedule),
        }
    }

    fn node_strategy() -> impl Strategy<Value = Node> {
        (
            prop_oneof![
                Just(None),
                Just(Some("Static")),
                Just(Some("CloudEphemeral")),
                Just(Some("CloudStatic")),
            ],
            prop_oneof![
                Just(None),
                Just(Some(String::new())),
                Just(Some("aws:///eu-1a/i-1".to_owned())),
            ],
            proptest::collection::vec(
                prop_oneof![
                    Just(csi_taint::CSI_NOT_BOOTSTRAPPED_TAINT),
                    Just("dedicated"),
                    Just("node.deckhouse.io/uninitialized"),
                ],
                0..4,
            ),
        )
            .prop_map(|(node_type, provider_id, taints)| {
                let mut n = Node {
                    name: "n".into(),
                    resource_version: "7".into(),
                    provider_id,
                    taints: taints.into_iter().map(taint).collect(),
                    ..Node::default()
                };
                if let Some(t) = node_type {
                    n.labels.insert(keys::LABEL_NODE_TYPE.into(), t.into());
                }
                n
            })
    }

    proptest! {
        /// Duties are idempotent, keep every other taint and never replace a provider ID: the
        /// patch applied once leaves nothing due, removes only the CSI taint and only when the
        /// CSINode exists, and sets a provider ID only on a Static node that has none.
        #[test]
        fn duties_are_idempotent(node in node_strategy(), csi_node_exists in any::<bool>()) {
            let facts = NodeFacts { csi_node_exists };
            let mut after = node.clone();
            if let Some(patch) = plan_node_duties(&node, facts) {
                prop_assert_eq!(patch.resource_version.as_deref(), Some("7"));
                patch.apply_to(&mut after);
            }
            prop_assert!(plan_node_duties(&after, facts).is_none());
            let others = |n: &Node| -> Vec<String> {
                n.taints
                    .iter()
                    .filter(|t| t.key != csi_taint::CSI_NOT_BOOTSTRAPPED_TAINT)
                    .map(|t| t.key.clone())
                    .collect()
            };
            prop_assert_eq!(others(&node), others(&after));
            let had_csi_taint = node
                .taints
                .iter()
                .any(|t| t.key == csi_taint::CSI_NOT_BOOTSTRAPPED_TAINT);
            let has_csi_taint = after
                .taints
                .iter()
                .any(|t| t.key == csi_taint::CSI_NOT_BOOTSTRAPPED_TAINT);
            prop_assert_eq!(has_csi_taint, had_csi_taint && !csi_node_exists);
            let had_id = node.provider_id.as_deref().is_some_and(|p| !p.is_empty());
            if had_id {
                prop_assert_eq!(&after.provider_id, &node.provider_id);
            }
            let is_static =
                node.labels.get(keys::LABEL_NODE_TYPE).map(String::as_str) == Some("Static");
            if !is_static {
                prop_assert_eq!(&after.provider_id, &node.provider_id);
            }
        }
    }
}
