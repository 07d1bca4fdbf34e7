//! The simulated cluster: node groups, nodes with heartbeats and readiness, pods and their
//! owners, PodDisruptionBudgets, the node agent (bashible) applying approved updates, and the
//! injected failures. Everything happens at the virtual time the run loop hands in; nothing
//! reads a clock, and the only randomness is the seeded [`SimRng`].
//!
//! Controllers ([`crate::Controller`]) act on the world directly (`&mut World`) or through the
//! cluster port ([`crate::SimCluster`]), as the update executor does.
//!
//! An instant costs what changes in it, not the cluster's size: the world indexes its agents'
//! deadlines, terminating pods, scripted or dark nodes and Lease phases, lets act only the
//! agents that are due, and refreshes readiness only where it can change. Code that changes
//! those fields directly calls [`World::invalidate_indexes`] (the run loop does it for the
//! controllers it did not install and for [`crate::Simulation::world_mut`]);
//! `nodemgr-sim/README.md`, "Performance", tells what dominated and what changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_core::agent::SimulatedGenerations;
use nodemgr_core::model::{
    LabelSelector, Node, NodeGroup, ObjectMeta, Owner, Pod, PodDisruptionBudget, PodPhase,
    Quantity, Timestamp, keys,
};

use crate::agent::SimAgent;
use crate::rng::SimRng;
use crate::scenario::{
    AgentSpec, ErrorKind, HeartbeatSpec, Operation, PdbSpec, Scenario, WorkloadKind, WorkloadSpec,
    group_spec,
};
use crate::timeline::{Timeline, TimelineEvent};

/// A node group as the simulator keeps it.
#[derive(Debug, Clone)]
pub struct SimGroup {
    /// The NodeGroup (name and spec).
    pub group: NodeGroup,
    /// Zones for new nodes, round-robin.
    pub zones: Vec<String>,
    /// Allocatable resources of new nodes.
    pub capacity: BTreeMap<String, Quantity>,
    /// Extra labels of new nodes.
    pub labels: BTreeMap<String, String>,
    /// Configuration generations (core's simulated bundles); the last one is desired.
    pub generations: SimulatedGenerations,
    /// Index of the next node name (`<group>-<n>`).
    pub next_index: usize,
}

impl SimGroup {
    /// The desired checksum (latest generation).
    pub fn desired(&self) -> &str {
        &self.generations.desired().checksum
    }

    /// What moving from `checksum` to the desired one does: the strongest impact of the
    /// generations in between (a disruptive change in between stays disruptive).
    pub fn impact_from(&self, checksum: Option<&str>) -> ImpactKind {
        self.generations.impact_from(checksum)
    }
}

/// A node as the simulator keeps it.
#[derive(Debug, Clone)]
pub struct SimNode {
    /// The node view (labels, annotations, taints, `unschedulable`); `ready` is kept current
    /// by the run loop, the heartbeat is [`SimNode::last_heartbeat`]. Shared with the views
    /// the simulated API hands out: change it with `Arc::make_mut` (which copies it when it is
    /// shared), so that an unchanged node stays the same `Arc` ([`crate::api`]).
    pub node: Arc<Node>,
    /// The node's last Lease renewal, kept current by the run loop (outside
    /// [`SimNode::node`]: a renewal is not a change of the Node; views get it folded in).
    pub last_heartbeat: Option<Timestamp>,
    /// Group name.
    pub group: String,
    /// Zone.
    pub zone: String,
    /// The node agent (core's state machine, its state files, the step it runs).
    pub agent: SimAgent,
    /// Extra apply delay (a slow agent).
    pub extra_agent_delay: Duration,
    /// Scripted `Ready=False` until then (heartbeats continue).
    pub not_ready_until: Option<Timestamp>,
    /// Dark (no heartbeats, unreachable) since then …
    pub dark_since: Option<Timestamp>,
    /// … until then (`None` = for good once dark).
    pub dark_until: Option<Timestamp>,
    /// Offset of the node's Lease renewals within the lease period.
    pub lease_phase: Duration,
}

impl SimNode {
    /// The node with its heartbeat folded in (unversioned).
    pub fn view(&self) -> Node {
        let mut view = Node::clone(&self.node);
        view.last_heartbeat = self.last_heartbeat;
        view
    }

    /// Whether the node is dark at `now`.
    pub fn is_dark(&self, now: Timestamp) -> bool {
        self.dark_since.is_some_and(|s| s <= now) && self.dark_until.is_none_or(|u| now < u)
    }
}

/// A pod as the simulator keeps it.
#[derive(Debug, Clone)]
pub struct SimPod {
    /// The pod view.
    pub pod: Pod,
    /// Terminating (evicted with a grace period) until then.
    pub terminating_until: Option<Timestamp>,
    /// Index of the workload in the scenario, when it came from one.
    pub workload: Option<usize>,
}

/// A pod to (re)create once its time comes.
#[derive(Debug, Clone)]
pub struct PendingPod {
    /// When to try to schedule it.
    pub at: Timestamp,
    /// The workload.
    pub workload: usize,
    /// Its name.
    pub name: String,
}

/// A window of injected API errors.
#[derive(Debug, Clone)]
pub struct ApiFault {
    /// From.
    pub from: Timestamp,
    /// Until (exclusive).
    pub until: Timestamp,
    /// Operations affected (empty = all).
    pub operations: Vec<Operation>,
    /// The error.
    pub error: ErrorKind,
}

