//! The simulated cluster: node groups, nodes with heartbeats and readiness, pods and their
//! owners, PodDisruptionBudgets, the node agent (bashible) applying approved updates, and the
//! injected failures. Everything happens at the virtual time the run loop hands in; nothing
//! reads a clock, and the only randomness is the seeded [`SimRng`].
//!
//! Controllers ([`crate::Controller`]) act on the world directly (`&mut World`) or through the
//! cluster port ([`crate::SimCluster`]), as the update executor does.
//!
//! An instant costs what changes in it, not the cluster's size: the world indexes its agents'
//! deadlines, terminating pods, scripted or dark nodes, Lease phases and its groups' nodes by
//! pod count, lets act only the agents that are due (a waiting agent whose polls cannot
//! change anything has no deadline at all until what it reads changes: `crate::agent`),
//! refreshes readiness only where it can change, and brings heartbeats up to date only when
//! something reads them from the world ([`World::renew_heartbeats`]; the cluster port computes
//! the ones it hands out). Code that changes
//! those fields directly calls [`World::invalidate_indexes`] (the run loop does it for the
//! controllers it did not install and for [`crate::Simulation::world_mut`]);
//! `nodemgr-sim/README.md`, "Performance", tells what dominated and what changed.
//!
//! The nodes are a [`Nodes`] table (name order in one vector, found by name through a hash
//! index, each with a [`NodeId`] the agents' deadlines and the agenda are keyed by, and a log
//! of the nodes handed out mutably for the simulated API's change feed); the pods a [`Pods`]
//! hash map iterated in key order; `pods_by_node` a hash map. Each answers as the `BTreeMap`
//! it replaced (`get`, `get_mut`, `insert`, `remove`, iteration in key order).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_core::agent::SimulatedGenerations;
use nodemgr_core::hash::FastHash;
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
use crate::timeline::{Name, Timeline, TimelineEvent};

mod agenda;
mod index;
mod liveness;
mod load;
mod nodes;
mod objects;
mod pod_keys;
mod pods;
mod uid;

pub use agenda::Agenda;
pub use nodes::{NodeId, Nodes};
pub use pod_keys::PodKeys;
pub use pods::Pods;

pub(crate) use index::reindex_deadline;
pub(crate) use liveness::{LiveNodes, is_special};

