//! The world's node table ([`Nodes`]): the nodes in name order in one vector, found by name
//! with one hash lookup instead of a string-keyed B-tree search, and a log of the nodes handed
//! out mutably since the simulated API last looked ([`Nodes::take_touched`]), so that its
//! change feed looks at those rather than at every node (`crate::api`, "Change feed").
//!
//! It answers as the `BTreeMap<String, SimNode>` it replaces (`get`, `get_mut`, `insert`,
//! `remove`, iteration in name order), so callers read it the same way. Every mutable access
//! goes through its methods and is logged: `get_mut` notes the node, `iter_mut` / `values_mut`
//! note that every node may have changed. The log is exact in one direction only — a logged
//! node may not have changed — which is what the feed needs (it compares the logged ones).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use nodemgr_core::hash::FastHash;

use super::SimNode;

/// A stable number for a node of one [`Nodes`] table, never reused by it (a node removed and
/// registered again gets a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The smallest id (a bound for ranges of `(time, NodeId)`).
    pub const MIN: NodeId = NodeId(0);

    /// The id as an index (ids are dense: `0..` in order of registration), for tables kept
    /// by id next to the node table.
    pub(crate) fn number(self) -> usize {
        self.0 as usize
    }

    /// Id `n` (for the unit tests of tables keyed by id).
    #[cfg(test)]
    pub(super) fn for_tests(n: u32) -> NodeId {
        NodeId(n)
    }
}

/// One node of the table.
#[derive(Debug)]
struct Entry {
    name: String,
    id: NodeId,
    /// In [`Nodes::touched`] already.
    touched: bool,
    node: SimNode,
}

/// Distinguishes tables, so that the simulated API never takes one table's log for another's
/// (a table built anew, or a clone, gets a new number).
static INSTANCES: AtomicU64 = AtomicU64::new(1);

fn next_instance() -> u64 {
    INSTANCES.fetch_add(1, Ordering::Relaxed)
}

/// The world's nodes by name, in name order (see the module docs).
#[derive(Debug)]
pub struct Nodes {
    /// The nodes, strictly in name order.
    entries: Vec<Entry>,
    /// Position in `entries` by [`NodeId`] (`u32::MAX`: removed).
    position: Vec<u32>,
    /// [`NodeId`] by name.
    by_name: HashMap<String, NodeId, FastHash>,
    /// Nodes handed out mutably since the last [`Nodes::take_touched`].
    touched: Vec<NodeId>,
    /// Every node may have changed since the last [`Nodes::take_touched`].
    all_touched: bool,
    /// This table's number (see [`INSTANCES`]).
    instance: u64,
    /// Moves whenever a node is added or removed.
    layout: u64,
}

impl Default for Nodes {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            position: Vec::new(),
            by_name: HashMap::default(),
            touched: Vec::new(),
            all_touched: true,
            instance: next_instance(),
            layout: 0,
        }
    }
}

impl Clone for Nodes {
    fn clone(&self) -> Self {
        Self {
            entries: self
                .entries
                .iter()
                .map(|e| Entry {
                    name: e.name.clone(),
                    id: e.id,
                    touched: false,
                    node: e.node.clone(),
                })
                .collect(),
            position: self.position.clone(),
            by_name: self.by_name.clone(),
            touched: Vec::new(),
            // Another table: nothing of the original's log applies to it.
            all_touched: true,
            instance: next_instance(),
            layout: 0,
        }
    }
}

impl Nodes {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes room for `additional` more nodes (a capacity hint: nothing else changes).
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
        self.position.reserve(additional);
        self.by_name.reserve(additional);
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The position in name order of node `name`.
    pub(crate) fn position_of_name(&self, name: &str) -> Option<usize> {
        self.position_of(name)
    }

    fn position_of(&self, name: &str) -> Option<usize> {
        let id = self.by_name.get(name)?;
        let at = *self.position.get(id.0 as usize)?;
        Some(at as usize)
    }

    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&SimNode> {
        let at = self.position_of(name)?;
        self.entries.get(at).map(|e| &e.node)
    }

