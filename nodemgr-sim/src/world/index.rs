//! The indexes that make an instant cost what changes in it: each agent's next deadline,
//! terminating pods by end of grace period, and the next instant at which the world changes by
//! itself; `invalidate_indexes` for code that changed the world behind their back.

use super::liveness::{heartbeat_at, is_special};
use super::*;

impl World {
    /// Re-indexes `name`'s agent deadline after its agent changed.
    pub(crate) fn reindex_agent(&mut self, name: &str) {
        let Some((id, n)) = self.nodes.get_mut_with_id(name) else {
            return;
        };
        reindex_deadline(&mut self.index.agent_due, id, &mut n.agent);
    }

    /// Changes the node at position `at` in name order with `change` (which also reads the
    /// groups) and, when it says its agent changed (`true`), re-indexes the agent's deadline.
    /// The node's id; `None` when there is no such node.
    pub(crate) fn update_agent_at(
        &mut self,
        at: usize,
        change: impl FnOnce(&BTreeMap<String, SimGroup>, &mut SimNode) -> bool,
    ) -> Option<NodeId> {
        let (_, id, n) = self.nodes.entry_at_mut(at)?;
        if change(&self.groups, n) {
            reindex_deadline(&mut self.index.agent_due, id, &mut n.agent);
        }
        Some(id)
    }

    /// Rebuilds the indexes from the nodes and pods (after [`World::invalidate_indexes`]);
    /// the next instant refreshes every node.
    pub(super) fn rebuild_indexes(&mut self) {
        let mut index = WorldIndex::default();
        // In name order: the sets are built from sorted lists, each load bucket filled in the
        // order it keeps.
        let mut fresh = Vec::with_capacity(self.nodes.len());
        let mut by_group: BTreeMap<String, Vec<String>> = BTreeMap::new();
        // Only the agents' notes change here, which the simulated API does not version.
        for (name, id, n) in self.nodes.iter_mut_unlogged() {
            let deadline = n.agent.next_deadline();
            n.agent.indexed_deadline = deadline;
            if let Some(t) = deadline {
                index.agent_due.insert((t, id));
            }
            if is_special(n) {
                index.special.insert(name.clone());
            }
            let phase = i64::try_from(n.lease_phase.as_millis()).unwrap_or(i64::MAX);
            index.phases.push((phase, name.clone()));
            fresh.push(name.clone());
            match by_group.get_mut(n.group.as_str()) {
                Some(names) => names.push(name.clone()),
                None => {
                    by_group.insert(n.group.clone(), vec![name.clone()]);
                }
            }
            let count = self.pods_by_node.get(name.as_str()).map_or(0, PodKeys::len);
            let slot = index.load.slot_or_insert(&n.group);
            index.load.append(id, slot, count);
        }
        index.phases.sort();
        index.fresh = fresh.into_iter().collect();
        index.by_group = by_group
            .into_iter()
            .map(|(group, names)| (group, names.into_iter().collect()))
            .collect();
        // Dormant agents whose Node or bundle changed behind the world's back poll at the
        // first poll that sees it.
        let unnoticed: Vec<(String, Timestamp)> = self
            .nodes
            .iter()
            .filter_map(|(name, n)| {
                let due = self.unnoticed_agent_change(n)?;
                Some((name.clone(), due))
            })
            .collect();
        for (name, due) in unnoticed {
            self.set_dormant_due(&name, due);
            // A dormant agent not yet due has no deadline: none was indexed above.
            if let Some(n) = self.nodes.get_mut(&name) {
                n.agent.indexed_deadline = Some(due);
            }
            if let Some(id) = self.nodes.id_of(&name) {
                index.agent_due.insert((due, id));
            }
        }
        // Into an ordered set: the pods in any order.
        for (key, p) in self.pods.iter_unordered() {
            if let Some(u) = p.terminating_until {
                index.terminating.insert((u, key.clone()));
            }
        }
        self.index = index;
    }

    /// Moves `node` from `old` to `new` pods in its group's load index (`None`: not there).
    pub(super) fn reindex_load(&mut self, node: &str, old: Option<usize>, new: Option<usize>) {
        if old == new {
            return;
        }
        if let Some(id) = self.nodes.id_of(node) {
            self.reindex_load_id(id, None, new);
        }
    }

