//! The scaling executor: one reconcile step of the machines of every CloudEphemeral group —
//! sizing (bounds, class-change surge, scale-up, scale-down), the chaos monkey, standby holders
//! and the machine lifecycle — carried out over three ports: the cluster
//! ([`crate::ports::ClusterApi`]), the machine records ([`crate::ports::MachineApi`]) and the
//! cloud ([`crate::ports::CloudApi`]). The simulator (`nodemgr-sim`) and node-manager
//! (`nodemgr-k8s`) drive this same code (docs/executors.md §2).
//!
//! # One step ([`ScalingExecutor::step`])
//! 1. **Read**: node groups, nodes, pods, PodDisruptionBudgets, Instances, the standby
//!    holders, and the cloud's machines of every CloudEphemeral group (after the nodes), with a
//!    look-up of the not-Ready nodes of those groups that no listed machine explains. A failed
//!    read of anything but the holders ends the step with an error and changes nothing (a
//!    partial listing would look like vanished machines).
//! 2. **Stamp**: a node without the class checksum annotation gets its Instance's.
//! 3. **Decide and apply, phase by phase**, each policy on a snapshot that includes what the
//!    earlier phases decided (their removals are leaving, their orders upcoming):
//!    the disruption methods of [`Stage::BeforeSizing`] (chaos, [`crate::scaling::plan_chaos`])
//!    → bounds ([`plan_bounds`]) → those of [`Stage::AfterSizing`] (class-change surge,
//!    [`crate::scaling::plan_surge`]; docs/executors.md §6) →
//!    standby ([`plan_standby`]: the Deployment's replicas and `status.standby`, and the
//!    holders scale-up must count, [`expected_holders`]) → scale-up ([`plan_scale_up`]) →
//!    scale-down ([`plan_scale_down`]). Orders of several phases for one zone add up: each
//!    later phase already counts the earlier ones' machines as upcoming, so nothing is ordered
//!    twice.
//! 4. **Removals** go through the update executor's drain: the node is labelled
//!    `node.deckhouse.io/termination-in-progress` and annotated
//!    `update.node.deckhouse.io/draining=scale-down` ([`DRAIN_SOURCE_SCALE_DOWN`]; a chaos
//!    victim also gets `node.deckhouse.io/chaos-monkey-victim` in the same patch). The update
//!    executor drains it and marks it `drained`; the next step asks the machine layer to delete
//!    its machine.
//! 5. **Machines** ([`Machines::step`]): the orders and the drained removals become Instance
//!    and cloud calls — Instances first, then the machines (up to
//!    [`ScalingSettings::concurrency`] cloud calls at once, with the group's bootstrap script as
//!    user data), phases, failures, deletions of machines, Instances and Nodes whose machine is
//!    gone.
//!
//! # What the executor keeps between steps
//! The machine layer's pacing ([`Machines`]), the scale-down and chaos timers, the desired count
//! of every zone (scale-up raises it, scale-down lowers it; a zone seen for the first time
//! starts at its present count, so a new executor takes the cluster as it is), the removals it
//! started (leaving even while the node cache lags its own label), and the pods already
//! reported as unschedulable. Everything else is read again every step.
//!
//! # Guarantees
//! - Only the policies decide: the executor adds no order and no removal of its own, so the
//!   policies' properties (bounds per zone, surge limits, one chaos victim cluster-wide, …,
//!   `nodemgr-core/src/scaling`) hold for what reaches the cluster.
//! - No node is removed without a drain; no machine is deleted before its node's drain ended
//!   (the machine layer's guarantees, [`crate::machines`], hold for the rest).
//! - Steps are idempotent: a step that failed halfway is completed by the next one.
//!
//! # Timing
//! Call [`ScalingExecutor::step`] every period (10 s) and at [`ScalingExecutor::next_deadline`]
//! (the machine layer's next retry).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use futures::StreamExt as _;

use crate::disruption::{
    Action, Disruption, DisruptionReason, DisruptionSnapshot, METHODS, ScalingView, Stage,
    plan_stage,
};
use crate::machines::{
    DeleteReason, MachineCommand, MachineConfig, MachinePhase, MachineRequests, MachineSnapshot,
    Machines, provider_ids_to_look_up,
};
use crate::model::{
    Instance, LastOperation, MachineFailure, Node, NodeGroup, NodeType, Pod, Timestamp, keys,
};
use crate::ports::cloud::{
    CloudApi, CloudError, CloudInstance, CreateInstance, InstanceClass as CloudClass,
};
use crate::ports::machines::AppliedHolder;
use crate::ports::{
    ClusterApi, ClusterError, EventKind, MachineApi, NewInstance, NodePatch, ObjectRef, PodRef,
    Precondition, StandbyHolder,
};
use crate::scaling::standby::{expected_holders, holder_template};
use crate::scaling::{
    ChaosState, ClusterSnapshot, InstanceClass, ScaleDownState, ScalingCommand, ScalingConfig,
    Upcoming, Why, class_of, plan_bounds, plan_scale_down, plan_scale_up, plan_standby,
};

use super::update::emit;

/// The Event (reason, type) on a Node a disruption method takes away: the removal the scaling
/// executor starts (chaos, class change), the disruption approval or machine replacement the
/// update executor applies (drift, rolling update).
pub fn disruption_event(reason: DisruptionReason) -> (&'static str, EventKind) {
    match reason {
        DisruptionReason::Chaos => ("ChaosMonkeyVictim", EventKind::Warning),
        DisruptionReason::ClassChange => ("ClassChangeReplace", EventKind::Normal),
        DisruptionReason::RollingUpdate => ("MachineReplacementRequested", EventKind::Normal),
        DisruptionReason::Drift => ("DisruptionApproved", EventKind::Normal),
    }
}

