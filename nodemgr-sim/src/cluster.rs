//! The cluster port ([`nodemgr_core::ports`]) over the simulated [`World`]: what the update
//! executor (and any other port-driven executor) talks to in the simulator. Injected API
//! errors ([`crate::scenario::ApiErrorsSpec`]) and eviction refusals apply here; the calls
//! themselves record nothing in the timeline (the controllers do), only [`crate::SimStats`].
//!
//! Nodes carry resourceVersions and `list_nodes` reads the simulated watch cache, which lags
//! while a [`crate::scenario::WatchLagSpec`] window is open; `node_changes_since` answers what
//! changed in that cache as a difference (a resync while it lags); `list_nodes_fresh` reads the world;
//! a node patch with a resourceVersion precondition answers [`ClusterError::Conflict`] when the
//! node changed since, as the API server does ([`crate::api`]).
//!
//! The machine port ([`MachineApi`]) keeps Instances and standby-holder Deployments in the
//! world ([`World::instances`], [`World::standby_holders`]) and writes the group's
//! `status.lastMachineFailures` and `status.standby`; injected API errors apply to it as to
//! the rest (`List` for its reads, `Patch` for its writes, `Delete` for its deletions).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use nodemgr_core::drain::is_evictable;
use nodemgr_core::fencing::CacheHealth;
use nodemgr_core::machines::{ANNOTATION_PROVIDER_ID, MachinePhase};
use nodemgr_core::model::{
    Instance, InstanceCurrentStatus, MachineFailure, Node, NodeGroup, NodeGroupStatus, ObjectMeta,
    ObjectReference, Pod, PodDisruptionBudget, Timestamp, keys,
};
use nodemgr_core::ports::cluster::malformed_pod_key;
use nodemgr_core::ports::{
    AppliedHolder, ClusterError, ClusterRead, EventApi, EvictionResult, MachineApi, NewInstance,
    NodeApi, NodeChanges, NodeHealthRead, NodePatch, NodePod, NodeRevision, PodApi, PodRef,
    Precondition, RecordedEvent, StandbyHolder,
};

use crate::api::SimApiServer;
use crate::scenario::{ErrorKind, Operation};
use crate::world::{SimNode, World};

/// The cluster port over a borrowed world. Build one per controller step:
/// `SimCluster::new(&mut world)`.
#[derive(Debug)]
pub struct SimCluster<'w> {
    world: Mutex<&'w mut World>,
    /// Answer the batched and shared calls as the port's defaults do
    /// ([`SimCluster::plain`]).
    plain: bool,
}

impl<'w> SimCluster<'w> {
    /// The port over `world`.
    pub fn new(world: &'w mut World) -> Self {
        Self {
            world: Mutex::new(world),
            plain: false,
        }
    }

    /// The port answering `evict_pods` and `configuration_checksums_shared` as the traits'
    /// defaults do when `plain` (one `evict_pod` per key, in order; a new map of the
    /// checksums), for tests comparing the simulator's shortcuts with them.
    pub fn plain(mut self, plain: bool) -> Self {
        self.plain = plain;
        self
    }

    fn lock(&self) -> MutexGuard<'_, &'w mut World> {
        // A panic while holding the lock can only come from a bug in this file; the world is
        // still consistent enough to read, so recover the guard.
        self.world
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every node versioned, as owned views with current heartbeats.
    fn owned_views(world: &mut World) -> Vec<Node> {
        world.renew_heartbeats();
        let shared = world.versioned_nodes();
        shared
            .iter()
            .zip(world.nodes.values())
            .map(|(view, n)| {
                let mut node = Node::clone(view);
                node.last_heartbeat = n.last_heartbeat;
                node
            })
            .collect()
    }

    /// Checks and applies a node patch (the API server's side of `patch_node`): the simulated
    /// API and the patched node, not yet versioned.
    fn apply_patch<'a>(
        w: &'a mut World,
        name: &str,
        patch: &NodePatch,
    ) -> Result<(&'a mut SimApiServer, &'a mut SimNode), ClusterError> {
        Self::check(w, Operation::Patch, format_args!("patch node {name}"))?;
        let api = &mut w.api;
        let Some(n) = w.nodes.get_mut(name) else {
            return Err(ClusterError::not_found(format!("node {name}")));
        };
        if let Some(expected) = &patch.resource_version {
            let current = api.version_of_shared(&n.node);
            if current != *expected {
                return Err(ClusterError::conflict(format!(
                    "node {name}: the object has been modified (resourceVersion {current}, not {expected}); please apply your changes to the latest version and try again"
                )));
            }
        }
        patch.apply_to(Arc::make_mut(&mut n.node));
        Ok((api, n))
    }

