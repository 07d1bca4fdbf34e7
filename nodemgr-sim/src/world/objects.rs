//! What the world holds and how it changes: nodes joining and leaving (with their machines and
//! agents), pods bound, picked and removed, the PodDisruptionBudgets as policies see them, and
//! the node lists handed to the simulated API.

use super::*;

impl World {
    /// Creates a fresh node in `group` at `now`, running the group's desired configuration,
    /// with the group's per-node pods (DaemonSets, static pods). Returns its name.
    pub fn add_node(&mut self, group: &str, now: Timestamp) -> Option<String> {
        self.add_node_with(group, now, true)
    }

    /// [`World::add_node`]; `indexed`: whether the indexes other than the load index are
    /// kept (`false` while [`World::from_scenario`] builds the world, which rebuilds them
    /// all once it is built).
    pub(super) fn add_node_with(
        &mut self,
        group: &str,
        now: Timestamp,
        indexed: bool,
    ) -> Option<String> {
        let g = self.groups.get_mut(group)?;
        let index = g.next_index;
        g.next_index += 1;
        let name = crate::text::concat(&[group, "-", crate::text::digits(index).as_str()]);
        let zone = g.zones[index % g.zones.len()].clone();
        self.add_node_in(group, &name, &zone, now, indexed)
    }

    /// Creates node `name` of `group` in `zone` at `now`, as [`World::add_node`] does (a
    /// machine joining under its own name). Returns its name; `None` for an unknown group.
    pub fn add_node_as(
        &mut self,
        group: &str,
        name: &str,
        zone: &str,
        now: Timestamp,
    ) -> Option<String> {
        self.add_node_in(group, name, zone, now, true)
    }

    /// [`World::add_node_as`]; `indexed` as for [`World::add_node_with`].
    fn add_node_in(
        &mut self,
        group: &str,
        name: &str,
        zone: &str,
        now: Timestamp,
        indexed: bool,
    ) -> Option<String> {
        let g = self.groups.get(group)?;
        let name = name.to_owned();
        let zone = zone.to_owned();
        let mut node = Node {
            name: name.clone(),
            uid: String::new(),
            ready: true,
            last_heartbeat: Some(now),
            allocatable: g.capacity.clone(),
            provider_id: Some(crate::text::concat(&["sim:///", &zone, "/", &name])),
            created: Some(now),
            ..Node::default()
        };
        node.labels.extend(g.labels.clone());
        node.labels
            .insert(keys::LABEL_NODE_GROUP.into(), group.to_owned());
        node.labels
            .insert(keys::LABEL_TOPOLOGY_ZONE.into(), zone.clone());
        node.labels
            .insert(keys::LABEL_HOSTNAME.into(), name.clone());
        if let Some(t) = &g.group.spec.node_type {
            node.labels
                .insert(keys::LABEL_NODE_TYPE.into(), t.as_str().to_owned());
        }
        if g.group.spec.fencing.is_some() {
            node.labels
                .insert(keys::LABEL_FENCING_ENABLED.into(), String::new());
        }
        node.annotations.insert(
            keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(),
            g.desired().to_owned(),
        );
        let generation = g.generations.desired().clone();
        let phase_ms = self
            .rng
            .below(u64::try_from(self.heartbeat.lease_period.0.as_millis()).unwrap_or(u64::MAX));
        node.uid = self.next_uid(&name);
        let replaced = self.nodes.insert(
            name.clone(),
            SimNode {
                last_heartbeat: node.last_heartbeat,
                node: Arc::new(node),
                group: group.to_owned(),
                zone,
                agent: SimAgent::running(&name, &generation, now),
                extra_agent_delay: Duration::ZERO,
                not_ready_until: None,
                dark_since: None,
                dark_until: None,
                lease_phase: Duration::from_millis(phase_ms),
            },
        );
        // A node registered again under its name: its old agent's deadline leaves the index
        // (the new agent has none indexed yet).
        if let Some(t) = replaced.and_then(|old| old.agent.indexed_deadline)
            && let Some(id) = self.nodes.id_of(&name)
        {
            self.index.agent_due.remove(&(t, id));
        }
        let id = self.nodes.id_of(&name);
        if let Some(id) = id {
            self.reindex_load_id(id, Some(group), Some(self.pod_count(&name)));
        }
        let per_node: Vec<usize> = self
            .workloads
            .iter()
            .enumerate()
            .filter(|(_, w)| w.kind.per_node() && w.group.as_deref().is_none_or(|g| g == group))
            .map(|(i, _)| i)
            .collect();
        for wi in per_node {
            let pod_name = crate::text::concat(&[&self.workloads[wi].name, "-", &name]);
            self.bind_pod_at(wi, pod_name, name.clone(), id, None);
        }
        // The agent's first pass: it finds the node up to date.
        self.drive_agent(&name);
        if !indexed {
            return Some(name);
        }
        self.reindex_agent(&name);
        let key = (i64::try_from(phase_ms).unwrap_or(i64::MAX), name.clone());
        let at = self.index.phases.partition_point(|p| *p < key);
        self.index.phases.insert(at, key);
        self.index.fresh.insert(name.clone());
        self.index
            .by_group
            .entry(group.to_owned())
            .or_default()
            .insert(name.clone());
        Some(name)
    }

