//! Scale-down: which nodes of CloudEphemeral groups to drain and delete (issue 4 item 3; anchors
//! §1 cluster-autoscaler defaults).
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
//!     safe-to-evict `"true"`.
//! * **Fits elsewhere**: the pods to evict are packed, first-fit in [`super::placement`]'s
//!   order, onto the other Ready, schedulable, not-leaving nodes (any group, static ones too),
//!   the pods moved earlier in the same pass included. A node that receives pods in a pass is
//!   not removed in that pass.
//! * **Never below `minPerZone`**: a zone keeps at least `minPerZone` healthy nodes.
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
use super::placement::{Bins, Placer, ResourceIndex, classify, trial_order};
use super::snapshot::ClusterSnapshot;
use super::util::FastHash;

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
    let mut on_node: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    let mut requested: Vec<[i64; 2]> = vec![[0, 0]; nodes.len()];
    for (i, p) in pods.iter().enumerate() {
        if p.is_terminal() {
            continue;
        }
        if let Some(n) = p.node_name.as_deref().and_then(|n| node_at.get(n)) {
            on_node[*n].push(i);
            requested[*n][0] += p.requests.get("cpu").map_or(0, |q| q.0);
            requested[*n][1] += p.requests.get("memory").map_or(0, |q| q.0);
        }
    }

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

    // Zone floors.
    let states = zone_states(snapshot, config, now);
    let mut spare: BTreeMap<(&str, &str), u32> = BTreeMap::new();
    for (group, zones) in &states {
        for z in zones {
            spare.insert((*group, z.zone.as_str()), z.healthy().saturating_sub(z.min));
        }
    }

    // Destinations: every Ready, schedulable, not-leaving node, by name.
    let index = ResourceIndex::from_pods(pods);
    let track = to_move
        .iter()
        .flatten()
        .any(|&m| !pods[m].hostname_anti_affinity.is_empty());
    let mut dest: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].ready && !nodes[i].unschedulable && !snapshot.is_leaving(&nodes[i]))
        .collect();
    dest.sort_by(|&a, &b| nodes[a].name.cmp(&nodes[b].name));
    let mut bins = Bins::new(index.len(), track);
    let mut bin_of: Vec<Option<usize>> = vec![None; nodes.len()];
    for &i in &dest {
        let n = &nodes[i];
        let b = bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), true);
        bin_of[i] = Some(b);
        for &m in &on_node[i] {
            bins.occupy(b, &pods[m], &index.demand(&pods[m]));
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
