//! `bashible-apiserver`: serves each NodeGroup's bashible bundle (the ordered step scripts),
//! configuration checksum, bootstrap script and cleanup script, rendered by
//! `nodemgr_core::bashible`, to nodes that authenticate with a bearer token (docs/deckhouse.md §4).
//!
//! # Endpoints
//! | path | answer |
//! |---|---|
//! | `GET /healthz` | `ok` (no token needed) |
//! | `GET /v1/groups` | the groups the token may read, with checksums (JSON) |
//! | `GET /v1/groups/{group}/bundle` | `{group, checksum, steps: [{name, script}]}` |
//! | `GET /v1/groups/{group}/checksum` | `{group, checksum}` |
//! | `GET /v1/groups/{group}/bootstrap.sh` | the bootstrap script (needs the group's token in `--bootstrap-token-dir`, or `--bootstrap-token-file` and a `*` bearer token: see [`state`]) |
//! | `GET /v1/groups/{group}/cleanup.sh` | the cleanup script |
//! | `GET /v1/agent/bashible` | the node agent's binary (`--agent-binary`), any known token |
//! | `GET /metrics` | classic text or OpenMetrics as asked ([`metrics`]), no bundle token needed (`--metrics-auth kubernetes`: a Kubernetes token allowed `get` on `/metrics`) |
//! | `GET /apis/bashible.deckhouse.io/v1alpha1/...` | the aggregated API ([`aggregated`]) |
//!
//! Connections are bounded by a header-read timeout, an idle timeout and a connection limit
//! ([`serve`]).
//!
//! Every path but `/healthz` and `/metrics` needs `Authorization: Bearer TOKEN`: **401**
//! (`{"error":"Unauthorized"}`, the same for a missing and a wrong token) without one or with
//! an unknown token, **403** with a token not granted for the group, **404** for a group that
//! is not served, **503** for a group that has never rendered (the body says why) or a
//! bootstrap script without a configured bootstrap token. Tokens come from `--tokens-file`
//! (lines `TOKEN GROUP[,GROUP...]` or `TOKEN *`) and `--token TOKEN=GROUPS`.
//!
//! # Sources and reload
//! NodeGroups are read from the manifest files and directories given on the command line
//! (other kinds are skipped), the cluster context from `--cluster-context` and flags. Everything
//! is re-read on `SIGHUP` and when a source file changes and then stays unchanged for 250 ms
//! (checked every `--watch-interval`;
//! `0s` turns polling off). A reload that cannot read its sources keeps serving what it served;
//! a group that stops rendering keeps its last good entry, and the failure is logged.
//!
//! That is file mode (plain HTTP, for offline use). With `--from-cluster` everything comes from
//! the Kubernetes API, the checksum and manual-bootstrap Secrets are kept, and the server
//! speaks TLS only: see [`cluster_mode`] and `docs/bashible-apiserver.md`.

pub mod agent_binary;
pub mod aggregated;
pub mod auth;
pub mod cluster_mode;
pub mod metrics;
pub mod serve;
pub mod state;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Parser;
use nodemgr_core::bashible::{RenderRoot, Renderer};
use serde_json::json;

use auth::{Access, Grant};
use state::{GroupEntry, NoBootstrap, Served, Sources};

use crate::observability::auth::MetricsAuth;

