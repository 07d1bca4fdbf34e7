//! Decides whether a NodeGroup, StaticInstance, SSHCredentials, NodeGroupConfiguration or
//! NodeUser is acceptable, as Deckhouse's
//! CRD schemas and its `nodegroup-policy.deckhouse.io` webhook do (docs/deckhouse.md §1.1, §1.2, §2), and
//! says so in errors a person can act on: each [`FieldError`] names the field, what is wrong
//! and what would be accepted.
//!
//! Validation never stops at the first problem: every function returns **all** errors, in
//! field order, and an empty list means valid.
//!
//! Rules that need to know the cluster (the cluster prefix, the provider's zones, custom
//! toleration keys, node labels) read a [`ValidationContext`]; its default knows nothing, and
//! rules whose input is unknown are skipped, except taint-key tolerability, which is checked
//! against the built-in keys plus [`ValidationContext::custom_toleration_keys`].
//!
//! Webhook rules 3 (maxPods vs subnet) and 6 (CRI change on a master with few API endpoints)
//! are warnings in Deckhouse, not rejections: [`crate::admission`] returns them, not this module.

mod credentials;
mod node_group;
mod node_group_configuration;
mod node_user;
pub mod syntax;
mod unknown_fields;

use std::collections::BTreeSet;

use serde_json::Value;

use crate::conversion::ConversionContext;
use crate::model::{Manifest, ManifestError, parse_manifest_with};

pub use credentials::{validate_ssh_credentials, validate_static_instance};
pub use node_group::{
    ACCEPTED_KUBERNETES_VERSIONS, BUILTIN_TOLERATION_KEYS, INSTANCE_CLASS_KINDS,
    RESERVED_DOMAIN_EXCEPTIONS, validate_node_group, validate_node_group_update,
};
pub use node_group_configuration::{MAX_CONFIGURATION_WEIGHT, validate_node_group_configuration};
pub use node_user::{MAX_NODE_USER_UID, validate_node_user};
pub use unknown_fields::{closest, unknown_fields};

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, thiserror::Error)]
#[error("{path}: {message}")]
pub struct FieldError {
    /// Dotted path of the field, with list indices and quoted map keys:
    /// `spec.cloudInstances.minPerZone`, `spec.nodeTemplate.taints[1].effect`,
    /// `spec.nodeTemplate.labels["Bad Key"]`.
    pub path: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl FieldError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// What the validator knows about the cluster. The default knows nothing, and the rules that
/// depend on an unknown fact are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationContext {
    /// Length of the cluster prefix in a Cloud cluster (webhook rule 1, on create): a name is
    /// accepted when `63 − prefix − 1 − len(name) − 21 ≥ 0`.
    pub cluster_prefix_len: Option<usize>,
    /// Zones of the provider's configuration (webhook rule 4); `None` = unknown.
    pub known_zones: Option<BTreeSet<String>>,
    /// `global.modules.placement.customTolerationKeys`: taint keys every Deckhouse component
    /// tolerates besides the built-in ones (webhook rule 7).
    pub custom_toleration_keys: Vec<String>,
    /// Nodes of the group labelled `containerd-config=custom`: the CRI type may not change
    /// while there are any (webhook rule 12, on update).
    pub nodes_with_custom_containerd_config: Vec<String>,
    /// Nodes of the group labelled `containerd-v2-unsupported`: ContainerdV2 and memorySwap
    /// may not be switched on while there are any (webhook rules 13, 14).
    pub nodes_without_containerd_v2: Vec<String>,
}

/// Collects errors under a path prefix.
#[derive(Debug, Default)]
pub(crate) struct Errors(pub(crate) Vec<FieldError>);

impl Errors {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(path, message));
    }

    /// Reports a `Result` of a syntax check at `path`.
    pub(crate) fn check(&mut self, path: impl Into<String>, result: Result<(), String>) {
        if let Err(message) = result {
            self.push(path, message);
        }
    }

    /// `value` must be within `min..=max`.
    pub(crate) fn range(&mut self, path: &str, value: Option<i64>, min: i64, max: i64) {
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            self.push(path, format!("{v} is out of range; must be {min}..{max}"));
        }
    }

    /// `value` must be at least `min`.
    pub(crate) fn at_least(&mut self, path: &str, value: Option<i64>, min: i64) {
        if let Some(v) = value
            && v < min
        {
            self.push(path, format!("{v} is too small; must be >= {min}"));
        }
    }
}

/// Message for an enum value outside its accepted spellings.
pub(crate) fn unknown_value(value: &str, field: &str, known: &[&str]) -> String {
    format!(
        "{value:?} is not a known {field}; accepted: {}",
        known.join(", ")
    )
}

fn parse_error(e: ManifestError) -> FieldError {
    match e {
        ManifestError::Shape { path, message } => {
            let path = if path.is_empty() || path == "." {
                "<document>".to_owned()
            } else {
                path
            };
            FieldError::new(path, message)
        }
        ManifestError::MissingField(field) => FieldError::new(field, e.to_string()),
        ManifestError::UnsupportedVersion { .. } => FieldError::new("apiVersion", e.to_string()),
        ManifestError::WrongKind { .. } => FieldError::new("kind", e.to_string()),
        ManifestError::NotAnObject(_) | ManifestError::Yaml(_) => {
            FieldError::new("<document>", e.to_string())
        }
    }
}

