//! Scale-up: which new nodes of which group in which zone the pending pods need (//! docs/deckhouse.md §8 "priority").
//!
//! # The plan
//! 1. **Existing room first.** Pending pods (unbound, not finished) are grouped into classes of
//!    identical scheduling needs and packed first-fit-decreasing onto the Ready, schedulable,
//!    not-leaving nodes (in name order) and onto the machines already ordered (upcoming, shaped
//!    like their group's template). Those pods cause no scale-up. A pod other than a
//!    standby holder may preempt standby holders ([`super::standby`]) when no node fits it
//!    without; the evicted holders become pending and are packed like any other pod. Every
//!    rule of [`super::placement`] applies, topology spread and pod (anti-)affinity included
//!    (docs/scheduling.md §1); a pod with a required constraint nodemgr does not model is
//!    reported unplaceable and never placed. When such rules are counted, the existing nodes
//!    take no pod after this step (they stay topology domains): a pod said to fit an existing
//!    node fits it now, before any planned node exists.
//! 2. **Who could ever host the rest.** For every group (with a known instance class) and zone,
//!    a template node ([`group_templates`]): the `nodeTemplate` labels and taints, group and zone
//!    labels, allocatable from the class after the system reserve and after the DaemonSet pods
//!    that would run there. A pod that fits no template of any group, even on an empty node, is
//!    **unplaceable** and reported with each group's reason; it is never retried by the plan.
//! 3. **Groups by priority.** Among groups that can host some remaining pod in a zone below
//!    `maxPerZone` (counting the desired count, the nodes and the upcoming machines), the highest
//!    `cloudInstances.priority` wins; equal priorities are compared by a full packing estimate
//!    and the **least waste** wins (idle cpu + idle memory share of the new nodes), then the
//!    most pods placed, then the name (Deckhouse picks randomly among equals; nodemgr is
//!    deterministic). The winner's estimate is committed and the loop repeats with the pods it
//!    could not take. An estimate stops early once a lower bound of its waste exceeds the best
//!    complete estimate so far, so it could not have won; likely winners are tried first. The
//!    winner, and so the plan, is the same (docs/scheduling.md §6).
//! 4. **Zones balanced.** Within a group, pods go first-fit onto the nodes the plan already
//!    opened; a new node opens in a zone that the pod fits, that has headroom and where its
//!    topology rules admit it on an empty node: the fewest nodes of the group, existing and
//!    planned, first; then the pod's preferred zone (anti-)affinity and `ScheduleAnyway` zone
//!    spread; then the zone name (docs/scheduling.md §3).
//! 5. **Minimal.** A consolidation pass takes planned nodes out, emptiest first, when the same
//!    first-fit simulation moves all their pods onto the other planned nodes; it repeats until
//!    no planned node can go. A pod may so end on a new node of a lower-priority group that is
//!    being added anyway. Only nodes whose pods no placement depends on are tried (no required
//!    affinity or `DoNotSchedule` spread selector matches them, docs/scheduling.md §2).
//!
//! Pods that some group could host but that find every such zone at `maxPerZone` are reported as
//! waiting for capacity; pods some group could host in a zone with room, that their pod
//! affinity, anti-affinity or spread constraints keep off every node, as constrained.
//! [`ScaleUpPlan::placement_order`] lists every placement in the order the simulation made it.
//!
//! # Guarantees (proptest properties)
//! * No zone ends above `maxPerZone`: desired-or-present count + planned ≤ max.
//! * Every pod placed by the plan fits where it was placed ([`super::placement::check_fit`]) and
//!   no node is overcommitted.
//! * Every pending pod is placed on an existing or upcoming node, on a planned node, reported
//!   unplaceable (it fits no group's template, or carries an unmodelled constraint), waiting for
//!   capacity (every template it fits is in a full zone) or constrained (some template it fits
//!   has room).
//! * No placement violates a required constraint: replayed in `placement_order` against
//!   [`super::reference`], every placement passes every rule (docs/scheduling.md §4).
//! * Minimality with respect to the simulation, as in step 5.
//! * Deterministic, and independent of the order of nodes and pods in the snapshot.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::model::{Node, Pod, Quantity, Resources, Timestamp};

use super::bounds::zone_states;
use super::class::template_node;
use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::placement::{
    Bins, CPU, Demand, MEMORY, Placer, PodClass, ResourceIndex, check_fit, check_static, classify,
    fits_empty, is_standby_holder, static_fits, trial_order,
};
use super::snapshot::ClusterSnapshot;
use super::topology::UniverseBuilder;
use crate::hash::{FastHash, Fx};

/// A new node of a group and zone, as a template: what a pod can count on there.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupTemplate {
    /// Group.
    pub group: String,
    /// Zone.
    pub zone: String,
    /// `cloudInstances.priority`.
    pub priority: i64,
    /// The node, named `template-<group>-<zone>`, with allocatable already reduced by the
    /// DaemonSet pods that would run on it.
    pub node: Node,
    /// The DaemonSet pods counted (`namespace/owner`).
    pub daemonsets: Vec<String>,
}

/// The template of every zone of every group whose class is known, in group then zone order.
/// DaemonSets are taken from the snapshot's DaemonSet-owned pods (one per owner, the first by
/// name); one counts against a template when its pod's selectors and tolerations admit the
/// template.
pub fn group_templates(snapshot: &ClusterSnapshot<'_>) -> Vec<GroupTemplate> {
    let mut daemonsets: BTreeMap<(&str, &str), &Pod> = BTreeMap::new();
    for p in snapshot.pods {
        if let Some(owner) = &p.owner
            && owner.kind == "DaemonSet"
        {
            let key = (p.namespace.as_str(), owner.name.as_str());
            let keep = daemonsets.get(&key).is_none_or(|q| p.name < q.name);
            if keep {
                daemonsets.insert(key, p);
            }
        }
    }
    let mut out = Vec::new();
    for g in &snapshot.groups {
        let (Some(class), Some(shape)) = (g.class, g.shape()) else {
            continue;
        };
        for zone in &g.zones {
            let name = format!("template-{}-{zone}", g.name());
            let mut node = template_node(g.group, class, &shape, zone, &name);
            let mut counted = Vec::new();
            for ((ns, owner), p) in &daemonsets {
                if check_static(p, &node.labels, &node.taints).is_ok() {
                    subtract(&mut node.allocatable, &p.requests);
                    counted.push(format!("{ns}/{owner}"));
                }
            }
            out.push(GroupTemplate {
                group: g.name().to_owned(),
                zone: zone.clone(),
                priority: g.priority(),
                node,
                daemonsets: counted,
            });
        }
    }
    out
}

fn subtract(allocatable: &mut Resources, requests: &Resources) {
    for (name, q) in requests {
        if name == "pods" {
            continue;
        }
        if let Some(a) = allocatable.get_mut(name) {
            *a = Quantity((*a - *q).0.max(0));
        }
    }
    if let Some(pods) = allocatable.get_mut("pods") {
        *pods = Quantity((*pods - Quantity::units(1)).0.max(0));
    }
}

/// Where a pending pod goes without a new node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExistingTarget {
    /// An existing node.
    Node(String),
    /// A machine already ordered for a group and zone.
    Upcoming {
        /// Group.
        group: String,
        /// Zone.
        zone: String,
        /// Which of the zone's upcoming machines (0-based), as the simulation numbered them.
        machine: u32,
    },
}

impl fmt::Display for ExistingTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Node(n) => write!(f, "node {n}"),
            Self::Upcoming {
                group,
                zone,
                machine,
            } => write!(f, "upcoming node #{machine} of {group} in {zone}"),
        }
    }
}

/// One new node of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedNode {
    /// Group.
    pub group: String,
    /// Zone.
    pub zone: String,
    /// The pods it takes (indices into the snapshot's pods, by `namespace/name`).
    pub pods: Vec<usize>,
}

/// Pods no group can host, with each group's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaceable {
    /// The pods (indices into the snapshot's pods).
    pub pods: Vec<usize>,
    /// `(group, reason)` for every scaling group.
    pub reasons: Vec<(String, String)>,
}

/// The scale-up decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScaleUpPlan {
    /// Machines to order, per group and zone.
    pub commands: Vec<ScalingCommand>,
    /// Every planned node with its pods, in plan order.
    pub new_nodes: Vec<PlannedNode>,
    /// Pending pods that fit existing or upcoming nodes (pod index, target).
    pub fits_existing: Vec<(usize, ExistingTarget)>,
    /// Standby holders the plan's pods preempt (pod indices).
    pub preempted: Vec<usize>,
    /// Pods that fit no group at all.
    pub unplaceable: Vec<Unplaceable>,
    /// Pods some group could host, every such zone being at `maxPerZone` (pod indices).
    pub waiting_for_capacity: Vec<usize>,
    /// Pods some group could host in a zone with room left, that no node (existing, upcoming
    /// or new) may take by their pod affinity, pod anti-affinity or topology spread
    /// constraints (docs/scheduling.md §3) (pod indices).
    pub constrained: Vec<usize>,
    /// Every pod the plan places (on existing, upcoming and new nodes), in the order the
    /// simulation placed it for the last time: replayed in this order, each placement passes
    /// every rule against the cluster as it stands then (docs/scheduling.md §4,
    /// [`super::reference::replay_scale_up`]).
    pub placement_order: Vec<usize>,
    /// Which group was chosen at each step and why.
    pub reasons: Vec<String>,
}

