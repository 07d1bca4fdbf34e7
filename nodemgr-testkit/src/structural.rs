//! A custom resource against its version's `openAPIV3Schema`, as apiextensions-apiserver
//! treats it: unknown fields are pruned (and reported, for `fieldValidation`), `default`s are
//! applied, and the value is validated (types, `nullable`, `required`, `enum`, numeric bounds,
//! string lengths and `pattern`, cheap `format`s, item and property counts, list-type
//! uniqueness, `allOf`/`anyOf`/`oneOf`/`not`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-embedded-resource`), and CEL rules
//! (`x-kubernetes-validations`) in the subset `crate::cel` evaluates, transition rules against
//! the old object. Errors are worded as kube-apiserver words them (`spec.x: Required value`);
//! see `docs/api-emulator.md`.

use serde_json::{Map, Value};

/// One field error, as `field.Error` prints: `<field>: <detail>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path (`spec.taints[0].key`).
    pub field: String,
    /// `Status.details.causes[].reason` (`FieldValueRequired`…).
    pub reason: &'static str,
    /// What is wrong (`Required value`, `Unsupported value: "x": supported values: ...`).
    pub detail: String,
}

impl FieldError {
    /// `field: detail`.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field, self.detail)
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

/// Keys always kept at the root of an object and of an embedded resource.
const RESOURCE_KEYS: &[&str] = &["apiVersion", "kind", "metadata"];

/// Removes the fields the schema does not declare; returns their paths (`spec.foo`) in the
/// order found. `metadata` is never pruned here (the API server keeps ObjectMeta's own fields).
pub fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_at(schema, object, "", true, &mut pruned);
    pruned
}

