//! `node-manager`, the controller manager: the NodeGroup status, node template, update,
//! fencing and static instance controllers of `nodemgr-k8s` against a cluster (kubeconfig or in-cluster config),
//! one replica active at a time under a Lease, with `/metrics` (classic text or OpenMetrics, as
//! the scraper asks; HTTPS and Kubernetes authorization with `--metrics-auth kubernetes`), `/healthz` and
//! `/readyz` on one address, and a graceful shutdown on SIGTERM or Ctrl-C (controllers stop,
//! the Lease is released).
//!
//! Settings come from flags and, optionally, a YAML file (`--config`); a flag given on the
//! command line wins over the file, the file over the defaults:
//!
//! ```yaml
//! controllers: [status, template, update, fencing]
//! resync: 30s          # status and template resync
//! updatePeriod: 10s    # update controller safety-net period (it runs on watch events and at drain deadlines)
//! fencingPeriod: 5s
//! fencingTimeout: 95s  # deadline of groups without fencing.watchdog.timeout; derived when unset
//! fencingKubeletStaleAfter: 30s # the fencing agents' --kubelet-stale-after (must match)
//! fencingMargin: 5s    # added to watchdog timeout + kubelet staleness (see docs/fencing.md)
//! stormThreshold: 0.55 # share of a zone's fenced nodes silent together that fences nobody
//! staticPeriod: 10s    # static instance controller period
//! ```
//!
//! The cluster context nodes join with (static bootstrap scripts, cloud machines' user data)
//! comes from the cluster, as bashible-apiserver reads it: the API endpoints from the
//! `default/kubernetes` EndpointSlices, the CA from the `kube-root-ca.crt` ConfigMap and the
//! rest from the `bashible-apiserver-settings` ConfigMap, both in
//! `--cluster-context-namespace` (bashible-apiserver's `--namespace`). It is watched, and read
//! from the watches' stores at each use, so a change reaches the next script without a
//! restart (`nodemgr_k8s::bashible_sources::ContextSource`). `--static-cluster-context FILE`
//! (YAML: `apiEndpoints`, `caCert`, `kubernetesVersion`, …, bashible's `ClusterContext`)
//! overrides it, read once at start. The static instance controller (bootstrap and cleanup
//! of StaticInstances over SSH) therefore runs by default, like the others.
//!
//! Bootstrap tokens: the `bootstrap-tokens` controller keeps one token per NodeGroup in
//! `kube-system` (`--bootstrap-token-ttl`, `--bootstrap-token-renew-margin`), and static and
//! cloud nodes join with their group's token. `--bootstrap-token-file FILE` (or
//! `$NODEMGR_BOOTSTRAP_TOKEN`) overrides it with one token for every group. The `csr`
//! controller approves kubelet serving certificates (see `docs/bootstrap.md`).

pub mod machines;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::duration_flag as duration;
use crate::settings_flags::SettingsFlags;
use anyhow::{Context as _, bail};
use clap::Parser;
use nodemgr_cloud::{Ec2Client, Ec2Config};
use nodemgr_core::bashible::{BootstrapToken, ClusterContext};
use nodemgr_core::ports::cloud::CloudApi;
use nodemgr_core::static_nodes::StaticConfig;
use nodemgr_k8s::bashible_sources::{ClusterContextWatch, ContextSource};
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers::bootstrap_tokens::{
    BootstrapTokenController, CurrentTokens, TokenSettings, TokenSource,
};
use nodemgr_k8s::controllers::machines::{Bootstrap, MachineController, MachineSettings};
use nodemgr_k8s::controllers::static_instances::{RenderRoots, StaticController, StaticSettings};
use nodemgr_k8s::controllers::{self, Settings};
use nodemgr_k8s::leader::{LeaderConfig, LeaderElector, Role};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_k8s::serve::{self, Health};
use nodemgr_k8s::supervisor::TaskGroup;
use nodemgr_ssh::SshShell;
use serde::Deserialize;
use tokio::sync::watch;

/// How often the API server is probed for `/readyz` (not ready while it does not answer).
const API_PROBE_PERIOD: Duration = Duration::from_secs(10);

/// The names `--controllers` accepts.
pub const CONTROLLERS: [&str; 9] = [
    "status",
    "template",
    "update",
    "fencing",
    "node-duties",
    "static",
    "machines",
    "bootstrap-tokens",
    "csr",
];

