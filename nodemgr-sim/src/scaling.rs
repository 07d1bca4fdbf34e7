//! The scaling controller: the simulator's driver of the core's scaling executor
//! ([`nodemgr_core::executor::ScalingExecutor`], the one node-manager's machine controller
//! drives) for the CloudEphemeral groups of a scenario with a `scaling` section, plus what the
//! world does around it:
//!
//! * **The executor** decides and acts through the ports: the cluster port and the machine port
//!   over the world ([`crate::SimCluster`]: Instances, standby-holder Deployments, group status)
//!   and the cloud port over the in-memory cloud ([`SimCloud`]). Chaos, bounds, surge,
//!   standby, scale-up and scale-down, removals through the update executor's drain
//!   (`update.node.deckhouse.io/draining=scale-down`), machine lifecycle: all of it is the
//!   executor's (docs/executors.md §2). Removals therefore need the update executor
//!   (`updates: true`, the default).
//! * **The cloud** ([`SimCloud`]): a machine starts `provisionDelay` after it was created; the
//!   scenario's initial nodes of scaling groups are machines already running, with their
//!   Instances.
//! * **Kubelets**: a running machine joins once as a Ready Node under the machine's name, made
//!   from the instance class its Instance records (the group's `nodeTemplate`, allocatable
//!   after the system reserve, the class checksum).
//! * **The ReplicaSet controller** of the standby-holder Deployments: each keeps `replicas`
//!   pending pods of its template (`standby-holder-<group>-<n>`).
//! * **The scheduler** (kube-scheduler's part): pods due for (re)creation become Pending with
//!   their workload's constraints (the world leaves them to this controller,
//!   [`World::scheduler_external`]); every pass binds each Pending pod that fits an existing
//!   node where the core placement engine puts it ([`plan_scale_up`]'s `fits_existing`),
//!   preempting standby holders as it says.
//!
//! The executor runs every `scaling.period` and at its deadlines; machines join at their
//! instant, and the next pass schedules onto them.
//!
//! Timeline kinds: `scaleUp`, `machineCreated`, `nodeJoined`, `scaleDown`, `removeNode`,
//! `surgeReplace`, `chaosVictim`, `machineDeleted`, `machineFailed`, `nodeDeleted`,
//! `unschedulable`, `waitingForCapacity`, `standbyHolder`, `standbyStatus`, `standbyPreempted`,
//! `scaling.error`, `workload.scaled`, and `pod.scheduled` for bindings.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::disruption::DisruptionReason;
use nodemgr_core::executor::ScalingExecutor;
use nodemgr_core::executor::scaling::{MachineClass, ScalingEvent, ScalingSettings};
use nodemgr_core::machines::{ANNOTATION_PROVIDER_ID, DeleteReason, MachineConfig, MachinePhase};
use nodemgr_core::model::{
    CloudInstances, Instance, InstanceCurrentStatus, InstanceStatus, NodeGroup, NodeType,
    ObjectMeta, ObjectReference, Pod, PodPhase, Timestamp, Toleration, keys,
};
use nodemgr_core::ports::cloud::{InstanceClass as CloudClass, InstanceState};
use nodemgr_core::scaling::standby::holder_group;
use nodemgr_core::scaling::{
    ClusterSnapshot, InstanceClass, ScalingCommand, ScalingConfig, Why, class_of, node_shape,
    plan_scale_up, template_node,
};

use crate::cloud::SimCloud;
use crate::cluster::{SimCluster, block_on};
use crate::controller::Controller;
pub use crate::scenario::{ClassSpec, PodConstraints, ScaleWorkloadSpec, ScalingSpec, ZoneSpread};
use crate::scenario::{Scenario, WorkloadKind, default_class_kind_of};
use crate::world::{PendingPod, SimPod, World};

/// The drain source removals write in `update.node.deckhouse.io/draining` (the scaling
/// executor's, [`nodemgr_core::executor::scaling::DRAIN_SOURCE_SCALE_DOWN`]).
pub const DRAIN_SOURCE_SCALING: &str = nodemgr_core::executor::scaling::DRAIN_SOURCE_SCALE_DOWN;

