//! `fencing-agent`: one per node of a group with `spec.fencing`. It carries out the decisions of
//! the core's sans-I/O [`FencingAgent`]: on start it checks the API (a GET of its own Node),
//! arms the watchdog device by opening it and labels its Node
//! `node-manager.deckhouse.io/fencing-enabled`; every feed interval it writes one byte to the
//! watchdog, but only while the last API check reached the API server; on a maintenance marker
//! (`update.node.deckhouse.io/approved`, `…/disruption-approved`,
//! `node-manager.deckhouse.io/fencing-disable`) it removes the label and disarms cleanly (writes
//! the magic `V`, closes), and re-arms when the marker goes; on SIGTERM or Ctrl-C it removes the
//! label and disarms, even when the label cannot be removed.
//!
//! Each check also reads the node's own kubelet Lease (`kube-node-lease/<node>`): the agent
//! arms only once it has seen the kubelet renew it and stops feeding when it has seen no
//! renewal for `--kubelet-stale-after` (30 s), so a node whose kubelet died reboots even while
//! the API answers — its containers cannot outlive the deletion of their pods. All timing is
//! on the agent's monotonic clock; the controller derives its deadline from these timings
//! (`docs/fencing.md`): keep `--kubelet-stale-after` equal to node-manager's
//! `--fencing-kubelet-stale-after`.
//!
//! Which API errors stop the feeding is decided by [`ApiCheck::is_unreachable`]: a timeout or a
//! connection failure (refused, reset, no route, DNS) does — from the node that is a partition,
//! its kubelet cannot renew its Lease either and the controller will delete its pods; any HTTP
//! answer (401/403/404/429/5xx) or TLS error from a peer that answered does not — a
//! configuration mistake or an overloaded control plane must not reboot every fenced node.
//!
//! Metrics on `--metrics-address` (`/metrics`, `/healthz`; behind Kubernetes authorization with
//! `--metrics-auth kubernetes`): `fencing_agent_watchdog_armed`, `fencing_agent_kubelet_alive`,
//! `fencing_agent_feeds_total`, `fencing_agent_api_check_failures_total`,
//! `fencing_agent_build_info`.
//!
//! The watchdog is opened for appending (a no-op for the device, and what lets tests use a plain
//! file); with softdog, `soft_margin` is the group's `fencing.watchdog.timeout` (60 s).

use std::fs::File;
use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use nodemgr_core::fencing::{
    AgentAction, AgentConfig, ApiCheck, ApiErrorKind, FencingAgent, is_maintenance, validate_agent,
};
use nodemgr_core::model::{Timestamp, keys};
use nodemgr_k8s::convert::{lease_renew_time, node_to_core};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use serde_json::json;

use crate::duration_flag as duration;

/// The agent's clock: monotonic (a wall-clock step cannot stretch or shorten its timings),
/// counted from a fixed instant.
#[derive(Debug, Clone, Copy)]
struct MonotonicClock(std::time::Instant);

impl MonotonicClock {
    fn now(self) -> Timestamp {
        let millis = i64::try_from(self.0.elapsed().as_millis()).unwrap_or(i64::MAX);
        // Away from the epoch so that the core's "never" (EPOCH) is in the past.
        Timestamp::from_millis(millis.saturating_add(1_000_000_000))
    }
}

/// Flags of `fencing-agent`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "fencing-agent",
    version,
    about = "Feeds the watchdog while the Kubernetes API is reachable"
)]
pub struct Config {
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,
    /// The watchdog device.
    #[arg(long, default_value = "/dev/watchdog")]
    pub watchdog: PathBuf,
    /// How often the watchdog is fed.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub feed_interval: Duration,
    /// How often the API is checked.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub check_interval: Duration,
    /// How long an API check may take before it counts as a timeout.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub api_timeout: Duration,
    /// The watchdog's timeout (softdog `soft_margin`); the feed interval must be well inside it.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub watchdog_timeout: Duration,
    /// Stop feeding when the node's kubelet has not been seen renewing its Lease for this
    /// long; must equal node-manager's `--fencing-kubelet-stale-after`.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub kubelet_stale_after: Duration,
    /// Kubeconfig to use; without it the in-cluster configuration.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Address for /metrics and /healthz (off when unset; the chart uses 0.0.0.0:9652).
    #[arg(long)]
    pub metrics_address: Option<std::net::SocketAddr>,
    /// Who may scrape /metrics, over HTTP or HTTPS.
    #[command(flatten)]
    pub metrics_serve: crate::observability::server::MetricsServeArgs,
}

