//! Where the webhook's reviews get what they need to know about the cluster: the settings,
//! the nodes of a NodeGroup under review, the other StaticInstances' addresses, the number of
//! API server endpoints, and the provider cluster configuration's node groups for
//! conversion. [`KubeSource`] reads them from the API on each review (fresh, so a review
//! never judges by a stale cache; each replica answers on its own, with no leader).

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Endpoints, Node, Secret};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client};
use nodemgr_core::admission::{ClusterInputs, Needs, NodeLabels};
use nodemgr_core::conversion::{ConversionContext, ConversionError, PROVIDER_CONFIGURATION_KEY};
use nodemgr_core::model::keys;
use nodemgr_k8s::settings::{Settings, SettingsError, SettingsSource};

/// What the reviews read about the cluster.
#[async_trait]
pub trait ClusterSource: Send + Sync {
    /// The inputs an admission review with these `needs` decides by.
    ///
    /// # Errors
    /// [`SourceError`] saying what could not be read; the review then fails (HTTP 500) and the
    /// API server applies the webhook's failurePolicy.
    async fn admission_inputs(&self, needs: &Needs) -> Result<ClusterInputs, SourceError>;

    /// What conversions need (the provider configuration's node groups).
    ///
    /// # Errors
    /// As [`Self::admission_inputs`].
    async fn conversion_context(&self) -> Result<ConversionContext, SourceError>;
}

/// What the webhook could not read about the cluster; the message is what the review answers.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The settings (flags and the settings ConfigMap) could not be read.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// An API call failed.
    #[error("failed to {what}: {source}")]
    Api {
        /// What was being done (`list StaticInstances`).
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// The provider cluster configuration is not text.
    #[error("Secret {namespace}/{name} key {PROVIDER_CONFIGURATION_KEY} is not UTF-8")]
    NotUtf8 {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The decoding error.
        #[source]
        source: std::string::FromUtf8Error,
    },
    /// The provider cluster configuration does not parse.
    #[error("Secret {namespace}/{name}: {source}")]
    ProviderConfiguration {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// Why.
        #[source]
        source: ConversionError,
    },
}

/// [`SourceError::Api`] for `what`.
fn api_failed(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SourceError {
    let what = what.into();
    move |source| SourceError::Api { what, source }
}

/// Reads the cluster through the API.
#[derive(Clone)]
pub struct KubeSource {
    /// The client.
    pub client: Client,
    /// Settings from flags and the settings ConfigMap.
    pub settings: SettingsSource,
    /// `(namespace, name)` of the Secret holding the provider cluster configuration.
    pub provider_secret: Option<(String, String)>,
}

fn static_instances(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(keys::API_GROUP, "v1alpha2", "StaticInstance");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

impl KubeSource {
    async fn settings(&self) -> Result<Settings, SourceError> {
        Ok(self.settings.read(&self.client).await?)
    }

    async fn api_endpoints(&self) -> Option<usize> {
        let endpoints = Api::<Endpoints>::namespaced(self.client.clone(), "default")
            .get_opt("kubernetes")
            .await
            .ok()??;
        let count = endpoints
            .subsets
            .unwrap_or_default()
            .iter()
            .map(|s| s.addresses.as_ref().map_or(0, Vec::len))
            .sum();
        Some(count)
    }
}

#[async_trait]
impl ClusterSource for KubeSource {
    async fn admission_inputs(&self, needs: &Needs) -> Result<ClusterInputs, SourceError> {
        let settings = self.settings().await?;
        let mut inputs = ClusterInputs {
            settings: settings.validation,
            pod_subnet_node_cidr_prefix: settings.pod_subnet_node_cidr_prefix,
            ..ClusterInputs::default()
        };
        if let Some(group) = &needs.nodes_of_group {
            let selector = format!("{}={group}", keys::LABEL_NODE_GROUP);
            let nodes = Api::<Node>::all(self.client.clone())
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(api_failed(format!("list the nodes of group {group}")))?;
            inputs.group_nodes = nodes
                .items
                .into_iter()
                .map(|n| NodeLabels {
                    name: n.metadata.name.unwrap_or_default(),
                    labels: n.metadata.labels.unwrap_or_default(),
                })
                .collect();
            if group == "master" {
                inputs.api_endpoints = self.api_endpoints().await;
            }
        }
        if needs.static_instances {
            let list = static_instances(&self.client)
                .list(&ListParams::default())
                .await
                .map_err(api_failed("list StaticInstances"))?;
            inputs.static_instance_addresses = list
                .items
                .into_iter()
                .filter_map(|si| {
                    let address = si.data.get("spec")?.get("address")?.as_str()?.to_owned();
                    Some((si.metadata.name?, address))
                })
                .collect::<BTreeMap<_, _>>();
        }
        Ok(inputs)
    }

    async fn conversion_context(&self) -> Result<ConversionContext, SourceError> {
        let Some((namespace, name)) = &self.provider_secret else {
            return Ok(ConversionContext::default());
        };
        let secret = Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(api_failed(format!("read Secret {namespace}/{name}")))?;
        let Some(bytes) = secret
            .and_then(|s| s.data)
            .and_then(|mut d| d.remove(PROVIDER_CONFIGURATION_KEY))
        else {
            // A static cluster has no provider configuration: every Hybrid group but master
            // is CloudStatic.
            return Ok(ConversionContext::default());
        };
        let text = String::from_utf8(bytes.0).map_err(|source| SourceError::NotUtf8 {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
        ConversionContext::from_provider_cluster_configuration(&text).map_err(|source| {
            SourceError::ProviderConfiguration {
                namespace: namespace.clone(),
                name: name.clone(),
                source,
            }
        })
    }
}
