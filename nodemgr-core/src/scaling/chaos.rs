//! The chaos monkey (docs/deckhouse.md §7): a group with `chaos.mode: DrainAndDelete`
//! loses one random node per `chaos.period` (default `6h`), drained and deleted, so that its
//! workloads prove they survive node loss.
//!
//! # Rules
//! * **One victim in flight, cluster-wide.** The victim is marked with the annotation
//!   `node.deckhouse.io/chaos-monkey-victim` before its drain ([`ChaosDecision::mark`]), and no
//!   new victim is chosen while any node carries that annotation. Deckhouse's hook gates on a
//!   Machine *label* of that key but marks its victim with an *annotation* (docs/deckhouse.md §7, §11), so
//!   its gate never trips and a second victim can be picked while the first one is still
//!   draining; nodemgr checks the marker it sets.
//! * **Only a whole, ready group**: every node of the group Ready and none leaving, no machine
//!   upcoming, the desired count (summed over zones) above 1 and equal to the Ready count
//!   (Deckhouse: `desired > 1 && desired == ready`).
//! * **Once per period**: a group's next victim comes no sooner than `chaos.period` after its
//!   previous one; a group seen for the first time starts its period then (no victim at
//!   start-up). Deckhouse instead fires each minute with probability 1/period-minutes; the mean
//!   rate is the same, the spacing is not random.
//! * **Random victim**: the node is picked by the caller's `seed` mixed with the group name and
//!   the period number, so the core stays pure and a run is reproducible. When several groups
//!   are due, the most overdue goes first.
//!
//! A group with an invalid `chaos.period` gets no victim and a note.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::time::Duration;

use crate::disruption::DisruptionReason;
use crate::model::{ChaosMode, Node, Timestamp, keys, spec_facts};

use super::bounds::zone_states;
use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::snapshot::{ClusterSnapshot, ScalingGroup};
use crate::hash::{Fnv, mix64};

/// What the chaos monkey remembers between passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChaosState {
    /// Per group: when its current period started (its last victim, or when chaos was first
    /// seen enabled).
    pub period_start: BTreeMap<String, Timestamp>,
}

/// The chaos monkey's decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChaosDecision {
    /// The node to annotate `node.deckhouse.io/chaos-monkey-victim: ""` before anything else.
    pub mark: Option<String>,
    /// The victim's removal (after the mark).
    pub commands: Vec<ScalingCommand>,
    /// The state for the next pass.
    pub state: ChaosState,
    /// Why no victim.
    pub notes: Vec<String>,
}

/// The group's chaos period when `DrainAndDelete` is on; `Err` with a note for a bad period.
fn chaos_period(group: &ScalingGroup<'_>) -> Option<Result<Duration, String>> {
    let chaos = group.group.spec.chaos.as_ref()?;
    if chaos.mode != Some(ChaosMode::DrainAndDelete) {
        return None;
    }
    Some(match chaos.period.as_deref() {
        None => Ok(spec_facts::CHAOS_PERIOD_DEFAULT_DURATION),
        Some(p) => spec_facts::read_chaos_period(p).map_err(|e| format!("chaos.period {e}")),
    })
}

