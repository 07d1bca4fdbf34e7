//! `NodeGroupConfiguration` (`deckhouse.io/v1alpha1`, cluster-scoped): an operator's own shell
//! step, added to the bundles of the groups it targets (`docs/bundles.md`). Every field is
//! optional in the Rust type so that a broken manifest still parses and `validate` can report
//! all its errors; the accessors apply Deckhouse's defaults.

use serde::{Deserialize, Serialize};

use super::meta::ObjectMeta;

/// `spec.weight` when absent.
pub const DEFAULT_CONFIGURATION_WEIGHT: i64 = 100;

/// The wildcard of `spec.nodeGroups` and `spec.bundles` (also their default): every group,
/// every OS bundle.
pub const ALL: &str = "*";

/// An operator's step for the nodes of some groups.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupConfiguration {
    /// `deckhouse.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `NodeGroupConfiguration`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata; the name (ending in `.sh`) becomes the step's file name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The step and where it goes.
    #[serde(default)]
    pub spec: NodeGroupConfigurationSpec,
}

/// `NodeGroupConfiguration.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupConfigurationSpec {
    /// The bash script. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Order among the bundle's steps (lower first; default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// Groups whose bundles get the step (default `["*"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_groups: Option<Vec<String>>,
    /// OS bundles the step runs on (default `["*"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundles: Option<Vec<String>>,
}

/// Whether `list` (defaulting to `["*"]`) holds `name` or the wildcard.
pub(crate) fn targets(list: Option<&[String]>, name: &str) -> bool {
    match list {
        None => true,
        Some(list) => list.iter().any(|g| g == ALL || g == name),
    }
}

impl NodeGroupConfiguration {
    /// `metadata.name` (empty when absent).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `spec.weight` or its default.
    pub fn weight(&self) -> i64 {
        self.spec.weight.unwrap_or(DEFAULT_CONFIGURATION_WEIGHT)
    }

    /// `spec.nodeGroups` or its default (`["*"]`).
    pub fn node_groups(&self) -> Vec<String> {
        self.spec
            .node_groups
            .clone()
            .unwrap_or_else(|| vec![ALL.to_owned()])
    }

    /// `spec.bundles` or its default (`["*"]`).
    pub fn bundles(&self) -> Vec<String> {
        self.spec
            .bundles
            .clone()
            .unwrap_or_else(|| vec![ALL.to_owned()])
    }

    /// Whether the step goes into the bundle of `group`.
    pub fn targets_group(&self, group: &str) -> bool {
        targets(self.spec.node_groups.as_deref(), group)
    }

    /// Whether it targets every group (`*` among `nodeGroups`, or `nodeGroups` absent).
    pub fn targets_every_group(&self) -> bool {
        self.spec
            .node_groups
            .as_ref()
            .is_none_or(|l| l.iter().any(|g| g == ALL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ngc(groups: Option<Vec<&str>>) -> NodeGroupConfiguration {
        NodeGroupConfiguration {
            spec: NodeGroupConfigurationSpec {
                node_groups: groups.map(|g| g.into_iter().map(str::to_owned).collect()),
                ..NodeGroupConfigurationSpec::default()
            },
            ..NodeGroupConfiguration::default()
        }
    }

    #[test]
    fn defaults_are_deckhouses() {
        let c = ngc(None);
        assert_eq!(c.weight(), 100);
        assert_eq!(c.node_groups(), vec!["*"]);
        assert_eq!(c.bundles(), vec!["*"]);
        assert!(c.targets_group("worker"));
        assert!(c.targets_every_group());
    }

    #[test]
    fn targeting_by_name_or_wildcard() {
        let c = ngc(Some(vec!["worker"]));
        assert!(c.targets_group("worker"));
        assert!(!c.targets_group("master"));
        assert!(!c.targets_every_group());
        let c = ngc(Some(vec!["master", "*"]));
        assert!(c.targets_group("anything"));
        assert!(c.targets_every_group());
        let c = ngc(Some(vec![]));
        assert!(!c.targets_group("worker"));
        assert!(!c.targets_every_group());
    }
}
