//! Configuration drift as a disruption method: a node whose update needs a disruption
//! (`disruption-required`) and holds one of its group's update slots proceeds by
//! `disruptions.approvalMode` (docs/deckhouse.md §3.2): `Automatic`, inside
//! `automatic.windows`, drains it first when `drainBeforeApproval` (default; never the lone
//! master) and then approves the disruption (cordoning a schedulable node that was not drained);
//! `Manual` (and an unknown mode) waits for the operator. `RollingUpdate` groups are
//! [`super::RollingUpdate`]'s.

use crate::model::{ApprovalMode, NodeGroup, keys};
use crate::update::UpdateCommand;
use crate::window::window_open;

use super::{
    Action, Disruption, DisruptionMethod, DisruptionReason, DisruptionSnapshot, Proposal, Stage,
};

/// Disruptive updates applied in place.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drift;

/// Whether a node whose disruption is approved in `Automatic` mode must be drained first.
/// Deckhouse skips the drain for the single node of group `master` (draining it would evict the
/// control plane's own workloads with nowhere to go).
fn needs_drain(group: &NodeGroup, group_size: usize) -> bool {
    group.spec.drain_before_approval() && !(group.name() == "master" && group_size <= 1)
}

impl DisruptionMethod for Drift {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Drift
    }

    fn stage(&self) -> Stage {
        Stage::Update
    }

    fn propose(&self, snapshot: &DisruptionSnapshot<'_>) -> Proposal {
        let Some(view) = snapshot.update else {
            return Proposal::default();
        };
        let group = view.group;
        let mut proposal = Proposal::default();
        match group.spec.approval_mode() {
            ApprovalMode::Automatic => {
                let open = window_open(group.spec.automatic_windows(), snapshot.now);
                let drain = needs_drain(group, view.group_size);
                for (node, marks) in view.asking {
                    let name = node.name.clone();
                    let command = if !open {
                        proposal.blocked.push(format!(
                            "node {name} waits for a disruption window (disruptions.automatic.windows)"
                        ));
                        continue;
                    } else if drain && marks.drained.is_none() {
                        UpdateCommand::StartDrain { node: name.clone() }
                    } else {
                        let cordon = !node.unschedulable && marks.drained.is_none();
                        UpdateCommand::ApproveDisruption {
                            node: name.clone(),
                            cordon,
                        }
                    };
                    proposal.disruptions.push(Disruption {
                        node: name,
                        group: group.name().to_owned(),
                        action: Action::Update(command),
                    });
                }
            }
            ApprovalMode::Manual | ApprovalMode::Unknown(_) => {
                for (node, _) in view.asking {
                    proposal.blocked.push(format!(
                        "node {} waits for manual disruption approval (annotate it {})",
                        node.name,
                        keys::ANNOTATION_DISRUPTION_APPROVED
                    ));
                }
            }
            ApprovalMode::RollingUpdate => {}
        }
        proposal
    }
}
