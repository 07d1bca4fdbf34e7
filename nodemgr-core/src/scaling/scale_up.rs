//! Scale-up: which new nodes of which group in which zone the pending pods need (issue 4 item 2,
//! facts §8 "priority").
//!
//! # The plan
//! 1. **Existing room first.** Pending pods (unbound, not finished) are grouped into classes of
//!    identical scheduling needs and packed first-fit-decreasing onto the Ready, schedulable,
//!    not-leaving nodes (in name order) and onto the machines already ordered (upcoming, shaped
//!    like their group's template). Those pods cause no scale-up. A pod other than a
//!    standby holder may preempt standby holders ([`super::standby`]) when no node fits it
//!    without; the evicted holders become pending and are packed like any other pod.
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
//!    could not take.
//! 4. **Zones balanced.** Within a group, pods go first-fit onto the nodes the plan already
//!    opened; a new node opens in the zone (that the pod fits and that has headroom) with the
//!    fewest nodes of the group, existing and planned.
//! 5. **Minimal.** A consolidation pass takes planned nodes out, emptiest first, when the same
//!    first-fit simulation moves all their pods onto the other planned nodes; it repeats until
//!    no planned node can go. A pod may so end on a new node of a lower-priority group that is
//!    being added anyway.
//!
//! Pods that some group could host but that find every such zone at `maxPerZone` are reported as
//! waiting for capacity.
//!
//! # Guarantees (proptest properties)
//! * No zone ends above `maxPerZone`: desired-or-present count + planned ≤ max.
//! * Every pod placed by the plan fits where it was placed ([`super::placement::check_fit`]) and
//!   no node is overcommitted.
//! * Every pending pod is placed on an existing or upcoming node, on a planned node, reported
//!   unplaceable (it fits no group's template) or waiting for capacity (every template it fits
//!   is in a full zone).
//! * Minimality with respect to the simulation, as in step 5.
//! * Deterministic, and independent of the order of nodes and pods in the snapshot.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::model::{Node, Pod, Quantity, Resources, Timestamp};

use super::bounds::zone_states;
use super::class::template_node;
use super::command::{ScalingCommand, Why};
use super::config::ScalingConfig;
use super::placement::{
    Bins, CPU, MEMORY, PodClass, Placer, ResourceIndex, check_fit, check_static, classify,
    is_standby_holder, trial_order,
};
use super::snapshot::ClusterSnapshot;
use super::util::FastHash;

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
    },
}

impl fmt::Display for ExistingTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Node(n) => write!(f, "node {n}"),
            Self::Upcoming { group, zone } => write!(f, "an upcoming node of {group} in {zone}"),
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

/// A packing of pods onto new nodes of one group.
#[derive(Debug, Clone)]
struct Estimate {
    group: String,
    priority: i64,
    /// (template, pods with their class).
    bins: Vec<(usize, Vec<(usize, usize)>)>,
    placed: usize,
    cpu_waste: f64,
    memory_waste: f64,
}

impl Estimate {
    fn waste(&self) -> f64 {
        self.cpu_waste + self.memory_waste
    }
}

