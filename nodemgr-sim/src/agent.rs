//! The simulated nodes' agents: every node runs core's node agent
//! ([`nodemgr_core::agent::Agent`], `docs/agent.md`) and this module is its driver. It answers
//! the agent's requests from the world (the group's bundle, the node's annotations), keeps the
//! node's state files, and simulates the steps: a step takes the scenario's agent delay (plus
//! jitter and a slow node's extra delay), then the node restarts its kubelet or reboots
//! (NotReady for `agent.kubeletRestart` / `agent.reboot`) when the configuration change
//! needs it.
//!
//! A group's configuration generations are core's simulated bundles
//! ([`nodemgr_core::agent::SimulatedGenerations`]): one step whose disruption key names the
//! latest disruptive generation. What running the step does to the node is the strongest
//! impact of the generations between the node's last applied one and the desired one.
//!
//! A waiting agent's polls are not simulated one by one (`docs/agent.md`, "One pass", has
//! the polls): an agent waiting for `approved` or `disruption-approved` re-fetches its bundle and
//! re-reads its Node every poll interval, and a poll whose Node and bundle are those of the
//! previous one only sleeps again: no request, no state file, no random draw, no timeline
//! event. Such an agent is *dormant* ([`SimAgent::is_dormant`]): it keeps no deadline until the
//! world notices that its Node or bundle changed ([`World::agent_inputs_changed`]); its next
//! poll is then the first instant of its own poll grid at which the change is visible, where
//! core's agent runs as it would have (its timer, set to an earlier point of the same grid,
//! has expired, and a poll at `now` sleeps until `now` plus the interval as before).
//!
//! The agent's reads and patches go to the world directly: injected API errors hit the
//! controllers' calls, not the agent's (its behaviour under failed and conflicting requests is
//! covered by core's properties, `nodemgr-core/tests/agent.rs`). The resourceVersion the agent
//! reads changes whenever its Node changed since its previous read, so a patch based on a
//! stale read conflicts as on a real API ([`SimAgent::resource_version`]).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::{Arc, Weak};
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_core::agent::{
    Agent, AgentAction, AgentConfig, AgentInput, AgentStatus, LeanAction, PatchOutcome,
    SimulatedGeneration, StateFiles, StepOutcome,
};
use nodemgr_core::model::{ApprovalMode, Node, Timestamp, keys};
use nodemgr_core::ports::Cause;

use crate::timeline::TimelineEvent;
use crate::world::{AgentEnv, NodeId, SimGroup, SimNode, World, is_special};

/// A step being simulated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningStep {
    /// The step.
    pub name: String,
    /// When the step's changes are in place (and a restart, if any, begins).
    pub applied_at: Timestamp,
    /// When the step ends (after the restart).
    pub done_at: Timestamp,
    /// What the step does to the node.
    pub effect: ImpactKind,
    /// The restart has been recorded.
    pub restart_started: bool,
}

/// A node's agent: the state machine, the node's state files, the step it runs.
#[derive(Debug, Clone)]
pub struct SimAgent {
    /// Core's agent. The node's state files are the ones its writes left
    /// ([`SimAgent::files`]).
    pub machine: Agent,
    /// The checksum last written to `configuration_checksum` (kept while an apply is under
    /// way: what the node runs, for the simulated effect of a step).
    pub applied: Option<String>,
    /// The step being simulated.
    pub running: Option<RunningStep>,
    /// Set while the agent waits for an approval and its polls cannot change anything.
    dormant: Option<Dormant>,
    /// The buffer of the checksum the agent's last dormancy remembered
    /// ([`Dormant::bundle`]), kept for its next one.
    spare_checksum: String,
    /// The resourceVersion of the Node the agent last read or patched
    /// ([`SimAgent::resource_version`]).
    version: SeenVersion,
    /// The deadline the world's index holds for this agent (`crate::world`'s agent
    /// deadlines), so that re-indexing finds the entry without a lookup by name.
    pub(crate) indexed_deadline: Option<Timestamp>,
    /// The names the timeline's events about the node carry ([`SimAgent::event_names`]).
    names: EventNames,
    /// The position of the node's group among the world's groups (in name order) when the
    /// agent last looked it up ([`SimAgent::group_in`]).
    group_at: usize,
}

/// The node's name and its group's, shared by the timeline's events about the node.
#[derive(Debug, Clone)]
struct EventNames {
    /// The node's name.
    node: Arc<str>,
    /// The group's name, once an event named it.
    group: Option<Arc<str>>,
}

impl SimAgent {
    /// The agent of a node that runs `generation`, started at `now`.
    pub fn running(node: &str, generation: &SimulatedGeneration, now: Timestamp) -> Self {
        let done = generation.steps.iter().map(|s| s.name.clone()).collect();
        let applied_keys = generation
            .steps
            .iter()
            .filter_map(|s| s.disruption_key.clone().map(|k| (s.name.clone(), k)))
            .collect();
        let files = StateFiles::applied(&generation.checksum, done, applied_keys);
        Self {
            machine: Agent::new(AgentConfig::new(node), files, now),
            applied: Some(generation.checksum.clone()),
            running: None,
            dormant: None,
            spare_checksum: String::new(),
            version: SeenVersion::default(),
            indexed_deadline: None,
            names: EventNames {
                node: Arc::from(node),
                group: None,
            },
            group_at: 0,
        }
    }

