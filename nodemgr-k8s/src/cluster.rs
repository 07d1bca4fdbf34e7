//! The cluster port ([`nodemgr_core::ports::ClusterApi`]) over kube-rs: what the core's
//! executors read comes from reflector stores fed by watches (NodeGroups, Nodes, node Leases,
//! Pods, PodDisruptionBudgets), what they change goes to the API server as merge patches, the
//! `pods/eviction` subresource and deletes with UID preconditions; events go to
//! `events.k8s.io/v1`.
//!
//! The stores keep only what the views of [`crate::convert`] read: every object is pruned as
//! it arrives ([`crate::prune`]), and pods are kept as the core's view in a cache indexed by
//! node ([`crate::pod_cache`]), so a cluster of 5,000 nodes and 150,000 pods fits in a few
//! hundred MiB (`docs/scale.md`). The watches also tell the update controller when something
//! it decides on changed ([`KubeCluster::update_triggers`]).
//!
//! Errors are mapped as the port's contract says: 404 → `NotFound`, 409 and failed
//! preconditions → `Conflict`, 429 → `TooManyRequests` (on the eviction subresource: a refusal by
//! a PodDisruptionBudget), 5xx, timeouts and connection failures → `Unavailable`, the rest →
//! `Other` with the server's message.
//!
//! A watch that drops or fails is restarted on a short backoff capped at 2 s
//! ([`crate::watch_backoff`]), so the caches catch up within seconds of the API server
//! recovering; the stores keep
//! serving the last state meanwhile, and [`KubeCluster::wait_ready`] returns once every store has
//! had its first complete list.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use nodemgr_core::model::{self as core, Timestamp, keys};
use nodemgr_core::ports::{
    ClusterError, ClusterRead, EventApi, EventKind, EvictionResult, NodeApi, NodePatch, PodApi,
    PodRef, Precondition, RecordedEvent,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::convert::{self, lease_renew_time, node_to_core, pdb_to_core};
use crate::crd::NodeGroup;
use crate::node_views::NodeViews;
use crate::pod_cache::{self, PodCache, PodFields};
use crate::prune;
use crate::watch_backoff::WatchBackoff;
use crate::watch_health::WatchHealth;

/// Name of the Secret holding each group's desired configuration checksum (docs/deckhouse.md §4).
pub const CHECKSUMS_SECRET: &str = "configuration-checksums";

/// Page size of the fresh node lists ([`ClusterRead::list_nodes_fresh`]).
const FRESH_LIST_PAGE: u32 = 500;

/// Maps a kube error to the port's error (see the module docs); the kube error is kept as the
/// port error's source.
pub fn map_error(what: &str, error: kube::Error) -> ClusterError {
    let mapped = match &error {
        kube::Error::Api(status) => {
            let message = format!("{what}: {} ({})", status.message, status.reason);
            match status.code {
                404 => ClusterError::not_found(message),
                409 => ClusterError::conflict(message),
                429 => ClusterError::too_many_requests(message),
                c if c >= 500 => ClusterError::unavailable(message),
                _ => ClusterError::other(message),
            }
        }
        _ => ClusterError::unavailable(format!("{what}: {error}")),
    };
    mapped.with_source(error)
}

/// The node as the port shows it: its heartbeat is its Lease's `renewTime` when it has a
/// Lease (the cached and the direct reads agree on this, so the fencing controller can
/// compare them), else the Ready condition's.
fn with_lease(mut node: core::Node, renew: Option<Timestamp>) -> core::Node {
    if renew.is_some() {
        node.last_heartbeat = renew;
    }
    node
}

/// The reflector stores the port reads from.
#[derive(Clone)]
struct Stores {
    groups: Store<NodeGroup>,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: PodCache,
    pdbs: Store<PodDisruptionBudget>,
}

/// The cluster port over one kube [`Client`].
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    stores: Stores,
    reporter: String,
    checksums_namespace: String,
    writes: Arc<AtomicU64>,
    health: WatchHealth,
    update_triggers: Arc<watch::Sender<u64>>,
    /// Core views of the Nodes, reused while a Node does not change.
    node_views: NodeViews,
}

