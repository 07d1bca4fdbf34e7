//! Keeps a serving certificate in a `kubernetes.io/tls` Secret: an existing Secret is used as
//! it is (an operator's certificate, or one a replica generated before); an absent one is
//! generated and created with create-if-absent, so that replicas starting together end up
//! with the same certificate: the one whose create lost (409) reads the winner's.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use super::{PemPair, TlsError, self_signed};

/// The Secret type of TLS pairs.
pub const SECRET_TYPE: &str = "kubernetes.io/tls";

fn pair_of(secret: &Secret, namespace: &str, name: &str) -> Result<PemPair, TlsError> {
    let field = |key: &'static str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| TlsError::SecretIncomplete {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                key,
            })
    };
    Ok(PemPair {
        cert_pem: field("tls.crt")?,
        key_pem: field("tls.key")?,
    })
}

/// The Secret holding `pair`.
pub fn tls_secret(namespace: &str, name: &str, pair: &PemPair) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "nodemgr".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.to_owned()),
        data: Some(BTreeMap::from([
            (
                "tls.crt".to_owned(),
                ByteString(pair.cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_owned(),
                ByteString(pair.key_pem.clone().into_bytes()),
            ),
        ])),
        ..Secret::default()
    }
}

/// The pair in Secret `namespace/name`; when there is none, a self-signed one for `names`,
/// created there first (create-if-absent: on a conflict the winner's pair is read and used).
/// The pair is checked to parse ([`super::parse_pair`]) before it is returned.
///
/// # Errors
/// The API fails, or the Secret lacks `tls.crt`/`tls.key` or holds PEM that does not parse
/// (it is never overwritten: fix or delete it).
pub async fn load_or_create(
    client: &Client,
    namespace: &str,
    name: &str,
    names: &[String],
) -> Result<PemPair, TlsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |action: &'static str| {
        move |source| TlsError::Secret {
            action,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source: Box::new(source),
        }
    };
    let what = format!("TLS Secret {namespace}/{name}");
    if let Some(existing) = api.get_opt(name).await.map_err(failed("read"))? {
        let pair = pair_of(&existing, namespace, name)?;
        super::parse_pair(&pair, &what)?;
        tracing::info!(secret = %what, "serving the certificate of the TLS Secret");
        return Ok(pair);
    }
    let pair = self_signed(names)?;
    match api
        .create(&PostParams::default(), &tls_secret(namespace, name, &pair))
        .await
    {
        Ok(_) => {
            tracing::info!(secret = %what, ?names, "generated a self-signed certificate and stored it");
            Ok(pair)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(secret = %what, "another replica stored a certificate first; using it");
            let winner = api.get(name).await.map_err(failed("read"))?;
            let pair = pair_of(&winner, namespace, name)?;
            super::parse_pair(&pair, &what)?;
            Ok(pair)
        }
        Err(source) => Err(failed("create")(source)),
    }
}

/// The certificates that clients of the pair in Secret `namespace/name` should trust: its
/// `ca.crt` when it has one (cert-manager and operators put the issuer there), else its
/// `tls.crt` (a self-signed certificate is its own anchor; a chain lets clients anchor at its
/// issuer).
///
/// # Errors
/// The API fails or the Secret is gone.
pub async fn trust_anchor(
    client: &Client,
    namespace: &str,
    name: &str,
    pair: &PemPair,
) -> Result<String, TlsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api.get(name).await.map_err(|source| TlsError::Secret {
        action: "read",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source: Box::new(source),
    })?;
    Ok(ca_of(&secret).unwrap_or_else(|| pair.cert_pem.clone()))
}

/// The non-empty `ca.crt` of a Secret.
fn ca_of(secret: &Secret) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .filter(|v| v.contains("-----BEGIN CERTIFICATE-----"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_ca_crt_when_present_and_pem() {
        let pair = PemPair {
            cert_pem: "LEAF".into(),
            key_pem: "KEY".into(),
        };
        let mut secret = tls_secret("ns", "n", &pair);
        assert_eq!(ca_of(&secret), None);
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        if let Some(data) = secret.data.as_mut() {
            data.insert("ca.crt".into(), ByteString(ca.as_bytes().to_vec()));
        }
        assert_eq!(ca_of(&secret).as_deref(), Some(ca));
        if let Some(data) = secret.data.as_mut() {
            data.insert("ca.crt".into(), ByteString(b"  ".to_vec()));
        }
        assert_eq!(ca_of(&secret), None);
    }
}
