//! `nodemgr explain` end to end: every row of the seed table «Влияние параметров NodeGroup на
//! обновление и перезапуск узлов» (docs/deckhouse.md §10) reproduced through the built binary, the exact JSON
//! shape, and the exit codes for invalid and unreadable input.

#![allow(clippy::unwrap_used)] // test helpers: a failed setup step should panic

use std::path::PathBuf;
use std::process::{Command, Output};

const BASE: &str = r#"apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: worker
spec:
  nodeType: CloudEphemeral
  kubernetesVersion: "1.32"
  static:
    internalNetworkCIDRs: [10.0.0.0/24]
  chaos:
    mode: Disabled
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: worker}
    minPerZone: 1
    maxPerZone: 3
    maxSurgePerZone: 1
  cri:
    type: Containerd
    containerd: {maxConcurrentDownloads: 3}
  disruptions:
    approvalMode: Automatic
  kubelet:
    maxPods: 110
    rootDir: /var/lib/kubelet
  nodeTemplate:
    labels: {team: a}
  update:
    maxConcurrent: 1
"#;

fn write(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("explain-{name}.yaml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn explain(old: &str, new: &str, name: &str) -> Output {
    let old = write(&format!("{name}-old"), old);
    let new = write(&format!("{name}-new"), new);
    Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("explain")
        .arg(&old)
        .arg(&new)
        .args(["--output", "json"])
        .output()
        .unwrap()
}

/// (row name, text replaced in BASE, replacement, disruption, reprovision, kubelet restart)
const ROWS: &[(&str, &str, &str, bool, bool, bool)] = &[
    (
        "chaos",
        "mode: Disabled",
        "mode: DrainAndDelete",
        false,
        false,
        false,
    ),
    (
        "cloudInstances.classReference",
        "name: worker}",
        "name: worker-v2}",
        false,
        true,
        false,
    ),
    (
        "cloudInstances.maxSurgePerZone",
        "maxSurgePerZone: 1",
        "maxSurgePerZone: 2",
        false,
        false,
        false,
    ),
    (
        "cri.containerd.maxConcurrentDownloads",
        "maxConcurrentDownloads: 3",
        "maxConcurrentDownloads: 5",
        false,
        false,
        true,
    ),
    (
        "disruptions",
        "approvalMode: Automatic",
        "approvalMode: Manual",
        false,
        false,
        false,
    ),
    (
        "kubelet.maxPods",
        "maxPods: 110",
        "maxPods: 200",
        false,
        false,
        true,
    ),
    (
        "kubelet.rootDir",
        "rootDir: /var/lib/kubelet",
        "rootDir: /data/kubelet",
        false,
        false,
        true,
    ),
    (
        "kubernetesVersion",
        "kubernetesVersion: \"1.32\"",
        "kubernetesVersion: \"1.33\"",
        false,
        false,
        true,
    ),
    (
        "nodeTemplate",
        "labels: {team: a}",
        "labels: {team: b}",
        false,
        false,
        false,
    ),
    ("static", "10.0.0.0/24", "10.0.1.0/24", false, false, true),
    (
        "update.maxConcurrent",
        "maxConcurrent: 1",
        "maxConcurrent: 2",
        false,
        false,
        false,
    ),
];

fn json(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "explain failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn every_row_of_the_seed_table() {
    for (path, from, to, disruption, reprovision, restart) in ROWS {
        assert!(BASE.contains(from), "{path}: BASE lacks {from}");
        let new = BASE.replace(from, to);
        let value = json(&explain(BASE, &new, path));
        let expected = serde_json::json!({
            "changes": [{"path": path, "disruption": disruption, "reprovision": reprovision, "kubeletRestart": restart}],
            "disruption": disruption, "reprovision": reprovision, "kubeletRestart": restart,
        });
        assert_eq!(value, expected, "row {path}");
    }
}

#[test]
fn cri_type_is_disruptive_unless_the_new_value_is_not_managed() {
    let not_managed = BASE.replace(
        "type: Containerd\n    containerd: {maxConcurrentDownloads: 3}",
        "type: NotManaged",
    );
    let v2 = BASE.replace(
        "type: Containerd\n    containerd: {maxConcurrentDownloads: 3}",
        "type: ContainerdV2",
    );
    let to_not_managed = json(&explain(BASE, &not_managed, "cri-nm"));
    assert_eq!(to_not_managed["disruption"], false, "{to_not_managed}");
    let from_not_managed = json(&explain(&not_managed, BASE, "cri-back"));
    assert_eq!(from_not_managed["disruption"], true, "{from_not_managed}");
    let to_v2 = json(&explain(BASE, &v2, "cri-v2"));
    assert_eq!(to_v2["disruption"], true, "{to_v2}");
}

#[test]
fn no_change_and_text_output() {
    let same = json(&explain(BASE, BASE, "same"));
    assert_eq!(
        same,
        serde_json::json!({"changes": [], "disruption": false, "reprovision": false, "kubeletRestart": false})
    );
    let old = write("text-old", BASE);
    let new = write("text-new", &BASE.replace("maxPods: 110", "maxPods: 200"));
    let output = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("explain")
        .arg(&old)
        .arg(&new)
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("kubelet.maxPods"), "{text}");
    assert!(text.contains("KUBELET RESTART"), "{text}");
}

#[test]
fn invalid_input_exits_1_with_validation_errors() {
    let broken = BASE.replace("minPerZone: 1", "minPerZone: 9");
    let output = explain(BASE, &broken, "invalid");
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("spec.cloudInstances.minPerZone"),
        "{stdout}"
    );
}

#[test]
fn unreadable_input_exits_2() {
    let missing = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("does-not-exist.yaml");
    let ok = write("ok", BASE);
    let output = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("explain")
        .arg(&missing)
        .arg(&ok)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot read"));
    let garbage = write("garbage", "a: [");
    let output = Command::new(env!("CARGO_BIN_EXE_nodemgr"))
        .arg("explain")
        .arg(&garbage)
        .arg(&ok)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}
