//! The controllers node-manager runs, each a small module deciding one thing with a core policy
//! and acting through the cluster port ([`crate::cluster::KubeCluster`]):
//!
//! | controller | decides with | acts on |
//! |---|---|---|
//! | [`status`] | `nodemgr_core::group_status` | NodeGroup `status` |
//! | [`template`] | `nodemgr_core::node_template` | node labels, annotations, taints |
//! | [`update`] | `nodemgr_core::executor::UpdateExecutor` (update planner + drains) | node annotations, cordon, evictions |
//! | [`machines`] | `nodemgr_core::executor::ScalingExecutor` (bounds, surge, standby, scale-up, scale-down, chaos, machine lifecycle) | Instances, cloud machines, node removal marks, standby-holder Deployments, `status.standby`, `lastMachineFailures` |
//! | [`fencing`] | `nodemgr_core::executor::FencingExecutor` (`nodemgr_core::fencing` with the storm guard and direct-read confirmation) | pods and Nodes of silent fenced nodes |
//! | [`bootstrap_tokens`] | `nodemgr_core::bootstrap_tokens` | bootstrap token Secrets in `kube-system` |
//! | [`csr`] | `nodemgr_core::serving_certificates` | kubelet-serving CSR approvals |
//! | [`node_duties`] | `nodemgr_core::node_duties` | Static nodes' provider ID, the CSI bootstrap taint |
//! | [`master_group`] | `nodemgr_core::node_duties::master_group` | the `master` NodeGroup when absent |
//! | [`static_instances`] | `nodemgr_core::static_nodes` (driven here, not yet a shared executor) | StaticInstances, bootstrap and cleanup over SSH |
//!
//! `update`, `fencing` and `machines` drive the same executors the simulator drives
//! (docs/executors.md);
//! `machines` (with `--machines-config`) and `static_instances` (with
//! `--static-cluster-context`) are started by node-manager beside [`run`]'s controllers.
//!
//! `status` and `template` are kube-runtime `Controller`s reconciling one NodeGroup at a time,
//! woken by changes of the group or of its Nodes (and a periodic resync); `update` and
//! `fencing` decide over the whole cluster at once, so they are loops: `update` woken by the
//! watch events it decides on (debounced), at its drains' deadlines and on a period as a
//! safety net (`docs/scale.md` §3), `fencing` on a period and at its next deadline. [`run`]
//! starts the enabled ones once the caches are synced (logged as `caches synced`) and stops
//! them together.

pub mod bootstrap_tokens;
pub mod csr;
pub mod fencing;
pub mod machines;
pub mod master_group;
pub mod node_duties;
pub mod static_instances;
pub mod status;
pub mod template;
pub mod update;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use nodemgr_core::fencing::FencingConfig;
use nodemgr_core::model::{NodeType, Timestamp};
use tokio::sync::watch;

use crate::cluster::KubeCluster;
use crate::metrics::Metrics;
use crate::supervisor::{TaskEnded, TaskGroup};
use nodemgr_core::ports::ErrorChain;

/// Which controllers run and how often.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Run the NodeGroup status controller.
    pub status: bool,
    /// Run the node template controller.
    pub template: bool,
    /// Run the update controller.
    pub update: bool,
    /// Run the fencing controller.
    pub fencing: bool,
    /// Run the node duties controller (Static provider IDs, the CSI bootstrap taint).
    pub node_duties: bool,
    /// Create the `master` NodeGroup with this node type when it is absent; `None` (default)
    /// creates nothing.
    pub master_group: Option<NodeType>,
    /// Resync period of the status and template controllers. Default 30 s.
    pub resync: Duration,
    /// Period of the update controller, a safety net: it runs when a watch delivers a change
    /// it decides on and at its drains' deadlines. Default 10 s.
    pub update_period: Duration,
    /// Period of the fencing controller (it also runs at the next heartbeat deadline).
    /// Default 5 s.
    pub fencing_period: Duration,
    /// The fencing policy's settings (deadline, storm guard).
    pub fencing_config: FencingConfig,
    /// Where the cluster settings validation depends on come from (allowed taint keys,
    /// zones, …): the status controller reports a group invalid by the same settings the
    /// admission webhook refuses it by.
    pub cluster_settings: crate::settings::SettingsSource,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            status: true,
            template: true,
            update: true,
            fencing: true,
            node_duties: true,
            master_group: None,
            resync: Duration::from_secs(30),
            update_period: Duration::from_secs(10),
            fencing_period: Duration::from_secs(5),
            fencing_config: FencingConfig::default(),
            cluster_settings: crate::settings::SettingsSource::default(),
        }
    }
}

