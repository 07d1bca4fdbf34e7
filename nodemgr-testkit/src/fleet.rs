//! A fleet of simulated nodes on an [`Emulator`]: what kubelets, the node agent (bashible), the
//! node-lifecycle controller and the ReplicaSet controller would do in a real cluster, reduced
//! to what nodemgr's controllers observe. It lets the real controllers run end to end against
//! the emulator (`nodemgr demo`, end-to-end tests) without a cluster.
//!
//! Each tick, for every node:
//! - **kubelet**: renews the node's Lease in `kube-node-lease` and keeps the Ready condition
//!   (False while the agent restarts the kubelet or reboots), unless the node is dark;
//! - **node lifecycle**: a node whose last heartbeat is older than the grace period gets
//!   Ready=Unknown, as kube-controller-manager does;
//! - **agent**: core's node agent ([`nodemgr_core::agent`], `docs/agent.md`) driven against
//!   the emulator (`fleet_agent`): it asks for approval, asks for a disruption when a
//!   disruptive generation needs one, applies the group's published generation for
//!   `agent_delay`, restarts the kubelet or reboots (NotReady meanwhile) and reports the new
//!   checksum. It never removes the controller's annotations: that is the controller's job.
//!
//! Workloads: Deployment-like pods are re-created (under a new name) on the Ready, schedulable
//! node of their group with the fewest pods when some are gone; DaemonSet-like pods run one per
//! node. Everything goes through the emulator's in-process API ([`Emulator::merge_patch`],
//! [`Emulator::seed`]) so it never races a controller's writes.
//!
//! The desired checksums are published, as Deckhouse does, in the Secret
//! `d8-cloud-instance-manager/configuration-checksums` (one data key per group).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use nodemgr_core::ImpactKind;
use nodemgr_core::agent::SimulatedGenerations;
use nodemgr_core::model::keys;

use crate::emulator::Emulator;
use crate::fleet_agent::{FleetAgent, Published};
use crate::status::ApiError;

const NODE_LEASE_NAMESPACE: &str = keys::NODE_LEASE_NAMESPACE;
const CHECKSUMS_NAMESPACE: &str = keys::NAMESPACE;
const CHECKSUMS_SECRET: &str = "configuration-checksums";
const WORKLOAD_LABEL: &str = "fleet.nodemgr.io/workload";

/// Timings of the fleet.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// How often the fleet acts. Default 500 ms.
    pub tick: Duration,
    /// Lease renewal and Ready heartbeat period. Default 2 s.
    pub heartbeat: Duration,
    /// Heartbeat age after which a node turns Ready=Unknown. Default 10 s (kube: 40 s).
    pub grace: Duration,
    /// Time the agent takes to apply a configuration. Default 3 s.
    pub agent_delay: Duration,
    /// NotReady time of a kubelet restart. Default 2 s.
    pub kubelet_restart: Duration,
    /// NotReady time of a reboot. Default 5 s.
    pub reboot: Duration,
    /// Delay before a missing Deployment pod is re-created. Default 2 s.
    pub reschedule: Duration,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            tick: Duration::from_millis(500),
            heartbeat: Duration::from_secs(2),
            grace: Duration::from_secs(10),
            agent_delay: Duration::from_secs(3),
            kubelet_restart: Duration::from_secs(2),
            reboot: Duration::from_secs(5),
            reschedule: Duration::from_secs(2),
        }
    }
}

/// A configuration generation to publish for a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// Its name (`workers-gen1`), for people: the fleet's messages use it, and the checksum
    /// nodes report is that of a bundle made from it ([`Fleet::publish`] returns it).
    pub name: String,
    /// What applying it takes, compared with the previous generation.
    pub impact: ImpactKind,
    /// The group replaces machines instead (`approvalMode: RollingUpdate`): the agent asks
    /// with `rolling-update` rather than `disruption-required`.
    pub rolling: bool,
}

/// A node to add to the fleet.
#[derive(Debug, Clone)]
pub struct FleetNode {
    /// Node name.
    pub name: String,
    /// Its NodeGroup (`node.deckhouse.io/group`).
    pub group: String,
    /// Its group's nodeType (`node.deckhouse.io/type`).
    pub node_type: String,
    /// Zone (`topology.kubernetes.io/zone`).
    pub zone: String,
    /// Allocatable pods. Default 110.
    pub pods: u32,
}

