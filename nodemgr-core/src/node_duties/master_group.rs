//! The `master` NodeGroup a cluster gets when it has none, as Deckhouse creates it: the control
//! plane's nodes, `Static` in a cluster on bare metal and `CloudPermanent` in a cloud, their
//! disruptions approved by hand (a control-plane node is never drained on its own), labelled with
//! both control-plane role labels and tainted so that ordinary workloads stay off.

use std::collections::BTreeMap;

use crate::model::{
    ApprovalMode, Disruptions, NodeGroup, NodeTemplate, NodeType, ObjectMeta, Taint, TaintEffect,
};

/// The group's name.
pub const MASTER_GROUP: &str = "master";
/// The control-plane role label (and the taint key).
pub const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";
/// The legacy role label Deckhouse still sets.
pub const MASTER_ROLE: &str = "node-role.kubernetes.io/master";

/// Why a node type cannot be the master group's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the master NodeGroup is Static or CloudPermanent, not {0}: control-plane machines are never ordered on demand"
)]
pub struct NotAMasterType(pub NodeType);

/// The `master` NodeGroup of type `node_type` (`Static` or `CloudPermanent`).
///
/// # Errors
/// [`NotAMasterType`] for `CloudEphemeral` and `CloudStatic`.
pub fn master_node_group(node_type: NodeType) -> Result<NodeGroup, NotAMasterType> {
    if !matches!(node_type, NodeType::Static | NodeType::CloudPermanent) {
        return Err(NotAMasterType(node_type));
    }
    let mut group = NodeGroup {
        api_version: "deckhouse.io/v1".into(),
        kind: "NodeGroup".into(),
        metadata: ObjectMeta {
            name: Some(MASTER_GROUP.into()),
            ..ObjectMeta::default()
        },
        ..NodeGroup::default()
    };
    group.spec.node_type = Some(node_type);
    group.spec.disruptions = Some(Disruptions {
        approval_mode: Some(ApprovalMode::Manual),
        ..Disruptions::default()
    });
    group.spec.node_template = Some(NodeTemplate {
        labels: Some(BTreeMap::from([
            (CONTROL_PLANE_ROLE.to_owned(), String::new()),
            (MASTER_ROLE.to_owned(), String::new()),
        ])),
        annotations: None,
        taints: Some(vec![Taint {
            key: CONTROL_PLANE_ROLE.into(),
            value: None,
            effect: Some(TaintEffect::NoSchedule),
        }]),
    });
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{ValidationContext, validate_node_group};

    #[test]
    fn the_master_group_is_manual_tainted_and_valid() {
        for node_type in [NodeType::Static, NodeType::CloudPermanent] {
            let g = master_node_group(node_type.clone()).expect("a master type");
            assert_eq!(g.name(), "master");
            assert_eq!(g.spec.approval_mode(), ApprovalMode::Manual);
            assert_eq!(g.spec.node_type, Some(node_type));
            let errors = validate_node_group(&g, &ValidationContext::default());
            assert!(errors.is_empty(), "{errors:?}");
        }
        assert!(master_node_group(NodeType::CloudEphemeral).is_err());
        assert!(master_node_group(NodeType::CloudStatic).is_err());
    }
}
