//! The custom resources nodemgr serves and reads: NodeGroup, StaticInstance, SSHCredentials,
//! Instance, NodeGroupConfiguration and NodeUser (`deckhouse.io`, all cluster-scoped;
//! docs/deckhouse.md §1–§2, docs/bundles.md), as kube types wrapping nodemgr-core's model, and their
//! CustomResourceDefinitions.
//!
//! [`definitions`] builds the six CRDs with every served version; [`definitions_yaml`] prints
//! them as a multi-document YAML stream `kubectl apply -f -` accepts (`nodemgr crds`).

pub mod node_customisation;
pub mod node_group;
pub mod schema;
pub mod static_instance;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

pub use node_customisation::{NodeGroupConfiguration, NodeUser};
pub use node_group::{NodeGroup, NodeGroupSpec};
pub use static_instance::{
    Instance, SSHCredentials, SshCredentialsSpec, StaticInstance, StaticInstanceSpec,
};

/// Namespace of the conversion webhook's Service (the chart's `templates/webhook/webhook.yaml`).
pub const WEBHOOK_SERVICE_NAMESPACE: &str = "nodemgr-system";
/// Name of the conversion webhook's Service.
pub const WEBHOOK_SERVICE_NAME: &str = "nodemgr-webhook";
/// Path of the conversion endpoint.
pub const WEBHOOK_CONVERT_PATH: &str = "/convert";
/// The kinds whose versions differ in shape and are converted by the webhook; the others
/// (StaticInstance, Instance, one-version kinds) keep `conversion.strategy: None`.
pub const WEBHOOK_CONVERTED_KINDS: &[&str] = &["NodeGroup", "SSHCredentials", "NodeUser"];

/// `conversion.strategy: Webhook` through nodemgr-webhook's Service. The caBundle is filled
/// in by the webhook itself (`--ca-bundle-crd`) or by cert-manager's CA injector.
pub fn webhook_conversion() -> CustomResourceConversion {
    CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: WEBHOOK_SERVICE_NAMESPACE.into(),
                    name: WEBHOOK_SERVICE_NAME.into(),
                    path: Some(WEBHOOK_CONVERT_PATH.into()),
                    port: Some(443),
                }),
                ..WebhookClientConfig::default()
            }),
            conversion_review_versions: vec!["v1".into()],
        }),
    }
}

/// Why the CRDs could not be built or printed.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The versions of one kind do not merge (a bug in this module).
    #[error("failed to merge the versions of {kind}: {source}")]
    Merge {
        /// The kind.
        kind: &'static str,
        /// What kube reported.
        #[source]
        source: kube::core::crd::MergeError,
    },
    /// A CRD could not be printed as YAML.
    #[error("failed to print CRD {name} as YAML: {source}")]
    Yaml {
        /// The CRD.
        name: String,
        /// What the YAML writer reported.
        #[source]
        source: serde_saphyr::ser::Error,
    },
}

