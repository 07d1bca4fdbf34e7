//! What the node agent decides: actions drained with [`super::Agent::poll_action`] for the
//! driver to carry out.

use std::collections::BTreeMap;
use std::fmt;

use crate::bashible::Step;

use super::state::Progress;

/// A patch of the agent's own Node's annotations, guarded by a resourceVersion: the driver
/// sends it as a merge patch carrying `metadata.resourceVersion` (or an update of the object
/// read), so that the API refuses it with 409 when the Node changed since it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePatch {
    /// The resourceVersion the patch is based on.
    pub resource_version: String,
    /// Annotations to set (key → value).
    pub set: BTreeMap<String, String>,
    /// Annotations to remove.
    pub remove: Vec<String>,
}

impl NodePatch {
    /// The JSON merge patch body (`{"metadata":{"resourceVersion":…,"annotations":{…}}}`;
    /// removed keys are `null`).
    pub fn merge_patch(&self) -> serde_json::Value {
        let mut annotations = serde_json::Map::new();
        for (k, v) in &self.set {
            annotations.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        for k in &self.remove {
            annotations.insert(k.clone(), serde_json::Value::Null);
        }
        serde_json::json!({
            "metadata": {
                "resourceVersion": self.resource_version,
                "annotations": annotations,
            }
        })
    }

    /// Applies the patch to a copy of annotations (what the API does when it accepts it).
    pub fn apply_to(&self, annotations: &mut BTreeMap<String, String>) {
        for k in &self.remove {
            annotations.remove(k);
        }
        for (k, v) in &self.set {
            annotations.insert(k.clone(), v.clone());
        }
    }
}

/// A Kubernetes Event about the node (`events.k8s.io/v1`, type Warning, regarding the Node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEvent {
    /// Object name (`bashible-error-<host>-<step>`, as Deckhouse names it, reduced to the
    /// characters an object name may hold).
    pub name: String,
    /// Reason (`BashibleStepFailed`, `BashibleBundleRejected`).
    pub reason: String,
    /// The note: what failed and, for a step, the end of its standard error.
    pub note: String,
}

/// One decision of the agent. Requests (`FetchBundle`, `ReadNode`, `PatchNode`, `RunStep`)
/// must each be answered with one [`super::AgentInput`]; the other actions are carried out
/// in order, before the driver answers the request that follows them. A driver that cannot
/// carry out a state write (a full disk) stops and later rebuilds the agent from the files
/// on disk: the order of the writes keeps that safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentAction {
    /// Request: fetch the node's desired bundle; answer [`super::AgentInput::Bundle`].
    FetchBundle,
    /// Request: read the agent's Node; answer [`super::AgentInput::Node`].
    ReadNode,
    /// Request: patch the Node's annotations with a resourceVersion precondition; answer
    /// [`super::AgentInput::Patched`].
    PatchNode(NodePatch),
    /// Request: run the step `name` of the stored bundle (`bundle_steps/<name>`); answer
    /// [`super::AgentInput::StepFinished`].
    RunStep {
        /// The step's name.
        name: String,
    },
    /// Replace the content of `bundle_steps/` with these steps (the bundle `checksum`).
    StoreBundle {
        /// The bundle's checksum.
        checksum: String,
        /// Its steps, in the order they run.
        steps: Vec<Step>,
    },
    /// Write the progress record (`nodemgr_progress.json`), atomically.
    WriteProgress(Progress),
    /// Write `configuration_checksum` with this content, atomically.
    WriteChecksumFile(String),
    /// Remove `configuration_checksum`.
    RemoveChecksumFile,
    /// Remove the `first_run` marker.
    RemoveFirstRun,
    /// Record a Warning Event about the node (best effort: a failure is logged, not retried).
    EmitEvent(AgentEvent),
}

impl AgentAction {
    /// Whether the action is a request that must be answered with an input.
    pub fn is_request(&self) -> bool {
        matches!(
            self,
            Self::FetchBundle | Self::ReadNode | Self::PatchNode(_) | Self::RunStep { .. }
        )
    }
}

impl fmt::Display for AgentAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FetchBundle => f.write_str("fetch the bundle"),
            Self::ReadNode => f.write_str("read the Node"),
            Self::PatchNode(p) => {
                write!(f, "patch the Node (resourceVersion {})", p.resource_version)?;
                for (k, v) in &p.set {
                    write!(f, " +{k}={v}")?;
                }
                for k in &p.remove {
                    write!(f, " -{k}")?;
                }
                Ok(())
            }
            Self::RunStep { name } => write!(f, "run step {name}"),
            Self::StoreBundle { checksum, steps } => {
                write!(f, "store bundle {checksum} ({} steps)", steps.len())
            }
            Self::WriteProgress(p) => write!(
                f,
                "write progress ({} steps of {} done)",
                p.done.len(),
                p.bundle.as_deref().unwrap_or("-")
            ),
            Self::WriteChecksumFile(c) => write!(f, "write configuration_checksum {c}"),
            Self::RemoveChecksumFile => f.write_str("remove configuration_checksum"),
            Self::RemoveFirstRun => f.write_str("remove first_run"),
            Self::EmitEvent(e) => write!(f, "event {} {}: {}", e.reason, e.name, e.note),
        }
    }
}
