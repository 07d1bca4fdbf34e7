//! What every scaling policy decides on: the cluster's nodes, pods and PodDisruptionBudgets,
//! the CloudEphemeral groups with their resolved instance class and zones, machines ordered but
//! not registered yet, and nodes already on their way out.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Node, NodeGroup, NodeType, Pod, PodDisruptionBudget, keys};

use super::bounds::group_zones;
use super::class::{InstanceClass, NodeShape, class_of, node_shape};

/// A CloudEphemeral group as the scaling policies see it.
#[derive(Debug, Clone)]
pub struct ScalingGroup<'a> {
    /// The group.
    pub group: &'a NodeGroup,
    /// The instance class `classReference` points at; `None` when it is unknown (the group
    /// then cannot grow, and says so).
    pub class: Option<&'a InstanceClass>,
    /// The group's zones, sorted: `cloudInstances.zones`, or every zone of the cloud.
    pub zones: Vec<String>,
}

impl<'a> ScalingGroup<'a> {
    /// Resolves the class of `group` among `classes` and its zones against `cloud_zones`.
    pub fn new(group: &'a NodeGroup, classes: &'a [InstanceClass], cloud_zones: &[String]) -> Self {
        Self {
            group,
            class: class_of(group, classes),
            zones: group_zones(group, cloud_zones),
        }
    }

    /// The group's name.
    pub fn name(&self) -> &'a str {
        self.group.name()
    }

    /// `cloudInstances.priority` (0 when unset): higher groups are grown first.
    pub fn priority(&self) -> i64 {
        self.cloud().and_then(|c| c.priority).unwrap_or(0)
    }

    /// `cloudInstances.minPerZone`, negative values read as 0.
    pub fn min_per_zone(&self) -> u32 {
        clamp_count(self.cloud().and_then(|c| c.min_per_zone))
    }

    /// `cloudInstances.maxPerZone`, never below `minPerZone` (validation rejects max < min;
    /// the policies stay safe meanwhile).
    pub fn max_per_zone(&self) -> u32 {
        clamp_count(self.cloud().and_then(|c| c.max_per_zone)).max(self.min_per_zone())
    }

    /// `cloudInstances.maxSurgePerZone` (default 1).
    pub fn max_surge_per_zone(&self) -> u32 {
        clamp_count(Some(self.cloud().map_or(1, |c| c.max_surge_per_zone())))
    }

    /// `cloudInstances.maxUnavailablePerZone` (default 0).
    pub fn max_unavailable_per_zone(&self) -> u32 {
        clamp_count(Some(
            self.cloud().map_or(0, |c| c.max_unavailable_per_zone()),
        ))
    }

    /// The surge the policies use: `maxSurgePerZone`, except that a zone with both
    /// `maxSurgePerZone` and `maxUnavailablePerZone` at 0 could never replace a node, so it
    /// gets a surge of 1 (a MachineDeployment refuses 0/0 likewise).
    pub fn effective_surge(&self) -> u32 {
        let surge = self.max_surge_per_zone();
        if surge == 0 && self.max_unavailable_per_zone() == 0 {
            1
        } else {
            surge
        }
    }

    /// Whether the group keeps a fixed count (`minPerZone == maxPerZone`).
    pub fn is_fixed(&self) -> bool {
        self.min_per_zone() == self.max_per_zone()
    }

    /// The shape of the group's nodes, when the class is known.
    pub fn shape(&self) -> Option<NodeShape> {
        self.class.map(|c| node_shape(self.group, c))
    }

    /// The checksum new nodes carry (`None` when the class is unknown).
    pub fn class_checksum(&self) -> Option<String> {
        self.class.map(InstanceClass::checksum)
    }

    fn cloud(&self) -> Option<&'a crate::model::CloudInstances> {
        self.group.spec.cloud_instances.as_ref()
    }
}

fn clamp_count(v: Option<i64>) -> u32 {
    u32::try_from(v.unwrap_or(0).max(0)).unwrap_or(u32::MAX)
}

/// Machines of a group and zone that were ordered and have no Node yet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Upcoming {
    /// Group name.
    pub group: String,
    /// Zone.
    pub zone: String,
    /// How many.
    pub count: u32,
}

