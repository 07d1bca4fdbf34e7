//! What the node agent observes: the answers to its requests, handed in with
//! [`super::Agent::handle_input`].

use crate::model::StringMap;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock, Weak};

use crate::bashible::{Step, configuration_checksum};
use crate::ports::Cause;

use super::machine::Verified;

/// A bundle's steps, shared: cloning it shares the steps, and the checksum they hash to
/// ([`configuration_checksum`], which the agent computes to verify a bundle) is computed at
/// most once for all the clones. A driver that hands the same steps to many agents (a
/// simulator, a test fleet: one bundle per group) shares it, so that every agent verifies the
/// bundle without hashing it again; a driver that builds the steps from what it fetched makes
/// a new one, hashed again. The steps cannot be changed behind the memo: [`Self::make_mut`]
/// forgets it.
#[derive(Clone, Default)]
pub struct BundleSteps(Arc<StepsInner>);

#[derive(Clone, Default)]
struct StepsInner {
    steps: Vec<Step>,
    /// `configuration_checksum(&steps)`, once computed.
    computed: OnceLock<String>,
    /// The first bundle of these very steps an agent verified ([`BundleSteps::verified_as`]),
    /// while an agent holds it.
    verified: OnceLock<Weak<Verified>>,
}

impl BundleSteps {
    /// The steps, in the order given (the checksum depends on it).
    pub fn new(steps: Vec<Step>) -> Self {
        Self(Arc::new(StepsInner {
            steps,
            computed: OnceLock::new(),
            verified: OnceLock::new(),
        }))
    }

    /// The bundle of these steps published as `checksum` (`rolling_update` as in
    /// [`DesiredBundle`]), as an agent verified it already, when one did and still holds it:
    /// verifying it again would make an equal one.
    pub(super) fn verified_as(
        &self,
        checksum: &str,
        rolling_update: bool,
    ) -> Option<Arc<Verified>> {
        let verified = self.0.verified.get()?.upgrade()?;
        (verified.steps.ptr_eq(self)
            && verified.checksum == checksum
            && verified.rolling_update == rolling_update)
            .then_some(verified)
    }

    /// Keeps `verified` for [`BundleSteps::verified_as`] when it is a bundle of these very
    /// steps (and none was kept before).
    pub(super) fn remember_verified(&self, verified: &Arc<Verified>) {
        if verified.steps.ptr_eq(self) {
            // Kept once: a later bundle of the same steps is the same or is verified in full.
            let _ = self.0.verified.set(Arc::downgrade(verified));
        }
    }

    /// The checksum the steps hash to ([`configuration_checksum`]), computed on the first
    /// call for this value and all its clones.
    pub fn computed_checksum(&self) -> &str {
        self.0
            .computed
            .get_or_init(|| configuration_checksum(&self.0.steps))
    }

    /// Whether `self` and `other` are clones of one value (then they are equal).
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The steps, to edit (copied first when shared; the computed checksum is forgotten).
    pub fn make_mut(&mut self) -> &mut Vec<Step> {
        let inner = Arc::make_mut(&mut self.0);
        inner.computed = OnceLock::new();
        inner.verified = OnceLock::new();
        &mut inner.steps
    }

    /// The steps, owned (a copy when shared).
    pub fn into_vec(self) -> Vec<Step> {
        match Arc::try_unwrap(self.0) {
            Ok(inner) => inner.steps,
            Err(shared) => shared.steps.clone(),
        }
    }
}

impl Deref for BundleSteps {
    type Target = [Step];

    fn deref(&self) -> &[Step] {
        &self.0.steps
    }
}

impl From<Vec<Step>> for BundleSteps {
    fn from(steps: Vec<Step>) -> Self {
        Self::new(steps)
    }
}

impl PartialEq for BundleSteps {
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || self.0.steps == other.0.steps
    }
}

impl Eq for BundleSteps {}

impl fmt::Debug for BundleSteps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.steps.iter()).finish()
    }
}

/// The bundle the node should run, as fetched from the bundle server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredBundle {
    /// The checksum the server published ([`crate::bashible::Bundle::checksum`]); the agent
    /// recomputes it from `steps` and refuses a bundle that does not match.
    pub checksum: String,
    /// The steps, in any order (they run in lexical order of their names).
    pub steps: BundleSteps,
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
        let steps = BundleSteps::new(steps);
        Self {
            checksum: steps.computed_checksum().to_owned(),
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
    pub annotations: StringMap,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_steps_and_their_hash_and_an_edit_forgets_it() {
        let steps = BundleSteps::new(vec![Step::new("010_a.sh", "true")]);
        let expected = configuration_checksum(&steps);
        let clone = steps.clone();
        assert!(clone.ptr_eq(&steps));
        assert_eq!(clone.computed_checksum(), expected);
        assert!(std::ptr::eq(
            clone.computed_checksum(),
            steps.computed_checksum()
        ));
        let mut edited = clone.clone();
        if let Some(s) = edited.make_mut().first_mut() {
            s.script.push_str("; echo altered");
        }
        assert!(!edited.ptr_eq(&steps));
        assert_ne!(edited, steps);
        assert_eq!(edited.computed_checksum(), configuration_checksum(&edited));
        assert_ne!(edited.computed_checksum(), expected);
        // Equal steps that are not clones are equal.
        assert_eq!(BundleSteps::new(vec![Step::new("010_a.sh", "true")]), steps);
        assert_eq!(steps.into_vec().len(), 1);
    }
}
