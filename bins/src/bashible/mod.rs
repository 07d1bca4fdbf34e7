//! `bashible`: the node agent. It carries its NodeGroup's configuration onto the machine it
//! runs on, as Deckhouse's `bashible.sh` does, by driving the core's node agent
//! ([`nodemgr_core::agent`]: the protocol — checksum compare, approval, disruption approval,
//! steps, report — is decided there and only carried out here, by [`driver`]).
//!
//! # One pass
//! A systemd timer starts a pass every minute (`--loop INTERVAL` keeps one process running
//! instead, holding the lock for its whole life, so a timer's pass beside it ends at once). A pass takes the exclusive lock `/var/lock/bashible` ([`lock`]; a pass that finds
//! it held ends at once), fetches the group's bundle from `bashible-apiserver`
//! ([`bundle_source`]), and ends when the node runs that bundle and its Node's
//! `node.deckhouse.io/configuration-checksum` says so — waiting, meanwhile, for approvals,
//! running the steps and retrying failures, all under the lock.
//!
//! # What it reads and writes
//! Deckhouse's layout under `/var/lib/bashible` ([`layout`]): `configuration_checksum`,
//! `first_run`, `bundle_steps/`, plus nodemgr's progress record; every path moves under
//! `--root DIR` (then the steps get `BB_ROOT=DIR` and record host commands instead of running
//! them). The API is reached with the kubelet's kubeconfig once the node has joined, with the
//! bootstrap token before ([`node_api`]). Tokens are read from files and never logged
//! ([`secret`]).
//!
//! # Faults
//! An unreachable API or bundle server, a bundle that fails to download or does not match its
//! checksum, a Node deleted under the agent: a log line, an Event where the API answers (a
//! refused bundle: `BashibleBundleRejected`), and a retry after a backoff that doubles up to
//! five minutes. A step that fails is retried every `--step-retry` with a
//! `BashibleStepFailed` Event carrying its stderr tail; a step over `--step-timeout` is killed
//! with its process group ([`step_runner`]). A state file that cannot be written (a full disk)
//! stops the pass until it can be, and nothing is reported that was not written.

pub mod bundle_source;
pub mod driver;
pub mod layout;
pub mod lock;
pub mod node_api;
pub mod node_user_status;
pub mod secret;
pub mod state_files;
pub mod step_runner;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use nodemgr_core::agent::AgentConfig;

use crate::duration_flag as duration;

/// Command line of `bashible`.
#[derive(Debug, Clone, Parser)]
#[command(name = "bashible", version, about = "the nodemgr node agent: applies the NodeGroup's bundle to this machine", long_about = None)]
pub struct Config {
    /// URL of bashible-apiserver (`https://HOST:PORT`, or `http://` for file mode).
    #[arg(long, value_name = "URL")]
    pub bundle_server: String,
    /// PEM file of the certificates the bundle server is trusted by (its self-signed
    /// certificate from the `bashible-apiserver-tls` Secret); default: the system's roots.
    #[arg(long, value_name = "FILE")]
    pub bundle_server_ca: Option<PathBuf>,
    /// File holding the bundle server's bearer token (default `/var/lib/bashible/bundle-token`
    /// under the root).
    #[arg(long, value_name = "FILE")]
    pub bundle_token_file: Option<PathBuf>,
    /// The node's name (default: the short hostname, lowercased).
    #[arg(long, value_name = "NAME")]
    pub node_name: Option<String>,
    /// The node's NodeGroup (default: the Node's label `node.deckhouse.io/group`).
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,
    /// A kubeconfig to use instead of the kubelet's (or the bootstrap token).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// A directory standing in for `/` (tests): every path the agent and its steps touch moves
    /// under it.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Keep running, starting a pass every INTERVAL after the node is up to date, instead of
    /// one pass.
    #[arg(long = "loop", value_name = "INTERVAL", value_parser = duration)]
    pub loop_interval: Option<Duration>,
    /// Time limit of one step; a step over it is killed with its process group.
    #[arg(long, default_value = "30m", value_parser = duration)]
    pub step_timeout: Duration,
    /// Pause between runs of a failing step.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub step_retry: Duration,
    /// How often the Node is read while waiting for an approval.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub poll_interval: Duration,
    /// First pause after a failed request (it doubles up to 5m).
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub error_backoff: Duration,
    /// Time limit of one request to the bundle server.
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub http_timeout: Duration,
}

fn hostname() -> anyhow::Result<String> {
    let uname = rustix::system::uname();
    let name = uname.nodename().to_string_lossy();
    let short = name.split('.').next().unwrap_or_default().to_lowercase();
    anyhow::ensure!(!short.is_empty(), "the hostname is empty; pass --node-name");
    Ok(short)
}

/// Runs the agent: one pass, or passes forever with `--loop`.
///
/// # Errors
/// Setup failures (no lock file, no token, no credentials), with what to do.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let layout = layout::Layout::new(config.root.as_deref());
    let Some(_lock) = lock::PassLock::try_acquire(&layout.lock_file())? else {
        tracing::info!(
            lock = %layout.lock_file().display(),
            "another pass holds the lock; this one ends"
        );
        return Ok(());
    };
    let node = match &config.node_name {
        Some(n) => n.clone(),
        None => hostname()?,
    };
    let token_file = config
        .bundle_token_file
        .clone()
        .unwrap_or_else(|| layout.bundle_token());
    let token = secret::Secret::read_from(&token_file)
        .context("the bundle server's token (--bundle-token-file)")?;
    let ca = match &config.bundle_server_ca {
        Some(path) => Some(std::fs::read(path).with_context(|| {
            format!("cannot read the bundle server's CA file {}", path.display())
        })?),
        None => None,
    };
    let server = bundle_source::BundleServer::new(
        &config.bundle_server,
        token,
        config.http_timeout,
        ca.as_deref(),
    )
    .context("cannot build the HTTP client (is --bundle-server-ca a PEM certificate?)")?;
    let api = node_api::NodeApi::connect(&layout, config.kubeconfig.as_deref(), &node).await?;
    tracing::info!(
        %node,
        root = %layout.root().display(),
        server = %server.url(),
        credentials = api.credentials,
        "bashible agent"
    );
    let mut agent = AgentConfig::new(node.clone());
    agent.step_retry = config.step_retry;
    agent.poll_interval = config.poll_interval;
    agent.error_backoff = config.error_backoff;
    agent.pass_interval = config.loop_interval;
    let driver = driver::Driver {
        layout,
        node,
        group: config.group.clone(),
        api,
        server,
        step_timeout: config.step_timeout,
        agent,
        one_pass: config.loop_interval.is_none(),
    };
    driver.run().await
}
