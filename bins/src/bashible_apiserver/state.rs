//! What `bashible-apiserver` serves, loaded from its sources and swapped as a whole on reload.
//! A group that stops rendering keeps its last good entry (as Deckhouse's builder does) and is
//! reported; a reload that cannot read its sources at all changes nothing.
//!
//! # Which bootstrap token a bootstrap script carries
//! A bootstrap script holds a join token, and whoever reads it can join machines to the
//! cluster. So a bearer token scoped to some groups gets a group's bootstrap script only with
//! that group's own join token: the file named after the group in `--bootstrap-token-dir`, or
//! (cluster mode) the group's current bootstrap token. The cluster-wide token of
//! `--bootstrap-token-file` is an override: when given, it is the token of every script
//! served to `*` bearer tokens (the operator's) and of the `manual-bootstrap-for-<group>`
//! Secrets, whether or not the group has a token of its own; it is never baked into a script
//! served to a group-scoped bearer token, which gets its group's own token or, for a group
//! without one, a 403 with what to configure.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use nodemgr_core::bashible::{BootstrapOptions, Bundle, RenderError, RenderRoot, Renderer};
use nodemgr_core::model::NodeType;

use super::auth::{self, Grant};
use crate::inputs;

/// Where everything served comes from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Manifest files or directories with NodeGroups, NodeGroupConfigurations and NodeUsers.
    pub manifests: Vec<PathBuf>,
    /// Cluster context YAML.
    pub cluster_context: Option<PathBuf>,
    /// API endpoints overriding the cluster context's.
    pub api_endpoints: Vec<String>,
    /// CA file overriding the cluster context's.
    pub ca_file: Option<PathBuf>,
    /// Kubernetes version overriding the cluster context's.
    pub kubernetes_version: Option<String>,
    /// File with the cluster-wide bootstrap token (served to `*` bearer tokens only).
    pub bootstrap_token_file: Option<PathBuf>,
    /// Directory of per-group bootstrap tokens: the file named after a group holds its token.
    pub bootstrap_token_dir: Option<PathBuf>,
    /// File of bearer-token grants.
    pub tokens_file: Option<PathBuf>,
    /// Grants from `--token`.
    pub token_flags: Vec<Grant>,
    /// Root the bootstrap and cleanup scripts are rendered for.
    pub root: RenderRoot,
    /// The node agent's binary, served to nodes.
    pub agent_binary: Option<PathBuf>,
    /// The URL nodes reach the server at; with `agent_binary`, bootstrap scripts install the
    /// agent.
    pub public_url: Option<String>,
    /// The PEM certificates nodes trust the server by (cluster mode: from its TLS Secret),
    /// carried by bootstrap scripts that install the agent.
    pub agent_ca: Option<String>,
}

/// One group's rendered files.
#[derive(Debug, Clone)]
pub struct GroupEntry {
    /// Steps and checksum.
    pub bundle: Bundle,
    /// The bootstrap script with the group's own bootstrap token, when it has one.
    pub bootstrap: Option<String>,
    /// The bootstrap script with the cluster-wide bootstrap token (`--bootstrap-token-file`,
    /// the override), for `*` bearer tokens and the manual-bootstrap Secret, when configured.
    pub bootstrap_cluster_wide: Option<String>,
    /// The cleanup script.
    pub cleanup: String,
    /// Whether the group joins machines by hand (Static, CloudStatic): its bootstrap script
    /// is kept in a `manual-bootstrap-for-<group>` Secret in cluster mode.
    pub manual_bootstrap: bool,
    /// The latest render error, when this entry is the last good one of a group that no longer
    /// renders.
    pub stale_because: Option<String>,
    /// Checksum of the spec the entry was rendered from (`NodeGroup::spec_checksum`), stamped
    /// as the group's `status.deckhouse.processed` in cluster mode.
    pub spec_checksum: String,
}

/// What one render is made from.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// NodeGroups by name.
    pub groups: BTreeMap<String, nodemgr_core::model::NodeGroup>,
    /// NodeGroupConfigurations and NodeUsers.
    pub customisations: nodemgr_core::bashible::Customisations,
    /// The cluster context.
    pub cluster: nodemgr_core::bashible::ClusterContext,
    /// Each group's own bootstrap token.
    pub group_tokens: BTreeMap<String, nodemgr_core::bashible::BootstrapToken>,
    /// Grants beyond the flags' (cluster mode: the groups' unexpired bootstrap tokens).
    pub extra_grants: Vec<Grant>,
}

/// Everything served at one moment.
#[derive(Debug, Clone, Default)]
pub struct Served {
    /// NodeGroupConfigurations per targeted group (`*` for all), for the metric.
    pub configuration_counts: BTreeMap<String, u64>,
    /// Entries by group name.
    pub groups: BTreeMap<String, Arc<GroupEntry>>,
    /// Groups that never rendered, with the reason.
    pub failed: BTreeMap<String, String>,
    /// Bearer-token grants.
    pub grants: Vec<Grant>,
    /// Why bootstrap scripts are not served, if they are not.
    pub no_bootstrap: Option<String>,
    /// The node agent's binary, if served.
    pub agent_binary: Option<PathBuf>,
}

