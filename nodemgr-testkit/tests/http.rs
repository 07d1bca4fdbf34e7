//! HTTP-level behaviour of the emulator, checked the way a client sees it: discovery, CRUD with
//! optimistic concurrency, list pagination and selectors, watch resume / 410 / bookmarks /
//! timeouts / drops, the patch formats, the status subresource, finalizers, delete
//! preconditions, server-side apply conflicts, eviction against PodDisruptionBudgets, injected
//! faults and Table output.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

mod common;

use std::time::Duration;

use common::{Api, node, nodegroup_crd, running_pod};
use nodemgr_testkit::{Emulator, EmulatorOptions, Fault};
use serde_json::{Value, json};

async fn start() -> (Emulator, Api) {
    let emulator = Emulator::start().await.unwrap();
    let api = Api::new(emulator.url());
    (emulator, api)
}

async fn start_with(options: EmulatorOptions) -> (Emulator, Api) {
    let emulator = Emulator::start_with(options).await.unwrap();
    let api = Api::new(emulator.url());
    (emulator, api)
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn install_crd(api: &Api) {
    let (code, crd) = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &nodegroup_crd(),
        )
        .await;
    assert_eq!(code, 201, "{crd}");
}

fn nodegroup(name: &str) -> Value {
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name}, "spec": {"nodeType": "Static"}})
}

#[tokio::test]
async fn discovery_serves_builtins_and_registers_crds() {
    let (_emulator, api) = start().await;
    let (code, version) = api.get("/version").await;
    assert_eq!((code, version["major"].as_str()), (200, Some("1")));
    let (_, core) = api.get("/api").await;
    assert_eq!(core["versions"], json!(["v1"]));
    let (_, v1) = api.get("/api/v1").await;
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    for want in [
        "nodes",
        "nodes/status",
        "pods",
        "pods/eviction",
        "namespaces",
        "events",
        "secrets",
        "configmaps",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let (_, groups) = api.get("/apis").await;
    let group_names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    for want in [
        "coordination.k8s.io",
        "policy",
        "apiextensions.k8s.io",
        "events.k8s.io",
        "apps",
    ] {
        assert!(group_names.contains(&want), "{want} missing");
    }
    assert!(!group_names.contains(&"deckhouse.io"));
    assert_eq!(api.get("/apis/deckhouse.io/v1").await.0, 404);

    install_crd(&api).await;
    let (_, groups) = api.get("/apis").await;
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "deckhouse.io")
    );
    let (code, list) = api.get("/apis/deckhouse.io/v1").await;
    assert_eq!(code, 200);
    let ng = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "nodegroups")
        .unwrap();
    assert_eq!(
        (
            ng["shortNames"].clone(),
            ng["namespaced"].clone(),
            ng["kind"].clone()
        ),
        (json!(["ng"]), json!(false), json!("NodeGroup"))
    );
    assert!(
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "nodegroups/status")
    );
    let (_, crd) = api
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodegroups.deckhouse.io")
        .await;
    let established = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "{crd}");

    // A CRD whose name is not plural.group is refused.
    let mut bad = nodegroup_crd();
    bad["metadata"]["name"] = json!("wrong");
    let (code, status) = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &bad,
        )
        .await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));

    // Deleting the CRD removes the type and its objects.
    assert_eq!(
        api.post("/apis/deckhouse.io/v1/nodegroups", &nodegroup("w"))
            .await
            .0,
        201
    );
    assert_eq!(
        api.delete(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/nodegroups.deckhouse.io",
            None
        )
        .await
        .0,
        200
    );
    assert_eq!(api.get("/apis/deckhouse.io/v1/nodegroups").await.0, 404);
}

