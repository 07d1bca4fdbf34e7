//! node-manager at scale through kube: loads the API emulator over HTTP with 5,000 Nodes (and
//! their kubelet Leases), 150,000 Pods and 2,800 PodDisruptionBudgets in 100 NodeGroups, runs
//! the real `node-manager` binary against it with its default settings, and reports:
//! (the Nodes are loaded as node-manager leaves them — its template applied — so its start is
//! a restart in a managed cluster, not a first pass writing every node)
//!
//! - the emulator's load time and resident memory (VmRSS, and VmHWM, its peak);
//! - node-manager's time to sync its caches (its `caches synced` log line), its resident
//!   memory right then, after the start-up work settled, and at the end (VmRSS; VmHWM);
//! - the duration of its update steps (each a full pass over every group and node; its
//!   `update step done` debug lines), median and p90, by what started them;
//! - **ask → approval**: a group's spec and desired checksum are changed (as an operator and
//!   bashible-apiserver would), and once that settled, the agents' ask is simulated by
//!   annotating `update.node.deckhouse.io/waiting-for-approval` on three of its nodes. The
//!   interval measured runs from the instant before the first of those PATCH requests is sent
//!   to the instant the benchmark's own watch on the group's Nodes delivers a Node carrying
//!   `update.node.deckhouse.io/approved`. Once per group for several groups; median and p90.
//!
//! The emulator runs in a child process (this binary re-executed with
//! `--nodemgr-api-emulator`: the same `Emulator::start_with` on a current-thread runtime as
//! the `nodemgr-api-emulator` binary), so its memory is its own. node-manager is the binary of
//! this package, built with the bench profile (optimized) by `cargo bench`.
//!
//! Run: `cargo bench -p nodemgr-bins --bench node_manager_scale` (about five minutes on two
//! cores). The scale comes from `NODEMGR_SCALE_NODES` (5000), `NODEMGR_SCALE_PODS_PER_NODE`
//! (30), `NODEMGR_SCALE_GROUPS` (100) and `NODEMGR_SCALE_REPETITIONS` (15); `NODEMGR_SCALE_CONTROLLERS`
//! passes `--controllers` to node-manager (to see what one controller costs). Without `--bench`
//! (`cargo test --benches`) it does nothing.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a benchmark whose setup fails should stop loudly

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::{Client, ResourceExt};
use nodemgr_core::model::keys;
use serde_json::{Value, json};

/// The argument that makes this binary the emulator.
const EMULATOR_ROLE: &str = "--nodemgr-api-emulator";
/// Deployment-like pods per node are `pods_per_node - DAEMONSETS`; each app has this many.
const REPLICAS: usize = 50;
/// DaemonSet pods on every node.
const DAEMONSETS: usize = 2;
/// App namespaces.
const NAMESPACES: usize = 50;
/// Concurrent requests while loading.
const LOAD_CONCURRENCY: usize = 8;
/// Nodes of a group that ask for approval in each repetition.
const ASKING: usize = 3;

struct Scale {
    nodes: usize,
    pods_per_node: usize,
    groups: usize,
    repetitions: usize,
}

impl Scale {
    fn from_env() -> Scale {
        let get = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let scale = Scale {
            nodes: get("NODEMGR_SCALE_NODES", 5000),
            pods_per_node: get("NODEMGR_SCALE_PODS_PER_NODE", 30),
            groups: get("NODEMGR_SCALE_GROUPS", 100).max(1),
            repetitions: get("NODEMGR_SCALE_REPETITIONS", 15).max(1),
        };
        assert!(
            scale.pods_per_node > DAEMONSETS,
            "NODEMGR_SCALE_PODS_PER_NODE must exceed {DAEMONSETS}"
        );
        assert!(
            scale.nodes.is_multiple_of(scale.groups) && scale.nodes / scale.groups >= ASKING,
            "NODEMGR_SCALE_NODES must be a multiple of the groups, {ASKING} or more per group"
        );
        scale
    }

