//! What bashible-apiserver renders from, read from the cluster through kube-runtime watches:
//! NodeGroups, NodeGroupConfigurations, NodeUsers, the groups' bootstrap token Secrets in
//! `kube-system`, and the cluster context — API endpoints from the `default/kubernetes`
//! EndpointSlice, the cluster CA from the `kube-root-ca.crt` ConfigMap and everything else
//! from the settings ConfigMap ([`SETTINGS_CONFIGMAP`]/[`SETTINGS_KEY`]), both in the
//! server's namespace (`docs/bashible-apiserver.md`, "Cluster mode").
//!
//! Each watch feeds a reflector store and bumps a change counter; the server waits on
//! [`BashibleSources::changes`], debounces, and renders a [`Snapshot`]. A snapshot is a pure
//! function of the stores' contents (objects sorted by name), so two replicas watching the
//! same cluster render the same bytes. While the API is unreachable the stores keep their
//! last contents and no change is signalled, so the last bundles stay served.
//!
//! node-manager joins static and cloud machines with the same cluster context: it watches
//! only the context's objects ([`ClusterContextWatch`]) and reads the context from the
//! stores at each use ([`ContextSource`]), so a moved API endpoint or a rotated CA reaches
//! the next bootstrap script without a restart (`docs/bootstrap.md`).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use nodemgr_core::bashible::{ClusterContext, Customisations, RenderError};
use nodemgr_core::bootstrap_tokens::{
    LABEL_NODE_GROUP, NAMESPACE as TOKEN_NAMESPACE, ObservedToken, SECRET_TYPE as TOKEN_SECRET_TYPE,
};
use nodemgr_core::model::{Manifest, NodeGroup, parse_manifest};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::watch_backoff::WatchBackoff;
use crate::watch_health::WatchHealth;

/// The ConfigMap with the cluster settings bashible-apiserver renders with.
pub const SETTINGS_CONFIGMAP: &str = "bashible-apiserver-settings";
/// Its key: YAML with the fields of the cluster context (`kubernetesVersion`, `clusterDomain`,
/// `clusterDNS`, `podSubnetNodeCIDRPrefix`, `sandboxImage`, and optionally `apiEndpoints` and
/// `caCert`, which then win over the EndpointSlice and `kube-root-ca.crt`).
pub const SETTINGS_KEY: &str = "settings.yaml";
/// The ConfigMap every namespace gets with the cluster CA (key `ca.crt`).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The label of the API server's EndpointSlices in `default`.
pub const KUBERNETES_SERVICE_SELECTOR: &str = "kubernetes.io/service-name=kubernetes";

/// Something in the cluster that cannot be rendered from (the previous render stays served).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourcesError {
    /// The settings ConfigMap does not parse.
    #[error(
        "ConfigMap {namespace}/{SETTINGS_CONFIGMAP} key {SETTINGS_KEY}: {source} (fix it; \
         the last good bundles stay served meanwhile)"
    )]
    Settings {
        /// Its namespace.
        namespace: String,
        /// What is wrong (the parser's error is its source).
        #[source]
        source: RenderError,
    },
    /// A watch ended before its first list (the runtime is shutting down).
    #[error("a watch stopped before its first list")]
    Stopped,
    /// The context's watches have not listed yet (just started, or the API or the RBAC
    /// refuses them: the log names the failing watch).
    #[error(
        "the cluster context is not read yet: the EndpointSlices of default/kubernetes and the \
         ConfigMaps {ROOT_CA_CONFIGMAP} and {SETTINGS_CONFIGMAP} in {namespace} have not been \
         listed (see the log for a failing watch)"
    )]
    NotListed {
        /// The namespace of the ConfigMaps.
        namespace: String,
    },
}

