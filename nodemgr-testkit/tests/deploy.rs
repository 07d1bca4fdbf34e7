//! `kubectl apply --dry-run=client -f deploy/` passes: the real kubectl maps every manifest of
//! `deploy/` to a resource the API serves (the CRDs are applied for real first, so the
//! NodeGroup and friends exist) and accepts the whole directory. Field-level checks of the same
//! manifests are in `bins/tests/deploy.rs`.
//!
//! kubectl comes from `NODEMGR_KUBECTL` or `PATH` (`scripts/install.d/30-kubectl.sh` installs
//! it); the test FAILS when it is missing, unless `NODEMGR_SKIP_KUBECTL=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::path::{Path, PathBuf};
use std::process::Stdio;

use nodemgr_testkit::Emulator;

mod common;

use common::kubectl_binary;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

async fn kubectl(binary: &str, emulator: &Emulator, cache: &Path, args: &[&str]) -> String {
    let output = tokio::process::Command::new(binary)
        .env("KUBECONFIG", emulator.kubeconfig_path())
        .arg(format!("--cache-dir={}", cache.display()))
        .arg("--request-timeout=30s")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("kubectl starts");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[tokio::test]
async fn kubectl_dry_run_accepts_the_deploy_directory() {
    let Some(binary) = kubectl_binary() else {
        return;
    };
    let emulator = Emulator::start().await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let dir = deploy_dir();
    let crds = dir.join("01-crds.yaml");
    let out = kubectl(
        &binary,
        &emulator,
        cache.path(),
        &["apply", "-f", crds.to_str().unwrap()],
    )
    .await;
    assert!(out.contains("nodegroups.deckhouse.io created"), "{out}");

    let out = kubectl(
        &binary,
        &emulator,
        cache.path(),
        &["apply", "--dry-run=client", "-f", dir.to_str().unwrap()],
    )
    .await;
    for expected in [
        "namespace/nodemgr-system created (dry run)",
        "deployment.apps/node-manager created (dry run)",
        "daemonset.apps/fencing-agent created (dry run)",
        "daemonset.apps/early-oom created (dry run)",
        "clusterrole.rbac.authorization.k8s.io/nodemgr:node-manager created (dry run)",
        "validatingadmissionpolicy.admissionregistration.k8s.io/nodemgr-fencing-agent-own-node created (dry run)",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/nodemgr-early-oom-own-node created (dry run)",
        "deployment.apps/nodemgr-webhook created (dry run)",
        "deployment.apps/bashible-apiserver created (dry run)",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/nodemgr-webhook created (dry run)",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    // A dry run creates nothing.
    assert!(
        emulator
            .get("apps/v1", "Deployment", "nodemgr-system", "node-manager")
            .is_none()
    );
}
