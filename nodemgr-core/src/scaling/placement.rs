//! The scheduling simulation every scaling decision rests on: whether a pod fits a node, and a
//! fast first-fit engine that packs many pods onto many nodes (existing, ordered, or imagined
//! from a group's template).
//!
//! # What a fit means (kube-scheduler's filters, as far as nodemgr models them)
//! * **Node condition**: the node is Ready and schedulable (not cordoned).
//! * **Resources**: for every resource the pod requests (`cpu`, `memory`, extended resources
//!   such as `nvidia.com/gpu`, `hugepages-*`, and `ephemeral-storage`), the node's allocatable
//!   minus the requests of the non-finished pods already bound to it covers the request; one pod
//!   slot of `pods` is always needed. A resource missing from the node's allocatable is 0 for
//!   extended resources (a name with a `/` outside `kubernetes.io/`, or `hugepages-*`) and
//!   unlimited for the others (as the scheduler ignores `ephemeral-storage` a node does not
//!   report).
//! * **nodeSelector**: every pair is a node label.
//! * **Required node affinity**: some term has all its `matchExpressions` true
//!   (`In`/`NotIn`/`Exists`/`DoesNotExist`); an empty term matches nothing.
//! * **Taints**: every `NoSchedule` and `NoExecute` taint is tolerated; `PreferNoSchedule` is
//!   ignored.
//! * **Hostname pod anti-affinity** (required, `kubernetes.io/hostname` topology, the pod's own
//!   namespace): no pod on the node matches one of the pod's selectors, and no pod on the node
//!   has a selector matching the pod (the scheduler enforces existing pods' anti-affinity too).
//! * **Topology spread, pod affinity and the other anti-affinity terms** on the hostname and zone
//!   keys (docs/scheduling.md §1): these depend on the whole cluster, not one node, so
//!   [`check_fit`] does not read them; [`super::reference::Cluster::check`] adds them to it, and
//!   the engine evaluates them with incremental counters (`scaling::topology`).
//!
//! Not modelled: volume topology, host ports, and preemption of anything but standby-holder
//! pods.
//!
//! [`check_fit`] is the plain reading of the node-local rules over model objects; the engine
//! (`Bins`, `Placer`) computes the same answer fast (resource vectors in a max-tree, pods
//! grouped into equivalence classes, per-class first-fit cursors) and properties keep the two,
//! and the topology rules against the reference, in agreement.
//!
//! First-fit cursors skip a bin for a class only when the refusal lasts (room only shrinks in
//! one simulation, node labels never change, hostname anti-affinity only grows); a refusal by
//! pod affinity, topology spread or zone-level anti-affinity may lift as other pods land, so the
//! cursor stops there (docs/scheduling.md §2).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use crate::model::{Node, Pod, Quantity, Resources, Taint, TaintEffect, keys};

use super::topology::{ClassTopo, Refusal, SearchCtx, TopoState, Universe};
use crate::hash::{FastHash, Fx};

/// Why a pod does not fit a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// The node is not Ready.
    NotReady,
    /// The node is cordoned.
    Cordoned,
    /// A `nodeSelector` pair is not a label of the node.
    NodeSelector {
        /// The label key.
        key: String,
    },
    /// No term of the required node affinity matches the node's labels.
    NodeAffinity,
    /// A `NoSchedule`/`NoExecute` taint the pod does not tolerate.
    Taint {
        /// The taint's key.
        key: String,
    },
    /// Not enough of a resource left.
    Resource {
        /// The resource (`cpu`, `memory`, `pods`, `nvidia.com/gpu`, …).
        name: String,
        /// What the pod requests.
        requested: Quantity,
        /// What the node has left.
        free: Quantity,
    },
    /// A pod in the domain excludes this one by anti-affinity, or the other way round.
    AntiAffinity {
        /// The other pod, `namespace/name`.
        pod: String,
    },
    /// No pod matching the required pod affinity runs in the node's domain.
    PodAffinity,
    /// Placing the pod would make a `DoNotSchedule` spread constraint's skew too large.
    TopologySpread {
        /// The topology key.
        key: String,
        /// The skew the placement would make.
        skew: i64,
        /// `maxSkew`.
        max_skew: u32,
    },
    /// The node lacks the label of a topology key the pod's constraints need.
    MissingTopology {
        /// The label key.
        key: String,
    },
    /// The pod carries a required constraint nodemgr does not model.
    Unmodelled {
        /// Its description.
        what: String,
    },
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotReady => f.write_str("node is not Ready"),
            Self::Cordoned => f.write_str("node is cordoned"),
            Self::NodeSelector { key } => write!(f, "nodeSelector {key} does not match"),
            Self::NodeAffinity => f.write_str("required node affinity does not match"),
            Self::Taint { key } => write!(f, "taint {key} is not tolerated"),
            Self::Resource {
                name,
                requested,
                free,
            } => write!(
                f,
                "insufficient {name}: requests {} (milli-units), {} free",
                requested.0, free.0
            ),
            Self::AntiAffinity { pod } => write!(f, "pod anti-affinity with pod {pod}"),
            Self::PodAffinity => f.write_str("no pod matching the required pod affinity nearby"),
            Self::TopologySpread {
                key,
                skew,
                max_skew,
            } => write!(
                f,
                "topology spread on {key}: skew {skew} > maxSkew {max_skew}"
            ),
            Self::MissingTopology { key } => write!(f, "node has no {key} label"),
            Self::Unmodelled { what } => write!(f, "unmodelled constraint: {what}"),
        }
    }
}

/// Whether a resource missing from a node's allocatable counts as 0 (extended resources) rather
/// than unlimited.
pub fn is_extended_resource(name: &str) -> bool {
    name.starts_with("hugepages-") || (name.contains('/') && !name.starts_with("kubernetes.io/"))
}

/// The node-level (label and taint) part of a fit: nodeSelector, required node affinity and
/// taints.
///
/// # Errors
/// The first rule that fails.
pub fn check_static(
    pod: &Pod,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> Result<(), Misfit> {
    for (k, v) in &pod.node_selector {
        if labels.get(k) != Some(v) {
            return Err(Misfit::NodeSelector { key: k.clone() });
        }
    }
    if !pod.required_node_affinity.is_empty()
        && !pod
            .required_node_affinity
            .iter()
            .any(|term| !term.is_empty() && term.iter().all(|req| req.matches(labels)))
    {
        return Err(Misfit::NodeAffinity);
    }
    for t in taints {
        if matches!(t.effect, Some(TaintEffect::PreferNoSchedule)) {
            continue;
        }
        if !pod.tolerations.iter().any(|tol| tol.tolerates(t)) {
            return Err(Misfit::Taint { key: t.key.clone() });
        }
    }
    Ok(())
}

/// Whether `pod` passes the node-level rules of a node with `labels` and `taints`: the same
/// answer as [`check_static`], without building the reason.
pub fn static_fits(pod: &Pod, labels: &BTreeMap<String, String>, taints: &[Taint]) -> bool {
    pod.node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        && (pod.required_node_affinity.is_empty()
            || pod
                .required_node_affinity
                .iter()
                .any(|term| !term.is_empty() && term.iter().all(|req| req.matches(labels))))
        && taints.iter().all(|t| {
            matches!(t.effect, Some(TaintEffect::PreferNoSchedule))
                || pod.tolerations.iter().any(|tol| tol.tolerates(t))
        })
}

/// Whether `demand` fits an empty node of capacity `cap` (as [`ResourceIndex::capacity`]
/// gives it).
pub(crate) fn fits_empty(demand: &Demand, cap: &([i64; 3], Vec<i64>)) -> bool {
    covers(&cap.0, &demand.core)
        && demand
            .ext
            .iter()
            .all(|&(i, v)| cap.1.get(i as usize).is_some_and(|&c| c >= v))
}

/// Whether `pod` and `other` exclude each other by hostname anti-affinity.
pub fn anti_affine(pod: &Pod, other: &Pod) -> bool {
    pod.namespace == other.namespace
        && (pod
            .hostname_anti_affinity
            .iter()
            .any(|s| s.matches(&other.labels))
            || other
                .hostname_anti_affinity
                .iter()
                .any(|s| s.matches(&pod.labels)))
}

/// Whether `pod` fits `node`, which already runs `pods_on_node` (finished pods are ignored),
/// by every rule in the module docs. This is the reference reading; the planners use a faster
/// engine that agrees with it.
///
/// # Errors
/// The first rule that fails.
pub fn check_fit(pod: &Pod, node: &Node, pods_on_node: &[&Pod]) -> Result<(), Misfit> {
    if !node.ready {
        return Err(Misfit::NotReady);
    }
    if node.unschedulable {
        return Err(Misfit::Cordoned);
    }
    check_static(pod, &node.labels, &node.taints)?;
    let live: Vec<&Pod> = pods_on_node
        .iter()
        .copied()
        .filter(|p| !p.is_terminal())
        .collect();
    let mut wanted: Resources = pod
        .requests
        .iter()
        .filter(|(k, q)| k.as_str() != "pods" && q.0 > 0)
        .map(|(k, q)| (k.clone(), *q))
        .collect();
    wanted.insert("pods".into(), Quantity::units(1));
    for (name, requested) in &wanted {
        let used: Quantity = if name == "pods" {
            Quantity::units(live.len() as i64)
        } else {
            live.iter()
                .filter_map(|p| p.requests.get(name))
                .fold(Quantity::ZERO, |a, b| a + *b)
        };
        let Some(alloc) =
            node.allocatable.get(name).copied().or_else(|| {
                (name == "pods" || is_extended_resource(name)).then_some(Quantity::ZERO)
            })
        else {
            continue;
        };
        let free = alloc - used;
        if free < *requested {
            return Err(Misfit::Resource {
                name: name.clone(),
                requested: *requested,
                free,
            });
        }
    }
    if let Some(other) = live.iter().find(|o| anti_affine(pod, o)) {
        return Err(Misfit::AntiAffinity { pod: other.key() });
    }
    Ok(())
}

/// Whether `pod` is a standby-holder pod (priority class `standby`, or label
/// `app=standby-holder`): the only pods the simulation preempts.
pub fn is_standby_holder(pod: &Pod) -> bool {
    pod.priority_class.as_deref() == Some(keys::STANDBY_PRIORITY_CLASS)
        || pod.labels.get("app").map(String::as_str) == Some(keys::STANDBY_HOLDER_APP)
}

// ---------------------------------------------------------------------------------------------
// The engine.

/// Index of CPU in a core resource vector.
pub(crate) const CPU: usize = 0;
/// Index of memory in a core resource vector.
pub(crate) const MEMORY: usize = 1;
/// Index of the pod count in a core resource vector.
pub(crate) const PODS: usize = 2;
/// Milli-units of one pod slot.
pub(crate) const ONE_POD: i64 = 1000;
/// "Unlimited" for resources a node does not report (far from overflow when summed).
const UNLIMITED: i64 = i64::MAX / 4;

/// Resource names beyond cpu, memory and pods, numbered.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResourceIndex {
    names: Vec<String>,
    by_name: HashMap<String, u32, FastHash>,
}

