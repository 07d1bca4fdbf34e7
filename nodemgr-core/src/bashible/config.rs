//! What a node of a group must run, derived from the NodeGroup and the cluster: every default
//! filled in (docs/deckhouse.md §1.1), every value checked before it reaches a template. The result,
//! [`NodeConfig`], is canonical: two specs that mean the same thing (a field left out or written
//! with its default, map keys in any order) give equal configs, hence equal scripts and an
//! equal checksum.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::RenderError;
use crate::model::spec_facts;
use crate::model::{
    CriType, NodeGroup, Quantity, ResourceReservationMode, SwapBehavior, TaintEffect,
    TopologyManagerPolicy, TopologyManagerScope, keys,
};
use crate::ports::Cause;
use crate::validate::syntax;

/// The cluster-wide settings the scripts need, which no NodeGroup holds (Deckhouse keeps them
/// in the `bashible-apiserver-context` Secret, docs/deckhouse.md §4). Read from YAML with
/// [`ClusterContext::from_yaml`]; field names are camelCase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ClusterContext {
    /// Kubernetes version of the nodes' kubelet (`1.33`), unless a group sets
    /// `kubernetesVersion` (stored by `v1alpha1`/`v1alpha2`).
    pub kubernetes_version: String,
    /// API server endpoints, `host:port`, tried in order by a joining node.
    pub api_endpoints: Vec<String>,
    /// PEM of the cluster CA.
    pub ca_cert: String,
    /// Cluster DNS domain (`cluster.local`).
    pub cluster_domain: String,
    /// Address of the cluster DNS service the kubelet hands to pods.
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: String,
    /// Prefix length of each node's pod subnet; decides the default `maxPods`.
    pub pod_subnet_node_cidr_prefix: u8,
    /// Pause image of the container runtime.
    pub sandbox_image: String,
}

impl Default for ClusterContext {
    fn default() -> Self {
        Self {
            kubernetes_version: "1.33".into(),
            api_endpoints: Vec::new(),
            ca_cert: String::new(),
            cluster_domain: "cluster.local".into(),
            cluster_dns: "10.222.0.10".into(),
            pod_subnet_node_cidr_prefix: 24,
            sandbox_image: "registry.k8s.io/pause:3.10".into(),
        }
    }
}

impl ClusterContext {
    /// Reads a cluster context from YAML (or JSON); absent fields keep their defaults.
    ///
    /// # Errors
    /// [`RenderError::Cluster`] naming the field when the text is not YAML or a field has
    /// the wrong type or an unknown name.
    pub fn from_yaml(text: &str) -> Result<Self, RenderError> {
        serde_saphyr::from_str(text).map_err(|e| RenderError::Cluster {
            field: "clusterContext".into(),
            message: format!("cannot read the cluster context: {e}"),
            source: Some(Cause::new(e)),
        })
    }
}

/// The default `maxPods` for a node pod subnet prefix (docs/deckhouse.md §1.1).
pub fn default_max_pods(pod_subnet_node_cidr_prefix: u8) -> i64 {
    match pod_subnet_node_cidr_prefix {
        24.. => 120,
        23 => 250,
        22 => 500,
        _ => 1000,
    }
}

/// The container runtime a node runs, as the scripts need it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CriConfig {
    /// `Containerd`, `ContainerdV2` or `NotManaged`.
    pub kind: String,
    /// Whether nodemgr writes the runtime's configuration (`false` for `NotManaged`).
    pub managed: bool,
    /// Parallel layer downloads (managed runtimes).
    pub max_concurrent_downloads: i64,
    /// containerd configuration format: 2 for containerd 1.x, 3 for containerd 2.x.
    pub config_version: u8,
    /// Path of the CRI socket the kubelet talks to.
    pub socket_path: String,
    /// Pause image.
    pub sandbox_image: String,
}

/// Reserved resources written into the kubelet configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReservationConfig {
    /// `Off`, `Auto` or `Static`.
    pub mode: String,
    /// `Static`: CPU, memory and ephemeral storage reserved for the system, as written.
    pub static_reserved: BTreeMap<String, String>,
}