/// Types one document ([`crate::model::parse_manifest`]) and runs the validator of its kind. A document that
/// cannot be typed gives one error at the offending path (`apiVersion`, `kind`, a field of the
/// wrong type, or `<document>` when it is not an object). Kinds nodemgr does not validate
/// (Instance, ConfigMaps, …) give no errors.
pub fn validate_document(value: Value, ctx: &ValidationContext) -> Vec<FieldError> {
    validate_document_with(value, ctx, &ConversionContext::default())
}

/// [`validate_document`], reading an old-version NodeGroup (`v1alpha1`, `v1alpha2`) as the
/// conversion webhook would with `conversion`: a `Hybrid` group named in the provider cluster
/// configuration is validated as CloudPermanent, any other as CloudStatic
/// (docs/admission-and-conversion.md §1).
pub fn validate_document_with(
    value: Value,
    ctx: &ValidationContext,
    conversion: &ConversionContext,
) -> Vec<FieldError> {
    let old_fields = old_node_group_fields(&value);
    let mut errors = validate_typed(value, ctx, conversion);
    errors.extend(old_fields);
    errors
}

/// Errors of the old-version NodeGroup fields the conversion to `v1` drops.
fn old_node_group_fields(value: &Value) -> Vec<FieldError> {
    let old = matches!(
        value.get("apiVersion").and_then(Value::as_str),
        Some("deckhouse.io/v1alpha1" | "deckhouse.io/v1alpha2")
    );
    if !old || value.get("kind").and_then(Value::as_str) != Some("NodeGroup") {
        return Vec::new();
    }
    let spec = value.get("spec");
    let subset = serde_json::json!({
        "kubernetesVersion": spec.and_then(|s| s.get("kubernetesVersion")),
        "static": spec.and_then(|s| s.get("static")),
    });
    let spec: crate::model::NodeGroupSpec = match serde_path_to_error::deserialize(subset) {
        Ok(spec) => spec,
        Err(e) => {
            return vec![FieldError::new(
                format!("spec.{}", e.path()),
                e.into_inner().to_string(),
            )];
        }
    };
    let mut e = Errors::default();
    node_group::check_old_version_fields(&mut e, &spec);
    e.0
}

