//! The emulator calls webhooks as kube-apiserver does, checked with real clients: kubectl
//! applies custom resources while a Python HTTPS webhook server (`tests/python/
//! webhook_server.py`, behind a throw-away CA from `openssl`) validates, mutates and converts
//! them. Denials reach kubectl's stderr worded as kube-apiserver words them, warnings become
//! `Warning:` lines, failure policies and timeouts behave as upstream, objects are stored at
//! the storage version and converted on read, list and watch.
//!
//! kubectl comes from `NODEMGR_KUBECTL` or `PATH` (`scripts/install.d/30-kubectl.sh`); these
//! tests FAIL when it is missing, unless `NODEMGR_SKIP_KUBECTL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

mod common;

use std::time::Duration;

use common::Api;
use common::real_clients::{Kubectl, WebhookServer};
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

/// Widgets: v1 (storage, `spec.colour`) and v2 (`spec.color`), converted by the webhook server
/// reached through the service `webhooks/converter:443`.
fn widget_crd(ca_bundle: &str) -> Value {
    let spec = |colour_field: &str| {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                colour_field: {"type": "string", "enum": ["red", "green", "blue", "invalid"]},
                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "mode": {"type": "string", "default": "Auto"}}}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.io"},
        "spec": {"group": "example.io", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"namespace": "webhooks", "name": "converter", "path": "/convert"},
                    "caBundle": ca_bundle}}},
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": spec("colour")}},
                {"name": "v2", "served": true, "storage": false, "schema": {"openAPIV3Schema": spec("color")}}]}})
}

fn validating(server: &WebhookServer, path: &str, extra: Value) -> Value {
    let mut webhook = json!({"name": "widgets.example.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"url": server.url(path), "caBundle": server.ca_bundle},
        "rules": [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": ["example.io"], "apiVersions": ["v1"], "resources": ["widgets"]}]});
    webhook
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "widgets"}, "webhooks": [webhook]})
}

async fn setup() -> Option<(Emulator, Kubectl, WebhookServer)> {
    let emulator = Emulator::start().await.unwrap();
    let kubectl = Kubectl::new(emulator.kubeconfig_path())?;
    let server = WebhookServer::start().await;
    emulator.route_service("webhooks", "converter", 443, &server.url(""));
    emulator.seed(widget_crd(&server.ca_bundle)).unwrap();
    Some((emulator, kubectl, server))
}