    /// Moves node `id` to `new` pods in its group's load index (`None`: out of it), from
    /// where the index has it. `group`: the node's group (`SimNode::group`) when the caller
    /// knows it and it may not be the one the index has (a node registered again), else
    /// looked up when the node is not indexed yet.
    pub(super) fn reindex_load_id(&mut self, id: NodeId, group: Option<&str>, new: Option<usize>) {
        let to = match new {
            None => None,
            Some(count) => {
                let slot = match (self.index.load.place(id), group) {
                    (Some((slot, _)), None) => slot,
                    (_, Some(group)) => self.index.load.slot_or_insert(group),
                    (None, None) => match self.nodes.get_by_id(id) {
                        Some(n) => self.index.load.slot_or_insert(&n.group),
                        None => return,
                    },
                };
                Some((slot, count))
            }
        };
        self.index.load.set(&self.nodes, id, to);
    }

    /// The pod count of `node` (`pods_by_node`).
    pub(super) fn pod_count(&self, node: &str) -> usize {
        self.pods_by_node.get(node).map_or(0, PodKeys::len)
    }

    /// Declares that nodes' agents or fault fields (`not_ready_until`, `dark_since`,
    /// `dark_until`) or pods' `terminating_until` were changed directly rather than through
    /// the world's methods: the world re-reads them all before it next needs them. The run
    /// loop calls this after every controller added with [`crate::Simulation::add_controller`]
    /// and when it hands out the world mutably.
    pub fn invalidate_indexes(&mut self) {
        self.index.stale = true;
    }

    /// Declares that node `name`'s fault fields (`not_ready_until`, `dark_since`,
    /// `dark_until`) were set: from now on its readiness and deadlines are looked at at every
    /// instant.
    pub fn touch_node(&mut self, name: &str) {
        if self.nodes.get(name).is_some_and(is_special) {
            self.index.special.insert(name.to_owned());
            // A dark node's agent stops; its polls are simulated one by one again.
            self.agent_inputs_changed(name);
        }
    }

    /// Pod `key` terminates (its grace period runs) until `until`.
    pub fn terminate_pod(&mut self, key: &str, until: Timestamp) {
        if let Some(p) = self.pods.get_mut(key) {
            p.terminating_until = Some(until);
            self.index.terminating.insert((until, key.to_owned()));
        }
    }

    /// The earliest future time at which the world changes by itself (agent wake-ups, pods
    /// finishing termination or coming back, nodes provisioned, readiness flips of dark or
    /// scripted nodes, fault windows ending), strictly after `now`.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        if self.index.stale {
            return self.next_deadline_scan();
        }
        let now = self.now;
        let after_now = (now + Duration::from_millis(1), String::new());
        let after_now_id = (now + Duration::from_millis(1), NodeId::MIN);
        let mut next: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| {
            if t > now && next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        self.queued_deadlines(&mut consider);
        if let Some((t, _)) = self.index.terminating.range(&after_now..).find(|(t, key)| {
            self.pods
                .get(key)
                .is_some_and(|p| p.terminating_until == Some(*t))
        }) {
            consider(*t);
        }
        for name in &self.index.special {
            if let Some(n) = self.nodes.get(name) {
                self.node_deadlines(n, &mut consider);
            }
        }
        if let Some((t, _)) = self.index.agent_due.range(&after_now_id..).next() {
            consider(*t);
        }
        next
    }

    /// The instants queued outside the indexes: the scenario's agenda, pods and nodes due.
    fn queued_deadlines(&self, consider: &mut impl FnMut(Timestamp)) {
        if let Some((t, _)) = self.agenda.iter().next() {
            consider(*t);
        }
        self.pending_pods.iter().for_each(|p| consider(p.at));
        self.pending_nodes.iter().for_each(|(t, _)| consider(*t));
    }

    /// The future instants of one node's own: scripted readiness, darkness and the heartbeat
    /// deadline it brings, its agent.
    fn node_deadlines(&self, n: &SimNode, consider: &mut impl FnMut(Timestamp)) {
        let grace = self.heartbeat.grace_period.0;
        let period = self.heartbeat.lease_period.0;
        if let Some(u) = n.not_ready_until {
            consider(u);
        }
        if let Some(s) = n.dark_since {
            consider(s);
            consider(
                heartbeat_at(period, self.start, n, self.now) + grace + Duration::from_millis(1),
            );
        }
        if let Some(u) = n.dark_until {
            consider(u);
        }
        if let Some(t) = n.agent.next_deadline() {
            consider(t);
        }
        if let Some(t) = self.unnoticed_agent_change(n) {
            consider(t);
        }
    }

    /// [`World::next_deadline`] by a scan of every node and pod (while the indexes are stale).
    fn next_deadline_scan(&self) -> Option<Timestamp> {
        let now = self.now;
        let mut next: Option<Timestamp> = None;
        let mut consider = |t: Timestamp| {
            if t > now && next.is_none_or(|n| t < n) {
                next = Some(t);
            }
        };
        self.queued_deadlines(&mut consider);
        self.pods
            .values()
            .filter_map(|p| p.terminating_until)
            .for_each(&mut consider);
        for n in self.nodes.values() {
            self.node_deadlines(n, &mut consider);
        }
        next
    }

    /// Takes the pods whose termination ended by now out of the index, in key order.
    pub(super) fn take_terminated(&mut self, now: Timestamp) -> BTreeSet<String> {
        let bound = now + Duration::from_millis(1);
        // Most instants none is due: the index is left as it is (no split, no new set).
        if self
            .index
            .terminating
            .first()
            .is_none_or(|(t, _)| *t >= bound)
        {
            return BTreeSet::new();
        }
        let later = self.index.terminating.split_off(&(bound, String::new()));
        let due = std::mem::replace(&mut self.index.terminating, later);
        due.into_iter()
            .filter(|(t, key)| {
                self.pods
                    .get(key)
                    .is_some_and(|p| p.terminating_until == Some(*t))
            })
            .map(|(_, key)| key)
            .collect()
    }

    /// How many nodes group `group` has (`SimNode::group`), from the group index; `None`
    /// while the indexes are stale ([`World::invalidate_indexes`]), when only a count over
    /// [`World::nodes`] answers. Debug builds check [`World::indexed_group_sizes`] against it.
    #[cfg(debug_assertions)]
    pub(crate) fn indexed_group_size(&self, group: &str) -> Option<usize> {
        if self.index.stale {
            return None;
        }
        Some(self.index.by_group.get(group).map_or(0, BTreeSet::len))
    }

    /// How many nodes each group of [`World::groups`] has, in its order, from the group index
    /// (`None` while the indexes are stale, as `World::indexed_group_size` per group): one
    /// walk of the group index beside the groups (both in name order) instead of a search per
    /// group.
    pub(crate) fn indexed_group_sizes(&self) -> Option<Vec<usize>> {
        if self.index.stale {
            return None;
        }
        let mut indexed = self.index.by_group.iter().peekable();
        let sizes = self
            .groups
            .keys()
            .map(|group| {
                while indexed
                    .next_if(|(name, _)| name.as_str() < group.as_str())
                    .is_some()
                {}
                indexed
                    .next_if(|(name, _)| *name == group)
                    .map_or(0, |(_, names)| names.len())
            })
            .collect();
        Some(sizes)
    }
}