#[tokio::test]
async fn crud_with_optimistic_concurrency() {
    let (_emulator, api) = start().await;
    let (code, created) = api.post("/api/v1/nodes", &node("w1")).await;
    assert_eq!(code, 201);
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| u.len() == 36)
    );
    assert!(created["metadata"]["creationTimestamp"].as_str().is_some());
    let (code, status) = api.post("/api/v1/nodes", &node("w1")).await;
    assert_eq!(
        (code, status["kind"].as_str(), status["reason"].as_str()),
        (409, Some("Status"), Some("AlreadyExists"))
    );

    let mut stale = created.clone();
    stale["metadata"]["labels"]["x"] = json!("1");
    let (code, updated) = api.put("/api/v1/nodes/w1", &stale).await;
    assert_eq!(code, 200);
    assert!(rv(&updated) > rv(&created));
    // The same (now stale) resourceVersion again: 409 Conflict.
    stale["metadata"]["labels"]["x"] = json!("2");
    let (code, status) = api.put("/api/v1/nodes/w1", &stale).await;
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("the object has been modified")
    );
    // Without a resourceVersion the update is unconditional.
    let mut unconditional = updated.clone();
    unconditional["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");
    unconditional["metadata"]["labels"]["x"] = json!("3");
    assert_eq!(api.put("/api/v1/nodes/w1", &unconditional).await.0, 200);
    // An update that changes nothing keeps the resourceVersion.
    let (_, current) = api.get("/api/v1/nodes/w1").await;
    let (_, same) = api.put("/api/v1/nodes/w1", &current).await;
    assert_eq!(rv(&same), rv(&current));

    let (code, status) = api.get("/api/v1/nodes/nope").await;
    assert_eq!(
        (code, status["reason"].as_str(), status["message"].as_str()),
        (404, Some("NotFound"), Some("nodes \"nope\" not found"))
    );
    // Namespaced objects need an existing namespace.
    let (code, _) = api
        .post(
            "/api/v1/namespaces/missing/configmaps",
            &json!({"metadata": {"name": "c"}}),
        )
        .await;
    assert_eq!(code, 404);
    let (code, cm) = api
        .post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"generateName": "cm-"}, "data": {"a": "b"}}),
        )
        .await;
    assert_eq!(code, 201);
    assert!(cm["metadata"]["name"].as_str().unwrap().starts_with("cm-"));
    assert_eq!(cm["metadata"]["namespace"], "default");
}

#[tokio::test]
async fn list_paginates_and_filters_by_selectors() {
    let (_emulator, api) = start().await;
    for i in 0..5 {
        let mut n = node(&format!("n{i}"));
        n["metadata"]["labels"]["pool"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        if i == 4 {
            n["spec"] = json!({"unschedulable": true});
        }
        assert_eq!(api.post("/api/v1/nodes", &n).await.0, 201);
    }
    let (_, page) = api.get("/api/v1/nodes?limit=2").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["metadata"]["remainingItemCount"], 3);
    let token = page["metadata"]["continue"].as_str().unwrap().to_owned();
    let (_, page2) = api
        .get(&format!("/api/v1/nodes?limit=2&continue={token}"))
        .await;
    assert_eq!(page2["items"][0]["metadata"]["name"], "n2");
    assert_eq!(
        page2["metadata"]["resourceVersion"],
        page["metadata"]["resourceVersion"]
    );
    let token = page2["metadata"]["continue"].as_str().unwrap().to_owned();
    let (_, page3) = api
        .get(&format!("/api/v1/nodes?limit=2&continue={token}"))
        .await;
    assert_eq!(page3["items"].as_array().unwrap().len(), 1);
    assert!(page3["metadata"].get("continue").is_none());

    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (selector, want) in [
        ("pool%3Deven", vec!["n0", "n2", "n4"]),
        ("pool%3D%3Dodd", vec!["n1", "n3"]),
        ("pool!%3Deven", vec!["n1", "n3"]),
        ("pool%20in%20(odd)", vec!["n1", "n3"]),
        ("pool%20notin%20(odd)", vec!["n0", "n2", "n4"]),
        ("pool", vec!["n0", "n1", "n2", "n3", "n4"]),
        ("!pool", vec![]),
    ] {
        let (code, list) = api
            .get(&format!("/api/v1/nodes?labelSelector={selector}"))
            .await;
        assert_eq!(code, 200);
        assert_eq!(names(&list), want, "{selector}");
    }
    let (_, list) = api
        .get("/api/v1/nodes?fieldSelector=metadata.name%3Dn3")
        .await;
    assert_eq!(names(&list), ["n3"]);
    let (_, list) = api
        .get("/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue")
        .await;
    assert_eq!(names(&list), ["n4"]);
    let (code, status) = api
        .get("/api/v1/nodes?fieldSelector=spec.providerID%3Dx")
        .await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("field label not supported: spec.providerID"))
    );

    for (name, node_name, phase) in [
        ("a", "n1", "Running"),
        ("b", "n2", "Running"),
        ("c", "n1", "Succeeded"),
    ] {
        let mut pod = running_pod(name, node_name, json!({"app": "x"}));
        pod["status"]["phase"] = json!(phase);
        assert_eq!(
            api.post("/api/v1/namespaces/default/pods", &pod).await.0,
            201
        );
    }
    let (_, pods) = api
        .get("/api/v1/pods?fieldSelector=spec.nodeName%3Dn1")
        .await;
    assert_eq!(names(&pods), ["a", "c"]);
    let (_, pods) = api.get("/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dn1,status.phase!%3DSucceeded").await;
    assert_eq!(names(&pods), ["a"]);
    let (_, pods) = api.get("/api/v1/namespaces/kube-system/pods").await;
    assert_eq!(names(&pods), Vec::<String>::new());
}

