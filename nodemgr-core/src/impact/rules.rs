//! The matrix itself: one [`Rule`] per spec path, with what a change of it does and why
//! (docs/deckhouse.md §10), and the look-ups over it.

use super::{Effect, Rule};

pub(super) const NO: Effect = Effect::Never;
pub(super) const YES: Effect = Effect::Always;

/// A rule whose change touches no node: it changes scheduling, scaling, bookkeeping or an agent.
const fn nothing(path: &'static str, why: &'static str) -> Rule {
    Rule {
        path,
        disruption: NO,
        reprovision: NO,
        kubelet_restart: NO,
        why,
    }
}

/// A rule whose change is written into the kubelet's configuration or flags.
const fn restart(path: &'static str, why: &'static str) -> Rule {
    Rule {
        path,
        disruption: NO,
        reprovision: NO,
        kubelet_restart: YES,
        why,
    }
}

/// A rule whose change needs the node drained first.
const fn disruptive(path: &'static str, why: &'static str) -> Rule {
    Rule {
        path,
        disruption: YES,
        reprovision: NO,
        kubelet_restart: NO,
        why,
    }
}

/// A rule whose change replaces the machines.
const fn reprovision(path: &'static str, why: &'static str) -> Rule {
    Rule {
        path,
        disruption: NO,
        reprovision: YES,
        kubelet_restart: NO,
        why,
    }
}

