//! The update executor (re-exported as [`crate::executor`]'s update items): one reconcile step of the update flow of every NodeGroup, carried out
//! over the cluster port ([`crate::ports::ClusterApi`]). It joins the planner
//! ([`crate::update::plan_updates_detailed`]) and the drain state machine ([`crate::drain::Drain`])
//! to the API: snapshot → plan → apply the plan's commands → start, advance and finish drains
//! (docs/deckhouse.md §3.2–§3.3).
//!
//! The executor is generic over the port, so the simulator (`nodemgr-sim`) and the Kubernetes
//! adapter (`nodemgr-k8s`) run this same code. It never reads a clock: every step gets `now`.
//! Between steps it keeps the drains it runs ([`UpdateExecutor::drains`]) and its view of the
//! nodes (brought up to date from the port's change feed each step); everything else is read
//! again from the cluster each step.
//!
//! # One step ([`UpdateExecutor::step`])
//! 1. **Snapshot**: node groups, nodes and desired configuration checksums. A failure here ends
//!    the step with an error and changes nothing. The nodes come from the port's cache
//!    ([`ClusterRead::list_nodes_shared`](crate::ports::ClusterRead::list_nodes_shared), the
//!    nodes of [`ClusterRead::list_nodes`](crate::ports::ClusterRead::list_nodes) as
//!    `Arc<Node>`), read as what changed since the previous step
//!    ([`ClusterRead::node_changes_since`](crate::ports::ClusterRead::node_changes_since),
//!    applied to the view the executor keeps; a port without a feed answers the whole list),
//!    and are planned from only when they are at
//!    least as new as every write this executor made and every direct read it did
//!    ([`KnownVersions`], read-your-writes); otherwise, and on the first step of a new
//!    executor (which does not ask the feed then), they are read directly from the API
//!    ([`ClusterRead::list_nodes_fresh_shared`](crate::ports::ClusterRead::list_nodes_fresh_shared))
//!    and that list becomes the view (the feed then starts over with a whole list).
//! 2. **Plan and apply**: [`crate::update::plan_updates_detailed`] at `now`; each command becomes
//!    one node patch ([`command_patch`]) carrying the resourceVersion of the node the plan saw
//!    as a precondition. When the node changed since (HTTP 409, [`ClusterError::Conflict`]),
//!    the rest of the plan is dropped, the nodes are read directly from the API and the
//!    planner runs again (at most [`MAX_REPLANS`] times per step). `Approve` sets `approved` and removes
//!    `waiting-for-approval`; `StartDrain` sets `draining=bashible`; `ApproveDisruption` sets
//!    `disruption-approved`, removes `disruption-required`, and with `cordon` also cordons and
//!    sets `drained=bashible`; `Finish` removes every update annotation and uncordons when
//!    nodemgr cordoned. `ReplaceMachine` is reported only ([`ExecutorEvent::Applied`]): deleting
//!    the machine is the machine port's job (the simulator replaces the node itself). A failed
//!    command is reported and the others still run; the planner's guarantee that a partially
//!    applied plan never overshoots `maxConcurrent` makes that safe.
//!    A group is not planned again when its previous plan had no command, it has no disruption
//!    window and the group, its desired checksum and its nodes (none added or removed, none
//!    changed in what the planner reads of it: update marks, checksum, readiness,
//!    `unschedulable`) are unchanged: its plan would be the same
//!    ([`UpdateExecutor::set_skip_unchanged`]).
//! 3. **Drains**: every node carrying `update.node.deckhouse.io/draining` (any source, as
//!    Deckhouse's `handle_draining`) gets a [`Drain`] if it has none (so drains survive an
//!    executor restart, with the timeout counted from the restart); a drain whose node vanished
//!    or lost the annotation is dropped. Each drain is advanced: cordon (again, whenever the node
//!    is found schedulable), evictions of all the node's due pods **concurrently**, refused ones
//!    retried every `eviction_retry` (20 s), and after the timeout (5 min, or the group's
//!    `nodeDrainTimeoutSecond`) forced deletions with grace period 0 and a UID precondition. A
//!    finished drain (completed or timed out, docs/deckhouse.md §3.3) replaces `draining=<source>` by
//!    `drained=<source>`. A `drained=user` on a schedulable node is removed (docs/deckhouse.md §3.3).
//!    Only the nodes carrying `draining` or a person's `drained` are looked at (nothing is
//!    done to the others), in the port's list order (name order for a port listing by name);
//!    which nodes do is read again only for the nodes that changed since the previous step
//!    (and for those this step patched).
//!
//! # Cost of a step
//! With a port that answers the change feed incrementally (the simulator's), a step does work
//! for what changed only: the nodes changed since the previous step are read into the view
//! (their facts read again in place), read-your-writes looks at the nodes changed or written
//! since its last check, the groups with a node changed in what the planner reads (or a
//! window) are planned again, and the drains look at the drain-marked nodes. Nothing is done
//! per unchanged node. A port answering whole lists (the default) costs reading every node's
//! facts again and comparing them with the view's, as a list did (`nodemgr-sim/README.md`,
//! "Performance").
//!
//! The view keeps what a step reads of each node (its facts), never the node: a port that
//! shares its nodes as `Arc`s is left their only holder between steps (the simulator's world
//! then changes a node without copying it). The nodes a step patches are kept as the patch
//! returned them for that step only (the drain half reads them).
//!
//! # Guarantees
//! - Only the planner decides approvals; the executor adds none, so the planner's limits
//!   (`maxConcurrent`, the all-Ready gate, `Manual` never approving a disruption) hold for what
//!   reaches the cluster — also when the port's cache lags behind the API: every decision is
//!   planned from a view that includes the executor's own earlier writes and is written only
//!   if the node is still the version that view showed (`docs/optimistic-concurrency.md`).
//! - No pod is deleted without the eviction API before its drain's timeout; DaemonSet, mirror
//!   and finished pods are never evicted nor deleted (both from [`Drain`]).
//! - Steps are idempotent: a step that failed halfway is completed by the next one.
//!
//! # Timing
//! Call [`UpdateExecutor::step`] every reconcile period `P`, and additionally at
//! [`UpdateExecutor::next_deadline`] (the earliest eviction retry or drain timeout) for exact
//! retry timing. Each step uses the `now` it is given for every decision.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::node_table::{NodeFacts, NodeTable};
use super::scaling::disruption_event;
use crate::disruption::DisruptionReason;
use crate::drain::{Drain, DrainCommand, DrainConfig, DrainOutcome, EvictionOutcome, map_of};
use crate::model::{Node, NodeGroup, Timestamp, keys};
use crate::ports::{
    ClusterApi, ClusterError, EventApi, EventKind, EvictionResult, NodeChanges, NodePatch, NodePod,
    NodeRevision, ObjectRef, PodRef, Precondition, RecordedEvent,
};
use crate::read_your_writes::KnownVersions;
use crate::update::{
    DrainSource, UpdateCommand, UpdateMarks, UpdatePlan, plan_group_members_with_inert,
};

/// How many times one step plans again after a decision met a changed node (HTTP 409).
pub const MAX_REPLANS: usize = 3;

/// A drain the executor runs, with what it remembers about the pods it started with.
#[derive(Debug, Clone)]
pub struct ActiveDrain {
    /// The state machine.
    pub drain: Drain,
    /// The node's group (empty when unlabelled).
    pub group: String,
    /// The `draining` annotation's value when the drain started; `drained` gets the same.
    pub source: String,
    /// UIDs of the pods when the drain started (`namespace/name` → UID), for preconditions.
    pub pod_uids: BTreeMap<String, String>,
}

/// Something the executor did or saw in a step, for logs, metrics and the simulator's timeline.
#[derive(Debug, Clone, PartialEq)]
pub enum ExecutorEvent {
    /// An update command was applied (its patch succeeded; `ReplaceMachine` is only decided).
    Applied {
        /// The node's group.
        group: String,
        /// The command.
        command: UpdateCommand,
    },
    /// A drain started.
    DrainStarted {
        /// The node.
        node: String,
        /// The node's group.
        group: String,
        /// Pods the drain will evict.
        pods: usize,
    },
    /// The node was cordoned for its drain.
    Cordoned {
        /// The node.
        node: String,
    },
    /// An eviction was accepted.
    Evicted {
        /// The node.
        node: String,
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// An eviction was refused (a PodDisruptionBudget) or failed; it is retried.
    EvictionRefused {
        /// The node.
        node: String,
        /// The pod, `namespace/name`.
        pod: String,
        /// Why.
        reason: String,
        /// When the retry is due.
        retry_at: Timestamp,
    },
    /// A pod was deleted forcibly after the drain timeout.
    ForceDeleted {
        /// The node.
        node: String,
        /// The pod, `namespace/name`.
        pod: String,
    },
    /// A drain ended; `drained` was set.
    DrainFinished {
        /// The node.
        node: String,
        /// The node's group.
        group: String,
        /// How it ended.
        outcome: DrainOutcome,
    },
    /// A drain was dropped: its node vanished or lost its `draining` annotation.
    DrainAbandoned {
        /// The node.
        node: String,
        /// Why.
        reason: String,
    },
    /// A person's `drained=user` was removed from a node they uncordoned.
    DrainedMarkRemoved {
        /// The node.
        node: String,
    },
}

impl ExecutorEvent {
    /// The node the event is about.
    pub fn node(&self) -> &str {
        match self {
            Self::Applied { command, .. } => command.node(),
            Self::DrainStarted { node, .. }
            | Self::Cordoned { node }
            | Self::Evicted { node, .. }
            | Self::EvictionRefused { node, .. }
            | Self::ForceDeleted { node, .. }
            | Self::DrainFinished { node, .. }
            | Self::DrainAbandoned { node, .. }
            | Self::DrainedMarkRemoved { node } => node,
        }
    }
}

impl ExecutorEvent {
    /// The message of an event whose message is text only, in pieces to write one after the
    /// other (the last ones possibly empty); `None` for the events with a number or an
    /// outcome in it ([`ExecutorEvent::DrainStarted`], [`ExecutorEvent::DrainFinished`]).
    fn pieces(&self) -> Option<[&str; 5]> {
        Some(match self {
            Self::Applied { command, .. } => {
                let [before, node, after] = command.pieces();
                [before, node, after, "", ""]
            }
            Self::DrainFinished {
                node,
                outcome: DrainOutcome::Completed,
                ..
            } => ["node ", node, ": ", DrainOutcome::COMPLETED, ""],
            Self::DrainStarted { .. } | Self::DrainFinished { .. } => return None,
            Self::Cordoned { node } => ["node ", node, " cordoned", "", ""],
            Self::Evicted { pod, .. } => ["pod ", pod, " evicted", "", ""],
            Self::EvictionRefused { pod, reason, .. } => {
                ["eviction of pod ", pod, " refused (", reason, ")"]
            }
            Self::ForceDeleted { pod, .. } => [
                "pod ",
                pod,
                " deleted forcibly after the drain timeout",
                "",
                "",
            ],
            Self::DrainAbandoned { node, reason } => {
                ["drain of node ", node, " dropped: ", reason, ""]
            }
            Self::DrainedMarkRemoved { node } => [
                "removed drained=user from node ",
                node,
                ", which is schedulable again",
                "",
                "",
            ],
        })
    }

