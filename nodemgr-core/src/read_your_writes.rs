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

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use crate::hash::FastHash;
use crate::model::Node;

/// Whether resourceVersion `seen` is the same as `known` or later (see the module docs).
pub fn resource_version_at_least(seen: &str, known: &str) -> bool {
    // Versions written as plain decimals (what Kubernetes and the simulator hand out)
    // compare by length, then digit by digit, without parsing (equal ones included).
    if let (Some(seen), Some(known)) = (plain_decimal(seen), plain_decimal(known)) {
        return (seen.len(), seen) >= (known.len(), known);
    }
    if seen == known {
        return true;
    }
    match (seen.parse::<u64>(), known.parse::<u64>()) {
        (Ok(seen), Ok(known)) => seen >= known,
        // Opaque versions compare for equality only, tested above.
        _ => false,
    }
}

/// `(resource_version_at_least(seen, known), resource_version_at_least(known, seen))`: whether
/// `seen` is at least `known` and whether it is at most `known`, by one comparison when both
/// are equal or plain decimals (the view's check asks both of every changed node).
fn versions_compared(seen: &str, known: &str) -> (bool, bool) {
    if seen == known {
        return (true, true);
    }
    if let (Some(seen), Some(known)) = (plain_decimal(seen), plain_decimal(known)) {
        let order = (seen.len(), seen).cmp(&(known.len(), known));
        return (order.is_ge(), order.is_le());
    }
    (
        resource_version_at_least(seen, known),
        resource_version_at_least(known, seen),
    )
}

/// `version`'s digits when it is a decimal that `u64` parses to the number its digits say,
/// written without a sign or a leading zero: at most 19 digits (every such number fits in a
/// `u64`), the first not `0` unless it is the only one. Two such versions compare as numbers
/// by their length first, then digit by digit.
fn plain_decimal(version: &str) -> Option<&[u8]> {
    let digits = version.as_bytes();
    let plain = matches!(digits.len(), 1..=19)
        && digits.iter().all(u8::is_ascii_digit)
        && (digits.len() == 1 || digits.first() != Some(&b'0'));
    plain.then_some(digits)
}

/// The newest resourceVersion known per node (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct KnownVersions {
    /// Node name → newest version known. Found by hash: a step looks up every node changed
    /// or written since its previous check, twice.
    nodes: HashMap<String, Known, FastHash>,
    synced: bool,
    /// For [`KnownVersions::is_satisfied_by_view`]: whether the remembered versions were
    /// those of the caller's view at the last check it passed (then only the names in
    /// `changed` can make a later check fail).
    baseline: bool,
    /// The names whose remembered version or view entry changed since that check (at most
    /// [`MAX_CHANGED`] more than the nodes remembered, past which the next check looks at
    /// every node instead). A remembered name is kept once (its entry is marked with the
    /// round it was told in); a name not remembered told twice is kept twice and looked at
    /// twice, which answers and remembers the same.
    changed: Names,
    /// Which round of changed names this is: every clearing of `changed` starts the next
    /// one, so no entry is marked as told any more.
    round: u64,
    /// During an incremental check: the versions it raised (the position of the name in
    /// `changed`, the version it had), put back when the check fails. Empty between checks.
    raised: Vec<(usize, String)>,
    /// Strings of versions no longer remembered, reused for the next raised ones.
    spare: Vec<String>,
}

impl PartialEq for KnownVersions {
    /// The same versions, state and changed names (the round and the strings kept for reuse
    /// are bookkeeping).
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes
            && self.synced == other.synced
            && self.baseline == other.baseline
            && self.changed == other.changed
    }
}

impl Eq for KnownVersions {}

/// A remembered version, with the round its name was last told in as changed.
#[derive(Debug, Clone, Default)]
struct Known {
    version: String,
    /// [`KnownVersions::tag`] of the round the name was told in (kept in `changed`), if any
    /// since it was remembered.
    told: u64,
}

impl Known {
    fn new(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            told: 0,
        }
    }
}

impl PartialEq for Known {
    /// The same version (when it was told is bookkeeping).
    fn eq(&self, other: &Self) -> bool {
        self.version == other.version
    }
}

impl Eq for Known {}

/// A list of names whose strings are kept for reuse when it is cleared: a step tells a few
/// dozen names and clears them at its check, without allocating a string for each.
#[derive(Debug, Clone, Default)]
struct Names {
    /// The names, then (from `len` on) spare strings.
    held: Vec<String>,
    len: usize,
}

