//! The `NodeGroup` custom resource (`nodegroups.deckhouse.io`, cluster-scoped, short name `ng`;
//! docs/deckhouse.md §1): `v1` (storage) and the served `v1alpha2` and `v1alpha1`, each a thin kube type
//! around [`nodemgr_core::model::NodeGroupSpec`] and [`NodeGroupStatus`], with a hand-written
//! schema carrying Deckhouse's enums, patterns and bounds.
//!
//! # Versions
//! The CRD converts between versions with nodemgr's conversion webhook
//! (`conversion.strategy: Webhook`, `nodemgr-webhook`'s `/convert`, which runs
//! [`nodemgr_core::conversion`]): `v1alpha1` and `v1alpha2` carry the old node types (`Cloud`,
//! `Static`, `Hybrid`), `v1alpha1` a top-level `docker`. `kubernetesVersion` and `static`,
//! which Deckhouse's `v1` dropped, stay in the `v1` schema so a `v1` manifest that sets them is
//! not pruned, but the conversion from an old version drops them as Deckhouse's does.
//! A CEL transition rule keeps `staticInstances.labelSelector` as first set.
//!
//! Every field carries the model's doc comment as its description (`kubectl explain`). Two of
//! Deckhouse's oneOf bindings (an approval mode's and a CRI type's own settings object) are
//! CEL rules here; the other cross-field rules (CloudEphemeral needs `cloudInstances`,
//! `RollingUpdate` only for CloudEphemeral, tolerable taint keys, …) are the admission
//! webhook's (docs/admission-and-conversion.md §2), which `nodemgr validate` and the status
//! controller apply too.

use std::borrow::Cow;

use kube::CustomResource;
use nodemgr_core::conversion::{ConversionContext, node_type_to_v1};
use nodemgr_core::model::spec_facts::{
    CHAOS_PERIOD_PATTERN, MAX_CONCURRENT_PATTERN, MIG_PROFILE_PATTERN, STANDBY_PATTERN,
    SWAP_SIZE_PATTERN, WATCHDOG_TIMEOUT_PATTERN, WINDOW_TIME_PATTERN,
};
use nodemgr_core::model::{self as core, NodeGroupStatus, NodeType};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::schema::*;
use crate::convert::{meta_from_core, meta_to_core};

/// Printer columns of every version: Deckhouse's (docs/deckhouse.md §1).
macro_rules! node_group_version {
    ($module:ident, $version:literal, storage = $storage:literal, $schema_version:expr) => {
        #[doc = concat!("`deckhouse.io/", $version, "` NodeGroup.")]
        pub mod $module {
            use super::*;

            /// The spec: nodemgr-core's NodeGroup spec, as written.
            #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
            #[kube(
                group = "deckhouse.io",
                version = $version,
                kind = "NodeGroup",
                plural = "nodegroups",
                singular = "nodegroup",
                shortname = "ng",
                status = "NodeGroupStatus",
                schema = "manual",
                storage = $storage,
                derive = "PartialEq",
                derive = "Default",
                printcolumn = r#"{"name":"Type","type":"string","description":"Type of the group's nodes.","jsonPath":".spec.nodeType"}"#,
                printcolumn = r#"{"name":"Ready","type":"integer","description":"Ready nodes.","jsonPath":".status.ready"}"#,
                printcolumn = r#"{"name":"Nodes","type":"integer","description":"Nodes in any state.","jsonPath":".status.nodes"}"#,
                printcolumn = r#"{"name":"UpToDate","type":"integer","description":"Nodes running the group's configuration.","jsonPath":".status.upToDate"}"#,
                printcolumn = r#"{"name":"Instances","type":"integer","description":"Machines in any state.","jsonPath":".status.instances"}"#,
                printcolumn = r#"{"name":"Desired","type":"integer","description":"Machines wanted.","jsonPath":".status.desired"}"#,
                printcolumn = r#"{"name":"Min","type":"integer","description":"Fewest machines.","jsonPath":".status.min"}"#,
                printcolumn = r#"{"name":"Max","type":"integer","description":"Most machines.","jsonPath":".status.max"}"#,
                printcolumn = r#"{"name":"Standby","type":"integer","description":"Standby (overprovisioned) nodes.","jsonPath":".status.standby"}"#,
                printcolumn = r#"{"name":"Status","type":"string","description":"What needs attention.","jsonPath":".status.conditionSummary.statusMessage"}"#,
                printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
                printcolumn = r#"{"name":"Synced","type":"string","description":"Whether the group's last spec was processed.","jsonPath":".status.deckhouse.synced"}"#
            )]
            #[serde(transparent)]
            pub struct NodeGroupSpec(pub core::NodeGroupSpec);

            impl schemars::JsonSchema for NodeGroup {
                fn schema_name() -> Cow<'static, str> {
                    Cow::Borrowed("NodeGroup")
                }

                fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                    into_schema(root_schema($schema_version))
                }
            }
        }
    };
}

