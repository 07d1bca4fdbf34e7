//! The matrix's tests: every spec leaf covered by one rule, the seed table, the guarantees of the
//! module docs as properties.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::normalize::*;
use super::rules::*;
use super::*;
use crate::model::*;

fn spec(json: Value) -> NodeGroupSpec {
    serde_json::from_value(json).expect("test spec parses")
}

fn impact(old: Value, new: Value) -> Impact {
    impact_of(&spec(old), &spec(new))
}

fn only(path: &str, disruption: bool, reprovision: bool, kubelet_restart: bool) -> Impact {
    Impact::from_changes(vec![ChangeImpact {
        path: path.to_owned(),
        disruption,
        reprovision,
        kubelet_restart,
    }])
}

fn rule(path: &str) -> &'static Rule {
    RULES.iter().find(|r| r.path == path).expect("rule exists")
}

// ---- one test per row of the seed table ----

#[test]
fn seed_chaos_does_nothing() {
    let got = impact(
        serde_json::json!({}),
        serde_json::json!({"chaos": {"mode": "DrainAndDelete", "period": "1h"}}),
    );
    assert_eq!(got, only("chaos", false, false, false));
}

#[test]
fn seed_class_reference_reprovisions() {
    let got = impact(
        serde_json::json!({"cloudInstances": {"classReference": {"kind": "AWSInstanceClass", "name": "a"}}}),
        serde_json::json!({"cloudInstances": {"classReference": {"kind": "AWSInstanceClass", "name": "b"}}}),
    );
    assert_eq!(
        got,
        only("cloudInstances.classReference", false, true, false)
    );
}

#[test]
fn seed_max_surge_per_zone_does_nothing() {
    let got = impact(
        serde_json::json!({"cloudInstances": {"maxSurgePerZone": 1}}),
        serde_json::json!({"cloudInstances": {"maxSurgePerZone": 3}}),
    );
    assert_eq!(
        got,
        only("cloudInstances.maxSurgePerZone", false, false, false)
    );
}

#[test]
fn seed_containerd_max_concurrent_downloads_restarts_kubelet() {
    let got = impact(
        serde_json::json!({"cri": {"type": "Containerd", "containerd": {"maxConcurrentDownloads": 3}}}),
        serde_json::json!({"cri": {"type": "Containerd", "containerd": {"maxConcurrentDownloads": 10}}}),
    );
    assert_eq!(
        got,
        only("cri.containerd.maxConcurrentDownloads", false, false, true)
    );
}

#[test]
fn seed_cri_type_to_not_managed_is_not_disruptive() {
    let got = impact(
        serde_json::json!({"cri": {"type": "Containerd"}}),
        serde_json::json!({"cri": {"type": "NotManaged"}}),
    );
    assert_eq!(got, only("cri.type", false, false, false));
}

#[test]
fn seed_cri_type_from_not_managed_is_disruptive() {
    let got = impact(
        serde_json::json!({"cri": {"type": "NotManaged"}}),
        serde_json::json!({"cri": {"type": "Containerd"}}),
    );
    assert_eq!(got, only("cri.type", true, false, false));
}

#[test]
fn seed_cri_type_containerd_to_v2_is_disruptive() {
    let got = impact(
        serde_json::json!({"cri": {"type": "Containerd"}}),
        serde_json::json!({"cri": {"type": "ContainerdV2"}}),
    );
    assert_eq!(got, only("cri.type", true, false, false));
}

#[test]
fn seed_disruptions_do_nothing_and_are_reported_whole() {
    let got = impact(
        serde_json::json!({"disruptions": {"approvalMode": "Automatic"}}),
        serde_json::json!({"disruptions": {"approvalMode": "Automatic", "automatic": {
            "windows": [{"from": "01:00", "to": "03:00", "days": ["Mon"]}]}}}),
    );
    assert_eq!(got, only("disruptions", false, false, false));
}

#[test]
fn seed_kubelet_max_pods_restarts_kubelet() {
    let got = impact(
        serde_json::json!({"kubelet": {"maxPods": 110}}),
        serde_json::json!({"kubelet": {"maxPods": 250}}),
    );
    assert_eq!(got, only("kubelet.maxPods", false, false, true));
}

#[test]
fn seed_kubelet_root_dir_restarts_kubelet() {
    let got = impact(
        serde_json::json!({}),
        serde_json::json!({"kubelet": {"rootDir": "/mnt/kubelet"}}),
    );
    assert_eq!(got, only("kubelet.rootDir", false, false, true));
}

#[test]
fn seed_kubernetes_version_restarts_kubelet() {
    let got = impact(
        serde_json::json!({"kubernetesVersion": "1.32"}),
        serde_json::json!({"kubernetesVersion": "1.33"}),
    );
    assert_eq!(got, only("kubernetesVersion", false, false, true));
}

