//! The fencing controller: node-manager's driver of the core's fencing executor
//! ([`FencingExecutor`], the one the simulator drives; docs/executors.md). Every node labelled `node-manager.deckhouse.io/fencing-enabled`
//! whose heartbeat (its Lease's `renewTime`, or the Ready condition's, whichever is newer) has
//! not changed for its deadline — `fencing.watchdog.timeout + kubelet staleness + margin`
//! (95 s by default), counted on this controller's clock from when it observed that heartbeat,
//! so that the node's watchdog has fired by then (see `docs/fencing.md`) — is fenced with the
//! core's plan ([`nodemgr_core::fencing::plan_fencing`]): all its pods deleted with grace
//! period 0 (UID preconditions), then, in a later pass once none is left, the Node (kept for
//! Static and CloudStatic nodes, only reported in `Notify` mode).
//!
//! It acts only on fresh, confirmed facts: while a watch is failing or the Lease watch has
//! been quiet too long ([`nodemgr_core::fencing::judge_cache`]) a pass does nothing (an event
//! and `nodemgr_fencing_actions_total{node_group="",action="paused_stale_cache"}` say so once per episode),
//! and every deletion is preceded by a direct GET of the node's Lease and Node, whose
//! heartbeat must be the one observed more than a deadline ago
//! ([`nodemgr_core::fencing::HeartbeatObserver::confirm`]). A zone, or the whole cluster,
//! where too many fenced nodes went silent together is held back by the storm guard: an event
//! and `nodemgr_fencing_storm_suppressed{zone}` (`zone="*"` for the cluster) say so, and
//! nobody there is fenced.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nodemgr_core::executor::fencing::{FencingEvent, FencingExecutor};
use nodemgr_core::fencing::{CacheHealth, FencingCommand, FencingConfig};
use nodemgr_core::model::{Node, Timestamp};
use nodemgr_core::ports::{ClusterError, NodeHealthRead};
use tokio::sync::watch;

use super::{Backoff, RETRY_FIRST, now, wait};
use crate::cluster::KubeCluster;
use crate::metrics::{Metrics, ZoneLabels};
use nodemgr_core::ports::ErrorChain;

pub use nodemgr_core::executor::fencing::CLUSTER_SCOPE;

/// What the controller keeps between passes: the executor (when it observed each node's
/// heartbeat, the zones held back, whether it is paused).
#[derive(Debug, Default)]
pub struct FencingState {
    executor: Option<FencingExecutor>,
}

/// The fencing reads over the watches' health, the Lease store and direct GETs.
#[async_trait]
impl NodeHealthRead for KubeCluster {
    fn cache_health(&self) -> CacheHealth {
        self.watch_health().cache_health()
    }

    fn lease_renewals(&self) -> BTreeMap<String, Timestamp> {
        KubeCluster::lease_renewals(self)
    }

    async fn read_node_direct(
        &self,
        name: &str,
    ) -> Result<Option<(Node, Option<Timestamp>)>, ClusterError> {
        KubeCluster::read_node_direct(self, name).await
    }
}

/// One pass: the core's fencing executor over the cluster port; its events become logs and
/// metrics. Returns the next deadline.
///
/// # Errors
/// When the cluster cannot be read (nothing was done).
pub async fn pass(
    cluster: &KubeCluster,
    config: &FencingConfig,
    metrics: &Metrics,
    state: &mut FencingState,
) -> Result<Option<Timestamp>, ClusterError> {
    let executor = state
        .executor
        .get_or_insert_with(|| FencingExecutor::new(config.clone()));
    let report = executor.step(cluster, now()).await?;
    for event in &report.events {
        match event {
            FencingEvent::Paused { .. } => {
                tracing::warn!("{event}");
                Metrics::action(&metrics.fencing_actions, "", "paused_stale_cache");
            }
            FencingEvent::Resumed => tracing::info!("{event}"),
            FencingEvent::Suppressed { group, .. } => {
                tracing::warn!("{event}");
                Metrics::action(&metrics.fencing_actions, group, "storm_suppressed");
            }
            FencingEvent::Released { scope } => {
                metrics
                    .fencing_suppressed
                    .get_or_create(&ZoneLabels {
                        zone: scope.clone(),
                    })
                    .set(0);
            }
            FencingEvent::NotConfirmed { node, .. } => {
                tracing::warn!(%node, "{event}; nothing done");
                Metrics::action(
                    &metrics.fencing_actions,
                    &metrics.group_of_node(node),
                    "not_confirmed",
                );
            }
            FencingEvent::Applied { command, .. } => {
                tracing::info!("{command}");
                let (action, node) = match command {
                    FencingCommand::DeletePods { node } => ("delete_pods", node),
                    FencingCommand::DeleteNode { node } => ("delete_node", node),
                    FencingCommand::Notify { node, .. } => ("notify", node),
                };
                Metrics::action(
                    &metrics.fencing_actions,
                    &metrics.group_of_node(node),
                    action,
                );
            }
        }
    }
    for scope in &report.suppressed {
        metrics
            .fencing_suppressed
            .get_or_create(&ZoneLabels {
                zone: scope.clone(),
            })
            .set(1);
    }
    for error in &report.errors {
        tracing::warn!(error = %ErrorChain(&error), cause = %ErrorChain(&error.source), "fencing action failed; retried next pass");
    }
    Ok(executor.next_deadline())
}

/// Runs fencing passes until `stop`.
pub async fn run(
    cluster: KubeCluster,
    period: Duration,
    config: FencingConfig,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let mut state = FencingState::default();
    // A pass that could not read the cluster is retried sooner than the period.
    let backoff = Backoff::new(RETRY_FIRST, period);
    loop {
        let started = Instant::now();
        let result = pass(&cluster, &config, &metrics, &mut state).await;
        let deadline = match &result {
            Ok(deadline) => *deadline,
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "fencing pass could not read the cluster; retrying");
                None
            }
        };
        metrics.reconciled("fencing", started.elapsed().as_secs_f64(), result.is_err());
        let next = if result.is_err() {
            backoff.failed("fencing")
        } else {
            backoff.succeeded("fencing");
            period
        };
        if !wait(next, deadline, &mut stop).await {
            break;
        }
    }
}
