//! The static instance controller: drives the core's static instances executor
//! ([`StaticInstancesExecutor`]: read, plan with `nodemgr_core::static_nodes`, apply, next
//! deadline; docs/executors.md §5) over [`KubeStaticInstances`], this crate's implementation of
//! the port [`StaticInstanceApi`]. The port reads NodeGroups, Nodes, StaticInstances and
//! SSHCredentials, writes each command's status change (phase, `machineRef`, `nodeRef`, the
//! `Ready` condition, finalizer, skip-bootstrap annotation), runs bootstrap and cleanup scripts
//! over a [`RemoteShell`] in background tasks, and hands their ends to the executor.
//!
//! - **Scripts.** A bootstrap runs the group's bootstrap script rendered by
//!   [`Renderer::render`] with the cluster context of [`StaticSettings`] (read at each
//!   bootstrap from its [`ContextSource`]: the cluster's, or a fixed one) and the group's
//!   bootstrap token (from its [`TokenSource`]); a cleanup runs the group's cleanup script (the one the bootstrap
//!   installed at `/var/lib/bashible/cleanup_static_node.sh`, rendered again, so it also works
//!   when a bootstrap stopped before installing it), or, for a group that is gone, the
//!   installed script. The Node of a cleaned instance is deleted afterwards.
//! - **Host keys.** The first contact's host key fingerprint is pinned on the StaticInstance
//!   (annotation [`ANNOTATION_SSH_HOST_KEY`]); later contacts must present the same key, or the
//!   operation fails with `HostKeyChanged`. Removing the annotation accepts a new key. The
//!   shell reports the key as soon as the SSH handshake succeeded, and the next pass pins it
//!   whatever became of the operation (sudo refused, script failed, timed out, or stopped by
//!   the controller): secrets may already have gone to that server.
//! - **One operation per machine.** An operation is not started while another one runs on
//!   the same address (two StaticInstances naming one machine): it fails at once with
//!   `HostBusy` and is retried after its backoff. On the machine itself every script holds
//!   the lock file [`LOCK_PATH`] (under the instance's test root in tests), so a script of an
//!   operation nodemgr gave up on, or of another node-manager replica, is never run beside
//!   a new one; a script the controller stops (timeout, error) dies with its SSH connection.
//! - **Timeouts.** The shell's script timeout is the operation's minus the connect timeout
//!   and a reserve (`script_timeout`), so the shell normally gives up first, has the script
//!   killed and reports its output (or the busy machine) before the core's timeout fires.
//! - **Test roots.** [`RenderRoots::PerInstance`] renders every instance's scripts into
//!   `<dir>/<instance>` instead of `/` (bashible's test root): nothing on the host changes.
//! - **Failures.** A status write that fails is retried on the next pass (the core keeps the
//!   operations it started); an error stops the operation still running on the instance.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use nodemgr_core::bashible::{BootstrapOptions, RenderRoot, Renderer};
use nodemgr_core::executor::StaticInstancesExecutor;
use nodemgr_core::model::{Node, NodeGroup, SshCredentials, StaticInstance, Timestamp, keys};
use nodemgr_core::ports::{
    ClusterError, ClusterRead, EventApi, EventKind, NodeApi, ObjectRef, OperationEnd, Precondition,
    RecordedEvent, RemoteScript, RemoteShell, SshTarget, StaticInstanceApi,
};
use nodemgr_core::static_nodes::{
    CONDITION_TYPE, Cause, Failure, Operation, StaticCommand, StaticConfig, StaticSnapshot,
    machine_ref_for,
};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;

use super::bootstrap_tokens::TokenSource;
use super::{Backoff, RETRY_FIRST, after_pass, now, wait};
use crate::bashible_sources::ContextSource;
use crate::cluster::KubeCluster;
use crate::crd;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

/// Annotation holding the pinned SSH host key fingerprint (`SHA256:…`) of a StaticInstance.
pub const ANNOTATION_SSH_HOST_KEY: &str = "node-manager.deckhouse.io/ssh-host-key";

/// The lock file every bootstrap and cleanup script holds on its machine (under the render
/// root): two of them never run at once there.
pub const LOCK_PATH: &str = "/var/lock/nodemgr-static-node.lock";