/// The timeline kind of a removal a disruption method started (a rolling update or a drift
/// removal reaching the scaling executor would get its own kind; neither does today: the update
/// controller records those as `update.*`).
fn disruption_kind(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Chaos => "chaosVictim",
        DisruptionReason::ClassChange => "surgeReplace",
        DisruptionReason::RollingUpdate => "rollingUpdateReplace",
        DisruptionReason::Drift => "driftReplace",
    }
}

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

/// The scaling controller of a scenario with a `scaling` section, with `world` prepared for
/// it: the world hands pods due for (re)creation to it, and workload pods placed at start
/// (which ignored cpu and memory) become Pending so that the placement engine schedules them
/// at the first pass. `None` (and the world untouched) without the section. The caller adds
/// the controller to its run loop.
pub fn install(world: &mut World, scenario: &Scenario, seed: u64) -> Option<ScalingController> {
    let spec = scenario.scaling.as_ref()?;
    let classes = spec.instance_classes().unwrap_or_default();
    world.scheduler_external = true;
    let keys: Vec<String> = world
        .pods
        .iter()
        .filter(|(_, p)| {
            p.workload
                .and_then(|wi| world.workloads.get(wi))
                .is_some_and(|w| !w.kind.per_node())
        })
        .map(|(k, _)| k.clone())
        .collect();
    let constraints = spec.pods.clone();
    for key in keys {
        unbind(world, &key);
        apply_constraints(world, &key, &constraints);
    }
    Some(ScalingController::new(
        spec,
        classes,
        scenario,
        world.start,
        seed,
    ))
}

/// Takes pod `key` off its node: Pending again.
fn unbind(world: &mut World, key: &str) {
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
fn apply_constraints(world: &mut World, key: &str, constraints: &[PodConstraints]) {
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
                match_labels: Some(pod.labels.clone()),
                match_expressions: None,
            }];
        }
        if let Some(spread) = &c.zone_spread {
            pod.topology_spread = vec![nodemgr_core::model::TopologySpreadConstraint {
                max_skew: spread.max_skew.max(1),
                topology: nodemgr_core::model::TopologyKey::Zone,
                when_unsatisfiable: nodemgr_core::model::WhenUnsatisfiable::DoNotSchedule,
                selector: Some(nodemgr_core::model::LabelSelector {
                    match_labels: Some(pod.labels.clone()),
                    match_expressions: None,
                }),
                min_domains: spread.min_domains,
            }];
        }
    }
}

/// Makes `node` look like a node of its group's class: the group's `nodeTemplate` labels and
/// taints, the zone (moved to `zone` when given), allocatable after the system reserve, and
/// the class checksum.
fn conform_node(world: &mut World, node: &str, class: &InstanceClass, zone: Option<&str>) {
    let Some(sn) = world.nodes.get(node) else {
        return;
    };
    let Some(g) = world.groups.get(&sn.group) else {
        return;
    };
    let group = g.group.clone();
    let zone = zone.map_or_else(|| sn.zone.clone(), str::to_owned);
    let shape = node_shape(&group, class);
    let template = template_node(&group, class, &shape, &zone, node);
    if let Some(sn) = world.nodes.get_mut(node) {
        sn.zone = zone.clone();
        let n = Arc::make_mut(&mut sn.node);
        n.labels.extend(template.labels);
        n.annotations.extend(template.annotations);
        n.taints = template.taints;
        n.allocatable = template.allocatable;
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
            groups: world.groups.values().map(|g| g.group.clone()).collect(),
        }
    }
}

/// The scaling controller (see the module docs).
#[derive(Debug)]
pub struct ScalingController {
    executor: ScalingExecutor,
    cloud: SimCloud,
    classes: Vec<InstanceClass>,
    constraints: Vec<PodConstraints>,
    config: ScalingConfig,
    period: Duration,
    provision_delay: Duration,
    next: Timestamp,
    cloud_zones: Vec<String>,
    /// Machines that joined as a Node (a machine joins once).
    joined: BTreeSet<String>,
    /// Names handed out to standby-holder pods.
    holder_counter: u64,
    started: bool,
}

