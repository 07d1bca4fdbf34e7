//! Scale-down: which nodes of CloudEphemeral groups to drain and delete (the
//! cluster-autoscaler defaults of docs/peers.md §1).
//!
//! # Rules
//! * **Underutilized**: a Ready, not-leaving node of a scaling group whose requested
//!   utilization — the larger of (cpu requests / allocatable cpu) and (memory requests /
//!   allocatable memory), over every unfinished pod bound to it, DaemonSet pods included — is
//!   below [`ScalingConfig::scale_down_utilization_percent`] (50 %). [`ScaleDownState`] remembers
//!   since when; a node that stops being underutilized starts over.
//! * **Candidate**: underutilized for [`ScalingConfig::scale_down_unneeded_time`] (10 min), and
//!   no scale-up in the last [`ScalingConfig::scale_down_delay_after_add`] (10 min).
//! * **Blocked** when a pod that would be evicted (not DaemonSet, not mirror, not finished):
//!   - is covered by a PodDisruptionBudget with no disruption left (counting the evictions this
//!     pass already plans);
//!   - carries `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`;
//!   - uses local storage (`emptyDir`/`hostPath`), unless annotated safe-to-evict `"true"`;
//!   - runs in `kube-system`, is not a DaemonSet pod and no PDB covers it, unless annotated
//!     safe-to-evict `"true"`;
//!   - has no controller ([`ScalingConfig::block_unreplicated_pods`]), unless annotated
//!     safe-to-evict `"true"`;
//!   - carries a required constraint nodemgr does not model ([`Pod::unmodelled_constraints`]).
//! * **Fits elsewhere**: the pods to evict are packed, first-fit in [`super::placement`]'s
//!   order, onto the other Ready, schedulable, not-leaving nodes (any group, static ones too),
//!   the pods moved earlier in the same pass included, by every rule of
//!   [`super::placement`] — topology spread, pod affinity and anti-affinity counted over the
//!   cluster without the node (and the nodes removed before it in the pass) — so no pod is moved
//!   where it would violate a required constraint (docs/scheduling.md §3). A node that receives
//!   pods in a pass is not removed in that pass.
//! * **Never below `minPerZone`**: a zone keeps at least `minPerZone` healthy nodes.
//! * Zones replacing nodes of an outdated class ([`super::surge`]) are left to the rollout.
//! * Per pass at most [`ScalingConfig::max_empty_removals_per_pass`] empty nodes (nothing to
//!   evict) and [`ScalingConfig::max_busy_removals_per_pass`] nodes with pods; empty nodes go
//!   first, then the least utilized, then by name.
//!
//! The output is a list of [`ScalingCommand::RemoveNode`]: the executor drains each node
//! ([`super::start_removal`]) and deletes its machine, and lowers the zone's desired count.

use std::collections::{BTreeMap, HashMap};

use crate::drain::is_evictable;
use crate::model::{Node, Pod, PodDisruptionBudget, Timestamp, keys};

use super::bounds::{is_failed, zone_states};
use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::placement::{Bins, CPU, Demand, MEMORY, Placer, ResourceIndex, classify, trial_order};
use super::snapshot::ClusterSnapshot;
use super::topology::UniverseBuilder;
use crate::hash::FastHash;

/// What scale-down remembers between passes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScaleDownState {
    /// Since when each underutilized node has been underutilized.
    pub underutilized_since: BTreeMap<String, Timestamp>,
    /// When the last scale-up was ordered (the executor records it).
    pub last_scale_up: Option<Timestamp>,
}

/// One node to remove and where its pods go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// The node.
    pub node: String,
    /// Its group.
    pub group: String,
    /// Its zone.
    pub zone: String,
    /// Requested utilization, per mille.
    pub utilization_permille: u32,
    /// Each evicted pod (index into the snapshot's pods) and the node the simulation put it on.
    pub moves: Vec<(usize, String)>,
}

/// The scale-down decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScaleDownDecision {
    /// `RemoveNode` commands, one per removal.
    pub commands: Vec<ScalingCommand>,
    /// The removals with their simulated moves.
    pub removals: Vec<Removal>,
    /// The state for the next pass.
    pub state: ScaleDownState,
    /// Why candidates stay.
    pub notes: Vec<String>,
}

