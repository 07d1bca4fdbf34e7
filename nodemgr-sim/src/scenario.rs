//! Scenarios: what a simulation starts from and what happens during it, read from YAML
//! ([`Scenario::from_yaml`]). The format is documented key by key in the crate's README.md;
//! every key is camelCase, durations are Go-style strings (`30s`, `5m`, `1h30m`) or integer
//! seconds, and unknown keys are errors (a typo never silently does nothing).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nodemgr_core::model::{NodeGroupSpec, NodeType, Timestamp, parse_duration};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod scaling_spec;

pub(crate) use scaling_spec::default_class_kind_of;
pub use scaling_spec::{
    ClassSpec, PodConstraints, ScaleWorkloadSpec, ScalingSpec, ZoneSpread, check_scale_workload,
};

/// What is wrong with a scenario; every variant names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// The text is not YAML.
    #[error("the scenario is not valid YAML: {0}")]
    Yaml(String),
    /// A field has the wrong shape or an unknown key.
    #[error("{path}: {message}")]
    Field {
        /// Path of the field (`groups[0].nodes`).
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The fields parse but do not make sense together.
    #[error("{path}: {message}")]
    Invalid {
        /// Path of the field.
        path: String,
        /// What is wrong and what to do.
        message: String,
    },
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

/// A duration read as a Go-style string (`30s`, `5m`, `1h30m`, `250ms`) or integer seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize)]
pub struct SimDuration(pub Duration);

impl SimDuration {
    /// `secs` seconds.
    pub const fn secs(secs: u64) -> Self {
        Self(Duration::from_secs(secs))
    }
}

impl<'de> Deserialize<'de> for SimDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)
            .map_err(|_| de::Error::custom("expected a duration like 30s, 5m, 1h30m or seconds"))?
        {
            Raw::Secs(s) => Ok(Self(Duration::from_secs(s))),
            Raw::Text(t) => parse_duration(t.trim()).map(Self).ok_or_else(|| {
                de::Error::custom(format!(
                    "`{t}` is not a duration; write it like 30s, 5m, 1h30m or 250ms"
                ))
            }),
        }
    }
}

/// The simulation's start time, UTC: `2026-01-05T22:00:00Z` or seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct StartTime(pub i64);

impl<'de> Deserialize<'de> for StartTime {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Secs(i64),
            Text(String),
        }
        match Raw::deserialize(deserializer).map_err(|_| {
            de::Error::custom("expected a UTC time like 2026-01-05T22:00:00Z or epoch seconds")
        })? {
            Raw::Secs(s) => Ok(Self(s)),
            Raw::Text(t) => parse_rfc3339_utc(&t).map(Self).ok_or_else(|| {
                de::Error::custom(format!(
                    "`{t}` is not a UTC time; write it like 2026-01-05T22:00:00Z"
                ))
            }),
        }
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (or `…:SS+00:00`; the seconds may be left out) into seconds
/// since the epoch. Only UTC is accepted; the calendar is the core's
/// ([`nodemgr_core::model::Timestamp::parse_rfc3339`]).
fn parse_rfc3339_utc(text: &str) -> Option<i64> {
    let body = text
        .strip_suffix('Z')
        .or_else(|| text.strip_suffix("+00:00"))?;
    let (_, time) = body.split_once('T')?;
    let full = if time.matches(':').count() == 1 {
        format!("{body}:00Z")
    } else {
        format!("{body}Z")
    };
    nodemgr_core::model::Timestamp::parse_rfc3339(&full)
        .map(nodemgr_core::model::Timestamp::as_secs)
}

/// The simulated node agent (bashible): how it applies an approved update.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentSpec {
    /// Time from approval (or disruption approval) to the update being applied. Default 20 s.
    pub delay: SimDuration,
    /// Extra random delay per update, uniform in `0..=jitter` (from the seed). Default 0.
    pub jitter: SimDuration,
    /// How long a node is NotReady while its kubelet restarts. Default 5 s.
    pub kubelet_restart: SimDuration,
    /// How long a node is NotReady while it reboots for a disruptive update. Default 60 s.
    pub reboot: SimDuration,
    /// How long the agent takes to notice a new desired checksum or an annotation. Default 1 s.
    pub reaction: SimDuration,
}

