//! Generates a self-signed serving certificate (ECDSA P-256 via rcgen with ring) for a list of
//! DNS names and IP addresses. The certificate is its own CA: clients trust it by pinning it
//! (an APIService's `caBundle`, a webhook's `caBundle`, the node agent's CA file).

use super::{PemPair, TlsError};

/// A self-signed certificate for `names` (each a DNS name or an IP address; the first is also
/// the common name).
///
/// # Errors
/// [`TlsError::Generate`] for a name rcgen refuses.
pub fn self_signed(names: &[String]) -> Result<PemPair, TlsError> {
    let generated = rcgen::generate_simple_self_signed(names.to_vec()).map_err(|source| {
        TlsError::Generate {
            names: names.to_vec(),
            source,
        }
    })?;
    Ok(PemPair {
        cert_pem: generated.cert.pem(),
        key_pem: generated.signing_key.serialize_pem(),
    })
}
