//! The inter-pod part of a fit, fast: topology spread constraints and pod affinity and
//! anti-affinity on the hostname and zone keys (docs/scheduling.md §2), as the placement engine
//! ([`super::placement`]) evaluates them for thousands of pods.
//!
//! Instead of rescanning every pod per placement, the state keeps counters that each placement
//! updates in O(selectors the pod matches):
//!
//! * a **universe** fixed per planning call: every selector the pods to place (and the bound
//!   pods' anti-affinity terms) use, interned once with its namespaces resolved; the node
//!   filters of the spread constraints; one **tracker** per (selector, topology key, node
//!   filter);
//! * per bin (node) the number of pods matching each selector and carrying each anti-affinity
//!   term; per zone the same over present nodes; per tracker the counts over its eligible
//!   domains, with the global minimum kept incrementally (a histogram of per-node counts for the
//!   hostname key);
//! * per pod class a [`ClassTopo`]: which selectors its pods match (what they add where they
//!   land), and what it checks (its own terms, the anti-affinity terms of others that exclude
//!   it, its spread constraints with their trackers).
//!
//! Semantics are kube-scheduler's InterPodAffinity and PodTopologySpread filters, with the
//! differences docs/scheduling.md §1 lists; the slow reading in [`super::reference`] is the
//! specification the properties hold this code to.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use crate::model::{
    LabelSelector, LabelSelectorRequirement, NamespaceScope, Pod, PodAffinityTerm, StringMap,
    TopologyKey, WhenUnsatisfiable, keys,
};

use crate::hash::{FastHash, Fx};
use crate::scaling::bound_tree::{BoundTree, first_match};

/// "No zone" / "no entry".
pub(crate) const NONE: u32 = u32::MAX;

/// Namespaces a selector looks in, resolved against the namespace of the pod carrying it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Namespaces {
    /// These (sorted, deduplicated).
    Listed(Vec<String>),
    /// Every namespace.
    All,
}

impl Namespaces {
    fn resolve(scope: &NamespaceScope, own: &str) -> Self {
        match scope {
            NamespaceScope::Own => Self::Listed(vec![own.to_owned()]),
            NamespaceScope::Listed(list) => {
                let mut l = list.clone();
                l.sort();
                l.dedup();
                Self::Listed(l)
            }
            NamespaceScope::All => Self::All,
        }
    }

    fn contains(&self, ns: &str) -> bool {
        match self {
            Self::Listed(l) => l.iter().any(|n| n == ns),
            Self::All => true,
        }
    }
}

/// Pods in `ns` matching `selector` (`None` matches no pod).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Part {
    ns: Namespaces,
    selector: Option<LabelSelector>,
}

impl Part {
    fn matches(&self, pod: &Pod) -> bool {
        self.ns.contains(&pod.namespace)
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

/// Pods matching every part (one part but for a pod's required affinity terms, which kube
/// counts as a conjunction).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SelDef(Vec<Part>);

impl SelDef {
    fn matches(&self, pod: &Pod) -> bool {
        self.0.iter().all(|p| p.matches(pod))
    }

    fn of_term(term: &PodAffinityTerm, own: &str) -> Self {
        Self(vec![Part {
            ns: Namespaces::resolve(&term.namespaces, own),
            selector: term.selector.clone(),
        }])
    }

    /// A [`Pod::hostname_anti_affinity`] selector of a pod in `own`.
    fn of_hostname_anti(selector: &LabelSelector, own: &str) -> Self {
        Self(vec![Part {
            ns: Namespaces::Listed(vec![own.to_owned()]),
            selector: Some(selector.clone()),
        }])
    }
}

/// Every required anti-affinity term of `pod` — [`Pod::hostname_anti_affinity`] and
/// [`Pod::pod_anti_affinity`] — as (selector, key).
fn anti_terms(pod: &Pod) -> impl Iterator<Item = (SelDef, TopologyKey)> + '_ {
    pod.hostname_anti_affinity
        .iter()
        .map(|s| {
            (
                SelDef::of_hostname_anti(s, &pod.namespace),
                TopologyKey::Hostname,
            )
        })
        .chain(
            pod.pod_anti_affinity
                .iter()
                .map(|t| (SelDef::of_term(t, &pod.namespace), t.topology)),
        )
}

/// Which nodes are eligible domains of a spread constraint: the pod's nodeSelector and
/// required node affinity (nodeAffinityPolicy `Honor`), and a zone label when the pod has a
/// `DoNotSchedule` zone constraint (kube counts only nodes carrying every constraint's key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FilterDef {
    node_selector: BTreeMap<String, String>,
    affinity: Vec<Vec<LabelSelectorRequirement>>,
    requires_zone: bool,
}

impl FilterDef {
    fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        (!self.requires_zone || labels.contains_key(keys::LABEL_TOPOLOGY_ZONE))
            && node_affinity_matches(&self.node_selector, &self.affinity, labels)
    }
}

/// Whether `labels` pass a nodeSelector and required node affinity (terms ORed, an empty term
/// matching nothing).
pub(crate) fn node_affinity_matches(
    node_selector: &BTreeMap<String, String>,
    affinity: &[Vec<LabelSelectorRequirement>],
    labels: &BTreeMap<String, String>,
) -> bool {
    node_selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        && (affinity.is_empty()
            || affinity
                .iter()
                .any(|term| !term.is_empty() && term.iter().all(|req| req.matches(labels))))
}

/// Counts of one selector over the eligible domains of one node filter and topology key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct TrackerDef {
    sel: u32,
    key: TopologyKey,
    filter: u32,
}

/// Everything fixed for one planning call.
#[derive(Debug, Default)]
pub(crate) struct Universe {
    sels: Vec<SelDef>,
    sel_at: HashMap<SelDef, u32, FastHash>,
    /// Whether pods the selector matches are depended on: it is the selector of a required
    /// affinity or of a `DoNotSchedule` spread constraint (moving such a pod could break a
    /// placement made earlier).
    depended: Vec<bool>,
    /// Anti-affinity terms pods carry: (selector, key).
    antis: Vec<(u32, TopologyKey)>,
    anti_at: HashMap<(u32, TopologyKey), u32, FastHash>,
    filters: Vec<FilterDef>,
    filter_at: HashMap<FilterDef, u32, FastHash>,
    trackers: Vec<TrackerDef>,
    tracker_at: HashMap<TrackerDef, u32, FastHash>,
    /// Trackers of each selector.
    sel_trackers: Vec<Vec<u32>>,
    /// Selectors of required affinities with a hostname-key term.
    hostname_affinity: Vec<u32>,
}

impl Universe {
    fn sel(&mut self, def: SelDef) -> u32 {
        if let Some(&s) = self.sel_at.get(&def) {
            return s;
        }
        let s = self.sels.len() as u32;
        self.sels.push(def.clone());
        self.sel_at.insert(def, s);
        self.depended.push(false);
        self.sel_trackers.push(Vec::new());
        s
    }

    fn anti(&mut self, sel: u32, key: TopologyKey) -> u32 {
        let n = self.antis.len() as u32;
        *self.anti_at.entry((sel, key)).or_insert_with(|| {
            self.antis.push((sel, key));
            n
        })
    }

    fn filter(&mut self, def: FilterDef) -> u32 {
        let n = self.filters.len() as u32;
        if let Some(&f) = self.filter_at.get(&def) {
            return f;
        }
        self.filters.push(def.clone());
        self.filter_at.insert(def, n);
        n
    }

