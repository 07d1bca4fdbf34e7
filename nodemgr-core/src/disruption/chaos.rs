//! The chaos monkey as a disruption method: the victim [`crate::scaling::plan_chaos`] picks
//! (one at a time cluster-wide, only from a whole group, once per `chaos.period`) is removed
//! with reason [`DisruptionReason::Chaos`]. Runs first, before bounds, so the group's bounds
//! order its replacement in the same step (docs/executors.md §2.4).

use crate::scaling::plan_chaos;

use super::{DisruptionMethod, DisruptionReason, DisruptionSnapshot, Proposal, Stage, removals};

/// The chaos monkey.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chaos;

impl DisruptionMethod for Chaos {
    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Chaos
    }

    fn stage(&self) -> Stage {
        Stage::BeforeSizing
    }

    fn propose(&self, snapshot: &DisruptionSnapshot<'_>) -> Proposal {
        let Some(view) = snapshot.scaling else {
            return Proposal::default();
        };
        let decision = plan_chaos(
            view.cluster,
            view.chaos,
            view.chaos_seed,
            view.config,
            snapshot.now,
        );
        let disruptions = removals(decision.commands);
        Proposal {
            disruptions,
            blocked: Vec::new(),
            notes: decision.notes,
            chaos: Some(decision.state),
        }
    }
}
