//! Acceptance of the emulator by a client nobody here wrote: the real `kubectl` (1.27+) applies
//! CRDs and NodeGroups, gets them by short name with printer columns, annotates and labels
//! nodes, watches briefly, and drains a node whose pod a PodDisruptionBudget protects (seeing
//! the 429, retrying, and finishing once the budget is released).
//!
//! kubectl comes from `NODEMGR_KUBECTL` or `PATH` (`scripts/install.d/30-kubectl.sh` installs
//! it). These tests FAIL when it is missing, unless `NODEMGR_SKIP_KUBECTL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

mod common;

use common::kubectl_binary;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nodemgr_testkit::Emulator;
use serde_json::json;

const TESTDATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata");

/// Runs kubectl against one emulator, with its own discovery cache.
struct Kubectl {
    binary: String,
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    fn new(binary: String, emulator: &Emulator) -> Self {
        Kubectl {
            binary,
            kubeconfig: emulator.kubeconfig_path().to_path_buf(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.binary);
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .arg(format!("--cache-dir={}", self.cache.path().display()))
            .arg("--request-timeout=30s")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs to completion; panics with kubectl's output when it fails.
    async fn run(&self, args: &[&str]) -> String {
        let output = self.command(args).output().await.expect("kubectl starts");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "kubectl {args:?} failed:\n{stdout}\n{stderr}"
        );
        stdout
    }
}

async fn setup() -> Option<(Emulator, Kubectl)> {
    let binary = kubectl_binary()?;
    let emulator = Emulator::start().await.unwrap();
    let kubectl = Kubectl::new(binary, &emulator);
    Some((emulator, kubectl))
}

#[tokio::test]
async fn kubectl_applies_crds_and_gets_nodegroups_by_short_name() {
    let Some((emulator, kubectl)) = setup().await else {
        return;
    };
    let out = kubectl
        .run(&["apply", "-f", &format!("{TESTDATA}/nodegroup-crd.yaml")])
        .await;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/nodegroups.deckhouse.io created"
        ),
        "{out}"
    );
    let out = kubectl
        .run(&["apply", "-f", &format!("{TESTDATA}/nodegroups.yaml")])
        .await;
    assert!(
        out.contains("nodegroup.deckhouse.io/worker created")
            && out.contains("nodegroup.deckhouse.io/frontend created"),
        "{out}"
    );
    let out = kubectl
        .run(&["apply", "-f", &format!("{TESTDATA}/nodegroups.yaml")])
        .await;
    assert!(
        out.contains("nodegroup.deckhouse.io/worker unchanged"),
        "{out}"
    );

    // Status written by a controller shows in the printer columns.
    let mut worker = emulator
        .get("deckhouse.io/v1", "NodeGroup", "", "worker")
        .unwrap();
    worker["status"] = json!({"ready": 2, "nodes": 3, "upToDate": 1});
    emulator.update(worker).unwrap();
    let table = kubectl.run(&["get", "ng"]).await;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "TYPE", "READY", "NODES", "UPTODATE", "AGE"],
        "{table}"
    );
    let row = lines
        .iter()
        .find(|l| l.first() == Some(&"worker"))
        .expect("worker row");
    assert_eq!(row[1..5], ["Static", "2", "3", "1"], "{table}");

    assert_eq!(
        kubectl
            .run(&["get", "nodegroups.deckhouse.io", "-o", "name"])
            .await
            .lines()
            .count(),
        2
    );
    assert_eq!(
        kubectl
            .run(&["get", "ng", "worker", "-o", "jsonpath={.spec.nodeType}"])
            .await,
        "Static"
    );

    // A changed manifest is configured through kubectl's client-side apply patch.
    let changed = std::fs::read_to_string(format!("{TESTDATA}/nodegroups.yaml"))
        .unwrap()
        .replace("maxPerZone: 3", "maxPerZone: 5");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changed.yaml");
    std::fs::write(&path, changed).unwrap();
    let out = kubectl.run(&["apply", "-f", path.to_str().unwrap()]).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/frontend configured"),
        "{out}"
    );
    let frontend = emulator
        .get("deckhouse.io/v1", "NodeGroup", "", "frontend")
        .unwrap();
    assert_eq!(frontend["spec"]["cloudInstances"]["maxPerZone"], 5);
    assert_eq!(frontend["metadata"]["generation"], 2);

    // Server-side apply through kubectl too.
    let out = kubectl
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=person",
            "-f",
            path.to_str().unwrap(),
        ])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");

    let out = kubectl.run(&["delete", "ng", "frontend"]).await;
    assert!(out.contains("deleted"), "{out}");
    assert!(
        emulator
            .get("deckhouse.io/v1", "NodeGroup", "", "frontend")
            .is_none()
    );
}