    /// Fails with the injected error when the scenario's `apiErrors` cover `op` now (the
    /// message is formatted only then).
    fn check(
        world: &mut World,
        op: Operation,
        what: std::fmt::Arguments<'_>,
    ) -> Result<(), ClusterError> {
        match world.fault(op) {
            None => Ok(()),
            Some(kind) => {
                world.stats.api_errors += 1;
                let message = format!("injected failure of {what}");
                Err(match kind {
                    ErrorKind::Unavailable => ClusterError::unavailable(message),
                    ErrorKind::TooManyRequests => ClusterError::too_many_requests(message),
                    ErrorKind::Conflict => ClusterError::conflict(message),
                    ErrorKind::Other => ClusterError::other(message),
                })
            }
        }
    }
}

/// Every group's node count, over every node (`SimNode::group`).
fn count_by_group(w: &World) -> BTreeMap<&str, i64> {
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    // Nodes are in name order, mostly `<group>-<n>`: count runs of one group at once.
    let mut run: Option<(&str, i64)> = None;
    for n in w.nodes.values() {
        match &mut run {
            Some((group, count)) if *group == n.group => *count = count.saturating_add(1),
            _ => {
                if let Some((group, count)) = run.replace((n.group.as_str(), 1)) {
                    let c = counts.entry(group).or_insert(0);
                    *c = c.saturating_add(count);
                }
            }
        }
    }
    if let Some((group, count)) = run {
        let c = counts.entry(group).or_insert(0);
        *c = c.saturating_add(count);
    }
    counts
}

/// Each group's stand-in for `status.desired` (in the order of [`World::groups`]): `None`
/// when the group's status carries one, else its node count. The simulator runs no status
/// controller. Its stand-in for `status.desired` is the group's node count: every machine the
/// world runs is wanted, so the CloudEphemeral whole-group gate (docs/deckhouse.md §3.2)
/// reduces to the all-Ready gate, as it did before the gate held groups without `desired`.
/// The count comes from the world's group index, unless it is stale (a foreign controller
/// ran): then every node is counted.
fn group_sizes(w: &World) -> Vec<Option<i64>> {
    // The index is stale for every group or for none; when current, read beside the groups.
    let indexed = w.indexed_group_sizes();
    let counted = indexed.is_none().then(|| count_by_group(w));
    #[cfg(debug_assertions)]
    if counted.is_none() {
        let all = count_by_group(w);
        for name in w.groups.keys() {
            let indexed = w
                .indexed_group_size(name)
                .and_then(|n| i64::try_from(n).ok());
            debug_assert_eq!(indexed, Some(all.get(name.as_str()).copied().unwrap_or(0)));
        }
        // The walk beside the groups answers as a search per group.
        let searched: Option<Vec<usize>> = w
            .groups
            .keys()
            .map(|name| w.indexed_group_size(name))
            .collect();
        debug_assert_eq!(indexed, searched);
    }
    let indexed = indexed.unwrap_or_default();
    w.groups
        .iter()
        .enumerate()
        .map(|(at, (name, g))| {
            let has_desired = g.group.status.as_ref().is_some_and(|s| s.desired.is_some());
            (!has_desired).then(|| match &counted {
                Some(counts) => counts.get(name.as_str()).copied().unwrap_or(0),
                None => indexed
                    .get(at)
                    .map_or(0, |&n| i64::try_from(n).unwrap_or(i64::MAX)),
            })
        })
        .collect()
}

/// A group as the port lists it: with a status, whose `desired` is `size` when given
/// ([`group_sizes`]).
fn listed_group(group: &NodeGroup, size: Option<i64>) -> NodeGroup {
    let mut group = group.clone();
    let status = group.status.get_or_insert_with(NodeGroupStatus::default);
    if let Some(size) = size {
        status.desired = Some(size);
    }
    group
}

/// Runs a port future to completion. The simulator's futures never wait on anything, so this
/// only polls (with a no-op waker) until ready; `None` if a future stays pending for a million
/// polls, which would be a bug in a port implementation.
pub fn block_on<F: Future>(future: F) -> Option<F::Output> {
    nodemgr_core::ports::block_on_ready(future)
}

