//! What the simulated API server adds to the world's Nodes: a `resourceVersion` per state of
//! each node, as kube-apiserver's, and a watch cache that can lag behind the world, so the
//! cluster port ([`crate::SimCluster`]) answers preconditions and stale reads as a real
//! cluster would (`docs/optimistic-concurrency.md`).
//!
//! # resourceVersions
//! The world changes its nodes in place from many places (agents, readiness, operators, the
//! port), so versions are handed out when a node is *observed* rather than when it changes:
//! each time the port or the cache looks at a node whose content differs from what was last
//! versioned, it gets the next number of one counter. A version is therefore handed out at or
//! after the change it stands for and before any later one is observed, which keeps what
//! callers rely on: versions only grow, a node observed unchanged keeps its version, and a
//! list taken before a write shows an older version than the write returned. The Lease
//! heartbeat ([`Node::last_heartbeat`]) is not part of the content (in Kubernetes it lives in
//! another object).
//!
//! # Change feed
//! [`SimApiServer::changes_since`] answers the cluster port's
//! `ClusterRead::node_changes_since` (`nodemgr_core::ports`). One sequence number counts the
//! feed's changes: every version handed out and every node forgotten takes the next one; a
//! node's entry keeps the number it was versioned at, and forgotten nodes are kept in order
//! with theirs (the last `REMOVALS_KEPT`, 4,096). A revision is that number as of an answer:
//! after it and not back. Which nodes changed is found from the world's node table
//! ([`crate::world::Nodes`]), which logs every node it hands out mutably: while the version
//! table lines up with the table as at the previous answer (no node added or removed on
//! either side, the same table), an answer compares only the logged nodes' `Arc`s with the
//! ones last versioned, in name order, and then walks the version entries for those versioned
//! after the revision asked about — the same versions, views and answer as a comparison of
//! every node's `Arc` ([`SimApiServer::set_logged_feed`], `tests/logged_feed.rs`). Otherwise
//! (the first answer, nodes added or removed, a version given for content not from the
//! world), every node is compared, as before; either way nothing else is done for a node that
//! did not change: no view handed out, nothing copied.
//!
//! # Shared views
//! A view is the node with its resourceVersion and the heartbeat it had when the version was
//! handed out. This server holds the world's nodes weakly (what it versioned and, when the view
//! is the world's node, the view too): between reads the world is the only owner of a node
//! nobody else keeps (the update executor keeps facts, not nodes), so the world's next change of
//! it (`Arc::make_mut`) moves it to a new allocation — its maps and strings are not copied and
//! are changed in place — rather than copying it; the weak reference keeps the old address from
//! being reused, so the same pointer still means the same node. A node the world changed is
//! thus held by the world alone, so a new version is written into the world's `Arc` itself,
//! which then serves as the view: a change costs no copy of the node when no reader kept the
//! previous view, one (the world's) when one did. What a version was given for can be
//! compared by content only while somebody still holds it: a node the world moved without
//! changing it, that nobody else held, gets a new version. The world never reads those two
//! fields from its `Arc` (its views set the heartbeat and clear the version, `SimNode::view`),
//! and the `Arc` keeps its address, so nothing that compares the world's nodes by pointer
//! (this server) sees a change. When only weak references share the world's `Arc` (an
//! agent's note of the Node it last read or patched, `crate::agent`), the node is first moved
//! to a new allocation (`Arc::make_mut` moves a node only weak references share: no copy),
//! which the world then holds alone: that agent's next read sees another allocation, hence a
//! new resourceVersion — as a real agent reads the version the API server gave its Node, not
//! the one its own patch returned — and a dormant agent polls again (which changes nothing:
//! `tests/lazy_agents.rs`); outcomes are those of views copied
//! (`tests/shared_views.rs`). When another `Arc` still holds the world's node, or a version
//! was handed out without a view (a precondition check), the view is a copy, made when first
//! asked for, as before. Which of the two is made changes no view's content. A port patch of
//! a node that nothing but its own version entry holds (no other `Arc`, no agent's `Weak`)
//! lets go of the entry's weak reference first, so that `Arc::make_mut` changes the node in
//! place rather than moving it; the entry gets a new version either way, as a moved node
//! does ([`SimApiServer::set_patch_in_place`], `tests/patch_in_place.rs`).
//!
//! # Watch lag
//! While a [`WatchLag`] window is open, cached reads show the nodes as they were `lag` earlier.
//! When the window opens the view jumps back by `lag`: the controller's watch was re-established
//! and relisted from an API server whose own watch cache is behind (kube-apiserver serves a
//! list at `resourceVersion=0` from that cache), so a controller may see a state older than
//! one it saw before. Windows are registered up front ([`SimApiServer::add_watch_lag`], the run
//! loop does it for the scenario's `watchLag` events) and snapshots are kept only from `lag`
//! before a window until it closes; reads outside windows are current.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nodemgr_core::hash::FastHash;
use nodemgr_core::model::{Node, NodeGroup, Timestamp};
use nodemgr_core::ports::{NodeChanges, NodeRevision};

use crate::world::{LiveNodes, Nodes};

/// A window during which the cached reads of Nodes lag behind the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLag {
    /// From.
    pub from: Timestamp,
    /// Until (exclusive).
    pub until: Timestamp,
    /// How far behind.
    pub lag: Duration,
}

/// The world's nodes as the API server versions them: each node's `Arc`, in name order, with
/// its heartbeat. A new version may write its resourceVersion and heartbeat into the `Arc`
/// itself (see "Shared views" in the module docs); nothing else of it is changed, and the
/// `Arc` is never replaced.
pub trait NodeSlots {
    /// How many nodes.
    fn count(&self) -> usize;
    /// Every node, in name order, with its heartbeat.
    fn slots(&mut self) -> impl Iterator<Item = (&mut Arc<Node>, Option<Timestamp>)>;
    /// Which nodes these are, as a number that moves whenever a node is added or removed (or
    /// they are other nodes); `None` when unknown, and the change feed then looks at every
    /// node at each answer.
    fn layout(&self) -> Option<(u64, u64)> {
        None
    }
    /// The positions (in name order, ascending) of the nodes that may have changed since the
    /// previous call, forgetting them; `None` when any may have (every node is looked at).
    fn take_touched(&mut self) -> Option<Vec<usize>> {
        None
    }
    /// The node at position `at` in name order, with its heartbeat.
    fn slot_at(&mut self, at: usize) -> Option<(&mut Arc<Node>, Option<Timestamp>)> {
        let _ = at;
        None
    }
}

impl NodeSlots for Nodes {
    fn count(&self) -> usize {
        self.len()
    }

    fn slots(&mut self) -> impl Iterator<Item = (&mut Arc<Node>, Option<Timestamp>)> {
        // Versioning changes a node's `Arc` only in place (see "Shared views"): not logged.
        self.values_mut_unlogged()
            .map(|n| (&mut n.node, n.last_heartbeat))
    }

    fn layout(&self) -> Option<(u64, u64)> {
        Some(Nodes::layout(self))
    }

