//! [`Emulator`]: starts the API server on 127.0.0.1 (an ephemeral port), writes a kubeconfig
//! for kubectl and kube-rs, and offers in-process helpers for tests: seed and read objects
//! without HTTP, inject faults and latency, drop every watch, count requests.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::faults::Fault;
use crate::latency::{Latency, RequestDelay};
use crate::server::{RequestStats, Shared, handle};
use crate::status::ApiError;
use crate::store::{DeleteOptions, Part, Store, WriteContext};

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// Binding the listening socket failed.
    #[error("failed to bind the API emulator to {address}: {source}")]
    Bind {
        /// The address tried.
        address: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the kubeconfig failed.
    #[error("failed to write the emulator's kubeconfig at {path}: {source}")]
    Kubeconfig {
        /// Where.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Settings of an emulator.
#[derive(Debug, Clone)]
pub struct EmulatorOptions {
    /// Address to listen on; port 0 picks a free one. Default `127.0.0.1:0`.
    pub address: SocketAddr,
    /// How many change events are kept for watch resumption (older resourceVersions get
    /// 410 Gone). Default 10,000.
    pub history_limit: usize,
    /// Interval of BOOKMARK events on watches that allow them. Default 5 s.
    pub bookmark_interval: Duration,
    /// Where to write the kubeconfig; default a temporary directory removed on drop.
    pub kubeconfig_dir: Option<PathBuf>,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(5),
            kubeconfig_dir: None,
        }
    }
}

/// A running API emulator. Dropping it stops the server (call [`Emulator::shutdown`] to wait
/// for that).
pub struct Emulator {
    shared: Arc<Shared>,
    address: SocketAddr,
    kubeconfig: PathBuf,
    _tempdir: Option<tempfile::TempDir>,
    server: Option<JoinHandle<()>>,
}

impl Emulator {
    /// Starts an emulator with default options.
    ///
    /// # Errors
    /// When the socket cannot be bound or the kubeconfig cannot be written.
    pub async fn start() -> Result<Emulator, EmulatorError> {
        Emulator::start_with(EmulatorOptions::default()).await
    }

