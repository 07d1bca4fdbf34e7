//! After an API outage the port's watches are back within seconds: list and watch fail for
//! 12 s, and a Node created once they work again reaches the caches within the capped retry
//! (`nodemgr_k8s::watch_backoff`), not after a backoff grown to half a minute. The recovery
//! time is printed for the record; the assertion is the bound the schedule promises.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::time::Duration;

use nodemgr_core::ports::ClusterRead;
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::watch_backoff::MAX_RETRY;
use nodemgr_testkit::{Emulator, Fault};
use serde_json::json;
use tokio::time::Instant;

async fn sees_node(cluster: &KubeCluster, name: &str) -> bool {
    cluster
        .list_nodes()
        .await
        .unwrap()
        .iter()
        .any(|n| n.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caches_catch_up_within_seconds_of_the_api_recovering() {
    let emulator = Emulator::start().await.unwrap();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (cluster, _watches) = KubeCluster::start(client, "node-manager");
    cluster.wait_ready().await.unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "before"}}))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sees_node(&cluster, "before").await {
        assert!(Instant::now() < deadline, "the first Node never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The outage: every list and watch fails, and the open watches drop.
    emulator.inject_fault(Fault::new(503).verb("list").times(usize::MAX));
    emulator.inject_fault(Fault::new(503).verb("watch").times(usize::MAX));
    emulator.drop_watches();
    tokio::time::sleep(Duration::from_secs(12)).await;
    let failed = emulator.request_count("watch", "nodes", Some(503))
        + emulator.request_count("list", "nodes", Some(503));
    assert!(
        failed >= 3,
        "the watches kept retrying during the outage ({failed} tries)"
    );
    // The API server is back: a new Node must reach the caches soon.
    emulator.clear_faults();
    let recovered = Instant::now();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "after"}}))
        .unwrap();
    let bound = MAX_RETRY.mul_f64(1.25) + Duration::from_secs(1);
    loop {
        if sees_node(&cluster, "after").await {
            break;
        }
        assert!(
            recovered.elapsed() < bound * 4,
            "the caches were still blind {:?} after the API recovered",
            recovered.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = recovered.elapsed();
    eprintln!(
        "first fresh event {took:?} after the API recovered (outage 12 s, {failed} failed tries on nodes)"
    );
    assert!(
        took <= bound,
        "back to watching {took:?} after the API recovered; the capped retry promises {bound:?}"
    );
}
