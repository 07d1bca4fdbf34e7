//! Standby and the chaos monkey end to end: node-manager's machine controller (the core's
//! scaling executor) and update controller against the API emulator and the simulator's
//! in-memory cloud. The emulator has no controllers and no scheduler, so this test plays them
//! as the other e2e tests play kubelets: a stand-in kubelet registers a Ready Node for each
//! running machine, a stand-in ReplicaSet controller keeps the standby-holder Deployment's
//! pods, and a stand-in kube-scheduler binds Pending pods where the core placement engine puts
//! them, preempting standby holders as it says (pods get their PriorityClass's value, as the
//! API server's Priority admission gives it).
//!
//! - **Standby**: the `standby-holder-worker` Deployment (PriorityClass `standby`, the group's
//!   taint tolerated, half a node requested) gets a node of its own beside the workload's,
//!   `status.standby` says it is held, scale-down keeps both nodes; a workload pod that fits
//!   nowhere else lands on the standby node at once, evicting the holder, whose replacement
//!   gets a new node. The simulator's scenario of the same story takes the same decisions.
//! - **Chaos**: two groups in `DrainAndDelete` mode lose one node at a time cluster-wide, each
//!   victim annotated, evented, counted, drained and replaced.
//!
//! Every wait is a deadline for something that must happen.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node as KubeNode, Pod as KubePod};
use nodemgr_core::machines::MachineConfig;
use nodemgr_core::model::{Timestamp, keys};
use nodemgr_core::ports::cloud::InstanceState;
use nodemgr_core::scaling::scale_up::ExistingTarget;
use nodemgr_core::scaling::{ClusterSnapshot, ScalingConfig, plan_scale_up};
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers;
use nodemgr_k8s::controllers::machines::MachineController;
use nodemgr_k8s::convert::{node_to_core, pod_to_core};
use nodemgr_k8s::metrics::Metrics;
use nodemgr_sim::cloud::SimCloud;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};
use tokio::sync::watch;

fn wall() -> Timestamp {
    nodemgr_k8s::controllers::now()
}

