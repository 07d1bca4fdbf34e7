//! Controllers: the policies the simulator runs against the world. A controller is stepped by
//! the run loop whenever the virtual clock reaches its [`Controller::next_run`]; it reads and
//! changes the [`World`] directly or through the cluster port ([`SimCluster`]), and records
//! what it did in the world's timeline.
//!
//! The update executor is one ([`UpdateController`]); the fencing and lifecycle policies are
//! others (the fencing and lifecycle controllers). A new policy plugs in by implementing [`Controller`] and being
//! added with [`crate::Simulation::add_controller`] (see the README).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use nodemgr_core::drain::DrainOutcome;
use nodemgr_core::executor::scaling::DRAIN_SOURCE_SCALE_DOWN;
use nodemgr_core::executor::{ExecutorEvent, UpdateExecutor};
use nodemgr_core::model::{Timestamp, keys};
use nodemgr_core::update::UpdateCommand;

use crate::cluster::{SimCluster, block_on};
use crate::scenario::ClockOffset;
use crate::timeline::Name;
use crate::world::World;

/// A policy stepped by the simulator.
pub trait Controller {
    /// A short name for the timeline (`update`, `fencing`, …).
    fn name(&self) -> &str;

    /// When the controller wants to run next; `None` = never again. Called after every
    /// instant; the loop jumps to the earliest time any controller or the world asks for.
    fn next_run(&self) -> Option<Timestamp>;

    /// Runs at `now` (= `world.now`). Called only when `next_run() <= now`; must move
    /// `next_run` past `now` (or to `None`), or the loop moves on by one millisecond.
    fn step(&mut self, world: &mut World, now: Timestamp);

    /// Whether [`Controller::step`] may read the nodes' heartbeats from the world directly
    /// ([`crate::world::SimNode::last_heartbeat`], a node's view): the run loop then brings
    /// them up to date first ([`World::renew_heartbeats`]). A controller that reads nodes only
    /// through the cluster port ([`SimCluster`], which computes the heartbeats it hands out,
    /// or renews them before a whole list) answers `false`, and an instant at which only such
    /// controllers run renews no heartbeat. The default, `true`, is always correct.
    fn reads_heartbeats(&self) -> bool {
        true
    }

    /// The controller's process restarts at `now` (a crash, a new leader): it drops what it
    /// kept in memory, rebuilds it from the cluster on its next step, and reads its clock
    /// `clock_skew` off the world's from now on. The default keeps everything (for controllers
    /// whose state is not process memory).
    fn restart(&mut self, now: Timestamp, clock_skew: ClockOffset) {
        let _ = (now, clock_skew);
    }
}

/// The update executor of `nodemgr-core` ([`UpdateExecutor`]) over the simulated cluster port,
/// every reconcile period and at its drains' deadlines. `ReplaceMachine` decisions are carried
/// out by [`World::replace_machine`] (the simulator plays the cloud), or, for a machine of the
/// scaling executor (one with an Instance), handed to that executor as node-manager does. A restart replaces the
/// executor with a new one (its drains are picked up again from the `draining` marks) and
/// gives it a skewed clock.
#[derive(Debug)]
pub struct UpdateController {
    executor: UpdateExecutor,
    period: Duration,
    next: Timestamp,
    last_blocked: Blocked,
    clock_skew: ClockOffset,
    skip_unchanged: bool,
    /// Run over the port's default answers ([`SimCluster::plain`]).
    plain_port: bool,
}

impl UpdateController {
    /// Runs first at `start`, then every `period`.
    pub fn new(start: Timestamp, period: Duration) -> Self {
        Self {
            executor: UpdateExecutor::new(),
            period,
            next: start,
            last_blocked: Blocked::default(),
            clock_skew: ClockOffset::default(),
            skip_unchanged: true,
            plain_port: false,
        }
    }

    /// Whether the executor talks to the port as answered by the traits' defaults
    /// ([`SimCluster::plain`]: evictions one by one, checksums copied) instead of the
    /// simulator's shortcuts (the default, `false`). For tests that compare both.
    pub fn plain_port(mut self, plain: bool) -> Self {
        self.plain_port = plain;
        self
    }

    /// The executor (its drains).
    pub fn executor(&self) -> &UpdateExecutor {
        &self.executor
    }

    /// Whether the executor plans again only the groups whose inputs changed (the default) or
    /// every group at every step ([`UpdateExecutor::set_skip_unchanged`]); kept across
    /// restarts. For tests that compare both.
    pub fn skip_unchanged(mut self, skip: bool) -> Self {
        self.skip_unchanged = skip;
        self.executor.set_skip_unchanged(skip);
        self
    }
}

impl Controller for UpdateController {
    fn name(&self) -> &str {
        "update"
    }

