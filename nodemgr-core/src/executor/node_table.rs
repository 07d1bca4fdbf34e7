//! The update executor's view of the Nodes, kept from one step to the next: what a step reads
//! from every node ([`NodeFacts`]: its group, update marks, configuration checksum,
//! readiness, `unschedulable`, `draining` value and resourceVersion — the facts, not the
//! node), grouped by `node.deckhouse.io/group`, the names of the nodes the drain half has to
//! look at ([`NodeFacts::drain_marked`]), and the groups whose nodes changed since they were
//! last planned. It decides what a step looks at again: a change feed answer
//! ([`NodeChanges`], `docs/executors.md` §3) touches only the nodes it names; a whole list (a
//! resync, a direct read) is compared with the view node by node.
//!
//! The view keeps no node: a port that shares its nodes as `Arc`s (the simulator) is left the
//! only holder of each between steps, so its next change of a node need not copy it. A group
//! is *dirty* (planned again) when a node joined or left it, or when what the planner reads
//! of one of its nodes changed (its marks, checksum, readiness or `unschedulable`); a node
//! that changed otherwise (its resourceVersion, a label or annotation the planner does not
//! read) leaves its group's plan as it was.
//!
//! Order: a step looks at drain-marked nodes in the order of the port's list. When the last
//! whole list was sorted by name (the simulator's, and any port keeping its nodes by name)
//! that is name order, which changes keep; otherwise it is the position in that list, nodes
//! added since coming after it in the order they were added.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::hash::FastHash;
use crate::model::Node;
use crate::ports::NodeChanges;
use crate::read_your_writes::KnownVersions;
use crate::update::{PlanMember, Resting, UpdateMarks, checksum_hash};

/// What a step reads from one node: its facts, not the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// The node's name.
    pub(crate) name: String,
    /// Its resourceVersion (the precondition of the step's patches, read-your-writes).
    pub(crate) resource_version: String,
    /// `node.deckhouse.io/group`.
    pub(crate) group: Option<String>,
    /// Its update annotations.
    pub(crate) marks: UpdateMarks,
    /// Its configuration checksum.
    pub(crate) checksum: Option<String>,
    /// [`checksum_hash`] of its configuration checksum, if it has one: the planner skips the
    /// comparison of the checksums for a node whose hash is not the desired checksum's.
    pub(crate) checksum_hash: Option<u64>,
    /// Whether it is Ready.
    pub(crate) ready: bool,
    /// Whether it is cordoned.
    pub(crate) unschedulable: bool,
    /// The value of its `draining` annotation, when it has one (a drain started on it
    /// remembers it as the source that `drained` gets).
    pub(crate) draining: Option<String>,
    /// Its position in the port's list (see the module docs).
    pub(crate) pos: u64,
    /// [`Resting::of`] its readiness and marks: the planner counts most nodes by it alone.
    pub(crate) resting: Resting,
}

/// Sets `slot` to `value`, reusing the string it holds.
fn set_string(slot: &mut Option<String>, value: Option<&str>) {
    match (slot.as_mut(), value) {
        (Some(held), Some(value)) => {
            if held != value {
                value.clone_into(held);
            }
        }
        (_, value) => *slot = value.map(str::to_owned),
    }
}

impl NodeFacts {
    /// The facts of `node`, at position `pos`.
    pub(crate) fn of(node: &Node, pos: u64) -> Self {
        let read = UpdateMarks::read(node);
        let checksum = read.checksum;
        let marks = read.marks;
        Self {
            name: node.name.clone(),
            resource_version: node.resource_version.clone(),
            group: node.group().map(str::to_owned),
            marks,
            checksum: checksum.map(str::to_owned),
            checksum_hash: checksum.map(checksum_hash),
            ready: node.ready,
            unschedulable: node.unschedulable,
            draining: read.draining.map(str::to_owned),
            pos,
            resting: Resting::of(node.ready, &marks),
        }
    }

