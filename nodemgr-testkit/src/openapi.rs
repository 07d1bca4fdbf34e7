//! A minimal OpenAPI v3 publication (`/openapi/v3` and one document per group-version), enough
//! for kubectl to find out that every resource's PATCH accepts `fieldValidation` — so
//! `kubectl apply` validates on the server (which the emulator accepts without a schema
//! check) instead of failing to download schemas. The documents list paths and parameters
//! only; object schemas are given for CRDs (their `openAPIV3Schema`) and left open for
//! built-ins, so `kubectl explain` knows little.

use serde_json::{Map, Value, json};

use crate::registry::ResourceType;

/// `group/version` path keys as `/openapi/v3` lists them (`api/v1`, `apis/policy/v1`).
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group-version's document lives.
pub fn root(types: &[ResourceType]) -> Value {
    let mut paths = Map::new();
    for t in types {
        for v in &t.versions {
            let key = gv_path(&t.group, &v.name);
            let hash = document_hash(&document(types, &t.group, &v.name));
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
            );
        }
    }
    json!({"paths": paths})
}

fn document_hash(doc: &Value) -> String {
    // FNV-1a over the serialized document: changes whenever the document does.
    let mut hasher = nodemgr_core::hash::Fnv::default();
    std::hash::Hasher::write(&mut hasher, doc.to_string().as_bytes());
    format!("{:016X}", std::hash::Hasher::finish(&hasher))
}

fn parameter(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

fn schema_name(t: &ResourceType, version: &str) -> String {
    let group = if t.group.is_empty() {
        "core".to_owned()
    } else {
        t.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{version}.{}", t.kind)
}

/// The document of one group-version, `None` when nothing is served there.
pub fn document_for(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    types
        .iter()
        .any(|t| t.group == group && t.version(version).is_some())
        .then(|| document(types, group, version))
}

fn document(types: &[ResourceType], group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for t in types.iter().filter(|t| t.group == group) {
        let Some(served) = t.version(version) else {
            continue;
        };
        let gvk = json!({"group": t.group, "version": version, "kind": t.kind});
        let prefix = format!("/{}", gv_path(group, version));
        let scope = if t.namespaced {
            "/namespaces/{namespace}"
        } else {
            ""
        };
        let name = schema_name(t, version);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let response = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
        let write_params = [
            parameter("dryRun"),
            parameter("fieldManager"),
            parameter("fieldValidation"),
        ];
        let mut patch_params = write_params.to_vec();
        patch_params.push(parameter("force"));
        let op = |action: &str, params: &[Value]| {
            json!({"x-kubernetes-action": action, "x-kubernetes-group-version-kind": gvk,
                "parameters": params, "responses": response})
        };
        paths.insert(
            format!("{prefix}{scope}/{}", t.plural),
            json!({"get": op("list", &[]), "post": op("post", &write_params)}),
        );
        paths.insert(
            format!("{prefix}{scope}/{}/{{name}}", t.plural),
            json!({"get": op("get", &[]), "put": op("put", &write_params),
                "patch": op("patch", &patch_params), "delete": op("delete", &[parameter("dryRun")])}),
        );
        let mut schema = served.schema.clone().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (nodemgr API emulator)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::builtin_types;

    #[test]
    fn root_links_documents_with_patch_field_validation() {
        let types = builtin_types();
        let r = root(&types);
        assert!(
            r["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/api/v1?hash=")
        );
        let doc = document_for(&types, "", "v1").unwrap();
        let patch = &doc["paths"]["/api/v1/nodes/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Node");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(document_for(&types, "nope.io", "v1").is_none());
    }
}
