//! The manifests in `deploy/` are what a cluster gets: the CRDs there are exactly what
//! `nodemgr crds` prints, and every other document is a well-formed object of its kind — it
//! survives a round trip through the Kubernetes API types (`k8s-openapi`) without losing a
//! field, so a misspelled or misplaced field fails here rather than in a cluster. (The
//! `kubectl apply --dry-run=client -f deploy/` acceptance is in nodemgr-testkit's tests.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn manifests() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 6, "deploy/ lost its manifests: {files:?}");
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let values: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", file.display()));
        for (i, value) in values.into_iter().enumerate() {
            if value.is_null() {
                continue;
            }
            docs.push((format!("{}#{i}", file.display()), value));
        }
    }
    docs
}

/// Parses `value` as `T` and serializes it back; the two must be equal.
fn round_trips<T: DeserializeOwned + Serialize>(name: &str, value: &Value) {
    let typed: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|e| panic!("{name}: not a valid {}: {e}", std::any::type_name::<T>()));
    let back = serde_json::to_value(&typed).unwrap();
    if &back != value {
        panic!(
            "{name}: fields lost or changed by the API types (misspelled or misplaced?)\n\
             written: {value:#}\nas the API reads it: {back:#}"
        );
    }
}

#[test]
fn every_deploy_document_is_a_well_formed_kubernetes_object() {
    let mut kinds = Vec::new();
    for (name, doc) in manifests() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        match kind.as_str() {
            "Namespace" => round_trips::<Namespace>(&name, &doc),
            "ServiceAccount" => round_trips::<ServiceAccount>(&name, &doc),
            "ClusterRole" => round_trips::<ClusterRole>(&name, &doc),
            "ClusterRoleBinding" => round_trips::<ClusterRoleBinding>(&name, &doc),
            "Role" => round_trips::<Role>(&name, &doc),
            "RoleBinding" => round_trips::<RoleBinding>(&name, &doc),
            "Deployment" => round_trips::<Deployment>(&name, &doc),
            "DaemonSet" => round_trips::<DaemonSet>(&name, &doc),
            "Service" => round_trips::<Service>(&name, &doc),
            "CustomResourceDefinition" => round_trips::<CustomResourceDefinition>(&name, &doc),
            other => panic!("{name}: kind {other:?} has no round-trip check here; add one"),
        }
        kinds.push(kind);
    }
    for needed in [
        "Deployment",
        "DaemonSet",
        "ClusterRole",
        "CustomResourceDefinition",
    ] {
        assert!(kinds.iter().any(|k| k == needed), "deploy/ has no {needed}");
    }
}

#[test]
fn deploy_crds_are_what_nodemgr_crds_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .args(["crds"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let committed = std::fs::read_to_string(deploy_dir().join("01-crds.yaml")).unwrap();
    assert!(
        committed == String::from_utf8(out.stdout).unwrap(),
        "deploy/01-crds.yaml is stale: run `cargo run -p nodemgr-bins --bin nodemgr -- crds > deploy/01-crds.yaml`"
    );
}

#[test]
fn the_node_manager_deployment_runs_two_replicas_under_leader_election() {
    let docs = manifests();
    let (_, deployment) = docs
        .iter()
        .find(|(_, d)| d["kind"] == "Deployment" && d["metadata"]["name"] == "node-manager")
        .expect("a node-manager Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    assert!(
        args.iter().any(|a| a
            .as_str()
            .is_some_and(|a| a.starts_with("--leader-election-namespace"))),
        "{args:?}"
    );
}

/// The container `name` of the `kind` object `name` in deploy/ runs `binary` and passes only
/// flags its `--help` lists. Returns the container.
fn container_flags_exist(kind: &str, name: &str, binary: &str) -> Value {
    let help = Command::new(binary).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let docs = manifests();
    let (_, object) = docs
        .iter()
        .find(|(_, d)| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/"));
    let container = object["spec"]["template"]["spec"]["containers"][0].clone();
    assert_eq!(container["command"][0], format!("/usr/local/bin/{name}"));
    for arg in container["args"].as_array().unwrap() {
        let flag = arg.as_str().unwrap().split('=').next().unwrap();
        assert!(help.contains(flag), "{name} has no flag {flag}:\n{help}");
    }
    container
}

#[test]
fn the_node_manager_deployment_passes_only_flags_the_binary_has() {
    let container = container_flags_exist(
        "Deployment",
        "node-manager",
        env!("CARGO_BIN_EXE_node-manager"),
    );
    // The metrics port the probes use is the one the flags listen on.
    let port = container["ports"][0]["containerPort"].as_i64().unwrap();
    assert!(
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().ends_with(&format!(":{port}")))
    );
}

#[test]
fn the_fencing_agent_daemonset_passes_only_flags_the_binary_has() {
    let container = container_flags_exist(
        "DaemonSet",
        "fencing-agent",
        env!("CARGO_BIN_EXE_fencing-agent"),
    );
    assert_eq!(
        container["env"][0]["name"], "NODE_NAME",
        "the node name comes from the env"
    );
}

#[test]
fn the_early_oom_daemonset_passes_only_flags_the_binary_has() {
    let container =
        container_flags_exist("DaemonSet", "early-oom", env!("CARGO_BIN_EXE_early-oom"));
    assert_eq!(
        container["env"][0]["name"], "NODE_NAME",
        "the node name comes from the env"
    );
}
