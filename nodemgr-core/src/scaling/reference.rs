//! The slow, obviously-correct reading of every scheduling rule the planners honour
//! (docs/scheduling.md §1), and the replays that check a plan against it (§4).
//!
//! [`Cluster`] is a list of nodes, each with the pods on it, and nothing else: every question
//! is answered by looking at every node and every pod again. It is the specification the fast
//! engine ([`super::placement`], `scaling::topology`) is held to by the properties, and what
//! tests and benchmarks use to prove a plan honours every constraint:
//!
//! * [`replay_scale_up`] places the plan's pods, one by one in
//!   [`ScaleUpPlan::placement_order`], onto the nodes the plan says (a planned node joins the
//!   cluster with its first pod) and checks each placement against the cluster as it stands
//!   then;
//! * [`replay_scale_down`] removes the decision's nodes in order and checks each move.
//!
//! A placement is checked as kube-scheduler's filters would check it at that moment:
//! [`check_fit`] (node condition, resources, selectors, taints, hostname anti-affinity both
//! ways), then topology spread, pod affinity and pod anti-affinity (both ways) on the hostname
//! and zone keys.

use std::collections::BTreeMap;

use crate::model::{Node, Pod, TopologyKey, WhenUnsatisfiable};

use super::placement::{Misfit, check_fit};
use super::scale_down::ScaleDownDecision;
use super::scale_up::{ExistingTarget, ScaleUpPlan, group_templates};
use super::snapshot::ClusterSnapshot;
use super::topology::node_affinity_matches;

/// A topology domain: a node (hostname key) or a zone (numbered in order of appearance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Domain {
    Node(usize),
    Zone(usize),
}

#[derive(Debug, Clone)]
struct Member<'a> {
    node: Node,
    /// The node's zone, numbered.
    zone: Option<usize>,
    takes_pods: bool,
    exists: bool,
    pods: Vec<&'a Pod>,
}

/// Nodes and the pods on them.
#[derive(Debug, Clone, Default)]
pub struct Cluster<'a> {
    members: Vec<Member<'a>>,
    zones: Vec<String>,
}

impl<'a> Cluster<'a> {
    /// An empty cluster.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node; `takes_pods` when pods may be placed on it (Ready, schedulable, not
    /// leaving). Every node is a topology domain either way. Returns its index.
    pub fn add_node(&mut self, node: Node, takes_pods: bool) -> usize {
        let zone = node.zone().map(|z| {
            self.zones.iter().position(|x| x == z).unwrap_or_else(|| {
                self.zones.push(z.to_owned());
                self.zones.len() - 1
            })
        });
        self.members.push(Member {
            node,
            zone,
            takes_pods,
            exists: true,
            pods: Vec::new(),
        });
        self.members.len() - 1
    }

    /// Takes node `i` and every pod on it out of the cluster.
    pub fn remove_node(&mut self, i: usize) {
        if let Some(m) = self.members.get_mut(i) {
            m.exists = false;
            m.pods.clear();
        }
    }

    /// Puts `pod` on node `i` without checking anything.
    pub fn bind(&mut self, i: usize, pod: &'a Pod) {
        if let Some(m) = self.members.get_mut(i) {
            m.pods.push(pod);
        }
    }

    /// The node at `i`.
    pub fn node(&self, i: usize) -> Option<&Node> {
        self.members.get(i).map(|m| &m.node)
    }