/// The matrix, sorted by path; no path lies inside another.
pub(super) const RULES: &[Rule] = &[
    nothing(
        "chaos",
        "the chaos monkey only picks victims among existing nodes and its settings are never written to a node.",
    ),
    reprovision(
        "cloudInstances.classReference",
        "the instance class checksum is part of the immutable machine class name, so new machines are ordered and old ones removed, maxSurgePerZone at a time.",
    ),
    nothing(
        "cloudInstances.maxPerZone",
        "Raises or lowers the autoscaler's ceiling per zone; existing machines are kept as they are.",
    ),
    nothing(
        "cloudInstances.maxSurgePerZone",
        "only says how many extra machines a replacement may order at once.",
    ),
    nothing(
        "cloudInstances.maxUnavailablePerZone",
        "Only says how many machines a replacement may take down at once, like maxSurgePerZone.",
    ),
    nothing(
        "cloudInstances.minPerZone",
        "Changes the number of machines kept per zone (adds or removes machines) but re-provisions none.",
    ),
    nothing(
        "cloudInstances.priority",
        "Only changes which group the autoscaler grows first.",
    ),
    nothing(
        "cloudInstances.quickShutdown",
        "Deprecated; shortens the drain timeout used when a machine is deleted, which matters only when a machine goes away.",
    ),
    nothing(
        "cloudInstances.standby",
        "Changes how many warm empty nodes are kept (adds or removes machines) but touches no existing node.",
    ),
    nothing(
        "cloudInstances.standbyHolder.notHeldResources.cpu",
        "Deprecated; only sizes the standby holder pods, not the nodes.",
    ),
    nothing(
        "cloudInstances.standbyHolder.notHeldResources.memory",
        "Deprecated; only sizes the standby holder pods, not the nodes.",
    ),
    nothing(
        "cloudInstances.standbyHolder.overprovisioningRate",
        "Only sizes the standby holder pods that keep capacity free; the nodes are untouched.",
    ),
    nothing(
        "cloudInstances.zones",
        "Adds or removes machines in the zones added or removed but re-provisions none.",
    ),
    restart(
        "cri.containerd.maxConcurrentDownloads",
        "written into the containerd configuration, which bashible applies with a restart of the runtime and the kubelet.",
    ),
    restart(
        "cri.containerdV2.maxConcurrentDownloads",
        "The same setting as cri.containerd.maxConcurrentDownloads for containerd 2, applied the same way.",
    ),
    nothing(
        "cri.docker.manage",
        "Deprecated (validation rejects Docker); were it applied, it would only decide whether bashible keeps managing a Docker that is already running, without restarting it.",
    ),
    restart(
        "cri.docker.maxConcurrentDownloads",
        "Deprecated (validation rejects Docker); were it applied it would be written into the runtime configuration like containerd's.",
    ),
    restart(
        "cri.notManaged.criSocketPath",
        "The socket path is passed to the kubelet as its container runtime endpoint, so the kubelet restarts.",
    ),
    Rule {
        path: "cri.type",
        disruption: Effect::UnlessNewValueIs("NotManaged"),
        reprovision: NO,
        kubelet_restart: NO,
        why: "switching to a managed runtime reinstalls it and restarts every container (disruptive), while switching to NotManaged leaves the running runtime alone; unset means Containerd.",
    },
    nothing(
        "disruptions",
        "only says how and when disruptions are approved, not what a node runs.",
    ),
    nothing(
        "fencing.mode",
        "Changes what the fencing agent and controller do about a silent node; the bundle stays (softdog and kernel.panic = 0 follow from fencing being set, see docs/bundles.md), and nothing restarts.",
    ),
    nothing(
        "fencing.watchdog.timeout",
        "Changes how often the fencing agent must feed the watchdog: softdog's soft_margin in the bundle (a new checksum, so nodes re-run their steps; no drain, no kubelet restart, see docs/bundles.md).",
    ),
    nothing(
        "gpu.exclusive",
        "An empty marker object for Exclusive sharing; it carries no settings of its own.",
    ),
    disruptive(
        "gpu.mig.customConfigs",
        "Changes the MIG partitions of the GPUs, which can only be recreated while no pod uses them, so the node is drained.",
    ),
    disruptive(
        "gpu.mig.partedConfig",
        "Changes the MIG partitions of the GPUs, which can only be recreated while no pod uses them, so the node is drained.",
    ),
    disruptive(
        "gpu.sharing",
        "Switching the sharing mode repartitions or re-advertises the GPUs under the pods that hold them, so the node is drained.",
    ),
    nothing(
        "gpu.timeSlicing.partitionCount",
        "Only changes how many time slices the device plugin advertises; running pods keep their devices.",
    ),
    restart(
        "kubelet.containerLogMaxFiles",
        "Written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.containerLogMaxSize",
        "Written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.maxPods",
        "written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.memorySwap.limitedSwap.size",
        "The swap file is resized live, but the kubelet reads the swap capacity it splits between pods only at start.",
    ),
    restart(
        "kubelet.memorySwap.swapBehavior",
        "Written into the kubelet configuration, which the kubelet reads at start.",
    ),
    nothing(
        "kubelet.memorySwap.swappiness",
        "Applied to the vm.swappiness sysctl, which takes effect without restarting anything.",
    ),
    restart(
        "kubelet.resourceReservation.mode",
        "Changes the reserved resources written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.resourceReservation.static.cpu",
        "Changes the reserved resources written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.resourceReservation.static.ephemeralStorage",
        "Changes the reserved resources written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.resourceReservation.static.memory",
        "Changes the reserved resources written into the kubelet configuration, which the kubelet reads at start.",
    ),
    restart(
        "kubelet.rootDir",
        "passed to the kubelet as its root directory, which it reads at start.",
    ),
    restart(
        "kubelet.seccompDefault",
        "Written into the kubelet configuration, which the kubelet reads at start.",
    ),
    Rule {
        path: "kubelet.topologyManager.enabled",
        disruption: YES,
        reprovision: NO,
        kubelet_restart: YES,
        why: "Switches the kubelet's CPU and memory managers to or from the static policy, whose state files must be removed with no pods admitted, so the node is drained and the kubelet restarted.",
    },
    restart(
        "kubelet.topologyManager.policy",
        "Written into the kubelet configuration; the policy applies to pods admitted afterwards, so a restart suffices.",
    ),
    restart(
        "kubelet.topologyManager.scope",
        "Written into the kubelet configuration; the scope applies to pods admitted afterwards, so a restart suffices.",
    ),
    restart(
        "kubernetesVersion",
        "a new kubelet binary is installed and started in place.",
    ),
    nothing(
        "nodeDrainTimeoutSecond",
        "Only changes how long a drain may take.",
    ),
    nothing(
        "nodeTemplate",
        "labels, annotations and taints are patched onto the Node objects live.",
    ),
    reprovision(
        "nodeType",
        "Immutable: validation rejects the change; were it applied, a node could not change its type in place, so it counts as a re-provision.",
    ),
    nothing(
        "operatingSystem.manageKernel",
        "Deprecated and without effect.",
    ),
    restart(
        "static",
        "the internal network CIDRs choose the kubelet's node IP, which it reads at start.",
    ),
    nothing(
        "staticInstances.count",
        "Changes which and how many machines join (adds or cleans machines) but not how the remaining ones run.",
    ),
    nothing(
        "staticInstances.labelSelector",
        "Atomic selector: changes which machines may join, not how the joined ones run.",
    ),
    nothing(
        "update.maxConcurrent",
        "only says how many nodes update at once.",
    ),
];

/// Every rule of the matrix, sorted by path. No rule's path lies inside another's, and every
/// field of [`NodeGroupSpec`](crate::model::NodeGroupSpec) lies inside exactly one rule's path.
pub fn rules() -> &'static [Rule] {
    RULES
}

/// The rule that covers a dotted spec path (`kubelet.maxPods`, `nodeTemplate.labels`,
/// `spec.chaos.mode`; a leading `spec.` is ignored), if the path lies inside some rule.
pub fn rule_for(path: &str) -> Option<&'static Rule> {
    let path = path.strip_prefix("spec.").unwrap_or(path);
    RULES.iter().find(|rule| rule.covers(path))
}
