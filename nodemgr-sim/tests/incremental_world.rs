//! The world's indexes change nothing: a run whose world re-reads every node and pod at every
//! instant (as the simulator did before it kept indexes: `Simulation::world_mut` invalidates
//! them, so the next instant rebuilds them, refreshes every node and finds the next instant by
//! a scan) gives exactly the timeline, counters and final cluster of a plain run. Random
//! clusters: 1–3 groups of 1–8 nodes, leases longer or shorter than the grace period, pods
//! with and without termination grace, PodDisruptionBudgets, changes of every impact, and
//! nodes going NotReady or dark for a while or for good, with Manual approvals.
//!
//! `PROPTEST_CASES=1000 cargo test --release -p nodemgr-sim --test incremental_world` runs
//! more cases (the default is 32).

use nodemgr_sim::{Scenario, Simulation};
use proptest::prelude::*;
use serde_json::json;

mod support;
use support::{outcome, same_outcomes};

#[derive(Debug, Clone)]
struct Case {
    groups: Vec<(usize, bool, &'static str, u64)>,
    lease_s: u64,
    grace_s: u64,
    grace_pod_s: u64,
    faults: Vec<(u8, usize, usize, u64, Option<u64>)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(
            (
                1usize..=8,
                any::<bool>(),
                prop::sample::select(vec!["none", "kubelet-restart", "disruptive"]),
                10u64..=600,
            ),
            1..=3,
        ),
        prop::sample::select(vec![5u64, 10, 40]),
        prop::sample::select(vec![20u64, 50]),
        prop::sample::select(vec![0u64, 15]),
        prop::collection::vec(
            (
                0u8..3,
                0usize..3,
                0usize..8,
                0u64..1500,
                prop::option::of(20u64..400),
            ),
            0..5,
        ),
    )
        .prop_map(|(groups, lease_s, grace_s, grace_pod_s, faults)| Case {
            groups,
            lease_s,
            grace_s,
            grace_pod_s,
            faults,
        })
}

fn scenario(c: &Case) -> Scenario {
    let mut groups = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut pdbs = Vec::new();
    let mut events = Vec::new();
    for (i, (nodes, manual, impact, at)) in c.groups.iter().enumerate() {
        let name = format!("g{i}");
        let mode = if *manual { "Manual" } else { "Automatic" };
        groups.push(json!({
            "name": name, "nodes": nodes, "zones": ["zone-a", "zone-b"],
            "spec": {"nodeType": "CloudPermanent", "update": {"maxConcurrent": 2},
                     "disruptions": {"approvalMode": mode,
                                     "automatic": {"drainBeforeApproval": true}}},
        }));
        let app = format!("app{i}");
        workloads.push(json!({"name": app, "kind": "Deployment", "replicas": nodes + 1,
                              "group": name, "terminationGracePeriod": format!("{}s", c.grace_pod_s)}));
        workloads.push(
            json!({"name": format!("db{i}"), "kind": "StatefulSet", "replicas": 1, "group": name}),
        );
        pdbs.push(json!({"name": app, "selector": {"app": app}, "maxUnavailable": 1}));
        events.push(json!({"at": format!("{at}s"), "change": {"group": name, "impact": impact}}));
        if *manual {
            events.push(
                json!({"at": format!("{}s", at + 300), "approveDisruption": {"group": name}}),
            );
        }
    }
    for (kind, g, n, at, dur) in &c.faults {
        let gi = g % c.groups.len();
        let node = format!("g{gi}-{}", n % c.groups[gi].0);
        let mut sel = json!({"node": node});
        if let Some(d) = dur {
            sel["for"] = json!(format!("{d}s"));
        }
        events.push(match kind {
            0 => json!({"at": format!("{at}s"), "nodeNotReady": sel}),
            1 => json!({"at": format!("{at}s"), "nodeDark": sel}),
            _ => json!({"at": format!("{at}s"), "slowAgent": {"node": node, "extraDelay": "30s"}}),
        });
    }
    let value = json!({
        "name": "incremental", "duration": "40m", "reconcilePeriod": "10s",
        "agent": {"delay": "20s", "jitter": "7s", "kubeletRestart": "5s", "reboot": "30s"},
        "heartbeat": {"leasePeriod": format!("{}s", c.lease_s), "gracePeriod": format!("{}s", c.grace_s)},
        "groups": groups, "workloads": workloads, "pdbs": pdbs, "events": events,
    });
    match Scenario::from_yaml(&value.to_string()) {
        Ok(s) => s,
        Err(e) => panic!("generated scenario rejected: {e}\n{value:#}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn indexes_give_the_outcome_of_full_rescans(c in case(), seed in 0u64..1000) {
        let s = scenario(&c);
        let mut plain = Simulation::new(&s, seed);
        while plain.step() {}
        let mut rescanned = Simulation::new(&s, seed);
        loop {
            rescanned.world_mut();
            if !rescanned.step() {
                break;
            }
        }
        let (a, b) = (outcome(plain.world()), outcome(rescanned.world()));
        same_outcomes(("indexed", &a), ("rescanned", &b))?;
    }
}
