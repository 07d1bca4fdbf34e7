//! The cluster port over kube against the API emulator, call by call: reads come from the
//! reflector stores, writes land as the port's contract says, and API status codes become the
//! port's typed errors (404 → NotFound, 409 and failed preconditions → Conflict, 429 →
//! TooManyRequests or, on the eviction subresource, a refusal by a budget, 5xx → Unavailable).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::time::Duration;

use nodemgr_core::model::{Taint, TaintEffect};
use nodemgr_core::ports::{
    ClusterError, ClusterRead, EvictionResult, NodeApi, NodePatch, PodApi, PodRef, Precondition,
};
use nodemgr_k8s::cluster::{KubeCluster, Watches, client};
use nodemgr_testkit::{Emulator, Fault};
use serde_json::{Value, json};

async fn port(emulator: &Emulator) -> (KubeCluster, Watches) {
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (port, watches) = KubeCluster::start(client, "node-manager");
    tokio::time::timeout(Duration::from_secs(20), port.wait_ready())
        .await
        .unwrap()
        .unwrap();
    (port, watches)
}

fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name,
        "labels": {"node.deckhouse.io/group": "workers"}}})
}

fn running_pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "db"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_come_from_the_stores_and_patches_land() {
    let e = Emulator::start().await.unwrap();
    e.seed(node("w-0")).unwrap();
    let (port, _watches) = port(&e).await;
    e.seed(node("w-1")).unwrap();
    eventually("the store sees w-1", async || {
        port.list_nodes().await.unwrap().len() == 2
    })
    .await;

    let patch = NodePatch::new()
        .set_label("tier", "web")
        .set_annotation("a", "1")
        .unschedulable(true);
    let patch = NodePatch {
        add_taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("db".into()),
            effect: Some(TaintEffect::NoSchedule),
        }],
        ..patch
    };
    let after = port.patch_node("w-0", &patch).await.unwrap();
    assert_eq!(after.labels.get("tier").map(String::as_str), Some("web"));
    let stored = e.get("v1", "Node", "", "w-0").unwrap();
    assert_eq!(stored["metadata"]["annotations"]["a"], "1");
    assert_eq!(stored["spec"]["unschedulable"], true);
    assert_eq!(stored["spec"]["taints"][0]["key"], "dedicated");

    let undo = NodePatch {
        remove_taints: vec!["dedicated".into()],
        ..NodePatch::new().remove_label("tier").remove_annotation("a")
    };
    port.patch_node("w-0", &undo).await.unwrap();
    let stored = e.get("v1", "Node", "", "w-0").unwrap();
    assert!(
        stored["metadata"]["labels"].get("tier").is_none(),
        "{stored}"
    );
    assert!(
        stored["spec"]["taints"]
            .as_array()
            .is_none_or(|t| t.is_empty()),
        "{stored}"
    );

    // Replacing the taints is guarded by the version they were computed from.
    let version = stored["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let mine = [Taint {
        key: "template".into(),
        value: None,
        effect: Some(TaintEffect::NoExecute),
    }];
    e.merge_patch(
        "v1",
        "Node",
        "",
        "w-0",
        &json!({"metadata": {"labels": {"someone": "else"}}}),
        false,
    )
    .unwrap();
    let err = port
        .replace_node_taints("w-0", &mine, Some(&version))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Conflict { .. }), "{err:?}");
    let fresh = e.get("v1", "Node", "", "w-0").unwrap();
    port.replace_node_taints("w-0", &mine, fresh["metadata"]["resourceVersion"].as_str())
        .await
        .unwrap();
    let stored = e.get("v1", "Node", "", "w-0").unwrap();
    assert_eq!(stored["spec"]["taints"][0]["key"], "template", "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_honour_the_uid_precondition() {
    let e = Emulator::start().await.unwrap();
    let first = e.seed(node("w-0")).unwrap();
    let (port, _watches) = port(&e).await;
    let old_uid = first["metadata"]["uid"].as_str().unwrap().to_owned();
    // The node is deleted and re-created under the same name: the old UID must not delete it.
    e.delete("v1", "Node", "", "w-0").unwrap();
    let second = e.seed(node("w-0")).unwrap();
    let err = port
        .delete_node("w-0", &Precondition::Uid(old_uid))
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Conflict { .. }), "{err:?}");
    assert!(e.get("v1", "Node", "", "w-0").is_some());
    let new_uid = second["metadata"]["uid"].as_str().unwrap().to_owned();
    port.delete_node("w-0", &Precondition::Uid(new_uid))
        .await
        .unwrap();
    assert!(e.get("v1", "Node", "", "w-0").is_none());
    let gone = port
        .delete_node("w-0", &Precondition::None)
        .await
        .unwrap_err();
    assert!(gone.is_not_found(), "{gone:?}");

    let pod = e.seed(running_pod("p", "w-1")).unwrap();
    let err = port
        .delete_pod(
            &PodRef::new("default", "p"),
            Some(Duration::ZERO),
            &Precondition::Uid("not-its-uid".into()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ClusterError::Conflict { .. }), "{err:?}");
    port.delete_pod(
        &PodRef::new("default", "p"),
        Some(Duration::ZERO),
        &Precondition::Uid(pod["metadata"]["uid"].as_str().unwrap().into()),
    )
    .await
    .unwrap();
    assert!(e.get("v1", "Pod", "default", "p").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_respect_budgets_and_api_codes_become_typed_errors() {
    let e = Emulator::start().await.unwrap();
    e.seed(running_pod("db-0", "w-0")).unwrap();
    e.seed(running_pod("db-1", "w-1")).unwrap();
    e.seed(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "db"}}}}),
    )
    .unwrap();
    let (port, _watches) = port(&e).await;
    let db0 = PodRef::new("default", "db-0");
    assert!(matches!(
        port.evict_pod(&db0).await.unwrap(),
        EvictionResult::RefusedByBudget(_)
    ));
    assert!(matches!(
        port.evict_pod(&PodRef::new("default", "nope"))
            .await
            .unwrap(),
        EvictionResult::Gone
    ));
    e.inject_fault(Fault::new(503).verb("create").resource("pods/eviction"));
    let err = port.evict_pod(&db0).await.unwrap_err();
    assert!(matches!(err, ClusterError::Unavailable { .. }), "{err:?}");

    e.seed(node("w-0")).unwrap();
    let patch = NodePatch::new().set_label("x", "y");
    for (code, retryable) in [(409, true), (429, true), (500, true), (403, false)] {
        e.inject_fault(Fault::new(code).verb("patch").resource("nodes"));
        let err = port.patch_node("w-0", &patch).await.unwrap_err();
        let expected = match code {
            409 => matches!(err, ClusterError::Conflict { .. }),
            429 => matches!(err, ClusterError::TooManyRequests { .. }),
            500 => matches!(err, ClusterError::Unavailable { .. }),
            _ => matches!(err, ClusterError::Other { .. }),
        };
        assert!(expected, "{code} became {err:?}");
        assert_eq!(err.is_retryable(), retryable, "{code}");
    }
    // The faults are spent: the same patch now lands.
    port.patch_node("w-0", &patch).await.unwrap();
    let err = port.patch_node("missing", &patch).await.unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
}
