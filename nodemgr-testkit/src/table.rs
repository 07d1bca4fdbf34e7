//! Server-side printing: `meta.k8s.io/v1` `Table` responses for `kubectl get`
//! (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`). Custom resources get their CRD's
//! `additionalPrinterColumns` (values found by a small JSONPath subset: `.a.b`, `[0]`,
//! `[?(@.type=="Ready")]`); a few built-ins get the columns kubectl users know (nodes, pods,
//! namespaces, PDBs, leases, events); everything else gets Name and Age.

use serde_json::{Value, json};

use crate::registry::{PrinterColumn, ResourceType};
use crate::time::{human_duration, now_unix, parse_rfc3339};

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter (default Metadata).
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Whether an `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

/// Builds a Table of `objects` (already presented at the requested version).
pub fn to_table(
    rt: &ResourceType,
    version: &str,
    objects: &[Value],
    include: IncludeObject,
    headers: bool,
    list_meta: Value,
) -> Value {
    let columns = columns_for(rt, version);
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.column_type, "format": c.format,
                "description": c.description, "priority": c.priority})
        })
        .collect();
    let now = now_unix();
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns.iter().map(|c| cell(rt, c, object, now)).collect();
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Object => row["object"] = object.clone(),
                IncludeObject::Metadata => {
                    let mut meta = object.get("metadata").cloned().unwrap_or(json!({}));
                    if let Some(m) = meta.as_object_mut() {
                        m.remove("managedFields");
                    }
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta});
                }
            }
            row
        })
        .collect();
    let mut table = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "rows": rows});
    if headers {
        table["columnDefinitions"] = Value::Array(definitions);
    }
    table
}

fn column(name: &str, column_type: &str, priority: i64, json_path: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.to_owned(),
        column_type: column_type.to_owned(),
        format: if name == "Name" {
            "name".to_owned()
        } else {
            String::new()
        },
        description: String::new(),
        priority,
        json_path: json_path.to_owned(),
    }
}

/// Pseudo JSONPaths the built-in printers compute instead of looking up.
const AGE: &str = "@age";
const NODE_STATUS: &str = "@node-status";
const NODE_ROLES: &str = "@node-roles";
const POD_READY: &str = "@pod-ready";
const POD_STATUS: &str = "@pod-status";
const POD_RESTARTS: &str = "@pod-restarts";
const NODE_INTERNAL_IP: &str = "@node-internal-ip";

fn columns_for(rt: &ResourceType, version: &str) -> Vec<PrinterColumn> {
    let name = column("Name", "string", 0, ".metadata.name");
    let age = column("Age", "string", 0, AGE);
    if rt.custom {
        let custom = rt
            .version(version)
            .map(|v| v.printer_columns.clone())
            .unwrap_or_default();
        let mut out = vec![name];
        if custom.is_empty() {
            out.push(age);
        } else {
            out.extend(custom);
        }
        return out;
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "nodes") => vec![
            name,
            column("Status", "string", 0, NODE_STATUS),
            column("Roles", "string", 0, NODE_ROLES),
            age,
            column("Version", "string", 0, ".status.nodeInfo.kubeletVersion"),
            column("Internal-IP", "string", 1, NODE_INTERNAL_IP),
            column("OS-Image", "string", 1, ".status.nodeInfo.osImage"),
            column(
                "Kernel-Version",
                "string",
                1,
                ".status.nodeInfo.kernelVersion",
            ),
            column(
                "Container-Runtime",
                "string",
                1,
                ".status.nodeInfo.containerRuntimeVersion",
            ),
        ],
        ("", "pods") => vec![
            name,
            column("Ready", "string", 0, POD_READY),
            column("Status", "string", 0, POD_STATUS),
            column("Restarts", "string", 0, POD_RESTARTS),
            age,
            column("IP", "string", 1, ".status.podIP"),
            column("Node", "string", 1, ".spec.nodeName"),
        ],
        ("", "namespaces") => vec![name, column("Status", "string", 0, ".status.phase"), age],
        ("policy", "poddisruptionbudgets") => vec![
            name,
            column("Min Available", "string", 0, ".spec.minAvailable"),
            column("Max Unavailable", "string", 0, ".spec.maxUnavailable"),
            column(
                "Allowed Disruptions",
                "integer",
                0,
                ".status.disruptionsAllowed",
            ),
            age,
        ],
        ("coordination.k8s.io", "leases") => vec![
            name,
            column("Holder", "string", 0, ".spec.holderIdentity"),
            age,
        ],
        ("", "events") => vec![
            column("Last Seen", "string", 0, AGE),
            column("Type", "string", 0, ".type"),
            column("Reason", "string", 0, ".reason"),
            column("Object", "string", 0, ".involvedObject.name"),
            column("Message", "string", 0, ".message"),
        ],
        _ => vec![name, age],
    }
}

fn cell(rt: &ResourceType, column: &PrinterColumn, object: &Value, now: i64) -> Value {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    match column.json_path.as_str() {
        AGE => {
            let created = parse_rfc3339(&text("/metadata/creationTimestamp")).unwrap_or(now);
            json!(human_duration(now - created))
        }
        NODE_STATUS => {
            let ready = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["status"].as_str().unwrap_or(""));
            let mut status = match ready {
                Some("True") => "Ready".to_owned(),
                Some("False") => "NotReady".to_owned(),
                _ => "Unknown".to_owned(),
            };
            if object
                .pointer("/spec/unschedulable")
                .and_then(Value::as_bool)
                == Some(true)
            {
                status.push_str(",SchedulingDisabled");
            }
            json!(status)
        }
        NODE_ROLES => {
            let mut roles: Vec<String> = object
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(k, _)| {
                    k.strip_prefix("node-role.kubernetes.io/")
                        .map(str::to_owned)
                })
                .collect();
            roles.sort();
            json!(if roles.is_empty() {
                "<none>".to_owned()
            } else {
                roles.join(",")
            })
        }
        NODE_INTERNAL_IP => {
            let ip = object
                .pointer("/status/addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
                .and_then(|x| x["address"].as_str())
                .unwrap_or("<none>");
            json!(ip)
        }
        POD_READY => {
            let total = object
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            json!(format!("{ready}/{total}"))
        }
        POD_STATUS => {
            if object.pointer("/metadata/deletionTimestamp").is_some() {
                return json!("Terminating");
            }
            let reason = text("/status/reason");
            json!(if reason.is_empty() {
                object
                    .pointer("/status/phase")
                    .and_then(Value::as_str)
                    .unwrap_or("Pending")
                    .to_owned()
            } else {
                reason
            })
        }
        POD_RESTARTS => {
            let restarts: i64 = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map_or(0, |s| {
                    s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
                });
            json!(restarts.to_string())
        }
        path => {
            let found = eval_json_path(object, path);
            match (found, column.column_type.as_str(), rt.custom) {
                (None, _, true) => Value::Null,
                (None, _, false) => json!("<none>"),
                // Dates print as ages, as kube-apiserver's CRD table convertor does.
                (Some(Value::String(s)), "date", _) => match parse_rfc3339(s) {
                    Some(t) => json!(human_duration(now - t)),
                    None => json!(s),
                },
                (Some(Value::String(s)), "integer" | "number", _) => {
                    s.parse::<f64>().map(|n| json!(n)).unwrap_or(json!(s))
                }
                (Some(v), _, _) => v.clone(),
            }
        }
    }
}

/// Evaluates the JSONPath subset printer columns use. Returns the first match.
pub fn eval_json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut node = object;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let field = &after[..end];
            if !field.is_empty() {
                node = node.get(field)?;
            }
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let close = after.find(']')?;
            let inner = &after[..close];
            rest = &after[close + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, want) = filter.split_once("==")?;
                let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
                node = node.as_array()?.iter().find(|item| {
                    eval_json_path(item, &format!(".{}", field.trim())).and_then(Value::as_str)
                        == Some(want)
                })?;
            } else {
                let index: usize = inner.trim().parse().ok()?;
                node = node.as_array()?.get(index)?;
            }
        } else {
            return None;
        }
    }
    Some(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::builtin_types;

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}], "n": 3}});
        assert_eq!(eval_json_path(&o, ".status.n"), Some(&json!(3)));
        assert_eq!(
            eval_json_path(&o, ".status.conditions[0].type"),
            Some(&json!("A"))
        );
        assert_eq!(
            eval_json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(eval_json_path(&o, ".status.missing"), None);
    }

    #[test]
    fn node_rows() {
        let types = builtin_types();
        let nodes = types.iter().find(|t| t.plural == "nodes").unwrap();
        let node = json!({"metadata": {"name": "w1", "creationTimestamp": crate::time::now_rfc3339(),
            "labels": {"node-role.kubernetes.io/worker": ""}},
            "spec": {"unschedulable": true}, "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.33.1"}}});
        let t = to_table(
            nodes,
            "v1",
            &[node],
            IncludeObject::Metadata,
            true,
            json!({}),
        );
        assert_eq!(
            t["rows"][0]["cells"].as_array().unwrap()[..5],
            [
                json!("w1"),
                json!("Ready,SchedulingDisabled"),
                json!("worker"),
                json!("0s"),
                json!("v1.33.1")
            ]
        );
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(t["columnDefinitions"][0]["format"], "name");
    }
}