/// Requested utilization of every node, per mille (the larger of cpu and memory); nodes without
/// allocatable cpu or memory count as full.
fn utilization(requested: [i64; 2], node: &Node) -> u32 {
    let ratio = |used: i64, key: &str| {
        let alloc = node.allocatable.get(key).map_or(0, |q| q.0);
        if alloc <= 0 {
            return 1000;
        }
        (i128::from(used.max(0)) * 1000 / i128::from(alloc)).clamp(0, 1_000_000) as u32
    };
    ratio(requested[0], "cpu").max(ratio(requested[1], "memory"))
}

/// Why `pod` blocks the removal of its node, apart from PDBs.
fn blocker(pod: &Pod, covered_by_pdb: bool, config: &ScalingConfig) -> Option<&'static str> {
    if !pod.unmodelled_constraints.is_empty() {
        return Some("has a scheduling constraint nodemgr does not model");
    }
    match pod
        .annotations
        .get(keys::ANNOTATION_SAFE_TO_EVICT)
        .map(String::as_str)
    {
        Some("false") => return Some("annotated safe-to-evict: \"false\""),
        Some("true") => return None,
        _ => {}
    }
    if pod.has_local_storage {
        return Some("uses local storage");
    }
    if pod.namespace == "kube-system" && !covered_by_pdb {
        return Some("kube-system pod without a PodDisruptionBudget");
    }
    if config.block_unreplicated_pods && pod.owner.is_none() {
        return Some("has no controller");
    }
    None
}