    /// Whether node `name` exists.
    pub fn contains_key(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// The node named `name`, to change (noted in the log).
    pub fn get_mut(&mut self, name: &str) -> Option<&mut SimNode> {
        let at = self.position_of(name)?;
        let e = self.entries.get_mut(at)?;
        if !e.touched {
            e.touched = true;
            self.touched.push(e.id);
        }
        Some(&mut e.node)
    }

    /// The node named `name`, to change in a way the simulated API never versions (its
    /// heartbeat, its agent, its indexes' notes): not noted in the log. Never change
    /// [`SimNode::node`] through it.
    pub(crate) fn get_mut_unlogged(&mut self, name: &str) -> Option<&mut SimNode> {
        let at = self.position_of(name)?;
        self.entries.get_mut(at).map(|e| &mut e.node)
    }

    /// The [`NodeId`] of node `name`.
    pub fn id_of(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// The name of node `id`, while it exists.
    pub fn name_of(&self, id: NodeId) -> Option<&str> {
        let at = self.position_of_id(id)?;
        self.entries.get(at).map(|e| e.name.as_str())
    }

    /// Node `id`, while it exists.
    pub(crate) fn get_by_id(&self, id: NodeId) -> Option<&SimNode> {
        let at = self.position_of_id(id)?;
        self.entries.get(at).map(|e| &e.node)
    }

    /// Node `id` with its name, to change what the change feed does not look at (not noted
    /// in the log: the caller leaves the node's `Arc` as it is).
    pub(crate) fn entry_by_id_unlogged(&mut self, id: NodeId) -> Option<(&str, &mut SimNode)> {
        let at = self.position_of_id(id)?;
        self.entries
            .get_mut(at)
            .map(|e| (e.name.as_str(), &mut e.node))
    }

    /// The position in name order of node `id`, while it exists.
    pub(crate) fn position_of_id(&self, id: NodeId) -> Option<usize> {
        let at = *self.position.get(id.0 as usize)?;
        (at != u32::MAX).then_some(at as usize)
    }

    /// Node `name` with its [`NodeId`], to change (noted in the log).
    pub(crate) fn get_mut_with_id(&mut self, name: &str) -> Option<(NodeId, &mut SimNode)> {
        let at = self.position_of(name)?;
        self.entry_at_mut(at).map(|(_, id, node)| (id, node))
    }

    /// The node at position `at` in name order with its name and [`NodeId`], to change
    /// (noted in the log).
    pub(crate) fn entry_at_mut(&mut self, at: usize) -> Option<(&String, NodeId, &mut SimNode)> {
        let e = self.entries.get_mut(at)?;
        if !e.touched {
            e.touched = true;
            self.touched.push(e.id);
        }
        Some((&e.name, e.id, &mut e.node))
    }

    /// Sets node `name` (in place when it exists: the old one is returned).
    pub fn insert(&mut self, name: String, node: SimNode) -> Option<SimNode> {
        if let Some(at) = self.position_of(&name)
            && let Some(e) = self.entries.get_mut(at)
        {
            if !e.touched {
                e.touched = true;
                self.touched.push(e.id);
            }
            return Some(std::mem::replace(&mut e.node, node));
        }
        let id = NodeId(u32::try_from(self.position.len()).unwrap_or(u32::MAX));
        let at = self.entries.partition_point(|e| e.name < name);
        for e in &self.entries[at..] {
            if let Some(p) = self.position.get_mut(e.id.0 as usize) {
                *p += 1;
            }
        }
        self.position.push(u32::try_from(at).unwrap_or(u32::MAX));
        self.by_name.insert(name.clone(), id);
        self.entries.insert(
            at,
            Entry {
                name,
                id,
                touched: false,
                node,
            },
        );
        self.layout += 1;
        None
    }

    /// Takes node `name` out.
    pub fn remove(&mut self, name: &str) -> Option<SimNode> {
        let at = self.position_of(name)?;
        self.by_name.remove(name);
        let e = self.entries.remove(at);
        if let Some(p) = self.position.get_mut(e.id.0 as usize) {
            *p = u32::MAX;
        }
        for later in &self.entries[at..] {
            if let Some(p) = self.position.get_mut(later.id.0 as usize) {
                *p -= 1;
            }
        }
        self.layout += 1;
        Some(e.node)
    }

    /// The nodes with their names, in name order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&String, &SimNode)> + ExactSizeIterator {
        self.entries.iter().map(|e| (&e.name, &e.node))
    }

    /// The nodes with their names, in name order, to change (every node is then taken as
    /// possibly changed).
    pub fn iter_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = (&String, &mut SimNode)> + ExactSizeIterator {
        self.all_touched = true;
        self.entries.iter_mut().map(|e| (&e.name, &mut e.node))
    }

    /// The names, in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &String> + ExactSizeIterator {
        self.entries.iter().map(|e| &e.name)
    }