impl ScaleUpPlan {
    /// New nodes per `(group, zone)`.
    pub fn counts(&self) -> BTreeMap<(&str, &str), u32> {
        let mut m = BTreeMap::new();
        for n in &self.new_nodes {
            *m.entry((n.group.as_str(), n.zone.as_str())).or_insert(0) += 1;
        }
        m
    }
}

/// The index of `p` in `pods`, when `p` points into it.
fn pod_index(pods: &[Pod], p: &Pod) -> Option<usize> {
    let size = std::mem::size_of::<Pod>();
    let base = pods.as_ptr().addr();
    let at = (p as *const Pod).addr();
    let offset = at.checked_sub(base)?;
    (offset % size == 0 && offset / size < pods.len()).then_some(offset / size)
}

/// The simulation after step 1 and the nodes planned so far: a placer over the existing and
/// upcoming nodes (bins `..first`) and the planned ones (bins `first..`), each planned node's
/// template, and the pods placed by steps 3–5 on every bin.
#[derive(Debug, Clone)]
struct Planned<'t> {
    placer: Placer<'t>,
    first: usize,
    /// Template of each planned bin (`template[b - first]`).
    template: Vec<usize>,
    /// (class, pod) placed on each bin by steps 3–5; a planned node's list is empty once it
    /// is consolidated away.
    members: Vec<Vec<(usize, usize)>>,
}

impl Planned<'_> {
    /// Live planned nodes per template.
    fn per_template(&self, templates: usize) -> Vec<u32> {
        let mut n = vec![0u32; templates];
        for (k, t) in self.template.iter().enumerate() {
            if !self.members[self.first + k].is_empty() {
                n[*t] += 1;
            }
        }
        n
    }
}

/// The planned nodes after packing the remaining pods for one group: onto room left on nodes
/// already planned, then onto new nodes of the group.
#[derive(Debug, Clone)]
struct Estimate {
    group: String,
    priority: i64,
    /// New nodes per template.
    opened: BTreeMap<usize, u32>,
    placed: usize,
    cpu_waste: f64,
    memory_waste: f64,
    /// The packing stopped once it provably could not beat the best estimate so far: the
    /// wastes are lower bounds of what the full packing would leave idle, `placed` and
    /// `opened` what it did before it stopped (docs/scheduling.md §6).
    bounded: bool,
}

/// How far above the best waste so far a lower bound must be before a trial stops: far more
/// than the rounding of the f64 sums (about 1e-15), so that a trial stops only when its full
/// packing would have compared worse.
const CUT_MARGIN: f64 = 1e-9;

/// The least idle share that a set of new nodes of capacity at least `cap` can end with when
/// the pods on them request at most `most`: `1 - min(1, most / cap)` (0 without capacity).
fn least_idle(cap: i128, most: i128) -> f64 {
    if cap <= 0 {
        0.0
    } else {
        (cap - most.min(cap)) as f64 / cap as f64
    }
}

impl Estimate {
    fn waste(&self) -> f64 {
        self.cpu_waste + self.memory_waste
    }
}

/// Plans the new nodes the pending pods of `snapshot` need (see the module docs).
///
/// # Examples
/// Four pending pods of 3 CPUs each need four 4-CPU machines; a group of at most two per zone
/// over two zones orders two in each.
/// ```
/// use nodemgr_core::model::{Pod, PodPhase, Quantity, Timestamp, parse_node_group};
/// use nodemgr_core::scaling::{ClusterSnapshot, InstanceClass, ScalingConfig, plan_scale_up};
///
/// let group = parse_node_group(
///     "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: worker}\n\
///      spec: {nodeType: CloudEphemeral, cloudInstances: {classReference: \
///      {kind: InstanceClass, name: medium}, zones: [a, b], minPerZone: 0, maxPerZone: 2}}",
/// )?;
/// let classes = [InstanceClass::new("InstanceClass", "medium", 4, 16)];
/// let cpu = Quantity::parse("3")?;
/// let pods: Vec<Pod> = (0..4)
///     .map(|i| Pod {
///         namespace: "default".into(),
///         name: format!("job-{i}"),
///         requests: [("cpu".to_owned(), cpu)].into(),
///         phase: PodPhase::Pending,
///         ..Pod::default()
///     })
///     .collect();
/// let zones = ["a".to_owned(), "b".to_owned()];
/// let groups = [group];
/// let snapshot = ClusterSnapshot::new(&[], &pods, &[], &groups, &classes, &zones);
/// let plan = plan_scale_up(&snapshot, &ScalingConfig::default(), Timestamp::EPOCH);
/// assert_eq!(plan.new_nodes.len(), 4);
/// assert!(plan.unplaceable.is_empty() && plan.waiting_for_capacity.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn plan_scale_up(
    snapshot: &ClusterSnapshot<'_>,
    config: &ScalingConfig,
    now: Timestamp,
) -> ScaleUpPlan {
    plan(snapshot, config, now, true)
}

