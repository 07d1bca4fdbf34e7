//! The fencing controller: every node labelled `node-manager.deckhouse.io/fencing-enabled`
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

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use nodemgr_core::fencing::{
    Confirmation, DirectRead, FencedNode, FencingCommand, FencingConfig, HeartbeatObserver,
    StormSuppressed, heartbeat_token, is_maintenance, judge_cache, plan_fencing,
};
use nodemgr_core::model::{NodeType, keys};
use nodemgr_core::ports::{
    ClusterRead, EventApi, EventKind, NodeApi, ObjectRef, PodApi, PodRef, Precondition,
    RecordedEvent,
};
use tokio::sync::watch;

use super::{Backoff, RETRY_FIRST, now, wait};
use crate::cluster::KubeCluster;
use crate::metrics::{Metrics, ZoneLabels};

/// What the controller keeps between passes.
#[derive(Debug, Default)]
pub struct FencingState {
    /// Zones (and `*` for the cluster) held back in the last pass.
    suppressed: BTreeSet<String>,
    /// When each node's current heartbeat was observed.
    observer: HeartbeatObserver,
    /// The last pass found the cache failing or stale.
    paused: bool,
}

/// The zone name the cluster-wide storm guard is reported under.
pub const CLUSTER_SCOPE: &str = "*";