    /// Number of nodes ever added.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether no node was ever added.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    fn domain(&self, i: usize, key: TopologyKey) -> Option<Domain> {
        match key {
            TopologyKey::Hostname => Some(Domain::Node(i)),
            TopologyKey::Zone => self.members[i].zone.map(Domain::Zone),
        }
    }

    fn live(&self) -> impl Iterator<Item = (usize, &Member<'a>)> {
        self.members.iter().enumerate().filter(|(_, m)| m.exists)
    }

    /// Whether `pod` may be placed on node `i` now, by every rule in the module docs.
    ///
    /// # Errors
    /// The first rule that fails.
    pub fn check(&self, pod: &Pod, i: usize) -> Result<(), Misfit> {
        let Some(m) = self.members.get(i).filter(|m| m.exists) else {
            return Err(Misfit::NotReady);
        };
        if let Some(what) = pod.unmodelled_constraints.first() {
            return Err(Misfit::Unmodelled { what: what.clone() });
        }
        if !m.takes_pods {
            return Err(if m.node.unschedulable {
                Misfit::Cordoned
            } else {
                Misfit::NotReady
            });
        }
        check_fit(pod, &m.node, &m.pods)?;
        self.check_spread(pod, i)?;
        self.check_affinity(pod, i)?;
        self.check_anti_affinity(pod, i)
    }

    fn check_spread(&self, pod: &Pod, i: usize) -> Result<(), Misfit> {
        let hard: Vec<_> = pod
            .topology_spread
            .iter()
            .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
            .collect();
        for c in &hard {
            let Some(here) = self.domain(i, c.topology) else {
                return Err(Misfit::MissingTopology {
                    key: c.topology.label().to_owned(),
                });
            };
            // Eligible nodes: the pod's node affinity holds and they carry every key.
            let mut counts: BTreeMap<Domain, u32> = BTreeMap::new();
            for (j, m) in self.live() {
                if !node_affinity_matches(
                    &pod.node_selector,
                    &pod.required_node_affinity,
                    &m.node.labels,
                ) || hard.iter().any(|h| self.domain(j, h.topology).is_none())
                {
                    continue;
                }
                let Some(d) = self.domain(j, c.topology) else {
                    continue;
                };
                let n = m
                    .pods
                    .iter()
                    .filter(|q| c.matches(&pod.namespace, q))
                    .count() as u32;
                *counts.entry(d).or_insert(0) += n;
            }
            let min = if (counts.len() as u32) < c.min_domains.unwrap_or(1) {
                0
            } else {
                counts.values().copied().min().unwrap_or(0)
            };
            let count = counts.get(&here).copied().unwrap_or(0);
            let self_match = u32::from(c.matches(&pod.namespace, pod));
            let skew = i64::from(count) + i64::from(self_match) - i64::from(min);
            if skew > i64::from(c.max_skew) {
                return Err(Misfit::TopologySpread {
                    key: c.topology.label().to_owned(),
                    skew,
                    max_skew: c.max_skew,
                });
            }
        }
        Ok(())
    }

    fn check_affinity(&self, pod: &Pod, i: usize) -> Result<(), Misfit> {
        if pod.pod_affinity.is_empty() {
            return Ok(());
        }
        for t in &pod.pod_affinity {
            if self.domain(i, t.topology).is_none() {
                return Err(Misfit::MissingTopology {
                    key: t.topology.label().to_owned(),
                });
            }
        }
        let matches_all = |q: &Pod| {
            pod.pod_affinity
                .iter()
                .all(|t| t.matches(&pod.namespace, q))
        };
        let satisfied = pod.pod_affinity.iter().all(|t| {
            let here = self.domain(i, t.topology);
            self.live().any(|(j, m)| {
                self.domain(j, t.topology) == here && m.pods.iter().any(|q| matches_all(q))
            })
        });
        if satisfied {
            return Ok(());
        }
        let anywhere = self.live().any(|(j, m)| {
            pod.pod_affinity
                .iter()
                .any(|t| self.domain(j, t.topology).is_some())
                && m.pods.iter().any(|q| matches_all(q))
        });
        if !anywhere && matches_all(pod) {
            // The first pod of a group with affinity to itself.
            return Ok(());
        }
        Err(Misfit::PodAffinity)
    }

    fn check_anti_affinity(&self, pod: &Pod, i: usize) -> Result<(), Misfit> {
        for t in &pod.pod_anti_affinity {
            let Some(here) = self.domain(i, t.topology) else {
                continue;
            };
            for (j, m) in self.live() {
                if self.domain(j, t.topology).as_ref() != Some(&here) {
                    continue;
                }
                if let Some(q) = m.pods.iter().find(|q| t.matches(&pod.namespace, q)) {
                    return Err(Misfit::AntiAffinity { pod: q.key() });
                }
            }
        }
        for (j, m) in self.live() {
            for q in &m.pods {
                for t in &q.pod_anti_affinity {
                    if t.matches(&q.namespace, pod)
                        && let Some(there) = self.domain(j, t.topology)
                        && self.domain(i, t.topology).as_ref() == Some(&there)
                    {
                        return Err(Misfit::AntiAffinity { pod: q.key() });
                    }
                }
            }
        }
        Ok(())
    }
}

/// The cluster a scale-up plan starts from: every node of the snapshot (pods may go only to
/// Ready, schedulable, not-leaving ones) with its unfinished pods but the plan's preempted
/// standby holders, then the upcoming machines. Returns the cluster and the index of each
/// existing target.
fn scale_up_start<'a>(
    snapshot: &ClusterSnapshot<'a>,
    plan: &ScaleUpPlan,
) -> (Cluster<'a>, BTreeMap<ExistingTarget, usize>) {
    let mut cluster = Cluster::new();
    let mut at: BTreeMap<ExistingTarget, usize> = BTreeMap::new();
    let mut index_of: BTreeMap<&str, usize> = BTreeMap::new();
    for n in snapshot.nodes {
        let takes = n.ready && !n.unschedulable && !snapshot.is_leaving(n);
        let i = cluster.add_node(n.clone(), takes);
        index_of.insert(n.name.as_str(), i);
        at.insert(ExistingTarget::Node(n.name.clone()), i);
    }
    for (k, p) in snapshot.pods.iter().enumerate() {
        if p.is_terminal() || plan.preempted.contains(&k) {
            continue;
        }
        if let Some(i) = p.node_name.as_deref().and_then(|n| index_of.get(n)) {
            cluster.bind(*i, p);
        }
    }
    let templates = group_templates(snapshot);
    let mut upcoming = snapshot.upcoming.clone();
    upcoming.sort();
    let mut numbered: BTreeMap<(String, String), u32> = BTreeMap::new();
    for u in &upcoming {
        let Some(t) = templates
            .iter()
            .find(|t| t.group == u.group && t.zone == u.zone)
        else {
            continue;
        };
        let first = numbered
            .entry((u.group.clone(), u.zone.clone()))
            .or_insert(0);
        for machine in *first..*first + u.count {
            let mut node = t.node.clone();
            node.name = format!("upcoming-{}-{}-{machine}", u.group, u.zone);
            let i = cluster.add_node(node, true);
            at.insert(
                ExistingTarget::Upcoming {
                    group: u.group.clone(),
                    zone: u.zone.clone(),
                    machine,
                },
                i,
            );
        }
        *first += u.count;
    }
    (cluster, at)
}

