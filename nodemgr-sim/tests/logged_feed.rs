//! The change feed's log (`nodemgr_sim::api`, "Change feed": while the version table lines up
//! with the world's nodes, an answer looks only at the nodes the world's table logged as
//! handed out mutably since the previous one) changes nothing: random clusters run once with
//! the log and once with every node looked at at each answer
//! (`SimApiServer::set_logged_feed(false)`) end with the same timeline, counters, recorded
//! events and cluster, and a probe reading the feed through the cluster port at a random
//! period gets the same answers (revision, resync, the changed nodes' views with their
//! resourceVersion and heartbeat, the removed names) at every one of its steps.
//!
//! A second controller changes nodes behind the world's methods, as any controller may: a
//! label through `World::nodes`' `get_mut`, or every node's through `values_mut`, so that the
//! log is checked against changes only the table itself sees.
//!
//! Random clusters: 1–3 groups of 1–5 nodes, Automatic, Manual (with the operator's
//! approvals) and RollingUpdate (machines replaced: nodes removed and added), `maxConcurrent`
//! 1–2, 1–3 changes of every impact per group, and faults: nodes NotReady or dark, slow
//! agents, refused evictions, API errors, a lagging watch cache, controller restarts.
//!
//! `PROPTEST_CASES=500 cargo test --release -p nodemgr-sim --test logged_feed` runs more
//! cases (the default is 48).

use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::model::Timestamp;
use nodemgr_core::ports::{ClusterRead, NodeRevision};
use nodemgr_sim::{Controller, Scenario, Simulation, World, block_on};
use proptest::prelude::*;

mod support;
use support::{fault_case as case, fault_scenario, run_with_probe, same_logs, same_outcomes};

/// Changes nodes directly every `period`: the `k`-th time, a label of one node through
/// `get_mut` (of every node through `values_mut` every fifth time).
struct Meddler {
    period: Duration,
    next: Timestamp,
    count: usize,
}

impl Controller for Meddler {
    fn name(&self) -> &str {
        "meddler"
    }

    fn next_run(&self) -> Option<Timestamp> {
        Some(self.next)
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        self.next = now + self.period;
        self.count += 1;
        let value = format!("v{}", self.count);
        if self.count.is_multiple_of(5) {
            for n in world.nodes.values_mut() {
                Arc::make_mut(&mut n.node)
                    .labels
                    .insert("meddled".into(), value.clone());
            }
            return;
        }
        let names: Vec<String> = world.nodes.keys().cloned().collect();
        if names.is_empty() {
            return;
        }
        let name = &names[self.count % names.len()];
        if let Some(n) = world.nodes.get_mut(name) {
            Arc::make_mut(&mut n.node)
                .labels
                .insert("meddled".into(), value);
        }
    }
}

/// Runs `s` with the feed's log on or off, a probe reading the change feed every `period`
/// seconds from the revision of its previous answer, and a [`Meddler`] every `meddle` seconds
/// (none when 0).
fn run(s: &Scenario, seed: u64, period: u64, meddle: u64, logged: bool) -> (String, Vec<String>) {
    let configure = |sim: &mut Simulation| {
        sim.world_mut().api.set_logged_feed(logged);
        if meddle > 0 {
            sim.add_controller(Box::new(Meddler {
                period: Duration::from_secs(meddle),
                next: sim.now() + Duration::from_secs(meddle),
                count: 0,
            }));
        }
    };
    let mut revision: Option<NodeRevision> = None;
    run_with_probe(
        s,
        seed,
        period,
        configure,
        move |cluster, now, log| match block_on(cluster.node_changes_since(revision)) {
            Some(Ok(changes)) => {
                log.push(format!(
                    "{} since {:?}: revision {:?} resync {} removed {:?}",
                    now.as_millis(),
                    revision,
                    changes.revision,
                    changes.resync,
                    changes.removed
                ));
                for n in &changes.changed {
                    log.push(format!("  {n:?}"));
                }
                revision = changes.revision;
            }
            other => log.push(format!("{} {:?}", now.as_millis(), other.map(|r| r.err()))),
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn the_logged_feed_answers_as_the_walk_over_every_node(
        c in case(),
        seed in 0u64..1000,
        period in 3u64..=17,
        meddle in prop::sample::select(vec![0u64, 0, 7, 23, 61]),
    ) {
        let s = fault_scenario("logged-feed", &c);
        let (logged, logged_log) = run(&s, seed, period, meddle, true);
        let (walked, walked_log) = run(&s, seed, period, meddle, false);
        same_outcomes(("logged feed", &logged), ("walk", &walked))?;
        same_logs(("logged feed", &logged_log), ("walk", &walked_log))?;
    }
}