    fn tracker(&mut self, def: TrackerDef) -> u32 {
        if let Some(&t) = self.tracker_at.get(&def) {
            return t;
        }
        let t = self.trackers.len() as u32;
        self.trackers.push(def);
        self.tracker_at.insert(def, t);
        if let Some(v) = self.sel_trackers.get_mut(def.sel as usize) {
            v.push(t);
        }
        t
    }

    fn filter_def(pod: &Pod, requires_zone: bool) -> FilterDef {
        FilterDef {
            node_selector: pod.node_selector.clone(),
            affinity: pod.required_node_affinity.clone(),
            requires_zone,
        }
    }

    /// Whether the pod's `DoNotSchedule` constraints need a zone label on eligible nodes.
    fn hard_zone(pod: &Pod) -> bool {
        pod.topology_spread.iter().any(|c| {
            c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
                && c.topology == TopologyKey::Zone
        })
    }

    /// Interns everything `pod` checks and carries, as a pod the engine may place (its
    /// hostname anti-affinity aside: see [`UniverseBuilder`]).
    fn add_pod(&mut self, pod: &Pod) {
        let ns = pod.namespace.as_str();
        for t in &pod.pod_anti_affinity {
            let s = self.sel(SelDef::of_term(t, ns));
            self.anti(s, t.topology);
        }
        if !pod.pod_affinity.is_empty() {
            let s = self.sel(affinity_def(pod));
            if let Some(d) = self.depended.get_mut(s as usize) {
                *d = true;
            }
            if pod
                .pod_affinity
                .iter()
                .any(|t| t.topology == TopologyKey::Hostname)
                && !self.hostname_affinity.contains(&s)
            {
                self.hostname_affinity.push(s);
            }
        }
        for w in pod
            .preferred_pod_affinity
            .iter()
            .chain(&pod.preferred_pod_anti_affinity)
        {
            self.sel(SelDef::of_term(&w.term, ns));
        }
        let hard_zone = Self::hard_zone(pod);
        for c in &pod.topology_spread {
            let hard = c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule;
            if !hard && c.topology != TopologyKey::Zone {
                // A soft hostname constraint never changes a decision (docs/scheduling.md §3).
                continue;
            }
            let s = self.sel(spread_def(pod, c.selector.as_ref()));
            if hard && let Some(d) = self.depended.get_mut(s as usize) {
                *d = true;
            }
            let filter = self.filter(Self::filter_def(pod, if hard { hard_zone } else { true }));
            self.tracker(TrackerDef {
                sel: s,
                key: c.topology,
                filter,
            });
        }
    }

    /// Interns the anti-affinity terms `pod` carries (a bound pod: they exclude others),
    /// hostname anti-affinity aside.
    fn add_carrier(&mut self, pod: &Pod) {
        for t in &pod.pod_anti_affinity {
            let s = self.sel(SelDef::of_term(t, &pod.namespace));
            self.anti(s, t.topology);
        }
    }

    fn is_empty(&self) -> bool {
        self.sels.is_empty()
    }
}

fn spread_def(pod: &Pod, selector: Option<&LabelSelector>) -> SelDef {
    SelDef(vec![Part {
        ns: Namespaces::Listed(vec![pod.namespace.clone()]),
        selector: selector.cloned(),
    }])
}

fn affinity_def(pod: &Pod) -> SelDef {
    SelDef(
        pod.pod_affinity
            .iter()
            .map(|t| Part {
                ns: Namespaces::resolve(&t.namespaces, &pod.namespace),
                selector: t.selector.clone(),
            })
            .collect(),
    )
}

/// Collects the universe of one planning call.
///
/// [`Pod::hostname_anti_affinity`] alone is left to the bins' own per-node check (cheap when
/// nothing else needs counters); once the universe exists for other constraints, the
/// hostname anti-affinity terms join it and the counters answer for them too.
#[derive(Debug, Default)]
pub(crate) struct UniverseBuilder {
    u: Universe,
    hostname_anti: Vec<SelDef>,
}

impl UniverseBuilder {
    /// Adds a pod the engine may place (or move).
    pub(crate) fn place(&mut self, pod: &Pod) {
        self.u.add_pod(pod);
        self.hostname_anti(pod);
    }

    /// Adds a pod already bound: only the anti-affinity it carries matters.
    pub(crate) fn bound(&mut self, pod: &Pod) {
        self.u.add_carrier(pod);
        self.hostname_anti(pod);
    }

    fn hostname_anti(&mut self, pod: &Pod) {
        for s in &pod.hostname_anti_affinity {
            let def = SelDef::of_hostname_anti(s, &pod.namespace);
            if !self.hostname_anti.contains(&def) {
                self.hostname_anti.push(def);
            }
        }
    }

    /// The universe, or `None` when no pod constrains another beyond hostname anti-affinity
    /// (the engine then skips this module altogether).
    pub(crate) fn build(mut self) -> Option<Rc<Universe>> {
        if self.u.is_empty() {
            return None;
        }
        for def in std::mem::take(&mut self.hostname_anti) {
            let s = self.u.sel(def);
            self.u.anti(s, TopologyKey::Hostname);
        }
        Some(Rc::new(self.u))
    }
}

/// What a pod adds to the counters where it lands.
#[derive(Debug, Clone, Default)]
struct Profile {
    /// Selectors it matches.
    matches: Vec<u32>,
    /// Anti-affinity terms it carries.
    carries: Vec<u32>,
}

/// Profiles interned by what they depend on (namespace, labels, anti-affinity terms), shared
/// by the clones of one state.
#[derive(Debug, Default)]
struct ProfileTable {
    list: Vec<Profile>,
    by_hash: HashMap<u64, Vec<ProfileKey>, FastHash>,
}

/// What a profile depends on: (id, namespace, labels, anti-affinity terms, hostname
/// anti-affinity selectors).
type ProfileKey = (
    u32,
    String,
    StringMap,
    Vec<PodAffinityTerm>,
    Vec<LabelSelector>,
);

/// A required affinity as a class checks it.
#[derive(Debug, Clone)]
struct Affinity {
    /// Pods matching every term.
    sel: u32,
    /// The terms' keys (deduplicated).
    keys: Vec<TopologyKey>,
    /// Whether the pod matches all its own terms (the first pod of a self-affine group may
    /// go anywhere).
    self_match: bool,
}

/// A `DoNotSchedule` spread constraint as a class checks it.
#[derive(Debug, Clone, Copy)]
struct Spread {
    tracker: u32,
    key: TopologyKey,
    max_skew: u32,
    min_domains: u32,
    self_match: u32,
}

/// What one pod class checks and adds.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClassTopo {
    profile: u32,
    anti: Vec<(u32, TopologyKey)>,
    repelled_by: Vec<u32>,
    affinity: Option<Affinity>,
    spread: Vec<Spread>,
    /// `ScheduleAnyway` zone constraints: (tracker, self match).
    soft_zone: Vec<(u32, u32)>,
    /// Preferred terms: (selector, key, +weight for affinity / −weight for anti-affinity).
    preferred: Vec<(u32, TopologyKey, i64)>,
    needs_zone: bool,
    /// Every rejection of this class holds for good while room only shrinks and pods are only
    /// added (so first-fit cursors may skip the bin).
    pub(crate) monotone: bool,
    /// A term the universe does not know: the class is placed nowhere.
    impossible: bool,
    /// Nothing to check.
    trivial: bool,
    /// The hostname-key rules as bounds on count trees.
    jumps: Vec<Jump>,
}

/// Why a bin refuses a class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// For good (while room only shrinks and pods are only added).
    Lasting,
    /// May change as other pods land (affinity partners, spread minimums, zone counts).
    ForNow,
}

/// Precomputed per search (the state does not change during one).
#[derive(Debug, Clone, Default)]
pub(crate) struct SearchCtx {
    affinity_exception: bool,
    /// Per spread constraint: the largest count a domain may have before the pod lands.
    limit: Vec<i64>,
}

