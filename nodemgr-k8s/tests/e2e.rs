//! End to end through kube-rs against the API emulator (nodemgr-testkit), with simulated
//! kubelets and node agents (its `Fleet`): the real controllers, the real port, the real
//! watches. Timings are short; every wait is a deadline for something that must happen, never a
//! measurement.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers::{self, Settings};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_testkit::{
    Emulator, Fault, Fleet, FleetConfig, FleetNode, Generation, Workload, WorkloadKind,
};
use serde_json::{Value, json};
use tokio::sync::watch;

struct Cluster {
    emulator: Arc<Emulator>,
    fleet: Fleet,
    stop: watch::Sender<bool>,
    metrics: Metrics,
    _watches: nodemgr_k8s::cluster::Watches,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn fast_fleet() -> FleetConfig {
    FleetConfig {
        tick: Duration::from_millis(50),
        heartbeat: Duration::from_millis(200),
        grace: Duration::from_secs(1),
        agent_delay: Duration::from_millis(200),
        kubelet_restart: Duration::from_millis(200),
        reboot: Duration::from_millis(300),
        reschedule: Duration::from_millis(100),
    }
}

fn fast_settings() -> Settings {
    let mut s = Settings {
        resync: Duration::from_secs(1),
        update_period: Duration::from_millis(200),
        fencing_period: Duration::from_millis(200),
        ..Settings::default()
    };
    // Fast agents: the deadline of a group with a 2 s watchdog is 2 + 0.5 + 0.1 = 2.6 s.
    s.fencing_config.agent.api_check_interval = Duration::from_millis(100);
    s.fencing_config.agent.api_timeout = Duration::from_millis(200);
    s.fencing_config.agent.feed_interval = Duration::from_millis(100);
    s.fencing_config.agent.watchdog_timeout = Duration::from_secs(2);
    s.fencing_config.agent.kubelet_stale_after = Duration::from_millis(500);
    s.fencing_config.margin = Duration::from_millis(100);
    s
}

/// An emulator with the CRDs, `groups` (name → spec) and `nodes` (name, group, zone).
async fn cluster(
    groups: &[(&str, Value)],
    nodes: &[(&str, &str, &str)],
    settings: Settings,
) -> Cluster {
    cluster_on(
        Arc::new(Emulator::start().await.unwrap()),
        groups,
        nodes,
        settings,
    )
    .await
}

/// [`cluster`] on an emulator the test prepared (faults injected before anything runs).
async fn cluster_on(
    emulator: Arc<Emulator>,
    groups: &[(&str, Value)],
    nodes: &[(&str, &str, &str)],
    settings: Settings,
) -> Cluster {
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let fleet = Fleet::start(emulator.clone(), fast_fleet(), None).unwrap();
    for (name, spec) in groups {
        emulator
            .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name}, "spec": spec}))
            .unwrap();
        fleet
            .publish(
                name,
                Generation {
                    name: format!("{name}-gen0"),
                    impact: ImpactKind::None,
                    rolling: false,
                },
            )
            .unwrap();
    }
    for (name, group, zone) in nodes {
        let node_type = groups
            .iter()
            .find(|(g, _)| g == group)
            .and_then(|(_, s)| s["nodeType"].as_str())
            .unwrap_or("CloudEphemeral");
        fleet
            .add_node(FleetNode {
                name: (*name).into(),
                group: (*group).into(),
                node_type: node_type.into(),
                zone: (*zone).into(),
                pods: 110,
            })
            .unwrap();
    }
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (port, watches) = KubeCluster::start(client, "node-manager");
    let (stop, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    tokio::spawn(controllers::run(port, settings, metrics.clone(), stop_rx));
    Cluster {
        emulator,
        fleet,
        stop,
        metrics,
        _watches: watches,
    }
}

async fn eventually(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {secs}s waiting for {what}");
}

fn node(e: &Emulator, name: &str) -> Option<Value> {
    e.get("v1", "Node", "", name)
}