/// Flags of `node-manager`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "node-manager",
    version,
    about = "The nodemgr controller manager"
)]
pub struct Config {
    /// Kubeconfig to use; without it the in-cluster configuration (then KUBECONFIG,
    /// ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// YAML settings file (controllers, periods, fencing); flags win over it.
    #[arg(long = "config", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// Controllers to run, comma-separated: status, template, update, fencing, node-duties,
    /// static, machines, bootstrap-tokens, csr [default: all; machines only when configured].
    #[arg(long, value_delimiter = ',')]
    pub controllers: Option<Vec<String>>,
    /// Create the `master` NodeGroup with this node type when the cluster has none (checked
    /// every resync): Static (bare metal) or CloudPermanent (a cloud) [default: create none].
    #[arg(long, value_name = "TYPE", value_parser = ["Static", "CloudPermanent"])]
    pub create_master_node_group: Option<String>,
    /// Address of /metrics, /healthz and /readyz (port 0 picks one; the address is logged).
    #[arg(long, default_value = "127.0.0.1:9650")]
    pub metrics_address: SocketAddr,
    /// Who may scrape /metrics, over HTTP or HTTPS.
    #[command(flatten)]
    pub metrics_serve: crate::observability::server::MetricsServeArgs,
    /// Namespace of the leader-election Lease.
    #[arg(long, default_value = "nodemgr-system")]
    pub leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "node-manager")]
    pub leader_election_name: String,
    /// This replica's identity in the Lease [default: $POD_NAME, else host name and pid].
    #[arg(long)]
    pub identity: Option<String>,
    /// How long the leader Lease stays valid without renewal [default: 15s].
    #[arg(long, value_parser = duration)]
    pub lease_duration: Option<Duration>,
    /// How often the leader renews the Lease and the others try to take it (they add up to
    /// 50 % jitter); shorter than --renew-deadline [default: 2s].
    #[arg(long, value_parser = duration)]
    pub renew_period: Option<Duration>,
    /// How long the leader keeps acting when it cannot renew the Lease; shorter than
    /// --lease-duration [default: two thirds of it, 10s for the default 15s].
    #[arg(long, value_parser = duration)]
    pub renew_deadline: Option<Duration>,
    /// Run without leader election (one replica only!).
    #[arg(long)]
    pub no_leader_election: bool,
    /// Resync period of the status and template controllers [default: 30s].
    #[arg(long, value_parser = duration)]
    pub resync: Option<Duration>,
    /// Safety-net period of the update controller, which runs when a watch delivers a change
    /// it decides on and at its drains' deadlines [default: 10s].
    #[arg(long, value_parser = duration)]
    pub update_period: Option<Duration>,
    /// Period of the fencing controller [default: 5s].
    #[arg(long, value_parser = duration)]
    pub fencing_period: Option<Duration>,
    /// Deadline (time without a heartbeat) that fences a node of a group without its own
    /// watchdog timeout; refused below watchdog timeout + kubelet staleness + margin
    /// [default: derived, 95s].
    #[arg(long, value_parser = duration)]
    pub fencing_timeout: Option<Duration>,
    /// The fencing agents' `--kubelet-stale-after` (the deadline is derived from it)
    /// [default: 30s].
    #[arg(long, value_parser = duration)]
    pub fencing_kubelet_stale_after: Option<Duration>,
    /// Margin added to the derived fencing deadline [default: 5s].
    #[arg(long, value_parser = duration)]
    pub fencing_margin: Option<Duration>,
    /// Share of a zone's fenced nodes silent together that makes the storm guard fence
    /// nobody there [default: 0.55].
    #[arg(long)]
    pub storm_threshold: Option<f64>,
    /// Period of the static instance controller [default: 10s].
    #[arg(long, value_parser = duration)]
    pub static_period: Option<Duration>,
    /// YAML file of the cluster context new nodes join with (apiEndpoints, caCert, …), read
    /// once; overrides the context read from the cluster.
    #[arg(long, value_name = "FILE")]
    pub static_cluster_context: Option<PathBuf>,
    /// Namespace of the ConfigMaps `kube-root-ca.crt` and `bashible-apiserver-settings` the
    /// cluster context is read from (bashible-apiserver's --namespace).
    #[arg(long, value_name = "NAMESPACE", default_value = nodemgr_core::model::keys::NAMESPACE)]
    pub cluster_context_namespace: String,
    /// Render each StaticInstance's scripts for `DIR/<instance>` instead of `/` (tests: the
    /// scripts then change nothing outside that directory on the machine).
    #[arg(long, value_name = "DIR", hide = true)]
    pub static_test_roots: Option<PathBuf>,
    /// File holding one bootstrap token (`<id>.<secret>`) every group's nodes join with,
    /// instead of each group's own token [default: $NODEMGR_BOOTSTRAP_TOKEN, else per group].
    #[arg(long, value_name = "FILE")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// Lifetime of the per-group bootstrap tokens [default: 4h].
    #[arg(long, value_parser = duration)]
    pub bootstrap_token_ttl: Option<Duration>,
    /// A group's token is renewed once it has this little left [default: 3h].
    #[arg(long, value_parser = duration)]
    pub bootstrap_token_renew_margin: Option<Duration>,
    /// The per-group tokens the bootstrap-tokens controller publishes (not a flag).
    #[arg(skip)]
    pub current_tokens: CurrentTokens,
    /// YAML file of the cloud's zones and instance classes (see `node_manager::machines`);
    /// turns the machine controller of CloudEphemeral groups on.
    #[arg(long, value_name = "FILE")]
    pub machines_config: Option<PathBuf>,
    /// Period of the machine controller [default: 10s].
    #[arg(long, value_parser = duration)]
    pub machines_period: Option<Duration>,
    /// Where the EC2 connection comes from: `env` (AWS_* variables) or `secret` (the cloud
    /// provider Secret kube-system/d8-node-manager-cloud-provider).
    #[arg(long, default_value = "env", value_parser = ["env", "secret"])]
    pub cloud_credentials: String,
    /// Cluster settings the status controller validates groups by (as nodemgr-webhook).
    #[command(flatten)]
    pub cluster: SettingsFlags,
    /// ConfigMap `NAMESPACE/NAME` overriding the cluster settings flags key by key
    /// (customTolerationKeys, zones, clusterPrefixLen), as nodemgr-webhook's.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub settings_config_map: Option<String>,
}

