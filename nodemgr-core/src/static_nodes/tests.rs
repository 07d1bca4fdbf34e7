//! Unit tests of the static node rules, one rule per test.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::model::{
    ApiCondition, ObjectMeta, SshCredentialsSpec, StaticInstanceCurrentStatus, StaticInstanceSpec,
    StaticInstances,
};

fn group(name: &str, count: i64, pool: Option<&str>) -> NodeGroup {
    NodeGroup {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: crate::model::NodeGroupSpec {
            node_type: Some(NodeType::Static),
            static_instances: Some(StaticInstances {
                count: Some(count),
                label_selector: pool.map(|p| LabelSelector {
                    match_labels: Some([("pool".to_owned(), p.to_owned())].into()),
                    match_expressions: None,
                }),
            }),
            ..Default::default()
        },
        ..NodeGroup::default()
    }
}

fn creds(name: &str) -> SshCredentials {
    SshCredentials {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: SshCredentialsSpec {
            user: Some("ubuntu".into()),
            sudo_password: Some("secret".into()),
            ..SshCredentialsSpec::default()
        },
        ..SshCredentials::default()
    }
}

fn instance(name: &str, n: u8, pool: &str) -> StaticInstance {
    StaticInstance {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: [("pool".to_owned(), pool.to_owned())].into(),
            finalizers: vec![keys::FINALIZER_STATIC_INSTANCE.into()],
            ..ObjectMeta::default()
        },
        spec: StaticInstanceSpec {
            address: Some(format!("10.0.0.{n}")),
            credentials_ref: Some(ObjectReference {
                kind: Some("SSHCredentials".into()),
                name: "ssh".into(),
                ..ObjectReference::default()
            }),
        },
        status: None,
        ..StaticInstance::default()
    }
}

fn with_phase(
    mut i: StaticInstance,
    phase: StaticInstancePhase,
    group: Option<&str>,
) -> StaticInstance {
    let status = i.status.get_or_insert_default();
    status.current_status = Some(StaticInstanceCurrentStatus {
        phase: Some(phase),
        last_update_time: None,
    });
    status.machine_ref = group.map(machine_ref_for);
    i
}

fn with_error(i: StaticInstance, reason: ErrorReason, group: Option<&str>) -> StaticInstance {
    let mut i = with_phase(i, StaticInstancePhase::Error, group);
    i.status.get_or_insert_default().conditions = vec![ApiCondition {
        type_: CONDITION_TYPE.into(),
        status: "False".into(),
        severity: Some("Error".into()),
        reason: Some(reason.as_str()),
        message: Some("m".into()),
        last_transition_time: None,
    }];
    i
}

fn node(name: &str, n: u8, ready: bool, created: i64) -> Node {
    let mut node = Node {
        name: name.into(),
        ready,
        addresses: vec![format!("10.0.0.{n}")],
        created: Some(Timestamp::from_secs(created)),
        ..Node::default()
    };
    node.annotations
        .insert(keys::ANNOTATION_CONFIGURATION_CHECKSUM.into(), "sum".into());
    node
}

struct World {
    groups: Vec<NodeGroup>,
    instances: Vec<StaticInstance>,
    credentials: Vec<SshCredentials>,
    nodes: Vec<Node>,
}

impl World {
    fn new(groups: Vec<NodeGroup>, instances: Vec<StaticInstance>) -> Self {
        Self {
            groups,
            instances,
            credentials: vec![creds("ssh")],
            nodes: Vec::new(),
        }
    }

    fn plan(&self, c: &mut StaticNodes, now: i64) -> StaticPlan {
        c.step(
            &StaticSnapshot {
                groups: &self.groups,
                instances: &self.instances,
                credentials: &self.credentials,
                nodes: &self.nodes,
            },
            Timestamp::from_secs(now),
        )
    }
}

fn bootstraps(plan: &StaticPlan) -> Vec<&str> {
    plan.commands
        .iter()
        .filter_map(|c| match c {
            StaticCommand::Bootstrap { instance, .. } => Some(instance.as_str()),
            _ => None,
        })
        .collect()
}

