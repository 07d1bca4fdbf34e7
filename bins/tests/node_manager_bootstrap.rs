//! The `node-manager` binary keeps what nodes join with, with nothing made by hand: against the
//! API emulator it mints a bootstrap token Secret for a NodeGroup, one for a group created
//! later, and approves a kubelet's serving certificate request made by `openssl req` for the
//! Node's own addresses while denying one for an address the Node does not have.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

async fn eventually(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    for _ in 0..secs * 20 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {secs}s waiting for {what}");
}

fn token_groups(emulator: &Emulator) -> Vec<String> {
    let mut groups: Vec<String> = emulator
        .list("v1", "Secret", Some("kube-system"))
        .iter()
        .filter(|s| s["type"] == "bootstrap.kubernetes.io/token")
        .filter_map(|s| {
            s["metadata"]["labels"]["node-manager.deckhouse.io/node-group"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    groups.sort();
    groups
}

fn csr(name: &str, sans: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-keyout"])
        .arg(dir.path().join("key.pem"))
        .args(["-subj", "/O=system:nodes/CN=system:node:w1"])
        .args(["-addext", &format!("subjectAltName={sans}")])
        .output()
        .expect("openssl is on PATH");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"signerName": "kubernetes.io/kubelet-serving", "username": "system:node:w1",
            "groups": ["system:nodes", "system:authenticated"],
            "usages": ["digital signature", "key encipherment", "server auth"],
            "request": base64::engine::general_purpose::STANDARD.encode(out.stdout)}})
}

fn decision(emulator: &Emulator, name: &str) -> Option<String> {
    emulator
        .get(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "",
            name,
        )
        .and_then(|c| c.pointer("/status/conditions/0/type").cloned())
        .and_then(|t| t.as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_manager_mints_bootstrap_tokens_and_decides_serving_certificates() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let group = |name: &str| {
        json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name},
            "spec": {"nodeType": "Static"}})
    };
    emulator.seed(group("worker")).unwrap();
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w1"},
            "status": {"addresses": [{"type": "Hostname", "address": "w1"},
                {"type": "InternalIP", "address": "10.0.0.5"}]}}),
        )
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .args([
            "--metrics-address=127.0.0.1:0",
            "--no-leader-election",
            "--controllers=bootstrap-tokens,csr",
        ])
        .env("RUST_LOG", "warn")
        .env_remove("NODEMGR_BOOTSTRAP_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let e = emulator.clone();
    eventually("a bootstrap token for worker", 30, || {
        token_groups(&e) == ["worker"]
    })
    .await;
    emulator.seed(group("front")).unwrap();
    eventually("a bootstrap token for a group created later", 10, || {
        token_groups(&e) == ["front", "worker"]
    })
    .await;
    emulator.seed(csr("own", "DNS:w1,IP:10.0.0.5")).unwrap();
    emulator
        .seed(csr("foreign", "DNS:w1,IP:192.0.2.1"))
        .unwrap();
    eventually("the kubelet's request approved", 30, || {
        decision(&e, "own").as_deref() == Some("Approved")
    })
    .await;
    eventually("the foreign request denied", 30, || {
        decision(&e, "foreign").as_deref() == Some("Denied")
    })
    .await;

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    for _ in 0..200 {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    panic!("node-manager did not exit on SIGTERM");
}