/// One moment of the cluster, as rendering needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// NodeGroups that parse, by name (without status and resourceVersion).
    pub groups: BTreeMap<String, NodeGroup>,
    /// NodeGroups that do not parse, by name, with why.
    pub unreadable_groups: BTreeMap<String, String>,
    /// NodeGroupConfigurations and NodeUsers, sorted by name.
    pub customisations: Customisations,
    /// NodeGroupConfigurations and NodeUsers that do not parse (left out), with why.
    pub problems: Vec<String>,
    /// The cluster context.
    pub cluster: ClusterContext,
    /// The groups' bootstrap tokens (labelled `bootstrap.kubernetes.io/token` Secrets in
    /// `kube-system`), sorted by Secret name.
    pub tokens: Vec<ObservedToken>,
}

/// The stores the cluster context is made of: the API server's EndpointSlices and the
/// ConfigMaps of one namespace.
struct ContextStores {
    endpoints: Store<EndpointSlice>,
    config_maps: Store<ConfigMap>,
    namespace: String,
}

impl ContextStores {
    /// Starts the two watches (their tasks go to `tasks`).
    fn start(
        client: &Client,
        namespace: &str,
        health: &WatchHealth,
        changed: &watch::Sender<u64>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Self {
        let (endpoints, writer) = reflector::store::<EndpointSlice>();
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<EndpointSlice>::namespaced(client.clone(), "default"),
                watcher::Config::default().labels(KUBERNETES_SERVICE_SELECTOR),
            ),
        );
        tasks.push(spawn_watch(
            EndpointSlice::kind(&()).to_string(),
            stream,
            health,
            changed.clone(),
        ));

        let (config_maps, writer) = reflector::store::<ConfigMap>();
        // One watch for both ConfigMaps read (the namespace holds few ConfigMaps).
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<ConfigMap>::namespaced(client.clone(), namespace),
                watcher::Config::default(),
            ),
        );
        tasks.push(spawn_watch(
            ConfigMap::kind(&()).to_string(),
            stream,
            health,
            changed.clone(),
        ));
        Self {
            endpoints,
            config_maps,
            namespace: namespace.to_owned(),
        }
    }

    async fn wait_ready(&self) -> Result<(), SourcesError> {
        let gone = |_| SourcesError::Stopped;
        self.endpoints.wait_until_ready().await.map_err(gone)?;
        self.config_maps.wait_until_ready().await.map_err(gone)?;
        Ok(())
    }

    /// Whether both watches have listed once.
    fn listed(&self) -> bool {
        let ready = |wait: Option<Result<(), reflector::store::WriterDropped>>| {
            wait.is_some_and(|r| r.is_ok())
        };
        ready(self.endpoints.wait_until_ready().now_or_never())
            && ready(self.config_maps.wait_until_ready().now_or_never())
    }

    /// The cluster context in the stores now.
    fn context(&self) -> Result<ClusterContext, SourcesError> {
        let config_map = |name: &str| {
            self.config_maps
                .state()
                .into_iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
        };
        let settings = config_map(SETTINGS_CONFIGMAP)
            .and_then(|c| c.data.as_ref().and_then(|d| d.get(SETTINGS_KEY).cloned()));
        let root_ca = config_map(ROOT_CA_CONFIGMAP)
            .and_then(|c| c.data.as_ref().and_then(|d| d.get("ca.crt").cloned()));
        cluster_context(
            settings.as_deref(),
            &api_endpoints(&self.endpoints.state()),
            root_ca.as_deref(),
        )
        .map_err(|source| SourcesError::Settings {
            namespace: self.namespace.clone(),
            source,
        })
    }
}

