//! The static instances port: what the static instances executor
//! ([`crate::executor::static_instances`]) reads and writes to bootstrap and clean up static
//! machines (docs/deckhouse.md §2, docs/executors.md §5) — NodeGroups, Nodes, StaticInstances
//! and SSHCredentials, each command's status change, and the operations (bootstrap, cleanup)
//! that run on the machines. `nodemgr-k8s` implements it over the Kubernetes API and the
//! remote shell ([`super::remote_shell`]: SSH, host-key pinning, one script per machine stay in
//! the adapter); the executor's unit tests over an in-memory fake.
//!
//! # Contract
//! - Reads fail with [`ClusterError`]; a failed read makes the executor decide nothing.
//! - [`StaticInstanceApi::apply`] persists one [`StaticCommand`] as its doc says (phase,
//!   `machineRef`, `nodeRef`, the `Ready` condition, finalizer, skip-bootstrap annotation) and
//!   returns. For a [`StaticCommand::Bootstrap`] or [`StaticCommand::Cleanup`] it then *starts*
//!   the operation and returns without waiting; for a [`StaticCommand::MarkError`] it stops the
//!   operation still running on the instance. An `Err` means the command's status change was
//!   not persisted; the executor's next step decides again.
//! - Every operation started ends exactly once in [`StaticInstanceApi::take_ends`] — also one
//!   that could not start (no credentials, no script, machine busy), as a failure.

use async_trait::async_trait;

use crate::model::{Node, NodeGroup, SshCredentials, StaticInstance, Timestamp};
use crate::static_nodes::{Failure, Operation, StaticCommand, StaticSnapshot};

use super::cluster::ClusterError;

/// The end of an operation the port started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationEnd {
    /// The StaticInstance.
    pub instance: String,
    /// The group the operation was started for (empty when unknown).
    pub group: String,
    /// Which operation.
    pub operation: Operation,
    /// How it ended.
    pub outcome: Result<(), Failure>,
}

/// Static instances, their credentials and the operations on their machines.
#[async_trait]
pub trait StaticInstanceApi: Send + Sync {
    /// Every NodeGroup.
    async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError>;

    /// Every StaticInstance.
    async fn list_static_instances(&self) -> Result<Vec<StaticInstance>, ClusterError>;

    /// Every SSHCredentials.
    async fn list_ssh_credentials(&self) -> Result<Vec<SshCredentials>, ClusterError>;

    /// Every Node.
    async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError>;

    /// The ends of operations reported since the last call, each once. The port may record on
    /// `instances` (just read) what it persisted meanwhile about them — a pinned SSH host key —
    /// so that the operations started in this step see it.
    async fn take_ends(&self, instances: &mut [StaticInstance]) -> Vec<OperationEnd>;

    /// Carries out `command` (see the module's contract) with `snapshot` — the data it was
    /// planned from — for what it names (the instance, its group, its credentials).
    async fn apply(
        &self,
        command: &StaticCommand,
        snapshot: &StaticSnapshot<'_>,
        now: Timestamp,
    ) -> Result<(), ClusterError>;
}
