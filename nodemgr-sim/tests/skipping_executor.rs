//! The update executor's skipping of unchanged groups (`UpdateExecutor::set_skip_unchanged`)
//! changes no decision: random clusters run once with an executor that plans again only the
//! groups whose inputs changed (the default) and once with one that plans every group at every
//! step end with the same timeline, counters, recorded events and cluster.
//!
//! Random clusters: 1–3 groups of 1–6 nodes in 1–3 zones, CloudPermanent or CloudEphemeral,
//! approval modes Automatic (with or without `drainBeforeApproval`), Manual and RollingUpdate,
//! disruption windows that open and close during the run, `maxConcurrent` as an integer or a
//! percentage, drain timeouts, blocking PodDisruptionBudgets, 1–3 changes of every impact per
//! group, operator approvals, and faults: nodes NotReady or dark, slow agents, refused
//! evictions, API errors, a lagging watch cache, controller restarts with a skewed clock.
//!
//! The skipping executor reads the nodes through the port's change feed
//! (`ClusterRead::node_changes_since`, answered incrementally by the simulator), the one
//! planning every group through whole lists (`list_nodes_shared`), so the comparison also
//! covers the feed under the same faults, lag and restarts (a restart loses the executor's
//! view and revision). A second property checks the feed directly: a probe keeping a view
//! from the feed's answers finds it equal to the whole list at each of its steps.
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test skipping_executor` runs
//! more cases (the default is 48).

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::model::{Node, Timestamp};
use nodemgr_core::ports::{ClusterRead, NodeRevision};
use nodemgr_sim::scenario::ClockOffset;
use nodemgr_sim::{
    Controller, Scenario, SimCluster, Simulation, UpdateController, World, block_on,
};
use proptest::prelude::*;
use serde_json::{Value, json};

mod support;
use support::{Fault, change_events, outcome, same_outcomes};

#[derive(Debug, Clone)]
struct Group {
    nodes: usize,
    zones: usize,
    ephemeral: bool,
    mode: &'static str,
    drain_first: bool,
    max_concurrent: Value,
    drain_timeout: Option<u64>,
    window: Option<(u32, u32)>,
    changes: Vec<(&'static str, u64)>,
    blocking_pdb: bool,
}

#[derive(Debug, Clone)]
struct Case {
    groups: Vec<Group>,
    faults: Vec<(u8, usize, usize, u64, u64)>,
}

fn group() -> impl Strategy<Value = Group> {
    (
        (
            1usize..=6,
            1usize..=3,
            any::<bool>(),
            prop::sample::select(vec!["Automatic", "Manual", "RollingUpdate"]),
            any::<bool>(),
            prop_oneof![
                (1u64..=3).prop_map(|n| json!(n)),
                prop::sample::select(vec!["25%", "50%"]).prop_map(|p| json!(p)),
            ],
        ),
        (
            prop::option::of(30u64..=400),
            prop::option::of((0u32..50, 5u32..30)),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["none", "kubelet-restart", "disruptive"]),
                    0u64..2400,
                ),
                1..=3,
            ),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (nodes, zones, ephemeral, mode, drain_first, max_concurrent),
                (drain_timeout, window, changes, blocking_pdb),
            )| Group {
                nodes,
                zones,
                ephemeral,
                mode,
                drain_first,
                max_concurrent,
                drain_timeout,
                window,
                changes,
                blocking_pdb,
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(group(), 1..=3),
        prop::collection::vec((0u8..7, 0usize..3, 0usize..6, 0u64..3000, 10u64..400), 0..6),
    )
        .prop_map(|(groups, faults)| Case { groups, faults })
}

/// `HH:MM` of `minutes` after midnight.
fn hhmm(minutes: u32) -> String {
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

fn scenario(c: &Case) -> Scenario {
    let zones = ["zone-a", "zone-b", "zone-c"];
    let mut groups = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut pdbs = Vec::new();
    let mut events = Vec::new();
    for (i, g) in c.groups.iter().enumerate() {
        let name = format!("g{i}");
        let mut disruptions = json!({"approvalMode": g.mode,
                                     "automatic": {"drainBeforeApproval": g.drain_first}});
        if let Some((from, len)) = g.window {
            let window = json!([{"from": hhmm(from), "to": hhmm(from + len)}]);
            disruptions["automatic"]["windows"] = window.clone();
            disruptions["rollingUpdate"] = json!({"windows": window});
        }
        let mut spec = json!({
            "nodeType": if g.ephemeral { "CloudEphemeral" } else { "CloudPermanent" },
            "update": {"maxConcurrent": g.max_concurrent},
            "disruptions": disruptions,
        });
        if let Some(t) = g.drain_timeout {
            spec["nodeDrainTimeoutSecond"] = json!(t);
        }
        groups.push(
            json!({"name": name, "nodes": g.nodes, "zones": &zones[..g.zones], "spec": spec}),
        );
        let app = format!("app{i}");
        workloads.push(
            json!({"name": app, "kind": "Deployment", "replicas": g.nodes + 1,
                              "group": name, "terminationGracePeriod": "5s"}),
        );
        workloads.push(
            json!({"name": format!("db{i}"), "kind": "StatefulSet", "replicas": 1, "group": name}),
        );
        if g.blocking_pdb {
            pdbs.push(
                json!({"name": format!("db{i}"), "selector": {"app": format!("db{i}")},
                             "minAvailable": 1}),
            );
        } else {
            pdbs.push(json!({"name": app, "selector": {"app": app}, "maxUnavailable": 1}));
        }
        events.extend(change_events(&name, g.mode, &g.changes, 240));
    }
    for (kind, g, n, at, dur) in &c.faults {
        let gi = g % c.groups.len();
        let node = format!("g{gi}-{}", n % c.groups[gi].nodes);
        let faults = [
            Fault::NotReady,
            Fault::Dark,
            Fault::SlowAgent,
            Fault::RefuseEvictions,
            Fault::ApiErrors,
            Fault::WatchLag,
            Fault::RestartControllers,
        ];
        events.push(Fault::pick(&faults, *kind).event(&format!("{at}s"), &node, gi, *dur));
    }
    let value = json!({
        "name": "skipping", "duration": "60m", "reconcilePeriod": "10s",
        "agent": {"delay": "20s", "jitter": "7s", "kubeletRestart": "5s", "reboot": "30s"},
        "updates": false,
        "groups": groups, "workloads": workloads, "pdbs": pdbs, "events": events,
    });
    match Scenario::from_yaml(&value.to_string()) {
        Ok(s) => s,
        Err(e) => panic!("generated scenario rejected: {e}\n{value:#}"),
    }
}

fn run(s: &Scenario, seed: u64, skip: bool) -> String {
    let mut sim = Simulation::new(s, seed);
    let start = sim.now();
    let controller = UpdateController::new(start, s.reconcile_period.0).skip_unchanged(skip);
    sim.add_controller(Box::new(controller));
    while sim.step() {}
    outcome(sim.world())
}

/// Keeps a view of the nodes from the change feed and compares it with the whole list at
/// each of its steps (every `period`); what differs goes to `mismatches`.
struct FeedProbe {
    period: Duration,
    next: Timestamp,
    revision: Option<NodeRevision>,
    view: BTreeMap<String, Arc<Node>>,
    /// How many answers were compared, and what differed.
    log: Rc<RefCell<(usize, Vec<String>)>>,
}

impl Controller for FeedProbe {
    fn name(&self) -> &str {
        "feed-probe"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn restart(&mut self, now: Timestamp, _: ClockOffset) {
        self.revision = None;
        self.view.clear();
        self.next = now;
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        self.next = now + self.period;
        let cluster = SimCluster::new(world);
        let Some(Ok(changes)) = block_on(cluster.node_changes_since(self.revision)) else {
            return;
        };
        let Some(Ok(list)) = block_on(cluster.list_nodes_shared()) else {
            return;
        };
        let mut problems = Vec::new();
        let changed: BTreeSet<&str> = changes.changed.iter().map(|n| n.name.as_str()).collect();
        if changed.len() != changes.changed.len() {
            problems.push("a node changed twice in one answer".to_owned());
        }
        if changes.removed.iter().any(|r| changed.contains(r.as_str())) {
            problems.push("a node both changed and removed".to_owned());
        }
        if changes.resync {
            self.view.clear();
        }
        for name in &changes.removed {
            self.view.remove(name);
        }
        for node in changes.changed {
            self.view.insert(node.name.clone(), node);
        }
        self.revision = changes.revision;
        let listed: BTreeMap<&str, &Arc<Node>> =
            list.iter().map(|n| (n.name.as_str(), n)).collect();
        let kept: BTreeMap<&str, &Arc<Node>> =
            self.view.iter().map(|(k, v)| (k.as_str(), v)).collect();
        if listed.keys().ne(kept.keys()) {
            problems.push(format!(
                "names differ: listed {:?}, kept {:?}",
                listed.keys().collect::<Vec<_>>(),
                kept.keys().collect::<Vec<_>>()
            ));
        } else if let Some((name, _)) = listed.iter().find(|&(name, listed)| {
            let listed: &Node = listed;
            let kept: &Node = kept[name];
            listed != kept
        }) {
            problems.push(format!("node {name} differs"));
        }
        let mut log = self.log.borrow_mut();
        log.0 += 1;
        for p in problems {
            log.1.push(format!("at {} ms: {p}", now.as_millis()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The change feed's answers, applied to what the probe kept, give the whole list,
    /// whatever happens in between: updates, replaced machines, API errors, watch lag,
    /// controller restarts (the probe then starts over).
    #[test]
    fn the_change_feed_keeps_a_view_equal_to_the_list(
        c in case(),
        seed in 0u64..1000,
        period in 1u64..=13,
    ) {
        let s = scenario(&c);
        let mut sim = Simulation::new(&s, seed);
        let start = sim.now();
        sim.add_controller(Box::new(UpdateController::new(start, s.reconcile_period.0)));
        let log = Rc::new(RefCell::new((0, Vec::new())));
        sim.add_controller(Box::new(FeedProbe {
            period: Duration::from_secs(period),
            next: start,
            revision: None,
            view: BTreeMap::new(),
            log: Rc::clone(&log),
        }));
        while sim.step() {}
        let (answers, mismatches) = &*log.borrow();
        prop_assert!(*answers > 0, "the probe compared nothing");
        prop_assert!(mismatches.is_empty(), "{:?}", &mismatches[..mismatches.len().min(5)]);
    }

    #[test]
    fn skipping_unchanged_groups_changes_no_decision(c in case(), seed in 0u64..1000) {
        let s = scenario(&c);
        let (skipping, planning_all) = (run(&s, seed, true), run(&s, seed, false));
        same_outcomes(("skipping", &skipping), ("planning all", &planning_all))?;
    }
}
