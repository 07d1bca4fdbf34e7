//! The node duties controller: gives Static nodes without a provider ID `static://` and removes
//! the `node.deckhouse.io/csi-not-bootstrapped` taint once the node's `CSINode` exists, as
//! [`nodemgr_core::node_duties::plan_node_duties`] decides (docs/deckhouse.md §11).
//!
//! A kube-runtime `Controller` over Nodes (its store pruned to what the core's view reads), also
//! woken when a `CSINode` appears (it is named like its node). Only a node the cache says may be due anything is read fresh (with its `CSINode`,
//! when it carries the taint), so a cluster with nothing to do costs no reads. The patch is
//! guarded by the resourceVersion of that fresh read; a conflict retries the node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::CSINode;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use nodemgr_core::node_duties::csi_taint::CSI_NOT_BOOTSTRAPPED_TAINT;
use nodemgr_core::node_duties::{NodeFacts, plan_node_duties};
use nodemgr_core::ports::{ClusterError, NodeApi};
use tokio::sync::watch;

use super::{Backoff, RETRY_FIRST, RETRY_MAX};
use crate::cluster::{KubeCluster, map_error};
use crate::convert::node_to_core;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

/// The controller's name in metrics and logs.
const CONTROLLER: &str = "node-duties";

struct Context {
    cluster: KubeCluster,
    metrics: Metrics,
    backoff: Backoff,
    resync: Duration,
}

/// Carries out the duties `node` is due. Returns whether it patched the node.
///
/// The cached `node` only says whether anything may be due (a CSINode counts as present for
/// that); a node with something due is read fresh, decided again on that read, and patched at
/// its resourceVersion.
///
/// # Errors
/// Reading the node or its `CSINode`, or patching the node failed (a conflict included).
pub async fn reconcile_node(cluster: &KubeCluster, node: &Node) -> Result<bool, ClusterError> {
    let cached = node_to_core(node);
    let maybe_due = NodeFacts {
        csi_node_exists: true,
    };
    if plan_node_duties(&cached, maybe_due).is_none() {
        return Ok(false);
    }
    let name = cached.name;
    let fresh = Api::<Node>::all(cluster.client().clone())
        .get(&name)
        .await
        .map_err(|e| map_error(&format!("read node {name}"), e))?;
    let view = node_to_core(&fresh);
    let tainted = view
        .taints
        .iter()
        .any(|t| t.key == CSI_NOT_BOOTSTRAPPED_TAINT);
    let csi_node_exists = if tainted {
        Api::<CSINode>::all(cluster.client().clone())
            .get_opt(&name)
            .await
            .map_err(|e| map_error(&format!("read CSINode {name}"), e))?
            .is_some()
    } else {
        false
    };
    let Some(patch) = plan_node_duties(&view, NodeFacts { csi_node_exists }) else {
        return Ok(false);
    };
    cluster.patch_node(&name, &patch).await?;
    tracing::info!(
        node = %name,
        provider_id = patch.provider_id.as_deref().unwrap_or(""),
        removed_taints = ?patch.remove_taints,
        "node duties carried out"
    );
    Ok(true)
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action, ClusterError> {
    let started = Instant::now();
    let result = reconcile_node(&ctx.cluster, &node).await;
    ctx.metrics.reconciled(
        CONTROLLER,
        started.elapsed().as_secs_f64(),
        result.is_err() && !result.as_ref().is_err_and(ClusterError::is_not_found),
    );
    match result {
        Ok(_) => {
            ctx.backoff.succeeded(&node.name_any());
            Ok(Action::requeue(ctx.resync))
        }
        Err(error) if error.is_not_found() => Ok(Action::await_change()),
        Err(error) => Err(error),
    }
}

fn error_policy(node: Arc<Node>, error: &ClusterError, ctx: Arc<Context>) -> Action {
    let delay = ctx.backoff.failed(&node.name_any());
    tracing::warn!(controller = CONTROLLER, node = %node.name_any(), error = %ErrorChain(&error), retry_in = ?delay, "node duties failed; retrying");
    Action::requeue(delay)
}

/// Runs the node duties controller until `stop`.
pub async fn run(
    cluster: KubeCluster,
    resync: Duration,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let client = cluster.client().clone();
    let ctx = Arc::new(Context {
        cluster,
        metrics,
        backoff: Backoff::new(RETRY_FIRST, RETRY_MAX),
        resync,
    });
    // Its own store of Nodes, pruned as the port's is (`docs/scale.md` §1): only what
    // `node_to_core` reads is kept of each.
    let (reader, writer) = reflector::store();
    let nodes = reflector::reflector(
        writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .modify(crate::prune::node)
            .backoff(crate::watch_backoff::WatchBackoff::new()),
    )
    .applied_objects();
    Controller::for_stream(nodes, reader)
        .with_config(kube::runtime::controller::Config::default().concurrency(8))
        .watches(
            Api::<CSINode>::all(client),
            watcher::Config::default(),
            |csi: CSINode| Some(ObjectRef::<Node>::new(&csi.name_any())),
        )
        .graceful_shutdown_on(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, controller = CONTROLLER, "reconcile");
            }
        })
        .await;
}
