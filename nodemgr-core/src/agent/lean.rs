//! The agent's actions lent instead of copied ([`super::Agent::poll_lean_action`]): for a
//! driver that keeps the agent's Node and state files itself (a simulator running thousands
//! of agents) and needs neither a copy of the progress record at every write nor a patch
//! spelled out as strings. Each lean action stands for exactly the [`AgentAction`]
//! [`super::Agent::poll_action`] would have returned ([`LeanAction::into_action`]); a driver
//! carries it out in the same way and at the same point.

use std::sync::Arc;

use crate::bashible::Step;

use super::action::{AgentAction, NodePatch};
use super::machine::{OwnPatch, Verified};
use super::state::Progress;

/// One decision of the agent, as [`super::Agent::poll_lean_action`] hands it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeanAction<'a> {
    /// Any action not lent below, built.
    Action(AgentAction),
    /// [`AgentAction::FetchBundle`] (a lean poll never hands it out as
    /// [`LeanAction::Action`]).
    FetchBundle,
    /// [`AgentAction::ReadNode`] (a lean poll never hands it out as [`LeanAction::Action`]).
    ReadNode,
    /// [`AgentAction::PatchNode`]: the patch as the changes it makes.
    PatchNode(PatchRequest<'a>),
    /// [`AgentAction::StoreBundle`] of these steps.
    StoreBundle(StoredBundle),
    /// [`AgentAction::WriteProgress`] of this record (the agent's own,
    /// [`super::Agent::files`]).
    WriteProgress(&'a Progress),
}

impl LeanAction<'_> {
    /// The action [`super::Agent::poll_action`] would have returned, built.
    pub fn into_action(self) -> AgentAction {
        match self {
            Self::Action(action) => action,
            Self::FetchBundle => AgentAction::FetchBundle,
            Self::ReadNode => AgentAction::ReadNode,
            Self::PatchNode(patch) => AgentAction::PatchNode(patch.to_node_patch()),
            Self::StoreBundle(bundle) => AgentAction::StoreBundle {
                checksum: bundle.checksum().to_owned(),
                steps: bundle.steps().to_vec(),
            },
            Self::WriteProgress(progress) => AgentAction::WriteProgress(progress.clone()),
        }
    }
}

/// A guarded patch of the agent's Node ([`NodePatch`]) as the agent decided it: the
/// resourceVersion it is based on and the annotations it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRequest<'a> {
    resource_version: &'a str,
    patch: OwnPatch,
}

impl<'a> PatchRequest<'a> {
    pub(super) fn new(resource_version: &'a str, patch: OwnPatch) -> Self {
        Self {
            resource_version,
            patch,
        }
    }

    /// The resourceVersion the patch is based on ([`NodePatch::resource_version`]).
    pub fn resource_version(&self) -> &'a str {
        self.resource_version
    }

    /// The annotations the patch changes, in the order [`NodePatch::apply_to`] applies them
    /// (removals first, then the set keys in key order): key → the new value (`None`:
    /// removed).
    pub fn changes(&self) -> impl Iterator<Item = (&'static str, Option<&str>)> {
        self.patch.changes().map(|(key, value)| (key.key(), value))
    }

    /// Whether the patch sets the annotation `key` ([`NodePatch::set`] holds it).
    pub fn sets(&self, key: &str) -> bool {
        self.changes().any(|(k, v)| k == key && v.is_some())
    }

    /// The patch, built ([`AgentAction::PatchNode`]'s).
    pub fn to_node_patch(&self) -> NodePatch {
        self.patch.node_patch(self.resource_version)
    }
}

/// The bundle [`AgentAction::StoreBundle`] stores, shared with the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBundle(pub(super) Arc<Verified>);

impl StoredBundle {
    /// The bundle's checksum.
    pub fn checksum(&self) -> &str {
        &self.0.checksum
    }

    /// Its steps, in the order they run.
    pub fn steps(&self) -> &[Step] {
        &self.0.steps
    }
}