/// First retry of a failed reconcile.
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest wait between retries of an object that keeps failing.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(300);

/// Per-object exponential backoff of failed reconciles: the first retry after `base`, each
/// further failure of the same object doubles the delay up to `max`; a success resets it. So a
/// transient 409/429/5xx is retried at once, while an object that keeps failing does not hammer
/// the API server.
#[derive(Debug)]
pub struct Backoff {
    policy: nodemgr_core::backoff::Backoff,
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// A backoff starting at `base`, capped at `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            policy: nodemgr_core::backoff::Backoff::new(base, max),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = failures.entry(key.to_owned()).or_insert(0);
        let delay = self.policy.delay(*count);
        *count = count.saturating_add(1);
        delay
    }

    /// Records a success of `key` (its next failure starts again at `base`).
    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

/// The wall clock as the core's timestamp (the adapters' only clock read).
pub fn now() -> Timestamp {
    Timestamp::from_system_time(SystemTime::now())
}

/// Books a periodic controller's pass (duration and failure in the metrics, the backoff of
/// failing passes) and says how long to wait before the next one and until which core
/// deadline: `period` after a success, a growing backoff after a failure.
pub(crate) fn after_pass<E: std::error::Error>(
    controller: &str,
    metrics: &Metrics,
    backoff: &Backoff,
    period: Duration,
    started: std::time::Instant,
    result: Result<Option<Timestamp>, E>,
) -> (Duration, Option<Timestamp>) {
    metrics.reconciled(controller, started.elapsed().as_secs_f64(), result.is_err());
    match result {
        Ok(deadline) => {
            backoff.succeeded(controller);
            (period, deadline)
        }
        Err(error) => {
            tracing::warn!(controller, error = %ErrorChain(&error), "pass failed, nothing was decided; retrying");
            (backoff.failed(controller), None)
        }
    }
}

/// Sleeps until `deadline` (core time) or `period`, whichever comes first, or until `stop`.
/// Returns false when stopped.
pub(crate) async fn wait(
    period: Duration,
    deadline: Option<Timestamp>,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let mut sleep = period;
    if let Some(deadline) = deadline {
        let until = deadline.saturating_since(now());
        sleep = sleep.min(until.max(Duration::from_millis(50)));
    }
    tokio::select! {
        () = tokio::time::sleep(sleep) => !*stop.borrow(),
        _ = stop.changed() => false,
    }
}

/// What ended a controller's wait ([`wait_or_change`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The period (or the backoff) ran out.
    Period,
    /// The policy's deadline came.
    Deadline,
    /// A watch delivered a change the controller decides on.
    Change,
    /// `stop` turned true.
    Stopped,
}

/// [`wait`] that also ends when `changes` changes (when given and still fed): a controller
/// woken by watch events, its period only a safety net (`docs/scale.md` §3).
pub(crate) async fn wait_or_change(
    period: Duration,
    deadline: Option<Timestamp>,
    stop: &mut watch::Receiver<bool>,
    changes: Option<&mut watch::Receiver<u64>>,
) -> Woken {
    let mut sleep = period;
    let mut woken = Woken::Period;
    if let Some(deadline) = deadline {
        let until = deadline
            .saturating_since(now())
            .max(Duration::from_millis(50));
        if until < sleep {
            sleep = until;
            woken = Woken::Deadline;
        }
    }
    let changed = async {
        let fed = match changes {
            Some(changes) => changes.changed().await.is_ok(),
            None => false,
        };
        if !fed {
            // Not listened to, or nothing feeds it any more (the watches stopped): the
            // timers alone wake.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = tokio::time::sleep(sleep) => if *stop.borrow() { Woken::Stopped } else { woken },
        () = changed => if *stop.borrow() { Woken::Stopped } else { Woken::Change },
        _ = stop.changed() => Woken::Stopped,
    }
}

/// Sleeps `debounce` (a burst of changes is taken by one pass). Returns false when stopped.
pub(crate) async fn debounce(debounce: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(debounce) => !*stop.borrow(),
        _ = stop.changed() => false,
    }
}

