//! Reading what `nodemgr render` and `bashible-apiserver` render from: NodeGroups,
//! NodeGroupConfigurations and NodeUsers from manifest files or directories, the cluster context, the bootstrap token. Every error names the file
//! (and document) and says what to do.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nodemgr_core::bashible::{BootstrapToken, ClusterContext, Customisations};
use nodemgr_core::conversion::ConversionContext;
use nodemgr_core::model::{
    Manifest, NodeGroup, parse_documents, parse_manifest, parse_manifest_with,
};

/// Environment variable holding the bootstrap token when no token file is given.
pub const BOOTSTRAP_TOKEN_ENV: &str = "NODEMGR_BOOTSTRAP_TOKEN";

/// The manifest files behind `paths`: files as given, directories expanded to their
/// `*.yaml`, `*.yml` and `*.json` files (not recursively), sorted by name.
///
/// # Errors
/// A path that does not exist or a directory that cannot be listed.
pub fn manifest_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).with_context(|| {
            format!(
                "cannot read {}: check that the path exists and is readable",
                path.display()
            )
        })?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("cannot list directory {}", path.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
                })
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "cannot read {}: check that the path exists and is readable",
            path.display()
        )
    })?;
    String::from_utf8(bytes)
        .map_err(|e| anyhow::anyhow!("{} is not UTF-8 text: {e}", path.display()))
}

/// Every NodeGroup in `paths` (files or directories), by name. Other kinds are skipped.
///
/// # Errors
/// A file that cannot be read or is not YAML, a NodeGroup document that does not parse, a
/// NodeGroup without a name, or two NodeGroups of the same name.
pub fn load_node_groups(paths: &[PathBuf]) -> anyhow::Result<BTreeMap<String, NodeGroup>> {
    load_node_groups_with(paths, &ConversionContext::default())
}

/// [`load_node_groups`], converting old NodeGroup versions with `conversion` (the provider
/// cluster configuration: a `Hybrid` group it names becomes CloudPermanent).
///
/// # Errors
/// As [`load_node_groups`].
pub fn load_node_groups_with(
    paths: &[PathBuf],
    conversion: &ConversionContext,
) -> anyhow::Result<BTreeMap<String, NodeGroup>> {
    let mut groups: BTreeMap<String, (NodeGroup, String)> = BTreeMap::new();
    for file in manifest_files(paths)? {
        let text = read_text(&file)?;
        let documents =
            parse_documents(&text).with_context(|| format!("{} is not YAML", file.display()))?;
        for document in documents {
            if document.value.is_null() {
                continue;
            }
            let place = format!("{}:{}", file.display(), document.index);
            let kind = document.value.get("kind").and_then(|k| k.as_str());
            if kind != Some("NodeGroup") {
                continue;
            }
            let manifest = parse_manifest_with(document.value, conversion)
                .map_err(|e| anyhow::anyhow!("{place}: {e}"))?;
            let Manifest::NodeGroup(group) = manifest else {
                continue;
            };
            let name = group.name().to_owned();
            if name.is_empty() {
                bail!("{place}: NodeGroup without metadata.name");
            }
            if let Some((_, first)) = groups.get(&name) {
                bail!("{place}: NodeGroup {name} is defined twice (first at {first})");
            }
            groups.insert(name, (*group, place));
        }
    }
    Ok(groups.into_iter().map(|(k, (g, _))| (k, g)).collect())
}

/// The cluster context: the file's content if given (YAML, `ClusterContext` fields), then the
/// overrides.
///
/// # Errors
/// An unreadable or malformed file.
pub fn load_cluster_context(
    file: Option<&Path>,
    api_endpoints: &[String],
    ca_file: Option<&Path>,
    kubernetes_version: Option<&str>,
) -> anyhow::Result<ClusterContext> {
    let mut cluster = match file {
        Some(path) => ClusterContext::from_yaml(&read_text(path)?)
            .with_context(|| path.display().to_string())?,
        None => ClusterContext::default(),
    };
    if !api_endpoints.is_empty() {
        cluster.api_endpoints = api_endpoints.to_vec();
    }
    if let Some(path) = ca_file {
        cluster.ca_cert = read_text(path)?;
    }
    if let Some(version) = kubernetes_version {
        cluster.kubernetes_version = version.to_owned();
    }
    Ok(cluster)
}

/// The bootstrap token from `file`, else from [`BOOTSTRAP_TOKEN_ENV`].
///
/// # Errors
/// No token anywhere, an unreadable file, or a token of the wrong form.
pub fn load_bootstrap_token(file: Option<&Path>) -> anyhow::Result<BootstrapToken> {
    let text = match file {
        Some(path) => read_text(path)?,
        None => std::env::var(BOOTSTRAP_TOKEN_ENV).map_err(|_| {
            anyhow::anyhow!(
                "the bootstrap script needs a bootstrap token: pass --bootstrap-token-file FILE \
                 or set {BOOTSTRAP_TOKEN_ENV} (create one with `kubeadm token create`)"
            )
        })?,
    };
    Ok(BootstrapToken::new(&text)?)
}

/// The group named `name`, or an error listing the known ones.
///
/// # Errors
/// No group of that name among `groups`.
pub fn find_group<'a>(
    groups: &'a BTreeMap<String, NodeGroup>,
    name: &str,
    sources: &[PathBuf],
) -> anyhow::Result<&'a NodeGroup> {
    groups.get(name).ok_or_else(|| {
        let files: Vec<String> = sources.iter().map(|p| p.display().to_string()).collect();
        if groups.is_empty() {
            anyhow::anyhow!("no NodeGroup found in {}", files.join(", "))
        } else {
            anyhow::anyhow!(
                "NodeGroup {name:?} is not in {}; known groups: {}",
                files.join(", "),
                groups.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        }
    })
}

/// The NodeGroupConfigurations and NodeUsers in `paths` (files or directories), and a message
/// per document of those kinds that does not even parse (a field of the wrong type): such a
/// document is left out, like an invalid one, so that it never stops the groups from
/// rendering. Other kinds are skipped.
///
/// # Errors
/// A file that cannot be read or is not YAML.
pub fn load_customisations(paths: &[PathBuf]) -> anyhow::Result<(Customisations, Vec<String>)> {
    let mut out = Customisations::default();
    let mut problems = Vec::new();
    for file in manifest_files(paths)? {
        let text = read_text(&file)?;
        let documents =
            parse_documents(&text).with_context(|| format!("{} is not YAML", file.display()))?;
        for document in documents {
            let kind = document.value.get("kind").and_then(|k| k.as_str());
            if !matches!(kind, Some("NodeGroupConfiguration" | "NodeUser")) {
                continue;
            }
            let place = format!("{}:{}", file.display(), document.index);
            match parse_manifest(document.value) {
                Ok(Manifest::NodeGroupConfiguration(c)) => out.configurations.push(*c),
                Ok(Manifest::NodeUser(u)) => out.users.push(*u),
                Ok(_) => {}
                Err(e) => problems.push(format!("{place}: skipped: {e}")),
            }
        }
    }
    Ok((out, problems))
}
