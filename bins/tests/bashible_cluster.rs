//! bashible-apiserver in cluster mode against the API emulator: what it renders from the
//! cluster (NodeGroupConfigurations in weight order, for their groups only), the Secrets it
//! keeps (checksums, manual bootstrap), its TLS certificate and the APIService shape, two
//! replicas serving the same bytes, 401 without detail, the last good bundles served
//! while the API is gone, a start with no NodeGroup and no bearer token at all, the
//! groups' bootstrap tokens becoming grants as node-manager mints them, and a bootstrap script
//! that installs the node agent over HTTPS, trusting the server's certificate by the CA it
//! carries (run into a test root).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nodemgr_core::model::{Timestamp, keys};
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};

const TOKEN: &str = "cluster-test-token-0123456789";
const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n";

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn group(name: &str, node_type: &str) -> Value {
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name},
        "spec": {"nodeType": node_type}})
}

fn configuration(name: &str, weight: u32, groups: &[&str]) -> Value {
    json!({"apiVersion": "deckhouse.io/v1alpha1", "kind": "NodeGroupConfiguration",
        "metadata": {"name": name},
        "spec": {"weight": weight, "nodeGroups": groups, "content": format!("echo {name}\n")}})
}

async fn emulator() -> Emulator {
    let emulator = bare_emulator().await;
    emulator.seed(group("worker", "CloudEphemeral")).unwrap();
    emulator.seed(group("frontend", "CloudEphemeral")).unwrap();
    emulator.seed(group("metal", "Static")).unwrap();
    emulator
}

/// An emulator with the cluster context and no NodeGroup.
async fn bare_emulator() -> Emulator {
    let emulator = Emulator::start().await.unwrap();
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    for ns in ["default", "kube-system", keys::NAMESPACE] {
        if emulator.get("v1", "Namespace", "", ns).is_none() {
            emulator
                .seed(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
                .unwrap();
        }
    }
    emulator
        .seed(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.2"]}, {"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "https", "port": 6443}]}),
        )
        .unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": keys::NAMESPACE},
            "data": {"ca.crt": CA}}))
        .unwrap();
    emulator
        .seed(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bashible-apiserver-settings", "namespace": keys::NAMESPACE},
            "data": {"settings.yaml": "clusterDomain: corp.local\nkubernetesVersion: \"1.33\"\n"}}))
        .unwrap();
    emulator
}

struct Server {
    _process: Process,
    url: String,
}

fn start(emulator: &Emulator, dir: &Path) -> Server {
    std::fs::write(dir.join("tokens"), format!("{TOKEN} *\n")).unwrap();
    let tokens = dir.join("tokens");
    start_with(emulator, &["--tokens-file".as_ref(), tokens.as_os_str()])
}