impl Names {
    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, name: &str) {
        match self.held.get_mut(self.len) {
            Some(spare) => name.clone_into(spare),
            None => self.held.push(name.to_owned()),
        }
        self.len += 1;
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        self.held.iter().take(self.len).map(String::as_str)
    }

    /// The name at position `at`.
    fn get(&self, at: usize) -> Option<&str> {
        self.held
            .get(at)
            .filter(|_| at < self.len)
            .map(String::as_str)
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}

impl PartialEq for Names {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Names {}

/// How many changed names [`KnownVersions`] keeps for the next incremental check beyond the
/// number of nodes it remembers; past that the check looks at every node (the same answer).
const MAX_CHANGED: usize = 1024;

impl KnownVersions {
    /// Nothing known yet: the next check fails until a direct read.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a node as a write returned it (its new resourceVersion). A view without a
    /// version is ignored.
    pub fn handle_write(&mut self, node: &Node) {
        let seen = node.resource_version.as_str();
        if seen.is_empty() {
            return;
        }
        if self.baseline && self.changed.len() >= self.nodes.len().saturating_add(MAX_CHANGED) {
            // As `note_changed` past the names kept: the next check looks at every node.
            self.view_replaced();
        }
        // Remembered and told as changed with one search of the node's entry, as
        // `remember_version` and then `note_changed` do.
        let tag = self.tag();
        let Self {
            nodes,
            changed,
            baseline,
            ..
        } = self;
        match nodes.get_mut(&node.name) {
            Some(known) => {
                if !resource_version_at_least(&known.version, seen) {
                    seen.clone_into(&mut known.version);
                }
                if *baseline && known.told != tag {
                    known.told = tag;
                    changed.push(&node.name);
                }
            }
            None => {
                let mut known = Known::new(seen);
                if *baseline {
                    known.told = tag;
                    changed.push(&node.name);
                }
                nodes.insert(node.name.clone(), known);
            }
        }
    }

    /// Records a direct read of every Node from the API: each node's version becomes the least
    /// a cache must show, and nodes absent from it are forgotten (they were deleted).
    pub fn handle_fresh_read<N: Borrow<Node>>(&mut self, nodes: &[N]) {
        let present: BTreeMap<&str, &Node> = nodes
            .iter()
            .map(|n| (n.borrow().name.as_str(), n.borrow()))
            .collect();
        self.nodes
            .retain(|name, _| present.contains_key(name.as_str()));
        for node in nodes {
            self.remember(node.borrow());
        }
        self.synced = true;
        self.baseline = false;
        self.clear_changed();
    }

    /// Whether no cache can be trusted before a direct read ([`KnownVersions::handle_fresh_read`]):
    /// every check answers `false` until then, so a caller may skip reading its cache.
    pub fn needs_direct_read(&self) -> bool {
        !self.synced
    }

    /// Tells [`KnownVersions::is_satisfied_by_view`] that the caller's view changed for node
    /// `name` (added, changed or removed) since the previous check.
    pub fn view_changed(&mut self, name: &str) {
        if self.baseline {
            self.note_changed(name);
        }
    }

    /// Tells [`KnownVersions::is_satisfied_by_view`] that the caller's view was replaced
    /// wholesale: the next check looks at every node.
    pub fn view_replaced(&mut self) {
        self.baseline = false;
        self.clear_changed();
    }

    /// The mark of an entry told in this round (the round's successor: an entry never told
    /// carries 0, which a round reaches again only after 2^64 clearings).
    fn tag(&self) -> u64 {
        self.round.wrapping_add(1)
    }

    /// Forgets the changed names; the next round starts (no entry is marked told).
    fn clear_changed(&mut self) {
        self.changed.clear();
        self.round = self.round.wrapping_add(1);
    }

    fn note_changed(&mut self, name: &str) {
        if self.changed.len() >= self.nodes.len().saturating_add(MAX_CHANGED) {
            // Too many to be worth it: the next check looks at every node, which answers and
            // remembers the same (see `is_satisfied_by_view`).
            self.view_replaced();
            return;
        }
        let tag = self.tag();
        match self.nodes.get_mut(name) {
            Some(known) if known.told == tag => {}
            Some(known) => {
                known.told = tag;
                self.changed.push(name);
            }
            None => self.changed.push(name),
        }
    }