    fn per_group(&self) -> usize {
        self.nodes / self.groups
    }

    fn apps(&self) -> usize {
        (self.nodes * (self.pods_per_node - DAEMONSETS)).div_ceil(REPLICAS)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == EMULATOR_ROLE) {
        let dir = PathBuf::from(args.get(i + 1).expect("a kubeconfig directory"));
        return run_emulator(&dir);
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("node_manager_scale: run it with `cargo bench` (nothing measured)");
        return ExitCode::SUCCESS;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(bench(Scale::from_env()));
    ExitCode::SUCCESS
}

/// The emulator role: as `nodemgr-api-emulator` does, on a current-thread runtime; ends when
/// its stdin closes (the benchmark ended or died).
fn run_emulator(dir: &Path) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let options = nodemgr_testkit::EmulatorOptions {
            kubeconfig_dir: Some(dir.to_path_buf()),
            ..nodemgr_testkit::EmulatorOptions::default()
        };
        let emulator = nodemgr_testkit::Emulator::start_with(options)
            .await
            .expect("the emulator starts");
        println!("ready {}", emulator.kubeconfig_path().display());
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        });
        let _ = stdin_closed.await;
        emulator.shutdown().await;
    });
    ExitCode::SUCCESS
}

/// A child process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `VmRSS` and `VmHWM` of a process, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU seconds (user + system) a process used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 (1-based), 11 and 12 after the state field.
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(values: &[f64], p: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    // Nearest rank.
    let rank = (p / 100.0 * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

fn checksum(group: usize, generation: usize) -> String {
    let mut x = (group as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation as u64;
    (0..4)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            format!("{x:016x}")
        })
        .collect()
}

fn hex(seed: u64, len: usize) -> String {
    let mut x = seed.wrapping_add(0x2545_F491_4F6C_DD1D);
    let mut out = String::new();
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push_str(&format!("{x:016x}"));
    }
    out.truncate(len);
    out
}

/// A unique five-letter suffix for `k`, in the alphabet of generated Kubernetes names.
fn suffix(k: usize) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    // A bijection on 0..27^5 scatters neighbours, as generated names look.
    let mut x = (k.wrapping_mul(7_368_787) + 12_345) % 14_348_907;
    (0..5)
        .map(|_| {
            let c = ALPHABET[x % 27] as char;
            x /= 27;
            c
        })
        .collect()
}

fn group_name(g: usize) -> String {
    format!("ng-{g:03}")
}

fn node_name(scale: &Scale, n: usize) -> String {
    format!(
        "{}-{:04}",
        group_name(n / scale.per_group()),
        n % scale.per_group()
    )
}

const NOW: &str = "2025-01-01T00:00:00Z";

fn node(scale: &Scale, n: usize) -> Value {
    let g = n / scale.per_group();
    let name = node_name(scale, n);
    let zone = ["a", "b", "c"][n % 3];
    let images: Vec<Value> = (0..25)
        .map(|i| {
            json!({"names": [format!("registry.example.com/team-{i}/service@sha256:{}", hex(i, 64)),
                             format!("registry.example.com/team-{i}/service:v1.{i}.0")],
                   "sizeBytes": 10_000_000 + i * 1_000_003})
        })
        .collect();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": NOW, "lastTransitionTime": NOW})
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                keys::LABEL_NODE_GROUP: group_name(g),
                "node.deckhouse.io/type": "CloudPermanent",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": format!("zone-{zone}"),
                "topology.kubernetes.io/region": "region-1",
                "node.kubernetes.io/instance-type": "m5.2xlarge",
                "node-role.kubernetes.io/worker": "",
            },
            "annotations": {
                keys::ANNOTATION_CONFIGURATION_CHECKSUM: checksum(g, 0),
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"i-{}\"}}", hex(n as u64, 17)),
            },
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", 64 + n / 256, n % 256),
            "podCIDRs": [format!("10.{}.{}.0/24", 64 + n / 256, n % 256)],
            "providerID": format!("aws:///region-1{zone}/i-{}", hex(n as u64, 17)),
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32561484Ki", "pods": "110", "ephemeral-storage": "104845292Ki", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": "7800m", "memory": "31410508Ki", "pods": "110", "ephemeral-storage": "96625420948", "hugepages-2Mi": "0"},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": format!("172.16.{}.{}", n / 256, n % 256)},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": hex(n as u64 + 1, 32), "systemUUID": hex(n as u64 + 2, 32), "bootID": hex(n as u64 + 3, 32),
                "kernelVersion": "6.1.0-18-cloud-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.13", "kubeletVersion": "v1.30.4",
                "kubeProxyVersion": "v1.30.4", "operatingSystem": "linux", "architecture": "amd64",
            },
            "images": images,
        },
    })
}

