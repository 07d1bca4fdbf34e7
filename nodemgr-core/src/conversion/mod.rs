//! Converts nodemgr's objects between the `deckhouse.io` versions the API serves, as
//! Deckhouse's conversion webhooks do (docs/admission-and-conversion.md): NodeGroup
//! `v1alpha1` ↔ `v1alpha2` ↔ `v1`, SSHCredentials `v1alpha1` ↔ `v1alpha2`, NodeUser
//! `v1alpha1` ↔ `v1`, and the same-shape kinds StaticInstance and Instance.
//!
//! This is the one conversion of the workspace: the manifest reader, the `nodemgr convert`
//! command, the Kubernetes adapter and the ConversionReview webhook all call [`convert`].
//! It operates on `serde_json::Value` so fields the typed model does not know survive.
//!
//! A conversion goes step by step through the versions in between (a NodeGroup `v1alpha1` →
//! `v1` passes `v1alpha2`), one file per kind holding its steps. Converting an object to the
//! version it already has returns it unchanged, and converting twice to one version gives
//! what converting once gave (both are property tests).

mod node_group;
mod node_user;
mod same_shape;
mod ssh_credentials;

use std::collections::BTreeSet;

use serde_json::{Map, Value};

pub use node_group::{NODE_GROUP_VERSIONS, node_type_to_v1};
pub use node_user::NODE_USER_VERSIONS;
pub use same_shape::{INSTANCE_VERSIONS, STATIC_INSTANCE_VERSIONS};
pub use ssh_credentials::SSH_CREDENTIALS_VERSIONS;

/// The API group of every kind converted here.
pub const GROUP: &str = "deckhouse.io";

/// Key of the provider cluster configuration in the Secret
/// `kube-system/d8-provider-cluster-configuration`.
pub const PROVIDER_CONFIGURATION_KEY: &str = "cloud-provider-cluster-configuration.yaml";

/// What a conversion needs to know about the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConversionContext {
    /// Names of the node groups of the provider cluster configuration (`nodeGroups[].name`):
    /// an old-version `Hybrid` group of one of these names becomes `CloudPermanent`.
    pub provider_node_groups: BTreeSet<String>,
}

impl ConversionContext {
    /// Reads the provider cluster configuration: either the configuration document itself
    /// (`apiVersion: deckhouse.io/v1`, `kind: …ClusterConfiguration`, with `nodeGroups`) or the
    /// Secret that holds it under [`PROVIDER_CONFIGURATION_KEY`] (base64, as
    /// `kubectl get secret -o yaml` prints it).
    ///
    /// # Errors
    /// [`ConversionError::ProviderConfiguration`] when the text is not YAML, the Secret lacks
    /// the key or its value is not base64 UTF-8, or `nodeGroups` is not a list of objects with
    /// a string `name`.
    pub fn from_provider_cluster_configuration(text: &str) -> Result<Self, ConversionError> {
        let bad = |message: String| ConversionError::ProviderConfiguration { message };
        let value: Value = serde_saphyr::from_str(text).map_err(|e| {
            bad(format!(
                "not YAML: {e}; pass the configuration or its Secret"
            ))
        })?;
        let value = if value.get("kind").and_then(Value::as_str) == Some("Secret") {
            let encoded = value
                .get("data")
                .and_then(|d| d.get(PROVIDER_CONFIGURATION_KEY))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    bad(format!(
                        "the Secret has no data key {PROVIDER_CONFIGURATION_KEY}; pass \
                         kube-system/d8-provider-cluster-configuration"
                    ))
                })?;
            let decoded = decode_base64(encoded)
                .map_err(|e| bad(format!("data.{PROVIDER_CONFIGURATION_KEY}: {e}")))?;
            serde_saphyr::from_str(&decoded).map_err(|e| {
                bad(format!(
                    "data.{PROVIDER_CONFIGURATION_KEY} is not YAML: {e}"
                ))
            })?
        } else {
            value
        };
        let mut provider_node_groups = BTreeSet::new();
        match value.get("nodeGroups") {
            None | Some(Value::Null) => {}
            Some(Value::Array(groups)) => {
                for (i, group) in groups.iter().enumerate() {
                    let name = group.get("name").and_then(Value::as_str).ok_or_else(|| {
                        bad(format!("nodeGroups[{i}].name is missing or not a string"))
                    })?;
                    provider_node_groups.insert(name.to_owned());
                }
            }
            Some(_) => return Err(bad("nodeGroups is not a list".into())),
        }
        Ok(Self {
            provider_node_groups,
        })
    }
}