fn prune_at(schema: &Value, value: &mut Value, path: &str, resource: bool, out: &mut Vec<String>) {
    if flag(schema, "x-kubernetes-int-or-string") {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields")
                || schema.get("additionalProperties") == Some(&Value::Bool(true));
            let embedded = resource || flag(schema, "x-kubernetes-embedded-resource");
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                let child_path = join(path, &key);
                if embedded && RESOURCE_KEYS.contains(&key.as_str()) {
                    continue;
                }
                let child_schema = properties.and_then(|p| p.get(&key)).or(additional);
                match child_schema {
                    Some(child) => {
                        if let Some(v) = map.get_mut(&key) {
                            prune_at(child, v, &child_path, false, out);
                        }
                    }
                    None if preserve => {}
                    None => {
                        map.remove(&key);
                        out.push(child_path);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_at(item_schema, item, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

/// Applies `default`s: a declared property that is absent (or null where not `nullable`) gets
/// its default, recursively, as apiextensions-apiserver defaults on decoding.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child) in properties {
                    let missing = match map.get(key) {
                        None => true,
                        Some(Value::Null) => !flag(child, "nullable"),
                        Some(_) => false,
                    };
                    if missing && let Some(default) = child.get("default") {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(v) = map.get_mut(key) {
                        apply_defaults(child, v);
                    }
                }
            }
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let declared = schema.get("properties").and_then(Value::as_object);
                for (key, v) in map.iter_mut() {
                    if declared.is_none_or(|d| !d.contains_key(key)) {
                        apply_defaults(additional, v);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Validates `object` (a whole custom resource) against the schema. `metadata` is checked only
/// for what CRD schemas may say about it: `name` and `generateName`.
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    validate_update(schema, object, None)
}

/// [`validate`], plus the schema's CEL rules (`x-kubernetes-validations`) in the subset
/// [`crate::cel`] evaluates, with `old` (the live object of an update) giving `oldSelf`:
/// transition rules (those mentioning `oldSelf`) are checked only where an old value exists.
/// A rule outside the subset is skipped (and logged).
pub fn validate_update(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_at(schema, object, "", true, &mut errors);
    rules_at(schema, object, old, "", true, &mut errors);
    errors
}

fn rule_error(schema: &Value, rule: &Value, path: &str, detail: String) -> FieldError {
    let field = match rule.get("fieldPath").and_then(Value::as_str) {
        Some(extra) if !extra.is_empty() => {
            let extra = extra.trim_start_matches('.');
            if path.is_empty() {
                extra.to_owned()
            } else {
                format!("{path}.{extra}")
            }
        }
        _ => path.to_owned(),
    };
    let shown_type = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let (reason, detail) = match rule.get("reason").and_then(Value::as_str) {
        Some("FieldValueForbidden") => ("FieldValueForbidden", format!("Forbidden: {detail}")),
        Some("FieldValueRequired") => ("FieldValueRequired", format!("Required value: {detail}")),
        Some("FieldValueDuplicate") => {
            ("FieldValueDuplicate", format!("Duplicate value: {detail}"))
        }
        _ => (
            "FieldValueInvalid",
            format!("Invalid value: \"{shown_type}\": {detail}"),
        ),
    };
    FieldError {
        field,
        reason,
        detail,
    }
}

/// Evaluates the CEL rules of `schema` at `value`, then those below it.
fn rules_at(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    root: bool,
    out: &mut Vec<FieldError>,
) {
    if value.is_null() {
        return;
    }
    for rule in schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
        let expr = match crate::cel::parse(text) {
            Ok(expr) => expr,
            Err(why) => {
                tracing::warn!(rule = text, %why, "CEL rule outside the emulator's subset: not evaluated");
                continue;
            }
        };
        let transition = crate::cel::mentions_old_self(&expr);
        if transition && old.is_none() {
            continue;
        }
        match crate::cel::evaluate(&expr, value, old) {
            Ok(true) => {}
            Ok(false) => {
                let message = rule
                    .get("message")
                    .and_then(Value::as_str)
                    .filter(|m| !m.is_empty())
                    .map_or_else(|| format!("failed rule: {text}"), str::to_owned);
                out.push(rule_error(schema, rule, path, message));
            }
            Err(why) => out.push(rule_error(
                schema,
                rule,
                path,
                format!("{why} evaluating rule: {text}"),
            )),
        }
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            for (key, child) in map {
                if embedded && RESOURCE_KEYS.contains(&key.as_str()) {
                    continue;
                }
                if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
                    let old_child = old.and_then(|o| o.get(key));
                    rules_at(child_schema, child, old_child, &join(path, key), false, out);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else {
                return;
            };
            // oldSelf is correlated for map lists only (by their keys), as upstream.
            let keys: Vec<&str> =
                if schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map") {
                    schema
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|k| k.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default()
                } else {
                    Vec::new()
                };
            let old_items = old.and_then(Value::as_array);
            for (i, item) in items.iter().enumerate() {
                let old_item = if keys.is_empty() {
                    None
                } else {
                    old_items.and_then(|o| {
                        o.iter()
                            .find(|candidate| keys.iter().all(|k| candidate.get(k) == item.get(k)))
                    })
                };
                rules_at(
                    item_schema,
                    item,
                    old_item,
                    &format!("{path}[{i}]"),
                    false,
                    out,
                );
            }
        }
        _ => {}
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        _ => true,
    }
}

/// How kube-apiserver prints a value inside `Invalid value: ...`.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".to_owned(),
        Value::Array(_) => "\"array\"".to_owned(),
        other => other.to_string(),
    }
}

fn invalid(path: &str, value: &Value, why: String) -> FieldError {
    FieldError {
        field: path.to_owned(),
        reason: "FieldValueInvalid",
        detail: format!("Invalid value: {}: {why}", shown(value)),
    }
}

fn validate_at(schema: &Value, value: &Value, path: &str, root: bool, out: &mut Vec<FieldError>) {
    let shown_path = if path.is_empty() { "body" } else { path };
    if value.is_null() {
        if !flag(schema, "nullable") && schema.get("type").is_some() && !root {
            let expected = schema.get("type").and_then(Value::as_str).unwrap_or("");
            out.push(FieldError {
                field: path.to_owned(),
                reason: "FieldValueTypeInvalid",
                detail: format!(
                    "Invalid value: \"null\": {shown_path} in body must be of type {expected}: \"null\""
                ),
            });
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            let actual = type_name(value);
            out.push(FieldError {
                field: path.to_owned(),
                reason: "FieldValueTypeInvalid",
                detail: format!(
                    "Invalid value: \"{actual}\": {shown_path} in body must be of type integer,string: \"{actual}\""
                ),
            });
            return;
        }
    } else if let Some(expected) = schema.get("type").and_then(Value::as_str)
        && !type_matches(expected, value)
    {
        let actual = type_name(value);
        out.push(FieldError {
            field: path.to_owned(),
            reason: "FieldValueTypeInvalid",
            detail: format!(
                "Invalid value: \"{actual}\": {shown_path} in body must be of type {expected}: \"{actual}\""
            ),
        });
        return;
    }
    value_checks(schema, value, path, shown_path, out);
    for (keyword, rule) in [("allOf", "all"), ("anyOf", "any"), ("oneOf", "one")] {
        let Some(subs) = schema.get(keyword).and_then(Value::as_array) else {
            continue;
        };
        let passing = subs
            .iter()
            .filter(|sub| {
                let mut sub_errors = Vec::new();
                validate_at(sub, value, path, root, &mut sub_errors);
                sub_errors.is_empty()
            })
            .count();
        let ok = match rule {
            "all" => passing == subs.len(),
            "any" => passing >= 1,
            _ => passing == 1,
        };
        if !ok {
            let why = match rule {
                "all" => "must validate all the schemas (allOf)",
                "any" => "must validate at least one schema (anyOf)",
                _ => "must validate one and only one schema (oneOf)",
            };
            out.push(invalid(path, value, format!("{shown_path} in body {why}")));
        }
    }
    if let Some(not) = schema.get("not") {
        let mut sub_errors = Vec::new();
        validate_at(not, value, path, root, &mut sub_errors);
        if sub_errors.is_empty() {
            out.push(invalid(
                path,
                value,
                format!("{shown_path} in body must not validate the schema (not)"),
            ));
        }
    }
    match value {
        Value::Object(map) => validate_object(schema, map, path, root, out),
        Value::Array(items) => validate_array(schema, items, path, out),
        _ => {}
    }
}

fn value_checks(
    schema: &Value,
    value: &Value,
    path: &str,
    shown_path: &str,
    out: &mut Vec<FieldError>,
) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        out.push(FieldError {
            field: path.to_owned(),
            reason: "FieldValueNotSupported",
            detail: format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                list.join(", ")
            ),
        });
    }
    if let Some(n) = value.as_f64() {
        let exclusive = |k: &str| flag(schema, k);
        if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
            let bad = if exclusive("exclusiveMinimum") {
                n <= min
            } else {
                n < min
            };
            if bad {
                let word = if exclusive("exclusiveMinimum") {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                out.push(invalid(
                    path,
                    value,
                    format!("{shown_path} in body should be {word} {}", number_text(min)),
                ));
            }
        }
        if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
            let bad = if exclusive("exclusiveMaximum") {
                n >= max
            } else {
                n > max
            };
            if bad {
                let word = if exclusive("exclusiveMaximum") {
                    "less than"
                } else {
                    "less than or equal to"
                };
                out.push(invalid(
                    path,
                    value,
                    format!("{shown_path} in body should be {word} {}", number_text(max)),
                ));
            }
        }
        if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64)
            && m > 0.0
            && (n / m).fract() != 0.0
        {
            out.push(invalid(
                path,
                value,
                format!(
                    "{shown_path} in body should be a multiple of {}",
                    number_text(m)
                ),
            ));
        }
    }
    if let Some(s) = value.as_str() {
        let length = s.chars().count();
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && u64::try_from(s.len()).unwrap_or(u64::MAX) > max
        {
            out.push(FieldError {
                field: path.to_owned(),
                reason: "FieldValueTooLong",
                detail: format!("Too long: may not be more than {max} bytes"),
            });
        }
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && u64::try_from(length).unwrap_or(u64::MAX) < min
        {
            out.push(invalid(
                path,
                value,
                format!("{shown_path} in body should be at least {min} chars long"),
            ));
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            match regex::Regex::new(pattern) {
                Ok(re) if !re.is_match(s) => {
                    out.push(invalid(path, value, format!("{shown_path} in body should match '{pattern}'")));
                }
                Ok(_) => {}
                Err(_) => out.push(invalid(
                    path,
                    value,
                    format!("the schema's pattern '{pattern}' is not a regular expression the emulator understands"),
                )),
            }
        }
        if let Some(format) = schema.get("format").and_then(Value::as_str)
            && !format_matches(format, s)
        {
            out.push(invalid(
                path,
                value,
                format!("{shown_path} in body must be of type {format}: {s:?}"),
            ));
        }
    }
    if let (Some(format), Some(n)) = (schema.get("format").and_then(Value::as_str), value.as_i64())
        && format == "int32"
        && i32::try_from(n).is_err()
    {
        out.push(invalid(
            path,
            value,
            format!("{shown_path} in body must be of type int32: \"{n}\""),
        ));
    }
}

fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}

/// The string formats checked (others pass, as unknown formats do upstream).
fn format_matches(format: &str, s: &str) -> bool {
    match format {
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "date-time" => {
            let b = s.as_bytes();
            b.len() >= 20
                && b[4] == b'-'
                && b[7] == b'-'
                && (b[10] == b'T' || b[10] == b't')
                && b[13] == b':'
                && b[16] == b':'
                && (s.ends_with('Z') || s.ends_with('z') || s[19..].contains(['+', '-']))
        }
        "uuid" => {
            let parts: Vec<&str> = s.split('-').collect();
            parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
                && parts
                    .iter()
                    .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
        }
        _ => true,
    }
}

fn validate_object(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    root: bool,
    out: &mut Vec<FieldError>,
) {
    let shown_path = if path.is_empty() { "body" } else { path };
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(required) {
            out.push(FieldError {
                field: join(path, required),
                reason: "FieldValueRequired",
                detail: "Required value".to_owned(),
            });
        }
    }
    let count = u64::try_from(map.len()).unwrap_or(u64::MAX);
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && count > max
    {
        out.push(FieldError {
            field: path.to_owned(),
            reason: "FieldValueTooMany",
            detail: format!("Too many: {count}: must have at most {max} items"),
        });
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && count < min
    {
        out.push(invalid(
            path,
            &Value::Object(map.clone()),
            format!("{shown_path} in body should have at least {min} properties"),
        ));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    for (key, child) in map {
        let child_path = join(path, key);
        if embedded && key == "metadata" {
            if let Some(meta_schema) = properties.and_then(|p| p.get("metadata")) {
                for field in ["name", "generateName"] {
                    if let (Some(s), Some(v)) = (
                        meta_schema.pointer(&format!("/properties/{field}")),
                        child.get(field),
                    ) {
                        validate_at(s, v, &join(&child_path, field), false, out);
                    }
                }
            }
            continue;
        }
        if let Some(child_schema) = properties.and_then(|p| p.get(key)).or(additional) {
            validate_at(child_schema, child, &child_path, false, out);
        }
    }
    if flag(schema, "x-kubernetes-embedded-resource") {
        for key in ["apiVersion", "kind"] {
            if map
                .get(key)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                out.push(FieldError {
                    field: join(path, key),
                    reason: "FieldValueRequired",
                    detail: "Required value: must not be empty".to_owned(),
                });
            }
        }
    }
}