/// The group's spec, as loaded.
fn group_spec() -> Value {
    json!({"nodeType": "CloudPermanent"})
}

/// `node` as node-manager leaves it: with what its template controller sets (role label,
/// `scale-down-disabled`, the last-applied template), so that its start is a restart's,
/// not a first pass over every node.
fn managed(mut node: Value) -> Value {
    let group_name = node["metadata"]["labels"][keys::LABEL_NODE_GROUP].clone();
    let group: nodemgr_core::model::NodeGroup = serde_json::from_value(json!({
        "apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
        "metadata": {"name": group_name}, "spec": group_spec(),
    }))
    .expect("a NodeGroup");
    let view = nodemgr_k8s::convert::node_to_core(
        &serde_json::from_value::<Node>(node.clone()).expect("a Node"),
    );
    let change = nodemgr_core::node_template::plan_node_template(&group, &view)
        .expect("a template plan")
        .unwrap_or_default();
    for (field, changes) in [
        ("labels", &change.labels),
        ("annotations", &change.annotations),
    ] {
        for (key, value) in changes {
            match value {
                Some(v) => node["metadata"][field][key] = json!(v),
                None => {
                    if let Some(map) = node["metadata"][field].as_object_mut() {
                        map.remove(key);
                    }
                }
            }
        }
    }
    node
}

fn lease(scale: &Scale, n: usize) -> Value {
    let name = node_name(scale, n);
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": keys::NODE_LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": hex(n as u64, 32)}]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": "2025-01-01T00:00:00.000000Z"},
    })
}

