//! Static instances end to end: the static instance controller against the API emulator and a
//! real OpenSSH server on loopback (nodemgr-ssh's `testing::Sshd`). The bootstrap and cleanup
//! scripts really run over SSH, as root through sudo, into a temporary root per instance
//! (bashible's test root), so nothing on the host changes. A stand-in kubelet registers the
//! Node the script asked for (it reads the `kubectl annotate` the script recorded in its root).
//! Every wait is a deadline for something that must happen, never a measurement.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use nodemgr_core::bashible::{BootstrapToken, ClusterContext};
use nodemgr_core::static_nodes::StaticConfig;
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers::static_instances::{
    ANNOTATION_SSH_HOST_KEY, RenderRoots, StaticController, StaticSettings,
};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_ssh::SshShell;
use nodemgr_ssh::testing::{KeyKind, Sshd};
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};
use tokio::sync::watch;

const SI: &str = "deckhouse.io/v1alpha2";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

struct World {
    emulator: Arc<Emulator>,
    roots: tempfile::TempDir,
    sshd: Sshd,
    stop: watch::Sender<bool>,
    metrics: Metrics,
    _watches: nodemgr_k8s::cluster::Watches,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

fn settings(roots: &Path) -> StaticSettings {
    StaticSettings {
        period: Duration::from_millis(300),
        config: StaticConfig {
            bootstrap_timeout: Duration::from_secs(60),
            cleanup_timeout: Duration::from_secs(60),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(8),
        },
        cluster: ClusterContext {
            api_endpoints: vec!["127.0.0.1:6443".into()],
            ca_cert: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
            ..ClusterContext::default()
        }
        .into(),
        bootstrap_tokens: BootstrapToken::new("abcdef.0123456789abcdef")
            .unwrap()
            .into(),
        roots: RenderRoots::PerInstance(roots.to_path_buf()),
        connect_timeout: Duration::from_secs(2),
    }
}

/// Loopback addresses for instances: 127.0.0.2, 127.0.0.3, …
fn address(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 1 + n)
}

async fn world(instances: u8, count: i64) -> World {
    world_with(instances, count, |_| {}).await
}

async fn world_with(instances: u8, count: i64, tune: impl FnOnce(&mut StaticSettings)) -> World {
    // RUST_LOG=nodemgr_k8s=debug shows the controller's decisions when a test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let addresses: Vec<Ipv4Addr> = (1..=instances).map(address).collect();
    let sshd = Sshd::start_on(&addresses).unwrap();
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "worker"},
            "spec": {"nodeType": "Static", "staticInstances": {"count": count}}}))
        .unwrap();
    seed_credentials(
        &emulator,
        &sshd,
        "ssh",
        &sshd.private_key(KeyKind::Ed25519).unwrap(),
        sshd.port(),
    );
    for n in 1..=instances {
        seed_instance(&emulator, &format!("si-{n}"), address(n), "ssh", &[]);
    }
    let roots = tempfile::tempdir().unwrap();
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (cluster, watches) = KubeCluster::start(client, "node-manager");
    cluster.wait_ready().await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let mut settings = settings(roots.path());
    tune(&mut settings);
    let controller = StaticController::new(
        cluster,
        Arc::new(SshShell::new()),
        settings,
        metrics.clone(),
    );
    tokio::spawn(controller.run(stop_rx.clone()));
    tokio::spawn(kubelet(
        emulator.clone(),
        roots.path().to_path_buf(),
        stop_rx,
    ));
    World {
        emulator,
        roots,
        sshd,
        stop,
        metrics,
        _watches: watches,
    }
}

fn seed_credentials(emulator: &Emulator, sshd: &Sshd, name: &str, key: &str, port: u16) {
    seed_credentials_with_password(emulator, sshd, name, key, port, sshd.sudo_password());
}