/// Replays a scale-up plan (see the module docs) and returns the cluster it ends in.
///
/// # Errors
/// The first placement that breaks a rule, or a plan whose order does not list exactly the
/// pods it places.
pub fn replay_scale_up<'a>(
    snapshot: &ClusterSnapshot<'a>,
    plan: &ScaleUpPlan,
) -> Result<Cluster<'a>, String> {
    let pods = snapshot.pods;
    let (mut cluster, at) = scale_up_start(snapshot, plan);
    let templates = group_templates(snapshot);
    // Where each placed pod goes: an existing target, or planned node k.
    let mut target: BTreeMap<usize, Result<usize, usize>> = BTreeMap::new();
    for (m, t) in &plan.fits_existing {
        let Some(&i) = at.get(t) else {
            return Err(format!("pod {} goes to unknown {t}", pods[*m].key()));
        };
        if target.insert(*m, Ok(i)).is_some() {
            return Err(format!("pod {} placed twice", pods[*m].key()));
        }
    }
    for (k, n) in plan.new_nodes.iter().enumerate() {
        for &m in &n.pods {
            if target.insert(m, Err(k)).is_some() {
                return Err(format!("pod {} placed twice", pods[m].key()));
            }
        }
    }
    let mut order = plan.placement_order.clone();
    order.sort_unstable();
    order.dedup();
    if order.len() != plan.placement_order.len() || order.iter().ne(target.keys()) {
        return Err("placement_order does not list exactly the placed pods".to_owned());
    }
    let mut planned_at: Vec<Option<usize>> = vec![None; plan.new_nodes.len()];
    for &m in &plan.placement_order {
        let pod = &pods[m];
        let i = match target.get(&m) {
            Some(Ok(i)) => *i,
            Some(Err(k)) => match planned_at[*k] {
                Some(i) => i,
                None => {
                    let n = &plan.new_nodes[*k];
                    let Some(t) = templates
                        .iter()
                        .find(|t| t.group == n.group && t.zone == n.zone)
                    else {
                        return Err(format!("no template for {}/{}", n.group, n.zone));
                    };
                    let mut node = t.node.clone();
                    node.name = format!("planned-{k}-{}-{}", n.group, n.zone);
                    let i = cluster.add_node(node, true);
                    planned_at[*k] = Some(i);
                    i
                }
            },
            None => return Err(format!("pod {} has no target", pod.key())),
        };
        if let Err(e) = cluster.check(pod, i) {
            let name = cluster.node(i).map(|n| n.name.clone()).unwrap_or_default();
            return Err(format!("pod {} on {name}: {e}", pod.key()));
        }
        cluster.bind(i, pod);
    }
    Ok(cluster)
}

/// Replays a scale-down decision: removes each node in order and checks every move.
///
/// # Errors
/// The first move that breaks a rule.
pub fn replay_scale_down<'a>(
    snapshot: &ClusterSnapshot<'a>,
    decision: &ScaleDownDecision,
) -> Result<Cluster<'a>, String> {
    let mut cluster = Cluster::new();
    let mut index_of: BTreeMap<&str, usize> = BTreeMap::new();
    for n in snapshot.nodes {
        let takes = n.ready && !n.unschedulable && !snapshot.is_leaving(n);
        index_of.insert(n.name.as_str(), cluster.add_node(n.clone(), takes));
    }
    for p in snapshot.pods {
        if p.is_terminal() {
            continue;
        }
        if let Some(i) = p.node_name.as_deref().and_then(|n| index_of.get(n)) {
            cluster.bind(*i, p);
        }
    }
    for r in &decision.removals {
        let Some(&i) = index_of.get(r.node.as_str()) else {
            return Err(format!("unknown node {}", r.node));
        };
        cluster.remove_node(i);
        for (m, to) in &r.moves {
            let pod = &snapshot.pods[*m];
            let Some(&j) = index_of.get(to.as_str()) else {
                return Err(format!("pod {} moved to unknown node {to}", pod.key()));
            };
            if let Err(e) = cluster.check(pod, j) {
                return Err(format!(
                    "removing {}: pod {} onto {to}: {e}",
                    r.node,
                    pod.key()
                ));
            }
            cluster.bind(j, pod);
        }
    }
    Ok(cluster)
}
