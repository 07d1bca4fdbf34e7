//! The pod cache behind [`crate::cluster::KubeCluster`]: what node-manager keeps of each Pod
//! its watch delivers, and how it finds the pods of one node (`docs/scale.md` §2).
//!
//! A Pod is kept as the core's view of it ([`core::Pod`], what the policies read) and nothing
//! else: no `managedFields`, no container images, env, probes, status conditions — and of its
//! annotations only those a policy reads ([`KEPT_POD_ANNOTATIONS`]). The view is split in
//! two: what each pod has of its own (name, uid, node, phase) and what the pods of one
//! controller share (namespace, labels, the kept annotations, owner, priority, requests,
//! scheduling constraints), which is stored once for all the pods that have the same. A
//! ReplicaSet's fifty pods hold one shared part; a pod with labels of its own (a StatefulSet's
//! pod name) holds its own.
//!
//! The pod watch does not even parse the rest: [`PodFields`] reads from each Pod the fields
//! [`pod_to_core`] reads and skips everything else (`managedFields` first) without allocating
//! it, which at 150,000 pods is most of the work of the first list.
//!
//! Pods are indexed by node, so [`PodCache::on_node`] costs the node's pods, not the
//! cluster's. A relist (the watch restarted) marks every pod it delivers with a new epoch and
//! drops, once the list is complete, the pods it did not deliver: no second copy of the cache
//! is built meanwhile.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{
    Affinity, Container, EmptyDirVolumeSource, HostPathVolumeSource, Pod, PodSpec, PodStatus,
    ResourceRequirements, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::runtime::watcher;
use nodemgr_core::model::{
    self as core, LabelSelector, LabelSelectorRequirement, Owner, PodAffinityTerm, PodPhase,
    Resources, StringMap, Toleration, TopologySpreadConstraint, WeightedPodAffinityTerm, keys,
};
use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::sync::watch;

use crate::convert::pod_to_core;

/// The only pod annotations kept: the ones a policy reads (the drain skips mirror pods,
/// scale-down honours `safe-to-evict`). Every other annotation is dropped on arrival.
pub const KEPT_POD_ANNOTATIONS: [&str; 2] =
    [keys::ANNOTATION_MIRROR_POD, keys::ANNOTATION_SAFE_TO_EVICT];

/// A Pod as the pod watch reads it: a k8s-openapi [`Pod`] with only the fields
/// [`pod_to_core`] reads (and the resourceVersion the watch resumes from); the parser skips
/// the rest of the object without allocating it.
#[derive(Debug, Clone, Default)]
pub struct PodFields(pub Pod);

