//! A full CloudEphemeral scale-up and scale-down against a real EC2-compatible API: the machine
//! controller with nodemgr-cloud's EC2 adapter talking to its own `moto_server` on loopback
//! (scripts/install.d/20-moto.sh), the API emulator for the cluster, and a stand-in kubelet that
//! registers a Node for every running EC2 instance of the group. Instance resources must stay in
//! step with the EC2 instances and the Nodes the whole way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use nodemgr_cloud::Ec2Client;
use nodemgr_cloud::testing::{MotoServer, REGION};
use nodemgr_core::machines::MachineConfig;
use nodemgr_core::ports::cloud::{CloudApi, InstanceState};
use nodemgr_k8s::cluster::{KubeCluster, client};
use nodemgr_k8s::controllers;
use nodemgr_k8s::controllers::machines::MachineController;
use nodemgr_k8s::metrics::Metrics;
use nodemgr_testkit::Emulator;
use serde_json::{Value, json};
use tokio::sync::watch;

fn zone() -> String {
    format!("{REGION}a")
}

fn group(count: u32) -> Value {
    json!({"apiVersion": "deckhouse.io/v1", "kind": "NodeGroup", "metadata": {"name": "worker"},
        "spec": {"nodeType": "CloudEphemeral", "cloudInstances": {
            "classReference": {"kind": "AWSInstanceClass", "name": "small"},
            "minPerZone": count, "maxPerZone": count, "zones": [zone()]}}})
}

async fn kubelet(emulator: Arc<Emulator>, ec2: Arc<Ec2Client>, stop: watch::Receiver<bool>) {
    let mut registered = BTreeSet::new();
    while !*stop.borrow() {
        if let Ok(machines) = ec2.list_group_instances("worker").await {
            for m in machines {
                if m.state != InstanceState::Running || !registered.insert(m.machine.clone()) {
                    continue;
                }
                let _ = emulator.seed(common::machine_node(&m));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn eventually(what: &str, seconds: u64, mut check: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_ephemeral_scale_up_and_down_against_moto_keeps_instances_in_step() {
    let moto = MotoServer::start().unwrap();
    let ec2 = Arc::new(Ec2Client::new(moto.config()).unwrap());
    let emulator = Arc::new(Emulator::start().await.unwrap());
    for crd in nodemgr_k8s::crd::definitions().unwrap() {
        emulator.seed(serde_json::to_value(crd).unwrap()).unwrap();
    }
    emulator.seed(group(0)).unwrap();
    let kube = client(Some(emulator.kubeconfig_path())).await.unwrap();
    let (cluster, _watches) = KubeCluster::start(kube, "node-manager");
    cluster.wait_ready().await.unwrap();
    let (stop, stop_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let settings = common::machine_settings(
        &zone(),
        MachineConfig {
            creation_timeout: Duration::from_secs(120),
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(2),
            orphan_grace: Duration::from_secs(30),
            gc_grace: Duration::from_secs(5),
            failures_kept: 5,
        },
        nodemgr_core::ports::cloud::InstanceClass {
            instance_type: "m5.xlarge".into(),
            image_id: "ami-0abcdef1234567890".into(),
            ..Default::default()
        },
    );
    let controller =
        MachineController::new(cluster.clone(), ec2.clone(), settings, metrics.clone());
    tokio::spawn(controller.run(stop_rx.clone()));
    tokio::spawn(controllers::run(
        cluster,
        common::update_only(),
        metrics.clone(),
        stop_rx.clone(),
    ));
    tokio::spawn(kubelet(emulator.clone(), ec2.clone(), stop_rx));

    let in_step = async |n: usize| {
        let machines = ec2.list_group_instances("worker").await.unwrap_or_default();
        let instances = emulator.list("deckhouse.io/v1alpha2", "Instance", None);
        let running = instances
            .iter()
            .filter(|i| i["status"]["currentStatus"]["phase"] == "Running")
            .count();
        let nodes = emulator.list("v1", "Node", None).len();
        machines.len() == n && instances.len() == n && running == n && nodes == n
    };

    // 0 -> 5.
    emulator
        .merge_patch(
            "deckhouse.io/v1",
            "NodeGroup",
            "",
            "worker",
            &json!({"spec": {"cloudInstances": {"minPerZone": 5, "maxPerZone": 5}}}),
            false,
        )
        .unwrap();
    eventually(
        "5 EC2 instances, Instances Running, Nodes",
        60,
        async || in_step(5).await,
    )
    .await;
    let machines = ec2.list_group_instances("worker").await.unwrap();
    for m in &machines {
        assert!(
            m.provider_id.starts_with(&format!("aws:///{}/i-", zone())),
            "{m:?}"
        );
        assert!(m.machine.starts_with("worker-"), "{m:?}");
        let instance = emulator
            .get("deckhouse.io/v1alpha2", "Instance", "", &m.machine)
            .unwrap();
        assert_eq!(
            instance["metadata"]["annotations"]["node-manager.deckhouse.io/provider-id"],
            json!(m.provider_id)
        );
    }
    let names: BTreeSet<String> = machines.iter().map(|m| m.machine.clone()).collect();
    assert_eq!(names.len(), 5, "one EC2 instance per machine name");

    // 5 -> 2: three drained, terminated, their Nodes and Instances gone.
    emulator
        .merge_patch(
            "deckhouse.io/v1",
            "NodeGroup",
            "",
            "worker",
            &json!({"spec": {"cloudInstances": {"minPerZone": 2, "maxPerZone": 2}}}),
            false,
        )
        .unwrap();
    eventually("down to 2", 60, async || in_step(2).await).await;
    let _ = stop.send(true);
}
