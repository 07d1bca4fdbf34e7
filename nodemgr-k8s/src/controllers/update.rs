//! The update controller: one step of the core's update executor
//! ([`nodemgr_core::executor::UpdateExecutor`]: approvals under `maxConcurrent` while the group
//! is Ready, disruption approvals by mode and window, drains with eviction retries and forced
//! deletion at the timeout) every period and at the drains' deadlines. The executor keeps its
//! drains between steps and picks up `draining` nodes after a restart, so a restart or a lost
//! leadership loses no work.

use std::time::{Duration, Instant};

use nodemgr_core::executor::{ExecutorEvent, UpdateExecutor};
use nodemgr_core::update::UpdateCommand;
use tokio::sync::watch;

use super::{Backoff, RETRY_FIRST, now, wait};
use crate::cluster::KubeCluster;
use crate::metrics::Metrics;

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

/// Runs the update executor until `stop`.
pub async fn run(
    cluster: KubeCluster,
    period: Duration,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let mut executor = UpdateExecutor::new();
    // A failed step is retried sooner than the period (0.5 s, doubling up to the period).
    let backoff = Backoff::new(RETRY_FIRST, period);
    loop {
        let started = Instant::now();
        let result = executor.step(&cluster, now()).await;
        let failed = match result {
            Ok(report) => {
                for event in &report.events {
                    tracing::info!(node = event.node(), "{event}");
                    Metrics::action(&metrics.update_actions, action_name(event));
                }
                for error in &report.errors {
                    tracing::warn!(%error, cause = %error.source, "update action failed; retried next step");
                }
                !report.errors.is_empty()
            }
            Err(error) => {
                tracing::warn!(%error, "update step could not read the cluster; retrying");
                true
            }
        };
        metrics
            .drains_active
            .set(i64::try_from(executor.drains().len()).unwrap_or(i64::MAX));
        metrics.reconciled("update", started.elapsed().as_secs_f64(), failed);
        let next = if failed {
            backoff.failed("update")
        } else {
            backoff.succeeded("update");
            period
        };
        if !wait(next, executor.next_deadline(), &mut stop).await {
            break;
        }
    }
}
