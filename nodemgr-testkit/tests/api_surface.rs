//! The parts of kube-apiserver's surface clients trip over: boolean query flags parsed as
//! apimachinery parses them (`?watch=True` from the Python client), the health endpoints
//! (checked with `kubectl get --raw`), protobuf bodies of `kubectl create namespace|configmap|secret|
//! serviceaccount` decoded, other protobuf refused with a 415 that says to send JSON, and a
//! protobuf-only `Accept` answered with 406, and Events served
//! through `events.k8s.io/v1` and core `v1` from one store.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

mod common;

use std::time::Duration;

use common::Api;
use common::real_clients::Kubectl;
use nodemgr_testkit::Emulator;
use serde_json::json;

#[tokio::test]
async fn watch_flags_are_parsed_as_kube_apiserver_parses_them() {
    let emulator = Emulator::start().await.unwrap();
    let api = Api::new(emulator.url());
    for spelling in ["True", "TRUE", "1", "yes", ""] {
        let mut watch = api.watch(&format!("/api/v1/nodes?watch={spelling}")).await;
        emulator
            .seed(common::node(&format!("n-{}", spelling.len())))
            .unwrap();
        let event = watch
            .next(Duration::from_secs(30))
            .await
            .expect("a watch event");
        assert_eq!(
            event["type"], "ADDED",
            "?watch={spelling} must start a watch"
        );
        emulator
            .delete("v1", "Node", "", &format!("n-{}", spelling.len()))
            .unwrap();
    }
    for spelling in ["false", "False", "0"] {
        let (code, body) = api.get(&format!("/api/v1/nodes?watch={spelling}")).await;
        assert_eq!(
            (code, body["kind"].as_str()),
            (200, Some("NodeList")),
            "?watch={spelling} is a list"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_answer_kubectl() {
    let emulator = Emulator::start().await.unwrap();
    let Some(kubectl) = Kubectl::new(emulator.kubeconfig_path()) else {
        return;
    };
    let verbose = kubectl
        .run(&["get", "--raw", "/readyz?verbose"])
        .await
        .stdout;
    assert!(
        verbose.contains("[+]ping ok") && verbose.contains("readyz check passed"),
        "{verbose}"
    );
    assert_eq!(kubectl.run(&["get", "--raw", "/livez"]).await.stdout, "ok");
    assert_eq!(
        kubectl.run(&["get", "--raw", "/healthz"]).await.stdout,
        "ok"
    );
    assert_eq!(
        kubectl.run(&["get", "--raw", "/readyz/ping"]).await.stdout,
        "ok"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_protobuf_is_decoded_for_common_kinds_and_refused_with_advice_otherwise() {
    let emulator = Emulator::start().await.unwrap();
    let Some(kubectl) = Kubectl::new(emulator.kubeconfig_path()) else {
        return;
    };
    // kubectl's typed generators send protobuf: the common kinds are decoded…
    kubectl.run(&["create", "namespace", "typed"]).await;
    assert!(emulator.get("v1", "Namespace", "", "typed").is_some());
    kubectl
        .run(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
            "--from-literal=size=2",
        ])
        .await;
    let settings = emulator
        .get("v1", "ConfigMap", "default", "settings")
        .unwrap();
    assert_eq!(settings["data"], json!({"mode": "fast", "size": "2"}));
    kubectl
        .run(&[
            "create",
            "secret",
            "generic",
            "token",
            "--from-literal=key=s3cret",
        ])
        .await;
    let secret = emulator.get("v1", "Secret", "default", "token").unwrap();
    assert_eq!(
        (secret["data"]["key"].as_str(), secret["type"].as_str()),
        (Some("czNjcmV0"), Some("Opaque"))
    );
    kubectl.run(&["create", "serviceaccount", "robot"]).await;
    assert!(
        emulator
            .get("v1", "ServiceAccount", "default", "robot")
            .is_some()
    );
    // …the others are refused with a 415 that says to send JSON, and JSON works.
    let out = kubectl
        .fail(&["create", "deployment", "web", "--image=nginx"])
        .await;
    assert!(
        out.stderr.contains("send the object as JSON"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("Deployment (apps/v1) is not among the kinds decoded"),
        "{}",
        out.stderr
    );
    let manifest = kubectl.manifest(
        "web.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: nginx}]}\n",
    );
    kubectl.run(&["create", "-f", &manifest]).await;
    assert!(
        emulator
            .get("apps/v1", "Deployment", "default", "web")
            .is_some()
    );

    let api = Api::new(emulator.url());
    let response = api
        .http
        .get(format!("{}/api/v1/namespaces", emulator.url()))
        .header("accept", "application/vnd.kubernetes.protobuf")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 406);
    let status: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status["reason"], "NotAcceptable");
}

#[tokio::test]
async fn events_are_one_store_behind_both_apis() {
    let emulator = Emulator::start().await.unwrap();
    let api = Api::new(emulator.url());
    let mut core_watch = api
        .watch("/api/v1/namespaces/default/events?watch=true")
        .await;
    let (code, created) = api
        .post(
            "/apis/events.k8s.io/v1/namespaces/default/events",
            &json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "drain.1"},
                "regarding": {"kind": "Node", "name": "w1"}, "note": "drained w1", "reason": "Drained", "type": "Normal",
                "action": "Drain", "reportingController": "nodemgr", "reportingInstance": "nm-0",
                "eventTime": "2025-01-01T00:00:00.000000Z"}),
        )
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["regarding"]["name"], "w1");

    let (_, core) = api.get("/api/v1/namespaces/default/events/drain.1").await;
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["involvedObject"]["name"], "w1");
    assert_eq!(core["message"], "drained w1");
    assert_eq!(core["reportingComponent"], "nodemgr");
    let event = core_watch
        .next(Duration::from_secs(30))
        .await
        .expect("the core watch sees it");
    assert_eq!(event["object"]["involvedObject"]["name"], "w1");

    // A core Event reads back through events.k8s.io, and field selectors use each API's names.
    let (code, _) = api
        .post(
            "/api/v1/namespaces/default/events",
            &json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "old.1"},
                "involvedObject": {"kind": "Pod", "name": "p1"}, "message": "pulled", "reason": "Pulled", "count": 3,
                "source": {"component": "kubelet"}}),
        )
        .await;
    assert_eq!(code, 201);
    let (_, list) = api
        .get("/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3Dp1")
        .await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{list}");
    assert_eq!(items[0]["note"], "pulled");
    assert_eq!(items[0]["deprecatedCount"], 3);
    assert_eq!(items[0]["deprecatedSource"]["component"], "kubelet");
    let (_, list) = api
        .get("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dw1")
        .await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    let both = emulator.list("events.k8s.io/v1", "Event", Some("default"));
    assert_eq!(both.len(), 2);
    assert!(both.iter().all(|e| e["apiVersion"] == "events.k8s.io/v1"));
}
