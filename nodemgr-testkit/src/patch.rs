//! The three patch formats of `PATCH` requests: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and strategic merge patch (lists merged by key for the fields whose patch strategy
//! says so, `$patch`, `$deleteFromPrimitiveList`, `$setElementOrder`, `$retainKeys` directives).
//! Server-side apply reuses [`merge_by_schema`].

use serde_json::{Map, Value};

use crate::schema::ListKind;
use crate::status::ApiError;

/// Answers the list type of a field path (see [`crate::schema::list_kind`]).
pub type ListKindOf<'a> = &'a dyn Fn(&[&str]) -> ListKind;

/// Applies a JSON merge patch: objects merge recursively, `null` deletes, anything else
/// (lists included) replaces. The `json-patch` crate's (kube-core's) implementation.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies a JSON patch (a list of `add`/`remove`/`replace`/`move`/`copy`/`test` operations),
/// with the `json-patch` crate (kube-core's).
///
/// # Errors
/// 400 BadRequest when the body is not a list; 422 Invalid (as kube-apiserver reports failed
/// JSON patches) naming the failing operation: a malformed operation, a missing path, an index
/// out of range, a failed `test`.
pub fn json_patch(target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::bad_request("json patch must be a list of operations"))?;
    let invalid = |index: usize, op: &Value, why: String| {
        ApiError::new(
            422,
            "Invalid",
            format!("json patch operation {index} ({op}): {why}"),
        )
    };
    let parsed = ops
        .iter()
        .enumerate()
        .map(|(index, op)| {
            serde_json::from_value::<json_patch::PatchOperation>(op.clone())
                .map_err(|e| invalid(index, op, e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    json_patch::patch(target, &parsed).map_err(|e| {
        let op = ops.get(e.operation).cloned().unwrap_or(Value::Null);
        invalid(e.operation, &op, format!("{} at {}", e.kind, e.path))
    })
}

/// Applies a strategic merge patch. Lists whose [`ListKind`] is `Map` merge item by item on
/// their keys, `Set` lists merge by value, atomic lists are replaced.
///
/// # Errors
/// 400 BadRequest for malformed directives.
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    kind_of: ListKindOf<'_>,
) -> Result<(), ApiError> {
    let mut path = Vec::new();
    strategic_merge_at(target, patch, kind_of, &mut path, true)
}

/// Merges `patch` into `target` by schema, without patch directives and without `null`
/// deletions being special beyond removing the key: the merge server-side apply performs.
pub fn merge_by_schema(target: &mut Value, patch: &Value, kind_of: ListKindOf<'_>) {
    let mut path = Vec::new();
    // Without directives there is nothing that can fail.
    let _ = strategic_merge_at(target, patch, kind_of, &mut path, false);
}

fn strategic_merge_at(
    target: &mut Value,
    patch: &Value,
    kind_of: ListKindOf<'_>,
    path: &mut Vec<String>,
    directives: bool,
) -> Result<(), ApiError> {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if directives {
        match patch_map.get("$patch").and_then(Value::as_str) {
            Some("replace") => {
                let mut replacement = patch_map.clone();
                replacement.remove("$patch");
                *target = Value::Object(replacement);
                return Ok(());
            }
            Some("delete") => {
                *target = Value::Null;
                return Ok(());
            }
            Some("merge") | None => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "unknown patch directive $patch: {other}"
                )));
            }
        }
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return Ok(());
    };
    if directives && let Some(retain) = patch_map.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        target_map.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (key, value) in patch_map {
        if directives {
            if key == "$patch" || key == "$retainKeys" || key.starts_with("$setElementOrder/") {
                continue;
            }
            if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
                let remove: Vec<&Value> = value
                    .as_array()
                    .map(|a| a.iter().collect())
                    .unwrap_or_default();
                if let Some(Value::Array(list)) = target_map.get_mut(field) {
                    list.retain(|v| !remove.contains(&v));
                }
                continue;
            }
        }
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        path.push(key.clone());
        let slot = target_map.entry(key.clone()).or_insert(Value::Null);
        match value {
            Value::Object(_) => {
                strategic_merge_at(slot, value, kind_of, path, directives)?;
                if slot.is_null() {
                    target_map.remove(key);
                }
            }
            Value::Array(items) => {
                let segments: Vec<&str> = path.iter().map(String::as_str).collect();
                let kind = kind_of(&segments);
                merge_list(slot, items, &kind, kind_of, path, directives)?;
            }
            scalar => *slot = scalar.clone(),
        }
        path.pop();
    }
    Ok(())
}

