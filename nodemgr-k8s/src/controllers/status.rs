//! The NodeGroup status controller: for each group, `status` (nodes, ready, upToDate,
//! min/max/desired, conditions, `error` for a spec nodemgr would reject) computed by
//! [`nodemgr_core::group_status::group_status`] from a fresh list of the group's Nodes and its
//! desired configuration checksum — for CloudEphemeral groups also `instances`/`desired` from
//! the machine controller's `Instance` objects (listed fresh by label; `status.standby` is the
//! machine controller's and kept as it is) — written to the status subresource when it changed, with an
//! Event per condition that changed (`engine` and `kubernetesVersion` included; the API
//! server's version is read at most every few minutes). A
//! kube-runtime `Controller` over NodeGroups, woken by changes of the group and of Nodes
//! labelled with it, and every resync period (the checksum Secret changes without a watch).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use nodemgr_core::group_status::{MachineCounts, StatusInput, condition_transitions, group_status};
use nodemgr_core::model::{NodeType, keys};
use nodemgr_core::ports::{
    ClusterError, ClusterRead, EventApi, EventKind, ObjectRef as EventObject, RecordedEvent,
};
use nodemgr_core::scaling::{ScalingGroup, standby_count};
use nodemgr_core::validate::validate_node_group;
use tokio::sync::watch;

use super::{GroupContext, group_error_policy, now};
use crate::cluster::{KubeCluster, map_error};
use crate::convert::node_to_core;
use crate::crd::{Instance, NodeGroup};
use crate::metrics::{DeckhouseGroupLabels, GroupLabels, Metrics, UpdateStateLabels};
use crate::settings::SettingsSource;
use nodemgr_core::ports::ErrorChain;
use nodemgr_core::update::node_update_status;

/// The update states `nodemgr_update_nodes` counts, by the node annotation that marks each.
const UPDATE_STATES: [(&str, &str); 4] = [
    ("waiting", keys::ANNOTATION_WAITING_FOR_APPROVAL),
    ("approved", keys::ANNOTATION_APPROVED),
    ("disruption_required", keys::ANNOTATION_DISRUPTION_REQUIRED),
    ("draining", keys::ANNOTATION_DRAINING),
];

/// The group's nodes, read fresh from the API (the trigger may be newer than any cache).
pub(crate) async fn group_nodes(
    cluster: &KubeCluster,
    group: &str,
) -> Result<Vec<Node>, ClusterError> {
    Api::<Node>::all(cluster.client().clone())
        .list(&ListParams::default().labels(&format!("{}={group}", keys::LABEL_NODE_GROUP)))
        .await
        .map(|l| l.items)
        .map_err(|e| map_error(&format!("list nodes of group {group}"), e))
}

