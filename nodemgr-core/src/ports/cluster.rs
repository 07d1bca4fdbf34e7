//! The cluster port: observe nodes, pods, PodDisruptionBudgets and node groups as the core's
//! model views, and act on them (patch node metadata and taints, cordon, evict, delete, record
//! events). `nodemgr-k8s` implements it over the Kubernetes API, `nodemgr-sim` in memory; the
//! update executor ([`crate::executor`]) is generic over it.
//!
//! The traits are split by capability ([`ClusterRead`], [`NodeApi`], [`PodApi`], [`EventApi`]);
//! [`ClusterApi`] is all four, implemented automatically for any type that has them.
//! [`NodeHealthRead`] adds what fencing reads beyond them (cache freshness, direct reads).
//!
//! # Contract common to every method
//! - Methods are `async` (via `async-trait`, the futures are `Send`) and take `&self`:
//!   implementations synchronise internally.
//! - Errors are [`ClusterError`]. Adapters map HTTP 404 to [`ClusterError::NotFound`], 409 and
//!   failed preconditions to [`ClusterError::Conflict`], 429 (outside the eviction
//!   subresource) to [`ClusterError::TooManyRequests`], connection failures, timeouts and 5xx to
//!   [`ClusterError::Unavailable`], anything else to [`ClusterError::Other`].
//! - Callers re-read state before acting again: a method may fail after its effect happened
//!   (a timeout on a request that was applied), so every mutating method is idempotent.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::Cause;
use crate::model::{Node, NodeGroup, Pod, PodDisruptionBudget, StringMap, Taint, Timestamp};

/// What went wrong talking to the cluster.
///
/// The kind decides what the caller does ([`ClusterError::is_not_found`],
/// [`ClusterError::is_retryable`]); `message` says what was attempted and what the server
/// answered; `source` is the adapter's own error when there is one (a `kube::Error`), so
/// logs can print the whole chain ([`super::ErrorChain`]). Build one with the constructors
/// ([`ClusterError::unavailable`], …) and [`ClusterError::with_source`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The object does not exist (any more). Callers that wanted it gone treat this as success.
    #[error("not found: {message}")]
    NotFound {
        /// What was not found.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// The object changed under us, or a precondition (UID, resourceVersion) failed: re-read and
    /// decide again.
    #[error("conflict: {message}")]
    Conflict {
        /// What conflicted.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// The API server throttles us (HTTP 429 outside the eviction subresource): retry later.
    #[error("too many requests: {message}")]
    TooManyRequests {
        /// What was throttled.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
    /// The API server cannot be reached or answered 5xx / timed out: retry later.
    #[error("cluster API unavailable: {message}")]
    Unavailable {
        /// What was attempted.
        message: String,
        /// The adapter's error (the connection's, the timeout's).
        #[source]
        source: Option<Cause>,
    },
    /// Anything else (forbidden, invalid request, …), with the server's message.
    #[error("cluster API error: {message}")]
    Other {
        /// What was attempted and the server's message.
        message: String,
        /// The adapter's error.
        #[source]
        source: Option<Cause>,
    },
}

impl ClusterError {
    /// [`ClusterError::NotFound`] without a cause.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::NotFound {
            message: message.into(),
            source: None,
        }
    }

    /// [`ClusterError::Conflict`] without a cause.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict {
            message: message.into(),
            source: None,
        }
    }

    /// [`ClusterError::TooManyRequests`] without a cause.
    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::TooManyRequests {
            message: message.into(),
            source: None,
        }
    }

    /// [`ClusterError::Unavailable`] without a cause.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// [`ClusterError::Other`] without a cause.
    pub fn other(message: impl Into<String>) -> Self {
        Self::Other {
            message: message.into(),
            source: None,
        }
    }

    /// The same error caused by `error` (its [`std::error::Error::source`]).
    #[must_use]
    pub fn with_source(self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.with_cause(Cause::new(error))
    }

    /// The same error caused by `cause`.
    #[must_use]
    pub fn with_cause(mut self, cause: Cause) -> Self {
        match &mut self {
            Self::NotFound { source, .. }
            | Self::Conflict { source, .. }
            | Self::TooManyRequests { source, .. }
            | Self::Unavailable { source, .. }
            | Self::Other { source, .. } => *source = Some(cause),
        }
        self
    }

    /// The message, without the kind's prefix.
    pub fn message(&self) -> &str {
        match self {
            Self::NotFound { message, .. }
            | Self::Conflict { message, .. }
            | Self::TooManyRequests { message, .. }
            | Self::Unavailable { message, .. }
            | Self::Other { message, .. } => message,
        }
    }

    /// The adapter's error, when it kept one.
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            Self::NotFound { source, .. }
            | Self::Conflict { source, .. }
            | Self::TooManyRequests { source, .. }
            | Self::Unavailable { source, .. }
            | Self::Other { source, .. } => source.as_ref(),
        }
    }

    /// Whether the error says the object is gone.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound { .. })
    }

    /// Whether the object changed under us (or a precondition failed).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// Whether retrying the same request later may succeed (`TooManyRequests`, `Unavailable`,
    /// `Conflict` after a re-read).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::TooManyRequests { .. } | Self::Unavailable { .. } | Self::Conflict { .. }
        )
    }
}

