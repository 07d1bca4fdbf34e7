//! Field ownership (`metadata.managedFields`, `FieldsV1`) and server-side apply.
//!
//! Every write records which manager owns which leaf fields: an `Update` entry takes the
//! fields it changed from everyone else; an `Apply` entry owns exactly the fields of its last
//! applied configuration. Applying a value different from the live one in a field another
//! manager owns is a conflict (409, one cause per field) unless `force=true`, which takes the
//! field over. Fields a manager applied before and no longer applies are removed, unless
//! another manager still owns them (or something beneath them).
//!
//! Lists follow [`crate::schema::ListKind`]: keyed items (`k:{"type":"Ready"}`) and set values
//! (`v:"x"`) are owned one by one, atomic lists as a whole. Only `labels`, `annotations`,
//! `finalizers` and `ownerReferences` of metadata are tracked.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::patch::merge_by_schema;
use crate::schema::ListKind;
use crate::status::ApiError;
use crate::time::now_rfc3339;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of an object (`f:name`).
    Field(String),
    /// An item of a keyed list, by its key fields as compact JSON (`k:{"type":"Ready"}`).
    Key(String),
    /// A value of a set list, as JSON (`v:"x"`).
    Value(String),
}

/// A path from the object root to an owned field.
pub type FieldPath = Vec<PathElement>;

/// The leaf values of an object by field path. Keyed list items also appear on their own
/// (the path ending in [`PathElement::Key`], value `null`): that is the item's `"."` marker.
pub type Flattened = BTreeMap<FieldPath, Value>;

/// Flattens an object into owned leaf fields (see [`Flattened`]), skipping `apiVersion`, `kind`
/// and server-owned metadata.
pub fn flatten(object: &Value, kind_of: &dyn Fn(&[&str]) -> ListKind) -> Flattened {
    let mut out = Flattened::new();
    let Some(map) = object.as_object() else {
        return out;
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for field in ["labels", "annotations", "finalizers", "ownerReferences"] {
                    if let Some(v) = value.get(field) {
                        let mut path = vec![
                            PathElement::Field("metadata".into()),
                            PathElement::Field(field.into()),
                        ];
                        flatten_at(v, kind_of, &mut path, &mut out);
                    }
                }
            }
            _ => {
                let mut path = vec![PathElement::Field(key.clone())];
                flatten_at(value, kind_of, &mut path, &mut out);
            }
        }
    }
    out
}

fn field_names(path: &FieldPath) -> Vec<&str> {
    path.iter()
        .filter_map(|e| match e {
            PathElement::Field(f) => Some(f.as_str()),
            _ => None,
        })
        .collect()
}

