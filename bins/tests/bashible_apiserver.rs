//! Starts the built `bashible-apiserver` on 127.0.0.1 (port 0) and talks to it with a real
//! HTTP client (reqwest): tokens (401/403), the bundle, checksum, bootstrap and cleanup
//! scripts and their Deckhouse-shaped twins, reloads on file change and on SIGHUP, and the
//! last good bundle of a group that stops rendering. Each test stops the server it started.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nodemgr_core::bashible::{ClusterContext, Renderer};
use nodemgr_core::model::parse_node_group;
use reqwest::StatusCode;
use reqwest::blocking::Client;

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";
const JOIN_TOKEN: &str = "abcdef.0123456789abcdef";
const WORKER_TOKEN: &str = "worker-token-0123456789";
const ADMIN_TOKEN: &str = "admin-token-0123456789ab";

const WORKER: &str = "apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: worker}
spec:
  nodeType: Static
  staticInstances: {count: 2}
  kubelet: {maxPods: 150}
";
const GPU: &str = "apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: gpu}
spec:
  nodeType: Static
  cri: {type: ContainerdV2}
";

struct Server {
    child: Child,
    base: String,
    dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(extra: &[&str]) -> Self {
        Self::start_with(&[], extra)
    }

    /// [`Server::start`] with more NodeGroup manifests (file name, YAML) in its directory.
    fn start_with(groups: &[(&str, &str)], extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let manifests = dir.path().join("groups");
        std::fs::create_dir(&manifests).unwrap();
        std::fs::write(manifests.join("worker.yaml"), WORKER).unwrap();
        std::fs::write(manifests.join("gpu.yaml"), GPU).unwrap();
        for (file, yaml) in groups {
            std::fs::write(manifests.join(file), yaml).unwrap();
        }
        std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
        std::fs::write(dir.path().join("join-token"), JOIN_TOKEN).unwrap();
        std::fs::write(
            dir.path().join("tokens"),
            format!("# node tokens\n{WORKER_TOKEN} worker\n{ADMIN_TOKEN} *\n"),
        )
        .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"));
        cmd.arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--tokens-file")
            .arg(dir.path().join("tokens"))
            .arg("--api-endpoint")
            .arg("10.0.0.1:6443")
            .arg("--ca-file")
            .arg(dir.path().join("ca.crt"))
            .arg("--bootstrap-token-file")
            .arg(dir.path().join("join-token"))
            .args(extra)
            .arg(&manifests)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server prints its address");
        let address = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self {
            child,
            base: format!("http://{address}"),
            dir,
        }
    }

    fn manifest(&self, name: &str) -> PathBuf {
        self.dir.path().join("groups").join(name)
    }

