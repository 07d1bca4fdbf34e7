//! The drains an update plan starts: a [`Drain`] for every [`UpdateCommand::StartDrain`], from
//! a scan of all pods ([`drains_for`]) or from an index of pods by node
//! ([`drains_for_indexed`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasherDefault;

use super::UpdateCommand;
use crate::drain::{Drain, DrainConfig};
use crate::model::{Node, NodeGroup, Pod, Timestamp};

/// A cheap hasher for short node names in the per-pod lookups of [`drains_for`] (no attacker
/// controls the keys; SipHash's setup cost dominated the scan).
type FastHash = BuildHasherDefault<crate::hash::Fnv>;

/// Creates the [`Drain`]s for every [`UpdateCommand::StartDrain`] in `commands`, with each node's
/// group's [`DrainConfig`]; commands for nodes not in `nodes` are skipped. Scans all `pods` once;
/// callers that keep pods indexed by node use [`drains_for_indexed`].
pub fn drains_for(
    commands: &[UpdateCommand],
    groups: &[NodeGroup],
    nodes: &[Node],
    pods: &[Pod],
    now: Timestamp,
) -> Vec<Drain> {
    let draining: HashSet<&str, FastHash> = commands
        .iter()
        .filter(|c| matches!(c, UpdateCommand::StartDrain { .. }))
        .map(UpdateCommand::node)
        .collect();
    if draining.is_empty() {
        return Vec::new();
    }
    let mut pods_by_node: HashMap<&str, Vec<&Pod>, FastHash> = HashMap::default();
    for pod in pods {
        if let Some(node) = pod.node_name.as_deref()
            && draining.contains(node)
        {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    drains_for_indexed(commands, groups, nodes, now, |node| {
        pods_by_node.remove(node).unwrap_or_default()
    })
}

/// As [`drains_for`], asking `pods_on(node)` for the pods bound to each node to drain (an
/// informer index, for instance) instead of scanning every pod.
pub fn drains_for_indexed<'p, I>(
    commands: &[UpdateCommand],
    groups: &[NodeGroup],
    nodes: &[Node],
    now: Timestamp,
    mut pods_on: impl FnMut(&str) -> I,
) -> Vec<Drain>
where
    I: IntoIterator<Item = &'p Pod>,
{
    let draining: BTreeSet<&str> = commands
        .iter()
        .filter(|c| matches!(c, UpdateCommand::StartDrain { .. }))
        .map(UpdateCommand::node)
        .collect();
    if draining.is_empty() {
        return Vec::new();
    }
    let configs: BTreeMap<&str, DrainConfig> = groups
        .iter()
        .map(|g| (g.name(), DrainConfig::for_group(g)))
        .collect();
    nodes
        .iter()
        .filter(|n| draining.contains(n.name.as_str()))
        .map(|node| {
            let config = node
                .group()
                .and_then(|g| configs.get(g).copied())
                .unwrap_or_default();
            Drain::from_pods(node, pods_on(&node.name), config, now)
        })
        .collect()
}