/// Moves node `id`'s entry in the agents' deadlines (`agent_due`) from the deadline indexed
/// for `agent` ([`SimAgent::indexed_deadline`]) to its current one.
pub(crate) fn reindex_deadline(
    agent_due: &mut BTreeSet<(Timestamp, NodeId)>,
    id: NodeId,
    agent: &mut SimAgent,
) {
    let new = agent.next_deadline();
    let old = agent.indexed_deadline;
    if old == new {
        return;
    }
    agent.indexed_deadline = new;
    if let Some(t) = old {
        agent_due.remove(&(t, id));
    }
    if let Some(t) = new {
        agent_due.insert((t, id));
    }
}

#[cfg(test)]
mod tests {
    //! The indexes kept in place by the world's methods are those a plain reading of the
    //! nodes gives, at every instant of random runs: the agents' deadlines (each agent's
    //! `next_deadline`, and the deadline noted on the agent, `SimAgent::indexed_deadline`) and
    //! the groups' nodes by pod count (which callers that know a node's group update without
    //! looking the node up).

    use super::*;
    use crate::{Scenario, Simulation};
    use proptest::prelude::*;
    use serde_json::json;

    /// A random cluster: per group its node count, approval mode and change impact; lease
    /// period; faults `(kind, group, node, at, for)`.
    type Case = (Vec<(usize, u8, u8)>, u64, Vec<(u8, usize, usize, u64, u64)>);