    /// The event's message, as `Display` writes it: put together from its pieces of text
    /// into a string of the right size, without a format string to interpret where the
    /// message is text only (the simulator's timeline makes one per event).
    pub fn message(&self) -> String {
        if let Some(pieces) = self.pieces() {
            return concat(&pieces);
        }
        match self {
            Self::DrainStarted { node, pods, .. } => {
                let mut digits = itoa::Buffer::new();
                concat(&[
                    "drain of node ",
                    node,
                    " started (",
                    digits.format(*pods),
                    " pod(s) to evict)",
                ])
            }
            _ => message(self),
        }
    }
}

/// `pieces` one after the other, in a string of their length.
pub(crate) fn concat(pieces: &[&str]) -> String {
    let mut out = String::with_capacity(pieces.iter().map(|p| p.len()).sum());
    for piece in pieces {
        out.push_str(piece);
    }
    out
}

impl fmt::Display for ExecutorEvent {
    // Pieces written as they are, without a format string to interpret where that is simple.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(pieces) = self.pieces() {
            return pieces.iter().try_for_each(|p| f.write_str(p));
        }
        match self {
            Self::DrainStarted { node, pods, .. } => {
                write!(f, "drain of node {node} started ({pods} pod(s) to evict)")
            }
            Self::DrainFinished { node, outcome, .. } => {
                ["node ", node, ": "]
                    .iter()
                    .try_for_each(|p| f.write_str(p))?;
                fmt::Display::fmt(outcome, f)
            }
            // Text only: written above.
            _ => Ok(()),
        }
    }
}

/// `value` formatted into a string made large enough at once (a message, without the
/// reallocations of `to_string` growing it piece by piece).
pub(crate) fn message(value: &impl fmt::Display) -> String {
    use fmt::Write as _;
    let mut out = String::with_capacity(96);
    // Writing into a String never fails.
    let _ = write!(out, "{value}");
    out
}

/// An action that failed in a step; the next step tries again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failed to {action} on node {node}")]
pub struct ActionError {
    /// The node.
    pub node: String,
    /// What was attempted (`approve update`, `evict pod ns/p`, …).
    pub action: String,
    /// The port's error.
    #[source]
    pub source: ClusterError,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReport {
    /// What happened, in order.
    pub events: Vec<ExecutorEvent>,
    /// Why waiting nodes did not move, by group (the planner's `blocked` reasons).
    pub blocked: Vec<(String, Vec<String>)>,
    /// Actions that failed (retried next step).
    pub errors: Vec<ActionError>,
    /// How many times the nodes were read directly from the API instead of the cache (the
    /// cache was behind, the executor was new, or a decision met a conflict).
    pub fresh_reads: usize,
    /// How many times the step planned again after a decision met a changed node.
    pub replans: usize,
}

/// The update executor (see the module docs). Keeps drain state and the node versions it
/// knows of between steps, and what it needs to skip the work an unchanged cluster asks for
/// (its view of the nodes and the feed's revision, the groups planned with no command and
/// their inputs, the nodes carrying drain marks).
#[derive(Debug, Clone, Default)]
pub struct UpdateExecutor {
    drains: BTreeMap<String, ActiveDrain>,
    known: KnownVersions,
    /// Groups whose last plan had no command, with the inputs it came from, by the group's
    /// position in the list of groups of the previous plan (a group found at another
    /// position is planned again).
    planned: Vec<Option<PlannedGroup>>,
    /// Plan every group at every step (see [`UpdateExecutor::set_skip_unchanged`]).
    plan_every_group: bool,
    /// The nodes the last step planned from, with what it read from them (groups, update
    /// marks, drain marks) and the groups with a node changed since they were planned.
    view: NodeTable,
    /// Where the port's change feed is for `view` (`None`: the next answer is a resync; the
    /// view is not the port's cached list as of a revision, e.g. after a direct read).
    revision: Option<NodeRevision>,
    /// Each kind of command patches the same way: its patch is made once and only its
    /// precondition set per node.
    patches: CommandPatches,
    /// The patch of a finished drain ([`drained_patch`]), made once.
    drained_patch: NodePatch,
    /// Room for the nodes a step patches (empty between steps).
    patched: Patched,
}

/// A group whose plan had no command, with the inputs it was planned from. The planner is a
/// pure function of the group, its desired checksum, its nodes and — only through the
/// disruption windows — `now`; a group without windows planned again from the very same
/// inputs gets the very same plan, so it is not planned again. Its nodes are the same when
/// none of them was added or removed since and none changed in what the planner reads of it
/// ([`NodeTable::take_dirty`]).
#[derive(Debug, Clone)]
struct PlannedGroup {
    /// As the port shared it: the same `Arc` is the same group.
    group: Arc<NodeGroup>,
    desired: String,
    blocked: Vec<String>,
}

/// Whether a group's plan depends on `now`: only through its disruption windows
/// (`disruptions.automatic.windows`, `disruptions.rollingUpdate.windows`, docs/deckhouse.md §3.2).
fn plan_depends_on_time(group: &NodeGroup) -> bool {
    !group.spec.automatic_windows().is_empty() || !group.spec.rolling_update_windows().is_empty()
}

/// The nodes a step patched, by their slot in the view ([`NodeTable::slot`]), as the patches
/// returned them: only nodes of the view are kept, and the view keeps its slots for the whole
/// step (a direct read that replaces the view clears these); read in no particular order.
/// Found by slot directly; kept by the executor between steps empty, for its room.
#[derive(Debug, Clone, Default)]
struct Patched {
    /// By slot.
    at: Vec<Option<Arc<Node>>>,
    /// The slots holding a node, each once.
    slots: Vec<usize>,
}

impl Patched {
    /// The node patched at `slot`.
    fn get(&self, slot: usize) -> Option<&Arc<Node>> {
        self.at.get(slot)?.as_ref()
    }

    /// Keeps `node` as the one patched at `slot` (replacing an earlier one).
    fn insert(&mut self, slot: usize, node: Arc<Node>) {
        if self.at.len() <= slot {
            self.at.resize(slot.saturating_add(1), None);
        }
        if let Some(held) = self.at.get_mut(slot)
            && held.replace(node).is_none()
        {
            self.slots.push(slot);
        }
    }

    /// Every patched node with its slot.
    fn iter(&self) -> impl Iterator<Item = (usize, &Arc<Node>)> {
        self.slots
            .iter()
            .filter_map(|&slot| Some((slot, self.get(slot)?)))
    }

    /// Lets every node go, keeping the room.
    fn clear(&mut self) {
        for slot in self.slots.drain(..) {
            if let Some(held) = self.at.get_mut(slot) {
                *held = None;
            }
        }
    }
}

/// The nodes a step works on: the view, with the nodes this step patched as the patches
/// returned them (kept for the step only).
struct StepNodes<'a> {
    view: &'a NodeTable,
    patched: &'a Patched,
}

impl<'a> StepNodes<'a> {
    fn get(&self, name: &str) -> Option<StepNode<'a>> {
        self.at(self.view.slot(name)?)
    }

    /// The node at `slot` of the view.
    fn at(&self, slot: usize) -> Option<StepNode<'a>> {
        let patched: &'a Patched = self.patched;
        let view: &'a NodeTable = self.view;
        match patched.get(slot) {
            Some(node) => Some(StepNode::Patched(node)),
            None => view.at(slot).map(StepNode::Kept),
        }
    }
}

/// One node as a step reads it: what the view kept of it, or the node a patch of this step
/// returned.
#[derive(Debug, Clone, Copy)]
enum StepNode<'a> {
    /// The view's facts.
    Kept(&'a NodeFacts),
    /// As this step's patch returned it.
    Patched(&'a Node),
}

impl<'a> StepNode<'a> {
    fn name(self) -> &'a str {
        match self {
            Self::Kept(f) => &f.name,
            Self::Patched(n) => &n.name,
        }
    }

    fn resource_version(self) -> &'a str {
        match self {
            Self::Kept(f) => &f.resource_version,
            Self::Patched(n) => &n.resource_version,
        }
    }

    fn unschedulable(self) -> bool {
        match self {
            Self::Kept(f) => f.unschedulable,
            Self::Patched(n) => n.unschedulable,
        }
    }

    fn group(self) -> Option<&'a str> {
        match self {
            Self::Kept(f) => f.group.as_deref(),
            Self::Patched(n) => n.group(),
        }
    }

    /// The `draining` annotation's value.
    fn draining(self) -> Option<&'a str> {
        match self {
            Self::Kept(f) => f.draining.as_deref(),
            Self::Patched(n) => n
                .annotations
                .get(keys::ANNOTATION_DRAINING)
                .map(String::as_str),
        }
    }

    /// Whether it carries a person's `drained`.
    fn drained_by_user(self) -> bool {
        match self {
            Self::Kept(f) => f.marks.drained == Some(DrainSource::User),
            Self::Patched(n) => n
                .annotations
                .get(keys::ANNOTATION_DRAINED)
                .is_some_and(|v| DrainSource::parse(v) == DrainSource::User),
        }
    }
}

/// The node patch an update command stands for (`None` for `ReplaceMachine`, which patches
/// nothing). Public so adapters and tests apply commands exactly as the executor does.
pub fn command_patch(command: &UpdateCommand) -> Option<NodePatch> {
    let patch = match command {
        UpdateCommand::Approve { .. } => NodePatch::new()
            .set_annotation(keys::ANNOTATION_APPROVED, "")
            .remove_annotation(keys::ANNOTATION_WAITING_FOR_APPROVAL),
        UpdateCommand::StartDrain { .. } => {
            NodePatch::new().set_annotation(keys::ANNOTATION_DRAINING, keys::DRAIN_SOURCE_BASHIBLE)
        }
        UpdateCommand::ApproveDisruption { cordon, .. } => {
            let patch = NodePatch::new()
                .set_annotation(keys::ANNOTATION_DISRUPTION_APPROVED, "")
                .remove_annotation(keys::ANNOTATION_DISRUPTION_REQUIRED);
            if *cordon {
                patch
                    .unschedulable(true)
                    .set_annotation(keys::ANNOTATION_DRAINED, keys::DRAIN_SOURCE_BASHIBLE)
            } else {
                patch
            }
        }
        UpdateCommand::ReplaceMachine { .. } => return None,
        UpdateCommand::Finish { uncordon, .. } => {
            let mut patch = NodePatch::new();
            for &key in crate::update::FINISH_REMOVES {
                patch = patch.remove_annotation(key);
            }
            if *uncordon {
                patch.unschedulable(false)
            } else {
                patch
            }
        }
    };
    Some(patch)
}