/// The cluster as the scaling policies see it.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot<'a> {
    /// Every node.
    pub nodes: &'a [Node],
    /// Every pod (bound and pending).
    pub pods: &'a [Pod],
    /// Every PodDisruptionBudget.
    pub pdbs: &'a [PodDisruptionBudget],
    /// The CloudEphemeral groups, in name order.
    pub groups: Vec<ScalingGroup<'a>>,
    /// Machines ordered and not registered yet.
    pub upcoming: Vec<Upcoming>,
    /// Nodes whose removal is under way (drain or machine deletion started by the executor).
    /// Nodes carrying the chaos victim annotation count as leaving too.
    pub leaving: BTreeSet<String>,
    /// How many nodes each group wants in each zone (`(group, zone)`), like a
    /// MachineDeployment's replicas; kept by the executor (scale-up raises it, scale-down
    /// lowers it). Missing entries default to the nodes there (see [`ClusterSnapshot::desired`]).
    pub desired: BTreeMap<(String, String), u32>,
}

impl<'a> ClusterSnapshot<'a> {
    /// A snapshot of `nodes`, `pods` and `pdbs` with every CloudEphemeral group of `groups`
    /// (class resolved among `classes`, zones against `cloud_zones`), nothing upcoming and
    /// nothing leaving.
    pub fn new(
        nodes: &'a [Node],
        pods: &'a [Pod],
        pdbs: &'a [PodDisruptionBudget],
        groups: &'a [NodeGroup],
        classes: &'a [InstanceClass],
        cloud_zones: &[String],
    ) -> Self {
        let mut scaling: Vec<ScalingGroup<'a>> = groups
            .iter()
            .filter(|g| {
                g.spec.node_type == Some(NodeType::CloudEphemeral)
                    && g.spec.cloud_instances.is_some()
            })
            .map(|g| ScalingGroup::new(g, classes, cloud_zones))
            .collect();
        scaling.sort_by(|a, b| a.name().cmp(b.name()));
        Self {
            nodes,
            pods,
            pdbs,
            groups: scaling,
            upcoming: Vec::new(),
            leaving: BTreeSet::new(),
            desired: BTreeMap::new(),
        }
    }

    /// Sets the machines ordered and not registered yet.
    pub fn with_upcoming(mut self, upcoming: Vec<Upcoming>) -> Self {
        self.upcoming = upcoming;
        self
    }

    /// Sets the nodes whose removal is under way.
    pub fn with_leaving(mut self, leaving: BTreeSet<String>) -> Self {
        self.leaving = leaving;
        self
    }

    /// Sets the desired count per `(group, zone)`.
    pub fn with_desired(mut self, desired: BTreeMap<(String, String), u32>) -> Self {
        self.desired = desired;
        self
    }

    /// The count `group` wants in `zone`: the recorded desired count, or `present` (the nodes
    /// not leaving plus upcoming ones) when none is recorded; clamped to
    /// `minPerZone..=maxPerZone` (a fixed group always wants its count).
    pub fn desired(&self, group: &ScalingGroup<'_>, zone: &str, present: u32) -> u32 {
        self.desired
            .get(&(group.name().to_owned(), zone.to_owned()))
            .copied()
            .unwrap_or(present)
            .clamp(group.min_per_zone(), group.max_per_zone())
    }

    /// The scaling group named `name`.
    pub fn group(&self, name: &str) -> Option<&ScalingGroup<'a>> {
        self.groups.iter().find(|g| g.name() == name)
    }

    /// Whether `node` is on its way out: listed in `leaving` or marked as the chaos monkey's
    /// victim.
    pub fn is_leaving(&self, node: &Node) -> bool {
        self.leaving.contains(&node.name)
            || node.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM)
    }

    /// Upcoming machines of `group` in `zone`.
    pub fn upcoming_in(&self, group: &str, zone: &str) -> u32 {
        self.upcoming
            .iter()
            .filter(|u| u.group == group && u.zone == zone)
            .map(|u| u.count)
            .sum()
    }

    /// Pods waiting for a node: not bound, not finished.
    pub fn pending_pods(&self) -> impl Iterator<Item = (usize, &'a Pod)> + 'a {
        self.pods
            .iter()
            .enumerate()
            .filter(|(_, p)| p.node_name.is_none() && !p.is_terminal())
    }
}
