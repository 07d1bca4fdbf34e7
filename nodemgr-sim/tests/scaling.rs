//! Scaling scenarios (`examples/scenarios/`): each story asserted from its timeline; and the
//! per-zone bounds (never above `maxPerZone`, never below `minPerZone` outside failures in
//! flight) checked at every instant of simulated runs, by a probe controller.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers: a failed setup step should panic

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use nodemgr_core::model::{Timestamp, keys};
use nodemgr_sim::scaling::DRAIN_SOURCE_SCALING;
use nodemgr_sim::{Controller, Scenario, Simulation, Timeline, TimelineEvent, World};

fn load(name: &str) -> Scenario {
    let path = format!(
        "{}/../examples/scenarios/{name}.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    Scenario::from_yaml(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const SCENARIOS: [&str; 4] = [
    "scale-burst-priority",
    "fixed-count-zone-loss",
    "class-change-surge",
    "standby-burst",
];

fn secs(e: &TimelineEvent) -> f64 {
    e.t()
}

fn of<'a>(t: &'a Timeline, kind: &'a str) -> Vec<&'a TimelineEvent> {
    t.of_kind(kind).collect()
}

/// Per-zone violations a probe saw, with the time.
type Violations = Rc<RefCell<Vec<String>>>;

/// Checks the per-zone bounds of every CloudEphemeral group with `cloudInstances` at every
/// instant (the probe runs after the other controllers):
/// * nodes of the group's current class that are not leaving never exceed `maxPerZone`;
/// * nodes (leaving ones included) plus machines ordered never exceed `maxPerZone` +
///   `maxSurgePerZone` (the surge of a replacement);
/// * unless a failure is in flight in the zone (a node not Ready, a chaos victim, a node
///   removed for failure), the Ready nodes not leaving plus the machines ordered are at least
///   `minPerZone`, one pass after the start.
struct BoundsProbe {
    next: Timestamp,
    classes: Vec<nodemgr_core::scaling::InstanceClass>,
    violations: Violations,
}

fn counts_from_timeline(world: &World) -> BTreeMap<(String, String), i64> {
    // Machines ordered minus nodes joined, per (group, zone), from the timeline.
    let mut upcoming: BTreeMap<(String, String), i64> = BTreeMap::new();
    for e in &world.timeline.events {
        match e.kind.as_ref() {
            "machineCreated" => {
                let group = e.group.as_deref().unwrap_or_default().to_owned();
                let count: i64 = e
                    .message
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let zone = e
                    .message
                    .split(" ordered in ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .unwrap_or_default()
                    .to_owned();
                *upcoming.entry((group, zone)).or_insert(0) += count;
            }
            "nodeJoined" => {
                let group = e.group.as_deref().unwrap_or_default().to_owned();
                let zone = e
                    .message
                    .split(" in ")
                    .nth(1)
                    .and_then(|s| s.split_whitespace().next())
                    .unwrap_or_default()
                    .to_owned();
                *upcoming.entry((group, zone)).or_insert(0) -= 1;
            }
            _ => {}
        }
    }
    upcoming
}

impl Controller for BoundsProbe {
    fn name(&self) -> &str {
        "bounds-probe"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        self.next = now + std::time::Duration::from_secs(1);
        let upcoming = counts_from_timeline(world);
        let settled = now.saturating_since(world.start) > std::time::Duration::from_secs(10);
        let failed_removals: BTreeSet<String> = world
            .timeline
            .events
            .iter()
            .filter(|e| e.kind == "removeNode" && e.message.contains("failed"))
            .filter_map(|e| e.node.as_deref().map(str::to_owned))
            .collect();
        for (name, g) in &world.groups {
            let Some(ci) = &g.group.spec.cloud_instances else {
                continue;
            };
            let min = ci.min_per_zone.unwrap_or(0).max(0);
            let max = ci.max_per_zone.unwrap_or(0).max(min);
            let surge = ci.max_surge_per_zone().max(1);
            let checksum = nodemgr_core::scaling::class_of(&g.group, &self.classes)
                .map(nodemgr_core::scaling::InstanceClass::checksum);
            for zone in ci.zones.clone().unwrap_or_else(|| g.zones.clone()) {
                let nodes: Vec<_> = world
                    .nodes
                    .values()
                    .filter(|n| &n.group == name && n.zone == zone)
                    .collect();
                let leaving = |n: &nodemgr_sim::world::SimNode| {
                    n.node
                        .annotations
                        .get(keys::ANNOTATION_DRAINING)
                        .or_else(|| n.node.annotations.get(keys::ANNOTATION_DRAINED))
                        .is_some_and(|s| s == DRAIN_SOURCE_SCALING)
                        || n.node.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM)
                };
                let current = nodes
                    .iter()
                    .filter(|n| !leaving(n))
                    .filter(|n| {
                        n.node
                            .annotations
                            .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM)
                            .map(String::as_str)
                            == checksum.as_deref()
                    })
                    .count() as i64;
                let up = upcoming
                    .get(&(name.clone(), zone.clone()))
                    .copied()
                    .unwrap_or(0);
                let at = now.saturating_since(world.start).as_secs();
                if current > max {
                    self.violations.borrow_mut().push(format!(
                        "t={at}s {name}/{zone}: {current} current nodes > maxPerZone {max}"
                    ));
                }
                if nodes.len() as i64 + up > max + surge {
                    self.violations.borrow_mut().push(format!(
                        "t={at}s {name}/{zone}: {} nodes + {up} ordered > maxPerZone {max} + surge {surge}",
                        nodes.len()
                    ));
                }
                let failure = nodes.iter().any(|n| {
                    !n.node.ready
                        || n.node.has_annotation(keys::ANNOTATION_CHAOS_MONKEY_VICTIM)
                        || failed_removals.contains(&n.node.name)
                });
                let healthy = nodes.iter().filter(|n| n.node.ready && !leaving(n)).count() as i64;
                if settled && !failure && healthy + up < min {
                    self.violations.borrow_mut().push(format!(
                        "t={at}s {name}/{zone}: {healthy} Ready + {up} ordered < minPerZone {min}"
                    ));
                }
            }
        }
    }
}

