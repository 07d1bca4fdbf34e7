//! Fencing properties over random fault schedules (`nodemgr_sim::fencing_faults`): kubelets
//! that die, nodes cut off from the API, random agent timings and API latencies, node clocks
//! ±10 minutes off, and a controller whose own view fails: list/watch errors that freeze its
//! caches, watch lag, failing direct reads, restarts, its own clock ±10 minutes off.
//!
//! `PROPTEST_CASES=10000 cargo test -p nodemgr-sim --release --test fencing_properties` runs
//! 10,000 schedules per property (256 by default).

use nodemgr_sim::fencing_faults::{
    ControllerSchedule, FencingSchedule, NodeSchedule, Window, run_fencing_schedule,
    run_fencing_schedule_without_confirmation,
};
use proptest::prelude::*;

const HORIZON_MS: i64 = 300_000;

fn arb_window() -> impl Strategy<Value = Window> {
    (20_000i64..200_000, 1_000i64..40_000).prop_map(|(start, len)| (start, start + len))
}

fn arb_node() -> impl Strategy<Value = NodeSchedule> {
    (
        0usize..3,
        0i64..10_000,
        prop::option::of(20_000i64..200_000),
        prop::option::of(arb_window()),
        (1_000u64..10_000, 1_000u64..15_000, 0i64..3_000),
        -600_000i64..600_000,
    )
        .prop_map(
            |(
                zone,
                lease_phase,
                kubelet_dies,
                partition,
                (check_ms, api_timeout_ms, latency),
                skew_ms,
            )| {
                NodeSchedule {
                    zone: format!("z{zone}"),
                    lease_phase,
                    kubelet_dies,
                    partition,
                    check_ms,
                    api_timeout_ms,
                    latency_ms: latency.min(api_timeout_ms as i64 - 1),
                    skew_ms,
                }
            },
        )
}

fn arb_controller() -> impl Strategy<Value = ControllerSchedule> {
    (
        prop::collection::vec(arb_window(), 0..3),
        0i64..15_000,
        prop::collection::vec(arb_window(), 0..3),
        prop::collection::vec((1i64..3_000).prop_map(|t| t * 100), 0..3),
        -600_000i64..600_000,
        prop::sample::select(vec![1_000i64, 2_000, 5_000]),
    )
        .prop_map(
            |(watch_errors, watch_lag_ms, read_errors, restarts, skew_ms, period_ms)| {
                ControllerSchedule {
                    watch_errors,
                    watch_lag_ms,
                    read_errors,
                    restarts,
                    skew_ms,
                    period_ms,
                }
            },
        )
}

fn arb_schedule() -> impl Strategy<Value = FencingSchedule> {
    (prop::collection::vec(arb_node(), 1..7), arb_controller()).prop_map(|(nodes, controller)| {
        FencingSchedule {
            nodes,
            controller,
            horizon_ms: HORIZON_MS,
        }
    })
}

/// A schedule where only node 0's kubelet dies, among at least three healthy nodes, and the
/// controller's faults are over early enough for the deadline to pass after them.
fn arb_lone_death() -> impl Strategy<Value = FencingSchedule> {
    (
        prop::collection::vec(arb_node(), 4..7),
        arb_controller(),
        20_000i64..60_000,
    )
        .prop_map(|(mut nodes, mut controller, dies)| {
            for n in &mut nodes {
                n.kubelet_dies = None;
                n.partition = None;
            }
            nodes[0].kubelet_dies = Some(dies);
            let end = |w: &mut Vec<Window>| {
                for (a, b) in w.iter_mut() {
                    *a = (*a).min(100_000);
                    *b = (*b).min(120_000).max(*a);
                }
            };
            end(&mut controller.watch_errors);
            end(&mut controller.read_errors);
            controller.restarts.retain(|t| *t < 120_000);
            FencingSchedule {
                nodes,
                controller,
                horizon_ms: HORIZON_MS,
            }
        })
}

proptest! {
    /// No pod is deleted on a node whose watchdog has not fired.
    #[test]
    fn no_pod_is_deleted_before_its_nodes_watchdog_fired(schedule in arb_schedule()) {
        let outcome = run_fencing_schedule(&schedule);
        for (i, o) in outcome.iter().enumerate() {
            if let Some(deleted) = o.pods_deleted {
                prop_assert!(
                    o.fired.is_some_and(|f| f <= deleted),
                    "node {i}: pods deleted at {deleted} ms, watchdog fired {:?}\n{schedule:#?}",
                    o.fired
                );
            }
        }
    }

    /// A lone dead node among healthy ones is still fenced once the controller's faults end.
    #[test]
    fn a_lone_dead_node_is_fenced_despite_transient_controller_faults(schedule in arb_lone_death()) {
        let outcome = run_fencing_schedule(&schedule);
        if outcome[0].armed && outcome[1..].iter().filter(|o| o.armed).count() >= 3 {
            prop_assert!(outcome[0].pods_deleted.is_some(), "not fenced: {outcome:?}\n{schedule:#?}");
        }
        for o in &outcome[1..] {
            prop_assert_eq!(o.pods_deleted, None);
        }
    }
}

/// The property has teeth: without the observation clock and the direct confirmation (age
/// from the node's renewTime, acting on the cache), a node whose clock is two minutes behind
/// the controller's loses its pods while it runs them.
#[test]
fn the_old_rule_fails_the_property() {
    let healthy = |zone: &str, skew_ms| NodeSchedule {
        zone: zone.into(),
        lease_phase: 0,
        kubelet_dies: None,
        partition: None,
        check_ms: 5_000,
        api_timeout_ms: 10_000,
        latency_ms: 10,
        skew_ms,
    };
    let schedule = FencingSchedule {
        nodes: vec![
            healthy("a", -120_000),
            healthy("b", 0),
            healthy("b", 0),
            healthy("c", 0),
        ],
        controller: ControllerSchedule {
            watch_errors: vec![],
            watch_lag_ms: 0,
            read_errors: vec![],
            restarts: vec![],
            skew_ms: 0,
            period_ms: 5_000,
        },
        horizon_ms: HORIZON_MS,
    };
    let broken = run_fencing_schedule_without_confirmation(&schedule);
    assert!(
        broken[0].pods_deleted.is_some() && broken[0].fired.is_none(),
        "{broken:?}"
    );
    let fixed = run_fencing_schedule(&schedule);
    assert!(fixed.iter().all(|o| o.pods_deleted.is_none()), "{fixed:?}");
}