    /// Creates pod `name` of workload `wi` bound to `node`, Running.
    pub fn bind_pod(&mut self, wi: usize, name: String, node: &str) {
        let id = self.nodes.id_of(node);
        self.bind_pod_at(wi, name, node.to_owned(), id, None);
    }

    /// [`World::bind_pod`] on node `id` (a node of the table; none: nothing happens).
    pub(super) fn bind_pod_id(&mut self, wi: usize, name: String, id: NodeId) {
        let Some(node) = self.nodes.name_of(id).map(str::to_owned) else {
            return;
        };
        self.bind_pod_at(wi, name, node, Some(id), None);
    }

    /// [`World::bind_pod`] on node `node`, whose id in the table is `id` (`None`: not in the
    /// table, not in the load index). `key`: the pod's key when the caller made it already
    /// (`World::pod_key` of the pod, `namespace/name`), else made here.
    pub(super) fn bind_pod_at(
        &mut self,
        wi: usize,
        name: String,
        node: String,
        id: Option<NodeId>,
        key: Option<String>,
    ) {
        let Some(labels) = self.pod_labels(wi) else {
            return;
        };
        let Some(w) = self.workloads.get(wi) else {
            return;
        };
        let mut pod = Pod {
            namespace: w.namespace.clone(),
            name,
            uid: String::new(),
            node_name: None,
            labels,
            owner: w.kind.owner_kind().map(|kind| Owner {
                kind: kind.to_owned(),
                name: w.name.clone(),
            }),
            priority: w.priority,
            requests: parse_capacity(&w.requests),
            phase: PodPhase::Running,
            ..Pod::default()
        };
        if w.kind == WorkloadKind::Static {
            pod.annotations
                .insert(keys::ANNOTATION_MIRROR_POD.into(), "sim".into());
        }
        pod.uid = self.next_uid(&pod.name);
        let key = key.unwrap_or_else(|| pod.key());
        // One lookup of the node's pods for the key and both counts.
        let (before, after) = match self.pods_by_node.get_mut(node.as_str()) {
            Some(set) => {
                let before = set.len();
                set.insert(key.clone());
                (before, set.len())
            }
            None => {
                self.pods_by_node
                    .insert(node.clone(), PodKeys::of(key.clone()));
                (0, 1)
            }
        };
        pod.node_name = Some(node);
        if before != after
            && let Some(id) = id
        {
            self.reindex_load_id(id, None, Some(after));
        }
        self.pods.insert(
            key,
            SimPod {
                pod,
                terminating_until: None,
                workload: Some(wi),
            },
        );
    }

    /// The labels of workload `wi`'s pods: its own, or `app: <name>` when it has none; one
    /// shared map for all its pods (a pod whose labels are changed gets its own copy).
    fn pod_labels(&mut self, wi: usize) -> Option<nodemgr_core::model::StringMap> {
        let w = self.workloads.get(wi)?;
        if let Some(Some(made)) = self.pod_labels.get(wi)
            && made.source == w.labels
            && made.name == w.name
        {
            return Some(made.labels.clone());
        }
        let mut labels = w.labels.clone();
        if labels.is_empty() {
            labels.insert("app".into(), w.name.clone());
        }
        let labels: nodemgr_core::model::StringMap = labels.into();
        if self.pod_labels.len() <= wi {
            self.pod_labels.resize(wi + 1, None);
        }
        if let Some(slot) = self.pod_labels.get_mut(wi) {
            *slot = Some(super::PodLabels {
                source: w.labels.clone(),
                name: w.name.clone(),
                labels: labels.clone(),
            });
        }
        Some(labels)
    }

    /// Where a new pod of workload `wi` goes: a Ready, schedulable, reachable node of its
    /// group with room (`pods` capacity), the one with the fewest pods (ties by name).
    /// Resource requests other than the pod count are not checked.
    pub fn pick_node(&self, wi: usize) -> Option<String> {
        self.pick_node_in(wi).map(|(name, _)| name)
    }

