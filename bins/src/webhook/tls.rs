//! Serves the webhook's router over TLS with a certificate read from PEM files and read again
//! when the files change (a cert-manager Secret mounted as a volume is rewritten in place by
//! the kubelet when the certificate is renewed), without a restart. The only TLS code of the
//! webhook: swap this file for a shared TLS module to change how certificates come in.
//!
//! Every handshake compares the files' modification times and lengths with those of the
//! loaded pair; on a change it loads the new pair, and a pair that does not load (half
//! written, key not matching) keeps the old one serving, with a warning.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Why the certificate files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("failed to read {path}: {source}; check --tls-cert-file/--tls-key-file")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS reported.
        #[source]
        source: std::io::Error,
    },
    /// A file holds no usable PEM block.
    #[error("{path} holds no {what} in PEM; give a PEM certificate chain and its private key")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
        /// The PEM parser's error (`None` when the file parses but holds no such block).
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// rustls refused the key or the pair.
    #[error("the key in {path} cannot be used: {source}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// What rustls reported.
        #[source]
        source: rustls::Error,
    },
}

/// A certificate chain and key from files, reloaded when the files change.
#[derive(Debug)]
pub struct ReloadingCertificate {
    cert_file: PathBuf,
    key_file: PathBuf,
    loaded: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    stamp: [Option<(SystemTime, u64)>; 2],
    key: Arc<CertifiedKey>,
    chain_pem: String,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn load(cert_file: &Path, key_file: &Path) -> Result<Loaded, TlsError> {
    let stamps = [stamp(cert_file), stamp(key_file)];
    let cert_pem = read(cert_file)?;
    let key_pem = read(key_file)?;
    let mut first_error = None;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .filter_map(|block| match block {
            Ok(cert) => Some(cert),
            Err(e) => {
                first_error.get_or_insert(e);
                None
            }
        })
        .collect();
    if chain.is_empty() {
        return Err(TlsError::Pem {
            path: cert_file.to_owned(),
            what: "CERTIFICATE",
            source: first_error,
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::Pem {
        path: key_file.to_owned(),
        what: "PRIVATE KEY",
        source: Some(e),
    })?;
    let signer =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|source| TlsError::Key {
            path: key_file.to_owned(),
            source,
        })?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|source| TlsError::Key {
        path: key_file.to_owned(),
        source,
    })?;
    Ok(Loaded {
        stamp: stamps,
        key: Arc::new(certified),
        chain_pem: String::from_utf8_lossy(&cert_pem).into_owned(),
    })
}

impl ReloadingCertificate {
    /// Loads the pair once.
    ///
    /// # Errors
    /// [`TlsError`] when a file cannot be read, holds no PEM, or the key does not fit.
    pub fn new(cert_file: PathBuf, key_file: PathBuf) -> Result<Self, TlsError> {
        let loaded = load(&cert_file, &key_file)?;
        Ok(Self {
            cert_file,
            key_file,
            loaded: Mutex::new(loaded),
        })
    }

    /// Loads the files again if they changed since the last load; keeps the old pair if the
    /// new one does not load.
    pub fn refresh(&self) {
        let now = [stamp(&self.cert_file), stamp(&self.key_file)];
        let Ok(mut loaded) = self.loaded.lock() else {
            return;
        };
        if loaded.stamp == now {
            return;
        }
        match load(&self.cert_file, &self.key_file) {
            Ok(new) => {
                tracing::info!(cert = %self.cert_file.display(), "serving certificate reloaded");
                *loaded = new;
            }
            Err(error) => {
                tracing::warn!(%error, "serving certificate changed but does not load; keeping the old one");
                loaded.stamp = now;
            }
        }
    }

    /// The PEM chain now served (what a caBundle needs when the certificate is self-signed).
    pub fn chain_pem(&self) -> String {
        self.refresh();
        self.loaded
            .lock()
            .map(|l| l.chain_pem.clone())
            .unwrap_or_default()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.refresh();
        self.loaded.lock().ok().map(|l| Arc::clone(&l.key))
    }
}

/// Serves `router` over TLS on `listener` until `shutdown` turns true.
pub async fn serve_tls(
    listener: TcpListener,
    certificate: Arc<ReloadingCertificate>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(certificate);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        tokio::spawn(async move {
            let tls = match acceptor.accept(stream).await {
                Ok(tls) => tls,
                Err(error) => {
                    tracing::debug!(%error, "TLS handshake failed");
                    return;
                }
            };
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(router))
                .await;
            if let Err(error) = served {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_that_is_not_pem_keeps_the_parser_error() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let pair = nodemgr_k8s::tls::self_signed(&["localhost".to_owned()]).expect("a pair");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &pair.cert_pem).expect("writable");
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\n%%%\n-----END PRIVATE KEY-----\n",
        )
        .expect("writable");
        let error = load(&cert, &key).expect_err("not a key");
        assert!(
            matches!(
                &error,
                TlsError::Pem {
                    what: "PRIVATE KEY",
                    ..
                }
            ),
            "{error:?}"
        );
        let pem = std::error::Error::source(&error)
            .and_then(|e| e.downcast_ref::<rustls::pki_types::pem::Error>());
        assert!(pem.is_some(), "{error:?}");
    }
}