/// Runs `scenario` with `seed` and a bounds probe; returns the timeline and the violations.
fn run_probed(scenario: &Scenario, seed: u64) -> (Timeline, Vec<String>) {
    let mut sim = Simulation::new(scenario, seed);
    let violations: Violations = Rc::default();
    let classes = scenario
        .scaling
        .as_ref()
        .map(|s| s.instance_classes().unwrap())
        .unwrap_or_default();
    sim.add_controller(Box::new(BoundsProbe {
        next: sim.now(),
        classes,
        violations: violations.clone(),
    }));
    let timeline = sim.run_to_end();
    let v = violations.borrow().clone();
    (timeline, v)
}

fn run(name: &str) -> (Timeline, World) {
    let scenario = load(name);
    let mut sim = Simulation::new(&scenario, 1);
    let end = sim.end();
    sim.run_until(end);
    let world = sim.world().clone();
    (world.timeline.clone(), world)
}

fn nodes_of<'a>(world: &'a World, group: &str, zone: &str) -> Vec<&'a str> {
    world
        .nodes
        .values()
        .filter(|n| n.group == group && n.zone == zone)
        .map(|n| n.node.name.as_str())
        .collect()
}

fn group_of(e: &TimelineEvent) -> &str {
    e.group.as_deref().unwrap_or_default()
}

#[test]
fn burst_scales_two_groups_by_priority_and_back_down() {
    let (t, world) = run("scale-burst-priority");
    let ups = of(&t, "scaleUp");
    assert!(!ups.is_empty(), "{}", t.to_text());
    // The burst arrives at 5 min; the scale-up is decided in the same pass.
    assert!(ups.iter().all(|e| (300.0..310.0).contains(&secs(e))));
    // fast (priority 10) is grown to its maximum of 3 per zone: 2 new nodes per zone; spare
    // (priority 0) only takes what fast cannot.
    let new_of = |g: &str| -> u32 {
        ups.iter()
            .filter(|e| group_of(e) == g)
            .map(|e| {
                e.message
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap()
            })
            .sum()
    };
    assert_eq!(new_of("fast"), 4, "{}", t.to_text());
    assert!(new_of("spare") >= 4, "{}", t.to_text());
    // Every batch pod ran: 20 scheduled after the burst.
    let scheduled_batch = t
        .events
        .iter()
        .filter(|e| e.kind == "pod.scheduled" && secs(e) >= 300.0 && secs(e) < 2400.0)
        .filter(|e| e.pod.as_deref().is_some_and(|p| p.contains("batch")))
        .count();
    assert_eq!(scheduled_batch, 20, "{}", t.to_text());
    assert!(of(&t, "unschedulable").is_empty());
    // The load leaves at 40 min; scale-down removes every spare node and fast goes back to
    // one node per zone, nothing before the load left.
    let downs = of(&t, "scaleDown");
    assert!(downs.iter().all(|e| secs(e) >= 2400.0), "{}", t.to_text());
    for zone in ["zone-a", "zone-b"] {
        assert_eq!(nodes_of(&world, "spare", zone).len(), 0, "{}", t.to_text());
        assert_eq!(nodes_of(&world, "fast", zone).len(), 1, "{}", t.to_text());
    }
    // Removal went through the drain, and the machine was deleted after it.
    for e in &downs {
        let node = e.node.as_deref().unwrap();
        let drained = t.first("drain.finished", node).expect("drained");
        let deleted = t.first("machineDeleted", node).expect("deleted");
        assert!(secs(e) <= secs(drained) && secs(drained) <= secs(deleted));
    }
    // web kept running: both replicas bound at the end.
    let web_bound = world
        .pods
        .values()
        .filter(|p| p.pod.name.starts_with("web-") && p.pod.node_name.is_some())
        .count();
    assert_eq!(web_bound, 2);
}