#[tokio::test]
async fn watch_resumes_expires_bookmarks_and_times_out() {
    let options = EmulatorOptions {
        history_limit: 8,
        bookmark_interval: Duration::from_millis(100),
        ..EmulatorOptions::default()
    };
    let (emulator, api) = start_with(options).await;
    let (_, first) = api.post("/api/v1/nodes", &node("a")).await;
    let (_, second) = api.post("/api/v1/nodes", &node("b")).await;

    // Resume after the first create: only b's ADDED, then live events.
    let mut watch = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&resourceVersion={}",
            rv(&first)
        ))
        .await;
    let event = watch.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("b"))
    );
    let (_, patched) = api
        .patch(
            "/api/v1/nodes/a",
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .await;
    let event = watch.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (event["type"].as_str(), rv(&event["object"])),
        (Some("MODIFIED"), rv(&patched))
    );
    assert_eq!(api.delete("/api/v1/nodes/b", None).await.0, 200);
    let event = watch.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("b"))
    );

    // Without a resourceVersion: synthetic ADDED for what exists.
    let mut fresh = api.watch("/api/v1/nodes?watch=1").await;
    let event = fresh.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("a"))
    );

    // Label-selector watches see objects enter and leave the selection.
    let mut selected = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&labelSelector=x%3Dz&resourceVersion={}",
            emulator.resource_version()
        ))
        .await;
    api.patch(
        "/api/v1/nodes/a",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"x": "z"}}}),
    )
    .await;
    assert_eq!(
        selected.next(Duration::from_secs(2)).await.unwrap()["type"],
        "ADDED"
    );
    api.patch(
        "/api/v1/nodes/a",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"x": "w"}}}),
    )
    .await;
    assert_eq!(
        selected.next(Duration::from_secs(2)).await.unwrap()["type"],
        "DELETED"
    );

    // Enough changes to push the second create out of the kept history: 410 as an ERROR event.
    for i in 0..10 {
        api.patch(
            "/api/v1/nodes/a",
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"i": i.to_string()}}}),
        )
        .await;
    }
    let mut expired = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&resourceVersion={}",
            rv(&second)
        ))
        .await;
    let event = expired.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(
        (
            event["object"]["code"].as_i64(),
            event["object"]["reason"].as_str()
        ),
        (Some(410), Some("Expired"))
    );
    assert!(expired.ended(Duration::from_secs(2)).await);

    // Bookmarks carry the latest resourceVersion.
    let current = emulator.resource_version();
    let mut bookmarked = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&allowWatchBookmarks=true&resourceVersion={current}"
        ))
        .await;
    let event = bookmarked.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(event["type"], "BOOKMARK");
    assert_eq!(rv(&event["object"]), current);

    // timeoutSeconds ends the stream; drop_watches ends every stream.
    let mut timed = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&timeoutSeconds=1&resourceVersion={current}"
        ))
        .await;
    assert!(timed.ended(Duration::from_secs(3)).await);
    let mut dropped = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&resourceVersion={current}"
        ))
        .await;
    emulator.drop_watches();
    assert!(dropped.ended(Duration::from_secs(2)).await);

    // sendInitialEvents: ADDED for everything, then a bookmark marking the end.
    let mut streaming = api.watch("/api/v1/nodes?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true").await;
    assert_eq!(
        streaming.next(Duration::from_secs(2)).await.unwrap()["type"],
        "ADDED"
    );
    let end = streaming.next(Duration::from_secs(2)).await.unwrap();
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
}