    /// Reads `node` (of the same name and group) into these facts, reusing their strings;
    /// whether what the planner reads of it changed (marks, checksum, readiness,
    /// `unschedulable`).
    fn refresh(&mut self, node: &Node) -> bool {
        debug_assert!(self.name == node.name && self.group.as_deref() == node.group());
        // The marks, the checksum and `draining` in one walk over the annotations.
        let read = UpdateMarks::read(node);
        let marks = read.marks;
        let checksum = read.checksum;
        let checksum_changed = checksum != self.checksum.as_deref();
        let changed = marks != self.marks
            || node.ready != self.ready
            || node.unschedulable != self.unschedulable
            || checksum_changed;
        if checksum_changed {
            set_string(&mut self.checksum, checksum);
            self.checksum_hash = checksum.map(checksum_hash);
        }
        self.marks = marks;
        self.ready = node.ready;
        self.resting = Resting::of(node.ready, &marks);
        self.unschedulable = node.unschedulable;
        if self.resource_version != node.resource_version {
            node.resource_version.clone_into(&mut self.resource_version);
        }
        set_string(&mut self.draining, read.draining);
        changed
    }

    /// Whether the drain half of a step has anything to do with the node: it carries
    /// `draining` (a drain to run), or a person's `drained=user` (removed once the node is
    /// schedulable again). The only nodes that half looks at; a node drained by nodemgr
    /// (`drained=bashible`, `drained=scale-down`, …) waits for the planner or the scaling
    /// executor and is left alone there.
    pub(crate) fn drain_marked(&self) -> bool {
        self.marks.drain_relevant()
    }

    /// A node with what a [`crate::drain::Drain`] and the disruption methods of the update
    /// stage read of one: its name and `unschedulable` (nothing else set).
    pub(crate) fn node_for_drain(&self) -> Node {
        Node {
            name: self.name.clone(),
            unschedulable: self.unschedulable,
            ..Node::default()
        }
    }
}

impl<'a> PlanMember<'a> for &'a NodeFacts {
    fn name(self) -> &'a str {
        &self.name
    }

    fn ready(self) -> bool {
        self.ready
    }

    fn checksum(self) -> Option<&'a str> {
        self.checksum.as_deref()
    }

    fn marks(self) -> UpdateMarks {
        self.marks
    }

    fn may_run(self, desired_hash: u64) -> bool {
        self.checksum_hash == Some(desired_hash)
    }

    fn resting(self) -> Resting {
        self.resting
    }

    fn whole_node(self) -> Option<&'a Node> {
        None
    }

    fn disruption_view(self) -> Node {
        self.node_for_drain()
    }
}

/// Whether a node list is strictly sorted by name.
fn sorted_by_name(nodes: &[Arc<Node>]) -> bool {
    nodes.windows(2).all(|w| match w {
        [a, b] => a.name < b.name,
        _ => true,
    })
}

/// The nodes of one group.
#[derive(Debug, Clone, Default)]
struct Members {
    /// Node name → slot.
    by_name: BTreeMap<String, usize>,
    /// The slots in name order (what the planner walks at every plan of the group), made
    /// again from `by_name` after a node joined or left the group.
    ordered: Vec<usize>,
    /// Whether `ordered` is to be made again.
    stale: bool,
    /// The slots of `ordered` whose node is not [`Resting::Inert`], in the same order: what
    /// the planner walks ([`NodeTable::active_members`]); an inert member only counts in the
    /// group's size.
    active: Vec<usize>,
    /// How many members are [`Resting::Inert`] (`ordered` less `active`).
    inert: usize,
    /// Whether `active` is to be made again (a node joined or left the group, or became or
    /// stopped being inert).
    active_stale: bool,
}

/// The view (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct NodeTable {
    /// Every node's facts, at the slot [`NodeTable::by_name`] gives (`None`: a free slot).
    slots: Vec<Option<NodeFacts>>,
    /// Free slots.
    free: Vec<usize>,
    /// Node name → its slot: a node is found by one hash lookup (a step looks nodes up by
    /// name for every change, write and drain-marked node).
    by_name: HashMap<String, usize, FastHash>,
    /// Group → its nodes (found by one hash of the group's name, without making a key).
    groups: HashMap<String, Members, FastHash>,
    /// The nodes without a group label.
    ungrouped: Members,
    /// Whether the order is name order (the last whole list was sorted by name).
    sorted: bool,
    next_pos: u64,
    /// Names of the nodes the drain half looks at ([`NodeFacts::drain_marked`]).
    marked: BTreeSet<String>,
    /// Groups with a node added, changed or removed since [`NodeTable::take_dirty`], each
    /// with whether one of its nodes became or stopped being [`Resting::Inert`] since its
    /// active members were last made ([`NodeTable::active_members`] makes them again then).
    /// Found by one hash of the group's name: every changed node marks its group.
    dirty: HashMap<String, bool, FastHash>,
}