/// Per-bin counts of one selector (or anti-affinity term) in a segment tree of bounds on the
/// minima and maxima (kept lazily, see [`CountTree::set`]): the first bin at or after a start whose count is at most (or at least) a bound, in
/// O(log bins). The hostname-key rules use it to jump over the bins they refuse instead of
/// testing them one by one.
#[derive(Debug, Clone, Default)]
struct CountTree {
    cap: usize,
    len: usize,
    min: Vec<u32>,
    max: Vec<u32>,
}

impl CountTree {
    fn push(&mut self) {
        if self.len == self.cap {
            let cap = (self.cap * 2).max(64);
            let (old_min, old_max) = (
                self.min
                    .get(self.cap..self.cap + self.len)
                    .unwrap_or_default()
                    .to_vec(),
                self.max
                    .get(self.cap..self.cap + self.len)
                    .unwrap_or_default()
                    .to_vec(),
            );
            self.cap = cap;
            // Leaves not pushed yet hold 0, the count of a new bin: pushing one is then free
            // (see `set`). They are never answered (`first` checks `len`).
            self.min = vec![0; 2 * cap];
            self.max = vec![0; 2 * cap];
            self.min[cap..cap + old_min.len()].copy_from_slice(&old_min);
            self.max[cap..cap + old_max.len()].copy_from_slice(&old_max);
            for i in (1..cap).rev() {
                self.min[i] = self.min[2 * i].min(self.min[2 * i + 1]);
                self.max[i] = self.max[2 * i].max(self.max[2 * i + 1]);
            }
        }
        self.len += 1;
        self.set(self.len - 1, 0);
    }

    /// Drops the last bin. Its leaf keeps its value (the tree stays consistent over all its
    /// leaves) and is never answered: [`CountTree::first`] returns the leftmost match, and a
    /// match at or past `len` means none before it (the next push overwrites the leaf).
    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    /// Sets bin `i`'s count. Inner nodes hold bounds (a lower bound of the least and an upper
    /// bound of the most count below, at least as loose as every child's): a change loosens
    /// the ancestors' bound in its direction at once and leaves the other to be tightened by
    /// the first search that finds it stale ([`BoundTree::tighten`]).
    fn set(&mut self, i: usize, v: u32) {
        let mut n = self.cap + i;
        let old = self.max[n];
        if old == v {
            // The leaf holds `v` already (a leaf's two values are equal).
            return;
        }
        self.min[n] = v;
        self.max[n] = v;
        if v > old {
            while n > 1 {
                n /= 2;
                if self.max[n] >= v {
                    break;
                }
                self.max[n] = v;
            }
        } else {
            while n > 1 {
                n /= 2;
                if self.min[n] <= v {
                    break;
                }
                self.min[n] = v;
            }
        }
    }

    /// The first bin at or after `start` whose count is at most `at_most` (`above == false`) or
    /// at least `at_least` (`above == true`) ([`first_match`]: exact whatever the bounds'
    /// staleness; stale bounds met on the way are tightened).
    fn first(&mut self, start: usize, bound: u32, above: bool) -> Option<usize> {
        if above {
            first_match(self, start, |t, n| t.max[n] >= bound)
        } else {
            first_match(self, start, |t, n| t.min[n] <= bound)
        }
    }
}

impl BoundTree for CountTree {
    fn leaves(&self) -> usize {
        self.cap
    }

    fn used(&self) -> usize {
        self.len
    }

    fn recompute(&mut self, n: usize) -> bool {
        let (lo, hi) = (
            self.min[2 * n].min(self.min[2 * n + 1]),
            self.max[2 * n].max(self.max[2 * n + 1]),
        );
        if self.min[n] == lo && self.max[n] == hi {
            return false;
        }
        self.min[n] = lo;
        self.max[n] = hi;
        true
    }
}

/// A hostname-key rule of a class as a bound on one count tree.
#[derive(Debug, Clone, Copy)]
enum Jump {
    /// The selector's count on the bin is at most the spread limit of constraint `spread`.
    SpreadAtMost { tree: u32, spread: u32 },
    /// The selector's count on the bin is 0 (own anti-affinity; lasting).
    None { tree: u32 },
    /// No pod on the bin carries the anti-affinity term (lasting).
    NoCarrier { tree: u32 },
    /// Some pod on the bin matches the affinity (unless the first-pod exception holds).
    Some { tree: u32 },
}

/// Counts of one tracker.
#[derive(Debug, Clone, Default)]
struct TrackerState {
    /// Zone key: matching pods on eligible present bins, per zone.
    zone_count: Vec<u32>,
    /// Zone key: eligible present bins per zone.
    zone_bins: Vec<u32>,
    /// Hostname key: eligible present bins per count.
    hist: Vec<u32>,
    /// Hostname key: the smallest count over eligible present bins.
    min: u32,
    /// Eligible domains (zones with an eligible present bin, or eligible present bins).
    domains: u32,
}

/// The counters of one simulation (cloned with its bins).
#[derive(Debug, Clone)]
pub(crate) struct TopoState {
    u: Rc<Universe>,
    profiles: Rc<RefCell<ProfileTable>>,
    n_sels: usize,
    n_antis: usize,
    n_filters: usize,
    zone_names: Vec<String>,
    zone_at: HashMap<String, u32, FastHash>,
    bin_zone: Vec<u32>,
    present: Vec<bool>,
    /// `[bin * n_sels + sel]`: pods on the bin matching the selector.
    bin_count: Vec<u32>,
    /// `[bin * n_antis + anti]`: pods on the bin carrying the term.
    carrier_bin: Vec<u32>,
    /// `[bin * n_filters + filter]`.
    filter_ok: Vec<bool>,
    /// Pods counted on each bin.
    bin_pods: Vec<u32>,
    /// `[zone][sel]` over present bins.
    zone_all: Vec<Vec<u32>>,
    /// `[zone][anti]` over present bins.
    carrier_zone: Vec<Vec<u32>>,
    /// Per selector, matching pods on present bins, and on present bins with a zone.
    total_present: Vec<u32>,
    total_zoned: Vec<u32>,
    trackers: Vec<TrackerState>,
    /// Count tree of each selector a hostname-key rule reads (`NONE` without).
    sel_tree: Vec<u32>,
    /// Count tree of each hostname anti-affinity term's carriers (`NONE` without).
    anti_tree: Vec<u32>,
    trees: Vec<CountTree>,
}

fn bump(v: &mut Vec<u32>, i: usize) -> &mut u32 {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    &mut v[i]
}

impl ClassTopo {
    /// Whether the class can be placed nowhere (a term the universe does not know, or an
    /// unmodelled constraint).
    pub(crate) fn impossible(&self) -> bool {
        self.impossible
    }
}