impl k8s_openapi::Resource for PodFields {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for PodFields {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// The parts of a Pod that are read, as they come on the wire.
#[derive(Deserialize)]
struct WirePod {
    #[serde(default)]
    metadata: WireMeta,
    spec: Option<WireSpec>,
    status: Option<WireStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerReference>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    node_name: Option<String>,
    priority: Option<i32>,
    priority_class_name: Option<String>,
    #[serde(default)]
    containers: Vec<WireContainer>,
    init_containers: Option<Vec<WireContainer>>,
    node_selector: Option<BTreeMap<String, String>>,
    affinity: Option<Affinity>,
    tolerations: Option<Vec<k8s_openapi::api::core::v1::Toleration>>,
    topology_spread_constraints: Option<Vec<k8s_openapi::api::core::v1::TopologySpreadConstraint>>,
    volumes: Option<Vec<WireVolume>>,
}

#[derive(Deserialize)]
struct WireContainer {
    resources: Option<WireResources>,
}

#[derive(Deserialize)]
struct WireResources {
    requests: Option<BTreeMap<String, Quantity>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireVolume {
    empty_dir: Option<IgnoredAny>,
    host_path: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct WireStatus {
    phase: Option<String>,
}

impl WireContainer {
    fn into_container(self) -> Container {
        Container {
            resources: self.resources.map(|r| ResourceRequirements {
                requests: r.requests,
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }
    }
}

impl<'de> Deserialize<'de> for PodFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let WirePod {
            metadata,
            spec,
            status,
        } = WirePod::deserialize(deserializer)?;
        let spec = spec.map(|s| PodSpec {
            node_name: s.node_name,
            priority: s.priority,
            priority_class_name: s.priority_class_name,
            containers: s
                .containers
                .into_iter()
                .map(WireContainer::into_container)
                .collect(),
            init_containers: s
                .init_containers
                .map(|cs| cs.into_iter().map(WireContainer::into_container).collect()),
            node_selector: s.node_selector,
            affinity: s.affinity,
            tolerations: s.tolerations,
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes.map(|vs| {
                vs.into_iter()
                    .map(|v| Volume {
                        empty_dir: v.empty_dir.map(|_| EmptyDirVolumeSource::default()),
                        host_path: v.host_path.map(|_| HostPathVolumeSource::default()),
                        ..Volume::default()
                    })
                    .collect()
            }),
            ..PodSpec::default()
        });
        Ok(PodFields(Pod {
            metadata: ObjectMeta {
                name: metadata.name,
                namespace: metadata.namespace,
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                labels: metadata.labels,
                annotations: metadata.annotations,
                owner_references: metadata.owner_references,
                ..ObjectMeta::default()
            },
            spec,
            status: status.map(|s| PodStatus {
                phase: s.phase,
                ..PodStatus::default()
            }),
        }))
    }
}

/// What the pods of one controller have in common, stored once for all of them.
#[derive(Debug, PartialEq)]
struct Shared {
    namespace: String,
    labels: StringMap,
    annotations: StringMap,
    owner: Option<Owner>,
    priority: i32,
    priority_class: Option<String>,
    requests: Resources,
    node_selector: BTreeMap<String, String>,
    required_node_affinity: Vec<Vec<LabelSelectorRequirement>>,
    hostname_anti_affinity: Vec<LabelSelector>,
    pod_affinity: Vec<PodAffinityTerm>,
    pod_anti_affinity: Vec<PodAffinityTerm>,
    preferred_pod_affinity: Vec<WeightedPodAffinityTerm>,
    preferred_pod_anti_affinity: Vec<WeightedPodAffinityTerm>,
    topology_spread: Vec<TopologySpreadConstraint>,
    unmodelled_constraints: Vec<String>,
    tolerations: Vec<Toleration>,
    has_local_storage: bool,
}

impl Shared {
    /// A hash of every field (through `Debug`, deterministic for these types: the core's
    /// types do not all implement `Hash`).
    fn fingerprint(&self) -> u64 {
        struct Feed<'a>(&'a mut std::hash::DefaultHasher);
        impl std::fmt::Write for Feed<'_> {
            fn write_str(&mut self, s: &str) -> std::fmt::Result {
                self.0.write(s.as_bytes());
                Ok(())
            }
        }
        let mut hasher = std::hash::DefaultHasher::new();
        // Writing into a hasher cannot fail.
        let _ = std::fmt::write(&mut Feed(&mut hasher), format_args!("{self:?}"));
        hasher.finish()
    }
}

/// One cached pod.
#[derive(Debug)]
struct Entry {
    /// `namespace/name`.
    key: Box<str>,
    uid: Box<str>,
    node: Option<Arc<str>>,
    phase: PodPhase,
    /// The list (or watch) epoch that last delivered it.
    epoch: u32,
    shared: Arc<Shared>,
}

impl Entry {
    fn name(&self) -> &str {
        self.key
            .get(self.shared.namespace.len().saturating_add(1)..)
            .unwrap_or_default()
    }

    fn to_core(&self) -> core::Pod {
        let s = &*self.shared;
        core::Pod {
            namespace: s.namespace.clone(),
            name: self.name().to_owned(),
            uid: self.uid.to_string(),
            node_name: self.node.as_deref().map(str::to_owned),
            labels: s.labels.clone(),
            annotations: s.annotations.clone(),
            owner: s.owner.clone(),
            priority: s.priority,
            priority_class: s.priority_class.clone(),
            requests: s.requests.clone(),
            node_selector: s.node_selector.clone(),
            required_node_affinity: s.required_node_affinity.clone(),
            hostname_anti_affinity: s.hostname_anti_affinity.clone(),
            pod_affinity: s.pod_affinity.clone(),
            pod_anti_affinity: s.pod_anti_affinity.clone(),
            preferred_pod_affinity: s.preferred_pod_affinity.clone(),
            preferred_pod_anti_affinity: s.preferred_pod_anti_affinity.clone(),
            topology_spread: s.topology_spread.clone(),
            unmodelled_constraints: s.unmodelled_constraints.clone(),
            tolerations: s.tolerations.clone(),
            has_local_storage: s.has_local_storage,
            phase: self.phase,
        }
    }
}

/// An entry in the set of pods, looked up by its `namespace/name`.
#[derive(Debug, Clone)]
struct ByKey(Arc<Entry>);

impl Borrow<str> for ByKey {
    fn borrow(&self) -> &str {
        &self.0.key
    }
}

impl Hash for ByKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes: lookups by `&str` must find it.
        <str as Hash>::hash(&self.0.key, state);
    }
}

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ByKey {}

