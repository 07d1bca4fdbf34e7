//! `nodemgr-webhook`: the admission and conversion webhook of nodemgr's custom resources
//! (docs/admission-and-conversion.md), its own binary and Deployment apart from node-manager.
//!
//! Why apart: the API server calls the webhook on every write of a NodeGroup, StaticInstance,
//! SSHCredentials, NodeUser or NodeGroupConfiguration and on every read of a non-storage
//! version; any replica behind the Service may be picked, so every replica must answer, not
//! only node-manager's elected leader, and a webhook outage blocks those writes, so it scales
//! and rolls out on its own. The reviews hold no state: each reads what it needs from the API
//! ([`cluster::KubeSource`]).
//!
//! [`start`] serves on a given listener and returns the URL and the CA to trust, for tests and
//! embedding; [`run`] is the binary: flags, certificate files, the caBundle keeper, signals.

pub mod ca_bundle;
pub mod cluster;
pub mod reviews;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use nodemgr_k8s::settings::{Settings, SettingsSource, parse_namespaced_name};
use tokio::net::TcpListener;
use tokio::sync::watch;

use self::ca_bundle::CaBundleTargets;
use self::cluster::{ClusterSource, KubeSource};
use self::tls::ReloadingCertificate;
use crate::settings_flags::SettingsFlags;

/// Name of the ValidatingWebhookConfiguration the Helm chart installs.
pub const WEBHOOK_CONFIGURATION: &str = "nodemgr-webhook";

/// The CRDs whose conversion the webhook serves (`conversion.strategy: Webhook`).
pub const CONVERTED_CRDS: &[&str] = &[
    "nodegroups.deckhouse.io",
    "sshcredentials.deckhouse.io",
    "nodeusers.deckhouse.io",
];

/// Flags of `nodemgr-webhook`.
#[derive(Debug, Clone, Parser)]
#[command(name = "nodemgr-webhook", version, about)]
pub struct Config {
    /// Address to serve HTTPS on.
    #[arg(long, env = "NODEMGR_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,
    /// PEM certificate chain served (read again when the file changes).
    #[arg(long, value_name = "FILE")]
    pub tls_cert_file: PathBuf,
    /// PEM private key of the certificate.
    #[arg(long, value_name = "FILE")]
    pub tls_key_file: PathBuf,
    /// PEM CA that signed the certificate (cert-manager's `ca.crt`), written into the
    /// caBundles; without it the served chain is used (a self-signed certificate).
    #[arg(long, value_name = "FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// ValidatingWebhookConfiguration whose caBundle to keep current (repeatable; none to
    /// leave caBundles to someone else, e.g. cert-manager's CA injector).
    #[arg(long = "ca-bundle-webhook-configuration", value_name = "NAME")]
    pub ca_bundle_webhook_configurations: Vec<String>,
    /// CRD whose conversion webhook caBundle to keep current (repeatable).
    #[arg(long = "ca-bundle-crd", value_name = "NAME")]
    pub ca_bundle_crds: Vec<String>,
    /// How often the caBundles are compared with the CA.
    #[arg(long, default_value = "60", value_name = "SECONDS")]
    pub ca_bundle_period_seconds: u64,
    /// How long other CAs stay in a caBundle beside this replica's once it is there: during a
    /// certificate rotation, replicas whose Secret files the kubelet has not refreshed yet still
    /// serve the old certificate (keep it above the kubelet's sync period).
    #[arg(long, default_value = "600", value_name = "SECONDS")]
    pub ca_bundle_grace_seconds: u64,
    /// Cluster settings the rules depend on.
    #[command(flatten)]
    pub cluster: SettingsFlags,
    /// podSubnetNodeCIDRPrefix of the cluster (warning when kubelet.maxPods exceeds it).
    #[arg(long, value_name = "PREFIX", value_parser = clap::value_parser!(u8).range(0..=32))]
    pub pod_subnet_node_cidr_prefix: Option<u8>,
    /// ConfigMap `NAMESPACE/NAME` overriding the settings flags key by key
    /// (customTolerationKeys, zones, clusterPrefixLen, podSubnetNodeCIDRPrefix).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub settings_config_map: Option<String>,
    /// Secret `NAMESPACE/NAME` holding the provider cluster configuration (its nodeGroups make
    /// old `Hybrid` groups CloudPermanent).
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        default_value = "kube-system/d8-provider-cluster-configuration"
    )]
    pub provider_cluster_configuration_secret: String,
}

