//! The core stays sans-I/O: its normal (non-dev) dependency tree holds no async runtime, no HTTP
//! stack and no Kubernetes client. Checked with `cargo tree` so a new dependency that drags one
//! in fails here, not in review.

use std::process::Command;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "hyper",
    "reqwest",
    "kube",
    "kube-client",
    "k8s-openapi",
    "russh",
    "async-std",
    "mio",
];

#[test]
fn core_has_no_runtime_or_client_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "nodemgr-core",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        crates.contains(&"nodemgr-core"),
        "unexpected cargo tree output: {tree}"
    );
    for forbidden in FORBIDDEN {
        assert!(
            !crates.contains(forbidden),
            "nodemgr-core must stay pure, but depends on {forbidden}:\n{tree}"
        );
    }
}