    fn take_touched(&mut self) -> Option<Vec<usize>> {
        Nodes::take_touched(self)
    }

    fn slot_at(&mut self, at: usize) -> Option<(&mut Arc<Node>, Option<Timestamp>)> {
        self.at_unlogged(at)
            .map(|n| (&mut n.node, n.last_heartbeat))
    }
}

/// The world's nodes with the heartbeats they have now, computed for each node looked at
/// rather than read from [`crate::world::SimNode::last_heartbeat`] (the same value once
/// renewed): the cluster port's change feed (`crate::SimCluster`).
impl NodeSlots for LiveNodes<'_> {
    fn count(&self) -> usize {
        self.nodes.len()
    }

    fn slots(&mut self) -> impl Iterator<Item = (&mut Arc<Node>, Option<Timestamp>)> {
        let clock = self.clock;
        // Versioning changes a node's `Arc` only in place (see "Shared views"): not logged.
        self.nodes.values_mut_unlogged().map(move |n| {
            let heartbeat = clock.heartbeat(n);
            (&mut n.node, heartbeat)
        })
    }

    fn layout(&self) -> Option<(u64, u64)> {
        Some(Nodes::layout(self.nodes))
    }

    fn take_touched(&mut self) -> Option<Vec<usize>> {
        Nodes::take_touched(self.nodes)
    }

    fn slot_at(&mut self, at: usize) -> Option<(&mut Arc<Node>, Option<Timestamp>)> {
        let clock = self.clock;
        self.nodes.at_unlogged(at).map(|n| {
            let heartbeat = clock.heartbeat(n);
            (&mut n.node, heartbeat)
        })
    }
}

/// Nodes without heartbeats (for tests).
impl NodeSlots for Vec<Arc<Node>> {
    fn count(&self) -> usize {
        self.len()
    }

    fn slots(&mut self) -> impl Iterator<Item = (&mut Arc<Node>, Option<Timestamp>)> {
        self.iter_mut().map(|n| (n, None))
    }
}

/// The content a version was given for (see [`Versioned::seen`]).
#[derive(Debug, Clone)]
enum Seen {
    /// The world's own node, held weakly: the world stays the only owner of its node between
    /// reads, so its next change of it moves it to a new allocation (`Arc::make_mut` with
    /// only weak references: no copy, its maps changed in place) rather than copying it.
    /// The weak reference keeps the allocation's address from being reused, so the same
    /// pointer still means the same node.
    World(Weak<Node>),
    /// Content of its own (a node given by value, not the world's `Arc`).
    Own(Arc<Node>),
}

impl Seen {
    /// The world's node `node`, held weakly.
    fn world(node: &Arc<Node>) -> Self {
        Self::World(Arc::downgrade(node))
    }

    /// Whether it is `node` itself (the same allocation).
    fn is(&self, node: &Arc<Node>) -> bool {
        match self {
            Self::World(seen) => std::ptr::eq(seen.as_ptr(), Arc::as_ptr(node)),
            Self::Own(seen) => Arc::ptr_eq(seen, node),
        }
    }

    /// The content, while somebody still holds it (`None`: the world changed the node and
    /// nobody kept the old one).
    fn content(&self) -> Option<Arc<Node>> {
        match self {
            Self::World(seen) => seen.upgrade(),
            Self::Own(seen) => Some(Arc::clone(seen)),
        }
    }
}

/// The view lists hand out for a version.
#[derive(Debug, Clone)]
enum View {
    /// None made yet.
    None,
    /// The world's node itself, which [`Versioned::seen`] points to (see "Shared views" in
    /// the module docs): not held here, so that the world stays its only owner.
    Seen,
    /// A copy of the content with its resourceVersion and heartbeat.
    Copy(Arc<Node>),
}

/// What a node was last versioned as.
#[derive(Debug, Clone)]
struct Versioned {
    version: u64,
    /// The change sequence number it was versioned at (see "Change feed" in the module docs).
    changed: u64,
    /// The content the version was given for (its resourceVersion and heartbeat are not
    /// compared). When it came from the world it is the world's own node, held weakly: the
    /// world changes a node only through `Arc::make_mut`, which copies a node shared with
    /// another `Arc` and moves one only weak references share, so the same pointer means
    /// the same node and no content is compared. A node the world moved that nobody else
    /// held cannot be compared by content: it counts as changed (a new version).
    seen: Seen,
    /// The view lists hand out (`seen` with its resourceVersion), made once per version and
    /// shared by every list while the node does not change.
    view: View,
}

impl Versioned {
    fn new(version: u64, changed: u64, seen: Seen) -> Self {
        Self {
            version,
            changed,
            seen,
            view: View::None,
        }
    }

    /// A new version for the world's node in `slot`, with its view made now (with
    /// `heartbeat`). When no other `Arc` holds the world's node (the usual case for a node
    /// just changed: `Arc::make_mut` left the world the only owner of its copy), the version
    /// and heartbeat are written into it and it *is* the view: no copy is made; weak
    /// references to it (an agent's) are let go first by moving the node to a new allocation.
    /// Otherwise the view is a copy, as [`Versioned::view`] makes it, and the world's `Arc` is
    /// left as it is. Either way the view handed out is the same (see "Shared views" in the
    /// module docs).
    fn new_viewed(
        version: u64,
        changed: u64,
        slot: &mut Arc<Node>,
        heartbeat: Option<Timestamp>,
        shared: bool,
    ) -> (Self, Arc<Node>) {
        if shared && Arc::strong_count(slot) == 1 && Arc::weak_count(slot) > 0 {
            // Only weak references share it (an agent's note): moved, not copied.
            Arc::make_mut(slot);
        }
        if shared && let Some(node) = Arc::get_mut(slot) {
            set_version(&mut node.resource_version, version);
            node.last_heartbeat = heartbeat;
            let v = Self {
                version,
                changed,
                seen: Seen::world(slot),
                view: View::Seen,
            };
            return (v, Arc::clone(slot));
        }
        let mut v = Self::new(version, changed, Seen::world(slot));
        let view = v.view(slot, heartbeat);
        (v, view)
    }

    /// This entry replaced by a new version (`numbers`: version and change sequence number)
    /// of the world's node in `slot`, as [`Versioned::new_viewed`] makes it; returns the view.
    fn renew(
        &mut self,
        (version, changed): (u64, u64),
        slot: &mut Arc<Node>,
        heartbeat: Option<Timestamp>,
        shared: bool,
    ) -> Arc<Node> {
        let view;
        (*self, view) = Self::new_viewed(version, changed, slot, heartbeat, shared);
        view
    }

    /// Whether the world's node `node` has the content versioned (adopting it when it is
    /// another `Arc`).
    fn matches(&mut self, node: &Arc<Node>) -> bool {
        if self.seen.is(node) {
            return true;
        }
        let Some(seen) = self.seen.content() else {
            return false;
        };
        if !same_content(&seen, node) {
            return false;
        }
        if matches!(self.view, View::Seen) {
            // The view was the node seen: it stays the view (held now, as a copy would be).
            self.view = View::Copy(seen);
        }
        self.seen = Seen::world(node);
        true
    }

