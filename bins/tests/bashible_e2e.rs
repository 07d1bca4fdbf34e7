//! The node side end to end, with real processes: the API emulator (in process), the
//! `node-manager` binary (status and update controllers), the `bashible-apiserver` binary in
//! cluster mode (watching the emulator, serving over TLS with the self-signed certificate it
//! stores in its Secret, writing `d8-cloud-instance-manager/configuration-checksums`), and
//! three `bashible` agent processes, each in its own `--root` and trusting that certificate,
//! each with a stand-in kubelet (a task here) that renews the node's Lease, reports it Ready
//! and copies the `maxPods` of the kubelet configuration the agent rendered into its root onto
//! the Node's status. A change is made once, in the emulator; everything else follows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nodemgr_core::model::keys;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

const TOKEN: &str = "e2e-node-token-0123456789";
const NODES: [&str; 3] = ["node-0", "node-1", "node-2"];
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn base_spec() -> Value {
    json!({"nodeType": "CloudPermanent", "update": {"maxConcurrent": 1}, "kubelet": {"maxPods": 110}})
}

fn group_object(spec: &Value) -> Value {
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "worker"},
        "spec": spec})
}

/// Fields drop in order: the processes stop before their directory and the emulator go.
struct Cluster {
    agents: Vec<Option<Process>>,
    _manager: Process,
    _apiserver: Process,
    kubelets: Vec<tokio::task::JoinHandle<()>>,
    server: String,
    dir: tempfile::TempDir,
    emulator: Arc<Emulator>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for k in &self.kubelets {
            k.abort();
        }
    }
}

fn root(dir: &Path, node: &str) -> PathBuf {
    dir.join("roots").join(node)
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    jiff_like(secs)
}

/// RFC 3339 UTC of Unix seconds (days from civil, Howard Hinnant's algorithm).
fn jiff_like(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The stand-in kubelet of one node: Lease, Ready, and the rendered maxPods on the status.
fn kubelet(emulator: Arc<Emulator>, node: String, root: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let now = SystemTime::now();
            let stamp = rfc3339(now);
            let micros = {
                let mut s = stamp.clone();
                s.pop();
                format!("{s}.000000Z")
            };
            let _ = emulator.merge_patch(
                "coordination.k8s.io/v1",
                "Lease",
                keys::NODE_LEASE_NAMESPACE,
                &node,
                &json!({"spec": {"renewTime": micros}}),
                false,
            );
            let pods = std::fs::read_to_string(root.join("etc/kubernetes/kubelet-config.yaml"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|c| c["maxPods"].as_i64())
                .unwrap_or(110);
            let _ = emulator.merge_patch(
                "v1",
                "Node",
                "",
                &node,
                &json!({"status": {
                    "capacity": {"cpu": "4", "memory": "16Gi", "pods": pods.to_string()},
                    "allocatable": {"cpu": "4", "memory": "16Gi", "pods": pods.to_string()},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "stand-in kubelet", "lastHeartbeatTime": stamp, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
                true,
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

/// Seeds what bashible-apiserver reads besides NodeGroups: the API server's EndpointSlice
/// and the cluster CA ConfigMap.
fn seed_cluster_context(emulator: &Emulator) {
    if emulator.get("v1", "Namespace", "", "default").is_none() {
        emulator
            .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}))
            .unwrap();
    }
    emulator
        .seed(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}),
        )
        .unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": keys::NAMESPACE},
            "data": {"ca.crt": CA}}))
        .unwrap();
}