impl Default for AgentSpec {
    fn default() -> Self {
        Self {
            delay: SimDuration::secs(20),
            jitter: SimDuration::secs(0),
            kubelet_restart: SimDuration::secs(5),
            reboot: SimDuration::secs(60),
            reaction: SimDuration::secs(1),
        }
    }
}

/// Node heartbeats (Leases in `kube-node-lease`) and readiness.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HeartbeatSpec {
    /// How often a live node renews its Lease. Default 10 s.
    pub lease_period: SimDuration,
    /// A node whose last heartbeat is older than this is reported not Ready (the node lifecycle
    /// controller's `node-monitor-grace-period`, 50 s since Kubernetes 1.32).
    pub grace_period: SimDuration,
}

impl Default for HeartbeatSpec {
    fn default() -> Self {
        Self {
            lease_period: SimDuration::secs(10),
            grace_period: SimDuration::secs(50),
        }
    }
}

/// A node group and its nodes.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupSpec {
    /// The NodeGroup's name; its nodes are `<name>-0`, `<name>-1`, ….
    pub name: String,
    /// How many nodes it starts with.
    pub nodes: usize,
    /// Zones, assigned to nodes round-robin. Default `[zone-a]`.
    #[serde(default = "default_zones")]
    pub zones: Vec<String>,
    /// The NodeGroup `spec` with Deckhouse's field names (`nodeType`, `disruptions`,
    /// `update.maxConcurrent`, `nodeDrainTimeoutSecond`, `fencing`, …). `nodeType` defaults
    /// to `CloudEphemeral`.
    #[serde(default)]
    pub spec: Value,
    /// Allocatable resources of each node. Default `cpu: 4, memory: 16Gi, pods: 110`.
    #[serde(default = "default_capacity")]
    pub capacity: BTreeMap<String, String>,
    /// Extra labels on each node.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

fn default_zones() -> Vec<String> {
    vec!["zone-a".into()]
}

fn default_capacity() -> BTreeMap<String, String> {
    [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Who owns a workload's pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum WorkloadKind {
    /// Pods owned by a ReplicaSet: a deleted pod comes back under a new name.
    Deployment,
    /// Pods owned by a StatefulSet: a deleted pod comes back under the same name.
    StatefulSet,
    /// One pod per node of the group, never evicted by a drain.
    DaemonSet,
    /// A static pod's mirror on each node of the group, never evicted by a drain.
    Static,
    /// Pods without an owner: once gone, gone.
    Bare,
}

impl WorkloadKind {
    /// The owner kind its pods carry (`None` for bare pods).
    pub fn owner_kind(self) -> Option<&'static str> {
        match self {
            Self::Deployment => Some("ReplicaSet"),
            Self::StatefulSet => Some("StatefulSet"),
            Self::DaemonSet => Some("DaemonSet"),
            Self::Static => Some("Node"),
            Self::Bare => None,
        }
    }

    /// Whether the pods run once per node.
    pub fn per_node(self) -> bool {
        matches!(self, Self::DaemonSet | Self::Static)
    }
}

/// A set of pods.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Name; pods are `<name>-0`, `<name>-1`, ….
    pub name: String,
    /// Namespace. Default `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Owner kind. Default `Deployment`.
    #[serde(default = "default_kind")]
    pub kind: WorkloadKind,
    /// Pod count (ignored for `DaemonSet` and `Static`). Default 1.
    #[serde(default = "one")]
    pub replicas: usize,
    /// The group whose nodes run the pods; default: any group.
    #[serde(default)]
    pub group: Option<String>,
    /// Pod priority. Default 0.
    #[serde(default)]
    pub priority: i32,
    /// Resource requests (`cpu: 100m`).
    #[serde(default)]
    pub requests: BTreeMap<String, String>,
    /// Pod labels. Default `app: <name>`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How long an evicted pod takes to terminate. Default 0 s.
    #[serde(default)]
    pub termination_grace_period: SimDuration,
}