node_group_version!(v1, "v1", storage = true, SchemaVersion::V1);
node_group_version!(
    v1alpha2,
    "v1alpha2",
    storage = false,
    SchemaVersion::V1alpha2
);
node_group_version!(
    v1alpha1,
    "v1alpha1",
    storage = false,
    SchemaVersion::V1alpha1
);

pub use v1::{NodeGroup, NodeGroupSpec};

impl NodeGroup {
    /// The group as nodemgr-core sees it. Old node type names (`Cloud`, `Hybrid`) that reach
    /// nodemgr unconverted (a CRD installed without the conversion webhook) are converted by
    /// [`nodemgr_core::conversion`], without the provider configuration.
    pub fn to_core(&self) -> core::NodeGroup {
        let mut spec = self.spec.0.clone();
        if let Some(NodeType::Unknown(old)) = &spec.node_type
            && let Some(new) = node_type_to_v1(
                old,
                self.metadata.name.as_deref().unwrap_or_default(),
                &ConversionContext::default(),
            )
        {
            spec.node_type = Some(new.parse().unwrap_or_else(|e| match e {}));
        }
        core::NodeGroup {
            api_version: "deckhouse.io/v1".into(),
            kind: "NodeGroup".into(),
            metadata: meta_to_core(&self.metadata),
            spec,
            status: self.status.clone(),
        }
    }

    /// A kube object from nodemgr-core's group (for creating groups, in tests and the demo).
    pub fn from_core(group: &core::NodeGroup) -> Self {
        let mut ng = NodeGroup::new(group.name(), NodeGroupSpec(group.spec.clone()));
        ng.metadata = meta_from_core(&group.metadata);
        ng.status = group.status.clone();
        ng
    }
}

/// Which version's schema to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaVersion {
    /// `v1` (storage).
    V1,
    /// `v1alpha2`: the old node types (`Cloud`, `Static`, `Hybrid`) and `cri.docker`.
    V1alpha2,
    /// `v1alpha1`: the old node types and a top-level `docker`.
    V1alpha1,
}

/// CEL transition rule: a selector once set stays as it is (StaticInstances already chosen by
/// it would otherwise change groups under running nodes).
pub const LABEL_SELECTOR_RULE: &str = "!has(oldSelf.labelSelector) || (has(self.labelSelector) && self.labelSelector == oldSelf.labelSelector)";
/// CEL: the approval mode's own settings object only.
pub const DISRUPTIONS_RULE: &str = "(!has(self.approvalMode) || self.approvalMode == 'Automatic') ? !has(self.rollingUpdate) : (self.approvalMode == 'RollingUpdate' ? !has(self.automatic) : (!has(self.automatic) && !has(self.rollingUpdate)))";
/// CEL: the CRI type's own settings object only.
pub const CRI_RULE: &str = "!has(self.type) || ((self.type == 'Containerd' || !has(self.containerd)) && (self.type == 'ContainerdV2' || !has(self.containerdV2)) && (self.type == 'Docker' || !has(self.docker)) && (self.type == 'NotManaged' || !has(self.notManaged)))";
const DAYS: &[&str] = &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// Description of `.spec` (`kubectl explain nodegroup.spec`).
const SPEC_DESCRIPTION: &str = "What the group should be: the type of its nodes (nodeType), how \
     many and where (cloudInstances, staticInstances), what runs on them (cri, kubelet, \
     nodeTemplate, operatingSystem, gpu, fencing) and how they are updated (disruptions, update).";
/// Description of `.status`.
const STATUS_DESCRIPTION: &str = "What the group is, as node-manager last observed it: node and \
     machine counts, conditions, errors and recent machine failures. Written by node-manager; do \
     not edit.";

