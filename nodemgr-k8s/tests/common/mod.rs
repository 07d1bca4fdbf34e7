//! Pieces the machine controller tests share: the controllers that run beside it, the Node a
//! stand-in kubelet registers for a machine, and the machine controller's fast settings.

#![allow(dead_code)] // each test binary uses its part

use std::time::Duration;

use nodemgr_core::machines::MachineConfig;
use nodemgr_core::ports::cloud::{CloudInstance, InstanceClass as CloudClass};
use nodemgr_core::scaling::{InstanceClass, ScalingConfig};
use nodemgr_k8s::controllers::Settings;
use nodemgr_k8s::controllers::machines::{MachineClass, MachineSettings};
use serde_json::{Value, json};

/// Only the update controller: it drains the nodes scale-down removes.
pub fn update_only() -> Settings {
    Settings {
        status: false,
        template: false,
        fencing: false,
        node_duties: false,
        update_period: Duration::from_millis(200),
        ..Settings::default()
    }
}

/// A Ready Node of 4 cpu / 16 GiB for a machine of group `worker`.
pub fn machine_node(m: &CloudInstance) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": m.machine, "labels": {
            "node.deckhouse.io/group": "worker", "topology.kubernetes.io/zone": m.zone,
            "kubernetes.io/hostname": m.machine}},
        "spec": {"providerID": m.provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}})
}

/// Fast machine controller settings for the classes `AWSInstanceClass/small` (4 cpu, 16 GiB,
/// made with `cloud`) and `AWSInstanceClass/large` (8 cpu, 32 GiB) in `zone`.
pub fn machine_settings(zone: &str, config: MachineConfig, cloud: CloudClass) -> MachineSettings {
    MachineSettings {
        period: Duration::from_millis(300),
        config,
        scaling: ScalingConfig::default(),
        classes: vec![
            MachineClass {
                scaling: InstanceClass::new("AWSInstanceClass", "small", 4, 16),
                cloud: cloud.clone(),
            },
            MachineClass {
                scaling: InstanceClass::new("AWSInstanceClass", "large", 8, 32),
                cloud: CloudClass {
                    instance_type: "m5.2xlarge".into(),
                    ..cloud
                },
            },
        ],
        zones: vec![zone.to_owned()],
        bootstrap: None,
        concurrency: 8,
        standby_image: nodemgr_k8s::controllers::machines::DEFAULT_STANDBY_IMAGE.into(),
    }
}