/// A pod by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl PodRef {
    /// A reference to `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Parses `namespace/name` (the key [`Pod::key`] and the drain use); `None` without a `/`.
    pub fn parse(key: &str) -> Option<Self> {
        let (namespace, name) = key.split_once('/')?;
        Some(Self::new(namespace, name))
    }

    /// `namespace/name`, as [`Pod::key`] and [`PodRef`]'s `Display` write it (one
    /// allocation of the right size).
    pub fn key(&self) -> String {
        crate::model::pod_key(&self.namespace, &self.name)
    }

    /// The reference of `pod`.
    pub fn of(pod: &Pod) -> Self {
        Self::new(pod.namespace.clone(), pod.name.clone())
    }
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The error [`PodApi::evict_pods`] answers for a key that is not `namespace/name`.
pub fn malformed_pod_key(key: &str) -> ClusterError {
    ClusterError::other(format!("malformed pod key {key}"))
}

/// A precondition on a delete: the object must still be the one the caller looked at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Precondition {
    /// No precondition.
    #[default]
    None,
    /// The object's UID must be this one; otherwise [`ClusterError::Conflict`] (a new object of
    /// the same name is never deleted by mistake).
    Uid(String),
}

/// A change to a node's metadata, taints and schedulability, applied as one patch.
///
/// Maps are `key → Some(value)` to set and `key → None` to remove. Applying the same patch twice
/// has the effect of applying it once. With [`NodePatch::resource_version`] the patch is
/// conditional: it applies only to the very version of the node it was computed from
/// (optimistic concurrency, `docs/optimistic-concurrency.md`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodePatch {
    /// Labels to set (`Some`) or remove (`None`).
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotations to set (`Some`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
    /// Taints to add; a taint with the same key and effect as an existing one replaces it.
    pub add_taints: Vec<Taint>,
    /// Taints to remove, by key (every effect).
    pub remove_taints: Vec<String>,
    /// `spec.unschedulable` to set, when `Some`.
    pub unschedulable: Option<bool>,
    /// `spec.providerID` to set, when `Some` (the API server accepts it only on a node that has
    /// none: a provider ID never changes once set).
    pub provider_id: Option<String>,
    /// Precondition: the node's `metadata.resourceVersion` must still be this one, otherwise
    /// nothing is changed and the port answers [`ClusterError::Conflict`]. `None` = no
    /// precondition (the patch applies to whatever version is current).
    pub resource_version: Option<String>,
}

