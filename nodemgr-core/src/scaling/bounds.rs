//! Per-zone bounds of CloudEphemeral groups (docs/deckhouse.md §1.1 `cloudInstances`, §8):
//! every zone of a group keeps between `minPerZone` and `maxPerZone` nodes; a fixed count
//! (`minPerZone == maxPerZone`) is kept by replacing failed and missing nodes.
//!
//! # Rules, per group and zone (zones: `cloudInstances.zones`, or every zone of the cloud)
//! Let *D* be the zone's desired count ([`ClusterSnapshot::desired`], clamped to
//! `minPerZone..=maxPerZone`), *healthy* the nodes not leaving, not failed and made from the
//! group's current instance class ([`super::surge`]), *upcoming* the machines ordered and not
//! registered, and *machines* every node (leaving ones included) plus upcoming. The surge is
//! [`super::ScalingGroup::effective_surge`].
//! 1. **Missing nodes**: while healthy + upcoming < D, order machines, but never so many that
//!    machines exceed D + `maxSurgePerZone`: a failed node is replaced new-before-old when the
//!    surge allows it.
//! 2. **Failed nodes** (not Ready for [`ScalingConfig::failed_after`]) are removed once their
//!    replacement is ordered (healthy + upcoming ≥ D), or at once when the surge leaves no room
//!    for one (`maxSurgePerZone: 0`: delete first, then create). Removing a failed node takes
//!    nothing healthy down, so `maxUnavailablePerZone` does not limit it; that limit governs the
//!    voluntary replacements of [`super::surge`].
//! 3. **Above max**: nodes beyond `maxPerZone` (the limit was lowered) are removed, failed
//!    first, then not Ready, then the newest. Skipped while the zone still has nodes of an outdated class (the
//!    class rollout owns the surge then).
//!
//! Nodes of the group in a zone outside its zones (or without a zone label) are reported in the
//! notes and never removed automatically: a wrong zone list must not delete a zone's nodes.

use std::collections::BTreeMap;

use crate::model::{Node, NodeGroup, Timestamp, keys};

use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::snapshot::{ClusterSnapshot, ScalingGroup};

/// The group's zones: `cloudInstances.zones` when set and not empty, otherwise every zone of
/// the cloud; sorted, without duplicates.
pub fn group_zones(group: &NodeGroup, cloud_zones: &[String]) -> Vec<String> {
    let own = group
        .spec
        .cloud_instances
        .as_ref()
        .and_then(|c| c.zones.as_ref())
        .filter(|z| !z.is_empty());
    let mut zones: Vec<String> = own.map_or_else(|| cloud_zones.to_vec(), Clone::clone);
    zones.sort();
    zones.dedup();
    zones
}

/// Whether `node` has been not Ready for at least `config.failed_after`, counted from its last
/// heartbeat, or from its registration when it never sent one (a node with neither counts as
/// failed).
pub fn is_failed(node: &Node, config: &ScalingConfig, now: Timestamp) -> bool {
    if node.ready {
        return false;
    }
    node.last_heartbeat
        .or(node.created)
        .is_none_or(|since| now.saturating_since(since) >= config.failed_after)
}

/// One zone of one group, counted.
#[derive(Debug, Clone)]
pub struct ZoneState<'a> {
    /// The zone.
    pub zone: String,
    /// Whether the zone is one of the group's zones.
    pub in_group_zones: bool,
    /// `minPerZone`.
    pub min: u32,
    /// `maxPerZone`.
    pub max: u32,
    /// The desired count (see [`ClusterSnapshot::desired`]).
    pub desired: u32,
    /// `maxSurgePerZone`.
    pub surge: u32,
    /// Nodes not leaving, by name.
    pub nodes: Vec<&'a Node>,
    /// Nodes leaving (drain or deletion under way).
    pub leaving: Vec<&'a Node>,
    /// Nodes not leaving that failed (a subset of `nodes`).
    pub failed: Vec<&'a Node>,
    /// Nodes not leaving made from another instance class than the group's current one.
    pub outdated: Vec<&'a Node>,
    /// Machines ordered, not registered.
    pub upcoming: u32,
}