#[test]
fn seed_node_template_does_nothing_and_is_reported_whole() {
    let got = impact(
        serde_json::json!({"nodeTemplate": {"labels": {"a": "1"}}}),
        serde_json::json!({"nodeTemplate": {"labels": {"a": "2"},
            "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(got, only("nodeTemplate", false, false, false));
}

#[test]
fn seed_static_restarts_kubelet() {
    let got = impact(
        serde_json::json!({"static": {"internalNetworkCIDRs": ["10.0.0.0/24"]}}),
        serde_json::json!({"static": {"internalNetworkCIDRs": ["10.1.0.0/24"]}}),
    );
    assert_eq!(got, only("static", false, false, true));
}

#[test]
fn seed_update_max_concurrent_does_nothing() {
    let got = impact(
        serde_json::json!({"update": {"maxConcurrent": 1}}),
        serde_json::json!({"update": {"maxConcurrent": "25%"}}),
    );
    assert_eq!(got, only("update.maxConcurrent", false, false, false));
}

// ---- defaults and normalization ----

#[test]
fn cri_type_unset_equals_containerd() {
    let unset = serde_json::json!({});
    let containerd = serde_json::json!({"cri": {"type": "Containerd"}});
    assert!(impact(unset.clone(), containerd.clone()).is_empty());
    assert!(impact(containerd, unset.clone()).is_empty());
    let not_managed = serde_json::json!({"cri": {"type": "NotManaged"}});
    assert_eq!(
        impact(unset.clone(), not_managed.clone()),
        only("cri.type", false, false, false)
    );
    assert_eq!(
        impact(not_managed, unset),
        only("cri.type", true, false, false)
    );
}

#[test]
fn unknown_cri_type_is_disruptive() {
    let got = impact(
        serde_json::json!({}),
        serde_json::json!({"cri": {"type": "Podman"}}),
    );
    assert_eq!(got, only("cri.type", true, false, false));
}

#[test]
fn documented_defaults_equal_absent_fields() {
    let absent = serde_json::json!({});
    let explicit = serde_json::json!({
        "chaos": {"mode": "Disabled", "period": "6h"},
        "cri": {"type": "Containerd", "containerd": {"maxConcurrentDownloads": 3}},
        "disruptions": {"approvalMode": "Automatic", "automatic": {"drainBeforeApproval": true}},
        "kubelet": {"rootDir": "/var/lib/kubelet", "containerLogMaxSize": "50Mi",
            "containerLogMaxFiles": 4, "topologyManager": {"enabled": false}},
        "update": {"maxConcurrent": 1},
        "cloudInstances": {"maxSurgePerZone": 1, "maxUnavailablePerZone": 0},
    });
    assert!(impact(absent.clone(), explicit.clone()).is_empty());
    assert!(impact(explicit, absent).is_empty());
}

#[test]
fn empty_objects_and_arrays_equal_absent_fields() {
    let absent = serde_json::json!({});
    let empty = serde_json::json!({
        "nodeTemplate": {"labels": {}, "taints": []},
        "kubelet": {},
        "cloudInstances": {"zones": []},
        "static": {"internalNetworkCIDRs": []},
    });
    assert!(impact(absent, empty).is_empty());
}

#[test]
fn digit_strings_equal_integers_in_int_or_string_fields() {
    let got = impact(
        serde_json::json!({"update": {"maxConcurrent": "2"}, "cloudInstances": {"standby": 3}}),
        serde_json::json!({"update": {"maxConcurrent": 2}, "cloudInstances": {"standby": "3"}}),
    );
    assert!(got.is_empty(), "{got:?}");
    let percent = impact(
        serde_json::json!({"update": {"maxConcurrent": "2"}}),
        serde_json::json!({"update": {"maxConcurrent": "2%"}}),
    );
    assert_eq!(percent, only("update.maxConcurrent", false, false, false));
}

#[test]
fn non_default_value_is_a_change() {
    let got = impact(
        serde_json::json!({}),
        serde_json::json!({"cri": {"containerd": {"maxConcurrentDownloads": 4}}}),
    );
    assert_eq!(
        got,
        only("cri.containerd.maxConcurrentDownloads", false, false, true)
    );
}

// ---- output shapes ----

#[test]
fn json_output_is_exact() {
    let got = impact(
        serde_json::json!({"kubelet": {"maxPods": 110}}),
        serde_json::json!({"kubelet": {"maxPods": 120}}),
    );
    assert_eq!(
        serde_json::to_string(&got).expect("serializes"),
        r#"{"changes":[{"path":"kubelet.maxPods","disruption":false,"reprovision":false,"kubeletRestart":true}],"disruption":false,"reprovision":false,"kubeletRestart":true}"#
    );
}

#[test]
fn table_lists_changes_and_total() {
    let got = impact(
        serde_json::json!({"cri": {"type": "NotManaged"}}),
        serde_json::json!({"cri": {"type": "Containerd"}, "kubelet": {"maxPods": 120},
            "chaos": {"mode": "DrainAndDelete"}}),
    );
    let expected = "\
PARAMETER        DISRUPTION  REPROVISION  KUBELET RESTART
chaos            no          no           no
cri.type         yes         no           no
kubelet.maxPods  no          no           yes
TOTAL            yes         no           yes
";
    assert_eq!(got.to_table(), expected);
    assert_eq!(got.to_string(), expected);
}

#[test]
fn table_of_nothing_says_no_changes() {
    assert_eq!(Impact::default().to_table(), "no changes\n");
    assert_eq!(
        impact(serde_json::json!({}), serde_json::json!({})).to_table(),
        "no changes\n"
    );
}

#[test]
fn change_display_names_the_effects() {
    let c = ChangeImpact {
        path: "cri.type".into(),
        disruption: true,
        reprovision: false,
        kubelet_restart: true,
    };
    assert_eq!(c.to_string(), "cri.type: disruption, kubelet restart");
    let harmless = ChangeImpact {
        path: "chaos".into(),
        disruption: false,
        reprovision: false,
        kubelet_restart: false,
    };
    assert!(harmless.is_harmless());
    assert_eq!(harmless.to_string(), "chaos: no node impact");
}

#[test]
fn rules_table_has_a_line_per_rule() {
    let table = rules_table();
    assert_eq!(table.lines().count(), RULES.len() + 1);
    assert!(table.contains("yes, unless new value is NotManaged"));
    for rule in RULES {
        assert!(table.contains(rule.why), "{}", rule.path);
    }
}

// ---- the rule table itself ----

#[test]
fn rules_serialize_for_explain() {
    let json = serde_json::to_value(rule("cri.type")).expect("serializes");
    assert_eq!(json["path"], "cri.type");
    assert_eq!(
        json["disruption"],
        serde_json::json!({"unlessNewValueIs": "NotManaged"})
    );
    assert_eq!(json["kubeletRestart"], "never");
    let listed = serde_json::to_value(defaults()).expect("serializes");
    assert!(
        listed
            .as_array()
            .is_some_and(|d| d.len() == defaults().len())
    );
    assert_eq!(
        serde_json::to_value(defaults()[0]).expect("serializes"),
        serde_json::json!({"path": "chaos.mode", "value": "Disabled"})
    );
}

#[test]
fn rule_for_finds_the_covering_rule() {
    let path = |p: &str| rule_for(p).map(|r| r.path);
    assert_eq!(path("kubelet.maxPods"), Some("kubelet.maxPods"));
    assert_eq!(path("spec.chaos.mode"), Some("chaos"));
    assert_eq!(path("nodeTemplate.labels.a"), Some("nodeTemplate"));
    assert_eq!(path("cloudInstances.standbyHolder"), None);
    assert_eq!(path("cloudInstances.standbyX"), None);
    assert_eq!(path("kubelet"), None);
}

#[test]
fn rules_are_sorted_unique_and_disjoint() {
    for pair in RULES.windows(2) {
        assert!(
            pair[0].path < pair[1].path,
            "{} !< {}",
            pair[0].path,
            pair[1].path
        );
    }
    for a in RULES {
        for b in RULES {
            if a.path != b.path {
                assert!(!a.covers(b.path), "{} lies inside {}", b.path, a.path);
            }
        }
        assert!(a.why.ends_with('.') && a.why.len() > 20, "{}", a.path);
    }
}

#[test]
fn seed_table_rows_are_kept() {
    // (path, disruption, reprovision, kubelet restart) as in docs/deckhouse.md §10; cri.type separately.
    let seed = [
        ("chaos", NO, NO, NO),
        ("cloudInstances.classReference", NO, YES, NO),
        ("cloudInstances.maxSurgePerZone", NO, NO, NO),
        ("cri.containerd.maxConcurrentDownloads", NO, NO, YES),
        ("disruptions", NO, NO, NO),
        ("kubelet.maxPods", NO, NO, YES),
        ("kubelet.rootDir", NO, NO, YES),
        ("kubernetesVersion", NO, NO, YES),
        ("nodeTemplate", NO, NO, NO),
        ("static", NO, NO, YES),
        ("update.maxConcurrent", NO, NO, NO),
    ];
    for (path, d, r, k) in seed {
        let rule = rule(path);
        assert_eq!(
            (rule.disruption, rule.reprovision, rule.kubelet_restart),
            (d, r, k),
            "{path}"
        );
    }
    let cri = rule("cri.type");
    assert_eq!(cri.disruption, Effect::UnlessNewValueIs("NotManaged"));
    assert_eq!((cri.reprovision, cri.kubelet_restart), (NO, NO));
}

#[test]
fn defaults_lie_inside_rules() {
    for field in defaults() {
        assert_eq!(
            RULES.iter().filter(|r| r.covers(field.path)).count(),
            1,
            "{}",
            field.path
        );
    }
    for path in INT_OR_STRING {
        assert!(RULES.iter().any(|r| r.covers(path)), "{path}");
    }
}

/// Every field set, every map and list with one entry. The struct literals name every
/// field (no `..Default::default()`), so a field added to the model does not compile here
/// until it is filled in, and then `every_leaf_is_covered_by_exactly_one_rule` demands a rule.
fn full_spec() -> NodeGroupSpec {
    let map = |k: &str, v: &str| BTreeMap::from([(k.to_owned(), v.to_owned())]);
    let window = DisruptionWindow {
        from: "01:00".into(),
        to: "03:00".into(),
        days: Some(vec![Weekday::Mon]),
    };
    NodeGroupSpec {
        node_type: Some(NodeType::CloudEphemeral),
        node_drain_timeout_second: Some(600),
        gpu: Some(Gpu {
            sharing: Some(GpuSharing::Mig),
            time_slicing: Some(TimeSlicing {
                partition_count: Some(4),
            }),
            mig: Some(Mig {
                parted_config: Some("custom".into()),
                custom_configs: Some(vec![MigCustomConfig {
                    index: Some(0),
                    slices: Some(vec![MigSlice {
                        profile: Some("1g.5gb".into()),
                        count: Some(7),
                    }]),
                }]),
            }),
            exclusive: Some(BTreeMap::from([("x".to_owned(), Value::from(1))])),
        }),
        cri: Some(Cri {
            type_: Some(CriType::Containerd),
            containerd: Some(ContainerdSettings {
                max_concurrent_downloads: Some(3),
            }),
            containerd_v2: Some(ContainerdSettings {
                max_concurrent_downloads: Some(3),
            }),
            docker: Some(DockerSettings {
                max_concurrent_downloads: Some(3),
                manage: Some(true),
            }),
            not_managed: Some(NotManagedCri {
                cri_socket_path: Some("/run/crio.sock".into()),
            }),
        }),
        static_instances: Some(StaticInstances {
            label_selector: Some(LabelSelector {
                match_labels: Some(map("role", "worker")),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "zone".into(),
                    operator: Some(SelectorOperator::In),
                    values: Some(vec!["a".into()]),
                }]),
            }),
            count: Some(2),
        }),
        cloud_instances: Some(CloudInstances {
            zones: Some(vec!["a".into()]),
            min_per_zone: Some(1),
            max_per_zone: Some(3),
            max_unavailable_per_zone: Some(0),
            max_surge_per_zone: Some(1),
            priority: Some(10),
            quick_shutdown: Some(true),
            standby: Some(IntOrString::String("10%".into())),
            standby_holder: Some(StandbyHolder {
                overprovisioning_rate: Some(50),
                not_held_resources: Some(NotHeldResources {
                    cpu: Some(IntOrString::String("1".into())),
                    memory: Some(IntOrString::String("1Gi".into())),
                }),
            }),
            class_reference: Some(ClassReference {
                kind: "AWSInstanceClass".into(),
                name: "worker".into(),
            }),
        }),
        node_template: Some(NodeTemplate {
            labels: Some(map("a", "b")),
            annotations: Some(map("c", "d")),
            taints: Some(vec![Taint {
                effect: Some(TaintEffect::NoSchedule),
                key: "dedicated".into(),
                value: Some("x".into()),
            }]),
        }),
        chaos: Some(Chaos {
            mode: Some(ChaosMode::DrainAndDelete),
            period: Some("6h".into()),
        }),
        operating_system: Some(OperatingSystem {
            manage_kernel: Some(true),
        }),
        disruptions: Some(Disruptions {
            approval_mode: Some(ApprovalMode::Automatic),
            automatic: Some(AutomaticDisruptions {
                drain_before_approval: Some(true),
                windows: Some(vec![window.clone()]),
            }),
            rolling_update: Some(RollingUpdateDisruptions {
                windows: Some(vec![window]),
            }),
        }),
        kubelet: Some(Kubelet {
            max_pods: Some(110),
            root_dir: Some("/var/lib/kubelet".into()),
            container_log_max_size: Some("50Mi".into()),
            container_log_max_files: Some(4),
            seccomp_default: Some(true),
            resource_reservation: Some(ResourceReservation {
                mode: Some(ResourceReservationMode::Static),
                static_: Some(StaticReservation {
                    cpu: Some("100m".into()),
                    memory: Some("1Gi".into()),
                    ephemeral_storage: Some("1Gi".into()),
                }),
            }),
            topology_manager: Some(TopologyManager {
                enabled: Some(true),
                scope: Some(TopologyManagerScope::Pod),
                policy: Some(TopologyManagerPolicy::SingleNumaNode),
            }),
            memory_swap: Some(MemorySwap {
                swap_behavior: Some(SwapBehavior::LimitedSwap),
                swappiness: Some(60),
                limited_swap: Some(LimitedSwap {
                    size: Some("4G".into()),
                }),
            }),
        }),
        update: Some(Update {
            max_concurrent: Some(IntOrString::Int(1)),
        }),
        fencing: Some(Fencing {
            mode: Some(FencingMode::Watchdog),
            watchdog: Some(WatchdogSettings {
                timeout: Some("60s".into()),
            }),
        }),
        kubernetes_version: Some("1.33".into()),
        static_: Some(StaticSettings {
            internal_network_cidrs: Some(vec!["10.0.0.0/24".into()]),
        }),
    }
}

/// Dotted paths of the leaves of a JSON value; array elements share their array's path,
/// empty objects and arrays are leaves.
fn leaf_paths(value: &Value, path: &str, out: &mut Vec<String>) {
    let child = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, v) in map {
                leaf_paths(v, &child(key), out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                leaf_paths(item, path, out);
            }
        }
        _ => out.push(path.to_owned()),
    }
}

