//! `nodemgr render {bootstrap,cleanup,checksum} --group NAME FILE...`: prints what
//! `nodemgr_core::bashible` renders for the NodeGroup `NAME` found in the manifests:
//!
//! - `bootstrap`: the manual bootstrap script, the content of the `manual-bootstrap-for-<NAME>`
//!   Secret (or, with `--output secret`, that Secret as YAML). Run it as root on the machine.
//!   Needs the cluster context (`--cluster-context FILE` and/or `--api-endpoint`, `--ca-file`)
//!   and a bootstrap token (`--bootstrap-token-file FILE` or `NODEMGR_BOOTSTRAP_TOKEN`; never
//!   a flag, so that it stays out of the process list).
//! - `cleanup`: the cleanup script the bootstrap installs at
//!   `/var/lib/bashible/cleanup_static_node.sh`.
//! - `checksum`: the group's configuration checksum.
//!
//! NodeGroupConfigurations and NodeUsers among the manifests join the group's bundle (and so
//! its checksum and bootstrap script) as in the cluster (`docs/bundles.md`); an invalid one is
//! left out with a warning on stderr.
//!
//! `--root DIR` renders for a test root instead of `/` (see `nodemgr_core::bashible`).
//!
//! Exit code 0 on success, 1 when the group is unknown or cannot be rendered, 2 when input
//! cannot be read.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use base64::Engine;
use clap::{Args, Subcommand, ValueEnum};
use nodemgr_bins::inputs;
use nodemgr_core::bashible::{BootstrapOptions, RenderRoot, Renderer};
use nodemgr_core::model::keys;

use super::Outcome;

/// What to render.
#[derive(Debug, Clone, Subcommand)]
pub enum RenderCommand {
    /// The manual bootstrap script of a group (the `manual-bootstrap-for-<group>` Secret).
    Bootstrap(BootstrapArgs),
    /// The cleanup script of a group (/var/lib/bashible/cleanup_static_node.sh).
    Cleanup(CommonArgs),
    /// The configuration checksum of a group.
    Checksum(ChecksumArgs),
}

/// Arguments every render shares.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// The NodeGroup to render for.
    #[arg(long, value_name = "NAME")]
    pub group: String,
    /// Manifest files or directories holding the NodeGroup and any NodeGroupConfigurations and
    /// NodeUsers (other kinds are skipped).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Render for a directory standing in for / (tests); default: the host.
    #[arg(long, value_name = "DIR")]
    pub root: Option<String>,
    /// The provider cluster configuration, as for `nodemgr convert`: an old (`v1alpha1`,
    /// `v1alpha2`) `Hybrid` group it names is CloudPermanent, any other CloudStatic.
    #[arg(long, value_name = "FILE")]
    pub provider_cluster_configuration: Option<PathBuf>,
}

/// Where the cluster context comes from.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// YAML with kubernetesVersion, apiEndpoints, caCert, clusterDomain, clusterDNS,
    /// podSubnetNodeCIDRPrefix, sandboxImage.
    #[arg(long, value_name = "FILE")]
    pub cluster_context: Option<PathBuf>,
    /// API endpoint host:port (repeat for several; replaces the file's list).
    #[arg(long = "api-endpoint", value_name = "HOST:PORT")]
    pub api_endpoints: Vec<String>,
    /// PEM file of the cluster CA (replaces the file's caCert).
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Kubernetes version of the nodes (replaces the file's kubernetesVersion).
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
}

/// How to print the bootstrap script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BootstrapOutput {
    /// The script itself.
    Script,
    /// The `manual-bootstrap-for-<group>` Secret (key `bootstrap.sh`, base64).
    Secret,
}

/// Arguments of `nodemgr render bootstrap`.
#[derive(Debug, Clone, Args)]
pub struct BootstrapArgs {
    /// Group, files, root.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Cluster context.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// File holding the bootstrap token (else the NODEMGR_BOOTSTRAP_TOKEN variable).
    #[arg(long, value_name = "FILE")]
    pub bootstrap_token_file: Option<PathBuf>,
    /// Print the script or the Secret holding it.
    #[arg(long, value_enum, default_value = "script")]
    pub output: BootstrapOutput,
}

