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

mod kubelets;
mod workloads;

use kubelets::conform_node;
pub use workloads::scale_workload;
use workloads::{apply_constraints, unbind};

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
            let ci: &mut CloudInstances =
                match Arc::make_mut(&mut g.group).spec.cloud_instances.as_mut() {
                    Some(ci) => ci,
                    None => continue,
                };
            if ci.zones.is_none() {
                ci.zones = Some(zones);
            }
            g.capacity = node_shape(&g.group, &class).allocatable.into();
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
                default_class_kind_in(&mut g.group);
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
            default_class_kind_in(&mut g.group);
        }
        self.sync_holders(world);
        self.admit_pending(world, now);
        self.schedule(world, now);
        self.run_executor(world, now);
    }
}

/// [`default_class_kind_of`] on the world's shared group, which is taken to change (copied
/// when a listing shares it) only when its class reference lacks a kind.
fn default_class_kind_in(group: &mut Arc<NodeGroup>) {
    let lacks_kind = group
        .spec
        .cloud_instances
        .as_ref()
        .and_then(|c| c.class_reference.as_ref())
        .is_some_and(|r| r.kind.is_empty());
    if lacks_kind {
        default_class_kind_of(Arc::make_mut(group));
    }
}