/// What the shell's own script timeout leaves of an operation's timeout besides the connect
/// timeout: time for the shell to have the script killed and report (`nodemgr-ssh` waits up
/// to 10 s for the kill), and a margin.
const SHELL_RESERVE: Duration = Duration::from_secs(15);

/// The script timeout given to the shell for an operation that may take `operation` in all:
/// short enough that the shell gives up, kills the script and reports how it ended (its
/// output, or a machine busy with another script) before the core's own timeout stops
/// waiting for it; at least half of `operation`.
fn script_timeout(operation: Duration, connect: Duration) -> Duration {
    let half = operation / 2;
    operation
        .checked_sub(connect.saturating_add(SHELL_RESERVE))
        .filter(|t| *t >= half)
        .unwrap_or(half)
}

/// Where scripts put their files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderRoots {
    /// The machine's `/` (production).
    Host,
    /// `<dir>/<instance name>` on the machine (tests and dry runs).
    PerInstance(PathBuf),
}

/// What the static instance controller needs besides the cluster.
#[derive(Debug, Clone)]
pub struct StaticSettings {
    /// Period of the controller (it also runs when an operation ends and at the core's
    /// deadlines). Default 10 s.
    pub period: Duration,
    /// Timeouts and backoff of operations.
    pub config: StaticConfig,
    /// API endpoints and CA the nodes join with, read at each bootstrap.
    pub cluster: ContextSource,
    /// Where the bootstrap token nodes of a group join with comes from.
    pub bootstrap_tokens: TokenSource,
    /// Where the scripts put their files.
    pub roots: RenderRoots,
    /// Longest wait for TCP, handshake and authentication.
    pub connect_timeout: Duration,
}

/// The end of an operation, as a background task reports it.
#[derive(Debug)]
struct Finished {
    instance: String,
    operation: Operation,
    outcome: Result<(), Failure>,
    /// The host key seen, when the connection got that far.
    host_key: Option<String>,
}

/// A host key the shell saw at a handshake, reported while the operation still runs.
#[derive(Debug)]
struct HostKeySeen {
    instance: String,
    host_key: String,
}

/// An operation running in the background.
struct Running {
    task: JoinHandle<()>,
    /// `host:port` of the machine it works on.
    machine: String,
}

/// What a background operation needs.
struct Job {
    instance: String,
    operation: Operation,
    target: SshTarget,
    script: RemoteScript,
    delete_node: Option<String>,
}

fn status_patch(phase: &str, now: Timestamp, extra: Value) -> Value {
    let mut status = json!({
        "currentStatus": {"phase": phase, "lastUpdateTime": now.to_rfc3339()},
    });
    if let (Some(status), Value::Object(extra)) = (status.as_object_mut(), extra) {
        status.extend(extra);
    }
    json!({ "status": status })
}

fn node_ref(node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "name": node})
}

fn condition(status: &str, reason: &str, message: &str, now: Timestamp) -> Value {
    json!([{
        "type": CONDITION_TYPE,
        "status": status,
        "severity": if status == "True" { "Info" } else { "Error" },
        "reason": reason,
        "message": message,
        "lastTransitionTime": now.to_rfc3339(),
    }])
}

/// What the port keeps about the operations it runs (never held across an await).
struct Operations {
    running: BTreeMap<String, Running>,
    /// The group of each instance an operation was started for (the ends' `group`).
    instance_groups: BTreeMap<String, String>,
    finished_rx: mpsc::UnboundedReceiver<Finished>,
    seen_rx: mpsc::UnboundedReceiver<HostKeySeen>,
}

/// The static instances port ([`StaticInstanceApi`]) over the Kubernetes API and a
/// [`RemoteShell`]: the SSH part (scripts, host-key pinning, one operation per machine) lives
/// here, the driving loop in the core's [`StaticInstancesExecutor`].
pub struct KubeStaticInstances {
    cluster: KubeCluster,
    shell: Arc<dyn RemoteShell>,
    settings: StaticSettings,
    renderer: Renderer,
    operations: Mutex<Operations>,
    finished_tx: mpsc::UnboundedSender<Finished>,
    seen_tx: mpsc::UnboundedSender<HostKeySeen>,
    /// Signalled when an operation ends, so that the driver steps at once.
    ended: Arc<Notify>,
}

