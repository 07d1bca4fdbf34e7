//! Speaks HTTPS to the real webhook server (`nodemgr_bins::webhook::start`), with a CA and
//! serving certificate made by `openssl`, reading the cluster from the API emulator through
//! `KubeSource`: AdmissionReviews allowed, denied (with every error), with warnings, UPDATE
//! rules that depend on the group's nodes, a StaticInstance address used twice, and
//! ConversionReviews of `v1alpha1`/`v1alpha2` lists; the certificate is reloaded when its
//! files change, and the caBundle keeper writes the CA into the webhook configuration and
//! the CRDs.

// Test helpers outside `#[test]` functions fail loudly on a broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use nodemgr_bins::webhook::ca_bundle::{CaBundleTargets, sync_once};
use nodemgr_bins::webhook::cluster::KubeSource;
use nodemgr_bins::webhook::tls::ReloadingCertificate;
use nodemgr_bins::webhook::{Running, start};
use nodemgr_k8s::settings::{Settings, SettingsSource};
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (scripts/install.d/45-openssl.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA and a certificate for 127.0.0.1 signed by it, named `{prefix}ca.pem`,
/// `{prefix}tls.crt`, `{prefix}tls.key`.
fn certificates(dir: &Path, prefix: &str, cn: &str) -> (PathBuf, PathBuf, String) {
    let ca_key = format!("{prefix}ca.key");
    let ca = format!("{prefix}ca.pem");
    let key = format!("{prefix}tls.key");
    let csr = format!("{prefix}tls.csr");
    let crt = format!("{prefix}tls.crt");
    let ext = format!("{prefix}ext.cnf");
    std::fs::write(
        dir.join(&ext),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca,
            "-days",
            "2",
            "-subj",
            &format!("/CN={cn}-ca"),
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
    (
        dir.join(crt),
        dir.join(key),
        std::fs::read_to_string(dir.join(ca)).unwrap(),
    )
}

struct World {
    emulator: Emulator,
    webhook: Running,
    client: reqwest::Client,
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

fn https_client(ca_pem: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn world() -> World {
    let emulator = Emulator::start().await.unwrap();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = certificates(dir.path(), "", "nodemgr-webhook");
    let config = kube::Config::new(emulator.url().parse().unwrap());
    let kube = kube::Client::try_from(config).unwrap();
    let source = Arc::new(KubeSource {
        client: kube,
        settings: SettingsSource {
            flags: Settings {
                pod_subnet_node_cidr_prefix: Some(24),
                ..Settings::default()
            },
            config_map: Some(("d8-system".into(), "nodemgr-settings".into())),
        },
        provider_secret: Some((
            "kube-system".into(),
            "d8-provider-cluster-configuration".into(),
        )),
    });
    let certificate = Arc::new(ReloadingCertificate::new(cert.clone(), key.clone()).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let webhook = start(listener, certificate, Some(ca.clone()), source).unwrap();
    assert_eq!(webhook.ca_pem, ca);
    World {
        emulator,
        client: https_client(&ca),
        webhook,
        dir,
        cert,
        key,
    }
}

impl World {
    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .client
            .post(format!("{}{path}", self.webhook.url))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
    }

    async fn admit(&self, operation: &str, old: Option<Value>, new: Value) -> Value {
        let kind = new["kind"].clone();
        let review = self
            .post(
                "/validate",
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {"uid": "u-1", "kind": {"group": "deckhouse.io", "version": "v1",
                        "kind": kind}, "operation": operation, "name": new["metadata"]["name"],
                        "object": new, "oldObject": old}}),
            )
            .await;
        assert_eq!(review["kind"], "AdmissionReview");
        assert_eq!(review["response"]["uid"], "u-1");
        review["response"].clone()
    }

    async fn shutdown(self) {
        self.webhook.shutdown().await;
        self.emulator.shutdown().await;
    }
}

fn ng(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
        "metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_groups_are_allowed_denied_and_warned_about() {
    let w = world().await;
    let ok = w
        .admit("CREATE", None, ng("worker", json!({"nodeType": "Static"})))
        .await;
    assert_eq!(ok, json!({"uid": "u-1", "allowed": true}));

    let bad = ng(
        "worker",
        json!({"nodeType": "Static", "disruptions": {"approvalMode": "RollingUpdate"},
            "nodeTemplate": {"taints": [{"key": "dedicated", "effect": "NoSchedule"},
                {"key": "dedicated", "effect": "NoSchedule"}]}}),
    );
    let denied = w.admit("CREATE", None, bad).await;
    assert_eq!(denied["allowed"], false);
    assert_eq!(denied["status"]["code"], 403);
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("NodeGroup \"worker\" is invalid: "),
        "{message}"
    );
    assert!(
        message.contains("spec.disruptions.approvalMode"),
        "{message}"
    );
    assert!(message.contains("spec.nodeTemplate.taints[1]"), "{message}");

    // A custom toleration key from the settings ConfigMap makes a taint acceptable.
    let tainted = ng(
        "worker",
        json!({"nodeType": "Static", "nodeTemplate": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(
        w.admit("CREATE", None, tainted.clone()).await["allowed"],
        false
    );
    w.emulator
        .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "d8-system"}}))
        .unwrap();
    w.emulator
        .seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "d8-system", "name": "nodemgr-settings"},
            "data": {"customTolerationKeys": "gpu"}}))
        .unwrap();
    assert_eq!(w.admit("CREATE", None, tainted).await["allowed"], true);

    let warned = w
        .admit(
            "CREATE",
            None,
            ng(
                "big",
                json!({"nodeType": "Static", "kubelet": {"maxPods": 400}}),
            ),
        )
        .await;
    assert_eq!(warned["allowed"], true);
    let warnings = warned["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warned}");
    assert!(warnings[0].as_str().unwrap().contains("256 pod addresses"));
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_rules_read_the_groups_nodes() {
    let w = world().await;
    let old = ng(
        "worker",
        json!({"nodeType": "Static", "cri": {"type": "Containerd"}}),
    );
    let retyped = ng(
        "worker",
        json!({"nodeType": "CloudStatic", "cri": {"type": "Containerd"}}),
    );
    let denied = w.admit("UPDATE", Some(old.clone()), retyped).await;
    assert_eq!(denied["allowed"], false);
    assert!(
        denied["status"]["message"]
            .as_str()
            .unwrap()
            .contains("spec.nodeType: nodeType is immutable"),
        "{denied}"
    );

    let cri_change = ng(
        "worker",
        json!({"nodeType": "Static", "cri": {"type": "NotManaged"}}),
    );
    assert_eq!(
        w.admit("UPDATE", Some(old.clone()), cri_change.clone())
            .await["allowed"],
        true
    );
    w.emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "worker-0",
            "labels": {"node.deckhouse.io/group": "worker",
                "node.deckhouse.io/containerd-config": "custom"}}}),
        )
        .unwrap();
    w.emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "other-0",
            "labels": {"node.deckhouse.io/group": "other",
                "node.deckhouse.io/containerd-config": "custom"}}}),
        )
        .unwrap();
    let denied = w.admit("UPDATE", Some(old), cri_change).await;
    assert_eq!(denied["allowed"], false);
    let message = denied["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("containerd-config=custom (worker-0)"),
        "{message}"
    );
    // A group without such nodes may change its CRI.
    let other_old = ng("other2", json!({"nodeType": "Static"}));
    let other_new = ng(
        "other2",
        json!({"nodeType": "Static", "cri": {"type": "NotManaged"}}),
    );
    assert_eq!(
        w.admit("UPDATE", Some(other_old), other_new).await["allowed"],
        true
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_instance_address_is_used_once() {
    let w = world().await;
    let si = |name: &str, address: &str| {
        json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "StaticInstance",
            "metadata": {"name": name},
            "spec": {"address": address,
                "credentialsRef": {"apiVersion": "deckhouse.io/v1alpha2", "kind": "SSHCredentials", "name": "c"}}})
    };
    w.emulator.seed(si("first", "10.0.0.5")).unwrap();
    let denied = w.admit("CREATE", None, si("second", "10.0.0.5")).await;
    assert_eq!(denied["allowed"], false);
    assert!(
        denied["status"]["message"]
            .as_str()
            .unwrap()
            .contains("10.0.0.5 is already the address of StaticInstance first"),
        "{denied}"
    );
    assert_eq!(
        w.admit("CREATE", None, si("second", "10.0.0.6")).await["allowed"],
        true
    );
    // Updating the instance that holds the address is not a duplicate.
    let first = si("first", "10.0.0.5");
    assert_eq!(
        w.admit("UPDATE", Some(first.clone()), first).await["allowed"],
        true
    );
    let creds = json!({"apiVersion": "deckhouse.io/v1alpha2", "kind": "SSHCredentials",
        "metadata": {"name": "c"}, "spec": {"user": "root"}});
    let denied = w.admit("CREATE", None, creds).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_reviews_convert_old_lists_with_the_provider_configuration() {
    let w = world().await;
    let review = |desired: &str, objects: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "c-1", "desiredAPIVersion": desired, "objects": objects}})
    };
    let objects = json!([
        {"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroup", "metadata": {"name": "front"},
            "spec": {"nodeType": "Hybrid", "docker": {"manage": false}}},
        {"apiVersion": "deckhouse.io/v1alpha2", "kind": "NodeGroup", "metadata": {"name": "db"},
            "spec": {"nodeType": "Hybrid"}},
        {"apiVersion": "deckhouse.io/v1alpha2", "kind": "NodeGroup", "metadata": {"name": "w"},
            "spec": {"nodeType": "Cloud"}},
    ]);
    let answer = w
        .post("/convert", review("deckhouse.io/v1", objects.clone()))
        .await;
    assert_eq!(answer["response"]["uid"], "c-1");
    assert_eq!(answer["response"]["result"]["status"], "Success");
    let types: Vec<&str> = answer["response"]["convertedObjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["spec"]["nodeType"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["CloudStatic", "CloudStatic", "CloudEphemeral"]);
    assert_eq!(
        answer["response"]["convertedObjects"][0]["spec"]["cri"],
        json!({"docker": {"manage": false}})
    );

    // With the provider configuration, db (one of its node groups) is CloudPermanent.
    use base64::Engine as _;
    let config = "apiVersion: deckhouse.io/v1\nkind: OpenStackClusterConfiguration\nnodeGroups:\n- name: db\n";
    w.emulator
        .seed(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "kube-system", "name": "d8-provider-cluster-configuration"},
            "data": {"cloud-provider-cluster-configuration.yaml":
                base64::engine::general_purpose::STANDARD.encode(config)}}))
        .unwrap();
    let answer = w.post("/convert", review("deckhouse.io/v1", objects)).await;
    assert_eq!(
        answer["response"]["convertedObjects"][1]["spec"]["nodeType"],
        "CloudPermanent"
    );

    let bad = json!([{"apiVersion": "deckhouse.io/v1alpha2", "kind": "SSHCredentials",
        "metadata": {"name": "c"}, "spec": {"sudoPasswordEncoded": "%%%"}}]);
    let answer = w
        .post("/convert", review("deckhouse.io/v1alpha1", bad))
        .await;
    assert_eq!(answer["response"]["result"]["status"], "Failure");
    assert!(
        answer["response"]["result"]["message"]
            .as_str()
            .unwrap()
            .contains("objects[0] (c): spec.sudoPasswordEncoded"),
        "{answer}"
    );
    let response = w
        .client
        .post(format!("{}/convert", w.webhook.url))
        .header("content-type", "application/json")
        .body(json!({"kind": "NotAReview"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_and_written_into_ca_bundles() {
    let w = world().await;
    // Replace the pair in place (as the kubelet does for a renewed Secret) with one from a
    // new CA: clients trusting only the new CA get through.
    let (new_cert, new_key, new_ca) = certificates(w.dir.path(), "renewed-", "nodemgr-webhook");
    std::fs::copy(&new_key, &w.key).unwrap();
    std::fs::copy(&new_cert, &w.cert).unwrap();
    let renewed = https_client(&new_ca);
    let mut served = false;
    for _ in 0..100 {
        if let Ok(r) = renewed
            .get(format!("{}/healthz", w.webhook.url))
            .send()
            .await
        {
            served = r.status() == 200;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "the renewed certificate is not served");
    assert!(
        w.client
            .get(format!("{}/healthz", w.webhook.url))
            .send()
            .await
            .is_err(),
        "the old CA still verifies the served certificate"
    );

    // caBundles: the webhook configuration and a CRD with a conversion webhook get the CA.
    let vwc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "nodemgr-webhook"},
        "webhooks": [{"name": "nodegroup-policy.deckhouse.io", "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "clientConfig": {"service": {"namespace": "d8-cloud-instance-manager",
                "name": "nodemgr-webhook", "path": "/validate"}}}]});
    w.emulator.seed(vwc).unwrap();
    let kube =
        kube::Client::try_from(kube::Config::new(w.emulator.url().parse().unwrap())).unwrap();
    let targets = CaBundleTargets {
        webhook_configurations: vec!["nodemgr-webhook".into()],
        crds: vec!["nodegroups.deckhouse.io".into()],
    };
    let written = sync_once(&kube, &targets, &new_ca).await.unwrap();
    let vwc = w
        .emulator
        .get(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "",
            "nodemgr-webhook",
        )
        .unwrap();
    use base64::Engine as _;
    let expected = base64::engine::general_purpose::STANDARD.encode(&new_ca);
    assert_eq!(
        vwc["webhooks"][0]["clientConfig"]["caBundle"],
        expected.as_str()
    );
    let crd = w
        .emulator
        .get(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "nodegroups.deckhouse.io",
        )
        .unwrap();
    let conversion = &crd["spec"]["conversion"];
    assert_eq!(conversion["strategy"], "Webhook");
    assert_eq!(
        conversion["webhook"]["clientConfig"]["caBundle"],
        expected.as_str()
    );
    assert_eq!(written, 2);
    // A second pass has nothing to write.
    assert_eq!(sync_once(&kube, &targets, &new_ca).await.unwrap(), 0);
    w.shutdown().await;
}

