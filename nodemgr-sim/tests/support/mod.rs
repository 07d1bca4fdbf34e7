//! What the equivalence properties compare: everything a run leaves, as text; and the random
//! groups and change events several of them build their scenarios from.
//!
//! `incremental_world`, `skipping_executor`, `lazy_agents`, `shared_views`, `patch_in_place`,
//! `logged_feed` and `live_heartbeats` each run one scenario two ways (a shortcut and the
//! plain path) and require the same [`outcome`]; the last four draw it as a [`FaultCase`] and
//! compare what a probe controller saw ([`same_logs`]; the node listing probe of the first
//! two of them is [`run_with_list_probe`]).

// Each property uses part of this module.
#![allow(dead_code)]

use std::cell::RefCell;
use std::ops::{Range, RangeInclusive};
use std::rc::Rc;
use std::time::Duration;

use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::ClusterRead;
use nodemgr_sim::{Controller, Scenario, SimCluster, Simulation, World, block_on};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A random NodeGroup: its size, approval mode, `maxConcurrent` and configuration changes
/// (`(impact, at)`, in the unit the property reads them in).
#[derive(Debug, Clone)]
pub struct Group {
    pub nodes: usize,
    pub mode: &'static str,
    pub max_concurrent: u64,
    pub changes: Vec<(&'static str, u64)>,
}

/// A [`Group`] of `nodes` nodes, any approval mode, `maxConcurrent` 1 or 2, and one to three
/// changes of any impact at times drawn from `at`.
pub fn group(nodes: RangeInclusive<usize>, at: Range<u64>) -> impl Strategy<Value = Group> {
    (
        nodes,
        prop::sample::select(vec!["Automatic", "Manual", "RollingUpdate"]),
        1u64..=2,
        prop::collection::vec(
            (
                prop::sample::select(vec!["none", "kubelet-restart", "disruptive"]),
                at,
            ),
            1..=3,
        ),
    )
        .prop_map(|(nodes, mode, max_concurrent, changes)| Group {
            nodes,
            mode,
            max_concurrent,
            changes,
        })
}

impl Group {
    /// The scenario's group `g{i}` (CloudPermanent, two zones) and its Deployment `app{i}`
    /// (one pod more than the group has nodes, 5 s to terminate).
    pub fn manifests(&self, i: usize) -> (Value, Value) {
        let name = format!("g{i}");
        let group = json!({
            "name": name, "nodes": self.nodes, "zones": ["zone-a", "zone-b"],
            "spec": {"nodeType": "CloudPermanent", "update": {"maxConcurrent": self.max_concurrent},
                     "disruptions": {"approvalMode": self.mode}},
        });
        let workload = json!({"name": format!("app{i}"), "kind": "Deployment",
                              "replicas": self.nodes + 1, "group": name,
                              "terminationGracePeriod": "5s"});
        (group, workload)
    }
}

/// The events of group `name`'s configuration changes (`(impact, seconds)`); in `Manual` mode
/// each is followed, `approve_after` seconds later, by the operator's disruption approval.
pub fn change_events(
    name: &str,
    mode: &str,
    changes: &[(&'static str, u64)],
    approve_after: u64,
) -> Vec<Value> {
    let mut events = Vec::new();
    for (impact, at) in changes {
        events.push(json!({"at": format!("{at}s"), "change": {"group": name, "impact": impact}}));
        if mode == "Manual" {
            events.push(
                json!({"at": format!("{}s", at + approve_after), "approveDisruption": {"group": name}}),
            );
        }
    }
    events
}

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

/// Fails the property unless a probe saw something and saw the same on both paths, showing
/// the first entry of its log where they differ under the names of the two ways.
pub fn same_logs(
    (name_a, a): (&str, &[String]),
    (name_b, b): (&str, &[String]),
) -> Result<(), proptest::test_runner::TestCaseError> {
    proptest::prop_assert!(!a.is_empty(), "the probe saw nothing");
    if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
        proptest::prop_assert!(
            false,
            "the probe's logs differ at entry {i}:\n{name_a}: {:?}\n{name_b}: {:?}",
            a.get(i),
            b.get(i)
        );
    }
    Ok(())
}

/// A fault a property injects (see the scenario format's `events[]`).
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    NotReady,
    Dark,
    SlowAgent,
    RefuseEvictions,
    ApiErrors,
    WatchLag,
    RestartControllers,
}

/// The faults of the properties without eviction refusals, by the number their cases draw.
pub const FAULTS: [Fault; 6] = [
    Fault::NotReady,
    Fault::Dark,
    Fault::SlowAgent,
    Fault::ApiErrors,
    Fault::WatchLag,
    Fault::RestartControllers,
];

impl Fault {
    /// Fault number `kind` of `list` (the last one for a number past its end).
    pub fn pick(list: &[Fault], kind: u8) -> Fault {
        let last = list.len().saturating_sub(1);
        list.get(usize::from(kind).min(last))
            .copied()
            .unwrap_or(Fault::RestartControllers)
    }