impl ZoneState<'_> {
    /// Nodes neither leaving nor failed.
    pub fn healthy(&self) -> u32 {
        count(self.nodes.len() - self.failed.len())
    }

    /// Nodes neither leaving, failed, nor outdated: healthy nodes of the current class.
    pub fn healthy_current(&self) -> u32 {
        count(
            self.nodes
                .iter()
                .filter(|n| {
                    !self.failed.iter().any(|f| std::ptr::eq(*f, **n))
                        && !self.outdated.iter().any(|o| std::ptr::eq(*o, **n))
                })
                .count(),
        )
    }

    /// Nodes not leaving, plus upcoming machines: what counts against `maxPerZone`.
    pub fn present(&self) -> u32 {
        count(self.nodes.len()).saturating_add(self.upcoming)
    }

    /// Every machine: nodes (leaving ones too) and upcoming machines.
    pub fn machines(&self) -> u32 {
        count(self.nodes.len() + self.leaving.len()).saturating_add(self.upcoming)
    }

    /// Ready nodes not leaving.
    pub fn ready(&self) -> u32 {
        count(self.nodes.iter().filter(|n| n.ready).count())
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Counts every zone of every scaling group: the group's zones, plus any other zone where the
/// group has nodes. Groups in snapshot order, zones sorted.
pub fn zone_states<'a>(
    snapshot: &ClusterSnapshot<'a>,
    config: &ScalingConfig,
    now: Timestamp,
) -> BTreeMap<&'a str, Vec<ZoneState<'a>>> {
    let mut by_group: BTreeMap<&'a str, BTreeMap<&'a str, Vec<&'a Node>>> = BTreeMap::new();
    for node in snapshot.nodes {
        if let Some(g) = node.group() {
            by_group
                .entry(g)
                .or_default()
                .entry(node.zone().unwrap_or_default())
                .or_default()
                .push(node);
        }
    }
    let mut out = BTreeMap::new();
    for group in &snapshot.groups {
        let mut nodes_by_zone = by_group.remove(group.name()).unwrap_or_default();
        let mut zones: Vec<(String, bool)> =
            group.zones.iter().map(|z| (z.clone(), true)).collect();
        for z in nodes_by_zone.keys() {
            if !group.zones.iter().any(|g| g == z) {
                zones.push(((*z).to_owned(), false));
            }
        }
        zones.sort();
        let checksum = group.class_checksum();
        let states = zones
            .into_iter()
            .map(|(zone, in_group_zones)| {
                let mut all = nodes_by_zone.remove(zone.as_str()).unwrap_or_default();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                let (leaving, nodes): (Vec<&Node>, Vec<&Node>) =
                    all.into_iter().partition(|n| snapshot.is_leaving(n));
                let failed = nodes
                    .iter()
                    .copied()
                    .filter(|n| is_failed(n, config, now))
                    .collect();
                let outdated = nodes
                    .iter()
                    .copied()
                    .filter(|n| is_outdated(n, checksum.as_deref()))
                    .collect();
                let upcoming = snapshot.upcoming_in(group.name(), &zone);
                let present = count(nodes.len()).saturating_add(upcoming);
                ZoneState {
                    desired: if in_group_zones {
                        snapshot.desired(group, &zone, present)
                    } else {
                        0
                    },
                    min: if in_group_zones {
                        group.min_per_zone()
                    } else {
                        0
                    },
                    max: if in_group_zones {
                        group.max_per_zone()
                    } else {
                        0
                    },
                    surge: group.effective_surge(),
                    zone,
                    in_group_zones,
                    nodes,
                    leaving,
                    failed,
                    outdated,
                    upcoming,
                }
            })
            .collect();
        out.insert(group.name(), states);
    }
    out
}

/// Whether `node` was made from another class than `checksum` (a node without the checksum
/// annotation was not made by nodemgr and is never called outdated).
pub fn is_outdated(node: &Node, checksum: Option<&str>) -> bool {
    match (
        checksum,
        node.annotations
            .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM),
    ) {
        (Some(want), Some(have)) => want != have,
        _ => false,
    }
}

