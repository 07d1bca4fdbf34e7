//! The demo's node agents: a `bashible-apiserver` serving the demo groups' bundles (in this
//! process, from manifest files the demo keeps in step with the emulator) and one real agent
//! process per node (this executable's hidden `agent` subcommand, the `bashible` binary's
//! code), each in its own root under a temporary directory, with the emulator's kubeconfig
//! standing in for its kubelet's.
//!
//! Nothing in nodemgr writes the `configuration-checksums` Secret from the cluster yet, so the
//! demo writes it from the checksum bashible-apiserver serves (the value the agents apply).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
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

fn group_file(dir: &Path, group: &str) -> PathBuf {
    dir.join("groups").join(format!("{group}.yaml"))
}

impl DemoAgents {
    /// Writes the groups' manifests and tokens, and starts bashible-apiserver.
    ///
    /// # Errors
    /// A file that cannot be written or a server that does not start.
    pub async fn start(emulator: &Emulator, groups: &[&str]) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("nodemgr-demo-agents-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("groups"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::write(dir.join("ca.crt"), CA)?;
        let grants: String = groups
            .iter()
            .map(|g| format!("{} {g}\n", token(g)))
            .collect();
        std::fs::write(dir.join("tokens"), grants)?;
        for group in groups {
            write_group(emulator, &dir, group)?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let listen = format!("127.0.0.1:{port}");
        let config = bashible_apiserver::Config::try_parse_from([
            "bashible-apiserver".as_ref(),
            "--listen".as_ref(),
            listen.as_ref(),
            "--watch-interval".as_ref(),
            "200ms".as_ref(),
            "--api-endpoint".as_ref(),
            "10.0.0.1:6443".as_ref(),
            "--ca-file".as_ref(),
            dir.join("ca.crt").as_os_str(),
            "--tokens-file".as_ref(),
            dir.join("tokens").as_os_str(),
            dir.join("groups").as_os_str(),
        ])
        .context("bashible-apiserver's flags")?;
        let server_task = tokio::spawn(bashible_apiserver::run(config));
        let _ = rustls::crypto::ring::default_provider().install_default();
        let agents = Self {
            dir,
            server: format!("http://{listen}"),
            http: reqwest::Client::new(),
            children: Vec::new(),
            kubeconfig: emulator.kubeconfig_path().to_path_buf(),
            server_task,
        };
        let started = Instant::now();
        while agents.served_checksum(groups[0]).await.is_err() {
            if started.elapsed() > Duration::from_secs(20) {
                bail!("bashible-apiserver did not answer on {}", agents.server);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for group in groups {
            let sum = agents.served_checksum(group).await?;
            write_checksum(emulator, group, &sum)?;
        }
        Ok(agents)
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

    /// After a change of `group` in the emulator: writes its manifest for bashible-apiserver,
    /// waits until the new checksum is served and publishes it in the checksums Secret.
    ///
    /// # Errors
    /// When the server does not serve a new checksum within 20 s.
    pub async fn publish(&self, emulator: &Emulator, group: &str) -> anyhow::Result<String> {
        let old = self.served_checksum(group).await?;
        write_group(emulator, &self.dir, group)?;
        let started = Instant::now();
        loop {
            let now = self.served_checksum(group).await?;
            if now != old {
                write_checksum(emulator, group, &now)?;
                return Ok(now);
            }
            if started.elapsed() > Duration::from_secs(20) {
                bail!("bashible-apiserver did not serve a new bundle of {group}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The emulator's NodeGroup as a manifest (JSON is YAML) for bashible-apiserver.
fn write_group(emulator: &Emulator, dir: &Path, group: &str) -> anyhow::Result<()> {
    let object = emulator
        .get("deckhouse.io/v1", "NodeGroup", "", group)
        .with_context(|| format!("no NodeGroup {group}"))?;
    let manifest = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
        "metadata": {"name": group}, "spec": object["spec"]});
    std::fs::write(group_file(dir, group), manifest.to_string())?;
    Ok(())
}

fn write_checksum(emulator: &Emulator, group: &str, checksum: &str) -> anyhow::Result<()> {
    let encoded = base64::engine::general_purpose::STANDARD.encode(checksum);
    let name = "configuration-checksums";
    let result = if emulator
        .get("v1", "Secret", keys::NAMESPACE, name)
        .is_some()
    {
        emulator.merge_patch(
            "v1",
            "Secret",
            keys::NAMESPACE,
            name,
            &json!({"data": {group: encoded}}),
            false,
        )
    } else {
        emulator.seed(
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": keys::NAMESPACE}, "data": {group: encoded}}),
        )
    };
    result.map_err(|e| anyhow::anyhow!("cannot write Secret {name}: {e}"))?;
    Ok(())
}
