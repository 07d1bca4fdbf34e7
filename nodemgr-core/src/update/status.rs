//! Where a node is in its update, as Deckhouse's `node_group_node_status` metric reports it
//! ([`NodeUpdateStatus`], [`node_update_status`]; docs/deckhouse.md §9).

use std::fmt;

use super::UpdateMarks;
use crate::model::{ApprovalMode, Node, NodeGroup};

/// Where a node is in its update, as Deckhouse's `node_group_node_status` metric reports it
/// (docs/deckhouse.md §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeUpdateStatus {
    /// Waits for `approved`.
    WaitingForApproval,
    /// Approved, applying a non-disruptive update.
    Approved,
    /// Approved, asks for a disruption and is being drained for it.
    DrainingForDisruption,
    /// Being drained (for another reason).
    Draining,
    /// Drained.
    Drained,
    /// Approved, asks for a disruption that nodemgr will approve (`Automatic`, `RollingUpdate`).
    WaitingForDisruptionApproval,
    /// Approved, asks for a disruption an operator must approve (`Manual`).
    WaitingForManualDisruptionApproval,
    /// The disruption is approved; the agent applies the update.
    DisruptionApproved,
    /// Runs an older configuration and has not asked for approval yet.
    ToBeUpdated,
    /// Runs the desired configuration.
    UpToDate,
    /// The desired checksum is unknown.
    UpdateFailedNoConfigChecksum,
}

impl NodeUpdateStatus {
    /// Every status, in the order of the metric's label values.
    pub const ALL: [NodeUpdateStatus; 11] = [
        Self::WaitingForApproval,
        Self::Approved,
        Self::DrainingForDisruption,
        Self::Draining,
        Self::Drained,
        Self::WaitingForDisruptionApproval,
        Self::WaitingForManualDisruptionApproval,
        Self::DisruptionApproved,
        Self::ToBeUpdated,
        Self::UpToDate,
        Self::UpdateFailedNoConfigChecksum,
    ];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitingForApproval => "WaitingForApproval",
            Self::Approved => "Approved",
            Self::DrainingForDisruption => "DrainingForDisruption",
            Self::Draining => "Draining",
            Self::Drained => "Drained",
            Self::WaitingForDisruptionApproval => "WaitingForDisruptionApproval",
            Self::WaitingForManualDisruptionApproval => "WaitingForManualDisruptionApproval",
            Self::DisruptionApproved => "DisruptionApproved",
            Self::ToBeUpdated => "ToBeUpdated",
            Self::UpToDate => "UpToDate",
            Self::UpdateFailedNoConfigChecksum => "UpdateFailedNoConfigChecksum",
        }
    }
}

impl fmt::Display for NodeUpdateStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The update status of `node` in `group` (docs/deckhouse.md §9). Cases are evaluated in the metric's order
/// with one correction: the plain `Approved` case is checked after the more specific approved
/// cases (draining for a disruption, waiting for a disruption approval, disruption approved),
/// which it would otherwise hide; the checksum cases come last.
pub fn node_update_status(
    group: &NodeGroup,
    node: &Node,
    desired_checksum: &str,
) -> NodeUpdateStatus {
    let m = UpdateMarks::of(node);
    let manual = matches!(
        group.spec.approval_mode(),
        ApprovalMode::Manual | ApprovalMode::Unknown(_)
    );
    if m.waiting {
        NodeUpdateStatus::WaitingForApproval
    } else if m.approved && m.wants_disruption() && m.draining.is_some() {
        NodeUpdateStatus::DrainingForDisruption
    } else if m.draining.is_some() {
        NodeUpdateStatus::Draining
    } else if m.drained.is_some() {
        NodeUpdateStatus::Drained
    } else if m.approved && m.wants_disruption() && !m.disruption_approved {
        if manual {
            NodeUpdateStatus::WaitingForManualDisruptionApproval
        } else {
            NodeUpdateStatus::WaitingForDisruptionApproval
        }
    } else if m.approved && m.disruption_approved {
        NodeUpdateStatus::DisruptionApproved
    } else if m.approved {
        NodeUpdateStatus::Approved
    } else if desired_checksum.is_empty() {
        NodeUpdateStatus::UpdateFailedNoConfigChecksum
    } else if node.checksum() == Some(desired_checksum) {
        NodeUpdateStatus::UpToDate
    } else {
        NodeUpdateStatus::ToBeUpdated
    }
}
