//! The node-health controllers of the simulator: fencing ([`FencingController`], the core's
//! fencing executor over the cluster port, as node-manager runs it: it deletes a silent node's
//! pods with grace 0, then, in a later pass once none is left, the Node, with the storm guard)
//! and the node lifecycle eviction policy ([`LifecycleController`], the core's
//! [`NodeLifecycle`], acting on the world directly: it evicts the pods of nodes unhealthy for
//! the eviction timeout, at its zones' rates). Both record what they decide in the timeline:
//!
//! | kind | meaning |
//! |---|---|
//! | `fencing.pods-deleted` | the pods of a silent fenced node deleted |
//! | `fencing.node-deleted` | the Node of a silent fenced node deleted |
//! | `fencing.notify` | `Notify` mode: a silent node reported, nothing deleted |
//! | `fencing.suppressed` | the storm guard holds fencing back in a zone (once per episode) |
//! | `fencing.not-confirmed` | a deletion the direct read did not confirm (nothing done) |
//! | `fencing.paused`, `fencing.error` | the executor paused or resumed; a step or an action failed |
//! | `lifecycle.zone-state` | a zone changed state (Normal, PartialDisruption, FullDisruption) |
//! | `lifecycle.pods-evicted` | the pods of an unhealthy node evicted |

use std::collections::BTreeSet;
use std::time::Duration;

use nodemgr_core::executor::fencing::{FencingEvent, FencingExecutor};
use nodemgr_core::fencing::{FencingCommand, FencingConfig};
use nodemgr_core::lifecycle::{LifecycleAction, LifecycleConfig, NodeHealth, NodeLifecycle};
use nodemgr_core::model::Timestamp;

use crate::cluster::{SimCluster, block_on};
use crate::controller::Controller;
use crate::scenario::{FencingSpec, LifecycleSpec};
use crate::world::World;

/// The fencing controller: the core's fencing executor ([`FencingExecutor`], the one
/// node-manager drives) over the simulated cluster port ([`SimCluster`]), every period and at
/// the plan's next deadline.
#[derive(Debug)]
pub struct FencingController {
    executor: FencingExecutor,
    period: Duration,
    next: Timestamp,
}

impl FencingController {
    /// Runs first at `start`, then every `spec.period` and at the plan's next deadline.
    pub fn new(start: Timestamp, spec: &FencingSpec) -> Self {
        FencingController {
            executor: FencingExecutor::new(FencingConfig {
                storm_threshold: spec.storm_threshold,
                storm_min_silent: spec.storm_min_silent,
                ..FencingConfig::default()
            }),
            period: spec.period.0,
            next: start,
        }
    }
}

impl Controller for FencingController {
    fn name(&self) -> &str {
        "fencing"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        let result = {
            let cluster = SimCluster::new(world);
            block_on(self.executor.step(&cluster, now))
        };
        let mut next = now + self.period;
        match result {
            Some(Ok(report)) => {
                for event in &report.events {
                    record_fencing_event(world, event);
                }
                for error in &report.errors {
                    world.record(
                        "fencing.error",
                        Some(&error.node),
                        None,
                        format!("{error}: {}", error.source),
                    );
                }
                if let Some(deadline) = self.executor.next_deadline()
                    && deadline > now
                {
                    next = next.min(deadline);
                }
            }
            Some(Err(error)) => {
                world.record("fencing.error", None, None, format!("step failed: {error}"));
            }
            None => world.record("fencing.error", None, None, "a port call never completed"),
        }
        self.next = next;
    }
}

fn record_fencing_event(world: &mut World, event: &FencingEvent) {
    match event {
        FencingEvent::Applied {
            group,
            command,
            pods_deleted,
        } => {
            let (kind, node, message) = match command {
                FencingCommand::DeletePods { node } => (
                    "fencing.pods-deleted",
                    node,
                    format!("{pods_deleted} pods of silent node {node} deleted (grace 0)"),
                ),
                FencingCommand::DeleteNode { node } => {
                    ("fencing.node-deleted", node, command.to_string())
                }
                FencingCommand::Notify { node, .. } => {
                    ("fencing.notify", node, command.to_string())
                }
            };
            world.record_in(kind, Some(group.clone()), Some(node), None, message);
        }
        FencingEvent::Suppressed { message, .. } => {
            world.record_in("fencing.suppressed", None, None, None, message.clone());
        }
        FencingEvent::NotConfirmed { node, .. } => {
            world.record("fencing.not-confirmed", Some(node), None, event.to_string());
        }
        FencingEvent::Paused { .. } | FencingEvent::Resumed | FencingEvent::Released { .. } => {
            world.record_in("fencing.paused", None, None, None, event.to_string());
        }
    }
}

/// The node lifecycle eviction controller over the world.
#[derive(Debug)]
pub struct LifecycleController {
    lifecycle: NodeLifecycle,
    period: Duration,
    next: Timestamp,
    known: BTreeSet<String>,
}

impl LifecycleController {
    /// Runs first at `start`, then every `spec.period` and at the policy's next deadline. The
    /// node monitor grace period is the scenario's heartbeat grace period.
    pub fn new(start: Timestamp, spec: &LifecycleSpec, grace: Duration) -> Self {
        LifecycleController {
            lifecycle: NodeLifecycle::new(LifecycleConfig {
                node_eviction_rate: spec.node_eviction_rate,
                secondary_node_eviction_rate: spec.secondary_node_eviction_rate,
                large_cluster_size_threshold: spec.large_cluster_size_threshold,
                unhealthy_zone_threshold: spec.unhealthy_zone_threshold,
                node_monitor_grace_period: grace,
                pod_eviction_timeout: spec.pod_eviction_timeout.0,
                ..LifecycleConfig::default()
            }),
            period: spec.period.0,
            next: start,
            known: BTreeSet::new(),
        }
    }
}

impl Controller for LifecycleController {
    fn name(&self) -> &str {
        "lifecycle"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        let present: BTreeSet<String> = world.nodes.keys().cloned().collect();
        for gone in self.known.difference(&present) {
            self.lifecycle.handle_node_removed(gone);
        }
        for n in world.nodes.values() {
            self.lifecycle.handle_node(
                &n.node.name,
                n.node.zone().unwrap_or_default(),
                NodeHealth {
                    ready: n.node.ready,
                    last_heartbeat: n.last_heartbeat,
                },
                now,
            );
        }
        self.known = present;
        while let Some(action) = self.lifecycle.poll_action(now) {
            match action {
                LifecycleAction::EvictPods { node, zone } => {
                    let pods: Vec<String> = world
                        .pods_by_node
                        .get(&node)
                        .map(|p| p.iter().cloned().collect())
                        .unwrap_or_default();
                    let mut evicted = 0;
                    for key in &pods {
                        let keep = world
                            .pods
                            .get(key)
                            .is_some_and(|p| p.pod.is_daemonset() || p.pod.is_mirror());
                        if !keep {
                            world.remove_pod(key);
                            evicted += 1;
                        }
                    }
                    world.record(
                        "lifecycle.pods-evicted",
                        Some(&node),
                        None,
                        format!("{evicted} pods of unhealthy node {node} evicted (zone {zone})"),
                    );
                }
                other => {
                    world.record_in("lifecycle.zone-state", None, None, None, other.to_string());
                }
            }
        }
        let mut next = now + self.period;
        if let Some(deadline) = self.lifecycle.next_deadline()
            && deadline > now
        {
            next = next.min(deadline);
        }
        self.next = next;
    }
}
