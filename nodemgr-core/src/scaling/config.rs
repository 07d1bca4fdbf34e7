//! Tunables of the scaling policies, with cluster-autoscaler's and MCM's defaults (docs/peers.md §1).

use std::time::Duration;

/// Tunables shared by the scaling policies; `Default` gives the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalingConfig {
    /// A node not Ready for this long (since its last heartbeat, or since it registered when
    /// it never sent one) counts as failed and is replaced. Default 10 min (MCM's machine
    /// health timeout).
    pub failed_after: Duration,
    /// A node whose requested utilization (the larger of cpu and memory requests over
    /// allocatable) is below this percentage is underutilized. Default 50.
    pub scale_down_utilization_percent: u32,
    /// How long a node must stay underutilized before it is removed. Default 10 min.
    pub scale_down_unneeded_time: Duration,
    /// No scale-down for this long after the last scale-up. Default 10 min.
    pub scale_down_delay_after_add: Duration,
    /// Empty nodes (only DaemonSet, mirror or finished pods) removed per pass. Default 10.
    pub max_empty_removals_per_pass: usize,
    /// Nodes with pods to move removed per pass. Default 1.
    pub max_busy_removals_per_pass: usize,
    /// A pod without a controller blocks the removal of its node (cluster-autoscaler's
    /// default: it would not come back). Default true.
    pub block_unreplicated_pods: bool,
}

impl Default for ScalingConfig {
    fn default() -> Self {
        Self {
            failed_after: Duration::from_secs(600),
            scale_down_utilization_percent: 50,
            scale_down_unneeded_time: Duration::from_secs(600),
            scale_down_delay_after_add: Duration::from_secs(600),
            max_empty_removals_per_pass: 10,
            max_busy_removals_per_pass: 1,
            block_unreplicated_pods: true,
        }
    }
}