impl ScalingController {
    /// A controller for `spec` (classes already parsed), first running at `start`.
    pub fn new(
        spec: &ScalingSpec,
        classes: Vec<InstanceClass>,
        scenario: &Scenario,
        start: Timestamp,
        seed: u64,
    ) -> Self {
        let cloud_zones: BTreeSet<String> = scenario
            .groups
            .iter()
            .flat_map(|g| g.zones.iter().cloned())
            .collect();
        let config = ScalingConfig {
            failed_after: spec.failed_after.0,
            scale_down_utilization_percent: spec.scale_down_utilization_percent,
            scale_down_unneeded_time: spec.scale_down_unneeded_time.0,
            scale_down_delay_after_add: spec.scale_down_delay_after_add.0,
            ..ScalingConfig::default()
        };
        let provision_delay = spec.provision_delay.unwrap_or(scenario.provision_delay).0;
        let cloud_zones: Vec<String> = cloud_zones.into_iter().collect();
        let settings = ScalingSettings {
            scaling: config.clone(),
            machines: MachineConfig::default(),
            classes: classes
                .iter()
                .map(|c| MachineClass {
                    scaling: c.clone(),
                    cloud: CloudClass {
                        instance_type: c.name.clone(),
                        ..CloudClass::default()
                    },
                })
                .collect(),
            zones: cloud_zones.clone(),
            chaos_seed: seed,
            concurrency: 8,
        };
        Self {
            executor: ScalingExecutor::new(settings),
            cloud: SimCloud::new(start, provision_delay, Duration::ZERO, seed),
            classes,
            constraints: spec.pods.clone(),
            config,
            period: spec.period.0,
            provision_delay,
            next: start,
            cloud_zones,
            joined: BTreeSet::new(),
            holder_counter: 0,
            started: false,
        }
    }

    /// The executor this controller drives.
    pub fn executor(&self) -> &ScalingExecutor {
        &self.executor
    }

    /// The in-memory cloud the machines live in.
    pub fn cloud(&self) -> &SimCloud {
        &self.cloud
    }

    /// The class of `group` now (it follows `classReference` changes).
    fn class_for(&self, world: &World, group: &str) -> Option<InstanceClass> {
        let g = world.groups.get(group)?;
        class_of(&g.group, &self.classes).cloned()
    }

    /// First pass: zones default to the group's scenario zones, new nodes get the class's
    /// allocatable, and every initial node of a scaling group is a running machine with its
    /// Instance.
    fn start(&mut self, world: &mut World) {
        let names: Vec<String> = world.groups.keys().cloned().collect();
        for name in names {
            let Some(class) = self.class_for(world, &name) else {
                continue;
            };
            let Some(g) = world.groups.get_mut(&name) else {
                continue;
            };
            if g.group.spec.node_type != Some(NodeType::CloudEphemeral) {
                continue;
            }
            let zones = g.zones.clone();
            let ci: &mut CloudInstances = match g.group.spec.cloud_instances.as_mut() {
                Some(ci) => ci,
                None => continue,
            };
            if ci.zones.is_none() {
                ci.zones = Some(zones);
            }
            g.capacity = node_shape(&g.group, &class).allocatable;
            let nodes: Vec<(String, String)> = world
                .nodes
                .values()
                .filter(|n| n.group == name)
                .map(|n| (n.node.name.clone(), n.zone.clone()))
                .collect();
            for (node, zone) in nodes {
                conform_node(world, &node, &class, None);
                let machine = self.cloud.seed_running(&name, &zone, &node);
                if let Some(n) = world.nodes.get_mut(&node) {
                    Arc::make_mut(&mut n.node).provider_id = Some(machine.provider_id.clone());
                }
                world.instances.insert(
                    node.clone(),
                    Instance {
                        api_version: "deckhouse.io/v1alpha2".into(),
                        kind: "Instance".into(),
                        metadata: ObjectMeta {
                            name: Some(node.clone()),
                            labels: [
                                (keys::LABEL_NODE_GROUP.to_owned(), name.clone()),
                                (keys::LABEL_TOPOLOGY_ZONE.to_owned(), zone.clone()),
                            ]
                            .into(),
                            annotations: [
                                (
                                    keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.to_owned(),
                                    class.checksum(),
                                ),
                                (ANNOTATION_PROVIDER_ID.to_owned(), machine.provider_id),
                            ]
                            .into(),
                            creation_timestamp: Some(world.now.to_rfc3339()),
                            ..ObjectMeta::default()
                        },
                        status: InstanceStatus {
                            node_ref: Some(ObjectReference {
                                name: node.clone(),
                                ..ObjectReference::default()
                            }),
                            current_status: Some(InstanceCurrentStatus {
                                phase: Some(MachinePhase::Running.as_str().to_owned()),
                                last_update_time: Some(world.now.to_rfc3339()),
                            }),
                            ..InstanceStatus::default()
                        },
                    },
                );
                self.joined.insert(node);
            }
        }
    }

