//! The fencing controller under a flaky API, through kube-rs against the API emulator with
//! simulated kubelets (the testkit's `Fleet`): with list and watch failing for 12 s while
//! reads of single objects and writes still pass, every node healthy and a short deadline,
//! no pod and no Node is deleted (the controller's caches froze, so every heartbeat looked
//! stopped: before the freshness rule, the direct confirmation and the cluster-wide storm
//! guard, the pods of the healthy nodes in the zones of one and two nodes were force-deleted).
//! Once the API is back, a node that really goes dark is still fenced.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers::{self, Settings};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_testkit::{
    Emulator, Fault, Fleet, FleetConfig, FleetNode, Generation, Workload, WorkloadKind,
};
use serde_json::json;
use tokio::sync::watch;

fn settings() -> Settings {
    let mut s = Settings {
        status: false,
        template: false,
        update: false,
        fencing: true,
        fencing_period: Duration::from_millis(200),
        ..Settings::default()
    };
    // A group watchdog of 2 s and fast agents: deadline 2 + 0.5 + 0.1 = 2.6 s.
    let agent = &mut s.fencing_config.agent;
    agent.api_check_interval = Duration::from_millis(100);
    agent.api_timeout = Duration::from_millis(200);
    agent.feed_interval = Duration::from_millis(100);
    agent.watchdog_timeout = Duration::from_secs(2);
    agent.kubelet_stale_after = Duration::from_millis(500);
    s.fencing_config.margin = Duration::from_millis(100);
    s.fencing_config.max_cache_age = Duration::from_secs(5);
    s
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_caches_fence_nobody_and_a_dark_node_is_fenced_after_recovery() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let fleet = Fleet::start(
        emulator.clone(),
        FleetConfig {
            tick: Duration::from_millis(50),
            heartbeat: Duration::from_millis(200),
            grace: Duration::from_secs(1),
            ..FleetConfig::default()
        },
        None,
    )
    .unwrap();
    emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "edge"},
            "spec": {"nodeType": "CloudEphemeral", "fencing": {"mode": "Watchdog", "watchdog": {"timeout": "2s"}}}}))
        .unwrap();
    fleet
        .publish(
            "edge",
            Generation {
                name: "edge-gen0".into(),
                impact: ImpactKind::None,
                rolling: false,
            },
        )
        .unwrap();
    // Zones of one, two and three nodes.
    let nodes = [
        ("a-0", "a"),
        ("b-0", "b"),
        ("b-1", "b"),
        ("c-0", "c"),
        ("c-1", "c"),
        ("c-2", "c"),
    ];
    for (name, zone) in nodes {
        fleet
            .add_node(FleetNode {
                name: name.into(),
                group: "edge".into(),
                node_type: "CloudEphemeral".into(),
                zone: zone.into(),
                pods: 110,
            })
            .unwrap();
        // The agent labels its node; here the test plays the agent.
        emulator
            .merge_patch(
                "v1",
                "Node",
                "",
                name,
                &json!({"metadata": {"labels": {"node-manager.deckhouse.io/fencing-enabled": ""}}}),
                false,
            )
            .unwrap();
    }
    fleet.add_workload(Workload {
        name: "exporter".into(),
        namespace: "default".into(),
        kind: WorkloadKind::DaemonSet,
        replicas: 0,
        group: String::new(),
        labels: Default::default(),
    });
    let e = emulator.clone();
    eventually("an exporter on each node", 20, || {
        e.list("v1", "Pod", Some("default")).len() == nodes.len()
    })
    .await;

    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (port, _watches) = KubeCluster::start(client, "node-manager");
    port.wait_ready().await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    tokio::spawn(controllers::run(port, settings(), metrics.clone(), stop_rx));
    // Healthy for a while: nothing happens.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // List and watch fail for 12 s (every open watch is cut), gets and writes still pass.
    emulator.inject_fault(Fault::new(503).verb("list").times(1_000_000));
    emulator.inject_fault(Fault::new(503).verb("watch").times(1_000_000));
    emulator.drop_watches();
    tokio::time::sleep(Duration::from_secs(12)).await;
    emulator.clear_faults();
    tokio::time::sleep(Duration::from_secs(3)).await;

    assert_eq!(
        emulator.request_count("delete", "pods", None),
        0,
        "pods of healthy nodes deleted"
    );
    assert_eq!(emulator.request_count("delete", "nodes", None), 0);
    assert_eq!(e.list("v1", "Pod", Some("default")).len(), nodes.len());
    let text = metrics.encode();
    assert!(
        metrics.action_total("nodemgr_fencing_actions_total", "paused_stale_cache") > 0.0,
        "the pause is reported: {text}"
    );

    // The API is back: a node that really goes dark is fenced (pods, then Node).
    fleet.set_dark("a-0", true).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while e.get("v1", "Node", "", "a-0").is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a-0 not fenced within 60 s: {}",
            metrics.encode()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let left = e
        .list("v1", "Pod", Some("default"))
        .iter()
        .filter(|p| p["spec"]["nodeName"] == "a-0")
        .count();
    assert_eq!(left, 0, "the pods went before the node");
    for (name, _) in &nodes[1..] {
        assert!(e.get("v1", "Node", "", name).is_some(), "{name} fenced");
    }
    let _ = stop.send(true);
}