/// Descriptions of the object's other top-level fields (`kubectl explain nodegroup`), which
/// the model's doc comments describe as nodemgr reads them, not as a user writes them.
const TOP_LEVEL: [(&str, &str); 3] = [
    (
        "apiVersion",
        "deckhouse.io/v1 (stored), v1alpha2 or v1alpha1; the API server converts between them \
         through nodemgr's conversion webhook.",
    ),
    ("kind", "NodeGroup."),
    (
        "metadata",
        "Standard object metadata; the name is the group's name, which its nodes carry in the \
         node.deckhouse.io/group label.",
    ),
];

fn root_schema(version: SchemaVersion) -> Value {
    let metadata = object(vec![(
        "name",
        describe(
            json!({
                "type": "string",
                "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                "maxLength": 42,
            }),
            "The group's name: lowercase letters, digits and '-', at most 42 characters.",
        ),
    )]);
    let mut schema = root(
        "A group of nodes of one type configured from one spec (nodemgr, Deckhouse-compatible).",
        Some(metadata),
        Some(spec_schema(version)),
        Some(status_schema()),
    );
    for (field, text) in TOP_LEVEL {
        if let Some(property) = schema
            .get_mut("properties")
            .and_then(|p| p.get_mut(field))
            .and_then(Value::as_object_mut)
        {
            property.insert("description".into(), Value::String(text.to_owned()));
        }
    }
    schema
}

fn windows() -> Value {
    array(required(
        object(vec![
            ("from", pattern(WINDOW_TIME_PATTERN)),
            ("to", pattern(WINDOW_TIME_PATTERN)),
            ("days", array(one_of(DAYS))),
        ]),
        &["from", "to"],
    ))
}

fn containerd() -> Value {
    object(vec![(
        "maxConcurrentDownloads",
        describe(integer(), "Parallel image layer downloads."),
    )])
}

fn docker() -> Value {
    object(vec![
        (
            "maxConcurrentDownloads",
            describe(integer(), "Parallel image layer downloads."),
        ),
        (
            "manage",
            describe(boolean(), "Whether Docker is installed and configured."),
        ),
    ])
}

