//! `NodeGroupConfiguration` (`deckhouse.io/v1alpha1`) and `NodeUser` (`deckhouse.io/v1`,
//! `v1alpha1` served), both cluster-scoped, as kube types around nodemgr-core's specs
//! (`docs/bundles.md`).
//!
//! | kind | versions (storage last) | status |
//! |---|---|---|
//! | NodeGroupConfiguration | `v1alpha1` | none; columns Weight, NodeGroups, Bundles |
//! | NodeUser | `v1alpha1`, `v1` | subresource (`errors` by node); columns UID, Sudoer |
//!
//! The schemas carry the rules the API server can check (required fields, defaults, the uid
//! and weight bounds, the `.sh` name suffix); `nodemgr validate` and the renderer check the rest
//! (`nodemgr_core::validate`). NodeUser `v1alpha1` also accepts the old single `sshPublicKey`,
//! and both versions carry both fields, so nothing is pruned on a version round trip.

use std::borrow::Cow;

use kube::CustomResource;
use nodemgr_core::model::{self as core, NodeUserStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::schema::*;
use crate::convert::{meta_from_core, meta_to_core};

const GROUP_OR_ALL: &str = "^(\\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$";

fn configuration_schema() -> Value {
    let metadata = object(vec![(
        "name",
        describe(
            pattern("^.+\\.sh$"),
            "The step's file name on the node; must end in .sh.",
        ),
    )]);
    let spec = required(
        object(vec![
            (
                "content",
                describe(
                    json!({"type": "string", "minLength": 1}),
                    "The bash script run on the nodes.",
                ),
            ),
            (
                "weight",
                describe(
                    default(integer_in(Some(0), Some(999)), json!(100)),
                    "Order among the bundle's steps, lower first; built-in steps have 0..90.",
                ),
            ),
            (
                "nodeGroups",
                default(array(pattern(GROUP_OR_ALL)), json!(["*"])),
            ),
            (
                "bundles",
                default(array(pattern(GROUP_OR_ALL)), json!(["*"])),
            ),
        ]),
        &["content"],
    );
    describe_from_model(
        root(
            "An operator's bash step added to the bundles of some NodeGroups.",
            Some(metadata),
            Some(spec),
            None,
        ),
        &model_schema::<core::NodeGroupConfiguration>(),
    )
}

/// `deckhouse.io/v1alpha1` NodeGroupConfiguration.
pub mod node_group_configuration_v1alpha1 {
    use super::*;

    /// The spec: nodemgr-core's NodeGroupConfiguration spec.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
    #[kube(
        group = "deckhouse.io",
        version = "v1alpha1",
        kind = "NodeGroupConfiguration",
        plural = "nodegroupconfigurations",
        singular = "nodegroupconfiguration",
        shortname = "ngc",
        schema = "manual",
        derive = "PartialEq",
        derive = "Default",
        printcolumn = r#"{"name":"Weight","type":"integer","jsonPath":".spec.weight"}"#,
        printcolumn = r#"{"name":"NodeGroups","type":"string","jsonPath":".spec.nodeGroups"}"#,
        printcolumn = r#"{"name":"Bundles","type":"string","jsonPath":".spec.bundles"}"#,
        printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
    )]
    #[serde(transparent)]
    pub struct NodeGroupConfigurationSpec(pub core::NodeGroupConfigurationSpec);

    impl schemars::JsonSchema for NodeGroupConfiguration {
        fn schema_name() -> Cow<'static, str> {
            Cow::Borrowed("NodeGroupConfiguration")
        }

        fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
            into_schema(configuration_schema())
        }
    }
}

pub use node_group_configuration_v1alpha1::{NodeGroupConfiguration, NodeGroupConfigurationSpec};

impl NodeGroupConfiguration {
    /// The configuration as nodemgr-core sees it.
    pub fn to_core(&self) -> core::NodeGroupConfiguration {
        core::NodeGroupConfiguration {
            api_version: "deckhouse.io/v1alpha1".into(),
            kind: "NodeGroupConfiguration".into(),
            metadata: meta_to_core(&self.metadata),
            spec: self.spec.0.clone(),
        }
    }

    /// A kube object from nodemgr-core's configuration.
    pub fn from_core(ngc: &core::NodeGroupConfiguration) -> Self {
        let mut out = Self::new(ngc.name(), NodeGroupConfigurationSpec(ngc.spec.clone()));
        out.metadata = meta_from_core(&ngc.metadata);
        out
    }
}