/// The kubelet settings of a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeletConfig {
    /// Maximum pods.
    pub max_pods: i64,
    /// Root directory (no trailing slash).
    pub root_dir: String,
    /// Container log size before rotation.
    pub container_log_max_size: String,
    /// Rotated log files kept.
    pub container_log_max_files: i64,
    /// Runtime default seccomp profile.
    pub seccomp_default: bool,
    /// Reserved resources.
    pub reservation: ReservationConfig,
    /// Topology manager on (CPU manager `static`).
    pub topology_enabled: bool,
    /// Kubelet spelling of the topology policy (`none`, `best-effort`, …).
    pub topology_policy: String,
    /// Kubelet spelling of the topology scope (`container`, `pod`).
    pub topology_scope: String,
    /// `NoSwap` or `LimitedSwap`.
    pub swap_behavior: String,
    /// `vm.swappiness`.
    pub swappiness: i64,
    /// Swap file size for `LimitedSwap` (`4G`), empty otherwise.
    pub swap_size: String,
    /// Cluster DNS domain.
    pub cluster_domain: String,
    /// Cluster DNS address.
    pub cluster_dns: String,
    /// Networks the node IP is chosen from (`static.internalNetworkCIDRs`), in the order given.
    pub internal_network_cidrs: Vec<String>,
}

/// Everything a node of a group must run: the input of the step templates. Two groups with
/// equal configs get byte-identical steps and the same checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeConfig {
    /// Kubernetes version (`1.33`).
    pub kubernetes_version: String,
    /// API endpoints.
    pub api_endpoints: Vec<String>,
    /// Cluster CA (PEM, ending with a newline).
    pub ca_cert: String,
    /// Runtime.
    pub cri: CriConfig,
    /// Kubelet.
    pub kubelet: KubeletConfig,
    /// The watchdog of a fenced group (`spec.fencing`); `None` for other groups.
    pub fencing: Option<FencingSettings>,
}

/// The kernel side of fencing (`docs/bundles.md`): the `softdog` module armed by the fencing
/// agent, and no reboot after the panic it causes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FencingSettings {
    /// `softdog`'s `soft_margin`: `fencing.watchdog.timeout` (default 60 s) in whole seconds,
    /// rounded up.
    pub soft_margin_seconds: u64,
}

/// The longest `soft_margin` softdog accepts, in seconds.
pub const MAX_SOFT_MARGIN_SECONDS: u64 = 65_535;

fn fencing_settings(
    fencing: Option<&crate::model::Fencing>,
) -> Result<Option<FencingSettings>, RenderError> {
    let Some(fencing) = fencing else {
        return Ok(None);
    };
    let field = "spec.fencing.watchdog.timeout";
    let timeout = crate::fencing::watchdog_timeout(fencing)
        .map_err(|e| field_error(field, e.to_string()))?
        .unwrap_or(std::time::Duration::from_secs(60));
    let seconds = timeout
        .as_secs()
        .saturating_add(u64::from(timeout.subsec_nanos() > 0));
    if seconds > MAX_SOFT_MARGIN_SECONDS {
        return Err(field_error(
            field,
            format!(
                "{seconds}s is longer than the watchdog allows ({MAX_SOFT_MARGIN_SECONDS}s); \
                 use a shorter timeout such as 60s"
            ),
        ));
    }
    Ok(Some(FencingSettings {
        soft_margin_seconds: seconds.max(1),
    }))
}

/// What a node registers with once, at join time: the group's labels and taints as kubelet
/// flags. Not part of the configuration checksum: after registration the controller keeps
/// `nodeTemplate` on the Node object (a `nodeTemplate` change touches no node, see
/// [`crate::impact`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Registration {
    /// `--node-labels` value: `key=value` pairs joined by `,`, sorted by key.
    pub node_labels: String,
    /// `--register-with-taints` value: `key=value:Effect` joined by `,`, in manifest order.
    pub taints: String,
    /// Labels of `nodeTemplate` the kubelet may not set on itself (the `kubernetes.io` and
    /// `k8s.io` domains outside `node.kubernetes.io/` and `kubelet.kubernetes.io/`); the
    /// controller adds them to the Node after it registers.
    pub deferred_labels: Vec<String>,
}

