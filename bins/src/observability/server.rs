//! The `/metrics` server of every binary: the flags that choose who may scrape
//! ([`MetricsServeArgs`]: `--metrics-auth`, `--metrics-tls-cert`, `--metrics-tls-key`), the
//! router of the node agents (`/metrics` in the negotiated format, `/healthz`), and serving a
//! router over plain HTTP or HTTPS until shutdown.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::auth::{KubernetesAuthorizer, MetricsAuth, require};
use super::tls::{TlsError, acceptor, self_signed};

/// Who may scrape `/metrics`, and over what.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MetricsServeArgs {
    /// Who may scrape /metrics: `none` (anyone reaching the address) or `kubernetes` (HTTPS,
    /// self-signed without --metrics-tls-cert; the caller's bearer token must be allowed `get`
    /// on the non-resource URL /metrics, checked with a TokenReview and a SubjectAccessReview).
    #[arg(long, value_enum, default_value_t = MetricsAuth::None)]
    pub metrics_auth: MetricsAuth,
    /// PEM certificate chain: serve HTTPS (with --metrics-tls-key).
    #[arg(long, value_name = "FILE", requires = "metrics_tls_key")]
    pub metrics_tls_cert: Option<PathBuf>,
    /// PEM private key of --metrics-tls-cert.
    #[arg(long, value_name = "FILE", requires = "metrics_tls_cert")]
    pub metrics_tls_key: Option<PathBuf>,
}

impl MetricsServeArgs {
    /// The TLS acceptor to serve with: the given certificate; else, with Kubernetes
    /// authorization (bearer tokens must not travel in clear text), a self-signed one; else none.
    ///
    /// # Errors
    /// An unusable certificate or key.
    pub fn tls(&self) -> Result<Option<tokio_rustls::TlsAcceptor>, TlsError> {
        match (&self.metrics_tls_cert, &self.metrics_tls_key) {
            (Some(cert), Some(key)) => Ok(Some(acceptor(cert, key)?)),
            _ if self.metrics_auth == MetricsAuth::Kubernetes => {
                let mut names = vec!["localhost".to_owned()];
                if let Ok(host) = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")) {
                    names.push(host);
                }
                tracing::info!(
                    "/metrics serves HTTPS with a self-signed certificate (no --metrics-tls-cert)"
                );
                Ok(Some(self_signed(names)?))
            }
            _ => Ok(None),
        }
    }

    /// `router` with `/metrics` behind the chosen authorization (`client` asks the API server).
    pub fn protect(&self, router: Router, client: &kube::Client) -> Router {
        match self.metrics_auth {
            MetricsAuth::None => router,
            MetricsAuth::Kubernetes => router.layer(axum::middleware::from_fn_with_state(
                KubernetesAuthorizer::new(client.clone()),
                require,
            )),
        }
    }
}

/// The node agents' router: `/metrics` (the registry in the format the scraper asks for) and
/// `/healthz` (200 while `healthy` is true, else 503 with `why`).
pub fn agent_router(
    registry: Arc<Registry>,
    healthy: watch::Receiver<Result<(), String>>,
) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move |headers: HeaderMap| {
                let registry = registry.clone();
                async move { nodemgr_k8s::exposition::respond(&registry, &headers) }
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let state = healthy.borrow().clone();
                async move {
                    match state {
                        Ok(()) => (StatusCode::OK, "ok".to_owned()),
                        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                    }
                }
            }),
        )
}

/// Serves `router` on `listener` (HTTPS when `tls` is given) until `shutdown` completes, with
/// the connection limits of `nodemgr_k8s::tls::serve` (header-read and idle timeouts, at most
/// 1024 connections), so a slow or idle scraper cannot hold the agent's sockets.
///
/// # Errors
/// When the server cannot run.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    nodemgr_k8s::tls::serve::serve(
        listener,
        router,
        tls,
        nodemgr_k8s::tls::serve::ConnectionLimits::default(),
        nodemgr_k8s::tls::serve::ConnectionStats::default(),
        shutdown,
    )
    .await
    .map_err(std::io::Error::other)
}

/// Starts serving the node agents' `/metrics` and `/healthz` ([`agent_router`], behind
/// `serve_args`' authorization) on `address` in the background; `None` (no
/// `--metrics-address`) serves nothing. The server stops when the returned sender is dropped
/// or used.
///
/// # Errors
/// An unusable certificate or an address that cannot be bound.
pub async fn spawn_agent_server(
    address: Option<std::net::SocketAddr>,
    serve_args: &MetricsServeArgs,
    registry: Arc<Registry>,
    healthy: watch::Receiver<Result<(), String>>,
    client: &kube::Client,
) -> anyhow::Result<Option<tokio::sync::oneshot::Sender<()>>> {
    let Some(address) = address else {
        return Ok(None);
    };
    let tls = serve_args.tls()?;
    let listener = bind(address).await?;
    tracing::info!(address = %listener.local_addr()?, "serving /metrics and /healthz");
    let router = serve_args.protect(agent_router(registry, healthy), client);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let stopped = async move {
            let _ = stopped.await;
        };
        if let Err(error) = serve(listener, router, tls, stopped).await {
            tracing::error!(%error, "the metrics server stopped");
        }
    });
    Ok(Some(stop))
}

/// Binds `address` for [`serve`], naming the flag in the error.
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(address: std::net::SocketAddr) -> anyhow::Result<TcpListener> {
    use anyhow::Context as _;
    TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} (--metrics-address)"))
}