    fn scenario((groups, lease_s, faults): &Case) -> Scenario {
        let mut gs = Vec::new();
        let mut workloads =
            vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
        let mut events = Vec::new();
        for (i, (nodes, mode, impact)) in groups.iter().enumerate() {
            let name = format!("g{i}");
            let mode = ["Automatic", "Manual", "RollingUpdate"][usize::from(*mode % 3)];
            let impact = ["none", "kubelet-restart", "disruptive"][usize::from(*impact % 3)];
            gs.push(json!({
                "name": name, "nodes": nodes, "zones": ["zone-a", "zone-b"],
                "spec": {"nodeType": "CloudPermanent", "update": {"maxConcurrent": 2},
                         "disruptions": {"approvalMode": mode}},
            }));
            workloads.push(json!({"name": format!("app{i}"), "kind": "Deployment",
                                  "replicas": nodes * 2, "group": name,
                                  "terminationGracePeriod": "15s"}));
            events.push(json!({"at": "60s", "change": {"group": name, "impact": impact}}));
            if mode == "Manual" {
                events.push(json!({"at": "400s", "approveDisruption": {"group": name}}));
            }
        }
        for (kind, g, n, at, dur) in faults {
            let gi = g % groups.len();
            let sel =
                json!({"node": format!("g{gi}-{}", n % groups[gi].0), "for": format!("{dur}s")});
            events.push(match kind % 2 {
                0 => json!({"at": format!("{at}s"), "nodeNotReady": sel}),
                _ => json!({"at": format!("{at}s"), "nodeDark": sel}),
            });
        }
        let value = json!({
            "name": "index", "duration": "30m", "reconcilePeriod": "10s",
            "agent": {"delay": "20s", "jitter": "7s", "kubeletRestart": "5s", "reboot": "30s"},
            "heartbeat": {"leasePeriod": format!("{lease_s}s"), "gracePeriod": "20s"},
            "groups": gs, "workloads": workloads, "events": events,
        });
        match Scenario::from_yaml(&value.to_string()) {
            Ok(s) => s,
            Err(e) => panic!("generated scenario rejected: {e}\n{value:#}"),
        }
    }

    /// The differences between the world's indexes and a plain reading of its nodes.
    fn index_errors(w: &World) -> Vec<String> {
        if w.index.stale {
            return Vec::new();
        }
        let mut errors = Vec::new();
        let due: BTreeSet<(Timestamp, NodeId)> = w
            .nodes
            .iter()
            .filter_map(|(name, n)| Some((n.agent.next_deadline()?, w.nodes.id_of(name)?)))
            .collect();
        if due != w.index.agent_due {
            errors.push(format!("agent_due {:?} != {:?}", w.index.agent_due, due));
        }
        for (name, n) in &w.nodes {
            if n.agent.indexed_deadline != n.agent.next_deadline() {
                errors.push(format!(
                    "{name}: indexed deadline {:?}",
                    n.agent.indexed_deadline
                ));
            }
        }
        let mut load: BTreeMap<String, BTreeSet<(usize, String)>> = BTreeMap::new();
        for (name, n) in &w.nodes {
            load.entry(n.group.clone())
                .or_default()
                .insert((w.pod_count(name), name.clone()));
        }
        let mut indexed: BTreeMap<String, BTreeSet<(usize, String)>> = BTreeMap::new();
        let mut entries = 0usize;
        for (g, slot) in w.index.load.slots() {
            for (count, ids) in w.index.load.buckets(slot).iter().enumerate() {
                let positions: Vec<Option<usize>> =
                    ids.iter().map(|id| w.nodes.position_of_id(*id)).collect();
                if positions.windows(2).any(|p| p[0] >= p[1]) || positions.contains(&None) {
                    errors.push(format!(
                        "load: {g}'s bucket {count} out of order: {positions:?}"
                    ));
                }
                for id in ids {
                    entries += 1;
                    if w.index.load.place(*id) != Some((slot, count)) {
                        errors.push(format!(
                            "load: {id:?} placed at {:?}",
                            w.index.load.place(*id)
                        ));
                    }
                    let name = w.nodes.name_of(*id).unwrap_or("<gone>").to_owned();
                    indexed.entry(g.clone()).or_default().insert((count, name));
                }
            }
        }
        if entries != w.nodes.len() {
            errors.push(format!(
                "load: {entries} entries for {} nodes",
                w.nodes.len()
            ));
        }
        if load != indexed {
            errors.push(format!("load {indexed:?} != {load:?}"));
        }
        errors
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn indexes_match_a_plain_reading_at_every_instant(
            groups in prop::collection::vec((1usize..=5, any::<u8>(), any::<u8>()), 1..=3),
            lease_s in prop::sample::select(vec![5u64, 10, 40]),
            faults in prop::collection::vec((any::<u8>(), 0usize..3, 0usize..5, 0u64..1200, 20u64..400), 0..4),
            seed in 0u64..1000,
        ) {
            let s = scenario(&(groups, lease_s, faults));
            let mut sim = Simulation::new(&s, seed);
            let errors = index_errors(sim.world());
            prop_assert!(errors.is_empty(), "at the start: {:?}", errors);
            while sim.step() {
                let errors = index_errors(sim.world());
                prop_assert!(errors.is_empty(), "at {:?}: {:?}", sim.now(), errors);
            }
        }
    }
}
