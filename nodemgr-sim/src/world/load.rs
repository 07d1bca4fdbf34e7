//! The load index ([`LoadIndex`]): each group's nodes by pod count, each count's in name
//! order, so that placing a pod walks the least loaded nodes first ([`World::pick_node`])
//! without counting every node's pods.
//!
//! It is keyed by position rather than by name: a node is its [`NodeId`], a bucket holds ids
//! in the order of the nodes' positions in the node table ([`Nodes`], which is name order),
//! and what the index holds for a node (its group's slot and pod count) is found by the id's
//! number in a vector. Moving a node between counts — at every binding and removal of one of
//! its pods — is then two bisections of small integers, with no name hashed or compared
//! (`nodemgr-sim/README.md`, "Performance", "Tenth round (o)"). Positions move when nodes
//! are added or removed, but never past one another: the order of the ids in a bucket stays
//! the order of their names.
//!
//! [`World::pick_node`]: super::World::pick_node

use std::collections::HashMap;

use nodemgr_core::hash::FastHash;

use super::{NodeId, Nodes};

/// Per group, its nodes by pod count (see the module docs). Answers as the
/// `group → (pod count, name)` ordered set it replaced: [`LoadIndex::buckets`] walks a
/// group's nodes by count, then name.
#[derive(Debug, Clone, Default)]
pub(super) struct LoadIndex {
    /// Each group's slot in `groups`, by name.
    slots: HashMap<String, usize, FastHash>,
    /// Per group slot, `buckets[count]`: the ids of its nodes holding `count` pods, in name
    /// order (an empty bucket stays, to be reused).
    groups: Vec<Vec<Vec<NodeId>>>,
    /// Per node (by [`NodeId::number`]), its group slot and pod count while indexed.
    places: Vec<Option<(usize, usize)>>,
}

impl LoadIndex {
    /// The slot of group `group`, if it has one.
    pub(super) fn slot(&self, group: &str) -> Option<usize> {
        self.slots.get(group).copied()
    }

    /// The slot of group `group`, made when it has none.
    pub(super) fn slot_or_insert(&mut self, group: &str) -> usize {
        if let Some(slot) = self.slots.get(group) {
            return *slot;
        }
        let slot = self.groups.len();
        self.groups.push(Vec::new());
        self.slots.insert(group.to_owned(), slot);
        slot
    }

    /// Where node `id` is indexed: its group slot and pod count.
    pub(super) fn place(&self, id: NodeId) -> Option<(usize, usize)> {
        self.places.get(id.number()).copied().flatten()
    }

    /// The buckets of group slot `slot`: `[count]` = its nodes holding `count` pods, in name
    /// order.
    pub(super) fn buckets(&self, slot: usize) -> &[Vec<NodeId>] {
        self.groups.get(slot).map_or(&[], Vec::as_slice)
    }

    /// The groups with their slots, in no particular order.
    #[cfg(test)]
    pub(super) fn slots(&self) -> impl Iterator<Item = (&String, usize)> {
        self.slots.iter().map(|(g, s)| (g, *s))
    }

    /// Indexes node `id`, not indexed yet, in group slot `slot` holding `count` pods, after
    /// the nodes there: for an index built anew from the nodes in name order (a rebuild),
    /// which then needs no bisection.
    pub(super) fn append(&mut self, id: NodeId, slot: usize, count: usize) {
        if self.places.len() <= id.number() {
            self.places.resize(id.number() + 1, None);
        }
        if let Some(place) = self.places.get_mut(id.number()) {
            *place = Some((slot, count));
        }
        let Some(buckets) = self.groups.get_mut(slot) else {
            return;
        };
        if buckets.len() <= count {
            buckets.resize_with(count + 1, Vec::new);
        }
        if let Some(bucket) = buckets.get_mut(count) {
            bucket.push(id);
        }
    }