#[derive(Debug, Default)]
struct Index {
    pods: HashSet<ByKey>,
    by_node: HashMap<Arc<str>, Vec<Arc<Entry>>>,
    /// Every shared part in use, by fingerprint.
    shared: HashMap<u64, Vec<Arc<Shared>>>,
    epoch: u32,
}

fn key_of(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Index {
    /// The stored copy of `part`, or `part` itself stored as a new one.
    fn intern(&mut self, part: Shared) -> Arc<Shared> {
        let bucket = self.shared.entry(part.fingerprint()).or_default();
        if let Some(existing) = bucket.iter().find(|s| ***s == part) {
            return existing.clone();
        }
        let part = Arc::new(part);
        bucket.push(part.clone());
        part
    }

    /// Forgets `part` when no entry uses it any more (called after an entry was dropped,
    /// with a clone of its part).
    fn release(&mut self, part: &Arc<Shared>) {
        // Left when unused: the interner's and the caller's.
        if Arc::strong_count(part) > 2 {
            return;
        }
        let fingerprint = part.fingerprint();
        if let Some(bucket) = self.shared.get_mut(&fingerprint) {
            bucket.retain(|s| !Arc::ptr_eq(s, part));
            if bucket.is_empty() {
                self.shared.remove(&fingerprint);
            }
        }
    }

    fn node_name(&self, node: Option<String>) -> Option<Arc<str>> {
        let node = node?;
        Some(match self.by_node.get_key_value(node.as_str()) {
            Some((name, _)) => name.clone(),
            None => Arc::from(node),
        })
    }

    fn apply(&mut self, pod: core::Pod) {
        let core::Pod {
            namespace,
            name,
            uid,
            node_name,
            labels,
            mut annotations,
            owner,
            priority,
            priority_class,
            requests,
            node_selector,
            required_node_affinity,
            hostname_anti_affinity,
            pod_affinity,
            pod_anti_affinity,
            preferred_pod_affinity,
            preferred_pod_anti_affinity,
            topology_spread,
            unmodelled_constraints,
            tolerations,
            has_local_storage,
            phase,
        } = pod;
        annotations.retain(|k, _| KEPT_POD_ANNOTATIONS.contains(&k.as_str()));
        let key = key_of(&namespace, &name);
        self.remove(&key);
        let shared = self.intern(Shared {
            namespace,
            labels,
            annotations,
            owner,
            priority,
            priority_class,
            requests,
            node_selector,
            required_node_affinity,
            hostname_anti_affinity,
            pod_affinity,
            pod_anti_affinity,
            preferred_pod_affinity,
            preferred_pod_anti_affinity,
            topology_spread,
            unmodelled_constraints,
            tolerations,
            has_local_storage,
        });
        let node = self.node_name(node_name);
        let entry = Arc::new(Entry {
            key: key.into_boxed_str(),
            uid: uid.into_boxed_str(),
            node: node.clone(),
            phase,
            epoch: self.epoch,
            shared,
        });
        if let Some(node) = node {
            self.by_node.entry(node).or_default().push(entry.clone());
        }
        self.pods.insert(ByKey(entry));
    }

    fn remove(&mut self, key: &str) {
        let Some(ByKey(entry)) = self.pods.take(key) else {
            return;
        };
        if let Some(node) = &entry.node
            && let Some(pods) = self.by_node.get_mut(&**node)
        {
            pods.retain(|p| !Arc::ptr_eq(p, &entry));
            if pods.is_empty() {
                self.by_node.remove(&**node);
            }
        }
        let shared = entry.shared.clone();
        drop(entry);
        self.release(&shared);
    }

    fn begin_list(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
    }

    fn end_list(&mut self) {
        let stale: Vec<Box<str>> = self
            .pods
            .iter()
            .filter(|p| p.0.epoch != self.epoch)
            .map(|p| p.0.key.clone())
            .collect();
        for key in stale {
            self.remove(&key);
        }
    }
}

/// The read side of the pod cache (cheap to clone).
#[derive(Debug, Clone)]
pub struct PodCache {
    index: Arc<RwLock<Index>>,
    ready: watch::Receiver<bool>,
}

/// The write side, fed by the pod watch.
#[derive(Debug)]
pub struct PodCacheWriter {
    index: Arc<RwLock<Index>>,
    ready: watch::Sender<bool>,
}

/// An empty cache and its writer.
pub fn pod_cache() -> (PodCache, PodCacheWriter) {
    let index = Arc::new(RwLock::new(Index::default()));
    let (ready_tx, ready_rx) = watch::channel(false);
    (
        PodCache {
            index: index.clone(),
            ready: ready_rx,
        },
        PodCacheWriter {
            index,
            ready: ready_tx,
        },
    )
}

/// Why [`PodCache::wait_until_ready`] gave up.
#[derive(Debug, thiserror::Error)]
#[error("the pod watch stopped before its first complete list")]
pub struct WriterGone;

impl PodCacheWriter {
    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies one event of the pod watch.
    pub fn apply_watcher_event(&self, event: &watcher::Event<PodFields>) {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                self.apply(pod_to_core(&pod.0));
            }
            watcher::Event::Delete(pod) => self.delete(
                pod.0.metadata.namespace.as_deref().unwrap_or_default(),
                pod.0.metadata.name.as_deref().unwrap_or_default(),
            ),
            watcher::Event::Init => self.begin_list(),
            watcher::Event::InitDone => self.end_list(),
        }
    }

    /// Adds or replaces a pod (its annotations are pruned to [`KEPT_POD_ANNOTATIONS`]).
    pub fn apply(&self, pod: core::Pod) {
        self.write().apply(pod);
    }

    /// Removes a pod.
    pub fn delete(&self, namespace: &str, name: &str) {
        self.write().remove(&key_of(namespace, name));
    }

    /// A complete list starts: pods it does not deliver are dropped at its end.
    pub fn begin_list(&self) {
        self.write().begin_list();
    }

    /// The list is complete: drops the pods it did not deliver; the cache is ready.
    pub fn end_list(&self) {
        self.write().end_list();
        self.ready.send_replace(true);
    }
}