fn label(e: &Emulator, name: &str, key: &str) -> Option<String> {
    node(e, name)?
        .pointer("/metadata/labels")?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

fn annotation(e: &Emulator, name: &str, key: &str) -> Option<String> {
    node(e, name)?
        .pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

fn status(e: &Emulator, group: &str) -> Value {
    e.get("deckhouse.io/v1", "NodeGroup", "", group)
        .and_then(|g| g.get("status").cloned())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_nodes_and_follows_readiness() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    // The first status writes fail (a conflict, throttling, a server error): retried, not lost.
    for code in [409, 429, 500] {
        emulator.inject_fault(
            Fault::new(code)
                .verb("patch")
                .resource("nodegroups/status")
                .times(1),
        );
    }
    let c = cluster_on(
        emulator,
        &[("workers", json!({"nodeType": "CloudPermanent"}))],
        &[
            ("w-0", "workers", "a"),
            ("w-1", "workers", "a"),
            ("w-2", "workers", "b"),
        ],
        fast_settings(),
    )
    .await;
    let e = c.emulator.clone();
    eventually("status nodes=3 ready=3 upToDate=3", 20, || {
        let s = status(&e, "workers");
        s["nodes"] == 3 && s["ready"] == 3 && s["upToDate"] == 3
    })
    .await;
    let s = status(&e, "workers");
    assert_eq!(s["engine"], "None", "{s}");
    assert_eq!(
        s["kubernetesVersion"], "1.33",
        "the emulator's version: {s}"
    );
    let ready_events = |e: &Emulator| -> Vec<Value> {
        e.list("events.k8s.io/v1", "Event", Some("default"))
            .into_iter()
            .filter(|ev| ev["regarding"]["kind"] == "NodeGroup" && ev["reason"] == "Ready")
            .collect()
    };
    assert!(
        ready_events(&e).is_empty(),
        "a healthy group raised {:?}",
        ready_events(&e)
    );
    c.fleet.set_dark("w-2", true).unwrap();
    eventually("ready=2 once w-2 is Unknown", 20, || {
        status(&e, "workers")["ready"] == 2
    })
    .await;
    eventually("a Warning Event says the group is not Ready", 10, || {
        ready_events(&e).len() == 1
    })
    .await;
    let ev = &ready_events(&e)[0];
    assert_eq!(ev["type"], "Warning", "{ev}");
    assert!(
        ev["note"]
            .as_str()
            .unwrap()
            .starts_with("Ready is False: 2 of 3"),
        "{ev}"
    );
    let text = c.metrics.encode();
    assert!(
        text.contains("nodemgr_node_group_nodes{group=\"workers\"} 3"),
        "{text}"
    );
    for code in [409, 429, 500] {
        assert_eq!(
            c.emulator
                .request_count("patch", "nodegroups/status", Some(code)),
            1,
            "the injected {code} was met"
        );
    }
    // The series starts at zero; the injected failures counted.
    assert!(
        !text.contains("nodemgr_reconcile_errors_total{controller=\"status\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("nodemgr_reconcile_errors_total{controller=\"status\"} "),
        "{text}"
    );
    // Later status writes (heartbeats, resyncs) raise no second Event for the same condition.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(ready_events(&e).len(), 1, "{:?}", ready_events(&e));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_errors_follow_the_cluster_settings_config_map() {
    // A taint key Deckhouse components do not tolerate is an error, until the settings
    // ConfigMap (the one the admission webhook reads) lists it as a custom toleration key.
    let mut settings = fast_settings();
    settings.cluster_settings = nodemgr_k8s::settings::SettingsSource {
        config_map: Some(("nodemgr-system".into(), "nodemgr-settings".into())),
        ..Default::default()
    };
    let c = cluster(
        &[(
            "gpu",
            json!({"nodeType": "Static",
                "nodeTemplate": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}),
        )],
        &[],
        settings,
    )
    .await;
    let e = c.emulator.clone();
    eventually("status.error names the taint key", 20, || {
        status(&e, "gpu")["error"]
            .as_str()
            .is_some_and(|m| m.contains("spec.nodeTemplate.taints[0].key"))
    })
    .await;
    let _ = e.seed(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "nodemgr-system"}}));
    e.seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "nodemgr-system", "name": "nodemgr-settings"},
        "data": {"customTolerationKeys": "gpu"}}))
        .unwrap();
    eventually("status.error cleared by the settings", 20, || {
        status(&e, "gpu")["error"].is_null()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_labels_reach_every_node_and_leave_when_removed() {
    let c = cluster(
        &[(
            "workers",
            json!({"nodeType": "CloudPermanent", "nodeTemplate": {
                "labels": {"tier": "web"},
                "annotations": {"example.com/owner": "team-web"},
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
            }}),
        )],
        &[("w-0", "workers", "a"), ("w-1", "workers", "b")],
        fast_settings(),
    )
    .await;
    let e = c.emulator.clone();
    let taint_keys = |n: &str| -> Vec<String> {
        node(&e, n)
            .and_then(|o| o.pointer("/spec/taints").cloned())
            .and_then(|t| t.as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|t| t["key"].as_str().map(str::to_owned))
            .collect()
    };
    eventually(
        "the template's label, annotation and taint on both nodes",
        20,
        || {
            ["w-0", "w-1"].iter().all(|n| {
                label(&e, n, "tier").as_deref() == Some("web")
                    && annotation(&e, n, "example.com/owner").as_deref() == Some("team-web")
                    && taint_keys(n) == ["dedicated"]
            })
        },
    )
    .await;
    // An operator's own label is not the template's to remove.
    c.emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            "w-0",
            &json!({"metadata": {"labels": {"owner": "ops"}}}),
            false,
        )
        .unwrap();
    let mut group = c
        .emulator
        .get("deckhouse.io/v1", "NodeGroup", "", "workers")
        .unwrap();
    group["spec"]["nodeTemplate"] = json!({"labels": {"team": "payments"}});
    // Every watch drops just before the change: the controllers re-watch and still see it.
    c.emulator.drop_watches();
    c.emulator.update(group).unwrap();
    eventually("tier, owner and the taint gone, team set", 20, || {
        ["w-0", "w-1"].iter().all(|n| {
            label(&e, n, "tier").is_none()
                && annotation(&e, n, "example.com/owner").is_none()
                && taint_keys(n).is_empty()
                && label(&e, n, "team").as_deref() == Some("payments")
        })
    })
    .await;
    assert_eq!(label(&c.emulator, "w-0", "owner").as_deref(), Some("ops"));
    let events = c
        .emulator
        .list("events.k8s.io/v1", "Event", Some("default"));
    assert!(
        events.iter().any(|ev| ev["reason"] == "NodeTemplateApplied"
            && ev["regarding"]["name"] == "w-1"
            && ev["note"].as_str().is_some_and(|n| n.contains("workers"))),
        "an event tells what the template changed on w-1: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_rolls_under_max_concurrent_despite_api_faults() {
    let c = cluster(
        &[(
            "workers",
            json!({"nodeType": "CloudPermanent", "update": {"maxConcurrent": 1}}),
        )],
        &[
            ("w-0", "workers", "a"),
            ("w-1", "workers", "a"),
            ("w-2", "workers", "b"),
            ("w-3", "workers", "b"),
        ],
        fast_settings(),
    )
    .await;
    let e = c.emulator.clone();
    eventually("status first", 20, || status(&e, "workers")["nodes"] == 4).await;
    // The API misbehaves while the update starts: conflicts, 500s and dropped watches must
    // cause retries, not lost work.
    c.emulator
        .inject_fault(Fault::new(409).verb("patch").resource("nodes").times(2));
    c.emulator
        .inject_fault(Fault::new(500).verb("patch").resource("nodes").times(2));
    c.emulator
        .inject_fault(Fault::new(429).verb("patch").resource("nodes").times(2));
    let gen1 = c
        .fleet
        .publish(
            "workers",
            Generation {
                name: "gen1".into(),
                impact: ImpactKind::KubeletRestart,
                rolling: false,
            },
        )
        .unwrap();
    let nodes = ["w-0", "w-1", "w-2", "w-3"];
    let mut most = 0;
    let mut dropped = false;
    let mut saw_progress = false;
    eventually(
        "every node on gen1 with its update annotations cleaned up",
        60,
        || {
            let approved = nodes
                .iter()
                .filter(|n| annotation(&e, n, "update.node.deckhouse.io/approved").is_some())
                .count();
            most = most.max(approved);
            saw_progress |= c
                .metrics
                .encode()
                .contains("nodemgr_update_nodes{group=\"workers\",state=\"approved\"} 1");
            assert!(
                approved <= 1,
                "{approved} nodes approved at once under maxConcurrent 1"
            );
            let done = nodes.iter().filter(|n| {
                annotation(&e, n, "node.deckhouse.io/configuration-checksum").as_deref()
                    == Some(gen1.as_str())
            });
            if !dropped && done.count() == 2 {
                e.drop_watches();
                dropped = true;
            }
            nodes.iter().all(|n| {
                annotation(&e, n, "node.deckhouse.io/configuration-checksum").as_deref()
                    == Some(gen1.as_str())
                    && annotation(&e, n, "update.node.deckhouse.io/approved").is_none()
                    && annotation(&e, n, "update.node.deckhouse.io/waiting-for-approval").is_none()
            })
        },
    )
    .await;
    assert_eq!(most, 1, "the rollout approved nodes one at a time");
    assert!(
        saw_progress,
        "the metric showed an approved node during the rollout"
    );
    eventually(
        "the update progress metric settles at zero approved",
        10,
        || {
            c.metrics
                .encode()
                .contains("nodemgr_update_nodes{group=\"workers\",state=\"approved\"} 0")
        },
    )
    .await;
    assert!(dropped);
    assert!(c.emulator.request_count("patch", "nodes", Some(409)) >= 1);
    assert!(c.emulator.request_count("patch", "nodes", Some(500)) >= 1);
    assert!(c.emulator.request_count("patch", "nodes", Some(429)) >= 1);
}

/// Deckhouse's whole-group gate: a CloudEphemeral group whose `status.desired` (3: its minimum)
/// exceeds its Ready nodes (2: a machine never joined) approves nothing; once the third node
/// joins, the update rolls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_ephemeral_group_updates_only_when_desired_equals_ready() {
    let c = cluster(
        &[(
            "eph",
            json!({"nodeType": "CloudEphemeral", "update": {"maxConcurrent": 2},
                   "cloudInstances": {"minPerZone": 3, "maxPerZone": 3, "zones": ["a"],
                                      "classReference": {"kind": "AWSInstanceClass", "name": "c"}}}),
        )],
        &[("eph-0", "eph", "a"), ("eph-1", "eph", "a")],
        fast_settings(),
    )
    .await;
    let e = c.emulator.clone();
    eventually("status desired=3 ready=2", 20, || {
        let s = status(&e, "eph");
        s["desired"] == 3 && s["ready"] == 2
    })
    .await;
    let gen1 = c
        .fleet
        .publish(
            "eph",
            Generation {
                name: "gen1".into(),
                impact: ImpactKind::None,
                rolling: false,
            },
        )
        .unwrap();
    let waiting =
        |n: &str| annotation(&e, n, "update.node.deckhouse.io/waiting-for-approval").is_some();
    eventually("both nodes ask for approval", 20, || {
        waiting("eph-0") && waiting("eph-1")
    })
    .await;
    // Fifteen update periods: still nobody approved while the group is short of a node.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for n in ["eph-0", "eph-1"] {
            assert!(
                annotation(&e, n, "update.node.deckhouse.io/approved").is_none(),
                "{n} approved while desired 3 != ready 2"
            );
        }
    }
    c.fleet
        .add_node(FleetNode {
            name: "eph-2".into(),
            group: "eph".into(),
            node_type: "CloudEphemeral".into(),
            zone: "a".into(),
            pods: 110,
        })
        .unwrap();
    eventually("every node on gen1 once the group is whole", 60, || {
        ["eph-0", "eph-1", "eph-2"].iter().all(|n| {
            annotation(&e, n, "node.deckhouse.io/configuration-checksum").as_deref()
                == Some(gen1.as_str())
        })
    })
    .await;
}

