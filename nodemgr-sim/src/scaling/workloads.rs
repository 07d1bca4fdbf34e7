//! What kube-scheduler and the workload controllers do around the executor: `scaleWorkload`
//! events, pods (re)created Pending with their workload's constraints, bound where the core
//! placement engine puts them (preempting standby holders as it says), and the standby-holder
//! Deployments' ReplicaSet controller.

use super::*;

/// Carries out a `scaleWorkload` event: more replicas are due now (Pending until scheduled),
/// fewer replicas delete the surplus at once (queued ones first, then unbound ones, then the
/// highest names), without bringing them back.
pub fn scale_workload(world: &mut World, spec: &ScaleWorkloadSpec) {
    let Some(wi) = world.workloads.iter().position(|w| w.name == spec.workload) else {
        return;
    };
    let w = world.workloads[wi].clone();
    let mut live: Vec<(bool, String)> = world
        .pods
        .iter()
        .filter(|(_, p)| p.workload == Some(wi) && p.terminating_until.is_none())
        .map(|(k, p)| (p.pod.node_name.is_some(), k.clone()))
        .collect();
    let queued = world
        .pending_pods
        .iter()
        .filter(|p| p.workload == wi)
        .count();
    let have = live.len() + queued;
    world.workloads[wi].replicas = spec.replicas;
    if spec.replicas > have {
        let taken: BTreeSet<String> = world
            .pods
            .values()
            .map(|p| p.pod.name.clone())
            .chain(world.pending_pods.iter().map(|p| p.name.clone()))
            .collect();
        let mut added = 0;
        let mut i = 0usize;
        while added < spec.replicas - have {
            let name = format!("{}-{i}", w.name);
            i += 1;
            if taken.contains(&name) {
                continue;
            }
            world.pending_pods.push(PendingPod {
                at: world.now,
                workload: wi,
                name,
            });
            added += 1;
        }
    } else {
        let mut surplus = have - spec.replicas;
        let before = world.pending_pods.len();
        let mut kept = Vec::with_capacity(before);
        for p in std::mem::take(&mut world.pending_pods) {
            if p.workload == wi && surplus > 0 {
                surplus -= 1;
            } else {
                kept.push(p);
            }
        }
        world.pending_pods = kept;
        // Unbound first, then bound, highest name first.
        live.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)));
        for (_, key) in live.into_iter().take(surplus) {
            delete_pod(world, &key);
        }
    }
    world.record_in(
        "workload.scaled",
        w.group.clone(),
        None,
        None,
        format!(
            "{} scaled from {have} to {} replica(s)",
            w.name, spec.replicas
        ),
    );
}

/// Deletes pod `key` for good (no replacement).
fn delete_pod(world: &mut World, key: &str) {
    if let Some(p) = world.pods.remove(key)
        && let Some(node) = &p.pod.node_name
        && let Some(set) = world.pods_by_node.get_mut(node)
    {
        set.remove(key);
    }
}

/// Takes pod `key` off its node: Pending again.
pub(super) fn unbind(world: &mut World, key: &str) {
    let Some(p) = world.pods.get_mut(key) else {
        return;
    };
    if let Some(node) = p.pod.node_name.take()
        && let Some(set) = world.pods_by_node.get_mut(&node)
    {
        set.remove(key);
        if set.is_empty() {
            world.pods_by_node.remove(&node);
        }
    }
    p.pod.phase = PodPhase::Pending;
}

/// Adds the workload's scheduling constraints (its group as a nodeSelector, `scaling.pods`)
/// to pod `key`.
pub(super) fn apply_constraints(world: &mut World, key: &str, constraints: &[PodConstraints]) {
    let Some(sp) = world.pods.get(key) else {
        return;
    };
    let Some(w) = sp.workload.and_then(|wi| world.workloads.get(wi)).cloned() else {
        return;
    };
    let Some(sp) = world.pods.get_mut(key) else {
        return;
    };
    let pod = &mut sp.pod;
    if let Some(g) = &w.group {
        pod.node_selector
            .insert(keys::LABEL_NODE_GROUP.into(), g.clone());
    }
    for c in constraints.iter().filter(|c| c.workload == w.name) {
        pod.node_selector.extend(c.node_selector.clone());
        for t in &c.tolerations {
            pod.tolerations.push(Toleration {
                key: t.clone(),
                exists: true,
                value: String::new(),
                effect: None,
            });
        }
        if c.hostname_anti_affinity {
            pod.hostname_anti_affinity = vec![nodemgr_core::model::LabelSelector {
                match_labels: Some(BTreeMap::clone(&pod.labels)),
                match_expressions: None,
            }];
        }
        if let Some(spread) = &c.zone_spread {
            pod.topology_spread = vec![nodemgr_core::model::TopologySpreadConstraint {
                max_skew: spread.max_skew.max(1),
                topology: nodemgr_core::model::TopologyKey::Zone,
                when_unsatisfiable: nodemgr_core::model::WhenUnsatisfiable::DoNotSchedule,
                selector: Some(nodemgr_core::model::LabelSelector {
                    match_labels: Some(BTreeMap::clone(&pod.labels)),
                    match_expressions: None,
                }),
                min_domains: spread.min_domains,
            }];
        }
    }
}

/// Binds Pending pod `key` to `node`.
fn bind(world: &mut World, key: &str, node: &str) {
    if !world.nodes.contains_key(node) {
        return;
    }
    let Some(p) = world.pods.get_mut(key) else {
        return;
    };
    if p.pod.node_name.is_some() {
        return;
    }
    p.pod.node_name = Some(node.to_owned());
    p.pod.phase = PodPhase::Running;
    world
        .pods_by_node
        .entry(node.to_owned())
        .or_default()
        .insert(key.to_owned());
    world.record("pod.scheduled", Some(node), Some(key), "scheduled");
}

