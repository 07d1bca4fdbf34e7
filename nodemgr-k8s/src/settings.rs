//! The cluster settings validation depends on (custom toleration keys, the provider's zones,
//! the cluster prefix length, the per-node pod subnet prefix): from command-line flags,
//! overridden key by key by an optional ConfigMap read on every use, so the admission webhook
//! and the status controller judge a NodeGroup by the same settings
//! (docs/admission-and-conversion.md).
//!
//! ConfigMap keys (all optional): `customTolerationKeys` and `zones` (lists separated by
//! commas, spaces or newlines), `clusterPrefixLen` (0–63), `podSubnetNodeCIDRPrefix` (0–32).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use nodemgr_core::validate::ValidationContext;

/// The settings in force.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// What validation knows about the cluster (the node lists stay empty here).
    pub validation: ValidationContext,
    /// `podSubnetNodeCIDRPrefix`: the prefix of each node's pod subnet.
    pub pod_subnet_node_cidr_prefix: Option<u8>,
}

/// Why the settings ConfigMap could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// A key holds a value of the wrong form.
    #[error("ConfigMap {config_map} key {key}: {message}")]
    Value {
        /// `namespace/name`.
        config_map: String,
        /// The key.
        key: &'static str,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// The ConfigMap could not be read.
    #[error("failed to read ConfigMap {config_map}: {source}")]
    Read {
        /// `namespace/name`.
        config_map: String,
        /// What the API reported.
        #[source]
        source: kube::Error,
    },
}

/// Where the settings come from: the flags' values and the ConfigMap that overrides them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettingsSource {
    /// Settings from flags.
    pub flags: Settings,
    /// `(namespace, name)` of the settings ConfigMap; a missing ConfigMap means the flags.
    pub config_map: Option<(String, String)>,
}

fn list(value: &str) -> Vec<String> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `base` with the keys of a settings ConfigMap's `data` applied.
///
/// # Errors
/// [`SettingsError::Value`] naming the first key whose value is malformed.
pub fn apply_config_map(
    base: &Settings,
    config_map: &str,
    data: &BTreeMap<String, String>,
) -> Result<Settings, SettingsError> {
    let bad = |key: &'static str, message: String| SettingsError::Value {
        config_map: config_map.to_owned(),
        key,
        message,
    };
    let mut out = base.clone();
    if let Some(v) = data.get("customTolerationKeys") {
        out.validation.custom_toleration_keys = list(v);
    }
    if let Some(v) = data.get("zones") {
        out.validation.known_zones = Some(list(v).into_iter().collect::<BTreeSet<_>>());
    }
    if let Some(v) = data.get("clusterPrefixLen") {
        let n: usize = v
            .trim()
            .parse()
            .ok()
            .filter(|n| *n <= 63)
            .ok_or_else(|| bad("clusterPrefixLen", format!("{v:?} is not a number 0..63")))?;
        out.validation.cluster_prefix_len = Some(n);
    }
    if let Some(v) = data.get("podSubnetNodeCIDRPrefix") {
        let n: u8 = v.trim().parse().ok().filter(|n| *n <= 32).ok_or_else(|| {
            bad(
                "podSubnetNodeCIDRPrefix",
                format!("{v:?} is not a number 0..32"),
            )
        })?;
        out.pod_subnet_node_cidr_prefix = Some(n);
    }
    Ok(out)
}

/// Reads `NAMESPACE/NAME` (the settings ConfigMap, the provider Secret).
///
/// # Errors
/// A message naming `flag` when the value is not two non-empty parts around one `/`.
pub fn parse_namespaced_name(flag: &str, value: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("--{flag} {value:?} is not NAMESPACE/NAME")),
    }
}

impl SettingsSource {
    /// The settings now: the flags, overridden by the ConfigMap when one is configured and
    /// exists.
    ///
    /// # Errors
    /// The ConfigMap cannot be read (other than not found) or holds a malformed value.
    pub async fn read(&self, client: &Client) -> Result<Settings, SettingsError> {
        let Some((namespace, name)) = &self.config_map else {
            return Ok(self.flags.clone());
        };
        let place = format!("{namespace}/{name}");
        let found = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|source| SettingsError::Read {
                config_map: place.clone(),
                source,
            })?;
        match found.and_then(|cm| cm.data) {
            None => Ok(self.flags.clone()),
            Some(data) => apply_config_map(&self.flags, &place, &data),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_keys_override_flags() {
        let base = Settings {
            validation: ValidationContext {
                custom_toleration_keys: vec!["flag".into()],
                cluster_prefix_len: Some(5),
                ..ValidationContext::default()
            },
            pod_subnet_node_cidr_prefix: None,
        };
        let data = BTreeMap::from([
            ("customTolerationKeys".to_owned(), "a, b\nc".to_owned()),
            ("zones".to_owned(), "z1 z2".to_owned()),
            ("podSubnetNodeCIDRPrefix".to_owned(), "24".to_owned()),
        ]);
        let out = apply_config_map(&base, "ns/s", &data).unwrap();
        assert_eq!(out.validation.custom_toleration_keys, ["a", "b", "c"]);
        assert_eq!(out.validation.cluster_prefix_len, Some(5));
        assert_eq!(out.pod_subnet_node_cidr_prefix, Some(24));
        assert_eq!(out.validation.known_zones.map(|z| z.len()), Some(2));
        assert_eq!(
            parse_namespaced_name("x", "a/b"),
            Ok(("a".to_owned(), "b".to_owned()))
        );
        assert!(parse_namespaced_name("x", "a/b/c").is_err());
        assert!(parse_namespaced_name("x", "/b").is_err());
        let bad = BTreeMap::from([("clusterPrefixLen".to_owned(), "70".to_owned())]);
        let err = apply_config_map(&base, "ns/s", &bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ConfigMap ns/s key clusterPrefixLen: \"70\" is not a number 0..63"
        );
    }
}
