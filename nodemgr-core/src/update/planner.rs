//! The update planner: one group's next steps ([`plan_group_update`]) by the phases and
//! guarantees of the module docs of [`crate::update`], and every group at once
//! ([`plan_updates`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::{UpdateCommand, UpdateMarks, UpdatePlan, max_concurrent};
use crate::disruption::{Action, DisruptionSnapshot, METHODS, Stage, UpdateView, plan_stage};
use crate::hash::FastHash;
use crate::model::{Node, NodeGroup, NodeType, Timestamp};

/// Everything the planner needs about one group.
#[derive(Debug, Clone)]
pub struct GroupSnapshot<'a> {
    /// The group (spec: `update.maxConcurrent`, `disruptions`).
    pub group: &'a NodeGroup,
    /// The configuration checksum the group's nodes should report; empty when unknown (then no
    /// node is finished). It is the group's [`crate::bashible::Bundle::checksum`]: the value the
    /// bootstrap script writes into the node's `node.deckhouse.io/configuration-checksum`
    /// annotation ([`crate::bashible::desired_checksums`] computes it for many groups).
    pub desired_checksum: &'a str,
    /// The group's existing nodes.
    pub nodes: Vec<&'a Node>,
}

/// One node of a group as the planner reads it: its name, readiness, configuration checksum
/// and update marks, a quick way to tell that the node does not run a checksum, and the node
/// as the disruption methods of the update stage read it. A whole [`Node`] with its marks is
/// one; the update executor's view hands out what it kept of each node instead (its facts,
/// not the node).
pub(crate) trait PlanMember<'a>: Copy {
    /// The node's name.
    fn name(self) -> &'a str;
    /// Whether the node is Ready.
    fn ready(self) -> bool;
    /// Its configuration checksum ([`Node::checksum`]).
    fn checksum(self) -> Option<&'a str>;
    /// Its update marks ([`UpdateMarks::of`] the node).
    fn marks(self) -> UpdateMarks;
    /// `false` only when the node's configuration checksum is surely not the one whose
    /// [`checksum_hash`] is `desired_hash` (the planner then skips the comparison of the
    /// checksums); `true` says nothing.
    fn may_run(self, desired_hash: u64) -> bool;
    /// The node itself, when the member is a whole node (`None`: see
    /// [`PlanMember::disruption_view`]).
    fn whole_node(self) -> Option<&'a Node>;
    /// Which of the two common kinds the walk counts without reading further the member is
    /// ([`Resting`]); [`Resting::Other`] (read in full) says nothing. A member that keeps
    /// what it reads of a node can answer this from what it worked out when it read it.
    fn resting(self) -> Resting {
        Resting::Other
    }
    /// The node as the disruption methods of [`crate::disruption::Stage::Update`] read it
    /// ([`UpdateView::asking`]) when the member is not a whole node: they read its name and
    /// `unschedulable` only, so a node with just those two set (asked only for the few nodes
    /// that hold a slot and ask for a disruption).
    fn disruption_view(self) -> Node;
}

impl<'a> PlanMember<'a> for (&'a Node, UpdateMarks) {
    fn name(self) -> &'a str {
        &self.0.name
    }

    fn ready(self) -> bool {
        self.0.ready
    }

    fn checksum(self) -> Option<&'a str> {
        self.0.checksum()
    }

    fn marks(self) -> UpdateMarks {
        self.1
    }

    fn may_run(self, _: u64) -> bool {
        true
    }

    fn whole_node(self) -> Option<&'a Node> {
        Some(self.0)
    }

    fn disruption_view(self) -> Node {
        self.0.clone()
    }
}