#[test]
fn every_leaf_is_covered_by_exactly_one_rule() {
    let json = serde_json::to_value(full_spec()).expect("serializes");
    let mut leaves = Vec::new();
    leaf_paths(&json, "", &mut leaves);
    assert!(leaves.len() > 60, "the full spec is not full: {leaves:?}");
    for leaf in &leaves {
        let covering: Vec<&str> = RULES
            .iter()
            .filter(|r| r.covers(leaf))
            .map(|r| r.path)
            .collect();
        assert_eq!(covering.len(), 1, "{leaf} is covered by {covering:?}");
    }
    for rule in RULES {
        assert!(
            leaves.iter().any(|leaf| rule.covers(leaf)),
            "rule {} covers no field of the spec",
            rule.path
        );
    }
}

#[test]
fn every_rule_reports_its_own_change() {
    let full = serde_json::to_value(full_spec()).expect("serializes");
    for rule in RULES {
        let mut without = full.clone();
        remove_path(&mut without, rule.path);
        let got = impact_of(&spec(without), &full_spec());
        // Removing a field that equals its default is no change; all others are reported.
        let defaulted = defaults()
            .iter()
            .any(|d| d.path == rule.path && lookup(&full, d.path) == Some(&d.value.to_value()));
        if defaulted {
            assert!(got.is_empty(), "{}: {got:?}", rule.path);
        } else {
            let new = lookup(&normalized(&full_spec()), rule.path).cloned();
            assert_eq!(got.changes, vec![rule.judge(new.as_ref())], "{}", rule.path);
        }
    }
}

