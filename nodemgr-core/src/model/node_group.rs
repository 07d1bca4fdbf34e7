//! `NodeGroup` (`deckhouse.io/v1`): the spec and status as Deckhouse defines them (docs/deckhouse.md §1),
//! with Deckhouse's camelCase field names and enum spellings. Every field is optional in the
//! Rust type so that a broken manifest still parses and `validate` can report all its errors.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::meta::{LabelSelector, ObjectMeta};
use super::spec_facts;
use crate::string_enum;

string_enum! {
    /// `spec.nodeType`: how the group's machines come to exist.
    pub enum NodeType {
        /// Machines created and scaled on demand by nodemgr.
        CloudEphemeral = "CloudEphemeral",
        /// Cloud machines created and updated by the installer, kept permanently.
        CloudPermanent = "CloudPermanent",
        /// Machines in the cloud created by something else.
        CloudStatic = "CloudStatic",
        /// Machines nodemgr does not create (bare metal, foreign VMs).
        Static = "Static",
    }
}

string_enum! {
    /// `spec.cri.type`.
    pub enum CriType {
        /// Docker (deprecated; rejected by validation).
        Docker = "Docker",
        /// containerd 1.x.
        Containerd = "Containerd",
        /// containerd 2.x.
        ContainerdV2 = "ContainerdV2",
        /// The CRI is installed and configured by someone else.
        NotManaged = "NotManaged",
    }
}

string_enum! {
    /// `spec.disruptions.approvalMode`.
    pub enum ApprovalMode {
        /// An operator approves every disruption by hand.
        Manual = "Manual",
        /// nodemgr approves disruptions (after a drain, inside windows).
        Automatic = "Automatic",
        /// The machine is replaced instead of disrupted (CloudEphemeral only).
        RollingUpdate = "RollingUpdate",
    }
}

string_enum! {
    /// `spec.chaos.mode`.
    pub enum ChaosMode {
        /// No chaos.
        Disabled = "Disabled",
        /// Drain and delete one random node of the group per period.
        DrainAndDelete = "DrainAndDelete",
    }
}

string_enum! {
    /// `spec.nodeTemplate.taints[].effect`.
    pub enum TaintEffect {
        /// New pods without a toleration are not scheduled.
        NoSchedule = "NoSchedule",
        /// The scheduler tries to avoid the node.
        PreferNoSchedule = "PreferNoSchedule",
        /// Running pods without a toleration are evicted.
        NoExecute = "NoExecute",
    }
}

string_enum! {
    /// Day names of disruption windows.
    pub enum Weekday {
        /// Monday.
        Mon = "Mon",
        /// Tuesday.
        Tue = "Tue",
        /// Wednesday.
        Wed = "Wed",
        /// Thursday.
        Thu = "Thu",
        /// Friday.
        Fri = "Fri",
        /// Saturday.
        Sat = "Sat",
        /// Sunday.
        Sun = "Sun",
    }
}

string_enum! {
    /// `spec.fencing.mode`.
    pub enum FencingMode {
        /// The node agent feeds a watchdog; the controller deletes pods and the node.
        Watchdog = "Watchdog",
        /// The controller only reports a silent node.
        Notify = "Notify",
    }
}

string_enum! {
    /// `spec.gpu.sharing` (Deckhouse EE).
    pub enum GpuSharing {
        /// Time slicing of one GPU between pods.
        TimeSlicing = "TimeSlicing",
        /// Multi-instance GPU partitions.
        Mig = "MIG",
        /// One pod per GPU.
        Exclusive = "Exclusive",
    }
}

string_enum! {
    /// `spec.kubelet.resourceReservation.mode`.
    pub enum ResourceReservationMode {
        /// Nothing reserved.
        Off = "Off",
        /// Reserved from the node's size.
        Auto = "Auto",
        /// Reserved as given in `static`.
        Static = "Static",
    }
}

string_enum! {
    /// `spec.kubelet.topologyManager.scope`.
    pub enum TopologyManagerScope {
        /// Per container.
        Container = "Container",
        /// Per pod.
        Pod = "Pod",
    }
}

string_enum! {
    /// `spec.kubelet.topologyManager.policy`.
    pub enum TopologyManagerPolicy {
        /// No alignment.
        None = "None",
        /// Prefer aligned resources.
        BestEffort = "BestEffort",
        /// Refuse pods that cannot be aligned.
        Restricted = "Restricted",
        /// All resources from one NUMA node.
        SingleNumaNode = "SingleNumaNode",
    }
}

