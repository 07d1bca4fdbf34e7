//! The run loop: a [`World`], the controllers, the scripted events and a virtual clock that
//! jumps from one instant to the next (the earliest of: a scripted event, a controller's next
//! run, the world's own next change). Nothing waits for wall time, so hours of virtual time
//! take milliseconds.

use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::impact::impact_of;
use nodemgr_core::model::Timestamp;
use nodemgr_core::update::UpdateMarks;

use crate::api::WatchLag;
use crate::controller::{Controller, UpdateController};
use crate::scenario::{EventSpec, ImpactKind, Scenario, group_spec, merge_patch};
use crate::timeline::Timeline;
use crate::world::{ApiFault, EvictionRefusal, World};

/// A simulation in progress.
pub struct Simulation {
    world: World,
    controllers: Vec<Box<dyn Controller>>,
    /// Per controller: installed by [`Simulation::new`] (changes the world only through its
    /// methods and the ports, which keep the world's indexes current).
    builtin: Vec<bool>,
    events: Vec<EventSpec>,
    next_event: usize,
    end: Timestamp,
    started: bool,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("now", &self.world.now)
            .field("end", &self.end)
            .field(
                "controllers",
                &self
                    .controllers
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// The world of `scenario` with its controllers: the update executor (unless
    /// `updates: false`), and the fencing and lifecycle controllers when configured.
    pub fn new(scenario: &Scenario, seed: u64) -> Self {
        let world = World::from_scenario(scenario, seed);
        let start = world.start;
        let mut sim = Self::bare(scenario, world);
        if scenario.updates {
            sim.add_builtin(Box::new(UpdateController::new(
                start,
                scenario.reconcile_period.0,
            )));
        }
        if let Some(scaling) = crate::scaling::install(&mut sim.world, scenario, seed) {
            sim.add_builtin(Box::new(scaling));
        }
        if let Some(spec) = &scenario.fencing {
            sim.add_builtin(Box::new(crate::health::FencingController::new(start, spec)));
        }
        if let Some(spec) = &scenario.lifecycle {
            sim.add_builtin(Box::new(crate::health::LifecycleController::new(
                start,
                spec,
                scenario.heartbeat.grace_period.0,
            )));
        }
        sim
    }

    /// The world of `scenario` and its scripted events, without any controller.
    pub fn bare(scenario: &Scenario, world: World) -> Self {
        let mut events = scenario.events.clone();
        events.sort_by_key(|e| e.at);
        let end = world.start + scenario.duration.0;
        let mut world = world;
        // Watch lag is known up front so the past it shows is recorded (see `crate::api`).
        for e in &events {
            if let Some(l) = &e.watch_lag {
                let from = world.start + e.at.0;
                world.api.add_watch_lag(WatchLag {
                    from,
                    until: from + l.duration.0,
                    lag: l.lag.0,
                });
                world.observe_every_instant();
            }
        }
        Self {
            world,
            controllers: Vec::new(),
            builtin: Vec::new(),
            events,
            next_event: 0,
            end,
            started: false,
        }
    }

    /// Adds a controller; controllers run in the order they were added at each instant. It may
    /// change the world in any way: the world re-reads its nodes and pods after each of its
    /// steps ([`World::invalidate_indexes`]).
    pub fn add_controller(&mut self, controller: Box<dyn Controller>) {
        self.controllers.push(controller);
        self.builtin.push(false);
    }

    /// Adds one of the simulator's own controllers, which keep the world's indexes current.
    fn add_builtin(&mut self, controller: Box<dyn Controller>) {
        self.controllers.push(controller);
        self.builtin.push(true);
    }

    /// The world. Its nodes' heartbeats ([`crate::world::SimNode::last_heartbeat`]) are
    /// current after an instant at which a controller that reads them from the world ran
    /// ([`crate::Controller::reads_heartbeats`]: not the update executor, which computes them
    /// through the cluster port), after the last instant, and after
    /// [`Simulation::run_until`].
    pub fn world(&self) -> &World {
        &self.world
    }

    /// The world, to change it between steps (it re-reads its nodes and pods before the
    /// next one, [`World::invalidate_indexes`]).
    pub fn world_mut(&mut self) -> &mut World {
        self.world.renew_heartbeats();
        self.world.invalidate_indexes();
        &mut self.world
    }

    /// Virtual now.
    pub fn now(&self) -> Timestamp {
        self.world.now
    }

    /// When the run ends.
    pub fn end(&self) -> Timestamp {
        self.end
    }

    fn next_instant(&self) -> Timestamp {
        let now = self.world.now;
        let mut next = self.end;
        if let Some(e) = self.events.get(self.next_event) {
            next = next.min(self.world.start + e.at.0);
        }
        if let Some(t) = self.world.next_deadline() {
            next = next.min(t);
        }
        for c in &self.controllers {
            if let Some(t) = c.next_run() {
                next = next.min(t);
            }
        }
        next.max(now + Duration::from_millis(1))
    }

    /// Advances to the next instant and runs it. Returns `false` once past the end.
    pub fn step(&mut self) -> bool {
        let now = if self.started {
            self.next_instant()
        } else {
            self.started = true;
            self.world.now
        };
        if now > self.end {
            return false;
        }
        self.world.now = now;
        while let Some(e) = self.events.get(self.next_event) {
            if self.world.start + e.at.0 > now {
                break;
            }
            let e = e.clone();
            self.next_event += 1;
            self.apply_event(&e);
        }
        self.world.step();
        // Heartbeats are brought up to date where something reads them: the watch cache, the
        // controllers that read them from the world, whoever looks at the world after the last
        // instant. The cluster port computes the ones it hands out (`crate::SimCluster`).
        let readers = self.world.every_instant_observed
            || now == self.end
            || self.controllers.iter().any(|c| {
                (c.reads_heartbeats() || !self.world.live_heartbeats)
                    && c.next_run().is_some_and(|t| t <= now)
            });
        if readers {
            self.world.renew_heartbeats();
        }
        let w = &mut self.world;
        let nodes = &w.nodes;
        w.api.observe(now, || {
            nodes.values().map(crate::world::SimNode::view).collect()
        });
        for (c, builtin) in self.controllers.iter_mut().zip(&self.builtin) {
            if c.next_run().is_some_and(|t| t <= now) {
                c.step(&mut self.world, now);
                if !builtin {
                    self.world.invalidate_indexes();
                }
            }
        }
        true
    }

    /// Runs until `t` (inclusive) or the end.
    pub fn run_until(&mut self, t: Timestamp) {
        while self.next_instant_or_start() <= t.min(self.end) {
            if !self.step() {
                break;
            }
        }
        self.world.renew_heartbeats();
    }

    fn next_instant_or_start(&self) -> Timestamp {
        if self.started {
            self.next_instant()
        } else {
            self.world.now
        }
    }

    /// Runs to the end and returns the timeline.
    pub fn run_to_end(mut self) -> Timeline {
        while self.step() {}
        self.world.timeline
    }

    /// Carries out one scripted event at the current time.
    fn apply_event(&mut self, e: &EventSpec) {
        let w = &mut self.world;
        let now = w.now;
        let until = |d: Option<crate::scenario::SimDuration>| d.map(|d| now + d.0);
        if let Some(c) = &e.change {
            let Some(g) = w.groups.get(&c.group) else {
                return;
            };
            let old = g.group.spec.clone();
            let mut impact = ImpactKind::None;
            let mut what = c.description.clone().unwrap_or_default();
            if let Some(patch) = &c.spec {
                let mut value = serde_json::to_value(&old).unwrap_or_default();
                merge_patch(&mut value, patch);
                if let Ok(new) = group_spec(&value, "change.spec") {
                    let computed = impact_of(&old, &new);
                    impact = computed.kind();
                    if what.is_empty() {
                        what = computed
                            .changes
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ");
                    }
                    if let Some(g) = w.groups.get_mut(&c.group) {
                        Arc::make_mut(&mut g.group).spec = new;
                    }
                }
            }
            if let Some(i) = c.impact {
                impact = i;
            }
            if what.is_empty() {
                what = "configuration change".into();
            }
            w.change_group(&c.group, impact, &what);
        }
        if let Some(a) = &e.approve_disruption {
            let nodes: Vec<String> = match (&a.node, &a.group) {
                (Some(n), _) => vec![n.clone()],
                (None, Some(g)) => w
                    .nodes
                    .values()
                    .filter(|n| &n.group == g)
                    .map(|n| n.node.name.clone())
                    .collect(),
                (None, None) => Vec::new(),
            };
            for name in nodes {
                let Some(n) = w.nodes.get_mut(&name) else {
                    continue;
                };
                let marks = UpdateMarks::of(&n.node);
                if marks.disruption_required && !marks.disruption_approved {
                    let node = std::sync::Arc::make_mut(&mut n.node);
                    node.annotations
                        .remove(nodemgr_core::model::keys::ANNOTATION_DISRUPTION_REQUIRED);
                    node.annotations.insert(
                        nodemgr_core::model::keys::ANNOTATION_DISRUPTION_APPROVED.into(),
                        String::new(),
                    );
                    w.wake_agent(&name);
                    w.record(
                        "operator.disruption-approved",
                        Some(&name),
                        None,
                        "the operator approves the disruption by hand",
                    );
                } else {
                    w.record(
                        "operator.nothing-to-approve",
                        Some(&name),
                        None,
                        "the operator finds no disruption request on the node",
                    );
                }
            }
        }
        if let Some(sel) = &e.node_not_ready {
            for name in w.select_nodes(sel) {
                let t = until(sel.duration).unwrap_or(Timestamp(i64::MAX));
                if let Some(n) = w.nodes.get_mut(&name) {
                    n.not_ready_until = Some(t);
                }
                w.touch_node(&name);
                let how_long = sel.duration.map_or("until the end".to_owned(), |d| {
                    format!("for {}s", d.0.as_secs())
                });
                w.record(
                    "fault.node-not-ready",
                    Some(&name),
                    None,
                    format!("kubelet reports NotReady {how_long}"),
                );
            }
        }
        if let Some(sel) = &e.node_dark {
            for name in w.select_nodes(sel) {
                if let Some(n) = w.nodes.get_mut(&name) {
                    n.dark_since = Some(now);
                    n.dark_until = until(sel.duration);
                }
                w.touch_node(&name);
                let how_long = sel.duration.map_or("until the end".to_owned(), |d| {
                    format!("for {}s", d.0.as_secs())
                });
                w.record(
                    "fault.node-dark",
                    Some(&name),
                    None,
                    format!("node goes dark (no heartbeats, unreachable) {how_long}"),
                );
            }
        }
        if let Some(r) = &e.refuse_evictions {
            w.refusals.push(EvictionRefusal {
                from: now,
                until: until(r.duration),
                pod: r.pod.clone(),
                selector: r.selector.clone(),
            });
            w.record(
                "fault.evictions-refused",
                None,
                r.pod.as_deref(),
                "evictions are refused (HTTP 429)",
            );
        }
        if let Some(a) = &e.api_errors {
            w.api_faults.push(ApiFault {
                from: now,
                until: now + a.duration.0,
                operations: a.operations.clone(),
                error: a.error,
            });
            w.record(
                "fault.api-errors",
                None,
                None,
                format!(
                    "API answers {:?} to {:?} for {}s",
                    a.error,
                    if a.operations.is_empty() {
                        "every call".to_owned()
                    } else {
                        format!("{:?}", a.operations)
                    },
                    a.duration.0.as_secs()
                ),
            );
        }
        if let Some(s) = &e.scale_workload {
            crate::scaling::scale_workload(w, s);
        }
        if let Some(l) = &e.watch_lag {
            // The window itself was registered by `Simulation::bare`.
            w.record(
                "fault.watch-lag",
                None,
                None,
                format!(
                    "the controllers' watch of Nodes relists from a cache {}ms behind and lags as much for {}s",
                    l.lag.0.as_millis(),
                    l.duration.0.as_secs()
                ),
            );
        }
        if let Some(r) = &e.restart_controllers {
            w.record(
                "fault.controller-restart",
                None,
                None,
                format!(
                    "the controllers restart; their clock is {}ms off",
                    r.clock_skew.millis()
                ),
            );
            for c in &mut self.controllers {
                c.restart(now, r.clock_skew);
            }
        }
        if let Some(s) = &e.slow_agent {
            if let Some(n) = w.nodes.get_mut(&s.node) {
                n.extra_agent_delay = s.extra_delay.0;
            }
            w.record(
                "fault.slow-agent",
                Some(&s.node),
                None,
                format!("agent takes {}s longer", s.extra_delay.0.as_secs()),
            );
        }
    }
}

/// Runs `scenario` with `seed` to the end and returns its timeline.
pub fn run(scenario: &Scenario, seed: u64) -> Timeline {
    Simulation::new(scenario, seed).run_to_end()
}