/// Command line of `bashible-apiserver`.
#[derive(Debug, Clone, Parser)]
#[command(name = "bashible-apiserver", version, about, long_about = None)]
pub struct Config {
    /// Address to listen on (port 0 picks a free port; the address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:9600")]
    pub listen: SocketAddr,
    /// NodeGroup, NodeGroupConfiguration and NodeUser manifest files or directories (*.yaml,
    /// *.yml, *.json): file mode, plain HTTP. Without them, --from-cluster.
    #[arg(
        value_name = "MANIFESTS",
        required_unless_present = "from_cluster",
        conflicts_with = "from_cluster"
    )]
    pub manifests: Vec<PathBuf>,
    /// Cluster mode: read NodeGroups, NodeGroupConfigurations, NodeUsers and the cluster
    /// context from the Kubernetes API (watches), keep the checksum and manual-bootstrap
    /// Secrets, and serve over TLS only.
    #[arg(long)]
    pub from_cluster: bool,
    /// Kubeconfig of cluster mode (default: in-cluster, then KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "FILE", requires = "from_cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the settings, CA and TLS objects and of the Secrets kept (cluster mode).
    #[arg(long, default_value = nodemgr_core::model::keys::NAMESPACE)]
    pub namespace: String,
    /// Secret with the serving certificate (`tls.crt`, `tls.key`) in --namespace; generated
    /// self-signed and stored when absent (cluster mode).
    #[arg(long, default_value = "bashible-apiserver-tls")]
    pub tls_secret: String,
    /// DNS name or IP address of a generated certificate (repeatable; default: the Service
    /// names `bashible-apiserver.<namespace>.svc[.cluster.local]`, `localhost`, `127.0.0.1`).
    #[arg(long = "tls-name", value_name = "NAME")]
    pub tls_names: Vec<String>,
    /// How long cluster changes settle before a re-render (cluster mode).
    #[arg(long, default_value = "200ms", value_parser = parse_interval)]
    pub debounce: Duration,
    /// Bearer-token grants file: lines `TOKEN GROUP[,GROUP...]` or `TOKEN *`.
    #[arg(long, value_name = "FILE")]
    pub tokens_file: Option<PathBuf>,
    /// A grant `TOKEN=GROUP[,GROUP...]` or `TOKEN=*` (repeatable; visible in the process list,
    /// prefer --tokens-file).
    #[arg(long = "token", value_name = "TOKEN=GROUPS")]
    pub tokens: Vec<String>,
    /// Cluster context YAML (kubernetesVersion, apiEndpoints, caCert, clusterDomain, clusterDNS,
    /// podSubnetNodeCIDRPrefix, sandboxImage).
    #[arg(long, value_name = "FILE")]
    pub cluster_context: Option<PathBuf>,
    /// API endpoint host:port (repeatable; replaces the context's list).
    #[arg(long = "api-endpoint", value_name = "HOST:PORT")]
    pub api_endpoints: Vec<String>,
    /// PEM file of the cluster CA (replaces the context's caCert).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Kubernetes version (replaces the context's).
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    /// File holding a cluster-wide bootstrap token: overrides every group's own token in the
    /// bootstrap scripts served to `*` bearer tokens and in the manual-bootstrap Secrets;
    /// never served to group-scoped bearer tokens.
    #[arg(long, value_name = "FILE")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// Directory of per-group bootstrap tokens: the file named after a NodeGroup holds the
    /// token its bootstrap scripts carry, served to any bearer token granted that group.
    #[arg(long, value_name = "DIR")]
    pub bootstrap_token_dir: Option<PathBuf>,

    /// The node agent's binary (`bashible`), served at `/v1/agent/bashible`; with
    /// `--public-url`, bootstrap scripts install it (see `agent_binary`).
    #[arg(long, value_name = "PATH")]
    pub agent_binary: Option<PathBuf>,
    /// The URL nodes reach this server at (`http://HOST:PORT`, or `https://…` in cluster
    /// mode, where bootstrap scripts also carry the TLS Secret's CA), for the agent that
    /// bootstrap scripts install.
    #[arg(long, value_name = "URL", requires = "agent_binary")]
    pub public_url: Option<String>,
    /// Render scripts for a directory standing in for / (tests).
    #[arg(long, value_name = "DIR")]
    pub root: Option<String>,
    /// How often source files are checked for changes (`0s`: only on SIGHUP).
    #[arg(long, default_value = "2s", value_parser = parse_interval)]
    pub watch_interval: Duration,
    /// Who may scrape /metrics: `none` (anyone reaching the address) or `kubernetes` (cluster
    /// mode only, over its TLS: the caller's bearer token must be allowed `get` on the
    /// non-resource URL /metrics, checked with a TokenReview and a SubjectAccessReview).
    #[arg(long, value_enum, default_value_t = MetricsAuth::None)]
    pub metrics_auth: MetricsAuth,
    /// Timeouts and limit of HTTP connections.
    #[command(flatten)]
    pub connections: serve::ConnectionFlags,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    nodemgr_core::model::parse_duration_checked(text).map_err(|e| e.to_string())
}