/// What the bounds policy decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BoundsDecision {
    /// Machines to order and nodes to remove.
    pub commands: Vec<ScalingCommand>,
    /// Why nothing else happens where something might be expected.
    pub notes: Vec<String>,
}

/// Applies the module's rules to every zone of every scaling group.
pub fn plan_bounds(
    snapshot: &ClusterSnapshot<'_>,
    config: &ScalingConfig,
    now: Timestamp,
) -> BoundsDecision {
    let mut decision = BoundsDecision::default();
    let states = zone_states(snapshot, config, now);
    for group in &snapshot.groups {
        for zone in states.get(group.name()).into_iter().flatten() {
            plan_zone(group, zone, &mut decision);
        }
    }
    decision
}

fn plan_zone(group: &ScalingGroup<'_>, z: &ZoneState<'_>, out: &mut BoundsDecision) {
    let name = group.name();
    if !z.in_group_zones {
        if !z.nodes.is_empty() {
            let zone = if z.zone.is_empty() {
                "no zone label"
            } else {
                z.zone.as_str()
            };
            out.notes.push(format!(
                "{name}: {} node(s) in {zone}, which is not one of the group's zones; left alone",
                z.nodes.len()
            ));
        }
        return;
    }
    let d = z.desired;
    let mut upcoming = z.upcoming;
    let healthy = z.healthy_current();
    // 1. Missing nodes, within the surge.
    if healthy + upcoming < d {
        let missing = d - (healthy + upcoming);
        // Both come from the spec and may be anything up to u32::MAX: saturate, never wrap.
        let room = d.saturating_add(z.surge).saturating_sub(z.machines());
        let create = missing.min(room);
        if create > 0 {
            out.commands.push(ScalingCommand::CreateNodes {
                group: name.to_owned(),
                zone: z.zone.clone(),
                count: create,
                why: Why::BelowDesired {
                    have: healthy + upcoming,
                    want: d,
                },
            });
            upcoming += create;
        }
        if create < missing {
            out.notes.push(format!(
                "{name}/{}: {} more node(s) wanted, waiting for room under maxSurgePerZone {}",
                z.zone,
                missing - create,
                z.surge
            ));
        }
    }
    // 2. Failed nodes.
    let machines = z.machines() + (upcoming - z.upcoming);
    let mut removed = 0u32;
    let mut gone: Vec<&Node> = Vec::new();
    for node in &z.failed {
        let replaced = healthy + upcoming >= d;
        let no_room = machines.saturating_sub(removed) >= d.saturating_add(z.surge);
        if replaced || no_room {
            out.commands.push(remove(name, z, node, Why::Failed));
            gone.push(node);
            removed += 1;
        }
    }
    // 3. Above max: only registered nodes are removed (an upcoming machine is not a node yet;
    // if it still is one too many once registered, it goes then, as the newest).
    let present = (z.present() + (upcoming - z.upcoming)).saturating_sub(removed);
    let registered = count(z.nodes.len()).saturating_sub(removed);
    if present > z.max && registered > z.max {
        if !z.outdated.is_empty() {
            out.notes.push(format!(
                "{name}/{}: {present} node(s) above maxPerZone {} left to the class rollout",
                z.zone, z.max
            ));
            return;
        }
        let mut candidates: Vec<&Node> = z
            .nodes
            .iter()
            .copied()
            .filter(|n| !gone.iter().any(|f| std::ptr::eq(*f, *n)))
            .collect();
        // Failed first, then not Ready, then newest, then name (last first).
        let is_failed = |n: &Node| z.failed.iter().any(|f| std::ptr::eq(*f, n));
        candidates.sort_by(|a, b| {
            is_failed(b)
                .cmp(&is_failed(a))
                .then_with(|| a.ready.cmp(&b.ready))
                .then_with(|| b.created.cmp(&a.created))
                .then_with(|| b.name.cmp(&a.name))
        });
        let excess = (registered - z.max) as usize;
        for node in candidates.into_iter().take(excess) {
            out.commands.push(remove(
                name,
                z,
                node,
                Why::AboveMax {
                    have: present,
                    max: z.max,
                },
            ));
        }
    }
}

