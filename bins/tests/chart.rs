//! The Helm chart `charts/nodemgr` with the real `helm` and `kubectl`: it lints with default and
//! non-default values, its CRDs are what `nodemgr crds` prints, `deploy/` is its rendered
//! default, the values do what README's "Install" says, every flag it passes exists in the
//! binary it runs, and the rendered chart applies for real (`kubectl apply -f -`) to an empty
//! API emulator, with every optional part on as well as with the defaults.
//!
//! helm and kubectl come from `NODEMGR_HELM` / `NODEMGR_KUBECTL` or `PATH`
//! (`scripts/install.d/35-helm.sh`, `30-kubectl.sh`); the tests fail when they are missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nodemgr_testkit::Emulator;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart() -> PathBuf {
    repo().join("charts/nodemgr")
}

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

fn helm(args: &[&str]) -> std::process::Output {
    Command::new(tool("NODEMGR_HELM", "helm"))
        .args(args)
        .output()
        .expect("helm runs")
}

/// `helm template nodemgr charts/nodemgr` with `--set` pairs; panics with helm's error.
fn render(sets: &[&str]) -> String {
    let chart = chart();
    let mut args = vec!["template", "nodemgr", chart.to_str().unwrap()];
    for set in sets {
        args.push("--set");
        args.push(set);
    }
    let out = helm(&args);
    assert!(
        out.status.success(),
        "helm template {sets:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .unwrap()
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

fn args_of(object: &Value) -> Vec<String> {
    object["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

/// Every optional part on, and other non-default values.
const ALL_ON: &[&str] = &[
    "image.repository=registry.example.com/nm",
    "image.tag=1.2.3",
    "image.pullPolicy=Always",
    "logFormat=json",
    "nodeManager.replicas=3",
    "nodeManager.controllers={status,update,fencing}",
    "webhook.enabled=true",
    "certManager.enabled=true",
    "metrics.serviceMonitor.enabled=true",
    "metrics.podMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.dashboard.enabled=true",
    "bashibleApiserver.tokensSecret=nodemgr-bashible-tokens",
    "nodeManager.createMasterNodeGroup=Static",
];

#[test]
fn helm_lint_passes_with_default_and_non_default_values() {
    let chart = chart();
    let out = helm(&["lint", "--strict", chart.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
    for set in ALL_ON {
        args.extend(["--set", set]);
    }
    let out = helm(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = helm(&[
        "lint",
        chart.to_str().unwrap(),
        "--set",
        "metrics.auth=none",
        "--set",
        "webhook.enabled=true",
        "--set",
        "fencingAgent.enabled=false",
        "--set",
        "earlyOom.enabled=false",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn deploy_is_the_charts_rendered_default() {
    // Without the generated certificate: it is random and must not be committed.
    let rendered = render(&["webhook.generateCertificate=false"]);
    let committed = std::fs::read_to_string(repo().join("deploy/nodemgr.yaml")).unwrap();
    assert!(
        committed == rendered,
        "deploy/nodemgr.yaml is stale: run `helm template nodemgr charts/nodemgr --set webhook.generateCertificate=false > deploy/nodemgr.yaml`"
    );
    assert!(!committed.contains("tls.key:"), "a private key in deploy/");
}

#[test]
fn values_change_what_the_readme_says_they_change() {
    let defaults = documents(&render(&[]));
    let node_manager = find(&defaults, "Deployment", "node-manager");
    assert_eq!(node_manager["spec"]["replicas"], 2);
    let container = &node_manager["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/nodemgr/nodemgr:0.1.0");
    assert_eq!(container["imagePullPolicy"], "IfNotPresent");
    assert!(args_of(node_manager).contains(&"--metrics-auth=kubernetes".to_owned()));
    assert_eq!(container["livenessProbe"]["httpGet"]["scheme"], "HTTPS");
    let pdb = find(&defaults, "PodDisruptionBudget", "node-manager");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let anti = &node_manager["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert!(anti["requiredDuringSchedulingIgnoredDuringExecution"].is_array());
    // The CRDs convert old versions through the webhook: it is on by default, with a
    // Helm-generated CA, behind the Service the CRDs name.
    let webhook = find(
        &defaults,
        "ValidatingWebhookConfiguration",
        "nodemgr-webhook",
    );
    let crds = documents(&std::fs::read_to_string(chart().join("crds/crds.yaml")).unwrap());
    for crd in crds
        .iter()
        .filter(|c| c["spec"]["conversion"]["strategy"] == "Webhook")
    {
        let service = &crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"];
        assert_eq!(
            (&service["namespace"], &service["name"]),
            (
                &webhook["webhooks"][0]["clientConfig"]["service"]["namespace"],
                &webhook["webhooks"][0]["clientConfig"]["service"]["name"]
            ),
            "{}",
            crd["metadata"]["name"]
        );
        find(&defaults, "Service", service["name"].as_str().unwrap());
    }
    let secret = find(&defaults, "Secret", "nodemgr-webhook-tls");
    assert!(secret["data"]["tls.crt"].as_str().unwrap().len() > 100);
    for hook in webhook["webhooks"].as_array().unwrap() {
        assert_eq!(hook["clientConfig"]["caBundle"], secret["data"]["ca.crt"]);
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["failurePolicy"], "Fail");
    }
    let deployment = find(&defaults, "Deployment", "nodemgr-webhook");
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    let probe = &deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"];
    assert_eq!(probe["httpGet"]["scheme"], "HTTPS");
    assert_eq!(probe["httpGet"]["path"], "/healthz");
    assert!(
        !documents(&render(&["webhook.enabled=false"]))
            .iter()
            .any(|d| d["kind"] == "ValidatingWebhookConfiguration")
    );
    // node-manager and the webhook read the same settings ConfigMap.
    assert!(
        args_of(find(&defaults, "Deployment", "node-manager"))
            .contains(&"--settings-config-map=nodemgr-system/nodemgr-settings".to_owned())
    );
    assert!(
        args_of(deployment)
            .contains(&"--settings-config-map=nodemgr-system/nodemgr-settings".to_owned())
    );
    // bashible-apiserver runs in cluster mode with its ServiceAccount token, and bootstrap
    // scripts install the agent from its Service (whose name its certificate carries).
    let bashible = find(&defaults, "Deployment", "bashible-apiserver");
    assert!(args_of(bashible).contains(&"--from-cluster".to_owned()));
    for expected in [
        "--public-url=https://bashible-apiserver.nodemgr-system.svc:9600",
        "--tls-name=bashible-apiserver.nodemgr-system.svc",
        "--agent-binary=/usr/local/bin/bashible",
    ] {
        assert!(
            args_of(bashible).contains(&expected.to_owned()),
            "{expected}"
        );
    }
    let moved = documents(&render(&[
        "bashibleApiserver.publicUrl=https://10.0.0.5:30600",
    ]));
    assert!(
        args_of(find(&moved, "Deployment", "bashible-apiserver"))
            .contains(&"--public-url=https://10.0.0.5:30600".to_owned())
    );
    // node-manager reads the cluster context where bashible-apiserver's settings are.
    assert!(
        args_of(find(&defaults, "Deployment", "node-manager"))
            .contains(&"--cluster-context-namespace=nodemgr-system".to_owned())
    );
    assert_ne!(
        bashible["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "Certificate",
    ] {
        assert!(
            !defaults.iter().any(|d| d["kind"] == kind),
            "{kind} is off by default"
        );
    }
    let fencing = find(&defaults, "DaemonSet", "fencing-agent");
    assert_eq!(
        fencing["spec"]["template"]["spec"]["nodeSelector"]["node-manager.deckhouse.io/fencing-mode"],
        "Watchdog",
        "the fencing agent runs only on fenced groups' nodes"
    );

    let all = documents(&render(ALL_ON));
    let node_manager = find(&all, "Deployment", "node-manager");
    assert_eq!(node_manager["spec"]["replicas"], 3);
    let container = &node_manager["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example.com/nm:1.2.3");
    assert_eq!(container["imagePullPolicy"], "Always");
    let args = args_of(node_manager);
    for expected in [
        "--log-format=json",
        "--controllers=status,update,fencing",
        "--metrics-tls-cert=/etc/nodemgr/metrics-tls/tls.crt",
        "--create-master-node-group=Static",
    ] {
        assert!(
            args.contains(&expected.to_owned()),
            "{expected} in {args:?}"
        );
    }
    for (kind, name) in [
        ("ValidatingWebhookConfiguration", "nodemgr-webhook"),
        ("ServiceMonitor", "node-manager"),
        ("PodMonitor", "fencing-agent"),
        ("PodMonitor", "early-oom"),
        ("PrometheusRule", "nodemgr"),
        ("Certificate", "nodemgr-webhook"),
        ("Certificate", "nodemgr-metrics"),
        ("Issuer", "nodemgr-selfsigned"),
        ("ConfigMap", "nodemgr-dashboard"),
    ] {
        find(&all, kind, name);
    }
    let rules = find(&all, "PrometheusRule", "nodemgr");
    assert!(
        rules["spec"]["groups"].as_array().unwrap().len() >= 5,
        "every rule file is in the PrometheusRule"
    );
    // With cert-manager the CA is injected, not generated.
    let webhook = find(&all, "ValidatingWebhookConfiguration", "nodemgr-webhook");
    assert_eq!(
        webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "nodemgr-system/nodemgr-webhook"
    );
    assert!(webhook["webhooks"][0]["clientConfig"]["caBundle"].is_null());
    assert!(
        !all.iter()
            .any(|d| d["kind"] == "Secret" && d["metadata"]["name"] == "nodemgr-webhook-tls")
    );
    let bashible = find(&all, "Deployment", "bashible-apiserver");
    assert!(
        args_of(bashible)
            .contains(&"--tokens-file=/etc/nodemgr/bashible-apiserver-tokens/tokens".to_owned())
    );
    let rbac = find(&all, "ClusterRole", "nodemgr:node-manager");
    assert!(
        rbac["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"][0] == "nodegroups"
                && r["verbs"]
                    .as_array()
                    .unwrap()
                    .contains(&Value::from("create"))),
        "--create-master-node-group needs nodegroups create"
    );
}

/// The scrape endpoints of a ServiceMonitor or PodMonitor.
fn scrape_endpoints(monitor: &Value) -> &Vec<Value> {
    monitor["spec"]["endpoints"]
        .as_array()
        .or_else(|| monitor["spec"]["podMetricsEndpoints"].as_array())
        .unwrap()
}

#[test]
fn monitors_label_the_agents_series_with_their_node_and_verify_certificates_they_can() {
    let monitors = [
        ("ServiceMonitor", "node-manager"),
        ("PodMonitor", "early-oom"),
        ("PodMonitor", "fencing-agent"),
    ];
    let all = documents(&render(ALL_ON));
    let certificate = find(&all, "Certificate", "nodemgr-metrics");
    let names = certificate["spec"]["dnsNames"].as_array().unwrap();
    for (kind, name) in monitors {
        let monitor = find(&all, kind, name);
        for endpoint in scrape_endpoints(monitor) {
            let relabels: Vec<&Value> = endpoint["relabelings"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            let node = relabels.iter().find(|r| r["targetLabel"] == "node");
            if kind == "PodMonitor" {
                // The agents' series have no labels of their own: the alerts' `$labels.node`
                // is the scraped pod's node.
                let node = node.unwrap_or_else(|| panic!("{name}: no `node` relabeling"));
                assert_eq!(
                    node["sourceLabels"],
                    serde_json::json!(["__meta_kubernetes_pod_node_name"]),
                    "{name}"
                );
            } else {
                // node-manager's series carry `node` themselves; a target label would rename it.
                assert!(node.is_none(), "{name}: a `node` target label");
            }
            // cert-manager on: verified with its CA, under a name the certificate carries.
            let tls = &endpoint["tlsConfig"];
            assert_eq!(tls["insecureSkipVerify"], Value::Null, "{name}");
            assert_eq!(tls["ca"]["secret"]["name"], "nodemgr-metrics-tls", "{name}");
            assert_eq!(tls["ca"]["secret"]["key"], "ca.crt", "{name}");
            assert!(names.contains(&tls["serverName"]), "{name}: {tls}");
            assert_eq!(
                endpoint["authorization"]["credentials"]["name"],
                "nodemgr-metrics-scraper-token"
            );
        }
    }
    // Without cert-manager (self-signed at start), or when told not to: no verification.
    for sets in [
        &[
            "metrics.serviceMonitor.enabled=true",
            "metrics.podMonitor.enabled=true",
        ][..],
        &[
            "metrics.serviceMonitor.enabled=true",
            "metrics.podMonitor.enabled=true",
            "certManager.enabled=true",
            "metrics.verifyCertificate=false",
        ][..],
    ] {
        let docs = documents(&render(sets));
        for (kind, name) in monitors {
            for endpoint in scrape_endpoints(find(&docs, kind, name)) {
                assert_eq!(
                    endpoint["tlsConfig"]["insecureSkipVerify"], true,
                    "{sets:?}"
                );
                assert_eq!(endpoint["tlsConfig"]["ca"], Value::Null, "{sets:?}");
            }
        }
    }
}

#[test]
fn a_malformed_value_is_refused_with_what_is_wrong() {
    let chart = chart();
    let out = helm(&[
        "template",
        "nodemgr",
        chart.to_str().unwrap(),
        "--set",
        "metrics.readerServiceAccounts={prometheus}",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not namespace/name"), "{stderr}");
}

#[test]
fn every_flag_the_chart_passes_exists_in_its_binary() {
    let docs = documents(&render(ALL_ON));
    for (kind, name, binary) in [
        (
            "Deployment",
            "node-manager",
            env!("CARGO_BIN_EXE_node-manager"),
        ),
        (
            "Deployment",
            "bashible-apiserver",
            env!("CARGO_BIN_EXE_bashible-apiserver"),
        ),
        (
            "DaemonSet",
            "fencing-agent",
            env!("CARGO_BIN_EXE_fencing-agent"),
        ),
        ("DaemonSet", "early-oom", env!("CARGO_BIN_EXE_early-oom")),
        (
            "Deployment",
            "nodemgr-webhook",
            env!("CARGO_BIN_EXE_nodemgr-webhook"),
        ),
    ] {
        let help = Command::new(binary).arg("--help").output().unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        for arg in args_of(find(&docs, kind, name)) {
            if !arg.starts_with("--") {
                continue;
            }
            let flag = arg.split('=').next().unwrap();
            assert!(help.contains(flag), "{name} has no flag {flag}:\n{help}");
        }
    }
}

/// `kubectl apply -f -` of `manifest`, with a fresh cache (a cached OpenAPI index would not
/// list the groups of CRDs applied by the previous call).
fn kubectl_apply(emulator: &Emulator, manifest: &str) -> String {
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path();
    let mut child = Command::new(tool("NODEMGR_KUBECTL", "kubectl"))
        .env("KUBECONFIG", emulator.kubeconfig_path())
        .arg(format!("--cache-dir={}", cache.display()))
        .args(["--request-timeout=60s", "apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl apply failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

async fn applies_to_an_empty_emulator(sets: &[&str], expected: &[&str]) {
    let emulator = Emulator::start().await.unwrap();
    let crds = std::fs::read_to_string(chart().join("crds/crds.yaml")).unwrap();
    let third_party = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chart/third-party-crds.yaml"),
    )
    .unwrap();
    let rendered = render(sets);
    let emulator = std::sync::Arc::new(emulator);
    let e = emulator.clone();
    let out = tokio::task::spawn_blocking(move || {
        kubectl_apply(&e, &crds);
        kubectl_apply(&e, &third_party);
        kubectl_apply(&e, &rendered)
    })
    .await
    .unwrap();
    for line in expected {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    assert!(!out.contains("unchanged"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_chart_applies_to_an_empty_cluster() {
    applies_to_an_empty_emulator(
        &[],
        &[
            "namespace/nodemgr-system created",
            "namespace/d8-cloud-instance-manager created",
            "deployment.apps/node-manager created",
            "poddisruptionbudget.policy/node-manager created",
            "deployment.apps/bashible-apiserver created",
            "deployment.apps/nodemgr-webhook created",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/nodemgr-webhook created",
            "rolebinding.rbac.authorization.k8s.io/nodemgr:bashible-apiserver-secrets created",
            "daemonset.apps/fencing-agent created",
            "daemonset.apps/early-oom created",
            "clusterrole.rbac.authorization.k8s.io/nodemgr:metrics-reader created",
            "rolebinding.rbac.authorization.k8s.io/nodemgr:node-manager-checksums created",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_with_every_option_applies_to_an_empty_cluster() {
    applies_to_an_empty_emulator(
        ALL_ON,
        &[
            "deployment.apps/nodemgr-webhook created",
            "validatingwebhookconfiguration.admissionregistration.k8s.io/nodemgr-webhook created",
            "servicemonitor.monitoring.coreos.com/node-manager created",
            "podmonitor.monitoring.coreos.com/early-oom created",
            "prometheusrule.monitoring.coreos.com/nodemgr created",
            "certificate.cert-manager.io/nodemgr-metrics created",
            "configmap/nodemgr-dashboard created",
        ],
    )
    .await;
}

/// The `[[bin]]` names of the crates whose binaries the image carries: the daemons
/// (`bins/Cargo.toml`) and the CLI (`cli/Cargo.toml`).
fn binaries() -> Vec<String> {
    let mut names = Vec::new();
    for crate_dir in ["bins", "cli"] {
        let manifest = std::fs::read_to_string(repo().join(crate_dir).join("Cargo.toml")).unwrap();
        let mut in_bin = false;
        for line in manifest.lines().map(str::trim) {
            if line.starts_with('[') {
                in_bin = line == "[[bin]]";
            } else if in_bin && let Some(value) = line.strip_prefix("name = ") {
                names.push(value.trim_matches('"').to_owned());
            }
        }
    }
    names
}

#[test]
fn the_image_copies_every_binary_exactly_once() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let bins = binaries();
    assert!(bins.len() >= 7, "{bins:?}");
    // The one copy loop: `for b in NAME...; do cp ".../$b" /out/; done`.
    let list = dockerfile
        .split("for b in ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the Dockerfile copies the binaries in a `for b in ...;` loop");
    let copied: Vec<&str> = list.split_whitespace().collect();
    let mut sorted = copied.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        copied.len(),
        "a binary copied twice: {copied:?}"
    );
    let mut expected: Vec<&str> = bins.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "the image lacks or adds binaries");
    // No other `cp` of a release binary besides the loop's.
    assert_eq!(
        dockerfile.matches("/release/").count(),
        1,
        "a binary is copied outside the loop:\n{dockerfile}"
    );
}

/// The dotted paths of every leaf of `values` (a map with content is walked into; scalars,
/// lists and empty maps are leaves).
fn value_paths(prefix: &str, values: &Value, out: &mut Vec<String>) {
    match values.as_object() {
        Some(map) if !map.is_empty() => {
            for (key, value) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                value_paths(&path, value, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

/// The values the README's "Install" table names: each row's first cell, `a.b`, `.c` (a
/// sibling of the cell's first value: `a.c`) and `a.*` (everything under `a`).
fn readme_values() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let table = readme
        .split("| value | default | what it does |")
        .nth(1)
        .expect("README has the values table");
    let mut named = Vec::new();
    for row in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cell = row.split('|').nth(1).unwrap();
        let mut parent = String::new();
        for entry in cell.split(',').map(|e| e.trim().trim_matches('`')) {
            let path = match entry.strip_prefix('.') {
                Some(sibling) => format!("{parent}.{sibling}"),
                None => {
                    parent = entry.rsplit_once('.').map_or("", |(p, _)| p).to_owned();
                    entry.to_owned()
                }
            };
            named.push(path.trim_end_matches(".*").to_owned());
        }
    }
    named
}

#[test]
fn the_readme_describes_every_value() {
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let mut paths = Vec::new();
    value_paths("", &values, &mut paths);
    assert!(paths.len() > 40, "{paths:?}");
    let named = readme_values();
    let undocumented: Vec<&String> = paths
        .iter()
        .filter(|p| {
            !named
                .iter()
                .any(|n| *p == n || p.starts_with(&format!("{n}.")))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "values the README's Install table does not describe: {undocumented:?}"
    );
    // And the table names no value the chart does not have.
    let unknown: Vec<&String> = named
        .iter()
        .filter(|n| {
            !paths
                .iter()
                .any(|p| p == *n || p.starts_with(&format!("{n}.")))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "the README names values the chart lacks: {unknown:?}"
    );
}
