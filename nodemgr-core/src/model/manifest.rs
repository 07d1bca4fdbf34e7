//! Reading manifests: multi-document YAML (or JSON) into typed objects, converting the served
//! NodeGroup versions `v1alpha1`/`v1alpha2` into the one internal model (`v1`).
//!
//! Unknown fields are ignored so that real manifests never fail on a field this version does
//! not model; unknown enum values are kept (see [`crate::string_enum!`]) for `validate` to report.
//!
//! NodeGroups are converted to `v1` by [`crate::conversion`] (Deckhouse's conversion, without a
//! provider cluster configuration: an old `Hybrid` group becomes `CloudPermanent` only when it
//! is named `master`; [`parse_manifest_with`] takes the configuration's groups).

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::conversion::ConversionContext;

use super::node_group::NodeGroup;
use super::node_group_configuration::NodeGroupConfiguration;
use super::node_user::NodeUser;
use super::static_instance::{Instance, SshCredentials, StaticInstance};

/// A typed object read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifest {
    /// A NodeGroup, converted to `v1`.
    NodeGroup(Box<NodeGroup>),
    /// A StaticInstance.
    StaticInstance(Box<StaticInstance>),
    /// An SSHCredentials.
    SshCredentials(Box<SshCredentials>),
    /// An Instance.
    Instance(Box<Instance>),
    /// A NodeGroupConfiguration.
    NodeGroupConfiguration(Box<NodeGroupConfiguration>),
    /// A NodeUser (`v1alpha1`'s `sshPublicKey` kept beside `sshPublicKeys`).
    NodeUser(Box<NodeUser>),
    /// Any other kind; nodemgr does not interpret it.
    Other {
        /// Its `apiVersion`.
        api_version: String,
        /// Its `kind`.
        kind: String,
    },
}

/// A document of a YAML stream, before it is typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Position among the stream's non-empty documents, from 0 (the YAML reader drops empty
    /// documents, so `---` directly followed by `---` takes no number).
    pub index: usize,
    /// The document as a JSON value.
    pub value: Value,
}