impl NodeTable {
    /// Applies a change feed answer, telling `known` what changed in the view.
    pub(crate) fn apply(&mut self, changes: NodeChanges, known: &mut KnownVersions) {
        if changes.resync {
            self.replace(changes.changed, known);
            return;
        }
        for name in &changes.removed {
            if self.remove(name) {
                known.view_changed(name);
            }
        }
        // Each node is read and let go: the view keeps its facts only.
        for node in changes.changed {
            known.view_changed(&node.name);
            self.upsert(&node);
        }
    }

    /// Replaces the view by a whole list (in the port's order); a group whose nodes are the
    /// same as before, read as the planner reads them, is left clean.
    pub(crate) fn replace(&mut self, nodes: Vec<Arc<Node>>, known: &mut KnownVersions) {
        known.view_replaced();
        self.sorted = sorted_by_name(&nodes);
        let mut old_slots = std::mem::take(&mut self.slots);
        let mut old_by_name = std::mem::take(&mut self.by_name);
        self.groups.clear();
        self.ungrouped = Members::default();
        self.free.clear();
        self.marked.clear();
        self.next_pos = 0;
        for node in nodes {
            let pos = self.next_pos;
            self.next_pos = self.next_pos.saturating_add(1);
            let previous = old_by_name
                .remove(&node.name)
                .and_then(|i| old_slots.get_mut(i).and_then(Option::take));
            let facts = match previous {
                Some(mut facts) if facts.group.as_deref() == node.group() => {
                    if facts.refresh(&node)
                        && let Some(group) = &facts.group
                    {
                        self.mark_dirty(group);
                    }
                    facts.pos = pos;
                    facts
                }
                previous => {
                    if let Some(group) = previous.and_then(|p| p.group) {
                        self.mark_dirty(&group);
                    }
                    let facts = NodeFacts::of(&node, pos);
                    if let Some(group) = &facts.group {
                        self.mark_dirty(group);
                    }
                    facts
                }
            };
            // A name listed twice: the last one counts.
            self.remove(&facts.name);
            self.insert(facts);
        }
        // The groups of the nodes no longer listed changed.
        for group in old_slots.into_iter().flatten().filter_map(|f| f.group) {
            self.mark_dirty(&group);
        }
    }

    fn insert(&mut self, facts: NodeFacts) {
        let name = facts.name.clone();
        if facts.drain_marked() {
            self.marked.insert(name.clone());
        }
        let group = facts.group.clone();
        let slot = match self.free.pop() {
            Some(i) if i < self.slots.len() => {
                if let Some(free) = self.slots.get_mut(i) {
                    *free = Some(facts);
                }
                i
            }
            _ => {
                self.slots.push(Some(facts));
                self.slots.len() - 1
            }
        };
        self.by_name.insert(name.clone(), slot);
        let members = match group {
            Some(group) => self.groups.entry(group).or_default(),
            None => &mut self.ungrouped,
        };
        members.by_name.insert(name, slot);
        members.stale = true;
        members.active_stale = true;
    }

    /// Puts a changed or new node in (its facts).
    fn upsert(&mut self, node: &Node) {
        let slot = self
            .by_name
            .get(&node.name)
            .and_then(|&i| self.slots.get_mut(i))
            .and_then(Option::as_mut);
        if let Some(slot) = slot
            && slot.group.as_deref() == node.group()
        {
            // The same group: the facts are read again in place (their strings reused).
            let was_marked = slot.drain_marked();
            let was_inert = slot.resting == Resting::Inert;
            let changed = slot.refresh(node);
            if slot.drain_marked() != was_marked {
                if was_marked {
                    self.marked.remove(&slot.name);
                } else {
                    self.marked.insert(slot.name.clone());
                }
            }
            if changed && let Some(group) = &slot.group {
                // Its group is planned again; when the node became or stopped being inert,
                // the group's active members are made again too (one lookup for both).
                let flipped = (slot.resting == Resting::Inert) != was_inert;
                match self.dirty.get_mut(group.as_str()) {
                    Some(pending) => *pending |= flipped,
                    None => {
                        self.dirty.insert(group.clone(), flipped);
                    }
                }
            }
            return;
        }
        let pos = match self.take(&node.name) {
            Some(previous) => previous.pos,
            None => {
                let pos = self.next_pos;
                self.next_pos = self.next_pos.saturating_add(1);
                pos
            }
        };
        let facts = NodeFacts::of(node, pos);
        if let Some(group) = &facts.group {
            self.mark_dirty(group);
        }
        self.insert(facts);
    }