/// The watch tasks feeding a [`KubeCluster`]'s stores; dropping it stops them.
pub struct Watches {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Whether a watch event changes what the update controller decides on (see
/// [`KubeCluster::update_triggers`]): given the stored object before the event, if any.
type WakesUpdate<K> = fn(Option<&K>, &watcher::Event<K>) -> bool;

/// Bumps the update controller's trigger (`docs/scale.md` §3).
fn bump(triggers: &watch::Sender<u64>) {
    triggers.send_modify(|n| *n = n.wrapping_add(1));
}

/// Runs a watch of `api` into a reflector store: every object is pruned by `prune` before it
/// is stored, and an event for which `wakes` says so bumps `triggers`.
fn spawn_reflector<K>(
    api: Api<K>,
    config: watcher::Config,
    health: &WatchHealth,
    prune: fn(&mut K),
    wakes: Option<(WakesUpdate<K>, Arc<watch::Sender<u64>>)>,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, mut writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    health.register(&kind);
    let health = health.clone();
    // Raw watcher events (not only touched objects): an empty list or a list's end counts as
    // a delivery too. Retries follow `WatchBackoff` (back within seconds of a recovery).
    let stream = watcher(api, config)
        .modify(prune)
        .backoff(WatchBackoff::new());
    let store = reader.clone();
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    let wake = wakes.as_ref().is_some_and(|(wakes, _)| {
                        let before = match &event {
                            watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                                store.get(&reflector::ObjectRef::from_obj(o))
                            }
                            _ => None,
                        };
                        wakes(before.as_deref(), &event)
                    });
                    writer.apply_watcher_event(&event);
                    health.delivered(&kind);
                    if wake && let Some((_, triggers)) = &wakes {
                        tracing::trace!(%kind, "a change wakes the update controller");
                        bump(triggers);
                    }
                }
                Err(error) => {
                    health.failed(&kind);
                    tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
                }
            }
        }
    });
    (reader, task)
}

/// Runs the pod watch into a [`PodCache`] (which keeps only the core's view of each pod).
fn spawn_pod_cache(api: Api<PodFields>, health: &WatchHealth) -> (PodCache, JoinHandle<()>) {
    let (reader, writer) = pod_cache::pod_cache();
    let kind = "Pod".to_owned();
    health.register(&kind);
    let health = health.clone();
    let stream = watcher(api, watcher::Config::default()).backoff(WatchBackoff::new());
    let task = tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    writer.apply_watcher_event(&event);
                    health.delivered(&kind);
                }
                Err(error) => {
                    health.failed(&kind);
                    tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
                }
            }
        }
    });
    (reader, task)
}

/// Watches the configuration checksums Secret only to wake the update controller when a
/// group's desired checksum changes; the checksums themselves are read fresh by
/// [`ClusterRead::configuration_checksums`]. A refused watch (RBAC granting only `get`) is
/// reported once and retried quietly: the period still drives the controller.
fn spawn_checksums_watch(api: Api<Secret>, triggers: Arc<watch::Sender<u64>>) -> JoinHandle<()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={CHECKSUMS_SECRET}"));
    let stream = watcher(api, config).backoff(WatchBackoff::new());
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut last: Option<BTreeMap<String, k8s_openapi::ByteString>> = None;
        let mut listed: Option<BTreeMap<String, k8s_openapi::ByteString>> = None;
        let mut failing = false;
        while let Some(item) = stream.next().await {
            let seen = match item {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                    Some(s.data.unwrap_or_default())
                }
                Ok(watcher::Event::Delete(_)) => Some(BTreeMap::new()),
                Ok(watcher::Event::Init) => {
                    listed = Some(BTreeMap::new());
                    None
                }
                Ok(watcher::Event::InitDone) => listed.take(),
                Err(error) => {
                    if failing {
                        tracing::debug!(%error, "configuration checksums watch failed; retrying");
                    } else {
                        tracing::warn!(%error, "cannot watch the configuration checksums Secret; \
                            checksum changes reach the update controller at its period");
                    }
                    failing = true;
                    continue;
                }
            };
            failing = false;
            let Some(data) = seen else { continue };
            if listed.is_some() {
                // Inside a list: the Secret as listed, compared once the list ends.
                listed = Some(data);
                continue;
            }
            if last.as_ref() != Some(&data) {
                if last.is_some() {
                    tracing::trace!("a checksum change wakes the update controller");
                    bump(&triggers);
                }
                last = Some(data);
            }
        }
    })
}