impl Config {
    /// The sources the flags describe.
    ///
    /// # Errors
    /// A malformed `--token` or `--root`.
    pub fn sources(&self) -> anyhow::Result<Sources> {
        let token_flags = self
            .tokens
            .iter()
            .map(|t| Grant::from_flag(t))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Sources {
            manifests: self.manifests.clone(),
            cluster_context: self.cluster_context.clone(),
            api_endpoints: self.api_endpoints.clone(),
            ca_file: self.ca_file.clone(),
            kubernetes_version: self.kubernetes_version.clone(),
            bootstrap_token_file: self.bootstrap_token_file.clone(),
            bootstrap_token_dir: self.bootstrap_token_dir.clone(),
            tokens_file: self.tokens_file.clone(),
            token_flags,
            agent_binary: self.agent_binary.clone(),
            public_url: self.public_url.clone(),
            agent_ca: None,
            root: match &self.root {
                Some(dir) => RenderRoot::new(dir)?,
                None => RenderRoot::host(),
            },
        })
    }
}

/// The server's shared state: what is served now, swapped whole on reload.
#[derive(Debug)]
pub struct Shared {
    served: RwLock<Arc<Served>>,
}

impl Shared {
    /// State serving `served`.
    pub fn new(served: Served) -> Self {
        Self {
            served: RwLock::new(Arc::new(served)),
        }
    }

    pub(crate) fn current(&self) -> Arc<Served> {
        match self.served.read() {
            Ok(guard) => Arc::clone(&guard),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub(crate) fn replace(&self, served: Served) {
        let served = Arc::new(served);
        match self.served.write() {
            Ok(mut guard) => *guard = served,
            Err(poisoned) => *poisoned.into_inner() = served,
        }
    }
}

/// Why a request is refused: a status and a message, sent as `{"error": message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    status: StatusCode,
    message: String,
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        message: message.into(),
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, axum::Json(json!({ "error": self.message }))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"bashible\""),
            );
        }
        response
    }
}

/// The answer to a missing, wrong or expired bearer token: 401 `Unauthorized`, the same
/// whatever was wrong, so that nothing about the known tokens leaks.
pub(crate) fn unauthorized() -> Refusal {
    error(StatusCode::UNAUTHORIZED, "Unauthorized")
}

/// Checks the token and finds the group's entry, or says why not.
pub(crate) fn authorize(
    served: &Served,
    headers: &HeaderMap,
    group: &str,
) -> Result<Arc<GroupEntry>, Refusal> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match auth::access(&served.grants, authorization) {
        Access::Missing | Access::Unknown => Err(unauthorized()),
        access if !access.allows(group) => Err(error(
            StatusCode::FORBIDDEN,
            format!("this token may not read NodeGroup {group}"),
        )),
        _ => {
            if let Some(entry) = served.groups.get(group) {
                Ok(Arc::clone(entry))
            } else if let Some(reason) = served.failed.get(group) {
                Err(error(StatusCode::SERVICE_UNAVAILABLE, reason.clone()))
            } else {
                Err(error(
                    StatusCode::NOT_FOUND,
                    format!("NodeGroup {group} is not served"),
                ))
            }
        }
    }
}

fn script(text: &str) -> Response {
    (
        [(header::CONTENT_TYPE, "text/x-shellscript; charset=utf-8")],
        text.to_owned(),
    )
        .into_response()
}

fn stale_header(mut response: Response, entry: &GroupEntry) -> Response {
    if let Some(reason) = &entry.stale_because
        && let Ok(value) = HeaderValue::from_str(&reason.replace(['\r', '\n'], " "))
    {
        response.headers_mut().insert("x-nodemgr-stale", value);
    }
    response
}

pub(crate) type AppState = State<Arc<Shared>>;

async fn healthz() -> &'static str {
    "ok"
}