fn default_namespace() -> String {
    "default".into()
}

fn default_kind() -> WorkloadKind {
    WorkloadKind::Deployment
}

fn one() -> usize {
    1
}

/// A PodDisruptionBudget; exactly one of `minAvailable`, `maxUnavailable`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PdbSpec {
    /// Name.
    pub name: String,
    /// Namespace. Default `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// `matchLabels` of the pods covered.
    pub selector: BTreeMap<String, String>,
    /// At least this many covered pods must stay Running.
    #[serde(default)]
    pub min_available: Option<u32>,
    /// At most this many covered pods may be missing.
    #[serde(default)]
    pub max_unavailable: Option<u32>,
}

/// What a configuration change does to the nodes: core's one impact kind, re-exported for
/// scenario code (`impact: none | kubelet-restart | disruptive`).
pub use nodemgr_core::ImpactKind;

/// A new configuration for a group: a new desired checksum every node must reach.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChangeSpec {
    /// The group.
    pub group: String,
    /// A JSON merge patch onto the group's `spec`; its impact comes from the impact matrix
    /// (`nodemgr-core::impact`) unless `impact` says otherwise.
    #[serde(default)]
    pub spec: Option<Value>,
    /// The impact, for changes outside the NodeGroup (a kernel update, a
    /// NodeGroupConfiguration script). Overrides the one computed from `spec`.
    #[serde(default)]
    pub impact: Option<ImpactKind>,
    /// What changed, for the timeline.
    #[serde(default)]
    pub description: Option<String>,
}

/// Which nodes an event is about: one node, a list, or the first `count` nodes of a zone (in
/// name order).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelection {
    /// One node.
    #[serde(default)]
    pub node: Option<String>,
    /// Several nodes.
    #[serde(default)]
    pub nodes: Vec<String>,
    /// A zone (with `count`).
    #[serde(default)]
    pub zone: Option<String>,
    /// How many nodes of `zone`; default all of them.
    #[serde(default)]
    pub count: Option<usize>,
    /// How long the condition lasts; default until the end.
    #[serde(default, rename = "for")]
    pub duration: Option<SimDuration>,
}

/// The operator approves disruptions by hand (`Manual` mode).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApproveSpec {
    /// One node; or
    #[serde(default)]
    pub node: Option<String>,
    /// every node of the group that asks for a disruption at that time.
    #[serde(default)]
    pub group: Option<String>,
}

/// Evictions of some pods are refused (HTTP 429) regardless of PodDisruptionBudgets.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefuseEvictionsSpec {
    /// One pod, `namespace/name`; or
    #[serde(default)]
    pub pod: Option<String>,
    /// the pods whose labels match all of these.
    #[serde(default)]
    pub selector: BTreeMap<String, String>,
    /// How long; default until the end.
    #[serde(default, rename = "for")]
    pub duration: Option<SimDuration>,
}

/// An API operation the simulator can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    /// Every list call.
    List,
    /// Node patches, cordon, uncordon.
    Patch,
    /// Evictions.
    Evict,
    /// Pod and node deletions.
    Delete,
    /// Events.
    Event,
}

/// The kind of API error injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum ErrorKind {
    /// 5xx / timeouts.
    Unavailable,
    /// 429 (throttling).
    TooManyRequests,
    /// 409.
    Conflict,
    /// Anything else.
    Other,
}

/// The API fails some operations for a while.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiErrorsSpec {
    /// How long.
    #[serde(rename = "for")]
    pub duration: SimDuration,
    /// Which operations; default all.
    #[serde(default)]
    pub operations: Vec<Operation>,
    /// Which error. Default `Unavailable`.
    #[serde(default = "default_error")]
    pub error: ErrorKind,
}

fn default_error() -> ErrorKind {
    ErrorKind::Unavailable
}