#[tokio::test]
async fn patch_formats_touch_the_fields_nodemgr_uses() {
    let (_emulator, api) = start().await;
    let mut n = node("w1");
    n["spec"] = json!({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}]});
    n["metadata"]["finalizers"] = json!(["keep"]);
    api.post("/api/v1/nodes", &n).await;

    let (code, merged) = api.patch("/api/v1/nodes/w1", "application/merge-patch+json",
        &json!({"metadata": {"labels": {"kubernetes.io/hostname": null, "new": "1"}, "annotations": {"a": "b"}}})).await;
    assert_eq!(code, 200);
    assert_eq!(merged["metadata"]["labels"], json!({"new": "1"}));

    let (code, smp) = api.patch("/api/v1/nodes/w1", "application/strategic-merge-patch+json", &json!({
        "metadata": {"finalizers": ["more"]},
        "spec": {"unschedulable": true, "taints": [{"key": "a", "effect": "NoSchedule", "value": "v"}, {"key": "c", "effect": "NoSchedule"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]}})).await;
    assert_eq!(code, 200, "{smp}");
    assert_eq!(smp["spec"]["unschedulable"], true);
    assert_eq!(
        smp["spec"]["taints"],
        json!([{"key": "a", "effect": "NoSchedule", "value": "v"}, {"key": "b", "effect": "NoExecute"}, {"key": "c", "effect": "NoSchedule"}])
    );
    assert_eq!(smp["metadata"]["finalizers"], json!(["keep", "more"]));
    assert_eq!(
        smp["status"]["conditions"][0]["status"], "True",
        "the main endpoint ignores status"
    );

    let (code, status_patched) = api.patch("/api/v1/nodes/w1/status", "application/strategic-merge-patch+json",
        &json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}, "spec": {"unschedulable": false}})).await;
    assert_eq!(code, 200);
    assert_eq!(status_patched["status"]["conditions"][0]["status"], "False");
    assert_eq!(
        status_patched["spec"]["unschedulable"], true,
        "/status ignores spec"
    );

    let (code, jp) = api
        .patch(
            "/api/v1/nodes/w1",
            "application/json-patch+json",
            &json!([
        {"op": "test", "path": "/spec/unschedulable", "value": true},
        {"op": "remove", "path": "/spec/taints/1"},
        {"op": "add", "path": "/metadata/labels/jp", "value": "yes"}]),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(jp["spec"]["taints"].as_array().unwrap().len(), 2);
    assert_eq!(jp["metadata"]["labels"]["jp"], "yes");
    let (code, status) = api
        .patch(
            "/api/v1/nodes/w1",
            "application/json-patch+json",
            &json!([{"op": "test", "path": "/spec/unschedulable", "value": false}]),
        )
        .await;
    assert_eq!((code, status["reason"].as_str()), (422, Some("Invalid")));

    // A merge patch carrying a stale resourceVersion is a precondition: 409.
    let (code, _) = api
        .patch(
            "/api/v1/nodes/w1",
            "application/merge-patch+json",
            &json!({"metadata": {"resourceVersion": "1", "labels": {"z": "1"}}}),
        )
        .await;
    assert_eq!(code, 409);
    let (code, _) = api
        .patch(
            "/api/v1/nodes/missing",
            "application/merge-patch+json",
            &json!({}),
        )
        .await;
    assert_eq!(code, 404);
    let (code, _) = api
        .patch("/api/v1/nodes/w1", "text/plain", &json!({}))
        .await;
    assert_eq!(code, 415);

    // Custom resources do not take strategic merge patches.
    install_crd(&api).await;
    api.post("/apis/deckhouse.io/v1/nodegroups", &nodegroup("w"))
        .await;
    let (code, _) = api
        .patch(
            "/apis/deckhouse.io/v1/nodegroups/w",
            "application/strategic-merge-patch+json",
            &json!({"spec": {}}),
        )
        .await;
    assert_eq!(code, 415);
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let (_emulator, api) = start().await;
    install_crd(&api).await;
    let mut ng = nodegroup("workers");
    ng["status"] = json!({"ready": 5});
    let (_, created) = api.post("/apis/deckhouse.io/v1/nodegroups", &ng).await;
    assert!(
        created.get("status").is_none(),
        "status is dropped on create: {created}"
    );
    assert_eq!(created["metadata"]["generation"], 1);

    let (code, with_status) = api
        .patch(
            "/apis/deckhouse.io/v1/nodegroups/workers/status",
            "application/merge-patch+json",
            &json!({"status": {"ready": 2, "nodes": 3}, "spec": {"nodeType": "CloudEphemeral"}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(with_status["status"], json!({"ready": 2, "nodes": 3}));
    assert_eq!(with_status["spec"]["nodeType"], "Static");
    assert_eq!(
        with_status["metadata"]["generation"], 1,
        "status changes do not bump generation"
    );

    let mut replaced = with_status.clone();
    replaced["spec"]["nodeType"] = json!("CloudEphemeral");
    replaced["status"] = json!({"ready": 100});
    let (_, after) = api
        .put("/apis/deckhouse.io/v1/nodegroups/workers", &replaced)
        .await;
    assert_eq!(
        after["status"],
        json!({"ready": 2, "nodes": 3}),
        "the main endpoint ignores status"
    );
    assert_eq!(after["metadata"]["generation"], 2);
    let (_, relabeled) = api
        .patch(
            "/apis/deckhouse.io/v1/nodegroups/workers",
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(
        relabeled["metadata"]["generation"], 2,
        "metadata changes do not bump generation"
    );

    let mut status_put = relabeled.clone();
    status_put["status"] = json!({"ready": 9});
    let (code, put_status) = api
        .put(
            "/apis/deckhouse.io/v1/nodegroups/workers/status",
            &status_put,
        )
        .await;
    assert_eq!(
        (code, put_status["status"].clone()),
        (200, json!({"ready": 9}))
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_and_preconditions_guard_it() {
    let (_emulator, api) = start().await;
    let mut n = node("f1");
    n["metadata"]["finalizers"] = json!(["nodemgr.io/cleanup"]);
    let (_, created) = api.post("/api/v1/nodes", &n).await;
    let mut watch = api
        .watch(&format!(
            "/api/v1/nodes?watch=true&resourceVersion={}",
            rv(&created)
        ))
        .await;

    let (code, status) = api
        .delete(
            "/api/v1/nodes/f1",
            Some(&json!({"preconditions": {"uid": "someone-else"}})),
        )
        .await;
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
    let (code, status) = api
        .delete(
            "/api/v1/nodes/f1",
            Some(&json!({"preconditions": {"resourceVersion": "1"}})),
        )
        .await;
    assert_eq!(code, 409, "{status}");

    let uid = created["metadata"]["uid"].as_str().unwrap();
    let (code, marked) = api.delete("/api/v1/nodes/f1", Some(&json!({"preconditions": {"uid": uid}, "propagationPolicy": "Background", "gracePeriodSeconds": 0}))).await;
    assert_eq!(code, 200);
    assert!(marked["metadata"]["deletionTimestamp"].is_string());
    let (code, still) = api.get("/api/v1/nodes/f1").await;
    assert_eq!(code, 200);
    assert!(still["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        watch.next(Duration::from_secs(2)).await.unwrap()["type"],
        "MODIFIED"
    );

    let (code, _) = api
        .patch(
            "/api/v1/nodes/f1",
            "application/merge-patch+json",
            &json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(api.get("/api/v1/nodes/f1").await.0, 404);
    assert_eq!(
        watch.next(Duration::from_secs(2)).await.unwrap()["type"],
        "DELETED"
    );

    // A namespace deletion takes its objects along.
    api.post("/api/v1/namespaces", &json!({"metadata": {"name": "tmp"}}))
        .await;
    api.post(
        "/api/v1/namespaces/tmp/configmaps",
        &json!({"metadata": {"name": "c"}}),
    )
    .await;
    assert_eq!(api.delete("/api/v1/namespaces/tmp", None).await.0, 200);
    assert_eq!(api.get("/api/v1/namespaces/tmp/configmaps/c").await.0, 404);
    assert_eq!(api.get("/api/v1/namespaces/tmp").await.0, 404);
}

#[tokio::test]
async fn server_side_apply_tracks_managers_and_conflicts() {
    let (_emulator, api) = start().await;
    install_crd(&api).await;
    let apply = "application/apply-patch+yaml";
    let config = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "ng1", "labels": {"team": "a"}},
        "spec": {"nodeType": "Static", "disruptions": {"approvalMode": "Manual"}}});
    let (code, created) = api
        .patch(
            "/apis/deckhouse.io/v1/nodegroups/ng1?fieldManager=alice",
            apply,
            &config,
        )
        .await;
    assert_eq!(code, 201, "{created}");
    let managers = created["metadata"]["managedFields"].as_array().unwrap();
    assert_eq!(
        (
            managers[0]["manager"].as_str(),
            managers[0]["operation"].as_str()
        ),
        (Some("alice"), Some("Apply"))
    );
    assert!(managers[0]["fieldsV1"]["f:spec"]["f:disruptions"]["f:approvalMode"].is_object());

    let (code, status) = api.patch("/apis/deckhouse.io/v1/nodegroups/ng1?fieldManager=bob", apply,
        &json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "ng1"}, "spec": {"disruptions": {"approvalMode": "Automatic"}}})).await;
    assert_eq!((code, status["reason"].as_str()), (409, Some("Conflict")));
    assert_eq!(
        status["details"]["causes"][0]["field"],
        ".spec.disruptions.approvalMode"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("conflict with \"alice\"")
    );

    let (code, forced) = api.patch("/apis/deckhouse.io/v1/nodegroups/ng1?fieldManager=bob&force=true", apply,
        &json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "ng1"}, "spec": {"disruptions": {"approvalMode": "Automatic"}}})).await;
    assert_eq!(code, 200);
    assert_eq!(forced["spec"]["disruptions"]["approvalMode"], "Automatic");
    assert_eq!(forced["spec"]["nodeType"], "Static");

    // alice re-applies without the label: the label goes; approvalMode (now bob's) stays.
    let (code, reapplied) = api.patch("/apis/deckhouse.io/v1/nodegroups/ng1?fieldManager=alice", apply,
        &json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "ng1"}, "spec": {"nodeType": "Static"}})).await;
    assert_eq!(code, 200, "{reapplied}");
    assert!(
        reapplied["metadata"]
            .get("labels")
            .is_none_or(|l| l.get("team").is_none()),
        "{reapplied}"
    );
    assert_eq!(
        reapplied["spec"]["disruptions"]["approvalMode"],
        "Automatic"
    );

    // Apply to /status only touches status; a missing fieldManager is refused.
    let (code, st) = api.patch("/apis/deckhouse.io/v1/nodegroups/ng1/status?fieldManager=controller&force=true", apply,
        &json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "ng1"}, "status": {"ready": 1}, "spec": {"nodeType": "X"}})).await;
    assert_eq!(code, 200);
    assert_eq!(
        (
            st["status"]["ready"].as_i64(),
            st["spec"]["nodeType"].as_str()
        ),
        (Some(1), Some("Static"))
    );
    let (code, _) = api
        .patch("/apis/deckhouse.io/v1/nodegroups/ng1", apply, &config)
        .await;
    assert_eq!(code, 422);

    // A merge patch by another manager takes ownership of what it changed.
    let (_, updated) = api
        .patch(
            "/apis/deckhouse.io/v1/nodegroups/ng1?fieldManager=carol",
            "application/merge-patch+json",
            &json!({"spec": {"nodeType": "CloudStatic"}}),
        )
        .await;
    let carol = updated["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["manager"] == "carol")
        .unwrap();
    assert_eq!(carol["operation"], "Update");
    assert!(carol["fieldsV1"]["f:spec"]["f:nodeType"].is_object());
}