/// The drain source a removal writes in `update.node.deckhouse.io/draining`.
pub const DRAIN_SOURCE_SCALE_DOWN: &str = "scale-down";

/// A group's instance class: the machine size the scaling policies plan with and what the
/// cloud creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineClass {
    /// The size (its `kind` and `name` are what `cloudInstances.classReference` names).
    pub scaling: InstanceClass,
    /// What to create.
    pub cloud: CloudClass,
}

/// Settings of the scaling executor.
#[derive(Debug, Clone)]
pub struct ScalingSettings {
    /// The scaling policies' tunables.
    pub scaling: ScalingConfig,
    /// The machine layer's timeouts and pacing.
    pub machines: MachineConfig,
    /// The instance classes groups may name.
    pub classes: Vec<MachineClass>,
    /// The cloud's zones (a group without `cloudInstances.zones` uses all).
    pub zones: Vec<String>,
    /// The chaos monkey's randomness (a run is reproducible per seed).
    pub chaos_seed: u64,
    /// Cloud calls in flight at once (at least 1).
    pub concurrency: usize,
}

impl Default for ScalingSettings {
    fn default() -> Self {
        Self {
            scaling: ScalingConfig::default(),
            machines: MachineConfig::default(),
            classes: Vec::new(),
            zones: Vec::new(),
            chaos_seed: 0,
            concurrency: 8,
        }
    }
}

/// Something the executor did or saw in a step.
#[derive(Debug, Clone, PartialEq)]
pub enum ScalingEvent {
    /// Machines were ordered: their Instances exist and the cloud was asked.
    Ordered {
        /// The policy's command ([`ScalingCommand::CreateNodes`]).
        command: ScalingCommand,
        /// The machines whose Instance was created (fewer than asked when some failed).
        machines: Vec<String>,
    },
    /// A node's removal started: labelled, annotated `draining`, to be drained and deleted.
    RemovalStarted {
        /// The policy's command ([`ScalingCommand::RemoveNode`]).
        command: ScalingCommand,
    },
    /// A machine was deleted in the cloud.
    MachineDeleted {
        /// Group.
        group: String,
        /// Zone (from its Instance; empty for an orphan).
        zone: String,
        /// Machine (and Node) name.
        machine: String,
        /// Why.
        reason: DeleteReason,
    },
    /// A machine failed (no Node in time, vanished) and was recorded in the group's status.
    MachineFailed {
        /// Group.
        group: String,
        /// Machine.
        machine: String,
        /// What happened.
        message: String,
    },
    /// A Node whose machine is gone was deleted.
    NodeDeleted {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// A node got its Instance's class checksum.
    ClassStamped {
        /// The node.
        node: String,
    },
    /// A group's standby-holder Deployment was created, resized or deleted.
    StandbyHolder {
        /// Group.
        group: String,
        /// Replicas now (0 = deleted).
        replicas: u32,
        /// Replicas before (`None` = it did not exist).
        previous: Option<u32>,
    },
    /// A group's `status.standby` was written.
    StandbyStatus {
        /// Group.
        group: String,
        /// Standby nodes held.
        held: u32,
    },
    /// A pending pod no group can host (reported once per pod).
    Unschedulable {
        /// The pod, `namespace/name`.
        pod: String,
        /// `group: reason` for every group.
        reasons: Vec<String>,
    },
    /// A pending pod some group could host, every such zone being at `maxPerZone` (reported
    /// once per pod).
    WaitingForCapacity {
        /// The pod, `namespace/name`.
        pod: String,
    },
}

impl ScalingEvent {
    /// The group the event is about, when it names one.
    pub fn group(&self) -> Option<&str> {
        match self {
            Self::Ordered { command, .. } | Self::RemovalStarted { command } => {
                Some(command.group())
            }
            Self::MachineDeleted { group, .. }
            | Self::MachineFailed { group, .. }
            | Self::StandbyHolder { group, .. }
            | Self::StandbyStatus { group, .. } => Some(group),
            Self::NodeDeleted { .. }
            | Self::ClassStamped { .. }
            | Self::Unschedulable { .. }
            | Self::WaitingForCapacity { .. } => None,
        }
    }
}

impl fmt::Display for ScalingEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ordered { command, machines } => {
                write!(f, "{command} (machines {})", machines.join(", "))
            }
            Self::RemovalStarted { command } => write!(f, "{command}"),
            Self::MachineDeleted {
                machine, reason, ..
            } => write!(f, "machine {machine} deleted: {reason}"),
            Self::MachineFailed {
                machine, message, ..
            } => write!(f, "machine {machine} failed: {message}"),
            Self::NodeDeleted { node, reason } => write!(f, "Node {node} deleted: {reason}"),
            Self::ClassStamped { node } => write!(f, "node {node} stamped with its class"),
            Self::StandbyHolder {
                group,
                replicas,
                previous,
            } => match (previous, replicas) {
                (None, r) => write!(f, "standby holder of {group} created with {r} replica(s)"),
                (Some(_), 0) => write!(f, "standby holder of {group} deleted"),
                (Some(p), r) => {
                    write!(
                        f,
                        "standby holder of {group} scaled from {p} to {r} replica(s)"
                    )
                }
            },
            Self::StandbyStatus { group, held } => {
                write!(f, "{group}: {held} standby node(s) held")
            }
            Self::Unschedulable { pod, reasons } => {
                write!(f, "no group can host pod {pod}: {}", reasons.join("; "))
            }
            Self::WaitingForCapacity { pod } => write!(
                f,
                "pod {pod} waits: every zone of every group that fits it is at maxPerZone"
            ),
        }
    }
}

/// A port call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// The cluster or machine port.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The cloud.
    #[error(transparent)]
    Cloud(#[from] CloudError),
}