/// The watches; dropping it stops them.
pub struct BashibleSources {
    groups: (ApiResource, Store<DynamicObject>),
    configurations: (ApiResource, Store<DynamicObject>),
    users: (ApiResource, Store<DynamicObject>),
    tokens: Store<Secret>,
    context: ContextStores,
    changes: watch::Receiver<u64>,
    health: WatchHealth,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for BashibleSources {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The NodeGroup resource read (`deckhouse.io/v1`).
pub fn node_group_resource() -> ApiResource {
    resource("deckhouse.io", "v1", "NodeGroup", "nodegroups")
}

/// The NodeGroupConfiguration resource read (`deckhouse.io/v1alpha1`).
pub fn configuration_resource() -> ApiResource {
    resource(
        "deckhouse.io",
        "v1alpha1",
        "NodeGroupConfiguration",
        "nodegroupconfigurations",
    )
}

/// The NodeUser resource read (`deckhouse.io/v1`).
pub fn node_user_resource() -> ApiResource {
    resource("deckhouse.io", "v1", "NodeUser", "nodeusers")
}

fn spawn_watch<K>(
    kind: String,
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    health: &WatchHealth,
    changed: watch::Sender<u64>,
) -> JoinHandle<()>
where
    K: Send + 'static,
{
    health.register(&kind);
    let health = health.clone();
    tokio::spawn(async move {
        let stream = stream.backoff(WatchBackoff::new());
        futures::pin_mut!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    health.delivered(&kind);
                    // A list in progress is not a state to render: signal at its end.
                    if !matches!(event, watcher::Event::Init | watcher::Event::InitApply(_)) {
                        changed.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
                Err(error) => {
                    health.failed(&kind);
                    tracing::warn!(%kind, %error, "watch failed; retrying with backoff");
                }
            }
        }
    })
}

fn dynamic_store(
    client: &Client,
    ar: ApiResource,
    health: &WatchHealth,
    changed: &watch::Sender<u64>,
) -> ((ApiResource, Store<DynamicObject>), JoinHandle<()>) {
    let writer = reflector::store::Writer::new(ar.clone());
    let reader = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()));
    let task = spawn_watch(ar.kind.clone(), stream, health, changed.clone());
    ((ar, reader), task)
}

impl BashibleSources {
    /// Starts the watches; `namespace` holds the settings and CA ConfigMaps. Snapshots are
    /// empty until [`BashibleSources::wait_ready`].
    pub fn start(client: &Client, namespace: &str) -> Self {
        let (changed, changes) = watch::channel(0_u64);
        let health = WatchHealth::new();
        let mut tasks = Vec::new();
        let (groups, t) = dynamic_store(client, node_group_resource(), &health, &changed);
        tasks.push(t);
        let (configurations, t) =
            dynamic_store(client, configuration_resource(), &health, &changed);
        tasks.push(t);
        let (users, t) = dynamic_store(client, node_user_resource(), &health, &changed);
        tasks.push(t);

        // The groups' bootstrap tokens: a token minted for a group becomes its grant (and its
        // bootstrap scripts' join token) at the next render, not at the next resync.
        let (tokens, writer) = reflector::store::<Secret>();
        let stream = reflector::reflector(
            writer,
            watcher(
                Api::<Secret>::namespaced(client.clone(), TOKEN_NAMESPACE),
                watcher::Config::default().labels(LABEL_NODE_GROUP),
            ),
        );
        tasks.push(spawn_watch(
            "bootstrap token Secret".to_owned(),
            stream,
            &health,
            changed.clone(),
        ));

        let context = ContextStores::start(client, namespace, &health, &changed, &mut tasks);
        Self {
            groups,
            configurations,
            users,
            tokens,
            context,
            changes,
            health,
            tasks,
        }
    }

    /// Waits until every watch has listed once.
    ///
    /// # Errors
    /// [`SourcesError::Stopped`].
    pub async fn wait_ready(&self) -> Result<(), SourcesError> {
        let gone = |_| SourcesError::Stopped;
        self.groups.1.wait_until_ready().await.map_err(gone)?;
        self.configurations
            .1
            .wait_until_ready()
            .await
            .map_err(gone)?;
        self.users.1.wait_until_ready().await.map_err(gone)?;
        self.tokens.wait_until_ready().await.map_err(gone)?;
        self.context.wait_ready().await
    }