fn seed_credentials_with_password(
    emulator: &Emulator,
    sshd: &Sshd,
    name: &str,
    key: &str,
    port: u16,
    sudo_password: &str,
) {
    emulator
        .seed(
            json!({"apiVersion": SI, "kind": "SSHCredentials", "metadata": {"name": name},
            "spec": {"user": sshd.user(), "sshPort": port, "privateSSHKey": b64(key),
                     "sudoPasswordEncoded": b64(sudo_password)}}),
        )
        .unwrap();
}

fn seed_instance(
    emulator: &Emulator,
    name: &str,
    address: Ipv4Addr,
    credentials: &str,
    annotations: &[(&str, &str)],
) {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    emulator
        .seed(json!({"apiVersion": SI, "kind": "StaticInstance",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"address": address.to_string(), "credentialsRef": {"kind": "SSHCredentials", "name": credentials}}}))
        .unwrap();
}

fn node_json(name: &str, address: &str, checksum: Option<&str>) -> Value {
    let mut annotations = serde_json::Map::new();
    if let Some(c) = checksum {
        annotations.insert("node.deckhouse.io/configuration-checksum".into(), json!(c));
    }
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"node.deckhouse.io/group": "worker", "kubernetes.io/hostname": name},
                     "annotations": annotations},
        "spec": {},
        "status": {"addresses": [{"type": "InternalIP", "address": address}],
                   "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// The stand-in kubelet: once a Bootstrapping instance's script recorded `kubectl annotate … checksum=X`
/// in its root, registers Node `<instance>` with the instance's address and that checksum.
async fn kubelet(emulator: Arc<Emulator>, roots: PathBuf, stop: watch::Receiver<bool>) {
    while !*stop.borrow() {
        for si in emulator.list(SI, "StaticInstance", None) {
            let name = si["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            // A kubelet registers while its machine is bootstrapped, not after a cleanup.
            if si["status"]["currentStatus"]["phase"] != "Bootstrapping" {
                continue;
            }
            let log = roots.join(&name).join(".nodemgr-host-commands.log");
            let Ok(text) = std::fs::read_to_string(&log) else {
                continue;
            };
            let Some(checksum) = text
                .lines()
                .filter(|l| l.contains(" annotate "))
                .filter_map(|l| l.split("configuration-checksum=").nth(1))
                .next_back()
                .map(|c| c.trim().trim_matches('\'').to_owned())
            else {
                continue;
            };
            if emulator.get("v1", "Node", "", &name).is_none() {
                let address = si["spec"]["address"].as_str().unwrap_or_default();
                let _ = emulator.seed(node_json(&name, address, Some(&checksum)));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn instance(w: &World, name: &str) -> Value {
    w.emulator
        .get(SI, "StaticInstance", "", name)
        .unwrap_or(Value::Null)
}

fn phase(w: &World, name: &str) -> String {
    instance(w, name)["status"]["currentStatus"]["phase"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn reason(w: &World, name: &str) -> String {
    instance(w, name)["status"]["conditions"][0]["reason"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// Waits for `check`, polling every 100 ms. The limits are generous: on a 2-core machine
/// running the rest of the suite, a bootstrap attempt was once seen to take over 30 s. When the
/// time runs out the failure shows what the instances and sshd were doing, so a slow machine
/// can be told from a wrong outcome.
async fn eventually(w: &World, what: &str, seconds: u64, mut check: impl FnMut() -> bool) {
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    while !check() {
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {seconds} s waiting for: {what}\n{}",
                diagnosis(w)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every StaticInstance's status and the tail of sshd's log.
fn diagnosis(w: &World) -> String {
    let mut out = String::new();
    for si in w.emulator.list(SI, "StaticInstance", None) {
        out += &format!(
            "StaticInstance {}: {}\n",
            si["metadata"]["name"].as_str().unwrap_or("?"),
            si["status"]
        );
    }
    let log = w.sshd.log();
    let lines: Vec<&str> = log.lines().collect();
    out += "sshd log (last 40 lines):\n";
    for line in &lines[lines.len().saturating_sub(40)..] {
        out += line;
        out.push('\n');
    }
    out
}

fn connections(sshd: &Sshd, address: Ipv4Addr) -> usize {
    sshd.log()
        .lines()
        .filter(|l| l.contains("Connection from") && l.contains(&format!(" on {address} port")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_instance_bootstraps_over_ssh_and_runs_then_lowering_count_cleans_one() {
    let w = world(2, 2).await;
    for si in ["si-1", "si-2"] {
        eventually(&w, &format!("{si} Running"), 60, || {
            phase(&w, si) == "Running"
        })
        .await;
    }
    let si1 = instance(&w, "si-1");
    assert_eq!(si1["status"]["nodeRef"]["name"], "si-1");
    assert_eq!(si1["status"]["machineRef"]["name"], "worker");
    assert_eq!(
        si1["metadata"]["annotations"][ANNOTATION_SSH_HOST_KEY],
        json!(w.sshd.host_key_fingerprint().unwrap()),
        "the host key is pinned at first contact"
    );
    assert!(
        si1["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("static.node.deckhouse.io/cleanup"))
    );
    // The script ran as root into the instance's root: steps, kubelet config, cleanup script.
    let root = w.roots.path().join("si-1");
    assert!(
        root.join("var/lib/bashible/bundle_steps/030_kubelet.sh")
            .exists()
    );
    assert!(
        root.join("var/lib/bashible/cleanup_static_node.sh")
            .exists()
    );
    assert!(
        root.join("var/lib/kubelet/config.yaml").exists() || root.join("etc/kubernetes").exists()
    );
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(root.join("var/lib/bashible")).unwrap(),
    );
    assert_eq!(owner, 0, "the script runs as root through sudo");

    // Lower the count: the newest Running instance is cleaned up, its Node deleted.
    w.emulator
        .merge_patch(
            SI_GROUP.0,
            SI_GROUP.1,
            "",
            "worker",
            &json!({"spec": {"staticInstances": {"count": 1}}}),
            false,
        )
        .unwrap();
    eventually(&w, "one instance back to Pending", 60, || {
        ["si-1", "si-2"]
            .iter()
            .filter(|s| phase(&w, s) == "Pending")
            .count()
            == 1
    })
    .await;
    let cleaned = if phase(&w, "si-1") == "Pending" {
        "si-1"
    } else {
        "si-2"
    };
    let kept = if cleaned == "si-1" { "si-2" } else { "si-1" };
    assert_eq!(phase(&w, kept), "Running");
    assert!(instance(&w, cleaned)["status"]["machineRef"].is_null());
    eventually(&w, "the cleaned node's Node deleted", 30, || {
        w.emulator.get("v1", "Node", "", cleaned).is_none()
    })
    .await;
    let root = w.roots.path().join(cleaned);
    assert!(
        !root.join("var/lib/bashible").exists(),
        "the cleanup script removed bashible's files"
    );
    let text = w.metrics.encode();
    assert!(
        w.metrics
            .action_total("nodemgr_static_operations_total", "bootstrap_succeeded")
            == 2.0,
        "{text}"
    );
    // The controller counts an operation when its next pass collects the operation's end,
    // which can come after the operation deleted the Node the wait above saw go.
    eventually(&w, "the cleanup counted in the metrics", 30, || {
        w.metrics
            .action_total("nodemgr_static_operations_total", "cleanup_succeeded")
            == 1.0
    })
    .await;
}

const SI_GROUP: (&str, &str) = ("deckhouse.io/v1", "NodeGroup");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_leaves_the_instance_pending_with_auth_failed_and_backs_off() {
    let w = world(0, 1).await;
    let keys = tempfile::tempdir().unwrap();
    let stranger = keys.path().join("stranger");
    assert!(
        std::process::Command::new("ssh-keygen")
            .args(["-q", "-N", "", "-t", "ed25519", "-f"])
            .arg(&stranger)
            .status()
            .unwrap()
            .success()
    );
    seed_credentials(
        &w.emulator,
        &w.sshd,
        "wrong",
        &std::fs::read_to_string(&stranger).unwrap(),
        w.sshd.port(),
    );
    // The sshd listens on 127.0.0.1 only in a world of 0 instances.
    seed_instance(&w.emulator, "si-x", Ipv4Addr::LOCALHOST, "wrong", &[]);
    eventually(&w, "auth failure recorded", 90, || {
        reason(&w, "si-x") == "BootstrapAuthFailed"
    })
    .await;
    assert_eq!(phase(&w, "si-x"), "Pending");
    assert!(instance(&w, "si-x")["status"]["machineRef"].is_null());
    let message = instance(&w, "si-x")["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.contains("authentication failed"), "{message}");
    // No retry storm: retries back off 1 s, 2 s, 4 s, 8 s: within 6 s of the first failure at
    // most 3 more connections (a storm at the 300 ms period would make ~20).
    let first = connections(&w.sshd, Ipv4Addr::LOCALHOST);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let more = connections(&w.sshd, Ipv4Addr::LOCALHOST) - first;
    assert!(more <= 3, "{more} connections in 6 s: retry storm");
    assert!(more >= 1, "the instance is retried after its backoff");
    assert_eq!(phase(&w, "si-x"), "Pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_address_times_out_cleanly() {
    let w = world(0, 1).await;
    // A port that accepts TCP and never speaks SSH: the handshake times out (2 s).
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    seed_credentials(
        &w.emulator,
        &w.sshd,
        "silent",
        &w.sshd.private_key(KeyKind::Ed25519).unwrap(),
        port,
    );
    seed_instance(&w.emulator, "si-dark", Ipv4Addr::LOCALHOST, "silent", &[]);
    eventually(&w, "unreachable recorded", 90, || {
        reason(&w, "si-dark") == "BootstrapUnreachable"
    })
    .await;
    assert_eq!(phase(&w, "si-dark"), "Pending");
    let message = instance(&w, "si-dark")["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.contains("timed out"), "{message}");
    assert!(!w.roots.path().join("si-dark").exists(), "nothing ran");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_host_key_is_refused_and_nothing_runs() {
    let w = world(0, 1).await;
    seed_instance(
        &w.emulator,
        "si-pinned",
        Ipv4Addr::LOCALHOST,
        "ssh",
        &[(
            ANNOTATION_SSH_HOST_KEY,
            "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )],
    );
    eventually(&w, "host key mismatch recorded", 90, || {
        reason(&w, "si-pinned") == "BootstrapHostKeyChanged"
    })
    .await;
    let message = instance(&w, "si-pinned")["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.contains("host key changed"), "{message}");
    assert!(
        message.contains(&w.sshd.host_key_fingerprint().unwrap()),
        "{message}"
    );
    assert_eq!(phase(&w, "si-pinned"), "Pending");
    assert!(!w.roots.path().join("si-pinned").exists(), "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adoption_with_the_skip_annotation_runs_no_bootstrap() {
    let w = world(0, 1).await;
    w.emulator
        .seed(node_json("old-node", "127.0.0.1", Some("whatever")))
        .unwrap();
    seed_instance(
        &w.emulator,
        "si-adopt",
        Ipv4Addr::LOCALHOST,
        "ssh",
        &[("static.node.deckhouse.io/skip-bootstrap-phase", "")],
    );
    eventually(&w, "adopted", 90, || phase(&w, "si-adopt") == "Running").await;
    let si = instance(&w, "si-adopt");
    assert_eq!(si["status"]["nodeRef"]["name"], "old-node");
    assert_eq!(si["status"]["conditions"][0]["reason"], "Adopted");
    assert!(
        si["metadata"]["annotations"]
            .get("static.node.deckhouse.io/skip-bootstrap-phase")
            .is_none()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        connections(&w.sshd, Ipv4Addr::LOCALHOST),
        0,
        "no SSH connection for an adoption"
    );
    assert!(!w.roots.path().join("si-adopt").exists());
}

fn pinned(w: &World, name: &str) -> Option<String> {
    instance(w, name)["metadata"]["annotations"][ANNOTATION_SSH_HOST_KEY]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sudo_refusal_still_pins_the_host_key() {
    let w = world(0, 1).await;
    seed_credentials_with_password(
        &w.emulator,
        &w.sshd,
        "bad-sudo",
        &w.sshd.private_key(KeyKind::Ed25519).unwrap(),
        w.sshd.port(),
        "not-the-password",
    );
    seed_instance(&w.emulator, "si-sudo", Ipv4Addr::LOCALHOST, "bad-sudo", &[]);
    eventually(&w, "sudo refusal recorded", 90, || {
        reason(&w, "si-sudo") == "BootstrapSudoFailed"
    })
    .await;
    assert_eq!(phase(&w, "si-sudo"), "Pending");
    // The password went to that server: its key is pinned although the bootstrap failed.
    eventually(&w, "host key pinned", 30, || {
        pinned(&w, "si-sudo").is_some()
    })
    .await;
    assert_eq!(
        pinned(&w, "si-sudo"),
        Some(w.sshd.host_key_fingerprint().unwrap())
    );
    assert!(!w.roots.path().join("si-sudo/var/lib/bashible").exists());
}

const LOCK_FILE_NAME: &str = "nodemgr-static-node.lock";

/// A machine where another bootstrap holds the lock (a script of an earlier attempt, another
/// replica): the bootstrap waits, never runs beside it, gives up with `HostBusy` and its key
/// pinned, and runs once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_busy_with_another_bootstrap_is_not_bootstrapped_twice_and_its_key_is_pinned() {
    let w = world_with(1, 1, |s| {
        // The shell waits 4 s of it for the script (the lock), then reports the machine busy.
        s.config.bootstrap_timeout = Duration::from_secs(8);
    })
    .await;
    let lock = w
        .roots
        .path()
        .join("si-1")
        .join(nodemgr_k8s::controllers::static_instances::LOCK_PATH.trim_start_matches('/'));
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    // Taken before the controller's first pass can start the bootstrap (its period is 300 ms
    // and it needs the SSH handshake first).
    // `-o`: the lock is held by flock itself, not by its sleep, so killing flock frees it.
    let mut holder = std::process::Command::new("flock")
        .arg("-o")
        .arg(&lock)
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    eventually(&w, "the bootstrap gave up on the busy machine", 90, || {
        reason(&w, "si-1") == "BootstrapHostBusy"
    })
    .await;
    let message = instance(&w, "si-1")["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(
        message.contains("another nodemgr script holds") && message.contains(LOCK_FILE_NAME),
        "{message}"
    );
    assert_eq!(
        pinned(&w, "si-1"),
        Some(w.sshd.host_key_fingerprint().unwrap()),
        "the key seen at the handshake is pinned although the operation was stopped"
    );
    assert!(
        !w.roots.path().join("si-1/var/lib/bashible").exists(),
        "the bootstrap ran beside the lock holder"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    eventually(&w, "si-1 Running once the machine is free", 60, || {
        phase(&w, "si-1") == "Running"
    })
    .await;
}

/// Two StaticInstances naming one machine: never bootstrapped at once — the second waits
/// (`HostBusy`, retried after its backoff) until the first is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_address_are_bootstrapped_one_after_the_other() {
    let w = world(0, 2).await;
    seed_instance(&w.emulator, "si-a", Ipv4Addr::LOCALHOST, "ssh", &[]);
    seed_instance(&w.emulator, "si-b", Ipv4Addr::LOCALHOST, "ssh", &[]);
    eventually(&w, "one of them refused as busy", 90, || {
        ["si-a", "si-b"]
            .iter()
            .any(|si| reason(&w, si) == "BootstrapHostBusy")
    })
    .await;
    let busy = if reason(&w, "si-a") == "BootstrapHostBusy" {
        "si-a"
    } else {
        "si-b"
    };
    let message = instance(&w, busy)["status"]["conditions"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(message.contains("same machine 127.0.0.1:"), "{message}");
    for si in ["si-a", "si-b"] {
        eventually(&w, &format!("{si} Running"), 90, || {
            phase(&w, si) == "Running"
        })
        .await;
    }
}