/// The patches of the commands by kind ([`command_patch`]), each made when first needed and
/// kept from one step to the next; the precondition is set for each node
/// ([`NodePatch::set_resource_version`]).
#[derive(Debug, Clone, Default)]
struct CommandPatches {
    /// By [`CommandPatches::slot`].
    made: [Option<Option<NodePatch>>; 8],
}

impl CommandPatches {
    /// Which patch `command` makes: commands of one kind with the same flags patch alike.
    fn slot(command: &UpdateCommand) -> usize {
        match command {
            UpdateCommand::Approve { .. } => 0,
            UpdateCommand::StartDrain { .. } => 1,
            UpdateCommand::ApproveDisruption { cordon: false, .. } => 2,
            UpdateCommand::ApproveDisruption { cordon: true, .. } => 3,
            UpdateCommand::ReplaceMachine { .. } => 4,
            UpdateCommand::Finish {
                uncordon: false, ..
            } => 5,
            UpdateCommand::Finish { uncordon: true, .. } => 6,
        }
    }

    /// [`command_patch`] of `command` (`None` for `ReplaceMachine`), its precondition left
    /// as the previous user set it.
    fn get(&mut self, command: &UpdateCommand) -> Option<&mut NodePatch> {
        self.made
            .get_mut(Self::slot(command))?
            .get_or_insert_with(|| command_patch(command))
            .as_mut()
    }
}

fn command_event_reason(command: &UpdateCommand) -> &'static str {
    match command {
        UpdateCommand::Approve { .. } => "UpdateApproved",
        UpdateCommand::StartDrain { .. } => "DrainStarted",
        UpdateCommand::ApproveDisruption { .. } => disruption_event(DisruptionReason::Drift).0,
        UpdateCommand::ReplaceMachine { .. } => disruption_event(DisruptionReason::RollingUpdate).0,
        UpdateCommand::Finish { .. } => "UpdateFinished",
    }
}

impl UpdateExecutor {
    /// An executor with no drains.
    pub fn new() -> Self {
        Self::default()
    }

    /// The drains in progress, by node name.
    pub fn drains(&self) -> &BTreeMap<String, ActiveDrain> {
        &self.drains
    }

    /// Whether a step plans again only the groups whose inputs changed (the default, `true`)
    /// or every group. A group is skipped when its previous plan had no command, it has no
    /// disruption window (the only way `now` enters a plan) and the group, its desired
    /// checksum and its nodes are the same as then — no node of it added or removed, none
    /// changed in what the planner reads of it (update marks, configuration checksum,
    /// readiness, `unschedulable`), whichever way the port hands the nodes out
    /// ([`ClusterRead::list_nodes_shared`](crate::ports::ClusterRead::list_nodes_shared),
    /// [`ClusterRead::node_changes_since`](crate::ports::ClusterRead::node_changes_since)).
    /// Its plan is then the previous one (no command, the same blocked reasons). Likewise the
    /// drain half looks again only at the nodes that changed for their drain marks, and only
    /// at those it may act on ([`UpdateMarks::drain_relevant`]). `false` plans every group,
    /// looks at every node with a drain mark and reads the whole list at every step
    /// ([`ClusterRead::list_nodes_shared`](crate::ports::ClusterRead::list_nodes_shared), not
    /// the change feed), for tests comparing both.
    pub fn set_skip_unchanged(&mut self, skip: bool) {
        self.plan_every_group = !skip;
        self.planned.clear();
    }