/// A workload the fleet keeps running.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Name; pods are `<name>-<n>`.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// `Deployment` (re-created elsewhere when gone) or `DaemonSet` (one per node).
    pub kind: WorkloadKind,
    /// Replicas (Deployment only).
    pub replicas: usize,
    /// Group whose nodes run it (Deployment only).
    pub group: String,
    /// Pod labels (the PDB selectors match these).
    pub labels: BTreeMap<String, String>,
}

/// How a workload's pods are owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadKind {
    /// ReplicaSet-owned pods.
    Deployment,
    /// DaemonSet-owned pods, one per node.
    DaemonSet,
}

/// Something the fleet did, for a person to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetEvent {
    /// The node concerned.
    pub node: String,
    /// What happened.
    pub message: String,
}

#[derive(Debug)]
struct NodeState {
    spec: FleetNode,
    dark: bool,
    last_heartbeat: SystemTime,
    last_status: Option<SystemTime>,
    reported_ready: Option<&'static str>,
    agent: FleetAgent,
}

#[derive(Debug, Default)]
struct State {
    nodes: BTreeMap<String, NodeState>,
    published: BTreeMap<String, Published>,
    workloads: Vec<(Workload, usize, Option<SystemTime>)>,
}

/// A running fleet; dropping it stops the fleet's task.
pub struct Fleet {
    emulator: Arc<Emulator>,
    config: FleetConfig,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why the fleet could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The emulator refused a write.
    #[error("the API emulator refused the fleet's {what}: {source}")]
    Api {
        /// What was being written.
        what: String,
        /// The emulator's error.
        #[source]
        source: Box<ApiError>,
    },
    /// No such node in the fleet.
    #[error("no node {0:?} in the fleet")]
    UnknownNode(String),
}

fn api(what: impl Into<String>) -> impl FnOnce(ApiError) -> FleetError {
    let what = what.into();
    move |source| FleetError::Api {
        what,
        source: Box::new(source),
    }
}

/// RFC 3339 with microseconds (a Lease's MicroTime), UTC.
fn micro_time(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let mut text = rfc3339(t);
    text.pop();
    format!("{text}.{:06}Z", d.subsec_micros())
}