/// Removes the field at a dotted `path` (`spec.taints[1].effect`) from `value`; false when the
/// path does not lead to a field.
fn remove_at(value: &mut Value, path: &str) -> bool {
    let mut segments: Vec<&str> = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = part.split_once('[').map_or((part, ""), |(n, r)| (n, r));
        if !name.is_empty() {
            segments.push(name);
        }
        while let Some((index, after)) = rest.split_once(']') {
            segments.push(index);
            rest = after.trim_start_matches('[');
        }
    }
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match at {
            Value::Object(map) => map.get_mut(*segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else {
            return false;
        };
        at = next;
    }
    match at {
        Value::Object(map) => map.remove(*last).is_some(),
        Value::Array(items) => match last.parse::<usize>() {
            Ok(i) if i < items.len() => {
                items[i] = Value::Null;
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// How many fields of the wrong type one document may report before the rest is skipped.
const MAX_SHAPE_ERRORS: usize = 32;

fn validate_typed(
    value: Value,
    ctx: &ValidationContext,
    conversion: &ConversionContext,
) -> Vec<FieldError> {
    // A field of the wrong type is reported, taken out and the document read again, so that
    // one type error does not hide the document's other errors.
    let mut value = value;
    let mut shape_errors: Vec<FieldError> = Vec::new();
    loop {
        match parse_manifest_with(value.clone(), conversion) {
            Err(ManifestError::Shape { path, message })
                if shape_errors.len() < MAX_SHAPE_ERRORS =>
            {
                let removed = remove_at(&mut value, &path);
                shape_errors.push(parse_error(ManifestError::Shape {
                    path: path.clone(),
                    message,
                }));
                if !removed {
                    return shape_errors;
                }
            }
            Err(e) => {
                shape_errors.push(parse_error(e));
                return shape_errors;
            }
            Ok(typed) => {
                let reported: Vec<String> = shape_errors.iter().map(|e| e.path.clone()).collect();
                let rest = validate_kind(typed, ctx)
                    .into_iter()
                    .filter(|e| !reported.contains(&e.path));
                shape_errors.extend(rest);
                return shape_errors;
            }
        }
    }
}

fn validate_kind(typed: Manifest, ctx: &ValidationContext) -> Vec<FieldError> {
    match Ok::<Manifest, ManifestError>(typed) {
        Err(e) => vec![parse_error(e)],
        Ok(Manifest::NodeGroup(ng)) => validate_node_group(&ng, ctx),
        Ok(Manifest::StaticInstance(si)) => validate_static_instance(&si),
        Ok(Manifest::SshCredentials(c)) => validate_ssh_credentials(&c),
        Ok(Manifest::NodeGroupConfiguration(c)) => validate_node_group_configuration(&c),
        Ok(Manifest::NodeUser(u)) => validate_node_user(&u),
        Ok(Manifest::Instance(_) | Manifest::Other { .. }) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn field_error_displays_path_then_message() {
        let e = FieldError::new("spec.nodeType", "required");
        assert_eq!(e.to_string(), "spec.nodeType: required");
    }

    #[test]
    fn documents_dispatch_by_kind() {
        let ctx = ValidationContext::default();
        let ok = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": "w"}, "spec": {"nodeType": "Static"}});
        assert_eq!(validate_document(ok, &ctx), vec![]);
        let bad = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": "w"}, "spec": {}});
        let paths: Vec<_> = validate_document(bad, &ctx)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, vec!["spec.nodeType"]);
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert_eq!(validate_document(other, &ctx), vec![]);
        let si = json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "StaticInstance",
            "metadata": {"name": "n1"}, "spec": {"address": "10.0.0.1"}});
        let paths: Vec<_> = validate_document(si, &ctx)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, vec!["spec.credentialsRef"]);
    }

    #[test]
    fn an_old_hybrid_group_is_validated_as_the_conversion_types_it() {
        let ctx = ValidationContext::default();
        let hybrid = json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "NodeGroup",
            "metadata": {"name": "frontend"},
            "spec": {"nodeType": "Hybrid", "staticInstances": {"count": 1}}});
        // Without the provider configuration: CloudStatic, which takes staticInstances.
        assert_eq!(validate_document(hybrid.clone(), &ctx), vec![]);
        // Named in it: CloudPermanent, which does not.
        let provider = ConversionContext {
            provider_node_groups: ["frontend".to_owned()].into(),
        };
        let errors = validate_document_with(hybrid.clone(), &ctx, &provider);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].path, "spec.staticInstances");
        assert!(errors[0].message.contains("CloudPermanent"), "{errors:?}");
        // Another group's name changes nothing.
        let other = ConversionContext {
            provider_node_groups: ["backend".to_owned()].into(),
        };
        assert_eq!(validate_document_with(hybrid, &ctx, &other), vec![]);
    }

    #[test]
    fn old_version_fields_are_checked_before_the_conversion_drops_them() {
        let ctx = ValidationContext::default();
        let old = json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "NodeGroup",
            "metadata": {"name": "w"},
            "spec": {"nodeType": "Static", "kubernetesVersion": "1.25",
                "static": {"internalNetworkCIDRs": ["nope"]}}});
        let paths: Vec<_> = validate_document(old, &ctx)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.kubernetesVersion",
                "spec.static.internalNetworkCIDRs[0]"
            ]
        );
        let wrong = json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroup",
            "metadata": {"name": "w"}, "spec": {"nodeType": "Static", "kubernetesVersion": 1.3}});
        let paths: Vec<_> = validate_document(wrong, &ctx)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, ["spec.kubernetesVersion"]);
    }

    #[test]
    fn a_type_error_does_not_hide_the_other_errors() {
        let ctx = ValidationContext::default();
        let doc = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": "w"},
            "spec": {"nodeType": "Static", "kubelet": {"maxPods": "many"},
                "nodeTemplate": {"taints": [{"key": "a", "effect": 3}]},
                "disruptions": {"approvalMode": "RollingUpdate"}}});
        let paths: Vec<_> = validate_document(doc, &ctx)
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.kubelet.maxPods",
                "spec.nodeTemplate.taints[0].effect",
                "spec.nodeTemplate.taints[0].key",
                "spec.disruptions.approvalMode"
            ],
        );
        let mut v = json!({"a": {"b": [1, {"c": 2}]}});
        assert!(remove_at(&mut v, "a.b[1].c"));
        assert_eq!(v, json!({"a": {"b": [1, {}]}}));
        assert!(!remove_at(&mut v, "a.x.y"));
    }

    #[test]
    fn parse_errors_become_field_errors() {
        let ctx = ValidationContext::default();
        let wrong_type = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "spec": {"nodeType": "Static", "kubelet": {"maxPods": "many"}}});
        let errors = validate_document(wrong_type, &ctx);
        // The type error comes first; the document's other errors follow it.
        assert_eq!(errors[0].path, "spec.kubelet.maxPods");
        assert_eq!(
            errors
                .iter()
                .filter(|e| e.path == "spec.kubelet.maxPods")
                .count(),
            1
        );
        let no_kind = json!({"apiVersion": "deckhouse.io/v1"});
        assert_eq!(validate_document(no_kind, &ctx)[0].path, "kind");
        let version = json!({"apiVersion": "deckhouse.io/v9", "kind": "NodeGroup"});
        let errors = validate_document(version, &ctx);
        assert_eq!(errors[0].path, "apiVersion");
        assert!(
            errors[0].message.contains("deckhouse.io/v1"),
            "{}",
            errors[0]
        );
        let scalar = json!("hello");
        assert_eq!(validate_document(scalar, &ctx)[0].path, "<document>");
    }
}