/// The `k`-th pod of the cluster: DaemonSet pods first (`DAEMONSETS` per node), then
/// `REPLICAS` pods per app spread over the nodes.
fn pod(scale: &Scale, k: usize) -> Value {
    let daemon_pods = scale.nodes * DAEMONSETS;
    let (namespace, name, node, labels, owner, extra) = if k < daemon_pods {
        let (n, d) = (k / DAEMONSETS, k % DAEMONSETS);
        let ds = ["node-exporter", "cni-agent"][d];
        let node = node_name(scale, n);
        (
            "kube-system".to_owned(),
            format!("{ds}-{}", suffix(k)),
            node.clone(),
            json!({"app": ds, "controller-revision-hash": hex(d as u64, 10), "pod-template-generation": "1"}),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds, "uid": hex(d as u64 + 7, 32),
                   "controller": true, "blockOwnerDeletion": true}),
            json!({
                "priorityClassName": "system-node-critical", "priority": 2_000_001_000,
                "hostNetwork": true,
                "tolerations": [{"operator": "Exists"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
                "volumes": [{"name": "host", "hostPath": {"path": "/", "type": ""}}],
            }),
        )
    } else {
        let i = k - daemon_pods;
        let (app, replica) = (i / REPLICAS, i % REPLICAS);
        let n = (app * REPLICAS + replica) % scale.nodes;
        let hash = hex(app as u64 + 11, 10);
        let rs = format!("app-{app:04}-{hash}");
        (
            format!("app-{:02}", app % NAMESPACES),
            format!("{rs}-{}", suffix(k)),
            node_name(scale, n),
            json!({"app": format!("app-{app:04}"), "pod-template-hash": hash,
                   "app.kubernetes.io/part-of": "shop", "app.kubernetes.io/version": "1.4.2"}),
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": hex(app as u64 + 13, 32),
                   "controller": true, "blockOwnerDeletion": true}),
            json!({
                "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                ],
                "volumes": [{"name": "kube-api-access-x1y2z", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ]}}],
            }),
        )
    };
    let ip = format!("10.{}.{}.{}", 64 + k / 65536, (k / 256) % 256, k % 256);
    let mut spec = json!({
        "nodeName": node,
        "serviceAccountName": "default", "serviceAccount": "default",
        "schedulerName": "default-scheduler", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": true, "terminationGracePeriodSeconds": 30, "securityContext": {},
        "containers": [{
            "name": "main",
            "image": "registry.example.com/team/service:v1.4.2",
            "imagePullPolicy": "IfNotPresent",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [
                {"name": "LOG_LEVEL", "value": "info"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                {"name": "GOMAXPROCS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}},
            ],
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}},
            "volumeMounts": [{"name": "kube-api-access-x1y2z", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10,
                "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "scheme": "HTTP"}, "periodSeconds": 5,
                "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"]}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": NOW});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": namespace, "labels": labels,
            "annotations": {
                "cni.projectcalico.org/containerID": hex(k as u64 + 5, 64),
                "cni.projectcalico.org/podIP": format!("{ip}/32"),
                "cni.projectcalico.org/podIPs": format!("{ip}/32"),
                "kubectl.kubernetes.io/restartedAt": NOW,
            },
            "ownerReferences": [owner],
        },
        "spec": spec,
        "status": {
            "phase": "Running", "qosClass": "Burstable", "startTime": NOW,
            "hostIP": "172.16.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
            "containerStatuses": [{
                "name": "main", "ready": true, "started": true, "restartCount": 0,
                "image": "registry.example.com/team/service:v1.4.2",
                "imageID": format!("registry.example.com/team/service@sha256:{}", hex(3, 64)),
                "containerID": format!("containerd://{}", hex(k as u64 + 9, 64)),
                "state": {"running": {"startedAt": NOW}}, "lastState": {},
            }],
        },
    })
}

fn budget(app: usize) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": format!("app-{app:04}"), "namespace": format!("app-{:02}", app % NAMESPACES)},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": format!("app-{app:04}")}}},
    })
}

/// Creates `objects` of `resource` through the API (`LOAD_CONCURRENCY` at a time).
async fn create_all(
    client: &Client,
    resource: &ApiResource,
    namespaced: bool,
    objects: impl Iterator<Item = Value>,
) {
    futures::stream::iter(objects)
        .map(|object| {
            let client = client.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(object).expect("an object");
                let api: Api<DynamicObject> = match object.metadata.namespace.as_deref() {
                    Some(ns) if namespaced => Api::namespaced_with(client, ns, resource),
                    _ => Api::all_with(client, resource),
                };
                api.create(&PostParams::default(), &object)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("create {} {}: {e}", resource.kind, object.name_any()))
            }
        })
        .buffer_unordered(LOAD_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await
        .expect("the emulator accepts every object");
}

fn resource<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Starts the emulator child; returns it and the kubeconfig.
fn start_emulator(dir: &Path) -> (Process, PathBuf) {
    let mut child = Command::new(std::env::current_exe().expect("this binary"))
        .arg(EMULATOR_ROLE)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("the emulator starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the emulator says where it is");
    let path = line
        .trim()
        .strip_prefix("ready ")
        .expect("a `ready` line")
        .to_owned();
    (Process(child), PathBuf::from(path))
}