#[tokio::test]
async fn eviction_honours_disruption_budgets() {
    let (_emulator, api) = start().await;
    api.post(
        "/api/v1/namespaces/default/pods",
        &running_pod("web-1", "w1", json!({"app": "web"})),
    )
    .await;
    let (code, pdb) = api.post("/apis/policy/v1/namespaces/default/poddisruptionbudgets",
        &json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})).await;
    assert_eq!(code, 201, "{pdb}");
    let (_, pdb) = api
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
        .await;
    assert_eq!(
        (
            pdb["status"]["currentHealthy"].as_i64(),
            pdb["status"]["disruptionsAllowed"].as_i64()
        ),
        (Some(1), Some(0))
    );

    let eviction = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web-1", "namespace": "default"}});
    let (code, status) = api
        .post("/api/v1/namespaces/default/pods/web-1/eviction", &eviction)
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (429, Some("TooManyRequests")),
        "{status}"
    );
    assert_eq!(
        status["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(status["details"]["causes"][0]["reason"], "DisruptionBudget");
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/web-1").await.0,
        200
    );

    // A second healthy pod makes one disruption allowed.
    api.post(
        "/api/v1/namespaces/default/pods",
        &running_pod("web-2", "w2", json!({"app": "web"})),
    )
    .await;
    let (_, pdb) = api
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
        .await;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 1);
    let (code, status) = api
        .post("/api/v1/namespaces/default/pods/web-1/eviction", &eviction)
        .await;
    assert_eq!((code, status["status"].as_str()), (201, Some("Success")));
    assert_eq!(
        api.get("/api/v1/namespaces/default/pods/web-1").await.0,
        404
    );
    let (_, pdb) = api
        .get("/apis/policy/v1/namespaces/default/poddisruptionbudgets/web")
        .await;
    assert_eq!(pdb["status"]["disruptionsAllowed"], 0);

    // Pods no budget covers, and pending pods, are evicted freely; unknown pods are 404.
    api.post(
        "/api/v1/namespaces/default/pods",
        &running_pod("lonely", "w1", json!({"app": "other"})),
    )
    .await;
    assert_eq!(
        api.post(
            "/api/v1/namespaces/default/pods/lonely/eviction",
            &json!({"metadata": {"name": "lonely"}})
        )
        .await
        .0,
        201
    );
    assert_eq!(
        api.post(
            "/api/v1/namespaces/default/pods/ghost/eviction",
            &json!({"metadata": {"name": "ghost"}})
        )
        .await
        .0,
        404
    );
}

