//! The machine controller end to end against the API emulator and the simulator's in-memory
//! cloud (machines start after a second; a stand-in kubelet registers a Node for each running
//! machine): scale-up to `minPerZone`, scale-down through a drain, a fixed count raised, an
//! Instance deleted by a person, machines that never register replaced and recorded in
//! `status.lastMachineFailures`. Every wait is a deadline for something that must happen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nodemgr_core::machines::MachineConfig;
use nodemgr_core::model::Timestamp;
use nodemgr_core::scaling::InstanceClass;
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers;
use nodemgr_k8s::controllers::machines::MachineController;
use nodemgr_k8s::metrics::Metrics;
use nodemgr_sim::cloud::SimCloud;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};
use tokio::sync::watch;

fn wall() -> Timestamp {
    nodemgr_k8s::controllers::now()
}

struct World {
    emulator: Arc<Emulator>,
    cloud: Arc<SimCloud>,
    kubelets: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    metrics: Metrics,
    _watches: nodemgr_k8s::cluster::Watches,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn group(min: u32, max: u32) -> Value {
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "worker"},
        "spec": {"nodeType": "CloudEphemeral", "cloudInstances": {
            "classReference": {"kind": "AWSInstanceClass", "name": "small"},
            "minPerZone": min, "maxPerZone": max, "zones": ["a"]}}})
}

async fn world(min: u32, max: u32, creation_timeout: Duration) -> World {
    // RUST_LOG=nodemgr_k8s=info shows the controllers' decisions when a test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    emulator.seed(group(min, max)).unwrap();
    let cloud = Arc::new(SimCloud::new(
        wall(),
        Duration::from_secs(1),
        Duration::from_millis(500),
        7,
    ));
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (cluster, watches) = KubeCluster::start(client, "node-manager");
    cluster.wait_ready().await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let mut settings = common::machine_settings(
        "a",
        MachineConfig {
            creation_timeout,
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(2),
            orphan_grace: Duration::from_secs(5),
            gc_grace: Duration::from_secs(2),
            failures_kept: 3,
        },
        nodemgr_core::ports::cloud::InstanceClass {
            instance_type: "m5.xlarge".into(),
            ..Default::default()
        },
    );
    // Empty nodes go after 2 s (the default is 10 min).
    settings.scaling.scale_down_unneeded_time = Duration::from_secs(2);
    settings.scaling.scale_down_delay_after_add = Duration::ZERO;
    let controller =
        MachineController::new(cluster.clone(), cloud.clone(), settings, metrics.clone());
    tokio::spawn(controller.run(stop_rx.clone()));
    // The update controller drains the nodes scale-down removes.
    tokio::spawn(controllers::run(
        cluster,
        common::update_only(),
        metrics.clone(),
        stop_rx.clone(),
    ));
    let kubelets = Arc::new(AtomicBool::new(true));
    tokio::spawn(kubelet(
        emulator.clone(),
        cloud.clone(),
        kubelets.clone(),
        stop_rx,
    ));
    World {
        emulator,
        cloud,
        kubelets,
        stop,
        metrics,
        _watches: watches,
    }
}

