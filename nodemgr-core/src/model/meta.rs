//! The Kubernetes metadata shapes the model shares: object metadata, label selectors and
//! object references, as the Kubernetes API spells them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::string_enum;

/// The part of `metadata` nodemgr reads and writes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace (none for cluster-scoped kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Unique ID given by the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Version for optimistic concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Generation of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Finalizers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// RFC 3339 creation time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// RFC 3339 time deletion was requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

string_enum! {
    /// Operator of a label selector requirement.
    pub enum SelectorOperator {
        /// The label's value is one of `values`.
        In = "In",
        /// The label is absent or its value is none of `values`.
        NotIn = "NotIn",
        /// The label is present.
        Exists = "Exists",
        /// The label is absent.
        DoesNotExist = "DoesNotExist",
    }
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// Label key.
    #[serde(default)]
    pub key: String,
    /// Operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<SelectorOperator>,
    /// Values for `In`/`NotIn`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// A Kubernetes label selector; an empty one matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Exact matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Expressions, all of which must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

impl LabelSelectorRequirement {
    /// Whether `labels` satisfy this requirement. An unknown operator matches nothing.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let values = self.values.as_deref().unwrap_or_default();
        let value = labels.get(&self.key);
        match &self.operator {
            Some(SelectorOperator::In) => value.is_some_and(|v| values.contains(v)),
            Some(SelectorOperator::NotIn) => value.is_none_or(|v| !values.contains(v)),
            Some(SelectorOperator::Exists) => value.is_some(),
            Some(SelectorOperator::DoesNotExist) => value.is_none(),
            Some(SelectorOperator::Unknown(_)) | None => false,
        }
    }
}

impl LabelSelector {
    /// Whether `labels` satisfy every part of the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let labels_match = self
            .match_labels
            .iter()
            .flatten()
            .all(|(k, v)| labels.get(k) == Some(v));
        labels_match
            && self
                .match_expressions
                .iter()
                .flatten()
                .all(|req| req.matches(labels))
    }
}

/// A reference to another object (`credentialsRef`, `nodeRef`, `machineRef`, …).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name of the referent.
    #[serde(default)]
    pub name: String,
    /// Namespace of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// UID of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&labels(&[])));
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let req = |op: SelectorOperator, values: Option<Vec<&str>>| LabelSelectorRequirement {
            key: "zone".into(),
            operator: Some(op),
            values: values.map(|v| v.into_iter().map(String::from).collect()),
        };
        let a = labels(&[("zone", "a")]);
        let none = labels(&[]);
        assert!(req(SelectorOperator::In, Some(vec!["a", "b"])).matches(&a));
        assert!(!req(SelectorOperator::In, Some(vec!["b"])).matches(&a));
        assert!(!req(SelectorOperator::In, Some(vec!["a"])).matches(&none));
        assert!(req(SelectorOperator::NotIn, Some(vec!["b"])).matches(&a));
        assert!(req(SelectorOperator::NotIn, Some(vec!["b"])).matches(&none));
        assert!(req(SelectorOperator::Exists, None).matches(&a));
        assert!(req(SelectorOperator::DoesNotExist, None).matches(&none));
        assert!(!req(SelectorOperator::Unknown("Gt".into()), None).matches(&a));
    }
}