    /// The nodes, in name order.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &SimNode> + ExactSizeIterator {
        self.entries.iter().map(|e| &e.node)
    }

    /// The nodes, in name order, to change (every node is then taken as possibly changed).
    pub fn values_mut(
        &mut self,
    ) -> impl DoubleEndedIterator<Item = &mut SimNode> + ExactSizeIterator {
        self.all_touched = true;
        self.entries.iter_mut().map(|e| &mut e.node)
    }

    /// [`Nodes::values_mut`] for changes the simulated API never versions (heartbeats,
    /// agents' notes): not logged. Never change [`SimNode::node`] through it.
    pub(crate) fn values_mut_unlogged(&mut self) -> impl Iterator<Item = &mut SimNode> {
        self.entries.iter_mut().map(|e| &mut e.node)
    }

    /// The nodes with their names, in name order, for changes the simulated API never
    /// versions (agents' notes): not logged. Never change [`SimNode::node`] through it.
    pub(crate) fn iter_mut_unlogged(
        &mut self,
    ) -> impl Iterator<Item = (&String, NodeId, &mut SimNode)> {
        self.entries
            .iter_mut()
            .map(|e| (&e.name, e.id, &mut e.node))
    }

    /// The node at position `at` in name order, unlogged (the simulated API's versioning,
    /// which changes only a node's version and heartbeat in place).
    pub(crate) fn at_unlogged(&mut self, at: usize) -> Option<&mut SimNode> {
        self.entries.get_mut(at).map(|e| &mut e.node)
    }

    /// Notes the node at position `at` in name order as changed (after an unlogged access
    /// that changed it after all).
    pub(crate) fn log_position(&mut self, at: usize) {
        if let Some(e) = self.entries.get_mut(at)
            && !e.touched
        {
            e.touched = true;
            self.touched.push(e.id);
        }
    }

    /// Which table this is and its layout (both move when nodes are added or removed, or the
    /// table is another one): a log taken with the same answer is about the same positions.
    pub(crate) fn layout(&self) -> (u64, u64) {
        (self.instance, self.layout)
    }

    /// The positions (in name order, ascending) of the nodes handed out mutably since the
    /// previous call, clearing the log; `None` when any node may have changed.
    pub(crate) fn take_touched(&mut self) -> Option<Vec<usize>> {
        let all = std::mem::take(&mut self.all_touched);
        let count = self.touched.len();
        // The positions as a set of bits (bit `i % 64` of word `i / 64` for position `i`),
        // read out in ascending order below: each logged once (`Entry::touched`).
        let mut bits = vec![
            0u64;
            if all {
                0
            } else {
                self.entries.len().div_ceil(64)
            }
        ];
        // The log emptied but kept (its capacity), so that the next interval's notes do not
        // grow a new one.
        for id in self.touched.drain(..) {
            if let Some(&at) = self.position.get(id.0 as usize)
                && at != u32::MAX
                && let Some(e) = self.entries.get_mut(at as usize)
            {
                e.touched = false;
                let at = at as usize;
                if let Some(word) = bits.get_mut(at / 64) {
                    *word |= 1 << (at % 64);
                }
            }
        }
        if all {
            for e in &mut self.entries {
                e.touched = false;
            }
            return None;
        }
        let mut positions: Vec<usize> = Vec::with_capacity(count);
        for (word, &set) in bits.iter().enumerate() {
            let mut left = set;
            while left != 0 {
                positions.push(word * 64 + left.trailing_zeros() as usize);
                left &= left - 1;
            }
        }
        Some(positions)
    }
}

impl<'a> IntoIterator for &'a Nodes {
    type Item = (&'a String, &'a SimNode);
    type IntoIter = Box<dyn Iterator<Item = (&'a String, &'a SimNode)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

impl<'a> IntoIterator for &'a mut Nodes {
    type Item = (&'a String, &'a mut SimNode);
    type IntoIter = Box<dyn Iterator<Item = (&'a String, &'a mut SimNode)> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter_mut())
    }
}

impl FromIterator<(String, SimNode)> for Nodes {
    fn from_iter<I: IntoIterator<Item = (String, SimNode)>>(iter: I) -> Self {
        let mut nodes = Nodes::new();
        for (name, node) in iter {
            nodes.insert(name, node);
        }
        nodes
    }
}

/// `nodes["name"]`, as a `BTreeMap`'s: panics when there is no such node.
impl std::ops::Index<&str> for Nodes {
    type Output = SimNode;

    fn index(&self, name: &str) -> &SimNode {
        match self.get(name) {
            Some(node) => node,
            None => panic!("no node named {name}"),
        }
    }
}

