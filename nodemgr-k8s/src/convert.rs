//! Converts API objects (k8s-openapi types) into the views nodemgr-core decides on, and back
//! where nodemgr writes (metadata, taints). Lossy on purpose: a view holds what policies read.
//!
//! Values the core cannot read (an unparsable quantity, an unknown taint effect) are kept where
//! the core has a place for them ([`TaintEffect::Unknown`]) and skipped otherwise, with a debug
//! log; they never fail a whole reconcile.
//!
//! A pod's inter-pod constraints ([`pod_to_core`]) follow docs/scheduling.md §1: topology spread
//! and pod (anti-)affinity on `kubernetes.io/hostname` and `topology.kubernetes.io/zone` are
//! modelled (`matchLabelKeys` and `mismatchLabelKeys` merged into the selector from the pod's
//! labels, as the API server and scheduler do); a *required* constraint nodemgr cannot model
//! (another topology key, a non-empty `namespaceSelector`, a non-default node inclusion policy)
//! is kept as a description in [`core::Pod::unmodelled_constraints`], so that the planners
//! neither place the pod nor move it; a *preferred* one is dropped (preferences never forbid a
//! placement).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Node, Pod, PodAffinityTerm, Taint, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{self as meta, ObjectMeta};
use k8s_openapi::jiff;
use nodemgr_core::model::{
    self as core, LabelSelector, LabelSelectorRequirement, NamespaceScope, Owner, PodPhase,
    Quantity, Resources, SelectorOperator, TaintEffect, Timestamp, Toleration, TopologyKey,
    WhenUnsatisfiable,
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
        labels: n.metadata.labels.clone().unwrap_or_default().into(),
        annotations: n.metadata.annotations.clone().unwrap_or_default().into(),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .map(|t| t.iter().map(taint_to_core).collect())
            .unwrap_or_default(),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready: ready_condition.is_some_and(|c| c.status == "True"),
        last_heartbeat: ready_condition
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(|t| timestamp(&t.0)),
        allocatable: resources(status.and_then(|s| s.allocatable.as_ref())).into(),
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

/// `selector` with `matchLabelKeys` (each key's value from `labels`, as `key=value`) and
/// `mismatchLabelKeys` (as `key notin (value)`) merged in; keys the pod lacks are ignored.
fn merge_label_keys(
    selector: Option<LabelSelector>,
    labels: &BTreeMap<String, String>,
    match_keys: Option<&[String]>,
    mismatch_keys: Option<&[String]>,
) -> Option<LabelSelector> {
    let mut s = selector?;
    for k in match_keys.unwrap_or_default() {
        if let Some(v) = labels.get(k) {
            s.match_expressions
                .get_or_insert_with(Vec::new)
                .push(LabelSelectorRequirement {
                    key: k.clone(),
                    operator: Some(SelectorOperator::In),
                    values: Some(vec![v.clone()]),
                });
        }
    }
    for k in mismatch_keys.unwrap_or_default() {
        if let Some(v) = labels.get(k) {
            s.match_expressions
                .get_or_insert_with(Vec::new)
                .push(LabelSelectorRequirement {
                    key: k.clone(),
                    operator: Some(SelectorOperator::NotIn),
                    values: Some(vec![v.clone()]),
                });
        }
    }
    Some(s)
}

/// A pod (anti-)affinity term as the core models it, or why it cannot be.
fn affinity_term(
    t: &PodAffinityTerm,
    labels: &BTreeMap<String, String>,
) -> Result<core::PodAffinityTerm, String> {
    let topology = TopologyKey::from_label(&t.topology_key)
        .ok_or_else(|| format!("topologyKey {}", t.topology_key))?;
    let listed: Vec<String> = t.namespaces.clone().unwrap_or_default();
    let namespaces = match &t.namespace_selector {
        Some(sel)
            if sel.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && sel.match_expressions.as_ref().is_none_or(Vec::is_empty) =>
        {
            NamespaceScope::All
        }
        Some(_) => return Err("a namespaceSelector".to_owned()),
        None if listed.is_empty() => NamespaceScope::Own,
        None => NamespaceScope::Listed(listed),
    };
    Ok(core::PodAffinityTerm {
        selector: merge_label_keys(
            t.label_selector.as_ref().map(selector_to_core),
            labels,
            t.match_label_keys.as_deref(),
            t.mismatch_label_keys.as_deref(),
        ),
        namespaces,
        topology,
    })
}

/// A topology spread constraint as the core models it, or why it cannot be.
fn spread_constraint(
    c: &TopologySpreadConstraint,
    labels: &BTreeMap<String, String>,
) -> Result<core::TopologySpreadConstraint, String> {
    let topology = TopologyKey::from_label(&c.topology_key)
        .ok_or_else(|| format!("topologyKey {}", c.topology_key))?;
    if c.node_affinity_policy
        .as_deref()
        .is_some_and(|p| p != "Honor")
    {
        return Err("nodeAffinityPolicy Ignore".to_owned());
    }
    if c.node_taints_policy
        .as_deref()
        .is_some_and(|p| p != "Ignore")
    {
        return Err("nodeTaintsPolicy Honor".to_owned());
    }
    Ok(core::TopologySpreadConstraint {
        max_skew: u32::try_from(c.max_skew.max(1)).unwrap_or(1),
        topology,
        when_unsatisfiable: if c.when_unsatisfiable == "ScheduleAnyway" {
            WhenUnsatisfiable::ScheduleAnyway
        } else {
            WhenUnsatisfiable::DoNotSchedule
        },
        selector: merge_label_keys(
            c.label_selector.as_ref().map(selector_to_core),
            labels,
            c.match_label_keys.as_deref(),
            None,
        ),
        min_domains: c
            .min_domains
            .filter(|_| c.when_unsatisfiable != "ScheduleAnyway")
            .map(|m| u32::try_from(m.max(1)).unwrap_or(1)),
    })
}

/// The inter-pod constraints of a pod spec: (required affinity, required anti-affinity in the
/// pod's namespace on the hostname key, the other required anti-affinity terms, preferred
/// affinity, preferred anti-affinity, spread constraints, unmodelled required constraints).
type PodConstraints = (
    Vec<core::PodAffinityTerm>,
    Vec<LabelSelector>,
    Vec<core::PodAffinityTerm>,
    Vec<core::WeightedPodAffinityTerm>,
    Vec<core::WeightedPodAffinityTerm>,
    Vec<core::TopologySpreadConstraint>,
    Vec<String>,
);

fn pod_constraints(p: &Pod) -> PodConstraints {
    let labels = p.metadata.labels.clone().unwrap_or_default();
    let spec = p.spec.as_ref();
    let affinity = spec.and_then(|s| s.affinity.as_ref());
    let mut unmodelled = Vec::new();
    let mut required = |what: &str, terms: Option<&Vec<PodAffinityTerm>>| {
        let mut out = Vec::new();
        for (i, t) in terms.into_iter().flatten().enumerate() {
            match affinity_term(t, &labels) {
                Ok(t) => out.push(t),
                Err(why) => unmodelled.push(format!(
                    "{what}.requiredDuringSchedulingIgnoredDuringExecution[{i}]: {why}"
                )),
            }
        }
        out
    };
    let pod_affinity = required(
        "podAffinity",
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    );
    let anti = required(
        "podAntiAffinity",
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    );
    // Own-namespace hostname terms keep their dedicated field.
    let (hostname, anti): (Vec<_>, Vec<_>) = anti.into_iter().partition(|t| {
        t.topology == TopologyKey::Hostname
            && t.namespaces == NamespaceScope::Own
            && t.selector.is_some()
    });
    let hostname_anti_affinity = hostname.into_iter().filter_map(|t| t.selector).collect();
    let preferred = |what: &str, terms: Option<&Vec<WeightedPodAffinityTerm>>| {
        let mut out = Vec::new();
        for (i, w) in terms.into_iter().flatten().enumerate() {
            match affinity_term(&w.pod_affinity_term, &labels) {
                Ok(term) => out.push(core::WeightedPodAffinityTerm {
                    weight: w.weight,
                    term,
                }),
                Err(why) => tracing::debug!(
                    pod = p.metadata.name.as_deref().unwrap_or_default(),
                    "ignoring {what}.preferredDuringSchedulingIgnoredDuringExecution[{i}]: {why}"
                ),
            }
        }
        out
    };
    let preferred_affinity = preferred(
        "podAffinity",
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    );
    let preferred_anti = preferred(
        "podAntiAffinity",
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
    );
    let mut spread = Vec::new();
    for (i, c) in spec
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .into_iter()
        .flatten()
        .enumerate()
    {
        match spread_constraint(c, &labels) {
            Ok(c) => spread.push(c),
            Err(why) if c.when_unsatisfiable != "ScheduleAnyway" => {
                unmodelled.push(format!("topologySpreadConstraints[{i}]: {why}"));
            }
            Err(why) => tracing::debug!(
                pod = p.metadata.name.as_deref().unwrap_or_default(),
                "ignoring topologySpreadConstraints[{i}] (ScheduleAnyway): {why}"
            ),
        }
    }
    (
        pod_affinity,
        hostname_anti_affinity,
        anti,
        preferred_affinity,
        preferred_anti,
        spread,
        unmodelled,
    )
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
    let (
        pod_affinity,
        hostname_anti_affinity,
        pod_anti_affinity,
        preferred_pod_affinity,
        preferred_pod_anti_affinity,
        topology_spread,
        unmodelled_constraints,
    ) = pod_constraints(p);
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
        labels: p.metadata.labels.clone().unwrap_or_default().into(),
        annotations: p.metadata.annotations.clone().unwrap_or_default().into(),
        owner,
        priority: spec.and_then(|s| s.priority).unwrap_or(0),
        priority_class: spec.and_then(|s| s.priority_class_name.clone()),
        requests,
        node_selector: spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default(),
        required_node_affinity,
        hostname_anti_affinity,
        pod_affinity,
        pod_anti_affinity,
        preferred_pod_affinity,
        preferred_pod_anti_affinity,
        topology_spread,
        unmodelled_constraints,
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
    use k8s_openapi::api::core::v1::{
        Affinity, NodeCondition, NodeSpec, NodeStatus, PodAntiAffinity, PodSpec,
    };
    use nodemgr_core::model::keys;

    fn app(v: &str) -> meta::LabelSelector {
        meta::LabelSelector {
            match_labels: Some([("app".to_owned(), v.to_owned())].into()),
            match_expressions: None,
        }
    }

    fn term(key: &str, ns: Option<Vec<String>>) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(app("web")),
            namespaces: ns,
            topology_key: key.into(),
            ..PodAffinityTerm::default()
        }
    }

    #[test]
    fn scheduling_constraints_on_hostname_and_zone_are_modelled() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some(
                    [
                        ("app".to_owned(), "web".to_owned()),
                        ("rev".to_owned(), "7".to_owned()),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                affinity: Some(Affinity {
                    pod_affinity: Some(k8s_openapi::api::core::v1::PodAffinity {
                        required_during_scheduling_ignored_during_execution: Some(vec![term(
                            keys::LABEL_TOPOLOGY_ZONE,
                            None,
                        )]),
                        preferred_during_scheduling_ignored_during_execution: Some(vec![
                            WeightedPodAffinityTerm {
                                weight: 5,
                                pod_affinity_term: term("example.com/rack", None),
                            },
                        ]),
                    }),
                    pod_anti_affinity: Some(PodAntiAffinity {
                        required_during_scheduling_ignored_during_execution: Some(vec![
                            term(keys::LABEL_HOSTNAME, None),
                            term(keys::LABEL_HOSTNAME, Some(vec!["other".into()])),
                            term(keys::LABEL_TOPOLOGY_ZONE, None),
                        ]),
                        preferred_during_scheduling_ignored_during_execution: None,
                    }),
                    node_affinity: None,
                }),
                topology_spread_constraints: Some(vec![
                    TopologySpreadConstraint {
                        label_selector: Some(app("web")),
                        match_label_keys: Some(vec!["rev".into(), "absent".into()]),
                        max_skew: 2,
                        min_domains: Some(3),
                        topology_key: keys::LABEL_TOPOLOGY_ZONE.into(),
                        when_unsatisfiable: "DoNotSchedule".into(),
                        ..TopologySpreadConstraint::default()
                    },
                    TopologySpreadConstraint {
                        label_selector: Some(app("web")),
                        max_skew: 1,
                        topology_key: "example.com/rack".into(),
                        when_unsatisfiable: "DoNotSchedule".into(),
                        ..TopologySpreadConstraint::default()
                    },
                    TopologySpreadConstraint {
                        label_selector: Some(app("web")),
                        max_skew: 1,
                        topology_key: "example.com/rack".into(),
                        when_unsatisfiable: "ScheduleAnyway".into(),
                        ..TopologySpreadConstraint::default()
                    },
                ]),
                ..PodSpec::default()
            }),
            status: None,
        };
        let p = pod_to_core(&pod);
        assert_eq!(p.pod_affinity.len(), 1);
        assert_eq!(p.pod_affinity[0].topology, TopologyKey::Zone);
        assert_eq!(p.pod_affinity[0].namespaces, NamespaceScope::Own);
        assert!(p.preferred_pod_affinity.is_empty(), "rack key dropped");
        assert_eq!(
            p.hostname_anti_affinity.len(),
            1,
            "own-namespace hostname term"
        );
        assert_eq!(p.pod_anti_affinity.len(), 2);
        assert_eq!(
            p.pod_anti_affinity[0].namespaces,
            NamespaceScope::Listed(vec!["other".into()])
        );
        assert_eq!(p.pod_anti_affinity[1].topology, TopologyKey::Zone);
        assert_eq!(p.topology_spread.len(), 1);
        let c = &p.topology_spread[0];
        assert_eq!((c.max_skew, c.min_domains), (2, Some(3)));
        let sel = c.selector.as_ref().unwrap();
        assert!(sel.matches(&p.labels));
        let mut other_rev = p.labels.clone();
        other_rev.insert("rev".into(), "8".into());
        assert!(!sel.matches(&other_rev), "matchLabelKeys merged in");
        assert_eq!(
            p.unmodelled_constraints,
            vec!["topologySpreadConstraints[1]: topologyKey example.com/rack".to_owned()]
        );
    }

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
