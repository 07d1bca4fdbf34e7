//! `NodeUser` (`deckhouse.io/v1`, `v1alpha1` served): a local user created on the nodes of some
//! groups, with SSH keys, an optional password hash and sudo (`docs/bundles.md`). The object's
//! name is the user's login name. `v1alpha1` spells one key `sshPublicKey`; it is read into
//! the same list.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::meta::ObjectMeta;
use super::node_group_configuration::{ALL, targets};

/// The lowest `spec.uid` accepted: lower ids belong to the OS and its first local users.
pub const MIN_NODE_USER_UID: i64 = 1001;

/// A user nodemgr keeps on the nodes of some groups.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeUser {
    /// `deckhouse.io/v1` or `deckhouse.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `NodeUser`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata; the name is the login name.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The user.
    #[serde(default)]
    pub spec: NodeUserSpec,
    /// Per-node errors reported by the node agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeUserStatus>,
}

/// `NodeUser.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeUserSpec {
    /// Numeric user id, at least [`MIN_NODE_USER_UID`]. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<i64>,
    /// `authorized_keys` lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_keys: Option<Vec<String>>,
    /// `v1alpha1`'s single key; read into [`NodeUser::ssh_public_keys`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_public_key: Option<String>,
    /// crypt(3) hash of the password (`$6$…`); without it the password is locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    /// Whether the user may use sudo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_sudoer: Option<bool>,
    /// Supplementary groups (created when missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_groups: Option<Vec<String>>,
    /// Groups whose nodes get the user (default `["*"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_groups: Option<Vec<String>>,
}

/// `NodeUser.status`: what went wrong on which node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeUserStatus {
    /// Node name to the last error there; a node that applied the user has no entry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, String>,
}

impl NodeUser {
    /// `metadata.name`: the login name (empty when absent).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// Every SSH key: `sshPublicKeys`, then `v1alpha1`'s `sshPublicKey` unless already listed.
    pub fn ssh_public_keys(&self) -> Vec<String> {
        let mut keys = self.spec.ssh_public_keys.clone().unwrap_or_default();
        if let Some(key) = &self.spec.ssh_public_key
            && !keys.contains(key)
        {
            keys.push(key.clone());
        }
        keys
    }

    /// `spec.nodeGroups` or its default (`["*"]`).
    pub fn node_groups(&self) -> Vec<String> {
        self.spec
            .node_groups
            .clone()
            .unwrap_or_else(|| vec![ALL.to_owned()])
    }

    /// Whether nodes of `group` get this user.
    pub fn targets_group(&self, group: &str) -> bool {
        targets(self.spec.node_groups.as_deref(), group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_single_key_joins_the_list_once() {
        let mut user = NodeUser::default();
        user.spec.ssh_public_keys = Some(vec!["ssh-ed25519 AAAA a".into()]);
        user.spec.ssh_public_key = Some("ssh-ed25519 AAAA a".into());
        assert_eq!(user.ssh_public_keys().len(), 1);
        user.spec.ssh_public_key = Some("ssh-ed25519 BBBB b".into());
        assert_eq!(user.ssh_public_keys().len(), 2);
        assert!(user.targets_group("any"));
        user.spec.node_groups = Some(vec!["worker".into()]);
        assert!(!user.targets_group("master"));
        assert_eq!(user.node_groups(), vec!["worker"]);
    }
}
