//! Properties of the update flow, checked in the simulator over random clusters: groups of 1–6
//! nodes in 1–3 zones with random `maxConcurrent` (integer or percentage), approval modes and
//! drain timeouts; workloads with DaemonSets and PodDisruptionBudgets; configuration changes of
//! every impact; and random event orders of failures (nodes NotReady for a while, refused
//! evictions, slow agents), API faults (errors on every call or on patches, the controller's
//! watch of Nodes lagging up to a minute behind, controller restarts that drop the executor's
//! state, with the new replica's clock up to two minutes off) and operator approvals. Every
//! property is checked on the timeline the simulator records, so a violation prints the run's
//! events; `maxConcurrent` is also checked on the simulated cluster itself at every instant.
//!
//! `PROPTEST_CASES=10000 cargo test --release -p nodemgr-sim --test update_properties` runs
//! 10,000 schedules per property (the default is 48, to keep the suite fast).
//!
//! # The all-Ready gate under watch lag
//! A controller sees a node go NotReady only when its view does: with the watch `lag` behind, a
//! decision taken less than `lag` after a node of the group went NotReady is not a violation
//! (the controller could not know yet). Every other limit holds exactly, lag or not: the
//! executor plans only from a view that includes its own writes and writes each decision with
//! a resourceVersion precondition (`docs/optimistic-concurrency.md`).
//!
//! # The liveness bound
//!
//! With healthy nodes, no blocking PDB and no windows, a group of `N` nodes changed at `c`
//! converges by `T = c + ⌈N/m⌉ · (A + J + R + 6P)`, where `m` is the group's resolved
//! `maxConcurrent`, `P` the reconcile period, `A` the agent's delay, `J` its jitter, and `R`
//! the NotReady time the change causes (0 without restart, the kubelet restart, or the reboot
//! for a disruption). Derivation, per batch of up to `m` nodes: the batch is approved at the
//! first reconcile after the previous one finished (≤ P); the agent applies for `A + J` and
//! restarts for `R`; the executor sees the new checksum and finishes at its next reconcile
//! (≤ P). A disruption adds, in Automatic mode with `drainBeforeApproval`: the
//! `disruption-required` mark seen (≤ P), the drain started and evictions sent (same step), the
//! pods gone seen (≤ P; no PDB blocks and pods terminate at once), the disruption approved
//! (≤ P): at most 5P per batch besides `A + J + R`; we allow 6P for the instant ordering of the
//! loop. Batches of one group run one after another; groups run independently.

use std::collections::{BTreeMap, BTreeSet};

use nodemgr_core::update::UpdateMarks;
use nodemgr_sim::{Scenario, Simulation, Timeline, run};
use proptest::prelude::*;
use serde_json::{Value, json};

const PERIOD_S: u64 = 10;
const AGENT_DELAY_S: u64 = 20;
const JITTER_S: u64 = 5;
const KUBELET_RESTART_S: u64 = 5;
const REBOOT_S: u64 = 30;
const DEFAULT_DRAIN_TIMEOUT_S: u64 = 300;

#[derive(Debug, Clone)]
struct GroupCase {
    nodes: usize,
    zones: usize,
    max_concurrent: Value,
    manual: bool,
    drain_timeout: Option<u64>,
    impact: &'static str,
    change_at_s: u64,
    pdb_blocks: bool,
    operator_at_s: Option<u64>,
}

#[derive(Debug, Clone)]
struct Fault {
    /// 0 NotReady, 1 refused evictions, 2 slow agent, 3 API errors, 4 watch lag, 5 controller
    /// restart with clock skew.
    kind: u8,
    group: usize,
    node: usize,
    at_s: u64,
    for_s: u64,
    /// Picks the API error, the lag (1–60 s) or the clock skew (−120…+120 s).
    param: u64,
}

impl Fault {
    /// When a watch lag starts: within 10 minutes after its group's change.
    fn lag_at_s(&self, groups: &[GroupCase]) -> u64 {
        groups[self.group % groups.len()].change_at_s + self.at_s % 600
    }

    /// The watch lag this fault opens: `(from_ms, until_ms, lag_ms)`.
    fn watch_lag(&self, groups: &[GroupCase]) -> Option<(i64, i64, i64)> {
        (self.kind == 4).then(|| {
            let from = i64::try_from(self.lag_at_s(groups) * 1000).unwrap_or(i64::MAX);
            let until = from + i64::try_from(self.for_s * 1000).unwrap_or(i64::MAX);
            (from, until, i64::try_from(self.lag_s() * 1000).unwrap_or(0))
        })
    }

    fn lag_s(&self) -> u64 {
        1 + self.param % 60
    }

