//! Static nodes in a simulated world: a [`StaticNodes`] controller against an executor whose
//! SSH operations succeed, fail or hang at random, with users changing counts, deleting
//! instances and breaking credentials meanwhile, on a virtual clock. Properties: the count is
//! never exceeded, cleanups stay inside their group, adopted instances are never bootstrapped,
//! no instance runs two operations at once, deleted instances are cleaned before they go, and
//! the count converges once the world calms down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use nodemgr_core::model::{
    ApiCondition, LabelSelector, Node, NodeGroup, NodeGroupSpec, NodeType, ObjectMeta,
    ObjectReference, SshCredentials, SshCredentialsSpec, StaticInstance,
    StaticInstanceCurrentStatus, StaticInstancePhase, StaticInstanceSpec, StaticInstances,
    Timestamp, keys,
};
use nodemgr_core::static_nodes::{
    CONDITION_TYPE, Cause, CleanupReason, Failure, Operation, StaticCommand, StaticConfig,
    StaticNodes, StaticSnapshot, bound_group, machine_ref_for, phase_of,
};
use proptest::prelude::*;

/// How an SSH operation the executor starts will end.
#[derive(Debug, Clone, Copy)]
enum Fate {
    /// Succeeds after this many seconds.
    Succeed(u32),
    /// Fails after this many seconds.
    Fail(u32),
    /// Never reports.
    Hang,
    /// Fails before anything runs on the machine (auth failed, unreachable) after this many
    /// seconds.
    Refuse(u32),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        6 => (1..120_u32).prop_map(Fate::Succeed),
        2 => (1..60_u32).prop_map(Fate::Fail),
        1 => (1..30_u32).prop_map(Fate::Refuse),
        1 => Just(Fate::Hang),
    ]
}

/// Something a person does between two reconciles.
#[derive(Debug, Clone)]
enum Event {
    SetCount(usize, i64),
    Delete(usize),
    BreakCredentials,
    FixCredentials,
    Nothing,
}

fn event(groups: usize, instances: usize) -> impl Strategy<Value = Event> {
    prop_oneof![
        3 => (0..groups, 0..6_i64).prop_map(|(g, n)| Event::SetCount(g, n)),
        1 => (0..instances).prop_map(Event::Delete),
        1 => Just(Event::BreakCredentials),
        1 => Just(Event::FixCredentials),
        6 => Just(Event::Nothing),
    ]
}

#[derive(Debug)]
struct RunningOp {
    instance: String,
    operation: Operation,
    group: String,
    fate: Fate,
    started: Timestamp,
}

#[derive(Debug, Default, Clone, Copy)]
struct History {
    ever_bound: bool,
    cleaned_since_bound: bool,
}

#[derive(Debug)]
struct Sim {
    groups: Vec<NodeGroup>,
    instances: Vec<StaticInstance>,
    credentials: Vec<SshCredentials>,
    nodes: Vec<Node>,
    controller: StaticNodes,
    now: Timestamp,
    ops: Vec<RunningOp>,
    fates: Vec<Fate>,
    next_fate: usize,
    history: BTreeMap<String, History>,
    removed: Vec<String>,
}

fn credentials(valid: bool) -> SshCredentials {
    SshCredentials {
        metadata: ObjectMeta {
            name: Some("ssh".into()),
            ..ObjectMeta::default()
        },
        spec: SshCredentialsSpec {
            user: Some("ubuntu".into()),
            sudo_password: valid.then(|| "secret".to_owned()),
            ..SshCredentialsSpec::default()
        },
        ..SshCredentials::default()
    }
}

fn group(index: usize, count: i64, pool: Option<usize>) -> NodeGroup {
    NodeGroup {
        metadata: ObjectMeta {
            name: Some(format!("g{index}")),
            ..ObjectMeta::default()
        },
        spec: NodeGroupSpec {
            node_type: Some(if index.is_multiple_of(2) {
                NodeType::Static
            } else {
                NodeType::CloudStatic
            }),
            static_instances: Some(StaticInstances {
                count: Some(count),
                label_selector: pool.map(|p| LabelSelector {
                    match_labels: Some([("pool".to_owned(), format!("p{p}"))].into()),
                    match_expressions: None,
                }),
            }),
            ..NodeGroupSpec::default()
        },
        ..NodeGroup::default()
    }
}