fn namespaced(flag: &str, value: &str) -> anyhow::Result<(String, String)> {
    parse_namespaced_name(flag, value).map_err(|e| anyhow::anyhow!(e))
}

impl Config {
    /// The settings source the flags describe.
    ///
    /// # Errors
    /// `--settings-config-map` is not `NAMESPACE/NAME`.
    pub fn settings(&self) -> anyhow::Result<SettingsSource> {
        Ok(SettingsSource {
            flags: Settings {
                validation: self.cluster.context(),
                pod_subnet_node_cidr_prefix: self.pod_subnet_node_cidr_prefix,
            },
            config_map: self
                .settings_config_map
                .as_deref()
                .map(|v| namespaced("settings-config-map", v))
                .transpose()?,
        })
    }
}

/// A webhook server serving in the background.
pub struct Running {
    /// `https://IP:PORT` it serves on.
    pub url: String,
    /// The CA to trust for it (the caBundle), PEM.
    pub ca_pem: String,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops accepting connections and waits for the accept loop to end.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Serves the webhook on `listener` with `certificate`, deciding reviews with `source`.
/// `ca_pem` is the CA to report (the served chain when `None`).
///
/// # Errors
/// The listener has no local address.
pub fn start(
    listener: TcpListener,
    certificate: Arc<ReloadingCertificate>,
    ca_pem: Option<String>,
    source: Arc<dyn ClusterSource>,
) -> std::io::Result<Running> {
    let address = listener.local_addr()?;
    let ca_pem = ca_pem.unwrap_or_else(|| certificate.chain_pem());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(tls::serve_tls(
        listener,
        certificate,
        reviews::router(source),
        stopped,
    ));
    Ok(Running {
        url: format!("https://{address}"),
        ca_pem,
        stop,
        task,
    })
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// Runs `nodemgr-webhook` until SIGTERM or Ctrl-C.
///
/// # Errors
/// Bad flags, unreadable certificate files, no Kubernetes client configuration, or the
/// address cannot be bound.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let settings = config.settings()?;
    let provider_secret = Some(namespaced(
        "provider-cluster-configuration-secret",
        &config.provider_cluster_configuration_secret,
    )?);
    let certificate = Arc::new(ReloadingCertificate::new(
        config.tls_cert_file.clone(),
        config.tls_key_file.clone(),
    )?);
    let client = kube::Client::try_default()
        .await
        .context("failed to configure the Kubernetes client (in-cluster or KUBECONFIG)")?;
    let source = Arc::new(KubeSource {
        client: client.clone(),
        settings,
        provider_secret,
    });
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("failed to listen on {}", config.listen))?;
    let ca_file = config.tls_ca_file.clone();
    let ca_certificate = Arc::clone(&certificate);
    let read_ca = move || {
        match &ca_file {
        Some(path) => std::fs::read_to_string(path).unwrap_or_else(|error| {
            tracing::warn!(%error, path = %path.display(), "cannot read the CA file; using the served chain");
            ca_certificate.chain_pem()
        }),
        None => ca_certificate.chain_pem(),
    }
    };
    let running = start(listener, certificate, Some(read_ca()), source)?;
    tracing::info!(url = %running.url, "serving admission and conversion reviews");
    let targets = CaBundleTargets {
        webhook_configurations: config.ca_bundle_webhook_configurations.clone(),
        crds: config.ca_bundle_crds.clone(),
    };
    let (stop_keeper, keeper_stopped) = watch::channel(false);
    let keeper =
        (!targets.webhook_configurations.is_empty() || !targets.crds.is_empty()).then(|| {
            tokio::spawn(ca_bundle::keep(
                client,
                targets,
                read_ca,
                Duration::from_secs(config.ca_bundle_period_seconds.max(1)),
                Duration::from_secs(config.ca_bundle_grace_seconds),
                keeper_stopped,
            ))
        });
    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_keeper.send(true);
    if let Some(keeper) = keeper {
        let _ = keeper.await;
    }
    running.shutdown().await;
    Ok(())
}