fn merge_list(
    slot: &mut Value,
    items: &[Value],
    kind: &ListKind,
    kind_of: ListKindOf<'_>,
    path: &mut Vec<String>,
    directives: bool,
) -> Result<(), ApiError> {
    if directives
        && items
            .iter()
            .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        *slot = Value::Array(
            items
                .iter()
                .filter(|i| i.get("$patch").is_none())
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    match kind {
        ListKind::Atomic => *slot = Value::Array(items.to_vec()),
        ListKind::Set => {
            let mut current = slot.as_array().cloned().unwrap_or_default();
            for item in items {
                if !current.contains(item) {
                    current.push(item.clone());
                }
            }
            *slot = Value::Array(current);
        }
        ListKind::Map(keys) => {
            let mut current = slot.as_array().cloned().unwrap_or_default();
            for item in items {
                let same_key =
                    |candidate: &Value| keys.iter().all(|k| candidate.get(k) == item.get(k));
                if directives && item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    current.retain(|c| !same_key(c));
                    continue;
                }
                match current.iter_mut().find(|c| same_key(c)) {
                    Some(existing) => {
                        strategic_merge_at(existing, item, kind_of, path, directives)?
                    }
                    None => {
                        let mut fresh = Value::Object(Map::new());
                        strategic_merge_at(&mut fresh, item, kind_of, path, directives)?;
                        current.push(fresh);
                    }
                }
            }
            *slot = Value::Array(current);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_kinds(path: &[&str]) -> ListKind {
        match path {
            ["spec", "taints"] => ListKind::Map(vec!["key".into(), "effect".into()]),
            ["status", "conditions"] => ListKind::Map(vec!["type".into()]),
            ["metadata", "finalizers"] => ListKind::Set,
            _ => ListKind::Atomic,
        }
    }

    #[test]
    fn merge_patch_deletes_with_null_and_replaces_lists() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut v, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(v, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_operations() {
        let mut v = json!({"metadata": {"labels": {"a": "1"}}, "l": [1, 2]});
        json_patch(
            &mut v,
            &json!([
                {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                {"op": "remove", "path": "/metadata/labels/a"},
                {"op": "add", "path": "/l/-", "value": 3},
                {"op": "replace", "path": "/l/0", "value": 0},
                {"op": "test", "path": "/l/2", "value": 3},
                {"op": "copy", "from": "/l", "path": "/m"},
                {"op": "move", "from": "/m", "path": "/n"},
            ]),
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"labels": {"b": "2"}}, "l": [0, 2, 3], "n": [0, 2, 3]})
        );
        assert_eq!(
            json_patch(&mut v, &json!([{"op": "test", "path": "/l/0", "value": 9}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            json_patch(&mut v, &json!([{"op": "remove", "path": "/zzz"}]))
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn strategic_merge_keys_taints_and_conditions() {
        let mut node = json!({"metadata": {"finalizers": ["a"]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "value": "1"}, {"key": "k", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}});
        strategic_merge_patch(&mut node, &json!({
            "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule", "value": "2"},
                {"key": "k", "effect": "NoExecute", "$patch": "delete"}, {"key": "new", "effect": "NoSchedule"}],
                "$setElementOrder/taints": [{"key": "k"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}), &node_kinds).unwrap();
        assert_eq!(
            node,
            json!({"metadata": {"finalizers": ["b"]},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule", "value": "2"}, {"key": "new", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure", "status": "False"}]}})
        );
    }

    #[test]
    fn strategic_replace_directive() {
        let mut v = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}], "x": {"a": 1, "b": 2}}});
        strategic_merge_patch(&mut v, &json!({"spec": {"taints": [{"$patch": "replace"}, {"key": "b", "effect": "NoSchedule"}],
            "x": {"$patch": "replace", "c": 3}}}), &node_kinds).unwrap();
        assert_eq!(
            v,
            json!({"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}], "x": {"c": 3}}})
        );
    }
}
