//! The update controller: one step of the core's update executor
//! ([`nodemgr_core::executor::UpdateExecutor`]: approvals under `maxConcurrent` while the group
//! is Ready, disruption approvals by mode and window, drains with eviction retries and forced
//! deletion at the timeout) whenever the watches deliver a change it decides on (a node's
//! annotations, labels, taints or readiness, a NodeGroup, the configuration checksums Secret;
//! debounced by [`WAKE_DEBOUNCE`]), at the drains' deadlines, and every period as a safety net
//! (`docs/scale.md` §3). The executor keeps its drains between steps and picks up `draining`
//! nodes after a restart, so a restart or a lost leadership loses no work.
//!
//! A `RollingUpdate` replacement ([`UpdateCommand::ReplaceMachine`]) hands the node to the
//! machine controller ([`super::machines`]) the way scale-down does: it is labelled
//! `node.deckhouse.io/termination-in-progress` and annotated `draining=scale-down`, this
//! executor drains it, and the machine controller then deletes its machine while the group's
//! bounds order the replacement. Each disruption is counted once in `nodemgr_disruptions_total`
//! (`counted_disruption`).

use std::time::{Duration, Instant};

use nodemgr_core::disruption::DisruptionReason;
use nodemgr_core::executor::{ExecutorEvent, UpdateExecutor};
use nodemgr_core::model::keys;
use nodemgr_core::ports::{ClusterRead, NodeApi, NodePatch};
use nodemgr_core::update::UpdateCommand;
use tokio::sync::watch;

use super::machines::DRAIN_SOURCE_SCALE_DOWN;
use super::{Backoff, RETRY_FIRST, Woken, debounce, now, wait_or_change};
use crate::cluster::KubeCluster;
use crate::metrics::Metrics;
use nodemgr_core::ports::ErrorChain;

fn action_name(event: &ExecutorEvent) -> &'static str {
    match event {
        ExecutorEvent::Applied { command, .. } => match command {
            UpdateCommand::Approve { .. } => "approve",
            UpdateCommand::StartDrain { .. } => "start_drain",
            UpdateCommand::ApproveDisruption { .. } => "approve_disruption",
            UpdateCommand::ReplaceMachine { .. } => "replace_machine",
            UpdateCommand::Finish { .. } => "finish",
        },
        ExecutorEvent::DrainStarted { .. } => "drain_started",
        ExecutorEvent::Cordoned { .. } => "cordoned",
        ExecutorEvent::Evicted { .. } => "evicted",
        ExecutorEvent::EvictionRefused { .. } => "eviction_refused",
        ExecutorEvent::ForceDeleted { .. } => "force_deleted",
        ExecutorEvent::DrainFinished { .. } => "drain_finished",
        ExecutorEvent::DrainAbandoned { .. } => "drain_abandoned",
        ExecutorEvent::DrainedMarkRemoved { .. } => "drained_mark_removed",
    }
}

/// The disruption an applied command starts, counted once per disruption in
/// `nodemgr_disruptions_total`: a drift when its disruption is approved (the drain before it is
/// a step of the same disruption); a rolling update when the node is handed over
/// ([`hand_over_replacements`]), since `ReplaceMachine` is repeated while the node exists.
fn counted_disruption(command: &UpdateCommand) -> Option<DisruptionReason> {
    match command.disruption_reason()? {
        DisruptionReason::Drift => matches!(command, UpdateCommand::ApproveDisruption { .. })
            .then_some(DisruptionReason::Drift),
        DisruptionReason::RollingUpdate => None,
        // The scaling executor's reasons never come from an update command.
        DisruptionReason::Chaos | DisruptionReason::ClassChange => None,
    }
}