#[test]
fn fixed_count_group_replaces_a_lost_zone() {
    let (t, world) = run("fixed-count-zone-loss");
    // Only zone-b changes.
    for e in of(&t, "machineCreated") {
        assert!(e.message.contains("zone-b"), "{}", e.message);
        // Failed nodes count as failed 3 min after their last heartbeat (~5 min).
        assert!(secs(e) >= 7.0 * 60.0, "{}", t.to_text());
    }
    let removed: Vec<&str> = of(&t, "removeNode")
        .iter()
        .map(|e| e.node.as_deref().unwrap())
        .collect();
    assert_eq!(removed.len(), 2, "{}", t.to_text());
    assert!(removed.iter().all(|n| *n == "fixed-1" || *n == "fixed-4"));
    assert_eq!(of(&t, "nodeJoined").len(), 2);
    for zone in ["zone-a", "zone-b", "zone-c"] {
        let nodes = nodes_of(&world, "fixed", zone);
        assert_eq!(nodes.len(), 2, "{zone}: {nodes:?}");
        assert!(
            nodes.iter().all(|n| world.nodes[*n].node.ready),
            "{zone} all Ready"
        );
    }
    // The app pods of the lost zone came back elsewhere: 6 bound at the end.
    let bound = world
        .pods
        .values()
        .filter(|p| p.pod.name.starts_with("app-") && p.pod.node_name.is_some())
        .count();
    assert_eq!(bound, 6);
}

#[test]
fn class_change_surges_new_before_old() {
    let (t, world) = run("class-change-surge");
    let surges = of(&t, "surgeReplace");
    assert_eq!(surges.len(), 4, "{}", t.to_text());
    for zone in ["zone-a", "zone-b"] {
        // In each zone: the first new machine is ordered before any old node goes, and each
        // old node goes only after a new node of its zone joined.
        let created: Vec<f64> = of(&t, "machineCreated")
            .iter()
            .filter(|e| e.message.contains(zone))
            .map(|e| secs(e))
            .collect();
        let joined: Vec<f64> = of(&t, "nodeJoined")
            .iter()
            .filter(|e| e.message.contains(zone))
            .map(|e| secs(e))
            .collect();
        let replaced: Vec<f64> = surges
            .iter()
            .filter(|e| e.message.contains(zone))
            .map(|e| secs(e))
            .collect();
        assert_eq!(replaced.len(), 2);
        assert!(created[0] < replaced[0]);
        for (k, r) in replaced.iter().enumerate() {
            assert!(
                joined.len() > k && joined[k] <= *r,
                "{zone}: {}",
                t.to_text()
            );
        }
        // Replacements one at a time (maxSurgePerZone 1): never two ordered in one go.
        assert!(
            of(&t, "machineCreated")
                .iter()
                .all(|e| e.message.starts_with("1 machine"))
        );
        // At the end: two nodes of the new class.
        let nodes = nodes_of(&world, "app", zone);
        assert_eq!(nodes.len(), 2, "{zone}: {nodes:?}");
        let large = nodemgr_core::scaling::InstanceClass::new("InstanceClass", "large", 8, 32);
        for n in nodes {
            assert_eq!(
                world.nodes[n]
                    .node
                    .annotations
                    .get(keys::ANNOTATION_INSTANCE_CLASS_CHECKSUM),
                Some(&large.checksum())
            );
        }
    }
}