/// The small duties: a Static node without a provider ID gets `static://` (a set one is kept),
/// the CSI bootstrap taint stays until the node's CSINode exists, and a `master` group is created
/// when absent — again after it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_duties_and_the_master_group() {
    let settings = Settings {
        master_group: Some(nodemgr_core::model::NodeType::Static),
        ..fast_settings()
    };
    let c = cluster(
        &[
            ("metal", json!({"nodeType": "Static"})),
            ("cloud", json!({"nodeType": "CloudPermanent"})),
        ],
        &[("metal-0", "metal", "a"), ("cloud-0", "cloud", "a")],
        settings,
    )
    .await;
    let e = c.emulator.clone();
    // A Static node registered without a provider ID (the fleet's nodes all have one).
    e.seed(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "metal-1",
        "labels": {"node.deckhouse.io/group": "metal", "node.deckhouse.io/type": "Static"}}}),
    )
    .unwrap();
    eventually("metal-1 gets providerID static://", 20, || {
        node(&e, "metal-1").is_some_and(|n| n["spec"]["providerID"] == "static://")
    })
    .await;
    assert_eq!(
        node(&e, "metal-0").unwrap()["spec"]["providerID"],
        "fleet://metal-0",
        "a provider ID that is set is kept"
    );
    // The CSI bootstrap taint on the cloud node.
    let mut n = node(&e, "cloud-0").unwrap();
    n["spec"]["taints"] = json!([{"key": "node.deckhouse.io/csi-not-bootstrapped", "effect": "NoSchedule"},
                                 {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]);
    e.update(n).unwrap();
    let taint_keys = |e: &Emulator| -> Vec<String> {
        node(e, "cloud-0").unwrap()["spec"]["taints"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["key"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            taint_keys(&e).contains(&"node.deckhouse.io/csi-not-bootstrapped".to_owned()),
            "the taint left before the CSINode exists"
        );
    }
    e.seed(json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": "cloud-0"}, "spec": {"drivers": []}}))
        .unwrap();
    eventually(
        "the CSI taint leaves cloud-0, the other taint stays",
        20,
        || taint_keys(&e) == ["dedicated"],
    )
    .await;
    assert_eq!(
        node(&e, "cloud-0").unwrap()["spec"]["providerID"],
        "fleet://cloud-0",
        "a cloud node keeps its provider ID"
    );
    let master = |e: &Emulator| e.get("deckhouse.io/v1", "NodeGroup", "", "master");
    eventually("the master NodeGroup is created", 20, || {
        master(&e).is_some()
    })
    .await;
    let m = master(&e).unwrap();
    assert_eq!(m["spec"]["nodeType"], "Static");
    assert_eq!(m["spec"]["disruptions"]["approvalMode"], "Manual");
    e.delete("deckhouse.io/v1", "NodeGroup", "", "master")
        .unwrap();
    eventually("master is created again after its deletion", 20, || {
        master(&e).is_some()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruptive_update_drains_through_a_pdb_and_deletes_at_the_timeout() {
    let c = cluster(
        &[("db", json!({
            "nodeType": "CloudPermanent",
            "nodeDrainTimeoutSecond": 3,
            "disruptions": {"approvalMode": "Automatic", "automatic": {"drainBeforeApproval": true}},
        }))],
        &[("db-0", "db", "a"), ("db-1", "db", "b")],
        fast_settings(),
    )
    .await;
    c.fleet.add_workload(Workload {
        name: "postgres".into(),
        namespace: "default".into(),
        kind: WorkloadKind::Deployment,
        replicas: 2,
        group: "db".into(),
        labels: BTreeMap::from([("app".into(), "postgres".into())]),
    });
    c.emulator
        .seed(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "postgres", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "postgres"}}}}),
        )
        .unwrap();
    let e = c.emulator.clone();
    eventually("two postgres pods", 20, || {
        e.list("v1", "Pod", Some("default")).len() == 2
    })
    .await;
    let db_gen1 = c
        .fleet
        .publish(
            "db",
            Generation {
                name: "db-gen1".into(),
                impact: ImpactKind::Disruptive,
                rolling: false,
            },
        )
        .unwrap();
    eventually("both db nodes on db-gen1, uncordoned", 90, || {
        ["db-0", "db-1"].iter().all(|n| {
            annotation(&e, n, "node.deckhouse.io/configuration-checksum").as_deref()
                == Some(db_gen1.as_str())
                && node(&e, n).is_some_and(|o| {
                    o.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true)
                })
        })
    })
    .await;
    assert!(
        c.emulator
            .request_count("create", "pods/eviction", Some(429))
            >= 1,
        "the PDB refused evictions"
    );
    assert!(
        c.metrics
            .action_total("nodemgr_update_actions_total", "force_deleted")
            > 0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_fenced_node_loses_its_pods_then_its_node_but_a_silent_zone_is_spared() {
    let fenced = json!({"nodeType": "CloudPermanent", "fencing": {"mode": "Watchdog", "watchdog": {"timeout": "2s"}}});
    let c = cluster(
        &[("edge", fenced)],
        &[
            ("e-0", "edge", "a"),
            ("e-1", "edge", "a"),
            ("z-0", "edge", "b"),
            ("z-1", "edge", "b"),
            ("z-2", "edge", "b"),
            // Healthy nodes elsewhere: 4 of 5 silent would be a cluster-wide storm (4 of 10
            // is not).
            ("c-0", "edge", "c"),
            ("c-1", "edge", "c"),
            ("c-2", "edge", "c"),
            ("c-3", "edge", "c"),
            ("c-4", "edge", "c"),
        ],
        fast_settings(),
    )
    .await;
    let e = c.emulator.clone();
    // The agent labels its node; here the test plays the agent.
    for n in [
        "e-0", "e-1", "z-0", "z-1", "z-2", "c-0", "c-1", "c-2", "c-3", "c-4",
    ] {
        e.merge_patch(
            "v1",
            "Node",
            "",
            n,
            &json!({"metadata": {"labels": {"node-manager.deckhouse.io/fencing-enabled": ""}}}),
            false,
        )
        .unwrap();
    }
    c.fleet.add_workload(Workload {
        name: "exporter".into(),
        namespace: "default".into(),
        kind: WorkloadKind::DaemonSet,
        replicas: 0,
        group: String::new(),
        labels: BTreeMap::new(),
    });
    eventually("an exporter on each node", 20, || {
        e.list("v1", "Pod", Some("default")).len() == 10
    })
    .await;
    eventually("the template controller's fencing-mode label", 20, || {
        label(&e, "e-1", "node-manager.deckhouse.io/fencing-mode").as_deref() == Some("Watchdog")
    })
    .await;
    c.fleet.set_dark("e-1", true).unwrap();
    for n in ["z-0", "z-1", "z-2"] {
        c.fleet.set_dark(n, true).unwrap();
    }
    eventually("e-1 deleted", 30, || node(&e, "e-1").is_none()).await;
    let pods_left = e
        .list("v1", "Pod", Some("default"))
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "e-1")
        .count();
    assert_eq!(pods_left, 0, "the pods went before the node");
    // Zone b went silent together: a partition, not dead nodes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for n in ["z-0", "z-1", "z-2"] {
        assert!(node(&e, n).is_some(), "{n} was fenced in a silent zone");
    }
    let text = c.metrics.encode();
    assert!(
        text.contains("nodemgr_fencing_storm_suppressed{zone=\"b\"} 1"),
        "{text}"
    );
    assert!(
        c.metrics
            .action_total("nodemgr_fencing_actions_total", "storm_suppressed")
            == 1.0,
        "one suppression episode, counted once: {text}"
    );
    let events = e.list("events.k8s.io/v1", "Event", Some("default"));
    assert!(
        events.iter().any(|ev| ev["reason"] == "FencingSuppressed"),
        "an event says why zone b is not fenced: {events:?}"
    );
    assert!(node(&e, "e-0").is_some());
}