#[async_trait]
impl ClusterRead for SimCluster<'_> {
    async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list node groups"))?;
        let sizes = group_sizes(&w);
        Ok(w.groups
            .values()
            .zip(sizes)
            .map(|(g, size)| listed_group(&g.group, size))
            .collect())
    }

    async fn list_node_groups_shared(&self) -> Result<Vec<Arc<NodeGroup>>, ClusterError> {
        let mut guard = self.lock();
        Self::check(
            &mut guard,
            Operation::List,
            format_args!("list node groups"),
        )?;
        let w: &mut World = &mut guard;
        let sizes = group_sizes(w);
        // The groups listed before, shared again while they (and their counts) are the same.
        Ok(w.api.shared_groups(
            w.groups
                .values()
                .zip(sizes)
                .map(|(g, size)| (&g.group, size)),
            listed_group,
        ))
    }

    async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list nodes"))?;
        if let Some(cached) = w.api.cached_nodes(w.now) {
            return Ok(cached);
        }
        Ok(Self::owned_views(&mut w))
    }

    async fn list_nodes_fresh(&self) -> Result<Vec<Node>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list nodes"))?;
        Ok(Self::owned_views(&mut w))
    }

    async fn list_nodes_shared(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list nodes"))?;
        if let Some(cached) = w.api.cached_nodes(w.now) {
            return Ok(cached.into_iter().map(Arc::new).collect());
        }
        w.renew_heartbeats();
        Ok(w.versioned_nodes())
    }

    async fn list_nodes_fresh_shared(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list nodes"))?;
        w.renew_heartbeats();
        Ok(w.versioned_nodes())
    }

    async fn node_changes_since(
        &self,
        since: Option<NodeRevision>,
    ) -> Result<NodeChanges, ClusterError> {
        let mut guard = self.lock();
        Self::check(&mut guard, Operation::List, format_args!("list nodes"))?;
        let w: &mut World = &mut guard;
        // A lagging cache shows the past: a whole list, from which no revision continues.
        if let Some(cached) = w.api.cached_nodes(w.now) {
            return Ok(NodeChanges::resync(
                cached.into_iter().map(Arc::new).collect(),
            ));
        }
        if !w.live_heartbeats {
            return Ok(w.api.changes_since(since, &mut w.nodes));
        }
        // Heartbeats computed for the nodes the feed makes views of, not renewed for all.
        let (api, mut nodes) = w.live_nodes();
        Ok(api.changes_since(since, &mut nodes))
    }

    async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list pods"))?;
        Ok(w.pods.values().map(|p| p.pod.clone()).collect())
    }

    async fn list_pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list pods"))?;
        Ok(pods_on_node(&w, node, |_, pod| pod.clone()))
    }

    async fn list_node_pods(&self, node: &str) -> Result<Vec<NodePod>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list pods"))?;
        // `list_pods_on_node` mapped, without copying the pods: the index's keys are the
        // pods' `namespace/name`.
        Ok(pods_on_node(&w, node, |key, pod| NodePod {
            key: key.to_owned(),
            uid: pod.uid.clone(),
            evictable: is_evictable(pod),
        }))
    }

    async fn list_pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::List,
            format_args!("list PodDisruptionBudgets"),
        )?;
        Ok(w.pdb_views())
    }

    async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::List,
            format_args!("read configuration checksums"),
        )?;
        Ok(w.groups
            .iter()
            .map(|(name, g)| (name.clone(), g.desired().to_owned()))
            .collect())
    }

    async fn configuration_checksums_shared(
        &self,
    ) -> Result<Arc<BTreeMap<String, String>>, ClusterError> {
        if self.plain {
            return Ok(Arc::new(self.configuration_checksums().await?));
        }
        let mut guard = self.lock();
        Self::check(
            &mut guard,
            Operation::List,
            format_args!("read configuration checksums"),
        )?;
        let w: &mut World = &mut guard;
        // The map answered before, shared again while no group's checksum changed.
        Ok(w.api.shared_checksums(
            w.groups
                .iter()
                .map(|(name, g)| (name.as_str(), g.desired())),
        ))
    }
}