    fn skew_s(&self) -> i64 {
        i64::try_from(self.param % 241).unwrap_or(0) - 120
    }
}

fn group_case() -> impl Strategy<Value = GroupCase> {
    (
        1usize..=6,
        1usize..=3,
        prop_oneof![
            (1i64..=3).prop_map(|n| json!(n)),
            prop::sample::select(vec!["25%", "50%", "100%"]).prop_map(|p| json!(p)),
        ],
        any::<bool>(),
        prop::option::of(30u64..=200),
        prop::sample::select(vec!["none", "kubelet-restart", "disruptive"]),
        30u64..=600,
        any::<bool>(),
        prop::option::of(300u64..=3000),
    )
        .prop_map(
            |(
                nodes,
                zones,
                max_concurrent,
                manual,
                drain_timeout,
                impact,
                change_at_s,
                pdb_blocks,
                operator_at_s,
            )| {
                GroupCase {
                    nodes,
                    zones,
                    max_concurrent,
                    manual,
                    drain_timeout,
                    impact,
                    change_at_s,
                    pdb_blocks,
                    operator_at_s,
                }
            },
        )
}

fn fault() -> impl Strategy<Value = Fault> {
    (
        0u8..6,
        0usize..3,
        0usize..6,
        0u64..3000,
        30u64..600,
        any::<u64>(),
    )
        .prop_map(|(kind, group, node, at_s, for_s, param)| Fault {
            kind,
            group,
            node,
            at_s,
            for_s,
            param,
        })
}

fn scenario(groups: &[GroupCase], faults: &[Fault], duration_s: u64) -> Scenario {
    let zones = ["zone-a", "zone-b", "zone-c"];
    let mut gs = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut pdbs = Vec::new();
    let mut events = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let name = format!("g{i}");
        let mut spec = json!({
            "nodeType": "CloudPermanent",
            "update": {"maxConcurrent": g.max_concurrent},
            "disruptions": if g.manual {
                json!({"approvalMode": "Manual"})
            } else {
                json!({"approvalMode": "Automatic", "automatic": {"drainBeforeApproval": true}})
            },
        });
        if let Some(t) = g.drain_timeout {
            spec["nodeDrainTimeoutSecond"] = json!(t);
        }
        gs.push(json!({"name": name, "nodes": g.nodes, "zones": &zones[..g.zones], "spec": spec}));
        let app = format!("app{i}");
        workloads.push(
            json!({"name": app, "kind": "Deployment", "replicas": g.nodes + 1, "group": name}),
        );
        if g.pdb_blocks {
            pdbs.push(json!({"name": app, "selector": {"app": app}, "minAvailable": g.nodes + 1}));
        }
        events.push(json!({"at": format!("{}s", g.change_at_s), "change": {"group": name, "impact": g.impact, "description": "random change"}}));
        if let (true, Some(at)) = (g.manual, g.operator_at_s) {
            events.push(json!({"at": format!("{at}s"), "approveDisruption": {"group": name}}));
        }
    }
    for f in faults {
        let gi = f.group % groups.len();
        let node = format!("g{gi}-{}", f.node % groups[gi].nodes);
        let at = format!("{}s", f.at_s);
        let dur = format!("{}s", f.for_s);
        events.push(match f.kind {
            0 => json!({"at": at, "nodeNotReady": {"node": node, "for": dur}}),
            1 => json!({"at": at, "refuseEvictions": {"selector": {"app": format!("app{gi}")}, "for": dur}}),
            2 => json!({"at": at, "slowAgent": {"node": node, "extraDelay": dur}}),
            3 => {
                let error = ["Unavailable", "TooManyRequests", "Conflict"][(f.param % 3) as usize];
                let operations = if f.param % 2 == 0 { json!([]) } else { json!(["patch"]) };
                json!({"at": at, "apiErrors": {"for": format!("{}s", f.for_s / 4), "error": error, "operations": operations}})
            }
            // Inside the group's rollout, where a view going back in time matters.
            4 => json!({"at": format!("{}s", f.lag_at_s(groups)), "watchLag": {"for": dur, "lag": format!("{}s", f.lag_s())}}),
            _ => json!({"at": at, "restartControllers": {"clockSkew": format!("{}s", f.skew_s())}}),
        });
    }
    let value = json!({
        "name": "property",
        "duration": format!("{duration_s}s"),
        "reconcilePeriod": format!("{PERIOD_S}s"),
        "agent": {"delay": format!("{AGENT_DELAY_S}s"), "jitter": format!("{JITTER_S}s"),
                  "kubeletRestart": format!("{KUBELET_RESTART_S}s"), "reboot": format!("{REBOOT_S}s")},
        "groups": gs,
        "workloads": workloads,
        "pdbs": pdbs,
        "events": events,
    });
    match Scenario::from_yaml(&value.to_string()) {
        Ok(s) => s,
        Err(e) => panic!("generated scenario rejected: {e}\n{value:#}"),
    }
}