/// A node group as the simulator keeps it.
#[derive(Debug, Clone)]
pub struct SimGroup {
    /// The NodeGroup (name and spec), shared with the listings that handed it out while it does
    /// not change (changed through `Arc::make_mut`).
    pub group: Arc<NodeGroup>,
    /// Zones for new nodes, round-robin.
    pub zones: Vec<String>,
    /// Allocatable resources of new nodes.
    pub capacity: nodemgr_core::model::SharedResources,
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
    /// the simulated API hands out: change it with `Arc::make_mut` (which copies it when a
    /// reader still holds it, and moves it to a new allocation when only weak references do,
    /// as the simulated API's own), so that an unchanged node stays the same `Arc` and a
    /// changed one is another ([`crate::api`]). Its
    /// `resource_version` and `last_heartbeat` are the API's (it may write a new version's
    /// into a node only the world holds, to serve it as the view): read neither here.
    pub node: Arc<Node>,
    /// The node's last Lease renewal (outside [`SimNode::node`]: a renewal is not a change of
    /// the Node; views get it folded in). Brought up to date when something can read it
    /// ([`World::renew_heartbeats`]: before the controllers that read it from the world run,
    /// [`crate::Controller::reads_heartbeats`], at the last instant of a run, by
    /// [`crate::Simulation::run_until`] and [`crate::Simulation::world_mut`]); between, it
    /// may be older than the node's last renewal. The cluster port computes the heartbeat it
    /// hands out rather than reading this one ([`World::set_live_heartbeats`]).
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
    /// The node with its heartbeat folded in (unversioned: the resourceVersion the simulated
    /// API may have written into [`SimNode::node`] is cleared, `crate::api`).
    pub fn view(&self) -> Node {
        let mut view = Node::clone(&self.node);
        view.resource_version.clear();
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
    /// Nodes by name, in name order ([`Nodes`]: a vector with a hash index, which logs the
    /// nodes handed out mutably for the simulated API's change feed).
    pub nodes: Nodes,
    /// Pods by `namespace/name`, iterated in key order ([`Pods`]: a hash map).
    pub pods: Pods,
    /// Pod keys by node name (a hash map: looked up by name, never walked in order).
    pub pods_by_node: HashMap<String, PodKeys, FastHash>,
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
    /// Agent wake-ups: `(when, node)` ([`World::wake_agent`]; an entry of a node removed
    /// since is ignored).
    pub agenda: Agenda,
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
    /// The count of uids given so far (`World::next_uid`).
    uid: uid::UidCounter,
    /// Per workload, the labels its pods get, made once and shared by them
    /// (`World::bind_pod`), with what they were made from.
    pod_labels: Vec<Option<PodLabels>>,
    /// What the run loop needs at each instant without scanning every node and pod.
    index: WorldIndex,
    /// The last instant at which the agents acted (a change noticed in it after they did is
    /// seen by their next polls, not by those of this instant).
    pub(crate) agents_stepped_at: Option<Timestamp>,
    /// Waiting agents may skip polls that cannot change anything ([`World::set_lazy_agents`]).
    pub(crate) lazy_agents: bool,
    /// Every instant is observed by something other than the agents (a watch-lag window
    /// records the nodes at each one): no instant may be left out, so agents poll one by one.
    pub(crate) every_instant_observed: bool,
    /// The cluster port computes the heartbeats it hands out instead of reading the renewed
    /// ones ([`World::set_live_heartbeats`]).
    pub(crate) live_heartbeats: bool,
}

/// Indexes the world keeps next to its nodes and pods so that an instant costs what changes
/// in it rather than the cluster's size (`nodemgr-sim/README.md`, "Performance"). The world's
/// own methods keep them current; a change made to the fields directly (a node's agent or
/// fault fields, a pod's `terminating_until`) must be followed by
/// [`World::invalidate_indexes`], which the run loop does after every controller it did not
/// install itself and whenever it hands out the world mutably.
#[derive(Debug, Clone, Default)]
struct WorldIndex {
    /// `(deadline, node)` for every node whose agent has one; the deadline indexed for a node
    /// is its agent's `SimAgent::indexed_deadline` (no lookup by name to find the entry).
    agent_due: BTreeSet<(Timestamp, NodeId)>,
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
    /// Node names by group (`SimNode::group`).
    by_group: BTreeMap<String, BTreeSet<String>>,
    /// Per group, its nodes by pod count (`pods_by_node`) and name, for placing a group's
    /// pods on the least loaded one without counting every node's pods
    /// ([`World::pick_node`]). Kept by `bind_pod`, `remove_pod` and node creation and
    /// removal; not read once a scheduler controller binds pods itself
    /// ([`World::scheduler_external`], whose controller edits `pods_by_node` directly).
    /// Keyed by [`NodeId`] and position, not by name ([`load::LoadIndex`]).
    load: load::LoadIndex,
    /// A buffer for the positions of the nodes whose agents act at an instant, kept from one
    /// instant to the next (its contents mean nothing between instants).
    due: Vec<usize>,
    /// Set by [`World::invalidate_indexes`]: rebuilt, and every node refreshed, before use.
    stale: bool,
}

/// The labels of a workload's pods (its own, or `app: <name>`), shared by all of them: made
/// again when the workload's labels or name are not those they were made from.
#[derive(Debug, Clone)]
struct PodLabels {
    /// The workload's labels they were made from.
    source: BTreeMap<String, String>,
    /// The workload's name they were made from.
    name: String,
    /// The pods' labels.
    labels: nodemgr_core::model::StringMap,
}

/// The parts of the world a node agent's pass reads and changes, borrowed apart from the
/// nodes so that the agent's node is looked up once for its whole pass (`crate::agent`).
pub(crate) struct AgentEnv<'a> {
    /// Virtual now.
    pub(crate) now: Timestamp,
    /// Scenario start (timeline times are relative to it).
    pub(crate) start: Timestamp,
    /// The groups (bundles, generations).
    pub(crate) groups: &'a BTreeMap<String, SimGroup>,
    /// The index of agent deadlines (`WorldIndex::agent_due`).
    pub(crate) agent_due: &'a mut BTreeSet<(Timestamp, NodeId)>,
    /// Seeded randomness (step jitter).
    pub(crate) rng: &'a mut SimRng,
    /// What happened.
    pub(crate) timeline: &'a mut Timeline,
    /// Counters.
    pub(crate) stats: &'a mut SimStats,
    /// Agent settings.
    pub(crate) spec: &'a AgentSpec,
}