    /// [`KnownVersions::is_satisfied_by`] for a view the caller keeps and changes between
    /// checks, telling each change ([`KnownVersions::view_changed`],
    /// [`KnownVersions::view_replaced`]): `version` answers a node's resourceVersion in the
    /// view (`None` when it has no such node), `all` lists the whole view as
    /// `(name, resourceVersion)`.
    ///
    /// Same answer and same versions remembered as [`KnownVersions::is_satisfied_by`] over
    /// the view's list. After a check that passed, the remembered versions are the view's;
    /// from then on only the names changed since (in the view or by a write) are looked at,
    /// until a direct read or a replaced view, after which every node is.
    pub fn is_satisfied_by_view<'v>(
        &mut self,
        version: impl Fn(&str) -> Option<&'v str>,
        all: impl Iterator<Item = (&'v str, &'v str)>,
    ) -> bool {
        if !self.synced {
            return false;
        }
        if self.baseline {
            // One lookup of each changed name in the view and among the remembered versions
            // answers the check and remembers the versions the view shows newer, in place
            // (as `remember_version` for each name after the check would); a check that
            // fails puts back what it raised, so it remembers nothing. Names not remembered
            // yet are added once it passes.
            let Self {
                nodes,
                changed,
                raised,
                spare,
                ..
            } = self;
            let mut added: Vec<(&str, &str)> = Vec::new();
            let mut caught_up = true;
            for (at, name) in changed.iter().enumerate() {
                let seen = version(name);
                match (nodes.get_mut(name), seen) {
                    (None, Some(seen)) if !seen.is_empty() => added.push((name, seen)),
                    (None, _) => {}
                    (Some(known), Some(seen)) => {
                        let (at_least, not_newer) = versions_compared(seen, &known.version);
                        if !at_least {
                            caught_up = false;
                            break;
                        }
                        if !seen.is_empty() && !not_newer {
                            let mut previous = spare.pop().unwrap_or_default();
                            seen.clone_into(&mut previous);
                            std::mem::swap(&mut known.version, &mut previous);
                            raised.push((at, previous));
                        }
                    }
                    (Some(_), None) => {
                        caught_up = false;
                        break;
                    }
                }
            }
            if !caught_up {
                // Latest first: a name raised twice gets its first version back.
                for (at, mut previous) in raised.drain(..).rev() {
                    if let Some(known) = changed.get(at).and_then(|name| nodes.get_mut(name)) {
                        std::mem::swap(&mut known.version, &mut previous);
                    }
                    spare.push(previous);
                }
                return false;
            }
            spare.extend(raised.drain(..).map(|(_, previous)| previous));
            for (name, seen) in added {
                match nodes.get_mut(name) {
                    Some(known) => seen.clone_into(&mut known.version),
                    None => {
                        nodes.insert(name.to_owned(), Known::new(seen));
                    }
                }
            }
            self.clear_changed();
            return true;
        }
        let caught_up = self.nodes.iter().all(|(name, known)| {
            version(name).is_some_and(|seen| resource_version_at_least(seen, &known.version))
        });
        if caught_up {
            for (name, seen) in all {
                self.remember_version(name, seen);
            }
            self.baseline = true;
            self.clear_changed();
        }
        caught_up
    }

    /// Remembers that node `name` was seen at resourceVersion `seen`, unless an equal or
    /// later one is remembered (an empty version says nothing).
    fn remember_version(&mut self, name: &str, seen: &str) {
        if seen.is_empty() {
            return;
        }
        match self.nodes.get_mut(name) {
            Some(known) if resource_version_at_least(&known.version, seen) => {}
            Some(known) => seen.clone_into(&mut known.version),
            None => {
                self.nodes.insert(name.to_owned(), Known::new(seen));
            }
        }
    }

    /// Whether `cached` is at least as new as everything remembered. When it is, its versions
    /// are remembered too, so a later cache that goes back behind it is not trusted either.
    ///
    /// A list sorted by name (as the simulator's and most caches' are) is searched by
    /// bisection; any other is indexed first. Both answer the same.
    pub fn is_satisfied_by<N: Borrow<Node>>(&mut self, cached: &[N]) -> bool {
        if !self.synced {
            return false;
        }
        // Not a view kept by `is_satisfied_by_view`: its next check looks at every node.
        self.view_replaced();
        let cached: Vec<&Node> = cached.iter().map(Borrow::borrow).collect();
        let sorted = cached.windows(2).all(|w| match w {
            [a, b] => a.name < b.name,
            _ => true,
        });
        let caught_up = if sorted {
            self.nodes.iter().all(|(name, known)| {
                cached
                    .binary_search_by(|n| n.name.as_str().cmp(name.as_str()))
                    .ok()
                    .and_then(|i| cached.get(i))
                    .is_some_and(|n| resource_version_at_least(&n.resource_version, &known.version))
            })
        } else {
            let seen: BTreeMap<&str, &str> = cached
                .iter()
                .map(|n| (n.name.as_str(), n.resource_version.as_str()))
                .collect();
            self.nodes.iter().all(|(name, known)| {
                seen.get(name.as_str())
                    .is_some_and(|seen| resource_version_at_least(seen, &known.version))
            })
        };
        if caught_up {
            for node in cached {
                self.remember(node);
            }
        }
        caught_up
    }

