//! Converts API objects (k8s-openapi types) into the views nodemgr-core decides on, and back
//! where nodemgr writes (metadata, taints). Lossy on purpose: a view holds what policies read.
//!
//! Values the core cannot read (an unparsable quantity, an unknown taint effect) are kept where
//! the core has a place for them ([`TaintEffect::Unknown`]) and skipped otherwise, with a debug
//! log; they never fail a whole reconcile.

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{self as meta, ObjectMeta};
use k8s_openapi::jiff;
use nodemgr_core::model::{
    self as core, LabelSelector, LabelSelectorRequirement, Owner, PodPhase, Quantity, Resources,
    TaintEffect, Timestamp, Toleration, keys,
};

/// A Kubernetes time as a core timestamp.
pub fn timestamp(t: &jiff::Timestamp) -> Timestamp {
    Timestamp::from_millis(t.as_millisecond())
}

/// A core timestamp as RFC 3339 (what `metav1.Time` serializes to).
pub fn to_jiff(t: Timestamp) -> jiff::Timestamp {
    jiff::Timestamp::from_millisecond(t.as_millis()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Object metadata as the core model holds it.
pub fn meta_to_core(m: &ObjectMeta) -> core::ObjectMeta {
    core::ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        generation: m.generation,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
        creation_timestamp: m.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(|t| t.0.to_string()),
    }
}

/// Core metadata as API metadata (server-set fields are copied only when parsable).
pub fn meta_from_core(m: &core::ObjectMeta) -> ObjectMeta {
    let time = |s: &Option<String>| {
        s.as_deref()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(meta::Time)
    };
    let non_empty_map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
    ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        generation: m.generation,
        labels: non_empty_map(&m.labels),
        annotations: non_empty_map(&m.annotations),
        finalizers: (!m.finalizers.is_empty()).then(|| m.finalizers.clone()),
        creation_timestamp: time(&m.creation_timestamp),
        deletion_timestamp: time(&m.deletion_timestamp),
        ..ObjectMeta::default()
    }
}

/// An API taint as a core taint.
pub fn taint_to_core(t: &Taint) -> core::Taint {
    core::Taint {
        effect: Some(t.effect.parse().unwrap_or_else(|e| match e {})),
        key: t.key.clone(),
        value: t.value.clone().filter(|v| !v.is_empty()),
    }
}

/// A core taint as an API taint (an unset effect becomes `NoSchedule`, the API's requirement).
pub fn taint_from_core(t: &core::Taint) -> Taint {
    Taint {
        effect: t
            .effect
            .as_ref()
            .map_or_else(|| TaintEffect::NoSchedule.to_string(), ToString::to_string),
        key: t.key.clone(),
        value: t.value.clone(),
        time_added: None,
    }
}

fn resources(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Resources {
    let mut out = Resources::new();
    for (name, q) in map.into_iter().flatten() {
        match Quantity::parse(&q.0) {
            Ok(q) => {
                out.insert(name.clone(), q);
            }
            Err(e) => tracing::debug!(resource = %name, error = %e, "skipping unreadable quantity"),
        }
    }
    out
}

/// A Node as the core sees it. `last_heartbeat` is the Ready condition's heartbeat; the fencing
/// controller combines it with the node's Lease.
pub fn node_to_core(n: &Node) -> core::Node {
    let spec = n.spec.as_ref();
    let status = n.status.as_ref();
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    core::Node {
        name: n.metadata.name.clone().unwrap_or_default(),
        uid: n.metadata.uid.clone().unwrap_or_default(),
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
        labels: n.metadata.labels.clone().unwrap_or_default(),
        annotations: n.metadata.annotations.clone().unwrap_or_default(),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(taint_to_core).collect())
            .unwrap_or_default(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready: ready_condition.is_some_and(|c| c.status == "True"),
        last_heartbeat: ready_condition
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(|t| timestamp(&t.0)),
        allocatable: resources(status.and_then(|s| s.allocatable.as_ref())),
        provider_id: spec.and_then(|s| s.provider_id.clone()),
        addresses: status
            .and_then(|s| s.addresses.as_ref())
            .map(|a| a.iter().map(|a| a.address.clone()).collect())
            .unwrap_or_default(),
        created: n
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| timestamp(&t.0)),
    }
}

fn selector_to_core(s: &meta::LabelSelector) -> LabelSelector {
    LabelSelector {
        match_labels: s.match_labels.clone(),
        match_expressions: s.match_expressions.as_ref().map(|exprs| {
            exprs
                .iter()
                .map(|e| LabelSelectorRequirement {
                    key: e.key.clone(),
                    operator: Some(e.operator.parse().unwrap_or_else(|e| match e {})),
                    values: e.values.clone(),
                })
                .collect()
        }),
    }
}

