//! Finds the fields of a document its version's schema does not know (what kube-apiserver
//! refuses with `fieldValidation=Strict`, kubectl's default, and prunes otherwise), and names
//! the closest known field of the same object, so a typo (`update.maxConcurent`) is reported
//! as one instead of silently dropped.
//!
//! The schema is the CRD version's `openAPIV3Schema` as JSON, passed in by the caller (the
//! CRDs are built in `nodemgr-k8s`); this module only walks it.

use serde_json::{Map, Value};

use super::FieldError;

/// The `metadata` fields of every object (ObjectMeta), checked instead of the CRD's partial
/// metadata schema.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "managedFields",
    "selfLink",
];

/// Edit distance (insertions, deletions, substitutions) between two short strings.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

/// The known name closest to `unknown`, when it is close enough to be a typo of it (at most a
/// third of its length, and at least 2, edits away; case differences count as close).
pub fn closest<'a>(unknown: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (unknown.chars().count() / 3).max(2);
    known
        .into_iter()
        .map(|k| {
            let d = if k.eq_ignore_ascii_case(unknown) {
                0
            } else {
                distance(unknown, k)
            };
            (d, k)
        })
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| k)
}

fn unknown(path: &str, key: &str, known: &[&str]) -> FieldError {
    let message = match closest(key, known.iter().copied()) {
        Some(suggestion) => format!("unknown field {key:?}; did you mean {suggestion}?"),
        None if known.is_empty() => format!("unknown field {key:?}; this object takes no fields"),
        None => format!("unknown field {key:?}; known fields: {}", known.join(", ")),
    };
    FieldError::new(path, message)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(path: &str, value: &Value, schema: &Value, out: &mut Vec<FieldError>) {
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) | (None, Some(s)) => walk(&join(path, key), child, s, out),
                    (None, None) => {
                        let known: Vec<&str> = properties
                            .map(|p| p.keys().map(String::as_str).collect())
                            .unwrap_or_default();
                        out.push(unknown(&join(path, key), key, &known));
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(&format!("{path}[{i}]"), item, item_schema, out);
                }
            }
        }
        _ => {}
    }
}

/// Every field of `document` that `schema` (a CRD version's `openAPIV3Schema`) does not know,
/// in key order, each with the closest known name when there is one. `metadata` is
/// checked against ObjectMeta's fields.
pub fn unknown_fields(document: &Value, schema: &Value) -> Vec<FieldError> {
    let mut out = Vec::new();
    let Some(map) = document.as_object() else {
        return out;
    };
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut known: Vec<&str> = properties.keys().map(String::as_str).collect();
    for fixed in ["apiVersion", "kind", "metadata"] {
        if !known.contains(&fixed) {
            known.push(fixed);
        }
    }
    for (key, child) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if let Some(meta) = child.as_object() {
                    for meta_key in meta.keys() {
                        if !OBJECT_META_FIELDS.contains(&meta_key.as_str()) {
                            out.push(unknown(
                                &join("metadata", meta_key),
                                meta_key,
                                OBJECT_META_FIELDS,
                            ));
                        }
                    }
                }
            }
            _ => match properties.get(key) {
                Some(s) => walk(key, child, s, &mut out),
                None => out.push(unknown(key, key, &known)),
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {
                "update": {"type": "object", "properties": {"maxConcurrent": {"type": "integer"}}},
                "nodeTemplate": {"type": "object", "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "taints": {"type": "array", "items": {"type": "object",
                        "properties": {"key": {"type": "string"}}}}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}})
    }

    #[test]
    fn typos_name_the_closest_field() {
        let doc = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": "w", "lables": {}},
            "spec": {"update": {"maxConcurent": 1},
                "nodeTemplate": {"lables": {"a": "b"}, "labels": {"any": "x"},
                    "taints": [{"key": "k", "efect": "NoSchedule"}]},
                "free": {"anything": 1}, "zzz": 1}});
        let errors: Vec<String> = unknown_fields(&doc, &schema())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errors,
            [
                "metadata.lables: unknown field \"lables\"; did you mean labels?",
                "spec.nodeTemplate.lables: unknown field \"lables\"; did you mean labels?",
                "spec.nodeTemplate.taints[0].efect: unknown field \"efect\"; known fields: key",
                "spec.update.maxConcurent: unknown field \"maxConcurent\"; did you mean maxConcurrent?",
                "spec.zzz: unknown field \"zzz\"; known fields: free, nodeTemplate, update",
            ]
        );
    }

    proptest! {
        /// A document built only from the schema's fields has no unknown field, and adding one
        /// field the schema lacks reports exactly that field.
        #[test]
        fn exactly_the_unknown_fields_are_reported(extra in "[a-z]{12,16}", n in 0i64..9) {
            let mut doc = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a"},
                "spec": {"update": {"maxConcurrent": n}}});
            prop_assert!(unknown_fields(&doc, &schema()).is_empty());
            doc["spec"]["update"][extra.as_str()] = json!(n);
            let errors = unknown_fields(&doc, &schema());
            prop_assert_eq!(errors.len(), 1);
            prop_assert_eq!(&errors[0].path, &format!("spec.update.{extra}"));
        }

        /// The distance is a metric's basics: zero exactly for equal strings, symmetric.
        #[test]
        fn distance_is_symmetric_and_zero_on_equal(a in "[a-c]{0,6}", b in "[a-c]{0,6}") {
            prop_assert_eq!(distance(&a, &b), distance(&b, &a));
            prop_assert_eq!(distance(&a, &b) == 0, a == b);
        }
    }
}
