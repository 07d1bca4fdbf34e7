//! The scaling controller: runs `nodemgr-core::scaling` against the world for the
//! CloudEphemeral groups of a scenario with a `scaling` section. It is the simulator's cluster
//! autoscaler, machine controller and scheduler at once:
//!
//! * **Scheduling**: pods without a node are Pending. The world leaves pods that are due to be
//!   (re)created to this controller ([`World::scheduler_external`]); each pass creates them
//!   unbound and binds every Pending pod that fits an existing node where the core placement
//!   engine puts it ([`plan_scale_up`]'s `fits_existing`), preempting standby holders as it says.
//! * **Scale-up**: the plan's new nodes are ordered as machines ([`order_machines`]) that join as
//!   Nodes `provisionDelay` later ([`join_machine`]), made from the group's instance class
//!   ([`template_node`]); pods no group can host are reported once (`unschedulable`).
//! * **Bounds, surge, chaos, standby, scale-down**: [`plan_bounds`] (min/max per zone, fixed
//!   counts, failed nodes), [`plan_surge`] (class change, new before old), [`plan_chaos`],
//!   [`plan_standby`] (holder pods) and [`plan_scale_down`] run every pass on a fresh snapshot.
//! * **Removal** goes through the update executor's drain: the node gets
//!   `update.node.deckhouse.io/draining=scaling`, the executor cordons and evicts (PDBs, retries,
//!   timeout) and marks it `drained`, and the machine is then deleted ([`delete_machine`]).
//!   Removals therefore need the update executor (`updates: true`, the default).
//!
//! Machine creation and deletion are the three small functions [`order_machines`],
//! [`join_machine`] and [`delete_machine`]: the only places that play the cloud.
//!
//! Timeline kinds: `scaleUp`, `machineCreated`, `nodeJoined`, `scaleDown`, `removeNode`,
//! `surgeReplace`, `chaosVictim`, `machineDeleted`, `unschedulable`, `waitingForCapacity`,
//! `standbyHolder`, `standbyPreempted`, `workload.scaled`, and `pod.scheduled` for bindings.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nodemgr_core::model::{
    CloudInstances, Node, NodeGroup, NodeType, Pod, PodPhase, Quantity, Timestamp, Toleration, keys,
};
use nodemgr_core::scaling::{
    ChaosState, ClusterSnapshot, InstanceClass, ScaleDownState, ScalingCommand, ScalingConfig,
    Upcoming, Why, class_of, node_shape, plan_bounds, plan_chaos, plan_scale_down, plan_scale_up,
    plan_standby, plan_surge, template_node,
};
use serde::{Deserialize, Serialize};

use crate::controller::Controller;
use crate::scenario::{Scenario, ScenarioError, SimDuration, WorkloadKind};
use crate::sim::Simulation;
use crate::world::{PendingPod, World};

/// The drain source the controller writes in `update.node.deckhouse.io/draining`.
pub const DRAIN_SOURCE_SCALING: &str = "scaling";

/// The `scaling` section of a scenario (see the README's "Scaling" section).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingSpec {
    /// How often the controller runs. Default 10 s.
    #[serde(default = "default_period")]
    pub period: SimDuration,
    /// Instance classes the groups' `cloudInstances.classReference` point at.
    pub classes: Vec<ClassSpec>,
    /// Time from ordering a machine to its Node joining. Default: the scenario's
    /// `provisionDelay`.
    #[serde(default)]
    pub provision_delay: Option<SimDuration>,
    /// Requested utilization (percent) under which a node is underutilized. Default 50.
    #[serde(default = "fifty")]
    pub scale_down_utilization_percent: u32,
    /// How long a node stays underutilized before it is removed. Default 10 min.
    #[serde(default = "ten_minutes")]
    pub scale_down_unneeded_time: SimDuration,
    /// No scale-down this long after a scale-up. Default 10 min.
    #[serde(default = "ten_minutes")]
    pub scale_down_delay_after_add: SimDuration,
    /// A node not Ready this long counts as failed and is replaced. Default 10 min.
    #[serde(default = "ten_minutes")]
    pub failed_after: SimDuration,
    /// Scheduling constraints of workloads' pods.
    #[serde(default)]
    pub pods: Vec<PodConstraints>,
}