// ---- helpers for the properties ----

fn remove_path(root: &mut Value, path: &str) {
    let (parent, key) = match path.rsplit_once('.') {
        Some((parent, key)) => (lookup_mut(root, parent), key),
        None => (Some(root), path),
    };
    if let Some(Value::Object(map)) = parent {
        map.remove(key);
    }
}

fn set_path(root: &mut Value, path: &str, value: Value) {
    remove_path(root, path);
    insert_absent(root, path, value);
}

/// `base` with the value at `path` taken from `from` (removed where `from` has none).
fn splice(base: &NodeGroupSpec, from: &NodeGroupSpec, path: &str) -> NodeGroupSpec {
    let mut json = serde_json::to_value(base).expect("serializes");
    let donor = serde_json::to_value(from).expect("serializes");
    match lookup(&donor, path) {
        Some(v) => set_path(&mut json, path, v.clone()),
        None => remove_path(&mut json, path),
    }
    serde_json::from_value(json).expect("spliced spec parses")
}

fn with_explicit_defaults(s: &NodeGroupSpec) -> NodeGroupSpec {
    let mut json = serde_json::to_value(s).expect("serializes");
    for field in defaults() {
        insert_absent(&mut json, field.path, field.value.to_value());
    }
    serde_json::from_value(json).expect("defaulted spec parses")
}

