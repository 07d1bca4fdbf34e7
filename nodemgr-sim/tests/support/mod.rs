//! What the equivalence properties compare: everything a run leaves, as text.
//!
//! `incremental_world`, `skipping_executor` and `lazy_agents` each run one scenario two ways
//! (a shortcut and the plain path) and require the same [`outcome`].

use nodemgr_sim::World;

/// Everything a run leaves: the timeline, counters, recorded events, the cluster's nodes (as
/// the API shows them) and pods, and the pods still pending.
pub fn outcome(w: &World) -> String {
    let mut out = String::new();
    for e in &w.timeline.events {
        out.push_str(&format!(
            "{}\t{}\t{:?}\t{:?}\t{:?}\t{}\n",
            e.at_ms, e.kind, e.node, e.group, e.pod, e.message
        ));
    }
    out.push_str(&format!("{:?}\n", w.stats));
    for e in &w.recorded_events {
        out.push_str(&format!("{e:?}\n"));
    }
    for n in w.nodes.values() {
        out.push_str(&format!("{:?}\n", n.view()));
    }
    for (k, p) in &w.pods {
        out.push_str(&format!("{k} {:?} {:?}\n", p.pod, p.terminating_until));
    }
    for p in &w.pending_pods {
        out.push_str(&format!("{p:?}\n"));
    }
    out
}

/// Fails the property unless the two outcomes are the same, showing the first line where
/// they differ under the names of the two ways they were run.
pub fn same_outcomes(
    (name_a, a): (&str, &str),
    (name_b, b): (&str, &str),
) -> Result<(), proptest::test_runner::TestCaseError> {
    if a != b {
        let first = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or(0);
        proptest::prop_assert!(
            false,
            "outcomes differ from line {first}:\n{name_a}: {:?}\n{name_b}: {:?}",
            a.lines().nth(first),
            b.lines().nth(first)
        );
    }
    Ok(())
}