/// node-manager's JSON log lines, as they come.
fn log_lines(child: &mut Child) -> mpsc::Receiver<(Instant, Value)> {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let at = Instant::now();
            match serde_json::from_str::<Value>(&line) {
                Ok(v) => {
                    let level = v["level"].as_str().unwrap_or_default();
                    if level == "WARN" || level == "ERROR" {
                        eprintln!("node-manager: {line}");
                    }
                    if tx.send((at, v)).is_err() {
                        return;
                    }
                }
                Err(_) => eprintln!("node-manager: {line}"),
            }
        }
    });
    rx
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[derive(Default)]
struct Steps {
    /// (trigger, seconds, actions, fresh reads) of every update step seen.
    seen: Vec<(String, f64, u64, u64)>,
    /// What woke the update controller, by kind of object changed.
    wakes: std::collections::BTreeMap<String, u64>,
}

impl Steps {
    fn drain(&mut self, logs: &mpsc::Receiver<(Instant, Value)>) {
        while let Ok((_, line)) = logs.try_recv() {
            if line["message"] == "a change wakes the update controller" {
                let kind = line["kind"].as_str().unwrap_or("?").to_owned();
                *self.wakes.entry(kind).or_default() += 1;
            }
            if line["message"] == "a checksum change wakes the update controller" {
                *self.wakes.entry("Secret".into()).or_default() += 1;
            }
            if line["message"] == "update step done"
                && let Some(seconds) = line["seconds"].as_f64()
            {
                let trigger = line["trigger"].as_str().unwrap_or("?").to_owned();
                let actions = line["actions"].as_u64().unwrap_or(0);
                let fresh = line["fresh_reads"].as_u64().unwrap_or(0);
                self.seen.push((trigger, seconds, actions, fresh));
            }
        }
    }

    fn report(&self, which: &str, keep: impl Fn(&str, u64, u64) -> bool) {
        let kept: Vec<_> = self
            .seen
            .iter()
            .filter(|(t, _, a, f)| keep(t, *a, *f))
            .collect();
        let ms: Vec<f64> = kept.iter().map(|(_, s, _, _)| s * 1000.0).collect();
        let fresh: u64 = kept.iter().map(|(_, _, _, f)| f).sum();
        let actions: u64 = kept.iter().map(|(_, _, a, _)| a).sum();
        println!(
            "  update steps ({which}): median {:.1} ms, p90 {:.1} ms, max {:.1} ms over {} steps ({actions} actions, {fresh} fresh node lists)",
            percentile(&ms, 50.0),
            percentile(&ms, 90.0),
            ms.iter().copied().fold(f64::NAN, f64::max),
            ms.len()
        );
    }
}

