//! The demo's node agents: a `bashible-apiserver` in cluster mode (in this process, watching
//! the emulator, serving over TLS with the certificate it stores, and writing the
//! `configuration-checksums` Secret the update controller compares nodes against) and one real
//! agent process per node (this executable's hidden `agent` subcommand, the `bashible`
//! binary's code), each in its own root under a temporary directory, trusting that
//! certificate, with the emulator's kubeconfig standing in for its kubelet's.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::Mutex;

use anyhow::{Context as _, bail};
use clap::Parser as _;
use nodemgr_bins::bashible_apiserver;
use nodemgr_core::model::keys;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBZGVtbw==\n-----END CERTIFICATE-----\n";

/// The agents of the demo's nodes; dropping it stops them and removes their roots.
pub struct DemoAgents {
    dir: PathBuf,
    server: String,
    http: reqwest::Client,
    published: Mutex<BTreeMap<String, String>>,
    children: Vec<(String, Child)>,
    kubeconfig: PathBuf,
    server_task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Drop for DemoAgents {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.server_task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn token(group: &str) -> String {
    format!("demo-{group}-node-token-0123456789")
}

/// Seeds what bashible-apiserver reads besides NodeGroups: the API server's EndpointSlice and
/// the cluster CA ConfigMap.
fn seed_cluster_context(emulator: &Emulator) -> anyhow::Result<()> {
    let seed = |object: Value| {
        emulator
            .seed(object)
            .map(|_| ())
            .map_err(|e| anyhow::anyhow!("the emulator refused a demo object: {e}"))
    };
    for ns in ["default", keys::NAMESPACE] {
        if emulator.get("v1", "Namespace", "", ns).is_none() {
            seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))?;
        }
    }
    seed(
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"]}],
        "ports": [{"name": "https", "port": 6443}]}),
    )?;
    seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "namespace": keys::NAMESPACE},
        "data": {"ca.crt": CA}}))
}

/// The checksum of `group` in the `configuration-checksums` Secret.
fn published_checksum(emulator: &Emulator, group: &str) -> Option<String> {
    emulator
        .get("v1", "Secret", keys::NAMESPACE, "configuration-checksums")
        .and_then(|s| s["data"][group].as_str().map(str::to_owned))
        .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
}

/// The certificate bashible-apiserver stored in its TLS Secret.
fn server_certificate(emulator: &Emulator) -> Option<String> {
    emulator
        .get("v1", "Secret", keys::NAMESPACE, "bashible-apiserver-tls")
        .and_then(|s| s["data"]["tls.crt"].as_str().map(str::to_owned))
        .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
}