fn instance(index: usize, pool: usize, adopt: bool) -> StaticInstance {
    let mut si = StaticInstance {
        metadata: ObjectMeta {
            name: Some(format!("si-{index:02}")),
            labels: [("pool".to_owned(), format!("p{pool}"))].into(),
            ..ObjectMeta::default()
        },
        spec: StaticInstanceSpec {
            address: Some(format!("10.0.1.{index}")),
            credentials_ref: Some(ObjectReference {
                kind: Some("SSHCredentials".into()),
                name: "ssh".into(),
                ..ObjectReference::default()
            }),
        },
        ..StaticInstance::default()
    };
    if adopt {
        si.metadata
            .annotations
            .insert(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE.into(), String::new());
    }
    si
}

fn set_phase(si: &mut StaticInstance, phase: StaticInstancePhase) {
    si.status.get_or_insert_default().current_status = Some(StaticInstanceCurrentStatus {
        phase: Some(phase),
        last_update_time: None,
    });
}

impl Sim {
    fn new(groups: Vec<NodeGroup>, instances: Vec<StaticInstance>, fates: Vec<Fate>) -> Self {
        // Instances asking for adoption with an even index have a Node already; the others
        // wait for one forever (and must never be bootstrapped).
        let nodes = instances
            .iter()
            .enumerate()
            .filter(|(index, i)| {
                index.is_multiple_of(2)
                    && i.metadata
                        .annotations
                        .contains_key(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE)
            })
            .map(|(_, i)| i)
            .map(|i| node_for(i, Timestamp::EPOCH))
            .collect();
        Self {
            groups,
            instances,
            credentials: vec![credentials(true)],
            nodes,
            controller: StaticNodes::with_config(StaticConfig {
                bootstrap_timeout: Duration::from_secs(300),
                cleanup_timeout: Duration::from_secs(300),
                ..StaticConfig::default()
            }),
            now: Timestamp::EPOCH,
            ops: Vec::new(),
            fates,
            next_fate: 0,
            history: BTreeMap::new(),
            removed: Vec::new(),
        }
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.instances
            .iter()
            .position(|i| i.metadata.name.as_deref() == Some(name))
    }

    fn count(&self, group: &str) -> usize {
        self.groups
            .iter()
            .find(|g| g.name() == group)
            .and_then(|g| g.spec.static_instances.as_ref()?.count)
            .map_or(0, |c| c as usize)
    }

    /// (Running, Bootstrapping) instances bound to `group`.
    fn occupancy(&self, group: &str) -> (usize, usize) {
        let bound = self
            .instances
            .iter()
            .filter(|i| bound_group(i) == Some(group));
        let mut running = 0;
        let mut booting = 0;
        for i in bound {
            match phase_of(i) {
                StaticInstancePhase::Running => running += 1,
                StaticInstancePhase::Bootstrapping => booting += 1,
                _ => {}
            }
        }
        (running, booting)
    }

    fn take_fate(&mut self) -> Fate {
        let fate = self.fates[self.next_fate % self.fates.len()];
        self.next_fate += 1;
        fate
    }

    fn user(&mut self, event: &Event) {
        match event {
            Event::SetCount(g, n) => {
                if let Some(group) = self.groups.get_mut(*g) {
                    group.spec.static_instances.get_or_insert_default().count = Some(*n);
                }
            }
            Event::Delete(i) => {
                if let Some(si) = self.instances.get_mut(*i) {
                    si.metadata.deletion_timestamp = Some("2025-01-01T00:00:00Z".into());
                }
                self.remove_finished();
            }
            Event::BreakCredentials => self.credentials = vec![credentials(false)],
            Event::FixCredentials => self.credentials = vec![credentials(true)],
            Event::Nothing => {}
        }
    }

