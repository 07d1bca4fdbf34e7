//! The machine controller of CloudEphemeral groups: node-manager's driver of the core's scaling
//! executor ([`ScalingExecutor`], the one the simulator drives; docs/executors.md §2) over the
//! cluster port ([`KubeCluster`]), the machine port over the API ([`KubeMachines`]) and a
//! [`CloudApi`]. Every period (and at the executor's deadline) one step sizes every group per
//! zone (bounds, class-change surge, standby, scale-up, scale-down), runs the chaos monkey and
//! carries the machine layer's decisions out.
//!
//! What this module adds to the executor is the Kubernetes shape of its records:
//! - **Instances** (`deckhouse.io/v1alpha2`): created before their machine (`Pending`), then
//!   `Provisioning`, `Running` with `nodeRef`, `Terminating`; the finalizer
//!   [`FINALIZER_INSTANCE`] holds one until its machine is gone; deleting an Instance deletes
//!   its machine. Failures go to the group's `status.lastMachineFailures`.
//! - **User data**: the group's bootstrap script when [`MachineSettings::bootstrap`] is set.
//! - **Standby** (docs/deckhouse.md §8): the Deployment `standby-holder-<group>` in
//!   `d8-cloud-instance-manager` runs `replicas` pause pods (image
//!   [`MachineSettings::standby_image`]) of the PriorityClass `standby` (created when absent,
//!   value [`STANDBY_PRIORITY`]), with the group's nodeSelector and taints tolerated, a
//!   hostname anti-affinity between holders and a zone spread, requesting
//!   `overprovisioningRate` % of a node; `status.standby` counts the holders bound to a node.
//! - **Removals** (scale-down, failed or surplus nodes, class changes, chaos victims): the node
//!   is labelled `node.deckhouse.io/termination-in-progress` and annotated
//!   `update.node.deckhouse.io/draining=scale-down`; the update controller's drain executor
//!   drains it and marks it `drained`; then its machine is deleted, and its Node once the
//!   machine is gone. A chaos victim also gets `node.deckhouse.io/chaos-monkey-victim`, a
//!   `ChaosMonkeyVictim` Event and a count in `nodemgr_chaos_victims_total`.
//!
//! A pass whose reads fail decides nothing (a partial listing would look like vanished
//! machines).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use nodemgr_core::bashible::{BootstrapOptions, RenderRoot, Renderer};
use nodemgr_core::executor::ScalingExecutor;
use nodemgr_core::executor::scaling::{ScalingEvent, ScalingSettings};
use nodemgr_core::machines::{ANNOTATION_PROVIDER_ID, MachineConfig, MachinePhase};
use nodemgr_core::model::{Instance, MachineFailure, NodeGroup, Timestamp, keys};
use nodemgr_core::ports::cloud::CloudApi;
use nodemgr_core::ports::{
    ANNOTATION_HOLDER_CHECKSUM, AppliedHolder, ClusterError, MachineApi, NewInstance, StandbyHolder,
};
use nodemgr_core::scaling::{ScalingCommand, ScalingConfig, Why};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::bootstrap_tokens::TokenSource;
use super::{Backoff, RETRY_FIRST, after_pass, now, wait};
use crate::bashible_sources::ContextSource;
use crate::cluster::{KubeCluster, map_error};
use crate::crd;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

pub use nodemgr_core::executor::scaling::{DRAIN_SOURCE_SCALE_DOWN, MachineClass};
pub use nodemgr_core::scaling::standby::STANDBY_PRIORITY;

/// Finalizer on every Instance: its machine is deleted before it goes.
pub const FINALIZER_INSTANCE: &str = "node-manager.deckhouse.io/machine";

/// The image of the standby-holder pods unless [`MachineSettings::standby_image`] says
/// otherwise: the pause container, which only holds the requests.
pub const DEFAULT_STANDBY_IMAGE: &str = "registry.k8s.io/pause:3.9";

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
    /// Period (it also runs at the executor's deadlines). Default 10 s.
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
    /// The image of standby-holder pods ([`DEFAULT_STANDBY_IMAGE`]).
    pub standby_image: String,
}

/// The machine port over the Kubernetes API (see the module docs). Reads are direct, not
/// cached: the executor counts ordered machines from the Instances it lists.
pub struct KubeMachines {
    client: Client,
    bootstrap: Option<Bootstrap>,
    renderer: Renderer,
    standby_image: String,
}

impl std::fmt::Debug for KubeMachines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeMachines").finish_non_exhaustive()
    }
}

impl KubeMachines {
    /// The port over `client`; new machines boot with `bootstrap`'s script when given.
    pub fn new(client: Client, bootstrap: Option<Bootstrap>, standby_image: String) -> Self {
        Self {
            client,
            bootstrap,
            renderer: Renderer::new(),
            standby_image,
        }
    }