/// The settings file (see the module docs).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileSettings {
    controllers: Option<Vec<String>>,
    resync: Option<String>,
    update_period: Option<String>,
    fencing_period: Option<String>,
    fencing_timeout: Option<String>,
    fencing_kubelet_stale_after: Option<String>,
    fencing_margin: Option<String>,
    storm_threshold: Option<f64>,
    static_period: Option<String>,
}

impl Config {
    fn file(&self) -> anyhow::Result<FileSettings> {
        Ok(match &self.config_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the settings file {}", path.display()))?;
                serde_saphyr::from_str::<FileSettings>(&text).map_err(|e| {
                    anyhow::anyhow!(
                        "settings file {}: {e} (see `node-manager --help`)",
                        path.display()
                    )
                })?
            }
            None => FileSettings::default(),
        })
    }

    fn chosen_controllers(&self, file: &FileSettings) -> anyhow::Result<Option<Vec<String>>> {
        let chosen = self.controllers.clone().or(file.controllers.clone());
        for name in chosen.iter().flatten() {
            if !CONTROLLERS.contains(&name.as_str()) {
                bail!(
                    "unknown controller {name:?}: choose from {}",
                    CONTROLLERS.join(", ")
                );
            }
        }
        Ok(chosen)
    }

    /// Whether `name` runs: named in the chosen controllers, or none chosen.
    fn runs(&self, file: &FileSettings, name: &str) -> anyhow::Result<bool> {
        Ok(self
            .chosen_controllers(file)?
            .is_none_or(|c| c.iter().any(|n| n == name)))
    }

    /// The cluster context of `--static-cluster-context`, when given.
    ///
    /// # Errors
    /// An unreadable or invalid file.
    pub fn fixed_cluster_context(&self) -> anyhow::Result<Option<ClusterContext>> {
        let Some(path) = &self.static_cluster_context else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the cluster context {}", path.display()))?;
        ClusterContext::from_yaml(&text)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("cluster context {}: {e}", path.display()))
    }

    /// The static instance controller's settings, or `None` when it is off; nodes join with
    /// the context of `cluster` (read at each bootstrap).
    ///
    /// # Errors
    /// `static` chosen without a bootstrap token source, an unreadable or invalid token.
    pub fn static_settings(
        &self,
        cluster: &ContextSource,
    ) -> anyhow::Result<Option<StaticSettings>> {
        let file = self.file()?;
        if !self.runs(&file, "static")? {
            return Ok(None);
        }
        let bootstrap_tokens = self.token_source(&file)?;
        let period = match self.static_period {
            Some(d) => d,
            None => file
                .static_period
                .as_deref()
                .map(|v| {
                    duration(v).map_err(|e| anyhow::anyhow!("settings file: staticPeriod: {e}"))
                })
                .transpose()?
                .unwrap_or(Duration::from_secs(10)),
        };
        Ok(Some(StaticSettings {
            period,
            config: StaticConfig::default(),
            cluster: cluster.clone(),
            bootstrap_tokens,
            roots: match &self.static_test_roots {
                Some(dir) => RenderRoots::PerInstance(dir.clone()),
                None => RenderRoots::Host,
            },
            connect_timeout: nodemgr_core::ports::remote_shell::DEFAULT_CONNECT_TIMEOUT,
        }))
    }

    /// The machine controller's settings, or `None` when it is off. New machines bootstrap
    /// with the context of `cluster` and their group's token, when nodes have a token source
    /// (else their user data is empty).
    ///
    /// # Errors
    /// `machines` chosen without `--machines-config`, an invalid machines config.
    pub fn machine_settings(
        &self,
        cluster: &ContextSource,
    ) -> anyhow::Result<Option<MachineSettings>> {
        let file = self.file()?;
        let chosen = self.chosen_controllers(&file)?;
        let named = chosen
            .as_ref()
            .is_some_and(|c| c.iter().any(|n| n == "machines"));
        if chosen.is_some() && !named {
            return Ok(None);
        }
        let Some(path) = &self.machines_config else {
            if named {
                bail!(
                    "the machines controller needs --machines-config FILE (zones and instance classes)"
                );
            }
            return Ok(None);
        };
        let mut settings = machines::settings(
            path,
            self.machines_period.unwrap_or(Duration::from_secs(10)),
        )?;
        settings.bootstrap = match self.token_source(&file) {
            Ok(tokens) => Some(Bootstrap {
                cluster: cluster.clone(),
                tokens,
            }),
            Err(error) => {
                tracing::warn!(%error, "new machines get no user data");
                None
            }
        };
        Ok(Some(settings))
    }

    /// The one token of `--bootstrap-token-file` or `$NODEMGR_BOOTSTRAP_TOKEN`, if given.
    ///
    /// # Errors
    /// An unreadable file or a malformed token.
    pub fn bootstrap_token_override(&self) -> anyhow::Result<Option<BootstrapToken>> {
        let token = match &self.bootstrap_token_file {
            Some(path) => std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the bootstrap token {}", path.display()))?,
            None => match std::env::var("NODEMGR_BOOTSTRAP_TOKEN") {
                Ok(token) => token,
                Err(_) => return Ok(None),
            },
        };
        BootstrapToken::new(token.trim())
            .map(Some)
            .map_err(|e| anyhow::anyhow!("bootstrap token: {e}"))
    }

    /// Where nodes' bootstrap tokens come from: the override, else each group's own token.
    fn token_source(&self, file: &FileSettings) -> anyhow::Result<TokenSource> {
        if let Some(token) = self.bootstrap_token_override()? {
            return Ok(TokenSource::Fixed(token));
        }
        if self.token_settings_from(file)?.is_none() {
            bail!(
                "nodes need bootstrap tokens: run the bootstrap-tokens controller (name it in \
                 --controllers) or pass --bootstrap-token-file FILE"
            );
        }
        Ok(TokenSource::PerGroup(self.current_tokens.clone()))
    }

    /// The bootstrap token controller's settings, or `None` when it is off.
    ///
    /// # Errors
    /// An unknown controller, a renewal margin not shorter than the lifetime.
    pub fn token_settings(&self) -> anyhow::Result<Option<TokenSettings>> {
        self.token_settings_from(&self.file()?)
    }

    fn token_settings_from(&self, file: &FileSettings) -> anyhow::Result<Option<TokenSettings>> {
        if let Some(chosen) = self.chosen_controllers(file)?
            && !chosen.iter().any(|n| n == "bootstrap-tokens")
        {
            return Ok(None);
        }
        let mut settings = TokenSettings::default();
        if let Some(ttl) = self.bootstrap_token_ttl {
            settings.policy.ttl = ttl;
        }
        if let Some(margin) = self.bootstrap_token_renew_margin {
            settings.policy.renew_margin = margin;
        }
        settings
            .policy
            .validate()
            .map_err(|e| anyhow::anyhow!("--bootstrap-token-renew-margin: {e}"))?;
        Ok(Some(settings))
    }

    /// Whether the kubelet serving certificate controller runs.
    ///
    /// # Errors
    /// An unreadable settings file or an unknown controller.
    pub fn csr_enabled(&self) -> anyhow::Result<bool> {
        Ok(self
            .chosen_controllers(&self.file()?)?
            .is_none_or(|c| c.iter().any(|n| n == "csr")))
    }

    /// The controller settings: flags, then the file, then the defaults.
    ///
    /// # Errors
    /// An unreadable or invalid settings file, an unknown controller, a threshold outside 0..=1.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let file = self.file()?;
        let from_file = |name: &str, value: &Option<String>| -> anyhow::Result<Option<Duration>> {
            value
                .as_deref()
                .map(|v| duration(v).map_err(|e| anyhow::anyhow!("settings file: {name}: {e}")))
                .transpose()
        };
        let mut settings = Settings::default();
        if let Some(names) = self.chosen_controllers(&file)? {
            let has = |n: &str| names.iter().any(|x| x == n);
            settings.status = has("status");
            settings.template = has("template");
            settings.update = has("update");
            settings.fencing = has("fencing");
            settings.node_duties = has("node-duties");
        }
        settings.master_group = match self.create_master_node_group.as_deref() {
            Some("Static") => Some(nodemgr_core::model::NodeType::Static),
            Some("CloudPermanent") => Some(nodemgr_core::model::NodeType::CloudPermanent),
            Some(other) => {
                bail!("--create-master-node-group {other:?}: choose Static or CloudPermanent")
            }
            None => None,
        };
        if let Some(d) = self.resync.or(from_file("resync", &file.resync)?) {
            settings.resync = d;
        }
        if let Some(d) = self
            .update_period
            .or(from_file("updatePeriod", &file.update_period)?)
        {
            settings.update_period = d;
        }
        if let Some(d) = self
            .fencing_period
            .or(from_file("fencingPeriod", &file.fencing_period)?)
        {
            settings.fencing_period = d;
        }
        if let Some(d) = self
            .fencing_timeout
            .or(from_file("fencingTimeout", &file.fencing_timeout)?)
        {
            settings.fencing_config.default_timeout = Some(d);
        }
        if let Some(d) = self.fencing_kubelet_stale_after.or(from_file(
            "fencingKubeletStaleAfter",
            &file.fencing_kubelet_stale_after,
        )?) {
            settings.fencing_config.agent.kubelet_stale_after = d;
        }
        if let Some(d) = self
            .fencing_margin
            .or(from_file("fencingMargin", &file.fencing_margin)?)
        {
            settings.fencing_config.margin = d;
        }
        if let Some(t) = self.storm_threshold.or(file.storm_threshold) {
            if !(0.0..=1.0).contains(&t) {
                bail!("stormThreshold {t} is not a share between 0 and 1");
            }
            settings.fencing_config.storm_threshold = t;
        }
        settings.cluster_settings = nodemgr_k8s::settings::SettingsSource {
            flags: nodemgr_k8s::settings::Settings {
                validation: self.cluster.context(),
                pod_subnet_node_cidr_prefix: None,
            },
            config_map: self
                .settings_config_map
                .as_deref()
                .map(|v| nodemgr_k8s::settings::parse_namespaced_name("settings-config-map", v))
                .transpose()
                .map_err(|e| anyhow::anyhow!(e))?,
        };
        settings
            .fencing_config
            .validate()
            .context("the fencing deadline would let pods be deleted before the watchdog fired")?;
        Ok(settings)
    }

    /// The leader-election settings (Lease, identity, timing).
    ///
    /// # Errors
    /// Timing that breaks the election's guarantees: a lease duration under a second, a renew
    /// deadline not shorter than the lease duration, a renew period not shorter than the renew
    /// deadline (see `nodemgr_k8s::leader`).
    pub fn leader_config(&self) -> anyhow::Result<LeaderConfig> {
        let mut leader = LeaderConfig::new(
            &self.leader_election_namespace,
            &self.leader_election_name,
            &self.identity(),
        );
        if let Some(d) = self.lease_duration {
            leader.lease_duration = d;
            leader.renew_deadline = d.mul_f64(2.0 / 3.0);
        }
        if let Some(d) = self.renew_deadline {
            leader.renew_deadline = d;
        }
        if let Some(d) = self.renew_period {
            leader.retry_period = d;
        }
        leader.validate().map_err(|e| {
            anyhow::anyhow!(
                "{e}; set --lease-duration > --renew-deadline > --renew-period (now {:?}, {:?}, {:?})",
                leader.lease_duration,
                leader.renew_deadline,
                leader.retry_period
            )
        })?;
        Ok(leader)
    }

    fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| {
                let host = std::fs::read_to_string("/etc/hostname")
                    .map(|h| h.trim().to_owned())
                    .unwrap_or_else(|_| "node-manager".into());
                format!("{host}-{}", std::process::id())
            })
    }
}