/// The six CustomResourceDefinitions, every served version in each.
///
/// # Errors
/// [`CrdError::Merge`] only if the version types of a kind disagree on group, kind or scope
/// (a programming error, caught by this module's tests).
pub fn definitions() -> Result<Vec<CustomResourceDefinition>, CrdError> {
    let merge = |kind: &'static str, crds: Vec<CustomResourceDefinition>, storage: &str| {
        merge_crds(crds, storage)
            .map(|mut crd| {
                if WEBHOOK_CONVERTED_KINDS.contains(&kind) {
                    crd.spec.conversion = Some(webhook_conversion());
                }
                crd
            })
            .map_err(|source| CrdError::Merge { kind, source })
    };
    Ok(vec![
        merge(
            "NodeGroup",
            vec![
                node_group::v1::NodeGroup::crd(),
                node_group::v1alpha2::NodeGroup::crd(),
                node_group::v1alpha1::NodeGroup::crd(),
            ],
            "v1",
        )?,
        merge(
            "StaticInstance",
            vec![
                static_instance::static_instance_v1alpha2::StaticInstance::crd(),
                static_instance::static_instance_v1alpha1::StaticInstance::crd(),
            ],
            "v1alpha2",
        )?,
        merge(
            "SSHCredentials",
            vec![
                static_instance::ssh_credentials_v1alpha2::SSHCredentials::crd(),
                static_instance::ssh_credentials_v1alpha1::SSHCredentials::crd(),
            ],
            "v1alpha2",
        )?,
        merge(
            "Instance",
            vec![
                static_instance::instance_v1alpha2::Instance::crd(),
                static_instance::instance_v1alpha1::Instance::crd(),
            ],
            "v1alpha2",
        )?,
        merge(
            "NodeGroupConfiguration",
            vec![
                node_customisation::node_group_configuration_v1alpha1::NodeGroupConfiguration::crd(
                ),
            ],
            "v1alpha1",
        )?,
        merge(
            "NodeUser",
            vec![
                node_customisation::node_user_v1::NodeUser::crd(),
                node_customisation::node_user_v1alpha1::NodeUser::crd(),
            ],
            "v1",
        )?,
    ])
}