    /// Nodes of scaling groups without a class checksum that are not machines of this cloud
    /// (RollingUpdate replacements) are made from the group's current class.
    fn conform_new_nodes(&self, world: &mut World) {
        let todo: Vec<(String, String)> = world
            .nodes
            .values()
            .filter(|n| {
                !n.node
                    .has_annotation(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
            })
            .map(|n| (n.node.name.clone(), n.group.clone()))
            .collect();
        for (node, group) in todo {
            if let Some(class) = self.class_for(world, &group) {
                conform_node(world, &node, &class, None);
            }
        }
    }

    /// Kubelets: every running machine that has not joined yet joins as a Ready Node named
    /// like the machine, made from the class its Instance records.
    fn join_running(&mut self, world: &mut World) {
        for m in self.cloud.existing() {
            if m.state != InstanceState::Running
                || self.joined.contains(&m.machine)
                || world.nodes.contains_key(&m.machine)
            {
                continue;
            }
            let recorded = world
                .instances
                .get(&m.machine)
                .and_then(|i| {
                    i.metadata
                        .annotations
                        .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
                })
                .cloned();
            let class = recorded
                .and_then(|c| self.classes.iter().find(|k| k.checksum() == c).cloned())
                .or_else(|| self.class_for(world, &m.group));
            let Some(class) = class else {
                continue;
            };
            self.joined.insert(m.machine.clone());
            let now = world.now;
            let Some(name) = world.add_node_as(&m.group, &m.machine, &m.zone, now) else {
                continue;
            };
            conform_node(world, &name, &class, Some(&m.zone));
            if let Some(n) = world.nodes.get_mut(&name) {
                Arc::make_mut(&mut n.node).provider_id = Some(m.provider_id.clone());
            }
            world.record(
                "nodeJoined",
                Some(&name),
                None,
                format!(
                    "machine of {} in {} joined as a Ready node",
                    m.group, m.zone
                ),
            );
        }
    }

    /// The ReplicaSet controller of the standby-holder Deployments: `replicas` live pods of
    /// each template; surplus pods go (pending first, then the highest name), pods of a
    /// deleted Deployment go.
    fn sync_holders(&mut self, world: &mut World) {
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
    fn admit_pending(&self, world: &mut World, now: Timestamp) {
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
    fn schedule(&self, world: &mut World, now: Timestamp) {
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

    /// Runs the executor and writes what it did into the timeline.
    fn run_executor(&mut self, world: &mut World, now: Timestamp) {
        let result = {
            let cluster = SimCluster::new(world);
            block_on(self.executor.step(&cluster, &cluster, &self.cloud, now))
        };
        let report = match result {
            Some(Ok(report)) => report,
            Some(Err(error)) => {
                world.record("scaling.error", None, None, format!("step failed: {error}"));
                return;
            }
            None => {
                world.record("scaling.error", None, None, "a port call never completed");
                return;
            }
        };
        for event in &report.events {
            self.record_event(world, event);
        }
        for error in &report.errors {
            world.record(
                "scaling.error",
                None,
                None,
                format!("{error}: {}", error.source),
            );
        }
    }

    fn record_event(&self, world: &mut World, event: &ScalingEvent) {
        match event {
            ScalingEvent::Ordered { command, machines } => {
                let ScalingCommand::CreateNodes {
                    group, zone, why, ..
                } = command
                else {
                    return;
                };
                if matches!(why, Why::PendingPods { .. }) {
                    world.record_in(
                        "scaleUp",
                        Some(group.clone()),
                        None,
                        None,
                        command.to_string(),
                    );
                }
                world.record_in(
                    "machineCreated",
                    Some(group.clone()),
                    None,
                    None,
                    format!(
                        "{} machine(s) ordered in {zone} ({why}); joining in {}s",
                        machines.len(),
                        self.provision_delay.as_secs()
                    ),
                );
            }
            ScalingEvent::RemovalStarted { command } => {
                let ScalingCommand::RemoveNode {
                    node, group, why, ..
                } = command
                else {
                    return;
                };
                let kind = match why {
                    Why::Underutilized { .. } => "scaleDown",
                    Why::Disruption(reason) => disruption_kind(*reason),
                    Why::BelowDesired { .. }
                    | Why::Failed
                    | Why::AboveMax { .. }
                    | Why::PendingPods { .. } => "removeNode",
                };
                world.record_in(
                    kind,
                    Some(group.clone()),
                    Some(node),
                    None,
                    command.to_string(),
                );
            }
            ScalingEvent::MachineDeleted {
                group,
                zone,
                machine,
                reason,
            } => {
                let message = match reason {
                    DeleteReason::ScaledDown => format!("drained; machine deleted in {zone}"),
                    other => format!("machine deleted in {zone}: {other}"),
                };
                world.record_in(
                    "machineDeleted",
                    Some(group.clone()),
                    Some(machine),
                    None,
                    message,
                );
            }
            ScalingEvent::MachineFailed { group, machine, .. } => world.record_in(
                "machineFailed",
                Some(group.clone()),
                Some(machine),
                None,
                event.to_string(),
            ),
            ScalingEvent::NodeDeleted { node, .. } => {
                world.record("nodeDeleted", Some(node), None, event.to_string());
            }
            ScalingEvent::ClassStamped { .. } => {}
            ScalingEvent::StandbyHolder { group, .. } => world.record_in(
                "standbyHolder",
                Some(group.clone()),
                None,
                None,
                event.to_string(),
            ),
            ScalingEvent::StandbyStatus { group, .. } => world.record_in(
                "standbyStatus",
                Some(group.clone()),
                None,
                None,
                event.to_string(),
            ),
            ScalingEvent::Unschedulable { pod, reasons } => world.record(
                "unschedulable",
                None,
                Some(pod),
                format!("no group can host the pod: {}", reasons.join("; ")),
            ),
            ScalingEvent::WaitingForCapacity { pod } => world.record(
                "waitingForCapacity",
                None,
                Some(pod),
                "every zone of every group that fits the pod is at maxPerZone",
            ),
        }
    }
}

impl Controller for ScalingController {
    fn name(&self) -> &str {
        "scaling"
    }

    fn next_run(&self) -> Option<Timestamp> {
        let mut next = self.next;
        for t in [self.cloud.next_change(), self.executor.next_deadline()]
            .into_iter()
            .flatten()
        {
            next = next.min(t);
        }
        Some(next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        if !self.started {
            self.started = true;
            for g in world.groups.values_mut() {
                default_class_kind_of(&mut g.group);
            }
            self.start(world);
        }
        self.cloud.advance(now);
        self.join_running(world);
        self.conform_new_nodes(world);
        let due = self.executor.next_deadline().is_some_and(|d| d <= now);
        if now < self.next && !due {
            // A machine joined between passes; the next pass schedules onto it.
            return;
        }
        if now >= self.next {
            self.next = now + self.period;
        }
        // A `change` event may have set a classReference without kind.
        for g in world.groups.values_mut() {
            default_class_kind_of(&mut g.group);
        }
        self.sync_holders(world);
        self.admit_pending(world, now);
        self.schedule(world, now);
        self.run_executor(world, now);
    }
}