/// Why a bearer token gets no bootstrap script of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoBootstrap {
    /// Only the cluster-wide token exists and the bearer token is scoped to groups (403).
    ClusterWideOnly,
    /// No bootstrap token at all for the group (503).
    NoToken,
}

impl GroupEntry {
    /// The bootstrap script a bearer token gets: for a `*` token (`all_groups`) the
    /// cluster-wide one when configured (the override), else the group's own; for a
    /// group-scoped token only the group's own.
    ///
    /// # Errors
    /// [`NoBootstrap`] saying why none.
    pub fn bootstrap_for(&self, all_groups: bool) -> Result<&str, NoBootstrap> {
        choose(
            self.bootstrap.as_deref(),
            self.bootstrap_cluster_wide.as_deref(),
            all_groups,
        )
    }

    /// The script of the group's `manual-bootstrap-for-<group>` Secret: what a `*` bearer
    /// token gets (the cluster-wide token's when configured, the override), else none.
    pub fn manual_bootstrap_script(&self) -> Option<&str> {
        self.bootstrap_for(true).ok()
    }
}

/// The script of [`GroupEntry::bootstrap_for`], from the group's own (`own`) and the
/// cluster-wide (`cluster_wide`) one.
fn choose<'a>(
    own: Option<&'a str>,
    cluster_wide: Option<&'a str>,
    all_groups: bool,
) -> Result<&'a str, NoBootstrap> {
    match (own, cluster_wide) {
        (_, Some(cluster_wide)) if all_groups => Ok(cluster_wide),
        (Some(own), _) => Ok(own),
        (None, Some(_)) => Err(NoBootstrap::ClusterWideOnly),
        (None, None) => Err(NoBootstrap::NoToken),
    }
}

/// The per-group bootstrap token files of `dir`: group name → path.
fn group_token_files(dir: &std::path::Path) -> anyhow::Result<BTreeMap<String, PathBuf>> {
    let entries = std::fs::read_dir(dir).with_context(|| {
        format!(
            "cannot read the bootstrap token directory {}",
            dir.display()
        )
    })?;
    let mut files = BTreeMap::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        // Skip hidden files (a mounted Secret's `..data` links among them).
        if name.starts_with('.') || !entry.path().is_file() {
            continue;
        }
        files.insert(name, entry.path());
    }
    Ok(files)
}

/// Modification times and sizes of every source file: a reload happens when it changes.
pub type Fingerprint = Vec<(PathBuf, Option<(SystemTime, u64)>)>;

impl Sources {
    fn files(&self) -> Vec<PathBuf> {
        let mut files = inputs::manifest_files(&self.manifests).unwrap_or_default();
        files.extend(self.manifests.iter().cloned());
        files.extend(self.cluster_context.iter().cloned());
        files.extend(self.ca_file.iter().cloned());
        files.extend(self.bootstrap_token_file.iter().cloned());
        if let Some(dir) = &self.bootstrap_token_dir {
            files.push(dir.clone());
            files.extend(group_token_files(dir).unwrap_or_default().into_values());
        }
        files.extend(self.tokens_file.iter().cloned());
        files
    }

    /// The current fingerprint of the source files.
    pub fn fingerprint(&self) -> Fingerprint {
        self.files()
            .into_iter()
            .map(|path| {
                let stamp = std::fs::metadata(&path)
                    .ok()
                    .and_then(|m| Some((m.modified().ok()?, m.len())));
                (path, stamp)
            })
            .collect()
    }

    /// Reads and renders everything; `previous` supplies last good entries.
    ///
    /// # Errors
    /// A source that cannot be read or parsed (then nothing should change).
    pub fn load(&self, renderer: &Renderer, previous: Option<&Served>) -> anyhow::Result<Served> {
        let groups = inputs::load_node_groups(&self.manifests)?;
        let (customisations, problems) = inputs::load_customisations(&self.manifests)?;
        for problem in &problems {
            tracing::error!(%problem, "NodeGroupConfiguration or NodeUser left out");
        }
        let cluster = inputs::load_cluster_context(
            self.cluster_context.as_deref(),
            &self.api_endpoints,
            self.ca_file.as_deref(),
            self.kubernetes_version.as_deref(),
        )?;
        let mut group_tokens = BTreeMap::new();
        if let Some(dir) = &self.bootstrap_token_dir {
            for (group, path) in group_token_files(dir)? {
                if !groups.contains_key(&group) {
                    tracing::warn!(file = %path.display(), "bootstrap token for a NodeGroup that is not served; ignored");
                    continue;
                }
                let token = inputs::load_bootstrap_token(Some(&path))
                    .with_context(|| format!("bootstrap token file {}", path.display()))?;
                group_tokens.insert(group, token);
            }
        }
        let served = self.render(
            &Inputs {
                groups,
                customisations,
                cluster,
                group_tokens,
                extra_grants: Vec::new(),
            },
            renderer,
            previous,
        )?;
        // File mode has no other source of grants: serving nobody is a mistake. (Cluster
        // mode starts without any and gains the groups' bootstrap tokens as they appear.)
        if served.grants.is_empty() {
            anyhow::bail!(
                "no bearer token is configured, so no node could read anything: pass \
                 --tokens-file FILE (lines `TOKEN GROUP[,GROUP...]` or `TOKEN *`) or --token"
            );
        }
        Ok(served)
    }

