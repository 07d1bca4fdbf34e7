//! The node-health controllers of the simulator: fencing ([`FencingController`], the core's
//! [`plan_fencing`] with its storm guard) and the node lifecycle eviction policy
//! ([`LifecycleController`], the core's [`NodeLifecycle`]), stepped on the virtual clock and
//! acting on the world directly, as a controller on the cluster port would: fencing deletes a
//! silent node's pods (grace 0), then, in a later pass once none is left, the Node; the
//! lifecycle controller evicts the pods of nodes unhealthy for the eviction timeout, at its
//! zones' rates. Both record what they decide in the timeline:
//!
//! | kind | meaning |
//! |---|---|
//! | `fencing.pods-deleted` | the pods of a silent fenced node deleted |
//! | `fencing.node-deleted` | the Node of a silent fenced node deleted |
//! | `fencing.notify` | `Notify` mode: a silent node reported, nothing deleted |
//! | `fencing.suppressed` | the storm guard holds fencing back in a zone (once per episode) |
//! | `lifecycle.zone-state` | a zone changed state (Normal, PartialDisruption, FullDisruption) |
//! | `lifecycle.pods-evicted` | the pods of an unhealthy node evicted |

use std::collections::BTreeSet;
use std::time::Duration;

use nodemgr_core::fencing::{
    Confirmation, DirectRead, FencedNode, FencingCommand, FencingConfig, HeartbeatObserver,
    heartbeat_token, is_maintenance, plan_fencing,
};
use nodemgr_core::lifecycle::{LifecycleAction, LifecycleConfig, NodeHealth, NodeLifecycle};
use nodemgr_core::model::{NodeType, Timestamp, keys};

use crate::controller::Controller;
use crate::scenario::{FencingSpec, LifecycleSpec};
use crate::world::World;

/// The fencing controller over the world.
#[derive(Debug)]
pub struct FencingController {
    config: FencingConfig,
    period: Duration,
    next: Timestamp,
    suppressed: BTreeSet<String>,
    observer: HeartbeatObserver,
}

impl FencingController {
    /// Runs first at `start`, then every `spec.period` and at the plan's next deadline.
    pub fn new(start: Timestamp, spec: &FencingSpec) -> Self {
        FencingController {
            config: FencingConfig {
                storm_threshold: spec.storm_threshold,
                storm_min_silent: spec.storm_min_silent,
                ..FencingConfig::default()
            },
            period: spec.period.0,
            next: start,
            suppressed: BTreeSet::new(),
            observer: HeartbeatObserver::new(),
        }
    }

    fn view(&mut self, world: &World, now: Timestamp) -> Vec<FencedNode> {
        let mut out = Vec::new();
        for n in world.nodes.values() {
            if !n.node.labels.contains_key(keys::LABEL_FENCING_ENABLED) {
                continue;
            }
            let Some(group) = world.groups.get(&n.group) else {
                continue;
            };
            let Some(fencing) = group.group.spec.fencing.as_ref() else {
                continue;
            };
            let has_pods = world
                .pods_by_node
                .get(&n.node.name)
                .is_some_and(|p| !p.is_empty());
            let node_type = group
                .group
                .spec
                .node_type
                .clone()
                .unwrap_or(NodeType::CloudEphemeral);
            let observed = self
                .observer
                .observe(&n.node.name, heartbeat_token(&n.node, None), now);
            if let Ok(view) = FencedNode::from_node(&n.node, fencing, node_type, observed, has_pods)
            {
                out.push(view);
            }
        }
        out
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
        self.observer.retain(|name| world.nodes.contains_key(name));
        let view = self.view(world, now);
        let plan = plan_fencing(&view, &self.config, now);
        let mut suppressed: BTreeSet<String> =
            plan.suppressed.iter().map(|s| s.zone.clone()).collect();
        for s in &plan.suppressed {
            if !self.suppressed.contains(&s.zone) {
                world.record_in("fencing.suppressed", None, None, None, s.to_string());
            }
        }
        if let Some(storm) = &plan.cluster_suppressed {
            if !self.suppressed.contains("*") {
                world.record_in("fencing.suppressed", None, None, None, storm.to_string());
            }
            suppressed.insert("*".to_owned());
        }
        self.suppressed = suppressed;
        for command in &plan.commands {
            // The world is the API: its state is what a direct read returns.
            if let FencingCommand::DeletePods { node } | FencingCommand::DeleteNode { node } =
                command
            {
                let read = match world.nodes.get(node) {
                    None => DirectRead::NodeGone,
                    Some(n) => DirectRead::Node {
                        heartbeat: heartbeat_token(&n.node, None),
                        maintenance: is_maintenance(&n.node),
                        fencing_enabled: n.node.labels.contains_key(keys::LABEL_FENCING_ENABLED),
                    },
                };
                let Some(fenced) = view.iter().find(|v| &v.name == node) else {
                    continue;
                };
                if self.observer.confirm(fenced, &read, &self.config, now)
                    != Confirmation::Confirmed
                {
                    continue;
                }
            }
            match command {
                FencingCommand::DeletePods { node } => {
                    let pods: Vec<String> = world
                        .pods_by_node
                        .get(node)
                        .map(|p| p.iter().cloned().collect())
                        .unwrap_or_default();
                    for key in &pods {
                        world.remove_pod(key);
                    }
                    world.record(
                        "fencing.pods-deleted",
                        Some(node),
                        None,
                        format!(
                            "{} pods of silent node {node} deleted (grace 0)",
                            pods.len()
                        ),
                    );
                }
                FencingCommand::DeleteNode { node } => {
                    world.record(
                        "fencing.node-deleted",
                        Some(node),
                        None,
                        command.to_string(),
                    );
                    world.remove_node(node);
                }
                FencingCommand::Notify { node, .. } => {
                    world.record("fencing.notify", Some(node), None, command.to_string());
                }
            }
        }
        let mut next = now + self.period;
        if let Some(deadline) = plan.next_deadline
            && deadline > now
        {
            next = next.min(deadline);
        }
        self.next = next;
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
                    last_heartbeat: n.node.last_heartbeat,
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
