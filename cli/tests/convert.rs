//! Runs the built `nodemgr convert` on Deckhouse manifests of every served version: the
//! printed documents are the converted objects, kinds nodemgr does not convert pass through
//! with a note, and exit codes are `validate`'s (0 converted, 1 some not, 2 unreadable).

// Test helpers outside `#[test]` functions fail loudly on broken fixtures.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{Value, json};

fn nodemgr(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const OLD: &str = "\
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata: {name: front}
spec:
  nodeType: Hybrid
  docker: {maxConcurrentDownloads: 4}
  kubernetesVersion: \"1.32\"
---
apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata: {name: worker}
spec:
  nodeType: Cloud
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: worker}
    minPerZone: 1
    maxPerZone: 2
---
apiVersion: v1
kind: ConfigMap
metadata: {name: untouched}
data: {a: b}
";

#[test]
fn old_node_groups_become_v1_and_other_kinds_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "old.yaml", OLD);
    let out = nodemgr(&[
        "convert",
        file.to_str().unwrap(),
        "--to-version",
        "deckhouse.io/v1",
        "--output",
        "json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(":2: skipped: ConfigMap"), "{stderr}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    assert_eq!(
        items[0],
        json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": "front"},
            "spec": {"nodeType": "CloudStatic", "cri": {"docker": {"maxConcurrentDownloads": 4}}}})
    );
    assert_eq!(items[1]["spec"]["nodeType"], "CloudEphemeral");
    assert_eq!(items[2]["data"], json!({"a": "b"}));
}

#[test]
fn the_provider_configuration_makes_hybrid_groups_cloud_permanent() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "old.yaml", OLD);
    let provider = write(
        &dir,
        "provider.yaml",
        "apiVersion: deckhouse.io/v1\nkind: OpenStackClusterConfiguration\nnodeGroups:\n- name: front\n",
    );
    let out = nodemgr(&[
        "convert",
        file.to_str().unwrap(),
        "--to-version",
        "v1",
        "--provider-cluster-configuration",
        provider.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
    assert_eq!(docs[0]["spec"]["nodeType"], "CloudPermanent");
    assert_eq!(docs[0]["apiVersion"], "deckhouse.io/v1");
}

#[test]
fn v1_goes_down_and_comes_back_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: w\nspec:\n  cri:\n    docker:\n      manage: false\n  nodeType: CloudStatic\n";
    let file = write(&dir, "v1.yaml", v1);
    let out = nodemgr(&[
        "convert",
        file.to_str().unwrap(),
        "--to-version",
        "deckhouse.io/v1alpha1",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let down = String::from_utf8(out.stdout).unwrap();
    let value: Value = serde_saphyr::from_str(&down).unwrap();
    assert_eq!(
        value["spec"],
        json!({"nodeType": "Hybrid", "docker": {"manage": false}})
    );
    let back_file = write(&dir, "down.yaml", &down);
    let out = nodemgr(&[
        "convert",
        back_file.to_str().unwrap(),
        "--to-version",
        "deckhouse.io/v1",
    ]);
    let back: Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    let original: Value = serde_saphyr::from_str(v1).unwrap();
    assert_eq!(back, original);
}

#[test]
fn failures_exit_1_and_unreadable_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        &dir,
        "bad.yaml",
        "apiVersion: deckhouse.io/v1alpha2\nkind: SSHCredentials\nmetadata: {name: c}\nspec: {user: u, sudoPasswordEncoded: \"not base64!\"}\n---\napiVersion: deckhouse.io/v1alpha2\nkind: SSHCredentials\nmetadata: {name: ok}\nspec: {user: u, sudoPasswordEncoded: Zm9vYmFy}\n",
    );
    let out = nodemgr(&[
        "convert",
        bad.to_str().unwrap(),
        "--to-version",
        "deckhouse.io/v1alpha1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(":0: spec.sudoPasswordEncoded: is not base64"),
        "{stderr}"
    );
    let printed: Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["spec"]["sudoPassword"], "foobar");

    let out = nodemgr(&[
        "convert",
        bad.to_str().unwrap(),
        "--to-version",
        "deckhouse.io/v7",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("served versions: deckhouse.io/v1alpha1, deckhouse.io/v1alpha2"),
        "{stderr}"
    );

    let missing = dir.path().join("missing.yaml");
    let out = nodemgr(&["convert", missing.to_str().unwrap(), "--to-version", "v1"]);
    assert_eq!(out.status.code(), Some(2));
    let not_yaml = write(&dir, "broken.yaml", "a: [");
    let out = nodemgr(&["convert", not_yaml.to_str().unwrap(), "--to-version", "v1"]);
    assert_eq!(out.status.code(), Some(2));
    let out = nodemgr(&[
        "convert",
        bad.to_str().unwrap(),
        "--to-version",
        "v1alpha1",
        "--provider-cluster-configuration",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}