impl TopoState {
    /// Empty state over `u`.
    pub(crate) fn new(u: Rc<Universe>) -> Self {
        let (n_sels, n_antis, n_filters) = (u.sels.len(), u.antis.len(), u.filters.len());
        let trackers = vec![TrackerState::default(); u.trackers.len()];
        // Count trees for the selectors hostname-key rules read.
        let mut sel_tree = vec![NONE; n_sels];
        let mut anti_tree = vec![NONE; n_antis];
        let mut n_trees = 0u32;
        let mut tree_for = |slot: &mut u32| {
            if *slot == NONE {
                *slot = n_trees;
                n_trees += 1;
            }
        };
        for t in &u.trackers {
            if t.key == TopologyKey::Hostname {
                tree_for(&mut sel_tree[t.sel as usize]);
            }
        }
        for (a, (s, key)) in u.antis.iter().enumerate() {
            if *key == TopologyKey::Hostname {
                tree_for(&mut sel_tree[*s as usize]);
                tree_for(&mut anti_tree[a]);
            }
        }
        for &s in &u.hostname_affinity {
            tree_for(&mut sel_tree[s as usize]);
        }
        Self {
            u,
            profiles: Rc::default(),
            n_sels,
            n_antis,
            n_filters,
            zone_names: Vec::new(),
            zone_at: HashMap::default(),
            bin_zone: Vec::new(),
            present: Vec::new(),
            bin_count: Vec::new(),
            carrier_bin: Vec::new(),
            filter_ok: Vec::new(),
            bin_pods: Vec::new(),
            zone_all: Vec::new(),
            carrier_zone: Vec::new(),
            total_present: vec![0; n_sels],
            total_zoned: vec![0; n_sels],
            trackers,
            sel_tree,
            anti_tree,
            trees: vec![CountTree::default(); n_trees as usize],
        }
    }

    fn zone_id(&mut self, labels: &BTreeMap<String, String>) -> u32 {
        let Some(z) = labels.get(keys::LABEL_TOPOLOGY_ZONE) else {
            return NONE;
        };
        if let Some(&id) = self.zone_at.get(z) {
            return id;
        }
        let id = self.zone_names.len() as u32;
        self.zone_names.push(z.clone());
        self.zone_at.insert(z.clone(), id);
        self.zone_all.push(vec![0; self.n_sels]);
        self.carrier_zone.push(vec![0; self.n_antis]);
        id
    }

    /// The zone id of a label set without interning: `Some(NONE)` without a zone label,
    /// `None` for a zone no bin has yet.
    pub(crate) fn known_zone(&self, labels: &BTreeMap<String, String>) -> Option<u32> {
        match labels.get(keys::LABEL_TOPOLOGY_ZONE) {
            None => Some(NONE),
            Some(z) => self.zone_at.get(z).copied(),
        }
    }

    /// The profile of `pod` (memoised by namespace, labels and anti-affinity terms).
    pub(crate) fn profile(&self, pod: &Pod) -> u32 {
        let mut h = Fx::default();
        pod.namespace.hash(&mut h);
        pod.labels.hash(&mut h);
        pod.pod_anti_affinity.hash(&mut h);
        pod.hostname_anti_affinity.hash(&mut h);
        let key = h.finish();
        if let Some(slot) = self.profiles.borrow().by_hash.get(&key)
            && let Some((id, ..)) = slot.iter().find(|(_, ns, labels, anti, host)| {
                *ns == pod.namespace
                    && *labels == pod.labels
                    && *anti == pod.pod_anti_affinity
                    && *host == pod.hostname_anti_affinity
            })
        {
            return *id;
        }
        let profile = Profile {
            matches: (0..self.n_sels as u32)
                .filter(|&s| self.u.sels[s as usize].matches(pod))
                .collect(),
            carries: anti_terms(pod)
                .filter_map(|(def, key)| {
                    let s = self.u.sel_at.get(&def)?;
                    self.u.anti_at.get(&(*s, key)).copied()
                })
                .collect(),
        };
        let mut table = self.profiles.borrow_mut();
        let id = table.list.len() as u32;
        table.list.push(profile);
        table.by_hash.entry(key).or_default().push((
            id,
            pod.namespace.clone(),
            pod.labels.clone(),
            pod.pod_anti_affinity.clone(),
            pod.hostname_anti_affinity.clone(),
        ));
        id
    }

    /// Whether no placement made so far depends on where a pod of `profile` is: it matches no
    /// required-affinity or `DoNotSchedule` spread selector (only such pods may be moved or
    /// preempted; docs/scheduling.md §2).
    pub(crate) fn is_free(&self, profile: u32) -> bool {
        self.profiles
            .borrow()
            .list
            .get(profile as usize)
            .is_none_or(|p| {
                p.matches
                    .iter()
                    .all(|&s| !self.u.depended.get(s as usize).copied().unwrap_or(false))
            })
    }

