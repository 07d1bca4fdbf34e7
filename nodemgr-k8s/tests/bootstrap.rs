//! Bootstrap tokens and kubelet serving certificates against the API emulator with the real
//! controllers: tokens created per NodeGroup, renewed before they expire and deleted once
//! expired (time driven through the controller's `now`); kubelet-serving CSRs made by
//! `openssl req` approved or denied with the reason the rules give.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use nodemgr_core::bootstrap_tokens::{LABEL_NODE_GROUP, TokenPolicy};
use nodemgr_core::model::Timestamp;
use nodemgr_k8s::cluster::client;
use nodemgr_k8s::controllers::bootstrap_tokens::{
    BootstrapTokenController, CurrentTokens, TokenSettings, TokenSource, current_token,
};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};
use tokio::sync::watch;

const HOUR: Duration = Duration::from_secs(3600);

async fn emulator_with_groups(groups: &[&str]) -> Arc<Emulator> {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    for group in groups {
        add_group(&emulator, group);
    }
    emulator
}

fn add_group(emulator: &Emulator, name: &str) {
    emulator
        .seed(
            json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name},
            "spec": {"nodeType": "Static"}}),
        )
        .unwrap();
}

/// The bootstrap token Secrets of kube-system: (name, group, token, expiration).
fn token_secrets(emulator: &Emulator) -> Vec<(String, String, String, String)> {
    let text = |s: &Value, key: &str| {
        let raw = s["data"][key].as_str().unwrap_or_default();
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(raw)
                .unwrap(),
        )
        .unwrap()
    };
    let mut out: Vec<_> = emulator
        .list("v1", "Secret", Some("kube-system"))
        .iter()
        .filter(|s| s["type"] == "bootstrap.kubernetes.io/token")
        .map(|s| {
            (
                s["metadata"]["name"].as_str().unwrap().to_owned(),
                s["metadata"]["labels"][LABEL_NODE_GROUP]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                format!("{}.{}", text(s, "token-id"), text(s, "token-secret")),
                text(s, "expiration"),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_kept_per_group_renewed_before_expiry_and_deleted_once_expired() {
    let emulator = emulator_with_groups(&["worker", "master"]).await;
    // A labelled Secret nodemgr did not write (no expiration): neither used nor deleted.
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
            "metadata": {"name": "bootstrap-token-handmd", "namespace": "kube-system",
                "labels": {LABEL_NODE_GROUP: "worker"}},
            "data": {"token-id": "aGFuZG1k", "token-secret": "MDEyMzQ1Njc4OWFiY2RlZg=="}}),
        )
        .unwrap();
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let current = CurrentTokens::default();
    let controller = BootstrapTokenController::new(
        client.clone(),
        TokenSettings {
            period: Duration::from_millis(200),
            policy: TokenPolicy::default(),
        },
        current.clone(),
        Metrics::new(),
    );
    let source = TokenSource::PerGroup(current.clone());
    let t0 = Timestamp::from_secs(1_900_000_000);

    // First pass: one token per group, in the standard format, expiring after the lifetime.
    let deadline = controller.pass(t0).await.unwrap();
    assert_eq!(deadline, Some(t0 + HOUR), "renewal due when 3 h are left");
    let first = token_secrets(&emulator);
    assert_eq!(first.len(), 3, "{first:?}");
    for group in ["worker", "master"] {
        let (name, _, token, expiration) = first
            .iter()
            .find(|(n, g, ..)| g == group && n != "bootstrap-token-handmd")
            .unwrap();
        let (id, secret) = token.split_once('.').unwrap();
        assert_eq!(name, &format!("bootstrap-token-{id}"));
        assert_eq!((id.len(), secret.len()), (6, 16));
        assert_eq!(expiration, &(t0 + 4 * HOUR).to_rfc3339());
        assert_eq!(source.for_group(group).unwrap().as_str(), token);
        assert_eq!(
            current_token(&client, group, t0)
                .await
                .unwrap()
                .unwrap()
                .as_str(),
            token,
            "other writers read the same token"
        );
    }
    let worker_secret = emulator
        .get("v1", "Secret", "kube-system", &first[0].0)
        .unwrap();
    for (key, value) in [
        ("usage-bootstrap-authentication", "true"),
        ("usage-bootstrap-signing", "true"),
        ("auth-extra-groups", "system:bootstrappers:d8-node-manager"),
    ] {
        let raw = worker_secret["data"][key].as_str().unwrap_or_default();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(raw)
                .unwrap(),
            value.as_bytes(),
            "{key}"
        );
    }

    // Half an hour later nothing changes.
    controller.pass(t0 + HOUR / 2).await.unwrap();
    assert_eq!(token_secrets(&emulator), first);

    // Past the renewal point: a new token per group, the old ones still valid.
    let t1 = t0 + HOUR + Duration::from_secs(1);
    controller.pass(t1).await.unwrap();
    let second = token_secrets(&emulator);
    assert_eq!(second.len(), 5, "{second:?}");
    let worker_old = first
        .iter()
        .find(|s| s.1 == "worker" && s.0 != "bootstrap-token-handmd")
        .unwrap();
    let worker_now = source.for_group("worker").unwrap();
    assert_ne!(worker_now.as_str(), worker_old.2, "renewed");
    assert!(
        second.iter().any(|s| s.2 == worker_old.2),
        "old token kept until it expires"
    );

    // A group added later gets its token on the next pass.
    add_group(&emulator, "front");
    controller.pass(t1).await.unwrap();
    assert!(source.for_group("front").is_ok());

    // Past the first tokens' expiry: they are deleted, the hand-made one stays, and the
    // second generation (1 h left) is renewed in turn.
    let t2 = t0 + 4 * HOUR + Duration::from_secs(1);
    controller.pass(t2).await.unwrap();
    let third = token_secrets(&emulator);
    for old in first.iter().filter(|s| s.0 != "bootstrap-token-handmd") {
        assert!(!third.iter().any(|s| s.0 == old.0), "{} not deleted", old.0);
    }
    assert!(third.iter().any(|s| s.0 == "bootstrap-token-handmd"));
    for group in ["worker", "master", "front"] {
        let valid = third
            .iter()
            .filter(|s| s.1 == group)
            .filter_map(|s| Timestamp::parse_rfc3339(&s.3))
            .filter(|e| *e > t2 + 3 * HOUR)
            .count();
        assert_eq!(
            valid, 1,
            "{group} has one token beyond the margin: {third:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_controller_mints_tokens_for_new_groups() {
    let emulator = emulator_with_groups(&["worker"]).await;
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let current = CurrentTokens::default();
    let controller = BootstrapTokenController::new(
        client,
        TokenSettings {
            period: Duration::from_millis(200),
            policy: TokenPolicy::default(),
        },
        current.clone(),
        Metrics::new(),
    );
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(controller.run(stop_rx));
    eventually("a token for worker", 10, || current.get("worker").is_some()).await;
    add_group(&emulator, "front");
    eventually("a token for front", 10, || current.get("front").is_some()).await;
    assert_eq!(token_secrets(&emulator).len(), 2);
    stop.send(true).unwrap();
    task.await.unwrap();
}

async fn eventually(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {secs}s waiting for {what}");
}

/// A PEM CSR made by `openssl req` for `subject` with the alternative names `sans`.
fn openssl_csr(subject: &str, sans: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("openssl")
        .args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ])
        .arg("-keyout")
        .arg(dir.path().join("key.pem"))
        .args([
            "-subj",
            subject,
            "-addext",
            &format!("subjectAltName={sans}"),
        ])
        .output()
        .expect("openssl is on PATH");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