/// What a member adds to a plan, told from its readiness and marks alone for the two kinds
/// most members of a group are, so that the planner's walk counts them without reading them
/// further ([`PlanMember::resting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resting {
    /// Ready, without any update mark: it holds no slot, does not finish (no mark is
    /// [`UpdateMarks::ours`]), asks for nothing and waits for nothing; it counts in the
    /// group's size only.
    Inert,
    /// Ready, `waiting-for-approval` its only mark: unless it may run the desired checksum
    /// (then it may finish, and is read in full), it counts in the group's size and among
    /// the waiting nodes, and nothing else.
    Waiting,
    /// Anything else: read in full.
    Other,
}

impl Resting {
    /// The kind of a member with readiness `ready` and marks `marks`.
    pub(crate) fn of(ready: bool, marks: &UpdateMarks) -> Self {
        let waiting_only = UpdateMarks {
            waiting: true,
            ..UpdateMarks::default()
        };
        if !ready {
            Self::Other
        } else if *marks == UpdateMarks::default() {
            Self::Inert
        } else if *marks == waiting_only {
            Self::Waiting
        } else {
            Self::Other
        }
    }
}

/// The hash of a configuration checksum that [`PlanMember::may_run`] compares.
pub(crate) fn checksum_hash(checksum: &str) -> u64 {
    use std::hash::BuildHasher;
    FastHash::default().hash_one(checksum)
}

/// Deckhouse's whole-group gate for CloudEphemeral groups: no update step while the group's
/// `status.desired` differs from its Ready nodes (still scaling, or a machine never joined).
/// Called once every node of the snapshot is Ready, so `ready` is the snapshot's node count.
/// A group whose status carries no `desired` yet (the status controller has not counted it,
/// or the reader's cache has not seen that write) is held too: nothing says it is whole
/// (docs/deckhouse.md §3.2). Returns the reason it blocks, if it does.
pub(super) fn scaling_gate(group: &NodeGroup, ready: usize) -> Option<String> {
    if group.spec.node_type != Some(NodeType::CloudEphemeral) {
        return None;
    }
    let Some(desired) = group.status.as_ref().and_then(|s| s.desired) else {
        return Some("group is not counted yet: its status carries no desired".to_owned());
    };
    let ready_count = i64::try_from(ready).unwrap_or(i64::MAX);
    (desired != ready_count).then(|| {
        format!("group is scaling: status.desired is {desired}, {ready_count} nodes are Ready")
    })
}

/// Plans the next update steps of one group at `now` (see the module docs for the phases and
/// guarantees).
pub fn plan_group_update(snapshot: &GroupSnapshot<'_>, now: Timestamp) -> UpdatePlan {
    let nodes: Vec<(&Node, UpdateMarks)> = snapshot
        .nodes
        .iter()
        .map(|n| (*n, UpdateMarks::of(n)))
        .collect();
    plan_group_update_marked(snapshot.group, snapshot.desired_checksum, nodes, now)
}

/// [`plan_group_update`] for nodes whose [`UpdateMarks`] the caller already read (each
/// `UpdateMarks::of` its node): the update executor keeps them for the nodes that did not
/// change since its previous step.
pub fn plan_group_update_marked(
    group: &NodeGroup,
    desired: &str,
    mut nodes: Vec<(&Node, UpdateMarks)>,
    now: Timestamp,
) -> UpdatePlan {
    nodes.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    plan_group_update_sorted(group, desired, &nodes, now)
}

/// [`plan_group_update_marked`] for nodes already in name order (the update executor keeps
/// each group's nodes so): the same plan, without sorting them again. Nodes out of order
/// give a plan in their order (debug builds assert the order).
pub fn plan_group_update_sorted(
    group: &NodeGroup,
    desired: &str,
    nodes: &[(&Node, UpdateMarks)],
    now: Timestamp,
) -> UpdatePlan {
    debug_assert!(nodes.is_sorted_by(|a, b| a.0.name <= b.0.name));
    plan_group_members(group, desired, nodes.iter().copied(), false, now)
}