impl std::fmt::Debug for KubeStaticInstances {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeStaticInstances")
            .field("running", &self.lock().running.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The controller: the core's executor driven over [`KubeStaticInstances`].
pub struct StaticController {
    executor: StaticInstancesExecutor,
    port: KubeStaticInstances,
    period: Duration,
    metrics: Metrics,
}

impl std::fmt::Debug for StaticController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticController")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

impl StaticController {
    /// A controller over `cluster` running scripts through `shell`.
    pub fn new(
        cluster: KubeCluster,
        shell: Arc<dyn RemoteShell>,
        settings: StaticSettings,
        metrics: Metrics,
    ) -> Self {
        Self {
            executor: StaticInstancesExecutor::new(settings.config),
            period: settings.period,
            port: KubeStaticInstances::new(cluster, shell, settings),
            metrics,
        }
    }

    /// One step of the executor. Returns its next deadline.
    ///
    /// # Errors
    /// When the cluster cannot be read (nothing was done).
    pub async fn pass(&mut self) -> Result<Option<Timestamp>, ClusterError> {
        let report =
            self.executor.step(&self.port, now()).await.map_err(|e| {
                ClusterError::unavailable(format!("{e}: {}", e.source)).with_source(e)
            })?;
        for end in &report.ended {
            let result = if end.outcome.is_ok() {
                "succeeded"
            } else {
                "failed"
            };
            Metrics::action(
                &self.metrics.static_operations,
                &end.group,
                &format!("{}_{result}", end.operation.to_string().to_lowercase()),
            );
            match &end.outcome {
                Ok(()) => {
                    tracing::info!(instance = %end.instance, operation = %end.operation, "operation succeeded")
                }
                Err(failure) => {
                    tracing::warn!(instance = %end.instance, operation = %end.operation, cause = ?failure.cause, "{}", failure.message)
                }
            }
        }
        for line in &report.waiting {
            tracing::debug!("{line}");
        }
        for command in &report.applied {
            tracing::info!("{command}");
        }
        for error in &report.errors {
            tracing::warn!(command = %error.command, error = %ErrorChain(&error.source), "could not apply; the next pass decides again");
        }
        Ok(self.executor.next_deadline())
    }

    /// Runs passes until `stop`: every period, at the executor's deadlines, and as soon as an
    /// operation ends.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let period = self.period;
        let backoff = Backoff::new(RETRY_FIRST, period);
        let ended = self.port.ended.clone();
        loop {
            let started = Instant::now();
            let result = self.pass().await;
            let (next, deadline) = after_pass(
                "static_instances",
                &self.metrics,
                &backoff,
                period,
                started,
                result,
            );
            // Wake early when an operation ends; its end is taken by the next step.
            let woken = tokio::select! {
                running = wait(next, deadline, &mut stop) => running,
                () = ended.notified() => true,
            };
            if !woken || *stop.borrow() {
                break;
            }
        }
        self.port.stop_all();
    }
}

impl KubeStaticInstances {
    /// The port over `cluster`, running scripts through `shell`.
    pub fn new(
        cluster: KubeCluster,
        shell: Arc<dyn RemoteShell>,
        settings: StaticSettings,
    ) -> Self {
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        let (seen_tx, seen_rx) = mpsc::unbounded_channel();
        Self {
            cluster,
            shell,
            settings,
            renderer: Renderer::new(),
            operations: Mutex::new(Operations {
                running: BTreeMap::new(),
                instance_groups: BTreeMap::new(),
                finished_rx,
                seen_rx,
            }),
            finished_tx,
            seen_tx,
            ended: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Operations> {
        // Nothing panics while holding it; recover the guard if something did.
        self.operations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stops every running operation (their scripts die with their SSH connections).
    fn stop_all(&self) {
        for (_, running) in std::mem::take(&mut self.lock().running) {
            running.task.abort();
        }
    }

    fn instances(&self) -> Api<crd::StaticInstance> {
        Api::all(self.cluster.client().clone())
    }

    /// Pins `host_key` on the instance unless a key is pinned already (also in `instances`,
    /// so that operations started in this pass see the pin).
    async fn pin_host_key(&self, instances: &mut [StaticInstance], name: &str, host_key: &str) {
        let Some(instance) = instances
            .iter_mut()
            .find(|i| i.metadata.name.as_deref() == Some(name))
        else {
            return;
        };
        let annotations = &mut instance.metadata.annotations;
        if annotations.contains_key(ANNOTATION_SSH_HOST_KEY) {
            return;
        }
        let patch = json!({"metadata": {"annotations": {ANNOTATION_SSH_HOST_KEY: host_key}}});
        match self
            .instances()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(instance = %name, %host_key, "pinned the SSH host key");
                annotations.insert(ANNOTATION_SSH_HOST_KEY.into(), host_key.to_owned());
            }
            Err(error) => {
                tracing::warn!(instance = %name, error = %ErrorChain(&error), "could not pin the host key; it is pinned at the next contact");
            }
        }
    }

    async fn patch_status(&self, name: &str, patch: &Value) -> Result<(), ClusterError> {
        self.instances()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                ClusterError::unavailable(format!("StaticInstance {name} status: {e}"))
                    .with_source(e)
            })
    }