/// A window of refused evictions.
#[derive(Debug, Clone)]
pub struct EvictionRefusal {
    /// From.
    pub from: Timestamp,
    /// Until (exclusive); `None` = to the end.
    pub until: Option<Timestamp>,
    /// One pod (`namespace/name`), or
    pub pod: Option<String>,
    /// pods whose labels match.
    pub selector: BTreeMap<String, String>,
}

/// Counters a property or a benchmark looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Eviction requests.
    pub eviction_requests: u64,
    /// Evictions accepted.
    pub evictions: u64,
    /// Evictions refused (PDB or injected).
    pub evictions_refused: u64,
    /// Eviction requests for DaemonSet-owned or mirror pods (a drain must never make one).
    pub daemonset_eviction_requests: u64,
    /// Pods deleted with the delete API.
    pub pod_deletions: u64,
    /// Nodes deleted.
    pub node_deletions: u64,
    /// Calls failed by injected API errors.
    pub api_errors: u64,
    /// Updates the agents completed.
    pub updates_completed: u64,
    /// Disruptions (reboots) the agents went through.
    pub disruptions: u64,
}

/// The whole simulated cluster.
#[derive(Debug, Clone)]
pub struct World {
    /// Virtual now.
    pub now: Timestamp,
    /// Scenario start.
    pub start: Timestamp,
    /// Seeded randomness.
    pub rng: SimRng,
    /// Groups by name.
    pub groups: BTreeMap<String, SimGroup>,
    /// Nodes by name.
    pub nodes: BTreeMap<String, SimNode>,
    /// Pods by `namespace/name`.
    pub pods: BTreeMap<String, SimPod>,
    /// Pod keys by node name.
    pub pods_by_node: BTreeMap<String, BTreeSet<String>>,
    /// Pods waiting to be (re)created.
    pub pending_pods: Vec<PendingPod>,
    /// Workloads of the scenario.
    pub workloads: Vec<WorkloadSpec>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PdbSpec>,
    /// Injected API errors.
    pub api_faults: Vec<ApiFault>,
    /// Injected eviction refusals.
    pub refusals: Vec<EvictionRefusal>,
    /// Nodes to create (`(when, group)`), for replaced machines.
    pub pending_nodes: Vec<(Timestamp, String)>,
    /// Agent wake-ups: `(when, node)`.
    pub agenda: BTreeSet<(Timestamp, String)>,
    /// Agent settings.
    pub agent: AgentSpec,
    /// Heartbeat settings.
    pub heartbeat: HeartbeatSpec,
    /// Delay before a deleted owned pod comes back.
    pub reschedule_delay: Duration,
    /// Time to provision a replacement machine.
    pub provision_delay: Duration,
    /// Kubernetes events recorded through the port.
    pub recorded_events: Vec<nodemgr_core::ports::RecordedEvent>,
    /// Counters.
    pub stats: SimStats,
    /// What happened.
    pub timeline: Timeline,
    /// Pods due for (re)creation stay in `pending_pods` for a scheduler controller (the
    /// scaling controller, [`crate::scaling`]) instead of being placed by [`World::pick_node`].
    pub scheduler_external: bool,
    /// Node resourceVersions and the lagging watch cache the cluster port reads from.
    pub api: crate::api::SimApiServer,
    /// The Instance resources of machines (the machine port, [`crate::cluster`]).
    pub instances: BTreeMap<String, nodemgr_core::model::Instance>,
    /// The standby-holder Deployments by group (the machine port); the scaling controller
    /// plays their ReplicaSet controller.
    pub standby_holders: BTreeMap<String, nodemgr_core::ports::StandbyHolder>,
    uid_counter: u64,
    /// What the run loop needs at each instant without scanning every node and pod.
    index: WorldIndex,
}

/// Indexes the world keeps next to its nodes and pods so that an instant costs what changes
/// in it rather than the cluster's size (`nodemgr-sim/README.md`, "Performance"). The world's
/// own methods keep them current; a change made to the fields directly (a node's agent or
/// fault fields, a pod's `terminating_until`) must be followed by
/// [`World::invalidate_indexes`], which the run loop does after every controller it did not
/// install itself and whenever it hands out the world mutably.
#[derive(Debug, Clone, Default)]
struct WorldIndex {
    /// Each node's agent deadline as indexed (`SimAgent::next_deadline`).
    agent_deadline: BTreeMap<String, Timestamp>,
    /// `(deadline, node)` for every node whose agent has one.
    agent_due: BTreeSet<(Timestamp, String)>,
    /// `(until, pod key)` of terminating pods; an entry whose pod is gone or terminates at
    /// another time is stale and skipped.
    terminating: BTreeSet<(Timestamp, String)>,
    /// Nodes with a scripted readiness or darkness: refreshed at every instant.
    special: BTreeSet<String>,
    /// Nodes added since the last readiness refresh.
    fresh: BTreeSet<String>,
    /// Every node's Lease phase in milliseconds, sorted, for the renewals between instants.
    phases: Vec<(i64, String)>,
    /// The instant heartbeats were last brought up to date (`None`: all are due).
    heartbeats_at: Option<Timestamp>,
    /// Node names by group (`SimNode::group`), for placing a group's pods.
    by_group: BTreeMap<String, BTreeSet<String>>,
    /// Set by [`World::invalidate_indexes`]: rebuilt, and every node refreshed, before use.
    stale: bool,
}