    /// The nodes whose versions a cache has yet to show: remembered ones that `cached` misses
    /// or shows older.
    pub fn behind_in<'a, N: Borrow<Node>>(&'a self, cached: &[N]) -> Vec<&'a str> {
        let seen: BTreeMap<&str, &str> = cached
            .iter()
            .map(|n| {
                (
                    n.borrow().name.as_str(),
                    n.borrow().resource_version.as_str(),
                )
            })
            .collect();
        let mut behind: Vec<&str> = self
            .nodes
            .iter()
            .filter(|(name, known)| {
                !seen
                    .get(name.as_str())
                    .is_some_and(|seen| resource_version_at_least(seen, &known.version))
            })
            .map(|(name, _)| name.as_str())
            .collect();
        behind.sort_unstable();
        behind
    }

    fn remember(&mut self, node: &Node) {
        self.remember_version(&node.name, &node.resource_version);
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

    #[test]
    fn past_the_changed_names_kept_the_check_looks_at_every_node() {
        let mut view: BTreeMap<String, String> =
            (0..4).map(|i| (format!("n{i}"), "1".to_owned())).collect();
        let mut incremental = KnownVersions::new();
        let mut whole = KnownVersions::new();
        let list = |view: &BTreeMap<String, String>| -> Vec<Node> {
            view.iter().map(|(n, v)| node(n, v)).collect()
        };
        let check = |known: &mut KnownVersions, view: &BTreeMap<String, String>| {
            known.is_satisfied_by_view(
                |n| view.get(n).map(String::as_str),
                view.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            )
        };
        incremental.handle_fresh_read(&list(&view));
        whole.handle_fresh_read(&list(&view));
        for round in 0..3u64 {
            // A check that passes: from now on only changed names are looked at.
            assert!(check(&mut incremental, &view) && whole.is_satisfied_by(&list(&view)));
            // More new nodes in the view than the names kept, then an own write ahead of
            // the view.
            for k in 0..(MAX_CHANGED + 10) {
                let name = format!("x{round}-{k}");
                view.insert(name.clone(), "1".to_owned());
                incremental.view_changed(&name);
                assert!(incremental.changed.len() <= incremental.nodes.len() + MAX_CHANGED);
            }
            let written = node("n3", &(round * 10 + 5).to_string());
            incremental.handle_write(&written);
            whole.handle_write(&written);
            let expected = whole.is_satisfied_by(&list(&view));
            assert!(!expected);
            assert_eq!(check(&mut incremental, &view), expected);
            // The view catches up.
            view.insert("n3".to_owned(), (round * 10 + 6).to_string());
            incremental.view_changed("n3");
            let expected = whole.is_satisfied_by(&list(&view));
            assert!(expected);
            assert_eq!(check(&mut incremental, &view), expected);
            assert_eq!(incremental.nodes, whole.nodes);
        }
    }

    /// `resource_version_at_least` as it was before plain decimals were compared as digits.
    fn parsed_at_least(seen: &str, known: &str) -> bool {
        seen == known
            || matches!(
                (seen.parse::<u64>(), known.parse::<u64>()),
                (Ok(seen), Ok(known)) if seen >= known
            )
    }

    proptest! {
        // Many cases: the interleavings that tell a name left untold (a write after a check
        // that passed, then a check) are a small share of the random ones.
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Comparing plain decimals digit by digit answers as parsing them does, for any
        /// strings of digits (leading zeros, 19 and 20 digits, past `u64::MAX`), signs and
        /// other text.
        #[test]
        fn versions_compare_as_parsed(
            seen in prop_oneof![
                "[0-9]{1,21}",
                "0[0-9]{0,3}",
                "[+]?[0-9]{1,3}",
                any::<u64>().prop_map(|v| v.to_string()),
                "[a-z0-9]{0,4}",
            ],
            known in prop_oneof![
                "[0-9]{1,21}",
                "0[0-9]{0,3}",
                "[+]?[0-9]{1,3}",
                any::<u64>().prop_map(|v| v.to_string()),
                "[a-z0-9]{0,4}",
            ],
        ) {
            prop_assert_eq!(resource_version_at_least(&seen, &known), parsed_at_least(&seen, &known));
            prop_assert_eq!(resource_version_at_least(&known, &seen), parsed_at_least(&known, &seen));
            prop_assert_eq!(
                versions_compared(&seen, &known),
                (resource_version_at_least(&seen, &known), resource_version_at_least(&known, &seen))
            );
            prop_assert_eq!(versions_compared(&seen, &seen), (true, true));
        }

        /// A cache is trusted only if it shows every node at least at the newest version the
        /// decider wrote or read.
        #[test]
        fn trusted_caches_show_every_own_write(
            writes in prop::collection::vec((0usize..4, 1u64..100), 0..12),
            cached in prop::collection::vec(prop::option::of(0u64..120), 4),
        ) {
            let mut known = KnownVersions::new();
            known.handle_fresh_read::<Node>(&[]);
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

        /// A view kept between checks and checked incrementally
        /// (`is_satisfied_by_view`) is judged as the whole list each time
        /// (`is_satisfied_by`), and the same versions are remembered, whatever the
        /// interleaving of view changes, own writes, direct reads and replaced views.
        #[test]
        fn a_view_checked_incrementally_is_judged_as_the_whole_list(
            ops in prop::collection::vec((0u8..6, 0usize..5, prop::option::of(0u64..40)), 1..60),
        ) {
            let mut view: BTreeMap<String, String> = BTreeMap::new();
            let mut incremental = KnownVersions::new();
            let mut whole = KnownVersions::new();
            for (op, i, rv) in ops {
                let name = format!("n{i}");
                match op {
                    // The view changes for one node (or loses it).
                    0 | 1 => {
                        match rv {
                            Some(rv) => view.insert(name.clone(), rv.to_string()),
                            None => view.remove(&name),
                        };
                        incremental.view_changed(&name);
                    }
                    // An own write.
                    2 => {
                        let written = node(&name, &rv.unwrap_or(7).to_string());
                        incremental.handle_write(&written);
                        whole.handle_write(&written);
                    }
                    // A direct read (the view as it is, with one node at another version).
                    3 => {
                        let mut fresh: Vec<Node> =
                            view.iter().map(|(n, v)| node(n, v)).collect();
                        if let (Some(first), Some(rv)) = (fresh.first_mut(), rv) {
                            first.resource_version = rv.to_string();
                        }
                        incremental.handle_fresh_read(&fresh);
                        whole.handle_fresh_read(&fresh);
                    }
                    // The view replaced by another one.
                    4 => {
                        view = (0..5)
                            .filter(|k| (k + i) % 3 != 0)
                            .map(|k| (format!("n{k}"), (rv.unwrap_or(3) + k as u64).to_string()))
                            .collect();
                        incremental.view_replaced();
                    }
                    // A check.
                    _ => {
                        let list: Vec<Node> = view.iter().map(|(n, v)| node(n, v)).collect();
                        let expected = whole.is_satisfied_by(&list);
                        let got = incremental.is_satisfied_by_view(
                            |n| view.get(n).map(String::as_str),
                            view.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                        );
                        prop_assert_eq!(got, expected);
                        prop_assert_eq!(&incremental.nodes, &whole.nodes);
                    }
                }
            }
        }

        /// A list sorted by name (the merge walk) and the same list in another order (a lookup
        /// per node) are judged alike and leave the same versions remembered.
        #[test]
        fn sorted_and_unsorted_lists_are_judged_alike(
            fresh in prop::collection::vec(prop::option::of(1u64..50), 5),
            writes in prop::collection::vec((0usize..5, 1u64..100), 0..8),
            lists in prop::collection::vec(prop::collection::vec(prop::option::of(0u64..120), 5), 1..5),
        ) {
            let list = |versions: &[Option<u64>]| -> Vec<Node> {
                versions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, rv)| rv.map(|rv| node(&format!("n{i}"), &rv.to_string())))
                    .collect()
            };
            let mut sorted = KnownVersions::new();
            sorted.handle_fresh_read(&list(&fresh));
            for (i, rv) in &writes {
                sorted.handle_write(&node(&format!("n{i}"), &rv.to_string()));
            }
            let mut unsorted = sorted.clone();
            for versions in &lists {
                let view = list(versions);
                let mut reversed = view.clone();
                reversed.reverse();
                prop_assert_eq!(sorted.is_satisfied_by(&view), unsorted.is_satisfied_by(&reversed));
                prop_assert_eq!(&sorted, &unsorted);
            }
        }
    }
}