// ---- strategies: every field of NodeGroupSpec, over small domains so that pairs of
// specs share many values ----

fn pick<T: Clone + fmt::Debug + 'static>(items: &[T]) -> impl Strategy<Value = T> + use<T> {
    prop::sample::select(items.to_vec())
}

fn opt<S: Strategy>(s: S) -> impl Strategy<Value = Option<S::Value>> {
    prop::option::of(s)
}

fn small_string(items: &'static [&'static str]) -> impl Strategy<Value = String> {
    pick(items).prop_map(str::to_owned)
}

fn string_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(small_string(&["a", "b"]), small_string(&["1", "2"]), 0..3)
}

fn int_or_string() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        pick(&[0_i64, 1, 2]).prop_map(IntOrString::Int),
        small_string(&["1", "2", "25%"]).prop_map(IntOrString::String),
    ]
}

fn window() -> BoxedStrategy<DisruptionWindow> {
    (
        small_string(&["01:00", "13:00"]),
        small_string(&["03:00"]),
        opt(prop::collection::vec(
            pick(&[Weekday::Mon, Weekday::Sun]),
            0..2,
        )),
    )
        .prop_map(|(from, to, days)| DisruptionWindow { from, to, days })
        .boxed()
}

fn windows() -> impl Strategy<Value = Option<Vec<DisruptionWindow>>> {
    opt(prop::collection::vec(window(), 0..2))
}