/// A node change matters to the update controller when the core's view of the node changes
/// apart from its heartbeat and resourceVersion (annotations, labels, taints, cordon,
/// readiness…), or a node comes or goes; a relist always does.
fn node_wakes_update(before: Option<&Node>, event: &watcher::Event<Node>) -> bool {
    let view = |n: &Node| {
        let mut v = node_to_core(n);
        v.resource_version.clear();
        v.last_heartbeat = None;
        v
    };
    match (event, before) {
        (watcher::Event::Apply(node), Some(before)) => view(node) != view(before),
        (watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone, _) => {
            true
        }
        (watcher::Event::Init | watcher::Event::InitApply(_), _) => false,
    }
}

/// Any change of a NodeGroup (spec, status, metadata) matters to the update controller; a
/// relist always does.
fn group_wakes_update(before: Option<&NodeGroup>, event: &watcher::Event<NodeGroup>) -> bool {
    let comparable = |g: &NodeGroup| {
        let mut g = g.clone();
        g.metadata.resource_version = None;
        serde_json::to_value(g).unwrap_or(Value::Null)
    };
    match (event, before) {
        (watcher::Event::Apply(group), Some(before)) => comparable(group) != comparable(before),
        (watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone, _) => {
            true
        }
        (watcher::Event::Init | watcher::Event::InitApply(_), _) => false,
    }
}

impl KubeCluster {
    /// Starts the watches and returns the port with them. `reporter` names the component in
    /// events (`node-manager`). Reads see empty stores until [`KubeCluster::wait_ready`].
    pub fn start(client: Client, reporter: impl Into<String>) -> (KubeCluster, Watches) {
        let health = WatchHealth::new();
        let (update_triggers, _) = watch::channel(0u64);
        let update_triggers = Arc::new(update_triggers);
        let (groups, t1) = spawn_reflector(
            Api::<NodeGroup>::all(client.clone()),
            watcher::Config::default(),
            &health,
            prune::node_group,
            Some((group_wakes_update, update_triggers.clone())),
        );
        let (nodes, t2) = spawn_reflector(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            &health,
            prune::node,
            Some((node_wakes_update, update_triggers.clone())),
        );
        let (leases, t3) = spawn_reflector(
            Api::<Lease>::namespaced(client.clone(), keys::NODE_LEASE_NAMESPACE),
            watcher::Config::default(),
            &health,
            prune::lease,
            None,
        );
        let (pods, t4) = spawn_pod_cache(Api::<PodFields>::all(client.clone()), &health);
        let (pdbs, t5) = spawn_reflector(
            Api::<PodDisruptionBudget>::all(client.clone()),
            watcher::Config::default(),
            &health,
            prune::pod_disruption_budget,
            None,
        );
        let checksums_namespace = keys::NAMESPACE.to_owned();
        let t6 = spawn_checksums_watch(
            Api::<Secret>::namespaced(client.clone(), &checksums_namespace),
            update_triggers.clone(),
        );
        (
            KubeCluster {
                client,
                stores: Stores {
                    groups,
                    nodes,
                    leases,
                    pods,
                    pdbs,
                },
                reporter: reporter.into(),
                checksums_namespace,
                writes: Arc::new(AtomicU64::new(0)),
                health,
                update_triggers,
                node_views: NodeViews::new(),
            },
            Watches {
                tasks: vec![t1, t2, t3, t4, t5, t6],
            },
        )
    }