/// [`plan_group_update_sorted`] reading the group's nodes from an iterator: the update
/// executor hands its view's members without collecting them first. A first walk counts and
/// keeps what a plan can name besides the waiting nodes (the nodes that finish, ask for a
/// disruption, hold a slot or are not Ready) and counts the waiting ones; only when there are
/// free slots to fill does a second walk pick waiting nodes (telling the finishing ones by
/// their position in the first, not by their checksum), and it stops at the first that finds
/// no slot. A group of resting or waiting nodes thus costs a walk and no list of its nodes.
/// `unique_names`: no name is listed twice (the executor's view is keyed by name); otherwise
/// a node named like a finishing one does not move either, as the phased planner has it. The
/// same plan as the phases walked one after the other (the property
/// `a_plan_in_one_pass_is_the_phased_plan` compares the two on random groups).
pub(crate) fn plan_group_members<'a, I, M>(
    group: &NodeGroup,
    desired: &str,
    members: I,
    unique_names: bool,
    now: Timestamp,
) -> UpdatePlan
where
    I: IntoIterator<Item = M>,
    I::IntoIter: Clone,
    M: PlanMember<'a>,
{
    plan_group_members_with_inert(group, desired, members, 0, unique_names, now)
}

/// [`plan_group_members`] for a group of which `inert` [`Resting::Inert`] members are left
/// out of `members` (the others in the group's order): an inert member only counts in the
/// group's size (the walk skips it, and it never waits), so the plan is the one of the whole
/// group. The update executor keeps its groups' members that are not inert apart
/// (the property `a_plan_without_the_inert_members_is_the_plan_of_all` compares the two).
pub(crate) fn plan_group_members_with_inert<'a, I, M>(
    group: &NodeGroup,
    desired: &str,
    members: I,
    inert: usize,
    unique_names: bool,
    now: Timestamp,
) -> UpdatePlan
where
    I: IntoIterator<Item = M>,
    I::IntoIter: Clone,
    M: PlanMember<'a>,
{
    let desired_hash = checksum_hash(desired);
    let finishes = |member: M, marks: &UpdateMarks| {
        member.ready()
            && marks.ours()
            && !desired.is_empty()
            && member.may_run(desired_hash)
            && member.checksum() == Some(desired)
    };
    let members = members.into_iter();
    let nodes = members.clone().map(|m| (m, m.marks()));
    let waits =
        |marks: &UpdateMarks| !marks.wants_disruption() && marks.waiting && !marks.occupies_slot();
    let mut size = inert;
    let mut holders: Vec<&str> = Vec::new();
    let mut not_ready: Vec<&str> = Vec::new();
    let mut candidates: Vec<(M, UpdateMarks)> = Vec::new();
    let mut waiting = 0usize;
    // The finishing nodes' positions in the walk and names, in order: the second walk tells
    // them by position instead of reading their checksum again.
    let mut finished: Vec<(usize, &str)> = Vec::new();
    let mut plan = UpdatePlan::default();
    for (at, (member, marks)) in nodes.clone().enumerate() {
        size += 1;
        // The two common kinds, counted without reading them further (see [`Resting`]).
        match member.resting() {
            Resting::Inert => continue,
            Resting::Waiting if !member.may_run(desired_hash) => {
                waiting += 1;
                continue;
            }
            Resting::Waiting | Resting::Other => {}
        }
        let name = member.name();
        if marks.occupies_slot() {
            if holders.is_empty() {
                // Room for a group's usual slots at once, not grown one doubling at a time.
                holders.reserve(ROOM);
            }
            holders.push(name);
        }
        if !member.ready() {
            not_ready.push(name);
        } else if finishes(member, &marks) {
            // Phase 1: finish nodes that run the desired configuration.
            if finished.is_empty() {
                finished.reserve(ROOM);
                plan.commands.reserve(ROOM);
            }
            plan.commands.push(UpdateCommand::Finish {
                node: name.to_owned(),
                uncordon: marks.cordoned_by_us(),
            });
            finished.push((at, name));
            continue;
        }
        // Who wants to move.
        if marks.wants_disruption() {
            if !marks.disruption_approved && marks.draining.is_none() {
                candidates.push((member, marks));
            }
        } else if waits(&marks) {
            waiting += 1;
        }
    }
    // The waiting nodes in the walk's order, the finishing ones (told by position) left out.
    let waiting_nodes = || {
        let mut finished = finished.iter().map(|(at, _)| *at).peekable();
        nodes.clone().enumerate().filter_map(move |(at, (n, m))| {
            if finished.next_if_eq(&at).is_some() || !waits(&m) {
                return None;
            }
            Some(n.name())
        })
    };
    // A node named like a finishing one (a name listed twice) does not move either.
    let finishing: BTreeSet<&str> = if unique_names {
        BTreeSet::new()
    } else {
        finished.iter().map(|(_, name)| *name).collect()
    };
    let named_finishing = |name: &str| finishing.contains(name);
    if !finishing.is_empty() {
        candidates.retain(|(n, _)| !named_finishing(n.name()));
        if waiting > 0 && !waiting_nodes().any(|n| !named_finishing(n)) {
            waiting = 0;
        }
    }
    if candidates.is_empty() && waiting == 0 {
        return plan;
    }
    if !not_ready.is_empty() {
        for name in not_ready {
            plan.blocked.push(not_ready_reason(name));
        }
        return plan;
    }
    if let Some(reason) = scaling_gate(group, size) {
        plan.blocked.push(reason);
        return plan;
    }
    let limit = max_concurrent(group, size);
    let mut occupied = holders.len();

    // Phase 2: disruptions, first for nodes that already hold a slot, by the disruption
    // methods of the update stage in list order (docs/executors.md §6).
    let mut full = false;
    let mut approved_now: Vec<&str> = Vec::new();
    let holding = || candidates.iter().filter(|(_, m)| m.occupies_slot());
    // The members that are not whole nodes answer what the methods read of a node.
    let partial: Vec<Node> = holding()
        .filter(|(n, _)| n.whole_node().is_none())
        .map(|(n, _)| n.disruption_view())
        .collect();
    let mut partial = partial.iter();
    let asking: Vec<(&Node, UpdateMarks)> = holding()
        .filter_map(|(n, m)| Some((n.whole_node().or_else(|| partial.next())?, *m)))
        .collect();
    if !asking.is_empty() {
        let snapshot = DisruptionSnapshot {
            now,
            scaling: None,
            update: Some(UpdateView {
                group,
                group_size: size,
                asking: &asking,
            }),
        };
        let planned = plan_stage(&METHODS, Stage::Update, &snapshot, &BTreeSet::new());
        plan.blocked.extend(planned.blocked);
        for p in planned.disruptions {
            if let Action::Update(command) = p.disruption.action {
                plan.commands.push(command);
            }
        }
    }
    // Nodes asking for a disruption without a slot get one first (phase 3 semantics), then
    // phase 3: approvals into the free slots, in the group's order; the first node that finds
    // none ends it (no later one would find one).
    let unslotted = candidates
        .iter()
        .filter(|(_, m)| !m.occupies_slot())
        .map(|(n, _)| n.name());
    let waiting = waiting_nodes().filter(|n| !named_finishing(n));
    // Room for the approvals the free slots allow, made once.
    let free = limit.saturating_sub(occupied).min(ROOM);
    approved_now.reserve(free);
    plan.commands.reserve(free);
    for name in unslotted.chain(waiting) {
        if occupied < limit {
            occupied += 1;
            approved_now.push(name);
            plan.commands.push(UpdateCommand::Approve {
                node: name.to_owned(),
            });
        } else {
            full = true;
            break;
        }
    }
    if full {
        let mut updating = holders;
        updating.extend(approved_now);
        updating.sort_unstable();
        plan.blocked.push(full_reason(limit, &updating));
    }
    plan
}