    /// A receiver whose value changes whenever a watched object does.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// The health of the watches (which failed, since when).
    pub fn health(&self) -> &WatchHealth {
        &self.health
    }

    /// Each NodeGroup's resourceVersion, `status.conditions` and processed spec checksum, as
    /// watched.
    pub fn group_conditions(&self) -> BTreeMap<String, crate::bashible_status::GroupConditions> {
        self.groups
            .1
            .state()
            .iter()
            .filter_map(|g| {
                let name = g.metadata.name.clone()?;
                let conditions = g.data["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let processed = g.data["status"]["deckhouse"]["processed"]["checkSum"]
                    .as_str()
                    .map(str::to_owned);
                Some((
                    name,
                    crate::bashible_status::GroupConditions {
                        resource_version: g.metadata.resource_version.clone(),
                        conditions,
                        processed,
                    },
                ))
            })
            .collect()
    }

    /// The cluster as it is in the stores now.
    ///
    /// # Errors
    /// [`SourcesError::Settings`] when the settings ConfigMap does not parse.
    pub fn snapshot(&self) -> Result<Snapshot, SourcesError> {
        let mut snapshot = Snapshot::default();
        for (name, parsed) in parsed_objects(&self.groups) {
            match parsed {
                Ok(Manifest::NodeGroup(mut group)) => {
                    // Rendering reads neither; dropping them lets an unchanged spec compare
                    // equal while node-manager rewrites the status.
                    group.status = None;
                    group.metadata.resource_version = None;
                    snapshot.groups.insert(name, *group);
                }
                Ok(_) => {}
                Err(message) => {
                    snapshot.unreadable_groups.insert(name, message);
                }
            }
        }
        for store in [&self.configurations, &self.users] {
            for (name, parsed) in parsed_objects(store) {
                match parsed {
                    Ok(Manifest::NodeGroupConfiguration(c)) => {
                        snapshot.customisations.configurations.push(*c);
                    }
                    Ok(Manifest::NodeUser(u)) => snapshot.customisations.users.push(*u),
                    Ok(_) => {}
                    Err(message) => snapshot
                        .problems
                        .push(format!("{} {name}: skipped: {message}", store.0.kind)),
                }
            }
        }
        snapshot.tokens = observed_tokens(&self.tokens.state());
        snapshot.cluster = self.context.context()?;
        Ok(snapshot)
    }
}

/// The bootstrap tokens of labelled `bootstrap.kubernetes.io/token` Secrets, sorted by Secret
/// name (Secrets of another type are not tokens, whatever their label).
fn observed_tokens(secrets: &[Arc<Secret>]) -> Vec<ObservedToken> {
    let mut tokens: Vec<ObservedToken> = secrets
        .iter()
        .filter(|s| s.type_.as_deref() == Some(TOKEN_SECRET_TYPE))
        .filter_map(|s| crate::controllers::bootstrap_tokens::observe(s))
        .collect();
    tokens.sort_by(|a, b| a.secret.cmp(&b.secret));
    tokens
}

/// node-manager's watch of the cluster context alone (the `default/kubernetes` EndpointSlices
/// and the ConfigMaps of one namespace); dropping it stops the watches.
pub struct ClusterContextWatch {
    stores: ContextStores,
    health: WatchHealth,
    changes: watch::Receiver<u64>,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ClusterContextWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterContextWatch")
            .field("namespace", &self.stores.namespace)
            .finish_non_exhaustive()
    }
}

impl Drop for ClusterContextWatch {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl ClusterContextWatch {
    /// Starts the watches; `namespace` holds the settings and CA ConfigMaps (bashible-apiserver's
    /// `--namespace`).
    pub fn start(client: &Client, namespace: &str) -> Self {
        let (changed, changes) = watch::channel(0_u64);
        let health = WatchHealth::new();
        let mut tasks = Vec::new();
        let stores = ContextStores::start(client, namespace, &health, &changed, &mut tasks);
        Self {
            stores,
            health,
            changes,
            tasks,
        }
    }