fn validate_array(schema: &Value, items: &[Value], path: &str, out: &mut Vec<FieldError>) {
    let shown_path = if path.is_empty() { "body" } else { path };
    let count = u64::try_from(items.len()).unwrap_or(u64::MAX);
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && count > max
    {
        out.push(FieldError {
            field: path.to_owned(),
            reason: "FieldValueTooMany",
            detail: format!("Too many: {count}: must have at most {max} items"),
        });
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && count < min
    {
        out.push(invalid(
            path,
            &Value::Array(items.to_vec()),
            format!("{shown_path} in body should have at least {min} items"),
        ));
    }
    if let Some(item_schema) = schema.get("items") {
        for (i, item) in items.iter().enumerate() {
            validate_at(item_schema, item, &format!("{path}[{i}]"), false, out);
        }
    }
    let key_of = |item: &Value| -> Option<Value> {
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => Some(item.clone()),
            Some("map") => {
                let keys = schema.get("x-kubernetes-list-map-keys")?.as_array()?;
                Some(Value::Array(
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(|k| item.get(k).cloned().unwrap_or(Value::Null))
                        .collect(),
                ))
            }
            _ => None,
        }
    };
    let mut seen: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some(key) = key_of(item) {
            if seen.contains(&key) {
                out.push(FieldError {
                    field: format!("{path}[{i}]"),
                    reason: "FieldValueDuplicate",
                    detail: format!("Duplicate value: {}", compact(&key, item)),
                });
            } else {
                seen.push(key);
            }
        }
    }
}

