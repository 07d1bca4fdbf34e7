//! Calls one webhook as kube-apiserver does: `clientConfig.url`, or `clientConfig.service`
//! (namespace, name, port — 443 by default — and path) resolved through the emulator's
//! service routes (there is no cluster network: a test maps a service to a base URL with
//! `Emulator::route_service`, or to several, one call after the other, with
//! `Emulator::route_service_endpoints`); HTTPS only, trusting exactly the PEM certificates of
//! `clientConfig.caBundle`; `?timeout=Ns` appended and the call bounded by that timeout; a JSON
//! POST whose answer must be 200 with a JSON body. See `docs/api-emulator.md`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

/// Where `clientConfig.service` entries go: `(namespace, name, port)` → the base URLs of its
/// endpoints (`https://127.0.0.1:PORT`). A call goes to one endpoint ([`ServiceRoutes::pick`]),
/// the next one in turn for each call, as kube-proxy spreads connections over a Service's ready
/// endpoints. Clones share the turn.
#[derive(Debug, Clone, Default)]
pub struct ServiceRoutes {
    endpoints: BTreeMap<(String, String, u16), Vec<String>>,
    turn: Arc<AtomicU64>,
}

impl ServiceRoutes {
    /// No routes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Routes `service` to one endpoint (replacing its earlier route).
    pub fn insert(&mut self, service: (String, String, u16), base_url: String) {
        self.endpoints.insert(service, vec![base_url]);
    }

    /// Routes `service` to several endpoints, taken in turn; none removes its route.
    pub fn set_endpoints(&mut self, service: (String, String, u16), base_urls: Vec<String>) {
        if base_urls.is_empty() {
            self.endpoints.remove(&service);
        } else {
            self.endpoints.insert(service, base_urls);
        }
    }

    /// The endpoint the next call to `service` goes to.
    pub fn pick(&self, service: &(String, String, u16)) -> Option<String> {
        let endpoints = self.endpoints.get(service)?;
        let count = u64::try_from(endpoints.len()).ok().filter(|n| *n > 0)?;
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        endpoints.get(usize::try_from(turn % count).ok()?).cloned()
    }
}