    /// The shared view, with `heartbeat` when it is made now. `slot` is the world's node,
    /// which [`Versioned::matches`] (or the version just given) says has the content
    /// versioned.
    fn view(&mut self, slot: &Arc<Node>, heartbeat: Option<Timestamp>) -> Arc<Node> {
        match &self.view {
            View::Copy(view) => Arc::clone(view),
            View::Seen if self.seen.is(slot) => Arc::clone(slot),
            View::Seen | View::None => {
                let mut view = Node::clone(slot);
                set_version(&mut view.resource_version, self.version);
                view.last_heartbeat = heartbeat;
                let view = Arc::new(view);
                self.view = View::Copy(Arc::clone(&view));
                view
            }
        }
    }
}

/// The versions of the nodes, in name order, found by name through a hash index: the walks
/// over every node (the change feed's, a list's) go through a vector, one search finds a
/// node's entry. Adding or removing a node moves the entries after it (a rare event; the
/// walks that rebuild the whole table do so in one go, [`VersionTable::from_sorted`]).
#[derive(Debug, Clone, Default)]
struct VersionTable {
    /// Name and version entry, strictly in name order.
    entries: Vec<(String, Versioned)>,
    /// Name → position in `entries`.
    index: HashMap<String, usize, FastHash>,
    /// A number taken anew ([`layout_stamp`]) whenever an entry is added or removed, so that
    /// the same number means the same names at the same positions.
    layout: u64,
    /// While `Some(seq)`, every entry versioned after change number `seq` is at a position
    /// listed in `recent` (see [`VersionTable::recent_since`]); `None` when unknown.
    recent_from: Option<u64>,
    /// The positions of the entries handed out to change since `recent_from`, as a set of
    /// bits (bit `i % 64` of word `i / 64` for position `i`).
    recent: Vec<u64>,
}

/// A fresh number for a layout of the version table (see [`VersionTable::layout`]).
fn layout_stamp() -> u64 {
    static STAMPS: AtomicU64 = AtomicU64::new(1);
    STAMPS.fetch_add(1, Ordering::Relaxed)
}

impl VersionTable {
    /// A table of `entries`, given strictly in name order.
    fn from_sorted(entries: Vec<(String, Versioned)>) -> Self {
        debug_assert!(entries.windows(2).all(|w| match w {
            [a, b] => a.0 < b.0,
            _ => true,
        }));
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        Self {
            entries,
            index,
            layout: layout_stamp(),
            recent_from: None,
            recent: Vec::new(),
        }
    }

    /// Notes that the entry at `at` is handed out to change (it may be versioned anew).
    fn note(&mut self, at: usize) {
        if self.recent_from.is_none() {
            return;
        }
        let word = at / 64;
        if self.recent.len() <= word {
            self.recent.resize(word + 1, 0);
        }
        if let Some(bits) = self.recent.get_mut(word) {
            *bits |= 1 << (at % 64);
        }
    }

    /// Forgets which entries were handed out to change: the next
    /// [`VersionTable::recent_since`] answers `None`.
    fn forget_recent(&mut self) {
        self.recent_from = None;
    }

    /// Starts noting the entries handed out to change from now, change number `seq` being
    /// the last one given (no entry is versioned after it).
    fn restart_recent(&mut self, seq: u64) {
        self.recent.fill(0);
        self.recent_from = Some(seq);
    }

    /// The positions of the entries that may have been versioned after change number
    /// `since` (a superset of those that were), as a set of bits ([`VersionTable::recent`]), when
    /// noted since then; `None` when not (every entry may have been). Taken out: the entries
    /// noted from here on are noted in a new set.
    fn recent_since(&mut self, since: u64) -> Option<Vec<u64>> {
        if self.recent_from.is_none_or(|from| from > since) {
            return None;
        }
        Some(std::mem::take(&mut self.recent))
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn contains_key(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn get(&self, name: &str) -> Option<&Versioned> {
        let &i = self.index.get(name)?;
        self.entries.get(i).map(|(_, v)| v)
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut Versioned> {
        let &i = self.index.get(name)?;
        self.note(i);
        self.entries.get_mut(i).map(|(_, v)| v)
    }

    /// Node `name`'s position in `entries`.
    fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The entry at `at` (a position [`VersionTable::position`] answered).
    fn at_mut(&mut self, at: usize) -> Option<&mut Versioned> {
        self.note(at);
        self.entries.get_mut(at).map(|(_, v)| v)
    }

    /// Sets node `name`'s entry (in place when it has one, else in its place by name).
    fn insert(&mut self, name: String, v: Versioned) {
        if let Some(entry) = self.get_mut(&name) {
            *entry = v;
            return;
        }
        let at = self.entries.partition_point(|(n, _)| *n < name);
        for i in self.index.values_mut() {
            if *i >= at {
                *i += 1;
            }
        }
        self.index.insert(name.clone(), at);
        self.entries.insert(at, (name, v));
        self.layout = layout_stamp();
        self.forget_recent();
    }

    /// Takes node `name`'s entry out.
    fn remove(&mut self, name: &str) -> Option<Versioned> {
        let at = self.index.remove(name)?;
        self.layout = layout_stamp();
        self.forget_recent();
        for i in self.index.values_mut() {
            if *i > at {
                *i -= 1;
            }
        }
        (at < self.entries.len()).then(|| self.entries.remove(at).1)
    }

    /// Every entry in name order.
    fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut Versioned)> {
        self.forget_recent();
        self.entries.iter_mut().map(|(name, v)| (&*name, v))
    }

    /// Every entry in name order.
    fn iter(&self) -> impl Iterator<Item = (&String, &Versioned)> {
        self.entries.iter().map(|(name, v)| (name, v))
    }

    /// Every name in order.
    fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(name, _)| name)
    }

    /// Every entry in name order, leaving the table empty.
    fn take(&mut self) -> Vec<(String, Versioned)> {
        self.index.clear();
        self.layout = layout_stamp();
        self.forget_recent();
        std::mem::take(&mut self.entries)
    }
}

/// How many removals the change feed remembers; a caller further behind resyncs.
const REMOVALS_KEPT: usize = 4096;