    /// The port without watches, for components that only write (evict, delete, record
    /// events) and must not need RBAC to watch the whole cluster (early-oom): every read
    /// returns nothing.
    pub fn writer_only(client: Client, reporter: impl Into<String>) -> KubeCluster {
        KubeCluster {
            client,
            stores: Stores {
                groups: reflector::store().0,
                nodes: reflector::store().0,
                leases: reflector::store().0,
                pods: PodCache::empty(),
                pdbs: reflector::store().0,
            },
            reporter: reporter.into(),
            checksums_namespace: keys::NAMESPACE.to_owned(),
            writes: Arc::new(AtomicU64::new(0)),
            health: WatchHealth::new(),
            update_triggers: Arc::new(watch::channel(0u64).0),
            node_views: NodeViews::new(),
        }
    }

    /// Waits until every store has had its first complete list.
    ///
    /// # Errors
    /// When a watch task ended before that (the runtime is shutting down).
    pub async fn wait_ready(&self) -> Result<(), ClusterError> {
        let s = &self.stores;
        let gone =
            |e| ClusterError::unavailable("a watch stopped before its first list").with_source(e);
        s.groups.wait_until_ready().await.map_err(gone)?;
        s.nodes.wait_until_ready().await.map_err(gone)?;
        s.leases.wait_until_ready().await.map_err(gone)?;
        s.pods
            .wait_until_ready()
            .await
            .map_err(|e| ClusterError::unavailable(e.to_string()).with_source(e))?;
        s.pdbs.wait_until_ready().await.map_err(gone)?;
        Ok(())
    }

    /// How many objects the stores hold: NodeGroups, Nodes, Leases, Pods, PodDisruptionBudgets.
    pub fn cached(&self) -> [(&'static str, usize); 5] {
        let s = &self.stores;
        [
            ("nodegroups", s.groups.len()),
            ("nodes", s.nodes.len()),
            ("leases", s.leases.len()),
            ("pods", s.pods.len()),
            ("poddisruptionbudgets", s.pdbs.len()),
        ]
    }

    /// A receiver that changes whenever a watch delivers something the update controller
    /// decides on (`docs/scale.md` §3): a NodeGroup change, a change of a node's core view
    /// other than its heartbeat, a node added or deleted, a change of the configuration
    /// checksums Secret, a relist. Pods, Leases and budgets do not trigger it.
    pub fn update_triggers(&self) -> watch::Receiver<u64> {
        self.update_triggers.subscribe()
    }

    /// The kube client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How many writes (patches, evictions, deletes) this port has sent.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// The NodeGroups as the API returns them (with status), from the store.
    pub fn node_group_objects(&self) -> Vec<Arc<NodeGroup>> {
        self.stores.groups.state()
    }

    /// How current the stores are (see [`WatchHealth`]).
    pub fn watch_health(&self) -> &WatchHealth {
        &self.health
    }

    /// Reads `node`'s Node and its kubelet Lease straight from the API (not the stores):
    /// `Ok(None)` when the Node does not exist, else the Node and the Lease's `renewTime`
    /// (`None` when it has no Lease).
    ///
    /// # Errors
    /// The port's errors, for either read.
    pub async fn read_node_direct(
        &self,
        node: &str,
    ) -> Result<Option<(core::Node, Option<Timestamp>)>, ClusterError> {
        let nodes = Api::<Node>::all(self.client.clone());
        let Some(object) = nodes
            .get_opt(node)
            .await
            .map_err(|e| map_error(&format!("get node {node}"), e))?
        else {
            return Ok(None);
        };
        let leases = Api::<Lease>::namespaced(self.client.clone(), keys::NODE_LEASE_NAMESPACE);
        let lease = leases
            .get_opt(node)
            .await
            .map_err(|e| map_error(&format!("get lease {node}"), e))?;
        let renew = lease.as_ref().and_then(lease_renew_time);
        Ok(Some((with_lease(node_to_core(&object), renew), renew)))
    }

    /// The Lease renew time of each node, from the store.
    pub fn lease_renewals(&self) -> BTreeMap<String, Timestamp> {
        self.stores
            .leases
            .state()
            .iter()
            .filter_map(|l| Some((l.metadata.name.clone()?, lease_renew_time(l)?)))
            .collect()
    }

    /// Writes a NodeGroup's status (merge patch of the status subresource).
    ///
    /// # Errors
    /// The port's errors.
    pub async fn patch_group_status(
        &self,
        name: &str,
        status: &core::NodeGroupStatus,
    ) -> Result<(), ClusterError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let api = Api::<NodeGroup>::all(self.client.clone());
        // A merge patch leaves out what the status no longer has; an error once fixed must be
        // removed explicitly.
        let mut body = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
        if status.error.is_none()
            && let Some(fields) = body.as_object_mut()
        {
            fields.insert("error".into(), serde_json::Value::Null);
        }
        // `deckhouse.processed` is bashible-apiserver's: left out, so the merge patch keeps
        // whatever it wrote last (docs/deckhouse.md §1.3).
        if let Some(sync) = body.get_mut("deckhouse").and_then(|d| d.as_object_mut()) {
            sync.remove("processed");
        }
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": body})),
        )
        .await
        .map(|_| ())
        .map_err(|e| map_error(&format!("patch status of NodeGroup {name}"), e))
    }

    /// Replaces the taints of a node (a JSON merge patch replaces the list whole), guarded by
    /// the resourceVersion it was computed from when given.
    ///
    /// # Errors
    /// The port's errors; `Conflict` when the node changed since `resource_version`.
    pub async fn replace_node_taints(
        &self,
        name: &str,
        taints: &[core::Taint],
        resource_version: Option<&str>,
    ) -> Result<(), ClusterError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let taints: Vec<_> = taints.iter().map(convert::taint_from_core).collect();
        let mut body = json!({"spec": {"taints": taints}});
        if let Some(version) = resource_version {
            body["metadata"] = json!({"resourceVersion": version});
        }
        Api::<Node>::all(self.client.clone())
            .patch(name, &PatchParams::default(), &Patch::Merge(body))
            .await
            .map(|_| ())
            .map_err(|e| map_error(&format!("set taints of node {name}"), e))
    }
}

