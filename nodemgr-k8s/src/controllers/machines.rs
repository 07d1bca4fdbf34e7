//! The machine controller of CloudEphemeral groups: sizes each group per zone with the core's
//! scaling policies ([`plan_bounds`]: min/max per zone, fixed counts, failed-node
//! replacement; [`plan_scale_up`]: pending pods) and carries out the core's machine plans
//! ([`Machines`]) over a [`CloudApi`], keeping one `Instance` resource per machine.
//!
//! - **Scale-up.** New machines are created with the group's bootstrap script as user data
//!   (when [`MachineSettings::bootstrap`] is set), up to [`MachineSettings::concurrency`]
//!   cloud calls at a time.
//! - **Scale-down.** A node the policies remove (above `maxPerZone`, underutilized for
//!   `scaleDownUnneededTime` with its pods fitting elsewhere, a replaced one) is labelled
//!   `node.deckhouse.io/termination-in-progress` and annotated
//!   `update.node.deckhouse.io/draining=scale-down`; the update controller's drain executor
//!   drains it (evictions every 20 s, forced deletion after the group's drain timeout) and
//!   marks it `drained`; then its machine is deleted, and its Node once the machine is gone
//!   (Deckhouse's rule for a node in termination that is drained).
//! - **Instances.** Created before their machine (`Pending`), then `Provisioning`,
//!   `Running` with `nodeRef`, `Terminating`; deleting an Instance deletes its machine (the
//!   finalizer [`FINALIZER_INSTANCE`] holds it until then). Machines that never register a
//!   Node are recorded in the group's `status.lastMachineFailures` and replaced.
//! - **Class changes.** An Instance records the checksum of the class its machine was made
//!   from, copied onto its Node; after a `classReference` (or class) change the outdated
//!   nodes are replaced new-before-old, `maxSurgePerZone` at a time ([`plan_surge`]). The
//!   controller does not record desired counts, so this rollout is exact for fixed-count
//!   groups (`minPerZone == maxPerZone`); others follow their present count.
//! - **Cloud node GC.** Not-Ready Nodes whose provider ID the cloud does not know are deleted.
//!
//! A pass whose cloud listing fails decides nothing (a partial listing would look like
//! vanished machines).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nodemgr_core::bashible::{BootstrapOptions, RenderRoot, Renderer};
use nodemgr_core::machines::{
    ANNOTATION_PROVIDER_ID, MachineCommand, MachineConfig, MachinePhase, MachineRequests,
    MachineSnapshot, Machines, provider_ids_to_look_up,
};
use nodemgr_core::model::{Instance, NodeGroup, NodeType, Timestamp, keys};
use nodemgr_core::ports::cloud::{CloudApi, CloudError, CloudInstance, CreateInstance};
use nodemgr_core::ports::{
    ClusterError, ClusterRead, EventApi, EventKind, NodeApi, NodePatch, ObjectRef, Precondition,
    RecordedEvent,
};
use nodemgr_core::scaling::{
    ClusterSnapshot, ScaleDownState, ScalingCommand, ScalingConfig, Upcoming, class_of,
    plan_bounds, plan_scale_down, plan_scale_up, plan_surge,
};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::bootstrap_tokens::TokenSource;
use super::{Backoff, RETRY_FIRST, after_pass, now, wait};
use crate::bashible_sources::ContextSource;
use crate::cluster::KubeCluster;
use crate::crd;
use crate::metrics::Metrics;

/// Finalizer on every Instance: its machine is deleted before it goes.
pub const FINALIZER_INSTANCE: &str = "node-manager.deckhouse.io/machine";
/// Drain source of scale-down drains.
pub const DRAIN_SOURCE_SCALE_DOWN: &str = "scale-down";

/// A group's instance class: the machine size the scaling policies plan with and what the
/// cloud creates.
#[derive(Debug, Clone)]
pub struct MachineClass {
    /// The size (its `kind` and `name` are what `cloudInstances.classReference` names).
    pub scaling: nodemgr_core::scaling::InstanceClass,
    /// What to create.
    pub cloud: nodemgr_core::ports::cloud::InstanceClass,
}

