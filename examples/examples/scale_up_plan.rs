//! Plan a scale-up from pending pods: which CloudEphemeral groups get how many new machines in
//! which zone so that the pods that cannot be scheduled now find a place, honouring each group's
//! `maxPerZone`, priorities and the pods' scheduling constraints (docs/scheduling.md).
//!
//! `cargo run -p nodemgr-examples --example scale_up_plan`

use nodemgr_core::model::{Owner, Pod, PodPhase, Quantity, Timestamp, parse_node_group};
use nodemgr_core::scaling::{ClusterSnapshot, InstanceClass, ScalingConfig, plan_scale_up};

/// A CloudEphemeral group of 4-CPU, 16 GiB machines in two zones, up to 3 per zone.
const GROUP: &str = "
apiVersion: deckhouse.io/v1
kind: NodeGroup
metadata: {name: worker}
spec:
  nodeType: CloudEphemeral
  cloudInstances:
    classReference: {kind: InstanceClass, name: medium}
    zones: [zone-a, zone-b]
    minPerZone: 0
    maxPerZone: 3
";

/// A pending pod of Deployment `app` asking for `cpu` and `memory`.
fn pending(name: &str, cpu: &str, memory: &str) -> anyhow::Result<Pod> {
    Ok(Pod {
        namespace: "default".into(),
        name: name.into(),
        requests: [
            ("cpu".to_owned(), Quantity::parse(cpu)?),
            ("memory".to_owned(), Quantity::parse(memory)?),
        ]
        .into(),
        owner: Some(Owner {
            kind: "ReplicaSet".into(),
            name: "app-5d8f7".into(),
        }),
        phase: PodPhase::Pending,
        ..Pod::default()
    })
}

fn main() -> anyhow::Result<()> {
    let groups = vec![parse_node_group(GROUP)?];
    // nodemgr does not model provider classes, only the machine size scaling needs.
    let classes = vec![InstanceClass::new("InstanceClass", "medium", 4, 16)];
    let zones = vec!["zone-a".to_owned(), "zone-b".to_owned()];
    // Ten pods of 1.5 CPU: two fit a 4-CPU machine, so five machines are needed.
    let pods = (0..10)
        .map(|i| pending(&format!("app-{i}"), "1500m", "2Gi"))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let snapshot = ClusterSnapshot::new(&[], &pods, &[], &groups, &classes, &zones);
    let plan = plan_scale_up(&snapshot, &ScalingConfig::default(), Timestamp::EPOCH);

    for command in &plan.commands {
        println!("{command}");
    }
    println!(
        "{} new nodes; {} pods fit none, {} wait for capacity",
        plan.new_nodes.len(),
        plan.unplaceable.iter().map(|u| u.pods.len()).sum::<usize>(),
        plan.waiting_for_capacity.len()
    );
    anyhow::ensure!(plan.new_nodes.len() == 5, "expected 5 new nodes: {plan:?}");
    Ok(())
}
