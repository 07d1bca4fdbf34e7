//! Class change as a disruption method: the outdated nodes [`crate::scaling::plan_surge`] lets
//! go (`maxUnavailablePerZone` kept, new before old, docs/deckhouse.md §10) are removed with
//! reason [`DisruptionReason::ClassChange`]. Runs after bounds, which ordered the new machines.

use crate::scaling::plan_surge;

use super::{DisruptionMethod, DisruptionReason, DisruptionSnapshot, Proposal, Stage, removals};

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
        let disruptions = removals(decision.commands);
        Proposal {
            disruptions,
            blocked: Vec::new(),
            notes: decision.notes,
            chaos: None,
        }
    }
}