/// Runs node-manager until `shutdown` completes. Returns the metrics address through
/// `bound` as soon as it listens (tests and the demo use port 0).
///
/// # Errors
/// Invalid settings, no cluster configuration, the metrics address taken.
pub async fn run(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
    bound: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) -> anyhow::Result<()> {
    let settings = config.settings()?;
    let tls = config.metrics_serve.tls()?;
    let token_settings = config.token_settings()?;
    let csr_enabled = config.csr_enabled()?;
    let current_tokens = config.current_tokens.clone();
    // Settings are checked before anything connects; the context source is filled in below.
    let fixed_context = config.fixed_cluster_context()?;
    let given = ContextSource::Fixed(fixed_context.clone().unwrap_or_default());
    let mut static_settings = config.static_settings(&given)?;
    let mut machine_settings = config.machine_settings(&given)?;
    let leader = if config.no_leader_election {
        None
    } else {
        Some(config.leader_config()?)
    };
    let client = client(config.kubeconfig.as_deref()).await.context(
        "no Kubernetes configuration: pass --kubeconfig, set KUBECONFIG, or run in a pod",
    )?;
    let renders_scripts = static_settings.is_some()
        || machine_settings
            .as_ref()
            .is_some_and(|m| m.bootstrap.is_some());
    if fixed_context.is_none() && renders_scripts {
        tracing::info!(
            namespace = %config.cluster_context_namespace,
            "new nodes join with the cluster context read from the cluster"
        );
        let context = ContextSource::Cluster(Arc::new(ClusterContextWatch::start(
            &client,
            &config.cluster_context_namespace,
        )));
        if let Some(s) = static_settings.as_mut() {
            s.cluster = context.clone();
        }
        if let Some(b) = machine_settings.as_mut().and_then(|m| m.bootstrap.as_mut()) {
            b.cluster = context;
        }
    }
    let cloud: Option<Arc<dyn CloudApi>> = match &machine_settings {
        None => {
            tracing::info!("machine controller off (no --machines-config)");
            None
        }
        Some(_) => Some(Arc::new(
            ec2_client(&config.cloud_credentials, &client).await?,
        )),
    };
    let metrics = Metrics::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (role_tx, role_rx) = watch::channel(Role::Standby);
    let (reachable_tx, reachable_rx) = watch::channel(false);
    let listener = serve::bind(config.metrics_address)
        .await
        .context("--metrics-address")?;
    let address = listener.local_addr().context("no local address")?;
    let router = config.metrics_serve.protect(
        serve::router(
            metrics.clone(),
            Health {
                api_reachable: reachable_rx,
                role: role_rx,
            },
        ),
        &client,
    );
    let mut server_stop = stop_rx.clone();
    tokio::spawn(async move {
        let stopped = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        if let Err(error) =
            crate::observability::server::serve(listener, router, tls, stopped).await
        {
            tracing::error!(%error, "the metrics server stopped");
        }
    });
    tokio::spawn(serve::probe_api(
        client.clone(),
        API_PROBE_PERIOD,
        reachable_tx,
        stop_rx.clone(),
    ));
    tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    if let Some(bound) = bound {
        let _ = bound.send(address);
    }
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let controller_metrics = metrics.clone();
    let start = move |stop: watch::Receiver<bool>| {
        let client = client.clone();
        let settings = settings.clone();
        let static_settings = static_settings.clone();
        let machine_settings = machine_settings.clone();
        let current_tokens = current_tokens.clone();
        let cloud = cloud.clone();
        let metrics = controller_metrics.clone();
        async move {
            let (cluster, _watches) = KubeCluster::start(client.clone(), "node-manager");
            // One unit: when any controller ends by itself, the others stop and the elector
            // restarts them or gives up the Lease (see `nodemgr_k8s::leader`).
            let mut group = TaskGroup::new();
            let inner = group.stop_signal();
            if let Some(s) = token_settings {
                let controller = BootstrapTokenController::new(
                    client.clone(),
                    s,
                    current_tokens,
                    metrics.clone(),
                );
                group.spawn("bootstrap-tokens", controller.run(inner.clone()));
            }
            if csr_enabled {
                group.spawn(
                    "csr",
                    nodemgr_k8s::controllers::csr::run(
                        client.clone(),
                        metrics.clone(),
                        inner.clone(),
                    ),
                );
            }
            if let Some(s) = static_settings {
                let controller = StaticController::new(
                    cluster.clone(),
                    Arc::new(SshShell::new()),
                    s,
                    metrics.clone(),
                );
                group.spawn("static", controller.run(inner.clone()));
            }
            if let (Some(s), Some(cloud)) = (machine_settings, cloud) {
                let controller = MachineController::new(cluster.clone(), cloud, s, metrics.clone());
                group.spawn("machines", controller.run(inner.clone()));
            }
            let cluster_controllers = controllers::run(cluster, settings, metrics, inner.clone());
            group.spawn("controllers", async move {
                if let Err(error) = cluster_controllers.await {
                    // The group sees this task return and names it; say which controller it was.
                    tracing::error!(%error, "a cluster controller ended");
                }
            });
            group.run(stop).await
        }
    };
    if let Some(leader) = leader {
        let elector = LeaderElector::new(
            nodemgr_k8s::cluster::client(config.kubeconfig.as_deref())
                .await
                .context("no Kubernetes configuration for leader election")?,
            leader,
        );
        elector.run(stop_rx, &metrics, &role_tx, start).await?;
    } else {
        tracing::warn!("leader election is off: run a single replica");
        let _ = role_tx.send(Role::Leader);
        // Without an election there is nobody to hand over to: a failure ends the process
        // and the kubelet restarts it.
        start(stop_rx).await?;
    }
    Ok(())
}

