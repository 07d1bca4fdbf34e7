//! The node template controller: the labels, annotations and taints of each group's
//! `nodeTemplate` on every node of the group, and removed from them once removed from the
//! template (what was applied is tracked in the node's last-applied annotation), decided by
//! [`nodemgr_core::node_template::plan_node_template`]. It also keeps the label
//! `node-manager.deckhouse.io/fencing-mode=<mode>` on nodes of groups with `spec.fencing` (the
//! fencing-agent DaemonSet selects on it) and removes it from the others. A kube-runtime
//! `Controller` over NodeGroups, woken by changes of the group and of its Nodes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::runtime::controller::Action;
use nodemgr_core::model::{FencingMode, keys};
use nodemgr_core::node_template::plan_node_template;
use nodemgr_core::ports::{
    ClusterError, EventApi, EventKind, NodeApi, NodePatch, ObjectRef, RecordedEvent,
};
use tokio::sync::watch;

use super::status::group_nodes;
use super::{GroupContext, group_error_policy, now};
use crate::cluster::KubeCluster;
use crate::convert::node_to_core;
use crate::crd::NodeGroup;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

fn fencing_mode_label(mode: Option<&FencingMode>) -> String {
    match mode {
        Some(FencingMode::Notify) => "Notify".into(),
        _ => "Watchdog".into(),
    }
}

async fn reconcile(group: Arc<NodeGroup>, ctx: Arc<GroupContext>) -> Result<Action, ClusterError> {
    let started = Instant::now();
    let result = reconcile_inner(&group, &ctx).await;
    ctx.finished(&group.name_any(), started, &result);
    result
}

async fn reconcile_inner(group: &NodeGroup, ctx: &GroupContext) -> Result<Action, ClusterError> {
    let core = group.to_core();
    let name = core.name().to_owned();
    let wanted_mode = core
        .spec
        .fencing
        .as_ref()
        .map(|f| fencing_mode_label(f.mode.as_ref()));
    let mut failed = None;
    for object in group_nodes(&ctx.cluster, &name).await? {
        let node = node_to_core(&object);
        let change = match plan_node_template(&core, &node) {
            Ok(change) => change,
            Err(error) => {
                tracing::warn!(node = %node.name, group = %name, error = %ErrorChain(&error), "node template not applied");
                continue;
            }
        };
        let mut patch = NodePatch::new();
        if let Some(change) = &change {
            patch.labels = change.labels.clone();
            patch.annotations = change.annotations.clone();
        }
        match (&wanted_mode, node.labels.get(keys::LABEL_FENCING_MODE)) {
            (Some(want), have) if have != Some(want) => {
                patch = patch.set_label(keys::LABEL_FENCING_MODE, want.clone());
            }
            (None, Some(_)) => patch = patch.remove_label(keys::LABEL_FENCING_MODE),
            _ => {}
        }
        let result = async {
            if let Some(taints) = change.as_ref().and_then(|c| c.taints.as_ref()) {
                // Guarded by the version the taints were computed from: a taint someone
                // else set meanwhile (a cordon's, the update's) is never overwritten; the
                // conflict retries the reconcile on the fresh node.
                ctx.cluster
                    .replace_node_taints(
                        &node.name,
                        taints,
                        object.metadata.resource_version.as_deref(),
                    )
                    .await?;
            }
            if !patch.is_empty() {
                ctx.cluster.patch_node(&node.name, &patch).await?;
            }
            Ok::<(), ClusterError>(())
        }
        .await;
        match result {
            Ok(()) => {
                if let Some(change) = &change {
                    tracing::info!(node = %node.name, group = %name, "node template: {}", change.summary());
                    let event = RecordedEvent {
                        regarding: ObjectRef::node(node.name.clone()),
                        kind: EventKind::Normal,
                        reason: "NodeTemplateApplied".into(),
                        message: format!("NodeGroup {name}: {}", change.summary()),
                        time: now(),
                    };
                    if let Err(error) = ctx.cluster.emit_event(&event).await {
                        tracing::debug!(node = %node.name, %error, "event not recorded");
                    }
                }
            }
            Err(error) if error.is_not_found() => {}
            Err(error) => failed = Some(error),
        }
    }
    match failed {
        Some(error) => Err(error),
        None => Ok(Action::requeue(ctx.resync)),
    }
}

/// Runs the template controller until `stop`.
pub async fn run(
    cluster: KubeCluster,
    resync: Duration,
    metrics: Metrics,
    stop: watch::Receiver<bool>,
) {
    let client = cluster.client().clone();
    let ctx = GroupContext::new("template", cluster, metrics, resync);
    super::run_for_groups(client, ctx, reconcile, group_error_policy, "template", stop).await;
}