/// Why a webhook could not be called (kube-apiserver: "failed to call webhook: ...").
#[derive(Debug, thiserror::Error)]
pub enum WebhookCallError {
    /// `clientConfig` has neither `url` nor `service`, or a bad one.
    #[error("invalid clientConfig: {0}")]
    ClientConfig(String),
    /// A `clientConfig.service` nothing routes to.
    #[error(
        "service {namespace}/{name}:{port} is not reachable from the API emulator: map it to a URL with Emulator::route_service"
    )]
    Unrouted {
        /// Namespace of the service.
        namespace: String,
        /// Name of the service.
        name: String,
        /// Port.
        port: u16,
    },
    /// `caBundle` is not base64 of PEM certificates.
    #[error("invalid caBundle: {0}")]
    CaBundle(String),
    /// Building the TLS client failed.
    #[error("building the TLS client: {source}")]
    Tls {
        /// The TLS library's error.
        #[source]
        source: rustls::Error,
    },
    /// Connecting, sending or reading failed (includes the timeout).
    #[error("Post {url:?}: {source}")]
    Transport {
        /// The URL called.
        url: String,
        /// The HTTP client's error.
        #[source]
        source: reqwest::Error,
    },
    /// The webhook answered something else than 200.
    #[error("Post {url:?}: the server responded with status {code}: {body}")]
    Status {
        /// The URL called.
        url: String,
        /// HTTP status.
        code: u16,
        /// The start of the body.
        body: String,
    },
    /// The answer is not JSON.
    #[error("Post {url:?}: the response is not JSON: {source}")]
    Decode {
        /// The URL called.
        url: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

/// The URL a `clientConfig` designates (without the `?timeout=` query).
///
/// # Errors
/// When neither `url` nor a routed `service` is given, or the URL is not HTTPS.
pub fn target_url(
    client_config: &Value,
    routes: &ServiceRoutes,
) -> Result<String, WebhookCallError> {
    if let Some(url) = client_config.get("url").and_then(Value::as_str) {
        if !url.starts_with("https://") {
            return Err(WebhookCallError::ClientConfig(format!(
                "url {url:?} must use the https scheme"
            )));
        }
        return Ok(url.to_owned());
    }
    let service = client_config.get("service").ok_or_else(|| {
        WebhookCallError::ClientConfig("exactly one of url or service is required".to_owned())
    })?;
    let text = |k: &str| {
        service
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let port = match service.get("port") {
        None => 443,
        Some(p) => p
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(|| {
                WebhookCallError::ClientConfig(format!("service.port {p} is not a port"))
            })?,
    };
    let (namespace, name) = (text("namespace"), text("name"));
    let base = routes
        .pick(&(namespace.clone(), name.clone(), port))
        .ok_or(WebhookCallError::Unrouted {
            namespace,
            name,
            port,
        })?;
    let path = text("path");
    let path = if path.is_empty() || path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    Ok(format!("{}{path}", base.trim_end_matches('/')))
}

fn tls_config(ca_bundle: Option<&str>) -> Result<rustls::ClientConfig, WebhookCallError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    if let Some(bundle) = ca_bundle.filter(|b| !b.is_empty()) {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .map_err(|e| WebhookCallError::CaBundle(format!("not base64: {e}")))?;
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| WebhookCallError::CaBundle(format!("not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|source| WebhookCallError::Tls { source })?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|source| WebhookCallError::Tls { source })?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// POSTs `review` to the webhook of `client_config` and returns its JSON answer.
///
/// # Errors
/// See [`WebhookCallError`].
pub async fn call(
    client_config: &Value,
    routes: &ServiceRoutes,
    timeout: Duration,
    review: &Value,
) -> Result<Value, WebhookCallError> {
    let base = target_url(client_config, routes)?;
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}timeout={}s", timeout.as_secs().max(1));
    let tls = tls_config(client_config.get("caBundle").and_then(Value::as_str))?;
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .build()
        .map_err(|source| WebhookCallError::Transport {
            url: url.clone(),
            source,
        })?;
    let response = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(review.to_string())
        .send()
        .await
        .map_err(|source| WebhookCallError::Transport {
            url: url.clone(),
            source,
        })?;
    let code = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .map_err(|source| WebhookCallError::Transport {
            url: url.clone(),
            source,
        })?;
    if code != 200 {
        let text = String::from_utf8_lossy(&body);
        return Err(WebhookCallError::Status {
            url,
            code,
            body: text.chars().take(200).collect(),
        });
    }
    serde_json::from_slice(&body).map_err(|source| WebhookCallError::Decode { url, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn service_references_resolve_through_routes() {
        let mut routes = ServiceRoutes::new();
        routes.insert(
            ("d8".into(), "hook".into(), 443),
            "https://127.0.0.1:9443/".into(),
        );
        let config = json!({"service": {"namespace": "d8", "name": "hook", "path": "/validate"}});
        assert_eq!(
            target_url(&config, &routes).unwrap(),
            "https://127.0.0.1:9443/validate"
        );
        let other_port = json!({"service": {"namespace": "d8", "name": "hook", "port": 8443}});
        let e = target_url(&other_port, &routes).unwrap_err();
        assert!(e.to_string().contains("d8/hook:8443"), "{e}");
        let plain = json!({"url": "http://x"});
        assert!(
            target_url(&plain, &routes)
                .unwrap_err()
                .to_string()
                .contains("https")
        );
    }

    #[test]
    fn each_call_goes_to_the_next_endpoint_of_a_service() {
        let mut routes = ServiceRoutes::new();
        let hook = ("d8".to_owned(), "hook".to_owned(), 443);
        routes.set_endpoints(hook.clone(), vec!["https://a".into(), "https://b".into()]);
        routes.insert(("d8".into(), "single".into(), 443), "https://c".into());
        let config = json!({"service": {"namespace": "d8", "name": "hook", "path": "/v"}});
        // A clone (another request's copy) shares the turn.
        let copy = routes.clone();
        let picks: Vec<String> = [&routes, &copy, &routes, &copy]
            .iter()
            .map(|r| target_url(&config, r).unwrap())
            .collect();
        assert_eq!(
            picks,
            ["https://a/v", "https://b/v", "https://a/v", "https://b/v"]
        );
        let single = json!({"service": {"namespace": "d8", "name": "single"}});
        for _ in 0..3 {
            assert_eq!(target_url(&single, &routes).unwrap(), "https://c");
        }
        routes.set_endpoints(hook, Vec::new());
        assert!(target_url(&config, &routes).is_err());
    }

    #[test]
    fn a_bad_ca_bundle_is_named() {
        let e = tls_config(Some("%%%")).unwrap_err();
        assert!(e.to_string().contains("caBundle"), "{e}");
    }
}