fn default_period() -> SimDuration {
    SimDuration::secs(10)
}

fn fifty() -> u32 {
    50
}

fn ten_minutes() -> SimDuration {
    SimDuration::secs(600)
}

/// An instance class: the size of the machines it makes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClassSpec {
    /// `classReference.name`.
    pub name: String,
    /// `classReference.kind`. Default `InstanceClass`.
    #[serde(default = "default_class_kind")]
    pub kind: String,
    /// CPU of one machine (`4`, `3500m`).
    pub cpu: String,
    /// Memory of one machine (`16Gi`).
    pub memory: String,
    /// Pods per machine (`kubelet.maxPods` wins). Default 110.
    #[serde(default)]
    pub pods: Option<i64>,
    /// Extended resources of one machine (`nvidia.com/gpu: 1`).
    #[serde(default)]
    pub extended: BTreeMap<String, String>,
}

fn default_class_kind() -> String {
    "InstanceClass".into()
}

impl ClassSpec {
    fn to_class(&self, path: &str) -> Result<InstanceClass, ScenarioError> {
        let parse = |what: &str, v: &str| {
            Quantity::parse(v).map_err(|e| ScenarioError::Invalid {
                path: format!("{path}.{what}"),
                message: format!("`{v}`: {e}"),
            })
        };
        let mut class = InstanceClass {
            kind: self.kind.clone(),
            name: self.name.clone(),
            cpu: parse("cpu", &self.cpu)?,
            memory: parse("memory", &self.memory)?,
            pods: self.pods,
            extended: BTreeMap::new(),
        };
        for (k, v) in &self.extended {
            class
                .extended
                .insert(k.clone(), parse(&format!("extended.{k}"), v)?);
        }
        Ok(class)
    }
}

/// Scheduling constraints of one workload's pods.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodConstraints {
    /// The workload.
    pub workload: String,
    /// `nodeSelector` (the workload's `group` adds `node.deckhouse.io/group`).
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Taint keys tolerated (`Exists`, any effect).
    #[serde(default)]
    pub tolerations: Vec<String>,
    /// At most one pod of the workload per node (required hostname anti-affinity on its
    /// labels).
    #[serde(default)]
    pub hostname_anti_affinity: bool,
    /// Spread the workload's pods over zones (a `DoNotSchedule` topology spread constraint on
    /// the zone key, selecting the workload's labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_spread: Option<ZoneSpread>,
}

/// A zone topology spread constraint of a workload's pods.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ZoneSpread {
    /// `maxSkew` (at least 1).
    pub max_skew: u32,
    /// `minDomains`: while fewer zones have nodes, the global minimum counts as 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_domains: Option<u32>,
}

/// The `scaleWorkload` event: a workload's replica count changes (a burst of pods arriving,
/// or a load leaving).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScaleWorkloadSpec {
    /// The workload (`Deployment`, `StatefulSet` or `Bare`).
    pub workload: String,
    /// The new replica count.
    pub replicas: usize,
}

impl ScalingSpec {
    /// The instance classes.
    ///
    /// # Errors
    /// A class whose quantities do not parse (path `scaling.classes[i].…`).
    pub fn instance_classes(&self) -> Result<Vec<InstanceClass>, ScenarioError> {
        self.classes
            .iter()
            .enumerate()
            .map(|(i, c)| c.to_class(&format!("scaling.classes[{i}]")))
            .collect()
    }