struct World {
    emulator: Arc<Emulator>,
    cloud: Arc<SimCloud>,
    stop: watch::Sender<bool>,
    metrics: Metrics,
    /// Holders the stand-in scheduler preempted, `namespace/name`.
    preempted: Arc<Mutex<Vec<String>>>,
    _watches: nodemgr_k8s::cluster::Watches,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn world(groups: &[Value]) -> World {
    // RUST_LOG=nodemgr_k8s=info shows the controllers' decisions when a test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    emulator
        .seed(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": keys::NAMESPACE}}),
        )
        .unwrap();
    for g in groups {
        emulator.seed(g.clone()).unwrap();
    }
    let cloud = Arc::new(SimCloud::new(
        wall(),
        Duration::from_secs(1),
        Duration::from_millis(300),
        11,
    ));
    let client = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (cluster, watches) = KubeCluster::start(client, "node-manager");
    cluster.wait_ready().await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let mut settings = common::machine_settings(
        "a",
        MachineConfig {
            creation_timeout: Duration::from_secs(60),
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(2),
            orphan_grace: Duration::from_secs(5),
            gc_grace: Duration::from_secs(2),
            failures_kept: 3,
        },
        nodemgr_core::ports::cloud::InstanceClass {
            instance_type: "m5.xlarge".into(),
            ..Default::default()
        },
    );
    // Unneeded nodes would go after 2 s (the default is 10 min): nodes kept must be needed.
    settings.scaling.scale_down_unneeded_time = Duration::from_secs(2);
    settings.scaling.scale_down_delay_after_add = Duration::ZERO;
    let controller =
        MachineController::new(cluster.clone(), cloud.clone(), settings, metrics.clone());
    tokio::spawn(controller.run(stop_rx.clone()));
    tokio::spawn(controllers::run(
        cluster,
        common::update_only(),
        metrics.clone(),
        stop_rx.clone(),
    ));
    tokio::spawn(kubelet(emulator.clone(), cloud.clone(), stop_rx.clone()));
    let preempted = Arc::new(Mutex::new(Vec::new()));
    tokio::spawn(replica_sets_and_scheduler(
        emulator.clone(),
        preempted.clone(),
        stop_rx,
    ));
    World {
        emulator,
        cloud,
        stop,
        metrics,
        preempted,
        _watches: watches,
    }
}

/// Moves the cloud's clock and registers a Ready Node (4 cpu, 16 GiB) for each running
/// machine, labelled with the machine's group and zone.
async fn kubelet(emulator: Arc<Emulator>, cloud: Arc<SimCloud>, stop: watch::Receiver<bool>) {
    let mut registered = BTreeSet::new();
    while !*stop.borrow() {
        cloud.advance(wall());
        for m in cloud.existing() {
            if m.state != InstanceState::Running || !registered.insert(m.machine.clone()) {
                continue;
            }
            let _ = emulator.seed(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": m.machine, "labels": {
                    keys::LABEL_NODE_GROUP: m.group, keys::LABEL_TOPOLOGY_ZONE: m.zone,
                    keys::LABEL_HOSTNAME: m.machine}},
                "spec": {"providerID": m.provider_id},
                "status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                    "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The ReplicaSet controller of the standby-holder Deployments and kube-scheduler (see the
/// module docs).
async fn replica_sets_and_scheduler(
    emulator: Arc<Emulator>,
    preempted: Arc<Mutex<Vec<String>>>,
    stop: watch::Receiver<bool>,
) {
    let serial = AtomicUsize::new(0);
    while !*stop.borrow() {
        replica_sets(&emulator, &serial);
        schedule(&emulator, &preempted);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn replica_sets(emulator: &Emulator, serial: &AtomicUsize) {
    let priorities: BTreeMap<String, i64> = emulator
        .list("scheduling.k8s.io/v1", "PriorityClass", None)
        .iter()
        .map(|c| {
            (
                c["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                c["value"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let pods = emulator.list("v1", "Pod", Some(keys::NAMESPACE));
    for d in emulator.list("apps/v1", "Deployment", Some(keys::NAMESPACE)) {
        let name = d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let want = usize::try_from(d["spec"]["replicas"].as_u64().unwrap_or(1)).unwrap();
        let mine: Vec<&Value> = pods
            .iter()
            .filter(|p| p["metadata"]["ownerReferences"][0]["name"] == name.as_str())
            .collect();
        for _ in mine.len()..want {
            let n = serial.fetch_add(1, Ordering::Relaxed);
            let template = &d["spec"]["template"];
            let mut spec = template["spec"].clone();
            if let Some(class) = spec["priorityClassName"].as_str() {
                spec["priority"] = json!(priorities.get(class).copied().unwrap_or(0));
            }
            let _ = emulator.seed(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("{name}-{n}"), "namespace": keys::NAMESPACE,
                    "uid": format!("uid-{name}-{n}"),
                    "labels": template["metadata"]["labels"],
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": name, "uid": "rs", "controller": true}]},
                "spec": spec,
                "status": {"phase": "Pending"}}));
        }
    }
}

fn schedule(emulator: &Emulator, preempted: &Mutex<Vec<String>>) {
    let nodes: Vec<_> = emulator
        .list("v1", "Node", None)
        .into_iter()
        .filter_map(|n| serde_json::from_value::<KubeNode>(n).ok())
        .map(|n| node_to_core(&n))
        .collect();
    let pods: Vec<_> = emulator
        .list("v1", "Pod", None)
        .into_iter()
        .filter_map(|p| serde_json::from_value::<KubePod>(p).ok())
        .map(|p| pod_to_core(&p))
        .collect();
    let plan = {
        let snapshot = ClusterSnapshot::new(&nodes, &pods, &[], &[], &[], &[]);
        plan_scale_up(&snapshot, &ScalingConfig::default(), wall())
    };
    for &i in &plan.preempted {
        let p = &pods[i];
        if emulator.delete("v1", "Pod", &p.namespace, &p.name).is_ok() {
            preempted.lock().unwrap().push(p.key());
        }
    }
    for (i, target) in &plan.fits_existing {
        if let ExistingTarget::Node(node) = target {
            let p = &pods[*i];
            let _ = emulator.merge_patch(
                "v1",
                "Pod",
                &p.namespace,
                &p.name,
                &json!({"spec": {"nodeName": node}}),
                false,
            );
            let _ = emulator.merge_patch(
                "v1",
                "Pod",
                &p.namespace,
                &p.name,
                &json!({"status": {"phase": "Running"}}),
                true,
            );
        }
    }
}

async fn eventually(what: &str, seconds: u64, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn instances(w: &World, group: &str) -> Vec<Value> {
    w.emulator
        .list("deckhouse.io/v1alpha2", "Instance", None)
        .into_iter()
        .filter(|i| i["metadata"]["labels"][keys::LABEL_NODE_GROUP] == group)
        .collect()
}

fn nodes(w: &World, group: &str) -> Vec<Value> {
    w.emulator
        .list("v1", "Node", None)
        .into_iter()
        .filter(|n| n["metadata"]["labels"][keys::LABEL_NODE_GROUP] == group)
        .collect()
}

/// Machines, Running Instances and Nodes of `group` all number `n`.
fn in_step(w: &World, group: &str, n: usize) -> bool {
    let running = instances(w, group)
        .iter()
        .filter(|i| i["status"]["currentStatus"]["phase"] == "Running")
        .count();
    w.cloud
        .existing()
        .iter()
        .filter(|m| m.group == group)
        .count()
        == n
        && instances(w, group).len() == n
        && running == n
        && nodes(w, group).len() == n
}

/// A workload pod of `cpu` cores tolerating the group's taint, Pending.
fn workload_pod(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
            "labels": {"app": name},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
                "uid": "rs", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "app",
                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            "nodeSelector": {keys::LABEL_NODE_GROUP: "worker"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "worker",
                "effect": "NoSchedule"}]},
        "status": {"phase": "Pending"}})
}

fn node_of(w: &World, namespace: &str, name: &str) -> Option<String> {
    w.emulator.get("v1", "Pod", namespace, name)?["spec"]["nodeName"]
        .as_str()
        .map(str::to_owned)
}

fn holders(w: &World) -> Vec<Value> {
    w.emulator
        .list("v1", "Pod", Some(keys::NAMESPACE))
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == keys::STANDBY_HOLDER_APP)
        .collect()
}

fn standby_status(w: &World) -> Option<i64> {
    w.emulator
        .get("deckhouse.io/v1", "NodeGroup", "", "worker")?["status"]["standby"]
        .as_i64()
}

/// The story both the cluster and the simulator run: `worker` (1..4 nodes in zone `a`,
/// 4 cpu / 16 GiB, tainted `dedicated=worker:NoSchedule`) keeps one standby node; `app`
/// (3 cpu) runs from the start; `burst` (3 cpu) arrives later and fits only where the holder
/// is.
const STANDBY_STORY: &str = r#"
name: standby-story
duration: 10m
provisionDelay: 20s
groups:
  - name: worker
    nodes: 0
    zones: [a]
    spec:
      nodeType: CloudEphemeral
      nodeTemplate: {taints: [{key: dedicated, value: worker, effect: NoSchedule}]}
      cloudInstances:
        classReference: {kind: AWSInstanceClass, name: small}
        minPerZone: 1
        maxPerZone: 4
        standby: 1
workloads:
  - name: app
    replicas: 1
    group: worker
    requests: {cpu: "3", memory: 1Gi}
  - name: burst
    replicas: 0
    group: worker
    requests: {cpu: "3", memory: 1Gi}
events:
  - at: 3m
    scaleWorkload: {workload: burst, replicas: 1}
scaling:
  scaleDownUnneededTime: 1m
  scaleDownDelayAfterAdd: 0s
  pods:
    - {workload: app, tolerations: [dedicated]}
    - {workload: burst, tolerations: [dedicated]}
  classes:
    - {kind: AWSInstanceClass, name: small, cpu: "4", memory: 16Gi}
"#;

/// What the story decided: machines ordered before and after the burst, holders preempted,
/// nodes at the end, standby held at the end.
#[derive(Debug, PartialEq, Eq)]
struct Decisions {
    ordered_before_burst: usize,
    ordered_after_burst: usize,
    preempted: usize,
    nodes: usize,
    standby_held: i64,
}

fn simulated_story() -> Decisions {
    let scenario = nodemgr_sim::Scenario::from_yaml(STANDBY_STORY).unwrap();
    let mut sim = nodemgr_sim::Simulation::new(&scenario, 1);
    let end = sim.end();
    sim.run_until(end);
    let world = sim.world();
    let t = &world.timeline;
    let ordered = |after: bool| -> usize {
        t.of_kind("machineCreated")
            .filter(|e| (e.t() >= 180.0) == after)
            .map(|e| {
                e.message
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<usize>().ok())
                    .unwrap()
            })
            .sum()
    };
    Decisions {
        ordered_before_burst: ordered(false),
        ordered_after_burst: ordered(true),
        preempted: t.of_kind("standbyPreempted").count(),
        nodes: world.nodes.len(),
        standby_held: world.groups["worker"]
            .group
            .status
            .as_ref()
            .and_then(|s| s.standby)
            .unwrap_or(0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_holders_keep_a_warm_node_that_real_workloads_take_at_once() {
    let group = json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup",
        "metadata": {"name": "worker"},
        "spec": {"nodeType": "CloudEphemeral",
            "nodeTemplate": {"taints": [{"key": "dedicated", "value": "worker", "effect": "NoSchedule"}]},
            "cloudInstances": {
                "classReference": {"kind": "AWSInstanceClass", "name": "small"},
                "minPerZone": 1, "maxPerZone": 4, "zones": ["a"], "standby": 1}}});
    let w = world(&[group]).await;
    w.emulator.seed(workload_pod("app", "3")).unwrap();

    // The holder Deployment, as Deckhouse's: PriorityClass standby, the taint tolerated, half
    // a node requested, one replica.
    eventually("the standby-holder Deployment", 20, || {
        w.emulator
            .get(
                "apps/v1",
                "Deployment",
                keys::NAMESPACE,
                "standby-holder-worker",
            )
            .is_some()
    })
    .await;
    let d = w
        .emulator
        .get(
            "apps/v1",
            "Deployment",
            keys::NAMESPACE,
            "standby-holder-worker",
        )
        .unwrap();
    assert_eq!(d["spec"]["replicas"], 1, "{d}");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "standby", "{d}");
    assert_eq!(pod["nodeSelector"][keys::LABEL_NODE_GROUP], "worker", "{d}");
    assert_eq!(
        pod["tolerations"],
        json!([{"key": "dedicated", "operator": "Equal", "value": "worker", "effect": "NoSchedule"}]),
        "{d}"
    );
    let requests = &pod["containers"][0]["resources"]["requests"];
    assert_eq!(requests["cpu"], "2", "{d}");
    assert_eq!(requests["memory"], (8u64 << 30).to_string(), "{d}");
    let class = w
        .emulator
        .get("scheduling.k8s.io/v1", "PriorityClass", "", "standby")
        .expect("the standby PriorityClass");
    assert!(class["value"].as_i64().unwrap() < 0, "{class}");

    // A node for the workload and a node for the holder; the holder is bound and counted.
    eventually("2 nodes, the app and the holder bound", 30, || {
        in_step(&w, "worker", 2)
            && node_of(&w, "default", "app").is_some()
            && holders(&w)
                .iter()
                .all(|h| h["spec"]["nodeName"].is_string())
            && holders(&w).len() == 1
    })
    .await;
    eventually("status.standby 1", 10, || standby_status(&w) == Some(1)).await;
    let app_node = node_of(&w, "default", "app").unwrap();
    let standby_node = holders(&w)[0]["spec"]["nodeName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(app_node, standby_node);

    // Nodes kept: well past the 2 s unneeded time, neither node goes (the holder keeps its
    // node at 50 % requested).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(in_step(&w, "worker", 2), "the standby node was kept");
    assert_eq!(
        w.metrics
            .action_total("nodemgr_machine_actions_total", "drain"),
        0.0
    );

    // A real workload takes the standby node at once, preempting the holder; the holder's
    // replacement gets a new node.
    let created = || {
        w.metrics
            .action_total("nodemgr_machine_actions_total", "create")
    };
    let before_burst = created();
    let preempted_before = w.preempted.lock().unwrap().len();
    w.emulator.seed(workload_pod("burst", "3")).unwrap();
    eventually("burst bound to the standby node", 10, || {
        node_of(&w, "default", "burst").as_deref() == Some(standby_node.as_str())
    })
    .await;
    assert_eq!(w.preempted.lock().unwrap().len(), preempted_before + 1);
    eventually("a third node, the new holder bound on it", 30, || {
        in_step(&w, "worker", 3)
            && holders(&w).len() == 1
            && holders(&w)[0]["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| n != app_node && n != standby_node)
    })
    .await;
    eventually("status.standby 1 again", 10, || {
        standby_status(&w) == Some(1)
    })
    .await;

    // The simulator's run of the same story takes the same decisions.
    let cluster = Decisions {
        ordered_before_burst: before_burst as usize,
        ordered_after_burst: (created() - before_burst) as usize,
        preempted: w.preempted.lock().unwrap().len(),
        nodes: nodes(&w, "worker").len(),
        standby_held: standby_status(&w).unwrap_or(0),
    };
    assert_eq!(simulated_story(), cluster);
}

fn chaos_group(name: &str) -> Value {
    // Seeded in process, so the schema's minute granularity of `chaos.period` does not apply:
    // a victim every 2 s keeps the test short.
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": name},
        "spec": {"nodeType": "CloudEphemeral",
            "chaos": {"mode": "DrainAndDelete", "period": "2s"},
            "cloudInstances": {
                "classReference": {"kind": "AWSInstanceClass", "name": "small"},
                "minPerZone": 2, "maxPerZone": 2, "zones": ["a"]}}})
}

fn victims(w: &World) -> Vec<String> {
    w.emulator
        .list("v1", "Node", None)
        .iter()
        .filter(|n| {
            n["metadata"]["annotations"]
                .get(keys::ANNOTATION_CHAOS_MONKEY_VICTIM)
                .is_some()
        })
        .map(|n| {
            n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_drains_and_replaces_one_victim_at_a_time_cluster_wide() {
    let w = world(&[chaos_group("worker"), chaos_group("batch")]).await;
    eventually("2 machines per group", 30, || {
        in_step(&w, "worker", 2) && in_step(&w, "batch", 2)
    })
    .await;
    // Watch every 20 ms: never two victims at once, cluster-wide.
    let mut seen: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for 3 victims; saw {seen:?}"
        );
        let now = victims(&w);
        assert!(now.len() <= 1, "two victims at once: {now:?}");
        for v in now {
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every victim was drained and its machine deleted; each group is whole again.
    eventually(
        "the victims' machines gone, 2 machines per group",
        30,
        || {
            seen.iter()
                .all(|v| !w.cloud.existing().iter().any(|m| &m.machine == v))
                && in_step(&w, "worker", 2)
                && in_step(&w, "batch", 2)
        },
    )
    .await;
    let events = w.emulator.list("events.k8s.io/v1", "Event", None);
    for v in &seen {
        assert!(
            events.iter().any(|e| e["reason"] == "ChaosMonkeyVictim"
                && e["regarding"]["name"] == v.as_str()),
            "an Event for victim {v}"
        );
    }
    let text = w.metrics.encode();
    let counted: f64 = text
        .lines()
        .filter(|l| l.starts_with("nodemgr_chaos_victims_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(counted >= 3.0, "{text}");
    assert!(
        w.metrics
            .action_total("nodemgr_update_actions_total", "drain_finished")
            >= 3.0,
        "{text}"
    );
}