/// What the machine layer says of a CloudEphemeral group: the counts of its `Instance`
/// objects (`None` when it has none, [`MachineCounts::of_instances`]), listed fresh by label.
/// Other node types have none.
async fn machine_counts(
    cluster: &KubeCluster,
    group: &nodemgr_core::NodeGroup,
) -> Result<Option<MachineCounts>, ClusterError> {
    if group.spec.node_type != Some(NodeType::CloudEphemeral) {
        return Ok(None);
    }
    let name = group.name();
    let by_group = ListParams::default().labels(&format!("{}={name}", keys::LABEL_NODE_GROUP));
    let instances: Vec<_> = Api::<Instance>::all(cluster.client().clone())
        .list(&by_group)
        .await
        .map_err(|e| map_error(&format!("list the Instances of group {name}"), e))?
        .items
        .iter()
        .map(Instance::to_core)
        .collect();
    Ok(MachineCounts::of_instances(&instances))
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
    let nodes: Vec<_> = group_nodes(&ctx.cluster, &name)
        .await?
        .iter()
        .map(node_to_core)
        .collect();
    let checksums = ctx.cluster.configuration_checksums().await?;
    let machines = machine_counts(&ctx.cluster, &core).await?;
    let settings = match ctx.cluster_settings.read(ctx.cluster.client()).await {
        Ok(settings) => settings,
        Err(error) => {
            tracing::warn!(error = %ErrorChain(&error), "cluster settings unreadable; validating with the flags'");
            ctx.cluster_settings.flags.clone()
        }
    };
    let errors = validate_node_group(&core, &settings.validation);
    let error = (!errors.is_empty()).then(|| {
        errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect::<Vec<_>>()
            .join("; ")
    });
    let api_server_version = ctx.api_server_version().await;
    let status = group_status(&StatusInput {
        group: &core,
        nodes: nodes.iter().collect(),
        desired_checksum: checksums.get(&name).map(String::as_str),
        cloud_zones: &[],
        machines,
        // Written by the machine controller (the scaling executor's standby); kept here.
        standby: core.status.as_ref().and_then(|s| s.standby),
        api_server_version: api_server_version.as_deref(),
        error: error.as_deref(),
        previous: core.status.as_ref(),
        now: now(),
    });
    ctx.metrics.group_seen(&name);
    if core.spec.node_type == Some(NodeType::CloudEphemeral) {
        let scaling = ScalingGroup::new(&core, &[], &[]);
        match standby_count(&scaling) {
            Ok(count) => ctx.metrics.standby_desired(&name, count),
            Err(error) => tracing::debug!(group = %name, %error, "standby count unreadable"),
        }
    }
    publish_deckhouse_metrics(
        &ctx.metrics,
        &core,
        &nodes,
        &status,
        checksums.get(&name).map_or("", String::as_str),
    );
    let labels = GroupLabels {
        group: name.clone(),
    };
    ctx.metrics
        .group_nodes
        .get_or_create(&labels)
        .set(status.nodes.unwrap_or(0));
    ctx.metrics
        .group_ready
        .get_or_create(&labels)
        .set(status.ready.unwrap_or(0));
    ctx.metrics
        .group_up_to_date
        .get_or_create(&labels)
        .set(status.up_to_date.unwrap_or(0));
    for (state, key) in UPDATE_STATES {
        let count = nodes
            .iter()
            .filter(|n| n.annotations.contains_key(key))
            .count();
        ctx.metrics
            .update_nodes
            .get_or_create(&UpdateStateLabels {
                group: name.clone(),
                state: state.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    if core.status.as_ref() != Some(&status) {
        ctx.cluster.patch_group_status(&name, &status).await?;
        tracing::debug!(group = %name, nodes = status.nodes, ready = status.ready, "status written");
        // One Event per condition that changed, raised once the new status is stored (a
        // failed write raises nothing, and its retry compares with the stored status again).
        for transition in condition_transitions(core.status.as_ref(), &status) {
            let event = RecordedEvent {
                regarding: EventObject::node_group(name.clone()),
                kind: if transition.warning {
                    EventKind::Warning
                } else {
                    EventKind::Normal
                },
                reason: transition.type_.clone(),
                message: transition.message.clone(),
                time: now(),
            };
            if let Err(error) = ctx.cluster.emit_event(&event).await {
                tracing::debug!(group = %name, %error, "condition event not recorded");
            }
        }
    }
    Ok(Action::requeue(ctx.resync))
}

/// Sets Deckhouse's per-group gauges and each node's `node_group_node_status` from the
/// group's fresh `status` and nodes.
fn publish_deckhouse_metrics(
    metrics: &Metrics,
    group: &nodemgr_core::NodeGroup,
    nodes: &[nodemgr_core::model::Node],
    status: &nodemgr_core::model::NodeGroupStatus,
    desired_checksum: &str,
) {
    let name = group.name();
    let labels = DeckhouseGroupLabels {
        node_group_name: name.to_owned(),
    };
    let gauges = &metrics.d8_group;
    for (family, value) in [
        (&gauges.ready, status.ready),
        (&gauges.nodes, status.nodes),
        (&gauges.instances, status.instances),
        (&gauges.desired, status.desired),
        (&gauges.min, status.min),
        (&gauges.max, status.max),
        (&gauges.up_to_date, status.up_to_date),
        (&gauges.standby, status.standby),
        (&gauges.has_errors, Some(i64::from(status.error.is_some()))),
    ] {
        family.get_or_create(&labels).set(value.unwrap_or(0));
    }
    for node in nodes {
        metrics.node_seen(
            &node.name,
            name,
            node_update_status(group, node, desired_checksum),
        );
    }
    let present: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    metrics.nodes_gone(name, &present);
}

/// Maps a Node to the NodeGroup it belongs to.
pub(crate) fn group_of(node: Node) -> Option<ObjectRef<NodeGroup>> {
    node.labels()
        .get(keys::LABEL_NODE_GROUP)
        .map(|g| ObjectRef::new(g))
}

/// Runs the status controller until `stop`.
/// `cluster_settings` are the settings validation reads (the admission webhook's).
pub async fn run(
    cluster: KubeCluster,
    resync: Duration,
    cluster_settings: SettingsSource,
    metrics: Metrics,
    stop: watch::Receiver<bool>,
) {
    let client = cluster.client().clone();
    let ctx =
        GroupContext::with_cluster_settings("status", cluster, metrics, resync, cluster_settings);
    super::run_for_groups(client, ctx, reconcile, group_error_policy, "status", stop).await;
}
