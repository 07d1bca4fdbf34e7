//! The node-health scenarios of `examples/scenarios/` tell their stories: a dark fenced node
//! fenced 95 s (watchdog 60 s + kubelet staleness 30 s + margin 5 s) after its last heartbeat
//! (pods before the Node), a partition of most of a zone
//! fencing nobody while a lone dark node elsewhere is fenced, and a zone outage driving the
//! lifecycle zone states and eviction rates of kube-controller-manager (docs/peers.md §3).

use nodemgr_sim::{Scenario, Timeline, run};

fn scenario(name: &str) -> Timeline {
    let path = format!(
        "{}/../examples/scenarios/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let scenario = Scenario::from_yaml(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    run(&scenario, 1)
}

fn at(timeline: &Timeline, kind: &str, node: &str) -> Option<f64> {
    timeline.first(kind, node).map(|e| e.t())
}

#[test]
fn a_dark_fenced_node_is_fenced_after_the_derived_deadline_from_its_last_heartbeat() {
    let t = scenario("fencing-node-dark");
    let dark = at(&t, "fault.node-dark", "edge-1").expect("edge-1 goes dark");
    let pods = at(&t, "fencing.pods-deleted", "edge-1").expect("its pods are deleted");
    let node = at(&t, "fencing.node-deleted", "edge-1").expect("then its Node");
    // The last Lease renewal came at most one renewal period (10 s) before it went dark; the
    // deadline is 95 s from the controller's observation of that renewal (it runs every 5 s).
    assert!(
        pods >= dark + 85.0 && pods <= dark + 95.0 + 10.0,
        "pods deleted at {pods}s, dark at {dark}s\n{}",
        t.to_text()
    );
    assert!(node > pods, "the Node before its pods\n{}", t.to_text());
    for other in ["edge-0", "edge-2", "edge-3"] {
        assert!(
            at(&t, "fencing.pods-deleted", other).is_none(),
            "{other} fenced\n{}",
            t.to_text()
        );
    }
}

#[test]
fn a_partition_of_most_of_a_zone_fences_nobody_there() {
    let t = scenario("fencing-partition");
    let suppressed: Vec<_> = t.of_kind("fencing.suppressed").collect();
    assert_eq!(
        suppressed.len(),
        1,
        "one report per episode\n{}",
        t.to_text()
    );
    assert!(suppressed[0].message.contains("zone-a"));
    for node in ["edge-0", "edge-2", "edge-4"] {
        assert!(at(&t, "fault.node-dark", node).is_some());
        assert!(
            at(&t, "fencing.pods-deleted", node).is_none(),
            "{node} fenced in a partition\n{}",
            t.to_text()
        );
    }
    assert!(
        at(&t, "fencing.node-deleted", "edge-1").is_some(),
        "the lone dark node of zone-b is fenced\n{}",
        t.to_text()
    );
}

#[test]
fn a_zone_outage_drives_zone_states_and_eviction_rates() {
    let t = scenario("zone-outage");
    let states: Vec<&str> = t
        .of_kind("lifecycle.zone-state")
        .map(|e| e.message.as_str())
        .collect();
    assert!(
        states.contains(&"zone \"zone-c\": PartialDisruption -> FullDisruption"),
        "{states:?}"
    );
    assert!(
        states
            .iter()
            .any(|s| s.starts_with("zone \"zone-b\"") && s.ends_with("-> PartialDisruption")),
        "{states:?}"
    );
    assert!(
        states.contains(&"zone \"zone-b\": PartialDisruption -> Normal"),
        "{states:?}"
    );
    let evictions: Vec<_> = t.of_kind("lifecycle.pods-evicted").collect();
    // zone-c (full disruption, a single such zone): all four nodes, one every 10 s (0.1 node/s),
    // 5 minutes after they turned unhealthy. zone-b (partial, cluster of 12 <= 50): none.
    assert_eq!(evictions.len(), 4, "{}", t.to_text());
    for e in &evictions {
        let node = e.node.as_deref().unwrap_or_default();
        assert!(
            ["workers-2", "workers-5", "workers-8", "workers-11"].contains(&node),
            "{node} evicted"
        );
        let unhealthy = at(&t, "node.not-ready", node).expect("not ready first");
        assert!(
            e.t() >= unhealthy + 300.0,
            "{node} evicted {}s after it turned unhealthy",
            e.t() - unhealthy
        );
    }
    for pair in evictions.windows(2) {
        assert!(
            pair[1].t() - pair[0].t() >= 10.0 - 1e-6,
            "faster than 0.1 node/s: {} then {}",
            pair[0].t(),
            pair[1].t()
        );
    }
}