    /// Plans every group with a desired checksum, in the order of `groups`, as
    /// [`crate::update::plan_updates_detailed`] does over the view, except that a group
    /// planned before from the same inputs with no command keeps that plan (see
    /// [`UpdateExecutor::set_skip_unchanged`]).
    fn plan<'g>(
        &mut self,
        groups: &'g [Arc<NodeGroup>],
        checksums: &BTreeMap<String, String>,
        now: Timestamp,
    ) -> Vec<(&'g str, UpdatePlan)> {
        let mut plans = Vec::with_capacity(groups.len());
        // Every position is planned, kept or cleared below: an entry is always of the group
        // at its position in the previous call, whose dirty marks were taken then.
        self.planned.resize_with(groups.len(), || None);
        for (at, group) in groups.iter().enumerate() {
            let Some(desired) = checksums.get(group.name()) else {
                if let Some(planned) = self.planned.get_mut(at) {
                    *planned = None;
                }
                continue;
            };
            let changed = self.view.take_dirty(group.name());
            let planned = self.planned.get_mut(at);
            if !self.plan_every_group
                && !changed
                && let Some(Some(previous)) = planned.as_deref()
                && previous.desired == *desired
                && (Arc::ptr_eq(&previous.group, group) || previous.group == *group)
            {
                let plan = UpdatePlan {
                    commands: Vec::new(),
                    blocked: previous.blocked.clone(),
                };
                plans.push((group.name(), plan));
                continue;
            }
            // The view keeps each group's members in name order, each name once; the planner
            // walks them without a list of them made first, the inert ones only counted.
            let (inert, members) = self.view.active_members(group.name());
            let plan = plan_group_members_with_inert(group, desired, members, inert, true, now);
            if let Some(planned) = planned {
                *planned = (!self.plan_every_group
                    && plan.commands.is_empty()
                    && !plan_depends_on_time(group))
                .then(|| PlannedGroup {
                    group: Arc::clone(group),
                    desired: desired.clone(),
                    blocked: plan.blocked.clone(),
                });
            }
            plans.push((group.name(), plan));
        }
        plans
    }

    /// When a step next has something to do without new input: the earliest eviction retry or
    /// drain timeout. `None` when no drain waits for time.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        self.drains
            .values()
            .filter_map(|d| d.drain.next_deadline())
            .min()
    }

    /// Runs one reconcile step at `now` (see the module docs).
    ///
    /// # Errors
    /// Only when the snapshot cannot be read (nothing was changed then); failures of single
    /// actions are in [`StepReport::errors`] and are retried by the next step.
    ///
    /// # Examples
    /// A port of your own (here a node list behind a lock; the hidden lines implement the four
    /// port traits) and one step: the node waiting for the group's new checksum is approved.
    /// The repository's `examples/update_executor.rs` runs a whole update this way.
    /// ```
    /// # use std::collections::BTreeMap;
    /// # use std::sync::Mutex;
    /// # use std::time::Duration;
    /// # use nodemgr_core::model::*;
    /// # use nodemgr_core::ports::*;
    /// use nodemgr_core::executor::{ExecutorEvent, UpdateExecutor};
    /// use nodemgr_core::ports::block_on_ready;
    /// use nodemgr_core::update::UpdateCommand;
    ///
    /// struct MyCluster { groups: Vec<NodeGroup>, nodes: Mutex<Vec<Node>> }
    /// # #[async_trait::async_trait]
    /// # impl ClusterRead for MyCluster {
    /// #     async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> { Ok(self.groups.clone()) }
    /// #     async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
    /// #         Ok(self.nodes.lock().map_err(|e| ClusterError::other(e.to_string()))?.clone())
    /// #     }
    /// #     async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError> { Ok(Vec::new()) }
    /// #     async fn list_pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> { Ok(Vec::new()) }
    /// #     async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
    /// #         Ok(BTreeMap::from([("worker".to_owned(), "v2".to_owned())]))
    /// #     }
    /// # }
    /// # #[async_trait::async_trait]
    /// # impl NodeApi for MyCluster {
    /// #     async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<Node, ClusterError> {
    /// #         let mut nodes = self.nodes.lock().map_err(|e| ClusterError::other(e.to_string()))?;
    /// #         let node = nodes.iter_mut().find(|n| n.name == name)
    /// #             .ok_or_else(|| ClusterError::not_found(name.to_owned()))?;
    /// #         patch.apply_to(node);
    /// #         Ok(node.clone())
    /// #     }
    /// #     async fn delete_node(&self, _: &str, _: &Precondition) -> Result<(), ClusterError> { Ok(()) }
    /// # }
    /// # #[async_trait::async_trait]
    /// # impl PodApi for MyCluster {
    /// #     async fn evict_pod(&self, _: &PodRef) -> Result<EvictionResult, ClusterError> { Ok(EvictionResult::Gone) }
    /// #     async fn delete_pod(&self, _: &PodRef, _: Option<Duration>, _: &Precondition) -> Result<(), ClusterError> { Ok(()) }
    /// # }
    /// # #[async_trait::async_trait]
    /// # impl EventApi for MyCluster {
    /// #     async fn emit_event(&self, _: &RecordedEvent) -> Result<(), ClusterError> { Ok(()) }
    /// # }
    ///
    /// let group = parse_node_group(
    ///     "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: worker}\nspec: {nodeType: Static}",
    /// )?;
    /// let mut node = Node { name: "w-0".into(), ready: true, ..Node::default() };
    /// node.labels.insert(keys::LABEL_NODE_GROUP.into(), "worker".into());
    /// node.annotations.insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "v1".into());
    /// node.annotations.insert(keys::ANNOTATION_WAITING_FOR_APPROVAL.into(), String::new());
    /// let cluster = MyCluster { groups: vec![group], nodes: Mutex::new(vec![node]) };
    ///
    /// let mut executor = UpdateExecutor::new();
    /// // The port never waits, so no async runtime is needed to run the step.
    /// let report = block_on_ready(executor.step(&cluster, Timestamp::EPOCH)).ok_or("pending")??;
    /// assert!(report.events.iter().any(|e| matches!(
    ///     e,
    ///     ExecutorEvent::Applied { command: UpdateCommand::Approve { node }, .. } if node == "w-0"
    /// )));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn step<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        now: Timestamp,
    ) -> Result<StepReport, ClusterError> {
        let groups = cluster.list_node_groups_shared().await?;
        let checksums = cluster.configuration_checksums_shared().await?;
        let mut report = StepReport::default();
        // A new executor reads the nodes directly below whatever the cache shows: the change
        // feed is not asked for a whole list first (the incremental executor; the plain one
        // reads as it always did).
        if self.plan_every_group || !self.known.needs_direct_read() {
            let changes = if self.plan_every_group {
                NodeChanges::resync(cluster.list_nodes_shared().await?)
            } else {
                cluster.node_changes_since(self.revision).await?
            };
            self.revision = changes.revision;
            self.view.apply(changes, &mut self.known);
        }
        let view = &self.view;
        if !self
            .known
            .is_satisfied_by_view(|name| view.version(name), view.versions())
        {
            self.read_fresh(cluster, &mut report).await?;
        }

        // The nodes this step patched, as the patches returned them (none kept between steps).
        let mut patched = std::mem::take(&mut self.patched);
        let mut replans = 0;
        loop {
            let conflict = self
                .apply_plans(cluster, &groups, &checksums, &mut patched, now, &mut report)
                .await;
            let Some(conflict) = conflict else { break };
            if replans == MAX_REPLANS {
                report.errors.push(conflict);
                break;
            }
            replans += 1;
            report.replans += 1;
            match self.read_fresh(cluster, &mut report).await {
                Ok(()) => patched.clear(),
                Err(source) => {
                    report.errors.push(ActionError {
                        source,
                        action: format!("re-read the nodes after: {}", conflict.action),
                        node: conflict.node,
                    });
                    break;
                }
            }
        }
        self.reconcile_drains(cluster, &groups, &patched, now, &mut report)
            .await;
        patched.clear();
        self.patched = patched;
        Ok(report)
    }

    /// Reads every node directly from the API, remembers their versions and plans from them
    /// (the view is then no longer the port's cache: the next change feed answer is a
    /// resync).
    async fn read_fresh<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        report: &mut StepReport,
    ) -> Result<(), ClusterError> {
        let fresh = cluster.list_nodes_fresh_shared().await?;
        self.known.handle_fresh_read(&fresh);
        report.fresh_reads += 1;
        self.view.replace(fresh, &mut self.known);
        self.revision = None;
        Ok(())
    }

    /// Applies a node patch and remembers the version it produced.
    async fn patch_node<C: ClusterApi + ?Sized>(
        known: &mut KnownVersions,
        cluster: &C,
        name: &str,
        patch: &NodePatch,
    ) -> Result<Arc<Node>, ClusterError> {
        let updated = cluster.patch_node_shared(name, patch).await?;
        known.handle_write(&updated);
        Ok(updated)
    }

    /// Plans every group (as [`crate::update::plan_updates_detailed`] does, skipping the groups whose inputs
    /// did not change, see [`UpdateExecutor::set_skip_unchanged`]) and applies the commands.
    /// Returns the conflict that stopped it when a command met a node changed since `nodes`
    /// was read (the rest of the plans is dropped).
    async fn apply_plans<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        groups: &[Arc<NodeGroup>],
        checksums: &BTreeMap<String, String>,
        patched: &mut Patched,
        now: Timestamp,
        report: &mut StepReport,
    ) -> Option<ActionError> {
        let plans = self.plan(groups, checksums, now);
        report.blocked.clear();
        for (group, plan) in plans {
            if !plan.blocked.is_empty() {
                report.blocked.push((group.to_owned(), plan.blocked));
            }
            for command in plan.commands {
                let name = command.node();
                if let Some(patch) = self.patches.get(&command) {
                    // One lookup of the node in the view, for its version and its slot.
                    let slot = self.view.slot(name);
                    let nodes = StepNodes {
                        view: &self.view,
                        patched,
                    };
                    let seen = slot
                        .and_then(|slot| nodes.at(slot))
                        .map(StepNode::resource_version);
                    patch.set_resource_version(seen.unwrap_or_default());
                    match Self::patch_node(&mut self.known, cluster, name, patch).await {
                        Ok(updated) => {
                            if let Some(slot) = slot {
                                patched.insert(slot, updated);
                            }
                        }
                        Err(source @ ClusterError::Conflict { .. }) => {
                            tracing::debug!(node = %name, %command, error = %source, "node changed since it was read; planning again");
                            return Some(ActionError {
                                node: name.to_owned(),
                                action: command.to_string(),
                                source,
                            });
                        }
                        Err(source) => {
                            tracing::warn!(node = %name, %command, error = %source, "update command failed");
                            report.errors.push(ActionError {
                                node: name.to_owned(),
                                action: command.to_string(),
                                source,
                            });
                            continue;
                        }
                    }
                }
                emit(
                    cluster,
                    ObjectRef::node(name),
                    EventKind::Normal,
                    command_event_reason(&command),
                    concat(&command.pieces()),
                    now,
                )
                .await;
                report.events.push(ExecutorEvent::Applied {
                    group: group.to_owned(),
                    command,
                });
            }
        }
        None
    }

    async fn reconcile_drains<C: ClusterApi + ?Sized>(
        &mut self,
        cluster: &C,
        groups: &[Arc<NodeGroup>],
        patched: &Patched,
        now: Timestamp,
        report: &mut StepReport,
    ) {
        let nodes = StepNodes {
            view: &self.view,
            patched,
        };
        // Only nodes carrying `draining` or a person's `drained` take part below
        // (`UpdateMarks::drain_relevant`: nothing is done to any other node), in list order:
        // the view's marked nodes, with the marks of the nodes this step patched read again.
        // The plain executor (`set_skip_unchanged(false)`) looks at every node with any drain
        // mark instead, as a comparison for tests.
        let plain = self.plan_every_group;
        let takes_part = |marks: UpdateMarks| {
            if plain {
                marks.draining.is_some() || marks.drained.is_some()
            } else {
                marks.drain_relevant()
            }
        };
        let mut names: BTreeSet<&str> = if plain {
            self.view
                .all()
                .filter(|f| takes_part(f.marks))
                .map(|f| f.name.as_str())
                .collect()
        } else {
            self.view.marked().iter().map(String::as_str).collect()
        };
        // The same question of a patched node, by two lookups (`UpdateMarks::drain_relevant_in`).
        let node_takes_part = |node: &Node| {
            if plain {
                UpdateMarks::drain_marked_in(node)
            } else {
                UpdateMarks::drain_relevant_in(node)
            }
        };
        for (slot, node) in patched.iter() {
            let Some(facts) = self.view.at(slot) else {
                continue;
            };
            let name = facts.name.as_str();
            debug_assert_eq!(names.contains(name), takes_part(facts.marks));
            if node_takes_part(node) {
                names.insert(name);
            } else if takes_part(facts.marks) {
                // Among `names` only as the view has it.
                names.remove(name);
            }
        }
        let mut marked: Vec<(u64, StepNode<'_>)> = names
            .into_iter()
            .filter_map(|name| {
                let slot = self.view.slot(name)?;
                let pos = self.view.at(slot)?.pos;
                nodes.at(slot).map(|n| (pos, n))
            })
            .collect();
        if !self.view.sorted() {
            marked.sort_by_key(|(pos, _)| *pos);
        }
        let marked: Vec<StepNode<'_>> = marked.into_iter().map(|(_, n)| n).collect();

        // Drop drains whose node vanished or is no longer marked `draining`.
        let stale: Vec<(String, String)> = self
            .drains
            .keys()
            .filter_map(|name| match nodes.get(name.as_str()) {
                None => Some((name.clone(), "the node no longer exists".to_owned())),
                Some(n) if n.draining().is_none() => Some((
                    name.clone(),
                    format!("{} was removed", keys::ANNOTATION_DRAINING),
                )),
                Some(_) => None,
            })
            .collect();
        for (name, reason) in stale {
            self.drains.remove(&name);
            report
                .events
                .push(ExecutorEvent::DrainAbandoned { node: name, reason });
        }

        // A person's `drained=user` on a node they made schedulable again is removed.
        for node in &marked {
            if !node.unschedulable() && node.drained_by_user() && node.draining().is_none() {
                let patch = NodePatch::new().remove_annotation(keys::ANNOTATION_DRAINED);
                match Self::patch_node(&mut self.known, cluster, node.name(), &patch).await {
                    Ok(_) => report.events.push(ExecutorEvent::DrainedMarkRemoved {
                        node: node.name().to_owned(),
                    }),
                    Err(source) => report.errors.push(ActionError {
                        node: node.name().to_owned(),
                        action: "remove drained=user".into(),
                        source,
                    }),
                }
            }
        }

        let draining = marked.iter().filter(|n| n.draining().is_some());
        for &node in draining {
            let name = node.name();
            let pods = match cluster.list_node_pods(name).await {
                Ok(pods) => pods,
                Err(source) => {
                    report.errors.push(ActionError {
                        node: name.to_owned(),
                        action: "list the node's pods".into(),
                        source,
                    });
                    continue;
                }
            };
            let started_now = !self.drains.contains_key(name);
            if started_now {
                let group = node.group().unwrap_or_default().to_owned();
                let config = groups
                    .iter()
                    .find(|g| g.name() == group)
                    .map(|g| DrainConfig::for_group(g))
                    .unwrap_or_default();
                let source = node.draining().unwrap_or_default().to_owned();
                // A drain reads the node's name and `unschedulable`: the view keeps those.
                let active = ActiveDrain::start(
                    (name, node.unschedulable()),
                    group,
                    source,
                    &pods,
                    config,
                    now,
                );
                report.events.push(ExecutorEvent::DrainStarted {
                    node: name.to_owned(),
                    group: active.group.clone(),
                    pods: active.pod_uids.len(),
                });
                self.drains.insert(name.to_owned(), active);
            }
            let Some(active) = self.drains.get_mut(name) else {
                continue;
            };
            // Re-cordon a node somebody uncordoned while it drains (or whose cordon failed).
            if !node.unschedulable() && active.drain.started() < now {
                let cordon = NodePatch::new().unschedulable(true);
                match Self::patch_node(&mut self.known, cluster, name, &cordon).await {
                    Ok(_) => report.events.push(ExecutorEvent::Cordoned {
                        node: name.to_owned(),
                    }),
                    Err(source) => report.errors.push(ActionError {
                        node: name.to_owned(),
                        action: "cordon".into(),
                        source,
                    }),
                }
            }
            // A drain made from this very listing finds nothing gone in it when it lists each
            // pod once (`ActiveDrain::start`).
            let observed = started_now && listed_once_in_order(&pods);
            advance_drain(
                cluster,
                &mut self.known,
                name,
                active,
                (&pods, observed),
                now,
                report,
            )
            .await;
            if let Some(outcome) = active.drain.outcome().cloned() {
                let source = if active.source.is_empty() {
                    keys::DRAIN_SOURCE_BASHIBLE
                } else {
                    active.source.as_str()
                };
                let patch = drained_patch(&mut self.drained_patch, source);
                match Self::patch_node(&mut self.known, cluster, name, patch).await {
                    Ok(_) => {
                        let (kind, reason) = match outcome {
                            DrainOutcome::Completed => (EventKind::Normal, "NodeDrained"),
                            DrainOutcome::TimedOut { .. } => (EventKind::Warning, "DrainTimedOut"),
                        };
                        emit(
                            cluster,
                            ObjectRef::node(name.to_owned()),
                            kind,
                            reason,
                            outcome.message(),
                            now,
                        )
                        .await;
                        let group = active.group.clone();
                        self.drains.remove(name);
                        report.events.push(ExecutorEvent::DrainFinished {
                            node: name.to_owned(),
                            group,
                            outcome,
                        });
                    }
                    Err(source) => report.errors.push(ActionError {
                        node: name.to_owned(),
                        action: "mark the node drained".into(),
                        source,
                    }),
                }
            }
        }
    }
}