impl KubeCluster {
    /// Core views of `nodes`, sorted by name, with the heartbeat of each node's Lease.
    fn nodes_with_leases<'a>(&self, nodes: impl Iterator<Item = &'a Node>) -> Vec<core::Node> {
        let leases = self.lease_renewals();
        let mut out: Vec<core::Node> = self
            .node_views
            .view_all(nodes)
            .into_iter()
            .map(|n| {
                let renew = leases.get(&n.name).copied();
                with_lease(n, renew)
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// The merge patch of the labels, annotations, unschedulable flag and provider ID of a [`NodePatch`], with
/// its resourceVersion precondition.
fn node_merge_patch(patch: &NodePatch) -> Value {
    let mut metadata = serde_json::Map::new();
    let map = |m: &BTreeMap<String, Option<String>>| -> Value {
        m.iter()
            .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    if !patch.labels.is_empty() {
        metadata.insert("labels".into(), map(&patch.labels));
    }
    if !patch.annotations.is_empty() {
        metadata.insert("annotations".into(), map(&patch.annotations));
    }
    if let Some(version) = &patch.resource_version {
        metadata.insert("resourceVersion".into(), Value::String(version.clone()));
    }
    let mut out = json!({"metadata": metadata});
    if let Some(u) = patch.unschedulable {
        out["spec"]["unschedulable"] = json!(u);
    }
    if let Some(id) = &patch.provider_id {
        out["spec"]["providerID"] = json!(id);
    }
    out
}

#[async_trait]
impl ClusterRead for KubeCluster {
    async fn list_node_groups(&self) -> Result<Vec<core::NodeGroup>, ClusterError> {
        let mut groups: Vec<_> = self
            .stores
            .groups
            .state()
            .iter()
            .map(|g| g.to_core())
            .collect();
        groups.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(groups)
    }

    async fn list_nodes(&self) -> Result<Vec<core::Node>, ClusterError> {
        let nodes = self.stores.nodes.state();
        Ok(self.nodes_with_leases(nodes.iter().map(|n| &**n)))
    }

    async fn list_nodes_fresh(&self) -> Result<Vec<core::Node>, ClusterError> {
        // No resourceVersion: a quorum read, never served from the API server's watch cache.
        // In pages, each converted before the next is read: thousands of full Nodes are never
        // held at once.
        let api = Api::<Node>::all(self.client.clone());
        let mut nodes = Vec::new();
        let mut params = ListParams::default().limit(FRESH_LIST_PAGE);
        loop {
            let mut page = api
                .list(&params)
                .await
                .map_err(|e| map_error("list nodes", e))?;
            for node in &mut page.items {
                prune::node(node);
            }
            nodes.append(&mut page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok(self.nodes_with_leases(nodes.iter()))
    }

    async fn list_pods(&self) -> Result<Vec<core::Pod>, ClusterError> {
        Ok(self.stores.pods.all())
    }

    async fn list_pods_on_node(&self, node: &str) -> Result<Vec<core::Pod>, ClusterError> {
        Ok(self.stores.pods.on_node(node))
    }

    async fn list_pod_disruption_budgets(
        &self,
    ) -> Result<Vec<core::PodDisruptionBudget>, ClusterError> {
        Ok(self
            .stores
            .pdbs
            .state()
            .iter()
            .map(|p| pdb_to_core(p))
            .collect())
    }

    async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        let api = Api::<Secret>::namespaced(self.client.clone(), &self.checksums_namespace);
        let secret = match api.get_opt(CHECKSUMS_SECRET).await {
            Ok(Some(secret)) => secret,
            Ok(None) => return Ok(BTreeMap::new()),
            Err(e) => return Err(map_error("read Secret configuration-checksums", e)),
        };
        let mut out = BTreeMap::new();
        for (group, value) in secret.data.unwrap_or_default() {
            match String::from_utf8(value.0) {
                Ok(checksum) => {
                    out.insert(group, checksum);
                }
                Err(_) => tracing::warn!(%group, "configuration checksum is not UTF-8; ignored"),
            }
        }
        for (group, value) in secret.string_data.unwrap_or_default() {
            out.insert(group, value);
        }
        Ok(out)
    }
}

#[async_trait]
impl NodeApi for KubeCluster {
    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<core::Node, ClusterError> {
        let api = Api::<Node>::all(self.client.clone());
        let what = format!("patch node {name}");
        if !patch.add_taints.is_empty() || !patch.remove_taints.is_empty() {
            // Taints are a list: read-modify-write guarded by resourceVersion, a few tries (one
            // when the caller gave the version: a newer node is its conflict to resolve).
            let tries = if patch.resource_version.is_some() {
                1
            } else {
                3
            };
            for _ in 0..tries {
                let node = api.get(name).await.map_err(|e| map_error(&what, e))?;
                let current = node.metadata.resource_version.clone().unwrap_or_default();
                if let Some(expected) = &patch.resource_version
                    && *expected != current
                {
                    return Err(ClusterError::conflict(format!(
                        "{what}: the node is at resourceVersion {current}, not {expected}"
                    )));
                }
                let mut view = node_to_core(&node);
                patch.apply_to(&mut view);
                let taints: Vec<_> = view.taints.iter().map(convert::taint_from_core).collect();
                let mut body = node_merge_patch(patch);
                body["spec"]["taints"] = serde_json::to_value(taints).unwrap_or(Value::Null);
                body["metadata"]["resourceVersion"] = json!(current);
                self.writes.fetch_add(1, Ordering::Relaxed);
                match api
                    .patch(name, &PatchParams::default(), &Patch::Merge(body))
                    .await
                {
                    Ok(node) => return Ok(node_to_core(&node)),
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => return Err(map_error(&what, e)),
                }
            }
            return Err(ClusterError::conflict(format!(
                "{what}: the node kept changing while its taints were updated"
            )));
        }
        self.writes.fetch_add(1, Ordering::Relaxed);
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(node_merge_patch(patch)),
        )
        .await
        .map(|n| node_to_core(&n))
        .map_err(|e| map_error(&what, e))
    }

    async fn delete_node(
        &self,
        name: &str,
        precondition: &Precondition,
    ) -> Result<(), ClusterError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut params = DeleteParams::background();
        if let Precondition::Uid(uid) = precondition {
            params.preconditions = Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            });
        }
        Api::<Node>::all(self.client.clone())
            .delete(name, &params)
            .await
            .map(|_| ())
            .map_err(|e| map_error(&format!("delete node {name}"), e))
    }
}

#[async_trait]
impl PodApi for KubeCluster {
    async fn evict_pod(&self, pod: &PodRef) -> Result<EvictionResult, ClusterError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let api = Api::<Pod>::namespaced(self.client.clone(), &pod.namespace);
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                ..ObjectMeta::default()
            },
            delete_options: None,
        };
        match api
            .create_subresource::<_, Value>(
                "eviction",
                &pod.name,
                &PostParams::default(),
                &eviction,
            )
            .await
        {
            Ok(_) => Ok(EvictionResult::Evicted),
            Err(kube::Error::Api(s)) if s.code == 429 => {
                Ok(EvictionResult::RefusedByBudget(s.message.clone()))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(EvictionResult::Gone),
            Err(e) => Err(map_error(&format!("evict pod {pod}"), e)),
        }
    }

    async fn delete_pod(
        &self,
        pod: &PodRef,
        grace_period: Option<Duration>,
        precondition: &Precondition,
    ) -> Result<(), ClusterError> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let mut params = DeleteParams::default();
        if let Some(grace) = grace_period {
            params.grace_period_seconds = Some(u32::try_from(grace.as_secs()).unwrap_or(u32::MAX));
        }
        if let Precondition::Uid(uid) = precondition {
            params.preconditions = Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            });
        }
        Api::<Pod>::namespaced(self.client.clone(), &pod.namespace)
            .delete(&pod.name, &params)
            .await
            .map(|_| ())
            .map_err(|e| map_error(&format!("delete pod {pod}"), e))
    }
}

