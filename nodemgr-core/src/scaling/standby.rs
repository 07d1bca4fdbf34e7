//! Standby: warm empty nodes kept in every zone of a group, held by standby-holder pods of the
//! lowest priority class (docs/deckhouse.md §8).
//!
//! # Rules
//! * **Count** ([`standby_count`]): `cloudInstances.standby` as an absolute number, or a
//!   percentage of `maxPerZone × zones` (floored, at least 1 when the percentage is not 0);
//!   capped at `(maxPerZone − minPerZone) × zones`. Examples (docs/deckhouse.md §8): `30` → 18
//!   for max 10, min 1, 2 zones; `20%` of 20 × 3 → 12.
//! * **Spread**: the count is split over the group's zones as evenly as possible (zones in name
//!   order take the remainder), so every zone has warm capacity.
//! * **Holder pods** ([`holder_pod`]): in `d8-cloud-instance-manager`, labels
//!   `app=standby-holder`, `ng=<group>`, priority class `standby` (priority
//!   [`STANDBY_PRIORITY`]), the group's taints as tolerations, a nodeSelector on the group and
//!   the zone, and requests of `overprovisioningRate` % (default 50) of the node's cpu and
//!   memory capacity. nodemgr adds a hostname anti-affinity between holders of a group so that
//!   each one holds a node of its own: standby counts nodes, and with a rate below 50 % two
//!   holders would otherwise share one.
//! * **Preemption**: any other pod preempts holders when it fits nowhere else
//!   ([`super::scale_up`] simulates it; kube-scheduler does it for real). The evicted holder is
//!   pending again, and scale-up orders a node for it: the standby is replaced.
//! * **Scale-down** never treats a holder specially: at the default rate the holder keeps its
//!   node at 50 % requested, which is not underutilized.
//!
//! [`plan_standby`] compares the desired holders with the holder pods in the snapshot and says
//! which to create and which to delete (pending ones, then the highest index, first): the
//! per-pod view. In a cluster the holders are one Deployment per group
//! (`standby-holder-<group>`, [`holder_template`], `replicas` = [`StandbyPlan::count`]) whose
//! pods kube-scheduler places; the scaling executor then sizes zones with
//! [`expected_holders`] (docs/executors.md §2.3).

use std::collections::BTreeMap;

use crate::model::{
    Amount, IntOrStringError, LabelSelector, Owner, Pod, PodPhase, Quantity, Toleration, keys,
};

use super::snapshot::{ClusterSnapshot, ScalingGroup};

/// Priority of standby-holder pods: below any workload. Deckhouse does not document its `standby`
/// priority class value; nodemgr uses −1000 (docs/deckhouse.md §8).
pub const STANDBY_PRIORITY: i32 = -1000;

/// The group's standby node count (see the module docs); 0 when `standby` is unset.
///
/// # Errors
/// A `standby` value that is neither a non-negative integer nor a percentage.
pub fn standby_count(group: &ScalingGroup<'_>) -> Result<u32, IntOrStringError> {
    let Some(standby) = group
        .group
        .spec
        .cloud_instances
        .as_ref()
        .and_then(|c| c.standby.as_ref())
    else {
        return Ok(0);
    };
    let zones = u64::try_from(group.zones.len()).unwrap_or(u64::MAX);
    let max = u64::from(group.max_per_zone());
    let min = u64::from(group.min_per_zone());
    let raw = match standby.amount()? {
        Amount::Absolute(n) => n,
        Amount::Percent(0) => 0,
        Amount::Percent(p) => (max.saturating_mul(zones).saturating_mul(p) / 100).max(1),
    };
    let cap = (max - min.min(max)).saturating_mul(zones);
    Ok(u32::try_from(raw.min(cap)).unwrap_or(u32::MAX))
}

/// `count` split over `zones` (sorted) as evenly as possible; earlier zones take the remainder.
pub fn spread(count: u32, zones: &[String]) -> BTreeMap<String, u32> {
    let n = u32::try_from(zones.len()).unwrap_or(u32::MAX);
    zones
        .iter()
        .enumerate()
        .map(|(i, z)| {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            (z.clone(), count / n + u32::from(i < count % n))
        })
        .collect()
}

