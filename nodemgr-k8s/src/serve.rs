//! The HTTP side of node-manager and its process lifecycle: `/metrics` ([`Metrics`] in the
//! text format the scraper asks for, see [`crate::exposition`]), `/healthz` (liveness: the process serves requests), `/readyz` (readiness: the
//! API server answered the last probe — a standby replica is ready too, it only does not lead;
//! the body says `leader` or `standby`; not ready while this replica's controllers are
//! restarting after they failed, or after it gave the Lease up because they kept failing, see
//! [`crate::leader`]), the API probe feeding `/readyz`, and the SIGTERM /
//! Ctrl-C signal that starts a graceful shutdown.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::get;
use tokio::sync::watch;

use crate::leader::Role;
use crate::metrics::Metrics;

pub use crate::exposition::OPENMETRICS_CONTENT_TYPE;

/// What `/readyz` reports: whether the API server answered the last probe and whether this
/// replica leads.
#[derive(Clone)]
pub struct Health {
    /// True while the API server answers (see [`probe_api`]).
    pub api_reachable: watch::Receiver<bool>,
    /// This replica's part in the election.
    pub role: watch::Receiver<Role>,
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    crate::exposition::respond(state.metrics.registry(), &headers)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if !*state.health.api_reachable.borrow() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "the API server did not answer the last probe",
        );
    }
    match *state.health.role.borrow() {
        Role::Leader => (StatusCode::OK, "leader"),
        Role::Standby => (StatusCode::OK, "standby"),
        Role::Restarting => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the controllers failed and restart after a backoff",
        ),
        Role::Failed => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the controllers kept failing; gave up the leader Lease",
        ),
    }
}

/// The router serving `/metrics`, `/healthz` and `/readyz`.
pub fn router(metrics: Metrics, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(self::metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health })
}

/// Serves `router` on `listener` until `shutdown` turns true, finishing requests in flight.
///
/// # Errors
/// When the listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = shutdown.wait_for(|s| *s).await;
        })
        .await
}

/// Binds `address` for [`serve`], naming the address in the error.
///
/// # Errors
/// When the address cannot be bound (in use, no permission).
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot listen on {address} for /metrics, /healthz and /readyz: {e}"),
        )
    })
}

/// Asks the API server for its version every `period` (each try bounded by `period`) and
/// publishes whether it answered, until `stop` turns true.
pub async fn probe_api(
    client: kube::Client,
    period: Duration,
    reachable: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let answered = matches!(
            tokio::time::timeout(period, client.apiserver_version()).await,
            Ok(Ok(_))
        );
        if reachable.send_replace(answered) != answered {
            if answered {
                tracing::info!("the API server answers");
            } else {
                tracing::warn!("the API server does not answer; /readyz reports not ready");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Resolves at the first SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the process");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(address: SocketAddr, path: &str) -> (u16, String, String) {
        get_accepting(address, path, "application/openmetrics-text").await
    }

    async fn get_accepting(address: SocketAddr, path: &str, accept: &str) -> (u16, String, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let code = head.split(' ').nth(1).unwrap().parse().unwrap();
        (code, head.to_lowercase(), body.to_owned())
    }

    #[tokio::test]
    async fn endpoints_report_metrics_liveness_and_readiness() {
        let metrics = Metrics::new();
        metrics.leader.set(1);
        let (reachable_tx, reachable) = watch::channel(false);
        let (role_tx, role) = watch::channel(Role::Standby);
        let listener = bind(([127, 0, 0, 1], 0).into()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop_tx, stop) = watch::channel(false);
        let server = tokio::spawn(serve(
            listener,
            router(
                metrics,
                Health {
                    api_reachable: reachable,
                    role,
                },
            ),
            stop,
        ));
        let (code, head, body) = get(address, "/metrics").await;
        assert_eq!(code, 200);
        assert!(head.contains("application/openmetrics-text"), "{head}");
        assert!(body.contains("nodemgr_leader 1"), "{body}");
        let (code, head, body) = get_accepting(address, "/metrics", "text/plain").await;
        assert_eq!(code, 200);
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        assert!(
            body.contains("# TYPE nodemgr_controller_failures_total counter"),
            "{body}"
        );
        assert!(!body.contains("# EOF"), "{body}");
        assert_eq!(get(address, "/healthz").await.0, 200);
        assert_eq!(get(address, "/readyz").await.0, 503);
        reachable_tx.send(true).unwrap();
        let (code, _, body) = get(address, "/readyz").await;
        assert_eq!((code, body.as_str()), (200, "standby"));
        role_tx.send(Role::Leader).unwrap();
        assert_eq!(get(address, "/readyz").await.2, "leader");
        role_tx.send(Role::Restarting).unwrap();
        assert_eq!(get(address, "/readyz").await.0, 503);
        role_tx.send(Role::Failed).unwrap();
        let (code, _, body) = get(address, "/readyz").await;
        assert_eq!(code, 503);
        assert!(body.contains("gave up"), "{body}");
        assert_eq!(get(address, "/nope").await.0, 404);
        stop_tx.send(true).unwrap();
        server.await.unwrap().unwrap();
    }
}