#[test]
fn standby_absorbs_the_burst() {
    let (t, world) = run("standby-burst");
    // Standby nodes: ordered at start for the two holders, one per zone.
    let first_ups: Vec<&TimelineEvent> = of(&t, "scaleUp")
        .into_iter()
        .filter(|e| secs(e) < 60.0)
        .collect();
    assert_eq!(first_ups.len(), 2, "{}", t.to_text());
    // The burst (10 min) lands at once on the standby nodes, preempting the holders, before
    // any machine ordered for it could join.
    let burst: Vec<&TimelineEvent> = t
        .events
        .iter()
        .filter(|e| e.kind == "pod.scheduled")
        .filter(|e| e.pod.as_deref().is_some_and(|p| p.contains("/burst-")))
        .collect();
    assert_eq!(burst.len(), 4, "{}", t.to_text());
    assert!(burst.iter().all(|e| secs(e) < 610.0), "{}", t.to_text());
    let preempted = of(&t, "standbyPreempted");
    assert_eq!(preempted.len(), 2, "{}", t.to_text());
    // Scale-up replaces the standby: new machines ordered after the burst, holders bound again.
    assert!(of(&t, "scaleUp").iter().any(|e| secs(e) >= 600.0));
    let holders_bound = world
        .pods
        .values()
        .filter(|p| {
            p.pod.labels.get("app").map(String::as_str) == Some(keys::STANDBY_HOLDER_APP)
                && p.pod.node_name.is_some()
        })
        .count();
    assert_eq!(holders_bound, 2, "{}", t.to_text());
    assert!(of(&t, "unschedulable").is_empty());
}

#[test]
fn pods_no_group_can_host_are_reported_once() {
    let text = r#"
duration: 5m
groups:
  - name: w
    nodes: 1
    spec:
      cloudInstances: {classReference: {name: small}, minPerZone: 1, maxPerZone: 3}
workloads:
  - name: huge
    replicas: 2
    requests: {cpu: "64"}
scaling:
  classes: [{name: small, cpu: "2", memory: 4Gi}]
"#;
    let t = Simulation::new(&Scenario::from_yaml(text).unwrap(), 1).run_to_end();
    let u = of(&t, "unschedulable");
    assert_eq!(u.len(), 2, "{}", t.to_text());
    assert!(
        u[0].message.contains("insufficient cpu"),
        "{}",
        u[0].message
    );
    assert!(of(&t, "scaleUp").is_empty());
}

#[test]
fn scaling_section_errors_name_the_field() {
    let base = "duration: 5m\ngroups:\n  - name: w\n    nodes: 1\n    spec:\n      cloudInstances: {classReference: {name: small}, minPerZone: 0, maxPerZone: 1}\n";
    let err = |extra: &str| {
        Scenario::from_yaml(&format!("{base}{extra}"))
            .unwrap_err()
            .to_string()
    };
    assert!(
        err("scaling:\n  classes: [{name: big, cpu: \"2\", memory: 4Gi}]\n")
            .contains("groups[0].spec.cloudInstances.classReference")
    );
    assert!(
        err("scaling:\n  classes: [{name: small, cpu: lots, memory: 4Gi}]\n")
            .contains("scaling.classes[0].cpu")
    );
    assert!(
        err("scaling:\n  classes: [{name: small, cpu: \"2\", memory: 4Gi}]\nevents:\n  - at: 1m\n    scaleWorkload: {workload: nope, replicas: 2}\n")
            .contains("events[0].scaleWorkload.workload")
    );
    assert!(
        err("updates: false\nscaling:\n  classes: [{name: small, cpu: \"2\", memory: 4Gi}]\n")
            .starts_with("updates:")
    );
}

const CHAOS: &str = r#"
duration: 3h
provisionDelay: 2m
groups:
  - name: monkey
    nodes: 4
    zones: [zone-a, zone-b]
    spec:
      cloudInstances: {classReference: {name: medium}, minPerZone: 2, maxPerZone: 3}
      chaos: {mode: DrainAndDelete, period: 30m}
workloads:
  - name: app
    replicas: 4
    requests: {cpu: 500m, memory: 512Mi}
scaling:
  classes: [{name: medium, cpu: "4", memory: 16Gi}]
"#;

#[test]
fn chaos_drains_one_victim_at_a_time_and_the_group_recovers() {
    let scenario = Scenario::from_yaml(CHAOS).unwrap();
    let (t, violations) = run_probed(&scenario, 3);
    assert!(violations.is_empty(), "{violations:?}");
    let victims = of(&t, "chaosVictim");
    assert!(victims.len() >= 3, "{}", t.to_text());
    // Never a second victim while one is in flight: each victim's machine is deleted before
    // the next is chosen.
    for pair in victims.windows(2) {
        let first = pair[0].node.as_deref().unwrap();
        let deleted = t.first("machineDeleted", first).expect("victim deleted");
        assert!(secs(deleted) <= secs(pair[1]));
    }
}