static EVENT_SERIAL: AtomicU64 = AtomicU64::new(0);

#[async_trait]
impl EventApi for KubeCluster {
    async fn emit_event(&self, event: &RecordedEvent) -> Result<(), ClusterError> {
        let namespace = if event.regarding.namespace.is_empty() {
            "default".to_owned()
        } else {
            event.regarding.namespace.clone()
        };
        let serial = EVENT_SERIAL.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}.{:x}{:04x}",
            event.regarding.name,
            event.time.as_millis(),
            serial % 0x1_0000
        );
        let api_version = match event.regarding.kind.as_str() {
            "NodeGroup" => "deckhouse.io/v1",
            "StaticInstance" => "deckhouse.io/v1alpha2",
            _ => "v1",
        };
        let body = Event {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(convert::to_jiff(event.time))),
            reporting_controller: Some(format!("deckhouse.io/{}", self.reporter)),
            reporting_instance: Some(self.reporter.clone()),
            action: Some(event.reason.clone()),
            reason: Some(event.reason.clone()),
            note: Some(event.message.clone()),
            type_: Some(
                match event.kind {
                    EventKind::Normal => "Normal",
                    EventKind::Warning => "Warning",
                }
                .to_owned(),
            ),
            regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(api_version.to_owned()),
                kind: Some(event.regarding.kind.clone()),
                name: Some(event.regarding.name.clone()),
                namespace: (!event.regarding.namespace.is_empty())
                    .then(|| event.regarding.namespace.clone()),
                ..Default::default()
            }),
            ..Event::default()
        };
        Api::<Event>::namespaced(self.client.clone(), &namespace)
            .create(&PostParams::default(), &body)
            .await
            .map(|_| ())
            .map_err(|e| map_error("record event", e))
    }
}