fn flatten_at(
    value: &Value,
    kind_of: &dyn Fn(&[&str]) -> ListKind,
    path: &mut FieldPath,
    out: &mut Flattened,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                path.push(PathElement::Field(k.clone()));
                flatten_at(v, kind_of, path, out);
                path.pop();
            }
        }
        Value::Array(items) => match kind_of(&field_names(path)) {
            ListKind::Atomic => {
                out.insert(path.clone(), value.clone());
            }
            ListKind::Set => {
                for item in items {
                    path.push(PathElement::Value(item.to_string()));
                    out.insert(path.clone(), item.clone());
                    path.pop();
                }
            }
            ListKind::Map(keys) => {
                for item in items {
                    let key: Map<String, Value> = keys
                        .iter()
                        .filter_map(|k| Some((k.clone(), item.get(k)?.clone())))
                        .collect();
                    path.push(PathElement::Key(Value::Object(key).to_string()));
                    out.insert(path.clone(), Value::Null);
                    if let Some(fields) = item.as_object() {
                        for (k, v) in fields {
                            path.push(PathElement::Field(k.clone()));
                            flatten_at(v, kind_of, path, out);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        leaf => {
            out.insert(path.clone(), leaf.clone());
        }
    }
}

/// Serializes a set of paths as a `FieldsV1` object.
pub fn to_fields_v1(paths: &BTreeSet<FieldPath>) -> Value {
    fn insert(node: &mut Map<String, Value>, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let key = match first {
            PathElement::Field(f) => format!("f:{f}"),
            PathElement::Key(k) => format!("k:{k}"),
            PathElement::Value(v) => format!("v:{v}"),
        };
        let child = node.entry(key).or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(child_map) = child {
            if rest.is_empty() {
                if matches!(first, PathElement::Key(_)) {
                    child_map.insert(".".into(), json!({}));
                }
            } else {
                insert(child_map, rest);
            }
        }
    }
    let mut root = Map::new();
    for path in paths {
        insert(&mut root, path);
    }
    Value::Object(root)
}

/// Parses a `FieldsV1` object back into paths (unknown prefixes are skipped).
pub fn from_fields_v1(fields: &Value) -> BTreeSet<FieldPath> {
    fn walk(node: &Map<String, Value>, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        for (key, child) in node {
            if key == "." {
                out.insert(path.clone());
                continue;
            }
            let element = if let Some(f) = key.strip_prefix("f:") {
                PathElement::Field(f.to_owned())
            } else if let Some(k) = key.strip_prefix("k:") {
                // Normalise the key's JSON so it compares with what flatten produces.
                let normal = serde_json::from_str::<Value>(k)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| k.to_owned());
                PathElement::Key(normal)
            } else if let Some(v) = key.strip_prefix("v:") {
                let normal = serde_json::from_str::<Value>(v)
                    .map(|v| v.to_string())
                    .unwrap_or_else(|_| v.to_owned());
                PathElement::Value(normal)
            } else {
                continue;
            };
            path.push(element);
            match child.as_object() {
                Some(m) if !m.is_empty() => walk(m, path, out),
                _ => {
                    out.insert(path.clone());
                }
            }
            path.pop();
        }
    }
    let mut out = BTreeSet::new();
    if let Some(map) = fields.as_object() {
        walk(map, &mut Vec::new(), &mut out);
    }
    out
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    /// `manager`.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// `apiVersion` the manager used.
    pub api_version: String,
    /// `time` of the last change.
    pub time: String,
    /// `subresource` (`status`), if any.
    pub subresource: Option<String>,
    /// Owned fields.
    pub fields: BTreeSet<FieldPath>,
}

impl ManagedEntry {
    fn same_slot(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

/// Reads `metadata.managedFields` of an object.
pub fn entries_of(object: &Value) -> Vec<ManagedEntry> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
            ManagedEntry {
                manager: text("manager"),
                operation: text("operation"),
                api_version: text("apiVersion"),
                time: text("time"),
                subresource: e
                    .get("subresource")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
            }
        })
        .collect()
}

/// Serializes entries as `metadata.managedFields`, dropping those that own nothing.
pub fn entries_to_value(entries: &[ManagedEntry]) -> Value {
    Value::Array(
        entries
            .iter()
            .filter(|e| !e.fields.is_empty())
            .map(|e| {
                let mut v = json!({
                    "manager": e.manager,
                    "operation": e.operation,
                    "apiVersion": e.api_version,
                    "time": e.time,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": to_fields_v1(&e.fields),
                });
                if let Some(sub) = &e.subresource {
                    v["subresource"] = json!(sub);
                }
                v
            })
            .collect(),
    )
}

fn manager_or_unknown(manager: &str) -> String {
    if manager.is_empty() {
        "unknown".to_owned()
    } else {
        manager.to_owned()
    }
}

/// Records a non-apply write (create, update, any patch but apply) by `manager`: the fields it
/// changed move to its `Update` entry, removed fields leave every entry. `new`'s managedFields
/// must hold the entries before the write.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    kind_of: &dyn Fn(&[&str]) -> ListKind,
    api_version: String,
    subresource: Option<&str>,
) {
    let old_flat = old.map(|o| flatten(o, kind_of)).unwrap_or_default();
    let new_flat = flatten(new, kind_of);
    let changed: BTreeSet<FieldPath> = new_flat
        .iter()
        .filter(|(p, v)| old_flat.get(*p) != Some(*v))
        .map(|(p, _)| p.clone())
        .collect();
    let removed: BTreeSet<FieldPath> = old_flat
        .keys()
        .filter(|p| !new_flat.contains_key(*p))
        .cloned()
        .collect();
    if changed.is_empty() && removed.is_empty() {
        return;
    }
    let manager = manager_or_unknown(manager);
    let mut entries = entries_of(new);
    for entry in &mut entries {
        entry
            .fields
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    let slot = match entries
        .iter()
        .position(|e| e.same_slot(&manager, "Update", subresource))
    {
        Some(i) => i,
        None => {
            entries.push(ManagedEntry {
                manager,
                operation: "Update".into(),
                api_version: api_version.clone(),
                time: String::new(),
                subresource: subresource.map(str::to_owned),
                fields: BTreeSet::new(),
            });
            entries.len() - 1
        }
    };
    entries[slot].fields.extend(changed);
    entries[slot].time = now_rfc3339();
    entries[slot].api_version = api_version;
    new["metadata"]["managedFields"] = entries_to_value(&entries);
}

/// What a server-side apply request asks.
pub struct ApplyRequest<'a> {
    /// The applied configuration (already filtered to the part the endpoint may change).
    pub applied: &'a Value,
    /// `fieldManager`.
    pub manager: &'a str,
    /// `force=true`.
    pub force: bool,
    /// `apiVersion` of the request.
    pub api_version: String,
    /// `status` when applying to the status subresource.
    pub subresource: Option<&'a str>,
}