    /// Moves node `id` (of table `nodes`, where it is now) to `to` (group slot, pod count;
    /// `None`: out of the index).
    pub(super) fn set(&mut self, nodes: &Nodes, id: NodeId, to: Option<(usize, usize)>) {
        let from = self.place(id);
        if from == to {
            return;
        }
        let position = nodes.position_of_id(id);
        if let Some((slot, count)) = from
            && let Some(bucket) = self
                .groups
                .get_mut(slot)
                .and_then(|buckets| buckets.get_mut(count))
        {
            let found = match bucket.binary_search_by(|b| nodes.position_of_id(*b).cmp(&position)) {
                Ok(at) if bucket.get(at) == Some(&id) => Some(at),
                // Only when nodes were removed behind the index's back (it is then stale
                // and rebuilt before it is read): found by a walk.
                _ => bucket.iter().position(|b| *b == id),
            };
            if let Some(at) = found {
                bucket.remove(at);
            }
        }
        if self.places.len() <= id.number() {
            self.places.resize(id.number() + 1, None);
        }
        if let Some(place) = self.places.get_mut(id.number()) {
            *place = to;
        }
        let Some((slot, count)) = to else {
            return;
        };
        let Some(buckets) = self.groups.get_mut(slot) else {
            return;
        };
        if buckets.len() <= count {
            buckets.resize_with(count + 1, Vec::new);
        }
        if let Some(bucket) = buckets.get_mut(count)
            && let Err(at) = bucket.binary_search_by(|b| nodes.position_of_id(*b).cmp(&position))
        {
            bucket.insert(at, id);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The load index against the ordered set it replaced, `(group, pod count, name)`.

    use std::collections::BTreeSet;

    use super::*;
    use crate::world::SimNode;
    use proptest::prelude::*;

    /// A node to store (the world's first one).
    fn node() -> SimNode {
        crate::world::one_node_for_tests()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Random nodes registered (names sharing prefixes, in any order: `g-1`, `g-10`, …)
        /// and removed (out of the index first, as the world does), and moved between groups
        /// and counts: the buckets walk each group's nodes in `(pod count, name)` order, as
        /// the ordered set does, and each node's place is where it is.
        #[test]
        fn the_load_index_walks_as_the_ordered_set(
            ops in prop::collection::vec((0u8..4, 0u16..40, 0usize..3, 0usize..6), 0..150),
        ) {
            let template = node();
            let groups = ["a", "b", "c"];
            let mut nodes = Nodes::new();
            let mut index = LoadIndex::default();
            let mut set: BTreeSet<(usize, usize, String)> = BTreeSet::new();
            for (op, n, group, count) in ops {
                let name = format!("g-{n}");
                match op {
                    // Registered (when new) and indexed.
                    0 | 1 => {
                        if nodes.get(&name).is_none() {
                            nodes.insert(name.clone(), template.clone());
                        }
                        let Some(id) = nodes.id_of(&name) else {
                            panic!("{name} not registered");
                        };
                        let slot = index.slot_or_insert(groups[group]);
                        set.retain(|(_, _, m)| *m != name);
                        set.insert((slot, count, name.clone()));
                        index.set(&nodes, id, Some((slot, count)));
                        prop_assert_eq!(index.place(id), Some((slot, count)));
                    }
                    // Out of the index, still registered.
                    2 => {
                        if let Some(id) = nodes.id_of(&name) {
                            set.retain(|(_, _, m)| *m != name);
                            index.set(&nodes, id, None);
                            prop_assert_eq!(index.place(id), None);
                        }
                    }
                    // Removed.
                    _ => {
                        if let Some(id) = nodes.id_of(&name) {
                            set.retain(|(_, _, m)| *m != name);
                            index.set(&nodes, id, None);
                            nodes.remove(&name);
                        }
                    }
                }
                let walked: BTreeSet<(usize, usize, String)> = groups
                    .iter()
                    .filter_map(|g| index.slot(g))
                    .flat_map(|slot| {
                        index.buckets(slot).iter().enumerate().flat_map(move |(count, ids)| {
                            ids.iter().map(move |id| (slot, count, *id))
                        })
                    })
                    .filter_map(|(slot, count, id)| {
                        Some((slot, count, nodes.name_of(id)?.to_owned()))
                    })
                    .collect();
                prop_assert_eq!(&walked, &set);
                for slot in groups.iter().filter_map(|g| index.slot(g)) {
                    let order: Vec<(usize, String)> = index
                        .buckets(slot)
                        .iter()
                        .enumerate()
                        .flat_map(|(count, ids)| {
                            ids.iter().map(move |id| (count, *id))
                        })
                        .map(|(count, id)| (count, nodes.name_of(id).unwrap_or("?").to_owned()))
                        .collect();
                    let expected: Vec<(usize, String)> = set
                        .iter()
                        .filter(|(s, _, _)| *s == slot)
                        .map(|(_, count, name)| (*count, name.clone()))
                        .collect();
                    prop_assert_eq!(order, expected);
                }
            }
        }
    }
}