/// What nodes join with (the bootstrap script in the machine's user data).
#[derive(Debug, Clone)]
pub struct Bootstrap {
    /// API endpoints, CA, versions (read at each render).
    pub cluster: ContextSource,
    /// Where each group's bootstrap token comes from.
    pub tokens: TokenSource,
}

/// Settings of the machine controller.
#[derive(Debug, Clone)]
pub struct MachineSettings {
    /// Period (it also runs at the core's deadlines). Default 10 s.
    pub period: Duration,
    /// Timeouts and pacing of machines.
    pub config: MachineConfig,
    /// Scaling policy settings.
    pub scaling: ScalingConfig,
    /// Instance classes.
    pub classes: Vec<MachineClass>,
    /// The cloud's zones (a group without `cloudInstances.zones` uses all).
    pub zones: Vec<String>,
    /// User data of new machines; `None`: empty.
    pub bootstrap: Option<Bootstrap>,
    /// Cloud calls in flight at once.
    pub concurrency: usize,
}

/// The controller.
pub struct MachineController {
    cluster: KubeCluster,
    cloud: Arc<dyn CloudApi>,
    settings: MachineSettings,
    metrics: Metrics,
    core: Machines,
    renderer: Renderer,
    scale_down: ScaleDownState,
    /// The classes' sizes, as the scaling policies take them.
    scaling_classes: Vec<nodemgr_core::scaling::InstanceClass>,
}

impl std::fmt::Debug for MachineController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineController").finish_non_exhaustive()
    }
}

fn unavailable(what: &str, error: impl std::fmt::Display) -> ClusterError {
    ClusterError::Unavailable(format!("{what}: {error}"))
}

fn phase_of(instance: &Instance) -> MachinePhase {
    MachinePhase::parse(
        instance
            .status
            .current_status
            .as_ref()
            .and_then(|c| c.phase.as_deref()),
    )
}

impl MachineController {
    /// A controller over `cluster` and `cloud`.
    pub fn new(
        cluster: KubeCluster,
        cloud: Arc<dyn CloudApi>,
        settings: MachineSettings,
        metrics: Metrics,
    ) -> Self {
        Self {
            scaling_classes: settings.classes.iter().map(|c| c.scaling.clone()).collect(),
            core: Machines::with_config(settings.config),
            cluster,
            cloud,
            settings,
            metrics,
            renderer: Renderer::new(),
            scale_down: ScaleDownState::default(),
        }
    }

    fn instances(&self) -> Api<crd::Instance> {
        Api::all(self.cluster.client().clone())
    }

    async fn event(&self, group: &str, kind: EventKind, reason: &str, message: String) {
        let _ = self
            .cluster
            .emit_event(&RecordedEvent {
                regarding: ObjectRef::node_group(group),
                kind,
                reason: reason.into(),
                message,
                time: now(),
            })
            .await;
    }