    /// Starts an emulator with `options`.
    ///
    /// # Errors
    /// When the socket cannot be bound or the kubeconfig cannot be written.
    pub async fn start_with(options: EmulatorOptions) -> Result<Emulator, EmulatorError> {
        let listener = tokio::net::TcpListener::bind(options.address)
            .await
            .map_err(|source| EmulatorError::Bind {
                address: options.address.to_string(),
                source,
            })?;
        let address = listener
            .local_addr()
            .map_err(|source| EmulatorError::Bind {
                address: options.address.to_string(),
                source,
            })?;
        let (tempdir, dir) = match &options.kubeconfig_dir {
            Some(dir) => (None, dir.clone()),
            None => {
                let tmp = tempfile::Builder::new()
                    .prefix("nodemgr-api-emulator-")
                    .tempdir()
                    .map_err(|source| EmulatorError::Kubeconfig {
                        path: std::env::temp_dir(),
                        source,
                    })?;
                let path = tmp.path().to_path_buf();
                (Some(tmp), path)
            }
        };
        let kubeconfig = dir.join("kubeconfig");
        std::fs::create_dir_all(&dir)
            .and_then(|()| {
                std::fs::write(&kubeconfig, kubeconfig_text(&format!("http://{address}")))
            })
            .map_err(|source| EmulatorError::Kubeconfig {
                path: kubeconfig.clone(),
                source,
            })?;
        let (drop_watches, _) = watch::channel(0u64);
        let (shutdown, mut shutdown_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::new(options.history_limit)),
            faults: Mutex::new(Vec::new()),
            latency: Mutex::new(Latency::default()),
            stats: Mutex::new(RequestStats::new()),
            drop_watches,
            shutdown,
            bookmark_interval: options.bookmark_interval,
            address: address.to_string(),
            services: Mutex::new(Default::default()),
            review_counter: std::sync::atomic::AtomicU64::new(1),
        });
        let router = Router::new().fallback(handle).with_state(shared.clone());
        let server = tokio::spawn(async move {
            let stop = async move {
                let _ = shutdown_rx.wait_for(|stop| *stop).await;
            };
            if let Err(error) = axum::serve(listener, router)
                .with_graceful_shutdown(stop)
                .await
            {
                tracing::error!(%error, "the API emulator stopped serving");
            }
        });
        tracing::info!(%address, kubeconfig = %kubeconfig.display(), "API emulator listening");
        Ok(Emulator {
            shared,
            address,
            kubeconfig,
            _tempdir: tempdir,
            server: Some(server),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The listening address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A kubeconfig (plain HTTP, no credentials, namespace `default`) for kubectl
    /// (`KUBECONFIG=...`) and kube-rs (`Config::from_custom_kubeconfig`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Stops accepting requests, ends every watch, and waits (up to 5 s) for the server.
    pub async fn shutdown(mut self) {
        let _ = self.shared.shutdown.send(true);
        if let Some(server) = self.server.take() {
            let abort = server.abort_handle();
            if tokio::time::timeout(Duration::from_secs(5), server)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }

    /// Creates an object given its full JSON (`apiVersion`, `kind`, `metadata.name`;
    /// namespaced kinds default to namespace `default`), bypassing HTTP and faults. Status is
    /// kept as given, even for types with a status subresource, so tests can seed Running pods
    /// and Ready nodes in one step.
    ///
    /// # Errors
    /// The same errors as a create over HTTP (unknown kind → 404, existing → 409).
    pub fn seed(&self, object: Value) -> Result<Value, ApiError> {
        let object = stored_shape(object);
        let (rt, version, namespace) = self.resolve(&object)?;
        let status = object.get("status").cloned();
        let ctx = WriteContext {
            field_manager: "nodemgr-testkit".into(),
            dry_run: false,
        };
        let mut store = self.shared.store();
        let created = store.create(&rt, &version, &namespace, object, &ctx, None)?;
        match status {
            Some(status) if created.get("status") != Some(&status) && rt.plural != "namespaces" => {
                let name = created
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let mut with_status = created.clone();
                with_status["status"] = status;
                store.replace(
                    &rt,
                    &version,
                    &namespace,
                    &name,
                    with_status,
                    Part::Status,
                    &ctx,
                    None,
                )
            }
            _ => Ok(created),
        }
    }

    /// Replaces an object (main part and status) given its full JSON, ignoring
    /// resourceVersion (an unconditional update), bypassing HTTP and faults.
    ///
    /// # Errors
    /// 404 when it does not exist; other update errors.
    pub fn update(&self, object: Value) -> Result<Value, ApiError> {
        let object = stored_shape(object);
        let (rt, version, namespace) = self.resolve(&object)?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let ctx = WriteContext {
            field_manager: "nodemgr-testkit".into(),
            dry_run: false,
        };
        let mut candidate = object;
        if let Some(meta) = candidate.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        let mut store = self.shared.store();
        let main = store.replace(
            &rt,
            &version,
            &namespace,
            &name,
            candidate.clone(),
            Part::Main,
            &ctx,
            None,
        )?;
        if rt.has_status() && candidate.get("status") != main.get("status") {
            return store.replace(
                &rt,
                &version,
                &namespace,
                &name,
                candidate,
                Part::Status,
                &ctx,
                None,
            );
        }
        Ok(main)
    }

    /// Applies a JSON merge patch (RFC 7386) to an object atomically, bypassing HTTP and
    /// faults: to its main part, or to its status when `status` is true (for kinds with a
    /// status subresource). Unlike [`Emulator::update`], a concurrent change to other fields
    /// is never overwritten. Returns the object after the patch.
    ///
    /// # Errors
    /// 404 when the kind or the object does not exist; other update errors.
    pub fn merge_patch(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        self.merge_patch_guarded(api_version, kind, namespace, name, patch, status, None)
    }

    /// [`Emulator::merge_patch`] with a resourceVersion precondition, as kube-apiserver applies
    /// a patch that carries `metadata.resourceVersion`: 409 Conflict unless the object's
    /// current resourceVersion is `resource_version` (`None`: no precondition).
    ///
    /// # Errors
    /// 409 on a stale resourceVersion; those of [`Emulator::merge_patch`].
    #[allow(clippy::too_many_arguments)]
    pub fn merge_patch_guarded(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        patch: &Value,
        status: bool,
        resource_version: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut store = self.shared.store();
        let (rt, version) = store
            .find_type_by_kind(api_version, kind)
            .map(|(t, v)| (t.clone(), v))
            .ok_or_else(|| ApiError::no_route(&format!("{api_version} {kind}")))?;
        let namespace = if rt.namespaced { namespace } else { "" };
        let mut candidate = store
            .get(&rt, namespace, name)
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
        if let Some(expected) = resource_version {
            let current = candidate
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if current != expected {
                return Err(ApiError::conflict(
                    &rt.group,
                    &rt.plural,
                    name,
                    "the object has been modified; please apply your changes to the latest \
                     version and try again",
                ));
            }
        }
        crate::patch::merge_patch(&mut candidate, patch);
        if let Some(meta) = candidate.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        let ctx = WriteContext {
            field_manager: "nodemgr-testkit".into(),
            dry_run: false,
        };
        let part = if status && rt.has_status() {
            Part::Status
        } else {
            Part::Main
        };
        store.replace(&rt, &version, namespace, name, candidate, part, &ctx, None)
    }

    /// Reads an object (at storage version) without HTTP.
    pub fn get(&self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Option<Value> {
        let store = self.shared.store();
        let (rt, _) = store.find_type_by_kind(api_version, kind)?;
        let rt = rt.clone();
        store
            .get(&rt, if rt.namespaced { namespace } else { "" }, name)
            .map(|o| served_shape(&rt, &o))
    }

    /// Lists objects of a kind (all namespaces when `namespace` is None) without HTTP.
    pub fn list(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let store = self.shared.store();
        let Some((rt, _)) = store.find_type_by_kind(api_version, kind) else {
            return Vec::new();
        };
        let rt = rt.clone();
        store
            .list(&rt, namespace)
            .map(|o| served_shape(&rt, &o))
            .collect()
    }

    /// Deletes an object without HTTP (finalizers are honoured).
    ///
    /// # Errors
    /// 404 when the kind or object does not exist.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let mut store = self.shared.store();
        let rt = store
            .find_type_by_kind(api_version, kind)
            .map(|(t, _)| t.clone())
            .ok_or_else(|| ApiError::no_route(&format!("{api_version} {kind}")))?;
        let ctx = WriteContext {
            field_manager: "nodemgr-testkit".into(),
            dry_run: false,
        };
        store.delete(
            &rt,
            if rt.namespaced { namespace } else { "" },
            name,
            &DeleteOptions::default(),
            &ctx,
        )
    }

    /// Routes webhook calls for the service `namespace/name:port` (a `clientConfig.service`
    /// of an admission webhook or a CRD conversion webhook) to `base_url`
    /// (`https://127.0.0.1:PORT`): the emulator has no cluster network.
    pub fn route_service(&self, namespace: &str, name: &str, port: u16, base_url: &str) {
        self.route_service_endpoints(namespace, name, port, &[base_url]);
    }

    /// Routes webhook calls for the service `namespace/name:port` to several endpoints (the
    /// replicas behind a Service): each call goes to the next one in turn, as kube-proxy
    /// spreads connections over ready endpoints. Replaces the service's earlier route; no
    /// endpoint leaves it unrouted.
    pub fn route_service_endpoints(
        &self,
        namespace: &str,
        name: &str,
        port: u16,
        base_urls: &[&str],
    ) {
        let mut services = self
            .shared
            .services
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        services.set_endpoints(
            (namespace.to_owned(), name.to_owned(), port),
            base_urls.iter().map(|u| (*u).to_owned()).collect(),
        );
    }

    /// Makes the next matching requests fail (see [`Fault`]).
    pub fn inject_fault(&self, fault: Fault) {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(fault);
    }

    /// Removes every pending fault.
    pub fn clear_faults(&self) {
        self.shared
            .faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// Delays the watch events of `resource` (a plural such as `nodes`, or
    /// [`crate::latency::ANY_RESOURCE`]) by `delay` from now on, keeping their order
    /// (see [`crate::latency`]); `Duration::ZERO` removes the delay. Events already queued keep
    /// the delay they got.
    pub fn set_watch_delay(&self, resource: &str, delay: Duration) {
        self.shared.latency().set_watch_delay(resource, delay);
    }

    /// Makes matching requests wait before they are handled (see [`RequestDelay`]).
    pub fn add_request_delay(&self, delay: RequestDelay) {
        self.shared.latency().add_request_delay(delay);
    }

    /// Removes every watch and request delay.
    pub fn clear_latency(&self) {
        self.shared.latency().clear();
    }

    /// Ends every open watch stream at once (clients see the connection close and re-watch).
    pub fn drop_watches(&self) {
        self.shared
            .drop_watches
            .send_modify(|generation| *generation += 1);
    }

    /// How many requests with this verb on this resource (`pods`, `pods/eviction`) were
    /// answered, with status `code` or any when `None`.
    pub fn request_count(&self, verb: &str, resource: &str, code: Option<u16>) -> u64 {
        let stats = self
            .shared
            .stats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stats
            .iter()
            .filter(|((v, r, c), _)| {
                v == verb && r == resource && code.is_none_or(|want| want == *c)
            })
            .map(|(_, n)| *n)
            .sum()
    }

    /// The current resourceVersion of the store.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    fn resolve(
        &self,
        object: &Value,
    ) -> Result<(crate::registry::ResourceType, String, String), ApiError> {
        let api_version = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let store = self.shared.store();
        let (rt, version) = store
            .find_type_by_kind(api_version, kind)
            .map(|(t, v)| (t.clone(), v))
            .ok_or_else(|| {
                ApiError::no_route(&format!("no kind {kind:?} is served in {api_version:?}"))
            })?;
        let namespace = if rt.namespaced {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_owned()
        } else {
            String::new()
        };
        Ok((rt, version, namespace))
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.shared.shutdown.send(true);
    }
}

/// An object as the store keeps it: `events.k8s.io/v1` Events in the core shape (see
/// [`crate::events`]); everything else as given.
fn stored_shape(object: Value) -> Value {
    if object.get("apiVersion").and_then(Value::as_str) == Some("events.k8s.io/v1") {
        crate::events::to_core(&object)
    } else {
        object
    }
}

/// A stored object as the API of `rt` serves it: `events.k8s.io` Events converted from the core
/// shape; everything else at the storage version.
fn served_shape(rt: &crate::registry::ResourceType, object: &Value) -> Value {
    if crate::events::is_events_v1(&rt.group, &rt.plural) {
        crate::events::to_events_v1(object)
    } else {
        object.clone()
    }
}

/// The kubeconfig text for a server URL: one cluster, an anonymous user, namespace `default`.
pub fn kubeconfig_text(server: &str) -> String {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "nodemgr-emulator", "cluster": {"server": server}}],
        "users": [{"name": "nodemgr-emulator", "user": {}}],
        "contexts": [{"name": "nodemgr-emulator", "context": {"cluster": "nodemgr-emulator", "user": "nodemgr-emulator", "namespace": "default"}}],
        "current-context": "nodemgr-emulator",
        "preferences": {},
    });
    // JSON is valid YAML; both kubectl and kube-rs read it.
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}
