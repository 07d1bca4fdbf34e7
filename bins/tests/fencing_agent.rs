//! The real `fencing-agent` binary against the API emulator and a watchdog stand-in (a plain
//! file: every feed appends a byte, the magic close appends `V`): it labels its Node and feeds
//! while the API answers; a maintenance annotation makes it remove the label and disarm, its
//! removal re-arms it; once the API is gone no feed arrives after the next failed check; SIGTERM
//! removes the label and disarms.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

async fn setup() -> (Emulator, tempfile::TempDir, PathBuf) {
    let emulator = Emulator::start().await.unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let watchdog = dir.path().join("watchdog");
    std::fs::write(&watchdog, "").unwrap();
    (emulator, dir, watchdog)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_while_the_api_answers_and_disarms_for_maintenance() {
    let (emulator, _dir, watchdog) = setup().await;
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
    let (emulator, _dir, watchdog) = setup().await;
    let mut agent = start(&emulator, &watchdog);
    eventually("three feeds", || feeds(&watchdog).matches('1').count() >= 3).await;
    emulator.shutdown().await;
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