string_enum! {
    /// `spec.kubelet.memorySwap.swapBehavior`.
    pub enum SwapBehavior {
        /// No swap for pods.
        NoSwap = "NoSwap",
        /// Swap limited to `limitedSwap.size`.
        LimitedSwap = "LimitedSwap",
    }
}

/// A value that is an integer or a string such as `"25%"` (`update.maxConcurrent`,
/// `cloudInstances.standby`). Kept as written; `validate` checks the pattern and
/// [`IntOrString::resolve`] turns it into a count.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum IntOrString {
    /// A plain integer.
    Int(i64),
    /// A string: digits, optionally followed by `%`.
    String(String),
}

/// Why an [`IntOrString`] could not be turned into a count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected a non-negative integer (at most 18446744073709551615) or a percentage such as \"25%\", got {0:?}"
)]
pub struct IntOrStringError(pub String);

/// What an [`IntOrString`] means once parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// An absolute count.
    Absolute(u64),
    /// A percentage of some total.
    Percent(u64),
}

impl IntOrString {
    /// Parses the value as an absolute count or a percentage.
    ///
    /// # Errors
    /// A negative integer, or a string that is not digits with an optional `%`.
    pub fn amount(&self) -> Result<Amount, IntOrStringError> {
        match self {
            Self::Int(n) => u64::try_from(*n)
                .map(Amount::Absolute)
                .map_err(|_| IntOrStringError(n.to_string())),
            Self::String(s) => {
                let (digits, percent) = match s.strip_suffix('%') {
                    Some(d) => (d, true),
                    None => (s.as_str(), false),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(IntOrStringError(s.clone()));
                }
                let n: u64 = digits.parse().map_err(|_| IntOrStringError(s.clone()))?;
                Ok(if percent {
                    Amount::Percent(n)
                } else {
                    Amount::Absolute(n)
                })
            }
        }
    }

    /// The count this value stands for out of `total`: an integer as is, a percentage as
    /// `floor(total × pct / 100)`, computed exactly (a result past `u64::MAX`, only possible
    /// for percentages far above 100, is `u64::MAX`: more than everything).
    ///
    /// # Errors
    /// As [`IntOrString::amount`].
    pub fn resolve(&self, total: u64) -> Result<u64, IntOrStringError> {
        Ok(match self.amount()? {
            Amount::Absolute(n) => n,
            Amount::Percent(p) => {
                let exact = u128::from(total) * u128::from(p) / 100;
                u64::try_from(exact).unwrap_or(u64::MAX)
            }
        })
    }
}

impl std::fmt::Display for IntOrString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Int(n) => write!(f, "{n}"),
            Self::String(s) => f.write_str(s),
        }
    }
}

/// A `NodeGroup`: a group of nodes of one type configured from one spec.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeGroup {
    /// Always `deckhouse.io/v1` once parsed (older versions are converted).
    #[serde(default)]
    pub api_version: String,
    /// Always `NodeGroup`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the group should be.
    #[serde(default)]
    pub spec: NodeGroupSpec,
    /// What the group is, as last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeGroupStatus>,
}

impl NodeGroup {
    /// The group's name (`metadata.name`), empty when missing.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// SHA-256 (hex) of the spec's JSON as nodemgr reads it: equal for equal specs whatever
    /// version they were written in (maps are ordered), so the status controller and
    /// bashible-apiserver name the same spec the same way in `status.deckhouse`.
    pub fn spec_checksum(&self) -> String {
        use sha2::{Digest, Sha256};
        let json = serde_json::to_vec(&self.spec).unwrap_or_default();
        Sha256::digest(&json)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// `NodeGroup.spec` (docs/deckhouse.md §1.1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupSpec {
    /// Type of the group's nodes. Required, immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_type: Option<NodeType>,
    /// How long a drain of this group's nodes waits, in seconds, before it deletes the pods
    /// that are left; unset or 0 means 300 (5 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_drain_timeout_second: Option<i64>,
    /// GPU sharing settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Gpu>,
    /// Container runtime settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri: Option<Cri>,
    /// Static machines taken from StaticInstances over SSH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub static_instances: Option<StaticInstances>,
    /// Cloud machines ordered on demand (CloudEphemeral only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_instances: Option<CloudInstances>,
    /// Labels, annotations and taints kept on every node of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,
    /// Chaos monkey settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chaos: Option<Chaos>,
    /// Operating system settings (deprecated, no effect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<OperatingSystem>,
    /// How disruptive updates are approved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruptions: Option<Disruptions>,
    /// kubelet settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<Kubelet>,
    /// How many nodes update at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
    /// Fencing of silent nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing: Option<Fencing>,
    /// Kubernetes version of the group's nodes (stored by `v1alpha1`/`v1alpha2` only; kept
    /// in every version because manifests in the wild carry it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Static node network settings (`v1alpha1` only; kept in every version).
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_: Option<StaticSettings>,
}

impl NodeGroupSpec {
    /// The effective approval mode (`Automatic` when unset).
    pub fn approval_mode(&self) -> ApprovalMode {
        self.disruptions
            .as_ref()
            .and_then(|d| d.approval_mode.clone())
            .unwrap_or_else(|| ApprovalMode::from_spelling(spec_facts::APPROVAL_MODE_DEFAULT))
    }