/// The CRDs as one multi-document YAML stream (`---` between documents).
///
/// # Errors
/// See [`definitions`] and [`CrdError::Yaml`].
pub fn definitions_yaml() -> Result<String, CrdError> {
    let mut out = String::new();
    for crd in definitions()? {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let text = serde_saphyr::to_string(&crd).map_err(|source| CrdError::Yaml {
            name: name.clone(),
            source,
        })?;
        out.push_str("---\n");
        out.push_str(&text);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn by_name(name: &str) -> CustomResourceDefinition {
        definitions()
            .unwrap()
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .unwrap()
    }

    #[test]
    fn node_group_has_three_versions_v1_stored_with_status_and_columns() {
        let crd = by_name("nodegroups.deckhouse.io");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["ng".to_owned()]));
        let mut names: Vec<(&str, bool, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.served, v.storage))
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                ("v1", true, true),
                ("v1alpha1", true, false),
                ("v1alpha2", true, false)
            ]
        );
        for v in &crd.spec.versions {
            assert!(v.subresources.as_ref().unwrap().status.is_some());
            let columns: Vec<&str> = v
                .additional_printer_columns
                .iter()
                .flatten()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(
                columns,
                [
                    "Type",
                    "Ready",
                    "Nodes",
                    "UpToDate",
                    "Instances",
                    "Desired",
                    "Min",
                    "Max",
                    "Standby",
                    "Status",
                    "Age",
                    "Synced"
                ]
            );
        }
    }

    /// Structural schema rules the API server enforces: every node with `properties` or
    /// `items` has a `type`, every property has a type or int-or-string or preserve-unknown,
    /// and `anyOf` branches carry only value validations.
    fn check_structural(path: &str, schema: &Value, errors: &mut Vec<String>) {
        let Some(obj) = schema.as_object() else {
            errors.push(format!("{path}: not an object"));
            return;
        };
        let typed = obj.contains_key("type")
            || obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if !typed {
            errors.push(format!("{path}: no type"));
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            if obj.get("type").and_then(Value::as_str) != Some("object") {
                errors.push(format!("{path}: properties without type object"));
            }
            for (k, v) in props {
                check_structural(&format!("{path}.{k}"), v, errors);
            }
        }
        if let Some(items) = obj.get("items") {
            check_structural(&format!("{path}[]"), items, errors);
        }
        if let Some(extra) = obj.get("additionalProperties").filter(|v| v.is_object()) {
            check_structural(&format!("{path}.*"), extra, errors);
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            for branch in obj.get(key).and_then(Value::as_array).into_iter().flatten() {
                for forbidden in [
                    "type",
                    "properties",
                    "items",
                    "additionalProperties",
                    "default",
                ] {
                    if branch.get(forbidden).is_some() {
                        errors.push(format!("{path}.{key}: branch sets {forbidden}"));
                    }
                }
            }
        }
        if let Some(Value::String(p)) = obj.get("pattern")
            && p.is_empty()
        {
            errors.push(format!("{path}: empty pattern"));
        }
    }

    #[test]
    fn kinds_of_differing_versions_convert_through_the_webhook() {
        for crd in definitions().unwrap() {
            let conversion = crd.spec.conversion.clone().unwrap_or_default();
            let kind = crd.spec.names.kind.as_str();
            if WEBHOOK_CONVERTED_KINDS.contains(&kind) {
                assert_eq!(conversion.strategy, "Webhook", "{kind}");
                let service = conversion
                    .webhook
                    .and_then(|w| w.client_config)
                    .and_then(|c| c.service)
                    .unwrap();
                assert_eq!(service.path.as_deref(), Some("/convert"));
                assert_eq!(service.name, "nodemgr-webhook");
            } else {
                assert_ne!(conversion.strategy, "Webhook", "{kind}");
            }
        }
        let crd = serde_json::to_value(by_name("nodegroups.deckhouse.io")).unwrap();
        for v in crd["spec"]["versions"].as_array().unwrap() {
            let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
            let types = spec["nodeType"]["enum"].clone();
            let expected = if v["name"] == "v1" {
                serde_json::json!(["CloudEphemeral", "CloudPermanent", "CloudStatic", "Static"])
            } else {
                serde_json::json!(["Cloud", "Static", "Hybrid"])
            };
            assert_eq!(types, expected, "{}", v["name"]);
            assert_eq!(
                spec["staticInstances"]["x-kubernetes-validations"][0]["rule"],
                node_group::LABEL_SELECTOR_RULE
            );
            assert_eq!(
                spec["disruptions"]["x-kubernetes-validations"][0]["rule"],
                node_group::DISRUPTIONS_RULE
            );
            assert_eq!(
                spec["cri"]["x-kubernetes-validations"][0]["rule"],
                node_group::CRI_RULE
            );
        }
    }

    #[test]
    fn every_field_of_the_other_kinds_is_described() {
        let mut missing = Vec::new();
        for crd in definitions().unwrap() {
            let crd = serde_json::to_value(crd).unwrap();
            for v in crd["spec"]["versions"].as_array().unwrap() {
                let root = &v["schema"]["openAPIV3Schema"];
                // From the root: apiVersion, kind, metadata, spec and status themselves too.
                schema::undescribed(
                    &format!("{}/{}", crd["spec"]["names"]["kind"], v["name"]),
                    root,
                    &mut missing,
                );
                assert!(
                    root["description"].is_string(),
                    "{}",
                    crd["metadata"]["name"]
                );
            }
        }
        assert!(
            missing.is_empty(),
            "fields without a description: {missing:#?}"
        );
    }

    #[test]
    fn every_node_group_field_is_described_for_kubectl_explain() {
        let crd = serde_json::to_value(by_name("nodegroups.deckhouse.io")).unwrap();
        let mut missing = Vec::new();
        for v in crd["spec"]["versions"].as_array().unwrap() {
            let root = &v["schema"]["openAPIV3Schema"];
            // From the root: `kubectl explain nodegroup.spec` prints spec's own description.
            schema::undescribed(v["name"].as_str().unwrap(), root, &mut missing);
            for part in ["spec", "status"] {
                assert!(
                    root["properties"][part]["description"]
                        .as_str()
                        .is_some_and(|d| d.len() > 20),
                    "{}.{part}",
                    v["name"]
                );
            }
            let update = &root["properties"]["spec"]["properties"]["update"];
            assert!(update["description"].is_string(), "spec.update");
            assert!(
                update["properties"]["maxConcurrent"]["description"].is_string(),
                "spec.update.maxConcurrent"
            );
        }
        assert!(
            missing.is_empty(),
            "fields without a description: {missing:#?}"
        );
    }

    #[test]
    fn every_schema_is_structural() {
        let mut errors = Vec::new();
        for crd in definitions().unwrap() {
            for v in &crd.spec.versions {
                let schema = v
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .unwrap();
                let value = serde_json::to_value(schema).unwrap();
                let name = format!("{}/{}", crd.spec.names.kind, v.name);
                check_structural(&name, &value, &mut errors);
            }
        }
        assert!(errors.is_empty(), "{errors:#?}");
    }

    #[test]
    fn schemas_survive_kube_rewriting_unchanged() {
        // The manual schema goes through kube's structural rewriting; nothing may be lost.
        let crd = by_name("nodegroups.deckhouse.io");
        let v1 = crd.spec.versions.iter().find(|v| v.name == "v1").unwrap();
        let written =
            serde_json::to_value(v1.schema.as_ref().unwrap().open_api_v3_schema.as_ref()).unwrap();
        let spec = &written["properties"]["spec"];
        // kube writes bounds as floats, sorts `required` and marks int-or-string nullable;
        // everything else must come through as written.
        fn normalize(v: &Value) -> Value {
            match v {
                Value::Number(n) => serde_json::json!(n.as_f64()),
                Value::Array(a) => {
                    let mut items: Vec<Value> = a.iter().map(normalize).collect();
                    if items.iter().all(Value::is_string) {
                        items.sort_by_key(ToString::to_string);
                    }
                    Value::Array(items)
                }
                Value::Object(o) => Value::Object(
                    o.iter()
                        .filter(|(k, _)| k.as_str() != "nullable")
                        .map(|(k, v)| (k.clone(), normalize(v)))
                        .collect(),
                ),
                other => other.clone(),
            }
        }
        assert_eq!(
            normalize(spec),
            normalize(&node_group::spec_schema(node_group::SchemaVersion::V1))
        );
        assert_eq!(
            spec["properties"]["update"]["properties"]["maxConcurrent"]["x-kubernetes-int-or-string"],
            true
        );
        assert_eq!(
            written["properties"]["metadata"]["properties"]["name"]["maxLength"],
            42
        );
    }

    /// Every field the core model writes for a full NodeGroup exists in the v1 schema, so the
    /// API server prunes nothing nodemgr relies on.
    #[test]
    fn full_core_group_fits_the_schema() {
        fn walk(path: &str, value: &Value, schema: &Value, missing: &mut Vec<String>) {
            if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
                return;
            }
            match value {
                Value::Object(map) => {
                    let props = schema.get("properties");
                    let extra = schema.get("additionalProperties");
                    for (k, v) in map {
                        match (props.and_then(|p| p.get(k)), extra) {
                            (Some(s), _) => walk(&format!("{path}.{k}"), v, s, missing),
                            (None, Some(s)) => walk(&format!("{path}.{k}"), v, s, missing),
                            (None, None) => missing.push(format!("{path}.{k}")),
                        }
                    }
                }
                Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        walk(&format!("{path}[{i}]"), v, &schema["items"], missing);
                    }
                }
                _ => {}
            }
        }
        let text = include_str!("testdata/full-nodegroup.yaml");
        let group = nodemgr_core::model::parse_node_group(text).unwrap();
        let value = serde_json::to_value(&group.spec).unwrap();
        let mut missing = Vec::new();
        walk(
            "spec",
            &value,
            &node_group::spec_schema(node_group::SchemaVersion::V1),
            &mut missing,
        );
        assert!(
            missing.is_empty(),
            "fields the schema would prune: {missing:?}"
        );
        assert!(value["cloudInstances"]["standby"].is_string());
    }

    #[test]
    fn yaml_stream_parses_back_to_the_same_definitions() {
        let text = definitions_yaml().unwrap();
        let docs: Vec<CustomResourceDefinition> = serde_saphyr::from_multiple(&text).unwrap();
        assert_eq!(docs, definitions().unwrap());
        assert_eq!(text.matches("\n---\n").count() + 1, 6);
        assert!(text.starts_with("---\napiVersion: apiextensions.k8s.io/v1\n"));
    }
}
