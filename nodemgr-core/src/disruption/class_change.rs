//! Class change as a disruption method: the outdated nodes [`crate::scaling::plan_surge`] lets
//! go (`maxUnavailablePerZone` kept, new before old, docs/deckhouse.md §10) are removed with
//! reason [`DisruptionReason::ClassChange`]. Runs after bounds, which ordered the new machines.

use crate::scaling::{ScalingCommand, plan_surge};

use super::{
    Action, Disruption, DisruptionMethod, DisruptionReason, DisruptionSnapshot, Proposal, Stage,
};

/// The instance class rollout.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClassChange;

impl DisruptionMethod for ClassChange {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::ClassChange
    }

    fn stage(&self) -> Stage {
        Stage::AfterSizing
    }

    fn propose(&self, snapshot: &DisruptionSnapshot<'_>) -> Proposal {
        let Some(view) = snapshot.scaling else {
            return Proposal::default();
        };
        let decision = plan_surge(view.cluster, view.config, snapshot.now);
        let disruptions = decision
            .commands
            .into_iter()
            .filter_map(|command| match command {
                ScalingCommand::RemoveNode {
                    node, group, zone, ..
                } => Some(Disruption {
                    node,
                    group,
                    action: Action::Remove { zone },
                }),
                ScalingCommand::CreateNodes { .. } => None,
            })
            .collect();
        Proposal {
            disruptions,
            blocked: Vec::new(),
            notes: decision.notes,
            chaos: None,
        }
    }
}