#[test]
fn bounds_hold_at_every_instant_of_every_scenario() {
    for name in SCENARIOS {
        let scenario = load(name);
        for seed in 1..4 {
            let (_, violations) = run_probed(&scenario, seed);
            assert!(violations.is_empty(), "{name} seed {seed}: {violations:?}");
        }
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]

        /// Random bursts and departures against two groups of random bounds, with a zone
        /// losing nodes: the per-zone bounds hold at every instant.
        #[test]
        fn bounds_hold_under_random_load(
            seed in any::<u64>(),
            min_a in 0i64..2, extra_a in 0i64..3,
            min_b in 0i64..2, extra_b in 0i64..3,
            surge in 0i64..2,
            bursts in prop::collection::vec((1u64..60, 0usize..30), 1..4),
            dark in prop::bool::ANY,
        ) {
            let mut events = String::new();
            for (minute, replicas) in &bursts {
                events.push_str(&format!(
                    "  - at: {minute}m\n    scaleWorkload: {{workload: load, replicas: {replicas}}}\n"
                ));
            }
            if dark {
                events.push_str("  - at: 20m\n    nodeDark: {zone: zone-b, count: 1}\n");
            }
            let text = format!(
                r#"
duration: 90m
groups:
  - name: a
    nodes: 2
    zones: [zone-a, zone-b]
    spec:
      cloudInstances: {{classReference: {{name: medium}}, minPerZone: {min_a}, maxPerZone: {max_a}, priority: 5, maxSurgePerZone: {surge}}}
  - name: b
    nodes: 0
    zones: [zone-a, zone-b]
    spec:
      cloudInstances: {{classReference: {{name: medium}}, minPerZone: {min_b}, maxPerZone: {max_b}, maxSurgePerZone: {surge}}}
workloads:
  - name: load
    replicas: 0
    requests: {{cpu: 1500m, memory: 2Gi}}
events:
{events}scaling:
  failedAfter: 3m
  scaleDownUnneededTime: 3m
  scaleDownDelayAfterAdd: 3m
  classes: [{{name: medium, cpu: "4", memory: 16Gi}}]
"#,
                max_a = min_a + extra_a,
                max_b = min_b + extra_b,
            );
            let scenario = Scenario::from_yaml(&text).unwrap();
            let (_, violations) = run_probed(&scenario, seed);
            prop_assert!(violations.is_empty(), "{violations:?}\n{text}");
        }
    }
}

#[test]
fn zone_spread_opens_nodes_across_zones() {
    // One node in zone-a holds room for every replica, but the workload spreads over three
    // zones at most one pod apart (minDomains 3: while fewer zones have nodes, the minimum is
    // 0): one pod binds at once, the plan opens nodes in zone-b and zone-c, and the pods end
    // 2/2/2.
    let text = r#"
duration: 10m
provisionDelay: 1m
groups:
  - name: w
    nodes: 1
    zones: [zone-a, zone-b, zone-c]
    capacity: {cpu: "16", memory: 64Gi, pods: "110"}
    spec:
      cloudInstances:
        classReference: {name: medium}
        zones: [zone-a, zone-b, zone-c]
        minPerZone: 0
        maxPerZone: 2
workloads:
  - name: web
    replicas: 0
    requests: {cpu: 500m, memory: 512Mi}
events:
  - at: 1m
    scaleWorkload: {workload: web, replicas: 6}
scaling:
  classes: [{name: medium, cpu: "4", memory: 16Gi}]
  pods:
    - {workload: web, zoneSpread: {maxSkew: 1, minDomains: 3}}
"#;
    let mut sim = Simulation::new(&Scenario::from_yaml(text).unwrap(), 1);
    let end = sim.end();
    sim.run_until(end);
    let world = sim.world();
    let mut per_zone: BTreeMap<String, usize> = BTreeMap::new();
    for p in world.pods.values() {
        if p.pod.labels.get("app").map(String::as_str) != Some("web") {
            continue;
        }
        let node = p.pod.node_name.as_deref().expect("every web pod bound");
        *per_zone.entry(world.nodes[node].zone.clone()).or_default() += 1;
    }
    assert_eq!(
        per_zone,
        [
            ("zone-a".to_string(), 2),
            ("zone-b".to_string(), 2),
            ("zone-c".to_string(), 2)
        ]
        .into(),
        "{}",
        world.timeline.to_text()
    );
}