fn remove(group: &str, z: &ZoneState<'_>, node: &Node, why: Why) -> ScalingCommand {
    ScalingCommand::RemoveNode {
        node: node.name.clone(),
        group: group.to_owned(),
        zone: z.zone.clone(),
        why,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{ClassReference, CloudInstances, NodeGroupSpec, NodeType, ObjectMeta};
    use crate::scaling::InstanceClass;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    pub(crate) fn group(name: &str, min: i64, max: i64, surge: Option<i64>) -> NodeGroup {
        NodeGroup {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: NodeGroupSpec {
                node_type: Some(NodeType::CloudEphemeral),
                cloud_instances: Some(CloudInstances {
                    zones: Some(vec!["a".into(), "b".into()]),
                    min_per_zone: Some(min),
                    max_per_zone: Some(max),
                    max_surge_per_zone: surge,
                    class_reference: Some(ClassReference {
                        kind: "InstanceClass".into(),
                        name: "small".into(),
                    }),
                    ..CloudInstances::default()
                }),
                ..NodeGroupSpec::default()
            },
            ..NodeGroup::default()
        }
    }

    fn node(name: &str, group: &str, zone: &str, ready: bool, heartbeat: i64) -> Node {
        Node {
            name: name.into(),
            labels: [
                (keys::LABEL_NODE_GROUP.to_string(), group.to_string()),
                (keys::LABEL_TOPOLOGY_ZONE.to_string(), zone.to_string()),
            ]
            .into(),
            ready,
            last_heartbeat: Some(Timestamp::from_secs(heartbeat)),
            ..Node::default()
        }
    }

    fn classes() -> Vec<InstanceClass> {
        vec![InstanceClass::new("InstanceClass", "small", 2, 4)]
    }

    #[test]
    fn zones_default_to_the_cloud() {
        let mut g = group("g", 1, 2, None);
        assert_eq!(group_zones(&g, &["x".into()]), vec!["a", "b"]);
        g.spec.cloud_instances.as_mut().unwrap().zones = None;
        assert_eq!(
            group_zones(&g, &["z2".into(), "z1".into(), "z1".into()]),
            vec!["z1", "z2"]
        );
    }

    #[test]
    fn creates_up_to_min_and_replaces_failed_new_before_old() {
        let groups = vec![group("g", 2, 2, None)];
        let classes = classes();
        let now = Timestamp::from_secs(10_000);
        let nodes = vec![
            node("a1", "g", "a", true, 9_990),
            node("a2", "g", "a", false, 1_000),
            node("b1", "g", "b", true, 9_990),
        ];
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        let d = plan_bounds(&snap, &ScalingConfig::default(), now);
        // zone a: 1 healthy + 1 failed, surge 1: replacement ordered and failed node removed.
        // zone b: one missing.
        assert_eq!(
            d.commands
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec![
                "create 1 node(s) of g in a: zone has 1 healthy or upcoming node(s), wants 2",
                "drain and delete node a2 of g in a: node failed (not Ready past the failure timeout)",
                "create 1 node(s) of g in b: zone has 1 healthy or upcoming node(s), wants 2",
            ]
        );
    }

    #[test]
    fn extreme_per_zone_bounds_and_surge_saturate_instead_of_overflowing() {
        let classes = classes();
        let now = Timestamp::from_secs(10_000);
        let nodes = vec![
            node("a1", "g", "a", true, 9_990),
            node("a2", "g", "a", false, 1_000),
        ];
        for (min, max, surge) in [
            (i64::MAX, i64::MAX, Some(i64::MAX)),
            (i64::MAX, i64::MIN, Some(i64::MIN)),
            (i64::MIN, i64::MAX, Some(i64::MAX)),
            (1, i64::MAX, Some(i64::MAX)),
        ] {
            let groups = vec![group("g", min, max, surge)];
            let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
            // Before saturation, `desired + surge` overflowed here (a panic in debug builds).
            let d = plan_bounds(&snap, &ScalingConfig::default(), now);
            if min == i64::MAX {
                assert!(
                    d.commands.iter().any(
                        |c| matches!(c, ScalingCommand::CreateNodes { zone, .. } if zone == "a")
                    ),
                    "{:?}",
                    d.commands
                );
            }
        }
    }

    #[test]
    fn zero_surge_deletes_first() {
        let mut g = group("g", 1, 1, Some(0));
        g.spec
            .cloud_instances
            .as_mut()
            .unwrap()
            .max_unavailable_per_zone = Some(1);
        let groups = vec![g];
        let classes = classes();
        let now = Timestamp::from_secs(10_000);
        let nodes = vec![
            node("a1", "g", "a", false, 0),
            node("b1", "g", "b", true, 0),
        ];
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        let d = plan_bounds(&snap, &ScalingConfig::default(), now);
        assert_eq!(d.commands.len(), 1);
        assert!(
            matches!(&d.commands[0], ScalingCommand::RemoveNode { node, why: Why::Failed, .. } if node == "a1")
        );
        // Next pass: a1 is leaving, still a machine: nothing until it is gone.
        let snap = snap.with_leaving(BTreeSet::from(["a1".to_string()]));
        let d = plan_bounds(&snap, &ScalingConfig::default(), now);
        assert!(d.commands.is_empty(), "{:?}", d.commands);
        let nodes = vec![node("b1", "g", "b", true, 0)];
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        let d = plan_bounds(&snap, &ScalingConfig::default(), now);
        assert_eq!(d.commands.len(), 1);
        assert_eq!(d.commands[0].delta(), 1);
    }

    #[test]
    fn above_max_removes_newest_and_foreign_zones_are_left_alone() {
        let groups = vec![group("g", 0, 1, None)];
        let classes = classes();
        let mut a1 = node("a1", "g", "a", true, 0);
        a1.created = Some(Timestamp::from_secs(1));
        let mut a2 = node("a2", "g", "a", true, 0);
        a2.created = Some(Timestamp::from_secs(2));
        let nodes = vec![a1, a2, node("c1", "g", "c", true, 0)];
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        let d = plan_bounds(&snap, &ScalingConfig::default(), Timestamp::from_secs(5));
        assert_eq!(d.commands.len(), 1);
        assert!(matches!(&d.commands[0], ScalingCommand::RemoveNode { node, .. } if node == "a2"));
        assert_eq!(d.notes.len(), 1);
        assert!(
            d.notes[0].contains("c1") || d.notes[0].contains(" c,"),
            "{}",
            d.notes[0]
        );
    }

    /// A zone's population for the properties.
    #[derive(Debug, Clone)]
    struct World {
        min: i64,
        max: i64,
        surge: i64,
        desired: Option<u32>,
        healthy: usize,
        failed: usize,
        leaving: usize,
        upcoming: u32,
    }

    fn arb_world() -> impl Strategy<Value = World> {
        (
            0i64..4,
            0i64..4,
            0i64..3,
            prop::option::of(0u32..8),
            0usize..7,
            0usize..4,
            0usize..3,
            0u32..3,
        )
            .prop_map(
                |(min, extra, surge, desired, healthy, failed, leaving, upcoming)| World {
                    min,
                    max: min + extra,
                    surge,
                    desired,
                    healthy,
                    failed,
                    leaving,
                    upcoming,
                },
            )
    }

    fn build(w: &World) -> (Vec<NodeGroup>, Vec<Node>, BTreeSet<String>) {
        let mut g = group("g", w.min, w.max, Some(w.surge));
        g.spec.cloud_instances.as_mut().unwrap().zones = Some(vec!["a".into()]);
        let mut nodes = Vec::new();
        let mut leaving = BTreeSet::new();
        for i in 0..w.healthy {
            nodes.push(node(&format!("h{i}"), "g", "a", true, 0));
        }
        for i in 0..w.failed {
            nodes.push(node(&format!("f{i}"), "g", "a", false, 0));
        }
        for i in 0..w.leaving {
            nodes.push(node(&format!("l{i}"), "g", "a", true, 0));
            leaving.insert(format!("l{i}"));
        }
        (vec![g], nodes, leaving)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Creation never takes a zone's machines above desired + surge (nor above what it
        /// already had), the healthy count never drops (only failed nodes are removed unless the
        /// zone is above maxPerZone) and removal above max never goes below maxPerZone.
        #[test]
        fn bounds_respect_min_max_and_surge(w in arb_world()) {
            let (groups, nodes, leaving) = build(&w);
            let classes = classes();
            let now = Timestamp::from_secs(100_000);
            let mut snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[])
                .with_leaving(leaving)
                .with_upcoming(vec![crate::scaling::Upcoming { group: "g".into(), zone: "a".into(), count: w.upcoming }]);
            if let Some(d) = w.desired {
                snap.desired.insert(("g".into(), "a".into()), d);
            }
            let cfg = ScalingConfig::default();
            let zone = zone_states(&snap, &cfg, now)["g"][0].clone();
            let d = plan_bounds(&snap, &cfg, now);
            let created: u32 = d.commands.iter().filter_map(|c| match c {
                ScalingCommand::CreateNodes { count, .. } => Some(*count), _ => None }).sum();
            let removed: Vec<&str> = d.commands.iter().filter_map(|c| match c {
                ScalingCommand::RemoveNode { node, .. } => Some(node.as_str()), _ => None }).collect();
            let machines = zone.machines();
            if created > 0 {
                prop_assert!(machines + created <= zone.desired + zone.surge,
                    "{} machines + {} created > desired {} + surge {}", machines, created, zone.desired, zone.surge);
                prop_assert!(zone.healthy() + zone.upcoming + created <= zone.desired);
            }
            prop_assert!(zone.desired >= zone.min && zone.desired <= zone.max);
            let healthy_removed = removed.iter().filter(|n| n.starts_with('h')).count() as u32;
            let failed_removed = removed.iter().filter(|n| n.starts_with('f')).count() as u32;
            prop_assert!(!removed.iter().any(|n| n.starts_with('l')), "leaving nodes are not removed twice");
            if healthy_removed > 0 {
                let nodes_after = zone.nodes.len() as u32 - healthy_removed - failed_removed;
                prop_assert!(nodes_after >= zone.max, "removal never goes below maxPerZone");
                prop_assert!(zone.healthy() - healthy_removed >= zone.min);
            }
        }

        /// A fixed-count zone converges: with an executor that registers ordered machines one
        /// pass later (Ready) and finishes removals one pass later, the zone reaches exactly its
        /// count of healthy nodes, and machines never exceed count + surge (+ the failed nodes
        /// that were already there) on the way.
        #[test]
        fn fixed_count_converges(n in 1i64..4, surge in 0i64..3, healthy in 0usize..5, failed in 0usize..4) {
            let w = World { min: n, max: n, surge, desired: None, healthy, failed, leaving: 0, upcoming: 0 };
            let (groups, mut nodes, _) = build(&w);
            let classes = classes();
            let cfg = ScalingConfig::default();
            let now = Timestamp::from_secs(100_000);
            let mut leaving: BTreeSet<String> = BTreeSet::new();
            let mut upcoming = 0u32;
            let mut serial = 0;
            let limit = (n + surge.max(1)) as u32 + (healthy + failed) as u32;
            for _ in 0..30 {
                // Executor: upcoming machines register, leaving nodes disappear.
                for _ in 0..upcoming {
                    serial += 1;
                    nodes.push(node(&format!("n{serial}"), "g", "a", true, 100_000));
                }
                upcoming = 0;
                nodes.retain(|x| !leaving.contains(&x.name));
                leaving.clear();
                let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
                let d = plan_bounds(&snap, &cfg, now);
                for c in &d.commands {
                    match c {
                        ScalingCommand::CreateNodes { count, .. } => upcoming += count,
                        ScalingCommand::RemoveNode { node, .. } => { leaving.insert(node.clone()); }
                    }
                }
                prop_assert!(nodes.len() as u32 + upcoming <= limit);
            }
            let healthy_now = nodes.iter().filter(|x| x.ready && !leaving.contains(&x.name)).count();
            prop_assert_eq!(healthy_now as i64, n);
            prop_assert!(nodes.iter().all(|x| x.ready || leaving.contains(&x.name)));
        }
    }
}
