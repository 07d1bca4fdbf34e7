//! What `bashible-apiserver` serves, loaded from its sources and swapped as a whole on reload.
//! A group that stops rendering keeps its last good entry (as Deckhouse's builder does) and is
//! reported; a reload that cannot read its sources at all changes nothing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use nodemgr_core::bashible::{BootstrapOptions, Bundle, RenderRoot, Renderer};

use super::auth::{self, Grant};
use crate::inputs;

/// Where everything served comes from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Manifest files or directories with NodeGroups.
    pub manifests: Vec<PathBuf>,
    /// Cluster context YAML.
    pub cluster_context: Option<PathBuf>,
    /// API endpoints overriding the cluster context's.
    pub api_endpoints: Vec<String>,
    /// CA file overriding the cluster context's.
    pub ca_file: Option<PathBuf>,
    /// Kubernetes version overriding the cluster context's.
    pub kubernetes_version: Option<String>,
    /// File with the bootstrap token baked into bootstrap scripts.
    pub bootstrap_token_file: Option<PathBuf>,
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
}

/// One group's rendered files.
#[derive(Debug, Clone)]
pub struct GroupEntry {
    /// Steps and checksum.
    pub bundle: Bundle,
    /// The bootstrap script, when a bootstrap token is configured.
    pub bootstrap: Option<String>,
    /// The cleanup script.
    pub cleanup: String,
    /// The latest render error, when this entry is the last good one of a group that no longer
    /// renders.
    pub stale_because: Option<String>,
}

/// Everything served at one moment.
#[derive(Debug, Clone, Default)]
pub struct Served {
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

/// Modification times and sizes of every source file: a reload happens when it changes.
pub type Fingerprint = Vec<(PathBuf, Option<(SystemTime, u64)>)>;

impl Sources {
    fn files(&self) -> Vec<PathBuf> {
        let mut files = inputs::manifest_files(&self.manifests).unwrap_or_default();
        files.extend(self.manifests.iter().cloned());
        files.extend(self.cluster_context.iter().cloned());
        files.extend(self.ca_file.iter().cloned());
        files.extend(self.bootstrap_token_file.iter().cloned());
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
        let cluster = inputs::load_cluster_context(
            self.cluster_context.as_deref(),
            &self.api_endpoints,
            self.ca_file.as_deref(),
            self.kubernetes_version.as_deref(),
        )?;
        let mut grants = self.token_flags.clone();
        if let Some(path) = &self.tokens_file {
            grants.extend(auth::read_token_file(path)?);
        }
        if grants.is_empty() {
            anyhow::bail!(
                "no bearer token is configured, so no node could read anything: pass \
                 --tokens-file FILE (lines `TOKEN GROUP[,GROUP...]` or `TOKEN *`) or --token"
            );
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
                    "no bootstrap token is configured: start bashible-apiserver with \
                     --bootstrap-token-file FILE to serve bootstrap scripts"
                        .to_owned(),
                ),
            ),
        };
        let mut served = Served {
            grants,
            no_bootstrap,
            agent_binary: self.agent_binary.clone(),
            ..Served::default()
        };
        for (name, group) in &groups {
            let rendered = renderer.bundle(group, &cluster).and_then(|bundle| {
                let agent = super::agent_binary::agent_install(
                    self.public_url.as_deref(),
                    self.agent_binary.is_some(),
                    &served.grants,
                    name,
                )?;
                let bootstrap = match &token {
                    Some(token) => Some(renderer.bootstrap_script_with_agent(
                        &bundle,
                        &BootstrapOptions {
                            root: self.root.clone(),
                            bootstrap_token: token.clone(),
                        },
                        agent.as_ref(),
                    )?),
                    None => None,
                };
                let cleanup = renderer.cleanup_script(&bundle, &self.root);
                Ok(GroupEntry {
                    bundle,
                    bootstrap,
                    cleanup,
                    stale_because: None,
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
