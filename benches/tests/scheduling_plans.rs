//! Pins the scale-up plans of the `scheduling_mix` benchmark's worlds
//! (`nodemgr_benches::scheduling_world::mix_world`, docs/scheduling.md §5) at 1,000 and 5,000
//! pending pods: a digest of every planned node (group, zone, pods), every pod fitting existing
//! room, every pod left out (unplaceable, waiting, constrained), the order of the placements
//! and the winner of each round. The digests were computed by the planner before it was made
//! faster (docs/scheduling.md §6): an optimisation that changes which group wins, where a pod
//! goes or in which order the plan places pods fails here.
//!
//! The losers' figures in each round's reason (`; more waste: …`) are left out: the planner
//! may stop a loser's estimate as soon as it provably cannot win, and then reports a bound.

use std::time::Duration;

use nodemgr_benches::scaling_world::{HEARTBEAT, ScalingWorld};
use nodemgr_benches::scheduling_world::mix_world;
use nodemgr_core::scaling::{ClusterSnapshot, ScaleUpPlan, ScalingConfig, plan_scale_up};

/// FNV-1a, 64 bits: a digest that does not depend on the standard library's hasher.
fn fnv(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The plan as text, pods by name.
fn canonical(w: &ScalingWorld, plan: &ScaleUpPlan) -> String {
    let name = |i: usize| w.pods[i].name.as_str();
    let names = |v: &[usize]| v.iter().map(|&i| name(i)).collect::<Vec<_>>().join(",");
    let mut out = String::new();
    for n in &plan.new_nodes {
        out.push_str(&format!(
            "node {} {} [{}]\n",
            n.group,
            n.zone,
            names(&n.pods)
        ));
    }
    for (i, t) in &plan.fits_existing {
        out.push_str(&format!("existing {} {t}\n", name(*i)));
    }
    out.push_str(&format!("preempted [{}]\n", names(&plan.preempted)));
    for u in &plan.unplaceable {
        out.push_str(&format!("unplaceable [{}]\n", names(&u.pods)));
    }
    out.push_str(&format!(
        "waiting [{}]\n",
        names(&plan.waiting_for_capacity)
    ));
    out.push_str(&format!("constrained [{}]\n", names(&plan.constrained)));
    out.push_str(&format!("order [{}]\n", names(&plan.placement_order)));
    for r in &plan.reasons {
        let winner = r.split("; more waste:").next().unwrap_or(r);
        out.push_str(&format!("reason {winner}\n"));
    }
    out
}

fn digest(pods: usize) -> (u64, ScaleUpPlan) {
    let w = mix_world(50, pods, 0x6b61_7270);
    let snapshot =
        ClusterSnapshot::new(&w.nodes, &w.pods, &w.pdbs, &w.groups, &w.classes, &w.zones);
    let plan = plan_scale_up(
        &snapshot,
        &ScalingConfig::default(),
        HEARTBEAT + Duration::from_secs(10),
    );
    (fnv(&canonical(&w, &plan)), plan)
}

#[test]
fn mix_plan_1k_is_pinned() {
    let (d, plan) = digest(1_000);
    assert!(
        plan.placement_order.len() >= 800,
        "{}",
        plan.placement_order.len()
    );
    assert_eq!(
        d, 0x7758_4a93_f792_771f,
        "digest of the 1,000-pod plan changed: {d:#018x}"
    );
}

#[test]
fn mix_plan_5k_is_pinned() {
    let (d, plan) = digest(5_000);
    assert!(
        plan.placement_order.len() >= 4_000,
        "{}",
        plan.placement_order.len()
    );
    assert_eq!(
        d, 0x9d15_1645_e73f_32cb,
        "digest of the 5,000-pod plan changed: {d:#018x}"
    );
}

/// The benchmark's largest world: slow in a debug build (about a minute), so run on demand:
/// `cargo test --release -p nodemgr-benches --test scheduling_plans -- --ignored`.
#[test]
#[ignore = "slow in a debug build; run with --release -- --ignored"]
fn mix_plan_20k_is_pinned() {
    let (d, plan) = digest(20_000);
    assert!(
        plan.placement_order.len() >= 16_000,
        "{}",
        plan.placement_order.len()
    );
    assert_eq!(
        d, 0xd654_97af_ebd7_ebe4,
        "digest of the 20,000-pod plan changed: {d:#018x}"
    );
}
