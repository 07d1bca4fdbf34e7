//! The real `early-oom` binary against the API emulator, with a PSI fixture file and a fake
//! kubepods cgroup tree: under a breach it kills exactly one pod per episode — the lowest
//! priority, never a system-node-critical or DaemonSet pod, then the largest working set — and
//! records an Event; `--dry-run` kills nothing; no breach, no kill.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../nodemgr-core/tests/fixtures/psi"
);

fn pod(name: &str, node: &str, priority: i64, extra: Value) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": node, "priority": priority, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    });
    if let Some(obj) = extra.as_object() {
        for (k, v) in obj {
            match k.as_str() {
                "ownerReferences" => p["metadata"]["ownerReferences"] = v.clone(),
                "priorityClassName" => p["spec"]["priorityClassName"] = v.clone(),
                _ => {}
            }
        }
    }
    p
}

/// Seeds the pods and a cgroup tree giving each pod on n1 a working set; returns the dir.
fn world(emulator: &Emulator) -> tempfile::TempDir {
    let pods = [
        ("batch-0", "n1", 0, json!({}), 1_000_000_000u64),
        ("web-0", "n1", 1000, json!({}), 5_000_000_000),
        ("batch-big", "n1", 0, json!({}), 2_000_000_000),
        (
            "critical-0",
            "n1",
            0,
            json!({"priorityClassName": "system-node-critical"}),
            9_000_000_000,
        ),
        (
            "exporter-n1",
            "n1",
            0,
            json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "exporter", "uid": "x", "controller": true}]}),
            9_000_000_000,
        ),
        ("elsewhere", "n2", -10, json!({}), 9_000_000_000),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (name, node, priority, extra, bytes) in pods {
        let created = emulator.seed(pod(name, node, priority, extra)).unwrap();
        let uid = created["metadata"]["uid"]
            .as_str()
            .unwrap()
            .replace('-', "_");
        let cg = dir.path().join(format!(
            "kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice"
        ));
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(cg.join("memory.current"), format!("{bytes}\n")).unwrap();
    }
    dir
}

fn start(emulator: &Emulator, psi: &Path, cgroups: &Path, dry_run: bool) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_early-oom"));
    c.args([
        "--node-name",
        "n1",
        "--sample-interval",
        "100ms",
        "--cooldown",
        "300ms",
        "--no-trigger",
    ])
    .arg("--psi-file")
    .arg(psi)
    .arg("--cgroup-root")
    .arg(cgroups)
    .arg("--kubeconfig")
    .arg(emulator.kubeconfig_path())
    .env("RUST_LOG", "warn")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if dry_run {
        c.arg("--dry-run");
    }
    c.spawn().unwrap()
}

fn names(emulator: &Emulator) -> Vec<String> {
    let mut v: Vec<String> = emulator
        .list("v1", "Pod", Some("default"))
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

fn stop(mut child: Child) -> String {
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breach_kills_one_pod_the_lowest_priority_largest() {
    let emulator = Emulator::start().await.unwrap();
    let cgroups = world(&emulator);
    let psi = Path::new(FIXTURES).join("full-avg10-breach.txt");
    let agent = start(&emulator, &psi, cgroups.path(), false);
    for _ in 0..100 {
        if !names(&emulator).contains(&"batch-big".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The same pressure (not rising) for several cooldowns: still one kill for the episode.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let log = stop(agent);
    assert_eq!(
        names(&emulator),
        ["batch-0", "critical-0", "elsewhere", "exporter-n1", "web-0"],
        "exactly batch-big (priority 0, the larger of the two) is killed\n{log}"
    );
    let events = emulator.list("events.k8s.io/v1", "Event", Some("default"));
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "EarlyOOMKill" && e["regarding"]["name"] == "batch-big"),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_and_no_pressure_kill_nothing() {
    let emulator = Emulator::start().await.unwrap();
    let cgroups = world(&emulator);
    let before = names(&emulator);
    let breach = Path::new(FIXTURES).join("full-avg10-breach.txt");
    let dry = start(&emulator, &breach, cgroups.path(), true);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let log = stop(dry);
    assert!(
        log.contains("kill pod default/batch-big"),
        "the dry run logs its decision:\n{log}"
    );
    assert_eq!(names(&emulator), before);

    let idle = Path::new(FIXTURES).join("idle.txt");
    let calm = start(&emulator, &idle, cgroups.path(), false);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let _ = stop(calm);
    assert_eq!(names(&emulator), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_psi_file_says_what_to_do_and_idles() {
    let emulator = Emulator::start().await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_early-oom"))
        .args([
            "--node-name",
            "n1",
            "--psi-file",
            "/nonexistent/memory.pressure",
        ])
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It stays up (idles) instead of failing.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(child.try_wait().unwrap().is_none(), "early-oom exited");
    let stderr = stop(child);
    assert!(
        stderr.contains("CONFIG_PSI") && stderr.contains("--psi-file") && stderr.contains("idles"),
        "{stderr}"
    );
}
