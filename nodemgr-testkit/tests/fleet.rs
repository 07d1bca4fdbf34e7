//! The simulated fleet speaks Deckhouse's update protocol and keeps nodes and workloads alive
//! the way kubelets and controllers would, on a real (wall) clock with short timings: every
//! wait below is a deadline for something that happens within a few ticks, not a measurement.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use nodemgr_core::ImpactKind;
use nodemgr_testkit::{
    Emulator, Fleet, FleetConfig, FleetNode, Generation, Workload, WorkloadKind,
};
use serde_json::{Value, json};

fn fast() -> FleetConfig {
    FleetConfig {
        tick: Duration::from_millis(20),
        heartbeat: Duration::from_millis(100),
        grace: Duration::from_millis(300),
        agent_delay: Duration::from_millis(100),
        kubelet_restart: Duration::from_millis(100),
        reboot: Duration::from_millis(200),
        reschedule: Duration::from_millis(50),
    }
}

fn node(name: &str) -> FleetNode {
    FleetNode {
        name: name.into(),
        group: "workers".into(),
        node_type: "CloudEphemeral".into(),
        zone: "zone-a".into(),
        pods: 110,
    }
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..500 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

fn annotation(emulator: &Emulator, node: &str, key: &str) -> Option<String> {
    emulator
        .get("v1", "Node", "", node)?
        .pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
        .map(str::to_owned)
}

fn ready(emulator: &Emulator, node: &str) -> Option<String> {
    emulator
        .get("v1", "Node", "", node)?
        .pointer("/status/conditions/0/status")?
        .as_str()
        .map(str::to_owned)
}

fn patch_annotations(emulator: &Emulator, node: &str, annotations: Value) {
    emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            node,
            &json!({"metadata": {"annotations": annotations}}),
            false,
        )
        .unwrap();
}

#[tokio::test]
async fn the_agent_waits_for_approval_then_converges() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    let fleet = Fleet::start(emulator.clone(), fast(), None).unwrap();
    fleet.add_node(node("w-0")).unwrap();
    assert!(
        emulator
            .get("coordination.k8s.io/v1", "Lease", "kube-node-lease", "w-0")
            .is_some()
    );
    let before = annotation(&emulator, "w-0", "node.deckhouse.io/configuration-checksum");

    let gen1 = fleet
        .publish(
            "workers",
            Generation {
                name: "gen1".into(),
                impact: ImpactKind::KubeletRestart,
                rolling: false,
            },
        )
        .unwrap();
    assert_eq!(
        fleet.checksum_of("workers", "gen1").as_deref(),
        Some(gen1.as_str())
    );
    let secret = emulator
        .get(
            "v1",
            "Secret",
            "d8-cloud-instance-manager",
            "configuration-checksums",
        )
        .unwrap();
    assert_eq!(
        secret["data"]["workers"],
        base64::engine::general_purpose::STANDARD.encode(&gen1)
    );

    let e = emulator.clone();
    wait_for("waiting-for-approval", || {
        annotation(&e, "w-0", "update.node.deckhouse.io/waiting-for-approval").is_some()
    })
    .await;
    // Without approval nothing is applied: the Node keeps the checksum of what the node
    // runs until the first step of the new bundle is about to run (docs/agent.md, "One pass").
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        annotation(&emulator, "w-0", "node.deckhouse.io/configuration-checksum"),
        before
    );
    assert_ne!(before.as_deref(), Some(gen1.as_str()));

    patch_annotations(
        &emulator,
        "w-0",
        json!({"update.node.deckhouse.io/approved": ""}),
    );
    let mut saw_not_ready = false;
    wait_for("the new checksum", || {
        saw_not_ready |= ready(&e, "w-0").as_deref() == Some("False");
        annotation(&e, "w-0", "node.deckhouse.io/configuration-checksum").as_deref()
            == Some(gen1.as_str())
    })
    .await;
    assert!(
        saw_not_ready,
        "a kubelet restart makes the node NotReady for a while"
    );
    wait_for("Ready again", || {
        ready(&e, "w-0").as_deref() == Some("True")
    })
    .await;
}