    /// The group named `name` among `groups`, as `groups.get(name)` finds it: the group at the
    /// position it had at the previous lookup when that one has this name (the groups seldom
    /// change, and stepping to a position costs less than comparing names on the way there),
    /// else a search by name, whose position is kept for the next lookup.
    pub(crate) fn group_in<'g>(
        &mut self,
        groups: &'g BTreeMap<String, SimGroup>,
        name: &str,
    ) -> Option<&'g SimGroup> {
        // Stepped to from the nearer end.
        let at = self.group_at;
        let hinted = match groups.len().checked_sub(at.saturating_add(1)) {
            Some(from_end) if from_end < at => groups.iter().nth_back(from_end),
            Some(_) => groups.iter().nth(at),
            None => None,
        };
        if let Some((key, group)) = hinted
            && key == name
        {
            return Some(group);
        }
        let (at, (_, group)) = groups
            .iter()
            .enumerate()
            .find(|(_, (key, _))| *key == name)?;
        self.group_at = at;
        Some(group)
    }

    /// The names a timeline event about this agent's node `node`, of group `group`, carries:
    /// the ones its earlier events carry when they are these names, new ones otherwise (and
    /// kept for the next events).
    pub(crate) fn event_names(&mut self, node: &str, group: &str) -> (Arc<str>, Arc<str>) {
        let names = &mut self.names;
        if *names.node != *node {
            names.node = Arc::from(node);
        }
        let group = match &names.group {
            Some(shared) if **shared == *group => Arc::clone(shared),
            _ => {
                let shared: Arc<str> = Arc::from(group);
                names.group = Some(Arc::clone(&shared));
                shared
            }
        };
        (Arc::clone(&names.node), group)
    }

    /// The node's state files, as the agent's writes left them: the agent's own view of them
    /// ([`Agent::files`]), which the driver's writes follow (it carries out every write the
    /// agent queues before the agent acts again; see the driver, `AgentEnv::drive_agent`).
    pub fn files(&self) -> &StateFiles {
        self.machine.files()
    }

    /// Whether the agent is dormant: it waits for an approval, its last poll read what its
    /// next one would read, and its polls are skipped until the world notices a change of its
    /// Node or its group's bundle (see the module docs).
    pub fn is_dormant(&self) -> bool {
        self.dormant.is_some()
    }

    /// The resourceVersion of the agent's Node `node` as the agent reads it: the one of its
    /// previous read while the Node did not change since, a new one when it did. The world
    /// changes a node only through `Arc::make_mut`, and the agent keeps a [`Weak`] to the
    /// node it last saw, so a change always makes another allocation (`make_mut` moves a node
    /// that only weak references share, and copies one that is shared) and the same
    /// allocation is the same Node; the weak reference keeps the allocation from being
    /// reused, not the Node alive. Like a real API server's, the version changes with any
    /// change of the Node, status included, and when the simulated API moved the node to
    /// write a new resourceVersion into it (`crate::api`, "Shared views"). No conflict can come
    /// from that here: the agent's patches follow its read in the same pass, with nothing in
    /// between.
    pub fn resource_version(&mut self, node: &Arc<Node>) -> String {
        self.version.current(node).to_owned()
    }

    /// Whether the node is NotReady because its step restarts the kubelet or reboots it.
    pub fn restarting(&self, now: Timestamp) -> bool {
        self.running
            .as_ref()
            .is_some_and(|r| r.effect != ImpactKind::None && r.applied_at <= now && now < r.done_at)
    }

    /// The next time the agent needs the driver: its timer or its step's next phase; for a
    /// dormant agent, the poll at which it sees a change noticed since it went dormant (none
    /// while nothing changed).
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if let Some(d) = &self.dormant {
            return d.due;
        }
        let step = self.running.as_ref().map(|r| {
            if r.restart_started || r.effect == ImpactKind::None {
                r.done_at
            } else {
                r.applied_at
            }
        });
        match (step, self.machine.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The resourceVersion of an agent's Node as the agent last read it
/// ([`SimAgent::resource_version`]): the Node it saw, and how many times the Node changed
/// between the agent's reads, spelled in decimal (spelled again only when it changes).
#[derive(Debug, Clone, Default)]
struct SeenVersion {
    /// The Node the agent last read or patched.
    seen: Option<Weak<Node>>,
    /// The last resourceVersion.
    count: u64,
    /// `count` in decimal.
    text: String,
}

impl SeenVersion {
    /// The resourceVersion of `node` ([`SimAgent::resource_version`]).
    fn current(&mut self, node: &Arc<Node>) -> &str {
        let same = self
            .seen
            .as_ref()
            .is_some_and(|seen| std::ptr::eq(seen.as_ptr(), Arc::as_ptr(node)));
        if !same {
            self.count = self.count.saturating_add(1);
            self.seen = Some(Arc::downgrade(node));
            self.text.clear();
            crate::text::Digits::of(self.count).push_to(&mut self.text);
        }
        &self.text
    }
}

/// What a dormant agent's polls would read, and its poll grid.
#[derive(Debug, Clone)]
struct Dormant {
    /// The first poll instant not reached yet: the agent's timer (core's
    /// [`Agent::next_deadline`]) when it went dormant. Its polls are at this instant plus a
    /// whole number of poll intervals.
    next_poll: Timestamp,
    /// The poll interval.
    period: Duration,
    /// The Node its last poll read (the same allocation is the same Node: the world changes a
    /// node only through `Arc::make_mut`, which moves or copies a node that this weak
    /// reference points to, so a change makes another allocation).
    node: Weak<Node>,
    /// The bundle its last poll fetched: the desired checksum and whether the group replaces
    /// machines.
    bundle: (String, bool),
    /// The poll at which a noticed change is first visible.
    due: Option<Timestamp>,
}

impl Dormant {
    /// The first poll at or after `t` (`strictly`: after `t`).
    fn first_poll(&self, t: Timestamp, strictly: bool) -> Timestamp {
        let base = self.next_poll;
        if t < base || (t == base && !strictly) {
            return base;
        }
        let period = i64::try_from(self.period.as_millis())
            .unwrap_or(i64::MAX)
            .max(1);
        let since = t.as_millis().saturating_sub(base.as_millis());
        // Whole intervals from `base` to the poll: `since / period` reaches `t` or just before
        // it; one more when it falls short (or strictly after `t` is asked).
        let mut k = since / period;
        if strictly || k.saturating_mul(period) < since {
            k = k.saturating_add(1);
        }
        Timestamp::from_millis(base.as_millis().saturating_add(k.saturating_mul(period)))
    }
}

/// Whether waking the agent of `n` would change nothing: it is up to date with the desired
/// bundle (its state files say so and nothing is left to write) and its Node carries the
/// checksum. The pass a wake starts would fetch the bundle (which verifies: a simulated
/// generation's checksum is its steps'), read the Node, find it annotated and sleep again
/// until the next wake — no request, no state file, no timeline event — so it is skipped
/// (unless dormant agents are forbidden, `lazy` false: [`World::set_lazy_agents`]).
fn wake_changes_nothing(lazy: bool, group: Option<&SimGroup>, n: &SimNode) -> bool {
    let machine = &n.agent.machine;
    // The checks that need no lookup first: most woken agents are not up to date.
    if !(lazy
        && n.agent.running.is_none()
        && machine.next_deadline().is_none()
        && machine.is_up_to_date())
    {
        return false;
    }
    let Some(desired) = group.map(SimGroup::desired) else {
        return false;
    };
    let files = machine.files();
    matches!(machine.status(), AgentStatus::UpToDate { checksum } if checksum == desired)
        && !files.first_run
        && files.configuration_checksum.as_deref() == Some(desired)
        && files
            .progress
            .as_ref()
            .is_some_and(|p| p.bundle.as_deref() == Some(desired))
        && n.node
            .annotations
            .get(keys::ANNOTATION_CONFIGURATION_CHECKSUM)
            .map(String::as_str)
            == Some(desired)
}

/// Makes the agent of `n` dormant when it just polled and sleeps for a poll interval while
/// waiting for an approval (the caller checked that polls may be skipped at all,
/// [`World::agents_may_sleep`]): its next polls read the same Node and bundle until a change
/// is noticed.
fn maybe_dormant(group: Option<&SimGroup>, now: Timestamp, n: &mut SimNode) {
    let period = n.agent.machine.config().poll_interval;
    let waiting = matches!(
        n.agent.machine.status(),
        AgentStatus::WaitingForApproval { .. } | AgentStatus::WaitingForDisruptionApproval { .. }
    );
    let polling = n.agent.machine.next_deadline() == Some(now + period);
    if !waiting || !polling || n.agent.running.is_some() || is_special(n) {
        return;
    }
    let Some(g) = group else {
        return;
    };
    // What `bundle_in` makes, in the buffer of the agent's last dormancy.
    let mut checksum = std::mem::take(&mut n.agent.spare_checksum);
    checksum.clear();
    checksum.push_str(g.desired());
    let bundle = (checksum, replaces_machines(g));
    debug_assert_eq!(bundle, bundle_in(g));
    n.agent.dormant = Some(Dormant {
        next_poll: now + period,
        period,
        node: Arc::downgrade(&n.node),
        bundle,
        due: None,
    });
}

/// The bundle an agent of `group` fetches, as a dormant agent remembers it.
fn bundle_of(world: &World, group: &str) -> Option<(String, bool)> {
    world.groups.get(group).map(bundle_in)
}

/// [`bundle_of`] of the group `g`.
fn bundle_in(g: &SimGroup) -> (String, bool) {
    (g.desired().to_owned(), replaces_machines(g))
}

/// Whether the group replaces machines (the bundle's `rolling_update`).
fn replaces_machines(g: &SimGroup) -> bool {
    g.group.spec.approval_mode() == ApprovalMode::RollingUpdate
}

impl World {
    /// Lets the agents that are due act, in node name order: `due` are the nodes whose agent
    /// was woken (`woken`), whose timer expired or whose step reached its next phase (the
    /// world's index of agent deadlines); any other agent would do nothing now. Each node is
    /// looked up once for its whole pass (the world's parts borrowed apart, [`AgentEnv`]).
    pub(crate) fn step_agents(&mut self, due: &[usize], woken: &[usize]) {
        let now = self.now;
        let wake = self.agent_wake_settings();
        let (nodes, mut env) = self.agent_parts();
        for &at in due {
            if let Some((name, id, n)) = nodes.entry_at_mut(at) {
                env.act(name, id, n, woken.binary_search(&at).is_ok(), wake);
            }
        }
        self.agents_stepped_at = Some(now);
    }

    /// What an agent's pass needs to know of the world's settings ([`AgentEnv::act`]): whether
    /// waking an up-to-date agent may be skipped, and whether agents may go dormant.
    pub(crate) fn agent_wake_settings(&self) -> AgentWake {
        AgentWake {
            lazy: self.lazy_agents,
            may_sleep: self.agents_may_sleep(),
        }
    }

    /// Carries out the agent's actions until it waits for its timer or a simulated step
    /// ([`AgentEnv::drive_agent`]).
    pub(crate) fn drive_agent(&mut self, name: &str) {
        let (nodes, mut env) = self.agent_parts();
        if let Some(n) = nodes.get_mut(name) {
            let group = env.groups.get(&n.group);
            env.drive_agent(name, n, group);
        }
    }

    /// Declares that what `name`'s agent reads (its Node's annotations, labels or
    /// `unschedulable`, its group's bundle, its darkness or scripted readiness) changed now: a
    /// dormant agent polls at the first instant of its poll grid at which the change is
    /// visible (the current instant if the agents have not acted in it yet). The world's
    /// methods and ports call it; code that changes nodes directly and is not followed by
    /// [`World::invalidate_indexes`] must too.
    pub fn agent_inputs_changed(&mut self, name: &str) {
        self.notice_agent_inputs(name);
    }

    /// [`World::agent_inputs_changed`], answering the node's id (`None`: no such node).
    pub(crate) fn notice_agent_inputs(&mut self, name: &str) -> Option<NodeId> {
        let at = self.nodes.position_of_name(name)?;
        self.notice_agent_inputs_at(at)
    }

    /// [`World::notice_agent_inputs`] for the node at position `at` in name order.
    pub(crate) fn notice_agent_inputs_at(&mut self, at: usize) -> Option<NodeId> {
        let strictly = self.agents_stepped_at == Some(self.now);
        let now = self.now;
        self.update_agent_at(at, |_, n| match n.agent.dormant.as_mut() {
            Some(d) if d.due.is_none() => {
                d.due = Some(d.first_poll(now, strictly));
                true
            }
            _ => false,
        })
    }

    /// For [`World::invalidate_indexes`]: the poll at which `name`'s dormant agent sees a
    /// change made behind the world's back (its Node is another `Arc`, its group's bundle
    /// changed, or it became dark or scripted); `None` when it is not dormant, already due, or
    /// nothing changed. Changes behind the world's back are made between instants, after the
    /// agents acted in the last one.
    pub(crate) fn unnoticed_agent_change(&self, n: &SimNode) -> Option<Timestamp> {
        let d = n.agent.dormant.as_ref()?;
        if d.due.is_some() {
            return None;
        }
        let changed = !std::ptr::eq(d.node.as_ptr(), Arc::as_ptr(&n.node))
            || bundle_of(self, &n.group).as_ref() != Some(&d.bundle)
            || is_special(n);
        let strictly = self.agents_stepped_at == Some(self.now);
        changed.then(|| d.first_poll(self.now, strictly))
    }

    /// Sets the deadline [`World::unnoticed_agent_change`] found.
    pub(crate) fn set_dormant_due(&mut self, name: &str, due: Timestamp) {
        if let Some(d) = self
            .nodes
            .get_mut(name)
            .and_then(|n| n.agent.dormant.as_mut())
        {
            d.due = Some(due);
        }
    }
}

impl World {
    /// The names a timeline event about node `name` carries, shared with the node's other
    /// events: the node's and its group's (`None` when there is no node `name`, whose name
    /// is then copied).
    pub(crate) fn event_names(&mut self, name: &str) -> (Arc<str>, Option<Arc<str>>) {
        match self.nodes.get_mut_unlogged(name) {
            Some(n) => {
                let (node, group) = n.agent.event_names(name, &n.group);
                (node, Some(group))
            }
            None => (Arc::from(name), None),
        }
    }
}

/// The world's settings an agent's pass reads ([`World::agent_wake_settings`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AgentWake {
    /// Waking an agent that would change nothing may be skipped.
    lazy: bool,
    /// Agents waiting for an approval may go dormant ([`World::agents_may_sleep`]).
    may_sleep: bool,
}