fn compact(key: &Value, item: &Value) -> String {
    if item.is_object() {
        key.to_string()
    } else {
        shown(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["nodeType"], "properties": {
                "nodeType": {"type": "string", "enum": ["CloudEphemeral", "Static"]},
                "minPerZone": {"type": "integer", "minimum": 0, "maximum": 10},
                "name": {"type": "string", "maxLength": 5, "pattern": "^[a-z]+$"},
                "size": {"x-kubernetes-int-or-string": true},
                "note": {"type": "string", "nullable": true},
                "update": {"type": "object", "default": {}, "properties": {
                    "maxConcurrent": {"x-kubernetes-int-or-string": true, "default": 1}}},
                "taints": {"type": "array", "maxItems": 2, "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["key"],
                    "items": {"type": "object", "properties": {"key": {"type": "string"}}}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
    }

    #[test]
    fn prunes_undeclared_fields_and_reports_their_paths() {
        let mut object = json!({"apiVersion": "x/v1", "kind": "T", "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"nodeType": "Static", "foo": 1, "taints": [{"key": "a", "bar": 2}],
                "extra": {"anything": true}, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "junk": 1},
                "labels": {"a": "b"}},
            "status": {"free": "form"}, "top": 1});
        let pruned = prune(&schema(), &mut object);
        assert_eq!(
            pruned,
            [
                "spec.foo",
                "spec.taints[0].bar",
                "spec.template.junk",
                "top"
            ]
        );
        assert_eq!(object["metadata"]["labels"]["x"], "y");
        assert_eq!(object["spec"]["extra"]["anything"], true);
        assert_eq!(object["spec"]["template"]["kind"], "Pod");
        assert_eq!(object["status"]["free"], "form");
    }

    #[test]
    fn defaults_fill_absent_fields_recursively() {
        let mut object = json!({"spec": {"nodeType": "Static"}});
        apply_defaults(&schema(), &mut object);
        assert_eq!(object["spec"]["update"], json!({"maxConcurrent": 1}));
        let mut kept = json!({"spec": {"nodeType": "Static", "update": {"maxConcurrent": "25%"}}});
        apply_defaults(&schema(), &mut kept);
        assert_eq!(kept["spec"]["update"]["maxConcurrent"], "25%");
    }

    #[test]
    fn errors_are_worded_like_kube_apiserver() {
        let object = json!({"metadata": {"name": "a"}, "spec": {"nodeType": "Cloud", "minPerZone": 11, "name": "ABCDEFG",
            "size": true, "note": null, "taints": [{"key": "a"}, {"key": "a"}, {"key": "b"}],
            "template": {"spec": {}}, "labels": {"a": 1}}});
        let messages: Vec<String> = validate(&schema(), &object)
            .iter()
            .map(FieldError::message)
            .collect();
        for expected in [
            r#"spec.nodeType: Unsupported value: "Cloud": supported values: "CloudEphemeral", "Static""#,
            "spec.minPerZone: Invalid value: 11: spec.minPerZone in body should be less than or equal to 10",
            "spec.name: Too long: may not be more than 5 bytes",
            r#"spec.name: Invalid value: "ABCDEFG": spec.name in body should match '^[a-z]+$'"#,
            r#"spec.size: Invalid value: "boolean": spec.size in body must be of type integer,string: "boolean""#,
            "spec.taints: Too many: 3: must have at most 2 items",
            r#"spec.taints[1]: Duplicate value: ["a"]"#,
            "spec.template.apiVersion: Required value: must not be empty",
            "spec.template.kind: Required value: must not be empty",
            r#"spec.labels.a: Invalid value: "integer": spec.labels.a in body must be of type string: "integer""#,
        ] {
            assert!(
                messages.contains(&expected.to_owned()),
                "missing {expected}\nin {messages:#?}"
            );
        }
        assert_eq!(messages.len(), 10, "{messages:#?}");
        let missing = validate(&schema(), &json!({"spec": {}}));
        assert_eq!(missing[0].message(), "spec.nodeType: Required value");
    }

    #[test]
    fn one_of_binds_alternatives() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}}});
        assert!(validate(&s, &json!({"spec": {"a": "x"}})).is_empty());
        let both = validate(&s, &json!({"spec": {"a": "x", "b": "y"}}));
        assert_eq!(
            both[0].message(),
            r#"spec: Invalid value: "object": spec in body must validate one and only one schema (oneOf)"#
        );
    }

    #[test]
    fn cel_rules_and_transition_rules() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.min <= self.max", "message": "min must not exceed max"}],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"},
                "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "labelSelector is immutable"}]},
                "unsupported": {"type": "string", "x-kubernetes-validations": [{"rule": "{'a': 1}.size() == 1"}]}}}}});
        let object =
            json!({"spec": {"min": 3, "max": 1, "selector": {"a": "b"}, "unsupported": "x"}});
        let errors: Vec<String> = validate(&s, &object)
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(
            errors,
            [r#"spec: Invalid value: "object": min must not exceed max"#]
        );
        let old = json!({"spec": {"min": 1, "max": 1, "selector": {"a": "c"}}});
        let fixed = json!({"spec": {"min": 1, "max": 2, "selector": {"a": "b"}}});
        let errors: Vec<String> = validate_update(&s, &fixed, Some(&old))
            .iter()
            .map(FieldError::message)
            .collect();
        assert_eq!(
            errors,
            [r#"spec.selector: Invalid value: "object": labelSelector is immutable"#]
        );
        // Added where there was none: no old value, the transition rule does not apply.
        let added = validate_update(&s, &fixed, Some(&json!({"spec": {"min": 1, "max": 1}})));
        assert!(added.is_empty(), "{added:?}");
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[a-zA-Z]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Pruning is idempotent, reports nothing the second time, and what it keeps is the
        /// input minus the reported paths: nothing declared or preserved is lost.
        #[test]
        fn pruning_is_idempotent_and_keeps_declared_fields(spec in any_json(), status in any_json()) {
            let mut object = json!({"apiVersion": "x/v1", "kind": "T", "metadata": {"name": "a"}, "spec": spec, "status": status.clone()});
            prune(&schema(), &mut object);
            let once = object.clone();
            prop_assert!(prune(&schema(), &mut object).is_empty());
            prop_assert_eq!(&object, &once);
            prop_assert_eq!(&object["status"], &status);
            prop_assert_eq!(&object["metadata"]["name"], "a");
        }

        /// Defaulting is idempotent and never changes a value the client set.
        #[test]
        fn defaulting_is_idempotent_and_keeps_set_values(spec in any_json()) {
            let mut object = json!({"spec": spec.clone()});
            apply_defaults(&schema(), &mut object);
            let once = object.clone();
            apply_defaults(&schema(), &mut object);
            prop_assert_eq!(&object, &once);
            if let (Some(before), Some(after)) = (spec.as_object(), object["spec"].as_object()) {
                for (k, v) in before {
                    if !v.is_null() {
                        prop_assert_eq!(after.get(k).map(|a| a == v || a.is_object()), Some(true));
                    }
                }
            }
        }

        /// Validation never panics and an error always names a field under the object.
        #[test]
        fn validation_names_fields(spec in any_json()) {
            for error in validate(&schema(), &json!({"spec": spec})) {
                prop_assert!(error.field.starts_with("spec"), "{:?}", error);
            }
        }
    }
}