impl ResourceIndex {
    /// Numbers every extra resource `pods` request.
    #[cfg(test)]
    pub(crate) fn from_pods<'p>(pods: impl IntoIterator<Item = &'p Pod>) -> Self {
        let mut index = Self::default();
        for p in pods {
            for name in p.requests.keys() {
                if !matches!(name.as_str(), "cpu" | "memory" | "pods")
                    && !index.by_name.contains_key(name)
                {
                    index.by_name.insert(name.clone(), index.names.len() as u32);
                    index.names.push(name.clone());
                }
            }
        }
        index
    }

    pub(crate) fn len(&self) -> usize {
        self.names.len()
    }

    /// The capacity vector of an allocatable map.
    pub(crate) fn capacity(&self, allocatable: &Resources) -> ([i64; 3], Vec<i64>) {
        let get = |k: &str| allocatable.get(k).map_or(0, |q| q.0);
        let core = [get("cpu"), get("memory"), get("pods")];
        let ext = self
            .names
            .iter()
            .map(|n| {
                allocatable.get(n).map_or(
                    if is_extended_resource(n) {
                        0
                    } else {
                        UNLIMITED
                    },
                    |q| q.0,
                )
            })
            .collect();
        (core, ext)
    }

    /// The demand of a pod, numbering the extra resources it requests that are new: one pass
    /// instead of [`ResourceIndex::from_pods`] then [`ResourceIndex::demand`].
    pub(crate) fn demand_indexing(&mut self, pod: &Pod) -> Demand {
        let mut d = Demand {
            core: [0, 0, ONE_POD],
            ext: Vec::new(),
        };
        for (name, q) in &pod.requests {
            match name.as_str() {
                "cpu" => d.core[CPU] = q.0.max(0),
                "memory" => d.core[MEMORY] = q.0.max(0),
                "pods" => {}
                other => {
                    if q.0 > 0 {
                        let i = match self.by_name.get(other) {
                            Some(&i) => i,
                            None => {
                                let i = self.names.len() as u32;
                                self.by_name.insert(other.to_owned(), i);
                                self.names.push(other.to_owned());
                                i
                            }
                        };
                        d.ext.push((i, q.0));
                    }
                }
            }
        }
        d
    }

    /// The demand of a pod (names it requests must have been indexed).
    pub(crate) fn demand(&self, pod: &Pod) -> Demand {
        let mut core = [0; 3];
        core[PODS] = ONE_POD;
        let mut d = Demand {
            core,
            ext: Vec::new(),
        };
        for (name, q) in &pod.requests {
            match name.as_str() {
                "cpu" => d.core[CPU] = q.0.max(0),
                "memory" => d.core[MEMORY] = q.0.max(0),
                "pods" => {}
                other => {
                    if let Some(&i) = self.by_name.get(other)
                        && q.0 > 0
                    {
                        d.ext.push((i, q.0));
                    }
                }
            }
        }
        d
    }
}

/// What a pod takes from a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub(crate) struct Demand {
    /// cpu, memory, pods (milli-units).
    pub(crate) core: [i64; 3],
    /// Extra resources: (index, amount), in index order.
    pub(crate) ext: Vec<(u32, i64)>,
}

/// A first-fit-decreasing order key: pods needing extended resources first, then larger CPU +
/// memory (1 core weighs as 4 GiB), then name.
pub(crate) fn size_score(d: &Demand) -> i128 {
    i128::from(d.core[CPU]) * i128::from(4i64 << 30) + i128::from(d.core[MEMORY])
}

/// A max-tree over bins: each inner node holds the per-dimension maximum of the free
/// (including preemptible) cpu, memory and pods of the bins below, so a first-fit search skips
/// whole ranges that cannot hold a demand.
#[derive(Debug, Clone)]
struct MaxTree {
    cap: usize,
    len: usize,
    vals: Vec<[i64; 3]>,
}

const EMPTY: [i64; 3] = [i64::MIN; 3];

impl MaxTree {
    fn new() -> Self {
        Self {
            cap: 1,
            len: 0,
            vals: vec![EMPTY; 2],
        }
    }

    fn push(&mut self, v: [i64; 3]) {
        if self.len == self.cap {
            let leaves: Vec<[i64; 3]> = self.vals[self.cap..self.cap + self.len].to_vec();
            self.cap *= 2;
            self.vals = vec![EMPTY; 2 * self.cap];
            self.vals[self.cap..self.cap + leaves.len()].copy_from_slice(&leaves);
            for i in (1..self.cap).rev() {
                self.vals[i] = max3(self.vals[2 * i], self.vals[2 * i + 1]);
            }
        }
        let i = self.len;
        self.len += 1;
        self.set(i, v);
    }

    /// Removes the last bin.
    ///
    /// The leaf keeps its value: the tree stays a consistent max-tree over all its leaves,
    /// and [`MaxTree::find`] never answers a leaf at or past `len` (every leaf left of such a
    /// leaf's match failed, and every leaf right of it is past `len` too), so the stale leaf is
    /// never seen; the next push overwrites it.
    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }

    fn set(&mut self, i: usize, v: [i64; 3]) {
        let mut n = self.cap + i;
        self.vals[n] = v;
        while n > 1 {
            n /= 2;
            let m = max3(self.vals[2 * n], self.vals[2 * n + 1]);
            if self.vals[n] == m {
                // Unchanged here, so unchanged above.
                break;
            }
            self.vals[n] = m;
        }
    }

    /// The first bin at or after `start` whose vector covers `need` in every dimension: a
    /// depth-first walk in bin order without recursion, from the leaf `start` up to the first
    /// right sibling that may hold one, then down to its leftmost covering leaf (climbing on
    /// when a subtree's per-dimension maxima cover `need` but none of its leaves does).
    fn find(&self, start: usize, need: &[i64; 3]) -> Option<usize> {
        if start >= self.len {
            return None;
        }
        let mut node = self.cap + start;
        if covers(&self.vals[node], need) {
            return Some(start);
        }
        loop {
            // Up: to the nearest right sibling (of `node` or an ancestor) that may cover.
            loop {
                if node <= 1 {
                    return None;
                }
                if node.is_multiple_of(2) && covers(&self.vals[node + 1], need) {
                    node += 1;
                    break;
                }
                node /= 2;
            }
            // Down: leftmost child that may cover, until a leaf or a dead end.
            while node < self.cap {
                let left = 2 * node;
                if covers(&self.vals[left], need) {
                    node = left;
                } else if covers(&self.vals[left + 1], need) {
                    node = left + 1;
                } else {
                    break;
                }
            }
            if node >= self.cap {
                let i = node - self.cap;
                return (i < self.len).then_some(i);
            }
        }
    }
}

fn max3(a: [i64; 3], b: [i64; 3]) -> [i64; 3] {
    [a[0].max(b[0]), a[1].max(b[1]), a[2].max(b[2])]
}

fn covers(have: &[i64; 3], need: &[i64; 3]) -> bool {
    have[0] >= need[0] && have[1] >= need[1] && have[2] >= need[2]
}

/// A standby-holder pod occupying part of a bin, preemptible by real pods.
#[derive(Debug, Clone)]
pub(crate) struct Held<'a> {
    pub(crate) pod: &'a Pod,
    pub(crate) demand: Demand,
}

/// The topology profile id meaning "look it up from the pod".
const LOOKUP: u32 = u32::MAX;

