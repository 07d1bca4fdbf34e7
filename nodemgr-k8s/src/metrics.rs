//! The metrics node-manager exports (OpenMetrics text on `/metrics`): group sizes, update
//! progress, drains, fencing actions and storm suppressions, leadership, reconcile errors and
//! durations. One [`Metrics`] is shared by every controller of a process.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Label set of per-group metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabels {
    /// NodeGroup name.
    pub group: String,
}

/// Label set of per-controller metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// Controller name (`status`, `template`, `update`, `fencing`).
    pub controller: String,
}

/// Label set of per-action counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// What was done (`approve`, `evicted`, `eviction_refused`, `force_deleted`, …).
    pub action: String,
}

/// Label set of the per-group update progress.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateStateLabels {
    /// NodeGroup name.
    pub group: String,
    /// Update state: `waiting`, `approved`, `disruption_required`, `draining`.
    pub state: String,
}

/// Label set of per-zone metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ZoneLabels {
    /// Zone name.
    pub zone: String,
}

/// Every metric of node-manager.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// Nodes per group (`status.nodes`).
    pub group_nodes: Family<GroupLabels, Gauge>,
    /// Ready nodes per group.
    pub group_ready: Family<GroupLabels, Gauge>,
    /// Nodes running the desired configuration per group.
    pub group_up_to_date: Family<GroupLabels, Gauge>,
    /// Nodes of a group in each update state (the rollout's progress).
    pub update_nodes: Family<UpdateStateLabels, Gauge>,
    /// Update actions (approvals, disruption approvals, finishes, drain steps).
    pub update_actions: Family<ActionLabels, Counter>,
    /// Drains in progress.
    pub drains_active: Gauge,
    /// Fencing actions (`delete_pods`, `delete_node`, `notify`, and `storm_suppressed` each
    /// time the storm guard starts holding a zone back).
    pub fencing_actions: Family<ActionLabels, Counter>,
    /// 1 while the storm guard holds fencing back in a zone.
    pub fencing_suppressed: Family<ZoneLabels, Gauge>,
    /// Ends of static instance operations over SSH (`bootstrap_succeeded`, `bootstrap_failed`,
    /// `cleanup_succeeded`, `cleanup_failed`).
    pub static_operations: Family<ActionLabels, Counter>,
    /// Machine controller actions (`create`, `delete`, `failure`, `drain`, `delete_node`).
    pub machine_actions: Family<ActionLabels, Counter>,
    /// Failed reconciles per controller.
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    /// Reconcile durations per controller, seconds.
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    /// 1 while this replica holds the leader Lease.
    pub leader: Gauge,
    /// Times the controllers ended by themselves (returned or panicked) while leading.
    pub controller_failures: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered under the `nodemgr` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nodemgr");
        let group_nodes = Family::<GroupLabels, Gauge>::default();
        let group_ready = Family::<GroupLabels, Gauge>::default();
        let group_up_to_date = Family::<GroupLabels, Gauge>::default();
        let update_nodes = Family::<UpdateStateLabels, Gauge>::default();
        let update_actions = Family::<ActionLabels, Counter>::default();
        let drains_active = Gauge::default();
        let fencing_actions = Family::<ActionLabels, Counter>::default();
        let fencing_suppressed = Family::<ZoneLabels, Gauge>::default();
        let static_operations = Family::<ActionLabels, Counter>::default();
        let machine_actions = Family::<ActionLabels, Counter>::default();
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        let reconcile_duration =
            Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 4.0, 10))
            });
        let leader = Gauge::default();
        let controller_failures = Counter::default();
        registry.register(
            "node_group_nodes",
            "Nodes of the group",
            group_nodes.clone(),
        );
        registry.register(
            "node_group_ready",
            "Ready nodes of the group",
            group_ready.clone(),
        );
        registry.register(
            "node_group_up_to_date",
            "Nodes of the group running its desired configuration",
            group_up_to_date.clone(),
        );
        registry.register(
            "update_nodes",
            "Nodes of the group by update state (waiting, approved, disruption_required, draining)",
            update_nodes.clone(),
        );
        registry.register(
            "update_actions",
            "Update and drain actions taken",
            update_actions.clone(),
        );
        registry.register("drains_active", "Drains in progress", drains_active.clone());
        registry.register(
            "fencing_actions",
            "Fencing actions taken",
            fencing_actions.clone(),
        );
        registry.register(
            "fencing_storm_suppressed",
            "1 while too many fenced nodes of the zone are silent together to fence any",
            fencing_suppressed.clone(),
        );
        registry.register(
            "static_operations",
            "Static instance operations over SSH that ended, by operation and result",
            static_operations.clone(),
        );
        registry.register(
            "machine_actions",
            "Machine controller actions on CloudEphemeral machines",
            machine_actions.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile durations",
            reconcile_duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica is the leader",
            leader.clone(),
        );
        registry.register(
            "controller_failures",
            "Times the controllers ended by themselves while this replica led",
            controller_failures.clone(),
        );
        Metrics {
            registry: Arc::new(registry),
            group_nodes,
            group_ready,
            group_up_to_date,
            update_nodes,
            update_actions,
            drains_active,
            fencing_actions,
            fencing_suppressed,
            static_operations,
            machine_actions,
            reconcile_errors,
            reconcile_duration,
            leader,
            controller_failures,
        }
    }

    /// Counts an action.
    pub fn action(family: &Family<ActionLabels, Counter>, action: &str) {
        family
            .get_or_create(&ActionLabels {
                action: action.to_owned(),
            })
            .inc();
    }

    /// Records one reconcile of `controller`: its duration and whether it failed.
    pub fn reconciled(&self, controller: &str, seconds: f64, failed: bool) {
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(seconds);
        if failed {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(%error, "encoding metrics failed");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_open_metrics_with_the_prefix() {
        let m = Metrics::new();
        m.group_nodes
            .get_or_create(&GroupLabels {
                group: "worker".into(),
            })
            .set(3);
        Metrics::action(&m.fencing_actions, "delete_node");
        m.reconciled("status", 0.002, true);
        let text = m.encode();
        assert!(
            text.contains("nodemgr_node_group_nodes{group=\"worker\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("nodemgr_fencing_actions_total{action=\"delete_node\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nodemgr_reconcile_errors_total{controller=\"status\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