fn parse_capacity(map: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    map.iter()
        .filter_map(|(k, v)| Quantity::parse(v).ok().map(|q| (k.clone(), q)))
        .collect()
}

impl World {
    /// Builds the world a scenario starts from, at its start time. The scenario must have
    /// passed [`Scenario::from_yaml`]'s checks.
    pub fn from_scenario(scenario: &Scenario, seed: u64) -> Self {
        let start = Timestamp::from_secs(scenario.start.0);
        let mut world = World {
            now: start,
            start,
            rng: SimRng::new(seed),
            groups: BTreeMap::new(),
            nodes: BTreeMap::new(),
            pods: BTreeMap::new(),
            pods_by_node: BTreeMap::new(),
            pending_pods: Vec::new(),
            workloads: scenario.workloads.clone(),
            pdbs: scenario.pdbs.clone(),
            api_faults: Vec::new(),
            refusals: Vec::new(),
            pending_nodes: Vec::new(),
            agenda: BTreeSet::new(),
            agent: scenario.agent.clone(),
            heartbeat: scenario.heartbeat.clone(),
            reschedule_delay: scenario.reschedule_delay.0,
            provision_delay: scenario.provision_delay.0,
            recorded_events: Vec::new(),
            stats: SimStats::default(),
            timeline: Timeline {
                start,
                events: Vec::new(),
            },
            scheduler_external: false,
            api: crate::api::SimApiServer::default(),
            instances: BTreeMap::new(),
            standby_holders: BTreeMap::new(),
            uid_counter: 0,
            index: WorldIndex::default(),
        };
        for (i, g) in scenario.groups.iter().enumerate() {
            let spec = group_spec(&g.spec, &format!("groups[{i}].spec")).unwrap_or_default();
            let group = NodeGroup {
                api_version: "deckhouse.io/v1".into(),
                kind: "NodeGroup".into(),
                metadata: ObjectMeta {
                    name: Some(g.name.clone()),
                    ..ObjectMeta::default()
                },
                spec,
                status: None,
            };
            world.groups.insert(
                g.name.clone(),
                SimGroup {
                    group,
                    zones: g.zones.clone(),
                    capacity: parse_capacity(&g.capacity),
                    labels: g.labels.clone(),
                    generations: SimulatedGenerations::new(
                        &g.name,
                        &format!("{}-gen0", g.name),
                        ImpactKind::None,
                    ),
                    next_index: 0,
                },
            );
            for _ in 0..g.nodes {
                world.add_node(&g.name, start);
            }
        }
        // Workloads: per-node ones on each node of their group, the others spread.
        for (wi, w) in scenario.workloads.iter().enumerate() {
            if w.kind.per_node() {
                let nodes: Vec<String> = world
                    .nodes
                    .values()
                    .filter(|n| w.group.as_deref().is_none_or(|g| g == n.group))
                    .map(|n| n.node.name.clone())
                    .collect();
                for node in nodes {
                    let name = format!("{}-{node}", w.name);
                    world.bind_pod(wi, name, &node);
                }
            } else {
                for r in 0..w.replicas {
                    let name = format!("{}-{r}", w.name);
                    match world.pick_node(wi) {
                        Some(node) => world.bind_pod(wi, name, &node),
                        None => world.pending_pods.push(PendingPod {
                            at: start,
                            workload: wi,
                            name,
                        }),
                    }
                }
            }
        }
        world.timeline.events.clear();
        world.rebuild_indexes();
        world
    }

    fn next_uid(&mut self, prefix: &str) -> String {
        self.uid_counter += 1;
        format!("{prefix}-{:06}", self.uid_counter)
    }

    /// Appends a timeline event at the current virtual time.
    pub fn record(
        &mut self,
        kind: &str,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        let group = node.and_then(|n| self.nodes.get(n).map(|s| s.group.clone()));
        self.record_in(kind, group, node, pod, message);
    }

    /// Appends a timeline event with an explicit group.
    pub fn record_in(
        &mut self,
        kind: &str,
        group: Option<String>,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        self.timeline.events.push(TimelineEvent {
            at_ms: self.now.as_millis() - self.start.as_millis(),
            kind: kind.to_owned(),
            node: node.map(str::to_owned),
            group,
            pod: pod.map(str::to_owned),
            message: message.into(),
        });
    }

    /// Creates a fresh node in `group` at `now`, running the group's desired configuration,
    /// with the group's per-node pods (DaemonSets, static pods). Returns its name.
    pub fn add_node(&mut self, group: &str, now: Timestamp) -> Option<String> {
        let g = self.groups.get_mut(group)?;
        let index = g.next_index;
        g.next_index += 1;
        let name = format!("{group}-{index}");
        let zone = g.zones[index % g.zones.len()].clone();
        self.add_node_as(group, &name, &zone, now)
    }