/// [`plan_scale_up`]; without `cut_off`, every group's estimate packs every pod and groups are
/// tried by name (the plain reading the property `cut_off_never_changes_the_plan` holds the
/// fast path to).
fn plan(
    snapshot: &ClusterSnapshot<'_>,
    config: &ScalingConfig,
    now: Timestamp,
    cut_off: bool,
) -> ScaleUpPlan {
    let pods = snapshot.pods;
    let mut plan = ScaleUpPlan::default();
    let pending: Vec<usize> = snapshot.pending_pods().map(|(i, _)| i).collect();
    if pending.is_empty() {
        return plan;
    }
    // The nodes pods may go to, by name, then the others (topology domains all the same,
    // docs/scheduling.md §1).
    let takes_pods = |n: &Node| n.ready && !n.unschedulable && !snapshot.is_leaving(n);
    let mut existing: Vec<&Node> = snapshot.nodes.iter().filter(|n| takes_pods(n)).collect();
    existing.sort_by(|a, b| a.name.cmp(&b.name));
    let mut others: Vec<&Node> = snapshot.nodes.iter().filter(|n| !takes_pods(n)).collect();
    others.sort_by(|a, b| a.name.cmp(&b.name));
    let mut node_at: HashMap<&str, usize, FastHash> = HashMap::default();
    for (k, n) in existing.iter().enumerate() {
        node_at.insert(n.name.as_str(), k);
    }
    others.retain(|n| !node_at.contains_key(n.name.as_str()));
    for (k, n) in others.iter().enumerate() {
        node_at.insert(n.name.as_str(), existing.len() + k);
    }
    // One pass over every pod: resources numbered, bound pods and their demand collected,
    // and what the topology counters need (docs/scheduling.md §2).
    let mut index = ResourceIndex::default();
    let mut bound: Vec<(usize, usize, Demand, bool)> = Vec::new();
    let mut universe = UniverseBuilder::default();
    for (i, p) in pods.iter().enumerate() {
        let demand = index.demand_indexing(p);
        if p.is_terminal() {
            continue;
        }
        let constrained =
            |p: &Pod| p.has_topology_constraints() || !p.hostname_anti_affinity.is_empty();
        match &p.node_name {
            None => {
                if constrained(p) && p.unmodelled_constraints.is_empty() {
                    universe.place(p);
                }
            }
            Some(node) => {
                let holder = is_standby_holder(p);
                if holder {
                    if constrained(p) {
                        universe.place(p);
                    }
                } else if !p.pod_anti_affinity.is_empty() || !p.hostname_anti_affinity.is_empty() {
                    // A bound pod only counts by the anti-affinity it carries.
                    universe.bound(p);
                }
                if let Some(&k) = node_at.get(node.as_str()) {
                    bound.push((k, i, demand, holder));
                }
            }
        }
    }
    let index = index;
    let templates = group_templates(snapshot);
    let caps: Vec<([i64; 3], Vec<i64>)> = templates
        .iter()
        .map(|t| index.capacity(&t.node.allocatable))
        .collect();
    let template_at: HashMap<(&str, &str), usize, FastHash> = templates
        .iter()
        .enumerate()
        .map(|(i, t)| ((t.group.as_str(), t.zone.as_str()), i))
        .collect();
    // Pods with a required constraint nodemgr does not model are never placed.
    let (unmodelled, pending): (Vec<usize>, Vec<usize>) = pending
        .into_iter()
        .partition(|&i| !pods[i].unmodelled_constraints.is_empty());
    let track = pending
        .iter()
        .any(|&i| !pods[i].hostname_anti_affinity.is_empty());
    let mut classes = classify(pods, pending.iter().copied(), &index);
    // Topology counters, when some pod constrains another beyond hostname anti-affinity.
    let universe = universe.build();
    let with_topology = universe.is_some();

    // --- 1. existing and upcoming room --------------------------------------------------
    let mut bins = Bins::with_topology(index.len(), track, universe);
    let mut targets: Vec<ExistingTarget> = Vec::with_capacity(existing.len());
    for n in &existing {
        bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), true);
        targets.push(ExistingTarget::Node(n.name.clone()));
    }
    if with_topology {
        for n in &others {
            bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), false);
            targets.push(ExistingTarget::Node(n.name.clone()));
        }
    }
    // Bound pods: standby holders one by one (they are preemptible, unless a placement may
    // depend on them), the others summed per node and recorded at once.
    let n_ext = index.len();
    let mut on_bin: Vec<Vec<&Pod>> = vec![Vec::new(); bins.len()];
    let mut used: Vec<[i64; 3]> = vec![[0; 3]; bins.len()];
    let mut used_ext: Vec<i64> = vec![0; bins.len() * n_ext];
    for (b, i, demand, holder) in bound {
        if b >= bins.len() {
            // A node that takes no pods, without topology counters to keep.
            continue;
        }
        let p = &pods[i];
        if holder && bins.is_enabled(b) && bins.is_free(p) {
            bins.occupy_held(b, p, demand);
        } else {
            for (u, d) in used[b].iter_mut().zip(demand.core) {
                *u += d;
            }
            for (e, v) in demand.ext {
                used_ext[b * n_ext + e as usize] += v;
            }
            on_bin[b].push(p);
        }
    }
    for (b, on) in on_bin.into_iter().enumerate() {
        bins.occupy_all(b, on, used[b], &used_ext[b * n_ext..(b + 1) * n_ext]);
    }
    let mut upcoming = snapshot.upcoming.clone();
    upcoming.sort();
    for u in &upcoming {
        if let Some(&t) = template_at.get(&(u.group.as_str(), u.zone.as_str())) {
            let first = targets
                .iter()
                .filter(|t| matches!(t, ExistingTarget::Upcoming { group, zone, .. } if *group == u.group && *zone == u.zone))
                .count() as u32;
            for machine in first..first + u.count {
                bins.push(
                    &templates[t].node.labels,
                    &templates[t].node.taints,
                    caps[t].clone(),
                    true,
                );
                targets.push(ExistingTarget::Upcoming {
                    group: u.group.clone(),
                    zone: u.zone.clone(),
                    machine,
                });
            }
        }
    }
    let mut placer = Placer::new(bins, classes.len());
    let mut residual: Vec<usize> = Vec::new();
    let mut evicted: Vec<usize> = Vec::new();
    // Every placement, in order (a pod placed again later is listed again).
    let mut sequence: Vec<usize> = Vec::new();
    // Workload first, standby holders (lowest priority) last, as the scheduler's queue does.
    let holder: Vec<bool> = classes.iter().map(|k| is_standby_holder(k.rep)).collect();
    let by_priority = classes
        .iter()
        .enumerate()
        .filter(|&(c, _)| !holder[c])
        .chain(classes.iter().enumerate().filter(|&(c, _)| holder[c]));
    for (c, class) in by_priority {
        let may_preempt = !holder[c];
        for &m in &class.members {
            match placer.place(c, &pods[m], &class.demand, may_preempt) {
                Some(placed) => {
                    plan.fits_existing.push((m, targets[placed.bin].clone()));
                    sequence.push(m);
                    evicted.extend(placed.preempted.iter().filter_map(|h| pod_index(pods, h)));
                }
                None => residual.push(m),
            }
        }
    }
    if !evicted.is_empty() {
        evicted.sort_unstable();
        plan.preempted = evicted.clone();
        // Evicted holders are pending again: existing room first, like everyone else.
        let first_new = classes.len();
        let holder_classes = classify(pods, evicted.iter().copied(), &index);
        placer.add_classes(holder_classes.len());
        classes.extend(holder_classes);
        for (c, class) in classes.iter().enumerate().skip(first_new) {
            for &m in &class.members {
                match placer.place(c, &pods[m], &class.demand, false) {
                    Some(placed) => {
                        plan.fits_existing.push((m, targets[placed.bin].clone()));
                        sequence.push(m);
                    }
                    None => residual.push(m),
                }
            }
        }
    }
    if !unmodelled.is_empty() {
        let reasons = snapshot
            .groups
            .iter()
            .map(|g| {
                (
                    g.name().to_owned(),
                    "a required constraint nodemgr does not model".to_owned(),
                )
            })
            .collect::<Vec<_>>();
        let mut by_class: BTreeMap<Vec<&String>, Vec<usize>> = BTreeMap::new();
        for &i in &unmodelled {
            by_class
                .entry(pods[i].unmodelled_constraints.iter().collect())
                .or_default()
                .push(i);
        }
        for (what, pods_here) in by_class {
            let mut reasons = reasons.clone();
            for r in &mut reasons {
                r.1 = format!(
                    "unmodelled constraint: {}",
                    what.iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            }
            plan.unplaceable.push(Unplaceable {
                pods: pods_here,
                reasons,
            });
        }
    }
    if residual.is_empty() {
        plan.fits_existing.sort();
        plan.unplaceable.sort_by(|a, b| a.pods.cmp(&b.pods));
        plan.placement_order = last_placements(&sequence, pods.len());
        return plan;
    }

    // --- 2. who could ever host the rest -----------------------------------------------------
    let mut class_of: Vec<u32> = vec![u32::MAX; pods.len()];
    for (c, class) in classes.iter().enumerate() {
        for &m in &class.members {
            class_of[m] = c as u32;
        }
    }
    let mut remaining: Vec<Vec<usize>> = vec![Vec::new(); classes.len()];
    for &m in &residual {
        remaining[class_of[m] as usize].push(m);
    }
    for r in &mut remaining {
        r.sort_by(|&a, &b| {
            (&pods[a].namespace, &pods[a].name).cmp(&(&pods[b].namespace, &pods[b].name))
        });
    }
    // The node-level rules of a class on each template, once per distinct set of rules
    // (nodeSelector, node affinity, tolerations): many classes share one.
    let mut rules: HashMap<u64, Vec<(&Pod, Vec<bool>)>, FastHash> = HashMap::default();
    let feasible: Vec<Vec<bool>> = classes
        .iter()
        .enumerate()
        .map(|(c, class)| {
            if remaining[c].is_empty() {
                return Vec::new();
            }
            let rep = class.rep;
            let mut h = Fx::default();
            rep.node_selector.hash(&mut h);
            rep.required_node_affinity.hash(&mut h);
            for t in &rep.tolerations {
                (&t.key, t.exists, &t.value, &t.effect).hash(&mut h);
            }
            let slot = rules.entry(h.finish()).or_default();
            let known = slot.iter().position(|(p, _)| {
                p.node_selector == rep.node_selector
                    && p.required_node_affinity == rep.required_node_affinity
                    && p.tolerations == rep.tolerations
            });
            let statics = match known {
                Some(k) => &slot[k].1,
                None => {
                    let v = templates
                        .iter()
                        .map(|t| static_fits(rep, &t.node.labels, &t.node.taints))
                        .collect();
                    slot.push((rep, v));
                    &slot[slot.len() - 1].1
                }
            };
            // `check_fit` on an empty template node, without building reasons.
            caps.iter()
                .zip(statics)
                .map(|(cap, ok)| *ok && fits_empty(&class.demand, cap))
                .collect()
        })
        .collect();
    for (c, class) in classes.iter().enumerate() {
        if !remaining[c].is_empty() && !feasible[c].iter().any(|f| *f) {
            plan.unplaceable.push(Unplaceable {
                pods: std::mem::take(&mut remaining[c]),
                reasons: unplaceable_reasons(snapshot, &templates, class.rep),
            });
        }
    }
    plan.unplaceable.sort_by(|a, b| a.pods.cmp(&b.pods));

    // --- 3./4./5. groups by priority, zones balanced, minimal -----------------------------
    let states = zone_states(snapshot, config, now);
    let mut base_headroom: Vec<u32> = Vec::with_capacity(templates.len());
    let mut base_nodes: Vec<u32> = Vec::with_capacity(templates.len());
    for t in &templates {
        let z = states
            .get(t.group.as_str())
            .and_then(|zs| zs.iter().find(|z| z.zone == t.zone));
        let (room, count) = z.map_or((0, 0), |z| {
            let used = z.desired.max(z.present());
            (z.max.saturating_sub(used), used)
        });
        base_headroom.push(room);
        base_nodes.push(count);
    }
    let mut group_templates_of: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in templates.iter().enumerate() {
        group_templates_of
            .entry(t.group.as_str())
            .or_default()
            .push(i);
    }
    let ctx = Ctx {
        pods,
        classes: &classes,
        templates: &templates,
        caps: &caps,
        feasible: &feasible,
    };
    let first = placer.bins.len();
    if with_topology {
        // Pods placed from here on wait for new nodes: the existing ones stay topology domains
        // but take no more pods, so that every pod reported to fit an existing node fits it
        // now, before any planned node exists (docs/scheduling.md §3).
        for b in 0..first {
            placer.bins.retire(b);
        }
    }
    let mut planned = Planned {
        placer,
        first,
        template: Vec::new(),
        members: vec![Vec::new(); first],
    };
    let mut exhausted: Vec<&str> = Vec::new();
    // Each group's waste in the last round, to try the likely winners first.
    let mut last_waste: HashMap<String, f64, FastHash> = HashMap::default();
    loop {
        // Priority rounds until no group can take a remaining pod.
        loop {
            let live = planned.per_template(templates.len());
            let headroom: Vec<u32> = base_headroom
                .iter()
                .zip(&live)
                .map(|(h, l)| h.saturating_sub(*l))
                .collect();
            let zone_nodes: Vec<u32> = base_nodes.iter().zip(&live).map(|(b, l)| b + l).collect();
            let options: Vec<(&str, &Vec<usize>)> = group_templates_of
                .iter()
                .filter(|(g, _)| !exhausted.contains(g))
                .filter(|(_, ts)| {
                    ts.iter().any(|&t| {
                        headroom[t] > 0
                            && remaining
                                .iter()
                                .enumerate()
                                .any(|(c, r)| !r.is_empty() && feasible[c][t])
                    })
                })
                .map(|(g, ts)| (*g, ts))
                .collect();
            let Some(top) = options
                .iter()
                .map(|(_, ts)| templates[ts[0]].priority)
                .max()
            else {
                break;
            };
            let mut estimates: Vec<Estimate> = Vec::new();
            // A trial either packs a copy of the simulation (kept when it wins) or packs the
            // simulation itself and rolls back; copying is cheaper while the simulation is
            // small next to the pods to pack.
            let pending_pods: usize = remaining.iter().map(Vec::len).sum();
            let fork = planned.members.len().saturating_mul(8) <= pending_pods;
            let mut kept: Option<(usize, Planned<'_>, Vec<usize>)> = None;
            let better = |a: &Estimate, b: &Estimate| {
                a.waste()
                    .total_cmp(&b.waste())
                    .then_with(|| b.placed.cmp(&a.placed))
                    .then_with(|| a.group.cmp(&b.group))
            };
            // Any order gives the same winner (`better` is a total order); trying the likely
            // winners first lets the others stop early (`Ctx::estimate`'s cut-off): the least
            // waste of the last round first, then the least waste of an ideal fractional
            // packing (docs/scheduling.md §6).
            let mut contenders: Vec<(f64, &str, &Vec<usize>)> = options
                .iter()
                .filter(|(_, ts)| templates[ts[0]].priority == top)
                .map(|&(g, ts)| {
                    let hint = if cut_off {
                        last_waste
                            .get(g)
                            .copied()
                            .unwrap_or_else(|| ctx.ideal_waste(ts, &remaining))
                    } else {
                        0.0
                    };
                    (hint, g, ts)
                })
                .collect();
            contenders.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(b.1)));
            for &(_, g, ts) in &contenders {
                // The best complete estimate so far: a trial that provably cannot beat it stops.
                let beat = estimates
                    .iter()
                    .filter(|e| cut_off && !e.bounded)
                    .min_by(|a, b| better(a, b))
                    .map(Estimate::waste);
                let e = if fork {
                    let mut copy = planned.clone();
                    let mut seq = Vec::new();
                    let e = ctx.estimate(
                        g,
                        ts,
                        &remaining,
                        &mut copy,
                        &headroom,
                        &zone_nodes,
                        Some(&mut seq),
                        beat,
                    );
                    let wins = e.placed > 0
                        && kept.as_ref().is_none_or(|(k, ..)| {
                            better(&e, &estimates[*k]) == std::cmp::Ordering::Less
                        });
                    if wins {
                        kept = Some((estimates.len(), copy, seq));
                    }
                    e
                } else {
                    ctx.estimate(
                        g,
                        ts,
                        &remaining,
                        &mut planned,
                        &headroom,
                        &zone_nodes,
                        None,
                        beat,
                    )
                };
                if e.placed > 0 {
                    estimates.push(e);
                } else {
                    // Cannot happen when the templates admit a pod (it fits an empty node);
                    // guards the loop's termination all the same.
                    exhausted.push(g);
                }
            }
            // A round whose winner opens no node (it only fills room on nodes already
            // planned, waste 0) says little about the next one: its losers stopped at bounds
            // near 0. The wastes of the last round that opened nodes order the next instead.
            if estimates
                .iter()
                .min_by(|a, b| better(a, b))
                .is_some_and(|e| !e.opened.is_empty())
            {
                last_waste.clear();
                for e in &estimates {
                    last_waste.insert(e.group.clone(), e.waste());
                }
            }
            let kept = kept.map(|(k, copy, seq)| (estimates[k].group.clone(), copy, seq));
            estimates.sort_by(&better);
            if estimates.is_empty() {
                continue;
            }
            let best = estimates.swap_remove(0);
            match kept {
                Some((group, copy, seq)) if group == best.group => {
                    planned = copy;
                    sequence.extend(seq);
                }
                _ => {
                    // Trials leave `planned` as it was; the winner is packed again, for good
                    // (the same packing: the state is the one its trial saw).
                    if let Some((g, ts)) = options.iter().find(|(g, _)| *g == best.group) {
                        ctx.estimate(
                            g,
                            ts,
                            &remaining,
                            &mut planned,
                            &headroom,
                            &zone_nodes,
                            Some(&mut sequence),
                            None,
                        );
                    }
                }
            }
            estimates.sort_by(|a, b| a.group.cmp(&b.group));
            let others: Vec<String> = estimates
                .iter()
                .map(|e| {
                    let at_least = if e.bounded { "≥ " } else { "" };
                    format!("{} (idle {at_least}{:.1}%)", e.group, 50.0 * e.waste())
                })
                .collect();
            let opened: u32 = best.opened.values().sum();
            plan.reasons.push(format!(
                "{} (priority {}): {} new node(s) [{}] for {} pod(s), idle cpu {:.1}% memory {:.1}%{}",
                best.group,
                best.priority,
                opened,
                best.opened
                    .iter()
                    .map(|(t, n)| format!("{}: {n}", templates[*t].zone))
                    .collect::<Vec<_>>()
                    .join(", "),
                best.placed,
                100.0 * best.cpu_waste,
                100.0 * best.memory_waste,
                if others.is_empty() {
                    String::new()
                } else {
                    format!("; more waste: {}", others.join(", "))
                }
            ));
            let mut taken = vec![false; pods.len()];
            for members in &planned.members {
                for &(_, m) in members {
                    taken[m] = true;
                }
            }
            for r in &mut remaining {
                r.retain(|&m| !taken[m]);
            }
        }
        // Minimal; freed headroom may let waiting pods in: go round again.
        let removed = ctx.consolidate(&mut planned, &mut sequence);
        let waiting = remaining.iter().any(|r| !r.is_empty());
        if removed == 0 || !waiting {
            break;
        }
    }
    let live = planned.per_template(templates.len());
    for (c, r) in remaining.iter().enumerate() {
        if r.is_empty() {
            continue;
        }
        // Room left in a zone the pod fits: its constraints, not capacity, keep it out.
        let room = feasible[c]
            .iter()
            .enumerate()
            .any(|(t, f)| *f && base_headroom[t] > live[t]);
        if room {
            plan.constrained.extend(r.iter().copied());
        } else {
            plan.waiting_for_capacity.extend(r.iter().copied());
        }
    }
    plan.waiting_for_capacity.sort_unstable();
    plan.constrained.sort_unstable();
    if !plan.constrained.is_empty() {
        plan.reasons.push(format!(
            "{} pod(s) fit no node by their pod affinity, anti-affinity or topology spread constraints",
            plan.constrained.len()
        ));
    }
    if !plan.waiting_for_capacity.is_empty() {
        plan.reasons.push(format!(
            "{} pod(s) wait for capacity: every zone of every group that fits them is at maxPerZone",
            plan.waiting_for_capacity.len()
        ));
    }
    let mut counts: BTreeMap<(String, String), (u32, usize)> = BTreeMap::new();
    let mut members = planned.members;
    for (b, list) in members.iter().enumerate().take(planned.first) {
        for &(_, m) in list {
            plan.fits_existing.push((m, targets[b].clone()));
        }
    }
    plan.fits_existing.sort();
    for (t, members) in planned
        .template
        .into_iter()
        .zip(members.drain(planned.first..))
    {
        if members.is_empty() {
            continue;
        }
        let tpl = &templates[t];
        let e = counts
            .entry((tpl.group.clone(), tpl.zone.clone()))
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += members.len();
        let mut pods_here: Vec<usize> = members.into_iter().map(|(_, m)| m).collect();
        pods_here.sort_by(|&a, &b| {
            (&pods[a].namespace, &pods[a].name).cmp(&(&pods[b].namespace, &pods[b].name))
        });
        plan.new_nodes.push(PlannedNode {
            group: tpl.group.clone(),
            zone: tpl.zone.clone(),
            pods: pods_here,
        });
    }
    plan.commands = counts
        .into_iter()
        .map(
            |((group, zone), (count, pods))| ScalingCommand::CreateNodes {
                group,
                zone,
                count,
                why: Why::PendingPods { pods },
            },
        )
        .collect();
    plan.placement_order = last_placements(&sequence, pods.len());
    plan
}