/// The simulated API server's state (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct SimApiServer {
    last_version: u64,
    /// Per node: the version and the content it was given for.
    versions: VersionTable,
    lags: Vec<WatchLag>,
    /// Versioned node lists by the instant they were taken, oldest first.
    history: VecDeque<(Timestamp, Vec<Node>)>,
    /// The change feed's sequence number: one more at every version handed out and every
    /// node forgotten.
    change_seq: u64,
    /// The nodes forgotten, with the sequence number of their removal, oldest first.
    removals: VecDeque<(u64, String)>,
    /// Removals before this sequence number are no longer remembered.
    removals_floor: u64,
    /// Whether every view is a copy (see "Shared views" in the module docs).
    copy_views: bool,
    /// The node groups last listed shared ([`SimApiServer::shared_groups`]).
    groups: Vec<ListedGroup>,
    /// The desired checksums last answered shared ([`SimApiServer::shared_checksums`]).
    checksums: Option<Arc<BTreeMap<String, String>>>,
    /// The layouts of the world's node table and of the version table when the change feed
    /// last versioned every node, entry `i` being node `i`'s: while both are the same, the
    /// nodes the table logged as handed out mutably since are the only ones that can have
    /// changed (see "Change feed" in the module docs).
    synced: Option<((u64, u64), u64)>,
    /// The change feed looks at every node at each answer, ignoring the world's log
    /// ([`SimApiServer::set_logged_feed`]).
    walk_every_node: bool,
    /// A patched node only a version entry shares is moved to a new allocation, as
    /// `Arc::make_mut` does, rather than changed in place ([`SimApiServer::set_patch_in_place`]).
    move_patched: bool,
}

/// A node group as last listed shared: the world's group and the count it was listed with,
/// and the group handed out.
#[derive(Debug, Clone)]
struct ListedGroup {
    /// The world's group it was listed from (compared by pointer first: the world changes
    /// its group through `Arc::make_mut`, which copies it while this holds it).
    source: Arc<NodeGroup>,
    size: Option<i64>,
    listed: Arc<NodeGroup>,
}

/// A copy of `node` without its resourceVersion, to compare later views with.
fn unversioned(node: &Node) -> Arc<Node> {
    let mut seen = node.clone();
    seen.resource_version.clear();
    Arc::new(seen)
}

/// Whether two node views have the same content, ignoring the version and the heartbeat.
fn same_content(a: &Node, b: &Node) -> bool {
    let Node {
        name,
        uid,
        resource_version: _,
        labels,
        annotations,
        taints,
        unschedulable,
        ready,
        last_heartbeat: _,
        allocatable,
        provider_id,
        addresses,
        created,
    } = a;
    *name == b.name
        && *uid == b.uid
        && *labels == b.labels
        && *annotations == b.annotations
        && *taints == b.taints
        && *unschedulable == b.unschedulable
        && *ready == b.ready
        && *allocatable == b.allocatable
        && *provider_id == b.provider_id
        && *addresses == b.addresses
        && *created == b.created
}

/// Whether the world's node `slot` is held by no other `Arc` and by one `Weak` only (a
/// version entry's [`Seen::World`], when that entry [`Seen::is`] it).
fn only_seen_by_entry(slot: &Arc<Node>) -> bool {
    Arc::strong_count(slot) == 1 && Arc::weak_count(slot) == 1
}

/// Writes `version` into `slot` in decimal (as `to_string` does), reusing its buffer.
fn set_version(slot: &mut String, version: u64) {
    slot.clear();
    // The ASCII digits pushed as characters: no UTF-8 check of a `&str` made of them.
    crate::text::Digits::of(version).push_to(slot);
}

/// Counts one more version and one more change (see "Change feed" in the module docs): the
/// new version and sequence number. Taking the two counters rather than the server lets a
/// caller hold one of the server's version entries meanwhile.
fn next_numbers(last_version: &mut u64, change_seq: &mut u64) -> (u64, u64) {
    *last_version += 1;
    *change_seq += 1;
    (*last_version, *change_seq)
}

impl SimApiServer {
    /// Whether the change feed looks only at the nodes the world's table logged as handed
    /// out mutably since its previous answer (the default, `true`), or at every node at each
    /// answer (see "Change feed" in the module docs). Both answer the same; for tests
    /// comparing them.
    pub fn set_logged_feed(&mut self, logged: bool) {
        self.walk_every_node = !logged;
    }

    /// Whether a new version of a node only the world holds is written into the world's
    /// `Arc`, which then serves as the view (the default, `true`), or every view is a copy
    /// (see "Shared views" in the module docs). Both hand out the same views; for tests
    /// comparing them.
    pub fn set_shared_views(&mut self, shared: bool) {
        self.copy_views = !shared;
    }

    /// Whether a patch of a node that no other `Arc` and only this server's version entry
    /// holds changes the node in place (the default, `true`), or moves it to a new allocation
    /// first, as `Arc::make_mut` does while a weak reference shares it (see "Shared views" in
    /// the module docs). Both hand out the same versions and views; for tests comparing them.
    pub fn set_patch_in_place(&mut self, in_place: bool) {
        self.move_patched = !in_place;
    }

    /// The node groups as listed, shared: `groups` are the world's groups in order, each with
    /// the count its listing fills in (`listed` makes the group listed from the two); the
    /// answer is the same `Arc` as at the previous call for a group equal to the one listed
    /// then (at the same position) with the same count, else a new one `listed` made. A
    /// group is the one listed when it is the same `Arc` (the world changes its groups only
    /// through `Arc::make_mut`) or has the same content (whose `Arc` is then kept instead).
    pub fn shared_groups<'g>(
        &mut self,
        groups: impl Iterator<Item = (&'g Arc<NodeGroup>, Option<i64>)>,
        listed: impl Fn(&NodeGroup, Option<i64>) -> NodeGroup,
    ) -> Vec<Arc<NodeGroup>> {
        let mut out = Vec::with_capacity(self.groups.len());
        let mut count = 0;
        for (group, size) in groups {
            let new = || ListedGroup {
                source: Arc::clone(group),
                size,
                listed: Arc::new(listed(group, size)),
            };
            match self.groups.get_mut(count) {
                Some(e) if e.size == size && Arc::ptr_eq(&e.source, group) => {}
                Some(e) if e.size == size && e.source == *group => e.source = Arc::clone(group),
                Some(e) => *e = new(),
                None => self.groups.push(new()),
            }
            if let Some(e) = self.groups.get(count) {
                out.push(Arc::clone(&e.listed));
            }
            count += 1;
        }
        self.groups.truncate(count);
        out
    }