/// A CloudEphemeral group's `instances` and `desired` follow its `Instance` objects (the
/// machine controller's record) once it has any; without Instances the status estimates from the
/// nodes. The standby count wanted is exported for the standby alert.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_instances_and_desired_from_the_machine_layer() {
    let c = cluster(
        &[(
            "eph",
            json!({"nodeType": "CloudEphemeral",
                   "cloudInstances": {"minPerZone": 1, "maxPerZone": 5, "zones": ["a"], "standby": 2,
                                      "classReference": {"kind": "AWSInstanceClass", "name": "c"}}}),
        )],
        &[("eph-0", "eph", "a"), ("eph-1", "eph", "a")],
        fast_settings(),
    )
    .await;
    let e = c.emulator.clone();
    eventually("estimated status without Instances", 20, || {
        let s = status(&e, "eph");
        s["instances"] == 2 && s["desired"] == 2
    })
    .await;
    for (name, phase) in [
        ("eph-m0", "Running"),
        ("eph-m1", "Running"),
        ("eph-m2", "Provisioning"),
        ("eph-m3", "Pending"),
        ("eph-m4", "Terminating"),
    ] {
        e.seed(
            json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "Instance",
                      "metadata": {"name": name, "labels": {"node.deckhouse.io/group": "eph",
                                                            "topology.kubernetes.io/zone": "a"}},
                      "status": {"currentStatus": {"phase": phase}}}),
        )
        .unwrap();
    }
    eventually("instances 5, desired 4", 20, || {
        let s = status(&e, "eph");
        s["instances"] == 5 && s["desired"] == 4
    })
    .await;
    eventually("Deckhouse's gauges follow the status", 10, || {
        let text = c.metrics.encode();
        text.contains("d8_node_group_instances{node_group_name=\"eph\"} 5")
            && text.contains("d8_node_group_desired{node_group_name=\"eph\"} 4")
            && text.contains("d8_node_group_standby_desired{node_group_name=\"eph\"} 2")
    })
    .await;
}
