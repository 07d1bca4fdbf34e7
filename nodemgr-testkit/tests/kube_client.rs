//! kube-rs against the emulator: what `nodemgr-k8s` relies on. A `kube::Client` built from the
//! emulator's kubeconfig lists, watches (through kube-runtime's watcher and a reflector),
//! patches (merge, strategic, apply with force, status), evicts, deletes with a uid
//! precondition, and survives injected faults and dropped watches.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Config};
use nodemgr_testkit::{Emulator, Fault};
use serde_json::json;

async fn client(emulator: &Emulator) -> Client {
    let kubeconfig = Kubeconfig::read_from(emulator.kubeconfig_path()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

/// A client without kube 5's built-in retry of 429/503/504 (up to 15 attempts with exponential
/// backoff, minutes in total): callers that handle 429 themselves — evictions refused by a
/// PodDisruptionBudget — want to see it at once.
async fn client_without_retry(emulator: &Emulator) -> Client {
    let kubeconfig = Kubeconfig::read_from(emulator.kubeconfig_path()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

fn node(name: &str) -> Node {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"pool": "a"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    .unwrap()
}

#[tokio::test]
async fn kube_client_lists_patches_and_deletes_nodes() {
    let emulator = Emulator::start().await.unwrap();
    let client = client(&emulator).await;
    let info = client.apiserver_version().await.unwrap();
    assert_eq!(info.major, "1");
    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["w1", "w2", "w3"] {
        nodes
            .create(&PostParams::default(), &node(name))
            .await
            .unwrap();
    }
    let listed = nodes
        .list(&ListParams::default().labels("pool=a").limit(2))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    assert!(listed.metadata.continue_.is_some());

    let patched = nodes
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"update.node.deckhouse.io/approved": ""}}}),
            ),
        )
        .await
        .unwrap();
    assert!(
        patched
            .metadata
            .annotations
            .unwrap()
            .contains_key("update.node.deckhouse.io/approved")
    );
    let cordoned = nodes
        .patch("w1", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule"}]}})))
        .await
        .unwrap();
    assert_eq!(cordoned.spec.unwrap().unschedulable, Some(true));
    let applied = nodes
        .patch("w2", &PatchParams::apply("nodemgr").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w2", "labels": {"node.deckhouse.io/group": "workers"}}})))
        .await
        .unwrap();
    assert_eq!(
        applied.metadata.labels.unwrap()["node.deckhouse.io/group"],
        "workers"
    );
    let status = nodes
        .patch_status(
            "w3",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        status.status.unwrap().conditions.unwrap()[0].status,
        "False"
    );

    // A conflict from the server surfaces as a kube ErrorResponse with code 409.
    let mut stale = nodes.get("w1").await.unwrap();
    nodes
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("y".into(), "2".into());
    match nodes.replace("w1", &PostParams::default(), &stale).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"))
        }
        other => panic!("expected a conflict, got {other:?}"),
    }

    // Deleting with a uid precondition: a re-created object is never deleted by mistake.
    let old_uid = nodes.get("w3").await.unwrap().metadata.uid.unwrap();
    nodes.delete("w3", &DeleteParams::default()).await.unwrap();
    nodes
        .create(&PostParams::default(), &node("w3"))
        .await
        .unwrap();
    let guarded = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(old_uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match nodes.delete("w3", &guarded).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409),
        other => panic!("expected a precondition failure, got {other:?}"),
    }
    assert!(nodes.get_opt("w3").await.unwrap().is_some());
    emulator.shutdown().await;
}

#[tokio::test]
async fn kube_runtime_watcher_and_reflector_follow_changes_through_faults() {
    let emulator = Emulator::start().await.unwrap();
    let client = client(&emulator).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(&PostParams::default(), &node("w1"))
        .await
        .unwrap();

    let (reader, writer) = reflector::store::<Node>();
    let stream = reflector(
        writer,
        watcher(nodes.clone(), watcher::Config::default().any_semantic()),
    )
    .applied_objects();
    let mut stream = Box::pin(stream);
    let first = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.metadata.name.as_deref(), Some("w1"));

    nodes
        .create(&PostParams::default(), &node("w2"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(next.metadata.name.as_deref(), Some("w2"));

    // Drop every watch and make the next list fail: the watcher recovers by itself.
    emulator.inject_fault(Fault::new(500).verb("list").resource("nodes"));
    emulator.drop_watches();
    nodes
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"after": "drop"}}})),
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("the watcher recovered");
        if let Some(Ok(n)) = event
            && n.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("after"))
        {
            break;
        }
    }
    assert_eq!(reader.state().len(), 2);
    emulator.shutdown().await;
}

#[tokio::test]
async fn kube_client_evicts_against_budgets() {
    let emulator = Emulator::start().await.unwrap();
    let client = client_without_retry(&emulator).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0", "namespace": "default", "labels": {"app": "db"}},
            "spec": {"nodeName": "w1", "containers": [{"name": "db", "image": "postgres"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}))
        .unwrap();
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "db"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    match pods.evict("db-0", &EvictParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(
            (status.code, status.reason.as_str()),
            (429, "TooManyRequests")
        ),
        other => panic!("expected 429, got {other:?}"),
    }
    pdbs.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 1}})),
    )
    .await
    .unwrap();
    pods.evict("db-0", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("db-0").await.unwrap().is_none());
    let on_node = pods
        .list(&ListParams::default().fields("spec.nodeName=w1"))
        .await
        .unwrap();
    assert!(on_node.items.is_empty());
    emulator.shutdown().await;
}