/// The EC2 client, its connection from the AWS environment or the cloud provider Secret.
async fn ec2_client(source: &str, client: &kube::Client) -> anyhow::Result<Ec2Client> {
    let config = if source == "secret" {
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(
            client.clone(),
            nodemgr_cloud::config::CLOUD_PROVIDER_SECRET_NAMESPACE,
        );
        let secret = secrets
            .get(nodemgr_cloud::config::CLOUD_PROVIDER_SECRET)
            .await
            .with_context(|| {
                format!(
                    "cannot read the cloud provider Secret {}/{}",
                    nodemgr_cloud::config::CLOUD_PROVIDER_SECRET_NAMESPACE,
                    nodemgr_cloud::config::CLOUD_PROVIDER_SECRET
                )
            })?;
        let data = secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        Ec2Config::from_secret(&data)?
    } else {
        Ec2Config::from_env()?
    };
    Ok(Ec2Client::new(config)?)
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn termination() {
    serve::shutdown_signal().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Config {
        Config::parse_from(std::iter::once("node-manager").chain(args.iter().copied()))
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("settings.yaml");
        std::fs::write(
            &file,
            "controllers: [status, update]\nupdatePeriod: 2s\nresync: 7s\n",
        )
        .unwrap();
        let path = file.to_str().unwrap();
        let s = parse(&["--config", path, "--update-period", "1s"])
            .settings()
            .unwrap();
        assert!(s.status && s.update && !s.template && !s.fencing);
        assert_eq!(s.update_period, Duration::from_secs(1));
        assert_eq!(s.resync, Duration::from_secs(7));
        assert_eq!(s.fencing_period, Duration::from_secs(5));
        let s = parse(&["--config", path, "--controllers", "fencing"])
            .settings()
            .unwrap();
        assert!(s.fencing && !s.status);
    }

    #[test]
    fn lease_timing_flags_are_checked() {
        let leader = parse(&["--identity=a", "--lease-duration=30s", "--renew-period=10s"])
            .leader_config()
            .unwrap();
        assert_eq!(leader.identity, "a");
        assert_eq!(leader.lease_duration, Duration::from_secs(30));
        assert_eq!(leader.retry_period, Duration::from_secs(10));
        assert_eq!(leader.renew_deadline, Duration::from_secs(20));
        let e = parse(&["--renew-period=20s"]).leader_config().unwrap_err();
        assert!(e.to_string().contains("--renew-period"), "{e}");
        let e = parse(&["--renew-deadline=15s"])
            .leader_config()
            .unwrap_err();
        assert!(e.to_string().contains("renew deadline"), "{e}");
        let e = parse(&["--lease-duration=500ms", "--renew-period=100ms"])
            .leader_config()
            .unwrap_err();
        assert!(e.to_string().contains("under 1s"), "{e}");
    }

    proptest::proptest! {
        /// Every numeric flag, given an extreme value (huge digits, bounds, exponents, signs,
        /// unicode, with any unit), is parsed into settings or refused with a message naming
        /// it; nothing panics.
        #[test]
        fn extreme_flag_values_are_parsed_or_refused_by_name(
            flag in proptest::sample::select(vec![
                "--lease-duration", "--renew-period", "--renew-deadline", "--resync",
                "--update-period", "--fencing-period", "--fencing-timeout", "--storm-threshold",
                "--static-period", "--machines-period",
            ]),
            number in proptest::prop_oneof![
                proptest::sample::select(vec![
                    i64::MAX.to_string(), i64::MIN.to_string(), u64::MAX.to_string(),
                    "18446744073709551616".to_owned(), "0".to_owned(), "-1".to_owned(),
                    "NaN".to_owned(), "inf".to_owned(), "1e308".to_owned(), String::new(),
                ]),
                "[0-9]{15,60}",
                "[0-9]{1,3}\\.[0-9]{1,30}",
                "\\PC{0,10}",
            ],
            unit in proptest::sample::select(vec!["", "s", "ms", "m", "h", "h1s", "%", "e9"]),
        ) {
            let arg = format!("{flag}={number}{unit}");
            match Config::try_parse_from(["node-manager", "--identity=a", arg.as_str()]) {
                Ok(config) => {
                    match config.settings() {
                        Ok(_) => {}
                        // Refused settings name the setting in the error's chain.
                        Err(e) => proptest::prop_assert!(
                            ["stormThreshold", "fencingTimeout"]
                                .iter()
                                .any(|key| format!("{e:#}").contains(key)),
                            "{arg}: {e:#}"
                        ),
                    }
                    if let Err(e) = config.leader_config() {
                        proptest::prop_assert!(e.to_string().contains("--"), "{arg}: {e}");
                    }
                }
                Err(e) => {
                    let message = e.to_string();
                    proptest::prop_assert!(message.contains(flag), "{arg}: {message}");
                }
            }
        }
    }

    #[test]
    fn bad_settings_say_what_is_wrong() {
        let e = parse(&["--controllers", "status,autoscaler"])
            .settings()
            .unwrap_err();
        assert!(
            e.to_string().contains("unknown controller \"autoscaler\""),
            "{e}"
        );
        let e = parse(&["--storm-threshold", "1.5"]).settings().unwrap_err();
        assert!(e.to_string().contains("between 0 and 1"), "{e}");
        let e = parse(&["--fencing-timeout", "60s"]).settings().unwrap_err();
        assert!(
            format!("{e:#}").contains("fencingTimeout 60s is shorter than 95s"),
            "{e:#}"
        );
        let s = parse(&["--fencing-timeout", "2m", "--fencing-margin", "1s"])
            .settings()
            .unwrap();
        assert_eq!(
            s.fencing_config.deadline_for(None),
            Duration::from_secs(120)
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("s.yaml");
        std::fs::write(&file, "updatPeriod: 2s\n").unwrap();
        let e = parse(&["--config", file.to_str().unwrap()])
            .settings()
            .unwrap_err();
        assert!(e.to_string().contains("updatPeriod"), "{e}");
    }

    #[test]
    fn bootstrap_tokens_are_per_group_unless_overridden() {
        let settings = parse(&[]).token_settings().unwrap().unwrap();
        assert_eq!(settings.policy.ttl, Duration::from_secs(4 * 3600));
        let settings = parse(&[
            "--bootstrap-token-ttl=10m",
            "--bootstrap-token-renew-margin=4m",
        ])
        .token_settings()
        .unwrap()
        .unwrap();
        assert_eq!(settings.policy.renew_margin, Duration::from_secs(240));
        let e = parse(&[
            "--bootstrap-token-ttl=1h",
            "--bootstrap-token-renew-margin=2h",
        ])
        .token_settings()
        .unwrap_err();
        assert!(
            e.to_string().contains("shorter than the token lifetime"),
            "{e}"
        );
        assert!(
            parse(&["--controllers", "status"])
                .token_settings()
                .unwrap()
                .is_none()
        );
        assert!(parse(&["--controllers", "csr"]).csr_enabled().unwrap());
        assert!(!parse(&["--controllers", "status"]).csr_enabled().unwrap());

        // Static nodes without an override join with their group's token, which needs the
        // controller.
        if std::env::var_os("NODEMGR_BOOTSTRAP_TOKEN").is_none() {
            let cluster = ContextSource::Fixed(ClusterContext::default());
            let settings = parse(&[]).static_settings(&cluster).unwrap().unwrap();
            let e = settings.bootstrap_tokens.for_group("worker").unwrap_err();
            assert!(e.to_string().contains("worker"), "{e}");
            let e = parse(&["--controllers", "static"])
                .static_settings(&cluster)
                .unwrap_err();
            assert!(e.to_string().contains("bootstrap-tokens"), "{e}");
        }
    }

    #[test]
    fn the_static_controller_runs_by_default_and_a_context_file_overrides_the_cluster() {
        let cluster = ContextSource::Fixed(ClusterContext::default());
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "abcdef.0123456789abcdef\n").unwrap();
        let token = token.to_str().unwrap();
        // No context file: on, with the context it is given (the cluster's, in `run`).
        let config = parse(&["--bootstrap-token-file", token]);
        assert!(config.fixed_cluster_context().unwrap().is_none());
        assert!(config.static_settings(&cluster).unwrap().is_some());
        assert_eq!(
            config.cluster_context_namespace,
            nodemgr_core::model::keys::NAMESPACE
        );

        let context = dir.path().join("context.yaml");
        std::fs::write(
            &context,
            "apiEndpoints: [\"10.0.0.1:6443\"]\ncaCert: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n",
        )
        .unwrap();
        let context = context.to_str().unwrap();
        let config = parse(&[
            "--static-cluster-context",
            context,
            "--bootstrap-token-file",
            token,
            "--static-period",
            "3s",
        ]);
        let fixed = config.fixed_cluster_context().unwrap().unwrap();
        assert_eq!(fixed.api_endpoints, ["10.0.0.1:6443"]);
        let settings = config
            .static_settings(&ContextSource::Fixed(fixed))
            .unwrap()
            .unwrap();
        assert_eq!(settings.period, Duration::from_secs(3));
        assert_eq!(settings.roots, RenderRoots::Host);
        assert_eq!(
            settings.cluster.current().unwrap().api_endpoints,
            ["10.0.0.1:6443"]
        );
        assert_eq!(
            settings
                .bootstrap_tokens
                .for_group("any")
                .map(|t| t.as_str().to_owned()),
            Ok("abcdef.0123456789abcdef".to_owned()),
            "the file overrides every group's token"
        );
        let roots = parse(&[
            "--bootstrap-token-file",
            token,
            "--static-test-roots",
            "/tmp/r",
        ])
        .static_settings(&cluster)
        .unwrap()
        .unwrap()
        .roots;
        assert_eq!(roots, RenderRoots::PerInstance("/tmp/r".into()));
        // Chosen controllers without static: off.
        assert!(
            parse(&[
                "--controllers",
                "status",
                "--static-cluster-context",
                context
            ])
            .static_settings(&cluster)
            .unwrap()
            .is_none()
        );
        // A bad token or context says what is wrong.
        std::fs::write(dir.path().join("bad"), "not-a-token").unwrap();
        let e = parse(&[
            "--bootstrap-token-file",
            dir.path().join("bad").to_str().unwrap(),
        ])
        .static_settings(&cluster)
        .unwrap_err();
        assert!(e.to_string().starts_with("bootstrap token"), "{e}");
        std::fs::write(dir.path().join("ctx2"), "apiEndpoint: x\n").unwrap();
        let e = parse(&[
            "--static-cluster-context",
            dir.path().join("ctx2").to_str().unwrap(),
        ])
        .fixed_cluster_context()
        .unwrap_err();
        assert!(e.to_string().contains("apiEndpoint"), "{e}");
    }
}