    /// Creates node `name` of `group` in `zone` at `now`, as [`World::add_node`] does (a
    /// machine joining under its own name). Returns its name; `None` for an unknown group.
    pub fn add_node_as(
        &mut self,
        group: &str,
        name: &str,
        zone: &str,
        now: Timestamp,
    ) -> Option<String> {
        let g = self.groups.get(group)?;
        let name = name.to_owned();
        let zone = zone.to_owned();
        let mut node = Node {
            name: name.clone(),
            uid: String::new(),
            ready: true,
            last_heartbeat: Some(now),
            allocatable: g.capacity.clone(),
            provider_id: Some(format!("sim:///{zone}/{name}")),
            created: Some(now),
            ..Node::default()
        };
        node.labels.extend(g.labels.clone());
        node.labels
            .insert(keys::LABEL_NODE_GROUP.into(), group.to_owned());
        node.labels
            .insert(keys::LABEL_TOPOLOGY_ZONE.into(), zone.clone());
        node.labels
            .insert(keys::LABEL_HOSTNAME.into(), name.clone());
        if let Some(t) = &g.group.spec.node_type {
            node.labels
                .insert(keys::LABEL_NODE_TYPE.into(), t.as_str().to_owned());
        }
        if g.group.spec.fencing.is_some() {
            node.labels
                .insert(keys::LABEL_FENCING_ENABLED.into(), String::new());
        }
        node.annotations.insert(
            keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(),
            g.desired().to_owned(),
        );
        let generation = g.generations.desired().clone();
        let phase_ms = self
            .rng
            .below(u64::try_from(self.heartbeat.lease_period.0.as_millis()).unwrap_or(u64::MAX));
        node.uid = self.next_uid(&name);
        self.nodes.insert(
            name.clone(),
            SimNode {
                last_heartbeat: node.last_heartbeat,
                node: Arc::new(node),
                group: group.to_owned(),
                zone,
                agent: SimAgent::running(&name, &generation, now),
                extra_agent_delay: Duration::ZERO,
                not_ready_until: None,
                dark_since: None,
                dark_until: None,
                lease_phase: Duration::from_millis(phase_ms),
            },
        );
        let per_node: Vec<usize> = self
            .workloads
            .iter()
            .enumerate()
            .filter(|(_, w)| w.kind.per_node() && w.group.as_deref().is_none_or(|g| g == group))
            .map(|(i, _)| i)
            .collect();
        for wi in per_node {
            let pod_name = format!("{}-{name}", self.workloads[wi].name);
            self.bind_pod(wi, pod_name, &name);
        }
        // The agent's first pass: it finds the node up to date.
        self.drive_agent(&name);
        self.reindex_agent(&name);
        let key = (i64::try_from(phase_ms).unwrap_or(i64::MAX), name.clone());
        let at = self.index.phases.partition_point(|p| *p < key);
        self.index.phases.insert(at, key);
        self.index.fresh.insert(name.clone());
        self.index
            .by_group
            .entry(group.to_owned())
            .or_default()
            .insert(name.clone());
        Some(name)
    }

    /// Creates pod `name` of workload `wi` bound to `node`, Running.
    pub fn bind_pod(&mut self, wi: usize, name: String, node: &str) {
        let Some(w) = self.workloads.get(wi).cloned() else {
            return;
        };
        let mut labels = w.labels.clone();
        if labels.is_empty() {
            labels.insert("app".into(), w.name.clone());
        }
        let mut pod = Pod {
            namespace: w.namespace.clone(),
            name,
            uid: String::new(),
            node_name: Some(node.to_owned()),
            labels,
            owner: w.kind.owner_kind().map(|kind| Owner {
                kind: kind.to_owned(),
                name: w.name.clone(),
            }),
            priority: w.priority,
            requests: parse_capacity(&w.requests),
            phase: PodPhase::Running,
            ..Pod::default()
        };
        if w.kind == WorkloadKind::Static {
            pod.annotations
                .insert(keys::ANNOTATION_MIRROR_POD.into(), "sim".into());
        }
        pod.uid = self.next_uid(&pod.name);
        let key = pod.key();
        self.pods_by_node
            .entry(node.to_owned())
            .or_default()
            .insert(key.clone());
        self.pods.insert(
            key,
            SimPod {
                pod,
                terminating_until: None,
                workload: Some(wi),
            },
        );
    }