    /// Takes node `name` out (marking its group dirty).
    fn take(&mut self, name: &str) -> Option<NodeFacts> {
        let i = self.by_name.remove(name)?;
        let facts = self.slots.get_mut(i).and_then(Option::take)?;
        self.free.push(i);
        self.marked.remove(name);
        match &facts.group {
            Some(group) => {
                if let Some(members) = self.groups.get_mut(group) {
                    members.by_name.remove(name);
                    members.stale = true;
                    members.active_stale = true;
                    if members.by_name.is_empty() {
                        self.groups.remove(group);
                    }
                }
            }
            None => {
                self.ungrouped.by_name.remove(name);
                self.ungrouped.stale = true;
                self.ungrouped.active_stale = true;
            }
        }
        if let Some(group) = &facts.group {
            self.mark_dirty(group);
        }
        Some(facts)
    }

    /// Marks group `group` dirty (keeping whether a node of it became or stopped being inert:
    /// a node joining or leaving the group makes its members again anyway).
    fn mark_dirty(&mut self, group: &str) {
        if !self.dirty.contains_key(group) {
            self.dirty.insert(group.to_owned(), false);
        }
    }

    /// Removes node `name`; whether it was there.
    fn remove(&mut self, name: &str) -> bool {
        self.take(name).is_some()
    }