    /// Objects being deleted without finalizers disappear; check they were cleaned.
    fn remove_finished(&mut self) {
        let mut kept = Vec::new();
        for si in std::mem::take(&mut self.instances) {
            if si.metadata.deletion_timestamp.is_some() && si.metadata.finalizers.is_empty() {
                let name = si.metadata.name.clone().unwrap();
                let h = self.history.get(&name).copied().unwrap_or_default();
                assert!(
                    !h.ever_bound || h.cleaned_since_bound,
                    "{name} went away without being cleaned since it was bound"
                );
                self.removed.push(name);
            } else {
                kept.push(si);
            }
        }
        self.instances = kept;
    }

    /// Operations that end by `now` report to the controller.
    fn executor(&mut self) {
        let now = self.now;
        let mut still = Vec::new();
        for op in std::mem::take(&mut self.ops) {
            let ends = match op.fate {
                Fate::Succeed(s) | Fate::Fail(s) | Fate::Refuse(s) => {
                    Some(op.started + Duration::from_secs(s.into()))
                }
                Fate::Hang => None,
            };
            match (ends, op.fate) {
                (Some(at), Fate::Succeed(_)) if at <= now => {
                    match op.operation {
                        Operation::Bootstrap => {
                            let si = &self.instances[self.index(&op.instance).unwrap()];
                            let mut node = node_for(si, now);
                            node.labels
                                .insert(keys::LABEL_NODE_GROUP.into(), op.group.clone());
                            self.nodes.retain(|n| n.name != node.name);
                            self.nodes.push(node);
                        }
                        Operation::Cleanup => {
                            let si = &self.instances[self.index(&op.instance).unwrap()];
                            let address = si.spec.address.clone().unwrap_or_default();
                            self.nodes.retain(|n| !n.addresses.contains(&address));
                        }
                    }
                    self.controller
                        .handle_finished(&op.instance, op.operation, Ok(()));
                }
                (Some(at), Fate::Fail(_)) if at <= now => {
                    self.controller.handle_finished(
                        &op.instance,
                        op.operation,
                        Err("exit status 1".into()),
                    );
                }
                (Some(at), Fate::Refuse(_)) if at <= now => {
                    self.controller.handle_finished(
                        &op.instance,
                        op.operation,
                        Err(Failure::new(Cause::AuthFailed, "authentication failed")),
                    );
                }
                _ => still.push(op),
            }
        }
        self.ops = still;
    }

    fn reconcile(&mut self) -> Vec<StaticCommand> {
        let plan = self.controller.step(
            &StaticSnapshot {
                groups: &self.groups,
                instances: &self.instances,
                credentials: &self.credentials,
                nodes: &self.nodes,
            },
            self.now,
        );
        plan.commands
    }

    fn has_op(&self, instance: &str) -> bool {
        self.ops.iter().any(|o| o.instance == instance)
    }