    /// One pass. Returns the core's next deadline.
    ///
    /// # Errors
    /// When the cluster or the cloud cannot be read (nothing was done).
    pub async fn pass(&mut self) -> Result<Option<Timestamp>, ClusterError> {
        let groups = self.cluster.list_node_groups().await?;
        let mut nodes = self.cluster.list_nodes().await?;
        let pods = self.cluster.list_pods().await?;
        let pdbs = self.cluster.list_pod_disruption_budgets().await?;
        let instances: Vec<Instance> = self
            .instances()
            .list(&ListParams::default())
            .await
            .map_err(|e| unavailable("listing Instances", e))?
            .items
            .iter()
            .map(crd::Instance::to_core)
            .collect();
        self.stamp_class_checksums(&instances, &mut nodes).await;
        let ephemeral: Vec<&NodeGroup> = groups
            .iter()
            .filter(|g| g.spec.node_type == Some(NodeType::CloudEphemeral))
            .collect();
        // The cloud is listed after the Nodes were read.
        let mut listed: Vec<CloudInstance> = Vec::new();
        for group in &ephemeral {
            let machines = self
                .cloud
                .list_group_instances(group.name())
                .await
                .map_err(|e| {
                    unavailable(&format!("listing the machines of {}", group.name()), e)
                })?;
            listed.extend(machines);
        }
        let mut absent = BTreeSet::new();
        for id in provider_ids_to_look_up(&nodes, &listed) {
            match self.cloud.get_instance(id).await {
                Ok(None) => {
                    absent.insert(id.to_owned());
                }
                Ok(Some(_)) => {}
                Err(error) => {
                    tracing::debug!(provider_id = %id, %error, "cloud look-up failed; node kept")
                }
            }
        }

        let now = now();
        let requests = self
            .scaling_requests(&groups, &nodes, &pods, &pdbs, &instances, now)
            .await;
        let plan = self.core.plan(
            &MachineSnapshot {
                instances: &instances,
                cloud: &listed,
                absent: &absent,
                nodes: &nodes,
            },
            &requests,
            now,
        );
        let by_name: BTreeMap<&str, &NodeGroup> = groups.iter().map(|g| (g.name(), g)).collect();
        let mut creates = Vec::new();
        for command in plan.commands {
            tracing::info!("{command}");
            match command {
                MachineCommand::Create {
                    group,
                    zone,
                    machine,
                    client_token,
                } => {
                    if let Err(error) = self
                        .create_instance_resource(
                            by_name.get(group.as_str()).copied(),
                            &group,
                            &zone,
                            &machine,
                        )
                        .await
                    {
                        tracing::warn!(%machine, %error, "could not create the Instance; the machine is not created");
                        continue;
                    }
                    Metrics::action(&self.metrics.machine_actions, &group, "create");
                    creates.push((group, zone, machine, client_token));
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
                    if let Err(error) = self
                        .set_phase(
                            &machine,
                            phase,
                            node.as_deref(),
                            provider_id.as_deref(),
                            now,
                        )
                        .await
                    {
                        tracing::warn!(%machine, %error, "could not write the Instance's phase");
                    }
                }
                MachineCommand::DeleteMachine {
                    group,
                    machine,
                    provider_id,
                    reason,
                } => {
                    let result = self.cloud.delete_instance(&provider_id).await;
                    if let Err(error) = &result {
                        tracing::warn!(%machine, %error, "could not delete the machine; retried");
                    } else {
                        Metrics::action(&self.metrics.machine_actions, &group, "delete");
                        self.event(
                            &group,
                            EventKind::Normal,
                            "MachineDeleted",
                            format!("machine {machine} ({provider_id}) deleted: {reason}"),
                        )
                        .await;
                    }
                    self.core
                        .handle_delete(&machine, result.as_ref().map(|_| ()), now);
                }
                MachineCommand::ForgetInstance { machine } => {
                    if let Err(error) = self.forget(&machine).await {
                        tracing::warn!(%machine, %error, "could not delete the Instance");
                    }
                }
                MachineCommand::RecordFailure {
                    group,
                    machine,
                    provider_id,
                    message,
                } => {
                    Metrics::action(&self.metrics.machine_actions, &group, "failure");
                    if let Err(error) = self
                        .record_failure(
                            by_name.get(group.as_str()).copied(),
                            &group,
                            &machine,
                            provider_id.as_deref(),
                            &message,
                            now,
                        )
                        .await
                    {
                        tracing::warn!(%group, %machine, %error, "could not record the machine failure");
                    }
                    self.event(
                        &group,
                        EventKind::Warning,
                        "MachineFailed",
                        format!("{machine}: {message}"),
                    )
                    .await;
                }
                MachineCommand::DeleteNode { node, reason } => {
                    match self.cluster.delete_node(&node, &Precondition::None).await {
                        Ok(()) => {
                            Metrics::action(
                                &self.metrics.machine_actions,
                                &self.metrics.group_of_node(&node),
                                "delete_node",
                            );
                            tracing::info!(%node, %reason, "node deleted");
                        }
                        Err(error) if error.is_not_found() => {}
                        Err(error) => tracing::warn!(%node, %error, "could not delete the node"),
                    }
                }
            }
        }
        self.run_creates(&by_name, creates, now).await;
        Ok(self.core.next_deadline())
    }

