//! Read-your-writes for decisions taken from a cache: whether a cached list of Nodes is at
//! least as new as everything the decider itself wrote or read directly from the API
//! (`docs/optimistic-concurrency.md`).
//!
//! A watch cache can lag behind the API, and a cache that relists from an API server whose own
//! watch cache is behind can even go back in time. If the update planner ran on a cache that
//! does not show its own last approval yet, it would see that node still waiting and its slot
//! free, and hand the slot out a second time. [`KnownVersions`] remembers, per node, the newest
//! `resourceVersion` the decider knows exists (returned by its own writes, seen in a direct
//! read, or seen in a cache it trusted); a cached list that shows any of those nodes at an
//! older version, or not at all, is *behind*, and the decider reads the API directly instead.
//!
//! # Comparing resourceVersions
//! Kubernetes resourceVersions are decimal integers taken from one counter (etcd's revision),
//! so a larger one is a later state, across objects of every kind; client-go compares them the
//! same way for exactly this purpose (`CompareResourceVersion`). A version that is not a
//! decimal integer is compared for equality only, so an unknown scheme makes the decider read
//! the API directly more often, never trust a stale cache.
//!
//! # Guarantees
//! - [`KnownVersions::is_satisfied_by`] is `false` until the first
//!   [`KnownVersions::handle_fresh_read`]: a decider that just started (or restarted) reads the
//!   API directly once, because a cache filled before its predecessor's last writes reached
//!   it would look fine to a decider that remembers nothing.
//! - After that it is `true` only for a list in which every remembered node appears at its
//!   remembered version or a later one: never for a cache older than something the decider
//!   wrote or saw, even one that went back in time.

use std::collections::BTreeMap;

use crate::model::Node;

/// Whether resourceVersion `seen` is the same as `known` or later (see the module docs).
pub fn resource_version_at_least(seen: &str, known: &str) -> bool {
    match (seen.parse::<u64>(), known.parse::<u64>()) {
        (Ok(seen), Ok(known)) => seen >= known,
        _ => seen == known,
    }
}

/// The newest resourceVersion known per node (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownVersions {
    nodes: BTreeMap<String, String>,
    synced: bool,
}

impl KnownVersions {
    /// Nothing known yet: the next check fails until a direct read.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a node as a write returned it (its new resourceVersion). A view without a
    /// version is ignored.
    pub fn handle_write(&mut self, node: &Node) {
        self.remember(node);
    }

    /// Records a direct read of every Node from the API: each node's version becomes the least
    /// a cache must show, and nodes absent from it are forgotten (they were deleted).
    pub fn handle_fresh_read(&mut self, nodes: &[Node]) {
        let present: BTreeMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        self.nodes
            .retain(|name, _| present.contains_key(name.as_str()));
        for node in nodes {
            self.remember(node);
        }
        self.synced = true;
    }

    /// Whether `cached` is at least as new as everything remembered. When it is, its versions
    /// are remembered too, so a later cache that goes back behind it is not trusted either.
    pub fn is_satisfied_by(&mut self, cached: &[Node]) -> bool {
        if !self.synced {
            return false;
        }
        let seen: BTreeMap<&str, &str> = cached
            .iter()
            .map(|n| (n.name.as_str(), n.resource_version.as_str()))
            .collect();
        let caught_up = self.nodes.iter().all(|(name, known)| {
            seen.get(name.as_str())
                .is_some_and(|seen| resource_version_at_least(seen, known))
        });
        if caught_up {
            for node in cached {
                self.remember(node);
            }
        }
        caught_up
    }