#[async_trait]
impl NodeApi for SimCluster<'_> {
    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<Node, ClusterError> {
        let mut guard = self.lock();
        let w: &mut World = &mut guard;
        w.renew_heartbeats();
        let (api, n) = Self::apply_patch(w, name, patch)?;
        let mut view = Node::clone(&n.node);
        view.last_heartbeat = n.last_heartbeat;
        view.resource_version = api.version_of_shared(&n.node);
        w.wake_agent(name);
        Ok(view)
    }

    async fn patch_node_shared(
        &self,
        name: &str,
        patch: &NodePatch,
    ) -> Result<Arc<Node>, ClusterError> {
        let mut guard = self.lock();
        let w: &mut World = &mut guard;
        Self::check(w, Operation::Patch, format_args!("patch node {name}"))?;
        let clock = w.live_clock();
        let live = w.live_heartbeats;
        let Some((id, n)) = w.nodes.get_mut_with_id(name) else {
            return Err(ClusterError::not_found(format!("node {name}")));
        };
        // The heartbeat it has now, computed rather than renewed for every node.
        let heartbeat = if live {
            clock.heartbeat(n)
        } else {
            n.last_heartbeat
        };
        // `apply_patch` and the view the next list or change feed answer shares, not a copy
        // of its own (the patched node itself when only the world holds it, `crate::api`),
        // with one search of the node's version entry.
        let view = w
            .api
            .patch_shared(
                &mut n.node,
                heartbeat,
                patch.resource_version.as_deref(),
                |node| patch.apply_to(node),
            )
            .map_err(|current| {
                ClusterError::conflict(format!(
                    "node {name}: the object has been modified (resourceVersion {current}, not {}); please apply your changes to the latest version and try again",
                    patch.resource_version.as_deref().unwrap_or_default()
                ))
            })?;
        w.wake_agent_by_id(id);
        Ok(view)
    }

    async fn delete_node(
        &self,
        name: &str,
        precondition: &Precondition,
    ) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::Delete,
            format_args!("delete node {name}"),
        )?;
        let Some(n) = w.nodes.get(name) else {
            return Err(ClusterError::not_found(format!("node {name}")));
        };
        if let Precondition::Uid(uid) = precondition
            && *uid != n.node.uid
        {
            return Err(ClusterError::conflict(format!(
                "node {name} has UID {}, not {uid}",
                n.node.uid
            )));
        }
        w.remove_node(name);
        w.stats.node_deletions += 1;
        Ok(())
    }
}

#[async_trait]
impl PodApi for SimCluster<'_> {
    async fn evict_pod(&self, pod: &PodRef) -> Result<EvictionResult, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::Evict, format_args!("evict pod {pod}"))?;
        Ok(evict(&mut w, &pod.key()))
    }

    async fn evict_pods(&self, keys: &[String]) -> Vec<Result<EvictionResult, ClusterError>> {
        if self.plain {
            // The default's calls, each ready at once, in the order its futures run.
            let mut results = Vec::with_capacity(keys.len());
            for key in keys {
                results.push(match PodRef::parse(key) {
                    Some(pod) => self.evict_pod(&pod).await,
                    None => Err(malformed_pod_key(key)),
                });
            }
            return results;
        }
        // One after the other in the order of `keys`, as the default's futures (each ready
        // when first polled) would run, without a `PodRef` and a future per pod: a key with
        // a `/` is the key of the `PodRef` it parses to.
        let mut w = self.lock();
        keys.iter()
            .map(|key| {
                if !key.contains('/') {
                    return Err(malformed_pod_key(key));
                }
                Self::check(&mut w, Operation::Evict, format_args!("evict pod {key}"))?;
                Ok(evict(&mut w, key))
            })
            .collect()
    }

    async fn delete_pod(
        &self,
        pod: &PodRef,
        grace_period: Option<Duration>,
        precondition: &Precondition,
    ) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::Delete, format_args!("delete pod {pod}"))?;
        let key = pod.key();
        let Some(sp) = w.pods.get(&key) else {
            return Err(ClusterError::not_found(format!("pod {key}")));
        };
        if let Precondition::Uid(uid) = precondition
            && *uid != sp.pod.uid
        {
            return Err(ClusterError::conflict(format!(
                "pod {key} has UID {}, not {uid}",
                sp.pod.uid
            )));
        }
        let own_grace = sp
            .workload
            .and_then(|i| w.workloads.get(i))
            .map_or(Duration::ZERO, |wl| wl.termination_grace_period.0);
        let grace = grace_period.unwrap_or(own_grace);
        w.stats.pod_deletions += 1;
        if grace.is_zero() {
            w.remove_pod(&key);
        } else {
            let until = w.now + grace;
            w.terminate_pod(&key, until);
        }
        Ok(())
    }
}

