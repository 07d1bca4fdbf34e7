//! Keeps the `caBundle` of the webhook's ValidatingWebhookConfiguration and of the CRDs'
//! conversion webhooks equal to the CA that signed the serving certificate, so a renewed
//! certificate (new CA) is trusted by the API server without a manual step.
//!
//! Each pass reads the objects and writes only those whose bundle differs; every replica may
//! run it (the writes carry the same value and a resourceVersion, so a lost race is retried on
//! the next pass). A CRD is only touched when its `conversion.strategy` is `Webhook`.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

/// The objects whose bundle is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaBundleTargets {
    /// ValidatingWebhookConfiguration names: every webhook in them gets the bundle.
    pub webhook_configurations: Vec<String>,
    /// CRD names (`nodegroups.deckhouse.io`, …).
    pub crds: Vec<String>,
}

/// Sets the bundle where it differs, once. Returns how many objects were written.
///
/// # Errors
/// The first API error, naming the object.
pub async fn sync_once(
    client: &Client,
    targets: &CaBundleTargets,
    ca_pem: &str,
) -> Result<usize, String> {
    let bundle = ByteString(ca_pem.as_bytes().to_vec());
    let mut written = 0;
    let configurations = Api::<ValidatingWebhookConfiguration>::all(client.clone());
    for name in &targets.webhook_configurations {
        let Some(mut vwc) = configurations
            .get_opt(name)
            .await
            .map_err(|e| format!("failed to read ValidatingWebhookConfiguration {name}: {e}"))?
        else {
            tracing::debug!(%name, "no such ValidatingWebhookConfiguration yet");
            continue;
        };
        let mut changed = false;
        for webhook in vwc.webhooks.iter_mut().flatten() {
            if webhook.client_config.ca_bundle.as_ref() != Some(&bundle) {
                webhook.client_config.ca_bundle = Some(bundle.clone());
                changed = true;
            }
        }
        if changed {
            configurations
                .replace(name, &PostParams::default(), &vwc)
                .await
                .map_err(|e| {
                    format!("failed to write ValidatingWebhookConfiguration {name}: {e}")
                })?;
            written += 1;
        }
    }
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for name in &targets.crds {
        let Some(mut crd) = crds
            .get_opt(name)
            .await
            .map_err(|e| format!("failed to read CRD {name}: {e}"))?
        else {
            continue;
        };
        let Some(conversion) = crd.spec.conversion.as_mut() else {
            continue;
        };
        if conversion.strategy != "Webhook" {
            continue;
        }
        let Some(config) = conversion
            .webhook
            .as_mut()
            .and_then(|w| w.client_config.as_mut())
        else {
            continue;
        };
        if config.ca_bundle.as_ref() != Some(&bundle) {
            config.ca_bundle = Some(bundle.clone());
            crds.replace(name, &PostParams::default(), &crd)
                .await
                .map_err(|e| format!("failed to write CRD {name}: {e}"))?;
            written += 1;
        }
    }
    Ok(written)
}

/// Runs [`sync_once`] every `period` with the CA `ca_pem` returns, until `stop`.
pub async fn keep(
    client: Client,
    targets: CaBundleTargets,
    ca_pem: impl Fn() -> String + Send + 'static,
    period: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let pem = ca_pem();
        match sync_once(&client, &targets, &pem).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(objects = n, "caBundle updated"),
            Err(message) => tracing::warn!(%message, "caBundle not updated; retrying"),
        }
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
    }
}