    /// Copies the class checksum an Instance was created with onto its Node, which the
    /// class-change rollout compares ([`plan_surge`]).
    async fn stamp_class_checksums(
        &self,
        instances: &[Instance],
        nodes: &mut [nodemgr_core::model::Node],
    ) {
        for i in instances {
            let (Some(name), Some(checksum)) = (
                i.metadata.name.as_deref(),
                i.metadata
                    .annotations
                    .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM),
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
            match self.cluster.patch_node(name, &patch).await {
                Ok(_) => {
                    node.annotations.insert(
                        keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.into(),
                        checksum.clone(),
                    );
                }
                Err(error) => {
                    tracing::warn!(node = %name, %error, "could not stamp the class checksum")
                }
            }
        }
    }

    /// The scaling layer's asks: new machines per zone, and removals whose drain finished
    /// (starting the drains of new removals).
    async fn scaling_requests(
        &mut self,
        groups: &[NodeGroup],
        nodes: &[nodemgr_core::model::Node],
        pods: &[nodemgr_core::model::Pod],
        pdbs: &[nodemgr_core::model::PodDisruptionBudget],
        instances: &[Instance],
        now: Timestamp,
    ) -> MachineRequests {
        let mut requests = MachineRequests::default();
        let with_node: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let mut upcoming: BTreeMap<(String, String), u32> = BTreeMap::new();
        for i in instances {
            let phase = phase_of(i);
            let name = i.metadata.name.as_deref().unwrap_or_default();
            if matches!(phase, MachinePhase::Pending | MachinePhase::Provisioning)
                && !with_node.contains(name)
                && i.metadata.deletion_timestamp.is_none()
            {
                let group = i
                    .metadata
                    .labels
                    .get(keys::LABEL_NODE_GROUP)
                    .cloned()
                    .unwrap_or_default();
                let zone = i
                    .metadata
                    .labels
                    .get(keys::LABEL_TOPOLOGY_ZONE)
                    .cloned()
                    .unwrap_or_default();
                *upcoming.entry((group, zone)).or_default() += 1;
            }
        }
        let leaving: BTreeSet<String> = nodes
            .iter()
            .filter(|n| n.labels.contains_key(keys::LABEL_TERMINATION_IN_PROGRESS))
            .map(|n| n.name.clone())
            .collect();
        for node in nodes {
            if leaving.contains(&node.name) && node.has_annotation(keys::ANNOTATION_DRAINED) {
                requests.remove.insert(node.name.clone());
            }
        }
        let snapshot = ClusterSnapshot::new(
            nodes,
            pods,
            pdbs,
            groups,
            &self.scaling_classes,
            &self.settings.zones,
        )
        .with_upcoming(
            upcoming
                .into_iter()
                .map(|((group, zone), count)| Upcoming { group, zone, count })
                .collect(),
        )
        .with_leaving(leaving.clone());
        let bounds = plan_bounds(&snapshot, &self.settings.scaling, now);
        let up = plan_scale_up(&snapshot, &self.settings.scaling, now);
        let surge = plan_surge(&snapshot, &self.settings.scaling, now);
        let down = plan_scale_down(&snapshot, &self.scale_down, &self.settings.scaling, now);
        self.scale_down = down.state;
        for note in &surge.notes {
            tracing::debug!("{note}");
        }
        for note in &bounds.notes {
            tracing::debug!("{note}");
        }
        let mut wanted: BTreeMap<(String, String), u32> = BTreeMap::new();
        for command in bounds
            .commands
            .iter()
            .chain(&up.commands)
            .chain(&surge.commands)
            .chain(&down.commands)
        {
            tracing::info!("{command}");
            match command {
                ScalingCommand::CreateNodes {
                    group, zone, count, ..
                } => {
                    let entry = wanted.entry((group.clone(), zone.clone())).or_default();
                    // Bounds and scale-up may both ask for a zone: the larger ask covers both.
                    *entry = (*entry).max(*count);
                }
                ScalingCommand::RemoveNode { node, .. } => {
                    if !leaving.contains(node) {
                        let patch = NodePatch::new()
                            .set_label(keys::LABEL_TERMINATION_IN_PROGRESS, "")
                            .set_annotation(keys::ANNOTATION_DRAINING, DRAIN_SOURCE_SCALE_DOWN);
                        match self.cluster.patch_node(node, &patch).await {
                            Ok(_) => Metrics::action(
                                &self.metrics.machine_actions,
                                &self.metrics.group_of_node(node),
                                "drain",
                            ),
                            Err(error) => {
                                tracing::warn!(%node, %error, "could not start the scale-down drain")
                            }
                        }
                    }
                }
            }
        }
        requests.create = wanted
            .into_iter()
            .map(|((group, zone), count)| (group, zone, count))
            .collect();
        requests
    }