    fn apply(&mut self, command: &StaticCommand) {
        let name = command.instance().to_owned();
        let i = self
            .index(&name)
            .expect("a command names an existing instance");
        match command {
            StaticCommand::AddFinalizer { .. } => {
                self.instances[i]
                    .metadata
                    .finalizers
                    .push(keys::FINALIZER_STATIC_INSTANCE.into());
            }
            StaticCommand::Bootstrap { group, .. } => {
                assert!(!self.has_op(&name), "{name} bootstrapped while busy");
                assert!(
                    !self.instances[i]
                        .metadata
                        .annotations
                        .contains_key(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE),
                    "{name} asks for adoption but was bootstrapped"
                );
                assert!(
                    self.instances[i]
                        .metadata
                        .finalizers
                        .iter()
                        .any(|f| f == keys::FINALIZER_STATIC_INSTANCE),
                    "{name} bootstrapped without the finalizer"
                );
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Bootstrapping);
                si.status.get_or_insert_default().machine_ref = Some(machine_ref_for(group));
                let h = self.history.entry(name.clone()).or_default();
                h.ever_bound = true;
                h.cleaned_since_bound = false;
                let fate = self.take_fate();
                self.ops.push(RunningOp {
                    instance: name,
                    operation: Operation::Bootstrap,
                    group: group.clone(),
                    fate,
                    started: self.now,
                });
            }
            StaticCommand::MarkRunning { node, .. } => {
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Running);
                let status = si.status.get_or_insert_default();
                status.node_ref = Some(ObjectReference {
                    name: node.clone(),
                    ..ObjectReference::default()
                });
                status.conditions.clear();
            }
            StaticCommand::Adopt { group, node, .. } => {
                assert!(self.nodes.iter().any(|n| &n.name == node));
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Running);
                si.metadata
                    .annotations
                    .remove(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE);
                let status = si.status.get_or_insert_default();
                status.machine_ref = Some(machine_ref_for(group));
                status.node_ref = Some(ObjectReference {
                    name: node.clone(),
                    ..ObjectReference::default()
                });
                let h = self.history.entry(name).or_default();
                h.ever_bound = true;
                h.cleaned_since_bound = false;
            }
            StaticCommand::Cleanup { group, reason, .. } => {
                assert!(!self.has_op(&name), "{name} cleaned while busy");
                // A Running instance is cleaned only for a reason that holds.
                if phase_of(&self.instances[i]) == StaticInstancePhase::Running {
                    let holds = match reason {
                        CleanupReason::Deleted => {
                            self.instances[i].metadata.deletion_timestamp.is_some()
                        }
                        CleanupReason::GroupGone => !self.groups.iter().any(|g| {
                            g.name() == group.as_str() && g.spec.static_instances.is_some()
                        }),
                        CleanupReason::ScaledDown => {
                            let occupied = self
                                .instances
                                .iter()
                                .filter(|si| bound_group(si) == Some(group.as_str()))
                                .filter(|si| {
                                    matches!(
                                        phase_of(si),
                                        StaticInstancePhase::Running
                                            | StaticInstancePhase::Bootstrapping
                                            | StaticInstancePhase::Error
                                    )
                                })
                                .count();
                            occupied > self.count(group)
                        }
                    };
                    assert!(holds, "Running {name} cleaned up without reason ({reason})");
                }
                assert_eq!(
                    bound_group(&self.instances[i]),
                    Some(group.as_str()),
                    "{name} cleaned by a group it is not in"
                );
                set_phase(&mut self.instances[i], StaticInstancePhase::Cleaning);
                let fate = self.take_fate();
                self.ops.push(RunningOp {
                    instance: name,
                    operation: Operation::Cleanup,
                    group: group.clone(),
                    fate,
                    started: self.now,
                });
            }
            StaticCommand::Release {
                remove_finalizer, ..
            } => {
                assert_eq!(
                    phase_of(&self.instances[i]),
                    StaticInstancePhase::Cleaning,
                    "{name} released without cleaning"
                );
                self.history.entry(name).or_default().cleaned_since_bound = true;
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Pending);
                let status = si.status.get_or_insert_default();
                status.machine_ref = None;
                status.node_ref = None;
                status.conditions.clear();
                if *remove_finalizer {
                    si.metadata
                        .finalizers
                        .retain(|f| f != keys::FINALIZER_STATIC_INSTANCE);
                }
            }
            StaticCommand::RemoveFinalizer { .. } => {
                self.instances[i]
                    .metadata
                    .finalizers
                    .retain(|f| f != keys::FINALIZER_STATIC_INSTANCE);
            }
            StaticCommand::MarkError {
                reason, message, ..
            } => {
                // The executor stops whatever still runs on the instance.
                self.ops.retain(|o| o.instance != name);
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Error);
                si.status.get_or_insert_default().conditions = vec![ApiCondition {
                    type_: CONDITION_TYPE.into(),
                    status: "False".into(),
                    severity: Some("Error".into()),
                    reason: Some(reason.as_str()),
                    message: Some(message.clone()),
                    last_transition_time: None,
                }];
            }
            StaticCommand::ReturnToPending {
                reason, message, ..
            } => {
                assert!(
                    reason.cause.before_start() && reason.operation == Operation::Bootstrap,
                    "{name} returned to Pending after {reason}"
                );
                // Nothing ran on the machine: there is nothing to clean.
                self.history.entry(name).or_default().cleaned_since_bound = true;
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Pending);
                let status = si.status.get_or_insert_default();
                status.machine_ref = None;
                status.node_ref = None;
                status.conditions = vec![ApiCondition {
                    type_: CONDITION_TYPE.into(),
                    status: "False".into(),
                    severity: Some("Error".into()),
                    reason: Some(reason.as_str()),
                    message: Some(message.clone()),
                    last_transition_time: None,
                }];
            }
            StaticCommand::MarkPending { .. } => {
                let si = &mut self.instances[i];
                set_phase(si, StaticInstancePhase::Pending);
                si.status.get_or_insert_default().conditions.clear();
            }
        }
    }

    /// One round: the executor reports, the controller plans, the plan is applied; checks the
    /// per-plan properties.
    fn round(&mut self, dt: Duration) {
        self.now = self.now + dt;
        self.executor();
        let commands = self.reconcile();
        let mut grown: Vec<String> = Vec::new();
        for command in &commands {
            if let StaticCommand::Bootstrap { group, .. } | StaticCommand::Adopt { group, .. } =
                command
            {
                grown.push(group.clone());
            }
            self.apply(command);
        }
        self.remove_finished();
        for g in self
            .groups
            .iter()
            .map(|g| g.name().to_owned())
            .collect::<Vec<_>>()
        {
            let (running, booting) = self.occupancy(&g);
            let count = self.count(&g);
            assert!(
                running <= count,
                "group {g}: {running} Running > count {count} after {commands:#?}"
            );
            if grown.contains(&g) {
                assert!(
                    running + booting <= count,
                    "group {g} grew to {running}+{booting} > count {count}: {commands:#?}"
                );
            }
        }
    }
}

