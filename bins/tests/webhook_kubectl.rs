//! The real `kubectl` against the API emulator calling the real `nodemgr-webhook`, wired as
//! the Helm chart wires it: nodemgr's CRDs (conversion through the Service
//! `nodemgr-system/nodemgr-webhook`), the chart's ValidatingWebhookConfiguration with the CA
//! bundle, the webhook behind that Service. Deckhouse `v1alpha1`/`v1alpha2` NodeGroup manifests
//! apply and read back as `v1`; invalid NodeGroups and a second StaticInstance for one address
//! are refused with the webhook's message; `kubectl explain` describes the NodeGroup schema.
//!
//! kubectl and helm come from `NODEMGR_KUBECTL` / `NODEMGR_HELM` or `PATH`
//! (`scripts/install.d/30-kubectl.sh`, `35-helm.sh`), openssl from `45-openssl.sh`; the tests
//! fail when one is missing.

// Test helpers outside `#[test]` functions fail loudly on a broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use nodemgr_bins::webhook::cluster::KubeSource;
use nodemgr_bins::webhook::tls::ReloadingCertificate;
use nodemgr_bins::webhook::{Running, start};
use nodemgr_k8s::settings::{Settings, SettingsSource};
use nodemgr_testkit::Emulator;
use serde_json::Value;

fn tool(env: &str, name: &str) -> String {
    let binary = std::env::var(env).unwrap_or_else(|_| name.to_owned());
    let found = Command::new(&binary)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "{name} is missing: run scripts/install.d/ (./scripts/test.sh does) or set {env}"
    );
    binary
}

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

/// A CA and a serving certificate for 127.0.0.1 (where the emulator's route to the Service
/// leads) signed by it: `(tls.crt, tls.key, CA PEM)`.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, String) {
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    #[rustfmt::skip]
    let steps: [&[&str]; 3] = [
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=nodemgr-webhook-ca"],
        &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr",
            "-subj", "/CN=nodemgr-webhook.nodemgr-system.svc"],
        &["x509", "-req", "-in", "tls.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "tls.crt", "-days", "2", "-extfile", "ext.cnf"],
    ];
    for step in steps {
        openssl(dir, step);
    }
    (
        dir.join("tls.crt"),
        dir.join("tls.key"),
        std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
    )
}

/// The chart's ValidatingWebhookConfiguration (`helm template`, default values) with `ca_pem`
/// as every webhook's caBundle.
fn charts_webhook_configuration(ca_pem: &str) -> Value {
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/nodemgr");
    let out = Command::new(tool("NODEMGR_HELM", "helm"))
        .args(["template", "nodemgr", chart.to_str().unwrap()])
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let documents =
        serde_saphyr::from_multiple::<Value>(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let mut configuration = documents
        .into_iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .expect("the chart renders the ValidatingWebhookConfiguration by default");
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    for hook in configuration["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"]["caBundle"] = Value::from(bundle.clone());
    }
    configuration
}

struct World {
    emulator: Arc<Emulator>,
    webhook: Running,
    _dir: tempfile::TempDir,
}

async fn world() -> World {
    let emulator = Emulator::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca) = certificates(dir.path());
    // nodemgr's CRDs with the CA as their conversion caBundle (in a cluster the webhook's
    // caBundle keeper writes it).
    use base64::Engine as _;
    let bundle = base64::engine::general_purpose::STANDARD.encode(&ca);
    let mut converted = Vec::new();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        let mut crd = serde_json::to_value(crd).unwrap();
        let conversion = &mut crd["spec"]["conversion"];
        if conversion["strategy"] == "Webhook" {
            let service = &conversion["webhook"]["clientConfig"]["service"];
            assert_eq!(
                (&service["namespace"], &service["name"]),
                (
                    &Value::from("nodemgr-system"),
                    &Value::from("nodemgr-webhook")
                ),
                "the Service the chart creates"
            );
            conversion["webhook"]["clientConfig"]["caBundle"] = Value::from(bundle.clone());
            converted.push(crd["metadata"]["name"].clone());
        }
        emulator.seed(crd).unwrap();
    }
    converted.sort_by_key(ToString::to_string);
    assert_eq!(
        converted,
        [
            "nodegroups.deckhouse.io",
            "nodeusers.deckhouse.io",
            "sshcredentials.deckhouse.io"
        ]
    );
    let kube = kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let source = Arc::new(KubeSource {
        client: kube,
        settings: SettingsSource {
            flags: Settings::default(),
            config_map: Some(("nodemgr-system".into(), "nodemgr-settings".into())),
        },
        provider_secret: Some((
            "kube-system".into(),
            "d8-provider-cluster-configuration".into(),
        )),
    });
    let certificate = Arc::new(ReloadingCertificate::new(cert, key).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let webhook = start(listener, certificate, Some(ca.clone()), source).unwrap();
    // What the CRDs and the chart's configuration name.
    emulator.route_service("nodemgr-system", "nodemgr-webhook", 443, &webhook.url);
    emulator.seed(charts_webhook_configuration(&ca)).unwrap();
    World {
        emulator: Arc::new(emulator),
        webhook,
        _dir: dir,
    }
}