    /// The desired configuration checksums by group, shared: `current` lists each group's
    /// name and desired checksum in name order; the answer is the same `Arc` as at the
    /// previous call when they are the same, else a new map of them.
    pub fn shared_checksums<'g>(
        &mut self,
        current: impl ExactSizeIterator<Item = (&'g str, &'g str)> + Clone,
    ) -> Arc<BTreeMap<String, String>> {
        if let Some(answered) = &self.checksums
            && answered.len() == current.len()
            && answered
                .iter()
                .zip(current.clone())
                .all(|((name, sum), (n, s))| name == n && sum == s)
        {
            return Arc::clone(answered);
        }
        let map: Arc<BTreeMap<String, String>> = Arc::new(
            current
                .map(|(name, sum)| (name.to_owned(), sum.to_owned()))
                .collect(),
        );
        self.checksums = Some(Arc::clone(&map));
        map
    }

    /// The version of `node` as it is now (a new one if it changed since last observed).
    pub fn version_of(&mut self, node: &Node) -> String {
        // A version for content that need not be the world's node: the feed looks at every
        // node at its next answer.
        self.synced = None;
        if let Some(v) = self.versions.get(&node.name)
            && v.seen
                .content()
                .is_some_and(|seen| same_content(&seen, node))
        {
            return v.version.to_string();
        }
        let v = self.new_versioned(Seen::Own(unversioned(node)));
        let version = v.version;
        self.versions.insert(node.name.clone(), v);
        version.to_string()
    }

    /// [`SimApiServer::version_of`] for a node the world keeps as an `Arc` (an unchanged one is
    /// recognised by pointer).
    pub fn version_of_shared(&mut self, node: &Arc<Node>) -> String {
        if let Some(v) = self.versions.get_mut(&node.name)
            && v.matches(node)
        {
            return v.version.to_string();
        }
        let v = self.new_versioned(Seen::world(node));
        let version = v.version;
        self.versions.insert(node.name.clone(), v);
        version.to_string()
    }

    /// [`SimApiServer::version_of_shared`] answered as the shared view lists and the change
    /// feed hand out for that version (made now, with `heartbeat`, if none was yet), for the
    /// world's node in `slot` (which becomes the view itself when nothing else holds it: see
    /// "Shared views" in the module docs).
    pub fn view_of_shared(
        &mut self,
        slot: &mut Arc<Node>,
        heartbeat: Option<Timestamp>,
    ) -> Arc<Node> {
        let shared = !self.copy_views;
        match self.versions.get_mut(&slot.name) {
            Some(v) => {
                if v.matches(slot) {
                    return v.view(slot, heartbeat);
                }
                // A new version in the node's entry (no second search, no new key).
                let numbers = next_numbers(&mut self.last_version, &mut self.change_seq);
                v.renew(numbers, slot, heartbeat, shared)
            }
            None => {
                let (version, changed) = self.next_numbers();
                let (v, view) = Versioned::new_viewed(version, changed, slot, heartbeat, shared);
                self.versions.insert(slot.name.clone(), v);
                view
            }
        }
    }

    /// A patch of the world's node in `slot` as the port applies it, with one search of the
    /// node's entry instead of one per step: when `expected` is given, the node's version as
    /// it is now ([`SimApiServer::version_of_shared`]) must be `expected`, else
    /// `Err(current version)` and nothing is changed; then `apply` changes the node through
    /// `Arc::make_mut` and the answer is [`SimApiServer::view_of_shared`] of the result. The
    /// same versions are handed out, in the same order, as by those calls one after the
    /// other.
    pub fn patch_shared(
        &mut self,
        slot: &mut Arc<Node>,
        heartbeat: Option<Timestamp>,
        expected: Option<&str>,
        apply: impl FnOnce(&mut Node),
    ) -> Result<Arc<Node>, String> {
        let shared = !self.copy_views;
        // One search of the node's entry (two for a node never versioned).
        let mut at = self.versions.position(&slot.name);
        if expected.is_some() && at.is_none() {
            // Never versioned: the precondition versions it first (as `version_of_shared`).
            let v = self.new_versioned(Seen::world(slot));
            self.versions.insert(slot.name.clone(), v);
            at = self.versions.position(&slot.name);
        }
        let Some(v) = at.and_then(|at| self.versions.at_mut(at)) else {
            apply(Arc::make_mut(slot));
            let (version, changed) = self.next_numbers();
            let (v, view) = Versioned::new_viewed(version, changed, slot, heartbeat, shared);
            self.versions.insert(slot.name.clone(), v);
            return Ok(view);
        };
        if let Some(expected) = expected {
            if !v.matches(slot) {
                let (version, changed) = next_numbers(&mut self.last_version, &mut self.change_seq);
                *v = Versioned::new(version, changed, Seen::world(slot));
            }
            // Compared as digits; the message's string made only for a conflict.
            if crate::text::Digits::of(v.version).as_bytes() != expected.as_bytes() {
                return Err(v.version.to_string());
            }
        }
        if shared && !self.move_patched && v.seen.is(slot) && only_seen_by_entry(slot) {
            // Only this entry's weak reference shares the node: let go of it, so that the
            // change is made in place rather than moving the node to a new allocation. The
            // entry is renewed below with a new version, as it is for a moved node (whose old
            // allocation nobody holds: not comparable); nothing else can tell the addresses
            // apart (no other `Arc` or `Weak` holds it).
            v.seen = Seen::World(Weak::new());
        }
        apply(Arc::make_mut(slot));
        if v.matches(slot) {
            return Ok(v.view(slot, heartbeat));
        }
        let numbers = next_numbers(&mut self.last_version, &mut self.change_seq);
        Ok(v.renew(numbers, slot, heartbeat, shared))
    }

    /// The next version and change sequence number.
    fn next_numbers(&mut self) -> (u64, u64) {
        next_numbers(&mut self.last_version, &mut self.change_seq)
    }

    /// The next version, for content `seen`.
    fn new_versioned(&mut self, seen: Seen) -> Versioned {
        let (version, changed) = self.next_numbers();
        Versioned::new(version, changed, seen)
    }

    /// Records that node `name` was forgotten (it is no longer in the world).
    fn forget(&mut self, name: String) {
        self.change_seq += 1;
        self.removals.push_back((self.change_seq, name));
        if self.removals.len() > REMOVALS_KEPT
            && let Some((seq, _)) = self.removals.pop_front()
        {
            self.removals_floor = seq;
        }
    }

    /// Versions a complete list of the world's nodes, given in name order with their
    /// heartbeats, forgetting nodes not in it, and returns their shared views: the same `Arc`
    /// for a node as long as it does not change. Same numbering as
    /// [`SimApiServer::version_all`].
    pub fn list_shared(&mut self, nodes: &mut impl NodeSlots) -> Vec<Arc<Node>> {
        let mut out = Vec::with_capacity(nodes.count());
        // The same nodes as last time (the usual case): the versions in place, pairwise.
        if self.versions.len() == nodes.count()
            && self
                .versions
                .iter()
                .zip(nodes.slots())
                .all(|((name, v), (node, _))| v.seen.is(node) || *name == node.name)
        {
            for ((_, v), (slot, heartbeat)) in self.versions.iter_mut().zip(nodes.slots()) {
                if v.matches(slot) {
                    out.push(v.view(slot, heartbeat));
                } else {
                    let numbers = next_numbers(&mut self.last_version, &mut self.change_seq);
                    out.push(v.renew(numbers, slot, heartbeat, !self.copy_views));
                }
            }
            return out;
        }
        self.merge(nodes, None)
    }

    /// Versions a complete list of the world's nodes in name order (as
    /// [`SimApiServer::list_shared`] does), forgetting nodes not in it, and returns the views
    /// of the nodes versioned after change number `since` (of every node when `None`).
    fn merge(&mut self, nodes: &mut impl NodeSlots, since: Option<u64>) -> Vec<Arc<Node>> {
        let mut out = Vec::new();
        let mut old = self.versions.take().into_iter().peekable();
        let mut kept: Vec<(String, Versioned)> = Vec::new();
        for (slot, heartbeat) in nodes.slots() {
            while let Some((gone, _)) = old.next_if(|(name, _)| *name < slot.name) {
                self.forget(gone);
            }
            let mut previous = old.next_if(|(name, _)| *name == slot.name);
            let entry = match previous.take_if(|(_, v)| v.matches(slot)) {
                Some((name, mut v)) => {
                    if since.is_none_or(|since| v.changed > since) {
                        out.push(v.view(slot, heartbeat));
                    }
                    (name, v)
                }
                None => {
                    let name = previous.map_or_else(|| slot.name.clone(), |(name, _)| name);
                    let (version, changed) = self.next_numbers();
                    let (v, view) =
                        Versioned::new_viewed(version, changed, slot, heartbeat, !self.copy_views);
                    out.push(view);
                    (name, v)
                }
            };
            kept.push(entry);
        }
        for (gone, _) in old {
            self.forget(gone);
        }
        self.versions = VersionTable::from_sorted(kept);
        out
    }

    /// The change feed (see "Change feed" in the module docs): what changed among the
    /// world's nodes, given complete and in name order with their heartbeats, since
    /// revision `since`, versioning them as [`SimApiServer::list_shared`] does. The nodes
    /// changed are the shared views `list_shared` hands out; a revision this server did not
    /// give, or one older than the removals it remembers, is answered with a resync.
    pub fn changes_since(
        &mut self,
        since: Option<NodeRevision>,
        nodes: &mut impl NodeSlots,
    ) -> NodeChanges {
        // What may have changed since the previous answer (forgotten now: every path below
        // versions every node that changed).
        let layout = nodes.layout();
        let touched = nodes.take_touched();
        let Some(NodeRevision(since)) =
            since.filter(|r| self.removals_floor <= r.0 && r.0 <= self.change_seq)
        else {
            let mut changes = NodeChanges::resync(self.list_shared(nodes));
            changes.revision = Some(NodeRevision(self.change_seq));
            self.synced = layout.map(|l| (l, self.versions.layout));
            self.versions.restart_recent(self.change_seq);
            return changes;
        };
        if let (Some(layout), Some(touched)) = (layout, touched)
            && !self.walk_every_node
            && self.synced == Some((layout, self.versions.layout))
        {
            return self.changes_logged(since, nodes, &touched);
        }
        let mut changed = Vec::new();
        let mut in_place = self.versions.len() == nodes.count();
        if in_place {
            for ((name, v), (slot, heartbeat)) in self.versions.iter_mut().zip(nodes.slots()) {
                if !v.seen.is(slot) {
                    if *name != slot.name {
                        // Another set of nodes: the merge below (what was versioned here
                        // stays versioned).
                        in_place = false;
                        break;
                    }
                    if !v.matches(slot) {
                        let numbers = next_numbers(&mut self.last_version, &mut self.change_seq);
                        changed.push(v.renew(numbers, slot, heartbeat, !self.copy_views));
                        continue;
                    }
                }
                if v.changed > since {
                    changed.push(v.view(slot, heartbeat));
                }
            }
        }
        if !in_place {
            changed = self.merge(nodes, Some(since));
        }
        // Entry `i` is node `i`'s now (in place, or merged from the whole list).
        self.synced = layout.map(|l| (l, self.versions.layout));
        self.versions.restart_recent(self.change_seq);
        self.answer(since, changed)
    }

    /// [`SimApiServer::changes_since`] when the version table lines up with the nodes as at
    /// the previous answer and `touched` (positions, ascending) are the only nodes that may
    /// have changed since: those are versioned (in name order, as the walk over every node
    /// would), then the nodes versioned after `since` are answered, as that walk answers.
    fn changes_logged(
        &mut self,
        since: u64,
        nodes: &mut impl NodeSlots,
        touched: &[usize],
    ) -> NodeChanges {
        let shared = !self.copy_views;
        for &at in touched {
            let (Some(v), Some((slot, heartbeat))) = (self.versions.at_mut(at), nodes.slot_at(at))
            else {
                continue;
            };
            if !v.matches(slot) {
                let numbers = next_numbers(&mut self.last_version, &mut self.change_seq);
                v.renew(numbers, slot, heartbeat, shared);
            }
        }
        // The entries that may have been versioned after `since` (noted as handed out to
        // change since then), else every entry; in name order either way.
        // (A set of bits, bit `i % 64` of word `i / 64` for position `i`; every bit set
        // when not noted: positions past the last entry are skipped.)
        let candidates = self
            .versions
            .recent_since(since)
            .unwrap_or_else(|| vec![u64::MAX; self.versions.len().div_ceil(64)]);
        let most: u32 = candidates.iter().map(|bits| bits.count_ones()).sum();
        let mut changed = Vec::with_capacity(usize::try_from(most).unwrap_or(0));
        for (word, &bits) in candidates.iter().enumerate() {
            let mut left = bits;
            while left != 0 {
                let at = word * 64 + left.trailing_zeros() as usize;
                left &= left - 1;
                let Some((_, v)) = self.versions.entries.get_mut(at) else {
                    continue;
                };
                if v.changed > since {
                    // The world's node at `at` is the one versioned (it was not touched
                    // since, or was versioned above).
                    let (slot, heartbeat) = match nodes.slot_at(at) {
                        Some((slot, heartbeat)) => (Arc::clone(slot), heartbeat),
                        None => match v.seen.content() {
                            Some(seen) => (seen, None),
                            None => continue,
                        },
                    };
                    changed.push(v.view(&slot, heartbeat));
                }
            }
        }
        // The buffer kept for the entries noted from now on.
        self.versions.recent = candidates;
        self.versions.restart_recent(self.change_seq);
        self.answer(since, changed)
    }

    /// The change feed's answer: the nodes `changed` since `since` and the nodes removed since
    /// then that are not back.
    fn answer(&self, since: u64, changed: Vec<Arc<Node>>) -> NodeChanges {
        let start = self.removals.partition_point(|(seq, _)| *seq <= since);
        let removed = self
            .removals
            .range(start..)
            .filter(|(_, name)| !self.versions.contains_key(name))
            .map(|(_, name)| name.clone())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .collect();
        NodeChanges {
            revision: Some(NodeRevision(self.change_seq)),
            resync: false,
            changed,
            removed,
        }
    }

    /// Sets the version of every node of a complete list, forgetting nodes not in it.
    pub fn version_all(&mut self, nodes: &mut [Node]) {
        self.synced = None;
        let sorted = nodes.windows(2).all(|w| match w {
            [a, b] => a.name < b.name,
            _ => true,
        });
        if !sorted {
            self.version_all_by_lookup(nodes);
            return;
        }
        // A list in name order (as the world lists): one merge with the versions, also in
        // name order, instead of a lookup per node. Same numbering as `version_of` node by
        // node.
        let mut old = self.versions.take().into_iter().peekable();
        let mut kept: Vec<(String, Versioned)> = Vec::with_capacity(nodes.len());
        for node in nodes.iter_mut() {
            while let Some((gone, _)) = old.next_if(|(name, _)| *name < node.name) {
                self.forget(gone);
            }
            let seen = old.next_if(|(name, _)| *name == node.name);
            let entry = match seen {
                Some((name, v))
                    if v.seen
                        .content()
                        .is_some_and(|seen| same_content(&seen, node)) =>
                {
                    (name, v)
                }
                _ => {
                    let v = self.new_versioned(Seen::Own(unversioned(node)));
                    (node.name.clone(), v)
                }
            };
            set_version(&mut node.resource_version, entry.1.version);
            kept.push(entry);
        }
        for (gone, _) in old {
            self.forget(gone);
        }
        self.versions = VersionTable::from_sorted(kept);
    }

    /// [`SimApiServer::version_all`] for a list in any order: a lookup per node.
    fn version_all_by_lookup(&mut self, nodes: &mut [Node]) {
        let names: BTreeSet<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
        let gone: Vec<String> = self
            .versions
            .keys()
            .filter(|name| !names.contains(name.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.versions.remove(&name);
            self.forget(name);
        }
        for node in nodes.iter_mut() {
            node.resource_version = self.version_of(node);
        }
    }

    /// Registers a watch-lag window (before `from - lag`, so the past it shows is recorded).
    pub fn add_watch_lag(&mut self, lag: WatchLag) {
        self.lags.push(lag);
    }

    /// The open window at `now` with the largest lag.
    fn open_lag(&self, now: Timestamp) -> Option<WatchLag> {
        self.lags
            .iter()
            .filter(|l| l.from <= now && now < l.until)
            .max_by_key(|l| l.lag)
            .copied()
    }

    /// Records the nodes as they are at `now` (a complete, versioned list) while a window is
    /// open, and drops what no open window can still show. Call once per instant, before
    /// controllers run.
    pub fn observe(&mut self, now: Timestamp, nodes: impl FnOnce() -> Vec<Node>) {
        self.lags.retain(|l| now < l.until);
        let Some(longest) = self.lags.iter().map(|l| l.lag).max() else {
            self.history.clear();
            return;
        };
        if self.lags.iter().all(|l| now < l.from - l.lag) {
            return;
        }
        let mut nodes = nodes();
        self.version_all(&mut nodes);
        self.history.push_back((now, nodes));
        // Keep the newest snapshot at or before the oldest instant a read can ask for.
        let oldest_needed = now - longest;
        while self.history.len() > 1
            && self
                .history
                .get(1)
                .is_some_and(|(t, _)| *t <= oldest_needed)
        {
            self.history.pop_front();
        }
    }

    /// The nodes a cached read shows at `now`: `None` when no window is open (read the world),
    /// else the snapshot from `lag` earlier (the oldest kept when none is that old).
    pub fn cached_nodes(&self, now: Timestamp) -> Option<Vec<Node>> {
        let window = self.open_lag(now)?;
        let target = now - window.lag;
        self.history
            .iter()
            .rev()
            .find(|(t, _)| *t <= target)
            .or_else(|| self.history.front())
            .map(|(_, nodes)| nodes.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn node(name: &str) -> Node {
        Node {
            name: name.into(),
            ..Node::default()
        }
    }

    proptest::proptest! {
        /// The version table finds, adds, replaces and removes entries as a map by name
        /// does, and keeps them in name order.
        #[test]
        fn the_version_table_is_a_map_by_name(
            ops in proptest::collection::vec((0u8..4, 0usize..12, 0u64..50), 0..80),
        ) {
            let mut table = VersionTable::default();
            let mut map: BTreeMap<String, u64> = BTreeMap::new();
            for (op, i, version) in ops {
                let name = format!("n{i}");
                match op {
                    0 | 1 => {
                        let v = Versioned::new(version, version, Seen::Own(Arc::new(node(&name))));
                        table.insert(name.clone(), v);
                        map.insert(name, version);
                    }
                    2 => {
                        let removed = table.remove(&name).map(|v| v.version);
                        proptest::prop_assert_eq!(removed, map.remove(&name));
                    }
                    _ => {
                        let rebuilt = table.take();
                        table = VersionTable::from_sorted(rebuilt);
                    }
                }
                for k in 0..12 {
                    let name = format!("n{k}");
                    proptest::prop_assert_eq!(
                        table.get(&name).map(|v| v.version),
                        map.get(&name).copied()
                    );
                    proptest::prop_assert_eq!(table.contains_key(&name), map.contains_key(&name));
                }
                let listed: Vec<(String, u64)> =
                    table.iter().map(|(n, v)| (n.clone(), v.version)).collect();
                let expected: Vec<(String, u64)> =
                    map.iter().map(|(n, v)| (n.clone(), *v)).collect();
                proptest::prop_assert_eq!(listed, expected);
                proptest::prop_assert_eq!(table.len(), map.len());
            }
        }
    }

    #[test]
    fn groups_are_shared_while_they_and_their_counts_do_not_change() {
        let mut api = SimApiServer::default();
        let group = |name: &str, generation: usize| {
            let mut g = NodeGroup::default();
            g.metadata.name = Some(name.to_owned());
            g.kind = format!("NodeGroup{generation}");
            g
        };
        let listed = |g: &NodeGroup, size: Option<i64>| {
            let mut g = g.clone();
            g.status.get_or_insert_with(Default::default).desired = size;
            g
        };
        let (a, b) = (Arc::new(group("a", 0)), Arc::new(group("b", 1)));
        let first = api.shared_groups([(&a, Some(3)), (&b, None)].into_iter(), listed);
        assert_eq!(first[0].status.as_ref().and_then(|s| s.desired), Some(3));
        let again = api.shared_groups([(&a, Some(3)), (&b, None)].into_iter(), listed);
        assert!(Arc::ptr_eq(&first[0], &again[0]) && Arc::ptr_eq(&first[1], &again[1]));
        // Another count, another group content, another group at a position: new answers.
        let b2 = Arc::new(group("b", 2));
        let changed = api.shared_groups([(&a, Some(4)), (&b2, None)].into_iter(), listed);
        assert!(!Arc::ptr_eq(&again[0], &changed[0]) && !Arc::ptr_eq(&again[1], &changed[1]));
        assert_eq!(changed[0].status.as_ref().and_then(|s| s.desired), Some(4));
        assert_eq!(*changed[1], listed(&b2, None));
        let moved = api.shared_groups([(&b2, None)].into_iter(), listed);
        assert_eq!(*moved[0], listed(&b2, None));
    }

    proptest::proptest! {
        /// The groups as the world changes them (through `Arc::make_mut`, changing their
        /// content or not, or replaced by another `Arc` of equal or other content) and their
        /// counts: every listing is each group listed with its count, and is the previous
        /// listing's `Arc` exactly when the group's content and count are those listed then
        /// (as a comparison of contents alone answers).
        #[test]
        fn shared_groups_are_those_of_equal_content_and_count(
            steps in proptest::collection::vec(
                proptest::collection::vec((0u8..5, 0u8..3, proptest::option::of(0i64..3)), 3),
                1..24,
            ),
        ) {
            let mut api = SimApiServer::default();
            let listed = |g: &NodeGroup, size: Option<i64>| {
                let mut g = g.clone();
                g.status.get_or_insert_with(Default::default).desired = size;
                g
            };
            let group = |name: usize, mark: u8| {
                let mut g = NodeGroup::default();
                g.metadata.name = Some(format!("g{name}"));
                g.kind = format!("NodeGroup{mark}");
                g
            };
            let mut groups: Vec<Arc<NodeGroup>> = (0..3).map(|i| Arc::new(group(i, 0))).collect();
            // The groups with their counts as last listed, and the listing handed out.
            type Listing = (Vec<(NodeGroup, Option<i64>)>, Vec<Arc<NodeGroup>>);
            let mut before: Option<Listing> = None;
            for step in steps {
                let mut sizes = Vec::new();
                for (i, (op, mark, size)) in step.into_iter().enumerate() {
                    let Some(g) = groups.get_mut(i) else { continue };
                    match op {
                        // Changed in place (copied while the listing holds it).
                        0 => Arc::make_mut(g).kind = format!("NodeGroup{mark}"),
                        // Taken to change, left as it was.
                        1 => {
                            Arc::make_mut(g);
                        }
                        // Another `Arc`, of the same content or another.
                        2 => *g = Arc::new(group(i, mark)),
                        3 => *g = Arc::new(NodeGroup::clone(g)),
                        _ => {}
                    }
                    sizes.push(size);
                }
                let answer = api.shared_groups(groups.iter().zip(sizes.iter().copied()), listed);
                let now: Vec<(NodeGroup, Option<i64>)> = groups
                    .iter()
                    .zip(sizes.iter().copied())
                    .map(|(g, size)| (NodeGroup::clone(g), size))
                    .collect();
                for (i, (g, size)) in now.iter().enumerate() {
                    proptest::prop_assert_eq!(&*answer[i], &listed(g, *size));
                    if let Some((was, handed)) = &before {
                        let same = was[i] == (g.clone(), *size);
                        proptest::prop_assert_eq!(Arc::ptr_eq(&handed[i], &answer[i]), same);
                    }
                }
                before = Some((now, answer));
            }
        }
    }

    #[test]
    fn versions_change_with_content_only_and_always_grow() {
        let mut api = SimApiServer::default();
        let mut n = node("a");
        let v1 = api.version_of(&n);
        n.last_heartbeat = Some(Timestamp::from_secs(5));
        assert_eq!(api.version_of(&n), v1, "a heartbeat is another object");
        n.annotations.insert("k".into(), String::new());
        let v2 = api.version_of(&n);
        assert!(v2.parse::<u64>().unwrap() > v1.parse::<u64>().unwrap());
        let other = api.version_of(&node("b"));
        assert!(other.parse::<u64>().unwrap() > v2.parse::<u64>().unwrap());
    }

    #[test]
    fn a_sorted_list_is_versioned_as_node_by_node() {
        let mut merged = SimApiServer::default();
        let mut one_by_one = SimApiServer::default();
        // The same lists through the merge and through a lookup per node.
        let lists: [&[&str]; 6] = [
            &["a", "c", "d"],
            &["b", "c", "e"],
            &["b", "c", "e"],
            &["c", "e"],
            &["a", "e"],
            &["a", "e"],
        ];
        for (round, names) in lists.iter().enumerate() {
            let mut nodes: Vec<Node> = names.iter().map(|n| node(n)).collect();
            if let Some(n) = nodes.get_mut(round % names.len()) {
                n.annotations.insert("round".into(), round.to_string());
            }
            let mut by_lookup = nodes.clone();
            merged.version_all(&mut nodes);
            one_by_one.version_all_by_lookup(&mut by_lookup);
            let versions = |l: &[Node]| {
                l.iter()
                    .map(|n| n.resource_version.clone())
                    .collect::<Vec<_>>()
            };
            assert_eq!(versions(&nodes), versions(&by_lookup), "round {round}");
            assert_eq!(
                merged.versions.keys().collect::<Vec<_>>(),
                one_by_one.versions.keys().collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn the_feed_answers_what_changed_since_a_revision() {
        let mut api = SimApiServer::default();
        let arcs = |names: &[&str]| -> Vec<Arc<Node>> {
            names.iter().map(|n| Arc::new(node(n))).collect()
        };
        let names =
            |nodes: &[Arc<Node>]| -> Vec<String> { nodes.iter().map(|n| n.name.clone()).collect() };
        let mut world = arcs(&["a", "b", "c"]);
        let feed = |api: &mut SimApiServer, world: &mut Vec<Arc<Node>>, since| {
            api.changes_since(since, world)
        };
        let first = feed(&mut api, &mut world, None);
        assert!(first.resync);
        assert_eq!(names(&first.changed), ["a", "b", "c"]);
        // b changes, c goes, d comes; a is the same `Arc`.
        let mut b = node("b");
        b.annotations.insert("k".into(), String::new());
        world = vec![Arc::clone(&world[0]), Arc::new(b), Arc::new(node("d"))];
        let second = feed(&mut api, &mut world, first.revision);
        assert!(!second.resync);
        assert_eq!(names(&second.changed), ["b", "d"]);
        assert_eq!(second.removed, ["c"]);
        assert!(
            Arc::ptr_eq(&second.changed[0], &api.list_shared(&mut world)[1]),
            "the view lists share"
        );
        // Nothing since; then a node versioned outside the feed (a patch) is reported.
        let third = feed(&mut api, &mut world, second.revision);
        assert!(third.changed.is_empty() && third.removed.is_empty());
        let mut a = node("a");
        a.labels.insert("patched".into(), String::new());
        world[0] = Arc::new(a);
        let patched = api.view_of_shared(&mut world[0], None);
        let fourth = feed(&mut api, &mut world, third.revision);
        assert_eq!(names(&fourth.changed), ["a"]);
        assert!(Arc::ptr_eq(&fourth.changed[0], &patched));
        // A revision this server never gave is answered with a resync.
        let unknown = feed(&mut api, &mut world, Some(NodeRevision(u64::MAX)));
        assert!(unknown.resync);
        assert_eq!(names(&unknown.changed), ["a", "b", "d"]);
    }

    #[test]
    fn a_lagging_cache_shows_the_past_but_not_before_its_window() {
        let mut api = SimApiServer::default();
        let t = Timestamp::from_secs;
        api.add_watch_lag(WatchLag {
            from: t(10),
            until: t(100),
            lag: Duration::from_secs(5),
        });
        assert!(api.cached_nodes(t(5)).is_none());
        for s in 10..=20 {
            let mut n = node("a");
            n.annotations.insert("at".into(), s.to_string());
            api.observe(t(s), || vec![n.clone()]);
        }
        let at = |nodes: Vec<Node>| nodes[0].annotations["at"].clone();
        assert_eq!(at(api.cached_nodes(t(20)).unwrap()), "15");
        assert_eq!(
            at(api.cached_nodes(t(12)).unwrap()),
            "15",
            "pruned: oldest kept"
        );
        api.observe(t(100), Vec::new);
        assert!(api.cached_nodes(t(100)).is_none(), "the window closed");
    }
}
