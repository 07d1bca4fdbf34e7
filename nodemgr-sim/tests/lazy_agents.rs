//! Dormant agents change nothing: a waiting agent whose polls are skipped until its Node or
//! bundle changes (`nodemgr_sim::agent`'s module docs, `World::set_lazy_agents`) leaves
//! exactly the timeline, counters, recorded events and cluster of an agent simulated poll by
//! poll. Random clusters run once with dormant agents (the default) and once with them
//! forbidden, and must end identically.
//!
//! Random clusters: 1–3 groups of 1–6 nodes, times in milliseconds (changes, approvals,
//! a reconcile period and an agent reaction that are no whole multiples of the agents'
//! 10-second polls, so that changes fall between polls and on them), approval modes Automatic, Manual and
//! RollingUpdate, `maxConcurrent` 1 or 2 (so that nodes wait for their approval for many
//! polls), 1–3 changes of every impact per group, operator approvals at random times, leases
//! shorter and longer than the grace period (longer: no agent may sleep, both runs must still
//! agree), and faults: nodes NotReady or dark for a while, slow agents, API errors, a lagging
//! watch cache (no agent may sleep either), controller restarts. Half of the runs add a
//! controller that changes nodes behind the world's back (a label, `approved` set by hand
//! without waking the agent, the configuration checksum removed with the agent woken): the
//! world then re-reads everything before the next instant (`World::invalidate_indexes`) and
//! must notice the change at the right poll. The same comparison covers the skipped wakes of
//! up-to-date agents whose Node already carries their checksum.
//!
//! Each run where agents may sleep and a node without faults waited for its approval must
//! have had a dormant agent, so the shortcut is exercised, not bypassed.
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test lazy_agents` runs more cases
//! (the default is 48).

use std::collections::BTreeSet;
use std::sync::Arc;

use nodemgr_core::model::{Timestamp, keys};
use nodemgr_sim::{Controller, Scenario, Simulation, World};
use proptest::prelude::*;
use serde_json::json;

mod support;
use support::{FAULTS, Fault, Group, group, outcome, same_outcomes};

#[derive(Debug, Clone)]
struct Case {
    groups: Vec<Group>,
    /// `(lease, grace)` in seconds.
    heartbeat: (u64, u64),
    /// `(reconcile period, agent reaction)` in milliseconds: not whole multiples of each
    /// other and of the agents' 10-second polls, so that approvals fall between polls.
    timing: (u64, u64),
    /// 0: times in milliseconds; 1: every time rounded to whole seconds (agent reaction 3 s);
    /// 2: to tens of seconds (reaction 10 s), so that the agents' polls fall on the reconciles
    /// that approve them (what an agent sees of a change made in the instant it polls).
    coarse: u64,
    faults: Vec<(u8, usize, usize, u64, u64)>,
    approvals: Vec<(usize, u64)>,
    /// `(at, group, node, action)`: changes made behind the world's back ([`Meddler`]).
    meddling: Option<Vec<(u64, usize, usize, u8)>>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(group(1..=6, 0..2_400_000), 1..=3),
        prop::sample::select(vec![(10u64, 50u64), (5, 20), (10, 10), (60, 50)]),
        prop::collection::vec(
            (0u8..6, 0usize..3, 0usize..6, 0u64..3_000_000, 10u64..400),
            0..4,
        ),
        prop::sample::select(vec![(10_000u64, 1_000u64), (7_000, 250), (13_000, 3_000)]),
        (
            prop::collection::vec((0usize..3, 0u64..3_000_000), 0..4),
            0u64..3,
        ),
        prop::option::of(prop::collection::vec(
            (0u64..3_000_000, 0usize..3, 0usize..6, 0u8..3),
            1..6,
        )),
    )
        .prop_map(
            |(groups, heartbeat, faults, timing, (approvals, coarse), meddling)| Case {
                groups,
                heartbeat,
                timing,
                coarse,
                faults,
                approvals,
                meddling,
            },
        )
}

/// `ms` rounded down as the case's [`Case::coarse`] says.
fn rounded(c: &Case, ms: u64) -> u64 {
    match c.coarse {
        0 => ms,
        1 => ms / 1000 * 1000,
        _ => ms / 10_000 * 10_000,
    }
}

/// `ms` as a scenario duration, rounded as the case says.
fn at(c: &Case, ms: u64) -> String {
    format!("{}ms", rounded(c, ms))
}

fn node_of(c: &Case, g: usize, n: usize) -> (usize, String) {
    let gi = g % c.groups.len();
    (gi, format!("g{gi}-{}", n % c.groups[gi].nodes))
}

fn scenario(c: &Case) -> Scenario {
    let mut groups = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut events = Vec::new();
    for (i, g) in c.groups.iter().enumerate() {
        let name = format!("g{i}");
        let (group, workload) = g.manifests(i);
        groups.push(group);
        workloads.push(workload);
        for (impact, ms) in &g.changes {
            events.push(json!({"at": at(c, *ms), "change": {"group": name, "impact": impact}}));
        }
    }
    for (g, ms) in &c.approvals {
        let gi = g % c.groups.len();
        events.push(json!({"at": at(c, *ms), "approveDisruption": {"group": format!("g{gi}")}}));
    }
    for (kind, g, n, ms, dur) in &c.faults {
        let (gi, node) = node_of(c, *g, *n);
        events.push(Fault::pick(&FAULTS, *kind).event(&at(c, *ms), &node, gi, *dur));
    }
    let (lease, grace) = c.heartbeat;
    let (period, reaction) = match c.coarse {
        0 => c.timing,
        1 => (10_000, 3_000),
        _ => (10_000, 10_000),
    };
    let value = json!({
        "name": "lazy", "duration": "60m", "reconcilePeriod": format!("{period}ms"),
        "agent": {"delay": "20s", "jitter": "7s", "kubeletRestart": "5s", "reboot": "30s",
                  "reaction": format!("{reaction}ms")},
        "heartbeat": {"leasePeriod": format!("{lease}s"), "gracePeriod": format!("{grace}s")},
        "groups": groups, "workloads": workloads, "events": events,
    });
    match Scenario::from_yaml(&value.to_string()) {
        Ok(s) => s,
        Err(e) => panic!("generated scenario rejected: {e}\n{value:#}"),
    }
}

/// Changes nodes directly at given times, without telling the world what changed (the run
/// loop then re-reads everything, as for any controller it did not install): a label, or
/// `approved` on a node that asks for it (an operator's hand, no agent woken), or the
/// configuration checksum removed with the agent woken (an edit its watch sees: an up-to-date
/// agent must put it back).
struct Meddler {
    /// `(at, node, action)`, in time order.
    plan: Vec<(Timestamp, String, u8)>,
    next: usize,
}

impl Controller for Meddler {
    fn name(&self) -> &str {
        "meddler"
    }

    fn next_run(&self) -> Option<Timestamp> {
        self.plan.get(self.next).map(|(t, _, _)| *t)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        while let Some((t, name, action)) = self.plan.get(self.next).cloned() {
            if t > now {
                break;
            }
            self.next += 1;
            let Some(n) = world.nodes.get_mut(&name) else {
                continue;
            };
            let node = Arc::make_mut(&mut n.node);
            let asks = node
                .annotations
                .contains_key(keys::ANNOTATION_WAITING_FOR_APPROVAL);
            match action {
                1 if asks => {
                    node.annotations
                        .insert(keys::ANNOTATION_APPROVED.into(), String::new());
                }
                2 => {
                    node.annotations
                        .remove(keys::ANNOTATION_CONFIGURATION_CHECKSUM);
                    world.wake_agent(&name);
                }
                _ => {
                    node.labels
                        .insert("meddled".into(), t.as_millis().to_string());
                }
            }
        }
    }
}

/// Runs the case; returns the outcome, how many agents were dormant at most after an instant,
/// and whether dormancy was to be expected ([`dormancy_expected`]).
fn run(c: &Case, s: &Scenario, seed: u64, lazy: bool) -> (String, usize, bool) {
    let mut sim = Simulation::new(s, seed);
    if !lazy {
        sim.world_mut().set_lazy_agents(false);
    }
    if let Some(meddling) = &c.meddling {
        let start = sim.now();
        let mut plan: Vec<(Timestamp, String, u8)> = meddling
            .iter()
            .map(|(ms, g, n, action)| {
                let (_, node) = node_of(c, *g, *n);
                let ms = rounded(c, *ms);
                (start + std::time::Duration::from_millis(ms), node, *action)
            })
            .collect();
        plan.sort();
        sim.add_controller(Box::new(Meddler { plan, next: 0 }));
    }
    let mut dormant = 0;
    while sim.step() {
        let now = sim.world().nodes.values();
        dormant = dormant.max(now.filter(|n| n.agent.is_dormant()).count());
    }
    let expected = dormancy_expected(c, sim.world());
    (outcome(sim.world()), dormant, expected)
}

/// Whether agents may sleep in this case, and a node without faults waited for approval in
/// the run that left `world`.
fn dormancy_expected(c: &Case, world: &World) -> bool {
    let (lease, grace) = c.heartbeat;
    if lease > grace || c.faults.iter().any(|f| f.0 == 4) {
        return false;
    }
    let faulted: BTreeSet<String> = c
        .faults
        .iter()
        .filter(|f| f.0 <= 1)
        .map(|(_, g, n, _, _)| node_of(c, *g, *n).1)
        .collect();
    world.timeline.events.iter().any(|e| {
        e.kind == "agent.waiting-for-approval"
            && e.node.as_deref().is_some_and(|n| !faulted.contains(n))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn dormant_agents_change_nothing(c in case(), seed in 0u64..1000) {
        let s = scenario(&c);
        let (lazy, dormant, _) = run(&c, &s, seed, true);
        let (eager, never, expected) = run(&c, &s, seed, false);
        prop_assert_eq!(never, 0, "an agent slept although forbidden");
        same_outcomes(("lazy", &lazy), ("eager", &eager))?;
        if expected {
            prop_assert!(dormant > 0, "no agent was ever dormant");
        } else if c.heartbeat.0 > c.heartbeat.1 {
            prop_assert_eq!(dormant, 0, "an agent slept with leases longer than the grace period");
        }
    }
}
