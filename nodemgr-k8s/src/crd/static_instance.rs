//! `StaticInstance`, `SSHCredentials` and `Instance` (`deckhouse.io`, cluster-scoped; docs/deckhouse.md §2)
//! as kube types around nodemgr-core's specs and statuses.
//!
//! | kind | versions (storage last) | status |
//! |---|---|---|
//! | StaticInstance | `v1alpha1`, `v1alpha2` | subresource; columns Phase, Node, Machine |
//! | SSHCredentials | `v1alpha1`, `v1alpha2` | none |
//! | Instance | `v1alpha1` (not served), `v1alpha2` | subresource, no spec |
//!
//! SSHCredentials converts through nodemgr's conversion webhook (`sudoPassword`, clear, in
//! `v1alpha1` ↔ `sudoPasswordEncoded`, base64, in `v1alpha2`; docs/admission-and-conversion.md
//! §1.2); both fields stay in both schemas so a manifest written against either is not pruned,
//! and the SSH adapter reads either. StaticInstance and Instance versions have one shape.

use std::borrow::Cow;

use kube::CustomResource;
use nodemgr_core::model::{self as core, InstanceStatus, StaticInstanceStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::schema::*;
use crate::convert::{meta_from_core, meta_to_core};

const IPV4: &str = "^((25[0-5]|(2[0-4]|1\\d|[1-9]|)\\d)\\.?\\b){4}$";
const PHASES: &[&str] = &["Error", "Pending", "Bootstrapping", "Running", "Cleaning"];

fn object_ref() -> Value {
    object(vec![
        ("apiVersion", string()),
        ("kind", string()),
        ("name", string()),
        ("namespace", string()),
        ("uid", string()),
    ])
}

fn static_instance_schema() -> Value {
    let spec = required(
        object(vec![
            ("address", pattern(IPV4)),
            (
                "credentialsRef",
                required(
                    object(vec![
                        ("apiVersion", string()),
                        ("kind", string()),
                        ("name", string()),
                    ]),
                    &["kind", "name"],
                ),
            ),
        ]),
        &["address", "credentialsRef"],
    );
    let status = object(vec![
        (
            "currentStatus",
            object(vec![
                ("phase", one_of(PHASES)),
                ("lastUpdateTime", string()),
            ]),
        ),
        (
            "conditions",
            array(object(vec![
                ("type", string()),
                ("status", string()),
                ("severity", string()),
                ("reason", string()),
                ("message", string()),
                ("lastTransitionTime", string()),
            ])),
        ),
        ("machineRef", object_ref()),
        ("nodeRef", object_ref()),
    ]);
    describe_from_model(
        root(
            "A machine nodemgr may bootstrap into a Static group over SSH.",
            None,
            Some(spec),
            Some(status),
        ),
        &model_schema::<core::StaticInstance>(),
    )
}

macro_rules! static_instance_version {
    ($module:ident, $version:literal, storage = $storage:literal) => {
        #[doc = concat!("`deckhouse.io/", $version, "` StaticInstance.")]
        pub mod $module {
            use super::*;

            /// The spec: nodemgr-core's StaticInstance spec.
            #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
            #[kube(
                group = "deckhouse.io",
                version = $version,
                kind = "StaticInstance",
                plural = "staticinstances",
                singular = "staticinstance",
                status = "StaticInstanceStatus",
                schema = "manual",
                storage = $storage,
                derive = "PartialEq",
                derive = "Default",
                printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.currentStatus.phase"}"#,
                printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeRef.name"}"#,
                printcolumn = r#"{"name":"Machine","type":"string","jsonPath":".status.machineRef.name"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
            )]
            #[serde(transparent)]
            pub struct StaticInstanceSpec(pub core::StaticInstanceSpec);

            impl schemars::JsonSchema for StaticInstance {
                fn schema_name() -> Cow<'static, str> {
                    Cow::Borrowed("StaticInstance")
                }

                fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                    into_schema(static_instance_schema())
                }
            }
        }
    };
}

static_instance_version!(static_instance_v1alpha1, "v1alpha1", storage = false);
static_instance_version!(static_instance_v1alpha2, "v1alpha2", storage = true);

pub use static_instance_v1alpha2::{StaticInstance, StaticInstanceSpec};

impl StaticInstance {
    /// The instance as nodemgr-core sees it.
    pub fn to_core(&self) -> core::StaticInstance {
        core::StaticInstance {
            api_version: "deckhouse.io/v1alpha2".into(),
            kind: "StaticInstance".into(),
            metadata: meta_to_core(&self.metadata),
            spec: self.spec.0.clone(),
            status: self.status.clone(),
        }
    }

    /// A kube object from nodemgr-core's instance.
    pub fn from_core(instance: &core::StaticInstance) -> Self {
        let mut si = StaticInstance::new(
            instance.metadata.name.as_deref().unwrap_or_default(),
            StaticInstanceSpec(instance.spec.clone()),
        );
        si.metadata = meta_from_core(&instance.metadata);
        si.status = instance.status.clone();
        si
    }
}

