//! The decisions scaling policies hand to the executor, with the reason each was taken.
//!
//! Removal always goes through a drain: the executor starts a [`crate::drain::Drain`] with
//! [`crate::drain::DrainConfig::for_group`] (or [`start_removal`]), and deletes the machine once
//! the drain has an outcome. Until the node is gone the executor lists it in
//! [`super::ClusterSnapshot::leaving`].

use std::fmt;

use crate::disruption::DisruptionReason;
use crate::drain::{Drain, DrainConfig};
use crate::model::{Node, NodeGroup, Pod, Timestamp};

/// Why a node is created or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The zone has fewer healthy nodes than the group wants there (`minPerZone`, a fixed
    /// count, or the desired count).
    BelowDesired {
        /// Healthy and upcoming nodes.
        have: u32,
        /// Wanted.
        want: u32,
    },
    /// A node has been failed (not Ready) for too long and its replacement is in place (or no
    /// replacement fits under the surge limit).
    Failed,
    /// The zone has more nodes than `maxPerZone`.
    AboveMax {
        /// Nodes counted.
        have: u32,
        /// `maxPerZone`.
        max: u32,
    },
    /// Pending pods need room (`pods` of them go to the new nodes).
    PendingPods {
        /// How many pending pods the new nodes take.
        pods: usize,
    },
    /// The node has been underutilized long enough and its pods fit elsewhere.
    Underutilized {
        /// Requested utilization (max of cpu and memory), in percent.
        utilization_percent: u32,
        /// Pods that move to other nodes.
        pods_moved: usize,
    },
    /// A disruption method ([`crate::disruption::METHODS`]) took the healthy node away: the
    /// chaos monkey, an instance class change, …
    Disruption(DisruptionReason),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BelowDesired { have, want } => {
                write!(
                    f,
                    "zone has {have} healthy or upcoming node(s), wants {want}"
                )
            }
            Self::Failed => f.write_str("node failed (not Ready past the failure timeout)"),
            Self::AboveMax { have, max } => write!(f, "zone has {have} node(s), maxPerZone {max}"),
            Self::PendingPods { pods } => write!(f, "{pods} pending pod(s) need room"),
            Self::Underutilized {
                utilization_percent,
                pods_moved,
            } => write!(
                f,
                "underutilized ({utilization_percent}% requested), {pods_moved} pod(s) fit elsewhere"
            ),
            Self::Disruption(reason) => reason.fmt(f),
        }
    }
}

/// A decision for the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScalingCommand {
    /// Order `count` machines of `group` in `zone` (they register as
    /// [`super::template_node`] describes).
    CreateNodes {
        /// Group.
        group: String,
        /// Zone.
        zone: String,
        /// How many.
        count: u32,
        /// Why.
        why: Why,
    },
    /// Drain `node` ([`start_removal`]) and delete its machine once drained.
    RemoveNode {
        /// The node.
        node: String,
        /// Its group.
        group: String,
        /// Its zone.
        zone: String,
        /// Why.
        why: Why,
    },
}

impl ScalingCommand {
    /// The group the command is about.
    pub fn group(&self) -> &str {
        match self {
            Self::CreateNodes { group, .. } | Self::RemoveNode { group, .. } => group,
        }
    }

    /// The zone the command is about.
    pub fn zone(&self) -> &str {
        match self {
            Self::CreateNodes { zone, .. } | Self::RemoveNode { zone, .. } => zone,
        }
    }

    /// Nodes this command adds to its zone (negative for a removal).
    pub fn delta(&self) -> i64 {
        match self {
            Self::CreateNodes { count, .. } => i64::from(*count),
            Self::RemoveNode { .. } => -1,
        }
    }
}

impl fmt::Display for ScalingCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CreateNodes {
                group,
                zone,
                count,
                why,
            } => write!(f, "create {count} node(s) of {group} in {zone}: {why}"),
            Self::RemoveNode {
                node,
                group,
                zone,
                why,
            } => write!(
                f,
                "drain and delete node {node} of {group} in {zone}: {why}"
            ),
        }
    }
}

/// Starts the drain that precedes deleting `node` of `group`: the group's drain configuration,
/// the node's pods.
pub fn start_removal<'a>(
    node: &Node,
    group: &NodeGroup,
    pods: impl IntoIterator<Item = &'a Pod>,
    now: Timestamp,
) -> Drain {
    Drain::from_pods(node, pods, DrainConfig::for_group(group), now)
}
