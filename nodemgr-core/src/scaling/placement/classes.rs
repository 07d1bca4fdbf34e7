//! Pod classes: pods the simulation cannot tell apart (same namespace, labels, requests and
//! scheduling rules) are placed as one class, sorted for first-fit decreasing; and the order in
//! which a node's pods are moved when a removal is tried.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::hash::{FastHash, Fx};
use crate::model::Pod;

use super::resources::{Demand, ResourceIndex, size_score};

/// Order in which a bin's pods are moved in a removal trial: pods needing extended resources
/// first, then larger ([`size_score`]), then by `namespace/name`.
pub(crate) fn trial_order(
    pods: &[Pod],
    classes: &[PodClass<'_>],
    a: (usize, usize),
    b: (usize, usize),
) -> std::cmp::Ordering {
    let (da, db) = (&classes[a.0].demand, &classes[b.0].demand);
    (!da.ext.is_empty())
        .cmp(&!db.ext.is_empty())
        .reverse()
        .then_with(|| size_score(db).cmp(&size_score(da)))
        .then_with(|| {
            (&pods[a.1].namespace, &pods[a.1].name).cmp(&(&pods[b.1].namespace, &pods[b.1].name))
        })
}

/// Pods that the simulation cannot tell apart: same namespace, labels, requests, selectors,
/// node and pod affinity, tolerations, anti-affinity, spread constraints and priority.
#[derive(Debug, Clone)]
pub(crate) struct PodClass<'a> {
    /// The first member (by `namespace/name`).
    pub(crate) rep: &'a Pod,
    /// What one member takes.
    pub(crate) demand: Demand,
    /// Members, as indices into the snapshot's pods, by `namespace/name`.
    pub(crate) members: Vec<usize>,
}

fn class_hash(p: &Pod) -> u64 {
    let mut h = Fx::default();
    p.namespace.hash(&mut h);
    p.labels.hash(&mut h);
    p.requests.hash(&mut h);
    p.node_selector.hash(&mut h);
    p.required_node_affinity.hash(&mut h);
    p.hostname_anti_affinity.len().hash(&mut h);
    p.tolerations.len().hash(&mut h);
    for t in &p.tolerations {
        (&t.key, t.exists, &t.value, &t.effect).hash(&mut h);
    }
    p.priority.hash(&mut h);
    p.priority_class.hash(&mut h);
    if p.has_topology_constraints() {
        p.pod_affinity.hash(&mut h);
        p.pod_anti_affinity.hash(&mut h);
        p.topology_spread.hash(&mut h);
    }
    h.finish()
}

fn same_class(a: &Pod, b: &Pod) -> bool {
    a.namespace == b.namespace
        && a.labels == b.labels
        && a.requests == b.requests
        && a.node_selector == b.node_selector
        && a.required_node_affinity == b.required_node_affinity
        && a.hostname_anti_affinity == b.hostname_anti_affinity
        && a.tolerations == b.tolerations
        && a.priority == b.priority
        && a.priority_class == b.priority_class
        && a.pod_affinity == b.pod_affinity
        && a.pod_anti_affinity == b.pod_anti_affinity
        && a.preferred_pod_affinity == b.preferred_pod_affinity
        && a.preferred_pod_anti_affinity == b.preferred_pod_anti_affinity
        && a.topology_spread == b.topology_spread
        && a.unmodelled_constraints == b.unmodelled_constraints
}

/// Groups `pods` (index into `all`) into classes, sorted for first-fit decreasing: classes
/// needing extended resources first, then by [`size_score`] descending, then by the name of
/// their first member; members sorted by `namespace/name`. Independent of input order.
pub(crate) fn classify<'a>(
    all: &'a [Pod],
    pods: impl IntoIterator<Item = usize>,
    index: &ResourceIndex,
) -> Vec<PodClass<'a>> {
    let mut by_hash: HashMap<u64, Vec<usize>, FastHash> = HashMap::default();
    let mut classes: Vec<PodClass<'a>> = Vec::new();
    for i in pods {
        let pod = &all[i];
        let slot = by_hash.entry(class_hash(pod)).or_default();
        if let Some(&c) = slot.iter().find(|&&c| same_class(classes[c].rep, pod)) {
            classes[c].members.push(i);
        } else {
            slot.push(classes.len());
            classes.push(PodClass {
                rep: pod,
                demand: index.demand(pod),
                members: vec![i],
            });
        }
    }
    for c in &mut classes {
        c.members.sort_by(|&a, &b| {
            (&all[a].namespace, &all[a].name).cmp(&(&all[b].namespace, &all[b].name))
        });
        c.rep = &all[c.members[0]];
    }
    classes.sort_by(|a, b| {
        (!a.demand.ext.is_empty())
            .cmp(&!b.demand.ext.is_empty())
            .reverse()
            .then_with(|| size_score(&b.demand).cmp(&size_score(&a.demand)))
            .then_with(|| (&a.rep.namespace, &a.rep.name).cmp(&(&b.rep.namespace, &b.rep.name)))
    });
    classes
}