async fn list_groups(State(shared): AppState, headers: HeaderMap) -> Response {
    let served = shared.current();
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let access = auth::access(&served.grants, authorization);
    match access {
        Access::Missing | Access::Unknown => unauthorized().into_response(),
        access => {
            let groups: Vec<_> = served
                .groups
                .iter()
                .filter(|(name, _)| access.allows(name))
                .map(|(name, e)| json!({ "name": name, "checksum": e.bundle.checksum }))
                .collect();
            axum::Json(json!({ "groups": groups })).into_response()
        }
    }
}

async fn bundle(
    State(shared): AppState,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> Response {
    match authorize(&shared.current(), &headers, &group) {
        Ok(entry) => stale_header(axum::Json(&entry.bundle).into_response(), &entry),
        Err(refusal) => refusal.into_response(),
    }
}

async fn checksum(
    State(shared): AppState,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> Response {
    match authorize(&shared.current(), &headers, &group) {
        Ok(entry) => stale_header(
            axum::Json(json!({ "group": group, "checksum": entry.bundle.checksum }))
                .into_response(),
            &entry,
        ),
        Err(refusal) => refusal.into_response(),
    }
}

/// The bootstrap script the request's bearer token may read (see [`state`]).
pub(crate) fn bootstrap_of(
    served: &Served,
    entry: &GroupEntry,
    headers: &HeaderMap,
    group: &str,
) -> Result<String, Refusal> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let all_groups = auth::access(&served.grants, authorization).covers_all();
    match entry.bootstrap_for(all_groups) {
        Ok(script) => Ok(script.to_owned()),
        Err(NoBootstrap::ClusterWideOnly) => Err(error(
            StatusCode::FORBIDDEN,
            format!(
                "NodeGroup {group} has no bootstrap token of its own (yet), and the \
                 cluster-wide one is served to `*` bearer tokens only: in cluster mode \
                 node-manager's bootstrap-tokens controller mints the group's; in file mode put \
                 it in a file named {group} in --bootstrap-token-dir"
            ),
        )),
        Err(NoBootstrap::NoToken) => Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            served
                .no_bootstrap
                .clone()
                .unwrap_or_else(|| format!("no bootstrap token for NodeGroup {group}")),
        )),
    }
}