async fn bench(scale: Scale) {
    println!(
        "node_manager_scale: {} nodes, {} pods, {} groups, {} repetitions",
        scale.nodes,
        scale.nodes * scale.pods_per_node,
        scale.groups,
        scale.repetitions
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (emulator, kubeconfig) = start_emulator(dir.path());
    let emulator_pid = emulator.0.id();
    let client = nodemgr_k8s::cluster::client(Some(&kubeconfig))
        .await
        .expect("a client for the emulator");

    // --- Load ---------------------------------------------------------------------------
    let load_started = Instant::now();
    let mut phases = Vec::new();
    let mut phase = |name: &str, count: usize, since: Instant| {
        phases.push((name.to_owned(), count, since.elapsed()));
    };
    let t = Instant::now();
    let crds = nodemgr_k8s::crd::definitions()
        .expect("the CRDs")
        .into_iter()
        .map(|c| serde_json::to_value(c).expect("a CRD"));
    create_all(&client, &resource::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(), false, crds).await;
    let namespaces = ["nodemgr-system", keys::NAMESPACE]
        .into_iter()
        .map(str::to_owned)
        .chain((0..NAMESPACES).map(|i| format!("app-{i:02}")))
        .map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    create_all(
        &client,
        &resource::<k8s_openapi::api::core::v1::Namespace>(),
        false,
        namespaces,
    )
    .await;
    let groups = (0..scale.groups).map(|g| {
        json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": group_name(g)},
               "spec": group_spec()})
    });
    create_all(
        &client,
        &resource::<nodemgr_k8s::crd::NodeGroup>(),
        false,
        groups,
    )
    .await;
    let encode = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let data: serde_json::Map<String, Value> = (0..scale.groups)
        .map(|g| (group_name(g), json!(encode(&checksum(g, 0)))))
        .collect();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "configuration-checksums", "namespace": keys::NAMESPACE}, "data": data});
    create_all(
        &client,
        &resource::<Secret>(),
        true,
        std::iter::once(secret),
    )
    .await;
    phase("CRDs, namespaces, NodeGroups, checksums", scale.groups, t);
    let t = Instant::now();
    create_all(
        &client,
        &resource::<Node>(),
        false,
        (0..scale.nodes).map(|n| managed(node(&scale, n))),
    )
    .await;
    phase("Nodes", scale.nodes, t);
    let t = Instant::now();
    create_all(
        &client,
        &resource::<k8s_openapi::api::coordination::v1::Lease>(),
        true,
        (0..scale.nodes).map(|n| lease(&scale, n)),
    )
    .await;
    phase("Leases", scale.nodes, t);
    let t = Instant::now();
    let pods = scale.nodes * DAEMONSETS + scale.apps() * REPLICAS;
    let pods = pods.min(scale.nodes * scale.pods_per_node);
    create_all(
        &client,
        &resource::<k8s_openapi::api::core::v1::Pod>(),
        true,
        (0..pods).map(|k| pod(&scale, k)),
    )
    .await;
    phase("Pods", pods, t);
    let t = Instant::now();
    create_all(
        &client,
        &resource::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(),
        true,
        (0..scale.apps()).map(budget),
    )
    .await;
    phase("PodDisruptionBudgets", scale.apps(), t);
    let load = load_started.elapsed();
    let (emulator_rss_loaded, emulator_hwm_loaded) = memory(emulator_pid);
    println!("emulator load (over HTTP, {LOAD_CONCURRENCY} requests at a time):");
    for (name, count, took) in &phases {
        println!(
            "  {name}: {count} in {:.1} s ({:.0}/s)",
            took.as_secs_f64(),
            *count as f64 / took.as_secs_f64()
        );
    }
    println!(
        "  total {:.1} s (CPU: emulator {:.1} s, this loader {:.1} s); emulator VmRSS {emulator_rss_loaded:.0} MiB, VmHWM {emulator_hwm_loaded:.0} MiB",
        load.as_secs_f64(),
        cpu_seconds(emulator_pid),
        cpu_seconds(std::process::id()),
    );

    // --- node-manager -------------------------------------------------------------------
    let port = free_port();
    let spawned = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_node-manager"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg(format!("--metrics-address=127.0.0.1:{port}"))
        .args(["--identity", "bench", "--log-format", "json"])
        .args(
            std::env::var("NODEMGR_SCALE_CONTROLLERS")
                .ok()
                .map(|c| format!("--controllers={c}")),
        )
        .env(
            "RUST_LOG",
            "info,nodemgr_k8s::controllers::update=debug,nodemgr_k8s::cluster=trace",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node-manager starts");
    let logs = log_lines(&mut child);
    let node_manager = Process(child);
    let pid = node_manager.0.id();
    let mut steps = Steps::default();
    let synced = loop {
        let (at, line) = logs
            .recv_timeout(Duration::from_secs(600))
            .expect("node-manager syncs its caches within 10 minutes");
        if line["message"] == "caches synced" {
            break (at, line);
        }
    };
    let (rss_synced, hwm_synced) = memory(pid);
    let cpu_synced = cpu_seconds(pid);
    let sync = synced.0.duration_since(spawned);
    println!("node-manager (release build, default settings):");
    println!(
        "  caches synced {:.1} s after start ({} nodes, {} pods cached; {:.1} CPU s); VmRSS {rss_synced:.0} MiB, VmHWM {hwm_synced:.0} MiB",
        sync.as_secs_f64(),
        synced.1["nodes"],
        synced.1["pods"],
        cpu_synced
    );
    // Start-up work (statuses of every group, bootstrap tokens, templates) settles.
    tokio::time::sleep(Duration::from_secs(20)).await;
    steps.drain(&logs);
    let (rss_settled, hwm_settled) = memory(pid);
    println!(
        "  20 s later (start-up work done): VmRSS {rss_settled:.0} MiB, VmHWM {hwm_settled:.0} MiB"
    );

    // --- ask → approval -----------------------------------------------------------------
    let groups_api: Api<nodemgr_k8s::crd::NodeGroup> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), keys::NAMESPACE);
    let nodes: Api<Node> = Api::all(client.clone());
    let mut latencies = Vec::new();
    for rep in 0..scale.repetitions {
        let g = rep % scale.groups;
        let group = group_name(g);
        groups_api
            .patch(
                &group,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"kubelet": {"maxPods": 111 + rep}}})),
            )
            .await
            .expect("the spec changes");
        secrets
            .patch(
                "configuration-checksums",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {&group: encode(&checksum(g, rep + 1))}})),
            )
            .await
            .expect("the checksum changes");
        // What the change wakes settles before the agents ask.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let selector = format!("{}={group}", keys::LABEL_NODE_GROUP);
        let listed = nodes
            .list(&ListParams::default().labels(&selector))
            .await
            .expect("the group's nodes");
        let version = listed.metadata.resource_version.unwrap_or_default();
        let mut events = nodes
            .watch(&WatchParams::default().labels(&selector), &version)
            .await
            .expect("a watch on the group's nodes")
            .boxed();
        let asked = Instant::now();
        for i in 0..ASKING {
            nodes
                .patch(
                    &node_name(&scale, g * scale.per_group() + i),
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"annotations": {keys::ANNOTATION_WAITING_FOR_APPROVAL: ""}}}),
                    ),
                )
                .await
                .expect("the agent's ask");
        }
        let approved = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(event) = events.next().await {
                if let Ok(WatchEvent::Added(n) | WatchEvent::Modified(n)) = event
                    && n.annotations().contains_key(keys::ANNOTATION_APPROVED)
                {
                    return Some(Instant::now());
                }
            }
            None
        })
        .await;
        match approved {
            Ok(Some(at)) => {
                let ms = at.duration_since(asked).as_secs_f64() * 1000.0;
                latencies.push(ms);
                println!("  {group}: ask → approval {ms:.0} ms");
            }
            _ => println!("  {group}: no approval within 60 s"),
        }
        steps.drain(&logs);
    }
    // A few more periodic steps.
    tokio::time::sleep(Duration::from_secs(25)).await;
    steps.drain(&logs);
    let (rss_end, hwm_end) = memory(pid);
    let (emulator_rss_end, emulator_hwm_end) = memory(emulator_pid);
    println!(
        "  ask → approval: median {:.0} ms, p90 {:.0} ms over {} groups ({} without approval)",
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        latencies.len(),
        scale.repetitions - latencies.len()
    );
    steps.report("all", |_, _, _| true);
    steps.report("full passes that changed nothing", |_, a, f| {
        a == 0 && f == 0
    });
    steps.report("started by the period", |t, _, _| t == "period");
    steps.report("started by a change", |t, _, _| t == "change");
    println!(
        "  changes that woke the update controller: {}",
        steps
            .wakes
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("  at the end: VmRSS {rss_end:.0} MiB, VmHWM {hwm_end:.0} MiB");
    println!(
        "emulator at the end: VmRSS {emulator_rss_end:.0} MiB, VmHWM {emulator_hwm_end:.0} MiB"
    );
    drop(node_manager);
    drop(emulator);
}