    fn instances(&self) -> Api<crd::Instance> {
        Api::all(self.client.clone())
    }

    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), keys::NAMESPACE)
    }

    /// Creates the `standby` PriorityClass when the cluster has none.
    async fn ensure_priority_class(&self) -> Result<(), ClusterError> {
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        match api.get_opt(keys::STANDBY_PRIORITY_CLASS).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(e) => return Err(map_error("read PriorityClass standby", e)),
        }
        let class: PriorityClass = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": keys::STANDBY_PRIORITY_CLASS,
                "labels": {"app.kubernetes.io/managed-by": "node-manager"}},
            "value": STANDBY_PRIORITY,
            "globalDefault": false,
            "preemptionPolicy": "Never",
            "description": "standby-holder pods of NodeGroups with cloudInstances.standby: any other pod preempts them",
        }))
        .map_err(|e| ClusterError::other(format!("PriorityClass standby: {e}")).with_source(e))?;
        match api.create(&PostParams::default(), &class).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(map_error("create PriorityClass standby", e)),
        }
    }

    /// The Deployment of `holder` (see the module docs).
    fn holder_deployment(&self, holder: &StandbyHolder) -> Value {
        let t = &holder.template;
        let labels = json!(t.labels);
        let tolerations: Vec<Value> = t
            .tolerations
            .iter()
            .map(|tol| {
                let mut v = json!({
                    "key": tol.key,
                    "operator": if tol.exists { "Exists" } else { "Equal" },
                });
                if !tol.exists {
                    v["value"] = json!(tol.value);
                }
                if let Some(effect) = &tol.effect {
                    v["effect"] = json!(effect.as_str());
                }
                v
            })
            .collect();
        let requests: serde_json::Map<String, Value> = t
            .requests
            .iter()
            .map(|(k, q)| (k.clone(), json!(quantity_text(*q))))
            .collect();
        let anti: Vec<Value> = t
            .hostname_anti_affinity
            .iter()
            .map(|s| {
                json!({"labelSelector": {"matchLabels": s.match_labels.clone().unwrap_or_default()},
                    "topologyKey": keys::LABEL_HOSTNAME})
            })
            .collect();
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": holder.name(),
                "namespace": keys::NAMESPACE,
                "labels": t.labels,
                "annotations": {ANNOTATION_HOLDER_CHECKSUM: holder.checksum()},
            },
            "spec": {
                "replicas": holder.replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": t.labels},
                    "spec": {
                        "priorityClassName": t.priority_class,
                        "nodeSelector": t.node_selector,
                        "tolerations": tolerations,
                        "affinity": {"podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": anti}},
                        "topologySpreadConstraints": [{
                            "maxSkew": 1,
                            "topologyKey": keys::LABEL_TOPOLOGY_ZONE,
                            "whenUnsatisfiable": "ScheduleAnyway",
                            "labelSelector": {"matchLabels": t.labels},
                        }],
                        "terminationGracePeriodSeconds": 0,
                        "automountServiceAccountToken": false,
                        "containers": [{
                            "name": "reserve-resources",
                            "image": self.standby_image,
                            "resources": {"requests": requests},
                        }],
                    },
                },
            },
        })
    }
}

/// A quantity as the API writes it: whole units, else milli-units (`2`, `1500m`).
fn quantity_text(q: nodemgr_core::model::Quantity) -> String {
    if q.0 % 1000 == 0 {
        (q.0 / 1000).to_string()
    } else {
        format!("{}m", q.0)
    }
}

fn not_found_is_ok(result: Result<(), kube::Error>, what: &str) -> Result<(), ClusterError> {
    match result {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(map_error(what, e)),
    }
}

#[async_trait]
impl MachineApi for KubeMachines {
    async fn list_instances(&self) -> Result<Vec<Instance>, ClusterError> {
        Ok(self
            .instances()
            .list(&ListParams::default())
            .await
            .map_err(|e| map_error("list Instances", e))?
            .items
            .iter()
            .map(crd::Instance::to_core)
            .collect())
    }