fn node_for(si: &StaticInstance, created: Timestamp) -> Node {
    let mut node = Node {
        name: format!("node-{}", si.metadata.name.as_deref().unwrap_or_default()),
        ready: true,
        addresses: si.spec.address.iter().cloned().collect(),
        created: Some(created),
        ..Node::default()
    };
    node.annotations
        .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "sum".into());
    node
}

prop_compose! {
    fn world()(
        groups in 1..4_usize,
        instances in 1..12_usize,
    )(
        counts in proptest::collection::vec(0..5_i64, groups),
        selectors in proptest::collection::vec(proptest::option::of(0..3_usize), groups),
        pools in proptest::collection::vec(0..3_usize, instances),
        adopt in proptest::collection::vec(proptest::bool::weighted(0.2), instances),
        events in proptest::collection::vec(event(groups, instances), 40),
        steps in proptest::collection::vec(1..200_u64, 40),
        fates in proptest::collection::vec(fate(), 1..20),
    ) -> (Sim, Vec<Event>, Vec<u64>) {
        let groups = counts
            .iter()
            .zip(&selectors)
            .enumerate()
            .map(|(i, (c, s))| group(i, *c, *s))
            .collect();
        let instances = pools
            .iter()
            .zip(&adopt)
            .enumerate()
            .map(|(i, (p, a))| instance(i, *p, *a))
            .collect();
        (Sim::new(groups, instances, fates), events, steps)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every safety property holds in every round of a random run (checked inside `round` and
    /// `apply`): count never exceeded, cleanups only in the group, adopted instances never
    /// bootstrapped, one operation at a time, cleaning before a deleted instance goes.
    #[test]
    fn safety_holds_in_every_round((mut sim, events, steps) in world()) {
        for (event, dt) in events.iter().zip(&steps) {
            sim.user(event);
            sim.round(Duration::from_secs(*dt));
        }
        // Then the world calms down: deleted instances all end up cleaned and gone.
        sim.credentials = vec![credentials(true)];
        sim.fates = vec![Fate::Succeed(5)];
        for _ in 0..40 {
            sim.round(Duration::from_secs(400));
        }
        prop_assert!(
            sim.instances.iter().all(|i| i.metadata.deletion_timestamp.is_none()),
            "deleted instances left: {:?}",
            sim.instances.iter().filter(|i| i.metadata.deletion_timestamp.is_some()).map(|i| (i.metadata.name.clone(), phase_of(i))).collect::<Vec<_>>()
        );
    }

    /// With disjoint selectors and a calm world, each group ends with exactly
    /// min(count, matching instances) Running, nothing mid-operation, nobody in Error.
    #[test]
    fn count_converges(
        counts in proptest::collection::vec(0..5_i64, 1..4),
        pools in proptest::collection::vec(0..3_usize, 1..12),
        adopt in proptest::collection::vec(proptest::bool::weighted(0.2), 12),
        fates in proptest::collection::vec(fate(), 1..10),
        later in proptest::collection::vec(0..5_i64, 3),
    ) {
        let groups: Vec<NodeGroup> = counts.iter().enumerate().map(|(i, c)| group(i, *c, Some(i))).collect();
        let instances: Vec<StaticInstance> = pools.iter().enumerate().map(|(i, p)| instance(i, *p, adopt[i])).collect();
        let mut sim = Sim::new(groups, instances, fates);
        for _ in 0..20 {
            sim.round(Duration::from_secs(60));
        }
        for (g, c) in later.iter().enumerate().take(sim.groups.len()) {
            sim.user(&Event::SetCount(g, *c));
        }
        sim.fates = vec![Fate::Succeed(5)];
        for _ in 0..60 {
            sim.round(Duration::from_secs(400));
        }
        for g in &sim.groups {
            let pool = format!("p{}", &g.name()[1..]);
            let waiting_for_a_node = |i: &StaticInstance| {
                i.metadata.annotations.contains_key(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE)
                    && !sim.nodes.iter().any(|n| n.addresses == i.spec.address.iter().cloned().collect::<Vec<_>>())
            };
            let available = sim
                .instances
                .iter()
                .filter(|i| i.metadata.labels.get("pool") == Some(&pool) && !waiting_for_a_node(i))
                .count();
            let want = sim.count(g.name()).min(available);
            let (running, booting) = sim.occupancy(g.name());
            prop_assert_eq!((running, booting), (want, 0), "group {}", g.name());
        }
        for i in &sim.instances {
            let phase = phase_of(i);
            prop_assert!(
                matches!(phase, StaticInstancePhase::Running | StaticInstancePhase::Pending),
                "{:?} is {:?}", i.metadata.name, phase
            );
        }
    }
}

/// A wrong key (the executor's SSH fails every time) leaves the instance in Error with
/// growing waits between attempts: no retry storm.
#[test]
fn repeated_failures_back_off() {
    let mut sim = Sim::new(
        vec![group(0, 1, None)],
        vec![instance(0, 0, false)],
        vec![Fate::Fail(1)],
    );
    let mut starts = Vec::new();
    for _ in 0..400 {
        sim.now = sim.now + Duration::from_secs(5);
        sim.executor();
        for command in sim.reconcile() {
            if matches!(command, StaticCommand::Bootstrap { .. }) {
                starts.push(sim.now.as_millis() / 1000);
            }
            sim.apply(&command);
        }
    }
    let gaps: Vec<i64> = starts.windows(2).map(|w| w[1] - w[0]).collect();
    // Doubling from 10 s (plus the 1 s the failure takes and 5 s rounds), capped at 300 s.
    assert!(gaps.len() >= 6, "{starts:?}");
    assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
    assert!(gaps[0] >= 10 && gaps[0] <= 20, "{gaps:?}");
    assert!(
        *gaps.last().unwrap() >= 300 && *gaps.last().unwrap() <= 310,
        "{gaps:?}"
    );
    assert_eq!(phase_of(&sim.instances[0]), StaticInstancePhase::Error);
}