/// RFC 3339 with seconds, UTC (Node condition times).
fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    crate::time::format_rfc3339(i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

impl Fleet {
    /// Starts an empty fleet on `emulator`; events for a person go to `events` when given.
    /// Creates the namespaces it writes to.
    ///
    /// # Errors
    /// When the emulator refuses the namespaces.
    pub fn start(
        emulator: Arc<Emulator>,
        config: FleetConfig,
        events: Option<mpsc::UnboundedSender<FleetEvent>>,
    ) -> Result<Fleet, FleetError> {
        for ns in [NODE_LEASE_NAMESPACE, CHECKSUMS_NAMESPACE] {
            if emulator.get("v1", "Namespace", "", ns).is_none() {
                emulator
                    .seed(
                        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                    )
                    .map_err(api(format!("namespace {ns}")))?;
            }
        }
        let state = Arc::new(Mutex::new(State::default()));
        let task = {
            let emulator = emulator.clone();
            let state = state.clone();
            let config = config.clone();
            tokio::spawn(async move {
                let mut interval = tokio::time::interval(config.tick);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    interval.tick().await;
                    let now = SystemTime::now();
                    let mut out = Vec::new();
                    {
                        let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
                        tick(&emulator, &config, &mut state, now, &mut out);
                    }
                    if let Some(events) = &events {
                        for event in out {
                            let _ = events.send(event);
                        }
                    }
                }
            })
        };
        Ok(Fleet {
            emulator,
            config,
            state,
            task,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a Ready node (its Node object and Lease), running its group's current generation.
    ///
    /// # Errors
    /// When the emulator refuses the objects (e.g. the node exists).
    pub fn add_node(&self, node: FleetNode) -> Result<(), FleetError> {
        let now = SystemTime::now();
        let mut state = self.state();
        let generation = state
            .published
            .get(&node.group)
            .map(|p| p.generations.desired().clone());
        let checksum = generation
            .as_ref()
            .map(|g| g.checksum.clone())
            .unwrap_or_default();
        self.emulator
            .seed(json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node.name,
                    "labels": {
                        keys::LABEL_NODE_GROUP: node.group,
                        keys::LABEL_NODE_TYPE: node.node_type,
                        keys::LABEL_TOPOLOGY_ZONE: node.zone,
                        keys::LABEL_HOSTNAME: node.name,
                    },
                    "annotations": {keys::ANNOTATION_CONFIGURATION_CHECKSUM: checksum},
                },
                "spec": {"providerID": format!("fleet://{}", node.name)},
                "status": {
                    "capacity": {"cpu": "4", "memory": "16Gi", "pods": node.pods.to_string()},
                    "allocatable": {"cpu": "4", "memory": "16Gi", "pods": node.pods.to_string()},
                    "conditions": [ready_condition("True", now)],
                    "nodeInfo": {"kubeletVersion": "v1.33.0"},
                },
            }))
            .map_err(api(format!("Node {}", node.name)))?;
        self.emulator
            .seed(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": node.name, "namespace": NODE_LEASE_NAMESPACE},
                "spec": {
                    "holderIdentity": node.name,
                    "leaseDurationSeconds": 40,
                    "renewTime": micro_time(now),
                },
            }))
            .map_err(api(format!("Lease {}", node.name)))?;
        let agent = FleetAgent::new(&node.name, generation.as_ref(), now);
        state.nodes.insert(
            node.name.clone(),
            NodeState {
                spec: node,
                dark: false,
                last_heartbeat: now,
                last_status: Some(now),
                reported_ready: Some("True"),
                agent,
            },
        );
        Ok(())
    }

    /// Publishes a group's generation: the agents start converging to it, and the Secret
    /// `configuration-checksums` carries its checksum for the controllers. Nodes added after
    /// a publish start with the group's latest generation; the `impact` of a group's first
    /// generation is what applying it does to nodes added before. Returns the checksum nodes
    /// report once they run it.
    ///
    /// # Errors
    /// When the emulator refuses the Secret.
    pub fn publish(&self, group: &str, generation: Generation) -> Result<String, FleetError> {
        let mut state = self.state();
        let checksum = match state.published.get_mut(group) {
            Some(p) => {
                p.rolling = generation.rolling;
                p.generations
                    .push(&generation.name, generation.impact)
                    .checksum
                    .clone()
            }
            None => {
                let generations =
                    SimulatedGenerations::new(group, &generation.name, generation.impact);
                let checksum = generations.desired().checksum.clone();
                state.published.insert(
                    group.to_owned(),
                    Published {
                        generations,
                        rolling: generation.rolling,
                    },
                );
                checksum
            }
        };
        let encoded = base64::engine::general_purpose::STANDARD.encode(&checksum);
        let exists = self
            .emulator
            .get("v1", "Secret", CHECKSUMS_NAMESPACE, CHECKSUMS_SECRET)
            .is_some();
        if exists {
            self.emulator
                .merge_patch(
                    "v1",
                    "Secret",
                    CHECKSUMS_NAMESPACE,
                    CHECKSUMS_SECRET,
                    &json!({"data": {group: encoded}}),
                    false,
                )
                .map_err(api("Secret configuration-checksums"))?;
        } else {
            self.emulator
                .seed(json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": CHECKSUMS_SECRET, "namespace": CHECKSUMS_NAMESPACE},
                    "type": "Opaque",
                    "data": {group: encoded},
                }))
                .map_err(api("Secret configuration-checksums"))?;
        }
        Ok(checksum)
    }

    /// The checksum of the group's generation named `name`, if published.
    pub fn checksum_of(&self, group: &str, name: &str) -> Option<String> {
        let state = self.state();
        let p = state.published.get(group)?;
        p.generations
            .all()
            .filter(|g| g.name == name)
            .last()
            .map(|g| g.checksum.clone())
    }

    /// Starts keeping a workload running.
    pub fn add_workload(&self, workload: Workload) {
        self.state().workloads.push((workload, 0, None));
    }

    /// The node goes dark (no heartbeats, no agent) or comes back.
    ///
    /// # Errors
    /// When the node is not in the fleet.
    pub fn set_dark(&self, node: &str, dark: bool) -> Result<(), FleetError> {
        let mut state = self.state();
        let n = state
            .nodes
            .get_mut(node)
            .ok_or_else(|| FleetError::UnknownNode(node.to_owned()))?;
        n.dark = dark;
        Ok(())
    }

    /// Names of the fleet's nodes whose Node object still exists, by group.
    pub fn nodes(&self) -> BTreeMap<String, Vec<String>> {
        let state = self.state();
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in state.nodes.values() {
            out.entry(n.spec.group.clone())
                .or_default()
                .push(n.spec.name.clone());
        }
        out
    }

    /// The fleet's timings.
    pub fn config(&self) -> &FleetConfig {
        &self.config
    }
}