impl NodePatch {
    /// An empty patch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets annotation `key` to `value`.
    pub fn set_annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), Some(value.into()));
        self
    }

    /// Removes annotation `key`.
    pub fn remove_annotation(mut self, key: impl Into<String>) -> Self {
        self.annotations.insert(key.into(), None);
        self
    }

    /// Sets label `key` to `value`.
    pub fn set_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), Some(value.into()));
        self
    }

    /// Removes label `key`.
    pub fn remove_label(mut self, key: impl Into<String>) -> Self {
        self.labels.insert(key.into(), None);
        self
    }

    /// Sets `spec.unschedulable`.
    pub fn unschedulable(mut self, value: bool) -> Self {
        self.unschedulable = Some(value);
        self
    }

    /// Sets `spec.providerID`.
    pub fn provider_id(mut self, value: impl Into<String>) -> Self {
        self.provider_id = Some(value.into());
        self
    }

    /// Removes the taints with key `key` (every effect).
    pub fn remove_taint(mut self, key: impl Into<String>) -> Self {
        self.remove_taints.push(key.into());
        self
    }

    /// Applies only if the node is still at `resource_version` (see
    /// [`NodePatch::resource_version`]); an empty version sets no precondition.
    pub fn if_resource_version(mut self, resource_version: &str) -> Self {
        self.set_resource_version(resource_version);
        self
    }

    /// [`NodePatch::if_resource_version`] in place, reusing the string the precondition had
    /// (a patch made once and sent to many nodes).
    pub fn set_resource_version(&mut self, resource_version: &str) {
        if resource_version.is_empty() {
            self.resource_version = None;
        } else {
            match &mut self.resource_version {
                Some(rv) => resource_version.clone_into(rv),
                None => self.resource_version = Some(resource_version.to_owned()),
            }
        }
    }

    /// Whether the patch changes nothing (a precondition alone changes nothing).
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
            && self.annotations.is_empty()
            && self.add_taints.is_empty()
            && self.remove_taints.is_empty()
            && self.unschedulable.is_none()
            && self.provider_id.is_none()
    }

    /// Applies the patch to a node view in place (what an implementation stores; the simulator
    /// and tests use it, adapters send the patch instead).
    pub fn apply_to(&self, node: &mut Node) {
        apply_entries(&mut node.labels, &self.labels);
        apply_entries(&mut node.annotations, &self.annotations);
        if !self.remove_taints.is_empty() {
            node.taints.retain(|t| !self.remove_taints.contains(&t.key));
        }
        for taint in &self.add_taints {
            node.taints
                .retain(|t| !(t.key == taint.key && t.effect == taint.effect));
            node.taints.push(taint.clone());
        }
        if let Some(value) = self.unschedulable {
            node.unschedulable = value;
        }
        if let Some(id) = &self.provider_id {
            node.provider_id = Some(id.clone());
        }
    }
}

/// Sets (`Some`) or removes (`None`) each entry of `changes` in `map`, taking the map to change
/// once for all of them (none when there are none, or when they only remove from an empty map).
fn apply_entries(map: &mut StringMap, changes: &BTreeMap<String, Option<String>>) {
    if changes.is_empty() || (map.is_empty() && changes.values().all(Option::is_none)) {
        return;
    }
    let map = &mut **map;
    for (key, value) in changes {
        match value {
            Some(value) => map.insert(key.clone(), value.clone()),
            None => map.remove(key),
        };
    }
}

/// How an eviction request ended, when the API answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionResult {
    /// Accepted: the pod terminates (it may still be listed for its grace period).
    Evicted,
    /// Refused because a PodDisruptionBudget allows no disruption now (HTTP 429 on the eviction
    /// subresource); the message is the server's.
    RefusedByBudget(String),
    /// The pod does not exist (any more).
    Gone,
}

