//! The metrics node-manager exports on `/metrics` (OpenMetrics or classic text, see
//! [`crate::exposition`]). Two sets, both always present:
//!
//! - **Deckhouse's families under Deckhouse's names and labels**, so that its alert rules and
//!   dashboards carry over: `node_group_node_status{node,node_group,status}` (one-hot over the
//!   update statuses of [`NodeUpdateStatus`]), `d8_node_group_{ready,nodes,instances,desired,
//!   min,max,up_to_date,standby,has_errors}{node_group_name}` and `d8_node_draining{node,message}`
//!   (1 while a drain of the node is refused); beside them, under the same label, nodemgr's
//!   `d8_node_group_standby_desired{node_group_name}`: the standby nodes the group's
//!   `cloudInstances.standby` asks for (0 without one), which `d8_node_group_standby` (the
//!   standby nodes held) is compared with ([`Metrics::standby_desired`]).
//! - **nodemgr's own** under the `nodemgr_` prefix: group sizes, update progress, drains, fencing
//!   actions and storm suppressions, machines, static instances, leadership, reconcile errors
//!   and durations, and `nodemgr_build_info{version}`.
//!
//! Action counters carry a `node_group` label (empty for actions not tied to one group, like a
//! fencing pause for a stale cache). Every counter of a group starts at zero the first time the
//! group is seen ([`Metrics::group_seen`]); the per-controller series and the group-less
//! actions ([`GROUPLESS_FENCING_ACTIONS`]) start at zero at creation, so `rate()` and
//! `increase()` see the first event. See `docs/observability.md`.
//! One [`Metrics`] is shared by every controller of a process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nodemgr_core::disruption::DisruptionReason;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

pub use nodemgr_core::update::NodeUpdateStatus;

/// The controllers whose reconciles are counted (series start at zero).
pub const CONTROLLERS: [&str; 8] = [
    "status",
    "template",
    "update",
    "fencing",
    "static",
    "machines",
    "bootstrap-tokens",
    "csr",
];

/// The `action` values of `nodemgr_update_actions_total`.
pub const UPDATE_ACTIONS: [&str; 13] = [
    "approve",
    "start_drain",
    "approve_disruption",
    "replace_machine",
    "finish",
    "drain_started",
    "cordoned",
    "evicted",
    "eviction_refused",
    "force_deleted",
    "drain_finished",
    "drain_abandoned",
    "drained_mark_removed",
];

/// The `action` values of `nodemgr_fencing_actions_total` tied to a group.
pub const FENCING_ACTIONS: [&str; 5] = [
    "delete_pods",
    "delete_node",
    "notify",
    "not_confirmed",
    "storm_suppressed",
];

/// The `action` values of `nodemgr_fencing_actions_total` not tied to a group (their
/// `node_group` label is empty): present at zero from the start.
pub const GROUPLESS_FENCING_ACTIONS: [&str; 1] = ["paused_stale_cache"];

/// The `action` values of `nodemgr_machine_actions_total`.
pub const MACHINE_ACTIONS: [&str; 6] = [
    "create",
    "delete",
    "failure",
    "delete_node",
    "drain",
    "standby_holder",
];

/// The `action` values of `nodemgr_static_operations_total`.
pub const STATIC_OPERATIONS: [&str; 4] = [
    "bootstrap_succeeded",
    "bootstrap_failed",
    "cleanup_succeeded",
    "cleanup_failed",
];

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

/// Label set of per-group counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeGroupLabels {
    /// The NodeGroup.
    pub node_group: String,
}

/// Label set of `nodemgr_disruptions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptionLabels {
    /// The NodeGroup.
    pub node_group: String,
    /// The disruption reason ([`reason_label`]).
    pub reason: String,
}

/// The `reason` label of `nodemgr_disruptions_total` for `reason`.
pub fn reason_label(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Chaos => "chaos",
        DisruptionReason::ClassChange => "class_change",
        DisruptionReason::RollingUpdate => "rolling_update",
        DisruptionReason::Drift => "drift",
    }
}