impl std::ops::Index<&String> for Nodes {
    type Output = SimNode;

    fn index(&self, name: &String) -> &SimNode {
        &self[name.as_str()]
    }
}

#[cfg(test)]
mod tests {
    //! The table answers as a `BTreeMap` of the same nodes, and its log holds every node
    //! handed out mutably since the previous look (positions in name order).

    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// A node to store (the world's first one, under another zone as a tag).
    fn node(tag: u8) -> SimNode {
        SimNode {
            zone: format!("z{tag}"),
            ..crate::world::one_node_for_tests()
        }
    }

    proptest! {
        /// A table of up to 300 nodes, some handed out mutably (positions past the first
        /// 64 among them): the log answers their positions, ascending, each once.
        #[test]
        fn the_log_answers_every_position_in_order(
            count in 1usize..300,
            picks in prop::collection::vec(any::<prop::sample::Index>(), 0..80),
        ) {
            let template = node(0);
            let mut table = Nodes::new();
            for i in 0..count {
                table.insert(format!("n-{i:03}"), template.clone());
            }
            // A new table: every node may have changed.
            prop_assert_eq!(table.take_touched(), None);
            let mut expected: BTreeSet<usize> = BTreeSet::new();
            for pick in picks {
                let at = pick.index(count);
                let name = format!("n-{at:03}");
                prop_assert!(table.get_mut(&name).is_some());
                expected.insert(at);
            }
            prop_assert_eq!(table.take_touched(), Some(expected.into_iter().collect::<Vec<_>>()));
            prop_assert_eq!(table.take_touched(), Some(Vec::new()));
        }

        #[test]
        fn the_node_table_is_a_map_by_name_with_a_log(
            ops in prop::collection::vec((0u8..6, 0u8..30, any::<u8>()), 0..150),
        ) {
            let template = node(0);
            let mut table = Nodes::new();
            let mut map: BTreeMap<String, String> = BTreeMap::new();
            // Names handed out mutably since the last look, and whether every node may have
            // changed.
            let mut touched: BTreeSet<String> = BTreeSet::new();
            let mut all = true;
            for (op, key, tag) in ops {
                let name = format!("n-{key}");
                match op {
                    0 => {
                        let a = table.insert(
                            name.clone(),
                            SimNode { zone: format!("z{tag}"), ..template.clone() },
                        );
                        let b = map.insert(name.clone(), format!("z{tag}"));
                        prop_assert_eq!(a.map(|n| n.zone), b.clone());
                        if b.is_some() {
                            touched.insert(name);
                        }
                    }
                    1 => {
                        let a = table.remove(&name);
                        let b = map.remove(&name);
                        prop_assert_eq!(a.map(|n| n.zone), b);
                        touched.remove(&name);
                    }
                    2 => {
                        if let Some(n) = table.get_mut(&name) {
                            n.zone = format!("z{tag}");
                            map.insert(name.clone(), format!("z{tag}"));
                            touched.insert(name);
                        }
                        prop_assert_eq!(table.contains_key(&format!("n-{key}")), map.contains_key(&format!("n-{key}")));
                    }
                    3 => {
                        for n in table.values_mut() {
                            n.zone.push('+');
                        }
                        for z in map.values_mut() {
                            z.push('+');
                        }
                        all = true;
                    }
                    4 => {
                        let expected: Option<Vec<usize>> = (!all).then(|| {
                            map.keys()
                                .enumerate()
                                .filter(|(_, k)| touched.contains(*k))
                                .map(|(i, _)| i)
                                .collect()
                        });
                        prop_assert_eq!(table.take_touched(), expected);
                        touched.clear();
                        all = false;
                    }
                    _ => {
                        prop_assert_eq!(table.get(&name).map(|n| n.zone.clone()), map.get(&name).cloned());
                        if let Some(id) = table.id_of(&name) {
                            prop_assert_eq!(table.name_of(id), Some(name.as_str()));
                            let at = table.position_of_id(id);
                            prop_assert_eq!(at, map.keys().position(|k| *k == name));
                        }
                    }
                }
                let listed: Vec<(String, String)> =
                    table.iter().map(|(k, n)| (k.clone(), n.zone.clone())).collect();
                let expected: Vec<(String, String)> =
                    map.iter().map(|(k, z)| (k.clone(), z.clone())).collect();
                prop_assert_eq!(listed, expected);
                prop_assert_eq!(table.len(), map.len());
            }
        }
    }
}
