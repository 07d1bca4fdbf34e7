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

/// Serves `router` on `listener` (HTTPS when `tls` is given) until `shutdown` completes.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let Some(tls) = tls else {
        return axum::serve(listener, router)
            .with_graceful_shutdown(shutdown)
            .await;
    };
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = &mut shutdown => return Ok(()),
        };
        let tls = tls.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let stream = match tls.accept(stream).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, %error, "metrics connection ended with an error");
            }
        });
    }
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