    /// Where a new pod of workload `wi` goes: a Ready, schedulable, reachable node of its
    /// group with room (`pods` capacity), the one with the fewest pods (ties by name).
    /// Resource requests other than the pod count are not checked.
    pub fn pick_node(&self, wi: usize) -> Option<String> {
        let w = self.workloads.get(wi)?;
        // The group's nodes from the index (in name order, as the map's), unless it is stale.
        let candidates: Box<dyn Iterator<Item = &SimNode>> = match &w.group {
            Some(group) if !self.index.stale => Box::new(
                self.index
                    .by_group
                    .get(group)
                    .into_iter()
                    .flatten()
                    .filter_map(|name| self.nodes.get(name)),
            ),
            _ => Box::new(self.nodes.values()),
        };
        candidates
            .filter(|n| {
                w.group.as_deref().is_none_or(|g| g == n.group)
                    && n.node.ready
                    && !n.node.unschedulable
                    && !n.is_dark(self.now)
            })
            .map(|n| {
                let count = self.pods_by_node.get(&n.node.name).map_or(0, BTreeSet::len);
                (count, n)
            })
            .filter(|(count, n)| {
                n.node
                    .allocatable
                    .get("pods")
                    .is_none_or(|q| i64::try_from(*count).unwrap_or(i64::MAX) < q.ceil_units())
            })
            .min_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| a.1.node.name.cmp(&b.1.node.name))
            })
            .map(|(_, n)| n.node.name.clone())
    }

    /// Removes pod `key` now; a Deployment or StatefulSet pod comes back after the reschedule
    /// delay (Deployment pods under a new name).
    pub fn remove_pod(&mut self, key: &str) -> Option<SimPod> {
        let pod = self.pods.remove(key)?;
        if let Some(node) = &pod.pod.node_name
            && let Some(set) = self.pods_by_node.get_mut(node)
        {
            set.remove(key);
        }
        if let Some(wi) = pod.workload
            && let Some(w) = self.workloads.get(wi)
        {
            let name = match w.kind {
                WorkloadKind::StatefulSet => Some(pod.pod.name.clone()),
                WorkloadKind::Deployment => {
                    let suffix = self.rng.below(36u64.pow(5));
                    Some(format!("{}-{}", w.name, base36(suffix)))
                }
                _ => None,
            };
            if let Some(name) = name {
                self.pending_pods.push(PendingPod {
                    at: self.now + self.reschedule_delay,
                    workload: wi,
                    name,
                });
            }
        }
        Some(pod)
    }

    /// Deletes node `name` and, as the pod garbage collector would, its pods.
    pub fn remove_node(&mut self, name: &str) -> Option<SimNode> {
        let node = self.nodes.remove(name)?;
        if let Some(t) = self.index.agent_deadline.remove(name) {
            self.index.agent_due.remove(&(t, name.to_owned()));
        }
        self.index.phases.retain(|(_, n)| n != name);
        self.index.special.remove(name);
        self.index.fresh.remove(name);
        if let Some(names) = self.index.by_group.get_mut(&node.group) {
            names.remove(name);
        }
        let keys: Vec<String> = self
            .pods_by_node
            .remove(name)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        for key in keys {
            self.remove_pod(&key);
        }
        self.agenda.retain(|(_, n)| n != name);
        Some(node)
    }

    /// Wakes `node`'s agent after its reaction time.
    pub fn wake_agent(&mut self, node: &str) {
        let at = self.now + self.agent.reaction.0;
        self.agenda.insert((at, node.to_owned()));
    }

    /// A new configuration for `group` with `impact`; every node's agent notices it.
    pub fn change_group(&mut self, group: &str, impact: ImpactKind, what: &str) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let name = format!("{group}-gen{}", g.generations.desired().index + 1);
        let generation = g.generations.push(&name, impact);
        let label = format!("{name} ({}, {impact})", generation.short());
        let nodes: Vec<String> = self
            .nodes
            .values()
            .filter(|n| n.group == group)
            .map(|n| n.node.name.clone())
            .collect();
        self.record_in(
            "config.changed",
            Some(group.to_owned()),
            None,
            None,
            format!("desired checksum is now {label}: {what}"),
        );
        for n in nodes {
            self.wake_agent(&n);
        }
    }

    /// The PodDisruptionBudgets with `disruptionsAllowed` as the disruption controller would
    /// compute it now: healthy = Running, bound to a Ready node, not terminating; expected =
    /// covered pods plus covered pods waiting to come back.
    pub fn pdb_views(&self) -> Vec<PodDisruptionBudget> {
        self.pdbs
            .iter()
            .map(|p| {
                let selector = LabelSelector {
                    match_labels: Some(p.selector.clone()),
                    match_expressions: None,
                };
                let covers = |labels: &BTreeMap<String, String>, ns: &str| {
                    ns == p.namespace && p.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                };
                let mut expected = 0i64;
                let mut healthy = 0i64;
                for sp in self.pods.values() {
                    if covers(&sp.pod.labels, &sp.pod.namespace) {
                        expected += 1;
                        let on_ready = sp
                            .pod
                            .node_name
                            .as_deref()
                            .and_then(|n| self.nodes.get(n))
                            .is_some_and(|n| n.node.ready);
                        if sp.terminating_until.is_none()
                            && sp.pod.phase == PodPhase::Running
                            && on_ready
                        {
                            healthy += 1;
                        }
                    }
                }
                for pending in &self.pending_pods {
                    if let Some(w) = self.workloads.get(pending.workload) {
                        let mut labels = w.labels.clone();
                        if labels.is_empty() {
                            labels.insert("app".into(), w.name.clone());
                        }
                        if covers(&labels, &w.namespace) {
                            expected += 1;
                        }
                    }
                }
                let allowed = match (p.min_available, p.max_unavailable) {
                    (Some(min), _) => healthy - i64::from(min),
                    (None, Some(max)) => i64::from(max) - (expected - healthy),
                    (None, None) => 0,
                };
                PodDisruptionBudget {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    selector,
                    disruptions_allowed: i32::try_from(allowed.max(0)).unwrap_or(i32::MAX),
                }
            })
            .collect()
    }

    /// The injected error for `op` at the current time, if any.
    pub fn fault(&self, op: Operation) -> Option<ErrorKind> {
        self.api_faults
            .iter()
            .find(|f| {
                f.from <= self.now
                    && self.now < f.until
                    && (f.operations.is_empty() || f.operations.contains(&op))
            })
            .map(|f| f.error)
    }

    /// Whether an injected refusal covers `pod` now.
    pub fn eviction_refused(&self, pod: &Pod) -> bool {
        self.refusals.iter().any(|r| {
            r.from <= self.now
                && r.until.is_none_or(|u| self.now < u)
                && match &r.pod {
                    Some(key) => *key == pod.key(),
                    None => r.selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v)),
                }
        })
    }

    /// Recomputes every node's heartbeat and Ready condition at the current time, recording
    /// transitions in the timeline.
    pub fn refresh_nodes(&mut self) {
        self.refresh_readiness(None);
        self.index.heartbeats_at = Some(self.now);
    }

    /// Recomputes the heartbeat and Ready condition of `only` (every node when `None`) at the
    /// current time, recording transitions in the timeline in name order.
    fn refresh_readiness(&mut self, only: Option<&BTreeSet<String>>) {
        let now = self.now;
        let grace = self.heartbeat.grace_period.0;
        let period = self.heartbeat.lease_period.0;
        let start = self.start;
        let mut transitions = Vec::new();
        match only {
            None => {
                for (name, n) in &mut self.nodes {
                    if let Some(t) = refresh_node(period, grace, start, now, n) {
                        transitions.push((name.clone(), t.0, t.1));
                    }
                }
            }
            Some(names) => {
                for name in names {
                    if let Some(n) = self.nodes.get_mut(name)
                        && let Some(t) = refresh_node(period, grace, start, now, n)
                    {
                        transitions.push((name.clone(), t.0, t.1));
                    }
                }
            }
        }
        for (name, ready, why) in transitions {
            let kind = if ready {
                "node.ready"
            } else {
                "node.not-ready"
            };
            self.record(kind, Some(&name), None, why);
        }
    }

    /// Brings every node's `last_heartbeat` to the current time, touching only the nodes whose
    /// Lease phase a renewal crossed since the last time (every node after a lease period).
    fn renew_heartbeats(&mut self) {
        let now = self.now;
        let last = self.index.heartbeats_at.replace(now);
        if last == Some(now) {
            return;
        }
        let period = self.heartbeat.lease_period.0;
        let period_ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1);
        let start = self.start;
        let crossed: Option<Vec<String>> = match last {
            Some(last)
                if last < now && now.as_millis().saturating_sub(last.as_millis()) < period_ms =>
            {
                // Renewals at `phase + k·period` in (last, now]: phases in (a, b], or in
                // (a, period) and [0, b] when the interval wraps.
                let a = last.as_millis().rem_euclid(period_ms);
                let b = now.as_millis().rem_euclid(period_ms);
                let phases = &self.index.phases;
                let after = |x: i64| phases.partition_point(|(p, _)| *p <= x);
                let (lo, hi) = (after(a), after(b));
                let picked: Vec<&(i64, String)> = if a < b {
                    phases.get(lo..hi).unwrap_or_default().iter().collect()
                } else {
                    let tail = phases.get(lo..).unwrap_or_default().iter();
                    tail.chain(phases.get(..hi).unwrap_or_default()).collect()
                };
                // Looking many nodes up by name costs more than one pass over all of them.
                (picked.len().saturating_mul(8) < self.nodes.len())
                    .then(|| picked.into_iter().map(|(_, n)| n.clone()).collect())
            }
            _ => None,
        };
        match crossed {
            Some(names) => {
                for name in names {
                    if let Some(n) = self.nodes.get_mut(&name) {
                        n.last_heartbeat = Some(heartbeat_at(period, start, n, now));
                    }
                }
            }
            None => {
                for n in self.nodes.values_mut() {
                    n.last_heartbeat = Some(heartbeat_at(period, start, n, now));
                }
            }
        }
    }

    /// Whether a node that is neither dark nor scripted NotReady can never be silent (its
    /// last renewal is always less than a lease period old): then only the nodes whose agent
    /// acts, scripted ones and new ones can change readiness at an instant.
    fn readiness_is_local(&self) -> bool {
        self.heartbeat.lease_period.0 <= self.heartbeat.grace_period.0
    }

    /// Re-indexes `name`'s agent deadline after its agent changed.
    pub(crate) fn reindex_agent(&mut self, name: &str) {
        let new = self.nodes.get(name).and_then(|n| n.agent.next_deadline());
        let old = self.index.agent_deadline.get(name).copied();
        if old == new {
            return;
        }
        // The name taken out of the old entry goes into the new one.
        let mut owned = None;
        if let Some(t) = old {
            owned = self
                .index
                .agent_due
                .take(&(t, name.to_owned()))
                .map(|(_, n)| n);
        }
        match new {
            Some(t) => {
                let owned = owned.unwrap_or_else(|| name.to_owned());
                match self.index.agent_deadline.get_mut(name) {
                    Some(d) => *d = t,
                    None => {
                        self.index.agent_deadline.insert(owned.clone(), t);
                    }
                }
                self.index.agent_due.insert((t, owned));
            }
            None => {
                self.index.agent_deadline.remove(name);
            }
        }
    }

    /// Rebuilds the indexes from the nodes and pods (after [`World::invalidate_indexes`]);
    /// the next instant refreshes every node.
    fn rebuild_indexes(&mut self) {
        let mut index = WorldIndex::default();
        for (name, n) in &self.nodes {
            if let Some(t) = n.agent.next_deadline() {
                index.agent_due.insert((t, name.clone()));
                index.agent_deadline.insert(name.clone(), t);
            }
            if is_special(n) {
                index.special.insert(name.clone());
            }
            let phase = i64::try_from(n.lease_phase.as_millis()).unwrap_or(i64::MAX);
            index.phases.push((phase, name.clone()));
            index.fresh.insert(name.clone());
            index
                .by_group
                .entry(n.group.clone())
                .or_default()
                .insert(name.clone());
        }
        index.phases.sort();
        for (key, p) in &self.pods {
            if let Some(u) = p.terminating_until {
                index.terminating.insert((u, key.clone()));
            }
        }
        self.index = index;
    }

    /// Declares that nodes' agents or fault fields (`not_ready_until`, `dark_since`,
    /// `dark_until`) or pods' `terminating_until` were changed directly rather than through
    /// the world's methods: the world re-reads them all before it next needs them. The run
    /// loop calls this after every controller added with [`crate::Simulation::add_controller`]
    /// and when it hands out the world mutably.
    pub fn invalidate_indexes(&mut self) {
        self.index.stale = true;
    }

    /// Declares that node `name`'s fault fields (`not_ready_until`, `dark_since`,
    /// `dark_until`) were set: from now on its readiness and deadlines are looked at at every
    /// instant.
    pub fn touch_node(&mut self, name: &str) {
        if self.nodes.get(name).is_some_and(is_special) {
            self.index.special.insert(name.to_owned());
        }
    }

    /// Pod `key` terminates (its grace period runs) until `until`.
    pub fn terminate_pod(&mut self, key: &str, until: Timestamp) {
        if let Some(p) = self.pods.get_mut(key) {
            p.terminating_until = Some(until);
            self.index.terminating.insert((until, key.to_owned()));
        }
    }

    /// The earliest future time at which the world changes by itself (agent wake-ups, pods
    /// finishing termination or coming back, nodes provisioned, readiness flips of dark or
    /// scripted nodes, fault windows ending), strictly after `now`.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if self.index.stale {
            return self.next_deadline_scan();
        }
        let now = self.now;
        let after_now = (now + Duration::from_millis(1), String::new());
        let mut next: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| {
            if t > now && next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        if let Some((t, _)) = self.agenda.iter().next() {
            consider(*t);
        }
        self.pending_pods.iter().for_each(|p| consider(p.at));
        self.pending_nodes.iter().for_each(|(t, _)| consider(*t));
        if let Some((t, _)) = self.index.terminating.range(&after_now..).find(|(t, key)| {
            self.pods
                .get(key)
                .is_some_and(|p| p.terminating_until == Some(*t))
        }) {
            consider(*t);
        }
        for name in &self.index.special {
            if let Some(n) = self.nodes.get(name) {
                self.node_deadlines(n, &mut consider);
            }
        }
        if let Some((t, _)) = self.index.agent_due.range(&after_now..).next() {
            consider(*t);
        }
        next
    }

    /// The future instants of one node's own: scripted readiness, darkness and the heartbeat
    /// deadline it brings, its agent.
    fn node_deadlines(&self, n: &SimNode, consider: &mut impl FnMut(Timestamp)) {
        let grace = self.heartbeat.grace_period.0;
        let period = self.heartbeat.lease_period.0;
        if let Some(u) = n.not_ready_until {
            consider(u);
        }
        if let Some(s) = n.dark_since {
            consider(s);
            consider(
                heartbeat_at(period, self.start, n, self.now) + grace + Duration::from_millis(1),
            );
        }
        if let Some(u) = n.dark_until {
            consider(u);
        }
        if let Some(t) = n.agent.next_deadline() {
            consider(t);
        }
    }

    /// [`World::next_deadline`] by a scan of every node and pod (while the indexes are stale).
    fn next_deadline_scan(&self) -> Option<Timestamp> {
        let now = self.now;
        let mut next: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| {
            if t > now && next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        if let Some((t, _)) = self.agenda.iter().next() {
            consider(*t);
        }
        self.pending_pods.iter().for_each(|p| consider(p.at));
        self.pending_nodes.iter().for_each(|(t, _)| consider(*t));
        self.pods
            .values()
            .filter_map(|p| p.terminating_until)
            .for_each(&mut consider);
        for n in self.nodes.values() {
            self.node_deadlines(n, &mut consider);
        }
        next
    }

    /// Takes the pods whose termination ended by now out of the index, in key order.
    fn take_terminated(&mut self, now: Timestamp) -> BTreeSet<String> {
        let later = self
            .index
            .terminating
            .split_off(&(now + Duration::from_millis(1), String::new()));
        let due = std::mem::replace(&mut self.index.terminating, later);
        due.into_iter()
            .filter(|(t, key)| {
                self.pods
                    .get(key)
                    .is_some_and(|p| p.terminating_until == Some(*t))
            })
            .map(|(_, key)| key)
            .collect()
    }

    /// Runs everything the world does by itself at the current time: pods finishing
    /// termination or coming back, replacement nodes appearing, agents, readiness.
    pub fn step(&mut self) {
        let now = self.now;
        let refresh_all = self.index.stale || !self.readiness_is_local();
        if self.index.stale {
            self.rebuild_indexes();
        }
        // Pods that finished terminating.
        for key in self.take_terminated(now) {
            self.remove_pod(&key);
        }
        // Replacement machines.
        let (due, later): (Vec<_>, Vec<_>) =
            self.pending_nodes.drain(..).partition(|(t, _)| *t <= now);
        self.pending_nodes = later;
        for (_, group) in due {
            if let Some(name) = self.add_node(&group, now) {
                self.record(
                    "node.created",
                    Some(&name),
                    None,
                    "replacement machine joined",
                );
            }
        }
        self.renew_heartbeats();
        // The agents that act now: woken ones and those whose deadline came.
        let woken: BTreeSet<String> = self
            .agenda
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, n)| n.clone())
            .collect();
        self.agenda.retain(|(t, _)| *t > now);
        let mut due = woken.clone();
        due.extend(
            self.index
                .agent_due
                .iter()
                .take_while(|(t, _)| *t <= now)
                .map(|(_, n)| n.clone()),
        );
        // Only the acting agents' nodes, scripted ones and new ones can change readiness
        // (see `readiness_is_local`).
        let mut changing = due.clone();
        changing.extend(self.index.special.iter().cloned());
        changing.extend(std::mem::take(&mut self.index.fresh));
        let only = (!refresh_all).then_some(&changing);
        self.refresh_readiness(only);
        self.step_agents(&due, &woken);
        self.refresh_readiness(only);
        // Pods coming back (unless a scheduler controller takes them).
        if self.scheduler_external {
            return;
        }
        let (due, later): (Vec<_>, Vec<_>) = self.pending_pods.drain(..).partition(|p| p.at <= now);
        self.pending_pods = later;
        for p in due {
            if self.pods.contains_key(&self.pod_key(&p)) {
                continue;
            }
            match self.pick_node(p.workload) {
                Some(node) => {
                    let key = self.pod_key(&p);
                    self.bind_pod(p.workload, p.name, &node);
                    self.record("pod.scheduled", Some(&node), Some(&key), "pod (re)created");
                }
                None => self.pending_pods.push(PendingPod {
                    at: now + self.reschedule_delay,
                    ..p
                }),
            }
        }
    }

    fn pod_key(&self, p: &PendingPod) -> String {
        let ns = self
            .workloads
            .get(p.workload)
            .map_or("default", |w| w.namespace.as_str());
        format!("{ns}/{}", p.name)
    }

    /// Replaces the machine of `node` (`RollingUpdate`): the node and its pods go now, a fresh
    /// node of the group joins after the provisioning delay. A node already gone is ignored.
    pub fn replace_machine(&mut self, node: &str) {
        let Some(n) = self.remove_node(node) else {
            return;
        };
        self.stats.node_deletions += 1;
        self.record_in(
            "node.replaced",
            Some(n.group.clone()),
            Some(node),
            None,
            format!(
                "machine deleted; a replacement joins in {}s",
                self.provision_delay.as_secs()
            ),
        );
        self.pending_nodes
            .push((self.now + self.provision_delay, n.group));
    }

    /// Nodes an event selection names, in name order.
    pub fn select_nodes(&self, sel: &crate::scenario::NodeSelection) -> Vec<String> {
        if let Some(n) = &sel.node {
            return vec![n.clone()];
        }
        if !sel.nodes.is_empty() {
            return sel.nodes.clone();
        }
        let Some(zone) = &sel.zone else {
            return Vec::new();
        };
        let in_zone = self
            .nodes
            .values()
            .filter(|n| &n.zone == zone)
            .map(|n| n.node.name.clone());
        match sel.count {
            Some(c) => in_zone.take(c).collect(),
            None => in_zone.collect(),
        }
    }

    /// Node views with current readiness and heartbeats, unversioned, in name order.
    pub fn node_views(&self) -> Vec<Node> {
        self.nodes.values().map(SimNode::view).collect()
    }

    /// Every node versioned by the simulated API, in name order (what `list_nodes` returns):
    /// the shared views of [`crate::api::SimApiServer::list_shared`], the same `Arc` for a node
    /// as long as it does not change (their heartbeats may be older than
    /// [`SimNode::last_heartbeat`]).
    pub fn versioned_nodes(&mut self) -> Vec<Arc<Node>> {
        let nodes = self.nodes.values().map(|n| (&n.node, n.last_heartbeat));
        self.api.list_shared(nodes)
    }
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    for _ in 0..5 {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// Whether the node has scripted readiness or darkness (looked at at every instant).
fn is_special(n: &SimNode) -> bool {
    n.not_ready_until.is_some() || n.dark_since.is_some() || n.dark_until.is_some()
}

/// Recomputes one node's heartbeat and Ready condition at `now`; the transition (new
/// readiness and why) when it changed.
fn refresh_node(
    period: Duration,
    grace: Duration,
    start: Timestamp,
    now: Timestamp,
    n: &mut SimNode,
) -> Option<(bool, String)> {
    let hb = heartbeat_at(period, start, n, now);
    let restarting = n.agent.restarting(now);
    let scripted = n.not_ready_until.is_some_and(|u| now < u);
    let silent = now.saturating_since(hb) > grace;
    let ready = !(restarting || scripted || silent);
    let was = n.node.ready;
    n.last_heartbeat = Some(hb);
    if was != ready {
        Arc::make_mut(&mut n.node).ready = ready;
    }
    if was == ready {
        return None;
    }
    let why = if ready {
        "Ready".to_owned()
    } else if silent {
        format!(
            "NotReady: no heartbeat for more than {}s (Ready=Unknown)",
            grace.as_secs()
        )
    } else if restarting {
        "NotReady: the agent restarts it".to_owned()
    } else {
        "NotReady (injected)".to_owned()
    };
    Some((ready, why))
}

/// The node's last Lease renewal at `now`: renewals every `period` at the node's phase, none
/// while it is dark, none before it was created.
fn heartbeat_at(period: Duration, start: Timestamp, n: &SimNode, now: Timestamp) -> Timestamp {
    let period = i64::try_from(period.as_millis()).unwrap_or(i64::MAX).max(1);
    let phase = i64::try_from(n.lease_phase.as_millis()).unwrap_or(0);
    let until = match n.dark_since {
        Some(since) if n.is_dark(now) => since - Duration::from_millis(1),
        _ => now,
    };
    let created = n.node.created.unwrap_or(start);
    let t = until.as_millis() - phase;
    let renew = Timestamp::from_millis(t.div_euclid(period) * period + phase);
    renew.max(created).min(now)
}
