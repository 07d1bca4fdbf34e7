//! The simulator's answers to the port calls it shortcuts change nothing: random clusters run
//! once with the update executor over the simulator's shortcuts (`PodApi::evict_pods`
//! answered one eviction after the other from the keys, without a `PodRef` and a future per
//! pod; `ClusterRead::configuration_checksums_shared` handing out the same map while the
//! checksums do not change) and once over the traits' defaults (`SimCluster::plain`: one
//! `evict_pod` per key, a new map per step) end with the same timeline, counters, recorded
//! events and cluster.
//!
//! Random clusters made for evictions: 1–3 groups of 1–4 nodes approving automatically,
//! `maxConcurrent` 1–2, 1–3 disruptive changes per group, 1–3 application pods per node
//! (terminating at once or after 5 s) under a PodDisruptionBudget allowing one disruption,
//! a StatefulSet pod under a blocking budget or none, and faults: API errors on evictions
//! (alone or with patches and lists), refused evictions, controller restarts.
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test port_shortcuts` runs more
//! cases (the default is 48).

use nodemgr_sim::{Scenario, Simulation, UpdateController};
use proptest::prelude::*;
use serde_json::json;

mod support;
use support::{Fault, generated_scenario, outcome, same_outcomes};

#[derive(Debug, Clone)]
struct Group {
    nodes: usize,
    max_concurrent: u64,
    pods_per_node: usize,
    grace: bool,
    blocking_pdb: bool,
    changes: Vec<u64>,
}

#[derive(Debug, Clone)]
struct Case {
    groups: Vec<Group>,
    /// `(kind, group, at s, for s)`.
    faults: Vec<(u8, usize, u64, u64)>,
}

fn group() -> impl Strategy<Value = Group> {
    (
        1usize..=4,
        1u64..=2,
        1usize..=3,
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(0u64..1500, 1..=3),
    )
        .prop_map(
            |(nodes, max_concurrent, pods_per_node, grace, blocking_pdb, changes)| Group {
                nodes,
                max_concurrent,
                pods_per_node,
                grace,
                blocking_pdb,
                changes,
            },
        )
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(group(), 1..=3),
        prop::collection::vec((0u8..4, 0usize..3, 0u64..2000, 10u64..300), 0..5),
    )
        .prop_map(|(groups, faults)| Case { groups, faults })
}

fn scenario(c: &Case) -> Scenario {
    let mut groups = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut pdbs = Vec::new();
    let mut events = Vec::new();
    for (i, g) in c.groups.iter().enumerate() {
        let name = format!("g{i}");
        groups.push(json!({
            "name": name, "nodes": g.nodes, "zones": ["zone-a", "zone-b"],
            "spec": {"nodeType": "CloudPermanent", "update": {"maxConcurrent": g.max_concurrent},
                     "disruptions": {"approvalMode": "Automatic"}},
        }));
        let app = format!("app{i}");
        workloads.push(json!({
            "name": app, "kind": "Deployment", "replicas": g.nodes * g.pods_per_node,
            "group": name, "terminationGracePeriod": if g.grace { "5s" } else { "0s" },
        }));
        workloads.push(
            json!({"name": format!("db{i}"), "kind": "StatefulSet", "replicas": 1, "group": name}),
        );
        pdbs.push(json!({"name": app, "selector": {"app": app}, "maxUnavailable": 1}));
        if g.blocking_pdb {
            pdbs.push(
                json!({"name": format!("db{i}"), "selector": {"app": format!("db{i}")},
                             "minAvailable": 1}),
            );
        }
        for at in &g.changes {
            events.push(
                json!({"at": format!("{at}s"), "change": {"group": name, "impact": "disruptive"}}),
            );
        }
    }
    for (kind, g, at, dur) in &c.faults {
        let gi = g % c.groups.len();
        let at = format!("{at}s");
        events.push(match kind {
            0 => {
                json!({"at": at, "apiErrors": {"for": format!("{dur}s"), "operations": ["evict"]}})
            }
            1 => json!({"at": at, "apiErrors": {"for": format!("{}s", dur / 10 + 5),
                                                "operations": ["evict", "patch", "list"]}}),
            2 => Fault::RefuseEvictions.event(&at, "", gi, *dur),
            _ => Fault::RestartControllers.event(&at, "", gi, *dur),
        });
    }
    let value = json!({
        "name": "port-shortcuts", "duration": "45m", "reconcilePeriod": "10s",
        "agent": {"delay": "20s", "jitter": "7s", "kubeletRestart": "5s", "reboot": "30s"},
        "updates": false,
        "groups": groups, "workloads": workloads, "pdbs": pdbs, "events": events,
    });
    generated_scenario(&value)
}

fn run(s: &Scenario, seed: u64, plain: bool) -> String {
    let mut sim = Simulation::new(s, seed);
    let start = sim.now();
    let controller = UpdateController::new(start, s.reconcile_period.0).plain_port(plain);
    sim.add_controller(Box::new(controller));
    while sim.step() {}
    outcome(sim.world())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_port_shortcuts_change_nothing(c in case(), seed in 0u64..1000) {
        let s = scenario(&c);
        let shortcuts = run(&s, seed, false);
        let plain = run(&s, seed, true);
        // A case whose drains evict nothing says nothing of the evictions (rare: every
        // node has pods, every change is disruptive and drained).
        prop_assume!(shortcuts.contains("drain.evicted"));
        same_outcomes(("shortcuts", &shortcuts), ("port defaults", &plain))?;
    }
}