    /// Whether Automatic mode drains before approving (`true` when unset).
    pub fn drain_before_approval(&self) -> bool {
        self.disruptions
            .as_ref()
            .and_then(|d| d.automatic.as_ref())
            .and_then(|a| a.drain_before_approval)
            .unwrap_or(spec_facts::DRAIN_BEFORE_APPROVAL_DEFAULT)
    }

    /// `disruptions.automatic.windows` (none: always open).
    pub fn automatic_windows(&self) -> &[DisruptionWindow] {
        self.disruptions
            .as_ref()
            .and_then(|d| d.automatic.as_ref())
            .and_then(|a| a.windows.as_deref())
            .unwrap_or_default()
    }

    /// `disruptions.rollingUpdate.windows` (none: always open).
    pub fn rolling_update_windows(&self) -> &[DisruptionWindow] {
        self.disruptions
            .as_ref()
            .and_then(|d| d.rolling_update.as_ref())
            .and_then(|r| r.windows.as_deref())
            .unwrap_or_default()
    }

    /// The effective CRI type (`Containerd` when unset, as the cluster default).
    pub fn cri_type(&self) -> CriType {
        self.cri
            .as_ref()
            .and_then(|c| c.type_.clone())
            .unwrap_or_else(|| CriType::from_spelling(spec_facts::CRI_TYPE_DEFAULT))
    }
}

/// `spec.gpu`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// Sharing strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sharing: Option<GpuSharing>,
    /// Time slicing settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_slicing: Option<TimeSlicing>,
    /// MIG settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<Mig>,
    /// Exclusive mode settings (an empty object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<BTreeMap<String, serde_json::Value>>,
}

/// `spec.gpu.timeSlicing`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TimeSlicing {
    /// Pods per GPU, 1..100 (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_count: Option<i64>,
}

/// `spec.gpu.mig`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Mig {
    /// `all-<profile>` or `custom` (default `all-1g.5gb`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parted_config: Option<String>,
    /// Per-GPU partitions when `partedConfig` is `custom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_configs: Option<Vec<MigCustomConfig>>,
}

/// `spec.gpu.mig.customConfigs[]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MigCustomConfig {
    /// GPU index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
    /// Slices of that GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<Vec<MigSlice>>,
}

/// `spec.gpu.mig.customConfigs[].slices[]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MigSlice {
    /// Profile such as `1g.5gb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// 1..7.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}

/// `spec.cri`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Cri {
    /// Runtime type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<CriType>,
    /// containerd settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub containerd: Option<ContainerdSettings>,
    /// containerd v2 settings.
    #[serde(
        default,
        rename = "containerdV2",
        skip_serializing_if = "Option::is_none"
    )]
    pub containerd_v2: Option<ContainerdSettings>,
    /// Docker settings (deprecated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker: Option<DockerSettings>,
    /// Settings of a CRI managed by someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_managed: Option<NotManagedCri>,
}

/// `spec.cri.containerd` and `spec.cri.containerdV2`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ContainerdSettings {
    /// Parallel image layer downloads (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_downloads: Option<i64>,
}

/// `spec.cri.docker` (deprecated).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DockerSettings {
    /// Parallel downloads (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_downloads: Option<i64>,
    /// Whether Deckhouse manages Docker (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manage: Option<bool>,
}

