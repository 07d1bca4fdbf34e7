//! Ask what an edit of a NodeGroup does to its nodes before applying it: which changed
//! parameters need a disruptive update, a new machine or a kubelet restart.
//!
//! `cargo run -p nodemgr-examples --example nodegroup_explain`

use nodemgr_core::impact::impact_of;
use nodemgr_core::model::parse_node_group;

const BEFORE: &str = include_str!("../manifests/worker-before.yaml");
const AFTER: &str = include_str!("../manifests/worker-after.yaml");

fn main() -> anyhow::Result<()> {
    let before = parse_node_group(BEFORE)?;
    let after = parse_node_group(AFTER)?;
    let impact = impact_of(&before.spec, &after.spec);
    print!("{}", impact.to_table());
    if impact.disruption {
        println!("\nThis edit disrupts nodes: they will be drained and approved one by one.");
    }
    println!("\n{}", serde_json::to_string_pretty(&impact)?);
    Ok(())
}
