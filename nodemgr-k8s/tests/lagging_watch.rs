//! The update controller against the API emulator while its watch of Nodes lags seconds behind
//! the writes: `maxConcurrent` must hold at every instant. A store that has not yet seen the
//! controller's own approval shows the approved node still waiting and its slot free; a node
//! that asked for approval meanwhile (and sorts first) would get a second slot if the pass
//! planned from that store. The controller must plan only from a view that includes its own
//! writes (docs/optimistic-concurrency.md).
//!
//! No simulated agents here: the test plays the node agents' part by hand (asking for approval
//! at staggered times, reporting the new checksum), so every step happens when the test says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use nodemgr_core::model::keys;
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers;
use nodemgr_k8s::metrics::Metrics;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};
use tokio::sync::watch;

const GROUP: &str = "workers";
const NODES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];
const WATCH_LAG: Duration = Duration::from_secs(3);

fn seed_cluster(emulator: &Emulator) {
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": keys::NAMESPACE}}),
        )
        .unwrap();
    emulator
        .seed(json!({
            "apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": GROUP},
            "spec": {"nodeType": "CloudPermanent", "update": {"maxConcurrent": 1},
                     "disruptions": {"approvalMode": "Automatic"}},
        }))
        .unwrap();
    let desired = base64::engine::general_purpose::STANDARD.encode("gen1");
    emulator
        .seed(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "configuration-checksums", "namespace": keys::NAMESPACE},
            "data": {GROUP: desired},
        }))
        .unwrap();
    for name in NODES {
        emulator
            .seed(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {keys::LABEL_NODE_GROUP: GROUP},
                    "annotations": {keys::ANNOTATION_CONFIGURATION_CHECKSUM: "gen0"},
                },
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap();
    }
}

fn annotate(emulator: &Emulator, node: &str, key: &str, value: &str) {
    emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            node,
            &json!({"metadata": {"annotations": {key: value}}}),
            false,
        )
        .unwrap();
}

fn approved(emulator: &Emulator) -> Vec<String> {
    emulator
        .list("v1", "Node", None)
        .iter()
        .filter(|n| {
            n.pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .is_some_and(|a| a.contains_key(keys::ANNOTATION_APPROVED))
        })
        .filter_map(|n| n.pointer("/metadata/name")?.as_str().map(str::to_owned))
        .collect()
}

/// Polls the emulator every 5 ms until `stop`, remembering the most nodes ever approved at
/// once and which they were.
fn spawn_monitor(
    emulator: Arc<Emulator>,
    most: Arc<AtomicUsize>,
    worst: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let now = approved(&emulator);
            if now.len() > most.load(Ordering::Relaxed) {
                most.store(now.len(), Ordering::Relaxed);
                *worst.lock().unwrap() = now;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

async fn wait_for(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_holds_while_the_node_watch_lags() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    seed_cluster(&emulator);
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (port, _watches) = KubeCluster::start(client, "node-manager");
    port.wait_ready().await.unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(controllers::update::run(
        port,
        Duration::from_millis(200),
        Metrics::new(),
        stop_rx,
    ));

    let most = Arc::new(AtomicUsize::new(0));
    let worst = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop_monitor = Arc::new(AtomicBool::new(false));
    let monitor = spawn_monitor(
        emulator.clone(),
        most.clone(),
        worst.clone(),
        stop_monitor.clone(),
    );

    // From now on the controller sees every change to a Node three seconds late.
    emulator.set_watch_delay("nodes", WATCH_LAG);
    // The agents ask for approval one after another, the last in name order first.
    for name in NODES.iter().rev() {
        annotate(&emulator, name, keys::ANNOTATION_WAITING_FOR_APPROVAL, "");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    wait_for("the first approval", Duration::from_secs(10), || {
        !approved(&emulator).is_empty()
    })
    .await;
    // Long enough for every request to have reached the lagging store.
    tokio::time::sleep(WATCH_LAG + Duration::from_secs(2)).await;

    // The approved node updates; the controller finishes it and approves the next one, still
    // one at a time.
    let first = approved(&emulator);
    eprintln!(
        "approved after the lag: {first:?}; most at once so far: {}",
        most.load(Ordering::Relaxed)
    );
    for name in &first {
        annotate(
            &emulator,
            name,
            keys::ANNOTATION_CONFIGURATION_CHECKSUM,
            "gen1",
        );
    }
    wait_for(
        "the next approval after the first node finished",
        Duration::from_secs(20),
        || {
            let now = approved(&emulator);
            !now.is_empty() && now != first
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    stop_monitor.store(true, Ordering::Relaxed);
    monitor.await.unwrap();
    let _ = stop_tx.send(true);
    let most = most.load(Ordering::Relaxed);
    assert!(
        most <= 1,
        "maxConcurrent 1 broken: {most} nodes approved at once ({:?})",
        worst.lock().unwrap()
    );
}