/// The controllers' watch of Nodes lags behind the cluster for a while: their cached reads
/// show the nodes as they were `lag` earlier ([`crate::api`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WatchLagSpec {
    /// How long.
    #[serde(rename = "for")]
    pub duration: SimDuration,
    /// How far behind.
    pub lag: SimDuration,
}

/// Every controller restarts (a crash, a new leader): what it kept in memory is lost and
/// rebuilt from the cluster, and its clock reads `clockSkew` off the world's from now on (a
/// replica on another machine).
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestartSpec {
    /// The restarted controllers' clock offset. Default none.
    #[serde(default)]
    pub clock_skew: ClockOffset,
}

/// A signed clock offset: `+30s` (or `30s`) ahead of the world's clock, `-30s` behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ClockOffset(pub i64);

impl ClockOffset {
    /// The offset in milliseconds (positive: ahead).
    pub fn millis(self) -> i64 {
        self.0
    }

    /// `t` as a clock with this offset reads it.
    pub fn apply(self, t: Timestamp) -> Timestamp {
        Timestamp(t.0.saturating_add(self.0))
    }

    /// The world's time at which a clock with this offset reads `t`.
    pub fn unapply(self, t: Timestamp) -> Timestamp {
        Timestamp(t.0.saturating_sub(self.0))
    }
}

impl<'de> Deserialize<'de> for ClockOffset {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        let text = text.trim();
        let (sign, rest) = match text.strip_prefix('-') {
            Some(rest) => (-1, rest),
            None => (1, text.strip_prefix('+').unwrap_or(text)),
        };
        parse_duration(rest)
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .map(|ms| Self(sign * ms))
            .ok_or_else(|| {
                de::Error::custom(format!(
                    "`{text}` is not a clock offset; write it like +30s, -2m or 0s"
                ))
            })
    }
}

/// A node's agent gets slower.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlowAgentSpec {
    /// The node.
    pub node: String,
    /// Added to every later update's apply delay on that node.
    pub extra_delay: SimDuration,
}

/// One scripted event: `at` plus exactly one action key.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventSpec {
    /// When, from the start.
    pub at: SimDuration,
    /// A new configuration for a group.
    #[serde(default)]
    pub change: Option<ChangeSpec>,
    /// The operator approves disruptions.
    #[serde(default)]
    pub approve_disruption: Option<ApproveSpec>,
    /// Nodes report `Ready=False` (kubelet up, heartbeats continue).
    #[serde(default)]
    pub node_not_ready: Option<NodeSelection>,
    /// Nodes go dark: no heartbeats, unreachable (powered off or partitioned).
    #[serde(default)]
    pub node_dark: Option<NodeSelection>,
    /// Evictions are refused.
    #[serde(default)]
    pub refuse_evictions: Option<RefuseEvictionsSpec>,
    /// API errors.
    #[serde(default)]
    pub api_errors: Option<ApiErrorsSpec>,
    /// A slow agent.
    #[serde(default)]
    pub slow_agent: Option<SlowAgentSpec>,
    /// A workload's replica count changes (scaling scenarios).
    #[serde(default)]
    pub scale_workload: Option<ScaleWorkloadSpec>,
    /// The controllers' watch of Nodes lags.
    #[serde(default)]
    pub watch_lag: Option<WatchLagSpec>,
    /// The controllers restart.
    #[serde(default)]
    pub restart_controllers: Option<RestartSpec>,
}

impl EventSpec {
    fn actions(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        if self.change.is_some() {
            set.push("change");
        }
        if self.approve_disruption.is_some() {
            set.push("approveDisruption");
        }
        if self.node_not_ready.is_some() {
            set.push("nodeNotReady");
        }
        if self.node_dark.is_some() {
            set.push("nodeDark");
        }
        if self.refuse_evictions.is_some() {
            set.push("refuseEvictions");
        }
        if self.api_errors.is_some() {
            set.push("apiErrors");
        }
        if self.slow_agent.is_some() {
            set.push("slowAgent");
        }
        if self.scale_workload.is_some() {
            set.push("scaleWorkload");
        }
        if self.watch_lag.is_some() {
            set.push("watchLag");
        }
        if self.restart_controllers.is_some() {
            set.push("restartControllers");
        }
        set
    }
}