struct Csr<'a> {
    name: &'a str,
    signer: &'a str,
    username: &'a str,
    cn: &'a str,
    sans: &'a str,
    usages: &'a [&'a str],
}

fn seed_csr(emulator: &Emulator, c: &Csr<'_>) {
    let pem = openssl_csr(&format!("/O=system:nodes/CN={}", c.cn), c.sans);
    emulator
        .seed(
            json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": c.name},
            "spec": {"signerName": c.signer, "username": c.username,
                "groups": ["system:nodes", "system:authenticated"],
                "usages": c.usages,
                "request": base64::engine::general_purpose::STANDARD.encode(pem)}}),
        )
        .unwrap();
}

fn conditions(emulator: &Emulator, name: &str) -> Vec<(String, String)> {
    emulator
        .get(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "",
            name,
        )
        .and_then(|c| c.pointer("/status/conditions").cloned())
        .and_then(|c| c.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_serving_requests_are_approved_only_for_the_nodes_own_names() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w1"},
            "status": {"addresses": [{"type": "Hostname", "address": "w1"},
                {"type": "InternalIP", "address": "10.0.0.5"}]}}),
        )
        .unwrap();
    let serving = "kubernetes.io/kubelet-serving";
    let usages: &[&str] = &["digital signature", "key encipherment", "server auth"];
    let cases = [
        (
            Csr {
                name: "own-names",
                signer: serving,
                username: "system:node:w1",
                cn: "system:node:w1",
                sans: "DNS:w1,IP:10.0.0.5",
                usages,
            },
            Some(("Approved", "AutoApproved")),
        ),
        (
            Csr {
                name: "foreign-ip",
                signer: serving,
                username: "system:node:w1",
                cn: "system:node:w1",
                sans: "DNS:w1,IP:10.0.0.99",
                usages,
            },
            Some(("Denied", "NameNotOfNode")),
        ),
        (
            Csr {
                name: "unknown-node",
                signer: serving,
                username: "system:node:ghost",
                cn: "system:node:ghost",
                sans: "DNS:ghost",
                usages,
            },
            Some(("Denied", "UnknownNode")),
        ),
        (
            Csr {
                name: "client-usage",
                signer: serving,
                username: "system:node:w1",
                cn: "system:node:w1",
                sans: "DNS:w1",
                usages: &["digital signature", "server auth", "client auth"],
            },
            Some(("Denied", "UsagesNotServing")),
        ),
        (
            Csr {
                name: "not-a-node",
                signer: serving,
                username: "alice",
                cn: "system:node:w1",
                sans: "DNS:w1",
                usages,
            },
            Some(("Denied", "RequesterNotANode")),
        ),
        (
            Csr {
                name: "other-subject",
                signer: serving,
                username: "system:node:w1",
                cn: "system:node:w2",
                sans: "DNS:w1",
                usages,
            },
            Some(("Denied", "SubjectMismatch")),
        ),
        (
            Csr {
                name: "client-cert",
                signer: "kubernetes.io/kube-apiserver-client-kubelet",
                username: "system:node:w1",
                cn: "system:node:w1",
                sans: "DNS:evil",
                usages,
            },
            None,
        ),
    ];
    // Some requests exist before the controller starts, the others arrive while it runs.
    for (csr, _) in &cases[..3] {
        seed_csr(&emulator, csr);
    }
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(nodemgr_k8s::controllers::csr::run(
        client,
        Metrics::new(),
        stop_rx,
    ));
    for (csr, _) in &cases[3..] {
        seed_csr(&emulator, csr);
    }
    for (csr, expected) in &cases {
        if let Some((kind, reason)) = expected {
            let want = vec![((*kind).to_owned(), (*reason).to_owned())];
            eventually(&format!("{} {kind} ({reason})", csr.name), 10, || {
                conditions(&emulator, csr.name) == want
            })
            .await;
        }
    }
    // Each decision is written once; the other signer's request is left alone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(conditions(&emulator, "client-cert").is_empty());
    assert_eq!(
        emulator.request_count("update", "certificatesigningrequests/approval", Some(200)),
        6
    );
    let denied = emulator
        .get(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            "",
            "foreign-ip",
        )
        .unwrap();
    let message = denied["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("10.0.0.99"), "{message}");
    stop.send(true).unwrap();
    task.await.unwrap();
}
