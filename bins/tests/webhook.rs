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

use nodemgr_bins::webhook::ca_bundle::{CaBundleTargets, Settled, sync_once};
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
    let mut settled = Settled::default();
    let grace = Duration::from_secs(600);
    let written = sync_once(&kube, &targets, &new_ca, &mut settled, grace)
        .await
        .unwrap();
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
    assert_eq!(
        sync_once(&kube, &targets, &new_ca, &mut settled, grace)
            .await
            .unwrap(),
        0
    );
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

/// `nodemgr-webhook` on a free port with the certificate files of `dir` (its mount of the one
/// Secret every replica mounts), keeping the caBundles every second with a grace period of
/// `grace` seconds; stderr (its log) into `log`.
fn replica(emulator: &Emulator, dir: &Path, log: &Path, grace: u64) -> (Child, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Child(
        Command::new(env!("CARGO_BIN_EXE_nodemgr-webhook"))
            .args([
                format!("--listen=127.0.0.1:{port}"),
                format!("--tls-cert-file={}", dir.join("tls.crt").display()),
                format!("--tls-key-file={}", dir.join("tls.key").display()),
                format!("--tls-ca-file={}", dir.join("ca.pem").display()),
                "--ca-bundle-webhook-configuration=nodemgr-webhook".into(),
                "--ca-bundle-crd=nodegroups.deckhouse.io".into(),
                "--ca-bundle-period-seconds=1".into(),
                format!("--ca-bundle-grace-seconds={grace}"),
            ])
            .env("KUBECONFIG", emulator.kubeconfig_path())
            .env("RUST_LOG", "info")
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    );
    (child, format!("https://127.0.0.1:{port}"))
}

/// `(caBundle, resourceVersion)` of the webhook configuration and of the NodeGroup CRD.
fn bundles(emulator: &Emulator) -> [(Value, Value); 2] {
    let vwc = emulator
        .get(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "",
            "nodemgr-webhook",
        )
        .unwrap();
    let crd = emulator
        .get(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "",
            "nodegroups.deckhouse.io",
        )
        .unwrap();
    [
        (
            vwc["webhooks"][0]["clientConfig"]["caBundle"].clone(),
            vwc["metadata"]["resourceVersion"].clone(),
        ),
        (
            crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"].clone(),
            crd["metadata"]["resourceVersion"].clone(),
        ),
    ]
}

/// The chart's ValidatingWebhookConfiguration for NodeGroups, without a caBundle yet.
fn seed_webhook_configuration(emulator: &Emulator) {
    emulator
        .seed(json!({"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration", "metadata": {"name": "nodemgr-webhook"},
            "webhooks": [{"name": "nodegroup-policy.deckhouse.io",
                "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": "Fail", "matchPolicy": "Equivalent",
                "rules": [{"apiGroups": ["deckhouse.io"], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["nodegroups"]}],
                "clientConfig": {"service": {"namespace": "nodemgr-system",
                    "name": "nodemgr-webhook", "path": "/validate"}}}]}))
        .unwrap();
}

/// Two replicas behind one Service, as the chart runs them (both mounting the Secret
/// `nodemgr-webhook-tls`): the API server's calls reach both and both answer, and their two
/// caBundle keepers write the one CA once and then leave it alone: no flapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_answer_and_their_ca_bundle_keepers_agree() {
    let emulator = Emulator::start().await.unwrap();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    seed_webhook_configuration(&emulator);
    let dir = tempfile::tempdir().unwrap();
    let (_, _, ca) = certificates(dir.path(), "", "nodemgr-webhook");
    let (_a, url_a) = replica(&emulator, dir.path(), &dir.path().join("a.log"), 600);
    let (_b, url_b) = replica(&emulator, dir.path(), &dir.path().join("b.log"), 600);
    emulator.route_service_endpoints("nodemgr-system", "nodemgr-webhook", 443, &[&url_a, &url_b]);

    // Both keepers write the CA; then nothing changes any more.
    use base64::Engine as _;
    let expected = Value::from(base64::engine::general_purpose::STANDARD.encode(&ca));
    let mut settled = None;
    for _ in 0..300 {
        let now = bundles(&emulator);
        if now.iter().all(|(bundle, _)| *bundle == expected) {
            settled = Some(now);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let settled = settled.expect("the keepers did not write the CA within 30 s");
    // Four keeper periods of each replica: not one more write.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(bundles(&emulator), settled, "the caBundles flapped");

    // Through the API server: every write is reviewed by one replica or the other
    // (failurePolicy Fail: a replica that did not answer would fail the write).
    let client =
        kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let resource = |version: &str| {
        kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "deckhouse.io",
            version,
            "NodeGroup",
        ))
    };
    let groups: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(client.clone(), &resource("v1"));
    let post = kube::api::PostParams::default();
    for i in 0..6 {
        let group: kube::api::DynamicObject =
            serde_json::from_value(ng(&format!("static-{i}"), json!({"nodeType": "Static"})))
                .unwrap();
        groups.create(&post, &group).await.unwrap();
    }
    for i in 0..2 {
        let group: kube::api::DynamicObject = serde_json::from_value(ng(
            &format!("inverted-{i}"),
            json!({"nodeType": "CloudEphemeral", "cloudInstances": {
                "classReference": {"kind": "AWSInstanceClass", "name": "w"},
                "minPerZone": 3, "maxPerZone": 1}}),
        ))
        .unwrap();
        let error = groups.create(&post, &group).await.unwrap_err().to_string();
        assert!(
            error.contains("denied the request") && error.contains("minPerZone"),
            "{error}"
        );
    }
    // Reads of an old version go through the replicas' conversion endpoint.
    let old: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(client, &resource("v1alpha2"));
    for _ in 0..2 {
        let list = old.list(&Default::default()).await.unwrap();
        assert_eq!(list.items.len(), 6);
        assert!(
            list.items
                .iter()
                .all(|g| g.data["spec"]["nodeType"] == "Static")
        );
    }
    for log in ["a.log", "b.log"] {
        let text = std::fs::read_to_string(dir.path().join(log)).unwrap();
        let reviews = text.matches("admission review").count();
        assert!(
            reviews >= 3,
            "replica {log} answered {reviews} reviews:\n{text}"
        );
    }
    // Still one value, written once.
    assert_eq!(bundles(&emulator), settled, "the caBundles flapped");
    emulator.shutdown().await;
}

