//! When the `node.deckhouse.io/csi-not-bootstrapped` taint leaves a node. Nodes join with it
//! (the bootstrap registers the kubelet with it) so that pods needing volumes do not land before
//! the node's CSI driver has registered; the driver's registration creates the node's `CSINode`
//! object, and from then on the taint is removed. Nothing else about the node's taints changes.

use crate::model::Node;

/// The taint key.
pub const CSI_NOT_BOOTSTRAPPED_TAINT: &str = "node.deckhouse.io/csi-not-bootstrapped";

/// Whether to remove the taint from `node` now: it carries the taint and its `CSINode` exists.
pub fn remove_csi_taint(node: &Node, csi_node_exists: bool) -> bool {
    csi_node_exists
        && node
            .taints
            .iter()
            .any(|t| t.key == CSI_NOT_BOOTSTRAPPED_TAINT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Taint, TaintEffect};

    #[test]
    fn the_taint_leaves_once_the_csi_node_exists() {
        let mut n = Node::default();
        assert!(!remove_csi_taint(&n, true), "no taint, nothing to do");
        n.taints.push(Taint {
            key: CSI_NOT_BOOTSTRAPPED_TAINT.into(),
            value: None,
            effect: Some(TaintEffect::NoSchedule),
        });
        assert!(
            !remove_csi_taint(&n, false),
            "the driver has not registered yet"
        );
        assert!(remove_csi_taint(&n, true));
    }
}
