//! The simulated API server's patches in place (`nodemgr_sim::api`,
//! `SimApiServer::patch_shared`: a node that no other `Arc` and only the server's own version
//! entry holds is changed in place rather than moved to a new allocation, as `Arc::make_mut`
//! does while a weak reference shares it) change nothing: random clusters run once patching in
//! place and once moving every patched node (`SimApiServer::set_patch_in_place(false)`) end
//! with the same timeline, counters, recorded events and cluster, and a probe listing the
//! nodes through the cluster port at a random period sees the same views (content,
//! resourceVersion and heartbeat) at every one of its steps.
//!
//! Random clusters as in `tests/shared_views.rs` (faults included).
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test patch_in_place` runs more
//! cases (the default is 48).

use nodemgr_sim::Scenario;
use proptest::prelude::*;

mod support;
use support::{fault_case as case, fault_scenario, run_with_list_probe, same_logs, same_outcomes};

fn run(s: &Scenario, seed: u64, period: u64, in_place: bool) -> (String, Vec<String>) {
    run_with_list_probe(s, seed, period, |sim| {
        sim.world_mut().api.set_patch_in_place(in_place)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn patches_in_place_change_nothing(c in case(), seed in 0u64..1000, period in 3u64..=17) {
        let s = fault_scenario("patch-in-place", &c);
        let (in_place, in_place_log) = run(&s, seed, period, true);
        let (moved, moved_log) = run(&s, seed, period, false);
        same_outcomes(("in place", &in_place), ("moved", &moved))?;
        same_logs(("in place", &in_place_log), ("moved", &moved_log))?;
    }
}