/// `spec.cri.notManaged`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NotManagedCri {
    /// Path of the CRI socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_socket_path: Option<String>,
}

/// `spec.staticInstances`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticInstances {
    /// Which StaticInstances the group may take (empty: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// How many StaticInstances the group keeps (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
}

/// `spec.cloudInstances`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CloudInstances {
    /// Zones to run in (default: every zone of the region).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Minimum nodes per zone. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_per_zone: Option<i64>,
    /// Maximum nodes per zone. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_per_zone: Option<i64>,
    /// Nodes per zone that may be down during a replacement (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable_per_zone: Option<i64>,
    /// Extra nodes per zone during a replacement (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge_per_zone: Option<i64>,
    /// Scale-up priority: higher groups are scaled first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// Deprecated: shorter machine drain timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_shutdown: Option<bool>,
    /// Warm empty nodes to keep: a count or a percentage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<IntOrString>,
    /// How standby capacity is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_holder: Option<StandbyHolder>,
    /// The instance class machines are made from. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_reference: Option<ClassReference>,
}

impl CloudInstances {
    /// `maxSurgePerZone`, default 1.
    pub fn max_surge_per_zone(&self) -> i64 {
        self.max_surge_per_zone
            .unwrap_or(spec_facts::MAX_SURGE_PER_ZONE_DEFAULT)
    }
    /// `maxUnavailablePerZone`, default 0.
    pub fn max_unavailable_per_zone(&self) -> i64 {
        self.max_unavailable_per_zone
            .unwrap_or(spec_facts::MAX_UNAVAILABLE_PER_ZONE_DEFAULT)
    }
}

/// `spec.cloudInstances.standbyHolder`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StandbyHolder {
    /// Share of a node's capacity one holder pod reserves, 1..80 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overprovisioning_rate: Option<i64>,
    /// Deprecated: resources not held by the holder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_held_resources: Option<NotHeldResources>,
}

/// `spec.cloudInstances.standbyHolder.notHeldResources` (deprecated).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NotHeldResources {
    /// CPU quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<IntOrString>,
    /// Memory quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<IntOrString>,
}

/// `spec.cloudInstances.classReference`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClassReference {
    /// Kind of the instance class (`AWSInstanceClass`, `InstanceClass`, …).
    #[serde(default)]
    pub kind: String,
    /// Name of the instance class.
    #[serde(default)]
    pub name: String,
}

/// `spec.nodeTemplate`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplate {
    /// Labels kept on every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations kept on every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Taints kept on every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Vec<Taint>>,
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// Taint key.
    #[serde(default)]
    pub key: String,
    /// Taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `spec.chaos`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Chaos {
    /// `Disabled` (default) or `DrainAndDelete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ChaosMode>,
    /// Period such as `6h`, `30m`, `1h30m` (default `6h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

/// `spec.operatingSystem` (deprecated).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct OperatingSystem {
    /// No effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manage_kernel: Option<bool>,
}

/// `spec.disruptions`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Disruptions {
    /// Approval mode (default `Automatic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_mode: Option<ApprovalMode>,
    /// Settings of `Automatic` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic: Option<AutomaticDisruptions>,
    /// Settings of `RollingUpdate` mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateDisruptions>,
}

/// `spec.disruptions.automatic`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AutomaticDisruptions {
    /// Drain before approving (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_before_approval: Option<bool>,
    /// When disruptions may happen (UTC); none: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<DisruptionWindow>>,
}

/// `spec.disruptions.rollingUpdate`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateDisruptions {
    /// When replacements may happen (UTC); none: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<DisruptionWindow>>,
}

/// A disruption window: `from`–`to` (UTC `HH:MM`) on `days` (none: every day).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DisruptionWindow {
    /// Start, `HH:MM` UTC.
    #[serde(default)]
    pub from: String,
    /// End, `HH:MM` UTC; before `from` means the window crosses midnight.
    #[serde(default)]
    pub to: String,
    /// Days the window opens on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<Vec<Weekday>>,
}

/// `spec.kubelet`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Kubelet {
    /// Maximum pods per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i64>,
    /// kubelet root directory (default `/var/lib/kubelet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_dir: Option<String>,
    /// Container log size before rotation (default `50Mi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_max_size: Option<String>,
    /// Rotated container log files kept, 1..20 (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_log_max_files: Option<i64>,
    /// Use the runtime's default seccomp profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_default: Option<bool>,
    /// Resources reserved for the system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_reservation: Option<ResourceReservation>,
    /// Topology manager settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_manager: Option<TopologyManager>,
    /// Swap settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_swap: Option<MemorySwap>,
}