/// Why a manifest could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The text is not YAML.
    #[error("failed to parse YAML: {0}")]
    Yaml(String),
    /// A document is not a mapping.
    #[error("document is not an object (a YAML mapping with apiVersion and kind): found {0}")]
    NotAnObject(&'static str),
    /// `apiVersion` or `kind` is missing.
    #[error("missing `{0}`: every Kubernetes object needs apiVersion and kind")]
    MissingField(&'static str),
    /// A nodemgr kind in a version nodemgr does not read.
    #[error("{kind} in apiVersion {api_version} is not supported; use one of: {accepted}")]
    UnsupportedVersion {
        /// The kind.
        kind: String,
        /// The version found.
        api_version: String,
        /// Versions accepted.
        accepted: String,
    },
    /// A field has the wrong type (a string where a number belongs, …).
    #[error("{path}: {message}")]
    Shape {
        /// Dotted path of the field.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The document was expected to hold another kind.
    #[error("expected a {expected}, found {found}")]
    WrongKind {
        /// The kind asked for.
        expected: &'static str,
        /// The kind found.
        found: String,
    },
}

const NODE_GROUP_VERSIONS: &[&str] = &[
    "deckhouse.io/v1",
    "deckhouse.io/v1alpha2",
    "deckhouse.io/v1alpha1",
];
const STATIC_VERSIONS: &[&str] = &["deckhouse.io/v1alpha2", "deckhouse.io/v1alpha1"];
const CONFIGURATION_VERSIONS: &[&str] = &["deckhouse.io/v1alpha1"];
const NODE_USER_VERSIONS: &[&str] = &["deckhouse.io/v1", "deckhouse.io/v1alpha1"];

/// Splits a YAML stream into documents. JSON is YAML, so a JSON object reads too.
///
/// # Errors
/// [`ManifestError::Yaml`] when the text is not YAML.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, ManifestError> {
    let values: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| ManifestError::Yaml(e.to_string()))?;
    Ok(values
        .into_iter()
        .enumerate()
        .map(|(index, value)| Document { index, value })
        .collect())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "an empty document",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T, ManifestError> {
    serde_path_to_error::deserialize(value).map_err(|e| ManifestError::Shape {
        path: e.path().to_string(),
        message: e.into_inner().to_string(),
    })
}

fn check_version(kind: &str, api_version: &str, accepted: &[&str]) -> Result<(), ManifestError> {
    if accepted.contains(&api_version) {
        Ok(())
    } else {
        Err(ManifestError::UnsupportedVersion {
            kind: kind.to_owned(),
            api_version: api_version.to_owned(),
            accepted: accepted.join(", "),
        })
    }
}

/// Converts a `NodeGroup` document of any served version to `v1` in place, with
/// [`crate::conversion::convert`]; a document the conversion refuses is left as it is.
pub fn convert_node_group_to_v1(value: &mut Value, ctx: &ConversionContext) {
    match crate::conversion::convert(value, "deckhouse.io/v1", ctx) {
        Ok(converted) => *value = converted,
        Err(e) => tracing::debug!(error = %e, "NodeGroup left unconverted"),
    }
}

/// Types one document.
///
/// # Errors
/// See [`ManifestError`]: not an object, missing apiVersion/kind, an unsupported version of a
/// nodemgr kind, or a field of the wrong type (with its path).
pub fn parse_manifest(value: Value) -> Result<Manifest, ManifestError> {
    parse_manifest_with(value, &ConversionContext::default())
}

/// [`parse_manifest`], converting old NodeGroup versions with the provider cluster
/// configuration's groups in `ctx`.
///
/// # Errors
/// As [`parse_manifest`].
pub fn parse_manifest_with(
    mut value: Value,
    ctx: &ConversionContext,
) -> Result<Manifest, ManifestError> {
    let Some(object) = value.as_object() else {
        return Err(ManifestError::NotAnObject(kind_of(&value)));
    };
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ManifestError::MissingField("apiVersion"))?
        .to_owned();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ManifestError::MissingField("kind"))?
        .to_owned();
    let ours = api_version.starts_with("deckhouse.io/");
    match kind.as_str() {
        "NodeGroup" if ours => {
            check_version(&kind, &api_version, NODE_GROUP_VERSIONS)?;
            convert_node_group_to_v1(&mut value, ctx);
            Ok(Manifest::NodeGroup(Box::new(typed(value)?)))
        }
        "StaticInstance" if ours => {
            check_version(&kind, &api_version, STATIC_VERSIONS)?;
            Ok(Manifest::StaticInstance(Box::new(typed(value)?)))
        }
        "SSHCredentials" if ours => {
            check_version(&kind, &api_version, STATIC_VERSIONS)?;
            Ok(Manifest::SshCredentials(Box::new(typed(value)?)))
        }
        "Instance" if ours => {
            check_version(&kind, &api_version, STATIC_VERSIONS)?;
            Ok(Manifest::Instance(Box::new(typed(value)?)))
        }
        "NodeGroupConfiguration" if ours => {
            check_version(&kind, &api_version, CONFIGURATION_VERSIONS)?;
            Ok(Manifest::NodeGroupConfiguration(Box::new(typed(value)?)))
        }
        "NodeUser" if ours => {
            check_version(&kind, &api_version, NODE_USER_VERSIONS)?;
            Ok(Manifest::NodeUser(Box::new(typed(value)?)))
        }
        _ => Ok(Manifest::Other { api_version, kind }),
    }
}

