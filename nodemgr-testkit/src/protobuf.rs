//! A small Kubernetes-protobuf decoder, so that `kubectl create namespace|configmap|secret|
//! serviceaccount NAME` — kubectl's typed generators, which send
//! `application/vnd.kubernetes.protobuf` — succeed. It reads the envelope (`k8s\0` and a
//! `runtime.Unknown` carrying apiVersion, kind and the raw message) and, for those four kinds
//! only, the message fields such a request carries, into the JSON object the rest of the
//! emulator handles. Anything else (another kind, a field outside the subset, a malformed
//! message) is an error that becomes 415 with a request to send JSON: nothing is dropped
//! silently. See `docs/api-emulator.md`.

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// The magic prefix of Kubernetes protobuf bodies.
const MAGIC: &[u8] = b"k8s\0";

/// How one field of a message is decoded.
#[derive(Clone, Copy)]
enum Shape {
    Str,
    Bytes,
    Bool,
    Int,
    Message(&'static [Field]),
    Strings,
    Messages(&'static [Field]),
    MapStr,
    MapBytes,
    /// Set by the server on create (`selfLink`, `creationTimestamp`): read and dropped.
    ServerSet,
}

/// A field: number, JSON name, shape.
type Field = (u64, &'static str, Shape);

const OBJECT_META: &[Field] = &[
    (1, "name", Shape::Str),
    (2, "generateName", Shape::Str),
    (3, "namespace", Shape::Str),
    (4, "selfLink", Shape::ServerSet),
    (5, "uid", Shape::Str),
    (6, "resourceVersion", Shape::Str),
    (7, "generation", Shape::Int),
    (8, "creationTimestamp", Shape::ServerSet),
    (11, "labels", Shape::MapStr),
    (12, "annotations", Shape::MapStr),
    (14, "finalizers", Shape::Strings),
];
const NAMESPACE_SPEC: &[Field] = &[(1, "finalizers", Shape::Strings)];
const NAMESPACE_STATUS: &[Field] = &[(1, "phase", Shape::Str)];
const NAMESPACE: &[Field] = &[
    (1, "metadata", Shape::Message(OBJECT_META)),
    (2, "spec", Shape::Message(NAMESPACE_SPEC)),
    (3, "status", Shape::Message(NAMESPACE_STATUS)),
];
const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Shape::Message(OBJECT_META)),
    (2, "data", Shape::MapStr),
    (3, "binaryData", Shape::MapBytes),
    (4, "immutable", Shape::Bool),
];
const SECRET: &[Field] = &[
    (1, "metadata", Shape::Message(OBJECT_META)),
    (2, "data", Shape::MapBytes),
    (3, "type", Shape::Str),
    (4, "stringData", Shape::MapStr),
    (5, "immutable", Shape::Bool),
];
const LOCAL_OBJECT_REFERENCE: &[Field] = &[(1, "name", Shape::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", Shape::Message(OBJECT_META)),
    (
        3,
        "imagePullSecrets",
        Shape::Messages(LOCAL_OBJECT_REFERENCE),
    ),
    (4, "automountServiceAccountToken", Shape::Bool),
];
const TYPE_META: &[Field] = &[(1, "apiVersion", Shape::Str), (2, "kind", Shape::Str)];
const UNKNOWN: &[Field] = &[
    (1, "typeMeta", Shape::Message(TYPE_META)),
    (2, "raw", Shape::Bytes),
    (3, "contentEncoding", Shape::Str),
    (4, "contentType", Shape::Str),
];

/// The kinds decoded, by `(apiVersion, kind)`.
const KINDS: &[(&str, &str, &[Field])] = &[
    ("v1", "Namespace", NAMESPACE),
    ("v1", "ConfigMap", CONFIG_MAP),
    ("v1", "Secret", SECRET),
    ("v1", "ServiceAccount", SERVICE_ACCOUNT),
];

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at).ok_or("truncated varint")?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes".to_owned())
}

fn length_delimited<'a>(bytes: &'a [u8], at: &mut usize) -> Result<&'a [u8], String> {
    let length = usize::try_from(varint(bytes, at)?).map_err(|_| "length too large")?;
    let end = at.checked_add(length).ok_or("length overflows")?;
    let slice = bytes
        .get(*at..end)
        .ok_or("truncated length-delimited field")?;
    *at = end;
    Ok(slice)
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_owned())
}