    /// Writes the instance's phase (with `extra` status fields) and records an event.
    #[allow(clippy::too_many_arguments)]
    async fn record(
        &self,
        name: &str,
        phase: &str,
        extra: Value,
        now: Timestamp,
        kind: EventKind,
        reason: &str,
        message: String,
    ) -> Result<(), ClusterError> {
        self.patch_status(name, &status_patch(phase, now, extra))
            .await?;
        self.event(name, kind, reason, message).await;
        Ok(())
    }

    async fn patch_metadata(&self, name: &str, patch: &Value) -> Result<(), ClusterError> {
        self.instances()
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                ClusterError::unavailable(format!("StaticInstance {name}: {e}")).with_source(e)
            })
    }

    async fn set_finalizer(
        &self,
        instance: Option<&StaticInstance>,
        name: &str,
        present: bool,
    ) -> Result<(), ClusterError> {
        let mut finalizers: Vec<String> = instance
            .map(|i| i.metadata.finalizers.clone())
            .unwrap_or_default();
        finalizers.retain(|f| f != keys::FINALIZER_STATIC_INSTANCE);
        if present {
            finalizers.push(keys::FINALIZER_STATIC_INSTANCE.into());
        }
        let mut metadata = json!({ "finalizers": finalizers });
        if let Some(version) = instance.and_then(|i| i.metadata.resource_version.clone()) {
            metadata["resourceVersion"] = json!(version);
        }
        self.patch_metadata(name, &json!({ "metadata": metadata }))
            .await
    }

    async fn event(&self, name: &str, kind: EventKind, reason: &str, message: String) {
        let _ = self
            .cluster
            .emit_event(&RecordedEvent {
                regarding: ObjectRef {
                    kind: "StaticInstance".into(),
                    namespace: String::new(),
                    name: name.to_owned(),
                },
                kind,
                reason: reason.into(),
                message,
                time: now(),
            })
            .await;
    }

    /// Stops the operation running on `name`: dropping its SSH connection kills its script.
    fn stop_operation(&self, name: &str) {
        if let Some(running) = self.lock().running.remove(name) {
            running.task.abort();
        }
    }

    fn root_for(&self, instance: &str) -> Result<RenderRoot, String> {
        match &self.settings.roots {
            RenderRoots::Host => Ok(RenderRoot::host()),
            RenderRoots::PerInstance(dir) => {
                RenderRoot::new(&dir.join(instance).to_string_lossy()).map_err(|e| e.to_string())
            }
        }
    }

    fn target(
        &self,
        instance: Option<&StaticInstance>,
        address: &str,
        credentials: Option<&&SshCredentials>,
    ) -> Result<SshTarget, Failure> {
        let credentials = credentials.ok_or_else(|| {
            Failure::new(
                Cause::CredentialsMissing,
                "the SSHCredentials does not exist",
            )
        })?;
        let pinned = instance.and_then(|i| i.metadata.annotations.get(ANNOTATION_SSH_HOST_KEY));
        let mut target = SshTarget::from_credentials(address, credentials, pinned.cloned())
            .map_err(|e| Failure::new(Cause::CredentialsInvalid, e.to_string()))?;
        target.connect_timeout = self.settings.connect_timeout;
        Ok(target)
    }

    fn bootstrap_script(
        &self,
        name: &str,
        group: Option<&&NodeGroup>,
    ) -> Result<RemoteScript, Failure> {
        let group = group.ok_or_else(|| Failure::new(Cause::Failed, "the NodeGroup is gone"))?;
        let root = self
            .root_for(name)
            .map_err(|e| Failure::new(Cause::Failed, e))?;
        let lock = format!("{}{LOCK_PATH}", root.as_str());
        let cluster = self.settings.cluster.current().map_err(|e| {
            Failure::new(
                Cause::Failed,
                format!("no cluster context to join with: {e}"),
            )
        })?;
        let rendered = self
            .renderer
            .render(
                group,
                &cluster,
                &BootstrapOptions {
                    bootstrap_token: self
                        .settings
                        .bootstrap_tokens
                        .for_group(group.name())
                        .map_err(|e| Failure::new(Cause::Failed, e.to_string()))?,
                    root,
                },
            )
            .map_err(|e| {
                Failure::new(
                    Cause::Failed,
                    format!("cannot render the bootstrap script: {e}"),
                )
            })?;
        Ok(RemoteScript {
            name: format!("bootstrap {name}"),
            body: rendered.bootstrap_script,
            args: Vec::new(),
            timeout: script_timeout(
                self.settings.config.bootstrap_timeout,
                self.settings.connect_timeout,
            ),
            lock: Some(lock),
        })
    }

    fn cleanup_script(
        &self,
        name: &str,
        group: Option<&&NodeGroup>,
    ) -> Result<RemoteScript, Failure> {
        let root = self
            .root_for(name)
            .map_err(|e| Failure::new(Cause::Failed, e))?;
        let body = match group {
            Some(group) => self.renderer.cleanup_script_of(group, &root).map_err(|e| {
                Failure::new(
                    Cause::Failed,
                    format!("cannot render the cleanup script: {e}"),
                )
            })?,
            None => format!(
                "#!/usr/bin/env bash\nscript={}\nif [ -f \"$script\" ]; then exec bash \"$script\" \"$1\"; fi\necho \"no cleanup script at $script: nothing was installed\"\n",
                nodemgr_core::bashible::escape::shell_quote(&format!(
                    "{}{}",
                    root.as_str(),
                    keys::CLEANUP_SCRIPT_PATH
                ))
            ),
        };
        Ok(RemoteScript {
            name: format!("cleanup {name}"),
            body,
            args: vec![keys::CLEANUP_SCRIPT_CONFIRMATION.into()],
            timeout: script_timeout(
                self.settings.config.cleanup_timeout,
                self.settings.connect_timeout,
            ),
            lock: Some(format!("{}{LOCK_PATH}", root.as_str())),
        })
    }

    fn start(&self, job: Job) {
        let machine = format!("{}:{}", job.target.host, job.target.port);
        let mut operations = self.lock();
        if let Some((other, _)) = operations
            .running
            .iter()
            .find(|(_, r)| r.machine == machine)
        {
            let failure = Failure::new(
                Cause::HostBusy,
                format!(
                    "StaticInstance {other} has an operation running on the same machine \
                     {machine}; two StaticInstances must not name one machine"
                ),
            );
            drop(operations);
            return self.fail_now(&job.instance, job.operation, failure);
        }
        let shell = self.shell.clone();
        let cluster = self.cluster.clone();
        let done = self.finished_tx.clone();
        let ended = self.ended.clone();
        let seen = self.seen_tx.clone();
        let name = job.instance.clone();
        let task = tokio::spawn(async move {
            let instance = job.instance.clone();
            let report = move |host_key: String| {
                let _ = seen.send(HostKeySeen {
                    instance: instance.clone(),
                    host_key,
                });
            };
            let result = shell
                .run_script_noting_host_key(&job.target, &job.script, &report)
                .await;
            let (outcome, host_key) = match result {
                Ok(run) => (Ok(()), Some(run.host_key)),
                Err(error) => (
                    Err(Failure::of_remote(&error)),
                    error.host_key().map(str::to_owned),
                ),
            };
            let outcome = match (outcome, job.delete_node) {
                (Ok(()), Some(node)) => match cluster.delete_node(&node, &Precondition::None).await
                {
                    Ok(()) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(Failure::new(
                        Cause::Failed,
                        format!("cleanup ran but Node {node} could not be deleted: {e}"),
                    )),
                },
                (outcome, _) => outcome,
            };
            let _ = done.send(Finished {
                instance: job.instance,
                operation: job.operation,
                outcome,
                host_key,
            });
            ended.notify_one();
        });
        operations.running.insert(name, Running { task, machine });
    }

    /// Starts `operation` when its target and script could be made, or reports why not as its
    /// end.
    fn start_or_fail(
        &self,
        name: &str,
        operation: Operation,
        target: Result<SshTarget, Failure>,
        script: Result<RemoteScript, Failure>,
        delete_node: Option<String>,
    ) {
        match target.and_then(|target| Ok((target, script?))) {
            Ok((target, script)) => self.start(Job {
                instance: name.to_owned(),
                operation,
                target,
                script,
                delete_node,
            }),
            Err(failure) => self.fail_now(name, operation, failure),
        }
    }

    /// Reports a failure to start an operation as its end.
    fn fail_now(&self, name: &str, operation: Operation, failure: Failure) {
        let _ = self.finished_tx.send(Finished {
            instance: name.to_owned(),
            operation,
            outcome: Err(failure),
            host_key: None,
        });
        self.ended.notify_one();
    }

    async fn apply_command(
        &self,
        command: &StaticCommand,
        snapshot: &StaticSnapshot<'_>,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let instance = snapshot
            .instances
            .iter()
            .find(|i| i.metadata.name.as_deref() == Some(command.instance()));
        let group_named = |name: &str| snapshot.groups.iter().find(|g| g.name() == name);
        let credentials_named = |name: &str| {
            snapshot
                .credentials
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
        };
        match command {
            StaticCommand::AddFinalizer { instance: name } => {
                self.set_finalizer(instance, name, true).await
            }
            StaticCommand::RemoveFinalizer { instance: name } => {
                self.set_finalizer(instance, name, false).await
            }
            StaticCommand::Bootstrap {
                instance: name,
                group,
                address,
                credentials: creds,
                attempt,
            } => {
                self.lock()
                    .instance_groups
                    .insert(name.clone(), group.clone());
                let machine_ref = serde_json::to_value(machine_ref_for(group)).unwrap_or_default();
                self.record(
                    name,
                    "Bootstrapping",
                    json!({"machineRef": machine_ref, "nodeRef": null}),
                    now,
                    EventKind::Normal,
                    "Bootstrapping",
                    command.to_string(),
                )
                .await?;
                tracing::info!(instance = %name, %group, attempt, "starting bootstrap over SSH");
                let script = self.bootstrap_script(name, group_named(group).as_ref());
                let target = self.target(instance, address, credentials_named(creds).as_ref());
                self.start_or_fail(name, Operation::Bootstrap, target, script, None);
                Ok(())
            }
            StaticCommand::Cleanup {
                instance: name,
                group,
                node,
                address,
                credentials: creds,
                ..
            } => {
                self.lock()
                    .instance_groups
                    .insert(name.clone(), group.clone());
                self.record(
                    name,
                    "Cleaning",
                    json!({}),
                    now,
                    EventKind::Normal,
                    "Cleaning",
                    command.to_string(),
                )
                .await?;
                let script = self.cleanup_script(name, group_named(group).as_ref());
                let target = self.target(instance, address, credentials_named(creds).as_ref());
                self.start_or_fail(name, Operation::Cleanup, target, script, node.clone());
                Ok(())
            }
            StaticCommand::MarkRunning {
                instance: name,
                node,
                ..
            } => {
                self.record(
                    name,
                    "Running",
                    json!({
                        "nodeRef": node_ref(node),
                        "conditions": condition("True", "Running", &format!("node {node} joined"), now),
                    }),
                    now,
                    EventKind::Normal,
                    "Running",
                    command.to_string(),
                )
                .await
            }
            StaticCommand::Adopt {
                instance: name,
                group,
                node,
            } => {
                let machine_ref = serde_json::to_value(machine_ref_for(group)).unwrap_or_default();
                self.patch_metadata(
                    name,
                    &json!({"metadata": {"annotations": {keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE: null}}}),
                )
                .await?;
                self.record(
                    name,
                    "Running",
                    json!({
                        "machineRef": machine_ref,
                        "nodeRef": node_ref(node),
                        "conditions": condition("True", "Adopted", &format!("running node {node} adopted without bootstrap"), now),
                    }),
                    now,
                    EventKind::Normal,
                    "Adopted",
                    command.to_string(),
                )
                .await
            }
            StaticCommand::Release {
                instance: name,
                remove_finalizer,
            } => {
                self.record(
                    name,
                    "Pending",
                    json!({"machineRef": null, "nodeRef": null, "conditions": []}),
                    now,
                    EventKind::Normal,
                    "Released",
                    command.to_string(),
                )
                .await?;
                if *remove_finalizer {
                    self.set_finalizer(instance, name, false).await?;
                }
                Ok(())
            }
            StaticCommand::MarkError {
                instance: name,
                reason,
                message,
            } => {
                self.stop_operation(name);
                self.record(
                    name,
                    "Error",
                    json!({"conditions": condition("False", &reason.as_str(), message, now)}),
                    now,
                    EventKind::Warning,
                    &reason.as_str(),
                    message.clone(),
                )
                .await
            }
            StaticCommand::ReturnToPending {
                instance: name,
                reason,
                message,
            } => {
                self.record(
                    name,
                    "Pending",
                    json!({
                        "machineRef": null,
                        "nodeRef": null,
                        "conditions": condition("False", &reason.as_str(), message, now),
                    }),
                    now,
                    EventKind::Warning,
                    &reason.as_str(),
                    message.clone(),
                )
                .await
            }
            StaticCommand::MarkPending { instance: name } => {
                self.patch_status(
                    name,
                    &status_patch("Pending", now, json!({"conditions": []})),
                )
                .await
            }
        }
    }
}