fn widget_v2(name: &str, labels: Value, color: &str) -> String {
    json!({"apiVersion": "example.io/v2", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"color": color}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validating_webhook_denies_through_kubectl_with_its_message_and_warns() {
    let Some((emulator, kubectl, server)) = setup().await else {
        return;
    };
    emulator
        .seed(validating(&server, "/validate", json!({})))
        .unwrap();
    let denied = kubectl.manifest(
        "denied.json",
        &widget_v2("w1", json!({"deny": "true"}), "red"),
    );
    let out = kubectl.fail(&["apply", "-f", &denied]).await;
    assert!(
        out.stderr.contains(r#"admission webhook "widgets.example.io" denied the request: Widget w1 is labelled deny=true"#),
        "{}",
        out.stderr
    );
    assert!(
        emulator
            .get("example.io/v1", "Widget", "default", "w1")
            .is_none()
    );

    let warned = kubectl.manifest(
        "warned.json",
        &widget_v2("w2", json!({"warn": "true"}), "red"),
    );
    let out = kubectl.run(&["apply", "-f", &warned]).await;
    assert!(
        out.stderr.contains("Warning: w2 is labelled warn=true"),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("widget.example.io/w2 created"),
        "{}",
        out.stdout
    );

    // The review: sent at the version the rule names (v1, matchPolicy Equivalent), with the
    // request's own version as requestKind, and the object converted by the other webhook.
    let reviews = server.reviews().await;
    let create = reviews
        .iter()
        .find(|r| r["name"] == "w2" && r["operation"] == "CREATE")
        .expect("a CREATE review of w2");
    assert_eq!(
        create["kind"],
        json!({"group": "example.io", "version": "v1", "kind": "Widget"})
    );
    assert_eq!(create["requestKind"]["version"], "v2");
    assert_eq!(create["resource"]["resource"], "widgets");
    assert_eq!(create["namespace"], "default");
    assert_eq!(create["dryRun"], false);
    assert_eq!(create["object"]["apiVersion"], "example.io/v1");
    assert_eq!(create["object"]["spec"]["colour"], "red");
    assert_eq!(
        create["object"]["spec"]["size"], 3,
        "defaults are applied before validating admission"
    );
    assert!(create["oldObject"].is_null());
    assert!(create["uid"].as_str().is_some_and(|u| !u.is_empty()));
    assert_eq!(create["userInfo"]["username"], "system:anonymous");

    // An update that starts matching the deny rule is refused too; a delete is reviewed.
    let out = kubectl.fail(&["label", "widget", "w2", "deny=true"]).await;
    assert!(
        out.stderr.contains(r#"Error from server: admission webhook "widgets.example.io" denied the request: Widget w2 is labelled deny=true"#),
        "{}",
        out.stderr
    );
    let labelled = emulator
        .get("example.io/v1", "Widget", "default", "w2")
        .unwrap();
    assert_eq!(
        labelled["metadata"]["labels"].get("deny"),
        None,
        "the UPDATE must have been refused"
    );
    kubectl.run(&["delete", "widget", "w2"]).await;
    let reviews = server.reviews().await;
    let delete = reviews
        .iter()
        .find(|r| r["name"] == "w2" && r["operation"] == "DELETE")
        .expect("a DELETE review of w2");
    assert!(delete["object"].is_null());
    assert_eq!(delete["oldObject"]["spec"]["colour"], "red");
    assert_eq!(delete["options"]["kind"], "DeleteOptions");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policy_timeouts_and_dry_run_follow_kube_apiserver() {
    let Some((emulator, kubectl, server)) = setup().await else {
        return;
    };
    let api = Api::new(emulator.url());
    let widget = json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"colour": "red"}});
    // Nothing listens on port 9 of 127.0.0.1: the call fails.
    let unreachable = |policy: &str| {
        let mut v = validating(&server, "/validate", json!({"failurePolicy": policy}));
        v["webhooks"][0]["clientConfig"]["url"] = json!("https://127.0.0.1:9/validate");
        v
    };
    emulator.seed(unreachable("Fail")).unwrap();
    let (code, status) = api
        .post("/apis/example.io/v1/namespaces/default/widgets", &widget)
        .await;
    assert_eq!(code, 500, "{status}");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.starts_with(r#"Internal error occurred: failed calling webhook "widgets.example.io": failed to call webhook: "#),
        "{message}"
    );
    emulator.update(unreachable("Ignore")).unwrap();
    let (code, status) = api
        .post("/apis/example.io/v1/namespaces/default/widgets", &widget)
        .await;
    assert_eq!(code, 201, "{status}");

    // A webhook slower than its timeoutSeconds fails the request (policy Fail).
    let slow = validating(&server, "/slow", json!({"timeoutSeconds": 1}));
    emulator.update(slow).unwrap();
    let started = std::time::Instant::now();
    let (code, status) = api
        .post(
            "/apis/example.io/v1/namespaces/default/widgets",
            &json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w3"}}),
        )
        .await;
    assert_eq!(code, 500, "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the 1 s timeout must cut the 5 s webhook short"
    );

    // A webhook with side effects refuses dry-run requests.
    emulator
        .update(validating(
            &server,
            "/validate",
            json!({"sideEffects": "Unknown"}),
        ))
        .unwrap();
    let manifest = kubectl.manifest("w4.json", &widget_v2("w4", json!({}), "blue"));
    let out = kubectl
        .fail(&["apply", "--dry-run=server", "-f", &manifest])
        .await;
    assert!(
        out.stderr
            .contains(r#"admission webhook "widgets.example.io" does not support dry run"#),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutating_webhook_patches_the_object_before_it_is_stored() {
    let Some((emulator, _kubectl, server)) = setup().await else {
        return;
    };
    let mut mutating = validating(&server, "/mutate", json!({"name": "label.example.io"}));
    mutating["kind"] = json!("MutatingWebhookConfiguration");
    emulator.seed(mutating).unwrap();
    let api = Api::new(emulator.url());
    let (code, created) = api
        .post("/apis/example.io/v2/namespaces/default/widgets", &json!({"apiVersion": "example.io/v2", "kind": "Widget", "metadata": {"name": "m"}, "spec": {"color": "green"}}))
        .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["metadata"]["labels"]["mutated"], "true");
    assert_eq!(created["apiVersion"], "example.io/v2");
    assert_eq!(created["spec"]["color"], "green");

    // A generated name is chosen once: the validating webhook sees the name that is stored.
    emulator
        .seed(validating(&server, "/validate", json!({})))
        .unwrap();
    let (code, generated) = api
        .post("/apis/example.io/v1/namespaces/default/widgets", &json!({"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"generateName": "gen-"}}))
        .await;
    assert_eq!(code, 201, "{generated}");
    let name = generated["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("gen-") && name.len() > 4, "{name}");
    let reviews = server.reviews().await;
    assert!(
        reviews.iter().any(|r| r["operation"] == "CREATE"
            && r["name"] == name
            && r["object"]["metadata"]["name"] == name),
        "no validating review named {name}: {reviews:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_webhook_converts_on_write_read_list_and_watch() {
    let Some((emulator, kubectl, _server)) = setup().await else {
        return;
    };
    let api = Api::new(emulator.url());
    let mut watch_v2 = api
        .watch("/apis/example.io/v2/namespaces/default/widgets?watch=true")
        .await;
    let manifest = kubectl.manifest("c.json", &widget_v2("c", json!({}), "blue"));
    kubectl.run(&["apply", "-f", &manifest]).await;

    // Stored at the storage version, converted by the webhook.
    let stored = emulator
        .get("example.io/v1", "Widget", "default", "c")
        .unwrap();
    assert_eq!(stored["apiVersion"], "example.io/v1");
    assert_eq!(stored["spec"]["colour"], "blue");
    assert!(stored["spec"].get("color").is_none());

    let v1 = kubectl
        .run(&["get", "widgets.v1.example.io", "c", "-o", "json"])
        .await;
    let v1: Value = serde_json::from_str(&v1.stdout).unwrap();
    assert_eq!(
        (v1["apiVersion"].as_str(), v1["spec"]["colour"].as_str()),
        (Some("example.io/v1"), Some("blue"))
    );
    let v2 = kubectl
        .run(&["get", "widgets.v2.example.io", "-o", "json"])
        .await;
    let v2: Value = serde_json::from_str(&v2.stdout).unwrap();
    assert_eq!(v2["items"][0]["apiVersion"], "example.io/v2");
    assert_eq!(v2["items"][0]["spec"]["color"], "blue");
    assert_eq!(v2["items"][0]["spec"]["size"], 3);

    let event = watch_v2
        .next(Duration::from_secs(30))
        .await
        .expect("a watch event");
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["apiVersion"], "example.io/v2");
    assert_eq!(event["object"]["spec"]["color"], "blue");

    // A merge patch at v2 is applied to the v2 form and stored converted back.
    kubectl
        .run(&[
            "patch",
            "widgets.v2.example.io",
            "c",
            "--type=merge",
            "-p",
            r#"{"spec":{"color":"green"}}"#,
        ])
        .await;
    let stored = emulator
        .get("example.io/v1", "Widget", "default", "c")
        .unwrap();
    assert_eq!(stored["spec"]["colour"], "green");

    // The webhook's refusal reaches the client as kube-apiserver words it.
    let bad = kubectl.manifest("bad.json", &widget_v2("bad", json!({}), "invalid"));
    let out = kubectl.fail(&["apply", "-f", &bad]).await;
    assert!(
        out.stderr.contains("conversion webhook for example.io/v1, Kind=Widget failed: conversion webhook failed: cannot convert the colour 'invalid'"),
        "{}",
        out.stderr
    );
}