    /// Waits until both watches have listed once.
    ///
    /// # Errors
    /// [`SourcesError::Stopped`].
    pub async fn wait_ready(&self) -> Result<(), SourcesError> {
        self.stores.wait_ready().await
    }

    /// The cluster context as the stores hold it now.
    ///
    /// # Errors
    /// [`SourcesError::NotListed`] before both watches have listed, [`SourcesError::Settings`]
    /// when the settings ConfigMap does not parse.
    pub fn current(&self) -> Result<ClusterContext, SourcesError> {
        if !self.stores.listed() {
            return Err(SourcesError::NotListed {
                namespace: self.stores.namespace.clone(),
            });
        }
        self.stores.context()
    }

    /// A receiver whose value changes whenever a watched object does.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    /// The health of the two watches.
    pub fn health(&self) -> &WatchHealth {
        &self.health
    }
}

/// Where a controller that renders bootstrap scripts gets the cluster context nodes join with.
#[derive(Debug, Clone)]
pub enum ContextSource {
    /// A context given once (node-manager's `--static-cluster-context FILE`, tests).
    Fixed(ClusterContext),
    /// The cluster's, read from the watches' stores at each use.
    Cluster(Arc<ClusterContextWatch>),
}

impl From<ClusterContext> for ContextSource {
    fn from(context: ClusterContext) -> Self {
        ContextSource::Fixed(context)
    }
}

impl ContextSource {
    /// The context to render with now.
    ///
    /// # Errors
    /// See [`ClusterContextWatch::current`]; never for [`ContextSource::Fixed`].
    pub fn current(&self) -> Result<ClusterContext, SourcesError> {
        match self {
            ContextSource::Fixed(context) => Ok(context.clone()),
            ContextSource::Cluster(watch) => watch.current(),
        }
    }
}

/// The objects of a store, sorted by name, each parsed as a manifest (or why not).
fn parsed_objects(
    (ar, store): &(ApiResource, Store<DynamicObject>),
) -> Vec<(String, Result<Manifest, String>)> {
    let mut objects: Vec<Arc<DynamicObject>> = store.state();
    objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    objects
        .iter()
        .map(|object| {
            let name = object.metadata.name.clone().unwrap_or_default();
            let parsed = serde_json::to_value(object.as_ref())
                .map_err(|e| e.to_string())
                .and_then(|mut value| {
                    // List items may come without their type: it is the resource's.
                    value["apiVersion"] = ar.api_version.clone().into();
                    value["kind"] = ar.kind.clone().into();
                    parse_manifest(value).map_err(|e| e.to_string())
                });
            (name, parsed)
        })
        .collect()
}

/// `host:port` of every ready endpoint of the API server's EndpointSlices, sorted (IPv6 hosts
/// in brackets). The port is the one named `https`, else the first.
pub fn api_endpoints(slices: &[Arc<EndpointSlice>]) -> Vec<String> {
    let mut out = Vec::new();
    for slice in slices {
        let ports = slice.ports.as_deref().unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("https"))
            .or_else(|| ports.first())
            .and_then(|p| p.port);
        let Some(port) = port else { continue };
        for endpoint in &slice.endpoints {
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !ready {
                continue;
            }
            for address in &endpoint.addresses {
                if address.contains(':') {
                    out.push(format!("[{address}]:{port}"));
                } else {
                    out.push(format!("{address}:{port}"));
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The cluster context: the settings (defaults when absent), then the endpoints and CA from
/// the cluster where the settings leave them empty.
///
/// # Errors
/// [`RenderError::Cluster`] for settings that do not parse (the parser's error is its source).
pub fn cluster_context(
    settings: Option<&str>,
    endpoints: &[String],
    root_ca: Option<&str>,
) -> Result<ClusterContext, RenderError> {
    let mut cluster = match settings {
        Some(text) => ClusterContext::from_yaml(text)?,
        None => ClusterContext::default(),
    };
    if cluster.api_endpoints.is_empty() {
        cluster.api_endpoints = endpoints.to_vec();
    }
    if cluster.ca_cert.is_empty()
        && let Some(ca) = root_ca
    {
        cluster.ca_cert = ca.to_owned();
    }
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    fn slice(addresses: &[(&str, bool)], port: i32) -> Arc<EndpointSlice> {
        Arc::new(EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: addresses
                .iter()
                .map(|(a, ready)| Endpoint {
                    addresses: vec![(*a).to_owned()],
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        ..EndpointConditions::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("https".into()),
                port: Some(port),
                ..EndpointPort::default()
            }]),
            ..EndpointSlice::default()
        })
    }

    proptest::proptest! {
        /// Two replicas that list the same EndpointSlices in any order render the same
        /// endpoints (the order of a list is not part of the cluster's state).
        #[test]
        fn endpoints_do_not_depend_on_list_order(
            addresses in proptest::collection::vec((0_u8..=255, proptest::bool::ANY), 0..12),
            rotate in 0_usize..12,
        ) {
            let slices: Vec<Arc<EndpointSlice>> = addresses
                .chunks(3)
                .map(|chunk| {
                    let owned: Vec<(String, bool)> =
                        chunk.iter().map(|(a, r)| (format!("10.0.0.{a}"), *r)).collect();
                    let borrowed: Vec<(&str, bool)> =
                        owned.iter().map(|(a, r)| (a.as_str(), *r)).collect();
                    slice(&borrowed, 6443)
                })
                .collect();
            let mut shuffled = slices.clone();
            if !shuffled.is_empty() {
                let by = rotate % shuffled.len();
                shuffled.rotate_left(by);
                shuffled.reverse();
            }
            let a = api_endpoints(&slices);
            proptest::prop_assert_eq!(&a, &api_endpoints(&shuffled));
            let mut sorted = a.clone();
            sorted.sort();
            sorted.dedup();
            proptest::prop_assert_eq!(a, sorted);
        }
    }

    #[test]
    fn endpoints_are_the_ready_addresses_sorted_with_the_https_port() {
        let slices = [
            slice(&[("10.0.0.2", true), ("10.0.0.9", false)], 6443),
            slice(&[("10.0.0.1", true), ("fd00::1", true)], 6443),
        ];
        assert_eq!(
            api_endpoints(&slices),
            ["10.0.0.1:6443", "10.0.0.2:6443", "[fd00::1]:6443"]
        );
    }

    #[test]
    fn settings_win_and_the_cluster_fills_the_rest() {
        let from_cluster = cluster_context(
            Some("clusterDomain: corp.local\n"),
            &["10.0.0.1:6443".into()],
            Some("CA"),
        )
        .expect("parses");
        assert_eq!(from_cluster.cluster_domain, "corp.local");
        assert_eq!(from_cluster.api_endpoints, ["10.0.0.1:6443"]);
        assert_eq!(from_cluster.ca_cert, "CA");
        let pinned = cluster_context(
            Some("apiEndpoints: [lb.example:6443]\ncaCert: MINE\n"),
            &["10.0.0.1:6443".into()],
            Some("CA"),
        )
        .expect("parses");
        assert_eq!(pinned.api_endpoints, ["lb.example:6443"]);
        assert_eq!(pinned.ca_cert, "MINE");
        let err = cluster_context(Some("clusterDomian: x\n"), &[], None).expect_err("typo");
        assert!(err.to_string().contains("clusterDomian"), "{err}");
        // The YAML parser's error is kept as the source.
        assert!(std::error::Error::source(&err).is_some(), "{err:?}");
    }
}