    /// Checks the section against the scenario: classes parse, every CloudEphemeral group
    /// with `cloudInstances` points at a known class, constraints name workloads.
    ///
    /// # Errors
    /// The first problem, naming its field.
    pub fn check(&self, scenario: &Scenario) -> Result<(), ScenarioError> {
        let classes = self.instance_classes()?;
        if self.period.0 < Duration::from_millis(100) {
            return Err(invalid("scaling.period", "must be at least 100ms"));
        }
        if !scenario.updates {
            return Err(invalid(
                "updates",
                "the scaling controller drains nodes through the update executor; keep `updates: true`",
            ));
        }
        for (i, g) in scenario.groups.iter().enumerate() {
            let path = format!("groups[{i}].spec.cloudInstances");
            let spec = crate::scenario::group_spec(&g.spec, &format!("groups[{i}].spec"))?;
            let mut group = NodeGroup {
                spec,
                ..NodeGroup::default()
            };
            default_class_kind_of(&mut group);
            let Some(ci) = group.spec.cloud_instances.as_ref() else {
                continue;
            };
            if group.spec.node_type != Some(NodeType::CloudEphemeral) {
                continue;
            }
            let Some(r) = ci.class_reference.as_ref() else {
                return Err(invalid(
                    format!("{path}.classReference"),
                    "a scaling group needs classReference {kind, name} naming one of scaling.classes",
                ));
            };
            if class_of(&group, &classes).is_none() {
                return Err(invalid(
                    format!("{path}.classReference"),
                    format!(
                        "no class {}/{} in scaling.classes (kind defaults to InstanceClass)",
                        r.kind, r.name
                    ),
                ));
            }
        }
        for (i, p) in self.pods.iter().enumerate() {
            if !scenario.workloads.iter().any(|w| w.name == p.workload) {
                return Err(invalid(
                    format!("scaling.pods[{i}].workload"),
                    format!("no workload named `{}`", p.workload),
                ));
            }
        }
        Ok(())
    }
}