fn gpu() -> BoxedStrategy<Gpu> {
    let slice = (opt(small_string(&["1g.5gb", "2g.10gb"])), opt(1_i64..3))
        .prop_map(|(profile, count)| MigSlice { profile, count });
    let custom = (opt(0_i64..2), opt(prop::collection::vec(slice, 0..2)))
        .prop_map(|(index, slices)| MigCustomConfig { index, slices });
    let mig = (
        opt(small_string(&["all-1g.5gb", "custom"])),
        opt(prop::collection::vec(custom, 0..2)),
    )
        .prop_map(|(parted_config, custom_configs)| Mig {
            parted_config,
            custom_configs,
        });
    let exclusive = prop_oneof![
        Just(BTreeMap::new()),
        Just(BTreeMap::from([("x".to_owned(), Value::from(1))])),
    ];
    (
        opt(pick(&[
            GpuSharing::TimeSlicing,
            GpuSharing::Mig,
            GpuSharing::Exclusive,
        ])),
        opt(opt(pick(&[1_i64, 4])).prop_map(|partition_count| TimeSlicing { partition_count })),
        opt(mig),
        opt(exclusive),
    )
        .prop_map(|(sharing, time_slicing, mig, exclusive)| Gpu {
            sharing,
            time_slicing,
            mig,
            exclusive,
        })
        .boxed()
}

fn cri() -> BoxedStrategy<Cri> {
    let containerd = || {
        opt(pick(&[3_i64, 5])).prop_map(|max_concurrent_downloads| ContainerdSettings {
            max_concurrent_downloads,
        })
    };
    let docker = (opt(pick(&[3_i64, 5])), opt(any::<bool>())).prop_map(
        |(max_concurrent_downloads, manage)| DockerSettings {
            max_concurrent_downloads,
            manage,
        },
    );
    let not_managed = opt(small_string(&["/run/a.sock", "/run/b.sock"]))
        .prop_map(|cri_socket_path| NotManagedCri { cri_socket_path });
    (
        opt(pick(&[
            CriType::Docker,
            CriType::Containerd,
            CriType::ContainerdV2,
            CriType::NotManaged,
            CriType::Unknown("Podman".into()),
        ])),
        opt(containerd()),
        opt(containerd()),
        opt(docker),
        opt(not_managed),
    )
        .prop_map(
            |(type_, containerd, containerd_v2, docker, not_managed)| Cri {
                type_,
                containerd,
                containerd_v2,
                docker,
                not_managed,
            },
        )
        .boxed()
}

fn static_instances() -> BoxedStrategy<StaticInstances> {
    let requirement = (
        small_string(&["zone", "role"]),
        opt(pick(&[SelectorOperator::In, SelectorOperator::Exists])),
        opt(prop::collection::vec(small_string(&["a", "b"]), 0..2)),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values,
        });
    let selector = (
        opt(string_map()),
        opt(prop::collection::vec(requirement, 0..2)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        });
    (opt(selector), opt(0_i64..3))
        .prop_map(|(label_selector, count)| StaticInstances {
            label_selector,
            count,
        })
        .boxed()
}

fn cloud_instances() -> BoxedStrategy<CloudInstances> {
    let holder = (
        opt(pick(&[50_i64, 30])),
        opt((opt(int_or_string()), opt(int_or_string()))
            .prop_map(|(cpu, memory)| NotHeldResources { cpu, memory })),
    )
        .prop_map(
            |(overprovisioning_rate, not_held_resources)| StandbyHolder {
                overprovisioning_rate,
                not_held_resources,
            },
        );
    let class = (
        small_string(&["AWSInstanceClass"]),
        small_string(&["a", "b"]),
    )
        .prop_map(|(kind, name)| ClassReference { kind, name });
    (
        opt(prop::collection::vec(small_string(&["a", "b"]), 0..3)),
        opt(0_i64..3),
        opt(0_i64..3),
        opt(0_i64..2),
        opt(0_i64..3),
        opt(pick(&[0_i64, 10])),
        opt(any::<bool>()),
        opt(int_or_string()),
        opt(holder),
        opt(class),
    )
        .prop_map(
            |(
                zones,
                min_per_zone,
                max_per_zone,
                max_unavailable_per_zone,
                max_surge_per_zone,
                priority,
                quick_shutdown,
                standby,
                standby_holder,
                class_reference,
            )| CloudInstances {
                zones,
                min_per_zone,
                max_per_zone,
                max_unavailable_per_zone,
                max_surge_per_zone,
                priority,
                quick_shutdown,
                standby,
                standby_holder,
                class_reference,
            },
        )
        .boxed()
}