    async fn create_instance(
        &self,
        instance: &NewInstance,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let machine = &instance.machine;
        let (class_kind, class_name) = instance
            .class_reference
            .as_ref()
            .map(|c| (c.kind.clone(), c.name.clone()))
            .unwrap_or_default();
        let body: crd::Instance = serde_json::from_value(json!({
            "apiVersion": "deckhouse.io/v1alpha2",
            "kind": "Instance",
            "metadata": {
                "name": machine,
                "labels": {keys::LABEL_NODE_GROUP: instance.group, keys::LABEL_TOPOLOGY_ZONE: instance.zone},
                "finalizers": [FINALIZER_INSTANCE],
                "annotations": {keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM: instance.class_checksum},
            },
            "status": {"classReference": {"kind": class_kind, "name": class_name}},
        }))
        .map_err(|e| ClusterError::other(format!("Instance {machine}: {e}")).with_source(e))?;
        match self.instances().create(&PostParams::default(), &body).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(e) => return Err(map_error(&format!("create Instance {machine}"), e)),
        }
        self.set_instance_phase(machine, MachinePhase::Pending, None, None, now)
            .await
    }

    async fn set_instance_phase(
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
            .map_err(|e| map_error(&format!("Instance {machine} status"), e))?;
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
                .map_err(|e| map_error(&format!("Instance {machine}"), e))?;
        }
        Ok(())
    }

    async fn forget_instance(&self, machine: &str) -> Result<(), ClusterError> {
        let api = self.instances();
        let patch = json!({"metadata": {"finalizers": null}});
        not_found_is_ok(
            api.patch(machine, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ()),
            &format!("Instance {machine}"),
        )?;
        not_found_is_ok(
            api.delete(machine, &DeleteParams::default())
                .await
                .map(|_| ()),
            &format!("delete Instance {machine}"),
        )
    }

    async fn record_machine_failure(
        &self,
        group: &str,
        failure: &MachineFailure,
        keep: usize,
    ) -> Result<(), ClusterError> {
        let api = Api::<crd::NodeGroup>::all(self.client.clone());
        let current = api
            .get_opt(group)
            .await
            .map_err(|e| map_error(&format!("read NodeGroup {group}"), e))?
            .map(|g| g.to_core());
        let mut failures: Vec<Value> = current
            .as_ref()
            .and_then(|g| g.status.as_ref())
            .and_then(|s| s.last_machine_failures.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|f| serde_json::to_value(f).ok())
            .collect();
        failures
            .push(serde_json::to_value(failure).map_err(|e| {
                ClusterError::other(format!("machine failure: {e}")).with_source(e)
            })?);
        let keep = keep.max(1);
        if failures.len() > keep {
            failures.drain(..failures.len() - keep);
        }
        api.patch_status(
            group,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"lastMachineFailures": failures}})),
        )
        .await
        .map(|_| ())
        .map_err(|e| map_error(&format!("NodeGroup {group} status"), e))
    }

    async fn user_data(&self, group: &NodeGroup) -> String {
        let Some(bootstrap) = &self.bootstrap else {
            return String::new();
        };
        let token = match bootstrap.tokens.for_group(group.name()) {
            Ok(token) => token,
            Err(error) => {
                tracing::warn!(group = %group.name(), error = %ErrorChain(&error), "machine created without user data");
                return String::new();
            }
        };
        let cluster = match bootstrap.cluster.current() {
            Ok(cluster) => cluster,
            Err(error) => {
                tracing::warn!(group = %group.name(), error = %ErrorChain(&error), "machine created without user data");
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
                tracing::warn!(group = %group.name(), error = %ErrorChain(&error), "cannot render the bootstrap script; machine created without user data");
                String::new()
            }
        }
    }

    async fn list_standby_holders(&self) -> Result<Vec<AppliedHolder>, ClusterError> {
        let params = ListParams::default().labels(&format!("app={}", keys::STANDBY_HOLDER_APP));
        let list = self
            .deployments()
            .list(&params)
            .await
            .map_err(|e| map_error("list standby-holder Deployments", e))?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|d| {
                let group = d.metadata.labels.as_ref()?.get("ng")?.clone();
                let checksum = d
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_HOLDER_CHECKSUM))
                    .cloned()
                    .unwrap_or_default();
                let replicas = d
                    .spec
                    .as_ref()
                    .and_then(|s| s.replicas)
                    .and_then(|r| u32::try_from(r).ok())
                    .unwrap_or(1);
                Some(AppliedHolder {
                    group,
                    replicas,
                    checksum,
                })
            })
            .collect())
    }

    async fn apply_standby_holder(&self, holder: &StandbyHolder) -> Result<(), ClusterError> {
        self.ensure_priority_class().await?;
        let name = holder.name();
        let body = self.holder_deployment(holder);
        let api = self.deployments();
        let exists = api
            .get_opt(&name)
            .await
            .map_err(|e| map_error(&format!("read Deployment {name}"), e))?
            .is_some();
        if exists {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map(|_| ())
                .map_err(|e| map_error(&format!("update Deployment {name}"), e))
        } else {
            let deployment: Deployment = serde_json::from_value(body).map_err(|e| {
                ClusterError::other(format!("Deployment {name}: {e}")).with_source(e)
            })?;
            match api.create(&PostParams::default(), &deployment).await {
                Ok(_) => Ok(()),
                // Created meanwhile: the next step compares it again.
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                Err(e) => Err(map_error(&format!("create Deployment {name}"), e)),
            }
        }
    }

    async fn delete_standby_holder(&self, group: &str) -> Result<(), ClusterError> {
        let name = nodemgr_core::ports::holder_name(group);
        not_found_is_ok(
            self.deployments()
                .delete(&name, &DeleteParams::background())
                .await
                .map(|_| ()),
            &format!("delete Deployment {name}"),
        )
    }

    async fn set_standby_status(&self, group: &str, standby: u32) -> Result<(), ClusterError> {
        Api::<crd::NodeGroup>::all(self.client.clone())
            .patch_status(
                group,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"standby": standby}})),
            )
            .await
            .map(|_| ())
            .map_err(|e| map_error(&format!("NodeGroup {group} status"), e))
    }
}

