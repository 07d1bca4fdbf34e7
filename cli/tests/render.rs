//! Runs the built `nodemgr render` on the sample NodeGroups of `nodemgr-core/tests/fixtures`:
//! the bootstrap script (and its Secret form), the cleanup script and the checksum; the
//! rendered scripts are run for real into a temporary root; unknown groups, missing tokens
//! and missing cluster settings give clear errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
const TOKEN: &str = "abcdef.0123456789abcdef";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../nodemgr-core/tests/fixtures/valid")
        .join(name)
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("cluster.yaml"),
            format!(
                "apiEndpoints: [\"10.0.0.1:6443\"]\nkubernetesVersion: \"1.33\"\ncaCert: |\n{}",
                CA.lines().map(|l| format!("  {l}\n")).collect::<String>()
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn nodemgr(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nodemgr"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("NODEMGR_BOOTSTRAP_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn bash_n(script: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sh");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn bootstrap_prints_the_manual_bootstrap_script_and_its_secret() {
    let s = Setup::new();
    let worker = fixture("static-with-instances.yaml");
    let cluster = s.path("cluster.yaml");
    let token = s.path("token");
    let args = |output: &str| {
        vec![
            "render".to_owned(),
            "bootstrap".to_owned(),
            "--group".to_owned(),
            "worker".to_owned(),
            "--cluster-context".to_owned(),
            cluster.display().to_string(),
            "--bootstrap-token-file".to_owned(),
            token.display().to_string(),
            "--output".to_owned(),
            output.to_owned(),
            worker.display().to_string(),
            fixture("cloud-static.yaml").display().to_string(),
        ]
    };
    let script_args = args("script");
    let out = nodemgr(
        &script_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = text(&out.stdout);
    assert!(script.starts_with("#!/usr/bin/env bash\n"));
    assert!(script.contains(TOKEN));
    bash_n(&script);

    let out = nodemgr(
        &[
            "render",
            "checksum",
            "--group",
            "worker",
            "--cluster-context",
            cluster.to_str().unwrap(),
            worker.to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let checksum = text(&out.stdout).trim().to_owned();
    assert_eq!(checksum.len(), 64);
    assert!(script.contains(&format!("BB_CHECKSUM='{checksum}'")));

    let secret_args = args("secret");
    let out = nodemgr(
        &secret_args.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let secret = text(&out.stdout);
    assert!(
        secret.contains("name: manual-bootstrap-for-worker\n"),
        "{secret}"
    );
    assert!(secret.contains("namespace: d8-cloud-instance-manager\n"));
    let encoded = secret
        .lines()
        .find_map(|l| l.trim().strip_prefix("bootstrap.sh: "))
        .unwrap();
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    assert_eq!(text(&decoded), script);
}

#[test]
fn bootstrap_then_cleanup_run_into_a_test_root() {
    let s = Setup::new();
    let root = tempfile::tempdir().unwrap();
    let root_arg = root.path().to_str().unwrap();
    let manifests = tempfile::tempdir().unwrap();
    // A directory of manifests works like the files in it.
    std::fs::copy(
        fixture("static-with-instances.yaml"),
        manifests.path().join("worker.yaml"),
    )
    .unwrap();
    let out = nodemgr(
        &[
            "render",
            "bootstrap",
            "--group",
            "worker",
            "--root",
            root_arg,
            "--api-endpoint",
            "10.0.0.9:6443",
            "--ca-file",
            s.path("cluster.yaml").to_str().unwrap(),
            manifests.path().to_str().unwrap(),
        ],
        &[("NODEMGR_BOOTSTRAP_TOKEN", TOKEN)],
    );
    // cluster.yaml is not a certificate: the CA check names the field.
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("caCert"),
        "{}",
        text(&out.stderr)
    );

    std::fs::write(s.path("ca.crt"), CA).unwrap();
    let out = nodemgr(
        &[
            "render",
            "bootstrap",
            "--group",
            "worker",
            "--root",
            root_arg,
            "--api-endpoint",
            "10.0.0.9:6443",
            "--ca-file",
            s.path("ca.crt").to_str().unwrap(),
            manifests.path().to_str().unwrap(),
        ],
        &[("NODEMGR_BOOTSTRAP_TOKEN", TOKEN)],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(s.path("bootstrap.sh"), &out.stdout).unwrap();
    let run = Command::new("bash")
        .arg(s.path("bootstrap.sh"))
        .env("BB_NODE_NAME", "n1")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    let kubeconfig =
        std::fs::read_to_string(root.path().join("etc/kubernetes/bootstrap-kubelet.conf")).unwrap();
    assert!(kubeconfig.contains("https://10.0.0.9:6443"));

    let out = nodemgr(
        &[
            "render",
            "cleanup",
            "--group",
            "worker",
            "--root",
            root_arg,
            manifests.path().to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let cleanup = text(&out.stdout);
    bash_n(&cleanup);
    std::fs::write(s.path("cleanup.sh"), &cleanup).unwrap();
    let refused = Command::new("bash")
        .arg(s.path("cleanup.sh"))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(root.path().join("etc/kubernetes").exists());
    let run = Command::new("bash")
        .arg(s.path("cleanup.sh"))
        .arg("--yes-i-am-sane-and-i-understand-what-i-am-doing")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert!(!root.path().join("etc/kubernetes").exists());
    assert!(!root.path().join("var/lib/bashible").exists());
}

#[test]
fn unknown_groups_list_the_known_ones() {
    let out = nodemgr(
        &[
            "render",
            "cleanup",
            "--group",
            "nope",
            fixture("static-with-instances.yaml").to_str().unwrap(),
            fixture("cloud-static.yaml").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("NodeGroup \"nope\" is not in"), "{err}");
    assert!(err.contains("known groups: cloud-static, worker"), "{err}");

    let out = nodemgr(
        &[
            "render",
            "cleanup",
            "--group",
            "nope",
            fixture("static-instances-and-credentials.yaml")
                .to_str()
                .unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no NodeGroup found in"));
}

#[test]
fn missing_token_cluster_settings_and_files_are_explained() {
    let s = Setup::new();
    let worker = fixture("static-with-instances.yaml");
    let out = nodemgr(
        &[
            "render",
            "bootstrap",
            "--group",
            "worker",
            "--cluster-context",
            s.path("cluster.yaml").to_str().unwrap(),
            worker.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("--bootstrap-token-file") && err.contains("NODEMGR_BOOTSTRAP_TOKEN"),
        "{err}"
    );

    let out = nodemgr(
        &[
            "render",
            "bootstrap",
            "--group",
            "worker",
            worker.to_str().unwrap(),
        ],
        &[("NODEMGR_BOOTSTRAP_TOKEN", "not-a-token")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("apiEndpoints"),
        "{}",
        text(&out.stderr)
    );

    let out = nodemgr(
        &[
            "render",
            "bootstrap",
            "--group",
            "worker",
            "--cluster-context",
            s.path("cluster.yaml").to_str().unwrap(),
            worker.to_str().unwrap(),
        ],
        &[("NODEMGR_BOOTSTRAP_TOKEN", "not-a-token")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("kubeadm token create"),
        "{}",
        text(&out.stderr)
    );

    let out = nodemgr(
        &[
            "render",
            "cleanup",
            "--group",
            "worker",
            "/nonexistent/file.yaml",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/nonexistent/file.yaml"));

    std::fs::write(s.path("bad.yaml"), "apiEndpoints: 5\n").unwrap();
    let out = nodemgr(
        &[
            "render",
            "checksum",
            "--group",
            "worker",
            "--cluster-context",
            s.path("bad.yaml").to_str().unwrap(),
            worker.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("bad.yaml"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn configurations_and_users_among_the_manifests_join_the_bundle() {
    let s = Setup::new();
    let manifests = tempfile::tempdir().unwrap();
    std::fs::write(
        manifests.path().join("groups.yaml"),
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: worker}\nspec: {nodeType: Static}\n\
         ---\napiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: master}\nspec: {nodeType: Static}\n",
    )
    .unwrap();
    let checksum = |group: &str| {
        let out = nodemgr(
            &[
                "render",
                "checksum",
                "--group",
                group,
                "--cluster-context",
                s.path("cluster.yaml").to_str().unwrap(),
                manifests.path().to_str().unwrap(),
            ],
            &[],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        (text(&out.stdout), text(&out.stderr))
    };
    let (worker_before, _) = checksum("worker");
    let (master_before, _) = checksum("master");
    std::fs::write(
        manifests.path().join("custom.yaml"),
        r#"apiVersion: deckhouse.io/v1alpha1
kind: NodeGroupConfiguration
metadata: {name: first.sh}
spec: {weight: 5, nodeGroups: [worker], content: "echo first"}
---
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroupConfiguration
metadata: {name: broken}
spec: {nodeGroups: [worker], content: "echo broken"}
---
apiVersion: deckhouse.io/v1alpha1
kind: NodeGroupConfiguration
metadata: {name: typed.sh}
spec: {weight: heavy, content: "echo typed"}
---
apiVersion: deckhouse.io/v1
kind: NodeUser
metadata: {name: ops}
spec: {uid: 1001, nodeGroups: [worker], sshPublicKeys: ["ssh-ed25519 AAAA ops@laptop"]}
"#,
    )
    .unwrap();
    let (worker_after, warnings) = checksum("worker");
    let (master_after, _) = checksum("master");
    assert_ne!(worker_before, worker_after);
    assert_eq!(master_before, master_after);
    assert!(
        warnings.contains("NodeGroupConfiguration \"broken\" is skipped: metadata.name"),
        "{warnings}"
    );
    assert!(
        warnings.contains("custom.yaml:2: skipped: spec.weight"),
        "{warnings}"
    );

    let root = tempfile::tempdir().unwrap();
    let out = nodemgr(
        &[
            "render",
            "bootstrap",
            "--group",
            "worker",
            "--root",
            root.path().to_str().unwrap(),
            "--cluster-context",
            s.path("cluster.yaml").to_str().unwrap(),
            "--bootstrap-token-file",
            s.path("token").to_str().unwrap(),
            manifests.path().to_str().unwrap(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(s.path("bootstrap.sh"), &out.stdout).unwrap();
    let run = Command::new("bash")
        .arg(s.path("bootstrap.sh"))
        .env("BB_NODE_NAME", "n1")
        .output()
        .unwrap();
    let is_root = text(&Command::new("id").arg("-u").output().unwrap().stdout).trim() == "0";
    if !is_root {
        // useradd --prefix needs root; the users step says so.
        assert!(!run.status.success());
        assert!(
            text(&run.stderr).contains("needs root"),
            "{}",
            text(&run.stderr)
        );
        return;
    }
    assert!(run.status.success(), "{}", text(&run.stderr));
    let passwd = std::fs::read_to_string(root.path().join("etc/passwd")).unwrap();
    assert!(passwd.contains("ops:x:1001:"), "{passwd}");
    let log = std::fs::read_to_string(root.path().join(".nodemgr-host-commands.log")).unwrap();
    assert!(
        log.contains("bash /var/lib/bashible/configurations/005_first.sh"),
        "{log}"
    );
    assert!(!log.contains("broken"), "{log}");
    assert_eq!(
        std::fs::read_to_string(root.path().join("var/lib/bashible/configuration_checksum"))
            .unwrap(),
        worker_after.trim()
    );
}

#[test]
fn an_old_hybrid_group_renders_as_the_provider_cluster_configuration_types_it() {
    let s = Setup::new();
    let group = |api_version: &str, node_type: &str| {
        format!(
            "apiVersion: deckhouse.io/{api_version}\nkind: NodeGroup\nmetadata: {{name: front}}\nspec: {{nodeType: {node_type}}}\n"
        )
    };
    std::fs::write(s.path("hybrid.yaml"), group("v1alpha2", "Hybrid")).unwrap();
    std::fs::write(s.path("permanent.yaml"), group("v1", "CloudPermanent")).unwrap();
    std::fs::write(s.path("static.yaml"), group("v1", "CloudStatic")).unwrap();
    std::fs::write(
        s.path("provider.yaml"),
        "apiVersion: deckhouse.io/v1\nkind: OpenStackClusterConfiguration\nnodeGroups:\n- name: front\n",
    )
    .unwrap();
    let cluster = s.path("cluster.yaml");
    let token = s.path("token");
    // The bootstrap script registers the node with its type label.
    let script = |file: &str, provider: Option<&str>| {
        let path = s.path(file);
        let mut args = vec![
            "render",
            "bootstrap",
            "--group",
            "front",
            "--cluster-context",
            cluster.to_str().unwrap(),
            "--bootstrap-token-file",
            token.to_str().unwrap(),
            path.to_str().unwrap(),
        ];
        let provider = provider.map(|p| s.path(p));
        if let Some(p) = &provider {
            args.extend(["--provider-cluster-configuration", p.to_str().unwrap()]);
        }
        let out = nodemgr(&args, &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let as_static = script("static.yaml", None);
    let as_permanent = script("permanent.yaml", None);
    assert!(as_permanent.contains("node.deckhouse.io/type=CloudPermanent"));
    assert_ne!(as_static, as_permanent);
    assert_eq!(script("hybrid.yaml", None), as_static);
    assert_eq!(script("hybrid.yaml", Some("provider.yaml")), as_permanent);
    let out = nodemgr(
        &[
            "render",
            "checksum",
            "--group",
            "front",
            "--cluster-context",
            cluster.to_str().unwrap(),
            "--provider-cluster-configuration",
            s.path("missing.yaml").to_str().unwrap(),
            s.path("hybrid.yaml").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--provider-cluster-configuration"),
        "{}",
        text(&out.stderr)
    );
}