/// Runs the enabled controllers until `stop` turns true, as one [`TaskGroup`]: when one of them
/// ends by itself (returns or panics), the others are stopped and this returns what ended it, so
/// that the caller restarts them or gives up (`docs/leader-election.md`).
///
/// # Errors
/// The controller task that ended without being asked to, or `caches` when the watches stopped
/// before their first complete list.
pub async fn run(
    cluster: KubeCluster,
    settings: Settings,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) -> Result<(), TaskEnded> {
    let started = std::time::Instant::now();
    tokio::select! {
        ready = cluster.wait_ready() => {
            if let Err(error) = ready {
                tracing::error!(error = %ErrorChain(&error), "the caches never filled; controllers not started");
                return Err(TaskEnded::Returned { name: "caches".into() });
            }
        }
        _ = stop.wait_for(|s| *s) => return Ok(()),
    }
    let [groups, nodes, leases, pods, pdbs] = cluster.cached().map(|(_, n)| n);
    tracing::info!(
        seconds = started.elapsed().as_secs_f64(),
        groups,
        nodes,
        leases,
        pods,
        pdbs,
        "caches synced"
    );
    let mut group = TaskGroup::new();
    let inner = group.stop_signal();
    if settings.status {
        group.spawn(
            "status",
            status::run(
                cluster.clone(),
                settings.resync,
                settings.cluster_settings.clone(),
                metrics.clone(),
                inner.clone(),
            ),
        );
    }
    if settings.template {
        group.spawn(
            "template",
            template::run(
                cluster.clone(),
                settings.resync,
                metrics.clone(),
                inner.clone(),
            ),
        );
    }
    if settings.update {
        group.spawn(
            "update",
            update::run(
                cluster.clone(),
                settings.update_period,
                metrics.clone(),
                inner.clone(),
            ),
        );
    }
    if settings.fencing {
        group.spawn(
            "fencing",
            fencing::run(
                cluster.clone(),
                settings.fencing_period,
                settings.fencing_config.clone(),
                metrics.clone(),
                inner.clone(),
            ),
        );
    }
    if settings.node_duties {
        group.spawn(
            "node-duties",
            node_duties::run(
                cluster.clone(),
                settings.resync,
                metrics.clone(),
                inner.clone(),
            ),
        );
    }
    if let Some(node_type) = settings.master_group.clone() {
        group.spawn(
            "master-group",
            master_group::run(
                cluster.client().clone(),
                node_type,
                settings.resync,
                metrics.clone(),
                inner.clone(),
            ),
        );
    }
    tracing::info!(controllers = group.len(), "controllers running");
    group.run(stop).await
}

/// What the per-NodeGroup controllers (status, template) share: the port, the metrics, the
/// resync period and the per-group retry backoff, under the controller's name.
pub(crate) struct GroupContext {
    pub(crate) name: &'static str,
    pub(crate) cluster: KubeCluster,
    pub(crate) metrics: Metrics,
    pub(crate) resync: Duration,
    pub(crate) backoff: Backoff,
    /// The API server's `major.minor` and when it was read ([`GroupContext::api_server_version`]).
    api_version: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
    pub(crate) cluster_settings: crate::settings::SettingsSource,
}

/// How long the API server's version is reused before it is read again.
const API_VERSION_TTL: Duration = Duration::from_secs(300);

impl GroupContext {
    pub(crate) fn new(
        name: &'static str,
        cluster: KubeCluster,
        metrics: Metrics,
        resync: Duration,
    ) -> std::sync::Arc<Self> {
        Self::with_cluster_settings(
            name,
            cluster,
            metrics,
            resync,
            crate::settings::SettingsSource::default(),
        )
    }

    /// [`GroupContext::new`] with the cluster settings validation reads.
    pub(crate) fn with_cluster_settings(
        name: &'static str,
        cluster: KubeCluster,
        metrics: Metrics,
        resync: Duration,
        cluster_settings: crate::settings::SettingsSource,
    ) -> std::sync::Arc<Self> {
        std::sync::Arc::new(GroupContext {
            name,
            cluster,
            metrics,
            resync,
            backoff: Backoff::new(RETRY_FIRST, RETRY_MAX),
            api_version: tokio::sync::Mutex::new(None),
            cluster_settings,
        })
    }