    async fn create_instance_resource(
        &self,
        group_spec: Option<&NodeGroup>,
        group: &str,
        zone: &str,
        machine: &str,
    ) -> Result<(), ClusterError> {
        let class = group_spec
            .and_then(|g| g.spec.cloud_instances.as_ref())
            .and_then(|c| c.class_reference.as_ref());
        let (class_kind, class_name) = (
            class.map(|c| c.kind.clone()).unwrap_or_default(),
            class.map(|c| c.name.clone()).unwrap_or_default(),
        );
        let checksum = group_spec
            .and_then(|g| class_of(g, &self.scaling_classes))
            .map(nodemgr_core::scaling::InstanceClass::checksum)
            .unwrap_or_default();
        let body: crd::Instance = serde_json::from_value(json!({
            "apiVersion": "deckhouse.io/v1alpha2",
            "kind": "Instance",
            "metadata": {
                "name": machine,
                "labels": {keys::LABEL_NODE_GROUP: group, keys::LABEL_TOPOLOGY_ZONE: zone},
                "finalizers": [FINALIZER_INSTANCE],
                "annotations": {keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM: checksum},
            },
            "status": {"classReference": {"kind": class_kind, "name": class_name}},
        }))
        .map_err(|e| ClusterError::Other(format!("Instance {machine}: {e}")))?;
        self.instances()
            .create(&PostParams::default(), &body)
            .await
            .map_err(|e| unavailable(&format!("creating Instance {machine}"), e))?;
        self.set_phase(machine, MachinePhase::Pending, None, None, now())
            .await
    }