/// The fencing controller (`nodemgr-core::fencing`), for groups whose spec has `fencing`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FencingSpec {
    /// Share of a zone's fenced nodes silent together above which nobody there is fenced.
    /// Default 0.55.
    pub storm_threshold: f64,
    /// Fewest silent nodes for the storm guard to apply. Default 3.
    pub storm_min_silent: usize,
    /// How often the controller runs. Default 5 s.
    pub period: SimDuration,
}

impl Default for FencingSpec {
    fn default() -> Self {
        let core = nodemgr_core::fencing::FencingConfig::default();
        Self {
            storm_threshold: core.storm_threshold,
            storm_min_silent: core.storm_min_silent,
            period: SimDuration::secs(5),
        }
    }
}

/// The node-lifecycle eviction policy (`nodemgr-core::lifecycle`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LifecycleSpec {
    /// Nodes per second evicted in a healthy zone. Default 0.1.
    pub node_eviction_rate: f64,
    /// Nodes per second in a partially disrupted zone of a large cluster. Default 0.01.
    pub secondary_node_eviction_rate: f64,
    /// Clusters up to this size stop evicting in partial disruption. Default 50.
    pub large_cluster_size_threshold: usize,
    /// Share of unhealthy nodes that makes a zone partially disrupted. Default 0.55.
    pub unhealthy_zone_threshold: f64,
    /// Time from a node turning unhealthy to the eviction of its pods. Default 5 min.
    pub pod_eviction_timeout: SimDuration,
    /// How often the controller runs. Default 5 s.
    pub period: SimDuration,
}

impl Default for LifecycleSpec {
    fn default() -> Self {
        let core = nodemgr_core::lifecycle::LifecycleConfig::default();
        Self {
            node_eviction_rate: core.node_eviction_rate,
            secondary_node_eviction_rate: core.secondary_node_eviction_rate,
            large_cluster_size_threshold: core.large_cluster_size_threshold,
            unhealthy_zone_threshold: core.unhealthy_zone_threshold,
            pod_eviction_timeout: SimDuration(core.pod_eviction_timeout),
            period: SimDuration::secs(5),
        }
    }
}

/// A whole scenario (see the README for every key).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// A short name.
    #[serde(default)]
    pub name: String,
    /// What the scenario shows.
    #[serde(default)]
    pub description: String,
    /// Virtual start time (UTC). Default `2026-01-05T00:00:00Z` (a Monday).
    #[serde(default = "default_start")]
    pub start: StartTime,
    /// How long to simulate.
    pub duration: SimDuration,
    /// How often the update executor runs (it also runs at its drains' deadlines). Default 10 s.
    #[serde(default = "default_period")]
    pub reconcile_period: SimDuration,
    /// Delay before a deleted Deployment/StatefulSet pod comes back on another node. Default 5 s.
    #[serde(default = "default_reschedule")]
    pub reschedule_delay: SimDuration,
    /// Time to provision a replacement machine (`RollingUpdate`). Default 2 min.
    #[serde(default = "default_provision")]
    pub provision_delay: SimDuration,
    /// The node agent.
    #[serde(default)]
    pub agent: AgentSpec,
    /// Heartbeats and readiness.
    #[serde(default)]
    pub heartbeat: HeartbeatSpec,
    /// Node groups.
    pub groups: Vec<GroupSpec>,
    /// Workloads.
    #[serde(default)]
    pub workloads: Vec<WorkloadSpec>,
    /// PodDisruptionBudgets.
    #[serde(default)]
    pub pdbs: Vec<PdbSpec>,
    /// Scripted events.
    #[serde(default)]
    pub events: Vec<EventSpec>,
    /// Run the fencing controller (on groups whose spec enables fencing).
    #[serde(default)]
    pub fencing: Option<FencingSpec>,
    /// Run the node-lifecycle eviction controller.
    #[serde(default)]
    pub lifecycle: Option<LifecycleSpec>,
    /// Run the update executor. Default true.
    #[serde(default = "yes")]
    pub updates: bool,
    /// Run the scaling controller (the `scaling` module) on the CloudEphemeral groups.
    #[serde(default)]
    pub scaling: Option<ScalingSpec>,
}

