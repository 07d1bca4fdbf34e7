//! The executors: one per policy family, each carrying its policies' decisions out through the
//! ports ([`crate::ports`]) so that the simulator (`nodemgr-sim`) and node-manager
//! (`nodemgr-k8s`) run the same code (docs/executors.md).
//!
//! | executor | family | ports | decides with |
//! |---|---|---|---|
//! | [`UpdateExecutor`] ([`update`]) | updates and drains | cluster | [`crate::update`], [`crate::drain`] |
//! | [`ScalingExecutor`] ([`scaling`]) | machines, scaling, standby, chaos | cluster, machines, cloud | [`crate::scaling`], [`crate::machines`] |
//! | [`FencingExecutor`] ([`fencing`]) | fencing of silent nodes | cluster (with [`crate::ports::NodeHealthRead`]) | [`crate::fencing`] |
//! | [`StaticInstancesExecutor`] ([`static_instances`]) | bootstrap and cleanup of static machines | static instances ([`crate::ports::StaticInstanceApi`]) | [`crate::static_nodes`] |
//!
//! Every executor has the same driver contract: `step(ports…, now)` reads through the ports,
//! plans with the pure policies at `now`, applies the decisions through the ports, and returns
//! what it did as values (a report of events and errors, for logs, metrics and the simulator's
//! timeline); `next_deadline()` says when a step next has something to do without new input.
//! A driver calls `step` every period and at that deadline. Executors never read a clock and
//! keep only what they cannot read back from the cluster (drains in progress, backoffs,
//! desired counts); a new executor rebuilds the rest from the cluster on its first step.
//!
//! The update executor's items stay at this module's root (`nodemgr_core::executor::UpdateExecutor`).

pub mod fencing;
pub(crate) mod node_table;
pub mod scaling;
pub mod static_instances;
pub mod update;

pub use fencing::{FencingEvent, FencingExecutor, FencingReport};
pub use scaling::{ScalingEvent, ScalingExecutor, ScalingReport, ScalingSettings};
pub use static_instances::{StaticInstancesExecutor, StaticReport};
pub use update::{
    ActionError, ActiveDrain, ExecutorEvent, MAX_REPLANS, StepReport, UpdateExecutor,
    command_patch, update_annotation_keys,
};
