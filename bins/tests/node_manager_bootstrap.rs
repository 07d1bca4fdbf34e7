//! The `node-manager` binary keeps what nodes join with, with nothing made by hand: against the
//! API emulator it mints a bootstrap token Secret for a NodeGroup, one for a group created
//! later, and approves a kubelet's serving certificate request made by `openssl req` for the
//! Node's own addresses while denying one for an address the Node does not have; and it
//! bootstraps static machines (over SSH, into test roots, nodemgr-ssh's `testing::Sshd`) with
//! the API endpoints and CA it reads from the cluster, following them when they change.

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

const SI: &str = "deckhouse.io/v1alpha2";
const CA_1: &str = "-----BEGIN CERTIFICATE-----\nMIIBfirst\n-----END CERTIFICATE-----\n";
const CA_2: &str = "-----BEGIN CERTIFICATE-----\nMIIBsecond\n-----END CERTIFICATE-----\n";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn endpoint_slice(address: &str) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]})
}

fn root_ca(ca: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "namespace": "nodemgr-system"},
        "data": {"ca.crt": ca}})
}

fn static_instance(name: &str, address: std::net::Ipv4Addr) -> Value {
    json!({"apiVersion": SI, "kind": "StaticInstance", "metadata": {"name": name},
        "spec": {"address": address.to_string(),
            "credentialsRef": {"kind": "SSHCredentials", "name": "ssh"}}})
}

/// What a bootstrap script wrote into an instance's test root: the API endpoints and the CA.
fn joined_with(roots: &std::path::Path, instance: &str) -> Option<(String, String)> {
    let root = roots.join(instance);
    let endpoints = std::fs::read_to_string(root.join("var/lib/bashible/api-endpoints")).ok()?;
    let ca = std::fs::read_to_string(root.join("etc/kubernetes/pki/ca.crt")).ok()?;
    Some((endpoints, ca))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_nodes_join_with_the_cluster_context_read_from_the_cluster_as_it_changes() {
    use nodemgr_ssh::testing::{KeyKind, Sshd};
    let addresses = [
        std::net::Ipv4Addr::new(127, 0, 0, 2),
        std::net::Ipv4Addr::new(127, 0, 0, 3),
    ];
    let sshd = Sshd::start_on(&addresses).unwrap();
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    for ns in ["default", "nodemgr-system"] {
        if emulator.get("v1", "Namespace", "", ns).is_none() {
            emulator
                .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .unwrap();
        }
    }
    // The cluster context, where bashible-apiserver reads it too: no file is handed over.
    emulator.seed(endpoint_slice("10.0.0.1")).unwrap();
    emulator.seed(root_ca(CA_1)).unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bashible-apiserver-settings", "namespace": "nodemgr-system"},
            "data": {"settings.yaml": "clusterDomain: corp.local\n"}}))
        .unwrap();
    emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
            "metadata": {"name": "worker"},
            "spec": {"nodeType": "Static", "staticInstances": {"count": 1}}}))
        .unwrap();
    emulator
        .seed(
            json!({"apiVersion": SI, "kind": "SSHCredentials", "metadata": {"name": "ssh"},
            "spec": {"user": sshd.user(), "sshPort": sshd.port(),
                "privateSSHKey": b64(&sshd.private_key(KeyKind::Ed25519).unwrap()),
                "sudoPasswordEncoded": b64(sshd.sudo_password())}}),
        )
        .unwrap();
    emulator
        .seed(static_instance("si-1", addresses[0]))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let roots = dir.path().join("roots");
    std::fs::create_dir(&roots).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "abcdef.0123456789abcdef\n").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .args([
            "--metrics-address=127.0.0.1:0",
            "--no-leader-election",
            "--controllers=static",
            "--static-period=300ms",
            "--cluster-context-namespace=nodemgr-system",
        ])
        .arg("--bootstrap-token-file")
        .arg(&token)
        .arg("--static-test-roots")
        .arg(&roots)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _manager = Killed(child);

    eventually("si-1 bootstrapped with the cluster's context", 60, || {
        joined_with(&roots, "si-1").is_some()
    })
    .await;
    let (endpoints, ca) = joined_with(&roots, "si-1").unwrap();
    assert_eq!(endpoints, "10.0.0.1:6443\n");
    assert_eq!(ca, CA_1);

    // The API server moves and the CA rotates: the next machine joins with the new ones,
    // without a restart.
    emulator
        .merge_patch(
            "discovery.k8s.io/v1",
            "EndpointSlice",
            "default",
            "kubernetes",
            &json!({"endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": true}}]}),
            false,
        )
        .unwrap();
    emulator
        .merge_patch(
            "v1",
            "ConfigMap",
            "nodemgr-system",
            "kube-root-ca.crt",
            &json!({"data": {"ca.crt": CA_2}}),
            false,
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    emulator
        .seed(static_instance("si-2", addresses[1]))
        .unwrap();
    emulator
        .merge_patch(
            "deckhouse.io/v1",
            "NodeGroup",
            "",
            "worker",
            &json!({"spec": {"staticInstances": {"count": 2}}}),
            false,
        )
        .unwrap();
    eventually("si-2 bootstrapped", 60, || {
        joined_with(&roots, "si-2").is_some()
    })
    .await;
    let (endpoints, ca) = joined_with(&roots, "si-2").unwrap();
    assert_eq!(endpoints, "10.0.0.9:6443\n");
    assert_eq!(ca, CA_2);
}

/// Kills the child when dropped (a failed assertion leaves no process behind).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