/// Starts bashible-apiserver in cluster mode against `emulator`; returns it, its `https://`
/// URL, and writes the serving certificate it stored to `dir/server-ca.crt`.
fn start_apiserver(emulator: &Emulator, dir: &Path) -> (Process, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"))
        .args([
            "--from-cluster",
            "--listen",
            "127.0.0.1:0",
            "--debounce",
            "200ms",
        ])
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .args(["--tls-name", "127.0.0.1"])
        .arg("--tokens-file")
        .arg(dir.join("tokens"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let secret = emulator
        .get("v1", "Secret", keys::NAMESPACE, "bashible-apiserver-tls")
        .expect("bashible-apiserver stored its certificate");
    let cert =
        nodemgr_k8s::cluster::decode_checksum(secret["data"]["tls.crt"].as_str().unwrap()).unwrap();
    std::fs::write(dir.join("server-ca.crt"), cert).unwrap();
    (Process(child), format!("https://{address}"))
}

/// An HTTPS client trusting the server's certificate in `dir`.
fn https_client(dir: &Path) -> reqwest::blocking::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pem = std::fs::read(dir.join("server-ca.crt")).unwrap();
    reqwest::blocking::Client::builder()
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(&pem).unwrap())
        .build()
        .unwrap()
}

fn served_checksum(dir: &Path, server: &str) -> String {
    let text = https_client(dir)
        .get(format!("{server}/v1/groups/worker/checksum"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    body["checksum"].as_str().unwrap().to_owned()
}

/// The checksum of `worker` in the checksums Secret bashible-apiserver keeps.
fn published_checksum(emulator: &Emulator) -> Option<String> {
    emulator
        .get("v1", "Secret", keys::NAMESPACE, "configuration-checksums")
        .and_then(|s| s["data"]["worker"].as_str().map(str::to_owned))
        .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
}

impl Cluster {
    async fn start() -> Cluster {
        Self::start_with(base_spec()).await
    }

    async fn start_with(spec: Value) -> Cluster {
        let emulator = Arc::new(Emulator::start().await.unwrap());
        for crd in nodemgr_k8s::crd::definitions().unwrap() {
            emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
        }
        for ns in [
            "nodemgr-system",
            keys::NAMESPACE,
            keys::NODE_LEASE_NAMESPACE,
        ] {
            if emulator.get("v1", "Namespace", "", ns).is_some() {
                continue;
            }
            emulator
                .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .unwrap();
        }
        emulator.seed(group_object(&spec)).unwrap();
        seed_cluster_context(&emulator);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tokens"), format!("{TOKEN} worker\n")).unwrap();
        let (apiserver, server) =
            tokio::task::block_in_place(|| start_apiserver(&emulator, dir.path()));
        let checksum = tokio::task::block_in_place(|| served_checksum(dir.path(), &server));
        assert_eq!(
            published_checksum(&emulator).as_deref(),
            Some(checksum.as_str()),
            "bashible-apiserver publishes the checksum it serves before it listens"
        );
        let mut kubelets = Vec::new();
        for node in NODES {
            let root = root(dir.path(), node);
            std::fs::create_dir_all(root.join("var/lib/bashible")).unwrap();
            std::fs::create_dir_all(root.join("etc/kubernetes")).unwrap();
            std::fs::copy(
                emulator.kubeconfig_path(),
                root.join("etc/kubernetes/kubelet.conf"),
            )
            .unwrap();
            std::fs::write(root.join("var/lib/bashible/bundle-token"), TOKEN).unwrap();
            // Bootstrapped a moment ago: the first pass applies without asking.
            std::fs::write(root.join("var/lib/bashible/first_run"), "").unwrap();
            emulator
                .seed(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
                    "labels": {keys::LABEL_NODE_GROUP: "worker", keys::LABEL_NODE_TYPE: "CloudPermanent",
                        keys::LABEL_HOSTNAME: node}},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
                .unwrap();
            emulator
                .seed(
                    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": node, "namespace": keys::NODE_LEASE_NAMESPACE},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": 40}}),
                )
                .unwrap();
            kubelets.push(kubelet(emulator.clone(), node.to_owned(), root));
        }
        let manager = Command::new(env!("CARGO_BIN_EXE_node-manager"))
            .arg("--kubeconfig")
            .arg(emulator.kubeconfig_path())
            .arg("--metrics-address=127.0.0.1:0")
            .args(["--no-leader-election", "--controllers", "status,update"])
            .args(["--resync", "1s", "--update-period", "300ms"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut cluster = Cluster {
            emulator,
            dir,
            server,
            _apiserver: apiserver,
            _manager: Process(manager),
            agents: Vec::new(),
            kubelets,
        };
        for i in 0..NODES.len() {
            let agent = cluster.start_agent(i);
            cluster.agents.push(Some(agent));
        }
        cluster
    }

    fn start_agent(&self, index: usize) -> Process {
        let node = NODES[index];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{node}.log")))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_bashible"))
            .args(["--bundle-server", &self.server, "--node-name", node])
            .arg("--bundle-server-ca")
            .arg(self.dir.path().join("server-ca.crt"))
            .arg("--root")
            .arg(root(self.dir.path(), node))
            .args(["--loop", "1s", "--poll-interval", "300ms"])
            .args(["--step-retry", "500ms", "--error-backoff", "300ms"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Process(child)
    }

    fn agent_log(&self, node: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{node}.log"))).unwrap_or_default()
    }

    /// Changes the group's spec (a merge patch) in the emulator, and waits for
    /// bashible-apiserver to serve the new checksum and publish it in the checksums Secret.
    fn change_spec(&self, patch: Value, old: &str) -> String {
        self.emulator
            .merge_patch(
                "deckhouse.io/v1",
                "NodeGroup",
                "",
                "worker",
                &json!({ "spec": patch }),
                false,
            )
            .unwrap();
        let started = Instant::now();
        let deadline = started + Duration::from_secs(20);
        loop {
            if let Some(now) = published_checksum(&self.emulator)
                && now != old
            {
                println!(
                    "NodeGroup edit -> checksum Secret changed in {} ms",
                    started.elapsed().as_millis()
                );
                assert_eq!(self.served(), now, "the Secret holds the served checksum");
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "bashible-apiserver did not publish a new checksum"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn served(&self) -> String {
        tokio::task::block_in_place(|| served_checksum(self.dir.path(), &self.server))
    }

    fn change_max_pods(&self, max_pods: u32, old: &str) -> String {
        self.change_spec(json!({"kubelet": {"maxPods": max_pods}}), old)
    }

    async fn converged(&self) -> String {
        let first = self.served();
        eventually(self, "every node applies its first bundle", 60, || {
            self.all_report(&first)
        })
        .await;
        first
    }

    fn node(&self, name: &str) -> Value {
        self.emulator.get("v1", "Node", "", name).unwrap()
    }

    fn annotation(&self, node: &str, key: &str) -> Option<String> {
        self.node(node)["metadata"]["annotations"][key]
            .as_str()
            .map(str::to_owned)
    }

    fn all_report(&self, checksum: &str) -> bool {
        NODES.iter().all(|n| {
            self.annotation(n, keys::ANNOTATION_CONFIGURATION_CHECKSUM)
                .as_deref()
                == Some(checksum)
                && self.annotation(n, keys::ANNOTATION_APPROVED).is_none()
        })
    }

    fn dump(&self) -> String {
        let mut out = String::new();
        for n in NODES {
            out.push_str(&format!(
                "--- {n}: {}\n{}\n",
                self.node(n)["metadata"]["annotations"],
                self.agent_log(n)
                    .lines()
                    .filter(|l| !l.starts_with(' '))
                    .take(40)
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        out
    }
}

async fn eventually(cluster: &Cluster, what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "timed out after {secs}s waiting for {what}\n{}",
        cluster.dump()
    );
}

fn checksum_file(dir: &Path, node: &str) -> Option<String> {
    std::fs::read_to_string(root(dir, node).join("var/lib/bashible/configuration_checksum"))
        .ok()
        .map(|t| t.trim().to_owned())
}

fn kubelet_max_pods(dir: &Path, node: &str) -> Option<i64> {
    std::fs::read_to_string(root(dir, node).join("etc/kubernetes/kubelet-config.yaml"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|c| c["maxPods"].as_i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_pods_change_rolls_onto_every_root_under_max_concurrent() {
    let cluster = Cluster::start().await;
    let first = cluster.served();
    // The agent annotates the Node first and removes its first_run marker after: wait for
    // both, since a check between the two would see the marker still there.
    let first_run_gone = |node: &str| {
        !root(cluster.dir.path(), node)
            .join("var/lib/bashible/first_run")
            .exists()
    };
    eventually(
        &cluster,
        "every node applies its first bundle and removes first_run",
        60,
        || cluster.all_report(&first) && NODES.iter().all(|n| first_run_gone(n)),
    )
    .await;
    for node in NODES {
        assert_eq!(kubelet_max_pods(cluster.dir.path(), node), Some(110));
    }

    let started = Instant::now();
    let second = tokio::task::block_in_place(|| cluster.change_max_pods(150, &first));
    let mut most_approved = 0;
    let mut most_updating = 0;
    eventually(&cluster, "every node reports the new checksum", 120, || {
        let approved = NODES
            .iter()
            .filter(|n| cluster.annotation(n, keys::ANNOTATION_APPROVED).is_some())
            .count();
        // A node whose kubelet config changed but whose checksum is not reported yet is
        // being updated.
        let updating = NODES
            .iter()
            .filter(|n| {
                kubelet_max_pods(cluster.dir.path(), n) == Some(150)
                    && cluster
                        .annotation(n, keys::ANNOTATION_CONFIGURATION_CHECKSUM)
                        .as_deref()
                        != Some(second.as_str())
            })
            .count();
        most_approved = most_approved.max(approved);
        most_updating = most_updating.max(updating);
        // The checksum file is written after the annotation: wait for it too.
        cluster.all_report(&second)
            && NODES
                .iter()
                .all(|n| checksum_file(cluster.dir.path(), n).as_deref() == Some(second.as_str()))
    })
    .await;
    println!(
        "3-node kubelet rollout (maxPods 110 -> 150, maxConcurrent 1): {:.1}s",
        started.elapsed().as_secs_f64()
    );
    assert!(most_approved <= 1, "{most_approved} nodes approved at once");
    assert!(most_updating <= 1, "{most_updating} nodes updating at once");
    // node-manager observed the new spec and bashible-apiserver processed it: both name it by
    // the same checksum, so the group reads Synced.
    eventually(
        &cluster,
        "the group's new spec observed and processed",
        20,
        || {
            let group = cluster
                .emulator
                .get("deckhouse.io/v1", "NodeGroup", "", "worker")
                .unwrap_or_default();
            let sync = &group["status"]["deckhouse"];
            let spec = serde_json::from_value::<nodemgr_core::NodeGroup>(group.clone())
                .map(|g| g.spec_checksum())
                .unwrap_or_default();
            sync["synced"] == "True"
                && sync["observed"]["checkSum"] == spec.as_str()
                && sync["processed"]["checkSum"] == spec.as_str()
        },
    )
    .await;
    for node in NODES {
        assert_eq!(
            kubelet_max_pods(cluster.dir.path(), node),
            Some(150),
            "{node}"
        );
        assert_eq!(
            cluster
                .annotation(node, keys::ANNOTATION_CONFIGURATION_CHECKSUM)
                .as_deref(),
            Some(second.as_str())
        );
        assert_eq!(
            checksum_file(cluster.dir.path(), node).as_deref(),
            Some(second.as_str())
        );
        assert!(
            cluster.agent_log(node).contains("waiting-for-approval"),
            "{node} asked for approval"
        );
    }
    let pods_on_status = |n: &str| cluster.node(n)["status"]["allocatable"]["pods"].clone();
    eventually(&cluster, "the kubelets report 150 pods", 10, || {
        NODES.iter().all(|n| pods_on_status(n) == "150")
    })
    .await;
    // No token in any log line.
    for node in NODES {
        assert!(!cluster.agent_log(node).contains(TOKEN));
    }

    // One pass on an up-to-date node (what the systemd timer starts every minute) ends by
    // itself: lock, bundle fetch, Node read, nothing to do. Timed for the record, not asserted.
    let mut cluster = cluster;
    drop(cluster.agents[0].take());
    let runs: u32 = 10;
    let started = Instant::now();
    for _ in 0..runs {
        let status = Command::new(env!("CARGO_BIN_EXE_bashible"))
            .args(["--bundle-server", &cluster.server, "--node-name", "node-0"])
            .arg("--bundle-server-ca")
            .arg(cluster.dir.path().join("server-ca.crt"))
            .arg("--root")
            .arg(root(cluster.dir.path(), "node-0"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .status()
            .unwrap();
        assert!(status.success(), "{status}");
    }
    println!(
        "one no-op agent pass (bundle fetch included), mean of {runs}: {:.1} ms",
        started.elapsed().as_secs_f64() * 1000.0 / f64::from(runs)
    );
    assert_eq!(
        cluster
            .annotation("node-0", keys::ANNOTATION_CONFIGURATION_CHECKSUM)
            .as_deref(),
        Some(second.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_step_emits_an_event_and_is_retried_until_it_succeeds() {
    let cluster = Cluster::start().await;
    let first = cluster.served();
    eventually(&cluster, "every node applies its first bundle", 60, || {
        cluster.all_report(&first)
    })
    .await;
    // node-1's kubelet configuration cannot be written: a directory sits where the step writes
    // its temporary file.
    let blocker =
        root(cluster.dir.path(), "node-1").join("etc/kubernetes/kubelet-config.yaml.nodemgr-new");
    std::fs::create_dir_all(&blocker).unwrap();
    let second = tokio::task::block_in_place(|| cluster.change_max_pods(170, &first));
    eventually(
        &cluster,
        "a BashibleStepFailed Event about node-1",
        90,
        || {
            cluster
                .emulator
                .list("events.k8s.io/v1", "Event", Some("default"))
                .iter()
                .any(|e| {
                    e["reason"] == "BashibleStepFailed"
                        && e["regarding"]["name"] == "node-1"
                        && e["note"]
                            .as_str()
                            .is_some_and(|n| n.contains("030_kubelet.sh"))
                })
        },
    )
    .await;
    assert_ne!(
        cluster
            .annotation("node-1", keys::ANNOTATION_CONFIGURATION_CHECKSUM)
            .as_deref(),
        Some(second.as_str()),
        "no checksum is reported for a bundle whose step failed"
    );
    std::fs::remove_dir(&blocker).unwrap();
    eventually(&cluster, "every node reports the new checksum", 120, || {
        cluster.all_report(&second)
    })
    .await;
    assert_eq!(kubelet_max_pods(cluster.dir.path(), "node-1"), Some(170));
    let log = cluster.agent_log("node-1");
    assert!(log.matches("running step").count() > 0);
}

fn containerd_v3(dir: &Path, node: &str) -> bool {
    std::fs::read_to_string(root(dir, node).join("etc/containerd/config.toml"))
        .is_ok_and(|t| t.lines().any(|l| l.trim() == "version = 3"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_manual_mode_no_disruptive_step_runs_until_the_operator_approves() {
    let mut spec = base_spec();
    spec["disruptions"] = json!({"approvalMode": "Manual"});
    let cluster = Cluster::start_with(spec).await;
    let first = cluster.converged().await;
    // A new container runtime: the containerd step carries a new disruption key.
    let second = cluster.change_spec(json!({"cri": {"type": "ContainerdV2"}}), &first);
    let mut approved_by_hand = Vec::new();
    eventually(&cluster, "every node runs the new runtime", 120, || {
        for node in NODES {
            let asks = cluster
                .annotation(node, keys::ANNOTATION_DISRUPTION_REQUIRED)
                .is_some();
            let approved = cluster
                .annotation(node, keys::ANNOTATION_DISRUPTION_APPROVED)
                .is_some();
            // The invariant: the runtime changes only on an approved node.
            assert!(
                !containerd_v3(cluster.dir.path(), node) || approved || approved_by_hand.contains(&node),
                "{node} runs the new runtime without disruption-approved\n{}",
                cluster.dump()
            );
            if asks && !approved && !approved_by_hand.contains(&node) {
                // Let the agent sit a moment: nothing may change meanwhile.
                std::thread::sleep(Duration::from_millis(1500));
                assert!(!containerd_v3(cluster.dir.path(), node), "{node}");
                cluster
                    .emulator
                    .merge_patch(
                        "v1",
                        "Node",
                        "",
                        node,
                        &json!({"metadata": {"annotations": {keys::ANNOTATION_DISRUPTION_APPROVED: ""}}}),
                        false,
                    )
                    .unwrap();
                approved_by_hand.push(node);
            }
        }
        cluster.all_report(&second)
    })
    .await;
    assert_eq!(approved_by_hand.len(), NODES.len(), "every node asked");
    for node in NODES {
        assert!(containerd_v3(cluster.dir.path(), node), "{node}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_disruptive_change_drains_before_the_disruption_is_approved() {
    let cluster = Cluster::start_with(base_spec()).await;
    let first = cluster.converged().await;
    let second = cluster.change_spec(json!({"cri": {"type": "ContainerdV2"}}), &first);
    let mut drained_seen = Vec::new();
    let mut approved_seen = Vec::new();
    eventually(&cluster, "every node runs the new runtime", 120, || {
        for node in NODES {
            let object = cluster.node(node);
            let annotations = &object["metadata"]["annotations"];
            let cordoned = object["spec"]["unschedulable"] == true;
            if (!annotations[keys::ANNOTATION_DRAINED].is_null() || cordoned)
                && !drained_seen.contains(&node)
            {
                drained_seen.push(node);
            }
            if !annotations[keys::ANNOTATION_DISRUPTION_APPROVED].is_null()
                && !approved_seen.contains(&node)
            {
                assert!(
                    drained_seen.contains(&node),
                    "{node} got disruption-approved before it was drained: {object}"
                );
                approved_seen.push(node);
            }
            assert!(
                !containerd_v3(cluster.dir.path(), node) || approved_seen.contains(&node),
                "{node} runs the new runtime before its disruption was approved"
            );
        }
        cluster.all_report(&second)
    })
    .await;
    assert_eq!(approved_seen.len(), NODES.len(), "{approved_seen:?}");
    // Finished: the controller uncordoned them.
    eventually(&cluster, "every node schedulable again", 30, || {
        NODES
            .iter()
            .all(|n| cluster.node(n)["spec"]["unschedulable"] != true)
    })
    .await;
}

/// Times each step was started, from the agent's log (`running step` lines), after `offset`.
fn step_starts(log: &str, offset: usize, step: &str) -> usize {
    log.get(offset..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("running step") && l.contains(&format!("step=\"{step}\"")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_step_resumes_without_running_a_finished_step_again() {
    let mut cluster = Cluster::start().await;
    let first = cluster.converged().await;
    // node-0's kubelet step will block reading the CPU count from a FIFO until the test writes
    // to it: a step that hangs as long as the test wants, and whose every read the test counts.
    let fifo = root(cluster.dir.path(), "node-0").join("proc/cpuinfo");
    std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let offset = cluster.agent_log("node-0").len();
    let second = cluster.change_max_pods(130, &first);
    eventually(&cluster, "node-0 inside its kubelet step", 90, || {
        step_starts(&cluster.agent_log("node-0"), offset, "030_kubelet.sh") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut killed = cluster.agents[0].take().unwrap();
    killed.0.kill().unwrap(); // SIGKILL, mid-step
    let _ = killed.0.wait();
    drop(killed);
    cluster.agents[0] = Some(cluster.start_agent(0));
    eventually(
        &cluster,
        "the restarted agent kills the step left behind",
        30,
        || {
            cluster
                .agent_log("node-0")
                .contains("killed a step left running")
        },
    )
    .await;
    eventually(&cluster, "node-0 runs its kubelet step again", 30, || {
        step_starts(&cluster.agent_log("node-0"), offset, "030_kubelet.sh") == 2
    })
    .await;
    // Let the step read its CPU count: one read, by the second run.
    let reads = std::thread::spawn(move || {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
        f.write_all(b"processor\t: 0\n").unwrap();
    });
    eventually(&cluster, "every node reports the new checksum", 120, || {
        cluster.all_report(&second)
    })
    .await;
    reads.join().unwrap();
    let log = cluster.agent_log("node-0");
    for step in ["001_ca.sh", "010_os_settings.sh", "020_containerd.sh"] {
        assert_eq!(
            step_starts(&log, offset, step),
            1,
            "{step} finished before the kill and must not run again\n{log}"
        );
    }
    assert_eq!(step_starts(&log, offset, "030_kubelet.sh"), 2, "{log}");
    assert_eq!(
        step_starts(&log, offset, "090_cleanup_script.sh"),
        1,
        "{log}"
    );
    assert_eq!(kubelet_max_pods(cluster.dir.path(), "node-0"), Some(130));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_bundle_server_and_a_deleted_node_are_logged_and_retried() {
    let cluster = Cluster::start().await;
    let first = cluster.converged().await;

    // The Node is deleted under its agent, then registered again (without the checksum).
    let node = cluster.node("node-0");
    cluster.emulator.delete("v1", "Node", "", "node-0").unwrap();
    eventually(
        &cluster,
        "node-0's agent notices the Node is gone",
        30,
        || cluster.agent_log("node-0").contains("does not exist"),
    )
    .await;
    let mut again = node.clone();
    again["metadata"] = json!({"name": "node-0", "labels": node["metadata"]["labels"]});
    cluster.emulator.seed(again).unwrap();
    eventually(&cluster, "node-0 reports its checksum again", 30, || {
        cluster
            .annotation("node-0", keys::ANNOTATION_CONFIGURATION_CHECKSUM)
            .as_deref()
            == Some(first.as_str())
    })
    .await;

    // An agent whose bundle server does not answer: a clear log line, retries, no checksum.
    let lost = root(cluster.dir.path(), "lost");
    std::fs::create_dir_all(lost.join("var/lib/bashible")).unwrap();
    std::fs::write(lost.join("var/lib/bashible/bundle-token"), TOKEN).unwrap();
    cluster
        .emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "lost",
            "labels": {keys::LABEL_NODE_GROUP: "worker"}}}),
        )
        .unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log_path = cluster.dir.path().join("lost.log");
    let _agent = Process(
        Command::new(env!("CARGO_BIN_EXE_bashible"))
            .args(["--bundle-server", &format!("http://127.0.0.1:{closed}")])
            .args(["--node-name", "lost", "--error-backoff", "200ms"])
            .arg("--kubeconfig")
            .arg(cluster.emulator.kubeconfig_path())
            .arg("--root")
            .arg(&lost)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    eventually(
        &cluster,
        "the agent retries the unreachable server",
        30,
        || log().matches("is unreachable").count() >= 2,
    )
    .await;
    assert!(!log().contains(TOKEN), "{}", log());
    assert!(
        cluster.emulator.get("v1", "Node", "", "lost").unwrap()["metadata"]["annotations"]
            [keys::ANNOTATION_CONFIGURATION_CHECKSUM]
            .is_null()
    );
    assert!(
        !lost
            .join("var/lib/bashible/configuration_checksum")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_configuration_and_a_node_user_roll_onto_every_root() {
    let cluster = Cluster::start().await;
    let first = cluster.converged().await;
    cluster
        .emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroupConfiguration",
            "metadata": {"name": "motd.sh"},
            "spec": {"weight": 50, "nodeGroups": ["worker"],
                "content": "mkdir -p \"$BB_ROOT/etc\"\necho 'configured by nodemgr' >\"$BB_ROOT/etc/motd\"\n"}}))
        .unwrap();
    cluster
        .emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeUser",
            "metadata": {"name": "alice"},
            "spec": {"uid": 1501, "isSudoer": false, "nodeGroups": ["worker"],
                "sshPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJx alice@example"]}}))
        .unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let second = loop {
        match published_checksum(&cluster.emulator) {
            Some(now) if now != first => break now,
            _ => {}
        }
        assert!(Instant::now() < deadline, "no new checksum published");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    println!(
        "NodeGroupConfiguration + NodeUser created -> checksum Secret changed in {} ms",
        started.elapsed().as_millis()
    );
    eventually(&cluster, "every node reports the new checksum", 120, || {
        cluster.all_report(&second)
    })
    .await;
    for node in NODES {
        // In a test root the operator's script is written, not run (docs/bundles.md).
        let script = std::fs::read_to_string(
            root(cluster.dir.path(), node).join("var/lib/bashible/configurations/050_motd.sh"),
        )
        .unwrap_or_default();
        assert!(
            script.contains("configured by nodemgr"),
            "{node}: {script:?}"
        );
        let passwd = std::fs::read_to_string(root(cluster.dir.path(), node).join("etc/passwd"))
            .unwrap_or_default();
        assert!(
            passwd.lines().any(|l| l.starts_with("alice:x:1501:")),
            "{node}: {passwd}"
        );
    }

    // A user of the same name that nodemgr did not create blocks the NodeUser carol: the
    // agent of the node being updated (one at a time: maxConcurrent 1) reports the error in
    // carol's status under its node name, and clears it once the step applies.
    let foreign = "carol:x:2000:2000::/home/carol:/bin/bash\n";
    for node in NODES {
        let passwd = root(cluster.dir.path(), node).join("etc/passwd");
        let mut text = std::fs::read_to_string(&passwd).unwrap();
        text.push_str(foreign);
        std::fs::write(&passwd, text).unwrap();
    }
    cluster
        .emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeUser",
            "metadata": {"name": "carol"},
            "spec": {"uid": 1502, "isSudoer": false, "nodeGroups": ["worker"],
                "sshPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJx carol@example"]}}))
        .unwrap();
    let carol_errors = || {
        cluster
            .emulator
            .get("deckhouse.io/v1", "NodeUser", "", "carol")
            .unwrap()["status"]["errors"]
            .clone()
    };
    eventually(
        &cluster,
        "carol's error from the node being updated",
        60,
        || {
            NODES.iter().any(|n| {
                carol_errors()[n]
                    .as_str()
                    .is_some_and(|m| m.contains("was not created by nodemgr"))
            })
        },
    )
    .await;
    let third = published_checksum(&cluster.emulator).unwrap();
    for node in NODES {
        let passwd = root(cluster.dir.path(), node).join("etc/passwd");
        let text = std::fs::read_to_string(&passwd)
            .unwrap()
            .replace(foreign, "");
        std::fs::write(&passwd, text).unwrap();
    }
    eventually(&cluster, "every node applies carol", 120, || {
        cluster.all_report(&third)
    })
    .await;
    assert!(
        NODES.iter().all(|n| carol_errors()[n].is_null()),
        "errors cleared: {}",
        carol_errors()
    );
    for node in NODES {
        let passwd = std::fs::read_to_string(root(cluster.dir.path(), node).join("etc/passwd"))
            .unwrap_or_default();
        assert!(
            passwd.lines().any(|l| l.starts_with("carol:x:1502:")),
            "{node}"
        );
    }
}