#[async_trait]
impl StaticInstanceApi for KubeStaticInstances {
    async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
        self.cluster.list_node_groups().await
    }

    async fn list_static_instances(&self) -> Result<Vec<StaticInstance>, ClusterError> {
        Ok(self
            .instances()
            .list(&ListParams::default())
            .await
            .map_err(|e| {
                ClusterError::unavailable(format!("listing StaticInstances: {e}")).with_source(e)
            })?
            .items
            .iter()
            .map(crd::StaticInstance::to_core)
            .collect())
    }

    async fn list_ssh_credentials(&self) -> Result<Vec<SshCredentials>, ClusterError> {
        Ok(
            Api::<crd::SSHCredentials>::all(self.cluster.client().clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| {
                    ClusterError::unavailable(format!("listing SSHCredentials: {e}")).with_source(e)
                })?
                .items
                .iter()
                .map(crd::SSHCredentials::to_core)
                .collect(),
        )
    }

    async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
        self.cluster.list_nodes().await
    }

    /// Pins the host keys seen at handshakes, then takes the reports of operations that ended
    /// (pinning the key each saw, whatever became of the operation).
    async fn take_ends(&self, instances: &mut [StaticInstance]) -> Vec<OperationEnd> {
        let (seen, finished) = {
            let mut operations = self.lock();
            let mut seen = Vec::new();
            while let Ok(s) = operations.seen_rx.try_recv() {
                seen.push(s);
            }
            let mut finished = Vec::new();
            while let Ok(done) = operations.finished_rx.try_recv() {
                operations.running.remove(&done.instance);
                let group = operations
                    .instance_groups
                    .remove(&done.instance)
                    .unwrap_or_default();
                finished.push((done, group));
            }
            (seen, finished)
        };
        for s in seen {
            self.pin_host_key(instances, &s.instance, &s.host_key).await;
        }
        let mut ends = Vec::with_capacity(finished.len());
        for (done, group) in finished {
            if let Some(host_key) = &done.host_key {
                self.pin_host_key(instances, &done.instance, host_key).await;
            }
            ends.push(OperationEnd {
                instance: done.instance,
                group,
                operation: done.operation,
                outcome: done.outcome,
            });
        }
        ends
    }

    async fn apply(
        &self,
        command: &StaticCommand,
        snapshot: &StaticSnapshot<'_>,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        self.apply_command(command, snapshot, now).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_gives_up_before_the_core() {
        let connect = Duration::from_secs(10);
        // Default bootstrap: 20 min → 20 min − 25 s.
        assert_eq!(
            script_timeout(Duration::from_secs(1200), connect),
            Duration::from_secs(1175)
        );
        // Too short to reserve everything: half of it.
        assert_eq!(
            script_timeout(Duration::from_secs(8), Duration::from_secs(2)),
            Duration::from_secs(4)
        );
        for seconds in [1_u64, 30, 60, 600, 3600] {
            let operation = Duration::from_secs(seconds);
            let t = script_timeout(operation, connect);
            assert!(t < operation && t >= operation / 2, "{seconds}: {t:?}");
        }
    }
}