/// Label set of per-action counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// The NodeGroup acted on (empty when the action concerns no one group).
    pub node_group: String,
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

/// Label set of Deckhouse's per-group gauges (`d8_node_group_*`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeckhouseGroupLabels {
    /// NodeGroup name.
    pub node_group_name: String,
}

/// Label set of Deckhouse's `node_group_node_status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeStatusLabels {
    /// Node name.
    pub node: String,
    /// The node's NodeGroup.
    pub node_group: String,
    /// One of [`NodeUpdateStatus::ALL`].
    pub status: String,
}

/// Label set of Deckhouse's `d8_node_draining`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DrainingLabels {
    /// Node name.
    pub node: String,
    /// Why the drain does not progress.
    pub message: String,
}

/// Deckhouse's `d8_node_group_*` gauges, one family per status field.
#[derive(Clone, Default)]
pub struct DeckhouseGroupGauges {
    /// `d8_node_group_ready`.
    pub ready: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_nodes`.
    pub nodes: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_instances`.
    pub instances: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_desired`.
    pub desired: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_min`.
    pub min: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_max`.
    pub max: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_up_to_date`.
    pub up_to_date: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_standby`.
    pub standby: Family<DeckhouseGroupLabels, Gauge>,
    /// `d8_node_group_has_errors` (1 when `status.error` is set).
    pub has_errors: Family<DeckhouseGroupLabels, Gauge>,
}

/// What the metrics remember between updates: the group of each node (for the `node_group`
/// label of node actions), each node's reported status, and the message of each refused drain.
#[derive(Default)]
struct Memory {
    group_of_node: HashMap<String, String>,
    node_status: HashMap<String, NodeStatusLabels>,
    draining: HashMap<String, String>,
}

/// Every metric of node-manager.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    memory: Arc<Mutex<Memory>>,
    /// Deckhouse's `d8_node_group_*` gauges.
    pub d8_group: DeckhouseGroupGauges,
    /// Deckhouse's `node_group_node_status`.
    pub node_status: Family<NodeStatusLabels, Gauge>,
    /// Deckhouse's `d8_node_draining`.
    pub node_draining: Family<DrainingLabels, Gauge>,
    /// `d8_node_group_standby_desired`: standby nodes `cloudInstances.standby` asks for
    /// (nodemgr's, beside Deckhouse's `d8_node_group_*`; set with [`Metrics::standby_desired`]).
    pub standby_desired: Family<DeckhouseGroupLabels, Gauge>,
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
    /// Machine controller actions (`create`, `delete`, `failure`, `drain`, `delete_node`,
    /// `standby_holder`).
    pub machine_actions: Family<ActionLabels, Counter>,
    /// Chaos monkey victims (nodes chosen to be drained and replaced), by group.
    pub chaos_victims: Family<NodeGroupLabels, Counter>,
    /// Disruptions nodemgr started, by group and reason (a chaos victim marked, an outdated
    /// node's removal started, a disruptive update approved, a machine handed over for
    /// replacement).
    pub disruptions: Family<DisruptionLabels, Counter>,
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
    /// A fresh registry: Deckhouse's families without a prefix, nodemgr's own under `nodemgr`.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let d8_group = DeckhouseGroupGauges::default();
        let node_status = Family::<NodeStatusLabels, Gauge>::default();
        let node_draining = Family::<DrainingLabels, Gauge>::default();
        root.register(
            "node_group_node_status",
            "1 for the update status each node of a group is in (Deckhouse-compatible)",
            node_status.clone(),
        );
        root.register(
            "d8_node_draining",
            "1 while a drain of the node is refused, with the reason (Deckhouse-compatible)",
            node_draining.clone(),
        );
        for (name, help, family) in [
            ("ready", "Ready nodes of the group", &d8_group.ready),
            ("nodes", "Nodes of the group", &d8_group.nodes),
            ("instances", "Machines of the group", &d8_group.instances),
            ("desired", "Machines the group wants", &d8_group.desired),
            ("min", "Fewest machines of the group", &d8_group.min),
            ("max", "Most machines of the group", &d8_group.max),
            (
                "up_to_date",
                "Nodes of the group running its configuration",
                &d8_group.up_to_date,
            ),
            ("standby", "Standby nodes of the group", &d8_group.standby),
            (
                "has_errors",
                "1 when the group's status reports an error",
                &d8_group.has_errors,
            ),
        ] {
            root.register(
                format!("d8_node_group_{name}"),
                format!("{help} (Deckhouse-compatible)"),
                family.clone(),
            );
        }
        let standby_desired = Family::<DeckhouseGroupLabels, Gauge>::default();
        root.register(
            "d8_node_group_standby_desired",
            "Standby nodes the group's cloudInstances.standby asks for, 0 without one (nodemgr's, \
             beside the Deckhouse-compatible d8_node_group_standby: the standby nodes held)",
            standby_desired.clone(),
        );
        let registry = root.sub_registry_with_prefix("nodemgr");
        registry.register(
            "build",
            "The version of node-manager",
            Info::new(vec![(
                "version".to_owned(),
                env!("CARGO_PKG_VERSION").to_owned(),
            )]),
        );
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
        let chaos_victims = Family::<NodeGroupLabels, Counter>::default();
        let disruptions = Family::<DisruptionLabels, Counter>::default();
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
            "chaos_victims",
            "Nodes the chaos monkey chose to drain and replace",
            chaos_victims.clone(),
        );
        registry.register(
            "disruptions",
            "Disruptions of healthy nodes nodemgr started, by reason",
            disruptions.clone(),
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
        for controller in CONTROLLERS {
            let labels = ControllerLabels {
                controller: controller.to_owned(),
            };
            let _ = reconcile_errors.get_or_create(&labels);
            let _ = reconcile_duration.get_or_create(&labels);
        }
        for action in GROUPLESS_FENCING_ACTIONS {
            let _ = fencing_actions.get_or_create(&ActionLabels {
                node_group: String::new(),
                action: action.to_owned(),
            });
        }
        Metrics {
            registry: Arc::new(root),
            memory: Arc::default(),
            d8_group,
            node_status,
            node_draining,
            standby_desired,
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
            chaos_victims,
            disruptions,
            reconcile_errors,
            reconcile_duration,
            leader,
            controller_failures,
        }
    }

    /// Counts an action on `group` (empty when it concerns no one group).
    pub fn action(family: &Family<ActionLabels, Counter>, group: &str, action: &str) {
        family
            .get_or_create(&ActionLabels {
                node_group: group.to_owned(),
                action: action.to_owned(),
            })
            .inc();
    }

    /// Counts a disruption of a node of `group` for `reason` (and a chaos victim in
    /// `nodemgr_chaos_victims_total` too).
    pub fn disruption(&self, group: &str, reason: DisruptionReason) {
        self.disruptions
            .get_or_create(&DisruptionLabels {
                node_group: group.to_owned(),
                reason: reason_label(reason).to_owned(),
            })
            .inc();
        match reason {
            DisruptionReason::Chaos => self.chaos_victim(group),
            DisruptionReason::ClassChange
            | DisruptionReason::RollingUpdate
            | DisruptionReason::Drift => {}
        }
    }

    /// Counts a chaos monkey victim of `group`.
    pub fn chaos_victim(&self, group: &str) {
        self.chaos_victims
            .get_or_create(&NodeGroupLabels {
                node_group: group.to_owned(),
            })
            .inc();
    }

    /// The group of `node` as last seen by [`Metrics::node_seen`] (empty when unknown).
    pub fn group_of_node(&self, node: &str) -> String {
        self.memory()
            .group_of_node
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Creates every series of `group` at zero (its action counters and Deckhouse gauges) if
    /// they do not exist yet.
    pub fn group_seen(&self, group: &str) {
        let counters: [(&Family<ActionLabels, Counter>, &[&str]); 4] = [
            (&self.update_actions, &UPDATE_ACTIONS),
            (&self.fencing_actions, &FENCING_ACTIONS),
            (&self.machine_actions, &MACHINE_ACTIONS),
            (&self.static_operations, &STATIC_OPERATIONS),
        ];
        for (family, actions) in counters {
            for action in actions {
                let _ = family.get_or_create(&ActionLabels {
                    node_group: group.to_owned(),
                    action: (*action).to_owned(),
                });
            }
        }
        let _ = self.chaos_victims.get_or_create(&NodeGroupLabels {
            node_group: group.to_owned(),
        });
        for reason in DisruptionReason::ALL {
            let _ = self.disruptions.get_or_create(&DisruptionLabels {
                node_group: group.to_owned(),
                reason: reason_label(reason).to_owned(),
            });
        }
        let labels = DeckhouseGroupLabels {
            node_group_name: group.to_owned(),
        };
        for family in self.d8_group.all() {
            let _ = family.get_or_create(&labels);
        }
        let _ = self.standby_desired.get_or_create(&labels);
    }

    /// Sets `d8_node_group_standby_desired{node_group_name=group}`: the standby nodes the
    /// group's `cloudInstances.standby` resolves to
    /// (`nodemgr_core::scaling::standby::standby_count`), 0 when it has none. The standby alert
    /// fires only for groups where this is above 0.
    pub fn standby_desired(&self, group: &str, count: u32) {
        self.standby_desired
            .get_or_create(&DeckhouseGroupLabels {
                node_group_name: group.to_owned(),
            })
            .set(i64::from(count));
    }

    /// Records `node` of `group` in update status `status`: sets its one-hot
    /// `node_group_node_status` series (1 for `status`, 0 for the others).
    pub fn node_seen(&self, node: &str, group: &str, status: NodeUpdateStatus) {
        let mut memory = self.memory();
        memory
            .group_of_node
            .insert(node.to_owned(), group.to_owned());
        if let Some(old) = memory.node_status.get(node)
            && old.node_group != group
        {
            for s in NodeUpdateStatus::ALL {
                self.node_status.remove(&NodeStatusLabels {
                    status: s.as_str().to_owned(),
                    ..old.clone()
                });
            }
        }
        for s in NodeUpdateStatus::ALL {
            self.node_status
                .get_or_create(&NodeStatusLabels {
                    node: node.to_owned(),
                    node_group: group.to_owned(),
                    status: s.as_str().to_owned(),
                })
                .set(i64::from(s == status));
        }
        memory.node_status.insert(
            node.to_owned(),
            NodeStatusLabels {
                node: node.to_owned(),
                node_group: group.to_owned(),
                status: status.as_str().to_owned(),
            },
        );
    }

    /// Drops the `node_group_node_status` series of nodes of `group` not in `present`.
    pub fn nodes_gone(&self, group: &str, present: &[&str]) {
        let mut memory = self.memory();
        let gone: Vec<String> = memory
            .node_status
            .iter()
            .filter(|(node, labels)| {
                labels.node_group == group && !present.contains(&node.as_str())
            })
            .map(|(node, _)| node.clone())
            .collect();
        for node in gone {
            if let Some(labels) = memory.node_status.remove(&node) {
                for s in NodeUpdateStatus::ALL {
                    self.node_status.remove(&NodeStatusLabels {
                        status: s.as_str().to_owned(),
                        ..labels.clone()
                    });
                }
            }
            memory.group_of_node.remove(&node);
        }
    }

    /// Sets `d8_node_draining{node,message}` to 1 (a drain of `node` is refused for `message`),
    /// replacing the node's previous message.
    pub fn drain_refused(&self, node: &str, message: &str) {
        let mut memory = self.memory();
        if let Some(old) = memory.draining.insert(node.to_owned(), message.to_owned())
            && old != message
        {
            self.node_draining.remove(&DrainingLabels {
                node: node.to_owned(),
                message: old,
            });
        }
        self.node_draining
            .get_or_create(&DrainingLabels {
                node: node.to_owned(),
                message: message.to_owned(),
            })
            .set(1);
    }

    /// Removes `node`'s `d8_node_draining` series (its drain ended).
    pub fn drain_ended(&self, node: &str) {
        if let Some(message) = self.memory().draining.remove(node) {
            self.node_draining.remove(&DrainingLabels {
                node: node.to_owned(),
                message,
            });
        }
    }

    /// The sum over every group of the `action` series of the counter `name` (like
    /// `nodemgr_fencing_actions_total`), as encoded: how often `action` happened in this process.
    pub fn action_total(&self, name: &str, action: &str) -> f64 {
        let prefix = format!("{name}{{");
        let label = format!("action=\"{action}\"");
        self.encode()
            .lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The registry (for encoding in a negotiated format, see [`crate::exposition`]).
    pub fn registry(&self) -> &Registry {
        &self.registry
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
        crate::exposition::encode_open_metrics(&self.registry)
    }
}

impl DeckhouseGroupGauges {
    /// Every family, in the order of Deckhouse's names.
    pub fn all(&self) -> [&Family<DeckhouseGroupLabels, Gauge>; 9] {
        [
            &self.ready,
            &self.nodes,
            &self.instances,
            &self.desired,
            &self.min,
            &self.max,
            &self.up_to_date,
            &self.standby,
            &self.has_errors,
        ]
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
        Metrics::action(&m.fencing_actions, "worker", "delete_node");
        m.reconciled("status", 0.002, true);
        let text = m.encode();
        assert!(
            text.contains("nodemgr_node_group_nodes{group=\"worker\"} 3"),
            "{text}"
        );
        assert!(
            text.contains(
                "nodemgr_fencing_actions_total{node_group=\"worker\",action=\"delete_node\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("nodemgr_reconcile_errors_total{controller=\"status\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    fn status_lines(text: &str, node: &str) -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("node_group_node_status{{node=\"{node}\",")))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn group_series_start_at_zero() {
        let m = Metrics::new();
        m.group_seen("worker");
        let text = m.encode();
        for expected in [
            "nodemgr_update_actions_total{node_group=\"worker\",action=\"approve\"} 0",
            "nodemgr_fencing_actions_total{node_group=\"worker\",action=\"delete_node\"} 0",
            "nodemgr_machine_actions_total{node_group=\"worker\",action=\"create\"} 0",
            "nodemgr_static_operations_total{node_group=\"worker\",action=\"bootstrap_failed\"} 0",
            "d8_node_group_ready{node_group_name=\"worker\"} 0",
            "d8_node_group_has_errors{node_group_name=\"worker\"} 0",
            "d8_node_group_standby_desired{node_group_name=\"worker\"} 0",
            "nodemgr_reconcile_errors_total{controller=\"update\"} 0",
            "nodemgr_build_info{version=\"",
        ] {
            assert!(text.contains(expected), "{expected} missing:\n{text}");
        }
    }

    /// The counter families (`# TYPE NAME counter`) of `text` and whether each has a sample.
    fn counters(text: &str) -> Vec<(String, bool)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
            .map(|name| {
                let sample = text.lines().any(|l| {
                    l.starts_with(&format!("{name}_total{{"))
                        || l.starts_with(&format!("{name}_total "))
                });
                (name.to_owned(), sample)
            })
            .collect()
    }

    #[test]
    fn every_counter_is_present_at_zero_from_the_start() {
        let m = Metrics::new();
        let text = m.encode();
        for action in GROUPLESS_FENCING_ACTIONS {
            let line =
                format!("nodemgr_fencing_actions_total{{node_group=\"\",action=\"{action}\"}} 0");
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        // A family without a series is not encoded at all: before any group, the counters not
        // tied to one are there; with the first group, every counter family is.
        let names = |text: &str| -> Vec<String> {
            counters(text)
                .into_iter()
                .filter(|(_, sample)| *sample)
                .map(|(name, _)| name)
                .collect()
        };
        let mut fresh = names(&text);
        fresh.sort();
        assert_eq!(
            fresh,
            [
                "nodemgr_controller_failures",
                "nodemgr_fencing_actions",
                "nodemgr_reconcile_errors"
            ]
        );
        m.group_seen("worker");
        let mut all = names(&m.encode());
        all.sort();
        assert_eq!(
            all,
            [
                "nodemgr_chaos_victims",
                "nodemgr_controller_failures",
                "nodemgr_disruptions",
                "nodemgr_fencing_actions",
                "nodemgr_machine_actions",
                "nodemgr_reconcile_errors",
                "nodemgr_static_operations",
                "nodemgr_update_actions"
            ]
        );
        // A pause counts on the series that was there from the start.
        Metrics::action(&m.fencing_actions, "", "paused_stale_cache");
        assert_eq!(
            m.action_total("nodemgr_fencing_actions_total", "paused_stale_cache"),
            1.0
        );
    }

    #[test]
    fn standby_desired_is_set_per_group() {
        let m = Metrics::new();
        m.group_seen("fixed");
        m.standby_desired("spare", 3);
        let text = m.encode();
        assert!(text.contains("d8_node_group_standby_desired{node_group_name=\"spare\"} 3"));
        assert!(text.contains("d8_node_group_standby_desired{node_group_name=\"fixed\"} 0"));
        m.standby_desired("spare", 0);
        assert!(
            m.encode()
                .contains("d8_node_group_standby_desired{node_group_name=\"spare\"} 0")
        );
    }

    #[test]
    fn a_refused_drain_is_reported_until_it_ends() {
        let m = Metrics::new();
        m.drain_refused("n1", "budget");
        m.drain_refused("n1", "other budget");
        let text = m.encode();
        assert!(text.contains("d8_node_draining{node=\"n1\",message=\"other budget\"} 1"));
        assert!(!text.contains("message=\"budget\""), "{text}");
        m.drain_ended("n1");
        assert!(!m.encode().contains("d8_node_draining{"));
    }

    proptest::proptest! {
        /// Whatever the sequence of observations, each node present has exactly one
        /// `node_group_node_status` series at 1, all of them in its latest group, one series per
        /// status; a node gone from its group has none.
        #[test]
        fn node_status_is_one_hot_in_the_latest_group(
            steps in proptest::collection::vec((0usize..4, 0usize..3, 0usize..11, proptest::bool::ANY), 1..30)
        ) {
            let m = Metrics::new();
            let mut latest: std::collections::BTreeMap<String, Option<(String, NodeUpdateStatus)>> =
                std::collections::BTreeMap::new();
            for (node, group, status, gone) in steps {
                let node = format!("n{node}");
                let group = format!("g{group}");
                if gone {
                    let present: Vec<&str> = latest
                        .iter()
                        .filter(|(n, v)| **n != node && v.as_ref().is_some_and(|(g, _)| *g == group))
                        .map(|(n, _)| n.as_str())
                        .collect();
                    m.nodes_gone(&group, &present);
                    if latest.get(&node).is_some_and(|v| v.as_ref().is_some_and(|(g, _)| *g == group)) {
                        latest.insert(node, None);
                    }
                } else {
                    let status = NodeUpdateStatus::ALL[status];
                    m.node_seen(&node, &group, status);
                    latest.insert(node, Some((group, status)));
                }
            }
            let text = m.encode();
            for (node, state) in &latest {
                let lines = status_lines(&text, node);
                match state {
                    None => proptest::prop_assert!(lines.is_empty(), "{node}: {lines:?}"),
                    Some((group, status)) => {
                        proptest::prop_assert_eq!(lines.len(), NodeUpdateStatus::ALL.len());
                        let group_label = format!("node_group=\"{group}\"");
                        proptest::prop_assert!(lines.iter().all(|l| l.contains(&group_label)), "{lines:?}");
                        let ones: Vec<_> = lines.iter().filter(|l| l.ends_with(" 1")).collect();
                        proptest::prop_assert_eq!(ones.len(), 1);
                        let status_label = format!("status=\"{status}\"");
                        proptest::prop_assert!(ones[0].contains(&status_label));
                    }
                }
            }
        }
    }
}
