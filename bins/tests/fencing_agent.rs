//! The real `fencing-agent` binary against the API emulator and a watchdog stand-in (a plain
//! file: every feed appends a byte, the magic close appends `V`): it labels its Node and feeds
//! while the API answers; a maintenance annotation makes it remove the label and disarm, its
//! removal re-arms it; once the API is gone no feed arrives after the next failed check; once its
//! kubelet stops renewing its Lease no feed arrives after `--kubelet-stale-after` although the API
//! answers; SIGTERM removes the label and disarms. The test plays the kubelet: it renews the
//! node's Lease every 100 ms while `kubelet` is on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nodemgr_testkit::Emulator;
use serde_json::json;

const LABEL: &str = "node-manager.deckhouse.io/fencing-enabled";

fn start(emulator: &Emulator, watchdog: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fencing-agent"))
        .args([
            "--node-name",
            "n1",
            "--feed-interval",
            "100ms",
            "--check-interval",
            "100ms",
            "--api-timeout",
            "500ms",
            "--kubelet-stale-after",
            "500ms",
        ])
        .arg("--watchdog")
        .arg(watchdog)
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .env("RUST_LOG", "off")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn feeds(watchdog: &Path) -> String {
    std::fs::read_to_string(watchdog).unwrap_or_default()
}

fn labelled(emulator: &Emulator) -> bool {
    emulator
        .get("v1", "Node", "", "n1")
        .is_some_and(|n| n["metadata"]["labels"].get(LABEL).is_some())
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

fn sigterm(child: &Child) {
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

async fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    child.kill().unwrap();
    panic!("fencing-agent did not exit");
}

/// The emulator with Node n1 and its kubelet Lease, renewed every 100 ms while the returned
/// switch is on.
async fn setup() -> (Arc<Emulator>, tempfile::TempDir, PathBuf, Arc<AtomicBool>) {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))
        .unwrap();
    emulator
        .seed(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                "renewTime": "2025-01-01T00:00:00.000000Z"}}),
        )
        .unwrap();
    let kubelet = Arc::new(AtomicBool::new(true));
    let (e, on) = (Arc::downgrade(&emulator), kubelet.clone());
    tokio::spawn(async move {
        let mut tick = 0u64;
        while let Some(e) = e.upgrade() {
            if on.load(Ordering::SeqCst) {
                tick += 1;
                let renew = format!(
                    "2025-01-01T00:{:02}:{:02}.{:06}Z",
                    tick / 600 % 60,
                    tick / 10 % 60,
                    tick % 10 * 100_000
                );
                let _ = e.merge_patch(
                    "coordination.k8s.io/v1",
                    "Lease",
                    "kube-node-lease",
                    "n1",
                    &json!({"spec": {"renewTime": renew}}),
                    false,
                );
            }
            drop(e);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let watchdog = dir.path().join("watchdog");
    std::fs::write(&watchdog, "").unwrap();
    (emulator, dir, watchdog, kubelet)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_while_the_api_answers_and_disarms_for_maintenance() {
    let (emulator, _dir, watchdog, _kubelet) = setup().await;
    let mut agent = start(&emulator, &watchdog);
    eventually("the fencing-enabled label", || labelled(&emulator)).await;
    eventually("three feeds", || feeds(&watchdog).matches('1').count() >= 3).await;
    assert!(!feeds(&watchdog).contains('V'));

    // Maintenance: the label goes and the watchdog is closed with the magic V.
    emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            "n1",
            &json!({"metadata": {"annotations": {"update.node.deckhouse.io/approved": ""}}}),
            false,
        )
        .unwrap();
    eventually("the label removed", || !labelled(&emulator)).await;
    eventually("the magic close", || feeds(&watchdog).ends_with('V')).await;
    let disarmed = feeds(&watchdog).len();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(feeds(&watchdog).len(), disarmed, "no feed while disarmed");

    // Maintenance over: armed and labelled again.
    emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            "n1",
            &json!({"metadata": {"annotations": {"update.node.deckhouse.io/approved": null}}}),
            false,
        )
        .unwrap();
    eventually("the label back", || labelled(&emulator)).await;
    eventually("feeds again", || feeds(&watchdog).len() >= disarmed + 3).await;

    // SIGTERM: label removed, watchdog disarmed, clean exit.
    sigterm(&agent);
    let status = wait_exit(&mut agent).await;
    assert!(status.success(), "{status}");
    assert!(!labelled(&emulator));
    assert!(feeds(&watchdog).ends_with('V'));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_feeding_once_the_api_is_unreachable() {
    let (emulator, _dir, watchdog, _kubelet) = setup().await;
    let mut agent = start(&emulator, &watchdog);
    eventually("three feeds", || feeds(&watchdog).matches('1').count() >= 3).await;
    // The kubelet stand-in holds only a weak reference, between its renewals.
    let mut emulator = emulator;
    let owned = loop {
        match Arc::try_unwrap(emulator) {
            Ok(owned) => break owned,
            Err(back) => {
                emulator = back;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    owned.shutdown().await;
    // Within one check interval plus the API timeout the next check fails (connection
    // refused); from then on nothing is written — the watchdog will reboot the node.
    tokio::time::sleep(Duration::from_millis(100 + 500 + 200)).await;
    let after = feeds(&watchdog).len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        feeds(&watchdog).len(),
        after,
        "fed after the API became unreachable"
    );
    assert!(
        !feeds(&watchdog).contains('V'),
        "a partition must not disarm the watchdog"
    );
    agent.kill().unwrap();
    let _ = agent.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stops_feeding_once_its_kubelet_stops_renewing_though_the_api_answers() {
    let (emulator, _dir, watchdog, kubelet) = setup().await;
    let mut agent = start(&emulator, &watchdog);
    eventually("the fencing-enabled label", || labelled(&emulator)).await;
    eventually("three feeds", || feeds(&watchdog).matches('1').count() >= 3).await;
    kubelet.store(false, Ordering::SeqCst);
    // Within the staleness (500 ms) plus a check the feeding stops, the API still answering.
    tokio::time::sleep(Duration::from_millis(500 + 100 + 300)).await;
    let after = feeds(&watchdog).len();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        feeds(&watchdog).len(),
        after,
        "fed while the kubelet was dead"
    );
    assert!(
        !feeds(&watchdog).contains('V'),
        "a dead kubelet must not disarm"
    );
    assert!(labelled(&emulator), "the node stays fencing-enabled");
    // The kubelet comes back: feeding resumes.
    kubelet.store(true, Ordering::SeqCst);
    eventually("feeds again", || feeds(&watchdog).len() >= after + 2).await;
    agent.kill().unwrap();
    let _ = agent.wait();
}

#[test]
fn a_feed_interval_beyond_the_watchdog_timeout_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_fencing-agent"))
        .args([
            "--node-name",
            "n1",
            "--feed-interval",
            "90s",
            "--watchdog-timeout",
            "60s",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--feed-interval"));
}