#[tokio::test]
async fn injected_faults_fail_the_next_matching_requests() {
    let (emulator, api) = start().await;
    api.post("/api/v1/nodes", &node("w1")).await;
    emulator.inject_fault(Fault::new(500).verb("get").resource("nodes").times(2));
    emulator.inject_fault(Fault::new(429).verb("patch").resource("nodes"));
    emulator.inject_fault(Fault::new(409).verb("update").resource("nodes/status"));
    assert_eq!(api.get("/api/v1/nodes/w1").await.0, 500);
    let (code, status) = api.get("/api/v1/nodes/w1").await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (500, Some("InternalError"))
    );
    assert_eq!(api.get("/api/v1/nodes/w1").await.0, 200);
    assert_eq!(
        api.get("/api/v1/nodes").await.0,
        200,
        "list is another verb"
    );
    let (code, status) = api
        .patch(
            "/api/v1/nodes/w1",
            "application/merge-patch+json",
            &json!({}),
        )
        .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (429, Some("TooManyRequests"))
    );
    let (_, current) = api.get("/api/v1/nodes/w1").await;
    assert_eq!(api.put("/api/v1/nodes/w1/status", &current).await.0, 409);
    assert_eq!(api.put("/api/v1/nodes/w1/status", &current).await.0, 200);
    assert_eq!(emulator.request_count("get", "nodes", Some(500)), 2);
    assert_eq!(emulator.request_count("get", "nodes", None), 4);
}

#[tokio::test]
async fn tables_use_printer_columns() {
    let (_emulator, api) = start().await;
    install_crd(&api).await;
    api.post("/apis/deckhouse.io/v1/nodegroups", &nodegroup("w"))
        .await;
    api.patch(
        "/apis/deckhouse.io/v1/nodegroups/w/status",
        "application/merge-patch+json",
        &json!({"status": {"ready": 3, "nodes": 4}}),
    )
    .await;
    let response = api
        .http
        .get(format!("{}/apis/deckhouse.io/v1/nodegroups", api.base))
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .send()
        .await
        .unwrap();
    let table: Value = response.json().await.unwrap();
    assert_eq!(table["kind"], "Table");
    let headers: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        headers,
        ["Name", "Type", "Ready", "Nodes", "UpToDate", "Age"]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(
        (
            cells[0].clone(),
            cells[1].clone(),
            cells[2].clone(),
            cells[3].clone()
        ),
        (json!("w"), json!("Static"), json!(3), json!(4))
    );
    assert!(
        cells[5].as_str().unwrap().ends_with('s'),
        "age as a duration: {cells}"
    );
}
