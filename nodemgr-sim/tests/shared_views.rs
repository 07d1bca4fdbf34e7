//! The simulated API server's shared views (`nodemgr_sim::api`, "Shared views": a new version
//! of a node only the world holds is written into the world's own `Arc`, which then serves as
//! the view, instead of a copy) change nothing: random clusters run once with shared views
//! and once with every view a copy (`SimApiServer::set_shared_views(false)`) end with the same
//! timeline, counters, recorded events and cluster, and a probe listing the nodes through the
//! cluster port at a random period sees the same views (content, resourceVersion and
//! heartbeat) at every one of its steps.
//!
//! Random clusters: 1–3 groups of 1–5 nodes, Automatic, Manual (with the operator's
//! approvals) and RollingUpdate, `maxConcurrent` 1–2, 1–3 changes of every impact per group,
//! and faults: nodes NotReady or dark, slow agents, refused evictions, API errors, a lagging
//! watch cache, controller restarts. The update executor is the scenario's own (so the
//! world's indexes, which the port reads for `status.desired`, are current when it runs); the
//! probe is a controller added to the run.
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test shared_views` runs more
//! cases (the default is 48).

use nodemgr_sim::Scenario;
use proptest::prelude::*;

mod support;
use support::{fault_case as case, fault_scenario, run_with_list_probe, same_logs, same_outcomes};

fn run(s: &Scenario, seed: u64, period: u64, shared: bool) -> (String, Vec<String>) {
    run_with_list_probe(s, seed, period, |sim| {
        sim.world_mut().api.set_shared_views(shared)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn shared_views_change_nothing(c in case(), seed in 0u64..1000, period in 3u64..=17) {
        let s = fault_scenario("shared-views", &c);
        let (shared, shared_log) = run(&s, seed, period, true);
        let (copied, copied_log) = run(&s, seed, period, false);
        same_outcomes(("shared views", &shared), ("copies", &copied))?;
        same_logs(("shared views", &shared_log), ("copies", &copied_log))?;
    }
}
