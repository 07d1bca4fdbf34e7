//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}` and
//! `/apis/{group}/{version}` in the legacy (unaggregated) format. kubectl asks for aggregated
//! discovery (`apidiscovery.k8s.io/v2`) first but lists plain `application/json` as a fallback,
//! which these answer; kube-rs uses the legacy format.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::registry::{ResourceType, compare_versions};

/// The Kubernetes version the emulator claims to be.
pub const SERVER_MINOR: &str = "33";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": SERVER_MINOR,
        "gitVersion": format!("v1.{SERVER_MINOR}.0-nodemgr-emulator"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// Versions of each non-core group, preferred first.
fn groups(types: &[ResourceType]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        let versions = out.entry(t.group.clone()).or_default();
        for v in &t.versions {
            if !versions.contains(&v.name) {
                versions.push(v.name.clone());
            }
        }
    }
    for versions in out.values_mut() {
        versions.sort_by(|a, b| compare_versions(a, b));
    }
    out
}

fn group_document(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries.first().cloned().unwrap_or(Value::Null),
    })
}

/// `/apis`.
pub fn group_list(types: &[ResourceType]) -> Value {
    let list: Vec<Value> = groups(types)
        .iter()
        .map(|(g, vs)| {
            let mut doc = group_document(g, vs);
            if let Some(m) = doc.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
            doc
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list})
}

/// `/apis/{group}`, `None` when the group is not served.
pub fn group(types: &[ResourceType], group: &str) -> Option<Value> {
    groups(types).get(group).map(|vs| group_document(group, vs))
}

/// The verbs every stored resource supports.
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/api/v1` or `/apis/{group}/{version}`, `None` when nothing is served there.
pub fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in types.iter().filter(|t| t.group == group) {
        let Some(served) = t.version(version) else {
            continue;
        };
        let mut entry = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
            "storageVersionHash": format!("{:x}", t.plural.len() * 7919 + t.kind.len()),
        });
        if !t.short_names.is_empty() {
            entry["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            entry["categories"] = json!(t.categories);
        }
        resources.push(entry);
        for sub in &served.subresources {
            resources.push(match sub.as_str() {
                "eviction" => json!({"name": format!("{}/eviction", t.plural), "singularName": "", "namespaced": t.namespaced,
                    "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}),
                "finalize" => json!({"name": format!("{}/finalize", t.plural), "singularName": "", "namespaced": t.namespaced,
                    "kind": t.kind, "verbs": ["update"]}),
                "scale" => json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced,
                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}),
                other => json!({"name": format!("{}/{other}", t.plural), "singularName": "", "namespaced": t.namespaced,
                    "kind": t.kind, "verbs": ["get", "patch", "update"]}),
            });
        }
    }
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::builtin_types;

    #[test]
    fn core_lists_pods_and_eviction() {
        let types = builtin_types();
        let list = resource_list(&types, "", "v1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"pods")
                && names.contains(&"pods/eviction")
                && names.contains(&"nodes/status")
        );
        let eviction = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/eviction")
            .unwrap();
        assert_eq!(
            (eviction["group"].as_str(), eviction["kind"].as_str()),
            (Some("policy"), Some("Eviction"))
        );
        assert!(group(&types, "policy").is_some());
        assert!(resource_list(&types, "nope.io", "v1").is_none());
    }
}