fn node_template() -> BoxedStrategy<NodeTemplate> {
    let taint = (
        opt(pick(&[TaintEffect::NoSchedule, TaintEffect::NoExecute])),
        small_string(&["dedicated", "other"]),
        opt(small_string(&["x", "y"])),
    )
        .prop_map(|(effect, key, value)| Taint { effect, key, value });
    (
        opt(string_map()),
        opt(string_map()),
        opt(prop::collection::vec(taint, 0..2)),
    )
        .prop_map(|(labels, annotations, taints)| NodeTemplate {
            labels,
            annotations,
            taints,
        })
        .boxed()
}

fn disruptions() -> BoxedStrategy<Disruptions> {
    (
        opt(pick(&[
            ApprovalMode::Manual,
            ApprovalMode::Automatic,
            ApprovalMode::RollingUpdate,
        ])),
        opt(
            (opt(any::<bool>()), windows()).prop_map(|(drain_before_approval, windows)| {
                AutomaticDisruptions {
                    drain_before_approval,
                    windows,
                }
            }),
        ),
        opt(windows().prop_map(|windows| RollingUpdateDisruptions { windows })),
    )
        .prop_map(|(approval_mode, automatic, rolling_update)| Disruptions {
            approval_mode,
            automatic,
            rolling_update,
        })
        .boxed()
}

fn kubelet() -> BoxedStrategy<Kubelet> {
    let reservation = (
        opt(pick(&[
            ResourceReservationMode::Off,
            ResourceReservationMode::Auto,
            ResourceReservationMode::Static,
        ])),
        opt((
            opt(small_string(&["100m", "200m"])),
            opt(small_string(&["1Gi"])),
            opt(small_string(&["1Gi", "2Gi"])),
        )
            .prop_map(|(cpu, memory, ephemeral_storage)| StaticReservation {
                cpu,
                memory,
                ephemeral_storage,
            })),
    )
        .prop_map(|(mode, static_)| ResourceReservation { mode, static_ });
    let topology = (
        opt(any::<bool>()),
        opt(pick(&[
            TopologyManagerScope::Container,
            TopologyManagerScope::Pod,
        ])),
        opt(pick(&[
            TopologyManagerPolicy::None,
            TopologyManagerPolicy::SingleNumaNode,
        ])),
    )
        .prop_map(|(enabled, scope, policy)| TopologyManager {
            enabled,
            scope,
            policy,
        });
    let swap = (
        opt(pick(&[SwapBehavior::NoSwap, SwapBehavior::LimitedSwap])),
        opt(pick(&[60_i64, 10])),
        opt(opt(small_string(&["4G", "8G"])).prop_map(|size| LimitedSwap { size })),
    )
        .prop_map(|(swap_behavior, swappiness, limited_swap)| MemorySwap {
            swap_behavior,
            swappiness,
            limited_swap,
        });
    (
        opt(pick(&[110_i64, 250])),
        opt(small_string(&["/var/lib/kubelet", "/mnt/kubelet"])),
        opt(small_string(&["50Mi", "10Mi"])),
        opt(pick(&[4_i64, 2])),
        opt(any::<bool>()),
        opt(reservation),
        opt(topology),
        opt(swap),
    )
        .prop_map(
            |(
                max_pods,
                root_dir,
                container_log_max_size,
                container_log_max_files,
                seccomp_default,
                resource_reservation,
                topology_manager,
                memory_swap,
            )| Kubelet {
                max_pods,
                root_dir,
                container_log_max_size,
                container_log_max_files,
                seccomp_default,
                resource_reservation,
                topology_manager,
                memory_swap,
            },
        )
        .boxed()
}

