//! TLS of the `/metrics` servers: a certificate and key in PEM files (`--metrics-tls-cert`,
//! `--metrics-tls-key`; in the chart a Secret made by cert-manager), read once at start, or,
//! without them, a self-signed certificate made at start (as kube-rbac-proxy does; scrapers
//! then skip verification, the bearer token is what is checked).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate or key that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or holds no PEM certificate.
    #[error("cannot read a PEM certificate chain from {path} (--metrics-tls-cert): {source}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// The key file cannot be read or holds no PEM private key.
    #[error("cannot read a PEM private key from {path} (--metrics-tls-key): {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// No self-signed certificate could be made.
    #[error("cannot make a self-signed certificate for /metrics: {0}")]
    SelfSigned(#[source] rcgen::Error),
    /// rustls refused the pair (a key that does not match the certificate, …).
    #[error("the certificate {cert} and key {key} cannot serve TLS: {source}")]
    Config {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
}

/// A TLS acceptor for the certificate chain in `cert` and the private key in `key`.
///
/// # Errors
/// Unreadable files, no PEM block of the right kind, a key that does not match.
pub fn acceptor(cert: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Certificate {
            path: cert.to_owned(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate {
            path: cert.to_owned(),
            source: rustls::pki_types::pem::Error::NoItemsFound,
        });
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Key {
        path: key.to_owned(),
        source,
    })?;
    server_config(chain, private_key, cert, key)
}

/// A TLS acceptor with a fresh self-signed certificate for `names` (host names or addresses).
///
/// # Errors
/// When the certificate cannot be made.
pub fn self_signed(names: Vec<String>) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let made = rcgen::generate_simple_self_signed(names).map_err(TlsError::SelfSigned)?;
    let chain = vec![made.cert.der().clone()];
    let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    server_config(
        chain,
        key,
        Path::new("(self-signed)"),
        Path::new("(self-signed)"),
    )
}

fn server_config(
    chain: Vec<CertificateDer<'static>>,
    private_key: PrivateKeyDer<'static>,
    cert: &Path,
    key: &Path,
) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(chain, private_key))
        .map_err(|source| TlsError::Config {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        })?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