impl AgentEnv<'_> {
    /// Lets the agent of node `name` (`n`) act now (it is due: `woken` or its deadline came),
    /// then re-indexes its deadline; a dark node's agent does nothing.
    pub(crate) fn act(
        &mut self,
        name: &str,
        id: NodeId,
        n: &mut SimNode,
        woken: bool,
        wake: AgentWake,
    ) {
        let now = self.now;
        if n.is_dark(now) {
            return;
        }
        // A dormant agent is due because a change was noticed (at a point of its poll
        // grid, where core's expired timer makes it poll) or it was woken.
        if let Some(d) = n.agent.dormant.take() {
            n.agent.spare_checksum = d.bundle.0;
        }
        // The node's group, looked up once for the pass (the groups do not change during it).
        let group = n.agent.group_in(self.groups, &n.group);
        if woken && !wake_changes_nothing(wake.lazy, group, n) {
            n.agent.machine.handle_wake(now);
        }
        n.agent.machine.handle_timeout(now);
        if n.agent.running.is_some() {
            self.advance_step(name, n);
        }
        self.drive_agent(name, n, group);
        if wake.may_sleep {
            maybe_dormant(group, now, n);
        }
        self.reindex(id, n);
    }

    /// Appends a timeline event about node `name` (`n`) at the current virtual time (as
    /// [`World::record_in`]).
    fn record(&mut self, kind: &'static str, name: &str, n: &mut SimNode, message: String) {
        let (node, group) = n.agent.event_names(name, &n.group);
        self.timeline.events.push(TimelineEvent {
            at_ms: self.now.as_millis() - self.start.as_millis(),
            kind: kind.into(),
            node: Some(node.into()),
            group: Some(group.into()),
            pod: None,
            message,
        });
    }

    /// Re-indexes the deadline of `n`'s agent (node `id`) after its pass.
    fn reindex(&mut self, id: NodeId, n: &mut SimNode) {
        crate::world::reindex_deadline(self.agent_due, id, &mut n.agent);
    }

    /// Moves the node's simulated step on: the restart begins, or the step ends.
    fn advance_step(&mut self, name: &str, n: &mut SimNode) {
        let now = self.now;
        // The step's times and effect are read in place: its name is moved out only when it
        // ends.
        let Some(r) = n.agent.running.as_mut() else {
            return;
        };
        let done_at = r.done_at;
        if r.effect != ImpactKind::None && !r.restart_started && r.applied_at <= now {
            r.restart_started = true;
            let secs = r.done_at.saturating_since(r.applied_at).as_secs();
            let (kind, what) = if r.effect == ImpactKind::Disruptive {
                self.stats.disruptions += 1;
                ("agent.reboot", "reboots the node")
            } else {
                ("agent.kubelet-restart", "restarts the kubelet")
            };
            let secs = crate::text::Digits::of(secs);
            let message = crate::text::concat(&["agent ", what, " (", secs.as_str(), "s)"]);
            self.record(kind, name, n, message);
        }
        if done_at <= now
            && let Some(r) = n.agent.running.take()
        {
            n.agent.machine.handle_input(
                AgentInput::StepFinished(StepOutcome {
                    step: r.name,
                    exit_code: Some(0),
                    stderr: String::new(),
                }),
                now,
            );
        }
    }

    /// Carries out the agent's actions until it waits for its timer or a simulated step:
    /// the requests and state files in place, a step, an event or the timeline events of a
    /// patch or an update on the same node.
    pub(crate) fn drive_agent(&mut self, name: &str, n: &mut SimNode, group: Option<&SimGroup>) {
        let now = self.now;
        loop {
            let action = loop {
                let agent = &mut n.agent;
                let Some(action) = agent.machine.poll_lean_action() else {
                    return;
                };
                match action {
                    LeanAction::FetchBundle => {
                        drop(action);
                        match group {
                            Some(g) => {
                                let desired = g.generations.desired();
                                agent.machine.handle_bundle_fetched(
                                    &desired.checksum,
                                    &desired.steps,
                                    replaces_machines(g),
                                    now,
                                );
                            }
                            None => {
                                let cause = Cause::msg(format!("no group {}", n.group));
                                agent
                                    .machine
                                    .handle_input(AgentInput::Bundle(Err(cause)), now);
                            }
                        }
                    }
                    LeanAction::ReadNode => {
                        drop(action);
                        let version = agent.version.current(&n.node);
                        agent
                            .machine
                            .handle_node_read(version, &n.node.annotations, now);
                    }
                    LeanAction::PatchNode(patch) => {
                        if agent.version.current(&n.node) != patch.resource_version() {
                            drop(patch);
                            agent
                                .machine
                                .handle_input(AgentInput::Patched(PatchOutcome::Conflict), now);
                            continue;
                        }
                        let annotations = &mut Arc::make_mut(&mut n.node).annotations;
                        // Which of `ASKS` the patch sets, noted while its changes are applied.
                        let mut asked = [false; 3];
                        for (key, value) in patch.changes() {
                            note_ask(&mut asked, key, value);
                            set_annotation(annotations, key, value);
                        }
                        debug_assert_eq!(asked, ASKS.map(|key| patch.sets(key)));
                        drop(patch);
                        let version = agent.version.current(&n.node);
                        // The agent's answer records nothing: it may come before the
                        // patch's timeline events.
                        agent.machine.handle_patch_applied(version, now);
                        break Driven::Patched(asked);
                    }
                    LeanAction::StoreBundle(_)
                    | LeanAction::WriteProgress(_)
                    | LeanAction::Action(
                        AgentAction::StoreBundle { .. }
                        | AgentAction::WriteProgress(_)
                        | AgentAction::RemoveChecksumFile
                        | AgentAction::RemoveFirstRun,
                    ) => {}
                    LeanAction::Action(AgentAction::WriteChecksumFile(checksum)) => {
                        // The action's checksum is kept as the applied one (not copied).
                        agent.applied = Some(checksum);
                        break Driven::Updated;
                    }
                    LeanAction::Action(other) => {
                        // A lean poll hands requests other than a step's out lean (above).
                        debug_assert!(
                            !matches!(other, AgentAction::FetchBundle | AgentAction::ReadNode),
                            "{other}"
                        );
                        break Driven::Other(other);
                    }
                }
            };
            match action {
                Driven::Patched(asked) => self.record_patch(name, n, asked, group),
                Driven::Updated => {
                    self.stats.updates_completed += 1;
                    let checksum = n.agent.applied.as_deref().unwrap_or_default();
                    let short = checksum.get(..12).unwrap_or(checksum);
                    let message = crate::text::concat(&["node runs ", short]);
                    self.record("agent.updated", name, n, message);
                }
                Driven::Other(AgentAction::RunStep { name: step }) => {
                    self.start_step(name, n, step, group);
                }
                Driven::Other(AgentAction::EmitEvent(e)) => {
                    let message = crate::text::concat(&[&e.reason, ": ", &e.note]);
                    self.record("agent.event", name, n, message);
                }
                Driven::Other(_) => {}
            }
        }
    }

    /// Timeline events for the agent's requests (what a person watching the Node would see).
    /// `group` is the group of node `name` (`n`).
    fn record_patch(
        &mut self,
        name: &str,
        n: &mut SimNode,
        asked: [bool; 3],
        group: Option<&SimGroup>,
    ) {
        let [approval, disruption, rolling] = asked;
        if approval {
            let desired = group
                .map(|g| g.generations.desired().short())
                .unwrap_or_default();
            let message = crate::text::concat(&["agent needs ", desired, ", asks for approval"]);
            self.record("agent.waiting-for-approval", name, n, message);
        }
        for (key, set) in [
            (keys::ANNOTATION_DISRUPTION_REQUIRED, disruption),
            (keys::ANNOTATION_ROLLING_UPDATE, rolling),
        ] {
            if set {
                let message = crate::text::concat(&["agent asks for a disruption (", key, ")"]);
                self.record("agent.disruption-required", name, n, message);
            }
        }
    }

    /// Starts simulating a step: its changes are in place after the agent delay (plus jitter
    /// and the node's extra delay), then the node restarts as the change requires.
    fn start_step(&mut self, name: &str, n: &mut SimNode, step: String, group: Option<&SimGroup>) {
        let now = self.now;
        let jitter = self.spec.jitter.0;
        let jitter_ms = self
            .rng
            .below(u64::try_from(jitter.as_millis()).unwrap_or(0) + 1);
        let effect = group
            .map(|g| g.generations.impact_from(n.agent.applied.as_deref()))
            .unwrap_or_default();
        let applied_at =
            now + self.spec.delay.0 + Duration::from_millis(jitter_ms) + n.extra_agent_delay;
        let restart = match effect {
            ImpactKind::None => Duration::ZERO,
            ImpactKind::KubeletRestart => self.spec.kubelet_restart.0,
            ImpactKind::Disruptive => self.spec.reboot.0,
        };
        let target = group
            .map(|g| g.generations.desired().short())
            .unwrap_or_default();
        let secs = crate::text::Digits::of(applied_at.saturating_since(now).as_secs());
        let message = crate::text::concat(&[
            "agent applies ",
            target,
            " (",
            effect.as_str(),
            "), done in ",
            secs.as_str(),
            "s",
        ]);
        n.agent.running = Some(RunningStep {
            name: step,
            applied_at,
            done_at: applied_at + restart,
            effect,
            restart_started: false,
        });
        self.record("agent.applying", name, n, message);
    }
}