impl World {
    /// The nodes and, borrowed apart, what an agent's pass needs besides its node.
    pub(crate) fn agent_parts(&mut self) -> (&mut Nodes, AgentEnv<'_>) {
        (
            &mut self.nodes,
            AgentEnv {
                now: self.now,
                start: self.start,
                groups: &self.groups,
                agent_due: &mut self.index.agent_due,
                rng: &mut self.rng,
                timeline: &mut self.timeline,
                stats: &mut self.stats,
                spec: &self.agent,
            },
        )
    }
}

/// How many recorded events per node the world makes room for when it is built (a capacity
/// hint: the list grows past it as needed).
const EVENTS_RESERVED_PER_NODE: usize = 32;

/// How many timeline events per node the world makes room for when it is built (a capacity
/// hint: the timeline grows past it as needed).
const TIMELINE_EVENTS_RESERVED_PER_NODE: usize = 64;

/// The quantities of `map` that parse (a group's capacity, a workload's pod requests); an
/// empty map — a workload without requests, the usual one — gives an empty map without one
/// being collected.
fn parse_capacity(map: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    if map.is_empty() {
        return BTreeMap::new();
    }
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
            nodes: Nodes::new(),
            pods: Pods::new(),
            pods_by_node: HashMap::default(),
            pending_pods: Vec::new(),
            workloads: scenario.workloads.clone(),
            pdbs: scenario.pdbs.clone(),
            api_faults: Vec::new(),
            refusals: Vec::new(),
            pending_nodes: Vec::new(),
            agenda: Agenda::new(),
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
            uid: uid::UidCounter::default(),
            pod_labels: Vec::new(),
            index: WorldIndex::default(),
            agents_stepped_at: None,
            lazy_agents: true,
            every_instant_observed: false,
            live_heartbeats: true,
        };
        // Room for the nodes and pods made below (capacity hints: nothing else changes).
        let nodes = scenario
            .groups
            .iter()
            .map(|g| g.nodes)
            .fold(0usize, usize::saturating_add);
        let pods = scenario
            .workloads
            .iter()
            .map(|w| if w.kind.per_node() { nodes } else { w.replicas })
            .fold(0usize, usize::saturating_add);
        world.nodes.reserve(nodes);
        world.pods.reserve(pods);
        world.pods_by_node.reserve(nodes);
        // The events the update executor records: a few per node and update (approval,
        // drain, each eviction, the end); room for some updates of every node, so that the
        // list is not moved again and again as it grows.
        world
            .recorded_events
            .reserve(nodes.saturating_mul(EVENTS_RESERVED_PER_NODE));
        // The timeline: a few dozen events per node in a run of hours (readiness, agents'
        // steps, updates); room for them up front, so that the list is not moved as it grows.
        world
            .timeline
            .events
            .reserve(nodes.saturating_mul(TIMELINE_EVENTS_RESERVED_PER_NODE));
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
                    group: Arc::new(group),
                    zones: g.zones.clone(),
                    capacity: parse_capacity(&g.capacity).into(),
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
                // The indexes are rebuilt once the world is built (below); only the load
                // index is kept meanwhile, for the placements.
                world.add_node_with(&g.name, start, false);
            }
        }
        // Workloads: per-node ones on each node of their group, the others spread.
        for (wi, w) in scenario.workloads.iter().enumerate() {
            if w.kind.per_node() {
                let nodes: Vec<NodeId> = world
                    .nodes
                    .iter()
                    .filter(|(_, n)| w.group.as_deref().is_none_or(|g| g == n.group))
                    .filter_map(|(name, _)| world.nodes.id_of(name))
                    .collect();
                for id in nodes {
                    let name = crate::text::concat(&[
                        &w.name,
                        "-",
                        world.nodes.name_of(id).unwrap_or_default(),
                    ]);
                    world.bind_pod_id(wi, name, id);
                }
            } else {
                for r in 0..w.replicas {
                    let name =
                        crate::text::concat(&[&w.name, "-", crate::text::digits(r).as_str()]);
                    match world.pick_node_id(wi) {
                        Some(id) => world.bind_pod_id(wi, name, id),
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
        self.uid.increment();
        self.uid.uid(prefix)
    }

    /// Appends a timeline event at the current virtual time.
    pub fn record(
        &mut self,
        kind: impl Into<Cow<'static, str>>,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        // The node's names are shared with its other events.
        let (node, group) = match node.map(|n| self.event_names(n)) {
            Some((node, group)) => (Some(node.into()), group.map(Name::from)),
            None => (None, None),
        };
        self.record_event(
            kind.into(),
            node,
            group,
            pod.map(str::to_owned),
            message.into(),
        );
    }

    /// Appends a timeline event with an explicit group.
    pub fn record_in(
        &mut self,
        kind: impl Into<Cow<'static, str>>,
        group: Option<String>,
        node: Option<&str>,
        pod: Option<&str>,
        message: impl Into<String>,
    ) {
        self.record_event(
            kind.into(),
            node.map(Name::from),
            group.map(Name::from),
            pod.map(str::to_owned),
            message.into(),
        );
    }

    /// Appends a timeline event of these fields at the current virtual time (the names as
    /// the caller has them, shared or owned).
    pub(crate) fn record_event(
        &mut self,
        kind: Cow<'static, str>,
        node: Option<Name>,
        group: Option<Name>,
        pod: Option<String>,
        message: String,
    ) {
        self.timeline.events.push(TimelineEvent {
            at_ms: self.now.as_millis() - self.start.as_millis(),
            kind,
            node,
            group,
            pod,
            message,
        });
    }

    /// Wakes `node`'s agent after its reaction time (something it reads changed now: a
    /// dormant agent also polls at its first poll that sees the change,
    /// [`World::agent_inputs_changed`]).
    /// A node that does not exist has no agent to wake.
    pub fn wake_agent(&mut self, node: &str) {
        if let Some(at) = self.nodes.position_of_name(node) {
            self.wake_agent_at(at);
        }
    }

    /// [`World::wake_agent`] for node `id`, found without its name.
    pub(crate) fn wake_agent_by_id(&mut self, id: NodeId) {
        if let Some(at) = self.nodes.position_of_id(id) {
            self.wake_agent_at(at);
        }
    }

    /// [`World::wake_agent`] for the node at position `at` in name order.
    fn wake_agent_at(&mut self, at: usize) {
        let Some(id) = self.notice_agent_inputs_at(at) else {
            return;
        };
        let at = self.now + self.agent.reaction.0;
        self.agenda.insert((at, id));
    }

    /// Whether waiting agents may skip the polls that cannot change anything (dormant agents,
    /// `crate::agent`): allowed ([`World::set_lazy_agents`], the default), readiness
    /// changes only at the instants where something acts (`leasePeriod ≤ gracePeriod`: a live
    /// node is never silent), and no watch-lag window records the nodes at every instant. Then a
    /// dormant agent's polls are no instants at all, which changes nothing else.
    pub fn agents_may_sleep(&self) -> bool {
        self.lazy_agents && self.readiness_is_local() && !self.every_instant_observed
    }

    /// Allows or forbids dormant agents (allowed by default). Forbidding wakes the dormant
    /// ones at their next poll, so every poll is simulated from then on; the outcome is the
    /// same either way (`tests/lazy_agents.rs`).
    pub fn set_lazy_agents(&mut self, lazy: bool) {
        self.lazy_agents = lazy;
        if !lazy {
            self.wake_dormant_agents();
        }
    }

    /// Whether the cluster port computes the heartbeats of the nodes its change feed and node
    /// patches hand out (the default), so that an instant at which only controllers that read
    /// nodes through the port run renews no heartbeat ([`crate::Controller::reads_heartbeats`]),
    /// or reads the stored ones, renewed before every controller (the plain path). The outcome
    /// is the same either way (`tests/live_heartbeats.rs`).
    pub fn set_live_heartbeats(&mut self, live: bool) {
        self.live_heartbeats = live;
    }

    /// Declares that something records the nodes at every instant (a watch-lag window, the
    /// run loop calls it): agents then poll one by one, so that the instants stay those of
    /// the plain simulation.
    pub fn observe_every_instant(&mut self) {
        self.every_instant_observed = true;
        self.wake_dormant_agents();
    }

    /// Every dormant agent polls at its next poll, as if a change had been noticed now.
    fn wake_dormant_agents(&mut self) {
        let dormant: Vec<String> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.agent.is_dormant())
            .map(|(name, _)| name.clone())
            .collect();
        for name in dormant {
            self.agent_inputs_changed(&name);
        }
    }

    /// A new configuration for `group` with `impact`; every node's agent notices it.
    pub fn change_group(&mut self, group: &str, impact: ImpactKind, what: &str) {
        let Some(g) = self.groups.get_mut(group) else {
            return;
        };
        let name = format!("{group}-gen{}", g.generations.desired().index + 1);
        let generation = g.generations.push(&name, impact);
        let label = format!("{name} ({}, {impact})", generation.short());
        // By position in name order (waking agents adds and removes no node).
        let nodes: Vec<usize> = self
            .nodes
            .values()
            .enumerate()
            .filter(|(_, n)| n.group == group)
            .map(|(at, _)| at)
            .collect();
        self.record_in(
            "config.changed",
            Some(group.to_owned()),
            None,
            None,
            format!("desired checksum is now {label}: {what}"),
        );
        for at in nodes {
            self.wake_agent_at(at);
        }
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
        let due = take_due(&mut self.pending_nodes, |(t, _)| *t <= now);
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
        // Heartbeats are renewed when something reads them (`World::renew_heartbeats`).
        // The agents that act now: woken ones and those whose deadline came.
        // The wake-ups due now leave the agenda. Nodes are taken by their position in name
        // order (which nothing changes while the agents act), so that they act in name order.
        let bound = now + Duration::from_millis(1);
        let woken = if self.agenda.first().is_none_or(|(t, _)| *t >= bound) {
            // None due (most instants): the agenda is left as it is.
            Vec::new()
        } else {
            let now_due = self.agenda.take_before(bound);
            self.positions(now_due.into_iter())
        };
        // Into the buffer of the previous instants (no allocation once it is large enough).
        let mut due = std::mem::take(&mut self.index.due);
        due.clear();
        due.extend_from_slice(&woken);
        due.extend(
            self.index
                .agent_due
                .iter()
                .take_while(|(t, _)| *t <= now)
                .filter_map(|&(_, id)| self.nodes.position_of_id(id)),
        );
        due.sort_unstable();
        due.dedup();
        // Only the acting agents' nodes, scripted ones and new ones can change readiness
        // (see `readiness_is_local`): those are refreshed, their agents act, and they are
        // refreshed again, node by node; every node when that does not hold.
        let fresh = std::mem::take(&mut self.index.fresh);
        if refresh_all {
            self.refresh_readiness();
            self.step_agents(&due, &woken);
            self.refresh_readiness();
        } else {
            let extra: Vec<usize> = fresh
                .iter()
                .chain(&self.index.special)
                .filter_map(|name| self.nodes.position_of_name(name))
                .collect();
            let extra = sorted(extra);
            self.step_nodes(&due, &extra, &woken);
        }
        self.index.due = due;
        // Pods coming back (unless a scheduler controller takes them).
        if self.scheduler_external {
            return;
        }
        let due = take_due(&mut self.pending_pods, |p| p.at <= now);
        for p in due {
            let key = self.pod_key(&p);
            if self.pods.contains_key(&key) {
                continue;
            }
            // The node with the names its events share (its agent's, as `World::record`
            // takes them).
            let picked = self.pick_node_id(p.workload).and_then(|id| {
                let (name, n) = self.nodes.entry_by_id_unlogged(id)?;
                let names = n.agent.event_names(name, &n.group);
                debug_assert!(*names.0 == *name && *names.1 == *n.group);
                Some((id, name.to_owned(), names))
            });
            match picked {
                Some((id, node, (node_name, group))) => {
                    // Recorded first (binding records nothing), so that the binding takes
                    // the node's name and the key made above.
                    self.record_event(
                        "pod.scheduled".into(),
                        Some(node_name.into()),
                        Some(group.into()),
                        Some(key.clone()),
                        "pod (re)created".into(),
                    );
                    self.bind_pod_at(p.workload, p.name, node, Some(id), Some(key));
                }
                None => self.pending_pods.push(PendingPod {
                    at: now + self.reschedule_delay,
                    ..p
                }),
            }
        }
    }
}

/// `positions` sorted, each once.
fn sorted(mut positions: Vec<usize>) -> Vec<usize> {
    positions.sort_unstable();
    positions.dedup();
    positions
}

impl World {
    /// The positions in name order ([`Nodes`]) of the existing nodes among `entries`' ids,
    /// sorted, each once.
    fn positions(&self, entries: impl Iterator<Item = (Timestamp, NodeId)>) -> Vec<usize> {
        sorted(
            entries
                .filter_map(|(_, id)| self.nodes.position_of_id(id))
                .collect(),
        )
    }
}

/// Takes the items of `items` that are `due` out, both parts in their order; without
/// allocating when none is (most instants).
fn take_due<T>(items: &mut Vec<T>, mut due: impl FnMut(&T) -> bool) -> Vec<T> {
    if !items.iter().any(&mut due) {
        return Vec::new();
    }
    let (due, later): (Vec<T>, Vec<T>) = items.drain(..).partition(due);
    *items = later;
    due
}

/// The five lowest base-36 digits of `n` (`0-9a-z`), on the stack.
fn base36(mut n: u64) -> [u8; 5] {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = [b'0'; 5];
    for slot in out.iter_mut().rev() {
        *slot = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    out
}

/// The node of a one-node world (group `g`, zone `a`, CloudPermanent): what the tables' unit
/// tests store.
#[cfg(test)]
pub(crate) fn one_node_for_tests() -> SimNode {
    let value = serde_json::json!({
        "name": "one-node", "duration": "1h",
        "groups": [{"name": "g", "nodes": 1, "zones": ["a"],
                    "spec": {"nodeType": "CloudPermanent"}}],
    });
    let world = match crate::Scenario::from_yaml(&value.to_string()) {
        Ok(s) => World::from_scenario(&s, 1),
        Err(e) => panic!("scenario rejected: {e}"),
    };
    match world.nodes.values().next() {
        Some(n) => n.clone(),
        None => panic!("no node"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A workload's pod requests, empty or not, valid quantities or not, read by
        /// `parse_capacity` are the quantities that parse, collected.
        #[test]
        fn pod_requests_are_the_parsed_capacity(
            requests in prop::collection::btree_map(
                "cpu|memory|pods|ephemeral-storage",
                prop_oneof!["[0-9]{1,4}", "[0-9]{1,3}(m|Mi|Gi)", "x?[a-z]{0,3}"],
                0..4,
            ),
        ) {
            let collected: BTreeMap<String, Quantity> = requests
                .iter()
                .filter_map(|(k, v)| Quantity::parse(v).ok().map(|q| (k.clone(), q)))
                .collect();
            prop_assert_eq!(parse_capacity(&requests), collected);
        }
    }
}