fn field_error(field: impl Into<String>, message: impl Into<String>) -> RenderError {
    RenderError::Field {
        field: field.into(),
        message: message.into(),
    }
}

fn no_nul(field: &str, value: &str) -> Result<(), RenderError> {
    if value.contains('\0') {
        return Err(field_error(field, "holds a NUL byte; remove it"));
    }
    Ok(())
}

/// A path the scripts create or delete: absolute, no `.`/`..` components, characters from
/// `[A-Za-z0-9._/-]` only (it is also a kubelet flag in a systemd unit, which has its own
/// quoting rules), not `/`. Trailing slashes are dropped so that `/a/` and `/a` are one path.
fn safe_path(field: &str, value: &str) -> Result<String, RenderError> {
    let trimmed = value.trim_end_matches('/');
    let ok_chars = trimmed
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'));
    let components_ok = trimmed
        .split('/')
        .skip(1)
        .all(|c| !c.is_empty() && c != "." && c != "..");
    if !value.starts_with('/') || trimmed.is_empty() || !ok_chars || !components_ok {
        return Err(field_error(
            field,
            format!(
                "{value:?} is not accepted: use an absolute path other than \"/\" made of \
                 letters, digits, '.', '_', '-' and single '/' separators, without '.' or '..' \
                 components (e.g. \"/var/lib/kubelet\")"
            ),
        ));
    }
    Ok(trimmed.to_owned())
}

fn quantity(field: &str, value: &str) -> Result<String, RenderError> {
    no_nul(field, value)?;
    Quantity::parse(value).map_err(|e| field_error(field, e.to_string()))?;
    Ok(value.to_owned())
}

fn unknown(field: &str, value: &str, known: &[&str]) -> RenderError {
    field_error(
        field,
        format!("unknown value {value:?}; use one of {}", known.join(", ")),
    )
}