/// Moves the cloud's clock and registers a Ready Node for each running machine.
async fn kubelet(
    emulator: Arc<Emulator>,
    cloud: Arc<SimCloud>,
    on: Arc<AtomicBool>,
    stop: watch::Receiver<bool>,
) {
    let mut registered = BTreeSet::new();
    while !*stop.borrow() {
        cloud.advance(wall());
        if on.load(Ordering::Relaxed) {
            for m in cloud.existing() {
                if m.state != nodemgr_core::ports::cloud::InstanceState::Running
                    || !registered.insert(m.machine.clone())
                {
                    continue;
                }
                let _ = emulator.seed(common::machine_node(&m));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn eventually(what: &str, seconds: u64, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Merge-patches NodeGroup `worker`.
fn patch_group(w: &World, patch: &Value) {
    w.emulator
        .merge_patch("deckhouse.io/v1", "NodeGroup", "", "worker", patch, false)
        .unwrap();
}

fn instances(w: &World) -> Vec<Value> {
    w.emulator.list("deckhouse.io/v1alpha2", "Instance", None)
}

fn running(w: &World) -> usize {
    instances(w)
        .iter()
        .filter(|i| i["status"]["currentStatus"]["phase"] == "Running")
        .count()
}

fn nodes(w: &World) -> usize {
    w.emulator.list("v1", "Node", None).len()
}

fn in_step(w: &World, n: usize) -> bool {
    w.cloud.existing().len() == n && instances(w).len() == n && running(w) == n && nodes(w) == n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_up_down_and_fixed_counts_keep_instances_in_step() {
    let w = world(2, 4, Duration::from_secs(60)).await;
    eventually("2 machines, Instances Running, Nodes", 30, || {
        in_step(&w, 2)
    })
    .await;
    for i in instances(&w) {
        let name = i["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("worker-"), "{name}");
        assert_eq!(i["status"]["nodeRef"]["name"], name);
        assert_eq!(i["metadata"]["labels"]["topology.kubernetes.io/zone"], "a");
        assert!(
            i["metadata"]["annotations"]["node-manager.deckhouse.io/provider-id"]
                .as_str()
                .unwrap()
                .starts_with("sim:///a/")
        );
    }

    // Down to a fixed 1: one node is drained, then its machine, Node and Instance go.
    patch_group(
        &w,
        &json!({"spec": {"cloudInstances": {"minPerZone": 1, "maxPerZone": 1}}}),
    );
    eventually("down to 1", 30, || in_step(&w, 1)).await;
    let text = w.metrics.encode();
    assert!(
        w.metrics
            .action_total("nodemgr_machine_actions_total", "drain")
            == 1.0,
        "{text}"
    );
    assert!(
        w.metrics
            .action_total("nodemgr_machine_actions_total", "delete")
            == 1.0,
        "{text}"
    );

    // Raised to a fixed 3.
    patch_group(
        &w,
        &json!({"spec": {"cloudInstances": {"minPerZone": 3, "maxPerZone": 3}}}),
    );
    eventually("up to 3", 30, || in_step(&w, 3)).await;

    // A person deletes an Instance: its machine goes, and a replacement keeps the count.
    let victim = instances(&w)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    w.emulator
        .delete("deckhouse.io/v1alpha2", "Instance", "", &victim)
        .unwrap();
    eventually("the deleted Instance's machine gone", 30, || {
        !w.cloud.existing().iter().any(|m| m.machine == victim)
            && !instances(&w)
                .iter()
                .any(|i| i["metadata"]["name"] == victim.as_str())
    })
    .await;
    eventually("back to 3", 30, || in_step(&w, 3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_never_register_are_recorded_and_replaced() {
    let w = world(1, 1, Duration::from_secs(3)).await;
    w.kubelets.store(false, Ordering::Relaxed);
    eventually("a failure recorded", 30, || {
        w.emulator
            .get("deckhouse.io/v1", "NodeGroup", "", "worker")
            .is_some_and(|g| {
                g["status"]["lastMachineFailures"]
                    .as_array()
                    .is_some_and(|f| !f.is_empty())
            })
    })
    .await;
    let failed = w
        .emulator
        .get("deckhouse.io/v1", "NodeGroup", "", "worker")
        .unwrap()["status"]["lastMachineFailures"][0]
        .clone();
    assert!(
        failed["lastOperation"]["description"]
            .as_str()
            .unwrap()
            .contains("no Node registered"),
        "{failed}"
    );
    let first = failed["name"].as_str().unwrap().to_owned();
    eventually("the failed machine replaced", 30, || {
        !w.cloud.existing().iter().any(|m| m.machine == first) && w.cloud.existing().len() == 1
    })
    .await;
    // Kubelets work again: the group settles at 1.
    w.kubelets.store(true, Ordering::Relaxed);
    eventually("settled at 1", 30, || in_step(&w, 1)).await;
    let kept = w
        .emulator
        .get("deckhouse.io/v1", "NodeGroup", "", "worker")
        .unwrap()["status"]["lastMachineFailures"]
        .as_array()
        .unwrap()
        .len();
    assert!((1..=3).contains(&kept), "{kept} failures kept (at most 3)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_class_change_replaces_every_node_new_before_old() {
    let w = world(2, 2, Duration::from_secs(60)).await;
    eventually("2 machines of the small class", 30, || in_step(&w, 2)).await;
    let old: BTreeSet<String> = w.cloud.existing().into_iter().map(|m| m.machine).collect();
    let small = InstanceClass::new("AWSInstanceClass", "small", 4, 16).checksum();
    let large = InstanceClass::new("AWSInstanceClass", "large", 8, 32).checksum();
    let stamped = |checksum: &str| {
        w.emulator
            .list("v1", "Node", None)
            .iter()
            .filter(|n| {
                n["metadata"]["annotations"]["node-manager.deckhouse.io/instance-class-checksum"]
                    == checksum
            })
            .count()
    };
    eventually("the nodes stamped with the small class", 10, || {
        stamped(&small) == 2
    })
    .await;

    patch_group(
        &w,
        &json!({"spec": {"cloudInstances": {"classReference": {"kind": "AWSInstanceClass", "name": "large"}}}}),
    );
    // New before old: Ready nodes not being removed never drop below 2 on the way.
    let mut fewest = usize::MAX;
    eventually(
        "2 machines of the large class, the old ones gone",
        60,
        || {
            let serving = w
                .emulator
                .list("v1", "Node", None)
                .iter()
                .filter(|n| {
                    n["metadata"]["labels"]
                        .get("node.deckhouse.io/termination-in-progress")
                        .is_none()
                })
                .count();
            fewest = fewest.min(serving);
            in_step(&w, 2)
                && stamped(&large) == 2
                && w.cloud.existing().iter().all(|m| !old.contains(&m.machine))
        },
    )
    .await;
    assert!(
        fewest >= 2,
        "serving nodes dropped to {fewest} during the rollout"
    );
    // Each old node's removal counted once under its disruption reason.
    assert_eq!(
        disruptions(&w, "class_change"),
        2.0,
        "{}",
        w.metrics.encode()
    );
}

/// `nodemgr_disruptions_total` of group `worker` for `reason`.
fn disruptions(w: &World, reason: &str) -> f64 {
    let series = format!("nodemgr_disruptions_total{{node_group=\"worker\",reason=\"{reason}\"}} ");
    w.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse::<f64>().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_replaces_the_machine_through_a_drain() {
    let w = world(2, 2, Duration::from_secs(60)).await;
    eventually("2 machines", 30, || in_step(&w, 2)).await;
    patch_group(
        &w,
        &json!({"spec": {"disruptions": {"approvalMode": "RollingUpdate"}}}),
    );
    // The group's desired configuration (the update planner skips groups without one) ...
    w.emulator
        .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d8-cloud-instance-manager"}}))
        .unwrap();
    w.emulator
        .seed(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "configuration-checksums", "namespace": "d8-cloud-instance-manager"},
            "data": {"worker": "Z2VuMQ=="}}))
        .unwrap();
    // ... its count, which the status controller (not running here) writes: the update planner
    // holds a CloudEphemeral group until its status carries `desired` (docs/deckhouse.md §3.2) ...
    w.emulator
        .merge_patch(
            "deckhouse.io/v1",
            "NodeGroup",
            "",
            "worker",
            &json!({"status": {"desired": 2}}),
            true,
        )
        .unwrap();
    // ... and the node agent of one node asks for a disruption in RollingUpdate mode, and the update
    // flow approved it: the update planner decides to replace its machine.
    let victim = w.cloud.existing()[0].machine.clone();
    w.emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            &victim,
            &json!({"metadata": {"annotations": {
                "update.node.deckhouse.io/approved": "",
                "update.node.deckhouse.io/rolling-update": ""}}}),
            false,
        )
        .unwrap();
    eventually("the victim replaced, 2 machines again", 60, || {
        in_step(&w, 2) && !w.cloud.existing().iter().any(|m| m.machine == victim)
    })
    .await;
    let text = w.metrics.encode();
    assert!(
        w.metrics
            .action_total("nodemgr_update_actions_total", "replace_machine")
            > 0.0,
        "{text}"
    );
    // The planner repeats the replacement while the node exists; it is one disruption.
    assert_eq!(disruptions(&w, "rolling_update"), 1.0, "{text}");
    assert!(
        w.metrics
            .action_total("nodemgr_update_actions_total", "drain_finished")
            > 0.0,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underutilized_nodes_are_drained_and_their_machines_deleted() {
    let w = world(2, 3, Duration::from_secs(60)).await;
    eventually("2 machines", 30, || in_step(&w, 2)).await;
    // minPerZone 0: the two empty nodes are unneeded, drained and removed.
    patch_group(&w, &json!({"spec": {"cloudInstances": {"minPerZone": 0}}}));
    eventually("scaled down to 0", 60, || in_step(&w, 0)).await;
    let text = w.metrics.encode();
    assert!(
        w.metrics
            .action_total("nodemgr_machine_actions_total", "drain")
            == 2.0,
        "{text}"
    );
}