/// The labels of a group's holder pods.
fn holder_labels(group: &str) -> BTreeMap<String, String> {
    [
        ("app".to_owned(), keys::STANDBY_HOLDER_APP.to_owned()),
        ("ng".to_owned(), group.to_owned()),
    ]
    .into()
}

/// The pod template of `group`'s standby-holder Deployment (see the module docs), named like
/// the Deployment (`standby-holder-<group>`): the group's nodeSelector without a zone (the
/// executor sizes zones with [`expected_holders`]). `None` when the group's class is unknown.
pub fn holder_template(group: &ScalingGroup<'_>) -> Option<Pod> {
    let shape = group.shape()?;
    let rate = group
        .group
        .spec
        .cloud_instances
        .as_ref()
        .and_then(|c| c.standby_holder.as_ref())
        .and_then(|h| h.overprovisioning_rate)
        .filter(|r| (1..=100).contains(r))
        .unwrap_or(crate::model::spec_facts::OVERPROVISIONING_RATE_DEFAULT);
    let share = |key: &str| {
        let cap = shape.capacity.get(key).map_or(0, |q| q.0);
        Quantity(i64::try_from(i128::from(cap) * i128::from(rate) / 100).unwrap_or(0))
    };
    let name = group.name();
    let tolerations = group
        .group
        .spec
        .node_template
        .as_ref()
        .and_then(|t| t.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| Toleration {
            key: t.key.clone(),
            exists: false,
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
        })
        .collect();
    Some(Pod {
        namespace: keys::NAMESPACE.to_owned(),
        name: format!("{}{name}", keys::STANDBY_HOLDER_PREFIX),
        labels: holder_labels(name).into(),
        owner: Some(Owner {
            kind: "ReplicaSet".to_owned(),
            name: format!("{}{name}", keys::STANDBY_HOLDER_PREFIX),
        }),
        priority: STANDBY_PRIORITY,
        priority_class: Some(keys::STANDBY_PRIORITY_CLASS.to_owned()),
        requests: [
            ("cpu".to_owned(), share("cpu")),
            ("memory".to_owned(), share("memory")),
        ]
        .into(),
        node_selector: [(keys::LABEL_NODE_GROUP.to_owned(), name.to_owned())].into(),
        hostname_anti_affinity: vec![LabelSelector {
            match_labels: Some(holder_labels(name)),
            match_expressions: None,
        }],
        tolerations,
        phase: PodPhase::Pending,
        ..Pod::default()
    })
}

/// The `index`-th holder pod of `group` in `zone` (see the module docs), pending: the
/// [`holder_template`] with a zone nodeSelector, named `standby-holder-<group>-<zone>-<index>`.
pub fn holder_pod(group: &ScalingGroup<'_>, zone: &str, index: u32) -> Option<Pod> {
    let mut pod = holder_template(group)?;
    pod.name = format!(
        "{}{}-{zone}-{index}",
        keys::STANDBY_HOLDER_PREFIX,
        group.name()
    );
    pod.node_selector
        .insert(keys::LABEL_TOPOLOGY_ZONE.to_owned(), zone.to_owned());
    Some(pod)
}

/// Whether `pod` is a standby holder of some group: `(group)` from its `ng` label.
pub fn holder_group(pod: &Pod) -> Option<&str> {
    (pod.labels.get("app").map(String::as_str) == Some(keys::STANDBY_HOLDER_APP))
        .then(|| pod.labels.get("ng").map(String::as_str))
        .flatten()
}

/// What the executor's view of the holders changed ([`expected_holders`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HolderView {
    /// Pending holders given a zone nodeSelector: `(pod key, zone)`.
    pub zoned: Vec<(String, String)>,
    /// Pending holders left out of the view: no zone of their group lacks a holder.
    pub dropped: Vec<String>,
    /// Holders added to the view for replicas the Deployment has no pod for yet:
    /// `(group, zone)`, one per pod.
    pub expected: Vec<(String, String)>,
}

