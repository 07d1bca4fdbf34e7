//! Standby: warm empty nodes kept in every zone of a group, held by standby-holder pods of the
//! lowest priority class (docs/deckhouse.md §8).
//!
//! # Rules
//! * **Count** ([`standby_count`]): `cloudInstances.standby` as an absolute number, or a
//!   percentage of `maxPerZone × zones` (floored, at least 1 when the percentage is not 0);
//!   capped at `(maxPerZone − minPerZone) × zones`. Facts' examples: `30` → 18 for max 10,
//!   min 1, 2 zones; `20%` of 20 × 3 → 12.
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
//! which to create and which to delete (pending ones, then the highest index, first).

use std::collections::BTreeMap;

use crate::model::{
    Amount, IntOrStringError, LabelSelector, Owner, Pod, PodPhase, Quantity, Toleration, keys,
};

use super::snapshot::{ClusterSnapshot, ScalingGroup};

/// Priority of standby-holder pods: below any workload. Deckhouse's `standby` priority class
/// value is not in the facts; nodemgr uses −1000.
pub const STANDBY_PRIORITY: i32 = -1000;

/// Default `standbyHolder.overprovisioningRate`: 50 % of a node's capacity.
pub const DEFAULT_OVERPROVISIONING_RATE: i64 = 50;

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

/// The `index`-th holder pod of `group` in `zone` (see the module docs), pending.
pub fn holder_pod(group: &ScalingGroup<'_>, zone: &str, index: u32) -> Option<Pod> {
    let shape = group.shape()?;
    let rate = group
        .group
        .spec
        .cloud_instances
        .as_ref()
        .and_then(|c| c.standby_holder.as_ref())
        .and_then(|h| h.overprovisioning_rate)
        .filter(|r| (1..=100).contains(r))
        .unwrap_or(DEFAULT_OVERPROVISIONING_RATE);
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
        name: format!("{}{name}-{zone}-{index}", keys::STANDBY_HOLDER_PREFIX),
        uid: String::new(),
        node_name: None,
        labels: holder_labels(name),
        annotations: BTreeMap::new(),
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
        node_selector: [
            (keys::LABEL_NODE_GROUP.to_owned(), name.to_owned()),
            (keys::LABEL_TOPOLOGY_ZONE.to_owned(), zone.to_owned()),
        ]
        .into(),
        required_node_affinity: Vec::new(),
        hostname_anti_affinity: vec![LabelSelector {
            match_labels: Some(holder_labels(name)),
            match_expressions: None,
        }],
        tolerations,
        has_local_storage: false,
        phase: PodPhase::Pending,
        ..Pod::default()
    })
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
    use crate::model::{IntOrString, NodeGroup};
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
    }
}