/// The base64 bodies of the certificates of a caBundle (base64 of PEM) value.
fn cas_in(bundle: &Value) -> Vec<String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle.as_str().unwrap_or_default())
        .unwrap_or_default();
    ca_bodies(&String::from_utf8(pem).unwrap_or_default())
}

/// The base64 bodies of the certificates of PEM text.
fn ca_bodies(pem: &str) -> Vec<String> {
    pem.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .filter_map(|b| b.split("-----END CERTIFICATE-----").next())
        .map(|b| b.split_whitespace().collect())
        .collect()
}

/// Polls (up to 30 s) until both caBundles hold exactly `expected` (as sets); their state then.
async fn bundles_become(emulator: &Emulator, expected: &[&str]) -> [(Value, Value); 2] {
    let mut expected: Vec<String> = expected.iter().flat_map(|pem| ca_bodies(pem)).collect();
    expected.sort();
    let mut last = None;
    for _ in 0..300 {
        let now = bundles(emulator);
        if now.iter().all(|(bundle, _)| {
            let mut have = cas_in(bundle);
            have.sort();
            have == expected
        }) {
            return now;
        }
        last = Some(now);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the caBundles never held exactly the expected CAs: {last:?}");
}

/// Creates `count` valid NodeGroups named `{prefix}-N` through the API server (each reviewed
/// by a replica: failurePolicy Fail).
async fn create_groups(emulator: &Emulator, prefix: &str, count: usize) {
    let client =
        kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "deckhouse.io",
        "v1",
        "NodeGroup",
    ));
    let groups: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client, &resource);
    for i in 0..count {
        let group: kube::api::DynamicObject =
            serde_json::from_value(ng(&format!("{prefix}-{i}"), json!({"nodeType": "Static"})))
                .unwrap();
        groups
            .create(&kube::api::PostParams::default(), &group)
            .await
            .unwrap_or_else(|e| panic!("{prefix}-{i}: {e}"));
    }
}

/// A certificate rotation as the kubelet delivers it, to one replica's files before the
/// other's: the caBundles trust the old and the new CA together (every write keeps being
/// reviewed, by either replica), nobody flaps back, and once the grace period is over they hold
/// the new CA alone and stay so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_rotation_keeps_both_replicas_trusted_and_settles_on_the_new_ca() {
    let emulator = Emulator::start().await.unwrap();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    seed_webhook_configuration(&emulator);
    let secret = tempfile::tempdir().unwrap();
    let (_, _, old_ca) = certificates(secret.path(), "", "nodemgr-webhook");
    let (renewed_crt, renewed_key, new_ca) =
        certificates(secret.path(), "renewed-", "nodemgr-webhook");
    // Each pod's mount of the Secret.
    let mounts: Vec<tempfile::TempDir> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
    for mount in &mounts {
        for file in ["tls.crt", "tls.key", "ca.pem"] {
            std::fs::copy(secret.path().join(file), mount.path().join(file)).unwrap();
        }
    }
    // Long enough for the writes below on a loaded machine; the kubelet takes up to minutes.
    let grace = 8;
    let (_a, url_a) = replica(
        &emulator,
        mounts[0].path(),
        &secret.path().join("a.log"),
        grace,
    );
    let (_b, url_b) = replica(
        &emulator,
        mounts[1].path(),
        &secret.path().join("b.log"),
        grace,
    );
    emulator.route_service_endpoints("nodemgr-system", "nodemgr-webhook", 443, &[&url_a, &url_b]);
    bundles_become(&emulator, &[&old_ca]).await;
    create_groups(&emulator, "before", 4).await;

    // The kubelet refreshes replica a's files first.
    let renew = |mount: &Path| {
        std::fs::copy(&renewed_key, mount.join("tls.key")).unwrap();
        std::fs::copy(&renewed_crt, mount.join("tls.crt")).unwrap();
        std::fs::write(mount.join("ca.pem"), &new_ca).unwrap();
    };
    renew(mounts[0].path());
    let both = bundles_become(&emulator, &[&old_ca, &new_ca]).await;
    // b (still the old certificate) does not take the new CA out, and both answer.
    create_groups(&emulator, "during", 4).await;
    assert_eq!(bundles(&emulator), both, "a replica rewrote the caBundles");
    renew(mounts[1].path());
    // The grace period over, the old CA goes; then nothing is written any more.
    let settled = bundles_become(&emulator, &[&new_ca]).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bundles(&emulator), settled, "the caBundles flapped");
    create_groups(&emulator, "after", 4).await;
    for log in ["a.log", "b.log"] {
        let text = std::fs::read_to_string(secret.path().join(log)).unwrap();
        assert!(
            text.matches("admission review").count() >= 4,
            "replica {log} answered too few reviews:\n{text}"
        );
    }
    emulator.shutdown().await;
}