impl ActiveDrain {
    /// The drain of node `node` (its name and whether it is unschedulable; of group `group`,
    /// marked `draining=source`) at `now`, over the evictable pods of its listing `pods`,
    /// remembering their UIDs (a key listed twice: the last one counts).
    fn start(
        (node, unschedulable): (&str, bool),
        group: String,
        source: String,
        pods: &[NodePod],
        config: DrainConfig,
        now: Timestamp,
    ) -> Self {
        let evictable = pods.iter().filter(|p| p.evictable);
        let keys = evictable.clone().map(|p| p.key.clone());
        let drain = Drain::of_named(node, unschedulable, keys, config, now);
        let pod_uids = map_of(evictable.map(|p| (p.key.clone(), p.uid.clone())));
        Self {
            drain,
            group,
            source,
            pod_uids,
        }
    }
}

/// Whether listing `pods` names each pod once, in key order. A drain just started from such
/// a listing ([`ActiveDrain::start`]) finds nothing gone in it ([`observe_pods`]): each pod
/// it tracks is listed, once, with the UID it remembered.
fn listed_once_in_order(pods: &[NodePod]) -> bool {
    pods.windows(2)
        .all(|w| matches!(w, [a, b] if a.key < b.key))
}

/// The patch that marks a node drained by `source`: removes `draining` and sets
/// `drained=source`. Made in `held` once; later calls only set the source when it differs.
fn drained_patch<'p>(held: &'p mut NodePatch, source: &str) -> &'p NodePatch {
    match held.annotations.get_mut(keys::ANNOTATION_DRAINED) {
        Some(Some(value)) => {
            if value != source {
                source.clone_into(value);
            }
        }
        _ => {
            *held = NodePatch::new()
                .remove_annotation(keys::ANNOTATION_DRAINING)
                .set_annotation(keys::ANNOTATION_DRAINED, source);
        }
    }
    held
}

/// Feeds what the listing shows into the drain: tracked pods that are no longer on the node (or
/// were replaced by a pod of another UID) are gone.
fn observe_pods(active: &mut ActiveDrain, pods: &[NodePod], now: Timestamp) {
    let mut listing = Listing::of(pods);
    let ActiveDrain {
        drain, pod_uids, ..
    } = active;
    drain.handle_pods_gone(|key| listing.shows_gone(key, pod_uids), now);
}

/// A node's pod listing asked which of a drain's keys it shows gone, the keys asked in
/// strictly increasing order (as [`Drain::remaining`] gives them).
enum Listing<'p> {
    /// Sorted by key (the simulator's): walked beside the keys asked.
    Sorted {
        /// The listing.
        pods: &'p [NodePod],
        /// Where the walk is.
        at: usize,
    },
    /// In another order: indexed first (a key listed twice: the last one counts).
    Indexed(BTreeMap<&'p str, &'p str>),
}

impl<'p> Listing<'p> {
    fn of(pods: &'p [NodePod]) -> Self {
        if pods
            .windows(2)
            .all(|w| matches!(w, [a, b] if a.key <= b.key))
        {
            return Self::Sorted { pods, at: 0 };
        }
        Self::Indexed(
            pods.iter()
                .map(|p| (p.key.as_str(), p.uid.as_str()))
                .collect(),
        )
    }

    /// Whether the listing no longer shows pod `key`, or shows it with another UID than the
    /// one in `pod_uids` (a key listed twice: the last one counts). Both kinds answer the same.
    fn shows_gone(&mut self, key: &str, pod_uids: &BTreeMap<String, String>) -> bool {
        let uid = match self {
            Self::Sorted { pods, at } => {
                while pods.get(*at).is_some_and(|p| p.key.as_str() < key) {
                    *at += 1;
                }
                let mut uid = None;
                while let Some(p) = pods.get(*at).filter(|p| p.key == key) {
                    uid = Some(p.uid.as_str());
                    *at += 1;
                }
                uid
            }
            Self::Indexed(present) => present.get(key).copied(),
        };
        uid.is_none_or(|uid| {
            pod_uids
                .get(key)
                .is_some_and(|known| !known.is_empty() && known != uid)
        })
    }
}

/// The keys among `remaining` (in strictly increasing order, as [`Drain::remaining`] gives
/// them) that the listing `pods` shows gone ([`Listing::shows_gone`]).
#[cfg(test)]
fn gone_pods<'r>(
    remaining: impl Iterator<Item = &'r str>,
    pod_uids: &BTreeMap<String, String>,
    pods: &[NodePod],
) -> Vec<String> {
    let mut listing = Listing::of(pods);
    remaining
        .filter(|key| listing.shows_gone(key, pod_uids))
        .map(str::to_owned)
        .collect()
}

/// At most this many poll rounds per drain and step: each round either issues evictions (every
/// pod at most once per `now`, refused ones wait for `eviction_retry`) or ends the loop.
const MAX_ROUNDS: usize = 8;

async fn advance_drain<C: ClusterApi + ?Sized>(
    cluster: &C,
    known: &mut KnownVersions,
    node: &str,
    active: &mut ActiveDrain,
    (pods, observed): (&[NodePod], bool),
    now: Timestamp,
    report: &mut StepReport,
) {
    // `observed`: the drain already knows what `pods` shows.
    if !observed {
        observe_pods(active, pods, now);
    }
    for _ in 0..MAX_ROUNDS {
        let mut evictions: Vec<String> = Vec::new();
        while let Some(command) = active.drain.poll_command(now) {
            match command {
                DrainCommand::Cordon { node } => match UpdateExecutor::patch_node(
                    known,
                    cluster,
                    &node,
                    &NodePatch::new().unschedulable(true),
                )
                .await
                {
                    Ok(_) => report.events.push(ExecutorEvent::Cordoned { node }),
                    Err(source) => report.errors.push(ActionError {
                        node,
                        action: "cordon".into(),
                        source,
                    }),
                },
                DrainCommand::Evict { pod } => evictions.push(pod),
                DrainCommand::ForceDelete { pod } => {
                    force_delete(cluster, node, active, &pod, now, report).await;
                }
            }
        }
        if evictions.is_empty() {
            return;
        }
        // Every pending eviction of the node at once (`PodApi::evict_pods`: concurrently,
        // unless the port's calls never wait).
        let results = cluster.evict_pods(&evictions).await;
        let mut accepted = false;
        for (pod, result) in evictions.into_iter().zip(results) {
            let outcome = match result {
                Ok(EvictionResult::Evicted) => {
                    accepted = true;
                    // The event takes the key once the drain has read it.
                    active
                        .drain
                        .handle_eviction(&pod, EvictionOutcome::Evicted, now);
                    report.events.push(ExecutorEvent::Evicted {
                        node: node.to_owned(),
                        pod,
                    });
                    continue;
                }
                Ok(EvictionResult::Gone) | Err(ClusterError::NotFound { .. }) => {
                    EvictionOutcome::NotFound
                }
                Ok(EvictionResult::RefusedByBudget(reason)) => {
                    report.events.push(ExecutorEvent::EvictionRefused {
                        node: node.to_owned(),
                        pod: pod.clone(),
                        reason,
                        retry_at: now + active.drain.config().eviction_retry,
                    });
                    EvictionOutcome::Refused
                }
                Err(source) => {
                    report.events.push(ExecutorEvent::EvictionRefused {
                        node: node.to_owned(),
                        pod: pod.clone(),
                        reason: source.to_string(),
                        retry_at: now + active.drain.config().eviction_retry,
                    });
                    report.errors.push(ActionError {
                        node: node.to_owned(),
                        action: format!("evict pod {pod}"),
                        source: source.clone(),
                    });
                    EvictionOutcome::Failed(source.to_string())
                }
            };
            active.drain.handle_eviction(&pod, outcome, now);
        }
        if accepted {
            // Pods with a short grace period may be gone already.
            match cluster.list_node_pods(node).await {
                Ok(pods) => observe_pods(active, &pods, now),
                Err(source) => report.errors.push(ActionError {
                    node: node.to_owned(),
                    action: "list the node's pods".into(),
                    source,
                }),
            }
        }
    }
}

async fn force_delete<C: ClusterApi + ?Sized>(
    cluster: &C,
    node: &str,
    active: &mut ActiveDrain,
    key: &str,
    now: Timestamp,
    report: &mut StepReport,
) {
    let Some(pod) = PodRef::parse(key) else {
        active.drain.handle_pod_deleted(key, now);
        return;
    };
    let precondition = match active.pod_uids.get(key) {
        Some(uid) if !uid.is_empty() => Precondition::Uid(uid.clone()),
        _ => Precondition::None,
    };
    match cluster
        .delete_pod(&pod, Some(Duration::ZERO), &precondition)
        .await
    {
        Ok(()) => {
            report.events.push(ExecutorEvent::ForceDeleted {
                node: node.to_owned(),
                pod: key.to_owned(),
            });
            active.drain.handle_pod_deleted(key, now);
        }
        // Gone, or replaced by another pod of the same name: the one we drained is gone.
        Err(ClusterError::NotFound { .. } | ClusterError::Conflict { .. }) => {
            active.drain.handle_pod_deleted(key, now);
        }
        Err(source) => {
            active.drain.handle_force_delete_failed(key, now);
            report.errors.push(ActionError {
                node: node.to_owned(),
                action: format!("force-delete pod {key}"),
                source,
            });
        }
    }
}

pub(crate) async fn emit<C: EventApi + ?Sized>(
    cluster: &C,
    regarding: ObjectRef,
    kind: EventKind,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let event = RecordedEvent {
        regarding,
        kind,
        reason: reason.to_owned(),
        message,
        time: now,
    };
    if let Err(error) = cluster.emit_event_owned(event).await {
        tracing::debug!(reason, %error, "event not recorded");
    }
}

