//! `StaticInstance`, `SSHCredentials` and `Instance` (`deckhouse.io`, docs/deckhouse.md §2): the machines
//! nodemgr reaches over SSH, the credentials it uses, and the status-only record of a machine.

use serde::{Deserialize, Serialize};

use super::meta::{ObjectMeta, ObjectReference};
use super::node_group::{ClassReference, LastOperation};
use crate::string_enum;

string_enum! {
    /// `status.currentStatus.phase` of a StaticInstance.
    pub enum StaticInstancePhase {
        /// Something failed; `conditions` say what.
        Error = "Error",
        /// Free to be taken by a group.
        Pending = "Pending",
        /// Being bootstrapped over SSH.
        Bootstrapping = "Bootstrapping",
        /// Joined as a node of a group.
        Running = "Running",
        /// Being cleaned up over SSH, back to Pending afterwards.
        Cleaning = "Cleaning",
    }
}

/// A machine nodemgr may bootstrap into a Static group over SSH.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticInstance {
    /// `deckhouse.io/v1alpha2` (or `v1alpha1`, same shape).
    #[serde(default)]
    pub api_version: String,
    /// `StaticInstance`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Where the machine is and how to reach it.
    #[serde(default)]
    pub spec: StaticInstanceSpec,
    /// Where the machine is in its life cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StaticInstanceStatus>,
}

/// `StaticInstance.spec`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticInstanceSpec {
    /// IPv4 address of the machine. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The SSHCredentials to log in with. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_ref: Option<ObjectReference>,
}

/// `StaticInstance.status`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticInstanceStatus {
    /// Phase and when it last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<StaticInstanceCurrentStatus>,
    /// Cluster-API style conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ApiCondition>,
    /// The machine object bound to this instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_ref: Option<ObjectReference>,
    /// The Node this instance became.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<ObjectReference>,
}

/// `status.currentStatus` of a StaticInstance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticInstanceCurrentStatus {
    /// Phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<StaticInstancePhase>,
    /// RFC 3339 time of the last phase change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
}

/// A Cluster-API style condition (with `severity` and `reason`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ApiCondition {
    /// Condition type.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// `Error`, `Warning` or `Info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339 time of the last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// How nodemgr logs in to a StaticInstance. `v1alpha1` carries `sudoPassword` in clear,
/// `v1alpha2` `sudoPasswordEncoded` (base64); both are kept as written.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SshCredentials {
    /// `deckhouse.io/v1alpha1` or `deckhouse.io/v1alpha2`.
    #[serde(default)]
    pub api_version: String,
    /// `SSHCredentials`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The credentials.
    #[serde(default)]
    pub spec: SshCredentialsSpec,
}

/// `SSHCredentials.spec`.
#[derive(Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SshCredentialsSpec {
    /// User to log in as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Base64 of the PEM private key.
    #[serde(
        default,
        rename = "privateSSHKey",
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ssh_key: Option<String>,
    /// SSH port, 1..65535 (default 22).
    #[serde(default, rename = "sshPort", skip_serializing_if = "Option::is_none")]
    pub ssh_port: Option<i64>,
    /// Extra arguments for the `ssh` client.
    #[serde(
        default,
        rename = "sshExtraArgs",
        skip_serializing_if = "Option::is_none"
    )]
    pub ssh_extra_args: Option<String>,
    /// sudo password in clear (`v1alpha1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo_password: Option<String>,
    /// sudo password in base64 (`v1alpha2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sudo_password_encoded: Option<String>,
}

impl std::fmt::Debug for SshCredentialsSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets never reach logs.
        f.debug_struct("SshCredentialsSpec")
            .field("user", &self.user)
            .field(
                "private_ssh_key",
                &self.private_ssh_key.as_ref().map(|_| "<redacted>"),
            )
            .field("ssh_port", &self.ssh_port)
            .field("ssh_extra_args", &self.ssh_extra_args)
            .field(
                "sudo_password",
                &self.sudo_password.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "sudo_password_encoded",
                &self.sudo_password_encoded.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// A machine of a group, status only (`instances.deckhouse.io`). Deleting it deletes the machine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// `deckhouse.io/v1alpha2` (or `v1alpha1`).
    #[serde(default)]
    pub api_version: String,
    /// `Instance`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What is known of the machine.
    #[serde(default)]
    pub status: InstanceStatus,
}

/// `Instance.status`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceStatus {
    /// The Node the machine registered as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<ObjectReference>,
    /// The instance class the machine was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_reference: Option<ClassReference>,
    /// The machine object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_ref: Option<ObjectReference>,
    /// Phase and when it last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<InstanceCurrentStatus>,
    /// Last operation on the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
    /// Where to read the bootstrap logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_status: Option<BootstrapStatus>,
}

/// `Instance.status.currentStatus`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceCurrentStatus {
    /// Phase (`Pending`, `Provisioning`, `Provisioned`, `Running`, `Terminating`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// RFC 3339 time of the last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
}

/// `Instance.status.bootstrapStatus`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct BootstrapStatus {
    /// Endpoint serving the bootstrap logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs_endpoint: Option<String>,
    /// How to read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