/// Turns the cluster's holder pods into the demand scale-up sizes zones with (docs/executors.md
/// §2.3). A standby-holder Deployment's pods carry no zone; kube-scheduler places them. For
/// each group of `plans` with a known class:
/// * holders bound to a node count for that node's zone; a zone's **deficit** is its share of
///   the standby ([`StandbyPlan::per_zone`]) minus the holders bound there;
/// * pending holders (in name order) get the zone nodeSelector of the first zone with a
///   deficit left (zones in name order), and are dropped from `pods` when none has;
/// * replicas the Deployment has no pod for yet (`count` minus the group's holder pods) are
///   added as pending holders ([`holder_pod`]) for the remaining deficits, so machines are
///   ordered in the same pass as the Deployment is scaled.
///
/// Holders of groups without a plan are left as they are.
pub fn expected_holders(
    pods: &mut Vec<Pod>,
    nodes: &[crate::model::Node],
    groups: &[ScalingGroup<'_>],
    plans: &[StandbyPlan],
) -> HolderView {
    let zone_of_node: BTreeMap<&str, &str> = nodes
        .iter()
        .filter_map(|n| Some((n.name.as_str(), n.zone()?)))
        .collect();
    let mut view = HolderView::default();
    let mut drop: std::collections::BTreeSet<usize> = std::collections::BTreeSet::new();
    let mut added: Vec<Pod> = Vec::new();
    for plan in plans {
        let Some(group) = groups.iter().find(|g| g.name() == plan.group) else {
            continue;
        };
        if group.class.is_none() {
            continue;
        }
        let mut deficit: BTreeMap<String, u32> = plan.per_zone.clone();
        let mut pending: Vec<usize> = Vec::new();
        let mut existing = 0u32;
        for (i, p) in pods.iter().enumerate() {
            if p.is_terminal() || holder_group(p) != Some(plan.group.as_str()) {
                continue;
            }
            existing = existing.saturating_add(1);
            match p.node_name.as_deref() {
                Some(node) => {
                    if let Some(d) = zone_of_node.get(node).and_then(|z| deficit.get_mut(*z)) {
                        *d = d.saturating_sub(1);
                    }
                }
                None => pending.push(i),
            }
        }
        pending.sort_by(|a, b| pods[*a].name.cmp(&pods[*b].name));
        for i in pending {
            match deficit.iter_mut().find(|(_, d)| **d > 0) {
                Some((zone, d)) => {
                    *d -= 1;
                    pods[i]
                        .node_selector
                        .insert(keys::LABEL_TOPOLOGY_ZONE.to_owned(), zone.clone());
                    view.zoned.push((pods[i].key(), zone.clone()));
                }
                None => {
                    drop.insert(i);
                    view.dropped.push(pods[i].key());
                }
            }
        }
        let mut missing = plan.count.saturating_sub(existing);
        for (zone, d) in &deficit {
            for index in 0..*d {
                if missing == 0 {
                    break;
                }
                if let Some(mut p) = holder_pod(group, zone, index) {
                    p.name = format!(
                        "{}{}-expected-{zone}-{index}",
                        keys::STANDBY_HOLDER_PREFIX,
                        plan.group
                    );
                    added.push(p);
                    view.expected.push((plan.group.clone(), zone.clone()));
                    missing -= 1;
                }
            }
        }
    }
    if !drop.is_empty() {
        let mut i = 0;
        pods.retain(|_| {
            let keep = !drop.contains(&i);
            i += 1;
            keep
        });
    }
    pods.extend(added);
    view
}

/// The standby of one group.
#[derive(Debug, Clone, PartialEq)]
pub struct StandbyPlan {
    /// Group.
    pub group: String,
    /// Standby nodes wanted in total (what `status.standby` reports once held).
    pub count: u32,
    /// Standby nodes wanted per zone.
    pub per_zone: BTreeMap<String, u32>,
    /// Holder pods to create.
    pub create: Vec<Pod>,
    /// Holder pods to delete (`namespace/name`).
    pub delete: Vec<String>,
    /// Holder pods bound to a node.
    pub held: u32,
    /// What went wrong (an invalid `standby`, an unknown class).
    pub error: Option<String>,
}

/// The zone a holder pod belongs to (its zone nodeSelector).
fn holder_zone(pod: &Pod) -> Option<&str> {
    pod.node_selector
        .get(keys::LABEL_TOPOLOGY_ZONE)
        .map(String::as_str)
}

/// The index in a holder's name (`standby-holder-<group>-<zone>-<index>`).
fn holder_index(pod: &Pod) -> Option<u32> {
    pod.name.rsplit('-').next()?.parse().ok()
}

/// Plans the holder pods of every scaling group that has a standby or holder pods.
pub fn plan_standby(snapshot: &ClusterSnapshot<'_>) -> Vec<StandbyPlan> {
    let mut holders: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
    for p in snapshot.pods {
        if p.is_terminal()
            || p.labels.get("app").map(String::as_str) != Some(keys::STANDBY_HOLDER_APP)
        {
            continue;
        }
        if let Some(g) = p.labels.get("ng") {
            holders.entry(g.as_str()).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    for group in &snapshot.groups {
        let name = group.name();
        let existing = holders.remove(name).unwrap_or_default();
        let (count, error) = match standby_count(group) {
            Ok(n) => (n, None),
            Err(e) => (0, Some(format!("cloudInstances.standby: {e}"))),
        };
        if count == 0 && existing.is_empty() && error.is_none() {
            continue;
        }
        let (count, error) = if count > 0 && group.class.is_none() {
            (
                0,
                Some("instance class unknown: holder size cannot be computed".to_owned()),
            )
        } else {
            (count, error)
        };
        let per_zone = spread(count, &group.zones);
        let mut plan = StandbyPlan {
            group: name.to_owned(),
            count,
            per_zone: per_zone.clone(),
            create: Vec::new(),
            delete: Vec::new(),
            held: u32::try_from(existing.iter().filter(|p| p.node_name.is_some()).count())
                .unwrap_or(u32::MAX),
            error,
        };
        let mut by_zone: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for p in &existing {
            by_zone
                .entry(holder_zone(p).unwrap_or_default())
                .or_default()
                .push(p);
        }
        for (zone, pods) in &mut by_zone {
            let want = per_zone.get(*zone).copied().unwrap_or(0) as usize;
            if pods.len() > want {
                // Pending first, then the highest index.
                pods.sort_by(|a, b| {
                    a.node_name
                        .is_some()
                        .cmp(&b.node_name.is_some())
                        .then_with(|| holder_index(b).cmp(&holder_index(a)))
                        .then_with(|| b.name.cmp(&a.name))
                });
                plan.delete
                    .extend(pods[..pods.len() - want].iter().map(|p| p.key()));
            }
        }
        for (zone, want) in &per_zone {
            let have = by_zone.get(zone.as_str()).map_or(0, Vec::len);
            let used: Vec<u32> = by_zone
                .get(zone.as_str())
                .into_iter()
                .flatten()
                .filter_map(|p| holder_index(p))
                .collect();
            let mut next = 0u32;
            for _ in have..*want as usize {
                while used.contains(&next) {
                    next += 1;
                }
                if let Some(p) = holder_pod(group, zone, next) {
                    plan.create.push(p);
                }
                next += 1;
            }
        }
        plan.delete.sort();
        out.push(plan);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{IntOrString, Node, NodeGroup};
    use crate::scaling::InstanceClass;
    use crate::scaling::bounds::tests::group;
    use proptest::prelude::*;

    fn with_standby(min: i64, max: i64, zones: usize, standby: IntOrString) -> NodeGroup {
        let mut g = group("g", min, max, None);
        let ci = g.spec.cloud_instances.as_mut().unwrap();
        ci.zones = Some((0..zones).map(|i| format!("z{i}")).collect());
        ci.standby = Some(standby);
        g
    }

    fn count(g: &NodeGroup) -> u32 {
        let classes = vec![InstanceClass::new("InstanceClass", "small", 2, 4)];
        standby_count(&ScalingGroup::new(g, &classes, &[])).unwrap()
    }

    #[test]
    fn facts_examples() {
        assert_eq!(count(&with_standby(1, 10, 2, IntOrString::Int(30))), 18);
        assert_eq!(
            count(&with_standby(0, 20, 3, IntOrString::String("20%".into()))),
            12
        );
        assert_eq!(
            count(&with_standby(0, 1, 1, IntOrString::String("1%".into()))),
            1,
            "a non-zero percentage gives at least one"
        );
        assert_eq!(
            count(&with_standby(0, 5, 2, IntOrString::String("0%".into()))),
            0
        );
        assert_eq!(
            count(&with_standby(3, 3, 2, IntOrString::Int(4))),
            0,
            "fixed groups have no room"
        );
    }

    #[test]
    fn holders_are_planned_and_trimmed() {
        let classes = vec![InstanceClass::new("InstanceClass", "small", 2, 4)];
        let groups = vec![with_standby(0, 5, 2, IntOrString::Int(3))];
        let snap = ClusterSnapshot::new(&[], &[], &[], &groups, &classes, &[]);
        let plans = plan_standby(&snap);
        assert_eq!(plans.len(), 1);
        let p = &plans[0];
        assert_eq!(
            p.per_zone,
            [("z0".to_string(), 2), ("z1".to_string(), 1)].into()
        );
        let names: Vec<&str> = p.create.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "standby-holder-g-z0-0",
                "standby-holder-g-z0-1",
                "standby-holder-g-z1-0"
            ]
        );
        let h = &p.create[0];
        assert_eq!(h.requests["cpu"], Quantity(1000), "50 % of 2 cores");
        assert_eq!(h.priority_class.as_deref(), Some("standby"));

        // Lower the standby to 1: the surplus goes, pending first.
        let mut pods = p.create.clone();
        pods[0].node_name = Some("n0".into());
        let groups = vec![with_standby(0, 5, 2, IntOrString::Int(1))];
        let snap = ClusterSnapshot::new(&[], &pods, &[], &groups, &classes, &[]);
        let p = &plan_standby(&snap)[0];
        assert!(p.create.is_empty());
        assert_eq!(
            p.delete,
            vec![
                "d8-cloud-instance-manager/standby-holder-g-z0-1".to_string(),
                "d8-cloud-instance-manager/standby-holder-g-z1-0".to_string()
            ]
        );
    }

    fn holder_world(
        zones: usize,
        count: u32,
        bound: &[u32],
        pending: usize,
    ) -> (Vec<NodeGroup>, Vec<Node>, Vec<Pod>) {
        let g = with_standby(0, 50, zones, IntOrString::Int(i64::from(count)));
        let classes = vec![InstanceClass::new("InstanceClass", "small", 2, 4)];
        let sg = ScalingGroup::new(&g, &classes, &[]);
        let template = holder_template(&sg).unwrap();
        let mut nodes = Vec::new();
        let mut pods = Vec::new();
        for (z, n) in bound.iter().enumerate() {
            for i in 0..*n {
                let name = format!("n-{z}-{i}");
                let mut node = Node {
                    name: name.clone(),
                    ..Node::default()
                };
                node.labels
                    .insert(keys::LABEL_TOPOLOGY_ZONE.into(), format!("z{z}"));
                nodes.push(node);
                let mut p = template.clone();
                p.name = format!("bound-{z}-{i}");
                p.node_name = Some(name);
                pods.push(p);
            }
        }
        for i in 0..pending {
            let mut p = template.clone();
            p.name = format!("pending-{i}");
            pods.push(p);
        }
        (vec![g], nodes, pods)
    }

    fn view_of(
        groups: &[NodeGroup],
        nodes: &[Node],
        pods: &mut Vec<Pod>,
    ) -> (Option<StandbyPlan>, HolderView) {
        let classes = vec![InstanceClass::new("InstanceClass", "small", 2, 4)];
        let before = pods.clone();
        let snap = ClusterSnapshot::new(nodes, &before, &[], groups, &classes, &[]);
        let plans = plan_standby(&snap);
        let view = expected_holders(pods, nodes, &snap.groups, &plans);
        (plans.first().cloned(), view)
    }

    #[test]
    fn pending_holders_get_the_zones_that_lack_one_and_missing_replicas_are_expected() {
        // Two zones, one holder each wanted; one bound in z0, one pending: it goes to z1.
        let (groups, nodes, mut pods) = holder_world(2, 2, &[1, 0], 1);
        let (_, view) = view_of(&groups, &nodes, &mut pods);
        assert_eq!(
            view.zoned,
            vec![(
                "d8-cloud-instance-manager/pending-0".to_owned(),
                "z1".to_owned()
            )]
        );
        assert!(view.expected.is_empty() && view.dropped.is_empty());
        assert_eq!(
            pods.last()
                .unwrap()
                .node_selector
                .get(keys::LABEL_TOPOLOGY_ZONE),
            Some(&"z1".to_owned())
        );
        // No pod yet: both replicas are expected, one per zone.
        let (groups, nodes, mut pods) = holder_world(2, 2, &[0, 0], 0);
        let (_, view) = view_of(&groups, &nodes, &mut pods);
        assert_eq!(
            view.expected,
            vec![
                ("g".to_owned(), "z0".to_owned()),
                ("g".to_owned(), "z1".to_owned())
            ]
        );
        assert_eq!(pods.len(), 2);
        // A pending holder beyond the standby (being scaled down) is left out.
        let (groups, nodes, mut pods) = holder_world(1, 1, &[1], 1);
        let (_, view) = view_of(&groups, &nodes, &mut pods);
        assert_eq!(view.dropped.len(), 1);
        assert_eq!(pods.len(), 1);
    }

    proptest! {
        #[test]
        fn count_is_capped_and_spread_evenly(min in 0i64..5, extra in 0i64..10, zones in 1usize..5, v in 0i64..100, pct in prop::bool::ANY) {
            let standby = if pct { IntOrString::String(format!("{v}%")) } else { IntOrString::Int(v) };
            let g = with_standby(min, min + extra, zones, standby);
            let n = count(&g);
            prop_assert!(u64::from(n) <= (extra as u64) * zones as u64);
            let zs: Vec<String> = (0..zones).map(|i| format!("z{i}")).collect();
            let s = spread(n, &zs);
            prop_assert_eq!(s.values().sum::<u32>(), n);
            let (lo, hi) = (s.values().min().copied().unwrap_or(0), s.values().max().copied().unwrap_or(0));
            prop_assert!(hi - lo <= 1);
        }

        /// Scale-up sees, per zone, at most the zone's missing holders; in total as many as
        /// the zones miss, unless the Deployment's pods and missing replicas are fewer.
        #[test]
        fn the_view_asks_each_zone_for_what_it_lacks_and_no_more(
            zones in 1usize..4,
            count in 0u32..8,
            bound in prop::collection::vec(0u32..3, 3),
            pending in 0usize..6,
        ) {
            let bound = &bound[..zones];
            let (groups, nodes, mut pods) = holder_world(zones, count, bound, pending);
            let (plan, _) = view_of(&groups, &nodes, &mut pods);
            let Some(plan) = plan else {
                // No standby and no holder: nothing to size.
                prop_assert!(pods.is_empty());
                return Ok(());
            };
            let zs: Vec<String> = (0..zones).map(|i| format!("z{i}")).collect();
            let mut deficit_total = 0u32;
            for (i, z) in zs.iter().enumerate() {
                let d = plan.per_zone[z].saturating_sub(bound[i]);
                deficit_total += d;
                let in_view = pods
                    .iter()
                    .filter(|p| p.node_name.is_none())
                    .filter(|p| p.node_selector.get(keys::LABEL_TOPOLOGY_ZONE) == Some(z))
                    .count() as u32;
                prop_assert!(in_view <= d, "zone {z}: {in_view} > {d}");
            }
            let existing = bound.iter().sum::<u32>() + pending as u32;
            let missing = count.saturating_sub(existing);
            let pending_in_view = pods.iter().filter(|p| p.node_name.is_none()).count() as u32;
            prop_assert_eq!(pending_in_view, deficit_total.min(pending as u32 + missing));
        }
    }
}