/// The controller.
pub struct MachineController {
    cluster: KubeCluster,
    cloud: Arc<dyn CloudApi>,
    records: KubeMachines,
    executor: ScalingExecutor,
    period: Duration,
    metrics: Metrics,
}

impl std::fmt::Debug for MachineController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineController").finish_non_exhaustive()
    }
}

impl MachineController {
    /// A controller over `cluster` and `cloud`.
    pub fn new(
        cluster: KubeCluster,
        cloud: Arc<dyn CloudApi>,
        settings: MachineSettings,
        metrics: Metrics,
    ) -> Self {
        // The chaos monkey's randomness: a new one each start, as Deckhouse's.
        let seed =
            u64::try_from(now().as_millis()).unwrap_or_default() ^ u64::from(std::process::id());
        let executor = ScalingExecutor::new(ScalingSettings {
            scaling: settings.scaling,
            machines: settings.config,
            classes: settings.classes,
            zones: settings.zones,
            chaos_seed: seed,
            concurrency: settings.concurrency,
        });
        Self {
            records: KubeMachines::new(
                cluster.client().clone(),
                settings.bootstrap,
                settings.standby_image,
            ),
            cluster,
            cloud,
            executor,
            period: settings.period,
            metrics,
        }
    }

    /// The executor (its desired counts).
    pub fn executor(&self) -> &ScalingExecutor {
        &self.executor
    }

    /// One pass. Returns the executor's next deadline.
    ///
    /// # Errors
    /// When the cluster or the cloud cannot be read (nothing was done).
    pub async fn pass(&mut self) -> Result<Option<Timestamp>, ClusterError> {
        let report = self
            .executor
            .step(&self.cluster, &self.records, &*self.cloud, now())
            .await
            .map_err(|e| ClusterError::unavailable(format!("{e}: {}", e.source)).with_source(e))?;
        for event in &report.events {
            tracing::info!(group = event.group().unwrap_or_default(), "{event}");
            self.count(event);
        }
        for note in &report.notes {
            tracing::debug!("{note}");
        }
        for error in &report.errors {
            tracing::warn!(error = %ErrorChain(&error), cause = %ErrorChain(&error.source), "machine action failed; retried next pass");
        }
        Ok(self.executor.next_deadline())
    }

    /// Counts `event` in `nodemgr_machine_actions_total` (and removals a disruption method
    /// started in `nodemgr_disruptions_total`, chaos victims also in
    /// `nodemgr_chaos_victims_total`).
    fn count(&self, event: &ScalingEvent) {
        let family = &self.metrics.machine_actions;
        match event {
            ScalingEvent::Ordered { command, machines } => {
                for _ in machines {
                    Metrics::action(family, command.group(), "create");
                }
            }
            ScalingEvent::RemovalStarted { command } => {
                Metrics::action(family, command.group(), "drain");
                if let ScalingCommand::RemoveNode {
                    why: Why::Disruption(reason),
                    ..
                } = command
                {
                    self.metrics.disruption(command.group(), *reason);
                }
            }
            ScalingEvent::MachineDeleted { group, .. } => Metrics::action(family, group, "delete"),
            ScalingEvent::MachineFailed { group, .. } => Metrics::action(family, group, "failure"),
            ScalingEvent::NodeDeleted { node, .. } => {
                Metrics::action(family, &self.metrics.group_of_node(node), "delete_node");
            }
            ScalingEvent::StandbyHolder { group, .. } => {
                Metrics::action(family, group, "standby_holder");
            }
            ScalingEvent::ClassStamped { .. }
            | ScalingEvent::StandbyStatus { .. }
            | ScalingEvent::Unschedulable { .. }
            | ScalingEvent::WaitingForCapacity { .. } => {}
        }
    }

    /// Runs passes until `stop`.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let period = self.period;
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