/// The object an event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Kind (`Node`, `Pod`, `NodeGroup`).
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// A Node.
    pub fn node(name: impl Into<String>) -> Self {
        Self {
            kind: "Node".into(),
            namespace: String::new(),
            name: name.into(),
        }
    }

    /// A NodeGroup.
    pub fn node_group(name: impl Into<String>) -> Self {
        Self {
            kind: "NodeGroup".into(),
            namespace: String::new(),
            name: name.into(),
        }
    }

    /// A Pod.
    pub fn pod(pod: &PodRef) -> Self {
        Self {
            kind: "Pod".into(),
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
        }
    }
}

/// `Normal` or `Warning`, as Kubernetes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Something expected happened.
    Normal,
    /// Something needs attention.
    Warning,
}

/// An event to record on an object (`events.k8s.io/v1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The object.
    pub regarding: ObjectRef,
    /// `Normal` or `Warning`.
    pub kind: EventKind,
    /// CamelCase reason (`DrainFailed`, `UpdateApproved`).
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// When it happened (the core has no clock: the caller's `now`).
    pub time: Timestamp,
}

/// A position in a port's feed of Node changes ([`ClusterRead::node_changes_since`]). Opaque:
/// meaningful only to the port that issued it, which may answer any revision it does not know
/// (too old, from another port) with a resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeRevision(pub u64);

/// What changed among the Nodes of [`ClusterRead::list_nodes_shared`] since a
/// [`NodeRevision`] ([`ClusterRead::node_changes_since`]).
///
/// Applied to the list the caller had at that revision — every name in `removed` taken out,
/// then every node of `changed` put in by name — it gives the nodes `list_nodes_shared` would
/// answer now, as a set by name. A resync (`resync`) is the whole list instead: the caller
/// forgets what it had and keeps `changed`, in its order.
#[derive(Debug, Clone, Default)]
pub struct NodeChanges {
    /// The revision the caller is at after applying this answer, to ask from next time;
    /// `None` when the port cannot continue from here (its next answer is a resync).
    pub revision: Option<NodeRevision>,
    /// Whether `changed` is the complete list of nodes (not changes).
    pub resync: bool,
    /// The nodes added or changed since the revision (each name once), or every node on a
    /// resync. A node the port still shares as the same `Arc` did not change.
    pub changed: Vec<Arc<Node>>,
    /// The names of the nodes removed since the revision (empty on a resync); never a name
    /// that is in `changed`.
    pub removed: Vec<String>,
}

impl NodeChanges {
    /// A resync: `nodes` is the whole list, and the next call starts over (`revision: None`).
    pub fn resync(nodes: Vec<Arc<Node>>) -> Self {
        Self {
            revision: None,
            resync: true,
            changed: nodes,
            removed: Vec::new(),
        }
    }
}

/// What a drain reads of one pod on its node ([`ClusterRead::list_node_pods`]): a drain
/// needs no more than the pod's identity and whether it evicts it, so a port need not copy
/// whole pods for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePod {
    /// `namespace/name` ([`Pod::key`]).
    pub key: String,
    /// The pod's UID.
    pub uid: String,
    /// Whether a drain evicts it ([`crate::drain::is_evictable`]: not a DaemonSet's, mirror
    /// or finished pod).
    pub evictable: bool,
}

impl NodePod {
    /// What a drain reads of `pod`.
    pub fn of(pod: &Pod) -> Self {
        Self {
            key: pod.key(),
            uid: pod.uid.clone(),
            evictable: crate::drain::is_evictable(pod),
        }
    }
}

/// Reading the cluster: consistent-enough snapshots as the core's model views.
#[async_trait]
pub trait ClusterRead: Send + Sync {
    /// Every NodeGroup, with its spec and status.
    async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError>;