    /// The scenario event injecting this fault at `at` for `dur` seconds, on `node` of group
    /// `g{gi}` where it is about one.
    pub fn event(self, at: &str, node: &str, gi: usize, dur: u64) -> Value {
        let lasting = format!("{dur}s");
        match self {
            Fault::NotReady => json!({"at": at, "nodeNotReady": {"node": node, "for": lasting}}),
            Fault::Dark => json!({"at": at, "nodeDark": {"node": node, "for": lasting}}),
            Fault::SlowAgent => json!({"at": at, "slowAgent": {"node": node, "extraDelay": "30s"}}),
            Fault::RefuseEvictions => json!({"at": at, "refuseEvictions": {
                "selector": {"app": format!("app{gi}")}, "for": lasting}}),
            Fault::ApiErrors => json!({"at": at, "apiErrors": {"for": format!("{}s", dur / 10 + 5),
                                                               "operations": ["patch", "list"]}}),
            Fault::WatchLag => json!({"at": at, "watchLag": {"for": lasting, "lag": "15s"}}),
            Fault::RestartControllers => {
                json!({"at": at, "restartControllers": {"clockSkew": "+20s"}})
            }
        }
    }
}

/// A random cluster of one to three [`Group`]s with up to five injected faults
/// (`(kind in FAULTS, group, node, at s, for s)`), for the properties that run it two ways.
#[derive(Debug, Clone)]
pub struct FaultCase {
    /// The groups.
    pub groups: Vec<Group>,
    /// The faults, as drawn.
    pub faults: Vec<(u8, usize, usize, u64, u64)>,
}

/// Draws a [`FaultCase`].
pub fn fault_case() -> impl Strategy<Value = FaultCase> {
    (
        prop::collection::vec(group(1..=5, 0..1800), 1..=3),
        prop::collection::vec((0u8..6, 0usize..3, 0usize..5, 0u64..2400, 10u64..300), 0..5),
    )
        .prop_map(|(groups, faults)| FaultCase { groups, faults })
}

/// The 45-minute scenario `name` of a [`FaultCase`]: its groups with their workloads and
/// change events, a DaemonSet, and the faults on the nodes they name.
pub fn fault_scenario(name: &str, c: &FaultCase) -> Scenario {
    let mut groups = Vec::new();
    let mut workloads =
        vec![json!({"name": "exporter", "namespace": "monitoring", "kind": "DaemonSet"})];
    let mut events = Vec::new();
    for (i, g) in c.groups.iter().enumerate() {
        let (group, workload) = g.manifests(i);
        groups.push(group);
        workloads.push(workload);
        events.extend(change_events(&format!("g{i}"), g.mode, &g.changes, 200));
    }
    for (kind, g, n, at, dur) in &c.faults {
        let gi = g % c.groups.len();
        let node = format!("g{gi}-{}", n % c.groups[gi].nodes);
        events.push(Fault::pick(&FAULTS, *kind).event(&format!("{at}s"), &node, gi, *dur));
    }
    let value = json!({
        "name": name, "duration": "45m", "reconcilePeriod": "10s",
        "agent": {"delay": "20s", "jitter": "7s", "kubeletRestart": "5s", "reboot": "30s"},
        "groups": groups, "workloads": workloads, "events": events,
    });
    generated_scenario(&value)
}

/// The scenario a property generated as JSON (a rejected one fails the test with the JSON).
pub fn generated_scenario(value: &Value) -> Scenario {
    match Scenario::from_yaml(&value.to_string()) {
        Ok(s) => s,
        Err(e) => panic!("generated scenario rejected: {e}\n{value:#}"),
    }
}

/// A controller that reads the cluster through its port every `period` (from the start) and
/// logs what `read` makes of each answer.
struct Probe<R> {
    period: Duration,
    next: Timestamp,
    log: Rc<RefCell<Vec<String>>>,
    read: R,
}

impl<R: FnMut(&SimCluster<'_>, Timestamp, &mut Vec<String>)> Controller for Probe<R> {
    fn name(&self) -> &str {
        "probe"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        self.next = now + self.period;
        let cluster = SimCluster::new(world);
        (self.read)(&cluster, now, &mut self.log.borrow_mut());
    }
}

/// Runs `s` with `seed` to its end, `configure` applied to the simulation first, with a
/// probe calling `read` every `period` seconds: the run's [`outcome`] and what the probe
/// logged.
pub fn run_with_probe(
    s: &Scenario,
    seed: u64,
    period: u64,
    configure: impl FnOnce(&mut Simulation),
    read: impl FnMut(&SimCluster<'_>, Timestamp, &mut Vec<String>) + 'static,
) -> (String, Vec<String>) {
    let mut sim = Simulation::new(s, seed);
    configure(&mut sim);
    let log = Rc::new(RefCell::new(Vec::new()));
    sim.add_controller(Box::new(Probe {
        period: Duration::from_secs(period),
        next: sim.now(),
        log: Rc::clone(&log),
        read,
    }));
    while sim.step() {}
    let seen = log.borrow().clone();
    (outcome(sim.world()), seen)
}

/// [`run_with_probe`] with a probe listing the nodes and logging every view it is handed
/// (content, resourceVersion and heartbeat), or the failure.
pub fn run_with_list_probe(
    s: &Scenario,
    seed: u64,
    period: u64,
    configure: impl FnOnce(&mut Simulation),
) -> (String, Vec<String>) {
    run_with_probe(
        s,
        seed,
        period,
        configure,
        |cluster, now, log| match block_on(cluster.list_nodes_shared()) {
            Some(Ok(nodes)) => {
                for n in nodes {
                    log.push(format!("{} {n:?}", now.as_millis()));
                }
            }
            other => log.push(format!("{} {:?}", now.as_millis(), other.map(|r| r.err()))),
        },
    )
}