/// `spec.kubelet.resourceReservation`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ResourceReservation {
    /// `Off`, `Auto` (default) or `Static`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ResourceReservationMode>,
    /// Reservation for `Static` mode.
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_: Option<StaticReservation>,
}

/// `spec.kubelet.resourceReservation.static`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticReservation {
    /// CPU quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Ephemeral storage quantity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<String>,
}

/// `spec.kubelet.topologyManager`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TopologyManager {
    /// Enable the topology manager (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Alignment scope (default `Container`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<TopologyManagerScope>,
    /// Alignment policy (default `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<TopologyManagerPolicy>,
}

/// `spec.kubelet.memorySwap`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MemorySwap {
    /// `NoSwap` or `LimitedSwap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_behavior: Option<SwapBehavior>,
    /// 0..100 (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swappiness: Option<i64>,
    /// Size for `LimitedSwap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_swap: Option<LimitedSwap>,
}

/// `spec.kubelet.memorySwap.limitedSwap`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LimitedSwap {
    /// Size such as `4G`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
}

/// `spec.update`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Update {
    /// Nodes updated at once: a positive integer or a percentage of the group's nodes
    /// (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<IntOrString>,
}

/// `spec.fencing`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Fencing {
    /// `Watchdog` (required by Deckhouse's schema) or `Notify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<FencingMode>,
    /// Watchdog settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watchdog: Option<WatchdogSettings>,
}

/// `spec.fencing.watchdog`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WatchdogSettings {
    /// Timeout such as `60s`, `2m` (default `60s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// `spec.static` (`v1alpha1`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct StaticSettings {
    /// Networks the static nodes' internal addresses come from.
    #[serde(
        default,
        rename = "internalNetworkCIDRs",
        skip_serializing_if = "Option::is_none"
    )]
    pub internal_network_cidrs: Option<Vec<String>>,
}

/// `NodeGroup.status` (docs/deckhouse.md §1.3).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupStatus {
    /// `None`, `MCM` or `CAPI`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Nodes in the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// Ready nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<i64>,
    /// Nodes whose checksum matches the group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up_to_date: Option<i64>,
    /// Machines (CloudEphemeral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<i64>,
    /// Machines wanted (CloudEphemeral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<i64>,
    /// Minimum over all zones (CloudEphemeral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<i64>,
    /// Maximum over all zones (CloudEphemeral).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<i64>,
    /// Standby-holder pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<i64>,
    /// Latest error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Kubernetes version of the group's nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Machines that failed recently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_machine_failures: Option<Vec<MachineFailure>>,
    /// One-line summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_summary: Option<ConditionSummary>,
    /// Conditions (`Ready`, `Updating`, `WaitingForDisruptiveApproval`, `Scaling`, `Error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Which spec the controllers have seen and which one the node bundles were rendered from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deckhouse: Option<SpecSync>,
}

/// `status.deckhouse`: whether the group's current spec has been processed
/// (docs/deckhouse.md §1.3). node-manager's status controller writes `observed` and `synced`,
/// bashible-apiserver writes `processed` once the group's bundles are rendered from that spec.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SpecSync {
    /// The spec node-manager last saw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<SpecStamp>,
    /// The spec the group's bundles were last rendered from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processed: Option<SpecStamp>,
    /// `True` when `processed` is the `observed` spec, else `False`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced: Option<String>,
}

/// One spec, by checksum, and when it was first seen or processed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SpecStamp {
    /// RFC 3339 time the checksum was first seen (or processed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_timestamp: Option<String>,
    /// SHA-256 of the spec as nodemgr reads it, in hex (the same for every API version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_sum: Option<String>,
}

/// `status.lastMachineFailures[]`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MachineFailure {
    /// Machine name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Provider ID of the machine.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Owner reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<String>,
    /// What failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,
}

/// An operation on a machine and how it ended.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// State (`Failed`, `Processing`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Type (`Create`, `Delete`, …).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// `status.conditionSummary`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConditionSummary {
    /// Human readable status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// `"True"` or `"False"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
}

/// A status condition.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// RFC 3339 time of the last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Human readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