impl World {
    /// `kubectl ARGS` with `stdin`, a fresh cache (a cached discovery would miss the CRDs).
    async fn kubectl(&self, args: &[&str], stdin: &str) -> Output {
        let kubeconfig = self.emulator.kubeconfig_path().to_owned();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let stdin = stdin.to_owned();
        tokio::task::spawn_blocking(move || {
            let cache = tempfile::tempdir().unwrap();
            let mut child = Command::new(tool("NODEMGR_KUBECTL", "kubectl"))
                .env("KUBECONFIG", kubeconfig)
                .arg(format!("--cache-dir={}", cache.path().display()))
                .arg("--request-timeout=60s")
                .args(&args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("kubectl starts");
            child
                .stdin
                .take()
                .unwrap()
                .write_all(stdin.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap()
    }

    /// `kubectl apply -f -` that must succeed; its stdout.
    async fn apply(&self, manifest: &str) -> String {
        let out = self.kubectl(&["apply", "-f", "-"], manifest).await;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kubectl apply failed:\n{manifest}\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    /// `kubectl apply -f -` that must fail; its stderr.
    async fn refused(&self, manifest: &str) -> String {
        let out = self.kubectl(&["apply", "-f", "-"], manifest).await;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !out.status.success(),
            "kubectl apply accepted:\n{manifest}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// `kubectl get RESOURCE NAME -o json`.
    async fn get(&self, resource: &str, name: &str) -> Value {
        let out = self
            .kubectl(&["get", resource, name, "-o", "json"], "")
            .await;
        assert!(
            out.status.success(),
            "kubectl get {resource} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    async fn shutdown(self) {
        self.webhook.shutdown().await;
    }
}

const CLOUD_V1ALPHA1: &str = r#"apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata:
  name: workers
spec:
  nodeType: Cloud
  docker:
    maxConcurrentDownloads: 4
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: worker}
    minPerZone: 1
    maxPerZone: 3
"#;

const HYBRID_V1ALPHA2: &str = r#"apiVersion: deckhouse.io/v1alpha2
kind: NodeGroup
metadata:
  name: hybrid
spec:
  nodeType: Hybrid
"#;

const STATIC_V1ALPHA1: &str = r#"apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata:
  name: metal
spec:
  nodeType: Static
  docker:
    manage: false
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_nodegroup_manifests_apply_and_read_back_as_v1() {
    let w = world().await;
    let out = w.apply(CLOUD_V1ALPHA1).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/workers created"),
        "{out}"
    );
    let out = w.apply(HYBRID_V1ALPHA2).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/hybrid created"),
        "{out}"
    );
    let out = w.apply(STATIC_V1ALPHA1).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/metal created"),
        "{out}"
    );

    let workers = w.get("nodegroups.v1.deckhouse.io", "workers").await;
    assert_eq!(workers["apiVersion"], "deckhouse.io/v1");
    assert_eq!(workers["spec"]["nodeType"], "CloudEphemeral");
    assert_eq!(
        workers["spec"]["cri"]["docker"]["maxConcurrentDownloads"],
        4
    );
    assert!(workers["spec"].get("docker").is_none(), "{workers}");
    assert_eq!(workers["spec"]["cloudInstances"]["maxPerZone"], 3);

    let hybrid = w.get("nodegroups.v1.deckhouse.io", "hybrid").await;
    assert_eq!(hybrid["spec"]["nodeType"], "CloudStatic");

    let metal = w.get("nodegroups.v1.deckhouse.io", "metal").await;
    assert_eq!(metal["spec"]["nodeType"], "Static");
    assert_eq!(metal["spec"]["cri"]["docker"]["manage"], false);

    // And back down: the v1alpha1 view of what is stored.
    let old = w.get("nodegroups.v1alpha1.deckhouse.io", "workers").await;
    assert_eq!(old["apiVersion"], "deckhouse.io/v1alpha1");
    assert_eq!(old["spec"]["nodeType"], "Cloud");
    assert_eq!(old["spec"]["docker"]["maxConcurrentDownloads"], 4);

    // A re-apply of the same old manifest changes nothing.
    let out = w.apply(CLOUD_V1ALPHA1).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/workers unchanged"),
        "{out}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_nodegroups_are_refused_with_the_webhooks_message() {
    let w = world().await;
    let denied = "admission webhook \"nodegroup-policy.deckhouse.io\" denied the request";

    let stderr = w
        .refused(
            &CLOUD_V1ALPHA1
                .replace("workers", "inverted")
                .replace("minPerZone: 1", "minPerZone: 5"),
        )
        .await;
    assert!(stderr.contains(denied), "{stderr}");
    assert!(
        stderr.contains("minPerZone must be <= maxPerZone"),
        "{stderr}"
    );

    let stderr = w
        .refused(
            r"apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: rolling
spec:
  nodeType: Static
  disruptions:
    approvalMode: RollingUpdate
",
        )
        .await;
    assert!(stderr.contains(denied), "{stderr}");
    assert!(stderr.contains("RollingUpdate"), "{stderr}");

    // nodeType is immutable: Static -> CloudEphemeral through the old version (Cloud).
    w.apply(STATIC_V1ALPHA1).await;
    let stderr = w
        .refused(
            r"apiVersion: deckhouse.io/v1alpha1
kind: NodeGroup
metadata:
  name: metal
spec:
  nodeType: Cloud
  cloudInstances:
    classReference: {kind: AWSInstanceClass, name: worker}
    minPerZone: 1
    maxPerZone: 1
",
        )
        .await;
    assert!(stderr.contains(denied), "{stderr}");
    assert!(stderr.contains("nodeType is immutable"), "{stderr}");

    // Nothing refused was stored; the group kept its type.
    for name in ["inverted", "rolling"] {
        assert!(
            w.emulator
                .get("deckhouse.io/v1", "NodeGroup", "", name)
                .is_none(),
            "{name} was stored"
        );
    }
    let metal = w.get("nodegroups.v1.deckhouse.io", "metal").await;
    assert_eq!(metal["spec"]["nodeType"], "Static");
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_staticinstance_for_one_address_is_refused() {
    let w = world().await;
    let instance = |name: &str| {
        format!(
            r"apiVersion: deckhouse.io/v1alpha2
kind: StaticInstance
metadata:
  name: {name}
spec:
  address: 192.168.10.7
  credentialsRef: {{kind: SSHCredentials, name: admin}}
"
        )
    };
    let out = w.apply(&instance("first")).await;
    assert!(
        out.contains("staticinstance.deckhouse.io/first created"),
        "{out}"
    );
    let stderr = w.refused(&instance("second")).await;
    assert!(
        stderr.contains(
            "admission webhook \"static-policy.nodemgr.deckhouse.io\" denied the request"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("192.168.10.7 is already the address of StaticInstance first"),
        "{stderr}"
    );
    w.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_describes_the_nodegroup_schema() {
    let w = world().await;
    let out = w
        .kubectl(
            &[
                "explain",
                "nodegroups.spec.update",
                "--api-version=deckhouse.io/v1",
            ],
            "",
        )
        .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl explain: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "KIND:",
        "NodeGroup",
        "How many nodes update at once",
        "maxConcurrent",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // The top level and `.spec` itself are described too, in every served version.
    for version in ["v1", "v1alpha2", "v1alpha1"] {
        let api_version = format!("--api-version=deckhouse.io/{version}");
        for (path, expected) in [
            (
                "nodegroups",
                &[
                    "What the group should be",
                    "as node-manager last observed it",
                    "converts between them",
                ][..],
            ),
            (
                "nodegroups.spec",
                &[
                    "What the group should be",
                    "nodeType",
                    "Type of the group's nodes",
                ][..],
            ),
            (
                "nodegroups.status",
                &["as node-manager last observed it", "conditions"][..],
            ),
        ] {
            let out = w.kubectl(&["explain", path, &api_version], "").await;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "kubectl explain {path} {api_version}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                !stdout.contains("<no description>") && !stdout.contains("<empty>"),
                "{path} {version}: an undescribed field:\n{stdout}"
            );
            // kubectl wraps descriptions at 80 columns.
            let flat = stdout.split_whitespace().collect::<Vec<_>>().join(" ");
            for text in expected {
                assert!(
                    flat.contains(text),
                    "{path} {version}: missing {text:?} in:\n{stdout}"
                );
            }
        }
    }
    w.shutdown().await;
}

const DEFAULTED_V1: &str = r#"apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata:
  name: defaulted
spec:
  nodeType: Static
  disruptions:
    automatic: {}
  kubelet: {}
  update: {}
"#;

/// The CRD's API-server defaults (written from `nodemgr_core::model::spec_facts::defaults`) are filled in
/// where the parent object is given, and only there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_fills_in_the_crds_defaults() {
    let w = world().await;
    let out = w.apply(DEFAULTED_V1).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/defaulted created"),
        "{out}"
    );
    let g = w.get("nodegroups.v1.deckhouse.io", "defaulted").await;
    let spec = &g["spec"];
    assert_eq!(spec["disruptions"]["approvalMode"], "Automatic", "{g}");
    assert_eq!(
        spec["disruptions"]["automatic"]["drainBeforeApproval"], true,
        "{g}"
    );
    assert_eq!(spec["kubelet"]["containerLogMaxSize"], "50Mi", "{g}");
    assert_eq!(spec["kubelet"]["containerLogMaxFiles"], 4, "{g}");
    assert_eq!(spec["kubelet"]["rootDir"], "/var/lib/kubelet", "{g}");
    assert_eq!(spec["update"]["maxConcurrent"], 1, "{g}");
    assert!(
        spec.get("fencing").is_none() && spec.get("gpu").is_none(),
        "no default creates an object that was not given: {g}"
    );
    w.shutdown().await;
}

/// Every `x-kubernetes-validations` rule under `schema`, with its dotted path.
fn cel_rules(path: &str, schema: &Value, out: &mut Vec<(String, String, String)>) {
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push((
            path.to_owned(),
            rule["rule"].as_str().unwrap().to_owned(),
            rule["message"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    for (name, child) in schema["properties"].as_object().into_iter().flatten() {
        cel_rules(&format!("{path}.{name}"), child, out);
    }
    if let Some(items) = schema.get("items") {
        cel_rules(&format!("{path}[]"), items, out);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        cel_rules(&format!("{path}.*"), extra, out);
    }
}

/// The emulator evaluates every CEL rule of nodemgr's CRDs: none is outside the subset it
/// parses (such a rule would be skipped, with a warning, and nothing would be enforced), and the
/// NodeGroup rules give the answers kube-apiserver gives on accepted and refused values.
#[test]
fn the_emulators_cel_evaluates_every_rule_of_the_crds() {
    use nodemgr_k8s::crd::node_group::{CRI_RULE, DISRUPTIONS_RULE, LABEL_SELECTOR_RULE};
    use nodemgr_testkit::cel;
    let mut rules = Vec::new();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        let crd = serde_json::to_value(crd).unwrap();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            cel_rules(
                &format!("{}/{}", crd["metadata"]["name"], version["name"]),
                &version["schema"]["openAPIV3Schema"],
                &mut rules,
            );
        }
    }
    // Three NodeGroup rules in each of its three versions.
    let node_group_rules = rules
        .iter()
        .filter(|(path, _, _)| path.contains("nodegroups.deckhouse.io"))
        .count();
    assert_eq!(node_group_rules, 9, "{rules:#?}");
    for (path, rule, message) in &rules {
        assert!(!message.is_empty(), "{path}: a rule without a message");
        if let Err(why) = cel::parse(rule) {
            panic!("{path}: the emulator's CEL cannot parse {rule:?} ({why}): it would skip it");
        }
    }
    let eval = |rule: &str, value: Value, old: Option<Value>| {
        cel::evaluate(&cel::parse(rule).unwrap(), &value, old.as_ref())
            .unwrap_or_else(|e| panic!("{rule} on {value}: {e}"))
    };
    let selector =
        |role: &str| serde_json::json!({"labelSelector": {"matchLabels": {"role": role}}});
    assert!(eval(
        LABEL_SELECTOR_RULE,
        selector("a"),
        Some(selector("a"))
    ));
    assert!(!eval(
        LABEL_SELECTOR_RULE,
        selector("b"),
        Some(selector("a"))
    ));
    assert!(!eval(
        LABEL_SELECTOR_RULE,
        serde_json::json!({"count": 1}),
        Some(selector("a"))
    ));
    assert!(eval(
        LABEL_SELECTOR_RULE,
        selector("a"),
        Some(serde_json::json!({"count": 1}))
    ));
    let disruptions = |v: Value| eval(DISRUPTIONS_RULE, v, None);
    assert!(disruptions(serde_json::json!({"approvalMode": "Manual"})));
    assert!(disruptions(
        serde_json::json!({"automatic": {"drainBeforeApproval": false}})
    ));
    assert!(disruptions(
        serde_json::json!({"approvalMode": "RollingUpdate", "rollingUpdate": {}})
    ));
    assert!(!disruptions(
        serde_json::json!({"approvalMode": "Manual", "automatic": {}})
    ));
    assert!(!disruptions(
        serde_json::json!({"approvalMode": "Automatic", "rollingUpdate": {}})
    ));
    assert!(!disruptions(
        serde_json::json!({"approvalMode": "RollingUpdate", "automatic": {}})
    ));
    let cri = |v: Value| eval(CRI_RULE, v, None);
    assert!(cri(
        serde_json::json!({"type": "Containerd", "containerd": {}})
    ));
    assert!(cri(serde_json::json!({"docker": {}})));
    assert!(!cri(
        serde_json::json!({"type": "Containerd", "docker": {"manage": false}})
    ));
    assert!(!cri(
        serde_json::json!({"type": "Docker", "containerdV2": {}})
    ));
    assert!(!cri(
        serde_json::json!({"type": "NotManaged", "containerd": {}})
    ));
}

/// The rule's `message` in the NodeGroup CRD (v1).
fn rule_message(property: &str) -> String {
    let crd = nodemgr_k8s::crd::definitions()
        .unwrap()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("nodegroups.deckhouse.io"))
        .unwrap();
    let crd = serde_json::to_value(crd).unwrap();
    let v1 = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1")
        .unwrap();
    v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][property]
        ["x-kubernetes-validations"][0]["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The NodeGroup CRD's three CEL rules through kubectl: kube-apiserver (here the emulator)
/// refuses what they forbid with the rule's message before any webhook is asked, and accepts
/// what they allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodegroup_cel_rules_refuse_through_kubectl_with_their_message() {
    let w = world().await;
    let static_group = |selector: &str| {
        format!(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: metal\nspec:\n  nodeType: Static\n  staticInstances:\n    count: 1\n{selector}"
        )
    };
    let role = |r: &str| format!("    labelSelector:\n      matchLabels: {{role: {r}}}\n");
    // A selector may be added to a group that had none…
    w.apply(&static_group("")).await;
    let out = w.apply(&static_group(&role("db"))).await;
    assert!(
        out.contains("nodegroup.deckhouse.io/metal configured"),
        "{out}"
    );
    // …but not changed or removed once set.
    let selector_message = rule_message("staticInstances");
    for changed in [static_group(&role("web")), static_group("")] {
        let stderr = w.refused(&changed).await;
        assert!(stderr.contains(&selector_message), "{stderr}");
        assert!(stderr.contains("spec.staticInstances"), "{stderr}");
        assert!(!stderr.contains("admission webhook"), "{stderr}");
    }
    let metal = w.get("nodegroups.v1.deckhouse.io", "metal").await;
    assert_eq!(
        metal["spec"]["staticInstances"]["labelSelector"]["matchLabels"]["role"],
        "db"
    );

    // An approval mode with another mode's settings.
    let stderr = w
        .refused(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: manual\nspec:\n  nodeType: Static\n  disruptions:\n    approvalMode: Manual\n    automatic:\n      drainBeforeApproval: false\n",
        )
        .await;
    assert!(stderr.contains(&rule_message("disruptions")), "{stderr}");
    assert!(stderr.contains("spec.disruptions"), "{stderr}");

    // A CRI type with another type's settings.
    let stderr = w
        .refused(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: runtime\nspec:\n  nodeType: Static\n  cri:\n    type: Containerd\n    docker:\n      manage: false\n",
        )
        .await;
    assert!(stderr.contains(&rule_message("cri")), "{stderr}");
    assert!(stderr.contains("spec.cri"), "{stderr}");

    for name in ["manual", "runtime"] {
        assert!(
            w.emulator
                .get("deckhouse.io/v1", "NodeGroup", "", name)
                .is_none(),
            "{name} was stored"
        );
    }
    // What the rules allow is stored.
    let out = w
        .apply(
            "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata:\n  name: runtime\nspec:\n  nodeType: Static\n  disruptions:\n    approvalMode: Manual\n  cri:\n    type: Containerd\n    containerd:\n      maxConcurrentDownloads: 2\n",
        )
        .await;
    assert!(
        out.contains("nodegroup.deckhouse.io/runtime created"),
        "{out}"
    );
    w.shutdown().await;
}