/// One pass: plans and carries out the fencing of silent nodes. Returns the next deadline.
///
/// # Errors
/// When the cluster cannot be read (nothing was done).
pub async fn pass(
    cluster: &KubeCluster,
    config: &FencingConfig,
    metrics: &Metrics,
    state: &mut FencingState,
) -> Result<Option<nodemgr_core::model::Timestamp>, nodemgr_core::ports::ClusterError> {
    let now = now();
    let verdict = judge_cache(&cluster.watch_health().cache_health(), config);
    if !verdict.is_fresh() {
        if !state.paused {
            tracing::warn!("{verdict}");
            Metrics::action(&metrics.fencing_actions, "", "paused_stale_cache");
            let _ = cluster
                .emit_event(&RecordedEvent {
                    regarding: ObjectRef::node_group(String::new()),
                    kind: EventKind::Warning,
                    reason: "FencingPaused".into(),
                    message: verdict.to_string(),
                    time: now,
                })
                .await;
        }
        state.paused = true;
        return Ok(None);
    }
    if state.paused {
        tracing::info!("fencing resumed: the cached view is fresh again");
    }
    state.paused = false;
    let suppressed_before = &mut state.suppressed;
    let groups = cluster.list_node_groups().await?;
    let nodes = cluster.list_nodes().await?;
    let leases = cluster.lease_renewals();
    let by_name: BTreeMap<&str, _> = groups.iter().map(|g| (g.name(), g)).collect();
    // Only the pods of nodes that may be fenced (the pod cache is indexed by node: a cluster
    // without fenced groups reads no pod at all).
    let mut pods_on: BTreeMap<&str, Vec<nodemgr_core::model::Pod>> = BTreeMap::new();
    for node in &nodes {
        if node.labels.contains_key(keys::LABEL_FENCING_ENABLED) {
            pods_on.insert(&node.name, cluster.list_pods_on_node(&node.name).await?);
        }
    }
    let mut fenced = Vec::new();
    let mut uids = BTreeMap::new();
    state
        .observer
        .retain(|name| nodes.iter().any(|n| n.name == name));
    for node in &nodes {
        if !node.labels.contains_key(keys::LABEL_FENCING_ENABLED) {
            continue;
        }
        let Some(group) = node.group().and_then(|g| by_name.get(g)) else {
            continue;
        };
        let Some(settings) = group.spec.fencing.as_ref() else {
            continue;
        };
        let node_type = group
            .spec
            .node_type
            .clone()
            .unwrap_or(NodeType::CloudEphemeral);
        let observed = state.observer.observe(
            &node.name,
            heartbeat_token(node, leases.get(&node.name).copied()),
            now,
        );
        match FencedNode::from_node(
            node,
            settings,
            node_type,
            observed,
            pods_on
                .get(node.name.as_str())
                .is_some_and(|p| !p.is_empty()),
        ) {
            Ok(view) => {
                uids.insert(node.name.clone(), node.uid.clone());
                fenced.push(view);
            }
            Err(error) => {
                tracing::warn!(node = %node.name, group = %group.name(), %error, "fencing settings unreadable; node not fenced");
            }
        }
    }
    let plan = plan_fencing(&fenced, config, now);
    let mut storms = plan.suppressed.clone();
    if let Some(cluster_storm) = &plan.cluster_suppressed {
        storms.push(StormSuppressed {
            zone: CLUSTER_SCOPE.to_owned(),
            silent: cluster_storm.silent,
            total: cluster_storm.total,
        });
    }
    let suppressed_now: BTreeSet<String> = storms.iter().map(|s| s.zone.clone()).collect();
    for s in &storms {
        metrics
            .fencing_suppressed
            .get_or_create(&ZoneLabels {
                zone: s.zone.clone(),
            })
            .set(1);
        if !suppressed_before.contains(&s.zone) {
            tracing::warn!("{s}");
            let group = fenced
                .iter()
                .find(|n| n.zone == s.zone)
                .map(|n| n.group.clone())
                .unwrap_or_default();
            Metrics::action(&metrics.fencing_actions, &group, "storm_suppressed");
            let _ = cluster
                .emit_event(&RecordedEvent {
                    regarding: ObjectRef::node_group(group),
                    kind: EventKind::Warning,
                    reason: "FencingSuppressed".into(),
                    message: format!("{s}: a partition or a control-plane problem is more likely than dead nodes; nobody there is fenced"),
                    time: now,
                })
                .await;
        }
    }
    for zone in suppressed_before.difference(&suppressed_now) {
        metrics
            .fencing_suppressed
            .get_or_create(&ZoneLabels { zone: zone.clone() })
            .set(0);
    }
    *suppressed_before = suppressed_now;
    let views: BTreeMap<&str, &FencedNode> = fenced.iter().map(|n| (n.name.as_str(), n)).collect();
    for command in &plan.commands {
        if let FencingCommand::DeletePods { node } | FencingCommand::DeleteNode { node } = command {
            let Some(view) = views.get(node.as_str()) else {
                continue;
            };
            let read = match cluster.read_node_direct(node).await {
                Ok(None) => DirectRead::NodeGone,
                Ok(Some((object, lease))) => DirectRead::Node {
                    heartbeat: heartbeat_token(&object, lease),
                    maintenance: is_maintenance(&object),
                    fencing_enabled: object.labels.contains_key(keys::LABEL_FENCING_ENABLED),
                },
                Err(error) => DirectRead::Failed(error.to_string()),
            };
            match state.observer.confirm(view, &read, config, now) {
                Confirmation::Confirmed => {}
                Confirmation::Refuted(why) | Confirmation::Unconfirmed(why) => {
                    tracing::warn!(%node, %why, "fencing not confirmed by a direct read; nothing done");
                    Metrics::action(
                        &metrics.fencing_actions,
                        &metrics.group_of_node(node),
                        "not_confirmed",
                    );
                    continue;
                }
            }
        }
        tracing::info!("{command}");
        let (action, node) = match command {
            FencingCommand::DeletePods { node } => {
                for pod in pods_on.get(node.as_str()).into_iter().flatten() {
                    let pod_ref = PodRef::of(pod);
                    let result = cluster
                        .delete_pod(
                            &pod_ref,
                            Some(Duration::ZERO),
                            &Precondition::Uid(pod.uid.clone()),
                        )
                        .await;
                    if let Err(error) = result
                        && !error.is_not_found()
                    {
                        tracing::warn!(%node, pod = %pod_ref, %error, "fencing could not delete a pod; retried next pass");
                    }
                }
                ("delete_pods", node)
            }
            FencingCommand::DeleteNode { node } => {
                let uid = uids.get(node).cloned().unwrap_or_default();
                if let Err(error) = cluster.delete_node(node, &Precondition::Uid(uid)).await
                    && !error.is_not_found()
                {
                    tracing::warn!(%node, %error, "fencing could not delete the node; retried next pass");
                    continue;
                }
                ("delete_node", node)
            }
            FencingCommand::Notify { node, .. } => ("notify", node),
        };
        Metrics::action(
            &metrics.fencing_actions,
            &metrics.group_of_node(node),
            action,
        );
        let _ = cluster
            .emit_event(&RecordedEvent {
                regarding: ObjectRef::node(node.clone()),
                kind: EventKind::Warning,
                reason: match action {
                    "delete_pods" => "FencingDeletePods",
                    "delete_node" => "FencingDeleteNode",
                    _ => "FencingNotify",
                }
                .into(),
                message: command.to_string(),
                time: now,
            })
            .await;
    }
    Ok(plan.next_deadline)
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
                tracing::warn!(%error, "fencing pass could not read the cluster; retrying");
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