fn ready_condition(status: &str, now: SystemTime) -> Value {
    let (reason, message) = match status {
        "True" => ("KubeletReady", "kubelet is posting ready status"),
        "False" => (
            "KubeletNotReady",
            "the node agent is restarting the kubelet",
        ),
        _ => ("NodeStatusUnknown", "Kubelet stopped posting node status."),
    };
    json!({
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": rfc3339(now),
        "lastTransitionTime": rfc3339(now),
    })
}

fn tick(
    emulator: &Emulator,
    config: &FleetConfig,
    state: &mut State,
    now: SystemTime,
    out: &mut Vec<FleetEvent>,
) {
    let names: Vec<String> = state.nodes.keys().cloned().collect();
    for name in names {
        let Some(object) = emulator.get("v1", "Node", "", &name) else {
            // Deleted (fenced, scaled down): the machine is gone too.
            state.nodes.remove(&name);
            out.push(FleetEvent {
                node: name,
                message: "Node object deleted: the machine leaves the fleet".into(),
            });
            continue;
        };
        let Some(n) = state.nodes.get_mut(&name) else {
            continue;
        };
        let published = state.published.get(&n.spec.group);
        if n.dark {
            if now
                .duration_since(n.last_heartbeat)
                .is_ok_and(|age| age > config.grace)
                && n.reported_ready != Some("Unknown")
            {
                set_ready(emulator, n, "Unknown", now);
                out.push(FleetEvent {
                    node: name.clone(),
                    message: format!(
                        "no heartbeat for {}s: Ready=Unknown (node lifecycle)",
                        config.grace.as_secs()
                    ),
                });
            }
            continue;
        }
        let mut say = |message: String| {
            out.push(FleetEvent {
                node: name.clone(),
                message,
            });
        };
        n.agent
            .tick(emulator, config, &name, &object, published, now, &mut say);
        // kubelet: Lease and Ready.
        let restarting = n.agent.restarting(now);
        let want = if restarting { "False" } else { "True" };
        let due = n
            .last_status
            .is_none_or(|t| now.duration_since(t).is_ok_and(|d| d >= config.heartbeat));
        if due || n.reported_ready != Some(want) {
            let _ = emulator.merge_patch(
                "coordination.k8s.io/v1",
                "Lease",
                NODE_LEASE_NAMESPACE,
                &name,
                &json!({"spec": {"renewTime": micro_time(now)}}),
                false,
            );
            n.last_heartbeat = now;
            if n.reported_ready != Some(want) {
                out.push(FleetEvent {
                    node: name.clone(),
                    message: format!("Ready={want}"),
                });
            }
            set_ready(emulator, n, want, now);
        }
    }
    keep_workloads(emulator, config, state, now, out);
}

fn set_ready(emulator: &Emulator, n: &mut NodeState, status: &'static str, now: SystemTime) {
    let mut condition = ready_condition(status, now);
    if n.reported_ready == Some(status) {
        // Only the heartbeat moves; the transition time stays.
        if let Some(prev) = emulator.get("v1", "Node", "", &n.spec.name).and_then(|o| {
            o.pointer("/status/conditions/0/lastTransitionTime")
                .cloned()
        }) {
            condition["lastTransitionTime"] = prev;
        }
    }
    if emulator
        .merge_patch(
            "v1",
            "Node",
            "",
            &n.spec.name,
            &json!({"status": {"conditions": [condition]}}),
            true,
        )
        .is_ok()
    {
        n.reported_ready = Some(status);
        n.last_status = Some(now);
    }
}