/// Plans the new nodes the pending pods of `snapshot` need (see the module docs).
pub fn plan_scale_up(
    snapshot: &ClusterSnapshot<'_>,
    config: &ScalingConfig,
    now: Timestamp,
) -> ScaleUpPlan {
    let pods = snapshot.pods;
    let mut plan = ScaleUpPlan::default();
    let pending: Vec<usize> = snapshot.pending_pods().map(|(i, _)| i).collect();
    if pending.is_empty() {
        return plan;
    }
    let index = ResourceIndex::from_pods(pods);
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
    let track = pending
        .iter()
        .any(|&i| !pods[i].hostname_anti_affinity.is_empty());
    let mut classes = classify(pods, pending.iter().copied(), &index);

    // --- 1. existing and upcoming room --------------------------------------------------
    let mut bins = Bins::new(index.len(), track);
    let mut existing: Vec<&Node> = snapshot
        .nodes
        .iter()
        .filter(|n| n.ready && !n.unschedulable && !snapshot.is_leaving(n))
        .collect();
    existing.sort_by(|a, b| a.name.cmp(&b.name));
    let mut targets: Vec<ExistingTarget> = Vec::with_capacity(existing.len());
    let mut bin_of: HashMap<&str, usize, FastHash> = HashMap::default();
    for n in &existing {
        let b = bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), true);
        bin_of.insert(n.name.as_str(), b);
        targets.push(ExistingTarget::Node(n.name.clone()));
    }
    for p in pods {
        if let Some(node) = &p.node_name
            && !p.is_terminal()
            && let Some(&b) = bin_of.get(node.as_str())
        {
            let demand = index.demand(p);
            if is_standby_holder(p) {
                bins.occupy_held(b, p, demand);
            } else {
                bins.occupy(b, p, &demand);
            }
        }
    }
    let mut upcoming = snapshot.upcoming.clone();
    upcoming.sort();
    for u in &upcoming {
        if let Some(&t) = template_at.get(&(u.group.as_str(), u.zone.as_str())) {
            for _ in 0..u.count {
                bins.push(
                    &templates[t].node.labels,
                    &templates[t].node.taints,
                    caps[t].clone(),
                    true,
                );
                targets.push(ExistingTarget::Upcoming {
                    group: u.group.clone(),
                    zone: u.zone.clone(),
                });
            }
        }
    }
    let mut placer = Placer::new(bins, classes.len());
    let mut residual: Vec<usize> = Vec::new();
    let mut evicted: Vec<usize> = Vec::new();
    for (c, class) in classes.iter().enumerate() {
        let may_preempt = !is_standby_holder(class.rep);
        for &m in &class.members {
            match placer.place(c, &pods[m], &class.demand, may_preempt) {
                Some(placed) => {
                    plan.fits_existing.push((m, targets[placed.bin].clone()));
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
        classes.extend(holder_classes);
        let mut again = Placer::new(placer.bins.clone(), classes.len());
        for c in first_new..classes.len() {
            for &m in &classes[c].members {
                match again.place(c, &pods[m], &classes[c].demand, false) {
                    Some(placed) => plan
                        .fits_existing
                        .push((m, targets[placed.bin].clone())),
                    None => residual.push(m),
                }
            }
        }
    }
    plan.fits_existing.sort();
    if residual.is_empty() {
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
        r.sort_by(|&a, &b| (&pods[a].namespace, &pods[a].name).cmp(&(&pods[b].namespace, &pods[b].name)));
    }
    let feasible: Vec<Vec<bool>> = classes
        .iter()
        .enumerate()
        .map(|(c, class)| {
            if remaining[c].is_empty() {
                return Vec::new();
            }
            templates
                .iter()
                .map(|t| check_fit(class.rep, &t.node, &[]).is_ok())
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

    // --- 3./4. groups by priority, zones balanced ---------------------------------------
    let states = zone_states(snapshot, config, now);
    let mut headroom: Vec<u32> = Vec::with_capacity(templates.len());
    let mut zone_nodes: Vec<u32> = Vec::with_capacity(templates.len());
    for t in &templates {
        let z = states
            .get(t.group.as_str())
            .and_then(|zs| zs.iter().find(|z| z.zone == t.zone));
        let (room, count) = z.map_or((0, 0), |z| {
            let used = z.desired.max(z.present());
            (z.max.saturating_sub(used), used)
        });
        headroom.push(room);
        zone_nodes.push(count);
    }
    let mut group_templates_of: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, t) in templates.iter().enumerate() {
        group_templates_of.entry(t.group.as_str()).or_default().push(i);
    }
    let ctx = Ctx {
        pods,
        classes: &classes,
        templates: &templates,
        caps: &caps,
        feasible: &feasible,
        n_ext: index.len(),
        track,
    };
    let mut committed: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    let mut exhausted: Vec<&str> = Vec::new();
    loop {
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
        for (g, ts) in options.iter().filter(|(_, ts)| templates[ts[0]].priority == top) {
            let e = ctx.estimate(g, ts, &remaining, &headroom, &zone_nodes);
            if e.placed > 0 {
                estimates.push(e);
            } else {
                // Cannot happen when the templates admit a pod (it fits an empty node);
                // guards the loop's termination all the same.
                exhausted.push(g);
            }
        }
        estimates.sort_by(|a, b| {
            a.waste()
                .total_cmp(&b.waste())
                .then_with(|| b.placed.cmp(&a.placed))
                .then_with(|| a.group.cmp(&b.group))
        });
        let Some(best) = estimates.first().cloned() else {
            continue;
        };
        let mut per_zone: BTreeMap<&str, u32> = BTreeMap::new();
        for (t, _) in &best.bins {
            *per_zone.entry(templates[*t].zone.as_str()).or_insert(0) += 1;
        }
        let others: Vec<String> = estimates[1..]
            .iter()
            .map(|e| format!("{} (waste {:.1}%)", e.group, 50.0 * e.waste()))
            .collect();
        plan.reasons.push(format!(
            "{} (priority {}): {} new node(s) [{}] for {} pod(s), idle cpu {:.1}% memory {:.1}%{}",
            best.group,
            best.priority,
            best.bins.len(),
            per_zone
                .iter()
                .map(|(z, n)| format!("{z}: {n}"))
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
        for (t, members) in &best.bins {
            headroom[*t] -= 1;
            zone_nodes[*t] += 1;
            for &(_, m) in members {
                taken[m] = true;
            }
        }
        for r in &mut remaining {
            r.retain(|&m| !taken[m]);
        }
        committed.extend(best.bins);
    }
    for r in &remaining {
        plan.waiting_for_capacity.extend(r.iter().copied());
    }
    plan.waiting_for_capacity.sort_unstable();
    if !plan.waiting_for_capacity.is_empty() {
        plan.reasons.push(format!(
            "{} pod(s) wait for capacity: every zone of every group that fits them is at maxPerZone",
            plan.waiting_for_capacity.len()
        ));
    }

    // --- 5. minimal -----------------------------------------------------------------------
    let kept = ctx.consolidate(committed);
    let mut counts: BTreeMap<(String, String), (u32, usize)> = BTreeMap::new();
    for (t, members) in kept {
        let tpl = &templates[t];
        let e = counts
            .entry((tpl.group.clone(), tpl.zone.clone()))
            .or_insert((0, 0));
        e.0 += 1;
        e.1 += members.len();
        let mut pods_here: Vec<usize> = members.into_iter().map(|(_, m)| m).collect();
        pods_here.sort_by(|&a, &b| (&pods[a].namespace, &pods[a].name).cmp(&(&pods[b].namespace, &pods[b].name)));
        plan.new_nodes.push(PlannedNode {
            group: tpl.group.clone(),
            zone: tpl.zone.clone(),
            pods: pods_here,
        });
    }
    plan.commands = counts
        .into_iter()
        .map(|((group, zone), (count, pods))| ScalingCommand::CreateNodes {
            group,
            zone,
            count,
            why: Why::PendingPods { pods },
        })
        .collect();
    plan
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
    n_ext: usize,
    track: bool,
}

impl<'c, 'a: 'c> Ctx<'c, 'a> {
    /// Packs the remaining pods onto new nodes of one group (its templates `ts`).
    fn estimate(
        &self,
        group: &str,
        ts: &[usize],
        remaining: &[Vec<usize>],
        headroom: &[u32],
        zone_nodes: &[u32],
    ) -> Estimate {
        let mut left: Vec<u32> = ts.iter().map(|&t| headroom[t]).collect();
        let mut count: Vec<u32> = ts.iter().map(|&t| zone_nodes[t]).collect();
        let mut placer = Placer::new(Bins::new(self.n_ext, self.track), self.classes.len());
        let mut bins: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
        let mut placed = 0usize;
        for (c, class) in self.classes.iter().enumerate() {
            if remaining[c].is_empty() || !ts.iter().any(|&t| self.feasible[c][t]) {
                continue;
            }
            for &m in &remaining[c] {
                let pod = &self.pods[m];
                if let Some(p) = placer.place(c, pod, &class.demand, false) {
                    bins[p.bin].1.push((c, m));
                    placed += 1;
                    continue;
                }
                let zone = (0..ts.len())
                    .filter(|&k| self.feasible[c][ts[k]] && left[k] > 0)
                    .min_by(|&a, &b| {
                        count[a]
                            .cmp(&count[b])
                            .then_with(|| self.templates[ts[a]].zone.cmp(&self.templates[ts[b]].zone))
                    });
                let Some(k) = zone else { continue };
                let t = ts[k];
                let node = &self.templates[t].node;
                let bin = placer
                    .bins
                    .push(&node.labels, &node.taints, self.caps[t].clone(), true);
                bins.push((t, Vec::new()));
                left[k] -= 1;
                count[k] += 1;
                match placer.place(c, pod, &class.demand, false) {
                    Some(p) => {
                        bins[p.bin].1.push((c, m));
                        placed += 1;
                    }
                    None => placer.disable(bin),
                }
            }
        }
        bins.retain(|(_, members)| !members.is_empty());
        let (mut cap_cpu, mut cap_mem, mut used_cpu, mut used_mem) = (0i128, 0i128, 0i128, 0i128);
        for (t, members) in &bins {
            cap_cpu += i128::from(self.caps[*t].0[CPU]);
            cap_mem += i128::from(self.caps[*t].0[MEMORY]);
            for &(c, _) in members {
                used_cpu += i128::from(self.classes[c].demand.core[CPU]);
                used_mem += i128::from(self.classes[c].demand.core[MEMORY]);
            }
        }
        let idle = |cap: i128, used: i128| {
            if cap <= 0 {
                0.0
            } else {
                (cap - used) as f64 / cap as f64
            }
        };
        Estimate {
            group: group.to_owned(),
            priority: ts.first().map_or(0, |&t| self.templates[t].priority),
            bins,
            placed,
            cpu_waste: idle(cap_cpu, used_cpu),
            memory_waste: idle(cap_mem, used_mem),
        }
    }

    /// Removes planned nodes whose pods the first-fit simulation moves onto the other planned
    /// nodes, emptiest first, until none can go. Returns the nodes kept, in plan order.
    fn consolidate(
        &self,
        committed: Vec<(usize, Vec<(usize, usize)>)>,
    ) -> Vec<(usize, Vec<(usize, usize)>)> {
        let mut placer = Placer::new(Bins::new(self.n_ext, self.track), self.classes.len());
        let mut members: Vec<Vec<(usize, usize)>> = Vec::with_capacity(committed.len());
        let mut template_of: Vec<usize> = Vec::with_capacity(committed.len());
        for (t, pods_here) in committed {
            let node = &self.templates[t].node;
            let bin = placer
                .bins
                .push(&node.labels, &node.taints, self.caps[t].clone(), true);
            for &(c, m) in &pods_here {
                placer.put_on(bin, &self.pods[m], &self.classes[c].demand);
            }
            template_of.push(t);
            members.push(pods_here);
        }
        let mut no_fit: Vec<Option<usize>> = vec![None; self.classes.len()];
        loop {
            let mut order: Vec<usize> = (0..members.len())
                .filter(|&b| placer.bins.is_enabled(b))
                .collect();
            order.sort_by_key(|&b| (members[b].len(), b));
            let mut removed_any = false;
            for b in order {
                let mut items = members[b].clone();
                items.sort_by(|&x, &y| trial_order(self.pods, self.classes, x, y));
                if let Ok(moves) =
                    placer.try_empty_bin(b, &items, self.pods, self.classes, &mut no_fit)
                {
                    members[b].clear();
                    for (c, m, to) in moves {
                        members[to].push((c, m));
                    }
                    removed_any = true;
                }
            }
            if !removed_any {
                break;
            }
        }
        template_of
            .into_iter()
            .zip(members)
            .filter(|(_, m)| !m.is_empty())
            .collect()
    }
}
