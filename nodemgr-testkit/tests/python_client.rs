//! The official Kubernetes Python client (Debian's `python3-kubernetes`) works against the
//! emulator: `tests/python/client_smoke.py` lists, watches with `watch.Watch().stream` (which
//! sends `?watch=True`), patches (strategic merge, JSON merge, JSON patch) and evicts a pod against a
//! PodDisruptionBudget.
//!
//! The interpreter is `NODEMGR_PYTHON` or `/usr/bin/python3`
//! (`scripts/install.d/40-python-kubernetes.sh` installs the module); the test FAILS when it
//! cannot import `kubernetes`, unless `NODEMGR_SKIP_PYTHON=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

mod common;

use std::time::Duration;

use common::real_clients::python_with_kubernetes;
use nodemgr_testkit::Emulator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_lists_watches_patches_and_evicts() {
    let Some(python) = python_with_kubernetes() else {
        return;
    };
    let emulator = Emulator::start().await.unwrap();
    emulator.seed(common::node("w1")).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client_smoke.py");
    let run = tokio::process::Command::new(&python)
        .arg(script)
        .arg(emulator.kubeconfig_path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the Python client finishes within 180 s")
        .expect("python starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client_smoke.py failed:\n{stdout}\n{stderr}"
    );
    for step in [
        "list",
        "watch",
        "strategic merge patch",
        "merge patch",
        "json patch",
        "eviction",
        "custom objects",
    ] {
        assert!(
            stdout.contains(&format!("{step}: ok")),
            "{step} missing:\n{stdout}\n{stderr}"
        );
    }
}
