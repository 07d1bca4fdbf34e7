//! Drive the update executor against a cluster port of your own. The executor is the code
//! node-manager and the simulator both run: each `step` reads the cluster through the port,
//! plans, writes the decisions (approvals, drains with evictions, finishes) back through it
//! and reports what it did (docs/executors.md). Here the port is a small in-memory cluster, and
//! the loop also plays the node agent, which applies an approved update by reporting the new
//! checksum (docs/agent.md).
//!
//! `cargo run -p nodemgr-examples --example update_executor`

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use nodemgr_core::executor::UpdateExecutor;
use nodemgr_core::model::{
    Node, NodeGroup, Owner, Pod, PodDisruptionBudget, PodPhase, Timestamp, keys, parse_node_group,
};
use nodemgr_core::ports::{
    ClusterError, ClusterRead, EventApi, EvictionResult, NodeApi, NodePatch, PodApi, PodRef,
    Precondition, RecordedEvent, block_on_ready,
};

/// A group whose nodes update two at a time, disruptions approved automatically.
const GROUP: &str = include_str!("../manifests/worker-rolling.yaml");

/// The cluster: what a real port would read from and write to the API server.
#[derive(Default)]
struct State {
    groups: Vec<NodeGroup>,
    nodes: Vec<Node>,
    pods: Vec<Pod>,
    version: u64,
}

/// The port: one lock around the state. Every call returns at once, so
/// [`block_on_ready`] runs the async steps without an async runtime.
#[derive(Default)]
struct InMemory(Mutex<State>);

impl InMemory {
    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl ClusterRead for InMemory {
    async fn list_node_groups(&self) -> Result<Vec<NodeGroup>, ClusterError> {
        Ok(self.state().groups.clone())
    }
    async fn list_nodes(&self) -> Result<Vec<Node>, ClusterError> {
        Ok(self.state().nodes.clone())
    }
    async fn list_pods(&self) -> Result<Vec<Pod>, ClusterError> {
        Ok(self.state().pods.clone())
    }
    async fn list_pod_disruption_budgets(&self) -> Result<Vec<PodDisruptionBudget>, ClusterError> {
        Ok(Vec::new())
    }
    async fn configuration_checksums(&self) -> Result<BTreeMap<String, String>, ClusterError> {
        Ok(BTreeMap::from([("worker".to_owned(), "v2".to_owned())]))
    }
}

#[async_trait]
impl NodeApi for InMemory {
    async fn patch_node(&self, name: &str, patch: &NodePatch) -> Result<Node, ClusterError> {
        let mut state = self.state();
        state.version += 1;
        let version = state.version.to_string();
        let node = state
            .nodes
            .iter_mut()
            .find(|n| n.name == name)
            .ok_or_else(|| ClusterError::not_found(format!("node {name}")))?;
        // The precondition: write only onto the version the planner saw.
        if patch
            .resource_version
            .as_ref()
            .is_some_and(|rv| *rv != node.resource_version)
        {
            return Err(ClusterError::conflict(format!("node {name} changed")));
        }
        patch.apply_to(node);
        node.resource_version = version;
        Ok(node.clone())
    }
    async fn delete_node(&self, name: &str, _: &Precondition) -> Result<(), ClusterError> {
        self.state().nodes.retain(|n| n.name != name);
        Ok(())
    }
}

#[async_trait]
impl PodApi for InMemory {
    async fn evict_pod(&self, pod: &PodRef) -> Result<EvictionResult, ClusterError> {
        let mut state = self.state();
        let before = state.pods.len();
        state.pods.retain(|p| PodRef::of(p) != *pod);
        Ok(if state.pods.len() < before {
            EvictionResult::Evicted
        } else {
            EvictionResult::Gone
        })
    }
    async fn delete_pod(
        &self,
        pod: &PodRef,
        _: Option<Duration>,
        _: &Precondition,
    ) -> Result<(), ClusterError> {
        self.state().pods.retain(|p| PodRef::of(p) != *pod);
        Ok(())
    }
}

#[async_trait]
impl EventApi for InMemory {
    async fn emit_event(&self, event: &RecordedEvent) -> Result<(), ClusterError> {
        println!("  event {}: {}", event.reason, event.message);
        Ok(())
    }
}

/// The node agent's half of the protocol, for every node: ask for approval when the desired
/// checksum differs, ask for a disruption once approved (worker-0's update restarts the
/// runtime), and apply the update once allowed to.
fn play_agents(state: &mut State) {
    let has = |n: &Node, key: &str| n.annotations.contains_key(key);
    for node in &mut state.nodes {
        if node.checksum() == Some("v2") {
            continue;
        }
        let approved = has(node, keys::ANNOTATION_APPROVED);
        let disruptive = node.name == "worker-0";
        if !approved {
            node.annotations
                .insert(keys::ANNOTATION_WAITING_FOR_APPROVAL.into(), String::new());
        } else if disruptive && !has(node, keys::ANNOTATION_DISRUPTION_APPROVED) {
            node.annotations
                .insert(keys::ANNOTATION_DISRUPTION_REQUIRED.into(), String::new());
        } else {
            node.annotations
                .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "v2".into());
        }
    }
}

fn node(name: &str) -> Node {
    let mut node = Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        ready: true,
        ..Node::default()
    };
    node.labels
        .insert(keys::LABEL_NODE_GROUP.into(), "worker".into());
    node.annotations
        .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "v1".into());
    node
}

fn main() -> anyhow::Result<()> {
    let cluster = InMemory::default();
    {
        let mut state = cluster.state();
        state.groups.push(parse_node_group(GROUP)?);
        state.nodes = vec![node("worker-0"), node("worker-1")];
        // A pod on worker-0 that its drain must evict before the disruptive update.
        state.pods.push(Pod {
            namespace: "default".into(),
            name: "web-0".into(),
            uid: "uid-web-0".into(),
            node_name: Some("worker-0".into()),
            owner: Some(Owner {
                kind: "ReplicaSet".into(),
                name: "web-6c9f".into(),
            }),
            phase: PodPhase::Running,
            ..Pod::default()
        });
    }

    let mut executor = UpdateExecutor::new();
    let mut now = Timestamp::from_secs(1_767_571_200);
    for pass in 1..=20 {
        play_agents(&mut cluster.state());
        println!("step {pass} at {}:", now.to_rfc3339());
        // The port never waits, so the step runs without an async runtime.
        let report = block_on_ready(executor.step(&cluster, now))
            .ok_or_else(|| anyhow::anyhow!("the port waited"))??;
        for event in &report.events {
            println!("  {event}");
        }
        for error in &report.errors {
            println!("  failed: {error}");
        }
        let state = cluster.state();
        let done = state.nodes.iter().all(|n| {
            n.checksum() == Some("v2")
                && !n
                    .annotations
                    .keys()
                    .any(|k| k.starts_with(keys::UPDATE_ANNOTATION_PREFIX))
                && !n.unschedulable
        });
        if done {
            println!(
                "every node runs v2 after {pass} steps; pods left: {}",
                state.pods.len()
            );
            return Ok(());
        }
        drop(state);
        now = now + Duration::from_secs(10);
    }
    anyhow::bail!("the update did not finish in 20 steps")
}