/// The bins (nodes) of one simulation and what is left on them.
#[derive(Debug, Clone)]
pub(crate) struct Bins<'a> {
    n_ext: usize,
    labels: Vec<&'a BTreeMap<String, String>>,
    taints: Vec<&'a [Taint]>,
    enabled: Vec<bool>,
    free: Vec<[i64; 3]>,
    free_ext: Vec<i64>,
    held: Vec<[i64; 3]>,
    held_ext: Vec<i64>,
    holders: BTreeMap<usize, Vec<Held<'a>>>,
    /// Every pod on each bin, kept only when some pod to place has anti-affinity terms.
    pods: Vec<Vec<&'a Pod>>,
    /// Pods with anti-affinity terms on each bin (always kept).
    anti_pods: Vec<Vec<&'a Pod>>,
    track_all_pods: bool,
    tree: MaxTree,
    /// Static signature of each bin: bins with the same labels (but for the hostname) and
    /// taints share one, so a pod's node-level rules are evaluated once per signature.
    sig: Vec<u32>,
    /// Run of each bin: consecutive bins with the same signature; `run_end[run]` is one past
    /// its last bin. A search skips a whole run once one bin of it fails the static rules.
    run: Vec<u32>,
    run_end: Vec<usize>,
    sigs: Rc<RefCell<SigTable<'a>>>,
    /// A bin pushed with each label set (by address), shared by clones: a new bin with the
    /// same labels copies its zone and node-filter answers (checked to be the same labels
    /// still, so a stale entry is only a miss).
    like: Rc<RefCell<HashMap<usize, usize, FastHash>>>,
    /// Topology spread and pod (anti-)affinity counters, when some pod has such constraints.
    topo: Option<TopoState>,
}

/// A signature with the labels and taints it stands for.
type Interned<'a> = (u32, &'a BTreeMap<String, String>, &'a [Taint]);

/// Interned static signatures, shared by the clones of one [`Bins`] (a signature is a pure
/// function of labels and taints, so sharing never changes an answer).
#[derive(Debug, Default)]
struct SigTable<'a> {
    by_ptr: HashMap<(usize, usize), u32, FastHash>,
    by_content: HashMap<u64, Vec<Interned<'a>>, FastHash>,
    count: u32,
}

fn labels_but_hostname(
    labels: &BTreeMap<String, String>,
) -> impl Iterator<Item = (&String, &String)> {
    labels
        .iter()
        .filter(|(k, _)| k.as_str() != keys::LABEL_HOSTNAME)
}

impl<'a> SigTable<'a> {
    fn intern(&mut self, labels: &'a BTreeMap<String, String>, taints: &'a [Taint]) -> u32 {
        let ptr = (
            std::ptr::from_ref(labels).addr(),
            taints.as_ptr().addr() ^ taints.len().rotate_left(48),
        );
        if let Some(&s) = self.by_ptr.get(&ptr) {
            return s;
        }
        let mut h = Fx::default();
        for kv in labels_but_hostname(labels) {
            kv.hash(&mut h);
        }
        taints.hash(&mut h);
        let slot = self.by_content.entry(h.finish()).or_default();
        let found = slot.iter().find(|(_, l, t)| {
            *t == taints && labels_but_hostname(l).eq(labels_but_hostname(labels))
        });
        let s = match found {
            Some(&(s, _, _)) => s,
            None => {
                let s = self.count;
                self.count += 1;
                slot.push((s, labels, taints));
                s
            }
        };
        self.by_ptr.insert(ptr, s);
        s
    }
}

/// Whether the pod's node-level rules read the hostname label (then they are evaluated per
/// bin, not per signature).
fn reads_hostname(pod: &Pod) -> bool {
    pod.node_selector.contains_key(keys::LABEL_HOSTNAME)
        || pod
            .required_node_affinity
            .iter()
            .flatten()
            .any(|r| r.key == keys::LABEL_HOSTNAME)
}

impl<'a> Bins<'a> {
    /// No bins; `track_all_pods` keeps every pod of every bin (needed when pods to place carry
    /// anti-affinity selectors).
    #[cfg(test)]
    pub(crate) fn new(n_ext: usize, track_all_pods: bool) -> Self {
        Self::with_topology(n_ext, track_all_pods, None)
    }

    /// No bins, with topology counters over `universe` when there is one (see
    /// [`super::topology::UniverseBuilder`]).
    pub(crate) fn with_topology(
        n_ext: usize,
        track_all_pods: bool,
        universe: Option<Rc<Universe>>,
    ) -> Self {
        // The counters answer for hostname anti-affinity: no pod lists needed.
        let track_all_pods = track_all_pods && universe.is_none();
        Self {
            n_ext,
            labels: Vec::new(),
            taints: Vec::new(),
            enabled: Vec::new(),
            free: Vec::new(),
            free_ext: Vec::new(),
            held: Vec::new(),
            held_ext: Vec::new(),
            holders: BTreeMap::new(),
            pods: Vec::new(),
            anti_pods: Vec::new(),
            track_all_pods,
            tree: MaxTree::new(),
            sig: Vec::new(),
            run: Vec::new(),
            run_end: Vec::new(),
            sigs: Rc::default(),
            like: Rc::default(),
            topo: universe.map(TopoState::new),
        }
    }

    /// Whether topology counters are kept.
    pub(crate) fn has_topology(&self) -> bool {
        self.topo.is_some()
    }

    /// Whether no placement depends on where `pod` is (always, without topology counters):
    /// only such pods may be moved by a consolidation or preempted (docs/scheduling.md §2).
    pub(crate) fn is_free(&self, pod: &Pod) -> bool {
        self.topo.as_ref().is_none_or(|t| t.is_free(t.profile(pod)))
    }

    /// Number of bins.
    pub(crate) fn len(&self) -> usize {
        self.free.len()
    }

    /// Adds an empty bin with `labels`, `taints` and capacity `(core, ext)`; returns its index.
    pub(crate) fn push(
        &mut self,
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
        capacity: ([i64; 3], Vec<i64>),
        enabled: bool,
    ) -> usize {
        self.push_slices(labels, taints, capacity.0, &capacity.1, enabled)
    }

    /// [`Bins::push`] with the capacity as a core vector and a slice of extra resources.
    pub(crate) fn push_slices(
        &mut self,
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
        core: [i64; 3],
        ext: &[i64],
        enabled: bool,
    ) -> usize {
        debug_assert_eq!(ext.len(), self.n_ext);
        let i = self.free.len();
        let sig = self.sigs.borrow_mut().intern(labels, taints);
        if i > 0 && self.sig[i - 1] == sig {
            let r = self.run[i - 1];
            self.run.push(r);
            self.run_end[r as usize] = i + 1;
        } else {
            self.run.push(self.run_end.len() as u32);
            self.run_end.push(i + 1);
        }
        self.sig.push(sig);
        self.labels.push(labels);
        self.taints.push(taints);
        self.enabled.push(enabled);
        self.free.push(core);
        self.free_ext.extend_from_slice(ext);
        self.held.push([0; 3]);
        self.held_ext.extend(std::iter::repeat_n(0, self.n_ext));
        self.pods.push(Vec::new());
        self.anti_pods.push(Vec::new());
        self.tree.push(if enabled { core } else { EMPTY });
        if let Some(t) = &mut self.topo {
            let key = std::ptr::from_ref(labels).addr();
            let mut like = self.like.borrow_mut();
            match like.get(&key) {
                Some(&b) if b < i && std::ptr::eq(self.labels[b], labels) => {
                    t.push_bin_like(b, true);
                }
                _ => {
                    t.push_bin(labels, true);
                    like.insert(key, i);
                }
            }
        }
        i
    }

    /// Removes the last bin pushed (which must hold nothing any more): the exact reverse of
    /// [`Bins::push`].
    fn pop_last(&mut self) {
        let Some(i) = self.free.len().checked_sub(1) else {
            return;
        };
        self.labels.pop();
        self.taints.pop();
        self.enabled.pop();
        self.free.pop();
        self.free_ext.truncate(i * self.n_ext);
        self.held.pop();
        self.held_ext.truncate(i * self.n_ext);
        self.holders.remove(&i);
        self.pods.pop();
        self.anti_pods.pop();
        self.tree.pop();
        if let Some(t) = &mut self.topo {
            t.pop_bin();
        }
        self.sig.pop();
        if let Some(r) = self.run.pop() {
            if i > 0 && self.run[i - 1] == r {
                self.run_end[r as usize] = i;
            } else {
                self.run_end.pop();
            }
        }
    }

    fn refresh(&mut self, bin: usize) {
        let v = if self.enabled[bin] {
            let (f, h) = (self.free[bin], self.held[bin]);
            [f[0] + h[0], f[1] + h[1], f[2] + h[2]]
        } else {
            EMPTY
        };
        self.tree.set(bin, v);
    }

    /// Stops `bin` taking pods while it stays a node of the cluster (a topology domain with
    /// its pods).
    pub(crate) fn retire(&mut self, bin: usize) {
        if self.enabled[bin] {
            self.enabled[bin] = false;
            self.refresh(bin);
        }
    }

    /// Whether bin `bin` takes part in the simulation.
    pub(crate) fn is_enabled(&self, bin: usize) -> bool {
        self.enabled[bin]
    }

    /// Takes a bin out of (or back into) the simulation.
    pub(crate) fn set_enabled(&mut self, bin: usize, enabled: bool) {
        self.enabled[bin] = enabled;
        if let Some(t) = &mut self.topo {
            t.set_present(bin, enabled);
        }
        self.refresh(bin);
    }