fn map_entry(bytes: &[u8], binary: bool) -> Result<(String, Value), String> {
    let mut at = 0;
    let (mut key, mut value) = (String::new(), Value::String(String::new()));
    while at < bytes.len() {
        let tag = varint(bytes, &mut at)?;
        if tag & 7 != 2 {
            return Err("a map entry field is not length-delimited".to_owned());
        }
        let payload = length_delimited(bytes, &mut at)?;
        match tag >> 3 {
            1 => key = text(payload)?,
            2 if binary => {
                value = json!(base64::engine::general_purpose::STANDARD.encode(payload));
            }
            2 => value = json!(text(payload)?),
            n => return Err(format!("unexpected field {n} in a map entry")),
        }
    }
    Ok((key, value))
}

fn message(bytes: &[u8], fields: &[Field], context: &str) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    let mut at = 0;
    while at < bytes.len() {
        let tag = varint(bytes, &mut at)?;
        let (number, wire) = (tag >> 3, tag & 7);
        let Some((_, name, shape)) = fields.iter().find(|(n, _, _)| *n == number) else {
            // Go's generated code writes every scalar field, set or not: an empty one outside
            // the subset carries nothing and is skipped; anything else is named.
            let empty = match wire {
                0 => varint(bytes, &mut at)? == 0,
                2 => length_delimited(bytes, &mut at)?.is_empty(),
                _ => false,
            };
            if empty {
                continue;
            }
            return Err(format!(
                "field {number} of {context} is outside the subset the emulator decodes"
            ));
        };
        let name = (*name).to_owned();
        match (shape, wire) {
            (Shape::ServerSet, 0) => {
                varint(bytes, &mut at)?;
            }
            (Shape::ServerSet, 2) => {
                length_delimited(bytes, &mut at)?;
            }
            (Shape::Bool, 0) => {
                // Unset and false look the same on the wire: false is omitted, as JSON omits it.
                if varint(bytes, &mut at)? != 0 {
                    out.insert(name, json!(true));
                }
            }
            (Shape::Int, 0) => {
                // int64 as two's complement; 0 (unset) omitted.
                let v = varint(bytes, &mut at)?;
                if v != 0 {
                    out.insert(name, json!(i64::from_ne_bytes(v.to_ne_bytes())));
                }
            }
            (Shape::Str, 2) => {
                let value = text(length_delimited(bytes, &mut at)?)?;
                if !value.is_empty() {
                    out.insert(name, json!(value));
                }
            }
            (Shape::Bytes, 2) => {
                let payload = length_delimited(bytes, &mut at)?;
                out.insert(
                    name,
                    json!(base64::engine::general_purpose::STANDARD.encode(payload)),
                );
            }
            (Shape::Message(inner), 2) => {
                let payload = length_delimited(bytes, &mut at)?;
                out.insert(name.clone(), Value::Object(message(payload, inner, &name)?));
            }
            (Shape::Strings, 2) => {
                let value = json!(text(length_delimited(bytes, &mut at)?)?);
                push(&mut out, name, value);
            }
            (Shape::Messages(inner), 2) => {
                let payload = length_delimited(bytes, &mut at)?;
                let value = Value::Object(message(payload, inner, &name)?);
                push(&mut out, name, value);
            }
            (Shape::MapStr | Shape::MapBytes, 2) => {
                let payload = length_delimited(bytes, &mut at)?;
                let (key, value) = map_entry(payload, matches!(shape, Shape::MapBytes))?;
                if let Some(map) = out
                    .entry(name)
                    .or_insert_with(|| Value::Object(Map::new()))
                    .as_object_mut()
                {
                    map.insert(key, value);
                }
            }
            (_, wire) => {
                return Err(format!(
                    "field {number} ({name}) of {context} has wire type {wire}, which does not fit its type"
                ));
            }
        }
    }
    Ok(out)
}

fn push(out: &mut Map<String, Value>, name: String, value: Value) {
    if let Some(list) = out
        .entry(name)
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
    {
        list.push(value);
    }
}

