//! Plan one update pass yourself: given the NodeGroups, the configuration checksum each group's
//! nodes should report and the nodes as they are, ask the update planner which nodes to approve,
//! drain or finish now. Nothing is written anywhere: the plan is data (docs/deckhouse.md §3).
//!
//! `cargo run -p nodemgr-examples --example update_plan`

use std::collections::BTreeMap;

use nodemgr_core::model::{Node, Timestamp, keys, parse_node_group};
use nodemgr_core::update::plan_updates_detailed;

/// A group whose nodes update two at a time, disruptions approved automatically.
const GROUP: &str = include_str!("../manifests/worker-rolling.yaml");

/// A Ready node of group `worker` that reports configuration `checksum` and carries the
/// update annotations `marks`.
fn node(name: &str, checksum: &str, marks: &[&str]) -> Node {
    let mut node = Node {
        name: name.into(),
        ready: true,
        ..Node::default()
    };
    node.labels
        .insert(keys::LABEL_NODE_GROUP.into(), "worker".into());
    node.annotations.insert(
        keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(),
        checksum.into(),
    );
    for mark in marks {
        node.annotations.insert((*mark).into(), String::new());
    }
    node
}

fn main() -> anyhow::Result<()> {
    let group = parse_node_group(GROUP)?;
    // The group's bundle changed: its nodes should now report "v2".
    let desired = BTreeMap::from([("worker".to_owned(), "v2".to_owned())]);
    // Every node still runs "v1"; three of them have asked for an update (the node agent sets
    // `waiting-for-approval` when it sees the new checksum), one of them also needs a disruption.
    let nodes = vec![
        node("worker-0", "v1", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]),
        node("worker-1", "v1", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]),
        node("worker-2", "v1", &[keys::ANNOTATION_WAITING_FOR_APPROVAL]),
        node("worker-3", "v1", &[]),
    ];
    let now = Timestamp::from_secs(1_767_571_200); // 2026-01-05T00:00:00Z, a Monday

    for (name, plan) in plan_updates_detailed(std::slice::from_ref(&group), &desired, &nodes, now) {
        println!("group {name}:");
        for command in &plan.commands {
            println!("  do: {command:?}");
        }
        for reason in &plan.blocked {
            println!("  waits: {reason}");
        }
        // maxConcurrent 2: two of the three waiting nodes are approved in this pass.
        anyhow::ensure!(
            plan.commands.len() == 2,
            "expected two approvals, got {plan:?}"
        );
    }
    Ok(())
}