/// Why an object could not be converted. Nothing is changed when a conversion fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    /// The object is not a JSON object.
    #[error("the object is not a mapping with apiVersion and kind")]
    NotAnObject,
    /// `apiVersion` or `kind` is missing or not a string.
    #[error("missing `{0}`: every Kubernetes object needs apiVersion and kind")]
    MissingField(&'static str),
    /// The kind is not one nodemgr converts.
    #[error(
        "{kind} ({api_version}) is not a kind nodemgr converts; \
         it converts NodeGroup, SSHCredentials, NodeUser, StaticInstance and Instance"
    )]
    UnknownKind {
        /// The object's kind.
        kind: String,
        /// The object's apiVersion.
        api_version: String,
    },
    /// The object's version, or the one asked for, is not served for its kind.
    #[error("{kind} has no version {api_version}; served versions: {served}")]
    UnsupportedVersion {
        /// The kind.
        kind: String,
        /// The version found or asked for.
        api_version: String,
        /// The versions served, as `deckhouse.io/VERSION`.
        served: String,
    },
    /// A field's value cannot be carried into the other version.
    #[error("{path}: {message}")]
    Field {
        /// Dotted path of the field.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The provider cluster configuration could not be read.
    #[error("failed to read the provider cluster configuration: {message}")]
    ProviderConfiguration {
        /// What is wrong.
        message: String,
    },
}

/// The versions (without the group) served for `kind`, oldest first, or `None` for a kind
/// nodemgr does not convert.
pub fn served_versions(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "NodeGroup" => Some(NODE_GROUP_VERSIONS),
        "SSHCredentials" => Some(SSH_CREDENTIALS_VERSIONS),
        "NodeUser" => Some(NODE_USER_VERSIONS),
        "StaticInstance" => Some(STATIC_INSTANCE_VERSIONS),
        "Instance" => Some(INSTANCE_VERSIONS),
        _ => None,
    }
}

fn version_of<'a>(
    kind: &str,
    api_version: &'a str,
    served: &[&str],
) -> Result<&'a str, ConversionError> {
    api_version
        .strip_prefix(GROUP)
        .and_then(|v| v.strip_prefix('/'))
        .filter(|v| served.contains(v))
        .ok_or_else(|| ConversionError::UnsupportedVersion {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            served: served
                .iter()
                .map(|v| format!("{GROUP}/{v}"))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Converts `object` to `desired_api_version` (`deckhouse.io/VERSION`) and returns the
/// converted copy; `object` itself is not changed.
///
/// # Errors
/// See [`ConversionError`]: not an object, no apiVersion/kind, a kind nodemgr does not
/// convert, a version not served for the kind (the object's or the desired one), or a field
/// that cannot be carried over (an SSHCredentials `sudoPasswordEncoded` that is not base64).
pub fn convert(
    object: &Value,
    desired_api_version: &str,
    ctx: &ConversionContext,
) -> Result<Value, ConversionError> {
    let map = object.as_object().ok_or(ConversionError::NotAnObject)?;
    let api_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ConversionError::MissingField("apiVersion"))?;
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConversionError::MissingField("kind"))?;
    let served = served_versions(kind).ok_or_else(|| ConversionError::UnknownKind {
        kind: kind.to_owned(),
        api_version: api_version.to_owned(),
    })?;
    let from = version_of(kind, api_version, served)?;
    let to = version_of(kind, desired_api_version, served)?;
    let mut out = map.clone();
    if from != to {
        match kind {
            "NodeGroup" => node_group::convert(&mut out, from, to, ctx),
            "SSHCredentials" => ssh_credentials::convert(&mut out, from, to)?,
            "NodeUser" => node_user::convert(&mut out, from, to),
            _ => {}
        }
        out.insert("apiVersion".into(), Value::String(format!("{GROUP}/{to}")));
    }
    Ok(Value::Object(out))
}

