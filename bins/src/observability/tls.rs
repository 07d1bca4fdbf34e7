//! TLS of the `/metrics` servers: a certificate and key in PEM files (`--metrics-tls-cert`,
//! `--metrics-tls-key`; in the chart a Secret made by cert-manager), read once at start, or,
//! without them, a self-signed certificate made at start (as kube-rbac-proxy does; scrapers
//! then skip verification, the bearer token is what is checked).

use std::path::{Path, PathBuf};

use nodemgr_k8s::tls::PemPair;

/// A certificate or key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {path} ({flag})")]
    Read {
        /// The file.
        path: PathBuf,
        /// The flag that named it.
        flag: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The files do not hold a usable pair, or no self-signed one could be made.
    #[error("the /metrics certificate cannot serve TLS")]
    Unusable(#[source] nodemgr_k8s::tls::TlsError),
}

/// A TLS acceptor for the certificate chain in `cert` and the private key in `key`
/// (`nodemgr_k8s::tls::server_config`: ring, TLS 1.2 and 1.3).
///
/// # Errors
/// Unreadable files, no PEM block of the right kind, a key that does not match.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let read = |path: &Path, flag: &'static str| {
        std::fs::read_to_string(path).map_err(|source| TlsError::Read {
            path: path.to_owned(),
            flag,
            source,
        })
    };
    let pair = PemPair {
        cert_pem: read(cert, "--metrics-tls-cert")?,
        key_pem: read(key, "--metrics-tls-key")?,
    };
    from_pair(&pair)
}

/// A TLS acceptor with a fresh self-signed certificate for `names` (host names or addresses).
///
/// # Errors
/// When the certificate cannot be made.
pub fn self_signed(names: Vec<String>) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let pair = nodemgr_k8s::tls::self_signed(&names).map_err(TlsError::Unusable)?;
    from_pair(&pair)
}

fn from_pair(pair: &PemPair) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let config = nodemgr_k8s::tls::server_config(pair).map_err(TlsError::Unusable)?;
    Ok(tokio_rustls::TlsAcceptor::from(config))
}
