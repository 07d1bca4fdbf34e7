//! How lists merge: the list type of a field path (`atomic`, `set`, or `map` keyed by some
//! fields), read from the built-in kinds' patch strategies and from a CRD's
//! `x-kubernetes-list-type`/`x-kubernetes-list-map-keys`. Strategic merge patch and server-side
//! apply both ask this module.

use serde_json::Value;

use crate::registry::ResourceType;

/// How the elements of a list are identified when merging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// The list is replaced as a whole.
    Atomic,
    /// A set of scalars: merged by value.
    Set,
    /// A list of objects merged by the values of these key fields.
    Map(Vec<String>),
}

/// The list type of the field at `path` (field names from the object root; list items are
/// transparent) in objects of `rt` at `version`.
pub fn list_kind(rt: &ResourceType, version: &str, path: &[&str]) -> ListKind {
    if path.first() == Some(&"metadata") {
        return metadata_list_kind(path);
    }
    if rt.custom {
        return rt
            .version(version)
            .and_then(|v| v.schema.as_ref())
            .and_then(|schema| schema_list_kind(schema, path))
            .unwrap_or(ListKind::Atomic);
    }
    builtin_list_kind(&rt.plural, path)
}

fn map(keys: &[&str]) -> ListKind {
    ListKind::Map(keys.iter().map(|k| (*k).to_owned()).collect())
}

fn metadata_list_kind(path: &[&str]) -> ListKind {
    match path {
        ["metadata", "finalizers"] => ListKind::Set,
        ["metadata", "ownerReferences"] => map(&["uid"]),
        _ => ListKind::Atomic,
    }
}

/// Patch strategies of the built-in kinds, for the fields nodemgr and kubectl touch.
fn builtin_list_kind(plural: &str, path: &[&str]) -> ListKind {
    match (plural, path) {
        ("nodes", ["spec", "taints"]) => map(&["key", "effect"]),
        ("nodes", ["status", "addresses"]) => map(&["type"]),
        (_, [.., "status", "conditions"]) => map(&["type"]),
        (_, [.., "containers" | "initContainers" | "ephemeralContainers"]) => map(&["name"]),
        (_, [.., "containers" | "initContainers", "env"]) => map(&["name"]),
        (_, [.., "containers" | "initContainers", "ports"]) => map(&["containerPort", "protocol"]),
        (_, [.., "containers" | "initContainers", "volumeMounts"]) => map(&["mountPath"]),
        (_, [.., "spec", "volumes"]) => map(&["name"]),
        (_, [.., "spec", "imagePullSecrets"]) => map(&["name"]),
        ("services", ["spec", "ports"]) => map(&["port", "protocol"]),
        _ => ListKind::Atomic,
    }
}

/// Walks an OpenAPI v3 schema along `path` and reads the list type of the array found there.
fn schema_list_kind(schema: &Value, path: &[&str]) -> Option<ListKind> {
    let mut node = schema;
    for segment in path {
        if node.get("type").and_then(Value::as_str) == Some("array") {
            node = node.get("items")?;
        }
        node = match node.get("properties").and_then(|p| p.get(*segment)) {
            Some(child) => child,
            None => node.get("additionalProperties").filter(|a| a.is_object())?,
        };
    }
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Some(ListKind::Set),
        Some("map") => {
            let keys = node
                .get("x-kubernetes-list-map-keys")?
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect();
            Some(ListKind::Map(keys))
        }
        _ => Some(ListKind::Atomic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{builtin_types, type_from_crd};
    use serde_json::json;

    #[test]
    fn built_in_strategies() {
        let types = builtin_types();
        let nodes = types.iter().find(|t| t.plural == "nodes").unwrap();
        assert_eq!(
            list_kind(nodes, "v1", &["spec", "taints"]),
            map(&["key", "effect"])
        );
        assert_eq!(
            list_kind(nodes, "v1", &["status", "conditions"]),
            map(&["type"])
        );
        assert_eq!(
            list_kind(nodes, "v1", &["metadata", "finalizers"]),
            ListKind::Set
        );
        assert_eq!(
            list_kind(nodes, "v1", &["status", "images"]),
            ListKind::Atomic
        );
    }

    #[test]
    fn crd_schema_list_types() {
        let crd = json!({"metadata": {"name": "things.x.io"}, "spec": {"group": "x.io", "scope": "Cluster",
            "names": {"plural": "things", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"status": {"type": "object", "properties": {
                    "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"], "items": {"type": "object"}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set"}}}}}}}]}});
        let t = type_from_crd(&crd).unwrap();
        assert_eq!(
            list_kind(&t, "v1", &["status", "conditions"]),
            map(&["type"])
        );
        assert_eq!(list_kind(&t, "v1", &["status", "tags"]), ListKind::Set);
        assert_eq!(list_kind(&t, "v1", &["spec", "other"]), ListKind::Atomic);
    }
}