    /// [`ClusterRead::list_node_groups`] with the groups shared rather than copied: a port
    /// that keeps what it answered hands out the same `Arc` for a group as long as the group
    /// (as listed) does not change, so a caller comparing groups between calls finds an
    /// unchanged one by pointer. The default wraps [`ClusterRead::list_node_groups`].
    async fn list_node_groups_shared(&self) -> Result<Vec<Arc<NodeGroup>>, ClusterError> {
        Ok(self
            .list_node_groups()
            .await?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    /// Every Node. [`Node::last_heartbeat`] is the node's Lease `renewTime` in
    /// `kube-node-lease` when the Lease exists, else the Ready condition's
    /// `lastHeartbeatTime`; `None` when neither is known.
    ///
    /// May come from a cache that lags behind the API (a watch): it can miss recent writes,
    /// including the caller's own. Each node carries its [`Node::resource_version`].
    async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError>;

    /// Every Node as [`ClusterRead::list_nodes`], read from the API itself rather than a cache:
    /// it includes every write that completed before the call. For decisions that must not be
    /// taken on a stale view (`docs/optimistic-concurrency.md`). The default is
    /// [`ClusterRead::list_nodes`], right for ports whose reads are never stale; ports with a
    /// cache override it.
    async fn list_nodes_fresh(&self) -> Result<Vec<Node>, ClusterError> {
        self.list_nodes().await
    }

    /// [`ClusterRead::list_nodes`] with the nodes shared rather than copied. A port that keeps
    /// its nodes as `Arc<Node>` hands out the same `Arc` for a node as long as the node does
    /// not change (the update executor then plans again only the groups with a changed node,
    /// [`crate::executor::UpdateExecutor`]); [`Node::last_heartbeat`] may be older than in
    /// [`ClusterRead::list_nodes`] (a Lease renewal is not a change of the Node). The default
    /// wraps [`ClusterRead::list_nodes`].
    async fn list_nodes_shared(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        Ok(self.list_nodes().await?.into_iter().map(Arc::new).collect())
    }

    /// [`ClusterRead::list_nodes_fresh`] shared as [`ClusterRead::list_nodes_shared`]. The
    /// default wraps [`ClusterRead::list_nodes_fresh`].
    async fn list_nodes_fresh_shared(&self) -> Result<Vec<Arc<Node>>, ClusterError> {
        Ok(self
            .list_nodes_fresh()
            .await?
            .into_iter()
            .map(Arc::new)
            .collect())
    }

    /// What changed among the nodes of [`ClusterRead::list_nodes_shared`] since `since` (see
    /// [`NodeChanges`]): the same cache, read the same way (it may lag, and injected or real
    /// failures of the list apply to it), answered as a difference, so that a caller keeping
    /// the nodes between calls does work proportional to what changed. `None` asks for
    /// everything.
    ///
    /// The default answers every call with a resync of [`ClusterRead::list_nodes_shared`],
    /// which is right for every port; the simulator answers from its versioned nodes (only
    /// the nodes that changed) and node-manager's kube adapter could answer from its
    /// reflector's watch events. A port answers a resync whenever it cannot tell what changed
    /// since `since` (unknown or too old a revision, a relist of its cache).
    async fn node_changes_since(
        &self,
        since: Option<NodeRevision>,
    ) -> Result<NodeChanges, ClusterError> {
        let _ = since;
        Ok(NodeChanges::resync(self.list_nodes_shared().await?))
    }

    /// Every Pod bound or not, in every namespace (terminated ones included; callers filter).
    async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError>;

    /// The pods bound to `node` (`spec.nodeName`). The default filters [`ClusterRead::list_pods`];
    /// adapters override it with a field selector or an index.
    async fn list_pods_on_node(&self, node: &str) -> Result<Vec<Pod>, ClusterError> {
        let mut pods = self.list_pods().await?;
        pods.retain(|p| p.node_name.as_deref() == Some(node));
        Ok(pods)
    }

    /// What a drain reads of the pods bound to `node` ([`NodePod`]: each pod's
    /// `namespace/name`, UID and whether a drain evicts it), in the order of
    /// [`ClusterRead::list_pods_on_node`] (the same pods, bound to `node`). The default maps
    /// that list; a port that keeps its pods in memory answers without copying them (the
    /// simulator).
    async fn list_node_pods(&self, node: &str) -> Result<Vec<NodePod>, ClusterError> {
        Ok(self
            .list_pods_on_node(node)
            .await?
            .iter()
            .map(NodePod::of)
            .collect())
    }

    /// Every PodDisruptionBudget with its current `status.disruptionsAllowed`.
    async fn list_pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError>;

    /// The desired configuration checksum of each NodeGroup, by group name (Deckhouse keeps them
    /// in Secret `configuration-checksums` of `d8-cloud-instance-manager`, docs/deckhouse.md §4). A group
    /// missing from the map has no known checksum yet.
    async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError>;

    /// [`ClusterRead::configuration_checksums`] shared rather than copied: a port that keeps
    /// what it answered hands out the same `Arc` while the checksums do not change (the
    /// update executor reads them at every step). The default wraps
    /// [`ClusterRead::configuration_checksums`].
    async fn configuration_checksums_shared(
        &self,
    ) -> Result<Arc<BTreeMap<String, String>>, ClusterError> {
        Ok(Arc::new(self.configuration_checksums().await?))
    }
}

/// Acting on Nodes.
#[async_trait]
pub trait NodeApi: Send + Sync {
    /// Applies `patch` to node `name` and returns the node as it is afterwards (with its new
    /// [`Node::resource_version`]).
    ///
    /// Guarantees: idempotent (same patch twice = once); labels/annotations not named in the
    /// patch are untouched; with [`NodePatch::resource_version`] nothing changes unless the node
    /// is still at that version. Errors: [`ClusterError::NotFound`] when the node does not
    /// exist; [`ClusterError::Conflict`] when the precondition fails, or, without one, when a
    /// concurrent writer won and the patch could not be re-applied (adapters retry a
    /// read-modify-write of taints a few times first).
    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<Node, ClusterError>;

    /// [`NodeApi::patch_node`] with the node shared rather than copied: a port that keeps its
    /// nodes as `Arc<Node>` hands out the `Arc` its lists and change feed
    /// ([`ClusterRead::node_changes_since`]) share for that version; like theirs, its
    /// [`Node::last_heartbeat`] may be older. The default wraps [`NodeApi::patch_node`].
    async fn patch_node_shared(
        &self,
        name: &str,
        patch: &NodePatch,
    ) -> Result<Arc<Node>, ClusterError> {
        Ok(Arc::new(self.patch_node(name, patch).await?))
    }

    /// Marks node `name` unschedulable. Idempotent; [`ClusterError::NotFound`] when absent.
    async fn cordon(&self, name: &str) -> Result<(), ClusterError> {
        self.patch_node(name, &NodePatch::new().unschedulable(true))
            .await
            .map(|_| ())
    }

    /// Marks node `name` schedulable. Idempotent; [`ClusterError::NotFound`] when absent.
    async fn uncordon(&self, name: &str) -> Result<(), ClusterError> {
        self.patch_node(name, &NodePatch::new().unschedulable(false))
            .await
            .map(|_| ())
    }

    /// Deletes the Node object `name` (background propagation).
    ///
    /// Preconditions: with [`Precondition::Uid`] a node of that name but another UID is left
    /// alone ([`ClusterError::Conflict`]). Errors: [`ClusterError::NotFound`] when no such node
    /// exists (callers treat it as done: deleting twice is harmless).
    async fn delete_node(
        &self,
        name: &str,
        precondition: &Precondition,
    ) -> Result<(), ClusterError>;
}

/// Acting on Pods.
#[async_trait]
pub trait PodApi: Send + Sync {
    /// Asks to evict `pod` through the `policy/v1` Eviction subresource, which honours
    /// PodDisruptionBudgets.
    ///
    /// Returns [`EvictionResult::Evicted`] when accepted (the pod then terminates; it can stay
    /// listed for its grace period), [`EvictionResult::RefusedByBudget`] for HTTP 429, and
    /// [`EvictionResult::Gone`] for a pod that does not exist. `Err` is every other failure;
    /// the drain retries it like a refusal. Idempotent: evicting a terminating pod is
    /// `Evicted` again or `Gone`.
    async fn evict_pod(&self, pod: &PodRef) -> Result<EvictionResult, ClusterError>;

    /// Evicts every pod of `keys` (each `namespace/name`, as [`PodRef::parse`] reads it),
    /// answering [`PodApi::evict_pod`]'s result for each, in the order of `keys`; a key
    /// without `/` answers [`ClusterError::Other`] (`malformed pod key …`) and asks nothing.
    ///
    /// The default asks for all of them **concurrently** (one [`PodApi::evict_pod`] each, as
    /// a drain does for a node's pods). A port whose calls never wait (the simulator) may
    /// answer them one after the other in that order, without a future per pod.
    async fn evict_pods(&self, keys: &[String]) -> Vec<Result<EvictionResult, ClusterError>> {
        futures::future::join_all(keys.iter().map(|key| async move {
            match PodRef::parse(key) {
                Some(pod) => self.evict_pod(&pod).await,
                None => Err(malformed_pod_key(key)),
            }
        }))
        .await
    }

    /// Deletes `pod` without the eviction API (PodDisruptionBudgets do not apply), with
    /// `grace_period` (`Some(ZERO)` = immediately, `None` = the pod's own).
    ///
    /// Preconditions: with [`Precondition::Uid`] a pod of that name but another UID (a
    /// StatefulSet's replacement) is left alone ([`ClusterError::Conflict`]). Errors:
    /// [`ClusterError::NotFound`] when the pod does not exist (callers treat it as done).
    async fn delete_pod(
        &self,
        pod: &PodRef,
        grace_period: Option<Duration>,
        precondition: &Precondition,
    ) -> Result<(), ClusterError>;
}

/// Recording events for people (`kubectl describe`, `kubectl get events`).
#[async_trait]
pub trait EventApi: Send + Sync {
    /// Records `event`. Best effort: callers log a failure and go on, never retry forever.
    async fn emit_event(&self, event: &RecordedEvent) -> Result<(), ClusterError>;

    /// [`EventApi::emit_event`] for an event the caller no longer needs: a port that keeps
    /// events (the simulator) takes it without a copy. The default records `&event`.
    async fn emit_event_owned(&self, event: RecordedEvent) -> Result<(), ClusterError> {
        self.emit_event(&event).await
    }
}

/// What the fencing executor needs beyond the cached reads: how fresh the cache is, the node
/// Leases it holds, and a direct read of one node with its Lease (docs/fencing.md). Ports
/// without a cache (the simulator) answer "fresh" and read the node as listed.
#[async_trait]
pub trait NodeHealthRead: Send + Sync {
    /// How fresh the cached view is: the age of the Lease watch's last delivery and the stores
    /// whose watch is failing ([`crate::fencing::judge_cache`] decides whether to act on it).
    fn cache_health(&self) -> crate::fencing::CacheHealth;

    /// The cached `renewTime` of each node's Lease in `kube-node-lease`, by node name; empty
    /// when the port folds Leases into [`Node::last_heartbeat`] itself.
    fn lease_renewals(&self) -> BTreeMap<String, Timestamp>;

    /// Node `name` and its Lease's `renewTime`, read from the API itself (not a cache):
    /// `Ok(None)` when the node does not exist.
    async fn read_node_direct(
        &self,
        name: &str,
    ) -> Result<Option<(Node, Option<Timestamp>)>, ClusterError>;
}

/// The whole cluster port: every type implementing the four capability traits.
pub trait ClusterApi: ClusterRead + NodeApi + PodApi + EventApi {}

impl<T: ClusterRead + NodeApi + PodApi + EventApi + ?Sized> ClusterApi for T {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::TaintEffect;
    use proptest::prelude::*;

    #[test]
    fn pod_refs_parse_keys() {
        assert_eq!(PodRef::parse("ns/web-0"), Some(PodRef::new("ns", "web-0")));
        assert_eq!(PodRef::parse("no-slash"), None);
        assert_eq!(PodRef::new("a", "b").to_string(), "a/b");
        for (namespace, name) in [("a", "b"), ("", "x"), ("kube-system", "web-0/1")] {
            let pod = PodRef::new(namespace, name);
            assert_eq!(pod.key(), pod.to_string());
        }
    }

    #[test]
    fn node_patches_are_idempotent() {
        let mut node = Node {
            name: "n".into(),
            ..Node::default()
        };
        node.annotations.insert("gone".into(), "x".into());
        node.taints.push(Taint {
            key: "old".into(),
            value: None,
            effect: Some(TaintEffect::NoSchedule),
        });
        let patch = NodePatch {
            add_taints: vec![Taint {
                key: "t".into(),
                value: Some("1".into()),
                effect: Some(TaintEffect::NoExecute),
            }],
            remove_taints: vec!["old".into()],
            ..NodePatch::new()
                .set_annotation("a", "1")
                .remove_annotation("gone")
                .set_label("l", "v")
                .unschedulable(true)
        };
        patch.apply_to(&mut node);
        let once = node.clone();
        patch.apply_to(&mut node);
        assert_eq!(node, once);
        assert_eq!(node.annotations.get("a").map(String::as_str), Some("1"));
        assert!(!node.annotations.contains_key("gone"));
        assert_eq!(node.taints.len(), 1);
        assert_eq!(node.taints[0].key, "t");
        assert!(node.unschedulable);
        assert!(!patch.is_empty());
        assert!(NodePatch::new().is_empty());
    }

    /// A map of up to six entries over six keys (`a`–`f`), or an empty one.
    fn small_map() -> impl Strategy<Value = BTreeMap<String, String>> {
        prop::collection::btree_map("[a-f]", "[xy]", 0..7)
    }

    /// Changes over the same keys and one more: set (`Some`) or remove (`None`), often
    /// several removals.
    fn small_changes() -> impl Strategy<Value = BTreeMap<String, Option<String>>> {
        prop::collection::btree_map("[a-g]", prop::option::weighted(0.3, "[xy]"), 0..7)
    }

    proptest! {
        /// A patch's labels and annotations, applied to maps that may be empty or shared with
        /// another view, end as each change made one by one on a plain map; the other view
        /// keeps its content.
        #[test]
        fn patched_maps_are_the_changes_made_one_by_one(
            labels in small_map(),
            annotations in small_map(),
            label_changes in small_changes(),
            annotation_changes in small_changes(),
            shared in any::<bool>(),
        ) {
            let mut node = Node {
                labels: labels.clone().into(),
                annotations: annotations.clone().into(),
                ..Node::default()
            };
            let other = shared.then(|| node.clone());
            let patch = NodePatch {
                labels: label_changes.clone(),
                annotations: annotation_changes.clone(),
                ..NodePatch::new()
            };
            patch.apply_to(&mut node);
            let one_by_one = |mut map: BTreeMap<String, String>, changes: &BTreeMap<String, Option<String>>| {
                for (key, value) in changes {
                    match value {
                        Some(v) => map.insert(key.clone(), v.clone()),
                        None => map.remove(key),
                    };
                }
                map
            };
            prop_assert_eq!(&*node.labels, &one_by_one(labels.clone(), &label_changes));
            prop_assert_eq!(&*node.annotations, &one_by_one(annotations.clone(), &annotation_changes));
            if let Some(other) = other {
                prop_assert_eq!(&*other.labels, &labels);
                prop_assert_eq!(&*other.annotations, &annotations);
            }
        }
    }

    #[test]
    fn errors_say_what_to_do() {
        assert!(ClusterError::not_found("node n").is_not_found());
        assert!(ClusterError::unavailable("timeout").is_retryable());
        assert!(!ClusterError::other("forbidden").is_retryable());
        assert_eq!(
            ClusterError::conflict("uid changed").to_string(),
            "conflict: uid changed"
        );
    }
}
