//! A small vocabulary for writing structural OpenAPI v3 schemas by hand (the CRDs' schemas are
//! written, not derived, so that they carry Deckhouse's enums, patterns and bounds exactly).
//!
//! Every helper returns a `serde_json::Value`; [`into_schema`] turns the root into the
//! `schemars::Schema` kube's `CustomResource` derive (`schema = "manual"`) expects.

use serde_json::{Map, Value, json};

/// An object with `properties` (each `(name, schema)`); no other keys allowed.
pub fn object(properties: Vec<(&str, Value)>) -> Value {
    let props: Map<String, Value> = properties
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    json!({ "type": "object", "properties": props })
}

/// An object whose listed fields are required.
pub fn required(mut schema: Value, fields: &[&str]) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("required".into(), json!(fields));
    }
    schema
}

/// Adds a `description`.
pub fn describe(mut schema: Value, text: &str) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("description".into(), Value::String(text.to_owned()));
    }
    schema
}

/// Adds `default` (the API server fills it in).
pub fn default(mut schema: Value, value: Value) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("default".into(), value);
    }
    schema
}

/// A string.
pub fn string() -> Value {
    json!({ "type": "string" })
}

/// A string matching `pattern`.
pub fn pattern(pattern: &str) -> Value {
    json!({ "type": "string", "pattern": pattern })
}

/// A string that is one of `values`.
pub fn one_of(values: &[&str]) -> Value {
    json!({ "type": "string", "enum": values })
}

/// A boolean.
pub fn boolean() -> Value {
    json!({ "type": "boolean" })
}

/// An integer.
pub fn integer() -> Value {
    json!({ "type": "integer" })
}

/// An integer in `[min, max]` (either bound optional).
pub fn integer_in(min: Option<i64>, max: Option<i64>) -> Value {
    let mut schema = integer();
    if let Some(obj) = schema.as_object_mut() {
        if let Some(min) = min {
            obj.insert("minimum".into(), json!(min));
        }
        if let Some(max) = max {
            obj.insert("maximum".into(), json!(max));
        }
    }
    schema
}

/// An integer or a string matching `pattern` (`x-kubernetes-int-or-string`).
pub fn int_or_string(pattern: &str) -> Value {
    json!({ "x-kubernetes-int-or-string": true, "pattern": pattern })
}

/// A list of `items`.
pub fn array(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}

/// A map of strings (labels, annotations).
pub fn string_map() -> Value {
    json!({ "type": "object", "additionalProperties": { "type": "string" } })
}

/// An object kept as written (fields this schema does not describe are not pruned).
pub fn free_object() -> Value {
    json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// The root schema of a kind: `metadata` (with an optional name rule), `spec` and `status`.
pub fn root(
    description: &str,
    metadata: Option<Value>,
    spec: Option<Value>,
    status: Option<Value>,
) -> Value {
    let mut props = vec![
        ("apiVersion", string()),
        ("kind", string()),
        (
            "metadata",
            metadata.unwrap_or_else(|| json!({ "type": "object" })),
        ),
    ];
    let has_spec = spec.is_some();
    if let Some(spec) = spec {
        props.push(("spec", spec));
    }
    if let Some(status) = status {
        props.push(("status", status));
    }
    let schema = describe(object(props), description);
    if has_spec {
        required(schema, &["spec"])
    } else {
        schema
    }
}

/// The `schemars::Schema` of a root built with these helpers.
pub fn into_schema(value: Value) -> schemars::Schema {
    match value {
        Value::Object(map) => schemars::Schema::from(map),
        // Every root above is an object; anything else would be a bug in this module, and an
        // empty schema is what kube would then install (and the structural test catches).
        _ => schemars::Schema::default(),
    }
}

/// The JSON schema schemars generates for the model type `T` (its descriptions are the doc
/// comments of the model's fields).
pub fn model_schema<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// `schema` with `$ref`s into `defs` and `Option`'s `anyOf [T, null]` resolved to `T`.
fn resolve<'a>(schema: &'a Value, defs: &'a Value) -> &'a Value {
    if let Some(name) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.rsplit('/').next())
        && let Some(target) = defs.get(name)
    {
        return resolve(target, defs);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array)
            && let Some(branch) = branches
                .iter()
                .find(|b| b.get("type").and_then(Value::as_str) != Some("null"))
        {
            return resolve(branch, defs);
        }
    }
    schema
}

fn fill(hand: &mut Value, model: &Value, defs: &Value) {
    let model = resolve(model, defs);
    if let Some(properties) = hand.get_mut("properties").and_then(Value::as_object_mut) {
        for (name, property) in properties.iter_mut() {
            let Some(from) = model.get("properties").and_then(|p| p.get(name)) else {
                continue;
            };
            if property.get("description").is_none() {
                let text = from
                    .get("description")
                    .or_else(|| resolve(from, defs).get("description"))
                    .and_then(Value::as_str);
                if let (Some(text), Some(map)) = (text, property.as_object_mut()) {
                    map.insert("description".into(), Value::String(text.to_owned()));
                }
            }
            fill(property, from, defs);
        }
    }
    if let (Some(items), Some(from)) = (hand.get_mut("items"), model.get("items")) {
        fill(items, from, defs);
    }
    if let (Some(extra), Some(from)) = (
        hand.get_mut("additionalProperties")
            .filter(|a| a.is_object()),
        model.get("additionalProperties"),
    ) {
        fill(extra, from, defs);
    }
}

/// Gives every property of the hand-written `schema` that has no description the doc comment
/// of the same field in `model` (a [`model_schema`]), so `kubectl explain` describes what the
/// model documents.
pub fn describe_from_model(mut schema: Value, model: &Value) -> Value {
    let defs = model.get("$defs").cloned().unwrap_or(Value::Null);
    fill(&mut schema, model, &defs);
    schema
}

/// Dotted paths of the properties of `schema` that have no description.
pub fn undescribed(path: &str, schema: &Value, out: &mut Vec<String>) {
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            let at = format!("{path}.{name}");
            if property.get("description").is_none() {
                out.push(at.clone());
            }
            undescribed(&at, property, out);
        }
    }
    if let Some(items) = schema.get("items") {
        undescribed(&format!("{path}[]"), items, out);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        undescribed(&format!("{path}.*"), extra, out);
    }
}
