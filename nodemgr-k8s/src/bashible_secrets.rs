//! The Secrets bashible-apiserver keeps from what it renders (`docs/bashible-apiserver.md`,
//! "Secrets"):
//!
//! - `d8-cloud-instance-manager/configuration-checksums`: one key per NodeGroup, its bundle's
//!   checksum (the value the update controller compares nodes against). Written only when a
//!   value differs, as an update guarded by the resourceVersion it was computed from; a
//!   conflict (another replica wrote first) re-reads and compares again, so replicas that
//!   render the same bundles write once between them and never flap.
//! - `d8-cloud-instance-manager/manual-bootstrap-for-<group>`: key `bootstrap.sh`, the
//!   group's bootstrap script, for Static and CloudStatic groups; labelled
//!   [`MANAGED_BY`], and deleted when its group no longer wants one.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use nodemgr_core::model::keys;

/// Name of the checksums Secret.
pub const CHECKSUMS_SECRET: &str = "configuration-checksums";
/// Label on the manual bootstrap Secrets, naming who keeps them.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "bashible-apiserver");
/// Key of the script in a manual bootstrap Secret.
pub const MANUAL_BOOTSTRAP_KEY: &str = "bootstrap.sh";
/// Attempts at a write that keeps conflicting.
const ATTEMPTS: usize = 5;

/// A Secret write that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} Secret {namespace}/{name}")]
pub struct SecretsError {
    /// `read`, `create`, `update`, `list` or `delete`.
    pub action: &'static str,
    /// The namespace.
    pub namespace: String,
    /// The Secret (or `*` for a list).
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}

fn data_of(values: &BTreeMap<String, String>) -> BTreeMap<String, ByteString> {
    values
        .iter()
        .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
        .collect()
}

fn secret(namespace: &str, name: &str, data: BTreeMap<String, ByteString>) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Makes Secret `namespace/name` hold exactly `values` (create when absent, update guarded by
/// resourceVersion when different, nothing when equal; conflicts re-read and retry). `labels`
/// are set on create and update. Returns whether it wrote.
///
/// # Errors
/// The API fails, or keeps conflicting (`ATTEMPTS` times).
pub async fn ensure_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    values: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, SecretsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let failed = |action: &'static str| {
        move |source| SecretsError {
            action,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        }
    };
    let desired = data_of(values);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let last_try = attempt >= ATTEMPTS;
        match api.get_opt(name).await.map_err(failed("read"))? {
            None => {
                let mut new = secret(namespace, name, desired.clone());
                new.metadata.labels = (!labels.is_empty()).then(|| labels.clone());
                match api.create(&PostParams::default(), &new).await {
                    Ok(_) => return Ok(true),
                    Err(e) if is_conflict(&e) && !last_try => {}
                    Err(e) => return Err(failed("create")(e)),
                }
            }
            Some(mut current) => {
                let same_labels = labels.iter().all(|(k, v)| {
                    current.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v)
                });
                if current.data.as_ref().unwrap_or(&BTreeMap::new()) == &desired && same_labels {
                    return Ok(false);
                }
                current.data = Some(desired.clone());
                current.string_data = None;
                let current_labels = current.metadata.labels.get_or_insert_with(BTreeMap::new);
                current_labels.extend(labels.clone());
                // `replace` sends the resourceVersion read above: a concurrent write is a 409.
                match api.replace(name, &PostParams::default(), &current).await {
                    Ok(_) => return Ok(true),
                    Err(e) if is_conflict(&e) && !last_try => {}
                    Err(e) => return Err(failed("update")(e)),
                }
            }
        }
        tracing::debug!(%namespace, %name, "Secret changed under the write; re-reading");
    }
}

/// Publishes each group's checksum in [`CHECKSUMS_SECRET`] (exactly these groups).
///
/// # Errors
/// See [`ensure_secret`].
pub async fn publish_checksums(
    client: &Client,
    checksums: &BTreeMap<String, String>,
) -> Result<bool, SecretsError> {
    ensure_secret(
        client,
        keys::NAMESPACE,
        CHECKSUMS_SECRET,
        checksums,
        &BTreeMap::new(),
    )
    .await
}

/// Keeps one `manual-bootstrap-for-<group>` Secret per entry of `scripts` (group → script)
/// and deletes the labelled ones of other groups. Returns how many it wrote or deleted.
///
/// # Errors
/// The first failed write; the others are still tried.
pub async fn sync_manual_bootstrap(
    client: &Client,
    scripts: &BTreeMap<String, String>,
) -> Result<usize, SecretsError> {
    let labels = BTreeMap::from([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())]);
    let mut changed = 0;
    let mut first_error = None;
    for (group, script) in scripts {
        let name = format!("{}{group}", keys::MANUAL_BOOTSTRAP_SECRET_PREFIX);
        let values = BTreeMap::from([(MANUAL_BOOTSTRAP_KEY.to_owned(), script.clone())]);
        match ensure_secret(client, keys::NAMESPACE, &name, &values, &labels).await {
            Ok(true) => changed += 1,
            Ok(false) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let api: Api<Secret> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let listed = api
        .list(&ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)))
        .await
        .map_err(|source| SecretsError {
            action: "list",
            namespace: keys::NAMESPACE.to_owned(),
            name: "*".to_owned(),
            source,
        })?;
    for stale in listed.items {
        let Some(name) = stale.metadata.name else {
            continue;
        };
        let Some(group) = name.strip_prefix(keys::MANUAL_BOOTSTRAP_SECRET_PREFIX) else {
            continue;
        };
        if scripts.contains_key(group) {
            continue;
        }
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => changed += 1,
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => {
                first_error.get_or_insert(SecretsError {
                    action: "delete",
                    namespace: keys::NAMESPACE.to_owned(),
                    name,
                    source,
                });
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(changed),
    }
}