/// Starts a server with `extra` flags; waits until it listens.
fn start_with(emulator: &Emulator, extra: &[&std::ffi::OsStr]) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bashible-apiserver"));
    command.args(["--from-cluster", "--debounce", "200ms"]);
    if !extra.iter().any(|a| *a == "--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    let mut child = command
        .arg("--kubeconfig")
        .arg(emulator.kubeconfig_path())
        .args(["--tls-name", "127.0.0.1"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    Server {
        _process: Process(child),
        url: format!("https://{address}"),
    }
}

fn certificate(emulator: &Emulator) -> String {
    let secret = emulator
        .get("v1", "Secret", keys::NAMESPACE, "bashible-apiserver-tls")
        .unwrap();
    nodemgr_k8s::cluster::decode_checksum(secret["data"]["tls.crt"].as_str().unwrap()).unwrap()
}

fn client(emulator: &Emulator) -> reqwest::blocking::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::blocking::Client::builder()
        .tls_certs_only(
            reqwest::Certificate::from_pem_bundle(certificate(emulator).as_bytes()).unwrap(),
        )
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Status and body of `GET url` with `token`.
fn get(client: &reqwest::blocking::Client, url: &str, token: Option<&str>) -> (u16, String) {
    let mut request = client.get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().unwrap();
    (response.status().as_u16(), response.text().unwrap())
}

fn json_of(client: &reqwest::blocking::Client, url: &str) -> Value {
    let (status, body) = get(client, url, Some(TOKEN));
    assert_eq!(status, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn step_names(client: &reqwest::blocking::Client, server: &Server, group: &str) -> Vec<String> {
    json_of(client, &format!("{}/v1/groups/{group}/bundle", server.url))["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect()
}

fn wait_for(what: &str, secs: u64, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        if check() {
            return started.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out after {secs}s waiting for {what}");
}

fn published(emulator: &Emulator, group: &str) -> Option<String> {
    emulator
        .get("v1", "Secret", keys::NAMESPACE, "configuration-checksums")
        .and_then(|s| s["data"][group].as_str().map(str::to_owned))
        .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
}

/// Every path a replica serves, for the byte-for-byte comparison.
fn every_path() -> Vec<String> {
    let mut paths = vec![
        "/apis".to_owned(),
        "/apis/bashible.deckhouse.io".to_owned(),
        "/apis/bashible.deckhouse.io/v1alpha1".to_owned(),
        "/v1/groups".to_owned(),
    ];
    for resource in ["nodegroupbundles", "bootstrap", "bashibles"] {
        paths.push(format!("/apis/bashible.deckhouse.io/v1alpha1/{resource}"));
        for group in ["worker", "frontend", "metal"] {
            paths.push(format!(
                "/apis/bashible.deckhouse.io/v1alpha1/{resource}/ubuntu-lts.{group}"
            ));
        }
    }
    for group in ["worker", "frontend", "metal"] {
        for what in ["bundle", "checksum", "bootstrap.sh", "cleanup.sh"] {
            paths.push(format!("/v1/groups/{group}/{what}"));
        }
    }
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configurations_reach_their_groups_in_weight_order_and_the_checksum_secret_follows() {
    let emulator = emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let server = tokio::task::block_in_place(|| start(&emulator, dir.path()));
    let http = tokio::task::block_in_place(|| client(&emulator));
    tokio::task::block_in_place(|| {
        let worker_before = published(&emulator, "worker").expect("published at start");
        let frontend_before = published(&emulator, "frontend").expect("published at start");
        assert!(published(&emulator, "metal").is_some());

        // A NodeGroup edit changes that group's checksum in the Secret.
        emulator
            .merge_patch(
                "deckhouse.io/v1",
                "NodeGroup",
                "",
                "frontend",
                &json!({"spec": {"kubelet": {"maxPods": 150}}}),
                false,
            )
            .unwrap();
        let delay = wait_for("frontend's new checksum in the Secret", 10, || {
            published(&emulator, "frontend").is_some_and(|c| c != frontend_before)
        });
        println!(
            "NodeGroup edit -> checksum Secret: {} ms",
            delay.as_millis()
        );
        let frontend_after = published(&emulator, "frontend").unwrap();

        // Two configurations for worker, the heavier created first; one for another group.
        emulator
            .seed(configuration("late.sh", 150, &["worker"]))
            .unwrap();
        emulator
            .seed(configuration("early.sh", 40, &["worker"]))
            .unwrap();
        emulator
            .seed(configuration("elsewhere.sh", 60, &["gpu"]))
            .unwrap();
        wait_for("worker's new checksum", 10, || {
            published(&emulator, "worker").is_some_and(|c| c != worker_before)
                && step_names(&http, &server, "worker")
                    .iter()
                    .any(|s| s == "150_late.sh")
        });
        let worker = step_names(&http, &server, "worker");
        let early = worker.iter().position(|s| s == "040_early.sh").unwrap();
        let late = worker.iter().position(|s| s == "150_late.sh").unwrap();
        assert!(early < late, "{worker:?}");
        assert!(!worker.iter().any(|s| s.contains("elsewhere")));
        let mut sorted = worker.clone();
        sorted.sort();
        assert_eq!(worker, sorted, "steps run in name (weight) order");
        let frontend = step_names(&http, &server, "frontend");
        assert!(
            !frontend
                .iter()
                .any(|s| s.contains("late") || s.contains("early"))
        );
        assert_eq!(
            published(&emulator, "frontend").unwrap(),
            frontend_after,
            "another group's configuration leaves frontend's checksum alone"
        );
        let served = json_of(&http, &format!("{}/v1/groups/worker/checksum", server.url));
        assert_eq!(
            published(&emulator, "worker").as_deref(),
            served["checksum"].as_str()
        );

        // The cluster context comes from the EndpointSlice, the CA ConfigMap and the settings.
        let bundle = json_of(
            &http,
            &format!(
                "{}/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles/ubuntu-lts.worker",
                server.url
            ),
        );
        assert_eq!(bundle["kind"], "NodeGroupBundle");
        assert_eq!(bundle["apiVersion"], "bashible.deckhouse.io/v1alpha1");
        let all = bundle["data"].to_string();
        assert!(
            all.contains("corp.local"),
            "cluster domain from the settings"
        );
        assert!(all.contains("MIIBfake"), "CA from kube-root-ca.crt");

        // The metric counts configurations per targeted group.
        let (status, metrics) = get(&http, &format!("{}/metrics", server.url), None);
        assert_eq!(status, 200);
        assert!(
            metrics.contains("d8_node_group_configurations_total{node_group=\"worker\"} 2"),
            "{metrics}"
        );
        assert!(metrics.contains("d8_node_group_configurations_total{node_group=\"gpu\"} 1"));
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_bootstrap_secrets_carry_the_groups_token_and_follow_the_node_type() {
    let emulator = emulator().await;
    let token = nodemgr_core::bashible::BootstrapToken::new("abcdef.0123456789abcdef").unwrap();
    let expires = Timestamp::from_secs(
        i64::try_from(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        )
        .unwrap()
            + 3600,
    );
    let secret = nodemgr_k8s::controllers::bootstrap_tokens::token_secret(&token, "metal", expires);
    emulator
        .seed(serde_json::to_value(secret).unwrap())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _server = tokio::task::block_in_place(|| start(&emulator, dir.path()));
    tokio::task::block_in_place(|| {
        let script = |group: &str| {
            emulator
                .get(
                    "v1",
                    "Secret",
                    keys::NAMESPACE,
                    &format!("manual-bootstrap-for-{group}"),
                )
                .and_then(|s| s["data"]["bootstrap.sh"].as_str().map(str::to_owned))
                .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
        };
        wait_for("manual-bootstrap-for-metal", 10, || {
            script("metal").is_some()
        });
        assert!(script("metal").unwrap().contains("abcdef.0123456789abcdef"));
        assert!(script("worker").is_none(), "CloudEphemeral groups get none");
        // metal stops being Static: its Secret goes.
        emulator
            .merge_patch(
                "deckhouse.io/v1",
                "NodeGroup",
                "",
                "metal",
                &json!({"spec": {"nodeType": "CloudPermanent"}}),
                false,
            )
            .unwrap();
        wait_for("manual-bootstrap-for-metal deleted", 10, || {
            script("metal").is_none()
        });
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_serve_the_same_bytes_and_share_one_certificate() {
    let emulator = emulator().await;
    emulator.seed(configuration("both.sh", 70, &["*"])).unwrap();
    emulator
        .seed(json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeUser",
            "metadata": {"name": "ops"},
            "spec": {"uid": 1600, "isSudoer": true, "nodeGroups": ["*"],
                "sshPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJx ops@example"]}}))
        .unwrap();
    let token = nodemgr_core::bashible::BootstrapToken::new("ghijkl.0123456789abcdef").unwrap();
    let expires = Timestamp::from_secs(4_000_000_000);
    for group in ["worker", "frontend", "metal"] {
        let secret =
            nodemgr_k8s::controllers::bootstrap_tokens::token_secret(&token, group, expires);
        let mut value = serde_json::to_value(secret).unwrap();
        value["metadata"]["name"] = json!(format!("bootstrap-token-{group}"));
        emulator.seed(value).unwrap();
    }
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let (a, b) = tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let first = s.spawn(|| start(&emulator, dirs[0].path()));
            let second = s.spawn(|| start(&emulator, dirs[1].path()));
            (first.join().unwrap(), second.join().unwrap())
        })
    });
    tokio::task::block_in_place(|| {
        let http = client(&emulator);
        let paths = every_path();
        for path in &paths {
            let (status_a, body_a) = get(&http, &format!("{}{path}", a.url), Some(TOKEN));
            let (status_b, body_b) = get(&http, &format!("{}{path}", b.url), Some(TOKEN));
            assert_eq!(status_a, 200, "{path}: {body_a}");
            assert_eq!((status_a, &body_a), (status_b, &body_b), "{path}");
        }
        println!("two replicas: {} paths compared byte for byte", paths.len());
        // Both trusted by the one certificate in the Secret (the client pins it).
        let secrets = emulator.list("v1", "Secret", Some(keys::NAMESPACE));
        assert_eq!(
            secrets
                .iter()
                .filter(|s| s["metadata"]["name"] == "bashible-apiserver-tls")
                .count(),
            1
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_gets_401_without_detail_and_the_last_bundles_outlive_the_api() {
    let emulator = emulator().await;
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    for (token, group, expires) in [
        ("valid1.0123456789abcdef", "metal", now + 3600),
        ("stale1.0123456789abcdef", "worker", now - 3600),
    ] {
        let token = nodemgr_core::bashible::BootstrapToken::new(token).unwrap();
        let secret = nodemgr_k8s::controllers::bootstrap_tokens::token_secret(
            &token,
            group,
            Timestamp::from_secs(expires),
        );
        emulator
            .seed(serde_json::to_value(secret).unwrap())
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let server = tokio::task::block_in_place(|| start(&emulator, dir.path()));
    let http = tokio::task::block_in_place(|| client(&emulator));
    let url = format!("{}/v1/groups/worker/bundle", server.url);
    let before = tokio::task::block_in_place(|| {
        let missing = get(&http, &url, None);
        let wrong = get(&http, &url, Some("wrong-token-0123456789abcdef"));
        assert_eq!(missing.0, 401);
        assert_eq!(
            missing, wrong,
            "missing and wrong tokens get the same answer"
        );
        assert_eq!(wrong.1, r#"{"error":"Unauthorized"}"#);
        let discovery = get(
            &http,
            &format!(
                "{}/apis/bashible.deckhouse.io/v1alpha1/nodegroupbundles",
                server.url
            ),
            Some("wrong-token-0123456789abcdef"),
        );
        assert_eq!(discovery, wrong);
        // A group's unexpired bootstrap token reads its group only; an expired one is unknown.
        let metal = format!("{}/v1/groups/metal/bundle", server.url);
        assert_eq!(get(&http, &metal, Some("valid1.0123456789abcdef")).0, 200);
        assert_eq!(get(&http, &url, Some("valid1.0123456789abcdef")).0, 403);
        assert_eq!(get(&http, &url, Some("stale1.0123456789abcdef")), wrong);
        let (status, body) = get(&http, &url, Some(TOKEN));
        assert_eq!(status, 200);
        body
    });
    emulator.shutdown().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    tokio::task::block_in_place(|| {
        for _ in 0..5 {
            let (status, body) = get(&http, &url, Some(TOKEN));
            assert_eq!(status, 200);
            assert_eq!(body, before, "the last good bundle stays served");
            std::thread::sleep(Duration::from_millis(500));
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_stops_rendering_keeps_its_bundle_and_gets_the_error_in_its_status() {
    let emulator = emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let server = tokio::task::block_in_place(|| start(&emulator, dir.path()));
    let http = tokio::task::block_in_place(|| client(&emulator));
    let url = format!("{}/v1/groups/worker/bundle", server.url);
    let condition = || {
        emulator
            .get("deckhouse.io/v1", "NodeGroup", "", "worker")
            .unwrap()["status"]["conditions"]
            .as_array()
            .and_then(|c| {
                c.iter()
                    .find(|c| c["type"] == "BundleRenderFailed")
                    .cloned()
            })
    };
    // `status.deckhouse.processed`: the spec the served bundle was rendered from.
    let processed = || {
        emulator
            .get("deckhouse.io/v1", "NodeGroup", "", "worker")
            .unwrap()["status"]["deckhouse"]["processed"]["checkSum"]
            .as_str()
            .map(str::to_owned)
    };
    let spec_checksum = || {
        let stored = emulator
            .get("deckhouse.io/v1", "NodeGroup", "", "worker")
            .unwrap();
        serde_json::from_value::<nodemgr_core::NodeGroup>(stored)
            .unwrap()
            .spec_checksum()
    };
    tokio::task::block_in_place(|| {
        let (_, good) = get(&http, &url, Some(TOKEN));
        let checksum = published(&emulator, "worker").unwrap();
        assert!(condition().is_none());
        let good_spec = spec_checksum();
        wait_for("the processed spec stamped", 10, || {
            processed().as_deref() == Some(good_spec.as_str())
        });
        let patch = |root_dir: Value| {
            emulator
                .merge_patch(
                    "deckhouse.io/v1",
                    "NodeGroup",
                    "",
                    "worker",
                    &json!({"spec": {"kubelet": {"rootDir": root_dir}}}),
                    false,
                )
                .unwrap();
        };
        patch(json!("relative"));
        wait_for("the render condition", 10, || condition().is_some());
        let written = condition().unwrap();
        assert_eq!(written["status"], "True");
        assert!(
            written["message"].as_str().unwrap().contains("rootDir"),
            "{written}"
        );
        let response = http.get(&url).bearer_auth(TOKEN).send().unwrap();
        assert!(response.headers().get("x-nodemgr-stale").is_some());
        assert_eq!(
            response.text().unwrap(),
            good,
            "the last good bundle is served"
        );
        assert_eq!(published(&emulator, "worker").unwrap(), checksum);
        assert_eq!(
            processed(),
            Some(good_spec.clone()),
            "a spec that does not render is not processed"
        );

        patch(Value::Null);
        wait_for("the render condition removed", 10, || condition().is_none());
        assert_eq!(get(&http, &url, Some(TOKEN)).1, good);
        // The fixed spec (an empty `kubelet` now) is processed once it renders.
        let fixed_spec = spec_checksum();
        wait_for("the fixed spec processed", 10, || {
            processed().as_deref() == Some(fixed_spec.as_str())
        });
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_starts_with_no_group_and_no_token_and_minted_tokens_become_grants_as_they_appear() {
    let emulator = bare_emulator().await;
    // The chart's default: no --tokens-file, and node-manager has minted nothing yet.
    let server = tokio::task::block_in_place(|| start_with(&emulator, &[]));
    let http = tokio::task::block_in_place(|| client(&emulator));
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let minted = nodemgr_k8s::controllers::bootstrap_tokens::generate_token();
    tokio::task::block_in_place(|| {
        assert_eq!(get(&http, &format!("{}/healthz", server.url), None).0, 200);
        let groups = format!("{}/v1/groups", server.url);
        let unauthorized = (401, r#"{"error":"Unauthorized"}"#.to_owned());
        assert_eq!(get(&http, &groups, None), unauthorized);
        assert_eq!(get(&http, &groups, Some(TOKEN)), unauthorized);

        // A group appears: rendered and published, still no grant.
        emulator.seed(group("metal", "Static")).unwrap();
        wait_for("metal's checksum published", 10, || {
            published(&emulator, "metal").is_some()
        });
        let bundle = format!("{}/v1/groups/metal/bundle", server.url);
        assert_eq!(get(&http, &bundle, Some(minted.as_str())), unauthorized);

        // node-manager mints the group's token: it becomes metal's grant at once (well before
        // the 30 s resync), and the group's manual bootstrap Secret carries it.
        let secret = nodemgr_k8s::controllers::bootstrap_tokens::token_secret(
            &minted,
            "metal",
            Timestamp::from_secs(now + 4 * 3600),
        );
        emulator
            .seed(serde_json::to_value(secret).unwrap())
            .unwrap();
        let delay = wait_for("the minted token granted metal", 10, || {
            get(&http, &bundle, Some(minted.as_str())).0 == 200
        });
        println!("bootstrap token Secret -> grant: {} ms", delay.as_millis());
        let listed = json_of_with(&http, &groups, minted.as_str());
        assert_eq!(listed["groups"][0]["name"], "metal", "{listed}");
        assert_eq!(listed["groups"].as_array().unwrap().len(), 1);
        emulator.seed(group("worker", "CloudEphemeral")).unwrap();
        wait_for("worker published", 10, || {
            published(&emulator, "worker").is_some()
        });
        assert_eq!(
            get(
                &http,
                &format!("{}/v1/groups/worker/bundle", server.url),
                Some(minted.as_str())
            )
            .0,
            403,
            "a group's token reads its group only"
        );
        wait_for("manual-bootstrap-for-metal", 10, || {
            emulator
                .get(
                    "v1",
                    "Secret",
                    keys::NAMESPACE,
                    "manual-bootstrap-for-metal",
                )
                .and_then(|s| s["data"]["bootstrap.sh"].as_str().map(str::to_owned))
                .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
                .is_some_and(|script| script.contains(minted.as_str()))
        });
    });
}

fn json_of_with(client: &reqwest::blocking::Client, url: &str, token: &str) -> Value {
    let (status, body) = get(client, url, Some(token));
    assert_eq!(status, 200, "{url}: {body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bootstrap_script_installs_the_agent_over_https_pinning_the_servers_ca() {
    use std::os::unix::fs::PermissionsExt as _;
    const NODE_TOKEN: &str = "worker-node-token-0123456789";
    let emulator = emulator().await;
    let join = nodemgr_k8s::controllers::bootstrap_tokens::generate_token();
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let secret = nodemgr_k8s::controllers::bootstrap_tokens::token_secret(
        &join,
        "worker",
        Timestamp::from_secs(now + 3600),
    );
    emulator
        .seed(serde_json::to_value(secret).unwrap())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokens"), format!("{NODE_TOKEN} worker\n")).unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://127.0.0.1:{port}");
    let listen = format!("127.0.0.1:{port}");
    let agent = env!("CARGO_BIN_EXE_bashible");
    let tokens = dir.path().join("tokens");
    let server = tokio::task::block_in_place(|| {
        start_with(
            &emulator,
            &[
                "--listen".as_ref(),
                listen.as_ref(),
                "--public-url".as_ref(),
                url.as_ref(),
                "--agent-binary".as_ref(),
                agent.as_ref(),
                "--tokens-file".as_ref(),
                tokens.as_os_str(),
                "--root".as_ref(),
                root.as_os_str(),
            ],
        )
    });
    assert_eq!(server.url, url);
    let http = tokio::task::block_in_place(|| client(&emulator));
    let served_ca = certificate(&emulator);
    tokio::task::block_in_place(|| {
        let (status, script) = get(
            &http,
            &format!("{url}/v1/groups/worker/bootstrap.sh"),
            Some(NODE_TOKEN),
        );
        assert_eq!(status, 200, "{script}");
        assert!(script.contains(join.as_str()), "the group's own join token");
        assert!(script.contains("--cacert"), "curl pins the CA");
        let path = dir.path().join("bootstrap.sh");
        std::fs::write(&path, &script).unwrap();
        // The certificate is self-signed: without the CA the script carries, curl refuses it.
        let unpinned = Command::new("curl")
            .args(["-fsS", "--max-time", "10", &format!("{url}/healthz")])
            .output()
            .unwrap();
        assert!(
            !unpinned.status.success(),
            "a self-signed server is not trusted by default"
        );
        let out = Command::new("bash").arg(&path).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });

    // The CA written on the node is the server's, and both the download and the agent use it.
    let ca_file = root.join("etc/nodemgr/bundle-server-ca.crt");
    assert_eq!(std::fs::read_to_string(&ca_file).unwrap(), served_ca);
    let installed = root.join("opt/nodemgr/bin/bashible");
    assert_eq!(
        std::fs::read(&installed).unwrap(),
        std::fs::read(agent).unwrap()
    );
    assert_eq!(
        std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(
        std::fs::read_to_string(root.join("var/lib/bashible/bundle-token")).unwrap(),
        NODE_TOKEN
    );
    let service =
        std::fs::read_to_string(root.join("etc/systemd/system/bashible.service")).unwrap();
    assert!(
        service.contains(&format!(
            "ExecStart=/opt/nodemgr/bin/bashible --bundle-server {url} --group worker --bundle-server-ca /etc/nodemgr/bundle-server-ca.crt\n"
        )),
        "{service}"
    );
    let pinned = Command::new("curl")
        .args(["-fsS", "--max-time", "10", "--cacert"])
        .arg(&ca_file)
        .arg(format!("{url}/healthz"))
        .output()
        .unwrap();
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_token_file_overrides_the_groups_token_in_manual_bootstrap_secrets() {
    let emulator = emulator().await;
    let minted = nodemgr_k8s::controllers::bootstrap_tokens::generate_token();
    let now = i64::try_from(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap();
    let secret = nodemgr_k8s::controllers::bootstrap_tokens::token_secret(
        &minted,
        "metal",
        Timestamp::from_secs(now + 3600),
    );
    emulator
        .seed(serde_json::to_value(secret).unwrap())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN} *\n")).unwrap();
    let file = dir.path().join("join-token");
    std::fs::write(&file, "ovrrde.0123456789abcdef\n").unwrap();
    let server = tokio::task::block_in_place(|| {
        start_with(
            &emulator,
            &[
                "--tokens-file".as_ref(),
                tokens.as_os_str(),
                "--bootstrap-token-file".as_ref(),
                file.as_os_str(),
            ],
        )
    });
    let http = tokio::task::block_in_place(|| client(&emulator));
    tokio::task::block_in_place(|| {
        let script = || {
            emulator
                .get(
                    "v1",
                    "Secret",
                    keys::NAMESPACE,
                    "manual-bootstrap-for-metal",
                )
                .and_then(|s| s["data"]["bootstrap.sh"].as_str().map(str::to_owned))
                .and_then(|v| nodemgr_k8s::cluster::decode_checksum(&v))
        };
        wait_for("manual-bootstrap-for-metal", 10, || script().is_some());
        let kept = script().unwrap();
        assert!(kept.contains("ovrrde.0123456789abcdef"), "the override");
        assert!(!kept.contains(minted.as_str()));
        // The operator's `*` token reads the same script; the group's own token, scoped to
        // metal, reads the one with its own join token, never the cluster-wide one.
        let url = format!("{}/v1/groups/metal/bootstrap.sh", server.url);
        assert_eq!(get(&http, &url, Some(TOKEN)), (200, kept));
        let (status, own) = get(&http, &url, Some(minted.as_str()));
        assert_eq!(status, 200);
        assert!(own.contains(minted.as_str()));
        assert!(!own.contains("ovrrde.0123456789abcdef"));
    });
}