    /// Records `pod` running on `bin` (it may overcommit an existing node; the bin then simply
    /// has negative room).
    ///
    /// `profile` is the pod's topology profile when the caller knows it ([`LOOKUP`] otherwise).
    fn occupy_profiled(&mut self, bin: usize, pod: &'a Pod, demand: &Demand, profile: u32) {
        self.take(bin, demand);
        self.track(bin, pod, profile);
        self.refresh(bin);
    }

    /// Records `pods` running on `bin`, taking `core` and `ext` (their summed demand, `ext`
    /// indexed like the resource index) at once: the same as [`Bins::occupy`] for each pod,
    /// with one update of the search tree.
    pub(crate) fn occupy_all(
        &mut self,
        bin: usize,
        pods: impl IntoIterator<Item = &'a Pod>,
        core: [i64; 3],
        ext: &[i64],
    ) {
        for (free, used) in self.free[bin].iter_mut().zip(core) {
            *free -= used;
        }
        for (i, v) in ext.iter().enumerate() {
            self.free_ext[bin * self.n_ext + i] -= v;
        }
        for pod in pods {
            self.track(bin, pod, LOOKUP);
        }
        self.refresh(bin);
    }

    /// Records a preemptible standby-holder pod running on `bin`: it takes free room like any
    /// pod, and that room is also counted as held (available to preempting pods).
    pub(crate) fn occupy_held(&mut self, bin: usize, pod: &'a Pod, demand: Demand) {
        self.take(bin, &demand);
        for d in 0..3 {
            self.held[bin][d] += demand.core[d];
        }
        for &(i, v) in &demand.ext {
            self.held_ext[bin * self.n_ext + i as usize] += v;
        }
        self.track(bin, pod, LOOKUP);
        self.holders
            .entry(bin)
            .or_default()
            .push(Held { pod, demand });
        self.refresh(bin);
    }

    fn track(&mut self, bin: usize, pod: &'a Pod, profile: u32) {
        if self.track_all_pods {
            self.pods[bin].push(pod);
        }
        // The topology counters answer for anti-affinity when kept: then the pod itself is
        // not read (one cache miss per placement, a tenth of a plan's time).
        if self.topo.is_none() && !pod.hostname_anti_affinity.is_empty() {
            self.anti_pods[bin].push(pod);
        }
        if let Some(t) = &mut self.topo {
            let p = if profile == LOOKUP {
                t.profile(pod)
            } else {
                profile
            };
            t.count(bin, p, true);
        }
    }

    fn untrack(&mut self, bin: usize, pod: &'a Pod, profile: u32) {
        if let Some(t) = &mut self.topo {
            let p = if profile == LOOKUP {
                t.profile(pod)
            } else {
                profile
            };
            t.count(bin, p, false);
        }
        if self.track_all_pods
            && let Some(i) = self.pods[bin].iter().rposition(|p| std::ptr::eq(*p, pod))
        {
            self.pods[bin].remove(i);
        }
        if self.topo.is_none()
            && !pod.hostname_anti_affinity.is_empty()
            && let Some(i) = self.anti_pods[bin]
                .iter()
                .rposition(|p| std::ptr::eq(*p, pod))
        {
            self.anti_pods[bin].remove(i);
        }
    }

    fn take(&mut self, bin: usize, demand: &Demand) {
        for d in 0..3 {
            self.free[bin][d] -= demand.core[d];
        }
        for &(i, v) in &demand.ext {
            self.free_ext[bin * self.n_ext + i as usize] -= v;
        }
    }

    fn give(&mut self, bin: usize, demand: &Demand) {
        for d in 0..3 {
            self.free[bin][d] += demand.core[d];
        }
        for &(i, v) in &demand.ext {
            self.free_ext[bin * self.n_ext + i as usize] += v;
        }
    }

    /// Whether `demand` fits the free room of `bin` (plus its preemptible room when `preempt`).
    fn room_for(&self, bin: usize, demand: &Demand, preempt: bool) -> bool {
        let f = self.free[bin];
        let h = if preempt { self.held[bin] } else { [0; 3] };
        (0..3).all(|d| f[d] + h[d] >= demand.core[d])
            && demand.ext.iter().all(|&(i, v)| {
                let k = bin * self.n_ext + i as usize;
                self.free_ext[k] + if preempt { self.held_ext[k] } else { 0 } >= v
            })
    }

    /// Hostname anti-affinity both ways, unless the topology counters answer for it.
    fn anti_ok(&self, bin: usize, pod: &Pod) -> bool {
        if self.topo.is_some() {
            return true;
        }
        if !pod.hostname_anti_affinity.is_empty()
            && self.pods[bin].iter().any(|o| {
                o.namespace == pod.namespace
                    && pod
                        .hostname_anti_affinity
                        .iter()
                        .any(|s| s.matches(&o.labels))
            })
        {
            return false;
        }
        !self.anti_pods[bin].iter().any(|o| {
            o.namespace == pod.namespace
                && o.hostname_anti_affinity
                    .iter()
                    .any(|s| s.matches(&pod.labels))
        })
    }

    /// Whether `pod` (with `demand`) fits `bin` by every rule.
    pub(crate) fn fits(&self, bin: usize, pod: &Pod, demand: &Demand, preempt: bool) -> bool {
        self.fits_dynamic(bin, pod, demand, preempt)
            && static_fits(pod, self.labels[bin], self.taints[bin])
    }

    /// Whether `pod` fits `bin` by the rules that change as pods come and go (the bin taking
    /// part, room, anti-affinity); the node-level rules are the caller's.
    fn fits_dynamic(&self, bin: usize, pod: &Pod, demand: &Demand, preempt: bool) -> bool {
        self.enabled[bin] && self.room_for(bin, demand, preempt) && self.anti_ok(bin, pod)
    }
}

/// Per class and signature, whether the class passes the node-level rules there.
#[derive(Debug, Default)]
struct StaticFit {
    /// `fits[rules][signature]`: 0 not known yet, 1 fails, 2 passes.
    fits: Vec<Vec<u8>>,
    /// `reads_hostname[class]`: 0 not known yet, 1 no, 2 yes.
    reads_hostname: Vec<u8>,
    /// `rules_of[class]`: the class's node-level rules, numbered from 1 (0: not known yet).
    /// Classes with the same nodeSelector, node affinity and tolerations share the answers.
    rules_of: Vec<u32>,
    /// The distinct node-level rules, by hash.
    rules: HashMap<u64, Vec<(u32, NodeRules)>, FastHash>,
}

/// What the node-level rules read of a pod: nodeSelector, required node affinity,
/// tolerations.
type NodeRules = (
    BTreeMap<String, String>,
    Vec<Vec<crate::model::LabelSelectorRequirement>>,
    Vec<crate::model::Toleration>,
);

/// One step the [`Placer`] can take back.
#[derive(Debug, Clone)]
enum Undo<'a> {
    Placed {
        bin: usize,
        pod: &'a Pod,
        demand: Demand,
        profile: u32,
    },
    Preempted {
        bin: usize,
        held: Held<'a>,
    },
    Disabled {
        bin: usize,
    },
    Pushed,
    Cursor {
        class: usize,
        mode: usize,
        old: usize,
    },
}

/// Result of placing one pod.
#[derive(Debug, Clone)]
pub(crate) struct Placed<'a> {
    /// The bin the pod went to.
    pub(crate) bin: usize,
    /// Standby holders evicted to make room.
    pub(crate) preempted: Vec<&'a Pod>,
}

/// First-fit placement over [`Bins`] with a cursor per pod class and mode: within one
/// simulation free room only shrinks (except where a preemption frees some, which resets the
/// cursors), so a bin that once failed a class fails it for good and the class's next pod
/// starts after it. Changes can be recorded and rolled back (trials of node removals).
#[derive(Debug, Clone)]
pub(crate) struct Placer<'a> {
    pub(crate) bins: Bins<'a>,
    cursors: Vec<[usize; 2]>,
    log: Vec<Undo<'a>>,
    recording: bool,
    /// `(class, signature)` → whether the class passes the node-level rules there; shared by
    /// clones (the answer depends on nothing that changes).
    static_fit: Rc<RefCell<StaticFit>>,
    /// What each class checks and adds in the topology counters (filled on first use).
    topo_classes: Vec<Option<Rc<ClassTopo>>>,
    /// Memory reused by every search.
    ctx: SearchCtx,
}

impl<'a> Placer<'a> {
    /// A placer over `bins` for `classes` pod classes.
    pub(crate) fn new(bins: Bins<'a>, classes: usize) -> Self {
        Self {
            bins,
            cursors: vec![[0, 0]; classes],
            log: Vec::new(),
            recording: false,
            topo_classes: Vec::new(),
            ctx: SearchCtx::default(),
            static_fit: Rc::new(RefCell::new(StaticFit {
                fits: Vec::new(),
                reads_hostname: vec![0; classes],
                rules_of: vec![0; classes],
                rules: HashMap::default(),
            })),
        }
    }

    /// Makes room for `n` more pod classes (numbered after the existing ones).
    pub(crate) fn add_classes(&mut self, n: usize) {
        let total = self.cursors.len() + n;
        self.cursors.resize(total, [0, 0]);
        let mut sf = self.static_fit.borrow_mut();
        sf.reads_hostname.resize(total, 0);
        sf.rules_of.resize(total, 0);
    }

