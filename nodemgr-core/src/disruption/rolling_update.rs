//! Rolling update as a disruption method: in a group with `approvalMode: RollingUpdate`, a node
//! whose update needs a disruption and holds a slot has its machine replaced, inside
//! `rollingUpdate.windows` ([`UpdateCommand::ReplaceMachine`], repeated while the node exists;
//! docs/deckhouse.md §3.2). Other modes are [`super::Drift`]'s.

use crate::model::ApprovalMode;
use crate::update::UpdateCommand;
use crate::window::window_open;

use super::{
    Action, Disruption, DisruptionMethod, DisruptionReason, DisruptionSnapshot, Proposal, Stage,
};

/// Machine replacement for disruptive updates.
#[derive(Debug, Clone, Copy, Default)]
pub struct RollingUpdate;

impl DisruptionMethod for RollingUpdate {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::RollingUpdate
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
            ApprovalMode::RollingUpdate => {
                let open = window_open(group.spec.rolling_update_windows(), snapshot.now);
                for (node, _) in view.asking {
                    let name = node.name.clone();
                    if open {
                        proposal.disruptions.push(Disruption {
                            node: name.clone(),
                            group: group.name().to_owned(),
                            action: Action::Update(UpdateCommand::ReplaceMachine { node: name }),
                        });
                    } else {
                        proposal.blocked.push(format!(
                            "node {name} waits for a replacement window (disruptions.rollingUpdate.windows)"
                        ));
                    }
                }
            }
            ApprovalMode::Automatic | ApprovalMode::Manual | ApprovalMode::Unknown(_) => {}
        }
        proposal
    }
}
