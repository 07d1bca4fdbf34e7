//! TLS for the HTTPS servers nodemgr runs inside the cluster (bashible-apiserver, admission
//! webhooks): a self-signed serving certificate ([`generate`]), kept in a `kubernetes.io/tls`
//! Secret so that every replica serves the same one ([`secret`]), a rustls server configuration
//! with the workspace's ring provider ([`server_config`]), and serving an axum `Router` with
//! connection limits over it ([`serve`]). See `docs/bashible-apiserver.md` ("TLS").
//!
//! ```no_run
//! # async fn example(client: kube::Client, app: axum::Router) -> Result<(), Box<dyn std::error::Error>> {
//! use nodemgr_k8s::tls;
//! let names = vec!["my-webhook.my-namespace.svc".to_owned()];
//! let pair = tls::secret::load_or_create(&client, "my-namespace", "my-webhook-tls", &names).await?;
//! let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&pair)?);
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8443").await?;
//! tls::serve::serve(listener, app, Some(acceptor), tls::serve::ConnectionLimits::default(),
//!     tls::serve::ConnectionStats::default(), std::future::pending()).await?;
//! # Ok(()) }
//! ```

pub mod generate;
pub mod secret;
pub mod serve;

use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub use generate::self_signed;

/// A certificate chain and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    /// The certificate chain (`tls.crt`), leaf first.
    pub cert_pem: String,
    /// The private key (`tls.key`).
    pub key_pem: String,
}

impl std::fmt::Debug for PemPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemPair")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating the certificate failed.
    #[error("cannot generate a self-signed certificate for {names:?}")]
    Generate {
        /// The names asked for.
        names: Vec<String>,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// The certificate PEM holds no certificate or does not parse.
    #[error("{what}: no usable PEM certificate (expected `-----BEGIN CERTIFICATE-----` blocks)")]
    Certificate {
        /// Where the PEM came from.
        what: String,
        /// The PEM parser's error (`None` when the PEM parses but holds no certificate).
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// The key PEM holds no private key or does not parse.
    #[error("{what}: no usable PEM private key (PKCS#8, PKCS#1 or SEC1)")]
    Key {
        /// Where the PEM came from.
        what: String,
        /// The PEM parser's error.
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// rustls refused the pair (a key that does not match the certificate, say).
    #[error("rustls refused the certificate and key")]
    Rustls(#[source] rustls::Error),
    /// Reading or writing the Secret failed.
    #[error("cannot {action} the TLS Secret {namespace}/{name}")]
    Secret {
        /// `read` or `create`.
        action: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The Secret exists but lacks `tls.crt` or `tls.key`.
    #[error(
        "the TLS Secret {namespace}/{name} has no {key}: give it `tls.crt` and `tls.key` (a \
         kubernetes.io/tls Secret), or delete it to have a self-signed one generated"
    )]
    SecretIncomplete {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The missing key.
        key: &'static str,
    },
}

/// Parses a PEM pair into what rustls takes.
///
/// # Errors
/// [`TlsError::Certificate`] or [`TlsError::Key`].
pub fn parse_pair(
    pair: &PemPair,
    what: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pair.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Certificate {
                what: what.into(),
                source: Some(e),
            })?;
    if certs.is_empty() {
        return Err(TlsError::Certificate {
            what: what.into(),
            source: None,
        });
    }
    let key =
        PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes()).map_err(|e| TlsError::Key {
            what: what.into(),
            source: Some(e),
        })?;
    Ok((certs, key))
}

/// A rustls server configuration serving `pair` (ring provider, TLS 1.2 and 1.3, ALPN
/// `http/1.1`, no client certificates).
///
/// # Errors
/// A pair that does not parse, or that rustls refuses.
pub fn server_config(pair: &PemPair) -> Result<Arc<ServerConfig>, TlsError> {
    let (certs, key) = parse_pair(pair, "serving certificate")?;
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(TlsError::Rustls)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_pair_makes_a_server_config() {
        let pair = self_signed(&["bashible.example".to_owned()]).expect("generate");
        assert!(pair.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        server_config(&pair).expect("config");
        assert!(!format!("{pair:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn mismatched_or_garbage_pairs_are_refused_with_what_is_wrong() {
        let a = self_signed(&["a.example".to_owned()]).expect("generate");
        let b = self_signed(&["b.example".to_owned()]).expect("generate");
        let mixed = PemPair {
            cert_pem: a.cert_pem.clone(),
            key_pem: b.key_pem,
        };
        assert!(matches!(server_config(&mixed), Err(TlsError::Rustls(_))));
        let garbage = PemPair {
            cert_pem: "not pem".into(),
            key_pem: a.key_pem.clone(),
        };
        let err = server_config(&garbage).expect_err("garbage");
        assert!(err.to_string().contains("BEGIN CERTIFICATE"), "{err}");
        let no_key = PemPair {
            cert_pem: a.cert_pem,
            key_pem: String::new(),
        };
        let err = server_config(&no_key).expect_err("no key");
        assert!(matches!(err, TlsError::Key { .. }), "{err:?}");
        // The PEM parser's error is kept as the source.
        let pem = std::error::Error::source(&err)
            .and_then(|e| e.downcast_ref::<rustls::pki_types::pem::Error>());
        assert!(pem.is_some(), "{err:?}");
    }
}