/// The pods of `sequence` (every placement in order, a pod listed again when placed again),
/// each once, in the order of its last placement.
fn last_placements(sequence: &[usize], pods: usize) -> Vec<usize> {
    let mut last = vec![usize::MAX; pods];
    for (at, &m) in sequence.iter().enumerate() {
        last[m] = at;
    }
    sequence
        .iter()
        .enumerate()
        .filter(|&(at, &m)| last[m] == at)
        .map(|(_, &m)| m)
        .collect()
}

/// Each group's reason for not hosting `pod` even on an empty node.
fn unplaceable_reasons(
    snapshot: &ClusterSnapshot<'_>,
    templates: &[GroupTemplate],
    pod: &Pod,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for g in &snapshot.groups {
        let name = g.name().to_owned();
        if g.class.is_none() {
            let reference = g
                .group
                .spec
                .cloud_instances
                .as_ref()
                .and_then(|c| c.class_reference.as_ref())
                .map_or_else(|| "(none)".to_owned(), |r| format!("{}/{}", r.kind, r.name));
            out.push((name, format!("instance class {reference} is unknown")));
            continue;
        }
        if g.zones.is_empty() {
            out.push((name, "the group has no zones".to_owned()));
            continue;
        }
        let mut reasons: Vec<String> = templates
            .iter()
            .filter(|t| t.group == name)
            .filter_map(|t| check_fit(pod, &t.node, &[]).err())
            .map(|m| m.to_string())
            .collect();
        reasons.sort();
        reasons.dedup();
        out.push((name, reasons.join("; ")));
    }
    out
}