fn node_group_spec() -> BoxedStrategy<NodeGroupSpec> {
    let first = (
        opt(pick(&[
            NodeType::CloudEphemeral,
            NodeType::CloudPermanent,
            NodeType::CloudStatic,
            NodeType::Static,
        ])),
        opt(pick(&[60_i64, 600])),
        opt(gpu()),
        opt(cri()),
        opt(static_instances()),
        opt(cloud_instances()),
        opt(node_template()),
        opt((
            opt(pick(&[ChaosMode::Disabled, ChaosMode::DrainAndDelete])),
            opt(small_string(&["6h", "30m"])),
        )
            .prop_map(|(mode, period)| Chaos { mode, period })),
    );
    let second = (
        opt(opt(any::<bool>()).prop_map(|manage_kernel| OperatingSystem { manage_kernel })),
        opt(disruptions()),
        opt(kubelet()),
        opt(opt(int_or_string()).prop_map(|max_concurrent| Update { max_concurrent })),
        opt((
            opt(pick(&[FencingMode::Watchdog, FencingMode::Notify])),
            opt(opt(small_string(&["60s", "2m"])).prop_map(|timeout| WatchdogSettings { timeout })),
        )
            .prop_map(|(mode, watchdog)| Fencing { mode, watchdog })),
        opt(small_string(&["1.32", "1.33"])),
        opt(opt(prop::collection::vec(
            small_string(&["10.0.0.0/24", "10.1.0.0/24"]),
            0..2,
        ))
        .prop_map(|internal_network_cidrs| StaticSettings {
            internal_network_cidrs,
        })),
    );
    (first, second)
        .prop_map(
            |(
                (
                    node_type,
                    node_drain_timeout_second,
                    gpu,
                    cri,
                    static_instances,
                    cloud_instances,
                    node_template,
                    chaos,
                ),
                (
                    operating_system,
                    disruptions,
                    kubelet,
                    update,
                    fencing,
                    kubernetes_version,
                    static_,
                ),
            )| NodeGroupSpec {
                node_type,
                node_drain_timeout_second,
                gpu,
                cri,
                static_instances,
                cloud_instances,
                node_template,
                chaos,
                operating_system,
                disruptions,
                kubelet,
                update,
                fencing,
                kubernetes_version,
                static_,
            },
        )
        .boxed()
}

/// A pair where `b` is `a` with a random subset of the rule paths taken from an independent
/// spec, so that both small and large changes are common.
fn spec_pair() -> impl Strategy<Value = (NodeGroupSpec, NodeGroupSpec)> {
    (
        node_group_spec(),
        node_group_spec(),
        prop::collection::vec(any::<bool>(), RULES.len()),
    )
        .prop_map(|(a, donor, mask)| {
            let mut b = a.clone();
            for (rule, take) in RULES.iter().zip(mask) {
                if take {
                    b = splice(&b, &donor, rule.path);
                }
            }
            (a, b)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn no_change_no_impact(a in node_group_spec()) {
        prop_assert!(impact_of(&a, &a).is_empty());
        let round_trip: NodeGroupSpec =
            serde_json::from_value(serde_json::to_value(&a).expect("serializes"))
                .expect("parses");
        prop_assert!(impact_of(&a, &round_trip).is_empty());
        let explicit = with_explicit_defaults(&a);
        prop_assert!(impact_of(&a, &explicit).is_empty());
        prop_assert!(impact_of(&explicit, &a).is_empty());
    }

    #[test]
    fn multi_field_change_is_the_union_of_single_field_changes((a, b) in spec_pair()) {
        let whole = impact_of(&a, &b);
        let mut stepped = a.clone();
        for change in &whole.changes {
            let single = impact_of(&a, &splice(&a, &b, &change.path));
            prop_assert_eq!(&single.changes, &vec![change.clone()]);
            stepped = splice(&stepped, &b, &change.path);
        }
        prop_assert!(impact_of(&stepped, &b).is_empty());
        prop_assert_eq!(whole.disruption, whole.changes.iter().any(|c| c.disruption));
        prop_assert_eq!(whole.reprovision, whole.changes.iter().any(|c| c.reprovision));
        prop_assert_eq!(
            whole.kubelet_restart,
            whole.changes.iter().any(|c| c.kubelet_restart)
        );
    }

    #[test]
    fn impact_is_symmetric_except_cri_type((a, b) in spec_pair()) {
        let forward = impact_of(&a, &b);
        let backward = impact_of(&b, &a);
        let paths = |i: &Impact| i.changes.iter().map(|c| c.path.clone()).collect::<Vec<_>>();
        prop_assert_eq!(paths(&forward), paths(&backward));
        for (f, r) in forward.changes.iter().zip(&backward.changes) {
            if f.path != "cri.type" {
                prop_assert_eq!(f, r);
            } else {
                prop_assert_eq!((f.reprovision, f.kubelet_restart), (r.reprovision, r.kubelet_restart));
            }
        }
    }

    #[test]
    fn impact_is_deterministic_sorted_and_ruled((a, b) in spec_pair()) {
        let first = impact_of(&a, &b);
        prop_assert_eq!(&first, &impact_of(&a.clone(), &b.clone()));
        for pair in first.changes.windows(2) {
            prop_assert!(pair[0].path < pair[1].path);
        }
        for change in &first.changes {
            let rule = rule(&change.path);
            let new = lookup(&normalized(&b), rule.path).cloned();
            prop_assert_eq!(change, &rule.judge(new.as_ref()));
        }
    }
}