/// How many names the planner makes room for at once in a list that gets one (the nodes
/// holding a slot, the finishing ones): a group's usual `maxConcurrent` and then some.
const ROOM: usize = 16;

/// The reason a group waits for node `name`: `node {name} is not Ready`.
fn not_ready_reason(name: &str) -> String {
    ["node ", name, " is not Ready"].concat()
}

/// The reason a group with its `limit` update slots taken by `updating` (sorted) waits:
/// `maxConcurrent {limit} reached (updating: {updating joined by ", "})`.
fn full_reason(limit: usize, updating: &[&str]) -> String {
    const BEFORE: &str = "maxConcurrent ";
    const MIDDLE: &str = " reached (updating: ";
    const SEPARATOR: &str = ", ";
    let mut digits = itoa::Buffer::new();
    let limit = digits.format(limit);
    let names: usize = updating.iter().map(|n| n.len()).sum();
    let separators = SEPARATOR.len() * updating.len().saturating_sub(1);
    let mut reason =
        String::with_capacity(BEFORE.len() + limit.len() + MIDDLE.len() + names + separators + 1);
    reason.push_str(BEFORE);
    reason.push_str(limit);
    reason.push_str(MIDDLE);
    for (at, name) in updating.iter().enumerate() {
        if at > 0 {
            reason.push_str(SEPARATOR);
        }
        reason.push_str(name);
    }
    reason.push(')');
    reason
}

