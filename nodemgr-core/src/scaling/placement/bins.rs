//! The per-node state of one simulation ([`Bins`]): each bin's labels and taints (interned
//! into static signatures and runs of equal ones), free and preemptible room, the pods that
//! hostname anti-affinity needs, the free-room tree, and the topology counters; and whether a
//! pod fits a bin by the rules that change as pods come and go.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use crate::hash::{FastHash, Fx};
use crate::model::{Pod, Taint, keys};

use super::super::topology::{TopoState, Universe};
use super::fit::static_fits;
use super::max_tree::{EMPTY, MaxTree};
use super::resources::Demand;

/// A standby-holder pod occupying part of a bin, preemptible by real pods.
#[derive(Debug, Clone)]
pub(crate) struct Held<'a> {
    pub(crate) pod: &'a Pod,
    pub(crate) demand: Demand,
}

/// The topology profile id meaning "look it up from the pod".
pub(super) const LOOKUP: u32 = u32::MAX;

/// The bins (nodes) of one simulation and what is left on them.
#[derive(Debug, Clone)]
pub(crate) struct Bins<'a> {
    pub(super) n_ext: usize,
    pub(super) labels: Vec<&'a BTreeMap<String, String>>,
    pub(super) taints: Vec<&'a [Taint]>,
    pub(super) enabled: Vec<bool>,
    pub(super) free: Vec<[i64; 3]>,
    pub(super) free_ext: Vec<i64>,
    pub(super) held: Vec<[i64; 3]>,
    pub(super) held_ext: Vec<i64>,
    pub(super) holders: BTreeMap<usize, Vec<Held<'a>>>,
    /// Every pod on each bin, kept only when some pod to place has anti-affinity terms.
    pods: Vec<Vec<&'a Pod>>,
    /// Pods with anti-affinity terms on each bin (always kept).
    anti_pods: Vec<Vec<&'a Pod>>,
    track_all_pods: bool,
    pub(super) tree: MaxTree,
    /// Static signature of each bin: bins with the same labels (but for the hostname) and
    /// taints share one, so a pod's node-level rules are evaluated once per signature.
    pub(super) sig: Vec<u32>,
    /// Run of each bin: consecutive bins with the same signature; `run_end[run]` is one past
    /// its last bin. A search skips a whole run once one bin of it fails the static rules.
    pub(super) run: Vec<u32>,
    pub(super) run_end: Vec<usize>,
    sigs: Rc<RefCell<SigTable<'a>>>,
    /// A bin pushed with each label set (by address), shared by clones: a new bin with the
    /// same labels copies its zone and node-filter answers (checked to be the same labels
    /// still, so a stale entry is only a miss).
    like: Rc<RefCell<HashMap<usize, usize, FastHash>>>,
    /// Topology spread and pod (anti-)affinity counters, when some pod has such constraints.
    pub(super) topo: Option<TopoState>,
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
pub(super) fn reads_hostname(pod: &Pod) -> bool {
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
    pub(super) fn pop_last(&mut self) {
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

    pub(super) fn refresh(&mut self, bin: usize) {
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
    pub(super) fn occupy_profiled(
        &mut self,
        bin: usize,
        pod: &'a Pod,
        demand: &Demand,
        profile: u32,
    ) {
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

    pub(super) fn untrack(&mut self, bin: usize, pod: &'a Pod, profile: u32) {
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

    pub(super) fn give(&mut self, bin: usize, demand: &Demand) {
        for d in 0..3 {
            self.free[bin][d] += demand.core[d];
        }
        for &(i, v) in &demand.ext {
            self.free_ext[bin * self.n_ext + i as usize] += v;
        }
    }

    /// Whether `demand` fits the free room of `bin` (plus its preemptible room when `preempt`).
    pub(super) fn room_for(&self, bin: usize, demand: &Demand, preempt: bool) -> bool {
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
    pub(super) fn fits_dynamic(
        &self,
        bin: usize,
        pod: &Pod,
        demand: &Demand,
        preempt: bool,
    ) -> bool {
        self.enabled[bin] && self.room_for(bin, demand, preempt) && self.anti_ok(bin, pod)
    }
}
