//! What the node agent observes: the answers to its requests, handed in with
//! [`super::Agent::handle_input`].

use std::collections::BTreeMap;

use crate::bashible::Step;
use crate::ports::Cause;

/// The bundle the node should run, as fetched from the bundle server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredBundle {
    /// The checksum the server published ([`crate::bashible::Bundle::checksum`]); the agent
    /// recomputes it from `steps` and refuses a bundle that does not match.
    pub checksum: String,
    /// The steps, in any order (they run in lexical order of their names).
    pub steps: Vec<Step>,
    /// The node's group replaces machines instead of disrupting them
    /// (`disruptions.approvalMode: RollingUpdate`): the agent asks with
    /// `update.node.deckhouse.io/rolling-update` instead of `disruption-required`. Not part of
    /// the checksum: the approval mode changes nothing on a node.
    pub rolling_update: bool,
}

impl DesiredBundle {
    /// A bundle whose checksum is computed from its steps (for simulators and tests; a real
    /// bundle carries the checksum the server published).
    pub fn of_steps(steps: Vec<Step>, rolling_update: bool) -> Self {
        Self {
            checksum: crate::bashible::configuration_checksum(&steps),
            steps,
            rolling_update,
        }
    }
}

/// The agent's own Node as read from the API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// `metadata.resourceVersion`: the precondition of the agent's next patch.
    pub resource_version: String,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
}

/// How a guarded patch of the Node ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOutcome {
    /// Written; the Node's new resourceVersion.
    Applied {
        /// `metadata.resourceVersion` after the patch.
        resource_version: String,
    },
    /// 409: the Node changed since the agent read it. The agent re-reads it and tries again.
    Conflict,
    /// 404: the Node is gone.
    NotFound,
    /// Any other failure (network, 5xx, 403…), with the driver's error; the agent retries
    /// after a backoff.
    Failed(Cause),
}

/// How a step's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOutcome {
    /// The step (its name, as in [`super::AgentAction::RunStep`]).
    pub step: String,
    /// Exit status; `None` when the step was killed (a timeout) or could not be started.
    pub exit_code: Option<i32>,
    /// Its standard error, or at least its end: the agent keeps the last
    /// [`super::STDERR_TAIL_BYTES`] bytes for the Event.
    pub stderr: String,
}

impl StepOutcome {
    /// Whether the step succeeded (exit status 0).
    pub fn succeeded(&self) -> bool {
        self.exit_code == Some(0)
    }
}

/// One observation: the answer to the agent's outstanding request. Each request action
/// ([`super::AgentAction::FetchBundle`], [`super::AgentAction::ReadNode`],
/// [`super::AgentAction::PatchNode`], [`super::AgentAction::RunStep`]) is answered by exactly
/// one input of the matching kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentInput {
    /// Answer to `FetchBundle`: the bundle, or the driver's error saying why it could not be
    /// fetched.
    Bundle(Result<DesiredBundle, Cause>),
    /// Answer to `ReadNode`: the Node, `Ok(None)` when it does not exist, or the driver's error
    /// saying why it could not be read.
    Node(Result<Option<NodeView>, Cause>),
    /// Answer to `PatchNode`.
    Patched(PatchOutcome),
    /// Answer to `RunStep`.
    StepFinished(StepOutcome),
}