/// The annotations whose setting by an agent's patch the timeline records, in the order of
/// [`AgentEnv::record_patch`]'s flags.
const ASKS: [&str; 3] = [
    keys::ANNOTATION_WAITING_FOR_APPROVAL,
    keys::ANNOTATION_DISRUPTION_REQUIRED,
    keys::ANNOTATION_ROLLING_UPDATE,
];

/// Notes in `asked` (flags in the order of [`ASKS`]) that a patch changes the annotation `key`
/// to `value`: a flag is set when the change sets its annotation
/// ([`nodemgr_core::agent::PatchRequest::sets`]).
fn note_ask(asked: &mut [bool; 3], key: &str, value: Option<&str>) {
    if value.is_some() {
        for (flag, ask) in asked.iter_mut().zip(ASKS) {
            *flag |= key == ask;
        }
    }
}

/// Sets (`Some`) or removes (`None`) the annotation `key` as a patch does
/// ([`nodemgr_core::agent::NodePatch::apply_to`]), with one search of the map (the agent's
/// patches set annotations the Node does not have), reusing the stored value when the
/// annotation is there.
fn set_annotation(annotations: &mut BTreeMap<String, String>, key: &str, value: Option<&str>) {
    match value {
        Some(value) => match annotations.entry(key.to_owned()) {
            Entry::Occupied(mut old) => {
                let old = old.get_mut();
                old.clear();
                old.push_str(value);
            }
            Entry::Vacant(slot) => {
                slot.insert(value.to_owned());
            }
        },
        None => {
            annotations.remove(key);
        }
    }
}