    /// The API server's `major.minor` version (`/version`), read at most every five minutes;
    /// `None` while it cannot be read (the status then leaves `kubernetesVersion` to the spec).
    pub(crate) async fn api_server_version(&self) -> Option<String> {
        let mut cached = self.api_version.lock().await;
        if let Some((read, version)) = cached.as_ref()
            && read.elapsed() < API_VERSION_TTL
        {
            return Some(version.clone());
        }
        match self.cluster.client().apiserver_version().await {
            Ok(info) => {
                let version = format!("{}.{}", info.major, info.minor);
                *cached = Some((std::time::Instant::now(), version.clone()));
                Some(version)
            }
            Err(error) => {
                tracing::debug!(%error, "API server version not read");
                cached.as_ref().map(|(_, v)| v.clone())
            }
        }
    }

    /// Records a reconcile of `group` that began at `started`: resets its backoff on success,
    /// observes the duration and the failure.
    pub(crate) fn finished<T>(
        &self,
        group: &str,
        started: std::time::Instant,
        result: &Result<T, nodemgr_core::ports::ClusterError>,
    ) {
        if result.is_ok() {
            self.backoff.succeeded(group);
        }
        self.metrics
            .reconciled(self.name, started.elapsed().as_secs_f64(), result.is_err());
    }
}

/// The error policy of the per-NodeGroup controllers: retry the group after its backoff.
pub(crate) fn group_error_policy(
    group: std::sync::Arc<crate::crd::NodeGroup>,
    error: &nodemgr_core::ports::ClusterError,
    ctx: std::sync::Arc<GroupContext>,
) -> kube::runtime::controller::Action {
    use kube::ResourceExt;
    let delay = ctx.backoff.failed(&group.name_any());
    tracing::warn!(controller = ctx.name, group = %group.name_any(), error = %ErrorChain(&error), retry_in = ?delay, "reconcile failed; retrying");
    kube::runtime::controller::Action::requeue(delay)
}

/// How many groups the status (and the template) controller reconciles at once.
pub(crate) const GROUP_RECONCILES: u16 = 4;

/// Runs a kube-runtime `Controller` over NodeGroups, woken by changes of a group and of the
/// Nodes labelled with it, until `stop` (the status and template controllers).
pub(crate) async fn run_for_groups<C, R, F>(
    client: kube::Client,
    ctx: std::sync::Arc<C>,
    reconcile: R,
    error_policy: fn(
        std::sync::Arc<crate::crd::NodeGroup>,
        &nodemgr_core::ports::ClusterError,
        std::sync::Arc<C>,
    ) -> kube::runtime::controller::Action,
    name: &'static str,
    mut stop: watch::Receiver<bool>,
) where
    C: Send + Sync + 'static,
    R: FnMut(std::sync::Arc<crate::crd::NodeGroup>, std::sync::Arc<C>) -> F,
    F: std::future::Future<
            Output = Result<kube::runtime::controller::Action, nodemgr_core::ports::ClusterError>,
        > + Send
        + 'static,
{
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use kube::runtime::{Controller, watcher};
    Controller::new(
        Api::<crate::crd::NodeGroup>::all(client.clone()),
        watcher::Config::default(),
    )
    // Each reconcile lists its group's Nodes: a few at a time keep the memory they hold (and
    // the API server's load) bounded when every group is due at once (`docs/scale.md` §1).
    .with_config(kube::runtime::controller::Config::default().concurrency(GROUP_RECONCILES))
    .watches(
        Api::<Node>::all(client),
        watcher::Config::default(),
        status::group_of,
    )
    .graceful_shutdown_on(async move {
        let _ = stop.wait_for(|s| *s).await;
    })
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, controller = name, "reconcile");
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_object_up_to_the_cap_and_resets_on_success() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let waits: Vec<_> = (0..6).map(|_| b.failed("a").as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert_eq!(b.failed("b"), Duration::from_secs(1), "per object");
        b.succeeded("a");
        assert_eq!(b.failed("a"), Duration::from_secs(1));
        for _ in 0..100 {
            assert!(b.failed("c") <= Duration::from_secs(10));
        }
    }
}