    fn next_run(&self) -> Option<Timestamp> {
        // The executor's deadlines are on its own (skewed) clock.
        Some(match self.executor.next_deadline() {
            Some(d) => self.clock_skew.unapply(d).min(self.next),
            None => self.next,
        })
    }

    fn reads_heartbeats(&self) -> bool {
        // The executor reads nodes through the cluster port only.
        false
    }

    fn restart(&mut self, now: Timestamp, clock_skew: ClockOffset) {
        self.executor = UpdateExecutor::new();
        self.executor.set_skip_unchanged(self.skip_unchanged);
        self.clock_skew = clock_skew;
        self.last_blocked.clear();
        self.next = now;
    }

    fn step(&mut self, world: &mut World, now: Timestamp) {
        self.next = now + self.period;
        let result = {
            let cluster = SimCluster::new(world).plain(self.plain_port);
            block_on(self.executor.step(&cluster, self.clock_skew.apply(now)))
        };
        let report = match result {
            Some(Ok(report)) => report,
            Some(Err(error)) => {
                world.record(
                    "executor.error",
                    None,
                    None,
                    format!("step failed: {error}"),
                );
                return;
            }
            None => {
                world.record("executor.error", None, None, "a port call never completed");
                return;
            }
        };
        let mut names = NamesOf::default();
        for event in &report.events {
            record_executor_event(world, event, &mut names);
        }
        for error in &report.errors {
            world.record(
                "executor.error",
                Some(&error.node),
                None,
                format!("{error}: {}", error.source),
            );
        }
        self.last_blocked.update(report.blocked, |group, reasons| {
            world.record_in(
                "update.blocked",
                Some(group.to_owned()),
                None,
                None,
                reasons.join("; "),
            );
        });
    }
}

/// A machine of the scaling executor is replaced the way node-manager does it: the node is
/// handed to the scaling executor as a removal (labelled `termination-in-progress`, annotated
/// `draining=scale-down`); the update executor drains it, the scaling executor deletes its
/// machine and the group's bounds order the replacement.
fn hand_over(world: &mut World, node: &str) {
    let Some(n) = world.nodes.get_mut(node) else {
        return;
    };
    if n.node
        .labels
        .contains_key(keys::LABEL_TERMINATION_IN_PROGRESS)
    {
        return;
    }
    let marked = Arc::make_mut(&mut n.node);
    marked
        .labels
        .insert(keys::LABEL_TERMINATION_IN_PROGRESS.into(), String::new());
    marked
        .annotations
        .entry(keys::ANNOTATION_DRAINING.into())
        .or_insert_with(|| DRAIN_SOURCE_SCALE_DOWN.into());
    world.agent_inputs_changed(node);
}

/// The planner's `blocked` reasons by group ([`nodemgr_core::executor::StepReport::blocked`]),
/// in group order, as the controller last saw them: a group's reasons are recorded when they
/// differ from the previous step's.
#[derive(Debug, Default)]
struct Blocked(Vec<(String, Vec<String>)>);

impl Blocked {
    /// Replaces the reasons with `reported` (a group's last entry counts, as in a map by
    /// group) and calls `changed` with each group whose reasons differ from the previous
    /// ones, in group order. A report in strict group order (the executor's) is kept as it
    /// is, without being sorted into a map first.
    fn update(
        &mut self,
        reported: Vec<(String, Vec<String>)>,
        mut changed: impl FnMut(&str, &[String]),
    ) {
        let reported = if reported.windows(2).all(|w| w[0].0 < w[1].0) {
            reported
        } else {
            let by_group: BTreeMap<String, Vec<String>> = reported.into_iter().collect();
            by_group.into_iter().collect()
        };
        for (group, reasons) in &reported {
            let before = self
                .0
                .binary_search_by(|(g, _)| g.as_str().cmp(group))
                .ok()
                .and_then(|at| self.0.get(at))
                .map(|(_, reasons)| reasons);
            if before != Some(reasons) {
                changed(group, reasons);
            }
        }
        self.0 = reported;
    }

    /// Forgets the reasons.
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// The names [`World::record`] gives a node's timeline event (the node's and its group's,
/// shared with the node's other events, [`World::event_names`]), remembered for the node of
/// the previous event (a drain's events come one node at a time): the same answer without a
/// search by name for every event. Forgotten whenever the world's nodes may change.
#[derive(Default)]
struct NamesOf {
    last: Option<(Arc<str>, Option<Arc<str>>)>,
}

impl NamesOf {
    /// `node`'s name and group, as [`World::record`] finds them.
    fn of(&mut self, world: &mut World, node: &str) -> (Arc<str>, Option<Arc<str>>) {
        match &self.last {
            Some((name, group)) if **name == *node => (Arc::clone(name), group.clone()),
            _ => {
                let names = world.event_names(node);
                self.last = Some(names.clone());
                names
            }
        }
    }