/// An action that failed in a step; the next step tries again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to {action} ({object})")]
pub struct ScalingActionError {
    /// The object (`node worker-1`, `machine worker-abc12-x7k2p`, `group worker`).
    pub object: String,
    /// What was attempted.
    pub action: String,
    /// The port's error.
    #[source]
    pub source: PortError,
}

/// Why a step decided nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not read {what}; nothing was decided")]
pub struct ScalingError {
    /// What could not be read.
    pub what: String,
    /// The port's error.
    #[source]
    pub source: PortError,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScalingReport {
    /// What happened, in order.
    pub events: Vec<ScalingEvent>,
    /// Actions that failed (retried next step).
    pub errors: Vec<ScalingActionError>,
    /// Why things did not move (the policies' notes).
    pub notes: Vec<String>,
}

/// The scaling executor (see the module docs).
#[derive(Debug, Clone)]
pub struct ScalingExecutor {
    settings: ScalingSettings,
    sizes: Vec<InstanceClass>,
    machines: Machines,
    scale_down: ScaleDownState,
    chaos: ChaosState,
    desired: BTreeMap<(String, String), u32>,
    /// Removals started, remembered until their node is gone.
    removing: BTreeSet<String>,
    reported: BTreeSet<String>,
}

/// A standby decision to carry out.
enum StandbyAction {
    /// Create or update the group's Deployment.
    Apply {
        holder: Box<StandbyHolder>,
        previous: Option<u32>,
    },
    /// Delete the group's Deployment.
    Delete {
        group: String,
        previous: Option<u32>,
    },
    /// Write `status.standby`.
    Status { group: String, held: u32 },
}

/// A zone's order decided in this step, waiting for the machine layer.
struct Order {
    command: ScalingCommand,
    group: String,
    zone: String,
    count: u32,
}

/// What the phases read and decided so far.
struct Pass<'a> {
    nodes: &'a [Node],
    pods: &'a [Pod],
    pdbs: &'a [crate::model::PodDisruptionBudget],
    groups: &'a [NodeGroup],
    upcoming: BTreeMap<(String, String), u32>,
    leaving: BTreeSet<String>,
    orders: Vec<Order>,
}

impl ScalingExecutor {
    /// An executor with `settings` and nothing remembered.
    pub fn new(settings: ScalingSettings) -> Self {
        Self {
            sizes: settings.classes.iter().map(|c| c.scaling.clone()).collect(),
            machines: Machines::with_config(settings.machines),
            settings,
            scale_down: ScaleDownState::default(),
            chaos: ChaosState::default(),
            desired: BTreeMap::new(),
            removing: BTreeSet::new(),
            reported: BTreeSet::new(),
        }
    }

    /// The settings in use.
    pub fn settings(&self) -> &ScalingSettings {
        &self.settings
    }

    /// The desired count of every zone it has seen, by `(group, zone)`.
    pub fn desired(&self) -> &BTreeMap<(String, String), u32> {
        &self.desired
    }

