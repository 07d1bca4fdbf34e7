//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and field selectors
//! (`=`, `==`, `!=` on the fields a resource supports), parsed from list/watch query strings
//! and matched against JSON objects.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::status::ApiError;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelRequirement {
    /// `key=value` / `key==value` / `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value` / `key notin (a,b)`: also matches objects without the key.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector(pub Vec<LabelRequirement>);

impl LabelSelector {
    /// Parses the `labelSelector` query syntax.
    ///
    /// # Errors
    /// 400 BadRequest naming the malformed requirement.
    pub fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(LabelSelector(requirements))
    }

    /// Builds a selector from a `metav1.LabelSelector` object (`matchLabels`,
    /// `matchExpressions`), as PodDisruptionBudgets carry. `None` if malformed.
    pub fn from_object(selector: &Value) -> Option<Self> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                requirements.push(LabelRequirement::In(
                    k.clone(),
                    vec![v.as_str()?.to_owned()],
                ));
            }
        }
        for expr in selector
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = expr.get("key")?.as_str()?.to_owned();
            let values: Vec<String> = expr
                .get("values")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            requirements.push(match expr.get("operator")?.as_str()? {
                "In" => LabelRequirement::In(key, values),
                "NotIn" => LabelRequirement::NotIn(key, values),
                "Exists" => LabelRequirement::Exists(key),
                "DoesNotExist" => LabelRequirement::DoesNotExist(key),
                _ => return None,
            });
        }
        Some(LabelSelector(requirements))
    }

    /// Whether labels (`metadata.labels` of an object) satisfy every requirement.
    pub fn matches_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            LabelRequirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            LabelRequirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            LabelRequirement::Exists(k) => labels.contains_key(k),
            LabelRequirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.is_empty() || self.matches_labels(&labels_of(object))
    }

    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The `metadata.labels` of an object as a map (non-string values ignored).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(part: &str) -> Result<LabelRequirement, ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "unable to parse requirement: invalid label selector: {part:?}"
        ))
    };
    let check_key = |k: &str| -> Result<String, ApiError> {
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) || k.contains(['(', ')', '=', '!']) {
            Err(bad())
        } else {
            Ok(k.to_owned())
        }
    };
    if let Some(key) = part.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(check_key(key)?));
    }
    if let Some((k, v)) = part.split_once("!=") {
        return Ok(LabelRequirement::NotIn(
            check_key(k)?,
            vec![v.trim().to_owned()],
        ));
    }
    if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(LabelRequirement::In(
            check_key(k)?,
            vec![v.trim().to_owned()],
        ));
    }
    for (word, negated) in [(" notin ", true), (" in ", false)] {
        if let Some((k, rest)) = part.split_once(word) {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(bad)?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .collect();
            let key = check_key(k)?;
            return Ok(if negated {
                LabelRequirement::NotIn(key, values)
            } else {
                LabelRequirement::In(key, values)
            });
        }
    }
    Ok(LabelRequirement::Exists(check_key(part)?))
}

/// One field-selector term.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    /// Dotted path, e.g. `spec.nodeName`.
    pub field: String,
    /// The compared value.
    pub value: String,
    /// `!=` rather than `=`.
    pub negated: bool,
}

/// A parsed field selector: all terms must hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector(pub Vec<FieldRequirement>);

impl FieldSelector {
    /// Parses `a=b,c!=d`, checking each field with `supported`.
    ///
    /// # Errors
    /// 400 BadRequest for malformed terms and for fields the resource does not support
    /// (`field label not supported: x`), as kube-apiserver answers.
    pub fn parse(text: &str, supported: impl Fn(&str) -> bool) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, negated) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, v, false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid field selector: {part:?}: expected field=value"
                )));
            };
            let field = field.trim();
            if !supported(field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push(FieldRequirement {
                field: field.to_owned(),
                value: value.trim().to_owned(),
                negated,
            });
        }
        Ok(FieldSelector(terms))
    }

    /// Whether the object satisfies every term; a missing field compares as `""`.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|t| {
            let actual = field_value(object, &t.field);
            (actual == t.value) != t.negated
        })
    }
}

/// The string form of a dotted field of an object (`""` when absent), as field selectors see it.
pub fn field_value(object: &Value, field: &str) -> String {
    let mut node = object;
    for segment in field.split('.') {
        match node.get(segment) {
            Some(child) => node = child,
            None => return String::new(),
        }
    }
    match node {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "n1", "labels": labels}, "spec": {"nodeName": "w1", "unschedulable": true}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=be", false),
            ("app in (db),tier", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn fields_are_checked_and_matched() {
        let o = obj(json!({}));
        let ok = |f: &str| matches!(f, "metadata.name" | "spec.nodeName" | "spec.unschedulable");
        assert!(
            FieldSelector::parse("spec.nodeName=w1", ok)
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName!=w1", ok)
                .unwrap()
                .matches(&o)
        );
        assert!(
            FieldSelector::parse("metadata.name==n1,spec.unschedulable=true", ok)
                .unwrap()
                .matches(&o)
        );
        let err = FieldSelector::parse("spec.other=x", ok).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, "field label not supported: spec.other")
        );
    }

    #[test]
    fn selector_objects() {
        let sel = LabelSelector::from_object(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["be"]}]}))
        .unwrap();
        assert!(sel.matches(&obj(json!({"app": "web"}))));
        assert!(!sel.matches(&obj(json!({"app": "web", "tier": "be"}))));
    }
}