/// Decodes a base64 Secret value (for tests and tools that read the Secret as JSON).
pub fn decode_checksum(value: &str) -> Option<String> {
    base64::engine::general_purpose::STANDARD
        .decode(value)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
}

/// A kube client for node-manager from a kubeconfig file, or the in-cluster configuration
/// (then `KUBECONFIG` and `~/.kube/config`) when `kubeconfig` is `None`.
///
/// kube's built-in retry of 429/503/504 is turned off: it would retry an eviction refused by a
/// PodDisruptionBudget (HTTP 429) for minutes inside one call, while the drain policy wants to
/// see the refusal at once and retry on its own schedule (every 20 s); the controllers retry
/// every other failure themselves.
///
/// # Errors
/// When no configuration can be found or read.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, kube::Error> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let mut config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(kube::Error::InferKubeconfig)?;
            kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
                .await
                .map_err(kube::Error::InferKubeconfig)?
        }
        None => kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig)?,
    };
    config.default_retry = false;
    Client::try_from(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_patches_become_merge_patches_with_nulls_for_removals() {
        let patch = NodePatch::new()
            .set_annotation("a", "1")
            .remove_annotation("b")
            .remove_label("c")
            .unschedulable(true);
        assert_eq!(
            node_merge_patch(&patch),
            json!({
                "metadata": {"annotations": {"a": "1", "b": null}, "labels": {"c": null}},
                "spec": {"unschedulable": true},
            })
        );
        assert_eq!(node_merge_patch(&NodePatch::new()), json!({"metadata": {}}));
        assert_eq!(
            node_merge_patch(
                &NodePatch::new()
                    .set_label("l", "v")
                    .if_resource_version("42")
            ),
            json!({"metadata": {"labels": {"l": "v"}, "resourceVersion": "42"}})
        );
    }

    #[test]
    fn api_errors_map_to_the_port_contract() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("boom", "Reason")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(matches!(
            map_error("x", api(404)),
            ClusterError::NotFound { .. }
        ));
        assert!(matches!(
            map_error("x", api(409)),
            ClusterError::Conflict { .. }
        ));
        assert!(matches!(
            map_error("x", api(429)),
            ClusterError::TooManyRequests { .. }
        ));
        assert!(matches!(
            map_error("x", api(503)),
            ClusterError::Unavailable { .. }
        ));
        assert!(matches!(
            map_error("x", api(403)),
            ClusterError::Other { .. }
        ));
    }

    #[test]
    fn mapped_errors_keep_the_kube_error_as_their_source() {
        let status =
            kube::core::Status::failure("nodes \"n\" not found", "NotFound").with_code(404);
        let error = map_error("get node n", kube::Error::Api(status.boxed()));
        // The message users know is unchanged.
        assert_eq!(
            error.to_string(),
            "not found: get node n: nodes \"n\" not found (NotFound)"
        );
        let kube_error = error
            .cause()
            .and_then(|c| c.get().downcast_ref::<kube::Error>());
        assert!(
            matches!(kube_error, Some(kube::Error::Api(s)) if s.code == 404),
            "{error:?}"
        );
        assert!(std::error::Error::source(&error).is_some());

        // A transport failure: the kube error and its own causes stay reachable.
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let error = map_error("list nodes", kube::Error::Service(Box::new(io)));
        assert!(error.is_retryable());
        let chain = nodemgr_core::ports::ErrorChain(&error).to_string();
        assert!(
            chain.starts_with("cluster API unavailable: list nodes: "),
            "{chain}"
        );
        assert!(chain.contains("connection refused"), "{chain}");
        assert!(
            error
                .cause()
                .is_some_and(|c| c.get().downcast_ref::<kube::Error>().is_some())
        );
    }

    #[test]
    fn checksums_decode_from_base64() {
        assert_eq!(decode_checksum("Z2VuMQ==").as_deref(), Some("gen1"));
        assert_eq!(decode_checksum("%%%"), None);
    }
}