    /// When a step next has something to do without new input: the machine layer's next
    /// retry of a cloud call. `None` when nothing waits for time.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.machines.next_deadline()
    }

    /// Runs one reconcile step at `now` (see the module docs).
    ///
    /// # Errors
    /// When the cluster, the Instances or the cloud cannot be read (nothing was changed then);
    /// failures of single actions are in [`ScalingReport::errors`] and are retried by the next
    /// step.
    pub async fn step<C, M, K>(
        &mut self,
        cluster: &C,
        records: &M,
        cloud: &K,
        now: Timestamp,
    ) -> Result<ScalingReport, ScalingError>
    where
        C: ClusterApi + ?Sized,
        M: MachineApi + ?Sized,
        K: CloudApi + ?Sized,
    {
        let read = |what: &str| {
            let what = what.to_owned();
            move |source: ClusterError| ScalingError {
                what,
                source: source.into(),
            }
        };
        let groups = cluster
            .list_node_groups()
            .await
            .map_err(read("the node groups"))?;
        let mut nodes = cluster.list_nodes().await.map_err(read("the nodes"))?;
        let pods = cluster.list_pods().await.map_err(read("the pods"))?;
        let pdbs = cluster
            .list_pod_disruption_budgets()
            .await
            .map_err(read("the PodDisruptionBudgets"))?;
        let instances = records
            .list_instances()
            .await
            .map_err(read("the Instances"))?;
        let mut report = ScalingReport::default();
        let holders = match records.list_standby_holders().await {
            Ok(holders) => Some(holders),
            Err(source) => {
                report.errors.push(ScalingActionError {
                    object: "standby holders".into(),
                    action: "list the standby holders".into(),
                    source: source.into(),
                });
                None
            }
        };
        // The cloud is listed after the nodes were read.
        let ephemeral: Vec<String> = groups
            .iter()
            .filter(|g| {
                g.spec.node_type == Some(NodeType::CloudEphemeral)
                    && g.spec.cloud_instances.is_some()
            })
            .map(|g| g.name().to_owned())
            .collect();
        let mut listed: Vec<CloudInstance> = Vec::new();
        for group in ephemeral.clone() {
            let machines =
                cloud
                    .list_group_instances(&group)
                    .await
                    .map_err(|source| ScalingError {
                        what: format!("the machines of {group}"),
                        source: source.into(),
                    })?;
            listed.extend(machines);
        }
        // Cloud node GC looks only at nodes of groups whose machines nodemgr orders.
        let ours: Vec<Node> = nodes
            .iter()
            .filter(|n| n.group().is_some_and(|g| ephemeral.iter().any(|e| e == g)))
            .cloned()
            .collect();
        let mut absent = BTreeSet::new();
        let look_up: Vec<String> = provider_ids_to_look_up(&ours, &listed)
            .into_iter()
            .map(str::to_owned)
            .collect();
        for id in look_up {
            match cloud.get_instance(&id).await {
                Ok(None) => {
                    absent.insert(id);
                }
                Ok(Some(_)) => {}
                Err(error) => {
                    tracing::debug!(provider_id = %id, %error, "cloud look-up failed; node kept");
                }
            }
        }

        self.stamp_class_checksums(cluster, &instances, &mut nodes, &mut report)
            .await;
        let present: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        self.removing.retain(|name| present.contains(name.as_str()));
        let leaving: BTreeSet<String> = nodes
            .iter()
            .filter(|n| n.labels.contains_key(keys::LABEL_TERMINATION_IN_PROGRESS))
            .map(|n| n.name.clone())
            .chain(self.removing.iter().cloned())
            .collect();
        let mut pass = Pass {
            nodes: &nodes,
            pods: &pods,
            pdbs: &pdbs,
            groups: &groups,
            upcoming: upcoming_of(&instances, &present),
            leaving,
            orders: Vec::new(),
        };
        self.remember_desired(&pass);

        self.run_disruptions(cluster, &mut pass, Stage::BeforeSizing, now, &mut report)
            .await;
        self.run_bounds(cluster, &mut pass, now, &mut report).await;
        self.run_disruptions(cluster, &mut pass, Stage::AfterSizing, now, &mut report)
            .await;
        let view = self
            .run_standby(records, &pass, holders.as_deref(), &mut report)
            .await;
        self.run_scale_up(cluster, &mut pass, &view, now, &mut report)
            .await;
        self.run_scale_down(cluster, &mut pass, now, &mut report)
            .await;

        // The machine layer: orders, drained removals, lifecycle.
        let mut requests = MachineRequests::default();
        for order in &pass.orders {
            requests
                .create
                .push((order.group.clone(), order.zone.clone(), order.count));
        }
        for node in &nodes {
            if pass.leaving.contains(&node.name) && node.has_annotation(keys::ANNOTATION_DRAINED) {
                requests.remove.insert(node.name.clone());
            }
        }
        let orders = std::mem::take(&mut pass.orders);
        let plan = self.machines.step(
            &MachineSnapshot {
                instances: &instances,
                cloud: &listed,
                absent: &absent,
                nodes: &nodes,
            },
            &requests,
            now,
        );
        self.apply_machine_commands(
            cluster,
            records,
            cloud,
            &groups,
            &instances,
            plan.commands,
            orders,
            now,
            &mut report,
        )
        .await;
        Ok(report)
    }

    /// Copies the class checksum an Instance was created with onto its Node (the class-change
    /// rollout compares it, [`plan_surge`]).
    async fn stamp_class_checksums<C: ClusterApi + ?Sized>(
        &self,
        cluster: &C,
        instances: &[Instance],
        nodes: &mut [Node],
        report: &mut ScalingReport,
    ) {
        for i in instances {
            let (Some(name), Some(checksum)) = (
                i.metadata.name.as_deref(),
                i.metadata
                    .annotations
                    .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
                    .filter(|c| !c.is_empty()),
            ) else {
                continue;
            };
            let Some(node) = nodes.iter_mut().find(|n| n.name == name) else {
                continue;
            };
            if node
                .annotations
                .contains_key(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
            {
                continue;
            }
            let patch = NodePatch::new()
                .set_annotation(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM, checksum.clone());
            match cluster.patch_node(name, &patch).await {
                Ok(_) => {
                    node.annotations.insert(
                        keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.into(),
                        checksum.clone(),
                    );
                    report.events.push(ScalingEvent::ClassStamped {
                        node: name.to_owned(),
                    });
                }
                Err(source) => report.errors.push(ScalingActionError {
                    object: format!("node {name}"),
                    action: "stamp the class checksum".into(),
                    source: source.into(),
                }),
            }
        }
    }

    /// A snapshot of what the pass read, with its leaving nodes, upcoming machines and the
    /// desired counts.
    fn snapshot<'a>(&'a self, pass: &Pass<'a>, pods: &'a [Pod]) -> ClusterSnapshot<'a> {
        ClusterSnapshot::new(
            pass.nodes,
            pods,
            pass.pdbs,
            pass.groups,
            &self.sizes,
            &self.settings.zones,
        )
        .with_upcoming(
            pass.upcoming
                .iter()
                .map(|((group, zone), count)| Upcoming {
                    group: group.clone(),
                    zone: zone.clone(),
                    count: *count,
                })
                .collect(),
        )
        .with_leaving(pass.leaving.clone())
        .with_desired(self.desired.clone())
    }

    /// Records the present count of zones seen for the first time and forgets zones that are
    /// no longer a scaling group's.
    fn remember_desired(&mut self, pass: &Pass<'_>) {
        let snapshot = self.snapshot(pass, pass.pods);
        let mut seen: BTreeMap<(String, String), u32> = BTreeMap::new();
        for group in &snapshot.groups {
            for zone in &group.zones {
                let key = (group.name().to_owned(), zone.clone());
                let present = pass
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.group() == Some(group.name())
                            && n.zone() == Some(zone.as_str())
                            && !snapshot.is_leaving(n)
                    })
                    .count();
                let present = u32::try_from(present)
                    .unwrap_or(u32::MAX)
                    .saturating_add(snapshot.upcoming_in(group.name(), zone));
                let value = self
                    .desired
                    .get(&key)
                    .copied()
                    .unwrap_or_else(|| snapshot.desired(group, zone, present));
                seen.insert(key, value);
            }
        }
        self.desired = seen;
    }

    /// Runs the disruption methods of `stage` ([`METHODS`] order, docs/executors.md §6) on a
    /// snapshot with the earlier phases' decisions; nodes already leaving are claimed. A
    /// chaos victim whose mark failed is chosen again next step (the chaos memory is kept).
    async fn run_disruptions<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        pass: &mut Pass<'_>,
        stage: Stage,
        now: Timestamp,
        report: &mut ScalingReport,
    ) {
        let plan = {
            let snapshot = self.snapshot(pass, pass.pods);
            let view = ScalingView {
                cluster: &snapshot,
                config: &self.settings.scaling,
                chaos: &self.chaos,
                chaos_seed: self.settings.chaos_seed,
            };
            plan_stage(
                &METHODS,
                stage,
                &DisruptionSnapshot {
                    now,
                    scaling: Some(view),
                    update: None,
                },
                &pass.leaving,
            )
        };
        report.notes.extend(plan.notes.iter().cloned());
        let mut chaos_done = !plan
            .superseded
            .iter()
            .any(|s| s.reason == DisruptionReason::Chaos);
        for planned in plan.disruptions {
            let Disruption {
                node,
                group,
                action: Action::Remove { zone },
            } = planned.disruption
            else {
                continue;
            };
            let command = ScalingCommand::RemoveNode {
                node,
                group,
                zone,
                why: Why::Disruption(planned.reason),
            };
            let started = self.remove(cluster, pass, command, now, report).await;
            if planned.reason == DisruptionReason::Chaos {
                chaos_done &= started;
            }
        }
        if let Some(state) = plan.chaos
            && chaos_done
        {
            self.chaos = state;
        }
    }

    async fn run_bounds<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        pass: &mut Pass<'_>,
        now: Timestamp,
        report: &mut ScalingReport,
    ) {
        let bounds = {
            let snapshot = self.snapshot(pass, pass.pods);
            plan_bounds(&snapshot, &self.settings.scaling, now)
        };
        report.notes.extend(bounds.notes.iter().cloned());
        self.execute(cluster, pass, bounds.commands, now, report)
            .await;
    }

    /// Sizes the standby-holder Deployments, writes `status.standby`, and returns the pods
    /// scale-up plans with: the cluster's, with pending holders given zones and the
    /// Deployments' missing replicas added ([`expected_holders`]).
    async fn run_standby<M: MachineApi + ?Sized>(
        &self,
        records: &M,
        pass: &Pass<'_>,
        holders: Option<&[AppliedHolder]>,
        report: &mut ScalingReport,
    ) -> Vec<Pod> {
        let (view, actions) = self.plan_standby_actions(pass, holders, report);
        for action in actions {
            match action {
                StandbyAction::Apply { holder, previous } => {
                    match records.apply_standby_holder(&holder).await {
                        Ok(()) => report.events.push(ScalingEvent::StandbyHolder {
                            replicas: holder.replicas,
                            group: holder.group.clone(),
                            previous,
                        }),
                        Err(source) => report.errors.push(ScalingActionError {
                            object: format!("group {}", holder.group),
                            action: "apply the standby holder".into(),
                            source: source.into(),
                        }),
                    }
                }
                StandbyAction::Delete { group, previous } => {
                    match records.delete_standby_holder(&group).await {
                        Ok(()) => report.events.push(ScalingEvent::StandbyHolder {
                            group,
                            replicas: 0,
                            previous,
                        }),
                        Err(source) => report.errors.push(ScalingActionError {
                            object: format!("group {group}"),
                            action: "delete the standby holder".into(),
                            source: source.into(),
                        }),
                    }
                }
                StandbyAction::Status { group, held } => {
                    match records.set_standby_status(&group, held).await {
                        Ok(()) => report
                            .events
                            .push(ScalingEvent::StandbyStatus { group, held }),
                        Err(source) => report.errors.push(ScalingActionError {
                            object: format!("group {group}"),
                            action: "write status.standby".into(),
                            source: source.into(),
                        }),
                    }
                }
            }
        }
        view
    }

    /// The standby decisions of a pass (see [`ScalingExecutor::run_standby`]), without I/O.
    fn plan_standby_actions(
        &self,
        pass: &Pass<'_>,
        holders: Option<&[AppliedHolder]>,
        report: &mut ScalingReport,
    ) -> (Vec<Pod>, Vec<StandbyAction>) {
        let mut view: Vec<Pod> = pass.pods.to_vec();
        let mut actions = Vec::new();
        let snapshot = self.snapshot(pass, pass.pods);
        let plans = plan_standby(&snapshot);
        let Some(holders) = holders else {
            return (view, actions);
        };
        let existing: BTreeMap<&str, &AppliedHolder> =
            holders.iter().map(|h| (h.group.as_str(), h)).collect();
        for plan in &plans {
            if let Some(error) = &plan.error {
                report
                    .notes
                    .push(format!("{}: standby: {error}", plan.group));
            }
            let Some(group) = snapshot.group(&plan.group) else {
                continue;
            };
            let current = existing.get(plan.group.as_str()).copied();
            if plan.count == 0 {
                if let Some(current) = current {
                    actions.push(StandbyAction::Delete {
                        group: plan.group.clone(),
                        previous: Some(current.replicas),
                    });
                }
            } else if let Some(template) = holder_template(group) {
                let wanted = StandbyHolder {
                    group: plan.group.clone(),
                    replicas: plan.count,
                    template,
                };
                if current != Some(&wanted.applied()) {
                    actions.push(StandbyAction::Apply {
                        previous: current.map(|h| h.replicas),
                        holder: Box::new(wanted),
                    });
                }
            }
            let held = plan.held.min(plan.count);
            let written = group
                .group
                .status
                .as_ref()
                .and_then(|s| s.standby)
                .and_then(|s| u32::try_from(s).ok());
            if written != Some(held) {
                actions.push(StandbyAction::Status {
                    group: plan.group.clone(),
                    held,
                });
            }
        }
        // Holders of groups that are gone or no longer scaling.
        let planned: BTreeSet<&str> = plans.iter().map(|p| p.group.as_str()).collect();
        for holder in holders {
            if !planned.contains(holder.group.as_str()) {
                actions.push(StandbyAction::Delete {
                    group: holder.group.clone(),
                    previous: Some(holder.replicas),
                });
            }
        }
        let _ = expected_holders(&mut view, pass.nodes, &snapshot.groups, &plans);
        (view, actions)
    }

    async fn run_scale_up<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        pass: &mut Pass<'_>,
        view: &[Pod],
        now: Timestamp,
        report: &mut ScalingReport,
    ) {
        let plan = {
            let snapshot = self.snapshot(pass, view);
            plan_scale_up(&snapshot, &self.settings.scaling, now)
        };
        for command in &plan.commands {
            if let ScalingCommand::CreateNodes {
                group, zone, count, ..
            } = command
            {
                let key = (group.clone(), zone.clone());
                let present = self.desired.get(&key).copied().unwrap_or(0);
                self.desired.insert(key, present.saturating_add(*count));
                self.scale_down.last_scale_up = Some(now);
            }
        }
        self.execute(cluster, pass, plan.commands.clone(), now, report)
            .await;
        let real: BTreeSet<String> = pass.pods.iter().map(Pod::key).collect();
        let mut pending: BTreeSet<String> = BTreeSet::new();
        let mut found: Vec<(PodRef, ScalingEvent)> = Vec::new();
        for u in &plan.unplaceable {
            let reasons: Vec<String> = u.reasons.iter().map(|(g, r)| format!("{g}: {r}")).collect();
            for &i in &u.pods {
                let Some(pod) = view.get(i) else { continue };
                let key = pod.key();
                if !real.contains(&key) {
                    continue;
                }
                pending.insert(key.clone());
                if self.reported.insert(key.clone()) {
                    found.push((
                        PodRef::of(pod),
                        ScalingEvent::Unschedulable {
                            pod: key,
                            reasons: reasons.clone(),
                        },
                    ));
                }
            }
        }
        for &i in &plan.waiting_for_capacity {
            let Some(pod) = view.get(i) else { continue };
            let key = pod.key();
            if !real.contains(&key) {
                continue;
            }
            let mark = format!("wait:{key}");
            pending.insert(mark.clone());
            if self.reported.insert(mark) {
                found.push((
                    PodRef::of(pod),
                    ScalingEvent::WaitingForCapacity { pod: key },
                ));
            }
        }
        for (pod, event) in found {
            not_triggered(cluster, pod, &event, now).await;
            report.events.push(event);
        }
        // Forget pods that are gone or no longer pending; a pod pending again is reported again.
        let still: BTreeSet<String> = pass
            .pods
            .iter()
            .filter(|p| p.node_name.is_none())
            .map(Pod::key)
            .collect();
        self.reported.retain(|k| {
            let key = k.strip_prefix("wait:").unwrap_or(k);
            still.contains(key) || pending.contains(k)
        });
    }

    async fn run_scale_down<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        pass: &mut Pass<'_>,
        now: Timestamp,
        report: &mut ScalingReport,
    ) {
        let decision = {
            let snapshot = self.snapshot(pass, pass.pods);
            plan_scale_down(&snapshot, &self.scale_down, &self.settings.scaling, now)
        };
        self.scale_down = decision.state;
        report.notes.extend(decision.notes.iter().cloned());
        self.execute(cluster, pass, decision.commands, now, report)
            .await;
    }

    /// Carries out a phase's commands: orders wait for the machine layer (and count as
    /// upcoming for the next phases), removals start at once.
    async fn execute<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        pass: &mut Pass<'_>,
        commands: Vec<ScalingCommand>,
        now: Timestamp,
        report: &mut ScalingReport,
    ) {
        for command in commands {
            match &command {
                ScalingCommand::CreateNodes {
                    group, zone, count, ..
                } => {
                    if *count == 0 {
                        continue;
                    }
                    *pass
                        .upcoming
                        .entry((group.clone(), zone.clone()))
                        .or_insert(0) += count;
                    pass.orders.push(Order {
                        group: group.clone(),
                        zone: zone.clone(),
                        count: *count,
                        command,
                    });
                }
                ScalingCommand::RemoveNode { .. } => {
                    self.remove(cluster, pass, command, now, report).await;
                }
            }
        }
    }

    /// Starts the removal of a node (see the module docs, step 4). Returns whether it started
    /// (or was under way already).
    async fn remove<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        pass: &mut Pass<'_>,
        command: ScalingCommand,
        now: Timestamp,
        report: &mut ScalingReport,
    ) -> bool {
        let ScalingCommand::RemoveNode {
            node,
            group,
            zone,
            why,
        } = command.clone()
        else {
            return false;
        };
        if pass.leaving.contains(&node) {
            return true;
        }
        let Some(current) = pass.nodes.iter().find(|n| n.name == node) else {
            return false;
        };
        let mut patch = NodePatch::new().set_label(keys::LABEL_TERMINATION_IN_PROGRESS, "");
        if !current.has_annotation(keys::ANNOTATION_DRAINING)
            && !current.has_annotation(keys::ANNOTATION_DRAINED)
        {
            patch = patch.set_annotation(keys::ANNOTATION_DRAINING, DRAIN_SOURCE_SCALE_DOWN);
        }
        if why == Why::Disruption(DisruptionReason::Chaos) {
            patch = patch.set_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM, "");
        }
        let (reason, kind) = match &why {
            Why::Disruption(reason) => disruption_event(*reason),
            Why::Underutilized { .. } => ("ScaleDown", EventKind::Normal),
            Why::Failed => ("FailedNodeRemoved", EventKind::Warning),
            Why::AboveMax { .. } | Why::BelowDesired { .. } | Why::PendingPods { .. } => {
                ("NodeRemoved", EventKind::Normal)
            }
        };
        let key = (group, zone);
        match why {
            Why::Underutilized { .. } => {
                self.shrink(&key, None);
            }
            Why::AboveMax { max, .. } => self.shrink(&key, Some(max)),
            Why::BelowDesired { .. }
            | Why::Failed
            | Why::PendingPods { .. }
            | Why::Disruption(_) => {}
        }
        if let Err(source) = cluster.patch_node(&node, &patch).await {
            report.errors.push(ScalingActionError {
                object: format!("node {node}"),
                action: "start the removal".into(),
                source: source.into(),
            });
            return false;
        }
        pass.leaving.insert(node.clone());
        self.removing.insert(node.clone());
        emit(
            cluster,
            ObjectRef::node(node),
            kind,
            reason,
            command.to_string(),
            now,
        )
        .await;
        report.events.push(ScalingEvent::RemovalStarted { command });
        true
    }

    /// Lowers a zone's desired count by one (`None`) or to `max`.
    fn shrink(&mut self, key: &(String, String), max: Option<u32>) {
        if let Some(d) = self.desired.get_mut(key) {
            *d = match max {
                None => d.saturating_sub(1),
                Some(max) => (*d).min(max),
            };
        }
    }

    /// Applies the machine layer's plan, then reports the orders with the machines they got.
    #[allow(clippy::too_many_arguments)]
    async fn apply_machine_commands<C, M, K>(
        &mut self,
        cluster: &C,
        records: &M,
        cloud: &K,
        groups: &[NodeGroup],
        instances: &[Instance],
        commands: Vec<MachineCommand>,
        orders: Vec<Order>,
        now: Timestamp,
        report: &mut ScalingReport,
    ) where
        C: ClusterApi + ?Sized,
        M: MachineApi + ?Sized,
        K: CloudApi + ?Sized,
    {
        let by_name: BTreeMap<&str, &NodeGroup> = groups.iter().map(|g| (g.name(), g)).collect();
        let zone_of: BTreeMap<&str, &str> = instances
            .iter()
            .filter_map(|i| {
                Some((
                    i.metadata.name.as_deref()?,
                    i.metadata
                        .labels
                        .get(keys::LABEL_TOPOLOGY_ZONE)
                        .map_or("", String::as_str),
                ))
            })
            .collect();
        let mut created: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        let mut creates: Vec<(String, String, String, String)> = Vec::new();
        for command in commands {
            tracing::debug!("{command}");
            match command {
                MachineCommand::Create {
                    group,
                    zone,
                    machine,
                    client_token,
                } => {
                    let spec = by_name.get(group.as_str()).copied();
                    let record = NewInstance {
                        machine: machine.clone(),
                        group: group.clone(),
                        zone: zone.clone(),
                        class_reference: spec
                            .and_then(|g| g.spec.cloud_instances.as_ref())
                            .and_then(|c| c.class_reference.clone()),
                        class_checksum: spec
                            .and_then(|g| class_of(g, &self.sizes))
                            .map(InstanceClass::checksum)
                            .unwrap_or_default(),
                    };
                    match records.create_instance(&record, now).await {
                        Ok(()) => {
                            created
                                .entry((group.clone(), zone.clone()))
                                .or_default()
                                .push(machine.clone());
                            creates.push((group, zone, machine, client_token));
                        }
                        Err(source) => report.errors.push(ScalingActionError {
                            object: format!("machine {machine}"),
                            action: "create the Instance (the machine is not created)".into(),
                            source: source.into(),
                        }),
                    }
                }
                MachineCommand::EnsureMachine {
                    group,
                    zone,
                    machine,
                    client_token,
                } => creates.push((group, zone, machine, client_token)),
                MachineCommand::SetPhase {
                    machine,
                    phase,
                    node,
                    provider_id,
                } => {
                    if let Err(source) = records
                        .set_instance_phase(
                            &machine,
                            phase,
                            node.as_deref(),
                            provider_id.as_deref(),
                            now,
                        )
                        .await
                        && !source.is_not_found()
                    {
                        report.errors.push(ScalingActionError {
                            object: format!("machine {machine}"),
                            action: format!("mark the Instance {phase}"),
                            source: source.into(),
                        });
                    }
                }
                MachineCommand::DeleteMachine {
                    group,
                    machine,
                    provider_id,
                    reason,
                } => {
                    let result = cloud.delete_instance(&provider_id).await;
                    self.machines
                        .handle_delete(&machine, result.as_ref().map(|_| ()), now);
                    match result {
                        Ok(()) => {
                            emit(
                                cluster,
                                ObjectRef::node_group(group.clone()),
                                EventKind::Normal,
                                "MachineDeleted",
                                format!("machine {machine} ({provider_id}) deleted: {reason}"),
                                now,
                            )
                            .await;
                            report.events.push(ScalingEvent::MachineDeleted {
                                zone: zone_of
                                    .get(machine.as_str())
                                    .copied()
                                    .unwrap_or("")
                                    .to_owned(),
                                group,
                                machine,
                                reason,
                            });
                        }
                        Err(source) => report.errors.push(ScalingActionError {
                            object: format!("machine {machine}"),
                            action: "delete the machine".into(),
                            source: source.into(),
                        }),
                    }
                }
                MachineCommand::ForgetInstance { machine } => {
                    if let Err(source) = records.forget_instance(&machine).await {
                        report.errors.push(ScalingActionError {
                            object: format!("machine {machine}"),
                            action: "delete the Instance".into(),
                            source: source.into(),
                        });
                    }
                }
                MachineCommand::RecordFailure {
                    group,
                    machine,
                    provider_id,
                    message,
                } => {
                    let failure = MachineFailure {
                        name: Some(machine.clone()),
                        provider_id,
                        owner_ref: Some(group.clone()),
                        last_operation: Some(LastOperation {
                            description: Some(message.clone()),
                            last_update_time: Some(now.to_rfc3339()),
                            state: Some("Failed".into()),
                            type_: Some("Create".into()),
                        }),
                    };
                    if let Err(source) = records
                        .record_machine_failure(
                            &group,
                            &failure,
                            self.settings.machines.failures_kept,
                        )
                        .await
                    {
                        report.errors.push(ScalingActionError {
                            object: format!("group {group}"),
                            action: format!("record the failure of {machine}"),
                            source: source.into(),
                        });
                    }
                    emit(
                        cluster,
                        ObjectRef::node_group(group.clone()),
                        EventKind::Warning,
                        "MachineFailed",
                        format!("{machine}: {message}"),
                        now,
                    )
                    .await;
                    report.events.push(ScalingEvent::MachineFailed {
                        group,
                        machine,
                        message,
                    });
                }
                MachineCommand::DeleteNode { node, reason } => {
                    match cluster.delete_node(&node, &Precondition::None).await {
                        Ok(()) => report
                            .events
                            .push(ScalingEvent::NodeDeleted { node, reason }),
                        Err(source) if source.is_not_found() => {}
                        Err(source) => report.errors.push(ScalingActionError {
                            object: format!("node {node}"),
                            action: "delete the Node".into(),
                            source: source.into(),
                        }),
                    }
                }
            }
        }
        self.run_creates(records, cloud, &by_name, creates, now, report)
            .await;
        for order in orders {
            let list = created
                .entry((order.group.clone(), order.zone.clone()))
                .or_default();
            let take = usize::try_from(order.count)
                .unwrap_or(usize::MAX)
                .min(list.len());
            let machines: Vec<String> = list.drain(..take).collect();
            if machines.is_empty() {
                continue;
            }
            emit(
                cluster,
                ObjectRef::node_group(order.group.clone()),
                EventKind::Normal,
                "MachinesOrdered",
                order.command.to_string(),
                now,
            )
            .await;
            report.events.push(ScalingEvent::Ordered {
                command: order.command,
                machines,
            });
        }
    }

    /// Asks the cloud for the machines, `concurrency` calls at a time, and reports the results
    /// to the machine layer.
    async fn run_creates<M: MachineApi + ?Sized, K: CloudApi + ?Sized>(
        &mut self,
        records: &M,
        cloud: &K,
        groups: &BTreeMap<&str, &NodeGroup>,
        creates: Vec<(String, String, String, String)>,
        now: Timestamp,
        report: &mut ScalingReport,
    ) {
        if creates.is_empty() {
            return;
        }
        // One user data and one class per group, however many machines it gets.
        let mut per_group: BTreeMap<String, (String, CloudClass)> = BTreeMap::new();
        for (group, ..) in &creates {
            if per_group.contains_key(group) {
                continue;
            }
            let spec = groups.get(group.as_str()).copied();
            let class = spec
                .and_then(|g| class_of(g, &self.sizes))
                .and_then(|size| self.settings.classes.iter().find(|c| c.scaling == *size))
                .map(|c| c.cloud.clone())
                .unwrap_or_default();
            let user_data = match spec {
                Some(g) => records.user_data(g).await,
                None => String::new(),
            };
            per_group.insert(group.clone(), (user_data, class));
        }
        let requests: Vec<CreateInstance> = creates
            .into_iter()
            .map(|(group, zone, machine, client_token)| {
                let (user_data, class) = per_group.get(&group).cloned().unwrap_or_default();
                CreateInstance {
                    user_data,
                    group,
                    zone,
                    machine,
                    class,
                    client_token,
                }
            })
            .collect();
        let calls = requests.into_iter().map(|request| async move {
            let result = cloud.create_instance(&request).await;
            (request.machine, result)
        });
        let mut results: Vec<(String, Result<CloudInstance, CloudError>)> =
            futures::stream::iter(calls)
                .buffer_unordered(self.settings.concurrency.max(1))
                .collect()
                .await;
        results.sort_by(|a, b| a.0.cmp(&b.0));
        for (machine, result) in results {
            if let Err(source) = &result {
                report.errors.push(ScalingActionError {
                    object: format!("machine {machine}"),
                    action: "create the machine (asked again later)".into(),
                    source: source.clone().into(),
                });
            }
            self.machines.handle_create(&machine, result.as_ref(), now);
        }
    }
}