    /// Node `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&NodeFacts> {
        let &i = self.by_name.get(name)?;
        self.slots.get(i)?.as_ref()
    }

    /// Node `name`'s slot, where [`NodeTable::at`] finds its facts: the same for as long as
    /// the node stays in the view and the view is not replaced.
    pub(crate) fn slot(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The facts of the node at `slot` ([`NodeTable::slot`]).
    pub(crate) fn at(&self, slot: usize) -> Option<&NodeFacts> {
        self.slots.get(slot)?.as_ref()
    }

    /// Node `name`'s resourceVersion.
    pub(crate) fn version(&self, name: &str) -> Option<&str> {
        self.get(name).map(|f| f.resource_version.as_str())
    }

    /// Every node's name and resourceVersion.
    pub(crate) fn versions(&self) -> impl Iterator<Item = (&str, &str)> {
        self.slots
            .iter()
            .flatten()
            .map(|f| (f.name.as_str(), f.resource_version.as_str()))
    }

    /// Every node (in no particular order).
    pub(crate) fn all(&self) -> impl Iterator<Item = &NodeFacts> {
        self.slots.iter().flatten()
    }

    /// The names of the nodes of group `group`, in name order, collected.
    #[cfg(test)]
    pub(crate) fn member_names(&mut self, group: &str) -> Vec<String> {
        self.members(group).map(|f| f.name.clone()).collect()
    }

    /// The nodes of group `group`, in name order, with what the planner reads of them,
    /// without collecting them: the planner walks them
    /// ([`crate::update::planner::plan_group_members`]).
    #[cfg(test)]
    pub(crate) fn members(&mut self, group: &str) -> impl Iterator<Item = &NodeFacts> + Clone {
        let ordered: &[usize] = match self.groups.get_mut(group) {
            Some(members) => {
                if members.stale {
                    members.ordered.clear();
                    members.ordered.extend(members.by_name.values().copied());
                    members.stale = false;
                    members.active_stale = true;
                }
                &members.ordered
            }
            None => &[],
        };
        let slots = &self.slots;
        ordered
            .iter()
            .filter_map(|&i| slots.get(i).and_then(Option::as_ref))
    }

    /// The nodes of group `group` the planner reads ([`NodeTable::members`] less the
    /// [`Resting::Inert`] ones, in the same order) and how many inert ones were left out:
    /// [`crate::update::planner::plan_group_members_with_inert`] plans the same from them as
    /// [`crate::update::planner::plan_group_members`] from every member.
    pub(crate) fn active_members(
        &mut self,
        group: &str,
    ) -> (usize, impl Iterator<Item = &NodeFacts> + Clone) {
        // A node of the group that became or stopped being inert since (told by a dirty mark
        // not taken yet) makes the active members again as well.
        let flipped = self.dirty.get_mut(group).is_some_and(std::mem::take);
        let (inert, active): (usize, &[usize]) = match self.groups.get_mut(group) {
            Some(members) => {
                members.active_stale |= flipped;
                if members.stale {
                    members.ordered.clear();
                    members.ordered.extend(members.by_name.values().copied());
                    members.stale = false;
                    members.active_stale = true;
                }
                if members.active_stale {
                    let slots = &self.slots;
                    members.active.clear();
                    members
                        .active
                        .extend(members.ordered.iter().copied().filter(|&i| {
                            slots
                                .get(i)
                                .and_then(Option::as_ref)
                                .is_some_and(|f| f.resting != Resting::Inert)
                        }));
                    members.inert = members.ordered.len().saturating_sub(members.active.len());
                    members.active_stale = false;
                }
                (members.inert, &members.active)
            }
            None => (0, &[]),
        };
        let slots = &self.slots;
        (
            inert,
            active
                .iter()
                .filter_map(|&i| slots.get(i).and_then(Option::as_ref)),
        )
    }

    /// Whether group `group` had a node added, changed or removed since the last call for
    /// it (the first call for a group with nodes answers `true`).
    pub(crate) fn take_dirty(&mut self, group: &str) -> bool {
        match self.dirty.remove(group) {
            Some(flipped) => {
                if flipped && let Some(members) = self.groups.get_mut(group) {
                    members.active_stale = true;
                }
                true
            }
            None => false,
        }
    }

    /// The names of the nodes the drain half looks at ([`NodeFacts::drain_marked`]).
    pub(crate) fn marked(&self) -> &BTreeSet<String> {
        &self.marked
    }

    /// Whether drain-marked nodes are looked at in name order (else by position).
    pub(crate) fn sorted(&self) -> bool {
        self.sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::keys;
    use crate::ports::NodeRevision;

    fn node(name: &str, group: &str, draining: bool) -> Arc<Node> {
        let mut n = Node {
            name: name.into(),
            resource_version: "1".into(),
            ..Node::default()
        };
        n.labels.insert(keys::LABEL_NODE_GROUP.into(), group.into());
        if draining {
            n.annotations
                .insert(keys::ANNOTATION_DRAINING.into(), String::new());
        }
        Arc::new(n)
    }

    fn names(table: &mut NodeTable, group: &str) -> Vec<String> {
        table.member_names(group)
    }

    #[test]
    fn changes_touch_only_their_groups_and_marks() {
        let mut known = KnownVersions::new();
        let mut table = NodeTable::default();
        let a0 = node("a-0", "a", false);
        let b0 = node("b-0", "b", false);
        table.apply(
            NodeChanges::resync(vec![Arc::clone(&a0), Arc::clone(&b0)]),
            &mut known,
        );
        assert!(table.sorted());
        assert!(table.take_dirty("a") && table.take_dirty("b"));
        // The same list again: nothing changed.
        table.replace(vec![Arc::clone(&a0), Arc::clone(&b0)], &mut known);
        assert!(!table.take_dirty("a") && !table.take_dirty("b"));
        // b-0 starts draining and moves to group c; a-1 joins.
        table.apply(
            NodeChanges {
                revision: Some(NodeRevision(2)),
                resync: false,
                changed: vec![node("b-0", "c", true), node("a-1", "a", false)],
                removed: Vec::new(),
            },
            &mut known,
        );
        assert_eq!(names(&mut table, "a"), vec!["a-0", "a-1"]);
        assert!(names(&mut table, "b").is_empty());
        assert_eq!(names(&mut table, "c"), vec!["b-0"]);
        assert!(table.take_dirty("a") && table.take_dirty("b") && table.take_dirty("c"));
        assert_eq!(table.marked().iter().collect::<Vec<_>>(), vec!["b-0"]);
        table.apply(
            NodeChanges {
                revision: Some(NodeRevision(3)),
                resync: false,
                changed: Vec::new(),
                removed: vec!["b-0".into(), "unknown".into()],
            },
            &mut known,
        );
        assert!(table.marked().is_empty());
        assert!(table.get("b-0").is_none());
        assert!(table.take_dirty("c") && !table.take_dirty("a"));
    }

    /// A node of group `g{group}`, Ready or not, with the marks `marks` picks.
    fn marked_node(name: u8, group: u8, ready: bool, marks: u8) -> Arc<Node> {
        let mut n = node(&format!("n{name:02}"), &format!("g{group}"), marks & 4 != 0);
        let n_mut = Arc::make_mut(&mut n);
        n_mut.ready = ready;
        if marks & 1 != 0 {
            n_mut
                .annotations
                .insert(keys::ANNOTATION_WAITING_FOR_APPROVAL.into(), String::new());
        }
        if marks & 2 != 0 {
            n_mut
                .annotations
                .insert(keys::ANNOTATION_APPROVED.into(), String::new());
        }
        n
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// After random changes (nodes added, changed in place or moved between groups,
        /// becoming inert or not, removed; whole lists now and then; dirty marks taken or
        /// not), each group's active
        /// members are its members that are not inert, in the same order, and the inert ones
        /// are counted: what the planner walks and counts instead of every member.
        #[test]
        fn active_members_are_the_members_not_inert(
            steps in proptest::collection::vec(
                (
                    0u8..8,
                    proptest::collection::vec((0u8..12, 0u8..3, 0u8..10, 0u8..8), 0..6),
                    proptest::collection::vec(0u8..12, 0..3),
                ),
                1..12,
            ),
        ) {
            let mut known = KnownVersions::new();
            let mut table = NodeTable::default();
            for (kind, changed, removed) in steps {
                let changed: Vec<Arc<Node>> = changed
                    .into_iter()
                    .map(|(name, group, ready, marks)| {
                        (name, marked_node(name, group, ready != 0, marks))
                    })
                    .collect::<BTreeMap<_, _>>()
                    .into_values()
                    .collect();
                let changes = if kind == 0 {
                    NodeChanges::resync(changed)
                } else {
                    let removed = removed
                        .into_iter()
                        .map(|n| format!("n{n:02}"))
                        .filter(|n| changed.iter().all(|c| c.name != *n))
                        .collect();
                    NodeChanges { revision: None, resync: false, changed, removed }
                };
                table.apply(changes, &mut known);
                for group in ["g0", "g1", "g2"] {
                    // Now and then the group's dirty mark is taken first (as a plan does).
                    if kind % 3 == 1 {
                        table.take_dirty(group);
                    }
                    let (inert, active) = table.active_members(group);
                    let active: Vec<String> = active.map(|f| f.name.clone()).collect();
                    let all: Vec<(String, Resting)> = table
                        .members(group)
                        .map(|f| (f.name.clone(), f.resting))
                        .collect();
                    let expected: Vec<String> = all
                        .iter()
                        .filter(|(_, r)| *r != Resting::Inert)
                        .map(|(n, _)| n.clone())
                        .collect();
                    proptest::prop_assert_eq!(&active, &expected);
                    proptest::prop_assert_eq!(inert, all.len() - expected.len());
                }
            }
        }
    }

    #[test]
    fn an_unsorted_list_keeps_its_order_as_positions() {
        let mut known = KnownVersions::new();
        let mut table = NodeTable::default();
        table.replace(vec![node("z", "g", true), node("a", "g", true)], &mut known);
        assert!(!table.sorted());
        assert_eq!(table.get("z").map(|f| f.pos), Some(0));
        assert_eq!(table.get("a").map(|f| f.pos), Some(1));
        table.upsert(&node("a", "g", false));
        assert_eq!(table.get("a").map(|f| f.pos), Some(1));
        table.upsert(&node("m", "g", true));
        assert_eq!(table.get("m").map(|f| f.pos), Some(2));
    }
}