fn check_version(field: &str, version: &str) -> Result<(), RenderError> {
    let parts: Vec<&str> = version.split('.').collect();
    let ok = (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !ok {
        return Err(field_error(
            field,
            format!("{version:?} is not a Kubernetes version; write it as \"1.33\" or \"1.33.2\""),
        ));
    }
    Ok(())
}

fn check_endpoint(field: &str, endpoint: &str) -> Result<(), RenderError> {
    let ok = !endpoint.is_empty()
        && endpoint
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !ok {
        return Err(field_error(
            field,
            format!(
                "{endpoint:?} is not an API endpoint; write host:port, e.g. \"10.0.0.1:6443\" \
                 or \"api.example.com:6443\""
            ),
        ));
    }
    Ok(())
}

/// Checks the cluster context the steps embed.
fn check_cluster(cluster: &ClusterContext) -> Result<(), RenderError> {
    let err = |field: &str, message: String| RenderError::Cluster {
        field: field.into(),
        message,
        source: None,
    };
    if cluster.api_endpoints.is_empty() {
        return Err(err(
            "apiEndpoints",
            "no API endpoint: nodes need at least one host:port of the Kubernetes API to join"
                .into(),
        ));
    }
    for (i, endpoint) in cluster.api_endpoints.iter().enumerate() {
        check_endpoint(&format!("apiEndpoints[{i}]"), endpoint).map_err(|e| {
            err(
                &format!("apiEndpoints[{i}]"),
                match e {
                    RenderError::Field { message, .. } => message,
                    other => other.to_string(),
                },
            )
        })?;
    }
    if !cluster
        .ca_cert
        .trim_start()
        .starts_with("-----BEGIN CERTIFICATE-----")
    {
        return Err(err(
            "caCert",
            "not a PEM certificate: paste the cluster CA (it starts with \
             \"-----BEGIN CERTIFICATE-----\")"
                .into(),
        ));
    }
    no_nul("caCert", &cluster.ca_cert)?;
    check_version("kubernetesVersion", &cluster.kubernetes_version)
        .map_err(|e| err("kubernetesVersion", e.to_string()))?;
    for (field, value) in [
        ("clusterDomain", &cluster.cluster_domain),
        ("clusterDNS", &cluster.cluster_dns),
        ("sandboxImage", &cluster.sandbox_image),
    ] {
        if value.is_empty() {
            return Err(err(
                field,
                "empty; leave the field out to use the default".into(),
            ));
        }
        no_nul(field, value)?;
    }
    Ok(())
}

/// Derives what nodes of `group` must run.
///
/// # Errors
/// [`RenderError::Cluster`] for a cluster context without endpoints or CA;
/// [`RenderError::Field`] naming the spec field for a value the scripts cannot carry safely
/// (an unknown enum value, Docker, a malformed quantity, an unsafe `rootDir`, a NUL byte).
pub fn node_config(group: &NodeGroup, cluster: &ClusterContext) -> Result<NodeConfig, RenderError> {
    check_cluster(cluster)?;
    derive(group, cluster)
}

/// [`node_config`] without checking the cluster context (for the cleanup script, which uses
/// none of it).
pub(super) fn derive(
    group: &NodeGroup,
    cluster: &ClusterContext,
) -> Result<NodeConfig, RenderError> {
    let spec = &group.spec;

    let kubernetes_version = match spec.kubernetes_version.as_deref() {
        Some(v) => {
            check_version("spec.kubernetesVersion", v)?;
            v.to_owned()
        }
        None => cluster.kubernetes_version.clone(),
    };

    let cri_spec = spec.cri.clone().unwrap_or_default();
    let downloads = |settings: &Option<crate::model::ContainerdSettings>, field: &str| {
        let n = settings
            .as_ref()
            .and_then(|s| s.max_concurrent_downloads)
            .unwrap_or(spec_facts::MAX_CONCURRENT_DOWNLOADS_DEFAULT);
        if n < 1 {
            return Err(field_error(field, format!("{n} is not a positive number")));
        }
        Ok(n)
    };
    let cri = match spec.cri_type() {
        CriType::Containerd => CriConfig {
            kind: "Containerd".into(),
            managed: true,
            max_concurrent_downloads: downloads(
                &cri_spec.containerd,
                "spec.cri.containerd.maxConcurrentDownloads",
            )?,
            config_version: 2,
            socket_path: "/run/containerd/containerd.sock".into(),
            sandbox_image: cluster.sandbox_image.clone(),
        },
        CriType::ContainerdV2 => CriConfig {
            kind: "ContainerdV2".into(),
            managed: true,
            max_concurrent_downloads: downloads(
                &cri_spec.containerd_v2,
                "spec.cri.containerdV2.maxConcurrentDownloads",
            )?,
            config_version: 3,
            socket_path: "/run/containerd/containerd.sock".into(),
            sandbox_image: cluster.sandbox_image.clone(),
        },
        CriType::NotManaged => {
            let socket = cri_spec
                .not_managed
                .as_ref()
                .and_then(|n| n.cri_socket_path.as_deref())
                .unwrap_or("/run/containerd/containerd.sock");
            CriConfig {
                kind: "NotManaged".into(),
                managed: false,
                max_concurrent_downloads: 0,
                config_version: 0,
                socket_path: safe_path("spec.cri.notManaged.criSocketPath", socket)?,
                sandbox_image: cluster.sandbox_image.clone(),
            }
        }
        CriType::Docker => {
            return Err(field_error(
                "spec.cri.type",
                "Docker is not supported (Deckhouse rejects it too); use Containerd, \
                 ContainerdV2 or NotManaged",
            ));
        }
        CriType::Unknown(other) => {
            return Err(unknown("spec.cri.type", &other, CriType::KNOWN));
        }
    };

    let kubelet_spec = spec.kubelet.clone().unwrap_or_default();
    let max_pods = match kubelet_spec.max_pods {
        Some(n) if n < 1 => {
            return Err(field_error(
                "spec.kubelet.maxPods",
                format!("{n} is not a positive number of pods"),
            ));
        }
        Some(n) => n,
        None => default_max_pods(cluster.pod_subnet_node_cidr_prefix),
    };
    let root_dir = safe_path(
        "spec.kubelet.rootDir",
        kubelet_spec
            .root_dir
            .as_deref()
            .unwrap_or(spec_facts::KUBELET_ROOT_DIR_DEFAULT),
    )?;
    let container_log_max_size = quantity(
        "spec.kubelet.containerLogMaxSize",
        kubelet_spec
            .container_log_max_size
            .as_deref()
            .unwrap_or(spec_facts::CONTAINER_LOG_MAX_SIZE_DEFAULT),
    )?;
    let container_log_max_files = kubelet_spec
        .container_log_max_files
        .unwrap_or(spec_facts::CONTAINER_LOG_MAX_FILES_DEFAULT);
    if !(1..=20).contains(&container_log_max_files) {
        return Err(field_error(
            "spec.kubelet.containerLogMaxFiles",
            format!("{container_log_max_files} is outside 1..20"),
        ));
    }

    let reservation_spec = kubelet_spec
        .resource_reservation
        .clone()
        .unwrap_or_default();
    let mode = reservation_spec.mode.clone().unwrap_or_else(|| {
        ResourceReservationMode::from_spelling(spec_facts::RESOURCE_RESERVATION_MODE_DEFAULT)
    });
    let mut static_reserved = BTreeMap::new();
    match &mode {
        ResourceReservationMode::Static => {
            let s = reservation_spec.static_.clone().unwrap_or_default();
            for (name, field, value) in [
                ("cpu", "cpu", &s.cpu),
                ("memory", "memory", &s.memory),
                (
                    "ephemeral-storage",
                    "ephemeralStorage",
                    &s.ephemeral_storage,
                ),
            ] {
                if let Some(v) = value {
                    static_reserved.insert(
                        name.to_owned(),
                        quantity(
                            &format!("spec.kubelet.resourceReservation.static.{field}"),
                            v,
                        )?,
                    );
                }
            }
            if static_reserved.is_empty() {
                return Err(field_error(
                    "spec.kubelet.resourceReservation.static",
                    "mode Static needs at least one of cpu, memory, ephemeralStorage",
                ));
            }
        }
        ResourceReservationMode::Off | ResourceReservationMode::Auto => {}
        ResourceReservationMode::Unknown(other) => {
            return Err(unknown(
                "spec.kubelet.resourceReservation.mode",
                other,
                ResourceReservationMode::KNOWN,
            ));
        }
    }

    let topology = kubelet_spec.topology_manager.clone().unwrap_or_default();
    let topology_policy = match topology.policy.clone().unwrap_or_else(|| {
        TopologyManagerPolicy::from_spelling(spec_facts::TOPOLOGY_MANAGER_POLICY_DEFAULT)
    }) {
        TopologyManagerPolicy::None => "none",
        TopologyManagerPolicy::BestEffort => "best-effort",
        TopologyManagerPolicy::Restricted => "restricted",
        TopologyManagerPolicy::SingleNumaNode => "single-numa-node",
        TopologyManagerPolicy::Unknown(other) => {
            return Err(unknown(
                "spec.kubelet.topologyManager.policy",
                &other,
                TopologyManagerPolicy::KNOWN,
            ));
        }
    };
    let topology_scope = match topology.scope.clone().unwrap_or_else(|| {
        TopologyManagerScope::from_spelling(spec_facts::TOPOLOGY_MANAGER_SCOPE_DEFAULT)
    }) {
        TopologyManagerScope::Container => "container",
        TopologyManagerScope::Pod => "pod",
        TopologyManagerScope::Unknown(other) => {
            return Err(unknown(
                "spec.kubelet.topologyManager.scope",
                &other,
                TopologyManagerScope::KNOWN,
            ));
        }
    };

    let swap = kubelet_spec.memory_swap.clone().unwrap_or_default();
    let swappiness = swap.swappiness.unwrap_or(spec_facts::SWAPPINESS_DEFAULT);
    if !(0..=100).contains(&swappiness) {
        return Err(field_error(
            "spec.kubelet.memorySwap.swappiness",
            format!("{swappiness} is outside 0..100"),
        ));
    }
    let (swap_behavior, swap_size) =
        match swap.swap_behavior.clone().unwrap_or(SwapBehavior::NoSwap) {
            SwapBehavior::NoSwap => ("NoSwap", String::new()),
            SwapBehavior::LimitedSwap => {
                let size = swap
                    .limited_swap
                    .as_ref()
                    .and_then(|l| l.size.clone())
                    .unwrap_or_default();
                if !syntax::is_swap_size(&size) {
                    return Err(field_error(
                        "spec.kubelet.memorySwap.limitedSwap.size",
                        format!(
                            "{size:?} is not a swap size; LimitedSwap needs a size such as \"4G\""
                        ),
                    ));
                }
                ("LimitedSwap", size)
            }
            SwapBehavior::Unknown(other) => {
                return Err(unknown(
                    "spec.kubelet.memorySwap.swapBehavior",
                    &other,
                    SwapBehavior::KNOWN,
                ));
            }
        };

    let internal_network_cidrs = spec
        .static_
        .as_ref()
        .and_then(|s| s.internal_network_cidrs.clone())
        .unwrap_or_default();
    for (i, cidr) in internal_network_cidrs.iter().enumerate() {
        if !syntax::is_ipv4_cidr(cidr) {
            return Err(field_error(
                format!("spec.static.internalNetworkCIDRs[{i}]"),
                format!("{cidr:?} is not an IPv4 CIDR such as \"192.168.0.0/24\""),
            ));
        }
    }

    let fencing = fencing_settings(spec.fencing.as_ref())?;

    let mut ca_cert = cluster.ca_cert.clone();
    if !ca_cert.ends_with('\n') {
        ca_cert.push('\n');
    }
    Ok(NodeConfig {
        kubernetes_version,
        api_endpoints: cluster.api_endpoints.clone(),
        ca_cert,
        cri,
        kubelet: KubeletConfig {
            max_pods,
            root_dir,
            container_log_max_size,
            container_log_max_files,
            seccomp_default: kubelet_spec
                .seccomp_default
                .unwrap_or(spec_facts::SECCOMP_DEFAULT_DEFAULT),
            reservation: ReservationConfig {
                mode: mode.as_str().to_owned(),
                static_reserved,
            },
            topology_enabled: topology
                .enabled
                .unwrap_or(spec_facts::TOPOLOGY_MANAGER_ENABLED_DEFAULT),
            topology_policy: topology_policy.into(),
            topology_scope: topology_scope.into(),
            swap_behavior: swap_behavior.into(),
            swappiness,
            swap_size,
            cluster_domain: cluster.cluster_domain.clone(),
            cluster_dns: cluster.cluster_dns.clone(),
            internal_network_cidrs,
        },
        fencing,
    })
}

/// Whether the kubelet may set label `key` on its own Node at registration (the
/// NodeRestriction rules: nothing in `kubernetes.io`/`k8s.io` except `node.kubernetes.io/` and
/// `kubelet.kubernetes.io/` and a few well-known keys).
fn kubelet_may_set(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return true;
    };
    let restricted = |domain: &str| prefix == domain || prefix.ends_with(&format!(".{domain}"));
    if !restricted("kubernetes.io") && !restricted("k8s.io") {
        return true;
    }
    matches!(prefix, "node.kubernetes.io" | "kubelet.kubernetes.io")
        || prefix.ends_with(".node.kubernetes.io")
        || prefix.ends_with(".kubelet.kubernetes.io")
        || matches!(
            key,
            "kubernetes.io/hostname"
                | "kubernetes.io/arch"
                | "kubernetes.io/os"
                | "beta.kubernetes.io/instance-type"
                | "node.kubernetes.io/instance-type"
                | "topology.kubernetes.io/region"
                | "topology.kubernetes.io/zone"
        )
}