fn keep_workloads(
    emulator: &Emulator,
    config: &FleetConfig,
    state: &mut State,
    now: SystemTime,
    out: &mut Vec<FleetEvent>,
) {
    let pods = emulator.list("v1", "Pod", None);
    let nodes: Vec<Value> = emulator.list("v1", "Node", None);
    let ready_schedulable = |group: &str| -> Vec<String> {
        nodes
            .iter()
            .filter(|n| {
                n.pointer("/metadata/labels/node.deckhouse.io~1group")
                    .and_then(Value::as_str)
                    == Some(group)
                    && n.pointer("/spec/unschedulable").and_then(Value::as_bool) != Some(true)
                    && n.pointer("/status/conditions/0/status")
                        .and_then(Value::as_str)
                        == Some("True")
            })
            .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect()
    };
    let on_node = |node: &str| {
        pods.iter()
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node))
            .count()
    };
    // A dark node carries the unreachable NoSchedule taint: no DaemonSet pod lands there.
    let node_names: Vec<String> = state
        .nodes
        .values()
        .filter(|n| !n.dark)
        .map(|n| n.spec.name.clone())
        .collect();
    for (workload, serial, missing_since) in &mut state.workloads {
        let mine: Vec<&Value> = pods
            .iter()
            .filter(|p| {
                p.pointer("/metadata/namespace").and_then(Value::as_str)
                    == Some(workload.namespace.as_str())
                    && p.pointer("/metadata/labels")
                        .and_then(|l| l.get(WORKLOAD_LABEL))
                        .and_then(Value::as_str)
                        == Some(workload.name.as_str())
                    && p.pointer("/metadata/deletionTimestamp").is_none()
            })
            .collect();
        let targets: Vec<String> = match workload.kind {
            WorkloadKind::DaemonSet => node_names
                .iter()
                .filter(|n| {
                    !mine
                        .iter()
                        .any(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(n))
                })
                .cloned()
                .collect(),
            WorkloadKind::Deployment => {
                let missing = workload.replicas.saturating_sub(mine.len());
                if missing == 0 {
                    *missing_since = None;
                    continue;
                }
                let since = *missing_since.get_or_insert(now);
                if now.duration_since(since).unwrap_or_default() < config.reschedule {
                    continue;
                }
                let mut candidates = ready_schedulable(&workload.group);
                candidates.sort_by_key(|n| (on_node(n), n.clone()));
                candidates.into_iter().cycle().take(missing).collect()
            }
        };
        for node in targets {
            let name = format!("{}-{}", workload.name, serial);
            *serial += 1;
            let (owner_kind, owner_api) = match workload.kind {
                WorkloadKind::Deployment => ("ReplicaSet", "apps/v1"),
                WorkloadKind::DaemonSet => ("DaemonSet", "apps/v1"),
            };
            let mut labels = workload.labels.clone();
            labels.insert(WORKLOAD_LABEL.into(), workload.name.clone());
            let seeded = emulator.seed(json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": workload.namespace,
                    "labels": labels,
                    "ownerReferences": [{
                        "apiVersion": owner_api,
                        "kind": owner_kind,
                        "name": workload.name,
                        "uid": format!("fleet-{}", workload.name),
                        "controller": true,
                    }],
                },
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "main", "image": "registry.invalid/app:1"}],
                },
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }));
            if seeded.is_ok() {
                out.push(FleetEvent {
                    node: node.clone(),
                    message: format!("pod {}/{name} started", workload.namespace),
                });
            }
            *missing_since = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_formats_utc_with_six_digits() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_767_571_200_123_456);
        assert_eq!(micro_time(t), "2026-01-05T00:00:00.123456Z");
        assert_eq!(rfc3339(t), "2026-01-05T00:00:00Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_825_600); // 2000-02-29T12:00
        assert_eq!(rfc3339(leap), "2000-02-29T12:00:00Z");
    }
}