#[async_trait]
impl EventApi for SimCluster<'_> {
    async fn emit_event(&self, event: &RecordedEvent) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::Event, format_args!("record an event"))?;
        w.recorded_events.push(event.clone());
        Ok(())
    }

    async fn emit_event_owned(&self, event: RecordedEvent) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::Event, format_args!("record an event"))?;
        w.recorded_events.push(event);
        Ok(())
    }
}

/// The API server's answer to the eviction of pod `key` (`namespace/name`), after the
/// injected failures (`SimCluster::check`): what `evict_pod` does once it has the key.
fn evict(w: &mut World, key: &str) -> EvictionResult {
    let Some(sp) = w.pods.get(key) else {
        return EvictionResult::Gone;
    };
    // What the API server decides, read before anything is counted (no copy of the pod).
    let view = &sp.pod;
    let per_node = view.is_daemonset() || view.is_mirror();
    let terminating = sp.terminating_until.is_some();
    let grace = sp
        .workload
        .and_then(|i| w.workloads.get(i))
        .map_or(Duration::ZERO, |wl| wl.termination_grace_period.0);
    let refused = !terminating && w.eviction_refused(view);
    let has_budget = !terminating
        && !refused
        && w.pdbs.iter().any(|p| {
            p.namespace == view.namespace
                && p.selector
                    .iter()
                    .all(|(k, v)| view.labels.get(k) == Some(v))
        });
    let blocking = if has_budget {
        w.pdb_views()
            .into_iter()
            .find(|p| p.covers(view) && p.disruptions_allowed <= 0)
    } else {
        None
    };
    w.stats.eviction_requests += 1;
    if per_node {
        w.stats.daemonset_eviction_requests += 1;
    }
    if terminating {
        return EvictionResult::Evicted;
    }
    if refused {
        w.stats.evictions_refused += 1;
        return EvictionResult::RefusedByBudget("eviction refused (injected)".into());
    }
    if let Some(pdb) = blocking {
        w.stats.evictions_refused += 1;
        return EvictionResult::RefusedByBudget(format!(
            "Cannot evict pod as it would violate the pod's disruption budget {}/{}",
            pdb.namespace, pdb.name
        ));
    }
    w.stats.evictions += 1;
    if grace.is_zero() {
        w.remove_pod(key);
    } else {
        let until = w.now + grace;
        w.terminate_pod(key, until);
    }
    EvictionResult::Evicted
}

/// The world is the API: its nodes are what a direct read returns, heartbeats are folded into
/// the node views, and the cached view is always fresh enough to act on (watch lag is
/// simulated by `list_nodes` itself).
#[async_trait]
impl NodeHealthRead for SimCluster<'_> {
    fn cache_health(&self) -> CacheHealth {
        CacheHealth {
            lease_event_age: Some(Duration::ZERO),
            failing: Vec::new(),
        }
    }

    fn lease_renewals(&self) -> BTreeMap<String, Timestamp> {
        BTreeMap::new()
    }

    async fn read_node_direct(
        &self,
        name: &str,
    ) -> Result<Option<(Node, Option<Timestamp>)>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("get node {name}"))?;
        w.renew_heartbeats();
        Ok(w.nodes.get(name).map(|n| (n.view(), None)))
    }
}

/// The finalizer the simulated Instances carry (as node-manager's).
const FINALIZER_INSTANCE: &str = "node-manager.deckhouse.io/machine";