    fn set_cursor(&mut self, class: usize, mode: usize, value: usize) {
        let old = self.cursors[class][mode];
        if old != value {
            if self.recording {
                self.log.push(Undo::Cursor { class, mode, old });
            }
            self.cursors[class][mode] = value;
        }
    }

    /// The topology rules of `class` (such as `pod`), when the bins keep topology counters.
    fn class_topo(&mut self, class: usize, pod: &Pod) -> Option<Rc<ClassTopo>> {
        let topo = self.bins.topo.as_ref()?;
        if self.topo_classes.len() <= class {
            self.topo_classes.resize(class + 1, None);
        }
        Some(Rc::clone(
            self.topo_classes[class].get_or_insert_with(|| Rc::new(topo.class_topo(pod))),
        ))
    }

    /// Whether pods of `class` meet only lasting refusals (see the module docs).
    pub(crate) fn is_monotone(&mut self, class: usize, pod: &Pod) -> bool {
        self.class_topo(class, pod).is_none_or(|t| t.monotone)
    }

    /// The first bin at or after `class`'s cursor that takes `pod`, advancing the cursor past
    /// bins that refuse it for good (and no further than the first that refuses it for now).
    fn search(&mut self, class: usize, pod: &Pod, demand: &Demand, preempt: bool) -> Option<usize> {
        let topo = self.class_topo(class, pod);
        let mut ctx = std::mem::take(&mut self.ctx);
        let found = self.search_with(class, pod, demand, preempt, topo.as_deref(), &mut ctx);
        self.ctx = ctx;
        found
    }

    /// [`Placer::search`] with the class's topology rules and a context to fill.
    fn search_with(
        &mut self,
        class: usize,
        pod: &Pod,
        demand: &Demand,
        preempt: bool,
        topo: Option<&ClassTopo>,
        buf: &mut SearchCtx,
    ) -> Option<usize> {
        let mode = usize::from(preempt);
        let ctx: Option<&SearchCtx> = match (topo, &self.bins.topo) {
            (Some(ct), Some(state)) if !TopoState::trivial(ct) => {
                state.fill_ctx(ct, buf);
                Some(buf)
            }
            _ => None,
        };
        if topo.as_ref().is_some_and(|t| t.impossible()) {
            return None;
        }
        let mut start = self.cursors[class][mode];
        // Whether every bin from the cursor to `start` refused for good.
        let mut lasting = true;
        loop {
            let Some(bin) = self.bins.tree.find(start, &demand.core) else {
                if lasting {
                    let end = self.bins.len();
                    self.set_cursor(class, mode, end);
                }
                return None;
            };
            // Jump over the bins the hostname-key rules refuse.
            if let (Some(ct), Some(ctx), Some(state)) = (&topo, &ctx, &self.bins.topo) {
                let (next, for_good) = state.skip(ct, ctx, bin);
                match next {
                    Some(next) if next == bin => {}
                    found => {
                        if !for_good && lasting {
                            self.set_cursor(class, mode, bin);
                            lasting = false;
                        }
                        match found {
                            Some(next) => {
                                start = next;
                                continue;
                            }
                            None => {
                                if lasting {
                                    let end = self.bins.len();
                                    self.set_cursor(class, mode, end);
                                }
                                return None;
                            }
                        }
                    }
                }
            }
            if !self.static_ok(class, bin, pod) {
                // Every bin of the run shares the labels and taints that failed, but for the
                // hostname.
                start = if self.reads_hostname(class, pod) {
                    bin + 1
                } else {
                    self.bins.run_end[self.bins.run[bin] as usize]
                };
                continue;
            }
            if !self.bins.fits_dynamic(bin, pod, demand, preempt) {
                start = bin + 1;
                continue;
            }
            if let (Some(ct), Some(ctx), Some(state)) = (&topo, &ctx, &self.bins.topo) {
                match state.check(ct, ctx, bin) {
                    Ok(()) => {}
                    Err(Refusal::Lasting) => {
                        start = bin + 1;
                        continue;
                    }
                    Err(Refusal::ForNow) => {
                        if lasting {
                            self.set_cursor(class, mode, bin);
                            lasting = false;
                        }
                        start = bin + 1;
                        continue;
                    }
                }
            }
            if lasting {
                self.set_cursor(class, mode, bin);
            }
            return Some(bin);
        }
    }

    /// Whether `pod` of `class` may go on `bin` now by every rule.
    pub(crate) fn fits(&mut self, class: usize, bin: usize, pod: &Pod, demand: &Demand) -> bool {
        if !self.bins.fits(bin, pod, demand, false) {
            return false;
        }
        let topo = self.class_topo(class, pod);
        match (&topo, &self.bins.topo) {
            (Some(ct), Some(state)) => {
                let ctx = state.search_ctx(ct);
                state.check(ct, &ctx, bin).is_ok()
            }
            _ => true,
        }
    }

    /// Whether `pod` of `class` may go on a new, empty node with `labels` by the topology rules
    /// (the node-level rules and room are the caller's).
    #[cfg(test)]
    pub(crate) fn fits_fresh(
        &mut self,
        class: usize,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let zone = self.zone_of(labels);
        self.fits_fresh_in(class, pod, zone)
    }

    /// The zone of `labels` as the topology counters number it (`Some(NONE)` without a zone
    /// label or counters, `None` for a zone no bin has yet).
    pub(crate) fn zone_of(&self, labels: &BTreeMap<String, String>) -> Option<u32> {
        self.bins
            .topo
            .as_ref()
            .map_or(Some(u32::MAX), |t| t.known_zone(labels))
    }

    /// [`Placer::fits_fresh`] in a zone numbered by [`Placer::zone_of`].
    pub(crate) fn fits_fresh_in(&mut self, class: usize, pod: &Pod, zone: Option<u32>) -> bool {
        let topo = self.class_topo(class, pod);
        match (&topo, &self.bins.topo) {
            (Some(ct), Some(state)) => state.fits_fresh_in(ct, zone),
            _ => true,
        }
    }

    /// How much `pod` of `class` prefers a new node in `zone` (numbered by
    /// [`Placer::zone_of`]): (preferred zone terms score, higher better; `ScheduleAnyway` zone
    /// counts, lower better).
    pub(crate) fn zone_preference(
        &mut self,
        class: usize,
        pod: &Pod,
        zone: Option<u32>,
    ) -> (i64, i64) {
        let topo = self.class_topo(class, pod);
        match (&topo, &self.bins.topo) {
            (Some(ct), Some(state)) => state.zone_preference(ct, zone),
            _ => (0, 0),
        }
    }

    /// Places `pod` of `class` on `bin` when it fits there by every rule (a node just opened
    /// for it); the cursors are left alone.
    pub(crate) fn place_on(
        &mut self,
        class: usize,
        pod: &'a Pod,
        demand: &Demand,
        bin: usize,
    ) -> Option<usize> {
        if !self.static_ok(class, bin, pod) || !self.bins.fits_dynamic(bin, pod, demand, false) {
            return None;
        }
        let topo = self.class_topo(class, pod);
        if let (Some(ct), Some(state)) = (&topo, &self.bins.topo)
            && !TopoState::trivial(ct)
            && state.check(ct, &state.search_ctx(ct), bin).is_err()
        {
            return None;
        }
        self.put(class, bin, pod, demand);
        Some(bin)
    }

    /// Whether the node-level rules of `class` (such as `pod`) read the hostname label
    /// (memoised per class).
    fn reads_hostname(&self, class: usize, pod: &Pod) -> bool {
        if let Some(&v) = self.static_fit.borrow().reads_hostname.get(class)
            && v != 0
        {
            return v == 2;
        }
        let reads = reads_hostname(pod);
        if let Some(v) = self.static_fit.borrow_mut().reads_hostname.get_mut(class) {
            *v = if reads { 2 } else { 1 };
        }
        reads
    }

    /// The number of `class`'s node-level rules (memoised per class; classes with the same
    /// rules share one).
    fn rules(&self, class: usize, pod: &Pod) -> usize {
        if let Some(&r) = self.static_fit.borrow().rules_of.get(class)
            && r != 0
        {
            return r as usize - 1;
        }
        let mut h = Fx::default();
        pod.node_selector.hash(&mut h);
        pod.required_node_affinity.hash(&mut h);
        for t in &pod.tolerations {
            (&t.key, t.exists, &t.value, &t.effect).hash(&mut h);
        }
        let mut sf = self.static_fit.borrow_mut();
        let n = sf.fits.len() as u32;
        let slot = sf.rules.entry(h.finish()).or_default();
        let r = match slot.iter().find(|(_, (sel, aff, tol))| {
            *sel == pod.node_selector
                && *aff == pod.required_node_affinity
                && *tol == pod.tolerations
        }) {
            Some((r, _)) => *r,
            None => {
                slot.push((
                    n,
                    (
                        pod.node_selector.clone(),
                        pod.required_node_affinity.clone(),
                        pod.tolerations.clone(),
                    ),
                ));
                sf.fits.push(Vec::new());
                n
            }
        };
        if sf.rules_of.len() <= class {
            sf.rules_of.resize(class + 1, 0);
        }
        sf.rules_of[class] = r + 1;
        r as usize
    }