    /// [`World::pick_node`] with the picked node's group (`SimNode::group`).
    pub(super) fn pick_node_in(&self, wi: usize) -> Option<(String, String)> {
        let id = self.pick_node_id(wi)?;
        let name = self.nodes.name_of(id)?;
        let n = self.nodes.get_by_id(id)?;
        Some((name.to_owned(), n.group.clone()))
    }

    /// [`World::pick_node`] as the picked node's id.
    pub(super) fn pick_node_id(&self, wi: usize) -> Option<NodeId> {
        let w = self.workloads.get(wi)?;
        // The group's nodes by pod count and name (the index, unless it is stale or another
        // scheduler edits the pods' bindings): the first one that can take the pod is the
        // least loaded, ties by name, as the scan below finds.
        if let Some(group) = &w.group
            && !self.index.stale
            && !self.scheduler_external
        {
            let slot = self.index.load.slot(group)?;
            return self
                .index
                .load
                .buckets(slot)
                .iter()
                .enumerate()
                .flat_map(|(count, ids)| ids.iter().map(move |id| (count, *id)))
                .find(|(count, id)| {
                    self.nodes
                        .get_by_id(*id)
                        .is_some_and(|n| self.can_take_pod(n, *count))
                })
                .map(|(_, id)| id);
        }
        // The group's nodes from the index (in name order, as the map's), unless it is stale.
        let candidates: Box<dyn Iterator<Item = (&String, &SimNode)>> = match &w.group {
            Some(group) if !self.index.stale => Box::new(
                self.index
                    .by_group
                    .get(group)
                    .into_iter()
                    .flatten()
                    .filter_map(|name| self.nodes.get(name).map(|n| (name, n))),
            ),
            _ => Box::new(self.nodes.iter()),
        };
        candidates
            .filter(|(_, n)| w.group.as_deref().is_none_or(|g| g == n.group))
            .map(|(key, n)| (self.pod_count(&n.node.name), key, n))
            .filter(|(count, _, n)| self.can_take_pod(n, *count))
            .min_by(|a, b| {
                a.0.cmp(&b.0)
                    .then_with(|| a.2.node.name.cmp(&b.2.node.name))
            })
            .and_then(|(_, key, _)| self.nodes.id_of(key))
    }

    /// Whether node `n`, running `count` pods, can take one more: Ready, schedulable,
    /// reachable, below its `pods` capacity.
    fn can_take_pod(&self, n: &SimNode, count: usize) -> bool {
        n.node.ready
            && !n.node.unschedulable
            && !n.is_dark(self.now)
            && n.node
                .allocatable
                .get("pods")
                .is_none_or(|q| i64::try_from(count).unwrap_or(i64::MAX) < q.ceil_units())
    }

    /// Removes pod `key` now; a Deployment or StatefulSet pod comes back after the reschedule
    /// delay (Deployment pods under a new name).
    pub fn remove_pod(&mut self, key: &str) -> Option<SimPod> {
        let pod = self.pods.remove(key)?;
        if let Some(node) = &pod.pod.node_name
            && let Some(set) = self.pods_by_node.get_mut(node)
        {
            let before = set.len();
            set.remove(key);
            let after = set.len();
            self.reindex_load(node, Some(before), Some(after));
        }
        if let Some(wi) = pod.workload
            && let Some(w) = self.workloads.get(wi)
        {
            let name = match w.kind {
                WorkloadKind::StatefulSet => Some(pod.pod.name.clone()),
                WorkloadKind::Deployment => {
                    let suffix = self.rng.below(36u64.pow(5));
                    // `<workload>-<5 base-36 digits>`, the ASCII digits pushed as characters
                    // (no UTF-8 check).
                    let digits = base36(suffix);
                    let mut name = String::with_capacity(w.name.len() + 1 + digits.len());
                    name.push_str(&w.name);
                    name.push('-');
                    name.extend(digits.iter().map(|&b| char::from(b)));
                    Some(name)
                }
                _ => None,
            };
            if let Some(name) = name {
                self.pending_pods.push(PendingPod {
                    at: self.now + self.reschedule_delay,
                    workload: wi,
                    name,
                });
            }
        }
        Some(pod)
    }

    /// Deletes node `name` and, as the pod garbage collector would, its pods.
    pub fn remove_node(&mut self, name: &str) -> Option<SimNode> {
        self.reindex_load(name, Some(self.pod_count(name)), None);
        let id = self.nodes.id_of(name)?;
        let node = self.nodes.remove(name)?;
        if let Some(t) = node.agent.indexed_deadline {
            self.index.agent_due.remove(&(t, id));
        }
        self.index.phases.retain(|(_, n)| n != name);
        self.index.special.remove(name);
        self.index.fresh.remove(name);
        if let Some(names) = self.index.by_group.get_mut(&node.group) {
            names.remove(name);
        }
        let keys: Vec<String> = self
            .pods_by_node
            .remove(name)
            .map(|s| s.into_iter().collect())
            .unwrap_or_default();
        for key in keys {
            self.remove_pod(&key);
        }
        self.agenda.retain(|(_, n)| *n != id);
        Some(node)
    }