/// Arguments of `nodemgr render checksum`.
#[derive(Debug, Clone, Args)]
pub struct ChecksumArgs {
    /// Group, files, root.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Cluster context.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Arguments of `nodemgr render`.
#[derive(Debug, Clone, Args)]
pub struct RenderArgs {
    /// What to render.
    #[command(subcommand)]
    pub what: RenderCommand,
}

fn root(common: &CommonArgs) -> anyhow::Result<RenderRoot> {
    Ok(match &common.root {
        Some(dir) => RenderRoot::new(dir)?,
        None => RenderRoot::host(),
    })
}

fn cluster(args: &ClusterArgs) -> anyhow::Result<nodemgr_core::bashible::ClusterContext> {
    inputs::load_cluster_context(
        args.cluster_context.as_deref(),
        &args.api_endpoints,
        args.ca_file.as_deref(),
        args.kubernetes_version.as_deref(),
    )
}

/// Why nothing was rendered.
#[derive(Debug)]
enum Failure {
    /// The input was read but does not render (unknown group, invalid field, bad token):
    /// exit 1.
    Invalid(anyhow::Error),
    /// The input could not be read: exit 2.
    Unreadable(anyhow::Error),
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write to stdout")
}

fn secret_yaml(group: &str, script: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(script);
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {}{group}\n  namespace: {}\n\
         type: Opaque\ndata:\n  bootstrap.sh: {encoded}\n",
        keys::MANUAL_BOOTSTRAP_SECRET_PREFIX,
        keys::NAMESPACE
    )
}

fn render(args: &RenderArgs) -> Result<String, Failure> {
    let common = match &args.what {
        RenderCommand::Bootstrap(b) => &b.common,
        RenderCommand::Cleanup(c) => c,
        RenderCommand::Checksum(c) => &c.common,
    };
    let conversion =
        super::convert::conversion_context(common.provider_cluster_configuration.as_deref())
            .map_err(|e| {
                Failure::Unreadable(anyhow::anyhow!("--provider-cluster-configuration: {e}"))
            })?;
    let groups =
        inputs::load_node_groups_with(&common.files, &conversion).map_err(Failure::Unreadable)?;
    let group =
        inputs::find_group(&groups, &common.group, &common.files).map_err(Failure::Invalid)?;
    let root = root(common).map_err(Failure::Unreadable)?;
    let (customisations, problems) =
        inputs::load_customisations(&common.files).map_err(Failure::Unreadable)?;
    for problem in &problems {
        eprintln!("nodemgr: warning: {problem}");
    }
    let renderer = Renderer::new();
    let bundle_of = |cluster: &nodemgr_core::bashible::ClusterContext| {
        let bundle = renderer.bundle_with(group, cluster, &customisations)?;
        for skipped in &bundle.skipped {
            eprintln!("nodemgr: warning: {skipped}");
        }
        Ok(bundle)
    };
    let invalid = |e: nodemgr_core::bashible::RenderError| {
        Failure::Invalid(anyhow::anyhow!("NodeGroup {}: {e}", common.group))
    };
    match &args.what {
        RenderCommand::Cleanup(_) => renderer.cleanup_script_of(group, &root).map_err(invalid),
        RenderCommand::Checksum(c) => {
            let cluster = cluster(&c.cluster).map_err(Failure::Unreadable)?;
            let bundle = bundle_of(&cluster).map_err(invalid)?;
            Ok(format!("{}\n", bundle.checksum))
        }
        RenderCommand::Bootstrap(b) => {
            let cluster = cluster(&b.cluster).map_err(Failure::Unreadable)?;
            let bundle = bundle_of(&cluster).map_err(invalid)?;
            let token = inputs::load_bootstrap_token(b.bootstrap_token_file.as_deref())
                .map_err(Failure::Invalid)?;
            let script = renderer
                .bootstrap_script(
                    &bundle,
                    &BootstrapOptions {
                        root,
                        bootstrap_token: token,
                    },
                )
                .map_err(invalid)?;
            Ok(match b.output {
                BootstrapOutput::Script => script,
                BootstrapOutput::Secret => secret_yaml(group.name(), &script),
            })
        }
    }
}

/// Runs `nodemgr render`.
///
/// # Errors
/// Unreadable input (exit 2 through `main`).
pub fn run(args: &RenderArgs) -> anyhow::Result<Outcome> {
    match render(args) {
        Ok(text) => {
            print(&text)?;
            Ok(Outcome::Ok)
        }
        Err(Failure::Invalid(e)) => {
            eprintln!("nodemgr: {e:#}");
            Ok(Outcome::Invalid)
        }
        Err(Failure::Unreadable(e)) => Err(e),
    }
}
