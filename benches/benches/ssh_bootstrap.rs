//! Bootstraps 20 static instances against a local OpenSSH server (nodemgr-ssh's
//! `testing::Sshd` on 127.0.0.1; each instance its own connection) with the real bootstrap
//! script of a Static group rendered into a test root per instance, all 20 at once:
//! - `adapter`: nodemgr-ssh's `SshShell` (russh; one connection per instance, upload and run on
//!   two channels, sudo password on stdin), 20 tasks on a 2-thread tokio runtime;
//! - `ssh_cli`: the OpenSSH `ssh` client doing the same per instance (one process to upload
//!   the script, one to run it through `sudo -S` with the password on stdin), 20 instances
//!   in parallel.
//!
//! Needs root and `scripts/install.d/10-sshd.sh`; without them it prints why and measures
//! nothing. Run: `cargo bench -p nodemgr-benches --bench ssh_bootstrap`

#![allow(clippy::expect_used)] // a benchmark whose setup fails should stop loudly

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use nodemgr_core::bashible::{
    BootstrapOptions, BootstrapToken, ClusterContext, RenderRoot, Renderer,
};
use nodemgr_core::model::NodeGroup;
use nodemgr_core::ports::{RemoteScript, RemoteShell};
use nodemgr_ssh::SshShell;
use nodemgr_ssh::testing::{KeyKind, Sshd};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const INSTANCES: u8 = 20;

/// Every instance is reached on loopback (sshd listens on at most 16 addresses).
fn address(_instance: u8) -> Ipv4Addr {
    Ipv4Addr::LOCALHOST
}

fn group() -> NodeGroup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "worker"},
        "spec": {"nodeType": "Static", "staticInstances": {"count": 20},
                 "kubelet": {"maxPods": 150}, "nodeTemplate": {"labels": {"tier": "bench"}}}
    }))
    .expect("a valid NodeGroup")
}

fn scripts(roots: &Path, tag: &str) -> Vec<String> {
    let renderer = Renderer::new();
    let cluster = ClusterContext {
        api_endpoints: vec!["127.0.0.1:6443".into()],
        ca_cert: "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into(),
        ..ClusterContext::default()
    };
    (0..INSTANCES)
        .map(|i| {
            let root = roots.join(format!("{tag}-{i}"));
            renderer
                .render(
                    &group(),
                    &cluster,
                    &BootstrapOptions {
                        bootstrap_token: BootstrapToken::new("abcdef.0123456789abcdef")
                            .expect("a valid token"),
                        root: RenderRoot::new(&root.to_string_lossy()).expect("a usable root"),
                    },
                )
                .expect("the group renders")
                .bootstrap_script
        })
        .collect()
}

async fn with_adapter(sshd: &Sshd, scripts: &[String]) {
    let shell = Arc::new(SshShell::new());
    let mut tasks = tokio::task::JoinSet::new();
    for (i, body) in scripts.iter().enumerate() {
        let target = sshd
            .target(address(i as u8))
            .expect("the test key is readable");
        let shell = shell.clone();
        let script = RemoteScript {
            name: format!("bootstrap {i}"),
            body: body.clone(),
            args: Vec::new(),
            timeout: Duration::from_secs(120),
            lock: None,
        };
        tasks.spawn(async move { shell.run_script(&target, &script).await });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("task").expect("bootstrap over the adapter");
    }
}

/// What the `ssh` command line needs, owned so that each instance runs in its own task.
#[derive(Clone)]
struct Cli {
    key: std::path::PathBuf,
    port: u16,
    user: String,
}

impl Cli {
    async fn ssh(&self, host: Ipv4Addr, command: &str, stdin: &[u8]) -> Vec<u8> {
        let mut child = Command::new("ssh")
            .args([
                "-q",
                "-T",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
            ])
            .args(["-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"])
            .arg("-i")
            .arg(&self.key)
            .arg("-p")
            .arg(self.port.to_string())
            .arg(format!("{}@{host}", self.user))
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ssh runs");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin).await.expect("write stdin");
        drop(input);
        let out = child.wait_with_output().await.expect("ssh ends");
        assert!(
            out.status.success(),
            "ssh {command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }
}

async fn with_cli(sshd: &Sshd, scripts: &[String]) {
    let cli = Cli {
        key: sshd.key_path(KeyKind::Ed25519),
        port: sshd.port(),
        user: sshd.user().to_owned(),
    };
    let mut password = sshd.sudo_password().as_bytes().to_vec();
    password.push(b'\n');
    let mut tasks = tokio::task::JoinSet::new();
    for (i, body) in scripts.iter().enumerate() {
        let (cli, body, password) = (cli.clone(), body.clone(), password.clone());
        tasks.spawn(async move {
            let host = address(i as u8);
            let path = cli
                .ssh(
                    host,
                    "umask 077 && f=$(mktemp /tmp/nodemgr-script.XXXXXXXX) && cat >\"$f\" && printf '%s' \"$f\"",
                    body.as_bytes(),
                )
                .await;
            let path = String::from_utf8_lossy(&path).trim().to_owned();
            cli.ssh(
                host,
                &format!("sudo -S -p '' -- bash '{path}'; rc=$?; rm -f '{path}'; exit $rc"),
                &password,
            )
            .await;
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("an ssh task");
    }
}

fn bench(c: &mut Criterion) {
    let sshd = match Sshd::start() {
        Ok(sshd) => sshd,
        Err(error) => {
            eprintln!("ssh_bootstrap: skipped: {error}");
            return;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let roots = tempfile::tempdir().expect("a temporary directory");
    let adapter_scripts = scripts(roots.path(), "adapter");
    let cli_scripts = scripts(roots.path(), "cli");
    let mut group = c.benchmark_group("ssh_bootstrap_20_instances");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.bench_function("adapter", |b| {
        b.iter(|| runtime.block_on(with_adapter(&sshd, &adapter_scripts)));
    });
    group.bench_function("ssh_cli", |b| {
        b.iter(|| runtime.block_on(with_cli(&sshd, &cli_scripts)));
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