/// The spec schema of `version`.
pub fn spec_schema(version: SchemaVersion) -> Value {
    let node_types: &[&str] = match version {
        SchemaVersion::V1alpha1 | SchemaVersion::V1alpha2 => &["Cloud", "Static", "Hybrid"],
        SchemaVersion::V1 => &["CloudEphemeral", "CloudPermanent", "CloudStatic", "Static"],
    };
    let mut cri = object(vec![
        (
            "type",
            one_of(&["Docker", "Containerd", "ContainerdV2", "NotManaged"]),
        ),
        ("containerd", containerd()),
        ("containerdV2", containerd()),
        ("docker", docker()),
        ("notManaged", object(vec![("criSocketPath", string())])),
    ]);
    // Only the settings object of the chosen type (Deckhouse's oneOf, as CEL).
    cri["x-kubernetes-validations"] = json!([{
        "rule": CRI_RULE,
        "message": "cri: only the settings object of cri.type may be set (containerd for \
                    Containerd, containerdV2 for ContainerdV2, docker for Docker, notManaged \
                    for NotManaged)",
    }]);
    let gpu = object(vec![
        ("sharing", one_of(&["TimeSlicing", "MIG", "Exclusive"])),
        (
            "timeSlicing",
            object(vec![("partitionCount", integer_in(Some(1), Some(100)))]),
        ),
        (
            "mig",
            object(vec![
                ("partedConfig", string()),
                (
                    "customConfigs",
                    array(object(vec![
                        ("index", integer_in(Some(0), None)),
                        (
                            "slices",
                            array(object(vec![
                                ("profile", pattern(MIG_PROFILE_PATTERN)),
                                ("count", integer_in(Some(1), Some(7))),
                            ])),
                        ),
                    ])),
                ),
            ]),
        ),
        ("exclusive", free_object()),
    ]);
    let selector_requirement = required(
        object(vec![
            ("key", string()),
            (
                "operator",
                one_of(&["In", "NotIn", "Exists", "DoesNotExist"]),
            ),
            ("values", array(string())),
        ]),
        &["key", "operator"],
    );
    let mut static_instances = object(vec![
        (
            "labelSelector",
            json!({
                "type": "object",
                "x-kubernetes-map-type": "atomic",
                "properties": {
                    "matchLabels": string_map(),
                    "matchExpressions": array(selector_requirement),
                },
            }),
        ),
        ("count", integer_in(Some(0), None)),
    ]);
    static_instances["x-kubernetes-validations"] = json!([{
        "rule": LABEL_SELECTOR_RULE,
        "message": "staticInstances.labelSelector may be added but never changed or removed; \
                    create a new NodeGroup for another selection",
    }]);
    let cloud_instances = required(
        object(vec![
            ("zones", array(string())),
            ("minPerZone", integer_in(Some(0), None)),
            ("maxPerZone", integer_in(Some(0), None)),
            ("maxUnavailablePerZone", integer_in(Some(0), None)),
            ("maxSurgePerZone", integer_in(Some(0), None)),
            ("priority", integer()),
            ("quickShutdown", boolean()),
            ("standby", int_or_string(STANDBY_PATTERN)),
            (
                "standbyHolder",
                object(vec![
                    ("overprovisioningRate", integer_in(Some(1), Some(80))),
                    (
                        "notHeldResources",
                        object(vec![
                            ("cpu", int_or_string("^[0-9]+m?$")),
                            (
                                "memory",
                                int_or_string(
                                    "^[0-9]+(\\.[0-9]+)?(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)?$",
                                ),
                            ),
                        ]),
                    ),
                ]),
            ),
            (
                "classReference",
                object(vec![
                    ("kind", one_of(nodemgr_core::validate::INSTANCE_CLASS_KINDS)),
                    ("name", string()),
                ]),
            ),
        ]),
        &["classReference", "minPerZone", "maxPerZone"],
    );
    let taint = object(vec![
        (
            "effect",
            one_of(&["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        ),
        ("key", string()),
        ("value", string()),
    ]);
    let node_template = object(vec![
        ("labels", string_map()),
        ("annotations", string_map()),
        ("taints", array(taint)),
    ]);
    let kubelet = object(vec![
        ("maxPods", integer()),
        ("rootDir", string()),
        ("containerLogMaxSize", string()),
        ("containerLogMaxFiles", integer_in(Some(1), Some(20))),
        ("seccompDefault", boolean()),
        (
            "resourceReservation",
            object(vec![
                ("mode", one_of(&["Off", "Auto", "Static"])),
                (
                    "static",
                    object(vec![
                        ("cpu", string()),
                        ("memory", string()),
                        ("ephemeralStorage", string()),
                    ]),
                ),
            ]),
        ),
        (
            "topologyManager",
            object(vec![
                ("enabled", boolean()),
                ("scope", one_of(&["Container", "Pod"])),
                (
                    "policy",
                    one_of(&["None", "BestEffort", "Restricted", "SingleNumaNode"]),
                ),
            ]),
        ),
        (
            "memorySwap",
            object(vec![
                ("swapBehavior", one_of(&["NoSwap", "LimitedSwap"])),
                ("swappiness", integer_in(Some(0), Some(100))),
                (
                    "limitedSwap",
                    object(vec![("size", pattern(SWAP_SIZE_PATTERN))]),
                ),
            ]),
        ),
    ]);
    let mut disruptions = object(vec![
        (
            "approvalMode",
            one_of(&["Manual", "Automatic", "RollingUpdate"]),
        ),
        (
            "automatic",
            object(vec![
                ("drainBeforeApproval", boolean()),
                ("windows", windows()),
            ]),
        ),
        ("rollingUpdate", object(vec![("windows", windows())])),
    ]);
    // Each mode takes only its own settings object (Automatic is the default mode); Deckhouse
    // binds them with oneOf, which kube-rs's structural rewriting cannot carry, so CEL does.
    disruptions["x-kubernetes-validations"] = json!([{
        "rule": DISRUPTIONS_RULE,
        "message": "disruptions: Automatic takes only `automatic`, RollingUpdate only \
                    `rollingUpdate`, Manual neither",
    }]);
    let mut props = vec![
        (
            "nodeType",
            describe(one_of(node_types), "Type of the group's nodes. Immutable."),
        ),
        ("nodeDrainTimeoutSecond", integer_in(Some(0), None)),
        ("gpu", gpu),
        ("cri", cri),
        ("staticInstances", static_instances),
        ("cloudInstances", cloud_instances),
        ("nodeTemplate", node_template),
        (
            "chaos",
            object(vec![
                ("mode", one_of(&["Disabled", "DrainAndDelete"])),
                ("period", pattern(CHAOS_PERIOD_PATTERN)),
            ]),
        ),
        ("operatingSystem", object(vec![("manageKernel", boolean())])),
        ("disruptions", disruptions),
        ("kubelet", kubelet),
        (
            "update",
            object(vec![(
                "maxConcurrent",
                int_or_string(MAX_CONCURRENT_PATTERN),
            )]),
        ),
        (
            "fencing",
            object(vec![
                ("mode", one_of(&["Watchdog", "Notify"])),
                (
                    "watchdog",
                    object(vec![("timeout", pattern(WATCHDOG_TIMEOUT_PATTERN))]),
                ),
            ]),
        ),
        ("kubernetesVersion", string()),
        (
            "static",
            object(vec![("internalNetworkCIDRs", array(string()))]),
        ),
    ];
    if version == SchemaVersion::V1alpha1 {
        props.push((
            "docker",
            describe(
                docker(),
                "Docker settings (v1alpha1; v1alpha2 and v1 have them as cri.docker). Deprecated.",
            ),
        ));
    }
    let mut spec = describe_from_model(
        describe(required(object(props), &["nodeType"]), SPEC_DESCRIPTION),
        &model_schema::<core::NodeGroupSpec>(),
    );
    apply_defaults(&mut spec);
    spec
}

/// Writes the documented defaults of `nodemgr_core::model::spec_facts::defaults` (the one list of them)
/// into the spec schema as API-server defaults, on every field the schema has: the API server
/// then fills them in where the field's parent object is given, as Deckhouse's CRD does, and
/// nodemgr's own reading of an absent field gives the same value.
fn apply_defaults(spec: &mut Value) {
    for field in nodemgr_core::model::spec_facts::defaults() {
        let mut node = Some(&mut *spec);
        for key in field.path.split('.') {
            node = node
                .and_then(|n| n.get_mut("properties"))
                .and_then(|p| p.get_mut(key));
        }
        if let Some(Value::Object(schema)) = node {
            schema.insert("default".into(), field.value.to_value());
        }
    }
}

/// `status.deckhouse.observed` / `.processed`: a spec checksum and its time.
fn spec_stamp() -> Value {
    object(vec![("lastTimestamp", string()), ("checkSum", string())])
}

/// The status schema (docs/deckhouse.md §1.3), the same in every version.
pub fn status_schema() -> Value {
    let last_operation = object(vec![
        ("description", string()),
        ("lastUpdateTime", string()),
        ("state", string()),
        ("type", string()),
    ]);
    let status = object(vec![
        ("engine", one_of(&["None", "MCM", "CAPI"])),
        ("nodes", integer()),
        ("ready", integer()),
        ("upToDate", integer()),
        ("instances", integer()),
        ("desired", integer()),
        ("min", integer()),
        ("max", integer()),
        ("standby", integer()),
        ("error", string()),
        ("kubernetesVersion", string()),
        (
            "lastMachineFailures",
            array(object(vec![
                ("name", string()),
                ("providerID", string()),
                ("ownerRef", string()),
                ("lastOperation", last_operation),
            ])),
        ),
        (
            "conditionSummary",
            object(vec![
                ("statusMessage", string()),
                ("ready", one_of(&["True", "False"])),
            ]),
        ),
        (
            "conditions",
            array(object(vec![
                ("type", string()),
                ("status", one_of(&["True", "False", "Unknown"])),
                ("lastTransitionTime", string()),
                ("message", string()),
            ])),
        ),
        (
            "deckhouse",
            object(vec![
                ("observed", spec_stamp()),
                ("processed", spec_stamp()),
                ("synced", one_of(&["True", "False"])),
            ]),
        ),
    ]);
    describe_from_model(
        describe(status, STATUS_DESCRIPTION),
        &model_schema::<NodeGroupStatus>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_default_is_an_api_server_default_of_every_version() {
        // The kubelet's own seccomp default is documented but not a CRD field.
        let not_in_crd = ["kubelet.seccompDefault"];
        for version in [
            SchemaVersion::V1alpha1,
            SchemaVersion::V1alpha2,
            SchemaVersion::V1,
        ] {
            let spec = spec_schema(version);
            for field in nodemgr_core::model::spec_facts::defaults() {
                if not_in_crd.contains(&field.path) {
                    continue;
                }
                let mut node = Some(&spec);
                for key in field.path.split('.') {
                    node = node
                        .and_then(|n| n.get("properties"))
                        .and_then(|p| p.get(key));
                }
                assert_eq!(
                    node.and_then(|n| n.get("default")),
                    Some(&field.value.to_value()),
                    "{version:?} spec.{}",
                    field.path
                );
            }
        }
    }
}