fn ssh_credentials_schema() -> Value {
    let spec = json!({
        "type": "object",
        "properties": {
            "user": string(),
            "privateSSHKey": describe(string(), "Base64 of the PEM private key."),
            "sshPort": default(integer_in(Some(1), Some(65535)), json!(22)),
            "sshExtraArgs": string(),
            "sudoPassword": describe(string(), "sudo password in clear (v1alpha1)."),
            "sudoPasswordEncoded": describe(string(), "sudo password in base64 (v1alpha2)."),
        },
        "required": ["user"],
        "anyOf": [
            { "required": ["privateSSHKey"] },
            { "required": ["sudoPassword"] },
            { "required": ["sudoPasswordEncoded"] },
        ],
    });
    describe_from_model(
        root(
            "How nodemgr logs in to StaticInstances over SSH.",
            None,
            Some(spec),
            None,
        ),
        &model_schema::<core::SshCredentials>(),
    )
}

macro_rules! ssh_credentials_version {
    ($module:ident, $version:literal, storage = $storage:literal) => {
        #[doc = concat!("`deckhouse.io/", $version, "` SSHCredentials.")]
        pub mod $module {
            use super::*;

            /// The spec: nodemgr-core's SSHCredentials spec (its `Debug` redacts secrets).
            #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
            #[kube(
                group = "deckhouse.io",
                version = $version,
                kind = "SSHCredentials",
                plural = "sshcredentials",
                singular = "sshcredentials",
                schema = "manual",
                storage = $storage,
                derive = "PartialEq",
                derive = "Default",
                printcolumn = r#"{"name":"User","type":"string","jsonPath":".spec.user"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
            )]
            #[serde(transparent)]
            pub struct SshCredentialsSpec(pub core::SshCredentialsSpec);

            impl schemars::JsonSchema for SSHCredentials {
                fn schema_name() -> Cow<'static, str> {
                    Cow::Borrowed("SSHCredentials")
                }

                fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                    into_schema(ssh_credentials_schema())
                }
            }
        }
    };
}

ssh_credentials_version!(ssh_credentials_v1alpha1, "v1alpha1", storage = false);
ssh_credentials_version!(ssh_credentials_v1alpha2, "v1alpha2", storage = true);

pub use ssh_credentials_v1alpha2::{SSHCredentials, SshCredentialsSpec};

impl SSHCredentials {
    /// The credentials as nodemgr-core sees them.
    pub fn to_core(&self) -> core::SshCredentials {
        core::SshCredentials {
            api_version: "deckhouse.io/v1alpha2".into(),
            kind: "SSHCredentials".into(),
            metadata: meta_to_core(&self.metadata),
            spec: self.spec.0.clone(),
        }
    }
}

fn instance_schema() -> Value {
    let status = object(vec![
        ("nodeRef", object(vec![("name", string())])),
        (
            "classReference",
            object(vec![("kind", string()), ("name", string())]),
        ),
        ("machineRef", object_ref()),
        (
            "currentStatus",
            object(vec![("phase", string()), ("lastUpdateTime", string())]),
        ),
        (
            "lastOperation",
            object(vec![
                ("description", string()),
                ("lastUpdateTime", string()),
                ("state", string()),
                ("type", string()),
            ]),
        ),
        (
            "bootstrapStatus",
            object(vec![("logsEndpoint", string()), ("description", string())]),
        ),
    ]);
    describe_from_model(
        root(
            "A machine of a NodeGroup (status only); deleting it deletes the machine.",
            None,
            None,
            Some(status),
        ),
        &model_schema::<core::Instance>(),
    )
}

macro_rules! instance_version {
    ($module:ident, $version:literal, storage = $storage:literal, served = $served:literal) => {
        #[doc = concat!("`deckhouse.io/", $version, "` Instance.")]
        pub mod $module {
            use super::*;

            /// Instance has no spec; this empty struct only names the kind.
            #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
            #[kube(
                group = "deckhouse.io",
                version = $version,
                kind = "Instance",
                plural = "instances",
                singular = "instance",
                status = "InstanceStatus",
                schema = "manual",
                storage = $storage,
                served = $served,
                no_spec,
                derive = "PartialEq",
                derive = "Default",
                printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.currentStatus.phase"}"#,
                printcolumn = r#"{"name":"Node","type":"string","jsonPath":".status.nodeRef.name"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
            )]
            pub struct InstanceFields {}

            impl schemars::JsonSchema for Instance {
                fn schema_name() -> Cow<'static, str> {
                    Cow::Borrowed("Instance")
                }

                fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                    into_schema(instance_schema())
                }
            }
        }
    };
}

instance_version!(
    instance_v1alpha1,
    "v1alpha1",
    storage = false,
    served = false
);
instance_version!(instance_v1alpha2, "v1alpha2", storage = true, served = true);

pub use instance_v1alpha2::Instance;

impl Instance {
    /// The instance as nodemgr-core sees it.
    pub fn to_core(&self) -> core::Instance {
        core::Instance {
            api_version: "deckhouse.io/v1alpha2".into(),
            kind: "Instance".into(),
            metadata: meta_to_core(&self.metadata),
            status: self.status.clone().unwrap_or_default(),
        }
    }
}
