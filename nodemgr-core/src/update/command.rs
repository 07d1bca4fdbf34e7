//! The update planner's decisions: [`UpdateCommand`], the commands for the executor, and
//! [`UpdatePlan`], one group's answer with the reasons nothing else moves.

use std::fmt;

use crate::disruption::DisruptionReason;
use crate::model::keys;

/// The annotations [`UpdateCommand::Finish`] removes: every mark of the update protocol a node
/// carries while it updates (docs/deckhouse.md §3).
pub const FINISH_REMOVES: &[&str] = &[
    keys::ANNOTATION_APPROVED,
    keys::ANNOTATION_WAITING_FOR_APPROVAL,
    keys::ANNOTATION_DISRUPTION_REQUIRED,
    keys::ANNOTATION_DISRUPTION_APPROVED,
    keys::ANNOTATION_ROLLING_UPDATE,
    keys::ANNOTATION_DRAINED,
    keys::ANNOTATION_DRAINING,
];

/// A decision of the update planner, for the executor to carry out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum UpdateCommand {
    /// Set `approved`, remove `waiting-for-approval`.
    Approve {
        /// The node.
        node: String,
    },
    /// Set `draining=bashible`; the executor runs a [`Drain`](crate::drain::Drain) and, when it ends (completed or
    /// timed out), sets `drained=bashible` and removes `draining`.
    StartDrain {
        /// The node.
        node: String,
    },
    /// Set `disruption-approved`, remove `disruption-required`. When `cordon` is true the
    /// executor cordons the node first and records that it did by setting `drained=bashible`
    /// (so that [`UpdateCommand::Finish`] uncordons it later).
    ApproveDisruption {
        /// The node.
        node: String,
        /// Cordon the node first (it is schedulable and was not drained).
        cordon: bool,
    },
    /// `RollingUpdate`: delete the node's machine so that a fresh one replaces it (the executor
    /// or cloud adapter decides how). Repeated by every plan while the node exists; idempotent.
    ReplaceMachine {
        /// The node.
        node: String,
    },
    /// The update is done: remove [`FINISH_REMOVES`] (`approved`, `waiting-for-approval`,
    /// `disruption-required`, `disruption-approved`, `rolling-update`, `drained` and
    /// `draining`); uncordon when `uncordon`.
    Finish {
        /// The node.
        node: String,
        /// Uncordon: nodemgr cordoned the node (`drained`/`draining` = `bashible`).
        uncordon: bool,
    },
}

impl UpdateCommand {
    /// The node the command is about.
    pub fn node(&self) -> &str {
        match self {
            Self::Approve { node }
            | Self::StartDrain { node }
            | Self::ApproveDisruption { node, .. }
            | Self::ReplaceMachine { node }
            | Self::Finish { node, .. } => node,
        }
    }

    /// Whether the command moves a node forward (every command but [`UpdateCommand::Finish`]);
    /// such commands are never planned while a node of the group is not Ready.
    pub fn is_step(&self) -> bool {
        !matches!(self, Self::Finish { .. })
    }

    /// The disruption the command is a step of: [`DisruptionReason::Drift`] for the drain
    /// before a disruption and its approval, [`DisruptionReason::RollingUpdate`] for a machine
    /// replacement; `None` for approvals and finishes, which disrupt nothing.
    pub fn disruption_reason(&self) -> Option<DisruptionReason> {
        match self {
            Self::StartDrain { .. } | Self::ApproveDisruption { .. } => {
                Some(DisruptionReason::Drift)
            }
            Self::ReplaceMachine { .. } => Some(DisruptionReason::RollingUpdate),
            Self::Approve { .. } | Self::Finish { .. } => None,
        }
    }
}

impl fmt::Display for UpdateCommand {
    // Pieces written as they are, without a format string to interpret (the simulator's
    // timeline formats one message per command).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [before, node, after] = self.pieces();
        f.write_str(before)?;
        f.write_str(node)?;
        f.write_str(after)
    }
}

impl UpdateCommand {
    /// The command as `Display` writes it, in three pieces of text (the last possibly
    /// empty): a message made without a format string to interpret.
    pub(crate) fn pieces(&self) -> [&str; 3] {
        let (before, node, after) = match self {
            Self::Approve { node } => ("approve update of node ", node, ""),
            Self::StartDrain { node } => ("drain node ", node, " before its disruption"),
            Self::ApproveDisruption { node, cordon } => (
                "approve disruption of node ",
                node,
                if *cordon { " (cordon first)" } else { "" },
            ),
            Self::ReplaceMachine { node } => ("replace the machine of node ", node, ""),
            Self::Finish { node, uncordon } => (
                "finish update of node ",
                node,
                if *uncordon { " and uncordon it" } else { "" },
            ),
        };
        [before, node, after]
    }
}

/// The planner's answer for one group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpdatePlan {
    /// Commands, in the order to apply them (finishes, disruption steps, approvals).
    pub commands: Vec<UpdateCommand>,
    /// Why nodes that want to move do not, for people (`node w-2 is not Ready`).
    pub blocked: Vec<String>,
}