    /// What pods like `pod` check and add.
    pub(crate) fn class_topo(&self, pod: &Pod) -> ClassTopo {
        let u = &self.u;
        let ns = pod.namespace.as_str();
        let mut ct = ClassTopo {
            profile: self.profile(pod),
            ..ClassTopo::default()
        };
        let missing = std::cell::Cell::new(!pod.unmodelled_constraints.is_empty());
        let sel_of = |def: SelDef| -> u32 {
            match u.sel_at.get(&def) {
                Some(&s) => s,
                None => {
                    missing.set(true);
                    NONE
                }
            }
        };
        for (def, key) in anti_terms(pod) {
            ct.anti.push((sel_of(def), key));
        }
        if !pod.pod_affinity.is_empty() {
            let mut keys: Vec<TopologyKey> = pod.pod_affinity.iter().map(|t| t.topology).collect();
            keys.sort();
            keys.dedup();
            ct.affinity = Some(Affinity {
                sel: sel_of(affinity_def(pod)),
                keys,
                self_match: pod.pod_affinity.iter().all(|t| t.matches(ns, pod)),
            });
        }
        for w in &pod.preferred_pod_affinity {
            ct.preferred.push((
                sel_of(SelDef::of_term(&w.term, ns)),
                w.term.topology,
                i64::from(w.weight),
            ));
        }
        for w in &pod.preferred_pod_anti_affinity {
            ct.preferred.push((
                sel_of(SelDef::of_term(&w.term, ns)),
                w.term.topology,
                -i64::from(w.weight),
            ));
        }
        let hard_zone = Universe::hard_zone(pod);
        for c in &pod.topology_spread {
            let hard = c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule;
            if !hard && c.topology != TopologyKey::Zone {
                continue;
            }
            let sel = sel_of(spread_def(pod, c.selector.as_ref()));
            let filter = u
                .filter_at
                .get(&Universe::filter_def(
                    pod,
                    if hard { hard_zone } else { true },
                ))
                .copied();
            let tracker = filter.and_then(|f| {
                u.tracker_at
                    .get(&TrackerDef {
                        sel,
                        key: c.topology,
                        filter: f,
                    })
                    .copied()
            });
            let Some(tracker) = tracker else {
                missing.set(true);
                continue;
            };
            let self_match = u32::from(c.matches(ns, pod));
            if hard {
                ct.spread.push(Spread {
                    tracker,
                    key: c.topology,
                    max_skew: c.max_skew,
                    min_domains: c.min_domains.unwrap_or(1),
                    self_match,
                });
            } else {
                ct.soft_zone.push((tracker, self_match));
            }
        }
        ct.repelled_by = u
            .antis
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| u.sels[*s as usize].matches(pod))
            .map(|(a, _)| a as u32)
            .collect();
        ct.needs_zone = hard_zone
            || pod
                .pod_affinity
                .iter()
                .any(|t| t.topology == TopologyKey::Zone);
        ct.impossible = missing.get();
        let zone_level = ct.anti.iter().any(|(_, k)| *k == TopologyKey::Zone)
            || ct
                .repelled_by
                .iter()
                .any(|&a| u.antis[a as usize].1 == TopologyKey::Zone);
        ct.monotone = ct.affinity.is_none() && ct.spread.is_empty() && !zone_level;
        if !ct.impossible {
            for &(s, key) in &ct.anti {
                if key == TopologyKey::Hostname {
                    ct.jumps.push(Jump::None {
                        tree: self.sel_tree[s as usize],
                    });
                }
            }
            for &a in &ct.repelled_by {
                if u.antis[a as usize].1 == TopologyKey::Hostname {
                    ct.jumps.push(Jump::NoCarrier {
                        tree: self.anti_tree[a as usize],
                    });
                }
            }
            if let Some(a) = &ct.affinity
                && a.keys.contains(&TopologyKey::Hostname)
            {
                ct.jumps.push(Jump::Some {
                    tree: self.sel_tree[a.sel as usize],
                });
            }
            for (i, sp) in ct.spread.iter().enumerate() {
                if sp.key == TopologyKey::Hostname {
                    ct.jumps.push(Jump::SpreadAtMost {
                        tree: self.sel_tree[u.trackers[sp.tracker as usize].sel as usize],
                        spread: i as u32,
                    });
                }
            }
            ct.jumps.retain(|j| match j {
                Jump::SpreadAtMost { tree, .. }
                | Jump::None { tree }
                | Jump::NoCarrier { tree }
                | Jump::Some { tree } => *tree != NONE,
            });
        }
        ct.trivial = !ct.impossible
            && !ct.needs_zone
            && ct.anti.is_empty()
            && ct.repelled_by.is_empty()
            && ct.affinity.is_none()
            && ct.spread.is_empty();
        ct
    }

    // --- bins -----------------------------------------------------------------------------

    /// Adds a bin (empty) with `labels`; `present` when it exists as a domain.
    pub(crate) fn push_bin(&mut self, labels: &BTreeMap<String, String>, present: bool) {
        let z = self.zone_id(labels);
        let u = Rc::clone(&self.u);
        self.filter_ok
            .extend(u.filters.iter().map(|f| f.admits(labels)));
        self.push_counts(z, present);
    }

    /// [`TopoState::push_bin`] for a bin whose labels are those of bin `like`: the zone and
    /// the node filters' answers are copied from it instead of read from the labels again.
    pub(crate) fn push_bin_like(&mut self, like: usize, present: bool) {
        let z = self.bin_zone[like];
        let row = like * self.n_filters;
        self.filter_ok.extend_from_within(row..row + self.n_filters);
        self.push_counts(z, present);
    }

    /// The rest of a push, once the new bin's filter answers are recorded: its zone `z` and
    /// empty counts.
    fn push_counts(&mut self, z: u32, present: bool) {
        self.bin_zone.push(z);
        self.present.push(false);
        self.bin_pods.push(0);
        self.bin_count.extend(std::iter::repeat_n(0, self.n_sels));
        self.carrier_bin
            .extend(std::iter::repeat_n(0, self.n_antis));
        for t in &mut self.trees {
            t.push();
        }
        if present {
            let b = self.present.len() - 1;
            self.set_present(b, true);
        }
    }

    /// Removes the last bin (which must hold nothing).
    pub(crate) fn pop_bin(&mut self) {
        let Some(b) = self.present.len().checked_sub(1) else {
            return;
        };
        self.set_present(b, false);
        self.bin_zone.pop();
        self.present.pop();
        self.bin_pods.pop();
        self.bin_count.truncate(b * self.n_sels);
        self.carrier_bin.truncate(b * self.n_antis);
        for t in &mut self.trees {
            t.pop();
        }
        self.filter_ok.truncate(b * self.n_filters);
    }

    fn eligible(&self, t: usize, bin: usize) -> bool {
        let def = self.u.trackers[t];
        self.filter_ok[bin * self.n_filters + def.filter as usize]
            && (def.key == TopologyKey::Hostname || self.bin_zone[bin] != NONE)
    }

    /// Makes `bin` a domain (a node of the cluster) or takes it out, with its pods.
    pub(crate) fn set_present(&mut self, bin: usize, present: bool) {
        if self.present[bin] == present {
            return;
        }
        self.present[bin] = present;
        let z = self.bin_zone[bin];
        let base = bin * self.n_sels;
        let occupied = self.bin_pods[bin] > 0;
        for s in (0..self.n_sels).filter(|_| occupied) {
            let c = self.bin_count[base + s];
            if c == 0 {
                continue;
            }
            if present {
                self.total_present[s] += c;
            } else {
                self.total_present[s] -= c;
            }
            if z != NONE {
                let zc = &mut self.zone_all[z as usize][s];
                if present {
                    *zc += c;
                    self.total_zoned[s] += c;
                } else {
                    *zc -= c;
                    self.total_zoned[s] -= c;
                }
            }
        }
        if z != NONE && occupied {
            for a in 0..self.n_antis {
                let c = self.carrier_bin[bin * self.n_antis + a];
                let zc = &mut self.carrier_zone[z as usize][a];
                if present {
                    *zc += c;
                } else {
                    *zc -= c;
                }
            }
        }
        for t in 0..self.trackers.len() {
            if !self.eligible(t, bin) {
                continue;
            }
            let def = self.u.trackers[t];
            let c = self.bin_count[base + def.sel as usize];
            let st = &mut self.trackers[t];
            match def.key {
                TopologyKey::Zone => {
                    let zi = z as usize;
                    let bins = bump(&mut st.zone_bins, zi);
                    if present {
                        *bins += 1;
                        if *bins == 1 {
                            st.domains += 1;
                        }
                        *bump(&mut st.zone_count, zi) += c;
                    } else {
                        *bins -= 1;
                        if *bins == 0 {
                            st.domains -= 1;
                        }
                        *bump(&mut st.zone_count, zi) -= c;
                    }
                }
                TopologyKey::Hostname => {
                    if present {
                        *bump(&mut st.hist, c as usize) += 1;
                        st.min = if st.domains == 0 { c } else { st.min.min(c) };
                        st.domains += 1;
                    } else {
                        *bump(&mut st.hist, c as usize) -= 1;
                        st.domains -= 1;
                        if st.domains == 0 {
                            st.min = 0;
                        } else if c == st.min && st.hist[c as usize] == 0 {
                            let mut m = c as usize;
                            while m < st.hist.len() && st.hist[m] == 0 {
                                m += 1;
                            }
                            st.min = m as u32;
                        }
                    }
                }
            }
        }
    }

    /// Records a pod of `profile` on `bin` (`add`) or takes it away.
    pub(crate) fn count(&mut self, bin: usize, profile: u32, add: bool) {
        let table = Rc::clone(&self.profiles);
        let table = table.borrow();
        let Some(p) = table.list.get(profile as usize) else {
            return;
        };
        let present = self.present[bin];
        let z = self.bin_zone[bin];
        if add {
            self.bin_pods[bin] += 1;
        } else {
            self.bin_pods[bin] -= 1;
        }
        for &s in &p.matches {
            let k = bin * self.n_sels + s as usize;
            let before = self.bin_count[k];
            let after = if add { before + 1 } else { before - 1 };
            self.bin_count[k] = after;
            let tree = self.sel_tree[s as usize];
            if tree != NONE {
                self.trees[tree as usize].set(bin, after);
            }
            if !present {
                continue;
            }
            let si = s as usize;
            if add {
                self.total_present[si] += 1;
            } else {
                self.total_present[si] -= 1;
            }
            if z != NONE {
                if add {
                    self.zone_all[z as usize][si] += 1;
                    self.total_zoned[si] += 1;
                } else {
                    self.zone_all[z as usize][si] -= 1;
                    self.total_zoned[si] -= 1;
                }
            }
            for &t in &self.u.sel_trackers[si] {
                let t = t as usize;
                if !self.eligible(t, bin) {
                    continue;
                }
                let key = self.u.trackers[t].key;
                let st = &mut self.trackers[t];
                match key {
                    TopologyKey::Zone => {
                        let zc = bump(&mut st.zone_count, z as usize);
                        if add {
                            *zc += 1;
                        } else {
                            *zc -= 1;
                        }
                    }
                    TopologyKey::Hostname => {
                        *bump(&mut st.hist, before as usize) -= 1;
                        *bump(&mut st.hist, after as usize) += 1;
                        if add {
                            if before == st.min && st.hist[before as usize] == 0 {
                                st.min = after;
                            }
                        } else if after < st.min {
                            st.min = after;
                        }
                    }
                }
            }
        }
        for &a in &p.carries {
            let k = bin * self.n_antis + a as usize;
            if add {
                self.carrier_bin[k] += 1;
            } else {
                self.carrier_bin[k] -= 1;
            }
            let tree = self.anti_tree[a as usize];
            if tree != NONE {
                self.trees[tree as usize].set(bin, self.carrier_bin[k]);
            }
            if present && z != NONE {
                let zc = &mut self.carrier_zone[z as usize][a as usize];
                if add {
                    *zc += 1;
                } else {
                    *zc -= 1;
                }
            }
        }
    }

    // --- checks ---------------------------------------------------------------------------

    /// The smallest count over the tracker's eligible domains, 0 when there are fewer than
    /// `min_domains` of them (kube's `minDomains`).
    fn global_min(&self, t: usize, min_domains: u32) -> u32 {
        let st = &self.trackers[t];
        if st.domains < min_domains {
            return 0;
        }
        match self.u.trackers[t].key {
            TopologyKey::Hostname => st.min,
            TopologyKey::Zone => st
                .zone_bins
                .iter()
                .zip(&st.zone_count)
                .filter(|(b, _)| **b > 0)
                .map(|(_, c)| *c)
                .min()
                .unwrap_or(0),
        }
    }

    /// Whether the first-pod exception of required affinity holds: no pod matching all the
    /// terms is on any node with their keys, and the pod matches its own terms.
    fn affinity_exception(&self, a: &Affinity) -> bool {
        if !a.self_match {
            return false;
        }
        let s = a.sel as usize;
        if a.keys.contains(&TopologyKey::Hostname) {
            self.total_present[s] == 0
        } else {
            self.total_zoned[s] == 0
        }
    }

    /// What one search of `ct` needs.
    pub(crate) fn search_ctx(&self, ct: &ClassTopo) -> SearchCtx {
        let mut ctx = SearchCtx::default();
        self.fill_ctx(ct, &mut ctx);
        ctx
    }

    /// [`TopoState::search_ctx`] into `ctx` (reusing its memory).
    pub(crate) fn fill_ctx(&self, ct: &ClassTopo, ctx: &mut SearchCtx) {
        ctx.affinity_exception = ct
            .affinity
            .as_ref()
            .is_some_and(|a| self.affinity_exception(a));
        ctx.limit.clear();
        ctx.limit.extend(ct.spread.iter().map(|sp| {
            i64::from(self.global_min(sp.tracker as usize, sp.min_domains)) + i64::from(sp.max_skew)
                - i64::from(sp.self_match)
        }));
    }

    /// The first bin at or after `bin` that every hostname-key rule of `ct` may accept, and
    /// whether all the bins skipped were refused for good; `None` when no bin from `bin` on
    /// can be accepted (then the bool tells the same about those bins). A leapfrog over the
    /// rules' count trees: each jumps to its first acceptable bin until they agree.
    pub(crate) fn skip(
        &mut self,
        ct: &ClassTopo,
        ctx: &SearchCtx,
        bin: usize,
    ) -> (Option<usize>, bool) {
        let mut at = bin;
        let mut lasting = true;
        loop {
            let mut moved = false;
            for j in &ct.jumps {
                let (next, last) = match *j {
                    Jump::SpreadAtMost { tree, spread } => {
                        let limit = ctx.limit.get(spread as usize).copied().unwrap_or(0);
                        if limit < 0 {
                            return (None, false);
                        }
                        let bound = u32::try_from(limit).unwrap_or(u32::MAX);
                        (self.trees[tree as usize].first(at, bound, false), false)
                    }
                    Jump::None { tree } | Jump::NoCarrier { tree } => {
                        (self.trees[tree as usize].first(at, 0, false), true)
                    }
                    Jump::Some { tree } => {
                        if ctx.affinity_exception {
                            continue;
                        }
                        (self.trees[tree as usize].first(at, 1, true), false)
                    }
                };
                match next {
                    None => return (None, lasting && last),
                    Some(n) if n > at => {
                        at = n;
                        moved = true;
                        lasting &= last;
                    }
                    Some(_) => {}
                }
            }
            if !moved {
                return (Some(at), lasting);
            }
        }
    }

    /// Whether `ct` is trivially fine everywhere (no check needed).
    pub(crate) fn trivial(ct: &ClassTopo) -> bool {
        ct.trivial
    }

    /// Whether a pod of `ct` may land on present bin `bin` by every inter-pod rule.
    pub(crate) fn check(&self, ct: &ClassTopo, ctx: &SearchCtx, bin: usize) -> Result<(), Refusal> {
        if ct.trivial {
            return Ok(());
        }
        if ct.impossible {
            return Err(Refusal::Lasting);
        }
        let z = self.bin_zone[bin];
        if ct.needs_zone && z == NONE {
            return Err(Refusal::Lasting);
        }
        let counts = &self.bin_count[bin * self.n_sels..(bin + 1) * self.n_sels];
        for &(s, key) in &ct.anti {
            match key {
                TopologyKey::Hostname => {
                    if counts[s as usize] > 0 {
                        return Err(Refusal::Lasting);
                    }
                }
                TopologyKey::Zone => {
                    if z != NONE && self.zone_all[z as usize][s as usize] > 0 {
                        return Err(Refusal::ForNow);
                    }
                }
            }
        }
        for &a in &ct.repelled_by {
            match self.u.antis[a as usize].1 {
                TopologyKey::Hostname => {
                    if self.carrier_bin[bin * self.n_antis + a as usize] > 0 {
                        return Err(Refusal::Lasting);
                    }
                }
                TopologyKey::Zone => {
                    if z != NONE && self.carrier_zone[z as usize][a as usize] > 0 {
                        return Err(Refusal::ForNow);
                    }
                }
            }
        }
        if let Some(a) = &ct.affinity
            && !ctx.affinity_exception
        {
            for key in &a.keys {
                let have = match key {
                    TopologyKey::Hostname => counts[a.sel as usize],
                    TopologyKey::Zone => self.zone_all[z as usize][a.sel as usize],
                };
                if have == 0 {
                    return Err(Refusal::ForNow);
                }
            }
        }
        for (sp, &limit) in ct.spread.iter().zip(&ctx.limit) {
            let t = sp.tracker as usize;
            let count = match sp.key {
                TopologyKey::Hostname => counts[self.u.trackers[t].sel as usize],
                TopologyKey::Zone => self.trackers[t]
                    .zone_count
                    .get(z as usize)
                    .copied()
                    .unwrap_or(0),
            };
            if i64::from(count) > limit {
                return Err(Refusal::ForNow);
            }
        }
        Ok(())
    }

    /// Whether a pod of `ct` may land on a new, empty node in `zone` (numbered as
    /// [`TopoState::known_zone`] numbers it; a planned node of a group's template): the same
    /// rules as [`TopoState::check`] with the node added as a domain of its own.
    pub(crate) fn fits_fresh_in(&self, ct: &ClassTopo, zone: Option<u32>) -> bool {
        if ct.trivial {
            return true;
        }
        if ct.impossible {
            return false;
        }
        // A zone no bin has yet counts nothing anywhere.
        let Some(z) = zone else {
            return (ct.affinity.is_none() || self.fresh_affinity_exception(ct))
                && ct.spread.iter().all(|sp| sp.self_match <= sp.max_skew);
        };
        if ct.needs_zone && z == NONE {
            return false;
        }
        let zi = z as usize;
        for &(s, key) in &ct.anti {
            if key == TopologyKey::Zone && z != NONE && self.zone_all[zi][s as usize] > 0 {
                return false;
            }
        }
        for &a in &ct.repelled_by {
            if self.u.antis[a as usize].1 == TopologyKey::Zone
                && z != NONE
                && self.carrier_zone[zi][a as usize] > 0
            {
                return false;
            }
        }
        if let Some(a) = &ct.affinity
            && !self.affinity_exception(a)
        {
            for key in &a.keys {
                let have = match key {
                    TopologyKey::Hostname => 0,
                    TopologyKey::Zone => self.zone_all[zi][a.sel as usize],
                };
                if have == 0 {
                    return false;
                }
            }
        }
        for sp in &ct.spread {
            let t = sp.tracker as usize;
            let st = &self.trackers[t];
            let (count, new_domain) = match sp.key {
                TopologyKey::Hostname => (0, true),
                TopologyKey::Zone => (
                    st.zone_count.get(zi).copied().unwrap_or(0),
                    st.zone_bins.get(zi).copied().unwrap_or(0) == 0,
                ),
            };
            let domains = st.domains + u32::from(new_domain);
            let min = if domains < sp.min_domains || new_domain {
                0
            } else {
                self.global_min(t, 0)
            };
            if i64::from(count) + i64::from(sp.self_match) - i64::from(min) > i64::from(sp.max_skew)
            {
                return false;
            }
        }
        true
    }

    fn fresh_affinity_exception(&self, ct: &ClassTopo) -> bool {
        ct.affinity
            .as_ref()
            .is_some_and(|a| self.affinity_exception(a))
    }

    /// How much pods of `ct` prefer a new node in the zone of `labels`: the summed weights of
    /// preferred zone affinity terms matched minus preferred zone anti-affinity terms matched,
    /// and the summed counts of their `ScheduleAnyway` zone constraints there (lower is better).
    pub(crate) fn zone_preference(&self, ct: &ClassTopo, zone: Option<u32>) -> (i64, i64) {
        if ct.preferred.is_empty() && ct.soft_zone.is_empty() {
            return (0, 0);
        }
        let Some(z) = zone.filter(|&z| z != NONE) else {
            return (0, 0);
        };
        let zi = z as usize;
        let score = ct
            .preferred
            .iter()
            .filter(|(s, key, _)| *key == TopologyKey::Zone && self.zone_all[zi][*s as usize] > 0)
            .map(|(_, _, w)| *w)
            .sum();
        let soft = ct
            .soft_zone
            .iter()
            .map(|&(t, self_match)| {
                i64::from(
                    self.trackers[t as usize]
                        .zone_count
                        .get(zi)
                        .copied()
                        .unwrap_or(0),
                ) + i64::from(self_match)
            })
            .sum();
        (score, soft)
    }

    /// The profile id of a class.
    pub(crate) fn class_profile(ct: &ClassTopo) -> u32 {
        ct.profile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        Node, PodPhase, Quantity, TopologySpreadConstraint, WeightedPodAffinityTerm,
    };
    use crate::scaling::placement::{Bins, Misfit, Placer, ResourceIndex, classify, static_fits};
    use crate::scaling::reference::Cluster;
    use proptest::prelude::*;

    const APPS: [&str; 3] = ["x", "y", "z"];

    fn sel(app: usize) -> Option<LabelSelector> {
        Some(LabelSelector {
            match_labels: Some([("app".to_string(), APPS[app % 3].to_string())].into()),
            match_expressions: None,
        })
    }

    fn key(zone: bool) -> TopologyKey {
        if zone {
            TopologyKey::Zone
        } else {
            TopologyKey::Hostname
        }
    }

    type NodeSpec = (usize, bool, bool, i64, i64);

    fn arb_node() -> impl Strategy<Value = NodeSpec> {
        (
            0usize..4,
            any::<bool>(),
            prop::bool::weighted(0.85),
            1000i64..6000,
            2i64..9,
        )
    }

    fn make_node(i: usize, (zone, pool, ready, cpu, pods): NodeSpec) -> Node {
        let mut n = Node {
            name: format!("n{i}"),
            ready,
            allocatable: [
                ("cpu".to_string(), Quantity(cpu)),
                ("memory".to_string(), Quantity::units(64 << 30)),
                ("pods".to_string(), Quantity::units(pods)),
            ]
            .into(),
            ..Node::default()
        };
        n.labels.insert(keys::LABEL_HOSTNAME.into(), n.name.clone());
        if zone < 3 {
            n.labels.insert(
                keys::LABEL_TOPOLOGY_ZONE.into(),
                ["a", "b", "c"][zone].into(),
            );
        }
        n.labels
            .insert("pool".into(), if pool { "p" } else { "q" }.into());
        n
    }

    /// (app, cpu, spread, affinity, anti, hostname anti, pool selector, preferred)
    type PodSpec = (
        usize,
        i64,
        Option<(bool, u32, bool, usize, Option<u32>)>,
        Option<(bool, usize)>,
        Option<(bool, usize)>,
        bool,
        Option<bool>,
        Option<(bool, usize, bool)>,
    );

    fn arb_pod() -> impl Strategy<Value = PodSpec> {
        (
            0usize..3,
            50i64..1500,
            prop::option::weighted(
                0.5,
                (
                    any::<bool>(),
                    1u32..3,
                    prop::bool::weighted(0.8),
                    0usize..3,
                    prop::option::weighted(0.3, 2u32..4),
                ),
            ),
            prop::option::weighted(0.3, (any::<bool>(), 0usize..3)),
            prop::option::weighted(0.3, (any::<bool>(), 0usize..3)),
            prop::bool::weighted(0.1),
            prop::option::weighted(0.2, any::<bool>()),
            prop::option::weighted(0.2, (any::<bool>(), 0usize..3, any::<bool>())),
        )
    }

    fn make_pod(i: usize, spec: PodSpec) -> Pod {
        let (app, cpu, spread, affinity, anti, host_anti, pool, preferred) = spec;
        let mut p = Pod {
            namespace: "ns".into(),
            name: format!("p{i:02}"),
            requests: [
                ("cpu".to_string(), Quantity(cpu)),
                ("memory".to_string(), Quantity::units(1 << 20)),
            ]
            .into(),
            phase: PodPhase::Pending,
            ..Pod::default()
        };
        p.labels.insert("app".into(), APPS[app].into());
        if let Some((zone, skew, hard, s, min_domains)) = spread {
            p.topology_spread.push(TopologySpreadConstraint {
                max_skew: skew,
                topology: key(zone),
                when_unsatisfiable: if hard {
                    WhenUnsatisfiable::DoNotSchedule
                } else {
                    WhenUnsatisfiable::ScheduleAnyway
                },
                selector: sel(s),
                min_domains: if hard { min_domains } else { None },
            });
        }
        if let Some((zone, s)) = affinity {
            p.pod_affinity.push(PodAffinityTerm {
                selector: sel(s),
                namespaces: NamespaceScope::Own,
                topology: key(zone),
            });
        }
        if let Some((zone, s)) = anti {
            p.pod_anti_affinity.push(PodAffinityTerm {
                selector: sel(s),
                namespaces: NamespaceScope::Own,
                topology: key(zone),
            });
        }
        if host_anti {
            p.hostname_anti_affinity = sel(app).into_iter().collect();
        }
        if let Some(pool) = pool {
            p.node_selector
                .insert("pool".into(), if pool { "p" } else { "q" }.into());
        }
        if let Some((zone, s, anti)) = preferred {
            let w = WeightedPodAffinityTerm {
                weight: 10,
                term: PodAffinityTerm {
                    selector: sel(s),
                    namespaces: NamespaceScope::Own,
                    topology: key(zone),
                },
            };
            if anti {
                p.preferred_pod_anti_affinity.push(w);
            } else {
                p.preferred_pod_affinity.push(w);
            }
        }
        p
    }

    fn fresh_labels(zone: usize) -> BTreeMap<String, String> {
        let mut l: BTreeMap<String, String> = [("pool".to_string(), "p".to_string())].into();
        l.insert(keys::LABEL_HOSTNAME.into(), "fresh".into());
        if zone < 4 {
            l.insert(
                keys::LABEL_TOPOLOGY_ZONE.into(),
                ["a", "b", "c", "d"][zone].into(),
            );
        }
        l
    }

    fn big_node(labels: &BTreeMap<String, String>) -> Node {
        Node {
            name: "fresh".into(),
            ready: true,
            labels: labels.clone().into(),
            allocatable: [
                ("cpu".to_string(), Quantity::units(1000)),
                ("memory".to_string(), Quantity::units(1 << 40)),
                ("pods".to_string(), Quantity::units(1000)),
            ]
            .into(),
            ..Node::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Interleaved count changes (up and down), pushes, pops and searches both ways: every
        /// search answers what a linear scan of the counts does, and every inner node's bounds
        /// hold its children's, however stale the lazily kept ones are.
        #[test]
        fn count_tree_searches_stay_exact_with_lazy_bounds(
            ops in prop::collection::vec((0u8..4, 0usize..70, 0u32..4, any::<bool>()), 1..120),
        ) {
            let mut t = CountTree::default();
            let mut v: Vec<u32> = Vec::new();
            for (op, i, x, above) in ops {
                match op {
                    0 if i < v.len() => {
                        t.set(i, x);
                        v[i] = x;
                    }
                    1 => {
                        t.push();
                        v.push(0);
                    }
                    2 => {
                        t.pop();
                        v.pop();
                    }
                    _ => {
                        let expected = (i..v.len())
                            .find(|&b| if above { v[b] >= x } else { v[b] <= x });
                        prop_assert_eq!(t.first(i, x, above), expected);
                    }
                }
                for n in 1..t.cap {
                    prop_assert!(t.min[n] <= t.min[2 * n].min(t.min[2 * n + 1]));
                    prop_assert!(t.max[n] >= t.max[2 * n].max(t.max[2 * n + 1]));
                }
            }
        }


        /// The engine agrees with the reference (docs/scheduling.md §4): pods placed one by one
        /// in the engine's order (classes first-fit decreasing, members by name), each goes to
        /// the lowest-numbered node the reference accepts given the pods placed before it (and
        /// none when it accepts none), with pre-bound pods carrying constraints, nodes that
        /// take no pods but count as domains, and a node taken out half-way; and at every step
        /// the engine's verdict on a new empty node in each zone equals the reference's.
        #[test]
        fn engine_agrees_with_reference_greedy(
            node_specs in prop::collection::vec(arb_node(), 1..7),
            bound_specs in prop::collection::vec((arb_pod(), 0usize..7), 0..6),
            pod_specs in prop::collection::vec(arb_pod(), 1..28),
            out_at in 0usize..40,
            out_node in 0usize..7,
        ) {
            let nodes: Vec<Node> = node_specs.into_iter().enumerate().map(|(i, s)| make_node(i, s)).collect();
            let mut all: Vec<Pod> = Vec::new();
            for (k, (spec, at)) in bound_specs.into_iter().enumerate() {
                let mut p = make_pod(100 + k, spec);
                p.name = format!("bound{k}");
                p.node_name = Some(nodes[at % nodes.len()].name.clone());
                p.phase = PodPhase::Running;
                all.push(p);
            }
            let first_pending = all.len();
            for (i, spec) in pod_specs.into_iter().enumerate() {
                all.push(make_pod(i, spec));
            }
            let mut ub = UniverseBuilder::default();
            for p in &all {
                if p.node_name.is_some() { ub.bound(p) } else { ub.place(p) }
            }
            let index = ResourceIndex::from_pods(&all);
            let mut bins = Bins::with_topology(index.len(), true, ub.build());
            let mut cluster = Cluster::new();
            for n in &nodes {
                bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), n.ready);
                cluster.add_node(n.clone(), n.ready);
            }
            for p in &all[..first_pending] {
                let b = nodes.iter().position(|n| Some(&n.name) == p.node_name.as_ref()).unwrap();
                let d = index.demand(p);
                bins.occupy_all(b, [p], d.core, &vec![0; index.len()]);
                cluster.bind(b, p);
            }
            let classes = classify(&all, first_pending..all.len(), &index);
            let mut placer = Placer::new(bins, classes.len());
            let mut step = 0;
            for (c, class) in classes.iter().enumerate() {
                for &m in &class.members {
                    if step == out_at && out_node < nodes.len() && nodes[out_node].ready {
                        placer.disable(out_node);
                        cluster.remove_node(out_node);
                    }
                    step += 1;
                    let p = &all[m];
                    for z in 0..5 {
                        let labels = fresh_labels(z);
                        if !static_fits(p, &labels, &[]) {
                            continue;
                        }
                        let mut cl = cluster.clone();
                        let i = cl.add_node(big_node(&labels), true);
                        let expected = cl.check(p, i).is_ok();
                        prop_assert_eq!(placer.fits_fresh(c, p, &labels), expected, "fresh node in zone {} for {}", z, p.name);
                    }
                    let expected = (0..nodes.len()).find(|&i| cluster.check(p, i).is_ok());
                    let got = placer.place(c, p, &class.demand, false).map(|x| x.bin);
                    prop_assert_eq!(got, expected, "pod {} ({:?})", &p.name, expected.map(|i| cluster.check(p, i)));
                    if let Some(b) = got {
                        cluster.bind(b, p);
                    }
                }
            }
        }
    }

    /// Guards `engine_agrees_with_reference_greedy` against passing vacuously: refusals by
    /// each rule happen in worlds like its own.
    #[test]
    fn reference_refuses_for_every_reason() {
        let mut nodes = Vec::new();
        for i in 0..4 {
            nodes.push(make_node(i, (i % 3, true, true, 8000, 20)));
        }
        let mut cluster = Cluster::new();
        for n in &nodes {
            cluster.add_node(n.clone(), true);
        }
        let x = make_pod(0, (0, 100, None, None, None, false, None, None));
        let spread = make_pod(
            1,
            (
                0,
                100,
                Some((true, 1, true, 0, None)),
                None,
                None,
                false,
                None,
                None,
            ),
        );
        let affine = make_pod(2, (1, 100, None, Some((false, 2)), None, false, None, None));
        let anti = make_pod(3, (1, 100, None, None, Some((true, 0)), false, None, None));
        cluster.bind(0, &x);
        // Zone a has one x, zones b and c none: spreading x again into zone a makes skew 2.
        assert!(matches!(
            cluster.check(&spread, 0),
            Err(Misfit::TopologySpread { .. })
        ));
        assert!(cluster.check(&spread, 1).is_ok());
        // Nobody labelled z runs anywhere, and the pod is not z: no first-pod exception.
        assert_eq!(cluster.check(&affine, 0), Err(Misfit::PodAffinity));
        // Anti-affinity on the zone: node 3 shares zone a with node 0.
        assert!(matches!(
            cluster.check(&anti, 3),
            Err(Misfit::AntiAffinity { .. })
        ));
        assert!(cluster.check(&anti, 1).is_ok());
    }
}