async fn bootstrap(
    State(shared): AppState,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> Response {
    let served = shared.current();
    match authorize(&served, &headers, &group)
        .and_then(|entry| Ok((bootstrap_of(&served, &entry, &headers, &group)?, entry)))
    {
        Ok((text, entry)) => stale_header(script(&text), &entry),
        Err(refusal) => refusal.into_response(),
    }
}

async fn cleanup(
    State(shared): AppState,
    Path(group): Path<String>,
    headers: HeaderMap,
) -> Response {
    match authorize(&shared.current(), &headers, &group) {
        Ok(entry) => stale_header(script(&entry.cleanup), &entry),
        Err(refusal) => refusal.into_response(),
    }
}

/// The HTTP routes over `shared`.
pub fn router(shared: Arc<Shared>) -> Router {
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/groups", get(list_groups))
        .route("/v1/groups/{group}/bundle", get(bundle))
        .route("/v1/groups/{group}/checksum", get(checksum))
        .route("/v1/groups/{group}/bootstrap.sh", get(bootstrap))
        .route("/v1/groups/{group}/cleanup.sh", get(cleanup))
        .route("/v1/agent/bashible", get(agent_binary::agent_binary))
        .route("/metrics", get(metrics::metrics));
    aggregated::routes(router).with_state(shared)
}

/// Re-reads the sources off the async threads and swaps the served state if that works.
async fn reload(shared: &Arc<Shared>, sources: &Arc<Sources>, renderer: &Arc<Renderer>, why: &str) {
    let previous = shared.current();
    let (sources, renderer) = (Arc::clone(sources), Arc::clone(renderer));
    let loaded =
        tokio::task::spawn_blocking(move || sources.load(&renderer, Some(&previous))).await;
    match loaded {
        Ok(Ok(served)) => {
            tracing::info!(
                trigger = why,
                groups = served.groups.len(),
                failed = served.failed.len(),
                "reloaded"
            );
            shared.replace(served);
        }
        Ok(Err(e)) => {
            tracing::error!(trigger = why, error = %format!("{e:#}"), "reload failed; still serving the previous state");
        }
        Err(e) => tracing::error!(trigger = why, error = %e, "reload task failed"),
    }
}

/// How long source files must stay unchanged before a change is reloaded, so that a file being
/// rewritten in place is not read half-written.
const SETTLE: Duration = Duration::from_millis(250);

/// Reloads on SIGHUP and when source files change (once they settle, see [`SETTLE`]), forever.
async fn watch(
    shared: Arc<Shared>,
    sources: Arc<Sources>,
    renderer: Arc<Renderer>,
    every: Duration,
) {
    let mut hangup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP; reloading on file changes only");
            None
        }
    };
    let mut fingerprint = sources.fingerprint();
    let poll = (!every.is_zero()).then_some(every);
    loop {
        let tick = async {
            match poll {
                Some(every) => tokio::time::sleep(every).await,
                None => std::future::pending().await,
            }
        };
        let hup = async {
            match hangup.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = hup => {
                fingerprint = sources.fingerprint();
                reload(&shared, &sources, &renderer, "SIGHUP").await;
            }
            () = tick => {
                let now = sources.fingerprint();
                if now != fingerprint {
                    // A writer may be half-way through a file (truncated, not yet rewritten):
                    // reload only once the files stay unchanged for SETTLE; a change during
                    // the load is seen by the next tick.
                    tokio::time::sleep(SETTLE).await;
                    if sources.fingerprint() != now {
                        continue;
                    }
                    fingerprint = now;
                    reload(&shared, &sources, &renderer, "file change").await;
                }
            }
        }
    }
}

pub(crate) async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}

/// Loads the sources, listens, prints `listening on ADDR` on stdout, and serves until SIGINT or
/// SIGTERM.
///
/// # Errors
/// Sources that cannot be loaded at start, or an address that cannot be bound.
pub async fn run(config: Config) -> anyhow::Result<()> {
    if config.from_cluster {
        return cluster_mode::run(config).await;
    }
    if config.metrics_auth == MetricsAuth::Kubernetes {
        anyhow::bail!(
            "--metrics-auth kubernetes needs --from-cluster (file mode speaks plain HTTP, and \
             bearer tokens must not travel in clear text)"
        );
    }
    let sources = Arc::new(config.sources()?);
    let renderer = Arc::new(Renderer::new());
    let served = sources.load(&renderer, None)?;
    tracing::info!(
        groups = served.groups.len(),
        failed = served.failed.len(),
        "loaded"
    );
    let shared = Arc::new(Shared::new(served));
    let (listener, address) = listen_announced(config.listen).await?;
    tracing::info!(%address, "serving bashible bundles over plain HTTP");
    let watcher = tokio::spawn(watch(
        Arc::clone(&shared),
        Arc::clone(&sources),
        renderer,
        config.watch_interval,
    ));
    let served = serve::serve(
        listener,
        router(shared),
        None,
        config.connections.limits(),
        serve::ConnectionStats::default(),
        shutdown_signal(),
    )
    .await
    .context("the HTTP server failed");
    watcher.abort();
    served
}

/// Binds `listen` and prints `listening on <address>` on stdout (the address actually bound,
/// for a port 0), which tests and wrappers wait for.
///
/// # Errors
/// The address cannot be bound, or stdout cannot be written.
pub(crate) async fn listen_announced(
    listen: std::net::SocketAddr,
) -> anyhow::Result<(tokio::net::TcpListener, std::net::SocketAddr)> {
    use std::io::Write;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr().context("no local address")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {address}")
        .and_then(|()| out.flush())
        .context("cannot write to stdout")?;
    Ok((listener, address))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse() {
        assert_eq!(parse_interval("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_interval("0s").unwrap(), Duration::ZERO);
        assert_eq!(parse_interval("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_interval("soon").is_err());
    }
}