/// The labels and taints a node of `group` registers with.
///
/// # Errors
/// [`RenderError::Field`] for a group name, label or taint that is not valid Kubernetes
/// syntax (kubelet flags have no quoting, so only valid keys and values are passed).
pub fn registration(group: &NodeGroup) -> Result<Registration, RenderError> {
    let name = group.name();
    syntax::check_node_group_name(name).map_err(|m| field_error("metadata.name", m))?;
    let node_type = group
        .spec
        .node_type
        .as_ref()
        .map(|t| t.as_str().to_owned())
        .unwrap_or_default();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let mut deferred_labels = Vec::new();
    let template = group.spec.node_template.clone().unwrap_or_default();
    for (key, value) in template.labels.iter().flatten() {
        let path = format!("spec.nodeTemplate.labels[{key:?}]");
        syntax::check_qualified_name(key).map_err(|m| field_error(&path, m))?;
        syntax::check_label_value(value).map_err(|m| field_error(&path, m))?;
        if kubelet_may_set(key) {
            labels.insert(key.clone(), value.clone());
        } else {
            deferred_labels.push(key.clone());
        }
    }
    labels.insert(keys::LABEL_NODE_GROUP.into(), name.to_owned());
    if !node_type.is_empty() {
        syntax::check_label_value(&node_type).map_err(|m| field_error("spec.nodeType", m))?;
        labels.insert(keys::LABEL_NODE_TYPE.into(), node_type);
    }
    let node_labels = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut taints = Vec::new();
    for (i, taint) in template.taints.iter().flatten().enumerate() {
        let path = format!("spec.nodeTemplate.taints[{i}]");
        syntax::check_qualified_name(&taint.key)
            .map_err(|m| field_error(format!("{path}.key"), m))?;
        let value = taint.value.clone().unwrap_or_default();
        syntax::check_label_value(&value).map_err(|m| field_error(format!("{path}.value"), m))?;
        let effect = match &taint.effect {
            Some(TaintEffect::Unknown(other)) => {
                return Err(unknown(
                    &format!("{path}.effect"),
                    other,
                    TaintEffect::KNOWN,
                ));
            }
            Some(effect) => effect.as_str().to_owned(),
            None => {
                return Err(field_error(
                    format!("{path}.effect"),
                    "required: NoSchedule, PreferNoSchedule or NoExecute",
                ));
            }
        };
        taints.push(format!("{}={value}:{effect}", taint.key));
    }
    Ok(Registration {
        node_labels,
        taints: taints.join(","),
        deferred_labels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_max_pods_follows_the_subnet() {
        assert_eq!(default_max_pods(26), 120);
        assert_eq!(default_max_pods(24), 120);
        assert_eq!(default_max_pods(23), 250);
        assert_eq!(default_max_pods(22), 500);
        assert_eq!(default_max_pods(20), 1000);
    }

    #[test]
    fn safe_path_refuses_what_a_unit_file_or_rm_cannot_carry() {
        assert_eq!(
            safe_path("f", "/var/lib/kubelet/").unwrap(),
            "/var/lib/kubelet"
        );
        for bad in [
            "", "/", "//", "relative", "/a/../b", "/a/./b", "/a b", "/a;rm", "/a//b", "/a$x",
        ] {
            assert!(safe_path("f", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn kubelet_may_not_set_restricted_labels() {
        assert!(kubelet_may_set("role"));
        assert!(kubelet_may_set("example.com/x"));
        assert!(kubelet_may_set("node.kubernetes.io/disk"));
        assert!(!kubelet_may_set("node-role.kubernetes.io/worker"));
        assert!(!kubelet_may_set("k8s.io/x"));
    }
}