#[async_trait]
impl MachineApi for SimCluster<'_> {
    async fn list_instances(&self) -> Result<Vec<Instance>, ClusterError> {
        let mut w = self.lock();
        Self::check(&mut w, Operation::List, format_args!("list Instances"))?;
        Ok(w.instances.values().cloned().collect())
    }

    async fn create_instance(
        &self,
        instance: &NewInstance,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let mut w = self.lock();
        let what = format!("create Instance {}", instance.machine);
        Self::check(&mut w, Operation::Patch, format_args!("{what}"))?;
        if w.instances.contains_key(&instance.machine) {
            return Ok(());
        }
        let record = Instance {
            api_version: "deckhouse.io/v1alpha2".into(),
            kind: "Instance".into(),
            metadata: ObjectMeta {
                name: Some(instance.machine.clone()),
                labels: [
                    (keys::LABEL_NODE_GROUP.to_owned(), instance.group.clone()),
                    (keys::LABEL_TOPOLOGY_ZONE.to_owned(), instance.zone.clone()),
                ]
                .into(),
                annotations: [(
                    keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM.to_owned(),
                    instance.class_checksum.clone(),
                )]
                .into(),
                finalizers: vec![FINALIZER_INSTANCE.to_owned()],
                creation_timestamp: Some(now.to_rfc3339()),
                ..ObjectMeta::default()
            },
            status: nodemgr_core::model::InstanceStatus {
                class_reference: instance.class_reference.clone(),
                current_status: Some(InstanceCurrentStatus {
                    phase: Some(MachinePhase::Pending.as_str().to_owned()),
                    last_update_time: Some(now.to_rfc3339()),
                }),
                ..Default::default()
            },
        };
        w.instances.insert(instance.machine.clone(), record);
        Ok(())
    }

    async fn set_instance_phase(
        &self,
        machine: &str,
        phase: MachinePhase,
        node: Option<&str>,
        provider_id: Option<&str>,
        now: Timestamp,
    ) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::Patch,
            format_args!("update Instance {machine}"),
        )?;
        let Some(i) = w.instances.get_mut(machine) else {
            return Err(ClusterError::not_found(format!("Instance {machine}")));
        };
        i.status.current_status = Some(InstanceCurrentStatus {
            phase: Some(phase.as_str().to_owned()),
            last_update_time: Some(now.to_rfc3339()),
        });
        if let Some(node) = node {
            i.status.node_ref = Some(ObjectReference {
                name: node.to_owned(),
                ..ObjectReference::default()
            });
        }
        if let Some(id) = provider_id {
            i.metadata
                .annotations
                .insert(ANNOTATION_PROVIDER_ID.to_owned(), id.to_owned());
        }
        Ok(())
    }

    async fn forget_instance(&self, machine: &str) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::Delete,
            format_args!("delete Instance {machine}"),
        )?;
        w.instances.remove(machine);
        Ok(())
    }

    async fn record_machine_failure(
        &self,
        group: &str,
        failure: &MachineFailure,
        keep: usize,
    ) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::Patch,
            format_args!("update status of {group}"),
        )?;
        let Some(g) = w.groups.get_mut(group) else {
            return Err(ClusterError::not_found(format!("NodeGroup {group}")));
        };
        let status = Arc::make_mut(&mut g.group)
            .status
            .get_or_insert_with(NodeGroupStatus::default);
        let failures = status.last_machine_failures.get_or_insert_with(Vec::new);
        failures.push(failure.clone());
        let keep = keep.max(1);
        if failures.len() > keep {
            let surplus = failures.len() - keep;
            failures.drain(..surplus);
        }
        Ok(())
    }

    async fn list_standby_holders(&self) -> Result<Vec<AppliedHolder>, ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::List,
            format_args!("list standby holders"),
        )?;
        Ok(w.standby_holders
            .values()
            .map(StandbyHolder::applied)
            .collect())
    }

    async fn apply_standby_holder(&self, holder: &StandbyHolder) -> Result<(), ClusterError> {
        let mut w = self.lock();
        let what = format!("apply {}", holder.name());
        Self::check(&mut w, Operation::Patch, format_args!("{what}"))?;
        w.standby_holders
            .insert(holder.group.clone(), holder.clone());
        Ok(())
    }

    async fn delete_standby_holder(&self, group: &str) -> Result<(), ClusterError> {
        let mut w = self.lock();
        let what = format!("delete {}", nodemgr_core::ports::holder_name(group));
        Self::check(&mut w, Operation::Delete, format_args!("{what}"))?;
        w.standby_holders.remove(group);
        Ok(())
    }

    async fn set_standby_status(&self, group: &str, standby: u32) -> Result<(), ClusterError> {
        let mut w = self.lock();
        Self::check(
            &mut w,
            Operation::Patch,
            format_args!("update status of {group}"),
        )?;
        let Some(g) = w.groups.get_mut(group) else {
            return Err(ClusterError::not_found(format!("NodeGroup {group}")));
        };
        Arc::make_mut(&mut g.group)
            .status
            .get_or_insert_with(NodeGroupStatus::default)
            .standby = Some(i64::from(standby));
        Ok(())
    }
}

/// `each` of the pods bound to `node` (by the world's index), with their `namespace/name`.
fn pods_on_node<T>(w: &World, node: &str, each: impl Fn(&str, &Pod) -> T) -> Vec<T> {
    w.pods_by_node
        .get(node)
        .map(|keys| {
            keys.iter()
                .filter_map(|k| w.pods.get(k).map(|p| each(k, &p.pod)))
                .collect()
        })
        .unwrap_or_default()
}