    /// The nodes whose versions a cache has yet to show: remembered ones that `cached` misses
    /// or shows older.
    pub fn behind_in<'a>(&'a self, cached: &[Node]) -> Vec<&'a str> {
        let seen: BTreeMap<&str, &str> = cached
            .iter()
            .map(|n| (n.name.as_str(), n.resource_version.as_str()))
            .collect();
        self.nodes
            .iter()
            .filter(|(name, known)| {
                !seen
                    .get(name.as_str())
                    .is_some_and(|seen| resource_version_at_least(seen, known))
            })
            .map(|(name, _)| name.as_str())
            .collect()
    }

    fn remember(&mut self, node: &Node) {
        if node.resource_version.is_empty() {
            return;
        }
        match self.nodes.get_mut(&node.name) {
            Some(known) if resource_version_at_least(known, &node.resource_version) => {}
            Some(known) => known.clone_from(&node.resource_version),
            None => {
                self.nodes
                    .insert(node.name.clone(), node.resource_version.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn node(name: &str, rv: &str) -> Node {
        Node {
            name: name.into(),
            resource_version: rv.into(),
            ..Node::default()
        }
    }

    #[test]
    fn versions_compare_as_numbers_or_else_for_equality() {
        assert!(resource_version_at_least("10", "9"));
        assert!(resource_version_at_least("10", "10"));
        assert!(!resource_version_at_least("9", "10"));
        assert!(resource_version_at_least("abc", "abc"));
        assert!(!resource_version_at_least("abd", "abc"));
        assert!(!resource_version_at_least("10", "abc"));
    }

    #[test]
    fn a_new_decider_reads_directly_once() {
        let mut known = KnownVersions::new();
        assert!(!known.is_satisfied_by(&[node("a", "5")]));
        known.handle_fresh_read(&[node("a", "5")]);
        assert!(known.is_satisfied_by(&[node("a", "5")]));
    }

    #[test]
    fn a_cache_behind_the_own_write_is_not_trusted_until_it_catches_up() {
        let mut known = KnownVersions::new();
        known.handle_fresh_read(&[node("a", "5"), node("b", "6")]);
        known.handle_write(&node("a", "9"));
        assert!(!known.is_satisfied_by(&[node("a", "5"), node("b", "6")]));
        assert_eq!(
            known.behind_in(&[node("a", "5"), node("b", "6")]),
            vec!["a"]
        );
        // A node missing from the cache is not taken for deleted.
        assert!(!known.is_satisfied_by(&[node("b", "6")]));
        assert!(known.is_satisfied_by(&[node("a", "12"), node("b", "6")]));
        // A cache that goes back behind what was trusted is not trusted again.
        assert!(!known.is_satisfied_by(&[node("a", "9"), node("b", "6")]));
    }

    #[test]
    fn a_fresh_read_forgets_deleted_nodes_and_never_lowers_a_version() {
        let mut known = KnownVersions::new();
        known.handle_write(&node("gone", "3"));
        known.handle_write(&node("a", "9"));
        known.handle_fresh_read(&[node("a", "8")]);
        assert!(!known.is_satisfied_by(&[node("a", "8")]));
        assert!(known.is_satisfied_by(&[node("a", "9")]));
    }

    proptest! {
        /// A cache is trusted only if it shows every node at least at the newest version the
        /// decider wrote or read.
        #[test]
        fn trusted_caches_show_every_own_write(
            writes in prop::collection::vec((0usize..4, 1u64..100), 0..12),
            cached in prop::collection::vec(prop::option::of(0u64..120), 4),
        ) {
            let mut known = KnownVersions::new();
            known.handle_fresh_read(&[]);
            let mut newest: BTreeMap<usize, u64> = BTreeMap::new();
            for (i, rv) in &writes {
                known.handle_write(&node(&format!("n{i}"), &rv.to_string()));
                let e = newest.entry(*i).or_insert(0);
                *e = (*e).max(*rv);
            }
            let view: Vec<Node> = cached
                .iter()
                .enumerate()
                .filter_map(|(i, rv)| rv.map(|rv| node(&format!("n{i}"), &rv.to_string())))
                .collect();
            let expected = newest
                .iter()
                .all(|(i, rv)| cached[*i].is_some_and(|seen| seen >= *rv));
            prop_assert_eq!(known.is_satisfied_by(&view), expected);
        }
    }
}