/// Decides which nodes to remove at `now` (see the module docs). `state` is the previous
/// decision's [`ScaleDownDecision::state`] (`Default` at first).
pub fn plan_scale_down(
    snapshot: &ClusterSnapshot<'_>,
    state: &ScaleDownState,
    config: &ScalingConfig,
    now: Timestamp,
) -> ScaleDownDecision {
    let pods = snapshot.pods;
    let nodes = snapshot.nodes;
    let mut decision = ScaleDownDecision {
        state: ScaleDownState {
            underutilized_since: BTreeMap::new(),
            last_scale_up: state.last_scale_up,
        },
        ..ScaleDownDecision::default()
    };

    // Pods per node, requests per node.
    let node_at: HashMap<&str, usize, FastHash> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    // Every pod that matters is bound to a known node: the resource index is built from
    // those, in the same pass that takes their demand.
    let mut index = ResourceIndex::default();
    let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut demands: Vec<(usize, Demand)> = Vec::with_capacity(pods.len());
    // What the topology counters need, collected in the same pass (docs/scheduling.md §2).
    let mut universe = UniverseBuilder::default();
    for (i, p) in pods.iter().enumerate() {
        if p.is_terminal() {
            continue;
        }
        if let Some(&n) = p.node_name.as_deref().and_then(|n| node_at.get(n)) {
            on_node[n].push(i);
            demands.push((n, index.demand_indexing(p)));
            // A bound pod only counts by the anti-affinity it carries (the rest of its rules
            // are read if it is to move).
            if !p.pod_anti_affinity.is_empty() || !p.hostname_anti_affinity.is_empty() {
                universe.bound(p);
            }
        }
    }
    let index = index;
    let n_ext = index.len();
    // Summed demand per node: cpu, memory, pod slots, and extended resources.
    let mut used: Vec<[i64; 3]> = vec![[0; 3]; nodes.len()];
    let mut used_ext: Vec<i64> = vec![0; nodes.len() * n_ext];
    for (n, d) in demands {
        for (u, c) in used[n].iter_mut().zip(d.core) {
            *u += c;
        }
        for (e, v) in d.ext {
            used_ext[n * n_ext + e as usize] += v;
        }
    }
    let requested: Vec<[i64; 2]> = used.iter().map(|u| [u[CPU], u[MEMORY]]).collect();

    // Underutilized nodes of scaling groups.
    let threshold = config.scale_down_utilization_percent.saturating_mul(10);
    let mut candidates: Vec<(usize, u32)> = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let Some(group) = n.group() else { continue };
        if snapshot.group(group).is_none()
            || !n.ready
            || n.unschedulable
            || snapshot.is_leaving(n)
            || is_failed(n, config, now)
        {
            continue;
        }
        let u = utilization(requested[i], n);
        if u >= threshold {
            continue;
        }
        let since = state
            .underutilized_since
            .get(&n.name)
            .copied()
            .unwrap_or(now)
            .min(now);
        decision
            .state
            .underutilized_since
            .insert(n.name.clone(), since);
        if now.saturating_since(since) >= config.scale_down_unneeded_time {
            candidates.push((i, u));
        }
    }
    if candidates.is_empty() {
        return decision;
    }
    if let Some(last) = state.last_scale_up
        && now.saturating_since(last) < config.scale_down_delay_after_add
    {
        let wait = config.scale_down_delay_after_add - now.saturating_since(last);
        decision.notes.push(format!(
            "{} candidate(s) wait {}s more: a scale-up happened less than {}s ago",
            candidates.len(),
            wait.as_secs(),
            config.scale_down_delay_after_add.as_secs()
        ));
        return decision;
    }

    // Evictable pods of every candidate.
    let to_move: Vec<Vec<usize>> = candidates
        .iter()
        .map(|&(i, _)| {
            on_node[i]
                .iter()
                .copied()
                .filter(|&m| is_evictable(&pods[m]))
                .collect()
        })
        .collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        (!to_move[a].is_empty())
            .cmp(&!to_move[b].is_empty())
            .then_with(|| candidates[a].1.cmp(&candidates[b].1))
            .then_with(|| {
                nodes[candidates[a].0]
                    .name
                    .cmp(&nodes[candidates[b].0].name)
            })
    });

    // Zone floors; zones in a class rollout are left to it.
    let states = zone_states(snapshot, config, now);
    let mut spare: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    let mut rolling: Vec<(&str, &str)> = Vec::new();
    for (group, zones) in &states {
        for z in zones {
            spare.insert((*group, z.zone.as_str()), z.healthy().saturating_sub(z.min));
            if !z.outdated.is_empty() {
                rolling.push((*group, z.zone.as_str()));
            }
        }
    }

    // Destinations: every Ready, schedulable, not-leaving node, by name.
    let track = to_move
        .iter()
        .flatten()
        .any(|&m| !pods[m].hostname_anti_affinity.is_empty());
    let mut dest: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].ready && !nodes[i].unschedulable && !snapshot.is_leaving(&nodes[i]))
        .collect();
    dest.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
    // Topology counters, when a pod to move or a bound pod's anti-affinity needs them.
    for &m in to_move.iter().flatten() {
        let p = &pods[m];
        if p.has_topology_constraints() || !p.hostname_anti_affinity.is_empty() {
            universe.place(p);
        }
    }
    let universe = universe.build();
    let with_topology = universe.is_some();
    let mut bins = Bins::with_topology(index.len(), track, universe);
    let mut bin_of: Vec<Option<usize>> = vec![None; nodes.len()];
    for &i in &dest {
        let n = &nodes[i];
        let b = bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), true);
        bin_of[i] = Some(b);
        bins.occupy_all(
            b,
            on_node[i].iter().map(|&m| &pods[m]),
            used[i],
            &used_ext[i * n_ext..(i + 1) * n_ext],
        );
    }
    if with_topology {
        // Nodes that take no pods are topology domains all the same, with their pods.
        let mut others: Vec<usize> = (0..nodes.len()).filter(|&i| bin_of[i].is_none()).collect();
        others.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
        for i in others {
            let n = &nodes[i];
            let b = bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), false);
            bins.occupy_all(
                b,
                on_node[i].iter().map(|&m| &pods[m]),
                used[i],
                &used_ext[i * n_ext..(i + 1) * n_ext],
            );
        }
    }
    let classes = classify(pods, to_move.iter().flatten().copied(), &index);
    let mut class_of: HashMap<usize, usize, FastHash> = HashMap::default();
    for (c, class) in classes.iter().enumerate() {
        for &m in &class.members {
            class_of.insert(m, c);
        }
    }
    let mut placer = Placer::new(bins, classes.len());
    let mut no_fit: Vec<Option<usize>> = vec![None; classes.len()];
    let mut received = vec![false; placer.bins.len()];

    // PDBs by namespace, and disruptions this pass spends.
    let mut pdbs_in: HashMap<&str, Vec<usize>, FastHash> = HashMap::default();
    for (i, pdb) in snapshot.pdbs.iter().enumerate() {
        pdbs_in.entry(pdb.namespace.as_str()).or_default().push(i);
    }
    let mut spent: Vec<i32> = vec![0; snapshot.pdbs.len()];

    let (mut empty_done, mut busy_done) = (0usize, 0usize);
    for k in order {
        let (i, u) = candidates[k];
        let node = &nodes[i];
        let empty = to_move[k].is_empty();
        if (empty && empty_done >= config.max_empty_removals_per_pass)
            || (!empty && busy_done >= config.max_busy_removals_per_pass)
        {
            continue;
        }
        let group = node.group().unwrap_or_default();
        let zone = node.zone().unwrap_or_default();
        if rolling.contains(&(group, zone)) {
            decision.notes.push(format!(
                "{}: {group}/{zone} is replacing nodes of an outdated class",
                node.name
            ));
            continue;
        }
        let floor = spare.get(&(group, zone)).copied().unwrap_or(0);
        if floor == 0 {
            decision
                .notes
                .push(format!("{}: {group}/{zone} is at minPerZone", node.name));
            continue;
        }
        let Some(bin) = bin_of[i] else { continue };
        if received[bin] {
            decision.notes.push(format!(
                "{}: receives pods of a node removed in this pass",
                node.name
            ));
            continue;
        }
        // Blockers.
        let mut use_pdb: BTreeMap<usize, i32> = BTreeMap::new();
        let mut blocked: Option<String> = None;
        for &m in &to_move[k] {
            let pod = &pods[m];
            let covering: Vec<usize> = pdbs_in
                .get(pod.namespace.as_str())
                .into_iter()
                .flatten()
                .copied()
                .filter(|&d| snapshot.pdbs[d].covers(pod))
                .collect();
            if let Some(why) = blocker(pod, !covering.is_empty(), config) {
                blocked = Some(format!("pod {} {why}", pod.key()));
                break;
            }
            for d in covering {
                let used = use_pdb.entry(d).or_insert(0);
                *used += 1;
                let pdb: &PodDisruptionBudget = &snapshot.pdbs[d];
                if pdb.disruptions_allowed - spent[d] - *used < 0 {
                    blocked = Some(format!(
                        "pod {}: PodDisruptionBudget {}/{} allows no more disruptions",
                        pod.key(),
                        pdb.namespace,
                        pdb.name
                    ));
                    break;
                }
            }
            if blocked.is_some() {
                break;
            }
        }
        if let Some(why) = blocked {
            decision.notes.push(format!("{}: {why}", node.name));
            continue;
        }
        // Fit elsewhere.
        let mut items: Vec<(usize, usize)> = to_move[k]
            .iter()
            .filter_map(|&m| class_of.get(&m).map(|&c| (c, m)))
            .collect();
        items.sort_by(|&x, &y| trial_order(pods, &classes, x, y));
        let moves = if empty {
            placer.disable(bin);
            Vec::new()
        } else {
            match placer.try_empty_bin(bin, &items, pods, &classes, &mut no_fit) {
                Ok(moves) => moves,
                Err(at) => {
                    decision.notes.push(format!(
                        "{}: pod {} fits no other node",
                        node.name,
                        pods[items[at].1].key()
                    ));
                    continue;
                }
            }
        };
        for (d, n) in use_pdb {
            spent[d] += n;
        }
        if let Some(s) = spare.get_mut(&(group, zone)) {
            *s -= 1;
        }
        let moves: Vec<(usize, String)> = moves
            .into_iter()
            .map(|(_, m, to)| {
                received[to] = true;
                (m, nodes[dest[to]].name.clone())
            })
            .collect();
        if empty {
            empty_done += 1;
        } else {
            busy_done += 1;
        }
        decision.commands.push(ScalingCommand::RemoveNode {
            node: node.name.clone(),
            group: group.to_owned(),
            zone: zone.to_owned(),
            why: Why::Underutilized {
                utilization_percent: u / 10,
                pods_moved: moves.len(),
            },
        });
        decision.removals.push(Removal {
            node: node.name.clone(),
            group: group.to_owned(),
            zone: zone.to_owned(),
            utilization_permille: u,
            moves,
        });
        decision.state.underutilized_since.remove(&node.name);
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::is_evictable;
    use crate::model::{LabelSelector, NodeGroup, Owner, PodPhase};
    use crate::scaling::testkit::{
        self, Sizes, World, pod, pods_by_node, scaling_group, valid_node,
    };
    use crate::scaling::{InstanceClass, node_shape, template_node};
    use proptest::prelude::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    struct Setup {
        groups: Vec<NodeGroup>,
        classes: Vec<InstanceClass>,
        nodes: Vec<Node>,
        pods: Vec<Pod>,
        pdbs: Vec<PodDisruptionBudget>,
    }

    impl Setup {
        fn new(min: i64, nodes: &[&str]) -> Self {
            let groups = vec![scaling_group(
                "g",
                "medium",
                min,
                10,
                0,
                Some(vec!["a".into()]),
            )];
            let classes = testkit::classes();
            let shape = node_shape(&groups[0], &classes[1]);
            let nodes = nodes
                .iter()
                .map(|n| template_node(&groups[0], &classes[1], &shape, "a", n))
                .collect();
            Self {
                groups,
                classes,
                nodes,
                pods: Vec::new(),
                pdbs: Vec::new(),
            }
        }

        fn put(&mut self, node: &str, mut p: Pod) -> &mut Pod {
            p.node_name = Some(node.into());
            p.phase = PodPhase::Running;
            self.pods.push(p);
            self.pods.last_mut().unwrap()
        }

        fn plan(
            &self,
            state: &ScaleDownState,
            config: &ScalingConfig,
            now: Timestamp,
        ) -> ScaleDownDecision {
            let snap = ClusterSnapshot::new(
                &self.nodes,
                &self.pods,
                &self.pdbs,
                &self.groups,
                &self.classes,
                &[],
            );
            plan_scale_down(&snap, state, config, now)
        }
    }

    fn long_ago(names: &[&str]) -> ScaleDownState {
        ScaleDownState {
            underutilized_since: names.iter().map(|n| (n.to_string(), t(0))).collect(),
            last_scale_up: None,
        }
    }

    #[test]
    fn waits_for_the_unneeded_time_then_moves_the_pods() {
        let mut s = Setup::new(0, &["n1", "n2"]);
        s.put("n1", pod("work", "small", 500, 512));
        s.put("n2", pod("work", "big", 2000, 512));
        let cfg = ScalingConfig::default();
        let d = s.plan(&ScaleDownState::default(), &cfg, t(1000));
        assert!(d.commands.is_empty());
        assert_eq!(
            d.state.underutilized_since.keys().collect::<Vec<_>>(),
            ["n1"]
        );
        let d = s.plan(&d.state, &cfg, t(1000 + 599));
        assert!(d.commands.is_empty());
        let d = s.plan(&d.state, &cfg, t(1000 + 600));
        assert_eq!(d.removals.len(), 1, "{:?}", d.notes);
        assert_eq!(d.removals[0].node, "n1");
        assert_eq!(d.removals[0].moves, vec![(0, "n2".to_string())]);
        assert!(
            d.commands[0]
                .to_string()
                .contains("underutilized (12% requested)"),
            "{}",
            d.commands[0]
        );
    }

    #[test]
    fn blockers_keep_the_node() {
        type Change = Box<dyn Fn(&mut Pod)>;
        let cases: Vec<(&str, Change)> = vec![
            (
                "safe-to-evict",
                Box::new(|p: &mut Pod| {
                    p.annotations
                        .insert(keys::ANNOTATION_SAFE_TO_EVICT.into(), "false".into());
                }),
            ),
            (
                "local storage",
                Box::new(|p: &mut Pod| p.has_local_storage = true),
            ),
            (
                "kube-system",
                Box::new(|p: &mut Pod| p.namespace = "kube-system".into()),
            ),
            ("no controller", Box::new(|p: &mut Pod| p.owner = None)),
            (
                "PodDisruptionBudget",
                Box::new(|p: &mut Pod| {
                    p.labels.insert("app".into(), "db".into());
                }),
            ),
        ];
        for (what, change) in cases {
            let mut s = Setup::new(0, &["n1", "n2"]);
            change(s.put("n1", pod("work", "p", 500, 512)));
            s.pdbs.push(PodDisruptionBudget {
                namespace: "work".into(),
                name: "db".into(),
                selector: LabelSelector {
                    match_labels: Some([("app".to_string(), "db".to_string())].into()),
                    match_expressions: None,
                },
                disruptions_allowed: 0,
            });
            let d = s.plan(
                &long_ago(&["n1", "n2"]),
                &ScalingConfig::default(),
                t(10_000),
            );
            let removed: Vec<&str> = d.removals.iter().map(|r| r.node.as_str()).collect();
            assert_eq!(removed, ["n2"], "{what}");
            assert!(
                d.notes
                    .iter()
                    .any(|n| n.starts_with("n1:") && n.contains(what)),
                "{what}: {:?}",
                d.notes
            );
        }
        // safe-to-evict "true" lifts local storage, kube-system and no-controller.
        let mut s = Setup::new(0, &["n1", "n2"]);
        let p = s.put("n1", pod("kube-system", "p", 500, 512));
        p.has_local_storage = true;
        p.owner = None;
        p.annotations
            .insert(keys::ANNOTATION_SAFE_TO_EVICT.into(), "true".into());
        let cfg = ScalingConfig {
            max_empty_removals_per_pass: 0,
            ..ScalingConfig::default()
        };
        let d = s.plan(&long_ago(&["n1", "n2"]), &cfg, t(10_000));
        assert_eq!(d.removals.len(), 1);
        assert_eq!(d.removals[0].node, "n1");
    }

    #[test]
    fn min_per_zone_limits_and_order() {
        let mut s = Setup::new(2, &["e1", "e2", "e3", "b1", "b2"]);
        s.put("b1", pod("work", "x", 300, 256));
        s.put("b2", pod("work", "y", 200, 256));
        let mut ds = pod("kube-system", "ds", 50, 64);
        ds.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "ds".into(),
        });
        s.put("e1", ds);
        let all = long_ago(&["e1", "e2", "e3", "b1", "b2"]);
        let cfg = ScalingConfig::default();
        let d = s.plan(&all, &cfg, t(10_000));
        // 5 nodes, min 2: three go, the empty ones first (DaemonSet pods do not count).
        let removed: Vec<&str> = d.removals.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(removed, ["e2", "e3", "e1"], "least utilized first");
        assert!(d.notes.iter().any(|n| n.contains("at minPerZone")));
        let cfg = ScalingConfig {
            max_empty_removals_per_pass: 1,
            ..ScalingConfig::default()
        };
        let mut s2 = Setup::new(0, &["e1", "e2", "e3", "b1", "b2"]);
        s2.pods = s.pods.clone();
        let d = s2.plan(&all, &cfg, t(10_000));
        let removed: Vec<&str> = d.removals.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(
            removed,
            ["e2", "b2"],
            "one empty, then the least utilized busy one"
        );
    }

    #[test]
    fn no_scale_down_right_after_a_scale_up_nor_without_room() {
        let mut s = Setup::new(0, &["n1", "n2"]);
        s.put("n1", pod("work", "a", 1500, 512));
        s.put("n2", pod("work", "b", 1500, 512));
        let mut state = long_ago(&["n1", "n2"]);
        state.last_scale_up = Some(t(9_900));
        let d = s.plan(&state, &ScalingConfig::default(), t(10_000));
        assert!(d.commands.is_empty());
        assert!(d.notes[0].contains("scale-up"), "{:?}", d.notes);
        state.last_scale_up = None;
        // 38% each; moving either onto the other works once.
        let d = s.plan(&state, &ScalingConfig::default(), t(10_000));
        assert_eq!(d.removals.len(), 1);
        // Excluding each other by hostname anti-affinity, neither fits the other's node.
        for p in &mut s.pods {
            p.labels.insert("app".into(), "x".into());
            p.hostname_anti_affinity = vec![LabelSelector {
                match_labels: Some([("app".to_string(), "x".to_string())].into()),
                match_expressions: None,
            }];
        }
        let d = s.plan(&state, &ScalingConfig::default(), t(10_000));
        assert!(d.commands.is_empty(), "{:?}", d.removals);
        assert!(
            d.notes.iter().any(|n| n.contains("fits no other node")),
            "{:?}",
            d.notes
        );
    }

    fn utilization_of(w: &World, node: &Node) -> u32 {
        let on = pods_by_node(&w.pods);
        let list = on.get(node.name.as_str()).cloned().unwrap_or_default();
        let sum = |k: &str| {
            list.iter()
                .filter_map(|p| p.requests.get(k))
                .map(|q| q.0)
                .sum::<i64>()
        };
        let ratio = |k: &str| {
            let a = node.allocatable.get(k).map_or(0, |q| q.0);
            if a <= 0 {
                1000
            } else {
                (i128::from(sum(k)) * 1000 / i128::from(a)) as u32
            }
        };
        ratio("cpu").max(ratio("memory"))
    }

    /// Guards `removals_are_safe` against passing vacuously: its worlds do produce removals
    /// with moves, and blocked candidates.
    #[test]
    fn property_worlds_exercise_removals() {
        let (mut moved, mut blocked) = (0, 0);
        for seed in 0..60 {
            let w = testkit::world(
                seed,
                Sizes {
                    groups: 3,
                    nodes_per_zone: 3,
                    deployments: 0,
                    max_per_zone: 5,
                },
            );
            let snap = ClusterSnapshot::new(
                &w.nodes,
                &w.pods,
                &w.pdbs,
                &w.groups,
                &w.classes,
                &w.cloud_zones,
            );
            let cfg = ScalingConfig {
                max_busy_removals_per_pass: 5,
                ..ScalingConfig::default()
            };
            let state = ScaleDownState {
                underutilized_since: w.nodes.iter().map(|n| (n.name.clone(), t(0))).collect(),
                last_scale_up: None,
            };
            let d = plan_scale_down(&snap, &state, &cfg, t(1_000_000));
            moved += d.removals.iter().filter(|r| !r.moves.is_empty()).count();
            blocked += d.notes.iter().filter(|n| n.contains("pod ")).count();
        }
        assert!(
            moved > 20 && blocked > 20,
            "moved {moved}, blocked {blocked}"
        );
    }

    fn constrained_world(seed: u64, groups: usize, per_zone: u64) -> World {
        let mut w = testkit::world(
            seed,
            Sizes {
                groups,
                nodes_per_zone: per_zone,
                deployments: 0,
                max_per_zone: 5,
            },
        );
        testkit::constrain(&mut w, seed);
        w
    }

    fn plan_all(w: &World, busy: usize) -> ScaleDownDecision {
        let snap = ClusterSnapshot::new(
            &w.nodes,
            &w.pods,
            &w.pdbs,
            &w.groups,
            &w.classes,
            &w.cloud_zones,
        );
        let cfg = ScalingConfig {
            max_busy_removals_per_pass: busy,
            ..ScalingConfig::default()
        };
        let state = ScaleDownState {
            underutilized_since: w.nodes.iter().map(|n| (n.name.clone(), t(0))).collect(),
            last_scale_up: None,
        };
        plan_scale_down(&snap, &state, &cfg, t(1_000_000))
    }

    /// Guards `removals_never_break_a_constraint` against passing vacuously: its worlds move
    /// pods carrying constraints, and keep nodes because a move would break one.
    #[test]
    fn constrained_worlds_move_constrained_pods() {
        let (mut moved, mut refused) = (0, 0);
        for seed in 0..80 {
            let w = constrained_world(seed, 3, 3);
            let d = plan_all(&w, 5);
            moved += d
                .removals
                .iter()
                .flat_map(|r| &r.moves)
                .filter(|(m, _)| w.pods[*m].has_topology_constraints())
                .count();
            // The same world without constraints: nodes kept only because of them.
            let mut free = w.clone();
            for p in &mut free.pods {
                p.topology_spread.clear();
                p.pod_affinity.clear();
                p.pod_anti_affinity.clear();
                p.preferred_pod_affinity.clear();
                p.preferred_pod_anti_affinity.clear();
            }
            let unconstrained = plan_all(&free, 5);
            refused += unconstrained
                .removals
                .len()
                .saturating_sub(d.removals.len());
        }
        assert!(
            moved > 20 && refused > 5,
            "moved {moved}, refused {refused}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// With topology spread and pod (anti-)affinity on bound pods, removing the decision's
        /// nodes in order and moving each pod where it says passes the reference at every move
        /// (docs/scheduling.md §4): scale-down never moves a pod where it would violate a
        /// required constraint.
        #[test]
        fn removals_never_break_a_constraint(seed in any::<u64>(), groups in 1usize..4, per_zone in 1u64..5, busy in 1usize..6) {
            let w = constrained_world(seed, groups, per_zone);
            let d = plan_all(&w, busy);
            let snap = ClusterSnapshot::new(&w.nodes, &w.pods, &w.pdbs, &w.groups, &w.classes, &w.cloud_zones);
            if let Err(e) = crate::scaling::reference::replay_scale_down(&snap, &d) {
                return Err(TestCaseError::fail(e));
            }
            prop_assert_eq!(&d, &plan_all(&w, busy), "deterministic");
        }

        /// Removals are underutilized long enough, never below minPerZone, within the per-pass
        /// limits, unblocked (PDBs counted over the whole pass), and every evicted pod lands on
        /// a remaining node that it fits together with everything else moved there.
        #[test]
        fn removals_are_safe(seed in any::<u64>(), groups in 1usize..4, per_zone in 1u64..5, busy in 1usize..6, empty in 0usize..6) {
            let w = testkit::world(seed, Sizes { groups, nodes_per_zone: per_zone, deployments: 0, max_per_zone: 5 });
            let snap = ClusterSnapshot::new(&w.nodes, &w.pods, &w.pdbs, &w.groups, &w.classes, &w.cloud_zones);
            let cfg = ScalingConfig { max_busy_removals_per_pass: busy, max_empty_removals_per_pass: empty, ..ScalingConfig::default() };
            let now = Timestamp::from_secs(1_000_000);
            let state = ScaleDownState {
                underutilized_since: w.nodes.iter().map(|n| (n.name.clone(), Timestamp::from_secs(0))).collect(),
                last_scale_up: None,
            };
            let d = plan_scale_down(&snap, &state, &cfg, now);
            prop_assert_eq!(&d, &plan_scale_down(&snap, &state, &cfg, now), "deterministic");
            prop_assert_eq!(d.commands.len(), d.removals.len());
            let removed: Vec<&str> = d.removals.iter().map(|r| r.node.as_str()).collect();
            let states = zone_states(&snap, &cfg, now);
            let mut on = pods_by_node(&w.pods);
            let (mut n_empty, mut n_busy) = (0, 0);
            let mut spent: BTreeMap<&str, i32> = BTreeMap::new();
            for r in &d.removals {
                let node = w.nodes.iter().find(|n| n.name == r.node).unwrap();
                prop_assert!(node.ready && !node.unschedulable);
                prop_assert!(snap.group(node.group().unwrap()).is_some());
                prop_assert!(utilization_of(&w, node) < 500);
                let evicted: Vec<&Pod> = on.get(r.node.as_str()).cloned().unwrap_or_default()
                    .into_iter().filter(|p| is_evictable(p)).collect();
                if evicted.is_empty() { n_empty += 1 } else { n_busy += 1 }
                prop_assert_eq!(evicted.len(), r.moves.len());
                for p in &evicted {
                    let safe = p.annotations.get(keys::ANNOTATION_SAFE_TO_EVICT).map(String::as_str);
                    prop_assert!(safe != Some("false"));
                    let pdbs: Vec<&PodDisruptionBudget> = w.pdbs.iter().filter(|b| b.covers(p)).collect();
                    if safe != Some("true") {
                        prop_assert!(!p.has_local_storage);
                        prop_assert!(p.owner.is_some());
                        prop_assert!(p.namespace != "kube-system" || !pdbs.is_empty());
                    }
                    for b in pdbs {
                        let n = spent.entry(b.name.as_str()).or_default();
                        *n += 1;
                        prop_assert!(*n <= b.disruptions_allowed, "PDB {} overspent", b.name);
                    }
                }
                for &(m, ref to) in &r.moves {
                    prop_assert!(!removed.contains(&to.as_str()), "moved onto a removed node");
                    on.entry(to.as_str()).or_default().push(&w.pods[m]);
                }
            }
            prop_assert!(n_empty <= empty && n_busy <= busy);
            for r in &d.removals {
                for (_, to) in &r.moves {
                    let node = w.nodes.iter().find(|n| &n.name == to).unwrap();
                    prop_assert!(node.ready && !node.unschedulable);
                    valid_node(node, &on[to.as_str()]).map_err(TestCaseError::fail)?;
                }
            }
            for (group, zones) in &states {
                for z in zones {
                    let gone = d.removals.iter().filter(|r| r.group == *group && r.zone == z.zone).count() as u32;
                    if gone > 0 {
                        prop_assert!(z.healthy() - gone >= z.min);
                    }
                }
            }
        }
    }
}
