//! Re-provisioning after an instance class change (docs/deckhouse.md §10: a
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

use crate::disruption::DisruptionReason;
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
        why: Why::Disruption(DisruptionReason::ClassChange),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, keys};
    use crate::scaling::bounds::plan_bounds;
    use crate::scaling::testkit::scaling_group;
    use crate::scaling::{InstanceClass, ScalingGroup};
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn node(name: &str, checksum: &str, ready: bool, created: i64) -> Node {
        Node {
            name: name.into(),
            labels: [
                (keys::LABEL_NODE_GROUP.to_string(), "g".to_string()),
                (keys::LABEL_TOPOLOGY_ZONE.to_string(), "a".to_string()),
            ]
            .into(),
            annotations: [(
                keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.to_string(),
                checksum.to_string(),
            )]
            .into(),
            ready,
            created: Some(Timestamp::from_secs(created)),
            last_heartbeat: Some(Timestamp::from_secs(created)),
            ..Node::default()
        }
    }

    /// A zone rolling from class `small` to `medium` under bounds + surge, with an executor that
    /// registers ordered machines (not Ready for `boot` steps) and deletes drained nodes after
    /// `drain` steps.
    fn roll(
        d: u32,
        surge: i64,
        unavailable: i64,
        boot: u32,
        drain: u32,
    ) -> Result<u32, TestCaseError> {
        let classes = vec![
            InstanceClass::new("InstanceClass", "small", 2, 4),
            InstanceClass::new("InstanceClass", "medium", 4, 16),
        ];
        let old = classes[0].checksum();
        let new = classes[1].checksum();
        let mut g = scaling_group("g", "medium", 0, 8, 0, Some(vec!["a".into()]));
        let ci = g.spec.cloud_instances.as_mut().unwrap();
        ci.max_surge_per_zone = Some(surge);
        ci.max_unavailable_per_zone = Some(unavailable);
        let groups = vec![g];
        let sg = ScalingGroup::new(&groups[0], &classes, &[]);
        let (eff_surge, unavail) = (sg.effective_surge(), sg.max_unavailable_per_zone());
        let mut nodes: Vec<Node> = (0..d)
            .map(|i| node(&format!("old{i}"), &old, true, 0))
            .collect();
        let mut leaving: BTreeMap<String, u32> = BTreeMap::new();
        let mut booting: Vec<(String, u32)> = Vec::new();
        let mut upcoming = 0u32;
        let mut serial = 0;
        let desired: BTreeMap<(String, String), u32> =
            [(("g".to_string(), "a".to_string()), d)].into();
        let cfg = ScalingConfig::default();
        for step in 1..200u32 {
            let now = Timestamp::from_secs(i64::from(step) * 60);
            // Executor: machines register, boot, drained nodes go.
            for _ in 0..upcoming {
                serial += 1;
                let name = format!("new{serial}");
                nodes.push(node(&name, &new, boot == 0, now.as_millis() / 1000));
                booting.push((name, boot));
            }
            upcoming = 0;
            for (name, left) in &mut booting {
                if *left == 0 {
                    if let Some(n) = nodes.iter_mut().find(|n| &n.name == name) {
                        n.ready = true;
                    }
                } else {
                    *left -= 1;
                }
            }
            leaving.retain(|name, left| {
                if *left == 0 {
                    nodes.retain(|n| &n.name != name);
                    false
                } else {
                    *left -= 1;
                    true
                }
            });
            let names: BTreeSet<String> = leaving.keys().cloned().collect();
            let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[])
                .with_leaving(names)
                .with_desired(desired.clone());
            let ready_before = nodes
                .iter()
                .filter(|n| n.ready && !leaving.contains_key(&n.name))
                .count() as u32;
            let b = plan_bounds(&snap, &cfg, now);
            let s = plan_surge(&snap, &cfg, now);
            for c in b.commands.iter().chain(&s.commands) {
                match c {
                    ScalingCommand::CreateNodes { count, .. } => upcoming += count,
                    ScalingCommand::RemoveNode { node, .. } => {
                        prop_assert!(
                            leaving.insert(node.clone(), drain).is_none(),
                            "{} removed twice",
                            node
                        );
                    }
                }
            }
            let machines = nodes.len() as u32 + upcoming;
            prop_assert!(
                machines <= d + eff_surge,
                "step {}: {} machines > {} + {}",
                step,
                machines,
                d,
                eff_surge
            );
            let ready_after = nodes
                .iter()
                .filter(|n| n.ready && !leaving.contains_key(&n.name))
                .count() as u32;
            prop_assert!(
                ready_after >= ready_before.min(d.saturating_sub(unavail)),
                "step {}: Ready {} -> {} below {} - {}",
                step,
                ready_before,
                ready_after,
                d,
                unavail
            );
            let done = leaving.is_empty()
                && upcoming == 0
                && nodes.len() as u32 == d
                && nodes.iter().all(|n| {
                    n.ready && n.annotations[keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM] == new
                });
            if done {
                prop_assert!(s.rolling.is_empty());
                return Ok(step);
            }
        }
        Err(TestCaseError::fail(
            "the rollout did not converge in 200 steps",
        ))
    }

    #[test]
    fn default_surge_replaces_one_at_a_time_new_before_old() {
        // 3 nodes, surge 1, unavailable 0, Ready one step after registering, drained in one:
        // every node takes order, register, boot, drain, delete.
        let steps = roll(3, 1, 0, 1, 1).unwrap();
        assert!(steps >= 3 * 3, "{steps}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Machines never exceed desired + surge, Ready nodes never drop below
        /// desired − maxUnavailablePerZone by a drain, and every zone converges to its desired
        /// count of current-class nodes.
        #[test]
        fn rollout_is_bounded_and_converges(d in 0u32..6, surge in 0i64..3, unavailable in 0i64..3, boot in 0u32..3, drain in 0u32..3) {
            roll(d, surge, unavailable, boot, drain)?;
        }
    }
}