    /// Replaces a manifest atomically (written beside the directory, then renamed), so that
    /// the server's reload never reads it half-written.
    fn write_manifest(&self, name: &str, text: &str) {
        let staged = self.dir.path().join(format!("{name}.staged"));
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, self.manifest(name)).unwrap();
    }

    fn get(&self, path: &str, token: Option<&str>) -> reqwest::blocking::Response {
        // reqwest has no built-in crypto provider in this workspace: ring, as everywhere.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::new();
        let mut request = client.get(format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send().unwrap()
    }

    fn checksum(&self, group: &str) -> String {
        let response = self.get(&format!("/v1/groups/{group}/checksum"), Some(ADMIN_TOKEN));
        assert_eq!(response.status(), StatusCode::OK);
        let body: serde_json::Value = serde_json::from_str(&response.text().unwrap()).unwrap();
        body["checksum"].as_str().unwrap().to_owned()
    }

    /// Waits (up to 20 s) until `group`'s checksum differs from `old`.
    fn wait_for_change(&self, group: &str, old: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let now = self.checksum(group);
            if now != old {
                return now;
            }
            assert!(Instant::now() < deadline, "{group} was not reloaded");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn expected_checksum(yaml: &str) -> String {
    let cluster = ClusterContext {
        api_endpoints: vec!["10.0.0.1:6443".into()],
        ca_cert: CA.into(),
        ..ClusterContext::default()
    };
    Renderer::new()
        .bundle(&parse_node_group(yaml).unwrap(), &cluster)
        .unwrap()
        .checksum
}

fn bash_n(script: &str, dir: &Path) {
    let path = dir.join("check.sh");
    std::fs::write(&path, script).unwrap();
    let out = Command::new("bash").arg("-n").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tokens_decide_who_reads_what() {
    let server = Server::start(&["--watch-interval", "0s"]);
    assert_eq!(server.get("/healthz", None).text().unwrap(), "ok");

    let missing = server.get("/v1/groups/worker/bundle", None);
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        missing.headers()["www-authenticate"],
        "Bearer realm=\"bashible\""
    );
    assert_eq!(
        server
            .get("/v1/groups/worker/bundle", Some("wrong-token-0123456789"))
            .status(),
        StatusCode::UNAUTHORIZED
    );
    // The worker token reads worker, not gpu.
    assert_eq!(
        server
            .get("/v1/groups/gpu/bundle", Some(WORKER_TOKEN))
            .status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        server
            .get("/v1/groups/gpu/bootstrap.sh", Some(WORKER_TOKEN))
            .status(),
        StatusCode::FORBIDDEN
    );
    let list: serde_json::Value =
        serde_json::from_str(&server.get("/v1/groups", Some(WORKER_TOKEN)).text().unwrap())
            .unwrap();
    assert_eq!(list["groups"].as_array().unwrap().len(), 1);
    assert_eq!(list["groups"][0]["name"], "worker");
    // An unknown group is 404 for a token that may read everything.
    assert_eq!(
        server
            .get("/v1/groups/nope/bundle", Some(ADMIN_TOKEN))
            .status(),
        StatusCode::NOT_FOUND
    );
}

#[test]
fn serves_bundles_checksums_and_scripts() {
    let server = Server::start(&["--watch-interval", "0s"]);
    let response = server.get("/v1/groups/worker/bundle", Some(WORKER_TOKEN));
    assert_eq!(response.status(), StatusCode::OK);
    let bundle: serde_json::Value = serde_json::from_str(&response.text().unwrap()).unwrap();
    assert_eq!(bundle["group"], "worker");
    assert_eq!(bundle["checksum"], expected_checksum(WORKER).as_str());
    let names: Vec<&str> = bundle["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "000_node_users.sh",
            "001_ca.sh",
            "010_os_settings.sh",
            "020_containerd.sh",
            "030_kubelet.sh",
            "090_cleanup_script.sh"
        ]
    );
    assert!(
        bundle["steps"][4]["script"]
            .as_str()
            .unwrap()
            .contains("\"maxPods\": 150")
    );
    assert_eq!(server.checksum("worker"), expected_checksum(WORKER));

    // Only the operator's `*` token gets a script with the cluster-wide join token: a node's
    // token scoped to its group is refused (the group has no join token of its own here).
    let refused = server.get("/v1/groups/worker/bootstrap.sh", Some(WORKER_TOKEN));
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert!(!refused.text().unwrap().contains(JOIN_TOKEN));
    let response = server.get("/v1/groups/worker/bootstrap.sh", Some(ADMIN_TOKEN));
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/x-shellscript")
    );
    let bootstrap = response.text().unwrap();
    assert!(bootstrap.contains(JOIN_TOKEN));
    assert!(bootstrap.contains(&expected_checksum(WORKER)));
    bash_n(&bootstrap, server.dir.path());
    let cleanup = server
        .get("/v1/groups/worker/cleanup.sh", Some(WORKER_TOKEN))
        .text()
        .unwrap();
    assert!(cleanup.contains("--yes-i-am-sane-and-i-understand-what-i-am-doing"));
    bash_n(&cleanup, server.dir.path());

    // Deckhouse's object shapes, named <bundle>.<group>.
    let object: serde_json::Value = serde_json::from_str(
        &server
            .get(
                "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/ubuntu-lts.worker",
                Some(WORKER_TOKEN),
            )
            .text()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(object["kind"], "NodeGroupBundle");
    assert_eq!(object["metadata"]["name"], "ubuntu-lts.worker");
    assert_eq!(
        object["data"]["030_kubelet.sh"],
        bundle["steps"][4]["script"]
    );
    let object: serde_json::Value = serde_json::from_str(
        &server
            .get(
                "/apis/bashible.deckhouse.io/v1alpha1/bootstrap/ubuntu-lts.worker",
                Some(ADMIN_TOKEN),
            )
            .text()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(object["data"]["bootstrap.sh"], bootstrap.as_str());
    assert_eq!(
        server
            .get(
                "/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/ubuntu-lts.gpu",
                Some(WORKER_TOKEN),
            )
            .status(),
        StatusCode::FORBIDDEN
    );
}

/// A manifest rewritten in place (truncated, then written a moment later, as `echo >` or a
/// slow editor does) is never read half-written: the group is served throughout and the new
/// content arrives.
#[test]
fn a_manifest_rewritten_in_place_never_drops_its_group() {
    use std::io::Write as _;
    let server = Server::start(&["--watch-interval", "50ms"]);
    let mut text = WORKER.to_owned();
    for round in 0..3 {
        let before = server.checksum("worker");
        text = text.replace(
            &format!("maxPods: {}", 150 + round),
            &format!("maxPods: {}", 151 + round),
        );
        let path = server.manifest("worker.yaml");
        let content = text.clone();
        let writer = std::thread::spawn(move || {
            let mut file = std::fs::File::create(&path).unwrap(); // truncates
            std::thread::sleep(Duration::from_millis(120));
            file.write_all(content.as_bytes()).unwrap();
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let response = server.get("/v1/groups/worker/checksum", Some(ADMIN_TOKEN));
            assert_eq!(
                response.status(),
                StatusCode::OK,
                "round {round}: the group was dropped while its file was rewritten"
            );
            let body: serde_json::Value = serde_json::from_str(&response.text().unwrap()).unwrap();
            if body["checksum"] != before.as_str() {
                assert_eq!(body["checksum"], expected_checksum(&text).as_str());
                break;
            }
            assert!(Instant::now() < deadline, "round {round}: not reloaded");
            std::thread::sleep(Duration::from_millis(5));
        }
        writer.join().unwrap();
    }
}

#[test]
fn reloads_on_file_change_and_keeps_the_last_good_bundle() {
    let server = Server::start(&["--watch-interval", "200ms"]);
    let before = server.checksum("worker");
    server.write_manifest("worker.yaml", &WORKER.replace("150", "200"));
    let after = server.wait_for_change("worker", &before);
    assert_eq!(after, expected_checksum(&WORKER.replace("150", "200")));

    // A change that breaks the group: the last good bundle stays, marked stale.
    server.write_manifest(
        "worker.yaml",
        &WORKER.replace("{maxPods: 150}", "{rootDir: relative}"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = server.get("/v1/groups/worker/bundle", Some(ADMIN_TOKEN));
        assert_eq!(response.status(), StatusCode::OK);
        if let Some(stale) = response.headers().get("x-nodemgr-stale") {
            assert!(stale.to_str().unwrap().contains("spec.kubelet.rootDir"));
            let body: serde_json::Value = serde_json::from_str(&response.text().unwrap()).unwrap();
            assert_eq!(body["checksum"], after.as_str());
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broken group was not noticed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A new group that never rendered is 503 with the reason.
    std::fs::write(
        server.manifest("broken.yaml"),
        "apiVersion: deckhouse.io/v1\nkind: NodeGroup\nmetadata: {name: broken}\nspec:\n  nodeType: Static\n  cri: {type: Docker}\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = server.get("/v1/groups/broken/bundle", Some(ADMIN_TOKEN));
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            assert!(response.text().unwrap().contains("Docker is not supported"));
            break;
        }
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(Instant::now() < deadline, "the new group was not loaded");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_huge_quantity_in_a_group_is_refused_by_name_and_the_server_keeps_serving() {
    // The reserved memory overflowed the quantity arithmetic and crashed the server at start.
    let huge = "apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: huge}
spec:
  nodeType: Static
  kubelet:
    resourceReservation:
      mode: Static
      static: {memory: 99999999999999999999Ei}
";
    let server = Server::start_with(&[("huge.yaml", huge)], &[]);
    let response = server.get("/v1/groups/huge/bundle", Some(ADMIN_TOKEN));
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let reason = response.text().unwrap();
    assert!(reason.contains("too large"), "{reason}");
    assert!(
        reason.contains("spec.kubelet.resourceReservation.static.memory"),
        "{reason}"
    );
    // The other groups are served as before.
    assert_eq!(
        server
            .get("/v1/groups/worker/bundle", Some(ADMIN_TOKEN))
            .status(),
        StatusCode::OK
    );
}

#[test]
fn reloads_on_sighup() {
    let server = Server::start(&["--watch-interval", "0s"]);
    let before = server.checksum("gpu");
    std::fs::write(
        server.manifest("gpu.yaml"),
        GPU.replace("{type: ContainerdV2}", "{type: Containerd}"),
    )
    .unwrap();
    // Without polling nothing changes until the signal.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.checksum("gpu"), before);
    let status = Command::new("kill")
        .arg("-HUP")
        .arg(server.child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let after = server.wait_for_change("gpu", &before);
    assert_eq!(
        after,
        expected_checksum(&GPU.replace("{type: ContainerdV2}", "{type: Containerd}"))
    );
}

#[test]
fn refuses_to_start_without_tokens_or_with_a_bad_join_token() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("worker.yaml"), WORKER).unwrap();
    std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--api-endpoint",
            "10.0.0.1:6443",
            "--ca-file",
        ])
        .arg(dir.path().join("ca.crt"))
        .arg(dir.path().join("worker.yaml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tokens-file"));

    std::fs::write(dir.path().join("join"), "nope").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--api-endpoint",
            "10.0.0.1:6443",
            "--ca-file",
        ])
        .arg(dir.path().join("ca.crt"))
        .args([
            "--token",
            &format!("{ADMIN_TOKEN}=*"),
            "--bootstrap-token-file",
        ])
        .arg(dir.path().join("join"))
        .arg(dir.path().join("worker.yaml"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bootstrap token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn configurations_and_users_in_the_manifests_join_their_groups_bundles() {
    let server = Server::start(&["--watch-interval", "200ms"]);
    let worker_before = server.checksum("worker");
    let gpu_before = server.checksum("gpu");
    server.write_manifest(
        "custom.yaml",
        "apiVersion: deckhouse.io/v1alpha1\nkind: NodeGroupConfiguration\nmetadata: {name: motd.sh}\n\
         spec: {weight: 40, nodeGroups: [worker], content: \"echo hi > /etc/motd\"}\n\
         ---\napiVersion: deckhouse.io/v1alpha1\nkind: NodeGroupConfiguration\nmetadata: {name: bad}\n\
         spec: {content: \"echo bad\"}\n\
         ---\napiVersion: deckhouse.io/v1\nkind: NodeUser\nmetadata: {name: ops}\n\
         spec: {uid: 1001, nodeGroups: [worker]}\n",
    );
    server.wait_for_change("worker", &worker_before);
    let bundle: serde_json::Value = serde_json::from_str(
        &server
            .get("/v1/groups/worker/bundle", Some(WORKER_TOKEN))
            .text()
            .unwrap(),
    )
    .unwrap();
    let steps = bundle["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "000_node_users.sh",
            "001_ca.sh",
            "010_os_settings.sh",
            "020_containerd.sh",
            "030_kubelet.sh",
            "040_motd.sh",
            "090_cleanup_script.sh"
        ]
    );
    assert!(
        steps[0]["script"]
            .as_str()
            .unwrap()
            .contains("bb_node_user 'ops' '1001'")
    );
    // The invalid configuration reached no bundle, and gpu is untouched.
    assert_eq!(server.checksum("gpu"), gpu_before);
}

/// A bearer token scoped to a group never reads the cluster-wide join token: it gets the
/// group's own token from --bootstrap-token-dir, or a 403 saying what to configure; the `*`
/// token gets the cluster-wide one (the override).
#[test]
fn group_scoped_tokens_get_only_their_groups_own_join_token() {
    const WORKER_JOIN: &str = "wrkr01.0123456789worker";
    let tokens = tempfile::tempdir().unwrap();
    std::fs::write(tokens.path().join("worker"), WORKER_JOIN).unwrap();
    let server = Server::start(&[
        "--watch-interval",
        "0s",
        "--bootstrap-token-dir",
        tokens.path().to_str().unwrap(),
        "--token",
        "gpu-token-0123456789ab=gpu",
    ]);
    // worker has its own token: the node's bearer token granted worker gets that one, never
    // the cluster-wide one; the operator's `*` token gets the cluster-wide one, which
    // --bootstrap-token-file makes an override for every group (docs/bashible-apiserver.md).
    let script = server
        .get("/v1/groups/worker/bootstrap.sh", Some(WORKER_TOKEN))
        .text()
        .unwrap();
    assert!(script.contains(WORKER_JOIN));
    assert!(
        !script.contains(JOIN_TOKEN),
        "the cluster-wide token leaked to a group-scoped token"
    );
    let script = server
        .get("/v1/groups/worker/bootstrap.sh", Some(ADMIN_TOKEN))
        .text()
        .unwrap();
    assert!(script.contains(JOIN_TOKEN), "the override");
    assert!(!script.contains(WORKER_JOIN));
    // gpu has none: the cluster-wide token goes to the `*` token only.
    let gpu = server.get("/v1/groups/gpu/bootstrap.sh", Some(ADMIN_TOKEN));
    assert_eq!(gpu.status(), StatusCode::OK);
    assert!(gpu.text().unwrap().contains(JOIN_TOKEN));
    let refused = server.get(
        "/v1/groups/gpu/bootstrap.sh",
        Some("gpu-token-0123456789ab"),
    );
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let message = refused.text().unwrap();
    assert!(message.contains("--bootstrap-token-dir"), "{message}");
    assert!(!message.contains(JOIN_TOKEN));
    let refused = server.get(
        "/apis/bashible.deckhouse.io/v1alpha1/bootstrap/ubuntu-lts.gpu",
        Some("gpu-token-0123456789ab"),
    );
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    // The group's bundle stays readable with its scoped token.
    assert_eq!(
        server
            .get("/v1/groups/gpu/bundle", Some("gpu-token-0123456789ab"))
            .status(),
        StatusCode::OK
    );
}

#[test]
fn the_agent_binary_is_served_to_known_tokens_only() {
    let binary_dir = tempfile::tempdir().unwrap();
    let binary = binary_dir.path().join("bashible");
    let content: Vec<u8> = (0..=255_u8).cycle().take(70_000).collect();
    std::fs::write(&binary, &content).unwrap();
    let server = Server::start(&[
        "--watch-interval",
        "0s",
        "--agent-binary",
        binary.to_str().unwrap(),
    ]);
    // Missing and wrong tokens get the one 401 of every path: same status, headers that
    // matter and body, so nothing tells them apart.
    let answer = |token: Option<&str>, path: &str| {
        let response = server.get(path, token);
        let status = response.status();
        let challenge = response
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned());
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, challenge, content_type, response.text().unwrap())
    };
    let missing = answer(None, "/v1/agent/bashible");
    assert_eq!(missing.0, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.3, r#"{"error":"Unauthorized"}"#);
    assert_eq!(
        answer(Some("wrong-token-0123456789"), "/v1/agent/bashible"),
        missing
    );
    assert_eq!(answer(None, "/v1/groups/worker/bundle"), missing);
    let served = server.get("/v1/agent/bashible", Some(WORKER_TOKEN));
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.bytes().unwrap().as_ref(), content.as_slice());

    let without = Server::start(&["--watch-interval", "0s"]);
    let missing = without.get("/v1/agent/bashible", Some(WORKER_TOKEN));
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(missing.text().unwrap().contains("--agent-binary"));
}

#[test]
fn a_bootstrap_script_installs_the_node_agent_with_its_groups_token() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("groups");
    std::fs::create_dir(&manifests).unwrap();
    std::fs::write(manifests.join("worker.yaml"), WORKER).unwrap();
    std::fs::write(dir.path().join("ca.crt"), CA).unwrap();
    // The group's own join token: a node's group-scoped bearer token never gets a cluster-wide one.
    std::fs::create_dir(dir.path().join("join-tokens")).unwrap();
    std::fs::write(dir.path().join("join-tokens").join("worker"), JOIN_TOKEN).unwrap();
    std::fs::write(
        dir.path().join("tokens"),
        format!("{WORKER_TOKEN} worker\n{ADMIN_TOKEN} *\n"),
    )
    .unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let agent = env!("CARGO_BIN_EXE_bashible");
    let child = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"))
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .args(["--public-url", &url, "--agent-binary", agent])
        .arg("--tokens-file")
        .arg(dir.path().join("tokens"))
        .args(["--api-endpoint", "10.0.0.1:6443"])
        .arg("--ca-file")
        .arg(dir.path().join("ca.crt"))
        .arg("--bootstrap-token-dir")
        .arg(dir.path().join("join-tokens"))
        .arg("--root")
        .arg(&root)
        .arg(&manifests)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut server = Server {
        child,
        base: url.clone(),
        dir: tempfile::tempdir().unwrap(),
    };
    let mut line = String::new();
    BufReader::new(server.child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on"), "{line}");
    let script = server
        .get("/v1/groups/worker/bootstrap.sh", Some(WORKER_TOKEN))
        .text()
        .unwrap();
    assert!(script.contains(WORKER_TOKEN));
    assert!(
        !script.contains(ADMIN_TOKEN),
        "a `*` token never reaches a node"
    );
    let path = dir.path().join("bootstrap.sh");
    std::fs::write(&path, &script).unwrap();
    let out = Command::new("bash").arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let installed = root.join("opt/nodemgr/bin/bashible");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(agent).unwrap()
    );
    assert_eq!(
        std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );
    let token = root.join("var/lib/bashible/bundle-token");
    assert_eq!(std::fs::read_to_string(&token).unwrap(), WORKER_TOKEN);
    assert_eq!(
        std::fs::metadata(&token).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let service =
        std::fs::read_to_string(root.join("etc/systemd/system/bashible.service")).unwrap();
    assert!(
        service.contains(&format!(
            "ExecStart=/opt/nodemgr/bin/bashible --bundle-server {url} --group worker\n"
        )),
        "{service}"
    );
    assert!(root.join("etc/systemd/system/bashible.timer").exists());
    let host = std::fs::read_to_string(root.join(".nodemgr-host-commands.log")).unwrap();
    assert!(
        host.contains("systemctl enable --now bashible.timer"),
        "{host}"
    );
    // The agent starts from what the bootstrap applied: every step done, the same checksum.
    let progress = nodemgr_core::agent::Progress::parse(
        &std::fs::read_to_string(root.join("var/lib/bashible/nodemgr_progress.json")).unwrap(),
    )
    .unwrap();
    let checksum =
        std::fs::read_to_string(root.join("var/lib/bashible/configuration_checksum")).unwrap();
    assert_eq!(progress.bundle.as_deref(), Some(checksum.trim()));
    // The six built-in steps (users, CA, OS settings, containerd, kubelet, cleanup script).
    assert_eq!(progress.done.len(), 6, "{progress:?}");
    assert_eq!(
        progress
            .applied_keys
            .get("020_containerd.sh")
            .map(String::as_str),
        Some("cri.type=Containerd")
    );
    // The token never lands on a command line: curl reads the header from a file descriptor.
    assert!(!script.contains(&format!("Bearer {WORKER_TOKEN}")));
}