    /// Whether pods of `class` (such as `pod`) pass the node-level rules of `bin`, memoised per
    /// node-level rules and signature.
    fn static_ok(&self, class: usize, bin: usize, pod: &Pod) -> bool {
        let sig = self.bins.sig[bin] as usize;
        let rules = self.rules(class, pod);
        if let Some(&v) = self
            .static_fit
            .borrow()
            .fits
            .get(rules)
            .and_then(|row| row.get(sig))
            && v != 0
        {
            // Only rules that do not read the hostname are memoised.
            return v == 2;
        }
        let ok = static_fits(pod, self.bins.labels[bin], self.bins.taints[bin]);
        if !self.reads_hostname(class, pod)
            && let Some(row) = self.static_fit.borrow_mut().fits.get_mut(rules)
        {
            if row.len() <= sig {
                row.resize(sig + 1, 0);
            }
            row[sig] = if ok { 2 } else { 1 };
        }
        ok
    }

    /// Places `pod` of class `class` on the first bin that takes it; when `may_preempt`, a bin
    /// that only fits after evicting standby holders is used if no bin fits without.
    pub(crate) fn place(
        &mut self,
        class: usize,
        pod: &'a Pod,
        demand: &Demand,
        may_preempt: bool,
    ) -> Option<Placed<'a>> {
        if let Some(bin) = self.search(class, pod, demand, false) {
            self.put(class, bin, pod, demand);
            return Some(Placed {
                bin,
                preempted: Vec::new(),
            });
        }
        if !may_preempt || self.bins.holders.is_empty() {
            return None;
        }
        let bin = self.search(class, pod, demand, true)?;
        let mut preempted = Vec::new();
        while !self.bins.room_for(bin, demand, false) {
            // Evict the lowest priority first, then the last by name: independent of the
            // order pods were listed in.
            let Some(held) = self.bins.holders.get_mut(&bin).and_then(|v| {
                v.sort_by(|a, b| {
                    b.pod.priority.cmp(&a.pod.priority).then_with(|| {
                        (&a.pod.namespace, &a.pod.name).cmp(&(&b.pod.namespace, &b.pod.name))
                    })
                });
                v.pop()
            }) else {
                break;
            };
            for d in 0..3 {
                self.bins.held[bin][d] -= held.demand.core[d];
            }
            for &(i, v) in &held.demand.ext {
                self.bins.held_ext[bin * self.bins.n_ext + i as usize] -= v;
            }
            self.bins.give(bin, &held.demand);
            self.bins.untrack(bin, held.pod, LOOKUP);
            preempted.push(held.pod);
            if self.recording {
                self.log.push(Undo::Preempted { bin, held });
            }
        }
        // Room was freed on `bin`: cursors past it may have skipped it for lack of room.
        for (class, c) in self.cursors.clone().into_iter().enumerate() {
            for (mode, value) in c.into_iter().enumerate() {
                if value > bin {
                    self.set_cursor(class, mode, bin);
                }
            }
        }
        self.put(class, bin, pod, demand);
        Some(Placed { bin, preempted })
    }

    fn put(&mut self, class: usize, bin: usize, pod: &'a Pod, demand: &Demand) {
        let profile = self
            .topo_classes
            .get(class)
            .and_then(|t| t.as_ref())
            .map_or(LOOKUP, |t| TopoState::class_profile(t));
        self.bins.occupy_profiled(bin, pod, demand, profile);
        if self.recording {
            self.log.push(Undo::Placed {
                bin,
                pod,
                demand: demand.clone(),
                profile,
            });
        }
    }

    /// Adds a bin as [`Bins::push`] does (recorded: a rollback removes it again).
    pub(crate) fn push_bin(
        &mut self,
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
        capacity: &([i64; 3], Vec<i64>),
        enabled: bool,
    ) -> usize {
        let bin = self
            .bins
            .push_slices(labels, taints, capacity.0, &capacity.1, enabled);
        if self.recording {
            self.log.push(Undo::Pushed);
        }
        bin
    }

    /// Takes `bin` out of the simulation (recorded).
    pub(crate) fn disable(&mut self, bin: usize) {
        if self.bins.is_enabled(bin) {
            self.bins.set_enabled(bin, false);
            if self.recording {
                self.log.push(Undo::Disabled { bin });
            }
        }
    }

    /// Starts recording changes; returns the checkpoint to roll back to.
    pub(crate) fn begin(&mut self) -> usize {
        self.recording = true;
        self.log.len()
    }

    /// Undoes every change after `checkpoint`.
    pub(crate) fn rollback(&mut self, checkpoint: usize) {
        while self.log.len() > checkpoint {
            let Some(step) = self.log.pop() else { break };
            match step {
                Undo::Placed {
                    bin,
                    pod,
                    demand,
                    profile,
                } => {
                    self.bins.give(bin, &demand);
                    self.bins.untrack(bin, pod, profile);
                    self.bins.refresh(bin);
                }
                Undo::Preempted { bin, held } => {
                    let (pod, demand) = (held.pod, held.demand);
                    self.bins.occupy_held(bin, pod, demand);
                }
                Undo::Disabled { bin } => self.bins.set_enabled(bin, true),
                Undo::Pushed => self.bins.pop_last(),
                Undo::Cursor { class, mode, old } => self.cursors[class][mode] = old,
            }
        }
        if checkpoint == 0 {
            self.recording = false;
        }
    }

    /// Keeps every change since the outermost checkpoint and stops recording.
    pub(crate) fn commit(&mut self) {
        self.log.clear();
        self.recording = false;
    }
}