fn node_user_schema() -> Value {
    let spec = required(
        object(vec![
            (
                "uid",
                describe(
                    integer_in(Some(core::MIN_NODE_USER_UID), Some(2_147_483_647)),
                    "Numeric user id, 1001 or more.",
                ),
            ),
            ("sshPublicKeys", array(string())),
            (
                "sshPublicKey",
                describe(string(), "One key (v1alpha1); prefer sshPublicKeys."),
            ),
            (
                "passwordHash",
                describe(
                    string(),
                    "crypt(3) hash; without it the password is locked.",
                ),
            ),
            ("isSudoer", default(boolean(), json!(false))),
            ("extraGroups", array(string())),
            (
                "nodeGroups",
                default(array(pattern(GROUP_OR_ALL)), json!(["*"])),
            ),
        ]),
        &["uid"],
    );
    let status = object(vec![(
        "errors",
        describe(
            string_map(),
            "Node name to the last error applying the user there.",
        ),
    )]);
    describe_from_model(
        root(
            "A local user nodemgr keeps on the nodes of some NodeGroups.",
            None,
            Some(spec),
            Some(status),
        ),
        &model_schema::<core::NodeUser>(),
    )
}

macro_rules! node_user_version {
    ($module:ident, $version:literal, storage = $storage:literal) => {
        #[doc = concat!("`deckhouse.io/", $version, "` NodeUser.")]
        pub mod $module {
            use super::*;

            /// The spec: nodemgr-core's NodeUser spec.
            #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
            #[kube(
                group = "deckhouse.io",
                version = $version,
                kind = "NodeUser",
                plural = "nodeusers",
                singular = "nodeuser",
                status = "NodeUserStatus",
                schema = "manual",
                storage = $storage,
                derive = "PartialEq",
                derive = "Default",
                printcolumn = r#"{"name":"UID","type":"integer","jsonPath":".spec.uid"}"#,
                printcolumn = r#"{"name":"Sudoer","type":"boolean","jsonPath":".spec.isSudoer"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
            )]
            #[serde(transparent)]
            pub struct NodeUserSpec(pub core::NodeUserSpec);

            impl schemars::JsonSchema for NodeUser {
                fn schema_name() -> Cow<'static, str> {
                    Cow::Borrowed("NodeUser")
                }

                fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                    into_schema(node_user_schema())
                }
            }
        }
    };
}

node_user_version!(node_user_v1alpha1, "v1alpha1", storage = false);
node_user_version!(node_user_v1, "v1", storage = true);

pub use node_user_v1::{NodeUser, NodeUserSpec};

impl NodeUser {
    /// The user as nodemgr-core sees it.
    pub fn to_core(&self) -> core::NodeUser {
        core::NodeUser {
            api_version: "deckhouse.io/v1".into(),
            kind: "NodeUser".into(),
            metadata: meta_to_core(&self.metadata),
            spec: self.spec.0.clone(),
            status: self.status.clone(),
        }
    }

    /// A kube object from nodemgr-core's user.
    pub fn from_core(user: &core::NodeUser) -> Self {
        let mut out = Self::new(user.name(), NodeUserSpec(user.spec.clone()));
        out.metadata = meta_from_core(&user.metadata);
        out.status = user.status.clone();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_round_trip_keeps_everything() {
        let mut user = core::NodeUser {
            api_version: "deckhouse.io/v1".into(),
            kind: "NodeUser".into(),
            ..core::NodeUser::default()
        };
        user.metadata.name = Some("ops".into());
        user.spec.uid = Some(1001);
        user.spec.is_sudoer = Some(true);
        let mut status = NodeUserStatus::default();
        status.errors.insert("n1".into(), "boom".into());
        user.status = Some(status);
        assert_eq!(NodeUser::from_core(&user).to_core(), user);

        let mut ngc = core::NodeGroupConfiguration {
            api_version: "deckhouse.io/v1alpha1".into(),
            kind: "NodeGroupConfiguration".into(),
            ..core::NodeGroupConfiguration::default()
        };
        ngc.metadata.name = Some("a.sh".into());
        ngc.spec.content = Some("echo".into());
        ngc.spec.weight = Some(5);
        assert_eq!(NodeGroupConfiguration::from_core(&ngc).to_core(), ngc);
    }
}