impl DemoAgents {
    /// Writes the tokens, seeds the cluster context and starts bashible-apiserver in cluster
    /// mode; returns once it serves and has published every group's checksum.
    ///
    /// # Errors
    /// A file that cannot be written or a server that does not start.
    pub async fn start(emulator: &Emulator, groups: &[&str]) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("nodemgr-demo-agents-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let grants: String = groups
            .iter()
            .map(|g| format!("{} {g}\n", token(g)))
            .collect();
        std::fs::write(dir.join("tokens"), grants)?;
        seed_cluster_context(emulator)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let listen = format!("127.0.0.1:{port}");
        let config = bashible_apiserver::Config::try_parse_from([
            "bashible-apiserver".as_ref(),
            "--from-cluster".as_ref(),
            "--kubeconfig".as_ref(),
            emulator.kubeconfig_path().as_os_str(),
            "--listen".as_ref(),
            listen.as_ref(),
            "--tls-name".as_ref(),
            "127.0.0.1".as_ref(),
            "--tokens-file".as_ref(),
            dir.join("tokens").as_os_str(),
        ])
        .context("bashible-apiserver's flags")?;
        let server_task = tokio::spawn(bashible_apiserver::run(config));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let started = Instant::now();
        let certificate = loop {
            if let Some(pem) = server_certificate(emulator) {
                break pem;
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("bashible-apiserver stored no TLS certificate");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        std::fs::write(dir.join("server-ca.crt"), &certificate)?;
        let http = reqwest::Client::builder()
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(
                certificate.as_bytes(),
            )?)
            .build()?;
        let agents = Self {
            dir,
            server: format!("https://{listen}"),
            http,
            published: Mutex::new(BTreeMap::new()),
            children: Vec::new(),
            kubeconfig: emulator.kubeconfig_path().to_path_buf(),
            server_task,
        };
        while agents.served_checksum(groups[0]).await.is_err() {
            if started.elapsed() > Duration::from_secs(20) {
                bail!("bashible-apiserver did not answer on {}", agents.server);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for group in groups {
            let sum = agents.served_checksum(group).await?;
            while published_checksum(emulator, group).as_deref() != Some(sum.as_str()) {
                if started.elapsed() > Duration::from_secs(20) {
                    bail!("bashible-apiserver did not publish the checksum of {group}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            agents.remember(group, sum);
        }
        Ok(agents)
    }

    fn remember(&self, group: &str, checksum: String) {
        self.published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(group.to_owned(), checksum);
    }

    fn last_published(&self, group: &str) -> Option<String> {
        self.published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(group)
            .cloned()
    }

    /// Stops the agents and bashible-apiserver (before their files go).
    pub async fn shutdown(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.server_task.abort();
        let _ = (&mut self.server_task).await;
    }

    /// The bundle server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The checksum bashible-apiserver serves for `group`.
    ///
    /// # Errors
    /// When the server does not answer.
    pub async fn served_checksum(&self, group: &str) -> anyhow::Result<String> {
        let body: Value = serde_json::from_str(
            &self
                .http
                .get(format!("{}/v1/groups/{group}/checksum", self.server))
                .bearer_auth(token(group))
                .send()
                .await?
                .error_for_status()?
                .text()
                .await?,
        )?;
        body["checksum"]
            .as_str()
            .map(str::to_owned)
            .context("no checksum in the answer")
    }

    /// Starts the agent of a freshly bootstrapped node (its first pass applies without asking).
    ///
    /// # Errors
    /// A root that cannot be prepared or a process that does not start.
    pub fn add_node(&mut self, node: &str, group: &str) -> anyhow::Result<()> {
        let root = self.dir.join("roots").join(node);
        std::fs::create_dir_all(root.join("var/lib/bashible"))?;
        std::fs::create_dir_all(root.join("etc/kubernetes"))?;
        std::fs::copy(&self.kubeconfig, root.join("etc/kubernetes/kubelet.conf"))?;
        std::fs::write(root.join("var/lib/bashible/bundle-token"), token(group))?;
        std::fs::write(root.join("var/lib/bashible/first_run"), "")?;
        let log = std::fs::File::create(self.dir.join(format!("{node}.log")))?;
        let child = Command::new(std::env::current_exe().context("cannot find my executable")?)
            .arg("agent")
            .args(["--bundle-server", &self.server, "--node-name", node])
            .arg("--bundle-server-ca")
            .arg(self.dir.join("server-ca.crt"))
            .arg("--root")
            .arg(&root)
            .args(["--loop", "1s", "--poll-interval", "300ms"])
            .args(["--step-retry", "1s", "--error-backoff", "500ms"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start the agent of {node}"))?;
        self.children.push((node.to_owned(), child));
        Ok(())
    }

    /// Stops a node's agent (the machine went dark).
    pub fn stop(&mut self, node: &str) {
        for (name, child) in &mut self.children {
            if name == node {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }

    /// After a change of `group` in the emulator: waits until bashible-apiserver publishes
    /// a new checksum of it in the checksums Secret (the one it serves), and returns it.
    ///
    /// # Errors
    /// When no new checksum is published within 20 s.
    pub async fn publish(&self, emulator: &Emulator, group: &str) -> anyhow::Result<String> {
        let old = self.last_published(group);
        let started = Instant::now();
        loop {
            if let Some(now) = published_checksum(emulator, group)
                && Some(&now) != old.as_ref()
                && self.served_checksum(group).await? == now
            {
                self.remember(group, now.clone());
                return Ok(now);
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("bashible-apiserver did not publish a new checksum of {group}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