impl<'a> Placer<'a> {
    /// Tries to move `items` (class, pod index) off `bin` onto the other enabled bins, first-fit
    /// in the given order. On success `bin` stays out of the simulation, the moves are kept and
    /// returned as `(class, pod, destination)`; on failure every change is rolled back and the
    /// index of the pod that found no room is returned.
    ///
    /// `no_fit[c] = Some(b)` records that, with bin `b` out, no bin took a pod of class `c`. Room
    /// only shrinks between trials (a failed trial is rolled back, a successful one only adds
    /// pods and removes a bin), so afterwards `b` is the only bin that might take such a pod, and
    /// a trial starting with one fails at once unless `b` takes it. Only classes whose refusals
    /// last are recorded (a pod affinity or spread refusal may lift).
    pub(crate) fn try_empty_bin(
        &mut self,
        bin: usize,
        items: &[(usize, usize)],
        pods: &'a [Pod],
        classes: &[PodClass<'a>],
        no_fit: &mut [Option<usize>],
    ) -> Result<Vec<(usize, usize, usize)>, usize> {
        if let Some(&(c0, m0)) = items.first()
            && let Some(k) = no_fit[c0]
            && (k == bin || !self.fits(c0, k, &pods[m0], &classes[c0].demand))
        {
            return Err(0);
        }
        let checkpoint = self.begin();
        self.disable(bin);
        let mut moves = Vec::with_capacity(items.len());
        for (i, &(c, m)) in items.iter().enumerate() {
            match self.place(c, &pods[m], &classes[c].demand, false) {
                Some(p) => moves.push((c, m, p.bin)),
                None => {
                    if i == 0 && self.is_monotone(c, &pods[m]) {
                        no_fit[c] = Some(bin);
                    }
                    self.rollback(checkpoint);
                    return Err(i);
                }
            }
        }
        self.commit();
        Ok(moves)
    }
}

/// Order in which a bin's pods are moved in a removal trial: pods needing extended resources
/// first, then larger ([`size_score`]), then by `namespace/name`.
pub(crate) fn trial_order(
    pods: &[Pod],
    classes: &[PodClass<'_>],
    a: (usize, usize),
    b: (usize, usize),
) -> std::cmp::Ordering {
    let (da, db) = (&classes[a.0].demand, &classes[b.0].demand);
    (!da.ext.is_empty())
        .cmp(&!db.ext.is_empty())
        .reverse()
        .then_with(|| size_score(db).cmp(&size_score(da)))
        .then_with(|| {
            (&pods[a.1].namespace, &pods[a.1].name).cmp(&(&pods[b.1].namespace, &pods[b.1].name))
        })
}

// ---------------------------------------------------------------------------------------------
// Pod classes.

/// Pods that the simulation cannot tell apart: same namespace, labels, requests, selectors,
/// node and pod affinity, tolerations, anti-affinity, spread constraints and priority.
#[derive(Debug, Clone)]
pub(crate) struct PodClass<'a> {
    /// The first member (by `namespace/name`).
    pub(crate) rep: &'a Pod,
    /// What one member takes.
    pub(crate) demand: Demand,
    /// Members, as indices into the snapshot's pods, by `namespace/name`.
    pub(crate) members: Vec<usize>,
}

fn class_hash(p: &Pod) -> u64 {
    let mut h = Fx::default();
    p.namespace.hash(&mut h);
    p.labels.hash(&mut h);
    p.requests.hash(&mut h);
    p.node_selector.hash(&mut h);
    p.required_node_affinity.hash(&mut h);
    p.hostname_anti_affinity.len().hash(&mut h);
    p.tolerations.len().hash(&mut h);
    for t in &p.tolerations {
        (&t.key, t.exists, &t.value, &t.effect).hash(&mut h);
    }
    p.priority.hash(&mut h);
    p.priority_class.hash(&mut h);
    if p.has_topology_constraints() {
        p.pod_affinity.hash(&mut h);
        p.pod_anti_affinity.hash(&mut h);
        p.topology_spread.hash(&mut h);
    }
    h.finish()
}

fn same_class(a: &Pod, b: &Pod) -> bool {
    a.namespace == b.namespace
        && a.labels == b.labels
        && a.requests == b.requests
        && a.node_selector == b.node_selector
        && a.required_node_affinity == b.required_node_affinity
        && a.hostname_anti_affinity == b.hostname_anti_affinity
        && a.tolerations == b.tolerations
        && a.priority == b.priority
        && a.priority_class == b.priority_class
        && a.pod_affinity == b.pod_affinity
        && a.pod_anti_affinity == b.pod_anti_affinity
        && a.preferred_pod_affinity == b.preferred_pod_affinity
        && a.preferred_pod_anti_affinity == b.preferred_pod_anti_affinity
        && a.topology_spread == b.topology_spread
        && a.unmodelled_constraints == b.unmodelled_constraints
}

/// Groups `pods` (index into `all`) into classes, sorted for first-fit decreasing: classes
/// needing extended resources first, then by [`size_score`] descending, then by the name of
/// their first member; members sorted by `namespace/name`. Independent of input order.
pub(crate) fn classify<'a>(
    all: &'a [Pod],
    pods: impl IntoIterator<Item = usize>,
    index: &ResourceIndex,
) -> Vec<PodClass<'a>> {
    let mut by_hash: HashMap<u64, Vec<usize>, FastHash> = HashMap::default();
    let mut classes: Vec<PodClass<'a>> = Vec::new();
    for i in pods {
        let pod = &all[i];
        let slot = by_hash.entry(class_hash(pod)).or_default();
        if let Some(&c) = slot.iter().find(|&&c| same_class(classes[c].rep, pod)) {
            classes[c].members.push(i);
        } else {
            slot.push(classes.len());
            classes.push(PodClass {
                rep: pod,
                demand: index.demand(pod),
                members: vec![i],
            });
        }
    }
    for c in &mut classes {
        c.members.sort_by(|&a, &b| {
            (&all[a].namespace, &all[a].name).cmp(&(&all[b].namespace, &all[b].name))
        });
        c.rep = &all[c.members[0]];
    }
    classes.sort_by(|a, b| {
        (!a.demand.ext.is_empty())
            .cmp(&!b.demand.ext.is_empty())
            .reverse()
            .then_with(|| size_score(&b.demand).cmp(&size_score(&a.demand)))
            .then_with(|| (&a.rep.namespace, &a.rep.name).cmp(&(&b.rep.namespace, &b.rep.name)))
    });
    classes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        LabelSelector, LabelSelectorRequirement, PodPhase, SelectorOperator, Toleration,
    };
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn node(name: &str, cpu: &str, mem: &str, pods: i64) -> Node {
        Node {
            name: name.into(),
            ready: true,
            allocatable: [
                ("cpu".to_string(), q(cpu)),
                ("memory".to_string(), q(mem)),
                ("pods".to_string(), Quantity::units(pods)),
            ]
            .into(),
            ..Node::default()
        }
    }

    fn pod(name: &str, cpu: &str, mem: &str) -> Pod {
        Pod {
            namespace: "ns".into(),
            name: name.into(),
            requests: [("cpu".to_string(), q(cpu)), ("memory".to_string(), q(mem))].into(),
            phase: PodPhase::Pending,
            ..Pod::default()
        }
    }

    #[test]
    fn resources_and_pod_slots() {
        let n = node("n", "2", "4Gi", 2);
        let a = pod("a", "1500m", "1Gi");
        let b = pod("b", "600m", "1Gi");
        assert!(check_fit(&a, &n, &[]).is_ok());
        assert!(matches!(
            check_fit(&b, &n, &[&a]),
            Err(Misfit::Resource { ref name, .. }) if name == "cpu"
        ));
        let tiny = pod("t", "1m", "1Mi");
        assert!(check_fit(&tiny, &n, &[&tiny.clone()]).is_ok());
        assert!(matches!(
            check_fit(&tiny, &n, &[&tiny.clone(), &tiny.clone()]),
            Err(Misfit::Resource { ref name, .. }) if name == "pods"
        ));
        let mut done = a.clone();
        done.phase = PodPhase::Succeeded;
        assert!(
            check_fit(&a, &n, &[&done]).is_ok(),
            "finished pods hold nothing"
        );
    }

    #[test]
    fn extended_resources_default_to_zero_standard_ones_to_unlimited() {
        let n = node("n", "2", "4Gi", 10);
        let mut gpu = pod("g", "1", "1Gi");
        gpu.requests
            .insert("nvidia.com/gpu".into(), Quantity::units(1));
        assert!(check_fit(&gpu, &n, &[]).is_err());
        let mut eph = pod("e", "1", "1Gi");
        eph.requests.insert("ephemeral-storage".into(), q("10Gi"));
        assert!(check_fit(&eph, &n, &[]).is_ok());
        let mut with_gpu = n.clone();
        with_gpu
            .allocatable
            .insert("nvidia.com/gpu".into(), Quantity::units(1));
        assert!(check_fit(&gpu, &with_gpu, &[]).is_ok());
        assert!(check_fit(&gpu, &with_gpu, &[&gpu]).is_err());
    }

    #[test]
    fn selectors_affinity_taints() {
        let mut n = node("n", "4", "8Gi", 10);
        n.labels.insert("disk".into(), "ssd".into());
        n.taints.push(Taint {
            key: "dedicated".into(),
            value: Some("db".into()),
            effect: Some(TaintEffect::NoSchedule),
        });
        n.taints.push(Taint {
            key: "soft".into(),
            value: None,
            effect: Some(TaintEffect::PreferNoSchedule),
        });
        let mut p = pod("p", "1", "1Gi");
        assert_eq!(
            check_fit(&p, &n, &[]),
            Err(Misfit::Taint {
                key: "dedicated".into()
            })
        );
        p.tolerations.push(Toleration {
            key: "dedicated".into(),
            exists: true,
            value: String::new(),
            effect: None,
        });
        assert!(check_fit(&p, &n, &[]).is_ok());
        p.node_selector.insert("disk".into(), "hdd".into());
        assert!(matches!(
            check_fit(&p, &n, &[]),
            Err(Misfit::NodeSelector { .. })
        ));
        p.node_selector.clear();
        let req = |op, vals: &[&str]| LabelSelectorRequirement {
            key: "disk".into(),
            operator: Some(op),
            values: Some(vals.iter().map(|s| s.to_string()).collect()),
        };
        p.required_node_affinity = vec![vec![req(SelectorOperator::NotIn, &["ssd"])]];
        assert_eq!(check_fit(&p, &n, &[]), Err(Misfit::NodeAffinity));
        p.required_node_affinity
            .push(vec![req(SelectorOperator::In, &["ssd"])]);
        assert!(check_fit(&p, &n, &[]).is_ok(), "terms are ORed");
        p.required_node_affinity = vec![vec![]];
        assert_eq!(check_fit(&p, &n, &[]), Err(Misfit::NodeAffinity));
    }

    #[test]
    fn engine_reads_the_hostname_per_node_not_per_signature() {
        // Identical nodes but for the hostname share one signature (and one run).
        let nodes: Vec<Node> = (0..3)
            .map(|i| {
                let mut n = node(&format!("n{i}"), "4", "8Gi", 10);
                n.labels.insert("pool".into(), "a".into());
                n.labels
                    .insert(keys::LABEL_HOSTNAME.into(), format!("n{i}"));
                n
            })
            .collect();
        let mut pinned = pod("pinned", "100m", "1Mi");
        pinned
            .node_selector
            .insert(keys::LABEL_HOSTNAME.into(), "n2".into());
        let mut not_n0 = pod("not-n0", "100m", "1Mi");
        not_n0.required_node_affinity = vec![vec![LabelSelectorRequirement {
            key: keys::LABEL_HOSTNAME.into(),
            operator: Some(SelectorOperator::NotIn),
            values: Some(vec!["n0".into()]),
        }]];
        let mut pool = pod("pool", "100m", "1Mi");
        pool.node_selector.insert("pool".into(), "a".into());
        let pods = vec![pinned, not_n0, pool];
        let index = ResourceIndex::from_pods(&pods);
        let mut bins = Bins::new(index.len(), false);
        for n in &nodes {
            bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), true);
        }
        assert_eq!(bins.sig, vec![0, 0, 0]);
        assert_eq!(bins.run, vec![0, 0, 0]);
        let mut placer = Placer::new(bins, pods.len());
        let got: Vec<Option<usize>> = pods
            .iter()
            .enumerate()
            .map(|(c, p)| placer.place(c, p, &index.demand(p), false).map(|x| x.bin))
            .collect();
        assert_eq!(got, vec![Some(2), Some(1), Some(0)]);
    }

    #[test]
    fn anti_affinity_is_symmetric_and_namespaced() {
        let n = node("n", "8", "8Gi", 10);
        let mut a = pod("a", "100m", "1Mi");
        a.labels.insert("app".into(), "web".into());
        a.hostname_anti_affinity = vec![LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            match_expressions: None,
        }];
        let mut b = pod("b", "100m", "1Mi");
        b.labels.insert("app".into(), "web".into());
        assert!(check_fit(&a, &n, &[&b]).is_err());
        assert!(
            check_fit(&b, &n, &[&a]).is_err(),
            "existing pod's rule counts"
        );
        b.namespace = "other".into();
        assert!(check_fit(&a, &n, &[&b]).is_ok());
    }

    #[test]
    fn max_tree_finds_first_fit() {
        let mut t = MaxTree::new();
        for v in [[1, 1, 1], [5, 1, 1], [5, 5, 1], [9, 9, 9]] {
            t.push(v);
        }
        assert_eq!(t.find(0, &[5, 5, 1]), Some(2));
        assert_eq!(t.find(3, &[5, 5, 1]), Some(3));
        assert_eq!(t.find(0, &[10, 0, 0]), None);
        t.set(2, EMPTY);
        assert_eq!(t.find(0, &[5, 5, 1]), Some(3));
    }

    // --- engine vs reference -----------------------------------------------------------------

    fn arb_pod() -> impl Strategy<Value = Pod> {
        (
            0i64..3000,
            0i64..4096,
            prop::option::of(0i64..2),
            0usize..5,
            prop::bool::ANY,
            prop::bool::ANY,
            0usize..3,
        )
            .prop_map(|(cpu, mem_mi, gpu, sel, tolerate, anti, app)| {
                let mut p = Pod {
                    namespace: "ns".into(),
                    name: String::new(),
                    requests: [
                        ("cpu".to_string(), Quantity(cpu)),
                        ("memory".to_string(), Quantity::units(mem_mi << 20)),
                    ]
                    .into(),
                    ..Pod::default()
                };
                if let Some(g) = gpu {
                    p.requests
                        .insert("nvidia.com/gpu".into(), Quantity::units(g));
                }
                match sel {
                    1 => {
                        p.node_selector.insert("pool".into(), "a".into());
                    }
                    2 => {
                        p.required_node_affinity = vec![vec![LabelSelectorRequirement {
                            key: "pool".into(),
                            operator: Some(SelectorOperator::NotIn),
                            values: Some(vec!["a".into()]),
                        }]];
                    }
                    3 => {
                        p.node_selector
                            .insert(keys::LABEL_HOSTNAME.into(), "n2".into());
                    }
                    4 => {
                        p.required_node_affinity = vec![vec![LabelSelectorRequirement {
                            key: keys::LABEL_HOSTNAME.into(),
                            operator: Some(SelectorOperator::NotIn),
                            values: Some(vec!["n0".into()]),
                        }]];
                    }
                    _ => {}
                }
                if tolerate {
                    p.tolerations.push(Toleration {
                        key: "dedicated".into(),
                        exists: true,
                        value: String::new(),
                        effect: None,
                    });
                }
                p.labels.insert("app".into(), format!("app{app}"));
                if anti {
                    p.hostname_anti_affinity = vec![LabelSelector {
                        match_labels: Some([("app".to_string(), format!("app{app}"))].into()),
                        match_expressions: None,
                    }];
                }
                p
            })
    }

    fn arb_node() -> impl Strategy<Value = Node> {
        (
            500i64..8000,
            512i64..16384,
            1i64..12,
            prop::option::of(0i64..3),
            0usize..3,
            prop::bool::ANY,
            prop::bool::ANY,
        )
            .prop_map(|(cpu, mem_mi, pods, gpu, pool, tainted, ready)| {
                let mut n = Node {
                    ready,
                    allocatable: [
                        ("cpu".to_string(), Quantity(cpu)),
                        ("memory".to_string(), Quantity::units(mem_mi << 20)),
                        ("pods".to_string(), Quantity::units(pods)),
                    ]
                    .into(),
                    ..Node::default()
                };
                if let Some(g) = gpu {
                    n.allocatable
                        .insert("nvidia.com/gpu".into(), Quantity::units(g));
                }
                if pool > 0 {
                    n.labels
                        .insert("pool".into(), if pool == 1 { "a" } else { "b" }.into());
                }
                if tainted {
                    n.taints.push(Taint {
                        key: "dedicated".into(),
                        value: None,
                        effect: Some(TaintEffect::NoSchedule),
                    });
                }
                n
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The engine places a pod exactly where the reference `check_fit` says the first
        /// fitting node is, and never overcommits a node.
        #[test]
        fn engine_agrees_with_reference_and_never_overcommits(
            nodes in prop::collection::vec(arb_node(), 1..8),
            mut pods in prop::collection::vec(arb_pod(), 1..30),
        ) {
            let nodes: Vec<Node> = nodes.into_iter().enumerate().map(|(i, mut n)| {
                n.name = format!("n{i}");
                n.labels.insert(keys::LABEL_HOSTNAME.into(), n.name.clone());
                n
            }).collect();
            for (i, p) in pods.iter_mut().enumerate() {
                p.name = format!("p{i:02}");
            }
            let index = ResourceIndex::from_pods(&pods);
            let mut bins = Bins::new(index.len(), true);
            for n in &nodes {
                bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), n.ready && !n.unschedulable);
            }
            let classes = classify(&pods, 0..pods.len(), &index);
            let mut placer = Placer::new(bins, classes.len());
            let mut on: Vec<Vec<&Pod>> = vec![Vec::new(); nodes.len()];
            for (c, class) in classes.iter().enumerate() {
                for &m in &class.members {
                    let p = &pods[m];
                    let expected = nodes.iter().position(|n| {
                        let i = nodes.iter().position(|x| std::ptr::eq(x, n)).unwrap();
                        check_fit(p, n, &on[i]).is_ok()
                    });
                    let got = placer.place(c, p, &class.demand, false).map(|pl| pl.bin);
                    prop_assert_eq!(got, expected, "pod {} ", p.name);
                    if let Some(b) = got {
                        on[b].push(p);
                    }
                }
            }
            for (i, n) in nodes.iter().enumerate() {
                for (name, alloc) in &n.allocatable {
                    let used: i64 = if name == "pods" {
                        on[i].len() as i64 * 1000
                    } else {
                        on[i].iter().filter_map(|p| p.requests.get(name)).map(|q| q.0).sum()
                    };
                    prop_assert!(used <= alloc.0, "node {} overcommitted in {}", n.name, name);
                }
            }
        }

        /// The max-tree's first fit is the first bin at or after `start` covering the need,
        /// as a linear scan finds it, after any updates.
        #[test]
        fn max_tree_find_is_a_linear_scan(
            vals in prop::collection::vec(prop::array::uniform3(0i64..6), 1..40),
            updates in prop::collection::vec((0usize..40, prop::array::uniform3(-1i64..6)), 0..10),
            need in prop::array::uniform3(0i64..6),
            start in 0usize..45,
        ) {
            let mut t = MaxTree::new();
            let mut v = vals.clone();
            for x in &vals {
                t.push(*x);
            }
            for (i, x) in updates {
                if i < v.len() {
                    let x = if x[0] < 0 { EMPTY } else { x };
                    t.set(i, x);
                    v[i] = x;
                }
            }
            let expected = (start..v.len()).find(|&i| covers(&v[i], &need));
            prop_assert_eq!(t.find(start, &need), expected);
        }

        /// Rolling back a trial restores exactly the state before it.
        #[test]
        fn rollback_restores_state(
            nodes in prop::collection::vec(arb_node(), 1..6),
            pods in prop::collection::vec(arb_pod(), 1..20),
            split in 0usize..20,
        ) {
            let index = ResourceIndex::from_pods(&pods);
            let mut bins = Bins::new(index.len(), true);
            for n in &nodes {
                bins.push(&n.labels, &n.taints, index.capacity(&n.allocatable), n.ready);
            }
            let classes = classify(&pods, 0..pods.len(), &index);
            let mut placer = Placer::new(bins, classes.len());
            let flat: Vec<(usize, usize)> = classes.iter().enumerate()
                .flat_map(|(c, k)| k.members.iter().map(move |&m| (c, m))).collect();
            let split = split.min(flat.len());
            for &(c, m) in &flat[..split] {
                let _ = placer.place(c, &pods[m], &classes[c].demand, false);
            }
            let before = (placer.bins.free.clone(), placer.bins.free_ext.clone(), placer.cursors.clone(), placer.bins.enabled.clone(), placer.bins.sig.clone(), placer.bins.run.clone(), placer.bins.run_end.clone(), placer.bins.tree.vals[placer.bins.tree.cap..placer.bins.tree.cap + placer.bins.tree.len].to_vec(), placer.bins.tree.len);
            let cp = placer.begin();
            placer.disable(0);
            let n0 = &nodes[0];
            placer.push_bin(&n0.labels, &n0.taints, &index.capacity(&n0.allocatable), true);
            for &(c, m) in &flat[split..] {
                let _ = placer.place(c, &pods[m], &classes[c].demand, false);
            }
            placer.rollback(cp);
            let after = (placer.bins.free.clone(), placer.bins.free_ext.clone(), placer.cursors.clone(), placer.bins.enabled.clone(), placer.bins.sig.clone(), placer.bins.run.clone(), placer.bins.run_end.clone(), placer.bins.tree.vals[placer.bins.tree.cap..placer.bins.tree.cap + placer.bins.tree.len].to_vec(), placer.bins.tree.len);
            prop_assert_eq!(before, after);
        }
    }
}