/// Decodes a Kubernetes protobuf body into the JSON object it stands for.
///
/// # Errors
/// What cannot be decoded (not the envelope, a kind or field outside the subset, malformed
/// bytes), in words fit for the 415 message.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let payload = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the Kubernetes protobuf magic k8s\\0")?;
    let envelope = message(payload, UNKNOWN, "runtime.Unknown")?;
    let api_version = envelope
        .get("typeMeta")
        .and_then(|t| t.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = envelope
        .get("typeMeta")
        .and_then(|t| t.get("kind"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if envelope
        .get("contentEncoding")
        .and_then(Value::as_str)
        .is_some_and(|e| !e.is_empty())
    {
        return Err("content-encoded protobuf is not decoded".to_owned());
    }
    let raw = envelope
        .get("raw")
        .and_then(Value::as_str)
        .map(|r| base64::engine::general_purpose::STANDARD.decode(r))
        .transpose()
        .map_err(|e| e.to_string())?
        .unwrap_or_default();
    let fields = KINDS
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)
        .map(|(_, _, f)| *f)
        .ok_or_else(|| {
            format!("{kind} ({api_version}) is not among the kinds decoded from protobuf (Namespace, ConfigMap, Secret, ServiceAccount)")
        })?;
    let mut object = message(&raw, fields, &kind)?;
    object.insert("apiVersion".to_owned(), json!(api_version));
    object.insert("kind".to_owned(), json!(kind));
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(number: u64, wire: u64) -> Vec<u8> {
        encode_varint((number << 3) | wire)
    }

    fn encode_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let byte = u8::try_from(v & 0x7f).unwrap();
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return out;
            }
            out.push(byte | 0x80);
        }
    }

    fn delimited(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = key(number, 2);
        out.extend(encode_varint(payload.len() as u64));
        out.extend_from_slice(payload);
        out
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [
            delimited(1, api_version.as_bytes()),
            delimited(2, kind.as_bytes()),
        ]
        .concat();
        let unknown = [
            delimited(1, &type_meta),
            delimited(2, raw),
            delimited(4, b"application/vnd.kubernetes.protobuf"),
        ]
        .concat();
        [MAGIC.to_vec(), unknown].concat()
    }

    fn entry(k: &str, v: &[u8]) -> Vec<u8> {
        [delimited(1, k.as_bytes()), delimited(2, v)].concat()
    }

    #[test]
    fn a_config_map_as_kubectl_create_sends_it() {
        let meta = [
            delimited(1, b"settings"),
            delimited(3, b"default"),
            delimited(11, &entry("app", b"web")),
        ]
        .concat();
        let raw = [
            delimited(1, &meta),
            delimited(2, &entry("a", b"b")),
            delimited(2, &entry("c", b"d")),
            delimited(3, &entry("bin", &[0, 1])),
            key(4, 0),
            vec![1],
        ]
        .concat();
        let object = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            object,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default", "labels": {"app": "web"}},
            "data": {"a": "b", "c": "d"}, "binaryData": {"bin": "AAE="}, "immutable": true})
        );
    }

    #[test]
    fn other_kinds_and_fields_are_named_not_dropped() {
        let e = decode(&envelope("apps/v1", "Deployment", b"")).unwrap_err();
        assert!(e.contains("Deployment (apps/v1) is not among"), "{e}");
        let meta = [delimited(1, b"x"), delimited(13, b"owner")].concat();
        let e = decode(&envelope("v1", "Namespace", &delimited(1, &meta))).unwrap_err();
        assert!(e.contains("field 13 of metadata"), "{e}");
        // Empty scalars outside the subset, as Go writes them, are skipped.
        let meta = [
            delimited(1, b"x"),
            delimited(4, b""),
            delimited(13, b""),
            key(10, 0),
            vec![0],
        ]
        .concat();
        let object = decode(&envelope("v1", "Namespace", &delimited(1, &meta))).unwrap();
        assert_eq!(object["metadata"], json!({"name": "x"}));
        assert!(decode(b"{}").unwrap_err().contains("magic"));
    }

    proptest! {
        /// Garbage never panics the decoder.
        #[test]
        fn arbitrary_bytes_are_an_error_or_an_object(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let body = [MAGIC.to_vec(), bytes].concat();
            if let Ok(v) = decode(&body) {
                prop_assert!(v.is_object());
            }
        }

        /// Names and labels survive decoding.
        #[test]
        fn namespaces_round_trip(name in "[a-z]{1,10}", label in "[a-z]{0,10}") {
            let meta = [delimited(1, name.as_bytes()), delimited(11, &entry("team", label.as_bytes()))].concat();
            let object = decode(&envelope("v1", "Namespace", &delimited(1, &meta))).unwrap();
            prop_assert_eq!(&object["metadata"]["name"], &json!(name));
            prop_assert_eq!(&object["metadata"]["labels"]["team"], &json!(label));
        }
    }
}