/// The agent's metrics.
struct AgentMetrics {
    registry: std::sync::Arc<Registry>,
    armed: Gauge,
    kubelet_alive: Gauge,
    feeds: Counter,
    api_check_failures: Counter,
}

impl AgentMetrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("fencing_agent");
        let armed = Gauge::default();
        let kubelet_alive = Gauge::default();
        let feeds = Counter::default();
        let api_check_failures = Counter::default();
        registry.register(
            "watchdog_armed",
            "1 while the watchdog device is open (the node reboots when feeding stops)",
            armed.clone(),
        );
        registry.register(
            "kubelet_alive",
            "1 while the node's kubelet was seen renewing its Lease recently",
            kubelet_alive.clone(),
        );
        registry.register("feeds", "Writes to the watchdog", feeds.clone());
        registry.register(
            "api_check_failures",
            "API checks that failed (timeouts, connection errors, HTTP errors)",
            api_check_failures.clone(),
        );
        registry.register(
            "build",
            "The version of fencing-agent",
            Info::new(vec![(
                "version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            )]),
        );
        AgentMetrics {
            registry: std::sync::Arc::new(registry),
            armed,
            kubelet_alive,
            feeds,
            api_check_failures,
        }
    }
}

/// Maps the outcome of a GET of the own Node to the core's [`ApiCheck`].
fn classify(
    result: Result<Result<Node, kube::Error>, tokio::time::error::Elapsed>,
) -> (ApiCheck, Option<Node>) {
    match result {
        Err(_) => (ApiCheck::Timeout, None),
        Ok(Ok(node)) => (ApiCheck::Ok, Some(node)),
        Ok(Err(kube::Error::Api(status))) => {
            (ApiCheck::Error(ApiErrorKind::Status(status.code)), None)
        }
        Ok(Err(kube::Error::HyperError(e))) if e.is_timeout() => (ApiCheck::Timeout, None),
        Ok(Err(kube::Error::HyperError(_) | kube::Error::Service(_))) => {
            (ApiCheck::Error(ApiErrorKind::Connect), None)
        }
        Ok(Err(kube::Error::RustlsTls(e))) => (ApiCheck::Error(ApiErrorKind::Tls), {
            tracing::debug!(error = %e, "TLS error on the API check");
            None
        }),
        Ok(Err(other)) => (
            ApiCheck::Error(ApiErrorKind::Other(other.to_string())),
            None,
        ),
    }
}

/// Runs the agent until `shutdown` completes (then disarms) or the core decides to exit.
///
/// # Errors
/// No cluster configuration; the agent exiting because it could not label its Node.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    if config.feed_interval >= config.watchdog_timeout {
        anyhow::bail!(
            "--feed-interval {:?} must be shorter than --watchdog-timeout {:?}",
            config.feed_interval,
            config.watchdog_timeout
        );
    }
    let agent_config = AgentConfig {
        feed_interval: config.feed_interval,
        api_check_interval: config.check_interval,
        api_timeout: config.api_timeout,
        watchdog_timeout: config.watchdog_timeout,
        kubelet_stale_after: config.kubelet_stale_after,
    };
    validate_agent(&agent_config).context("invalid fencing-agent timings")?;
    let client = nodemgr_k8s::cluster::client(config.kubeconfig.as_deref())
        .await
        .context("no Kubernetes configuration: pass --kubeconfig or run in a pod")?;
    let metrics = AgentMetrics::new();
    let (_healthy, health) = tokio::sync::watch::channel(Ok(()));
    let _stop_server = crate::observability::server::spawn_agent_server(
        config.metrics_address,
        &config.metrics_serve,
        metrics.registry.clone(),
        health,
        &client,
    )
    .await?;
    let nodes = Api::<Node>::all(client.clone());
    let leases = Api::<Lease>::namespaced(client, keys::NODE_LEASE_NAMESPACE);
    let name = config.node_name.clone();
    let clock = MonotonicClock(std::time::Instant::now());
    let now = || clock.now();
    let mut agent = FencingAgent::new(agent_config);
    let mut watchdog: Option<File> = None;
    let mut label_failed = false;
    tokio::pin!(shutdown);
    let mut stopping = false;
    loop {
        while let Some(action) = agent.poll_action(now()) {
            tracing::debug!(%action, "fencing agent");
            let ok = match action {
                AgentAction::CheckApi => {
                    // Both reads within one API timeout.
                    let result = tokio::time::timeout(config.api_timeout, async {
                        let node = nodes.get(&name).await;
                        let lease = match &node {
                            Ok(_) => Some(leases.get_opt(&name).await),
                            Err(_) => None,
                        };
                        (node, lease)
                    })
                    .await;
                    let (node_result, lease_result) = match result {
                        Ok((node, lease)) => (Ok(node), lease),
                        Err(elapsed) => (Err(elapsed), None),
                    };
                    let (check, node) = classify(node_result);
                    if check != ApiCheck::Ok {
                        tracing::warn!(?check, "API check failed");
                        metrics.api_check_failures.inc();
                    }
                    agent.handle_api_check(check, now());
                    if let Some(node) = node {
                        agent.handle_node(is_maintenance(&node_to_core(&node)), now());
                    }
                    match lease_result {
                        Some(Ok(lease)) => agent
                            .handle_kubelet_lease(lease.as_ref().and_then(lease_renew_time), now()),
                        Some(Err(error)) => {
                            tracing::warn!(%error, "cannot read the kubelet's Lease; the kubelet counts as silent");
                        }
                        None => {}
                    }
                    metrics
                        .kubelet_alive
                        .set(i64::from(agent.kubelet_alive(now())));
                    if !agent.kubelet_alive(now()) && agent.is_armed() {
                        tracing::warn!(
                            "no kubelet Lease renewal seen for {:?}; not feeding the watchdog",
                            config.kubelet_stale_after
                        );
                    }
                    true
                }
                AgentAction::ArmWatchdog => match std::fs::OpenOptions::new()
                    .append(true)
                    .open(&config.watchdog)
                {
                    Ok(file) => {
                        tracing::info!(watchdog = %config.watchdog.display(), "watchdog armed");
                        watchdog = Some(file);
                        metrics.armed.set(1);
                        true
                    }
                    Err(error) => {
                        tracing::error!(watchdog = %config.watchdog.display(), %error, "cannot open the watchdog; is softdog loaded and the device mounted?");
                        false
                    }
                },
                AgentAction::Feed => match watchdog
                    .as_mut()
                    .map(|w| w.write_all(b"1").and_then(|()| w.flush()))
                {
                    Some(Ok(())) => {
                        metrics.feeds.inc();
                        true
                    }
                    Some(Err(error)) => {
                        tracing::error!(%error, "feeding the watchdog failed");
                        false
                    }
                    None => false,
                },
                AgentAction::Disarm => {
                    metrics.armed.set(0);
                    if let Some(mut w) = watchdog.take() {
                        if let Err(error) = w.write_all(b"V").and_then(|()| w.flush()) {
                            tracing::error!(%error, "magic close failed; the watchdog may still fire");
                        } else {
                            tracing::info!("watchdog disarmed (magic close)");
                        }
                    }
                    true
                }
                AgentAction::SetLabel | AgentAction::RemoveLabel => {
                    let value = if action == AgentAction::SetLabel {
                        json!("")
                    } else {
                        json!(null)
                    };
                    let patch =
                        json!({"metadata": {"labels": {keys::LABEL_FENCING_ENABLED: value}}});
                    match tokio::time::timeout(
                        config.api_timeout,
                        nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)),
                    )
                    .await
                    {
                        Ok(Ok(_)) => {
                            tracing::info!("{action}");
                            true
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(%error, "failed to {action}");
                            label_failed |= action == AgentAction::SetLabel;
                            false
                        }
                        Err(_) => {
                            tracing::warn!("failed to {action}: timed out");
                            label_failed |= action == AgentAction::SetLabel;
                            false
                        }
                    }
                }
                AgentAction::Exit => {
                    if label_failed && !stopping {
                        anyhow::bail!(
                            "could not label node {name} fencing-enabled; the watchdog was disarmed and the agent stops"
                        );
                    }
                    return Ok(());
                }
            };
            if !ok {
                agent.handle_action_failed(action, now());
            }
        }
        let wait = agent
            .next_deadline()
            .map_or(config.check_interval, |d| d.saturating_since(now()))
            .max(Duration::from_millis(10));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = &mut shutdown, if !stopping => {
                tracing::info!("stopping: removing the label and disarming the watchdog");
                stopping = true;
                agent.handle_shutdown();
            }
        }
    }
}