fn resolved_max(g: &GroupCase) -> usize {
    match &g.max_concurrent {
        Value::Number(n) => usize::try_from(n.as_u64().unwrap_or(1)).unwrap_or(1).max(1),
        Value::String(p) => {
            let pct: usize = p.trim_end_matches('%').parse().unwrap_or(0);
            (g.nodes * pct / 100).max(1)
        }
        _ => 1,
    }
}

fn group_of(node: &str) -> usize {
    node.trim_start_matches('g')
        .split('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(usize::MAX)
}

fn fail(timeline: &nodemgr_sim::Timeline, what: String) -> Result<(), TestCaseError> {
    Err(TestCaseError::fail(format!(
        "{what}\n--- timeline ---\n{}",
        timeline.to_text()
    )))
}

/// Checks every safety property on one run's timeline.
fn check_safety(
    groups: &[GroupCase],
    faults: &[Fault],
    timeline: &nodemgr_sim::Timeline,
) -> Result<(), TestCaseError> {
    let lags: Vec<(i64, i64, i64)> = faults.iter().filter_map(|f| f.watch_lag(groups)).collect();
    // How far behind the controller's cached view may be at `at_ms`.
    let lag_at = |at_ms: i64| {
        lags.iter()
            .filter(|(from, until, _)| *from <= at_ms && at_ms < *until)
            .map(|(_, _, lag)| *lag)
            .max()
            .unwrap_or(0)
    };
    let mut not_ready: BTreeMap<String, i64> = BTreeMap::new();
    let mut in_flight: Vec<BTreeSet<String>> = vec![BTreeSet::new(); groups.len()];
    let mut operator_approved: BTreeSet<String> = BTreeSet::new();
    let mut drain_started: BTreeMap<String, i64> = BTreeMap::new();
    for e in &timeline.events {
        let node = e.node.as_deref().unwrap_or_default().to_owned();
        let gi = group_of(&node);
        match e.kind.as_ref() {
            "node.not-ready" => {
                not_ready.insert(node.clone(), e.at_ms);
            }
            "node.ready" => {
                not_ready.remove(&node);
            }
            "update.approved" | "update.drain-requested" | "update.disruption-approved" => {
                let Some(g) = groups.get(gi) else { continue };
                let group_prefix = format!("g{gi}-");
                let lag = lag_at(e.at_ms);
                if let Some((down, _)) = not_ready
                    .iter()
                    .find(|(n, since)| n.starts_with(&group_prefix) && e.at_ms - **since > lag)
                {
                    return fail(
                        timeline,
                        format!(
                            "{} of {node} at {}s while {down} of its group is not Ready",
                            e.kind,
                            e.t()
                        ),
                    );
                }
                if e.kind == "update.approved" {
                    in_flight[gi].insert(node.clone());
                    if in_flight[gi].len() > resolved_max(g) {
                        return fail(
                            timeline,
                            format!(
                                "{} nodes of g{gi} updating at {}s, maxConcurrent {:?} resolves to {}",
                                in_flight[gi].len(),
                                e.t(),
                                g.max_concurrent,
                                resolved_max(g)
                            ),
                        );
                    }
                }
                if e.kind == "update.disruption-approved" && g.manual {
                    return fail(
                        timeline,
                        format!(
                            "the executor approved a disruption of {node} in Manual mode at {}s",
                            e.t()
                        ),
                    );
                }
            }
            "update.finished" => {
                if let Some(set) = in_flight.get_mut(gi) {
                    set.remove(&node);
                }
                operator_approved.remove(&node);
            }
            "operator.disruption-approved" => {
                operator_approved.insert(node.clone());
            }
            "agent.reboot"
                if groups.get(gi).is_some_and(|g| g.manual)
                    && !operator_approved.contains(&node) =>
            {
                return fail(
                    timeline,
                    format!(
                        "{node} of a Manual group rebooted at {}s without the operator's approval",
                        e.t()
                    ),
                );
            }
            "drain.started" => {
                drain_started.insert(node.clone(), e.at_ms);
            }
            "drain.force-deleted" => {
                let Some(g) = groups.get(gi) else { continue };
                let timeout_ms =
                    i64::try_from(g.drain_timeout.unwrap_or(DEFAULT_DRAIN_TIMEOUT_S) * 1000)
                        .unwrap_or(i64::MAX);
                let started = drain_started.get(&node).copied().unwrap_or(i64::MAX);
                if e.at_ms - started < timeout_ms {
                    return fail(
                        timeline,
                        format!(
                            "pod {:?} of {node} force-deleted {}ms after its drain started (timeout {}ms)",
                            e.pod,
                            e.at_ms - started,
                            timeout_ms
                        ),
                    );
                }
            }
            _ => {}
        }
        if matches!(
            e.kind.as_ref(),
            "drain.evicted" | "drain.force-deleted" | "drain.eviction-refused"
        ) && e.pod.as_deref().is_some_and(|p| p.contains("exporter"))
        {
            return fail(
                timeline,
                format!("DaemonSet pod {:?} touched by a drain ({})", e.pod, e.kind),
            );
        }
    }
    Ok(())
}

/// Runs the scenario, checking at every instant that no group has more nodes holding an update
/// slot (`approved`, `disruption-approved`, `draining`, `drained=bashible`) than its
/// `maxConcurrent`.
fn run_checked(
    groups: &[GroupCase],
    scenario: &Scenario,
    seed: u64,
) -> Result<Timeline, TestCaseError> {
    let mut sim = Simulation::new(scenario, seed);
    while sim.step() {
        let world = sim.world();
        let mut holding: Vec<Vec<&str>> = vec![Vec::new(); groups.len()];
        for n in world.nodes.values() {
            let gi = group_of(&n.node.name);
            if let Some(h) = holding.get_mut(gi)
                && UpdateMarks::of(&n.node).occupies_slot()
            {
                h.push(n.node.name.as_str());
            }
        }
        for (gi, g) in groups.iter().enumerate() {
            if holding[gi].len() > resolved_max(g) {
                return fail(
                    &world.timeline,
                    format!(
                        "at {}s nodes {:?} of g{gi} hold update slots, maxConcurrent {:?} resolves to {}",
                        (world.now.as_millis() - world.start.as_millis()) / 1000,
                        holding[gi],
                        g.max_concurrent,
                        resolved_max(g)
                    ),
                )
                .map(|()| Timeline::default());
            }
        }
    }
    Ok(sim.world().timeline.clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// maxConcurrent (in the timeline and on the cluster at every instant), the all-Ready gate,
    /// Manual approval, the drain timeout and DaemonSet pods hold under random failures, API
    /// faults and event orders.
    #[test]
    fn updates_are_safe_under_random_failures(
        groups in prop::collection::vec(group_case(), 1..=3),
        faults in prop::collection::vec(fault(), 0..8),
        seed in any::<u64>(),
    ) {
        let scenario = scenario(&groups, &faults, 4 * 3600);
        let timeline = run_checked(&groups, &scenario, seed)?;
        check_safety(&groups, &faults, &timeline)?;
    }

    /// Liveness: with healthy nodes, no blocking PDB, Automatic mode and no windows, every node
    /// runs the new configuration by the bound in the module docs.
    #[test]
    fn healthy_groups_converge_within_the_bound(
        groups in prop::collection::vec(group_case(), 1..=3),
        seed in any::<u64>(),
    ) {
        let groups: Vec<GroupCase> = groups
            .into_iter()
            .map(|g| GroupCase { manual: false, pdb_blocks: false, operator_at_s: None, ..g })
            .collect();
        let scenario = scenario(&groups, &[], 6 * 3600);
        let timeline = run(&scenario, seed);
        check_safety(&groups, &[], &timeline)?;
        for (gi, g) in groups.iter().enumerate() {
            let restart = match g.impact {
                "none" => 0,
                "kubelet-restart" => KUBELET_RESTART_S,
                _ => REBOOT_S,
            };
            let batches = u64::try_from(g.nodes.div_ceil(resolved_max(g))).unwrap_or(u64::MAX);
            let bound_s = g.change_at_s + batches * (AGENT_DELAY_S + JITTER_S + restart + 6 * PERIOD_S);
            for n in 0..g.nodes {
                let node = format!("g{gi}-{n}");
                let Some(done) = timeline.events.iter().find(|e| e.kind == "agent.updated" && e.node.as_deref() == Some(node.as_str())) else {
                    return fail(&timeline, format!("{node} never updated (bound {bound_s}s)"));
                };
                if done.t() > bound_s as f64 {
                    return fail(&timeline, format!(
                        "{node} updated at {:.0}s, after the bound {bound_s}s ({batches} batches of maxConcurrent {})",
                        done.t(), resolved_max(g)
                    ));
                }
            }
        }
    }
}
