//! Re-provisioning after an instance class change (issue 4 item 5; facts §10: a
//! `classReference` change, or a change of the class itself, replaces every node,
//! `maxSurgePerZone` at a time, new before old).
//!
//! Nodes carry the checksum of the class they were made from
//! (`node-manager.deckhouse.io/instance-class-checksum`); a node whose checksum differs from its
//! group's current class is **outdated** (nodes without the annotation were not made by nodemgr
//! and are left alone).
//!
//! The rollout is split between two policies that run on the same snapshot:
//! * [`super::bounds`] orders machines: it counts only healthy nodes of the *current* class, so
//!   outdated nodes are replaced like missing ones, and never lets the zone's machines (leaving
//!   nodes included) exceed the desired count + `maxSurgePerZone`;
//! * this module drains outdated nodes: an outdated node that is Ready is drained only while the
//!   zone's Ready, not-leaving nodes stay at or above desired − `maxUnavailablePerZone`. With the
//!   default `maxUnavailablePerZone: 0` an old node goes only once a new one is Ready: new before
//!   old. Outdated nodes that are not Ready cost no availability and are drained at once (failed
//!   ones are left to `bounds`).
//!
//! `maxSurgePerZone: 0` with `maxUnavailablePerZone: 0` could never progress; like a
//! MachineDeployment, nodemgr treats it as a surge of 1 (see
//! [`super::ScalingGroup::effective_surge`]).
//!
//! The desired count must be recorded by the executor ([`ClusterSnapshot::desired`]) while a
//! rollout runs: surge nodes are indistinguishable from wanted ones in a bare snapshot. A zone
//! rolling without one is reported in the notes.
//!
//! # Guarantees (properties)
//! * Machines of a zone never exceed desired + surge through this rollout.
//! * Ready, not-leaving nodes never drop below desired − `maxUnavailablePerZone` because of a
//!   drain decided here.
//! * With an executor that registers ordered machines and finishes drains, every zone converges
//!   to exactly its desired count of current-class nodes.

use crate::model::{Node, Timestamp};

use super::bounds::zone_states;
use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::snapshot::ClusterSnapshot;

/// What the rollout decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SurgeDecision {
    /// Outdated nodes to drain and delete.
    pub commands: Vec<ScalingCommand>,
    /// Zones still rolling: `(group, zone, outdated nodes left)`.
    pub rolling: Vec<(String, String, u32)>,
    /// Why nothing more moves.
    pub notes: Vec<String>,
}

/// Decides which outdated nodes to drain now (see the module docs).
pub fn plan_surge(
    snapshot: &ClusterSnapshot<'_>,
    config: &ScalingConfig,
    now: Timestamp,
) -> SurgeDecision {
    let mut decision = SurgeDecision::default();
    let states = zone_states(snapshot, config, now);
    for group in &snapshot.groups {
        let name = group.name();
        for z in states.get(name).into_iter().flatten() {
            if z.outdated.is_empty() || !z.in_group_zones {
                continue;
            }
            decision.rolling.push((
                name.to_owned(),
                z.zone.clone(),
                u32::try_from(z.outdated.len()).unwrap_or(u32::MAX),
            ));
            if !snapshot
                .desired
                .contains_key(&(name.to_owned(), z.zone.clone()))
            {
                decision.notes.push(format!(
                    "{name}/{}: class rollout without a recorded desired count; assuming {}",
                    z.zone, z.desired
                ));
            }
            let failed = |n: &Node| z.failed.iter().any(|f| std::ptr::eq(*f, n));
            let mut not_ready: Vec<&Node> = z
                .outdated
                .iter()
                .copied()
                .filter(|n| !n.ready && !failed(n))
                .collect();
            not_ready.sort_by(|a, b| a.name.cmp(&b.name));
            for n in not_ready {
                decision.commands.push(remove(name, &z.zone, n));
            }
            let floor = z.desired.saturating_sub(group.max_unavailable_per_zone());
            let available = z.ready();
            let allowed = available.saturating_sub(floor) as usize;
            let mut ready: Vec<&Node> = z.outdated.iter().copied().filter(|n| n.ready).collect();
            ready.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.name.cmp(&b.name)));
            let take = allowed.min(ready.len());
            for n in &ready[..take] {
                decision.commands.push(remove(name, &z.zone, n));
            }
            if take < ready.len() {
                decision.notes.push(format!(
                    "{name}/{}: {} outdated node(s) wait for new ones to be Ready ({available} Ready, at least {floor} must stay)",
                    z.zone,
                    ready.len() - take
                ));
            }
        }
    }
    decision
}

fn remove(group: &str, zone: &str, node: &Node) -> ScalingCommand {
    ScalingCommand::RemoveNode {
        node: node.name.clone(),
        group: group.to_owned(),
        zone: zone.to_owned(),
        why: Why::ClassChanged,
    }
}