    /// The PodDisruptionBudgets with `disruptionsAllowed` as the disruption controller would
    /// compute it now: healthy = Running, bound to a Ready node, not terminating; expected =
    /// covered pods plus covered pods waiting to come back.
    pub fn pdb_views(&self) -> Vec<PodDisruptionBudget> {
        self.pdbs
            .iter()
            .map(|p| {
                let selector = LabelSelector {
                    match_labels: Some(p.selector.clone()),
                    match_expressions: None,
                };
                let covers = |labels: &BTreeMap<String, String>, ns: &str| {
                    ns == p.namespace && p.selector.iter().all(|(k, v)| labels.get(k) == Some(v))
                };
                let mut expected = 0i64;
                let mut healthy = 0i64;
                for sp in self.pods.values() {
                    if covers(&sp.pod.labels, &sp.pod.namespace) {
                        expected += 1;
                        let on_ready = sp
                            .pod
                            .node_name
                            .as_deref()
                            .and_then(|n| self.nodes.get(n))
                            .is_some_and(|n| n.node.ready);
                        if sp.terminating_until.is_none()
                            && sp.pod.phase == PodPhase::Running
                            && on_ready
                        {
                            healthy += 1;
                        }
                    }
                }
                for pending in &self.pending_pods {
                    if let Some(w) = self.workloads.get(pending.workload) {
                        let mut labels = w.labels.clone();
                        if labels.is_empty() {
                            labels.insert("app".into(), w.name.clone());
                        }
                        if covers(&labels, &w.namespace) {
                            expected += 1;
                        }
                    }
                }
                let allowed = match (p.min_available, p.max_unavailable) {
                    (Some(min), _) => healthy - i64::from(min),
                    (None, Some(max)) => i64::from(max) - (expected - healthy),
                    (None, None) => 0,
                };
                PodDisruptionBudget {
                    namespace: p.namespace.clone(),
                    name: p.name.clone(),
                    selector,
                    disruptions_allowed: i32::try_from(allowed.max(0)).unwrap_or(i32::MAX),
                }
            })
            .collect()
    }

    pub(super) fn pod_key(&self, p: &PendingPod) -> String {
        let ns = self
            .workloads
            .get(p.workload)
            .map_or("default", |w| w.namespace.as_str());
        nodemgr_core::model::pod_key(ns, &p.name)
    }

    /// Replaces the machine of `node` (`RollingUpdate`): the node and its pods go now, a fresh
    /// node of the group joins after the provisioning delay. A node already gone is ignored.
    pub fn replace_machine(&mut self, node: &str) {
        let Some(n) = self.remove_node(node) else {
            return;
        };
        self.stats.node_deletions += 1;
        self.record_in(
            "node.replaced",
            Some(n.group.clone()),
            Some(node),
            None,
            format!(
                "machine deleted; a replacement joins in {}s",
                self.provision_delay.as_secs()
            ),
        );
        self.pending_nodes
            .push((self.now + self.provision_delay, n.group));
    }

    /// Nodes an event selection names, in name order.
    pub fn select_nodes(&self, sel: &crate::scenario::NodeSelection) -> Vec<String> {
        if let Some(n) = &sel.node {
            return vec![n.clone()];
        }
        if !sel.nodes.is_empty() {
            return sel.nodes.clone();
        }
        let Some(zone) = &sel.zone else {
            return Vec::new();
        };
        let in_zone = self
            .nodes
            .values()
            .filter(|n| &n.zone == zone)
            .map(|n| n.node.name.clone());
        match sel.count {
            Some(c) => in_zone.take(c).collect(),
            None => in_zone.collect(),
        }
    }

    /// Node views with current readiness and heartbeats, unversioned, in name order.
    pub fn node_views(&self) -> Vec<Node> {
        self.nodes.values().map(SimNode::view).collect()
    }

    /// Every node versioned by the simulated API, in name order (what `list_nodes` returns):
    /// the shared views of [`crate::api::SimApiServer::list_shared`], the same `Arc` for a node
    /// as long as it does not change (their heartbeats may be older than
    /// [`SimNode::last_heartbeat`]).
    pub fn versioned_nodes(&mut self) -> Vec<Arc<Node>> {
        self.api.list_shared(&mut self.nodes)
    }
}