    /// The world's nodes may have changed.
    fn forget(&mut self) {
        self.last = None;
    }
}

/// Appends a timeline event about a node at the current virtual time with the names
/// [`NamesOf`] found (as [`World::record`]).
fn record_named(
    world: &mut World,
    kind: &'static str,
    (node, group): (Arc<str>, Option<Arc<str>>),
    pod: Option<&str>,
    message: String,
) {
    world.record_event(
        kind.into(),
        Some(node.into()),
        group.map(Name::from),
        pod.map(str::to_owned),
        message,
    );
}

fn record_executor_event(world: &mut World, event: &ExecutorEvent, names: &mut NamesOf) {
    let node = event.node();
    // Its `Display`, made at the right size from its pieces.
    let message = event.message();
    match event {
        ExecutorEvent::Applied { group, command } => {
            let kind = match command {
                UpdateCommand::Approve { .. } => "update.approved",
                UpdateCommand::StartDrain { .. } => "update.drain-requested",
                UpdateCommand::ApproveDisruption { .. } => "update.disruption-approved",
                UpdateCommand::ReplaceMachine { .. } => "update.replace-machine",
                UpdateCommand::Finish { .. } => "update.finished",
            };
            world.record_in(kind, Some(group.clone()), Some(node), None, message);
            if matches!(command, UpdateCommand::ReplaceMachine { .. }) {
                names.forget();
                if world.instances.contains_key(node) {
                    hand_over(world, node);
                } else {
                    world.replace_machine(node);
                }
            }
        }
        ExecutorEvent::DrainStarted { group, .. } => {
            world.record_in(
                "drain.started",
                Some(group.clone()),
                Some(node),
                None,
                message,
            );
        }
        ExecutorEvent::Cordoned { .. } => {
            let named = names.of(world, node);
            record_named(world, "drain.cordoned", named, None, message);
        }
        ExecutorEvent::Evicted { pod, .. } => {
            let named = names.of(world, node);
            record_named(world, "drain.evicted", named, Some(pod), message);
        }
        ExecutorEvent::EvictionRefused { pod, retry_at, .. } => {
            let retry = retry_at.saturating_since(world.now).as_secs();
            let named = names.of(world, node);
            let message = format!("{message}; retried in {retry}s");
            record_named(world, "drain.eviction-refused", named, Some(pod), message);
        }
        ExecutorEvent::ForceDeleted { pod, .. } => {
            let named = names.of(world, node);
            record_named(world, "drain.force-deleted", named, Some(pod), message);
        }
        ExecutorEvent::DrainFinished { group, outcome, .. } => {
            let kind = match outcome {
                DrainOutcome::Completed => "drain.finished",
                DrainOutcome::TimedOut { .. } => "drain.timed-out",
            };
            world.record_in(kind, Some(group.clone()), Some(node), None, message);
        }
        ExecutorEvent::DrainAbandoned { .. } => {
            let named = names.of(world, node);
            record_named(world, "drain.abandoned", named, None, message);
        }
        ExecutorEvent::DrainedMarkRemoved { .. } => {
            let named = names.of(world, node);
            record_named(world, "drain.mark-removed", named, None, message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A step's `blocked` report: entries of a few groups, in any order, repeated or not.
    fn report() -> impl Strategy<Value = Vec<(String, Vec<String>)>> {
        prop::collection::vec(("g[0-3]", prop::collection::vec("[ab]", 0..3)), 0..6).prop_map(
            |mut entries| {
                // Most reports are in group order, as the executor makes them.
                if entries.len() % 2 == 0 {
                    entries.sort_by(|a, b| a.0.cmp(&b.0));
                    entries.dedup_by(|a, b| a.0 == b.0);
                }
                entries
            },
        )
    }

    proptest! {
        /// The groups whose reasons are recorded, step after step, are those a map by group
        /// compared with the previous step's finds.
        #[test]
        fn blocked_reasons_are_recorded_as_a_map_by_group_finds_them(
            reports in prop::collection::vec(report(), 1..8),
        ) {
            let mut blocked = Blocked::default();
            let mut last: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for reported in reports {
                let mut recorded = Vec::new();
                blocked.update(reported.clone(), |group, reasons| {
                    recorded.push((group.to_owned(), reasons.to_vec()));
                });
                let by_group: BTreeMap<String, Vec<String>> = reported.into_iter().collect();
                let expected: Vec<(String, Vec<String>)> = by_group
                    .iter()
                    .filter(|(group, reasons)| last.get(*group) != Some(*reasons))
                    .map(|(group, reasons)| (group.clone(), reasons.clone()))
                    .collect();
                prop_assert_eq!(recorded, expected);
                last = by_group;
            }
        }
    }
}