    async fn set_phase(
        &self,
        machine: &str,
        phase: MachinePhase,
        node: Option<&str>,
        provider_id: Option<&str>,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let mut status = json!({
            "currentStatus": {"phase": phase.as_str(), "lastUpdateTime": now.to_rfc3339()},
        });
        if let Some(node) = node {
            status["nodeRef"] = json!({"name": node});
        }
        self.instances()
            .patch_status(
                machine,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .map_err(|e| unavailable(&format!("Instance {machine} status"), e))?;
        if let Some(id) = provider_id {
            self.instances()
                .patch(
                    machine,
                    &PatchParams::default(),
                    &Patch::Merge(
                        &json!({"metadata": {"annotations": {ANNOTATION_PROVIDER_ID: id}}}),
                    ),
                )
                .await
                .map_err(|e| unavailable(&format!("Instance {machine}"), e))?;
        }
        Ok(())
    }

    async fn forget(&self, machine: &str) -> Result<(), ClusterError> {
        let api = self.instances();
        let patch = json!({"metadata": {"finalizers": null}});
        match api
            .patch(machine, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(unavailable(&format!("Instance {machine}"), e)),
        }
        match api.delete(machine, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(unavailable(&format!("deleting Instance {machine}"), e)),
        }
    }

    async fn record_failure(
        &self,
        current: Option<&NodeGroup>,
        group: &str,
        machine: &str,
        provider_id: Option<&str>,
        message: &str,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let mut failures: Vec<Value> = current
            .and_then(|g| g.status.as_ref())
            .and_then(|s| s.last_machine_failures.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| serde_json::to_value(f).ok())
            .collect();
        failures.push(json!({
            "name": machine,
            "providerID": provider_id,
            "ownerRef": group,
            "lastOperation": {
                "description": message,
                "lastUpdateTime": now.to_rfc3339(),
                "state": "Failed",
                "type": "Create",
            },
        }));
        let keep = self.settings.config.failures_kept.max(1);
        if failures.len() > keep {
            failures.drain(..failures.len() - keep);
        }
        Api::<crd::NodeGroup>::all(self.cluster.client().clone())
            .patch_status(
                group,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"lastMachineFailures": failures}})),
            )
            .await
            .map(|_| ())
            .map_err(|e| unavailable(&format!("NodeGroup {group} status"), e))
    }

    fn user_data(&self, group: Option<&&NodeGroup>) -> String {
        let (Some(bootstrap), Some(group)) = (&self.settings.bootstrap, group) else {
            return String::new();
        };
        let token = match bootstrap.tokens.for_group(group.name()) {
            Ok(token) => token,
            Err(error) => {
                tracing::warn!(group = %group.name(), %error, "machine created without user data");
                return String::new();
            }
        };
        let cluster = match bootstrap.cluster.current() {
            Ok(cluster) => cluster,
            Err(error) => {
                tracing::warn!(group = %group.name(), %error, "machine created without user data");
                return String::new();
            }
        };
        match self.renderer.render(
            group,
            &cluster,
            &BootstrapOptions {
                bootstrap_token: token,
                root: RenderRoot::host(),
            },
        ) {
            Ok(rendered) => rendered.bootstrap_script,
            Err(error) => {
                tracing::warn!(group = %group.name(), %error, "cannot render the bootstrap script; machine created without user data");
                String::new()
            }
        }
    }

    async fn run_creates(
        &mut self,
        groups: &BTreeMap<&str, &NodeGroup>,
        creates: Vec<(String, String, String, String)>,
        now: Timestamp,
    ) {
        // One render and one class look-up per group, however many machines it gets.
        let mut per_group: BTreeMap<String, (String, nodemgr_core::ports::cloud::InstanceClass)> =
            BTreeMap::new();
        let requests: Vec<CreateInstance> = creates
            .into_iter()
            .map(|(group, zone, machine, client_token)| {
                let (user_data, class) = per_group
                    .entry(group.clone())
                    .or_insert_with(|| {
                        let spec = groups.get(group.as_str());
                        let class = spec
                            .and_then(|g| class_of(g, &self.scaling_classes))
                            .and_then(|size| {
                                self.settings.classes.iter().find(|c| c.scaling == *size)
                            })
                            .map(|c| c.cloud.clone())
                            .unwrap_or_default();
                        (self.user_data(spec), class)
                    })
                    .clone();
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
        let cloud = self.cloud.clone();
        let results: Vec<(String, Result<CloudInstance, CloudError>)> =
            futures::stream::iter(requests.into_iter().map(|request| {
                let cloud = cloud.clone();
                async move {
                    let result = cloud.create_instance(&request).await;
                    (request.machine, result)
                }
            }))
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        for (machine, result) in results {
            if let Err(error) = &result {
                tracing::warn!(%machine, %error, "machine creation failed; asked again later");
            }
            self.core.handle_create(&machine, result.as_ref(), now);
        }
    }

    /// Runs passes until `stop`.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let period = self.settings.period;
        let backoff = Backoff::new(RETRY_FIRST, period);
        loop {
            let started = Instant::now();
            let result = self.pass().await;
            let (next, deadline) =
                after_pass("machines", &self.metrics, &backoff, period, started, result);
            if !wait(next, deadline, &mut stop).await {
                break;
            }
        }
    }
}
