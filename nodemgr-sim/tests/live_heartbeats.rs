//! Heartbeats computed where the cluster port hands them out (`World::set_live_heartbeats`,
//! the default: the change feed's views and a patched node's carry the heartbeat the node
//! has now, and an instant at which only controllers that read nodes through the port run,
//! as the update executor, renews no heartbeat) change nothing: random clusters run once so
//! and once on the plain path (every node's heartbeat renewed before every controller, the
//! port reading the renewed ones) end with the same timeline, counters, recorded events and
//! cluster, and a probe that reads the feed and patches a node through the port at a random
//! period gets the same answers (the views with their resourceVersion and heartbeat) at every
//! one of its steps.
//!
//! Random clusters as in `tests/logged_feed.rs` (1–3 groups of 1–5 nodes, every approval
//! mode, nodes NotReady or dark, slow agents, API errors, a lagging watch cache, controller
//! restarts), with a random Lease period (1–40 s) and grace period (5–60 s), so that renewals
//! fall between, at and across the controllers' instants and dark nodes go silent.
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test live_heartbeats` runs more
//! cases (the default is 48).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::{ClusterRead, NodeApi, NodePatch, NodeRevision};
use nodemgr_sim::scenario::SimDuration;
use nodemgr_sim::{Controller, Scenario, SimCluster, Simulation, World, block_on};
use proptest::prelude::*;

mod support;
use support::{fault_case as case, fault_scenario, outcome, same_logs, same_outcomes};

/// Every `period`, reads the change feed through the cluster port (continuing from its
/// previous answer) and patches one node's annotation, logging what it got. Reads nodes only
/// through the port: no heartbeat renewed for it.
struct Probe {
    period: Duration,
    next: Timestamp,
    revision: Option<NodeRevision>,
    count: usize,
    log: Rc<RefCell<Vec<String>>>,
}

impl Controller for Probe {
    fn name(&self) -> &str {
        "heartbeat-probe"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn reads_heartbeats(&self) -> bool {
        false
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        self.next = now + self.period;
        self.count += 1;
        let names: Vec<String> = world.nodes.keys().cloned().collect();
        let cluster = SimCluster::new(world);
        let mut log = self.log.borrow_mut();
        match block_on(cluster.node_changes_since(self.revision)) {
            Some(Ok(changes)) => {
                log.push(format!(
                    "{} feed: revision {:?} resync {} removed {:?}",
                    now.as_millis(),
                    changes.revision,
                    changes.resync,
                    changes.removed
                ));
                for n in &changes.changed {
                    log.push(format!(
                        "  {} {} {:?}",
                        n.name, n.resource_version, n.last_heartbeat
                    ));
                }
                self.revision = changes.revision;
            }
            other => log.push(format!("{} {:?}", now.as_millis(), other.map(|r| r.err()))),
        }
        if names.is_empty() {
            return;
        }
        let name = &names[self.count % names.len()];
        let patch = NodePatch::new().set_annotation("probe", self.count.to_string());
        match block_on(cluster.patch_node_shared(name, &patch)) {
            Some(Ok(view)) => log.push(format!(
                "{} patched {} {} {:?}",
                now.as_millis(),
                view.name,
                view.resource_version,
                view.last_heartbeat
            )),
            other => log.push(format!("{} {:?}", now.as_millis(), other.map(|r| r.err()))),
        }
    }
}

fn run(s: &Scenario, seed: u64, period: u64, live: bool) -> (String, Vec<String>) {
    let mut sim = Simulation::new(s, seed);
    sim.world_mut().set_live_heartbeats(live);
    let log = Rc::new(RefCell::new(Vec::new()));
    let now = sim.now();
    sim.add_controller(Box::new(Probe {
        period: Duration::from_secs(period),
        next: now + Duration::from_secs(1),
        revision: None,
        count: 0,
        log: Rc::clone(&log),
    }));
    while sim.step() {}
    let seen = log.borrow().clone();
    (outcome(sim.world()), seen)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn heartbeats_computed_at_the_port_are_the_renewed_ones(
        c in case(),
        seed in 0u64..1000,
        period in 3u64..=17,
        lease in 1u64..=40,
        grace in 5u64..=60,
    ) {
        let mut s = fault_scenario("live-heartbeats", &c);
        s.heartbeat.lease_period = SimDuration(Duration::from_secs(lease));
        s.heartbeat.grace_period = SimDuration(Duration::from_secs(grace));
        let (live, live_log) = run(&s, seed, period, true);
        let (plain, plain_log) = run(&s, seed, period, false);
        same_outcomes(("live heartbeats", &live), ("renewed", &plain))?;
        same_logs(("live heartbeats", &live_log), ("renewed", &plain_log))?;
    }
}