/// The object's `spec` as a mutable map, if it has one.
fn spec_mut(object: &mut Map<String, Value>) -> Option<&mut Map<String, Value>> {
    object.get_mut("spec").and_then(Value::as_object_mut)
}

/// Standard base64 with padding, as Go's `base64.StdEncoding` writes it.
pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Decodes standard base64 (as Go's `base64.StdEncoding`) into UTF-8 text.
pub(crate) fn decode_base64(text: &str) -> Result<String, String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("is not base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "decodes to bytes that are not UTF-8 text".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn base64_matches_the_standard_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode_base64(plain.as_bytes()), encoded);
            assert_eq!(decode_base64(encoded).as_deref(), Ok(plain));
        }
        assert!(decode_base64("Zm9").is_err());
        assert!(decode_base64("Zm=v").is_err());
        assert!(decode_base64("Z!9v").is_err());
    }

    proptest! {
        #[test]
        fn base64_round_trips(s in ".{0,40}") {
            prop_assert_eq!(decode_base64(&encode_base64(s.as_bytes())), Ok(s));
        }
    }

    #[test]
    fn unknown_kinds_and_versions_are_named() {
        let ctx = ConversionContext::default();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let err = convert(&cm, "deckhouse.io/v1", &ctx).unwrap_err();
        assert!(err.to_string().contains("ConfigMap"), "{err}");
        let ng = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup"});
        let err = convert(&ng, "deckhouse.io/v2", &ctx).unwrap_err();
        assert_eq!(
            err.to_string(),
            "NodeGroup has no version deckhouse.io/v2; served versions: deckhouse.io/v1alpha1, \
             deckhouse.io/v1alpha2, deckhouse.io/v1"
        );
        assert_eq!(
            convert(&json!([1]), "deckhouse.io/v1", &ctx),
            Err(ConversionError::NotAnObject)
        );
        assert_eq!(
            convert(&json!({"kind": "NodeGroup"}), "deckhouse.io/v1", &ctx),
            Err(ConversionError::MissingField("apiVersion"))
        );
    }

    #[test]
    fn same_shape_kinds_change_only_their_api_version() {
        let si = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "StaticInstance",
            "metadata": {"name": "a"}, "spec": {"address": "10.0.0.1"}});
        let out = convert(&si, "deckhouse.io/v1alpha2", &ConversionContext::default()).unwrap();
        let mut expected = si.clone();
        expected["apiVersion"] = json!("deckhouse.io/v1alpha2");
        assert_eq!(out, expected);
    }

    #[test]
    fn provider_configuration_is_read_plain_or_from_its_secret() {
        let plain = "apiVersion: deckhouse.io/v1\nkind: OpenStackClusterConfiguration\n\
                     nodeGroups:\n- name: front\n  replicas: 2\n- name: db\n";
        let ctx = ConversionContext::from_provider_cluster_configuration(plain).unwrap();
        assert_eq!(
            ctx.provider_node_groups,
            BTreeSet::from(["front".to_owned(), "db".to_owned()])
        );
        let secret = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: d8-provider-cluster-configuration}}\n\
             data:\n  {PROVIDER_CONFIGURATION_KEY}: {}\n",
            encode_base64(plain.as_bytes())
        );
        assert_eq!(
            ConversionContext::from_provider_cluster_configuration(&secret).unwrap(),
            ctx
        );
        let err =
            ConversionContext::from_provider_cluster_configuration("nodeGroups: 3\n").unwrap_err();
        assert!(
            err.to_string().contains("nodeGroups is not a list"),
            "{err}"
        );
        let err = ConversionContext::from_provider_cluster_configuration(
            "kind: Secret\ndata: {other: eA==}\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains(PROVIDER_CONFIGURATION_KEY),
            "{err}"
        );
    }
}