    /// Renders `inputs` (read from files or from the cluster) with the token files and
    /// grants of these sources; `previous` supplies last good entries.
    ///
    /// # Errors
    /// A token file that cannot be read. No grant at all is not an error here (cluster mode
    /// serves 401 until tokens exist); [`Sources::load`] refuses it in file mode.
    pub fn render(
        &self,
        inputs: &Inputs,
        renderer: &Renderer,
        previous: Option<&Served>,
    ) -> anyhow::Result<Served> {
        let Inputs {
            groups,
            customisations,
            cluster,
            group_tokens,
            extra_grants,
        } = inputs;
        let mut grants = self.token_flags.clone();
        grants.extend(extra_grants.iter().cloned());
        if let Some(path) = &self.tokens_file {
            grants.extend(auth::read_token_file(path)?);
        }
        let (token, no_bootstrap) = match &self.bootstrap_token_file {
            Some(path) => (
                Some(
                    inputs::load_bootstrap_token(Some(path))
                        .with_context(|| format!("bootstrap token file {}", path.display()))?,
                ),
                None,
            ),
            None => (
                None,
                Some(
                    "no bootstrap token is configured for this group: put its token in \
                     --bootstrap-token-dir DIR (a file named after the group), or start with \
                     --bootstrap-token-file FILE to serve scripts with a cluster-wide token to \
                     `*` bearer tokens"
                        .to_owned(),
                ),
            ),
        };
        let bundle_of = |group| -> Result<Bundle, RenderError> {
            let bundle = renderer.bundle_with(group, cluster, customisations)?;
            for skipped in &bundle.skipped {
                tracing::error!(group = %bundle.group, %skipped, "left out of the group's bundle");
            }
            Ok(bundle)
        };
        let configuration_counts =
            nodemgr_core::bashible::configuration_counts(&customisations.configurations);
        let mut served = Served {
            configuration_counts,
            grants,
            no_bootstrap,
            agent_binary: self.agent_binary.clone(),
            ..Served::default()
        };
        for (name, group) in groups {
            let rendered = bundle_of(group).and_then(|bundle| {
                let agent = super::agent_binary::agent_install(
                    self.public_url.as_deref(),
                    self.agent_binary.is_some(),
                    self.agent_ca.as_deref(),
                    &served.grants,
                    name,
                )?;
                let script = |token: &nodemgr_core::bashible::BootstrapToken| {
                    renderer.bootstrap_script_with_agent(
                        &bundle,
                        &BootstrapOptions {
                            root: self.root.clone(),
                            bootstrap_token: token.clone(),
                        },
                        agent.as_ref(),
                    )
                };
                let bootstrap = group_tokens.get(name).map(script).transpose()?;
                let bootstrap_cluster_wide = token.as_ref().map(script).transpose()?;
                let cleanup = renderer.cleanup_script(&bundle, &self.root);
                let manual_bootstrap = matches!(
                    group.spec.node_type,
                    Some(NodeType::Static | NodeType::CloudStatic)
                );
                Ok(GroupEntry {
                    manual_bootstrap,
                    bundle,
                    bootstrap,
                    bootstrap_cluster_wide,
                    cleanup,
                    stale_because: None,
                    spec_checksum: group.spec_checksum(),
                })
            });
            match rendered {
                Ok(entry) => {
                    served.groups.insert(name.clone(), Arc::new(entry));
                }
                Err(e) => {
                    let reason = format!("NodeGroup {name}: {e}");
                    match previous.and_then(|p| p.groups.get(name)) {
                        Some(last_good) => {
                            tracing::error!(group = %name, error = %e, "group no longer renders; serving its last good bundle");
                            let mut entry = (**last_good).clone();
                            entry.stale_because = Some(reason);
                            served.groups.insert(name.clone(), Arc::new(entry));
                        }
                        None => {
                            tracing::error!(group = %name, error = %e, "group does not render");
                            served.failed.insert(name.clone(), reason);
                        }
                    }
                }
            }
        }
        Ok(served)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_wide_token_overrides_for_the_operator_and_never_reaches_a_scoped_token() {
        let (own, over) = (Some("own"), Some("override"));
        assert_eq!(choose(own, over, true), Ok("override"));
        assert_eq!(choose(own, over, false), Ok("own"));
        assert_eq!(choose(own, None, true), Ok("own"));
        assert_eq!(choose(own, None, false), Ok("own"));
        assert_eq!(choose(None, over, true), Ok("override"));
        assert_eq!(choose(None, over, false), Err(NoBootstrap::ClusterWideOnly));
        assert_eq!(choose(None, None, true), Err(NoBootstrap::NoToken));
        assert_eq!(choose(None, None, false), Err(NoBootstrap::NoToken));
    }
}