/// Reads exactly one NodeGroup from `text`.
///
/// # Errors
/// The text is not YAML, holds no or several documents, or its document is not a valid
/// NodeGroup shape.
pub fn parse_node_group(text: &str) -> Result<NodeGroup, ManifestError> {
    let mut docs: Vec<Document> = parse_documents(text)?
        .into_iter()
        .filter(|d| !d.value.is_null())
        .collect();
    if docs.len() != 1 {
        return Err(ManifestError::WrongKind {
            expected: "single NodeGroup document",
            found: format!("{} documents", docs.len()),
        });
    }
    let doc = docs.remove(0);
    match parse_manifest(doc.value)? {
        Manifest::NodeGroup(ng) => Ok(*ng),
        Manifest::Other { kind, .. } => Err(ManifestError::WrongKind {
            expected: "NodeGroup",
            found: kind,
        }),
        Manifest::StaticInstance(_) => Err(ManifestError::WrongKind {
            expected: "NodeGroup",
            found: "StaticInstance".into(),
        }),
        Manifest::SshCredentials(_) => Err(ManifestError::WrongKind {
            expected: "NodeGroup",
            found: "SSHCredentials".into(),
        }),
        Manifest::Instance(_) => Err(ManifestError::WrongKind {
            expected: "NodeGroup",
            found: "Instance".into(),
        }),
        Manifest::NodeGroupConfiguration(_) => Err(ManifestError::WrongKind {
            expected: "NodeGroup",
            found: "NodeGroupConfiguration".into(),
        }),
        Manifest::NodeUser(_) => Err(ManifestError::WrongKind {
            expected: "NodeGroup",
            found: "NodeUser".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node_group::{CriType, NodeType};

    const MULTI: &str = r#"
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: worker
spec:
  nodeType: CloudEphemeral
  someFutureField: {a: 1}
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: worker}
    minPerZone: 1
    maxPerZone: 3
---
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata:
  name: old
spec:
  nodeType: Cloud
  kubernetesVersion: "1.32"
  docker: {maxConcurrentDownloads: 5}
  static:
    internalNetworkCIDRs: [10.0.0.0/24]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
"#;

    #[test]
    fn reads_every_document_and_converts_old_versions() {
        let docs = parse_documents(MULTI).unwrap();
        assert_eq!(docs.len(), 3);
        let typed: Vec<_> = docs
            .into_iter()
            .map(|d| parse_manifest(d.value).unwrap())
            .collect();
        let Manifest::NodeGroup(new) = &typed[0] else {
            panic!("{:?}", typed[0])
        };
        assert_eq!(new.spec.node_type, Some(NodeType::CloudEphemeral));
        let Manifest::NodeGroup(old) = &typed[1] else {
            panic!("{:?}", typed[1])
        };
        assert_eq!(old.api_version, "deckhouse.io/v1");
        assert_eq!(old.spec.node_type, Some(NodeType::CloudEphemeral));
        // Deckhouse's v1 has no kubernetesVersion: the conversion drops it.
        assert_eq!(old.spec.kubernetes_version, None);
        let docker = old
            .spec
            .cri
            .as_ref()
            .and_then(|c| c.docker.as_ref())
            .unwrap();
        assert_eq!(docker.max_concurrent_downloads, Some(5));
        assert_eq!(old.spec.cri_type(), CriType::Containerd);
        assert!(matches!(&typed[2], Manifest::Other { kind, .. } if kind == "ConfigMap"));
    }

    #[test]
    fn wrong_types_name_the_field() {
        let err = parse_node_group(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: a}\nspec:\n  nodeType: Static\n  kubelet: {maxPods: many}\n",
        )
        .unwrap_err();
        match err {
            ManifestError::Shape { path, .. } => assert_eq!(path, "spec.kubelet.maxPods"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsupported_versions_and_non_objects_are_explained() {
        let err = parse_node_group("apiVersion: deckhouse.io/v2\nkind: NodeGroup\n").unwrap_err();
        assert!(err.to_string().contains("deckhouse.io/v1"), "{err}");
        let err = parse_documents("a: [").unwrap_err();
        assert!(matches!(err, ManifestError::Yaml(_)));
        let err = parse_manifest(Value::String("x".into())).unwrap_err();
        assert_eq!(err, ManifestError::NotAnObject("a string"));
    }

    #[test]
    fn configurations_and_users_are_typed() {
        let docs = parse_documents(
            "apiVersion: deckhouse.io/v1alpha1\nkind: NodeGroupConfiguration\nmetadata: {name: a.sh}\nspec: {content: echo, weight: 5}\n---\napiVersion: deckhouse.io/v1alpha1\nkind: NodeUser\nmetadata: {name: ops}\nspec: {uid: 1001, sshPublicKey: ssh-ed25519 AAAA}\n",
        )
        .unwrap();
        let typed: Vec<_> = docs
            .into_iter()
            .map(|d| parse_manifest(d.value).unwrap())
            .collect();
        let Manifest::NodeGroupConfiguration(ngc) = &typed[0] else {
            panic!("{:?}", typed[0])
        };
        assert_eq!(ngc.weight(), 5);
        let Manifest::NodeUser(user) = &typed[1] else {
            panic!("{:?}", typed[1])
        };
        assert_eq!(user.ssh_public_keys(), vec!["ssh-ed25519 AAAA"]);
        let err = parse_manifest(serde_json::json!({"apiVersion": "deckhouse.io/v1",
            "kind": "NodeGroupConfiguration"}))
        .unwrap_err();
        assert!(
            matches!(err, ManifestError::UnsupportedVersion { .. }),
            "{err}"
        );
    }

    #[test]
    fn unknown_enum_values_survive_parsing() {
        let ng = parse_node_group(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nspec: {nodeType: Metal}\n",
        )
        .unwrap();
        assert_eq!(ng.spec.node_type, Some(NodeType::Unknown("Metal".into())));
    }

    #[test]
    fn round_trip_is_lossless_for_known_fields() {
        let docs = parse_documents(MULTI).unwrap();
        for doc in docs {
            if let Manifest::NodeGroup(ng) = parse_manifest(doc.value).unwrap() {
                let yaml = serde_saphyr::to_string(&*ng).unwrap();
                let again = parse_node_group(&yaml).unwrap();
                assert_eq!(*ng, again);
            }
        }
    }
}
