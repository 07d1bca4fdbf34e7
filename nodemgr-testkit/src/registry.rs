//! The resource types the emulator serves: the built-in kinds nodemgr and kubectl use, and the
//! kinds registered by creating `CustomResourceDefinition` objects (group, versions, plural,
//! short names, scope, status subresource, printer columns, selectable fields, schema).

use std::cmp::Ordering;

use serde_json::Value;

use crate::status::ApiError;

/// One column of `kubectl get` output (`additionalPrinterColumns` of a CRD).
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Header, e.g. `READY`.
    pub name: String,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean`, `date`.
    pub column_type: String,
    /// OpenAPI format, e.g. `name`.
    pub format: String,
    /// Description shown by `kubectl explain`-like tools.
    pub description: String,
    /// 0 = shown by default, >0 = only with `-o wide`.
    pub priority: i64,
    /// JSONPath (simple dotted form, `.status.ready`) of the value.
    pub json_path: String,
}

/// One served version of a resource.
#[derive(Debug, Clone)]
pub struct ServedVersion {
    /// Version name, e.g. `v1`.
    pub name: String,
    /// Subresources served under this version (`status`, `eviction`, `scale`).
    pub subresources: Vec<String>,
    /// Printer columns (CRDs only; built-ins have their own table conversion).
    pub printer_columns: Vec<PrinterColumn>,
    /// Extra field-selector paths (CRD `selectableFields`), beyond `metadata.name`/`namespace`.
    pub selectable_fields: Vec<String>,
    /// The CRD's `openAPIV3Schema`, read for list types (`x-kubernetes-list-type`).
    pub schema: Option<Value>,
}

/// A served resource: everything discovery says about it and what the handlers need.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, `""` for the core group.
    pub group: String,
    /// Served versions, highest priority (preferred) first.
    pub versions: Vec<ServedVersion>,
    /// The version objects are stored at (`storage: true` for CRDs).
    pub storage_version: String,
    /// Plural resource name, the URL segment (`nodegroups`).
    pub plural: String,
    /// Singular name (`nodegroup`).
    pub singular: String,
    /// Kind (`NodeGroup`).
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names (`ng`).
    pub short_names: Vec<String>,
    /// Categories (`all`…).
    pub categories: Vec<String>,
    /// Whether this type was registered by a CustomResourceDefinition.
    pub custom: bool,
    /// Field-selector paths the built-in type supports (beyond `metadata.name`/`namespace`).
    pub builtin_fields: Vec<&'static str>,
    /// `spec.conversion.webhook.clientConfig` of a CRD whose conversion strategy is `Webhook`
    /// (`None`: versions differ only in `apiVersion`). See [`crate::conversion`].
    pub conversion_webhook: Option<Value>,
}

impl ResourceType {
    /// The served version named `version`, if any.
    pub fn version(&self, version: &str) -> Option<&ServedVersion> {
        self.versions.iter().find(|v| v.name == version)
    }

    /// Whether `version` serves the subresource `sub`.
    pub fn has_subresource(&self, version: &str, sub: &str) -> bool {
        self.version(version)
            .is_some_and(|v| v.subresources.iter().any(|s| s == sub))
    }

    /// Whether objects have a status subresource (so the main endpoint ignores status).
    pub fn has_status(&self) -> bool {
        self.versions
            .iter()
            .any(|v| v.subresources.iter().any(|s| s == "status"))
    }

    /// `group/version` or `version` for the core group.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_owned()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The storage key of this type: `(group, plural)`. All versions share storage, as with a
    /// CRD whose conversion strategy is `None`.
    pub fn key(&self) -> ResourceKey {
        if crate::events::is_events_v1(&self.group, &self.plural) {
            // One store behind both Event APIs (see [`crate::events`]).
            return ResourceKey {
                group: String::new(),
                plural: self.plural.clone(),
            };
        }
        ResourceKey {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Whether `field` (e.g. `spec.nodeName`) may be used in a field selector.
    pub fn supports_field(&self, version: &str, field: &str) -> bool {
        field == "metadata.name"
            || (field == "metadata.namespace" && self.namespaced)
            || self.builtin_fields.contains(&field)
            || self
                .version(version)
                .is_some_and(|v| v.selectable_fields.iter().any(|f| f == field))
    }
}

/// Identifies the storage of one resource type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub plural: String,
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    subresources: &'static [&'static str],
    fields: &'static [&'static str],
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    Builtin { group: "", version: "v1", plural: "namespaces", singular: "namespace", kind: "Namespace", namespaced: false, short_names: &["ns"], subresources: &["status", "finalize"], fields: &["status.phase"] },
    Builtin { group: "", version: "v1", plural: "nodes", singular: "node", kind: "Node", namespaced: false, short_names: &["no"], subresources: &["status"], fields: &["spec.unschedulable"] },
    Builtin { group: "", version: "v1", plural: "pods", singular: "pod", kind: "Pod", namespaced: true, short_names: &["po"], subresources: &["status", "eviction"], fields: POD_FIELDS },
    Builtin { group: "", version: "v1", plural: "events", singular: "event", kind: "Event", namespaced: true, short_names: &["ev"], subresources: &[], fields: EVENT_FIELDS },
    Builtin { group: "", version: "v1", plural: "secrets", singular: "secret", kind: "Secret", namespaced: true, short_names: &[], subresources: &[], fields: &["type"] },
    Builtin { group: "", version: "v1", plural: "configmaps", singular: "configmap", kind: "ConfigMap", namespaced: true, short_names: &["cm"], subresources: &[], fields: &[] },
    Builtin { group: "", version: "v1", plural: "services", singular: "service", kind: "Service", namespaced: true, short_names: &["svc"], subresources: &["status"], fields: &[] },
    Builtin { group: "", version: "v1", plural: "serviceaccounts", singular: "serviceaccount", kind: "ServiceAccount", namespaced: true, short_names: &["sa"], subresources: &[], fields: &[] },
    Builtin { group: "events.k8s.io", version: "v1", plural: "events", singular: "event", kind: "Event", namespaced: true, short_names: &["ev"], subresources: &[], fields: &["reason", "type", "reportingController", "regarding.kind", "regarding.name", "regarding.namespace", "regarding.uid"] },
    Builtin { group: "discovery.k8s.io", version: "v1", plural: "endpointslices", singular: "endpointslice", kind: "EndpointSlice", namespaced: true, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "coordination.k8s.io", version: "v1", plural: "leases", singular: "lease", kind: "Lease", namespaced: true, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "policy", version: "v1", plural: "poddisruptionbudgets", singular: "poddisruptionbudget", kind: "PodDisruptionBudget", namespaced: true, short_names: &["pdb"], subresources: &["status"], fields: &[] },
    Builtin { group: "apiextensions.k8s.io", version: "v1", plural: "customresourcedefinitions", singular: "customresourcedefinition", kind: "CustomResourceDefinition", namespaced: false, short_names: &["crd", "crds"], subresources: &["status"], fields: &[] },
    Builtin { group: "apps", version: "v1", plural: "daemonsets", singular: "daemonset", kind: "DaemonSet", namespaced: true, short_names: &["ds"], subresources: &["status"], fields: &[] },
    Builtin { group: "apps", version: "v1", plural: "deployments", singular: "deployment", kind: "Deployment", namespaced: true, short_names: &["deploy"], subresources: &["status"], fields: &[] },
    Builtin { group: "apps", version: "v1", plural: "replicasets", singular: "replicaset", kind: "ReplicaSet", namespaced: true, short_names: &["rs"], subresources: &["status"], fields: &[] },
    Builtin { group: "apps", version: "v1", plural: "statefulsets", singular: "statefulset", kind: "StatefulSet", namespaced: true, short_names: &["sts"], subresources: &["status"], fields: &[] },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", plural: "clusterroles", singular: "clusterrole", kind: "ClusterRole", namespaced: false, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", plural: "clusterrolebindings", singular: "clusterrolebinding", kind: "ClusterRoleBinding", namespaced: false, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", plural: "roles", singular: "role", kind: "Role", namespaced: true, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "certificates.k8s.io", version: "v1", plural: "certificatesigningrequests", singular: "certificatesigningrequest", kind: "CertificateSigningRequest", namespaced: false, short_names: &["csr"], subresources: &["status", "approval"], fields: &["spec.signerName"] },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", plural: "rolebindings", singular: "rolebinding", kind: "RoleBinding", namespaced: true, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", plural: "validatingwebhookconfigurations", singular: "validatingwebhookconfiguration", kind: "ValidatingWebhookConfiguration", namespaced: false, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", plural: "mutatingwebhookconfigurations", singular: "mutatingwebhookconfiguration", kind: "MutatingWebhookConfiguration", namespaced: false, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", plural: "validatingadmissionpolicies", singular: "validatingadmissionpolicy", kind: "ValidatingAdmissionPolicy", namespaced: false, short_names: &[], subresources: &["status"], fields: &[] },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", plural: "validatingadmissionpolicybindings", singular: "validatingadmissionpolicybinding", kind: "ValidatingAdmissionPolicyBinding", namespaced: false, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "storage.k8s.io", version: "v1", plural: "csinodes", singular: "csinode", kind: "CSINode", namespaced: false, short_names: &[], subresources: &[], fields: &[] },
    Builtin { group: "scheduling.k8s.io", version: "v1", plural: "priorityclasses", singular: "priorityclass", kind: "PriorityClass", namespaced: false, short_names: &["pc"], subresources: &[], fields: &[] },
];

/// The built-in resource types, in discovery order.
pub fn builtin_types() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(|b| ResourceType {
            group: b.group.to_owned(),
            versions: vec![ServedVersion {
                name: b.version.to_owned(),
                subresources: b.subresources.iter().map(|s| (*s).to_owned()).collect(),
                printer_columns: Vec::new(),
                selectable_fields: Vec::new(),
                schema: None,
            }],
            storage_version: b.version.to_owned(),
            plural: b.plural.to_owned(),
            singular: b.singular.to_owned(),
            kind: b.kind.to_owned(),
            namespaced: b.namespaced,
            short_names: b.short_names.iter().map(|s| (*s).to_owned()).collect(),
            categories: if matches!(
                b.plural,
                "pods" | "services" | "daemonsets" | "deployments" | "replicasets" | "statefulsets"
            ) {
                vec!["all".to_owned()]
            } else {
                Vec::new()
            },
            custom: false,
            builtin_fields: b.fields.to_vec(),
            conversion_webhook: None,
        })
        .collect()
}

/// Reads a CustomResourceDefinition object into the resource type it registers.
///
/// # Errors
/// 422 Invalid when required fields are missing, the name is not `<plural>.<group>`, no version
/// is served, or not exactly one version is the storage version.
pub fn type_from_crd(crd: &Value) -> Result<ResourceType, ApiError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let invalid = |msg: &str| {
        ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            name,
            msg.to_owned(),
        )
    };
    let spec = crd
        .get("spec")
        .ok_or_else(|| invalid("spec: Required value"))?;
    let text = |v: &Value, pointer: &str| {
        v.pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let strings = |v: &Value, pointer: &str| -> Vec<String> {
        v.pointer(pointer)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let group = text(spec, "/group").ok_or_else(|| invalid("spec.group: Required value"))?;
    let plural =
        text(spec, "/names/plural").ok_or_else(|| invalid("spec.names.plural: Required value"))?;
    let kind =
        text(spec, "/names/kind").ok_or_else(|| invalid("spec.names.kind: Required value"))?;
    if plural != plural.to_lowercase() {
        return Err(invalid(
            "spec.names.plural: Invalid value: must be lowercase",
        ));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(&format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        )));
    }
    let namespaced = match text(spec, "/scope").as_deref() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => {
            return Err(invalid(
                "spec.scope: Unsupported value: must be \"Namespaced\" or \"Cluster\"",
            ));
        }
    };
    let mut versions = Vec::new();
    let mut storage = Vec::new();
    for v in spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let vname =
            text(v, "/name").ok_or_else(|| invalid("spec.versions[].name: Required value"))?;
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage.push(vname.clone());
        }
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let mut subresources = Vec::new();
        if v.pointer("/subresources/status").is_some() {
            subresources.push("status".to_owned());
        }
        if v.pointer("/subresources/scale").is_some() {
            subresources.push("scale".to_owned());
        }
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: text(c, "/name").unwrap_or_default(),
                column_type: text(c, "/type").unwrap_or_else(|| "string".to_owned()),
                format: text(c, "/format").unwrap_or_default(),
                description: text(c, "/description").unwrap_or_default(),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: text(c, "/jsonPath").unwrap_or_default(),
            })
            .collect();
        let selectable_fields = v
            .get("selectableFields")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
            .map(|p| p.trim_start_matches('.').to_owned())
            .collect();
        versions.push(ServedVersion {
            name: vname,
            subresources,
            printer_columns,
            selectable_fields,
            schema: v.pointer("/schema/openAPIV3Schema").cloned(),
        });
    }
    if versions.is_empty() {
        return Err(invalid(
            "spec.versions: Invalid value: must have at least one served version",
        ));
    }
    if storage.len() != 1 {
        return Err(invalid(
            "spec.versions: Invalid value: must have exactly one version marked as storage version",
        ));
    }
    versions.sort_by(|a, b| compare_versions(&a.name, &b.name));
    let conversion_webhook = match text(spec, "/conversion/strategy").as_deref() {
        None | Some("None") => None,
        Some("Webhook") => Some(
            spec.pointer("/conversion/webhook/clientConfig")
                .cloned()
                .ok_or_else(|| invalid("spec.conversion.webhook.clientConfig: Required value: required when strategy is set to Webhook"))?,
        ),
        Some(other) => {
            return Err(invalid(&format!(
                "spec.conversion.strategy: Unsupported value: {other:?}: supported values: \"None\", \"Webhook\""
            )));
        }
    };
    Ok(ResourceType {
        group,
        versions,
        storage_version: storage.remove(0),
        singular: text(spec, "/names/singular").unwrap_or_else(|| kind.to_lowercase()),
        plural,
        kind,
        namespaced,
        short_names: strings(spec, "/names/shortNames"),
        categories: strings(spec, "/names/categories"),
        custom: true,
        builtin_fields: Vec::new(),
        conversion_webhook,
    })
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers first, then
/// anything else alphabetically. Returns `Less` when `a` is preferred.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let major: u64 = rest.get(..digits)?.parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (stage, minor) = if let Some(m) = tail.strip_prefix("beta") {
            (1, m)
        } else if let Some(m) = tail.strip_prefix("alpha") {
            (0, m)
        } else {
            return None;
        };
        Some((major, stage, minor.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn versions_sort_by_kubernetes_priority() {
        let mut v = vec!["v1alpha1", "v2", "foo", "v1beta2", "v1", "v1beta1", "v10"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            v,
            ["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn crd_registers_its_names_and_columns() {
        let crd = json!({
            "metadata": {"name": "nodegroups.deckhouse.io"},
            "spec": {"group": "deckhouse.io", "scope": "Cluster",
                "names": {"plural": "nodegroups", "singular": "nodegroup", "kind": "NodeGroup", "shortNames": ["ng"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Ready", "type": "integer", "jsonPath": ".status.ready"}]}]}
        });
        let t = type_from_crd(&crd).unwrap();
        assert_eq!(t.versions[0].name, "v1");
        assert_eq!(t.short_names, ["ng"]);
        assert!(!t.namespaced && t.has_status() && t.custom);
        assert_eq!(t.versions[0].printer_columns[0].json_path, ".status.ready");
    }

    #[test]
    fn crd_name_must_match_plural_and_group() {
        let crd = json!({"metadata": {"name": "wrong"}, "spec": {"group": "g.io", "scope": "Cluster",
            "names": {"plural": "things", "kind": "Thing"}, "versions": [{"name": "v1", "served": true, "storage": true}]}});
        assert_eq!(type_from_crd(&crd).unwrap_err().code, 422);
    }
}