#[tokio::test]
async fn kubectl_annotates_labels_and_watches() {
    let Some((emulator, kubectl)) = setup().await else {
        return;
    };
    emulator.seed(common::node("worker-0")).unwrap();
    kubectl
        .run(&[
            "annotate",
            "node",
            "worker-0",
            "update.node.deckhouse.io/approved=",
        ])
        .await;
    kubectl
        .run(&[
            "label",
            "node",
            "worker-0",
            "node.deckhouse.io/group=worker",
            "stale=yes",
        ])
        .await;
    kubectl.run(&["label", "node", "worker-0", "stale-"]).await;
    let node = emulator.get("v1", "Node", "", "worker-0").unwrap();
    assert_eq!(
        node["metadata"]["annotations"]["update.node.deckhouse.io/approved"],
        ""
    );
    assert_eq!(
        node["metadata"]["labels"]["node.deckhouse.io/group"],
        "worker"
    );
    assert!(node["metadata"]["labels"].get("stale").is_none());
    let out = kubectl
        .run(&[
            "get",
            "nodes",
            "-l",
            "node.deckhouse.io/group=worker",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(out.trim(), "node/worker-0");

    // `kubectl get -w` shows the list, then changes as they happen.
    let watcher = kubectl.command(&["get", "nodes", "-w"]).spawn().unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut changed = emulator.get("v1", "Node", "", "worker-0").unwrap();
    changed["spec"] = json!({"unschedulable": true});
    emulator.update(changed).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut watcher = watcher;
    watcher.start_kill().unwrap();
    let output = watcher.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("worker-0"))
        .collect();
    assert_eq!(
        rows.len(),
        2,
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        rows[0].contains(" Ready ") && rows[1].contains("Ready,SchedulingDisabled"),
        "{stdout}"
    );
}

#[tokio::test]
async fn kubectl_drain_retries_a_pdb_refusal_and_completes_when_released() {
    let Some((emulator, kubectl)) = setup().await else {
        return;
    };
    emulator.seed(common::node("worker-0")).unwrap();
    emulator
        .seed(common::running_pod(
            "web-0",
            "worker-0",
            json!({"app": "web"}),
        ))
        .unwrap();
    emulator
        .seed(common::running_pod(
            "elsewhere",
            "worker-1",
            json!({"app": "web"}),
        ))
        .unwrap();
    emulator
        .seed(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))
        .unwrap();

    let drain = kubectl
        .command(&[
            "drain",
            "worker-0",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=90s",
        ])
        .spawn()
        .unwrap();
    // kubectl retries a refused eviction every 5 s: wait for the second refusal.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while emulator.request_count("create", "pods/eviction", Some(429)) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kubectl did not retry the refused eviction"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        emulator.get("v1", "Pod", "default", "web-0").is_some(),
        "the budget protects the pod"
    );
    let node = emulator.get("v1", "Node", "", "worker-0").unwrap();
    assert_eq!(node["spec"]["unschedulable"], true, "drain cordons first");

    // Release the budget: the next retry succeeds and drain finishes.
    let mut budget = emulator
        .get("policy/v1", "PodDisruptionBudget", "default", "web")
        .unwrap();
    budget["spec"]["minAvailable"] = json!(1);
    emulator.update(budget).unwrap();
    let output = tokio::time::timeout(Duration::from_secs(60), drain.wait_with_output())
        .await
        .expect("drain finishes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{stderr}"
    );
    assert!(stdout.contains("node/worker-0 drained"), "{stdout}");
    assert!(emulator.get("v1", "Pod", "default", "web-0").is_none());
    assert!(emulator.get("v1", "Pod", "default", "elsewhere").is_some());
    assert_eq!(
        emulator.request_count("create", "pods/eviction", Some(201)),
        1
    );
}