/// The update annotation keys the executor writes and [`UpdateCommand::Finish`] removes, for
/// tests and adapters that check a node is clean.
pub fn update_annotation_keys() -> BTreeSet<&'static str> {
    crate::update::FINISH_REMOVES.iter().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        ApprovalMode, Disruptions, ObjectMeta, Owner, Pod, PodDisruptionBudget, PodPhase,
    };
    use crate::ports::{ClusterRead, EventApi, NodeApi, PodApi};
    use async_trait::async_trait;
    use std::future::Future;
    use std::sync::Mutex;

    /// Runs a future whose I/O is always ready (the fake below never waits).
    fn block_on<F: Future>(future: F) -> F::Output {
        crate::ports::block_on_ready(future).expect("the fake port never waits")
    }

    #[derive(Default)]
    struct State {
        groups: Vec<NodeGroup>,
        nodes: Vec<Node>,
        pods: Vec<Pod>,
        /// Pods whose eviction a PDB refuses.
        blocked: BTreeSet<String>,
        evictions: Vec<String>,
        deletions: Vec<String>,
        /// Last resourceVersion handed out.
        version: u64,
        /// What `list_nodes` returns instead of `nodes` (a lagging cache), when set.
        cache: Option<Vec<Node>>,
        /// Nodes another writer changes just before our next patch lands.
        races: BTreeSet<String>,
    }

    #[derive(Default)]
    struct Fake(Mutex<State>);

    impl Fake {
        fn state(&self) -> std::sync::MutexGuard<'_, State> {
            self.0.lock().unwrap()
        }
    }

    #[async_trait]
    impl ClusterRead for Fake {
        async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
            Ok(self.state().groups.clone())
        }
        async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
            let s = self.state();
            Ok(s.cache.clone().unwrap_or_else(|| s.nodes.clone()))
        }
        async fn list_nodes_fresh(&self) -> Result<Vec<Node>, ClusterError> {
            Ok(self.state().nodes.clone())
        }
        async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError> {
            Ok(self.state().pods.clone())
        }
        async fn list_pod_disruption_budgets(
            &self,
        ) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
            Ok(Vec::new())
        }
        async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
            Ok(BTreeMap::from([("g".to_owned(), "new".to_owned())]))
        }
    }

    #[async_trait]
    impl NodeApi for Fake {
        async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<Node, ClusterError> {
            let mut state = self.state();
            let State {
                nodes,
                version,
                races,
                ..
            } = &mut *state;
            let node = nodes
                .iter_mut()
                .find(|n| n.name == name)
                .ok_or_else(|| ClusterError::not_found(format!("node {name}")))?;
            if races.remove(name) {
                *version += 1;
                node.resource_version = version.to_string();
                node.labels.insert("raced".into(), "yes".into());
            }
            if let Some(rv) = &patch.resource_version
                && *rv != node.resource_version
            {
                return Err(ClusterError::conflict(format!("node {name} changed")));
            }
            patch.apply_to(node);
            *version += 1;
            node.resource_version = version.to_string();
            Ok(node.clone())
        }
        async fn delete_node(&self, name: &str, _: &Precondition) -> Result<(), ClusterError> {
            self.state().nodes.retain(|n| n.name != name);
            Ok(())
        }
    }

    #[async_trait]
    impl PodApi for Fake {
        async fn evict_pod(&self, pod: &PodRef) -> Result<EvictionResult, ClusterError> {
            let key = pod.to_string();
            let mut state = self.state();
            state.evictions.push(key.clone());
            if state.blocked.contains(&key) {
                return Ok(EvictionResult::RefusedByBudget("PDB".into()));
            }
            let before = state.pods.len();
            state.pods.retain(|p| p.key() != key);
            Ok(if state.pods.len() < before {
                EvictionResult::Evicted
            } else {
                EvictionResult::Gone
            })
        }
        async fn delete_pod(
            &self,
            pod: &PodRef,
            grace: Option<Duration>,
            _: &Precondition,
        ) -> Result<(), ClusterError> {
            assert_eq!(grace, Some(Duration::ZERO));
            let key = pod.to_string();
            let mut state = self.state();
            state.deletions.push(key.clone());
            state.pods.retain(|p| p.key() != key);
            Ok(())
        }
    }

    #[async_trait]
    impl EventApi for Fake {
        async fn emit_event(&self, _: &RecordedEvent) -> Result<(), ClusterError> {
            Ok(())
        }
    }

    fn group() -> NodeGroup {
        let mut g = NodeGroup {
            metadata: ObjectMeta {
                name: Some("g".into()),
                ..ObjectMeta::default()
            },
            ..NodeGroup::default()
        };
        g.spec.disruptions = Some(Disruptions {
            approval_mode: Some(ApprovalMode::Automatic),
            ..Disruptions::default()
        });
        g
    }

    fn node(name: &str, marks: &[&str]) -> Node {
        let mut n = Node {
            name: name.into(),
            uid: format!("uid-{name}"),
            ready: true,
            ..Node::default()
        };
        n.labels.insert(keys::LABEL_NODE_GROUP.into(), "g".into());
        n.annotations
            .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "old".into());
        for m in marks {
            n.annotations.insert((*m).into(), String::new());
        }
        n
    }

    fn pod(name: &str, node: &str, owner: &str) -> Pod {
        Pod {
            namespace: "app".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            node_name: Some(node.into()),
            owner: Some(Owner {
                kind: owner.into(),
                name: "o".into(),
            }),
            phase: PodPhase::Running,
            ..Pod::default()
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_secs(secs)
    }

    #[test]
    fn automatic_disruption_drains_retries_and_force_deletes_at_the_timeout() {
        let fake = Fake::default();
        {
            let mut s = fake.state();
            s.groups.push(group());
            s.nodes.push(node(
                "n1",
                &[
                    keys::ANNOTATION_APPROVED,
                    keys::ANNOTATION_DISRUPTION_REQUIRED,
                ],
            ));
            s.pods.push(pod("web", "n1", "ReplicaSet"));
            s.pods.push(pod("db", "n1", "StatefulSet"));
            s.pods.push(pod("agent", "n1", "DaemonSet"));
            s.blocked.insert("app/db".into());
        }
        let mut exec = UpdateExecutor::new();
        let report = block_on(exec.step(&fake, t(0))).unwrap();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert!(report.events.contains(&ExecutorEvent::Applied {
            group: "g".into(),
            command: UpdateCommand::StartDrain { node: "n1".into() }
        }));
        assert!(
            report
                .events
                .contains(&ExecutorEvent::Cordoned { node: "n1".into() })
        );
        {
            let s = fake.state();
            assert!(s.nodes[0].unschedulable);
            assert_eq!(s.evictions, vec!["app/db", "app/web"]);
            assert!(s.pods.iter().any(|p| p.name == "agent"));
        }
        // The refused eviction is retried at 20 s, not before.
        assert_eq!(exec.next_deadline(), Some(t(20)));
        block_on(exec.step(&fake, t(10))).unwrap();
        assert_eq!(fake.state().evictions.len(), 2);
        block_on(exec.step(&fake, t(20))).unwrap();
        assert_eq!(fake.state().evictions.len(), 3);
        // No forced deletion before the 5-minute timeout.
        let mut now = 20;
        while now < 299 {
            now = exec.next_deadline().unwrap().as_millis() / 1000;
            if now >= 300 {
                break;
            }
            block_on(exec.step(&fake, t(now))).unwrap();
            assert!(fake.state().deletions.is_empty());
        }
        let report = block_on(exec.step(&fake, t(300))).unwrap();
        assert_eq!(fake.state().deletions, vec!["app/db"]);
        assert!(report.events.iter().any(|e| matches!(
            e,
            ExecutorEvent::DrainFinished { outcome: DrainOutcome::TimedOut { force_deleted }, .. }
                if force_deleted == &vec!["app/db".to_owned()]
        )));
        let n = fake.state().nodes[0].clone();
        assert_eq!(
            n.annotations
                .get(keys::ANNOTATION_DRAINED)
                .map(String::as_str),
            Some("bashible")
        );
        assert!(!n.has_annotation(keys::ANNOTATION_DRAINING));
        assert!(exec.drains().is_empty());
        // Next step approves the disruption; the DaemonSet pod was never touched.
        let report = block_on(exec.step(&fake, t(301))).unwrap();
        assert!(report.events.contains(&ExecutorEvent::Applied {
            group: "g".into(),
            command: UpdateCommand::ApproveDisruption {
                node: "n1".into(),
                cordon: false
            }
        }));
        assert!(!fake.state().evictions.contains(&"app/agent".to_owned()));
    }

    #[test]
    fn drains_are_dropped_when_the_node_vanishes_and_resumed_after_a_restart() {
        let fake = Fake::default();
        {
            let mut s = fake.state();
            s.groups.push(group());
            let mut n = node("n1", &[]);
            n.annotations
                .insert(keys::ANNOTATION_DRAINING.into(), "user".into());
            s.nodes.push(n);
            s.pods.push(pod("db", "n1", "StatefulSet"));
            s.blocked.insert("app/db".into());
        }
        // A fresh executor picks up a drain somebody asked for.
        let mut exec = UpdateExecutor::new();
        block_on(exec.step(&fake, t(0))).unwrap();
        assert_eq!(exec.drains().len(), 1);
        assert_eq!(exec.drains()["n1"].source, "user");
        fake.state().nodes.clear();
        let report = block_on(exec.step(&fake, t(1))).unwrap();
        assert!(exec.drains().is_empty());
        assert!(matches!(
            report.events.as_slice(),
            [ExecutorEvent::DrainAbandoned { .. }]
        ));
    }

    #[test]
    fn user_drain_ends_with_drained_user_which_goes_when_uncordoned() {
        let fake = Fake::default();
        {
            let mut s = fake.state();
            s.groups.push(group());
            let mut n = node("n1", &[]);
            n.annotations
                .insert(keys::ANNOTATION_DRAINING.into(), "user".into());
            s.nodes.push(n);
            s.pods.push(pod("web", "n1", "ReplicaSet"));
        }
        let mut exec = UpdateExecutor::new();
        block_on(exec.step(&fake, t(0))).unwrap();
        {
            let s = fake.state();
            assert_eq!(
                s.nodes[0]
                    .annotations
                    .get(keys::ANNOTATION_DRAINED)
                    .map(String::as_str),
                Some("user")
            );
            assert!(s.nodes[0].unschedulable);
        }
        fake.state().nodes[0].unschedulable = false;
        let report = block_on(exec.step(&fake, t(5))).unwrap();
        assert!(
            report
                .events
                .contains(&ExecutorEvent::DrainedMarkRemoved { node: "n1".into() })
        );
        assert!(!fake.state().nodes[0].has_annotation(keys::ANNOTATION_DRAINED));
    }

    fn approved(fake: &Fake) -> Vec<String> {
        fake.state()
            .nodes
            .iter()
            .filter(|n| n.has_annotation(keys::ANNOTATION_APPROVED))
            .map(|n| n.name.clone())
            .collect()
    }

    #[test]
    fn a_cache_behind_the_own_approval_is_not_planned_from() {
        let fake = Fake::default();
        {
            let mut s = fake.state();
            s.groups.push(group());
            s.nodes.push(node("n1", &[]));
            s.nodes
                .push(node("n2", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]));
        }
        let mut exec = UpdateExecutor::new();
        // A new executor reads the API directly once, then approves n2 (maxConcurrent 1).
        let report = block_on(exec.step(&fake, t(0))).unwrap();
        assert_eq!(report.fresh_reads, 1);
        assert_eq!(approved(&fake), vec!["n2"]);
        // n1 asks for approval; the cache shows that but not yet the approval of n2.
        {
            let mut s = fake.state();
            s.nodes[0]
                .annotations
                .insert(keys::ANNOTATION_WAITING_FOR_APPROVAL.into(), String::new());
            s.version += 1;
            s.nodes[0].resource_version = s.version.to_string();
            let mut stale = s.nodes.clone();
            stale[1] = node("n2", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]);
            s.cache = Some(stale);
        }
        let report = block_on(exec.step(&fake, t(10))).unwrap();
        assert_eq!(report.fresh_reads, 1, "the stale cache was not trusted");
        assert_eq!(approved(&fake), vec!["n2"], "maxConcurrent 1 holds");
        // Once the cache has caught up it is used again.
        let live = fake.state().nodes.clone();
        fake.state().cache = Some(live);
        let report = block_on(exec.step(&fake, t(20))).unwrap();
        assert_eq!(report.fresh_reads, 0);
    }

    #[test]
    fn a_decision_on_a_node_changed_meanwhile_is_planned_again() {
        let fake = Fake::default();
        {
            let mut s = fake.state();
            s.groups.push(group());
            let mut n1 = node("n1", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]);
            n1.resource_version = "1".into();
            s.nodes.push(n1);
            s.version = 1;
            s.races.insert("n1".into());
        }
        let mut exec = UpdateExecutor::new();
        let report = block_on(exec.step(&fake, t(0))).unwrap();
        assert_eq!(report.replans, 1);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(approved(&fake), vec!["n1"]);
        let s = fake.state();
        assert_eq!(
            s.nodes[0].labels.get("raced").map(String::as_str),
            Some("yes"),
            "the concurrent change survives"
        );
    }

    /// A node of the property below: its update marks, `draining` and `drained` sources
    /// (`None`: absent), cordon, and pods (`true`: its eviction is refused).
    type NodeCase = (
        u8,
        Option<&'static str>,
        Option<&'static str>,
        bool,
        Vec<bool>,
    );

    fn node_case() -> impl proptest::strategy::Strategy<Value = NodeCase> {
        use proptest::prelude::*;
        let source = || {
            prop::option::of(prop::sample::select(vec![
                "",
                "bashible",
                "user",
                "scale-down",
            ]))
        };
        (
            0u8..16,
            source(),
            source(),
            any::<bool>(),
            prop::collection::vec(any::<bool>(), 0..3),
        )
    }

    fn fake_of(nodes: &[NodeCase]) -> Fake {
        let fake = Fake::default();
        {
            let mut s = fake.state();
            s.groups.push(group());
            let marks = [
                keys::ANNOTATION_WAITING_FOR_APPROVAL,
                keys::ANNOTATION_APPROVED,
                keys::ANNOTATION_DISRUPTION_REQUIRED,
                keys::ANNOTATION_DISRUPTION_APPROVED,
            ];
            for (i, (bits, draining, drained, cordoned, pods)) in nodes.iter().enumerate() {
                let name = format!("n{i}");
                let set: Vec<&str> = marks
                    .iter()
                    .enumerate()
                    .filter(|(b, _)| bits & (1 << b) != 0)
                    .map(|(_, m)| *m)
                    .collect();
                let mut n = node(&name, &set);
                if let Some(v) = draining {
                    n.annotations
                        .insert(keys::ANNOTATION_DRAINING.into(), (*v).into());
                }
                if let Some(v) = drained {
                    n.annotations
                        .insert(keys::ANNOTATION_DRAINED.into(), (*v).into());
                }
                n.unschedulable = *cordoned;
                s.version += 1;
                n.resource_version = s.version.to_string();
                s.nodes.push(n);
                for (j, refused) in pods.iter().enumerate() {
                    let p = pod(&format!("{name}-p{j}"), &name, "ReplicaSet");
                    if *refused {
                        s.blocked.insert(p.key());
                    }
                    s.pods.push(p);
                }
            }
        }
        fake
    }

    /// A person's edit between steps: node `i % len` is uncordoned, cordoned, or given
    /// `drained=user` or `draining=user`.
    fn person_edits(fake: &Fake, edits: &[(usize, u8)]) {
        let mut s = fake.state();
        for &(i, what) in edits {
            let len = s.nodes.len();
            if len == 0 {
                return;
            }
            s.version += 1;
            let version = s.version.to_string();
            let Some(n) = s.nodes.get_mut(i % len) else {
                continue;
            };
            match what % 4 {
                0 => n.unschedulable = false,
                1 => n.unschedulable = true,
                2 => {
                    n.annotations
                        .insert(keys::ANNOTATION_DRAINED.into(), "user".into());
                }
                _ => {
                    n.annotations
                        .insert(keys::ANNOTATION_DRAINING.into(), "user".into());
                }
            }
            n.resource_version = version;
        }
    }

    /// Group `name` (one with the defaults of [`group`] otherwise).
    fn group_named(name: &str) -> Arc<NodeGroup> {
        let mut g = group();
        g.metadata.name = Some(name.into());
        Arc::new(g)
    }

    proptest::proptest! {
        /// Planned groups kept by their position in the list of groups: over random steps
        /// that reorder the groups, leave some without a desired checksum and flip the
        /// readiness of their waiting nodes, the skipping executor's plans are the plans of
        /// one planning every group.
        #[test]
        fn groups_kept_by_position_plan_as_groups_planned_again(
            steps in proptest::collection::vec(
                (
                    proptest::sample::subsequence(vec![0usize, 1, 2], 0..=3),
                    proptest::prelude::any::<[bool; 3]>(),
                    proptest::collection::vec((0usize..3, 0usize..3), 0..3),
                ),
                1..10,
            ),
        ) {
            let names = ["a", "b", "c"];
            let groups: Vec<Arc<NodeGroup>> = names.iter().map(|n| group_named(n)).collect();
            let mut ready = [[true; 3]; 3];
            let mut version = 0u64;
            let mut skipping = UpdateExecutor::new();
            let mut plain = UpdateExecutor::new();
            plain.set_skip_unchanged(false);
            let node_of = |g: usize, i: usize, ready: bool, version: u64| {
                let mut n = node(&format!("{}-{i}", names[g]), &[keys::ANNOTATION_WAITING_FOR_APPROVAL]);
                n.labels.insert(keys::LABEL_NODE_GROUP.into(), names[g].into());
                n.ready = ready;
                n.resource_version = version.to_string();
                Arc::new(n)
            };
            let mut all = Vec::new();
            for g in 0..3 {
                for i in 0..3 {
                    version += 1;
                    all.push(node_of(g, i, true, version));
                }
            }
            for executor in [&mut skipping, &mut plain] {
                executor.view.apply(NodeChanges::resync(all.clone()), &mut executor.known);
            }
            for (order, with_checksum, flips) in steps {
                // The groups in the step's order (those left out of `order` come after it).
                let mut listed: Vec<Arc<NodeGroup>> = order.iter().map(|&g| Arc::clone(&groups[g])).collect();
                listed.extend((0..3).filter(|g| !order.contains(g)).map(|g| Arc::clone(&groups[g])));
                let checksums: BTreeMap<String, String> = (0..3)
                    .filter(|&g| with_checksum[g])
                    .map(|g| (names[g].to_owned(), "new".to_owned()))
                    .collect();
                let mut changed = Vec::new();
                for (g, i) in flips {
                    ready[g][i] = !ready[g][i];
                    version += 1;
                    changed.push(node_of(g, i, ready[g][i], version));
                }
                for executor in [&mut skipping, &mut plain] {
                    let changes = NodeChanges {
                        revision: None,
                        resync: false,
                        changed: changed.clone(),
                        removed: Vec::new(),
                    };
                    executor.view.apply(changes, &mut executor.known);
                }
                let a = skipping.plan(&listed, &checksums, t(0));
                let b = plain.plan(&listed, &checksums, t(0));
                proptest::prop_assert_eq!(a, b);
            }
        }
    }

    proptest::proptest! {
        /// The drain half of the skipping executor looks only at the nodes it may act on
        /// (`draining`, or a person's `drained`: `UpdateMarks::drain_relevant`); the plain
        /// one at every node with a drain mark. Over random marks, cordons, pods, refused
        /// evictions and a person's edits between steps (up to a drain timeout), both take
        /// the same decisions and leave the same cluster.
        #[test]
        fn looking_only_at_relevant_drain_marks_changes_no_decision(
            nodes in proptest::collection::vec(node_case(), 1..6),
            edits in proptest::collection::vec(
                proptest::collection::vec((0usize..6, 0u8..4), 0..3),
                4,
            ),
        ) {
            let (skipping, plain) = (fake_of(&nodes), fake_of(&nodes));
            let mut a = UpdateExecutor::new();
            let mut b = UpdateExecutor::new();
            b.set_skip_unchanged(false);
            for (step, now) in [0, 10, 30, 400].into_iter().enumerate() {
                if let Some(e) = edits.get(step) {
                    person_edits(&skipping, e);
                    person_edits(&plain, e);
                }
                let ra = block_on(a.step(&skipping, t(now))).unwrap();
                let rb = block_on(b.step(&plain, t(now))).unwrap();
                proptest::prop_assert_eq!(&ra.events, &rb.events, "step at {}s", now);
                let errors = |r: &StepReport| {
                    r.errors.iter().map(ToString::to_string).collect::<Vec<_>>()
                };
                proptest::prop_assert_eq!(errors(&ra), errors(&rb));
                proptest::prop_assert_eq!(&ra.blocked, &rb.blocked);
            }
            let (sa, sb) = (skipping.state(), plain.state());
            proptest::prop_assert_eq!(&sa.nodes, &sb.nodes);
            proptest::prop_assert_eq!(&sa.pods, &sb.pods);
            proptest::prop_assert_eq!(&sa.evictions, &sb.evictions);
            proptest::prop_assert_eq!(&sa.deletions, &sb.deletions);
        }
    }

    #[test]
    fn a_step_patches_each_command_as_command_patch_does() {
        let node = |n: &str| n.to_owned();
        let commands = [
            UpdateCommand::Approve { node: node("a") },
            UpdateCommand::StartDrain { node: node("b") },
            UpdateCommand::ApproveDisruption {
                node: node("c"),
                cordon: false,
            },
            UpdateCommand::ApproveDisruption {
                node: node("d"),
                cordon: true,
            },
            UpdateCommand::ReplaceMachine { node: node("e") },
            UpdateCommand::Finish {
                node: node("f"),
                uncordon: false,
            },
            UpdateCommand::Finish {
                node: node("g"),
                uncordon: true,
            },
        ];
        let mut patches = CommandPatches::default();
        // Every command twice, in both orders, with and without a precondition.
        let order = commands.iter().chain(commands.iter().rev());
        for (i, command) in order.enumerate() {
            let version = if i % 3 == 0 {
                String::new()
            } else {
                i.to_string()
            };
            let expected = command_patch(command).map(|p| p.if_resource_version(&version));
            let got = patches.get(command).map(|p| {
                p.set_resource_version(&version);
                p.clone()
            });
            assert_eq!(got, expected, "{command}");
        }
    }

    #[test]
    fn command_patches_match_the_annotation_protocol() {
        let mut n = node("n1", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]);
        command_patch(&UpdateCommand::Approve { node: "n1".into() })
            .unwrap()
            .apply_to(&mut n);
        assert!(n.has_annotation(keys::ANNOTATION_APPROVED));
        assert!(!n.has_annotation(keys::ANNOTATION_WAITING_FOR_APPROVAL));
        command_patch(&UpdateCommand::ApproveDisruption {
            node: "n1".into(),
            cordon: true,
        })
        .unwrap()
        .apply_to(&mut n);
        assert!(n.unschedulable);
        command_patch(&UpdateCommand::Finish {
            node: "n1".into(),
            uncordon: true,
        })
        .unwrap()
        .apply_to(&mut n);
        assert!(!n.unschedulable);
        assert!(
            n.annotations
                .keys()
                .all(|k| !update_annotation_keys().contains(k.as_str()))
        );
        assert!(command_patch(&UpdateCommand::ReplaceMachine { node: "n1".into() }).is_none());
    }

    /// A node's pod listing drawn as `(key, uid, evictable)` numbers (uid 0: none), sorted by
    /// key when `sort` (stably: of a key listed twice the last one stays last).
    fn listed_pods(listed: Vec<(u8, u8, bool)>, sort: bool) -> Vec<NodePod> {
        let mut pods: Vec<NodePod> = listed
            .into_iter()
            .map(|(k, u, evictable)| NodePod {
                key: format!("ns/p{k}"),
                uid: if u == 0 {
                    String::new()
                } else {
                    format!("u{u}")
                },
                evictable,
            })
            .collect();
        if sort {
            pods.sort_by(|a, b| a.key.cmp(&b.key));
        }
        pods
    }

    /// `gone_pods` as it was: the listing indexed by key whatever its order.
    fn gone_pods_indexed(
        remaining: &BTreeSet<String>,
        pod_uids: &BTreeMap<String, String>,
        pods: &[NodePod],
    ) -> Vec<String> {
        let present: BTreeMap<&str, &str> = pods
            .iter()
            .map(|p| (p.key.as_str(), p.uid.as_str()))
            .collect();
        remaining
            .iter()
            .filter(|key| match present.get(key.as_str()) {
                None => true,
                Some(uid) => pod_uids
                    .get(*key)
                    .is_some_and(|known| !known.is_empty() && known != uid),
            })
            .cloned()
            .collect()
    }

    proptest::proptest! {
        /// The pods a listing shows gone are the same whether the listing is walked beside
        /// the drain's (sorted) keys or indexed: over listings sorted or not, with keys listed
        /// twice, replaced UIDs and UIDs not known.
        #[test]
        fn a_sorted_listing_walked_shows_the_same_pods_gone(
            remaining in proptest::collection::btree_set(0u8..8, 0..8),
            uids in proptest::collection::btree_map(0u8..8, 0u8..3, 0..8),
            listed in proptest::collection::vec((0u8..8, 0u8..3, proptest::bool::ANY), 0..10),
            sort in proptest::bool::ANY,
        ) {
            let key = |k: u8| format!("ns/p{k}");
            let uid = |u: u8| if u == 0 { String::new() } else { format!("u{u}") };
            let remaining: BTreeSet<String> = remaining.into_iter().map(key).collect();
            let pod_uids: BTreeMap<String, String> =
                uids.into_iter().map(|(k, u)| (key(k), uid(u))).collect();
            let pods = listed_pods(listed, sort);
            let walked = gone_pods(remaining.iter().map(String::as_str), &pod_uids, &pods);
            proptest::prop_assert_eq!(walked, gone_pods_indexed(&remaining, &pod_uids, &pods));
        }

        /// The drained patch made once and given one source after another is the patch
        /// made anew for each source.
        #[test]
        fn a_drained_patch_kept_is_the_patch_made_anew(
            sources in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(String::new()),
                    proptest::strategy::Just(keys::DRAIN_SOURCE_BASHIBLE.to_owned()),
                    "[a-z-]{1,12}",
                ],
                1..8,
            ),
        ) {
            let mut held = NodePatch::new();
            for source in sources {
                let anew = NodePatch::new()
                    .remove_annotation(keys::ANNOTATION_DRAINING)
                    .set_annotation(keys::ANNOTATION_DRAINED, source.as_str());
                proptest::prop_assert_eq!(drained_patch(&mut held, &source), &anew);
            }
        }

        /// Observing a listing marks gone, in one walk of the drain's pods, the pods that
        /// reporting each gone key one by one marks (the same pods remaining, the same
        /// outcome): over drains with pods already evicted, refused or gone, and listings
        /// sorted or not, with keys listed twice and replaced UIDs.
        #[test]
        fn observing_a_listing_at_once_is_reporting_each_gone_pod(
            tracked in proptest::collection::btree_map(0u8..8, 0u8..3, 0..8),
            results in proptest::collection::vec((0u8..8, 0u8..4), 0..6),
            listed in proptest::collection::vec((0u8..8, 0u8..3, proptest::bool::ANY), 0..10),
            sort in proptest::bool::ANY,
            unschedulable in proptest::bool::ANY,
        ) {
            let key = |k: u8| format!("ns/p{k}");
            let uid = |u: u8| if u == 0 { String::new() } else { format!("u{u}") };
            let listing: Vec<NodePod> = tracked
                .iter()
                .map(|(&k, &u)| NodePod { key: key(k), uid: uid(u), evictable: true })
                .collect();
            let mut active = ActiveDrain::start(
                ("n", unschedulable),
                "g".into(),
                String::new(),
                &listing,
                DrainConfig::default(),
                Timestamp::EPOCH,
            );
            let now = Timestamp::EPOCH;
            while active.drain.poll_command(now).is_some() {}
            for (k, r) in results {
                match r {
                    0 => active.drain.handle_eviction(&key(k), EvictionOutcome::Evicted, now),
                    1 => active.drain.handle_eviction(&key(k), EvictionOutcome::Refused, now),
                    2 => active.drain.handle_eviction(&key(k), EvictionOutcome::NotFound, now),
                    _ => active.drain.handle_pod_deleted(&key(k), now),
                }
            }
            let pods = listed_pods(listed, sort);
            let mut one_by_one = active.drain.clone();
            for gone in gone_pods(active.drain.remaining(), &active.pod_uids, &pods) {
                one_by_one.handle_pod_deleted(&gone, now);
            }
            observe_pods(&mut active, &pods, now);
            let remaining: Vec<&str> = active.drain.remaining().collect();
            proptest::prop_assert_eq!(remaining, one_by_one.remaining().collect::<Vec<_>>());
            proptest::prop_assert_eq!(active.drain.outcome(), one_by_one.outcome());
        }

        /// A drain just started from a listing that names each pod once in key order finds
        /// nothing gone in that listing (its first observation is skipped then): over
        /// listings sorted or not, with keys listed twice (evictable or not, with the same
        /// UID or another) and UIDs not known.
        #[test]
        fn a_drain_started_from_a_listing_once_in_order_finds_nothing_gone_in_it(
            listed in proptest::collection::vec((0u8..6, 0u8..3, proptest::bool::ANY), 0..8),
            sort in proptest::bool::ANY,
        ) {
            let mut pods: Vec<NodePod> = listed
                .into_iter()
                .map(|(k, u, evictable)| NodePod {
                    key: format!("ns/p{k}"),
                    uid: if u == 0 { String::new() } else { format!("u{u}") },
                    evictable,
                })
                .collect();
            if sort {
                pods.sort_by(|a, b| a.key.cmp(&b.key));
            }
            let mut active = ActiveDrain::start(
                ("n", false),
                "g".into(),
                String::new(),
                &pods,
                DrainConfig::default(),
                Timestamp::EPOCH,
            );
            let started = active.drain.clone();
            observe_pods(&mut active, &pods, Timestamp::EPOCH);
            if listed_once_in_order(&pods) {
                let remaining: Vec<&str> = active.drain.remaining().collect();
                let before: Vec<&str> = started.remaining().collect();
                proptest::prop_assert_eq!(remaining, before);
            }
        }
    }

    /// Every event of the executor with the given texts (the commands of every kind).
    fn every_event(node: &str, pod: &str, text: &str, n: usize) -> Vec<ExecutorEvent> {
        let commands = [
            UpdateCommand::Approve { node: node.into() },
            UpdateCommand::StartDrain { node: node.into() },
            UpdateCommand::ApproveDisruption {
                node: node.into(),
                cordon: n.is_multiple_of(2),
            },
            UpdateCommand::ReplaceMachine { node: node.into() },
            UpdateCommand::Finish {
                node: node.into(),
                uncordon: n.is_multiple_of(3),
            },
        ];
        let mut events: Vec<ExecutorEvent> = commands
            .into_iter()
            .map(|command| ExecutorEvent::Applied {
                group: text.into(),
                command,
            })
            .collect();
        events.extend([
            ExecutorEvent::DrainStarted {
                node: node.into(),
                group: text.into(),
                pods: n,
            },
            ExecutorEvent::Cordoned { node: node.into() },
            ExecutorEvent::Evicted {
                node: node.into(),
                pod: pod.into(),
            },
            ExecutorEvent::EvictionRefused {
                node: node.into(),
                pod: pod.into(),
                reason: text.into(),
                retry_at: t(0),
            },
            ExecutorEvent::ForceDeleted {
                node: node.into(),
                pod: pod.into(),
            },
            ExecutorEvent::DrainFinished {
                node: node.into(),
                group: text.into(),
                outcome: DrainOutcome::Completed,
            },
            ExecutorEvent::DrainFinished {
                node: node.into(),
                group: text.into(),
                outcome: DrainOutcome::TimedOut {
                    force_deleted: vec![pod.into(); n % 3],
                },
            },
            ExecutorEvent::DrainAbandoned {
                node: node.into(),
                reason: text.into(),
            },
            ExecutorEvent::DrainedMarkRemoved { node: node.into() },
        ]);
        events
    }

    proptest::proptest! {
        /// An event's message put together from its pieces is what `Display` writes, and an
        /// applied command's event message is the command's `Display`, for any texts.
        #[test]
        fn messages_from_pieces_are_the_display(
            node in ".{0,12}",
            pod in ".{0,12}",
            text in ".{0,12}",
            n in proptest::prop_oneof![0usize..7, proptest::strategy::Just(usize::MAX), 7usize..100_000],
        ) {
            for event in every_event(&node, &pod, &text, n) {
                proptest::prop_assert_eq!(event.message(), event.to_string());
                if let ExecutorEvent::DrainFinished { outcome, .. } = &event {
                    proptest::prop_assert_eq!(outcome.message(), outcome.to_string());
                }
                if let ExecutorEvent::Applied { command, .. } = &event {
                    proptest::prop_assert_eq!(concat(&command.pieces()), command.to_string());
                }
            }
        }
    }
}
