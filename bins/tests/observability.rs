//! What an operator scrapes and reads, from the real binaries: node-manager's, early-oom's,
//! fencing-agent's and bashible-apiserver's `/metrics` pass `promtool check metrics` in the
//! classic text format and answer OpenMetrics when asked; Deckhouse's families are there under Deckhouse's names and
//! labels, counters start at zero; `/healthz` answers; early-oom without PSI stays up and says
//! `early_oom_psi_unavailable 1`; every metric the Grafana dashboard queries exists, and every
//! series an alert rule reads, with the labels its annotations name once the chart's monitors
//! scrape it; with `--metrics-auth kubernetes` a scrape (of node-manager, and of
//! bashible-apiserver) is allowed or refused by the API server's TokenReview and
//! SubjectAccessReview; `--log-format json` writes one JSON object per line, in the agents and in
//! the `nodemgr` CLI.
//!
//! promtool comes from `scripts/install.d/36-promtool.sh` (Debian's `prometheus` package); the
//! tests fail when it is missing.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::ImpactKind;
use nodemgr_testkit::auth_reviews::{self, AuthReviews, Permission, User};
use nodemgr_testkit::{Emulator, Fleet, FleetConfig, FleetNode, Generation};
use serde_json::{Value, json};

#[path = "support/promql.rs"]
mod promql;

use promql::{labels_by_metric, metric_names, metrics_in, template_labels};

const PSI_FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../nodemgr-core/tests/fixtures/psi"
);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child when dropped (a failed assertion leaves no process behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// GET `url` with optional `Accept` and bearer token: (status, content type, body).
async fn get(url: &str, accept: Option<&str>, token: Option<&str>) -> (u16, String, String) {
    let mut request = client().get(url);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            (
                status,
                content_type,
                response.text().await.unwrap_or_default(),
            )
        }
        Err(_) => (0, String::new(), String::new()),
    }
}

/// Waits (generously: the machine is loaded) until `url` answers 200 with `needle` in the body.
async fn scrape_until(url: &str, needle: &str, token: Option<&str>) -> String {
    let mut last = String::new();
    for _ in 0..600 {
        let (status, _, body) = get(url, None, token).await;
        if status == 200 && body.contains(needle) {
            return body;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{url} never showed {needle:?}; last body:\n{last}");
}

fn promtool() -> String {
    let binary = std::env::var("NODEMGR_PROMTOOL").unwrap_or_else(|_| "promtool".to_owned());
    assert!(
        Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok(),
        "promtool is missing: run scripts/install.d/36-promtool.sh (./scripts/test.sh does)"
    );
    binary
}

/// `promtool check metrics` of `text` (classic format on stdin): passes, with no lint finding.
fn promtool_check_metrics(what: &str, text: &str) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed on {what}:\n{}{}\n--- metrics ---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn emulator_with_a_group() -> (Arc<Emulator>, Fleet) {
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
                pods: 10,
            })
            .unwrap();
    }
    (emulator, fleet)
}