/// Computes the result of a server-side apply of `request.applied` onto `live` (a skeleton
/// object when creating): the new object with its managedFields.
///
/// # Errors
/// 409 Conflict listing each field another manager owns with a different value (without
/// `force`).
pub fn apply(
    live: &Value,
    request: &ApplyRequest<'_>,
    kind_of: &dyn Fn(&[&str]) -> ListKind,
) -> Result<Value, ApiError> {
    let manager = request.manager;
    let applied_flat = flatten(request.applied, kind_of);
    let live_flat = flatten(live, kind_of);
    let mut entries = entries_of(live);
    let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
    for entry in entries.iter().filter(|e| e.manager != manager) {
        for (path, value) in &applied_flat {
            if entry.fields.contains(path) && live_flat.get(path) != Some(value) {
                conflicts.push((entry.manager.clone(), path.clone()));
            }
        }
    }
    if !conflicts.is_empty() {
        if !request.force {
            return Err(conflict_error(live, &conflicts));
        }
        for entry in entries.iter_mut().filter(|e| e.manager != manager) {
            entry
                .fields
                .retain(|p| !conflicts.iter().any(|(_, c)| c == p));
        }
    }
    let previous: BTreeSet<FieldPath> = entries
        .iter()
        .find(|e| e.same_slot(manager, "Apply", request.subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut object = live.clone();
    let dropped: Vec<&FieldPath> = previous
        .iter()
        .filter(|p| !applied_flat.contains_key(*p))
        .filter(|p| {
            !entries
                .iter()
                .filter(|e| !e.same_slot(manager, "Apply", request.subresource))
                .any(|e| e.fields.iter().any(|owned| owned.starts_with(p)))
        })
        .collect();
    for path in dropped.iter().rev() {
        remove_path(&mut object, path, kind_of);
    }
    merge_by_schema(&mut object, request.applied, kind_of);
    let fields: BTreeSet<FieldPath> = applied_flat.into_keys().collect();
    match entries
        .iter_mut()
        .find(|e| e.same_slot(manager, "Apply", request.subresource))
    {
        Some(entry) => {
            entry.fields = fields;
            entry.time = now_rfc3339();
            entry.api_version = request.api_version.clone();
        }
        None => entries.push(ManagedEntry {
            manager: manager.to_owned(),
            operation: "Apply".into(),
            api_version: request.api_version.clone(),
            time: now_rfc3339(),
            subresource: request.subresource.map(str::to_owned),
            fields,
        }),
    }
    object["metadata"]["managedFields"] = entries_to_value(&entries);
    Ok(object)
}

fn path_display(path: &FieldPath) -> String {
    let mut out = String::new();
    for element in path {
        match element {
            PathElement::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            PathElement::Key(k) => out.push_str(&format!("[{k}]")),
            PathElement::Value(v) => out.push_str(&format!("[={v}]")),
        }
    }
    out
}

fn conflict_error(live: &Value, conflicts: &[(String, FieldPath)]) -> ApiError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(m, p)| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{m}\""), "field": path_display(p)}))
        .collect();
    let listing: Vec<String> = conflicts
        .iter()
        .map(|(m, p)| format!("conflict with \"{m}\": {}", path_display(p)))
        .collect();
    let name = live
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    ApiError::new(
        409,
        "Conflict",
        format!(
            "Apply failed with {} conflict{}: {}",
            conflicts.len(),
            if conflicts.len() == 1 { "" } else { "s" },
            listing.join("\n")
        ),
    )
    .with_details(json!({"name": name, "causes": causes}))
}