/// Plans every group at once: nodes are matched to groups by their `node.deckhouse.io/group`
/// label; a group without an entry in `desired_checksums` is skipped (its checksum is not known
/// yet). Commands come group by group, in the order of `groups`. `desired_checksums` is
/// [`crate::bashible::DesiredChecksums::checksums`].
pub fn plan_updates(
    groups: &[NodeGroup],
    desired_checksums: &BTreeMap<String, String>,
    nodes: &[Node],
    now: Timestamp,
) -> Vec<UpdateCommand> {
    plan_updates_detailed(groups, desired_checksums, nodes, now)
        .into_iter()
        .flat_map(|(_, plan)| plan.commands)
        .collect()
}

/// As [`plan_updates`], keeping each group's [`UpdatePlan`] (with its blocked reasons), in the
/// order of `groups`.
pub fn plan_updates_detailed(
    groups: &[NodeGroup],
    desired_checksums: &BTreeMap<String, String>,
    nodes: &[Node],
    now: Timestamp,
) -> Vec<(String, UpdatePlan)> {
    // By hash: a node's group is found in one hash of its name, not a search among the groups.
    let mut by_group: HashMap<&str, Vec<&Node>, FastHash> = HashMap::default();
    for node in nodes {
        if let Some(group) = node.group() {
            by_group.entry(group).or_default().push(node);
        }
    }
    groups
        .iter()
        .filter_map(|group| {
            let desired = desired_checksums.get(group.name())?;
            let snapshot = GroupSnapshot {
                group,
                desired_checksum: desired,
                nodes: by_group.remove(group.name()).unwrap_or_default(),
            };
            Some((group.name().to_owned(), plan_group_update(&snapshot, now)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{full_reason, not_ready_reason};

    proptest! {
        /// The reasons put together piece by piece read as the format strings write them.
        #[test]
        fn reasons_read_as_their_format_strings(
            limit in prop_oneof![0usize..20, Just(usize::MAX), any::<usize>()],
            names in proptest::collection::vec("[a-z0-9-]{0,12}", 0..5),
        ) {
            let updating: Vec<&str> = names.iter().map(String::as_str).collect();
            prop_assert_eq!(
                full_reason(limit, &updating),
                format!("maxConcurrent {limit} reached (updating: {})", updating.join(", "))
            );
            for name in &updating {
                prop_assert_eq!(not_ready_reason(name), format!("node {name} is not Ready"));
            }
        }
    }
}