/// Chooses at most one victim at `now` (see the module docs). `state` is the previous
/// decision's state; `seed` is the caller's randomness.
pub fn plan_chaos(
    snapshot: &ClusterSnapshot<'_>,
    state: &ChaosState,
    seed: u64,
    config: &ScalingConfig,
    now: Timestamp,
) -> ChaosDecision {
    let mut decision = ChaosDecision::default();
    let in_flight: Vec<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| n.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM))
        .map(|n| n.name.as_str())
        .collect();
    let states = zone_states(snapshot, config, now);
    // (overdue by, group, period) of the groups due.
    let mut due: Vec<(Duration, &ScalingGroup<'_>, Duration)> = Vec::new();
    for group in &snapshot.groups {
        let name = group.name();
        let period = match chaos_period(group) {
            None => continue,
            Some(Err(note)) => {
                decision.notes.push(format!("{name}: {note}"));
                continue;
            }
            Some(Ok(p)) => p,
        };
        let start = state.period_start.get(name).copied().unwrap_or(now);
        decision.state.period_start.insert(name.to_owned(), start);
        let elapsed = now.saturating_since(start);
        if elapsed < period {
            continue;
        }
        let zones = states.get(name).map(Vec::as_slice).unwrap_or_default();
        let desired: u32 = zones
            .iter()
            .filter(|z| z.in_group_zones)
            .map(|z| z.desired)
            .sum();
        let nodes: usize = zones.iter().map(|z| z.nodes.len()).sum();
        let ready: u32 = zones.iter().map(|z| z.ready()).sum();
        let leaving: usize = zones.iter().map(|z| z.leaving.len()).sum();
        let upcoming: u32 = zones.iter().map(|z| z.upcoming).sum();
        let whole = desired > 1
            && desired == ready
            && u32::try_from(nodes).ok() == Some(ready)
            && leaving == 0
            && upcoming == 0;
        if !whole {
            decision.notes.push(format!(
                "{name}: due, but not whole and ready (desired {desired}, nodes {nodes}, ready {ready}, leaving {leaving}, upcoming {upcoming})"
            ));
            continue;
        }
        due.push((elapsed - period, group, period));
    }
    if !in_flight.is_empty() {
        if !due.is_empty() {
            decision.notes.push(format!(
                "victim {} still in flight: no new victim",
                in_flight.join(", ")
            ));
        }
        return decision;
    }
    due.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name().cmp(b.1.name())));
    let Some(&(_, group, period)) = due.first() else {
        return decision;
    };
    let name = group.name();
    let mut candidates: Vec<&Node> = states
        .get(name)
        .into_iter()
        .flatten()
        .flat_map(|z| z.nodes.iter().copied())
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let mut h = Fnv::default();
    h.write(name.as_bytes());
    let period_number = u64::try_from(now.as_millis()).unwrap_or(0)
        / u64::try_from(period.as_millis()).unwrap_or(u64::MAX).max(1);
    let roll = mix64(seed ^ h.finish() ^ mix64(period_number));
    let Some(victim) = candidates
        .get((roll % candidates.len().max(1) as u64) as usize)
        .copied()
    else {
        return decision;
    };
    decision.mark = Some(victim.name.clone());
    decision.commands.push(ScalingCommand::RemoveNode {
        node: victim.name.clone(),
        group: name.to_owned(),
        zone: victim.zone().unwrap_or_default().to_owned(),
        why: Why::Disruption(DisruptionReason::Chaos),
    });
    decision.state.period_start.insert(name.to_owned(), now);
    decision
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Chaos, NodeGroup};
    use crate::scaling::testkit::{classes, scaling_group};
    use crate::scaling::{InstanceClass, node_shape, template_node};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn chaos_group(name: &str, period: Option<&str>) -> NodeGroup {
        let mut g = scaling_group(name, "small", 0, 5, 0, Some(vec!["a".into(), "b".into()]));
        g.spec.chaos = Some(Chaos {
            mode: Some(ChaosMode::DrainAndDelete),
            period: period.map(Into::into),
        });
        g
    }

    fn nodes_of(g: &NodeGroup, class: &InstanceClass, n: usize) -> Vec<Node> {
        let shape = node_shape(g, class);
        (0..n)
            .map(|i| {
                let zone = if i % 2 == 0 { "a" } else { "b" };
                template_node(g, class, &shape, zone, &format!("{}-{i}", g.name()))
            })
            .collect()
    }

    fn min(m: i64) -> Timestamp {
        Timestamp::from_secs(m * 60)
    }

    #[test]
    fn one_victim_per_period_only_when_whole_and_nothing_in_flight() {
        let classes = classes();
        let groups = vec![chaos_group("g", Some("1h")), chaos_group("h", Some("3h"))];
        let mut nodes = nodes_of(&groups[0], &classes[0], 4);
        nodes.extend(nodes_of(&groups[1], &classes[0], 2));
        let cfg = ScalingConfig::default();
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        // First sight starts the period.
        let d = plan_chaos(&snap, &ChaosState::default(), 7, &cfg, min(0));
        assert!(d.mark.is_none());
        let d = plan_chaos(&snap, &d.state, 7, &cfg, min(59));
        assert!(d.mark.is_none());
        let d = plan_chaos(&snap, &d.state, 7, &cfg, min(60));
        let victim = d.mark.clone().expect("a victim after one period");
        assert!(victim.starts_with("g-"), "{victim}");
        assert!(
            matches!(&d.commands[0], ScalingCommand::RemoveNode { node, why: Why::Disruption(DisruptionReason::Chaos), .. } if *node == victim)
        );
        let state = d.state;
        // The victim carries the annotation: nothing more, even when h is due.
        nodes
            .iter_mut()
            .find(|n| n.name == victim)
            .unwrap()
            .annotations
            .insert(keys::ANNOTATION_CHAOS_MONKEY_VICTIM.into(), String::new());
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        let d = plan_chaos(&snap, &state, 7, &cfg, min(200));
        assert!(d.mark.is_none());
        assert!(
            d.notes.iter().any(|n| n.contains("in flight")),
            "{:?}",
            d.notes
        );
        // Gone, not replaced yet: not whole.
        nodes.retain(|n| n.name != victim);
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]).with_desired(
            [
                (("g".to_string(), "a".to_string()), 2),
                (("g".to_string(), "b".to_string()), 2),
            ]
            .into(),
        );
        // g is due but not whole; h is whole and due (3 h), and nothing is in flight: h goes.
        let d = plan_chaos(&snap, &state, 7, &cfg, min(200));
        assert!(
            d.notes[0].starts_with("g: due, but not whole"),
            "{:?}",
            d.notes
        );
        assert!(
            d.mark.as_deref().is_some_and(|v| v.starts_with("h-")),
            "{:?}",
            d.mark
        );
    }

    #[test]
    fn bad_period_and_single_node_groups_get_no_victim() {
        let classes = classes();
        let groups = vec![chaos_group("bad", Some("soon")), chaos_group("one", None)];
        let mut nodes = nodes_of(&groups[1], &classes[0], 1);
        nodes.extend(nodes_of(&groups[0], &classes[0], 3));
        let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[]);
        let state = ChaosState {
            period_start: [("bad".to_string(), min(0)), ("one".to_string(), min(0))].into(),
        };
        let d = plan_chaos(&snap, &state, 1, &ScalingConfig::default(), min(100_000));
        assert!(d.mark.is_none());
        assert!(
            d.notes.iter().any(|n| n.contains("\"soon\"")),
            "{:?}",
            d.notes
        );
        assert!(
            d.notes
                .iter()
                .any(|n| n.starts_with("one: due, but not whole")),
            "{:?}",
            d.notes
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Over two days of passes every 10 minutes, with victims drained for a while and
        /// replaced later: never two victims in flight, a victim only from a whole group, and a
        /// group's victims at least one period apart.
        #[test]
        fn never_two_victims_in_flight(seed in any::<u64>(), drain in 0u32..8, boot in 0u32..8, periods in prop::collection::vec(1u32..5, 1..4)) {
            let classes = classes();
            let groups: Vec<NodeGroup> = periods.iter().enumerate()
                .map(|(i, p)| chaos_group(&format!("g{i}"), Some(&format!("{p}h")))).collect();
            let mut nodes: Vec<Node> = groups.iter().flat_map(|g| nodes_of(g, &classes[0], 4)).collect();
            let desired: std::collections::BTreeMap<(String, String), u32> = groups.iter()
                .flat_map(|g| [((g.name().to_string(), "a".to_string()), 2), ((g.name().to_string(), "b".to_string()), 2)]).collect();
            let cfg = ScalingConfig::default();
            let mut state = ChaosState::default();
            let mut draining: Vec<(String, u32)> = Vec::new();
            let mut replacing: Vec<(String, String, u32)> = Vec::new();
            let mut last: std::collections::BTreeMap<String, Timestamp> = Default::default();
            let mut serial = 0;
            let mut victims = 0;
            for pass in 0..(2 * 24 * 6) {
                let now = min(10 * pass);
                // Executor.
                draining.retain_mut(|(name, left)| {
                    if *left == 0 { nodes.retain(|n| &n.name != name); false } else { *left -= 1; true }
                });
                replacing.retain_mut(|(group, zone, left)| {
                    if *left == 0 {
                        serial += 1;
                        let g = groups.iter().find(|g| g.name() == group).unwrap();
                        let shape = node_shape(g, &classes[0]);
                        nodes.push(template_node(g, &classes[0], &shape, zone, &format!("r{serial}")));
                        false
                    } else { *left -= 1; true }
                });
                let upcoming: Vec<crate::scaling::Upcoming> = replacing.iter().map(|(g, z, _)| crate::scaling::Upcoming { group: g.clone(), zone: z.clone(), count: 1 }).collect();
                let leaving: BTreeSet<String> = draining.iter().map(|(n, _)| n.clone()).collect();
                let snap = ClusterSnapshot::new(&nodes, &[], &[], &groups, &classes, &[])
                    .with_desired(desired.clone()).with_upcoming(upcoming).with_leaving(leaving);
                let marked = nodes.iter().filter(|n| n.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM)).count();
                prop_assert!(marked <= 1);
                let d = plan_chaos(&snap, &state, seed, &cfg, now);
                state = d.state.clone();
                if let Some(victim) = d.mark {
                    victims += 1;
                    prop_assert_eq!(marked, 0, "second victim while one is in flight");
                    prop_assert!(draining.is_empty());
                    let n = nodes.iter_mut().find(|n| n.name == victim).unwrap();
                    let group = n.group().unwrap().to_string();
                    prop_assert!(!replacing.iter().any(|(g, _, _)| *g == group), "victim from a group that is not whole");
                    let period = Duration::from_secs(3600 * u64::from(periods[group[1..].parse::<usize>().unwrap()]));
                    if let Some(prev) = last.insert(group.clone(), now) {
                        prop_assert!(now.saturating_since(prev) >= period);
                    }
                    n.annotations.insert(keys::ANNOTATION_CHAOS_MONKEY_VICTIM.into(), String::new());
                    draining.push((victim.clone(), drain));
                    replacing.push((group, n.zone().unwrap().to_string(), drain + boot));
                }
            }
            prop_assert!(victims > 0);
        }
    }
}
