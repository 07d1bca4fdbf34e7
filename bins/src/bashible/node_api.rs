//! The agent's view of the Kubernetes API: its own Node (annotations, labels,
//! resourceVersion), annotation patches guarded by that resourceVersion, and Events about the
//! node. Credentials follow Deckhouse: the kubelet's kubeconfig once the node has joined, else
//! the bootstrap token with the cluster CA and the API endpoints the bootstrap wrote (or
//! `--kubeconfig` when given, for tests and debugging).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Map, Value, json};

use super::layout::Layout;
use super::secret::Secret;

/// Why the API could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No credentials: neither a kubelet kubeconfig nor a bootstrap token is there.
    #[error(
        "no credentials for the API: neither {kubeconfig} nor {token} exists; bootstrap the \
         node first or pass --kubeconfig"
    )]
    NoCredentials {
        /// The kubelet kubeconfig looked for.
        kubeconfig: String,
        /// The bootstrap token looked for.
        token: String,
    },
    /// The credentials are there but unusable.
    #[error("cannot use the API credentials: {message}")]
    Credentials {
        /// What is wrong (the cause's text included, as operators know it).
        message: String,
        /// The error reading or using them (I/O, kubeconfig, kube client), when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The resourceVersion precondition failed (409): the node changed meanwhile.
    #[error("the Node changed while the agent patched it (resourceVersion conflict)")]
    Conflict,
    /// The Node does not exist (any more).
    #[error("Node {0} does not exist")]
    NodeGone(String),
    /// Any other failure (unreachable, 5xx, refused).
    #[error("{what}: {source}")]
    Call {
        /// What was being done.
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

/// What the agent reads of its Node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeView {
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// resourceVersion, for the next patch's precondition.
    pub resource_version: String,
}

/// The agent's API client.
#[derive(Clone)]
pub struct NodeApi {
    client: Client,
    node: String,
    /// Which credentials are in use, for the log.
    pub credentials: &'static str,
}

impl NodeApi {
    /// The kube client.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl ApiError {
    /// [`ApiError::Credentials`] caused by `source`.
    fn credentials(
        message: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Credentials {
            message,
            source: Some(Box::new(source)),
        }
    }
}

async fn client_from_kubeconfig(path: &Path) -> Result<Client, ApiError> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let bad = |e: kube::config::KubeconfigError| {
        ApiError::credentials(format!("kubeconfig {}: {e}", path.display()), e)
    };
    let file = Kubeconfig::read_from(path).map_err(bad)?;
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(bad)?;
    config.default_retry = false;
    Client::try_from(config).map_err(|e| ApiError::credentials(e.to_string(), e))
}

async fn client_from_bootstrap_token(layout: &Layout) -> Result<Client, ApiError> {
    use base64::Engine as _;
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let token = Secret::read_from(&layout.bootstrap_token())
        .map_err(|e| ApiError::credentials(e.to_string(), e))?;
    let endpoints = std::fs::read_to_string(layout.api_endpoints()).map_err(|e| {
        ApiError::credentials(
            format!(
                "cannot read the API endpoints {}: {e}",
                layout.api_endpoints().display()
            ),
            e,
        )
    })?;
    let endpoint = endpoints
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or_else(|| ApiError::Credentials {
            message: format!("{} lists no API endpoint", layout.api_endpoints().display()),
            source: None,
        })?;
    let ca = std::fs::read(layout.ca_cert()).map_err(|e| {
        ApiError::credentials(
            format!(
                "cannot read the cluster CA {}: {e}",
                layout.ca_cert().display()
            ),
            e,
        )
    })?;
    // Built in memory only: the token never reaches a file or a command line.
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": {
            "server": format!("https://{endpoint}"),
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(&ca),
        }}],
        "users": [{"name": "bootstrap", "user": {"token": token.expose()}}],
        "contexts": [{"name": "bootstrap", "context": {"cluster": "cluster", "user": "bootstrap"}}],
        "current-context": "bootstrap",
    });
    let bad = |e: kube::config::KubeconfigError| {
        ApiError::credentials(
            format!("bootstrap credentials (endpoint {endpoint}): {e}"),
            e,
        )
    };
    let file = Kubeconfig::from_yaml(&kubeconfig.to_string()).map_err(bad)?;
    let mut config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(bad)?;
    config.default_retry = false;
    Client::try_from(config).map_err(|e| ApiError::credentials(e.to_string(), e))
}