#[tokio::test]
async fn a_disruptive_generation_asks_for_a_disruption_first() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    let fleet = Fleet::start(emulator.clone(), fast(), None).unwrap();
    fleet.add_node(node("w-0")).unwrap();
    let gen2 = fleet
        .publish(
            "workers",
            Generation {
                name: "gen2".into(),
                impact: ImpactKind::Disruptive,
                rolling: false,
            },
        )
        .unwrap();
    patch_annotations(
        &emulator,
        "w-0",
        json!({"update.node.deckhouse.io/approved": ""}),
    );
    let e = emulator.clone();
    wait_for("disruption-required", || {
        annotation(&e, "w-0", "update.node.deckhouse.io/disruption-required").is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_ne!(
        annotation(&emulator, "w-0", "node.deckhouse.io/configuration-checksum").as_deref(),
        Some(gen2.as_str())
    );
    patch_annotations(
        &emulator,
        "w-0",
        json!({"update.node.deckhouse.io/disruption-approved": ""}),
    );
    wait_for("the new checksum", || {
        annotation(&e, "w-0", "node.deckhouse.io/configuration-checksum").as_deref()
            == Some(gen2.as_str())
    })
    .await;
}

#[tokio::test]
async fn a_dark_node_stops_heartbeating_and_turns_unknown() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    let fleet = Fleet::start(emulator.clone(), fast(), None).unwrap();
    fleet.add_node(node("w-0")).unwrap();
    let renew = |e: &Emulator| {
        e.get("coordination.k8s.io/v1", "Lease", "kube-node-lease", "w-0")
            .unwrap()["spec"]["renewTime"]
            .clone()
    };
    let first = renew(&emulator);
    let e = emulator.clone();
    wait_for("a renewed lease", || renew(&e) != first).await;
    fleet.set_dark("w-0", true).unwrap();
    wait_for("Ready=Unknown", || {
        ready(&e, "w-0").as_deref() == Some("Unknown")
    })
    .await;
    let frozen = renew(&emulator);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(renew(&emulator), frozen, "a dark node renews nothing");
    fleet.set_dark("w-0", false).unwrap();
    wait_for("Ready again", || {
        ready(&e, "w-0").as_deref() == Some("True")
    })
    .await;
}

#[tokio::test]
async fn workloads_come_back_and_daemonsets_cover_every_node() {
    let emulator = Arc::new(Emulator::start().await.unwrap());
    let fleet = Fleet::start(emulator.clone(), fast(), None).unwrap();
    fleet.add_node(node("w-0")).unwrap();
    fleet.add_node(node("w-1")).unwrap();
    fleet.add_workload(Workload {
        name: "web".into(),
        namespace: "default".into(),
        kind: WorkloadKind::Deployment,
        replicas: 3,
        group: "workers".into(),
        labels: BTreeMap::from([("app".into(), "web".into())]),
    });
    fleet.add_workload(Workload {
        name: "exporter".into(),
        namespace: "default".into(),
        kind: WorkloadKind::DaemonSet,
        replicas: 0,
        group: String::new(),
        labels: BTreeMap::new(),
    });
    let e = emulator.clone();
    let count = |e: &Emulator, app: &str| {
        e.list("v1", "Pod", Some("default"))
            .iter()
            .filter(|p| p["metadata"]["labels"]["fleet.nodemgr.io/workload"] == app)
            .count()
    };
    wait_for("3 web pods and 2 exporters", || {
        count(&e, "web") == 3 && count(&e, "exporter") == 2
    })
    .await;
    let victim = emulator
        .list("v1", "Pod", Some("default"))
        .into_iter()
        .find(|p| p["metadata"]["labels"]["app"] == "web")
        .unwrap();
    emulator
        .delete(
            "v1",
            "Pod",
            "default",
            victim["metadata"]["name"].as_str().unwrap(),
        )
        .unwrap();
    assert_eq!(count(&emulator, "web"), 2);
    wait_for("the web pod back", || count(&e, "web") == 3).await;
    // A deleted Node leaves the fleet.
    emulator.delete("v1", "Node", "", "w-1").unwrap();
    wait_for("w-1 gone from the fleet", || {
        fleet
            .nodes()
            .get("workers")
            .is_some_and(|n| n == &["w-0".to_owned()])
    })
    .await;
}