/// Owned copies of what a scheduling snapshot borrows.
struct Parts {
    nodes: Vec<nodemgr_core::model::Node>,
    pods: Vec<Pod>,
    keys: Vec<String>,
    pdbs: Vec<nodemgr_core::model::PodDisruptionBudget>,
    groups: Vec<NodeGroup>,
}

impl Parts {
    fn of(world: &World) -> Self {
        let (keys, pods): (Vec<String>, Vec<Pod>) = world
            .pods
            .iter()
            .filter(|(_, p)| p.terminating_until.is_none())
            .map(|(k, p)| (k.clone(), p.pod.clone()))
            .unzip();
        Self {
            nodes: world.node_views(),
            pods,
            keys,
            pdbs: world.pdb_views(),
            groups: world
                .groups
                .values()
                .map(|g| NodeGroup::clone(&g.group))
                .collect(),
        }
    }
}

impl ScalingController {
    /// The ReplicaSet controller of the standby-holder Deployments: `replicas` live pods of
    /// each template; surplus pods go (pending first, then the highest name), pods of a
    /// deleted Deployment go.
    pub(super) fn sync_holders(&mut self, world: &mut World) {
        let mut live: BTreeMap<String, Vec<(bool, String)>> = BTreeMap::new();
        for (key, p) in &world.pods {
            if p.terminating_until.is_some() {
                continue;
            }
            if let Some(group) = holder_group(&p.pod) {
                live.entry(group.to_owned())
                    .or_default()
                    .push((p.pod.node_name.is_some(), key.clone()));
            }
        }
        let holders: Vec<_> = world.standby_holders.values().cloned().collect();
        for holder in &holders {
            let pods = live.remove(&holder.group).unwrap_or_default();
            let want = usize::try_from(holder.replicas).unwrap_or(usize::MAX);
            if pods.len() < want {
                for _ in pods.len()..want {
                    self.holder_counter += 1;
                    let mut pod = holder.template.clone();
                    pod.name = format!("{}-{}", holder.name(), self.holder_counter);
                    pod.uid = format!("uid-{}", pod.name);
                    pod.node_name = None;
                    pod.phase = PodPhase::Pending;
                    let key = pod.key();
                    world.pods.insert(
                        key.clone(),
                        SimPod {
                            pod,
                            terminating_until: None,
                            workload: None,
                        },
                    );
                    world.record_in(
                        "standbyHolder",
                        Some(holder.group.clone()),
                        None,
                        Some(&key),
                        format!(
                            "standby holder created ({} standby node(s) wanted)",
                            holder.replicas
                        ),
                    );
                }
            } else if pods.len() > want {
                let mut pods = pods;
                pods.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)));
                let surplus = pods.len() - want;
                for (_, key) in pods.into_iter().take(surplus) {
                    delete_pod(world, &key);
                    world.record_in(
                        "standbyHolder",
                        Some(holder.group.clone()),
                        None,
                        Some(&key),
                        "standby holder deleted",
                    );
                }
            }
        }
        for (group, pods) in live {
            for (_, key) in pods {
                delete_pod(world, &key);
                world.record_in(
                    "standbyHolder",
                    Some(group.clone()),
                    None,
                    Some(&key),
                    "standby holder deleted with its Deployment",
                );
            }
        }
    }

    /// Pods due for (re)creation become Pending pods with their workload's constraints.
    pub(super) fn admit_pending(&self, world: &mut World, now: Timestamp) {
        let (due, later): (Vec<PendingPod>, Vec<PendingPod>) =
            std::mem::take(&mut world.pending_pods)
                .into_iter()
                .partition(|p| p.at <= now);
        world.pending_pods = later;
        for p in due {
            let Some(w) = world.workloads.get(p.workload) else {
                continue;
            };
            let key = format!("{}/{}", w.namespace, p.name);
            if world.pods.contains_key(&key) || w.kind == WorkloadKind::DaemonSet {
                continue;
            }
            world.bind_pod(p.workload, p.name, "");
            unbind(world, &key);
            apply_constraints(world, &key, &self.constraints);
        }
    }

    /// The scheduler: binds every Pending pod that fits an existing node where the placement
    /// engine puts it, after deleting the standby holders it preempts.
    pub(super) fn schedule(&self, world: &mut World, now: Timestamp) {
        let parts = Parts::of(world);
        let leaving: BTreeSet<String> = parts
            .nodes
            .iter()
            .filter(|n| n.labels.contains_key(keys::LABEL_TERMINATION_IN_PROGRESS))
            .map(|n| n.name.clone())
            .collect();
        let plan = {
            let snapshot = ClusterSnapshot::new(
                &parts.nodes,
                &parts.pods,
                &parts.pdbs,
                &parts.groups,
                &self.classes,
                &self.cloud_zones,
            )
            .with_leaving(leaving);
            plan_scale_up(&snapshot, &self.config, now)
        };
        for &i in &plan.preempted {
            let key = &parts.keys[i];
            let group = parts.pods[i].labels.get("ng").cloned();
            let node = parts.pods[i].node_name.clone();
            delete_pod(world, key);
            world.record_in(
                "standbyPreempted",
                group,
                node.as_deref(),
                Some(key),
                "standby holder preempted by a pending pod",
            );
        }
        for (i, target) in &plan.fits_existing {
            if let nodemgr_core::scaling::scale_up::ExistingTarget::Node(node) = target {
                bind(world, &parts.keys[*i], node);
            }
        }
    }
}