/// Kills the webhook process when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_reviews_and_writes_the_crds_ca_bundle() {
    let emulator = Emulator::start().await.unwrap();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = certificates(dir.path(), "", "nodemgr-webhook");
    let ca_file = dir.path().join("ca.pem");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _child = Child(
        Command::new(env!("CARGO_BIN_EXE_nodemgr-webhook"))
            .args([
                format!("--listen=127.0.0.1:{port}"),
                format!("--tls-cert-file={}", cert.display()),
                format!("--tls-key-file={}", key.display()),
                format!("--tls-ca-file={}", ca_file.display()),
                "--ca-bundle-crd=nodegroups.deckhouse.io".into(),
                "--ca-bundle-period-seconds=1".into(),
            ])
            .env("KUBECONFIG", emulator.kubeconfig_path())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let client = https_client(&ca);
    let url = format!("https://127.0.0.1:{port}");
    let mut up = false;
    for _ in 0..300 {
        if client.get(format!("{url}/healthz")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "nodemgr-webhook did not serve within 30 s");
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "b-1", "kind": {"group": "deckhouse.io", "version": "v1", "kind": "NodeGroup"},
            "operation": "CREATE", "object": ng("w", json!({"nodeType": "Docker"}))}});
    let response = client
        .post(format!("{url}/validate"))
        .header("content-type", "application/json")
        .body(review.to_string())
        .send()
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    use base64::Engine as _;
    let expected = base64::engine::general_purpose::STANDARD.encode(&ca);
    let mut written = Value::Null;
    for _ in 0..300 {
        written = emulator
            .get(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "nodegroups.deckhouse.io",
            )
            .unwrap()["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
            .clone();
        if written == expected.as_str() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(written, expected.as_str(), "the CRD's caBundle is the CA");
    emulator.shutdown().await;
}