/// Starts the replacement drain of every node a `ReplaceMachine` names that is not already
/// leaving (the planner repeats the command while the node exists).
async fn hand_over_replacements(
    cluster: &KubeCluster,
    metrics: &Metrics,
    events: &[ExecutorEvent],
) {
    let replaced: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            ExecutorEvent::Applied {
                command: UpdateCommand::ReplaceMachine { node },
                ..
            } => Some(node.as_str()),
            _ => None,
        })
        .collect();
    if replaced.is_empty() {
        return;
    }
    // Fresh from the API, and written at the version read: a hand-over never rests on a cache
    // that lags the executor's own writes (a conflict is retried by the next pass).
    let Ok(nodes) = cluster.list_nodes_fresh().await else {
        return;
    };
    for node in nodes.iter().filter(|n| replaced.contains(&n.name.as_str())) {
        if node
            .labels
            .contains_key(keys::LABEL_TERMINATION_IN_PROGRESS)
        {
            continue;
        }
        let patch = NodePatch::new()
            .set_label(keys::LABEL_TERMINATION_IN_PROGRESS, "")
            .set_annotation(keys::ANNOTATION_DRAINING, DRAIN_SOURCE_SCALE_DOWN)
            .if_resource_version(&node.resource_version);
        match cluster.patch_node(&node.name, &patch).await {
            Ok(_) => metrics.disruption(
                node.group().unwrap_or_default(),
                DisruptionReason::RollingUpdate,
            ),
            Err(error) => {
                tracing::warn!(node = %node.name, error = %ErrorChain(&error), "could not hand the node over for replacement; retried");
            }
        }
    }
}

/// How long the controller waits after a watch event before its step, so that a burst of
/// changes (agents asking together, the status write that follows a node change) is taken in
/// one step (`docs/scale.md` §3).
pub const WAKE_DEBOUNCE: Duration = Duration::from_millis(100);

/// Runs the update executor until `stop`: a step at start, after every change the watches
/// report ([`KubeCluster::update_triggers`], debounced by [`WAKE_DEBOUNCE`]), at the drains'
/// deadlines and every `period` (a safety net); a failed step is retried on its backoff,
/// not on changes.
pub async fn run(
    cluster: KubeCluster,
    period: Duration,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let mut executor = UpdateExecutor::new();
    // A failed step is retried sooner than the period (0.5 s, doubling up to the period).
    let backoff = Backoff::new(RETRY_FIRST, period);
    let mut changes = cluster.update_triggers();
    let mut trigger = "start";
    loop {
        // Changes from here on wake the next step: this one may not see them.
        changes.borrow_and_update();
        let started = Instant::now();
        let result = executor.step(&cluster, now()).await;
        let (mut actions, mut fresh_reads) = (0, 0);
        let failed = match result {
            Ok(report) => {
                actions = report.events.len();
                fresh_reads = report.fresh_reads;
                for event in &report.events {
                    tracing::info!(node = event.node(), "{event}");
                    Metrics::action(
                        &metrics.update_actions,
                        &metrics.group_of_node(event.node()),
                        action_name(event),
                    );
                    match event {
                        ExecutorEvent::EvictionRefused { node, reason, .. } => {
                            metrics.drain_refused(node, reason);
                        }
                        ExecutorEvent::DrainFinished { node, .. }
                        | ExecutorEvent::DrainAbandoned { node, .. } => metrics.drain_ended(node),
                        ExecutorEvent::Applied { group, command } => {
                            if let Some(reason) = counted_disruption(command) {
                                metrics.disruption(group, reason);
                            }
                        }
                        _ => {}
                    }
                }
                hand_over_replacements(&cluster, &metrics, &report.events).await;
                for error in &report.errors {
                    tracing::warn!(error = %ErrorChain(&error), cause = %ErrorChain(&error.source), "update action failed; retried next step");
                }
                !report.errors.is_empty()
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "update step could not read the cluster; retrying");
                true
            }
        };
        metrics
            .drains_active
            .set(i64::try_from(executor.drains().len()).unwrap_or(i64::MAX));
        let seconds = started.elapsed().as_secs_f64();
        metrics.reconciled("update", seconds, failed);
        tracing::debug!(
            trigger,
            seconds,
            failed,
            actions,
            fresh_reads,
            "update step done"
        );
        let next = if failed {
            backoff.failed("update")
        } else {
            backoff.succeeded("update");
            period
        };
        let listen = (!failed).then_some(&mut changes);
        trigger = match wait_or_change(next, executor.next_deadline(), &mut stop, listen).await {
            Woken::Stopped => break,
            Woken::Change => {
                if !debounce(WAKE_DEBOUNCE, &mut stop).await {
                    break;
                }
                "change"
            }
            Woken::Deadline => "deadline",
            Woken::Period if failed => "retry",
            Woken::Period => "period",
        };
    }
}