/// Machines ordered and not registered, per `(group, zone)`: Instances `Pending` or
/// `Provisioning` without a Node of their name and not being deleted.
fn upcoming_of(instances: &[Instance], nodes: &BTreeSet<&str>) -> BTreeMap<(String, String), u32> {
    let mut upcoming: BTreeMap<(String, String), u32> = BTreeMap::new();
    for i in instances {
        let phase = MachinePhase::parse(
            i.status
                .current_status
                .as_ref()
                .and_then(|c| c.phase.as_deref()),
        );
        let name = i.metadata.name.as_deref().unwrap_or_default();
        if matches!(phase, MachinePhase::Pending | MachinePhase::Provisioning)
            && !nodes.contains(name)
            && i.metadata.deletion_timestamp.is_none()
        {
            let label = |key: &str| i.metadata.labels.get(key).cloned().unwrap_or_default();
            *upcoming
                .entry((
                    label(keys::LABEL_NODE_GROUP),
                    label(keys::LABEL_TOPOLOGY_ZONE),
                ))
                .or_insert(0) += 1;
        }
    }
    upcoming
}

/// Records cluster-autoscaler's `NotTriggerScaleUp` Event on a pod no new node will host.
async fn not_triggered<C: ClusterApi + ?Sized>(
    cluster: &C,
    pod: PodRef,
    event: &ScalingEvent,
    now: Timestamp,
) {
    emit(
        cluster,
        ObjectRef::pod(&pod),
        EventKind::Normal,
        "NotTriggerScaleUp",
        event.to_string(),
        now,
    )
    .await;
}

#[cfg(test)]
mod tests;