/// A Pod as the core sees it.
pub fn pod_to_core(p: &Pod) -> core::Pod {
    let spec = p.spec.as_ref();
    let mut requests = Resources::new();
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        for (k, v) in resources(c.resources.as_ref().and_then(|r| r.requests.as_ref())) {
            let slot = requests.entry(k).or_insert(Quantity::ZERO);
            *slot = Quantity(slot.0.saturating_add(v.0));
        }
    }
    for c in spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
    {
        for (k, v) in resources(c.resources.as_ref().and_then(|r| r.requests.as_ref())) {
            let slot = requests.entry(k).or_insert(Quantity::ZERO);
            if v > *slot {
                *slot = v;
            }
        }
    }
    let owner = p
        .metadata
        .owner_references
        .as_ref()
        .and_then(|refs| refs.iter().find(|r| r.controller == Some(true)))
        .map(|r| Owner {
            kind: r.kind.clone(),
            name: r.name.clone(),
        });
    let affinity = spec.and_then(|s| s.affinity.as_ref());
    let required_node_affinity = affinity
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|sel| {
            sel.node_selector_terms
                .iter()
                .map(|term| {
                    term.match_expressions
                        .iter()
                        .flatten()
                        .map(|e| LabelSelectorRequirement {
                            key: e.key.clone(),
                            operator: Some(e.operator.parse().unwrap_or_else(|e| match e {})),
                            values: e.values.clone(),
                        })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default();
    let hostname_anti_affinity = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|pa| {
            pa.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|terms| {
            terms
                .iter()
                .filter(|t| t.topology_key == keys::LABEL_HOSTNAME)
                .filter_map(|t| t.label_selector.as_ref().map(selector_to_core))
                .collect()
        })
        .unwrap_or_default();
    let tolerations = spec
        .and_then(|s| s.tolerations.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| Toleration {
                    key: t.key.clone().unwrap_or_default(),
                    exists: t.operator.as_deref() == Some("Exists"),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t
                        .effect
                        .as_deref()
                        .filter(|e| !e.is_empty())
                        .map(|e| e.parse().unwrap_or_else(|e| match e {})),
                })
                .collect()
        })
        .unwrap_or_default();
    let has_local_storage = spec.and_then(|s| s.volumes.as_ref()).is_some_and(|vs| {
        vs.iter()
            .any(|v| v.empty_dir.is_some() || v.host_path.is_some())
    });
    let phase = match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        _ => PodPhase::Pending,
    };
    core::Pod {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        node_name: spec.and_then(|s| s.node_name.clone()),
        labels: p.metadata.labels.clone().unwrap_or_default(),
        annotations: p.metadata.annotations.clone().unwrap_or_default(),
        owner,
        priority: spec.and_then(|s| s.priority).unwrap_or(0),
        priority_class: spec.and_then(|s| s.priority_class_name.clone()),
        requests,
        node_selector: spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default(),
        required_node_affinity,
        hostname_anti_affinity,
        tolerations,
        has_local_storage,
        phase,
    }
}

/// A PodDisruptionBudget as a drain sees it.
pub fn pdb_to_core(p: &PodDisruptionBudget) -> core::PodDisruptionBudget {
    core::PodDisruptionBudget {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        selector: p
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .map(selector_to_core)
            .unwrap_or_default(),
        disruptions_allowed: p.status.as_ref().map_or(0, |s| s.disruptions_allowed),
    }
}

/// The renew time of a node's Lease.
pub fn lease_renew_time(l: &Lease) -> Option<Timestamp> {
    l.spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| timestamp(&t.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus};

    #[test]
    fn node_ready_heartbeat_and_taints() {
        let t: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n1".into()),
                uid: Some("u1".into()),
                labels: Some([(keys::LABEL_NODE_GROUP.to_owned(), "w".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(vec![Taint {
                    effect: "NoExecute".into(),
                    key: "k".into(),
                    value: Some(String::new()),
                    time_added: None,
                }]),
                unschedulable: Some(true),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_heartbeat_time: Some(meta::Time(t)),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
        };
        let n = node_to_core(&node);
        assert!(n.ready && n.unschedulable);
        assert_eq!(n.group(), Some("w"));
        assert_eq!(n.last_heartbeat, Some(timestamp(&t)));
        assert_eq!(n.taints[0].effect, Some(TaintEffect::NoExecute));
        assert_eq!(n.taints[0].value, None);
        assert_eq!(taint_from_core(&n.taints[0]).effect, "NoExecute");
    }

    #[test]
    fn metadata_round_trips() {
        let m = core::ObjectMeta {
            name: Some("a".into()),
            labels: [("x".to_owned(), "y".to_owned())].into(),
            creation_timestamp: Some("2026-01-02T03:04:05Z".into()),
            ..core::ObjectMeta::default()
        };
        assert_eq!(meta_to_core(&meta_from_core(&m)), m);
    }
}