fn node_manager(emulator: &Emulator, port: u16, extra: &[&str]) -> Running {
    Running(
        Command::new(env!("CARGO_BIN_EXE_node-manager"))
            .arg("--kubeconfig")
            .arg(emulator.kubeconfig_path())
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .args([
                "--no-leader-election",
                "--resync",
                "1s",
                "--update-period",
                "1s",
            ])
            .args(["--controllers", "status,template,update,fencing"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn early_oom(emulator: &Emulator, psi: &Path, port: u16, extra: &[&str]) -> Running {
    let cgroups = tempfile::tempdir().unwrap();
    Running(
        Command::new(env!("CARGO_BIN_EXE_early-oom"))
            .args([
                "--node-name",
                "n1",
                "--sample-interval",
                "100ms",
                "--no-trigger",
                "--dry-run",
            ])
            .arg("--psi-file")
            .arg(psi)
            .arg("--cgroup-root")
            .arg(cgroups.path())
            .arg("--kubeconfig")
            .arg(emulator.kubeconfig_path())
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn fencing_agent(emulator: &Emulator, watchdog: &Path, port: u16) -> Running {
    Running(
        Command::new(env!("CARGO_BIN_EXE_fencing-agent"))
            .args([
                "--node-name",
                "n1",
                "--feed-interval",
                "100ms",
                "--check-interval",
                "100ms",
            ])
            .arg("--watchdog")
            .arg(watchdog)
            .arg("--kubeconfig")
            .arg(emulator.kubeconfig_path())
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The three binaries' classic `/metrics` text, after node-manager has seen the group's nodes.
async fn scrape_all(emulator: &Emulator) -> [String; 3] {
    let nm_port = free_port();
    let _nm = node_manager(emulator, nm_port, &[]);
    let nm = scrape_until(
        &format!("http://127.0.0.1:{nm_port}/metrics"),
        "d8_node_group_nodes{node_group_name=\"workers\"} 2",
        None,
    )
    .await;
    let oom_port = free_port();
    let _oom = early_oom(
        emulator,
        &Path::new(PSI_FIXTURES).join("idle.txt"),
        oom_port,
        &[],
    );
    let oom = scrape_until(
        &format!("http://127.0.0.1:{oom_port}/metrics"),
        "early_oom_psi_unavailable 0",
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let watchdog = dir.path().join("watchdog");
    std::fs::write(&watchdog, "").unwrap();
    let fa_port = free_port();
    let _fa = fencing_agent(emulator, &watchdog, fa_port);
    let fa = scrape_until(
        &format!("http://127.0.0.1:{fa_port}/metrics"),
        "fencing_agent_watchdog_armed 0",
        None,
    )
    .await;
    [nm, oom, fa]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binarys_metrics_pass_promtool_and_carry_deckhouses_families() {
    let (emulator, _fleet) = emulator_with_a_group().await;
    let [nm, oom, fa] = scrape_all(&emulator).await;
    promtool_check_metrics("node-manager", &nm);
    promtool_check_metrics("early-oom", &oom);
    promtool_check_metrics("fencing-agent", &fa);
    for expected in [
        // Deckhouse's families, Deckhouse's labels
        "node_group_node_status{node=\"w-0\",node_group=\"workers\",status=\"UpToDate\"} 1",
        "node_group_node_status{node=\"w-0\",node_group=\"workers\",status=\"WaitingForApproval\"} 0",
        "d8_node_group_ready{node_group_name=\"workers\"} 2",
        "d8_node_group_up_to_date{node_group_name=\"workers\"} 2",
        "d8_node_group_has_errors{node_group_name=\"workers\"} 0",
        "d8_node_group_standby{node_group_name=\"workers\"} 0",
        // counters of a group from the start, at zero, with the group's label
        "nodemgr_update_actions_total{node_group=\"workers\",action=\"approve\"} 0",
        "nodemgr_fencing_actions_total{node_group=\"workers\",action=\"delete_node\"} 0",
        // group-less counters too, before their first event
        "nodemgr_fencing_actions_total{node_group=\"\",action=\"paused_stale_cache\"} 0",
        "d8_node_group_standby_desired{node_group_name=\"workers\"} 0",
        "nodemgr_reconcile_errors_total{controller=\"csr\"} 0",
        "# TYPE nodemgr_build_info gauge",
        "nodemgr_build_info{version=\"",
    ] {
        assert!(
            nm.contains(expected),
            "node-manager lacks {expected:?}:\n{nm}"
        );
    }
    // One status per node.
    let ones = nm
        .lines()
        .filter(|l| l.starts_with("node_group_node_status{node=\"w-1\"") && l.ends_with(" 1"))
        .count();
    assert_eq!(ones, 1, "{nm}");
    for expected in ["early_oom_kills_total 0", "early_oom_build_info{version=\""] {
        assert!(
            oom.contains(expected),
            "early-oom lacks {expected:?}:\n{oom}"
        );
    }
    for expected in [
        "fencing_agent_feeds_total 0",
        "fencing_agent_build_info{version=\"",
    ] {
        assert!(
            fa.contains(expected),
            "fencing-agent lacks {expected:?}:\n{fa}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_open_metrics_when_asked_and_classic_text_otherwise() {
    let emulator = Emulator::start().await.unwrap();
    let port = free_port();
    let _oom = early_oom(
        &emulator,
        &Path::new(PSI_FIXTURES).join("idle.txt"),
        port,
        &[],
    );
    let url = format!("http://127.0.0.1:{port}/metrics");
    scrape_until(&url, "early_oom_kills_total", None).await;
    let (status, content_type, body) = get(&url, None, None).await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    assert!(
        body.contains("# TYPE early_oom_kills_total counter"),
        "{body}"
    );
    let (_, content_type, body) = get(&url, Some("text/plain"), None).await;
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(!body.contains("# EOF"), "{body}");
    let (_, content_type, body) = get(
        &url,
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
        None,
    )
    .await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(body.contains("# TYPE early_oom_kills counter"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    let (status, _, body) = get(&format!("http://127.0.0.1:{port}/healthz"), None, None).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_oom_without_psi_stays_up_reports_it_and_stops_cleanly() {
    let emulator = Emulator::start().await.unwrap();
    let port = free_port();
    let mut oom = early_oom(
        &emulator,
        Path::new("/nonexistent/memory.pressure"),
        port,
        &[],
    );
    let body = scrape_until(
        &format!("http://127.0.0.1:{port}/metrics"),
        "early_oom_psi_unavailable 1",
        None,
    )
    .await;
    promtool_check_metrics("early-oom without PSI", &body);
    let (status, _, _) = get(&format!("http://127.0.0.1:{port}/healthz"), None, None).await;
    assert_eq!(status, 200);
    assert!(oom.0.try_wait().unwrap().is_none(), "early-oom exited");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(i32::try_from(oom.0.id()).unwrap()).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let mut code = None;
    for _ in 0..300 {
        if let Some(status) = oom.0.try_wait().unwrap() {
            code = status.code();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(code, Some(0), "early-oom stops with 0 on SIGTERM");
}

/// What each scraped component exports, as `(monitor kind, monitor name, classic text)`: the
/// three binaries' `/metrics` after node-manager has seen the group's nodes. Families with a
/// series per event (a refused drain, a zone held back) have no line in a calm cluster's
/// `/metrics`: node-manager's own registry, with one such event each, adds them to its text.
async fn exported_by_component(emulator: &Emulator) -> Vec<(&'static str, &'static str, String)> {
    let [nm, oom, fa] = scrape_all(emulator).await;
    let events = nodemgr_k8s::metrics::Metrics::new();
    events.drain_refused("w-0", "refused by a PodDisruptionBudget");
    events
        .fencing_suppressed
        .get_or_create(&nodemgr_k8s::metrics::ZoneLabels { zone: "a".into() })
        .set(1);
    let with_events = nodemgr_k8s::exposition::encode(
        events.registry(),
        nodemgr_k8s::exposition::Format::Classic,
    );
    vec![
        (
            "ServiceMonitor",
            "node-manager",
            format!("{nm}{with_events}"),
        ),
        ("PodMonitor", "early-oom", oom),
        ("PodMonitor", "fencing-agent", fa),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported() {
    let (emulator, _fleet) = emulator_with_a_group().await;
    let exported: BTreeSet<String> = exported_by_component(&emulator)
        .await
        .iter()
        .flat_map(|(_, _, text)| metric_names(text))
        .collect();
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../charts/nodemgr/files/dashboards/nodemgr.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let mut queried = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queried.extend(metrics_in(target["expr"].as_str().unwrap()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"].as_str()
            && let Some(inner) = query.strip_prefix("label_values(")
        {
            queried.insert(inner.split(',').next().unwrap().trim().to_owned());
        }
    }
    assert!(queried.len() >= 15, "{queried:?}");
    let missing: Vec<_> = queried.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no binary exports: {missing:?}\nexported: {exported:?}"
    );
}

/// Series the alert rules read that nodemgr does not export, each with its source and the
/// labels it has there.
const EXTERNAL_SERIES: &[(&str, &str, &[&str])] = &[(
    "kube_node_status_condition",
    "kube-state-metrics: a Node's conditions (the update alerts fire only for Ready nodes)",
    &["node", "condition", "status"],
)];

/// The target labels the Prometheus Operator gives every series a monitor scrapes (its
/// defaults), besides the monitor's own relabelings.
const OPERATOR_TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
    "service",
];

/// Every alert rule of the chart: `(alert, expr, annotations)`.
fn alert_rules() -> Vec<(String, String, Vec<String>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/nodemgr/files/alerts");
    let mut rules = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let file: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for group in file["groups"].as_array().unwrap() {
            for rule in group["rules"].as_array().unwrap() {
                let Some(alert) = rule["alert"].as_str() else {
                    continue;
                };
                let annotations = rule["annotations"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter_map(|(_, v)| v.as_str().map(str::to_owned))
                    .collect();
                rules.push((
                    alert.to_owned(),
                    rule["expr"].as_str().unwrap().to_owned(),
                    annotations,
                ));
            }
        }
    }
    assert!(rules.len() >= 15, "{rules:?}");
    rules
}

/// The target labels each monitor of the chart (every option on) adds by its relabelings, by
/// `(kind, name)`.
fn monitor_target_labels() -> std::collections::BTreeMap<(String, String), BTreeSet<String>> {
    let helm = std::env::var("NODEMGR_HELM").unwrap_or_else(|_| "helm".to_owned());
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/nodemgr");
    let out = Command::new(&helm)
        .args(["template", "nodemgr", chart.to_str().unwrap()])
        .args(["--set", "metrics.serviceMonitor.enabled=true"])
        .args(["--set", "metrics.podMonitor.enabled=true"])
        .output()
        .unwrap_or_else(|e| panic!("helm is missing ({e}): run scripts/install.d/35-helm.sh"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let mut monitors = std::collections::BTreeMap::new();
    for doc in documents {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let endpoints = match kind.as_str() {
            "ServiceMonitor" => &doc["spec"]["endpoints"],
            "PodMonitor" => &doc["spec"]["podMetricsEndpoints"],
            _ => continue,
        };
        let labels: BTreeSet<String> = endpoints
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|e| e["relabelings"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r["targetLabel"].as_str().map(str::to_owned))
            .collect();
        monitors.insert(
            (kind, doc["metadata"]["name"].as_str().unwrap().to_owned()),
            labels,
        );
    }
    monitors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_and_label_an_alert_rule_reads_is_there_in_a_real_scrape() {
    let (emulator, _fleet) = emulator_with_a_group().await;
    let components = exported_by_component(&emulator).await;
    let monitors = monitor_target_labels();
    // The labels a series has once scraped: its own, the operator's, the monitor's relabelings.
    let mut labels_of: std::collections::BTreeMap<String, BTreeSet<String>> =
        std::collections::BTreeMap::new();
    let mut clashes = Vec::new();
    for (kind, name, text) in &components {
        let relabeled = monitors
            .get(&((*kind).to_owned(), (*name).to_owned()))
            .unwrap_or_else(|| panic!("the chart has no {kind} {name}"));
        let target: BTreeSet<String> = OPERATOR_TARGET_LABELS
            .iter()
            .map(|l| (*l).to_owned())
            .chain(relabeled.iter().cloned())
            .collect();
        for (metric, own) in labels_by_metric(text) {
            // A target label named like a label of the series renames the series' own to
            // `exported_<name>` (honorLabels off), and the rules would group by the wrong one.
            for clash in own.intersection(&target) {
                clashes.push(format!("{kind} {name}: {metric}'s label {clash}"));
            }
            labels_of
                .entry(metric)
                .or_default()
                .extend(own.into_iter().chain(target.iter().cloned()));
        }
        for family in metric_names(text) {
            labels_of
                .entry(family)
                .or_default()
                .extend(target.iter().cloned());
        }
    }
    assert!(
        clashes.is_empty(),
        "target labels hide series labels: {clashes:?}"
    );
    for (metric, _, labels) in EXTERNAL_SERIES {
        labels_of
            .entry((*metric).to_owned())
            .or_default()
            .extend(labels.iter().map(|l| (*l).to_owned()));
    }
    let mut unknown = Vec::new();
    let mut unlabeled = Vec::new();
    let mut used_external = BTreeSet::new();
    for (alert, expr, annotations) in alert_rules() {
        let metrics = metrics_in(&expr);
        assert!(!metrics.is_empty(), "{alert}: no metric found in {expr}");
        for metric in &metrics {
            if EXTERNAL_SERIES.iter().any(|(m, _, _)| m == metric) {
                used_external.insert(metric.clone());
            } else if !components
                .iter()
                .any(|(_, _, t)| metric_names(t).contains(metric))
            {
                unknown.push(format!("{alert}: {metric}"));
            }
        }
        for label in annotations.iter().flat_map(|a| template_labels(a)) {
            let carried = metrics
                .iter()
                .any(|m| labels_of.get(m).is_some_and(|l| l.contains(&label)));
            if !carried {
                unlabeled.push(format!("{alert}: $labels.{label} (series: {metrics:?})"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "alert rules read series no binary exports (add them, or to EXTERNAL_SERIES with their source): {unknown:?}"
    );
    assert!(
        unlabeled.is_empty(),
        "alert annotations read labels no scraped series has: {unlabeled:?}"
    );
    let listed: BTreeSet<String> = EXTERNAL_SERIES
        .iter()
        .map(|(m, _, _)| (*m).to_owned())
        .collect();
    assert_eq!(
        used_external, listed,
        "an external series no rule reads is listed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_is_allowed_or_refused_by_the_api_servers_reviews() {
    let (emulator, _fleet) = emulator_with_a_group().await;
    let reviews = auth_reviews::install(
        &emulator.address().to_string(),
        AuthReviews::new()
            .token(
                "prometheus-token",
                User {
                    name: "system:serviceaccount:monitoring:prometheus".into(),
                    groups: vec!["system:serviceaccounts".into()],
                },
            )
            .token(
                "intruder-token",
                User {
                    name: "system:serviceaccount:default:intruder".into(),
                    groups: vec!["system:serviceaccounts".into()],
                },
            )
            .grant(
                "system:serviceaccount:monitoring:prometheus",
                Permission::non_resource("get", "/metrics"),
            ),
    );
    let port = free_port();
    let _nm = node_manager(&emulator, port, &["--metrics-auth=kubernetes"]);
    let url = format!("https://127.0.0.1:{port}/metrics");
    let body = scrape_until(&url, "d8_node_group_nodes", Some("prometheus-token")).await;
    promtool_check_metrics("node-manager over HTTPS", &body);
    let (status, _, body) = get(&url, None, Some("intruder-token")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("intruder"), "{body}");
    let (status, _, _) = get(&url, None, Some("forged-token")).await;
    assert_eq!(status, 401);
    let (status, _, _) = get(&url, None, None).await;
    assert_eq!(status, 401);
    // The probes need no token; plain HTTP gets nothing.
    let (status, _, _) = get(&format!("https://127.0.0.1:{port}/healthz"), None, None).await;
    assert_eq!(status, 200);
    let (status, _, _) = get(&format!("http://127.0.0.1:{port}/metrics"), None, None).await;
    assert_ne!(status, 200);
    let reviews = reviews.lock().unwrap();
    assert!(reviews.token_reviews() >= 3 && reviews.access_reviews() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line() {
    let emulator = Emulator::start().await.unwrap();
    let port = free_port();
    let cgroups = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_early-oom"))
        .args(["--node-name", "n1", "--log-format", "json"])
        .args(["--psi-file", "/nonexistent/memory.pressure"])
        .arg("--cgroup-root")
        .arg(cgroups.path())
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    scrape_until(
        &format!("http://127.0.0.1:{port}/metrics"),
        "early_oom_psi_unavailable 1",
        None,
    )
    .await;
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let objects: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    assert!(
        objects.iter().any(|o| o["level"] == "WARN"
            && o["message"]
                .as_str()
                .is_some_and(|m| m.contains("early_oom_psi_unavailable 1"))),
        "{stderr}"
    );
    assert!(
        objects.iter().all(|o| o["level"].is_string()
            && o["timestamp"].is_string()
            && o["target"].is_string()),
        "{stderr}"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .args(["--log-format", "xml"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("text") && stderr.contains("json"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_agents_healthz_answers_without_a_token() {
    let emulator = Emulator::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let watchdog = dir.path().join("watchdog");
    std::fs::write(&watchdog, "").unwrap();
    let port = free_port();
    let _fa = fencing_agent(&emulator, &watchdog, port);
    scrape_until(
        &format!("http://127.0.0.1:{port}/metrics"),
        "fencing_agent_watchdog_armed",
        None,
    )
    .await;
    let (status, _, body) = get(&format!("http://127.0.0.1:{port}/healthz"), None, None).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    let (status, _, _) = get(&format!("http://127.0.0.1:{port}/nothing"), None, None).await;
    assert_eq!(status, 404);
}

#[test]
fn log_facade_events_reach_the_json_output() {
    // bashible builds an HTTPS-capable client at start; rustls announces its root certificates
    // through the `log` facade, which the bridge forwards as tracing events (`log.target`).
    let root = tempfile::tempdir().unwrap();
    let token = root.path().join("token");
    std::fs::write(&token, "t\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bashible"))
        .args([
            "--log-format",
            "json",
            "--bundle-server",
            "http://127.0.0.1:9",
        ])
        .arg("--bundle-token-file")
        .arg(&token)
        .args(["--node-name", "n1", "--group", "g"])
        .arg("--root")
        .arg(root.path())
        .env("RUST_LOG", "debug")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let bridged: Vec<Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|o| o["log.target"].is_string())
        .collect();
    assert!(
        !bridged.is_empty(),
        "no event of a `log` user in the JSON output:\n{stderr}"
    );
    assert!(
        bridged
            .iter()
            .all(|o| o["level"].is_string() && o["message"].is_string())
    );
}

/// bashible-apiserver in cluster mode against `emulator` (a NodeGroup and a
/// NodeGroupConfiguration for it), HTTPS on `port`.
fn bashible_apiserver(emulator: &Emulator, port: u16, extra: &[&str]) -> Running {
    for ns in ["default", "d8-cloud-instance-manager", "kube-system"] {
        if emulator.get("v1", "Namespace", "", ns).is_none() {
            emulator
                .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .unwrap();
        }
    }
    if emulator
        .get(
            "deckhouse.io/v1alpha1",
            "NodeGroupConfiguration",
            "",
            "hello.sh",
        )
        .is_none()
    {
        // What nodes join with: the API endpoints and the CA.
        emulator
            .seed(
                json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
                "ports": [{"name": "https", "port": 6443}]}),
            )
            .unwrap();
        emulator
            .seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "kube-root-ca.crt", "namespace": "d8-cloud-instance-manager"},
                "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}))
            .unwrap();
        emulator
            .seed(
                json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroupConfiguration",
                "metadata": {"name": "hello.sh"},
                "spec": {"nodeGroups": ["workers"], "content": "echo hello\n"}}),
            )
            .unwrap();
    }
    Running(
        Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"))
            .args(["--from-cluster", "--tls-name", "127.0.0.1"])
            .arg("--kubeconfig")
            .arg(emulator.kubeconfig_path())
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bashible_apiservers_metrics_pass_promtool_negotiate_and_can_require_kubernetes_authorization()
 {
    let (emulator, _fleet) = emulator_with_a_group().await;
    let port = free_port();
    let server = bashible_apiserver(&emulator, port, &[]);
    let url = format!("https://127.0.0.1:{port}/metrics");
    let classic = scrape_until(
        &url,
        "d8_node_group_configurations_total{node_group=\"workers\"} 1",
        None,
    )
    .await;
    promtool_check_metrics("bashible-apiserver", &classic);
    for expected in [
        "# TYPE d8_node_group_configurations_total untyped",
        "bashible_apiserver_groups{state=\"fresh\"} 1",
        "# TYPE bashible_apiserver_build_info gauge",
        "bashible_apiserver_build_info{version=\"",
    ] {
        assert!(
            classic.contains(expected),
            "bashible-apiserver lacks {expected:?}:\n{classic}"
        );
    }
    let (status, content_type, _) = get(&url, None, None).await;
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let (_, content_type, body) = get(&url, Some("text/plain"), None).await;
    assert!(content_type.starts_with("text/plain"), "{content_type}");
    assert!(!body.contains("# EOF"), "{body}");
    let (_, content_type, body) = get(
        &url,
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
        None,
    )
    .await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(
        body.contains("# TYPE bashible_apiserver_build info"),
        "{body}"
    );
    assert!(body.ends_with("# EOF\n"), "{body}");
    drop(server);

    // With --metrics-auth kubernetes, the API server's reviews decide; the probes stay open.
    let reviews = auth_reviews::install(
        &emulator.address().to_string(),
        AuthReviews::new()
            .token(
                "prometheus-token",
                User {
                    name: "system:serviceaccount:monitoring:prometheus".into(),
                    groups: vec!["system:serviceaccounts".into()],
                },
            )
            .token(
                "intruder-token",
                User {
                    name: "system:serviceaccount:default:intruder".into(),
                    groups: vec!["system:serviceaccounts".into()],
                },
            )
            .grant(
                "system:serviceaccount:monitoring:prometheus",
                Permission::non_resource("get", "/metrics"),
            ),
    );
    let port = free_port();
    let _server = bashible_apiserver(&emulator, port, &["--metrics-auth=kubernetes"]);
    let url = format!("https://127.0.0.1:{port}/metrics");
    let body = scrape_until(&url, "bashible_apiserver_groups", Some("prometheus-token")).await;
    promtool_check_metrics("bashible-apiserver behind Kubernetes authorization", &body);
    let (status, _, body) = get(&url, None, Some("intruder-token")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(get(&url, None, Some("forged-token")).await.0, 401);
    assert_eq!(get(&url, None, None).await.0, 401);
    let (status, _, _) = get(&format!("https://127.0.0.1:{port}/healthz"), None, None).await;
    assert_eq!(status, 200);
    let reviews = reviews.lock().unwrap();
    assert!(reviews.token_reviews() >= 3 && reviews.access_reviews() >= 2);
}

#[test]
fn bashible_apiserver_refuses_kubernetes_metrics_auth_over_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"))
        .args([
            "--metrics-auth",
            "kubernetes",
            "--token",
            "node-token-0123456789=*",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--from-cluster"), "{stderr}");
}
