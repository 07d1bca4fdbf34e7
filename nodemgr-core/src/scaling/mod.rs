//! Group sizing and autoscaling of CloudEphemeral groups (docs/deckhouse.md §1.1 `cloudInstances`,
//! §7 chaos monkey, §8 autoscaler, standby, priority).
//!
//! Every policy is a pure function of a [`ClusterSnapshot`] (plus `now`, and the policy's own
//! small state where it needs memory) returning a decision with reasons:
//!
//! | file | decides |
//! |---|---|
//! | [`bounds`] | per-zone min/max, fixed counts, failed-node replacement |
//! | [`placement`] | whether a pod fits a node; the fast first-fit engine the others use |
//! | `topology` | topology spread and pod (anti-)affinity as incremental counters (docs/scheduling.md §2) |
//! | [`reference`](mod@reference) | the slow reading of every scheduling rule, and replays that check plans against it |
//! | [`scale_up`] | which new nodes the pending pods need, by priority, least waste, balanced zones |
//! | [`scale_down`] | which underutilized nodes to drain and delete |
//! | [`standby`] | how many warm standby nodes, and the holder pods that keep them |
//! | [`surge`] | replacing nodes of an outdated instance class, `maxSurgePerZone` at a time |
//! | [`chaos`] | the chaos monkey's next victim |
//!
//! Instance classes are an input ([`InstanceClass`]): nodemgr does not model provider classes,
//! only the machine size scaling needs. Removals always go through [`crate::drain`]
//! ([`start_removal`]).

mod bound_tree;
pub mod bounds;
pub mod chaos;
pub mod class;
pub mod command;
pub mod config;
pub mod placement;
pub mod reference;
pub mod scale_down;
pub mod scale_up;
pub mod snapshot;
pub mod standby;
pub mod surge;
#[cfg(test)]
mod testkit;
mod topology;

pub use bounds::{BoundsDecision, ZoneState, group_zones, plan_bounds, zone_states};
pub use chaos::{ChaosDecision, ChaosState, plan_chaos};
pub use class::{InstanceClass, NodeShape, class_of, node_shape, template_node};
pub use command::{ScalingCommand, Why, start_removal};
pub use config::ScalingConfig;
pub use placement::{Misfit, check_fit};
pub use scale_down::{ScaleDownDecision, ScaleDownState, plan_scale_down};
pub use scale_up::{ScaleUpPlan, group_templates, plan_scale_up};
pub use snapshot::{ClusterSnapshot, ScalingGroup, Upcoming};
pub use standby::{StandbyPlan, plan_standby, standby_count};
pub use surge::{SurgeDecision, plan_surge};
