//! First-fit placement over [`Bins`] ([`Placer`]): a cursor per pod class and mode, node-level
//! rules memoised per class and signature, the topology rules checked through the counters,
//! standby holders preempted when allowed, and the journal that records every change so that a
//! trial (an estimate, a node removal) can be rolled back exactly.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::rc::Rc;

use crate::hash::{FastHash, Fx};
use crate::model::{Pod, Taint};

use super::super::topology::{ClassTopo, Refusal, SearchCtx, TopoState};
use super::bins::{Bins, Held, LOOKUP, reads_hostname};
use super::classes::PodClass;
use super::fit::static_fits;
use super::resources::Demand;

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
            let skipped = match (&topo, &ctx, &mut self.bins.topo) {
                (Some(ct), Some(ctx), Some(state)) => Some(state.skip(ct, ctx, bin)),
                _ => None,
            };
            if let Some((next, for_good)) = skipped {
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
    ///
    /// A bin pushed after `checkpoint` is popped again further down the log, so undoing a
    /// placement on it skips the free-room tree: the popped leaf is never read again
    /// ([`MaxTree::pop`](super::max_tree::MaxTree::pop)), and leaving it as it was keeps the
    /// tree a consistent max-tree. The loser of a scale-up round opens many such bins.
    pub(crate) fn rollback(&mut self, checkpoint: usize) {
        let pushed = self.log.get(checkpoint..).map_or(0, |steps| {
            steps.iter().filter(|s| matches!(s, Undo::Pushed)).count()
        });
        let popped_from = self.bins.len().saturating_sub(pushed);
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
                    if bin < popped_from {
                        self.bins.refresh(bin);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{LabelSelectorRequirement, Node, SelectorOperator, keys};
    use crate::scaling::placement::classes::classify;
    use crate::scaling::placement::fit::check_fit;
    use crate::scaling::placement::resources::ResourceIndex;
    use crate::scaling::placement::test_support::{arb_node, arb_pod, node, pod};
    use proptest::prelude::*;

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