/// What the estimate and consolidation steps share.
struct Ctx<'c, 'a> {
    pods: &'a [Pod],
    classes: &'c [PodClass<'a>],
    templates: &'c [GroupTemplate],
    caps: &'c [([i64; 3], Vec<i64>)],
    feasible: &'c [Vec<bool>],
}

impl<'c, 'a: 'c> Ctx<'c, 'a> {
    /// Packs the remaining pods for one group (its templates `ts`): onto room left on the
    /// nodes planned so far, then onto new nodes of the group, each in the zone with the fewest
    /// of the group's nodes among those the pod fits and that have headroom.
    ///
    /// With `keep` (the sequence of placements to extend) the packing stays in `planned`;
    /// without, `planned` is left exactly as it was (a trial: the placer's changes are rolled
    /// back, added nodes and members removed).
    ///
    /// A new node opens only in a zone where the pod's topology rules admit it on an empty node
    /// ([`Placer::fits_fresh`]); among those, the fewest nodes of the group first, then the
    /// pod's preferred zone terms and `ScheduleAnyway` zone spread, then the zone name
    /// (docs/scheduling.md §3).
    #[allow(clippy::too_many_arguments)]
    fn estimate(
        &self,
        group: &str,
        ts: &[usize],
        remaining: &[Vec<usize>],
        planned: &mut Planned<'c>,
        headroom: &[u32],
        zone_nodes: &[u32],
        mut keep: Option<&mut Vec<usize>>,
        beat: Option<f64>,
    ) -> Estimate {
        let mut left: Vec<u32> = ts.iter().map(|&t| headroom[t]).collect();
        let mut count: Vec<u32> = ts.iter().map(|&t| zone_nodes[t]).collect();
        let p = planned;
        let keeping = keep.is_some();
        let mut zones: Vec<Option<u32>> = ts
            .iter()
            .map(|&t| p.placer.zone_of(&self.templates[t].node.labels))
            .collect();
        // A trial records what it changes to roll it back; a packing kept needs no record.
        let checkpoint = if keeping { 0 } else { p.placer.begin() };
        let first_new = p.members.len();
        // Nodes planned before this estimate that received a member, in order.
        let mut touched: Vec<usize> = Vec::new();
        // Whether each new node holds a pod (a trial keeps no member lists for new nodes:
        // they are dropped with the trial).
        let mut holds: Vec<bool> = Vec::new();
        let mut placed = 0usize;
        // The early cut-off (docs/scheduling.md §6): capacity and requests of the new nodes
        // holding pods so far, and the requests of the pods still to try. The final packing's
        // new nodes have at least this capacity and hold at most `used + pending` of requests,
        // so `least_idle` of those is a lower bound of its waste, which only grows as the
        // packing goes on; once it exceeds the best waste so far, this group cannot win.
        let mut cut: Option<(f64, f64)> = None;
        let (mut cap_cpu, mut cap_mem, mut used_cpu, mut used_mem) = (0i128, 0i128, 0i128, 0i128);
        let (mut pending_cpu, mut pending_mem) = (0i128, 0i128);
        // The classes with pods to try that some template of the group admits, in order.
        let todo: Vec<usize> = (0..self.classes.len())
            .filter(|&c| !remaining[c].is_empty() && ts.iter().any(|&t| self.feasible[c][t]))
            .collect();
        if beat.is_some() {
            for &c in &todo {
                let class = &self.classes[c];
                let n = remaining[c].len() as i128;
                pending_cpu += n * i128::from(class.demand.core[CPU]);
                pending_mem += n * i128::from(class.demand.core[MEMORY]);
            }
        }
        'classes: for &c in &todo {
            let class = &self.classes[c];
            let (cpu, mem) = (
                i128::from(class.demand.core[CPU]),
                i128::from(class.demand.core[MEMORY]),
            );
            for &m in &remaining[c] {
                if let Some(best) = beat {
                    // Both bounds are 0 (no better than any waste) while the pods still to try
                    // could fill the capacity in each resource: no need to divide.
                    if used_cpu + pending_cpu < cap_cpu || used_mem + pending_mem < cap_mem {
                        let lower = (
                            least_idle(cap_cpu, used_cpu + pending_cpu),
                            least_idle(cap_mem, used_mem + pending_mem),
                        );
                        if lower.0 + lower.1 > best + CUT_MARGIN {
                            cut = Some(lower);
                            break 'classes;
                        }
                    }
                    pending_cpu -= cpu;
                    pending_mem -= mem;
                }
                let pod = &self.pods[m];
                if let Some(at) = p.placer.place(c, pod, &class.demand, false) {
                    if at.bin >= first_new {
                        if !holds[at.bin - first_new] {
                            holds[at.bin - first_new] = true;
                            let t = p.template[at.bin - p.first];
                            cap_cpu += i128::from(self.caps[t].0[CPU]);
                            cap_mem += i128::from(self.caps[t].0[MEMORY]);
                        }
                        used_cpu += cpu;
                        used_mem += mem;
                        if keeping {
                            p.members[at.bin].push((c, m));
                        }
                    } else {
                        p.members[at.bin].push((c, m));
                        touched.push(at.bin);
                    }
                    if let Some(seq) = keep.as_deref_mut() {
                        seq.push(m);
                    }
                    placed += 1;
                    continue;
                }
                let mut best: Option<(usize, (u32, i64, i64))> = None;
                for k in 0..ts.len() {
                    if !self.feasible[c][ts[k]]
                        || left[k] == 0
                        || !p.placer.fits_fresh_in(c, pod, zones[k])
                    {
                        continue;
                    }
                    let (score, soft) = p.placer.zone_preference(c, pod, zones[k]);
                    let key = (count[k], -score, soft);
                    // Ties go to the first zone by name (the group's zones are sorted).
                    if best.is_none_or(|(_, b)| key < b) {
                        best = Some((k, key));
                    }
                }
                let Some((k, _)) = best else { continue };
                let t = ts[k];
                let node = &self.templates[t].node;
                let bin = p
                    .placer
                    .push_bin(&node.labels, &node.taints, &self.caps[t], true);
                if zones[k].is_none() {
                    // The zone is known now that a bin has it.
                    zones[k] = p.placer.zone_of(&node.labels);
                }
                p.template.push(t);
                p.members.push(Vec::new());
                holds.push(false);
                left[k] -= 1;
                count[k] += 1;
                match p.placer.place_on(c, pod, &class.demand, bin) {
                    Some(at) => {
                        cap_cpu += i128::from(self.caps[t].0[CPU]);
                        cap_mem += i128::from(self.caps[t].0[MEMORY]);
                        used_cpu += cpu;
                        used_mem += mem;
                        holds[at - first_new] = true;
                        if keeping {
                            p.members[at].push((c, m));
                        }
                        if let Some(seq) = keep.as_deref_mut() {
                            seq.push(m);
                        }
                        placed += 1;
                    }
                    None => p.placer.disable(bin),
                }
            }
        }
        // The new nodes holding pods, per template (their capacity and requests were summed
        // as the pods landed).
        let mut opened: BTreeMap<usize, u32> = BTreeMap::new();
        for (k, _) in holds.iter().enumerate().filter(|(_, h)| **h) {
            *opened
                .entry(p.template[first_new + k - p.first])
                .or_insert(0) += 1;
        }
        let idle = |cap: i128, used: i128| {
            if cap <= 0 {
                0.0
            } else {
                (cap - used) as f64 / cap as f64
            }
        };
        if !keeping {
            p.placer.rollback(checkpoint);
            for &b in touched.iter().rev() {
                p.members[b].pop();
            }
            p.template.truncate(first_new - p.first);
            p.members.truncate(first_new);
        }
        let (cpu_waste, memory_waste) =
            cut.unwrap_or((idle(cap_cpu, used_cpu), idle(cap_mem, used_mem)));
        Estimate {
            group: group.to_owned(),
            priority: ts.first().map_or(0, |&t| self.templates[t].priority),
            opened,
            placed,
            cpu_waste,
            memory_waste,
            bounded: cut.is_some(),
        }
    }

    /// The waste of an ideal fractional packing of the remaining pods the group's templates
    /// `ts` admit onto nodes of its first template: only a hint of which group may win, to try
    /// it first.
    fn ideal_waste(&self, ts: &[usize], remaining: &[Vec<usize>]) -> f64 {
        let Some(&t) = ts.first() else {
            return f64::INFINITY;
        };
        let (mut cpu, mut mem) = (0f64, 0f64);
        for (c, class) in self.classes.iter().enumerate() {
            if remaining[c].is_empty() || !ts.iter().any(|&t| self.feasible[c][t]) {
                continue;
            }
            let n = remaining[c].len() as f64;
            cpu += n * class.demand.core[CPU] as f64;
            mem += n * class.demand.core[MEMORY] as f64;
        }
        let (cap_cpu, cap_mem) = (self.caps[t].0[CPU] as f64, self.caps[t].0[MEMORY] as f64);
        if cap_cpu <= 0.0 || cap_mem <= 0.0 {
            return f64::INFINITY;
        }
        let nodes = (cpu / cap_cpu).max(mem / cap_mem);
        if nodes <= 0.0 {
            return f64::INFINITY;
        }
        2.0 - cpu / (nodes * cap_cpu) - mem / (nodes * cap_mem)
    }

    /// Takes planned nodes out, emptiest first, while the first-fit simulation moves all their
    /// pods onto the other nodes; repeats until none can go. Returns how many went. Only nodes
    /// whose pods no placement depends on are tried ([`Bins::is_free`], docs/scheduling.md §2);
    /// moved pods are appended to `sequence`.
    fn consolidate(&self, planned: &mut Planned<'c>, sequence: &mut Vec<usize>) -> usize {
        let mut no_fit: Vec<Option<usize>> = vec![None; self.classes.len()];
        let mut removed = 0;
        let topology = planned.placer.bins.has_topology();
        // Whether pods of each class may move, once per class: the answer reads only what
        // every member of a class shares (namespace, labels, anti-affinity terms).
        let free: Vec<bool> = if topology {
            self.classes
                .iter()
                .map(|k| planned.placer.bins.is_free(k.rep))
                .collect()
        } else {
            Vec::new()
        };
        loop {
            let mut order: Vec<usize> = (planned.first..planned.members.len())
                .filter(|&b| !planned.members[b].is_empty())
                .filter(|&b| !topology || planned.members[b].iter().all(|&(c, _)| free[c]))
                .collect();
            order.sort_by_key(|&b| (planned.members[b].len(), b));
            let mut removed_any = false;
            for b in order {
                let mut items = planned.members[b].clone();
                items.sort_by(|&x, &y| trial_order(self.pods, self.classes, x, y));
                if let Ok(moves) =
                    planned
                        .placer
                        .try_empty_bin(b, &items, self.pods, self.classes, &mut no_fit)
                {
                    planned.members[b].clear();
                    for (c, m, to) in moves {
                        planned.members[to].push((c, m));
                        sequence.push(m);
                    }
                    removed_any = true;
                    removed += 1;
                }
            }
            if !removed_any {
                break;
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LabelSelector, Owner, Taint, TaintEffect, Toleration};
    use crate::scaling::node_shape;
    use crate::scaling::snapshot::Upcoming;
    use crate::scaling::testkit::{
        self, Sizes, World, pod, pods_by_node, scaling_group, valid_node,
    };
    use proptest::prelude::*;

    fn now() -> Timestamp {
        Timestamp::from_secs(1_000_000)
    }

    fn snapshot(w: &World) -> ClusterSnapshot<'_> {
        ClusterSnapshot::new(
            &w.nodes,
            &w.pods,
            &w.pdbs,
            &w.groups,
            &w.classes,
            &w.cloud_zones,
        )
        .with_upcoming(w.upcoming.clone())
    }

    fn empty_world(groups: Vec<NodeGroup>) -> World {
        World {
            groups,
            classes: testkit::classes(),
            cloud_zones: vec!["a".into(), "b".into(), "c".into()],
            nodes: Vec::new(),
            pods: Vec::new(),
            pdbs: Vec::new(),
            upcoming: Vec::new(),
        }
    }

    use crate::model::NodeGroup;

    fn replicas(w: &mut World, base: &Pod, n: usize) {
        for i in 0..n {
            let mut p = base.clone();
            p.name = format!("{}-{i}", base.name);
            w.pods.push(p);
        }
    }

    fn counts(plan: &ScaleUpPlan) -> Vec<(String, String, u32)> {
        plan.counts()
            .into_iter()
            .map(|((g, z), n)| (g.to_owned(), z.to_owned(), n))
            .collect()
    }

    #[test]
    fn existing_room_means_no_new_node() {
        let mut w = empty_world(vec![scaling_group("g", "medium", 0, 5, 0, None)]);
        let g = &w.groups[0];
        let class = w.classes[1].clone();
        let shape = node_shape(g, &class);
        w.nodes.push(template_node(g, &class, &shape, "a", "n1"));
        replicas(&mut w, &pod("work", "web", 500, 512), 4);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert!(plan.commands.is_empty(), "{:?}", plan.commands);
        assert_eq!(plan.fits_existing.len(), 4);
    }

    #[test]
    fn higher_priority_wins_and_taints_send_the_rest_elsewhere() {
        let mut high = scaling_group("high", "medium", 0, 5, 10, Some(vec!["a".into()]));
        high.spec.node_template.as_mut().unwrap().taints = Some(vec![Taint {
            key: "dedicated".into(),
            value: Some("high".into()),
            effect: Some(TaintEffect::NoSchedule),
        }]);
        let low = scaling_group("low", "medium", 0, 5, 0, Some(vec!["a".into()]));
        let mut w = empty_world(vec![high, low]);
        let mut tolerant = pod("work", "tolerant", 1000, 1024);
        tolerant.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: None,
        });
        replicas(&mut w, &tolerant, 3);
        replicas(&mut w, &pod("work", "plain", 1000, 1024), 3);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert_eq!(
            counts(&plan),
            vec![
                ("high".into(), "a".into(), 1),
                ("low".into(), "a".into(), 1)
            ]
        );
        let high_node = plan.new_nodes.iter().find(|n| n.group == "high").unwrap();
        assert!(
            high_node
                .pods
                .iter()
                .all(|&i| w.pods[i].name.starts_with("tolerant"))
        );
        assert!(
            plan.reasons[0].starts_with("high (priority 10)"),
            "{:?}",
            plan.reasons
        );
    }

    #[test]
    fn equal_priority_least_waste_wins() {
        // 8 pods of 1.8 cpu / 1 GiB: small nodes (2 cpu) waste little cpu, medium ones more.
        let small = scaling_group("a-small", "small", 0, 20, 0, Some(vec!["a".into()]));
        let medium = scaling_group("b-medium", "medium", 0, 20, 0, Some(vec!["a".into()]));
        let mut w = empty_world(vec![small, medium]);
        replicas(&mut w, &pod("work", "web", 1800, 1024), 4);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert_eq!(counts(&plan), vec![("a-small".into(), "a".into(), 4)]);
        assert!(
            plan.reasons[0].contains("more waste: b-medium"),
            "{:?}",
            plan.reasons
        );
    }

    #[test]
    fn zones_are_balanced_and_max_is_respected() {
        let mut w = empty_world(vec![scaling_group("g", "medium", 0, 2, 0, None)]);
        let mut spread = pod("work", "spread", 100, 100);
        spread.labels.insert("app".into(), "spread".into());
        spread.hostname_anti_affinity = vec![LabelSelector {
            match_labels: Some([("app".to_string(), "spread".to_string())].into()),
            match_expressions: None,
        }];
        replicas(&mut w, &spread, 8);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert_eq!(
            counts(&plan),
            vec![
                ("g".into(), "a".into(), 2),
                ("g".into(), "b".into(), 2),
                ("g".into(), "c".into(), 2)
            ]
        );
        assert_eq!(plan.waiting_for_capacity.len(), 2);
    }

    #[test]
    fn unplaceable_pods_are_reported_with_reasons() {
        let mut w = empty_world(vec![
            scaling_group("g", "medium", 0, 2, 0, None),
            scaling_group("lost", "missing", 0, 2, 0, None),
        ]);
        replicas(&mut w, &pod("work", "huge", 64_000, 1024), 2);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert!(plan.commands.is_empty());
        assert_eq!(plan.unplaceable.len(), 1);
        let u = &plan.unplaceable[0];
        assert_eq!(u.pods.len(), 2);
        assert!(
            u.reasons[0].1.contains("insufficient cpu"),
            "{:?}",
            u.reasons
        );
        assert!(
            u.reasons[1].1.contains("InstanceClass/missing is unknown"),
            "{:?}",
            u.reasons
        );
    }

    #[test]
    fn upcoming_machines_absorb_pending_pods() {
        let mut w = empty_world(vec![scaling_group(
            "g",
            "medium",
            0,
            5,
            0,
            Some(vec!["a".into()]),
        )]);
        replicas(&mut w, &pod("work", "web", 1000, 1024), 3);
        w.upcoming.push(Upcoming {
            group: "g".into(),
            zone: "a".into(),
            count: 1,
        });
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert!(plan.commands.is_empty(), "{:?}", plan.commands);
        assert!(
            plan.fits_existing
                .iter()
                .all(|(_, t)| matches!(t, ExistingTarget::Upcoming { .. }))
        );
    }

    #[test]
    fn daemonsets_shrink_the_template() {
        let mut w = empty_world(vec![scaling_group(
            "g",
            "small",
            0,
            5,
            0,
            Some(vec!["a".into()]),
        )]);
        let mut ds = pod("kube-system", "big-agent-x", 1500, 64);
        ds.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "big-agent".into(),
        });
        ds.node_name = Some("elsewhere".into());
        w.pods.push(ds);
        let templates = group_templates(&snapshot(&w));
        assert_eq!(templates[0].daemonsets, vec!["kube-system/big-agent"]);
        // small: 2 cores − 70m reserve − 1500m = 430m left.
        assert_eq!(templates[0].node.allocatable["cpu"], Quantity(430));
        replicas(&mut w, &pod("work", "web", 500, 64), 1);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert_eq!(plan.unplaceable.len(), 1);
    }

    #[test]
    fn real_pods_preempt_standby_and_standby_is_replaced() {
        let mut w = empty_world(vec![scaling_group(
            "g",
            "medium",
            0,
            5,
            0,
            Some(vec!["a".into()]),
        )]);
        let g = &w.groups[0];
        let class = w.classes[1].clone();
        let shape = node_shape(g, &class);
        w.nodes.push(template_node(g, &class, &shape, "a", "warm"));
        let snap_groups = w.groups.clone();
        let sg = crate::scaling::ScalingGroup::new(&snap_groups[0], &w.classes, &w.cloud_zones);
        let mut holder = crate::scaling::standby::holder_pod(&sg, "a", 0).unwrap();
        holder.node_name = Some("warm".into());
        w.pods.push(holder);
        replicas(&mut w, &pod("work", "burst", 1500, 2048), 2);
        let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
        assert_eq!(plan.fits_existing.len(), 2, "{plan:?}");
        assert_eq!(plan.preempted.len(), 1, "{plan:#?}");
        assert_eq!(counts(&plan), vec![("g".into(), "a".into(), 1)]);
        assert_eq!(plan.new_nodes[0].pods, plan.preempted);
    }

    // --- properties ------------------------------------------------------------------------

    fn key(p: &Pod) -> String {
        p.key()
    }

    /// The same first-fit trial the planner's minimality pass runs, written over model objects.
    fn trial_key(p: &Pod) -> (bool, i128, String, String) {
        let ext = p
            .requests
            .iter()
            .any(|(k, q)| !matches!(k.as_str(), "cpu" | "memory" | "pods") && q.0 > 0);
        let cpu = p.requests.get("cpu").map_or(0, |q| q.0.max(0));
        let mem = p.requests.get("memory").map_or(0, |q| q.0.max(0));
        let score = i128::from(cpu) * i128::from(4i64 << 30) + i128::from(mem);
        (!ext, -score, p.namespace.clone(), p.name.clone())
    }

    fn check_plan(w: &World, plan: &ScaleUpPlan) -> Result<(), TestCaseError> {
        let snap = snapshot(w);
        // Replayed in its order, every placement passes the reference.
        if let Err(e) = crate::scaling::reference::replay_scale_up(&snap, plan) {
            return Err(TestCaseError::fail(e));
        }
        let cfg = ScalingConfig::default();
        let templates = group_templates(&snap);
        let template = |g: &str, z: &str| {
            templates
                .iter()
                .find(|t| t.group == g && t.zone == z)
                .unwrap()
        };
        // Every pending pod in exactly one outcome.
        let pending: Vec<usize> = snap.pending_pods().map(|(i, _)| i).collect();
        let mut seen: BTreeMap<usize, &str> = BTreeMap::new();
        let mut note = |i: usize, what: &'static str| -> Result<(), TestCaseError> {
            prop_assert!(
                seen.insert(i, what).is_none(),
                "pod {} twice",
                w.pods[i].key()
            );
            Ok(())
        };
        let preempted: Vec<usize> = plan.preempted.clone();
        for (i, _) in &plan.fits_existing {
            note(*i, "existing")?;
        }
        for n in &plan.new_nodes {
            for &i in &n.pods {
                note(i, "new")?;
            }
        }
        for u in &plan.unplaceable {
            for &i in &u.pods {
                note(i, "unplaceable")?;
            }
        }
        for &i in &plan.waiting_for_capacity {
            note(i, "waiting")?;
        }
        for &i in &plan.constrained {
            note(i, "constrained")?;
        }
        let mut expected: Vec<usize> = pending.clone();
        expected.extend(preempted.iter().copied());
        expected.sort_unstable();
        let got: Vec<usize> = seen.keys().copied().collect();
        prop_assert_eq!(got, expected);

        // Placements are valid: existing nodes (minus preempted holders), upcoming machines and
        // planned nodes.
        let mut on = pods_by_node(&w.pods);
        for list in on.values_mut() {
            list.retain(|p| !preempted.iter().any(|&i| std::ptr::eq(*p, &w.pods[i])));
        }
        let mut upcoming_on: BTreeMap<(String, String, u32), Vec<&Pod>> = BTreeMap::new();
        for (i, t) in &plan.fits_existing {
            match t {
                ExistingTarget::Node(n) => on.entry(n.as_str()).or_default().push(&w.pods[*i]),
                ExistingTarget::Upcoming {
                    group,
                    zone,
                    machine,
                } => upcoming_on
                    .entry((group.clone(), zone.clone(), *machine))
                    .or_default()
                    .push(&w.pods[*i]),
            }
        }
        for (_, t) in &plan.fits_existing {
            if let ExistingTarget::Node(n) = t {
                let node = w.nodes.iter().find(|x| &x.name == n).unwrap();
                prop_assert!(node.ready && !node.unschedulable && !snap.is_leaving(node));
                valid_node(node, &on[n.as_str()]).map_err(TestCaseError::fail)?;
            }
        }
        for ((g, z, m), list) in &upcoming_on {
            prop_assert!(*m < snap.upcoming_in(g, z));
            valid_node(&template(g, z).node, list).map_err(TestCaseError::fail)?;
        }
        let planned: Vec<(Node, Vec<&Pod>)> = plan
            .new_nodes
            .iter()
            .map(|n| {
                (
                    template(&n.group, &n.zone).node.clone(),
                    n.pods.iter().map(|&i| &w.pods[i]).collect(),
                )
            })
            .collect();
        for (node, list) in &planned {
            valid_node(node, list).map_err(TestCaseError::fail)?;
        }

        // Never above maxPerZone.
        let states = zone_states(&snap, &cfg, now());
        for ((g, z), n) in plan.counts() {
            let zone = states[g].iter().find(|s| s.zone == z).unwrap();
            prop_assert!(zone.in_group_zones);
            prop_assert!(
                zone.desired.max(zone.present()) + n <= zone.max,
                "{}/{}: {} + {} > max {}",
                g,
                z,
                zone.desired.max(zone.present()),
                n,
                zone.max
            );
        }

        // Unplaceable pods fit no template; waiting pods only fit full zones.
        for u in &plan.unplaceable {
            for &i in &u.pods {
                for t in &templates {
                    prop_assert!(
                        check_fit(&w.pods[i], &t.node, &[]).is_err(),
                        "{} reported unplaceable but fits {}/{}",
                        key(&w.pods[i]),
                        t.group,
                        t.zone
                    );
                }
            }
        }
        let planned_in = plan.counts();
        for &i in &plan.waiting_for_capacity {
            for t in templates
                .iter()
                .filter(|t| check_fit(&w.pods[i], &t.node, &[]).is_ok())
            {
                let zone = states[t.group.as_str()]
                    .iter()
                    .find(|s| s.zone == t.zone)
                    .unwrap();
                let n = planned_in
                    .get(&(t.group.as_str(), t.zone.as_str()))
                    .copied()
                    .unwrap_or(0);
                prop_assert!(
                    zone.desired.max(zone.present()) + n >= zone.max,
                    "{} waits although {}/{} has room",
                    key(&w.pods[i]),
                    &t.group,
                    &t.zone
                );
            }
        }

        // Minimal: no planned node's pods all move onto the other planned nodes by first fit.
        for x in 0..planned.len() {
            let mut others: Vec<(usize, Vec<&Pod>)> = (0..planned.len())
                .filter(|&y| y != x)
                .map(|y| (y, planned[y].1.clone()))
                .collect();
            let mut mine = planned[x].1.clone();
            mine.sort_by_key(|p| trial_key(p));
            let mut all = true;
            for p in mine {
                match others
                    .iter_mut()
                    .find(|(y, list)| check_fit(p, &planned[*y].0, list).is_ok())
                {
                    Some((_, list)) => list.push(p),
                    None => {
                        all = false;
                        break;
                    }
                }
            }
            prop_assert!(
                !all,
                "planned node {} ({}/{}) is redundant",
                x,
                &plan.new_nodes[x].group,
                &plan.new_nodes[x].zone
            );
        }
        Ok(())
    }

    type Keyed = (
        Vec<(String, String, Vec<String>)>,
        Vec<(String, String)>,
        Vec<String>,
        Vec<String>,
    );

    fn keyed(w: &World, plan: &ScaleUpPlan) -> Keyed {
        let names = |v: &[usize]| {
            let mut n: Vec<String> = v.iter().map(|&i| key(&w.pods[i])).collect();
            n.sort();
            n
        };
        (
            plan.new_nodes
                .iter()
                .map(|n| (n.group.clone(), n.zone.clone(), names(&n.pods)))
                .collect(),
            {
                let mut v: Vec<(String, String)> = plan
                    .fits_existing
                    .iter()
                    .map(|(i, t)| (key(&w.pods[*i]), t.to_string()))
                    .collect();
                v.sort();
                v
            },
            names(&plan.waiting_for_capacity),
            {
                let mut v: Vec<String> = plan
                    .unplaceable
                    .iter()
                    .flat_map(|u| u.pods.iter().map(|&i| key(&w.pods[i])))
                    .collect();
                v.sort();
                v
            },
        )
    }

    /// Guards the properties below against passing vacuously: their worlds produce new nodes,
    /// existing fits, unplaceable and waiting pods, preemptions and consolidations.
    #[test]
    fn property_worlds_exercise_every_outcome() {
        let (mut new, mut existing, mut unplaceable, mut waiting, mut preempted, mut groups_used) =
            (0, 0, 0, 0, 0, 0);
        for seed in 0..80 {
            let w = testkit::world(
                seed,
                Sizes {
                    groups: 4,
                    nodes_per_zone: 2,
                    deployments: 20,
                    max_per_zone: 3,
                },
            );
            let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            new += plan.new_nodes.len();
            existing += plan.fits_existing.len();
            unplaceable += plan.unplaceable.len();
            waiting += plan.waiting_for_capacity.len();
            preempted += plan.preempted.len();
            groups_used += usize::from(
                plan.counts()
                    .keys()
                    .map(|k| k.0)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    > 1,
            );
        }
        assert!(
            new > 50
                && existing > 50
                && unplaceable > 10
                && waiting > 10
                && preempted > 0
                && groups_used > 10,
            "new {new}, existing {existing}, unplaceable {unplaceable}, waiting {waiting}, preempted {preempted}, multi-group {groups_used}"
        );
    }

    /// Every pending pod in exactly one outcome, the plan replays cleanly against the
    /// reference (docs/scheduling.md §4), never above maxPerZone, waiting pods only fit full
    /// zones and constrained pods some zone with room.
    fn check_constrained_plan(w: &World, plan: &ScaleUpPlan) -> Result<(), TestCaseError> {
        let snap = snapshot(w);
        if let Err(e) = crate::scaling::reference::replay_scale_up(&snap, plan) {
            return Err(TestCaseError::fail(e));
        }
        let pending: Vec<usize> = snap.pending_pods().map(|(i, _)| i).collect();
        let mut seen: Vec<usize> = plan.fits_existing.iter().map(|(i, _)| *i).collect();
        seen.extend(plan.new_nodes.iter().flat_map(|n| n.pods.iter().copied()));
        seen.extend(plan.unplaceable.iter().flat_map(|u| u.pods.iter().copied()));
        seen.extend(plan.waiting_for_capacity.iter().copied());
        seen.extend(plan.constrained.iter().copied());
        seen.sort_unstable();
        let mut expected = pending.clone();
        expected.extend(plan.preempted.iter().copied());
        expected.sort_unstable();
        prop_assert_eq!(seen, expected, "every pending pod in exactly one outcome");
        let cfg = ScalingConfig::default();
        let states = zone_states(&snap, &cfg, now());
        let templates = group_templates(&snap);
        let planned_in = plan.counts();
        for ((g, z), n) in &planned_in {
            let zone = states[g].iter().find(|s| s.zone == *z).unwrap();
            prop_assert!(zone.desired.max(zone.present()) + n <= zone.max);
        }
        let full = |t: &GroupTemplate| {
            let zone = states[t.group.as_str()]
                .iter()
                .find(|s| s.zone == t.zone)
                .unwrap();
            let n = planned_in
                .get(&(t.group.as_str(), t.zone.as_str()))
                .copied()
                .unwrap_or(0);
            zone.desired.max(zone.present()) + n >= zone.max
        };
        for &i in &plan.waiting_for_capacity {
            for t in templates
                .iter()
                .filter(|t| check_fit(&w.pods[i], &t.node, &[]).is_ok())
            {
                prop_assert!(
                    full(t),
                    "{} waits although {}/{} has room",
                    key(&w.pods[i]),
                    &t.group,
                    &t.zone
                );
            }
        }
        for &i in &plan.constrained {
            prop_assert!(
                templates
                    .iter()
                    .any(|t| check_fit(&w.pods[i], &t.node, &[]).is_ok() && !full(t)),
                "{} reported constrained without a zone with room",
                key(&w.pods[i])
            );
        }
        Ok(())
    }

    /// Guards `cut_off_never_changes_the_plan` against passing vacuously: in its worlds some
    /// group estimates do stop early (their reasons report a bound, `idle ≥ …`).
    #[test]
    fn cut_off_worlds_stop_some_estimates() {
        let mut stopped = 0;
        for seed in 0..60 {
            let w = testkit::world(
                seed,
                Sizes {
                    groups: 5,
                    nodes_per_zone: 1,
                    deployments: 24,
                    max_per_zone: 5,
                },
            );
            let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            stopped += plan.reasons.iter().filter(|r| r.contains("idle ≥")).count();
        }
        assert!(stopped > 5, "only {stopped} estimates stopped early");
    }

    /// Guards the constrained properties against passing vacuously: their worlds place pods
    /// carrying each kind of constraint, on new and existing nodes, and report constrained
    /// pods.
    #[test]
    fn constrained_worlds_exercise_every_constraint() {
        let (mut spread, mut affinity, mut anti, mut constrained, mut new) = (0, 0, 0, 0, 0);
        for seed in 0..60 {
            let mut w = testkit::world(
                seed,
                Sizes {
                    groups: 3,
                    nodes_per_zone: 2,
                    deployments: 20,
                    max_per_zone: 4,
                },
            );
            testkit::constrain(&mut w, seed);
            let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            for &m in &plan.placement_order {
                let p = &w.pods[m];
                spread += usize::from(!p.topology_spread.is_empty());
                affinity += usize::from(!p.pod_affinity.is_empty());
                anti += usize::from(!p.pod_anti_affinity.is_empty());
            }
            constrained += plan.constrained.len();
            new += plan.new_nodes.len();
        }
        assert!(
            spread > 100 && affinity > 30 && anti > 30 && constrained > 10 && new > 50,
            "spread {spread}, affinity {affinity}, anti {anti}, constrained {constrained}, new {new}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// With topology spread and pod (anti-)affinity everywhere, no placement of the plan
        /// violates a required constraint (the reference replay), every pod has one outcome,
        /// and the plan is deterministic and independent of the listing order.
        #[test]
        fn constrained_plans_honour_every_constraint(seed in any::<u64>(), groups in 1usize..5, deployments in 0usize..25, per_zone in 0u64..3, max in 0u64..5, shuffle in any::<u64>()) {
            let mut w = testkit::world(seed, Sizes { groups, nodes_per_zone: per_zone, deployments, max_per_zone: max });
            testkit::constrain(&mut w, seed);
            let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            check_constrained_plan(&w, &plan)?;
            prop_assert_eq!(&plan, &plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now()));
            let mut v = w.clone();
            let mut rng = testkit::Rng::new(shuffle);
            for i in (1..v.pods.len()).rev() { let j = rng.below(i as u64 + 1) as usize; v.pods.swap(i, j); }
            for i in (1..v.nodes.len()).rev() { let j = rng.below(i as u64 + 1) as usize; v.nodes.swap(i, j); }
            let shuffled = plan_scale_up(&snapshot(&v), &ScalingConfig::default(), now());
            prop_assert_eq!(keyed(&w, &plan), keyed(&v, &shuffled));
        }

        /// The early cut-off of group estimates (docs/scheduling.md §6) never changes the
        /// plan: with and without it, the same nodes, pods, outcomes, placement order and
        /// winners (only the losers' figures in the reasons may be bounds).
        #[test]
        fn cut_off_never_changes_the_plan(seed in any::<u64>(), groups in 1usize..6, deployments in 0usize..25, per_zone in 0u64..3, max in 0u64..6, constrain in any::<bool>()) {
            let mut w = testkit::world(seed, Sizes { groups, nodes_per_zone: per_zone, deployments, max_per_zone: max });
            if constrain {
                testkit::constrain(&mut w, seed);
            }
            let fast = plan(&snapshot(&w), &ScalingConfig::default(), now(), true);
            let plain = plan(&snapshot(&w), &ScalingConfig::default(), now(), false);
            let winners = |p: &ScaleUpPlan| -> Vec<String> {
                p.reasons.iter().map(|r| r.split("; more waste:").next().unwrap_or(r).to_owned()).collect()
            };
            prop_assert_eq!(winners(&fast), winners(&plain));
            let strip = |p: &ScaleUpPlan| ScaleUpPlan { reasons: Vec::new(), ..p.clone() };
            prop_assert_eq!(strip(&fast), strip(&plain));
        }

        /// Completeness, validity, bounds, unplaceable/waiting honesty and minimality (see
        /// `check_plan`) on random clusters.
        #[test]
        fn plan_is_valid_bounded_complete_and_minimal(seed in any::<u64>(), groups in 1usize..5, deployments in 0usize..25, per_zone in 0u64..3, max in 0u64..5) {
            let w = testkit::world(seed, Sizes { groups, nodes_per_zone: per_zone, deployments, max_per_zone: max });
            let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            check_plan(&w, &plan)?;
        }

        /// The same cluster listed in another order gives the same plan.
        #[test]
        fn plan_is_deterministic_and_order_independent(seed in any::<u64>(), shuffle in any::<u64>()) {
            let w = testkit::world(seed, Sizes { groups: 3, nodes_per_zone: 2, deployments: 15, max_per_zone: 3 });
            let plan = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            let again = plan_scale_up(&snapshot(&w), &ScalingConfig::default(), now());
            prop_assert_eq!(&plan, &again);
            let mut v = w.clone();
            let mut rng = testkit::Rng::new(shuffle);
            for i in (1..v.pods.len()).rev() { let j = rng.below(i as u64 + 1) as usize; v.pods.swap(i, j); }
            for i in (1..v.nodes.len()).rev() { let j = rng.below(i as u64 + 1) as usize; v.nodes.swap(i, j); }
            let shuffled = plan_scale_up(&snapshot(&v), &ScalingConfig::default(), now());
            prop_assert_eq!(keyed(&w, &plan), keyed(&v, &shuffled));
        }
    }
}
