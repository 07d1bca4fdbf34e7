//! How two specs are made comparable (the module docs of `impact`, "How a change is found"):
//! empties pruned, documented defaults filled in, int-or-strings unified.

use serde_json::{Map, Value};

use super::defaults;
use crate::model::{Amount, IntOrString, NodeGroupSpec};

/// Int-or-string fields: a string of digits equals the integer.
pub(super) const INT_OR_STRING: &[&str] = &["cloudInstances.standby", "update.maxConcurrent"];

/// The spec as JSON with empties pruned, defaults filled in and int-or-strings unified.
pub(super) fn normalized(spec: &NodeGroupSpec) -> Value {
    let mut value = serde_json::to_value(spec).unwrap_or_else(|err| {
        // Cannot happen: every map of the spec has string keys. Comparing empty objects then
        // reports no change rather than a wrong one.
        tracing::error!(%err, "failed to serialize a NodeGroup spec for comparison");
        Value::Object(Map::new())
    });
    prune(&mut value);
    for field in defaults() {
        insert_absent(&mut value, field.path, field.value.to_value());
    }
    for path in INT_OR_STRING {
        if let Some(slot) = lookup_mut(&mut value, path) {
            unify_int_or_string(slot);
        }
    }
    value
}

/// Removes nulls, empty objects and empty arrays from objects, recursively; returns whether
/// `value` itself is empty. Array elements are pruned inside but never removed.
fn prune(value: &mut Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => {
            map.retain(|_, child| !prune(child));
            map.is_empty()
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                prune(item);
            }
            items.is_empty()
        }
        Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
    }
}

/// Sets `path` to `value` unless something is there, creating the objects on the way. Does
/// nothing when a value on the way is not an object.
pub(super) fn insert_absent(root: &mut Value, path: &str, value: Value) {
    let mut node = root;
    let mut segments = path.split('.').peekable();
    while let Some(segment) = segments.next() {
        let Value::Object(map) = node else {
            return;
        };
        if segments.peek().is_none() {
            map.entry(segment).or_insert(value);
            return;
        }
        node = map
            .entry(segment)
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Turns a string of digits into the integer it spells.
fn unify_int_or_string(value: &mut Value) {
    // The model's int-or-string grammar ([`IntOrString::amount`]) decides what a count is.
    if let Value::String(text) = value
        && let Ok(Amount::Absolute(n)) = IntOrString::String(text.clone()).amount()
        && let Ok(n) = i64::try_from(n)
    {
        *value = Value::from(n);
    }
}

/// The value at a dotted path, if any.
pub(super) fn lookup<'v>(root: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.')
        .try_fold(root, |node, segment| node.get(segment))
}

/// The value at a dotted path, mutably, if any.
pub(super) fn lookup_mut<'v>(root: &'v mut Value, path: &str) -> Option<&'v mut Value> {
    path.split('.')
        .try_fold(root, |node, segment| node.get_mut(segment))
}