fn cleanups(plan: &StaticPlan) -> Vec<&str> {
    plan.commands
        .iter()
        .filter_map(|c| match c {
            StaticCommand::Cleanup { instance, .. } => Some(instance.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn bootstraps_matching_pending_instances_in_name_order() {
    let mut world = World::new(
        vec![group("worker", 2, Some("a"))],
        vec![
            instance("si-3", 3, "a"),
            instance("si-1", 1, "a"),
            instance("si-2", 2, "b"),
            instance("si-0", 4, "a"),
        ],
    );
    world.instances[0].metadata.finalizers.clear();
    let plan = StaticNodes::new().plan_for(&world, 0);
    assert_eq!(bootstraps(&plan), ["si-0", "si-1"]);
    assert_eq!(
        plan.commands[0],
        StaticCommand::AddFinalizer {
            instance: "si-3".into()
        }
    );
    let StaticCommand::Bootstrap {
        group,
        address,
        credentials,
        attempt,
        ..
    } = &plan.commands[1]
    else {
        panic!("{:?}", plan.commands)
    };
    assert_eq!(
        (
            group.as_str(),
            address.as_str(),
            credentials.as_str(),
            *attempt
        ),
        ("worker", "10.0.0.4", "ssh", 1)
    );
}

impl StaticNodes {
    fn plan_for(&mut self, world: &World, now: i64) -> StaticPlan {
        world.plan(self, now)
    }
}

#[test]
fn an_instance_in_flight_is_not_taken_twice() {
    let world = World::new(
        vec![group("worker", 1, None)],
        vec![instance("si-1", 1, "a")],
    );
    let mut c = StaticNodes::new();
    assert_eq!(bootstraps(&world.plan(&mut c, 0)), ["si-1"]);
    // The executor has not written the phase yet: nothing new.
    let again = world.plan(&mut c, 1);
    assert!(again.commands.is_empty(), "{again:?}");
    assert_eq!(c.in_flight("si-1"), Some(Operation::Bootstrap));
}

#[test]
fn bootstrap_completes_when_the_node_reports_a_checksum() {
    let mut world = World::new(
        vec![group("worker", 1, None)],
        vec![instance("si-1", 1, "a")],
    );
    let mut c = StaticNodes::new();
    let _ = world.plan(&mut c, 0);
    world.instances[0] = with_phase(
        world.instances[0].clone(),
        StaticInstancePhase::Bootstrapping,
        Some("worker"),
    );
    c.handle_finished("si-1", Operation::Bootstrap, Ok(()));
    // Script done, node not there yet: wait.
    assert!(world.plan(&mut c, 30).commands.is_empty());
    let mut n = node("static-1", 1, true, 0);
    n.annotations.clear();
    world.nodes.push(n);
    // Node registered without checksum: still wait.
    assert!(world.plan(&mut c, 40).commands.is_empty());
    world.nodes[0] = node("static-1", 1, true, 0);
    let plan = world.plan(&mut c, 50);
    assert_eq!(
        plan.commands,
        [StaticCommand::MarkRunning {
            instance: "si-1".into(),
            group: "worker".into(),
            node: "static-1".into()
        }]
    );
    assert_eq!(c.in_flight("si-1"), None);
}

#[test]
fn failures_back_off_exponentially_and_timeouts_are_errors() {
    let config = StaticConfig::default();
    assert_eq!(config.backoff(1), Duration::from_secs(10));
    assert_eq!(config.backoff(2), Duration::from_secs(20));
    assert_eq!(config.backoff(6), Duration::from_secs(300));
    assert_eq!(config.backoff(60), Duration::from_secs(300));

    let mut world = World::new(
        vec![group("worker", 1, None)],
        vec![instance("si-1", 1, "a")],
    );
    let mut c = StaticNodes::new();
    let _ = world.plan(&mut c, 0);
    world.instances[0] = with_phase(
        world.instances[0].clone(),
        StaticInstancePhase::Bootstrapping,
        Some("worker"),
    );
    c.handle_finished(
        "si-1",
        Operation::Bootstrap,
        Err("ssh: connection refused".into()),
    );
    let plan = world.plan(&mut c, 5);
    let reason = ErrorReason {
        operation: Operation::Bootstrap,
        cause: Cause::Failed,
    };
    assert!(matches!(
        &plan.commands[..],
        [StaticCommand::MarkError { reason: r, message, .. }]
            if *r == reason && message.contains("connection refused")
    ));
    assert_eq!(c.next_deadline(), Some(Timestamp::from_secs(15)));
    world.instances[0] = with_error(world.instances[0].clone(), reason, Some("worker"));
    // No retry storm: nothing until the backoff ends.
    assert!(world.plan(&mut c, 14).commands.is_empty());
    let plan = world.plan(&mut c, 15);
    assert!(matches!(
        &plan.commands[..],
        [StaticCommand::Bootstrap { attempt: 2, .. }]
    ));
    // The second try hangs: it times out after 20 minutes, then backs off 20 s.
    world.instances[0] = with_phase(
        world.instances[0].clone(),
        StaticInstancePhase::Bootstrapping,
        Some("worker"),
    );
    assert!(world.plan(&mut c, 15 + 1199).commands.is_empty());
    let plan = world.plan(&mut c, 15 + 1200);
    assert!(matches!(
        &plan.commands[..],
        [StaticCommand::MarkError {
            reason: ErrorReason {
                cause: Cause::TimedOut,
                ..
            },
            ..
        }]
    ));
    assert_eq!(
        c.next_deadline(),
        Some(Timestamp::from_secs(15 + 1200 + 20))
    );
}

#[test]
fn missing_or_invalid_credentials_are_errors_that_say_what_to_fix() {
    let mut world = World::new(
        vec![group("worker", 1, None)],
        vec![instance("si-1", 1, "a")],
    );
    world.credentials.clear();
    let mut c = StaticNodes::new();
    let plan = world.plan(&mut c, 0);
    let [
        StaticCommand::MarkError {
            reason, message, ..
        },
    ] = &plan.commands[..]
    else {
        panic!("{plan:?}")
    };
    assert_eq!(reason.as_str(), "BootstrapCredentialsMissing");
    assert!(message.contains("SSHCredentials \"ssh\""), "{message}");
    assert!(
        message.contains("create it or fix the reference"),
        "{message}"
    );
    assert!(bootstraps(&plan).is_empty());
    world.instances[0] = with_error(world.instances[0].clone(), *reason, None);
    // Still missing: no repeated command.
    assert!(world.plan(&mut c, 1).commands.is_empty());

    let mut bad = creds("ssh");
    bad.spec.sudo_password = None;
    world.credentials = vec![bad];
    let plan = world.plan(&mut c, 2);
    let [
        StaticCommand::MarkError {
            reason, message, ..
        },
    ] = &plan.commands[..]
    else {
        panic!("{plan:?}")
    };
    assert_eq!(reason.as_str(), "BootstrapCredentialsInvalid");
    assert!(message.contains("privateSSHKey"), "{message}");

    world.credentials = vec![creds("ssh")];
    let plan = world.plan(&mut c, 3);
    assert_eq!(
        plan.commands,
        [StaticCommand::MarkPending {
            instance: "si-1".into()
        }]
        .into_iter()
        .chain([StaticCommand::Bootstrap {
            instance: "si-1".into(),
            group: "worker".into(),
            address: "10.0.0.1".into(),
            credentials: "ssh".into(),
            attempt: 1
        }])
        .collect::<Vec<_>>()
    );

    let mut no_address = World::new(vec![], vec![instance("si-9", 9, "a")]);
    no_address.instances[0].spec.address = Some("not-an-ip".into());
    let plan = no_address.plan(&mut StaticNodes::new(), 0);
    assert!(matches!(
        &plan.commands[..],
        [StaticCommand::MarkError { reason: ErrorReason { cause: Cause::AddressInvalid, .. }, message, .. }]
            if message.contains("IPv4")
    ));
}

#[test]
fn adoption_needs_a_node_and_never_bootstraps() {
    let mut si = instance("si-1", 1, "a");
    si.metadata
        .annotations
        .insert(keys::ANNOTATION_SKIP_BOOTSTRAP_PHASE.into(), String::new());
    let mut world = World::new(
        vec![group("worker", 2, None)],
        vec![si, instance("si-2", 2, "a")],
    );
    let mut c = StaticNodes::new();
    let plan = world.plan(&mut c, 0);
    assert_eq!(bootstraps(&plan), ["si-2"]);
    assert!(
        plan.waiting.iter().any(|w| w.contains("to adopt si-1")),
        "{plan:?}"
    );

    let mut world2 = World::new(vec![group("worker", 1, None)], world.instances.clone());
    world2.nodes.push(node("existing", 1, true, 0));
    let plan = world2.plan(&mut StaticNodes::new(), 0);
    // Adoptable instances go first.
    assert_eq!(
        plan.commands,
        [StaticCommand::Adopt {
            instance: "si-1".into(),
            group: "worker".into(),
            node: "existing".into()
        }]
    );
    // A Node of another group is not adopted.
    world.nodes.push(node("existing", 1, true, 0));
    world.nodes[0]
        .labels
        .insert(keys::LABEL_NODE_GROUP.into(), "other".into());
    let plan = world.plan(&mut StaticNodes::new(), 0);
    assert!(
        !plan
            .commands
            .iter()
            .any(|c| matches!(c, StaticCommand::Adopt { .. }))
    );
    assert!(
        plan.waiting
            .iter()
            .any(|w| w.contains("belongs to group other"))
    );
}

#[test]
fn scale_down_cleans_errors_then_unready_then_newest_never_bootstrapping() {
    let running = |name: &str, n: u8| {
        with_phase(
            instance(name, n, "a"),
            StaticInstancePhase::Running,
            Some("worker"),
        )
    };
    let mut world = World::new(
        vec![group("worker", 1, None)],
        vec![
            running("old", 1),
            running("new", 2),
            running("sick", 3),
            with_phase(
                instance("booting", 4, "a"),
                StaticInstancePhase::Bootstrapping,
                Some("worker"),
            ),
            with_error(
                instance("broken", 5, "a"),
                ErrorReason {
                    operation: Operation::Bootstrap,
                    cause: Cause::Failed,
                },
                Some("worker"),
            ),
        ],
    );
    world.nodes = vec![
        node("n-old", 1, true, 100),
        node("n-new", 2, true, 200),
        node("n-sick", 3, false, 50),
    ];
    let mut c = StaticNodes::new();
    // Pretend "booting" is in flight.
    c.in_flight.insert(
        "booting".into(),
        InFlight {
            operation: Operation::Bootstrap,
            group: "worker".into(),
            started: Timestamp::EPOCH,
            attempt: 1,
            outcome: None,
        },
    );
    let plan = world.plan(&mut c, 10);
    // 5 occupy, count 1: 4 must go and "booting" is mid-bootstrap, so the other 4 go, most
    // expendable first (it stays alone until its bootstrap ends).
    assert_eq!(cleanups(&plan), ["broken", "sick", "new", "old"]);
    let StaticCommand::Cleanup { node, reason, .. } = &plan.commands[2] else {
        panic!()
    };
    assert_eq!(node.as_deref(), Some("n-new"));
    assert_eq!(*reason, CleanupReason::ScaledDown);

    world.groups = vec![group("worker", 3, None)];
    let plan = world.plan(&mut StaticNodes::new(), 10);
    // Count 3: of the 5 that occupy, the two most expendable go; without a record of its
    // operation (a restart), "booting" is bootstrapped again.
    assert_eq!(cleanups(&plan), ["broken", "sick"]);
}

#[test]
fn deletion_cleans_bound_instances_before_the_finalizer_goes() {
    let mut deleted_free = instance("free", 1, "a");
    deleted_free.metadata.deletion_timestamp = Some("2025-01-01T00:00:00Z".into());
    let mut deleted_running = with_phase(
        instance("busy", 2, "a"),
        StaticInstancePhase::Running,
        Some("worker"),
    );
    deleted_running.metadata.deletion_timestamp = Some("2025-01-01T00:00:00Z".into());
    let mut world = World::new(
        vec![group("worker", 1, None)],
        vec![deleted_free, deleted_running],
    );
    world.nodes = vec![node("n-busy", 2, true, 0)];
    let mut c = StaticNodes::new();
    let plan = world.plan(&mut c, 0);
    assert!(plan.commands.contains(&StaticCommand::RemoveFinalizer {
        instance: "free".into()
    }));
    assert!(matches!(
        &plan.commands[0],
        StaticCommand::Cleanup { instance, reason: CleanupReason::Deleted, node: Some(n), .. }
            if instance == "busy" && n == "n-busy"
    ));
    // Nothing free to replace it with: the deleted ones are not taken.
    assert!(bootstraps(&plan).is_empty());
    world.instances[1] = with_phase(
        world.instances[1].clone(),
        StaticInstancePhase::Cleaning,
        Some("worker"),
    );
    c.handle_finished("busy", Operation::Cleanup, Ok(()));
    let plan = world.plan(&mut c, 60);
    assert!(plan.commands.contains(&StaticCommand::Release {
        instance: "busy".into(),
        remove_finalizer: true
    }));
}

#[test]
fn a_removed_group_releases_its_instances() {
    let world = World::new(
        vec![],
        vec![with_phase(
            instance("si-1", 1, "a"),
            StaticInstancePhase::Running,
            Some("gone"),
        )],
    );
    let plan = world.plan(&mut StaticNodes::new(), 0);
    assert!(matches!(
        &plan.commands[..],
        [StaticCommand::Cleanup { reason: CleanupReason::GroupGone, group, .. }] if group == "gone"
    ));
}

#[test]
fn failed_cleanups_are_retried_after_the_backoff() {
    let mut world = World::new(
        vec![group("worker", 0, None)],
        vec![with_phase(
            instance("si-1", 1, "a"),
            StaticInstancePhase::Running,
            Some("worker"),
        )],
    );
    let mut c = StaticNodes::new();
    assert_eq!(cleanups(&world.plan(&mut c, 0)), ["si-1"]);
    world.instances[0] = with_phase(
        world.instances[0].clone(),
        StaticInstancePhase::Cleaning,
        Some("worker"),
    );
    c.handle_finished("si-1", Operation::Cleanup, Err("exit status 1".into()));
    let reason = ErrorReason {
        operation: Operation::Cleanup,
        cause: Cause::Failed,
    };
    assert!(matches!(
        &world.plan(&mut c, 1).commands[..],
        [StaticCommand::MarkError { reason: r, .. }] if *r == reason
    ));
    world.instances[0] = with_error(world.instances[0].clone(), reason, Some("worker"));
    assert!(world.plan(&mut c, 10).commands.is_empty());
    let plan = world.plan(&mut c, 11);
    assert!(matches!(
        &plan.commands[..],
        [StaticCommand::Cleanup { attempt: 2, .. }]
    ));
}

#[test]
fn instances_match_only_their_selector_and_are_shared_in_group_order() {
    let world = World::new(
        vec![
            group("b-group", 1, Some("a")),
            group("a-group", 1, Some("a")),
        ],
        vec![instance("si-1", 1, "a"), instance("si-2", 2, "a")],
    );
    let plan = world.plan(&mut StaticNodes::new(), 0);
    let by_group: BTreeMap<&str, &str> = plan
        .commands
        .iter()
        .filter_map(|c| match c {
            StaticCommand::Bootstrap {
                instance, group, ..
            } => Some((group.as_str(), instance.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(by_group, [("a-group", "si-1"), ("b-group", "si-2")].into());
}

#[test]
fn error_reasons_round_trip() {
    for operation in [Operation::Bootstrap, Operation::Cleanup] {
        for cause in Cause::ALL {
            let reason = ErrorReason { operation, cause };
            assert_eq!(ErrorReason::parse(&reason.as_str()), Some(reason));
        }
    }
    assert_eq!(ErrorReason::parse("Whatever"), None);
    assert_eq!(ErrorReason::parse("BootstrapNope"), None);
}

#[test]
fn a_bootstrap_refused_before_it_starts_returns_the_instance_to_pending_and_backs_off() {
    let mut world = World::new(
        vec![group("worker", 1, None)],
        vec![instance("si-1", 1, "a"), instance("si-2", 2, "a")],
    );
    let mut c = StaticNodes::new();
    assert_eq!(bootstraps(&world.plan(&mut c, 0)), ["si-1"]);
    world.instances[0] = with_phase(
        world.instances[0].clone(),
        StaticInstancePhase::Bootstrapping,
        Some("worker"),
    );
    c.handle_finished(
        "si-1",
        Operation::Bootstrap,
        Err(Failure::of_remote(&RemoteShellError::AuthFailed {
            target: "ubuntu@10.0.0.1:22".into(),
            host_key: "SHA256:k".into(),
        })),
    );
    let plan = world.plan(&mut c, 3);
    let reason = ErrorReason {
        operation: Operation::Bootstrap,
        cause: Cause::AuthFailed,
    };
    assert!(
        matches!(
            &plan.commands[..],
            [StaticCommand::ReturnToPending { instance, reason: r, message }, StaticCommand::Bootstrap { instance: other, .. }]
                if instance == "si-1" && *r == reason && message.contains("authentication failed") && other == "si-2"
        ),
        "{plan:?}"
    );
    assert_eq!(reason.as_str(), "BootstrapAuthFailed");
    assert_eq!(ErrorReason::parse("BootstrapAuthFailed"), Some(reason));

    // si-1 is Pending again with its reason; si-2 fails the same way: neither is taken again
    // before its backoff ends (no retry storm), then si-1 is.
    world.instances[0] = with_phase(
        world.instances[0].clone(),
        StaticInstancePhase::Pending,
        None,
    );
    world.instances[1] = with_phase(
        world.instances[1].clone(),
        StaticInstancePhase::Bootstrapping,
        Some("worker"),
    );
    c.handle_finished(
        "si-2",
        Operation::Bootstrap,
        Err(Failure::new(Cause::Unreachable, "no route")),
    );
    let plan = world.plan(&mut c, 4);
    assert!(
        matches!(&plan.commands[..], [StaticCommand::ReturnToPending { .. }]),
        "{plan:?}"
    );
    world.instances[1] = with_phase(
        world.instances[1].clone(),
        StaticInstancePhase::Pending,
        None,
    );
    for t in 5..13 {
        assert!(world.plan(&mut c, t).commands.is_empty(), "at {t}");
    }
    assert!(
        world
            .plan(&mut c, 12)
            .waiting
            .iter()
            .any(|w| w.contains("si-1 is taken again at"))
    );
    let plan = world.plan(&mut c, 13);
    assert!(
        matches!(&plan.commands[..], [StaticCommand::Bootstrap { instance, attempt: 2, .. }] if instance == "si-1"),
        "{plan:?}"
    );
}

#[test]
fn remote_errors_map_to_causes() {
    let t = || "u@h:22".to_owned();
    let cases = [
        (
            RemoteShellError::Refused { target: t() },
            Cause::Unreachable,
        ),
        (
            RemoteShellError::Unreachable {
                target: t(),
                message: "no route".into(),
                source: None,
            },
            Cause::Unreachable,
        ),
        (
            RemoteShellError::Timeout {
                target: t(),
                stage: "connect",
                after: Duration::from_secs(1),
                host_key: None,
            },
            Cause::Unreachable,
        ),
        (
            RemoteShellError::Timeout {
                target: t(),
                stage: "script",
                after: Duration::from_secs(1),
                host_key: Some("SHA256:k".into()),
            },
            Cause::Failed,
        ),
        (
            RemoteShellError::AuthFailed {
                target: t(),
                host_key: "SHA256:k".into(),
            },
            Cause::AuthFailed,
        ),
        (
            RemoteShellError::HostKeyMismatch {
                target: t(),
                pinned: "a".into(),
                presented: "b".into(),
            },
            Cause::HostKeyChanged,
        ),
        (
            RemoteShellError::SudoFailed {
                target: t(),
                message: "no".into(),
                host_key: "SHA256:k".into(),
            },
            Cause::SudoFailed,
        ),
        (
            RemoteShellError::Busy {
                target: t(),
                lock: "/var/lock/l".into(),
                waited: Duration::from_secs(1),
                host_key: "SHA256:k".into(),
            },
            Cause::HostBusy,
        ),
        (
            RemoteShellError::CommandFailed {
                target: t(),
                exit_status: 1,
                tail: String::new(),
                host_key: String::new(),
            },
            Cause::Failed,
        ),
    ];
    for (error, cause) in cases {
        let failure = Failure::of_remote(&error);
        assert_eq!(failure.cause, cause, "{error:?}");
        assert_eq!(
            failure.cause.before_start(),
            !error.script_may_have_run(),
            "{error:?}"
        );
    }
}