fn yes() -> bool {
    true
}

fn default_start() -> StartTime {
    // 2026-01-05T00:00:00Z, a Monday.
    StartTime(1_767_571_200)
}

fn default_period() -> SimDuration {
    SimDuration::secs(10)
}

fn default_reschedule() -> SimDuration {
    SimDuration::secs(5)
}

fn default_provision() -> SimDuration {
    SimDuration::secs(120)
}

/// Parses a group's `spec` into the core's NodeGroupSpec (nodeType defaults to CloudEphemeral).
pub(crate) fn group_spec(value: &Value, path: &str) -> Result<NodeGroupSpec, ScenarioError> {
    let value = if value.is_null() {
        Value::Object(serde_json::Map::new())
    } else {
        value.clone()
    };
    let mut spec: NodeGroupSpec =
        serde_path_to_error::deserialize(value).map_err(|e| ScenarioError::Field {
            path: format!("{path}.{}", e.path()),
            message: e.into_inner().to_string(),
        })?;
    if spec.node_type.is_none() {
        spec.node_type = Some(NodeType::CloudEphemeral);
    }
    Ok(spec)
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

impl Scenario {
    /// Reads and checks a scenario.
    ///
    /// # Errors
    /// [`ScenarioError`] naming the field: not YAML, a wrong type or unknown key, or values
    /// that do not fit together (an event naming a node that does not exist, a PDB with both
    /// `minAvailable` and `maxUnavailable`, …).
    pub fn from_yaml(text: &str) -> Result<Self, ScenarioError> {
        let value: Value =
            serde_saphyr::from_str(text).map_err(|e| ScenarioError::Yaml(e.to_string()))?;
        if !value.is_object() {
            return Err(ScenarioError::Yaml(
                "a scenario is a mapping with at least `duration` and `groups`".into(),
            ));
        }
        let scenario: Scenario =
            serde_path_to_error::deserialize(value).map_err(|e| ScenarioError::Field {
                path: e.path().to_string(),
                message: e.into_inner().to_string(),
            })?;
        scenario.check()?;
        Ok(scenario)
    }

    /// Names of the nodes the scenario starts with, by group.
    pub fn initial_node_names(&self) -> BTreeMap<String, Vec<String>> {
        self.groups
            .iter()
            .map(|g| {
                (
                    g.name.clone(),
                    (0..g.nodes).map(|i| format!("{}-{i}", g.name)).collect(),
                )
            })
            .collect()
    }

    fn check(&self) -> Result<(), ScenarioError> {
        if self.groups.is_empty() {
            return Err(invalid("groups", "at least one group is needed"));
        }
        if self.duration.0.is_zero() {
            return Err(invalid("duration", "must be longer than 0s"));
        }
        if self.reconcile_period.0 < Duration::from_millis(100) {
            return Err(invalid("reconcilePeriod", "must be at least 100ms"));
        }
        if self.heartbeat.lease_period.0.is_zero() {
            return Err(invalid("heartbeat.leasePeriod", "must be longer than 0s"));
        }
        let mut group_names = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        let mut zones = BTreeSet::new();
        for (i, g) in self.groups.iter().enumerate() {
            let path = format!("groups[{i}]");
            if g.name.is_empty()
                || !g
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-')
            {
                return Err(invalid(
                    format!("{path}.name"),
                    format!(
                        "`{}` is not a valid group name (letters, digits, -)",
                        g.name
                    ),
                ));
            }
            if !group_names.insert(g.name.as_str()) {
                return Err(invalid(
                    format!("{path}.name"),
                    format!("group `{}` is defined twice", g.name),
                ));
            }
            if g.zones.is_empty() {
                return Err(invalid(format!("{path}.zones"), "give at least one zone"));
            }
            zones.extend(g.zones.iter().cloned());
            group_spec(&g.spec, &format!("{path}.spec"))?;
            for (k, v) in &g.capacity {
                nodemgr_core::model::Quantity::parse(v)
                    .map_err(|e| invalid(format!("{path}.capacity.{k}"), format!("`{v}`: {e}")))?;
            }
            nodes.extend((0..g.nodes).map(|n| format!("{}-{n}", g.name)));
        }
        for (i, w) in self.workloads.iter().enumerate() {
            let path = format!("workloads[{i}]");
            if let Some(group) = &w.group
                && !group_names.contains(group.as_str())
            {
                return Err(invalid(
                    format!("{path}.group"),
                    format!("no group named `{group}`"),
                ));
            }
            for (k, v) in &w.requests {
                nodemgr_core::model::Quantity::parse(v)
                    .map_err(|e| invalid(format!("{path}.requests.{k}"), format!("`{v}`: {e}")))?;
            }
        }
        for (i, p) in self.pdbs.iter().enumerate() {
            if p.min_available.is_some() == p.max_unavailable.is_some() {
                return Err(invalid(
                    format!("pdbs[{i}]"),
                    "give exactly one of minAvailable and maxUnavailable",
                ));
            }
            if p.selector.is_empty() {
                return Err(invalid(
                    format!("pdbs[{i}].selector"),
                    "an empty selector would cover every pod of the namespace; name labels",
                ));
            }
        }
        let check_node = |path: String, node: &str| {
            if nodes.contains(node) {
                Ok(())
            } else {
                Err(invalid(
                    path,
                    format!("no node named `{node}` (nodes are <group>-0, <group>-1, …)"),
                ))
            }
        };
        let check_group = |path: String, group: &str| {
            if group_names.contains(group) {
                Ok(())
            } else {
                Err(invalid(path, format!("no group named `{group}`")))
            }
        };
        for (i, e) in self.events.iter().enumerate() {
            let path = format!("events[{i}]");
            let actions = e.actions();
            if actions.len() != 1 {
                return Err(invalid(
                    path,
                    format!(
                        "an event has `at` and exactly one action (change, approveDisruption, \
                         nodeNotReady, nodeDark, refuseEvictions, apiErrors, slowAgent, scaleWorkload, \
                         watchLag, restartControllers); found {}",
                        if actions.is_empty() {
                            "none".to_owned()
                        } else {
                            actions.join(", ")
                        }
                    ),
                ));
            }
            if let Some(c) = &e.change {
                check_group(format!("{path}.change.group"), &c.group)?;
                if c.spec.is_none() && c.impact.is_none() {
                    return Err(invalid(
                        format!("{path}.change"),
                        "give `spec` (a patch of the group's spec) or `impact` \
                         (none, kubelet-restart, disruptive)",
                    ));
                }
                if let Some(patch) = &c.spec {
                    let gi = self
                        .groups
                        .iter()
                        .position(|g| g.name == c.group)
                        .unwrap_or_default();
                    let mut spec = self.groups[gi].spec.clone();
                    if spec.is_null() {
                        spec = Value::Object(serde_json::Map::new());
                    }
                    merge_patch(&mut spec, patch);
                    group_spec(&spec, &format!("{path}.change.spec"))?;
                }
            }
            if let Some(a) = &e.approve_disruption {
                match (&a.node, &a.group) {
                    (Some(n), None) => check_node(format!("{path}.approveDisruption.node"), n)?,
                    (None, Some(g)) => check_group(format!("{path}.approveDisruption.group"), g)?,
                    _ => {
                        return Err(invalid(
                            format!("{path}.approveDisruption"),
                            "give exactly one of `node` and `group`",
                        ));
                    }
                }
            }
            for (key, sel) in [
                ("nodeNotReady", &e.node_not_ready),
                ("nodeDark", &e.node_dark),
            ] {
                let Some(sel) = sel else { continue };
                let p = format!("{path}.{key}");
                let given = usize::from(sel.node.is_some())
                    + usize::from(!sel.nodes.is_empty())
                    + usize::from(sel.zone.is_some());
                if given != 1 {
                    return Err(invalid(p, "give exactly one of `node`, `nodes` and `zone`"));
                }
                if let Some(n) = &sel.node {
                    check_node(format!("{p}.node"), n)?;
                }
                for (j, n) in sel.nodes.iter().enumerate() {
                    check_node(format!("{p}.nodes[{j}]"), n)?;
                }
                if let Some(z) = &sel.zone
                    && !zones.contains(z)
                {
                    return Err(invalid(format!("{p}.zone"), format!("no zone named `{z}`")));
                }
            }
            if let Some(r) = &e.refuse_evictions
                && r.pod.is_none() == r.selector.is_empty()
            {
                return Err(invalid(
                    format!("{path}.refuseEvictions"),
                    "give exactly one of `pod` (namespace/name) and `selector`",
                ));
            }
            if let Some(s) = &e.slow_agent {
                check_node(format!("{path}.slowAgent.node"), &s.node)?;
            }
            if let Some(s) = &e.scale_workload {
                check_scale_workload(self, s, &format!("{path}.scaleWorkload"))?;
            }
        }
        if let Some(s) = &self.scaling {
            s.check(self)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "duration: 1h\ngroups:\n  - name: w\n    nodes: 2\n";

    #[test]
    fn minimal_scenario_gets_defaults() {
        let s = Scenario::from_yaml(MINIMAL).unwrap();
        assert_eq!(s.duration, SimDuration::secs(3600));
        assert_eq!(s.reconcile_period, SimDuration::secs(10));
        assert_eq!(s.agent.reboot, SimDuration::secs(60));
        assert_eq!(s.groups[0].zones, vec!["zone-a"]);
        assert!(s.updates);
        assert_eq!(s.initial_node_names()["w"], vec!["w-0", "w-1"]);
    }

    #[test]
    fn errors_name_the_field() {
        let err = |text: &str| Scenario::from_yaml(text).unwrap_err().to_string();
        assert!(err("duration: soon\ngroups: []\n").starts_with("duration:"));
        assert!(err("duration: 1h\ngroups:\n  - name: w\n    nodse: 2\n").contains("nodse"));
        assert!(err(&format!("{MINIMAL}events:\n  - at: 1m\n")).contains("events[0]"));
        assert!(
            err(&format!(
                "{MINIMAL}events:\n  - at: 1m\n    nodeDark: {{node: w-9}}\n"
            ))
            .contains("events[0].nodeDark.node: no node named `w-9`")
        );
        assert!(
            err(&format!(
                "{MINIMAL}pdbs:\n  - name: p\n    selector: {{app: x}}\n"
            ))
            .contains("pdbs[0]")
        );
        assert!(
            err("duration: 1h\ngroups:\n  - name: w\n    nodes: 1\n    spec: {update: {maxConcurrent: [1]}}\n")
                .contains("groups[0].spec.update.maxConcurrent")
        );
        assert!(err("- just\n- a list\n").contains("mapping"));
        assert!(err("duration: 1h\n  bad: indent: here\n").contains("YAML"));
    }

    #[test]
    fn times_parse() {
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_utc("2026-01-05T00:00:00Z"),
            Some(1_767_571_200)
        );
        assert_eq!(parse_rfc3339_utc("2026-01-05"), None);
        let s = Scenario::from_yaml(&format!("{MINIMAL}start: 2026-01-05T22:30:00Z\n")).unwrap();
        assert_eq!(s.start.0, 1_767_571_200 + 22 * 3600 + 1800);
    }

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut v = serde_json::json!({"a": {"b": 1, "c": 2}, "d": 3});
        merge_patch(
            &mut v,
            &serde_json::json!({"a": {"b": null, "e": 4}, "d": 5}),
        );
        assert_eq!(v, serde_json::json!({"a": {"c": 2, "e": 4}, "d": 5}));
    }
}
