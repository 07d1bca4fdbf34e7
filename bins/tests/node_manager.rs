//! The `node-manager` binary against the API emulator with a simulated fleet: it takes the
//! leader Lease, writes NodeGroup status, serves /metrics, /healthz and /readyz, and on SIGTERM
//! stops and releases the Lease.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_testkit::{Emulator, Fleet, FleetConfig, FleetNode, Generation};
use serde_json::json;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn eventually(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    for _ in 0..secs * 20 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {secs}s waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_manager_leads_writes_status_serves_metrics_and_stops_on_sigterm() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nodemgr-system"}}))
        .unwrap();
    emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "workers"},
            "spec": {"nodeType": "CloudPermanent"}}))
        .unwrap();
    let fleet = Fleet::start(emulator.clone(), FleetConfig::default(), None).unwrap();
    fleet
        .publish(
            "workers",
            Generation {
                name: "g0".into(),
                impact: ImpactKind::None,
                rolling: false,
            },
        )
        .unwrap();
    for i in 0..2 {
        fleet
            .add_node(FleetNode {
                name: format!("w-{i}"),
                group: "workers".into(),
                node_type: "CloudPermanent".into(),
                zone: "a".into(),
                pods: 110,
            })
            .unwrap();
    }
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .args([
            "--identity",
            "replica-1",
            "--resync",
            "1s",
            "--update-period",
            "1s",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let e = emulator.clone();
    eventually("the status of workers", 30, || {
        e.get("deckhouse.io/v1", "NodeGroup", "", "workers")
            .is_some_and(|g| g["status"]["nodes"] == 2 && g["status"]["ready"] == 2)
    })
    .await;
    let lease = emulator
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "nodemgr-system",
            "node-manager",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-1");

    // reqwest has no built-in crypto provider in this workspace: ring, as everywhere.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let metrics = http
        .get(format!("{base}/metrics"))
        .header("accept", "application/openmetrics-text")
        .send()
        .await
        .unwrap();
    assert!(
        metrics.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("nodemgr_node_group_nodes{group=\"workers\"} 2"),
        "{text}"
    );
    assert!(text.lines().any(|l| l == "nodemgr_leader 1"), "{text}");
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ready = http.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.text().await.unwrap(), "leader");

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let mut exited = None;
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = exited.expect("node-manager exits on SIGTERM");
    assert!(status.success(), "{status}");
    let lease = emulator
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "nodemgr-system",
            "node-manager",
        )
        .unwrap();
    assert!(
        lease["spec"]["holderIdentity"].is_null(),
        "the Lease is released on shutdown: {lease}"
    );
}

#[test]
fn a_missing_kubeconfig_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .args([
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--metrics-address=127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--kubeconfig"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_manager_creates_the_machines_of_a_cloud_ephemeral_group_in_moto() {
    use nodemgr_cloud::testing::{MotoServer, REGION};
    use nodemgr_core::ports::cloud::CloudApi;

    let moto = MotoServer::start().unwrap();
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let zone = format!("{REGION}a");
    emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "workers"},
            "spec": {"nodeType": "CloudEphemeral", "cloudInstances": {
                "classReference": {"kind": "AWSInstanceClass", "name": "small"},
                "minPerZone": 2, "maxPerZone": 2, "zones": [zone]}}}))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let machines = dir.path().join("machines.yaml");
    std::fs::write(
        &machines,
        format!(
            "zones: [{zone}]\nclasses:\n  - {{kind: AWSInstanceClass, name: small, cpu: 4, memoryGiB: 16, instanceType: m5.xlarge, imageId: ami-0abcdef1234567890}}\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .arg("--metrics-address=127.0.0.1:0")
        .args(["--no-leader-election", "--controllers", "machines,update"])
        .args(["--machines-period", "300ms"])
        .arg("--machines-config")
        .arg(&machines)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", REGION)
        .env("AWS_ENDPOINT_URL_EC2", moto.endpoint())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let e = emulator.clone();
    eventually("2 Instances", 30, || {
        e.list("deckhouse.io/v1alpha2", "Instance", None).len() == 2
    })
    .await;
    let ec2 = nodemgr_cloud::Ec2Client::new(moto.config()).unwrap();
    let mut listed = Vec::new();
    for _ in 0..100 {
        listed = ec2.list_group_instances("workers").await.unwrap();
        if listed.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(listed.len(), 2, "{listed:?}");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

#[test]
fn the_machines_controller_without_its_config_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--controllers", "machines"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--machines-config"), "{stderr}");
}