/// An agent action [`AgentEnv::drive_agent`] finishes after its requests' loop.
enum Driven {
    /// A patch was applied and the agent told: its timeline events are recorded (which of
    /// [`ASKS`] it set).
    Patched([bool; 3]),
    /// The checksum file was written (its checksum is now the agent's `applied`): the update
    /// is counted and recorded.
    Updated,
    /// A step to start or an event to record.
    Other(AgentAction),
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemgr_core::agent::SimulatedGenerations;
    use proptest::prelude::*;

    /// What happens to an agent's Node between the agent's reads.
    #[derive(Debug, Clone)]
    enum Op {
        /// The agent reads its Node's resourceVersion.
        Read,
        /// The world changes the node (`Arc::make_mut`, as every change of a node).
        Change(u8),
        /// Someone (the API server's versioned copy, a list) shares the node.
        Share,
        /// The sharers drop their copies.
        Unshare,
        /// The node is replaced by a new one with the same content (deleted and registered
        /// again): the old allocation is freed and may be reused.
        Replace,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => Just(Op::Read),
            2 => any::<u8>().prop_map(Op::Change),
            1 => Just(Op::Share),
            1 => Just(Op::Unshare),
            1 => Just(Op::Replace),
        ]
    }

    /// A group named `name` whose generations tell it apart from the others (`mark`).
    fn sim_group(name: &str, mark: usize) -> SimGroup {
        SimGroup {
            group: Default::default(),
            zones: Vec::new(),
            capacity: Default::default(),
            labels: BTreeMap::new(),
            generations: SimulatedGenerations::new(
                name,
                &format!("{name}-{mark}"),
                ImpactKind::None,
            ),
            next_index: mark,
        }
    }

    /// What happens between an agent's lookups of its group.
    #[derive(Debug, Clone)]
    enum GroupOp {
        /// The agent looks up the group with this name.
        Lookup(String),
        /// A group with this name is added (or replaced).
        Add(String),
        /// The group with this name is removed.
        Remove(String),
    }

    fn group_name() -> impl Strategy<Value = String> {
        "g[0-9]{1,2}"
    }

    fn group_op() -> impl Strategy<Value = GroupOp> {
        prop_oneof![
            4 => group_name().prop_map(GroupOp::Lookup),
            1 => group_name().prop_map(GroupOp::Add),
            1 => group_name().prop_map(GroupOp::Remove),
        ]
    }

    /// An annotation key a patch may change: one of [`ASKS`] or another.
    fn patch_key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(ASKS.to_vec()).prop_map(str::to_owned),
            Just(keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned()),
            Just(keys::ANNOTATION_APPROVED.to_owned()),
            "[a-z./-]{0,12}",
        ]
    }

    proptest! {
        /// The flags noted change by change ([`note_ask`]) are, for each of [`ASKS`], whether
        /// some change sets that annotation (what `PatchRequest::sets` answers).
        #[test]
        fn noted_asks_are_the_annotations_set(
            changes in prop::collection::vec((patch_key(), prop::option::of("[xy]{0,2}")), 0..5),
        ) {
            let mut asked = [false; 3];
            for (key, value) in &changes {
                note_ask(&mut asked, key, value.as_deref());
            }
            let sets = ASKS.map(|ask| changes.iter().any(|(k, v)| k == ask && v.is_some()));
            prop_assert_eq!(asked, sets);
        }

        /// Looking a group up from the position of the previous lookup
        /// ([`SimAgent::group_in`]) finds what a search by name finds, whatever groups were
        /// added or removed in between and whichever group is asked for.
        #[test]
        fn the_group_is_the_one_a_search_by_name_finds(
            initial in prop::collection::btree_set(group_name(), 0..12),
            ops in prop::collection::vec(group_op(), 1..60),
        ) {
            let mut groups: BTreeMap<String, SimGroup> = initial
                .iter()
                .enumerate()
                .map(|(mark, name)| (name.clone(), sim_group(name, mark)))
                .collect();
            let mut agent = SimAgent::running(
                "n-0",
                SimulatedGenerations::new("g", "g-gen0", ImpactKind::None).desired(),
                Timestamp::EPOCH,
            );
            for (mark, op) in ops.iter().enumerate() {
                match op {
                    GroupOp::Lookup(name) => {
                        let found = agent.group_in(&groups, name).map(SimGroup::desired);
                        let searched = groups.get(name).map(SimGroup::desired);
                        prop_assert_eq!(found, searched, "{} after {:?}", name, ops);
                    }
                    GroupOp::Add(name) => {
                        groups.insert(name.clone(), sim_group(name, 100 + mark));
                    }
                    GroupOp::Remove(name) => {
                        groups.remove(name);
                    }
                }
            }
        }

        /// The names an agent's events carry ([`SimAgent::event_names`]) are the node's and
        /// group's it is asked about, also when they are not those of its earlier events.
        #[test]
        fn the_event_names_are_the_ones_asked_about(
            asked in prop::collection::vec(("n-[0-2]", group_name()), 1..30),
        ) {
            let mut agent = SimAgent::running(
                "n-0",
                SimulatedGenerations::new("g", "g-gen0", ImpactKind::None).desired(),
                Timestamp::EPOCH,
            );
            for (node, group) in &asked {
                let (shared_node, shared_group) = agent.event_names(node, group);
                prop_assert_eq!(&*shared_node, node.as_str());
                prop_assert_eq!(&*shared_group, group.as_str());
            }
        }

        /// Setting and removing annotations one change at a time, as the driver applies an
        /// agent's patch ([`set_annotation`]), leaves the map [`NodePatch::apply_to`] leaves.
        ///
        /// [`NodePatch::apply_to`]: nodemgr_core::agent::NodePatch::apply_to
        #[test]
        fn set_annotation_applies_a_change_as_a_patch_does(
            base in prop::collection::btree_map("[a-c]", "[x-z]{0,3}", 0..4),
            changes in prop::collection::vec(("[a-c]", prop::option::of("[x-z]{0,3}")), 0..6),
        ) {
            let mut driven = base.clone();
            let mut patched = base;
            for (key, value) in &changes {
                set_annotation(&mut driven, key, value.as_deref());
                let patch = nodemgr_core::agent::NodePatch {
                    resource_version: "1".into(),
                    set: value.iter().map(|v| (key.clone(), v.clone())).collect(),
                    remove: if value.is_none() { vec![key.clone()] } else { Vec::new() },
                };
                patch.apply_to(&mut patched);
                prop_assert_eq!(&driven, &patched);
            }
        }

        /// The resourceVersion the agent reads changes exactly when its Node was changed or
        /// replaced since its previous read, whoever else holds the node (a node shared only
        /// through the agent's weak reference is moved by `make_mut`, not changed in place;
        /// a freed allocation is not mistaken for the node it held).
        #[test]
        fn the_version_changes_exactly_when_the_node_did(ops in prop::collection::vec(op(), 1..60)) {
            let mut agent = SimAgent::running(
                "n-0",
                SimulatedGenerations::new("g", "g-gen0", ImpactKind::None).desired(),
                Timestamp::EPOCH,
            );
            let mut node = Arc::new(Node { name: "n-0".into(), ..Node::default() });
            let mut sharers: Vec<Arc<Node>> = Vec::new();
            let mut last: Option<String> = None;
            let mut changed = false;
            for op in &ops {
                match op {
                    Op::Read => {
                        let version = agent.resource_version(&node);
                        if let Some(last) = &last {
                            prop_assert_eq!(changed, *last != version, "after {:?}", ops);
                        }
                        prop_assert_eq!(agent.resource_version(&node), version.clone());
                        last = Some(version);
                        changed = false;
                    }
                    Op::Change(v) => {
                        Arc::make_mut(&mut node)
                            .annotations
                            .insert("k".into(), v.to_string());
                        changed = true;
                    }
                    Op::Share => sharers.push(Arc::clone(&node)),
                    Op::Unshare => sharers.clear(),
                    Op::Replace => {
                        let content = Node::clone(&node);
                        sharers.clear();
                        // The old node is freed before the new one is made, so that the
                        // allocator may hand its memory to the new one.
                        let placeholder = Arc::new(Node::default());
                        drop(std::mem::replace(&mut node, placeholder));
                        let fresh = Arc::new(content);
                        node = fresh;
                        changed = true;
                    }
                }
            }
        }
    }
}