/// An empty `classReference.kind` reads as `InstanceClass`.
fn default_class_kind_of(group: &mut NodeGroup) {
    if let Some(r) = group
        .spec
        .cloud_instances
        .as_mut()
        .and_then(|c| c.class_reference.as_mut())
        && r.kind.is_empty()
    {
        r.kind = default_class_kind();
    }
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

/// Checks a `scaleWorkload` event at `path`.
///
/// # Errors
/// An unknown workload, or a per-node one (DaemonSet, Static).
pub fn check_scale_workload(
    scenario: &Scenario,
    spec: &ScaleWorkloadSpec,
    path: &str,
) -> Result<(), ScenarioError> {
    match scenario.workloads.iter().find(|w| w.name == spec.workload) {
        None => Err(invalid(
            format!("{path}.workload"),
            format!("no workload named `{}`", spec.workload),
        )),
        Some(w) if w.kind.per_node() => Err(invalid(
            format!("{path}.workload"),
            "per-node workloads (DaemonSet, Static) follow the nodes; scale a Deployment",
        )),
        Some(_) => Ok(()),
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

/// Installs the scaling controller when the scenario has a `scaling` section: the world hands
/// pods due for (re)creation to it, and workload pods placed at start (which ignored cpu and
/// memory) become Pending so that the placement engine schedules them at the first pass.
pub fn install(sim: &mut Simulation, scenario: &Scenario, seed: u64) {
    let Some(spec) = &scenario.scaling else {
        return;
    };
    let classes = spec.instance_classes().unwrap_or_default();
    let world = sim.world_mut();
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
    let controller = ScalingController::new(spec, classes, scenario, world.start, seed);
    sim.add_controller(Box::new(controller));
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

/// A machine ordered and not joined yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Group.
    pub group: String,
    /// Zone.
    pub zone: String,
    /// When its Node joins.
    pub ready_at: Timestamp,
}

/// Orders `count` machines of `group` in `zone`; their Nodes join `delay` after `now`.
pub fn order_machines(
    machines: &mut Vec<Machine>,
    group: &str,
    zone: &str,
    count: u32,
    now: Timestamp,
    delay: Duration,
) {
    for _ in 0..count {
        machines.push(Machine {
            group: group.to_owned(),
            zone: zone.to_owned(),
            ready_at: now + delay,
        });
    }
}

/// A machine's Node joins: a fresh node of the group (with its per-node pods) made from the
/// group's class in the machine's zone. Returns its name.
pub fn join_machine(world: &mut World, machine: &Machine, class: &InstanceClass) -> Option<String> {
    let now = world.now;
    let name = world.add_node(&machine.group, now)?;
    conform_node(world, &name, class, Some(&machine.zone));
    Some(name)
}

/// Deletes `node`'s machine: the Node and its pods go (owned pods come back Pending).
pub fn delete_machine(world: &mut World, node: &str) -> bool {
    if world.remove_node(node).is_none() {
        return false;
    }
    world.stats.node_deletions += 1;
    true
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
        sn.node.labels.extend(template.labels);
        sn.node.annotations.extend(template.annotations);
        sn.node.taints = template.taints;
        sn.node.allocatable = template.allocatable;
        sn.node.provider_id = Some(format!("sim:///{zone}/{node}"));
    }
}

/// A removal in flight.
#[derive(Debug, Clone)]
struct Removal {
    group: String,
    zone: String,
}

/// The scaling controller (see the module docs).
#[derive(Debug)]
pub struct ScalingController {
    classes: Vec<InstanceClass>,
    constraints: Vec<PodConstraints>,
    config: ScalingConfig,
    period: Duration,
    provision_delay: Duration,
    next: Timestamp,
    seed: u64,
    cloud_zones: Vec<String>,
    machines: Vec<Machine>,
    removing: BTreeMap<String, Removal>,
    desired: BTreeMap<(String, String), u32>,
    scale_down: ScaleDownState,
    chaos: ChaosState,
    reported: BTreeSet<String>,
    started: bool,
}

/// Owned copies of what a snapshot borrows.
struct Parts {
    nodes: Vec<Node>,
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
        Self {
            classes,
            constraints: spec.pods.clone(),
            config: ScalingConfig {
                failed_after: spec.failed_after.0,
                scale_down_utilization_percent: spec.scale_down_utilization_percent,
                scale_down_unneeded_time: spec.scale_down_unneeded_time.0,
                scale_down_delay_after_add: spec.scale_down_delay_after_add.0,
                ..ScalingConfig::default()
            },
            period: spec.period.0,
            provision_delay: spec.provision_delay.unwrap_or(scenario.provision_delay).0,
            next: start,
            seed,
            cloud_zones: cloud_zones.into_iter().collect(),
            machines: Vec::new(),
            removing: BTreeMap::new(),
            desired: BTreeMap::new(),
            scale_down: ScaleDownState::default(),
            chaos: ChaosState::default(),
            reported: BTreeSet::new(),
            started: false,
        }
    }

    fn snapshot<'a>(&self, parts: &'a Parts, classes: &'a [InstanceClass]) -> ClusterSnapshot<'a> {
        let mut upcoming: BTreeMap<(String, String), u32> = BTreeMap::new();
        for m in &self.machines {
            *upcoming
                .entry((m.group.clone(), m.zone.clone()))
                .or_insert(0) += 1;
        }
        ClusterSnapshot::new(
            &parts.nodes,
            &parts.pods,
            &parts.pdbs,
            &parts.groups,
            classes,
            &self.cloud_zones,
        )
        .with_upcoming(
            upcoming
                .into_iter()
                .map(|((group, zone), count)| Upcoming { group, zone, count })
                .collect(),
        )
        .with_leaving(self.removing.keys().cloned().collect())
        .with_desired(self.desired.clone())
    }

    /// The class of `group` now (it follows `classReference` changes).
    fn class_for(&self, world: &World, group: &str) -> Option<InstanceClass> {
        let g = world.groups.get(group)?;
        class_of(&g.group, &self.classes).cloned()
    }

    /// First pass: zones default to the group's scenario zones, new nodes get the class's
    /// allocatable, and the desired count of every zone is the nodes there.
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
                ci.zones = Some(zones.clone());
            }
            let group_zones = ci.zones.clone().unwrap_or_default();
            g.capacity = node_shape(&g.group, &class).allocatable;
            for zone in group_zones {
                let count = world
                    .nodes
                    .values()
                    .filter(|n| n.group == name && n.zone == zone)
                    .count();
                self.desired.insert(
                    (name.clone(), zone),
                    u32::try_from(count).unwrap_or(u32::MAX),
                );
            }
        }
    }

    /// Nodes of scaling groups without a class checksum (initial nodes, RollingUpdate
    /// replacements) are made from the group's current class.
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

    fn join_due(&mut self, world: &mut World, now: Timestamp) {
        let (due, later): (Vec<Machine>, Vec<Machine>) = std::mem::take(&mut self.machines)
            .into_iter()
            .partition(|m| m.ready_at <= now);
        self.machines = later;
        for m in due {
            let Some(class) = self.class_for(world, &m.group) else {
                continue;
            };
            if let Some(name) = join_machine(world, &m, &class) {
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
    }

    fn finish_removals(&mut self, world: &mut World) {
        let names: Vec<String> = self.removing.keys().cloned().collect();
        for name in names {
            let drained = match world.nodes.get(&name) {
                None => {
                    self.removing.remove(&name);
                    continue;
                }
                Some(n) => n.node.has_annotation(keys::ANNOTATION_DRAINED),
            };
            if drained
                && let Some(r) = self.removing.remove(&name)
                && delete_machine(world, &name)
            {
                world.record_in(
                    "machineDeleted",
                    Some(r.group),
                    Some(&name),
                    None,
                    format!("drained; machine deleted in {}", r.zone),
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

    fn order(&mut self, world: &mut World, group: &str, zone: &str, count: u32, why: &Why) {
        let now = world.now;
        order_machines(
            &mut self.machines,
            group,
            zone,
            count,
            now,
            self.provision_delay,
        );
        world.record_in(
            "machineCreated",
            Some(group.to_owned()),
            None,
            None,
            format!(
                "{count} machine(s) ordered in {zone} ({why}); joining in {}s",
                self.provision_delay.as_secs()
            ),
        );
    }

    fn remove(&mut self, world: &mut World, command: &ScalingCommand) {
        let ScalingCommand::RemoveNode {
            node,
            group,
            zone,
            why,
        } = command
        else {
            return;
        };
        if self.removing.contains_key(node) || !world.nodes.contains_key(node) {
            return;
        }
        let kind = match why {
            Why::Underutilized { .. } => "scaleDown",
            Why::ClassChanged => "surgeReplace",
            Why::Chaos => "chaosVictim",
            _ => "removeNode",
        };
        let key = (group.clone(), zone.clone());
        match why {
            Why::Underutilized { .. } => {
                if let Some(d) = self.desired.get_mut(&key) {
                    *d = d.saturating_sub(1);
                }
            }
            Why::AboveMax { max, .. } => {
                if let Some(d) = self.desired.get_mut(&key) {
                    *d = (*d).min(*max);
                }
            }
            _ => {}
        }
        if let Some(n) = world.nodes.get_mut(node) {
            n.node
                .annotations
                .entry(keys::ANNOTATION_DRAINING.into())
                .or_insert_with(|| DRAIN_SOURCE_SCALING.into());
        }
        world.record_in(
            kind,
            Some(group.clone()),
            Some(node),
            None,
            command.to_string(),
        );
        self.removing.insert(
            node.clone(),
            Removal {
                group: group.clone(),
                zone: zone.clone(),
            },
        );
    }

    fn execute(&mut self, world: &mut World, commands: &[ScalingCommand]) {
        for c in commands {
            match c {
                ScalingCommand::CreateNodes {
                    group,
                    zone,
                    count,
                    why,
                } => self.order(world, group, zone, *count, why),
                ScalingCommand::RemoveNode { .. } => self.remove(world, c),
            }
        }
    }

    fn run_chaos(&mut self, world: &mut World, now: Timestamp) {
        let parts = Parts::of(world);
        let classes = self.classes.clone();
        let decision = {
            let snap = self.snapshot(&parts, &classes);
            plan_chaos(&snap, &self.chaos, self.seed, &self.config, now)
        };
        self.chaos = decision.state;
        if let Some(victim) = &decision.mark
            && let Some(n) = world.nodes.get_mut(victim)
        {
            n.node
                .annotations
                .insert(keys::ANNOTATION_CHAOS_MONKEY_VICTIM.into(), String::new());
        }
        self.execute(world, &decision.commands);
    }

    fn run_bounds_and_surge(&mut self, world: &mut World, now: Timestamp) {
        let parts = Parts::of(world);
        let classes = self.classes.clone();
        let (bounds, surge) = {
            let snap = self.snapshot(&parts, &classes);
            (
                plan_bounds(&snap, &self.config, now),
                plan_surge(&snap, &self.config, now),
            )
        };
        self.execute(world, &bounds.commands);
        self.execute(world, &surge.commands);
    }

    fn run_standby(&mut self, world: &mut World) {
        let parts = Parts::of(world);
        let classes = self.classes.clone();
        let plans = {
            let snap = self.snapshot(&parts, &classes);
            plan_standby(&snap)
        };
        for plan in plans {
            for key in &plan.delete {
                delete_pod(world, key);
                world.record_in(
                    "standbyHolder",
                    Some(plan.group.clone()),
                    None,
                    Some(key),
                    "standby holder deleted",
                );
            }
            for pod in plan.create {
                let key = pod.key();
                world.pods.insert(
                    key.clone(),
                    crate::world::SimPod {
                        pod,
                        terminating_until: None,
                        workload: None,
                    },
                );
                world.record_in(
                    "standbyHolder",
                    Some(plan.group.clone()),
                    None,
                    Some(&key),
                    format!(
                        "standby holder created ({} standby node(s) wanted)",
                        plan.count
                    ),
                );
            }
        }
    }

    fn run_scale_up(&mut self, world: &mut World, now: Timestamp) {
        let parts = Parts::of(world);
        let classes = self.classes.clone();
        let plan = {
            let snap = self.snapshot(&parts, &classes);
            plan_scale_up(&snap, &self.config, now)
        };
        // Preempted standby holders go first, then pods are bound where the engine put them.
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
        for c in &plan.commands {
            if let ScalingCommand::CreateNodes {
                group,
                zone,
                count,
                why,
            } = c
            {
                let key = (group.clone(), zone.clone());
                let present = self.desired.get(&key).copied().unwrap_or(0);
                self.desired.insert(key, present + count);
                world.record_in("scaleUp", Some(group.clone()), None, None, c.to_string());
                self.order(world, group, zone, *count, why);
                self.scale_down.last_scale_up = Some(now);
            }
        }
        for u in &plan.unplaceable {
            let reasons: Vec<String> = u.reasons.iter().map(|(g, r)| format!("{g}: {r}")).collect();
            for &i in &u.pods {
                let key = &parts.keys[i];
                if self.reported.insert(key.clone()) {
                    world.record(
                        "unschedulable",
                        None,
                        Some(key),
                        format!("no group can host the pod: {}", reasons.join("; ")),
                    );
                }
            }
        }
        for &i in &plan.waiting_for_capacity {
            let key = &parts.keys[i];
            if self.reported.insert(format!("wait:{key}")) {
                world.record(
                    "waitingForCapacity",
                    None,
                    Some(key),
                    "every zone of every group that fits the pod is at maxPerZone",
                );
            }
        }
    }

    fn run_scale_down(&mut self, world: &mut World, now: Timestamp) {
        let parts = Parts::of(world);
        let classes = self.classes.clone();
        let decision = {
            let snap = self.snapshot(&parts, &classes);
            plan_scale_down(&snap, &self.scale_down, &self.config, now)
        };
        self.scale_down = decision.state;
        self.execute(world, &decision.commands);
    }

    /// Machines ordered and not joined, per `(group, zone)`.
    pub fn upcoming(&self) -> BTreeMap<(String, String), u32> {
        let mut out = BTreeMap::new();
        for m in &self.machines {
            *out.entry((m.group.clone(), m.zone.clone())).or_insert(0) += 1;
        }
        out
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

impl Controller for ScalingController {
    fn name(&self) -> &str {
        "scaling"
    }

    fn next_run(&self) -> Option<Timestamp> {
        let join = self.machines.iter().map(|m| m.ready_at).min();
        Some(join.map_or(self.next, |j| j.min(self.next)))
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        if !self.started {
            self.started = true;
            for g in world.groups.values_mut() {
                default_class_kind_of(&mut g.group);
            }
            self.start(world);
        }
        self.join_due(world, now);
        self.conform_new_nodes(world);
        if now < self.next {
            // A machine joined between passes; the next pass schedules onto it.
            return;
        }
        self.next = now + self.period;
        // A `change` event may have set a classReference without kind.
        for g in world.groups.values_mut() {
            default_class_kind_of(&mut g.group);
        }
        self.finish_removals(world);
        self.admit_pending(world, now);
        self.run_chaos(world, now);
        self.run_bounds_and_surge(world, now);
        self.run_standby(world);
        self.run_scale_up(world, now);
        self.run_scale_down(world, now);
    }
}