impl PodCache {
    /// A cache nobody writes to: always empty, never ready.
    pub fn empty() -> PodCache {
        pod_cache().0
    }

    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the first complete list.
    ///
    /// # Errors
    /// When the writer is gone before that.
    pub async fn wait_until_ready(&self) -> Result<(), WriterGone> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|r| *r)
            .await
            .map(|_| ())
            .map_err(|_| WriterGone)
    }

    /// Every pod, as the core sees it (kept annotations only).
    pub fn all(&self) -> Vec<core::Pod> {
        self.read().pods.iter().map(|p| p.0.to_core()).collect()
    }

    /// The pods bound to `node`.
    pub fn on_node(&self, node: &str) -> Vec<core::Pod> {
        self.read()
            .by_node
            .get(node)
            .map(|pods| pods.iter().map(|p| p.to_core()).collect())
            .unwrap_or_default()
    }

    /// How many pods are cached.
    pub fn len(&self) -> usize {
        self.read().pods.len()
    }

    /// Whether no pod is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many distinct shared parts the cached pods hold (see the module docs).
    pub fn shared_parts(&self) -> usize {
        self.read().shared.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(ns: &str, name: &str, node: Option<&str>, app: &str, own_label: bool) -> core::Pod {
        let mut labels = BTreeMap::from([("app".to_owned(), app.to_owned())]);
        if own_label {
            labels.insert("pod-name".into(), name.into());
        }
        core::Pod {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{ns}-{name}"),
            node_name: node.map(str::to_owned),
            labels: labels.into(),
            annotations: StringMap::from([
                (
                    "cni.projectcalico.org/podIP".to_owned(),
                    format!("10.0.0.{name}"),
                ),
                (keys::ANNOTATION_SAFE_TO_EVICT.to_owned(), "true".to_owned()),
            ]),
            owner: Some(Owner {
                kind: "ReplicaSet".into(),
                name: app.into(),
            }),
            phase: PodPhase::Running,
            ..core::Pod::default()
        }
    }

    fn kept(mut pod: core::Pod) -> core::Pod {
        pod.annotations
            .retain(|k, _| KEPT_POD_ANNOTATIONS.contains(&k.as_str()));
        pod
    }

    fn sorted(mut pods: Vec<core::Pod>) -> Vec<core::Pod> {
        pods.sort_by_key(core::Pod::key);
        pods
    }

    #[test]
    fn pods_of_one_controller_share_one_part_and_lose_unread_annotations() {
        let (cache, writer) = pod_cache();
        for i in 0..50 {
            writer.apply(pod("ns", &i.to_string(), Some("n1"), "web", false));
        }
        writer.apply(pod("ns", "db-0", Some("n2"), "db", true));
        assert_eq!(cache.len(), 51);
        assert_eq!(cache.shared_parts(), 2);
        let on_n2 = cache.on_node("n2");
        assert_eq!(on_n2, vec![kept(pod("ns", "db-0", Some("n2"), "db", true))]);
        assert_eq!(
            on_n2[0].annotations.keys().collect::<Vec<_>>(),
            [keys::ANNOTATION_SAFE_TO_EVICT]
        );
        assert_eq!(cache.on_node("n1").len(), 50);
        writer.delete("ns", "db-0");
        assert_eq!(cache.shared_parts(), 1, "a part nobody uses is forgotten");
        assert!(cache.on_node("n2").is_empty());
    }

    #[tokio::test]
    async fn a_relist_drops_what_it_did_not_deliver_and_makes_the_cache_ready() {
        let (cache, writer) = pod_cache();
        writer.begin_list();
        writer.apply(pod("ns", "a", Some("n1"), "web", false));
        writer.apply(pod("ns", "b", Some("n1"), "web", false));
        writer.end_list();
        cache.wait_until_ready().await.unwrap();
        writer.begin_list();
        writer.apply(pod("ns", "b", Some("n2"), "web", false));
        assert_eq!(
            cache.len(),
            2,
            "the old state is served until the list ends"
        );
        writer.end_list();
        assert_eq!(
            cache.all(),
            vec![kept(pod("ns", "b", Some("n2"), "web", false))]
        );
        assert!(cache.on_node("n1").is_empty());
    }

    /// A Pod with every part `pod_to_core` reads and much it does not.
    fn wire_pod(
        node: Option<&str>,
        init: bool,
        volume: u8,
        affinity: bool,
        phase: &str,
    ) -> serde_json::Value {
        use serde_json::json;
        let volumes = [
            json!([{"name": "t", "projected": {"sources": []}}]),
            json!([{"name": "e", "emptyDir": {}}]),
            json!([{"name": "h", "hostPath": {"path": "/", "type": ""}}]),
        ][usize::from(volume % 3)]
        .clone();
        let mut spec = json!({
            "containers": [
                {"name": "a", "image": "x", "env": [{"name": "A", "value": "1"}],
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1"}}},
                {"name": "b", "image": "y", "resources": {"requests": {"cpu": "250m"}}},
            ],
            "priority": 1000, "priorityClassName": "high",
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "volumes": volumes,
        });
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        if init {
            spec["initContainers"] =
                json!([{"name": "i", "resources": {"requests": {"cpu": "2", "memory": "1Mi"}}}]);
        }
        if affinity {
            spec["affinity"] = json!({
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}],
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm":
                        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "web"}}}}]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "db"}}}],
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "podAffinityTerm":
                        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "cache"}}}}]},
            });
            spec["topologySpreadConstraints"] = json!([
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                 "minDomains": 3, "labelSelector": {"matchLabels": {"app": "web"}}},
                {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}},
                {"maxSkew": 1, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule"},
            ]);
        }
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "web"},
                "annotations": {"kubernetes.io/config.mirror": "m", "x": "y"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "r", "controller": true}],
                "managedFields": [{"manager": "kubelet", "operation": "Update", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:phase": {}}}}],
            },
            "spec": spec,
            "status": {"phase": phase, "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}]},
        })
    }

    proptest! {
        /// The pod watch's lean parse gives the core the same view of a pod as the full one.
        #[test]
        fn the_lean_parse_keeps_the_core_view_of_a_pod(
            node in proptest::option::of("[a-z]{1,8}"),
            init in any::<bool>(),
            volume in 0u8..3,
            affinity in any::<bool>(),
            phase in prop::sample::select(vec!["Pending", "Running", "Succeeded", "Failed", ""]),
        ) {
            let json = wire_pod(node.as_deref(), init, volume, affinity, phase);
            let full: Pod = serde_json::from_value(json.clone()).expect("a Pod");
            let lean: PodFields = serde_json::from_value(json).expect("a Pod");
            prop_assert_eq!(pod_to_core(&lean.0), pod_to_core(&full));
            prop_assert_eq!(lean.0.metadata.resource_version.as_deref(), Some("42"));
            prop_assert!(lean.0.metadata.managed_fields.is_none());
        }
    }

    #[tokio::test]
    async fn waiting_on_a_cache_nobody_fills_fails() {
        assert!(PodCache::empty().wait_until_ready().await.is_err());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Apply {
            ns: u8,
            name: u8,
            node: Option<u8>,
            app: u8,
            own_label: bool,
            phase: u8,
        },
        Delete {
            ns: u8,
            name: u8,
        },
        Relist {
            keep: Vec<bool>,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u8..3, 0u8..12, proptest::option::of(0u8..4), 0u8..3, any::<bool>(), 0u8..4)
                .prop_map(|(ns, name, node, app, own_label, phase)| Op::Apply {
                    ns, name, node, app, own_label, phase
                }),
            2 => (0u8..3, 0u8..12).prop_map(|(ns, name)| Op::Delete { ns, name }),
            1 => proptest::collection::vec(any::<bool>(), 0..40).prop_map(|keep| Op::Relist { keep }),
        ]
    }

    proptest! {
        /// Whatever the watch delivers (applies, deletes, relists that keep any subset), the
        /// cache serves exactly the latest state of each pod with the kept annotations only,
        /// the index by node agrees with it, and no shared part outlives its last pod.
        #[test]
        fn the_cache_is_the_latest_state_of_each_pod(ops in proptest::collection::vec(op(), 0..80)) {
            let (cache, writer) = pod_cache();
            let mut model: BTreeMap<String, core::Pod> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Apply { ns, name, node, app, own_label, phase } => {
                        let mut p = pod(
                            &format!("ns{ns}"),
                            &name.to_string(),
                            node.map(|n| format!("n{n}")).as_deref(),
                            &format!("app{app}"),
                            own_label,
                        );
                        p.phase = [PodPhase::Pending, PodPhase::Running, PodPhase::Succeeded, PodPhase::Failed][usize::from(phase)];
                        model.insert(p.key(), kept(p.clone()));
                        writer.apply(p);
                    }
                    Op::Delete { ns, name } => {
                        let (ns, name) = (format!("ns{ns}"), name.to_string());
                        model.remove(&key_of(&ns, &name));
                        writer.delete(&ns, &name);
                    }
                    Op::Relist { keep } => {
                        writer.begin_list();
                        let mut kept_model = BTreeMap::new();
                        for (i, (key, p)) in model.iter().enumerate() {
                            if keep.get(i).copied().unwrap_or(false) {
                                writer.apply(p.clone());
                                kept_model.insert(key.clone(), p.clone());
                            }
                        }
                        writer.end_list();
                        model = kept_model;
                    }
                }
                prop_assert_eq!(sorted(cache.all()), model.values().cloned().collect::<Vec<_>>());
            }
            for n in 0..4 {
                let node = format!("n{n}");
                let expected: Vec<_> = model
                    .values()
                    .filter(|p| p.node_name.as_deref() == Some(node.as_str()))
                    .cloned()
                    .collect();
                prop_assert_eq!(sorted(cache.on_node(&node)), expected);
            }
            let parts: HashSet<String> = model
                .values()
                .map(|p| format!("{:?}{:?}{}", p.labels, p.owner, p.namespace))
                .collect();
            prop_assert_eq!(cache.shared_parts(), parts.len());
        }
    }
}