/// Removes the field at `path` from `object` (a keyed item or set value as a whole).
fn remove_path(object: &mut Value, path: &FieldPath, kind_of: &dyn Fn(&[&str]) -> ListKind) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    for element in parents {
        let next = match element {
            PathElement::Field(f) => node.get_mut(f.as_str()),
            PathElement::Key(k) => find_keyed(node, k),
            PathElement::Value(_) => None,
        };
        match next {
            Some(n) => node = n,
            None => return,
        }
    }
    let _ = kind_of;
    match last {
        PathElement::Field(f) => {
            if let Some(m) = node.as_object_mut() {
                m.remove(f);
            }
        }
        PathElement::Key(k) => {
            if let Some(list) = node.as_array_mut()
                && let Ok(Value::Object(key)) = serde_json::from_str::<Value>(k)
            {
                list.retain(|item| !key.iter().all(|(kf, kv)| item.get(kf) == Some(kv)));
            }
        }
        PathElement::Value(v) => {
            if let (Some(list), Ok(value)) = (node.as_array_mut(), serde_json::from_str::<Value>(v))
            {
                list.retain(|item| *item != value);
            }
        }
    }
}

fn find_keyed<'a>(list: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    let Ok(Value::Object(key)) = serde_json::from_str::<Value>(key) else {
        return None;
    };
    list.as_array_mut()?
        .iter_mut()
        .find(|item| key.iter().all(|(kf, kv)| item.get(kf) == Some(kv)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn kinds(path: &[&str]) -> ListKind {
        match path {
            ["status", "conditions"] => ListKind::Map(vec!["type".into()]),
            ["metadata", "finalizers"] => ListKind::Set,
            _ => ListKind::Atomic,
        }
    }

    fn req<'a>(applied: &'a Value, manager: &'a str, force: bool) -> ApplyRequest<'a> {
        ApplyRequest {
            applied,
            manager,
            force,
            api_version: "v1".into(),
            subresource: None,
        }
    }

    #[test]
    fn fields_v1_shape() {
        let obj = json!({"metadata": {"name": "x", "labels": {"a": "1"}, "finalizers": ["f"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let set: BTreeSet<FieldPath> = flatten(&obj, &kinds).into_keys().collect();
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({
            "f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"f\"": {}}},
            "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }

    #[test]
    fn apply_conflicts_then_force_takes_over() {
        let live = json!({"metadata": {"name": "x"}, "spec": {"a": 1}});
        let first = apply(
            &live,
            &req(
                &json!({"metadata": {"name": "x"}, "spec": {"a": 1, "b": 2}}),
                "one",
                false,
            ),
            &kinds,
        )
        .unwrap();
        let err = apply(
            &first,
            &req(
                &json!({"metadata": {"name": "x"}, "spec": {"b": 3}}),
                "two",
                false,
            ),
            &kinds,
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("conflict with \"one\": .spec.b"),
            "{}",
            err.message
        );
        // Same value: shared ownership, no conflict.
        apply(
            &first,
            &req(
                &json!({"metadata": {"name": "x"}, "spec": {"b": 2}}),
                "two",
                false,
            ),
            &kinds,
        )
        .unwrap();
        let forced = apply(
            &first,
            &req(
                &json!({"metadata": {"name": "x"}, "spec": {"b": 3}}),
                "two",
                true,
            ),
            &kinds,
        )
        .unwrap();
        assert_eq!(forced["spec"], json!({"a": 1, "b": 3}));
        let owners = entries_of(&forced);
        let one = owners.iter().find(|e| e.manager == "one").unwrap();
        assert!(!one.fields.contains(&vec![
            PathElement::Field("spec".into()),
            PathElement::Field("b".into())
        ]));
    }

    #[test]
    fn apply_removes_fields_no_longer_applied() {
        let live = json!({"metadata": {"name": "x"}});
        let first = apply(
            &live,
            &req(
                &json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}}),
                "m",
                false,
            ),
            &kinds,
        )
        .unwrap();
        let second = apply(
            &first,
            &req(
                &json!({"metadata": {"name": "x", "labels": {"a": "1"}}}),
                "m",
                false,
            ),
            &kinds,
        )
        .unwrap();
        assert_eq!(second["metadata"]["labels"], json!({"a": "1"}));
    }

    #[test]
    fn update_takes_changed_fields() {
        let live = json!({"metadata": {"name": "x"}});
        let applied = apply(
            &live,
            &req(
                &json!({"metadata": {"name": "x"}, "spec": {"a": 1}}),
                "applier",
                false,
            ),
            &kinds,
        )
        .unwrap();
        let mut updated = applied.clone();
        updated["spec"]["a"] = json!(2);
        record_update(
            Some(&applied),
            &mut updated,
            "editor",
            &kinds,
            "v1".into(),
            None,
        );
        let entries = entries_of(&updated);
        assert_eq!(
            entries.len(),
            1,
            "the applier owns nothing any more: {entries:?}"
        );
        assert_eq!(
            (entries[0].manager.as_str(), entries[0].operation.as_str()),
            ("editor", "Update")
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (0i64..5).prop_map(Value::from),
            "[a-c]{0,2}".prop_map(Value::from)
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::btree_map("[a-d]", inner.clone(), 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
                prop::collection::vec(inner, 0..3).prop_map(Value::Array),
            ]
        })
    }

    proptest! {
        #[test]
        fn fields_v1_round_trips(spec in arb_json(), conds in prop::collection::vec("[A-C]", 0..3)) {
            let conditions: Vec<Value> = conds.iter().map(|t| json!({"type": t, "status": "True"})).collect();
            let obj = json!({"spec": spec, "status": {"conditions": conditions}});
            let set: BTreeSet<FieldPath> = flatten(&obj, &kinds).into_keys().collect();
            prop_assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
        }

        #[test]
        fn reapplying_the_same_config_changes_nothing(spec in arb_json()) {
            let live = json!({"metadata": {"name": "x"}});
            let applied = json!({"metadata": {"name": "x"}, "spec": spec});
            let once = apply(&live, &req(&applied, "m", false), &kinds).unwrap();
            let twice = apply(&once, &req(&applied, "m", false), &kinds).unwrap();
            let strip = |v: &Value| { let mut v = v.clone(); v["metadata"]["managedFields"] = Value::Null; v };
            prop_assert_eq!(strip(&once), strip(&twice));
        }
    }
}