fn call(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiError {
    let what = what.into();
    move |source| ApiError::Call { what, source }
}

impl NodeApi {
    /// Connects with `kubeconfig` when given, else the kubelet's kubeconfig under the layout
    /// when it exists, else the bootstrap token.
    ///
    /// # Errors
    /// [`ApiError::NoCredentials`] or [`ApiError::Credentials`].
    pub async fn connect(
        layout: &Layout,
        kubeconfig: Option<&Path>,
        node: &str,
    ) -> Result<Self, ApiError> {
        let (client, credentials) = if let Some(path) = kubeconfig {
            (client_from_kubeconfig(path).await?, "--kubeconfig")
        } else if layout.kubelet_kubeconfig().exists() {
            (
                client_from_kubeconfig(&layout.kubelet_kubeconfig()).await?,
                "the kubelet's kubeconfig",
            )
        } else if layout.bootstrap_token().exists() {
            (
                client_from_bootstrap_token(layout).await?,
                "the bootstrap token",
            )
        } else {
            return Err(ApiError::NoCredentials {
                kubeconfig: layout.kubelet_kubeconfig().display().to_string(),
                token: layout.bootstrap_token().display().to_string(),
            });
        };
        Ok(Self {
            client,
            node: node.to_owned(),
            credentials,
        })
    }

    /// Reads the Node.
    ///
    /// # Errors
    /// [`ApiError::NodeGone`] when it does not exist, [`ApiError::Call`] otherwise.
    pub async fn node(&self) -> Result<NodeView, ApiError> {
        let api = Api::<Node>::all(self.client.clone());
        let node = api
            .get_opt(&self.node)
            .await
            .map_err(call(format!("read Node {}", self.node)))?
            .ok_or_else(|| ApiError::NodeGone(self.node.clone()))?;
        Ok(NodeView {
            annotations: node.metadata.annotations.unwrap_or_default(),
            labels: node.metadata.labels.unwrap_or_default(),
            resource_version: node.metadata.resource_version.unwrap_or_default(),
        })
    }

    /// Sets (`Some`) and removes (`None`) annotations in one merge patch, guarded by
    /// `resource_version` when given.
    ///
    /// # Errors
    /// [`ApiError::Conflict`] when the precondition fails, [`ApiError::NodeGone`],
    /// [`ApiError::Call`].
    pub async fn patch_annotations(
        &self,
        changes: &BTreeMap<String, Option<String>>,
        resource_version: Option<&str>,
    ) -> Result<NodeView, ApiError> {
        let annotations: Map<String, Value> = changes
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |v| json!(v))))
            .collect();
        let mut metadata = json!({ "annotations": annotations });
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        let api = Api::<Node>::all(self.client.clone());
        match api
            .patch(
                &self.node,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": metadata })),
            )
            .await
        {
            Ok(node) => Ok(NodeView {
                annotations: node.metadata.annotations.unwrap_or_default(),
                labels: node.metadata.labels.unwrap_or_default(),
                resource_version: node.metadata.resource_version.unwrap_or_default(),
            }),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(ApiError::Conflict),
            Err(kube::Error::Api(s)) if s.code == 404 => Err(ApiError::NodeGone(self.node.clone())),
            Err(e) => Err(call(format!("patch Node {}", self.node))(e)),
        }
    }

    /// Records an `events.k8s.io/v1` Event about the Node in namespace `default` under the
    /// name the agent chose (`bashible-error-<host>-<step>`, as Deckhouse's): the first one is
    /// created, a repeat updates its note and counts it in `series`.
    ///
    /// # Errors
    /// [`ApiError::Call`].
    pub async fn record_event(
        &self,
        name: &str,
        reason: &str,
        warning: bool,
        note: &str,
    ) -> Result<(), ApiError> {
        let name = name.to_owned();
        let api = Api::<Event>::namespaced(self.client.clone(), "default");
        let now = MicroTime(nodemgr_k8s::convert::to_jiff(crate::wall_clock()));
        // The API caps an Event's note at 1 kB.
        let note: String = note.chars().take(1000).collect();
        let body = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            event_time: Some(now.clone()),
            reporting_controller: Some("deckhouse.io/bashible".into()),
            reporting_instance: Some(self.node.clone()),
            action: Some(reason.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note.clone()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            regarding: Some(k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(self.node.clone()),
                ..Default::default()
            }),
            ..Event::default()
        };
        match api.create(&PostParams::default(), &body).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = api.get(&name).await.map_err(call("read Event"))?;
                let count = existing
                    .series
                    .as_ref()
                    .map_or(1, |s| s.count)
                    .saturating_add(1);
                let patch = json!({
                    "note": note,
                    "series": EventSeries { count, last_observed_time: now },
                });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await
                    .map(|_| ())
                    .map_err(call("update Event"))
            }
            Err(e) => Err(call(format!("record Event {reason}"))(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreadable_kubeconfig_keeps_the_kubeconfig_error() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let Err(error) = client_from_kubeconfig(&dir.path().join("absent.conf")).await else {
            panic!("a client from a kubeconfig that does not exist");
        };
        assert!(
            error
                .to_string()
                .starts_with("cannot use the API credentials: kubeconfig "),
            "{error}"
        );
        let kubeconfig = std::error::Error::source(&error)
            .and_then(|e| e.downcast_ref::<kube::config::KubeconfigError>());
        assert!(kubeconfig.is_some(), "{error:?}");
    }
}
